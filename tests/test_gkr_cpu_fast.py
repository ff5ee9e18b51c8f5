"""The run-splitting CPU jagged transition against the per-slot body.

The jagged kernels of ``kernels.gkr_cpu`` split each chunk of output slots into runs
(pairs of live nodes, the odd last node, live padding, dead tail).  These tests
compare them byte for byte with a serial loop over the per-slot body
(``jagged_slot``, the same text the GPU backends run) on random schedules,
with chunk sizes small enough that chunk borders fall inside every kind of
run, with short segments (one folded node run per chunk, then moved) and
long ones (runs per segment), and with schedules only a device caller could
pass (truncating counts, ``out_width`` below ``sum(orc)``), whose per-slot
meaning is still defined.
"""
import numpy as np
import pytest
from numba import njit

from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels import gkr_cpu
from zorch_nb.kernels.field_params import kernel_words
from zorch_nb.kernels.monty import ext4_map2

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
MODES = [pytest.param(ne, de, id=f"{'E' if ne else 'B'}{'E' if de else 'B'}")
         for ne in (False, True) for de in (False, True)]


@njit
def _per_slot(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one):
    width = od0.shape[0] // (4 if mode & 1 else 1)
    in_nodes = d0.shape[0] // (4 if mode & 1 else 1)
    for q in range(width):
        s = gkr_cpu._find_segment(prefix, 1, q)
        gkr_cpu._jagged_slot(mode, q, s, rc, orc, prefix, in_nodes, n0, n1, d0, d1,
                             on0, on1, od0, od1, p, mu, wm, one)


def _words(F, rng, n, ext):
    return rng.integers(0, F.p, size=(n, 4) if ext else (n,), dtype=np.uint32)


def _run_both(F, ne, de, rc, orc, width, chunk, rng):
    rc = np.asarray(rc, dtype=np.int32)
    orc = np.asarray(orc, dtype=np.int32)
    n = max(1, int(rc.sum()))
    ins = [_words(F, rng, n, e) for e in (ne, ne, de, de)]
    oe = ne or de
    shapes = [(width, 4) if e else (width,) for e in (oe, oe, de, de)]
    # Garbage-filled outputs: every slot must be written.
    fast = [rng.integers(0, 2**32, size=s, dtype=np.uint32) for s in shapes]
    slow = [rng.integers(0, 2**32, size=s, dtype=np.uint32) for s in shapes]
    p, mu, wm, one = kernel_words(F.params)
    mode = gkr_cpu.mode_of(ne, de)
    flat = [gkr_cpu._flat(x) for x in ins]
    prefix = np.empty((2, rc.shape[0]), dtype=np.int64)
    # Read-only counts, as the launcher passes them (one compiled signature).
    gkr_cpu._KERNELS[mode].jagged(gkr_cpu._read_only(rc), gkr_cpu._read_only(orc), prefix,
                                  *flat, *(gkr_cpu._flat(x) for x in fast), p, mu, wm, one,
                                  chunk)
    # the per-slot body reads prefix sums of its own, not the kernel's scan
    # (a wrong scan would otherwise be shared by both sides)
    own = np.stack([np.cumsum(rc, dtype=np.int64), np.cumsum(orc, dtype=np.int64)])
    np.testing.assert_array_equal(prefix, own)
    _per_slot(mode, rc, orc, own, *flat, *(gkr_cpu._flat(x) for x in slow),
              p, mu, wm, one)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("ne,de", MODES)
def test_random_schedules_match_per_slot_body(F, ne, de):
    rng = np.random.default_rng(7)
    for trial in range(12):
        nb = 1 << int(rng.integers(0, 5))
        rc = rng.integers(0, 12, size=nb)
        rc[rng.random(nb) < 0.25] = 0  # empty segments
        need = (rc + 1) // 2
        orc = need + rng.integers(0, 4, size=nb) * (rng.random(nb) < 0.5)
        orc[(rc == 0) & (rng.random(nb) < 0.5)] = 0
        width = int(orc.sum()) + int(rng.integers(0, 6))  # slack tail
        for chunk in (1, 2, 3, 5, 2048):
            _run_both(F, ne, de, rc, orc, width, chunk, rng)


@pytest.mark.parametrize("ne,de", MODES)
def test_device_style_schedules_match_per_slot_body(ne, de):
    # Unchecked schedules: counts below ceil(rc / 2) and widths below sum(orc).
    rng = np.random.default_rng(11)
    for trial in range(12):
        nb = 1 << int(rng.integers(0, 5))
        rc = rng.integers(0, 12, size=nb)
        orc = rng.integers(0, 8, size=nb)
        width = int(rng.integers(0, int(orc.sum()) + 4))
        for chunk in (1, 3, 2048):
            _run_both(KoalaBear, ne, de, rc, orc, width, chunk, rng)


@pytest.mark.parametrize("ne,de", MODES)
def test_long_short_and_mixed_segments_match_per_slot_body(ne, de):
    """A chunk whose segments average fewer than GKR_CPU_SHORT_SEGMENT live
    slots folds its whole node run first and then moves the results (the
    small-count tests above take only that path); a chunk of long segments
    runs per segment.  Mixed layers switch between the two at chunk borders;
    truncating counts (a node run wider than the slots need) fall back to
    the per-segment runs."""
    from numba import config

    from zorch_nb.kernels.launch_config import GKR_CPU_SHORT_SEGMENT
    rng = np.random.default_rng(13)
    # plain Python (NUMBA_DISABLE_JIT=1, a CI stage): one trial of each kind
    trials, chunks, lg_nb = ((4, (7, 100, 2048), 5) if config.DISABLE_JIT
                             else (8, (7, 64, 100, 333, 2048), 7))
    for trial in range(trials):
        nb = 1 << int(rng.integers(3, lg_nb))
        long = rng.random(nb) < [0.05, 0.3, 0.7, 1.0][trial % 4]
        rc = np.where(long, rng.integers(2 * max(GKR_CPU_SHORT_SEGMENT), 400, size=nb),
                      rng.integers(0, 12, size=nb))
        need = (rc + 1) // 2
        if trial % 2:  # device style: truncating counts, widths past or below sum(orc)
            orc = np.maximum(0, need - rng.integers(0, 3, size=nb) * (rng.random(nb) < 0.3))
            width = int(rng.integers(int(orc.sum()) // 2, int(orc.sum()) + 8))
        else:
            orc = need + rng.integers(0, 4, size=nb) * (rng.random(nb) < 0.5)
            width = int(orc.sum()) + int(rng.integers(0, 6))
        for chunk in chunks:
            _run_both(KoalaBear, ne, de, rc, orc, width, chunk, rng)


def test_all_padding_and_all_dead():
    rng = np.random.default_rng(3)
    for ne, de in ((False, False), (True, True)):
        _run_both(KoalaBear, ne, de, [0, 0, 0, 0], [3, 0, 2, 1], 9, 2, rng)
        _run_both(KoalaBear, ne, de, [0, 0], [0, 0], 5, 2, rng)
        _run_both(KoalaBear, ne, de, [5], [3], 3, 2, rng)


@njit
def _ext4_map2_per_element(op, a, b, out, p, mu, wm):
    for i in range(out.shape[0]):
        c = ext4_map2(op, a[i, 0], a[i, 1], a[i, 2], a[i, 3],
                      b[i, 0], b[i, 1], b[i, 2], b[i, 3], p, mu, wm)
        for k in range(4):
            out[i, k] = c[k]


@pytest.mark.parametrize("F", FIELDS)
def test_ext4_mul_flat_kernel_matches_generic_kernel(F):
    # The inlined flat multiply against the generic opcode kernel, with the
    # extreme words 0 and p - 1 mixed in (largest products and sums).
    from zorch_nb.kernels import field_cpu
    from zorch_nb.kernels.monty import OP_MUL
    rng = np.random.default_rng(5)
    n = 1003
    a, b = (rng.integers(0, F.p, size=(n, 4), dtype=np.uint32) for _ in range(2))
    for x in (a, b):
        x[rng.random((n, 4)) < 0.2] = F.p - 1
        x[rng.random((n, 4)) < 0.1] = 0
    p, mu, wm, _ = kernel_words(F.params)
    want = np.empty_like(a)
    _ext4_map2_per_element(OP_MUL, a, b, want, p, mu, wm)
    got = np.empty_like(a)
    field_cpu.ext4_map2(OP_MUL, a, b, got, F.params)
    np.testing.assert_array_equal(got, want)


@njit
def _dense_per_slot(mode, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
    half = od0.shape[0] // (4 if mode & 1 else 1)
    for k in range(half):
        gkr_cpu._dense_slot(mode, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("log_n", [1, 5, 13])
def test_dense_fold_matches_per_slot_body(ne, de, log_n):
    # 2**13 leaves: several chunks of the chunked extension-denominator loops.
    F = KoalaBear
    rng = np.random.default_rng(log_n)
    n = 1 << log_n
    ins = [_words(F, rng, n, e) for e in (ne, ne, de, de)]
    oe = ne or de
    shapes = [(n // 2, 4) if e else (n // 2,) for e in (oe, oe, de, de)]
    fast = [np.empty(s, dtype=np.uint32) for s in shapes]
    slow = [np.empty(s, dtype=np.uint32) for s in shapes]
    gkr_cpu.fold_dense(*ins, *fast, F.params)
    p, mu, wm, _ = kernel_words(F.params)
    _dense_per_slot(gkr_cpu.mode_of(ne, de), *(gkr_cpu._flat(x) for x in ins + slow), p, mu, wm)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
