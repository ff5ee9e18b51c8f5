"""Numba CPU kernels of the LogUp-GKR layer transitions (``@njit(parallel=True)``;
a layer of one task runs the serial twin, see :func:`.cpu_threads.sized`).

Launcher contract (shared by :mod:`.gkr_cuda_numba` and :mod:`.gkr_cupy`):

``fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f)``
    Dense transition.  Inputs have length ``L`` (even), outputs ``L / 2``;
    ``on*``/``od*`` are written for every ``k in [0, L/2)``:
    ``on0[k], od0[k]`` = fraction sum of node ``2k``'s children,
    ``on1[k], od1[k]`` = the same for node ``2k + 1``; the fraction sum of
    children ``(n0, d0)`` and ``(n1, d1)`` is ``(n0 d1 + n1 d0, d0 d1)``, not
    reduced to lowest terms (:mod:`.gkr_scalar`).
``pyramid_dense(first, layers, f)``
    Every dense transition from ``first`` (its four MLEs) into the
    preallocated ``layers[l]`` = ``(on0, on1, od0, od1)`` of layer ``l + 1``,
    fused: intermediate layers are not read back from memory.  (The
    Numba-CUDA launcher takes each layer as one flat buffer
    ``on0 | on1 | od0 | od1`` instead: see :func:`.gkr_cuda_numba.pyramid_dense`.)
``jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f)``
    Jagged transition for every output slot ``q`` of the outputs' length.
    ``rc``/``orc`` are int32 row counts of the input and output layers
    (length ``nb``), ``prefix`` an int64 ``(2, nb)`` scratch the launcher
    overwrites with the inclusive prefix sums of ``rc`` and ``orc``.  The
    input rows of segment ``s`` follow those of segments ``< s``, and so do
    its ``orc[s]`` output slots; slot ``j`` of segment ``s`` has the nodes of
    its rows ``2j`` and ``2j + 1`` as children, a row past ``rc[s]`` being
    the neutral fraction ``0/1`` (so a slot past ``ceil(rc[s] / 2)`` is
    ``0/1, 0/1`` padding); slots past ``sum(orc)`` are dead, ``0/0``.
    (:func:`zorch_nb.logup_gkr.jagged_layer_transition` is the same in the
    object layer; :func:`.gkr_scalar.jagged_slot` the per-slot reference.)

``f`` is a field's :class:`.field_params.FieldParams`, e.g.
``zorch_nb.KoalaBear.params`` (``BabyBear.params``; ``F.ext.params`` is the
same record): only these shipped records are accepted.

Arrays are C-contiguous uint32 Montgomery words, any words (read mod p;
outputs are canonical): base MLEs ``(n,)``, extension MLEs ``(n, 4)``.  The
numerator pair and the denominator pair may each be base or extension;
outputs must be extension exactly where the mode requires (numerators if any input is, denominators if the
denominators are).  A pyramid's first layer has a power-of-two length ``L``
and at most ``log2(L)`` layers follow it.  No array a launcher writes
(outputs, ``prefix``) may share memory with another argument.  Every
launcher checks all of this from metadata alone (:mod:`.launch_checks`,
``TypeError``/``ValueError`` naming the launcher and the argument), except
``fold_dense_trusted`` / ``jagged_transition_trusted``, which take the input
mode and check nothing (the object layer's entry: see
:func:`fold_dense_trusted`).  Of
the counts' *values*, the jagged kernel's own scan refuses those that would
read outside its inputs (negative counts, ``sum(rc)`` past the input
length); the rest of the schedule's contract (``ceil(rc[s] / 2) <=
orc[s]``, ``sum(orc)`` at most the outputs' width) is the caller's, as on
the GPU backends, where reading device counts would synchronize -- such
schedules stay in bounds with a per-slot meaning.  Nothing as large as an
MLE is allocated: the prefix sums go into ``prefix``; the other scratch is
bounded by a chunk of slots (the pair buffers of a jagged chunk of short
segments) or by the number of layers (a pyramid's overlap check).

Every MLE reaches the kernels as a flat uint32 view (an extension MLE
``(n, 4)`` as ``(4 n,)``; the mode says which arrays are extension), so each
kernel compiles once for every field and length (field constants are runtime
arguments).  The mode is not: each input mode has its own fold, pyramid and
jagged kernel, the mode a closure constant in them (:func:`_make_kernels`),
and the helpers that pick a mode's loop are inlined as Numba IR, so Numba
prunes the other modes' branches before typing and a first call compiles
its own mode's loops alone.  With the mode a runtime argument, every first
call compiled the loops of all four: a first jagged pyramid of base
numerators over extension denominators (small, serial kernels, cold cache)
took 45.7 s on the 2-core machine, 22.7 s now; the dense one 22.1 -> 13.3 s.

Why the dense loop is fast: each mode has its own loop function with the
mode a constant inside (:func:`_make_runs`), and the slot index is a uint64,
so after inlining the base/base body is branch-free straight-line code over
unit-stride and stride-2 accesses that LLVM vectorizes (32x32->64 products
as ``vpmuludq``, the conditional subtraction as an unsigned min).  The loop
functions take their arrays as ``noalias`` arguments (as a parfor body
would), so no runtime alias checks are needed.  With a signed index Numba
adds negative-index wrap-around selects and LLVM falls back to
gathers/scatters (measured 3x slower).

The jagged kernel splits each chunk of output slots into runs of one kind
instead of branching per slot: per segment, the full pairs (both nodes live)
run through :func:`_pair_run` -- the dense loop with shifted origins, which
vectorizes the same way -- then at most one odd last node, then the live
padding and the dead tail as constant fills.  At 2**22 leaves with 1024
segments this took the base/base transition from 24 ms to ~2.3 ms (the
dense fold's time).  Short segments would make those runs mostly loop
overhead (a run of a few pairs never reaches the vector loop): a chunk whose
segments average fewer than ``GKR_CPU_SHORT_SEGMENT`` live slots folds the
contiguous run of nodes it reads in one vectorized pair run into chunk-local
scratch and then moves each result to its slot.  2**18 leaves in 16384
segments of ~16 rows (base numerators, extension denominators): 3.6 ->
1.1 ms, the dense fold taking 0.7 ms; the jagged pyramid of the bench's
1024 segments at 2**18 (its lower layers are short) 4.9 -> 3.1 ms.  The
price is compile time (once; Numba's on-disk cache loads a kernel in 0.2 s).
``_jagged_slot`` (the per-slot body of the GPU backends) is kept as the
reference the tests compare against.

The field arithmetic is force-inlined into every loop body (see
:func:`.gkr_scalar.inlined_arithmetic`): with the extension fraction sums
left as calls, the folds with extension denominators did not vectorize
(2**22 leaves: base/ext 35 -> 11 ms, ext/ext 55 -> 18 ms once inlined).
The vectorized loops themselves are serial functions, one per mode, compiled
with one 64-bit lane per vector slot (:mod:`.vector_width`; LLVM's own choice
on AVX-512 held every 64-bit value in two registers and spilled: the ext/ext
fold ran 2x slower); the parallel kernels call them per chunk of slots.
"""
import functools
from typing import NamedTuple

import numpy as np
from numba import prange

from .jit import closure_named, njit  # numba.njit, cache keyed on every kernel source

from .gkr_scalar import (MODE_BB, MODE_BE, MODE_EB, make_node_functions, make_slot_functions,
                         mode_of, output_mode)
from .cpu_threads import sized, tasks
from .field_params import kernel_words
from .launch_config import (CPU_LANE_RUN, GKR_CPU_JAGGED_CHUNK, GKR_CPU_SHORT_SEGMENT,
                            gkr_cpu_pyramid_plan)
from .launch_checks import (check_count_values, check_gkr_disjoint, check_gkr_fold,
                            check_gkr_jagged, check_gkr_pyramid, check_host_arrays)
from .vector_width import njit_lanes64

# The launchers, and the mode numbering their kernels take (callers of the
# raw kernels, such as the tests, build modes with it).
__all__ = ["fold_dense", "pyramid_dense", "jagged_transition", "mode_of",
           "fold_dense_trusted", "jagged_transition_trusted", "pyramid_dense_trusted"]

# Slot and node bodies with the field arithmetic force-inlined (see
# gkr_scalar.inlined_arithmetic): a call left in a loop body stops LLVM's
# vectorizer.  The bodies themselves are inlined too, so each loop function
# is one straight-line body over ``noalias`` arrays.
_inline = functools.partial(njit, forceinline=True)
_dense_slot, _jagged_slot, _find_segment = make_slot_functions(_inline, inline_arithmetic=True)
_fold_node, _put_constant = make_node_functions(_inline, inline_arithmetic=True)
_U1 = np.uint64(1)


@_inline
def _span(x):
    # (first byte address, one past the last) of a C-contiguous array; an
    # empty array spans nothing.  Addresses are below 2**63 in user space.
    size = np.int64(x.nbytes)
    if size == 0:
        return np.int64(0), np.int64(0)
    lo = np.int64(x.ctypes.data)
    return lo, lo + size


@_inline
def _clash(written, read):
    # 1 + the index of the first written span that overlaps another span
    # (written or read), else 0.  A launcher's overlap test, compiled into
    # its kernel's prologue: in Python the address reads and the 22-55
    # comparisons cost more than the rest of its checks together.
    for i in range(len(written)):
        lo, hi = written[i]
        if lo == hi:
            continue
        for j in range(len(written)):
            a, b = written[j]
            if j != i and a < hi and lo < b:
                return i + 1
        for j in range(len(read)):
            a, b = read[j]
            if a < hi and lo < b:
                return i + 1
    return 0


@njit(cache=True)
def _spans4(spans, row, a, b, c, d):
    # Rows row .. row + 3 of ``spans``: the spans of a, b, c, d (one layer:
    # a call per layer costs ~0.35 us, four addresses read in Python ~3 us).
    spans[row, 0], spans[row, 1] = _span(a)
    spans[row + 1, 0], spans[row + 1, 1] = _span(b)
    spans[row + 2, 0], spans[row + 2, 1] = _span(c)
    spans[row + 3, 0], spans[row + 3, 1] = _span(d)


@njit(cache=True)
def _clash_rows(spans, nread):
    # Whether a written span (rows nread ..) overlaps any other row.
    for i in range(nread, spans.shape[0]):
        lo, hi = spans[i, 0], spans[i, 1]
        if lo == hi:
            continue
        for j in range(spans.shape[0]):
            if j != i and spans[j, 0] < hi and lo < spans[j, 1]:
                return True
    return False


def _make_runs(mode):
    """The serial 64-bit-lane loops of ``mode`` (a compile-time constant in them)."""

    def dense_run(k0, k1, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
        # Dense slots [k0, k1).
        for k in range(k0, k1):
            _dense_slot(mode, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)

    def pair_run(k0, e0, cnt, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
        # Slots k0 + t (t < cnt) fold live nodes e0 + 2t and e0 + 2t + 1: the
        # dense loop with shifted origins (uint64 indices, no branch per slot).
        for t in range(cnt):
            u = np.uint64(t)
            k = k0 + u
            e = e0 + u + u
            _fold_node(mode, n0, n1, d0, d1, e, on0, od0, k, p, mu, wm)
            _fold_node(mode, n0, n1, d0, d1, e + _U1, on1, od1, k, p, mu, wm)

    tag = _TAGS[mode]
    return (njit_lanes64(closure_named(dense_run, tag)),
            njit_lanes64(closure_named(pair_run, tag)))


_TAGS = ("bb", "be", "eb", "ee")
(_dense_run_bb, _pair_run_bb), (_dense_run_be, _pair_run_be), \
    (_dense_run_eb, _pair_run_eb), (_dense_run_ee, _pair_run_ee) = map(_make_runs, range(4))

# The helpers below are inlined as Numba IR (``inline="always"``) into
# kernels whose mode is a closure constant (:func:`_make_kernels`): the
# mode is then a constant in the inlined code, and Numba drops the other
# modes' branches before typing, so a kernel compiles its own mode's loops
# alone.  (LLVM's ``forceinline`` comes too late for that: the callee is
# typed first, for any mode, and every loop it names is compiled.)
_inline_ir = functools.partial(njit, inline="always")


@_inline_ir
def _dense_run(mode, k0, k1, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
    # The mode's serial loop over dense slots [k0, k1): one call per chunk of
    # slots (a tile of a layer in the pyramid).
    if mode == MODE_BB:
        _dense_run_bb(k0, k1, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    elif mode == MODE_BE:
        _dense_run_be(k0, k1, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    elif mode == MODE_EB:
        _dense_run_eb(k0, k1, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    else:
        _dense_run_ee(k0, k1, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)


@_inline_ir
def _pair_run(mode, k0, e0, cnt, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
    # The mode's serial loop over pairs of live nodes (see _make_runs).
    if mode == MODE_BB:
        _pair_run_bb(k0, e0, cnt, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    elif mode == MODE_BE:
        _pair_run_be(k0, e0, cnt, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    elif mode == MODE_EB:
        _pair_run_eb(k0, e0, cnt, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    else:
        _pair_run_ee(k0, e0, cnt, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)


@njit(cache=True, forceinline=True)
def _constant_run(mode, k0, cnt, on0, on1, od0, od1, num0, den0):
    # Slots k0 + t (t < cnt): both children set to num0/den0 (padding or dead).
    for t in range(cnt):
        k = k0 + np.uint64(t)
        _put_constant(mode, on0, od0, k, num0, den0)
        _put_constant(mode, on1, od1, k, num0, den0)


#: The scratch argument of _segment_slots where the pairs fold in place.
_NO_RUN = (np.empty(0, np.uint32), np.empty(0, np.uint32))


@_inline_ir
def _segment_slots(mode, q, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                   p, mu, wm, one, tn, td, e_lo, moved):
    # The live slots [q, end) segment by segment, each segment's in its three
    # kinds (see _jagged_chunk): pairs, an odd segment's last node with the
    # neutral partner, padding.  The pairs' fractions are folded here, or,
    # where `moved` (a constant where this is inlined), moved from tn / td:
    # the run of nodes from e_lo that the short-segment path folded
    # beforehand.  s: a segment at or before the one holding q.  Returns end.
    zero = np.uint32(0)
    wn = np.uint64(1 if mode == MODE_BB else 4)
    wd = np.uint64(4 if mode & 1 else 1)
    while q < end:
        # first s with cum[s] > q: empty segments are stepped over; it
        # exists (cum[nb - 1] = sum(orc) >= end > q), so no clamp is needed.
        while prefix[1, s] <= q:
            s += 1
        start, base, rows = _segment(s, rc, orc, prefix)
        j0 = q - start
        j1 = min(prefix[1, s], end) - start
        full = rows // 2
        live = (rows + 1) // 2
        a = min(j1, full)
        if j0 < a:
            if moved:
                r = base - e_lo  # node of position j = 0, relative to the run
                for j in range(j0, a):
                    k = np.uint64(start + j)
                    _move_child(tn, td, r + 2 * j, on0, od0, k, wn, wd)
                    _move_child(tn, td, r + 2 * j + 1, on1, od1, k, wn, wd)
            else:
                _pair_run(mode, np.uint64(q), np.uint64(base + 2 * j0), a - j0,
                          n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
        a = max(j0, full)
        if a < min(j1, live):  # at most one slot
            k = np.uint64(start + a)
            if moved:
                _move_child(tn, td, base - e_lo + 2 * a, on0, od0, k, wn, wd)
            else:
                _fold_one(mode, n0, n1, d0, d1, np.uint64(base + 2 * a), on0, od0, k,
                          p, mu, wm)
            _put_constant(mode, on1, od1, k, zero, one)
        a = max(j0, live)
        if a < j1:
            _constant_run(mode, np.uint64(start + a), j1 - a, on0, on1, od0, od1, zero, one)
        q = start + j1
    return q


@_inline_ir
def _jagged_chunk(mode, lo, hi, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                  p, mu, wm, one):
    # Output slots [lo, hi), split into runs of one kind.  Per segment s, with
    # j the position in the segment: j < rc // 2 folds two live nodes,
    # j == rc // 2 of an odd segment folds its last node with the neutral
    # partner, ceil(rc / 2) <= j is live padding; q >= sum(orc) is dead.
    nb = rc.shape[0]
    zero = np.uint32(0)
    live_end = min(hi, prefix[1, nb - 1])
    q = lo
    if q < live_end:
        s = _find_segment(prefix, 1, q)
        short = GKR_CPU_SHORT_SEGMENT[0 if mode == MODE_BB else 1]
        last = _find_segment(prefix, 1, live_end - 1)
        if live_end - q < short * (last - s + 1) and \
                live_end - q < short * _occupied(orc, s, last):
            # short segments: per-segment runs would be mostly loop overhead
            q = _chunk_short(mode, q, live_end, s, rc, orc, prefix,
                             n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one)
        q = _segment_slots(mode, q, live_end, s, rc, orc, prefix, n0, n1, d0, d1,
                           on0, on1, od0, od1, p, mu, wm, one, _NO_RUN, _NO_RUN, 0, False)
    if q < hi:
        _constant_run(mode, np.uint64(q), hi - q, on0, on1, od0, od1, zero, zero)


@njit(cache=True)
def _fold_one(mode, n0, n1, d0, d1, e, on, od, k, p, mu, wm):
    # One node outside the vectorized runs (an odd segment's or run's last):
    # a call, not one more copy of the fold inlined into the chunk loops
    # (one compile for the four modes: the mode is a runtime argument here).
    _fold_node(mode, n0, n1, d0, d1, e, on, od, k, p, mu, wm)


@njit(cache=True, forceinline=True)
def _occupied(orc, s, last):
    # Segments s..last with output slots (empty ones cost the runs nothing).
    count = 0
    for u in range(s, last + 1):
        if orc[u] > 0:
            count += 1
    return count


@njit(cache=True, forceinline=True)
def _segment(s, rc, orc, prefix):
    # (first output slot, first input node, rows) of segment s
    rows = np.int64(rc[s])
    return prefix[1, s] - np.int64(orc[s]), prefix[0, s] - rows, rows


@njit(cache=True, forceinline=True)
def _move(src, i, dst, k, w):
    # Element i of the flat array src to element k of dst, w words each.
    a = i * w
    b = k * w
    for t in range(w):
        dst[b + np.uint64(t)] = src[a + np.uint64(t)]


@njit(cache=True, forceinline=True)
def _move_child(tn, td, r, on, od, k, wn, wd):
    # Node r (relative to the run's first) of the folded run (tn0, tn1, td0,
    # td1: node 2t in the arrays 0, node 2t + 1 in the arrays 1) to slot k.
    h = np.uint64(r >> 1)
    _move(tn[r & 1], h, on, k, wn)
    _move(td[r & 1], h, od, k, wd)


def _make_chunk_short(mode):
    """The short-segment path of ``mode``'s jagged chunks (a call per chunk,
    compiled apart from the kernel's loop body)."""

    def chunk_short(lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                    p, mu, wm, one):
        # The live slots [lo, end) of a chunk of short segments, in two passes:
        # every node they read -- the contiguous run [e_lo, e_hi) -- is folded
        # by one vectorized pair run into chunk-local scratch, then the results
        # are moved to their slots segment by segment (a copy per child instead
        # of a mostly scalar fold: a run of a few pairs never reaches the vector
        # loop).  Returns the first slot not written: lo where the run is wider
        # than the slots need (a truncating schedule's skipped rows), so the
        # caller's per-segment loop takes the chunk.
        while prefix[1, s] <= lo:
            s += 1
        start, base, rows = _segment(s, rc, orc, prefix)
        e_lo = base + min(2 * (lo - start), rows)
        start, base, rows = _segment(_find_segment(prefix, 1, end - 1), rc, orc, prefix)
        e_hi = base + min(2 * (end - start), rows)
        m = e_hi - e_lo
        if m > 2 * (end - lo) + 2:
            return lo
        wn = np.uint64(1 if mode == MODE_BB else 4)
        wd = np.uint64(4 if mode & 1 else 1)
        half = m >> 1
        size = np.uint64(half + 1)
        tn = (np.empty(size * wn, np.uint32), np.empty(size * wn, np.uint32))
        td = (np.empty(size * wd, np.uint32), np.empty(size * wd, np.uint32))
        _pair_run(mode, np.uint64(0), np.uint64(e_lo), half, n0, n1, d0, d1,
                  tn[0], tn[1], td[0], td[1], p, mu, wm)
        if m & 1:  # the run's last node
            _fold_one(mode, n0, n1, d0, d1, np.uint64(e_hi - 1), tn[0], td[0],
                      np.uint64(half), p, mu, wm)
        return _segment_slots(mode, lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1,
                              od0, od1, p, mu, wm, one, tn, td, e_lo, True)

    return njit(cache=True)(closure_named(chunk_short, _TAGS[mode]))


_chunk_short_bb, _chunk_short_be, _chunk_short_eb, _chunk_short_ee = \
    map(_make_chunk_short, range(4))


@_inline_ir
def _chunk_short(mode, lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                 p, mu, wm, one):
    # The mode's short-segment path (see _make_chunk_short).
    if mode == MODE_BB:
        return _chunk_short_bb(lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0,
                               od1, p, mu, wm, one)
    elif mode == MODE_BE:
        return _chunk_short_be(lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0,
                               od1, p, mu, wm, one)
    elif mode == MODE_EB:
        return _chunk_short_eb(lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0,
                               od1, p, mu, wm, one)
    else:
        return _chunk_short_ee(lo, end, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0,
                               od1, p, mu, wm, one)


class _ModeKernels(NamedTuple):
    """The parallel kernels of one input mode (see :func:`_make_kernels`)."""
    fold: object
    pyramid: object
    jagged: object


def _make_kernels(mode):
    """The fold, pyramid and jagged kernels of input ``mode``, a closure
    constant in each: a first call compiles that mode's loops alone (with the
    mode an argument, every first call compiled all four modes' loops)."""
    out_mode = output_mode(mode)
    den_words = 4 if mode & 1 else 1  # per denominator, input and output alike

    def fold(n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
        # Chunks of CPU_LANE_RUN slots in parallel, each one call of the mode's
        # serial 64-bit-lane loop (see the module docstring).  Returns nonzero,
        # writing nothing, where an output overlaps another argument (the
        # launcher then names them).
        if _clash((_span(on0), _span(on1), _span(od0), _span(od1)),
                  (_span(n0), _span(n1), _span(d0), _span(d1))):
            return 1
        half = od0.shape[0] // den_words
        run = CPU_LANE_RUN
        for c in prange((half + run - 1) // run):
            _dense_run(mode, c * run, min(half, c * run + run), n0, n1, d0, d1,
                       on0, on1, od0, od1, p, mu, wm)
        return 0

    def pyramid(levels, half, tile, s0, s1, s2, s3, a0, a1, a2, a3,
                b0, b1, b2, b3, c0, c1, c2, c3, e0, e1, e2, e3, p, mu, wm):
        # Up to four transitions s -> a -> b -> c -> e.  Each iteration takes
        # ``tile`` slots of ``a`` (``half`` in all) and carries them down: its
        # slots [k0, k0 + tile) of layer ``a`` need only its own slots
        # [2 k0, 2 k0 + 2 tile) of ``s``, and so on, so every later layer reads
        # what the same core has just written, from its cache.
        for c in prange(half // tile):
            k0 = c * tile
            k1 = k0 + tile
            _dense_run(mode, k0, k1, s0, s1, s2, s3, a0, a1, a2, a3, p, mu, wm)
            if levels > 1:
                _dense_run(out_mode, k0 >> 1, k1 >> 1, a0, a1, a2, a3, b0, b1, b2, b3,
                           p, mu, wm)
            if levels > 2:
                _dense_run(out_mode, k0 >> 2, k1 >> 2, b0, b1, b2, b3, c0, c1, c2, c3,
                           p, mu, wm)
            if levels > 3:
                _dense_run(out_mode, k0 >> 3, k1 >> 3, c0, c1, c2, c3, e0, e1, e2, e3,
                           p, mu, wm)

    def jagged(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one, chunk):
        # Nonzero, writing nothing, where prefix or an output overlaps another
        # argument (as fold).
        if _clash((_span(prefix), _span(on0), _span(on1), _span(od0), _span(od1)),
                  (_span(rc), _span(orc), _span(n0), _span(n1), _span(d0), _span(d1))):
            return 1
        acc_in = np.int64(0)
        acc_out = np.int64(0)
        for s in range(rc.shape[0]):  # nb is small next to the layer: a serial scan is fine
            # The counts decide every index read below (nothing is bounds
            # checked): counts that would read outside the inputs are refused
            # here, in the scan the kernel makes anyway (returning 2, writing
            # no output).  Truncating ones and sum(orc) past the width keep
            # every index in bounds (reads stop at ceil(rc / 2) pairs, writes
            # at the width) and keep the per-slot meaning the GPU kernels give
            # them.
            if rc[s] < 0 or orc[s] < 0:
                return 2
            acc_in += np.int64(rc[s])
            acc_out += np.int64(orc[s])
            prefix[0, s] = acc_in
            prefix[1, s] = acc_out
        if acc_in > d0.shape[0] // den_words:
            return 2
        width = od0.shape[0] // den_words
        for c in prange((width + chunk - 1) // chunk):
            _jagged_chunk(mode, c * chunk, min(width, c * chunk + chunk), rc, orc, prefix,
                          n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one)
        return 0

    tag = _TAGS[mode]
    return _ModeKernels(*(njit(parallel=True, cache=True)(closure_named(f, tag))
                          for f in (fold, pyramid, jagged)))


#: The kernels by input mode (MODE_BB ... MODE_EE).
_KERNELS = tuple(map(_make_kernels, range(4)))


def _read_only(a):
    view = a.view()
    view.flags.writeable = False
    return view


def _flat(x):
    """``(n,)`` unchanged; extension ``(n, 4)`` -> its ``(4 n,)`` view."""
    return x.reshape(-1) if x.ndim == 2 else x


def _flat8(mode, *arrays):
    """A transition's eight MLEs as flat views: base/base ones are flat
    already (the common small case skips eight calls of _flat)."""
    return arrays if mode == MODE_BB else [_flat(x) for x in arrays]


# Each launcher picks its kernel with cpu_threads.sized: the serial twin
# where the prange has one task (a small layer: no threading layer, no
# ~2.5 us launch), else the parallel kernel under the thread/fork guard.
#
# Every launcher checks its arguments first (launch_checks: O(1) metadata per
# array, errors naming the launcher and the argument); the overlap test of
# the transitions runs compiled in their kernels' prologue, and the pyramid's
# through _spans4 / _clash_rows, so only a refusal pays for naming the pair.

_FOLD, _PYRAMID, _JAGGED = "gkr_cpu.fold_dense", "gkr_cpu.pyramid_dense", \
    "gkr_cpu.jagged_transition"
_NAMES = ("n0", "n1", "d0", "d1", "on0", "on1", "od0", "od1")


def _refuse_overlap(where, written, read):
    """Raise the named overlap error the compiled test found."""
    check_gkr_disjoint(where, written, read)
    raise ValueError(f"{where}: an output overlaps another argument; write into separate "
                     f"arrays")  # (not reached: the two tests agree)


def fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Dense transition on the CPU (see the module docstring).

    Inputs ``n0, n1`` (numerators) and ``d0, d1`` (denominators): one even
    length ``L``, base ``(L,)`` or extension ``(L, 4)`` per pair; outputs
    ``(L/2,)`` or ``(L/2, 4)``: numerators extension unless both pairs are
    base, denominators extension when the input's are.  C-contiguous uint32,
    outputs writeable and sharing no memory with any other argument.
    ``ValueError``/``TypeError`` naming the argument otherwise.
    """
    check_host_arrays(_FOLD, zip(_NAMES, (n0, n1, d0, d1, on0, on1, od0, od1)))
    mode = check_gkr_fold(_FOLD, f, n0, n1, d0, d1, on0, on1, od0, od1, disjoint=False)
    fold_dense_trusted(mode, n0, n1, d0, d1, on0, on1, od0, od1, f)


def fold_dense_trusted(mode, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """:func:`fold_dense` without its metadata checks, given the input ``mode``
    (``2 * (numerators extension) + (denominators extension)``).

    The object layer's entry (every backend has one): its layers were checked
    when built and its outputs are fresh buffers of the right forms, and the
    checks of :func:`fold_dense` took 10.7 us of the 51 us host time of a
    2**10 transition on CuPy (benchmarks/results/cupy-host-dispatch-*).
    Arguments outside the contract of :func:`fold_dense` are undefined
    behaviour here: no error, but reads and writes out of bounds (a corrupted
    heap or a crash on the CPU, out-of-bounds device accesses on the GPU
    backends); call :func:`fold_dense` unless you built them the same way.
    (This backend still refuses overlapping outputs, which its kernel tests
    for free, and a ``mode`` outside 0-3.)
    """
    _check_mode(mode)
    p, mu, wm, _ = kernel_words(f)
    # (not viewed read-only as in pyramid_dense: four views cost 1.7 us of a
    # ~9 us call; read-only input compiles a second signature once instead)
    if sized(_KERNELS[mode].fold, tasks(on0.shape[0], CPU_LANE_RUN))(
            *_flat8(mode, n0, n1, d0, d1, on0, on1, od0, od1), p, mu, wm):
        _refuse_overlap(_FOLD, zip(("on0", "on1", "od0", "od1"), (on0, on1, od0, od1)),
                        zip(("n0", "n1", "d0", "d1"), (n0, n1, d0, d1)))


def _check_mode(mode) -> None:
    """A trusted launcher's one check: ``mode`` picks the kernels (a mode of
    -1 ran the ext/ext ones through Python's negative index)."""
    if mode.__class__ is not int and not isinstance(mode, (int, np.integer)) \
            or not 0 <= mode <= 3:
        raise ValueError(f"argument `mode` must be an input mode 0-3 (2 * numerators "
                         f"extension + denominators extension), not {mode!r}")


def pyramid_dense(first, layers, f):
    """Dense pyramid on the CPU: ``layers[l]`` = ``(on0, on1, od0, od1)`` of layer ``l + 1``.

    ``first`` holds the four input MLEs (as :func:`fold_dense`'s inputs) of a
    power-of-two length ``L``; at most ``log2(L)`` layers, ``layers[l]``
    holding ``L >> (l + 1)`` elements in the output mode; every output buffer
    is preallocated by the caller and shares no memory with another argument.
    One parallel call per ``GKR_CPU_PYRAMID_LEVELS`` layers
    (:func:`.launch_config.gkr_cpu_pyramid_plan`), each thread folding its
    tile through them in its cache: memory traffic is the first layer read
    once, every later layer written once, and the last layer of each call
    read again by the next (1/16 of the slots of that call's input).
    """
    mode, first, layers = check_gkr_pyramid(_PYRAMID, f, first, layers, disjoint=False)
    check_host_arrays(_PYRAMID, [(f"first[{i}]", x) for i, x in enumerate(first)]
                      + [(f"layers[{l}][{i}]", x) for l, outs in enumerate(layers)
                         for i, x in enumerate(outs)])
    spans = np.empty((4 + 4 * len(layers), 2), np.int64)
    for i, group in enumerate([first] + layers):
        _spans4(spans, 4 * i, *group)
    if _clash_rows(spans, 4):
        _refuse_overlap(_PYRAMID, [(f"layers[{l}][{i}]", x) for l, outs in enumerate(layers)
                                   for i, x in enumerate(outs)],
                        [(f"first[{i}]", x) for i, x in enumerate(first)])
    pyramid_dense_trusted(mode, first, layers, f)


def pyramid_dense_trusted(mode, first, layers, f):
    """:func:`pyramid_dense` without its checks, given the input ``mode`` (see
    :func:`fold_dense_trusted`): the object layer's ``build_pyramid``, whose
    first layer was checked when built and whose output layers it allocated
    (C-contiguous, sharing nothing).  The checks cost more than a small
    pyramid's folds (36 of 70 us at 2**12 leaves).  Out of contract: undefined
    behaviour, as there (no error; a corrupted heap or a crash)."""
    _check_mode(mode)
    p, mu, wm, _ = kernel_words(f)
    out_mode = output_mode(mode)
    half, start = first[0].shape[0] // 2, 0
    src = first
    for tile, k in gkr_cpu_pyramid_plan(half, len(layers), out_mode == MODE_BB):
        outs = [tuple(_flat(x) for x in layer) for layer in layers[start:start + k]]
        outs += [outs[-1]] * (4 - k)  # unused argument slots (never touched)
        # the call's input viewed read-only: one compiled signature whether the
        # caller's arrays are writeable or not (one call per four layers)
        sized(_KERNELS[mode].pyramid, half // tile)(
            k, half, tile, *(_read_only(_flat(x)) for x in src),
            *(x for o in outs for x in o), p, mu, wm)
        src, half, start, mode = outs[k - 1], half >> k, start + k, out_mode


def jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Jagged transition on the CPU (see the module docstring).

    ``rc``/``orc``: int32 ``(nb,)``, ``nb >= 1``; ``prefix``: writeable int64
    ``(2, nb)``; inputs of one length and outputs of one width, in the forms
    of :func:`fold_dense`; no written array (outputs, ``prefix``) sharing
    memory with another argument.  Counts that would read outside the inputs
    (``rc[s] < 0``, ``orc[s] < 0``, ``sum(rc)`` past the input length) are
    refused by the kernel's own scan (a ValueError, no output written).
    Schedules that truncate (``orc[s] < ceil(rc[s] / 2)``) or overrun the
    width (``sum(orc)`` past it) stay in bounds and run with the per-slot
    meaning the GPU kernels give them; the object layer refuses them.
    """
    check_host_arrays(_JAGGED, zip(("rc", "orc", "prefix") + _NAMES,
                                   (rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1)))
    mode = check_gkr_jagged(_JAGGED, f, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                            disjoint=False)
    jagged_transition_trusted(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f)


def jagged_transition_trusted(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """:func:`jagged_transition` without its metadata checks, given the input
    ``mode`` (see :func:`fold_dense_trusted`; the counts' values are still
    checked by the kernel's scan).  Out of contract: undefined behaviour, as
    there (no error; a corrupted heap or a crash)."""
    _check_mode(mode)
    p, mu, wm, one = kernel_words(f)
    # Numba types read-only arrays apart from writable ones; the object layer
    # hands over read-only counts, so view every caller's counts that way and
    # keep one compiled signature.
    rc_ro, orc_ro = _read_only(rc), _read_only(orc)
    chunk = GKR_CPU_JAGGED_CHUNK
    status = sized(_KERNELS[mode].jagged, tasks(on0.shape[0], chunk))(
        rc_ro, orc_ro, prefix, *_flat8(mode, n0, n1, d0, d1, on0, on1, od0, od1),
        p, mu, wm, one, chunk)
    if status == 2:
        # the scan's own tests (a negative count, sum(rc) past the input), so it raises
        check_count_values(_JAGGED, rc, d0.shape[0], [("orc", orc, on0.shape[0])])
    if status:
        _refuse_overlap(_JAGGED, [("prefix", prefix)] + list(zip(("on0", "on1", "od0", "od1"),
                                                                 (on0, on1, od0, od1))),
                        [("rc", rc), ("orc", orc)] + list(zip(("n0", "n1", "d0", "d1"),
                                                              (n0, n1, d0, d1))))
