"""LogUp-GKR rows of ``python -m zorch_nb bench`` (see :mod:`zorch_nb.bench`).

Every row counts the bytes a kernel must move -- each input word read once,
each output word written once -- so its bandwidth compares with the copy
measured in the same process:

* dense fold in three field modes: base/base, base numerators over extension
  denominators (the LogUp case), extension/extension;
* jagged transition with 1024 segments of random counts (base and extension;
  below 1024 rows, one segment a row: the label names the count);
* whole dense and jagged pyramids against their *compulsory* bytes: the first
  layer read once and every later layer written once (a per-layer pyramid
  also re-reads every intermediate layer, which the fused GPU path avoids);
* dispatch overhead: one object-layer transition at L = 2**10;
* peak memory of ``build_pyramid`` (CuPy pool high-water mark on the GPU,
  tracemalloc on the CPU) against the first layer's bytes;
* on the CPU, every fold, jagged transition and pyramid written in plain
  NumPy uint64 (:mod:`._numpy_gkr`, the asv suite's yardstick too), and the
  base/base fold with galois ``GF(p)`` arrays, timed in the same run
  (``baselines``);
* on the CPU, for every fold: the fraction of copy with the fold and a copy
  of the same bytes timed alternately (``paired_fraction``, robust on a busy
  machine; the copy has the fold's footprint, so neither gains from a large
  last-level cache the other does not fit), and the
  byte rate with the data cache-resident (``in_cache_gbps``): the rate the
  arithmetic allows, which says whether memory or arithmetic bounds the fold;
* on the GPU (CuPy path), the same for data resident in L2 (``in_l2_gbps``,
  64 folds replayed from a captured CUDA graph).

Kernel rows call the kernel layer with preallocated outputs (steady state);
pyramid and dispatch rows go through the object layer, as a user would.  On
the CPU a pyramid row's time is that of layers arriving as fresh pages (see
:func:`_fresh_time`), and the row also times
``build_pyramid(first, out=...)`` (or its jagged twin) overwriting the layers
of an earlier pyramid (``reused_out_ms``): the same kernels without the
operating system zeroing fresh pages for every layer.  Both are the best of
``repeat`` calls.
"""
from __future__ import annotations

import functools

import numpy as np

from . import _numpy_gkr
from .fields import KoalaBear
from .logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                        halving_schedule, layer_transition)

F = KoalaBear
#: name -> (numerators extension, denominators extension)
MODES = {"base/base": (False, False), "base/ext": (False, True), "ext/ext": (True, True)}
JAGGED_SEGMENTS = 1024
DISPATCH_LOG2 = 10
#: Working set of the cache-resident fold (inputs and outputs): inside the
#: L2 caches of two cores of a machine with 2 MiB each, in L3 where L2 is
#: smaller (the report records the machine's cache sizes).
IN_CACHE_BYTES = 3 << 19
#: The GPU's: inside the H200's 50 MB L2 with room to spare, and launches of
#: such folds captured per CUDA graph.
IN_L2_BYTES = 24 << 20
IN_L2_CALLS = 64


def _words(xp, shape, seed):
    """Uniform words in ``[0, p)`` -- every one a valid Montgomery word --
    drawn where the array lives (host generation of 2**28 words is slow)."""
    if xp is np:
        return np.random.default_rng(seed).integers(0, F.p, size=shape, dtype=np.uint32)
    xp.random.seed(seed)
    return (xp.random.random(shape) * F.p).astype(np.uint32)


def _mles(xp, ne, de, n, seed=1):
    return [_words(xp, (n, 4) if e else (n,), seed + i) for i, e in enumerate((ne, ne, de, de))]


def _outputs(xp, ne, de, n):
    oe = ne or de
    shape = lambda e: (n, 4) if e else (n,)  # noqa: E731
    return [xp.empty(shape(e), dtype=np.uint32) for e in (oe, oe, de, de)]


def _nbytes(arrays) -> int:
    return int(sum(a.nbytes for a in arrays))


def jagged_counts(total: int, segments: int = JAGGED_SEGMENTS, seed: int = 3) -> np.ndarray:
    """``segments`` random row counts summing to ``total``.

    Each count is >= 1 when the total allows it; a total smaller than that
    (a tiny smoke-test size) gives ``total`` segments of one row and empty
    ones after them.
    """
    rng = np.random.default_rng(seed)
    raw = rng.random(segments) + 0.05
    counts = np.maximum(1, (raw / raw.sum() * total).astype(np.int64))
    counts[int(np.argmax(counts))] += total - int(counts.sum())
    # the clamp to 1 overshot and the largest count paid for it: below 0 where
    # the rows are too few for the segments, but also exactly 0 where they are
    # not (24 rows over 24 segments gave a 0 beside a 2)
    if counts.min() < 1:
        counts = (np.arange(segments) < total).astype(np.int64)
        counts[0] += max(0, total - segments)
    return counts.astype(np.int32)


# ---------------------------------------------------------------- CPU baselines

P = np.uint64(F.p)
W = np.uint64(F.params.w)


def galois_fold(n0, n1, d0, d1):
    """The same fold on galois ``GF(p)`` arrays."""
    num = n0 * d1 + n1 * d0
    den = d0 * d1
    return num[0::2], num[1::2], den[0::2], den[1::2]


def _galois_field():
    try:
        import galois
    except ImportError:
        return None
    return galois.GF(F.p)


# ---------------------------------------------------------------- rows

def rows(n, backend, repeat, xp, timer, sync, guard=None):
    """Every LogUp-GKR row at ``n`` leaves per MLE on ``backend``.

    ``guard(what, fn)`` runs one section and returns its rows; the bench
    passes one that records a failing section and carries on, so one broken
    kernel costs its rows, not the whole report (GPU time is scarce).
    """
    from ._backend import kernels_for

    guard = guard or (lambda what, fn: fn())
    kern = kernels_for(backend, "gkr")
    out = []
    for name, (ne, de) in MODES.items():
        out += guard(f"{backend} dense fold {name}",
                     lambda: _dense_fold_row(kern, name, ne, de, n, backend, repeat, xp, timer,
                                             sync))
    out += guard(f"{backend} jagged transitions",
                 lambda: _jagged_rows(kern, n, backend, repeat, xp, timer, sync))
    for name in ("base/base", "base/ext"):
        out += guard(f"{backend} dense pyramid {name}",
                     lambda: _dense_pyramid_row(name, n, backend, repeat, xp, timer, sync))
    out += guard(f"{backend} jagged pyramid",
                 lambda: _jagged_pyramid_row(n, backend, repeat, xp, timer, sync))
    out += guard(f"{backend} dispatch", lambda: _dispatch_row(backend, xp, sync))
    return out


def _dense_fold_row(kern, name, ne, de, n, backend, repeat, xp, timer, sync):
    """The dense fold of one mode (kernel layer, preallocated outputs)."""
    from .bench import MIN_FRACTION_LOG2, Row, _first_call, paired_cpu
    ins = _mles(xp, ne, de, n)
    outs = _outputs(xp, ne, de, n // 2)
    # the first call compiles the timed kernel: a tiny input on the GPU; the
    # full one on the CPU, where a tiny one runs the serial twin instead
    tiny_in, tiny_out = (ins, outs) if xp is np else (_mles(xp, ne, de, 2),
                                                      _outputs(xp, ne, de, 1))
    first = _first_call(lambda: kern.fold_dense(*tiny_in, *tiny_out, F.params), sync)
    t = timer(lambda: kern.fold_dense(*ins, *outs, F.params), repeat)
    row = Row(f"dense fold {name}", backend, n, t, _nbytes(ins + outs), first)
    if xp is np:
        _cpu_baselines(row, ins, repeat)
        # The same fold allocating its outputs, back to back, as the baselines
        # (galois, NumPy) allocate theirs: the speed-ups' fair yardstick (the
        # row's time, into preallocated outputs, flattered them: 2**22
        # base/base on one thread, 12.1x galois into out=, 6.7x allocating)
        row.extra["alloc_out_ms"] = round(1e3 * timer(
            lambda: kern.fold_dense(*ins, *_outputs(xp, ne, de, n // 2), F.params), repeat), 3)
        if n >= 1 << MIN_FRACTION_LOG2:  # smaller: launch-bound (see bench)
            # the CPU target's figure: fold and copy timed alternately
            tp, copy_gbps = paired_cpu(lambda: kern.fold_dense(*ins, *outs, F.params), row.bytes,
                                       max(3 * repeat, 15))
            row.extra["paired_copy_gbps"] = round(copy_gbps, 1)
            row.extra["paired_fold_gbps"] = round(row.bytes / tp / 1e9, 1)
            row.extra["paired_fraction"] = round(row.bytes / tp / 1e9 / copy_gbps, 3)
            row.extra["in_cache_gbps"] = round(_in_cache_gbps(kern, ne, de, repeat), 1)
    elif backend == "cupy":
        try:
            row.extra["in_l2_gbps"] = round(_in_l2_gbps(kern, ne, de, repeat, xp, timer), 1)
        except Exception as exc:  # a figure for the note, never worth the row
            row.extra["in_l2_error"] = f"{type(exc).__name__}: {exc}"
    return [row]


def _cache_resident(xp, ne, de, budget):
    """Inputs and outputs of the largest power-of-two fold within ``budget`` bytes."""
    per_leaf = _nbytes(_mles(np, ne, de, 2) + _outputs(np, ne, de, 1)) // 2
    n = 1 << (budget // per_leaf).bit_length() - 1
    return _mles(xp, ne, de, n), _outputs(xp, ne, de, n // 2)


def _in_cache_gbps(kern, ne, de, repeat):
    """The fold's byte rate when its data stays in the cores' caches.

    Memory then costs next to nothing, so this is the rate the arithmetic
    allows: where it is not well above the copy bandwidth, the fold is
    bounded by its arithmetic, not by memory.  The size is the largest power
    of two whose inputs and outputs fit in :data:`IN_CACHE_BYTES`.
    """
    from .bench import _time_cpu
    ins, outs = _cache_resident(np, ne, de, IN_CACHE_BYTES)
    # compiled (or loaded) first: at this size a parallel kernel the bench's
    # own size may not have used (small sizes run serial twins)
    kern.fold_dense(*ins, *outs, F.params)
    # the best single call of 32 per repeat (one lasts tens of microseconds):
    # a timing over all 32 calls took in any stall of a busy machine, and the
    # best of a few such timings still read 0.1 GB/s where one call ran at 11
    best = _time_cpu(lambda: kern.fold_dense(*ins, *outs, F.params), 32 * repeat)
    return _nbytes(ins + outs) / best / 1e9


def _in_l2_gbps(kern, ne, de, repeat, xp, timer):
    """The GPU twin of :func:`_in_cache_gbps`: the fold on data resident in L2.

    One such fold lasts a few microseconds, less than a launch from Python,
    so ``IN_L2_CALLS`` of them are captured into a CUDA graph and the graph
    is timed: back to back on the device, they show what the arithmetic and
    the kernel's own structure allow once DRAM is out of the way.
    """
    ins, outs = _cache_resident(xp, ne, de, IN_L2_BYTES)
    kern.fold_dense(*ins, *outs, F.params)  # compiled and loaded before the capture
    stream = xp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            for _ in range(IN_L2_CALLS):
                kern.fold_dense(*ins, *outs, F.params)
        except BaseException:
            # a capture left open would make CUDA refuse allocations for the
            # rest of the bench; ending it may fail too (an invalidated
            # capture), which must not hide the launch's own error
            try:
                stream.end_capture()
            except Exception:  # noqa: BLE001
                pass
            raise
        graph = stream.end_capture()
        t = timer(lambda: graph.launch(stream), repeat)
    return IN_L2_CALLS * _nbytes(ins + outs) / t / 1e9


def jagged_segments(n: int) -> int:
    """The jagged rows' segment count at ``n`` rows: :data:`JAGGED_SEGMENTS`,
    or one segment a row where the rows are fewer.

    Empty segments would turn a tiny layer into mostly padding: at 8 rows
    1016 of 1024 segments were empty, so the transition folded 8 segments
    under a "1024 seg." label, and the one-step "pyramid" wrote 1024 neutral
    rows from 8.
    """
    return min(n, JAGGED_SEGMENTS)


def _jagged_rows(kern, n, backend, repeat, xp, timer, sync):
    """Jagged transitions: 1024 segments (one a row below 1024 rows), random counts."""
    from .bench import Row, _first_call
    out = []
    segments = jagged_segments(n)
    counts = jagged_counts(n, segments)
    orc = ((counts.astype(np.int64) + 1) // 2).astype(np.int32)
    width = int(orc.sum())
    for name in ("base/base", "ext/ext"):
        ne, de = MODES[name]
        ins = _mles(xp, ne, de, n)
        outs = _outputs(xp, ne, de, width)
        prefix = xp.empty((2, segments), dtype=np.int64)
        rc_d, orc_d = xp.asarray(counts), xp.asarray(orc)
        call = lambda: kern.jagged_transition(rc_d, orc_d, prefix, *ins, *outs,  # noqa: E731
                                              F.params)
        first = _first_call(call, sync)  # compiles: kept out of the steady-state time
        t = timer(call, repeat)
        moved = _nbytes(ins + outs) + counts.nbytes + orc.nbytes + prefix.nbytes
        row = Row(f"jagged transition {name} ({segments} seg.)", backend, n, t, moved, first)
        if xp is np:
            _numpy_baseline(row, ins, lambda canon: _numpy_gkr.jagged_transition(
                canon, counts, orc, width, P, W), repeat)
        out.append(row)
    return out


def _dense_pyramid_row(name, n, backend, repeat, xp, timer, sync):
    """A whole dense pyramid against its compulsory bytes."""
    from .bench import Row, _first_call
    ne, de = MODES[name]
    first = GkrLayer(*_mles(xp, ne, de, n), 0)
    built = []
    # warm-up (compiles; its time is the row's first call) and the byte count
    first_s = _first_call(lambda: built.append(build_pyramid(first, backend=backend)), sync)
    layers = built.pop()
    compulsory = _nbytes(first.mles) + sum(_nbytes(la.mles) for la in layers[1:])
    build = functools.partial(build_pyramid, first, backend=backend)
    if xp is np:  # the same pyramid overwriting the layers of the one above: no fresh pages
        into = functools.partial(build, out=layers[1:])
        into()  # (its first call compiles the kernels that take `out`: not timed)
        reused = timer(into, repeat)
        del into  # (it holds the layers: the fresh calls start with none alive)
    del layers
    t = _fresh_time(build, repeat, timer) if xp is np else timer(build, repeat)
    row = Row(f"dense pyramid {name} (to floor)", backend, n, t, compulsory, first_s)
    row.extra["layers"] = first.num_row_variables
    if xp is np:
        row.extra["reused_out_ms"] = round(reused * 1e3, 3)
        _numpy_baseline(row, first.mles, lambda canon: _numpy_gkr.dense_pyramid(
            canon, first.num_row_variables, P, W), max(1, repeat // 2))
    if backend in ("cupy", "numba"):  # both GPU backends run the fused pyramid
        from .kernels.launch_config import gkr_pyramid_plan
        row.extra["launches"] = len(gkr_pyramid_plan(n // 2, first.num_row_variables,
                                                     name == "base/base"))
        row.extra["host_ms"] = _host_ms(build, sync)
    # both modes: base/base is the "about 2x the first layer" case
    # (its later layers halve), base/ext's are extension words (2.6x)
    row.extra.update(_peak_memory(build, xp, _nbytes(first.mles)))
    return [row]


def _jagged_pyramid_row(n, backend, repeat, xp, timer, sync):
    """A whole jagged pyramid (halving schedule) against its compulsory bytes."""
    from .bench import Row, _first_call
    segments = jagged_segments(n)
    jfirst = JaggedGkrLayer(*_mles(xp, False, True, n), jagged_counts(n, segments))
    schedule = halving_schedule(jfirst)
    if not schedule:  # n <= 1024: every segment holds one row, the layer is its floor
        print(f"  (no jagged pyramid at 2^{n.bit_length() - 1}: {segments} segments "
              f"over {n} rows are their own floor)", flush=True)
        return []
    built = []
    first_s = _first_call(
        lambda: built.append(build_jagged_pyramid(jfirst, schedule, backend=backend)), sync)
    layers = built.pop()
    compulsory = _nbytes(jfirst.mles) + sum(_nbytes(la.mles) for la in layers[1:])
    build = functools.partial(build_jagged_pyramid, jfirst, schedule, backend=backend)
    if xp is np:  # as for the dense pyramids
        into = functools.partial(build, out=layers[1:])
        into()
        reused = timer(into, repeat)
        del into
    del layers
    t = _fresh_time(build, repeat, timer) if xp is np else timer(build, repeat)
    row = Row(f"jagged pyramid base/ext ({segments} seg.)", backend, n, t, compulsory, first_s)
    row.extra["layers"] = len(schedule)
    if xp is np:
        row.extra["reused_out_ms"] = round(reused * 1e3, 3)
        _numpy_baseline(row, jfirst.mles, lambda canon: _numpy_gkr.jagged_pyramid(
            canon, jfirst.row_counts, schedule, P, W), max(1, repeat // 2))
    if backend in ("cupy", "numba"):  # chunks, single steps, the one-block tail (CuPy only)
        from .kernels.launch_config import gkr_jagged_launches, gkr_jagged_plan
        widths, tail = [s.width for s in schedule], backend == "cupy"
        chunked, start = gkr_jagged_plan(widths, tail)
        row.extra["launches"] = gkr_jagged_launches(widths, tail)
        row.extra["host_ms"] = _host_ms(build, sync)
        row.extra["chunked_layers"] = chunked
        row.extra["fused_tail_layers"] = len(schedule) - start
    return [row]


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    """The C library's ``malloc_trim`` (glibc), or None where it has none."""
    import ctypes
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # (TypeError: Windows)
        return None


def _fresh_time(build, repeat, timer):
    """Best of ``repeat`` CPU calls of ``build()`` (a pyramid, or a field op
    allocating its result) timed by ``timer``, each one's new arrays arriving
    as fresh pages that the operating system zeroes.

    That is what a user's call costs where the allocator holds no freed
    memory to hand back (a process's first pyramid, say).  Timed back to
    back, the calls would mostly time recycled memory instead: freeing a
    mapped block raises glibc's mmap threshold to its size (up to 32 MiB),
    so every smaller array comes from the heap next time, in pages its
    predecessor left mapped (2**22 base/base pyramid, one thread: 9-15 ms
    back to back, as fast as into ``out=``, where fresh pages take 18-21 ms;
    this row reported the former).  So each call starts with the heap's free
    memory handed back to the operating system (``malloc_trim``), and the
    result is freed after its timing, not within it (unmapping is not the
    call's cost).  Without glibc the calls may land on recycled memory.
    """
    from .bench import Timing
    trim = _malloc_trim()
    kept, samples = [], []
    for _ in range(repeat):
        if trim is not None:
            trim(0)
        samples.append(float(timer(lambda: kept.append(build()), 1)))
        kept.clear()
    return Timing.of(samples)


def _host_ms(fn, sync, calls=3):
    """Host time of one call of ``fn`` (ms, best of ``calls``, the device idle
    at each start): the row's event timer counts the host time before the
    first launch, and a row whose time nears this is host-bound."""
    import time
    sync = sync or (lambda: None)
    best = float("inf")
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    sync()
    return round(best * 1e3, 3)


def _dispatch_row(backend, xp, sync):
    """Dispatch overhead: one object-layer transition of a tiny layer."""
    from .bench import Row, _dispatch_time, _first_call
    small = GkrLayer(*_mles(xp, False, False, 1 << DISPATCH_LOG2), 0)
    first_s = _first_call(lambda: layer_transition(small, backend=backend), sync)
    t = _dispatch_time(lambda: layer_transition(small, backend=backend), sync)
    row = Row("dispatch: one transition base/base", backend, 1 << DISPATCH_LOG2, t,
              _nbytes(small.mles) * 3 // 2, first_s, vs_copy=False)
    row.extra["us_per_call"] = round(t * 1e6, 2)
    try:  # where the time goes: the object layer, the launcher's checks, the launch
        row.extra.update(_dispatch_parts(backend, xp, sync, small))
    except Exception as exc:  # the row above stands without its breakdown
        row.extra["parts_error"] = f"{type(exc).__name__}: {exc}"
    return [row]


def _dispatch_parts(backend, xp, sync, small):
    """Per-call times (us) of the pieces of a small transition: the launcher
    the object layer calls (``fold_dense_trusted``) on preallocated outputs,
    the kernel layer's checked ``fold_dense`` (what a direct caller pays),
    the output buffer with its four views, and on CuPy the kernel launched
    with the same arguments and nothing else (the floor a transition cannot
    go below)."""
    from . import _backend
    from .bench import _dispatch_time
    from .logup_gkr import _fresh_outputs
    kernels = _backend.kernels_for(backend, "gkr")
    half = small.numerator_0.shape[0] // 2
    ins = small.mles

    def fresh_outputs():  # as the object layer makes them: one buffer, four views
        return _fresh_outputs(xp, half, (False,) * 4)[1]
    outs = fresh_outputs()
    parts = {
        "launcher_us": _dispatch_time(
            lambda: kernels.fold_dense_trusted(0, *ins, *outs, F.params), sync),
        "checked_launcher_us": _dispatch_time(
            lambda: kernels.fold_dense(*ins, *outs, F.params), sync),
        "buffer_and_views_us": _dispatch_time(fresh_outputs, None),
    }
    if backend == "cupy" and xp is not np:
        from .kernels.gkr_cupy import _function, _vec
        from .kernels.launch_config import THREADS_PER_BLOCK, grid_for
        arrays = tuple(ins) + tuple(outs)
        fn = _function(F.params.name, "zorch_gkr_fold_dense", 0, _vec(arrays))
        args = arrays + (np.uint64(half),)
        parts["launch_only_us"] = _dispatch_time(
            lambda: fn((grid_for(half),), (THREADS_PER_BLOCK,), args), sync)
    return {k: round(v * 1e6, 2) for k, v in parts.items()}


def _cpu_baselines(row, ins, repeat):
    """The NumPy (and, base/base, galois) folds of ``ins`` into ``row.baselines``."""
    _numpy_baseline(row, ins, lambda canon: _numpy_gkr.dense_transition(canon, P, W), repeat)
    if ins[2].ndim == 1:  # galois has no extension field of this modulus
        _yardstick(row, lambda: _galois_baseline(row, ins, repeat))


def _numpy_baseline(row, ins, compute, repeat):
    """Time the plain NumPy ``compute(canonical values of ins)`` into ``row.baselines``.

    NumPy compiles nothing, so a warm-up would only double the cost; with
    extension values the yardstick takes 150-250x the kernel's time (20 s
    for the fold at 2**24), so it runs once.
    """
    def fill():
        canon = _canonical(ins)
        runs = 1 if any(x.ndim == 2 for x in canon) else repeat
        row.baselines["numpy uint64"] = _best(lambda: compute(canon), runs, warm=False)
    _yardstick(row, fill)


def _galois_baseline(row, ins, repeat):
    GF = _galois_field()
    if GF is None:
        row.extra["galois"] = "not importable: pip install 'zorch_nb[bench]'"
        return
    gf = [GF(x.astype(np.int64)) for x in _canonical(ins)]
    row.baselines["galois GF(p)"] = _best(lambda: galois_fold(*gf), max(1, repeat // 2))


def _yardstick(row, fill):
    """``fill()`` times yardsticks into ``row``; one that does not fit in memory
    (its uint64 copies are 2-4x the kernel's data, its temporaries more) is
    noted in the row, which keeps its own figures."""
    try:
        fill()
    except MemoryError as exc:
        row.extra["baseline_error"] = f"MemoryError: {exc}"


def _canonical(arrays):
    """The yardstick's inputs: canonical integers of Montgomery words, as uint64."""
    return [(F if x.ndim == 1 else F.ext).decode(x).astype(np.uint64) for x in arrays]


def _best(fn, repeat, warm=True):
    from .bench import _time_cpu
    if warm:
        fn()  # first call compiles (galois JIT); not timed
    return _time_cpu(fn, repeat)


def traced_peak(fn) -> int:
    """Peak bytes that ``fn()`` allocates on top of what exists (tracemalloc:
    NumPy's arrays included); the asv ``track_peak_bytes_*`` benchmarks too."""
    import tracemalloc
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _peak_memory(fn, xp, first_bytes):
    """High-water mark of the allocations ``fn`` makes, the arrays it returns
    included (on the CPU tracemalloc's: what Numba allocates inside a kernel,
    a jagged chunk's small scratch, is not seen)."""
    if xp is np:
        peak = traced_peak(fn)
    else:
        try:
            peak = _cupy_peak(fn)
        except Exception as exc:  # a CuPy without pool hooks must not stop the bench
            return {"peak_error": f"{type(exc).__name__}: {exc}"}
    # The first layer is alive throughout; the target is (first + peak) ~ 2x first.
    return {"peak_new_bytes": int(peak),
            "peak_total_over_first_layer": round((first_bytes + peak) / first_bytes, 3)}


def _cupy_peak(fn):
    import cupy
    from cupy.cuda import memory_hook

    class Peak(memory_hook.MemoryHook):
        name = "zorch_peak"

        def __init__(self):
            self.live = self.peak = 0

        def malloc_postprocess(self, **kw):
            self.live += kw["mem_size"]
            self.peak = max(self.peak, self.live)

        def free_postprocess(self, **kw):
            self.live -= kw["mem_size"]

    cupy.cuda.get_current_stream().synchronize()
    hook = Peak()
    with hook:
        fn()
        cupy.cuda.get_current_stream().synchronize()
    return hook.peak
