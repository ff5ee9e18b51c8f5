"""Uniform T3-SVD of a stack against the ragged NumPy loop, in one process.

The asv ``bench_tt.Svd`` case (d = 8, N = 32, Tucker ranks 5-8 padded to 8,
TT ranks 10-16 padded to 16, truncated to 4 and 8; its trains and its ragged
loop, imported from ``asv_benchmarks/bench_tt.py``) at 1, 8 and 64 trains: the
best of 7 calls, after one warm-up call.  ``uniform, serial`` is the same
call with the stack's LAPACK SVDs kept on the calling thread
(``launch_config.TT_CPU_SERIAL_WORK`` raised), which tells the split's share
from the rest.

``--retraction`` times instead one retraction step of an optimizer loop
on the same trains, part by part: ``x = (x + 0.1 * y).svd(max_tucker_ranks=8,
max_tt_ranks=16)[0].compact(n=8, r=16)`` (the sum pads to n = 16, r = 32,
which ``compact`` cuts back so that the loop keeps one structure), with the
svd of the sum's trains at their exact ranks by the ragged loop beside it.
``--sweeps`` times the four orthogonalizations and ``norm("orthogonal")`` of
that sum.  ``--balance`` times their first step, the power-of-two balancing
of the sum's masked cores, by the Numba kernel and by the array version
(the CuPy path's, here on NumPy).  ``--halves`` times ``svd``,
``orthogonalize("left")`` and ``norm("orthogonal")`` of the sum and of the
plain trains at the stack sizes around ``launch_config.TT_CPU_SPLIT_WORK``,
with that rule (a stack within one chunk computed as its two halves) and
without it, alternately.

    python benchmarks/tt_svd_stack.py [--retraction | --sweeps | --balance | --halves] [--json FILE]
    python benchmarks/ab_run.py CHECKOUT benchmarks/tt_svd_stack.py   # another checkout
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from asv_benchmarks.bench_tt import (D, MAX_TT, MAX_TUCKER, random_ragged,  # noqa: E402
                                     random_sum, ragged_svd, to_uniform)
from zorch_nb import tt_ops  # noqa: E402
from zorch_nb.kernels import launch_config  # noqa: E402


def best_ms(f, rounds=7):
    f()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return round(1e3 * min(times), 3)


def svd_row(count):
    x = random_ragged(D, 1, count)
    ux = to_uniform(x)
    row = {"uniform": best_ms(lambda: ux.svd(MAX_TUCKER, MAX_TT))}
    threshold = launch_config.TT_CPU_SERIAL_WORK
    launch_config.TT_CPU_SERIAL_WORK = 1 << 62
    try:
        row["uniform, serial"] = best_ms(lambda: ux.svd(MAX_TUCKER, MAX_TT))
    finally:
        launch_config.TT_CPU_SERIAL_WORK = threshold
    row["ragged"] = best_ms(lambda: ragged_svd(x, MAX_TUCKER, MAX_TT))
    return row


def retraction_row(count):
    x, y = to_uniform(random_ragged(D, 1, count)), to_uniform(random_ragged(D, 2, count))
    s, ragged = random_sum(count)  # (x + 0.1 * y; its trains at exact ranks for the loop)
    t = s.svd(max_tucker_ranks=8, max_tt_ranks=16)[0]
    return {"x + 0.1 * y": best_ms(lambda: x + 0.1 * y),
            "svd": best_ms(lambda: s.svd(max_tucker_ranks=8, max_tt_ranks=16)),
            "svd, ragged loop": best_ms(lambda: ragged_svd(ragged, 8, 16)),
            "compact": best_ms(lambda: t.compact(n=8, r=16))}


def sweeps_row(count):
    s = random_sum(count)[0]
    row = {f"orthogonalize {kind}": best_ms(lambda: s.orthogonalize(kind))
           for kind in ("left", "right", "tucker_down", "tt_up")}
    row['norm("orthogonal")'] = best_ms(lambda: s.norm("orthogonal"))
    return row


def balance_row(count):
    s = random_sum(count)[0]
    U, G = tt_ops._masked(tt_ops._parts(s.data))
    row = {}
    for name, numba_path in (("numba kernel", True), ("array version", False)):
        was, tt_ops._NUMBA_CPU = tt_ops._NUMBA_CPU, numba_path
        try:
            row[name] = best_ms(lambda: tt_ops._balanced(np, U, G))
        finally:
            tt_ops._NUMBA_CPU = was
    return row


def halves_rows():
    cases = {f"sum of {c}": random_sum(c)[0] for c in (2, 8)}
    cases.update({f"{c} plain": to_uniform(random_ragged(D, 1, c)) for c in (8, 32, 64)})
    ops = {"svd": lambda t: t.svd(8, 16), 'orthogonalize("left")': lambda t: t.orthogonalize("left"),
           'norm("orthogonal")': lambda t: t.norm("orthogonal")}
    rows, rule = {}, launch_config.TT_CPU_SPLIT_WORK
    for name, t in cases.items():
        rows[name] = row = {}
        for op, call in ops.items():
            for side in ("halves", "whole", "halves", "whole"):  # (alternately)
                launch_config.TT_CPU_SPLIT_WORK = rule if side == "halves" else 1 << 62
                try:
                    ms = best_ms(lambda: call(t))
                finally:
                    launch_config.TT_CPU_SPLIT_WORK = rule
                row.setdefault(f"{op}, {side}", []).append(ms)
        print(name, "(ms):", row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retraction", action="store_true",
                    help="time a retraction step's parts instead")
    ap.add_argument("--sweeps", action="store_true",
                    help="time the orthogonalizations and norm('orthogonal') of the sum instead")
    ap.add_argument("--balance", action="store_true",
                    help="time the power-of-two balancing of the sum's cores instead")
    ap.add_argument("--halves", action="store_true",
                    help="time the ops with and without TT_CPU_SPLIT_WORK's halves instead")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.halves:
        rows = halves_rows()
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return
    rows = {}
    row_of = (retraction_row if args.retraction else sweeps_row if args.sweeps
              else balance_row if args.balance else svd_row)
    for count in (1, 8, 64):
        rows[f"{count} trains"] = row = row_of(count)
        print(count, "trains (ms):", row)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
