"""Issue 6's performance targets against a ``python -m zorch_nb bench --json`` report.

Usage: ``python benchmarks/targets.py benchmarks/results/<report>.json``

Prints a markdown table: each target, the measured figure and whether it is
met -- the table a closing note needs, read off the committed report rather
than copied by hand.  GPU targets are fractions of the same run's device copy
bandwidth (pyramids against their compulsory bytes); the CPU targets are the
fold timed alternately with a copy of the same bytes (``paired_fraction``)
and its speed-up over the galois fold, both allocating their results
(``alloc_out_ms``: into preallocated outputs the fold looked about twice as
fast), at sizes of at least 2^16 (smaller calls are launch-bound); a row
without its galois figure, where the bench says why, has "no figure".  A
row the bench marked ``implausible`` (figures no idle machine gives: another
process was busy), or a fraction above 1.5x the copy (the bench's ``!``), is
listed as unreliable, never as met.  Exit status: 0 when every target listed
is met and no section failed; 1 when one is missed, unreliable or without a
figure, a section failed, or nothing in the report has a target; 2 for a
usage error or a file that is not a report.
"""
import json
import os
import sys

#: Keys every report of ``python -m zorch_nb bench --json`` has.
REPORT_KEYS = ("date", "device", "command", "copy", "results")

#: (row kernel prefix, {backend: minimum fraction of copy}) -- GPU rows.
GPU_FRACTIONS = [
    ("dense fold base/base", {"cupy": 0.90, "numba": 0.85}),
    ("dense fold base/ext", {"cupy": 0.90, "numba": 0.85}),
    ("dense fold ext/ext", {"cupy": 0.90, "numba": 0.85}),
    ("jagged transition base/base", {"cupy": 0.75, "numba": 0.70}),
    ("jagged transition ext/ext", {"cupy": 0.75, "numba": 0.70}),
    ("dense pyramid base/base", {"cupy": 0.80, "numba": 0.65}),
    ("dense pyramid base/ext", {"cupy": 0.80, "numba": 0.65}),
    ("jagged pyramid base/ext", {"cupy": 0.65, "numba": 0.55}),
]
#: Dispatch of one transition at 2**10 on the CuPy path, microseconds.
DISPATCH_US = 15.0
#: Peak device memory of build_pyramid: "about 2x the first layer" (base/base
#: layers halve; a base/ext pyramid's later layers are extension, 2.6x).
PEAK_OVER_FIRST = {"dense pyramid base/base": 2.0, "dense pyramid base/ext": 2.6}
#: CPU: fold >= 0.7 of the paired copy and >= 10x faster than galois GF(p).
CPU_PAIRED, CPU_GALOIS = 0.7, 10.0
#: A fraction of the copy above this is no idle machine's figure (the bench's
#: ``SUSPECT_FRACTION``, flagged ``!`` in its table: the data stayed in a cache
#: the copy's did not fit, or the copy was timed in a busy moment): unreliable.
SUSPECT_FRACTION = 1.5


def load_report(argv, doc) -> dict:
    """The report named by ``argv[1]``; a usage line or a one-line reason on exit 2."""
    if len(argv) != 2:
        usage = next((ln for ln in (doc or "").splitlines() if ln.startswith("Usage")),
                     "Usage: SCRIPT REPORT.json")
        print(usage, file=sys.stderr)
        raise SystemExit(2)
    try:
        with open(argv[1]) as fh:
            report = json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"cannot read the report {argv[1]!r}: {exc}", file=sys.stderr)
        raise SystemExit(2)
    missing = [k for k in REPORT_KEYS if not isinstance(report, dict) or k not in report]
    problem = (f"missing {', '.join(missing)}" if missing else _schema_problem(report)
               or _rows_problem(report))
    if problem:
        print(f"{argv[1]!r} is not a zorch_nb bench report ({problem})", file=sys.stderr)
        raise SystemExit(2)
    for row in report["results"] + report["copy"]:  # (optional in a row: none measured)
        row.setdefault("baselines", {})
        row.setdefault("extra", {})
    return report


def _schema_problem(report):
    """Why ``report``'s schema is not one these scripts read, or None (reports
    before the schema number have none)."""
    from zorch_nb.bench import REPORT_SCHEMA
    schema = report.get("schema", REPORT_SCHEMA)
    if type(schema) is not int or not 1 <= schema <= REPORT_SCHEMA:
        return (f"schema {schema!r}; these scripts read schema 1 to {REPORT_SCHEMA}: "
                f"update the checkout")
    return None


def _number(x, positive=False) -> bool:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool)
    return ok and (not positive or x > 0)


def _rows_problem(report):
    """Why ``report`` cannot be read, or None.  It needs date, device and
    command strings, and ``results`` and ``copy`` lists of rows, each with
    its kernel, backend, size (elements) and time (seconds, positive); the
    figures the scripts read must be of their types where present (``None``
    for a figure not measured)."""
    for key in ("date", "device", "command"):
        if not isinstance(report[key], str):
            return f"{key} is {report[key]!r}, not a string"
    for section in ("results", "copy"):
        rows = report[section]
        if not isinstance(rows, list):
            return f"{section} is {type(rows).__name__}, not a list of rows"
        for i, row in enumerate(rows):
            where = f"{section}[{i}]"
            if not isinstance(row, dict):
                return f"{where} is {type(row).__name__}, not a row"
            for key in ("kernel", "backend", "size", "time_s"):
                if key not in row:
                    return f"{where} lacks {key}"
            if not isinstance(row["kernel"], str) or not isinstance(row["backend"], str):
                return f"{where}: kernel and backend must be strings"
            if type(row["size"]) is not int or row["size"] < 1:
                return f"{where}: size must be a positive integer, not {row['size']!r}"
            if not _number(row["time_s"], positive=True):
                return f"{where}: time_s must be a positive number, not {row['time_s']!r}"
            for key in ("gbps", "fraction_of_copy"):
                if row.get(key) is not None and not _number(row[key]):
                    return f"{where}: {key} must be a number or null, not {row[key]!r}"
            for key in ("baselines", "extra"):
                if not isinstance(row.get(key, {}), dict):
                    return f"{where}: {key} must be an object, not {row[key]!r}"
            bad = [k for k, v in row.get("baselines", {}).items() if not _number(v, True)]
            if bad:
                return f"{where}: baselines[{bad[0]!r}] must be a positive number of seconds"
    return None


def emit(text: str) -> None:
    """Print ``text``.  A reader gone (``| head``) ends the script quietly
    with status 141 (a shell's for SIGPIPE), an output that cannot be written
    (``> /dev/full``) with a one-line reason and 2: neither a traceback nor
    the 1 of a missed target."""
    try:
        print(text, flush=True)
    except OSError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (the exit's flush)
        if isinstance(exc, BrokenPipeError):
            raise SystemExit(141) from None
        print(f"cannot write the table: [Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
        raise SystemExit(2) from None


def _ratio(x: float) -> str:
    """The bench's format of a speed-up (2 digits below 0.1x: "0.05x", not "0.0x")."""
    from zorch_nb import bench
    return bench._ratio(x)


def _mark(ok):
    return "met" if ok else "**missed**"


def _rows(report, prefix, backend):
    return [r for r in report["results"]
            if r["kernel"].startswith(prefix) and r["backend"] == backend]


def targets(report: dict) -> str:
    lines = ["| target | backend | size | measured | target | |", "|---|---|---:|---:|---:|---|"]

    def add(what, r, measured, goal, ok, fraction=None):
        size = f"2^{r['size'].bit_length() - 1}"
        why = r.get("extra", {}).get("implausible")
        if not why and fraction is not None and fraction > SUSPECT_FRACTION:
            why = (f"above {SUSPECT_FRACTION}x the copy: a cache the copy's data did not "
                   f"fit, or a busy copy")
        mark = f"**unreliable** ({why})" if why else _mark(ok)
        lines.append(f"| {what} | {r['backend']} | {size} | {measured} | {goal} | {mark} |")

    backends = sorted({r["backend"] for r in report["results"]})
    if "cpu" in backends:
        for r in _rows(report, "dense fold", "cpu"):
            paired = r["extra"].get("paired_fraction")
            if paired is not None:
                add(f"{r['kernel']}, of copy (paired)", r, f"{paired:.2f}", f">= {CPU_PAIRED}",
                    paired >= CPU_PAIRED, paired)
            if r["size"] < 1 << 16:  # (smaller: launch-bound, see the bench)
                continue
            galois = r["baselines"].get("galois GF(p)")
            alloc = r["extra"].get("alloc_out_ms")
            if galois and alloc:  # judged as galois runs: allocating its result
                speedup = galois / (alloc / 1e3)
                add(f"{r['kernel']}, vs galois", r,
                    f"{_ratio(speedup)} allocating ({_ratio(galois / r['time_s'])} into out=)",
                    f">= {CPU_GALOIS:.0f}x", speedup >= CPU_GALOIS)
            elif galois:  # (a report from before alloc_out_ms)
                speedup = galois / r["time_s"]
                add(f"{r['kernel']}, vs galois", r, f"{_ratio(speedup)} into out=",
                    f">= {CPU_GALOIS:.0f}x", speedup >= CPU_GALOIS)
            elif "galois" in r["extra"] or "baseline_error" in r["extra"]:
                # (the row says why its galois fold is missing -- galois not
                # installed, or out of memory: a target without its figure is
                # not met.  Rows with extension denominators have none: galois
                # has no quartic extension of this modulus)
                why = r["extra"].get("galois") or r["extra"]["baseline_error"]
                lines.append(f"| {r['kernel']}, vs galois | cpu | 2^{r['size'].bit_length() - 1}"
                             f" | not measured: {why} | >= {CPU_GALOIS:.0f}x | no figure |")
    for backend in ("cupy", "numba"):
        if backend not in backends:
            continue
        for prefix, goals in GPU_FRACTIONS:
            for r in _rows(report, prefix, backend):
                f = r["fraction_of_copy"]
                if f is None:  # a size below MIN_FRACTION_LOG2: times only
                    size = f"2^{r['size'].bit_length() - 1}"
                    lines.append(f"| {r['kernel']} (of copy) | {backend} | {size} | no "
                                 f"fraction at this size (launch-bound) | "
                                 f">= {goals[backend]:.2f} | no figure |")
                    continue
                l2 = r["extra"].get("in_l2_gbps")  # the arithmetic's rate, DRAM out of the way
                measured = f"{f:.2f}" + (f" (in L2: {l2:.0f} GB/s)" if l2 else "")
                add(r["kernel"] + " (of copy)", r, measured, f">= {goals[backend]:.2f}",
                    f >= goals[backend], f)
        for r in _rows(report, "dispatch", backend):
            us = r["extra"].get("us_per_call", r["time_s"] * 1e6)
            if backend == "cupy" and r["kernel"].startswith("dispatch: one transition"):
                add(r["kernel"], r, f"{us:.1f} us", f"< {DISPATCH_US:.0f} us", us < DISPATCH_US)
            else:  # no target: listed for the record
                size = f"2^{r['size'].bit_length() - 1}"
                lines.append(f"| {r['kernel']} | {backend} | {size} | {us:.1f} us | (none) | |")
        for prefix, goal in PEAK_OVER_FIRST.items():
            for r in _rows(report, prefix, backend):
                peak = r["extra"].get("peak_total_over_first_layer")
                what = f"{r['kernel']}: peak memory / first layer"
                if peak is not None:
                    add(what, r, f"{peak:.2f}", f"~{goal}", peak <= goal * 1.1)
                elif "peak_error" in r["extra"]:
                    lines.append(f"| {what} | {backend} | | not measured: "
                                 f"{r['extra']['peak_error']} | ~{goal} | no figure |")
    errors = report.get("errors") or []
    if errors:
        lines.append("")
        lines.append("Sections that failed (no figure): " + "; ".join(errors))
    return "\n".join(lines)


if __name__ == "__main__":
    out = targets(load_report(sys.argv, __doc__))
    emit(out)
    if not any(ln.startswith("| ") and not ln.startswith("| target |")
               for ln in out.splitlines()):  # the header only: nothing to judge
        print("no row of this report has a target", file=sys.stderr)
        sys.exit(1)
    if "**missed**" in out or "**unreliable**" in out or "no figure" in out or \
            "Sections that failed" in out:
        sys.exit(1)
