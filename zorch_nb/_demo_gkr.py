"""Demo section: a random LogUp instance folded to its outputs (dense and jagged).

Each batch element is one lookup argument: a table ``t`` with multiplicities
``m`` and a witness ``w`` drawn from the table.  With a random extension
challenge ``alpha`` the leaves are ``m_i / (alpha - t_i)`` (child 0) and
``-1 / (alpha - w_i)`` (child 1) -- base numerators under extension
denominators.  The LogUp identity says every batch element sums to zero, so
the two output fractions ``a/b + c/d`` of each must satisfy ``a d + c b = 0``;
that check is done with Python integers, independently of the kernels.  It
holds for zeroed or uniformly scaled numerators too, so each batch element's
outputs are also compared with the plain NumPy pyramid of its own leaves
(:mod:`._numpy_gkr`, canonical integers): every element's where it has at
most 2**16 rows, three elements' (first, middle, last) on larger layers.
"""
import os
import time

import numpy as np

from . import _numpy_gkr
from .fields import BabyBear, KoalaBear
from .logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                        extract_jagged_outputs, extract_outputs, halving_schedule)


def _xp(backend):
    if backend == "cupy":
        import cupy
        return cupy
    return np


def _sync(backend):
    if backend == "cupy":
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def _host(x):
    return x.get() if type(x).__module__.startswith("cupy") else x


def _lookup_leaves(F, counts, seed, xp):
    """Leaves ``(n0, n1, d0, d1)`` of one LogUp lookup per segment of ``counts``."""
    rng = np.random.default_rng(seed)
    total = int(np.sum(counts))
    table = rng.integers(0, F.p, size=total)
    witness = np.empty(total, dtype=np.int64)
    mult = np.zeros(total, dtype=np.int64)
    start = 0
    for c in counts:
        picks = start + rng.integers(0, c, size=c)  # witness rows read table rows
        witness[start:start + c] = table[picks]
        np.add.at(mult, picks, 1)
        start += c
    E = F.ext
    alpha = E.random(1, seed=seed + 1, xp=xp)
    n0 = F.encode(mult, xp=xp)
    n1 = F.encode(np.full(total, F.p - 1), xp=xp)  # -1
    d0 = E.sub(alpha, E.from_base(F.encode(table, xp=xp)))
    d1 = E.sub(alpha, E.from_base(F.encode(witness, xp=xp)))
    return n0, n1, d0, d1


def _ext_mul(a, b, p, w):
    c = [0] * 7
    for i in range(4):
        for j in range(4):
            c[i + j] += a[i] * b[j]
    return [(c[k] + w * (c[k + 4] if k < 3 else 0)) % p for k in range(4)]


def _sums_vanish(F, out):
    """``num[2b] den[2b+1] + num[2b+1] den[2b] == 0`` for every b, in Python integers."""
    num = F.ext.decode(_host(out.numerator)).astype(object)
    den = F.ext.decode(_host(out.denominator)).astype(object)
    p, w = F.p, F.W
    ok = True
    for b in range(num.shape[0] // 2):
        x = _ext_mul(list(num[2 * b]), list(den[2 * b + 1]), p, w)
        y = _ext_mul(list(num[2 * b + 1]), list(den[2 * b]), p, w)
        ok &= all((u + v) % p == 0 for u, v in zip(x, y)) and any(den[2 * b])
    return ok


def _agrees_with_numpy(F, first, out, steps=None) -> bool:
    """Whether the outputs of ``first``'s batch elements (a dense layer, or a
    jagged one folded along ``steps``) equal the plain NumPy pyramid of each
    element's own rows: every element where each has at most 2**16 rows,
    else the first, middle and last (the yardstick's uint64 temporaries)."""
    p, w = F.p, F.W
    canon = [(F if x.ndim == 1 else F.ext).decode(_host(x)).astype(np.uint64)
             for x in first.mles]
    got = [F.ext.decode(_host(x)) for x in (out.numerator, out.denominator)]
    if steps is None:
        nb, rows = 2**first.num_batch_variables, 2**first.num_row_variables
        counts = np.full(nb, rows)
    else:
        counts = np.asarray(_host(first.row_counts), np.int64)
        nb, rows = counts.size, int(counts.max())
    starts = np.cumsum(counts) - counts
    picks = range(nb) if rows <= 2**16 else sorted({0, nb // 2, nb - 1})
    for b in picks:
        lo = int(starts[b])
        part = [x[lo:lo + int(counts[b])] for x in canon]
        if steps is None:
            floor = _numpy_gkr.dense_pyramid(part, first.num_row_variables, p, w)[-1]
        else:  # this element's slots of each step: its own one-segment pyramid
            own = [(orc[b:b + 1], int(orc[b])) for orc in
                   (np.asarray(_host(step.row_counts)) for step in steps)]
            floor = _numpy_gkr.jagged_pyramid(part, counts[b:b + 1], own, p, w)[-1]
        want = [np.asarray(x).reshape(-1) for x in floor]  # n0, n1, d0, d1: one value each
        want = [np.pad(x, (0, 4 - x.size)) for x in want]  # a base value as an extension
        have = [got[0][2 * b], got[0][2 * b + 1], got[1][2 * b], got[1][2 * b + 1]]
        if not all(np.array_equal(h.astype(np.uint64), x) for h, x in zip(have, want)):
            return False
    return True


def _report(log, label, leaves, layers, dt, first, ok):
    nbytes = sum(x.nbytes for layer in layers for x in layer.mles)
    log(f"  {label:<34} {leaves:>9} leaves  {len(layers) - 1:>2} folds  {dt * 1e3:8.2f} ms  "
        f"({2 * leaves / dt / 1e6:8.1f} Mfrac/s, {nbytes / dt / 1e9:6.2f} GB/s; 1st call "
        f"{first * 1e3:.0f} ms)  check: {'OK' if ok else 'FAILED'}")


def _timed(backend, fn):
    """``(fn(), seconds of the fastest later call, seconds of the first)``:
    the first call compiles or loads the kernels it needs (every size its
    own), so the rate is a later call's.  The best of three: on the CPU a
    pyramid's layers arrive as fresh pages or as memory the allocator kept,
    and one call of the same work took 7.5 or 30 ms on the 2-core machine."""
    times = []
    for _ in range(4):
        _sync(backend)
        t0 = time.perf_counter()
        result = fn()
        _sync(backend)
        times.append(time.perf_counter() - t0)
    return result, min(times[1:]), times[0]


def _with_outputs(layers, extract):
    return layers, extract(layers[-1])


def run(backend: str, log) -> None:
    """Fold a dense and a jagged LogUp instance per field; check every batch sums to 0."""
    xp = _xp(backend)
    if backend == "numba" and os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        nbv, nrv = 2, 4  # the simulator runs one Python thread per CUDA thread
    else:
        nbv, nrv = (4, 20) if backend == "cupy" else (4, 16)
    nb = 2**nbv
    rng = np.random.default_rng(0)
    for F in (KoalaBear, BabyBear):
        dense = GkrLayer(*_lookup_leaves(F, [2**nrv] * nb, 1, xp), nbv, F)
        (layers, out), dt, t1 = _timed(backend, lambda: _with_outputs(
            build_pyramid(dense, backend=backend), extract_outputs))
        ok = _sums_vanish(F, out) and _agrees_with_numpy(F, dense, out)
        _report(log, f"{F!r} dense  nb={nb}", nb * 2**nrv, layers, dt, t1, ok)

        counts = rng.integers(1, 2**nrv + 1, size=nb)
        first = JaggedGkrLayer(*_lookup_leaves(F, counts, 2, xp), counts, F)
        schedule = halving_schedule(first)
        (jlayers, jout), dt, t1 = _timed(backend, lambda: _with_outputs(
            build_jagged_pyramid(first, schedule, backend=backend), extract_jagged_outputs))
        jok = _sums_vanish(F, jout) and _agrees_with_numpy(F, first, jout, schedule)
        _report(log, f"{F!r} jagged nb={nb}", int(counts.sum()), jlayers, dt, t1, jok)
        if not (ok and jok):
            raise SystemExit(f"LogUp-GKR demo check failed for {F!r} on backend {backend}")
