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
"""
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
    return dispatcher


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
