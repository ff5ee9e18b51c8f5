"""asv benchmarks of zorch_nb on the CPU (see README, "Benchmarks").

``peak_bytes(call)``: the peak bytes ``call()`` allocates on top of what
exists (tracemalloc), for the ``track_peak_bytes_*`` benchmarks.  asv's
``peakmem_*`` is the whole process's peak -- the pages of the imports and
Numba's compiler it touches, ``setup``'s inputs (60-260 MB here) -- which a
no-op body matched at every size; this is the call's own figure.  (It sees
what NumPy allocates -- outputs, layers, temporaries made in Python -- but
not what a compiled Numba function allocates inside itself: a jagged
chunk's small scratch.)

asv.conf.json sets ``launch_method`` to ``forkserver``: each benchmark runs
in a process forked from one that imported these modules (and so zorch_nb
and Numba) once, instead of a fresh interpreter per parameter combination
-- ``asv run --quick`` took 138 s instead of ~280 s on 2 cores.  Times are
unchanged (``setup`` runs in the forked process, untimed); ``peakmem_*``
counts fewer inherited pages, so its absolute figures are lower than a
spawned process's and only their growth with the size means anything.

Every ``setup`` checks the call it times (on the whole result, or on a
prefix where a NumPy yardstick of the whole would dominate ``asv run
--quick``) against a plain NumPy (or, for the tensor trains, ragged)
computation, so a wrong kernel fails its benchmarks instead of being timed.
"""
import numpy as np

from zorch_nb._bench_gkr import traced_peak as peak_bytes

__all__ = ["peak_bytes", "check_equal", "check_close"]

#: Elements of a result checked against a yardstick where only a prefix is.
CHECKED_PREFIX = 4096


def check_equal(got, want, what: str) -> None:
    """``AssertionError`` naming ``what`` unless ``got`` equals ``want``
    (canonical integers; same shape)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: the kernel's result differs from the yardstick's")


def check_close(got, want, what: str, rtol: float = 1e-9) -> None:
    """``AssertionError`` naming ``what`` unless the float arrays ``got`` and
    ``want`` agree to ``rtol`` of ``want``'s largest magnitude (a tensor
    train's contractions round differently from a NumPy loop's)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.allclose(got, want, rtol=0,
                                                  atol=rtol * np.abs(want).max()):
        raise AssertionError(f"{what}: the kernel's result differs from the yardstick's")
