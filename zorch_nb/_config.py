"""What zorch_nb runs on: versions, CPU threads, GPUs and caches.

:func:`show_config` (``python -m zorch_nb info``) is what a bug report or a
"why is this slow / why does ``backend='numba'`` fail here" question needs:
every probe is guarded, so a broken optional dependency shows up as its error
text instead of stopping the report.  It starts nothing the process would
keep: not Numba's threading layer (GNU OpenMP started before a ``fork`` makes
the child's first parallel kernel fatal), and it computes the generated
kernels' folder without creating or pruning it.  It does ask the
CUDA driver for its devices, as any GPU use does.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys

__all__ = ["show_config"]

#: Environment variables that change what zorch_nb, Numba or CuPy do.
_ENV_PREFIXES = ("ZORCH_", "NUMBA_", "CUPY_", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                 "OMP_NUM_THREADS", "XDG_CACHE_HOME")


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _distribution(*names) -> str:
    """Installed version of the first of ``names`` found, read from the
    package metadata (nothing is imported), or "not installed"."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def _package() -> dict:
    from . import __version__
    from .bench import _commit
    here = os.path.dirname(os.path.abspath(__file__))
    kernels = sys.modules.get(__name__.rsplit(".", 1)[0] + ".kernels")
    return {"version": __version__, "location": here,
            "kernels": os.path.dirname(os.path.abspath(kernels.__file__)) if kernels else None,
            "commit": _commit(here)}


def _dependencies() -> dict:
    import numpy as np
    deps = {"python": f"{platform.python_version()} ({platform.python_implementation()}, "
                      f"{sys.executable})",
            "numpy": np.__version__}
    for name in ("numba", "llvmlite", "scipy"):  # (scipy: Numba's np.dot in the TT kernels)
        try:
            deps[name] = importlib.import_module(name).__version__
        except Exception as exc:  # (a dependency: this is a broken install)
            deps[name] = f"not importable ({_error(exc)})"
    deps["numba-cuda"] = _distribution("numba-cuda", "numba_cuda")
    deps["cupy"] = _distribution("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x",
                                 "cupy-rocm-6-0", "cupy-rocm-5-0")
    for extra in ("galois", "matplotlib", "asv", "pytest"):  # the optional extras'
        deps[extra] = _distribution(extra)
    return deps


def _missing_tbb(requested: str) -> str:
    """Where the requested threading layer needs TBB ("tbb", "safe") and TBB
    does not load: a note saying so.  Numba finds out only at the first
    parallel kernel, so small (serial) calls passed and large ones raised
    "No threading layer could be loaded"; loading the library starts nothing."""
    if requested.lower() not in ("tbb", "safe"):
        return ""
    try:
        from numba.np.ufunc import parallel
        parallel._check_tbb_version_compatible()
        return ""
    except ImportError as exc:
        return (f"; it needs TBB, which does not load here ({_error(exc)}): every "
                f"parallel kernel will raise, while small calls run serially")
    except Exception:  # (a Numba without this internal: nothing to say)
        return ""


def _cpu() -> dict:
    from .bench import _cpu_model
    from .kernels.vector_width import lanes64_width
    info = {"model": _cpu_model(), "cores": os.cpu_count()}
    try:
        import numba
        try:
            layer = numba.threading_layer()  # raises until a parallel kernel started it
            # (get_num_threads itself would start the layer: only once it runs)
            info["numba threads"] = numba.get_num_threads()
        except ValueError:
            layer = (f"not started yet (Numba picks one at the first parallel kernel; "
                     f"NUMBA_THREADING_LAYER={numba.config.THREADING_LAYER})"
                     + _missing_tbb(str(numba.config.THREADING_LAYER)))
            info["numba threads"] = numba.config.NUMBA_NUM_THREADS
        info["threading layer"] = layer
    except Exception as exc:
        info["numba threads"] = f"unknown ({_error(exc)})"
    try:
        width = lanes64_width()
        info["vector width"] = (f"{width} x 64-bit lanes, pinned (AVX-512)" if width
                                else "LLVM's choice (no AVX-512)")
    except Exception as exc:
        info["vector width"] = f"unknown ({_error(exc)})"
    return info


def _cupy() -> dict:
    try:
        import cupy
    except Exception as exc:
        return {"importable": f"no ({_error(exc)})"}
    info = {"importable": f"yes, {cupy.__version__}"}
    rt = cupy.cuda.runtime
    try:
        info["cuda runtime"] = rt.runtimeGetVersion()
        info["cuda driver"] = rt.driverGetVersion()
        count = rt.getDeviceCount()
    except Exception as exc:
        info["devices"] = f"none reachable ({_error(exc)})"
        return info
    devices = []
    for i in range(count):
        try:
            props = rt.getDeviceProperties(i)
            name = props["name"].decode() if isinstance(props["name"], bytes) \
                else str(props["name"])
            devices.append(f"{i}: {name}, compute capability {props['major']}.{props['minor']}, "
                           f"{props['totalGlobalMem'] / 2**30:.1f} GiB")
        except Exception as exc:
            devices.append(f"{i}: ({_error(exc)})")
    info["devices"] = devices
    try:
        info["current device"] = rt.getDevice()
    except Exception as exc:
        info["current device"] = f"unknown ({_error(exc)})"
    return info


def _numba_cuda() -> dict:
    try:
        from numba import config, cuda
    except Exception as exc:  # a broken install
        return {"importable": f"no ({_error(exc)})"}
    # (the module may be numba's own, older one: the dependencies' "numba-cuda:
    # not installed" beside "importable: yes" read as a contradiction)
    package = _distribution("numba-cuda", "numba_cuda")
    info = {"importable": "yes", "from": f"the numba-cuda package {package}"
            if package != "not installed" else "numba's built-in numba.cuda (no numba-cuda "
            "package installed)", "simulator": bool(config.ENABLE_CUDASIM)}
    try:
        info["available"] = bool(cuda.is_available())
    except Exception as exc:
        info["available"] = f"no ({_error(exc)})"
    if not config.ENABLE_CUDASIM:
        # it imports, yet may fail on the first compile (numba-cuda 0.30 under
        # NumPy 2.5: np.row_stack is gone); the check backend="numba" makes
        from . import _backend
        problem = _backend.cuda_target_problem()
        info["compiles"] = "yes" if problem is None else f"no ({problem.splitlines()[0]})"
    return info


def _generated_folder(path: str) -> str:
    """``path``, noted where it neither exists nor can be made (nothing is
    created): a HOME that does not exist showed a folder never used."""
    probe = path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if os.path.isdir(path) or (os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)):
        return path
    return (f"{path} (cannot be created: graph and tensor-train kernels are compiled in "
            f"memory in every process; set ZORCH_NB_CACHE_DIR)")


def _caches() -> dict:
    import numba
    from . import kernels
    from .kernels import source_cache
    # the folder Numba's locator picks for the kernels (it falls back past a
    # read-only package or NUMBA_CACHE_DIR to the user's cache folder)
    return {"numba": kernels._numba_cache_folder(os.path.dirname(kernels.__file__))
            or numba.config.CACHE_DIR or "__pycache__ beside each kernel module",
            "generated kernels": _generated_folder(source_cache.cache_path()),
            "cupy kernels": os.environ.get("CUPY_CACHE_DIR")
            or os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")}


def _environment() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}


def _report() -> dict:
    sections = {"zorch_nb": _package, "dependencies": _dependencies, "cpu": _cpu,
                "cupy": _cupy, "numba-cuda": _numba_cuda, "caches": _caches,
                "environment": _environment}
    report = {}
    for name, probe in sections.items():
        try:
            report[name] = probe()
        except Exception as exc:  # a report with a hole beats no report
            report[name] = {"error": _error(exc)}
    return report


def _text(report: dict) -> str:
    lines = []
    for section, entries in report.items():
        lines.append(f"{section}:")
        if not entries:
            lines.append("  (none set)")
        width = max((len(k) for k in entries), default=0)
        for key, value in entries.items():
            if isinstance(value, list):
                value = ("\n" + " " * (width + 4)).join(value) if value else "(none)"
            lines.append(f"  {key + ':':<{width + 1}} {value}")
    return "\n".join(lines)


def show_config(mode: str = "stdout"):
    """Show what zorch_nb runs on, as ``numpy.show_config`` does.

    Sections: this package (version, location, git commit of a checkout);
    Python and the dependencies' versions (read from the installed
    metadata, so an optional one is not imported); the CPU (model, cores,
    Numba's threads and threading layer, the pinned vector width); CuPy (its
    CUDA runtime and driver, every device and the current one); Numba-CUDA
    (importable, simulator, a device available); the cache folders (Numba's,
    the generated kernels' -- graph evaluators, tensor-train kernels --,
    CuPy's); and the environment variables that
    change what zorch_nb, Numba or CuPy do.

    Parameters
    ----------
    mode : {"stdout", "dicts"}, optional
        ``"stdout"`` prints the report; ``"dicts"`` returns it as a dict of
        sections (each a dict of str to str, int, bool, list or None).

    Returns
    -------
    None or dict
        ``None`` for ``"stdout"``, else the report.

    Notes
    -----
    Every probe is guarded: a dependency that fails to import shows as its
    error.  Nothing is started that the process keeps (not Numba's threading
    layer, which matters before a ``fork``; no cache folder is pruned, nor
    created but Numba's, which importing the kernels creates anyway), but
    the CUDA driver is asked for its devices.  Printed, a character the
    output's encoding lacks (an environment value of undecodable bytes, a
    non-ASCII path under an ASCII locale) shows as its backslash escape.
    """
    if not isinstance(mode, str) or mode not in ("stdout", "dicts"):
        raise ValueError(f"Argument `mode` must be 'stdout' or 'dicts', not {mode!r}")
    report = _report()
    if mode == "dicts":
        return report
    text = _text(report)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    # (was a UnicodeEncodeError: os.environ holds undecodable bytes as surrogates)
    print(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
    return None
