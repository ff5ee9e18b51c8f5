"""Numba CPU kernels of the uniform Tucker tensor train layer.

Array layout (the object layer flattens the stack axes into one axis ``S``):

* ``U`` -- Tucker supercore, ``(d, S, n, N)``, ``U[i, s, j, o]``;
* ``G`` -- TT supercore, ``(d, S, r, n, r)``, ``G[i, s, a, j, b]``.

The structure of a train (which Tucker slots ``j`` and which bond slots
``a``/``b`` are real) is host data.  The ``build_*`` factories turn it into
index tables (see :func:`mask_index_table`) that the returned kernel captures
as closure constants, so Numba compiles them into the machine code: one
compiled kernel per structure, supercores as the only run-time data.  Every
loop runs over real slots only, so whatever the padding holds is never read.

Kernels take plain arrays, write into ``out`` and scratch arrays the caller
allocates, validate nothing and allocate nothing.  The boundary bonds are
summed against vectors of ones (over the real slots).

Nothing here imports from the object layer (``zorch_nb``).
"""
import numba
import numpy as np


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
    kernel(U, G, out, P, Q, H)
        ``out (S, prod(shape))`` receives the C-ordered dense tensors.
        Scratch: ``P`` and ``Q`` of length ``prod(shape) * r``, ``H`` of
        length ``r * max(shape) * r``, all of the supercore dtype.

    Notes
    -----
    Per core, ``H[a, o, b] = sum_j G[a, j, b] U[j, o]`` over real slots, then
    the left partial product ``P[(p, a)]`` is extended by one mode:
    ``Q[((p, o), b)] = sum_a P[(p, a)] H[a, o, b]``.  Rank indices in ``P``,
    ``Q`` and ``H`` are compact (position among the real slots).
    """
    d = len(shape)
    sizes = np.array(shape, dtype=np.int64)
    n_stack = tk_cnt.shape[1]

    @numba.njit
    def ut3_to_dense(U, G, out, P, Q, H):
        for s in range(n_stack):
            rows = 1
            ca = tt_cnt[0, s]
            for pa in range(ca):
                P[pa] = 1.0
            for i in range(d):
                ni = sizes[i]
                cb = tt_cnt[i + 1, s]
                cj = tk_cnt[i, s]
                for q in range(ca * ni * cb):
                    H[q] = 0.0
                for pa in range(ca):
                    a = tt_idx[i, s, pa]
                    for pj in range(cj):
                        j = tk_idx[i, s, pj]
                        for pb in range(cb):
                            g = G[i, s, a, j, tt_idx[i + 1, s, pb]]
                            for o in range(ni):
                                H[(pa * ni + o) * cb + pb] += g * U[i, s, j, o]
                for q in range(rows * ni * cb):
                    Q[q] = 0.0
                for p in range(rows):
                    for pa in range(ca):
                        w = P[p * ca + pa]
                        for q in range(ni * cb):
                            Q[p * ni * cb + q] += w * H[pa * ni * cb + q]
                rows *= ni
                ca = cb
                P, Q = Q, P
            for p in range(rows):
                acc = 0.0
                for pa in range(ca):
                    acc += P[p * ca + pa]
                out[s, p] = acc

    return ut3_to_dense


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
    kernel(Ux, Gx, Uy, Gy, out, W, W2, T, T2, M)
        ``out (S,)`` receives ``sum(x * y)`` per stack element.  Scratch:
        ``W``, ``W2`` of length ``rx * ry``; ``T``, ``T2`` of length
        ``ry * max(nx, ny) * rx``; ``M`` of length ``nx * ny``.

    Notes
    -----
    With ``M[j, k] = sum_o Ux[j, o] Uy[k, o]`` the bond matrix is carried
    through ``W'[b, e] = sum W[a, c] Gx[a, j, b] M[j, k] Gy[c, k, e]``, in
    three steps of cost ``O(r^3 n + r^2 n^2)``; it starts as all ones.
    """
    d = len(shape)
    sizes = np.array(shape, dtype=np.int64)
    xk_idx, xk_cnt, xt_idx, xt_cnt = x_tables
    yk_idx, yk_cnt, yt_idx, yt_cnt = y_tables
    n_stack = xk_cnt.shape[1]

    @numba.njit
    def ut3_inner(Ux, Gx, Uy, Gy, out, W, W2, T, T2, M):
        for s in range(n_stack):
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
                # M[pj, pk] = sum_o Ux[j, o] Uy[k, o]
                for pj in range(cjx):
                    j = xk_idx[i, s, pj]
                    for pk in range(cjy):
                        k = yk_idx[i, s, pk]
                        acc = 0.0
                        for o in range(ni):
                            acc += Ux[i, s, j, o] * Uy[i, s, k, o]
                        M[pj * cjy + pk] = acc
                # T[pc, pj, pb] = sum_pa W[pa, pc] Gx[a, j, b]
                for q in range(cay * cjx * cbx):
                    T[q] = 0.0
                for pa in range(cax):
                    a = xt_idx[i, s, pa]
                    for pj in range(cjx):
                        j = xk_idx[i, s, pj]
                        for pb in range(cbx):
                            g = Gx[i, s, a, j, xt_idx[i + 1, s, pb]]
                            for pc in range(cay):
                                T[(pc * cjx + pj) * cbx + pb] += W[pa * cay + pc] * g
                # T2[pc, pk, pb] = sum_pj T[pc, pj, pb] M[pj, pk]
                for q in range(cay * cjy * cbx):
                    T2[q] = 0.0
                for pc in range(cay):
                    for pj in range(cjx):
                        for pk in range(cjy):
                            m = M[pj * cjy + pk]
                            for pb in range(cbx):
                                T2[(pc * cjy + pk) * cbx + pb] += T[(pc * cjx + pj) * cbx + pb] * m
                # W2[pb, pe] = sum_{pc, pk} T2[pc, pk, pb] Gy[c, k, e]
                for q in range(cbx * cby):
                    W2[q] = 0.0
                for pc in range(cay):
                    c = yt_idx[i, s, pc]
                    for pk in range(cjy):
                        k = yk_idx[i, s, pk]
                        for pe in range(cby):
                            g = Gy[i, s, c, k, yt_idx[i + 1, s, pe]]
                            for pb in range(cbx):
                                W2[pb * cby + pe] += T2[(pc * cjy + pk) * cbx + pb] * g
                cax = cbx
                cay = cby
                W, W2 = W2, W
            acc = 0.0
            for q in range(cax * cay):
                acc += W[q]
            out[s] = acc

    return ut3_inner


def build_ut3_chain(tk_idx, tk_cnt, tt_idx, tt_cnt):
    """Build the kernel contracting a TT supercore with per-core vectors.

    Parameters
    ----------
    tk_idx, tk_cnt, tt_idx, tt_cnt : index tables of the train.

    Returns
    -------
    kernel(V, G, out, v, v2)
        ``V (d, S, K, n)`` holds one vector per core, stack element and
        query; ``out (S, K)`` receives
        ``sum_{a_0..a_d} prod_i sum_j G[i, a_i, j, a_{i+1}] V[i, k, j]``.
        Scratch ``v``, ``v2`` of length ``r``.  With ``V[i] = U[i][:, idx_i]``
        this evaluates entries; with ``V[i] = U[i] @ x_i`` it applies the
        train to vectors.
    """
    d = tk_cnt.shape[0]
    n_stack = tk_cnt.shape[1]

    @numba.njit
    def ut3_chain(V, G, out, v, v2):
        n_query = out.shape[1]
        for s in range(n_stack):
            for k in range(n_query):
                ca = tt_cnt[0, s]
                for pa in range(ca):
                    v[pa] = 1.0
                for i in range(d):
                    cb = tt_cnt[i + 1, s]
                    cj = tk_cnt[i, s]
                    for pb in range(cb):
                        v2[pb] = 0.0
                    for pa in range(ca):
                        a = tt_idx[i, s, pa]
                        for pj in range(cj):
                            j = tk_idx[i, s, pj]
                            c = v[pa] * V[i, s, k, j]
                            for pb in range(cb):
                                v2[pb] += c * G[i, s, a, j, tt_idx[i + 1, s, pb]]
                    ca = cb
                    v, v2 = v2, v
                acc = 0.0
                for pa in range(ca):
                    acc += v[pa]
                out[s, k] = acc

    return ut3_chain


@numba.njit(cache=True)
def _orthogonalize_column(Q, b, j):
    """Gram-Schmidt column ``j`` of ``Q[b]`` against columns ``0..j-1``
    (two passes); return its remaining norm."""
    n_rows = Q.shape[1]
    for sweep in range(2):
        for c in range(j):
            dot = 0.0
            for t in range(n_rows):
                dot += Q[b, t, c] * Q[b, t, j]
            for t in range(n_rows):
                Q[b, t, j] -= dot * Q[b, t, c]
    nrm = 0.0
    for t in range(n_rows):
        nrm += Q[b, t, j] * Q[b, t, j]
    return np.sqrt(nrm)


@numba.njit(cache=True)
def orthonormal_frame_repair(Q, row_mask, kcount):
    """Make frame columns orthonormal on the real rows, in place.

    Parameters
    ----------
    Q : float array ``(B, M, K)``
        Candidate frames (e.g. left singular vectors of a zero-padded
        matrix), overwritten with the repaired frames.
    row_mask : bool array ``(B, M)``
        Real rows.
    kcount : int64 array ``(B,)``
        Number of real output columns, at most the number of real rows.

    Notes
    -----
    Rows outside ``row_mask`` and columns ``>= kcount`` are zeroed.  Column
    ``j < kcount`` is Gram-Schmidt orthogonalized (two passes) against
    columns ``0..j-1``; if less than half of its norm remains -- which
    happens only for singular vectors of (numerically) zero singular values,
    the ones a padded SVD may spread over padding rows -- it is replaced by
    the real unit vector ``e_t`` with the largest residual
    ``1 - sum_c Q[t, c]^2`` (at least ``(m - j) / m`` for ``m`` real rows),
    orthogonalized the same way.  Finally each column is normalized and its
    sign fixed so that its entries sum to a non-negative number.  Columns
    with a clear singular value change only by rounding.
    """
    n_batch, n_rows, n_cols = Q.shape
    for b in range(n_batch):
        kb = kcount[b]
        for t in range(n_rows):
            for j in range(n_cols):
                if not row_mask[b, t] or j >= kb:
                    Q[b, t, j] = 0.0
        for j in range(kb):
            nrm = _orthogonalize_column(Q, b, j)
            if nrm < 0.5:
                best = -1.0
                best_t = 0
                for t in range(n_rows):
                    if row_mask[b, t]:
                        res = 1.0
                        for c in range(j):
                            res -= Q[b, t, c] * Q[b, t, c]
                        if res > best:
                            best = res
                            best_t = t
                for t in range(n_rows):
                    Q[b, t, j] = 0.0
                Q[b, best_t, j] = 1.0
                nrm = _orthogonalize_column(Q, b, j)
            total = 0.0
            for t in range(n_rows):
                total += Q[b, t, j]
            scale = 1.0 / nrm
            if total < 0.0:
                scale = -scale
            for t in range(n_rows):
                Q[b, t, j] *= scale
