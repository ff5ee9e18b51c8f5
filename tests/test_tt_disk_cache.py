"""The structure-specialized tensor-train kernels on disk (kernels/tt_kernels.py,
StructureKernel; kernels/source_cache.py): a later process loads them instead
of compiling, a folder or cache entry that cannot be written falls back to a
compile from memory, and the files kept are bounded."""
import json
import os
import subprocess
import sys
import time

import numba
import numpy as np
import pytest

from zorch_nb import kernels, tt_ops
from zorch_nb.kernels import source_cache, tt_kernels
from zorch_nb.tt import TuckerTensorTrain, UniformTuckerTensorTrain

needs_jit = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="nothing is compiled")

_SCRIPT = """
import json
import numpy as np
from zorch_nb.tt import TuckerTensorTrain, UniformTuckerTensorTrain
from zorch_nb.tt_masks import KERNELS

def train(seed):
    rng = np.random.default_rng(seed)
    tk, tt = (2, 3, 2), (1, 2, 3, 1)
    return UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
        [rng.standard_normal((tk[i], n)) for i, n in enumerate((3, 4, 2))],
        [rng.standard_normal((tt[i], tk[i], tt[i + 1])) for i in range(3)]), n=4, r=4)

x, y = train(1), train(2)
got = [x.to_dense().tolist(), float(x.inner(y)), x.entries(np.array([[0, 1, 1], [2, 3, 0]])).tolist()]
stats = [k.stats for k in KERNELS._store.values()]
print(json.dumps({"got": got, "hits": sum(sum(s.cache_hits.values()) for s in stats),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats)}))
"""


@needs_jit
def test_a_new_process_loads_the_structure_kernels_from_disk(tmp_path):
    """Each structure's kernel compiled 0.5-0.6 s in every process; the second
    process meeting the same structures loads all three from disk."""
    env = dict(os.environ, ZORCH_NB_CACHE_DIR=str(tmp_path / "zc"),
               NUMBA_CACHE_DIR=str(tmp_path / "nc"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SCRIPT], check=True,
                                      capture_output=True, text=True,
                                      env=env).stdout.strip().splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["got"] == runs[1]["got"]
    assert (runs[0]["misses"], runs[0]["hits"]) == (3, 0)  # to_dense, inner, chain compiled
    assert (runs[1]["misses"], runs[1]["hits"]) == (0, 3)  # and loaded
    files = sorted(p.name.rsplit("_", 1)[0] for p in (tmp_path / "zc").glob("*/zorch_tt_*.py"))
    assert files == ["zorch_tt_ut3_chain", "zorch_tt_ut3_inner", "zorch_tt_ut3_to_dense"]


def _train(seed, stack=3):
    rng = np.random.default_rng(seed)
    trains = []
    for _ in range(stack):
        tk = rng.integers(1, 4, size=3)
        tt = np.concatenate([[1], rng.integers(1, 4, size=2), [1]])
        trains.append(UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
            [rng.standard_normal((tk[i], n)) for i, n in enumerate((3, 4, 2))],
            [rng.standard_normal((tt[i], tk[i], tt[i + 1])) for i in range(3)]), n=3, r=3))
    return UniformTuckerTensorTrain.stack(trains)


def _dense_by_kernel(x):
    """``x``'s dense tensors by a kernel built here (not through the memo)."""
    p = tt_ops._parts(x.data)
    tables = tt_ops._tables(p)
    kernel = tt_kernels.build_ut3_to_dense(p.shape, *tables)
    lengths = tt_kernels.ut3_to_dense_scratch(p.shape, tables[1], tables[3])
    out = np.full((p.S, int(np.prod(p.shape))), np.nan)
    kernel(p.U, p.G, out, *(np.empty(n) for n in lengths), 0, p.S)
    return kernel, out.reshape(x.to_dense().shape)


@pytest.fixture
def fresh_folder(tmp_path, monkeypatch):
    """A generated-kernel folder of this test's own (Numba's files of it are
    new too: they go beside it, or to a NUMBA_CACHE_DIR folder named by it)."""
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(tmp_path / "zc"))
    source_cache.cache_dir.cache_clear()
    yield source_cache.cache_dir()
    source_cache.cache_dir.cache_clear()


def test_without_a_writable_folder_the_kernels_compile_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(blocker))
    source_cache.cache_dir.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="compiled again in every process"):
            assert source_cache.cache_dir() is None
        x = _train(11)
        kernel, got = _dense_by_kernel(x)
        np.testing.assert_allclose(got, x.to_dense(), rtol=1e-12)
        if not numba.config.DISABLE_JIT:
            assert type(kernel._cache).__name__ == "NullCache"
    finally:
        source_cache.cache_dir.cache_clear()


@needs_jit
def test_a_cache_entry_numba_cannot_write_falls_back_to_memory(fresh_folder):
    """Numba compiles on the first call, then saves: a full disk raised OSError
    from the user's call; the kernel compiles from memory and runs instead."""
    x = _train(12)
    p = tt_ops._parts(x.data)
    tables = tt_ops._tables(p)
    kernel = tt_kernels.build_ut3_to_dense(p.shape, *tables)
    disk = kernel._fn
    assert type(disk._cache).__name__ != "NullCache"

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    disk._cache.save_overload = full_disk
    lengths = tt_kernels.ut3_to_dense_scratch(p.shape, tables[1], tables[3])
    out = np.full((p.S, int(np.prod(p.shape))), np.nan)
    kernel(p.U, p.G, out, *(np.empty(n) for n in lengths), 0, p.S)
    np.testing.assert_allclose(out.reshape(x.to_dense().shape), x.to_dense(), rtol=1e-12)
    assert kernel._fn is not disk and type(kernel._cache).__name__ == "NullCache"


@needs_jit
def test_structure_kernels_are_written_once_and_reused(fresh_folder):
    """The same structure builds the same file (content-addressed); its bytes are
    kept and marked used, and a second build in this process loads the entry."""
    x = _train(13)
    first, want = _dense_by_kernel(x)
    files = [f for f in os.listdir(fresh_folder) if f.startswith("zorch_tt_")]
    assert len(files) == 1
    path = os.path.join(fresh_folder, files[0])
    old = time.time() - 3600
    os.utime(path, (old, old))
    second, got = _dense_by_kernel(x)
    assert os.stat(path).st_mtime > old + 1800  # marked used
    np.testing.assert_array_equal(got, want)
    assert sum(second.stats.cache_hits.values()) == 1
    assert sum(second.stats.cache_misses.values()) == 0


def test_kept_structure_kernels_are_bounded(fresh_folder, monkeypatch):
    """Past DISK_KERNELS files, writing one deletes the least recently used
    (their Numba files: test_pruning_removes_numba_files_where_numba_keeps_them);
    other files of the folder stay."""
    monkeypatch.setattr(tt_kernels, "DISK_KERNELS", 2)
    other = os.path.join(fresh_folder, "notes.txt")
    with open(other, "w") as fh:
        fh.write("mine\n")
    made = []
    for seed in range(4):
        x = _train(20 + seed, stack=1)
        p = tt_ops._parts(x.data)
        tt_kernels.build_ut3_chain(*tt_ops._tables(p))  # (compiles nothing until called)
        made.append(max((f for f in os.listdir(fresh_folder) if f.startswith("zorch_tt_")),
                        key=lambda f: os.stat(os.path.join(fresh_folder, f)).st_mtime_ns))
        now = time.time() - 100 + 10 * seed  # distinct, increasing use times
        os.utime(os.path.join(fresh_folder, made[-1]), (now, now))
    left = sorted(os.listdir(fresh_folder))
    assert sorted(f for f in left if f.startswith("zorch_tt_")) == sorted(made[2:])
    assert "notes.txt" in left


@pytest.mark.parametrize("numba_cache", ["__pycache__", "NUMBA_CACHE_DIR"])
def test_pruning_removes_numba_files_where_numba_keeps_them(tmp_path, monkeypatch,
                                                            numba_cache):
    """prune_oldest deletes Numba's cache files of the generated files it
    deletes, in __pycache__ or under NUMBA_CACHE_DIR, and their bytecode in
    __pycache__ (left behind under NUMBA_CACHE_DIR: found by review)."""
    monkeypatch.setattr(numba.config, "CACHE_DIR",
                        str(tmp_path / "nc") if numba_cache == "NUMBA_CACHE_DIR" else "")
    folder = tmp_path / "gen"
    folder.mkdir()
    names = [f"zorch_tt_ut3_chain_{c * 24}.py" for c in "abc"]
    now = time.time()
    for k, name in enumerate(names):
        (folder / name).write_text("x = 1\n")
        os.utime(folder / name, (now - 100 + k, now - 100 + k))
    numba_folder = kernels._numba_cache_folder(str(folder), names[0])
    assert numba_folder is not None
    assert numba_folder.startswith(str(tmp_path / "nc")) == (numba_cache == "NUMBA_CACHE_DIR")
    os.makedirs(numba_folder, exist_ok=True)
    os.makedirs(folder / "__pycache__", exist_ok=True)
    for name in names:
        open(os.path.join(numba_folder, name[:-3] + ".ut3_chain-9.py311.nbi"), "w").close()
        open(folder / "__pycache__" / (name[:-3] + ".cpython-311.pyc"), "w").close()
    source_cache.prune_oldest(str(folder), "zorch_tt_", 1)
    assert sorted(f for f in os.listdir(folder) if f != "__pycache__") == names[2:]
    kept = {names[2][:-3] + ".ut3_chain-9.py311.nbi", names[2][:-3] + ".cpython-311.pyc"}
    assert {f for f in os.listdir(numba_folder) if f.startswith("zorch_tt_")} <= kept
    assert {f for f in os.listdir(folder / "__pycache__") if f.startswith("zorch_tt_")} <= kept
    assert names[2][:-3] + ".ut3_chain-9.py311.nbi" in os.listdir(numba_folder)


def test_tables_pack_deterministically_and_unpack_read_only():
    rng = np.random.default_rng(3)
    tables = (np.arange(6).reshape(2, 3), rng.integers(0, 9, size=(3, 4, 2)), np.zeros((0, 5)))
    blob, shapes = tt_kernels.pack_tables(tables)
    assert (blob, shapes) == tt_kernels.pack_tables([t.copy() for t in tables])
    back = tt_kernels.unpack_tables(blob, shapes)
    for a, b in zip(back, tables):
        assert a.dtype == np.int64 and not a.flags.writeable
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="tables of"):
        tt_kernels.unpack_tables(blob, shapes[:1])


@needs_jit
def test_a_table_too_large_to_freeze_compiles_in_memory_without_a_warning(fresh_folder):
    """Numba freezes constant arrays up to 1e6 bytes; a larger table became a
    run-time address, which its cache refuses: a NumbaWarning on every compile
    (an error under ``-W error``) and nothing cached.  Such a structure is
    compiled from memory, as every structure was before the disk cache."""
    import warnings
    stack = tt_kernels.FROZEN_ARRAY_BYTES // 8 + 1  # tk_idx (1, stack, 1): one word too many
    tk_idx, tk_cnt = np.zeros((1, stack, 1), np.int64), np.ones((1, stack), np.int64)
    tt_idx, tt_cnt = np.zeros((2, stack, 1), np.int64), np.ones((2, stack), np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernel = tt_kernels.build_ut3_chain(tk_idx, tk_cnt, tt_idx, tt_cnt)
        V = np.full((1, stack, 1, 1), 2.0)
        G = np.full((1, stack, 1, 1, 1), 3.0)
        out = np.zeros((stack, 1))
        kernel(V, G, out, np.empty(1), np.empty(1), np.empty(1), np.empty(1), 0, stack)
    assert (out == 6.0).all()
    assert type(kernel._cache).__name__ == "NullCache"
    assert not [f for f in os.listdir(fresh_folder) if f.startswith("zorch_tt_")]


@needs_jit
def test_numba_files_of_a_pruned_kernel_are_swept(fresh_folder, monkeypatch):
    """A kernel still held in memory after its file was pruned saves each new
    signature (float32 after float64) for a file no pruning lists again: its
    Numba files are deleted once ORPHAN_SECONDS old."""
    monkeypatch.setattr(tt_kernels, "DISK_KERNELS", 1)
    x = _train(31, stack=2)
    kernel, _ = _dense_by_kernel(x)
    _dense_by_kernel(_train(32, stack=2))  # a second structure: the first file pruned
    p = tt_ops._parts(x.data)
    tables = tt_ops._tables(p)
    lengths = tt_kernels.ut3_to_dense_scratch(p.shape, tables[1], tables[3])
    out = np.empty((p.S, int(np.prod(p.shape))), np.float32)
    kernel(p.U.astype(np.float32), p.G.astype(np.float32), out,
           *(np.empty(n, np.float32) for n in lengths), 0, p.S)  # saves for the pruned file
    module = kernel.py_func.__module__
    cache = kernel.stats.cache_path
    assert not os.path.exists(os.path.join(fresh_folder, module + ".py"))
    orphans = [f for f in os.listdir(cache) if f.startswith(module + ".")]
    assert orphans
    source_cache._sweep_orphans(fresh_folder)  # too young: kept
    assert all(os.path.exists(os.path.join(cache, f)) for f in orphans)
    old = time.time() - source_cache.ORPHAN_SECONDS - 60
    for f in orphans:
        os.utime(os.path.join(cache, f), (old, old))
    source_cache.cache_dir.cache_clear()
    assert source_cache.cache_dir() == fresh_folder  # (prunes and sweeps)
    left = os.listdir(cache)
    assert not [f for f in left if f.startswith(module + ".")]
    assert [f for f in left if f.startswith("zorch_tt_")]  # the live kernel's stay


def test_a_relative_cache_folder_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", "rel")
    assert source_cache.cache_path().startswith(str(tmp_path / "rel") + os.sep)


def test_an_old_versions_folder_goes_with_its_numba_files(tmp_path, monkeypatch):
    """A folder of other sources unused for STALE_FOLDER_DAYS is deleted with
    Numba's files of it, which under NUMBA_CACHE_DIR live outside it."""
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "nc"))
    root = tmp_path / "zc"
    old = root / "graph-evaluators-0000000000000000"
    old.mkdir(parents=True)
    (old / "zorch_tt_ut3_chain_aaaa.py").write_text("x = 1\n")
    numba_folder = kernels._numba_cache_folder(str(old), "zorch_tt_ut3_chain_aaaa.py")
    assert numba_folder.startswith(str(tmp_path / "nc"))
    os.makedirs(numba_folder, exist_ok=True)
    open(os.path.join(numba_folder, "zorch_tt_ut3_chain_aaaa.ut3_chain-9.py311.nbi"), "w").close()
    stale = time.time() - (source_cache.STALE_FOLDER_DAYS + 1) * 86400
    os.utime(old, (stale, stale))
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(root))
    source_cache.cache_dir.cache_clear()
    try:
        source_cache.cache_dir()
    finally:
        source_cache.cache_dir.cache_clear()
    assert not old.exists() and not os.path.exists(numba_folder)


def test_a_structure_kernel_copies_and_pickles(fresh_folder):
    """copy.copy, deepcopy and pickle of a kernel raised RecursionError (its
    attribute lookup read an unset slot); they make it again from its text."""
    import copy
    import pickle
    x = _train(41)
    kernel, want = _dense_by_kernel(x)
    p = tt_ops._parts(x.data)
    tables = tt_ops._tables(p)
    lengths = tt_kernels.ut3_to_dense_scratch(p.shape, tables[1], tables[3])
    for other in (copy.copy(kernel), copy.deepcopy(kernel), pickle.loads(pickle.dumps(kernel))):
        assert isinstance(other, tt_kernels.StructureKernel)
        out = np.full((p.S, int(np.prod(p.shape))), np.nan)
        other(p.U, p.G, out, *(np.empty(n) for n in lengths), 0, p.S)
        np.testing.assert_array_equal(out.reshape(want.shape), want)
    with pytest.raises(AttributeError):
        tt_kernels.StructureKernel.__new__(tt_kernels.StructureKernel).signatures


def test_the_cache_folder_is_named_by_the_sources_under_xdg_cache_home(tmp_path, monkeypatch):
    """Without ZORCH_NB_CACHE_DIR the folder is $XDG_CACHE_HOME/zorch_nb/, and
    its name carries the kernel sources' hash: a changed callee never meets
    an old cache."""
    monkeypatch.delenv("ZORCH_NB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = source_cache.cache_path()
    assert os.path.dirname(path) == str(tmp_path / "xdg" / "zorch_nb")
    assert os.path.basename(path) == "graph-evaluators-" + kernels.SOURCES_DIGEST[:16]
    assert len(kernels.SOURCES_DIGEST) >= 16 and not os.path.exists(tmp_path / "xdg")


def test_a_recent_folder_of_other_sources_is_kept(tmp_path):
    """Only folders of other sources unused for STALE_FOLDER_DAYS go: another
    version's process may be using a recent one."""
    recent, stale = tmp_path / "graph-evaluators-1111", tmp_path / "graph-evaluators-2222"
    recent.mkdir()
    stale.mkdir()
    old = time.time() - (source_cache.STALE_FOLDER_DAYS + 1) * 86400
    os.utime(stale, (old, old))
    source_cache._prune_stale_folders(str(tmp_path), keep="graph-evaluators-3333")
    assert recent.is_dir() and not stale.exists()


def test_a_file_of_other_bytes_is_rewritten_not_reused(tmp_path):
    """A damaged or edited generated file never runs: source_file reuses a file
    only when its bytes are exactly the text."""
    target = tmp_path / "zorch_tt_k_0123.py"
    target.write_text("x = 2\n")
    path, written = source_cache.source_file(str(tmp_path), target.name, "x = 1\n")
    assert (path, written) == (str(target), True) and target.read_text() == "x = 1\n"
    assert source_cache.source_file(str(tmp_path), target.name, "x = 1\n") == (str(target), False)


def test_pruning_a_kernel_leaves_the_cache_of_one_whose_name_it_begins(tmp_path, monkeypatch):
    """A graph evaluator's serial twin is the module zorch_graph_<name>__serial:
    pruning zorch_graph_<name> deletes its own cached code, not the twin's."""
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "nc"))
    folder = tmp_path / "gen"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "zorch_graph_k.py").write_text("x = 1\n")
    (folder / "zorch_graph_k__serial.py").write_text("x = 2\n")
    pyc = folder / "__pycache__"
    for name in ("zorch_graph_k.cpython-311.pyc", "zorch_graph_k__serial.cpython-311.pyc"):
        (pyc / name).write_text("")
    old = time.time() - (source_cache.STALE_FOLDER_DAYS + 1) * 86400
    os.utime(folder / "zorch_graph_k.py", (old, old))
    source_cache._prune_stale_files(str(folder))
    assert sorted(os.listdir(folder)) == ["__pycache__", "zorch_graph_k__serial.py"]
    assert os.listdir(pyc) == ["zorch_graph_k__serial.cpython-311.pyc"]
