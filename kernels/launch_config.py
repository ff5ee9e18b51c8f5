"""Tunables of the kernel layer (one place for launch geometry)."""

#: Threads per block for the grid-stride elementwise GPU kernels.
THREADS_PER_BLOCK = 256
#: Upper bound on blocks of a grid-stride launch (enough to fill an H200:
#: 132 SMs x 16 resident blocks of 256 threads); more only adds scheduling.
MAX_BLOCKS = 132 * 16
#: Elements per chunk of the CPU batch inversion (Montgomery's trick runs
#: serially inside a chunk, chunks run in parallel).
BATCH_INV_CHUNK = 4096


def grid_for(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks for a grid-stride loop over ``n`` items (at least 1)."""
    return max(1, min(MAX_BLOCKS, (n + threads - 1) // threads))

# ---- LogUp-GKR (kernels/gkr_*.py, kernels/cuda/gkr.cu) ----------------------
#: Output slots per prange iteration of the CPU jagged transition (one binary
#: search per chunk, then a forward walk over the segments).
GKR_CPU_JAGGED_CHUNK = 2048
#: Threads of the single-block prefix-sum kernel of a jagged transition
#: (a multiple of 32; each thread sums a contiguous run of segments).
GKR_SCAN_THREADS = 1024
#: Threads of the single-block prefix-sum kernel of the Numba-CUDA backend.
GKR_NUMBA_SCAN_THREADS = 128
