"""Render a ``python -m zorch_nb bench --json`` report as the README's markdown table.

Usage: ``python benchmarks/readme_table.py benchmarks/results/<report>.json``
"""
import json
import sys


def table(report: dict) -> str:
    copies = {c["size"]: c for c in report["copy"]}
    lines = [
        f"Measured {report['date'][:10]} on {report['device']} with "
        f"`{report['command']}`.",
        "",
        "| kernel | backend | elements | time | GB/s | of copy | speedup vs baselines |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for size, c in sorted(copies.items()):
        lines.append(f"| {c['kernel']} | {c['backend']} | 2^{size.bit_length() - 1} | "
                     f"{c['time_s'] * 1e3:.3f} ms | {c['gbps']:.1f} | 1.00 | |")
    for r in report["results"]:
        base = ", ".join(f"{name} {secs / r['time_s']:.1f}x" for name, secs in r["baselines"].items())
        lines.append(f"| {r['kernel']} | {r['backend']} | 2^{r['size'].bit_length() - 1} | "
                     f"{r['time_s'] * 1e3:.3f} ms | {r['gbps']:.1f} | "
                     f"{r['fraction_of_copy']:.2f} | {base} |")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        print(table(json.load(fh)))
