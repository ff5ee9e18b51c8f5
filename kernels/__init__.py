"""The kernel layer of zorch_nb (installed as ``zorch_nb.kernels``).

Plain arrays in, ``out`` arrays written; no objects, nothing input-sized
allocated (small scratch only: a run of the powers, prefix sums), and only
cheap O(1) checks of the arguments (``launch_checks``), so a misuse is an
error, not a wrong answer or a crash -- the object layer (``zorch_nb``)
validates the rest.  (The GKR launchers' ``*_trusted`` twins skip those
checks: they are the object layer's entry, for arguments it built itself.)
Field constants come from :mod:`.field_params`, scalar Montgomery
arithmetic from :mod:`.monty` (Numba) and ``cuda/monty.cuh`` (CUDA C).
Nothing here imports from the object layer (``zorch_nb``).
"""
import hashlib
import os


def sources_digest() -> str:
    """SHA-256 of every kernel source (``*.py`` here): changes when any kernel
    or callee changes, so caches keyed on it never serve stale machine code."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as fh:
                digest.update(name.encode() + b"\0" + fh.read())
    return digest.hexdigest()


#: The oldest Numba the kernels are written for (setup.cfg's install_requires).
NUMBA_MIN = (0, 61)


def _require_numba() -> None:
    """Import Numba, or say what is missing in one line.

    An install without it (``pip install --no-deps``) failed deep in this
    package's import with a bare ``No module named 'numba'``; an older one
    (below :data:`NUMBA_MIN`) imported silently and misbehaved later (its
    llvmlite refuses the vector-width option :mod:`.vector_width` sets).
    """
    floor = ".".join(map(str, NUMBA_MIN))
    try:
        import numba
    except ImportError as exc:
        raise ImportError(f"zorch_nb needs Numba (numba>={floor}, one of its dependencies), "
                          f"which does not import here ({exc}): pip install "
                          f"'numba>={floor}'") from exc
    import re
    version = tuple(int(x) for x in re.findall(r"\d+", numba.__version__)[:2])
    if version < NUMBA_MIN:
        import warnings
        warnings.warn(f"zorch_nb needs numba>={floor}, this is numba {numba.__version__}: "
                      f"kernels may fail to compile or compile slower code; pip install "
                      f"'numba>={floor}'", RuntimeWarning, stacklevel=2)


_require_numba()

#: :func:`sources_digest` of the sources this process imported.  Every cache
#: key uses this reading, never a later one: a process still running the old
#: sources after an upgrade must not save its machine code under the new
#: version's key (see :mod:`.jit`).
SOURCES_DIGEST = sources_digest()


def _numba_cache_folder(here: str, name: str = "__init__.py"):
    """The folder Numba caches this folder's kernels in: the one of its first
    locator class that accepts the file ``name`` here, which must exist
    (``__pycache__`` beside the sources, a subfolder of ``NUMBA_CACHE_DIR``,
    or the user-wide folder), or None where Numba's internals differ from
    what this expects."""
    try:
        from numba.core.caching import CacheImpl
        for cls in CacheImpl._locator_classes:
            locator = cls.from_function(_probe, os.path.join(here, name))
            if locator is not None:
                return locator.get_cache_path()
    except Exception:  # private API: a Numba that differs keeps its own behaviour
        return None
    return None


def _drop_stale_numba_cache() -> None:
    """Delete this folder's Numba cache files when any kernel source changed.

    Housekeeping: no entry of other sources is ever loaded (:mod:`.jit` keys
    each on :data:`SOURCES_DIGEST`), but Numba would leave their files behind.
    A stamp of the digest, in the folder Numba uses for them
    (:func:`_numba_cache_folder`), says when they are another version's.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    cache = _numba_cache_folder(here) or os.path.join(here, "__pycache__")
    if not os.path.isdir(cache):
        return
    stamp_path = os.path.join(cache, "zorch_nb_sources.sha256")
    stamp = SOURCES_DIGEST
    try:
        with open(stamp_path) as fh:
            if fh.read() == stamp:
                return
    except OSError:
        pass
    try:
        for name in os.listdir(cache):
            if name.endswith((".nbi", ".nbc")):
                os.remove(os.path.join(cache, name))
        with open(stamp_path, "w") as fh:
            fh.write(stamp)
    except OSError:  # read-only install or a concurrent cleaner: Numba copes
        pass


def _probe():  # a jitted function of this folder, for the probe below
    return 0


def _private_folder(path: str) -> bool:
    """Whether ``path`` is (or has just been made) a folder of ours alone: a
    predictable name under the temporary directory may have been created by
    another user, who could then plant the pickled index files Numba loads."""
    import stat
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        info = os.lstat(path)
    except OSError:
        return False
    owner = getattr(os, "getuid", lambda: info.st_uid)()
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == owner
            and not info.st_mode & 0o077)


def _ensure_numba_cache_folder() -> None:
    """Give Numba a cache folder where it finds none it can write.

    Every kernel here is ``cache=True``, and Numba raises at *decoration*
    (so ``import zorch_nb`` failed) when neither ``__pycache__`` beside the
    sources, nor its user-wide folder, nor ``NUMBA_CACHE_DIR`` is writable --
    a read-only install run by a user without a writable home.  There it
    gets a private folder under the temporary directory (the same one in
    every process of this user, else a fresh one for this process), with a
    warning naming ``NUMBA_CACHE_DIR``, which chooses the folder instead.
    """
    import numba
    try:
        probe = numba.njit(cache=True)(_probe)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        pass
    else:
        _warn_if_cache_dir_passed_over(probe)
        return
    import tempfile
    import warnings
    uid = getattr(os, "getuid", lambda: "user")()
    folder = os.path.join(tempfile.gettempdir(), f"zorch_nb-numba-cache-{uid}")
    if not _private_folder(folder):
        folder = tempfile.mkdtemp(prefix="zorch_nb-numba-cache-")
    given = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = folder
    # (Numba reads no cache it cannot write: a read-only NUMBA_CACHE_DIR shipped
    # full of entries is compiled all over again, which the warning says)
    warnings.warn(f"Numba found no cache folder it can write (beside the package, in "
                  f"the home directory or in NUMBA_CACHE_DIR); zorch_nb's kernels are "
                  f"cached under {folder} -- set NUMBA_CACHE_DIR to choose another"
                  + (f" (NUMBA_CACHE_DIR={given} cannot be written, and Numba reads no "
                     f"entry from a folder it cannot write: any there are compiled again)"
                     if given else ""),
                  RuntimeWarning, stacklevel=2)


def _warn_if_cache_dir_passed_over(probe) -> None:
    """Warn where Numba's cache folder is set (``NUMBA_CACHE_DIR``, as Numba
    read it) but Numba caches elsewhere: it passes a folder it cannot use (a
    file, one it cannot write) over silently for the next locator,
    ``__pycache__`` beside the sources -- inside a checkout, or in a shared
    install -- and only ``python -m zorch_nb info`` showed it (a review)."""
    import numba
    given = numba.config.CACHE_DIR  # (not the environment: Numba reads it at import)
    locator = getattr(getattr(getattr(probe, "_cache", None), "_impl", None), "locator", None)
    path = getattr(getattr(probe, "_cache", None), "_cache_path", None)
    if not given or locator is None or not isinstance(path, str):
        return  # (no JIT: nothing is cached)
    if type(locator).__name__.lstrip("_") == "UserProvidedCacheLocator":
        return  # the folder given is the one used
    import warnings
    if os.path.exists(given) and not os.path.isdir(given):
        why = "is not a folder"
    elif not os.access(given if os.path.isdir(given) else os.path.dirname(
            os.path.abspath(given)) or ".", os.W_OK | os.X_OK):
        why = "cannot be written"
    else:
        why = "could not be used"
    warnings.warn(f"NUMBA_CACHE_DIR={given} {why}, so Numba passed it over: zorch_nb's "
                  f"kernels are cached in {path} instead", RuntimeWarning, stacklevel=3)


_ensure_numba_cache_folder()
_drop_stale_numba_cache()
