"""Montgomery prime fields (KoalaBear, BabyBear) and their quartic extensions.

Elements are plain ``uint32`` arrays of Montgomery words ``v * 2**32 mod p`` in
``[0, p)``: base-field arrays have any shape ``(...)``, extension arrays have a
trailing axis of length 4 holding the coefficients of ``1, x, x^2, x^3`` of an
element of ``F_p[x] / (x^4 - W)``.  :meth:`PrimeField.encode` and
:meth:`PrimeField.decode` convert from and to canonical integers; every other
method takes and returns Montgomery words.

The arithmetic reads any uint32 word ``w`` as the element of ``w mod p``
(words ``>= p`` never give a wrong or non-canonical result; every result is
in ``[0, p)``), while :meth:`PrimeField.decode` insists on canonical words
and :meth:`PrimeField.is_canonical` tells them apart.

Where an operation runs is decided by the arrays (see :mod:`zorch_nb._backend`):
NumPy arrays run Numba CPU kernels, CuPy (or any ``__cuda_array_interface__``)
arrays run CuPy RawKernels, and ``backend="numba"`` selects the Numba-CUDA
kernels.  Every backend returns byte-identical results.  Operands of one call
live in one module; as in CuPy, the one exception is a NumPy operand holding a
single element -- a NumPy scalar or 0-d array (``F.one``), or one ``(4,)``
element on the extension (``E.one``) -- which is copied to the device of the
others.

Examples
--------
>>> from zorch_nb import KoalaBear as F
>>> a = F.encode([1, 2, 3]); b = F.encode([4, 5, 6])
>>> F.decode(F.mul(a, b))
array([ 4, 10, 18], dtype=uint32)
>>> E = F.ext
>>> x = E.encode([[0, 1, 0, 0]])          # the generator x
>>> E.decode(E.pow(x, 4))                 # x^4 = W = 3
array([[3, 0, 0, 0]], dtype=uint32)
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
import textwrap

import numpy as np

from . import _backend
from ._ints import is_int, is_int_type
from .kernels import monty
from .kernels.field_params import BABYBEAR, FIELDS, KOALABEAR, FieldParams
from .kernels.launch_checks import check_field
from .kernels.launch_config import CPU_LANE_RUN

_U32 = np.dtype(np.uint32)
#: The extension ops that take an ``as_base(...)`` marker (named by every refusal of one).
_MARK_TAKERS = "add, sub, mul and div operands and the `point` of eq_table and mle_eval"

__all__ = ["PrimeField", "ExtensionField", "BaseOperand", "KoalaBear", "BabyBear"]


def _element_shape(x, degree: int, name: str):
    # (a tuple first: the CUDA simulator's device arrays have a shape that
    # refuses negative indices)
    shape = tuple(x.shape)
    if degree == 1:
        return shape
    if not shape or shape[-1] != 4:
        raise ValueError(f"Argument `{name}` must have a trailing axis of length 4 "
                         f"(extension coefficients), not shape {shape}")
    return shape[:-1]


def _check_words(x, name: str):
    if isinstance(x, np.generic):
        x = np.asarray(x)
    _backend.refuse_masked(x, name)
    kind = _backend.array_kind(x)
    # `out` receives words: converting integers with `encode` is no advice there
    hint = "" if name == "out" else "; use `encode` to convert integers"
    if kind == "other":
        if type(x) is BaseOperand:
            raise TypeError(f"Argument `{name}` is an `as_base(...)` marker, which only the "
                            f"extension field's {_MARK_TAKERS} take; pass the words themselves "
                            f"here")
        raise TypeError(f"Argument `{name}` must be a uint32 array of Montgomery words "
                        f"(NumPy or CuPy), not {type(x).__name__}{hint}")
    cai = None
    if kind == "cuda":  # another library's array: its dtype may not be NumPy's (torch)
        if not hasattr(x, "shape"):
            raise TypeError(f"Argument `{name}` is a CUDA array without `.shape`; pass "
                            f"`cupy.asarray({name})` (a view, no copy)")
        cai = getattr(x, "__cuda_array_interface__", None)  # (the simulator's has none)
    dtype = np.dtype(x.dtype) if cai is None else np.dtype(cai["typestr"])
    if dtype != np.uint32:
        if dtype.kind == "u" and dtype.itemsize == 4:  # words, in the other byte order
            fix = ("pass a native uint32 array" if name == "out" else
                   "convert it with `.astype(np.uint32)`")
            raise TypeError(f"Argument `{name}` must have dtype uint32 in native byte "
                            f"order, not {dtype.str} (byte-swapped); {fix}")
        raise TypeError(f"Argument `{name}` must have dtype uint32 (Montgomery words), "
                        f"not {dtype}{hint}")


class BaseOperand:
    """Base-field words marked as such for an extension op (see
    :meth:`ExtensionField.as_base`): ``words`` is the caller's array, held
    without a copy; ``field`` the :class:`PrimeField` they are words of
    (``None``: not recorded, accepted by either field's extension)."""

    __slots__ = ("words", "field")

    def __init__(self, words, field=None):
        self.words = words
        self.field = field

    def __repr__(self):
        # (getattr: a repr never raises, whatever was put in the slots)
        of = "" if self.field is None else f"{getattr(self.field, 'name', self.field)}, "
        return f"BaseOperand({of}shape={tuple(getattr(self.words, 'shape', ()))})"


def _plain_module(kind, backend):
    """``(xp, backend)`` of the small-call paths for operands of array type
    ``kind`` -- NumPy on the CPU backend, CuPy on the CuPy one -- or ``(None,
    None)`` where the general path must decide (another type or backend; the
    caller checks that ``backend``, if given, is a str)."""
    if kind is np.ndarray:
        return (np, "cpu") if backend is None or backend == "cpu" else (None, None)
    # the operand's own module first: a cupy still being imported by another
    # thread sits in sys.modules without its ndarray yet
    if not kind.__module__.startswith("cupy") or backend is not None and backend != "cupy":
        return None, None
    xp = sys.modules.get("cupy")
    return (xp, "cupy") if kind is getattr(xp, "ndarray", None) else (None, None)


def _plain_out(out, kind, xp, shape) -> bool:
    """Whether ``out`` fits a small-call path's result as it stands: an array
    of the operands' type ``kind`` (module ``xp``), uint32, of ``shape``,
    C-contiguous and writeable, on the current device (the operands' there);
    its overlaps with the operands are the caller's to judge."""
    return type(out) is kind and out.dtype is _U32 and out.shape == shape and \
        out.flags.c_contiguous and getattr(out.flags, "writeable", True) and \
        (xp is np or _backend._cupy_device(out) == _backend.current_device())


def _stale_field_hint(obj) -> str:
    """The end of a "must be a PrimeField" message for a field object of
    another import of this module (after ``importlib.reload`` or IPython's
    autoreload): it prints as the expected field, so say why it is not one."""
    cls = type(obj)
    if (cls.__name__ in ("PrimeField", "ExtensionField") and cls.__module__ == __name__
            and cls not in (PrimeField, ExtensionField)):
        return (" -- a field of another import of zorch_nb.fields (the module was "
                "reloaded): take the fields and the modules using them from one import "
                "(reload those too, or restart the interpreter)")
    return ""


def _int_text(v) -> str:
    """``v`` for a message; Python refuses ``str`` of ints over 4300 digits."""
    v = int(v)
    if abs(v) < 10**60:
        return str(v)
    return f"{'-' if v < 0 else ''}(an integer of {abs(v).bit_length()} bits)"


def _index_text(name: str, idx: tuple) -> str:
    """``name[i, j]`` for an error message (``name`` alone for a 0-d index)."""
    return f"{name}[{', '.join(map(str, idx))}]" if idx else name


def _device_of(x, kind):
    """Context under which work on ``x`` runs where ``x`` lives: its CuPy
    device (whatever the current one), nothing for a host array."""
    if kind != "cupy":
        return contextlib.nullcontext()
    return _backend.get_xp("cupy").cuda.Device(_backend.device_of(x))


class _NonCanonical(Exception):
    """decode met a word >= p (the caller names the first one)."""


def _out_of_range(arr, flat_index: int, p: int):
    """Raise naming the C-order element ``flat_index`` of ``encode``'s ``arr``."""
    idx = _unravel(flat_index, arr.shape)
    raise ValueError(f"Argument `ints` must lie in [0, p={p}), but {_index_text('ints', idx)} = "
                     f"{_int_text(arr[idx])}; pass reduce=True to reduce modulo p")


def _int_array(values, name: str):
    """Host integer input as a NumPy integer array, exactly.

    Arrays pass through (integer dtypes, or object arrays of ints).  A Python
    sequence is read element by element: bools and floats are refused, ints
    beyond int64 (which NumPy would turn the whole list into float64 for)
    stay exact Python ints (object dtype), an empty sequence is int64, and a
    ragged nesting is a ValueError naming ``name``.
    """
    _backend.refuse_masked(values, name)
    ragged = ValueError(f"Argument `{name}` must be a rectangular (non-ragged) array of "
                        f"integers")
    if isinstance(values, np.ndarray):
        arr = values
    elif hasattr(values, "__next__"):  # NumPy would wrap it as one object
        raise TypeError(f"Argument `{name}` must be a sequence or array of integers, not "
                        f"an iterator ({type(values).__name__}); pass list(...) of it")
    elif isinstance(values, (bytes, bytearray)) or \
            isinstance(values, memoryview) and values.format in ("B", "b", "c"):
        # (bytes were refused as one object, while a bytearray or a memoryview of
        # bytes read as its byte values: refused alike, the intent unclear; a
        # memoryview of an integer array is that array)
        raise TypeError(f"Argument `{name}` must be a sequence or array of integers, not "
                        f"{type(values).__name__}; for its byte values pass "
                        f"np.frombuffer(..., np.uint8)")
    else:
        try:
            arr = np.asarray(values, dtype=object)
        except ValueError:
            raise ragged from None
    if arr.dtype == object:
        flat = arr.ravel()
        if any(isinstance(v, np.ndarray) and v.ndim == 0 for v in flat):
            # 0-d arrays inside a list count as their value, as in NumPy
            flat = np.array([v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v
                             for v in flat] or [], dtype=object)
            arr = flat.reshape(arr.shape)
        for t in set(map(type, flat)):  # per type, not per element: lists can be long
            if issubclass(t, (list, tuple, np.ndarray)):
                # NumPy 2 keeps a ragged nesting as an object array of sequences
                raise ragged
            if not is_int_type(t):
                v = next(v for v in flat if type(v) is t)
                raise TypeError(f"Argument `{name}` must hold integers, not "
                                f"{t.__name__} ({v!r})")
        try:
            return arr.astype(np.int64)
        except OverflowError:  # ints beyond int64: keep them exact, as Python ints
            # (an np.int8 beside them would overflow in the object `% p`)
            return np.asarray(np.frompyfunc(int, 1, 1)(arr), dtype=object)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"Argument `{name}` must hold integers, not {arr.dtype}")
    # native byte order, so the dtype tests below (uint64: no detour through
    # int64) see a '>u8' array as the uint64 it is
    return arr.astype(arr.dtype.newbyteorder("="), copy=False)


#: Most words one uint64 sum adds exactly: any uint32 word is < 2**32.  (The
#: sum adds the words as they are: w = w mod p modulo p, so reducing each
#: first changes nothing but the time, a uint32 `%` costing several additions.)
_SUM_EXACT = 2**32


#: Words one temporary of a chunked pass (zero checks, sums, encode/decode,
#: negative powers, mle_eval folds) covers at least, so that temporaries stay
#: a fraction of the input instead of a multiple of it.  On the host 2**16
#: words (256 KiB as uint32) keep a chunk in L2 between the NumPy passes over
#: it: faster than one pass per whole array.  On a device, where every pass is
#: a launch, 2**22 words (16 MiB): arrays up to that size launch as before.
_CHUNK_WORDS = {"numpy": 2**16, "cupy": 2**22}

#: Chunks whose every pass is a launch (any pass on a device; the Numba CPU
#: kernels, which cost tens of microseconds a call, far more when the cores
#: are busy) are also at least 1/_MAX_CHUNKS of the data: a call launches a
#: constant number of times whatever its size, and its temporaries stay a few
#: percent of the data.
_MAX_CHUNKS = 16


def _chunk_words(kind, total, launches=False):
    """Words per chunk of a pass over ``total`` words in module ``kind``; see
    _CHUNK_WORDS (host NumPy passes) and _MAX_CHUNKS (``launches``: kernels)."""
    if kind == "numpy" and not launches:
        return _CHUNK_WORDS["numpy"]
    return max(_CHUNK_WORDS[kind], -(-total // _MAX_CHUNKS))


def _blocks(shape, limit):
    """Cover an array of ``shape`` by blocks of at most ``limit`` entries, in C order.

    Gives ``(prefix, lo, hi, start)`` tuples: the block is ``x[_at(prefix, lo,
    hi)]``, that is ``x[prefix + (slice(lo, hi), ...)]`` (``prefix`` a tuple
    of ints, the slice on axis ``len(prefix)``, later axes whole), a view of a
    strided array of any layout; it covers the flat C-order entries
    ``start ..`` of ``shape`` consecutively, so the first entry found in the
    blocks in turn is the first of the array.  Trailing axes of ``x`` beyond
    ``shape`` ride along.  An array that fits (0-d and empty ones too) is one
    block, ``lo = None``: ``x[...]``, without a generator (small arrays are
    the common case and pay for every step).
    """
    if math.prod(shape) <= limit:
        return (((), None, None, 0),)
    return _blocks_of(tuple(shape), limit, (), 0)


def _blocks_of(shape, limit, prefix, start):
    inner = math.prod(shape[1:])
    if inner <= limit:  # whole rows of the leading axis: at least half of limit each
        step = limit // inner
        for lo in range(0, shape[0], step):
            yield prefix, lo, min(lo + step, shape[0]), start + lo * inner
    else:  # a row alone is too large: split each row
        for i in range(shape[0]):
            yield from _blocks_of(shape[1:], limit, prefix + (i,), start + i * inner)


def _at(prefix, lo, hi):
    """The index of a block of :func:`_blocks` (``...`` for the whole array)."""
    return (Ellipsis,) if lo is None else prefix + (slice(lo, hi), Ellipsis)


def _in_module(x):
    """``(kind, x)``: ``"numpy"`` with a base-class ndarray view of a NumPy array or
    scalar (a subclass such as np.matrix would index blocks its own way), or
    ``"cupy"`` with a CuPy view of a device array."""
    if isinstance(x, (np.ndarray, np.generic)):
        return "numpy", np.asarray(x)
    return "cupy", _backend.to_module(x, "cupy")


def _resolve_values_point(values, point, backend):
    """Check ``mle_eval``'s ``values`` and a device ``point`` as the folds'
    ops would (one array module, one device, ``backend`` allowed for them),
    naming them; a host point may go with device values (it is moved)."""
    named = {"values": values}
    if not isinstance(point, np.ndarray) and _backend.array_kind(point) != "other":
        named["point"] = point
    _backend.resolve(named, backend)


#: The largest array in bytes (np.iinfo costs ~2 us a call, and every result is checked).
_INTP_MAX = int(np.iinfo(np.intp).max)

#: Elements from which :func:`_result_first` allocates the result up front.
_RESULT_FIRST_SIZE = 1 << 20


def _check_size(shape, what, itemsize=4, host=False):
    """Refuse an array of ``shape`` that no array can be (past the address
    space: ``ValueError``), or with ``host``, that this machine's memory
    cannot hold (``MemoryError``), naming ``what`` asked for it: NumPy's own
    refusals ("array is too big", "Unable to allocate 4.00 TiB") name no
    argument, and an overcommitting OS may grant the allocation and kill the
    process that fills it."""
    nbytes = math.prod(shape) * itemsize  # Python ints: no wrap-around
    if nbytes > _INTP_MAX:
        raise ValueError(f"{what}: an array of shape {tuple(shape)} ({nbytes} bytes) is "
                         f"larger than any array can be")
    have = _backend.physical_memory() if host else None
    if have is not None and nbytes > have:
        raise MemoryError(f"{what}: an array of shape {tuple(shape)} needs "
                          f"{nbytes / 2**30:.1f} GiB; this machine has {have / 2**30:.1f} GiB "
                          f"of memory")


def _broadcast_shapes(shapes):
    """NumPy's broadcast of the tuples ``shapes``, or None where they do not
    broadcast.  Not ``np.broadcast_shapes``: that refuses more than 32 axes
    (a RuntimeError), where arrays may have 64; sizes are checked where the
    result is made (:func:`_new_words`)."""
    shapes = [tuple(s) for s in shapes]
    ndim = max(map(len, shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


#: What :meth:`_FieldBase._out` names when the result it makes is too large.
_RESULT_WHAT = "the result of the operands' (broadcast) shape"


def _contiguous(xp, x, what):
    """``xp.ascontiguousarray(x)``, a copy (of a broadcast view: any size)
    checked by :func:`_check_size` first, naming it as a copy of ``what``."""
    if not x.flags.c_contiguous:
        _check_size(tuple(x.shape), f"a contiguous copy of {what}", host=xp is np)
    return xp.ascontiguousarray(x)


def _new_words(xp, shape, what):
    """``xp.empty(shape, uint32)``, checked by :func:`_check_size` (for this
    machine's memory too where ``xp`` is NumPy)."""
    _check_size(shape, what, host=xp is np)
    return xp.empty(shape, dtype=np.uint32)


def _result_first(a, out, what="the result of `a`'s shape"):
    """``out``, or where it is None and ``a`` is a large NumPy array, a new
    result array of ``a``'s shape: allocated before a zero check reads ``a``,
    so that a result too large to allocate (from a cheap broadcast view) fails
    at once rather than after a pass over every element.  Small arrays are
    left to the op (the ``out`` path's checks cost microseconds)."""
    if out is None and isinstance(a, np.ndarray) and a.size >= _RESULT_FIRST_SIZE:
        return _new_words(np, a.shape, what)
    return out


def _same_words(out, x, alias) -> bool:
    """Whether input ``x`` is one of ``alias`` and holds exactly the words of
    C-contiguous ``out`` (same first address and size, C-contiguous)."""
    if not any(x is y for y in alias):
        return False
    if x is out:  # (the common in-place call: no address read, ~2 us each)
        return True
    if not x.flags.c_contiguous or x.nbytes != out.nbytes:
        return False
    if isinstance(out, np.ndarray):
        return isinstance(x, np.ndarray) and \
            out.__array_interface__["data"][0] == x.__array_interface__["data"][0]
    return getattr(getattr(x, "data", None), "ptr", None) == out.data.ptr


def _sum_words(block, axes, degree):
    """``block.sum(axis=axes, dtype=uint64, keepdims=True)``, exactly; where
    ``axes`` are all element axes of a C-ordered extension block, summed as
    rows of 256 words (64 elements) and then folded to the four coefficients:
    NumPy reduces a leading axis over rows of 4 words about 5x slower."""
    if degree == 4 and len(axes) == block.ndim - 1 and block.size >= 1024 \
            and block.flags.c_contiguous:
        flat = block.reshape(-1, 4)
        g = flat.shape[0] // 64 * 64
        total = flat[:g].reshape(-1, 256).sum(axis=0, dtype=np.uint64).reshape(64, 4)
        total = total.sum(axis=0) + flat[g:].sum(axis=0, dtype=np.uint64)
        return total.reshape((1,) * (block.ndim - 1) + (4,))
    return block.sum(axis=axes, dtype=np.uint64, keepdims=True)


@functools.lru_cache(maxsize=None)
def _divisibility(p):
    """``(p**-1 mod 2**32, (2**32 - 1) // p)`` as uint32: for odd p, a uint32 word
    w is a multiple of p iff ``w * p**-1`` (mod 2**32) is at most the bound."""
    return np.uint32(pow(p, -1, 2**32)), np.uint32((2**32 - 1) // p)


def _unravel(flat, shape):
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _first_true(x, shape, per_elem, pred, kind):
    """Index tuple (over ``shape``, the leading axes of ``x``) of the first element
    where ``pred`` holds, or ``None``; ``pred`` maps a block of ``x`` to a bool
    array over the block's leading axes, and ``per_elem`` words make an element.

    The blocks keep the temporaries ``pred`` makes to a chunk (_chunk_words).
    On the host the first block with a hit ends the search.  On a device the hit
    flags of all blocks stay there and are read once, so the check costs one
    synchronization as a whole-array ``bool(mask.any())`` did; only a hit (the
    error path) reads more to locate it.
    """
    if math.prod(shape) == 0:  # nothing to check, and nothing to read back
        return None
    limit = max(1, _chunk_words(kind, x.size) // per_elem)
    if kind == "numpy":
        for prefix, lo, hi, start in _blocks(shape, limit):
            hit = np.asarray(pred(x[_at(prefix, lo, hi)]))
            if hit.any():
                return _unravel(start + int(hit.argmax()), shape)
        return None
    xp = _backend.get_xp(kind)
    blocks = list(_blocks(shape, limit))
    flags = xp.stack([pred(x[_at(prefix, lo, hi)]).any() for prefix, lo, hi, _ in blocks])
    if not bool(flags.any()):
        return None
    prefix, lo, hi, start = blocks[int(flags.argmax())]
    return _unravel(start + int(pred(x[_at(prefix, lo, hi)]).argmax()), shape)


#: Shortest run for which the CPU reads a broadcast in place (see
#: _broadcast_runs): each run of a row is one call of a serial loop, so
#: shorter runs are copied to the full shape instead.
_CPU_MIN_RUN = 64

#: Words (16 MiB) per block of an elementwise op whose operands are copied
#: to the full shape (:meth:`PrimeField._map_in_blocks`): only a block of
#: each is copied at a time.  Large, for each block is a parallel launch
#: (blocks of 2**18 words ran 7x slower on a busy machine).
_MAP_BLOCK = 1 << 22


def _broadcast_runs(shape, elems):
    """Read operands of element shapes ``elems`` broadcast to ``shape`` in runs.

    Returns ``(run, [(step, row), ...])`` such that operand element
    ``(i // run) * row + (i % run) * step`` (C order) is the one broadcast to
    output element ``i``, or None where no single run length does.  The
    output's axes are split into leading ones (rows) and trailing ones (a
    run); each operand must be whole or of unit length on each side:
    whole/whole is elementwise (step 1, row ``run``), unit/whole a row
    repeated (step 1, row 0), whole/unit a column (step 0, row 1), unit/unit
    one element (step 0, row 0).  The split with the longest run is taken.
    At least one operand steps along the run.
    """
    n = math.prod(shape)
    padded = [(1,) * (len(shape) - len(e)) + tuple(e) for e in elems]
    for k in range(len(shape) + 1):  # longest run first
        run = math.prod(shape[k:])
        plan = []
        for e in padded:
            lead_whole = e[:k] == shape[:k]
            trail_whole = e[k:] == shape[k:]
            lead_unit = math.prod(e[:k]) == 1
            trail_unit = math.prod(e[k:]) == 1
            if not (lead_whole or lead_unit) or not (trail_whole or trail_unit):
                break
            step = 1 if trail_whole and run > 1 else 0
            row = (run if step else 1) if lead_whole and n > run else 0
            plan.append((step, row))
        else:
            if any(step for step, _ in plan):
                return run, plan
    return None


def _unbroadcast(x, degree):
    """``x`` with each broadcast axis (stride 0, length > 1) cut to length 1
    (a view; ``x`` itself where it has none).  An operand made by
    ``broadcast_to`` then reaches the broadcast kernels as what it repeats,
    read in place, not as a copy of its full shape: ``F.add(broadcast_to(s,
    (2**31, 1)), ...)`` copied 8 GiB before the result's size was refused.
    An extension element's own axis stays (it says the operand's degree)."""
    strides = getattr(x, "strides", None)
    if not strides or 0 not in strides:
        return x
    axes = len(strides) - (1 if degree == 4 else 0)
    cut = tuple(slice(0, 1) if i < axes and st == 0 and d > 1 else slice(None)
                for i, (st, d) in enumerate(zip(strides, x.shape)))
    return x[cut]


class _FieldBase:
    """Shared machinery of the prime field and its extension."""

    degree: int
    params: FieldParams

    # ---- constants -------------------------------------------------------
    @property
    def p(self) -> int:
        """The prime modulus."""
        return self.params.p

    @property
    def W(self) -> int:
        """The extension is ``F_p[x] / (x^4 - W)``."""
        return self.params.w

    def _trail(self):
        return () if self.degree == 1 else (4,)

    # ---- conversions -----------------------------------------------------
    def encode(self, ints, xp=np, *, reduce: bool = False):
        """Montgomery words of canonical integers: ``v -> v * 2**32 mod p``.

        Parameters
        ----------
        ints : array_like of int
            Values in ``[0, p)``; Python ints, integer arrays of any dtype, or
            a CuPy array.  Extension values need a trailing axis of length 4.
        xp : module or str, optional
            ``numpy`` (default) or ``cupy`` (the module or its name): where the
            result lives.  A CuPy
            input is converted on its device regardless.
        reduce : bool, optional
            Reduce any integer (negative or ``>= p``) modulo ``p`` instead of
            raising.

        Returns
        -------
        uint32 array of Montgomery words, the shape of ``ints``.

        Raises
        ------
        TypeError
            Non-integer input (floats, bools, strings, None; bytes, a bytearray
            or a memoryview of bytes: ``np.frombuffer(x, np.uint8)`` gives their
            byte values), an iterator, a masked array; ``reduce`` not a bool;
            ``xp`` not numpy or cupy.
        ValueError
            A value outside ``[0, p)`` when ``reduce`` is false, a ragged
            nesting, or a wrong trailing axis for the extension.
        MemoryError
            The words of a NumPy ``ints`` (a broadcast view, say) would not fit in this
            machine's memory.
        ImportError
            ``xp="cupy"`` (or a CUDA array ``ints``) where CuPy is not installed.
        """
        if not isinstance(reduce, (bool, np.bool_)):
            raise TypeError(f"Argument `reduce` must be True or False, not {reduce!r}")
        reduce = bool(reduce)  # (np.bool_: the launcher takes a bool)
        p = self.p
        kind = _backend.array_kind(ints)
        # Chunked (see _blocks): the int64/uint64 intermediates of each block
        # stay chunk-sized, next to the uint32 result.
        if kind in ("cupy", "cuda"):
            arr = _backend.get_xp("cupy").asarray(ints)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"Argument `ints` must hold integers, not {arr.dtype}")
            _element_shape(arr, self.degree, "ints")
            with _device_of(arr, "cupy"):  # the words are made and written there
                return self._encode_on_device(arr, reduce)
        xp = self._xp(xp)
        arr = np.asarray(_int_array(ints, "ints"))  # a subclass would index blocks its own way
        _element_shape(arr, self.degree, "ints")
        _check_size(arr.shape, "the words of `ints`", host=True)  # (a broadcast view: any size)
        words = np.empty_like(arr, dtype=np.uint32)  # the layout astype gave
        # C-ordered integers run the CPU kernel (a Montgomery product per
        # value instead of a uint64 `%`: 6x faster), int64 ones in one call,
        # others through int64 copies of a few blocks; other layouts (which
        # the kernel would first gather) and uint64 / object values the
        # NumPy path, block by block
        kernel = arr.flags.c_contiguous and arr.dtype != object and arr.dtype != np.uint64
        limit = arr.size if kernel and arr.dtype == np.int64 else \
            _chunk_words("numpy", arr.size, launches=kernel)
        for prefix, lo, hi, start in _blocks(arr.shape, limit):
            idx = _at(prefix, lo, hi)
            blk = arr[idx]
            if kernel:
                flat = np.ascontiguousarray(blk, dtype=np.int64).reshape(-1)
                tmp = words[idx].reshape(-1)  # a view: words is C-ordered as arr
                first = _backend.kernels_for("cpu", "field").encode(flat, tmp, reduce,
                                                                     self.params)
                if first >= 0:
                    _out_of_range(arr, start + first, p)
                continue
            if blk.size and not reduce:
                bad = np.asarray((blk < 0) | (blk >= p))
                if bool(np.any(bad)):
                    _out_of_range(arr, start + int(bad.argmax()), p)
            if arr.dtype == object or arr.dtype == np.uint64:
                canon = np.asarray(blk % p).astype(np.uint64)
            else:
                canon = (blk.astype(np.int64) % p).astype(np.uint64)
            words[idx] = (canon << np.uint64(32)) % np.uint64(p)  # < p: exact in uint32
        return words if xp is np else xp.asarray(words)

    def _encode_on_device(self, arr, reduce):
        """:meth:`encode` of the CuPy integer array ``arr``, under its device."""
        cp = _backend.get_xp("cupy")
        p = self.p
        words = cp.empty_like(arr, dtype=cp.uint32)  # (arr's layout)
        if arr.flags.c_contiguous and arr.dtype != cp.uint64:
            # the conversion kernel (one pass; CuPy ops took two uint64 `%`,
            # software divisions on a GPU): int64 in one call, other
            # dtypes through int64 copies of a few blocks
            k = _backend.kernels_for("cupy", "field")
            limit = arr.size if arr.dtype == cp.int64 else _chunk_words("cupy", arr.size)
            for prefix, lo, hi, start in _blocks(arr.shape, limit):
                idx = _at(prefix, lo, hi)
                flat = arr[idx].astype(cp.int64, copy=False).reshape(-1)
                first = k.encode(flat, words[idx].reshape(-1), reduce, self.params)
                if first >= 0:
                    _out_of_range(arr, start + first, p)
            return words
        bad = []  # per block, on the device: read once, as one whole-array check was
        for prefix, lo, hi, _ in _blocks(arr.shape, _chunk_words("cupy", arr.size)):
            idx = _at(prefix, lo, hi)
            blk = arr[idx]
            if not reduce:
                bad.append(((blk < 0) | (blk >= p)).any())
            if arr.dtype == cp.uint64:  # values >= 2**63 would wrap in int64
                canon = blk % cp.uint64(p)
            else:
                canon = (blk.astype(cp.int64) % p).astype(cp.uint64)
            words[idx] = ((canon << 32) % p).astype(cp.uint32)
        if arr.size and bad and bool(cp.stack(bad).any()):
            # the error path: locate the first bad value (C order) to name it,
            # as the kernel path does
            idx = _first_true(arr, tuple(arr.shape), 1, lambda b: (b < 0) | (b >= p), "cupy")
            _out_of_range(arr, int(np.ravel_multi_index(idx, arr.shape)) if idx else 0, p)
        return words

    def decode(self, words):
        """Canonical values ``w * 2**-32 mod p`` of Montgomery words.

        The inverse of :meth:`encode`.  Words not in ``[0, p)`` are refused:
        the arithmetic reads them mod p, but at the boundary to integers they
        usually mean corrupted data (``F.add(words, F.zeros(()))``
        canonicalizes).

        Parameters
        ----------
        words : uint32 array of Montgomery words (NumPy or CuPy), or a NumPy uint32 scalar
            Base ``(...)`` or extension ``(..., 4)`` elements.

        Returns
        -------
        uint32 array
            The values, of ``words``' shape, in its module (a NumPy scalar or
            0-d array gives a 0-d array).  A CuPy array is decoded on its own
            device, into an array there.

        Raises
        ------
        TypeError
            ``words`` not a uint32 array (a list, another dtype, a masked array).
        ValueError
            A word ``>= p`` (the message names the first, in C order); on the
            extension, ``words`` without a trailing axis of length 4.
        MemoryError
            A NumPy broadcast view whose values would not fit in this machine's memory.
        """
        if isinstance(words, np.generic):
            words = np.asarray(words)
        _check_words(words, "words")
        _element_shape(words, self.degree, "words")
        kind, words = _in_module(words)
        # (a device array is decoded on its device, into an array there)
        with _device_of(words, kind):
            try:
                return self._decode_in(kind, words)
            except _NonCanonical:
                pass
            # the error path: find the first word >= p, to name it
            idx = _first_true(words, tuple(words.shape), 1, lambda w: w >= self.p, kind)
            raise ValueError(f"Argument `words` holds values >= p={self.p} (the first: "
                             f"{_index_text('words', idx)} = {int(words[idx])}); decode "
                             f"needs canonical Montgomery words")

    def _decode_in(self, kind, words):
        """:meth:`decode` of checked ``words`` of array module ``kind``;
        raises :class:`_NonCanonical` at a word >= p."""
        noncanonical = _NonCanonical()
        xp = _backend.get_xp(kind)
        # Chunked (see _blocks): the uint64 products stay chunk-sized.  The
        # canonical check runs per block too: on the host the first bad block
        # raises, on a device the flags are read once after the blocks.
        # (a broadcast view may be larger than memory: refused by name, as ops are)
        if words.size > 1 << 20:
            _check_size(tuple(words.shape), "the values of `words`", host=xp is np)
        out = xp.empty_like(words, dtype=np.uint32)  # the layout astype gave
        bad = []
        # words in C order: the backend's kernel (one Montgomery reduction
        # per word, the canonical check in the same pass), in one call; other
        # layouts the array module's ops, block by block
        kernel = words.flags.c_contiguous
        k = _backend.kernels_for("cpu" if kind == "numpy" else "cupy", "field")
        for prefix, lo, hi, _ in _blocks(tuple(words.shape), words.size if kernel else
                                         _chunk_words(kind, words.size)):
            idx = _at(prefix, lo, hi)
            w = words[idx]
            if kernel:  # out is C-ordered as words: the reshapes are views
                if not k.decode(w.reshape(-1), out[idx].reshape(-1), self.params):
                    raise noncanonical
                continue
            if kind == "numpy":
                if w.size and bool((w >= self.p).any()):
                    raise noncanonical
            else:
                bad.append((w >= self.p).any())
            val = (w.astype(np.uint64) * self.params.r_inv) % self.p  # < p: exact in uint32
            # NumPy casts on assignment; on a device cast explicitly, as before
            out[idx] = val if kind == "numpy" else val.astype(np.uint32)
        if bad and words.size and bool(xp.stack(bad).any()):
            raise noncanonical
        return out

    def is_canonical(self, words) -> bool:
        """True if every word is a canonical Montgomery word (``< p``).

        Parameters
        ----------
        words : uint32 array of Montgomery words (NumPy or CuPy), or a NumPy uint32 scalar
            Base ``(...)`` or extension ``(..., 4)`` elements.

        Returns
        -------
        bool
            A Python bool; ``True`` for an empty array.

        Raises
        ------
        TypeError
            ``words`` not a uint32 array (a list, another dtype, a masked array).
        ValueError
            On the extension, ``words`` without a trailing axis of length 4.
        """
        _check_words(words, "words")
        _element_shape(words, self.degree, "words")
        kind, words = _in_module(words)
        # a broadcast view repeats the words it was made from: only those are
        # read (a 2**40-element broadcast of one word was scanned for minutes)
        words = _unbroadcast(words, self.degree)
        if kind == "numpy" and words.size <= _CHUNK_WORDS["numpy"]:  # small: one pass
            return bool((words < self.p).all()) if words.size else True
        # blockwise, without a whole-array mask (one device read, as before;
        # a device array's on its device, as decode's)
        with _device_of(words, kind):
            return _first_true(words, tuple(words.shape), 1, lambda w: w >= self.p,
                               kind) is None

    # ---- constructors ----------------------------------------------------
    def _xp(self, xp):
        """The module ``xp`` names: numpy / cupy, as a module or by name."""
        if xp is np or (isinstance(xp, str) and xp == "numpy"):
            return np
        if isinstance(xp, str) and xp == "cupy":
            return _backend.get_xp("cupy", "xp='cupy' was asked for")
        if getattr(xp, "__name__", "") == "cupy":
            return xp
        raise TypeError(f"Argument `xp` must be the numpy or cupy module (or its name), "
                        f"not {xp!r}")

    def zeros(self, shape, xp=np):
        """Array of zeros (all words 0) of element shape ``shape``.

        Parameters
        ----------
        shape : int or tuple of ints
            The element shape (a 1-d NumPy integer array is read as a tuple);
            the extension appends the axis of 4 coefficients.
        xp : module or str, optional
            ``numpy`` (default) or ``cupy`` (the module or its name): where the
            result lives.

        Returns
        -------
        uint32 array
            A new array of shape ``shape`` (``shape + (4,)`` on the extension).

        Raises
        ------
        TypeError
            ``shape`` not an int or a tuple of ints (a bool or a float included);
            ``xp`` not numpy or cupy.
        ValueError
            A negative entry of ``shape``, or a shape larger than any array can be.
        MemoryError
            A NumPy result larger than this machine's memory.
        ImportError
            ``xp="cupy"`` where CuPy is not installed.
        """
        xp = self._xp(xp)
        return xp.zeros(self._full_shape(shape, host=xp is np), dtype=np.uint32)

    def ones(self, shape, xp=np):
        """Array of ones (Montgomery word ``2**32 mod p``) of element shape ``shape``.

        Parameters, the errors raised and the result's shape are those of
        :meth:`zeros`; on the extension each element is ``(2**32 mod p, 0, 0, 0)``.
        """
        xp = self._xp(xp)
        out = xp.zeros(self._full_shape(shape, host=xp is np), dtype=np.uint32)
        if self.degree == 1:
            out[...] = self.params.r_mod_p
        else:
            out[..., 0] = self.params.r_mod_p
        return out

    def _full_shape(self, shape, itemsize=4, host=False):
        """The words' shape of element shape ``shape`` (checked by
        :func:`_shape_tuple` and :func:`_check_size`, ``host`` passed on)."""
        full = _shape_tuple(shape) + self._trail()
        _check_size(full, "Argument `shape`", itemsize, host)
        return full

    def random(self, shape, seed=None, xp=np):
        """Uniformly random elements of element shape ``shape``.

        Values are drawn on the host from ``numpy.random.default_rng(seed)``
        (``integers(0, p, dtype=int64)``, coefficient by coefficient in C
        order) and moved to ``xp``, so a seed gives the same elements in every
        module.

        Parameters
        ----------
        shape : int or tuple of ints
            The element shape (a 1-d NumPy integer array is read as a tuple);
            the extension appends the axis of 4 coefficients.
        seed : None, int, sequence of ints, SeedSequence, BitGenerator or Generator, optional
            Passed to ``numpy.random.default_rng``; ``None`` draws fresh entropy.
        xp : module or str, optional
            ``numpy`` (default) or ``cupy`` (the module or its name): where the
            result lives.

        Returns
        -------
        uint32 array
            Canonical Montgomery words of shape ``shape`` (``shape + (4,)`` on
            the extension).

        Raises
        ------
        TypeError
            ``shape`` not an int or a tuple of ints; a bool ``seed``, or one NumPy
            refuses by type (a float, a str); ``xp`` not numpy or cupy.
        ValueError
            A negative entry of ``shape``, a shape larger than any array can be,
            or a negative ``seed``.
        MemoryError
            A shape beyond this machine's memory (drawn on the host, whatever ``xp``).
        ImportError
            ``xp="cupy"`` where CuPy is not installed.
        """
        try:
            if isinstance(seed, (bool, np.bool_)):  # (NumPy takes True as 1: a slip, likely)
                raise TypeError("a bool is not a seed")
            rng = np.random.default_rng(seed)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"Argument `seed` must be None, a non-negative int (or a "
                            f"sequence of them) or a NumPy SeedSequence / BitGenerator / "
                            f"Generator, not {seed!r} ({exc})") from None
        full = self._full_shape(shape, host=True)  # (drawn on the host, whatever xp)
        xp = self._xp(xp)
        words = np.empty(full, np.uint32)
        flat = words.reshape(-1)
        # Drawn and encoded a chunk at a time: one int64 draw of the whole
        # shape was twice the result's memory beside it.  The values are those
        # of one draw: every NumPy bit generator keeps its spare 32 bits in its
        # state between calls, so consecutive draws continue one stream.
        step = _chunk_words("numpy", flat.size, launches=True)
        encode = _backend.kernels_for("cpu", "field").encode
        for lo in range(0, flat.size, step):
            vals = rng.integers(0, self.p, size=min(step, flat.size - lo), dtype=np.int64)
            encode(vals, flat[lo:lo + vals.size], False, self.params)
        return words if xp is np else xp.asarray(words)

    # ---- dispatch --------------------------------------------------------
    def _prepare(self, operands: dict, backend):
        """Validate operands, choose the backend, broadcast element shapes.

        NumPy scalars in ``operands`` are replaced by 0-d arrays and
        :class:`BaseOperand` markers by their words (in place).
        """
        marked = ()  # names of operands marked as base words (as_base)
        for name, x in operands.items():
            if type(x) is BaseOperand:
                if self.degree != 4 or len(operands) != 2:
                    what = ("the base field's ops take base words as they are"
                            if self.degree != 4 else "unary ops take extension elements")
                    raise TypeError(f"Argument `{name}` is an `as_base(...)` marker, which "
                                    f"only the extension field's {_MARK_TAKERS} take; {what}")
                x = operands[name] = self._unmark(x, name)
                marked += (name,)
            _check_words(x, name)
            if isinstance(x, np.generic):
                operands[name] = np.asarray(x)
        if len(operands) > 1 and any(type(x) is not np.ndarray for x in operands.values()):
            self._move_single_elements(operands, marked)
        kind, backend = _backend.resolve(operands, backend)
        shapes = {}
        degrees = {}
        for name, x in operands.items():
            shape = tuple(x.shape)  # any CUDA array's shape as a tuple (some are not)
            if self.degree == 4 and shape and shape[-1] == 4 and name not in marked:
                degrees[name] = 4
                shapes[name] = shape[:-1]
            elif self.degree == 4 and len(operands) == 1:
                _element_shape(x, 4, name)  # unary ext ops need extension input
            else:
                degrees[name] = 1
                shapes[name] = shape
        first = next(iter(shapes.values()), ())
        if all(s == first for s in shapes.values()):  # the common case, without NumPy's
            return kind, backend, first, degrees      # general (and slower) broadcast
        shape = _broadcast_shapes(shapes.values())
        if shape is None:
            desc = ", ".join(f"`{n}` {s}" for n, s in shapes.items())
            raise ValueError(f"element shapes do not broadcast: {desc}"
                             f"{self._ext_hint(shapes, degrees)}")
        return kind, backend, shape, degrees

    def _ext_hint(self, shapes: dict, degrees: dict) -> str:
        """A hint for base-field ops given extension data: the shapes would
        broadcast with a trailing axis of 4 read as the extension's (the
        extension ops take base operands too); for extension ops, the reverse:
        base words whose last axis happens to be 4 were read as extension
        elements."""
        if self.degree == 4:
            for name in (n for n in shapes if degrees[n] == 4):
                if _broadcast_shapes(s + (4,) if n == name else s
                                     for n, s in shapes.items()) is None:
                    continue
                return (f" (`{name}`, of shape {shapes[name] + (4,)}, was read as extension "
                        f"elements, trailing axis of 4; base words of that shape broadcast: "
                        f"mark them, {self.base.name}.ext.as_base({name}))")
            return ""
        # (a lone axis of 4 is as likely four base elements: no hint there)
        ext = [n for n, s in shapes.items() if len(s) >= 2 and s[-1] == 4]
        if _broadcast_shapes(s[:-1] if n in ext else s for n, s in shapes.items()) is None:
            return ""
        if not ext:
            return ""
        return (f" (`{ext[0]}` looks like {self.name} extension elements, trailing axis "
                f"of 4: for extension arithmetic use {self.name}.ext.{{add, sub, mul}}, "
                f"which take base operands too)")

    def _move_single_elements(self, operands: dict, marked=()) -> None:
        """Next to device operands, a NumPy operand holding one element (a scalar
        word like ``F.one``, or one extension element ``(4,)`` unless
        ``marked`` as base words) is copied to the device, as CuPy takes NumPy
        scalars; larger NumPy arrays still have to be moved by the caller (no
        silent host->device copies of data)."""
        single = [name for name, x in operands.items() if isinstance(x, np.ndarray)
                  and (x.shape == () or (self.degree == 4 and x.shape == (4,)
                                         and name not in marked))]
        if not single:  # the common case: nothing to look up
            return
        device = [(name, x) for name, x in operands.items()
                  if _backend.array_kind(x) in ("cupy", "cuda")]
        if not device:
            return
        cp = _backend.get_xp("cupy")
        dev = _backend.device_of(device[0][1])
        # (before the move: once moved, a scalar would be the one named off device)
        _backend.check_current_device(dev, device[0][0])
        for name in single:
            if dev is None:
                operands[name] = cp.asarray(operands[name])
            else:
                with cp.cuda.Device(dev):
                    operands[name] = cp.asarray(operands[name])

    def _flat(self, x, kind, shape, degree, name="a"):
        """Contiguous ``(n,)`` / ``(n, 4)`` copy-or-view of ``x`` (the operand
        ``name``) broadcast to ``shape``."""
        xp = _backend.get_xp(kind)
        x = _backend.to_module(x, kind)
        n = math.prod(shape)
        if degree == 1 and self.degree == 4:
            # Promotion: embed a as (a, 0, 0, 0); byte-identical by construction.
            _check_size(shape + (4,), "the base operand embedded in the extension")
            emb = xp.zeros(shape + (4,), dtype=np.uint32)
            emb[..., 0] = x
            return emb.reshape(n, 4)
        full = shape + self._trail()
        if tuple(x.shape) != full:  # broadcast_to only where needed: it costs microseconds
            x = xp.broadcast_to(x, full)
        return _contiguous(xp, x, f"`{name}`").reshape((n,) + self._trail())

    def _check_result(self, out, kind, shape):
        """Where ``out`` is None, the size of the result :meth:`_out` will make,
        checked before the operands' copies (:meth:`_flat`): its refusal names
        the broadcast, and no copy is made for a result that cannot be."""
        if out is None:
            _check_size(shape + self._trail(), _RESULT_WHAT, host=kind == "numpy")

    def _out(self, out, kind, shape, inputs=(), alias=()):
        """``(buffer the kernel writes, user's out or None)``.

        A C-contiguous ``out`` that shares no memory with the inputs, or
        whose words are exactly those of inputs in ``alias`` (operands the
        kernel reads elementwise, which the kernel contracts allow as
        ``out``: ``E.add(acc, x, out=acc)``) and no others, is written
        directly; otherwise the kernel writes a fresh buffer that is copied
        into ``out`` afterwards (an overlapping view could be read after it
        was written).
        """
        full = shape + self._trail()
        xp = _backend.get_xp(kind)
        if out is None:  # (a broadcast of cheap views can ask for any size)
            return _new_words(xp, full, _RESULT_WHAT), None
        if isinstance(out, np.generic):
            raise TypeError(f"Argument `out` must be an array the result is written into, "
                            f"not a NumPy scalar ({type(out).__name__}); for a 0-d result "
                            f"pass np.empty((), np.uint32)")
        _check_words(out, "out")
        if _backend.array_kind(out) != ("numpy" if kind == "numpy" else "cupy"):
            raise TypeError(f"Argument `out` must be a {kind} array like the operands")
        if tuple(out.shape) != full:
            raise ValueError(f"Argument `out` must have shape {full}, not {tuple(out.shape)}")
        if kind != "numpy":  # (the operands were checked to be on the current device)
            _backend.check_same_device("out", _backend.device_of(out), _backend.current_device(),
                                       "the operands (the current device)")
        if not getattr(out.flags, "writeable", True) or (out.size and any(
                st == 0 and d > 1 for st, d in zip(out.strides, out.shape))):
            # (CuPy arrays have no such flag, and a CuPy broadcast view -- or a
            # writeable NumPy one from as_strided -- would keep one of several
            # results written to the same words.  An empty array has nothing
            # to clash: NumPy gives a fresh np.zeros((0, 3)) zero strides.)
            raise ValueError("Argument `out` must be writeable (it is read-only or a "
                             "broadcast view)")
        if out.flags.c_contiguous and not any(
                xp.may_share_memory(out, x) and not (alias and _same_words(out, x, alias))
                for x in inputs):
            if type(out) is np.ndarray or kind != "numpy":
                return out, None
            # An ndarray subclass (np.matrix, a memmap) is written through a
            # plain view of its memory: np.matrix.reshape(-1) stays 2-d, and the
            # kernels, which flatten, wrote every element from the first one.
            # _finish hands back the caller's object.
            return out.view(np.ndarray), out
        return _new_words(xp, full, "the result of the operands' (broadcast) shape"), out

    def _finish(self, result, user_out):
        if user_out is None:
            return result
        if result.base is not user_out:  # (else the kernels wrote it in place)
            user_out[...] = result
        return user_out

    def _run(self, backend, kind, call, inputs, result):
        """Run ``call(kernels, *flat_inputs, flat_out)`` on ``backend``."""
        kernels = _backend.kernels_for(backend, "field")
        n_shape = (result.size // (4 if self.degree == 4 else 1),) + self._trail()
        flat_out = result.reshape(n_shape)
        if backend == "cupy" and kind == "numpy":
            cp = _backend.get_xp("cupy")
            dev_in = [cp.asarray(x) for x in inputs]
            dev_out = cp.empty(flat_out.shape, dtype=np.uint32)
            call(kernels, *dev_in, dev_out)
            flat_out[...] = dev_out.get()
        else:
            call(kernels, *inputs, flat_out)
        return result

    def _map_call(self, op, arity):
        """``call(kernels, *inputs, out)`` running the elementwise ``op`` of
        ``arity`` operands of this field (for :meth:`_run`)."""
        f = self.params
        if self.degree == 1:
            if arity == 1:
                return lambda k, *a: k.base_map1(op, *a, f)
            return lambda k, *a: k.base_map2(op, *a, f)
        if arity == 1:
            return lambda k, *a: k.ext4_map1(op, *a, f)
        return lambda k, *a: k.ext4_map2(op, *a, f)

    def _lean(self, operands, kind, backend, shape, degrees):
        """``(run, [(words, step, row, degree), ...])`` for the broadcast kernels, or
        None.

        Where one operand broadcasts against the other, the ``*_map2_bcast``
        kernels read it in place instead of a full-size copy: operand element
        ``(i // run) * row + (i % run) * step`` for output element ``i`` (see
        :func:`_broadcast_runs`), base words of an extension op as their
        embedding ``(s, 0, 0, 0)``.  That covers a one-element operand
        (``F.mul(a, F.one)``, ``E.mul(x, r)``), base data under an extension
        op, and rows and columns of an outer product (``a[:, None]`` op
        ``b[None, :]``).  None for the plain case (same shapes and degrees: the
        plain kernels) and for broadcasts that need more than one run length
        (copied by :meth:`_flat`).
        """
        (na, a), (nb, b) = operands.items()
        da, db = degrees[na], degrees[nb]
        a, b = _unbroadcast(a, da), _unbroadcast(b, db)
        if da == db == self.degree and a.shape == b.shape:
            return None  # the common plain case, decided first: it pays for every step
        n = math.prod(shape)
        if n <= 1 or da == db == 1 and self.degree == 4:
            return None  # one element; or base op base on the extension: embedded
        ea = a.shape[:-1] if da == 4 else a.shape
        eb = b.shape[:-1] if db == 4 else b.shape
        sa = 1 if ea == shape else 0 if math.prod(ea) == 1 else None
        sb = 1 if eb == shape else 0 if math.prod(eb) == 1 else None
        if sa is not None and sb is not None:
            # one element or whole (the common case): one run, without the
            # general planner's search (it costs microseconds)
            if sa == sb == 1 and da == db:
                return None  # no broadcast after all: shapes differ by unit axes
            run, ((sa, ra), (sb, rb)) = n, ((sa, 0), (sb, 0))
        else:
            plan = _broadcast_runs(shape, [tuple(ea), tuple(eb)])
            if plan is None:
                return None
            run, ((sa, ra), (sb, rb)) = plan
            if run < n and backend == "cpu" and run < _CPU_MIN_RUN:
                return None  # short runs: per-run calls would cost more than the copy
            if run == n and sa == sb == 1 and da == db:
                return None  # no broadcast after all
        xp = _backend.get_xp(kind)
        a, b = (xp.ascontiguousarray(_backend.to_module(x, kind)).reshape(-1) for x in (a, b))
        return run, [(a, sa, ra, da), (b, sb, rb, db)]

    def _bcast_call(self, op, sa, da, sb, db, run=0, ra=0, rb=0):
        """``call(kernels, a, b, out)`` (for :meth:`_run`) running the binary
        ``op`` of the broadcast kernels on contiguous arrays: operand steps ``s*``
        (0: the same element along a run), degrees ``d*`` (1: base, embedded)
        and rows ``r*`` for runs of ``run`` elements (0: one run; see
        :meth:`_lean`), at least one operand of this field's degree."""
        f = self.params
        rows = dict(run=run, a_row=ra, b_row=rb)
        if self.degree == 1:
            return lambda k, a, b, o: k.base_map2_bcast(op, a, sa, b, sb, o, f, **rows)
        return lambda k, a, b, o: k.ext4_map2_bcast(op, a.reshape(-1), sa, da, b.reshape(-1),
                                                     sb, db, o.reshape(-1), f, **rows)

    def _map_plain(self, op, operands, backend, out=None):
        """The result of an elementwise ``op`` on operands that need nothing
        of :meth:`_prepare`: C-contiguous native uint32 arrays of one module,
        device and shape (extension elements ``(..., 4)`` on the extension),
        NumPy on the CPU backend or CuPy on the CuPy one and its current
        device, and an ``out`` (if any) of the same kind, writeable, sharing
        no words with them or exactly an operand's (not the inverse's);
        else None.  Small calls are dominated by the general path's
        validation and dispatch (~8 of a 10 us ``F.mul`` of 8 elements on the
        CPU; with ``out``, 23 us against 7 here); the launcher still checks
        what it is given."""
        if backend is not None and type(backend) is not str:
            return None  # (the general path says what `backend` must be)
        xs = tuple(operands.values())
        a = xs[0]
        kind = type(a)
        xp, backend = _plain_module(kind, backend)
        if xp is None:
            return None
        if a.dtype is not _U32 or not a.flags.c_contiguous or not a.size:
            return None
        shape = a.shape
        if len(xs) == 2:
            b = xs[1]
            if type(b) is not kind or b.dtype is not _U32 or b.shape != shape \
                    or not b.flags.c_contiguous:
                return None
        if xp is not np:  # one device, the current one (else the general path names them)
            dev = _backend._cupy_device(a)
            if dev != _backend.current_device() or len(xs) == 2 and \
                    _backend._cupy_device(xs[1]) != dev:
                return None
        if self.degree == 4 and (not shape or shape[-1] != 4):
            return None  # base words on the extension: embedded by the general path
        if out is None:
            result = xp.empty(shape, np.uint32)
        elif not _plain_out(out, kind, xp, shape):
            return None  # (the general path says what is wrong, or copies)
        else:
            for x in xs:  # an operand may be `out` itself (the kernel contract), not overlap it
                if xp.may_share_memory(out, x) and (op == monty.OP_INV
                                                    or not _same_words(out, x, xs)):
                    return None
            result = out
        res, flat = result, (-1, 4) if self.degree == 4 else (-1,)
        if len(shape) != len(flat):  # the launchers take (n,) / (n, 4): views
            xs, res = [x.reshape(flat) for x in xs], result.reshape(flat)
        self._map_call(op, len(xs))(_backend.kernels_for(backend, "field"), *xs, res)
        return result

    def _map_marked(self, op, operands, backend, out):
        """The result of an extension ``op`` of one ``as_base`` marked operand
        and one extension operand of the same element shape, both
        C-contiguous native uint32 arrays of one module -- NumPy on the CPU
        backend, CuPy on the CuPy one and its current device; else None.
        The general path reached the same kernel call through its validation
        and broadcast planning: ``E.mul(E.as_base(a), x)`` of 16 elements
        took 15 us on the CPU against 5.6 us for ``E.mul(x, y)``; now 8.6
        us.  An ``out`` (if any) of the same kind, shape and device,
        writeable, sharing no words with the marked words and none with the
        extension operand or exactly its words (the kernel contract), as in
        :meth:`_map_plain`; else the general path."""
        if backend is not None and type(backend) is not str:
            return None  # (the general path says what `backend` must be)
        (na, a), (nb, b) = operands.items()
        ma, mb = type(a) is BaseOperand, type(b) is BaseOperand
        if ma == mb:
            return None
        mark, x = (a, b) if ma else (b, a)
        w = mark.words
        if mark.field is not None and getattr(mark.field, "params", None) != self.params:
            return None  # (the general path names the fields)
        kind = type(x)
        xp, backend = _plain_module(kind, backend)
        if xp is None:
            return None
        if type(w) is not kind or w.dtype is not _U32 or x.dtype is not _U32 or not w.size \
                or x.shape != w.shape + (4,) or not w.flags.c_contiguous \
                or not x.flags.c_contiguous:
            return None
        if xp is not np:
            dev = _backend._cupy_device(x)
            if dev != _backend.current_device() or _backend._cupy_device(w) != dev:
                return None
        if out is None:
            result = xp.empty(x.shape, np.uint32)
        elif not _plain_out(out, kind, xp, x.shape) or xp.may_share_memory(out, w) or \
                xp.may_share_memory(out, x) and not _same_words(out, x, (x,)):
            return None  # (the general path says what is wrong, or copies)
        else:
            result = out
        da, db = (1, 4) if ma else (4, 1)
        a, b = (w, x) if ma else (x, w)
        self._bcast_call(op, 1, da, 1, db, w.size)(
            _backend.kernels_for(backend, "field"), a.reshape(-1), b.reshape(-1), result)
        return result

    def _map(self, op, out, backend, **operands):
        result = self._map_plain(op, operands, backend, out)
        if result is not None:
            return result
        if self.degree == 4 and len(operands) == 2:
            result = self._map_marked(op, operands, backend, out)
            if result is not None:
                return result
        kind, backend, shape, degrees = self._prepare(operands, backend)
        lean = self._lean(operands, kind, backend, shape, degrees) if len(operands) == 2 \
            else None
        if lean is not None:
            run, plan = lean
            (a, *_), (b, *_) = plan
            n = math.prod(shape)
            # an operand read elementwise may be `out` itself (the kernel contract)
            alias = [x for x, step, row, deg in plan
                     if step == 1 and (run >= n or row == run) and deg == self.degree]
            result, user_out = self._out(out, kind, shape, [a, b], alias)
            (_, sa, ra, da), (_, sb, rb, db) = plan
            fn = self._bcast_call(op, sa, da, sb, db, run, ra, rb)
            return self._finish(self._run(backend, kind, fn, [a, b], result), user_out)
        blocks = self._map_in_blocks(op, out, backend, kind, shape, degrees, operands)
        if blocks is not None:
            return blocks
        self._check_result(out, kind, shape)
        flat = [self._flat(x, kind, shape, degrees[n], n) for n, x in operands.items()]
        # elementwise kernels may write over an operand, the inverse excepted
        result, user_out = self._out(out, kind, shape, flat, () if op == monty.OP_INV else flat)
        fn = self._map_call(op, len(flat))
        return self._finish(self._run(backend, kind, fn, flat, result), user_out)

    def _map_in_blocks(self, op, out, backend, kind, shape, degrees, operands):
        """:meth:`_map`'s copying path in blocks along the first axis longer
        than 1, or None where there is nothing to copy or one block would do.

        Operands the broadcast kernels cannot read in place (runs shorter
        than ``_CPU_MIN_RUN``, strided views, base words under an extension
        op) are copied to the full shape: ``F.mul(a[:, None], b[None, :63])``
        held both copies beside the result, 3x its memory.  A block of about
        ``_MAP_BLOCK`` words of each is copied at a time instead, and the
        kernel writes the result's block (contiguous: the axes before it have
        length 1).
        """
        n = math.prod(shape)
        block = _MAP_BLOCK // self.degree  # elements
        if n <= block:
            return None
        xp = _backend.get_xp(kind)

        def full(degree):
            return shape + ((4,) if degree == 4 else ())

        xs = {k: _backend.to_module(x, kind) for k, x in operands.items()}
        read_in_place = {k for k, x in xs.items() if degrees[k] == self.degree
                         and tuple(x.shape) == full(self.degree) and x.flags.c_contiguous}
        if len(read_in_place) == len(xs):
            return None
        axis = next(i for i, d in enumerate(shape) if d > 1)
        step = max(1, block // (n // shape[axis]))
        if step >= shape[axis]:
            return None
        # an operand read row for row (the full shape, this field's degree) may
        # be `out` itself: a block reads only the rows it then writes
        alias = [] if op == monty.OP_INV else [
            x for k, x in xs.items() if degrees[k] == self.degree
            and tuple(x.shape) == full(self.degree)]
        result, user_out = self._out(out, kind, shape, list(xs.values()), alias)
        views = {k: x if tuple(x.shape) == full(degrees[k]) else xp.broadcast_to(
            x, full(degrees[k])) for k, x in xs.items()}
        call = self._map_call(op, len(xs))
        for lo in range(0, shape[axis], step):
            hi = min(lo + step, shape[axis])
            rows = (slice(None),) * axis + (slice(lo, hi),)
            part = shape[:axis] + (hi - lo,) + shape[axis + 1:]
            flat = [self._flat(views[k][rows], kind, part, degrees[k], k) for k in xs]
            self._run(backend, kind, call, flat, result[rows])
            del flat  # (before the next block's copies are made)
        return self._finish(result, user_out)

    # ---- arithmetic ------------------------------------------------------
    def add(self, a, b, out=None, *, backend=None):
        """Elementwise ``a + b`` (NumPy broadcasting over element shapes)."""
        return self._map(monty.OP_ADD, out, backend, a=a, b=b)

    def sub(self, a, b, out=None, *, backend=None):
        """Elementwise ``a - b``."""
        return self._map(monty.OP_SUB, out, backend, a=a, b=b)

    def mul(self, a, b, out=None, *, backend=None):
        """Elementwise product ``a * b`` (in the extension: modulo ``x^4 - W``)."""
        return self._map(monty.OP_MUL, out, backend, a=a, b=b)

    def neg(self, a, out=None, *, backend=None):
        """Elementwise ``-a``."""
        return self._map(monty.OP_NEG, out, backend, a=a)

    def square(self, a, out=None, *, backend=None):
        """Elementwise ``a * a``."""
        return self._map(monty.OP_SQUARE, out, backend, a=a)

    def _raise_if_zero(self, a, what, backend=None):
        """Raise naming the first zero element of ``a``, before anything is written.

        A C-contiguous array is scanned by one kernel (``base_first_zero`` /
        ``ext4_first_zero``): a host array by the CPU's (Numba: 2-2.3x faster
        than NumPy blocks on 2 cores at 2**22 elements), whatever the
        backend, as it costs no transfer; a device array by the backend's
        (CuPy's unless ``backend="numba"``): one read pass and one launch,
        where the blocks made ~4 passes (a product, a compare, a reduction)
        and several launches per block.  Other layouts run in blocks
        (:func:`_first_true`), so the check allocates no input-sized mask.
        """
        kind, a = _in_module(a)
        # (the backend and device checks first: a scan on a device array of
        # another device would launch with its pointer)
        backend = _backend.resolve({"a": a}, backend)[1]
        shape = _element_shape(a, self.degree, "a")
        if a.dtype == np.uint32 and a.flags.c_contiguous and a.ndim:
            k = _backend.kernels_for("cpu" if kind == "numpy" else backend, "field")
            i = (k.base_first_zero if self.degree == 1 else k.ext4_first_zero)(
                a.reshape(-1), self.params)  # (the extension's as flat words)
            idx = None if i < 0 else _unravel(i, shape)
        else:
            idx = _first_true(a, shape, self.degree, self._zero_test(kind), kind)
        if idx is not None:
            raise ValueError(f"{what}: element at index {idx} is zero and has no inverse")

    def _zero_test(self, kind):
        """Blockwise zero test for :func:`_first_true`: a block of words to a
        bool array over its elements."""
        xp = _backend.get_xp(kind)
        p_inv, bound = _divisibility(self.p)

        def zero(blk):
            # Words are read mod p, as the kernels do: w is zero iff p divides
            # it, iff w * p**-1 mod 2**32 <= (2**32 - 1) // p (p odd): one
            # wrapping uint32 product and a compare, several times faster than
            # a uint32 `%` (on a device too) and exact for every word
            z = blk * p_inv <= bound
            if self.degree == 1:
                return z
            # all four coefficients zero: the element's four bools, read as
            # one uint32, are 0x01010101 (10x faster than z.all(axis=-1))
            z = xp.ascontiguousarray(z)
            return z.view(np.uint32)[..., 0] == np.uint32(0x01010101)
        return zero

    def inv(self, a, out=None, *, backend=None):
        """Elementwise inverse ``a**-1``; raises ``ValueError`` naming a zero entry."""
        return self._inv(a, out, backend, "inv: `a`")

    def div(self, a, b, out=None, *, backend=None):
        """Elementwise quotient ``a / b = a * b**-1`` (NumPy broadcasting, as
        :meth:`mul`; in the extension either operand may be a base one).

        Raises ``ValueError`` naming the index of the first zero entry of
        ``b`` before anything is written.  ``b``'s inverses are one
        temporary array of ``b``'s shape.
        """
        # a checked before b is inverted (a marker only where it belongs)
        _check_words(a.words if type(a) is BaseOperand and self.degree == 4 else a, "a")
        # and the pair's shapes, backend and devices: a mismatch was reported as
        # a zero divisor, or only after all of b was inverted (a throwaway dict:
        # _prepare rewrites its entries)
        self._prepare({"a": a, "b": b}, backend)
        if type(b) is BaseOperand and self.degree == 4:
            # marked base words: inverted in the base field, still marked
            return self.mul(a, BaseOperand(self.base._inv(b.words, None, backend, "div: `b`", "b"),
                                           b.field),
                            out, backend=backend)
        _check_words(b, "b")
        shape = tuple(np.shape(b))
        # a base divisor of an extension op is inverted in the base field,
        # then promoted by the product, as mul promotes it
        field = self if self.degree == 1 or (shape and shape[-1] == 4) else self.base
        return self.mul(a, field._inv(b, None, backend, "div: `b`", "b"), out, backend=backend)

    def _inv(self, a, out, backend, what, name="a"):
        """Inverses of operand ``name`` (``a`` of inv, ``b`` of div)."""
        _check_words(a, name)
        if self.degree == 4:
            _element_shape(a, 4, name)
        out = _result_first(a, out, "the result of `a`'s shape" if name == "a"
                            else f"the inverses of `{name}`")
        self._raise_if_zero(a, what, backend)
        return self._map(monty.OP_INV, out, backend, a=a)

    def batch_inv(self, a, out=None, *, backend=None):
        """Inverses of all entries of ``a`` at once.

        Same result as :meth:`inv`, and on every backend the same kernels:
        Montgomery's batch trick (three multiplications per element and one
        Fermat inversion per batch; the extension field batches the norms of
        its elements down to the base field), over chunks of 4096 elements
        on the CPU and over 8 base or 4 extension elements per thread on a
        GPU.  Raises ``ValueError`` naming the index of the first zero entry.
        """
        _check_words(a, "a")
        if self.degree == 4:
            _element_shape(a, 4, "a")
        out = _result_first(a, out)
        self._raise_if_zero(a, "batch_inv: `a`", backend)
        # (every backend's INV is the batch kernel: base_map1's INV is base_batch_inv's,
        # so batch_inv takes inv's way, the small-call path included)
        return self._map(monty.OP_INV, out, backend, a=a)

    def sum(self, a, axis=None, keepdims: bool = False, *, out=None, backend=None):
        """Field sum ``sum_i a_i mod p`` over ``axis`` (element axes, as ``numpy.sum``).

        Montgomery form is linear (``sum_i w_i = (sum_i v_i) 2**32 mod p``), so
        the words themselves are added, exactly, in uint64 (in chunks, reduced
        mod p at the end and wherever 2**32 more words could overflow);
        extension elements add coefficient by coefficient (their trailing axis
        is never reduced).  Any uint32 word counts as its value mod p; the
        result is canonical, in ``a``'s module, byte-identical on every backend.

        Parameters
        ----------
        a : uint32 array of words (NumPy or CuPy)
        axis : None, int or tuple of ints, optional
            Element axes to add over; ``None`` adds every element.
        keepdims : bool, optional
            Keep the reduced axes with length 1 (the integers 0 and 1 are
            taken as False and True, as NumPy takes them).
        out : uint32 array, optional
            Written with the result (same module as ``a``, the result's shape;
            any strides) and returned.  It may be a view of ``a``: the sum is
            complete before ``out`` is written.
        backend : {None, "cpu", "cupy", "numba"}, optional
            Checked as the other operations' (``"cpu"`` with CuPy arrays is
            an error), but ``"numba"`` needs no CUDA device: no GPU kernel
            runs.  The words are added where they are: a C-contiguous NumPy
            array over its trailing element axes (a full sum included) by a
            CPU kernel in one pass (also under ``"numba"``), other NumPy
            views and CuPy arrays by the array module's own reductions;
            ``"cupy"`` on NumPy arrays adds them on the device and returns
            NumPy.

        Returns
        -------
        uint32 array of the element shape without the reduced axes (kept with
        length 1 under ``keepdims``), plus the trailing 4 on the extension; a
        full reduction gives a 0-d array (not a NumPy scalar).

        Raises
        ------
        TypeError
            ``a`` or ``out`` not a uint32 array (``out`` a NumPy scalar, or of another
            module, included); ``axis`` not None, an int or a tuple of ints; ``keepdims``
            not a bool (or 0 or 1); ``backend`` not a string or None, or ``"cpu"`` with CuPy arrays.
        ValueError
            ``axis`` not distinct element axes; on the extension, ``a`` without a trailing
            axis of 4; ``out`` of another shape or read-only; an unknown ``backend``.
        MemoryError
            A broadcast view whose result does not fit in this machine's memory
            (named: "the sum of `a` over `axis`").
        ImportError
            ``backend="cupy"`` where CuPy is not installed.
        """
        _check_words(a, "a")
        a = np.asarray(a) if isinstance(a, np.generic) else a
        elem = _element_shape(a, self.degree, "a")
        if not (isinstance(keepdims, (bool, np.bool_))
                or is_int(keepdims) and keepdims in (0, 1)):
            raise TypeError(f"Argument `keepdims` must be True or False, not {keepdims!r}")
        keepdims = bool(keepdims)
        if isinstance(axis, np.ndarray) and axis.ndim == 0 and axis.dtype.kind in "iu":
            axis = int(axis)  # a 0-d integer array, as NumPy takes one
        nd = len(elem)
        if axis is None:
            axes = tuple(range(nd))
        else:
            raw = axis if isinstance(axis, tuple) else (axis,)
            if not all(is_int(v) for v in raw):
                raise TypeError(f"Argument `axis` must be None, an int or a tuple of ints, "
                                f"not {axis!r}")
            axes = tuple(int(v) + nd if -nd <= v < 0 else int(v) for v in raw)
            if any(not 0 <= v < nd for v in axes) or len(set(axes)) != len(axes):
                note = " (extension coefficients are not an axis here)" if self.degree == 4 \
                    else ""
                raise ValueError(f"Argument `axis` must name distinct element axes of "
                                 f"{elem}{note}, not {axis!r}")
        _, run = _backend.resolve({"a": a}, backend)
        kind, a = _in_module(a)
        if out is not None:  # checked before the work, written after it (a view of `a` too)
            shape = tuple(1 if i in axes else d for i, d in enumerate(elem) if keepdims
                          or i not in axes)
            self._out(out, kind, shape)  # (its checks; the buffer it offers is unused)
        if run == "cupy" and kind == "numpy":  # on the device, back to the host
            total = self._sum_of(_backend.to_module(a, "cupy"), elem, axes, keepdims, "cupy",
                                 _backend.get_xp("cupy")).get()
        elif kind == "numpy" and a.flags.c_contiguous and axes and \
                sorted(axes) == list(range(nd - len(axes), nd)):  # trailing axes, any order
            # trailing element axes of a contiguous array: rows of words, each
            # added by the CPU kernel in one pass (NumPy's uint64 reduction
            # took 7x as long, 10x over the extension's strided coefficients)
            lead = elem[:nd - len(axes)]
            total = np.empty(lead + (1,) * len(axes) * keepdims + a.shape[nd:], np.uint32)
            _backend.kernels_for("cpu", "field").sum_rows_trusted(
                self.degree, a.reshape(-1), math.prod(lead), total, self.params)
        else:
            total = self._sum_of(a, elem, axes, keepdims, kind, _backend.get_xp(kind))
        if out is None:
            return total
        out[...] = total
        return out

    def _sum_of(self, a, elem, axes, keepdims, kind, xp):
        """:meth:`sum` of checked arguments (``elem``: ``a``'s element shape)."""
        p = np.uint64(self.p)
        # A summed axis of stride 0 (a broadcast view) repeats one element:
        # its sum is the count times that element's, and Montgomery words are
        # linear (word(c x) = c word(x) mod p).  Summing the view itself took
        # minutes for a 2**40-element broadcast.
        repeated = [i for i in axes if a.shape[i] > 1 and a.strides[i] == 0]
        if repeated:
            count = math.prod(a.shape[i] for i in repeated) % self.p
            one = a[tuple(slice(0, 1) if i in repeated else slice(None)
                          for i in range(a.ndim))]
            words = self._sum_of(one, one.shape[:len(elem)], axes, keepdims, kind, xp)
            # (xp.asarray: NumPy's 0-d arithmetic gives a scalar, not the 0-d array promised)
            return xp.asarray((words.astype(np.uint64) * np.uint64(count) % p).astype(np.uint32))
        # Blocks (C order over the element axes, see _blocks) bound the
        # temporaries to a chunk; each adds its words into the uint64 slots of
        # `total` it reduces into.  A slot stays exact while it holds at most
        # _SUM_EXACT words' worth: `pending` counts the words a slot may have
        # gained since it was last reduced, and a block that would pass that
        # bound first reduces `total` mod p (after which a slot counts as one
        # word).  The result is the unique canonical sum, whatever the chunking.
        limit = max(1, min(_chunk_words(kind, a.size) // self.degree, _SUM_EXACT - 1))
        if a.size <= limit * self.degree:  # one block: spare small arrays the loop
            total = _sum_words(a, axes, self.degree) % p
            if not keepdims:
                total = total.reshape(tuple(d for i, d in enumerate(a.shape) if i not in axes))
            return xp.asarray(total).astype(np.uint32)
        kept = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
        _check_size(kept, "the sum of `a` over `axis`", 8, host=xp is np)
        total = xp.zeros(kept, dtype=np.uint64)
        pending = 0
        for prefix, lo, hi, _ in _blocks(elem, limit):
            block = a[_at(prefix, lo, hi)]
            k = len(prefix)  # the block's axis 0 is a's axis k
            if lo is None:  # the whole array
                reduced, target = axes, (Ellipsis,)
            else:
                reduced = tuple(v - k for v in axes if v >= k)
                target = tuple(0 if j in axes else prefix[j] for j in range(k)) \
                    + (slice(0, 1) if k in axes else slice(lo, hi), Ellipsis)
            adds = math.prod(block.shape[v] for v in reduced)
            if pending + adds > _SUM_EXACT:
                total %= p
                pending = 1
            # dtype=uint64 widens inside the reduction, without a uint64 copy
            total[target] += _sum_words(block, reduced, self.degree)
            pending += adds
        total %= p
        if not keepdims:
            total = total.reshape(tuple(d for i, d in enumerate(a.shape) if i not in axes))
        return xp.asarray(total).astype(np.uint32)

    def mle_eval(self, values, point, *, backend=None):
        """The multilinear extension of ``values`` at ``point``.

        ``values`` holds ``2**nv`` elements ``f(b)`` indexed by ``b`` in
        ``{0,1}^nv``; ``point[j]`` binds bit ``j`` of the index (``point[0]``
        the lowest: the variable a LogUp-GKR layer transition folds first).
        Returns ``sum_b f(b) prod_j (r_j if b_j else 1 - r_j)``, computed by
        ``nv`` folds ``f'[k] = f[2k] + r_j (f[2k+1] - f[2k])``: ``2**nv - 1``
        products in all, with the field kernels of ``backend``.

        Parameters
        ----------
        values : uint32 words, shape ``(2**nv,)`` (base) or ``(2**nv, 4)`` (extension)
        point : uint32 words, ``nv`` elements, base ``(nv,)`` or extension ``(nv, 4)``
            On the extension field either may be base (it is embedded); on the
            base field both are base words (an extension point: ``F.ext.mle_eval``).
            A 1-d point is read as base coordinates whatever its length
            (one extension coordinate is shape ``(1, 4)``): ``values`` fix
            ``nv``, so unlike :meth:`eq_table` no mark is needed; one marked
            with ``as_base`` is taken too.
        backend : {None, "cpu", "cupy", "numba"}, optional

        Returns
        -------
        One element: a 0-d base array, or shape ``(4,)`` on the extension.

        Raises
        ------
        ValueError
            ``values`` not ``2**nv`` elements, or ``point`` not ``nv`` of them.
        TypeError
            Operands that are not uint32 arrays of one module.
        MemoryError
            NumPy ``values`` (a broadcast view, say) whose first folds need
            more than this machine's memory.
        """
        if type(point) is BaseOperand and self.degree == 4:
            point = self._unmark_point(point)
        n, nv, embed = self._mle_values(values)
        p_ext = self._mle_point(point, "mle_eval", nv, tuple(values.shape))
        shape = (4,) if self.degree == 4 else ()
        if embed and not p_ext:  # a base point too: the folds stay in the base field
            return self.from_base(self.base.mle_eval(values, point, backend=backend))
        if nv == 0:  # no fold runs: reduce the word (a**1), into a new array
            # (the empty point is still checked as the folds would check it)
            _resolve_values_point(values, point, backend)
            v = self.from_base(values) if embed else values
            return self.pow(v, 1, backend=backend).reshape(shape)
        # Memory: each fold is one fused kernel pass (out[k] from v[2k],
        # v[2k+1]); the first `s` folds run in chunks (_chunk_words: a few
        # percent of the data) straight from `values` into `buf`, the others
        # in place in `buf`, through one chunk of scratch (the coordinate is
        # read in place).  Base values at an extension point fold three times
        # at once, so that `buf` (extension words) is half of `values`, as
        # after one fold of same-field values; one fold would leave twice
        # their words.
        s = min(nv, 3 if embed else 1)
        if not (type(values) is np.ndarray and type(point) is np.ndarray
                and backend in (None, "cpu")):
            # The public ops on the first pair raise whatever the folds would
            # (modules, devices, backend), naming the same arguments; past
            # them the folds run the kernels on operands they prepared.
            # `values` (and a device point) are resolved first, so that a
            # module or device error names them (the ops call them `a`, `b`).
            _resolve_values_point(values, point, backend)
            pair = self.from_base(values[:2]) if embed else values[:2]
            lo, hi = pair[0::2], pair[1::2]
            self.add(lo, self.mul(point[0], self.sub(hi, lo, backend=backend),
                                  backend=backend), backend=backend)
        kind, backend = _backend.resolve({"values": values}, backend)
        kind, values = _in_module(values)
        xp = _backend.get_xp(kind)
        if kind == "cupy" and isinstance(point, np.ndarray):  # as _move_single_elements
            with xp.cuda.Device(_backend.device_of(values)):
                point = xp.asarray(point)
        elif kind == "cupy":
            point = _backend.to_module(point, "cupy")
        deg, trail = self.degree, self._trail()
        if backend == "cpu" and n <= 2 * CPU_LANE_RUN:
            # small: every fold in one serial kernel call (each fold has one
            # run of outputs; a call per fold cost a dispatch of ~4 us)
            return _backend.kernels_for("cpu", "field").mle_eval_trusted(
                deg, np.ascontiguousarray(values), 1 if embed else deg,
                np.ascontiguousarray(point).reshape(nv, 4 if p_ext else 1),
                self.params).reshape(shape)
        # elements per chunk: a chunk of the values' words (at most
        # _MAX_CHUNKS chunks, so at most 3 _MAX_CHUNKS kernel calls here).  Base
        # values' chunks fold into extension scratch of half, then a quarter,
        # of their elements: 1/8 + 1/16 of the values' words at 16 chunks.
        step = max(1 << s, _chunk_words(kind, values.size, True) // (1 if embed else deg)
                   >> s << s)
        first = min(step, n)  # the longest chunk
        half_step = max(1, _chunk_words(kind, (n >> s) * deg, True) // (2 * deg))
        scratch = {}

        def space(key, size):  # a reusable scratch array per key
            if key not in scratch:
                scratch[key] = xp.empty((size,) + trail, np.uint32)
            return scratch[key]

        # point[j] as its 1 or 4 words, read by the fold kernels in place
        coords = [xp.ascontiguousarray(point[j]).reshape(-1) for j in range(nv)]
        kernels = _backend.kernels_for(backend, "field") if backend == "cpu" else None

        def fold(v, r, out):
            # out[k] = v[2k] + r (v[2k+1] - v[2k]): the fused kernel (the words
            # of add(lo, mul(r, sub(hi, lo)))); out shares no memory with v
            v = xp.ascontiguousarray(v)
            if backend == "cpu":  # (checked above, our buffers: the launcher's checks
                # cost more than a small fold)
                kernels.mle_fold_trusted(deg, v, 1 if v.ndim == 1 else 4, r, r.size, out,
                                         self.params)
                return out
            return self._run(backend, kind, self._fold_call(v.ndim == 1, r.size), [v, r], out)

        # The first `s` folds, chunk by chunk, from `values` into `buf` (the
        # ones between through scratch).
        # (values may be a cheap broadcast view of any length: named, not
        # NumPy's "Unable to allocate", nor granted by an overcommitting OS)
        buf = _new_words(xp, (n >> s,) + trail, "the first folds of `values`")
        for lo in range(0, n, step):
            v = values[lo:lo + step]
            for t in range(s):
                h = v.shape[0] // 2
                out = buf[lo >> s:(lo + step) >> s] if t == s - 1 else \
                    space(("mid", t), first >> (t + 1))[:h]
                v = fold(v, coords[t], out)
        v, m = buf, n >> s
        del buf
        for j in range(s, nv):
            half = m // 2
            if half <= half_step:  # small: into a new array (the last fold always is)
                v = fold(v, coords[j], xp.empty((half,) + trail, dtype=np.uint32))
            else:
                # In place, ascending.  Outputs [k0, k1) read v[2 k0 : 2 k1]:
                # disjoint from them where k1 <= 2 k0, and above every output
                # written before.  So the first chunk goes through scratch and
                # the others double, straight into v: 1 + ceil(log2(half /
                # half_step)) kernel calls and one copy.
                k1 = half_step
                tmp = fold(v[:2 * k1], coords[j], space("head", half_step)[:k1])
                v[:k1] = tmp
                while k1 < half:
                    k0, k1 = k1, min(half, 2 * k1)
                    fold(v[2 * k0:2 * k1], coords[j], v[k0:k1])
                v = v[:half]
            m = half
        return v.reshape(shape)

    def _mle_values(self, values):
        """``(n, nv, embed)`` of MLE ``values``: ``n = 2**nv`` elements, base
        ``(n,)`` or (extension field) ``(n, 4)``; ``embed``: base values on the
        extension field."""
        _check_words(values, "values")
        n = values.shape[0] if values.ndim else 0
        ext = self.degree == 4 and values.ndim == 2 and tuple(values.shape)[-1] == 4
        if values.ndim != 1 + ext or n < 1 or n & (n - 1):
            raise ValueError("Argument `values` must hold 2**nv elements, shape (2**nv,)"
                             + (" or (2**nv, 4)" if self.degree == 4 else "")
                             + f", not {tuple(values.shape)}")
        return n, n.bit_length() - 1, self.degree == 4 and values.ndim == 1

    def _unmark(self, mark, name):
        """The words of ``as_base`` mark ``mark`` (argument ``name``), refused
        when they are another field's: read here they would be other values."""
        if mark.field is not None and getattr(mark.field, "params", None) != self.params:
            raise ValueError(f"Argument `{name}` is marked as {mark.field!r} words "
                             f"({mark.field!r}.ext.as_base), but this is {self!r}: "
                             f"mark it with {self!r}.as_base, or convert it between "
                             f"the fields (decode, then encode)")
        return mark.words

    def _unmark_point(self, mark):
        """The words of a ``point`` marked with ``as_base``: base coordinates,
        so one axis (a marked ``(nv, 4)`` array was read as ``nv`` extension
        coordinates, the mark ignored)."""
        words = self._unmark(mark, "point")
        shape = getattr(words, "shape", None)
        if shape is not None and len(shape) != 1:
            raise ValueError(f"Argument `point` is marked as base words (as_base), so it "
                             f"must hold one base coordinate per variable, shape (nv,), not "
                             f"{tuple(shape)}; an extension point goes unmarked")
        return words

    def _mle_point(self, point, method, nv=None, values_shape=None):
        """Whether ``point`` of :meth:`mle_eval` / :meth:`eq_table` (``method``)
        holds extension words: one element per variable (``nv`` of them, where
        given), base ``(nv,)`` or (extension field) ``(nv, 4)``; ``values_shape``
        (mle_eval's values) only shapes the error's hint."""
        _check_words(point, "point")
        p_ext = self.degree == 4 and point.ndim == 2 and tuple(point.shape)[-1] == 4
        if point.ndim != 1 + p_ext or nv is not None and point.shape[0] != nv:
            hint = (f"; an extension point needs F.ext.{method}"
                    if self.degree == 1 and point.ndim == 2 else "")
            if self.degree == 4 and nv == 2 and values_shape == (4,):
                # one extension element's words look like 4 base values
                hint = ("; `values` of shape (4,) are 4 base values (nv = 2): one "
                        "extension element is shape (1, 4)")
            elif self.degree == 4 and tuple(point.shape) == (4,):
                # (a prover's one extension challenge, its words read as 4 coordinates)
                hint = "; one extension coordinate is shape (1, 4)"
            what = (f"one element per variable, shape (nv,)"
                    f"{' or (nv, 4)' if self.degree == 4 else ''}" if nv is None else
                    f"nv = {nv} {'base ' if self.degree == 1 else ''}elements (one per variable)")
            raise ValueError(f"Argument `point` must hold {what}, not shape "
                             f"{tuple(point.shape)}{hint}")
        return p_ext

    def mle_fold(self, values, r, out=None, *, backend=None):
        """``values`` with its lowest variable bound to ``r``: one sumcheck round's fold.

        ``f'[k] = f[2k] + r (f[2k+1] - f[2k])`` for ``k < 2**(nv-1)``: the
        multilinear extension of ``f'`` at ``(x_1, ..., x_{nv-1})`` is that of
        ``f`` at ``(r, x_1, ..., x_{nv-1})``, the variable order of
        :meth:`mle_eval` (``nv`` folds by ``point[0], point[1], ...`` give its
        value, byte for byte) and of a LogUp-GKR layer transition.

        Parameters
        ----------
        values : uint32 words, shape ``(2**nv,)`` (base) or ``(2**nv, 4)`` (extension), nv >= 1
        r : one element: base words ``()``, or on the extension field ``(4,)``
            A NumPy ``r`` beside CuPy ``values`` is copied to their device.
        out : array of the result's shape, optional
            Written and returned; in ``values``' module.
        backend : {None, "cpu", "cupy", "numba"}, optional

        Returns
        -------
        ``2**(nv-1)`` elements: ``(2**(nv-1),)`` on the base field,
        ``(2**(nv-1), 4)`` on the extension (base values are embedded, as
        by the extension's other operations).

        Raises
        ------
        TypeError
            ``values``, ``r`` or ``out`` not a uint32 array, or not in one array module;
            ``backend`` not a string or None, or ``"cpu"`` with CuPy arrays.
        ValueError
            ``values`` not ``2**nv`` elements with ``nv >= 1``; ``r`` not one element; ``out``
            of another shape or read-only; an unknown ``backend``, or ``"numba"`` without a GPU.
        MemoryError
            A NumPy ``values`` that is not C-contiguous (a broadcast view, say) whose copy
            would not fit in this machine's memory.
        ImportError
            ``backend="cupy"`` where CuPy is not installed.

        Notes
        -----
        A sumcheck round polynomial's values ``g(X)`` at ``X = 0, 1, ..., d``
        are sums of products of such folds by the constants ``X``
        (``F.encode(X)``): each is one pass over ``values``, reading the pairs
        in place, where the other operations given the strided halves
        ``values[0::2]`` and ``values[1::2]`` copy them first.
        """
        _, nv, embed = self._mle_values(values)
        if nv == 0:
            raise ValueError("Argument `values` has no variable left to bind (one element)")
        _check_words(r, "r")
        if tuple(r.shape) not in ((), (4,) if self.degree == 4 else ()):
            hint = "; an extension `r` needs F.ext.mle_fold" if r.shape == (4,) else ""
            raise ValueError(f"Argument `r` must be one {self.name} element, shape ()"
                             f"{' or (4,)' if self.degree == 4 else ''}, not "
                             f"{tuple(r.shape)}{hint}")
        operands = {"values": values, "r": np.asarray(r) if isinstance(r, np.generic) else r}
        if type(values) is not np.ndarray or type(r) is not np.ndarray:
            # a NumPy r beside device values moves to their device, as the
            # ops' one-element operands do (values are never (), nor one element)
            self._move_single_elements(operands, ("values",))
        kind, backend = _backend.resolve(operands, backend)
        kind, values = _in_module(values)
        xp = _backend.get_xp(kind)
        # contiguous words for the kernel (a strided view is copied once)
        values = _contiguous(xp, values, "`values`")
        r = xp.ascontiguousarray(_backend.to_module(operands["r"], kind)).reshape(-1)
        result, user_out = self._out(out, kind, (values.shape[0] // 2,), [values, r])
        if backend == "cpu":  # (checked here, `result` shares nothing: the launcher's
            # checks were 1.5 of the 18 us of a 2**12 fold, its dispatch more)
            _backend.kernels_for("cpu", "field").mle_fold_trusted(
                self.degree, values, 1 if values.ndim == 1 else 4, r, r.size, result,
                self.params)
            return self._finish(result, user_out)
        return self._finish(self._run(backend, kind, self._fold_call(values.ndim == 1, r.size),
                                      [values, r], result), user_out)

    def _fold_call(self, base_values, r_words):
        """``call(kernels, v, r, out)`` (for :meth:`_run`) of the fused MLE fold
        kernels: base or extension values, ``r`` of 1 or 4 words."""
        f = self.params
        if self.degree == 1:
            return lambda k, v, r, o: k.base_mle_fold(v, r, o, f)
        v_deg = 1 if base_values else 4
        return lambda k, v, r, o: k.ext4_mle_fold(v, v_deg, r, r_words, o, f)

    def eq_table(self, point, out=None, *, backend=None):
        """The ``2**nv`` values ``eq(point, b) = prod_j (r_j if b_j else 1 - r_j)``.

        ``b`` runs over ``{0,1}^nv`` as the index ``sum_j b_j 2**j``
        (``point[0]`` binds the lowest bit, as in :meth:`mle_eval`), so the
        field sum of ``f * eq_table(point)`` is ``mle_eval(f, point)``.  Built
        by ``nv`` doublings, ``T[m + k] = T[k] r_j``, ``T[k] = T[k] - T[m + k]``
        (``m = 2**j``): ``2**nv - 1`` products in all, one fused kernel pass
        per doubling (the ``eq_split`` kernels).

        Parameters
        ----------
        point : uint32 words, ``nv`` elements, base ``(nv,)`` or (extension field) ``(nv, 4)``
            On the extension field a point of shape ``(4,)`` is refused as
            ambiguous, as the operand rule of :class:`ExtensionField` reads
            it: one extension coordinate is ``(1, 4)``, four base coordinates
            are ``E.as_base(point)``.
        out : array of shape ``(2**nv,)`` (base field) or ``(2**nv, 4)``, optional
        backend : {None, "cpu", "cupy", "numba"}, optional

        Returns
        -------
        uint32 array of Montgomery words: a new ``(2**nv,)`` array on the base
        field, ``(2**nv, 4)`` on the extension (a base ``point`` included), on
        the current device, which must be the point's (as for every op's
        operands); ``out`` itself when given.

        Raises
        ------
        TypeError
            ``point`` or ``out`` not a uint32 array (on the base field, an ``as_base``
            mark included), ``out`` of another module; ``backend`` not a string or None,
            or ``"cpu"`` with a CuPy point.
        ValueError
            ``point`` not ``(nv,)`` or ``(nv, 4)``, ``(4,)`` unmarked on the extension, or
            marked by another field; a table larger than any array can be; ``out`` of another
            shape or read-only; an unknown ``backend``, or ``"numba"`` without a GPU.
        MemoryError
            A NumPy table (no ``out``) larger than this machine's memory.
        ImportError
            ``backend="cupy"`` where CuPy is not installed.
        """
        if type(point) is BaseOperand and self.degree == 4:
            point = self._unmark_point(point)  # base coordinates, however many
        elif self.degree == 4 and getattr(point, "shape", None) == (4,):
            # (a prover's one extension challenge read as four base ones: a
            # 16-row table where it wanted 2)
            raise ValueError("Argument `point` of shape (4,) is ambiguous on the extension "
                             "field: one extension coordinate is shape (1, 4); four base "
                             "coordinates are marked with `as_base(point)`")
        self._mle_point(point, "eq_table")
        nv = point.shape[0]
        nbytes = 4 * self.degree << nv
        if out is None and nbytes > _INTP_MAX:
            # (NumPy's own refusal names no argument: "array is too big")
            raise ValueError(f"Argument `point` has nv = {nv} coordinates: its table of "
                             f"2**{nv} elements ({nbytes} bytes) is larger than any array "
                             f"can be")
        kind, backend = _backend.resolve({"point": point}, backend)
        kind, point = _in_module(point)
        have = _backend.physical_memory() if out is None and kind == "numpy" else None
        if have is not None and nbytes > have:  # (NumPy's refusal names no argument)
            raise MemoryError(f"Argument `point` has nv = {nv} coordinates: its table of "
                              f"2**{nv} elements needs {nbytes / 2**30:.1f} GiB; this machine "
                              f"has {have / 2**30:.1f} GiB of memory")
        xp = _backend.get_xp(kind)
        # the table where the point lives (resolve refused a point off the
        # current device, so that is the current one)
        with _device_of(point, kind):
            table, user_out = self._out(out, kind, (1 << nv,), [point])
            work, mod = table, xp
            if backend == "cupy" and kind == "numpy":  # built on the device, as _run does
                mod = _backend.get_xp("cupy")
                work = mod.empty(table.shape, np.uint32)
            kernels = _backend.kernels_for(backend, "field")
            f = self.params
            if backend == "cpu" and work.flags.c_contiguous:
                # the table is ours and the point checked: the launchers'
                # checks cost more than a small doubling, and the small
                # doublings run in one call (the point's words copied first)
                words = np.array(point, np.uint32).reshape(nv, 1 if point.ndim == 1 else 4)
                work[0] = self.one
                kernels.eq_table_trusted(self.degree, work, words, f)
            else:
                # each coordinate as its 1 or 4 contiguous words
                coords = [mod.ascontiguousarray(mod.asarray(point[j])).reshape(-1)
                          for j in range(nv)]
                work[0] = mod.asarray(self.one)
                if self.degree == 1:
                    split = (lambda a, r, hi: kernels.base_eq_split(a, r, a, hi, f))
                else:
                    split = (lambda a, r, hi: kernels.ext4_eq_split(a, r, r.size, a, hi, f))
                m = 1
                for j in range(nv):  # T[:m], T[m:2m] = T[:m] (1 - r_j), T[:m] r_j: in place
                    split(work[:m], coords[j], work[m:2 * m])
                    m *= 2
            if work is not table:
                table[...] = work.get()
        return self._finish(table, user_out)

    def pow(self, a, e, out=None, *, backend=None):
        """Elementwise ``a ** e`` for a Python integer exponent ``e``.

        Negative ``e`` means ``inv(a) ** -e``.  ``a ** 0`` is one (also for
        ``a = 0``).  Exponents are reduced modulo the multiplicative group
        order, keeping ``0 ** e = 0`` for ``e > 0``.
        """
        if isinstance(e, np.ndarray) and e.ndim == 0 and e.dtype.kind in "iu":
            e = e.item()  # a 0-d integer array, as NumPy's power takes one
        if not is_int(e):
            # a device scalar is not read here: that would wait for the GPU unasked
            hint = ("; pass int(e) (reading a device array waits for the GPU)"
                    if _backend.array_kind(e) in ("cupy", "cuda") else "")
            raise TypeError(f"Argument `e` must be an integer, not {type(e).__name__}{hint}")
        e = int(e)
        _check_words(a, "a")
        if self.degree == 4:
            _element_shape(a, 4, "a")
        invert = e < 0  # a ** e = inv(a) ** -e
        if invert:
            out = _result_first(a, out)
            self._raise_if_zero(a, f"pow with e = {_int_text(e)} < 0: `a`", backend)
            e = -e
        order = self.p ** self.degree - 1
        e_red = 0 if e == 0 else (e - 1) % order + 1
        # Kernels take the exponent as two 64-bit limbs (p^4 - 1 < 2^124).
        e_hi, e_lo, nbits = np.uint64(e_red >> 64), np.uint64(e_red & (2**64 - 1)), np.int64(e_red.bit_length())
        kind, backend, shape, _ = self._prepare({"a": a}, backend)
        self._check_result(out, kind, shape)
        flat = self._flat(a, kind, shape, self.degree, "a")
        result, user_out = self._out(out, kind, shape, [flat])
        f = self.params
        if self.degree == 1:
            fn = lambda k, x, o: k.base_pow(x, e_hi, e_lo, nbits, o, f)  # noqa: E731
        else:
            fn = lambda k, x, o: k.ext4_pow(x, e_hi, e_lo, nbits, o, f)  # noqa: E731
        if not invert:
            return self._finish(self._run(backend, kind, fn, [flat], result), user_out)
        # The inverses go through a chunk-sized temporary, the powers from it
        # into the result: a whole-array inverse first would double the memory
        # of the call, and running the power in place over the inverses would
        # hand the kernels aliased operands (Numba compiles them noalias).
        inv = self._map_call(monty.OP_INV, 1)
        xp = _backend.get_xp(kind)
        res = result.reshape(flat.shape)
        step = max(1, _chunk_words(kind, flat.size, launches=True) // self.degree)
        scratch = xp.empty((min(step, flat.shape[0]),) + flat.shape[1:], dtype=np.uint32)
        for lo in range(0, flat.shape[0], step):
            part = flat[lo:lo + step]
            tmp = self._run(backend, kind, inv, [part], scratch[:part.shape[0]])
            self._run(backend, kind, fn, [tmp], res[lo:lo + step])
        return self._finish(result, user_out)

    def __repr__(self):
        return f"zorch_nb.{self.name}"

    # Immutable, as the layers, graphs and tensor trains are: a field is a
    # dict key by value (its hash), the kernels trust its params, and its
    # extension copied them when it was built -- `KoalaBear.params =
    # BabyBear.params` made "KoalaBear" compute in BabyBear beside an
    # extension still in KoalaBear, and changed its hash inside every dict.
    def __setattr__(self, name, value):
        raise AttributeError(f"{self!r} is immutable: make another field with "
                             f"PrimeField(name, params)")

    def __delattr__(self, name):
        raise AttributeError(f"{self!r} is immutable")

    def __reduce__(self):
        if _FIELDS_BY_NAME.get(self.name) is self:  # the module's instances stay singletons
            return (_field_by_name, (self.name,))
        return (PrimeField, (self.name, self.params))

    # By value: a PrimeField made with the public constructor comes back from
    # a pickle or copy as a new object, which must still be the same field
    # (a layer that went through one was refused as "a KoalaBear layer; the
    # result is KoalaBear").  The extension's name and params are its base's.
    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self.name == other.name and self.params == other.params

    def __hash__(self):
        return hash((self.degree, self.name, self.params))


def _shape_tuple(shape):
    def dim(s):
        if not is_int(s):
            raise TypeError(f"Argument `shape` must be an int or a tuple of ints, "
                            f"not {shape!r}")
        if s < 0:
            raise ValueError(f"Argument `shape` must not have negative entries, not {shape!r}")
        return int(s)
    if isinstance(shape, np.ndarray) and shape.ndim == 1:  # as np.zeros takes one
        shape = shape.tolist()
    elif isinstance(shape, np.ndarray) and shape.ndim == 0:
        shape = shape.item()
    if isinstance(shape, (tuple, list)):
        return tuple(dim(s) for s in shape)
    return (dim(shape),)


_ELEMENTWISE_DOC = """

Parameters
----------
{names} : uint32 array of Montgomery words (NumPy or CuPy), or a NumPy uint32 scalar
    Elements of this field: ``(...)`` base, ``(..., 4)`` extension{embed}.  Any
    word, read mod p.  Python integers and canonical values are not words:
    convert them with :meth:`encode` first (a Python int is refused).
{extra}out : uint32 array, optional
    Of the result's shape, in the operands' module; written and returned.
    It may be an operand itself (written in place, no temporary; ``inv``,
    ``batch_inv`` and ``pow`` excepted, whose kernels assume no aliasing:
    there it goes through a temporary; ``div`` makes one in any case,
    ``b``'s inverses) or overlap one (the result then goes through a
    temporary).
backend : {{None, "cpu", "cupy", "numba"}}, optional
    ``None`` follows the arrays (NumPy: Numba CPU kernels; CuPy: CUDA C
    RawKernels); ``"numba"``: the Numba-CUDA kernels.

Returns
-------
uint32 array
    Canonical Montgomery words of the broadcast element shape (0-d for
    scalar operands), in the operands' module; ``out`` where given.

Raises
------
TypeError
    An operand or ``out`` that is not a uint32 array, or not in the
    operands' module; a ``backend`` that is not a string or None.{type_extra}
ValueError
    Element shapes that do not broadcast, or whose broadcast result is
    larger than any array can be; an ``out`` of another shape or read-only;
    an unknown ``backend``.{value_extra}
    Raised before anything is written.
MemoryError
    A NumPy result, or a contiguous copy of a broadcast operand, that would
    not fit in this machine's memory (a broadcast view can ask for any size).
"""

_ZERO_RAISE = "\n    A zero element to invert, named by its index."
_EXPONENT = """e : int
    The exponent: a Python or NumPy integer of any size (or a 0-d integer
    array), reduced modulo the multiplicative group order.
"""

_EMBED = ("\n    (on ``F.ext`` a base operand is embedded as ``(a, 0, 0, 0)``, see\n"
          "    :meth:`ExtensionField.as_base`)")

# help(F.mul) showed one line: the shared parameters, written once
for _name, _operands, _more in (
        ("add", "a, b", {}), ("sub", "a, b", {}), ("mul", "a, b", {}), ("neg", "a", {}),
        ("square", "a", {}), ("inv", "a", {"value_extra": _ZERO_RAISE}),
        ("div", "a, b", {"value_extra": _ZERO_RAISE.replace("element", "element of ``b``")}),
        ("batch_inv", "a", {"value_extra": _ZERO_RAISE}),
        ("pow", "a", {"extra": _EXPONENT,
                      "type_extra": "\n    An exponent ``e`` that is not an integer.",
                      "value_extra": _ZERO_RAISE.replace("to invert", "to invert (e < 0)")})):
    _method = getattr(_FieldBase, _name)
    if _method.__doc__:  # (None under python -OO)
        _fields = {"extra": "", "type_extra": "", "value_extra": "",
                   "embed": _EMBED if "b" in _operands else ""}
        _method.__doc__ = _method.__doc__.rstrip() + textwrap.indent(
            _ELEMENTWISE_DOC.format(names=_operands, **{**_fields, **_more}), " " * 8)


class PrimeField(_FieldBase):
    """A 31-bit prime field with Montgomery-form ``uint32`` elements.

    Use the instances :data:`KoalaBear` and :data:`BabyBear`; ``F.ext`` is the
    degree-4 extension ``F_p[x] / (x^4 - W)``.  A field is immutable: setting
    or deleting an attribute raises ``AttributeError``.

    Attributes
    ----------
    name : str
        The field's name (``"KoalaBear"`` for :data:`KoalaBear`); its repr is ``zorch_nb.<name>``.
    ext : ExtensionField
        The degree-4 extension ``F_p[x] / (x^4 - W)`` of this field.
    degree : int
        1 (the extension's is 4).
    p : int
        The prime.
    one : numpy.uint32
        Montgomery word of 1 (``2**32 mod p``).
    W : int
        Non-residue defining the extension.
    params : FieldParams
        All constants (see :mod:`zorch_nb.kernels.field_params`).

    Notes
    -----
    Every operation (``add``, ``sub``, ``mul``, ``div``, ``neg``,
    ``square``, ``inv``, ``batch_inv``, ``pow``, ``mle_fold``,
    ``eq_table``, ``sum``, and the same on ``F.ext``) takes ``out`` (after
    its operands, or as a keyword; ``sum``: a keyword) and a keyword-only
    ``backend`` (``mle_eval``: ``backend`` only):

    ``out``
        A writeable uint32 array of the result's shape in the operands' module,
        written and returned.  It may be an operand itself (``E.add(acc, x,
        out=acc)`` is written in place, with no temporary; ``inv``,
        ``batch_inv`` and ``pow``, whose kernels assume no aliasing, write it
        through a temporary, and ``div`` makes one in any case, ``b``'s
        inverses) or overlap one (the result then goes through a temporary).
    ``backend``
        ``None`` (follow the arrays: NumPy -> Numba CPU, CuPy -> CuPy
        RawKernels), ``"cpu"``, ``"cupy"`` or ``"numba"`` (Numba-CUDA).

    Results are arrays, never scalars: operands that are NumPy scalars or
    0-d arrays give a 0-d array (``F.mul(np.uint32(5), np.uint32(6)).shape
    == ()``).  A base array may have any shape, so extension-shaped data
    ``(..., 4)`` passed to a base operation is multiplied coefficient by
    coefficient, without an error: extension elements go through ``F.ext``.
    """

    degree = 1

    def __init__(self, name: str, params: FieldParams):
        check_field("PrimeField", params, "params")  # the kernels rely on its constants
        if not isinstance(name, str) or not name:
            raise TypeError(f"Argument `name` must be a non-empty str, not {name!r}")
        shipped = FIELDS.get(name.lower())
        if shipped is not None and shipped != params:
            # it would print as that field everywhere (layers, graphs) and
            # compute in another one
            raise ValueError(f"Argument `name` is {name!r}, a name of the {shipped.name!r} "
                             f"field, but `params` are the {params.name!r} field's: name "
                             f"a field after its params")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "ext", ExtensionField(self))

    @property
    def one(self):
        """Montgomery word of 1 (``2**32 mod p``), a NumPy uint32 scalar."""
        return np.uint32(self.params.r_mod_p)


class ExtensionField(_FieldBase):
    """Degree-4 extension ``F_p[x] / (x^4 - W)`` of a :class:`PrimeField`.

    Elements are ``uint32`` arrays with a trailing axis of 4 Montgomery words
    (coefficients of ``1, x, x^2, x^3``).  Binary operations accept a base
    field array on either side; it is embedded as ``(a, 0, 0, 0)``.

    Operand rule: an operand whose last axis has length 4 is read as
    extension elements, any other as base elements.  A base array whose last
    axis happens to be 4 is therefore ambiguous: mark it with :meth:`as_base`
    (read in place) or embed it with :meth:`from_base` (a copy).  Immutable,
    as its base field.

    Attributes
    ----------
    base : PrimeField
        The field extended (``F.ext.base is F``).
    name : str
        The base field's name with ``".ext"`` appended (``"KoalaBear.ext"``).
    degree : int
        4.
    one : numpy.ndarray
        The element 1, ``(2**32 mod p, 0, 0, 0)``: a read-only ``(4,)`` uint32 array.
    p, W, params
        The base field's (see :class:`PrimeField`).
    """

    degree = 4

    def __init__(self, base: PrimeField):
        if not isinstance(base, PrimeField):
            # an extension of an extension would print as a tower (".ext.ext")
            # and compute in the same degree-4 field
            what = ("it is an extension already: this is the only degree-4 extension "
                    f"of {base.base!r}, `{base!r}`" if isinstance(base, ExtensionField)
                    else f"not {type(base).__name__}{_stale_field_hint(base)}")
            raise TypeError(f"Argument `base` must be a PrimeField (e.g. KoalaBear); {what}")
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "name", base.name + ".ext")
        object.__setattr__(self, "params", base.params)
        # the words of `one`, over immutable bytes: no view of them can be made
        # writeable (a new array per call cost ~1.5 us)
        words = np.array([base.params.r_mod_p, 0, 0, 0], dtype=np.uint32).tobytes()
        object.__setattr__(self, "_one", np.frombuffer(words, dtype=np.uint32))

    def from_base(self, a):
        """Embed base-field words ``a`` (any shape ``S``) as ``(a, 0, 0, 0)``, shape ``S + (4,)``.

        Words ``>= p`` are reduced, as every result is canonical.

        Parameters
        ----------
        a : uint32 array of Montgomery words (NumPy or CuPy), or a NumPy uint32 scalar
            Base-field elements of any shape ``S``; a trailing axis of 4 is
            base words too.

        Returns
        -------
        uint32 array
            A new ``S + (4,)`` array of extension elements, in ``a``'s module.

        Raises
        ------
        TypeError
            ``a`` not a uint32 array (an ``as_base`` mark included).
        ValueError
            A broadcast view ``a`` whose embedding is larger than any array can be.
        MemoryError
            A NumPy broadcast view ``a`` whose embedding exceeds this machine's memory.
        """
        _check_words(a, "a")
        a = np.asarray(a) if isinstance(a, np.generic) else a
        kind = "numpy" if _backend.array_kind(a) == "numpy" else "cupy"
        xp = _backend.get_xp(kind)
        _check_size(tuple(a.shape) + (4,), "the extension elements of `a`", host=xp is np)
        with _device_of(a, kind):  # (a CuPy array of another device: embedded there)
            out = xp.zeros(tuple(a.shape) + (4,), dtype=np.uint32)
            xp.remainder(_backend.to_module(a, kind), np.uint32(self.p), out=out[..., 0])
        return out

    def as_base(self, a) -> BaseOperand:
        """Mark base-field words ``a`` as base elements for one of :meth:`add`,
        :meth:`sub`, :meth:`mul`, :meth:`div`, whatever ``a``'s last axis.

        Without the mark an operand whose last axis has length 4 is read as
        extension elements, so base words of shape ``(..., 4)`` -- four base
        values, or an MLE halved down to four entries -- would silently be
        multiplied as one extension element.  ``E.mul(E.as_base(a), x)`` is
        byte for byte ``E.mul(E.from_base(a), x)``, without the embedding's
        copy (four times ``a``'s words): the marked words are read in place.
        The mark holds ``a`` itself (no copy) and is accepted by those four
        operations and by :meth:`eq_table` (whose point of shape ``(4,)``,
        four base coordinates or one extension one, must be marked or
        reshaped to ``(1, 4)``) and :meth:`mle_eval` only.

        Parameters
        ----------
        a : uint32 array of Montgomery words (NumPy or CuPy)
            Base-field elements of any shape.

        Returns
        -------
        BaseOperand
            The mark: ``a`` itself (``.words``) and this extension's base field
            (``.field``); an operation of another field's extension refuses it.

        Raises
        ------
        TypeError
            ``a`` not a uint32 array (a list, another dtype, a mark already).

        Examples
        --------
        >>> E = KoalaBear.ext
        >>> a = KoalaBear.encode([1, 2, 3, 4])           # four base elements
        >>> E.mul(E.as_base(a), E.random(4, seed=0)).shape
        (4, 4)
        """
        _check_words(a, "a")
        return BaseOperand(a, self.base)

    @property
    def one(self):
        """The element 1, ``(R, 0, 0, 0)``: a read-only ``(4,)`` uint32 array."""
        return self._one.view()  # (a view each: reshaping one in place stays local)

    def __reduce__(self):
        return (getattr, (self.base, "ext"))


KoalaBear = PrimeField("KoalaBear", KOALABEAR)
BabyBear = PrimeField("BabyBear", BABYBEAR)


_FIELDS_BY_NAME = {"KoalaBear": KoalaBear, "BabyBear": BabyBear}


def _field_by_name(name):
    return _FIELDS_BY_NAME[name]
