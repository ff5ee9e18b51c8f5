"""``benchmarks/sanitize_case.py`` -- the GPU machine's compute-sanitizer workload
-- runs and agrees with the CPU (on the GPU; in CI against the emulated CuPy
and the Numba-CUDA simulator), so it cannot first fail on the GPU machine."""
import pathlib
import runpy
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "sanitize_case.py"


@pytest.mark.gpu
def test_sanitize_case_passes(monkeypatch, capsys):
    import cupy
    get_allocator = getattr(cupy.cuda, "get_allocator", None)
    before = get_allocator() if get_allocator else None
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)])
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(SCRIPT), run_name="__main__")
    finally:
        if before is not None:  # the script switches CuPy's pool off
            cupy.cuda.set_allocator(before)
    assert done.value.code == 0, capsys.readouterr().out
    assert "checks, OK" in capsys.readouterr().out
