"""Numba CPU runner of the generated deferred-graph evaluators.

The source comes from :func:`zorch_nb.kernels.graph_codegen.python_source`.
Numba's on-disk cache needs a function defined in a file, so each generated
evaluator is written once to a file of the generated-kernel folder (see
:mod:`.source_cache`), imported from there and compiled with
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

import collections
import os
import threading

import numpy as np

from . import launch_config, source_cache
from .jit import njit  # numba.njit, cache keyed on every kernel source
from .cpu_threads import one_thread_set, serialized

__all__ = ["compile_evaluator", "run_evaluator", "evaluator_cache_dir", "use_serial"]

#: What the generated text expects in its namespace (graph_codegen.python_source).
_HEADER = ("import numpy as np\n"
           "from numba import prange\n"
           "from zorch_nb.kernels.monty import mod_add, mod_neg, mod_sub, mont_mul\n\n")


# The folder of generated files, its pruning and the file writes live in
# .source_cache (shared with the tensor-train kernels); these names stay.
evaluator_cache_path = source_cache.cache_path
evaluator_cache_dir = source_cache.cache_dir
STALE_FOLDER_DAYS = source_cache.STALE_FOLDER_DAYS


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


#: The evaluators made in this process, by ``(source, name, serial)``; a miss
#: is built under ``_BUILD_LOCK`` (a hit takes no lock).  Not an lru_cache:
#: that let eight threads replaying one new graph at once build its
#: evaluator seven times (one compile, six more disk loads, each keeping its
#: machine code).  Numba compiles under its own global lock, so building one
#: evaluator at a time costs threads nothing.
_EVALUATORS: dict = {}
_BUILD_LOCK = threading.Lock()
_COUNTS = {"hits": 0, "misses": 0}  # (for cache_info)


def compile_evaluator(source: str, name: str, serial: bool = False):
    """``njit(parallel=True)`` dispatcher of the function ``name`` in ``source``
    (cached on disk where the cache folder allows; see the module docstring),
    built once per process (``compile_evaluator.cache_clear()`` forgets them);
    ``serial``: compiled without ``parallel`` (``prange`` runs as ``range``),
    under the name ``name + "__serial"`` in a file of its own -- Numba keys
    its cache on the name and the bytecode, not on ``parallel``."""
    key = (source, name, bool(serial))
    fn = _EVALUATORS.get(key)
    if fn is None:
        with _BUILD_LOCK:
            fn = _EVALUATORS.get(key)  # (built by the thread this one waited for)
            if fn is None:
                fn = _EVALUATORS[key] = _build_evaluator(*key)
                _COUNTS["misses"] += 1
                return fn
    _COUNTS["hits"] += 1  # (unlocked: a count two threads race on may miss one)
    return fn


#: What ``compile_evaluator.cache_info()`` returns: ``functools.lru_cache``'s fields.
_CacheInfo = collections.namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])


def _cache_info():
    """``(hits, misses, maxsize, currsize)``, as ``functools.lru_cache`` reports."""
    return _CacheInfo(_COUNTS["hits"], _COUNTS["misses"], None, len(_EVALUATORS))


def _cache_clear():
    """Forget every evaluator made in this process (and the counts)."""
    _EVALUATORS.clear()
    _COUNTS.update(hits=0, misses=0)


compile_evaluator.cache_info = _cache_info
compile_evaluator.cache_clear = _cache_clear


def _after_fork_in_child():
    # a lock another thread held at the fork would never be released here
    global _BUILD_LOCK
    _BUILD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _build_evaluator(source: str, name: str, serial: bool):
    if serial:
        source = source.replace(f"def {name}(", f"def {name}__serial(", 1)
        name += "__serial"
    folder = evaluator_cache_dir()
    if folder is not None:
        try:
            modname = f"zorch_graph_{name}"
            path, _ = source_cache.source_file(folder, modname + ".py", _HEADER + source)
            fn = getattr(source_cache.import_file(path, modname), name)
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
