"""Numba's ``njit``, with on-disk cache entries keyed on every kernel source.

Numba keys a ``cache=True`` entry on the jitted function's bytecode and the
size and modification time of its own file, not on the callees it inlines
from other files (:mod:`.monty` is in every kernel).  The package's import
empties the cache folder when any source changed since the last import
(``kernels/__init__.py``), but that cannot help when a process that imported
the old sources compiles a kernel after an upgrade: it saves the old
arithmetic under a key the new version's processes match.  So each cached
dispatcher made here (and :func:`keyed_on_sources` for others, such as
Numba-CUDA's) compares its index against the file's stamp *and*
:data:`SOURCES_DIGEST`, the digest of the sources its own process imported:
an entry saved by other sources is never loaded, only replaced.

The stamp is a private attribute of Numba's cache index (``_cache_file.
_source_stamp``, alike in numba 0.68 and numba-cuda 0.30; a test checks every
cached kernel carries the digest); where it is missing, a dispatcher keeps
Numba's own key and the import-time check alone.

The same dispatchers also name each entry's machine-code file by its key
(:func:`_save_by_key`).  Numba numbers them instead -- the first number its
index does not list -- so two processes compiling two signatures of one
kernel into an empty cache (a process pool or pytest-xdist right after an
upgrade) could both write ``.1.nbc``, and where the index of one met the
file of the other, every later process was served the other signature's
machine code for it (arrays: "can't unbox array" TypeErrors until the cache
was deleted; tests/test_environment.py replays the interleaving).  A file
named by its key only ever holds that key's code; the worst a race does is
drop an index entry, compiled again later.
"""
import hashlib
import os
import time
import types

import numba

from . import SOURCES_DIGEST

__all__ = ["njit", "keyed_on_sources"]


def keyed_on_sources(dispatcher):
    """``dispatcher`` (returned), its cache index keyed on :data:`SOURCES_DIGEST`
    as well; before its first compile, which is the first load."""
    index = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    stamp = getattr(index, "_source_stamp", None)
    if stamp is not None and not _keyed(stamp):
        index._source_stamp = (stamp, SOURCES_DIGEST)
        if all(hasattr(index, a) for a in ("_index_name", "_load_index", "_save_index",
                                           "_save_data", "_cache_path")):
            index.save = types.MethodType(_save_by_key, index)
        load = getattr(dispatcher._cache, "load_overload", None)
        if load is not None:
            dispatcher._cache.load_overload = _damage_is_a_miss(load)
    return dispatcher


def _damage_is_a_miss(load_overload):
    """Numba's ``load_overload``, a damaged entry (a truncated or overwritten
    index or data file: an unpickling error) taken as a miss -- compiled, and
    saved over it -- where it failed every later call of the kernel, in every
    process, until the file was deleted by hand."""
    def load(sig, target_context):
        try:
            return load_overload(sig, target_context)
        except Exception:
            return None
    return load


def _save_by_key(self, key, data):
    """``IndexDataCacheFile.save`` (numba and numba-cuda), the data file named by
    a hash of ``key`` rather than by the first number the index leaves free
    (module docstring), and written before the index names it."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    name = f"{self._index_name[:-len('.nbi')]}.{digest}.nbc"
    self._save_data(name, data)
    try:
        overloads = self._load_index()
    except Exception:  # a damaged index (see _damage_is_a_miss): replaced
        overloads = {}
    if overloads.get(key) != name:
        overloads[key] = name
        self._save_index(overloads)
        _drop_unlisted(self, set(overloads.values()))


#: A data file no index lists is deleted once this old (younger ones may be
#: another process's, written just before its index).
UNLISTED_SECONDS = 600


def _drop_unlisted(self, listed: set) -> None:
    """Delete this function's data files its index does not list: Numba's
    numbering overwrote ``.1.nbc`` after an edit of the function, while a
    file named by a key of the old bytecode would stay forever."""
    prefix = self._index_name[:-len(".nbi")] + "."
    cutoff = time.time() - UNLISTED_SECONDS
    try:
        names = os.listdir(self._cache_path)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".nbc") and name not in listed:
            path = os.path.join(self._cache_path, name)
            try:
                if os.stat(path).st_mtime < cutoff:
                    os.remove(path)
            except OSError:  # a concurrent cleaner
                pass


def _keyed(stamp) -> bool:
    return isinstance(stamp, tuple) and len(stamp) == 2 and stamp[1] == SOURCES_DIGEST


def njit(*args, **options):
    """``numba.njit`` (same arguments, used bare or with options); with
    ``cache=True`` the entries are keyed on the kernel sources (module
    docstring).  A signature (eager compile) is refused with ``cache=True``:
    it would compile, and load, before the key is set."""
    if not options.get("cache"):
        return numba.njit(*args, **options)
    if args and callable(args[0]):  # njit(fn, cache=True)
        return keyed_on_sources(numba.njit(*args, **options))
    if args:
        raise TypeError("kernels.jit.njit: a signature with cache=True would load the "
                        "cache before its key is set; leave the compile lazy")
    decorate = numba.njit(**options)
    return lambda fn: keyed_on_sources(decorate(fn))
