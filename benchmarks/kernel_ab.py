"""Time the CPU kernels that the field arithmetic bounds, for before/after comparisons.

Usage: ``NUMBA_NUM_THREADS=N python benchmarks/kernel_ab.py [LOG2_SIZE]``
(default 22) prints one JSON line: the best of several calls, in ms, after
a warm-up call, of a base sum, base and extension products (``F.add`` /
``F.mul`` / ``E.mul`` with ``out=``, a base-by-extension product), the base
and extension MLE folds, and the dense LogUp-GKR fold in three field modes
(kernel layer, preallocated outputs).  Inputs are seeded random words, any
uint32 (read mod p).

To compare two versions of the kernels, run it in alternating processes,
several rounds, one checkout each (e.g. ``git stash`` / ``git stash pop``
between runs) with a separate ``NUMBA_CACHE_DIR`` per side, and compare the
medians; ``python -m zorch_nb bench`` gives the full report with the copy
yardstick.
"""
import json
import sys
import time

import numpy as np

from zorch_nb import KoalaBear as F
from zorch_nb import _backend
from zorch_nb._bench_gkr import _mles, _outputs


def best_ms(fn, calls: int) -> float:
    fn()  # compile or load from the cache, fault the output pages in
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(min(times) * 1e3, 3)


def main(log2: int) -> dict:
    n = 1 << log2
    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 2**32, n, dtype=np.uint32) for _ in range(2))
    ea, eb = (rng.integers(0, 2**32, (n, 4), dtype=np.uint32) for _ in range(2))
    o, eo = np.empty_like(a), np.empty_like(ea)
    rb, r = rng.integers(0, F.p, dtype=np.uint32), rng.integers(0, F.p, 4, dtype=np.uint32)
    E = F.ext
    res = {"base add": best_ms(lambda: F.add(a, b, out=o), 21),
           "base mul": best_ms(lambda: F.mul(a, b, out=o), 21),
           "base mle fold": best_ms(lambda: F.mle_fold(a, rb), 21),
           "ext mul": best_ms(lambda: E.mul(ea, eb, out=eo), 7),
           "base x ext mul": best_ms(lambda: E.mul(E.as_base(a), eb, out=eo), 7),
           "ext mle fold": best_ms(lambda: E.mle_fold(ea, r), 7)}
    kern = _backend.kernels_for("cpu", "gkr")
    for name, ne, de in (("bb", 0, 0), ("be", 0, 1), ("ee", 1, 1)):
        ins, outs = _mles(np, ne, de, n), _outputs(np, ne, de, n // 2)
        res["dense fold " + name] = best_ms(
            lambda: kern.fold_dense(*ins, *outs, F.params), 7 if de else 21)
    return res


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 22)))
