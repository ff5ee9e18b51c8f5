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


def _run(script):
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.strip().splitlines()[-1]


_FORK_AFTER_CONVERSIONS = """
    import os
    import numpy as np
    from zorch_nb import KoalaBear as F
    # the parent only builds data: no field op
    a = F.random(64, seed=1)
    b = F.encode(np.arange(1, 65))
    x = F.ext.encode(np.arange(1, 257).reshape(64, 4))
    vals = F.decode(b)
    pid = os.fork()
    if pid == 0:
        try:
            ok = (F.decode(F.mul(b, F.inv(b))) == 1).all() and \\
                F.ext.mul(x, F.ext.inv(x)).shape == (64, 4)
            os._exit(0 if ok else 3)
        except RuntimeError as exc:
            print("child:", exc, flush=True)
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
"""


def test_children_forked_after_encode_and_random_run_field_ops():
    """The parent only encoded / drew data; a forked child runs field ops
    (encode and random start no threading layer)."""
    assert _run(_FORK_AFTER_CONVERSIONS) == "0"


_CONVERSIONS_IN_FORKED_CHILD = """
    import os
    import numpy as np
    from zorch_nb import KoalaBear as F
    a = F.encode(np.arange(1, 65))
    F.mul(a, a)  # the parent runs a field op: Numba's threading layer starts
    pid = os.fork()
    if pid == 0:
        try:
            w = F.encode(np.arange(10))
            ok = F.decode(w).tolist() == list(range(10)) and F.random(8, seed=2).shape == (8,)
            os._exit(0 if ok else 3)
        except RuntimeError as exc:
            print("child:", exc, flush=True)
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
"""


def test_encode_decode_in_a_forked_child_of_a_parent_that_ran_kernels():
    """encode / decode / random run in any forked child, whatever the
    threading layer."""
    assert _run(_CONVERSIONS_IN_FORKED_CHILD) == "0"
