"""CuPy RawKernel launchers of the LogUp-GKR transitions (CUDA C in ``cuda/gkr.cu``).

Same launcher contract as :mod:`.gkr_cpu` (see its docstring); arrays are
contiguous CuPy arrays (row counts int32, ``prefix`` int64 ``(2, nb)``).

* One ``RawModule`` per (field, device), compiled on first use and memoized;
  the mode (base/extension numerators and denominators) and the vector-load
  switch are template parameters of kernels named through
  ``name_expressions``, so nothing compiles per length, count or schedule.
* A dense transition is one launch: thread ``k`` loads nodes ``2k, 2k+1`` of
  each MLE (8-byte loads for base data, 16-byte loads per extension element)
  and writes slot ``k`` of the four outputs.
* A jagged transition is two launches and no host synchronization: a
  one-block scan writes the prefix sums of ``rc`` and ``orc`` into ``prefix``
  on the device, then the slot kernel finds each slot's segment by binary
  search over those sums.
* Vector loads need 16-byte aligned arrays (CuPy allocations are 256-byte
  aligned); offset views fall back to the scalar variant.

Importing this module requires CuPy.
"""
import cupy
import numpy as np

from .cuda_source import assemble
from .field_cupy import NVRTC_OPTIONS
from .field_params import FIELDS
from .gkr_scalar import mode_of
from .launch_config import GKR_SCAN_THREADS, THREADS_PER_BLOCK, grid_for


def _name(kernel: str, mode: int, vec: bool) -> str:
    return f"{kernel}<{mode >> 1}, {mode & 1}, {'true' if vec else 'false'}>"


#: Every template instance the launchers use (all are instantiated in gkr.cu).
NAME_EXPRESSIONS = tuple(_name(k, m, v) for k in ("zorch_gkr_fold_dense", "zorch_gkr_jagged")
                         for m in range(4) for v in (False, True))


@cupy.memoize(for_each_device=True)
def gkr_module(field_name: str) -> "cupy.RawModule":
    """The compiled ``gkr.cu`` for one field on the current device (memoized)."""
    return cupy.RawModule(code=assemble(FIELDS[field_name], "gkr.cu"), options=NVRTC_OPTIONS,
                          name_expressions=NAME_EXPRESSIONS)


@cupy.memoize(for_each_device=True)
def _function(field_name: str, name: str):
    return gkr_module(field_name).get_function(name)


def _vec(arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


def fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Dense transition: one launch over ``L / 2`` slots."""
    arrays = (n0, n1, d0, d1, on0, on1, od0, od1)
    half = on0.shape[0]
    fn = _function(f.name, _name("zorch_gkr_fold_dense", mode_of(n0.ndim == 2, d0.ndim == 2),
                                 _vec(arrays)))
    fn((grid_for(half),), (THREADS_PER_BLOCK,), arrays + (np.uint64(half),))


def jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Jagged transition: device prefix sums, then one launch over the output slots."""
    nb = np.uint32(rc.shape[0])
    scan = _function(f.name, "zorch_gkr_jagged_scan")
    scan((1,), (GKR_SCAN_THREADS,), (rc, orc, prefix, nb))
    arrays = (n0, n1, d0, d1, on0, on1, od0, od1)
    width = on0.shape[0]
    fn = _function(f.name, _name("zorch_gkr_jagged", mode_of(n0.ndim == 2, d0.ndim == 2),
                                 _vec(arrays)))
    fn((grid_for(width),), (THREADS_PER_BLOCK,), (rc, orc, prefix, nb) + arrays + (np.uint64(width),))
