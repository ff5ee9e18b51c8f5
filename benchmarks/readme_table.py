"""Render a ``python -m zorch_nb bench --json`` report as the README's markdown table.

"of copy" compares a row with the best copy of its size in the run; "of copy,
paired" (CPU folds) with the copy timed alternately with it, which on a
shared machine is the robust figure.  A time marked `` ?`` belongs to a size
the bench flagged as measured beside a busy process (a footnote says so).

Usage: ``python benchmarks/readme_table.py benchmarks/results/<report>.json``
"""
import os
import sys

# targets.py lies beside this file; under PYTHONSAFEPATH (the test suite sets
# it) Python does not put the script's folder on sys.path by itself
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from targets import emit, load_report  # noqa: E402

from zorch_nb.bench import MIN_FRACTION_LOG2, _ratio  # noqa: E402  (_ratio: "0.05x", not "0.0x")

#: Marks a figure the bench flagged (``extra["implausible"]``), with its footnote.
FLAG = " ?"


def table(report: dict, path: str | None = None) -> str:
    """The markdown table; ``path``: the report's file, named under the command
    (which names the file it wrote then, often elsewhere)."""
    copies = {c["size"]: c for c in report["copy"]}
    lines = [
        f"Measured {report['date'][:10]} on {report['device']} with "
        f"`{report['command']}`" + (f" (the report: `{path}`)." if path else "."),
        "",
        "| kernel | backend | elements | time | GB/s | of copy | of copy, paired | "
        "speedup vs baselines |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    flagged = False

    def flag(row) -> str:
        nonlocal flagged
        if row.get("extra", {}).get("implausible"):
            flagged = True
            return FLAG
        return ""

    for size, c in sorted(copies.items()):
        # a launch-bound size's copy is no yardstick (the bench's table hides its rate too)
        rate = ("| | |" if size < 2**MIN_FRACTION_LOG2 or c.get("gbps") is None else
                f"| {c['gbps']:.1f} | 1.00 |")
        lines.append(f"| {c['kernel']} | {c['backend']} | 2^{size.bit_length() - 1} | "
                     f"{c['time_s'] * 1e3:.3f} ms{flag(c)} {rate} | |")
    for r in report["results"]:
        base = ", ".join(f"{name} {_ratio(secs / r['time_s'])}"
                         for name, secs in r.get("baselines", {}).items())
        paired = r.get("extra", {}).get("paired_fraction")  # CPU folds: timed alternately
        frac = r.get("fraction_of_copy")  # None: not a bandwidth row (dispatch), or old NaN
        frac = "" if frac is None or frac != frac else f"{frac:.2f}"
        lines.append(f"| {r['kernel']} | {r['backend']} | 2^{r['size'].bit_length() - 1} | "
                     f"{r['time_s'] * 1e3:.3f} ms{flag(r)} | "
                     f"{'' if r.get('gbps') is None else format(r['gbps'], '.1f')} | "
                     f"{frac} | {'' if paired is None else f'{paired:.2f}'} | "
                     f"{base} |")
    if flagged:
        lines += ["", f"`{FLAG.strip()}`: the bench flagged this size as measured while another "
                      f"process was busy on the same cores (the report's `implausible` note "
                      f"says how); not a figure to rely on."]
    return "\n".join(lines)


if __name__ == "__main__":
    emit(table(load_report(sys.argv, __doc__), sys.argv[1]))
