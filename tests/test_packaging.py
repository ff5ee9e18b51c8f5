"""What the package declares and ships (the wheel's own contents are exercised by
CI installing it non-editable; these are the parts CI's install does not see)."""
import ast
import configparser
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _install_requires():
    lines = _setup_cfg()["options"]["install_requires"].strip().splitlines()
    return {re.split(r"[<>=!~ ]", line.strip())[0]: line.strip() for line in lines if line.strip()}


def test_run_time_dependencies_are_required_not_extras():
    """A plain `pip install .` must run the demo: Numba's np.dot (the tensor-train
    kernels) needs scipy, which only the test extra used to bring."""
    reqs = _install_requires()
    uses_dot = "np.dot(" in (ROOT / "kernels" / "tt_kernels.py").read_text()
    assert not uses_dot or "scipy" in reqs, reqs
    # llvmlite 0.44 (numba 0.61) is the first that can clear the forced vector width
    numba = re.search(r"numba>=(\d+)\.(\d+)", reqs["numba"])
    assert numba and (int(numba.group(1)), int(numba.group(2))) >= (0, 61), reqs["numba"]


def test_import_says_what_is_wrong_with_numba():
    """Without Numba (`pip install --no-deps`) the import failed deep in the
    package with a bare "No module named 'numba'"; an older Numba than
    install_requires names imported silently (a packaging review)."""
    from zorch_nb.kernels import NUMBA_MIN
    floor = re.search(r"numba>=(\d+)\.(\d+)", _install_requires()["numba"])
    assert NUMBA_MIN == (int(floor.group(1)), int(floor.group(2)))
    missing = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['numba'] = None; import zorch_nb"],
        capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1
    assert ("ImportError: zorch_nb needs Numba (numba>=0.61, one of its dependencies), "
            "which does not import here") in missing.stderr, missing.stderr
    assert "pip install 'numba>=0.61'" in missing.stderr.splitlines()[-1]
    assert _numba_warnings_at_import("0.60.0") == [
        "zorch_nb needs numba>=0.61, this is numba 0.60.0: kernels may fail to compile or "
        "compile slower code; pip install 'numba>=0.61'"]


def _numba_warnings_at_import(version: str) -> list:
    """The "zorch_nb needs" warnings of ``import zorch_nb`` in a child whose
    numba reports ``version``."""
    res = subprocess.run(
        [sys.executable, "-c", f"import warnings, numba; numba.__version__ = {version!r}\n"
         "with warnings.catch_warnings(record=True) as seen:\n"
         "    warnings.simplefilter('always')\n"
         "    import zorch_nb\n"
         "print(repr([str(w.message) for w in seen if 'zorch_nb needs' in str(w.message)]))"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return ast.literal_eval(res.stdout.strip())  # the child's repr of a list of str


def test_import_is_silent_from_the_oldest_numba_supported():
    assert _numba_warnings_at_import("0.61.0") == []
    assert _numba_warnings_at_import("1.0.0") == []


def test_every_extra_with_numba_cuda_keeps_numpy_below_2_5():
    """numba-cuda 0.30.4 fails on every compile under NumPy 2.5 (np.row_stack is
    gone), and pip takes NumPy 2.5 on Python >= 3.12 unless told otherwise (the
    suite's sm_90 PTX stage failed there): each extra that brings numba-cuda
    keeps NumPy below 2.5 until a numba-cuda release supports it."""
    extras = _setup_cfg()["options.extras_require"]
    with_numba_cuda = [name for name in extras if "numba-cuda" in extras[name]]
    assert {"cuda", "cuda12", "cuda13", "test"} <= set(with_numba_cuda), with_numba_cuda
    for name in with_numba_cuda:
        caps = [line.strip() for line in extras[name].splitlines()
                if line.strip().startswith("numpy")]
        assert caps == ["numpy<2.5"], (name, caps)


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_sdist_carries_every_tracked_file(tmp_path):
    """The sdist's tests need conftest.py, the references and benchmarks/ (setuptools
    alone ships only tests/test*.py)."""
    pytest.importorskip("setuptools")
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split())
    # a copy of the tracked files: an egg-info left in the checkout would list
    # the files of an earlier build and hide a missing MANIFEST.in line
    src = tmp_path / "src"
    for rel in tracked | {"MANIFEST.in", "LICENSE"}:
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    code = ("import setuptools.build_meta as b, sys; "
            "print(b.build_sdist(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=src,
                         capture_output=True, text=True, check=True)
    name = out.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        shipped = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = tracked - shipped - {".gitignore"}
    assert not missing, sorted(missing)
    assert not [n for n in shipped if "__pycache__" in n or n.endswith((".nbi", ".nbc"))]


def test_every_public_name_has_a_docstring():
    """Each function and class a public module lists in ``__all__`` says what
    it does (graph_format's encoders and graph_layout.padded_dims had none)."""
    import ast
    import importlib
    import importlib.util
    import inspect
    import pkgutil

    import zorch_nb
    import zorch_nb.kernels as kernels
    names = [m.name for pkg, prefix in ((zorch_nb, "zorch_nb."), (kernels, "zorch_nb.kernels."))
             for m in pkgutil.iter_modules(pkg.__path__, prefix)
             if not m.name.rsplit(".", 1)[-1].startswith("_")]
    missing, checked, from_source = [], 0, 0
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:  # the CuPy launchers, without CuPy: read from the source
            spec = importlib.util.find_spec(name)
            tree = ast.parse(Path(spec.origin).read_text())
            public = next((ast.literal_eval(n.value) for n in tree.body
                           if isinstance(n, ast.Assign)
                           and any(getattr(t, "id", "") == "__all__" for t in n.targets)), ())
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in public:
                    from_source += 1
                    if not ast.get_docstring(node):
                        missing.append(f"{name}.{node.name}")
            continue
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if callable(obj):
                checked += 1
                if not inspect.getdoc(obj):
                    missing.append(f"{name}.{attr}")
    # (from_source: the CuPy modules where CuPy is missing and no emulated
    # test imported them first)
    assert checked + from_source > 100 and not missing


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH needs Python 3.11")
def test_programs_the_tests_start_import_the_package_under_test():
    """A test's `python -c` run from the checkout's root imports the zorch_nb
    the tests import (CI's non-editable install), not the checkout's sources
    beside it (conftest sets PYTHONSAFEPATH)."""
    import zorch_nb
    out = subprocess.run([sys.executable, "-c", "import zorch_nb; print(zorch_nb.__file__)"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.samefile(out, zorch_nb.__file__), (out, zorch_nb.__file__)
