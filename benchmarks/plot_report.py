"""Draw a ``python -m zorch_nb bench --json`` report as the bench's bar chart.

The GPU run (``gpu_run.sh``) leaves the chart out: the device machine's
matplotlib is built against the NumPy the run replaces, and only eight files
come back from it.  This draws the same chart here from the JSON.

Usage: ``python benchmarks/plot_report.py REPORT.json CHART.png``
"""
import os
import sys

# targets.py lies beside this file; under PYTHONSAFEPATH (the test suite sets
# it) Python does not put the script's folder on sys.path by itself
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from targets import load_report  # noqa: E402

from zorch_nb.bench import Row, plot


def rows_of(report: dict):
    """The report's rows and its last copy, as the bench's ``Row`` objects."""
    rows = [Row(**r) for r in report["results"]]
    copy = Row(**report["copy"][-1]) if report["copy"] else None
    return rows, copy


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        raise SystemExit(2)
    report = load_report(sys.argv[:2], __doc__)
    rows, copy = rows_of(report)
    plot(rows, copy, sys.argv[2], f"zorch_nb bench — {report['device']}")
    print(f"wrote {sys.argv[2]}")
