"""``python -m zorch_nb bench --device gpu`` end to end on emulated CuPy.

GPU time is scarce, so the GPU branch of the bench must not first show a bug
on the GPU machine.  Here it runs at a tiny size over the host emulation of
the CUDA C kernels (``cuda_emu.py``): every CuPy row, the report and its
JSON.  Timings mean nothing here (host clock, emulated kernels)."""
import argparse
import json
import sys

import cuda_emu
from test_bench import BENCHMARKS, _script


def test_gpu_bench_runs_on_emulated_cupy(tmp_path, monkeypatch):
    # everything the session fakes touch is restored after the test
    for name in ("cupy", "cupyx", "zorch_nb.kernels.gkr_cupy", "zorch_nb.kernels.field_cupy",
                 "zorch_nb.kernels.graph_cupy"):
        if name in sys.modules:
            monkeypatch.setitem(sys.modules, name, sys.modules[name])
        else:
            monkeypatch.setitem(sys.modules, name, None)
            monkeypatch.delitem(sys.modules, name)
    try:
        from zorch_nb.kernels import field_cuda_numba, gkr_cuda_numba
        for mod in (field_cuda_numba, gkr_cuda_numba):
            monkeypatch.setattr(mod, "as_device", mod.as_device)
    except ImportError:
        pass
    cuda_emu.install_session_fakes()
    from zorch_nb import _bench_gkr, bench
    # the second-process figure imports the real CuPy in a child: not here
    monkeypatch.setattr(bench, "second_process", lambda backend, xp: {"backend": backend})
    # the L2-resident folds (CUDA-graph replay) at a size the emulation runs quickly
    monkeypatch.setattr(_bench_gkr, "IN_L2_BYTES", 1 << 12)
    monkeypatch.setattr(_bench_gkr, "IN_L2_CALLS", 2)
    out = tmp_path / "gpu.json"
    args = argparse.Namespace(device="gpu", sizes=[11], repeat=1, json=str(out), plot=None,
                              backends=["cupy", "cupy"])  # (measured twice, was)
    assert bench.main(args) == 0
    report = json.loads(out.read_text())
    assert report["errors"] == [] and report["device"].startswith("host emulation")
    kernels = {r["kernel"] for r in report["results"]}
    assert len(kernels) == len(report["results"])
    for name in ("base mul (KoalaBear)", "ext4 mul by one element (KoalaBear)",
                 "base x ext4 mul (KoalaBear)", "base inv (KoalaBear)", "ext4 inv (KoalaBear)",
                 "encode int64 (KoalaBear)", "decode (KoalaBear)", "dense fold base/base", "dense fold ext/ext",
                 "jagged transition ext/ext (1024 seg.)", "dense pyramid base/ext (to floor)",
                 "jagged pyramid base/ext (1024 seg.)", "dispatch: one transition base/base"):
        assert name in kernels
    rows = {r["kernel"]: r for r in report["results"]}
    for name in ("encode int64 (KoalaBear)", "decode (KoalaBear)"):  # against CuPy's ops
        assert rows[name]["baselines"]["cupy uint64"] > 0
    assert rows["dense pyramid base/base (to floor)"]["extra"]["launches"] == 1
    parts = rows["dispatch: one transition base/base"]["extra"]
    assert "parts_error" not in parts, parts
    assert min(parts["launcher_us"], parts["checked_launcher_us"], parts["buffer_and_views_us"],
               parts["launch_only_us"]) > 0
    for mode in ("base/base", "base/ext", "ext/ext"):  # replayed from a captured graph
        assert "in_l2_gbps" in rows[f"dense fold {mode}"]["extra"]  # no in_l2_error
    assert rows["jagged pyramid base/ext (1024 seg.)"]["extra"]["launches"] >= 1
    assert report["copy"][0]["kernel"] == "copy (device to device, 4n words)"
    assert report["copy"][0]["size"] == 4 * 2**11
    # the note's target table reads every GPU target off this report
    table = _script("targets").targets(report)
    for what in ("dense fold base/ext (of copy)", "jagged pyramid base/ext (1024 seg.) (of copy)",
                 "dispatch: one transition base/base", "peak memory / first layer"):
        assert what in table, what
    # gpu_run.sh leaves --plot out: the chart is drawn here from the JSON
    import importlib.util
    import subprocess
    png = tmp_path / "gpu.png"
    res = subprocess.run([sys.executable, str(BENCHMARKS / "plot_report.py"), str(out), str(png)],
                         capture_output=True, text=True)
    if importlib.util.find_spec("matplotlib") is None:
        # (checked before drawing, as the bench checks --plot: a message and 2)
        assert res.returncode == 2 and "plot_report.py needs matplotlib" in res.stderr
    else:
        # 2^11 rows report times only: refused, not drawn as an empty chart ...
        assert res.returncode == 2 and "nothing to draw" in res.stderr, res.stderr
        # ... and drawn once the rows hold fractions, as a 2^26 report's do
        for r in report["results"]:
            if r["bytes"] and not r["kernel"].startswith("dispatch"):
                r["fraction_of_copy"] = r["bytes"] / r["time_s"] / 1e9 / report["copy"][0]["gbps"]
        out.write_text(json.dumps(report))
        res = subprocess.run([sys.executable, str(BENCHMARKS / "plot_report.py"), str(out),
                              str(png)], capture_output=True, text=True)
        assert res.returncode == 0 and png.stat().st_size > 0, res.stderr


