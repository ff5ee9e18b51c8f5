"""zorch_nb in unusual environments: where Numba has no cache folder it can
write, and where its cache is shared with another version's processes."""
import os
import subprocess
import sys
import textwrap

import numpy as np
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
    # kernels compiled and run from the folder it chose (a product, not an
    # inverse: 5 s cold instead of 8.5 s, six of these programs a run)
    import numpy as np
    v = np.arange(8, dtype=np.int64) + 5
    a = F.encode(v)
    print(bool((F.decode(F.mul(a, a)) == v * v % F.p).all()))
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
def test_the_warning_says_a_read_only_numba_cache_dir_is_compiled_again(tmp_path):
    """A NUMBA_CACHE_DIR shipped full but read-only is not read by Numba (it
    uses no folder it cannot write): every kernel compiled again (36 s in a
    review) under a warning that did not say the shipped entries go unused."""
    script = _NO_LOCATOR.replace("print(any(\"NUMBA_CACHE_DIR\" in str(w.message) for w "
                                 "in caught))", "print(repr(' '.join(str(w.message) for w in "
                                 "caught)))")
    # (root writes anywhere: a folder under a file is one nobody can write)
    (tmp_path / "a-file").write_text("")
    shipped = tmp_path / "a-file" / "shipped"
    env = dict(os.environ, TMPDIR=str(tmp_path), NUMBA_CACHE_DIR=str(shipped))
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    folder, message, right = res.stdout.splitlines()
    assert right == "True" and folder.startswith(str(tmp_path / "zorch_nb-numba-cache-"))
    assert (f"NUMBA_CACHE_DIR={shipped} cannot be written, and Numba reads no entry from a "
            f"folder it cannot write: any there are compiled again") in message


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
@pytest.mark.parametrize("kind", ["a file", "usable"])
def test_a_numba_cache_dir_numba_passes_over_is_named(tmp_path, kind):
    """NUMBA_CACHE_DIR set to a file: Numba silently cached beside the sources
    instead (inside a checkout, in a review); the import now warns, naming
    both.  A usable one gets no warning."""
    given = tmp_path / "numba-cache"
    if kind == "a file":
        given.write_text("")
    script = ("import warnings\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              "    import zorch_nb.kernels\n"
              "print(repr([str(w.message) for w in caught if 'NUMBA_CACHE_DIR' in "
              "str(w.message)]))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(given))
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    messages = eval(res.stdout)
    if kind == "usable":
        assert messages == []
    else:
        assert len(messages) == 1
        assert messages[0].startswith(f"NUMBA_CACHE_DIR={given} is not a folder, so Numba "
                                      f"passed it over: zorch_nb's kernels are cached in ")


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


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_the_passed_over_check_asks_numba_which_locator_it_took(tmp_path, monkeypatch):
    """Numba's own choice decides, not a path comparison: a NUMBA_CACHE_DIR
    above the sources (``/work`` for ``/work/main/kernels/__pycache__``) that
    Numba passed over looked used, and a folder set in the environment after
    Numba's import (which Numba never read) was reported as one it cannot
    write (a review)."""
    import types
    import warnings

    import numba
    from numba.core import caching

    from zorch_nb import kernels
    in_tree = getattr(caching, "InTreeCacheLocator", None) or caching._InTreeCacheLocator
    user = getattr(caching, "UserProvidedCacheLocator", None) or \
        caching._UserProvidedCacheLocator
    inside = str(tmp_path / "src" / "__pycache__")

    def probe(locator_class):
        locator = object.__new__(locator_class)
        return types.SimpleNamespace(_cache=types.SimpleNamespace(
            _impl=types.SimpleNamespace(locator=locator), _cache_path=inside))

    def warned(cache_dir, locator_class):
        monkeypatch.setattr(numba.config, "CACHE_DIR", cache_dir)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kernels._warn_if_cache_dir_passed_over(probe(locator_class))
        return [str(w.message) for w in caught]

    (message,) = warned(str(tmp_path), in_tree)  # an ancestor of the folder used
    assert message == (f"NUMBA_CACHE_DIR={tmp_path} could not be used, so Numba passed it "
                       f"over: zorch_nb's kernels are cached in {inside} instead")
    assert warned(str(tmp_path), user) == []  # the folder given, used
    assert warned("", in_tree) == []  # none given (or given after Numba's import)


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


_OLD_PROCESS = textwrap.dedent("""
    import os, sys, time
    from zorch_nb import KoalaBear as F
    a, b = F.encode([5, 7, 1]), F.encode([3, 9, 1])
    open(sys.argv[1], "w").close()            # imported (the old sources)
    deadline = time.monotonic() + 300
    while not os.path.exists(sys.argv[2]):     # the upgrade, and a new process
        assert time.monotonic() < deadline
        time.sleep(0.05)
    print(*F.decode(F.sub(a, b)))              # compiled now, into the shared cache
    # the graph evaluators' folder is the imported sources' too
    from zorch_nb.kernels import SOURCES_DIGEST, sources_digest
    from zorch_nb.kernels.graph_cpu import evaluator_cache_path
    print(evaluator_cache_path().endswith(SOURCES_DIGEST[:16]), sources_digest() == SOURCES_DIGEST)
""")
_NEW_PROCESS = textwrap.dedent("""
    from zorch_nb import KoalaBear as F
    a, b = F.encode([5, 7, 1]), F.encode([3, 9, 1])
    print(*F.decode(F.sub(a, b)))
""")
# the "upgrade": a callee of the field kernels (not their own file) changes
_NEW_MOD_SUB = textwrap.dedent("""


    @njit(cache=True)
    def mod_sub(a, b, p):  # a later version's subtraction (the test's edit)
        return mod_add(a, b, p)
""")


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_a_process_of_the_old_sources_cannot_feed_the_new_ones(tmp_path):
    """A process that imported the kernels before an upgrade and compiles a
    kernel after it saves machine code of the old callees into the shared
    cache; Numba's key (the kernel's own file and bytecode) matched it for the
    new version, and the import-time stamp check had already passed, so the
    new processes ran the old arithmetic.  Every entry is keyed on the digest
    of the sources the saving process imported, as the graph evaluators'
    folder is named by it (not by the files' digest when first asked)."""
    import shutil

    import zorch_nb
    import zorch_nb.kernels
    site = tmp_path / "site"
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(os.path.dirname(zorch_nb.__file__), site / "zorch_nb", ignore=skip,
                    dirs_exist_ok=True)
    # (an editable install maps zorch_nb.kernels to its own folder)
    shutil.copytree(os.path.dirname(zorch_nb.kernels.__file__), site / "zorch_nb" / "kernels",
                    ignore=skip, dirs_exist_ok=True)
    # (run in site: `python -c` puts the working folder, maybe a checkout, first)
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1",
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))

    def run(script, cache="numba"):
        res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=dict(env, NUMBA_CACHE_DIR=str(tmp_path / cache)),
                             cwd=site, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout.split()

    imported, go = tmp_path / "imported", tmp_path / "go"
    old = subprocess.Popen([sys.executable, "-c", _OLD_PROCESS, str(imported), str(go)],
                           env=env, cwd=site, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        import time
        deadline = time.monotonic() + 300
        while not imported.exists() and old.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with open(site / "zorch_nb" / "kernels" / "monty.py", "a") as fh:
            fh.write(_NEW_MOD_SUB)
        run("import zorch_nb.kernels")  # a new process: its stamp is now the folder's
        go.touch()
        out, err = old.communicate(timeout=600)
    finally:
        if old.poll() is None:
            old.kill()
    assert old.returncode == 0, out + err
    assert out.split() == ["2", str((7 - 9) % 2130706433), "0", "True", "False"]
    expected = run(_NEW_PROCESS, cache="fresh")
    assert expected == ["8", "16", "2"]  # the edit took: the new version adds
    assert run(_NEW_PROCESS) == expected


def _cached_dispatchers():
    """Every dispatcher of the kernel layer with an on-disk cache: the module
    globals, the CPU GKR kernels of each mode, Numba-CUDA's kernel factories
    (where numba-cuda imports) and a CPU kernel's serial twin."""
    import importlib
    import pkgutil

    import zorch_nb.kernels as k
    from zorch_nb.kernels import cpu_threads, field_cpu
    found = {}

    def keep(value):
        if isinstance(value, type(os)):  # (a module, such as `re`, with a `_cache` of its own)
            return
        cache = getattr(value, "_cache", None)
        if cache is not None and type(cache).__name__ != "NullCache":
            found[id(value)] = value

    for info in pkgutil.iter_modules(k.__path__):
        try:
            module = importlib.import_module(f"{k.__name__}.{info.name}")
        except ImportError:  # CuPy, or numba-cuda, not installed
            continue
        for value in vars(module).values():
            keep(value)
        if info.name == "gkr_cpu":
            for kernels in module._KERNELS:
                for kernel in kernels:
                    keep(kernel)
        if info.name == "gkr_cuda_numba":
            for mode in range(4):
                for kernel in (*module._kernels(mode), module._pyramid_kernel(mode)):
                    keep(kernel)
    keep(cpu_threads.serial_twin(field_cpu._base_map2_kernel))
    return list(found.values())


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_every_cached_kernel_is_keyed_on_the_sources():
    """Each cache=True dispatcher of the kernel layer checks its index against
    the digest of the sources this process imported (kernels/jit.py): one made
    with numba's own decorator would let an old process's entries through."""
    from zorch_nb.kernels import SOURCES_DIGEST
    cached = _cached_dispatchers()
    assert len(cached) > 40
    unkeyed = [d for d in cached if d._cache._cache_file._source_stamp[-1] != SOURCES_DIGEST]
    assert not unkeyed, unkeyed


def _plus_one(x):
    return x + 1


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_your_own_cached_functions_can_be_keyed_on_the_sources():
    """kernels.jit.njit is numba's njit (bare, with options, with a function)
    whose cache=True entries are keyed on the kernel sources; a signature
    (an eager compile, which would load before the key is set) is refused."""
    import numba

    from zorch_nb.kernels import SOURCES_DIGEST, jit

    def stamp(d):
        return d._cache._cache_file._source_stamp

    made = [jit.njit(cache=True)(_plus_one), jit.njit(_plus_one, cache=True),
            jit.keyed_on_sources(numba.njit(cache=True)(_plus_one))]
    for d in made:
        assert d(np.int64(41)) == 42 and stamp(d)[1] == SOURCES_DIGEST
    again = jit.keyed_on_sources(made[0])
    assert again is made[0] and stamp(again)[1] == SOURCES_DIGEST and len(stamp(again)) == 2
    assert jit.njit(_plus_one)(1) == 2 and jit.njit()(_plus_one)(1) == 2  # not cached: numba's
    assert type(jit.njit(_plus_one)._cache).__name__ == "NullCache"
    # the signature however it is passed (by keyword it compiled, and loaded
    # or saved under numba's own key, before the sources digest was added;
    # after the function, numba took it for `locals`)
    for eager in (lambda: jit.njit("int64(int64)", cache=True),
                  lambda: jit.njit(signature_or_function="int64(int64)", cache=True),
                  lambda: jit.njit(signature_or_function=["int64(int64)"], cache=True),
                  lambda: jit.njit(_plus_one, "int64(int64)", cache=True)):
        with pytest.raises(TypeError, match="signature with cache=True"):
            eager()
    by_name = jit.njit(signature_or_function=_plus_one, cache=True)
    assert by_name(np.int64(1)) == 2 and stamp(by_name)[1] == SOURCES_DIGEST


_TWO_SIGNATURES = ("def scaled(x, out):\n"
                   "    for i in range(x.shape[0]):\n"
                   "        out[i] = x[i] * 3 + 1\n")


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_two_processes_saving_two_signatures_cannot_swap_their_machine_code(tmp_path,
                                                                            monkeypatch):
    """Numba named a new entry's file by the first number its index left free:
    two processes saving two signatures of one function into an empty cache
    both wrote ``.1.nbc``, and where the index of one met the file of the
    other, every later process ran the other signature's machine code.  Here
    the second process's whole save lands between the first's index and data
    writes (the first read an empty index, as the second did)."""
    import importlib

    from zorch_nb.kernels import jit
    (tmp_path / "two_signatures.py").write_text(_TWO_SIGNATURES)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = importlib.import_module("two_signatures").scaled
    first, second = jit.njit(cache=True)(fn), jit.njit(cache=True)(fn)
    first_file, second_file = first._cache._cache_file, second._cache._cache_file
    read_early = second_file._load_index()  # before the first process saved anything
    second_file._load_index = lambda: dict(read_early)
    open_for_write = first_file._open_for_write
    interleaved = []

    def run(dispatcher, dtype):
        x = np.arange(4, dtype=dtype)
        out = np.zeros(4, dtype)
        dispatcher(x, out)
        return out.tolist()

    def first_saves_data(path):  # (the data file is written first, then the index)
        if not interleaved:
            interleaved.append(run(second, np.float32))  # the second process: compile, save
        return open_for_write(path)

    first_file._open_for_write = first_saves_data
    want = [1.0, 4.0, 7.0, 10.0]
    assert run(first, np.float64) == want and interleaved == [want]
    later = jit.njit(cache=True)(fn)  # a later process: loads what is there
    assert run(later, np.float32) == run(later, np.float64) == want
    assert sorted(str(sig[0].dtype) for sig in later.signatures) == ["float32", "float64"]


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
@pytest.mark.parametrize("damaged", [".nbi", ".nbc"])
def test_a_damaged_cache_file_is_compiled_again_and_replaced(tmp_path, monkeypatch, damaged):
    """A truncated index or data file (a disk error, a copy cut short) made every
    later call of the kernel fail to unpickle, in every process, until the
    file was deleted by hand; it is a miss now, and the next save replaces it."""
    import importlib

    from zorch_nb.kernels import jit
    (tmp_path / "damaged_entry.py").write_text(_TWO_SIGNATURES)
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = importlib.import_module("damaged_entry").scaled
    x, want = np.arange(4.0), [1.0, 4.0, 7.0, 10.0]

    def run():
        dispatcher = jit.njit(cache=True)(fn)
        out = np.zeros(4)
        dispatcher(x, out)
        return out.tolist(), dispatcher.stats

    assert run()[0] == want
    cache = run()[1].cache_path
    listed = set(jit.njit(cache=True)(fn)._cache._cache_file._load_index().values())
    files = [f for f in os.listdir(cache) if f.startswith("damaged_entry.") and
             f.endswith(damaged) and (damaged == ".nbi" or f in listed)]
    assert len(files) == 1  # (the other parametrization's module, imported once, shares
    # the folder: its recompile left an unlisted data file there)
    with open(os.path.join(cache, files[0]), "r+b") as fh:
        fh.truncate(max(1, os.path.getsize(fh.name) // 2))
    got, stats = run()
    assert got == want and sum(stats.cache_misses.values()) == 1
    got, stats = run()  # replaced by that compile
    assert got == want and sum(stats.cache_hits.values()) == 1


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_an_overwritten_data_file_is_a_miss_not_a_crash(tmp_path):
    """Bytes overwritten inside a data file (its size kept) unpickled fine, and
    the kernel's first call ran the damaged machine code: SIGILL or SIGSEGV
    in every process until the file was deleted by hand (a review's
    finding).  A data file is named by the digest of its bytes, checked on
    load: the damage is a miss, compiled again and replaced.  Each process is
    a child here, so a regression fails this test rather than the session."""
    (tmp_path / "overwritten_entry.py").write_text(_TWO_SIGNATURES)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        from zorch_nb.kernels import jit
        import overwritten_entry
        d = jit.njit(cache=True)(overwritten_entry.scaled)
        out = np.zeros(4)
        d(np.arange(4.0), out)
        print(out.tolist(), sum(d.stats.cache_hits.values()),
              sum(d.stats.cache_misses.values()), d.stats.cache_path)
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "nbc"))

    def child():
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
        got, hits, misses, cache = res.stdout.rsplit("]", 1)[0] + "]", *res.stdout.rsplit(
            "]", 1)[1].split(None, 2)
        return got, int(hits), int(misses), cache.strip()

    got, hits, misses, cache = child()
    assert (got, hits, misses) == ("[1.0, 4.0, 7.0, 10.0]", 0, 1)
    for offset in (200, None):
        # the file the index lists (a compile names a new one: its bytes differ)
        (index,) = [f for f in os.listdir(cache) if f.startswith("overwritten_entry.")
                    and f.endswith(".nbi")]
        with open(os.path.join(cache, index), "rb") as fh:
            names = fh.read()
        listed = [f for f in os.listdir(cache) if f.startswith("overwritten_entry.")
                  and f.endswith(".nbc") and f.encode() in names]
        assert len(listed) == 1
        path = os.path.join(cache, listed[0])
        size = os.path.getsize(path)
        with open(path, "r+b") as fh:
            fh.seek(size // 2 if offset is None else offset)
            fh.write(bytes(range(64)))
        assert os.path.getsize(path) == size
        assert child()[:3] == ("[1.0, 4.0, 7.0, 10.0]", 0, 1)  # a miss, compiled again
        assert child()[:3] == ("[1.0, 4.0, 7.0, 10.0]", 1, 0)  # and replaced


@pytest.mark.skipif(not _JIT, reason="nothing is cached")
def test_an_edited_functions_old_data_file_goes(tmp_path, monkeypatch):
    """Data files are named by their key, which holds the bytecode: after an
    edit the old file is listed by no index (Numba's numbering overwrote
    ``.1.nbc``); the next save deletes such files once UNLISTED_SECONDS old."""
    import importlib
    import time

    from zorch_nb.kernels import jit
    monkeypatch.syspath_prepend(str(tmp_path))
    source = tmp_path / "edited_entry.py"
    caches = []
    # (new bytecode, not only new constants: Numba's key holds co_code)
    for version in (_TWO_SIGNATURES, _TWO_SIGNATURES.replace("* 3 + 1", "* x[i] + 2")):
        source.write_text(version)
        sys.modules.pop("edited_entry", None)
        dispatcher = jit.njit(cache=True)(importlib.import_module("edited_entry").scaled)
        out = np.zeros(2)
        dispatcher(np.arange(2.0), out)
        caches.append(dispatcher.stats.cache_path)
        data = [f for f in os.listdir(caches[0]) if f.startswith("edited_entry.") and
                f.endswith(".nbc")]
        if version == _TWO_SIGNATURES:
            assert out.tolist() == [1.0, 4.0] and len(data) == 1
            old = time.time() - jit.UNLISTED_SECONDS - 60
            os.utime(os.path.join(caches[0], data[0]), (old, old))
            first = data[0]
    assert out.tolist() == [2.0, 3.0] and caches[0] == caches[1]
    assert len(data) == 1 and data[0] != first


def test_a_numba_cuda_stamp_is_keyed_too():
    """numba-cuda's index stamps a kernel's file as ``(mtime, size)``: a pair,
    like a keyed stamp.  keyed_on_sources still adds the digest to it (a
    pair counts as keyed only when its second item is this process's
    digest), and only once."""
    import types

    from zorch_nb.kernels import SOURCES_DIGEST, jit
    raw = (1733390000.25, 4096)
    index = types.SimpleNamespace(_source_stamp=raw)
    dispatcher = types.SimpleNamespace(_cache=types.SimpleNamespace(_cache_file=index))
    assert jit.keyed_on_sources(dispatcher) is dispatcher
    assert index._source_stamp == (raw, SOURCES_DIGEST)
    jit.keyed_on_sources(dispatcher)
    assert index._source_stamp == (raw, SOURCES_DIGEST)
