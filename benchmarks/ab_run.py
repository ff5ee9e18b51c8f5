"""Run a benchmark script against another checkout's zorch_nb *and* its kernels.

Usage: ``python benchmarks/ab_run.py CHECKOUT SCRIPT [ARGS...]``

For before/after comparisons in alternating processes, one checkout per
side (a ``git worktree`` for the old commit), each with its own
``NUMBA_CACHE_DIR``.  ``PYTHONPATH=CHECKOUT`` alone is not enough where the
package is installed editable (``pip install -e``): ``zorch_nb`` comes from
``CHECKOUT``, but the editable finder maps ``zorch_nb.kernels`` to the
installed checkout's ``kernels/``, so one side runs its ``zorch_nb`` over the
other side's kernels.  This puts ``CHECKOUT`` first on ``sys.path``, drops
that finder, checks where both packages came from and runs ``SCRIPT`` as
``__main__``.
"""
import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    checkout, script = os.path.abspath(sys.argv[1]), sys.argv[2]
    sys.meta_path[:] = [f for f in sys.meta_path if "_EditableFinder" not in repr(f)]
    sys.path.insert(0, checkout)
    sys.argv = [script] + sys.argv[3:]
    import zorch_nb
    import zorch_nb.kernels
    for mod in (zorch_nb, zorch_nb.kernels):
        if not os.path.abspath(mod.__file__).startswith(checkout + os.sep):
            sys.exit(f"{mod.__name__} came from {mod.__file__}, not from {checkout}")
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
