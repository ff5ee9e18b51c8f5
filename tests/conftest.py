"""Test configuration shared by every test module.

Backends under test
-------------------
* ``cpu``  : Numba CPU kernels, always.
* ``numba``: Numba-CUDA kernels.  On a machine without an NVIDIA driver they
  run under the CUDA simulator: this file sets ``NUMBA_ENABLE_CUDASIM=1``
  before anything imports Numba (set ``ZORCH_CUDASIM=0`` to opt out).  Tests
  that launch them carry the ``cudasim`` marker and must use small inputs.
* ``cupy`` : CuPy RawKernels; tests carry the ``gpu`` marker and are skipped
  when CuPy or a GPU is missing -- unless ``ZORCH_EMULATE_CUPY=1``, which
  runs them against a stand-in for CuPy whose kernels are the CUDA C sources
  compiled for the host under a SIMT emulation (``cuda_emu.py``).
"""
import glob
import os
import shutil

import pytest


def _has_nvidia_driver() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None


if os.environ.get("ZORCH_CUDASIM", "1") != "0" and not _has_nvidia_driver():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

# The programs tests start (`python -c ...`, `python -m zorch_nb bench`) import
# the zorch_nb under test: run from the checkout's root, Python would put the
# root first on sys.path, so under CI's non-editable install they ran the
# checkout's sources -- not what was installed -- and compiled them into a
# Numba cache of their own.  (Python >= 3.11; 3.10 ignores the variable.)
os.environ["PYTHONSAFEPATH"] = "1"

# For the tests that set a NumPy array's ``.shape`` / ``.dtype`` in place on
# purpose (a caller may, and the layers must notice): NumPy 2.5 deprecates the
# setters.  A mark per test, not a filter for the suite: zorch_nb itself must
# never do it.
SETS_SHAPE_IN_PLACE = pytest.mark.filterwarnings(
    r"ignore:Setting the (shape|dtype) on a NumPy array:DeprecationWarning")

# The generated graph evaluators of this run go to a folder of its own, not to
# the user's ~/.cache/zorch_nb (child processes inherit it); removed at exit.
if "ZORCH_NB_CACHE_DIR" not in os.environ:
    import atexit
    import tempfile
    os.environ["ZORCH_NB_CACHE_DIR"] = tempfile.mkdtemp(prefix="zorch_nb_test_cache_")
    atexit.register(shutil.rmtree, os.environ["ZORCH_NB_CACHE_DIR"], ignore_errors=True)


def _numba_cuda_usable() -> bool:
    try:
        from numba import cuda
    except Exception:
        return False
    return SIMULATED or cuda.is_available()


#: ZORCH_EMULATE_CUPY=1: the ``gpu`` tests run against a stand-in for CuPy
#: whose kernels are the CUDA C sources compiled for the host under a SIMT
#: emulation (tests/cuda_emu.py); without a GPU this is how they execute.
EMULATED_CUPY = os.environ.get("ZORCH_EMULATE_CUPY") == "1"
if EMULATED_CUPY:
    import cuda_emu
    cuda_emu.install_session_fakes()


def _cupy_usable() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


NUMBA_CUDA = _numba_cuda_usable()
CUPY = _cupy_usable()

if os.environ.get("ZORCH_REQUIRE_CUPY") == "1" and not CUPY:
    # (the GPU machine's run sets it: a broken CuPy would otherwise skip every
    # gpu test and look like a passing run)
    raise RuntimeError("ZORCH_REQUIRE_CUPY=1 but CuPy cannot reach a CUDA device "
                       "(is cupy-cuda12x/13x installed, and the driver visible?)")
if os.environ.get("ZORCH_REQUIRE_CUDASIM") == "1" and not NUMBA_CUDA:
    raise RuntimeError("ZORCH_REQUIRE_CUDASIM=1 but the Numba-CUDA kernels cannot run "
                       "(is numba-cuda installed?)")
if os.environ.get("ZORCH_REQUIRE_BENCH_DEPS") == "1":
    # (CI's bench stage: without the `bench` extra the galois yardstick's check
    # and the chart tests skip, and the run would look the same)
    import importlib.util
    _missing = [m for m in ("galois", "matplotlib") if importlib.util.find_spec(m) is None]
    if _missing:
        raise RuntimeError(f"ZORCH_REQUIRE_BENCH_DEPS=1 but {', '.join(_missing)} cannot be "
                           f"imported (pip install '.[bench]')")


def pytest_report_header(config):
    mode = "simulator" if SIMULATED else ("GPU" if NUMBA_CUDA else "unavailable")
    cupy = "emulated on the host" if EMULATED_CUPY else ("GPU" if CUPY else "unavailable")
    return [f"zorch_nb: numba-cuda kernels: {mode}; cupy: {cupy}"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # On a real GPU the Numba-CUDA tests are GPU tests too: ``-m gpu`` selects them.
    if NUMBA_CUDA and not SIMULATED:
        for item in items:
            if "cudasim" in item.keywords:
                item.add_marker(pytest.mark.gpu)
    # Order for a parallel run (-n auto hands tests out in this order): the long
    # tests that compile into a cache of their own first, so that none of them is
    # left running alone at the end; the ones that run `python -m zorch_nb bench`
    # last, when the other tests have compiled its kernels into the shared disk
    # cache (the CPU bench: ~110 s cold, ~9 s warm on 2 cores).  sort is stable.
    items.sort(key=lambda item: 0 if "early" in item.keywords else
               2 if "late" in item.keywords else 1)
    skip_gpu = pytest.mark.skip(reason="needs CuPy and a CUDA GPU")
    skip_sim = pytest.mark.skip(reason="needs numba-cuda (GPU or NUMBA_ENABLE_CUDASIM=1)")
    for item in items:
        if "gpu" in item.keywords and not CUPY:
            item.add_marker(skip_gpu)
        if "cudasim" in item.keywords and not NUMBA_CUDA:
            item.add_marker(skip_sim)


#: Backend parameters: use as ``@pytest.mark.parametrize("backend", BACKENDS)``.
BACKENDS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("numba", id="numba", marks=pytest.mark.cudasim),
    pytest.param("cupy", id="cupy", marks=pytest.mark.gpu),
]


def to_backend(x, backend):
    """Host array -> the array type a backend is fed in tests.

    ``cpu`` and ``numba`` take NumPy arrays (``numba`` copies them to the
    device and back); ``cupy`` takes CuPy arrays.
    """
    if backend == "cupy":
        import cupy
        return cupy.asarray(x)
    return x


def to_host(x):
    """Any result array -> NumPy."""
    return x.get() if type(x).__module__.startswith("cupy") else x


# ---- stage summary: what actually ran, per kind of test --------------------
_STAGES = {}


def _stage_of(report) -> str:
    if "gpu" in report.keywords:
        return "gpu (cupy emulated)" if EMULATED_CUPY else "gpu"
    if "cudasim" in report.keywords:
        return "numba-cuda (simulator)" if SIMULATED else "numba-cuda (GPU)"
    if "nvcc" in report.nodeid:
        return "nvcc compile"
    if "nvrtc" in report.nodeid or "ptx" in report.nodeid:
        return "nvrtc / sm_90 PTX compile"
    if "cupy_emulated" in report.nodeid or "test_cuda_emu.py" in report.nodeid:
        return "cuda C kernels, emulated"
    return "cpu"


def pytest_runtest_logreport(report):
    # One outcome per test: the call phase, or the setup phase when it did not pass.
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        counts = _STAGES.setdefault(_stage_of(report), {"passed": 0, "failed": 0, "skipped": 0})
        counts[report.outcome] += 1


def pytest_terminal_summary(terminalreporter):
    if _STAGES:
        terminalreporter.write_sep("-", "zorch_nb: what ran, by stage")
        for stage, c in sorted(_STAGES.items()):
            terminalreporter.write_line(f"{stage:<24} passed {c['passed']:>4}  "
                                        f"failed {c['failed']:>3}  skipped {c['skipped']:>3}")
