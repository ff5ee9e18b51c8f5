"""Numba CPU kernels of the LogUp-GKR layer transitions (``@njit(parallel=True)``).

Launcher contract (shared by :mod:`.gkr_cuda_numba` and :mod:`.gkr_cupy`):

``fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f)``
    Dense transition.  Inputs have length ``L`` (even), outputs ``L / 2``;
    ``on*``/``od*`` are written for every ``k in [0, L/2)``:
    ``on0[k], od0[k]`` = fraction sum of node ``2k``'s children,
    ``on1[k], od1[k]`` = the same for node ``2k + 1``.
``jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f)``
    Jagged transition (DESIGN.md section 2) for every output slot ``q`` of
    the outputs' length.  ``rc``/``orc`` are int32 row counts of the input and
    output layers (length ``nb``), ``prefix`` an int64 ``(2, nb)`` scratch the
    launcher overwrites with the inclusive prefix sums of ``rc`` and ``orc``.

Arrays are C-contiguous uint32 Montgomery words in ``[0, p)``: base MLEs
``(n,)``, extension MLEs ``(n, 4)``.  The numerator pair and the denominator
pair may each be base or extension; outputs must be extension exactly where
the mode requires (numerators if any input is, denominators if the
denominators are).  Nothing is validated or allocated here (besides the tiny
prefix sums, computed into ``prefix``).

Every MLE reaches the kernels as a flat uint32 view (an extension MLE
``(n, 4)`` as ``(4 n,)``; the mode says which arrays are extension), so each
kernel compiles once for every mode, field and length (field constants and
the mode are runtime arguments).

Why the dense loop is fast: each mode has its own ``prange`` loop with the
mode a constant inside, and the slot index is a uint64, so after inlining
the base/base body is branch-free straight-line code over unit-stride and
stride-2 accesses that LLVM vectorizes (32x32->64 products as ``vpmuludq``,
the conditional subtraction as an unsigned min).  The parfor body receives
its arrays as ``noalias`` arguments, so no runtime alias checks are needed.
With a signed index Numba adds negative-index wrap-around selects and LLVM
falls back to gathers/scatters (measured 3x slower).
"""
import numpy as np
from numba import njit, prange

from .gkr_scalar import MODE_BB, MODE_BE, MODE_EB, MODE_EE, make_slot_functions, mode_of
from .launch_config import GKR_CPU_JAGGED_CHUNK

_dense_slot, _jagged_slot, _find_segment = make_slot_functions(njit)


@njit(parallel=True, cache=True)
def _fold_dense_kernel(mode, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
    # One prange loop per mode with the mode as a literal: after inlining,
    # LLVM drops the other modes' branches from each loop body.
    half = od0.shape[0] // (4 if mode & 1 else 1)
    if mode == MODE_BB:
        for k in prange(half):
            _dense_slot(MODE_BB, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    elif mode == MODE_BE:
        for k in prange(half):
            _dense_slot(MODE_BE, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    elif mode == MODE_EB:
        for k in prange(half):
            _dense_slot(MODE_EB, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)
    else:
        for k in prange(half):
            _dense_slot(MODE_EE, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)


@njit(cache=True)
def _jagged_chunk(mode, lo, hi, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                  p, mu, wm, one):
    # One binary search per chunk, then walk the segments forward.
    nb = rc.shape[0]
    s = _find_segment(prefix, lo)
    for q in range(lo, hi):
        while s < nb - 1 and prefix[1, s] <= q:
            s += 1
        _jagged_slot(mode, q, s, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                     p, mu, wm, one)


@njit(parallel=True, cache=True)
def _jagged_kernel(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                   p, mu, wm, one, chunk):
    acc_in = np.int64(0)
    acc_out = np.int64(0)
    for s in range(rc.shape[0]):  # nb is small next to the layer: a serial scan is fine
        acc_in += np.int64(rc[s])
        acc_out += np.int64(orc[s])
        prefix[0, s] = acc_in
        prefix[1, s] = acc_out
    width = od0.shape[0] // (4 if mode & 1 else 1)
    nchunks = (width + chunk - 1) // chunk
    # As in _fold_dense_kernel: one loop per mode, the mode a literal inside.
    if mode == MODE_BB:
        for c in prange(nchunks):
            _jagged_chunk(MODE_BB, c * chunk, min(width, c * chunk + chunk), rc, orc, prefix,
                          n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one)
    elif mode == MODE_BE:
        for c in prange(nchunks):
            _jagged_chunk(MODE_BE, c * chunk, min(width, c * chunk + chunk), rc, orc, prefix,
                          n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one)
    elif mode == MODE_EB:
        for c in prange(nchunks):
            _jagged_chunk(MODE_EB, c * chunk, min(width, c * chunk + chunk), rc, orc, prefix,
                          n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one)
    else:
        for c in prange(nchunks):
            _jagged_chunk(MODE_EE, c * chunk, min(width, c * chunk + chunk), rc, orc, prefix,
                          n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one)


def _flat(x):
    """``(n,)`` unchanged; extension ``(n, 4)`` -> its ``(4 n,)`` view."""
    return x.reshape(-1) if x.ndim == 2 else x


def _consts(f):
    return np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.w_mont), np.uint32(f.r_mod_p)


def fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Dense transition on the CPU (see the module docstring)."""
    p, mu, wm, _ = _consts(f)
    mode = mode_of(n0.ndim == 2, d0.ndim == 2)
    _fold_dense_kernel(mode, *(_flat(x) for x in (n0, n1, d0, d1, on0, on1, od0, od1)),
                       p, mu, wm)


def jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Jagged transition on the CPU (see the module docstring)."""
    p, mu, wm, one = _consts(f)
    mode = mode_of(n0.ndim == 2, d0.ndim == 2)
    _jagged_kernel(mode, rc, orc, prefix,
                   *(_flat(x) for x in (n0, n1, d0, d1, on0, on1, od0, od1)),
                   p, mu, wm, one, GKR_CPU_JAGGED_CHUNK)
