"""Uniform Tucker tensor trains against a straightforward ragged NumPy loop.

A batch of 64 trains with d = 8, mode size N = 32, Tucker ranks up to n = 8
and TT ranks up to r = 16 (the real ranks differ per train, boundary ranks 1).
``uniform`` is zorch_nb's :class:`~zorch_nb.tt.UniformTuckerTensorTrain`
(padded to n = 8, r = 16, batched over the stack; Numba kernels for
``to_dense``/``inner``); ``ragged`` is what one writes without it: a Python
loop over the 64 trains, each a list of exactly sized cores, with
``numpy.einsum``/``numpy.linalg.svd`` -- written in this file.  Both run in
the same process, so their ratio is meaningful on any machine.

``to_dense`` uses d = 3 (same N, n, r, batch): the d = 8 dense batch would
hold 64 * 32^8 entries.  The SVD truncates to Tucker rank 4 and TT rank 8.
Kernels are compiled in ``setup`` (run with ``asv run --python=same``).
"""
import numpy as np

from zorch_nb.tt import TuckerTensorTrain, UniformTuckerTensorTrain

D, N, N_TUCKER, R_TT, STACK = 8, 32, 8, 16, 64
MAX_TUCKER, MAX_TT = 4, 8


def random_ragged(d, seed):
    """64 ragged trains (lists of cores) with ranks varying per train."""
    rng = np.random.default_rng(seed)
    trains = []
    for _ in range(STACK):
        tk_ranks = rng.integers(N_TUCKER // 2 + 1, N_TUCKER + 1, size=d)
        tt_ranks = np.concatenate([[1], rng.integers(R_TT // 2 + 2, R_TT + 1, size=d - 1), [1]])
        tk = [rng.standard_normal((tk_ranks[i], N)) for i in range(d)]
        tt = [rng.standard_normal((tt_ranks[i], tk_ranks[i], tt_ranks[i + 1])) for i in range(d)]
        trains.append((tk, tt))
    return trains


# -- the ragged NumPy implementation ---------------------------------------

def ragged_to_dense(trains):
    out = []
    for tk, tt in trains:
        P = np.ones((1, tt[0].shape[0]))
        for U, G in zip(tk, tt):
            H = np.einsum("ajb,jo->aob", G, U)
            P = (P @ H.reshape(H.shape[0], -1)).reshape(-1, H.shape[2])
        out.append(P.sum(axis=1).reshape([U.shape[1] for U in tk]))
    return np.stack(out)


def ragged_inner(xs, ys):
    out = np.empty(len(xs))
    for k, ((xk, xt), (yk, yt)) in enumerate(zip(xs, ys)):
        W = np.ones((xt[0].shape[0], yt[0].shape[0]))
        for U, G, V, H in zip(xk, xt, yk, yt):
            T = np.einsum("ac,ajb->cjb", W, G)
            T = np.einsum("cjb,jk->ckb", T, U @ V.T)
            W = np.einsum("ckb,cke->be", T, H)
        out[k] = W.sum()
    return out


def ragged_svd(trains, max_tucker, max_tt):
    """Per train: squash tails, orthonormal Tucker cores, right sweep, then a
    truncating left-to-right sweep (the T3-SVD)."""
    results = []
    for tk, tt in trains:
        tk, tt = list(tk), list(tt)
        d = len(tk)
        tt[0] = tt[0].sum(axis=0, keepdims=True)
        tt[-1] = tt[-1].sum(axis=-1, keepdims=True)
        for i in range(d):
            P = np.linalg.svd(tk[i].T, full_matrices=False)[0]
            tt[i] = np.einsum("ajb,jx->axb", tt[i], tk[i] @ P)
            tk[i] = P.T
        for i in range(d - 1, 0, -1):
            ra, n, rb = tt[i].shape
            A = tt[i].reshape(ra, n * rb)
            P = np.linalg.svd(A.T, full_matrices=False)[0]
            tt[i - 1] = np.einsum("ajb,bx->ajx", tt[i - 1], A @ P)
            tt[i] = P.T.reshape(-1, n, rb)
        svs = []
        for i in range(d):
            ra, n, rb = tt[i].shape
            A = tt[i].transpose(0, 2, 1).reshape(ra * rb, n)
            _, s, vt = np.linalg.svd(A, full_matrices=False)
            P = vt[:max_tucker].T
            tt[i] = (A @ P).reshape(ra, rb, -1).transpose(0, 2, 1)
            tk[i] = P.T @ tk[i]
            svs.append(s)
            if i < d - 1:
                ra, n, rb = tt[i].shape
                A = tt[i].reshape(ra * n, rb)
                q, s, _ = np.linalg.svd(A, full_matrices=False)
                Q = q[:, :max_tt]
                tt[i + 1] = np.einsum("xb,bjc->xjc", Q.T @ A, tt[i + 1])
                tt[i] = Q.reshape(ra, n, -1)
                svs.append(s)
        results.append(((tk, tt), svs))
    return results


class UniformVsRagged:
    params = ["uniform", "ragged"]
    param_names = ["impl"]
    timeout = 300

    def setup(self, impl):
        self.x = random_ragged(D, 1)
        self.y = random_ragged(D, 2)
        self.small = random_ragged(3, 3)
        to_uniform = lambda trains: UniformTuckerTensorTrain.from_t3(
            tuple(TuckerTensorTrain(tk, tt) for tk, tt in trains), n=N_TUCKER, r=R_TT, N=N)
        self.ux, self.uy, self.usmall = to_uniform(self.x), to_uniform(self.y), to_uniform(self.small)
        if impl == "uniform":  # compile the structure-specialized kernels outside the timing
            self.usmall.to_dense()
            self.ux.inner(self.uy)
            self.ux.svd(MAX_TUCKER, MAX_TT)

    def time_to_dense(self, impl):
        if impl == "uniform":
            self.usmall.to_dense()
        else:
            ragged_to_dense(self.small)

    def time_inner(self, impl):
        if impl == "uniform":
            self.ux.inner(self.uy)
        else:
            ragged_inner(self.x, self.y)

    def time_svd(self, impl):
        if impl == "uniform":
            self.ux.svd(MAX_TUCKER, MAX_TT)
        else:
            ragged_svd(self.x, MAX_TUCKER, MAX_TT)
