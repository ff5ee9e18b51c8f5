"""CuPy RawKernel launchers of the field ops (CUDA C in ``cuda/field_ops.cu``).

One ``RawModule`` per (field, device), compiled on first use and memoized; the
launchers pass ``np.uint64(n)``/``np.int32(op)`` explicitly because RawKernel
does not check argument types.  Arrays are C-contiguous CuPy arrays in the
forms and under the checks of :mod:`.field_cpu`'s launchers
(:mod:`.launch_checks`): base ``(n,)``, extension ``(n, 4)`` or flat
``(4 n,)``.  The extension kernels test their pointers on the device: where
every array is 16-byte aligned (CuPy allocations are 256-byte aligned) an
element moves as one 16-byte access, else as four 4-byte ones (an offset
view).  Launches are asynchronous, on CuPy's current stream and device (an
array of another device is refused): a launcher returns before the GPU has
finished, as CuPy's own operations do; ``encode``, ``decode`` and the zero
scans read a result back and so synchronize.  Importing this module
requires CuPy.
"""
import sys

import cupy
import numpy as np

from .cuda_source import assemble
from .field_params import FIELDS, FieldParams
from .launch_checks import (BINARY, IN_PLACE_UNARY, UNARY, check_bcast, check_device_arrays,
                            check_decode, check_encode, check_first_zero, check_map,
                            check_eq_split, check_mle_fold, check_pow, cupy_device,
                            current_cupy_device)
from .launch_config import GPU_INV_BATCH_BASE, GPU_INV_BATCH_EXT, THREADS_PER_BLOCK, grid_for
from .monty import OP_INV

__all__ = ["encode", "decode", "base_map1", "base_map2", "ext4_map1", "ext4_map2",
           "base_map2_bcast", "ext4_map2_bcast", "base_pow", "ext4_pow", "base_batch_inv",
           "base_mle_fold", "ext4_mle_fold", "base_eq_split", "ext4_eq_split",
           "base_first_zero", "ext4_first_zero"]

_ndarray = np.ndarray  # (a module-level name for the launch path)

#: nvcc/NVRTC options shared by every zorch_nb RawModule.
NVRTC_OPTIONS = ("-std=c++17",)


@cupy.memoize(for_each_device=True)
def raw_module(field_name: str, kernel_file: str) -> "cupy.RawModule":
    """Compiled ``kernel_file`` for one field on the current device (memoized)."""
    return cupy.RawModule(code=assemble(FIELDS[field_name], kernel_file),
                          options=NVRTC_OPTIONS)


def _kernel(f: FieldParams, name: str):
    return raw_module(f.name, "field_ops.cu").get_function(name)


def _launch(f, name, n, *args, per_thread=1):
    # per_thread: elements a thread takes at once (the batched inverses, the
    # zero scan's base words), so the grid is sized for ceil(n / per_thread)
    # threads
    current = None
    for x in args:  # (the checks take NumPy arrays too: they serve the CPU)
        if isinstance(x, _ndarray):
            _refuse_arrays(sys._getframe(1), args)
        # a CuPy array of another device: an illegal address where the launch runs
        device = cupy_device(x)
        if device is not None:
            if current is None:
                current = current_cupy_device()
            if device != current:
                _refuse_arrays(sys._getframe(1), args)
    if n == 0:
        return
    grid = grid_for(-(-n // per_thread))
    _kernel(f, name)((grid,), (THREADS_PER_BLOCK,), args + (np.uint64(n),))


def _refuse_arrays(frame, args):
    # The error path only: the launcher's own argument names, found by
    # identity among its locals, so each launcher need not list them.
    where = f"field_cupy.{frame.f_code.co_name}"
    named = [(k, v) for k, v in frame.f_locals.items() if any(v is x for x in args)]
    check_device_arrays(where, named)
    check_device_arrays(where, ((f"#{i} of the kernel", x) for i, x in enumerate(args)))


# Each launcher checks its arguments as field_cpu's do (launch_checks, the
# same code): the kernels take bare pointers, so a strided view, a short
# operand or an unknown opcode would otherwise be read as if valid.  Element
# counts come from the checks, so (n, 4) and flat (4 n,) extension arrays
# launch alike.


def encode(v, out, reduce, f):
    """Same contract as :func:`.field_cpu.encode`: one pass on the device,
    whose first out-of-range index (if not ``reduce``) is read back (the call
    synchronizes; with ``reduce`` it does not)."""
    n = check_encode("field_cupy.encode", f, v, out, reduce)
    if reduce:  # (the kernel then never touches the index: no fill, no read)
        _launch(f, "zorch_encode", n, v, np.int32(1), out, cupy.empty((1,), np.uint64))
        return -1
    first = cupy.full((1,), n, np.uint64)  # "none": any index is below n
    _launch(f, "zorch_encode", n, v, np.int32(0), out, first)
    return _read_index(first, n)


def decode(w, out, f):
    """Same contract as :func:`.field_cpu.decode`: one pass on the device,
    whose flag is read back (the call synchronizes)."""
    n = check_decode("field_cupy.decode", f, w, out)
    bad = cupy.zeros((1,), np.uint32)
    _launch(f, "zorch_decode", n, w, out, bad)
    return not int(bad.get()[0])


def base_map1(op, a, out, f):
    """Same contract as :func:`.field_cpu.base_map1` (NEG, SQUARE, INV)."""
    n = check_map("field_cupy.base_map1", f, op, UNARY, IN_PLACE_UNARY, 1, out, a)
    if op == OP_INV:  # Montgomery's trick per thread
        _launch(f, "zorch_base_inv_batched", n, a, out, per_thread=GPU_INV_BATCH_BASE)
    else:
        _launch(f, "zorch_base_map1", n, np.int32(op), a, out)


def base_map2(op, a, b, out, f):
    """Same contract as :func:`.field_cpu.base_map2` (ADD, SUB, MUL)."""
    n = check_map("field_cupy.base_map2", f, op, BINARY, BINARY, 1, out, a, b)
    _launch(f, "zorch_base_map2", n, np.int32(op), a, b, out)


def ext4_map1(op, a, out, f):
    """Same contract as :func:`.field_cpu.ext4_map1` (NEG, SQUARE, INV)."""
    n = check_map("field_cupy.ext4_map1", f, op, UNARY, IN_PLACE_UNARY, 4, out, a)
    if op == OP_INV:  # Montgomery's trick per thread, over the norms
        _launch(f, "zorch_ext4_inv_batched", n, a, out, per_thread=GPU_INV_BATCH_EXT)
    else:
        _launch(f, "zorch_ext4_map1", n, np.int32(op), a, out)


def ext4_map2(op, a, b, out, f):
    """Same contract as :func:`.field_cpu.ext4_map2` (ADD, SUB, MUL)."""
    n = check_map("field_cupy.ext4_map2", f, op, BINARY, BINARY, 4, out, a, b)
    _launch(f, "zorch_ext4_map2", n, np.int32(op), a, b, out)


def base_map2_bcast(op, a, a_step, b, b_step, out, f, run=0, a_row=0, b_row=0):
    """Same contract as :func:`.field_cpu.base_map2_bcast` (ADD, SUB, MUL)."""
    n, _, run, a_step, b_step, a_row, b_row = check_bcast(
        "field_cupy.base_map2_bcast", f, op, a, a_step, 1, b, b_step, 1, out, 1, run, a_row,
        b_row)
    _launch(f, "zorch_base_map2_bcast", n, np.int32(op), a, np.uint64(a_step),
            b, np.uint64(b_step), out, np.uint64(run), np.uint64(a_row), np.uint64(b_row))


def ext4_map2_bcast(op, a, a_step, a_deg, b, b_step, b_deg, out, f, run=0, a_row=0, b_row=0):
    """Same contract as :func:`.field_cpu.ext4_map2_bcast` (ADD, SUB, MUL)."""
    n, _, run, a_step, b_step, a_row, b_row = check_bcast(
        "field_cupy.ext4_map2_bcast", f, op, a, a_step, a_deg, b, b_step, b_deg, out, 4, run,
        a_row, b_row)
    _launch(f, "zorch_ext4_map2_bcast", n, np.int32(op), a,
            np.uint64(a_step), np.int32(a_deg), b, np.uint64(b_step), np.int32(b_deg), out,
            np.uint64(run), np.uint64(a_row), np.uint64(b_row))


def base_pow(a, e_hi, e_lo, nbits, out, f):
    """Same contract as :func:`.field_cpu.base_pow`."""
    n, (e_hi, e_lo, nbits) = check_pow("field_cupy.base_pow", f, 1, a, e_hi, e_lo, nbits, out)
    _launch(f, "zorch_base_pow", n, a, e_hi, e_lo, np.int32(nbits), out)


def ext4_pow(a, e_hi, e_lo, nbits, out, f):
    """Same contract as :func:`.field_cpu.ext4_pow`."""
    n, (e_hi, e_lo, nbits) = check_pow("field_cupy.ext4_pow", f, 4, a, e_hi, e_lo, nbits, out)
    _launch(f, "zorch_ext4_pow", n, a, e_hi, e_lo, np.int32(nbits), out)


def base_batch_inv(a, out, f):
    """Same contract as :func:`.field_cpu.base_batch_inv` (the kernel of
    :func:`base_map1`'s INV: Montgomery's trick per thread)."""
    n = check_map("field_cupy.base_batch_inv", f, OP_INV, None, (), 1, out, a)
    _launch(f, "zorch_base_inv_batched", n, a, out, per_thread=GPU_INV_BATCH_BASE)


def base_first_zero(a, f):
    """Same contract as :func:`.field_cpu.base_first_zero`: one read pass on
    the device, whose answer is read back (the call synchronizes)."""
    n = check_first_zero("field_cupy.base_first_zero", f, a, 1)
    first = cupy.full((1,), n, np.uint64)  # "none": any zero is below n
    _launch(f, "zorch_first_zero", n, a, np.int32(1), first, per_thread=4)  # (4 to a load)
    return _read_index(first, n)


def ext4_first_zero(a, f):
    """Same contract as :func:`.field_cpu.ext4_first_zero` (see
    :func:`base_first_zero`)."""
    n = check_first_zero("field_cupy.ext4_first_zero", f, a, 4)
    first = cupy.full((1,), n, np.uint64)
    _launch(f, "zorch_first_zero", n, a, np.int32(4), first)
    return _read_index(first, n)


def _read_index(first, n):
    # the kernel's answer, -1 where it found no zero (first still n)
    i = int(first.get()[0])
    return -1 if i == n else i


def base_mle_fold(v, r, out, f):
    """Same contract as :func:`.field_cpu.base_mle_fold`."""
    n, _, _ = check_mle_fold("field_cupy.base_mle_fold", f, v, 1, r, 1, out, 1)
    _launch(f, "zorch_base_mle_fold", n, v, r, out)


def ext4_mle_fold(v, v_deg, r, r_deg, out, f):
    """Same contract as :func:`.field_cpu.ext4_mle_fold`."""
    n, v_deg, r_deg = check_mle_fold("field_cupy.ext4_mle_fold", f, v, v_deg, r, r_deg, out, 4)
    _launch(f, "zorch_ext4_mle_fold", n, v, np.int32(v_deg), r, np.int32(r_deg), out)


def base_eq_split(a, r, lo, hi, f):
    """Same contract as :func:`.field_cpu.base_eq_split`."""
    n, _ = check_eq_split("field_cupy.base_eq_split", f, a, r, 1, lo, hi, 1)
    _launch(f, "zorch_base_eq_split", n, a, r, lo, hi)


def ext4_eq_split(a, r, r_deg, lo, hi, f):
    """Same contract as :func:`.field_cpu.ext4_eq_split`."""
    n, r_deg = check_eq_split("field_cupy.ext4_eq_split", f, a, r, r_deg, lo, hi, 4)
    _launch(f, "zorch_ext4_eq_split", n, a, r, np.int32(r_deg), lo, hi)
