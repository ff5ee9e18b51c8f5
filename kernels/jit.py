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
drop an index entry, compiled again later.  The name also carries a digest
of the file's bytes, checked on load (:func:`_load_checked`): a file damaged
in place is a miss, not machine code run as it is.

A cached *closure* (a factory's function, one per constant it holds) must
carry a name of its own (:func:`closure_named`; :func:`njit` refuses one
without).  Numba's symbol for a function is its qualified name, a counter
of its process and the argument types; the closures of one factory share
the name, and two processes can give two of them the same count.  Where a
third process linked both cache entries into one kernel, LLVM kept one of
the two same-named definitions (Numba marks them interchangeable): the
serial pyramid kernel ran one mode's loop for another's and wrote zeros in
its later layers (seen once in a test run; replayed in
tests/test_jit_symbols.py).

The counter alone is no guard where processes are forked from one parent:
the children count alike, and a parallel loop's function (``prange``) is
named by the address of a compiler object besides, alike in forked
children too.  Two children compiling two different parallel kernels gave
their loops one symbol, and a later process loading both from the cache
ran one kernel's loop for the other (sub rows gave rsub's words in a test
run; plain Numba does it too: tests/test_jit_symbols.py).  So Numba's counter
starts at a random point in each process and again in each forked child
(:func:`_fresh_function_counter`).

Numba holds one process-wide lock for each compile.  A ``fork`` while
another thread held it (a kernel's first call on a worker thread, a
``multiprocessing`` fork pool started meanwhile) gave a child with the lock
held by a thread it does not have: its first compile waited forever.  So a
fork waits for a running compile to end (:func:`_before_fork`).
"""
import functools
import hashlib
import itertools
import os
import pickle
import re
import secrets
import threading
import time
import types
import warnings

import numba
from numba.core import compiler_lock

from . import SOURCES_DIGEST

__all__ = ["njit", "keyed_on_sources", "closure_named", "made_once"]


def keyed_on_sources(dispatcher):
    """``dispatcher`` (returned), its cache index keyed on :data:`SOURCES_DIGEST`
    as well; before its first compile, which is the first load."""
    index = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    stamp = getattr(index, "_source_stamp", None)
    if stamp is not None and not _keyed(stamp):
        index._source_stamp = (stamp, SOURCES_DIGEST)
        if all(hasattr(index, a) for a in ("_index_name", "_load_index", "_save_index",
                                           "_dump", "_open_for_write", "_data_path",
                                           "_load_data", "_cache_path")):
            index.save = types.MethodType(_save_by_key, index)
            index._load_data = types.MethodType(_load_checked, index)
        load = getattr(dispatcher._cache, "load_overload", None)
        if load is not None:
            dispatcher._cache.load_overload = _damage_is_a_miss(load)
    return dispatcher


def _damage_is_a_miss(load_overload):
    """Numba's ``load_overload``, a damaged entry (a truncated or overwritten
    index or data file: an unpickling error, or data whose digest is not the
    one its name holds, see :func:`_load_checked`) taken as a miss --
    compiled, and saved over it -- where it failed every later call of the
    kernel, in every process, until the file was deleted by hand."""
    def load(sig, target_context):
        try:
            return load_overload(sig, target_context)
        except Exception:
            return None
    return load


#: A data file's name: ``<function>.<key digest>.<content digest>.nbc``.
_DATA_NAME = re.compile(r"\.[0-9a-f]{20}\.([0-9a-f]{16})\.nbc\Z")


class DamagedEntry(Exception):
    """A cache data file whose bytes are not those its name's digest records."""


def _content_digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()[:16]


def _save_by_key(self, key, data):
    """``IndexDataCacheFile.save`` (numba and numba-cuda), the data file named by
    a hash of ``key`` rather than by the first number the index leaves free
    (module docstring) and by a hash of its bytes (checked when it is loaded),
    and written before the index names it."""
    blob = self._dump(data)
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    name = f"{self._index_name[:-len('.nbi')]}.{digest}.{_content_digest(blob)}.nbc"
    with self._open_for_write(self._data_path(name)) as fh:
        fh.write(blob)
    try:
        overloads = self._load_index()
    except Exception:  # a damaged index (see _damage_is_a_miss): replaced
        overloads = {}
    if overloads.get(key) != name:
        overloads[key] = name
        self._save_index(overloads)
        _drop_unlisted(self, set(overloads.values()))


def _load_checked(self, name):
    """``IndexDataCacheFile._load_data``, refusing (:class:`DamagedEntry`, a
    miss for :func:`_damage_is_a_miss`) a file whose bytes do not hash to the
    digest in its name.  Only damage that broke the unpickling was caught: 64
    bytes overwritten inside the machine code unpickled fine and the kernel's
    first call died of SIGILL or SIGSEGV, in every process, until the file
    was deleted by hand.  (Files named before the digest are loaded as they
    were.)"""
    path = self._data_path(name)
    with open(path, "rb") as fh:
        blob = fh.read()
    named = _DATA_NAME.search(name)
    if named and _content_digest(blob) != named.group(1):
        raise DamagedEntry(f"{path}: its bytes do not match the digest in its name")
    return pickle.loads(blob)


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


def made_once(maker):
    """``maker(*key)`` memoized so that every caller of a key gets one object,
    the first stored: for the factories of lazily compiled kernels.

    ``functools.lru_cache`` hands each thread that misses at once the object
    its own call made, and stores only one of them.  The factories here only
    decorate (a kernel compiles on its first launch), so eight threads taking
    a new kernel at once got eight dispatchers, and each compiled (or loaded
    from the disk cache) the same machine code on its first launch; the
    extras were then dropped.  Storing with ``dict.setdefault`` and returning
    what it holds gives every thread the first dispatcher, before any
    launched, so one compile serves them all (Numba compiles under its own
    process-wide lock).  No lock of our own: a ``fork`` cannot catch one
    held.  ``cache_clear()`` forgets them all.
    """
    made = {}

    @functools.wraps(maker)
    def get(*key):
        obj = made.get(key)
        if obj is None:
            obj = made.setdefault(key, maker(*key))
        return obj

    get.cache_clear = made.clear
    return get


def _keyed(stamp) -> bool:
    return isinstance(stamp, tuple) and len(stamp) == 2 and stamp[1] == SOURCES_DIGEST


def closure_named(fn, tag: str):
    """``fn``, a closure made by a factory, renamed ``<qualname>_<tag>``: ``tag``
    names the constants it holds, one tag per closure the factory makes (its
    cached machine code then has symbols of its own: module docstring)."""
    fn.__qualname__ = f"{fn.__qualname__}_{tag}"
    fn.__name__ = f"{fn.__name__}_{tag}"
    return fn


def _check_named(fn):
    # A closure still named as its code is (a factory's function, not renamed
    # by closure_named) would share its symbols with its siblings.
    if getattr(fn, "__closure__", None) and fn.__name__ == fn.__code__.co_name:
        raise TypeError(f"kernels.jit.njit: the closure {fn.__qualname__} is cached under "
                        f"the name its sibling closures share; give it its own with "
                        f"closure_named(fn, tag)")
    return fn


def njit(*args, **options):
    """``numba.njit`` (same arguments, used bare or with options); with
    ``cache=True`` the entries are keyed on the kernel sources (module
    docstring).  A signature (eager compile) is refused with ``cache=True``:
    it would compile, and load, before the key is set; so is a closure not
    renamed by :func:`closure_named`."""
    if not options.get("cache"):
        return numba.njit(*args, **options)
    if "signature_or_function" in options:  # numba's name for the first argument
        args = (options.pop("signature_or_function"),) + args
    if len(args) == 1 and callable(args[0]):  # njit(fn, cache=True)
        return keyed_on_sources(numba.njit(_check_named(args[0]), **options))
    if args and args[0] is not None:  # a signature, or a function and more
        raise TypeError("kernels.jit.njit: a signature with cache=True would load the "
                        "cache before its key is set; leave the compile lazy (pass the "
                        "function alone)")
    decorate = numba.njit(**options)
    return lambda fn: keyed_on_sources(decorate(_check_named(fn)))


#: Seconds a ``fork`` waits for another thread's compile to end; past it the
#: fork goes ahead, with a warning (see :func:`_before_fork`).
FORK_COMPILE_WAIT = 120.0

_forking = threading.local()  # per forking thread: the lock it took


def _before_fork():
    # The fork takes Numba's compiler lock: it waits while another thread
    # compiles, so the child starts with the lock free and the compiler's
    # state whole.  Bounded, since the compiling thread could itself be
    # waiting on the forking one (a user's lock taken in a compile hook):
    # past FORK_COMPILE_WAIT the fork goes ahead as it did before.
    _forking.lock = None
    lock = getattr(compiler_lock.global_compiler_lock, "_lock", None)
    if not (hasattr(lock, "acquire") and hasattr(lock, "release")):
        return  # Numba changed its lock: fork as before
    if lock.acquire(timeout=FORK_COMPILE_WAIT):
        _forking.lock = lock
    else:
        warnings.warn(f"zorch_nb: forking while another thread has been compiling for "
                      f"{FORK_COMPILE_WAIT:g} s; the child's first Numba compile may wait "
                      f"forever", RuntimeWarning, stacklevel=2)


def _after_fork():
    # parent and child alike (the forking thread owns the lock in both)
    lock, _forking.lock = getattr(_forking, "lock", None), None
    if lock is not None:
        lock.release()


def _fresh_function_counter():
    # Numba's per-process function counter, in every symbol it makes, from a
    # random point (module docstring): 48 random bits, so two processes'
    # ranges of a few thousand functions meet with odds of ~1e-11.
    try:
        from numba.core.bytecode import FunctionIdentity
    except ImportError:  # Numba moved it: keep its counter
        return
    if type(getattr(FunctionIdentity, "_unique_ids", None)) is itertools.count:
        FunctionIdentity._unique_ids = itertools.count(1 + secrets.randbits(48))


def _after_fork_in_child():
    _after_fork()
    _fresh_function_counter()


_fresh_function_counter()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork_in_child)
