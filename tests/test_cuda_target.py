"""backend='numba' where numba-cuda imports but its CUDA target cannot compile.

numba-cuda 0.30.4 imports under NumPy 2.5 and then fails on the first
compile (it registers ``np.row_stack``, which NumPy 2.5 removed) with an
``AttributeError`` from deep inside Numba.  ``_backend.cuda_target_problem``
imports the target's NumPy support once up front, and ``kernels_for`` turns
a failure into an ``ImportError`` that says what to install.  The failing
import is stood in for by a module of the test's own (``_CUDA_TARGET_PROBE``).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from zorch_nb import KoalaBear, _backend, _config

ROW_STACK = "module 'numpy' has no attribute 'row_stack'"


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """``probe(source)``: the CUDA target's import is a module with that source
    (``None``: a module that does not exist),
    outside the simulator; the memo and the kernel-module cache start empty."""
    numba = pytest.importorskip("numba")
    counter = iter(range(1000))

    def use(source):  # None: no such module
        name = f"zorch_probe_{next(counter)}"
        if source is not None:
            (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.setattr(_backend, "_CUDA_TARGET_PROBE", name)
        _backend.cuda_target_problem.cache_clear()
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(numba.config, "ENABLE_CUDASIM", 0)
    monkeypatch.setattr(_backend, "_KERNEL_MODULES", {})
    monkeypatch.setattr(_backend, "_require_cuda_driver", lambda: None)  # (no GPU here)
    yield use
    _backend.cuda_target_problem.cache_clear()


def test_a_target_that_fails_to_load_is_named_with_what_to_install(probe):
    pytest.importorskip("numba.cuda")
    probe(f"raise AttributeError({ROW_STACK!r})\n")
    assert _backend.cuda_target_problem() == f"AttributeError: {ROW_STACK}"
    a = KoalaBear.random(8, seed=1)
    before = a.copy()
    for _ in range(2):  # refused every time, not only on the first call
        with pytest.raises(ImportError) as info:
            KoalaBear.mul(a, a, backend="numba")
        text = str(info.value)
        assert "backend='numba'" in text and f"NumPy {np.__version__}" in text
        assert ROW_STACK in text and "pip install 'numpy<2.5'" in text
        assert "leave backend='numba' out" in text
    with pytest.raises(ImportError, match=r"numpy<2\.5"):
        _backend.kernels_for("numba", "gkr")
    assert ("numba", "field") not in _backend._KERNEL_MODULES
    np.testing.assert_array_equal(a, before)
    # python -m zorch_nb info shows it beside "importable: yes"
    info = _config._numba_cuda()
    assert info["importable"] == "yes"
    assert info["compiles"] == f"no (AttributeError: {ROW_STACK})"


def test_other_failures_get_a_generic_hint_and_a_missing_probe_none(probe):
    pytest.importorskip("numba.cuda")
    probe("import zorch_no_such_module_here\n")
    problem = _backend.cuda_target_problem()
    assert problem.startswith("ModuleNotFoundError") and "zorch_no_such_module_here" in problem
    with pytest.raises(ImportError, match="install a NumPy and numba-cuda that work together"):
        _backend.kernels_for("numba", "field")
    # a numba-cuda without that module: nothing to probe, nothing refused
    probe(None)
    assert _backend.cuda_target_problem() is None
    assert _backend.kernels_for("numba", "field") is sys.modules[
        "zorch_nb.kernels.field_cuda_numba"]
    assert _config._numba_cuda()["compiles"] == "yes"


def test_the_simulator_is_not_probed(probe, monkeypatch):
    import numba
    probe(f"raise AttributeError({ROW_STACK!r})\n")
    monkeypatch.setattr(numba.config, "ENABLE_CUDASIM", 1)
    assert _backend.cuda_target_problem() is None


def test_the_installed_numba_cuda_target_loads():
    """The real probe in a process of its own (outside the simulator, whose
    ``numba.cuda`` the real target must not join): it loads, or it fails for
    the known reason only where this NumPy lacks np.row_stack."""
    pytest.importorskip("numba.cuda")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    res = subprocess.run(
        [sys.executable, "-c",
         "from zorch_nb import _backend; print(repr(_backend.cuda_target_problem()))"],
        capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    problem = res.stdout.strip().splitlines()[-1]
    if problem != "None":
        assert not hasattr(np, "row_stack") and "row_stack" in problem, problem
