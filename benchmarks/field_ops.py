"""Time every field op on the CPU at one size, next to a NumPy copy of the
same process (the memory yardstick), and write the table as JSON.

    python benchmarks/field_ops.py [--log2n 22] [--json FILE]

Each op writes into a preallocated ``out`` where it takes one (so the time
is the kernel's, not the operating system's zeroing of fresh pages); the
others (sum, encode, decode, random) return new arrays.  "words" is the
traffic the op must move at least (inputs read + output written, in 32-bit
words per element of the field), so GB/s-equivalent compares ops of
different arity; inversions and powers are compute-bound and sit far below
the copy.  The best of several calls is reported (compile time excluded:
one warm-up call first).
"""
import argparse
import datetime
import json
import os
import platform
import time

import numpy as np


def best_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=22, help="log2 of the element count (1-32)")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    args = ap.parse_args()
    if not 1 <= args.log2n <= 32:
        ap.error(f"--log2n must be in [1, 32], not {args.log2n}")
    if args.json:  # checked before the timing, not after it
        folder = os.path.dirname(os.path.abspath(args.json))
        if os.path.isdir(args.json):
            ap.error(f"--json {args.json!r} is a directory; give a file name")
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            ap.error(f"--json {args.json!r}: the folder {folder!r} is missing or not writable")
    import zorch_nb as z
    F = z.KoalaBear
    n = 1 << args.log2n
    src = np.random.default_rng(0).integers(0, 2**32, n, dtype=np.uint32)
    dst = np.empty_like(src)
    copy_ms = best_ms(lambda: np.copyto(dst, src), 9)
    rows = [{"op": "numpy copy (n words)", "ms": copy_ms, "gbps": 2 * src.nbytes / copy_ms / 1e6}]
    for G, name in ((F, "base"), (F.ext, "ext4")):
        a, b = G.random(n, seed=1), G.random(n, seed=2)
        o = np.empty_like(a)
        ints = G.decode(a).astype(np.int64)
        r = G.random((), seed=3)
        ops = [("add", lambda: G.add(a, b, out=o), 3), ("sub", lambda: G.sub(a, b, out=o), 3),
               ("mul", lambda: G.mul(a, b, out=o), 3),
               ("mul by one element", lambda: G.mul(a, r, out=o), 2),
               ("neg", lambda: G.neg(a, out=o), 2), ("square", lambda: G.square(a, out=o), 2),
               ("inv", lambda: G.inv(a, out=o), 2), ("batch_inv", lambda: G.batch_inv(a, out=o), 2),
               ("pow 7", lambda: G.pow(a, 7, out=o), 2), ("sum", lambda: G.sum(a), 1),
               ("encode (int64)", lambda: G.encode(ints), 3), ("decode", lambda: G.decode(a), 3),
               ("is_canonical", lambda: G.is_canonical(a), 1)]
        if G is F.ext:
            s = F.random(n, seed=4)
            ops.append(("base x ext4 mul", lambda: G.mul(s, a, out=o), 2.25))
        for op, fn, words in ops:
            ms = best_ms(fn, 3 if "inv" in op or "pow" in op else 7)
            rows.append({"op": f"{name} {op}", "ms": ms,
                         "gbps": words * a.nbytes / ms / 1e6})
    for row in rows:
        print(f"{row['op']:28s} {row['ms']:9.3f} ms  {row['gbps']:7.1f} GB/s-equivalent")
    if args.json:
        report = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "machine": platform.processor() or platform.machine(),
                  "command": f"python benchmarks/field_ops.py --log2n {args.log2n}",
                  "n": n, "zorch_nb": z.__version__, "rows": rows}
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
