"""Does the CPU dense fold's speed depend on where its arrays lie?

Times the base/base dense fold (``kernels.gkr_cpu.fold_dense``, into
preallocated outputs) over several *sets* of arrays of one size, made the
same way, and over views placed at chosen byte offsets from a page boundary
(16 is where glibc puts a large NumPy array; 0 is cache-line aligned), the
sets taken in turn round after round, so a busy moment of the machine hits
them all alike.  Also a Numba streaming copy of the fold's bytes at the same
offsets.  Written to check two explanations of the fold's changing fraction
of the copy on the development VMs (0.65 to 1.0 between runs): split vector
loads (AVX-512 loads of 64 bytes from arrays 16 bytes past a cache line)
and 4 KiB aliasing of its eight streams (all at the same page offset).

    python benchmarks/fold_placement.py [--log2 24] [--sets 4] [--rounds 5] > FILE.json
"""
import argparse
import datetime
import json
import platform
import time

import numpy as np


def _at(words, offset):
    """A uint32 array of ``words`` starting ``offset`` bytes past a page."""
    buf = np.empty(words + 2048, np.uint32)
    skip = ((offset - buf.ctypes.data) % 4096) // 4
    return buf[skip:skip + words]


def _best(fn, repeat=7):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    from zorch_nb import KoalaBear as F
    from zorch_nb.bench import _commit, _numba_copy
    from zorch_nb.kernels import gkr_cpu
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2", type=int, default=24)
    ap.add_argument("--sets", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    n, copy = 1 << args.log2, _numba_copy()
    words = np.random.default_rng(1).integers(0, F.params.p, n, dtype=np.uint32)
    cases = {}
    for s in range(args.sets):  # plain arrays, as a user makes them
        cases[f"set {s}, plain arrays"] = ([words.copy() for _ in range(4)],
                                           [np.empty(n // 2, np.uint32) for _ in range(4)])
    for off in (0, 16, 48):
        ins = [_at(n, off) for _ in range(4)]
        for a in ins:
            a[:] = words
        cases[f"all at page offset {off}"] = (ins, [_at(n // 2, off) for _ in range(4)])
    stagger = [_at(n, 1088 * i) for i in range(4)]  # 17 cache lines apart
    for a in stagger:
        a[:] = words
    cases["page offsets 0, 1088, 2176, 3264 (outputs +64)"] = (
        stagger, [_at(n // 2, 1088 * i + 64) for i in range(4)])
    copies = {off: (_at(3 * n // 2, off), _at(3 * n // 2, off)) for off in (0, 16)}
    rows = {name: [] for name in cases}
    rows.update({f"copy of the fold's bytes, page offset {off}": [] for off in copies})
    for _ in range(args.rounds):
        for name, (ins, outs) in cases.items():
            nbytes = sum(a.nbytes for a in ins + outs)
            t = _best(lambda ins=ins, outs=outs: gkr_cpu.fold_dense(*ins, *outs, F.params))
            rows[name].append(round(nbytes / t / 1e9, 1))
        for off, (src, dst) in copies.items():
            t = _best(lambda src=src, dst=dst: copy(src, dst))
            rows[f"copy of the fold's bytes, page offset {off}"].append(
                round(2 * src.nbytes / t / 1e9, 1))
    report = {
        "what": "base/base dense fold GB/s (bytes read + written / best time) over array "
                "sets of one size; one list entry per round, the sets in turn each round",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "commit": _commit(),
        "command": "python benchmarks/fold_placement.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items()),
        "elements": n,
        "gbps": rows,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
