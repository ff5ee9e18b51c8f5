"""Time the extension product on the CPU in three data layouts (an experiment).

Usage: ``NUMBA_NUM_THREADS=1 python benchmarks/ext_mul_layouts.py [LOG2_SIZE]``
(default 22) prints one JSON line, the best of several calls in ms, of one
thread's serial loop over ``2**LOG2_SIZE`` products ``a * b`` (any uint32
words, read mod p), each layout giving the same words:

* ``interleaved``: the library's loop (``field_cpu._ext4_mul_run``) on the
  ``(n, 4)`` layout users hold, which LLVM vectorizes with shuffles between
  the interleaved words and the lanes;
* ``blocks``: the same arrays, each block of 64 elements copied into
  coefficient-major scratch (``(8, 64)``), multiplied there, copied back;
* ``coefficient_major``: the product loop alone on data already held as
  ``(4, n)`` coefficient rows (what the shuffles would cost if the layout
  were free).

The question it answers: whether transposing in blocks pays for itself on
a CPU (it did not on the 2-core AMD EPYC Zen 1 VM: benchmarks/results/README.md).
"""
import json
import os
import sys

import numpy as np

from zorch_nb import KoalaBear as F
from zorch_nb.kernels import field_cpu
from zorch_nb.kernels.jit import njit  # (cache entries keyed on the kernel sources)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (loaded by path too)
from kernel_ab import best_ms  # noqa: E402  (the timing rule of the sibling script)
from zorch_nb.kernels.vector_width import NoaliasCompiler

_U1, _U2, _U3, _U4 = (np.uint64(k) for k in (1, 2, 3, 4))
_mul = field_cpu._ext4_mul_inline
_can = field_cpu._canonical
_BLOCK = 64


@njit(pipeline_class=NoaliasCompiler, cache=True)
def _blocks(lo, hi, a, b, out, p, mu, wm):
    t = np.empty((8, _BLOCK), np.uint32)
    o = np.empty((4, _BLOCK), np.uint32)
    for s in range(lo, hi, _BLOCK):
        m = min(_BLOCK, hi - s)
        for k in range(m):
            j = np.uint64(s + k) * _U4
            t[0, k], t[1, k], t[2, k], t[3, k] = a[j], a[j + _U1], a[j + _U2], a[j + _U3]
            t[4, k], t[5, k], t[6, k], t[7, k] = b[j], b[j + _U1], b[j + _U2], b[j + _U3]
        _rows(m, t, o, p, mu, wm)
        for k in range(m):
            j = np.uint64(s + k) * _U4
            out[j], out[j + _U1], out[j + _U2], out[j + _U3] = o[0, k], o[1, k], o[2, k], o[3, k]


@njit(pipeline_class=NoaliasCompiler, cache=True)
def _rows(n, t, o, p, mu, wm):
    # rows 0-3 of t: a's coefficients, rows 4-7: b's; o: the product's
    for k in range(n):
        c = _mul(_can(t[0, k], p), _can(t[1, k], p), _can(t[2, k], p), _can(t[3, k], p),
                 _can(t[4, k], p), _can(t[5, k], p), _can(t[6, k], p), _can(t[7, k], p),
                 p, mu, wm)
        o[0, k], o[1, k], o[2, k], o[3, k] = c[0], c[1], c[2], c[3]


def main(log2: int) -> dict:
    n = 1 << log2
    rng = np.random.default_rng(1)
    a, b = (rng.integers(0, 2**32, 4 * n, dtype=np.uint32) for _ in range(2))
    out_i, out_b = np.empty_like(a), np.empty_like(a)
    rows = np.ascontiguousarray(np.concatenate([a.reshape(n, 4).T, b.reshape(n, 4).T]))
    out_r = np.empty((4, n), np.uint32)
    f = F.params
    p, mu, wm = np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.w_mont)
    res = {"interleaved": best_ms(lambda: field_cpu._ext4_mul_run(0, n, a, b, out_i, p, mu, wm),
                                  7),
           "blocks": best_ms(lambda: _blocks(0, n, a, b, out_b, p, mu, wm), 7),
           "coefficient_major": best_ms(lambda: _rows(n, rows, out_r, p, mu, wm), 7)}
    if not (np.array_equal(out_b, out_i) and np.array_equal(out_r.T.ravel(), out_i)):
        raise AssertionError("the layouts gave different words")
    return res


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 22)))
