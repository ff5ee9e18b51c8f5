"""Demo section: uniform Tucker tensor trains, checked against dense tensors."""
import time

import numpy as np

from .tt import TuckerTensorTrain, UniformTuckerTensorTrain, kernel_cache_info


def _host(x):
    return x.get() if type(x).__module__.split(".")[0] == "cupy" else np.asarray(x)


def _check(log, name, ok, detail):
    log(f"  {name:<44} {detail}  check: {'OK' if ok else 'FAILED'}")
    if not ok:
        raise SystemExit(f"demo check failed: {name}")


def run(backend: str, log) -> None:
    """A stack of 16 trains with ranks varying per train: dense, arithmetic,
    inner products and a truncating T3-SVD, each checked against dense NumPy.

    ``cupy`` puts the supercores on the GPU; ``cpu`` and ``numba`` use NumPy
    supercores (the structure-specialized Numba CPU kernels).
    """
    if backend == "numba":
        log("(tensor trains have Numba CPU kernels and CuPy: backend numba runs them on "
            "the CPU)")
    rng = np.random.default_rng(7)
    shape, stack = (6, 5, 6, 4), 16

    def random_trains():
        trains = []
        for _ in range(stack):
            tk = rng.integers(2, 5, size=4)
            tt = np.concatenate([[1], rng.integers(2, 6, size=3), [1]])
            trains.append(TuckerTensorTrain(
                [rng.standard_normal((tk[i], shape[i])) for i in range(4)],
                [rng.standard_normal((tt[i], tk[i], tt[i + 1])) for i in range(4)]))
        return tuple(trains)

    xs, ys = random_trains(), random_trains()
    x = UniformTuckerTensorTrain.from_t3(xs, n=4, r=6)
    y = UniformTuckerTensorTrain.from_t3(ys, n=4, r=6)
    if backend == "cupy":
        import cupy

        x, y = (UniformTuckerTensorTrain(cupy.asarray(t.tucker_supercore), cupy.asarray(t.tt_supercore),
                                         t.shape, t.masks) for t in (x, y))
    xd = np.stack([t.to_dense() for t in xs])
    yd = np.stack([t.to_dense() for t in ys])
    scale = np.abs(xd).max() * np.abs(yd).max()

    t0 = time.perf_counter()
    x.to_dense()  # the first call compiles (NumPy) or warms up (CuPy)
    t1 = time.perf_counter()
    dense = _host(x.to_dense())
    t2 = time.perf_counter()
    _check(log, f"to_dense, stack {stack}, shape {shape}", np.abs(dense - xd).max() < 1e-10 * np.abs(xd).max(),
           f"first call {(t1 - t0) * 1e3:.0f} ms, then {(t2 - t1) * 1e3:.2f} ms")
    s = _host((x + y).to_dense())
    h = _host(x.hadamard(y).to_dense())
    ok = np.abs(s - (xd + yd)).max() < 1e-10 * np.abs(xd + yd).max() and np.abs(h - xd * yd).max() < 1e-10 * scale
    _check(log, "x + y and hadamard(x, y) (gappy masks)", ok, f"padded n: {(x + y).padded_sizes[0]}, "
           f"{x.hadamard(y).padded_sizes[0]}")
    ip = _host(x.inner(y))
    want = (xd * yd).reshape(stack, -1).sum(axis=1)
    _check(log, "inner(x, y) per stack element", np.abs(ip - want).max() < 1e-10 * np.abs(want).max(), "")
    t0 = time.perf_counter()
    tr, (tsv, ttsv) = x.svd(max_tucker_ranks=3, max_tt_ranks=3)
    dt = time.perf_counter() - t0
    err2 = ((_host(tr.to_dense()) - xd) ** 2).reshape(stack, -1).sum(axis=1)
    tk_r, tt_r = tr.tucker_ranks, tr.tt_ranks
    tsv, ttsv = _host(tsv), _host(ttsv)
    bound = np.array([
        sum(np.sum(tsv[i, k, tk_r[i, k]:] ** 2) for i in range(4))
        + sum(np.sum(ttsv[b, k, tt_r[b + 1, k]:] ** 2) for b in range(3)) for k in range(stack)])
    # The truncation errors are mutually orthogonal: error^2 = sum of discarded sigma^2.
    ok = np.allclose(err2, bound, rtol=1e-8, atol=1e-12 * (xd ** 2).sum())
    _check(log, "T3-SVD to ranks <= 3: error^2 = discarded sigma^2", bool(ok),
           f"{dt * 1e3:7.1f} ms")
    before = kernel_cache_info()
    for _ in range(3):
        again = UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore, x.shape,
                                         (np.array(x.masks[0]), np.array(x.masks[1])))
        again.to_dense()
    after = kernel_cache_info()
    if backend == "cupy":
        _check(log, "masks stay host NumPy with CuPy supercores", isinstance(again.masks[0], np.ndarray), "")
    else:
        hits, misses = after.hits - before.hits, after.misses - before.misses
        _check(log, "rebuilt identical masks reuse the compiled kernel", (hits, misses) == (3, 0),
               f"hits +{hits}, misses +{misses}")
