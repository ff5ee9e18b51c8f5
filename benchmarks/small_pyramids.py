"""Time ``build_pyramid`` of small dense layers on the CPU (us per call).

Usage: ``python benchmarks/small_pyramids.py`` prints one JSON line: the
best of 7 repeats of ``max(1, 3e5 // n)`` calls each, after a warm-up call,
of a whole pyramid of a base/base and a base/extension dense layer of
2^8 .. 2^16 leaves (allocating its layers, as a prover's first call does).
At these sizes the host work around the fused kernel calls is a large part
of the time.  For a before/after comparison run it in alternating
processes, one checkout each (``python benchmarks/ab_run.py <checkout>
THIS_SCRIPT``: a ``PYTHONPATH`` alone would run the editable install's
``kernels/``), a separate ``NUMBA_CACHE_DIR`` per side, as for
``benchmarks/results/cpu-2026-12-06-small-pyramids.json``.
"""
import json
import timeit

from zorch_nb import KoalaBear as F
from zorch_nb.logup_gkr import GkrLayer, build_pyramid


def main() -> dict:
    E = F.ext
    res = {}
    for lg in (8, 10, 12, 14, 16):
        n = 1 << lg
        layers = {"bb": GkrLayer(F.random(n, seed=1), F.random(n, seed=2), F.random(n, seed=3),
                                 F.random(n, seed=4), 0, F),
                  "be": GkrLayer(F.random(n, seed=1), F.random(n, seed=2), E.random(n, seed=3),
                                 E.random(n, seed=4), 0, F)}
        num = max(1, int(3e5 // n))
        for name, layer in layers.items():
            def call(layer=layer):
                return build_pyramid(layer)
            call()
            best = min(timeit.repeat(call, number=num, repeat=7)) / num
            res[f"build_pyramid {name} {lg}"] = round(best * 1e6, 1)
    return res


if __name__ == "__main__":
    print(json.dumps(main()))
