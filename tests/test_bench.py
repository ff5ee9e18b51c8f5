"""``python -m zorch_nb bench`` runs end to end on the CPU and writes valid JSON.

Tiny sizes only: this checks the plumbing (every row, the report, the second
process figure), never speed -- speed is measured by the benchmark itself.
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest


BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.late
def test_bench_cpu_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    res = subprocess.run([sys.executable, "-m", "zorch_nb", "bench", "--device", "cpu",
                          "--sizes", "10", "16", "--repeat", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr

    def no_nan(name):  # strict JSON: NaN is not JSON (other parsers refuse it)
        raise AssertionError(f"{name} in the report")
    report = json.loads(out.read_text(), parse_constant=no_nan)
    assert {"date", "device", "command", "copy", "results", "second_process"} <= set(report)
    # self-describing: layout version, units, what the fractions depend on
    assert report["schema"] == 1 and set(report["units"]) >= {"time_s", "size", "baselines"}
    assert all(set(c) == {"level", "type", "size"} for c in report["cpu_caches"])
    assert set(report["load_average"]) == {"start", "end"}
    assert report["command"].endswith(f"bench --device cpu --sizes 10 16 --repeat 1 "
                                      f"--json {out}")
    assert report["command"].startswith("python -m zorch_nb bench")
    assert [c["size"] for c in report["copy"]] == [4 * 2**10, 4 * 2**16]
    assert report["copy"][0]["gbps"] > 0
    small = [r for r in report["results"]
             if r["size"] == 2**10 and not r["kernel"].startswith("dispatch")]
    assert small
    # 1024 segments over 2^10 rows are their own floor: no pyramid row, a note
    # (a user review: a row of 0 layers and a "speedup" of nothing)
    assert "jagged pyramid base/ext (1024 seg.)" not in {r["kernel"] for r in small}
    assert "(no jagged pyramid at 2^10: 1024 segments over 1024 rows" in res.stdout
    report["results"] = [r for r in report["results"] if r not in small]
    for r in small:  # launch-bound: times only (a fraction there was noise, up to 295x)
        assert r["fraction_of_copy"] is None and "paired_fraction" not in r["extra"]
        assert r["gbps"] is None
    assert "launch-bound: times only" in res.stdout
    for r in report["copy"] + report["results"] + small:  # how steady: --repeat 1 sample
        if r["kernel"].startswith("dispatch"):  # 5 rounds of back-to-back calls
            assert r["samples"] == 5 and r["max_s"] >= r["median_s"] >= r["time_s"], r
        else:
            assert (r["samples"], r["median_s"], r["max_s"]) == (1, r["time_s"], r["time_s"]), r
    for r in report["results"]:  # compile time apart from the steady state, for every row
        assert r["first_call_s"] is not None and r["first_call_s"] > 0, r["kernel"]
        assert (r["fraction_of_copy"] is None) == r["kernel"].startswith("dispatch")
        assert (r["gbps"] is None) == r["kernel"].startswith("dispatch")
    kernels = {r["kernel"] for r in report["results"]}
    for name in ("dense fold base/base", "dense fold base/ext", "dense fold ext/ext",
                 "jagged transition base/base (1024 seg.)", "dense pyramid base/base (to floor)",
                 "jagged pyramid base/ext (1024 seg.)", "dispatch: one transition base/base",
                 "dispatch: base mul of 8 elements", "base inv (KoalaBear)", "ext4 inv (KoalaBear)",
                 "encode int64 (KoalaBear)", "decode (KoalaBear)"):
        assert name in kernels
    for r in report["results"]:  # the conversions, beside NumPy's uint64 ops
        if r["kernel"] in ("encode int64 (KoalaBear)", "decode (KoalaBear)"):
            assert r["baselines"]["numpy uint64"] > 0
    for r in report["results"]:
        assert r["time_s"] > 0 and r["bytes"] > 0
        assert r["size"] == {"dispatch: base mul of 8 elements": 8,
                             "dispatch: one transition base/base": 2**10}.get(r["kernel"], 2**16)
    parts = [r["extra"] for r in report["results"]
             if r["kernel"] == "dispatch: one transition base/base"]
    for extra in parts:  # where a small transition's time goes
        assert "parts_error" not in extra, extra
        assert 0 < extra["launcher_us"] and 0 < extra["buffer_and_views_us"]
        assert 0 < extra["checked_launcher_us"]
    for r in report["results"]:  # every CPU fold against plain NumPy, the base one galois too
        if r["kernel"].startswith("dense fold"):
            assert "numpy uint64" in r["baselines"], r["kernel"]
    for r in report["results"]:  # every CPU fold: the paired and the cache-resident rate
        if r["kernel"].startswith("dense fold"):
            assert r["extra"]["paired_fraction"] > 0 and r["extra"]["in_cache_gbps"] > 0
            # allocating its outputs, as the baselines do (a figure, not compared
            # with the row's time: at the test's sizes both are noise-level)
            assert r["extra"]["alloc_out_ms"] > 0, r["kernel"]
    assert "warm_cache_run" in report["second_process"][0]
    # every figure a row carries beyond the columns is explained in the report
    for r in report["copy"] + report["results"] + small:
        assert set(r["extra"]) <= set(report["units"]["extra"]), (r["kernel"], r["extra"])
    assert res.stdout.startswith("zorch_nb bench on ") and "columns: size = " in res.stdout
    assert "second process (cpu): import " in res.stdout
    # what produced the report: the code, its versions, the CPU by name
    import numba

    import zorch_nb
    sw = report["software"]
    assert sw["zorch_nb"] == zorch_nb.__version__ and sw["numba"] == numba.__version__
    assert sw["numpy"] == np.__version__ and sw["numba_threads"] >= 1
    assert "commit" in sw and report["device"].endswith(f"({os.cpu_count()} cores)")
    # and the environment report, taken once the measured kernels started Numba's threads
    cpu = report["config"]["cpu"]
    assert cpu["threading layer"] in ("omp", "tbb", "workqueue") and cpu["cores"] == os.cpu_count()
    assert report["config"]["dependencies"]["numpy"] == np.__version__


def test_the_commit_is_this_checkouts_only(tmp_path):
    """An install inside a virtualenv kept in the user's own repository must not
    report that repository's commit; a checkout reports its own."""
    import shutil

    from zorch_nb.bench import _commit
    if shutil.which("git") is None:
        pytest.skip("needs git")
    repo = tmp_path / "users_repo"
    pkg = repo / ".venv" / "lib" / "site-packages" / "zorch_nb"
    pkg.mkdir(parents=True)
    (repo / "notes.txt").write_text("x")
    git = ["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "notes.txt"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    assert _commit(str(pkg)) is None
    (repo / "zorch_nb").mkdir()  # a zorch_nb folder vendored at its top: not ours either
    assert _commit(str(repo / "zorch_nb")) is None
    (repo / "kernels").mkdir()  # this project's checkout: its commit
    (repo / "kernels" / "launch_config.py").write_text("")
    subprocess.run(git + ["add", "kernels/launch_config.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "y"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert _commit(str(repo / "zorch_nb")) == head.strip()


@pytest.mark.late
def test_json_to_stdout_is_one_document():
    """``--json -``: stdout holds the report alone (the tables go to stderr)."""
    res = subprocess.run([sys.executable, "-m", "zorch_nb", "bench", "--sizes", "10",
                          "--repeat", "1", "--json", "-"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["results"] and "kernel" in res.stderr


def test_a_yardstick_that_does_not_fit_keeps_the_kernels_row(monkeypatch):
    """The NumPy fold's uint64 copies are 2-4x the kernel's data: at a size where
    only the kernel fits, its row stays, the missing yardstick noted in it."""
    from zorch_nb import KoalaBear as F
    from zorch_nb import _bench_gkr, _numpy_gkr
    from zorch_nb.bench import Row

    def no_memory(*args):
        raise MemoryError("Unable to allocate 1.00 GiB")
    monkeypatch.setattr(_numpy_gkr, "dense_transition", no_memory)
    monkeypatch.setattr(_bench_gkr, "_galois_field", lambda: None)
    row = Row("dense fold base/base", "cpu", 16, 1e-6, 96)
    _bench_gkr._cpu_baselines(row, [F.random(16, seed=k) for k in range(4)], 1)
    assert row.baselines == {} and row.extra["baseline_error"].startswith("MemoryError")


def test_busy_machine_figures_are_flagged_and_never_meet_a_target(tmp_path):
    """Beside a busy process every parallel call, the copy included, stretches alike:
    the ratios look fine; the copies give it away (moving within a size, or the
    parallel copy slower than one thread's).  The table marks the rows, targets.py
    lists them as unreliable and exits 1."""
    from zorch_nb.bench import Row, _table, busy
    assert busy(45.0, 44.0, 20.0) is None  # an idle run
    assert "before the kernels and" in busy(45.0, 20.0, 20.0)
    assert "slower than one thread's (11 GB/s)" in busy(4.3, 4.3, 11.0)
    ok = Row("dense fold base/base", "cpu", 2**22, 1e-3, 24 << 20).finish(10.0)
    ok.extra.update(paired_fraction=0.8)
    bad = Row("dense fold base/base", "cpu", 2**24, 1e-3, 24 << 20).finish(10.0)
    bad.extra.update(paired_fraction=2.06, implausible="another process was busy: x")
    assert "? figures no idle machine gives" in _table([bad], ok)
    report = {"date": "d", "device": "cpu", "command": "c", "copy": [],
              "results": [{"kernel": r.kernel, "backend": "cpu", "size": r.size,
                           "time_s": r.time_s, "extra": r.extra,
                           "baselines": {"galois GF(p)": 1.0}} for r in (ok, bad)]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    res = subprocess.run([sys.executable, str(BENCHMARKS / "targets.py"), str(path)],
                         capture_output=True, text=True)
    assert res.returncode == 1
    rows = [ln for ln in res.stdout.splitlines() if "(paired)" in ln]
    assert "| met |" in rows[0] and "**unreliable** (another process was busy" in rows[1]
    report["results"] = report["results"][:1]  # every target met: 0
    path.write_text(json.dumps(report))
    res = subprocess.run([sys.executable, str(BENCHMARKS / "targets.py"), str(path)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout
    report["errors"] = ["cpu jagged pyramid: MemoryError"]  # a failed section: 1
    path.write_text(json.dumps(report))
    res = subprocess.run([sys.executable, str(BENCHMARKS / "targets.py"), str(path)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "Sections that failed" in res.stdout


def _decoded(layer):
    from zorch_nb import KoalaBear as F
    return [(F.ext if x.ndim == 2 else F).decode(x) for x in layer.mles]


def _equal_layers(got, layer):
    import numpy as np
    for g, x in zip(got, _decoded(layer)):
        assert g.dtype == np.uint64 and np.array_equal(g, x)


def test_cpu_baselines_compute_the_fold_they_time():
    """A baseline is only a yardstick if it computes the same fold: NumPy (every
    mode) and galois (base/base) against the kernels, in canonical values."""
    import numpy as np

    from zorch_nb import KoalaBear as F
    from zorch_nb import _numpy_gkr
    from zorch_nb._bench_gkr import _galois_field, galois_fold
    from zorch_nb.logup_gkr import GkrLayer, layer_transition
    p, w = np.uint64(F.p), np.uint64(F.params.w)
    for ne, de in ((False, False), (False, True), (True, False), (True, True)):
        fields = [F.ext if e else F for e in (ne, ne, de, de)]
        mles = [E.random(16, seed=k) for k, E in enumerate(fields)]
        want = layer_transition(GkrLayer(*mles, 0))
        canon = [E.decode(x).astype(np.uint64) for E, x in zip(fields, mles)]
        _equal_layers(_numpy_gkr.dense_transition(canon, p, w), want)
        GF = _galois_field()
        # (CI's bench stage installs galois: there a missing field is a failure)
        assert GF is not None or os.environ.get("ZORCH_REQUIRE_BENCH_DEPS") != "1"
        if not de and not ne and GF is not None:
            for g, x in zip(galois_fold(*[GF(c.astype(np.int64)) for c in canon]),
                            _decoded(want)):
                assert np.array_equal(np.asarray(g, dtype=np.int64), x)


@pytest.mark.parametrize("ne, de", [(False, False), (False, True), (True, True)])
def test_numpy_yardsticks_compute_the_pyramids_they_time(ne, de):
    """The jagged transition and both pyramids of the NumPy yardstick (bench and
    asv time them) give the kernels' layers: empty, odd and even segments,
    neutral padding and dead slots included."""
    import numpy as np

    from zorch_nb import KoalaBear as F
    from zorch_nb import _numpy_gkr
    from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid,
                                    build_pyramid, halving_schedule, jagged_layer_transition)
    p, w = np.uint64(F.p), np.uint64(F.params.w)
    fields = [F.ext if e else F for e in (ne, ne, de, de)]
    mles = [E.random(64, seed=k) for k, E in enumerate(fields)]
    canon = [E.decode(x).astype(np.uint64) for E, x in zip(fields, mles)]
    dense = GkrLayer(*mles, 2)
    got = _numpy_gkr.dense_pyramid(canon, dense.num_row_variables, p, w)
    want = build_pyramid(dense)
    assert len(got) == len(want)
    for g, x in zip(got, want):
        _equal_layers(g, x)
    rc = np.array([5, 0, 1, 8, 3, 0, 20, 2], np.int32)  # 39 rows of 64: 25 dead slots
    jagged = JaggedGkrLayer(*mles, rc)
    for orc, width in (([3, 1, 1, 4, 2, 1, 10, 1], 30), ([3, 0, 1, 5, 2, 0, 10, 2], 23)):
        orc = np.array(orc, np.int32)  # dead slots; then empty outputs, padding, no slack
        _equal_layers(_numpy_gkr.jagged_transition(canon, rc, orc, width, p, w),
                      jagged_layer_transition(jagged, orc, width))
    schedule = halving_schedule(jagged)
    got = _numpy_gkr.jagged_pyramid(canon, rc, schedule, p, w)
    want = build_jagged_pyramid(jagged, schedule)
    assert len(got) == len(want) == len(schedule) + 1
    for g, x in zip(got, want):
        _equal_layers(g, x)


# ---- tests from mutation testing of the NumPy yardstick (_numpy_gkr): the
# tests above use KoalaBear alone (W = 3) and layers with rows to spare

@pytest.mark.parametrize("name", ["KoalaBear", "BabyBear"])
def test_numpy_yardstick_products_match_big_ints(name):
    """``ext_mul``, ``times`` (every operand combination) and ``node`` against
    Python big integers, at both fields (a W of 3 written in place of ``w``
    passed with KoalaBear alone) and at the largest entries, ``p - 1``:
    ``times`` returns reduced values whichever operand is the base one (the
    numerator path reduced a missing ``% p`` later, and the bench timed one
    reduction too few)."""
    from naive import P, W, ext_mul

    from zorch_nb import _numpy_gkr
    p, w = P[name], W[name]
    rng = np.random.default_rng(7)
    n = 6
    base = [rng.integers(0, p, n, dtype=np.uint64) for _ in range(4)]
    ext = [rng.integers(0, p, (n, 4), dtype=np.uint64) for _ in range(4)]
    for arrays in (base, ext):
        for a in arrays:
            a[0] = p - 1  # the largest products
    big = {1: lambda a, k: [int(a[k])] * 4, 2: lambda a, k: [int(v) for v in a[k]]}

    def want_times(x, d):  # a base operand multiplies every coefficient
        rows = []
        for k in range(n):
            xs, ds = big[x.ndim](x, k), big[d.ndim](d, k)
            if x.ndim == d.ndim == 2:
                rows.append(ext_mul(xs, ds, p, w))
            else:
                rows.append([a * b % p for a, b in zip(xs, ds)])
        return [r[0] for r in rows] if x.ndim == d.ndim == 1 else rows

    def as_list(v):
        return [int(c) for c in v] if v.ndim == 1 else [[int(c) for c in row] for row in v]
    pw = (np.uint64(p), np.uint64(w))
    assert as_list(_numpy_gkr.ext_mul(ext[0], ext[1], *pw)) == want_times(ext[0], ext[1])
    for x in (base[0], ext[0]):
        for d in (base[1], ext[1]):
            got = _numpy_gkr.times(x, d, *pw)
            assert got.dtype == np.uint64 and as_list(got) == want_times(x, d), (x.ndim, d.ndim)
    for n0, n1 in ((base[0], base[1]), (ext[0], ext[1])):
        for d0, d1 in ((base[2], base[3]), (ext[2], ext[3])):
            if n0.ndim > d0.ndim:
                continue  # (no LogUp layer has an extension numerator over base denominators)
            num, den = _numpy_gkr.node(n0, n1, d0, d1, *pw)
            a, b = want_times(n0, d1), want_times(n1, d0)
            want_num = ([(u + v) % p for u, v in zip(a, b)] if num.ndim == 1 else
                        [[(u + v) % p for u, v in zip(ra, rb)] for ra, rb in zip(a, b)])
            assert as_list(num) == want_num and as_list(den) == want_times(d0, d1)


def test_numpy_jagged_transition_of_a_full_layer():
    """Every row used (no slack past the last segment), an odd last segment and
    dead slots: the padding and dead slots must read no row past the array
    (a slot's row index computed unmasked ran past it: an IndexError)."""
    from zorch_nb import KoalaBear as F
    from zorch_nb import _numpy_gkr
    from zorch_nb.logup_gkr import JaggedGkrLayer, jagged_layer_transition
    p, w = np.uint64(F.p), np.uint64(F.params.w)
    for ne, de in ((False, False), (False, True), (True, True)):
        fields = [F.ext if e else F for e in (ne, ne, de, de)]
        mles = [E.random(64, seed=k) for k, E in enumerate(fields)]
        canon = [E.decode(x).astype(np.uint64) for E, x in zip(fields, mles)]
        rc = np.array([5, 8, 20, 31], np.int32)  # 64 rows of 64
        jagged = JaggedGkrLayer(*mles, rc)
        for orc, width in (([3, 4, 10, 16], 40), ([4, 4, 12, 17], 40)):
            orc = np.array(orc, np.int32)  # exact outputs (7 dead slots), then padding (3)
            _equal_layers(_numpy_gkr.jagged_transition(canon, rc, orc, width, p, w),
                          jagged_layer_transition(jagged, orc, width))


def test_bench_plot_needs_matplotlib_or_draws(tmp_path):
    pytest.importorskip("matplotlib")
    from zorch_nb.bench import Row, plot
    rows = [Row("k", "cpu", 8, 1.0, 8).finish(1.0)]
    plot(rows, Row("copy", "cpu", 8, 1.0, 8).finish(1.0), str(tmp_path / "p.png"), "t")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_a_failing_section_is_reported_not_fatal(tmp_path, monkeypatch):
    """One broken kernel costs its rows only; the JSON keeps the rest and the error."""
    import argparse

    from zorch_nb import _bench_gkr, bench

    def broken(*args, **kwargs):
        raise RuntimeError("planted failure")
    monkeypatch.setattr(_bench_gkr, "_jagged_rows", broken)
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})
    out = tmp_path / "b.json"
    args = argparse.Namespace(device="cpu", sizes=[8], repeat=1, json=str(out), plot=None)
    assert bench.main(args) == 1
    report = json.loads(out.read_text())
    assert report["errors"] == ["cpu jagged transitions: RuntimeError: planted failure"]
    kernels = {r["kernel"] for r in report["results"]}
    assert "dense fold base/base" in kernels and "dense pyramid base/ext (to floor)" in kernels
    assert not any(k.startswith("jagged transition") for k in kernels)


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "40"], "--sizes: 40 is not a log2 element count in 1..32"),
    (["--sizes", "0"], "--sizes: 0 is not a log2 element count in 1..32"),
    (["--repeat", "0"], "--repeat: 0 is not a positive number of repetitions"),
    (["--repeat", "1001"], "--repeat: 1001 repetitions is more than 1000"),
])
def test_bench_rejects_sizes_and_repeats_it_cannot_measure(argv, message, capsys):
    from zorch_nb.__main__ import main
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["bench", "--backends", "numba"], "--backends picks GPU backends; it needs --device gpu"),
    (["demo", "--gpu", "--backend", "numba"], "--gpu means --backend cupy"),
    # (an explicit cpu too: it was taken for the default, and --gpu won)
    (["demo", "--backend", "cpu", "--gpu"], "it contradicts --backend cpu"),
    (["bench", "--sizes", "abc"], "invalid log2 size value: 'abc'"),
    (["bench", "--json", ""], "argument --json: an empty file name"),  # was ignored
    (["bench", "--plot", " "], "argument --plot: an empty file name"),
])
def test_cli_contradictions_are_usage_errors(argv, message, capsys):
    from zorch_nb.__main__ import main
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("arg, who", [("info", "zorch_nb info"), ("--version", "zorch_nb"),
                                      ("--help", "zorch_nb")])
def test_standard_output_that_refuses_writes_is_one_line_not_a_traceback(arg, who):
    """``python -m zorch_nb info > /dev/full`` (a full disk) ended in a
    traceback, where a closed pipe, a closed stdout and an unwritable --json
    file each get one line; ``--version`` / ``--help`` exited 0 with nothing
    written (argparse ignores a failed write of its text)."""
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "zorch_nb", arg], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=300)
    assert res.returncode == 1
    assert res.stderr.strip().endswith(f"{who}: cannot write to standard output: "
                                       "[Errno 28] No space left on device")
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("extra", [[], ["--json", "-"]])
def test_bench_with_standard_output_closed_refuses_before_measuring(extra, monkeypatch,
                                                                    capsys):
    """``bench >&-`` measured for minutes and threw every table away (exit 0);
    with ``--json -`` it crashed writing the report at the end."""
    from zorch_nb import bench
    from zorch_nb.__main__ import main
    monkeypatch.setattr(bench, "cpu_copy_gbps", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["bench", "--sizes", "8", *extra]) == 1
    assert capsys.readouterr().err.strip().endswith(
        "bench: standard output is closed; pass --json FILE to keep the report")


def test_a_bench_cut_by_a_closed_pipe_says_so_in_its_report(tmp_path, monkeypatch, capsys):
    """``bench --json r.json | head -1``: the run stops quietly (exit 1), and
    the JSON it leaves says it was cut, as after Ctrl-C (it looked complete)."""
    from zorch_nb import __main__ as cli
    from zorch_nb import bench

    def reader_gone(*args):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(bench, "_gkr_rows", reader_gone)
    monkeypatch.setattr(cli, "_stdout_to_devnull", lambda: None)  # (capsys has no fd 1)
    out = tmp_path / "r.json"
    assert cli.main(["bench", "--sizes", "16", "--repeat", "1", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["errors"][0].startswith("stopped: standard output was closed (a broken "
                                          "pipe): the JSON holds every section finished")
    err = capsys.readouterr().err
    assert "FAILED stopped: standard output was closed" in err
    # the end's summary says what it is: the failures again, under a header
    assert "\n1 failure in this run, all listed here (those met while measuring were " \
           "printed then too):\nFAILED stopped" in err


def test_output_that_cannot_encode_the_text_prints_question_marks():
    """PYTHONIOENCODING=ascii: the demo's header (an em dash) failed with a
    UnicodeEncodeError."""
    env = dict(os.environ, PYTHONIOENCODING="ascii")
    res = subprocess.run([sys.executable, "-c", "import sys; from zorch_nb.__main__ import "
                          "_replace_unencodable_output as r; r(); print('demo \u2014 cpu')"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout == "demo ? cpu\n", res.stderr


def test_a_failing_file_of_the_command_is_not_blamed_on_standard_output(monkeypatch, capsys):
    """Only a write to standard output is reported as one; another OSError
    (a file of the command's) is raised as it is, and stdout is put back."""
    from zorch_nb import __main__ as cli
    real = sys.stdout

    def failing(args):
        print("some output")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cli, "info", failing)
    with pytest.raises(OSError, match="No space left"):
        cli.main(["info"])
    assert sys.stdout is real and "some output" in capsys.readouterr().out


# ---- tests from mutation testing of the command line (zorch_nb/__main__.py):
# what reaches the bench and the demo sections, with both replaced by
# recorders (nothing below measures or runs a demo)

def _bench_args(monkeypatch, argv, status=0):
    """The namespace ``main(argv)`` hands ``bench.main``, and main's return."""
    from zorch_nb import bench
    from zorch_nb.__main__ import main
    seen = []
    monkeypatch.setattr(bench, "main", lambda args: (seen.append(args), status)[1])
    returned = main(argv)
    (args,) = seen
    return args, returned


def test_bench_defaults_and_bounds_reach_the_bench(monkeypatch):
    """The documented defaults (cpu, the size chosen per device, 5 repetitions),
    the bounds accepted at both ends (sizes 1 and 32, --repeat 1 and 1000),
    the command as given (the report's "command"), and the bench's status."""
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/python", "-m", "zorch_nb"])
    args, status = _bench_args(monkeypatch, ["bench"], status=3)
    assert status == 3
    assert (args.device, args.sizes, args.repeat, args.json, args.plot, args.backends) == \
        ("cpu", None, 5, None, None, None)
    assert args.argv == ["bench"] and args.prog == "python -m zorch_nb"
    argv = ["bench", "--device", "gpu", "--sizes", "1", "32", "--repeat", "1000",
            "--backends", "numba"]
    args, _ = _bench_args(monkeypatch, argv)
    assert (args.device, args.sizes, args.repeat, args.backends) == \
        ("gpu", [1, 32], 1000, ["numba"])
    assert args.argv == argv  # not the test runner's own sys.argv
    args, _ = _bench_args(monkeypatch, ["bench", "--repeat", "1"])
    assert args.repeat == 1


@pytest.mark.parametrize("argv0, prog", [
    ("/home/u/.venv/bin/zorch_nb", "zorch_nb"),  # the console script, by its full path
    ("zorch_nb", "zorch_nb"),
    ("/usr/lib/python3/site-packages/zorch_nb/__main__.py", "python -m zorch_nb"),
    ("/home/u/bin/zorch_nb_old", "python -m zorch_nb"),
])
def test_the_program_name_follows_how_it_was_started(monkeypatch, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0, "bench"])
    args, _ = _bench_args(monkeypatch, ["bench"])
    assert args.prog == prog


def test_sizes_needs_at_least_one_value(monkeypatch, capsys):
    from zorch_nb import bench
    from zorch_nb.__main__ import main
    monkeypatch.setattr(bench, "main", lambda args: pytest.fail(f"bench ran with {args.sizes}"))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--sizes", "--repeat", "1"])
    assert exc.value.code == 2 and "--sizes: expected at least one argument" in \
        capsys.readouterr().err


@pytest.fixture
def demo_sections(monkeypatch, tmp_path):
    """Replace the demo's sections by recorders: a section that records the
    backend it ran on, one whose module does not exist (skipped), and, when
    asked, one whose module fails importing a missing dependency."""
    import types

    from zorch_nb import __main__ as cli
    ran = []
    mod = types.ModuleType("zorch_nb_test_demo_section")
    mod.run = lambda backend, out: (ran.append(backend), out("section ran"))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    (tmp_path / "zorch_nb_test_demo_needs_dep.py").write_text(
        "import zorch_nb_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sections = [("Recorded", mod.__name__), ("Absent", "zorch_nb_test_no_such_section")]
    monkeypatch.setattr(cli, "DEMO_SECTIONS", tuple(sections))

    def with_broken_section():
        monkeypatch.setattr(cli, "DEMO_SECTIONS",
                            tuple(sections + [("Broken", "zorch_nb_test_demo_needs_dep")]))
    return cli, ran, with_broken_section


def test_demo_runs_each_section_on_the_backend_asked_for(demo_sections, monkeypatch, capsys):
    cli, ran, with_broken_section = demo_sections
    monkeypatch.setattr(cli, "_gpu_available", lambda: True)
    monkeypatch.setattr(cli, "_numba_cuda_available", lambda: True)
    for argv, backend in ((["demo"], "cpu"), (["demo", "--gpu"], "cupy"),
                          (["demo", "--backend", "cupy"], "cupy"),
                          (["demo", "--gpu", "--backend", "cupy"], "cupy"),
                          (["demo", "--backend", "numba"], "numba")):
        del ran[:]
        assert cli.main(argv) == 0, argv
        out = capsys.readouterr().out
        assert ran == [backend], argv  # the present section ran once, the absent one was skipped
        assert f"backend: {backend}" in out and "== Recorded ==" in out and "Absent" not in out
        assert "all demo checks passed" in out
    # a section whose own import fails (a missing dependency) is an error, not skipped
    with_broken_section()
    with pytest.raises(ModuleNotFoundError, match="zorch_nb_no_such_dependency"):
        cli.main(["demo"])


@pytest.mark.parametrize("argv, gpu, numba_cuda, message", [
    (["demo", "--gpu"], False, True, "GPU requested but CuPy or a CUDA GPU is not available"),
    (["demo", "--backend", "cupy"], False, True, "GPU requested but CuPy"),
    (["demo", "--backend", "numba"], True, False, "NUMBA_ENABLE_CUDASIM=1 python -m zorch_nb demo"),
])
def test_demo_without_its_device_says_so(demo_sections, monkeypatch, capsys, argv, gpu,
                                         numba_cuda, message):
    cli, ran, _ = demo_sections
    monkeypatch.setattr(cli, "_gpu_available", lambda: gpu)
    monkeypatch.setattr(cli, "_numba_cuda_available", lambda: numba_cuda)
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err and ran == []


def test_demo_with_standard_output_closed_says_so(demo_sections, monkeypatch, capsys):
    """``python -m zorch_nb demo >&-``: Python's sys.stdout is None; the demo's
    prints would be lost (info's case is run in tests/test_config.py)."""
    cli, ran, _ = demo_sections
    monkeypatch.setattr(sys, "stdout", None)
    assert cli.main(["demo"]) == 1
    assert "demo: standard output is closed" in capsys.readouterr().err and ran == []


def test_demo_interrupted_is_one_line(demo_sections, monkeypatch, capsys):
    """Ctrl-C during the demo printed a KeyboardInterrupt traceback."""
    cli, _, _ = demo_sections

    def ctrl_c(backend, out):
        raise KeyboardInterrupt
    monkeypatch.setattr(sys.modules["zorch_nb_test_demo_section"], "run", ctrl_c)
    try:
        status = cli.main(["demo"])
    except KeyboardInterrupt:  # (escaping, it would end the pytest run itself)
        pytest.fail("Ctrl-C escaped main as a KeyboardInterrupt")
    assert status == 130
    assert capsys.readouterr().err.strip().endswith("demo: interrupted")


def test_device_probes(monkeypatch):
    """CuPy with no device is no GPU; the CUDA simulator counts as Numba-CUDA."""
    import types

    from zorch_nb import __main__ as cli
    count = [0]
    runtime = types.SimpleNamespace(getDeviceCount=lambda: count[0])
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert cli._gpu_available() is False
    count[0] = 1
    assert cli._gpu_available() is True
    pytest.importorskip("numba.cuda")
    from numba import cuda
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert cli._numba_cuda_available() is True
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    assert cli._numba_cuda_available() is False


def test_outputs_are_checked_before_measuring(tmp_path, monkeypatch, capsys):
    """A --json or --plot path that cannot be written fails at once (exit 2), not after
    minutes of measuring."""
    from zorch_nb import bench
    from zorch_nb.__main__ import main
    monkeypatch.setattr(bench, "cpu_copy_gbps", lambda *a: pytest.fail("measured first"))
    (tmp_path / "f.json").write_text("{}")
    cases = [(["--json", str(tmp_path)], "is a directory"),
             (["--json", str(tmp_path / "no" / "r.json")], "does not exist"),
             (["--json", str(tmp_path / "f.json" / "r.json")], "f.json' is a file, not a folder"),
             # realpath made "new/" a file "new", and dropped "no/.." (no such folder)
             (["--json", str(tmp_path / "new") + os.sep], "ends with a separator"),
             (["--json", str(tmp_path / "no" / ".." / "r.json")], "/no/..' does not exist"),
             # past the file system's limit: the probe's short name passed, and
             # the report, measured, could not be written
             (["--json", str(tmp_path / ("r" * 300 + ".json"))],
              "its name is 305 bytes, past the folder's file system limit of")]
    if _has_matplotlib():
        cases.append((["--plot", str(tmp_path / "p.xyz")], "must end in one of"))
        # pgf needs LaTeX, which only the save after the whole run found missing
        cases.append((["--plot", str(tmp_path / "p.pgf")], "must end in one of"))
        # sizes that all report times only have nothing to draw
        cases.append((["--plot", str(tmp_path / "p.png")], "add a size of at least 16"))
    for extra, message in cases:
        assert main(["bench", "--sizes", "8", *extra]) == 2
        assert message in capsys.readouterr().err
    # a path the folder's mode bits allow but the file system refuses (root
    # passes os.access everywhere: /proc, a read-only mount)
    real_open = open

    def refusing(path, *a, **k):
        if ".zorch-bench-" in str(path):  # (the temporary the writer makes)
            raise OSError(30, "Read-only file system")
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", refusing)
    (tmp_path / "old.json").write_text("{}")  # an existing file is replaced the same way
    for name in ("r.json", "old.json"):
        assert main(["bench", "--sizes", "8", "--json", str(tmp_path / name)]) == 2
        assert f"{name}' cannot be written: [Errno 30] Read-only file system" in \
            capsys.readouterr().err
    monkeypatch.setattr("builtins.open", real_open)
    if os.path.isfile("/proc/version"):  # a stream, refused at its first write
        assert main(["bench", "--sizes", "8", "--json", "/proc/version"]) == 2
        assert "'/proc/version' cannot be written" in capsys.readouterr().err
    # the plot would have replaced the report
    assert main(["bench", "--sizes", "16", "--json", str(tmp_path / "p.png"),
                 "--plot", str(tmp_path / "." / "p.png")]) == 2
    assert "--json and --plot name the same file" in capsys.readouterr().err
    # a CPU size past the memory (the OOM killer ended it silently, minutes in)
    monkeypatch.setattr(bench, "_available_memory", lambda: 2 << 30)
    assert main(["bench", "--sizes", "8", "24"]) == 2
    assert ("--sizes 24 needs about 8.1 GiB of memory on the CPU (~500 bytes per element "
            "at its peak) and 2.0 GiB are available: the largest size that fits is 21"
            in capsys.readouterr().err)


def _fake_root(tmp_path, cgroup, files, meminfo_kib=8 << 20):
    """A file tree with /proc/meminfo, /proc/self/cgroup and cgroup files."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(f"MemTotal: 9 kB\nMemAvailable: {meminfo_kib} kB\n")
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_available_memory_respects_cgroup_limits(tmp_path):
    """A container's limit, not the host's MemAvailable, bounds the CPU sizes."""
    from zorch_nb.bench import _available_memory
    gib = 1 << 30
    v2 = "sys/fs/cgroup/"
    # cgroup v2: the tightest of the process's cgroup and its ancestors, with
    # inactive page cache counted as room; "max" is no limit
    root = _fake_root(tmp_path / "v2", "0::/box/job\n", {
        v2 + "box/memory.max": f"{3 * gib}\n", v2 + "box/memory.current": f"{2 * gib}\n",
        v2 + "box/memory.stat": f"anon 5\ninactive_file {gib // 2}\n",
        v2 + "box/job/memory.max": "max\n", v2 + "box/job/memory.current": "7\n"})
    assert _available_memory(root) == 3 * gib - (2 * gib - gib // 2)
    # the host's MemAvailable when it is the smaller
    root = _fake_root(tmp_path / "v2small", "0::/box/job\n", {
        v2 + "box/job/memory.max": f"{64 * gib}\n", v2 + "box/job/memory.current": "0\n"},
        meminfo_kib=1 << 20)
    assert _available_memory(root) == gib
    # a namespace whose own cgroup shows as "/" reads the mount's root
    root = _fake_root(tmp_path / "ns", "0::/\n", {
        v2 + "memory.max": f"{gib}\n", v2 + "memory.current": f"{gib // 4}\n"})
    assert _available_memory(root) == gib - gib // 4
    # cgroup v1: hierarchical_memory_limit covers the ancestors
    v1 = "sys/fs/cgroup/memory/"
    root = _fake_root(tmp_path / "v1", "4:memory:/docker/abc\n1:cpu:/\n", {
        v1 + "docker/abc/memory.stat":
            f"cache 1\nhierarchical_memory_limit {2 * gib}\ntotal_inactive_file {gib // 4}\n",
        v1 + "docker/abc/memory.usage_in_bytes": f"{gib}\n"})
    assert _available_memory(root) == 2 * gib - (gib - gib // 4)
    # v1's "no limit" (the largest page-aligned int64) and no cgroup files at all
    root = _fake_root(tmp_path / "v1none", "4:memory:/\n", {
        v1 + "memory.stat": "hierarchical_memory_limit 9223372036854771712\n",
        v1 + "memory.usage_in_bytes": "5\n"})
    assert _available_memory(root) == 8 * gib
    root = _fake_root(tmp_path / "bare", "0::/gone\n", {})
    assert _available_memory(root) == 8 * gib
    # usage past the limit leaves no room (not a negative size)
    root = _fake_root(tmp_path / "full", "0::/\n", {
        v2 + "memory.max": f"{gib}\n", v2 + "memory.current": f"{2 * gib}\n"})
    assert _available_memory(root) == 0


def test_cgroup_v1_without_a_limit_lists_no_limit(tmp_path):
    """cgroup v1 writes "no limit" as the largest page-aligned int64: no limit
    is listed for it (a limit of 8 EiB is none), while a real one is."""
    from zorch_nb import _backend
    v1 = "sys/fs/cgroup/memory/"
    root = _fake_root(tmp_path / "none", "4:memory:/\n", {
        v1 + "memory.stat": "hierarchical_memory_limit 9223372036854771712\n",
        v1 + "memory.usage_in_bytes": "5\n"})
    assert _backend.cgroup_memory_limits(root) == []
    root = _fake_root(tmp_path / "some", "4:memory:/\n", {
        v1 + "memory.stat": "hierarchical_memory_limit 4096\ntotal_inactive_file 1\n",
        v1 + "memory.usage_in_bytes": "5\n"})
    assert _backend.cgroup_memory_limits(root) == [(4096, 4)]


def _has_matplotlib():
    import importlib.util
    return importlib.util.find_spec("matplotlib") is not None


def test_second_process_reads_its_marked_line_and_reports_failure(monkeypatch):
    from zorch_nb import bench
    monkeypatch.setattr(bench, "SECOND_PROCESS",
                        "print('[cache] debug chatter'); print('ZORCH_STARTUP 0.5 0.25'); "
                        "print('more chatter')")
    got = bench.second_process("cpu", "np")
    assert got["warm_cache_run"]["import_s"] == 0.5
    assert got["warm_cache_run"]["first_fold_s"] == 0.25
    monkeypatch.setattr(bench, "SECOND_PROCESS", "raise SystemExit('child broke')")
    assert bench.second_process("cpu", "np") == {"backend": "cpu", "error": ["child broke"]}


def test_second_process_times_the_first_fold_alone():
    """The child's first-fold clock held F.random's first call and the input's
    copy to the device (0.34 s of a 0.36 s "first fold" on the CPU): it starts
    after them, and the import's clock holds CuPy's import where it runs."""
    from zorch_nb import bench
    code = bench.SECOND_PROCESS.format(xp="__import__('cupy')", backend="cupy", sync="SYNC")
    at = {k: code.index(k) for k in ("t1 =", "t2 =", "t3 =", "F.random", "layer_transition(G",
                                     "__import__('cupy')")}
    assert at["__import__('cupy')"] < at["t1 ="] < at["F.random"] < at["t2 ="]
    assert at["t2 ="] < at["layer_transition(G"] < at["t3 ="]
    assert code.index("SYNC") < at["t2 ="] and code.rindex("SYNC") < at["t3 ="]
    assert code.endswith("print('ZORCH_STARTUP', t1 - t0, t3 - t2)")


def test_a_failed_second_process_fails_the_run(tmp_path, monkeypatch):
    import argparse

    from zorch_nb import bench
    monkeypatch.setattr(bench, "_gkr_rows", lambda *args: [])
    monkeypatch.setattr(bench, "second_process",
                        lambda backend, xp: {"backend": backend, "error": ["ImportError: x"]})
    out = tmp_path / "b.json"
    args = argparse.Namespace(device="cpu", sizes=[8], repeat=1, json=str(out), plot=None)
    assert bench.main(args) == 1
    assert json.loads(out.read_text())["errors"] == ["cpu second process: ImportError: x"]


def test_a_json_file_that_cannot_be_written_is_reported_and_measuring_goes_on(
        tmp_path, monkeypatch, capsys):
    """/dev/full passes every up-front check and fails at the write: the table is
    still printed for every size, the run says why and exits 1 (was a traceback
    after the first size)."""
    import argparse

    from zorch_nb import bench
    monkeypatch.setattr(bench, "_gkr_rows", lambda *args: [])
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})
    monkeypatch.chdir(tmp_path)

    def full_disk(path, text):
        raise OSError(28, "No space left on device", bench._temporary_beside(path))
    monkeypatch.setattr(bench, "_replace_file", full_disk)
    args = argparse.Namespace(device="cpu", sizes=[8, 9], repeat=1, json="r.json", plot=None)
    assert bench.main(args) == 1
    out, err = capsys.readouterr()
    # both sizes measured: each row printed as its section ends, then in the table
    assert out.count("dispatch: base mul of 8 elements") == 4
    assert err.count("--json 'r.json' could not be written: [Errno 28] No space left") == 2
    assert ".tmp" not in err  # the user's file is named, not the temporary


def test_a_chart_that_cannot_be_written_is_reported(tmp_path, monkeypatch, capsys):
    """A full disk when the chart is saved, after the run: the report is kept
    and the run says what was not written (exit 1), where it ended in a
    traceback."""
    pytest.importorskip("matplotlib")
    import argparse

    from zorch_nb import bench
    monkeypatch.setattr(bench, "_gkr_rows", lambda *args: [])
    monkeypatch.setattr(bench, "graph_rows", lambda *args: [])
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})

    def full_disk(*args):
        raise OSError(28, "No space left on device", "c.png")
    monkeypatch.setattr(bench, "plot", full_disk)
    args = argparse.Namespace(device="cpu", sizes=[16], repeat=1, json=str(tmp_path / "r.json"),
                              plot=str(tmp_path / "c.png"))
    assert bench.main(args) == 1
    assert "--plot '" + str(tmp_path / "c.png") + "' not written: [Errno 28] No space left" \
        in capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["results"]


def _quick_bench(monkeypatch, json_path, **extra):
    import argparse

    from zorch_nb import bench
    monkeypatch.setattr(bench, "_gkr_rows", lambda *args: [])
    monkeypatch.setattr(bench, "graph_rows", lambda *args: [])
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})
    args = argparse.Namespace(device="cpu", sizes=[8, 9], repeat=1, json=json_path, plot=None,
                              **extra)
    return bench.main(args)


def test_json_reaches_pipes_links_and_long_names_as_one_document(tmp_path, monkeypatch):
    """A pipe (``--json >(cat > r.json)``, /dev/fd/N) got a document per
    section, back to back; a link was replaced by a file (its target left
    stale); a valid 250-byte name was refused (its temporary's name was
    past the limit); an existing report lost its permissions."""
    import threading
    r, w = os.pipe()
    got = []
    reader = threading.Thread(target=lambda: got.append(os.fdopen(r, "rb").read()))
    reader.start()
    try:
        assert _quick_bench(monkeypatch, f"/dev/fd/{w}") == 0
    finally:
        os.close(w)
        reader.join()
    report = json.loads(got[0])  # (one document: json.loads refuses "extra data")
    assert len(report["copy"]) == 2  # both sizes, in the one document written at the end

    target = tmp_path / "reports" / "target.json"
    target.parent.mkdir()
    target.write_text("{}")
    target.chmod(0o600)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert _quick_bench(monkeypatch, str(link)) == 0
    assert link.is_symlink() and json.loads(target.read_text())["copy"]
    assert target.stat().st_mode & 0o777 == 0o600
    long_name = tmp_path / ("r" * 245 + ".json")
    assert _quick_bench(monkeypatch, str(long_name)) == 0
    assert json.loads(long_name.read_text())["copy"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["reports", "latest.json", long_name.name])  # (no temporary left)


def test_an_interrupted_run_keeps_every_finished_section(tmp_path, monkeypatch, capsys):
    """gpu_run.sh stops the bench with SIGINT at its time cap: the JSON must
    hold the sections that ended before (it was written once per size, and
    the GPU run has one size), against the size's first copy."""
    import argparse

    from zorch_nb import bench

    def stop(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(bench, "_gkr_rows", stop)
    out = tmp_path / "r.json"
    args = argparse.Namespace(device="cpu", sizes=[16], repeat=1, json=str(out), plot=None)
    assert bench.main(args) == 130
    report = json.loads(out.read_text())
    assert report["errors"] and "interrupted" in report["errors"][0]
    (copy,) = report["copy"]
    rows = {r["kernel"]: r for r in report["results"]}
    base = rows["base mul (KoalaBear)"]
    assert base["fraction_of_copy"] == pytest.approx(base["gbps"] / copy["gbps"])
    assert "dispatch: base mul of 8 elements" in rows
    assert "base mul (KoalaBear)" in capsys.readouterr().out  # printed as it ended
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left


def test_an_interrupt_at_the_end_of_a_size_keeps_its_rows(tmp_path, monkeypatch):
    """The size's rows move from 'pending' to the final list before its table
    is printed (a print into a full pipe blocks: SIGINT lands there): the
    JSON kept nothing when the interrupt came between the two."""
    import argparse

    from zorch_nb import bench
    monkeypatch.setattr(bench, "_gkr_rows", lambda *args: [])
    real, calls = bench._table, []

    def table(rows, copy_row):
        calls.append(len(rows))
        if len(calls) == 2:  # 1: the field section as it ends; 2: the size's table
            raise KeyboardInterrupt
        return real(rows, copy_row)
    monkeypatch.setattr(bench, "_table", table)
    out = tmp_path / "r.json"
    args = argparse.Namespace(device="cpu", sizes=[16], repeat=1, json=str(out), plot=None)
    assert bench.main(args) == 130 and len(calls) == 2
    report = json.loads(out.read_text())
    kernels = [r["kernel"] for r in report["results"]]
    assert "base mul (KoalaBear)" in kernels and len(kernels) == len(set(kernels))
    assert len(report["copy"]) == 1


def test_a_size_that_does_not_fit_stops_the_sizes_with_a_clear_error(tmp_path, monkeypatch):
    """The copy yardstick running out of memory ends the size loop, keeps the
    sizes measured before it, and says why (no traceback, exit status 1)."""
    import argparse

    from zorch_nb import bench
    real = bench.cpu_copy_gbps

    def copy_or_oom(n, repeat):
        if n > 2**8:
            raise MemoryError(f"Unable to allocate {32 * n} bytes")
        return real(n, repeat)
    monkeypatch.setattr(bench, "cpu_copy_gbps", copy_or_oom)
    monkeypatch.setattr(bench, "_gkr_rows", lambda *args: [])
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})
    out = tmp_path / "b.json"
    # in any order: the sizes run ascending, so every size below the failing one runs
    args = argparse.Namespace(device="cpu", sizes=[10, 8, 9], repeat=1, json=str(out), plot=None)
    assert bench.main(args) == 1
    report = json.loads(out.read_text())
    assert [c["size"] for c in report["copy"]] == [4 * 2**8]
    assert report["errors"] == [f"2^9 elements do not fit in memory: the copy yardstick failed "
                                f"(Unable to allocate {32 * 2**9} bytes); this size and larger "
                                "ones skipped"]


def test_sass_stats_counts_opcode_classes():
    """benchmarks/sass_stats.py (run on the GPU machine's cubin) parses cuobjdump's text."""
    mod = _script("sass_stats")
    text = """
	code for sm_90
		Function : kern_a
        /*0000*/                   IMAD.MOV.U32 R5, RZ, RZ, RZ ;   /* 0x0 */
        /*0010*/                   IMAD.WIDE.U32 R2, R4, R5, RZ ;  /* 0x0 */
        /*0020*/               @P0 IMAD R2, R4, R5, RZ ;           /* 0x0 */
        /*0030*/              @!P1 LDG.E.128 R8, desc[UR4][R2.64] ; /* 0x0 */
        /*0040*/                   EXIT ;                          /* 0x0 */
		Function : kern_b
        /*0000*/                   STG.E [R2.64], R4 ;             /* 0x0 */
        /*fff0*/                   NOP ;                           /* 0x0 */
        /*10000*/                  LDS R4, [R2] ;                  /* 0x0 */
"""
    (name_a, total_a, a), (name_b, total_b, b) = mod.stats(text)
    # addresses past 0xffff have five hex digits: still instructions
    assert (name_a, total_a, name_b, total_b) == ("kern_a", 5, "kern_b", 3)
    assert (a["MOV"], a["IMAD.WIDE"], a["IMAD"], a["LDG"], b["STG"], b["LDS"]) == (1, 1, 1, 1, 1, 1)


def test_kernel_ab_times_every_kernel_it_names():
    """benchmarks/kernel_ab.py (before/after comparisons of the arithmetic) runs
    every kernel it lists on a small size and reports a positive best time each."""
    res = _script("kernel_ab").main(6)
    assert list(res) == ["base add", "base mul", "base mle fold", "ext mul", "base x ext mul",
                         "ext mle fold", "dense fold bb", "dense fold be", "dense fold ee"]
    assert all(isinstance(v, float) and v > 0 for v in res.values()), res


def test_ext_mul_layouts_times_three_layouts_of_the_same_words():
    """benchmarks/ext_mul_layouts.py (the block-transpose experiment) gives a
    positive best time per layout (its own check that the three give the same
    words passes), and its blocked loop gives the library's words at 100
    elements, no multiple of its block."""
    mod = _script("ext_mul_layouts")
    res = mod.main(7)
    assert list(res) == ["interleaved", "blocks", "coefficient_major"]
    assert all(isinstance(v, float) and v > 0 for v in res.values()), res
    n, f = 100, mod.F.params
    rng = np.random.default_rng(2)
    a, b = (rng.integers(0, 2**32, 4 * n, dtype=np.uint32) for _ in range(2))
    want, got = np.empty_like(a), np.empty_like(a)
    args = (np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.w_mont))
    mod.field_cpu._ext4_mul_run(0, n, a, b, want, *args)
    mod._blocks(0, n, a, b, got, *args)
    assert got.tobytes() == want.tobytes()
    assert want.tobytes() == mod.F.ext.mul(a.reshape(n, 4), b.reshape(n, 4)).tobytes()


def test_version_and_submodules_as_attributes(capsys):
    """``--version`` prints the package version; ``zorch_nb.tt`` and the other
    public submodules are attributes after ``import zorch_nb`` (an
    AttributeError before), imported on first use."""
    import zorch_nb
    from zorch_nb.__main__ import main
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"zorch_nb {zorch_nb.__version__}\n"
    assert zorch_nb.tt.UniformTuckerTensorTrain and zorch_nb.logup_gkr.GkrLayer
    assert {"tt", "graph", "logup_gkr"} <= set(dir(zorch_nb))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        zorch_nb.nope


# ---- tests from mutation testing of the bench and its report scripts: every
# figure the one GPU run's report is judged by, checked against values computed
# here (fake timers and copies: nothing below measures anything)

def _fixed_timer(seconds):
    """A bench timer that runs ``fn`` once and reports ``seconds``."""
    def timer(fn, repeat):
        fn()
        return seconds
    return timer


def _script(name):
    """benchmarks/<name>.py as a module (the scripts are not part of the package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"bench_script_{name}", BENCHMARKS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_row_bandwidth_and_fraction_come_from_bytes_and_time():
    from zorch_nb.bench import Row
    row = Row("dense fold base/base", "cupy", 2**26, 2e-3, 48 << 20).finish(40.0)
    assert row.gbps == pytest.approx((48 << 20) / 2e-3 / 1e9)  # GB/s: 1e9 bytes per second
    assert row.fraction_of_copy == pytest.approx((48 << 20) / 2e-3 / 1e9 / 40.0)
    timing = Row("dispatch: one transition base/base", "cupy", 2**10, 1e-5, 96,
                 vs_copy=False).finish(40.0)
    assert timing.gbps is None and timing.fraction_of_copy is None


def test_busy_thresholds_at_their_limits():
    """The copies moving by more than 1.5x within a size, or the faster of the two
    parallel copies below 1/1.25 of one thread's, and nothing less."""
    from zorch_nb.bench import busy
    assert busy(30.0, 20.1) is None and busy(20.1, 30.0) is None  # 1.49x
    assert "before the kernels" in busy(30.0, 19.9) and "before the kernels" in busy(19.9, 30.0)
    assert busy(10.0, 10.0, 12.4) is None  # 10 * 1.25 = 12.5 >= 12.4
    assert "slower than one thread's" in busy(10.0, 10.0, 12.6)
    # the faster copy is the one compared with one thread's: 10 * 1.25 >= 11
    assert busy(10.0, 8.0, 11.0) is None and busy(8.0, 10.0, 11.0) is None


def test_cpu_copy_yardstick_counts_read_and_written_bytes(monkeypatch):
    from zorch_nb import bench
    monkeypatch.setattr(bench, "_time_cpu", lambda fn, repeat: 1e-6)
    monkeypatch.setattr(bench, "_numba_copy", lambda: lambda src, dst: np.copyto(dst, src))
    row = bench.cpu_copy_gbps(2**10, 1)
    words = 4 * 2**10  # four MLEs' worth
    assert (row.size, row.bytes, row.time_s) == (words, 2 * 4 * words, 1e-6)
    assert row.extra["serial_copy_gbps"] == round(2 * 4 * words / 1e-6 / 1e9, 1)  # 32.8


def test_gpu_copy_yardstick_and_timer(monkeypatch):
    """The device copy moves 4 n words (read and written); the event timer warms
    up before it times (the first call compiles / allocates: 1000 ms here) and
    keeps the best repetition."""
    import types

    from zorch_nb import bench

    clock = {"ms": 0.0, "calls": 0}

    class Event:
        def record(self):
            self.t = clock["ms"]

        def synchronize(self):
            pass

    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Event=Event, get_elapsed_time=lambda a, b: b.t - a.t),
        arange=np.arange, empty_like=np.empty_like, copyto=np.copyto, uint32=np.uint32)
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def fn():
        clock["calls"] += 1
        clock["ms"] += 1000.0 if clock["calls"] == 1 else (3.0 if clock["calls"] == 2 else 2.0)
    assert bench._time_gpu(fn, 1) == pytest.approx(3e-3) and clock["calls"] == 2
    clock.update(ms=0.0, calls=0)
    t = bench._time_gpu(fn, 3)
    assert t == pytest.approx(2e-3) and clock["calls"] == 4
    # the untimed warm-up call is no sample; the three timed ones are
    assert (t.samples, t.median, t.worst) == (3, pytest.approx(2e-3), pytest.approx(3e-3))
    monkeypatch.setattr(bench, "_time_gpu", _fixed_timer(1e-6))
    row = bench.gpu_copy_gbps(2**10, 1)
    assert (row.size, row.bytes, row.time_s) == (4 * 2**10, 2 * 4 * 4 * 2**10, 1e-6)


def test_cpu_timer_keeps_the_best_repetition():
    import time

    from zorch_nb.bench import _time_cpu
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.2)
    t = _time_cpu(fn, 3)
    assert t < 0.1 and len(calls) == 3
    # the slow sample is not lost: it is the row's max_s, beside the median
    assert (t.samples, t.median < 0.1, t.worst >= 0.2) == (3, True, True)


def test_timing_carries_the_samples_spread():
    """A Timing is its best sample (a plain float to arithmetic) with the
    median, the slowest and the count; a Row built from one keeps those as
    median_s / max_s / samples and its time_s a plain float."""
    import dataclasses

    from zorch_nb.bench import Row, Timing
    t = Timing.of([3.0, 1.0, 2.0, 10.0])
    assert (float(t), t.median, t.worst, t.samples) == (1.0, 2.5, 10.0, 4)
    assert type(t * 2) is float and t * 2 == 2.0
    with pytest.raises(ValueError, match="samples"):
        Timing.of([])
    row = Row("k", "cpu", 4, t, 8)
    assert type(row.time_s) is float and row.time_s == 1.0
    assert (row.median_s, row.max_s, row.samples) == (2.5, 10.0, 4)
    assert json.loads(json.dumps(dataclasses.asdict(row)))["median_s"] == 2.5
    again = dataclasses.replace(row)  # as the bench copies the copy row
    assert (again.time_s, again.median_s, again.samples) == (1.0, 2.5, 4)
    plain = Row("k", "cpu", 4, 1e-3, 8)  # a time from elsewhere: no spread claimed
    assert (plain.median_s, plain.max_s, plain.samples) == (None, None, None)


def test_table_marks_rows_whose_median_is_far_from_the_best():
    from zorch_nb.bench import UNSTEADY_MEDIAN, Row, Timing, _table
    copy = Row("copy", "cpu", 4 * 2**20, Timing.of([1e-3, 1e-3, 1e-3]), 1 << 23).finish(8.0)
    steady = Row("steady", "cpu", 2**20, Timing.of([1e-3, 1.1e-3, 1.2e-3]), 1 << 22)
    edge = Row("edge", "cpu", 2**20, Timing.of([1e-3, UNSTEADY_MEDIAN * 1e-3, 9e-3]), 1 << 22)
    shaky = Row("shaky", "cpu", 2**20, Timing.of([1e-3, 2e-3, 3e-3]), 1 << 22)
    lines = _table([r.finish(8.0) for r in (steady, edge, shaky)], copy).splitlines()
    line = {name: next(x for x in lines if x.startswith(name)) for name in
            ("copy", "steady", "edge", "shaky")}
    assert "1.000 ms~" in line["shaky"]
    assert all("1.000 ms " in line[k] for k in ("copy", "steady", "edge"))
    assert any(x.startswith("~ the median call took more than") for x in lines)
    assert not any(x.startswith("~ ") for x in _table([steady], copy).splitlines())


def test_table_takes_a_row_timed_elsewhere():
    """A Row whose time is a plain float has no median_s: never marked ``~``
    (and no comparison with None)."""
    from zorch_nb.bench import Row, Timing, _table
    copy = Row("copy", "cpu", 4 * 2**20, Timing.of([1e-3]), 1 << 23).finish(8.0)
    plain = Row("plain", "cpu", 2**20, 1e-3, 1 << 22).finish(8.0)
    lines = _table([plain], copy).splitlines()
    assert "1.000 ms " in next(x for x in lines if x.startswith("plain"))
    assert not any(x.startswith("~ ") for x in lines)


def test_table_of_a_busy_launch_bound_size():
    """A launch-bound size's copy shows no rate (the footer said "times only"
    under a copy row with a GB/s and a fraction of 1.00); the reason a size is
    flagged is printed once, under the table, not on every row; baselines keep
    three digits (a 2 us yardstick printed as 0.00 ms)."""
    from zorch_nb.bench import Row, Timing, _table
    why = "another process was busy on these cores: the copy ran at 1 GB/s, then 9"
    copy = Row("copy", "cpu", 32, Timing.of([8e-3]), 256, extra={"implausible": why})
    rows = [Row(k, "cpu", 8, Timing.of([1e-5]), 96, baselines={"numpy": 2.77e-6},
                extra={"implausible": why}) for k in ("one", "two")]
    lines = _table([r.finish(None) for r in rows], copy.finish(3.2e-5)).splitlines()
    copy_line = next(x for x in lines if x.startswith("copy"))
    assert copy_line.split()[3:6] == ["8.000", "ms", "?"], copy_line
    assert all("busy" not in x for x in lines if x.startswith(("copy", "one", "two")))
    assert sum(why in x for x in lines) == 1
    assert "numpy 0.00277 ms (speedup 0.3x)" in next(x for x in lines if x.startswith("one"))


def test_report_extra_keys_are_explained_and_the_start_up_reads_as_text():
    from zorch_nb import bench
    assert bench.REPORT_UNITS["extra"] is bench.REPORT_EXTRA
    assert all(isinstance(v, str) and v for v in bench.REPORT_EXTRA.values())
    record = {"backend": "cpu", "first_run": {"wall_s": 9.5, "import_s": 0.7,
                                              "first_fold_s": 8.1234},
              "warm_cache_run": {"wall_s": 1.4, "import_s": 0.5, "first_fold_s": 0.46}}
    assert bench._startup_line(record) == (
        "second process (cpu): import 0.70 s, first fold 8.123 s (wall 9.50 s); again, "
        "caches warm: import 0.50 s, first fold 0.460 s (wall 1.40 s)")
    assert bench._startup_line({"backend": "numba", "error": ["boom"]}) == (
        "second process (numba): failed: boom")


def test_plot_cuts_outliers_at_its_cap_and_says_so(tmp_path):
    """A busy run's 27x bar set the axis and left the bars near 1 as slivers."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from zorch_nb.bench import PLOT_CAP, Row, plot
    copies = [Row("copy", "cpu", 4 * 2**16, 1.0, 8, gbps=10.0)]
    rows = [Row("k", "cpu", 2**16, 1.0, 8, fraction_of_copy=f, extra=e)
            for f, e in ((0.9, {"paired_fraction": 31.0}), (27.0, {}), (1.1, {}))]
    plot(rows, copies, str(tmp_path / "c.png"), "t")
    ax = plt.gcf().axes[0]
    assert [b.get_width() for b in ax.patches] == [0.9, PLOT_CAP, 1.1]
    assert ax.get_xlim()[1] <= PLOT_CAP * 1.05
    assert [t.get_text().strip() for t in ax.texts] == ["27 (cut)"]
    assert max(ax.lines[-1].get_xdata()) <= PLOT_CAP  # the paired marker too
    plt.close(ax.figure)


def test_report_units_name_the_spread():
    from zorch_nb.bench import REPORT_UNITS
    assert "median_s" in REPORT_UNITS and "max_s" in REPORT_UNITS["median_s"]


def test_paired_copy_moves_the_kernels_bytes(monkeypatch):
    """paired_cpu: the copy has the kernel's footprint (half read, half written)
    and its GB/s counts both; the best time of each side is kept."""
    import types

    from zorch_nb import bench
    sizes = []

    def copy(src, dst):
        sizes.append(src.nbytes + dst.nbytes)
    monkeypatch.setattr(bench, "_numba_copy", lambda: copy)
    # per repetition: before fn, between, after the copy (fn 3 s then 2 s; copy 1 s then 2 s)
    ticks = iter([0.0, 3.0, 4.0, 10.0, 12.0, 14.0])
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    tf, copy_gbps = bench.paired_cpu(lambda: None, 8000, 2)
    assert set(sizes) == {8000}
    assert tf == 2.0 and copy_gbps == pytest.approx(8000 / 1.0 / 1e9)


def test_field_rows_count_the_bytes_each_kernel_moves():
    """Each input word read once, each output word written once (4-byte words;
    an extension element is 4 words, an encode input an 8-byte integer)."""
    from zorch_nb import bench
    n = 64
    rows = {r.kernel: r for r in bench.field_rows(n, "cpu", 1, np, _fixed_timer(1e-3), None)}
    base, ext = 4 * n, 16 * n  # bytes of n base / n extension elements
    want = {"base mul": 3 * base, "ext4 mul": 3 * ext,
            "ext4 mul by one element": 2 * ext, "base x ext4 mul": base + 2 * ext,
            "base inv": 2 * base, "ext4 inv": 2 * ext,
            "encode int64": 8 * n + base, "decode": 2 * base,
            "mle fold": base + base // 2, "ext4 mle fold, base values": base + ext // 2,
            "ext4 mle fold": ext + ext // 2}
    assert {k: rows[f"{k} (KoalaBear)"].bytes for k in want} == want
    assert all(rows[f"{k} (KoalaBear)"].time_s == 1e-3 for k in want)
    assert rows["dispatch: base mul of 8 elements"].vs_copy is False


def test_field_rows_time_fresh_results_in_fresh_pages(monkeypatch):
    """``fresh_out_ms`` of every CPU field row is timed by ``_fresh_time``:
    the heap trimmed before each call and the result kept past its timing.
    Timed back to back, a result below glibc's mmap threshold landed in its
    predecessor's pages and one above it counted its own unmapping."""
    from zorch_nb import _bench_gkr, bench
    events = []
    monkeypatch.setattr(_bench_gkr, "_malloc_trim", lambda: lambda pad: events.append("trim"))

    def timer(fn, repeat):
        for _ in range(repeat):
            # (_fresh_time's timed call keeps the result, so returns None)
            events.append("kept" if fn() is None else "returned")
        return 1e-3
    n, repeat = 2**12, 4
    rows = [r for r in bench.field_rows(n, "cpu", repeat, np, timer, None)
            if "fresh_out_ms" in r.extra]
    assert len(rows) == 9 and all(r.extra["fresh_out_ms"] == 1.0 for r in rows)
    calls = [e for i, e in enumerate(events) if i and events[i - 1] == "trim"]
    assert calls == ["kept"] * (9 * (repeat // 2))


def test_fresh_time_keeps_each_result_past_its_timing(monkeypatch):
    """Each call after a trim, its result alive when the timer stops and
    freed before the next call."""
    import weakref

    from zorch_nb import _bench_gkr
    events, refs = [], []
    monkeypatch.setattr(_bench_gkr, "_malloc_trim",
                        lambda: lambda pad: events.append(("trim", _alive(refs))))

    def build():
        x = np.ones(1 << 20, np.uint32)
        refs.append(weakref.ref(x))
        return x

    def timer(fn, repeat):
        fn()
        events.append(("stop", _alive(refs)))
        return 1e-3
    _bench_gkr._fresh_time(build, 3, timer)
    assert events == [("trim", 0), ("stop", 1)] * 3


def _alive(refs):
    return sum(r() is not None for r in refs)


def test_gkr_rows_count_compulsory_bytes_and_their_notes(monkeypatch):
    """The LogUp-GKR rows' bytes (the fraction of copy the targets judge), the
    paired fraction from the alternate timing, the dispatch in microseconds and
    the peak memory (first layer included) of both dense pyramids."""
    from zorch_nb import _bench_gkr, bench
    from zorch_nb.logup_gkr import JaggedGkrLayer, halving_schedule
    monkeypatch.setattr(bench, "MIN_FRACTION_LOG2", 4)  # the paired figures at this size
    monkeypatch.setattr(bench, "paired_cpu", lambda fn, nbytes, repeat: (2e-6, 10.0))
    monkeypatch.setattr(_bench_gkr, "_in_cache_gbps", lambda *args: 1.0)
    monkeypatch.setattr(_bench_gkr, "_galois_field", lambda: None)  # (its JIT takes seconds)
    monkeypatch.setattr(bench, "_dispatch_time", lambda fn, sync, **kw: 12.5e-6)
    n = 2**12
    rows = {r.kernel: r for r in _bench_gkr.rows(n, "cpu", 1, np, _fixed_timer(1e-3), None)}
    b, e = 4, 16  # bytes per base / extension element
    fold = {"base/base": 4 * n * b + 4 * (n // 2) * b,
            "base/ext": 2 * n * b + 2 * n * e + 4 * (n // 2) * e,  # outputs all extension
            "ext/ext": 4 * n * e + 4 * (n // 2) * e}
    for mode, nbytes in fold.items():
        row = rows[f"dense fold {mode}"]
        assert row.bytes == nbytes, mode
        assert row.extra["paired_fraction"] == round(nbytes / 2e-6 / 1e9 / 10.0, 3)
        assert row.extra["paired_copy_gbps"] == 10.0
    counts = _bench_gkr.jagged_counts(n)
    assert counts.sum() == n and len(counts) == 1024
    width = int(sum((int(c) + 1) // 2 for c in counts))
    scan = 2 * 1024 * 4 + 2 * 1024 * 8  # row counts in and out (int32), the prefix (2 x int64)
    assert rows["jagged transition base/base (1024 seg.)"].bytes == 4 * b * (n + width) + scan
    assert rows["jagged transition ext/ext (1024 seg.)"].bytes == 4 * e * (n + width) + scan
    # pyramids: the first layer read once, every later layer (halving to 1 row) written once
    assert rows["dense pyramid base/base (to floor)"].bytes == 4 * b * (2 * n - 1)
    assert rows["dense pyramid base/ext (to floor)"].bytes == 2 * n * (b + e) + 4 * e * (n - 1)
    jagged = JaggedGkrLayer(*_bench_gkr._mles(np, False, True, n), counts)
    widths = [s.width for s in halving_schedule(jagged)]
    assert rows["jagged pyramid base/ext (1024 seg.)"].bytes == \
        2 * n * (b + e) + 4 * e * sum(widths)
    # peak memory, first layer included: the kept layers (base/base halving to
    # 2x the first layer, base/ext's extension layers to 2.6x) and a constant
    # beside them (the layer objects: 16-23 KiB from 2^12 to 2^20 leaves), no
    # temporary as wide as a layer (tracemalloc sees NumPy's allocations)
    for mode, first, kept in (("base/base", 4 * n * b, 4 * b * (n - 1)),
                              ("base/ext", 2 * n * (b + e), 4 * e * (n - 1))):
        peak = rows[f"dense pyramid {mode} (to floor)"].extra
        assert kept <= peak["peak_new_bytes"] <= kept + (32 << 10), mode
        assert peak["peak_total_over_first_layer"] == \
            round((first + peak["peak_new_bytes"]) / first, 3), mode
    dispatch = rows["dispatch: one transition base/base"]
    assert dispatch.time_s == 12.5e-6 and dispatch.extra["us_per_call"] == 12.5


def test_cache_and_l2_resident_rates_count_every_call(monkeypatch):
    """in_cache_gbps / in_l2_gbps: the bytes of every timed fold (the best
    single call of 32 per repeat on the CPU, IN_L2_CALLS replayed from one
    CUDA graph)."""
    import time
    import types

    from zorch_nb import _bench_gkr, bench
    calls = []
    kern = types.SimpleNamespace(fold_dense=lambda *args: calls.append(len(args)))
    asked, real_timer = [], bench._time_cpu
    monkeypatch.setattr(bench, "_time_cpu",
                        lambda fn, repeat: asked.append(repeat) or _fixed_timer(1e-3)(fn, 1))
    # base/base: 4 words in and 2 out per pair of leaves, 24 bytes a leaf
    leaves = 1 << (_bench_gkr.IN_CACHE_BYTES // 24).bit_length() - 1
    assert _bench_gkr._in_cache_gbps(kern, False, False, 3) == \
        pytest.approx(24 * leaves / 1e-3 / 1e9)
    assert len(calls) == 1 + 1 and asked == [32 * 3]
    # A stall every few calls (a busy machine) was in every timing of 32 calls:
    # 0.1 GB/s reported where a call ran at 11.  The best single call is kept.
    monkeypatch.setattr(bench, "_time_cpu", real_timer)
    stalls = iter(range(10**6))
    stalling = types.SimpleNamespace(
        fold_dense=lambda *args: next(stalls) % 4 == 3 and time.sleep(0.02))
    assert _bench_gkr._in_cache_gbps(stalling, False, False, 1) > 24 * leaves / 0.01 / 1e9

    class Stream:
        def __init__(self, non_blocking=False):
            self.captured = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def begin_capture(self):
            self.captured = len(calls)

        def end_capture(self):
            return types.SimpleNamespace(launch=lambda stream: None)

    xp = types.SimpleNamespace(random=np.random.RandomState(0), empty=np.empty,
                               cuda=types.SimpleNamespace(Stream=Stream))
    monkeypatch.setattr(_bench_gkr, "IN_L2_BYTES", 1 << 12)
    monkeypatch.setattr(_bench_gkr, "IN_L2_CALLS", 3)
    calls.clear()
    leaves = 1 << ((1 << 12) // 24).bit_length() - 1  # 128
    got = _bench_gkr._in_l2_gbps(kern, False, False, 1, xp, _fixed_timer(1e-3))
    assert got == pytest.approx(3 * 24 * leaves / 1e-3 / 1e9) and len(calls) == 1 + 3


def test_a_section_guard_records_errors_but_lets_an_interrupt_through():
    """gpu_run.sh ends the bench at its time cap with SIGINT: a guard that caught
    it would carry on measuring past the cap."""
    from zorch_nb.bench import _Guard
    seen = []
    guard = _Guard(seen.append)
    assert guard("broken", lambda: 1 // 0) == [] and seen == [[]]
    assert guard.errors == ["broken: ZeroDivisionError: integer division or modulo by zero"]

    def interrupted():
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        guard("cut", interrupted)
    assert len(guard.errors) == 1


def test_strict_json_turns_every_non_finite_float_into_null():
    from zorch_nb.bench import _strict
    got = _strict({"a": [float("inf"), -float("inf"), float("nan"), 1.5], "b": (2, "x")})
    assert got == {"a": [None, None, None, 1.5], "b": [2, "x"]}
    json.dumps(got, allow_nan=False)


def _scripted_bench(monkeypatch, tmp_path, sizes, copy_times, serial=None, gkr=None):
    """bench.main on fake copies (timed ``copy_times`` in turn, 32 n bytes) and one
    fake kernel row per size (48 n bytes in 4 ms): returns (exit status, report)."""
    import argparse

    from zorch_nb import bench
    from zorch_nb.bench import Row
    times, seen = iter(copy_times), []

    def copy(n, repeat):  # (the first copy compiles: its first call is the long one)
        first = 0.01 if seen else 0.5
        seen.append(n)
        row = Row("copy (Numba streaming, 4n words)", "cpu", 4 * n, next(times), 32 * n, first)
        if serial is not None:
            row.extra["serial_copy_gbps"] = serial
        return row
    monkeypatch.setattr(bench, "cpu_copy_gbps", copy)
    monkeypatch.setattr(bench, "field_rows",
                        lambda n, backend, *args: [Row("kernel", backend, n, 4e-3, 48 * n, 0.1)])
    monkeypatch.setattr(bench, "_gkr_rows", gkr or (lambda *args: []))
    monkeypatch.setattr(bench, "graph_rows", lambda *args: [])
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})
    monkeypatch.setattr(bench, "_memory_problem", lambda sizes: None)
    out = tmp_path / "r.json"
    args = argparse.Namespace(device="cpu", sizes=sizes, repeat=1, json=str(out), plot=None)
    return bench.main(args), json.loads(out.read_text())


def test_a_size_is_judged_against_its_faster_copy_and_flagged_when_copies_differ(
        tmp_path, monkeypatch):
    n = 2**16
    kernel_gbps = 48 * n / 4e-3 / 1e9
    # the second copy twice as fast as the first: kept, and the size flagged busy
    rc, report = _scripted_bench(monkeypatch, tmp_path, [16], [2e-3, 1e-3])
    assert rc == 0
    (copy,) = report["copy"]
    assert copy["time_s"] == 1e-3 and copy["first_call_s"] == 0.5
    assert copy["gbps"] == pytest.approx(32 * n / 1e-3 / 1e9)
    (row,) = report["results"]
    assert row["gbps"] == pytest.approx(kernel_gbps)
    assert row["fraction_of_copy"] == pytest.approx(kernel_gbps / (32 * n / 1e-3 / 1e9))
    for r in (copy, row):
        assert "before the kernels and" in r["extra"]["implausible"]
    # the first copy the faster, within 1.5x of the second: no flag
    rc, report = _scripted_bench(monkeypatch, tmp_path, [16], [1e-3, 1.4e-3], serial=2.6)
    (copy,), (row,) = report["copy"], report["results"]
    assert copy["time_s"] == 1e-3
    assert row["fraction_of_copy"] == pytest.approx(kernel_gbps / (32 * n / 1e-3 / 1e9))
    assert "implausible" not in row["extra"] and "implausible" not in copy["extra"]
    # one thread's copy more than 1.25x the parallel one's: flagged
    rc, report = _scripted_bench(monkeypatch, tmp_path, [16], [1e-3, 1.4e-3], serial=2.7)
    (row,) = report["results"]
    assert "slower than one thread's" in row["extra"]["implausible"]


def test_a_small_size_is_flagged_when_its_copies_differ(tmp_path, monkeypatch):
    """Below 2^16 rows report times only, and no check ran: a stall that made
    one copy 60x slower left the size's times in the report unmarked.  Its two
    copies are compared there too; one thread's faster copy is no verdict
    (a small parallel copy is launch-bound by design)."""
    rc, report = _scripted_bench(monkeypatch, tmp_path, [10], [8e-3, 1e-4], serial=100.0)
    (copy,), (row,) = report["copy"], report["results"]
    assert row["fraction_of_copy"] is None
    for r in (copy, row):
        assert "before the kernels and" in r["extra"]["implausible"]
    rc, report = _scripted_bench(monkeypatch, tmp_path, [10], [1e-4, 1.2e-4], serial=100.0)
    (copy,), (row,) = report["copy"], report["results"]
    assert "implausible" not in row["extra"] and "implausible" not in copy["extra"]


@pytest.mark.parametrize("lg", [8, 16])
def test_an_interrupted_size_is_never_judged(tmp_path, monkeypatch, lg):
    """Cut before its second copy, a size's rows keep their fraction of the first
    copy (sizes of at least 2^16 only) and a note that busy() did not check it;
    targets.py lists such a row as unreliable."""
    def stop(*args):
        raise KeyboardInterrupt
    rc, report = _scripted_bench(monkeypatch, tmp_path, [lg], [1e-3], gkr=stop)
    assert rc == 130
    (row,) = report["results"]
    n = 2**lg
    if lg >= 16:
        assert row["fraction_of_copy"] == pytest.approx((48 * n / 4e-3) / (32 * n / 1e-3))
        assert row["extra"]["implausible"].startswith("not checked: interrupted")
    else:
        assert row["fraction_of_copy"] is None and row["gbps"] is None
        assert "implausible" not in row["extra"]


#: The issue's targets, fractions of the copy: (CuPy, Numba-CUDA)
_GPU_GOALS = {"dense fold base/base": (0.90, 0.85), "dense fold base/ext": (0.90, 0.85),
              "dense fold ext/ext": (0.90, 0.85),
              "jagged transition base/base (1024 seg.)": (0.75, 0.70),
              "jagged transition ext/ext (1024 seg.)": (0.75, 0.70),
              "dense pyramid base/base (to floor)": (0.80, 0.65),
              "dense pyramid base/ext (to floor)": (0.80, 0.65),
              "jagged pyramid base/ext (1024 seg.)": (0.65, 0.55)}


def _result(kernel, backend, lg, fraction=None, time_s=1e-3, **extra):
    return {"kernel": kernel, "backend": backend, "size": 2**lg, "time_s": time_s,
            "fraction_of_copy": fraction, "gbps": None, "baselines": extra.pop("baselines", {}),
            "extra": extra}


def _target_lines(text):
    """targets()'s table: (what, backend, size) -> [(measured, target, mark), ...]."""
    got = {}
    for ln in text.splitlines()[2:]:
        if ln.startswith("| "):
            what, backend, size, measured, goal, mark = [
                c.strip() for c in ln.strip("|").split("|")]
            got.setdefault((what, backend, size), []).append((measured, goal, mark))
    return got


def test_targets_judge_every_gpu_row_at_the_issues_thresholds():
    """A fraction exactly at its target meets it, 0.01 below misses it, for each
    kernel on each GPU backend; dispatch under 15 us on CuPy only; peak memory
    within 10% of ~2x (base/base) and ~2.6x (base/ext) the first layer."""
    results = []
    for kernel, goals in _GPU_GOALS.items():
        for backend, goal in zip(("cupy", "numba"), goals):
            peak = {}
            if kernel.startswith("dense pyramid"):
                limit = 2.0 if "base/base" in kernel else 2.6
                peak = [dict(peak_total_over_first_layer=round(limit * 1.1 - d, 2))
                        for d in (0.01, -0.01)]
            results.append(_result(kernel, backend, 26, goal, **(peak[0] if peak else {})))
            results.append(_result(kernel, backend, 25, round(goal - 0.01, 2),
                                   **(peak[1] if peak else {})))
            results.append(_result(kernel, backend, 11))  # launch-bound: no fraction
    results += [_result("dispatch: one transition base/base", "cupy", 10, us_per_call=14.99),
                _result("dispatch: one transition base/base", "cupy", 9, us_per_call=15.0),
                _result("dispatch: one transition base/base", "numba", 10, us_per_call=40.0),
                _result("dispatch: base mul of 8 elements", "cupy", 3, us_per_call=20.0)]
    lines = _target_lines(_script("targets").targets({"results": results}))
    for kernel, goals in _GPU_GOALS.items():
        for backend, goal in zip(("cupy", "numba"), goals):
            what = f"{kernel} (of copy)"
            assert lines[what, backend, "2^26"] == [(f"{goal:.2f}", f">= {goal:.2f}", "met")]
            assert lines[what, backend, "2^25"] == [
                (f"{goal - 0.01:.2f}", f">= {goal:.2f}", "**missed**")]
            assert lines[what, backend, "2^11"] == [
                ("no fraction at this size (launch-bound)", f">= {goal:.2f}", "no figure")]
            if kernel.startswith("dense pyramid"):
                limit = 2.0 if "base/base" in kernel else 2.6
                what = f"{kernel}: peak memory / first layer"
                assert lines[what, backend, "2^26"][0][1:] == (f"~{limit}", "met")
                assert lines[what, backend, "2^25"][0][1:] == (f"~{limit}", "**missed**")
    dispatch = "dispatch: one transition base/base"
    assert lines[dispatch, "cupy", "2^10"] == [("15.0 us", "< 15 us", "met")]  # 14.99
    assert lines[dispatch, "cupy", "2^9"] == [("15.0 us", "< 15 us", "**missed**")]
    assert lines[dispatch, "numba", "2^10"] == [("40.0 us", "(none)", "")]
    assert lines["dispatch: base mul of 8 elements", "cupy", "2^3"] == [("20.0 us", "(none)", "")]
    assert sum(map(len, lines.values())) == len(_GPU_GOALS) * 2 * 3 + 2 * 2 * 2 + 4


def test_targets_judge_the_cpu_folds_and_exit_on_a_row_without_figure(tmp_path):
    """CPU: the paired fraction against 0.7, the galois speed-up against 10x at
    sizes of at least 2^16; the script exits 1 on a row with no figure."""
    results = [_result("dense fold base/base", "cpu", 16, paired_fraction=0.7,
                       baselines={"galois GF(p)": 0.02}),
               # judged allocating, as galois runs (into out= it looked 20x)
               _result("dense fold base/base", "cpu", 17, paired_fraction=0.7,
                       baselines={"galois GF(p)": 0.02}, alloc_out_ms=2.01),
               _result("dense fold base/base", "cpu", 18, paired_fraction=0.7,
                       baselines={"galois GF(p)": 0.02}, alloc_out_ms=2.0),
               _result("dense fold base/base", "cpu", 15, paired_fraction=0.69,
                       baselines={"galois GF(p)": 0.02}),
               _result("dense fold base/ext", "cpu", 16, paired_fraction=0.9, time_s=2e-3,
                       baselines={"galois GF(p)": 0.0196})]
    lines = _target_lines(_script("targets").targets({"results": results}))
    assert lines["dense fold base/base, of copy (paired)", "cpu", "2^16"] == [
        ("0.70", ">= 0.7", "met")]
    assert lines["dense fold base/base, of copy (paired)", "cpu", "2^15"] == [
        ("0.69", ">= 0.7", "**missed**")]
    assert lines["dense fold base/base, vs galois", "cpu", "2^16"] == [
        ("20.0x into out=", ">= 10x", "met")]  # (a report from before alloc_out_ms)
    assert lines["dense fold base/base, vs galois", "cpu", "2^17"] == [
        ("10.0x allocating (20.0x into out=)", ">= 10x", "**missed**")]  # (9.95x)
    assert lines["dense fold base/base, vs galois", "cpu", "2^18"] == [
        ("10.0x allocating (20.0x into out=)", ">= 10x", "met")]
    assert ("dense fold base/base, vs galois", "cpu", "2^15") not in lines  # launch-bound
    assert lines["dense fold base/ext, vs galois", "cpu", "2^16"] == [
        ("9.8x into out=", ">= 10x", "**missed**")]
    # without galois the target has no figure (its rows were left out: the
    # script met every target it listed and exited 0); above 1.5x the copy
    # (the bench's `!`) a fraction is unreliable, not met
    unsure = "**unreliable** (above 1.5x the copy: a cache the copy's data did not fit, " \
             "or a busy copy)"
    missing = "not importable: pip install 'zorch_nb[bench]'"  # (what the bench writes)
    results = [_result("dense fold base/base", "cpu", 16, paired_fraction=0.9, galois=missing),
               _result("dense fold base/base", "cpu", 15, paired_fraction=0.9, galois=missing),
               _result("dense fold ext/ext", "cpu", 16, paired_fraction=1.51),
               _result("dense fold ext/ext", "cpu", 15, paired_fraction=1.5),
               _result("dense fold ext/ext", "cupy", 26, 1.51)]
    lines = _target_lines(_script("targets").targets({"results": results}))
    assert lines["dense fold base/base, vs galois", "cpu", "2^16"] == [
        (f"not measured: {missing}", ">= 10x", "no figure")]
    assert ("dense fold base/base, vs galois", "cpu", "2^15") not in lines  # launch-bound
    assert ("dense fold ext/ext, vs galois", "cpu", "2^16") not in lines  # (no galois field)
    assert lines["dense fold ext/ext, of copy (paired)", "cpu", "2^16"] == [
        ("1.51", ">= 0.7", unsure)]
    assert lines["dense fold ext/ext, of copy (paired)", "cpu", "2^15"] == [
        ("1.50", ">= 0.7", "met")]
    assert lines["dense fold ext/ext (of copy)", "cupy", "2^26"] == [("1.51", ">= 0.90", unsure)]
    from zorch_nb import bench
    assert _script("targets").SUSPECT_FRACTION == bench.SUSPECT_FRACTION
    path = tmp_path / "r.json"
    report = {"date": "d", "device": "gpu", "command": "c", "copy": [],
              "results": [_result("dense fold base/base", "cupy", 26, 0.95)]}
    path.write_text(json.dumps(report))
    script = [sys.executable, str(BENCHMARKS / "targets.py"), str(path)]
    assert subprocess.run(script, capture_output=True, text=True).returncode == 0
    report["results"].append(_result("dense fold base/ext", "cupy", 11))  # no fraction
    path.write_text(json.dumps(report))
    res = subprocess.run(script, capture_output=True, text=True)
    assert res.returncode == 1 and "no figure" in res.stdout


@pytest.mark.parametrize("name", ["targets", "readme_table"])
def test_report_scripts_end_quietly_where_their_output_cannot_be_written(name):
    """A reader gone (``| head``) gave a BrokenPipeError traceback and exit 1,
    the status of a missed target; ``> /dev/full`` a traceback too."""
    report = str(pathlib.Path(__file__).parents[1] / "benchmarks" / "results"
                 / "cpu-2026-12-06-1511.json")
    script = [sys.executable, str(BENCHMARKS / f"{name}.py"), report]
    r, w = os.pipe()
    os.close(r)  # (the reader is gone before the first write)
    try:
        res = subprocess.run(script, stdout=w, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(w)
    assert (res.returncode, res.stderr) == (141, "")
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            res = subprocess.run(script, stdout=full, stderr=subprocess.PIPE, text=True)
        assert res.returncode == 2
        assert res.stderr == "cannot write the table: [Errno 28] No space left on device\n"


def test_readme_table_columns():
    report = {"date": "2025-01-02T03:04:05+00:00", "device": "H200", "command": "bench",
              "copy": [{"kernel": "copy (device to device, 4n words)", "backend": "cupy",
                        "size": 2**28, "time_s": 2e-3, "gbps": 4000.0}],
              "results": [
                  dict(_result("dense fold base/base", "cupy", 26, 0.456, time_s=4e-3,
                               paired_fraction=0.789, baselines={"numpy uint64": 0.1}),
                       gbps=1234.56),
                  dict(_result("dispatch: one transition base/base", "cupy", 10,
                               time_s=1.5e-5, us_per_call=15.0), gbps=None)]}
    # a flagged size is marked and footnoted; a slowdown keeps 2 digits ("0.0x" before)
    flagged = dict(_result("jagged pyramid base/ext", "cpu", 20, 0.02, time_s=0.1,
                           baselines={"numpy uint64": 0.0025}, implausible="busy"), gbps=0.9)
    lines = _script("readme_table").table(dict(report, results=[flagged]), "r.json").splitlines()
    assert lines[5] == ("| jagged pyramid base/ext | cpu | 2^20 | 100.000 ms ? | 0.9 | 0.02 |  | "
                        "numpy uint64 0.025x |")
    assert lines[-1].startswith("`?`: the bench flagged this size as measured while another")
    lines = _script("readme_table").table(report, "r.json").splitlines()
    assert lines[0] == "Measured 2025-01-02 on H200 with `bench` (the report: `r.json`)."
    assert lines[2] == ("| kernel | backend | elements | time | GB/s | of copy | of copy, paired "
                        "| speedup vs baselines |")
    assert lines[4:] == [
        "| copy (device to device, 4n words) | cupy | 2^28 | 2.000 ms | 4000.0 | 1.00 | | |",
        "| dense fold base/base | cupy | 2^26 | 4.000 ms | 1234.6 | 0.46 | 0.79 | "
        "numpy uint64 25.0x |",
        "| dispatch: one transition base/base | cupy | 2^10 | 0.015 ms |  |  |  |  |"]


def test_plot_report_draws_against_the_last_copy():
    from zorch_nb.bench import Row
    copy = {"kernel": "copy", "backend": "cupy", "time_s": 1.0, "bytes": 8}
    report = {"copy": [dict(copy, size=2**18, gbps=10.0), dict(copy, size=2**28, gbps=20.0)],
              "results": [{"kernel": "k", "backend": "cupy", "size": 2**26, "time_s": 1.0,
                           "bytes": 8, "gbps": 8e-9, "fraction_of_copy": 0.5}]}
    rows, last = _script("plot_report").rows_of(report)
    assert isinstance(last, Row) and (last.size, last.gbps) == (2**28, 20.0)
    assert [(r.kernel, r.fraction_of_copy) for r in rows] == [("k", 0.5)]


def test_plot_report_checks_its_chart_and_marks_busy_rows(tmp_path, capsys, monkeypatch):
    """plot_report.py skipped the bench's checks of --plot (a .txt name gave
    matplotlib's traceback, a folder wrote a hidden '.png', a report of small
    sizes an empty chart and exit 0), and both charts drew flagged rows like
    the rest, with the last size's copy as the only speed named."""
    pytest.importorskip("matplotlib")
    from zorch_nb import bench
    script = _script("plot_report")
    copy = {"kernel": "copy", "backend": "cpu", "time_s": 1.0, "bytes": 8}
    row = {"kernel": "k", "backend": "cpu", "size": 2**16, "time_s": 1.0, "bytes": 8,
           "gbps": 8e-9, "fraction_of_copy": 0.5}
    report = {"date": "2026-12-05", "device": "cpu", "command": "bench",
              "copy": [dict(copy, size=2**18, gbps=10.0), dict(copy, size=2**20, gbps=20.0)],
              "results": [row, dict(row, kernel="flagged", extra={"implausible": "busy"})]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    for chart, says in [("c.txt", "must end in one of"), ("", "is a directory"),
                        ("no/c.png", "does not exist")]:
        assert script.main(["plot_report.py", str(path), str(tmp_path / chart)]) == 2
        assert says in capsys.readouterr().err
    small = tmp_path / "s.json"
    small.write_text(json.dumps(dict(report, results=[dict(row, fraction_of_copy=None)])))
    assert script.main(["plot_report.py", str(small), str(tmp_path / "c.png")]) == 2
    assert "nothing to draw" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "s.json"]
    drawn = {}
    real = bench.plot

    def spy(rows, copies, out, title):
        import matplotlib.pyplot as plt
        real(rows, copies, out, title)
        ax = plt.gcf().axes[0]
        drawn.update(hatches=[b.get_hatch() for b in ax.patches], xlabel=ax.get_xlabel())
    monkeypatch.setattr(script, "plot", spy)
    assert script.main(["plot_report.py", str(path), str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0
    assert drawn["hatches"] == [None, "//"] and "(10-20 GB/s across the sizes)" in drawn["xlabel"]

    def full_disk(*args):  # (a traceback before)
        raise OSError(28, "No space left on device", "c.png")
    monkeypatch.setattr(script, "plot", full_disk)
    assert script.main(["plot_report.py", str(path), str(tmp_path / "c.png")]) == 2
    assert "not written: [Errno 28] No space left on device" in capsys.readouterr().err


def test_plot_draws_busy_rows_grey_with_a_legend_and_one_copy_speed(tmp_path):
    """A flagged row is grey and hatched and the legend says why, also in a
    chart with no paired row (the legend was drawn for paired rows only);
    copy speeds that round alike are named once, not as a range."""
    pytest.importorskip("matplotlib")
    import matplotlib.colors
    import matplotlib.pyplot as plt

    from zorch_nb.bench import Row, plot
    copies = [Row("copy", "cpu", 4 * 2**16, 1.0, 8, gbps=10.2),
              Row("copy", "cpu", 4 * 2**18, 1.0, 8, gbps=9.9)]
    rows = [Row("k", "cpu", 2**16, 1.0, 8, fraction_of_copy=0.5),
            Row("k", "cpu", 2**18, 1.0, 8, fraction_of_copy=0.4, extra={"implausible": "busy"})]
    plot(rows, copies, str(tmp_path / "c.png"), "t")
    ax = plt.gcf().axes[0]
    colours = [matplotlib.colors.to_hex(b.get_facecolor()) for b in ax.patches]
    assert colours == [matplotlib.colors.to_hex("tab:blue"), matplotlib.colors.to_hex("tab:gray")]
    assert [b.get_hatch() for b in ax.patches] == [None, "//"]
    legend = ax.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == [
        "measured beside a busy process: not reliable"]
    (handle,) = getattr(legend, "legend_handles", None) or legend.legendHandles
    assert matplotlib.colors.to_hex(handle.get_facecolor()) == colours[1]  # a flagged bar's
    assert ax.get_xlabel().endswith("in the same run (10 GB/s)")
    plt.close(ax.figure)


def test_cpu_caches_and_load_average_of_the_report(monkeypatch):
    """The report's ``cpu_caches`` lists CPU 0's ``index*`` folders only (sysfs
    puts a ``uevent`` file beside them, whose level cannot be read: taking it
    lost every cache) and ``load_average`` is the 1-minute figure, rounded."""
    import os

    from zorch_nb import bench
    root = "/sys/devices/system/cpu/cpu0/cache"
    if os.path.isdir(root):
        names = sorted(n for n in os.listdir(root) if n.startswith("index"))
        want = []
        for n in names:
            with open(os.path.join(root, n, "level")) as fh:
                want.append(fh.read().strip())
        assert [c["level"] for c in bench._cpu_caches()] == want and (want or not names)
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (1.234, 5.0, 6.0))
    assert bench._load_average() == 1.23
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (_ for _ in ()).throw(OSError()))
    assert bench._load_average() is None


def test_readme_table_marks_a_flagged_copy_and_plot_report_draws_a_mixed_report(tmp_path):
    """The flag mark is on a flagged size's copy row too (the bench flags the
    copy with its rows), and plot_report.py draws a report where only some
    rows have a fraction of the copy (a small size beside a large one)."""
    copy = {"kernel": "copy", "backend": "cpu", "size": 2**18, "time_s": 2e-3, "gbps": 4.0,
            "bytes": 8, "extra": {"implausible": "busy"}}
    lines = _script("readme_table").table(
        {"date": "2025-01-02", "device": "cpu", "command": "bench", "copy": [copy],
         "results": []}).splitlines()
    assert lines[4] == "| copy | cpu | 2^18 | 2.000 ms ? | 4.0 | 1.00 | | |"
    assert lines[-1].startswith("`?`: the bench flagged this size")
    pytest.importorskip("matplotlib")
    row = {"kernel": "k", "backend": "cpu", "size": 2**16, "time_s": 1.0, "bytes": 8,
           "gbps": 8e-9, "fraction_of_copy": 0.5}
    report = {"date": "2025-01-02", "device": "cpu", "command": "bench",
              "copy": [dict(copy, extra={})],
              "results": [row, dict(row, size=2**10, gbps=None, fraction_of_copy=None)]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert _script("plot_report").main(["plot_report.py", str(path), str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0



@pytest.mark.parametrize("jagged", [False, True])
def test_cpu_pyramid_rows_time_fresh_pages_and_reuse_alike(monkeypatch, jagged):
    """A user review: ``reused_out_ms`` read 24.4 ms beside a main time of 14.2
    ms.  Both came from repeat // 2 calls, and the main time's "fresh" calls
    mostly landed on the pages of the pyramid freed just before (glibc keeps
    them).  Now both are the best of ``repeat`` calls, and each fresh call
    starts with no earlier pyramid alive and the C heap trimmed (malloc_trim),
    and is timed before its pyramid is freed."""
    import weakref

    from zorch_nb import _bench_gkr
    events, pyramids = [], []  # weak references to each fresh pyramid's buffers

    def alive():
        return sum(any(r() is not None for r in refs) for refs in pyramids)

    def spy(real):
        def build(*args, out=None, **kwargs):
            layers = real(*args, out=out, **kwargs)
            if out is None:
                pyramids.append([weakref.ref(x if x.base is None else x.base)
                                 for la in layers[1:] for x in la.mles])
            events.append("build" if out is None else "into out")
            return layers
        return build
    for name in ("build_pyramid", "build_jagged_pyramid"):
        monkeypatch.setattr(_bench_gkr, name, spy(getattr(_bench_gkr, name)))
    monkeypatch.setattr(_bench_gkr, "_malloc_trim",
                        lambda: lambda pad: events.append(("trim", alive())), raising=False)

    def timer(fn, repeat):
        for _ in range(repeat):
            fn()
            events.append(("stop", alive()))
        return 1e-3
    n, repeat = 2**12, 3
    if jagged:
        (row,) = _bench_gkr._jagged_pyramid_row(n, "cpu", repeat, np, timer, None)
    else:
        (row,) = _bench_gkr._dense_pyramid_row("base/ext", n, "cpu", repeat, np, timer, None)
    # the first call (compiles; its pyramid is the one overwritten), the
    # pyramid into it (its first call untimed: it compiles what takes `out`;
    # with --repeat 1 the figure was 722 ms beside 0.17), fresh pyramids,
    # the peak memory's (dense rows)
    assert events == (["build", "into out"] + ["into out", ("stop", 1)] * repeat
                      + [("trim", 0), "build", ("stop", 1)] * repeat + ["build"] * (not jagged))
    assert row.samples == repeat and row.time_s == 1e-3 and row.extra["reused_out_ms"] == 1.0


def test_fresh_time_is_the_best_of_its_calls(monkeypatch):
    """The fresh time keeps the bench's statistic: the best of the calls, with
    their median and slowest (the table's unsteadiness mark reads them)."""
    from zorch_nb import _bench_gkr
    times = iter([3e-3, 1e-3, 2e-3, 9e-3])
    t = _bench_gkr._fresh_time(lambda: [], 4, lambda fn, repeat: fn() or next(times))
    assert (float(t), t.median, t.worst, t.samples) == (1e-3, 2.5e-3, 9e-3, 4)


@pytest.mark.parametrize("lg", [3, 9, 10, 11])
def test_tiny_jagged_rows_name_their_segments_and_have_no_pyramid(monkeypatch, capsys, lg):
    """A user review: at 2^3 rows the jagged rows said "1024 seg." (1016 of
    them were empty) and a one-layer "pyramid" was printed (its one step wrote
    1024 neutral rows from 8), though the code's note said n <= 1024 has none.
    Below 1024 rows each row is a segment: the label says how many, and such a
    layer is its own floor (no pyramid row, the note)."""
    from zorch_nb import _backend, _bench_gkr
    n = 2**lg
    segments = min(n, 1024)
    kern = _backend.kernels_for("cpu", "gkr")
    monkeypatch.setattr(_bench_gkr, "_numpy_baseline", lambda *args: None)
    rows = _bench_gkr._jagged_rows(kern, n, "cpu", 1, np, _fixed_timer(1e-3), None)
    assert [r.kernel for r in rows] == [f"jagged transition {m} ({segments} seg.)"
                                        for m in ("base/base", "ext/ext")]
    counts = _bench_gkr.jagged_counts(n, segments)
    assert counts.sum() == n and counts.min() >= 1
    scan = 2 * segments * 4 + 2 * segments * 8  # counts in and out, the prefix
    width = int(((counts + 1) // 2).sum())
    assert rows[0].bytes == 4 * 4 * (n + width) + scan
    pyramid = _bench_gkr._jagged_pyramid_row(n, "cpu", 1, np, _fixed_timer(1e-3), None)
    if n <= 1024:
        assert pyramid == []
        assert (f"(no jagged pyramid at 2^{lg}: {n} segments over {n} rows are their own "
                f"floor)") in capsys.readouterr().out
    else:
        assert [r.kernel for r in pyramid] == ["jagged pyramid base/ext (1024 seg.)"]


def test_jagged_counts_are_never_empty_where_the_rows_suffice():
    """The clamp to one row a segment overshot and the largest count paid for
    it: 24 rows over 24 segments gave a 0 beside a 2 (only a negative count
    was caught), which would have made a "pyramid" of one-row segments."""
    from zorch_nb._bench_gkr import jagged_counts
    for total, segments in [(24, 24), (9, 9), (25, 24), (2**12, 1024)]:
        counts = jagged_counts(total, segments)
        assert counts.sum() == total and counts.min() >= 1, (total, segments)
    assert list(jagged_counts(3, 5)) == [1, 1, 1, 0, 0]  # too few rows: empty ones last

def test_a_dense_folds_first_call_compiles_before_the_timed_calls(monkeypatch):
    """The first call (compile or cache load) is the row's first_call_s and comes
    before the timer, so the steady-state time never holds it."""
    import time
    import types

    from zorch_nb import _bench_gkr
    monkeypatch.setattr(_bench_gkr, "_galois_field", lambda: None)
    calls, seen_by_timer = [], []

    def fold_dense(*args):
        calls.append(len(args))
        if len(calls) == 1:
            time.sleep(0.05)  # "compiling"

    def timer(fn, repeat):
        seen_by_timer.append(len(calls))
        fn()
        return 1e-3
    kern = types.SimpleNamespace(fold_dense=fold_dense)
    (row,) = _bench_gkr._dense_fold_row(kern, "base/base", False, False, 16, "cpu", 1, np,
                                        timer, None)
    assert seen_by_timer[0] == 1 and row.first_call_s >= 0.05 and row.time_s == 1e-3
    # then the same fold allocating its outputs (the galois target's figure)
    assert len(seen_by_timer) == 2 and row.extra["alloc_out_ms"] == 1.0


def test_report_scripts_refuse_rows_they_cannot_read(tmp_path, capsys):
    """A report with broken rows gave each script a traceback (KeyError,
    ZeroDivisionError, TypeError) and exit 1, targets.py's status of a missed
    target; now one line naming the row and 2.  Keys a later bench adds to a
    row are left out by plot_report.py (its Row took them as arguments)."""
    good = {"date": "d", "device": "cpu", "command": "c", "schema": 1,
            "copy": [{"kernel": "copy", "backend": "cpu", "size": 2**16, "time_s": 1e-3,
                      "gbps": 1.0}],
            "results": [_result("dense fold base/base", "cpu", 16, 0.8)]}
    broken = [({"results": None}, "results is NoneType, not a list of rows"),
              ({"copy": [3]}, "copy[0] is int, not a row"),
              ({"date": None}, "date is None, not a string"),
              ({"schema": 2}, "schema 2; these scripts read schema 1 to 1: update the "
                              "checkout"),
              ({"results": [{"kernel": "k", "backend": "cpu", "size": 16}]},
               "results[0] lacks time_s"),
              ({"results": [_result("k", "cpu", 4, time_s=0)]},
               "results[0]: time_s must be a positive number, not 0"),
              ({"results": [dict(_result("k", "cpu", 4), size=2.5)]},
               "results[0]: size must be a positive integer, not 2.5"),
              ({"results": [dict(_result("k", "cpu", 4), gbps="fast")]},
               "results[0]: gbps must be a number or null, not 'fast'"),
              ({"results": [_result("k", "cpu", 4, baselines={"numpy": None})]},
               "results[0]: baselines['numpy'] must be a positive number of seconds")]
    path = tmp_path / "r.json"
    load_report = _script("targets").load_report  # (the three scripts' reader)
    for change, says in broken:
        path.write_text(json.dumps(dict(good, **change)))
        with pytest.raises(SystemExit) as stop:
            load_report(["targets.py", str(path)], "")
        assert stop.value.code == 2
        assert capsys.readouterr().err == (
            f"{str(path)!r} is not a zorch_nb bench report ({says})\n")
    for name in ("targets", "readme_table", "plot_report"):  # each script, as a user runs it
        res = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), str(path),
                              *([str(tmp_path / "c.png")] if name == "plot_report" else [])],
                             capture_output=True, text=True)
        assert (res.returncode, res.stderr) == (
            2, f"{str(path)!r} is not a zorch_nb bench report ({says})\n"), name
    # optional figures absent or null: a table, not a KeyError / TypeError
    row = {"kernel": "k", "backend": "cpu", "size": 2**16, "time_s": 1e-3, "later_key": 1}
    report = dict(good, copy=[dict(good["copy"][0], gbps=None)], results=[row])
    path.write_text(json.dumps(report))
    res = subprocess.run([sys.executable, str(BENCHMARKS / "readme_table.py"), str(path)],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "| copy | cpu | 2^16 | 1.000 ms | | | |" in res.stdout
    rows, _ = _script("plot_report").rows_of(report)
    assert (rows[0].kernel, rows[0].bytes) == ("k", 0)


def test_readme_table_and_chart_leave_out_launch_bound_copy_rates():
    """The bench's table hides a launch-bound size's copy rate; the README
    table printed it ("0.0 GB/s | 1.00"), and the chart's axis counted it.
    The row keeps the header's 8 cells (it had 7)."""
    copy = {"kernel": "copy", "backend": "cpu", "time_s": 1e-3, "bytes": 8}
    report = {"date": "d", "device": "cpu", "command": "c", "results": [],
              "copy": [dict(copy, size=2**10, gbps=0.01), dict(copy, size=2**16, gbps=9.0)]}
    lines = _script("readme_table").table(report).splitlines()
    assert lines[4] == "| copy | cpu | 2^10 | 1.000 ms | | | | |"
    assert lines[5] == "| copy | cpu | 2^16 | 1.000 ms | 9.0 | 1.00 | | |"
    assert {ln.count("|") for ln in lines[2:6]} == {9}


def test_table_footnotes_only_the_marks_it_shows():
    """A row above 1.5x the copy and flagged implausible shows ``?``; the ``!``
    footnote came too, with no ``!`` in the table."""
    from zorch_nb.bench import Row, _table
    copy = Row("copy", "cpu", 2**20, 1e-3, 8 << 20).finish(8.0)
    both = Row("dense fold base/base", "cpu", 2**20, 1e-4, 24 << 20).finish(8.0)
    both.extra["implausible"] = "another process was busy"
    text = _table([both], copy)
    assert "? figures no idle machine gives" in text and "! above" not in text
    del both.extra["implausible"]
    assert "! above 1.5x the copy" in _table([both], copy)


def test_a_chart_not_written_is_in_the_report(tmp_path, monkeypatch, capsys):
    """The report was written before the chart, so a chart that failed (a
    full disk) was missing from its ``errors`` though the run exited 1."""
    from zorch_nb import __main__ as cli
    from zorch_nb import bench
    row = bench.Row("dense fold base/base", "cpu", 2**16, 1e-3, 24 << 16)
    monkeypatch.setattr(bench, "field_rows", lambda *a: [])
    monkeypatch.setattr(bench, "graph_rows", lambda *a: [])
    monkeypatch.setattr(bench, "_gkr_rows", lambda *a: [row])

    def disk_full(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(bench, "plot", disk_full)
    monkeypatch.setattr(bench, "_plot_problem", lambda path: None)  # (matplotlib or not)
    out = tmp_path / "r.json"
    assert cli.main(["bench", "--sizes", "16", "--repeat", "1", "--json", str(out),
                     "--plot", str(tmp_path / "c.png")]) == 1
    errors = json.loads(out.read_text())["errors"]
    assert errors == [f"--plot {str(tmp_path / 'c.png')!r} not written: [Errno 28] No space "
                      f"left on device"], errors
