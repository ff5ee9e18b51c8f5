"""One lock around the CPU ``parallel=True`` kernels where Numba needs it.

Numba runs ``prange`` loops on a threading layer: ``tbb`` or ``omp`` where
their libraries load, else its own ``workqueue``.  The workqueue is not
threadsafe: two Python threads inside parallel kernels at once make Numba
*terminate the process* ("Concurrent access has been detected").  That is the
default wherever OpenMP and TBB are missing (e.g. a macOS Python without
libomp), so a user's ``ThreadPoolExecutor`` over field ops would abort there.

:func:`serialized` wraps each CPU launcher: on the workqueue it holds one
process-wide lock for the kernel's run (the calls then take turns, each
still using every core); on a threadsafe layer it calls straight through.
The layer is known only once Numba has started it, so the first guarded
call starts it, as Numba's own first parallel launch would.
"""
import functools
import threading

__all__ = ["serialized", "layer_is_threadsafe"]

_LOCK = threading.Lock()
_THREADSAFE = None  # decided on the first guarded call


def layer_is_threadsafe() -> bool:
    """Whether Numba's threading layer tolerates concurrent parallel kernels."""
    global _THREADSAFE
    if _THREADSAFE is None:
        try:
            import numba
            from numba.np.ufunc import parallel
            parallel._launch_threads()  # what the first parallel launch does
            _THREADSAFE = numba.threading_layer() != "workqueue"
        except Exception:  # a Numba without these internals: stay safe
            _THREADSAFE = False
    return _THREADSAFE


def serialized(launcher):
    """``launcher`` run under the workqueue lock (see the module docstring)."""

    @functools.wraps(launcher)
    def call(*args, **kwargs):
        if _THREADSAFE or (_THREADSAFE is None and layer_is_threadsafe()):
            return launcher(*args, **kwargs)
        with _LOCK:
            return launcher(*args, **kwargs)

    return call
