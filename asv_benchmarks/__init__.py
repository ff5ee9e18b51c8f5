"""asv benchmarks of zorch_nb on the CPU (see README, "Benchmarks").

``peak_bytes(call)``: the peak bytes ``call()`` allocates on top of what
exists (tracemalloc), for the ``track_peak_bytes_*`` benchmarks.  asv's
``peakmem_*`` is the whole process's peak -- imports, Numba's compiler and
``setup``'s inputs (160-280 MB here) -- which a no-op body matched at every
size; this is the call's own figure.
"""
from zorch_nb._bench_gkr import traced_peak as peak_bytes

__all__ = ["peak_bytes"]
