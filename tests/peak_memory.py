"""Peak host memory of one call, as tracemalloc sees it (NumPy reports its
array allocations to tracemalloc; Numba's and CuPy's own do not count)."""
import gc
import tracemalloc


def peak_bytes(fn):
    """``(peak, result)``: the tracemalloc peak of ``fn()`` above what was
    allocated before it (after an untraced warm-up call that compiles)."""
    fn()
    gc.collect()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        base, _ = tracemalloc.get_traced_memory()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not tracing:
            tracemalloc.stop()
    return peak - base, result
