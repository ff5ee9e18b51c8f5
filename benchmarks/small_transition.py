"""Time one ``layer_transition`` of a small dense layer on the CPU (us per call).

Usage: ``python benchmarks/small_transition.py`` prints one JSON line: the
best of 7 repeats of 20,000 calls each, after a warm-up call, of the
transition of a base/base, a base/extension and an extension/extension
layer of 2^6 and 2^10 leaves, allocating its result (the fold itself is a
small part: the rest is the object layer's host work).  For a before/after
comparison run it in alternating processes, one checkout each
(``python benchmarks/ab_run.py <checkout> THIS_SCRIPT``, a separate
``NUMBA_CACHE_DIR`` per side), as for
``benchmarks/results/cpu-2026-12-07-small-transition.json``.
"""
import json
import timeit

from zorch_nb import KoalaBear as F
from zorch_nb.logup_gkr import GkrLayer, layer_transition


def main() -> dict:
    res = {}
    for lg in (6, 10):
        n = 1 << lg
        for name, (ne, de) in (("bb", (0, 0)), ("be", (0, 1)), ("ee", (1, 1))):
            layer = GkrLayer(*((F.ext if e else F).random(n, seed=i)
                               for i, e in enumerate((ne, ne, de, de))), 0, F)

            def call(layer=layer):
                return layer_transition(layer)
            call()
            best = min(timeit.repeat(call, number=20000, repeat=7)) / 20000
            res[f"{name} 2^{lg}"] = round(best * 1e6, 2)
    return res


if __name__ == "__main__":
    print(json.dumps(main()))
