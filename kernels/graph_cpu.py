"""Numba CPU runner of the generated deferred-graph evaluators.

The source comes from :func:`zorch_nb.kernels.graph_codegen.python_source`.
Numba's on-disk cache needs a function defined in a file, so each generated
evaluator is written once to a file of the evaluator cache directory (see
:func:`evaluator_cache_dir`), imported from there and compiled with
``cache=True``: a saved graph replayed in a new process loads its machine code
instead of compiling it again (a 400-operation kernel took ~5 s to compile).
The directory is keyed on the hash of every kernel source, so a changed
callee (``monty.py``) never meets an old cache.  Where no directory is
writable, the source is compiled from memory, as before; so is it when
Numba cannot write its cache (a full disk).  Compiled evaluators
are also memoized in this process, keyed by their source: a graph replayed
twice, or two templates sharing a layout, compile (or load) once.  Field
constants are runtime arguments, so one compiled evaluator serves every field.
Long kernels (past ``launch_config.GRAPH_CPU_UNROLL_MAX_ROWS`` lines of
unrolled code) and product-heavy ones are not compiled here:
:mod:`.graph_interp` interprets them (``graph_interp.interprets`` decides).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import sys
import tempfile
import time

import numpy as np

from . import SOURCES_DIGEST, launch_config
from .jit import njit  # numba.njit, cache keyed on every kernel source
from .cpu_threads import one_thread_set, serialized

__all__ = ["compile_evaluator", "run_evaluator", "evaluator_cache_dir", "use_serial"]

#: What the generated text expects in its namespace (graph_codegen.python_source).
_HEADER = ("import numpy as np\n"
           "from numba import prange\n"
           "from zorch_nb.kernels.monty import mod_add, mod_neg, mod_sub, mont_mul\n\n")


#: Evaluator folders of other kernel sources (older zorch_nb versions, edited
#: checkouts) that no process has opened for this long are deleted.
STALE_FOLDER_DAYS = 30
_PREFIX = "graph-evaluators-"


def evaluator_cache_path() -> str:
    """Where :func:`evaluator_cache_dir` puts this version's evaluators (the
    path only: nothing is created, checked or pruned)."""
    root = os.environ.get("ZORCH_NB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "zorch_nb")
    return os.path.join(root, _PREFIX + SOURCES_DIGEST[:16])


@functools.lru_cache(maxsize=None)
def evaluator_cache_dir():
    """Folder for generated evaluator files, or None.

    ``$ZORCH_NB_CACHE_DIR``, else ``$XDG_CACHE_HOME/zorch_nb`` (default
    ``~/.cache/zorch_nb``), in a subfolder named by the kernel sources' hash.
    Created where possible; a folder that exists but cannot be written still
    serves the files already in it (a cache shipped read-only).  Each process
    marks its folder used (its modification time) and removes the sibling
    folders of other sources unused for :data:`STALE_FOLDER_DAYS` days, so
    the folders of past versions do not pile up; one in use by a process of
    another version is at worst compiled again from memory.  Within the
    folder, an evaluator file is marked used when a process loads it, and
    evaluators unused that long go too (with Numba's cache files of them):
    size sweeps over months would otherwise keep every layout ever seen.
    """
    path = evaluator_cache_path()
    root, name = os.path.split(path)
    try:
        os.makedirs(path, exist_ok=True)
        os.utime(path)
    except OSError:
        pass
    _prune_stale_folders(root, keep=name)
    if os.path.isdir(path):
        _prune_stale_evaluators(path)
        return path
    return None


def _prune_stale_evaluators(folder: str) -> None:
    """Delete the evaluator files of ``folder`` unused (not loaded) for
    :data:`STALE_FOLDER_DAYS` days, with their Numba cache files."""
    cutoff = time.time() - STALE_FOLDER_DAYS * 86400
    try:
        names = os.listdir(folder)
    except OSError:
        return
    stale = []
    for name in names:
        if not (name.startswith("zorch_graph_") and name.endswith(".py")):
            continue
        path = os.path.join(folder, name)
        try:
            if os.stat(path).st_mtime < cutoff:
                os.remove(path)
                stale.append(name[:-3] + ".")
        except OSError:  # a concurrent cleaner, or a read-only cache
            pass
    if not stale:
        return
    cache = os.path.join(folder, "__pycache__")
    try:
        cached = os.listdir(cache)
    except OSError:
        return
    for name in cached:  # Numba's files: <module>.<function>-<line>.py<ver>[.<n>].nb[ic]
        if name.startswith(tuple(stale)):
            try:
                os.remove(os.path.join(cache, name))
            except OSError:
                pass


def _prune_stale_folders(root: str, keep: str) -> None:
    cutoff = time.time() - STALE_FOLDER_DAYS * 86400
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(_PREFIX) or name == keep:
            continue
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode) and info.st_mtime < cutoff:
                shutil.rmtree(path)
        except OSError:  # another user's folder, or a concurrent cleaner
            pass


def _evaluator_file(folder: str, source: str, name: str) -> str:
    """The file holding ``source``: reused when its bytes are exactly these,
    else (re)written atomically -- a damaged or edited file never runs."""
    path = os.path.join(folder, f"zorch_graph_{name}.py")
    data = (_HEADER + source).encode()
    try:
        with open(path, "rb") as fh:
            same = fh.read() == data
        if same:
            try:
                os.utime(path)  # used: kept by _prune_stale_evaluators
            except OSError:  # (a cache shipped read-only)
                pass
            return path
    except OSError:  # absent (or unreadable): write it
        pass
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from other users
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return path


def _signature(fn):
    """The one signature the replay calls an evaluator with: every array a
    C-contiguous uint32 vector (inputs, outputs, consts, fail), then
    ``n_inst`` (int64), ``p`` and ``mu_neg`` (uint32)."""
    from numba import types
    arrays = fn.__code__.co_argcount - 3
    return (types.Array(types.uint32, 1, "C"),) * arrays + (types.int64, types.uint32,
                                                            types.uint32)


def use_serial(n_inst: int, nodes: int) -> bool:
    """Whether a call of ``n_inst`` padded instances of an ``nodes``-node IR runs
    the serial evaluator (see :data:`~.launch_config.GRAPH_CPU_SERIAL_WORK`),
    as it does wherever Numba is set to one thread (``cpu_threads.one_thread_set``)."""
    return n_inst * max(nodes, 1) <= launch_config.GRAPH_CPU_SERIAL_WORK or one_thread_set()


@functools.lru_cache(maxsize=None)
def compile_evaluator(source: str, name: str, serial: bool = False):
    """``njit(parallel=True)`` dispatcher of the function ``name`` in ``source``
    (cached on disk where the cache folder allows; see the module docstring);
    ``serial``: compiled without ``parallel`` (``prange`` runs as ``range``),
    under the name ``name + "__serial"`` in a file of its own -- Numba keys
    its cache on the name and the bytecode, not on ``parallel``."""
    if serial:
        source = source.replace(f"def {name}(", f"def {name}__serial(", 1)
        name += "__serial"
    folder = evaluator_cache_dir()
    if folder is not None:
        try:
            path = _evaluator_file(folder, source, name)
            modname = f"zorch_graph_{name}"
            spec = importlib.util.spec_from_file_location(modname, path)
            module = importlib.util.module_from_spec(spec)
            # registered: a cache entry names the module of its function, and
            # loading it in a later process imports that module by name
            sys.modules[modname] = module
            spec.loader.exec_module(module)
            fn = getattr(module, name)
            dispatcher = njit(parallel=not serial, cache=True)(fn)
            if hasattr(dispatcher, "compile"):  # (plain Python under NUMBA_DISABLE_JIT)
                # compiled (or loaded) now: a cache Numba cannot write (full disk,
                # a path it cannot encode) fails here, where it can fall back
                dispatcher.compile(_signature(fn))
            return dispatcher
        except (OSError, UnicodeError, ImportError, RuntimeError):
            # compile from memory, as without a cache folder (RuntimeError: Numba
            # found no folder it can write its cache to, "no locator available")
            pass
    namespace = {}  # the file's text, run from memory: one list of its imports
    exec(compile(_HEADER + source, f"<zorch_graph {name}>", "exec"), namespace)
    return njit(parallel=not serial)(namespace[name])


def _run(fn, inputs, outputs, consts, fail, n_inst, p, mu_neg) -> None:
    fn(*inputs, *outputs, consts, fail, np.int64(n_inst), np.uint32(p), np.uint32(mu_neg))


_run_parallel = serialized(_run)


def run_evaluator(fn, inputs, outputs, consts, fail, n_inst, p, mu_neg,
                  serial: bool = False) -> None:
    """Run ``fn`` over ``n_inst`` padded instances.

    ``inputs``/``outputs`` are C-contiguous uint32 padded buffers, ``consts``
    the Montgomery words of the IR constants, ``fail`` a zeroed uint32 array of
    length ``n_inst``; ``p``/``mu_neg`` the field constants.  ``serial``: ``fn``
    is a serial evaluator, run on the calling thread without the thread guard
    (no threading layer is involved).
    """
    (_run if serial else _run_parallel)(fn, inputs, outputs, consts, fail, n_inst, p, mu_neg)
