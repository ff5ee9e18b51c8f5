"""The CPU ``parallel=True`` kernels under Python threads and ``fork``.

Numba runs ``prange`` loops on a threading layer: ``tbb`` or ``omp`` where
their libraries load, else its own ``workqueue``.  Two of them need care:

* The workqueue is not threadsafe: two Python threads inside parallel kernels
  at once make Numba *terminate the process* ("Concurrent access has been
  detected").  It is the default wherever OpenMP and TBB are missing (e.g. a
  macOS Python without libomp), so a user's ``ThreadPoolExecutor`` over field
  ops would abort there.  :func:`serialized` holds one process-wide lock for
  each kernel's run on it (the calls take turns, each still using every
  core); a forked child gets a fresh lock, since the parent's may have been
  held by a thread that does not exist in the child.
* GNU OpenMP (``omp`` on Linux) is not fork-safe: in a child forked after
  the layer started, Numba terminates the process (SIGTERM) at the first
  parallel kernel, and a ``multiprocessing`` fork pool then waits forever
  for its dead worker.  There a launcher raises a ``RuntimeError`` that says
  what to do instead.

On a threadsafe layer a launcher is called straight through.  The layer is
known only once Numba has started it, so the first guarded call starts it,
as Numba's own first parallel launch would.
"""
import functools
import os
import threading

__all__ = ["serialized", "layer_is_threadsafe"]

_STRAIGHT, _LOCKED, _FORKED_GNU_OMP = "straight", "locked", "forked after GNU OpenMP"
_state = None  # decided on the first guarded call
_lock = threading.Lock()

_FORK_MESSAGE = (
    "zorch_nb's CPU kernels cannot run in a process forked from one that already "
    "ran Numba parallel code on GNU OpenMP (Numba's 'omp' threading layer is not "
    "fork-safe and would terminate this process); start worker processes with "
    "multiprocessing's 'spawn' or 'forkserver' method, or set "
    "NUMBA_THREADING_LAYER='forksafe' (or 'tbb') before Numba is imported")


def _decide() -> str:
    global _state
    if _state is None:
        try:
            import numba
            if numba.config.DISABLE_JIT:  # the kernels are plain Python: no layer
                safe = True
            else:
                from numba.np.ufunc import parallel
                parallel._launch_threads()  # what the first parallel launch does
                safe = numba.threading_layer() != "workqueue"
        except Exception:  # a Numba without these internals: stay safe
            safe = False
        _state = _STRAIGHT if safe else _LOCKED
    return _state


def layer_is_threadsafe() -> bool:
    """Whether Numba's threading layer tolerates concurrent parallel kernels."""
    return _decide() != _LOCKED


def _gnu_omp_started() -> bool:
    try:
        import numba
        if numba.config.DISABLE_JIT or numba.threading_layer() != "omp":
            # (threading_layer raises ValueError while no layer has started)
            return False
        from numba.np.ufunc import omppool
        return getattr(omppool, "openmp_vendor", "GNU") == "GNU"
    except Exception:
        return False


def _after_fork_in_child():
    global _lock, _state
    _lock = threading.Lock()
    if _gnu_omp_started():
        _state = _FORKED_GNU_OMP


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def serialized(launcher):
    """``launcher`` guarded for threads and ``fork`` (see the module docstring)."""

    @functools.wraps(launcher)
    def call(*args, **kwargs):
        state = _state or _decide()
        if state is _STRAIGHT:
            return launcher(*args, **kwargs)
        if state is _FORKED_GNU_OMP:
            raise RuntimeError(_FORK_MESSAGE)
        with _lock:
            return launcher(*args, **kwargs)

    return call
