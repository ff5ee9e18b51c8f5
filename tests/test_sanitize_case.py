"""``benchmarks/sanitize_case.py`` -- the GPU machine's compute-sanitizer workload
-- runs and agrees with the CPU (on the GPU; in CI against the emulated CuPy
and the Numba-CUDA simulator), so it cannot first fail on the GPU machine."""
import os
import pathlib
import runpy
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "sanitize_case.py"


@pytest.mark.gpu
@pytest.mark.parametrize("flags", [[], pytest.param(["--quick"], marks=pytest.mark.skipif(
    os.environ.get("ZORCH_EMULATE_CUPY") == "1",
    reason="a subset of the full case's kernels; emulated, it costs a minute of CI"))],
    ids=["memcheck-case", "racecheck-case"])
def test_sanitize_case_passes(monkeypatch, capsys, flags):
    import cupy
    get_allocator = getattr(cupy.cuda, "get_allocator", None)
    before = get_allocator() if get_allocator else None
    if os.environ.get("ZORCH_EMULATE_CUPY") == "1":
        # the CuPy kernels (emulated); the Numba-CUDA half -- the same calls
        # with backend="numba", covered by the other tests -- took 80 of the
        # 130 s under the CUDA simulator
        flags = flags + ["--backends", "cupy"]
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)] + flags)
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        if before is not None:  # the script switches CuPy's pool off
            cupy.cuda.set_allocator(before)
    out = capsys.readouterr().out
    assert done.value.code == 0, out
    assert "checks, OK" in out and "ok " in out  # (each check printed as it passes)
    assert ("mle_fold" in out) != ("--quick" in flags) and ("pyramid" in out)
    assert ("numba" in out) != ("--backends" in flags)
