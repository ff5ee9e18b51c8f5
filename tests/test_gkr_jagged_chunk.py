"""The fused jagged chunk (``zorch_gkr_jagged_chunk`` in ``kernels/cuda/gkr.cu``).

``GKR_JAGGED_CHUNK`` transitions of a jagged schedule in one launch: each
slot of the last layer is computed from its leaves by a group of lanes (one
leaf pair per lane, combined upwards with warp shuffles).

* Host: g++ compiles the chunk's per-lane steps; a harness runs the serial
  twin (the scans, then every lane group in lane order, then the dead fill)
  -- everything but the shuffles themselves -- and every layer must equal
  the CPU per-layer ``build_jagged_pyramid`` byte for byte: all four modes,
  both fields, halving schedules, padded counts (``orc > ceil(rc / 2)``),
  slack widths (dead slots), empty and saturated segments, ``nb = 1``, and
  chunks chained one after another.
* The struct image the launcher passes, and the constants shared with gkr.cu.
* GPU: tests/test_gkr_jagged_pyramid.py runs the whole fused pyramid (chunks,
  single wide steps, tail) against per-layer and CPU.
"""
import ctypes

import numpy as np
import pytest

from cuda_host import compile_host, ptr
from gkr_cases import assert_layers_equal, random_jagged_layer
from test_gkr_jagged_pyramid import HARNESS as TAIL_HARNESS
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels.launch_config import GKR_JAGGED_CHUNK, GKR_JAGGED_TAIL_SLOTS
from zorch_nb.logup_gkr import (JaggedGkrLayer, JaggedStep, build_jagged_pyramid,
                                halving_schedule)

C = GKR_JAGGED_CHUNK
MODES = [(ne, de) for ne in (0, 1) for de in (0, 1)]
FIELD_OBJ = {"koalabear": KoalaBear, "babybear": BabyBear}

HARNESS = "".join(f"""
extern "C" void host_chunk_{ne}{de}(const unsigned long long* desc, long long* prefix,
                                    unsigned int nb, const zorch_u32* n0, const zorch_u32* n1,
                                    const zorch_u32* d0, const zorch_u32* d1,
                                    unsigned long long items, unsigned int nthreads) {{
    zorch_gkr_chunk c;
    static_assert(sizeof(zorch_gkr_chunk) == 8 * (6 * ZORCH_GKR_CHUNK + 2), "layout");
    for (int m = 0; m <= ZORCH_GKR_CHUNK; ++m) c.cnt[m] = (const int*)desc[m];
    for (int m = 0; m < ZORCH_GKR_CHUNK; ++m) {{
        for (int k = 0; k < 4; ++k)
            c.p[m][k] = (zorch_u32*)desc[ZORCH_GKR_CHUNK + 1 + 4 * m + k];
        c.width[m] = desc[5 * ZORCH_GKR_CHUNK + 1 + m];
    }}
    c.in_width = desc[6 * ZORCH_GKR_CHUNK + 1];
    zorch_gkr_chunk_serial<{ne}, {de}>(&c, prefix, nb, n0, n1, d0, d1, items, nthreads);
}}
""" for ne, de in MODES) + """
extern "C" unsigned int host_chunk() { return ZORCH_GKR_CHUNK; }
extern "C" unsigned int host_chunk_desc_words() { return sizeof(zorch_gkr_chunk) / 8; }
"""


_layer = random_jagged_layer


def _host_chunks(lib, layer, steps, nthreads=1024):
    """Layers of ``steps`` (a multiple of C) by the serial twin, C steps per launch.

    Output buffers start as 0xDEADBEEF, so a slot the chunk failed to write
    shows up as a mismatch.
    """
    assert len(steps) % C == 0
    ne, de = int(layer.numerator_0.ndim == 2), int(layer.denominator_0.ndim == 2)
    nb = layer.num_batches
    rc = np.ascontiguousarray(layer.row_counts, np.int32)
    src = [np.ascontiguousarray(x) for x in layer.mles]
    outs, keep, mode = [], [], (ne, de)
    for start in range(0, len(steps), C):
        chunk = steps[start:start + C]
        oe = int(mode[0] or mode[1])
        counts = [rc] + [np.ascontiguousarray(o, np.int32) for o, _ in chunk]
        layers = [[np.full((w, 4) if e else (w,), 0xDEADBEEF, np.uint32)
                   for e in (oe, oe, de, de)] for _, w in chunk]
        desc = np.array([c.ctypes.data for c in counts]
                        + [a.ctypes.data for mles in layers for a in mles]
                        + [w for _, w in chunk] + [src[0].shape[0]], np.uint64)
        keep.append(counts)
        prefix = np.full((C + 1) * nb, -1, np.int64)
        items = max(w for _, w in chunk)
        getattr(lib, f"host_chunk_{mode[0]}{mode[1]}")(
            ptr(desc), ptr(prefix), ctypes.c_uint(nb), *map(ptr, src),
            ctypes.c_ulonglong(items), ctypes.c_uint(nthreads))
        outs += layers
        rc, src, mode = counts[-1], layers[-1], (oe, de)
    return outs


def _cases(nb, rng):
    """(name, first counts, first width, steps with a multiple of C entries)."""
    cases = []
    rc = rng.integers(0, 70, nb).astype(np.int32)
    rc[:: max(1, nb // 4)] = 0                      # empty segments
    rc[1 % nb] = 1                                  # a saturated segment
    rc[2 % nb] = 64                                 # a power of two
    zeros = np.zeros(int(rc.sum()), np.uint32)
    halving = [(s.row_counts, s.width)
               for s in halving_schedule(JaggedGkrLayer(zeros, zeros, zeros, zeros, rc))]
    halving += [(np.ones(nb, np.int32), nb)] * (-len(halving) % C)
    cases.append(("halving", rc, int(rc.sum()) + 5, halving))   # input with slack
    # padded counts (orc > ceil(rc / 2)) and slack widths at every step
    steps, cur = [], rc.astype(np.int64)
    for extra in (3, 0, 2, 1, 0, 4):
        cur = (cur + 1) // 2 + rng.integers(0, 3, nb) * (extra > 0)
        steps.append((cur.astype(np.int32), int(cur.sum()) + extra))
    cases.append(("padded+slack", rc, int(rc.sum()), steps))
    # a later layer wider than the first (padding that grows)
    grow = [((rc + 1) // 2, int(((rc + 1) // 2).sum())),
            ((rc + 1) // 2 + 5, int(((rc + 1) // 2 + 5).sum()) + 2),
            ((rc + 1) // 2 + 9, int(((rc + 1) // 2 + 9).sum()))]
    cases.append(("growing padding", rc, int(rc.sum()), grow))
    ones = np.ones(nb, np.int32)
    cases.append(("saturated", ones, nb + 2, [(ones, nb)] * C))
    return cases


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("field", sorted(FIELD_OBJ))
def test_chunk_on_host_matches_cpu_pyramid(field, ne, de):
    lib = compile_host(field, "gkr.cu", HARNESS)
    F = FIELD_OBJ[field]
    rng = np.random.default_rng(5 + 2 * ne + de)
    for nb in (1, 2, 8, 64):
        for name, rc, width, steps in _cases(nb, rng):
            first = _layer(F, ne, de, rc, width, seed=nb + len(steps))
            want = build_jagged_pyramid(first, steps, backend="cpu")[1:]
            for nthreads in (1024, 3):  # scan run splits
                assert_layers_equal(_host_chunks(lib, first, steps, nthreads), want,
                                    f"{name} nb={nb}")


def test_chunk_constants_reach_the_cuda_source():
    lib = compile_host("koalabear", "gkr.cu", HARNESS)
    assert lib.host_chunk() == GKR_JAGGED_CHUNK
    assert lib.host_chunk_desc_words() == 6 * GKR_JAGGED_CHUNK + 2  # the launcher's image


# ---------------------------------------------------------------------------
# The fused pyramid's orchestration (logup_gkr._fused_jagged_steps) on the host
# ---------------------------------------------------------------------------

_PTRS = ", ".join(f"{c} zorch_u32* {n}" for c, n in
                  [("const", "n0"), ("const", "n1"), ("const", "d0"), ("const", "d1"),
                   ("", "on0"), ("", "on1"), ("", "od0"), ("", "od1")])
ORCHESTRATION = HARNESS + TAIL_HARNESS + "".join(f"""
extern "C" void host_transition_{ne}{de}(const int* rc, const int* orc, long long* prefix,
                                         unsigned int nb, {_PTRS}, long width,
                                         long in_width) {{
    zorch_gkr_scan_serial(rc, prefix, nb, 1024);
    zorch_gkr_scan_serial(orc, prefix + nb, nb, 1024);
    for (long q = 0; q < width; ++q)
        zorch_gkr_jagged_slot<{ne}, {de}, false>(q, rc, orc, prefix, nb, in_width, n0, n1, d0,
                                                 d1, on0, on1, od0, od1);
}}
""" for ne, de in MODES)


class HostLaunchers:
    """The three launchers of kernels/gkr_cupy.py that ``_fused_jagged_steps``
    calls (as their trusted forms), with the same arguments, running the kernels' serial twins on
    NumPy arrays (and recording the launch sequence)."""

    def __init__(self, lib):
        self.lib, self.calls = lib, []

    @staticmethod
    def _mode(first):
        return int(first[0].ndim == 2), int(first[2].ndim == 2)

    def jagged_chunk(self, rc, prefix, first, steps, f):
        assert len(steps) == C and prefix.size >= (C + 1) * rc.size
        self.calls.append("chunk")
        counts = [rc] + [orc for orc, _ in steps]
        desc = np.array([c.ctypes.data for c in counts]
                        + [a.ctypes.data for _, outs in steps for a in outs]
                        + [outs[0].shape[0] for _, outs in steps] + [first[0].shape[0]],
                        np.uint64)
        ne, de = self._mode(first)
        getattr(self.lib, f"host_chunk_{ne}{de}")(
            ptr(desc), ptr(prefix), ctypes.c_uint(rc.size), *map(ptr, first),
            ctypes.c_ulonglong(max(outs[0].shape[0] for _, outs in steps)), ctypes.c_uint(1024))

    def jagged_transition(self, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
        self.calls.append("transition")
        ne, de = self._mode((n0, n1, d0, d1))
        getattr(self.lib, f"host_transition_{ne}{de}")(
            ptr(rc), ptr(orc), ptr(prefix), ctypes.c_uint(rc.size),
            *map(ptr, (n0, n1, d0, d1, on0, on1, od0, od1)), ctypes.c_long(on0.shape[0]),
            ctypes.c_long(n0.shape[0]))

    # The object layer calls the trusted launchers, given the input mode:
    # the same launches, with the mode it passes checked against the data.
    def _trusted(self, launch, mode, first, *args):
        ne, de = self._mode(first)
        assert mode == 2 * ne + de, (mode, ne, de)
        return launch(*args)

    def jagged_chunk_trusted(self, mode, rc, prefix, first, steps, f):
        self._trusted(self.jagged_chunk, mode, first, rc, prefix, first, steps, f)

    def jagged_transition_trusted(self, mode, rc, orc, prefix, n0, n1, d0, d1, *rest):
        self._trusted(self.jagged_transition, mode, (n0, n1, d0, d1), rc, orc, prefix,
                      n0, n1, d0, d1, *rest)

    def jagged_tail_trusted(self, mode, rc, prefix, first, steps, f):
        self._trusted(self.jagged_tail, mode, first, rc, prefix, first, steps, f)

    def jagged_tail(self, rc, prefix, first, steps, f):
        from zorch_nb.kernels.launch_config import GKR_MAX_TAIL
        ne, de = self._mode(first)
        for start in range(0, len(steps), GKR_MAX_TAIL):  # the launcher's chunking
            part = steps[start:start + GKR_MAX_TAIL]
            self.calls.append("tail")
            desc = np.zeros((GKR_MAX_TAIL, 6), np.uint64)
            for l, (orc, outs) in enumerate(part):
                desc[l] = [orc.ctypes.data] + [a.ctypes.data for a in outs] + [outs[0].shape[0]]
            getattr(self.lib, f"host_tail_{ne}{de}")(
                ptr(rc), ptr(prefix), ctypes.c_uint(rc.size), *map(ptr, first),
                ctypes.c_ulonglong(first[0].shape[0]), ptr(desc), ctypes.c_uint(len(part)),
                ctypes.c_uint(512))
            rc, first = part[-1][0], part[-1][1]
            ne = int(ne or de)


@pytest.mark.parametrize("ne,de", MODES)
def test_fused_pyramid_orchestration_on_host(ne, de):
    """Chunks, single wide steps and the tail chained by ``_fused_jagged_steps``
    (checks, one packed count upload, allocation, launch plan, argument order)
    equal the CPU per-layer pyramid byte for byte."""
    from zorch_nb.kernels.launch_config import gkr_jagged_launches, gkr_jagged_plan
    from zorch_nb.logup_gkr import _fused_jagged_steps
    F = KoalaBear if ne == de else BabyBear
    lib = compile_host(F.params.name, "gkr.cu", ORCHESTRATION)
    rng = np.random.default_rng(21 + 2 * ne + de)
    nb = 32
    rc = rng.integers(0, 40 * GKR_JAGGED_TAIL_SLOTS // nb, nb).astype(np.int32)
    rc[3] = 0
    probe = JaggedGkrLayer(*[np.zeros(int(rc.sum()), np.uint32)] * 4, rc)
    halving = [(s.row_counts, s.width) for s in halving_schedule(probe)]
    padded, cur = [], rc.astype(np.int64)
    for i in range(len(halving)):  # padded counts and slack widths
        cur = (cur + 1) // 2 + (i % 2)
        padded.append((cur.astype(np.int32), int(cur.sum()) + nb + 3))
    for name, steps in (("halving", halving), ("padded+slack", padded),
                        ("JaggedStep", [JaggedStep(c, w) for c, w in halving[:4]])):
        first = _layer(F, ne, de, rc, int(rc.sum()) + 7, seed=len(steps))
        want = build_jagged_pyramid(first, steps, backend="cpu")[1:]
        launchers = HostLaunchers(lib)
        got = _fused_jagged_steps(first, [(c, w) for c, w in steps], xp=np, kernels=launchers)
        widths = [w for _, w in steps]
        chunked, tail = gkr_jagged_plan(widths)
        assert launchers.calls.count("chunk") == chunked // C
        assert launchers.calls.count("transition") == tail - chunked
        if name == "halving":
            assert chunked >= C and tail < len(steps)  # all three launch kinds exercised
            assert 2 * len(launchers.calls) - launchers.calls.count("tail") \
                == gkr_jagged_launches(widths)
        assert len(got) == len(want), name
        for l, (g, w) in enumerate(zip(got, want)):
            assert np.array_equal(g.row_counts, w.row_counts)
            for a, b in zip(g.mles, w.mles):
                np.testing.assert_array_equal(a, b, err_msg=f"{name} layer {l}")



@pytest.mark.cudasim
@pytest.mark.parametrize("ne,de", MODES)
def test_numba_fused_jagged_pyramid_matches_cpu(ne, de):
    """Numba-CUDA: every step in three-step chunks (simulator in CI)."""
    F = KoalaBear if ne == de else BabyBear
    rng = np.random.default_rng(41 + 2 * ne + de)
    for nb in (1, 8):
        for name, rc, width, steps in _cases(nb, rng):
            first = _layer(F, ne, de, rc, width, seed=nb)
            keep = [x.copy() for x in first.mles]
            want = build_jagged_pyramid(first, steps, backend="cpu")
            extras = ([], [(steps[-1][0], steps[-1][1])]) if nb == 8 else ([],)
            for extra in extras:  # a multiple of 3 steps, and one more (a single transition)
                got = build_jagged_pyramid(first, steps + extra, backend="numba", fused=True)
                assert len(got) == len(want) + len(extra)
                for l, (g, w) in enumerate(zip(got, want)):
                    for a, b in zip(g.mles, w.mles):
                        assert type(a) is np.ndarray
                        np.testing.assert_array_equal(a, b, err_msg=f"{name} nb={nb} layer {l}")
            for x, y in zip(keep, first.mles):
                np.testing.assert_array_equal(x, y)  # input untouched
