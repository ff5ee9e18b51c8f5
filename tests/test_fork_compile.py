"""A ``fork`` while another thread compiles: the child must not inherit
Numba's compiler lock held by a thread it does not have (its first compile
then waited forever); ``kernels/jit.py`` makes the fork wait for the
compile instead.  Each case runs in a fresh interpreter that forks."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1",
                       reason="nothing compiles with the JIT off"),
]

# A thread holding Numba's compiler lock, as a compile does, until `done`.
_HOLD = """
import threading
from numba.core.compiler_lock import global_compiler_lock

held, done = threading.Event(), threading.Event()


def compiling():
    with global_compiler_lock:
        held.set()
        done.wait(60)


thread = threading.Thread(target=compiling)
thread.start()
held.wait()
"""

# The lock is let go 0.5 s after the fork started; the child then compiles a
# new function.  The parent gives the child 120 s (a first compile takes
# about a second).
_SCRIPT = """
    import os, threading, time, warnings
    warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
    import numba
    import zorch_nb
    exec({hold!r})
    threading.Timer(0.5, done.set).start()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if numba.njit(lambda x: x + 1)(41) == 42 else 3)
    waited = time.monotonic() - started
    for _ in range(1200):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = None
    thread.join()
    print("hung" if status is None else os.WEXITSTATUS(status), round(waited, 1))
"""


def test_fork_waits_for_another_threads_compile():
    script = textwrap.dedent(_SCRIPT).format(hold=_HOLD)
    res = subprocess.run([sys.executable, "-c", script],
                         env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    child, waited = res.stdout.split()[-2:]
    assert child == "0", f"the child's compile: {child}\n{res.stderr}"
    assert float(waited) >= 0.4  # the fork waited for the compile to end


def test_fork_goes_ahead_after_the_wait_limit(monkeypatch):
    """A compile that does not end (its thread waiting on the forking one)
    holds the fork FORK_COMPILE_WAIT seconds, then it warns and goes ahead
    without the lock (the fork handlers called as os.fork calls them)."""
    from numba.core.compiler_lock import global_compiler_lock
    from zorch_nb.kernels import jit

    monkeypatch.setattr(jit, "FORK_COMPILE_WAIT", 0.2)
    held = {}
    exec(_HOLD, held)
    try:
        started = time.monotonic()
        with pytest.warns(RuntimeWarning, match="may wait forever"):
            jit._before_fork()
        assert time.monotonic() - started >= 0.2
        jit._after_fork()  # nothing taken, nothing released
    finally:
        held["done"].set()
        held["thread"].join()
    jit._before_fork()  # free now: taken, and released after the fork
    assert global_compiler_lock.is_locked()
    jit._after_fork()
    assert not global_compiler_lock.is_locked()
