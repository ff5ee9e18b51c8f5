"""zorch_nb in unusual environments: where Numba has no cache folder it can write."""
import os
import subprocess
import sys
import textwrap

_NO_LOCATOR = textwrap.dedent("""
    import warnings
    from numba.core import caching
    # what a read-only install run without a writable home looks like to Numba:
    # neither __pycache__ beside the sources nor the user-wide folder can be
    # used, and NUMBA_CACHE_DIR is unset
    caching.CacheImpl._locator_classes = [caching.UserProvidedCacheLocator]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from zorch_nb import KoalaBear as F
    import numba
    print(numba.config.CACHE_DIR or "-")
    print(any("NUMBA_CACHE_DIR" in str(w.message) for w in caught))
    a = F.random(8, seed=1)
    print(bool((F.mul(F.inv(a), a) == F.one).all()))
""")


def test_import_without_a_writable_numba_cache_folder(tmp_path):
    # Numba raised at the first cache=True decoration: `import zorch_nb` failed
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["TMPDIR"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-c", _NO_LOCATOR], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    folder, warned, right = res.stdout.split()
    jit = os.environ.get("NUMBA_DISABLE_JIT") != "1"
    assert right == "True"
    if jit:
        assert folder.startswith(str(tmp_path)) and warned == "True"
