"""The fused dense pyramids: ``zorch_gkr_pyramid_dense`` in ``kernels/cuda/gkr.cu``,
its Numba-CUDA twin, and the tiled CPU pyramid (``kernels/gkr_cpu.py``).

* Host: g++ compiles the tile functions of the fused kernel; a harness runs
  every tile of every launch of :func:`gkr_pyramid_plan` serially (the same
  functions and step order as one CUDA block) and every layer must equal the
  per-layer CPU pyramid byte for byte.  That checks the tile index math, the
  shared-memory double buffering layout and the mode switch after step 1.
* The plan: layer counts, tile sizes, launch counts, constants shared with
  gkr.cu.
* GPU: fused vs one launch per transition vs CPU, byte for byte, on aligned
  and offset (scalar-load) data, without synchronizing.
* CPU: the tiled pyramid vs one transition per call, byte for byte.
"""
import ctypes

import numpy as np
import pytest

from conftest import SIMULATED
from cuda_host import compile_host, ptr
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels.launch_config import (GKR_CPU_PYRAMID_LEVELS, GKR_CPU_TILE_SLOTS_BASE,
                                            GKR_CPU_TILE_SLOTS_EXT, GKR_MAX_FUSED,
                                            GKR_TILE_SLOTS_BASE, GKR_TILE_SLOTS_EXT,
                                            gkr_cpu_pyramid_plan, gkr_pyramid_plan)
from zorch_nb.logup_gkr import GkrLayer, build_pyramid

MODES = [(ne, de) for ne in (0, 1) for de in (0, 1)]
FIELD_OBJ = {"koalabear": KoalaBear, "babybear": BabyBear}

HARNESS = "".join(f"""
extern "C" void host_pyramid_{ne}{de}(const zorch_u32* n0, const zorch_u32* n1,
                                      const zorch_u32* d0, const zorch_u32* d1,
                                      const unsigned long long* ptrs, unsigned int t,
                                      unsigned int nlayers, long tiles, zorch_u32* scratch) {{
    zorch_gkr_layers outs;
    for (int l = 0; l < ZORCH_GKR_MAX_FUSED; ++l)
        for (int m = 0; m < 4; ++m) outs.p[l][m] = (zorch_u32*)ptrs[4 * l + m];
    for (long b = 0; b < tiles; ++b)
        zorch_gkr_tile_serial<{ne}, {de}>(b, t, nlayers, n0, n1, d0, d1, &outs, scratch);
}}
""" for ne, de in MODES) + """
extern "C" unsigned int host_tile_slots(int oe, int de) {
    if (!oe) return zorch_gkr_tile_shape<0, 0>::slots;
    return de ? zorch_gkr_tile_shape<1, 1>::slots : zorch_gkr_tile_shape<1, 0>::slots;
}
extern "C" int host_max_fused() { return ZORCH_GKR_MAX_FUSED; }
"""


def _mles(F, ne, de, length, seed):
    return [(F.ext if e else F).random(length, seed=seed + i)
            for i, e in enumerate((ne, ne, de, de))]


def _host_pyramid(lib, F, ne, de, first, nrv):
    """Run the plan's launches with the serial tile harness; return every layer."""
    oe = ne or de
    shape = lambda n, e: (n, 4) if e else (n,)  # noqa: E731
    length = first[0].shape[0]
    layers = []
    for _ in range(nrv):
        length //= 2
        layers.append([np.full(shape(length, e), 0xDEADBEEF, np.uint32)
                       for e in (oe, oe, de, de)])
    src, mode, start, half = first, (ne, de), 0, first[0].shape[0] // 2
    for t, k in gkr_pyramid_plan(half, nrv, not oe):
        ptrs = np.zeros(4 * GKR_MAX_FUSED, np.uint64)
        ptrs[:4 * k] = [a.ctypes.data for layer in layers[start:start + k] for a in layer]
        scratch = np.zeros(2 * t * 16, np.uint32)  # >= 1.5 t slots of 16 words
        getattr(lib, f"host_pyramid_{mode[0]}{mode[1]}")(
            *map(ptr, src), ptr(ptrs), ctypes.c_uint(t), ctypes.c_uint(k),
            ctypes.c_long(half // t), ptr(scratch))
        src, mode = layers[start + k - 1], (int(oe), de)
        start, half = start + k, half >> k
    return layers


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("field", sorted(FIELD_OBJ))
def test_fused_tiles_on_host_match_cpu_pyramid(field, ne, de):
    lib = compile_host(field, "gkr.cu", HARNESS)
    F = FIELD_OBJ[field]
    # 2**12 spans two launches in every mode (a full tile, then a small tail);
    # 2**13 with 3 batch variables stops before the floor of the tiles.
    for nv, nbv in [(12, 0), (13, 3), (3, 1), (1, 0)]:
        first = _mles(F, ne, de, 2**nv, seed=nv)
        want = build_pyramid(GkrLayer(*first, nbv, F), fused=False)[1:]
        got = _host_pyramid(lib, F, ne, de, first, nv - nbv)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for a, b in zip(g, w.mles):
                np.testing.assert_array_equal(a, b)


def test_tile_constants_reach_the_cuda_source():
    # (launch_config is their one home, the preamble carries them: this checks
    # the plumbing and the tile shape's choice between the two slot counts)
    lib = compile_host("koalabear", "gkr.cu", HARNESS)
    assert lib.host_max_fused() == GKR_MAX_FUSED
    assert lib.host_tile_slots(0, 0) == GKR_TILE_SLOTS_BASE
    assert lib.host_tile_slots(1, 0) == GKR_TILE_SLOTS_EXT
    assert lib.host_tile_slots(1, 1) == GKR_TILE_SLOTS_EXT


_PLANS = {"gpu": (gkr_pyramid_plan, GKR_TILE_SLOTS_BASE, GKR_TILE_SLOTS_EXT, GKR_MAX_FUSED),
          "cpu": (gkr_cpu_pyramid_plan, GKR_CPU_TILE_SLOTS_BASE, GKR_CPU_TILE_SLOTS_EXT,
                  GKR_CPU_PYRAMID_LEVELS)}


@pytest.mark.parametrize("device", sorted(_PLANS))
@pytest.mark.parametrize("base", [True, False])
@pytest.mark.parametrize("nv,nbv", [(26, 0), (26, 6), (10, 0), (1, 0), (20, 19)])
def test_plan_covers_every_layer_within_tiles(nv, nbv, base, device):
    plan_of, cap_base, cap_ext, most = _PLANS[device]
    plan = plan_of(2**(nv - 1), nv - nbv, base)
    assert sum(k for _, k in plan) == nv - nbv
    half = 2**(nv - 1)
    for t, k in plan:
        assert half % t == 0 and t & (t - 1) == 0 and t <= (cap_base if base else cap_ext)
        assert 1 <= k <= min(most, t.bit_length())
        half >>= k
    if (nv, nbv) == (26, 0) and device == "gpu":
        assert len(plan) == 3  # 2**26 leaves: 11 + 11 + 4 (base) or 9 + 9 + 8 layers
        assert plan[-1][0] * 2 <= 2 * GKR_TILE_SLOTS_BASE  # the tail is one block


@pytest.mark.parametrize("device", sorted(_PLANS))
@pytest.mark.parametrize("half,layers", [(4, 4), (1, 2), (0, 1), (2**20, 22)])
def test_plan_of_more_layers_than_halvings_is_refused(device, half, layers):
    """A plan deeper than its first layer's halvings raises (mutation
    testing: with a launcher's layer-count check weakened, the plan looped
    appending empty launches until the process was killed for memory)."""
    plan_of = _PLANS[device][0]
    with pytest.raises(ValueError, match=f"plan of {layers} layers needs"):
        plan_of(half, layers, True)
    assert sum(k for _, k in plan_of(half, layers - 1, False)) == layers - 1  # the deepest plan


def test_fused_true_needs_a_row_variable():
    layer = GkrLayer(*_mles(KoalaBear, 0, 0, 8, 1), 0)
    assert len(build_pyramid(layer, fused=True)) == len(build_pyramid(layer, fused=False)) == 4
    floor = GkrLayer(*_mles(KoalaBear, 0, 0, 8, 1), 3)
    with pytest.raises(ValueError, match="fused=True needs a layer with a row variable; this one is a floor"):
        build_pyramid(floor, fused=True)
    assert len(build_pyramid(floor)) == 1


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_cpu_fused_equals_per_layer(F, ne, de):
    """The tiled CPU pyramid against one transition per call (which the
    big-int reference checks in test_logup_gkr.py): several tiles per call,
    several calls, a floor inside a call's levels, offset and read-only input."""
    for nv, nbv in [(14, 0), (13, 3), (12, 11), (5, 0), (1, 0)]:
        host = _mles(F, ne, de, 2**nv, seed=nv + 3)
        if nv == 13:  # unaligned, read-only views
            host = [np.concatenate([x[:1], x])[1:] for x in host]
            for x in host:
                x.flags.writeable = False
        keep = [x.copy() for x in host]
        first = GkrLayer(*host, nbv, F)
        fused = build_pyramid(first, fused=True)
        per_layer = build_pyramid(first, fused=False)
        assert len(fused) == len(per_layer) == nv - nbv + 1
        for l, (a, b) in enumerate(zip(fused, per_layer)):
            for x, y in zip(a.mles, b.mles):
                assert x.shape == y.shape and x.dtype == y.dtype
                np.testing.assert_array_equal(x, y, err_msg=f"nv={nv} layer {l}")
        for x, y in zip(keep, host):
            np.testing.assert_array_equal(x, y)  # inputs untouched


def test_cpu_build_pyramid_runs_the_trusted_launcher(monkeypatch):
    """``build_pyramid`` checked its first layer when it was built and
    allocates the output layers itself, so on the CPU it runs the fused
    pyramid without the launcher's checks (36 of 70 us at 2**12 leaves):
    the checked launcher is never called, and the layers are its bytes."""
    from zorch_nb._backend import kernels_for
    gkr_cpu = kernels_for("cpu", "gkr")
    first = GkrLayer(*_mles(KoalaBear, 1, 1, 2**9, seed=2), 0, KoalaBear)
    want = build_pyramid(first, fused=True)
    checked = gkr_cpu.pyramid_dense

    def refuse(*args):
        raise AssertionError("the checked launcher ran")
    monkeypatch.setattr(gkr_cpu, "pyramid_dense", refuse)
    got = build_pyramid(first, fused=True)
    for a, b in zip(got, want):
        for x, y in zip(a.mles, b.mles):
            np.testing.assert_array_equal(x, y)
    # with out= (another pyramid's layers) the checked launcher runs, as before
    monkeypatch.setattr(gkr_cpu, "pyramid_dense", checked)
    assert build_pyramid(first, fused=True, out=want[1:])[-1] is want[-1]


def _numba_plan_cases(ext):
    # (nv, nbv): two launches (the first output layer is wider than one tile:
    # 1024 slots base/base, 256 otherwise), one launch over a few tiles, a
    # tiny pyramid, a floor-only layer.  Small enough for the simulator.
    return [(10, 0), (9, 7), (3, 0), (1, 1)] if ext else [(12, 0), (11, 9), (3, 0), (1, 1)]


@pytest.mark.cudasim
@pytest.mark.parametrize("ne,de", MODES)
def test_numba_fused_equals_per_layer_and_cpu(ne, de):
    """Numba-CUDA fused pyramid (simulator in CI, the GPU on the GPU machine)."""
    F = KoalaBear if (ne + de) % 2 == 0 else BabyBear
    for nv, nbv in _numba_plan_cases(bool(ne or de)):
        host = _mles(F, ne, de, 2**nv, seed=nv + 11)
        keep = [x.copy() for x in host]
        want = build_pyramid(GkrLayer(*host, nbv, F), fused=False)
        plan = gkr_pyramid_plan(2**(nv - 1), nv - nbv, not (ne or de)) if nv > nbv else []
        if (nv, nbv) in ((12, 0), (10, 0)):
            assert len(plan) == 2  # the multi-launch path is exercised
        fused = build_pyramid(GkrLayer(*host, nbv, F), backend="numba",
                              fused=True if nv > nbv else None)
        assert len(fused) == len(want) == nv - nbv + 1
        for a, b in zip(want, fused):
            for x, y in zip(a.mles, b.mles):
                assert type(y) is np.ndarray and y.dtype == np.uint32
                np.testing.assert_array_equal(x, y)
        for x, y in zip(keep, host):
            np.testing.assert_array_equal(x, y)  # inputs untouched


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset"])
@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_gpu_fused_equals_per_layer_and_cpu(F, ne, de, offset):
    import cupy
    import cupyx
    for nv, nbv in [(16, 0), (13, 3), (5, 5), (2, 0)]:
        host = _mles(F, ne, de, 2**nv, seed=nv + 7)
        want = build_pyramid(GkrLayer(*host, nbv, F), fused=False)
        dev = []
        for x in host:
            buf = cupy.empty(x.size + offset, dtype=np.uint32)
            view = buf[offset:].reshape(x.shape)
            view[...] = cupy.asarray(x)
            dev.append(view)
        first = GkrLayer(*dev, nbv, F)
        cupy.cuda.get_current_stream().synchronize()
        with cupyx.allow_synchronize(False):
            fused = build_pyramid(first, fused=True if nv > nbv else None)
            per_layer = build_pyramid(first, fused=False)
        assert len(fused) == len(per_layer) == len(want)
        for a, b, c in zip(want, fused, per_layer):
            for x, y, z in zip(a.mles, b.mles, c.mles):
                np.testing.assert_array_equal(x, y.get())
                np.testing.assert_array_equal(x, z.get())


@pytest.mark.gpu
@pytest.mark.parametrize("ne,de", MODES)
def test_gpu_numba_fused_on_cupy_arrays(ne, de):
    """backend="numba" on CuPy arrays: the fused Numba-CUDA pyramid, no copies to the host."""
    import cupy
    pytest.importorskip("numba.cuda")
    F = KoalaBear if ne == de else BabyBear
    cases = [(16, 0), (13, 3), (2, 0)]
    if SIMULATED:  # CI: the emulated CuPy with the simulator, two launches at most
        cases = _numba_plan_cases(bool(ne or de))[:1] + [(5, 3), (2, 0)]
    for nv, nbv in cases:
        host = _mles(F, ne, de, 2**nv, seed=nv + 5)
        want = build_pyramid(GkrLayer(*host, nbv, F), fused=False)
        first = GkrLayer(*(cupy.asarray(x) for x in host), nbv, F)
        fused = build_pyramid(first, backend="numba")
        per_layer = build_pyramid(first, backend="numba", fused=False)
        assert len(fused) == len(per_layer) == len(want)
        for a, b, c in zip(want, fused, per_layer):
            for x, y, z in zip(a.mles, b.mles, c.mles):
                assert isinstance(y, cupy.ndarray)
                np.testing.assert_array_equal(x, y.get())
                np.testing.assert_array_equal(x, z.get())


@pytest.mark.parametrize("ne,de", MODES)
def test_tile_buffers_fit_the_kernels_shared_array(ne, de):
    """The serial tile twin given the shared array of zorch_gkr_pyramid_dense
    (3 t / 2 slots: A holds t, B t / 2) followed by a canary: no step writes
    past the array, and every layer equals the big-int pyramid.  (Found by
    mutation testing: B laid out with t slots, its MLEs past the array,
    passed every other test -- the tile harness above gives 2 t slots of
    scratch, and the emulation cannot see an overrun of a __shared__ static.)"""
    import naive_gkr as ng
    F = KoalaBear if ne == de else BabyBear
    lib = compile_host(F.params.name, "gkr.cu", HARNESS)
    oe = ne or de
    words = 2 * (4 if oe else 1) + 2 * (4 if de else 1)  # a slot of mode <oe, de>
    nv = 12  # a full tile, then a smaller one, in every mode
    first = _mles(F, ne, de, 2**nv, seed=3)
    shape = lambda n, e: (n, 4) if e else (n,)  # noqa: E731
    layers, length = [], 2**nv
    for _ in range(nv):
        length //= 2
        layers.append([np.full(shape(length, e), 0xDEADBEEF, np.uint32)
                       for e in (oe, oe, de, de)])
    src, mode, start, half = first, (ne, de), 0, 2**(nv - 1)
    plan = gkr_pyramid_plan(half, nv, not oe)
    assert max(k for _, k in plan) >= 3  # step 1 keeps its slots: B is written
    for t, k in plan:
        ptrs = np.zeros(4 * GKR_MAX_FUSED, np.uint64)
        ptrs[:4 * k] = [a.ctypes.data for layer in layers[start:start + k] for a in layer]
        size = 3 * t * words // 2  # the kernel's __shared__ smem, for a tile of t slots
        scratch = np.full(2 * t * words, 0xC0FFEE, np.uint32)  # the rest: a canary
        getattr(lib, f"host_pyramid_{mode[0]}{mode[1]}")(
            *map(ptr, src), ptr(ptrs), ctypes.c_uint(t), ctypes.c_uint(k),
            ctypes.c_long(half // t), ptr(scratch))
        assert (scratch[size:] == 0xC0FFEE).all(), f"a tile of {t} slots wrote past 1.5 t slots"
        src, mode = layers[start + k - 1], (int(oe), de)
        start, half = start + k, half >> k
    ref = ng.layer_from_words(F.name, *first)
    for l, got in enumerate(layers):
        ref = ng.dense_transition(F.name, ref)
        for a, b in zip(got, ng.layer_words(F.name, ref)):
            np.testing.assert_array_equal(a, b, err_msg=f"layer {l + 1}")
