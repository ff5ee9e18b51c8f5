"""The fused jagged tail (``zorch_gkr_jagged_tail`` in ``kernels/cuda/gkr.cu``).

* Host: g++ compiles the tail's step functions; a harness runs the serial
  twin of the one-block kernel (the same scans, split into the same runs as
  the block's threads, and the same per-layer slot loop) over every launch
  the CuPy launcher would make, and every layer must equal the CPU
  ``build_jagged_pyramid`` byte for byte: all four modes, both fields,
  empty segments, saturated segments, slack widths and padded counts,
  ``nb = 1`` and schedules longer than one launch.
* The plan: which steps the tail takes, constants shared with gkr.cu.
* GPU: the fused pyramid (three-step chunks of wide steps, see
  test_gkr_jagged_chunk.py, then the tail) vs two launches per transition vs
  CPU, host and device schedules (the device one without synchronizing).
"""
import ctypes
import os

import numpy as np
import pytest

from cuda_host import compile_host, ptr
from gkr_cases import assert_layers_equal, random_jagged_layer
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels import launch_config
from zorch_nb.kernels.launch_config import (GKR_JAGGED_TAIL_SLOTS, GKR_MAX_TAIL,
                                            GKR_TAIL_THREADS, gkr_jagged_launches,
                                            gkr_jagged_plan, gkr_jagged_tail_start)
from zorch_nb.logup_gkr import (JaggedGkrLayer, JaggedStep, build_jagged_pyramid,
                                halving_schedule)

MODES = [(ne, de) for ne in (0, 1) for de in (0, 1)]
FIELD_OBJ = {"koalabear": KoalaBear, "babybear": BabyBear}

HARNESS = "".join(f"""
extern "C" void host_tail_{ne}{de}(const int* rc, long long* prefix, unsigned int nb,
                                   const zorch_u32* n0, const zorch_u32* n1,
                                   const zorch_u32* d0, const zorch_u32* d1,
                                   unsigned long long in_width,
                                   const unsigned long long* desc, unsigned int nlayers,
                                   unsigned int nthreads) {{
    zorch_gkr_tail tail;
    for (int l = 0; l < ZORCH_GKR_MAX_TAIL; ++l) {{
        const unsigned long long* w = desc + 6 * l;
        tail.l[l].orc = (const int*)w[0];
        for (int m = 0; m < 4; ++m) tail.l[l].p[m] = (zorch_u32*)w[1 + m];
        tail.l[l].width = w[5];
    }}
    zorch_gkr_tail_serial<{ne}, {de}>(rc, prefix, nb, in_width, n0, n1, d0, d1, &tail, nlayers,
                                      nthreads);
}}
""" for ne, de in MODES) + """
extern "C" unsigned int host_max_tail() { return ZORCH_GKR_MAX_TAIL; }
extern "C" unsigned int host_tail_threads() { return ZORCH_GKR_TAIL_THREADS; }
extern "C" unsigned int host_tail_desc_words() { return sizeof(zorch_gkr_tail) / 8; }
"""


_layer = random_jagged_layer


def _host_tail(lib, layer, steps, nthreads):
    """Every layer of ``steps`` from ``layer`` by the serial twin, chunked like the launcher."""
    ne, de = int(layer.numerator_0.ndim == 2), int(layer.denominator_0.ndim == 2)
    nb = layer.num_batches
    rc = np.ascontiguousarray(layer.row_counts, np.int32)
    src = [np.ascontiguousarray(x) for x in layer.mles]
    outs, keep = [], []
    mode = (ne, de)
    for start in range(0, len(steps), GKR_MAX_TAIL):
        chunk = steps[start:start + GKR_MAX_TAIL]
        oe = int(mode[0] or mode[1])
        desc = np.zeros((GKR_MAX_TAIL, 6), np.uint64)
        layers = []
        for l, (orc, width) in enumerate(chunk):
            orc = np.ascontiguousarray(orc, np.int32)
            mles = [np.full((width, 4) if e else (width,), 0xDEADBEEF, np.uint32)
                    for e in (oe, oe, de, de)]
            keep.append(orc)
            layers.append((orc, mles))
            desc[l] = [orc.ctypes.data] + [a.ctypes.data for a in mles] + [width]
        prefix = np.full(2 * nb, -1, np.int64)
        getattr(lib, f"host_tail_{mode[0]}{mode[1]}")(
            ptr(rc), ptr(prefix), ctypes.c_uint(nb), *map(ptr, src),
            ctypes.c_ulonglong(src[0].shape[0]), ptr(desc),
            ctypes.c_uint(len(chunk)), ctypes.c_uint(nthreads))
        outs += [m for _, m in layers]
        rc, src, mode = layers[-1][0], layers[-1][1], (oe, de)
    return outs


def _schedules(nb, rng):
    """(name, first counts, first width, steps) cases."""
    cases = []
    rc = rng.integers(0, 40, nb).astype(np.int32)
    rc[:: max(1, nb // 4)] = 0                      # empty segments
    rc[1 % nb] = 1                                  # a saturated segment
    zeros = np.zeros(int(rc.sum()), np.uint32)
    halving = [(s.row_counts, s.width)
               for s in halving_schedule(JaggedGkrLayer(zeros, zeros, zeros, zeros, rc))]
    cases.append(("halving", rc, int(rc.sum()) + 5, halving))   # input with slack
    # padded counts and slack widths at every step, then saturated folds
    steps, cur = [], rc.astype(np.int64)
    for extra in (3, 0, 2, 1, 0, 0, 0):
        cur = (cur + 1) // 2 + rng.integers(0, 2, nb) * (extra > 0)
        steps.append((cur.astype(np.int32), int(cur.sum()) + extra))
    steps += [(np.ones(nb, np.int32), nb)] * 3
    cases.append(("padded+slack", rc, int(rc.sum()), steps))
    # longer than one launch: saturated segments folding on (all counts 1)
    ones = np.ones(nb, np.int32)
    cases.append(("long", ones, nb + 2, [(ones, nb)] * (GKR_MAX_TAIL + 3)))
    return cases


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("field", sorted(FIELD_OBJ))
def test_tail_on_host_matches_cpu_pyramid(field, ne, de):
    lib = compile_host(field, "gkr.cu", HARNESS)
    F = FIELD_OBJ[field]
    rng = np.random.default_rng(7 + 2 * ne + de)
    for nb in (1, 2, 8, 64):
        for name, rc, width, steps in _schedules(nb, rng):
            first = _layer(F, ne, de, rc, width, seed=nb + len(steps))
            want = build_jagged_pyramid(first, steps, backend="cpu")[1:]
            # the block's thread count, and uneven run splits (nthreads vs nb)
            for nthreads in (GKR_TAIL_THREADS, 32, 3):
                assert_layers_equal(_host_tail(lib, first, steps, nthreads), want,
                                    f"{name} nb={nb}")


def test_tail_constants_reach_the_cuda_source():
    lib = compile_host("koalabear", "gkr.cu", HARNESS)
    assert lib.host_max_tail() == GKR_MAX_TAIL
    assert lib.host_tail_threads() == GKR_TAIL_THREADS
    assert lib.host_tail_desc_words() == 6 * GKR_MAX_TAIL  # the launcher's _TAIL image
    assert GKR_TAIL_THREADS % 32 == 0 and GKR_TAIL_THREADS <= 1024


def test_tail_start_is_the_longest_small_suffix():
    t = GKR_JAGGED_TAIL_SLOTS
    assert gkr_jagged_tail_start([]) == 0
    assert gkr_jagged_tail_start([4 * t, 2 * t, t, t // 2]) == 2
    assert gkr_jagged_tail_start([t, 2 * t, t]) == 2      # a wide step breaks the suffix
    assert gkr_jagged_tail_start([8, 4, 2 * t]) == 3      # nothing to fuse
    assert gkr_jagged_tail_start([8, 4, 1]) == 0


def _launches_2_26():
    """Launches of the 2^26-leaf, 1024-segment halving pyramid: (per-layer, fused)."""
    from zorch_nb._bench_gkr import jagged_counts
    counts = jagged_counts(2**26).astype(np.int64)
    widths = []
    while counts.max() > 1 or counts.min() == 0:
        counts = np.maximum((counts + 1) // 2, 1)
        widths.append(int(counts.sum()))
    return 2 * len(widths), gkr_jagged_launches(widths), widths


def test_launch_count_of_the_bench_pyramid():
    per_layer, fused, widths = _launches_2_26()
    chunked, start = gkr_jagged_plan(widths)
    assert len(widths) - start >= 2  # at least the last two layers join the tail
    assert chunked >= 9  # the widest layers run three per launch
    assert fused == 2 * chunked // 3 + 2 * (start - chunked) + 1
    assert fused <= per_layer // 2


def test_fused_true_needs_a_gpu_backend():
    first = _layer(KoalaBear, 0, 0, [3, 0], 4, seed=1)
    steps = halving_schedule(first)
    with pytest.raises(ValueError, match="fused=True needs a GPU backend"):
        build_jagged_pyramid(first, steps, fused=True)
    a = build_jagged_pyramid(first, steps)
    b = build_jagged_pyramid(first, steps, fused=False)
    for x, y in zip(a, b):
        for u, v in zip(x.mles, y.mles):
            np.testing.assert_array_equal(u, v)


_EMULATED = os.environ.get("ZORCH_EMULATE_CUPY") == "1"


@pytest.fixture
def tail_slots(monkeypatch):
    """The tail threshold the wide cases below are sized by: the real one on a
    GPU; an eighth of it under the host emulation (a fiber per CUDA thread:
    at the real size these 16 tests took ~5 of the emulated stage's ~7
    minutes in CI), which keeps every kind of launch in the plan."""
    if _EMULATED:
        monkeypatch.setattr(launch_config, "GKR_JAGGED_TAIL_SLOTS", GKR_JAGGED_TAIL_SLOTS // 8)
    return launch_config.GKR_JAGGED_TAIL_SLOTS


@pytest.mark.gpu
@pytest.mark.parametrize("device_schedule", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_gpu_fused_pyramid_equals_per_layer_and_cpu(F, ne, de, device_schedule, tail_slots):
    import cupy
    import cupyx
    rng = np.random.default_rng(11)
    cases = _schedules(64, rng) + _schedules(1, rng)
    # a pyramid whose first steps are wider than the tail threshold
    big = rng.integers(0, 3 * tail_slots // 16, 16).astype(np.int32)
    probe = JaggedGkrLayer(*[np.zeros(int(big.sum()), np.uint32)] * 4, big)
    cases.append(("wide head", big, int(big.sum()),
                  [(s.row_counts, s.width) for s in halving_schedule(probe)]))
    # many wide steps: three-step chunks, then single steps, then the tail
    wide = rng.integers(0, 40 * tail_slots // 64, 64).astype(np.int32)
    wide[5] = 0
    probe = JaggedGkrLayer(*[np.zeros(int(wide.sum()), np.uint32)] * 4, wide)
    cases.append(("wide chunks", wide, int(wide.sum()) + 9,
                  [(s.row_counts, s.width + 3) for s in halving_schedule(probe)]))
    # (at either threshold: one chunk of three, a single step, then the tail)
    assert launch_config.gkr_jagged_plan([w for _, w in cases[-1][3]]) == (3, 4)
    for name, rc, width, steps in cases:
        host = _layer(F, ne, de, rc, width, seed=3)
        want = build_jagged_pyramid(host, steps, backend="cpu")
        first = JaggedGkrLayer(*[cupy.asarray(x) for x in host.mles],
                               cupy.asarray(rc) if device_schedule else rc, F)
        dsteps = [JaggedStep(cupy.asarray(c) if device_schedule else c, w) for c, w in steps]
        cupy.cuda.get_current_stream().synchronize()
        # Two launches a step per layer, one of them the one-block scan, the
        # emulation's slowest kernel: there, "long" (35 identical saturated
        # steps) compares its first four per-layer steps.
        per_steps = dsteps[:4] if name == "long" and _EMULATED else dsteps
        with cupyx.allow_synchronize(not device_schedule):
            fused = build_jagged_pyramid(first, dsteps, fused=True)
            per_layer = build_jagged_pyramid(first, per_steps, fused=False)
        assert len(fused) == len(want) and len(per_layer) == len(per_steps) + 1, name
        for a, b in zip(want, fused):
            for x, y in zip(a.mles, b.mles):
                np.testing.assert_array_equal(x, y.get(), err_msg=name)
        for a, c in zip(want, per_layer):
            for x, z in zip(a.mles, c.mles):
                np.testing.assert_array_equal(x, z.get(), err_msg=name)
