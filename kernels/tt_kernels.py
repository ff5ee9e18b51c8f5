"""Numba CPU kernels of the uniform Tucker tensor train layer.

Array layout (the object layer flattens the stack axes into one axis ``S``):

* ``U`` -- Tucker supercore, ``(d, S, n, N)``, ``U[i, s, j, o]``;
* ``G`` -- TT supercore, ``(d, S, r, n, r)``, ``G[i, s, a, j, b]``.

The structure of a train (which Tucker slots ``j`` and which bond slots
``a``/``b`` are real) is host data.  The ``build_*`` factories turn it into
index tables (see :func:`mask_index_table`) that the returned kernel holds
as constants, so Numba compiles them into the machine code: one compiled
kernel per structure, supercores as the only run-time data; cached on disk,
so a later process meeting the structure loads it (:class:`StructureKernel`).
Every loop runs over real slots only, so whatever the padding holds is never
read.

Kernels take plain arrays, write into ``out`` and scratch arrays the caller
allocates and allocate nothing; they validate nothing but the length of
scratch that the structure sizes (Numba does not bounds-check).  The
boundary bonds are summed against vectors of ones (over the real slots).

Each per-structure kernel computes the stack elements ``s_begin <= s <
s_end`` (its last two arguments) and is compiled with ``nogil=True``: stack
element ``s`` writes only ``out[s]`` and its computation does not depend on
the range, so disjoint ranges may run on several Python threads at once --
one scratch set per thread -- and give the bytes one call over the whole
stack gives (the object layer's launchers do this for large stacks).

Nothing here imports from the object layer (``zorch_nb``).
"""
import base64
import hashlib
import math
import zlib

import numba
import numpy as np

from . import source_cache
from .jit import njit  # numba.njit, cache keyed on every kernel source


def mask_index_table(mask):
    """Index table of the True slots of a boolean mask.

    Parameters
    ----------
    mask : numpy.ndarray of bool, shape ``(..., m)``

    Returns
    -------
    idx : numpy.ndarray of int64, shape ``(..., m)``
        ``idx[..., :cnt]`` are the True positions in increasing order; the
        rest is 0 and never read.
    cnt : numpy.ndarray of int64, shape ``(...)``
        Number of True slots.
    """
    mask = np.asarray(mask, dtype=bool)
    cnt = mask.sum(axis=-1).astype(np.int64)
    # A stable sort of "not real" puts the real positions first, in order.
    idx = np.argsort(~mask, axis=-1, kind="stable").astype(np.int64)
    idx[np.arange(mask.shape[-1]) >= cnt[..., None]] = 0
    return idx, cnt


# Products with at least this many multiply-adds go to BLAS (np.dot with
# ``out``, no allocation); smaller ones are cheaper as plain loops.
BLAS_MIN_WORK = 8192


@njit(cache=True)
def _core_max_abs(core):
    # Largest magnitude in one core (2-d or 3-d; 0.0 if empty); -1.0 at the
    # first inf or NaN
    big = 0.0
    if core.ndim == 2:
        for a in range(core.shape[0]):
            for b in range(core.shape[1]):
                v = abs(core[a, b])
                if not math.isfinite(v):
                    return -1.0
                big = max(big, v)
    else:
        for a in range(core.shape[0]):
            for j in range(core.shape[1]):
                for b in range(core.shape[2]):
                    v = abs(core[a, j, b])
                    if not math.isfinite(v):
                        return -1.0
                    big = max(big, v)
    return big


@njit(cache=True)
def core_exponent_span(U, G):
    """``max_s sum_i (|e(U[i, s])| + |e(G[i, s])|)`` with ``e(core)`` the
    ``frexp`` exponent of the core's largest magnitude (0 for a zero core),
    over the supercores ``U (d, S, n, N)`` and ``G (d, S, r, n, r)`` read
    whole, padding too (any layout); -1 if an entry is inf or NaN.

    How far from 1 the products of a chain over the cores can stray: the
    object layer rescales the cores where this is large (``tt_ops._in_range``).
    """
    worst = 0
    for s in range(U.shape[1]):
        span = 0
        for i in range(U.shape[0]):
            for big in (_core_max_abs(U[i, s]), _core_max_abs(G[i, s])):
                if big < 0:
                    return -1
                if big > 0:
                    span += abs(math.frexp(big)[1])
        worst = max(worst, span)
    return worst


# The exponent of "no live entry": an offset below half of it marks the
# entries behind a zero, whose own exponents (above -1100) cannot lift it back
BALANCE_NONE = np.iinfo(np.int32).min // 4


@njit(cache=True, forceinline=True)
def _field_exponent(word, mant_bits, exp_mask):
    # frexp's exponent of a normal x from its bits; BALANCE_NONE for 0, inf,
    # NaN and subnormals (exponent field 0: the caller's second pass)
    field = (np.int64(word) >> mant_bits) & exp_mask
    normal = (field != 0) & (field != exp_mask)
    return field - ((exp_mask >> 1) - 1) if normal else BALANCE_NONE


@njit(cache=True, forceinline=True)
def _is_subnormal(x, word, mant_bits, exp_mask):
    return (x != 0) & ((np.int64(word) >> mant_bits) & exp_mask == 0)


@njit(cache=True, forceinline=True)
def _pow2_bits(k):
    # the bits of the float64 2.0**k, -1022 <= k <= 1023
    return (k + 1023) << 52


def balance_powers_scratch(d, n, r):
    """One scratch set of :func:`balance_powers` for cores of ``d``, ``n``, ``r``:
    ``(cu, dead_u, off, carry, right, dead, factor_bits)``."""
    return (np.zeros((d, n), dtype=np.int64), np.zeros((d, n), dtype=np.bool_),
            np.zeros((r, n), dtype=np.int64), np.zeros(r, dtype=np.int64),
            np.zeros(r, dtype=np.int64), np.zeros(r, dtype=np.bool_),
            np.zeros(max(r, 1), dtype=np.int64))


@njit(cache=True, nogil=True)
def balance_powers(U, G, U_bits, G_bits, U_out, G_out, e_out, cu, dead_u, off, carry, right,
                   dead, factor_bits, s_begin, s_end):
    """Move powers of two along each train so that every Tucker row and every
    TT core's slice of a right bond index has its largest live entry in
    ``[0.5, 1)``; stack elements ``s_begin <= s < s_end``.

    Parameters
    ----------
    U, G : float32 or float64 arrays ``(d, S, n, N)``, ``(d, S, r, n, r)``
        Masked supercores (padding zero).  Read only.
    U_bits, G_bits : ``U`` and ``G`` viewed as unsigned integers of their width.
    U_out, G_out : arrays shaped as ``U`` and ``G``
        The balanced cores: the train of ``U``, ``G`` is ``2**e_out[s]`` times
        theirs.
    e_out : int32 array ``(S,)``
    cu, dead_u, off, carry, right, dead, factor_bits : scratch
        One set per thread, :func:`balance_powers_scratch`.

    Notes
    -----
    Exponents are ``frexp``'s; an entry is live where finite and nonzero.  A
    Tucker row's exponent ``c`` (its live entries' largest, 0 for none) is
    taken out of the row and given to the TT core's slice of that mode
    index; then core by core, the offsets carried in (``carry[a] + c[j]``, or
    ``BALANCE_NONE`` behind a dead bond index or a dead Tucker row) plus the
    entries' own exponents give each right bond index ``b`` its exponent
    (the largest; over the whole core for the last, whose boundary slots
    share one), which is taken out of the slice and carried on (0 and dead
    where no live entry or only entries behind a dead one reach it).  Each
    entry is scaled once, ``ldexp(x, offset - exponent)``.  The last carry is
    ``e_out``.  The same bits as ``tt_ops._balanced``'s array version, which
    the CuPy path runs.

    Why the bits: Numba's ``math.frexp`` and ``math.ldexp`` cost ~3.7 and
    ~5.2 ns an entry (2-core AMD EPYC), more than NumPy's whole-array passes.
    Exponents are read from the words (subnormals, rare, from ``frexp`` in
    a second pass), and where ``-1022 <= k <= 1023`` ``ldexp(x, k)`` is
    ``x * 2.0**k``: IEEE's product is ldexp's correctly rounded result (for
    float32 ``x`` exact in float64, rounded once on the store), inf and NaN
    staying themselves.  Other shifts (behind a dead index, or past the
    range) take ``math.ldexp``.
    """
    d, _, n, N = U.shape
    r = G.shape[2]
    mant_bits = 52 if U.itemsize == 8 else 23
    exp_mask = 0x7FF if U.itemsize == 8 else 0xFF
    factor = factor_bits.view(np.float64)  # 2.0**k, built from its bits
    for s in range(s_begin, s_end):
        for i in range(d):
            for j in range(n):
                top = BALANCE_NONE
                subnormal = False
                for o in range(N):
                    x, w = U[i, s, j, o], U_bits[i, s, j, o]
                    top = max(top, _field_exponent(w, mant_bits, exp_mask))
                    subnormal |= _is_subnormal(x, w, mant_bits, exp_mask)
                if subnormal:
                    for o in range(N):
                        if _is_subnormal(U[i, s, j, o], U_bits[i, s, j, o], mant_bits,
                                         exp_mask):
                            top = max(top, math.frexp(U[i, s, j, o])[1])
                dead_u[i, j] = top == BALANCE_NONE
                c = 0 if dead_u[i, j] else top
                cu[i, j] = c
                if -1023 <= c <= 1022:  # (2.0**-c a normal float64)
                    factor_bits[0] = _pow2_bits(-c)
                    for o in range(N):
                        U_out[i, s, j, o] = U[i, s, j, o] * factor[0]
                else:
                    for o in range(N):
                        U_out[i, s, j, o] = math.ldexp(U[i, s, j, o], int(-c))
        carry[:] = 0
        dead[:] = False
        for i in range(d):
            right[:] = BALANCE_NONE
            subnormal = False
            for a in range(r):
                for j in range(n):
                    if dead[a] or dead_u[i, j]:
                        off[a, j] = BALANCE_NONE
                    else:
                        off[a, j] = carry[a] + cu[i, j]
                    o = off[a, j]
                    for b in range(r):
                        x, w = G[i, s, a, j, b], G_bits[i, s, a, j, b]
                        right[b] = max(right[b], _field_exponent(w, mant_bits, exp_mask) + o)
                        subnormal |= _is_subnormal(x, w, mant_bits, exp_mask)
            if subnormal:
                for a in range(r):
                    for j in range(n):
                        for b in range(r):
                            x = G[i, s, a, j, b]
                            if _is_subnormal(x, G_bits[i, s, a, j, b], mant_bits, exp_mask):
                                right[b] = max(right[b], math.frexp(x)[1] + off[a, j])
            if i == d - 1 and r > 0:  # (the boundary bond's slots are summed: one scale)
                right[:] = right.max()
            for b in range(r):
                # (a non-live entry's BALANCE_NONE + offset also lands below half of it)
                dead[b] = right[b] < BALANCE_NONE // 2
                if dead[b]:
                    right[b] = 0
            # the range of right (0 at the dead b); unread where r == 0
            low, high = (right.min(), right.max()) if r > 0 else (0, 0)
            for a in range(r):
                for j in range(n):
                    o = off[a, j]
                    if -1022 <= o - high and o - low <= 1023:
                        for b in range(r):
                            factor_bits[b] = _pow2_bits(o - right[b])
                        for b in range(r):
                            G_out[i, s, a, j, b] = G[i, s, a, j, b] * factor[b]
                    else:
                        for b in range(r):
                            x = G[i, s, a, j, b]
                            G_out[i, s, a, j, b] = x if x == 0 else math.ldexp(x, int(o - right[b]))
            carry[:] = right
        e_out[s] = carry[0] if r > 0 else 0


@njit(cache=True)
def _gemm_nn(A, B, C, m, k, n):
    """``C[:m*n] = A[:m*k] @ B[:k*n]`` (row-major flat blocks)."""
    if m * k * n >= BLAS_MIN_WORK:
        np.dot(A[: m * k].reshape(m, k), B[: k * n].reshape(k, n), C[: m * n].reshape(m, n))
        return
    for i in range(m):
        for j in range(n):
            C[i * n + j] = 0.0
        for kk in range(k):
            a = A[i * k + kk]
            for j in range(n):
                C[i * n + j] += a * B[kk * n + j]


@njit(cache=True)
def _gemm_tn(A, B, C, k, m, n):
    """``C[:m*n] = A[:k*m].T @ B[:k*n]`` (row-major flat blocks)."""
    for q in range(m * n):
        C[q] = 0.0
    for kk in range(k):
        for i in range(m):
            a = A[kk * m + i]
            for j in range(n):
                C[i * n + j] += a * B[kk * n + j]


@njit(cache=True)
def _gather_tucker(U, i, s, tk_idx, cj, ni, out):
    """``out[pj, o] = U[i, s, tk_idx[i, s, pj], o]``: the real rows of Tucker core ``i``."""
    for pj in range(cj):
        for o in range(ni):
            out[pj * ni + o] = U[i, s, tk_idx[i, s, pj], o]


@njit(cache=True)
def _gather_tt(G, i, s, tt_idx, tk_idx, ca, cj, cb, out):
    """``out[pa, pj, pb] = G[i, s, a, j, b]`` over the real slots of TT core ``i``."""
    for pa in range(ca):
        a = tt_idx[i, s, pa]
        for pj in range(cj):
            j = tk_idx[i, s, pj]
            for pb in range(cb):
                out[(pa * cj + pj) * cb + pb] = G[i, s, a, j, tt_idx[i + 1, s, pb]]


def ut3_to_dense_scratch(shape, tk_cnt, tt_cnt):
    """Lengths ``(P, Q, H, Uc, Gc)`` of the scratch of :func:`build_ut3_to_dense`.

    Parameters
    ----------
    shape : tuple of int
        Real mode sizes ``N_i`` (length ``d``).
    tk_cnt : int array ``(d, S)``
        Live Tucker slots per core and stack element.
    tt_cnt : int array ``(d + 1, S)``
        Live slots per bond and stack element (``mask_index_table``'s count).

    Returns
    -------
    tuple of 5 int
        Python ints (no wrap), all sized by the live (compact) ranks, never
        the padded ``n`` and ``r``.  The kernel's partial product after
        cores ``0..i`` of stack element ``s`` has ``prod(shape[:i+1]) *
        tt_cnt[i + 1, s]`` entries: ``P`` holds the ones vector
        (``tt_cnt[0, s]``) and the products of odd ``i``, ``Q`` those of
        even ``i``, but the last, which goes straight into ``out`` (its bond
        is summed first).  ``H`` holds a core times its Tucker factor,
        ``tt_cnt[i] * N_i * tt_cnt[i + 1]``; ``Uc`` and ``Gc`` the gathered
        live blocks.
    """
    d = len(shape)
    cnt = np.asarray(tt_cnt, dtype=np.int64).reshape(d + 1, -1)
    tk = np.asarray(tk_cnt, dtype=np.int64).reshape(d, -1)
    need = [int(cnt[0].max()), 0]
    rows = 1
    for i in range(d - 1):
        rows *= int(shape[i])
        need[(i + 1) % 2] = max(need[(i + 1) % 2], rows * int(cnt[i + 1].max()))
    # (the last core's H holds tt_cnt[d - 1] * N sums, even with no live slot
    # on bond d)
    h = max(int((cnt[i] * (cnt[i + 1] if i < d - 1 else np.maximum(cnt[d], 1))).max())
            * int(shape[i]) for i in range(d))
    uc = max(int(tk[i].max()) * int(shape[i]) for i in range(d))
    gc = max(int((cnt[i] * tk[i] * cnt[i + 1]).max()) for i in range(d))
    return need[0], need[1], h, uc, gc


# ---- structure-specialized kernels ------------------------------------------
# Each kernel is one body below, taking the structure's index tables as its
# last arguments.  A structure's kernel is a generated function calling the
# body (force-inlined) with the tables as module globals, which Numba freezes
# into the machine code as constants -- as it did the closure variables of
# the kernels built here before.  Written to a file of the generated-kernel
# folder (:mod:`.source_cache`), it is compiled with ``cache=True``: a later
# process meeting the same structure loads the machine code (measured: a
# to_dense or inner kernel took 0.5-0.6 s to compile per structure, on
# every process start).


def build_ut3_to_dense(shape, tk_idx, tk_cnt, tt_idx, tt_cnt):
    """Build the dense-evaluation kernel for one structure.

    Parameters
    ----------
    shape : tuple of int
        Real mode sizes ``N_i`` (length ``d``).
    tk_idx, tk_cnt : index table of the Tucker mask ``(d, S, n)``.
    tt_idx, tt_cnt : index table of the TT mask ``(d + 1, S, r)``.

    Returns
    -------
    kernel(U, G, out, P, Q, H, Uc, Gc, s_begin, s_end)
        ``out[s] (prod(shape),)`` receives the C-ordered dense tensor of
        stack element ``s`` for ``s_begin <= s < s_end`` (``out (S,
        prod(shape))``; other rows untouched).
        Scratch, all of the supercore dtype, of the lengths
        :func:`ut3_to_dense_scratch` gives (at least; a shorter one raises
        ``ValueError`` before anything is written).  A
        :class:`StructureKernel`.

    Notes
    -----
    Per core the real block is gathered (``Uc[j, o]``, ``Gc[a, j, b]``, rank
    indices compact: positions among the real slots), then
    ``H[a, o, b] = sum_j Gc[a, j, b] Uc[j, o]`` and the left partial product
    grows by one mode, ``Q[(p, o), b] = sum_a P[p, a] H[a, o, b]``.  The
    last core's bond is summed in ``H`` first (``H[a, o] = sum_b H[a, o, b]``),
    so the last product is ``out[s]`` itself: the boundary rank multiplied
    the dense-sized scratch (64x the tensor at ``r_d = 64``).
    """
    need = ut3_to_dense_scratch(shape, tk_cnt, tt_cnt)
    return StructureKernel("ut3_to_dense", "_to_dense_body",
                           "U, G, out, P, Q, H, Uc, Gc, s_begin, s_end",
                           (np.array(shape, dtype=np.int64), tk_idx, tk_cnt, tt_idx, tt_cnt,
                            np.array(need, dtype=np.int64)))


@njit(cache=True, forceinline=True, nogil=True)
def _to_dense_body(U, G, out, P, Q, H, Uc, Gc, s_begin, s_end, sizes, tk_idx, tk_cnt, tt_idx,
                   tt_cnt, need):
    d = sizes.shape[0]
    n_stack = tk_cnt.shape[1]
    # Numba does not bounds-check: short scratch would corrupt memory
    if P.shape[0] < need[0] or Q.shape[0] < need[1] or H.shape[0] < need[2] or \
            Uc.shape[0] < need[3] or Gc.shape[0] < need[4]:
        raise ValueError("ut3_to_dense: scratch shorter than ut3_to_dense_scratch")
    for s in range(max(s_begin, 0), min(s_end, n_stack)):
        # every stack element starts from P, so P and Q hold the partial
        # products ut3_to_dense_scratch sizes them for whatever d's parity
        A, B = P, Q
        rows = 1
        ca = tt_cnt[0, s]
        for pa in range(ca):
            A[pa] = 1.0
        for i in range(d):
            ni = sizes[i]
            cb = tt_cnt[i + 1, s]
            cj = tk_cnt[i, s]
            _gather_tucker(U, i, s, tk_idx, cj, ni, Uc)
            _gather_tt(G, i, s, tt_idx, tk_idx, ca, cj, cb, Gc)
            for pa in range(ca):
                _gemm_tn(Uc, Gc[pa * cj * cb:], H[pa * ni * cb:], cj, ni, cb)
            if i == d - 1:
                # the last bond summed against ones now, in place (entry q
                # reads q * cb.. before anything past q is written), so
                # the last product has out[s]'s shape: written there, not
                # into dense-sized scratch (the sum below reads entry p
                # before it writes entry p, so aliasing is safe)
                for q in range(ca * ni):
                    acc = 0.0
                    for pb in range(cb):
                        acc += H[q * cb + pb]
                    H[q] = acc
                cb = 1
                B = out[s]
            _gemm_nn(A, H, B, rows, ca, ni * cb)
            rows *= ni
            ca = cb
            A, B = B, A
        for p in range(rows):
            acc = 0.0
            for pa in range(ca):
                acc += A[p * ca + pa]
            out[s, p] = acc


def build_ut3_inner(shape, x_tables, y_tables):
    """Build the inner-product kernel for one pair of structures.

    Parameters
    ----------
    shape : tuple of int
        Real mode sizes (shared by both trains).
    x_tables, y_tables : tuple
        ``(tk_idx, tk_cnt, tt_idx, tt_cnt)`` of each train (same ``S``).

    Returns
    -------
    kernel(Ux, Gx, Uy, Gy, out, W, W2, T, T2, M, Cx, Cy, Uxc, Uyc, s_begin, s_end)
        ``out[s]`` receives ``sum(x * y)`` of stack element ``s`` for
        ``s_begin <= s < s_end`` (``out (S,)``).  Scratch of
        lengths ``rx*ry`` (``W``, ``W2``), ``ry*nx*rx`` (``T``), ``ry*ny*rx``
        (``T2``), ``nx*ny`` (``M``), ``rx*nx*rx`` (``Cx``), ``ry*ny*ry``
        (``Cy``), ``nx*N`` (``Uxc``), ``ny*N`` (``Uyc``).  A
        :class:`StructureKernel`.

    Notes
    -----
    With ``M[j, k] = sum_o Ux[j, o] Uy[k, o]`` the bond matrix is carried
    through ``W'[b, e] = sum W[a, c] Gx[a, j, b] M[j, k] Gy[c, k, e]``, in
    three products of cost ``O(r^3 n + r^2 n^2)`` on the gathered real
    blocks; it starts as all ones.
    """
    return StructureKernel("ut3_inner", "_inner_body",
                           "Ux, Gx, Uy, Gy, out, W, W2, T, T2, M, Cx, Cy, Uxc, Uyc, s_begin, "
                           "s_end", (np.array(shape, dtype=np.int64), *x_tables, *y_tables))


@njit(cache=True, forceinline=True, nogil=True)
def _inner_body(Ux, Gx, Uy, Gy, out, W, W2, T, T2, M, Cx, Cy, Uxc, Uyc, s_begin, s_end, sizes,
                xk_idx, xk_cnt, xt_idx, xt_cnt, yk_idx, yk_cnt, yt_idx, yt_cnt):
    d = sizes.shape[0]
    n_stack = xk_cnt.shape[1]
    for s in range(max(s_begin, 0), min(s_end, n_stack)):
        cax = xt_cnt[0, s]
        cay = yt_cnt[0, s]
        for q in range(cax * cay):
            W[q] = 1.0
        for i in range(d):
            ni = sizes[i]
            cjx = xk_cnt[i, s]
            cjy = yk_cnt[i, s]
            cbx = xt_cnt[i + 1, s]
            cby = yt_cnt[i + 1, s]
            _gather_tucker(Ux, i, s, xk_idx, cjx, ni, Uxc)
            _gather_tucker(Uy, i, s, yk_idx, cjy, ni, Uyc)
            _gather_tt(Gx, i, s, xt_idx, xk_idx, cax, cjx, cbx, Cx)
            _gather_tt(Gy, i, s, yt_idx, yk_idx, cay, cjy, cby, Cy)
            for pj in range(cjx):
                for pk in range(cjy):
                    acc = 0.0
                    for o in range(ni):
                        acc += Uxc[pj * ni + o] * Uyc[pk * ni + o]
                    M[pj * cjy + pk] = acc
            # T[c, (j, b)] = sum_a W[a, c] Cx[a, (j, b)]
            _gemm_tn(W, Cx, T, cax, cay, cjx * cbx)
            # T2[c, k, b] = sum_j M[j, k] T[c, j, b]
            for pc in range(cay):
                _gemm_tn(M, T[pc * cjx * cbx:], T2[pc * cjy * cbx:], cjx, cjy, cbx)
            # W'[b, e] = sum_{c, k} T2[(c, k), b] Cy[(c, k), e]
            _gemm_tn(T2, Cy, W2, cay * cjy, cbx, cby)
            cax = cbx
            cay = cby
            W, W2 = W2, W
        acc = 0.0
        for q in range(cax * cay):
            acc += W[q]
        out[s] = acc


def build_ut3_chain(tk_idx, tk_cnt, tt_idx, tt_cnt):
    """Build the kernel contracting a TT supercore with per-core vectors.

    Parameters
    ----------
    tk_idx, tk_cnt, tt_idx, tt_cnt : index tables of the train.

    Returns
    -------
    kernel(V, G, out, Gc, u, v, v2, s_begin, s_end)
        ``V (d, S, K, n)`` holds one vector per core, stack element and
        query; ``out[s] (K,)`` receives, for ``s_begin <= s < s_end``,
        ``sum_{a_0..a_d} prod_i sum_j G[i, a_i, j, a_{i+1}] V[i, k, j]``.
        Scratch: ``Gc`` of length ``d * r * n * r``, ``u`` of length
        ``r * n``, ``v``, ``v2`` of length ``r``.  With ``V[i] = U[i][:, idx_i]``
        this evaluates entries; with ``V[i] = U[i] @ x_i`` it applies the
        train to vectors.  A :class:`StructureKernel`.
    """
    return StructureKernel("ut3_chain", "_chain_body", "V, G, out, Gc, u, v, v2, s_begin, s_end",
                           (tk_idx, tk_cnt, tt_idx, tt_cnt))


@njit(cache=True, forceinline=True, nogil=True)
def _chain_body(V, G, out, Gc, u, v, v2, s_begin, s_end, tk_idx, tk_cnt, tt_idx, tt_cnt):
    d = tk_cnt.shape[0]
    n_stack = tk_cnt.shape[1]
    n_query = out.shape[1]
    block = G.shape[2] * G.shape[3] * G.shape[4]
    for s in range(max(s_begin, 0), min(s_end, n_stack)):
        for i in range(d):
            ca, cj, cb = tt_cnt[i, s], tk_cnt[i, s], tt_cnt[i + 1, s]
            _gather_tt(G, i, s, tt_idx, tk_idx, ca, cj, cb, Gc[i * block:])
        for k in range(n_query):
            ca = tt_cnt[0, s]
            for pa in range(ca):
                v[pa] = 1.0
            for i in range(d):
                cj, cb = tk_cnt[i, s], tt_cnt[i + 1, s]
                for pa in range(ca):
                    for pj in range(cj):
                        u[pa * cj + pj] = v[pa] * V[i, s, k, tk_idx[i, s, pj]]
                # v2[b] = sum_{(a, j)} u[(a, j)] Gc[(a, j), b]
                _gemm_tn(u, Gc[i * block:], v2, ca * cj, 1, cb)
                ca = cb
                v, v2 = v2, v
            acc = 0.0
            for pa in range(ca):
                acc += v[pa]
            out[s, k] = acc


#: Generated structure kernels kept on disk at most (the least recently used
#: go first, with their Numba cache files): a loop whose ranks change every
#: iteration writes one per new structure and operation, and Numba's files
#: of one take 0.1-0.3 MiB (a stack of 1024 trains: 1.1 MiB, its tables
#: included).
DISK_KERNELS = 256

def _structure_kernel(name, text, cached):
    """A :class:`StructureKernel` of the generated ``text`` (its ``__reduce__``)."""
    kernel = StructureKernel.__new__(StructureKernel)
    kernel._load(name, text, cached)
    return kernel


#: Numba freezes a global array into the machine code only up to this size
#: (numba/core/base.py, ``make_constant_array``); a larger one becomes a
#: run-time address, which its cache refuses ("uses dynamic globals", a
#: NumbaWarning on every compile).  A structure with such a table (e.g.
#: d = 8, n = 16 and a stack of 1000 trains) is compiled from memory, as
#: every structure was before these kernels were cached.
FROZEN_ARRAY_BYTES = 10**6

_GENERATED = """\
# The {name} kernel of one tensor-train structure, generated by
# zorch_nb.kernels.tt_kernels.StructureKernel: the structure's index tables
# are globals of this module, which Numba compiles into the machine code.
from zorch_nb.kernels.tt_kernels import {body} as _body, unpack_tables as _unpack

{names} = _unpack({blob!r}, {shapes!r})


def {name}({params}):
    _body({params}, {names})
"""


def pack_tables(tables) -> tuple:
    """``(blob, shapes)``: int64 arrays as one base64 text of their compressed
    bytes (deterministic: the same tables, the same text) and their shapes."""
    arrays = [np.ascontiguousarray(t, dtype=np.int64) for t in tables]
    raw = b"".join(a.tobytes() for a in arrays)
    return (base64.b64encode(zlib.compress(raw, 6)).decode("ascii"),
            tuple(tuple(int(n) for n in a.shape) for a in arrays))


def unpack_tables(blob: str, shapes) -> tuple:
    """The read-only int64 arrays :func:`pack_tables` packed."""
    raw = zlib.decompress(base64.b64decode(blob))
    out, at = [], 0
    for shape in shapes:
        size = 8 * int(np.prod(shape, dtype=np.int64))
        out.append(np.frombuffer(raw, dtype=np.int64, count=size // 8, offset=at).reshape(shape))
        at += size
    if at != len(raw):
        raise ValueError(f"tables of {at} bytes, not {len(raw)}")
    return tuple(out)


class StructureKernel:
    """One structure's compiled kernel: called like the Numba dispatcher it
    holds (``signatures``, ``stats`` and the rest are the dispatcher's).

    ``name`` is the kernel (``ut3_to_dense``...), ``body`` the function of
    this module it calls with ``params`` and then ``tables``, the structure's
    int64 arrays.  The generated module is imported from the generated-kernel
    folder and compiled with ``cache=True``, the file named by the hash of its
    text; where no folder can be written or imported from, or a table is too
    large to freeze (:data:`FROZEN_ARRAY_BYTES`), it is compiled from memory.
    So is it when Numba, having compiled it on the first call, cannot write
    its cache entry (a full disk): nothing ran yet, and the call is made again.
    """

    __slots__ = ("_fn", "_name", "_text", "_cached")

    def __init__(self, name: str, body: str, params: str, tables):
        blob, shapes = pack_tables(tables)
        text = _GENERATED.format(name=name, body=body, params=params, blob=blob, shapes=shapes,
                                 names=", ".join(f"TABLE_{i}" for i in range(len(shapes))))
        small = all(8 * int(np.prod(s, dtype=np.int64)) <= FROZEN_ARRAY_BYTES for s in shapes)
        self._load(name, text, small)

    def _load(self, name: str, text: str, cached: bool):
        self._name, self._text, self._cached = name, text, cached
        self._fn = (cached and self._from_disk()) or self._from_memory()

    def __reduce__(self):
        # (a copy or a pickle: made again from the text -- loaded, not compiled,
        # where the cache has it)
        return _structure_kernel, (self._name, self._text, self._cached)

    def _from_disk(self):
        folder = source_cache.cache_dir()
        if folder is None:
            return None
        digest = hashlib.sha256(self._text.encode()).hexdigest()[:24]
        modname = f"zorch_tt_{self._name}_{digest}"
        try:
            path, written = source_cache.source_file(folder, modname + ".py", self._text)
            if written:
                source_cache.prune_oldest(folder, "zorch_tt_", DISK_KERNELS)
            fn = getattr(source_cache.import_file(path, modname), self._name)
            return njit(nogil=True, cache=True)(fn)
        except (OSError, UnicodeError, ImportError, RuntimeError):
            # RuntimeError: Numba found no folder it can write its cache to
            return None

    def _from_memory(self):
        namespace = {}
        exec(compile(self._text, f"<zorch_tt {self._name}>", "exec"), namespace)
        return numba.njit(nogil=True)(namespace[self._name])

    def __call__(self, *args):
        fn = self._fn
        if numba.config.DISABLE_JIT:
            # the plain-Python body on NumPy scalars, which warn where machine
            # code is silent: an overflow to inf is the callers' to find (they
            # rescale, or refuse by name) in either form
            with np.errstate(over="ignore", invalid="ignore"):
                return fn(*args)
        try:
            return fn(*args)
        except OSError:
            if getattr(fn, "_cache", None) is None or \
                    type(fn._cache).__name__ == "NullCache":
                raise
            self._fn = fn = self._from_memory()
            return fn(*args)

    def __getattr__(self, attr):
        if attr in self.__slots__ or attr.startswith("__"):  # (unset: a half-made copy)
            raise AttributeError(attr)
        return getattr(self._fn, attr)

    def __repr__(self):
        return f"<StructureKernel {self._name} {self._fn!r}>"


# fastmath "reassoc" lets LLVM vectorize the dot products' sums (a sum is
# otherwise one add after another): the repair of 16 frames of 32 vectors of
# 512 took 4.3 ms, 1.06 ms so (2-core AMD EPYC), the frames differing by
# rounding (1.7e-16).  No other fastmath flag: inf and NaN keep their meaning.
@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _orthogonalize_row(F, b, j):
    """Gram-Schmidt row ``j`` of ``F[b]`` against rows ``0..j-1`` (a second
    pass only when the first removed much of it); return its norm."""
    n_cols = F.shape[2]
    before = 0.0
    for t in range(n_cols):
        before += F[b, j, t] * F[b, j, t]
    for sweep in range(2):
        for c in range(j):
            dot = 0.0
            for t in range(n_cols):
                dot += F[b, c, t] * F[b, j, t]
            for t in range(n_cols):
                F[b, j, t] -= dot * F[b, c, t]
        after = 0.0
        for t in range(n_cols):
            after += F[b, j, t] * F[b, j, t]
        if after >= 0.5 * before:  # lost less than ~30% of the norm: orthogonal to rounding
            break
        before = after
    return np.sqrt(after)


@njit(cache=True, nogil=True)
def orthonormal_frame_repair(F, mask, kcount):
    """Make frame vectors orthonormal on the real coordinates, in place.

    Parameters
    ----------
    F : float array ``(B, K, M)``
        Candidate frames stored as rows (``F[b, j]`` is vector ``j``), e.g.
        singular vectors of a zero-padded matrix; overwritten.
    mask : bool array ``(B, M)``
        Real coordinates.
    kcount : int64 array ``(B,)``
        Number of real vectors, at most the number of real coordinates.

    Notes
    -----
    Coordinates outside ``mask`` and vectors ``>= kcount`` are zeroed.
    Vector ``j < kcount`` is Gram-Schmidt orthogonalized against vectors
    ``0..j-1``; if less than half of its norm remains -- which happens only
    for singular vectors of (numerically) zero singular values, the ones a
    padded SVD may spread over padding -- it is replaced by the real unit
    vector ``e_t`` with the largest residual ``1 - sum_c F[c, t]^2`` (at least
    ``(m - j) / m`` for ``m`` real coordinates), orthogonalized the same way.
    Each vector is then normalized and its sign fixed so that its entries sum
    to a non-negative number.  Vectors of a clear singular value change only
    by rounding.
    """
    n_batch, n_vec, n_cols = F.shape
    for b in range(n_batch):
        kb = kcount[b]
        for j in range(n_vec):
            for t in range(n_cols):
                if not mask[b, t] or j >= kb:
                    F[b, j, t] = 0.0
        for j in range(kb):
            nrm = _orthogonalize_row(F, b, j)
            if nrm < 0.5:
                best = -1.0
                best_t = 0
                for t in range(n_cols):
                    if mask[b, t]:
                        res = 1.0
                        for c in range(j):
                            res -= F[b, c, t] * F[b, c, t]
                        if res > best:
                            best = res
                            best_t = t
                for t in range(n_cols):
                    F[b, j, t] = 0.0
                F[b, j, best_t] = 1.0
                nrm = _orthogonalize_row(F, b, j)
            total = 0.0
            for t in range(n_cols):
                total += F[b, j, t]
            scale = 1.0 / nrm
            if total < 0.0:
                scale = -scale
            for t in range(n_cols):
                F[b, j, t] *= scale
