"""Time ``F.sum`` / ``E.sum`` at 2^4 .. 2^22 elements (CPU, us per call).

Usage: ``python benchmarks/field_sums.py`` prints one JSON line: the best of
7 repeats of ``max(1, 2e5 // n)`` calls each, after a warm-up call, of a
full base sum, a full extension sum and 64 row sums (``axis=-1``) of random
words, after one parallel product has started Numba's threading layer.
For a before/after comparison run it in alternating processes, one
checkout each (``python benchmarks/ab_run.py <checkout> THIS_SCRIPT``: a
``PYTHONPATH`` alone would run the editable install's ``kernels/``), a
separate ``NUMBA_CACHE_DIR`` per side, and compare the best per row, as for
``benchmarks/results/cpu-2026-12-06-field-sums.json``.
"""
import json
import timeit

from zorch_nb import KoalaBear as F


def main() -> dict:
    E = F.ext
    res = {}
    # A parallel kernel first, as in a program that computed the values: the
    # sums use Numba's threads once another kernel has started them (a sum
    # never starts them itself; a full sum is one row, serial either way).
    F.mul(F.random(1 << 18, seed=4), F.random(1 << 18, seed=5))
    for lg in (4, 10, 12, 14, 16, 18, 20, 22):
        n = 1 << lg
        a, x = F.random(n, seed=1), E.random(n, seed=2)
        rows = F.random((64, n // 64 or 1), seed=3)
        num = max(1, int(2e5 // n))

        def best(fn):
            fn()
            return round(min(timeit.repeat(fn, number=num, repeat=7)) / num * 1e6, 2)
        res[f"F.sum {lg}"] = best(lambda: F.sum(a))
        res[f"E.sum {lg}"] = best(lambda: E.sum(x))
        res[f"F.sum rows axis=-1 {lg}"] = best(lambda: F.sum(rows, axis=-1))
    return res


if __name__ == "__main__":
    print(json.dumps(main()))
