"""Which array module an array comes from, and which kernel module runs it.

Backends
--------
``"cpu"``
    Numba ``@njit(parallel=True)`` kernels; the default for NumPy arrays.
``"cupy"``
    CuPy ``RawKernel`` (CUDA C); the default for CuPy arrays and any other
    object exposing ``__cuda_array_interface__``.
``"numba"``
    Numba ``@cuda.jit`` kernels; only when asked for.  With NumPy inputs the
    data is copied to the device and the result back to a NumPy array (this is
    also how the CUDA simulator runs them).

The object layer asks :func:`resolve` once per call; :func:`kernels_for`
imports the matching kernel module lazily so that ``import zorch_nb`` never
needs CuPy or numba-cuda.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys

import numpy as np

__all__ = ["BACKENDS", "array_kind", "resolve", "kernels_for", "device_of",
           "current_device", "check_current_device", "check_same_device", "get_xp",
           "to_module"]

BACKENDS = ("cpu", "cupy", "numba")

_CUDA_EXTRA = ("pip install 'zorch_nb[cuda12]' or 'zorch_nb[cuda13]' "
               "(the machine's CUDA major version)")


def array_kind(x) -> str:
    """``"numpy"``, ``"cupy"`` or ``"cuda"`` (another ``__cuda_array_interface__``)."""
    if isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__ or ""
    if mod.startswith("cupy"):
        return "cupy"
    if hasattr(x, "__cuda_array_interface__"):
        return "cuda"
    if mod.startswith("numba.cuda.simulator"):
        return "cuda"
    return "other"


def refuse_masked(x, name: str, readers: str = "field kernels") -> None:
    """``TypeError`` for a NumPy masked array ``x`` (argument ``name``): the
    ``readers`` (kernels, ``np.asarray``) read its data, hidden entries
    included, as if nothing were masked."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"Argument `{name}` is a masked array; {readers} would ignore "
                        f"its mask: pass `{name}.filled(...)` or `{name}.data`")


def is_cupy_ndarray(x) -> bool:
    """Whether ``x`` is exactly a ``cupy.ndarray`` (not a subclass, not another
    CUDA array); never imports CuPy."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and type(x) is getattr(cupy, "ndarray", None)


def _import_cupy(why="a GPU array was passed"):
    try:
        return importlib.import_module("cupy")
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ImportError(
            f"{why} but CuPy is not installed; {_CUDA_EXTRA} "
            f"(or pass NumPy arrays to run on the CPU)") from exc


def device_of(x):
    """Device id of a GPU array (``None`` for host arrays)."""
    return _cupy_device(x) if array_kind(x) == "cupy" else None


def _cupy_device(x):
    # CuPy's MemoryPointer carries the id as an int; ``x.device`` builds a
    # Device object on every call (this runs once per operand per call)
    dev = getattr(x.data, "device_id", None)
    return x.device.id if dev is None else dev


def _cai_device(x):
    # A foreign CUDA array (e.g. a Numba device array) names no device: ask the
    # CUDA runtime which one its pointer lives on.  None where it cannot tell (a null
    # pointer, the Numba simulator's host memory, no CUDA runtime).
    try:
        ptr = x.__cuda_array_interface__["data"][0]
        if not ptr:
            return None
        return sys.modules["cupy"].cuda.runtime.pointerGetAttributes(ptr).device
    except Exception:
        return None


def current_device():
    """CuPy's current device id -- where CuPy allocates and where zorch_nb's
    GPU kernels launch -- or ``None`` where the CUDA runtime cannot say."""
    try:
        return sys.modules["cupy"].cuda.runtime.getDevice()
    except Exception:  # no CuPy imported, no driver: no launch will happen either
        return None


def check_current_device(device, name: str) -> None:
    """Refuse arrays on ``device`` (``name`` holds one) unless it is CuPy's
    current device: a kernel launched on another device with their pointers
    would fault (an illegal address poisons the whole CUDA context)."""
    current = current_device()
    if device is not None and current is not None and device != current:
        raise ValueError(
            f"Argument `{name}` lives on GPU {device} but the current device is GPU "
            f"{current}; zorch_nb launches its kernels on the current device, as CuPy "
            f"does: call it under `with cupy.cuda.Device({device}):`")


def check_same_device(name: str, device, expected, others: str) -> None:
    """Refuse ``name`` on ``device`` where ``others`` live on ``expected`` (a
    launch reads them all on one device); ``None`` is a device not known."""
    if device is not None and expected is not None and device != expected:
        raise ValueError(f"arrays live on different devices (`{name}` on device {device}, "
                         f"{others} on device {expected})")


def get_xp(kind: str, why: str = "a GPU array was passed"):
    """Array module (numpy or cupy) that holds results for arrays of ``kind``;
    ``why`` CuPy is needed goes into the ImportError when it is missing."""
    if kind == "numpy":
        return np
    return sys.modules.get("cupy") or _import_cupy(why)


def to_module(x, kind: str):
    """``x`` as an array of ``kind``'s module (cupy.asarray of a CAI array is a view)."""
    if kind == "numpy":
        return x
    return get_xp("cupy").asarray(x)


def resolve(arrays: dict, backend: str | None, current: bool = True) -> tuple:
    """Check that the named arrays share a module/device and choose a backend.

    Parameters
    ----------
    arrays : dict
        ``{argument name: array}`` of every array operand.
    backend : {None, "cpu", "cupy", "numba"}
        The backend asked for; ``None`` picks the default of the arrays' kind.
    current : bool
        Also require GPU arrays to live on CuPy's current device (where
        the kernels launch); ``False`` where nothing is launched yet
        (validating a layer).

    Returns
    -------
    (kind, backend) : tuple of str
        ``kind`` is ``"numpy"`` or ``"cupy"`` (CAI arrays are viewed as CuPy).
    """
    if backend is not None and type(backend) is not str:
        if not isinstance(backend, str):  # (an array compares elementwise below)
            raise TypeError(f"Argument `backend` must be one of {BACKENDS} or None, not "
                            f"{type(backend).__name__} {backend!r}")
        backend = str(backend)  # np.str_
    if backend is None or backend == "cpu":  # fast path: NumPy operands on the CPU
        for x in arrays.values():
            if type(x) is not np.ndarray:
                break
        else:
            return "numpy", "cpu"
    if backend is None or backend == "cupy":  # fast path: CuPy operands on one device
        cupy = sys.modules.get("cupy")
        ndarray = getattr(cupy, "ndarray", None)
        device = None
        for x in arrays.values():
            if ndarray is None or type(x) is not ndarray:
                break
            d = _cupy_device(x)
            if device is None:
                device = d
            elif d != device:
                break
        else:
            if device is not None and (not current or device == current_device()):
                return "cupy", "cupy"
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"Argument `backend` must be one of {BACKENDS} or None, not {backend!r}")
    kinds, devices, seen = {}, {}, {}
    for name, x in arrays.items():  # one pass: kind, and device of CuPy arrays
        k = array_kind(x)
        if k == "other":
            raise TypeError(
                f"Argument `{name}` must be a NumPy array or a CUDA array "
                f"(CuPy / __cuda_array_interface__), not {type(x).__name__}")
        kinds[name] = "numpy" if k == "numpy" else "cupy"
        seen[name] = {"numpy": "NumPy", "cupy": "CuPy"}.get(
            k, f"a CUDA array ({type(x).__module__}.{type(x).__name__})")
        if k == "cupy":
            devices[name] = _cupy_device(x)
    distinct = set(kinds.values())
    if len(distinct) > 1:  # host and device arrays (CuPy and other CUDA arrays mix)
        desc = ", ".join(f"`{n}` is {seen[n]}" for n in kinds)
        raise TypeError(f"arrays from different modules cannot be combined ({desc}); "
                        f"move them to one module first")
    kind = distinct.pop() if distinct else "numpy"
    if kind == "cupy":
        get_xp("cupy")  # CAI arrays are viewed as CuPy arrays: CuPy must exist
        for name, x in arrays.items():
            if kinds[name] == "cupy" and name not in devices:  # a foreign CUDA array
                d = _cai_device(x)
                if d is not None:
                    devices[name] = d
        if len(set(devices.values())) > 1:
            desc = ", ".join(f"`{n}` on device {d}" for n, d in devices.items())
            raise ValueError(f"arrays live on different devices ({desc})")
        if devices and current:
            name, device = next(iter(devices.items()))
            check_current_device(device, name)
    if backend is None:
        backend = "cpu" if kind == "numpy" else "cupy"
    elif backend == "cupy" and sys.modules.get("cupy") is None:
        _import_cupy("backend='cupy' was asked for")
    if backend == "cpu" and kind != "numpy":
        raise TypeError("backend='cpu' needs NumPy arrays; copy GPU arrays to the host "
                        "first (e.g. `.get()`), or use backend='cupy'/'numba'")
    return kind, backend


#: ``(module name, module)`` per (backend, family), the module entered once its
#: import has returned: ``sys.modules`` holds a module from the moment its
#: import *starts*, so another thread reading it there alone could get one
#: half initialized.
_KERNEL_MODULES: dict = {}


def kernels_for(backend: str, family: str):
    """Import the kernel module ``zorch_nb.kernels.<family>_<impl>`` for a backend.

    ``family`` is e.g. ``"field"``; the modules are ``field_cpu``,
    ``field_cupy`` and ``field_cuda_numba``.
    """
    name, module = _KERNEL_MODULES.get((backend, family), (None, None))
    if module is not None and sys.modules.get(name) is module:  # the common case
        return module
    suffix = {"cpu": "cpu", "cupy": "cupy", "numba": "cuda_numba"}[backend]
    name = f"zorch_nb.kernels.{family}_{suffix}"
    try:
        if backend == "numba" and name not in sys.modules:  # (imported: it was checked)
            _require_cuda_driver()
        # import_module waits for an import another thread has under way
        module = importlib.import_module(name)
    except ImportError as exc:
        if backend == "cpu":
            raise
        missing = "CuPy" if backend == "cupy" else "numba-cuda"
        raise ImportError(
            f"backend={backend!r} needs {missing}, which is not importable here "
            f"({exc}); {_CUDA_EXTRA}") from exc
    if backend == "numba":
        _require_cuda_target()
    _KERNEL_MODULES[backend, family] = name, module
    return module


def _require_cuda_driver():
    """Raise a clear error where Numba-CUDA has no device (else the first launch
    fails deep inside Numba).  Runs until the kernel module is first imported."""
    from numba import cuda
    if not cuda.is_available():
        raise ValueError("Argument `backend`='numba' needs a CUDA GPU with a working "
                         "driver, and numba.cuda.is_available() is False here; use "
                         "backend='cpu' (or NUMBA_ENABLE_CUDASIM=1 for the simulator)")


#: The numba-cuda module whose import loads the CUDA target's NumPy support
#: (its typing and lowering registries): the first compile imports it.
_CUDA_TARGET_PROBE = "numba.cuda.cudaimpl"


@functools.lru_cache(maxsize=None)
def cuda_target_problem():
    """``None``, or why numba-cuda's CUDA target cannot compile here (``"Type: text"``).

    numba-cuda loads its NumPy support on the first compile, so a NumPy it
    does not support fails only then, deep inside Numba: numba-cuda 0.30
    registers ``np.row_stack``, which NumPy 2.5 removed, and every kernel
    then fails with an ``AttributeError``.  Importing that support once up
    front turns it into a clear error.  ``None`` under the simulator (it
    compiles nothing) and where numba-cuda keeps that support elsewhere.
    """
    from numba import config
    if config.ENABLE_CUDASIM:
        return None
    try:
        importlib.import_module(_CUDA_TARGET_PROBE)
    except Exception as exc:  # whatever the import raises is what a launch would
        if isinstance(exc, ModuleNotFoundError) and exc.name == _CUDA_TARGET_PROBE:
            return None  # another layout: nothing to probe
        return f"{type(exc).__name__}: {exc}"
    return None


def _require_cuda_target():
    """Raise a clear ``ImportError`` where numba-cuda cannot compile (see
    :func:`cuda_target_problem`); runs until a kernel module is first returned."""
    problem = cuda_target_problem()
    if problem is None:
        return
    from importlib import metadata
    try:
        version = f" {metadata.version('numba-cuda')}"
    except metadata.PackageNotFoundError:
        version = ""
    hint = ("it registers np.row_stack, which NumPy 2.5 removed: pip install 'numpy<2.5'"
            if "row_stack" in problem else "install a NumPy and numba-cuda that work together")
    raise ImportError(f"backend='numba': numba-cuda{version} cannot compile kernels with "
                      f"NumPy {np.__version__} here ({problem}); {hint}, or leave "
                      f"backend='numba' out (CuPy arrays then run the CUDA C kernels, "
                      f"NumPy arrays the CPU kernels)")


def physical_memory():
    """Bytes of memory this process can have: the machine's RAM, or the
    tightest cgroup memory limit over the process where that is smaller (a
    container's), or None where neither is known.

    The guards that refuse host allocations no machine could hold (graph
    replays and calls, dense tensor trains) read it here: an overcommitting
    OS grants such an allocation and then kills the process filling it (the
    OOM killer does the same at a container's limit).  Read once per
    process: the cgroup files cost ~0.3 ms, and the guards run per call.
    """
    return _memory_cap()


@functools.lru_cache(maxsize=None)
def _memory_cap():
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        ram = None
    limits = [limit for limit, _ in cgroup_memory_limits()]
    if ram is not None:
        limits.append(ram)
    return min(limits) if limits else None


def _read_text(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _stat_value(text, key):
    """``key``'s value in a cgroup memory.stat text, or 0."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def cgroup_memory_limits(root="/"):
    """``[(limit, used), ...]`` bytes of every cgroup memory limit over this
    process: its own cgroup and every ancestor on cgroup v2, the hierarchy's
    limit on v1; ``used`` without reclaimable page cache (inactive files, as
    MemAvailable counts them).  Empty where there is no limit or no cgroup
    to read (not Linux).  ``root``: where ``/proc`` and ``/sys`` are (tests)."""
    text = _read_text(os.path.join(root, "proc/self/cgroup"))
    found = []
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":      # v2: memory.max at every level up to the root
            base = os.path.normpath(os.path.join(root, "sys/fs/cgroup"))
            here = os.path.normpath(os.path.join(base, path.strip("/")))
            if not os.path.isdir(here):    # a namespace's root shows "/"
                here = base
            while True:
                limit = (_read_text(os.path.join(here, "memory.max")) or "").strip()
                used = (_read_text(os.path.join(here, "memory.current")) or "").strip()
                if limit.isdigit() and used.isdigit():
                    cache = _stat_value(_read_text(os.path.join(here, "memory.stat")),
                                        "inactive_file")
                    found.append((int(limit), max(0, int(used) - cache)))
                if here == base or not here.startswith(base + os.sep):
                    break
                here = os.path.dirname(here)
        elif "memory" in controllers.split(","):   # v1: the hierarchy's limit
            base = os.path.join(root, "sys/fs/cgroup/memory")
            here = os.path.join(base, path.strip("/"))
            if not os.path.isdir(here):
                here = base
            stat = _read_text(os.path.join(here, "memory.stat"))
            limit = _stat_value(stat, "hierarchical_memory_limit")
            used = (_read_text(os.path.join(here, "memory.usage_in_bytes")) or "").strip()
            # "no limit" is the largest page-aligned int64 (9223372036854771712)
            if 0 < limit < 1 << 62 and used.isdigit():
                cache = _stat_value(stat, "total_inactive_file")
                found.append((limit, max(0, int(used) - cache)))
    return found
