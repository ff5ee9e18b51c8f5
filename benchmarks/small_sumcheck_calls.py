"""Per-call time of the small sumcheck helpers on the CPU (eq_table, mle_eval,
mle_fold at 4 and 10 coordinates): the best of 5 rounds of 10,000 calls each.

    python benchmarks/small_sumcheck_calls.py [--json FILE]

Compare two commits by running it in each (same machine, nothing else
running); benchmarks/results/README.md, "cpu-2026-12-06-small-sumcheck-calls".
"""
import argparse
import datetime
import json
import platform
import sys
import time

import zorch_nb as zn

F = zn.KoalaBear
E = F.ext


def _best_us(fn, k=10000):
    for _ in range(500):
        fn()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(k):
            fn()
        best = min(best, (time.perf_counter() - t) / k * 1e6)
    return round(best, 1)


def measure():
    pt, pb = E.random(4, seed=4), F.random(4, seed=5)
    v, vb, r = E.random(16, seed=1), F.random(16, seed=2), E.random(1, seed=3)[0]
    pt10, v10 = E.random(10, seed=6), E.random(1024, seed=7)
    rows = [("E.eq_table, nv=4", lambda: E.eq_table(pt)),
            ("F.eq_table, nv=4", lambda: F.eq_table(pb)),
            ("E.mle_eval, 16 ext values, nv=4", lambda: E.mle_eval(v, pt)),
            ("F.mle_eval, 16 values, nv=4", lambda: F.mle_eval(vb, pb)),
            ("E.mle_eval, 16 base values at an ext point", lambda: E.mle_eval(vb, pt)),
            ("E.mle_fold, 16 ext values", lambda: E.mle_fold(v, r)),
            ("E.eq_table, nv=10", lambda: E.eq_table(pt10)),
            ("E.mle_eval, 1024 ext values", lambda: E.mle_eval(v10, pt10))]
    return {name: _best_us(fn) for name, fn in rows}


def main(argv=None):
    from zorch_nb.bench import _commit  # the checkout's HEAD (+dirty)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)
    rows = measure()
    for name, us in rows.items():  # a table on stdout, the record in --json
        print(f"{name:<44} {us:7.1f} us")
    if args.json:
        argv = sys.argv[1:] if argv is None else argv
        record = {"what": "us per call, best of 5 x 10,000 calls, CPU (NumPy arrays)",
                  "date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
                  "python": platform.python_version(), "commit": _commit(),
                  "command": "python benchmarks/small_sumcheck_calls.py " + " ".join(argv),
                  "us_per_call": rows}
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
