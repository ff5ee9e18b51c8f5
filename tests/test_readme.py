"""The README's tour runs as written and says what it prints.

Every ```python block of README.md is executed in order in one namespace
(the blocks build on each other), then the results the tour states in its
comments are checked against the namespace.
"""
import pathlib
import re

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _readme() -> str:
    if not README.exists():  # tests run from an sdist without the README
        pytest.skip("README.md is not beside tests/")
    return README.read_text()


def _blocks():
    return re.findall(r"```python\n(.*?)```", _readme(), re.S)


def test_readme_tour_runs_and_states_its_results():
    blocks = _blocks()
    assert len(blocks) >= 4, "the tour has a block per kernel family"
    ns = {}

    def run(k):
        exec(compile(blocks[k], f"README.md python block {k}", "exec"), ns)

    run(0)  # fields
    F = ns["F"]
    # F.decode(F.pow(a, 10))  -> array([1, 1024, 59049], dtype=uint32)
    assert F.decode(F.pow(ns["a"], 10)).tolist() == [1, 1024, 59049]
    assert ns["x"].shape == (2, 5, 4) and ns["y"].shape == (2, 5, 4)
    run(1)  # LogUp-GKR: two fractions per batch element, (32, 4) each (2**4 batch elements)
    assert len(ns["layers"]) == 10 + 1
    out = ns["out"]
    assert out.numerator.shape == out.denominator.shape == (32, 4), out
    run(2)  # graph recorder
    # ctx.copy_to_host(r)  -> [ 1  9 17 25]
    assert ns["ctx"].copy_to_host(ns["r"]).tolist() == [1, 9, 17, 25]
    # replayed on new inputs: ones * 5 + ones
    assert np.asarray(ns["outs"][0]).tolist() == [6, 6, 6, 6]
    assert isinstance(ns["blob"], bytes)
    run(3)  # tensor trains; kernel_cache_info() -> (hits, misses, maxsize, currsize)
    assert ns["kernel_cache_info"]()._fields == ("hits", "misses", "maxsize", "currsize")
    for k in range(4, len(blocks)):
        run(k)


def test_ci_runs_the_readme_test_command():
    """CI must run the test command written in the README, verbatim."""
    text = _readme()
    ci = README.parent / ".ci" / "run"
    if not ci.exists():
        pytest.skip(".ci/run is not beside tests/")
    block = re.search(r"Run the tests.*?```bash\n(.*?)```", text, re.S)
    assert block, "README: no bash block after 'Run the tests'"
    command = block.group(1).strip().split("&&")[-1].strip()
    assert command, block.group(1)
    assert command in [line.strip() for line in ci.read_text().splitlines()], \
        f"README's test command {command!r} is not a line of .ci/run"


def _cuda_example():
    """The README's CUDA C example: (its namespace, the block's own text)."""
    blocks = _blocks()
    (k,) = [k for k, b in enumerate(blocks) if "arithmetic_header" in b]
    ns = {}
    exec(compile(blocks[0], "README.md python block 0", "exec"), ns)  # F
    exec(compile(blocks[k], f"README.md python block {k}", "exec"), ns)
    return ns, blocks[k]


def test_readme_cuda_c_example_compiles_cleanly_with_nvcc(tmp_path):
    """The README's source as a user compiles it: no error, and no warning
    about its text (monty.cuh's #pragma once was one, in the main file)."""
    from cuda_host import nvcc_ptx
    ns, _ = _cuda_example()
    src = tmp_path / "readme_cube.cu"
    src.write_text(ns["source"])
    nvcc_ptx(src, tmp_path / "readme_cube.ptx")


@pytest.mark.gpu
def test_readme_cuda_c_example_runs_as_its_comments_say():
    """The commented launch of the README's own CUDA C kernel (on the GPU
    machine through NVRTC; in CI through the host emulation of CuPy) gives
    F.pow(a, 3), words >= p included."""
    import cupy
    ns, text = _cuda_example()
    F, n = ns["F"], 1000
    a = F.random(n, seed=3)
    a[:3] = [F.p, 2**32 - 1, 0]  # read mod p
    a_dev, out_dev = cupy.asarray(a), cupy.empty(n, dtype=cupy.uint32)
    launch = [line[2:] for line in text.splitlines() if line.startswith("# cube")]
    assert len(launch) == 2, launch
    exec("\n".join(launch), {**ns, "cupy": cupy, "np": np, "n": n, "a_dev": a_dev,
                             "out_dev": out_dev})
    np.testing.assert_array_equal(cupy.asnumpy(out_dev), F.pow(a, 3))


def test_arithmetic_header_is_a_shipped_fields():
    from zorch_nb import BabyBear
    from zorch_nb.kernels.cuda_source import arithmetic_header
    ns, _ = _cuda_example()
    assert ns["source"].startswith(arithmetic_header(ns["F"].params))
    assert f"#define ZORCH_P {BabyBear.p}u" in arithmetic_header(BabyBear.params)
    with pytest.raises(TypeError, match="argument `field` must be a FieldParams"):
        arithmetic_header("koalabear")


def test_two_fields_in_one_cuda_source_are_a_compile_error(tmp_path):
    """Two arithmetic headers in one source compiled: monty.cuh's include
    guard kept the first field's functions under the second's macros (only a
    "ZORCH_P redefined" warning), so mont_mul(R, R) != R."""
    import shutil
    import subprocess

    from zorch_nb import BabyBear, KoalaBear
    from zorch_nb.kernels.cuda_source import arithmetic_header
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    for name, source in (("one", arithmetic_header(KoalaBear.params)),
                         ("two", arithmetic_header(KoalaBear.params)
                          + arithmetic_header(BabyBear.params))):
        path = tmp_path / f"{name}.cpp"
        path.write_text(source + "int main() { return zorch_mont_mul(ZORCH_R_MOD_P, "
                                 "ZORCH_R_MOD_P) != ZORCH_R_MOD_P; }\n")
        res = subprocess.run([gxx, "-fsyntax-only", str(path)], capture_output=True, text=True)
        if name == "one":
            assert res.returncode == 0, res.stderr
        else:
            assert res.returncode != 0 and "one field per source" in res.stderr
            # the error alone: the second preamble's macros were redefined after
            # it, their warnings printed first (a review)
            assert "redefined" not in res.stderr, res.stderr
