"""What does a fresh large array cost to fill, written by one thread or by two?

Each call makes a fresh ``np.empty`` of ``--mib`` MiB (glibc maps it anew;
NumPy asks for transparent huge pages) and fills it with a Numba loop: on the
calling thread alone (``serial``) or split in two halves over a ``prange``
(``parallel``, as the library's CPU kernels write their fresh outputs), then
drops it.  ``--calls`` calls of each, in the order given, in this process;
run it in fresh processes to see a process's first calls.  Written for the
erratic times of allocating calls on the development VM (a 2^22 transition's
first calls in a process: 100-170 ms, later 27-30 ms; into ``out=`` 14 ms).

    python benchmarks/fresh_pages.py [--mib 80] [--calls 8] [--order parallel serial]
"""
import argparse
import json
import platform
import time

import numpy as np
from numba import njit, prange


@njit(parallel=True)
def _fill_two(a):
    half = a.shape[0] // 2
    for c in prange(2):
        for i in range(c * half, c * half + half):
            a[i] = np.uint32(i)


@njit
def _fill_one(a):
    for i in range(a.shape[0]):
        a[i] = np.uint32(i)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=80)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--order", nargs="+", default=["parallel", "serial"],
                    choices=["parallel", "serial"])
    args = ap.parse_args()
    fills = {"parallel": _fill_two, "serial": _fill_one}
    warm = np.empty(1024, np.uint32)
    for f in fills.values():
        f(warm)  # compile, and start the threads, outside the timing
    words = (args.mib << 20) // 4
    times = {}
    for name in args.order:
        ms = []
        for _ in range(args.calls):
            t = time.perf_counter()
            a = np.empty(words, np.uint32)
            fills[name](a)
            ms.append(round((time.perf_counter() - t) * 1e3, 1))
            del a
        times[name] = ms
    print(json.dumps({"mib": args.mib, "order": args.order, "ms_per_call": times,
                      "machine": platform.processor() or platform.machine()}))


if __name__ == "__main__":
    main()
