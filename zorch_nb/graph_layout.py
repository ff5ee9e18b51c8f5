"""Deferred layouts of the graph recorder: views, split points, padding, commitments.

Vocabulary
----------
* A **buffer** is a flat vector of ``N`` field elements.  Its layout is a
  sorted set of **split points** ``1 = s_0 < s_1 < ... < s_k = N`` where each
  divides the next: split point ``s`` cuts the vector into ``s`` equal
  blocks, so ``[1, 3, 15]`` is a ``[3, 5]`` buffer.  The buffer's dimensions
  are the ratios ``s_i / s_(i-1)`` (outer first); each is padded to a power of
  two by repeating its last element/row.
* A **view** (:class:`ViewForm`) is what a handle sees: the buffer read as a
  row-major ``base`` shape, its axes permuted by ``perm``, and consecutive
  permuted axes grouped into the view's axes.  Reshapes refine ``base``;
  transposes permute; a reshape of a transposed view that would need a copy
  leaves the view *irregular* (fine for host copies, refused in a kernel call).
* An **operand layout** places one kernel operand in a padded buffer (see
  :mod:`zorch_nb.kernels.graph_codegen`).
"""
from __future__ import annotations

import hashlib
import math
import struct
from typing import NamedTuple

import numpy as np

from ._ints import is_int

__all__ = ["ViewForm", "initial_view", "reshape_view", "transpose_view", "parallel_sizes",
           "prefix_points", "merge_points", "dims_of", "padded_dims", "padded_strides",
           "axis_dims", "input_layout", "output_layout", "pad", "unpad", "apply_history",
           "history_shapes", "unapply_history", "merkle_root", "pow2", "logical_instance"]


def pow2(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``)."""
    _check_count(n, "n")
    return 1 << (int(n) - 1).bit_length()


def _check_count(v, name, least=1):
    """Refuse ``v`` unless it is an integer ``>= least`` (a bool, a float or a
    time span was truncated into a size: ``pow2(4.5)`` was 4)."""
    if not is_int(v):
        raise TypeError(f"Argument `{name}` must be an integer, not {type(v).__name__}")
    if v < least:
        raise ValueError(f"Argument `{name}` must be at least {least}, not {v}")


_PLAIN_INT = {int}


def _check_shape(shape, name="shape"):
    """A tuple of the positive integer sizes ``shape`` holds (a layout has no
    empty axis: a 0 made split points that divide by zero)."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"Argument `{name}` must be a sequence of sizes, not "
                        f"{type(shape).__name__}") from None
    # The recorder checks its own shapes and points on every propagation step
    # (a third of recording a call went here): plain positive ints, the usual
    # case, pass without naming each element.
    if not dims or set(map(type, dims)) == _PLAIN_INT and min(dims) >= 1:
        return dims
    for k, d in enumerate(dims):
        _check_count(d, f"{name}[{k}]")
    return tuple(int(d) for d in dims)


def _check_points(points, name="points"):
    """A list of the split points ``points``: ``1 = s_0 < s_1 < ...``, each
    dividing the next (the module docstring's chain)."""
    pts = list(_check_shape(points, name))
    if not pts or pts[0] != 1:
        raise ValueError(f"Argument `{name}` must be a chain of split points starting at 1, "
                         f"not {pts}")
    for lo, hi in zip(pts, pts[1:]):
        if hi <= lo or hi % lo:
            raise ValueError(f"Argument `{name}` must be a chain of split points, each a "
                             f"larger multiple of the one before, not {pts}")
    return pts


def prefix_points(shape) -> list:
    """Split points of a row-major shape: ``[1, d0, d0 d1, ...]`` without repeats."""
    return _prefix_points(_check_shape(shape))


def merge_points(a, b):
    """Sorted union of two split-point sets, or ``None`` if it is not a divisibility chain."""
    return _union_chain(_check_shape(a, "a"), _check_shape(b, "b"))


# The two above without the argument checks, for the recorder's own shapes and
# points (checked when they were made): recording a call ran ~14 checks.
def _prefix_points(dims) -> list:
    pts = [1]
    for d in dims:
        if d != 1:
            pts.append(pts[-1] * d)
    return pts


def _merge_points(a, b):
    # (a and b are chains: sorted, no repeats)
    if a == b:  # the common case: a view that agrees with its buffer's layout
        return list(a)
    return _union_chain(a, b)


def _union_chain(a, b):
    pts = sorted(set(a) | set(b))
    for lo, hi in zip(pts, pts[1:]):
        if hi % lo:
            return None
    return pts


class ViewForm(NamedTuple):
    """How a handle sees its buffer (see the module docstring).

    ``base`` has no axis of length 1; ``groups[k]`` is the number of permuted
    base axes that form view axis ``k`` (0 for a view axis of length 1);
    ``irregular`` is ``""`` or the reason the view cannot be used in a kernel.
    """

    base: tuple
    perm: tuple
    groups: tuple
    irregular: str = ""


def _groups_for(pshape, shape):
    """Group sizes that turn the permuted base ``pshape`` into ``shape`` (or None)."""
    groups = []
    j = 0
    for d in shape:
        g = 0
        prod = 1
        while prod < d and j < len(pshape):
            prod *= pshape[j]
            j += 1
            g += 1
        if prod != d:
            return None
        groups.append(g)
    return tuple(groups) if j == len(pshape) else None


def initial_view(shape) -> ViewForm:
    """View of a fresh buffer created with row-major ``shape``."""
    shape = _check_shape(shape)
    base = tuple(d for d in shape if d != 1)
    return ViewForm(base, tuple(range(len(base))), _groups_for(base, shape))


def reshape_view(v: ViewForm, old_shape, new_shape) -> ViewForm:
    """The view after ``reshape(new_shape)`` (element counts already checked)."""
    if v.irregular:
        return v
    if v.perm == tuple(range(len(v.perm))):
        return initial_view(new_shape)
    base, perm = list(v.base), list(v.perm)
    pts = merge_points(prefix_points([base[a] for a in perm]), prefix_points(new_shape))
    if pts is None:
        # Base axes that stay adjacent and in order under the permutation are
        # one strided axis (as NumPy merges them): without their inner
        # boundaries the reshape may need no copy ([2, 3, 2] transposed to
        # (2, 0, 1), then reshaped to [2, 3, 2]).  Only here, where the plain
        # split fails: a view that splits as it is keeps its split points.
        base, perm = _merge_adjacent(base, perm)
        pts = merge_points(prefix_points([base[a] for a in perm]), prefix_points(new_shape))
    if pts is None:
        return ViewForm(v.base, v.perm, v.groups,
                        f"reshaping the transposed view {list(old_shape)} into "
                        f"{list(new_shape)} would need a copy")
    # Split permuted axes wherever the new shape has a boundary inside one.
    cum = 1
    j = 0
    for u in pts[1:]:
        while j < len(perm) and cum < u and cum * base[perm[j]] <= u:
            cum *= base[perm[j]]
            j += 1
        if cum == u:
            continue
        a = perm[j]  # base axis a holds the boundary u: split it (outer, inner)
        outer = u // cum
        inner = base[a] // outer
        base[a:a + 1] = [outer, inner]
        perm = [q + 1 if q > a else q for q in perm]
        perm[j:j + 1] = [a, a + 1]
        cum = u
        j += 1
    pshape = [base[a] for a in perm]
    return ViewForm(tuple(base), tuple(perm), _groups_for(pshape, tuple(new_shape)))


def _merge_adjacent(base, perm):
    """``(base, perm)`` with every run of base axes ``a, a + 1, ...`` that
    follow each other in ``perm`` merged into one axis (the same reading of
    the buffer, with fewer boundaries)."""
    runs = []  # runs of perm, each a list of consecutive base axes
    for a in perm:
        if runs and runs[-1][-1] + 1 == a:
            runs[-1].append(a)
        else:
            runs.append([a])
    order = sorted(range(len(runs)), key=lambda r: runs[r][0])  # runs in base order
    new_base = [int(np.prod([base[a] for a in runs[r]])) for r in order]
    rank = {r: i for i, r in enumerate(order)}
    return new_base, [rank[r] for r in range(len(runs))]


def transpose_view(v: ViewForm, axes) -> ViewForm:
    """The view after ``transpose(axes)`` (``axes`` already validated)."""
    if v.irregular:
        return v
    starts = np.concatenate([[0], np.cumsum(v.groups, dtype=np.int64)]).astype(int)
    perm = []
    for k in axes:
        perm.extend(v.perm[starts[k]:starts[k + 1]])
    return ViewForm(v.base, tuple(perm), tuple(v.groups[k] for k in axes))


def view_of_history(history) -> ViewForm:
    """The view that the shape ``history`` of a handle makes of its buffer.

    ``history[0]`` is ``("reshape", buffer's shape)``; each later step is taken
    by :func:`reshape_view` / :func:`transpose_view`.  A handle's history is
    folded (a reshape of a reshape is one reshape), so a view whose steps
    passed through a reshape needing a copy and came back to a view that
    needs none is judged by where it is, not by the way it came.
    """
    (_, shape), *rest = history
    v = initial_view(shape)
    for op, arg in rest:
        if op == "reshape":
            v = reshape_view(v, shape, arg)
            shape = arg
        else:
            v = transpose_view(v, arg)
            shape = tuple(shape[a] for a in arg)
    return v


def _steps(history):
    """The ``(op, arg)`` steps of ``history``, each op checked (a misspelt
    "tranpose" was taken for a transpose)."""
    try:
        steps = [tuple(step) for step in history]
    except TypeError:
        raise TypeError("Argument `history` must be a sequence of (op, arg) steps") from None
    for k, step in enumerate(steps):
        if len(step) != 2 or not isinstance(step[0], str) or \
                step[0] not in ("reshape", "transpose"):
            raise ValueError(f"Argument `history`: step {k} must be (\"reshape\", shape) or "
                             f"(\"transpose\", axes), not {step!r}")
    return steps


def apply_history(arr, history):
    """Apply a recorded shape history (``("reshape", shape)`` / ``("transpose",
    axes)``) to the flat logical array ``arr`` of a buffer."""
    for op, arg in _steps(history):
        arr = arr.reshape(arg) if op == "reshape" else arr.transpose(arg)
    return arr


def history_shapes(n: int, history) -> list:
    """Shapes of a buffer of ``n`` elements before and after each history step.

    ``[(n,), shape after step 0, ...]``; the last is the view's shape.  Each
    step is taken as :func:`apply_history` takes it (a ``-1`` size, negative
    axes), on an array of ``n`` zero-stride elements (no memory), so a step
    NumPy refuses is refused here, naming it.
    """
    _check_count(n, "n", 0)
    arr = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), (int(n),), (0,),
                                          writeable=False)
    shapes = [arr.shape]
    for k, (op, arg) in enumerate(_steps(history)):
        try:
            arr = arr.reshape(arg) if op == "reshape" else arr.transpose(arg)
        except (TypeError, ValueError) as exc:  # (NumPy's AxisError is a ValueError)
            raise ValueError(f"Argument `history`: step {k}, {op} {arg!r}, does not apply to "
                             f"shape {shapes[-1]}: {exc}") from None
        shapes.append(arr.shape)
    return shapes


def unapply_history(view, history, n: int):
    """The flat logical array (``n`` elements) whose view through ``history`` is ``view``.

    The inverse of :func:`apply_history`, step by step in reverse (a transpose
    undone by the inverse permutation, a reshape by the shape before it), so
    no index array is built: at most the one copy that a non-contiguous final
    reshape needs.
    """
    shapes = history_shapes(n, history)
    if tuple(view.shape) != shapes[-1]:
        raise ValueError(f"Argument `view` must have the shape {shapes[-1]} the history "
                         f"gives, not {tuple(view.shape)}")
    for (op, arg), before in zip(reversed(_steps(history)), reversed(shapes[:-1])):
        if op == "reshape":
            view = view.reshape(before)
        else:  # the axes as apply_history's transpose read them (None, negatives)
            nd = len(before)
            axes = range(nd)[::-1] if arg is None else \
                [int(a) % nd for a in (arg if np.ndim(arg) else (arg,))]
            view = view.transpose(np.argsort(axes))
    return view.reshape(n)


# ------------------------------------------------------------- layouts -------

def dims_of(points) -> tuple:
    """Buffer dimensions (outer first) of a split-point chain."""
    points = _check_points(points)
    return tuple(hi // lo for lo, hi in zip(points, points[1:]))


def padded_dims(dims) -> tuple:
    """Each dimension padded to a power of two (the padded buffer's shape)."""
    return tuple(pow2(d) for d in dims)


def padded_strides(dims) -> tuple:
    """Row-major strides of the padded dimensions."""
    pd = padded_dims(dims)
    st = [1] * len(pd)
    for i in range(len(pd) - 2, -1, -1):
        st[i] = st[i + 1] * pd[i + 1]
    return tuple(st)


def axis_dims(v: ViewForm, points) -> list:
    """For each view axis, the buffer dimensions it spans (indices, outer first).

    Every prefix point of ``v.base`` must be one of ``points``.
    """
    pos = {s: i for i, s in enumerate(_check_points(points))}
    base_dims = []
    cum = 1
    for b in v.base:
        if cum not in pos or cum * b not in pos:  # (was a bare KeyError)
            raise ValueError(f"Argument `points` {list(pos)} must hold every split point of "
                             f"the view's shape {list(v.base)} (row-major), and lacks "
                             f"{cum if cum not in pos else cum * b}")
        lo, hi = pos[cum], pos[cum * b]
        base_dims.append(list(range(lo, hi)))
        cum *= b
    out = []
    j = 0
    for g in v.groups:
        ds = []
        for a in v.perm[j:j + g]:
            ds.extend(base_dims[a])
        out.append(ds)
        j += g
    return out


def _element_offsets(ax_dims, shape, dims, strides):
    """Padded offset (relative to the instance) of every element of ``shape``."""
    offs = np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    grid = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), int)
    for k, ds in enumerate(ax_dims):
        j = grid[k].astype(np.int64)
        for i in reversed(ds):
            offs += (j % dims[i]) * strides[i]
            j //= dims[i]
    return offs


def input_layout(v: ViewForm, points, broadcast: bool, shape):
    """``(par, offsets)`` of an input operand whose param shape is ``shape``."""
    dims = dims_of(points)
    strides = padded_strides(dims)
    ax = axis_dims(v, points)
    par = () if broadcast else tuple((pow2(dims[i]).bit_length() - 1, strides[i])
                                     for i in ax[0])
    inner = ax if broadcast else ax[1:]
    offs = _element_offsets(inner, tuple(shape), dims, strides)
    return par, tuple(int(o) for o in offs)


def _first_axis_dims(v: ViewForm, points) -> tuple:
    """``(dims_of(points), axis_dims(v, points)[0])`` for the recorder's own
    views and points, without the checks (the recorder propagates splits
    through every call its layouts reach, and these checks were a third of
    that); a view that does not fit ``points`` goes to :func:`axis_dims`,
    which names what is missing."""
    pos = {s: i for i, s in enumerate(points)}
    dims = tuple(hi // lo for lo, hi in zip(points, points[1:]))
    try:
        spans, cum = [], 1
        for b in v.base:
            spans.append((pos[cum], pos[cum * b]))
            cum *= b
    except KeyError:
        return dims_of(points), axis_dims(v, points)[0]
    first = []
    for a in v.perm[:v.groups[0]] if v.groups else ():
        first.extend(range(*spans[a]))
    return dims, first


def parallel_sizes(v: ViewForm, points) -> tuple:
    """Logical sizes of the buffer dimensions of a parallel operand's first axis."""
    dims = dims_of(points)
    return tuple(dims[i] for i in axis_dims(v, points)[0])


def output_layout(points, num_parallel: int, shape):
    """``(par, slots)`` of an output buffer ``[num_parallel] + shape``."""
    dims = dims_of(points)
    strides = padded_strides(dims)
    v = initial_view((num_parallel,) + tuple(shape))
    ax = axis_dims(v, points)
    par = tuple((pow2(dims[i]).bit_length() - 1, strides[i]) for i in ax[0])
    inner = [i for ds in ax[1:] for i in ds]
    pd = padded_dims(dims)
    # Every padded slot of the instance takes the element at its clamped index.
    pgrid = np.indices([pd[i] for i in inner]).reshape(len(inner), -1) if inner \
        else np.zeros((0, 1), int)
    off = np.zeros(pgrid.shape[1], dtype=np.int64)
    elem = np.zeros(pgrid.shape[1], dtype=np.int64)
    row = 0
    for k, ds in enumerate(ax[1:]):
        j = np.zeros(pgrid.shape[1], dtype=np.int64)
        for i in ds:
            q = pgrid[row].astype(np.int64)
            off += q * strides[i]
            j = j * dims[i] + np.minimum(q, dims[i] - 1)
            row += 1
        elem = elem * shape[k] + j
    return par, tuple(zip((int(o) for o in off), (int(e) for e in elem)))


def logical_instance(points, num_parallel: int, shape, t: int) -> int:
    """The logical instance whose values padded instance ``t`` of a call repeats.

    ``points`` are the split points of the call's first output buffer
    ``[num_parallel] + shape``; ``t`` splits into one bit field per parallel
    sub-dimension (outer first, as :func:`output_layout`'s ``par``), and each
    field is clamped into its logical size as padding clamps indices.
    """
    dims = dims_of(points)
    ax = axis_dims(initial_view((num_parallel,) + tuple(shape)), points)[0]
    bits = [pow2(dims[i]).bit_length() - 1 for i in ax]
    _check_count(t, "t", 0)
    if t >> sum(bits):  # (a bit field past the padded instances wrapped around)
        raise ValueError(f"Argument `t` must lie in [0, {1 << sum(bits)}) (the padded "
                         f"instances), not {t}")
    shift, j = sum(bits), 0
    for i, b in zip(ax, bits):
        shift -= b
        j = j * dims[i] + min((t >> shift) & ((1 << b) - 1), dims[i] - 1)
    return j


def pad(xp, flat, points):
    """Padded values of a buffer's logical ``flat`` values (replicating last
    rows): a new array, or where no dimension needs padding, ``flat`` itself
    as a contiguous vector (a view of it where it is one already)."""
    dims = dims_of(points)
    if flat.size != points[-1]:
        raise ValueError(f"Argument `flat` must hold the buffer's {points[-1]} values, not "
                         f"{flat.size}")
    arr = flat.reshape(dims) if dims else flat.reshape(())
    for axis, d in enumerate(dims):
        pd = pow2(d)
        if pd != d:
            idx = np.minimum(np.arange(pd), d - 1)
            arr = xp.take(arr, xp.asarray(idx), axis=axis)
    return xp.ascontiguousarray(arr).reshape(-1)


def unpad(padded, points):
    """Logical flat values of a padded buffer."""
    dims = dims_of(points)
    pd = padded_dims(dims)
    if padded.size != math.prod(pd):
        raise ValueError(f"Argument `padded` must hold the {math.prod(pd)} words of the padded "
                         f"buffer {list(pd)}, not {padded.size}")
    arr = padded.reshape(pd) if dims else padded.reshape(())
    return arr[tuple(slice(0, d) for d in dims)].reshape(-1)


_LEAF_WORDS = 16
#: Leaves hashed per batch by the hashlib path: each batch is reduced to its
#: subtree root before the next is hashed, so the digests held at once stay
#: small (a list of every leaf digest cost 1.7x the buffer) while the hashing
#: stays in list comprehensions.  A power of two, so batches are whole subtrees.
_BATCH_LEAVES = 1 << 8
#: Leaves per subtree of the Numba path (kernels/merkle_cpu.py): subtrees
#: are hashed in parallel, each in a scratch of its own digests (8 KiB).
_SUBTREE_LEAVES = 1 << 8
#: Fewer leaves than this are hashed with hashlib (a kernel launch would
#: cost more), as are a short last leaf (never in a padded buffer) and
#: everything under ``NUMBA_DISABLE_JIT``.
_KERNEL_MIN_LEAVES = 1 << 4
#: The GPU path's least leaves: a block hashes a subtree, a leaf a thread,
#: and a block of fewer than a warp's 32 threads wastes its lanes.
_DEVICE_MIN_LEAVES = 1 << 5


def _merkle_reduce(level: list) -> bytes:
    """Root of a power-of-two list of node digests."""
    while len(level) > 1:
        level = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest()
                 for i in range(0, len(level), 2)]
    return level[0]


def _root_hashlib(data, step: int, end: int) -> bytes:
    batch = step * _BATCH_LEAVES
    roots = [_merkle_reduce([hashlib.sha256(b"\x00" + data[i:i + step]).digest()
                             for i in range(lo, min(lo + batch, end), step)])
             for lo in range(0, end, batch)]
    return _merkle_reduce(roots)


def _root_kernel(arr: np.ndarray, leaves: int) -> bytes:
    """The root by the SHA-256 kernels: subtrees in parallel, then their roots."""
    from ._backend import kernels_for
    merkle_cpu = kernels_for("cpu", "merkle")
    k, h0 = merkle_cpu.ROUND_CONSTANTS, merkle_cpu.INITIAL_HASH
    per_tree = min(leaves, _SUBTREE_LEAVES)
    level = np.empty((leaves // per_tree, 8), dtype=np.uint32)
    # (a small replay's commitments start no threading layer, and a child
    # forked after GNU OpenMP started hashes serially: see subtree_roots)
    merkle_cpu.subtree_roots(arr, per_tree, level, k, h0)
    merkle_cpu.reduce_levels(level, k, h0)  # (at most 2**40 / 2**12 roots: serial)
    return level[0].astype(">u4").tobytes()


def merkle_root(words) -> bytes:
    """Merkle root (SHA-256) of a padded buffer's little-endian uint32 words (the graph
    hashes Montgomery words, ``v * 2**32 mod p``, not canonical values).

    Leaves are ``sha256(0x00 || 64-byte chunk)`` (the whole buffer when it is
    shorter), inner nodes ``sha256(0x01 || left || right)``; the commitment is
    ``sha256("zorch_nb merkle v1" || le64(len) || root)``.

    A CuPy buffer is hashed on its device (kernels/merkle_cupy.py) when it
    is a uint32 buffer of 32 leaves or more, all full; otherwise, and for
    NumPy buffers, on the CPU.

    Integer arrays of another dtype (and lists) are hashed as the uint32
    words they hold.

    Raises
    ------
    TypeError
        If ``words`` holds anything but integers.
    ValueError
        If a value lies outside ``[0, 2**32)``, the number of leaves is not
        a power of two (a padded buffer's always is), or a CuPy buffer lives
        on a GPU other than CuPy's current device.
    """
    if type(words).__module__.startswith("cupy"):
        from ._backend import check_current_device, device_of
        # refused on another device whichever path hashes it, as every entry
        # point refuses it: the kernels would launch on the current one with
        # its pointers (an illegal address poisons the CUDA context)
        check_current_device(device_of(words), "words")
        n = int(words.size)
        leaves = n // _LEAF_WORDS
        if (words.dtype == np.uint32 and leaves >= _DEVICE_MIN_LEAVES
                and not leaves & (leaves - 1) and n == _LEAF_WORDS * leaves):
            from ._backend import kernels_for
            flat = words.reshape(-1)
            if not flat.flags.c_contiguous:
                flat = flat.copy()
            return _commitment(n, kernels_for("cupy", "merkle").merkle_root_words(flat))
        words = words.get()
    arr = np.ascontiguousarray(_uint32_words(words), dtype="<u4").reshape(-1)
    # The leaves are read through a byte view: ``tobytes()`` was a copy of the buffer.
    data = memoryview(arr.view(np.uint8))
    n = arr.size
    step = 4 * _LEAF_WORDS
    end = max(len(data), 1)  # an empty buffer still has one (empty) leaf
    leaves = -(-end // step)
    if leaves & (leaves - 1):
        raise ValueError(f"Argument `words` must fill a power-of-two number of "
                         f"{_LEAF_WORDS}-word leaves (a padded buffer does), not {leaves} "
                         f"({n} words)")
    if leaves >= _KERNEL_MIN_LEAVES and n == _LEAF_WORDS * leaves and not _jit_disabled():
        root = _root_kernel(arr, leaves)
    else:
        root = _root_hashlib(data, step, end)
    return _commitment(n, root)


def _uint32_words(words):
    """``words`` as uint32 words: integers of another dtype (or a list) are
    taken where each fits; anything else is refused (it was cast: 2**32 + w,
    w + 0.5 and -1 hashed as w, w and 2**32 - 1)."""
    if getattr(words, "dtype", None) == np.uint32:
        return words
    try:
        arr = np.asarray(words)
    except ValueError:  # a ragged nesting
        raise ValueError("Argument `words` must be a rectangular array of uint32 words") \
            from None
    # (Python ints past int64 make an object array: [2**64] is out of range,
    # not "object values")
    ints = arr.dtype == object and all(is_int(v) for v in arr.flat)
    if arr.size and arr.dtype.kind not in "iu" and not ints:
        raise TypeError(f"Argument `words` must hold uint32 words (integers), not {arr.dtype} "
                        f"values")
    if arr.size and not (int(arr.min()) >= 0 and int(arr.max()) < 1 << 32):
        raise ValueError("Argument `words` must hold uint32 words, in [0, 2**32)")
    return arr.astype(np.uint32, copy=False)


def _commitment(n: int, root: bytes) -> bytes:
    return hashlib.sha256(b"zorch_nb merkle v1" + struct.pack("<Q", n) + root).digest()


def _jit_disabled() -> bool:
    import numba
    return bool(numba.config.DISABLE_JIT)
