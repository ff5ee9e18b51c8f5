"""The CuPy path of the LogUp-GKR kernels, run on the host under a SIMT emulation.

``kernels/gkr_cupy.py`` -- the real launchers: grids, blocks, argument
tuples, struct images -- drives the real ``__global__`` kernels of
``kernels/cuda/gkr.cu`` compiled by g++ with every CUDA thread a host thread
(see ``cuda_emu.py``): block barriers, warp shuffles, shared memory and the
vector loads all execute.  Every result must equal the Numba CPU kernels
byte for byte.  Cases: the dense fold and the jagged transition in all four
modes with aligned (vector) and offset (scalar) data, the fused dense pyramid
over several launches, and the fused jagged pyramid (three-step chunks,
single wide steps, the one-block tail) from ``build_jagged_pyramid``'s own
orchestration, with host and device schedules.  Each case runs with the
emulated threads and blocks in forward, reverse and shuffled order.
"""
import numpy as np
import pytest

import cuda_emu
from gkr_cases import assert_layers_equal, random_jagged_layer
from zorch_nb import BabyBear, KoalaBear
from zorch_nb import logup_gkr
from zorch_nb.kernels import gkr_cpu, launch_config
from zorch_nb.kernels.gkr_scalar import cuda_kernel_name
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, _fused_jagged_steps,
                                _split, _trusted, build_jagged_pyramid,
                                build_pyramid, halving_schedule, jagged_layer_transition,
                                layer_transition)

MODES = [(ne, de) for ne in (0, 1) for de in (0, 1)]


@pytest.fixture(autouse=True, params=["forward", "reverse", "shuffle:7"])
def schedule(request, monkeypatch):
    """Every case under three thread and block orders (see ``cuda_emu``): a
    missing barrier or a cross-block read shows up as an order-dependent result."""
    monkeypatch.setenv("ZORCH_EMU_ORDER", request.param)
    return request.param


@pytest.fixture
def emu(monkeypatch):
    """``(gkr_cupy, launches)``: the real launcher module over the emulated kernels."""
    return cuda_emu.emulate(monkeypatch, "gkr")


def _device(x, offset=0):
    """``x`` as an emulated device array; ``offset`` words into its buffer (unaligned)."""
    buf = np.empty(x.size + offset, np.uint32)
    view = buf[offset:].reshape(x.shape)
    view[...] = x
    return cuda_emu.EmuArray(view)


def _mles(F, ne, de, n, seed):
    return [(F.ext if e else F).random(n, seed=seed + i) for i, e in enumerate((ne, ne, de, de))]


def _outs(ne, de, width):
    oe = ne or de
    return [cuda_emu.EmuXp.empty((width, 4) if e else (width,), np.uint32)
            for e in (oe, oe, de, de)]


def _cpu_outs(ne, de, width):
    oe = ne or de
    return [np.empty((width, 4) if e else (width,), np.uint32) for e in (oe, oe, de, de)]


def _allocator_offset(monkeypatch, offset):
    """Make the emulated ``cupy.cuda.alloc`` hand out memory ``offset`` bytes
    past its 256-byte alignment, as a user's allocator may (0: unchanged)."""
    import sys
    if offset:
        alloc = sys.modules["cupy"].cuda.alloc
        monkeypatch.setattr(sys.modules["cupy"].cuda, "alloc",
                            lambda size: alloc(size + offset) + offset)


# offset 2: 8-byte aligned, not 16: still the scalar variant (16-byte extension loads)
@pytest.mark.parametrize("offset", [0, 1, 2], ids=["vector", "scalar", "scalar8"])
@pytest.mark.parametrize("ne,de", MODES)
def test_dense_fold_and_jagged_transition(emu, ne, de, offset):
    gkr_cupy, launches = emu
    F = KoalaBear if ne == de else BabyBear
    host = _mles(F, ne, de, 600, seed=3)
    dev = [_device(x, offset) for x in host]
    want = _cpu_outs(ne, de, 300)
    gkr_cpu.fold_dense(*host, *want, F.params)
    got = _outs(ne, de, 300)
    gkr_cupy.fold_dense(*dev, *got, F.params)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.get(), b)
    rc = np.array([7, 0, 250, 1, 300, 42, 0, 0], np.int32)
    orc = ((rc + 1) // 2 + np.array([0, 1, 0, 2, 0, 0, 0, 3])).astype(np.int32)
    width = int(orc.sum()) + 5  # dead slots too
    for x in host:
        x[int(rc.sum()):] = 0
    dev = [_device(x, offset) for x in host]
    want = _cpu_outs(ne, de, width)
    prefix = np.empty((2, rc.size), np.int64)
    gkr_cpu.jagged_transition(rc, orc, prefix, *host, *want, F.params)
    got = _outs(ne, de, width)
    # int32 counts and a (2, nb) prefix, as the launchers check (_device packs uint32)
    gkr_cupy.jagged_transition(cuda_emu.EmuArray(rc.copy()), cuda_emu.EmuArray(orc.copy()),
                               cuda_emu.EmuXp.empty((2, rc.size), np.int64),
                               *dev, *got, F.params)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.get(), b)
    vec = "true" if offset == 0 else "false"
    assert launches == [f"zorch_gkr_fold_dense<{ne}, {de}, {vec}>", "zorch_gkr_jagged_scan",
                        f"zorch_gkr_jagged<{ne}, {de}, {vec}>"]


@pytest.mark.parametrize("ne,de", MODES)
def test_fused_dense_pyramid(emu, ne, de):
    """Two launches (a full tile, then the rest) of zorch_gkr_pyramid_dense."""
    gkr_cupy, launches = emu
    F = KoalaBear if ne == de else BabyBear
    nv = 11 if (ne or de) else 12  # first output layer wider than one tile
    host = _mles(F, ne, de, 2**nv, seed=5)
    want = build_pyramid(GkrLayer(*host, 0, F), backend="cpu", fused=False)
    oe = ne or de
    exts = (oe, oe, de, de)
    outs, length = [], 2**nv
    for _ in range(nv):
        length //= 2
        sizes = [length * (4 if e else 1) for e in exts]
        outs.append(_split(cuda_emu.EmuXp.empty(sum(sizes), np.uint32), sizes, exts))
    gkr_cupy.pyramid_dense([_device(x) for x in host], outs, F.params)
    plan = launch_config.gkr_pyramid_plan(2**(nv - 1), nv, not oe)
    assert len(launches) == len(plan) >= 2
    assert_layers_equal(outs, want[1:], first=1)


@pytest.mark.parametrize("device_schedule", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("ne,de", MODES)
def test_fused_jagged_pyramid(emu, monkeypatch, ne, de, device_schedule):
    """build_jagged_pyramid's fused orchestration with the CuPy launchers: chunks,
    a single wide step, the tail (the tail threshold lowered to keep it small)."""
    gkr_cupy, launches = emu
    monkeypatch.setattr(launch_config, "GKR_JAGGED_TAIL_SLOTS", 24)
    F = KoalaBear if ne == de else BabyBear
    rng = np.random.default_rng(17 + 2 * ne + de)
    nb = 8
    rc = rng.integers(0, 90, nb).astype(np.int32)
    rc[2], rc[5] = 0, 1
    steps, cur = [], rc.astype(np.int64)
    for i in range(9):  # halving, with padded counts at two steps and slack at odd ones
        cur = np.maximum((cur + 1) // 2 + (1 if i in (1, 4) else 0), 1)
        steps.append((cur.astype(np.int32), int(cur.sum()) + (i % 2)))
    host = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 3, seed=9)
    want = build_jagged_pyramid(host, steps, backend="cpu")
    dev_rc = cuda_emu.EmuArray(rc.copy()) if device_schedule else rc
    first = _trusted(JaggedGkrLayer, *[_device(x) for x in host.mles], dev_rc, F)
    dsteps = [(cuda_emu.EmuArray(c.astype(np.int32)) if device_schedule else c, w)
              for c, w in steps]
    got = _fused_jagged_steps(first, dsteps, cuda_emu.EmuXp, gkr_cupy)
    chunked, tail = launch_config.gkr_jagged_plan([w for _, w in steps])
    assert chunked >= 3 and tail > chunked and tail < len(steps)  # all three kinds ran
    assert sum(n.startswith("zorch_gkr_jagged_chunk<") for n in launches) == chunked // 3
    assert launches.count("zorch_gkr_jagged_chunk_scan") == chunked // 3
    assert sum(n.startswith("zorch_gkr_jagged<") for n in launches) == tail - chunked
    assert sum(n.startswith("zorch_gkr_jagged_tail<") for n in launches) == 1
    assert_layers_equal(got, want[1:], first=1)


@pytest.mark.parametrize("device_schedule", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("ne,de", [(0, 1), (1, 1)])
def test_fused_jagged_pyramid_many_segments(emu, monkeypatch, ne, de, device_schedule):
    """More segments than the 1024 scan threads: every warp of the block scans
    holds counts, so the warp totals travel through shared memory."""
    gkr_cupy, launches = emu
    monkeypatch.setattr(launch_config, "GKR_JAGGED_TAIL_SLOTS", 2048)
    F = BabyBear
    rng = np.random.default_rng(23 + ne)
    nb = 2048
    rc = rng.integers(0, 9, nb).astype(np.int32)
    rc[::7] = 0
    host = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 5, seed=4)
    steps = [(s.row_counts, s.width) for s in halving_schedule(host)]
    want = build_jagged_pyramid(host, steps, backend="cpu")
    dev_rc = cuda_emu.EmuArray(rc.copy()) if device_schedule else rc
    first = _trusted(JaggedGkrLayer, *[_device(x) for x in host.mles], dev_rc, F)
    dsteps = [(cuda_emu.EmuArray(np.asarray(c, np.int32)) if device_schedule else c, w)
              for c, w in steps]
    got = _fused_jagged_steps(first, dsteps, cuda_emu.EmuXp, gkr_cupy)
    assert any(n.startswith("zorch_gkr_jagged_tail<") for n in launches)
    assert "zorch_gkr_jagged_scan" in launches or "zorch_gkr_jagged_chunk_scan" in launches
    assert_layers_equal(got, want[1:], first=1)


@pytest.mark.parametrize("ne,de", MODES)
def test_object_layer_on_emulated_cupy_arrays(emu, monkeypatch, ne, de):
    """The public API with (emulated) CuPy arrays: dispatch, fused and per-layer paths."""
    _, launches = emu
    monkeypatch.setattr(launch_config, "GKR_JAGGED_TAIL_SLOTS", 24)
    F = KoalaBear if ne == de else BabyBear
    host = _mles(F, ne, de, 2**9, seed=13)
    dev = GkrLayer(*[_device(x) for x in host], 2, F)
    want = build_pyramid(GkrLayer(*host, 2, F), fused=False)
    for fused in (None, False):
        got = build_pyramid(dev, fused=fused)
        assert len(got) == len(want)
        for l, (g, w) in enumerate(zip(got, want)):
            for a, b in zip(g.mles, w.mles):
                assert isinstance(a, cuda_emu.EmuArray)
                np.testing.assert_array_equal(a.get(), b, err_msg=f"fused={fused} layer {l}")
    assert any(n.startswith("zorch_gkr_pyramid_dense<") for n in launches)
    assert any(n.startswith("zorch_gkr_fold_dense<") for n in launches)
    rc = np.array([90, 0, 33, 1, 64, 7, 70, 2], np.int32)
    jhost = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 4, seed=6)
    steps = [(s.row_counts, s.width) for s in halving_schedule(jhost)]
    jwant = build_jagged_pyramid(jhost, steps)
    jdev = JaggedGkrLayer(*[_device(x) for x in jhost.mles], rc, F)
    for fused in (None, False):
        assert_layers_equal(build_jagged_pyramid(jdev, steps, fused=fused), jwant,
                            f"fused={fused}")


@pytest.mark.parametrize("nbv", [0, 2])
@pytest.mark.parametrize("offset,fresh", [(0, 0), (1, 0), (0, 4)],
                         ids=["aligned", "input-offset", "allocator-offset"])
@pytest.mark.parametrize("ne,de", MODES)
def test_fresh_transition_reads_what_the_layer_knows(emu, monkeypatch, ne, de, offset, fresh,
                                                    nbv):
    """``layer_transition`` of a plain CuPy layer into fresh outputs runs
    ``_fresh_transition``, not the general ``_run``: the CPU kernels' bytes
    step after step; the vector kernel exactly where all eight arrays start
    on 16 bytes (one input an odd word in: the scalar kernel, then vector
    again on the aligned results; a user's allocator handing out memory 4
    bytes off 16: scalar throughout); outputs back to back in one buffer,
    each from a multiple of 16 bytes; and each result remembers what
    ``_trusted`` reads off its arrays."""
    _, launches = emu
    _allocator_offset(monkeypatch, fresh)
    F = KoalaBear if ne == de else BabyBear
    host = GkrLayer(*_mles(F, ne, de, 2**5, seed=31), nbv, F)
    want = [host]
    for _ in range(3):
        want.append(layer_transition(want[-1]))
    layer = GkrLayer(*[_device(x, offset if i == 2 else 0) for i, x in enumerate(host.mles)],
                     nbv, F)

    def general_path(*args, **kwargs):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(logup_gkr, "_run", general_path)
    oe = ne or de
    for step, ref in enumerate(want[1:]):  # (each input compared after its transition too)
        launches.clear()
        source = layer
        layer = layer_transition(source)
        mode = 2 * ne + de if step == 0 else 2 * oe + de
        vec = not fresh and (offset == 0 or step > 0)
        assert launches == [cuda_kernel_name("zorch_gkr_fold_dense", mode, vec)]
        assert_layers_equal([source, layer], want[step:step + 2], f"step {step}")
        ptrs = [x.data.ptr for x in layer.mles]
        bytes_ = [x.nbytes for x in ref.mles]  # back to back, each from a multiple of 16
        assert [p - ptrs[0] for p in ptrs] == \
            [sum(-(-b // 16) * 16 for b in bytes_[:i]) for i in range(4)]
        known = _trusted(GkrLayer, *layer.mles, nbv, F).__dict__
        for key in ("_shapes", "_plain_cupy", "_device", "num_batch_variables", "field"):
            assert layer.__dict__[key] == known[key], key
        assert layer.__dict__["_aligned"] == all(p % 16 == 0 for p in ptrs)


@pytest.mark.parametrize("fresh", [0, 4], ids=["aligned", "allocator-offset"])
@pytest.mark.parametrize("ne,de", MODES)
def test_fused_cupy_pyramid_layers_remember_their_arrays(emu, monkeypatch, ne, de, fresh):
    """The fused CuPy pyramid builds its layers from their buffers' plans:
    each remembers what ``_trusted`` reads off its arrays, and whether they
    start on 16 bytes (not with an allocator 4 bytes off), so a transition
    of it launches the right kernel."""
    _, launches = emu
    _allocator_offset(monkeypatch, fresh)
    F = KoalaBear if ne == de else BabyBear
    host = _mles(F, ne, de, 2**7, seed=41)
    layers = build_pyramid(GkrLayer(*[_device(x) for x in host], 1, F))
    assert_layers_equal(layers, build_pyramid(GkrLayer(*host, 1, F)), "pyramid")
    for l, layer in enumerate(layers[1:], start=1):
        known = _trusted(GkrLayer, *layer.mles, 1, F).__dict__
        for key in ("_shapes", "_plain_cupy", "_device", "num_batch_variables", "field"):
            assert layer.__dict__[key] == known[key], (l, key)
        assert layer.__dict__["_aligned"] == (not fresh), l
    launches.clear()
    layer_transition(layers[2])
    assert launches == [cuda_kernel_name("zorch_gkr_fold_dense", 2 * (ne or de) + de, not fresh)]


@pytest.mark.parametrize("ne,de", MODES)
def test_object_layer_out_on_emulated_cupy_arrays(emu, ne, de):
    """``out=`` with (emulated) CuPy arrays: the fused pyramid through the
    checked launcher, one launch per transition, ``layer_transition``; host
    layers as ``out`` of a device layer are refused, and ``backend="cupy"``
    on host data writes its host ``out`` (tests/test_gkr_out.py: the rest)."""
    _, launches = emu
    F = KoalaBear if ne == de else BabyBear
    host = _mles(F, ne, de, 2**9, seed=21)
    want = build_pyramid(GkrLayer(*host, 2, F), fused=False)
    dev = GkrLayer(*[_device(x) for x in host], 2, F)

    def stale(device):
        wrap = _device if device else np.asarray
        return [GkrLayer(*(wrap(np.full(x.shape, 0xFFFFFFFF, np.uint32)) for x in la.mles),
                         2, F) for la in want[1:]]

    def same(got, label, ref=want):
        assert len(got) == len(ref)
        for l, (g, w) in enumerate(zip(got, ref)):
            for a, b in zip(g.mles, w.mles):
                np.testing.assert_array_equal(a if isinstance(a, np.ndarray) else a.get(), b,
                                              err_msg=f"{label} layer {l}")

    for fused in (None, False):
        launches.clear()
        out = stale(True)
        got = build_pyramid(dev, fused=fused, out=out)
        assert got[0] is dev and all(g is o for g, o in zip(got[1:], out))
        same(got, f"fused={fused}")
        kernel = "zorch_gkr_pyramid_dense<" if fused is None else "zorch_gkr_fold_dense<"
        assert launches and all(n.startswith(kernel) for n in launches)
    into = stale(True)[0]
    assert layer_transition(dev, out=into) is into
    same([dev, into], "layer_transition", want[:2])
    with pytest.raises(TypeError, match=r"`out\[0\]` holds NumPy arrays; the result lives "
                       r"with the layer's CUDA \(CuPy\) arrays"):
        build_pyramid(dev, out=stale(False))
    out = stale(False)
    got = build_pyramid(GkrLayer(*host, 2, F), backend="cupy", out=out)
    assert all(g is o and type(g.numerator_0) is np.ndarray for g, o in zip(got[1:], out))
    same(got, "host data on backend='cupy'")


@pytest.mark.parametrize("device_schedule", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("ne,de", MODES)
def test_jagged_out_on_emulated_cupy_arrays(emu, monkeypatch, ne, de, device_schedule):
    """``out=`` of ``build_jagged_pyramid`` with (emulated) CuPy arrays: the
    fused chunks, single steps and the one-block tail write into ``out``
    (host and device schedules); ``out`` takes the results' row counts."""
    _, launches = emu
    monkeypatch.setattr(launch_config, "GKR_JAGGED_TAIL_SLOTS", 24)
    F = KoalaBear if ne == de else BabyBear
    rc = np.array([90, 0, 33, 1, 64, 7, 70, 2], np.int32)
    jhost = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 4, seed=16)
    steps = [(s.row_counts, s.width) for s in halving_schedule(jhost)]
    want = build_jagged_pyramid(jhost, steps)
    if device_schedule:
        steps = [(cuda_emu.EmuArray(c.copy()), w) for c, w in steps]
    jdev = JaggedGkrLayer(*[_device(x) for x in jhost.mles], rc, F)
    for fused in (None, False):
        launches.clear()
        out = [JaggedGkrLayer(*(_device(np.full(x.shape, 0xFFFFFFFF, np.uint32))
                                for x in la.mles), np.zeros(8, np.int32), F)
               for la in want[1:]]
        got = build_jagged_pyramid(jdev, steps, fused=fused, out=out)
        assert got[0] is jdev and all(g is o for g, o in zip(got[1:], out))
        for l, (g, w) in enumerate(zip(got, want)):
            counts = g.row_counts if isinstance(g.row_counts, np.ndarray) else g.row_counts.get()
            np.testing.assert_array_equal(counts, w.row_counts, err_msg=f"layer {l}")
            for a, b in zip(g.mles, w.mles):
                np.testing.assert_array_equal(a.get(), b, err_msg=f"fused={fused} layer {l}")
        if fused is None:
            assert any(n.startswith("zorch_gkr_jagged_chunk<") for n in launches)
            assert any(n.startswith("zorch_gkr_jagged_tail<") for n in launches)


def test_jagged_out_over_device_counts_is_refused(emu):
    """Device row counts are the caller's arrays: an ``out`` whose memory holds
    them (here in its dead slots) is refused, naming both, before a launch."""
    _, launches = emu
    F = KoalaBear
    rc = np.array([9, 0, 17, 1, 32, 5, 2, 3], np.int32)
    jhost = random_jagged_layer(F, 0, 0, rc, int(rc.sum()) + 3, seed=5)
    steps = [(s.row_counts, s.width + 8) for s in halving_schedule(jhost)]
    width = steps[0][1]
    jdev = JaggedGkrLayer(*[_device(x) for x in jhost.mles], rc, F)

    def stale(step_list):  # stale out layers, and their numerator_0 words
        words = [[np.full(w, 0xFFFFFFFF, np.uint32) for _ in range(4)] for _, w in step_list]
        return [JaggedGkrLayer(*(cuda_emu.EmuArray(x) for x in ws), np.zeros(8, np.int32), F)
                for ws in words], [ws[0] for ws in words]

    (one,), (held,) = stale(steps[:1])  # step 0's counts in one's last (dead) slots
    held[-8:] = steps[0][0].view(np.uint32)
    counts = cuda_emu.EmuArray(held[-8:].view(np.int32))
    with pytest.raises(ValueError, match=r"argument `out\.numerator_0` overlaps argument "
                                         r"`out_row_counts`"):
        jagged_layer_transition(jdev, counts, width, out=one)
    out, held = stale(steps)  # step 1's counts in out[0]'s last slots
    held[0][-8:] = steps[1][0].view(np.uint32)
    dsteps = [(cuda_emu.EmuArray(c.copy()), w) for c, w in steps]
    dsteps[1] = (cuda_emu.EmuArray(held[0][-8:].view(np.int32)), steps[1][1])
    for fused in (None, False):
        with pytest.raises(ValueError, match=r"argument `out\[0\]\.numerator_0` overlaps "
                                             r"argument `schedules\[1\]`"):
            build_jagged_pyramid(jdev, dsteps, fused=fused, out=out)
    assert not launches


def _offset_outs(ne, de, width, offset):
    """Fresh device outputs of ``width`` slots, each ``offset`` words into a
    buffer of its own (an offset view, as a caller's buffer may give)."""
    oe = ne or de
    return [cuda_emu.EmuXp.empty(width * (4 if e else 1) + offset, np.uint32)[offset:]
            .reshape((width, 4) if e else (width,)) for e in (oe, oe, de, de)]


def _cpu_chain(F, ne, de, rc, host, steps):
    """The output layers of ``steps`` (``(orc, width)``) by gkr_cpu's jagged
    transition, one step at a time: the reference of the fused launchers."""
    layers = []
    for orc, width in steps:
        out = _cpu_outs(ne, de, width)
        gkr_cpu.jagged_transition(rc, orc, np.empty((2, rc.size), np.int64), *host, *out,
                                  F.params)
        layers.append(out)
        rc, host = orc, out
    return layers


@pytest.mark.parametrize("ne,de", [(0, 0), (1, 1)])
def test_fused_dense_pyramid_into_offset_outputs(emu, ne, de):
    """Aligned inputs, output layers a word into their buffers: the launch
    takes the 4-byte variant (the 16-byte stores need every output address
    aligned, not only the inputs) and writes what the CPU does."""
    gkr_cupy, launches = emu
    F = KoalaBear
    nv = 6  # one launch of six layers
    host = _mles(F, ne, de, 2**nv, seed=11)
    want = build_pyramid(GkrLayer(*host, 0, F), backend="cpu", fused=False)
    outs = [_offset_outs(ne, de, 2**nv >> (l + 1), 1) for l in range(nv)]
    gkr_cupy.pyramid_dense([_device(x) for x in host], outs, F.params)
    assert launches == [f"zorch_gkr_pyramid_dense<{ne}, {de}, false>"]
    assert_layers_equal(outs, want[1:], first=1)


@pytest.mark.parametrize("ne,de", [(0, 0), (1, 1)])
@pytest.mark.parametrize("kernel", ["jagged_chunk", "jagged_tail"])
def test_fused_jagged_launchers_into_offset_outputs(emu, kernel, ne, de):
    """jagged_chunk and jagged_tail called directly, aligned inputs and the
    output layers a word into their buffers: the 4-byte variant runs (every
    output's address decides, not only the inputs'), and the layers equal
    gkr_cpu's transitions step by step."""
    gkr_cupy, launches = emu
    F = KoalaBear
    rc = np.array([9, 0, 17, 1, 32, 5, 2, 3], np.int32)
    host = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 3, seed=7).mles
    steps = [(s.row_counts, s.width + 2) for s in halving_schedule(
        JaggedGkrLayer(*host, rc, F))][:launch_config.GKR_JAGGED_CHUNK]
    want = _cpu_chain(F, ne, de, rc, host, steps)
    dsteps = [(cuda_emu.EmuArray(np.array(c, np.int32)), _offset_outs(ne, de, w, 1))
              for c, w in steps]
    prefix = cuda_emu.EmuXp.empty((launch_config.GKR_JAGGED_CHUNK + 1) * rc.size, np.int64)
    getattr(gkr_cupy, kernel)(cuda_emu.EmuArray(rc.copy()), prefix,
                              [_device(x) for x in host], dsteps, F.params)
    assert f"zorch_gkr_{kernel}<{ne}, {de}, false>" in launches
    assert not any(n.endswith("true>") for n in launches)
    assert_layers_equal([outs for _, outs in dsteps], want, first=1)


@pytest.mark.parametrize("ne,de", [(0, 1), (1, 1)])
def test_jagged_tail_longer_than_one_launch(emu, ne, de):
    """More steps than GKR_MAX_TAIL: the second launch reads the last layer
    of the first, with that layer's counts (here no longer the input's: the
    segments reach their floor after a few steps, then fold on)."""
    gkr_cupy, launches = emu
    F = BabyBear
    rc = np.array([5, 0, 3, 1, 8, 2, 0, 1], np.int32)
    host = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 1, seed=13).mles
    steps, cur = [], rc
    for _ in range(launch_config.GKR_MAX_TAIL + 3):
        cur = ((cur + 1) // 2).astype(np.int32)
        steps.append((cur, int(cur.sum()) + 1))
    assert not np.array_equal(steps[launch_config.GKR_MAX_TAIL - 1][0], rc)
    want = _cpu_chain(F, ne, de, rc, host, steps)
    dsteps = [(cuda_emu.EmuArray(c.copy()), _outs(ne, de, w)) for c, w in steps]
    gkr_cupy.jagged_tail(cuda_emu.EmuArray(rc.copy()), cuda_emu.EmuXp.empty(2 * rc.size, np.int64),
                         [_device(x) for x in host], dsteps, F.params)
    assert launches == [f"zorch_gkr_jagged_tail<{ne}, {de}, true>",
                        f"zorch_gkr_jagged_tail<{ne or de}, {de}, true>"]
    assert_layers_equal([outs for _, outs in dsteps], want, first=1)
