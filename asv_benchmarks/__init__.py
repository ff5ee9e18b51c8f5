"""asv benchmarks of zorch_nb on the CPU (see README, "Benchmarks")."""
import tracemalloc


def peak_bytes(call) -> int:
    """Peak bytes that ``call()`` allocates on top of what exists (tracemalloc:
    NumPy's arrays included), for the ``track_peak_bytes_*`` benchmarks.

    asv's ``peakmem_*`` is the whole process's peak -- imports, Numba's
    compiler and ``setup``'s inputs (160-280 MB here) -- which a no-op body
    matched at every size; this is the call's own figure.
    """
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
