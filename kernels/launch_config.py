"""Tunables of the kernel layer (one place for launch geometry)."""

#: Threads per block for the grid-stride elementwise GPU kernels.
THREADS_PER_BLOCK = 256
#: Upper bound on blocks of a grid-stride launch (enough to fill an H200:
#: 132 SMs x 16 resident blocks of 256 threads); more only adds scheduling.
MAX_BLOCKS = 132 * 16
#: Elements per chunk of the CPU batch inversion (Montgomery's trick runs
#: inside a chunk, chunks run in parallel).
BATCH_INV_CHUNK = 4096
#: Elements per task of the CPU zero scan (field_cpu.base_first_zero): each
#: task counts its zeros in a vectorized loop, and only the first chunk
#: with one is searched for its index.
ZERO_SCAN_CHUNK = 1 << 16
#: Elements one GPU thread inverts with one Fermat inversion (Montgomery's
#: trick in registers, base / extension): a Fermat inversion is ~60
#: Montgomery products, so inverting each element alone leaves the GPU
#: compute-bound many times over; a batch of k costs 3 products an element
#: plus 60 / k (the extension's norms: its ~25 products stay).
GPU_INV_BATCH_BASE = 8
GPU_INV_BATCH_EXT = 4
#: Chains of Montgomery's trick side by side in a chunk, one per vector lane
#: slot: element ``lo + t * BATCH_INV_LANES + c`` joins chain ``c``, so the
#: sweeps are loops over ``c`` that LLVM vectorizes (2**22 KoalaBear
#: inverses on 2 cores: 16 lanes 5.4 ms, 32 lanes 5.2, 64 lanes 5.4; the
#: four scalar chains before: 20 ms).
BATCH_INV_LANES = 32


def grid_for(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks for a grid-stride loop over ``n`` items (at least 1)."""
    return max(1, min(MAX_BLOCKS, (n + threads - 1) // threads))


def block_for(n: int) -> int:
    """Threads per block for a grid-stride loop over ``n`` items.

    ``THREADS_PER_BLOCK``, or for fewer items the whole warps that cover them
    (at least one).  One block either way, so a GPU runs it alike; but the
    CUDA simulator runs every thread as a Python thread, and a launch over 6
    items took ~7 ms with 32 threads against ~170 ms with 256 (2 cores).
    """
    return min(THREADS_PER_BLOCK, max(32, (n + 31) // 32 * 32))

#: Slots (elements) per call of a serial 64-bit-lane loop function from a
#: parallel CPU kernel (kernels/vector_width.py): long enough that the call
#: costs nothing, short enough to balance two to a few dozen threads.
CPU_LANE_RUN = 4096
#: Output words at or below which a CPU kernel runs on the calling thread
#: (kernels/cpu_threads.sized).  Measured on 2 cores (omp): a parallel
#: launch costs ~2.5 us; a serial base product of 8192 words 2.1 us, an add
#: 1.2 us; the parallel loop wins from ~16-32 Ki words.
CPU_SERIAL_WORDS = 8192
#: Elements per exact partial sum of the CPU field sums (kernels/field_cpu
#: sum_rows): each coefficient adds at most 2**14 words of < 2**32 in a
#: uint64 (< 2**46), then the running total is reduced mod p.  Short enough
#: that a row of the sum stays exact however long it is, long enough that
#: the reduction (a division) costs nothing beside the additions.
CPU_SUM_CHUNK = 1 << 14

#: A replayed graph call of at most this many node evaluations (padded
#: instances x IR nodes) runs its evaluator compiled without ``parallel``, on
#: the calling thread (kernels/graph_cpu.use_serial): a parallel launch costs
#: ~2.5 us quiet and up to milliseconds while another process holds a core
#: (figures in the README, "Small calls"), and 2**16 evaluations -- a
#: few Montgomery products each -- take tens of microseconds serially.  Each
#: evaluator is compiled in one of the two forms only: its layouts fix its
#: instance count.
GRAPH_CPU_SERIAL_WORK = 1 << 16
#: A replayed graph kernel of more lines of unrolled code than this (one per
#: IR node and per stored padded output slot, two per assertion) runs on the
#: CPU through the interpreter (kernels/graph_interp.py) instead of an
#: unrolled evaluator: an unrolled compile takes ~10 ms per node (1152 nodes
#: of additions: 13 s; products cost more: a 1553-node cube-and-mix
#: kernel, 21 s; stores and assertions too: 15 nodes storing 2048 slots,
#: 44 s; 117 nodes and 512 assertions, 9.2 s) and once
#: its live values outnumber the registers the code spills (1280 nodes mixing
#: 256 loaded values: 41 ms per run over 2**14 instances, interpreted 6.8 ms).
#: Kernels of additions ran 2-2.5x faster unrolled (2**14 instances, 2 cores:
#: 160 nodes 0.16 against 0.34 ms, 320 nodes 0.38 against 0.98 ms; 640
#: nodes, past this limit, 0.82 against 1.85 ms): below it their compile (up
#: to ~5 s, once per machine: Numba's disk cache) pays; past it the compile
#: grows long.
GRAPH_CPU_UNROLL_MAX_ROWS = 512
#: ... and so does one with at least this many Montgomery products per
#: memory access (loaded element or stored output element): the unrolled
#: code runs one instance at a time, a chain of dependent products at their
#: latency, while the interpreter runs each row over a block of instances in
#: vector lanes.  Measured on 2 cores, 2**18 instances, unrolled against
#: interpreted: a 3-node sum 0.068 against 0.80 ms, an 8-term dot product
#: (0.47 products per access) 0.74 against 2.4 ms, x**17 + y**5 on 4 lanes
#: (3 per access) 11.3 against 2.4 ms, one cube-and-mix round on 16 lanes
#: (1 per access) 22.9 against 7.1 ms.
GRAPH_CPU_INTERPRET_MULS_PER_ACCESS = 1
#: Instances per block of the interpreter: every row runs over a block.
GRAPH_CPU_BLOCK = 256
#: Most bytes of scratch one interpreter chunk holds (its ``(slots, block)``
#: values and the operands' bases): a kernel with more live values than
#: ``GRAPH_CPU_SCRATCH_BYTES / (4 * GRAPH_CPU_BLOCK)`` (4096) runs smaller
#: blocks instead.  A well-formed graph file of 100,000 values all live at
#: once took 100 MB per thread at full blocks, none of it counted by the
#: replay's up-front memory check (a helper's review); kernels of tens of
#: live values (a 176-node permutation: 40 KB) are unaffected.
GRAPH_CPU_SCRATCH_BYTES = 1 << 22

# ---- LogUp-GKR (kernels/gkr_*.py, kernels/cuda/gkr.cu) ----------------------
#: Output slots per prange iteration of the CPU jagged transition (one binary
#: search per chunk, then a forward walk over the segments).
GKR_CPU_JAGGED_CHUNK = 2048
#: A chunk whose segments average fewer live output slots than this
#: (base/base; with any extension MLE) folds its nodes in one run and then
#: moves them to their slots (gkr_cpu._make_chunk_short): a segment's own
#: vectorized run of a few pairs never reaches the vector loop.  Measured
#: crossovers (2**20 leaves, 2 cores): base/base 32 slots, ext/ext 64-128.
GKR_CPU_SHORT_SEGMENT = (32, 64)
#: Threads of the single-block prefix-sum kernel of a jagged transition
#: (a multiple of 32; each thread sums a contiguous run of segments).
GKR_SCAN_THREADS = 1024
#: Threads of the single-block prefix-sum kernel of the Numba-CUDA backend.
GKR_NUMBA_SCAN_THREADS = 128

# ---- fused dense pyramid (kernels/cuda/gkr.cu, zorch_gkr_pyramid_dense) -----
#: Most layers one fused launch writes (ZORCH_GKR_MAX_FUSED in gkr.cu; this
#: and the constants below reach gkr.cu through gkr_cuda_defines).
GKR_MAX_FUSED = 12
#: Slots per block tile of the first layer a fused launch writes: base/base
#: layers (4 words a slot) and layers with extension outputs (10 or 16 words).
#: gkr.cu's zorch_gkr_tile_shape<OE, DE>::slots (its static_assert bounds
#: the shared memory a tile takes).
GKR_TILE_SLOTS_BASE = 1024
GKR_TILE_SLOTS_EXT = 256
#: Threads per block of the fused pyramid kernel.
GKR_PYRAMID_THREADS = 256


def gkr_pyramid_plan(half: int, num_layers: int, base_outputs: bool) -> list:
    """Launches of a fused dense pyramid: ``[(tile_slots, layers), ...]``.

    ``half`` is the slot count of the first output layer (a power of two),
    ``num_layers`` the transitions left.  Each launch writes ``layers``
    layers with ``half / tile_slots`` blocks; a tile of ``t`` slots can fold
    at most ``log2(t) + 1`` layers.  The last launch of a deep pyramid runs
    in one block (its first layer has at most one tile of slots).
    """
    cap = GKR_TILE_SLOTS_BASE if base_outputs else GKR_TILE_SLOTS_EXT
    return _tile_plan(half, num_layers, cap, GKR_MAX_FUSED)


def _tile_plan(half, num_layers, cap, most):
    # Layer l of the launches has half >> l slots: more layers than that
    # halves would leave a launch of zero slots and zero layers, and this
    # loop would append such launches until memory ran out.  The launchers'
    # checks refuse those shapes first; this is the plan's own guard.
    if num_layers > 0 and (half < 1 or half >> (num_layers - 1) == 0):
        raise ValueError(f"a pyramid plan of {num_layers} layers needs a first output layer "
                         f"of at least 2**{num_layers - 1} slots, not {half}")
    plan = []
    while num_layers > 0:
        t = min(cap, half)
        k = min(num_layers, t.bit_length(), most)  # log2(t) + 1 for t = 2**j
        plan.append((t, k))
        num_layers -= k
        half >>= k
    return plan

# ---- fused dense pyramid on the CPU (kernels/gkr_cpu.py) --------------------
#: Layers one parallel CPU pyramid call writes: each thread carries its tile
#: of the call's first output layer down through them while it is still in
#: its core's cache (the kernel takes that many output layers as arguments).
GKR_CPU_PYRAMID_LEVELS = 4
#: Slots of the first output layer per CPU tile: base/base outputs (16 bytes a
#: slot) and extension outputs (40 or 64 bytes a slot); a tile, its input and
#: its later layers stay within one core's 1 MiB L2 cache.
GKR_CPU_TILE_SLOTS_BASE = 4096
GKR_CPU_TILE_SLOTS_EXT = 2048


def gkr_cpu_pyramid_plan(half: int, num_layers: int, base_outputs: bool) -> list:
    """Calls of a CPU dense pyramid: ``[(tile_slots, layers), ...]``, as
    :func:`gkr_pyramid_plan` with the CPU's tiles and ``GKR_CPU_PYRAMID_LEVELS``."""
    cap = GKR_CPU_TILE_SLOTS_BASE if base_outputs else GKR_CPU_TILE_SLOTS_EXT
    return _tile_plan(half, num_layers, cap, GKR_CPU_PYRAMID_LEVELS)

# ---- fused jagged tail (kernels/cuda/gkr.cu, zorch_gkr_jagged_tail) --------
#: A jagged pyramid's last transitions run in one one-block launch once every
#: remaining output layer has at most this many slots: such a layer cannot
#: fill the GPU, so its two launches (scan + slots) cost more than its work.
GKR_JAGGED_TAIL_SLOTS = 4096
#: Most layers one tail launch writes (ZORCH_GKR_MAX_TAIL in gkr.cu; the
#: per-layer struct is 48 bytes, so 32 layers pass 1.5 KB by value).
GKR_MAX_TAIL = 32
#: Threads of the tail's single block (ZORCH_GKR_TAIL_THREADS, its
#: __launch_bounds__: at most 128 registers a thread).
GKR_TAIL_THREADS = 512


def gkr_jagged_tail_start(widths) -> int:
    """First step of a jagged schedule that the fused tail runs.

    ``widths`` are the output widths of the steps.  The tail is the longest
    suffix of steps whose outputs all have at most ``GKR_JAGGED_TAIL_SLOTS``
    slots (``len(widths)`` when the last step is wider).
    """
    start = len(widths)
    while start > 0 and widths[start - 1] <= GKR_JAGGED_TAIL_SLOTS:
        start -= 1
    return start

# ---- fused jagged chunk (kernels/cuda/gkr.cu, zorch_gkr_jagged_chunk) ------
#: Transitions one fused jagged launch writes (ZORCH_GKR_CHUNK in gkr.cu):
#: a slot of the last layer is computed from its 2**C leaves (CUDA C: by
#: 2**(C-1) lanes of a warp; Numba-CUDA: by one thread), so a launch reads
#: its input layer once and writes each layer once.  With
#: C = 3 a wide jagged pyramid moves the compulsory bytes plus the input of
#: every third layer (2^26 base/ext leaves: ~7.1 of 6.5 GiB compulsory, vs
#: 10.5 GiB one transition per launch).
GKR_JAGGED_CHUNK = 3


def gkr_jagged_plan(widths, tail: bool = True) -> tuple:
    """Launch plan of a fused jagged pyramid on the GPU: ``(chunked, tail_start)``.

    ``widths`` are the output widths of the steps.  Steps ``[0, chunked)``
    run ``GKR_JAGGED_CHUNK`` per fused launch (plus one scan launch each),
    steps ``[chunked, tail_start)`` one transition per launch pair (the
    fewer than ``GKR_JAGGED_CHUNK`` narrowest wide steps), and steps
    ``[tail_start, len(widths))`` in the one-block tail.  ``tail=False``
    (a backend without the tail kernel: Numba-CUDA) chunks every step it can.
    """
    start = gkr_jagged_tail_start(widths) if tail else len(widths)
    return start - start % GKR_JAGGED_CHUNK, start


def gkr_jagged_launches(widths, tail: bool = True) -> int:
    """Kernel launches of the fused jagged pyramid of :func:`gkr_jagged_plan`."""
    chunked, start = gkr_jagged_plan(widths, tail)
    tail = len(widths) - start
    return 2 * (chunked // GKR_JAGGED_CHUNK) + 2 * (start - chunked) + -(-tail // GKR_MAX_TAIL)

# ---- uniform Tucker tensor trains (zorch_nb/tt_ops.py) ---------------------
#: Estimated multiply-adds of a tensor-train kernel call (to_dense, inner,
#: chain: stack size x per-element count at the padded n, r, N) at or below
#: which it runs on the calling thread; above, the stack is split into one
#: range per thread of a lazily created pool (zorch_nb/tt_ops._run_stack).
#: Measured on 2 cores (d = 4, N = 8, n = 8, r = 4; serial/2 threads, medians
#: of alternating runs while the second core was idle): a hand-off costs
#: ~0.05-0.1 ms; to_dense (~79 K madds per train) breaks even at S = 32
#: (2.5 M; 0.27/0.27 ms), S = 64 0.57/0.46 ms, S = 1024 12.5/7.8 ms; inner
#: (~10 K per train) and entries with 16 queries (~10.5 K) break even at
#: S = 96 (1 M; inner 0.28/0.27 ms), inner S = 384 1.10/0.75 ms, S = 1024
#: 2.9/1.7 ms.  At 4 Mi every kernel starts >= 15-20% faster, and while
#: another process holds the second core (no gain: all ranges share one
#: core) a split call loses ~0.05-0.1 ms: under 10% from ~0.7 ms up.
TT_CPU_SERIAL_WORK = 1 << 22

#: NumPy SVD, orthogonalizations and norm("orthogonal") of trains
#: (zorch_nb/tt_ops._by_chunks): a stack whose core slabs (one TT core of
#: every stack element) pass this many bytes is computed in chunks of stack
#: elements within it (an even number of equal ones), split over the
#: threads, so that the sweeps' temporaries stay in the heap and the
#: caches.  Measured on 2 cores (d = 8,
#: N = 32; fresh processes, three each, best of 7 calls; whole stack /
#: chunks of 2 MiB / 1 MiB / 512 KiB, in ms): a sum of trains padded to
#: n = 16, r = 32 (128 KiB a core), 16 trains 121-141 / 127-133 / 132-140 /
#: 103-114, 64 trains 661-785 / 457-487 / 361-387 / 333-361; trains padded
#: to n = 8, r = 16 (16 KiB), 64 trains 80-89 / 71-80 / 79-80 / 94-122,
#: 256 trains 329-392 / 305-353 / 274-288 / 259-293 (a chunk pays the steps'
#: Python overhead again: 3.5 ms for one train of the second kind).
TT_CPU_CHUNK_BYTES = 1 << 20

#: The same ops: a stack within one chunk whose SVD work (tt_ops._svd_work
#: of every core's left unfolding, summed; TT_CPU_SERIAL_WORK's units) is
#: at least this is computed as two chunks, its halves, so that two threads
#: share its steps' NumPy and BLAS work, not only its LAPACK batches.  Two
#: whatever the thread count: chunks decide the bits, threads must not.
#: Measured on 2 cores (d = 8, N = 32; ms, svd / orthogonalize("left") /
#: norm("orthogonal"), best of 7, alternating runs): trains padded to
#: n = 8, r = 16, 8 trains (21 M) 12.2-12.6 / 6.6-6.7 / 7.5-7.9 against
#: 12.1-14.3 / 4.2-5.2 / 5.0-5.9 as halves (so left whole), 12 trains
#: (31 M) 17.9-18.5 / 9.8-10.7 / 11.0-11.5 -> 13.3-14.2 / 5.1-6.7 / 6.4-8.0,
#: 16 trains (42 M) 22.0-22.8 -> 15.2-16.4 (svd), 64 trains 59.8-61.1 ->
#: 42.6-42.8; a sum padded to n = 16, r = 32, 8 trains 50.6-51.9 /
#: 30.5-31.4 / 32.5-37.1 -> 33.4-33.8 / 17.3-17.7 / 17.4-17.5.  With one
#: thread the halves cost their second chunk's Python steps: svd of 12
#: plain trains 17.4-18.2 -> 20.2-21.1, of 64 76-77 -> 83-86, while
#: norm("orthogonal") runs faster (benchmarks/results/cpu-2026-12-07-tt-halves.json).
TT_CPU_SPLIT_WORK = 3 << 23


# ---- graph commitments (kernels/merkle_*.py, kernels/cuda/merkle.cu) ---------
#: A host buffer of at most this many words is hashed on the calling thread
#: (the serial twin): as a replay's small calls, its commitments then start
#: no threading layer (so they run in a process forked after one started);
#: 2**16 words take ~3.5 ms on one thread.
MERKLE_CPU_SERIAL_WORDS = 1 << 16
#: Leaves per thread block (a subtree each) of the GPU Merkle kernel.
MERKLE_GPU_SUBTREE_LEAVES = 256


def gkr_cuda_defines() -> str:
    """The constants above that ``kernels/cuda/gkr.cu`` (and ``merkle.cu``,
    ``field_ops.cu``) are built with, as the ``#define``s of its preamble
    (``cuda_source.assemble``): one home for them, so the Python launch plans
    and the kernels cannot disagree."""
    return (f"#define ZORCH_GKR_MAX_FUSED {GKR_MAX_FUSED}\n"
            f"#define ZORCH_GKR_TILE_SLOTS_BASE {GKR_TILE_SLOTS_BASE}u\n"
            f"#define ZORCH_GKR_TILE_SLOTS_EXT {GKR_TILE_SLOTS_EXT}u\n"
            f"#define ZORCH_GKR_MAX_TAIL {GKR_MAX_TAIL}\n"
            f"#define ZORCH_GKR_TAIL_THREADS {GKR_TAIL_THREADS}\n"
            f"#define ZORCH_GKR_CHUNK {GKR_JAGGED_CHUNK}\n"
            f"#define ZORCH_MERKLE_LEAVES {MERKLE_GPU_SUBTREE_LEAVES}\n"
            f"#define ZORCH_INV_BATCH_BASE {GPU_INV_BATCH_BASE}\n"
            f"#define ZORCH_INV_BATCH_EXT {GPU_INV_BATCH_EXT}\n")
