"""The CPU transition of a layer the library made: the second of two, and
the first of a ``GkrLayer.from_leaves`` layer.

A GKR prover's transitions after the first read layers that the previous
transition allocated, so how the library lays out its fresh outputs decides
how fast the next fold reads them (see ``_word_plan`` in
``zorch_nb/logup_gkr.py`` and ``benchmarks/fold_placement.py``).  Times
``layer_transition(l1, out=o)``, where ``l1 = layer_transition(l0)`` and ``o``
is a result of ``layer_transition(l1)`` (no fresh pages in the timing),
base/base from ``2**lg`` rows and ext/ext from ``2**(lg - 2)``, and
``layer_transition(GkrLayer.from_leaves(nums, dens), out=o)`` of ``2**(lg - 1)``
base/base rows, best of 5.
For before/after runs through ``benchmarks/ab_run.py``.

    python benchmarks/second_transition.py [LOG2 ...]   (default: 24 26)
"""
import json
import sys
import timeit

from zorch_nb import KoalaBear as F
from zorch_nb.logup_gkr import GkrLayer, layer_transition


def _best_ms(fn):
    fn()  # (first touch of the outputs' pages)
    return round(min(timeit.repeat(fn, number=1, repeat=5)) * 1e3, 2)


def main(argv):
    rows = {}
    for lg in map(int, argv or ["24", "26"]):
        for name, field, n in (("bb", F, 1 << lg), ("ee", F.ext, 1 << (lg - 2))):
            l1 = layer_transition(GkrLayer(*(field.random(n, seed=i) for i in range(4)), 0, F))
            into = layer_transition(l1)
            rows[f"second transition {name}, {n // 2} elements, ms"] = _best_ms(
                lambda l1=l1, into=into: layer_transition(l1, out=into))
            del l1, into
        nums, dens = (F.random(1 << lg, seed=s) for s in (7, 8))
        layer = GkrLayer.from_leaves(nums, dens)
        into = layer_transition(layer)
        rows[f"first transition bb of from_leaves, {1 << (lg - 1)} elements, ms"] = _best_ms(
            lambda layer=layer, into=into: layer_transition(layer, out=into))
        del nums, dens, layer, into
    print(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
