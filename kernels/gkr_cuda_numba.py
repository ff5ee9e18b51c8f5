"""Numba-CUDA kernels of the LogUp-GKR layer transitions (``@cuda.jit``).

Same launcher contract as :mod:`.gkr_cpu` (see its docstring), except
:func:`pyramid_dense`, whose output layers are each one flat buffer.  The slot
bodies are the ones of :mod:`.gkr_scalar`, compiled as device functions; the
kernels are grid-stride loops over output slots.  Arrays may be device arrays,
CuPy arrays (wrapped with ``sync=False``: no stream synchronization) or host
NumPy arrays (copied in, outputs copied back, on the launch's stream:
CuPy's current one beside CuPy arrays, see
:func:`.field_cuda_numba.stream_for`).  MLEs are passed as flat word
arrays; each kernel compiles once per mode (base/extension numerators and
denominators), never per field, length or schedule.

A dense pyramid runs fused (:func:`pyramid_dense`), as on the CuPy
backend: each block carries a tile of slots down through up to
``GKR_MAX_FUSED`` layers in shared memory and writes every layer once, with
the launch plan of :func:`~.launch_config.gkr_pyramid_plan` (3 launches for
2**26 leaves instead of 26).

A jagged pyramid's steps run ``GKR_JAGGED_CHUNK`` (3) at a time
(:func:`jagged_chunk`), as on the CuPy backend: thread ``q`` computes the
8-leaf subtree of slot ``q`` of the third layer depth first and stores
every node below it, so intermediate layers are never read back.  (The
CUDA C kernel splits each slot over 4 lanes of a warp for coalesced leaf
loads and combines them with shuffles; here one thread does it all.)

The jagged prefix sums are computed on the device by a one-block kernel when
the counts or ``prefix`` live there (no device->host synchronization), and on
the host when all of them are host arrays.  The checked launchers refuse a
CuPy array of another device than CuPy's current one, where the launch runs
(:func:`.launch_checks.check_current_device`).  Importing this module
requires numba-cuda (or ``NUMBA_ENABLE_CUDASIM=1``).

Every kernel is on Numba-CUDA's on-disk cache
(:data:`.field_cuda_numba.cached_kernel`), so a second process loads instead
of compiling; the per-mode kernels close over numbers only (see the chunk
kernel's device functions for why that matters).
"""
import numpy as np
from numba import cuda

from .field_cuda_numba import as_device, cached_kernel, copy_back, stream_for
from .field_params import kernel_words
from .monty import canonical
from .jit import made_once
from .gkr_scalar import (MODE_BB, MODE_BE, MODE_EB, frac_bb, frac_be, frac_eb, frac_ee,
                         make_node_functions, make_slot_functions, mle_words,
                         output_mode)
from .launch_checks import (check_count_values, check_current_device, check_gkr_fold,
                            check_gkr_jagged, check_gkr_pyramid_flat, check_gkr_steps,
                            layer_names)
from .launch_config import (GKR_JAGGED_CHUNK, GKR_MAX_FUSED, GKR_NUMBA_SCAN_THREADS,
                            GKR_PYRAMID_THREADS, GKR_TILE_SLOTS_BASE, GKR_TILE_SLOTS_EXT,
                            block_for, gkr_pyramid_plan, grid_for)

__all__ = ["fold_dense", "pyramid_dense", "jagged_transition", "jagged_chunk",
           "fold_dense_trusted", "jagged_transition_trusted", "jagged_chunk_trusted"]

_dense_slot, _jagged_slot, _find_segment = make_slot_functions(cuda.jit(device=True))
_fold_node, _ = make_node_functions(cuda.jit(device=True))


@made_once
def _kernels(mode):
    """``(dense, jagged)`` kernels of one mode, compiled on first use.

    ``mode`` is a closure constant, so each kernel holds only its own mode's
    arithmetic (and registers): four modes, four kernels per operation, never
    more (lengths, counts and fields are runtime arguments).
    """
    dw = 4 if mode & 1 else 1  # words per output denominator

    @cached_kernel
    def dense(n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for k in range(start, od0.shape[0] // dw, stride):
            _dense_slot(mode, np.uint64(k), n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm)

    @cached_kernel
    def jagged(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm, one):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        in_nodes = d0.shape[0] // dw  # (input denominators have the output's words)
        for q in range(start, od0.shape[0] // dw, stride):
            s = _find_segment(prefix, 1, q)
            _jagged_slot(mode, q, s, rc, orc, prefix, in_nodes, n0, n1, d0, d1, on0, on1, od0,
                         od1, p, mu, wm, one)

    return dense, jagged


@cached_kernel
def _prefix_kernel(rc, orc, prefix):
    # One block of GKR_NUMBA_SCAN_THREADS threads.  Thread t sums a contiguous
    # run of segments; thread 0 scans the per-thread totals in shared memory;
    # each thread then writes the inclusive prefix sums of its run.
    totals = cuda.shared.array((2, GKR_NUMBA_SCAN_THREADS), dtype=np.int64)
    t = cuda.threadIdx.x
    nb = rc.shape[0]
    per = (nb + GKR_NUMBA_SCAN_THREADS - 1) // GKR_NUMBA_SCAN_THREADS
    lo = min(nb, t * per)
    hi = min(nb, lo + per)
    a = np.int64(0)
    b = np.int64(0)
    for i in range(lo, hi):
        a += np.int64(rc[i])
        b += np.int64(orc[i])
    totals[0, t] = a
    totals[1, t] = b
    cuda.syncthreads()
    if t == 0:
        run_a = np.int64(0)
        run_b = np.int64(0)
        for u in range(GKR_NUMBA_SCAN_THREADS):  # exclusive scan of the totals
            ta = totals[0, u]
            tb = totals[1, u]
            totals[0, u] = run_a
            totals[1, u] = run_b
            run_a += ta
            run_b += tb
    cuda.syncthreads()
    a = totals[0, t]
    b = totals[1, t]
    for i in range(lo, hi):
        a += np.int64(rc[i])
        b += np.int64(orc[i])
        prefix[0, i] = a
        prefix[1, i] = b


#: The transitions' MLE arguments, as errors name them.
_NAMES = ("n0", "n1", "d0", "d1", "on0", "on1", "od0", "od1")


def _flat(x):
    """Extension ``(n, 4)`` -> its flat ``(4 n,)`` view (the kernels index words)."""
    return x.reshape(-1) if x.ndim == 2 else x




def _outputs(outs, stream):
    """Flat views of the outputs, and their device views (host ones copied
    in on ``stream``); :func:`.field_cuda_numba.copy_back` takes both."""
    flat = [_flat(o) for o in outs]
    return flat, [as_device(o, stream) for o in flat]


def _on_host(*arrays):
    """Whether the jagged counts and their ``prefix`` scratch are all host
    arrays: then the host scans them.  Else the device does, copying host
    counts in (a host ``np.cumsum`` cannot write a device ``prefix``)."""
    return all(isinstance(x, np.ndarray) for x in arrays)


def fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Dense transition on the GPU (see :func:`.gkr_cpu.fold_dense` for the contract)."""
    mode = check_gkr_fold("gkr_cuda_numba.fold_dense", f, n0, n1, d0, d1, on0, on1, od0, od1)
    check_current_device("gkr_cuda_numba.fold_dense",
                         zip(_NAMES, (n0, n1, d0, d1, on0, on1, od0, od1)))
    fold_dense_trusted(mode, n0, n1, d0, d1, on0, on1, od0, od1, f)


def fold_dense_trusted(mode, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """:func:`fold_dense` without its checks, given the input ``mode`` (see
    :func:`.gkr_cpu.fold_dense_trusted`)."""
    p, mu, wm, _ = kernel_words(f)
    kernel = _kernels(mode)[0]
    stream = stream_for(n0, n1, d0, d1, on0, on1, od0, od1)
    ins = [as_device(_flat(x), stream) for x in (n0, n1, d0, d1)]
    outs, d_outs = _outputs((on0, on1, od0, od1), stream)
    kernel[grid_for(on0.shape[0]), block_for(on0.shape[0]), stream](*ins, *d_outs, p, mu, wm)
    copy_back(outs, d_outs, stream)


def jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Jagged transition on the GPU (see :func:`.gkr_cpu.jagged_transition` for
    the contract).  Host counts -- ``rc`` or ``orc``, each that is a NumPy
    array, whatever the other is -- are refused where the CPU kernel's scan
    refuses them (a negative count, ``sum(rc)`` past the input: reads
    outside it); device counts are the caller's obligation (reading them
    would synchronize): outside it they give unspecified words, never an
    access outside the arrays."""
    where = "gkr_cuda_numba.jagged_transition"
    mode = check_gkr_jagged(where, f, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1)
    check_count_values(where, rc, n0.shape[0], [("orc", orc, on0.shape[0])])  # (host ones)
    check_current_device(where, zip(("rc", "orc", "prefix") + _NAMES,
                                    (rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1)))
    jagged_transition_trusted(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f)


def jagged_transition_trusted(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """:func:`jagged_transition` without its checks, given the input ``mode``
    (see :func:`.gkr_cpu.fold_dense_trusted`)."""
    p, mu, wm, one = kernel_words(f)
    kernel = _kernels(mode)[1]
    stream = stream_for(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1)
    host_scan = _on_host(rc, orc, prefix)
    if host_scan:
        np.cumsum(rc, dtype=np.int64, out=prefix[0])
        np.cumsum(orc, dtype=np.int64, out=prefix[1])
    d_rc, d_orc, d_prefix = (as_device(x, stream) for x in (rc, orc, prefix))
    if not host_scan:  # (host counts are copied in)
        _prefix_kernel[1, GKR_NUMBA_SCAN_THREADS, stream](d_rc, d_orc, d_prefix)
    ins = [as_device(_flat(x), stream) for x in (n0, n1, d0, d1)]
    outs, d_outs = _outputs((on0, on1, od0, od1), stream)
    kernel[grid_for(on0.shape[0]), block_for(on0.shape[0]), stream](
        d_rc, d_orc, d_prefix, *ins, *d_outs, p, mu, wm, one)
    # a host prefix scanned on the device holds the sums afterwards, as on
    # every backend: copied back with the outputs
    if not host_scan:
        outs, d_outs = outs + [prefix], d_outs + [d_prefix]
    copy_back(outs, d_outs, stream)


@cuda.jit(device=True)
def _mle_word(a, i, k, w, p):
    """Word ``k`` of element ``i`` of a flat MLE with ``w`` words per element,
    mod p (0 past ``w``)."""
    if k < w:
        return canonical(a[i * np.uint64(w) + np.uint64(k)], p)
    return np.uint32(0)


@cuda.jit(device=True)
def _tile_word(tile, base, i, k, w):
    """Word ``k`` of element ``i`` of the MLE at word ``base`` of a pyramid
    tile (``w`` words per element; 0 past ``w``).  The tile holds kernel
    outputs, canonical already."""
    if k < w:
        return tile[base + i * w + k]
    return np.uint32(0)


@cuda.jit(device=True)
def _fold_input(mode, in_nw, dw, n0, n1, d0, d1, e, p, mu, wm):
    """Fraction sum of input node ``e``, ``n0[e]/d0[e] + n1[e]/d1[e]``, as the
    8 words of :func:`_fold16` (flat MLEs, ``in_nw`` / ``dw`` words per
    numerator / denominator, read mod p)."""
    return _fold16(mode, _mle_word(n0, e, 0, in_nw, p), _mle_word(n0, e, 1, in_nw, p),
                   _mle_word(n0, e, 2, in_nw, p), _mle_word(n0, e, 3, in_nw, p),
                   _mle_word(n1, e, 0, in_nw, p), _mle_word(n1, e, 1, in_nw, p),
                   _mle_word(n1, e, 2, in_nw, p), _mle_word(n1, e, 3, in_nw, p),
                   _mle_word(d0, e, 0, dw, p), _mle_word(d0, e, 1, dw, p),
                   _mle_word(d0, e, 2, dw, p), _mle_word(d0, e, 3, dw, p),
                   _mle_word(d1, e, 0, dw, p), _mle_word(d1, e, 1, dw, p),
                   _mle_word(d1, e, 2, dw, p), _mle_word(d1, e, 3, dw, p), p, mu, wm)


@cuda.jit(device=True)
def _fold_tile(mode, nw, dw, tile, n0, n1, d0, d1, i, p, mu, wm):
    """:func:`_fold_input` for node ``i`` of MLEs held in a pyramid tile,
    starting at words ``n0, n1, d0, d1`` of it."""
    return _fold16(mode, _tile_word(tile, n0, i, 0, nw), _tile_word(tile, n0, i, 1, nw),
                   _tile_word(tile, n0, i, 2, nw), _tile_word(tile, n0, i, 3, nw),
                   _tile_word(tile, n1, i, 0, nw), _tile_word(tile, n1, i, 1, nw),
                   _tile_word(tile, n1, i, 2, nw), _tile_word(tile, n1, i, 3, nw),
                   _tile_word(tile, d0, i, 0, dw), _tile_word(tile, d0, i, 1, dw),
                   _tile_word(tile, d0, i, 2, dw), _tile_word(tile, d0, i, 3, dw),
                   _tile_word(tile, d1, i, 0, dw), _tile_word(tile, d1, i, 1, dw),
                   _tile_word(tile, d1, i, 2, dw), _tile_word(tile, d1, i, 3, dw), p, mu, wm)


@made_once
def _pyramid_kernel(mode):
    """Fused dense pyramid kernel for input ``mode`` (compiled on first use).

    The Numba twin of ``zorch_gkr_pyramid_dense`` (cuda/gkr.cu).  Block
    ``b`` owns slots ``[b t, (b + 1) t)`` of the first layer it writes; those
    slots, and the ``t / 2, t / 4, ...`` slots below them, depend on nothing
    outside the tile.  Step ``l`` (``cnt = t >> l`` slots) folds its source --
    the input MLEs at step 0, else the previous step's slots in shared
    memory -- and writes each result to shared memory and to layer ``l``'s
    global buffer.  So a launch reads its input layer once and writes each
    of its layers once.  Shared memory is double-buffered as in gkr.cu: side
    A holds ``t`` slots, side B ``t / 2``; even steps write A, odd steps B,
    and a ``syncthreads`` separates steps.  The tile is indexed directly
    (word offsets, no array slices), so NVVM keeps its accesses in the
    shared state space (LDS / STS); slices chosen per step compiled to
    generic loads and stores.

    ``outs`` is a tuple of ``GKR_MAX_FUSED`` flat layer buffers (the first
    ``nlayers`` are written); layer ``l`` holds ``h = gridDim * t >> l``
    slots as ``on0 | on1 | od0 | od1``, numerators extension unless the mode
    is base/base, denominators extension when the input's are.
    """
    out_mode = output_mode(mode)
    nw, dw = mle_words(out_mode)  # words per output numerator / denominator
    in_nw = mle_words(mode)[0]  # words per input numerator (denominators: dw)
    words = 2 * nw + 2 * dw  # words per slot
    cap = GKR_TILE_SLOTS_BASE if words == 4 else GKR_TILE_SLOTS_EXT
    smem_words = 3 * cap * words // 2

    @cached_kernel
    def pyramid(n0, n1, d0, d1, outs, tile_slots, nlayers, p, mu, wm):
        smem = cuda.shared.array(smem_words, dtype=np.uint32)
        tile = np.int64(cuda.blockIdx.x)
        t = np.int64(tile_slots)
        h = np.int64(cuda.gridDim.x) * t  # slots of the layer being written
        for l in range(nlayers):
            cnt = t >> l
            if l > 0:
                cuda.syncthreads()  # step l - 1 has written all of this step's source
            # this step writes side A (word 0, t slots) when l is even, B (word
            # t * words, t / 2 slots) when odd; it reads the other side
            dbase = 0 if l % 2 == 0 else t * words
            dcap = t if l % 2 == 0 else t // 2
            sbase = t * words if l % 2 == 0 else 0
            scap = t // 2 if l % 2 == 0 else t
            sd = sbase + 2 * scap * nw  # the source's first denominator MLE
            g = outs[l]
            for j in range(cuda.threadIdx.x, cnt, cuda.blockDim.x):
                k = np.uint64(tile * cnt + j)
                for c in range(2):  # child c of slot j: node 2 j + c of the source
                    if l == 0:
                        f = _fold_input(mode, in_nw, dw, n0, n1, d0, d1,
                                        np.uint64(2 * (tile * t + j) + c), p, mu, wm)
                    else:
                        f = _fold_tile(out_mode, nw, dw, smem, sbase, sbase + scap * nw, sd,
                                       sd + scap * dw, 2 * j + c, p, mu, wm)
                    # numerator c and denominator c of slot j: the tile, then layer l
                    for w in range(nw):
                        smem[dbase + (c * dcap + j) * nw + w] = f[w]
                        g[np.uint64((c * h) * nw) + k * np.uint64(nw) + np.uint64(w)] = f[w]
                    for w in range(dw):
                        smem[dbase + 2 * dcap * nw + (c * dcap + j) * dw + w] = f[4 + w]
                        g[np.uint64(2 * h * nw + c * h * dw) + k * np.uint64(dw)
                          + np.uint64(w)] = f[4 + w]
            h >>= 1

    return pyramid


def _layer_views(buf, slots, mode):
    """Flat ``(on0, on1, od0, od1)`` device views of a layer buffer in output ``mode``."""
    nw, dw = mle_words(mode)
    a, b = slots * nw, 2 * slots * nw
    return buf[0:a], buf[a:b], buf[b:b + slots * dw], buf[b + slots * dw:b + 2 * slots * dw]


def pyramid_dense(first, buffers, f):
    """Fused dense pyramid: ``buffers[l]`` receives layer ``l + 1``.

    ``first`` holds the four input MLEs; ``buffers[l]`` is a flat uint32
    array of ``on0 | on1 | od0 | od1`` of layer ``l + 1`` (numerators
    extension unless base/base, denominators extension when the input's are),
    preallocated by the caller: ``(L >> (l + 1)) * (2 nw + 2 dw)`` words
    (``nw``/``dw`` 4 for extension numerators/denominators, else 1) for a
    first layer of power-of-two length ``L``, at most ``log2(L)`` layers.
    Launches follow :func:`~.launch_config.gkr_pyramid_plan`; host buffers
    are copied back once at the end.
    """
    mode, first, buffers = check_gkr_pyramid_flat("gkr_cuda_numba.pyramid_dense", f, first,
                                                  buffers)
    check_current_device("gkr_cuda_numba.pyramid_dense", layer_names(
        first, [(b,) for b in buffers], lambda l, _: f"buffers[{l}]"))
    p, mu, wm, _ = kernel_words(f)
    out_mode = output_mode(mode)
    stream = stream_for(*first, *buffers)
    src = [as_device(_flat(x), stream) for x in first]
    flat, dev = [], []
    half, start = first[0].shape[0] // 2, 0
    for t, k in gkr_pyramid_plan(half, len(buffers), mode == MODE_BB):
        # Each launch's buffers are wrapped just before it: wrapping a CuPy
        # array (cuda.as_cuda_array) is host work per array, and the GPU
        # waits for the first launch (a 2**26 pyramid has 26 layers, its
        # first launch writes 11).
        views, wrapped = _outputs(buffers[start:start + k], stream)
        flat += views
        dev += wrapped
        # unused entries repeat a written buffer: never touched (l < k)
        outs = tuple(dev[start:start + k]) + (dev[start],) * (GKR_MAX_FUSED - k)
        _pyramid_kernel(mode)[half // t, GKR_PYRAMID_THREADS, stream](
            *src, outs, np.uint32(t), np.uint32(k), p, mu, wm)
        half >>= k
        start += k
        src = _layer_views(dev[start - 1], 2 * half, out_mode)  # the next launch's input
        mode = out_mode
    copy_back(flat, dev, stream)  # host buffers: their layers copied back once


# ---- fused jagged chunk (the twin of zorch_gkr_jagged_chunk in cuda/gkr.cu) ----

@cuda.jit(device=True)
def _fold16(mode, a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, e0, e1, e2, e3, p, mu, wm):
    """Fraction sum ``a/c + b/e`` in ``mode`` as 8 words ``(N_0..N_3, D_0..D_3)``.

    Operands are four words each (base values in the first); unused output
    words are 0.
    """
    z = np.uint32(0)
    if mode == MODE_BB:
        r = frac_bb(a0, b0, c0, e0, p, mu)
        return r[0], z, z, z, r[1], z, z, z
    if mode == MODE_BE:
        return frac_be(a0, b0, c0, c1, c2, c3, e0, e1, e2, e3, p, mu, wm)
    if mode == MODE_EB:
        r = frac_eb(a0, a1, a2, a3, b0, b1, b2, b3, c0, e0, p, mu)
        return r[0], r[1], r[2], r[3], r[4], z, z, z
    return frac_ee(a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, e0, e1, e2, e3, p, mu, wm)


@cached_kernel
def _chunk_scan_kernel(cnts, prefix):
    # One block; thread r < 4 scans count row r serially (nb is small next to
    # the layers, and this runs once per three transitions).
    r = cuda.threadIdx.x
    if r < len(cnts):
        acc = np.int64(0)
        row = cnts[r]
        for i in range(row.shape[0]):
            acc += np.int64(row[i])
            prefix[r, i] = acc


# The device functions of the fused chunk take the field modes and word counts
# as arguments: called with the kernel's closure constants, Numba types them
# as literals and compiles one specialisation per mode (branches and word
# loops folded away), while the kernel's closure holds only numbers -- so its
# on-disk cache key is the same in every process.  (Closures over device
# functions, as this kernel first had, pickle with a per-process UUID.)

# Counts outside the contract (device counts are never read on the host)
# must still not touch memory outside the layers -- Numba-CUDA checks no
# index, and wraps a negative one: a node outside [0, width) of its layer is
# read as neutral and not stored.  Within the contract every node is inside,
# so these tests change no byte.

@cuda.jit(device=True)
def _chunk_leaf(mode, in_nw, dw, cnts, prefix, s, i, n0, n1, d0, d1, p, mu, wm, one):
    """``F_0(i)``: the fold of input node ``i`` of segment ``s``, or neutral."""
    z = np.uint32(0)
    cnt = np.int64(cnts[0][s])
    e = prefix[0, s] - cnt + i
    if i >= cnt or e < 0 or e >= d0.shape[0] // dw:  # (input denominators: dw words)
        return z, z, z, z, one, z, z, z
    return _fold_input(mode, in_nw, dw, n0, n1, d0, d1, np.uint64(e), p, mu, wm)


@cuda.jit(device=True)
def _chunk_store(nw, dw, c0, c1, gn0, gn1, gd0, gd1, k):
    """Node ``(c0, c1)`` at slot ``k`` of a layer with ``nw`` / ``dw`` words
    per numerator / denominator."""
    for w in range(nw):
        gn0[k * np.uint64(nw) + np.uint64(w)] = c0[w]
        gn1[k * np.uint64(nw) + np.uint64(w)] = c1[w]
    for w in range(dw):
        gd0[k * np.uint64(dw) + np.uint64(w)] = c0[4 + w]
        gd1[k * np.uint64(dw) + np.uint64(w)] = c1[4 + w]


@cuda.jit(device=True)
def _chunk_stored(r, out_mode, nw, dw, c0, c1, cnt, i, s, prefix, outs, p, mu, wm):
    """Node ``i`` of output layer ``r`` holds ``(c0, c1)``: stored at its slot
    (``outs[4 (r - 1) ...]``), and its fraction sum ``F_r(i)`` returned."""
    k = prefix[r, s] - cnt + i
    if k >= 0 and k < outs[4 * r - 4].shape[0] // nw:
        _chunk_store(nw, dw, c0, c1, outs[4 * r - 4], outs[4 * r - 3], outs[4 * r - 2],
                     outs[4 * r - 1], np.uint64(k))
    return _fold16(out_mode, c0[0], c0[1], c0[2], c0[3], c1[0], c1[1], c1[2], c1[3],
                   c0[4], c0[5], c0[6], c0[7], c1[4], c1[5], c1[6], c1[7], p, mu, wm)


@cuda.jit(device=True)
def _chunk_value1(mode, out_mode, in_nw, nw, dw, cnts, prefix, s, i, n0, n1, d0, d1, outs,
                  p, mu, wm, one):
    """``F_1(i)`` (neutral past the layer's count), node ``i`` of layer 1 stored."""
    z = np.uint32(0)
    cnt = np.int64(cnts[1][s])
    if i >= cnt:
        return z, z, z, z, one, z, z, z
    c0 = _chunk_leaf(mode, in_nw, dw, cnts, prefix, s, 2 * i, n0, n1, d0, d1, p, mu, wm, one)
    c1 = _chunk_leaf(mode, in_nw, dw, cnts, prefix, s, 2 * i + 1, n0, n1, d0, d1, p, mu, wm,
                     one)
    return _chunk_stored(1, out_mode, nw, dw, c0, c1, cnt, i, s, prefix, outs, p, mu, wm)


@cuda.jit(device=True)
def _chunk_value2(mode, out_mode, in_nw, nw, dw, cnts, prefix, s, i, n0, n1, d0, d1, outs,
                  p, mu, wm, one):
    """``F_2(i)`` (neutral past the layer's count), nodes below it stored."""
    z = np.uint32(0)
    cnt = np.int64(cnts[2][s])
    if i >= cnt:
        return z, z, z, z, one, z, z, z
    c0 = _chunk_value1(mode, out_mode, in_nw, nw, dw, cnts, prefix, s, 2 * i, n0, n1, d0, d1,
                       outs, p, mu, wm, one)
    c1 = _chunk_value1(mode, out_mode, in_nw, nw, dw, cnts, prefix, s, 2 * i + 1, n0, n1, d0,
                       d1, outs, p, mu, wm, one)
    return _chunk_stored(2, out_mode, nw, dw, c0, c1, cnt, i, s, prefix, outs, p, mu, wm)


@cuda.jit(device=True)
def _chunk_dead_fill(nw, dw, outs, base, g):
    """Slot ``g`` of the layer ``outs[base:base + 4]`` is dead: 0/0."""
    z = np.uint32(0)
    dead = (z, z, z, z, z, z, z, z)
    _chunk_store(nw, dw, dead, dead, outs[base], outs[base + 1], outs[base + 2],
                 outs[base + 3], g)


@made_once
def _chunk_kernel(mode):
    """Fused jagged chunk kernel for input ``mode`` (compiled on first use).

    Thread item ``g``: zero-fills slot ``g`` of every output layer where it is
    dead, and when ``g`` is a live slot of layer 3 (position ``j`` of
    segment ``s``) computes its subtree depth first: ``F_l(i)`` is the
    fraction sum of node ``i`` of layer ``l`` of the segment when ``i`` is
    below the layer's count and the neutral fraction 0/1 otherwise; node
    ``i`` of layer ``l >= 1`` holds ``F_{l-1}(2i), F_{l-1}(2i+1)`` and is
    stored at its slot.  See ``zorch_gkr_jagged_chunk`` in cuda/gkr.cu for
    why this equals three jagged transitions byte for byte.
    """
    out_mode = output_mode(mode)
    nw, dw = mle_words(out_mode)  # words per output numerator / denominator
    in_nw = mle_words(mode)[0]

    @cached_kernel
    def chunk(cnts, prefix, n0, n1, d0, d1, outs, items, p, mu, wm, one):
        nb = prefix.shape[1]
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for g in range(start, items, stride):
            q = np.int64(g)
            gg = np.uint64(g)
            # dead slots of each output layer (its width is its numerator length)
            if q >= prefix[1, nb - 1] and q < outs[0].shape[0] // nw:
                _chunk_dead_fill(nw, dw, outs, 0, gg)
            if q >= prefix[2, nb - 1] and q < outs[4].shape[0] // nw:
                _chunk_dead_fill(nw, dw, outs, 4, gg)
            if q >= prefix[3, nb - 1] and q < outs[8].shape[0] // nw:
                _chunk_dead_fill(nw, dw, outs, 8, gg)
            if q < prefix[3, nb - 1] and q < outs[8].shape[0] // nw:
                s = _find_segment(prefix, 3, q)
                cnt = np.int64(cnts[3][s])
                j = q - (prefix[3, s] - cnt)
                c0 = _chunk_value2(mode, out_mode, in_nw, nw, dw, cnts, prefix, s, 2 * j,
                                   n0, n1, d0, d1, outs, p, mu, wm, one)
                c1 = _chunk_value2(mode, out_mode, in_nw, nw, dw, cnts, prefix, s, 2 * j + 1,
                                   n0, n1, d0, d1, outs, p, mu, wm, one)
                _chunk_store(nw, dw, c0, c1, outs[8], outs[9], outs[10], outs[11], gg)

    return chunk


def jagged_chunk(rc, prefix, first, steps, f):
    """``GKR_JAGGED_CHUNK`` jagged transitions in one fused launch (plus one scan).

    Same contract as :func:`.gkr_cupy.jagged_chunk`: ``steps[l]`` =
    ``(orc, (on0, on1, od0, od1))`` of layer ``l + 1``; ``prefix`` int64
    scratch of at least ``(GKR_JAGGED_CHUNK + 1) * nb``.  Host counts and
    ``prefix`` are scanned on the host; else a one-block kernel scans them
    on the device (no sync).  Host counts outside the schedule's contract
    are refused (:func:`.launch_checks.check_count_values`: a negative
    count, ``sum(rc)`` past the input, a step's ``orc[s] < ceil(c[s] / 2)``
    or ``sum(orc)`` past its width -- the fused kernel would write past an
    output or leave live slots unwritten); device counts are the caller's
    obligation, as on the CuPy backend, and likewise stay inside the arrays.
    """
    where = "gkr_cuda_numba.jagged_chunk"
    mode, first, steps = check_gkr_steps(where, f, rc, prefix, first, steps,
                                         GKR_JAGGED_CHUNK, GKR_JAGGED_CHUNK + 1)
    check_count_values(where, rc, first[0].shape[0],  # (the host counts among them)
                       [(f"steps[{l}][0]", orc, outs[0].shape[0])
                        for l, (orc, outs) in enumerate(steps)], fused=True)
    check_current_device(where, (
        ("rc", rc), ("prefix", prefix),
        *((f"steps[{l}][0]", orc) for l, (orc, _) in enumerate(steps)),
        *layer_names(first, [outs for _, outs in steps], lambda l, i: f"steps[{l}][1][{i}]")))
    jagged_chunk_trusted(mode, rc, prefix, first, steps, f)


def jagged_chunk_trusted(mode, rc, prefix, first, steps, f):
    """:func:`jagged_chunk` without its checks, given the input ``mode`` (see
    :func:`.gkr_cpu.fold_dense_trusted`)."""
    assert GKR_JAGGED_CHUNK == 3  # the kernel's depth is written out for 3
    p, mu, wm, one = kernel_words(f)
    nb = rc.shape[0]
    counts = [rc] + [orc for orc, _ in steps]
    stream = stream_for(prefix, *counts, *first, *(o for _, layer in steps for o in layer))
    rows = prefix.reshape(-1)[:(GKR_JAGGED_CHUNK + 1) * nb].reshape(GKR_JAGGED_CHUNK + 1, nb)
    host_scan = _on_host(prefix, *counts)
    if host_scan:
        for r, c in enumerate(counts):
            np.cumsum(c, dtype=np.int64, out=rows[r])
        d_rows = as_device(rows, stream)
        d_counts = tuple(as_device(c, stream) for c in counts)
    else:  # (as in jagged_transition_trusted)
        d_counts = tuple(as_device(c, stream) for c in counts)
        d_rows = as_device(rows, stream)
        _chunk_scan_kernel[1, 32, stream](d_counts, d_rows)
    outs, d_outs = _outputs([o for _, layer in steps for o in layer], stream)
    items = max(layer[0].shape[0] for _, layer in steps)
    _chunk_kernel(mode)[grid_for(items), block_for(items), stream](
        d_counts, d_rows, *(as_device(_flat(x), stream) for x in first), tuple(d_outs),
        np.int64(items), p, mu, wm, one)
    if not host_scan:  # (as in jagged_transition_trusted)
        outs, d_outs = outs + [rows], d_outs + [d_rows]
    copy_back(outs, d_outs, stream)
