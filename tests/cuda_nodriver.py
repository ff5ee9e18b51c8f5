"""Numba-CUDA without a driver: stand-ins for the subprocesses of
tests/test_numba_cuda_ptx.py and tests/test_numba_cuda_ptx_cache.py.

:func:`install` names an H200 (sm_90) as the current device (Numba-CUDA
types and compiles device functions for it), routes every kernel launch
``kernel[grid, block](*args)`` of the object layer to a callback with the
launch's argument types, and lets the launchers hand host arrays over as
if they were device arrays.  Nothing runs on a device.
"""
import numba
import numpy as np


class HostAsDevice(np.ndarray):
    """A host array standing in for a device array."""

    def copy_to_host(self, ary=None, stream=0):
        return ary


def as_device(x, stream=0):
    return x.view(HostAsDevice) if isinstance(x, np.ndarray) else x


class FakeH200:
    compute_capability = (9, 0)
    id = 0


def launch_types(args) -> tuple:
    """Numba types of a launch's arguments (stand-ins typed as the arrays they wrap)."""
    return tuple(numba.typeof(np.asarray(a) if isinstance(a, np.ndarray) else a) for a in args)


def install(on_launch) -> None:
    """Every launch of a ``CUDADispatcher`` calls ``on_launch(dispatcher, types)``."""
    import numba.cuda.dispatcher as dispatcher
    dispatcher.get_current_device = lambda: FakeH200()

    def configure(self, *config):
        return lambda *args: on_launch(self, launch_types(args))

    dispatcher.CUDADispatcher.__getitem__ = configure
    from zorch_nb.kernels import field_cuda_numba, gkr_cuda_numba
    field_cuda_numba.as_device = gkr_cuda_numba.as_device = as_device
