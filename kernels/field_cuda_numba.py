"""Numba-CUDA kernels of the field ops (``@cuda.jit``).

The element arithmetic is the ``@njit`` scalar code of :mod:`.monty`, shared
with the CPU kernels.  Each kernel is a grid-stride loop; arrays are
C-contiguous device arrays, CuPy arrays (wrapped without a copy) or host
NumPy arrays (which Numba copies in and out: a device allocation of their
size per call, unlike the other two), in the forms and under the checks of
:mod:`.field_cpu`'s launchers (:mod:`.launch_checks`): base ``(n,)``,
extension ``(n, 4)`` or flat ``(4 n,)``.  Device arrays must live on the
device the launch runs on (Numba's current context, which is CuPy's current
device): a CuPy array of another device is refused, as by the CuPy
launchers; a Numba device array's device is not checked.
Importing this module requires numba-cuda (or ``NUMBA_ENABLE_CUDASIM=1``).

Every kernel is compiled with :data:`cached_kernel` (``cuda.jit(cache=True)``):
a later process loads the PTX and cubin from the on-disk cache instead of
compiling again (the simulator ignores the flag).  Numba-CUDA keys an entry
on the kernel's bytecode and the pickled contents of its closure cells, and
the kernels of :mod:`.gkr_cuda_numba` that are closures hold only numbers
there, so the key is the same in every process; the callees in other files
are covered by the digest of every kernel source the entries are keyed on
(:func:`.jit.keyed_on_sources`).
"""
import numpy as np
from numba import cuda

from .field_params import kernel_words
from .jit import keyed_on_sources
from .launch_checks import (BINARY, IN_PLACE_UNARY, UNARY, check_bcast,
                            check_current_device, check_decode, check_encode,
                            check_first_zero, check_map, check_eq_split, check_mle_fold,
                            check_pow)
from .launch_config import GPU_INV_BATCH_BASE, GPU_INV_BATCH_EXT, block_for, grid_for
from .monty import base_map1 as _base1
from .monty import base_map2 as _base2
from .monty import OP_INV, base_pow as _base_pow, ext4_pow as _ext4_pow
from .monty import ext4_map1 as _ext1
from .monty import ext4_map2 as _ext2
from .monty import ext4_base_map2 as _ext_base2
from .monty import base_fold as _base_fold, ext4_fold as _ext4_fold
from .monty import base_eq_split as _base_eq_split, ext4_eq_split as _ext4_eq_split
from .monty import canonical, ext4_inv_finish, ext4_norm, mont_inv, mont_mul, monty_reduce

__all__ = ["encode", "decode", "base_map1", "base_map2", "ext4_map1", "ext4_map2",
           "base_map2_bcast", "ext4_map2_bcast", "base_pow", "ext4_pow", "base_batch_inv",
           "base_mle_fold", "ext4_mle_fold", "base_eq_split", "ext4_eq_split",
           "base_first_zero", "ext4_first_zero"]

_cuda_jit_cached = cuda.jit(cache=True)

# The grid-stride loops index with uint64: Numba wraps a negative signed index
# from the end of the array, a compare and select per access that an unsigned
# one does not need (sm_90 SASS of the loop bodies: base two-operand maps 189
# -> 141 instructions, base MLE fold 210 -> 170, extension two-operand maps
# 197 -> 174, base batched inverse 600 -> 495; benchmarks/results/README.md).
# Every offset is uint64 as well: Numba types uint64 + int64 as float64.
_U0, _U1, _U2, _U3, _U4 = np.uint64(0), np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
_U5, _U6, _U7, _U8 = np.uint64(5), np.uint64(6), np.uint64(7), np.uint64(8)


def cached_kernel(fn):
    """``@cuda.jit`` with Numba-CUDA's on-disk cache, keyed on every kernel
    source (see the module docstring and :mod:`.jit`)."""
    return keyed_on_sources(_cuda_jit_cached(fn))


@cached_kernel
def _base_map1_kernel(op, a, p, mu, one, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        out[i] = _base1(op, a[i], p, mu, one)


@cached_kernel
def _base_map2_kernel(op, a, b, p, mu, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        out[i] = _base2(op, a[i], b[i], p, mu)


@cached_kernel
def _ext4_map1_kernel(op, a, p, mu, wm, one, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        c = _ext1(op, a[i, 0], a[i, 1], a[i, 2], a[i, 3], p, mu, wm, one)
        out[i, 0] = c[0]
        out[i, 1] = c[1]
        out[i, 2] = c[2]
        out[i, 3] = c[3]


@cached_kernel
def _ext4_map2_kernel(op, a, b, p, mu, wm, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        c = _ext2(op, a[i, 0], a[i, 1], a[i, 2], a[i, 3],
                  b[i, 0], b[i, 1], b[i, 2], b[i, 3], p, mu, wm)
        out[i, 0] = c[0]
        out[i, 1] = c[1]
        out[i, 2] = c[2]
        out[i, 3] = c[3]


@cuda.jit(device=True)
def _bcast_index(i, n, run, a_row, a_step, b_row, b_step):
    # Element indices of the two operands for output element i (the contract
    # of kernels/field_cpu.base_map2_bcast); run 0 or >= n: one run.  All
    # uint64 (the launchers pass the steps, run and rows so)
    if run != _U0 and run < n:
        q = i // run
        r = i - q * run
        return q * a_row + r * a_step, q * b_row + r * b_step
    return i * a_step, i * b_step


@cached_kernel
def _base_map2_bcast_kernel(op, a, a_step, b, b_step, run, a_row, b_row, p, mu, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    n = np.uint64(out.shape[0])
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        ja, jb = _bcast_index(i, n, run, a_row, a_step, b_row, b_step)
        out[i] = _base2(op, a[ja], b[jb], p, mu)


@cached_kernel
def _ext4_map2_bcast_kernel(op, a, a_step, a_deg, b, b_step, b_deg, run, a_row, b_row, p, mu,
                            wm, out):
    # flat words; an operand of degree 1 is base, taken as (s, 0, 0, 0); at
    # least one is an extension operand
    start, stride = cuda.grid(1), cuda.gridsize(1)
    n = np.uint64(out.shape[0] // 4)
    for t in range(start, out.shape[0] // 4, stride):
        i = np.uint64(t)
        ja, jb = _bcast_index(i, n, run, a_row, a_step, b_row, b_step)
        if a_deg == 4 and b_deg == 4:
            ka, kb = _U4 * ja, _U4 * jb
            c = _ext2(op, a[ka], a[ka + _U1], a[ka + _U2], a[ka + _U3],
                      b[kb], b[kb + _U1], b[kb + _U2], b[kb + _U3], p, mu, wm)
        elif a_deg == 4:
            ka = _U4 * ja
            c = _ext_base2(op, a[ka], a[ka + _U1], a[ka + _U2], a[ka + _U3], b[jb], False, p, mu)
        else:  # a base, b extension (never two base operands)
            kb = _U4 * jb
            c = _ext_base2(op, b[kb], b[kb + _U1], b[kb + _U2], b[kb + _U3], a[ja], True, p, mu)
        k = _U4 * i
        out[k] = c[0]
        out[k + _U1] = c[1]
        out[k + _U2] = c[2]
        out[k + _U3] = c[3]


@cached_kernel
def _base_pow_kernel(a, e_hi, e_lo, nbits, p, mu, one, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        out[i] = _base_pow(a[i], e_hi, e_lo, nbits, p, mu, one)


@cached_kernel
def _ext4_pow_kernel(a, e_hi, e_lo, nbits, p, mu, wm, one, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        c = _ext4_pow(a[i, 0], a[i, 1], a[i, 2], a[i, 3], e_hi, e_lo, nbits, p, mu, wm, one)
        out[i, 0] = c[0]
        out[i, 1] = c[1]
        out[i, 2] = c[2]
        out[i, 3] = c[3]


@cached_kernel
def _base_inv_batched_kernel(a, p, mu, one, out):
    # Montgomery's trick per thread, as kernels/cuda/field_ops.cu's
    # zorch_base_inv_batched: elements i0 + k S (S the grid's threads), one
    # Fermat inversion for GPU_INV_BATCH_BASE of them; a zero (or a slot past
    # n) stands aside with the factor one and inverts to 0
    n = out.shape[0]
    start, s = cuda.grid(1), cuda.gridsize(1)
    nu, su = np.uint64(n), np.uint64(s)
    x = cuda.local.array(GPU_INV_BATCH_BASE, np.uint32)
    before = cuda.local.array(GPU_INV_BATCH_BASE, np.uint32)
    unit = np.uint32(one)
    for t in range(start, n, s * GPU_INV_BATCH_BASE):
        i0 = np.uint64(t)
        acc = unit
        for k in range(GPU_INV_BATCH_BASE):
            i = i0 + np.uint64(k) * su
            xk = canonical(a[i], p) if i < nu else np.uint32(0)
            x[k] = xk
            before[k] = acc
            acc = mont_mul(acc, xk if xk != 0 else unit, p, mu)
        inv = mont_inv(acc, p, mu, one)
        for k in range(GPU_INV_BATCH_BASE - 1, -1, -1):
            i = i0 + np.uint64(k) * su
            xk = x[k]
            r = mont_mul(inv, before[k], p, mu)
            if i < nu:
                out[i] = r if xk != 0 else np.uint32(0)
            inv = mont_mul(inv, xk if xk != 0 else unit, p, mu)


@cached_kernel
def _ext4_inv_batched_kernel(a, p, mu, wm, one, out):
    # The same over the norms of the elements (a, out (n, 4)); a zero element
    # has N0 = N1 = 0, so its result is 0 whatever its inverse norm is
    n = out.shape[0]
    start, s = cuda.grid(1), cuda.gridsize(1)
    nu, su = np.uint64(n), np.uint64(s)
    x = cuda.local.array((GPU_INV_BATCH_EXT, 4), np.uint32)
    kept = cuda.local.array((GPU_INV_BATCH_EXT, 4), np.uint32)  # N0, N1, norm, before
    unit = np.uint32(one)
    zero = np.uint32(0)
    for t in range(start, n, s * GPU_INV_BATCH_EXT):
        i0 = np.uint64(t)
        acc = unit
        for k in range(GPU_INV_BATCH_EXT):
            i = i0 + np.uint64(k) * su
            for j in range(4):
                x[k, j] = canonical(a[i, np.uint64(j)], p) if i < nu else zero
            c = ext4_norm(x[k, 0], x[k, 1], x[k, 2], x[k, 3], p, mu, wm)
            kept[k, 0] = c[0]
            kept[k, 1] = c[1]
            kept[k, 2] = c[2]
            kept[k, 3] = acc
            acc = mont_mul(acc, c[2] if c[2] != 0 else unit, p, mu)
        inv = mont_inv(acc, p, mu, one)
        for k in range(GPU_INV_BATCH_EXT - 1, -1, -1):
            i = i0 + np.uint64(k) * su
            c = ext4_inv_finish(x[k, 0], x[k, 1], x[k, 2], x[k, 3], kept[k, 0], kept[k, 1],
                                mont_mul(inv, kept[k, 3], p, mu), p, mu, wm)
            if i < nu:
                out[i, _U0] = c[0]
                out[i, _U1] = c[1]
                out[i, _U2] = c[2]
                out[i, _U3] = c[3]
            norm = kept[k, 2]
            inv = mont_mul(inv, norm if norm != 0 else unit, p, mu)


@cached_kernel
def _encode_kernel(v, reduce, p, mu, r2, out, first):
    # As kernels/cuda/field_ops.cu's zorch_encode: out[i] = v[i] 2**32 mod p;
    # a value outside [0, p) reduced mod p (reduce) or its index folded into
    # first[0] by an atomic minimum, its word that of 0
    start, s = cuda.grid(1), cuda.gridsize(1)
    pp = np.int64(p)
    for t in range(start, v.shape[0], s):
        i = np.uint64(t)
        x = v[i]
        if x < 0 or x >= pp:
            if reduce:
                x = x % pp
                if x < 0:  # (whichever sign convention the target's % has)
                    x += pp
            else:
                cuda.atomic.min(first, 0, i)
                x = 0
        out[i] = mont_mul(np.uint32(x), r2, p, mu)


@cached_kernel
def _decode_kernel(w, p, mu, out, bad):
    # As zorch_decode: out[i] = w[i] 2**-32 mod p; bad[0] = 1 where a word is
    # >= p, stored once per thread
    start, s = cuda.grid(1), cuda.gridsize(1)
    seen = False
    for t in range(start, w.shape[0], s):
        i = np.uint64(t)
        x = w[i]
        seen |= x >= p
        out[i] = monty_reduce(np.uint64(x), p, mu)
    if seen:
        bad[0] = np.uint32(1)


@cached_kernel
def _first_zero_kernel(w, deg, p, first):
    # As kernels/cuda/field_ops.cu's zorch_first_zero: first[0] = min(first[0],
    # i) over the elements i (deg words each of the flat w) that are 0 mod p,
    # in groups of four words (an extension element or four base elements:
    # four independent loads in flight, as a thread stops at its first zero);
    # only a thread that finds one does an atomic
    n = np.uint64(w.shape[0] // deg)
    groups = w.shape[0] // 4
    start, s = cuda.grid(1), cuda.gridsize(1)
    for t in range(start, groups, s):
        g = np.uint64(t)
        j = _U4 * g
        x0, x1 = canonical(w[j], p), canonical(w[j + _U1], p)
        x2, x3 = canonical(w[j + _U2], p), canonical(w[j + _U3], p)
        hit = n
        if deg == 4:
            if (x0 | x1 | x2 | x3) == 0:
                hit = g
        elif x0 == 0:
            hit = j
        elif x1 == 0:
            hit = j + _U1
        elif x2 == 0:
            hit = j + _U2
        elif x3 == 0:
            hit = j + _U3
        if hit < n:
            cuda.atomic.min(first, 0, hit)
            break
    # the last n % 4 base elements, one to a thread
    i = _U4 * np.uint64(groups) + np.uint64(start)
    if deg == 1 and i < n and canonical(w[i], p) == 0:
        cuda.atomic.min(first, 0, i)


@cuda.jit(device=True)
def _element_words(r, r_deg):
    # the one element r of r_deg words as four (a base element's last three
    # are its own word again: the scalar functions ignore them)
    if r_deg == 4:
        return r[0], r[1], r[2], r[3]
    return r[0], r[0], r[0], r[0]


@cached_kernel
def _base_mle_fold_kernel(v, r, p, mu, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    s = r[0]
    for t in range(start, out.shape[0], stride):
        i = np.uint64(t)
        out[i] = _base_fold(v[_U2 * i], v[_U2 * i + _U1], s, p, mu)


@cached_kernel
def _ext4_mle_fold_kernel(v, v_deg, r, r_deg, p, mu, wm, out):
    # flat words: v 2 n elements of v_deg words, r one of r_deg words, out (4 n,)
    start, stride = cuda.grid(1), cuda.gridsize(1)
    r0, r1, r2, r3 = _element_words(r, r_deg)
    for t in range(start, out.shape[0] // 4, stride):
        i = np.uint64(t)
        if v_deg == 4:
            j = _U8 * i
            c = _ext4_fold(v[j], v[j + _U1], v[j + _U2], v[j + _U3], v[j + _U4], v[j + _U5],
                           v[j + _U6], v[j + _U7], r0, r1, r2, r3, v_deg, r_deg, p, mu, wm)
        else:
            lo, hi = v[_U2 * i], v[_U2 * i + _U1]
            c = _ext4_fold(lo, lo, lo, lo, hi, hi, hi, hi, r0, r1, r2, r3, v_deg, r_deg, p, mu,
                           wm)
        j = _U4 * i
        out[j] = c[0]
        out[j + _U1] = c[1]
        out[j + _U2] = c[2]
        out[j + _U3] = c[3]


@cached_kernel
def _base_eq_split_kernel(a, r, p, mu, lo, hi):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    s = r[0]
    for t in range(start, hi.shape[0], stride):
        i = np.uint64(t)
        c = _base_eq_split(a[i], s, p, mu)
        lo[i] = c[0]
        hi[i] = c[1]


@cached_kernel
def _ext4_eq_split_kernel(a, r, r_deg, p, mu, wm, lo, hi):
    # flat words: a, lo, hi (4 n,), r one element of r_deg words
    start, stride = cuda.grid(1), cuda.gridsize(1)
    r0, r1, r2, r3 = _element_words(r, r_deg)
    for t in range(start, hi.shape[0] // 4, stride):
        j = _U4 * np.uint64(t)
        c = _ext4_eq_split(a[j], a[j + _U1], a[j + _U2], a[j + _U3], r0, r1, r2, r3, r_deg, p,
                           mu, wm)
        lo[j] = c[0]
        lo[j + _U1] = c[1]
        lo[j + _U2] = c[2]
        lo[j + _U3] = c[3]
        hi[j] = c[4]
        hi[j + _U1] = c[5]
        hi[j + _U2] = c[6]
        hi[j + _U3] = c[7]


def as_device(x, stream=0):
    """Device view of ``x`` for a Numba launch.

    CUDA-array-interface arrays (CuPy) are wrapped without a stream sync
    (a plain pass would synchronise the producer stream on every launch);
    host NumPy arrays are copied to the device (on ``stream``, the
    launch's); scalars pass through.
    """
    if isinstance(x, np.ndarray):
        return cuda.to_device(x, stream=stream)
    if hasattr(x, "__cuda_array_interface__"):
        try:
            return cuda.as_cuda_array(x, sync=False)
        except TypeError:  # numba-cuda without the ``sync`` keyword
            return cuda.as_cuda_array(x)
    return x


def stream_for(*arrays):
    """The stream a launch on ``arrays`` belongs on.

    With CuPy arrays among them: CuPy's current stream, so the launch is
    ordered after the CuPy work that produced them (``as_device`` does not
    synchronize) and before the CuPy work that reads its output -- also
    under ``with cupy.cuda.Stream(non_blocking=True)``, which does not
    synchronize with Numba's default stream.  Otherwise (or on CuPy's
    legacy null stream, handle 0) Numba's default stream, ``0``.
    """
    if any(type(x).__module__.split(".")[0] == "cupy" for x in arrays):
        import cupy
        # (the host emulation's stand-in stream has no handle: the default one)
        ptr = getattr(cupy.cuda.get_current_stream(), "ptr", 0)
        if ptr:
            return cuda.external_stream(ptr)
    return 0


def launch(kernel, n, args, out, *more):
    """Launch a grid-stride ``kernel(*args, out, *more)`` over ``n`` items.

    A host output array receives its result by one copy back from the device.
    Host arrays go in and back on the launch's stream: beside CuPy arrays
    under a non-blocking CuPy stream, copies on Numba's default stream would
    not wait for the launch (nor it for them).
    """
    outs = (out,) + more
    stream = stream_for(*outs, *args)
    d_outs = [as_device(o, stream) for o in outs]
    kernel[grid_for(n), block_for(n), stream](*[as_device(x, stream) for x in args], *d_outs)
    copy_back(outs, d_outs, stream)


def copy_back(outs, d_outs, stream):
    """Copy each host array of ``outs`` back from its device twin in ``d_outs``
    (``as_device(out, stream)``), on ``stream``, the launch's.

    On an external (CuPy) stream the copies are waited for: an asynchronous
    copy to pageable memory may return before it has landed, and Numba's
    default stream would not wait for a launch on a non-blocking stream.
    """
    copied = False
    for host, d in zip(outs, d_outs):
        if isinstance(host, np.ndarray):
            d.copy_to_host(host, stream=stream)
            copied = True
    if copied and not isinstance(stream, int):
        stream.synchronize()


# The launchers check their arguments as field_cpu's do (launch_checks, the
# same code), then bring extension arrays to the form the kernel indexes:
# (n, 4) for the elementwise kernels, flat words for the broadcast one (views:
# the arrays are C-contiguous; a host `out` view is written through by the
# copy back).  An empty call launches nothing.


def _on_current_device(where, **named):
    # a CuPy array of another device than the current one, where the launch
    # runs, would be an illegal address there (launch_checks)
    check_current_device(where, named.items())


def _pairs(x, n):
    return x if x.ndim == 2 else x.reshape(n, 4)


def _flat(x):
    return x if x.ndim == 1 else x.reshape(-1)


def encode(v, out, reduce, f):
    """Same contract as :func:`.field_cpu.encode`: one pass on the device,
    whose first out-of-range index is read back (the call synchronizes)."""
    n = check_encode("field_cuda_numba.encode", f, v, out, reduce)
    _on_current_device("field_cuda_numba.encode", v=v, out=out)
    if n == 0:
        return -1
    p, mu, _, _ = kernel_words(f)
    first = np.array([n], np.uint64)  # "none": any index is below n
    launch(_encode_kernel, n, (v, reduce, p, mu, np.uint32(f.r2_mod_p)), out, first)
    return _read_index(first, n)


def decode(w, out, f):
    """Same contract as :func:`.field_cpu.decode`: one pass on the device,
    whose flag is read back (the call synchronizes)."""
    n = check_decode("field_cuda_numba.decode", f, w, out)
    _on_current_device("field_cuda_numba.decode", w=w, out=out)
    if n == 0:
        return True
    p, mu, _, _ = kernel_words(f)
    bad = np.zeros(1, np.uint32)
    launch(_decode_kernel, n, (w, p, mu), out, bad)
    return not bad[0]


def base_map1(op, a, out, f):
    """Same contract as :func:`.field_cpu.base_map1` (NEG, SQUARE, INV)."""
    n = check_map("field_cuda_numba.base_map1", f, op, UNARY, IN_PLACE_UNARY, 1, out, a)
    _on_current_device("field_cuda_numba.base_map1", a=a, out=out)
    if n and op == OP_INV:  # Montgomery's trick per thread
        _base_inv(a, out, n, f)
    elif n:
        p, mu, _, one = kernel_words(f)
        launch(_base_map1_kernel, n, (np.int64(op), a, p, mu, one), out)


def _base_inv(a, out, n, f):
    p, mu, _, one = kernel_words(f)
    launch(_base_inv_batched_kernel, -(-n // GPU_INV_BATCH_BASE), (a, p, mu, one), out)


def base_map2(op, a, b, out, f):
    """Same contract as :func:`.field_cpu.base_map2` (ADD, SUB, MUL)."""
    n = check_map("field_cuda_numba.base_map2", f, op, BINARY, BINARY, 1, out, a, b)
    _on_current_device("field_cuda_numba.base_map2", a=a, b=b, out=out)
    if n:
        p, mu, _, _ = kernel_words(f)
        launch(_base_map2_kernel, n, (np.int64(op), a, b, p, mu), out)


def ext4_map1(op, a, out, f):
    """Same contract as :func:`.field_cpu.ext4_map1` (NEG, SQUARE, INV)."""
    n = check_map("field_cuda_numba.ext4_map1", f, op, UNARY, IN_PLACE_UNARY, 4, out, a)
    _on_current_device("field_cuda_numba.ext4_map1", a=a, out=out)
    if n:
        p, mu, wm, one = kernel_words(f)
        if op == OP_INV:  # Montgomery's trick per thread, over the norms
            launch(_ext4_inv_batched_kernel, -(-n // GPU_INV_BATCH_EXT),
                   (_pairs(a, n), p, mu, wm, one), _pairs(out, n))
        else:
            launch(_ext4_map1_kernel, n, (np.int64(op), _pairs(a, n), p, mu, wm, one),
                   _pairs(out, n))


def ext4_map2(op, a, b, out, f):
    """Same contract as :func:`.field_cpu.ext4_map2` (ADD, SUB, MUL)."""
    n = check_map("field_cuda_numba.ext4_map2", f, op, BINARY, BINARY, 4, out, a, b)
    _on_current_device("field_cuda_numba.ext4_map2", a=a, b=b, out=out)
    if n:
        p, mu, wm, _ = kernel_words(f)
        launch(_ext4_map2_kernel, n,
               (np.int64(op), _pairs(a, n), _pairs(b, n), p, mu, wm), _pairs(out, n))


def base_map2_bcast(op, a, a_step, b, b_step, out, f, run=0, a_row=0, b_row=0):
    """Same contract as :func:`.field_cpu.base_map2_bcast` (ADD, SUB, MUL)."""
    n, _, run, a_step, b_step, a_row, b_row = check_bcast(
        "field_cuda_numba.base_map2_bcast", f, op, a, a_step, 1, b, b_step, 1, out, 1, run,
        a_row, b_row)
    _on_current_device("field_cuda_numba.base_map2_bcast", a=a, b=b, out=out)
    if n:
        p, mu, _, _ = kernel_words(f)
        launch(_base_map2_bcast_kernel, n,
               (np.int64(op), a, np.uint64(a_step), b, np.uint64(b_step), np.uint64(run),
                np.uint64(a_row), np.uint64(b_row), p, mu), out)


def ext4_map2_bcast(op, a, a_step, a_deg, b, b_step, b_deg, out, f, run=0, a_row=0, b_row=0):
    """Same contract as :func:`.field_cpu.ext4_map2_bcast` (ADD, SUB, MUL)."""
    n, _, run, a_step, b_step, a_row, b_row = check_bcast(
        "field_cuda_numba.ext4_map2_bcast", f, op, a, a_step, a_deg, b, b_step, b_deg, out, 4,
        run, a_row, b_row)
    _on_current_device("field_cuda_numba.ext4_map2_bcast", a=a, b=b, out=out)
    if n:
        p, mu, wm, _ = kernel_words(f)
        launch(_ext4_map2_bcast_kernel, n,
               (np.int64(op), _flat(a), np.uint64(a_step), np.int64(a_deg), _flat(b),
                np.uint64(b_step), np.int64(b_deg), np.uint64(run), np.uint64(a_row),
                np.uint64(b_row), p, mu, wm), _flat(out))


def base_pow(a, e_hi, e_lo, nbits, out, f):
    """Same contract as :func:`.field_cpu.base_pow`."""
    n, (e_hi, e_lo, nbits) = check_pow("field_cuda_numba.base_pow", f, 1, a, e_hi, e_lo, nbits,
                                       out)
    _on_current_device("field_cuda_numba.base_pow", a=a, out=out)
    if n:
        p, mu, _, one = kernel_words(f)
        launch(_base_pow_kernel, n, (a, e_hi, e_lo, nbits, p, mu, one), out)


def ext4_pow(a, e_hi, e_lo, nbits, out, f):
    """Same contract as :func:`.field_cpu.ext4_pow`."""
    n, (e_hi, e_lo, nbits) = check_pow("field_cuda_numba.ext4_pow", f, 4, a, e_hi, e_lo, nbits,
                                       out)
    _on_current_device("field_cuda_numba.ext4_pow", a=a, out=out)
    if n:
        p, mu, wm, one = kernel_words(f)
        launch(_ext4_pow_kernel, n, (_pairs(a, n), e_hi, e_lo, nbits, p, mu, wm, one),
               _pairs(out, n))


def base_batch_inv(a, out, f):
    """Same contract as :func:`.field_cpu.base_batch_inv` (the kernel of
    :func:`base_map1`'s INV: Montgomery's trick per thread)."""
    n = check_map("field_cuda_numba.base_batch_inv", f, OP_INV, None, (), 1, out, a)
    _on_current_device("field_cuda_numba.base_batch_inv", a=a, out=out)
    if n:
        _base_inv(a, out, n, f)


def base_first_zero(a, f):
    """Same contract as :func:`.field_cpu.base_first_zero`: one read pass on
    the device, whose answer is read back (the call synchronizes)."""
    n = check_first_zero("field_cuda_numba.base_first_zero", f, a, 1)
    _on_current_device("field_cuda_numba.base_first_zero", a=a)
    return _first_zero(a, 1, n, f)


def ext4_first_zero(a, f):
    """Same contract as :func:`.field_cpu.ext4_first_zero` (see
    :func:`base_first_zero`)."""
    n = check_first_zero("field_cuda_numba.ext4_first_zero", f, a, 4)
    _on_current_device("field_cuda_numba.ext4_first_zero", a=a)
    return _first_zero(a, 4, n, f)


def _first_zero(a, deg, n, f):
    if n == 0:
        return -1
    first = np.array([n], np.uint64)  # "none": any zero is below n
    launch(_first_zero_kernel, -(-n * deg // 4), (_flat(a), np.int32(deg), kernel_words(f)[0]),
           first)  # (a thread per four words: see the kernel)
    return _read_index(first, n)


def _read_index(first, n):
    # a kernel's answer (copied back into the host array first), -1 where
    # it found nothing (first still n)
    return -1 if first[0] == n else int(first[0])


def base_mle_fold(v, r, out, f):
    """Same contract as :func:`.field_cpu.base_mle_fold`."""
    n, _, _ = check_mle_fold("field_cuda_numba.base_mle_fold", f, v, 1, r, 1, out, 1)
    _on_current_device("field_cuda_numba.base_mle_fold", v=v, r=r, out=out)
    if n:
        p, mu, _, _ = kernel_words(f)
        launch(_base_mle_fold_kernel, n, (v, r, p, mu), out)


def ext4_mle_fold(v, v_deg, r, r_deg, out, f):
    """Same contract as :func:`.field_cpu.ext4_mle_fold`."""
    n, v_deg, r_deg = check_mle_fold("field_cuda_numba.ext4_mle_fold", f, v, v_deg, r, r_deg,
                                     out, 4)
    _on_current_device("field_cuda_numba.ext4_mle_fold", v=v, r=r, out=out)
    if n:
        p, mu, wm, _ = kernel_words(f)
        launch(_ext4_mle_fold_kernel, n,
               (_flat(v), np.int64(v_deg), _flat(r), np.int64(r_deg), p, mu, wm), _flat(out))


def base_eq_split(a, r, lo, hi, f):
    """Same contract as :func:`.field_cpu.base_eq_split`."""
    n, _ = check_eq_split("field_cuda_numba.base_eq_split", f, a, r, 1, lo, hi, 1)
    _on_current_device("field_cuda_numba.base_eq_split", a=a, r=r, lo=lo, hi=hi)
    if n:
        p, mu, _, _ = kernel_words(f)
        launch(_base_eq_split_kernel, n, (a, r, p, mu), lo, hi)


def ext4_eq_split(a, r, r_deg, lo, hi, f):
    """Same contract as :func:`.field_cpu.ext4_eq_split`."""
    n, r_deg = check_eq_split("field_cuda_numba.ext4_eq_split", f, a, r, r_deg, lo, hi, 4)
    _on_current_device("field_cuda_numba.ext4_eq_split", a=a, r=r, lo=lo, hi=hi)
    if n:
        p, mu, wm, _ = kernel_words(f)
        launch(_ext4_eq_split_kernel, n, (_flat(a), _flat(r), np.int64(r_deg), p, mu, wm),
               _flat(lo), _flat(hi))
