"""``python -m zorch_nb bench``: kernels against same-process yardsticks.

GPU (``--device gpu``): every kernel's effective bandwidth (bytes read +
bytes written, divided by time) as a fraction of the device-to-device copy
bandwidth measured in the same process.  CPU (``--device cpu``): the same
bandwidth against a Numba streaming copy measured in the same process, plus
the speedup over a plain vectorized NumPy implementation (and galois where it
is installed).  Compile (first-call) time is reported apart from steady state.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .fields import KoalaBear


@dataclass
class Row:
    """One measured kernel."""

    kernel: str
    backend: str
    size: int
    time_s: float
    bytes: int
    first_call_s: float = float("nan")
    baselines: dict = field(default_factory=dict)  # name -> seconds
    gbps: float = 0.0
    fraction_of_copy: float = 0.0

    def finish(self, copy_gbps: float) -> "Row":
        self.gbps = self.bytes / self.time_s / 1e9
        self.fraction_of_copy = self.gbps / copy_gbps if copy_gbps else float("nan")
        return self


# ---------------------------------------------------------------- timers

def _time_cpu(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _time_gpu(fn, repeat: int) -> float:
    import cupy
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    fn()
    best = float("inf")
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def _first_call(fn, sync=None) -> float:
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


# ---------------------------------------------------------------- copy ceilings

def _numba_copy():
    from numba import njit, prange

    @njit(parallel=True)
    def copy(src, dst):
        for i in prange(src.shape[0]):
            dst[i] = src[i]
    return copy


def cpu_copy_gbps(n: int, repeat: int) -> Row:
    """Numba parallel streaming copy of ``n`` uint32 words (read + write bytes)."""
    copy = _numba_copy()
    src = np.arange(n, dtype=np.uint32)
    dst = np.empty_like(src)
    first = _first_call(lambda: copy(src, dst))
    t = _time_cpu(lambda: copy(src, dst), repeat)
    return Row("copy (Numba streaming)", "cpu", n, t, 2 * src.nbytes, first)


def gpu_copy_gbps(n: int, repeat: int) -> Row:
    """Device-to-device copy of ``n`` uint32 words with cupy (read + write bytes)."""
    import cupy
    src = cupy.arange(n, dtype=cupy.uint32)
    dst = cupy.empty_like(src)
    t = _time_gpu(lambda: cupy.copyto(dst, src), repeat)
    return Row("copy (device to device)", "cupy", n, t, 2 * src.nbytes, 0.0)


# ---------------------------------------------------------------- kernels

def _numpy_base_mul(a, b, p):
    return (a * b) % p


def field_rows(n: int, backend: str, repeat: int, xp, timer, sync):
    """Base and extension multiply (3 words of traffic per element word)."""
    rows = []
    F = KoalaBear
    for E, name in ((F, "base mul"), (F.ext, "ext4 mul")):
        a = xp.asarray(E.random(n, seed=1))
        b = xp.asarray(E.random(n, seed=2))
        first = _first_call(lambda: E.mul(a[:2], b[:2], backend=backend), sync)
        t = timer(lambda: E.mul(a, b, backend=backend), repeat)
        row = Row(f"{name} (KoalaBear)", backend, n, t, 3 * a.nbytes, first)
        if xp is np:
            ca = E.decode(a).astype(np.uint64)
            cb = E.decode(b).astype(np.uint64)
            if E is F:
                row.baselines["numpy uint64"] = _time_cpu(
                    lambda: _numpy_base_mul(ca, cb, np.uint64(F.p)), repeat)
        rows.append(row)
    return rows


def _gkr_rows(n, backend, repeat, xp, timer, sync):
    try:
        from . import _bench_gkr
    except ImportError:
        return []
    return _bench_gkr.rows(n, backend, repeat, xp, timer, sync)


# ---------------------------------------------------------------- report

def _table(rows, copy_row) -> str:
    head = (f"{'kernel':<46} {'backend':<7} {'size':>10} {'time':>11} {'GB/s':>8} "
            f"{'of copy':>8} {'1st call':>9}  baselines")
    lines = [head, "-" * len(head)]
    for r in [copy_row] + rows:
        base = ", ".join(f"{k} {v * 1e3:.2f} ms (speedup {v / r.time_s:.1f}x)"
                         for k, v in r.baselines.items())
        lines.append(f"{r.kernel:<46} {r.backend:<7} {r.size:>10} {r.time_s * 1e3:>8.3f} ms "
                     f"{r.gbps:>8.1f} {r.fraction_of_copy:>8.2f} {r.first_call_s:>8.3f}s  {base}")
    return "\n".join(lines)


def _device_name(device: str) -> str:
    if device == "gpu":
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def plot(rows, copy_row, path: str, title: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'zorch_nb[bench]'")
    labels = [f"{r.kernel}\n[{r.backend}, n={r.size}]" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    ax.barh(range(len(rows)), [r.fraction_of_copy for r in rows], color="tab:blue")
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"fraction of same-run copy bandwidth ({copy_row.gbps:.0f} GB/s)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(args) -> int:
    device = args.device
    sizes = args.sizes or ([26] if device == "gpu" else [20])
    if device == "gpu":
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            print(f"--device gpu needs CuPy and a CUDA GPU ({exc}); pip install 'zorch_nb[cuda]'",
                  file=sys.stderr)
            return 2
        xp, timer = cupy, _time_gpu
        sync = cupy.cuda.get_current_stream().synchronize
        backends = ["cupy", "numba"]
    else:
        xp, timer, sync, backends = np, _time_cpu, None, ["cpu"]
    all_rows = []
    copies = []
    for lg in sizes:
        n = 1 << lg
        copy_row = (gpu_copy_gbps if device == "gpu" else cpu_copy_gbps)(n, args.repeat)
        copy_row.finish(copy_row.bytes / copy_row.time_s / 1e9)
        copies.append(copy_row)
        rows = []
        for backend in backends:
            rows += field_rows(n, backend, args.repeat, xp, timer, sync)
            rows += _gkr_rows(n, backend, args.repeat, xp, timer, sync)
        for r in rows:
            r.finish(copy_row.gbps)
        print(_table(rows, copy_row))
        print()
        all_rows += rows
    if args.json:
        report = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": _device_name(device),
            "command": "python -m zorch_nb " + " ".join(sys.argv[1:]),
            "python": sys.version.split()[0],
            "copy": [asdict(c) for c in copies],
            "results": [asdict(r) for r in all_rows],
        }
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    if args.plot:
        plot(all_rows, copies[-1], args.plot, f"zorch_nb bench — {_device_name(device)}")
    return 0
