"""Numba-CUDA kernels of the LogUp-GKR layer transitions (``@cuda.jit``).

Same launcher contract as :mod:`.gkr_cpu` (see its docstring).  The slot
bodies are the ones of :mod:`.gkr_scalar`, compiled as device functions; the
kernels are grid-stride loops over output slots.  Arrays may be device arrays,
CuPy arrays (wrapped with ``sync=False``: no stream synchronization) or host
NumPy arrays (copied in, outputs copied back).  MLEs are passed as flat
word arrays; each kernel compiles once per mode (base/extension numerators
and denominators), never per field, length or schedule.

The jagged prefix sums are computed on the device by a one-block kernel when
the counts live there (no device->host synchronization), and on the host when
they are host arrays.  Importing this module requires numba-cuda (or
``NUMBA_ENABLE_CUDASIM=1``).
"""
import functools

import numpy as np
from numba import cuda

from .field_cuda_numba import as_device
from .gkr_scalar import make_slot_functions, mode_of
from .launch_config import GKR_NUMBA_SCAN_THREADS, THREADS_PER_BLOCK, grid_for

_dense_slot, _jagged_slot, _find_segment = make_slot_functions(cuda.jit(device=True))


@functools.lru_cache(maxsize=None)
def _kernels(mode):
    """``(dense, jagged)`` kernels of one mode, compiled on first use.

    ``mode`` is a closure constant, so each kernel holds only its own mode's
    arithmetic (and registers): four modes, four kernels per operation, never
    more (lengths, counts and fields are runtime arguments).
    """
    dw = 4 if mode & 1 else 1  # words per output denominator

    @cuda.jit
    def dense(n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for k in range(start, od0.shape[0] // dw, stride):
            _dense_slot(mode, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)

    @cuda.jit
    def jagged(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for q in range(start, od0.shape[0] // dw, stride):
            s = _find_segment(prefix, q)
            _jagged_slot(mode, q, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                         p, mu, wm, one)

    return dense, jagged


@cuda.jit
def _prefix_kernel(rc, orc, prefix):
    # One block of GKR_NUMBA_SCAN_THREADS threads.  Thread t sums a contiguous
    # run of segments; thread 0 scans the per-thread totals in shared memory;
    # each thread then writes the inclusive prefix sums of its run.
    totals = cuda.shared.array((2, GKR_NUMBA_SCAN_THREADS), dtype=np.int64)
    t = cuda.threadIdx.x
    nb = rc.shape[0]
    per = (nb + GKR_NUMBA_SCAN_THREADS - 1) // GKR_NUMBA_SCAN_THREADS
    lo = min(nb, t * per)
    hi = min(nb, lo + per)
    a = np.int64(0)
    b = np.int64(0)
    for i in range(lo, hi):
        a += np.int64(rc[i])
        b += np.int64(orc[i])
    totals[0, t] = a
    totals[1, t] = b
    cuda.syncthreads()
    if t == 0:
        run_a = np.int64(0)
        run_b = np.int64(0)
        for u in range(GKR_NUMBA_SCAN_THREADS):  # exclusive scan of the totals
            ta = totals[0, u]
            tb = totals[1, u]
            totals[0, u] = run_a
            totals[1, u] = run_b
            run_a += ta
            run_b += tb
    cuda.syncthreads()
    a = totals[0, t]
    b = totals[1, t]
    for i in range(lo, hi):
        a += np.int64(rc[i])
        b += np.int64(orc[i])
        prefix[0, i] = a
        prefix[1, i] = b


def _flat(x):
    """Extension ``(n, 4)`` -> its flat ``(4 n,)`` view (the kernels index words)."""
    return x.reshape(-1) if x.ndim == 2 else x


def _consts(f):
    return np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.w_mont), np.uint32(f.r_mod_p)


def _outputs(outs):
    """Device views of the outputs, and a function that copies host ones back."""
    dev = [as_device(_flat(o)) for o in outs]

    def copy_back():
        for o, d in zip(outs, dev):
            if isinstance(o, np.ndarray):
                d.copy_to_host(_flat(o))
    return dev, copy_back


def fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Dense transition on the GPU (see :mod:`.gkr_cpu` for the contract)."""
    p, mu, wm, _ = _consts(f)
    kernel = _kernels(mode_of(n0.ndim == 2, d0.ndim == 2))[0]
    ins = [as_device(_flat(x)) for x in (n0, n1, d0, d1)]
    outs, copy_back = _outputs((on0, on1, od0, od1))
    kernel[grid_for(on0.shape[0]), THREADS_PER_BLOCK](*ins, *outs, p, mu, wm)
    copy_back()


def jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Jagged transition on the GPU (see :mod:`.gkr_cpu` for the contract)."""
    p, mu, wm, one = _consts(f)
    kernel = _kernels(mode_of(n0.ndim == 2, d0.ndim == 2))[1]
    if isinstance(rc, np.ndarray) and isinstance(orc, np.ndarray):
        np.cumsum(rc, dtype=np.int64, out=prefix[0])
        np.cumsum(orc, dtype=np.int64, out=prefix[1])
        d_rc, d_orc, d_prefix = as_device(rc), as_device(orc), as_device(prefix)
    else:
        d_rc, d_orc, d_prefix = as_device(rc), as_device(orc), as_device(prefix)
        _prefix_kernel[1, GKR_NUMBA_SCAN_THREADS](d_rc, d_orc, d_prefix)
    ins = [as_device(_flat(x)) for x in (n0, n1, d0, d1)]
    outs, copy_back = _outputs((on0, on1, od0, od1))
    kernel[grid_for(on0.shape[0]), THREADS_PER_BLOCK](
        d_rc, d_orc, d_prefix, *ins, *outs, p, mu, wm, one)
    copy_back()
