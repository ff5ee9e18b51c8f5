"""Time the CPU field ops whose serial loops index with the loop counter (us per call).

Usage: ``python benchmarks/field_index_times.py`` prints one JSON line: the
best of 5 repeats of ``max(3, 4e6 // n)`` calls, after a warm-up call, at
2^14 and 2^20 elements, of

* the broadcast rows forms of ``kernels/field_cpu.py``: base rows against one
  row (form 4) and against one word per row (form 5), extension words against
  marked base words (form 1), marked base words against one extension
  element (form 2) and extension words against one element (form 0, whose
  loop indexes with a uint64 already: the control row);
* the base and extension MLE folds, ``F.batch_inv`` (its zero count) and the
  eq tables of a point of ``lg`` coordinates;
* ``F.mul`` of two arrays (its run loop).

A parallel product runs first, so every row runs on the threading layer.  For
a before/after comparison run it in alternating processes, one checkout each
(``python benchmarks/ab_run.py <checkout> benchmarks/field_index_times.py``),
a separate ``NUMBA_CACHE_DIR`` per side, as for
``benchmarks/results/cpu-2026-12-07-field-index.json``.
"""
import json
import timeit

import numpy as np

from zorch_nb import KoalaBear as F


def main() -> dict:
    E = F.ext
    res = {}
    F.mul(F.random(1 << 20, seed=0), F.random(1 << 20, seed=0))  # start the threading layer

    def t(name, f, n):
        f()
        num = max(3, int(4e6 // n))
        res[name] = round(min(timeit.repeat(f, number=num, repeat=5)) / num * 1e6, 2)

    for lg in (14, 20):
        n = 1 << lg
        a, b = F.random(n, seed=1), F.random(n, seed=2)
        x = E.random(n, seed=3)
        r = F.random(1, seed=4)[0]
        re = E.random(1, seed=5)[0]
        A = a.reshape(64, -1)
        S = F.random((64, 1), seed=6)
        row = F.random(n // 64, seed=7)
        o, eo, mo = np.empty_like(A), np.empty_like(x), np.empty_like(a)
        t(f"F.mul {lg}", lambda: F.mul(a, b, out=mo), n)
        t(f"rows form4 F.add(A, row) {lg}", lambda: F.add(A, row, out=o), n)
        t(f"rows form5 F.mul(A, S) {lg}", lambda: F.mul(A, S, out=o), n)
        t(f"form1 E.mul(x, as_base(a)) {lg}", lambda: E.mul(x, E.as_base(a), out=eo), n)
        t(f"form2 E.add(as_base(a), re) {lg}", lambda: E.add(E.as_base(a), re, out=eo), n)
        t(f"form0 E.add(x, re) {lg}", lambda: E.add(x, re, out=eo), n)
        t(f"F.mle_fold {lg}", lambda: F.mle_fold(a, r), n)
        t(f"E.mle_fold {lg}", lambda: E.mle_fold(x, re), n)
        t(f"F.batch_inv {lg}", lambda: F.batch_inv(a), n)
        t(f"F.eq_table {lg}", lambda: F.eq_table(F.random(lg, seed=8)), n)
        t(f"E.eq_table {lg}", lambda: E.eq_table(E.random(lg, seed=8)), n)
    return res


if __name__ == "__main__":
    print(json.dumps(main()))
