"""CuPy RawKernel launchers of the LogUp-GKR transitions (CUDA C in ``cuda/gkr.cu``).

Same launcher contract as :mod:`.gkr_cpu` (see its docstring); arrays are
contiguous CuPy arrays (row counts int32, ``prefix`` int64 ``(2, nb)``).
Every launcher checks its arguments first (:mod:`.launch_checks`: metadata
only, never the counts' values, which would need a device->host copy), and
launches asynchronously on CuPy's current stream and device (an array of
another device is refused): it returns before the GPU has finished.

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
* A dense pyramid (:func:`pyramid_dense`) runs fused: one launch of
  ``zorch_gkr_pyramid_dense`` writes up to ``GKR_MAX_FUSED`` layers, each
  block folding its tile through the layers in shared memory (see gkr.cu);
  the plan comes from :func:`~.launch_config.gkr_pyramid_plan`.  The output
  pointers of a launch travel by value in one ``zorch_gkr_layers`` struct (a
  NumPy structured scalar), so no host->device copy precedes a launch.
* The last transitions of a jagged pyramid (:func:`jagged_tail`), once every
  remaining layer has at most ``GKR_JAGGED_TAIL_SLOTS`` slots, run in one
  launch of one block (``zorch_gkr_jagged_tail``): per layer it scans the
  counts and folds every slot, writing each layer to its own buffer.  The
  per-layer counts pointers, output pointers and widths travel by value in
  one ``zorch_gkr_tail`` struct; nothing is read back to the host.
* Wide jagged steps of a pyramid run ``GKR_JAGGED_CHUNK`` at a time
  (:func:`jagged_chunk`): one scan launch of all their counts, then one
  launch (``zorch_gkr_jagged_chunk``) in which 4 lanes of a warp compute
  each slot of the third layer from its 8 leaves (one leaf pair per lane,
  combined with warp shuffles), so intermediate layers are written but never
  read back.
* Vector loads need 16-byte aligned arrays (CuPy allocations are 256-byte
  aligned); offset views fall back to the scalar variant.

Importing this module requires CuPy.
"""
import cupy
import numpy as np

from .cuda_source import assemble
from .field_cupy import NVRTC_OPTIONS
from .field_params import FIELDS
from .gkr_scalar import CUDA_NAME_EXPRESSIONS, cuda_kernel_name, output_mode
from .launch_checks import (check_device_arrays, check_gkr_fold, check_gkr_jagged,
                            check_gkr_pyramid, check_gkr_steps, layer_names)
from .launch_config import (GKR_JAGGED_CHUNK, GKR_MAX_FUSED, GKR_MAX_TAIL,
                            GKR_PYRAMID_THREADS, GKR_SCAN_THREADS, GKR_TAIL_THREADS,
                            THREADS_PER_BLOCK, gkr_pyramid_plan, grid_for)

__all__ = ["fold_dense", "pyramid_dense", "jagged_transition", "jagged_tail", "jagged_chunk",
           "fold_dense_trusted", "jagged_transition_trusted", "pyramid_dense_trusted",
           "pyramid_launch_trusted", "jagged_chunk_trusted", "jagged_tail_trusted"]


#: Host image of ``struct zorch_gkr_layers`` (GKR_MAX_FUSED x 4 pointers).
_LAYERS = np.dtype([("p", np.uint64, (GKR_MAX_FUSED * 4,))])
#: Host image of ``struct zorch_gkr_tail``: per layer the counts pointer, four
#: output pointers and the width (six 8-byte words, no padding).
_TAIL = np.dtype([("l", np.uint64, (GKR_MAX_TAIL, 6))])
#: Host image of ``struct zorch_gkr_chunk``: the counts pointers of the input
#: and the C output layers, the output pointers, the output widths, the input
#: width (8-byte words).
_CHUNK = np.dtype([("cnt", np.uint64, (GKR_JAGGED_CHUNK + 1,)),
                   ("p", np.uint64, (4 * GKR_JAGGED_CHUNK,)),
                   ("width", np.uint64, (GKR_JAGGED_CHUNK,)),
                   ("in_width", np.uint64)])


@cupy.memoize(for_each_device=True)
def gkr_module(field_name: str) -> "cupy.RawModule":
    """The compiled ``gkr.cu`` for one field on the current device (memoized)."""
    return cupy.RawModule(code=assemble(FIELDS[field_name], "gkr.cu"), options=NVRTC_OPTIONS,
                          name_expressions=CUDA_NAME_EXPRESSIONS)


@cupy.memoize(for_each_device=True)
def _function(field_name: str, kernel: str, mode=None, vec: bool = False):
    """A kernel of ``gkr.cu``: the template instance ``kernel<NE, DE, VEC>``
    when ``mode`` is given, else the plain ``kernel``.  Memoized, so a launch
    pays one dictionary lookup, not a name formatting."""
    name = kernel if mode is None else cuda_kernel_name(kernel, mode, vec)
    return gkr_module(field_name).get_function(name)


def _vec(arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


_NAMES = ("n0", "n1", "d0", "d1", "on0", "on1", "od0", "od1")


def _check_batches(where, rc):
    """The kernels take ``nb`` as an ``unsigned int``: more counts than that
    wrapped (NumPy 1.x) or raised an OverflowError naming nothing."""
    if rc.shape[0] > 0xFFFFFFFF:
        raise ValueError(f"{where}: argument `rc` holds {rc.shape[0]} counts; the CUDA "
                         f"kernels take nb <= 2**32 - 1 batch elements")


def _check_steps_on_device(where, rc, prefix, first, steps):
    _check_batches(where, rc)
    check_device_arrays(where, (("rc", rc), ("prefix", prefix)))
    check_device_arrays(where, ((f"steps[{l}][0]", orc) for l, (orc, _) in enumerate(steps)))
    check_device_arrays(where, layer_names(first, [outs for _, outs in steps],
                                            lambda l, i: f"steps[{l}][1][{i}]"))


def fold_dense(n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Dense transition: one launch over ``L / 2`` slots."""
    mode = check_gkr_fold("gkr_cupy.fold_dense", f, n0, n1, d0, d1, on0, on1, od0, od1)
    check_device_arrays("gkr_cupy.fold_dense", zip(_NAMES, (n0, n1, d0, d1, on0, on1, od0, od1)))
    fold_dense_trusted(mode, n0, n1, d0, d1, on0, on1, od0, od1, f)


def fold_dense_trusted(mode, n0, n1, d0, d1, on0, on1, od0, od1, f, aligned=None):
    """:func:`fold_dense` without its checks, given the input ``mode`` (see
    :func:`.gkr_cpu.fold_dense_trusted`; arguments outside the contract are
    undefined behaviour on the device).

    ``aligned``: whether all eight arrays start on 16-byte boundaries, where
    the caller knows (the object layer does: a layer's inputs are looked at
    once, its fresh outputs are its own), so the launch need not look (~1 us
    of a small transition's host time); ``None`` looks.  ``True`` for an
    array that is not is undefined behaviour (misaligned 16-byte accesses).
    """
    arrays = (n0, n1, d0, d1, on0, on1, od0, od1)
    half = on0.shape[0]
    fn = _function(f.name, "zorch_gkr_fold_dense", mode,
                   _vec(arrays) if aligned is None else aligned)
    fn((grid_for(half),), (THREADS_PER_BLOCK,), arrays + (np.uint64(half),))


def jagged_transition(rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """Jagged transition: device prefix sums, then one launch over the output slots."""
    mode = check_gkr_jagged("gkr_cupy.jagged_transition", f, rc, orc, prefix, n0, n1, d0, d1,
                            on0, on1, od0, od1)
    _check_batches("gkr_cupy.jagged_transition", rc)
    check_device_arrays("gkr_cupy.jagged_transition",
                        zip(("rc", "orc", "prefix") + _NAMES,
                            (rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1)))
    jagged_transition_trusted(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f)


def jagged_transition_trusted(mode, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1, f):
    """:func:`jagged_transition` without its checks, given the input ``mode``
    (see :func:`.gkr_cpu.fold_dense_trusted`)."""
    nb = np.uint32(rc.shape[0])
    scan = _function(f.name, "zorch_gkr_jagged_scan")
    scan((1,), (GKR_SCAN_THREADS,), (rc, orc, prefix, nb))
    arrays = (n0, n1, d0, d1, on0, on1, od0, od1)
    width = on0.shape[0]
    fn = _function(f.name, "zorch_gkr_jagged", mode, _vec(arrays))
    fn((grid_for(width),), (THREADS_PER_BLOCK,),
       (rc, orc, prefix, nb) + arrays + (np.uint64(width), np.uint64(n0.shape[0])))


def pyramid_dense(first, layers, f):
    """Fused dense pyramid: ``layers[l]`` = ``(on0, on1, od0, od1)`` of layer ``l + 1``.

    ``first`` holds the four input MLEs; every output buffer is preallocated
    by the caller (one per layer).  Bytes moved: the input layer of each
    launch once (the first layer, then layer ``11`` or ``9`` and so on, each
    2**11 / 2**9 times smaller), and every output layer once.  ``first`` has a
    power-of-two length ``L``, at most ``log2(L)`` layers, ``layers[l]``
    ``L >> (l + 1)`` elements each (see :func:`.gkr_cpu.pyramid_dense`).
    """
    mode, first, layers = check_gkr_pyramid("gkr_cupy.pyramid_dense", f, first, layers)
    check_device_arrays("gkr_cupy.pyramid_dense", layer_names(
        first, layers, lambda l, i: f"layers[{l}][{i}]"))
    pyramid_dense_trusted(mode, first, layers, f)


def pyramid_dense_trusted(mode, first, layers, f):
    """:func:`pyramid_dense` without its checks, given the input ``mode`` (see
    :func:`.gkr_cpu.fold_dense_trusted`): one :func:`pyramid_launch_trusted`
    per plan entry.  The object layer calls that per launch itself (its first
    layer was checked when built, it allocates the outputs and makes their
    views after each launch): the checks of a 2**26 pyramid (108 arrays'
    metadata and their overlap sort) took 160 of the checked launcher's 200
    us on the development machine, while the GPU waited for the first
    launch."""
    out_mode = output_mode(mode)
    src, half, start = tuple(first), first[0].shape[0] // 2, 0
    for t, k in gkr_pyramid_plan(half, len(layers), mode == 0):
        outs = layers[start:start + k]
        pyramid_launch_trusted(mode, src, t, [a.data.ptr for layer in outs for a in layer], f)
        src, half, start, mode = tuple(outs[-1]), half >> k, start + k, out_mode


def pyramid_launch_trusted(mode, src, tile, addresses, f):
    """One launch of :func:`pyramid_dense_trusted`, plan entry ``(tile, k)``
    (:func:`.launch_config.gkr_pyramid_plan`): ``src`` the four input MLEs
    (arrays, input ``mode``), ``addresses`` the device addresses of the ``k``
    output layers' MLEs, four per layer (``on0, on1, od0, od1``), layer by
    layer.  Addresses rather than arrays, so a caller can make its output
    views after the launch is queued, while the GPU runs; 16-byte aligned
    ones (with aligned inputs) get the vector loads and stores."""
    k = len(addresses) // 4
    ptrs = np.zeros(1, _LAYERS)
    ptrs["p"][0, :4 * k] = addresses
    vec = _vec(src) and not any(a % 16 for a in addresses)
    fn = _function(f.name, "zorch_gkr_pyramid_dense", mode, vec)
    fn((src[0].shape[0] // 2 // tile,), (GKR_PYRAMID_THREADS,),
       tuple(src) + (ptrs, np.uint32(tile), np.uint32(k)))


def jagged_tail(rc, prefix, first, steps, f):
    """Fused jagged tail: ``steps[l]`` = ``(orc, (on0, on1, od0, od1))`` of layer ``l + 1``.

    ``rc`` and ``first`` are the counts and MLEs of the input layer, every
    ``orc`` a device int32 array of ``nb`` counts, every output buffer
    preallocated (its width is its length).  ``prefix``: int64 scratch of
    ``2 nb``.  One launch per ``GKR_MAX_TAIL`` layers.  Checked as
    :func:`jagged_chunk` (any number of steps).
    """
    mode, first, steps = check_gkr_steps("gkr_cupy.jagged_tail", f, rc, prefix, first, steps,
                                         None, 2)
    _check_steps_on_device("gkr_cupy.jagged_tail", rc, prefix, first, steps)
    jagged_tail_trusted(mode, rc, prefix, first, steps, f)


def jagged_tail_trusted(mode, rc, prefix, first, steps, f):
    """:func:`jagged_tail` without its checks, given the input ``mode`` (see
    :func:`.gkr_cpu.fold_dense_trusted`)."""
    nb = np.uint32(rc.shape[0])
    out_mode = output_mode(mode)
    src = tuple(first)
    for start in range(0, len(steps), GKR_MAX_TAIL):
        chunk = steps[start:start + GKR_MAX_TAIL]
        desc = np.zeros(1, _TAIL)
        for l, (orc, outs) in enumerate(chunk):
            desc["l"][0, l] = [orc.data.ptr] + [a.data.ptr for a in outs] + [outs[0].shape[0]]
        vec = _vec(src + tuple(a for _, outs in chunk for a in outs))
        fn = _function(f.name, "zorch_gkr_jagged_tail", mode, vec)
        fn((1,), (GKR_TAIL_THREADS,),
           (rc, prefix, nb) + src + (np.uint64(src[0].shape[0]), desc, np.uint32(len(chunk))))
        rc, src, mode = chunk[-1][0], tuple(chunk[-1][1]), out_mode


def jagged_chunk(rc, prefix, first, steps, f):
    """``GKR_JAGGED_CHUNK`` jagged transitions in one fused launch (plus one scan).

    ``steps[l]`` = ``(orc, (on0, on1, od0, od1))`` of layer ``l + 1``;
    ``rc`` and ``first`` are the counts and MLEs of the input layer, every
    count array device int32 of ``nb``, every output buffer preallocated (its
    width is its length).  ``prefix``: int64 scratch of
    ``(GKR_JAGGED_CHUNK + 1) * nb``.  Inputs and outputs in the forms of
    :func:`.gkr_cpu.fold_dense` (outputs of each step of one width); no
    written array (outputs, ``prefix``) sharing memory with another argument.
    The counts' values are the caller's obligation (see
    :func:`.gkr_cpu.jagged_transition`): they are never read back.  Counts
    outside it give unspecified words, but every read and store is bounded
    by its layer's width (the input's travels in the descriptor), and the
    slots walked by the last output's width.
    """
    mode, first, steps = check_gkr_steps("gkr_cupy.jagged_chunk", f, rc, prefix, first, steps,
                                         GKR_JAGGED_CHUNK, GKR_JAGGED_CHUNK + 1)
    _check_steps_on_device("gkr_cupy.jagged_chunk", rc, prefix, first, steps)
    jagged_chunk_trusted(mode, rc, prefix, first, steps, f)


def jagged_chunk_trusted(mode, rc, prefix, first, steps, f):
    """:func:`jagged_chunk` without its checks, given the input ``mode`` (see
    :func:`.gkr_cpu.fold_dense_trusted`): the object layer's entry, whose
    steps were checked before the first launch (the checks of a chunk -- 21
    arrays' metadata and an overlap sort -- were the largest part of a 2**26
    jagged pyramid's host time)."""
    nb = np.uint32(rc.shape[0])
    desc = np.zeros(1, _CHUNK)
    desc["cnt"][0] = [rc.data.ptr] + [orc.data.ptr for orc, _ in steps]
    desc["p"][0] = [a.data.ptr for _, outs in steps for a in outs]
    widths = [outs[0].shape[0] for _, outs in steps]
    desc["width"][0] = widths
    desc["in_width"][0] = first[0].shape[0]
    scan = _function(f.name, "zorch_gkr_jagged_chunk_scan")
    scan((1,), (GKR_SCAN_THREADS,), (desc, prefix, nb))
    vec = _vec(tuple(first) + tuple(a for _, outs in steps for a in outs))
    items = max(widths)
    fn = _function(f.name, "zorch_gkr_jagged_chunk", mode, vec)
    fn((grid_for(items),), (THREADS_PER_BLOCK,),
       (desc, prefix, nb) + tuple(first) + (np.uint64(items),))
