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
