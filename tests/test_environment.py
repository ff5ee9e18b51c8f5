"""zorch_nb in unusual environments: where Numba has no cache folder it can write."""
import os
import subprocess
import sys
import textwrap

import pytest

_NO_LOCATOR = textwrap.dedent("""
    import warnings
    from numba.core import caching
    # what a read-only install run without a writable home looks like to Numba:
    # neither __pycache__ beside the sources nor the user-wide folder can be
    # used, and NUMBA_CACHE_DIR is unset
    # (named _UserProvidedCacheLocator before numba 0.62)
    caching.CacheImpl._locator_classes = [getattr(caching, "UserProvidedCacheLocator", None)
                                          or caching._UserProvidedCacheLocator]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from zorch_nb import KoalaBear as F
    import numba
    print(numba.config.CACHE_DIR or "-")
    print(any("NUMBA_CACHE_DIR" in str(w.message) for w in caught))
    a = F.random(8, seed=1)
    print(bool((F.mul(F.inv(a), a) == F.one).all()))
""")


def _import_without_a_cache_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["TMPDIR"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", _NO_LOCATOR], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    folder, warned, right = res.stdout.split()
    assert right == "True"
    return folder, warned == "True"


_JIT = os.environ.get("NUMBA_DISABLE_JIT") != "1"


def test_import_without_a_writable_numba_cache_folder(tmp_path):
    # Numba raised at the first cache=True decoration: `import zorch_nb` failed
    folder, warned = _import_without_a_cache_folder(tmp_path)
    if _JIT:
        uid = getattr(os, "getuid", lambda: "user")()
        assert folder == str(tmp_path / f"zorch_nb-numba-cache-{uid}") and warned
        assert os.stat(folder).st_mode & 0o777 == 0o700  # ours alone
        assert _import_without_a_cache_folder(tmp_path)[0] == folder  # shared by processes


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
@pytest.mark.parametrize("planted", ["world-writable", "another owner", "a file"])
def test_a_planted_cache_folder_is_not_used(tmp_path, planted):
    """The predictable folder name, made first by someone else, is passed over
    for a fresh private one: its owner could plant the pickled index files
    Numba loads (or, read-only to us, make the import fail again)."""
    uid = getattr(os, "getuid", lambda: "user")()
    path = tmp_path / f"zorch_nb-numba-cache-{uid}"
    if planted == "a file":
        path.write_text("")
    else:
        path.mkdir()
        os.chmod(path, 0o777 if planted == "world-writable" else 0o755)
        if planted == "another owner":
            try:
                os.chown(path, 65534, 65534)
            except (OSError, AttributeError):
                pytest.skip("cannot give a folder to another user here")
    folder, warned = _import_without_a_cache_folder(tmp_path)
    assert folder != str(path) and folder.startswith(str(tmp_path)) and warned
    assert os.stat(folder).st_mode & 0o777 == 0o700


_FOLDER = textwrap.dedent("""
    import os
    import zorch_nb.kernels as k
    print(k._numba_cache_folder(os.path.dirname(k.__file__)))
""")


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_stale_kernels_are_dropped_from_numba_cache_dir(tmp_path):
    """With NUMBA_CACHE_DIR set, a kernel source changed since the cache was
    written (a callee like monty.py, which Numba's own key misses) empties
    the folder Numba keeps our kernels in: only __pycache__ was checked, and
    a changed monty.py kept running the old machine code."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def folder():
        res = subprocess.run([sys.executable, "-c", _FOLDER], env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout.strip()

    path = folder()
    assert path.startswith(str(tmp_path))
    from zorch_nb.kernels import sources_digest
    stamp = os.path.join(path, "zorch_nb_sources.sha256")
    with open(stamp) as fh:
        assert fh.read() == sources_digest()
    for name in ("f.kernel-1.py311.nbi", "f.kernel-1.py311.1.nbc"):
        (tmp_path / path / name).write_bytes(b"old")
    assert folder() == path and len(os.listdir(path)) == 3  # current stamp: kept
    with open(stamp, "w") as fh:
        fh.write("an older source")
    assert folder() == path and os.listdir(path) == ["zorch_nb_sources.sha256"]
    with open(stamp) as fh:
        assert fh.read() == sources_digest()
