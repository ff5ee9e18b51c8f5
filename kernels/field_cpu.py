"""Numba CPU kernels of the field ops (``@njit(parallel=True, cache=True)``).

Arrays are C-contiguous: base ``(n,)`` uint32, extension ``(n, 4)`` uint32, all
Montgomery words in ``[0, p)``.  ``out`` is written, nothing is allocated or
validated.  Field constants are runtime arguments, so each kernel compiles
once for every field and length.
"""
import numpy as np
from numba import njit, prange

from .cpu_threads import serialized
from .field_params import kernel_words
from .monty import base_map1 as _base1
from .monty import base_map2 as _base2
from .monty import ext4_map1 as _ext1
from .monty import ext4_map2 as _ext2
from .monty import base_pow as _base_pow, ext4_pow as _ext4_pow, mont_inv, mont_mul
from .monty import OP_MUL, canonical, ext4_mul
from .launch_config import BATCH_INV_CHUNK, CPU_LANE_RUN
from .vector_width import njit_lanes64

# The same source as monty.ext4_mul, compiled with LLVM's alwaysinline: left
# to itself LLVM keeps ext4_mul an out-of-line call, and a call blocks the
# vectorizer.  Inlined into a loop over flat words with uint64 indices, the
# loop vectorizes (32x32->64 products as vpmuludq; measured 5x faster).  Not
# cached on its own: it only lives inside the cached kernel.
# (getattr: under NUMBA_DISABLE_JIT=1 the functions are plain Python, with no py_func)
_ext4_mul_inline = njit(forceinline=True)(getattr(ext4_mul, "py_func", ext4_mul))
_canonical = njit(forceinline=True)(getattr(canonical, "py_func", canonical))
_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)
_U4 = np.uint64(4)


@njit(parallel=True, cache=True)
def _base_map1_kernel(op, a, out, p, mu, one):
    for i in prange(out.shape[0]):
        out[i] = _base1(op, a[i], p, mu, one)


@njit(parallel=True, cache=True)
def _base_map2_kernel(op, a, b, out, p, mu):
    for i in prange(out.shape[0]):
        out[i] = _base2(op, a[i], b[i], p, mu)


@njit(parallel=True, cache=True)
def _ext4_map1_kernel(op, a, out, p, mu, wm, one):
    for i in prange(out.shape[0]):
        c = _ext1(op, a[i, 0], a[i, 1], a[i, 2], a[i, 3], p, mu, wm, one)
        out[i, 0] = c[0]
        out[i, 1] = c[1]
        out[i, 2] = c[2]
        out[i, 3] = c[3]


@njit(parallel=True, cache=True)
def _ext4_map2_kernel(op, a, b, out, p, mu, wm):
    for i in prange(out.shape[0]):
        c = _ext2(op, a[i, 0], a[i, 1], a[i, 2], a[i, 3],
                     b[i, 0], b[i, 1], b[i, 2], b[i, 3], p, mu, wm)
        out[i, 0] = c[0]
        out[i, 1] = c[1]
        out[i, 2] = c[2]
        out[i, 3] = c[3]


@njit_lanes64
def _ext4_mul_run(lo, hi, a, b, out, p, mu, wm):
    # Elements [lo, hi) of flat (4 n,) words (element i is words 4i .. 4i + 3,
    # read mod p), on 64-bit lanes (vector_width.py): 36 -> 39 GB/s at 2**22.
    for i in range(lo, hi):
        j = np.uint64(i) * _U4
        c = _ext4_mul_inline(_canonical(a[j], p), _canonical(a[j + _U1], p),
                             _canonical(a[j + _U2], p), _canonical(a[j + _U3], p),
                             _canonical(b[j], p), _canonical(b[j + _U1], p),
                             _canonical(b[j + _U2], p), _canonical(b[j + _U3], p), p, mu, wm)
        out[j] = c[0]
        out[j + _U1] = c[1]
        out[j + _U2] = c[2]
        out[j + _U3] = c[3]


@njit(parallel=True, cache=True)
def _ext4_mul_kernel(a, b, out, p, mu, wm):
    n = out.shape[0] // 4
    run = CPU_LANE_RUN
    for c in prange((n + run - 1) // run):
        _ext4_mul_run(c * run, min(n, c * run + run), a, b, out, p, mu, wm)


@njit(parallel=True, cache=True)
def _base_pow_kernel(a, e_hi, e_lo, nbits, out, p, mu, one):
    for i in prange(out.shape[0]):
        out[i] = _base_pow(a[i], e_hi, e_lo, nbits, p, mu, one)


@njit(parallel=True, cache=True)
def _ext4_pow_kernel(a, e_hi, e_lo, nbits, out, p, mu, wm, one):
    for i in prange(out.shape[0]):
        c = _ext4_pow(a[i, 0], a[i, 1], a[i, 2], a[i, 3], e_hi, e_lo, nbits, p, mu, wm, one)
        out[i, 0] = c[0]
        out[i, 1] = c[1]
        out[i, 2] = c[2]
        out[i, 3] = c[3]


@njit(parallel=True, cache=True)
def _base_batch_inv_kernel(a, out, chunk, p, mu, one):
    # Montgomery's trick inside each chunk: prefix products, one Fermat
    # inversion, then a backward sweep: 3 multiplications per element.
    n = a.shape[0]
    nchunks = (n + chunk - 1) // chunk
    for c in prange(nchunks):
        lo = c * chunk
        hi = min(n, lo + chunk)
        acc = np.uint32(one)
        for i in range(lo, hi):
            out[i] = acc  # product of a[lo:i]
            acc = mont_mul(acc, canonical(a[i], p), p, mu)
        inv = mont_inv(acc, p, mu, one)
        for i in range(hi - 1, lo - 1, -1):
            t = mont_mul(inv, out[i], p, mu)
            inv = mont_mul(inv, canonical(a[i], p), p, mu)
            out[i] = t


@serialized
def base_map1(op, a, out, f):
    p, mu, _, one = kernel_words(f)
    _base_map1_kernel(op, a, out, p, mu, one)


@serialized
def base_map2(op, a, b, out, f):
    p, mu, _, _ = kernel_words(f)
    _base_map2_kernel(op, a, b, out, p, mu)


@serialized
def ext4_map1(op, a, out, f):
    p, mu, wm, one = kernel_words(f)
    _ext4_map1_kernel(op, a, out, p, mu, wm, one)


@serialized
def ext4_map2(op, a, b, out, f):
    p, mu, wm, _ = kernel_words(f)
    if op == OP_MUL:
        _ext4_mul_kernel(a.reshape(-1), b.reshape(-1), out.reshape(-1), p, mu, wm)
    else:
        _ext4_map2_kernel(op, a, b, out, p, mu, wm)


@serialized
def base_pow(a, e_hi, e_lo, nbits, out, f):
    p, mu, _, one = kernel_words(f)
    _base_pow_kernel(a, e_hi, e_lo, nbits, out, p, mu, one)


@serialized
def ext4_pow(a, e_hi, e_lo, nbits, out, f):
    p, mu, wm, one = kernel_words(f)
    _ext4_pow_kernel(a, e_hi, e_lo, nbits, out, p, mu, wm, one)


@serialized
def base_batch_inv(a, out, f):
    p, mu, _, one = kernel_words(f)
    _base_batch_inv_kernel(a, out, BATCH_INV_CHUNK, p, mu, one)
