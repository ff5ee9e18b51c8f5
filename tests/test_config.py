"""zorch_nb.show_config / ``python -m zorch_nb info``: the environment report."""
import json
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import zorch_nb
from zorch_nb import _config
from zorch_nb.__main__ import main

SECTIONS = ["zorch_nb", "dependencies", "cpu", "cupy", "numba-cuda", "caches", "environment"]


def _fresh_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def test_the_report_names_what_is_imported():
    report = zorch_nb.show_config("dicts")
    assert list(report) == SECTIONS
    assert report["zorch_nb"]["version"] == zorch_nb.__version__
    assert report["zorch_nb"]["location"] == os.path.dirname(os.path.abspath(zorch_nb.__file__))
    deps = report["dependencies"]
    assert deps["numpy"] == np.__version__ and deps["numba"] == numba.__version__
    import scipy  # a run-time dependency (Numba's np.dot), listed as numba is
    assert deps["scipy"] == scipy.__version__
    # where numba.cuda comes from: "numba-cuda: not installed" in the dependencies
    # beside "importable: yes" read as a contradiction (a packaging review)
    cuda = report["numba-cuda"]
    assert cuda["from"] == (f"the numba-cuda package {deps['numba-cuda']}"
                            if deps["numba-cuda"] != "not installed" else
                            "numba's built-in numba.cuda (no numba-cuda package installed)")
    assert deps["python"].startswith(".".join(map(str, sys.version_info[:3])))
    assert report["cpu"]["cores"] == os.cpu_count()
    assert report["caches"]["generated kernels"].startswith(os.environ["ZORCH_NB_CACHE_DIR"])
    # the folder Numba's locator uses (it named NUMBA_CACHE_DIR or __pycache__
    # even where Numba fell back to the user's cache folder)
    from zorch_nb import kernels
    assert report["caches"]["numba"] == kernels._numba_cache_folder(
        os.path.dirname(kernels.__file__))


def test_the_report_says_when_the_generated_kernels_folder_cannot_be_made(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for root, usable in ((tmp_path / "new" / "deeper", True), (blocker, False)):
        path = os.path.join(str(root), "graph-evaluators-0123")
        shown = _config._generated_folder(path)
        assert shown == path if usable else shown.startswith(
            f"{path} (cannot be created: graph and tensor-train kernels are compiled in memory")
    assert not (tmp_path / "new").exists()  # nothing created


def test_the_generated_kernels_folder_note_checks_folders_and_permissions(tmp_path, monkeypatch):
    note = " (cannot be created: graph and tensor-train kernels are compiled in memory"
    blocker = tmp_path / "a-program"
    blocker.write_text("")
    blocker.chmod(0o755)  # a file, even one that may be run, holds no folder
    path = os.path.join(str(blocker), "graph-evaluators-0123")
    assert _config._generated_folder(path).startswith(path + note)
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(blocker))  # and the report says so
    assert note in _config._caches()["generated kernels"]
    there = tmp_path / "there"
    there.mkdir()
    # (os.access: as root the folder's mode bits would not refuse a write)
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    assert _config._generated_folder(str(there)) == str(there)  # it exists: it is used
    assert _config._generated_folder(str(there / "new")).startswith(str(there / "new") + note)


def test_printed_report_and_bad_mode(capsys):
    assert zorch_nb.show_config() is None
    text = capsys.readouterr().out
    assert [line[:-1] for line in text.splitlines() if not line.startswith(" ")] == SECTIONS
    assert f"version:  {zorch_nb.__version__}" in text
    for bad in ("json", None, ["stdout"]):
        with pytest.raises(ValueError, match="`mode` must be 'stdout' or 'dicts'"):
            zorch_nb.show_config(bad)


def test_it_starts_no_threading_layer_and_creates_no_cache_folder(tmp_path):
    """Numba's layer (GNU OpenMP is not fork-safe once started) and the graph
    evaluator folder (creating it prunes stale siblings) stay untouched."""
    cache = tmp_path / "cache"
    res = _fresh_python(
        "import numba, zorch_nb, json\n"
        "r = zorch_nb.show_config('dicts')\n"
        "try:\n    numba.threading_layer(); started = True\n"
        "except ValueError:\n    started = False\n"
        "print(json.dumps([started, r['cpu']['threading layer'], r['caches']['generated kernels']]))",
        ZORCH_NB_CACHE_DIR=str(cache))
    assert res.returncode == 0, res.stderr
    started, layer, folder = json.loads(res.stdout.splitlines()[-1])
    assert not started and layer.startswith("not started yet")
    assert folder.startswith(str(cache)) and not cache.exists()


def test_a_failing_probe_or_dependency_leaves_a_report(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError

    def boom():
        raise RuntimeError("probe broke\nsecond line")
    monkeypatch.setattr(_config, "_cpu", boom)
    monkeypatch.setenv("ZORCH_SOMETHING", "7")
    report = zorch_nb.show_config("dicts")
    assert report["cupy"]["importable"].startswith(("no (ImportError", "no (ModuleNotFoundError"))
    assert report["cpu"] == {"error": "RuntimeError: probe broke"}
    assert report["environment"]["ZORCH_SOMETHING"] == "7"


def test_info_command(capsys):
    assert main(["info", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == SECTIONS
    assert main(["info"]) == 0
    assert capsys.readouterr().out.startswith("zorch_nb:\n")


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_closed_output_pipe_ends_a_command_quietly(unbuffered):
    """``python -m zorch_nb info | true``: exit status 1, nothing on stderr,
    whether the write fails at once (unbuffered) or when the buffer is flushed."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    try:
        res = subprocess.run([sys.executable, "-m", "zorch_nb", "info"], stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=300, env=env)
    finally:
        os.close(write)
    assert (res.returncode, res.stderr) == (1, "")


def test_a_closed_standard_output_is_said_not_a_traceback():
    """``python -m zorch_nb info >&-`` ended in AttributeError ('NoneType' has
    no 'flush'): Python sets sys.stdout to None for a closed descriptor 1."""
    res = subprocess.run([sys.executable, "-m", "zorch_nb", "info"],
                         preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, text=True,
                         timeout=300)
    assert res.returncode == 1 and res.stderr.strip() == \
        "python -m zorch_nb info: standard output is closed", res.stderr


def test_printed_report_escapes_what_the_output_cannot_encode(monkeypatch):
    """An environment value of undecodable bytes (held as surrogates) or a
    non-ASCII one under an ASCII locale was a UnicodeEncodeError: the report
    is never refused for its environment."""
    import io
    monkeypatch.setenv("ZORCH_BYTES", "caf\udce9")  # os.environ's form of b"caf\xe9"
    monkeypatch.setenv("ZORCH_ACCENT", "caf\u00e9")
    for encoding, accent in (("utf-8", "caf\u00e9"), ("ascii", "caf\\xe9")):
        out = io.TextIOWrapper(io.BytesIO(), encoding=encoding)  # (strict, as a locale's is)
        monkeypatch.setattr(sys, "stdout", out)
        assert zorch_nb.show_config() is None
        out.flush()
        text = out.buffer.getvalue().decode(encoding)
        assert "ZORCH_BYTES:" in text and "caf\\udce9" in text and accent in text


def test_the_environment_section_lists_the_variables_that_matter(monkeypatch):
    """Every prefix of the variables that change what zorch_nb, Numba or CuPy
    do is reported (the GPUs a process sees, OpenMP's threads, the cache
    root); others are not."""
    wanted = {"CUDA_VISIBLE_DEVICES": "1", "NVIDIA_VISIBLE_DEVICES": "all",
              "OMP_NUM_THREADS": "3", "XDG_CACHE_HOME": "/nowhere/cache",
              "NUMBA_ZORCH_TEST": "x", "CUPY_ZORCH_TEST": "y", "ZORCH_ZORCH_TEST": "z"}
    for name, value in wanted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ZZ_NOT_REPORTED", "no")
    env = _config._environment()
    assert {k: env.get(k) for k in wanted} == wanted
    assert "ZZ_NOT_REPORTED" not in env
    assert list(env) == sorted(env)


def test_a_distribution_is_looked_up_under_each_of_its_names():
    """CuPy installs as cupy-cuda12x, cupy-cuda13x, ...: a name not installed
    moves on to the next one."""
    assert _config._distribution("zorch-nb-no-such-dist", "numpy") == np.__version__
    assert _config._distribution("zorch-nb-no-such-dist", "zorch-nb-nor-this") == "not installed"


def test_every_cuda_device_is_reported(monkeypatch):
    import types
    props = {0: {"name": b"GPU zero", "major": 9, "minor": 0, "totalGlobalMem": 80 * 2**30},
             1: {"name": "GPU one", "major": 8, "minor": 6, "totalGlobalMem": 24 * 2**30}}
    runtime = types.SimpleNamespace(runtimeGetVersion=lambda: 12040, driverGetVersion=lambda: 12050,
                                    getDeviceCount=lambda: 2, getDeviceProperties=props.__getitem__,
                                    getDevice=lambda: 1)
    fake = types.ModuleType("cupy")
    fake.__version__ = "0.0-test"
    fake.cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    info = _config._cupy()
    assert info["importable"] == "yes, 0.0-test"
    assert info["devices"] == ["0: GPU zero, compute capability 9.0, 80.0 GiB",
                               "1: GPU one, compute capability 8.6, 24.0 GiB"]
    assert info["current device"] == 1


def test_an_empty_section_is_printed_as_none_set():
    assert _config._text({"environment": {}, "cpu": {"cores": 2}}) == \
        "environment:\n  (none set)\ncpu:\n  cores: 2"


def test_a_threading_layer_that_needs_a_missing_tbb_is_said(monkeypatch):
    """NUMBA_THREADING_LAYER=tbb (or safe) without TBB: small calls ran serially
    and passed, large ones raised "No threading layer could be loaded" -- a
    pipeline tested on small arrays failed at scale.  The report says so
    while no layer has started (checking loads TBB's library, starts nothing)."""
    from numba.np.ufunc import parallel

    def no_tbb():
        raise ImportError("Problem with TBB. Reason: libtbb.so.12: cannot open shared object")
    monkeypatch.setattr(parallel, "_check_tbb_version_compatible", no_tbb)
    for requested in ("tbb", "safe", "SAFE"):
        note = _config._missing_tbb(requested)
        assert "it needs TBB, which does not load here" in note and "libtbb.so.12" in note
        assert "every parallel kernel will raise" in note
    assert _config._missing_tbb("omp") == _config._missing_tbb("default") == ""
    monkeypatch.setattr(parallel, "_check_tbb_version_compatible", lambda: None)
    assert _config._missing_tbb("tbb") == ""  # TBB loads: nothing to say
