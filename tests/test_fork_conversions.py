"""Conversions at the boundary to integers (encode, decode, random, and so
``Context.copy_to_device``) start no threading layer: on GNU OpenMP
(Numba's ``omp`` layer on Linux) a process forked after that layer started
cannot run the parallel kernels (``kernels/cpu_threads.serialized`` raises
there), so a parent that only builds data must leave its forked children
(``multiprocessing``'s default start method on Linux) free to run field ops,
and a forked child must still convert.  Their CPU kernels are serial for
that reason (found by review: the first, parallel version broke both).
Each case runs in a fresh interpreter that forks.
"""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


_FORK = """
    import os
    import numpy as np
    from zorch_nb import KoalaBear as F
    {parent}
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if ({child}) else 3)
        except RuntimeError as exc:
            print("child:", exc, flush=True)
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
"""


def _child_status(parent, child):
    """Exit status of a child forked after ``parent`` (statements) that
    evaluates ``child`` (an expression): 0 true, 3 false, 4 RuntimeError."""
    script = textwrap.dedent(_FORK).format(parent=parent, child=child)
    res = subprocess.run([sys.executable, "-c", script], env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_children_forked_after_encode_and_random_run_field_ops():
    """The parent only encoded / drew data; a forked child runs field ops
    (encode and random start no threading layer)."""
    parent = ("a = F.random(64, seed=1); b = F.encode(np.arange(1, 65)); "
              "x = F.ext.encode(np.arange(1, 257).reshape(64, 4)); vals = F.decode(b)")
    child = ("(F.decode(F.mul(b, F.inv(b))) == 1).all() and "
             "F.ext.mul(x, F.ext.inv(x)).shape == (64, 4)")
    assert _child_status(parent, child) == "0"


def test_encode_decode_in_a_forked_child_of_a_parent_that_ran_kernels():
    """encode / decode / random run in any forked child, whatever the
    threading layer (here the parent's field op started it)."""
    parent = "a = F.encode(np.arange(1, 65)); F.mul(a, a)"
    child = ("F.decode(F.encode(np.arange(10))).tolist() == list(range(10)) "
             "and F.random(8, seed=2).shape == (8,)")
    assert _child_status(parent, child) == "0"
