"""The asv suite's setups run once per benchmark process (asv_benchmarks.prepare_once).

asv_runner 0.3 calls ``setup`` before every timed call; the suite's setups
make inputs and check the kernels against NumPy, so they are memoized per
parameter combination.  A setup that changes a module setting, which its
``teardown`` undoes after every sample, must still set it each time.
"""
import importlib
import inspect
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def suite(monkeypatch):
    if not (ROOT / "asv_benchmarks").is_dir():
        pytest.skip("no asv_benchmarks/ beside tests/")
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("asv_benchmarks")


def test_prepare_once_runs_once_per_parameters(suite):
    calls = []

    class Bench:
        @suite.prepare_once
        def setup(self, field, n):
            calls.append((field, n))
            if n < 0:
                raise NotImplementedError("skipped")

    b = Bench()
    for _ in range(3):
        b.setup("base", 4)
    assert calls == [("base", 4)]
    b.setup("ext", 4)
    b.setup("base", 4)
    assert calls == [("base", 4), ("ext", 4), ("base", 4)]
    assert Bench().setup("base", 4) is None and len(calls) == 4  # per object
    for _ in range(2):  # a skip is not remembered as prepared
        with pytest.raises(NotImplementedError):
            b.setup("base", -1)
    assert len(calls) == 6
    # asv reads the parameters from the signature
    assert list(inspect.signature(Bench.setup).parameters) == ["self", "field", "n"]


def test_module_settings_are_set_for_every_sample(suite):
    from zorch_nb import fields
    bench_fields = importlib.import_module("asv_benchmarks.bench_fields")
    before = fields._CPU_MIN_RUN
    b = bench_fields.OuterProduct()
    params = ("base", 64, "copied", 2**12)
    try:
        b.setup(*params)
        a = b.a
        for _ in range(2):
            assert fields._CPU_MIN_RUN == 2**62
            b.teardown(*params)
            assert fields._CPU_MIN_RUN == before
            b.setup(*params)
        assert b.a is a  # prepared once
    finally:
        fields._CPU_MIN_RUN = before


def test_setups_with_a_teardown_are_not_memoized_whole(suite):
    """A class whose teardown undoes what setup did would lose it from the
    second sample on if its whole setup were memoized."""
    names = ["bench_fields", "bench_gkr", "bench_graph", "bench_tt"]
    classes = [c for m in names
               for c in vars(importlib.import_module(f"asv_benchmarks.{m}")).values()
               if inspect.isclass(c) and hasattr(c, "setup")]
    assert len(classes) > 15
    with_teardown = [c for c in classes if hasattr(c, "teardown")]
    assert with_teardown and not [c for c in with_teardown if hasattr(c.setup, "__wrapped__")]
    # and the others are (asv_runner 0.3 would rerun their checks before every call)
    assert all(hasattr(c.setup, "__wrapped__") for c in classes if c not in with_teardown)


def test_dispatch_scale_sizes_time_many_calls_per_sample(suite):
    class Bench:
        pass

    b = Bench()
    suite.calls_per_sample(b, suite.SMALL_N)
    assert b.number == suite.SMALL_CALLS
    suite.calls_per_sample(b, 2 * suite.SMALL_N)
    assert not hasattr(b, "number")
