"""Generated kernel sources kept on disk, so Numba's cache can serve them.

Numba caches only functions defined in a file.  The kernels generated at run
time -- the deferred graph's evaluators (:mod:`.graph_cpu`) and the
structure-specialized tensor-train kernels (:mod:`.tt_kernels`) -- are
therefore written to files of one folder, imported from there and compiled
with ``cache=True``: a later process loads their machine code instead of
compiling again.  The folder is named by the hash of every kernel source
(:data:`~zorch_nb.kernels.SOURCES_DIGEST`), so a changed callee never meets an
old cache.  Where no folder is writable the callers compile from memory.

Files are content-addressed by their callers (the same text, the same name),
written atomically and reused only when their bytes are exactly the text, so
a damaged or edited file never runs.  Folders of other sources and files not
loaded for :data:`STALE_FOLDER_DAYS` days are deleted, with Numba's cache
files of them.
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

from . import SOURCES_DIGEST, _numba_cache_folder

__all__ = ["cache_path", "cache_dir", "source_file", "import_file", "prune_oldest",
           "STALE_FOLDER_DAYS", "GENERATED_PREFIXES"]

#: Folders of other kernel sources (older zorch_nb versions, edited
#: checkouts) that no process has opened for this long are deleted, and so
#: are generated files of the current folder not loaded for this long.
STALE_FOLDER_DAYS = 30
#: The file names this module's callers generate (graph evaluators,
#: tensor-train kernels); nothing else in the folder is ever deleted.
GENERATED_PREFIXES = ("zorch_graph_", "zorch_tt_")
# (the folder's name predates the tensor-train kernels; kept, so caches
# written by earlier versions of these sources stay found)
_PREFIX = "graph-evaluators-"


def cache_path() -> str:
    """Where :func:`cache_dir` puts this version's generated files (the path
    only: nothing is created, checked or pruned)."""
    root = os.environ.get("ZORCH_NB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "zorch_nb")
    # absolute: a relative folder, resolved again after an os.chdir, was
    # another one (not created: every kernel compiled from memory)
    return os.path.join(os.path.abspath(root), _PREFIX + SOURCES_DIGEST[:16])


@functools.lru_cache(maxsize=None)
def cache_dir():
    """Folder for generated kernel files, or None.

    ``$ZORCH_NB_CACHE_DIR``, else ``$XDG_CACHE_HOME/zorch_nb`` (default
    ``~/.cache/zorch_nb``), in a subfolder named by the kernel sources' hash.
    Created where possible; a folder that exists but cannot be written still
    serves the files already in it (a cache shipped read-only).  Each process
    marks its folder used (its modification time) and removes the sibling
    folders of other sources unused for :data:`STALE_FOLDER_DAYS` days, so
    the folders of past versions do not pile up; one in use by a process of
    another version is at worst compiled again from memory.  Within the
    folder, a generated file is marked used when a process loads it, and
    files unused that long go too (with Numba's cache files of them):
    size sweeps over months would otherwise keep every layout ever seen.
    """
    path = cache_path()
    root, name = os.path.split(path)
    problem = None
    try:
        os.makedirs(path, exist_ok=True)
        os.utime(path)
    except OSError as exc:
        problem = exc
    _prune_stale_folders(root, keep=name)
    if os.path.isdir(path):
        _prune_stale_files(path)
        return path
    # Once a process (the lru_cache): every graph and tensor-train kernel is
    # then compiled in memory, in every process, which a user saw only as
    # slow starts (a HOME that does not exist).
    import warnings
    reason = f" ({getattr(problem, 'strerror', None) or problem})" if problem else ""
    warnings.warn(f"zorch_nb cannot create its folder for generated kernels, {path}{reason}: "
                  f"graph and tensor-train kernels are compiled again in every process; "
                  f"set ZORCH_NB_CACHE_DIR to a folder that can be written",
                  RuntimeWarning, stacklevel=3)
    return None


def _prune_stale_files(folder: str) -> None:
    """Delete the generated files of ``folder`` unused (not loaded) for
    :data:`STALE_FOLDER_DAYS` days, with their Numba cache files, and Numba's
    files of generated files no longer there (:func:`_sweep_orphans`)."""
    cutoff = time.time() - STALE_FOLDER_DAYS * 86400
    files = _generated(folder, GENERATED_PREFIXES)
    gone = _remove(folder, [name for name, mtime in files if mtime < cutoff])
    _sweep_orphans(folder, [name for name, _ in files if name not in gone])


#: Numba cache files of a generated file that is gone are deleted once they
#: are this old (younger ones may belong to a file another process is about
#: to write or has just replaced).
ORPHAN_SECONDS = 600


def _sweep_orphans(folder: str, names=None) -> None:
    """Delete Numba's cache files (and the import's bytecode) of generated
    modules whose file is gone: a kernel still held in a process after its
    file was pruned (or pruned by another process while it compiled) saves
    its next signatures for a file that no pruning would list again.
    ``names``: the generated files still here, where the caller has just
    listed them (else the folder is listed)."""
    if names is None:
        names = [name for name, _ in _generated(folder, GENERATED_PREFIXES)]
    if not names:  # (Numba's folder is found through a file of this one)
        return
    present = {name[:-3] for name in names}
    _delete_cached(folder, _numba_cache_folder(folder, names[0]),
                   lambda name: (name.startswith(GENERATED_PREFIXES)
                                 and name.split(".", 1)[0] not in present),
                   time.time() - ORPHAN_SECONDS)


def _delete_cached(folder: str, numba_folder, doomed, cutoff=None) -> None:
    """Delete the files named ``doomed(name)`` (modified before ``cutoff``,
    if given) of the folders holding the machine code and bytecode of
    ``folder``'s generated modules: Numba's (``numba_folder``: __pycache__
    here, or a folder of NUMBA_CACHE_DIR) and the import's ``__pycache__``."""
    for where in {numba_folder, os.path.join(folder, "__pycache__")} - {None}:
        try:
            cached = os.listdir(where)
        except OSError:
            continue
        for name in cached:
            if doomed(name):
                path = os.path.join(where, name)
                try:
                    if cutoff is None or os.stat(path).st_mtime < cutoff:
                        os.remove(path)
                except OSError:  # a concurrent cleaner
                    pass


def prune_oldest(folder: str, prefix: str, keep: int) -> None:
    """Delete all but the ``keep`` most recently used files of ``folder``
    named ``prefix*.py``, with their Numba cache files (a bound on the disk
    a stream of distinct generated kernels takes)."""
    files = _generated(folder, (prefix,))
    if len(files) > keep:
        files.sort(key=lambda f: f[1])
        _remove(folder, [name for name, _ in files[:len(files) - keep]])
        _sweep_orphans(folder)  # (every prefix's files count as present)


def _generated(folder: str, prefixes: tuple) -> list:
    """``[(file name, modification time)]`` of the generated files here."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        if name.startswith(prefixes) and name.endswith(".py"):
            try:
                found.append((name, os.stat(os.path.join(folder, name)).st_mtime))
            except OSError:  # a concurrent cleaner
                pass
    return found


def _remove(folder: str, names: list) -> set:
    """Delete the generated files ``names`` of ``folder`` with their cached
    code; returns the names deleted."""
    if not names:
        return set()
    # where Numba keeps their machine code (asked while a file of this folder
    # still exists)
    cache = _numba_cache_folder(folder, names[0])
    gone = set()
    for name in names:
        try:
            os.remove(os.path.join(folder, name))
            gone.add(name)
        except OSError:  # a concurrent cleaner, or a read-only cache
            pass
    if gone:
        # Numba's files: <module>.<function>-<line>.py<ver>[.<n>].nb[ic]; and the
        # import's bytecode, <module>.cpython-<ver>.pyc
        modules = tuple(name[:-3] + "." for name in gone)
        _delete_cached(folder, cache, lambda name: name.startswith(modules))
    return gone


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
                # Numba's files of it, where they are not inside it (NUMBA_CACHE_DIR)
                files = _generated(path, GENERATED_PREFIXES)
                cache = _numba_cache_folder(path, files[0][0]) if files else None
                shutil.rmtree(path)
                if cache and not cache.startswith(path + os.sep):
                    shutil.rmtree(cache, ignore_errors=True)
        except OSError:  # another user's folder, or a concurrent cleaner
            pass


def source_file(folder: str, name: str, text: str) -> tuple:
    """``(path, written)``: the file ``name`` of ``folder`` holding ``text``,
    reused (and marked used) when its bytes are exactly these, else
    (re)written atomically; ``written`` says which.  OSError where it can be
    neither."""
    path = os.path.join(folder, name)
    data = text.encode()
    try:
        with open(path, "rb") as fh:
            same = fh.read() == data
        if same:
            try:
                os.utime(path)  # used: kept by _prune_stale_files
            except OSError:  # (a cache shipped read-only)
                pass
            return path, False
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
    return path, True


def import_file(path: str, modname: str):
    """The module of the file at ``path``, imported as ``modname`` and
    registered in ``sys.modules``: a Numba cache entry names the module of its
    function, and loading it in a later process imports that module by name."""
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    spec.loader.exec_module(module)
    return module
