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

Small calls need no threading layer at all: :func:`sized` hands a launcher
the *serial twin* of a kernel (the same source compiled without
``parallel``, its ``prange`` loops plain loops on the calling thread) where
one thread is enough.  A parallel launch costs about 2.5 us even for eight
elements (2-core omp), and while another process holds a core, a launch
waits for the descheduled worker: the mean of a tiny ``F.mul`` was 43 us
against its 8.5 us median.  Twins take no lock and start no layer, so they
are also fine under ``fork``.  Where Numba is set to one thread
(``NUMBA_NUM_THREADS=1``, or ``numba.set_num_threads(1)`` on the calling
thread) every call runs its twin: a parallel kernel would use one thread
anyway, and so a forked child, or a process beside busy ones, can set one
thread and never meet the layer.
"""
import functools
import os
import threading
import types

from .launch_config import CPU_SERIAL_WORDS

__all__ = ["serialized", "sized", "tasks", "serial_twin", "layer_is_threadsafe",
           "one_thread_set", "forked_after_gnu_omp", "layer_running"]

_STRAIGHT, _LOCKED, _FORKED_GNU_OMP = "straight", "locked", "forked after GNU OpenMP"
_state = None  # decided on the first guarded call
_lock = threading.Lock()

_FORK_MESSAGE = (
    "zorch_nb's CPU kernels cannot run in a process forked from one that already "
    "ran Numba parallel code on GNU OpenMP (Numba's 'omp' threading layer is not "
    "fork-safe and would terminate this process); start worker processes with "
    "multiprocessing's 'spawn' or 'forkserver' method, or set "
    "NUMBA_THREADING_LAYER='forksafe' (or 'tbb') before Numba is imported, or "
    "call numba.set_num_threads(1) in the child (the kernels then run serially)")


def _decide() -> str:
    global _state
    if _state is None:
        try:
            import numba
            if numba.config.DISABLE_JIT:  # the kernels are plain Python: no layer
                safe = True
            else:
                from numba.core.compiler_lock import global_compiler_lock
                from numba.np.ufunc import parallel
                # What the first parallel launch does, under the compiler lock
                # as Numba's own start runs (in a compile or a cache load): a
                # fork then waits for it (jit's fork hook takes that lock).  A
                # fork in the middle of the start left the child holding
                # Numba's layer-start lock copied from a thread it does not
                # have, and it hung at its first parallel call instead of
                # raising the RuntimeError below.
                with global_compiler_lock:
                    parallel._launch_threads()
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


def forked_after_gnu_omp() -> bool:
    """Whether this process was forked from one whose GNU OpenMP layer had
    started (its parallel kernels would be fatal here; serial twins run)."""
    return _state is _FORKED_GNU_OMP


def layer_running() -> bool:
    """Whether Numba's threading layer has started and parallel kernels may
    run on it here: false before any parallel launch (asking starts
    nothing), and in a child forked after a GNU OpenMP layer started (its
    memory says started; its parallel kernels would be fatal)."""
    if _state is _FORKED_GNU_OMP:
        return False
    # (a Numba without the flag: as if not started)
    return bool(getattr(_numba().np.ufunc.parallel, "_is_initialized", False))


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


_twins = {}


def serial_twin(kernel):
    """The serial compile of ``kernel``, an ``@njit(parallel=True)`` dispatcher: the same Python function, its ``prange`` loops run as
    ``range``, its array arguments ``noalias`` as the parallel loop bodies'
    are; compiled (or loaded from the cache) on first use, once.

    Numba names a cache entry after the function's qualified name and keys
    it on the bytecode, not on ``parallel``: the twin is a copy of the
    function under its own qualified name, so the two never share an entry.
    Under ``NUMBA_DISABLE_JIT=1`` (plain Python kernels) it is ``kernel``.
    """
    twin = _twins.get(kernel)
    if twin is None:
        fn = getattr(kernel, "py_func", None)
        if fn is None:  # NUMBA_DISABLE_JIT: already a plain (serial) function
            return kernel
        from .jit import njit
        from .vector_width import NoaliasCompiler
        copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                  fn.__defaults__, fn.__closure__)
        copy.__qualname__ = fn.__qualname__ + "__serial"
        copy.__module__ = fn.__module__
        copy.__doc__ = fn.__doc__
        # cached where the kernel is (a function without a source file cannot be)
        cached = type(getattr(kernel, "_cache", None)).__name__ != "NullCache"
        # noalias arrays, as the parallel compile's loop bodies have (see
        # vector_width.NoaliasCompiler: in-place elementwise calls vectorize)
        twin = _twins.setdefault(kernel, njit(cache=cached, pipeline_class=NoaliasCompiler)(copy))
    return twin


def _locked_call(kernel, *args):
    with _lock:  # read at call time: a forked child has its own
        return kernel(*args)


def tasks(n, run):
    """Trip count of a ``prange`` over runs of ``run`` of ``n`` items (for :func:`sized`)."""
    return (n + run - 1) // run


def one_thread_set() -> bool:
    """Whether Numba is set to run parallel code on one thread: its
    ``NUMBA_NUM_THREADS`` is 1, or, once its threading layer has started,
    ``numba.get_num_threads()`` (which ``numba.set_num_threads`` sets per
    thread) is 1.  Asking before the layer started would start it."""
    numba = _numba()
    if numba.config.NUMBA_NUM_THREADS == 1:
        return True
    parallel = numba.np.ufunc.parallel
    # (a Numba without the flag: as if the layer had not started)
    if not getattr(parallel, "_is_initialized", False):
        return False
    # Once the layer runs, its own getter of the calling thread's count is
    # what numba.get_num_threads returns after checking the layer started
    # (0.1 against 0.7 us: this runs before every parallel launch)
    return getattr(parallel, "_get_num_threads", numba.get_num_threads)() == 1


def _numba():
    global _numba_module
    if _numba_module is None:
        import numba
        import numba.np.ufunc.parallel  # noqa: F401  (the attribute read above)
        _numba_module = numba
    return _numba_module


_numba_module = None


def _one_thread_enough(tasks, words):
    # (a seam of its own: the tests force either answer)
    return tasks <= 1 or (words is not None and words <= CPU_SERIAL_WORDS)


def sized(kernel, tasks, words=None):
    """``kernel`` to launch for a call of ``tasks`` parallel tasks (its
    ``prange`` trip count) writing ``words`` output words.

    Its serial twin where one thread is enough: one task, or ``words`` at
    most ``CPU_SERIAL_WORDS`` (give ``words`` only for cheap elementwise
    loops: below that a parallel launch costs more than it saves on 2
    cores), or Numba set to one thread (:func:`one_thread_set`).  Else
    ``kernel`` itself, guarded as :func:`serialized` guards a launcher.
    """
    if _one_thread_enough(tasks, words) or one_thread_set():
        return serial_twin(kernel)
    state = _state or _decide()
    if state is _STRAIGHT:
        return kernel
    if state is _FORKED_GNU_OMP:
        raise RuntimeError(_FORK_MESSAGE)
    return functools.partial(_locked_call, kernel)
