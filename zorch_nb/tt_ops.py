"""Functional layer of the uniform Tucker tensor trains (``ut3_*`` functions).

Every function takes (and returns) the ``.data`` tuple of a
:class:`zorch_nb.tt.UniformTuckerTensorTrain`::

    (tucker_supercore, tt_supercore, shape, (tucker_edge_mask, tt_edge_mask))

and masks its input on entry, so the padding may hold anything finite or not.
See :mod:`zorch_nb.tt` for the data model and the compile-cache rule.
"""
import collections.abc
import concurrent.futures
import contextlib
import fractions
import functools
import importlib
import io
import math
import numbers
import os
import sys
import threading
import warnings
import zipfile
import zlib

import numpy as np

from zorch_nb.kernels import launch_config as _config
from zorch_nb.kernels import tt_kernels as _k

from . import _backend
from ._ints import is_int
from .tt_masks import KERNELS, UT3Masks, _refuse_masked, array_module

__all__ = [
    "ut3_check", "ut3_from_t3", "ut3_to_t3", "ut3_to_dense", "ut3_apply_masks",
    "ut3_reverse", "ut3_squash_tails", "ut3_stack", "ut3_unstack", "ut3_add", "ut3_sub",
    "ut3_neg", "ut3_scale", "ut3_hadamard", "ut3_inner", "ut3_norm", "ut3_orthogonalize",
    "ut3_svd", "ut3_entries", "ut3_apply", "ut3_save", "ut3_load", "t3_to_dense",
    "t3_from_dense", "ORTHOGONALIZE_KINDS", "NORM_METHODS", "TrainOverflowError",
    "ut3_compact",
]

ORTHOGONALIZE_KINDS = ("tucker_down", "tt_up", "left", "right")
_FORMAT_VERSION = 1

# Run the Numba kernels for NumPy supercores.  When False, NumPy supercores
# take the array-module path that CuPy supercores take (the tests use this to
# check that path without a GPU).
_NUMBA_CPU = True


def _use_numba(xp):
    return _NUMBA_CPU and xp is np


# ---------------------------------------------------------------------------
# unpacking, validation, masking
# ---------------------------------------------------------------------------

class _Parts:
    """A validated train with its stack flattened to one axis ``S``.

    ``U (d, S, n, N)`` and ``G (d, S, r, n, r)`` live on the array module
    ``xp``; ``mk (d, S, n)`` and ``mt (d + 1, S, r)`` are host bool copies.
    """

    __slots__ = ("xp", "U", "G", "shape", "masks", "stack", "mk", "mt")

    def __init__(self, xp, U, G, shape, masks, stack, mk, mt):
        self.xp, self.U, self.G, self.shape, self.masks = xp, U, G, shape, masks
        self.stack, self.mk, self.mt = stack, mk, mt

    @property
    def d(self):
        return self.U.shape[0]

    @property
    def S(self):
        return self.U.shape[1]

    @property
    def n(self):
        return self.U.shape[2]

    @property
    def N(self):
        return self.U.shape[3]

    @property
    def r(self):
        return self.G.shape[2]


def ut3_check(data, name="data"):
    """Validate a ``.data`` tuple and return it normalized.

    Returns
    -------
    tuple
        ``(tucker_supercore, tt_supercore, shape, masks)`` with ``shape`` a
        tuple of Python ints and ``masks`` a :class:`UT3Masks`.

    Raises
    ------
    TypeError, ValueError
        With a message naming the offending argument.
    """
    if not isinstance(data, tuple) or len(data) != 4:
        raise TypeError(
            f"Argument `{name}` must be a 4-tuple (tucker_supercore, tt_supercore, shape, masks), "
            f"not {type(data).__name__}{'' if not isinstance(data, tuple) else ' of length %d' % len(data)}."
        )
    U, G, shape, masks = data
    xp = array_module(U, "tucker_supercore")
    if array_module(G, "tt_supercore") is not xp:
        raise TypeError("Arguments `tucker_supercore` and `tt_supercore` must live on the same array module.")
    for arr, nm in ((U, "tucker_supercore"), (G, "tt_supercore")):
        if arr.dtype.kind == "f" and arr.dtype.itemsize in (4, 8) and not arr.dtype.isnative:
            # NumPy prints '>f8' for a byte-swapped float64: say what differs
            raise TypeError(f"Argument `{nm}` must have dtype float32 or float64 in native byte "
                            f"order, not {arr.dtype.str} (byte-swapped); pass "
                            f"`{nm}.astype({arr.dtype.str[1:]!r})`.")
        if arr.dtype not in (np.float32, np.float64):
            raise TypeError(f"Argument `{nm}` must have dtype float32 or float64, not {arr.dtype}.")
    if U.dtype != G.dtype:
        raise TypeError(
            f"Arguments `tucker_supercore` and `tt_supercore` must have the same dtype, not {U.dtype} and {G.dtype}."
        )
    if U.ndim < 3:
        raise ValueError(f"Argument `tucker_supercore` must have shape (d,) + stack + (n, N), not {U.shape}.")
    d, stack, (n, N) = U.shape[0], tuple(U.shape[1:-2]), U.shape[-2:]
    if 0 in U.shape or 0 in G.shape:  # an empty stack or a rank-0 padding has no train
        raise ValueError(f"Arguments `tucker_supercore` {U.shape} and `tt_supercore` {G.shape} "
                         f"must have no zero-length axis (d, stack, n, N, r >= 1).")
    if G.ndim != U.ndim + 1 or G.shape[:-3] != (d,) + stack or G.shape[-2] != n or G.shape[-3] != G.shape[-1]:
        raise ValueError(
            f"Argument `tt_supercore` must have shape {(d,) + stack + ('r', n, 'r')} to match "
            f"`tucker_supercore` of shape {U.shape}, not {G.shape}."
        )
    if not isinstance(shape, (tuple, list, np.ndarray)) or getattr(shape, "ndim", 1) != 1 \
            or not all(is_int(s) for s in shape):
        # (a 1-d integer NumPy array is a sequence of ints as well)
        raise TypeError(f"Argument `shape` must be a tuple of ints, not {shape!r}.")
    shape = tuple(int(s) for s in shape)
    if len(shape) != d or any(s < 1 or s > N for s in shape):
        raise ValueError(f"Argument `shape` must be {d} ints in [1, {N}] (the padded N), not {shape}.")
    if not isinstance(masks, UT3Masks):
        if not isinstance(masks, (tuple, list)) or len(masks) != 2:
            raise TypeError(
                "Argument `masks` must be a UT3Masks or a pair (tucker_edge_mask, tt_edge_mask), "
                f"not {type(masks).__name__}."
            )
        # the Tucker mask against the supercores first: UT3Masks alone can only
        # judge each mask by the other, and blamed `tt_edge_mask` for a bad
        # `tucker_edge_mask`
        tk_shape = getattr(masks[0], "shape", None)
        if tk_shape is not None and tuple(tk_shape) != (d,) + stack + (n,):
            raise ValueError(
                f"Argument `tucker_edge_mask` must have shape {(d,) + stack + (n,)} for these "
                f"supercores, not {tuple(tk_shape)}."
            )
        masks = UT3Masks(*masks)
    r = G.shape[-1]
    if masks[0].shape != (d,) + stack + (n,) or masks[1].shape != (d + 1,) + stack + (r,):
        raise ValueError(
            f"Argument `masks` must hold masks of shapes {(d,) + stack + (n,)} and {(d + 1,) + stack + (r,)} "
            f"for these supercores, not {masks[0].shape} and {masks[1].shape}."
        )
    return (U, G, shape, masks)


def _parts(data, name="data"):
    U, G, shape, masks = ut3_check(data, name)
    xp = array_module(U)
    d, stack = U.shape[0], tuple(U.shape[1:-2])
    S = int(np.prod(stack, dtype=np.int64))
    U = U.reshape((d, S) + U.shape[-2:])
    G = G.reshape((d, S) + G.shape[-3:])
    mk = np.array(masks[0]).reshape(d, S, -1)
    mt = np.array(masks[1]).reshape(d + 1, S, -1)
    return _Parts(xp, U, G, shape, masks, stack, mk, mt)


def _pack(xp, U, G, shape, mk, mt, stack):
    """Unflatten the stack and wrap the masks: the inverse of :func:`_parts`."""
    d = U.shape[0]
    U = xp.ascontiguousarray(U.reshape((d,) + stack + U.shape[-2:]))
    G = xp.ascontiguousarray(G.reshape((d,) + stack + G.shape[-3:]))
    masks = UT3Masks(mk.reshape((d,) + stack + mk.shape[-1:]), mt.reshape((d + 1,) + stack + mt.shape[-1:]))
    return (U, G, tuple(shape), masks)


def _float64_retry(check_result):
    """Decorate ``op(data, ...)``: a float32 train whose computation met inf or
    NaN (:func:`_overflowed`) is computed once more in float64 and the result
    rounded to float32.

    float32 runs out of exponent long before float64, and the float32 BLAS /
    LAPACK kernels are where the faults of :func:`_matmul` and
    :func:`_finite_svd` were seen (a CI run here met an inf in ``ut3_svd`` of
    a small float32 train whose products cannot overflow, after both guards
    held: a product's *finite* garbage is not detected).  NumPy's own
    float32 loops have shown it too: in 2 of ~140 instrumented runs of the
    tt tests one pytest worker got NaN from :func:`_repair_xp` (where, einsum,
    sqrt; no BLAS) on finite inputs, for seconds (once in two tests 23 s
    apart), and the same inputs, saved, gave finite frames in a fresh process
    (cause not found; rounding mode and FTZ/DAZ were the defaults).  The retry costs
    nothing on the usual path.  With ``check_result`` a result that does not
    fit float32 (inf after rounding) is refused with the first error, as an
    overflow of the train; without it (the norm) inf is the answer.
    """
    def decorate(op):
        @functools.wraps(op)
        def run(data, *args, **kwargs):
            try:
                return op(data, *args, **kwargs)
            except TrainOverflowError as first:
                U, G, shape, masks = ut3_check(data)  # (op checked it: no error here)
                if U.dtype != np.float32:
                    raise
                xp = array_module(U)
                try:
                    wide = op((U.astype(np.float64), G.astype(np.float64), shape, masks),
                              *args, **kwargs)
                except TrainOverflowError:
                    raise first from None
                result = _to_float32(wide)
                if check_result and not _finite(xp, *_float_arrays(result)):
                    raise first from None
                return result
        return run
    return decorate


def _to_float32(x):
    """``x`` (an op's result: arrays in nested tuples) with float64 arrays
    rounded to float32; masks, shapes and other leaves as they are."""
    if isinstance(x, UT3Masks):
        return x
    if isinstance(x, tuple):
        return tuple(_to_float32(v) for v in x)
    if getattr(x, "dtype", None) == np.float64:
        return x.astype(np.float32)
    return x


def _float_arrays(x):
    """The float32 arrays of ``x`` (an op's rounded result), in a flat list."""
    if isinstance(x, UT3Masks):
        return []
    if isinstance(x, tuple):
        return [a for v in x for a in _float_arrays(v)]
    return [x] if getattr(x, "dtype", None) == np.float32 else []


def _physical_mask(shape, N):
    """``(d, N)`` host bool: True where ``o < shape[i]``."""
    return np.arange(N)[None, :] < np.asarray(shape)[:, None]


def _masked(p):
    """Return ``(U, G)`` with every padding slot set to zero (NaN-safe)."""
    xp = p.xp
    mk = xp.asarray(p.mk)
    mt = xp.asarray(p.mt)
    phys = xp.asarray(_physical_mask(p.shape, p.N))
    U = xp.where(mk[..., :, None] & phys[:, None, None, :], p.U, 0)
    G = xp.where(
        mt[:-1, :, :, None, None] & mk[:, :, None, :, None] & mt[1:, :, None, None, :], p.G, 0
    )
    return U.astype(p.U.dtype, copy=False), G.astype(p.G.dtype, copy=False)


def _prefix(count, size):
    """Host bool mask whose first ``count`` slots (per batch entry) are True."""
    return np.arange(size) < np.asarray(count)[..., None]


def _pair_mask(left, right):
    """Flattened outer product of two host masks ``(..., p)``, ``(..., q)``."""
    return (left[..., :, None] & right[..., None, :]).reshape(left.shape[:-1] + (-1,))


def _check_same(p, q, what, need_n=True):
    if p.shape != q.shape:
        raise ValueError(f"Arguments of `{what}` must have the same shape, not {p.shape} and {q.shape}.")
    if p.stack != q.stack:
        raise ValueError(
            f"Arguments of `{what}` must have the same stack_shape, not {p.stack} and {q.stack}."
        )
    if need_n and p.N != q.N:
        raise ValueError(f"Arguments of `{what}` must have the same padded N, not {p.N} and "
                         f"{q.N}; re-pad one, e.g. UniformTuckerTensorTrain.from_t3(t.to_t3(), "
                         f"N={max(p.N, q.N)}).")
    if p.xp is not q.xp:
        raise TypeError(f"Arguments of `{what}` must live on the same array module.")


def _kernel_array(a, dtype=None):
    """``a`` as a C-contiguous, aligned, writeable NumPy array for a Numba kernel.

    Numba types a read-only (``np.frombuffer``, ``mmap_mode='r'``,
    ``broadcast_to``) or unaligned array as another type than a writeable
    one and compiles the cached kernel a second time for it, while the
    structure cache counts a hit.  Such an input is copied (once per call)
    instead; the kernels never write into these arrays, so the caller's
    array is never touched either way.
    """
    a = np.ascontiguousarray(a, dtype=dtype)
    if not (a.flags.writeable and a.flags.aligned):
        a = a.copy()
    return a


def _tables(p):
    tk_idx, tk_cnt = _k.mask_index_table(p.mk)
    tt_idx, tt_cnt = _k.mask_index_table(p.mt)
    return tk_idx, tk_cnt, tt_idx, tt_cnt


# ---------------------------------------------------------------------------
# the stack split over threads (Numba kernels)
# ---------------------------------------------------------------------------
# The per-structure kernels release the GIL (nogil=True) and compute a range
# of stack elements, each element by the same code whatever the range: a
# call above TT_CPU_SERIAL_WORK (kernels/launch_config.py) splits the stack
# into one contiguous range per thread (as many threads as Numba's parallel
# kernels would use), each with its own scratch -- for to_dense up to one
# train's widest partial product per thread -- and gives the bytes of one
# serial call.  Smaller calls -- a manifold optimizer's few trains -- run on
# the calling thread and create no pool and no thread (a hand-off costs
# ~0.05-0.1 ms on 2 cores).  No Numba threading layer is started, so the
# split works in a forked child and on the workqueue layer; the pool is
# created on first use and anew in a forked child.

_pool = None
_pool_lock = threading.Lock()


def _after_fork_in_child():
    # the parent's workers do not exist in a forked child (an inherited
    # executor would queue work that no thread runs); its lock may be held
    global _pool, _pool_lock, _blas_lock, _blas_users
    _pool, _pool_lock = None, threading.Lock()
    # forked while a parent's thread ran an op under _one_blas_thread: no
    # thread here will leave it, so the child gets its BLAS setting back now
    _blas_lock = threading.Lock()
    if _blas_users:
        _blas_users = 0
        try:
            _blas_saved.restore_original_limits()
        except Exception:  # (a child keeps going on one BLAS thread, not fails)
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _cpu_threads():
    """Threads Numba's parallel kernels would use on this thread.

    ``numba.get_num_threads()`` (which honours ``numba.set_num_threads``)
    once Numba's threading layer runs -- asking earlier would start it --
    else ``NUMBA_NUM_THREADS``."""
    import numba
    from numba.np.ufunc import parallel
    if getattr(parallel, "_is_initialized", False):
        return numba.get_num_threads()
    return numba.config.NUMBA_NUM_THREADS


_in_chunks = threading.local()  # .active: a thread of _by_chunks (which splits its own)


def _stack_threads(n_stack, work):
    """Threads for a kernel call over ``n_stack`` elements of ``work``
    multiply-adds in all: 1 up to ``TT_CPU_SERIAL_WORK``, or within a chunk
    of :func:`_by_chunks` (already split over the threads: a nested split
    would wait on the pool its own range occupies)."""
    if (work <= _config.TT_CPU_SERIAL_WORK or n_stack < 2
            or getattr(_in_chunks, "active", False)):
        return 1
    return max(1, min(_cpu_threads(), n_stack))


def _thread_pool():
    """The module's worker pool, created on first use (``NUMBA_NUM_THREADS - 1``
    workers: the calling thread computes one range itself)."""
    global _pool
    pool = _pool
    if pool is None:  # (RuntimeError at interpreter shutdown: the caller runs serially)
        with _pool_lock:
            if _pool is None:
                import numba
                workers = max(1, numba.config.NUMBA_NUM_THREADS - 1)
                _pool = concurrent.futures.ThreadPoolExecutor(workers, "zorch_nb_tt")
            pool = _pool
    return pool


def _run_stack(kernel, n_stack, work, args, scratch):
    """``kernel(*args, *scratch(), s_begin, s_end)`` over ``[0, n_stack)``.

    ``scratch()`` allocates one scratch set.  Above ``TT_CPU_SERIAL_WORK``
    (``work`` estimates the call's multiply-adds) the stack is split into
    contiguous ranges (sizes differing by at most one), one per thread; the
    calling thread computes the first.  Every range has run, or has raised,
    before this returns; an exception of any range propagates.
    """
    threads = _stack_threads(n_stack, work)
    if threads <= 1:
        kernel(*args, *scratch(), 0, n_stack)
        return
    bounds = [n_stack * t // threads for t in range(threads + 1)]
    sets = [scratch() for _ in range(threads)]  # (a MemoryError here: nothing submitted)
    futures, finished = [], False
    try:
        try:
            pool = _thread_pool()
            for t in range(1, threads):
                futures.append(pool.submit(kernel, *args, *sets[t], bounds[t], bounds[t + 1]))
        except RuntimeError:  # interpreter shutdown: no new threads, no new futures
            pass
        kernel(*args, *sets[0], bounds[0], bounds[1])
        for t in range(len(futures) + 1, threads):  # the ranges no worker took
            kernel(*args, *sets[t], bounds[t], bounds[t + 1])
        finished = True
    finally:
        # no worker may still write into out (or raise unseen) after we return:
        # on an error (a Ctrl-C included) the ranges not started are dropped,
        # the running ones waited for
        if not finished:
            for f in futures:
                f.cancel()
        interrupted = None
        while True:
            try:
                concurrent.futures.wait(futures)
                break
            except KeyboardInterrupt as exc:  # workers finish in ms: wait, then raise it
                interrupted = exc
        if interrupted is not None:
            raise interrupted
    for f in futures:
        f.result()


_blas = None  # threadpoolctl's controller of the loaded BLAS; False: not installed
_blas_users = 0  # calls inside _one_blas_thread (the first sets, the last restores)
_blas_lock = threading.Lock()
_blas_saved = None


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS and LAPACK on one thread inside, where threadpoolctl is installed.

    Why: the train ops' LAPACK and BLAS calls are many small ones (a 380 x 28
    SVD, a 32 x 512 times 512 x 32 product), which OpenBLAS's own threads
    slow down (the SVD: 220 us on one thread, 450 us on two, 2-core AMD
    EPYC), and the ops split their stacks over threads themselves, on which
    OpenBLAS's threads would contend.  The setting is the process's: the
    first of concurrent callers sets it, the last restores it."""
    global _blas, _blas_users, _blas_saved
    if _blas is None:
        try:
            import threadpoolctl
            # SciPy's own BLAS (Numba's np.linalg calls it) loads with
            # scipy.linalg, which the first Numba kernel call imports: loaded
            # first, the controller sees it too
            importlib.import_module("scipy.linalg")
            with warnings.catch_warnings():  # (its notes on OpenMP runtimes: not ours)
                warnings.simplefilter("ignore")
                _blas = threadpoolctl.ThreadpoolController().select(user_api="blas")
        except Exception:  # (not installed, or a library it cannot read)
            _blas = False
    if not _blas:
        yield
        return
    with _blas_lock:
        if _blas_users == 0:
            _blas_saved = _blas.limit(limits=1)  # (set now; restored by the last user)
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                _blas_saved.restore_original_limits()


def _stack_chunks(p):
    """``[(lo, hi), ...]``: the ranges of the flat (NumPy) stack that
    :func:`_by_chunks` computes apart, or the whole stack.

    Chunks keep one core's slab (a TT core of each element, or a Tucker
    core) within ``TT_CPU_CHUNK_BYTES``, in an even number of equal ranges
    (sizes differing by at most one; an odd count's last chunk left a
    thread idle: the svd of a sum of 24 trains at n = 16, r = 32 on 2
    cores, 118-119 ms in three chunks, 91-92 in four).  A stack within one
    chunk runs as its two halves where its SVD work reaches
    ``TT_CPU_SPLIT_WORK``.  Never the thread count: the chunks decide the
    bits."""
    S = p.S
    per = max(math.prod(p.G.shape[2:]), math.prod(p.U.shape[2:])) * p.G.dtype.itemsize
    size = max(1, _config.TT_CPU_CHUNK_BYTES // max(per, 1))
    count = -(-S // size) if S else 1
    if count == 1:
        if S < 2 or _chunks_work(p) < _config.TT_CPU_SPLIT_WORK:
            return [(0, S)]
        count = 2
    count += count % 2
    return [(S * t // count, S * (t + 1) // count) for t in range(count)]


def _chunks_work(p):
    """The SVD work of a stack's sweep, in ``TT_CPU_SERIAL_WORK``'s units: one
    left unfolding of each core of each element (:func:`_svd_work`)."""
    return p.S * p.d * _svd_work(max(p.r * p.n, 1), max(p.r, 1))


def _by_chunks(p, compute):
    """``compute(q)`` on the chunks ``q`` of the stack of ``p``
    (:func:`_stack_chunks`), its results -- host arrays with the stack on
    axis 1 -- put together.  The chunks are split over the threads as the
    kernels' stacks are (:func:`_run_stack`; LAPACK, BLAS, NumPy's loops and
    the frame repair run without the GIL), each computed alone: the chunks,
    not the threads, decide every bit.

    Why chunks: a sweep's steps make several temporaries of a whole core
    slab (the SVD's factors, a copy of the unfolding, the products).  A
    slab of a large stack is past glibc's ``mmap`` threshold, so each
    temporary is fresh pages, which the kernel faults in and zeroes: an SVD
    of 64 trains at n = 16, r = 32 (8 MiB slabs) met ~57 000 page faults, a
    quarter of its time on the 2-core AMD EPYC VM.  Chunks of ~1 MiB reuse
    the heap (and the caches).  The stack elements are independent, so only
    what each step leaves out as padding of every element (:func:`_frame`)
    depends on the chunks."""
    if p.xp is not np:
        return compute(p)
    with _one_blas_thread():
        return _chunks_on_threads(p, compute, _stack_chunks(p))


def _chunks_on_threads(p, compute, chunks):
    if len(chunks) == 1:
        return compute(p)
    out = []
    lock = threading.Lock()

    def run(begin, end):  # chunks [begin, end), one after another
        was = getattr(_in_chunks, "active", False)
        _in_chunks.active = True  # a chunk's own SVD batches stay on its thread
        try:
            for lo, hi in chunks[begin:end]:
                part = compute(_Parts(p.xp, p.U[:, lo:hi], p.G[:, lo:hi], p.shape, None,
                                      (hi - lo,), p.mk[:, lo:hi], p.mt[:, lo:hi]))
                with lock:  # the first chunk done gives the dtypes (float64 on a retry)
                    if not out:
                        out.extend(np.empty(a.shape[:1] + (p.S,) + a.shape[2:], dtype=a.dtype)
                                   for a in part)
                for whole, a in zip(out, part):
                    whole[:, lo:hi] = a
        finally:
            _in_chunks.active = was

    _run_stack(run, len(chunks), _chunks_work(p), (), tuple)
    return tuple(out)


# ---------------------------------------------------------------------------
# conversions
# ---------------------------------------------------------------------------

def _t3_dtype(cores):
    """Float dtype of a ragged train's values: bool and integer cores promote
    as in ``np.result_type(..., np.float32)`` (int64 to float64)."""
    return np.result_type(*(c.dtype for c in cores), np.float32)


def _t3_check(tucker_cores, tt_cores):
    """Validate the cores of a ragged train; return them as two tuples.

    The one home of these checks: :class:`~zorch_nb.tt.TuckerTensorTrain`
    and :func:`t3_to_dense` both call it.  Equally many (>= 1) Tucker cores
    ``stack + (n_i, N_i)`` and TT cores ``stack + (r_i, n_i, r_{i+1})`` of
    real dtype on one array module, consecutive ranks agreeing, no
    zero-length axis.

    Raises
    ------
    TypeError, ValueError
        Naming the offending argument.
    """
    cores = []
    for name, given in (("tucker_cores", tucker_cores), ("tt_cores", tt_cores)):
        try:
            cores.append(tuple(given))
        except TypeError:  # Python's "'int' object is not iterable" names no argument
            raise TypeError(f"Argument `{name}` must be a sequence of arrays, "
                            f"not {type(given).__name__}.") from None
    tk, tt = cores
    if len(tk) == 0 or len(tk) != len(tt):
        # one core passed bare is iterated: its rows are read as cores
        bare = [f" (`{name}` is one array, read as its {len(c)} rows: for one core "
                f"pass [array])" for name, given, c in (("tucker_cores", tucker_cores, tk),
                                                         ("tt_cores", tt_cores, tt))
                if hasattr(given, "ndim")]
        raise ValueError(
            "Arguments `tucker_cores` and `tt_cores` must be non-empty and equally long, "
            f"not {len(tk)} and {len(tt)}{''.join(bare)}."
        )
    xp = array_module(tk[0], "tucker_cores[0]")
    stack = tuple(tk[0].shape[:-2]) if tk[0].ndim >= 2 else None
    for i, (u, g) in enumerate(zip(tk, tt)):
        if array_module(u, f"tucker_cores[{i}]") is not xp or array_module(g, f"tt_cores[{i}]") is not xp:
            raise TypeError("Arguments `tucker_cores` and `tt_cores` must live on one array module.")
        for a, nm in ((u, f"tucker_cores[{i}]"), (g, f"tt_cores[{i}]")):
            # str cores failed later inside matmul, object cores computed
            # with Python objects; a uniform train needs real numbers
            if a.dtype.kind not in "biuf":
                raise TypeError(f"Argument `{nm}` must hold real numbers (bool, int or "
                                f"float), not dtype {a.dtype}.")
        if stack is None or u.ndim != len(stack) + 2 or tuple(u.shape[:-2]) != stack:
            raise ValueError(f"Argument `tucker_cores[{i}]` must have shape stack + (n, N), not {u.shape}.")
        if g.ndim != len(stack) + 3 or tuple(g.shape[:-3]) != stack or g.shape[-2] != u.shape[-2]:
            raise ValueError(
                f"Argument `tt_cores[{i}]` must have shape {stack + ('r', u.shape[-2], 'r')}, not {g.shape}."
            )
        if i and g.shape[-3] != tt[i - 1].shape[-1]:
            raise ValueError(
                f"Argument `tt_cores[{i}]` must start with rank {tt[i - 1].shape[-1]}, not {g.shape[-3]}."
            )
        if 0 in u.shape or 0 in g.shape:  # rank 0 or an empty stack: no train to hold
            raise ValueError(f"Arguments `tucker_cores[{i}]` {u.shape} and `tt_cores[{i}]` "
                             f"{g.shape} must have no zero-length axis.")
    return tk, tt


def _t3_cores(obj):
    """``(tucker_cores, tt_cores)`` of a ragged train object or pair, else None."""
    if hasattr(obj, "tucker_cores") and hasattr(obj, "tt_cores"):
        return tuple(obj.tucker_cores), tuple(obj.tt_cores)
    if (
        isinstance(obj, (tuple, list)) and len(obj) == 2
        and all(isinstance(c, (tuple, list)) and len(c) > 0 for c in obj)
        and all(hasattr(a, "shape") and hasattr(a, "dtype") for c in obj for a in c)
    ):
        return tuple(obj[0]), tuple(obj[1])
    return None


def _t3_leaves(t3, nest=()):
    """Flatten nested sequences of ragged trains; return (leaves, nest shape)."""
    cores = _t3_cores(t3)
    if cores is not None:
        return [cores], nest
    if not isinstance(t3, (tuple, list)) or len(t3) == 0:
        raise TypeError(
            "Argument `t3` must be a TuckerTensorTrain, a pair (tucker_cores, tt_cores) or nested "
            f"tuples of them, not {type(t3).__name__}."
        )
    leaves, shapes = [], set()
    for item in t3:
        sub, sub_nest = _t3_leaves(item, ())
        leaves.extend(sub)
        shapes.add(sub_nest)
    if len(shapes) != 1:
        raise ValueError("Argument `t3` must be nested evenly (a rectangular stack of trains).")
    return leaves, nest + (len(t3),) + shapes.pop()


def ut3_from_t3(t3, n=None, r=None, N=None):
    """Pad ragged train(s) into a uniform train with prefix masks.

    Parameters
    ----------
    t3 : TuckerTensorTrain, (tucker_cores, tt_cores) pair, or nested tuples
        A (possibly stacked) ragged train, or a rectangular nest of them --
        the stack shape is the nest shape followed by the leaves' own stack
        shape.  Ranks may differ between nested leaves.
    n, r, N : int, optional
        Padded Tucker rank, TT rank and mode size; default the maxima.

    Returns
    -------
    tuple
        The ``.data`` of the uniform train.

    Raises
    ------
    TypeError
        ``t3`` is not a train, pair or nest of them; a core holds no real numbers or
        promotes past float64 (longdouble); ``n``, ``r`` or ``N`` is not an int.
    ValueError
        Cores that do not form a train, a ragged nest, trains of different ``d``,
        ``shape`` or stack shape, ``n``, ``r`` or ``N`` below the largest rank or
        mode size, or supercores too large to allocate.
    """
    leaves, nest = _t3_leaves(t3)
    # every leaf as the class checks one (raw pairs skipped that: complex or
    # str cores came through, a 1-d core raised a bare IndexError)
    leaves = [_t3_check(tk, tt) for tk, tt in leaves]
    xp = array_module(leaves[0][0][0], "tucker_cores[0]")
    d = len(leaves[0][0])
    leaf_stack = tuple(leaves[0][0][0].shape[:-2])
    shape = tuple(int(u.shape[-1]) for u in leaves[0][0])
    for tk, tt in leaves:
        if len(tk) != d or len(tt) != d:
            raise ValueError(f"Argument `t3` must hold trains of {d} Tucker and {d} TT cores each.")
        if tuple(int(u.shape[-1]) for u in tk) != shape:
            raise ValueError("Argument `t3` must hold trains of one shape.")
        for i in range(d):
            if tuple(tk[i].shape[:-2]) != leaf_stack or tuple(tt[i].shape[:-3]) != leaf_stack:
                raise ValueError("Argument `t3` must hold trains of one stack shape.")
            if tt[i].shape[-2] != tk[i].shape[-2] or (i and tt[i].shape[-3] != tt[i - 1].shape[-1]):
                raise ValueError(f"Argument `t3` has inconsistent core shapes at core {i}.")
    n_max = max(u.shape[-2] for tk, _ in leaves for u in tk)
    r_max = max(max(g.shape[-3], g.shape[-1]) for _, tt in leaves for g in tt)
    for name, v in (("n", n), ("r", r), ("N", N)):
        if v is not None and not is_int(v):
            raise TypeError(f"Argument `{name}` must be an int or None, not {v!r}.")
    n = n_max if n is None else int(n)
    r = r_max if r is None else int(r)
    N = max(shape) if N is None else int(N)
    if n < n_max or r < r_max or N < max(shape):
        raise ValueError(
            f"Arguments `n`, `r`, `N` must be at least the largest Tucker rank {n_max}, TT rank {r_max} "
            f"and mode size {max(shape)}, not {n}, {r}, {N}."
        )
    dtype = _t3_dtype([a for tk, tt in leaves for a in tk + tt])
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"Argument `t3` has cores of dtype {dtype}: a uniform train holds "
                        f"float32 or float64 (cast the cores first).")
    stack = nest + leaf_stack
    L, Sl = len(leaves), math.prod(leaf_stack)
    # (a MemoryError, or an OOM kill on the first write past the RAM, before)
    _check_result_size(xp, "from_t3", [(d, *stack, n, N), (d, *stack, r, n, r)],
                       np.dtype(dtype).itemsize, "ask for smaller `n`, `r`, `N`")
    U = xp.zeros((d, L, Sl, n, N), dtype=dtype)
    G = xp.zeros((d, L, Sl, r, n, r), dtype=dtype)
    mk = np.zeros((d, L, Sl, n), dtype=bool)
    mt = np.zeros((d + 1, L, Sl, r), dtype=bool)
    for l, (tk, tt) in enumerate(leaves):
        for i in range(d):
            ni, Ni = tk[i].shape[-2:]
            ra, _, rb = tt[i].shape[-3:]
            U[i, l, :, :ni, :Ni] = xp.asarray(tk[i]).reshape(Sl, ni, Ni)
            G[i, l, :, :ra, :ni, :rb] = xp.asarray(tt[i]).reshape(Sl, ra, ni, rb)
            mk[i, l, :, :ni] = True
            mt[i, l, :, :ra] = True
            mt[i + 1, l, :, :rb] = True
    S = L * Sl
    return _pack(xp, U.reshape(d, S, n, N), G.reshape(d, S, r, n, r), shape,
                 mk.reshape(d, S, n), mt.reshape(d + 1, S, r), stack)


def _nest(flat, stack):
    """Nested tuples of ``flat`` (C order) with the given stack shape."""
    if not stack:
        return flat[0]
    step = len(flat) // stack[0]
    return tuple(_nest(flat[k * step:(k + 1) * step], stack[1:]) for k in range(stack[0]))


def ut3_to_t3(data):
    """Extract the real parts as ragged trains.

    Returns
    -------
    tuple
        ``(tucker_cores, tt_cores)`` for an unstacked train; for a stacked one,
        nested tuples (the stack shape) of such pairs, since ranks may differ
        between stack elements.
    """
    p = _parts(data)
    xp = p.xp
    flat = []
    for s in range(p.S):
        tk, tt = [], []
        for i in range(p.d):
            ik = xp.asarray(np.flatnonzero(p.mk[i, s]))
            ia = xp.asarray(np.flatnonzero(p.mt[i, s]))
            ib = xp.asarray(np.flatnonzero(p.mt[i + 1, s]))
            tk.append(xp.ascontiguousarray(p.U[i, s][ik][:, : p.shape[i]]))
            tt.append(xp.ascontiguousarray(p.G[i, s][xp.ix_(ia, ik, ib)]))
        flat.append((tuple(tk), tuple(tt)))
    return _nest(flat, p.stack)


def _dense_chain(xp, tucker_cores, tt_cores, left):
    """Dense tensors of a chain of cores with a leading batch shape.

    ``left`` is the ``batch + (1, r_0)`` boundary vector; the right boundary
    is summed.  Returns ``batch + (N_0, ..., N_{d-1})``.
    """
    batch = left.shape[:-2]
    P = left
    for U, G in zip(tucker_cores, tt_cores):
        ra, _, rb = G.shape[-3:]
        H = xp.swapaxes(xp.matmul(xp.swapaxes(G, -1, -2), U[..., None, :, :]), -1, -2)
        P = xp.matmul(P, H.reshape(batch + (ra, -1))).reshape(batch + (-1, rb))
    dense = P.sum(axis=-1)
    return dense.reshape(batch + tuple(U.shape[-1] for U in tucker_cores))


def _too_large(xp, nbytes, span=None):
    """Whether an output of ``nbytes`` (a Python int) cannot be allocated.

    Two limits: the address space for ``span`` bytes (default ``nbytes``;
    the dense chain's partial products reach the output times the widest
    bond, and the Numba kernel's int64 indices would wrap past it); and,
    for NumPy, the machine's physical memory for the output alone -- past
    it Linux's overcommit grants the allocation and the OOM killer ends the
    process filling it, with no MemoryError to catch (CuPy raises
    OutOfMemoryError).
    """
    span = nbytes if span is None else span
    return span > np.iinfo(np.intp).max or (xp is np and nbytes > (_backend.physical_memory() or math.inf))


def _check_result_size(xp, what, shapes, itemsize,
                       hint="truncate the trains first (`svd` with max ranks)"):
    """Refuse, before any work, supercores of ``shapes`` (the result of
    operation ``what``) that cannot be allocated (see :func:`_too_large`).

    Raises
    ------
    ValueError
        Naming the operation, the shapes and their size.
    """
    nbytes = sum(math.prod(sh) for sh in shapes) * itemsize  # Python ints: no wrap
    if _too_large(xp, nbytes):
        raise ValueError(f"the result of `{what}` has supercores of shapes "
                         f"{' and '.join(map(str, shapes))} ({nbytes / 2**30:.3g} GiB), too "
                         f"large to allocate; {hint}")


def _check_dense_size(xp, stack, shape, rank, itemsize):
    """Refuse, before any work, a dense tensor that cannot be allocated.

    Shared by the ragged and the uniform ``to_dense``; the limits are
    :func:`_too_large`'s, the address-space one for the output times the
    widest bond ``rank``.

    Raises
    ------
    ValueError
        Naming the shape, the number of entries and what to use instead.
    """
    # Python ints: np.prod wraps silently (to 0 for 2**64)
    entries = math.prod(stack) * math.prod(shape)
    nbytes = entries * itemsize
    if _too_large(xp, nbytes, nbytes * max(rank, 1)):
        raise ValueError(f"the dense tensor of shape {tuple(stack) + tuple(shape)} has {entries} "
                         f"entries ({nbytes / 2**30:.3g} GiB), too many to allocate; use "
                         f"`entries` or `apply`")


def t3_to_dense(tucker_cores, tt_cores):
    """Dense tensor of a ragged train: ``stack + shape``.

    ``dense[..., o_0, ..., o_{d-1}] = sum over a_0..a_d of
    prod_i G'_i[..., a_i, o_i, a_{i+1}]`` with
    ``G'_i[a, o, b] = sum_j G_i[a, j, b] U_i[j, o]`` (both boundary bonds
    summed against ones).  The cores are checked as
    :class:`~zorch_nb.tt.TuckerTensorTrain` checks them, and the result has
    the float dtype ``np.result_type(*core dtypes, np.float32)`` -- the dtype
    :func:`ut3_from_t3` pads them to, so that bool or integer cores neither
    multiply as logical OR nor wrap around.

    Raises
    ------
    TypeError, ValueError
        For cores that do not form a train (naming the argument), and
        ``ValueError`` if the tensor is too large to allocate (see
        :func:`ut3_to_dense`).
    """
    tucker_cores, tt_cores = _t3_check(tucker_cores, tt_cores)
    xp = array_module(tucker_cores[0])
    stack = tuple(tucker_cores[0].shape[:-2])
    dtype = _t3_dtype(tucker_cores + tt_cores)
    _check_dense_size(xp, stack, tuple(int(u.shape[-1]) for u in tucker_cores),
                      max(max(int(g.shape[-3]), int(g.shape[-1])) for g in tt_cores), dtype.itemsize)
    # every core in the result dtype: a product of two int8 or bool cores
    # would otherwise be formed (and wrap, or saturate to True) before it
    # meets the float boundary vector
    tucker_cores = [xp.asarray(u, dtype=dtype) for u in tucker_cores]
    tt_cores = [xp.asarray(g, dtype=dtype) for g in tt_cores]
    span = sum(abs(int(_exponents(xp, c.reshape(1, 1, -1))[0, 0]))
               for c in tucker_cores + tt_cores)
    if span > _span_limit(dtype):
        # cores far from 1 (1e-200, 1e-200, 1e300 gave 0 for a tensor of 1e-100):
        # the uniform train's range rescue (_in_range), as its to_dense has
        return ut3_to_dense(ut3_from_t3((tuple(tucker_cores), tuple(tt_cores))))
    left = xp.ones(stack + (1, tt_cores[0].shape[-3]), dtype=dtype)
    return _dense_chain(xp, tucker_cores, tt_cores, left)


def _kept_rank(xp, sv, shape, limit, rtol):
    """How many singular values (descending) of a ``shape`` matrix to keep: those
    above ``rtol * sv[0]`` (default NumPy's ``matrix_rank`` tolerance,
    ``max(shape) * eps``), at most ``limit``, at least 1 (ranks are >= 1: the
    zero tensor keeps one zero slice)."""
    if rtol is None:
        rtol = max(shape) * np.finfo(sv.dtype).eps
    k = int((sv > rtol * sv[0]).sum()) if sv.shape[0] else 0
    return max(1, min(k, limit if limit is not None else k))


def _check_rtol(rtol):
    """Refuse an ``rtol`` that is not None or a real number in ``[0, 1)``."""
    if rtol is not None and (isinstance(rtol, (bool, np.bool_)) or not isinstance(
            rtol, (int, float, np.integer, np.floating)) or not 0 <= rtol < 1):
        raise ValueError(f"Argument `rtol` must be a number in [0, 1), not {rtol!r}.")


def t3_from_dense(dense, max_tucker_ranks=None, max_tt_ranks=None, rtol=None):
    """A ragged train of a dense tensor: Tucker bases by SVD, then TT-SVD of the core.

    For every mode ``i`` the Tucker core ``U_i`` holds the leading left
    singular vectors of the mode-``i`` unfolding (orthonormal rows); the core
    tensor ``C = dense x_i U_i`` is split left to right by SVDs of its left
    unfoldings.  Without truncation ``to_dense`` gives ``dense`` back (to
    rounding); each truncation discards the singular values below ``rtol``
    times the largest, or past the ``max_*_ranks``, of one unfolding.

    Parameters
    ----------
    dense : real array (NumPy or CuPy), shape ``(N_0, ..., N_{d-1})``
        Every axis of length >= 1, every entry finite.  Float32 and float64
        are kept; bool, integer and float16 data promote as the cores of a
        :class:`~zorch_nb.tt.TuckerTensorTrain` do (``np.result_type(dtype,
        np.float32)``: int64 to float64).
    max_tucker_ranks : int or sequence of ``d`` ints, optional
    max_tt_ranks : int or sequence of ``d - 1`` ints (interior bonds), optional
    rtol : float, optional
        Relative singular-value cut-off (default: NumPy's ``matrix_rank``
        tolerance, so only numerically zero directions go).

    Returns
    -------
    (tucker_cores, tt_cores) : tuple of tuples
        ``U_i`` of shape ``(n_i, N_i)``, ``G_i`` of shape ``(r_i, n_i, r_{i+1})``
        with ``r_0 = r_d = 1``; every rank >= 1.

    Raises
    ------
    TypeError
        ``dense`` is not a NumPy or CuPy array of reals, or a ``max_*_ranks`` is
        neither an int nor a 1-d sequence.
    ValueError
        ``dense`` is 0-d, has a zero-length axis or a non-finite entry, or its norm
        exceeds its dtype's range; a max rank below 1, a sequence of the wrong
        length or with a non-int entry, or ``rtol`` not a number in ``[0, 1)``.
    """
    xp = array_module(dense, "dense")
    if dense.dtype.kind in "biuf" and dense.dtype not in (np.float32, np.float64):
        promoted = np.result_type(dense.dtype, np.float32)  # as _t3_dtype
        if promoted in (np.float32, np.float64):
            dense = dense.astype(promoted)
    if dense.dtype not in (np.float32, np.float64):
        raise TypeError(f"Argument `dense` must hold real numbers (bool, int or float32/64), "
                        f"not dtype {dense.dtype}.")
    if dense.ndim < 1 or 0 in dense.shape:
        raise ValueError(f"Argument `dense` must have at least one axis and no zero-length axis, "
                         f"not shape {tuple(dense.shape)}.")
    if not _finite(xp, dense):
        raise ValueError("Argument `dense` must hold finite numbers only (NaN or inf found).")
    _check_rtol(rtol)
    d = dense.ndim
    max_tk = _max_ranks(max_tucker_ranks, d, "max_tucker_ranks")
    max_tt = _max_ranks(max_tt_ranks, d - 1, "max_tt_ranks")
    # Entries far from 1 are scaled near 1 by a power of two (exact) and the
    # scale put back on the last TT core, which carries the norm: the SVDs'
    # sums of squares overflowed or underflowed (1e308 entries were blamed on
    # "the train"; now the one failure left, a norm past the range, names it).
    scale = int(_exponents(xp, dense.reshape(1, 1, -1))[0, 0])
    if abs(scale) <= _span_limit(dense.dtype):
        scale = 0
    core, tucker = (xp.ldexp(dense, -scale) if scale else dense), []
    for i in range(d):
        unfolding = xp.moveaxis(core, i, 0).reshape(core.shape[i], -1)
        left, sv, _ = _finite_svd(xp, unfolding)
        k = _kept_rank(xp, sv, unfolding.shape, max_tk[i], rtol)
        basis = xp.ascontiguousarray(left[:, :k].T)  # (n_i, N_i), orthonormal rows
        tucker.append(basis)
        core = xp.moveaxis(xp.tensordot(basis, core, axes=([1], [i])), 0, i)
    tt, rank, rest = [], 1, core
    for i in range(d - 1):
        unfolding = rest.reshape(rank * core.shape[i], -1)
        left, sv, right = _finite_svd(xp, unfolding)
        k = _kept_rank(xp, sv, unfolding.shape, max_tt[i], rtol)
        tt.append(xp.ascontiguousarray(left[:, :k].reshape(rank, core.shape[i], k)))
        rest = sv[:k, None] * right[:k]
        rank = k
    last = xp.ascontiguousarray(rest.reshape(rank, core.shape[d - 1], 1))
    if scale:
        with np.errstate(over="ignore"):  # (refused just below)
            last = xp.ldexp(last, scale)
        if not _finite(xp, last):
            wider = " or pass it as float64" if dense.dtype == np.float32 else ""
            raise ValueError(f"Argument `dense` has a norm past {dense.dtype}'s range, which the "
                             f"last TT core must hold (the other cores are orthonormal); scale "
                             f"it down (`dense * 2.0**-k` is exact){wider}")
    tt.append(last)
    return tuple(tucker), tuple(tt)


def ut3_to_dense(data):
    """Dense tensors ``stack + shape`` of a uniform train.

    On NumPy supercores a structure-specialized Numba kernel does the work;
    on CuPy a chain of batched ``einsum``/``matmul`` calls.  Cores far from
    1 are scaled by powers of two first (exact), so entries that fit the
    dtype are returned even where the plain chain's partial products would
    leave its range (as :func:`ut3_entries` and :func:`ut3_apply`).

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.

    Returns
    -------
    array, shape ``stack + shape``
        In the supercores' dtype and array module.

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        Before any allocation, if the dense tensors (times the padded TT
        rank, the partial products' bound) exceed the address space, or, on
        NumPy, the dense tensors (with the kernel's scratch, which grows with
        the live ranks) exceed this machine's physical memory.
    """
    p = _parts(data)
    _check_dense_size(p.xp, p.stack, p.shape, p.r, p.U.dtype.itemsize)
    p, e = _in_range(p)
    out = _to_dense_numba(p) if _use_numba(p.xp) else _to_dense_xp(p)
    return _scaled_back(p.xp, out.reshape((p.S, -1)), e).reshape(p.stack + p.shape)


def _to_dense_xp(p):
    U, G = _masked(p)
    left = p.xp.asarray(p.mt[0, :, None, :], dtype=U.dtype)
    cores_u = [U[i][..., : p.shape[i]] for i in range(p.d)]
    return _dense_chain(p.xp, cores_u, list(G), left)


def _to_dense_numba(p):
    # (the padded N is no part of a key: the kernels read its arrays as they come)
    key = ("to_dense", p.shape, (p.n, p.r), p.masks.stack_flat())
    kernel = KERNELS.get(key, lambda: _k.build_ut3_to_dense(p.shape, *_tables(p)))
    size = math.prod(p.shape)  # checked by ut3_to_dense
    dt = p.U.dtype
    # all scratch is sized by the live ranks, not the padded n and r (which
    # made H r * N * r: 8 GiB for a 1 MiB train of live rank 1 and a 0.5 MiB
    # tensor); the kernel refuses less
    lengths = _to_dense_scratch(key[1], key[3])
    # multiply-adds per element at the padded sizes: H of every core, then
    # the partial product growing by one mode per core
    work, rows = 0, 1
    for Ni in p.shape:
        work += p.r * p.n * Ni * p.r + rows * p.r * Ni * p.r
        rows *= Ni
    # one scratch set per thread beside the result: what the dense-size check
    # cannot see (live ranks make H and the partial products outgrow the
    # tensor), refused here before anything is allocated
    need = (p.S * size + _stack_threads(p.S, p.S * work) * sum(lengths)) * dt.itemsize
    if _too_large(np, need):
        raise ValueError(f"the dense tensor of shape {tuple(p.stack) + tuple(p.shape)} needs "
                         f"{need / 2**30:.3g} GiB with the kernel's scratch (live ranks "
                         f"{[int(c) for c in p.mt.sum(-1).max(axis=1)]}), too much to allocate; "
                         f"use `entries` or `apply`, or truncate the train first (`svd`)")
    out = np.empty((p.S, size), dtype=dt)

    def scratch():  # P, Q, H, Uc, Gc (one set per thread)
        return tuple(np.empty(n, dtype=dt) for n in lengths)

    _run_stack(kernel, p.S, p.S * work, (_kernel_array(p.U), _kernel_array(p.G), out), scratch)
    return out


@functools.lru_cache(maxsize=64)
def _to_dense_scratch(shape, masks):
    """:func:`~zorch_nb.kernels.tt_kernels.ut3_to_dense_scratch` of a
    structure (``masks``: its stack-flat :class:`UT3Masks`, immutable),
    worked out once: with the index tables it was 55 of a one-train
    ``to_dense``'s 150 us (d = 3)."""
    mk, mt = masks
    return _k.ut3_to_dense_scratch(shape, mk.sum(-1), mt.sum(-1))


def ut3_apply_masks(data):
    """Return the train with every padding slot zeroed."""
    p = _parts(data)
    U, G = _masked(p)
    return _pack(p.xp, U, G, p.shape, p.mk, p.mt, p.stack)


def _is_prefix(mask):
    """Whether each row of the host bool ``mask (..., m)`` is True before False."""
    return bool((mask[..., 1:] <= mask[..., :-1]).all())


def ut3_reverse(data):
    """Reverse the core order: the dense tensor's axes are reversed."""
    p = _parts(data)
    U, G = _masked(p)
    return _pack(p.xp, U[::-1], G[::-1].transpose(0, 1, 4, 3, 2), p.shape[::-1],
                 p.mk[::-1], p.mt[::-1], p.stack)


def ut3_compact(data, n=None, r=None):
    """The same train with its live slots first and its padding cut (or grown).

    Every core's live Tucker slots and every bond's live slots move to the
    front, in their order (the masks become prefixes; the cores sharing a
    bond or a Tucker slot are permuted alike, so the tensor is unchanged up
    to the rounding of a reordered sum), then the supercores are padded to
    ``n`` Tucker slots and ``r`` bond slots.

    Sums and products pad to the sum and product of their operands'
    padded sizes, and :func:`ut3_svd` keeps its input's, so an optimizer
    loop ``x = svd(x + step)`` grew its padding -- and compiled a new
    structure -- every iteration.  ``svd(...)`` then ``compact(n, r)`` keeps
    both fixed: the same structure, compiled once.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    n, r : int, optional
        The new padded Tucker and TT ranks, at least the largest live rank
        (over every core or bond and stack element), which is the default.

    Returns
    -------
    tuple
        ``.data`` of the compacted train (padding zero).

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    TypeError
        ``n`` or ``r`` is not an int.
    ValueError
        If ``n`` or ``r`` is below the largest live rank (or below 1), or,
        before any allocation, if the padded supercores would be too large
        to allocate.
    """
    p = _parts(data)
    xp = p.xp
    live_n = int(p.mk.sum(axis=-1).max(initial=0))
    live_r = int(p.mt.sum(axis=-1).max(initial=0))
    sizes = []
    for value, name, live in ((n, "n", live_n), (r, "r", live_r)):
        if value is None:
            sizes.append(max(live, 1))
            continue
        if not is_int(value):
            raise TypeError(f"Argument `{name}` must be an int, not {type(value).__name__}.")
        if value < max(live, 1):
            raise ValueError(f"Argument `{name}` must be at least {max(live, 1)}, the largest "
                             f"live {'Tucker' if name == 'n' else 'TT'} rank (and >= 1), "
                             f"not {value}.")
        sizes.append(int(value))
    n2, r2 = sizes
    _check_result_size(xp, "ut3_compact", [(p.d,) + p.stack + (n2, p.N),
                                           (p.d,) + p.stack + (r2, n2, r2)],
                       p.U.dtype.itemsize, "ask for smaller `n`, `r`")
    if _is_prefix(p.mk) and _is_prefix(p.mt):
        # Live slots first already (svd's masks: the optimizer loop's case):
        # the permutation below is the identity, so the cut is a slice, masked
        # at its own size.  The same bytes; compact(n=8, r=16) of svd(x + 0.1
        # y), asv Svd-case trains: one 0.89-1.58 -> 0.10-0.16 ms, 8 6.7-7.2 ->
        # 0.32-0.41 ms, 64 64.4 -> 3.9-4.0 ms (the gathers made index arrays
        # as large as their outputs, after masking the whole padded train;
        # benchmarks/tt_svd_stack.py --retraction).
        cut = _Parts(xp, p.U[:, :, :n2], p.G[:, :, :r2, :n2, :r2], p.shape, None, p.stack,
                     p.mk[..., :n2], p.mt[..., :r2])
        (U, G), mk, mt = _masked(cut), cut.mk, cut.mt
    else:
        U, G = _masked(p)
        # live slots first, in order (a stable sort of the dead-slot flags)
        ok = np.argsort(~p.mk, axis=-1, kind="stable")[..., :n2]  # (d, S, <= n2)
        ot = np.argsort(~p.mt, axis=-1, kind="stable")[..., :r2]  # (d + 1, S, <= r2)
        k, t = xp.asarray(ok), xp.asarray(ot)
        U = xp.take_along_axis(U, k[..., None], axis=2)
        G = xp.take_along_axis(G, t[:-1, :, :, None, None], axis=2)
        G = xp.take_along_axis(G, k[:, :, None, :, None], axis=3)
        G = xp.take_along_axis(G, t[1:, :, None, None, :], axis=4)
        mk = np.take_along_axis(p.mk, ok, axis=-1)
        mt = np.take_along_axis(p.mt, ot, axis=-1)
    grow_n, grow_r = n2 - mk.shape[-1], r2 - mt.shape[-1]  # (slots past the old padding)
    if grow_n or grow_r:
        U = xp.pad(U, ((0, 0), (0, 0), (0, grow_n), (0, 0)))
        G = xp.pad(G, ((0, 0), (0, 0), (0, grow_r), (0, grow_n), (0, grow_r)))
        mk = np.pad(mk, ((0, 0), (0, 0), (0, grow_n)))
        mt = np.pad(mt, ((0, 0), (0, 0), (0, grow_r)))
    return _pack(xp, U, G, p.shape, mk, mt, p.stack)


def _squash(G, mt):
    """Sum the boundary bonds into slot 0; ``G`` (masked) and ``mt`` are
    modified in place."""
    d = G.shape[0]
    first = G[0].sum(axis=1)  # (S, n, r): left bond summed
    if d == 1:
        G[0] = 0
        G[0][:, 0, :, 0] = first.sum(axis=-1)
    else:
        last = G[d - 1].sum(axis=3)  # (S, r, n): right bond summed
        G[0] = 0
        G[0][:, 0] = first
        G[d - 1] = 0
        G[d - 1][..., 0] = last
    mt[0] = mt[d] = _prefix(np.ones(mt.shape[1], dtype=np.int64), mt.shape[2])


def ut3_squash_tails(data):
    """Sum the boundary bonds so that ``r_0 = r_d = 1`` (slot 0 real).

    Where a sum of ``r`` boundary entries could pass the dtype's range, the
    cores are power-of-two scaled first and the scale spread back over them
    (exact): two boundary slots of 1e308 beside a core of 1e-10 gave inf,
    where the tensor, 2e298, fits."""
    p = _parts(data)
    xp = p.xp
    U, G = _masked(p)
    ends = _exponents(xp, G[[0, -1]])
    e = None
    if bool((ends >= np.finfo(G.dtype).maxexp - math.ceil(math.log2(max(p.r, 1)))).any()):
        ps, e = _power_scaled(p)
        U, G = ps.U, ps.G
    mt = p.mt.copy()
    _squash(G, mt)
    if e is not None:
        _spread_train(xp, U, G, e)
    return _pack(xp, U, G, p.shape, p.mk, mt, p.stack)


def _train_list(trains):
    """``trains`` of :func:`ut3_stack` as a list; a non-iterable (a train's
    int or a single array) is a TypeError naming the argument."""
    if not isinstance(trains, collections.abc.Iterable) or isinstance(trains, (str, bytes)):
        raise TypeError(f"Argument `trains` must be a sequence of trains, not "
                        f"{type(trains).__name__}.")
    return list(trains)


def ut3_stack(trains):
    """Stack trains of one shape along a new leading stack axis.

    Trains may have different padded sizes; the result is padded to the
    largest.  Their stack shapes must agree.  Mixed dtypes promote as NumPy
    does (float32 with float64 stacks as float64).

    Parameters
    ----------
    trains : sequence of tuple
        ``.data`` tuples ``(tucker_supercore, tt_supercore, shape, masks)``.

    Returns
    -------
    tuple
        ``.data`` of the stack, stack shape ``(len(trains),) + stack_shape``.

    Raises
    ------
    TypeError
        ``trains`` is not iterable.
    TypeError, ValueError
        ``trains[k]`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        ``trains`` is empty, or its trains differ in ``shape`` or ``stack_shape``.
    """
    ps = [_parts(t, f"trains[{k}]") for k, t in enumerate(_train_list(trains))]
    if not ps:
        raise ValueError("Argument `trains` must hold at least one train, not none.")
    p0 = ps[0]
    for p in ps[1:]:
        _check_same(p0, p, "ut3_stack", need_n=False)
    xp = p0.xp
    n, r, N = max(p.n for p in ps), max(p.r for p in ps), max(p.N for p in ps)
    dtype = np.result_type(*(p.U.dtype for p in ps))
    K, d, S = len(ps), p0.d, p0.S
    U = xp.zeros((d, K, S, n, N), dtype=dtype)
    G = xp.zeros((d, K, S, r, n, r), dtype=dtype)
    mk = np.zeros((d, K, S, n), dtype=bool)
    mt = np.zeros((d + 1, K, S, r), dtype=bool)
    for k, p in enumerate(ps):
        Uk, Gk = _masked(p)
        U[:, k, :, : p.n, : p.N] = Uk
        G[:, k, :, : p.r, : p.n, : p.r] = Gk
        mk[:, k, :, : p.n] = p.mk
        mt[:, k, :, : p.r] = p.mt
    return _pack(xp, U.reshape(d, K * S, n, N), G.reshape(d, K * S, r, n, r), p0.shape,
                 mk.reshape(d, K * S, n), mt.reshape(d + 1, K * S, r), (K,) + p0.stack)


def ut3_unstack(data):
    """Split a stacked train along its first stack axis into a tuple.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.

    Returns
    -------
    tuple of tuple
        ``stack_shape[0]`` ``.data`` tuples, each of stack shape ``stack_shape[1:]``.

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        The train is not stacked (``stack_shape == ()``).
    """
    p = _parts(data)
    if not p.stack:
        raise ValueError("Only a stacked train (stack_shape non-empty) can be unstacked; this "
                         "one is a single train.")
    U, G = _masked(p)
    K, rest = p.stack[0], p.stack[1:]
    S1 = p.S // K
    out = []
    for k in range(K):
        sl = slice(k * S1, (k + 1) * S1)
        out.append(_pack(p.xp, U[:, sl], G[:, sl], p.shape, p.mk[:, sl], p.mt[:, sl], rest))
    return tuple(out)


# ---------------------------------------------------------------------------
# arithmetic
# ---------------------------------------------------------------------------

def ut3_add(x, y):
    """Sum of two trains: cores side by side (block diagonal), masks concatenated.

    Parameters
    ----------
    x, y : tuple
        ``.data`` tuples ``(tucker_supercore, tt_supercore, shape, masks)`` of two
        trains with the same ``shape``, ``stack_shape`` and padded ``N``.

    Returns
    -------
    tuple
        ``.data`` of ``x + y``, with padded ranks ``nx + ny`` and ``rx + ry``
        (float64 if either train is).

    Raises
    ------
    TypeError, ValueError
        ``x`` or ``y`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        The trains differ in ``shape``, ``stack_shape`` or padded ``N``; or,
        before any allocation, the result's supercores exceed the address space
        or, on NumPy, this machine's physical memory.
    """
    return _add(_parts(x, "x"), _parts(y, "y"), "ut3_add")


def _add(p, q, where, negate=False):
    # x + y, or x - y with ``negate`` (y's first TT core carries the sign, as
    # ut3_neg puts it)
    _check_same(p, q, where)
    xp = p.xp
    n, r = p.n + q.n, p.r + q.r
    _check_result_size(xp, where, [(p.d,) + p.stack + (n, p.N), (p.d,) + p.stack + (r, n, r)],
                       np.result_type(p.U.dtype, q.U.dtype).itemsize)
    Ux, Gx = _masked(p)
    Uy, Gy = _masked(q)
    if negate:
        Gy[0] *= -1.0
    dtype = np.result_type(Ux.dtype, Uy.dtype)
    U = xp.concatenate([Ux.astype(dtype), Uy.astype(dtype)], axis=2)
    G = xp.zeros((p.d, p.S, p.r + q.r, p.n + q.n, p.r + q.r), dtype=dtype)
    G[:, :, : p.r, : p.n, : p.r] = Gx
    G[:, :, p.r:, p.n:, p.r:] = Gy
    mk = np.concatenate([p.mk, q.mk], axis=-1)
    mt = np.concatenate([p.mt, q.mt], axis=-1)
    return _pack(xp, U, G, p.shape, mk, mt, p.stack)


def _not_on_device(x, name, xp):
    """Refuse a device array ``x`` (argument ``name``) beside a train whose
    supercores are NumPy arrays (``xp``): NumPy cannot read it, and CuPy's
    own refusal names no argument.  (Beside a CuPy train a host array is
    copied to the device, as CuPy operands take host data.)"""
    if xp is np and _backend.array_kind(x) in ("cupy", "cuda"):
        raise TypeError(f"Argument `{name}` is a device array ({type(x).__module__}."
                        f"{type(x).__name__}) but the train's supercores are NumPy arrays; "
                        f"copy it to the host first (`.get()` for CuPy) or move the train "
                        f"to the device.")


def _alpha_array(alpha):
    """``alpha`` of :func:`ut3_scale` that is not a number, as an array (lists,
    None, str: NumPy's reading; a ragged list is a ``ValueError`` naming it)."""
    if hasattr(alpha, "dtype"):
        return alpha
    try:
        return np.asarray(alpha)
    except ValueError:  # NumPy's "inhomogeneous shape" names no argument
        raise ValueError(f"Argument `alpha` must be a scalar or a rectangular array of "
                         f"reals, not {alpha!r}.") from None


def ut3_scale(data, alpha):
    """Multiply the train by ``alpha`` (a real scalar or an array broadcastable
    to the stack shape); the first TT core carries the factor, rounded to the
    result's dtype: the train's for a Python number (ints and Fractions past
    the float range are taken exactly), NumPy's promotion of the train's and
    ``alpha``'s dtypes for a NumPy or CuPy scalar or array (float64 for a
    float32 train times ``np.float64(2)``, or an int64 array).  Where that
    core could leave the dtype's range (its largest entry's exponent and the
    factor's add up past the dtype's, or to within a mantissa of its
    smallest normal number), or the factor alone does not fit the dtype (a
    float32 train times 1e39 or 1e-46), the scale is spread evenly over the
    Tucker and TT cores instead (powers of two, exact; the factor's mantissa
    on the first TT core): inf or 0 only where the tensor's own entries
    overflow or underflow.  A non-finite ``alpha`` (inf, or ``1 / 0`` from
    ``x / 0``) stays on the first TT core: the contraction then gives NaN,
    not +-inf, where it adds terms of opposite sign or multiplies inf by 0.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    alpha : real number or array_like of reals
        A Python or NumPy real (bools as 0 and 1), or an array or list that
        broadcasts to the stack shape (one factor per train).  A list or
        tuple counts as the NumPy array it makes, in the result's dtype too
        (a float32 train times ``[1.0, 2.0]`` is float64, as NumPy's float32
        array times that list is).

    Returns
    -------
    tuple
        ``.data`` of the scaled train (same structure).

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    TypeError
        ``alpha`` is not real: complex, ``None``, a string, or an array of such.
    ValueError
        ``alpha`` is a ragged list, or does not broadcast to the stack shape.
    """
    return _scale(data, alpha)


def _real_parts(alpha):
    """``(m, k)`` with ``alpha = m * 2**k`` (``m`` a float, rounded once) for a
    real Python number: ``(float(alpha), 0)`` where that is a normal float,
    0, inf or NaN; else ``m`` in ``[0.5, 2)`` by exact arithmetic -- an int
    past the float range (``x * 10**400``), or a Fraction or float below its
    normal numbers (``Fraction(1, 10**400)`` was 0)."""
    try:
        f, overflowed = float(alpha), False
    except OverflowError:
        f, overflowed = math.inf, True
    if alpha == 0 or (math.isfinite(f) and abs(f) >= sys.float_info.min) or (
            not math.isfinite(f) and not overflowed):  # (inf and NaN themselves)
        return f, 0
    try:
        q = fractions.Fraction(alpha)
    except (TypeError, ValueError, OverflowError):  # (a Real type Fraction cannot read)
        if overflowed:
            raise ValueError("Argument `alpha` is too large for a float.") from None
        return f, 0
    k = q.numerator.bit_length() - q.denominator.bit_length()
    return float(q / 2**k if k >= 0 else q * 2**-k), k


def _scale(data, alpha, power=0, like=None):
    """:func:`ut3_scale` by ``alpha * 2**power`` (``power`` an int or an int
    array of the stack's shape; exact), promoting as ``alpha`` would, or as
    the dtype ``like`` would where given (the inverse of a NumPy factor is
    passed as its float64 mantissa and ``power``: ``x / np.float32(1e-40)``
    took ``1 / alpha`` in float32, inf)."""
    p = _parts(data)
    xp = p.xp
    if isinstance(alpha, (list, tuple)):
        # NumPy reads a list as the array it makes (NEP 50: not a weak Python
        # scalar), so a float32 train times [1.0, 2.0] is float64, as `/` is
        alpha = _alpha_array(alpha)
    strong = getattr(alpha, "dtype", None) if like is None else np.dtype(like)
    if strong is not None and strong.kind in "biuf":
        # NumPy's promotion (NEP 50): a NumPy or CuPy scalar or array takes part
        # by its dtype (a float32 train times np.float64(2) or a float64 array
        # is float64, as the dense tensor times it is), a Python number does not
        dt = np.result_type(p.U.dtype, strong)
        if dt not in (np.float32, np.float64):  # (a longdouble: trains hold these two)
            dt = np.dtype(np.float64)
        if dt != p.U.dtype:
            p = _Parts(xp, p.U.astype(dt), p.G.astype(dt), p.shape, p.masks, p.stack, p.mk,
                       p.mt)
    U, G = _masked(p)
    power = np.asarray(power, dtype=np.int64)  # (alpha's shape: broadcast with it below)
    if isinstance(alpha, numbers.Number) and not hasattr(alpha, "dtype"):
        if not isinstance(alpha, numbers.Real):  # complex, Decimal
            raise TypeError(f"Argument `alpha` must be a real number, not {alpha!r}.")
        m, k = _real_parts(alpha)
        wide = xp.full(p.S, m, dtype=np.float64)
        power = np.broadcast_to(power + k, p.stack).reshape(p.S)
    else:
        if isinstance(alpha, numbers.Number):  # a NumPy scalar
            alpha = np.asarray(alpha)
        _not_on_device(alpha, "alpha", xp)
        _refuse_masked(alpha, "alpha")
        a = _alpha_array(alpha)
        if a.dtype.kind not in "biuf":  # bools as 0 / 1, as a Python True is
            raise TypeError(f"Argument `alpha` must be a real number or an array of reals, "
                            f"not {alpha!r}.")
        try:
            a = xp.broadcast_to(xp.asarray(a), p.stack).reshape(p.S)
            power = np.broadcast_to(power, p.stack).reshape(p.S)
        except ValueError:
            raise ValueError(
                f"Argument `alpha` must be a scalar or broadcast to the stack shape {p.stack}, not shape {a.shape}."
            ) from None
        wide = a.astype(np.result_type(a.dtype, np.float64))  # (a longdouble stays one)
    # the factor's own exponent, measured before the cast to the train's
    # dtype (which made 1e39 inf and 1e-46 zero in float32), paired with 0
    pw = xp.asarray(power.astype(np.int32))
    ea = _exponents(xp, wide[None, :, None])[0] + pw
    if _may_leave_range(xp, G.dtype, _exponents(xp, G[:1])[0], ea, xp.zeros_like(ea), ea,
                        smallest=[(_min_exponents(xp, G[:1])[0], ea)]):
        # the factor and the first core could leave the range together (a
        # float32 train of norm 1e20 in one core, times 1e20): the scaled
        # train's mantissas, the exponents spread evenly over the cores
        ps, e = _power_scaled(p)
        m, ea = xp.frexp(wide)
        U, G = ps.U, ps.G  # (the Tucker cores' scale is in e too)
        G[0] *= m.astype(G.dtype)[:, None, None, None]
        ea = ea + pw
        _spread_train(xp, U, G, e + xp.where(xp.isfinite(wide), ea, 0))
    else:
        with np.errstate(over="ignore", under="ignore"):  # (in range: decided above)
            a = (_times_power(xp, wide, power) if power.any() else wide).astype(G.dtype)
        G[0] *= a[:, None, None, None]
    return _pack(xp, U, G, p.shape, p.mk, p.mt, p.stack)


def ut3_neg(data):
    """The negated train.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.

    Returns
    -------
    tuple
        ``.data`` of the negated train (same structure; the first TT core
        carries the sign).

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    """
    return ut3_scale(data, -1.0)


def ut3_sub(x, y):
    """Difference ``x - y``: :func:`ut3_add` with ``y``'s first TT core negated.

    Parameters, returns (``.data`` of ``x - y``) and the errors raised are
    those of :func:`ut3_add`.
    """
    return _add(_parts(x, "x"), _parts(y, "y"), "ut3_sub", negate=True)


def ut3_hadamard(x, y):
    """Elementwise product: Kronecker products of the cores.

    ``U[(j, k), o] = Ux[j, o] Uy[k, o]`` and
    ``G[(a, c), (j, k), (b, e)] = Gx[a, j, b] Gy[c, k, e]``; the masks combine
    the same way.  Where a product of two cores could leave the dtype's
    range (the exponents of their largest entries add up past the dtype's,
    or to within a mantissa of its smallest normal number), the products of
    the cores scaled by powers of two are taken and the scale spread evenly
    over the Tucker and TT cores: inf or 0 only where the tensor's own
    entries overflow or underflow.

    Parameters and the errors raised are those of :func:`ut3_add`; returns
    ``.data`` of the product, with padded ranks ``nx ny`` and ``rx ry``
    (float64 if either train is).
    """
    p, q = _parts(x, "x"), _parts(y, "y")
    _check_same(p, q, "ut3_hadamard")
    xp = p.xp
    n, r = p.n * q.n, p.r * q.r
    _check_result_size(xp, "ut3_hadamard", [(p.d,) + p.stack + (n, p.N), (p.d,) + p.stack + (r, n, r)],
                       np.result_type(p.U.dtype, q.U.dtype).itemsize)
    Ux, Gx = _masked(p)
    Uy, Gy = _masked(q)
    d, S = p.d, p.S

    def kron(Ux, Gx, Uy, Gy):
        U = xp.einsum("dsjo,dsko->dsjko", Ux, Uy).reshape(d, S, p.n * q.n, p.N)
        G = xp.einsum("dsajb,dscke->dsacjkbe", Gx, Gy).reshape(d, S, r, n, r)
        return U, G

    dt = np.result_type(Ux.dtype, Uy.dtype)
    if _may_leave_range(xp, dt, _exponents(xp, Ux, dt), _exponents(xp, Uy, dt),
                        _exponents(xp, Gx, dt), _exponents(xp, Gy, dt),
                        smallest=[(_min_exponents(xp, Ux, dt), _min_exponents(xp, Uy, dt)),
                                  (_min_exponents(xp, Gx, dt), _min_exponents(xp, Gy, dt))]):
        # a core product could leave the range (x * 1e160 squared; a float32
        # train whose norm, in its last core after an svd, passes 2**64): the
        # products of power-of-two scaled cores, the scale spread evenly
        # over the cores -- inf or 0 only where the tensor itself is
        (ps, ep), (qs, eq) = _power_scaled(p), _power_scaled(q)
        U, G = kron(ps.U, ps.G, qs.U, qs.G)
        _spread_train(xp, U, G, ep + eq)
    else:
        U, G = kron(Ux, Gx, Uy, Gy)
    return _pack(xp, U, G, p.shape, _pair_mask(p.mk, q.mk), _pair_mask(p.mt, q.mt), p.stack)


def _min_exponents(xp, a, dt=None):
    """``frexp`` exponents ``(d, S)`` of the smallest nonzero finite magnitude
    of each core of ``a (d, S, ...)`` (0 where a core has none), in the float
    dtype ``dt`` (``a``'s own by default)."""
    if a.size == 0:
        return xp.zeros(a.shape[:2], dtype=np.int32)
    mag = xp.abs(a.reshape(a.shape[:2] + (-1,)).astype(dt or a.dtype, copy=False))
    small = xp.where((mag > 0) & xp.isfinite(mag), mag, np.inf).min(axis=-1)
    _, e = xp.frexp(small)
    return xp.where(xp.isfinite(small), e, 0).astype(np.int32)


def _may_leave_range(xp, dtype, *exponents, smallest=()) -> bool:
    """Whether an entrywise product of two cores could leave ``dtype``'s range:
    ``exponents`` are pairs ``(ex, ey)`` of ``frexp`` exponents (``(d, S)``,
    :func:`_exponents`) of the largest entries of the cores multiplied, and a
    product of entries below ``2**ex`` and ``2**ey`` is below
    ``2**(ex + ey)`` (one bool read back on CuPy).  It could overflow where
    that bound passes the dtype's largest exponent, and lose the largest
    products' bits below the smallest normal number (cores of 1e-200 and
    1e200 times 1e-200 gave the exact zero tensor) where the bound is within
    a mantissa of it.  Read off the inputs: no pass over the product.  An
    all-zero or non-finite core counts as exponent 0: its products are its
    own.  ``smallest``: pairs of :func:`_min_exponents` (or a factor's
    exponent) whose product could lose bits the same way, though the
    largest entries' does not (a first core's 2**-1000 times 2**-100, its
    partners in the next cores 2**500: the scaled train lost that term)."""
    info = np.finfo(dtype)
    high, low = info.maxexp, info.minexp + info.nmant
    hits = [((ex + ey >= high) | (ex + ey <= low)).any()
            for ex, ey in zip(exponents[::2], exponents[1::2])]
    hits += [(ex + ey <= low).any() for ex, ey in smallest]
    for h in hits[1:]:  # (combined where they live: one read back)
        hits[0] = hits[0] | h
    return bool(hits[0])


def _spread(xp, G, e):
    """Multiply the train of cores ``G (d, S, ...)`` (TT cores, or Tucker
    cores) by ``2**e`` (``e (S,)``), in place, a near-equal share of ``e`` on
    each core: no core leaves the range unless a share must."""
    d = G.shape[0]
    e = np.asarray(e if xp is np else xp.asnumpy(e), dtype=np.int64)
    for i in range(d):
        share = e // d + (i < e % d)  # (floor division: the shares add up to e)
        G[i] = _times_power(xp, G[i], share)


def _spread_train(xp, U, G, e):
    """:func:`_spread` of ``2**e`` over the Tucker and the TT cores, half each:
    on the TT cores alone a one-core train took its Tucker cores' share too
    (``-x`` of the vector ``[1.5e308, 1.0]`` came back ``[-inf, nan]``)."""
    e = np.asarray(e if xp is np else xp.asnumpy(e), dtype=np.int64)
    _spread(xp, U, e // 2)
    _spread(xp, G, e - e // 2)


def _times_power(xp, a, e):
    """``a (S, ...) * 2**e`` per stack element (``e (S,)`` ints; exact where
    the result is a normal number)."""
    e = xp.asarray(e).astype(np.int32)
    return xp.ldexp(a, e.reshape(e.shape + (1,) * (a.ndim - 1)))


def ut3_inner(x, y):
    """Inner products ``sum(x * y)`` per stack element (shape ``stack``; a
    0-d array, not a scalar, for unstacked trains).

    NumPy: a Numba kernel specialized on both structures (it reads real
    slots only); CuPy: batched ``einsum``.

    Parameters
    ----------
    x, y : tuple
        ``.data`` tuples ``(tucker_supercore, tt_supercore, shape, masks)`` of two
        trains with the same ``shape`` and ``stack_shape``; their padded
        sizes may differ.

    Returns
    -------
    array, shape ``stack``
        On the supercores' array module.

    Raises
    ------
    TypeError, ValueError
        ``x`` or ``y`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        The trains differ in ``shape`` or ``stack_shape``.
    """
    p, q = _parts(x, "x"), _parts(y, "y")
    _check_same(p, q, "ut3_inner", need_n=False)
    return _inner(p, q).reshape(p.stack)


def _inner(p, q):
    m, e = _inner_scaled(p, q)
    return m if e is None else p.xp.ldexp(m, e)


def _inner_scaled(p, q):
    """``(m, e)`` with the inner products ``(S,)`` equal to ``ldexp(m, e)``
    (``e`` None: ``m`` is the value).

    The chain multiplies 2d cores: entries far from 1 overflow in it (inf *
    0 gives NaN) or underflow while the result would fit.  A rescue divides
    each core of each stack element by a power of two near its largest live
    entry (exact: only exponents change) and runs the chain again; it is
    taken only for the stack elements whose plain result was non-finite,
    zero or in the subnormal range, or whose cores' exponents span more than
    a quarter of the dtype's range (a partial product may have lost digits
    to a subnormal; the cores are balanced before they are scaled,
    :func:`_balanced`); elsewhere the plain chain's result stays.  On NumPy the
    rescue runs only where needed and scales only those elements (the check
    costs nothing; one zero train in a stack of 1024, d = 4, costs 2.5x the
    plain call, a stack of zero trains 3-6x); CuPy runs both chains and
    picks per element (deciding would synchronize).
    """
    xp = p.xp
    m = _gram(p, q)
    redo = ~xp.isfinite(m) | (xp.abs(m) < _SAFE_TINY[m.dtype.char])
    # ... and where the cores' exponents span more than a quarter of the
    # range (_in_range's test): a partial product may have passed through a
    # subnormal and lost digits though the result looks normal (cores of
    # 1.2e-160 and 1.1e160: a norm 1e-5 off)
    span = _exponent_span(xp, p.U, p.G) + (0 if q is p else _exponent_span(xp, q.U, q.G))
    redo = redo | (span > _span_limit(m.dtype))
    only = None
    if xp is np:
        if not redo.any():
            return m, None
        if not redo.all():  # scale those elements only (the chain runs on all)
            only = np.flatnonzero(redo)
    ps, ep = _power_scaled(p, only, frobenius=True)
    qs, eq = (ps, ep) if q is p else _power_scaled(q, only, frobenius=True)
    ms, es = _gram(ps, qs), ep + eq
    return xp.where(redo, ms, m), xp.where(redo, es, 0).astype(np.int32)


def _span_limit(dtype) -> int:
    """The exponent span (sum of the cores' ``|frexp exponent|``) past which
    the chains scale their cores near 1: a quarter of ``dtype``'s exponent
    range, where a partial product could pass the largest number or lose
    digits to a subnormal though the result fits."""
    return np.finfo(dtype).maxexp // 4


def _exponent_span(xp, U, G):
    """Per stack element, the sum over all cores ``U (d, S, ...)`` and ``G``
    of ``|frexp exponent|`` of their largest entries (``(S,)``; of the
    padding too where the cores are not masked, which can only make a caller
    rescue where it need not)."""
    return xp.abs(_exponents(xp, U)).sum(axis=0) + xp.abs(_exponents(xp, G)).sum(axis=0)


#: Below this a Gram result may have lost digits to underflow on the way
#: (the smallest normal number times 2**mantissa bits).
_SAFE_TINY = {np.dtype(t).char: np.finfo(t).tiny * 2.0 ** np.finfo(t).nmant
              for t in (np.float32, np.float64)}


def _gram(p, q):
    return _inner_numba(p, q) if _use_numba(p.xp) else _inner_xp(p, q)


def _power_scaled(p, only=None, frobenius=False):
    """``(p', e)``: the train of ``p`` is ``2**e`` (``e (S,)`` int32) times
    that of ``p'``, whose cores each have their largest live entry in
    ``[0.5, 1)`` (every core of every stack element divided by a power of
    two) and whose padding is zero (padding content must not pick a scale:
    a huge or non-finite padding word would push the live entries out of
    range).  ``only`` (NumPy): the stack elements to scale; the others are
    copied as they are, with ``e = 0``.  ``frobenius``: each core's
    Frobenius norm in ``[0.5, 1)`` instead, so that a Gram chain is a
    contraction: a largest entry near 1 still let it grow by the core's
    size at every step (16 Tucker factors of 8192 ones: ``2**208``, past
    float32, though the norm, ``2**104``, fits).
    """
    xp = p.xp
    if only is None:
        U, G = _masked(p)
    else:
        sub = _Parts(xp, p.U[:, only], p.G[:, only], p.shape, None, None, p.mk[:, only],
                     p.mt[:, only])
        U, G = _masked(sub)
    # (every core's largest live entry is in [0.5, 1) after this: no core
    # scale is left to take out)
    U, G, e = _balanced(xp, U, G)
    if frobenius:  # (entries below 1 now: their squares' sums cannot overflow)
        fU, fG = (_exponents(xp, xp.sqrt((c * c).reshape(c.shape[:2] + (-1,)).sum(-1))[..., None])
                  for c in (U, G))
        U = xp.ldexp(U, -fU[:, :, None, None])
        G = xp.ldexp(G, -fG[:, :, None, None, None])
        e = e + fU.sum(axis=0) + fG.sum(axis=0)
    e = e.astype(np.int32)
    if only is not None:  # back into copies of the whole stack
        U_all, G_all, e_all = p.U.copy(), p.G.copy(), np.zeros(p.S, dtype=np.int32)
        U_all[:, only], G_all[:, only], e_all[only] = U, G, e
        U, G, e = U_all, G_all, e_all
    return _Parts(xp, U, G, p.shape, p.masks, p.stack, p.mk, p.mt), e


def _entry_exponents(xp, a):
    """``(e, live)``: ``frexp`` exponents (int32) of every entry of ``a``, and
    where the entry is finite and nonzero (``e`` is 0 for 0, inf and NaN)."""
    _, e = xp.frexp(a)
    return e, xp.isfinite(a) & (a != 0)


def _balanced(xp, U, G):
    """``(U', G', e)``: the same train (``U (d, S, n, N)``, ``G (d, S, r, n, r)``,
    masked) as ``2**e (S,)`` times the train of ``U'``, ``G'``, with powers of
    two moved along the chain so that every Tucker row and every TT core's
    slice of a right bond index has its largest entry in ``[0.5, 1)`` (the
    last core: all its slices together).

    Each Tucker row's scale goes into the TT core's slice of its index; then,
    left to right, each core's scale on a right bond index goes into the next
    core's slice of it, and the last core's into ``e``.  The scales are
    carried as integer exponents and each entry is scaled once, by its final
    exponent: applied core by core, a carried scale past the dtype's range
    would overflow an entry it is about to bring back.  Exact (powers of two)
    and the tensor is unchanged, except that an entry far below the largest
    of its slice (past the dtype's digits) may flush to zero.

    Why: :func:`_power_scaled` divides each core by its largest entry.
    Without this a core holding 1e300 and 1e-300 on two bond indices whose
    partners hold 1e-300 and 5e299 (the tensor ``[1, 0.5]``) came out as the
    zero tensor; and in a sum's block-diagonal cores a term whose cores carry
    scales that cancel along the chain (``2**480``, ``2**-480``, ...) set the
    largest entries, which flushed the other term: the norm of ``a + b``,
    ``b`` the tensor ``a`` scaled so, was 0 (an earlier balancing moved half
    of each gap, in one pass).

    The orthogonalizations and the SVD balance always, whatever the range:
    a frame is LAPACK's SVD of one core's unfolding, accurate relative to
    the unfolding's largest entry, not to each row or column.  Tucker rows
    of ``2**-40`` and ``2**40`` (their TT core slices ``2**40`` and
    ``2**-40``: the same tensor) lost the small row in "tucker_down",
    "left", "right" and the SVD (the tensor ``[3, 3, 4, 1]`` came back
    ``[2.77, 3.42, 3.85, 0.39]``), and a graded bond gauge did the same in
    "tt_up".  Balanced, a power-of-two gauge of the input changes nothing.
    (And cores of 1e300, 1e-200 and 1e-200, a tensor of 1e-100, gave the
    zero train: the sweep's pushes underflowed, which no finiteness check
    sees.)
    """
    if _use_numba(xp):  # (a Numba kernel: the same bits in two passes, not ~8)
        return _balanced_numba(U, G)
    d = G.shape[0]
    # An empty slice's "max"; an offset below half of it marks the entries
    # behind a zero (their exponents, above -1100, cannot bring it back up)
    lowest = np.int32(_k.BALANCE_NONE)
    eu, lu = _entry_exponents(xp, U)
    cu = xp.where(lu, eu, lowest).max(axis=-1)  # (d, S, n): each Tucker row's scale
    dead_u = cu == lowest  # a zero Tucker row: nothing reaches the tensor through it
    cu = xp.where(dead_u, 0, cu).astype(np.int32)
    U = xp.ldexp(U, -cu[..., None])
    carry = xp.zeros(G.shape[1:3], dtype=np.int32)  # (S, r): into the left bond
    dead = xp.zeros(G.shape[1:3], dtype=bool)  # (S, r): left bond indices that are zero
    out = xp.empty_like(G)
    for i in range(d):
        off = carry[:, :, None] + cu[i][:, None, :]  # (S, r, n): on G[i][s, a, j, :]
        # Entries behind a zero Tucker row or a zero left bond slice add nothing
        # to the tensor: they neither set a scale (counted at face value, 2**600
        # behind a zero set the last core's, which flushed every live entry) nor
        # stay (an exact 0 for the finite ones; inf and NaN stay, as 0 * inf):
        # their offset is `lowest`, which keeps them out of the maxima and
        # scales them to 0 (inf and NaN unchanged)
        off = xp.where(dead[:, :, None] | dead_u[i][:, None, :], lowest, off)[..., None]
        eg, lg = _entry_exponents(xp, G[i])
        at = xp.where(lg, eg + off, lowest)  # (S, r, n, r)
        # (S, r): each right bond index's scale; past the last core one for all
        # (the boundary bond's r_d slots are summed, so they share one scale)
        right = at.max(axis=(1, 2)) if i < d - 1 else at.max(axis=(1, 2, 3))[:, None]
        dead = right < lowest // 2
        right = xp.where(dead, 0, right).astype(np.int32)
        out[i] = xp.ldexp(G[i], off - right[:, None, None, :])
        carry = right
    return U, out, carry[:, 0]


def _balanced_numba(U, G):
    """:func:`_balanced` by the Numba kernel (the same bits): one pass to read
    and one to write each core, where the array version makes ~8 passes
    (8 MiB of cores, d = 8, n = 16, r = 32, 8 trains: 4.0 -> 1.0 ms on the
    2-core AMD EPYC), split over the threads as the other kernels' stacks."""
    U, G = np.ascontiguousarray(U), np.ascontiguousarray(G)
    word = np.uint64 if U.dtype.itemsize == 8 else np.uint32
    U_out, G_out = np.empty_like(U), np.empty_like(G)
    e = np.zeros(U.shape[1], dtype=np.int32)
    work = 4 * (U.size + G.size)  # (~1 ns an entry: TT_CPU_SERIAL_WORK ~1 ms)
    d, _, r, n, _ = G.shape
    _run_stack(_k.balance_powers, U.shape[1], work,
               (U, G, U.view(word), G.view(word), U_out, G_out, e),
               lambda: _k.balance_powers_scratch(d, n, r))
    return U_out, G_out, e


def _in_range(p):
    """``(p, None)``, or where its chain could leave the dtype's range while
    the result fits, ``(p', e)``: the same train with its cores power-of-two
    scaled (their largest live entries in ``[0.5, 1)``) and the exponents
    ``e (S,)`` of the scale, which the caller puts back on the *result*
    (:func:`_scaled_back`), for :func:`ut3_to_dense`, :func:`ut3_entries`
    and :func:`ut3_apply`.  (Folded back into the last TT core, the scale
    made that core inf wherever the product of the cores' maxima passed the
    dtype's, though entries fit: inf - inf gave NaN for them.)

    The chain's partial products multiply core after core: cores of 1e160
    and 1e-160 made inf where the tensor was [[1.0]] (norm and inner rescue
    such trains; these returned inf).  Scaled cores keep every partial
    product near the result's own size.  Powers of two are exact, so the
    result is the plain chain's wherever that one stays in range, except for
    entries far below the largest of their core's slice (past the dtype's
    digits), which the scaling may flush to zero (an entry of 1.5 * 2**-800
    beside one of 2**300 in one core).  NumPy scales only when the cores' exponents (frexp of their
    largest entries, padding too unless it is inf or NaN: padding can only
    make it scale, which changes nothing) add up to more than a quarter of
    the dtype's exponent range; CuPy always does (deciding would
    synchronize; it costs copies of the cores, not a pass over the result).
    """
    xp = p.xp
    if xp is np:
        limit = _span_limit(p.U.dtype)
        span = _k.core_exponent_span(p.U, p.G)  # (whole cores: microseconds)
        if span < 0:  # an inf or NaN, which may be padding: the live entries decide
            U, G = _masked(p)
            span = int(_exponent_span(np, U, G).max(initial=0))
        if span <= limit:
            return p, None
    return _power_scaled(p)


def _scaled_back(xp, out, e):
    """``out (S, ...)`` times ``2**e (S,)`` (exact where the result is a normal
    number; inf where it does not fit, as the plain chain would give), or
    ``out`` itself where :func:`_in_range` did not scale."""
    if e is None:
        return out
    return xp.ldexp(out, e.reshape(e.shape + (1,) * (out.ndim - 1)))


def _exponents(xp, a, dt=None):
    """``frexp`` exponents ``(d, S)`` of the largest magnitude of each core of
    ``a (d, S, ...)`` (0 for an all-zero, empty or non-finite core), measured
    in the float dtype ``dt`` (``a``'s own by default; integer vectors' ``-min``
    is taken after the cast, so it cannot wrap).  The magnitude comes from
    ``max`` and ``min``: no temporary as large as ``a``."""
    if a.size == 0:
        return xp.zeros(a.shape[:2], dtype=np.int32)
    flat = a.reshape(a.shape[:2] + (-1,))
    dt = a.dtype if dt is None else dt
    big = xp.maximum(flat.max(axis=-1).astype(dt), -(flat.min(axis=-1).astype(dt)))
    _, e = xp.frexp(big)
    return xp.where(xp.isfinite(big), e, 0).astype(np.int32)


def _inner_xp(p, q):
    xp = p.xp
    Ux, Gx = _masked(p)
    Uy, Gy = _masked(q)
    W = xp.asarray(p.mt[0][:, :, None] & q.mt[0][:, None, :], dtype=np.result_type(Ux.dtype, Uy.dtype))
    for i in range(p.d):
        Ni = p.shape[i]
        M = xp.einsum("sjo,sko->sjk", Ux[i][..., :Ni], Uy[i][..., :Ni])
        T = xp.einsum("sac,sajb->scjb", W, Gx[i])
        T = xp.einsum("scjb,sjk->sckb", T, M)
        W = xp.einsum("sckb,scke->sbe", T, Gy[i])
    return W.sum(axis=(-2, -1))


def _inner_numba(p, q):
    key = ("inner", p.shape, (p.n, p.r, q.n, q.r), p.masks.stack_flat(),
           q.masks.stack_flat())
    kernel = KERNELS.get(key, lambda: _k.build_ut3_inner(p.shape, _tables(p), _tables(q)))
    dt = np.result_type(p.U.dtype, q.U.dtype)
    args = [_kernel_array(a, dt) for a in (p.U, p.G, q.U, q.G)]
    out = np.empty(p.S, dtype=dt)

    def scratch():  # W, W2, T, T2, M, Cx, Cy, Uxc, Uyc (one set per thread)
        return (np.empty(p.r * q.r, dtype=dt), np.empty(p.r * q.r, dtype=dt),
                np.empty(q.r * p.n * p.r, dtype=dt), np.empty(q.r * q.n * p.r, dtype=dt),
                np.empty(p.n * q.n, dtype=dt), np.empty(p.r * p.n * p.r, dtype=dt),
                np.empty(q.r * q.n * q.r, dtype=dt), np.empty(p.n * max(p.shape), dtype=dt),
                np.empty(q.n * max(p.shape), dtype=dt))

    # multiply-adds per element and core at the padded sizes: M, T, T2, W'
    bonds = q.r * p.r * p.n * p.r + q.r * p.n * q.n * p.r + q.r * q.n * p.r * q.r
    work = p.S * sum(p.n * q.n * Ni + bonds for Ni in p.shape)
    _run_stack(kernel, p.S, work, (*args, out), scratch)
    return out


NORM_METHODS = ("inner", "orthogonal")


@_float64_retry(check_result=False)
def ut3_norm(data, method="inner"):
    """Frobenius norms per stack element: shape ``stack`` (a 0-d array, not a
    scalar, for an unstacked train).

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    method : {"inner", "orthogonal"}
        * ``"inner"`` (default) -- ``sqrt(max(inner(x, x), 0))``: one Gram
          chain, fast.  Its absolute error is about ``sqrt(eps)`` times the
          norms of the terms the train is a sum of, so a train that is the
          difference of two nearly equal ones (``x_next - x``, a convergence
          test) can come out far too large or 0: at a relative difference of
          1e-10 (float64) or 1e-4 (float32) the result is noise.
        * ``"orthogonal"`` -- the norm of the last TT core after
          ``ut3_squash_tails`` and ``ut3_orthogonalize(data, "left")``
          (without the squash, a sum's boundary slots would be missed):
          accurate to about ``eps``
          times those norms, at 7-30 times the cost (pad-safe SVDs of every
          core; on CuPy one synchronization per step).  A live inf or NaN
          entry is a ValueError here (LAPACK cannot take it), where
          ``"inner"`` returns inf or NaN.  A float32 train whose sweep meets
          inf or NaN is computed again in float64 and rounded back.

    Both keep entries far from 1 from overflowing or underflowing on the way
    (cores are scaled by powers of two): a norm that fits in the dtype is
    returned, one that does not is ``inf``.

    Returns
    -------
    array, shape ``stack``
        On the supercores' array module.

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        ``method`` is not one of :data:`NORM_METHODS`, or, with ``"orthogonal"``,
        a live entry is inf or NaN.
    TrainOverflowError
        With ``"orthogonal"``: the sweep met inf or NaN although the live entries
        are finite, also in float64 (a float32 train is retried there first).
    """
    if method not in NORM_METHODS:
        raise ValueError(f"Argument `method` must be one of {NORM_METHODS}, not {method!r}.")
    if method == "inner":
        p = _parts(data)
        xp = p.xp
        m, e = _inner_scaled(p, p)
        norm = xp.sqrt(xp.maximum(m, 0))
        # the exponent of inner(x, x) is even (twice x's): halved after the
        # sqrt, so a norm that fits is never lost to its square's overflow
        return (norm if e is None else xp.ldexp(norm, e // 2)).reshape(p.stack)
    p = _parts(data)
    norm, = _by_chunks(p, lambda q: (_orthogonal_norm(q)[None],))
    return norm[0].reshape(p.stack)


def _orthogonal_norm(p):
    """``norm(.., "orthogonal")`` of the flat stack of ``p``, shape ``(S,)``."""
    p, e = _power_scaled(p)
    xp = p.xp
    U, G = _masked(p)
    _check_finite_input(xp, U, G, "norm")
    # ut3_orthogonalize(.., "left") after squashing the boundary bonds: the
    # Tucker rows and TT cores 0..d-2 orthonormal, so the last core (zero on
    # padding: frames are) holds the norm
    mk, mt = p.mk.copy(), p.mt.copy()
    _squash(G, mt)
    U, G, mk = _sweep_left(xp, U, G, p.shape, mk, mt)
    last = G[-1].reshape(p.S, -1)
    # its squares are summed at a scale near 1: the norm itself may be near
    # the dtype's largest number (2**768 in float64 overflowed as 2**1536)
    k = _exponents(xp, last[None])[0]
    last = xp.ldexp(last, -k[:, None])
    norm = xp.sqrt((last * last).sum(axis=-1))
    if not _finite(xp, norm):  # the cores are scaled near 1: a fault, retried in float64
        _overflowed(norm.dtype)
    norm = xp.ldexp(norm, e + k)
    if norm.dtype == np.float32 and not _finite(xp, norm):
        # past float32 -- or a product's finite garbage (as the last core's
        # squares showed before they were scaled): float64 decides, and its
        # norm rounds to inf only where the norm does not fit
        _overflowed(norm.dtype)
    return norm


# ---------------------------------------------------------------------------
# entries and apply
# ---------------------------------------------------------------------------

def _chain(p, V):
    """``out[s, k]`` of the chain with per-core vectors ``V (d, S, K, n)``.

    NumPy: the structure-specialized Numba kernel (reads real slots only);
    CuPy: batched ``einsum`` on the masked TT supercore."""
    G = p.G
    if _use_numba(p.xp):
        # (nor the mode sizes: the chain reads the vectors as they come)
        key = ("chain", (p.n, p.r), p.masks.stack_flat())
        kernel = KERNELS.get(key, lambda: _k.build_ut3_chain(*_tables(p)))
        dt = np.result_type(V.dtype, G.dtype)
        out = np.empty((p.S, V.shape[2]), dtype=dt)

        def scratch():  # Gc, u, v, v2 (one set per thread)
            return (np.empty(G.size // p.S, dtype=dt), np.empty(p.r * p.n, dtype=dt),
                    np.empty(p.r, dtype=dt), np.empty(p.r, dtype=dt))

        # multiply-adds at the padded sizes: the gather, then per query and
        # core u and its product with the core
        work = p.S * p.d * (p.r * p.n * p.r + V.shape[2] * (p.r * p.n + p.r * p.n * p.r))
        _run_stack(kernel, p.S, work, (_kernel_array(V, dt), _kernel_array(G, dt), out), scratch)
        return out
    xp = p.xp
    _, G = _masked(p)
    v = xp.broadcast_to(xp.asarray(p.mt[0][:, None, :], dtype=G.dtype), (p.S, V.shape[2], p.r))
    for i in range(p.d):
        T = xp.einsum("ska,sajb->skjb", v, G[i])
        v = xp.einsum("skjb,skj->skb", T, V[i])
    return v.sum(axis=-1)


#: Bytes the per-query temporaries of one chunk of ``entries`` / ``apply``
#: queries may take (the core vectors ``V``, and CuPy's chain products).
_QUERY_CHUNK_BYTES = 1 << 25


def _chain_queries(p, k_total, vectors):
    """:func:`_chain` over ``k_total`` queries, ``vectors(a, b)`` giving ``V``
    of queries ``[a, b)``: in chunks of :data:`_QUERY_CHUNK_BYTES`, since
    ``V`` holds ``d * n`` numbers per query and stack element (it was made
    whole: 400,000 entries of a 16-core train peaked at 528x their result)."""
    per_query = p.S * p.n * (p.d + p.r) * 8
    step = max(1, _QUERY_CHUNK_BYTES // per_query)
    if k_total <= step:
        return _chain(p, vectors(0, k_total))
    out = None
    for a in range(0, k_total, step):
        b = min(a + step, k_total)
        part = _chain(p, vectors(a, b))
        if out is None:
            out = p.xp.empty((p.S, k_total), dtype=part.dtype)
        out[:, a:b] = part
    return out


def ut3_entries(data, indices):
    """Entries ``x[i_0, ..., i_{d-1}]``.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    indices : int array, shape ``batch + (d,)``
        Index tuples, shared by all stack elements.

    Returns
    -------
    array, shape ``stack + batch``
        A 0-d array (not a scalar) for an unstacked train and ``indices``
        of shape ``(d,)``.

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    TypeError
        ``indices`` is not an integer array.
    ValueError
        ``indices`` is ragged, its last axis is not of length ``d``, or an index
        lies outside ``[0, shape[i])``.
    """
    p = _parts(data)
    if type(indices).__module__.split(".")[0] == "cupy":
        idx = indices.get()  # the bounds check below runs on the host (a synchronization)
    else:
        _refuse_masked(indices, "indices")
        try:
            idx = np.asarray(indices)
        except ValueError:  # a ragged nesting
            raise ValueError("Argument `indices` must be a rectangular integer array of shape "
                             f"batch + ({p.d},), not a ragged nesting.") from None
    if idx.dtype.kind not in "iu":
        got = (f"dtype {idx.dtype}" if hasattr(indices, "dtype")
               else f"a {type(indices).__name__} (read as dtype {idx.dtype})")
        raise TypeError(f"Argument `indices` must be an integer array, not {got}.")
    if idx.ndim < 1 or idx.shape[-1] != p.d:
        raise ValueError(f"Argument `indices` must have shape batch + ({p.d},), not {idx.shape}.")
    batch = idx.shape[:-1]
    flat = idx.reshape(-1, p.d).astype(np.int64)
    if flat.size:
        bad = (flat < 0) | (flat >= np.asarray(p.shape))
        if bad.any():
            # the first bad entry, by its place in `indices` (row-major, as the user wrote it)
            k, a = divmod(int(np.argmax(bad.ravel())), p.d)
            at = ", ".join(map(str, np.unravel_index(k, batch) + (a,))) if batch else str(a)
            raise ValueError(f"Argument `indices` must lie in [0, shape) with shape {p.shape}, "
                             f"but indices[{at}] = {int(idx.reshape(-1, p.d)[k, a])} (axis {a} "
                             f"has size {p.shape[a]}).")  # (flat's int64 wraps 2**63 and up)
    p, e = _in_range(p)
    xp = p.xp
    U, _ = _masked(p)
    cols = xp.asarray(flat)

    def vectors(a, b):
        return xp.stack([xp.swapaxes(U[i][:, :, cols[a:b, i]], 1, 2) for i in range(p.d)])

    out = _chain_queries(p, flat.shape[0], vectors)
    return _scaled_back(xp, out, e).reshape(p.stack + batch)


def ut3_apply(data, vectors):
    """Contract the train with one vector per mode.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    vectors : sequence of ``d`` arrays, shapes ``batch + (N_i,)``
        Shared by all stack elements; the batch shapes must agree.

    Returns
    -------
    array, shape ``stack + batch``
        ``sum x[i_0, ..., i_{d-1}] v_0[i_0] ... v_{d-1}[i_{d-1}]``, in the
        dtype NumPy's promotion gives the supercores and the vectors
        (float32 trains with float64, int32 or int64 vectors: float64, one
        more compiled kernel; with bool, int8, int16, uint8 or uint16
        vectors: float32).

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    TypeError
        ``vectors`` is not a sequence (an iterator, a scalar, a dict or set), or
        a vector does not hold real numbers.
    ValueError
        ``vectors`` does not hold ``d`` arrays, or a vector is ragged or not of
        shape ``batch + (N_i,)`` (``batch`` taken from ``vectors[0]``).
    """
    p = _parts(data)
    xp = p.xp
    if hasattr(vectors, "__next__") or not hasattr(vectors, "__len__") or \
            getattr(vectors, "ndim", 1) == 0 or isinstance(vectors, (collections.abc.Mapping,
                                                                       collections.abc.Set)):
        # len() of a scalar or a generator fails with Python's own message; a
        # dict would pass len() and then yield its keys as the vectors
        raise TypeError(f"Argument `vectors` must be a sequence of {p.d} arrays, not "
                        f"{type(vectors).__name__}" + ("; pass list(...)." if hasattr(
                            vectors, "__next__") else "."))
    if len(vectors) != p.d:
        raise ValueError(f"Argument `vectors` must hold {p.d} arrays, not {len(vectors)}.")
    vs = []
    for i, v in enumerate(vectors):
        _not_on_device(v, f"vectors[{i}]", xp)
        _refuse_masked(v, f"vectors[{i}]")
        try:
            vs.append(xp.asarray(v))
        except ValueError:  # NumPy's "inhomogeneous shape" names no argument
            raise ValueError(f"Argument `vectors[{i}]` must be a rectangular array of reals, "
                             f"not a ragged sequence.") from None
    batch = tuple(vs[0].shape[:-1])
    for i, v in enumerate(vs):
        if v.dtype.kind not in "biuf":
            raise TypeError(f"Argument `vectors[{i}]` must hold real numbers, not dtype {v.dtype}.")
        if tuple(v.shape) != batch + (p.shape[i],):
            raise ValueError(f"Argument `vectors[{i}]` must have shape {batch + (p.shape[i],)}, not {v.shape}.")
    p, e = _in_range(p)
    U, _ = _masked(p)
    rows = [v.reshape(-1, p.shape[i]) for i, v in enumerate(vs)]
    dt = np.result_type(U.dtype, *(v.dtype for v in vs))
    exps = _row_scales(xp, rows, dt)

    def vectors(a, b):
        # (scaled chunk by chunk: a whole scaled copy of the vectors would
        # undo the chunking's bound on memory)
        part = [v[a:b] if exps is None else xp.ldexp(v[a:b].astype(dt, copy=False),
                                                     -exps[i][a:b, None])
                for i, v in enumerate(rows)]
        return xp.stack([xp.einsum("sjo,ko->skj", U[i][..., : p.shape[i]], v)
                         for i, v in enumerate(part)])

    out = _chain_queries(p, math.prod(batch), vectors)
    if exps is not None:
        out = xp.ldexp(out, sum(exps)[None, :] + (0 if e is None else e[:, None]))
    else:
        out = _scaled_back(xp, out, e)
    return out.reshape(p.stack + batch)


def _row_scales(xp, rows, dt):
    """``None``, or where the query vectors' magnitudes could take
    :func:`ut3_apply`'s chain past the range of its result dtype ``dt``,
    the ``frexp`` exponents ``(k,)`` of the largest entry of each row (query)
    of each ``rows[i] (k, N_i)`` (0 for a zero or non-finite row): ``apply``
    is linear in each vector, so each query runs on rows scaled into
    ``[0.5, 1)`` and its result is scaled back by the exponents' sum.

    What :func:`_in_range` does for the cores: vectors of 2**600, 2**600
    and 2**-600 made inf where the contraction fits.  The same rule decides
    (NumPy scales where the exponents add up to more than a quarter of the
    range, CuPy always), and the result is likewise bitwise the plain one
    wherever that stays in range.  NumPy decides on each vector's largest
    magnitude, which bounds each of its rows' (two whole-array reductions:
    per row, rows 6 wide cost 40 us per 1000); the rows' exponents are
    :func:`_exponents` of each vector as one core of ``k`` stack elements."""
    if xp is np:
        span = 0
        for r in rows:
            if r.size:  # (Python floats: near enough for an exponent, or inf)
                big = max(float(r.max()), -float(r.min()))
                span += abs(math.frexp(big)[1]) if math.isfinite(big) else math.inf
        if span <= _span_limit(dt):
            return None
    return [_exponents(xp, r[None], dt)[0] for r in rows]


# ---------------------------------------------------------------------------
# pad-safe SVD frames, orthogonalization, T3-SVD
# ---------------------------------------------------------------------------

def _repair_xp(xp, Q, row_mask, kcount):
    """Array-module twin of :func:`zorch_nb.kernels.tt_kernels.orthonormal_frame_repair`
    (the CuPy path); same algorithm, column by column over the whole batch."""
    B, M, K = Q.shape
    rm = xp.asarray(row_mask)
    kc = xp.asarray(kcount)
    Q = xp.where(rm[:, :, None] & (xp.arange(K)[None, None, :] < kc[:, None, None]), Q, 0)

    def orthogonalize(done, q):
        for _ in range(2):
            q = q - xp.einsum("bmc,bc->bm", done, xp.einsum("bmc,bm->bc", done, q))
        return q, xp.sqrt((q * q).sum(axis=-1))

    for j in range(K):
        done = Q[:, :, :j]
        q, nrm = orthogonalize(done, Q[:, :, j])
        res = xp.where(rm, 1 - (done * done).sum(axis=-1), -1)
        e = (xp.arange(M)[None, :] == xp.argmax(res, axis=-1)[:, None]).astype(Q.dtype)
        e, enrm = orthogonalize(done, e)
        bad = nrm < 0.5
        q = xp.where(bad[:, None], e, q)
        nrm = xp.where(bad, enrm, nrm)
        scale = xp.where(q.sum(axis=-1) < 0, -1.0, 1.0) / xp.where(nrm > 0, nrm, 1)
        Q[:, :, j] = xp.where((j < kc)[:, None], q * scale[:, None].astype(Q.dtype), 0)
    return Q


def _frame(A, row_mask, col_mask, kcount, svcount, K, rtol=None):
    """Pad-safe left frame of masked matrices.

    Parameters
    ----------
    A : array ``(..., M, C)``, zero outside ``row_mask`` x ``col_mask``.
    row_mask : host bool ``(..., M)``.
    col_mask : host bool ``(..., C)``.
    kcount : host ints ``(...)`` -- real output columns (<= real rows).
    svcount : host ints ``(...)`` -- real singular values (min of real sizes).
    K : int -- padded number of output columns.
    rtol : float, optional -- also drop the columns whose singular values are
        at most ``rtol`` times the largest (per matrix; at least one column
        where there is a singular value): ``kcount`` then depends on them.

    Returns
    -------
    Q : ``(..., M, K)`` orthonormal on the real rows, zero elsewhere and
        beyond ``kcount``, each column's entries summing to >= 0.
    sv : ``(..., K)`` singular values, zero beyond ``svcount``.
    kcount : host ints ``(...)`` -- the columns kept (``kcount`` as given,
        where no ``rtol`` cut it).

    On CuPy the finiteness check is a synchronization (one bool read back
    per call): the price of failing clearly instead of hanging.
    """
    xp = array_module(A)
    if not _finite(xp, A):  # LAPACK's SVD never returns on rows of inf
        # the callers checked their input (_check_finite_input): this is overflow
        _overflowed(A.dtype)
    batch, (M, C) = A.shape[:-2], A.shape[-2:]
    B = math.prod(batch)
    A = A.reshape(B, M, C)
    rows = _flat_host(row_mask, batch, B, (M,))
    # Rows and columns that are padding in every matrix are zero: the SVD of
    # the others has the same singular values and, zero on the left-out rows,
    # the same frame.  An SVD costs ~ rows x columns^2: after a truncating
    # step the next left unfolding has 32 live rows of r n = 128 (cuts to 8
    # and 4), and a small stack's matrices shrink to their real sizes.
    live_r = np.flatnonzero(rows.any(axis=0))
    live_c = np.flatnonzero(_flat_host(col_mask, batch, B, (C,)).any(axis=0))
    cut_r, cut_c = 0 < live_r.size < M, 0 < live_c.size < C
    if cut_r:
        rows = rows[:, live_r]
    if cut_r and cut_c:
        A = A[:, xp.asarray(live_r[:, None]), xp.asarray(live_c)]
    elif cut_r or cut_c:
        A = A[:, xp.asarray(live_r)] if cut_r else A[:, :, xp.asarray(live_c)]
    u, s = _left_svd(xp, A)
    L, m = s.shape[-1], u.shape[-2]
    if L >= K:
        u, s = u[..., :K], s[..., :K]
    else:
        u = xp.concatenate([u, xp.zeros((B, m, K - L), dtype=u.dtype)], axis=-1)
        s = xp.concatenate([s, xp.zeros((B, K - L), dtype=s.dtype)], axis=-1)
    sv = xp.where(xp.asarray(_prefix(_flat_host(svcount, batch, B), K)), s, 0)
    if rtol is not None:
        # (the singular values come to the host: ranks are host data)
        host = sv if xp is np else sv.get()
        above = (host > rtol * host[..., :1]).sum(-1).reshape(batch)
        kcount = np.minimum(kcount, np.maximum(above, np.minimum(svcount, 1)))
    rm = _kernel_array(rows)
    kc = _kernel_array(_flat_host(kcount, batch, B), np.int64)
    if _use_numba(xp):
        F = np.ascontiguousarray(np.swapaxes(u, 1, 2))
        _k.orthonormal_frame_repair(F, rm, kc)
        Q = np.swapaxes(F, 1, 2)
    else:
        Q = _repair_xp(xp, u, rm, kc)
    if cut_r:
        full = xp.zeros((B, M, K), dtype=Q.dtype)
        full[:, xp.asarray(live_r)] = Q
        Q = full
    return Q.reshape(batch + (M, K)), sv.reshape(batch + (K,)), kcount


def _flat_host(a, batch, B, tail=()):
    """Host array ``a`` broadcast to ``batch + tail``, as ``(B,) + tail``
    (only a reshape where it has that shape: ``np.broadcast_to`` took ~6 us
    of a small SVD step's ~100)."""
    a = np.asarray(a)
    if a.shape != batch + tail:
        a = np.broadcast_to(a, batch + tail)
    return a.reshape((B,) + tail)


def _svd_work(M, L):
    """The work of one thin SVD of an ``M x C`` matrix, ``L = min(M, C)``, in
    the units of ``TT_CPU_SERIAL_WORK``: LAPACK's ~4 M L^2 + 8 L^3
    multiply-adds, counted twice -- at these sizes LAPACK runs them at about
    half the Numba kernels' rate (a 16 x 16 SVD 26 us on the 2-core AMD
    EPYC), and TT_CPU_SERIAL_WORK is a time (~1 ms of those kernels)."""
    return 2 * (4 * M * L * L + 8 * L ** 3)


def _left_svd(xp, A):
    """``(u, s)`` of the thin SVD of each matrix of ``A`` ``(B, M, C)``: ``u``
    ``(B, M, L)``, ``s`` ``(B, L)``, ``L = min(M, C)`` (see :func:`_finite_svd`).

    On NumPy wide matrices are first reduced to the small ``R^T`` of a QR of
    ``A^T`` (``A = R^T Q^T``: the same left frame and singular values, where
    LAPACK's SVD of the wide matrix would also build the unneeded right
    vectors) where that pays: more than twice as many columns as rows, and
    at least 256 columns in the batch (the QR's own ~12-20 us per call on
    the 2-core AMD EPYC: one 8 x 64 matrix 33 us directly, 44 us so; 8 of
    them 153 vs 114 us; 64 of 8 x 24 820 vs 700 us).  Zero rows of ``A``
    stay zero rows of ``R^T``.  A non-finite R of the finite A (a library
    fault, see :func:`_matmul`) is dropped: the QR only saves time, and
    LAPACK's SVD would never return on it.

    A large batch is split over the threads as the Numba kernels' stacks
    are (:func:`_run_stack`; LAPACK runs without the GIL): each matrix is
    computed alone either way, so the split changes no bit.
    """
    B, M, C = A.shape
    wide = xp is np and C > 2 * M and B * C >= 256

    def one_range(lo, hi):
        a = A[lo:hi]
        if wide:
            R = np.swapaxes(np.linalg.qr(np.swapaxes(a, -1, -2), mode="r"), -1, -2)
            a = R if np.isfinite(R).all() else a
        return _finite_svd(xp, a)[:2]

    L = min(M, C)
    work = B * (_svd_work(M, L) + (4 * C * M * M if wide else 0))  # (the QR: ~2 C M^2, twice)
    if xp is not np or _stack_threads(B, work) <= 1:
        return one_range(0, B)
    u, s = np.empty((B, M, L), dtype=A.dtype), np.empty((B, L), dtype=A.dtype)

    def into(lo, hi):
        u[lo:hi], s[lo:hi] = one_range(lo, hi)

    _run_stack(into, B, work, (), tuple)
    return u, s


def _matmul(xp, a, b):
    """``xp.matmul(a, b)``, computed again without BLAS where NumPy's BLAS
    returned inf or NaN for finite factors.

    OpenBLAS has been seen to return NaN from a product of finite matrices on
    one call in many (numpy issue 24067).  A float32 CI run here once met a
    non-finite unfolding in :func:`_frame` inside ``norm("orthogonal")``,
    whose cores are power-of-two scaled near 1 and cannot overflow, and
    :func:`_frame` would blame the train ("overflowed, rescale").  So the
    product is checked and, where its factors are finite, recomputed by
    ``einsum``'s own loops, which give IEEE's answer: a true overflow stays
    inf and is reported as one.  NumPy only: on CuPy each check would be a
    synchronization, and cuBLAS has shown no such fault.
    """
    c = xp.matmul(a, b)
    if (xp is np and not np.isfinite(c).all() and np.isfinite(a).all()
            and np.isfinite(b).all()):
        c = np.einsum("...ij,...jk->...ik", a, b)
    return c


def _finite_svd(xp, A):
    """``xp.linalg.svd(A, full_matrices=False)`` of a finite ``A``, checked finite.

    LAPACK promises finite factors of a finite matrix, yet OpenBLAS builds
    have been seen to return a NaN column for a well-conditioned matrix on one
    call and the right factors on the next (scipy issue 5586; a float32 CI run
    here once met a NaN in a small train that twenty reruns never showed
    again).  So a non-finite result is computed again, then once more in
    float64 (cast back, which costs only the float32 rounding the caller asked
    for); a failure of all of them is reported as LAPACK's, not blamed on the
    train.  One bool read back per try on CuPy.
    """
    # the retries' inputs are made only when needed: the usual call copies nothing
    tries = [lambda: A, A.copy] + ([] if A.dtype == np.float64 else [
        lambda: A.astype(np.float64)])
    for attempt in tries:
        u, s, vh = xp.linalg.svd(attempt(), full_matrices=False)
        if _finite(xp, u, s, vh):
            return tuple(f.astype(A.dtype, copy=False) for f in (u, s, vh))
    if not _finite(xp, A):  # an overflowed unfolding (t3_from_dense's later ones)
        _overflowed(A.dtype)
    # Finite entries whose singular values pass the dtype's range (three of
    # 1.2e308) give inf on every try: the same matrix scaled by a power of two
    # (exact) has finite factors, so the overflow is the train's, not LAPACK's.
    peak = float(xp.abs(A).max()) if A.size else 0.0
    if peak > 1:
        scaled = xp.ldexp(A, -int(np.frexp(peak)[1])).astype(A.dtype, copy=False)
        if _finite(xp, *xp.linalg.svd(scaled, full_matrices=False)):
            _overflowed(A.dtype)
    raise ValueError(
        f"the linear-algebra library's SVD ({xp.__name__}.linalg.svd) returned inf or NaN "
        f"for finite {A.dtype} matrices of shape {tuple(A.shape)}, {len(tries)} times; "
        f"this is a LAPACK/BLAS fault, not the train's (try OPENBLAS_NUM_THREADS=1 or "
        f"another BLAS build)")


class TrainOverflowError(ValueError):
    """inf or NaN met in a computation on a train's finite entries: the SVD,
    the orthogonalizations and ``norm("orthogonal")`` (float32 trains are
    retried in float64 first, see :func:`_float64_retry`).  A ``ValueError``,
    so that ``except ValueError`` still catches it; rescale the train."""


def _overflowed(dtype):
    raise TrainOverflowError(
        f"the train's live entries are finite, but a product of them overflowed {dtype} "
        f"to inf or NaN during its SVD / orthogonalization; rescale the train (e.g. "
        f"`x * 2.0**-k`, exact in binary floating point) and scale the result back")


def _finite(xp, *arrays):
    """Whether every entry of every array is finite (one bool read back on CuPy)."""
    ok = xp.isfinite(arrays[0]).all()
    for a in arrays[1:]:
        ok = ok & xp.isfinite(a).all()
    return bool(ok)


def _check_finite_result(xp, U, G):
    """After the last SVD: the remainder pushed into the cores may overflow."""
    if not _finite(xp, U, G):
        _overflowed(G.dtype)


def _check_finite_input(xp, U, G, what):
    """Refuse a train (masked ``U``, ``G``) with inf or NaN in a live entry.

    On entry of the SVD and the orthogonalizations, so that :func:`_frame`
    can tell a non-finite intermediate (overflow of finite entries) from a
    non-finite input.  On CuPy one synchronization (one bool read back).
    """
    if not _finite(xp, U, G):
        raise ValueError(f"the train holds inf or NaN in a live entry (padding is ignored); "
                         f"its {what} is undefined")


def _tucker_down(xp, U, G, shape, mk):
    """Tucker cores orthonormal (rows), remainders pushed into the TT cores."""
    d, S, n, N = U.shape
    phys = np.broadcast_to(_physical_mask(shape, N)[:, None, :], (d, S, N))
    kcount = np.minimum(mk.sum(-1), np.asarray(shape)[:, None])
    P, _, _ = _frame(xp.swapaxes(U, -1, -2), phys, mk, kcount, kcount, n)
    L = _matmul(xp, U, P)
    G = xp.swapaxes(_matmul(xp, xp.swapaxes(G, -1, -2), L[:, :, None]), -1, -2)
    return xp.ascontiguousarray(xp.swapaxes(P, -1, -2)), G, _prefix(kcount, n)


def _tt_up(xp, U, G, mk, mt):
    """TT cores orthonormal over the mode axis, remainders pushed into the Tucker cores."""
    d, S, r, n, _ = G.shape
    A = G.transpose(0, 1, 2, 4, 3).reshape(d, S, r * r, n)
    rows = _pair_mask(mt[:-1], mt[1:])
    kcount = np.minimum(rows.sum(-1), mk.sum(-1))
    Q, _, _ = _frame(A, rows, mk, kcount, kcount, n)
    R = _matmul(xp, xp.swapaxes(Q, -1, -2), A)
    G = Q.reshape(d, S, r, r, n).transpose(0, 1, 2, 4, 3)
    return _matmul(xp, R, U), xp.ascontiguousarray(G), _prefix(kcount, n)


def _left_step(xp, G, mk, mt, i, max_rank=None, rtol=None):
    """Left-orthonormalize TT core ``i`` (SVD of its left unfolding), pushing the
    remainder into core ``i + 1``; optionally truncate bond ``i + 1`` (to
    ``max_rank``, and past the singular values at most ``rtol`` times the
    largest).  Returns the bond's singular values ``(S, r)``.  Updates ``G``
    and ``mt`` in place."""
    _, S, r, n, _ = G.shape
    A = G[i].reshape(S, r * n, r)
    rows = _pair_mask(mt[i], mk[i])
    svcount = np.minimum(rows.sum(-1), mt[i + 1].sum(-1))
    kcount = svcount if max_rank is None else np.minimum(svcount, max_rank)
    Q, sv, kcount = _frame(A, rows, mt[i + 1], kcount, svcount, r, rtol)
    R = _matmul(xp, xp.swapaxes(Q, -1, -2), A)
    G[i] = Q.reshape(S, r, n, r)
    G[i + 1] = _matmul(xp, R, G[i + 1].reshape(S, r, n * r)).reshape(S, r, n, r)
    mt[i + 1] = _prefix(kcount, r)
    return sv


def _sweep_left(xp, U, G, shape, mk, mt):
    """``"tucker_down"``, then cores ``0..d-2`` left-orthonormal (the last
    carries the weight); returns ``(U, G, mk)``, updates ``mt`` in place."""
    U, G, mk = _tucker_down(xp, U, G, shape, mk)
    for i in range(U.shape[0] - 1):
        _left_step(xp, G, mk, mt, i)
    return U, G, mk


def _right_step(xp, G, mk, mt, i):
    """Right-orthonormalize TT core ``i``, pushing the remainder into core ``i - 1``."""
    _, S, r, n, _ = G.shape
    A = G[i].reshape(S, r, n * r)
    cols = _pair_mask(mk[i], mt[i + 1])
    kcount = np.minimum(mt[i].sum(-1), cols.sum(-1))
    P, _, _ = _frame(xp.swapaxes(A, -1, -2), cols, mt[i], kcount, kcount, r)
    L = _matmul(xp, A, P)
    G[i] = xp.swapaxes(P, -1, -2).reshape(S, r, n, r)
    G[i - 1] = _matmul(xp, G[i - 1].reshape(S, r * n, r), L).reshape(S, r, n, r)
    mt[i] = _prefix(kcount, r)


@_float64_retry(check_result=True)
def ut3_orthogonalize(data, kind="left"):
    """Orthogonalize a train with pad-safe SVDs (no truncation).

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    kind : {"tucker_down", "tt_up", "left", "right"}
        * ``"tucker_down"`` -- every Tucker core gets orthonormal rows
          (``U U^T = I`` on the real slots); the remainders go up into the TT
          cores.  Tucker ranks become ``min(n_i, N_i)``.
        * ``"tt_up"`` -- every TT core becomes orthonormal over its mode axis
          (``sum_{a,b} G[a,j,b] G[a,k,b] = delta_jk``); the remainders go down
          into the Tucker cores.  Tucker ranks become ``min(r_i r_{i+1}, n_i)``.
        * ``"left"`` -- ``"tucker_down"``, then a left-to-right sweep: cores
          ``0..d-2`` left-orthonormal, the last core carries the weight.
        * ``"right"`` -- ``"tucker_down"``, then a right-to-left sweep: cores
          ``1..d-1`` right-orthonormal, the first core carries the weight.

        The weight is the train's norm only where both boundary ranks are 1:
        a train with ``r_0`` or ``r_d`` above 1 (a sum's, a Hadamard
        product's) sums its boundary slots against ones, which the sweep
        leaves as they are.  :meth:`squash_tails` (``ut3_squash_tails``)
        first, where the carrying core's norm is wanted.

    Returns
    -------
    tuple
        ``.data`` of the orthogonalized train (same padded sizes); the masks
        of every rank changed by an SVD are prefixes.  Frames are exactly
        zero on padding and orthonormal on the real slots even where the
        train is rank deficient.

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    ValueError
        ``kind`` is not one of :data:`ORTHOGONALIZE_KINDS`, or a live entry is
        inf or NaN.
    TrainOverflowError
        Finite entries overflow the dtype during the computation, also after
        the float64 retry of a float32 train: a tensor past the dtype's range
        (a :class:`ValueError`; rescale the train).

    Notes
    -----
    The cores are balanced first, by powers of two: every Tucker row and
    every TT core's slice along its right bond gets its largest entry in
    ``[0.5, 1)``, the scales moved on along the chain.  So neither cores far
    from 1 nor a power-of-two gauge of the input (a Tucker row times
    ``2**k``, its TT core slice times ``2**-k``) change the result, which
    the frames' SVDs would otherwise compute relative to the largest entry
    only.  The train's own scale goes back on the cores that carry the
    weight (spread over the TT cores for ``"tucker_down"``, over the Tucker
    cores for ``"tt_up"``), so an overflow means that the carrying core
    cannot hold it.  A float32 train whose computation meets inf or NaN is
    computed again in float64 and refused only if the result does not fit
    float32.

    On CuPy this synchronizes with the device: on entry, once per SVD step
    and at the end it reads back one bool, whether the matrix is finite.  The check
    cannot be queued: LAPACK's SVD never returns on inf, NaN makes it fail or
    return garbage, and "tt_up" would pass a NaN of a live Tucker entry on.

    As in :func:`ut3_svd`, a train's frames can differ with the stack it is
    computed in, by rounding and in the vectors spanning zero singular
    values (the SVDs leave out what is padding in every stack element of
    the chunk; on NumPy, BLAS runs on one thread meanwhile: see
    :func:`ut3_svd`).
    """
    if kind not in ORTHOGONALIZE_KINDS:
        raise ValueError(f"Argument `kind` must be one of {ORTHOGONALIZE_KINDS}, not {kind!r}.")
    p = _parts(data)
    U, G, mk, mt = _by_chunks(p, lambda q: _orthogonalize_parts(q, kind))
    return _pack(p.xp, U, G, p.shape, mk, mt, p.stack)


def _orthogonalize_parts(p, kind):
    """:func:`ut3_orthogonalize` of the flat stack of ``p``: ``(U, G, mk, mt)``."""
    xp = p.xp
    U, G = _masked(p)
    # Checked here for every kind: "tt_up" takes SVDs of the TT cores only,
    # and a NaN in a live Tucker entry would pass through to the result.
    _check_finite_input(xp, U, G, "orthogonalization")
    U, G, e = _balanced(xp, U, G)  # (always: see its docstring)
    mk, mt = p.mk.copy(), p.mt.copy()
    if kind == "tt_up":
        U, G, mk = _tt_up(xp, U, G, mk, mt)
    else:
        if kind == "left":
            U, G, mk = _sweep_left(xp, U, G, p.shape, mk, mt)
        else:
            U, G, mk = _tucker_down(xp, U, G, p.shape, mk)
            if kind == "right":
                for i in range(p.d - 1, 0, -1):
                    _right_step(xp, G, mk, mt, i)
    # the train's scale, back on the cores that carry the weight
    if kind == "tt_up":
        _spread(xp, U, e)
    elif kind == "tucker_down":
        _spread(xp, G, e)
    else:
        k = -1 if kind == "left" else 0
        G[k] = _times_power(xp, G[k], e)
    _check_finite_result(xp, U, G)
    return U, G, mk, mt


def _max_ranks(value, count, name):
    if value is None:
        return [None] * count
    given = value  # as passed, for the messages
    what = (f"a positive int or a sequence of {count} positive "
            f"int{'s' if count != 1 else ''}")
    if isinstance(value, np.ndarray) and value.ndim == 0:  # a NumPy scalar in array form
        value = value[()]
    if is_int(value):
        value = [value] * count
    if not isinstance(value, (tuple, list, np.ndarray)) or getattr(value, "ndim", 1) != 1:
        raise TypeError(f"Argument `{name}` must be {what}, not {given!r}.")
    value = list(value)
    if len(value) != count or any(not is_int(v) or v < 1 for v in value):
        raise ValueError(f"Argument `{name}` must be {what}, not {given!r}.")
    # A limit past int64 limits nothing (ranks are array sizes), and NumPy
    # would raise OverflowError when comparing it with the rank counts.
    return [min(int(v), np.iinfo(np.int64).max) for v in value]


def _tucker_step(xp, U, G, mk, mt, i, max_rank=None, rtol=None):
    """Truncate the Tucker rank of core ``i`` (SVD of its mode unfolding) to at
    most ``r_i r_{i+1}`` and ``max_rank`` (and past the singular values at most
    ``rtol`` times the largest); the Tucker core takes the frame, the TT core
    the rest.  Returns the singular values ``(S, n)``.  Updates ``U``, ``G``
    and ``mk`` in place."""
    _, S, r, n, _ = G.shape
    A = G[i].transpose(0, 1, 3, 2).reshape(S, r * r, n)
    rows = _pair_mask(mt[i], mt[i + 1])
    svcount = np.minimum(rows.sum(-1), mk[i].sum(-1))
    kcount = svcount if max_rank is None else np.minimum(svcount, max_rank)
    P, sv, kcount = _frame(xp.swapaxes(A, -1, -2), mk[i], rows, kcount, svcount, n, rtol)
    G[i] = _matmul(xp, A, P).reshape(S, r, r, n).transpose(0, 1, 3, 2)
    U[i] = _matmul(xp, xp.swapaxes(P, -1, -2), U[i])
    mk[i] = _prefix(kcount, n)
    return sv


def _tucker_bound(xp, U, G, mk, mt, i):
    """Lossless: cut the Tucker rank of core ``i`` to ``r_i r_{i+1}`` where it
    is larger (the mode unfolding has ``r_i r_{i+1}`` rows, so no higher
    rank), on those stack elements only -- the others keep their cores bit for
    bit.  The new frame spans the unfolding's row space, so the Tucker core
    keeps orthonormal rows and a left-orthonormal TT core stays one."""
    bind = mk[i].sum(-1) > mt[i].sum(-1) * mt[i + 1].sum(-1)
    if not bind.any():
        return
    old_u, old_g, old_k = U[i].copy(), G[i].copy(), mk[i].copy()
    _tucker_step(xp, U, G, mk, mt, i)
    sel = xp.asarray(bind)
    U[i] = xp.where(sel[:, None, None], U[i], old_u)
    G[i] = xp.where(sel[:, None, None, None], G[i], old_g)
    mk[i] = np.where(bind[:, None], mk[i], old_k)


def _bond_bound(xp, G, mk, mt, i):
    """Lossless: cut bond ``i`` (``1 <= i <= d - 1``) to ``n_i r_{i+1}`` slots
    where it is larger (core ``i``'s right unfolding has no higher rank), on
    those stack elements only.  A right step frames that unfolding's row
    space (exact), a left step without truncation makes core ``i - 1`` a left
    frame again, so left-orthonormal cores stay so (two thin SVDs, not one of
    the two-core product).  Returns whether any element changed."""
    bind = mt[i].sum(-1) > mk[i].sum(-1) * mt[i + 1].sum(-1)
    if not bind.any():
        return False
    old_a, old_b, old_t = G[i - 1].copy(), G[i].copy(), mt[i].copy()
    _right_step(xp, G, mk, mt, i)
    _left_step(xp, G, mk, mt, i - 1)
    sel = xp.asarray(bind)[:, None, None, None]
    G[i - 1] = xp.where(sel, G[i - 1], old_a)
    G[i] = xp.where(sel, G[i], old_b)
    mt[i] = np.where(bind[:, None], mt[i], old_t)
    return True


@_float64_retry(check_result=True)
def ut3_svd(data, max_tucker_ranks=None, max_tt_ranks=None, rtol=None):
    """Max-rank (and optionally relative-tolerance) truncating T3-SVD.

    Squash the tails, make the Tucker cores orthonormal, right-orthogonalize,
    then sweep left to right: at core ``i`` truncate the Tucker rank (SVD of
    the core's mode unfolding) and then bond ``i + 1`` (SVD of its left
    unfolding).  Without truncation the singular values are those of the
    dense tensor's unfoldings.

    A truncated bond can leave ranks that the cores cannot fill (core ``i``'s
    Tucker rank was cut before bond ``i + 1``; a bond before the ranks to its
    right): lossless steps then cut every Tucker rank to at most
    ``r_i r_{i+1}`` (right after bond ``i + 1``) and, in a right-to-left
    pass, every bond to at most ``n_i r_{i+1}``.  So the result needs no
    lossless compression: a second ``svd()`` keeps its ranks.

    Parameters
    ----------
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.
    max_tucker_ranks : int or sequence of ``d`` ints, optional
    max_tt_ranks : int or sequence of ``d - 1`` ints (interior bonds), optional
    rtol : float in ``[0, 1)``, optional
        Also discard, at each truncating step and per stack element, the
        singular values at most ``rtol`` times that step's largest (one is
        always kept where there is one).  Without it nothing is cut below
        the max ranks, numerically zero directions included: ``(x +
        x).svd()`` keeps the sum's doubled ranks, ``(x + x).svd(rtol=1e-12)``
        has ``x.svd()``'s (``x``'s own where they are its minimal ranks;
        :meth:`from_dense` cuts at NumPy's ``matrix_rank`` tolerance by
        default).  On CuPy each step's singular values are
        then read back to the host (ranks are host data).

    Returns
    -------
    data : tuple
        ``.data`` of the truncated train: same padded sizes (in a loop,
        :func:`ut3_compact` cuts them to the new ranks, or the padding
        grows with every sum), prefix masks, ``r_0 = r_d = 1``, Tucker
        cores orthonormal, TT cores ``0..d-2`` left-orthonormal.
    singular_values : tuple
        ``(tucker_svs, tt_svs)`` of shapes ``(d,) + stack + (n,)`` and
        ``(d - 1,) + stack + (r,)``: all singular values met at each
        truncating step (kept and discarded), descending, zero-padded.  The
        error is exact: ``||x - result||^2`` is the sum of the squares of
        ``tucker_svs[i, ..., max_tucker_ranks[i]:]`` and
        ``tt_svs[b, ..., max_tt_ranks[b]:]`` (the lossless steps discard
        nothing; they may leave ranks below these limits); with ``rtol``, of
        the values each step discarded (those past its limit or at most
        ``rtol`` times its first).

        A train whose masks hold no slot of some core or bond (rank 0: the
        zero tensor) keeps that rank 0, which ``to_t3`` refuses (ragged
        cores have ranks >= 1); the rank-1 zero train is
        ``from_t3(t3_from_dense(zeros))``.

    Raises
    ------
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    TypeError
        ``max_tucker_ranks`` or ``max_tt_ranks`` is neither an int nor a 1-d
        sequence.
    ValueError
        A max rank below 1, a sequence of the wrong length or with a non-int entry,
        ``rtol`` not a number in ``[0, 1)``, or a live entry that is inf or NaN.
    TrainOverflowError
        Finite entries overflow the dtype during the computation, also after
        the float64 retry of a float32 train (a :class:`ValueError`; rescale).

    Notes
    -----
    The cores are balanced by powers of two first (see
    :func:`ut3_orthogonalize`: cores far from 1 and a power-of-two gauge of
    the input do not change the result), so an overflow means that the last
    core or a singular value cannot hold the scale.  A float32 train whose computation
    meets inf or NaN is computed again in float64 and refused only if the
    result does not fit float32.

    On CuPy this synchronizes with the device on entry, once per SVD step
    and at the end: each reads back one bool, whether the train / the step's
    matrix / the result is finite (see :func:`ut3_orthogonalize`).

    On NumPy a stack whose core slabs pass
    ``launch_config.TT_CPU_CHUNK_BYTES`` (1 MiB: one TT core of every stack
    element) is computed in chunks of stack elements within it, split over
    the threads (64 trains padded to n = 16, r = 32: 661-785 -> 361-387 ms
    on 2 cores), and BLAS and LAPACK run on one thread meanwhile (through
    threadpoolctl: their many small calls ran 2x slower on OpenBLAS's
    threads; the process's setting comes back when the call returns).  A
    stack within one chunk is computed as its two halves where its SVD work
    reaches ``launch_config.TT_CPU_SPLIT_WORK`` (8 trains of that kind:
    50.6-51.9 -> 33.4-33.8 ms).

    Each step's SVDs leave out the rows and columns that are padding in
    every stack element of the chunk (zero), so a train's result can
    differ with the stack it is computed in: by rounding, and where a step
    has zero singular values, in the frame vectors that span them (any
    orthonormal completion is exact; the tensor and the singular values are
    the same).  The threads never change a bit.
    """
    p = _parts(data)
    xp = p.xp
    max_tk = _max_ranks(max_tucker_ranks, p.d, "max_tucker_ranks")
    max_tt = _max_ranks(max_tt_ranks, p.d - 1, "max_tt_ranks")
    _check_rtol(rtol)
    U, G, mk, mt, tucker_svs, tt_svs = _by_chunks(
        p, lambda q: _svd_parts(q, max_tk, max_tt, rtol))
    tucker_svs = tucker_svs.reshape((p.d,) + p.stack + (p.n,))
    tt_svs = tt_svs.reshape((p.d - 1,) + p.stack + (p.r,))
    return _pack(xp, U, G, p.shape, mk, mt, p.stack), (tucker_svs, tt_svs)


def _svd_parts(p, max_tk, max_tt, rtol):
    """:func:`ut3_svd` of the flat stack of ``p``: ``(U, G, mk, mt,
    tucker_svs (d, S, n), tt_svs (d - 1, S, r))``."""
    xp = p.xp
    U, G = _masked(p)
    _check_finite_input(xp, U, G, "SVD")
    U, G, e = _balanced(xp, U, G)  # (always: see its docstring)
    mk, mt = p.mk.copy(), p.mt.copy()
    _squash(G, mt)
    U, G, mk = _tucker_down(xp, U, G, p.shape, mk)
    for i in range(p.d - 1, 0, -1):
        _right_step(xp, G, mk, mt, i)
    tucker_svs, tt_svs = [], []
    for i in range(p.d):
        tucker_svs.append(_tucker_step(xp, U, G, mk, mt, i, max_tk[i], rtol))
        if i < p.d - 1:
            tt_svs.append(_left_step(xp, G, mk, mt, i, max_tt[i], rtol))
            _tucker_bound(xp, U, G, mk, mt, i)  # bond i + 1 may have shrunk
    # Ranks are host data (counts and limits, never singular values), so this
    # pass costs SVDs only where a bound binds.  Cutting bond i can leave core
    # i - 1 with too high a Tucker rank, and then bond i - 1 too wide.
    for i in range(p.d - 1, 0, -1):
        if _bond_bound(xp, G, mk, mt, i):
            _tucker_bound(xp, U, G, mk, mt, i - 1)
    # the train's scale, back on the last core (the others are frames) and the values
    G[-1] = _times_power(xp, G[-1], e)
    tucker_svs = [_times_power(xp, sv, e) for sv in tucker_svs]
    tt_svs = [_times_power(xp, sv, e) for sv in tt_svs]
    _check_finite_result(xp, U, G)
    tucker_svs = xp.stack(tucker_svs)
    tt_svs = xp.stack(tt_svs) if tt_svs else xp.zeros((0, p.S, p.r), dtype=G.dtype)
    return U, G, mk, mt, tucker_svs, tt_svs


# ---------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------

def ut3_save(path, data):
    """Save to a ``.npz`` file (supercores copied to the host; no pickle).

    ``path`` is a file name or an open binary file, as for ``np.savez``: a
    name without the ``.npz`` suffix gets it appended; :func:`ut3_load` takes
    the same name back.

    Parameters
    ----------
    path : str, os.PathLike or binary file object
    data : tuple
        ``.data`` of a uniform train, ``(tucker_supercore, tt_supercore, shape, masks)``.

    Raises
    ------
    TypeError
        ``path`` is neither a file name nor a binary file object (a text-mode
        file included).
    TypeError, ValueError
        ``data`` is not a valid train tuple (see :func:`ut3_check`).
    OSError
        The file cannot be written (``FileNotFoundError`` for a missing folder).
    """
    _check_path(path, "write")
    U, G, shape, masks = ut3_check(data)
    host = (lambda a: a) if isinstance(U, np.ndarray) else (lambda a: a.get())
    np.savez(
        path, format_version=np.int64(_FORMAT_VERSION), tucker_supercore=host(U), tt_supercore=host(G),
        shape=np.asarray(shape, dtype=np.int64), tucker_edge_mask=masks[0], tt_edge_mask=masks[1],
    )


def _check_path(path, method):
    """Refuse a ``path`` that is neither a file name nor a binary file object
    with ``method`` (NumPy's errors named no argument: "expected str, bytes
    or os.PathLike object", or "write() argument must be str, not bytes" for
    a text-mode file)."""
    if isinstance(path, (str, bytes, os.PathLike)):
        return
    if isinstance(path, io.TextIOBase):
        raise TypeError(f"Argument `path` must be a file name or a file opened in binary "
                        f"mode, not the text-mode file {getattr(path, 'name', path)!r}.")
    if not callable(getattr(path, method, None)):
        raise TypeError(f"Argument `path` must be a file name (str or os.PathLike) or a "
                        f"binary file object, not {type(path).__name__}.")


def _npy_size_mismatch(z, key):
    """What is wrong with entry ``key`` of the ``.npz`` ``z`` if its ``.npy``
    header claims more (or fewer) data bytes than the entry holds, else None.

    NumPy allocates the array its header describes before reading the data,
    so a corrupted shape in a small file raised MemoryError (or allocated
    terabytes of address space).  A zip entry's size is itself a claim, hence
    MemoryError is caught too; this check names the entry when the two
    disagree, as they always do for a corrupted shape.
    """
    info = z.zip.getinfo(key + ".npy")
    with z.zip.open(info) as f:
        major, _ = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if major == 1
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(f)
        if dtype.hasobject:  # (np.load refuses it, with its own message)
            return None
        claimed = math.prod(shape) * dtype.itemsize  # Python ints: no wrap-around
        if f.tell() + claimed != info.file_size:
            return (f"entry `{key}` claims {claimed} bytes of {dtype} data of shape "
                    f"{shape}, but holds {info.file_size - f.tell()}")
    return None


_UT3_KEYS = ("format_version", "tucker_supercore", "tt_supercore", "shape",
             "tucker_edge_mask", "tt_edge_mask")


def _read_ut3_arrays(source, name, bad):
    """The entries of a UT3 ``.npz`` (an open binary file), checked as archive
    members; ``bad(what)`` makes the error (``name``: the file's, or None)."""
    try:  # (a .npy file is read whole: MemoryError for a crafted shape, as below)
        z = np.load(source, allow_pickle=False)
    except OSError:  # missing file, a directory, no permission: the OS says it best
        raise
    except ValueError:
        # NumPy takes a file that is neither .npy nor .npz for pickled data and
        # says so ("allow_pickle=False"): misleading for a text file.  (NumPy
        # < 1.25 says the same of an empty file, later ones raise EOFError.)
        if isinstance(name, str) and os.path.isfile(name) and os.path.getsize(name) == 0:
            raise bad("an empty, truncated or corrupted .npz archive (empty file)") from None
        raise bad("neither a .npz archive nor a .npy file") from None
    except (EOFError, zipfile.BadZipFile, MemoryError, RuntimeError,
            NotImplementedError) as exc:  # (zipfile's, as below)
        raise bad(f"an empty, truncated or corrupted .npz archive ({exc})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise bad(f"a single .npy array of shape {getattr(z, 'shape', '?')}, not a .npz archive")
    with z:
        missing = [k for k in _UT3_KEYS if k not in z.files]
        if missing:
            raise bad(f"it lacks {missing}")
        try:
            wrong = next(filter(None, (_npy_size_mismatch(z, k) for k in _UT3_KEYS)), None)
            arrays = None if wrong else {k: z[k] for k in _UT3_KEYS}
        # (MemoryError: a size claim past the memory, see _npy_size_mismatch;
        # RuntimeError / NotImplementedError: zipfile's for an entry marked
        # encrypted, or with an unknown compression method or zip version)
        except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error, MemoryError,
                RuntimeError, NotImplementedError) as exc:
            raise bad(f"an entry is corrupted or holds Python objects ({exc})") from None
        if wrong:
            raise bad(wrong)
    return arrays


def ut3_load(path):
    """Load a train saved by :func:`ut3_save`; NumPy supercores, host bool masks.

    A file name given to :func:`ut3_save` without ``.npz`` names the file it
    wrote (``name.npz``), as long as no file ``name`` exists.  Supercores
    written in the other byte order are converted to the native one.

    Parameters
    ----------
    path : str, os.PathLike or binary file object

    Returns
    -------
    tuple
        The train's ``.data``, checked as :func:`ut3_check` checks it.

    Raises
    ------
    TypeError
        ``path`` is neither a file name nor a binary file object (a text-mode
        file included).
    ValueError
        If ``path`` is not a zorch_nb UT3 ``.npz`` file (another format, a
        truncated or corrupted archive, missing or malformed entries); the
        message names the file and what is wrong.
    OSError
        If the file cannot be opened (``FileNotFoundError`` and the like).
    """
    _check_path(path, "read")
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if (isinstance(name, str) and not name.endswith(".npz") and not os.path.exists(name)
            and os.path.exists(name + ".npz")):
        path = name = name + ".npz"  # what np.savez wrote for this name
    where = repr(name if name is not None else getattr(path, "name", path))

    def bad(what):
        return ValueError(f"Argument `path` ({where}) is not a zorch_nb UT3 file: {what}.")

    if name is None:  # an open file: the caller's to close
        arrays = _read_ut3_arrays(path, name, bad)
    else:  # opened here, so that a corrupted archive leaves no file open (np.load's did)
        try:
            fh = open(name, "rb")  # (OSError: a directory, no permission)
        except FileNotFoundError as exc:
            if isinstance(name, str) and not name.endswith(".npz"):
                # (ut3_save("c") wrote c.npz; a bare "No such file: 'c'" hid that both were tried)
                exc.strerror = f"No such file or directory (nor {name + '.npz'!r})"
            raise
        with fh:
            arrays = _read_ut3_arrays(fh, name, bad)
    version, shape = arrays["format_version"], arrays["shape"]
    # int() of a float or of a 1-element array would truncate or raise TypeError
    if version.shape != () or version.dtype.kind not in "iu":
        raise bad(f"`format_version` must be one integer, not {version!r}")
    if int(version) != _FORMAT_VERSION:
        raise bad(f"format version {int(version)}, this zorch_nb reads {_FORMAT_VERSION}")
    if shape.ndim != 1 or shape.dtype.kind not in "iu":
        raise bad(f"`shape` must be a 1-d integer array, not {shape!r}")
    U, G = arrays["tucker_supercore"], arrays["tt_supercore"]
    U, G = (a.astype(a.dtype.newbyteorder("="))
            if a.dtype.kind == "f" and not a.dtype.isnative else a for a in (U, G))
    try:
        return ut3_check((U, G, tuple(int(s) for s in shape),
                          (arrays["tucker_edge_mask"], arrays["tt_edge_mask"])))
    except (TypeError, ValueError) as exc:
        raise bad(f"it holds no valid train ({exc})") from None
