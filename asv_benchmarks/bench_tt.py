"""Uniform Tucker tensor trains against a straightforward ragged NumPy loop.

A batch of ``trains`` trains (the size parameter: 1, 8 or 64) with d = 8, mode
size N = 32, Tucker ranks up to n = 8 and TT ranks up to r = 16 (the real
ranks differ per train, boundary ranks 1).  ``uniform`` is zorch_nb's
:class:`~zorch_nb.tt.UniformTuckerTensorTrain` (padded to n = 8, r = 16,
batched over the stack; Numba kernels for ``to_dense``/``inner``);
``ragged`` is what one writes without it: a Python loop over the trains,
each a list of exactly sized cores, with ``numpy.einsum``/``numpy.linalg.svd``
-- written in this file.  Both run in the same process, so their ratio is
meaningful on any machine.  ``peakmem_to_dense`` is asv's peak of the whole
process (imports and the compile in ``setup`` included): its growth with
``trains`` is the dense tensors'.  (``inner`` and ``svd`` allocate little
beyond their inputs: no peakmem, which kept CI's ``asv run --quick``
shorter.)

``Orthogonalize`` is ``orthogonalize("left")`` of the same trains against a
ragged loop of ``numpy.linalg.qr`` (what one writes for a lossless
orthogonalization; the uniform op frames with pad-safe SVDs, which
padding needs, so it is the harder yardstick).

``SumSvd`` is the SVD step of an optimizer's retraction: the sum of two such
batches (padded to n = 16, r = 32) truncated back to n = 8, r = 16, against
the ragged loop on the sum's trains at their exact ranks.

``to_dense`` uses d = 3 (same N, n, r, batch): the d = 8 dense batch would
hold trains * 32^8 entries.  The SVD truncates to Tucker rank 4 and TT rank
8.  One class per operation, so that ``setup`` compiles only the kernel its
benchmarks run, outside the timing (run with ``asv run --python=same``).

The ``LargeStack*`` classes time the Numba kernels on large stacks (256 and
1024 trains of a modest structure: d = 4, N = 8, n = 8, r = 4) run on the
calling thread (``split="serial"``) against the stack split over the thread
pool (``split="threads"``), each forced for the benchmark through
``launch_config.TT_CPU_SERIAL_WORK`` (by default ``to_dense`` splits at both
sizes, ``inner`` and ``entries`` at 1024 only); their ratio is the gain of
the split on the machine at hand (at most the core count; a small loss on
one core) and the data for retuning that threshold.
"""
import numpy as np

from zorch_nb.kernels import launch_config
from zorch_nb.tt import TuckerTensorTrain, UniformTuckerTensorTrain

from . import check_close, peak_bytes, prepare_once

D, N, N_TUCKER, R_TT = 8, 32, 8, 16
MAX_TUCKER, MAX_TT = 4, 8
# small enough for ``asv run --quick`` on 2 cores (a few seconds per class,
# compiles included); at 64 the batching pays for to_dense and inner (the
# SVD's LAPACK calls dominate it at 8 and 64); one train is the per-call
# overhead a small optimizer loop meets (svd: 3.5-3.9 ms against the loop's
# 1.0, results/cpu-2026-12-07-tt-svd-b.json)
TRAINS = [1, 8, 64]


def random_ragged(d, seed, count):
    """``count`` ragged trains (lists of cores) with ranks varying per train."""
    rng = np.random.default_rng(seed)
    trains = []
    for _ in range(count):
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


def ragged_orthogonalize_left(trains):
    """Per train: Tucker cores with orthonormal rows (QR of each ``U^T``), the
    remainders pushed into the TT cores, then cores ``0..d-2``
    left-orthonormal by a QR sweep -- what one writes with ``numpy.linalg.qr``
    (the uniform op frames by pad-safe SVDs; both are lossless)."""
    results = []
    for tk, tt in trains:
        tk, tt = list(tk), list(tt)
        for i in range(len(tk)):
            q, r = np.linalg.qr(tk[i].T)
            tt[i] = np.einsum("ajb,kj->akb", tt[i], r)
            tk[i] = q.T
        for i in range(len(tt) - 1):
            ra, n, rb = tt[i].shape
            q, r = np.linalg.qr(tt[i].reshape(ra * n, rb))
            tt[i] = q.reshape(ra, n, -1)
            tt[i + 1] = np.einsum("xb,bjc->xjc", r, tt[i + 1])
        results.append((tk, tt))
    return results


def to_uniform(trains):
    """The uniform train of a batch of ragged ones, padded to n, r and N."""
    return UniformTuckerTensorTrain.from_t3(
        tuple(TuckerTensorTrain(tk, tt) for tk, tt in trains), n=N_TUCKER, r=R_TT, N=N)


class _UniformVsRagged:
    """The parameters of every class below: batch size and implementation."""

    params = (TRAINS, ["uniform", "ragged"])
    param_names = ["trains", "impl"]
    timeout = 300


class ToDense(_UniformVsRagged):
    @prepare_once
    def setup(self, trains, impl):
        self.x = random_ragged(3, 3, trains)
        self.ux = to_uniform(self.x)
        # (the first uniform call compiles the structure-specialized kernel)
        check_close(self.ux.to_dense(), ragged_to_dense(self.x), "to_dense")

    def _run(self, impl):
        return self.ux.to_dense() if impl == "uniform" else ragged_to_dense(self.x)

    def time_to_dense(self, trains, impl):
        self._run(impl)

    def peakmem_to_dense(self, trains, impl):
        self._run(impl)

    def track_peak_bytes_to_dense(self, trains, impl):
        return peak_bytes(lambda: self._run(impl))
    track_peak_bytes_to_dense.unit = "bytes"


class Inner(_UniformVsRagged):
    @prepare_once
    def setup(self, trains, impl):
        self.x, self.y = random_ragged(D, 1, trains), random_ragged(D, 2, trains)
        self.ux, self.uy = to_uniform(self.x), to_uniform(self.y)
        check_close(self.ux.inner(self.uy), ragged_inner(self.x, self.y), "inner")

    def _run(self, impl):
        return self.ux.inner(self.uy) if impl == "uniform" else ragged_inner(self.x, self.y)

    def time_inner(self, trains, impl):
        self._run(impl)


class Svd(_UniformVsRagged):
    @prepare_once
    def setup(self, trains, impl):
        self.x = random_ragged(D, 1, trains)
        self.ux = to_uniform(self.x)
        # (the first uniform call compiles the frame repair kernel); the two
        # truncations agree up to the signs of singular vectors: compared as
        # the norm of their difference (32^8 entries per train: no dense form)
        got = self.ux.svd(MAX_TUCKER, MAX_TT)[0]
        want = to_uniform([t3 for t3, _ in ragged_svd(self.x, MAX_TUCKER, MAX_TT)])
        if not ((got - want).norm("orthogonal") <= 1e-9 * got.norm()).all():
            raise AssertionError("svd: the kernel's truncation differs from the yardstick's")

    def _run(self, impl):
        if impl == "uniform":
            return self.ux.svd(MAX_TUCKER, MAX_TT)
        return ragged_svd(self.x, MAX_TUCKER, MAX_TT)

    def time_svd(self, trains, impl):
        self._run(impl)


class Orthogonalize(_UniformVsRagged):
    """``orthogonalize("left")`` (Tucker cores orthonormal, then a left sweep)
    of the asv ``Svd`` trains against the ragged QR loop."""

    @prepare_once
    def setup(self, trains, impl):
        self.x = random_ragged(D, 1, trains)
        self.ux = to_uniform(self.x)
        # lossless both: each the tensor of the input (the gauges differ)
        for got in (self.ux.orthogonalize("left"),
                    to_uniform(ragged_orthogonalize_left(self.x))):
            if not ((got - self.ux).norm("orthogonal") <= 1e-9 * self.ux.norm()).all():
                raise AssertionError("orthogonalize: a result is not the input's tensor")

    def time_orthogonalize(self, trains, impl):
        if impl == "uniform":
            self.ux.orthogonalize("left")
        else:
            ragged_orthogonalize_left(self.x)


def random_sum(count):
    """``(uniform, ragged)``: ``x + 0.1 * y`` of two uniform batches of
    :func:`random_ragged` trains (padded to n = 16, r = 32), and the sum's
    trains at their exact ranks as ragged ``(tucker cores, tt cores)``."""
    total = to_uniform(random_ragged(D, 1, count)) + 0.1 * to_uniform(random_ragged(D, 2, count))
    t3s = total.to_t3()
    return total, [(list(t3.data[0]), list(t3.data[1]))
                   for t3 in (t3s if isinstance(t3s, tuple) else (t3s,))]


class SumSvd(_UniformVsRagged):
    """The SVD step of an optimizer's retraction: ``x + 0.1 * y`` (padded to
    n = 16, r = 32, its ranks the sums of the terms') truncated back to
    n = 8, r = 16; ``ragged`` is the loop on the sum's trains at their exact
    ranks.  At 64 trains the stack is computed in chunks over the threads
    (``launch_config.TT_CPU_CHUNK_BYTES``), at 8 as its two halves
    (``launch_config.TT_CPU_SPLIT_WORK``)."""

    @prepare_once
    def setup(self, trains, impl):
        self.us, self.s = random_sum(trains)
        got = self.us.svd(N_TUCKER, R_TT)[0]
        want = UniformTuckerTensorTrain.from_t3(
            tuple(TuckerTensorTrain(tk, tt) for (tk, tt), _ in ragged_svd(self.s, N_TUCKER, R_TT)),
            n=2 * N_TUCKER, r=2 * R_TT, N=N)
        if not ((got - want).norm("orthogonal") <= 1e-9 * got.norm()).all():
            raise AssertionError("svd of a sum: the kernel's truncation differs from the loop's")

    def time_svd(self, trains, impl):
        if impl == "uniform":
            self.us.svd(N_TUCKER, R_TT)
        else:
            ragged_svd(self.s, N_TUCKER, R_TT)


# -- large stacks: the stack split over threads -------------------------------

LARGE_D, LARGE_N, LARGE_TUCKER, LARGE_TT = 4, 8, 8, 4
LARGE_STACKS = [256, 1024]


def random_large_stack(seed, count):
    """``(uniform, ragged)``: a uniform stack of ``count`` trains of the modest
    large-stack structure (ranks varying per train, boundary ranks 1), and
    the same trains as ragged ``(tucker cores, tt cores)`` pairs."""
    rng = np.random.default_rng(seed)
    ragged = []
    for _ in range(count):
        tk = rng.integers(LARGE_TUCKER // 2 + 1, LARGE_TUCKER + 1, size=LARGE_D)
        tt = np.concatenate([[1], rng.integers(LARGE_TT // 2 + 1, LARGE_TT + 1,
                                               size=LARGE_D - 1), [1]])
        ragged.append(([rng.standard_normal((tk[i], LARGE_N)) for i in range(LARGE_D)],
                       [rng.standard_normal((tt[i], tk[i], tt[i + 1]))
                        for i in range(LARGE_D)]))
    uniform = UniformTuckerTensorTrain.from_t3(
        tuple(TuckerTensorTrain(tk, tt) for tk, tt in ragged), n=LARGE_TUCKER, r=LARGE_TT,
        N=LARGE_N)
    return uniform, ragged


class _LargeStack:
    """Parameters: stack size, and whether the kernel call is split over threads."""

    params = (LARGE_STACKS, ["serial", "threads"])
    param_names = ["trains", "split"]
    timeout = 300

    def setup(self, trains, split):
        # (every sample: teardown undoes it after each)
        self._threshold = launch_config.TT_CPU_SERIAL_WORK
        launch_config.TT_CPU_SERIAL_WORK = 1 << 62 if split == "serial" else 0
        self._prepare(trains, split)

    @prepare_once
    def _prepare(self, trains, split):
        self.x, x = random_large_stack(1, trains)
        self.y, y = random_large_stack(2, trains)
        self.idx = np.random.default_rng(3).integers(0, LARGE_N, size=(16, LARGE_D))
        # (the first call compiles the structure-specialized kernel)
        check_close(self._run(), self._ragged(x, y), f"{type(self).__name__}, {split}")

    def teardown(self, trains, split):
        launch_config.TT_CPU_SERIAL_WORK = self._threshold


class LargeStackToDense(_LargeStack):
    def _run(self):
        return self.x.to_dense()

    def _ragged(self, x, y):
        return ragged_to_dense(x)

    def time_to_dense(self, trains, split):
        self._run()


class LargeStackInner(_LargeStack):
    def _run(self):
        return self.x.inner(self.y)

    def _ragged(self, x, y):
        return ragged_inner(x, y)

    def time_inner(self, trains, split):
        self._run()


class LargeStackEntries(_LargeStack):
    """16 entries per train (the chain kernel that ``apply`` runs too)."""

    def _run(self):
        return self.x.entries(self.idx)

    def _ragged(self, x, y):
        return ragged_to_dense(x)[(slice(None), *self.idx.T)]

    def time_entries(self, trains, split):
        self._run()
