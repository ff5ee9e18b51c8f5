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
