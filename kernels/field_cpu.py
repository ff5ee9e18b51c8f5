"""Numba CPU kernels of the field ops (``@njit(parallel=True, cache=True)``;
small calls run their serial twins, see :func:`.cpu_threads.sized`).

Every launcher takes ``f``, a field's :class:`.field_params.FieldParams`
(``zorch_nb.KoalaBear.params`` or ``BabyBear.params``; only these shipped
records are accepted), and the elementwise ones an opcode ``op`` from
:mod:`.monty` (``OP_ADD``, ``OP_SUB``, ``OP_MUL``; ``OP_NEG``,
``OP_SQUARE``, ``OP_INV``).

Arrays are C-contiguous uint32: base ``(n,)``, extension ``(n, 4)`` or its
flat ``(4 n,)`` words (every extension argument takes either), any words
(read mod p); results are canonical Montgomery words.  ``out`` is written;
it overlaps no input, except that it may be an input itself where each
launcher says so.  Each launcher says which ops it takes and checks its
arguments in O(1) (:mod:`.launch_checks`, shared with the GPU launchers:
``ValueError``/``TypeError`` naming the argument), except the
``*_trusted`` entry points (``eq_split``, ``eq_table``, ``mle_fold``,
``mle_eval``, ``sum_rows``), which check nothing (the object layer's, on
arrays it made or checked): given arguments outside their launcher's
contract they raise no error but read and write out of bounds (a corrupted
heap or a crash).  The kernels validate nothing, and nothing
input-sized is allocated (the powers use one run-sized scratch per run;
``mle_eval_trusted`` two buffers of half its small values).  Field
constants are runtime arguments, so each kernel compiles once for every
field and length.

Where the plain loop over elements does not vectorize, the work is split
into runs of elements (``CPU_LANE_RUN``) of serial 64-bit-lane loops
(:mod:`.vector_width`): the extension product, the broadcast forms (one
element, base operands, rows and columns read in runs), the inverses
(Montgomery's batch trick, the extension's over its norms) and the powers
(one vectorized product of a run per step of square and multiply).
``encode``/``decode`` never start the threading layer: they run serially
until another kernel has started it (see :func:`_conversion`).

Outside ``__all__`` (the launchers every backend has): ``base_sum_rows`` /
``ext4_sum_rows``, the field sums of ``F.sum`` over an array's trailing
axes, are CPU launchers only -- on a GPU the object layer adds the words
with CuPy's reductions.
"""
import numpy as np
from numba import prange

from .jit import closure_named, njit  # numba.njit, cache keyed on every kernel source

from .cpu_threads import layer_running, serial_twin, sized, tasks as _tasks
from .field_params import kernel_words
from .monty import base_map1 as _base1
from .monty import base_map2 as _base2
from .monty import ext4_base_map2 as _ext_base2
from .monty import ext4_map2 as _ext2
from .monty import exponent_bit, mont_inv, mont_mul
from .monty import OP_ADD, OP_INV, OP_MUL, OP_NEG, OP_SQUARE, OP_SUB, canonical, ext4_mul
from .gkr_scalar import inlined_arithmetic
from .launch_config import (BATCH_INV_CHUNK, BATCH_INV_LANES, CPU_LANE_RUN, CPU_SUM_CHUNK,
                            ZERO_SCAN_CHUNK)
from .launch_checks import (BINARY, IN_PLACE_UNARY, UNARY, check_bcast, check_decode,
                            check_encode, check_eq_split, check_first_zero, check_map,
                            check_mle_fold, check_pow, check_sum_rows)
from .vector_width import njit_lanes64

__all__ = ["encode", "decode", "base_map1", "base_map2", "ext4_map1", "ext4_map2",
           "base_map2_bcast", "ext4_map2_bcast", "base_pow", "ext4_pow", "base_batch_inv",
           "base_mle_fold", "ext4_mle_fold", "base_eq_split", "ext4_eq_split",
           "base_first_zero", "ext4_first_zero"]

# The same source as monty.ext4_mul, compiled with LLVM's alwaysinline: left
# to itself LLVM keeps ext4_mul an out-of-line call, and a call blocks the
# vectorizer.  Inlined into a loop over flat words with uint64 indices, the
# loop vectorizes (32x32->64 products as vpmuludq; measured 5x faster).  Not
# cached on its own: it only lives inside the cached kernel.
# (getattr: under NUMBA_DISABLE_JIT=1 the functions are plain Python, with no py_func)
_ext4_mul_inline = njit(forceinline=True)(getattr(ext4_mul, "py_func", ext4_mul))
# force-inlined copies of the rest of the arithmetic the vectorized loops call
_inl = inlined_arithmetic()
_canonical, _ext4_dot_inline, _reduce4 = \
    _inl["canonical"], _inl["ext4_dot"], _inl["monty_reduce_sum4"]
_mod_add, _mod_sub, _mont_mul = _inl["mod_add"], _inl["mod_sub"], _inl["mont_mul"]
_ext4_wrap = _inl["ext4_wrap"]
_base_fold, _ext4_fold = _inl["base_fold"], _inl["ext4_fold"]
_base_eq_split, _ext4_eq_split = _inl["base_eq_split"], _inl["ext4_eq_split"]
_inl_norm, _inl_finish = _inl["ext4_norm"], _inl["ext4_inv_finish"]
_monty_reduce = _inl["monty_reduce"]
# Array positions in the serial run loops are uint64 (``i = np.uint64(lo + t)``
# for ``t in range(hi - lo)``): Numba wraps a signed index (a negative one
# counts from the end), and the select it adds per access kept LLVM from
# vectorizing several of these loops.  2**20 elements, 2 cores: base rows
# plus one row 699 -> 105 us, F.eq_table 1043 -> 282 us, F.mle_fold 234 ->
# 144 us (benchmarks/results/cpu-2026-12-07-field-index.json).
_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)
_U4 = np.uint64(4)
_U5 = np.uint64(5)
_U6 = np.uint64(6)
_U7 = np.uint64(7)
_U8 = np.uint64(8)


@njit(parallel=True, cache=True)
def _base_map1_kernel(op, a, out, p, mu, one):
    for i in prange(out.shape[0]):
        out[i] = _base1(op, a[i], p, mu, one)


@njit(parallel=True, cache=True)
def _base_map2_kernel(op, a, b, out, p, mu):
    for i in prange(out.shape[0]):
        out[i] = _base2(op, a[i], b[i], p, mu)


@njit(parallel=True, cache=True)
def _base_map2_bcast_kernel(op, a, a_step, b, b_step, out, p, mu):
    # out[i] = a[i a_step] op b[i b_step], steps 0 (one element for all) or 1;
    # the broadcast word is read once, outside the loop, so the loop keeps
    # the shape of _base_map2_kernel's
    n = out.shape[0]
    if a_step == 0 and b_step == 0:
        s = _base2(op, a[0], b[0], p, mu)
        for i in prange(n):
            out[i] = s
    elif a_step == 0:
        s = a[0]
        for i in prange(n):
            out[i] = _base2(op, s, b[i], p, mu)
    elif b_step == 0:
        s = b[0]
        for i in prange(n):
            out[i] = _base2(op, a[i], s, p, mu)
    else:
        for i in prange(n):
            out[i] = _base2(op, a[i], b[i], p, mu)


@njit(parallel=True, cache=True)
def _fixed_rows_kernel(op, rows, run, a, a_deg, a_row, b, b_deg, b_row, out, ow, p, mu, wm):
    # Both operands step 0: row r of out (run elements of ow words, 1 or 4)
    # is one value, a[r a_row] op b[r b_row], computed once and repeated.
    # Degrees as in ext4_map2_bcast (1: base, embedded as (s, 0, 0, 0)); ow 1
    # is the base field.  Rows run in parallel (one value each, a fill).
    for r in prange(rows):
        ja, jb = r * a_row * a_deg, r * b_row * b_deg
        c1 = c2 = c3 = np.uint32(0)
        if ow == 1:
            c0 = _base2(op, a[ja], b[jb], p, mu)
        elif a_deg == 4 and b_deg == 4:
            c0, c1, c2, c3 = _ext2(op, a[ja], a[ja + 1], a[ja + 2], a[ja + 3],
                                   b[jb], b[jb + 1], b[jb + 2], b[jb + 3], p, mu, wm)
        elif a_deg == 4:
            c0, c1, c2, c3 = _ext_base2(op, a[ja], a[ja + 1], a[ja + 2], a[ja + 3], b[jb],
                                        False, p, mu)
        else:  # a base, b extension (never two base operands)
            c0, c1, c2, c3 = _ext_base2(op, b[jb], b[jb + 1], b[jb + 2], b[jb + 3], a[ja],
                                        True, p, mu)
        lo = r * run * ow
        if ow == 1:
            for i in range(lo, lo + run):
                out[i] = c0
        else:
            for i in range(lo, lo + run * 4, 4):
                out[i] = c0
                out[i + 1] = c1
                out[i + 2] = c2
                out[i + 3] = c3


# Coefficient-wise ops of the broadcast kernels: x op y, and y - x (RSUB)
_ADD, _SUB, _RSUB, _MUL = range(4)


@njit(forceinline=True)
def _coef_op(kind, x, y, p, mu):
    x, y = _canonical(x, p), _canonical(y, p)
    if kind == _ADD:
        return _mod_add(x, y, p)
    if kind == _SUB:
        return _mod_sub(x, y, p)
    if kind == _RSUB:
        return _mod_sub(y, x, p)
    return _mont_mul(x, y, p, mu)


def _make_bcast_run(kind):
    """The serial 64-bit-lane loops of one coefficient-wise op ``kind``, a
    compile-time constant in them (an opcode branch left in a loop body, even
    a loop-invariant one, kept LLVM from vectorizing it: 7x slower).  The
    closure holds only that int, so Numba's cache key is the same in every
    process."""

    def run(form, lo, hi, x, y, y0, y1, y2, y3, m1, out, p, mu):
        # Elements [lo, hi), flat (4 n,) words out; m1 is all ones for mul,
        # 0 for add and sub (see below).
        if form == 0:
            # x extension words op four fixed words y0..y3 (canonical): an
            # extension element, or a base element s as (s, 0, 0, 0) under
            # add and sub, (s, s, s, s) under mul (a base factor scales each
            # coefficient)
            for i in range(lo, hi):
                j = np.uint64(i) * _U4
                out[j] = _coef_op(kind, x[j], y0, p, mu)
                out[j + _U1] = _coef_op(kind, x[j + _U1], y1, p, mu)
                out[j + _U2] = _coef_op(kind, x[j + _U2], y2, p, mu)
                out[j + _U3] = _coef_op(kind, x[j + _U3], y3, p, mu)
        elif form == 1:
            # x extension words op base words y, one per element: y meets
            # coefficient 0, and 1..3 too where m1 is all ones; else they
            # meet 0 (the embedding (s, 0, 0, 0))
            for t in range(hi - lo):
                i = np.uint64(lo + t)
                j = i * _U4
                si = y[i]
                sk = si & m1
                out[j] = _coef_op(kind, x[j], si, p, mu)
                out[j + _U1] = _coef_op(kind, x[j + _U1], sk, p, mu)
                out[j + _U2] = _coef_op(kind, x[j + _U2], sk, p, mu)
                out[j + _U3] = _coef_op(kind, x[j + _U3], sk, p, mu)
        elif form == 2:
            # base words x op four fixed words y0..y3, x embedded as in form 1
            for t in range(hi - lo):
                i = np.uint64(lo + t)
                j = i * _U4
                si = x[i]
                sk = si & m1
                out[j] = _coef_op(kind, si, y0, p, mu)
                out[j + _U1] = _coef_op(kind, sk, y1, p, mu)
                out[j + _U2] = _coef_op(kind, sk, y2, p, mu)
                out[j + _U3] = _coef_op(kind, sk, y3, p, mu)
        elif form == 4:
            # words x op words y: base elements, or extension coefficients
            # under add and sub ([lo, hi) count words here)
            for t in range(hi - lo):
                i = np.uint64(lo + t)
                out[i] = _coef_op(kind, x[i], y[i], p, mu)
        else:
            # base words x op the fixed word y0 ([lo, hi) count words)
            for t in range(hi - lo):
                i = np.uint64(lo + t)
                out[i] = _coef_op(kind, x[i], y0, p, mu)

    return njit_lanes64(closure_named(run, ("add", "sub", "rsub", "mul")[kind]))


_run_add, _run_sub, _run_rsub, _run_mul = map(_make_bcast_run, range(4))


@njit_lanes64
def _ext4_mul_by_run(lo, hi, a, b0, b1, b2, b3, bw1, bw2, bw3, out, p, mu):
    # Elements [lo, hi) of a * b for one canonical element b (its wrap-around
    # multiples W b_j computed once by the caller), a flat (4 n,) words.
    for i in range(lo, hi):
        j = np.uint64(i) * _U4
        c = _ext4_dot_inline(_canonical(a[j], p), _canonical(a[j + _U1], p),
                             _canonical(a[j + _U2], p), _canonical(a[j + _U3], p),
                             b0, b1, b2, b3, bw1, bw2, bw3)
        out[j] = _reduce4(c[0], p, mu)
        out[j + _U1] = _reduce4(c[1], p, mu)
        out[j + _U2] = _reduce4(c[2], p, mu)
        out[j + _U3] = _reduce4(c[3], p, mu)


_MUL_BY, _MUL_ROWS = 4, 5  # the loops a rows kernel runs besides the four kinds' (below)


def _make_rows_kernel(loops):
    """The rows kernel running one serial loop, ``loops`` a constant inside:
    ``_MUL_BY`` (form 3, :func:`_ext4_mul_by_run`), ``_MUL_ROWS`` (form 6,
    :func:`_ext4_mul_run`), or a coefficient-wise op kind (``_ADD`` ..
    ``_MUL``: the other forms, that kind's :func:`_make_bcast_run` loop).

    One kernel per loop, chosen by the launcher, not one branching on the
    form and kind: Numba compiles every callee a kernel names, so the one
    kernel compiled every loop for any first call (an extension times one
    element: 11.2 s cold on the 2-core VM, 1.8 s now).  A branch on
    ``loops``, a closure constant, is pruned before Numba types the body.  (The
    closure holds only that int: Numba keys the cache entry on the pickled
    closure values, the same in every process.)"""

    def kernel(form, rows, run, x, xw, x_row, y, yw, y_row, y_step, m1, out, ow, p, mu, wm):
        # Broadcast rows: out holds `rows` rows of `run` units (ow words each;
        # a unit is an element, or a word for forms 4 and 5).  Row r of x
        # starts at unit r x_row and steps by one unit (xw words); row r of y
        # starts at unit r y_row and steps by y_step (0: one fixed unit of yw
        # words, read once per task).  Tasks of at most CPU_LANE_RUN units of
        # one row run in parallel, each one call of the kernel's serial loop
        # (in ``form``, for the coefficient-wise ones).
        lane = CPU_LANE_RUN
        per_row = (run + lane - 1) // lane
        for t in prange(rows * per_row):
            r = t // per_row
            lo = (t - r * per_row) * lane
            hi = min(run, lo + lane)
            xv = x[r * x_row * xw:]
            yv = y[r * y_row * yw:]
            ov = out[r * run * ow:]
            if loops == _MUL_ROWS:
                _ext4_mul_run(lo, hi, xv, yv, ov, p, mu, wm)
                continue
            y0 = y1 = y2 = y3 = np.uint32(0)
            if not y_step:
                y0 = _canonical(yv[0], p)
                if yw == 4:
                    y1, y2, y3 = (_canonical(yv[1], p), _canonical(yv[2], p),
                                  _canonical(yv[3], p))
                else:  # one base element under an extension op: (s, s, s, s) & m1 past c0
                    y1 = y2 = y3 = y0 & m1
            if loops == _MUL_BY:
                bw1, bw2, bw3 = _ext4_wrap(y1, y2, y3, p, mu, wm)
                _ext4_mul_by_run(lo, hi, xv, y0, y1, y2, y3, bw1, bw2, bw3, ov, p, mu)
            elif loops == _ADD:
                _run_add(form, lo, hi, xv, yv, y0, y1, y2, y3, m1, ov, p, mu)
            elif loops == _SUB:
                _run_sub(form, lo, hi, xv, yv, y0, y1, y2, y3, m1, ov, p, mu)
            elif loops == _RSUB:
                _run_rsub(form, lo, hi, xv, yv, y0, y1, y2, y3, m1, ov, p, mu)
            else:
                _run_mul(form, lo, hi, xv, yv, y0, y1, y2, y3, m1, ov, p, mu)

    return njit(parallel=True, cache=True)(
        closure_named(kernel, ("add", "sub", "rsub", "mul", "mul_by", "mul_rows")[loops]))


@njit_lanes64
def _ext4_mul_run(lo, hi, a, b, out, p, mu, wm):
    # Elements [lo, hi) of flat (4 n,) words (element i is words 4i .. 4i + 3,
    # read mod p), on 64-bit lanes (vector_width.py): 36 -> 39 GB/s at 2**22.
    for i in range(lo, hi):
        j = np.uint64(i) * _U4
        c = _ext4_mul_inline(_canonical(a[j], p), _canonical(a[j + _U1], p),
                             _canonical(a[j + _U2], p), _canonical(a[j + _U3], p),
                             _canonical(b[j], p), _canonical(b[j + _U1], p),
                             _canonical(b[j + _U2], p), _canonical(b[j + _U3], p), p, mu, wm)
        out[j] = c[0]
        out[j + _U1] = c[1]
        out[j + _U2] = c[2]
        out[j + _U3] = c[3]


_ROWS_KERNELS = tuple(map(_make_rows_kernel, range(6)))


def _rows_kernel(form, kind):
    """The rows kernel of ``(form, kind)`` (:func:`_make_rows_kernel`)."""
    return _ROWS_KERNELS[_MUL_BY if form == 3 else _MUL_ROWS if form == 6 else kind]


@njit(parallel=True, cache=True)
def _ext4_mul_kernel(a, b, out, p, mu, wm):
    n = out.shape[0] // 4
    run = CPU_LANE_RUN
    for c in prange((n + run - 1) // run):
        _ext4_mul_run(c * run, min(n, c * run + run), a, b, out, p, mu, wm)


@njit_lanes64
def _base_mul_run(lo, hi, a, b, out, p, mu):
    # out[i] = a[i] * b[i] for i in [lo, hi) (read mod p); a and b may be
    # one array (a square), out is another.  One operand reduced is enough
    # (see monty.base_map2)
    for t in range(hi - lo):
        i = np.uint64(lo + t)
        out[i] = _mont_mul(_canonical(a[i], p), b[i], p, mu)


# ---- the MLE fold: out[k] = v[2k] + r (v[2k+1] - v[2k]) --------------------
# One pass over the pairs (the composed sub, mul, add read and wrote the data
# about five times): monty.base_fold / ext4_fold inlined, one loop per
# (values, r) degree pair, so that LLVM drops the other pairs' branches and
# hoists r's work (canonical words, its wrap-around multiples) out of the loop.

@njit_lanes64
def _base_fold_run(lo, hi, v, r, out, p, mu):
    for t in range(hi - lo):
        k = np.uint64(lo + t)
        j = k * _U2
        out[k] = _base_fold(v[j], v[j + _U1], r, p, mu)


def _make_ext4_fold_run(v_deg, r_deg):
    def run(lo, hi, v, r0, r1, r2, r3, out, p, mu, wm):
        for k in range(lo, hi):
            o = np.uint64(k) * _U4
            if v_deg == 1:
                j = np.uint64(k) * _U2
                c = _ext4_fold(v[j], v[j], v[j], v[j], v[j + _U1], v[j + _U1], v[j + _U1],
                               v[j + _U1], r0, r1, r2, r3, 1, r_deg, p, mu, wm)
            else:
                j = np.uint64(k) * _U8
                c = _ext4_fold(v[j], v[j + _U1], v[j + _U2], v[j + _U3], v[j + _U4],
                               v[j + _U5], v[j + _U6], v[j + _U7], r0, r1, r2, r3, 4, r_deg,
                               p, mu, wm)
            out[o] = c[0]
            out[o + _U1] = c[1]
            out[o + _U2] = c[2]
            out[o + _U3] = c[3]
    return njit_lanes64(closure_named(run, f"v{v_deg}r{r_deg}"))


# extension forms: base values (an extension or base r), extension values at
# a base r, both extension
_ext4_fold_base_run = _make_ext4_fold_run(1, 4)
_ext4_fold_scale_run = _make_ext4_fold_run(4, 1)
_ext4_fold_ext_run = _make_ext4_fold_run(4, 4)


@njit(cache=True)
def _fold_run(form, lo, hi, v, r0, r1, r2, r3, out, p, mu, wm):
    # Outputs [lo, hi) of one MLE fold, by the run function of `form`:
    # 0 base field; 1 base values on the extension (a base r has
    # r1 = r2 = r3 = 0); 2 extension values, base r; 3 both extension.
    if form == 0:
        _base_fold_run(lo, hi, v, r0, out, p, mu)
    elif form == 1:
        _ext4_fold_base_run(lo, hi, v, r0, r1, r2, r3, out, p, mu, wm)
    elif form == 2:
        _ext4_fold_scale_run(lo, hi, v, r0, r1, r2, r3, out, p, mu, wm)
    else:
        _ext4_fold_ext_run(lo, hi, v, r0, r1, r2, r3, out, p, mu, wm)


@njit(cache=True)
def _fold_step(form, j, half, v, coords, out, p, mu, wm):
    # one whole fold of `half` outputs by r = coords[j] (canonical words)
    z = np.uint32(0)
    four = coords.shape[1] == 4
    _fold_run(form, 0, half, v, coords[j, 0], coords[j, 1] if four else z,
              coords[j, 2] if four else z, coords[j, 3] if four else z, out, p, mu, wm)


@njit(cache=True)
def _fold_chain_kernel(first_form, form, v, coords, a, b, out, p, mu, wm):
    # Every fold of mle_eval on the calling thread, as one-run _mle_fold_kernel
    # launches would do them (the same run functions) without a dispatch
    # each: v's 2**nv elements by coords[0] (first_form: v's own words), into
    # a (into out where nv = 1), then back and forth between a and b (form:
    # the field's words), the last fold into out.
    nv = coords.shape[0]
    half = 1 << (nv - 1)
    _fold_step(first_form, 0, half, v, coords, out if nv == 1 else a, p, mu, wm)
    in_a = True
    for j in range(1, nv):
        half >>= 1
        src = a if in_a else b
        dst = out if j == nv - 1 else (b if in_a else a)
        _fold_step(form, j, half, src, coords, dst, p, mu, wm)
        in_a = not in_a


@njit(parallel=True, cache=True)
def _mle_fold_kernel(form, n, v, r0, r1, r2, r3, out, p, mu, wm):
    # form as _fold_run's; runs of CPU_LANE_RUN outputs
    lane = CPU_LANE_RUN
    for t in prange((n + lane - 1) // lane):
        lo = t * lane
        _fold_run(form, lo, min(n, lo + lane), v, r0, r1, r2, r3, out, p, mu, wm)


# ---- the eq-table doubling: lo[k], hi[k] = a[k] - a[k] r, a[k] r -------------
# monty.base_eq_split / ext4_eq_split inlined, one loop per form as above.

@njit_lanes64
def _base_eq_split_run(k0, k1, a, r, lo, hi, p, mu):
    for t in range(k1 - k0):
        k = np.uint64(k0 + t)
        c = _base_eq_split(a[k], r, p, mu)
        lo[k] = c[0]
        hi[k] = c[1]


def _make_ext4_eq_split_run(r_deg):
    def run(k0, k1, a, r0, r1, r2, r3, lo, hi, p, mu, wm):
        for k in range(k0, k1):
            j = np.uint64(k) * _U4
            c = _ext4_eq_split(a[j], a[j + _U1], a[j + _U2], a[j + _U3], r0, r1, r2, r3,
                               r_deg, p, mu, wm)
            lo[j] = c[0]
            lo[j + _U1] = c[1]
            lo[j + _U2] = c[2]
            lo[j + _U3] = c[3]
            hi[j] = c[4]
            hi[j + _U1] = c[5]
            hi[j + _U2] = c[6]
            hi[j + _U3] = c[7]
    return njit_lanes64(closure_named(run, f"r{r_deg}"))


_ext4_eq_split_base_run = _make_ext4_eq_split_run(1)
_ext4_eq_split_ext_run = _make_ext4_eq_split_run(4)


@njit(cache=True)
def _eq_split_run(form, k0, k1, a, r0, r1, r2, r3, lo, hi, p, mu, wm):
    # Entries [k0, k1) of one eq-table doubling, by the run function of
    # `form`: 0 base field; 1 extension entries, base r; 2 both extension.
    if form == 0:
        _base_eq_split_run(k0, k1, a, r0, lo, hi, p, mu)
    elif form == 1:
        _ext4_eq_split_base_run(k0, k1, a, r0, r1, r2, r3, lo, hi, p, mu, wm)
    else:
        _ext4_eq_split_ext_run(k0, k1, a, r0, r1, r2, r3, lo, hi, p, mu, wm)


@njit(parallel=True, cache=True)
def _eq_split_kernel(form, n, a, r0, r1, r2, r3, lo, hi, p, mu, wm):
    # form as _eq_split_run's; runs of CPU_LANE_RUN entries
    lane = CPU_LANE_RUN
    for t in prange((n + lane - 1) // lane):
        k0 = t * lane
        _eq_split_run(form, k0, min(n, k0 + lane), a, r0, r1, r2, r3, lo, hi, p, mu, wm)


@njit(cache=True)
def _eq_chain_kernel(form, steps, table, coords, p, mu, wm):
    # The first `steps` doublings of an eq table, on the calling thread, as
    # that many one-run _eq_split_kernel launches would do them (the same run
    # functions; m <= CPU_LANE_RUN: one run each) without a dispatch each:
    # doubling j splits the m = 2**j entries T[:m] into T[:m] (1 - r_j) and
    # T[m:2m] = T[:m] r_j, r_j the canonical words of coords[j] (table flat
    # words, coords (steps, 1 or 4)).
    z = np.uint32(0)
    four = coords.shape[1] == 4
    d = 1 if form == 0 else 4  # words per entry
    m = 1
    for j in range(steps):
        _eq_split_run(form, 0, m, table[:d * m], coords[j, 0], coords[j, 1] if four else z,
                      coords[j, 2] if four else z, coords[j, 3] if four else z,
                      table[:d * m], table[d * m:2 * d * m], p, mu, wm)
        m *= 2


@njit(parallel=True, cache=True)
def _pow_kernel(deg, a, e_hi, e_lo, nbits, out, p, mu, wm, one):
    # a ** e for e = e_hi * 2**64 + e_lo < 2**nbits, deg 1 (base) or 4
    # (extension, flat words): left-to-right square and multiply over runs
    # of CPU_LANE_RUN elements, each step one vectorized product of the whole
    # run (_base_mul_run / _ext4_mul_run) between the run's slice of out and
    # a run-sized scratch, instead of a scalar loop of products per element
    # (the extension's a ** 7 went 90 -> ~20 ms at 2**22).
    n = out.shape[0] // deg
    top = nbits - 1  # the highest set bit of e (nbits may exceed its length)
    while top >= 0 and exponent_bit(e_hi, e_lo, top) == 0:
        top -= 1
    run = CPU_LANE_RUN
    for c in prange((n + run - 1) // run):
        lo, hi = c * run, min(n, c * run + run)
        m = hi - lo
        x = a[lo * deg:hi * deg]
        cur = out[lo * deg:hi * deg]
        nxt = np.empty(m * deg, dtype=np.uint32)
        if top < 0:  # e = 0: a ** 0 = one (also for a = 0)
            cur[:] = 0
            for i in range(m):
                cur[i * deg] = one
        else:  # the top bit: a itself, reduced (pow(a, 1) canonicalizes)
            for i in range(m * deg):
                cur[i] = _canonical(x[i], p)
        in_out = True  # whether cur is the run's slice of out
        for k in range(top - 1, -1, -1):
            for factor in range(1 + (exponent_bit(e_hi, e_lo, k) != 0)):
                y = cur if factor == 0 else x  # square, then times a where bit k is set
                if deg == 1:
                    _base_mul_run(0, m, cur, y, nxt, p, mu)
                else:
                    _ext4_mul_run(0, m, cur, y, nxt, p, mu, wm)
                cur, nxt = nxt, cur
                in_out = not in_out
        if not in_out:  # the result sits in the scratch
            nxt[:] = cur


@njit(parallel=True, cache=True)
def _base_batch_inv_kernel(a, out, chunk, p, mu, one):
    # Montgomery's trick inside each chunk (_batch_sweeps): 3 products per
    # element instead of the ~60 of a Fermat inversion each.  Zeros stand
    # aside, so one cannot spoil its chunk, and every result equals the
    # elementwise inverse's (0 for 0, as Fermat gives).
    n = a.shape[0]
    nchunks = (n + chunk - 1) // chunk
    for c in prange(nchunks):
        lo = c * chunk
        _batch_sweeps(a, out, lo, min(n, lo + chunk), p, mu, one)


@njit_lanes64
def _ext4_norm_run(lo, hi, a, out, norms, p, mu, wm):
    # out[i] = (N0, N1, -, -) of element a[i] (flat words) and norms[i - lo]
    # its norm, i in [lo, hi)
    for i in range(lo, hi):
        j = np.uint64(i) * _U4
        r = _inl_norm(_canonical(a[j], p), _canonical(a[j + _U1], p),
                      _canonical(a[j + _U2], p), _canonical(a[j + _U3], p), p, mu, wm)
        out[j] = r[0]
        out[j + _U1] = r[1]
        norms[np.uint64(i - lo)] = r[2]


@njit_lanes64
def _ext4_inv_finish_run(lo, hi, a, out, inv_norms, p, mu, wm):
    # out[i] = a[i]^-1 from out[i] = (N0, N1, -, -) and inv_norms[i - lo]; a
    # zero element has N0 = N1 = 0 and inverse norm 0 (see _batch_sweeps),
    # so it gives 0
    for i in range(lo, hi):
        j = np.uint64(i) * _U4
        r = _inl_finish(_canonical(a[j], p), _canonical(a[j + _U1], p),
                        _canonical(a[j + _U2], p), _canonical(a[j + _U3], p),
                        out[j], out[j + _U1], inv_norms[np.uint64(i - lo)], p, mu, wm)
        out[j] = r[0]
        out[j + _U1] = r[1]
        out[j + _U2] = r[2]
        out[j + _U3] = r[3]


_LANES = np.uint64(BATCH_INV_LANES)


@njit_lanes64
def _forward_rows(x, y, lo, rows, width, acc, p, mu, one):
    # Forward sweep of the chains c < width over rows t < rows: y[i] = chain
    # c's product so far, which then takes x[i] (one for a zero), for the
    # elements i = lo + t L + c (L = BATCH_INV_LANES; see _batch_sweeps)
    for t in range(rows):
        b = np.uint64(lo) + np.uint64(t) * _LANES
        for c in range(width):
            k = np.uint64(c)
            y[b + k] = acc[k]
            xi = _canonical(x[b + k], p)
            acc[k] = _mont_mul(acc[k], xi if xi != 0 else np.uint32(one), p, mu)


@njit_lanes64
def _backward_rows(x, y, lo, rows, width, acc, p, mu, one):
    # Backward sweep, rows t = rows - 1 down to 0: acc[c] is the inverse of
    # chain c's product up to element i, so y[i] = x[i]^-1 = acc[c] * y[i]
    # (0 for a zero), and acc[c] drops x[i] (times one for a zero); the
    # selects keep the loop branch-free, so it vectorizes
    for t in range(rows - 1, -1, -1):
        b = np.uint64(lo) + np.uint64(t) * _LANES
        for c in range(width):
            k = np.uint64(c)
            xi = _canonical(x[b + k], p)
            inv = acc[k]
            r = _mont_mul(inv, y[b + k], p, mu)
            y[b + k] = r if xi != 0 else np.uint32(0)
            acc[k] = _mont_mul(inv, xi if xi != 0 else np.uint32(one), p, mu)


@njit(cache=True)
def _invert_chains(acc, p, mu, one):
    # acc[c] = acc[c]^-1 for the chains' products (never zero: zeros stood
    # aside), by the trick once more, serially, and one Fermat inversion
    n = acc.shape[0]
    before = np.empty(n, np.uint32)
    s = np.uint32(one)
    for c in range(n):
        before[c] = s
        s = mont_mul(s, acc[c], p, mu)
    s = mont_inv(s, p, mu, one)
    for c in range(n - 1, -1, -1):
        t = mont_mul(s, before[c], p, mu)
        s = mont_mul(s, acc[c], p, mu)
        acc[c] = t


@njit(cache=True)
def _batch_sweeps(x, y, lo, hi, p, mu, one):
    # Montgomery's trick over [lo, hi): y[i] = x[i]^-1 (x read mod p), 0
    # where x[i] = 0 (zero stands aside: its factor is one); x and y do not
    # overlap.  One chain is bound by the latency of its products, so
    # BATCH_INV_LANES chains run side by side: element lo + t L + c joins
    # chain c (a short last row extends the first chains only), and each
    # sweep is a vectorized loop over the chains.
    acc = np.empty(BATCH_INV_LANES, np.uint32)
    acc[:] = one
    rows = (hi - lo) // BATCH_INV_LANES
    tail = lo + rows * BATCH_INV_LANES
    _forward_rows(x, y, lo, rows, BATCH_INV_LANES, acc, p, mu, one)
    _forward_rows(x, y, tail, 1, hi - tail, acc, p, mu, one)
    _invert_chains(acc, p, mu, one)
    _backward_rows(x, y, tail, 1, hi - tail, acc, p, mu, one)
    _backward_rows(x, y, lo, rows, BATCH_INV_LANES, acc, p, mu, one)


@njit(parallel=True, cache=True)
def _ext4_batch_inv_kernel(a, out, chunk, p, mu, wm, one):
    # The batch trick on the norms to F_p (monty.ext4_norm) per chunk: the
    # norm parts (13 products) and the finish (13) in vectorized loops, the
    # 3 products of the trick in the vectorized sweeps over the norms, kept
    # in a chunk's contiguous scratch (over out's stride-4 words the sweeps
    # ran 4x slower), instead of a Fermat inversion of each norm (~60
    # products).  a, out: flat (4 n,).
    n = a.shape[0] // 4
    nchunks = (n + chunk - 1) // chunk
    for c in prange(nchunks):
        lo = c * chunk
        hi = min(n, lo + chunk)
        norms = np.empty(hi - lo, np.uint32)
        inv_norms = np.empty(hi - lo, np.uint32)
        _ext4_norm_run(lo, hi, a, out, norms, p, mu, wm)
        _batch_sweeps(norms, inv_norms, 0, hi - lo, p, mu, one)
        _ext4_inv_finish_run(lo, hi, a, out, inv_norms, p, mu, wm)


@njit(parallel=True, cache=True)
def _zero_counts_kernel(w, deg, counts, chunk, p):
    # counts[c] = how many elements of chunk c (deg words each, flat w) are
    # zero, every word = 0 mod p: a count, with no early exit, vectorizes
    n = w.shape[0] // deg
    for c in prange(counts.shape[0]):
        lo = c * chunk
        hi = min(n, lo + chunk)
        found = 0
        if deg == 1:
            for t in range(hi - lo):
                found += _canonical(w[np.uint64(lo + t)], p) == 0
        else:
            for i in range(lo, hi):
                j = np.uint64(i) * _U4
                found += (_canonical(w[j], p) | _canonical(w[j + _U1], p)
                          | _canonical(w[j + _U2], p) | _canonical(w[j + _U3], p)) == 0
        counts[c] = found


@njit(parallel=True, cache=True)
def _sum_rows_kernel(w, rows, run, deg, out, chunk, p):
    # out[r deg + k] = sum_j w[(r run + j) deg + k] mod p, rows in parallel.
    # Montgomery words add as their elements do, so the words themselves are
    # added, exactly: per chunk of elements in uint64 (below 2**46), then
    # into the row's total, reduced mod p.  The extension's four
    # coefficients have an accumulator each, one pass over the words (one
    # loop over strided words per coefficient ran 6x slower).
    p64 = np.uint64(p)
    for r in prange(rows):
        base = np.uint64(r) * np.uint64(run) * np.uint64(deg)
        t0 = t1 = t2 = t3 = np.uint64(0)
        for lo in range(0, run, chunk):
            hi = min(run, lo + chunk)
            s0 = s1 = s2 = s3 = np.uint64(0)
            if deg == 1:
                for j in range(lo, hi):
                    s0 += np.uint64(w[base + np.uint64(j)])
            else:
                for j in range(lo, hi):
                    o = base + np.uint64(j) * _U4
                    s0 += np.uint64(w[o])
                    s1 += np.uint64(w[o + _U1])
                    s2 += np.uint64(w[o + _U2])
                    s3 += np.uint64(w[o + _U3])
            t0, t1 = (t0 + s0) % p64, (t1 + s1) % p64
            t2, t3 = (t2 + s2) % p64, (t3 + s3) % p64
        o = np.uint64(r) * np.uint64(deg)
        out[o] = np.uint32(t0)
        if deg == 4:
            out[o + _U1] = np.uint32(t1)
            out[o + _U2] = np.uint32(t2)
            out[o + _U3] = np.uint32(t3)


@njit(cache=True)
def _first_zero_in(w, deg, lo, hi, p):
    # the first zero element in [lo, hi) (the chunk its count found), or -1
    for i in range(lo, hi):
        zero = True
        for k in range(deg):
            zero = zero and canonical(w[i * deg + k], p) == 0
        if zero:
            return i
    return -1


# The conversions' loops run over whole (sliced) arrays: over range(lo, hi)
# with signed bounds LLVM vectorized the decode loop worse (4.1 ms against
# 2.7 ms for 2**22 words).

@njit_lanes64
def _encode_run(v, out, p, mu, r2):
    # out[i] = v[i] * 2**32 mod p = mont_mul(v[i], 2**64 mod p) for int64
    # values in [0, p): a product and a reduction instead of NumPy's uint64
    # `%` (a division); values outside are left to _encode_outside.
    pp = np.int64(p)
    for i in range(v.shape[0]):
        x = v[i]
        out[i] = _mont_mul(np.uint32(x if 0 <= x < pp else 0), r2, p, mu)


@njit(cache=True)
def _encode_outside(v, out, reduce, p, mu, r2):
    # The values outside [0, p): reduced mod p (reduce), or the first one's
    # index returned (else -1).
    pp = np.int64(p)
    for i in range(v.shape[0]):
        x = v[i]
        if x < 0 or x >= pp:
            if not reduce:
                return i
            out[i] = mont_mul(np.uint32(x % pp), r2, p, mu)  # % as in Python: in [0, p)
    return -1


@njit(parallel=True, cache=True)
def _encode_kernel(v, out, reduce, p, mu, r2):
    # Runs of CPU_LANE_RUN values: the vectorized conversion, then the run's
    # values out of range while it is in cache.  Returns the first index
    # out of range (not reduce), else -1.  Launched as its serial twin until
    # a parallel kernel has started the threading layer (see _conversion).
    n = v.shape[0]
    run = CPU_LANE_RUN
    runs = (n + run - 1) // run
    first = np.empty(runs, np.int64)
    for c in prange(runs):
        lo = c * run
        hi = min(n, lo + run)
        _encode_run(v[lo:hi], out[lo:hi], p, mu, r2)
        i = _encode_outside(v[lo:hi], out[lo:hi], reduce, p, mu, r2)
        first[c] = lo + i if i >= 0 else -1
    for c in range(runs):
        if first[c] >= 0:
            return first[c]
    return -1


@njit_lanes64
def _decode_run(w, out, p, mu):
    # out[i] = w[i] * 2**-32 mod p (one Montgomery reduction); returns the
    # count of non-canonical words (>= p), which decode refuses.
    bad = 0
    for i in range(w.shape[0]):
        x = w[i]
        bad += x >= p
        out[i] = _monty_reduce(np.uint64(x), p, mu)
    return bad


@njit(parallel=True, cache=True)
def _decode_kernel(w, out, p, mu):
    # Runs of _decode_run, their counts added (threads as _encode_kernel).
    n = w.shape[0]
    run = CPU_LANE_RUN
    bad = 0
    for c in prange((n + run - 1) // run):
        lo = c * run
        hi = min(n, lo + run)
        bad += _decode_run(w[lo:hi], out[lo:hi], p, mu)
    return bad


def _conversion(kernel, n):
    """The conversion ``kernel`` to launch over ``n`` values
    (:func:`_once_layer_runs`): a conversion at the boundary to integers must
    not *start* the layer, as data is often built before the workers fork."""
    return _once_layer_runs(kernel, _tasks(n, CPU_LANE_RUN), n)


def _once_layer_runs(kernel, tasks, words):
    """``kernel``'s serial twin until the threading layer runs in this
    process, then as :func:`.cpu_threads.sized` picks: for the calls that
    must not *start* the layer (the conversions, the sums), as a process
    forked after it (multiprocessing's default on Linux) could not run the
    parallel kernels on GNU OpenMP.  Once a parallel kernel has started it,
    they use it as well."""
    if layer_running():
        return sized(kernel, tasks, words)
    return serial_twin(kernel)


def encode(v, out, reduce, f):
    """``out = v * 2**32 mod p`` (Montgomery words) for int64 ``v``; both flat
    ``(n,)``.  Values outside ``[0, p)`` are reduced mod p (as Python's ``%``)
    with ``reduce``, else the index of the first is returned (-1: none) and
    ``out`` holds the word of 0 at every out-of-range position (the others
    are encoded).  Other dtypes are refused (``TypeError``): uint64 values past 2**63 would
    read as negative.  It starts no threading layer: serial until a
    parallel kernel has started one (see _conversion)."""
    check_encode("field_cpu.encode", f, v, out, reduce)
    p, mu, _, _ = kernel_words(f)
    return int(_conversion(_encode_kernel, v.shape[0])(v, out, reduce, p, mu,
                                                         np.uint32(f.r2_mod_p)))


def decode(w, out, f):
    """``out = w * 2**-32 mod p`` (canonical values) for flat ``(n,)`` uint32
    words; ``out`` may be ``w``.  Returns whether every word was canonical
    (``< p``; a word ``>= p`` gives that of ``w mod p``).  Threads as
    :func:`encode`."""
    check_decode("field_cpu.decode", f, w, out)
    p, mu, _, _ = kernel_words(f)
    return _conversion(_decode_kernel, w.shape[0])(w, out, p, mu) == 0


# Every launcher checks its arguments first (launch_checks: O(1), metadata
# only), then picks its kernel with cpu_threads.sized: the serial twin where
# one thread is enough (no threading layer, no launch cost), else the
# parallel kernel under the thread/fork guard.  Elementwise loops pass their
# output words; the heavier chunked kernels (products, inverses, powers) go
# serial only as one task.


def base_map1(op, a, out, f):
    """Base field ``out[i] = op(a[i])`` for ``op`` NEG, SQUARE or INV (the
    inverse of 0 is 0); ``a``, ``out`` ``(n,)``.  ``out`` may be ``a`` itself
    for NEG and SQUARE, never for INV."""
    check_map("field_cpu.base_map1", f, op, UNARY, IN_PLACE_UNARY, 1, out, a)
    p, mu, _, one = kernel_words(f)
    n = out.shape[0]
    if op == OP_INV:  # the batch trick: same words, ~90x faster than Fermat each
        _base_batch_inv(a, out, p, mu, one)
    else:
        sized(_base_map1_kernel, n, n)(op, a, out, p, mu, one)


def base_map2(op, a, b, out, f):
    """Base field ``out[i] = a[i] op b[i]`` for ``op`` ADD, SUB or MUL; all
    ``(n,)``; ``out`` may be ``a`` or ``b`` itself."""
    check_map("field_cpu.base_map2", f, op, BINARY, BINARY, 1, out, a, b)
    p, mu, _, _ = kernel_words(f)
    n = out.shape[0]
    sized(_base_map2_kernel, n, n)(op, a, b, out, p, mu)


def ext4_map1(op, a, out, f):
    """Extension ``out[i] = op(a[i])`` for ``op`` NEG, SQUARE or INV (the inverse
    of 0 is 0); ``a``, ``out`` ``(n, 4)`` or flat ``(4 n,)``.  ``out`` may be
    ``a`` itself for NEG and SQUARE, never for INV."""
    n = check_map("field_cpu.ext4_map1", f, op, UNARY, IN_PLACE_UNARY, 4, out, a)
    p, mu, wm, one = kernel_words(f)
    a, out = a.reshape(-1), out.reshape(-1)  # flat words: views (checked C-contiguous)
    if op == OP_NEG:  # coefficient-wise: the base kernel over the words vectorizes
        sized(_base_map1_kernel, 4 * n, 4 * n)(op, a, out, p, mu, one)
    elif op == OP_SQUARE:  # the vectorized product (the per-element loop is not)
        sized(_ext4_mul_kernel, _tasks(n, CPU_LANE_RUN))(a, a, out, p, mu, wm)
    else:  # OP_INV: the batch trick on the norms
        sized(_ext4_batch_inv_kernel, _tasks(n, BATCH_INV_CHUNK))(
            a, out, BATCH_INV_CHUNK, p, mu, wm, one)


def ext4_map2(op, a, b, out, f):
    """Extension ``out[i] = a[i] op b[i]`` for ``op`` ADD, SUB or MUL; each array
    ``(n, 4)`` or flat ``(4 n,)``; ``out`` may be ``a`` or ``b`` itself."""
    check_map("field_cpu.ext4_map2", f, op, BINARY, BINARY, 4, out, a, b)
    p, mu, wm, _ = kernel_words(f)
    _ext4_map2_words(op, a.reshape(-1), b.reshape(-1), out.reshape(-1), p, mu, wm)


def _ext4_map2_words(op, a, b, out, p, mu, wm):
    # elementwise a op b on flat words
    words = out.shape[0]
    if op == OP_MUL:
        sized(_ext4_mul_kernel, _tasks(words // 4, CPU_LANE_RUN))(a, b, out, p, mu, wm)
    else:  # add, sub: coefficient-wise, the base kernel over the words (6x faster
        # at 2**22 than the per-element loop, which does not vectorize)
        sized(_base_map2_kernel, words, words)(op, a, b, out, p, mu)


def base_map2_bcast(op, a, a_step, b, b_step, out, f, run=0, a_row=0, b_row=0):
    """``out[i] = a[ja(i)] op b[jb(i)]`` (``op`` ADD, SUB or MUL) with
    ``jx(i) = (i // run) x_row + (i % run) x_step``; all arrays flat ``(.,)`` words.

    Steps are 0 (the operand is the same along a run of ``run`` elements) or
    1, in any combination; ``run = 0`` (or ``>= n``) means one run of all
    ``n`` elements, so ``jx(i) = i x_step`` and the rows are unused.  Else
    ``n`` is a multiple of ``run``, and a row ``x_row`` -- where the
    operand's next run starts -- is 0 (the same for every run), 1 (a column:
    one element per run) or ``run`` (elementwise).  Each operand holds at
    least the elements those indices reach.  ``out`` may be an operand
    itself only where that operand is read elementwise (``jx(i) = i``).  The
    same contract in every backend (``field_cupy``, ``field_cuda_numba``).
    """
    n, rows, run, a_step, b_step, a_row, b_row = check_bcast(
        "field_cpu.base_map2_bcast", f, op, a, a_step, 1, b, b_step, 1, out, 1, run, a_row,
        b_row)
    if not n:
        return
    p, mu, wm, _ = kernel_words(f)
    if rows == 1:
        sized(_base_map2_bcast_kernel, n, n)(op, a, a_step, b, b_step, out, p, mu)
        return
    if not a_step and not b_step:  # one value per row
        sized(_fixed_rows_kernel, rows, n)(op, rows, run, a, 1, a_row, b, 1, b_row, out, 1,
                                           p, mu, wm)
        return
    swap = a_step == 0  # x: the operand that steps along a run (one does, see above)
    (x, x_row), (y, y_row, y_step) = ((b, b_row), (a, a_row, a_step)) if swap else \
        ((a, a_row), (b, b_row, b_step))
    kind = {OP_ADD: _ADD, OP_SUB: _RSUB if swap else _SUB, OP_MUL: _MUL}[op]
    form = 4 if y_step else 5
    sized(_rows_kernel(form, kind), rows * _tasks(run, CPU_LANE_RUN), n)(
        form, rows, run, x, 1, x_row, y, 1, y_row, y_step, np.uint32(0),
        out, 1, p, mu, wm)  # (wm unread by base forms; a uint32 as ext4_map2_bcast
    # passes: an int 0, typed int64, compiled the kernel a second time, 8.5 s)


def ext4_map2_bcast(op, a, a_step, a_deg, b, b_step, b_deg, out, f, run=0, a_row=0, b_row=0):
    """Extension ``out[i] = a[ja(i)] op b[jb(i)]`` (``op`` ADD, SUB or MUL),
    element indices ``jx`` as in :func:`base_map2_bcast` (steps 0 or 1 in any
    combination, rows 0, 1 or ``run``).

    ``*_deg`` is 4 for an extension operand -- ``(m, 4)`` or flat ``(4 m,)``
    words -- or 1 for a base operand, ``(m,)`` words taken as its embedding
    ``(s, 0, 0, 0)``; at least one operand is an extension one.  ``out`` is
    ``(n, 4)`` or ``(4 n,)``, and may be an extension operand itself only
    where that operand is read elementwise.  The same contract in every
    backend (``field_cupy``, ``field_cuda_numba``).
    """
    n, rows, run, a_step, b_step, a_row, b_row = check_bcast(
        "field_cpu.ext4_map2_bcast", f, op, a, a_step, a_deg, b, b_step, b_deg, out, 4, run,
        a_row, b_row)
    if not n:
        return
    p, mu, wm, _ = kernel_words(f)
    # flat words (views; the object layer passes them flat already)
    a, b = (a if a.ndim == 1 else a.reshape(-1)), (b if b.ndim == 1 else b.reshape(-1))
    out = out if out.ndim == 1 else out.reshape(-1)
    if rows == 1 and a_step and b_step and a_deg == 4 and b_deg == 4:
        _ext4_map2_words(op, a, b, out, p, mu, wm)  # no broadcast: the plain kernels
        return
    if not a_step and not b_step:  # one value per row
        sized(_fixed_rows_kernel, rows, 4 * n)(op, rows, run, a, a_deg, a_row, b, b_deg,
                                               b_row, out, 4, p, mu, wm)
        return
    # x: the operand that steps along a run (the extension one if both do), y
    # the other; swap: x is the right operand
    swap = a_step == 0 or (a_deg == 1 and b_step == 1)
    (x, x_deg, x_row), (y, y_step, y_deg, y_row) = \
        ((b, b_deg, b_row), (a, a_step, a_deg, a_row)) if swap else \
        ((a, a_deg, a_row), (b, b_step, b_deg, b_row))
    kind = {OP_ADD: _ADD, OP_SUB: _RSUB if swap else _SUB, OP_MUL: _MUL}[op]
    m1 = np.uint32(0xFFFFFFFF if op == OP_MUL else 0)
    unit = 1  # units of a run: elements, or words (form 4)
    if x_deg == 1:  # base words x, one extension element y per run
        form = 2
    elif y_step and y_deg == 1:
        form = 1
    elif y_step:  # two extension operands stepping along the runs
        form, unit = (6, 1) if op == OP_MUL else (4, 4)
    else:
        form = 3 if y_deg == 4 and op == OP_MUL else 0  # mul: commutative
    # (products are heavier than a word of add: only one task goes serial)
    words = out.shape[0] if op != OP_MUL else None
    sized(_rows_kernel(form, kind), rows * _tasks(run * unit, CPU_LANE_RUN), words)(
        form, rows, run * unit, x, x_deg // unit, x_row * unit, y, y_deg // unit,
        y_row * unit, y_step, m1, out, 4 // unit, p, mu, wm)


def base_pow(a, e_hi, e_lo, nbits, out, f):
    """Base field ``out[i] = a[i] ** e`` for ``e = e_hi 2**64 + e_lo < 2**nbits``
    (limbs below 2**64, ``nbits <= 128``; ``a ** 0`` is one, also for 0);
    ``a``, ``out`` ``(n,)``, ``out`` never ``a`` itself."""
    n, (e_hi, e_lo, nbits) = check_pow("field_cpu.base_pow", f, 1, a, e_hi, e_lo, nbits, out)
    p, mu, wm, one = kernel_words(f)
    sized(_pow_kernel, _tasks(n, CPU_LANE_RUN))(1, a, e_hi, e_lo, nbits, out, p, mu, wm, one)


def ext4_pow(a, e_hi, e_lo, nbits, out, f):
    """Extension ``out[i] = a[i] ** e``, ``e`` as in :func:`base_pow`; ``a``,
    ``out`` ``(n, 4)`` or flat ``(4 n,)``, ``out`` never ``a`` itself."""
    n, (e_hi, e_lo, nbits) = check_pow("field_cpu.ext4_pow", f, 4, a, e_hi, e_lo, nbits, out)
    p, mu, wm, one = kernel_words(f)
    sized(_pow_kernel, _tasks(n, CPU_LANE_RUN))(
        4, a.reshape(-1), e_hi, e_lo, nbits, out.reshape(-1), p, mu, wm, one)


def base_batch_inv(a, out, f):
    """Base field ``out[i] = a[i] ** -1`` (0 for 0) by Montgomery's batch trick,
    the same words as ``base_map1(OP_INV, ...)``; ``a``, ``out`` ``(n,)``,
    ``out`` never ``a`` itself."""
    check_map("field_cpu.base_batch_inv", f, OP_INV, None, (), 1, out, a)
    p, mu, _, one = kernel_words(f)
    _base_batch_inv(a, out, p, mu, one)


def base_first_zero(a, f):
    """Index of the first element of ``a`` that is zero (its word = 0 mod p),
    or -1; ``a`` ``(n,)``.  Chunks count their zeros in parallel, then the
    first chunk with one is searched: the zero check of the inverses."""
    n = check_first_zero("field_cpu.base_first_zero", f, a, 1)
    return _first_zero(a, 1, n, f)


def ext4_first_zero(a, f):
    """Index of the first extension element of ``a`` whose four words are all
    0 mod p, or -1; ``a`` ``(n, 4)`` or flat ``(4 n,)``."""
    n = check_first_zero("field_cpu.ext4_first_zero", f, a, 4)
    return _first_zero(a, 4, n, f)


def _first_zero(a, deg, n, f):
    if n == 0:
        return -1
    w, p = a.reshape(-1), kernel_words(f)[0]
    counts = np.empty(_tasks(n, ZERO_SCAN_CHUNK), np.int64)
    sized(_zero_counts_kernel, counts.shape[0])(w, deg, counts, ZERO_SCAN_CHUNK, p)
    hit = np.flatnonzero(counts)
    if hit.size == 0:
        return -1
    lo = int(hit[0]) * ZERO_SCAN_CHUNK
    return int(_first_zero_in(w, deg, lo, min(n, lo + ZERO_SCAN_CHUNK), p))


def base_sum_rows(a, rows, out, f):
    """Base field row sums ``out[r] = sum_j a[r run + j]`` (mod p; ``run =
    n / rows``): ``a`` flat ``(n,)`` words split into ``rows`` equal rows,
    ``out`` ``(rows,)``, sharing no memory with ``a``.  Any words, read mod
    p; canonical results (the words are added exactly, Montgomery form
    being linear).  ``rows = 0`` takes an empty ``a``; an empty row sums to
    zero.  Rows run in parallel once another kernel has started the
    threading layer; until then, and for one row, on the calling thread (a
    sum never starts the layer, as ``encode``/``decode`` do not: a process
    forked afterwards could not run parallel kernels on GNU OpenMP)."""
    rows = check_sum_rows("field_cpu.base_sum_rows", f, a, 1, rows, out)
    sum_rows_trusted(1, a, rows, out, f)


def ext4_sum_rows(a, rows, out, f):
    """Extension row sums, coefficient by coefficient: ``a`` flat ``(4 n,)``
    words of ``n`` elements split into ``rows`` equal rows, ``out`` ``(rows,
    4)`` or ``(4 rows,)`` (otherwise as :func:`base_sum_rows`)."""
    rows = check_sum_rows("field_cpu.ext4_sum_rows", f, a, 4, rows, out)
    sum_rows_trusted(4, a, rows, out, f)


def sum_rows_trusted(degree, a, rows, out, f):
    """:func:`base_sum_rows` (``degree`` 1) or :func:`ext4_sum_rows` (4)
    without their checks: the object layer's ``sum``, on a C-contiguous
    array it checked and an ``out`` of its own.  The launchers run it after
    their checks."""
    if rows:  # (the sums were NumPy's, and must not start the threading layer either)
        _once_layer_runs(_sum_rows_kernel, rows, a.shape[0])(
            a, np.int64(rows), np.int64(a.shape[0] // (rows * degree)), np.int64(degree),
            out.reshape(-1), np.int64(CPU_SUM_CHUNK), kernel_words(f)[0])


def base_mle_fold(v, r, out, f):
    """Base field MLE fold ``out[k] = v[2k] + r (v[2k+1] - v[2k])``: the lowest
    variable of the values ``v`` ``(2 n,)`` bound to the one element ``r``
    ``(1,)``; ``out`` ``(n,)`` shares memory with neither (words read mod p,
    results canonical: those of ``add(lo, mul(r, sub(hi, lo)))``)."""
    check_mle_fold("field_cpu.base_mle_fold", f, v, 1, r, 1, out, 1)
    mle_fold_trusted(1, v, 1, r, 1, out, f)


def ext4_mle_fold(v, v_deg, r, r_deg, out, f):
    """Extension MLE fold ``out[k] = v[2k] + r (v[2k+1] - v[2k])``.

    ``v`` holds ``2 n`` elements of ``v_deg`` words (4: ``(2 n, 4)`` or flat
    ``(8 n,)``; 1: base ``(2 n,)``, embedded), ``r`` one element of ``r_deg``
    words (``(4,)``, ``(1, 4)``, or base ``(1,)``), ``out`` ``(n, 4)`` or
    ``(4 n,)``, sharing memory with neither.  The same words as the
    extension's ``add(lo, mul(r, sub(hi, lo)))`` on the embeddings; a base
    side takes 4 products per element instead of an extension product's 16.
    """
    _, v_deg, r_deg = check_mle_fold("field_cpu.ext4_mle_fold", f, v, v_deg, r, r_deg, out,
                                     4)
    mle_fold_trusted(4, v, v_deg, r, r_deg, out, f)


def _fold_form(degree, v_deg, r_deg):
    """The form of :func:`_fold_run` for values of ``v_deg`` words and an
    ``r`` of ``r_deg`` words on the field of ``degree``."""
    return 0 if degree == 1 else 1 if v_deg == 1 else 2 if r_deg == 1 else 3


def _eq_form(degree, r_deg):
    """The form of :func:`_eq_split_run` for a coordinate of ``r_deg`` words."""
    return 0 if degree == 1 else 1 if r_deg == 1 else 2


def _canonical_rows(coords, f):
    # a point's words (nv, r_deg), canonical, as _with_element reads an element
    return (coords % np.uint32(f.p)).astype(np.uint32)


def mle_fold_trusted(degree, v, v_deg, r, r_deg, out, f):
    """:func:`base_mle_fold` (``degree`` 1) or :func:`ext4_mle_fold` (4)
    without their checks: the object layer's ``mle_fold`` and the folds of
    its ``mle_eval``, on arrays it made or checked (C-contiguous, ``out``
    sharing nothing with ``v``), so
    only the fold runs -- the checks cost more than a small fold.  The
    launchers run it after their checks."""
    form = _fold_form(degree, v_deg, r_deg)
    if degree == 1:
        _mle_fold(form, out.shape[0], v, r, 1, out, f, out.shape[0])
    else:
        _mle_fold(form, out.size // 4, v.reshape(-1), r.reshape(-1), r_deg, out.reshape(-1),
                  f, None)


def mle_eval_trusted(degree, v, v_deg, coords, f):
    """Every fold of ``mle_eval`` in one serial call: the multilinear
    extension of the ``2**nv`` elements ``v`` (``v_deg`` words each:
    C-contiguous, flat or ``(2**nv, 4)``; ``nv >= 1``) at the point of
    ``coords`` ``(nv, r_deg)`` (any words, read mod p), folded by
    ``coords[0]``, ``coords[1]``, ... as :func:`mle_fold_trusted` would fold
    it, one call each.  Returns the element as ``degree`` new words.
    Unchecked (the object layer's ``mle_eval``, for at most ``2
    CPU_LANE_RUN`` values: every fold one run, each was a dispatch of
    about 4 us)."""
    nv, r_deg = coords.shape
    p, mu, wm, _ = kernel_words(f)
    half = 1 << (nv - 1)
    a = np.empty(half * degree, np.uint32)
    b = np.empty(max(half // 2, 1) * degree, np.uint32)
    out = np.empty(degree, np.uint32)
    _fold_chain_kernel(_fold_form(degree, v_deg, r_deg), _fold_form(degree, degree, r_deg),
                       v.reshape(-1), _canonical_rows(coords, f), a, b, out, p, mu, wm)
    return out


def _mle_fold(form, n, v, r, r_deg, out, f, words):
    _with_element(_mle_fold_kernel, form, n, v, r, r_deg, (out,), f, words)


def base_eq_split(a, r, lo, hi, f):
    """Base field eq-table doubling ``lo[k], hi[k] = a[k] - a[k] r, a[k] r``:
    each entry ``a[k] = eq(point, b)`` split by the next variable's
    coordinate ``r`` ``(1,)`` into its two children; ``a``, ``lo``, ``hi``
    ``(n,)``.  ``lo`` may be ``a`` itself (the table doubles in place:
    ``lo = T[:m]``, ``hi = T[m:2m]``); ``hi`` shares memory with nothing.
    The words of ``mul`` then ``sub``."""
    check_eq_split("field_cpu.base_eq_split", f, a, r, 1, lo, hi, 1)
    eq_split_trusted(1, a, r, 1, lo, hi, f)


def ext4_eq_split(a, r, r_deg, lo, hi, f):
    """Extension eq-table doubling, as :func:`base_eq_split`: ``a``, ``lo``,
    ``hi`` ``(n, 4)`` or flat ``(4 n,)``; ``r`` one element of ``r_deg``
    words (``(4,)``, ``(1, 4)``, or base ``(1,)``: 4 products per entry
    instead of an extension product's 16)."""
    _, r_deg = check_eq_split("field_cpu.ext4_eq_split", f, a, r, r_deg, lo, hi, 4)
    eq_split_trusted(4, a, r, r_deg, lo, hi, f)


def eq_split_trusted(degree, a, r, r_deg, lo, hi, f):
    """:func:`base_eq_split` (``degree`` 1) or :func:`ext4_eq_split` (4)
    without their checks: the object layer's ``eq_table``, which built the
    table (C-contiguous, ``hi`` disjoint from the rest) and checked the
    point, so only the doubling runs -- the checks cost more than a small
    doubling (``E.eq_table`` of 4 extension coordinates: 38 -> 24 us).  The
    launchers run it after their checks; ``r`` holds ``r_deg`` words."""
    form = _eq_form(degree, r_deg)
    if degree == 1:
        _eq_split(form, a.shape[0], a, r, 1, lo, hi, f, a.shape[0])
    else:
        _eq_split(form, a.size // 4, a.reshape(-1), r.reshape(-1), r_deg, lo.reshape(-1),
                  hi.reshape(-1), f, None)


def eq_table_trusted(degree, table, coords, f):
    """All doublings of an eq table, ``table[0]`` its start (one, as the
    object layer's ``eq_table`` sets it): doubling ``j`` makes ``table[:2 m]``
    of ``table[:m]`` (``m = 2**j``) as :func:`eq_split_trusted` with ``a =
    lo = table[:m]``, ``hi = table[m:2 m]`` and ``r = coords[j]``.
    ``coords``: ``(nv, r_deg)`` uint32 words of the point (any words, read
    mod p), ``table`` ``2**nv`` elements of ``degree`` words, C-contiguous
    (flat or ``(2**nv, 4)``).  Unchecked (the object layer's table and
    checked point).  The doublings of at most ``CPU_LANE_RUN`` entries run in
    one serial call (each was a dispatch of about 4 us), the larger ones one
    parallel launch each."""
    nv, r_deg = coords.shape
    words = _canonical_rows(coords, f)
    form = _eq_form(degree, r_deg)
    steps = min(nv, CPU_LANE_RUN.bit_length())  # m = 2**j <= CPU_LANE_RUN
    flat = table.reshape(-1)
    p, mu, wm, _ = kernel_words(f)
    if steps:
        _eq_chain_kernel(form, steps, flat, words, p, mu, wm)
    m = 1 << steps
    d = degree
    for j in range(steps, nv):  # the larger doublings, one launch each
        a = flat[:d * m]
        eq_split_trusted(degree, a, words[j], r_deg, a, flat[d * m:2 * d * m], f)
        m *= 2


def _eq_split(form, n, a, r, r_deg, lo, hi, f, words):
    _with_element(_eq_split_kernel, form, n, a, r, r_deg, (lo, hi), f, words)


_ZERO = np.uint32(0)


def _with_element(kernel, form, n, x, r, r_deg, outs, f, words):
    # kernel(form, n, x, r0, r1, r2, r3, *outs, p, mu, wm) over n outputs, in
    # runs of CPU_LANE_RUN: the one element r as the canonical words of four
    # uint32 scalars (zeros past a base element's one), taken by value
    if not n:
        return
    p, mu, wm, _ = kernel_words(f)
    # (tolist: indexing the array word by word cost ~1 us of a small call)
    rs = [np.uint32(v % f.p) for v in r.reshape(-1)[:r_deg].tolist()] + [_ZERO] * (4 - r_deg)
    sized(kernel, _tasks(n, CPU_LANE_RUN), words)(form, n, x, *rs, *outs, p, mu, wm)


def _base_batch_inv(a, out, p, mu, one):
    sized(_base_batch_inv_kernel, _tasks(out.shape[0], BATCH_INV_CHUNK))(
        a, out, BATCH_INV_CHUNK, p, mu, one)
