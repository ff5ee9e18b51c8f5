"""Small GPU workload for compute-sanitizer (run by benchmarks/gpu_run.sh).

Every CUDA C and Numba-CUDA kernel family of zorch_nb on small inputs --
field ops, dense folds (aligned and offset data), fused dense pyramids, jagged
transitions, fused jagged pyramids (three-step chunks, single steps, the
one-block tail, more segments than scan threads) -- each result compared with
the CPU backend.  CuPy's memory pool is switched off, so each array is its
own allocation and memcheck sees a read or write past its end.

    compute-sanitizer --tool memcheck  --error-exitcode 9 python3 benchmarks/sanitize_case.py
    compute-sanitizer --tool racecheck --error-exitcode 9 python3 benchmarks/sanitize_case.py --quick

``--quick``: the kernels with shared memory only (pyramids, jagged steps and
scans), KoalaBear, two modes -- racecheck is many times slower than memcheck.
``--backends cupy`` (or ``numba``): one backend's kernels only (default both;
CI's emulated run takes the CuPy ones: the Numba-CUDA ones, the same calls
with ``backend="numba"``, take most of its time under the CUDA simulator).
Each check is printed as it passes, so a run cut by a time cap shows how far
it got.  Exit status 1 if any result differs from the CPU's.
"""
import argparse
import sys

import cupy
import numpy as np

from zorch_nb import BabyBear, KoalaBear
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid,
                                build_pyramid, halving_schedule, layer_transition)

cupy.cuda.set_allocator(None)  # no pool: every array its own cudaMalloc
failures = []
checked = []


def check(what, got, want):
    checked.append(what)
    got = [x.get() if hasattr(x, "get") else np.asarray(x) for x in got]  # device -> host
    if len(got) != len(want) or not all(np.array_equal(a, b) for a, b in zip(got, want)):
        failures.append(what)
        print("MISMATCH", what, flush=True)
    else:
        print("ok", what, flush=True)


def mles(F, ne, de, n, seed, offset=0):
    """Host MLEs, and device copies starting ``offset`` words into their buffers."""
    host = [(F.ext if e else F).random(n, seed=seed + i) for i, e in enumerate((ne, ne, de, de))]
    dev = []
    for x in host:
        buf = cupy.empty(x.size + offset, dtype=np.uint32)
        view = buf[offset:].reshape(x.shape)
        view[...] = cupy.asarray(x)
        dev.append(view)
    return host, dev


def main(quick=False, backends=("cupy", "numba")) -> int:
    for F in () if quick else (KoalaBear, BabyBear):
        a, b = F.ext.random(1000, seed=1), F.ext.random(1000, seed=2)
        s, pt = F.random(1024, seed=3), F.ext.random(10, seed=4)
        for backend in backends:
            check(f"{F.name} ext mul {backend}",
                  [F.ext.mul(cupy.asarray(a), cupy.asarray(b), backend=backend)],
                  [F.ext.mul(a, b)])
            check(f"{F.name} base inv {backend}",
                  [F.inv(cupy.asarray(a[:, 0] | 1), backend=backend)], [F.inv(a[:, 0] | 1)])
            check(f"{F.name} ext inv {backend}",  # (the batched kernels: a part-empty batch)
                  [F.ext.inv(cupy.asarray(b[:999]), backend=backend)], [F.ext.inv(b[:999])])
            # the fused sumcheck kernels: folds (base pairs, extension
            # elements), eq-table doublings in place
            for vals in (s, a[:512]):
                check(f"{F.name} mle_fold {vals.ndim}-d {backend}",
                      [F.ext.mle_fold(cupy.asarray(vals), cupy.asarray(b[0]), backend=backend)],
                      [F.ext.mle_fold(vals, b[0])])
            check(f"{F.name} mle_eval {backend}",
                  [F.ext.mle_eval(cupy.asarray(s), cupy.asarray(pt), backend=backend)],
                  [F.ext.mle_eval(s, pt)])
            check(f"{F.name} eq_table {backend}",
                  [F.ext.eq_table(cupy.asarray(pt), backend=backend)], [F.ext.eq_table(pt)])
    for ne in (0, 1):
        for de in (0, 1):
            if quick and ne != de:
                continue
            F = KoalaBear if ne == de or quick else BabyBear
            tag = f"mode {ne}{de}"
            for offset in () if quick else (0, 1):  # (no shared memory)
                host, dev = mles(F, ne, de, 2**12, seed=3, offset=offset)
                want = layer_transition(GkrLayer(*host, 2, F)).mles
                for backend in backends:
                    check(f"{tag} fold offset={offset} {backend}",
                          layer_transition(GkrLayer(*dev, 2, F), backend=backend).mles, want)
            host, dev = mles(F, ne, de, 2**13, seed=5)
            want = build_pyramid(GkrLayer(*host, 1, F))
            for backend in backends:
                got = build_pyramid(GkrLayer(*dev, 1, F), backend=backend)
                for lg, lw in zip(got, want):
                    check(f"{tag} dense pyramid {backend}", lg.mles, lw.mles)
            for nb, top in ((8, 300), (2048, 9)):  # few segments; more than the scan threads
                rng = np.random.default_rng(7 + nb)
                rc = rng.integers(0, top, nb).astype(np.int32)
                rc[::5] = 0
                live = int(rc.sum())
                host = [(F.ext if e else F).random(live + 3, seed=11 + i)
                        for i, e in enumerate((ne, ne, de, de))]
                for x in host:
                    x[live:] = 0
                jh = JaggedGkrLayer(*host, rc, F)
                steps = halving_schedule(jh)
                want = build_jagged_pyramid(jh, steps)
                jd = JaggedGkrLayer(*[cupy.asarray(x) for x in host], cupy.asarray(rc), F)
                for backend in backends:
                    got = build_jagged_pyramid(jd, steps, backend=backend)
                    for lg, lw in zip(got, want):
                        check(f"{tag} jagged pyramid nb={nb} {backend}", lg.mles, lw.mles)
    cupy.cuda.get_current_stream().synchronize()
    print(f"sanitize_case: {len(checked)} checks,",
          "OK" if not failures else f"{len(failures)} mismatches", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="the shared-memory kernels only (for racecheck)")
    ap.add_argument("--backends", default="cupy,numba",
                    choices=["cupy", "numba", "cupy,numba"], help="default: both")
    args = ap.parse_args()
    sys.exit(main(quick=args.quick, backends=tuple(args.backends.split(","))))
