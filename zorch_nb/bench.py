"""``python -m zorch_nb bench``: kernels against same-process yardsticks.

GPU (``--device gpu``): every kernel's effective bandwidth (bytes read +
bytes written, divided by time) as a fraction of the device-to-device copy
bandwidth measured in the same process.  CPU (``--device cpu``): the same
bandwidth against a Numba streaming copy measured in the same process, plus
the speedup over a plain vectorized NumPy implementation (and galois where it
is installed).  Compile (first-call) time is reported apart from steady state
-- ``first_call_s``, the wall time of a row's first call, compile or on-disk
cache load included (on a GPU a tiny input for the kernel rows; on the CPU
the row's own input, since a tiny one runs a serial twin; the full input for
the pyramid rows); the timed repetitions come after it.  A kernel shared by
several rows compiles in the first of them.  A later size can still compile
kernels of its own (a row skipped at a smaller size, a path a small call
does not take), so the column shows whatever that call compiled or loaded.
A *second process* figure shows the start-up cost once the caches (Numba
``cache=True``, CuPy's kernel cache) are warm: the bench runs a tiny
subprocess twice, each importing zorch_nb and folding one small layer.

The copy ceiling is measured before and after the kernels and the faster run
is kept, so a quiet moment of a shared machine is not held against the
kernels measured in a noisy one.  Sizes below ``2**MIN_FRACTION_LOG2``
elements report times only: there a call costs microseconds of launch, not
bandwidth (and on the CPU a small call runs its serial twin while the copy
launches threads), so a fraction of the copy would be noise.  On CuPy the
three modes of the dense fold share one compiled module: its compile time
lands on the first mode's "1st call"; on the CPU each mode is its own
kernel, compiled (or loaded) on its own first call.
"""
from __future__ import annotations

import contextlib
import datetime
import functools
import json
import math
import os
import platform
import shlex
import stat
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from . import _backend
from .fields import KoalaBear


#: Smallest log2 size whose rows get a fraction of the copy (see the module doc).
MIN_FRACTION_LOG2 = 16

#: A row whose median sample is more than this many times its best is marked
#: ``~`` in the table: the samples disagreed, so the best is the least
#: disturbed call of an unsteady machine rather than a typical one.
UNSTEADY_MEDIAN = 1.5

#: A fraction above this is flagged in the table: the data stayed in a cache
#: the copy's did not fit, or the copy was timed in a busy moment.
SUSPECT_FRACTION = 1.5


@dataclass
class Row:
    """One measured kernel."""

    kernel: str
    backend: str
    size: int
    time_s: float
    bytes: int
    first_call_s: float | None = None  # None: not measured
    baselines: dict = field(default_factory=dict)  # name -> seconds
    gbps: float = 0.0
    fraction_of_copy: float | None = 0.0  # None: no bandwidth figure (see vs_copy)
    extra: dict = field(default_factory=dict)  # notes: launches, peak memory, ...
    #: False for rows that measure something else than bandwidth (the dispatch
    #: of a 2**10 layer): no fraction of the copy of the run's size
    vs_copy: bool = True
    #: the median and the slowest of the samples ``time_s`` is the best of, and
    #: how many there were; None where the time is not a :class:`Timing`
    median_s: float | None = None
    max_s: float | None = None
    samples: int | None = None

    def __post_init__(self):
        if isinstance(self.time_s, Timing):
            self.median_s, self.max_s = self.time_s.median, self.time_s.worst
            self.samples = self.time_s.samples
            self.time_s = float(self.time_s)

    def finish(self, copy_gbps: float | None) -> "Row":
        """Bandwidth and fraction of ``copy_gbps``; ``None`` (below
        ``MIN_FRACTION_LOG2``, launch-bound): the row reports its time only."""
        self.gbps = self.bytes / self.time_s / 1e9 if self.vs_copy and copy_gbps else None
        self.fraction_of_copy = None if self.gbps is None else self.gbps / copy_gbps
        return self


def busy(first_gbps: float, again_gbps: float, serial_gbps: float | None = None):
    """Why a size's figures cannot hold on an idle machine, or None.

    A run beside another busy process times the thread scheduler: every
    parallel call, the copy included, stretches alike, so the ratios can
    still look healthy.  The copies give it away: the copy timed before and
    after the size's kernels differing by more than ``SUSPECT_FRACTION``, or
    the parallel copy slower than one thread's copy of the same bytes
    (``serial_gbps``, CPU only) -- parallel threads waiting for their cores.
    """
    why = []
    if max(first_gbps, again_gbps) > SUSPECT_FRACTION * min(first_gbps, again_gbps):
        why.append(f"the copy ran at {first_gbps:.3g} GB/s before the kernels and "
                   f"{again_gbps:.3g} GB/s after them")
    best = max(first_gbps, again_gbps)
    if serial_gbps and best * 1.25 < serial_gbps:
        why.append(f"the parallel copy ({best:.3g} GB/s) ran slower than one thread's "
                   f"({serial_gbps:.3g} GB/s)")
    return "; ".join(why) or None


def _ratio(x: float) -> str:
    """A speed-up for the table: 1 decimal, 2 significant digits below 0.1 (a
    slowdown printed as "0.0x" said nothing)."""
    return f"{x:.1f}x" if x >= 0.1 else f"{x:.2g}x"


def _fmt(value, spec: str, width: int) -> str:
    """``value`` formatted, or blank where it was not measured (None / NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return " " * width
    return f"{value:>{width}{spec}}"


def _strict(obj):
    """``obj`` with NaN / infinity as None: the report is strict JSON (``null``)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


# ---------------------------------------------------------------- timers

class Timing(float):
    """The best of several timed samples, in seconds, which also carries
    their median (``median``), the slowest (``worst``) and their number
    (``samples``).

    The best is the row's figure -- what the hardware allows once nothing
    else is in the way -- and arithmetic on a ``Timing`` gives plain floats.
    The median and the slowest say how steady the machine was: a median far
    above the best means the samples disagreed, and the best is the figure
    least disturbed rather than a typical one.
    """

    median: float
    worst: float
    samples: int

    @classmethod
    def of(cls, samples) -> "Timing":
        """The ``Timing`` of a non-empty sequence of times in seconds."""
        ordered = sorted(samples)
        if not ordered:
            raise ValueError("samples: expected at least one time")
        timing = cls(ordered[0])
        timing.median = statistics.median(ordered)
        timing.worst = ordered[-1]
        timing.samples = len(ordered)
        return timing


def _time_cpu(fn, repeat: int) -> Timing:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return Timing.of(samples)


def _time_gpu(fn, repeat: int) -> Timing:
    import cupy
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    fn()
    samples = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return Timing.of(samples)


def _first_call(fn, sync=None) -> float:
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


def _dispatch_time(fn, sync, calls=200, rounds=5) -> Timing:
    """Host wall time per call of ``calls`` back-to-back calls (the best
    round, with the rounds' median and slowest).

    On the GPU this is what a small layer costs a caller: Python, argument
    handling and the launch, as long as the device keeps up.
    """
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - t0) / calls)
    return Timing.of(samples)


# ---------------------------------------------------------------- copy ceilings

@functools.lru_cache(maxsize=None)
def _numba_copy():
    from numba import njit, prange

    @njit(parallel=True)
    def copy(src, dst):
        for i in prange(src.shape[0]):
            dst[i] = src[i]
    return copy


def cpu_copy_gbps(n: int, repeat: int) -> Row:
    """Numba parallel streaming copy of ``4 n`` uint32 words (read + write bytes).

    Four MLEs' worth, as much as a base/base fold reads: at ``n = 2**22`` a
    copy of only ``n`` words (2 x 16 MiB) would still sit in a 32 MiB L3.
    """
    copy = _numba_copy()
    src = np.arange(4 * n, dtype=np.uint32)
    dst = np.empty_like(src)
    first = _first_call(lambda: copy(src, dst))
    t = _time_cpu(lambda: copy(src, dst), repeat)
    row = Row("copy (Numba streaming, 4n words)", "cpu", 4 * n, t, 2 * src.nbytes, first)
    # one thread's copy of the same bytes: the parallel copy falling below it
    # means its threads waited for their cores (see busy)
    serial = _time_cpu(lambda: np.copyto(dst, src), repeat)
    row.extra["serial_copy_gbps"] = round(2 * src.nbytes / serial / 1e9, 1)
    return row


def paired_cpu(fn, nbytes: int, repeat: int) -> tuple:
    """Best times of ``fn`` and of a copy moving the same ``nbytes`` (half
    read, half written), run alternately; returns ``(fn's time, copy GB/s)``.

    On a shared machine both then see the same quiet and busy moments; the
    ratio of the two best times is the robust fraction-of-copy figure.  The
    copy has the kernel's footprint: a fixed one (the table's ``4 n`` words)
    would fit a large last-level cache where an extension fold, 4x the
    bytes, does not.
    """
    copy = _numba_copy()
    src = np.arange(max(1, nbytes // 8), dtype=np.uint32)
    dst = np.empty_like(src)
    copy(src, dst)
    tf = tc = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        copy(src, dst)
        t2 = time.perf_counter()
        tf, tc = min(tf, t1 - t0), min(tc, t2 - t1)
    return tf, 2 * src.nbytes / tc / 1e9


def gpu_copy_gbps(n: int, repeat: int) -> Row:
    """Device-to-device copy of ``4 n`` uint32 words with cupy (read + write bytes).

    Four MLEs' worth, as on the CPU (:func:`cpu_copy_gbps`): the kernels move
    1.5 to 6 times the bytes of ``n`` words each way, and a copy of only ``n``
    words pays its launch and tail over fewer bytes, so the yardstick would
    read a few percent low and every fraction of it that much high.
    """
    import cupy
    src = cupy.arange(4 * n, dtype=cupy.uint32)
    dst = cupy.empty_like(src)
    t = _time_gpu(lambda: cupy.copyto(dst, src), repeat)
    # (no first call of its own: _time_gpu's untimed warm-up call is it)
    return Row("copy (device to device, 4n words)", "cupy", 4 * n, t, 2 * src.nbytes, None)


# ---------------------------------------------------------------- kernels

def _numpy_base_mul(a, b, p):
    return (a * b) % p


def field_rows(n: int, backend: str, repeat: int, xp, timer, sync):
    """Base and extension multiply (3 words of traffic per element word), the
    broadcast forms of the extension multiply, the inverses and the fused
    MLE folds.

    Each row times the call with a preallocated ``out=`` (steady state, as
    the kernel rows); ``fresh_out_ms`` is the same call allocating its
    result, what ``E.mul(a, b)`` costs: on the CPU each result comes in
    fresh pages the operating system zeroes on first touch, and is freed
    outside the timing (see :func:`._bench_gkr._fresh_time`; timed back to
    back, a result below glibc's mmap threshold landed in its predecessor's
    pages, and one above it counted its own unmapping).
    """
    from ._bench_gkr import _fresh_time
    rows = []
    F = KoalaBear

    def timed(call, out):
        t = timer(lambda: call(out=out), repeat)
        calls = max(1, repeat // 2)
        fresh = _fresh_time(call, calls, timer) if xp is np else timer(call, calls)
        return t, round(fresh * 1e3, 3)

    def random(E, shape, seed):
        if xp is np:
            return E.random(shape, seed=seed)
        # drawn on the device: E.random of 2**26 extension elements takes
        # ~6 s on the host, per backend, of the GPU machine's few minutes
        from ._bench_gkr import _words
        return _words(xp, (() if shape == () else (shape,)) + ((4,) if E.degree == 4 else ()),
                      seed)

    for E, name in ((F, "base mul"), (F.ext, "ext4 mul")):
        a = xp.asarray(random(E, n, seed=1))
        b = xp.asarray(random(E, n, seed=2))
        # the first call compiles (or loads) the kernel the row times: on the
        # CPU that takes the full input (a tiny one runs a serial twin, see
        # kernels/cpu_threads.sized); on the GPU a tiny input compiles it
        k = n if xp is np else 2
        first = _first_call(lambda: E.mul(a[:k], b[:k], backend=backend), sync)
        t, fresh = timed(lambda **kw: E.mul(a, b, backend=backend, **kw), xp.empty_like(a))
        row = Row(f"{name} (KoalaBear)", backend, n, t, 3 * a.nbytes, first)
        row.extra["fresh_out_ms"] = fresh
        if xp is np and E is F:
            try:  # the yardstick's uint64 copies may not fit where the kernel's data did
                ca = E.decode(a).astype(np.uint64)
                cb = E.decode(b).astype(np.uint64)
                row.baselines["numpy uint64"] = _time_cpu(
                    lambda: _numpy_base_mul(ca, cb, np.uint64(F.p)), repeat)
            except MemoryError as exc:
                row.extra["baseline_error"] = f"MemoryError: {exc}"
            finally:
                ca = cb = None
        rows.append(row)
    # The broadcast kernels: one extension element times n (read n, write n
    # elements), and base times extension elements (read 1 + 4, write 4 words)
    x = xp.asarray(random(F.ext, n, seed=3))
    r = xp.asarray(random(F.ext, (), seed=4))
    s = xp.asarray(random(F, n, seed=5))
    for name, u, v, nbytes in (("ext4 mul by one element", x, r, 2 * x.nbytes),
                               ("base x ext4 mul", s, x, s.nbytes + 2 * x.nbytes)):
        k = n if xp is np else 2  # (as above)
        first = _first_call(lambda: F.ext.mul(u[:k], v if v.ndim == 1 else v[:k],
                                              backend=backend), sync)
        t, fresh = timed(lambda **kw: F.ext.mul(u, v, backend=backend, **kw), xp.empty_like(x))
        row = Row(f"{name} (KoalaBear)", backend, n, t, nbytes, first)
        row.extra["fresh_out_ms"] = fresh
        rows.append(row)
    # The inverses (read n, write n elements): Montgomery's trick, per chunk
    # on the CPU and per thread on a GPU, compute-bound where Fermat inverts
    # each element; the call includes its zero check (one scan), so the
    # operand's zero words (0, p, 2p: ~5% odds at 2**26 random words) are
    # replaced by one first
    for E, name, u in ((F, "base inv", s), (F.ext, "ext4 inv", x)):
        u = xp.where(u % np.uint32(F.p) == 0, np.uint32(1), u)
        k = n if xp is np else 2  # (as above)
        first = _first_call(lambda: E.inv(u[:k], backend=backend), sync)
        t, fresh = timed(lambda **kw: E.inv(u, backend=backend, **kw), xp.empty_like(u))
        row = Row(f"{name} (KoalaBear)", backend, n, t, 2 * u.nbytes, first)
        row.extra["fresh_out_ms"] = fresh
        # the part of the time that is the zero check (one read of u by the
        # backend's first_zero kernel)
        row.extra["zero_check_ms"] = round(
            timer(lambda: E._raise_if_zero(u, "bench", backend), repeat) * 1e3, 3)
        rows.append(row)
    u = None  # (the copies' memory back before the next rows)
    # The conversions at the boundary to integers: encode reads 8-byte ints
    # and writes words, decode reads and writes words.  They take no
    # backend (NumPy arrays convert on the CPU, CuPy ones by CuPy's
    # kernels), so they have no Numba-CUDA rows.  The yardstick is the same
    # conversion in the array module's uint64 ops (on a device what the
    # object layer ran before its kernels: `%` is a software division there)
    if backend != "numba":
        p, r_inv = np.uint64(F.p), np.uint64(F.params.r_inv)
        vals = F.decode(s).astype(np.int64)
        for name, call, plain, nbytes in (
                ("encode int64", lambda v: F.encode(v), lambda: (vals.astype(np.uint64)
                                                                 << np.uint64(32)) % p,
                 vals.nbytes + s.nbytes),
                ("decode", lambda v: F.decode(v), lambda: (s.astype(np.uint64) * r_inv) % p,
                 2 * s.nbytes)):
            v = vals if name.startswith("encode") else s
            k = n if xp is np else 2  # (as above)
            first = _first_call(lambda: call(v[:k]), sync)
            row = Row(f"{name} (KoalaBear)", backend, n, timer(lambda: call(v), repeat),
                      nbytes, first)
            try:  # (the yardstick's uint64 temporaries may not fit)
                row.baselines[f"{xp.__name__} uint64"] = timer(plain, repeat)
            except MemoryError as exc:
                row.extra["baseline_error"] = f"MemoryError: {exc}"
            rows.append(row)
        vals = None
    # The fused MLE folds (one sumcheck round): read the n values, write
    # n / 2 results (extension words where either side is an extension)
    rb = xp.asarray(random(F, (), seed=8))
    for name, G, u, v, nbytes in (
            ("mle fold", F, s, rb, s.nbytes * 3 // 2),
            ("ext4 mle fold, base values", F.ext, s, r, s.nbytes * 3),
            ("ext4 mle fold", F.ext, x, r, x.nbytes * 3 // 2)):
        k = n if xp is np else 2  # (as above)
        first = _first_call(lambda: G.mle_fold(u[:k], v, backend=backend), sync)
        out = xp.empty((n // 2,) + ((4,) if G.degree == 4 else ()), np.uint32)
        t, fresh = timed(lambda **kw: G.mle_fold(u, v, backend=backend, **kw), out)
        row = Row(f"{name} (KoalaBear)", backend, n, t, nbytes, first)
        row.extra["fresh_out_ms"] = fresh
        if xp is np and G is F:
            try:  # lo + r (hi - lo) on canonical values in uint64
                cs, cr = F.decode(s).astype(np.uint64), np.uint64(F.decode(rb))
                p = np.uint64(F.p)
                row.baselines["numpy uint64"] = _time_cpu(
                    lambda: (cs[0::2] + cr * ((cs[1::2] + p - cs[0::2]) % p)) % p, repeat)
            except MemoryError as exc:
                row.extra["baseline_error"] = f"MemoryError: {exc}"
            finally:
                cs = None
        rows.append(row)
    # dispatch: a product of 8 elements through the object layer -- what a
    # small call costs beside the arithmetic (on the CPU a serial twin runs)
    u, v = xp.asarray(F.random(8, seed=6)), xp.asarray(F.random(8, seed=7))
    first = _first_call(lambda: F.mul(u, v, backend=backend), sync)
    t = _dispatch_time(lambda: F.mul(u, v, backend=backend), sync)
    row = Row("dispatch: base mul of 8 elements", backend, 8, t, 3 * u.nbytes, first,
              vs_copy=False)
    row.extra["us_per_call"] = round(t * 1e6, 2)
    rows.append(row)
    return rows


def graph_rows(n: int, backend: str, repeat: int, xp, timer, sync):
    """A graph buffer's commitment: the SHA-256 Merkle root of ``n`` words,
    hashed where the buffer is (Numba kernels on the CPU, CUDA C on the
    GPU; kernels/merkle_*.py), reading the buffer once.  On the CPU against
    one :mod:`hashlib` call per tree node, the former implementation (up to
    2**22 words: it hashes ~0.06 GB/s)."""
    from .graph_layout import _root_hashlib, merkle_root
    if xp is np:
        words = KoalaBear.random(n, seed=9)
    else:
        from ._bench_gkr import _words
        words = _words(xp, (n,), 9)
    first = _first_call(lambda: merkle_root(words), sync)
    row = Row("graph commitment (SHA-256 Merkle)", backend, n,
              timer(lambda: merkle_root(words), repeat), words.nbytes, first)
    if xp is np and n <= 1 << 22:
        data = memoryview(np.ascontiguousarray(words).view(np.uint8))
        row.baselines["hashlib per node"] = _time_cpu(
            lambda: _root_hashlib(data, 64, len(data)), max(1, repeat // 2))
    return [row]


def _gkr_rows(n, backend, repeat, xp, timer, sync, guard=None):
    try:
        from . import _bench_gkr
    except ImportError:
        return []
    return _bench_gkr.rows(n, backend, repeat, xp, timer, sync, guard)


class _Guard:
    """Runs one section of the bench; a failing section is recorded, not fatal.

    On the GPU machine every minute counts: one broken kernel should cost
    its own rows, not the report of every other kernel.
    """

    def __init__(self, progress=None):
        self.errors = []
        #: called with each section's rows (none if it failed) as it ends: the
        #: bench prints them and rewrites its JSON, so a run cut short (a
        #: time cap, a hung kernel) keeps every section it finished
        self.progress = progress

    def __call__(self, what, fn):
        try:
            rows = fn()
        except Exception as exc:  # noqa: BLE001 - reported in the table and the JSON
            msg = f"{what}: {type(exc).__name__}: {exc}"
            self.errors.append(msg)
            print(f"FAILED {msg}", file=sys.stderr)
            traceback.print_exc()
            rows = []
        if self.progress is not None:
            self.progress(rows)
        return rows


# ---------------------------------------------------------------- report

def _table(rows, copy_row) -> str:
    head = (f"{'kernel':<46} {'backend':<7} {'size':>10} {'time':>11} {'GB/s':>8} "
            f"{'of copy':>8} {'1st call':>9}  baselines")
    lines = [head, "-" * len(head)]
    suspect = unsteady = False
    unreliable = {}  # (the reasons, once each: every row of a busy size has one)
    small = any(r.vs_copy and r.fraction_of_copy is None for r in rows)
    for r in [copy_row] + rows:
        base = ", ".join([f"{k} {v * 1e3:.3g} ms (speedup {_ratio(v / r.time_s)})"
                          for k, v in r.baselines.items()]
                         + [f"{k}={v}" for k, v in r.extra.items() if k != "implausible"])
        first = _fmt(r.first_call_s, ".3f", 8) + ("s" if r.first_call_s is not None else " ")
        flag = " "
        if r.fraction_of_copy is not None and r.fraction_of_copy > SUSPECT_FRACTION:
            flag = "!"
        if "implausible" in r.extra:  # (the stronger mark: its footnote says why)
            flag = "?"
            unreliable[r.extra["implausible"]] = None
        suspect |= flag == "!"
        steady = " "
        if r.median_s is not None and r.median_s > UNSTEADY_MEDIAN * r.time_s:
            steady, unsteady = "~", True
        # a launch-bound size's copy is no yardstick: its rate is not shown
        gbps, fraction = (None, None) if small and r is copy_row else (r.gbps,
                                                                       r.fraction_of_copy)
        lines.append(f"{r.kernel:<46} {r.backend:<7} {r.size:>10} {r.time_s * 1e3:>8.3f} ms"
                     f"{steady}"
                     f"{_fmt(gbps, '.1f', 8)} {_fmt(fraction, '.2f', 7)}{flag} "
                     f"{first}  {base}")
    if small:
        lines.append(f"(below 2^{MIN_FRACTION_LOG2} elements a call is launch-bound: times "
                     f"only, no fraction of the copy)")
    if suspect:
        lines.append(f"! above {SUSPECT_FRACTION}x the copy: the data stayed in a cache the "
                     f"copy's did not fit, or the copy was timed in a busy moment")
    if unsteady:
        lines.append(f"~ the median call took more than {UNSTEADY_MEDIAN}x the best (the time "
                     f"shown): the machine was unsteady; median_s and max_s in the JSON")
    for why in unreliable:
        lines.append(f"? figures no idle machine gives (`implausible` in the JSON; the "
                     f"README's \"A busy machine\"): {why}; measure again on an idle machine")
    return "\n".join(lines)


#: Printed once at the start of a run: what the table's columns hold.
TABLE_LEGEND = (
    "columns: size = elements of each MLE (copy rows: uint32 words); time = the best of "
    "--repeat calls\n(ms); GB/s = bytes read + written / time; of copy = GB/s / the size's "
    "copy's; 1st call = the\nfirst call alone, compiling what no earlier row or input setup "
    "compiled (near 0: already compiled);\nthen baselines (their speedup = their time / "
    "ours) and extra figures (units[\"extra\"] in the JSON)")


SECOND_PROCESS = (
    # import (CuPy's too, where it runs), then the input made and on the device
    # untimed, then the first fold alone: its clock once held F.random's first
    # call and the host-to-device copy
    "import time; t0 = time.perf_counter(); import numpy as np; "
    "from zorch_nb import KoalaBear as F; from zorch_nb.logup_gkr import GkrLayer, "
    "layer_transition; import zorch_nb.logup_gkr as g; xp = {xp}; t1 = time.perf_counter(); "
    "x = xp.asarray(F.random(1024, seed=1)); {sync}; t2 = time.perf_counter(); "
    "layer_transition(GkrLayer(x, x, x, x, 0), backend={backend!r}); {sync}; "
    "t3 = time.perf_counter(); print('ZORCH_STARTUP', t1 - t0, t3 - t2)")


#: Seconds one start-up child may take (a cold one compiles: ~10-40 s).
SECOND_PROCESS_TIMEOUT_S = 120


def second_process(backend: str, xp_name: str) -> dict:
    """Start-up of a fresh process (import, first fold), run twice.

    Both runs find the on-disk caches this bench filled (its own process
    compiled the same kernels first), so they time a later process's start,
    not a cold compile (the rows' "1st call" is that): the first run may
    still read the cache files from disk, the second finds them in the
    operating system's file cache -- what every later process pays.  The
    fold's input is made (and copied to the device) before its clock starts.
    """
    sync = ("import cupy; cupy.cuda.get_current_stream().synchronize()"
            if xp_name == "cupy" else "pass")
    code = SECOND_PROCESS.format(xp=xp_name if xp_name == "np" else "__import__('cupy')",
                                 backend=backend, sync=sync)
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        try:  # a hung child must not eat the GPU machine's time cap
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 timeout=SECOND_PROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"backend": backend,
                    "error": [f"no result within {SECOND_PROCESS_TIMEOUT_S} s"]}
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            return {"backend": backend, "error": res.stderr.strip().splitlines()[-1:]}
        # the marked line: anything else the child prints (Numba debug output,
        # warnings on stdout) is not ours to parse
        marked = [ln.split()[1:] for ln in res.stdout.splitlines()
                  if ln.startswith("ZORCH_STARTUP ")]
        if not marked:
            return {"backend": backend, "error": ["no ZORCH_STARTUP line in the output"]}
        imp, fold = (float(v) for v in marked[-1])
        runs.append({"wall_s": round(wall, 3), "import_s": round(imp, 3),
                     "first_fold_s": round(fold, 4)})
    return {"backend": backend, "first_run": runs[0], "warm_cache_run": runs[1]}


def _startup_line(s: dict) -> str:
    """One :func:`second_process` record as a sentence of the report."""
    head = f"second process ({s.get('backend')}): "
    if "error" in s:
        return head + "failed: " + " ".join(s["error"])
    a, b = s.get("first_run"), s.get("warm_cache_run")
    if a is None or b is None:
        return head + "not measured"
    return (head + f"import {a['import_s']:.2f} s, first fold {a['first_fold_s']:.3f} s "
            f"(wall {a['wall_s']:.2f} s); again, caches warm: import {b['import_s']:.2f} s, "
            f"first fold {b['first_fold_s']:.3f} s (wall {b['wall_s']:.2f} s)")


def _device_name(device: str) -> str:
    if device == "gpu":
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"{_cpu_model()} ({os.cpu_count()} cores)"


#: Version of the report's layout (the keys below and each row's fields).
REPORT_SCHEMA = 1
#: What each key of a row's ``extra`` holds (the table prints them after the
#: baselines; a key missing here is a test failure).
REPORT_EXTRA = {
    "implausible": "why the row's figures are not what an idle machine gives (another "
                   "process was busy on these cores; or the run stopped before the size's "
                   "second copy could check)",
    "serial_copy_gbps": "copy rows: one thread's copy (np.copyto) of the same words, GB/s; a "
                        "parallel copy below it means its threads waited for their cores",
    "fresh_out_ms": "field rows: the same call allocating its result (no out=), ms; on the "
                    "CPU in fresh pages (the heap trimmed first, the result freed after the "
                    "timing)",
    "alloc_out_ms": "CPU dense fold rows: the same fold allocating its outputs, timed back "
                    "to back as the baselines are, ms (the galois target's figure)",
    "zero_check_ms": "inverse rows: the part of the time that is the check for zero "
                     "elements (one read of the input), ms",
    "us_per_call": "dispatch rows: microseconds per call, the best of several rounds of "
                   "back-to-back calls",
    "launcher_us": "dispatch rows: the launcher the object layer calls "
                   "(fold_dense_trusted), us per call",
    "checked_launcher_us": "dispatch rows: the kernel layer's checked fold_dense, what a "
                           "direct caller pays, us per call",
    "buffer_and_views_us": "dispatch rows: allocating the output buffer and its four views, "
                           "us per call",
    "launch_only_us": "dispatch rows (CuPy): the bare RawKernel launch with the same "
                      "arguments, the floor of a transition, us per call",
    "parts_error": "dispatch rows: why the parts above could not be timed",
    "paired_copy_gbps": "CPU dense folds: the copy, timed alternately with the fold "
                        "(both in the same moments of a shared machine), GB/s",
    "paired_fold_gbps": "CPU dense folds: the fold in those alternating rounds, GB/s",
    "paired_fraction": "CPU dense folds: paired_fold_gbps / paired_copy_gbps, the CPU "
                       "target's figure",
    "in_cache_gbps": "CPU dense folds: the fold on data that stays in the caches, GB/s: "
                     "the rate its arithmetic allows",
    "in_l2_gbps": "CuPy dense folds: the fold on data resident in the GPU's L2, GB/s",
    "in_l2_error": "CuPy dense folds: why in_l2_gbps could not be measured",
    "layers": "pyramid rows: the layers built below the first",
    "reused_out_ms": "CPU pyramid rows: the pyramid built into the layers of a previous "
                     "one (out=), ms",
    "launches": "GPU pyramid rows: kernel launches per pyramid",
    "host_ms": "GPU pyramid rows: host time of one call, ms (a row whose time nears it is "
               "host-bound)",
    "chunked_layers": "GPU jagged pyramids: the layers built by the chunked kernel",
    "fused_tail_layers": "GPU jagged pyramids: the layers built by the one-block tail",
    "peak_new_bytes": "pyramid rows: the high-water mark of what the call allocates, the "
                      "layers it returns included, bytes",
    "peak_total_over_first_layer": "pyramid rows: (first layer + peak_new_bytes) / first "
                                   "layer",
    "peak_error": "pyramid rows: why the peak could not be measured",
    "galois": "rows with a galois baseline: why it is missing",
    "baseline_error": "why a baseline could not run (its copies did not fit in memory)",
}

#: What the report's numbers count.
REPORT_UNITS = {
    "time_s": "seconds per call, the best of --repeat (first_call_s: the first call alone)",
    "median_s": "seconds per call, the median of the samples time_s is the best of (max_s: "
                "the slowest; samples: how many); null where not recorded",
    "bytes": "bytes read plus bytes written by one call",
    "gbps": "bytes / time_s / 1e9",
    "fraction_of_copy": "gbps / the gbps of the same size's copy row (sizes >= 2^16)",
    "size": "kernel rows: the elements n of each MLE; copy rows: the uint32 words "
            "copied, 4 n",
    "baselines": "seconds per call of each baseline (speedup = baseline / time_s)",
    # (a dict in the JSON: each key a row's ``extra`` may hold, and its meaning)
    "extra": REPORT_EXTRA,
}



def _cpu_caches() -> list:
    """``[{"level", "type", "size"}, ...]`` of CPU 0's caches (Linux sysfs;
    empty elsewhere): in-cache rows and the fractions of small sizes depend
    on them."""
    caches = []
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for name in sorted(os.listdir(root)):
            if name.startswith("index"):
                fields = {}
                for key in ("level", "type", "size"):
                    with open(os.path.join(root, name, key)) as fh:
                        fields[key] = fh.read().strip()
                caches.append(fields)
    except (OSError, ValueError):
        return []
    return caches


def _load_average():
    """The 1-minute load average (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux; ``platform`` elsewhere,
    which on Linux says only "x86_64")."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _software(device: str) -> dict:
    """What produced the report: versions, the code's commit, threads."""
    import numba

    from . import __version__
    info = {"zorch_nb": __version__, "commit": _commit(), "numpy": np.__version__,
            "numba": numba.__version__, "numba_threads": numba.get_num_threads()}
    if device == "gpu":
        import cupy
        for key, get in (("cupy", lambda: cupy.__version__),
                         ("cuda_runtime", lambda: cupy.cuda.runtime.runtimeGetVersion()),
                         ("cuda_driver", lambda: cupy.cuda.runtime.driverGetVersion())):
            try:
                info[key] = get()
            except Exception:  # (a stand-in CuPy; a record is not worth the run)
                info[key] = None
    return info


def _commit(here: str | None = None) -> str | None:
    """The git commit of the imported code (a checkout; None for an install),
    with ``+dirty`` when tracked files differ from it."""
    here = here or os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        lines = rev.stdout.splitlines()  # (a path may hold spaces)
        # only this project's checkout: an install in a virtualenv kept inside
        # the user's own repository would otherwise report that repository
        if rev.returncode or len(lines) != 2 or os.path.realpath(lines[0]) != \
                os.path.realpath(os.path.dirname(here)):
            return None
        # (and this project's: a zorch_nb folder vendored at another repository's top)
        ours = subprocess.run(["git", "-C", here, "ls-files", "--error-unmatch",
                               "../kernels/launch_config.py"], capture_output=True, timeout=10)
        if ours.returncode:
            return None
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10)
        return lines[1] + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _nothing_to_plot(rows) -> str | None:
    """Why ``rows`` make no chart (no bandwidth row), or None."""
    if any(r.fraction_of_copy is not None for r in rows):
        return None
    return (f"no row has a fraction of the copy (sizes below 2^{MIN_FRACTION_LOG2} report "
            f"times only)")


#: The chart's largest fraction of the copy: longer bars are cut there.
PLOT_CAP = 2.5


def plot(rows, copies, path: str, title: str) -> None:
    """Bar chart of each bandwidth row's fraction of its size's copy, to
    ``path``; ``copies``: the run's copy rows (or one).  Rows the bench
    flagged as measured beside a busy process are drawn hatched, in grey."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'zorch_nb[bench]'")
    copies = [c for c in (copies if isinstance(copies, (list, tuple)) else [copies]) if c]
    rows = [r for r in rows if r.fraction_of_copy is not None]  # bandwidth rows only
    labels = [f"{r.kernel}\n[{r.backend}, n={r.size}]" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    busy_rows = [bool(r.extra.get("implausible")) for r in rows]
    # A busy machine's outliers (25x) set the axis and left the bars near 1
    # as slivers: bars past PLOT_CAP are cut there and carry their value.
    values = [r.fraction_of_copy for r in rows]
    bars = ax.barh(range(len(rows)), [min(v, PLOT_CAP) for v in values], color=[
        "tab:gray" if b else "tab:blue" for b in busy_rows])
    for i, v in enumerate(values):
        if v > PLOT_CAP:
            ax.text(PLOT_CAP, i, f"{v:.3g} (cut) ", va="center", ha="right", fontsize=7,
                    bbox={"facecolor": "white", "alpha": 0.85, "linewidth": 0})
    for bar, b in zip(bars, busy_rows):
        if b:
            bar.set_hatch("//")
    if any(busy_rows):
        bars[busy_rows.index(True)].set_label("measured beside a busy process: not reliable")
    paired = [(i, r.extra["paired_fraction"]) for i, r in enumerate(rows)
              if "paired_fraction" in r.extra]
    if paired:  # the fold timed alternately with the copy (see paired_cpu)
        ax.plot([min(v, PLOT_CAP) for _, v in paired], [i for i, _ in paired], "D",
                color="tab:orange",
                label="timed alternately with a copy of its own bytes")
    if paired or any(busy_rows):
        ax.legend(loc="lower right", fontsize=8)
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xlim(0, min(PLOT_CAP, max(values + [v for _, v in paired] + [1.0])) * 1.05)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    # (a launch-bound size's copy is no yardstick: the table hides its rate too)
    speeds = sorted({f"{c.gbps:.0f}" for c in copies if c.gbps is not None
                     and c.size >= 2**MIN_FRACTION_LOG2}, key=float)
    ax.set_xlabel("fraction of the copy bandwidth of the same size in the same run"
                  + ("" if not speeds else f" ({speeds[0]} GB/s)" if len(speeds) == 1 else
                     f" ({speeds[0]}-{speeds[-1]} GB/s across the sizes)"))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _json_sink(path: str) -> str:
    """How the report reaches ``--json path``: "stdout" (``-``, or a name of
    this process's standard output: /dev/stdout, /dev/fd/1, the file it is
    redirected to), "stream" (a pipe, FIFO or device, anything under /dev or
    /proc: written once, at the end, appended -- rewritten after every
    section, a pipe held a document per section, and replacing a file behind
    /dev/fd/N cut it from the shell's redirection) or "file" (replaced whole
    after every section, see :func:`_replace_file`)."""
    if path == "-":
        return "stdout"
    try:
        st = os.stat(path)
    except OSError:  # a new file (or a link to one)
        return "file"
    try:
        if os.path.samestat(st, os.fstat(sys.stdout.fileno())):
            return "stdout"
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file descriptor
        pass
    real = os.path.realpath(path)
    if not stat.S_ISREG(st.st_mode) or real.startswith(("/dev/", "/proc/")):
        return "stream"
    return "file"


def _temporary_beside(target: str) -> str:
    """The temporary name a report written to ``target`` goes through: short
    (``target + ".tmp"`` was past the 255-byte limit of a long valid name)
    and this process's own."""
    return os.path.join(os.path.dirname(target), f".zorch-bench-{os.getpid()}.tmp")


def _replace_file(path: str, text: str) -> None:
    """Write ``text`` to the regular file ``path`` (or where its link points)
    whole: through a temporary beside it, so a kill mid-write leaves the last
    report, not a truncated one; an existing file keeps its permissions."""
    target = os.path.realpath(path)  # (replacing the link itself left its target stale)
    tmp = _temporary_beside(target)
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        try:
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        except FileNotFoundError:
            pass
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _output_problem(path: str, what: str, sink: str = "file"):
    """Why ``path`` cannot be written (checked before any measuring), or None.
    A stream is opened for appending, and closed, unless it is a pipe or a
    socket (whose reader would see the end of its input)."""
    if os.path.isdir(path):
        return f"{what} {path!r} is a directory; give a file name"
    if sink != "file":
        try:
            mode = os.stat(path).st_mode
            if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
                open(path, "a").close()
        except OSError as exc:
            return f"{what} {path!r} cannot be written: {_os_reason(exc)}"
        return None
    if path.endswith((os.sep, "/")):  # ("out/" named a folder: realpath made it a file)
        return f"{what} {path!r} ends with a separator, a folder's name; give a file name"
    given = os.path.dirname(path) or "."
    if not os.path.isdir(given) and os.path.isdir(os.path.dirname(os.path.realpath(path))):
        # ("nodir/../x.json": realpath drops the folder that does not exist)
        return f"{what} {path!r}: the folder {given!r} does not exist"
    target = os.path.realpath(path)  # (what the writer replaces: a link's target)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        return (f"{what} {path!r}: {parent!r} is a file, not a folder"
                if os.path.exists(parent) else
                f"{what} {path!r}: the folder {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        return f"{what} {path!r}: the folder {parent!r} is not writable"
    # (the probe below has a short name of its own: a name past the file
    # system's limit passed it and failed only when the report was written)
    name = os.fsencode(os.path.basename(target))
    try:
        limit = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(name) > limit:
        return (f"{what} {path!r}: its name is {len(name)} bytes, past the folder's file "
                f"system limit of {limit}")
    # os.access trusts the mode bits, which root passes everywhere (/proc, a
    # read-only mount): create the file the writer will create beside it
    probe = _temporary_beside(target)
    try:
        open(probe, "w").close()
        os.remove(probe)
    except OSError as exc:
        return f"{what} {path!r} cannot be written: {_os_reason(exc)}"
    return None


def _same_file(a: str, b: str) -> bool:
    """Whether two output names reach one file (existing or not)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


#: Peak resident memory of one ``--device cpu`` size, for the check before
#: measuring: ``CPU_PEAK_BASE_BYTES + CPU_PEAK_BYTES_PER_ELEMENT * 2**lg``.
#: Measured (/usr/bin/time, maximum RSS of ``--sizes lg --repeat 1``): 0.26,
#: 0.70 and 2.11 GB at 2^16, 2^20 and 2^22, ~458 bytes per element (the
#: NumPy yardsticks' uint64 copies and the extension layers) over ~0.23 GB;
#: with a margin.  A size past the memory is otherwise killed by the OOM
#: killer, silently, minutes in.
CPU_PEAK_BASE_BYTES = 300 << 20
CPU_PEAK_BYTES_PER_ELEMENT = 500


def _available_memory(root="/"):
    """Bytes of memory available to a new allocation now, or None where unknown:
    Linux's MemAvailable (else the free pages), capped by the room left under
    this process's cgroup memory limits (a container's: /proc/meminfo shows
    the host's memory, and past the limit the OOM killer ends the run)."""
    avail = None
    try:
        with open(os.path.join(root, "proc/meminfo")) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None and root == "/":
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    room = _cgroup_room(root)
    if room is None:
        return avail
    return room if avail is None else min(avail, room)


def _cgroup_room(root="/"):
    """Bytes left under the tightest cgroup memory limit over this process,
    or None where there is none (see :func:`._backend.cgroup_memory_limits`)."""
    limits = _backend.cgroup_memory_limits(root)
    return max(0, min(limit - used for limit, used in limits)) if limits else None


def _memory_problem(sizes):
    """Why the largest CPU size would not fit in memory, or None."""
    avail = _available_memory()
    if avail is None:
        return None
    need = lambda lg: CPU_PEAK_BASE_BYTES + CPU_PEAK_BYTES_PER_ELEMENT * (1 << lg)  # noqa: E731
    big = [lg for lg in sizes if need(lg) > avail]
    if not big:
        return None
    fits = max((lg for lg in range(1, 64) if need(lg) <= avail), default=None)
    return (f"--sizes {big[0]} needs about {need(big[0]) / 2**30:.1f} GiB of memory on the "
            f"CPU (~{CPU_PEAK_BYTES_PER_ELEMENT} bytes per element at its peak) and "
            f"{avail / 2**30:.1f} GiB are available: "
            + (f"the largest size that fits is {fits}" if fits else "no size fits"))


def _print_failures(errors) -> None:
    """The run's failures again at its end, under a header: each was printed
    where it happened too, among the tables (a user took the repeat for a
    second failure)."""
    if errors:
        n = len(errors)
        print(f"\n{n} failure{'' if n == 1 else 's'} in this run, all listed here (those met "
              f"while measuring were printed then too):", file=sys.stderr)
        for msg in errors:
            print(f"FAILED {msg}", file=sys.stderr)


def _os_reason(exc: OSError) -> str:
    """``exc`` without its file name (the user gave another: a temporary's, a
    probe's)."""
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)


def _plot_problem(path: str):
    """Why ``--plot path`` would fail after the run (matplotlib, format), or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return "--plot needs matplotlib: pip install 'zorch_nb[bench]'"
    formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
    formats.pop("pgf", None)  # needs a LaTeX install, found missing only when saving
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in formats:
        return (f"--plot {path!r}: the file name must end in one of "
                f"{', '.join('.' + f for f in sorted(formats))}")
    return None


def main(args) -> int:
    device = args.device
    # ascending, so a size that does not fit ends the run after every smaller one
    # (2^22 on the CPU: a 2^20 fold's 24 MiB fit in a large L3, which the copy's
    # figure would then not describe)
    sizes = sorted(set(args.sizes or ([26] if device == "gpu" else [22])))
    # --json to standard output ("-", /dev/stdout): one document, written at
    # the end, and the tables go to stderr -- else the stream is not JSON
    sink = _json_sink(args.json) if args.json else None
    json_stdout = sink == "stdout"
    problems = [p for p in (args.json and not json_stdout
                            and _output_problem(args.json, "--json", sink),
                            args.plot and (_output_problem(args.plot, "--plot")
                                           or _plot_problem(args.plot))) if p]
    if args.json and args.plot and not json_stdout and _same_file(args.json, args.plot):
        problems.append(f"--json and --plot name the same file ({args.json!r}): the plot "
                        f"would overwrite the report")
    if device == "cpu":
        problems += [p for p in (_memory_problem(sizes),) if p]
    if args.plot and max(sizes) < MIN_FRACTION_LOG2:
        problems.append(f"--plot draws fractions of the copy, which sizes below "
                        f"2^{MIN_FRACTION_LOG2} do not have (launch-bound: times only); add a "
                        f"size of at least {MIN_FRACTION_LOG2}")
    if problems:  # before minutes of measuring, not after
        for p in problems:
            print(p, file=sys.stderr)
        return 2
    argv = getattr(args, "argv", None)
    argv = sys.argv[1:] if argv is None else list(argv)
    if device == "gpu":
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            print(f"--device gpu needs CuPy and a CUDA GPU ({exc}); "
                  "pip install 'zorch_nb[cuda12]' or '[cuda13]'",
                  file=sys.stderr)
            return 2
        xp, timer = cupy, _time_gpu
        sync = cupy.cuda.get_current_stream().synchronize
        # (in order, once each: `--backends cupy cupy` measured twice)
        backends = list(dict.fromkeys(getattr(args, "backends", None) or ["cupy", "numba"]))
    else:
        xp, timer, sync, backends = np, _time_cpu, None, ["cpu"]
    software = _software(device)
    all_rows = []
    copies = []
    startup = []
    # rows of the size being measured, finished against its first copy until
    # the size ends (then against the better of its two copies)
    pending, current = [], {}

    def progress(rows) -> None:
        copy_row = current.get("copy")
        if copy_row is not None and rows:
            for r in rows:
                r.finish(copy_row.gbps if current["fractions"] else None)
            pending.extend(rows)
        write_json()  # a failed section too: its error is in the report at once
        if copy_row is not None and rows:  # the rows (their notes come with the size's table)
            print("\n".join(_table(rows, copy_row).splitlines()[3:3 + len(rows)]), flush=True)

    guard = _Guard(progress)

    # asked once, up front: after a kernel fault the CUDA context is gone, and
    # the report must still be written
    device_name = _device_name(device)

    config: dict = {}
    load_at_start = _load_average()
    threads = software["numba_threads"]
    where = ", ".join([device_name] + ([f"{threads} Numba thread{'s' * (threads != 1)}"]
                                       if device == "cpu" else [])
                      + [datetime.date.today().isoformat()])

    def report() -> dict:
        if not config:  # once, after the first section: its kernels started the threading layer
            from ._config import show_config
            config.update(show_config("dicts"))
        return {
            "schema": REPORT_SCHEMA,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device_name,
            "units": REPORT_UNITS,
            # what the fractions depend on beside the kernels (CPU rows: the
            # caches a size fits in; any row: other work on the machine)
            "cpu_caches": _cpu_caches(),
            "load_average": {"start": load_at_start, "end": _load_average()},
            "command": getattr(args, "prog", "python -m zorch_nb") + " " + shlex.join(argv),
            "python": sys.version.split()[0],
            "software": software,
            "copy": [asdict(c) for c in copies + ([current["copy"]] if "copy" in current else [])],
            "results": [asdict(r) for r in all_rows + pending],
            "second_process": startup,
            "errors": guard.errors,
            "config": config,  # zorch_nb.show_config(): threads, vector width, devices, caches
        }

    json_failed = []
    real_stdout = sys.stdout

    def write_json(final: bool = False) -> None:  # after every section: a cut run keeps it
        if json_stdout:
            if final:
                json.dump(_strict(report()), real_stdout, indent=1, allow_nan=False)
                real_stdout.write("\n")
                real_stdout.flush()
            return
        if args.json and not json_failed and (final or sink == "file"):
            text = json.dumps(_strict(report()), indent=1, allow_nan=False) + "\n"
            try:
                if sink == "file":
                    _replace_file(args.json, text)
                else:
                    with open(args.json, "a") as fh:
                        fh.write(text)
            except OSError as exc:  # a full disk, /dev/full: measuring goes on
                json_failed.append(True)
                msg = f"--json {args.json!r} could not be written: {_os_reason(exc)}"
                guard.errors.append(msg)
                print(f"FAILED {msg}", file=sys.stderr)

    def measure() -> None:
        print(f"zorch_nb bench on {where}\n{TABLE_LEGEND}\n", flush=True)
        for lg in sizes:
            n = 1 << lg
            measure_copy = gpu_copy_gbps if device == "gpu" else cpu_copy_gbps
            try:
                copy_row = measure_copy(n, args.repeat)
            except MemoryError as exc:  # nothing at this size or above can run
                msg = (f"2^{lg} elements do not fit in memory: the copy yardstick failed "
                       f"({exc}); this size and larger ones skipped")
                guard.errors.append(msg)
                print(f"FAILED {msg}", file=sys.stderr)
                break
            first_gbps = copy_row.bytes / copy_row.time_s / 1e9
            current.update(copy=replace(copy_row).finish(first_gbps),
                           fractions=lg >= MIN_FRACTION_LOG2)
            rate = (f"copy {current['copy'].gbps:.3g} GB/s" if lg >= MIN_FRACTION_LOG2
                    else "launch-bound: times only")
            print(f"2^{lg}: {rate}; each section as it ends (the table after the size is "
                  f"final):", flush=True)
            rows = []
            for backend in backends:
                rows += guard(f"{backend} field ops",
                              lambda: field_rows(n, backend, args.repeat, xp, timer, sync))
                rows += _gkr_rows(n, backend, args.repeat, xp, timer, sync, guard)
            # (hashed where the array is: by CuPy's CUDA C kernels on the GPU)
            rows += guard("graph commitments",
                          lambda: graph_rows(n, "cpu" if xp is np else "cupy", args.repeat,
                                             xp, timer, sync))
            try:
                again = measure_copy(n, args.repeat)
            except Exception as exc:  # a faulted device context: keep the rows measured
                msg = f"2^{lg}: the second copy failed ({type(exc).__name__}: {exc})"
                guard.errors.append(msg)
                print(f"FAILED {msg}", file=sys.stderr)
                again = copy_row
            again_gbps = again.bytes / again.time_s / 1e9
            if again.time_s < copy_row.time_s:
                again.first_call_s = copy_row.first_call_s
                copy_row = again
            copy_row.finish(copy_row.bytes / copy_row.time_s / 1e9)
            for r in rows:
                r.finish(copy_row.gbps if lg >= MIN_FRACTION_LOG2 else None)
            # Below MIN_FRACTION_LOG2 the parallel copy is launch-bound, slower
            # than one thread's by design: only the two copies are compared
            # there (a stall of a busy machine showed as a 60x slower copy, and
            # the sizes' times went into the report unmarked).
            why = busy(first_gbps, again_gbps, copy_row.extra.get("serial_copy_gbps")
                       if lg >= MIN_FRACTION_LOG2 else None)
            if why:
                for r in [copy_row] + rows:
                    r.extra["implausible"] = "another process was busy on these cores: " + why
            # the size's rows join the report before its pending copies go (an
            # interrupt in between duplicates rows, never loses them) and
            # before the table, whose print can block on a pipe (tee)
            all_rows.extend(rows)
            copies.append(copy_row)
            pending.clear()
            current.clear()
            write_json()
            print(_table(rows, copy_row))
            print()
        startup.extend(second_process(b, "cupy" if device == "gpu" else "np") for b in backends)
        for s_ in startup:
            print(_startup_line(s_))
            if "error" in s_:
                guard.errors.append(f"{s_['backend']} second process: {' '.join(s_['error'])}")

    try:
        with contextlib.redirect_stdout(sys.stderr if json_stdout else sys.stdout):
            measure()
    except (KeyboardInterrupt, BrokenPipeError) as exc:
        # `timeout -s INT` (gpu_run.sh), or the reader of the tables went away
        # (`| head`): keep what was measured, and say the run was cut
        broken = isinstance(exc, BrokenPipeError)
        if broken and json_stdout:  # (the report's own stream is the one gone)
            raise
        guard.errors.append(("stopped: standard output was closed (a broken pipe)"
                             if broken else "interrupted") + (
                                 ": the JSON holds every section finished before (the size "
                                 "in progress against its first copy)" if args.json else ""))
        for r in pending:  # busy() needs the size's second copy
            if r.fraction_of_copy is not None:
                r.extra.setdefault("implausible", "not checked: interrupted before the "
                                                  "size's second copy")
        write_json(final=True)
        _print_failures(guard.errors)
        if broken:  # main stops quietly, as after any broken pipe
            raise
        return 130
    try:  # the chart first, so that the report's errors name a chart not drawn
        empty = args.plot and _nothing_to_plot(all_rows)
        if empty:
            guard.errors.append(f"--plot {args.plot!r} not drawn: {empty}")
        elif args.plot:
            try:
                plot(all_rows, copies, args.plot, f"zorch_nb bench — {where}")
            except OSError as exc:  # a full disk: say what was not written
                guard.errors.append(f"--plot {args.plot!r} not written: {_os_reason(exc)}")
    finally:
        write_json(final=True)
    _print_failures(guard.errors)
    return 1 if guard.errors else 0
