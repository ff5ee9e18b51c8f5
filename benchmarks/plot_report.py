"""Draw a ``python -m zorch_nb bench --json`` report as the bench's bar chart.

The GPU run (``gpu_run.sh``) leaves the chart out: the device machine's
matplotlib is built against the NumPy the run replaces, and only eight files
come back from it.  This draws the same chart here from the JSON.

Usage: ``python benchmarks/plot_report.py REPORT.json CHART.png``
"""
import dataclasses
import os
import sys

# targets.py lies beside this file; under PYTHONSAFEPATH (the test suite sets
# it) Python does not put the script's folder on sys.path by itself
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from targets import load_report  # noqa: E402

from zorch_nb.bench import Row, _nothing_to_plot, _os_reason, _output_problem, _plot_problem, plot


def _row(fields: dict) -> Row:
    """A report row as the bench's ``Row``: keys a later bench adds are left
    out (the chart does not draw them), and the byte count, which the chart
    does not read, may be absent (load_report checked the rest)."""
    known = {f.name for f in dataclasses.fields(Row)}
    return Row(**{"bytes": 0, **{k: v for k, v in fields.items() if k in known}})


def rows_of(report: dict):
    """The report's rows and its last copy, as the bench's ``Row`` objects."""
    rows = [_row(r) for r in report["results"]]
    copy = _row(report["copy"][-1]) if report["copy"] else None
    return rows, copy


def main(argv) -> int:
    """Draw ``argv[2]`` from the report ``argv[1]``; the bench's own checks of
    ``--plot`` first (a directory, a missing folder, a format matplotlib
    cannot write, a report without a bandwidth row), each a message and 2."""
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    report = load_report(argv[:2], __doc__)
    problem = _output_problem(argv[2], "CHART") or _plot_problem(argv[2])
    rows, _ = rows_of(report)
    empty = not problem and _nothing_to_plot(rows)
    if empty:
        problem = f"{argv[1]!r}: {empty}: nothing to draw"
    if problem:
        print(problem.replace("--plot needs", "plot_report.py needs").replace("--plot", "CHART"),
              file=sys.stderr)
        return 2
    try:
        plot(rows, [_row(c) for c in report["copy"]], argv[2],
             f"zorch_nb bench — {report['device']}")
    except OSError as exc:  # (a full disk: checked writable, then failed)
        print(f"CHART {argv[2]!r} not written: {_os_reason(exc)}", file=sys.stderr)
        return 2
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
