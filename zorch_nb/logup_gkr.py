"""LogUp-GKR fractional-sum circuit: dense and jagged layers, transitions, pyramids.

A *layer* is four equal-length MLEs ``n0, n1, d0, d1`` of Montgomery words:
index ``i`` carries the two child fractions ``n0[i]/d0[i]`` and
``n1[i]/d1[i]``.  A transition folds one row variable with the fraction sum
``a/b + c/d = (a d + c b) / (b d)``; repeating it builds the binary tree of
fractions (the *pyramid*) a LogUp-GKR prover later walks with sumchecks.

* :class:`GkrLayer` -- dense layout, ``L = 2**nv`` with the batch variables in
  the high bits: ``i = b * 2**nrv + r``.
* :class:`JaggedGkrLayer` -- one segment of ``row_counts[b]`` rows per batch
  element, stored batch-major in a buffer of capacity ``width``; slots past
  ``sum(row_counts)`` are dead (all zero) and never read.

MLEs are base ``(L,)`` or extension ``(L, 4)`` uint32 arrays (see
:mod:`zorch_nb.fields`); the numerator pair and the denominator pair may live
in different fields.  A fold output is extension wherever any of its inputs is,
and the result is byte-identical to folding an all-extension copy.

Backends follow the arrays (see :mod:`zorch_nb._backend`): NumPy runs Numba CPU
kernels, CuPy runs CUDA C RawKernels, ``backend="numba"`` runs the Numba-CUDA
kernels.  All give identical bytes.  Every transition writes one new buffer
(one allocation per layer; ``out=`` overwrites an earlier result instead)
and, on the GPU, never synchronizes with the host:
a jagged schedule that lives on the device is consumed on the device.

Nothing is inverted, so nothing checks the denominators: a zero denominator
(in LogUp, a challenge that collides with a looked-up value) is folded like
any other word.  A floor denominator is the product of the leaf denominators
below it, so it is zero exactly when one of them is; test the floor (or the
leaves) where that matters.

Examples
--------
>>> import numpy as np
>>> from zorch_nb import KoalaBear as F
>>> from zorch_nb.logup_gkr import GkrLayer, build_pyramid, extract_outputs
>>> n = F.encode([1, 2, 3, 4]); d = F.encode([5, 6, 7, 8])
>>> layer = GkrLayer(n, n, d, d, num_batch_variables=0)
>>> floor = build_pyramid(layer)[-1]
>>> out = extract_outputs(floor)
>>> F.decode(out.denominator)       # (5*5)(6*6) and (7*7)(8*8)
array([ 900, 3136], dtype=uint32)
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import numpy as np

from . import _backend
from ._ints import is_int
from ._text import elided_list
from .fields import KoalaBear, PrimeField, _check_words, _int_array, _stale_field_hint
from .kernels.launch_checks import as_int, check_gkr_disjoint

__all__ = ["GkrLayer", "JaggedGkrLayer", "LogUpGkrOutput", "JaggedStep", "layer_transition",
           "build_pyramid", "extract_outputs", "jagged_layer_transition",
           "build_jagged_pyramid", "extract_jagged_outputs", "halving_schedule"]

_MLE_NAMES = ("numerator_0", "numerator_1", "denominator_0", "denominator_1")
_INT32_MAX = 2**31 - 1


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------

def _describe(x) -> str:
    if isinstance(x, np.generic):
        return f"a NumPy scalar ({type(x).__name__}); pass a 1-D array"
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return f"{type(x).__module__.split('.')[0]} array of dtype {x.dtype} and shape {tuple(x.shape)}"
    return type(x).__name__


def _is_ext(x) -> bool:
    return x.ndim == 2


def _check_field(field) -> None:
    if not isinstance(field, PrimeField):
        extra = ("; pass the prime field (e.g. KoalaBear), extension-ness comes from the "
                 "array shapes" if hasattr(field, "base") else _stale_field_hint(field))
        raise TypeError(f"Argument `field` must be a zorch_nb PrimeField (KoalaBear or "
                        f"BabyBear), not {field!r}{extra}")


def _check_mles(obj, length: str = "L") -> tuple:
    """Validate the four MLEs of a layer (``length``: what the error calls their
    length); return ``(length, kind)``."""
    arrays = {name: getattr(obj, name) for name in _MLE_NAMES}
    for name, x in arrays.items():
        _check_word_array(x, name, length)
    for a, b, what in (("numerator_0", "numerator_1", "numerator"),
                       ("denominator_0", "denominator_1", "denominator")):
        if arrays[a].ndim != arrays[b].ndim:
            raise ValueError(f"Argument `{b}` must be in the same field as `{a}` (the "
                             f"{what} pair is either both base (L,) or both extension "
                             f"(L, 4)), not shapes {tuple(arrays[a].shape)} and "
                             f"{tuple(arrays[b].shape)}")
    lengths = {name: int(x.shape[0]) for name, x in arrays.items()}
    if len(set(lengths.values())) != 1:
        desc = ", ".join(f"`{n}` has {v}" for n, v in lengths.items())
        raise ValueError(f"the four MLEs must have the same length, not: {desc}")
    # (a layer may be built off its device: the transitions check the current one)
    kind, _ = _backend.resolve(arrays, None, current=False)
    _check_field(obj.field)
    obj._remember_shapes()
    _remember_device(obj, all(_backend.is_cupy_ndarray(x) and x.flags.c_contiguous
                              for x in arrays.values()))
    return lengths["numerator_0"], kind


def _check_int(value, name: str, lo: int, hi: int | None = None) -> int:
    # anything usable as an index (ints, NumPy integers, 0-d integer arrays), not bools
    return as_int(f"Argument `{name}`", value, lo, hi)


def _is_device(x) -> bool:
    return _backend.array_kind(x) in ("cupy", "cuda")


def _row_counts(counts, name: str, data_kind: str, data_device=None):
    """Normalize a row-count vector: a read-only host int32 array or a device
    int32 array (on ``data_device``, the MLEs' GPU, where that is known)."""
    if _is_device(counts):
        if data_kind == "numpy":
            raise TypeError(f"Argument `{name}` is a GPU array but the MLEs are NumPy "
                            f"arrays; pass host counts (a sequence or NumPy array)")
        cp = _backend.get_xp("cupy")
        counts = cp.asarray(counts)
        # (the kernels would read them from the MLEs' device: an illegal address)
        _backend.check_same_device(name, _backend.device_of(counts), data_device, "the MLEs")
        if counts.dtype != np.int32 or counts.ndim != 1:
            raise TypeError(f"Argument `{name}` must be a 1-D int32 array, not "
                            f"{_describe(counts)}")
        # The kernels index the counts as a plain int array (``counts.data.ptr``):
        # a strided view (``m[:, 0]``) would be read as the wrong counts.
        return cp.ascontiguousarray(counts)
    arr = _int_array(counts, name)
    if arr.ndim != 1:
        raise ValueError(f"Argument `{name}` must be 1-D (one count per batch element), "
                         f"not shape {arr.shape}")
    # (an int32 array cannot exceed the upper bound: one reduction, not two)
    if arr.size and (arr.min() < 0 or (arr.dtype != np.int32 and arr.max() > _INT32_MAX)):
        s = int(np.argmax((arr < 0) | (arr > _INT32_MAX)))
        raise ValueError(f"Argument `{name}` must hold counts in [0, 2**31), but "
                         f"{name}[{s}] = {arr[s]}")
    return _frozen_int32(arr)


def _frozen_int32(arr):
    """A read-only int32 copy of ``arr`` that no one can make writeable: its
    memory is a ``bytes`` object, so neither it nor any ``.base`` reachable
    from a view of it takes ``setflags(write=True)`` (an array owning its
    memory would, and the kernels trust checked counts)."""
    return np.frombuffer(arr.astype(np.int32).tobytes(), dtype=np.int32).reshape(arr.shape)


def _check_word_array(x, name: str, length: str = "L", host: bool = False) -> None:
    """A plain uint32 array ``(length,)`` (base) or ``(length, 4)`` (extension);
    NumPy or CuPy, NumPy only where ``host``."""
    if isinstance(x, np.generic) or (host and not isinstance(x, np.ndarray)):
        raise TypeError(f"Argument `{name}` must be a uint32 array of Montgomery words "
                        f"({'NumPy' if host else 'NumPy or CuPy'}), not {_describe(x)}")
    if isinstance(x, np.matrix):
        raise TypeError(f"Argument `{name}` must be a plain uint32 array, not a matrix "
                        f"(its shape rules differ); pass `np.asarray({name})`")
    _check_words(x, name)  # masked arrays, array kind, dtype
    if not isinstance(x, np.ndarray) and not x.dtype == np.uint32:
        # another library's CUDA array whose dtype is its own (torch's): the layer
        # keeps its arrays and compares their dtype with NumPy's on every use
        raise TypeError(f"Argument `{name}` has dtype {x.dtype}, not a NumPy dtype; pass "
                        f"`cupy.asarray({name})` (a view, no copy)")
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[1] == 4)):
        raise ValueError(f"Argument `{name}` must have shape ({length},) (base field) or "
                         f"({length}, 4) (extension), not {tuple(x.shape)}")


def _check_leaves(x, name: str, even: bool = True, host: bool = False) -> None:
    """uint32 leaves ``(m,)`` / ``(m, 4)``; ``m`` even and >= 2 where ``even``."""
    _check_word_array(x, name, "m", host)
    if even and (x.shape[0] < 2 or x.shape[0] % 2):
        raise ValueError(f"Argument `{name}` must hold an even number (>= 2) of leaves, "
                         f"not {x.shape[0]}")


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


# ---------------------------------------------------------------------------
# data classes
# ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class _Layer:
    """The four MLEs every layer has (see :class:`GkrLayer`)."""

    numerator_0: Any
    numerator_1: Any
    denominator_0: Any
    denominator_1: Any

    @property
    def mles(self) -> tuple:
        """``(numerator_0, numerator_1, denominator_0, denominator_1)``.

        Raises ``ValueError`` if an MLE's shape or dtype was changed in place
        since the layer was checked (the kernels trust the checked ones).
        """
        m = self.numerator_0, self.numerator_1, self.denominator_0, self.denominator_1
        if ((m[0].shape, m[1].shape, m[2].shape, m[3].shape) != self.__dict__["_shapes"]
                or not (m[0].dtype == m[1].dtype == m[2].dtype == m[3].dtype == np.uint32)):
            raise ValueError(f"an MLE of this layer changed shape or dtype after the layer "
                             f"was built (now {[(tuple(x.shape), str(x.dtype)) for x in m]}, "
                             f"checked {[tuple(s) for s in self.__dict__['_shapes']]} of "
                             f"uint32); build a new layer")
        return m

    def __repr__(self):
        # A summary: the dataclass repr printed all four MLEs (~1 KB for 16 rows).
        # Never raises, even on an MLE reshaped in place (``mles`` would).
        def part(x, y):
            kind = "extension" if getattr(x, "ndim", 1) == 2 else "base"
            return f"{kind} {tuple(x.shape)}" + ("" if x.shape == y.shape else
                                                 f"/{tuple(y.shape)}")
        layout = (f"numerators {part(self.numerator_0, self.numerator_1)}, denominators "
                  f"{part(self.denominator_0, self.denominator_1)}, "
                  f"{_backend.array_kind(self.numerator_0)}")
        return f"<{type(self).__name__} {self.field.name}: {self._describe_rows()}, {layout}>"

    def _remember_shapes(self):
        # Not a dataclass field: kept out of repr/eq; checked by ``mles``.
        self.__dict__["_shapes"] = (self.numerator_0.shape, self.numerator_1.shape,
                                    self.denominator_0.shape, self.denominator_1.shape)

    def __reduce__(self):
        # Copies and unpickled layers go through __init__ again: every check
        # reruns and host row counts come back read-only (a plain dataclass
        # copy would hand out writeable counts the kernels trust).
        return (_rebuild_layer, (type(self), {f.name: getattr(self, f.name)
                                              for f in dataclasses.fields(self)}))


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class GkrLayer(_Layer):
    """A dense layer of the fraction tree.

    Parameters
    ----------
    numerator_0, numerator_1, denominator_0, denominator_1 : array
        uint32 Montgomery words, all of length ``L = 2**nv``; each pair base
        ``(L,)`` or extension ``(L, 4)`` (numerators and denominators may
        differ).  NumPy or CuPy, all in one module and on one device (its
        transitions run on CuPy's current device, which must be that one).
    num_batch_variables : int, optional
        ``nbv`` in ``[0, nv]`` (default 0: one batch element): the high
        ``nbv`` index bits select the batch element, the low ``nrv = nv -
        nbv`` bits the row.
    field : PrimeField, optional
        :data:`~zorch_nb.KoalaBear` (default) or :data:`~zorch_nb.BabyBear`.
        The words carry no field: BabyBear data needs ``field=BabyBear``
        (under the default it is folded, silently, as KoalaBear words).

    Notes
    -----
    Row ``i`` holds two leaves of the fraction tree: leaf ``2 i`` is
    ``numerator_0[i] / denominator_0[i]`` and leaf ``2 i + 1`` is
    ``numerator_1[i] / denominator_1[i]`` (:meth:`from_leaves` builds a layer
    from the ``2 L`` leaves in that order).

    Raises
    ------
    TypeError
        Non-uint32 data, non-array data, arrays from different modules, a
        field that is not a PrimeField, a ``num_batch_variables`` that is not
        an integer (a bool included).
    ValueError
        Different lengths, a length that is not a power of two, a wrong
        trailing axis, mixed fields inside a pair, ``num_batch_variables`` out
        of range, arrays on different devices.
    """

    num_batch_variables: int = 0
    field: PrimeField = KoalaBear

    @classmethod
    def from_leaves(cls, numerators, denominators, num_batch_variables: int = 0,
                    field: PrimeField = KoalaBear) -> "GkrLayer":
        """The layer whose leaf ``j`` is ``numerators[j] / denominators[j]``.

        Leaf ``2 i + c`` becomes child ``c`` of row ``i``.  The children are
        copied into four contiguous arrays (large NumPy ones: views of one
        new buffer, placed as a transition's outputs); the inputs are not kept.

        Parameters
        ----------
        numerators, denominators : array
            uint32 words of ``2 L`` leaves each, ``L`` a power of two: ``(2L,)``
            base or ``(2L, 4)`` extension (the two may differ); NumPy or CuPy.
        num_batch_variables : int, optional
            As in :class:`GkrLayer`, in ``[0, log2(L)]``.
        field : PrimeField, optional
            As in :class:`GkrLayer`.

        Returns
        -------
        GkrLayer
            ``L`` rows, its four MLEs new contiguous arrays in the leaves' module.

        Raises
        ------
        TypeError
            Leaves that are not uint32 arrays, or in different modules; a
            ``num_batch_variables`` that is not an integer; a ``field`` that is not a PrimeField.
        ValueError
            A leaf count that is not twice a power of two; unequal counts of numerators and
            denominators; a wrong trailing axis; ``num_batch_variables`` out of range.
        """
        for name, x in (("numerators", numerators), ("denominators", denominators)):
            _check_leaves(x, name)
            if not _is_pow2(x.shape[0] // 2):
                raise ValueError(f"Argument `{name}` must hold 2 L leaves with L a power of "
                                 f"two, not {x.shape[0]}; pad with neutral leaves 0 / 1 "
                                 f"(they change no sum), or take "
                                 f"JaggedGkrLayer.from_segments([(numerators, "
                                 f"denominators)]), which pads any count itself")
        if numerators.shape[0] != denominators.shape[0]:
            raise ValueError(f"Arguments `numerators` and `denominators` must hold the same "
                             f"number of leaves, not {numerators.shape[0]} and "
                             f"{denominators.shape[0]}")
        # the constructor's other checks, before a copy of a large layer
        kind, _ = _backend.resolve({"numerators": numerators, "denominators": denominators},
                                   None, current=False)
        _check_field(field)
        length = numerators.shape[0] // 2
        _check_int(num_batch_variables, "num_batch_variables", 0, length.bit_length() - 1)
        children = (numerators[0::2], numerators[1::2], denominators[0::2], denominators[1::2])
        exts = tuple(x.ndim == 2 for x in children)
        if kind != "numpy":  # copies (a one-row slice is contiguous already:
            # ascontiguousarray would hand back a view of the caller's array)
            mles = [x.copy() for x in children]
        elif _word_plan(length, exts)[1]:
            # large MLEs into a transition's output buffer, on pages of their
            # own, which the first fold reads faster (see _word_plan)
            mles = _output_views(np, _output_buffer(np, length, exts), length, exts)
            for mle, x in zip(mles, children):
                mle[...] = x
        else:  # plain C-ordered copies, as the large ones (not a subclass's)
            mles = [np.array(x, order="C") for x in children]
        return cls(*mles, num_batch_variables, field)

    def __post_init__(self):
        length, _ = _check_mles(self)
        if not _is_pow2(length):
            raise ValueError(f"Arguments `numerator_0` ... `denominator_1` must have a "
                             f"power-of-two length (L = 2**nv), not {length}")
        nv = length.bit_length() - 1
        object.__setattr__(self, "num_batch_variables",
                           _check_int(self.num_batch_variables, "num_batch_variables", 0, nv))

    @property
    def num_variables(self) -> int:
        """``nv = log2(L)``."""
        # the checked length (``mles`` refuses arrays reshaped in place since)
        return int(self.__dict__["_shapes"][0][0]).bit_length() - 1

    @property
    def num_row_variables(self) -> int:
        """``nrv = nv - nbv``: transitions left before the floor."""
        return self.num_variables - self.num_batch_variables

    def _describe_rows(self) -> str:
        return (f"L = {self.__dict__['_shapes'][0][0]} (nv = {self.num_variables}, "
                f"num_batch_variables = {self.num_batch_variables})")


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class JaggedGkrLayer(_Layer):
    """A jagged layer: one segment of ``row_counts[b]`` rows per batch element.

    Parameters
    ----------
    numerator_0, numerator_1, denominator_0, denominator_1 : array
        uint32 Montgomery words of length ``width`` (the capacity), base
        ``(width,)`` or extension ``(width, 4)`` per pair.  Rows of batch 0,
        then batch 1, ...; slots past ``sum(row_counts)`` are dead: never
        read, so any words may be there (:meth:`from_segments` and the
        transitions write zeros in all four MLEs).
    row_counts : sequence of int, NumPy int array, or CuPy int32 array
        One count per batch element; the length ``nb`` must be a power of two.
        Host counts are checked (``>= 0``, ``sum <= width``) and stored as a
        read-only int32 array; a device array (CuPy data only) is kept as is
        and is the caller's obligation (checking it would synchronize):
        device counts outside the contract give unspecified words in the
        results, but no kernel reads or writes outside the layers' arrays.
    field : PrimeField, optional
        :data:`~zorch_nb.KoalaBear` (default) or :data:`~zorch_nb.BabyBear`;
        as for :class:`GkrLayer`, BabyBear data needs ``field=BabyBear``.

    Raises
    ------
    TypeError
        MLEs as for :class:`GkrLayer`; ``row_counts`` holding non-integers (or an
        iterator), a device array that is not 1-D int32 or beside NumPy MLEs.
    ValueError
        MLEs as for :class:`GkrLayer` (any width allowed); ``row_counts`` of a length not a
        power of two; host counts not 1-D, outside ``[0, 2**31)`` or summing above ``width``.
    """

    row_counts: Any
    field: PrimeField = KoalaBear

    @classmethod
    def from_segments(cls, segments, width: int | None = None,
                      field: PrimeField = KoalaBear) -> "JaggedGkrLayer":
        """A layer from the leaves of each batch element.

        ``segments`` is a sequence of ``nb`` (a power of two) pairs
        ``(numerators, denominators)`` of host uint32 words, ``(m_b,)`` or
        ``(m_b, 4)`` (every segment in the same fields).  Segment ``b`` gets
        ``ceil(m_b / 2)`` rows, leaf ``2 j + c`` as child ``c`` of row ``j``;
        an odd segment's last row gets the neutral fraction ``0 / 1`` as its
        second child, so every segment's fraction sum is unchanged.  A
        segment may be empty (no rows; its sum is the neutral ``0 / 1``),
        spelled in its fields like the others: ``(0,)`` base, ``(0, 4)``
        extension.  ``width`` (default: the rows' total) adds dead slots
        (zero); ``field`` as in the constructor.

        Parameters
        ----------
        segments : iterable of (numerators, denominators) pairs
            ``nb`` pairs (tuples or lists), ``nb`` a power of two, of NumPy
            uint32 words ``(m_b,)`` or ``(m_b, 4)``.
        width : int, optional
            The capacity, at least the rows' total and at most ``2**31 - 1``.
        field : PrimeField, optional

        Returns
        -------
        JaggedGkrLayer
            NumPy MLEs of ``width`` slots (views of one new buffer, placed as a
            transition's outputs), host ``row_counts[b] = ceil(m_b / 2)``.

        Raises
        ------
        TypeError
            ``field`` not a PrimeField; ``segments`` not iterable, or an entry not a pair;
            leaves not NumPy uint32 arrays; ``width`` not an integer.
        ValueError
            ``nb`` not a power of two; leaves of a wrong shape, in other fields than segment
            0's, or a pair of unequal lengths; ``width`` out of range or below the rows' total.
        MemoryError
            A layer of ``width`` slots larger than this machine's memory.
        """
        _check_field(field)  # before its constants are read below
        try:
            segments = list(segments)
        except TypeError:
            raise TypeError(f"Argument `segments` must be a sequence of (numerators, "
                            f"denominators) pairs, not {type(segments).__name__}") from None
        if not _is_pow2(len(segments)):
            raise ValueError(f"Argument `segments` must hold a power-of-two number of "
                             f"segments (one per batch element), not {len(segments)}")
        for b, seg in enumerate(segments):
            if not (isinstance(seg, (tuple, list)) and len(seg) == 2):
                raise TypeError(f"Argument `segments[{b}]` must be a (numerators, "
                                f"denominators) pair, not {type(seg).__name__}")
            for name, x in zip(("numerators", "denominators"), seg):
                _check_leaves(x, f"segments[{b}] {name}", even=False, host=True)
                first = segments[0][name == "denominators"]
                if x.ndim != first.ndim:
                    # both shapes: the culprit may be segment 0 (an empty one spelled (0,))
                    raise ValueError(f"Argument `segments[{b}] {name}` must be in the field of "
                                     f"segment 0's, shape {tuple(first.shape)} (base (m,) or "
                                     f"extension (m, 4); an empty extension segment is "
                                     f"(0, 4)), not shape {tuple(x.shape)}")
            if seg[0].shape[0] != seg[1].shape[0]:
                raise ValueError(f"Argument `segments[{b}]` must hold as many numerators as "
                                 f"denominators, not {seg[0].shape[0]} and {seg[1].shape[0]}")
        rows = [(int(n.shape[0]) + 1) // 2 for n, _ in segments]
        total = sum(rows)
        if width is not None and _check_int(width, "width", 0, _INT32_MAX) < total:
            raise ValueError(f"Argument `width` must be >= {total}, the rows the segments "
                             f"need, not {width}")
        width = total if width is None else int(width)
        words = width * sum(4 if seg.ndim == 2 else 1 for seg in segments[0]) * 2
        _refuse_beyond_memory(4 * words, "Argument `width`", "the layer needs")
        one = field.params.r_mod_p
        # one zeroed buffer placed as a transition's outputs (large MLEs on
        # pages of their own, which the first fold reads faster: _word_plan)
        exts = tuple(segments[0][k].ndim == 2 for k in (0, 0, 1, 1))
        allocate, spaced, places = _word_plan(width, exts)
        outs = iter(_arrays_in(_numpy_words(allocate, spaced, zeros=True), places))
        mles = []
        for k in range(2):  # numerators, denominators
            ext = exts[2 * k]
            for c in range(2):  # child 0, child 1
                out = next(outs)
                at = 0
                for seg, r in zip(segments, rows):
                    leaves = seg[k][c::2]
                    out[at:at + leaves.shape[0]] = leaves
                    if leaves.shape[0] < r and k == 1:  # the odd segment's neutral 0/1
                        out[at + r - 1] = (one, 0, 0, 0) if ext else one
                    at += r
                mles.append(out)
        return cls(*mles, rows, field)

    def __post_init__(self):
        width, kind = _check_mles(self, "width")
        counts = _row_counts(self.row_counts, "row_counts", kind, _data_device(self))
        nb = int(counts.shape[0])
        if not _is_pow2(nb):
            raise ValueError(f"Argument `row_counts` must have a power-of-two length "
                             f"(number of batch elements), not {nb}")
        if isinstance(counts, np.ndarray) and int(counts.sum(dtype=np.int64)) > width:
            raise ValueError(f"Argument `row_counts` must sum to at most the width {width} "
                             f"of the MLEs, not {int(counts.sum(dtype=np.int64))}")
        _keep_counts(self, counts)

    @property
    def _counts(self):
        # The checked counts the kernels trust: a private view (see
        # _keep_counts), so an in-place ``.shape =`` / ``.dtype =`` on
        # ``row_counts``, its base or the caller's array changes nothing here,
        # and ``setflags(write=True)`` is refused on it and on every ``.base``
        # (host counts live in a bytes object: see _frozen_int32).
        return self.__dict__["_checked_counts"]

    @property
    def num_batches(self) -> int:
        """``nb``: number of batch elements (segments)."""
        return int(self._counts.shape[0])

    @property
    def num_batch_variables(self) -> int:
        """``log2(nb)``."""
        return self.num_batches.bit_length() - 1

    @property
    def width(self) -> int:
        """Capacity of the MLEs (live rows plus dead slack)."""
        return int(self.__dict__["_shapes"][0][0])  # the checked width

    @property
    def counts_on_host(self) -> bool:
        """Whether ``row_counts`` is a host array (so it can be checked)."""
        return isinstance(self._counts, np.ndarray)

    def _describe_rows(self) -> str:
        nb, c = self.num_batches, self._counts
        if not self.counts_on_host:  # (reading device counts would synchronize)
            counts = "row counts on the device"
        else:
            counts = (f"row_counts {elided_list(c.tolist(), 3, 2)}"
                      + ("" if nb <= 8 else f" (sum {int(c.sum(dtype=np.int64))})"))
        return f"width {self.width}, {nb} segment{'s' * (nb != 1)}, {counts}"


def _keep_counts(layer, counts) -> None:
    """Store checked counts: a private view the kernels trust, and another view
    as ``row_counts``.

    NumPy lets a caller set ``.shape`` / ``.dtype`` of an array in place (of
    ``row_counts``, or of its ``.base``, the owner), CuPy ``.shape``; the
    transitions run their launchers unchecked, so no object a caller can
    reach may be the one they read.  A view's metadata is its own.
    """
    layer.__dict__["_checked_counts"] = counts.view()
    object.__setattr__(layer, "row_counts", counts.view())


def _rebuild_layer(cls, values):
    return cls(**values)


def _trusted(cls, *values):
    """A layer built from kernel outputs, without re-running ``__post_init__``.

    Outputs of a transition satisfy every invariant by construction (fresh
    contiguous uint32 buffers, checked counts), and re-validating them cost
    ~4 us per transition -- a third of the dispatch time of a small layer.
    """
    obj = object.__new__(cls)
    obj.__dict__.update(zip(_FIELDS[cls], values))  # frozen: no __setattr__
    if cls is JaggedGkrLayer:
        _keep_counts(obj, obj.row_counts)
    obj._remember_shapes()
    # (kernel outputs are contiguous views of one buffer: NumPy or plain CuPy)
    _remember_device(obj, _backend.is_cupy_ndarray(values[0]))
    return obj


def _remember_device(layer, plain_cupy: bool) -> None:
    """Note whether ``layer``'s MLEs are C-contiguous cupy.ndarrays on one
    device, and which (see :func:`_as_it_is_on_cupy`)."""
    layer.__dict__["_plain_cupy"] = plain_cupy
    # (cupy.ndarrays: the pointer's id, ~0.03 us; device_of takes ~0.2, per transition)
    layer.__dict__["_device"] = layer.numerator_0.data.device_id if plain_cupy else None


_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (GkrLayer, JaggedGkrLayer)}


@dataclasses.dataclass(frozen=True, eq=False)
class LogUpGkrOutput:
    """The floor of a pyramid with the two children interleaved.

    ``numerator = [n0[0], n1[0], n0[1], n1[1], ...]`` (length ``2 * nb``; an
    extension array has shape ``(2 nb, 4)``), ``denominator`` likewise.  For
    batch element ``b`` the fraction sum of all its leaves equals
    ``numerator[2b]/denominator[2b] + numerator[2b+1]/denominator[2b+1]``.
    It behaves as the pair ``(numerator, denominator)``: ``num, den =
    extract_outputs(floor)``, ``out[0]``, ``len(out) == 2``.  ``field`` is
    the floor's (its words carry none); :meth:`batch_sums` adds each batch
    element's two fractions.
    """

    numerator: Any
    denominator: Any
    field: PrimeField = KoalaBear

    def __post_init__(self):
        # (the words are checked where they are used, batch_sums; a wrong
        # field failed there too, far from the line that made it)
        _check_field(self.field)

    def batch_sums(self) -> tuple:
        """Each batch element's two output fractions added into one.

        ``(num, den)`` with ``num[b] = n[2b] d[2b+1] + n[2b+1] d[2b]`` and
        ``den[b] = d[2b] d[2b+1]`` (``n``, ``d`` the outputs), so ``num[b] /
        den[b]`` is the sum of all of batch element ``b``'s leaves: a LogUp
        argument balances where ``num[b]`` is zero and ``den[b]`` is not.

        Returns
        -------
        (num, den) : tuple of uint32 arrays
            Each ``(nb,)`` base or ``(nb, 4)`` extension, extension wherever an
            operand is (base words are read as base elements, whatever ``nb``),
            on the outputs' device, computed with the field's kernels.

        Raises
        ------
        TypeError
            ``field`` not a PrimeField; ``numerator`` or ``denominator`` not a uint32
            array, or the two in different array modules.
        ValueError
            ``numerator`` or ``denominator`` not of shape ``(2 nb,)`` or ``(2 nb, 4)`` (an odd
            length included), or the two of different lengths.

        Examples
        --------
        >>> from zorch_nb import KoalaBear as F
        >>> from zorch_nb.logup_gkr import GkrLayer, build_pyramid, extract_outputs
        >>> leaves = F.encode([1, 2, 3, F.p - 6])  # 1/1 + 2/1 + 3/1 - 6/1 = 0
        >>> floor = build_pyramid(GkrLayer.from_leaves(leaves, F.ones(4)))[-1]
        >>> num, den = extract_outputs(floor).batch_sums()
        >>> F.decode(num), F.decode(den)
        (array([0], dtype=uint32), array([1], dtype=uint32))
        """
        F = self.field
        n, d = self.numerator, self.denominator
        for name, x in (("numerator", n), ("denominator", d)):
            _check_words(x, name)
            if not (x.ndim == 1 or (x.ndim == 2 and x.shape[1] == 4)) or x.shape[0] % 2:
                raise ValueError(f"Argument `{name}` must hold an even number of outputs "
                                 f"((2 nb,) base or (2 nb, 4) extension), not shape "
                                 f"{tuple(x.shape)}")
        kinds = [_backend.array_kind(x) for x in (n, d)]
        if kinds[0] != kinds[1]:  # (the field ops would name their own `a` and `b`)
            raise TypeError(f"Arguments `numerator` and `denominator` must be arrays of one "
                            f"module, not {kinds[0]} and {kinds[1]}")
        if n.shape[0] != d.shape[0]:
            raise ValueError(f"Arguments `numerator` and `denominator` must hold as many "
                             f"outputs, not {n.shape[0]} and {d.shape[0]}")
        E = F.ext

        def mul(a, b):
            # base words marked as base: (4,) base words would be one extension element
            if a.ndim == b.ndim == 1:
                return F.mul(a, b)
            return E.mul(a if a.ndim == 2 else E.as_base(a), b if b.ndim == 2 else E.as_base(b))
        cross_0, cross_1 = mul(n[0::2], d[1::2]), mul(n[1::2], d[0::2])
        num = (E if cross_0.ndim == 2 else F).add(cross_0, cross_1)
        return num, mul(d[0::2], d[1::2])

    def __iter__(self):
        # ``num, den = extract_outputs(floor)``, as with a pair
        return iter((self.numerator, self.denominator))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index):
        return (self.numerator, self.denominator)[index]

    def __repr__(self):
        # A summary, as GkrLayer's: the dataclass repr printed every word of
        # both arrays (~15 KB for 64 batch elements).  Never raises.
        def part(x):
            kind = "extension" if getattr(x, "ndim", 1) == 2 else "base"
            return f"{kind} {tuple(getattr(x, 'shape', ()))}"
        return (f"<LogUpGkrOutput: numerator {part(self.numerator)}, denominator "
                f"{part(self.denominator)}, {_backend.array_kind(self.numerator)}>")


class JaggedStep(NamedTuple):
    """One step of a jagged schedule: the output row counts and output width."""

    row_counts: Any
    width: int


# ---------------------------------------------------------------------------
# dispatch
# ---------------------------------------------------------------------------

def _run(layer, backend, call, extra_inputs, out_len, out_ext, scratch_shape=None, out=None):
    """Run ``call(kernels, inputs, outputs, scratch)`` for ``layer`` on ``backend``.

    ``inputs`` are the layer's MLEs (contiguous) followed by ``extra_inputs``,
    all in the module the kernels run on; ``outputs`` are the four output
    MLEs, views of one fresh buffer, or ``out`` (four arrays checked by
    :func:`_check_out`); ``scratch`` an int64 array or ``None``.
    Returns the outputs in the layer's module.
    """
    mles = layer.mles
    if _as_it_is_on_cupy(layer, backend):
        kind = run_kind = backend = "cupy"
        xp = _backend.get_xp(run_kind)
        inputs = list(mles)
    else:
        kind, backend = _backend.resolve(dict(zip(_MLE_NAMES, mles)), backend)
        run_kind = "cupy" if backend == "cupy" else kind
        xp = _backend.get_xp(run_kind)
        inputs = [x if _backend.array_kind(x) == run_kind and x.flags.c_contiguous
                  else xp.ascontiguousarray(_backend.to_module(x, run_kind)) for x in mles]
    if run_kind != "cupy":
        inputs += extra_inputs
    elif len(extra_inputs) == 2 and all(type(x) is np.ndarray for x in extra_inputs) \
            and extra_inputs[0].shape == extra_inputs[1].shape:
        # Host row counts of a jagged transition on the GPU: one copy to the
        # device, not two (each small H2D copy is a driver call of its own).
        packed = xp.asarray(np.stack(extra_inputs))
        inputs += [packed[0], packed[1]]
    else:
        inputs += [xp.asarray(x) for x in extra_inputs]
    n_ext, d_ext = out_ext
    exts = (n_ext, n_ext, d_ext, d_ext)
    if out is not None and run_kind == kind:
        buf, outs = None, out
    else:
        buf, outs = _fresh_outputs(xp, out_len, exts)
    scratch = None if scratch_shape is None else xp.empty(scratch_shape, dtype=np.int64)
    if out_len:
        call(_backend.kernels_for(backend, "gkr"), inputs, outs, scratch)
    if run_kind != kind:  # backend="cupy" on NumPy data: bring the layer back
        sizes = _word_sizes(out_len, exts)
        outs = _split(_buffer_words(xp, buf, out_len, exts).get(), sizes, exts, aligned=True)
        if out is not None:
            for dst, src in zip(out, outs):
                dst[...] = src
            outs = out
    return outs


def _as_it_is_on_cupy(layer, backend) -> bool:
    """Whether ``layer`` runs on CuPy with its own arrays: what
    :func:`_backend.resolve` and a contiguity pass would find, known since the
    layer was checked (its MLEs are C-contiguous cupy.ndarrays on one device;
    ``mles`` rechecks their shapes, and a CuPy array's strides cannot be
    set), and that device is the current one (else resolve names it).
    Saves ~3 of a 2**10 transition's ~15 us of host time."""
    return layer.__dict__["_plain_cupy"] and (backend is None or backend.__class__ is str
                                              and backend == "cupy") \
        and layer.__dict__["_device"] == _backend.current_device()


def _fresh_outputs(xp, length, exts) -> tuple:
    """``(buffer, outputs)``: four outputs of ``length`` elements (extension
    where ``exts`` says: ``(length, 4)``), views of one new uint32 buffer of
    ``xp``, each starting on a 16-byte boundary (see :func:`_split`).  On
    CuPy the buffer is the bare allocation (see :func:`_output_buffer`)."""
    buf = _output_buffer(xp, length, exts)
    return buf, _output_views(xp, buf, length, exts)


def _output_buffer(xp, length, exts):
    """The new memory of :func:`_fresh_outputs` (views: :func:`_output_views`).

    NumPy: a uint32 array, its views where :func:`_word_plan` places them
    (from its first word).  CuPy: the allocation itself, a
    ``cupy.cuda.MemoryPointer`` (its address is ``.ptr``), the views being
    made straight from it by ``cupy.ndarray(shape, dtype, memptr)`` at the
    byte offsets of :func:`_view_plan` (so their ``.base`` is None; the
    memory lives while any of them does): :func:`_fresh_outputs` took 5.2 us
    so, where ``cupy.empty`` and a split into four took 6.0 (and slicing and
    reshaping each, 9.9), about half of a small transition's host time
    (cupy-host-dispatch-2026-12-07 in benchmarks/results).
    """
    if xp is np:
        return _numpy_words(*_word_plan(length, tuple(exts))[:2])
    return xp.cuda.alloc(_view_plan(length, tuple(exts))[1])


def _output_views(xp, buf, length, exts) -> list:
    """The four outputs of :func:`_fresh_outputs`, views of ``buf``."""
    if xp is np:
        return _arrays_in(buf, _word_plan(length, tuple(exts))[2])
    return _arrays_over(xp, buf, _view_plan(length, tuple(exts))[0])


def _arrays_in(words, plan) -> tuple:
    """The four NumPy outputs in ``words`` (a uint32 array from
    :func:`_numpy_words`) where a :func:`_word_plan`'s ``views`` place them
    (spelt out, as :func:`_arrays_over`)."""
    (l0, h0, s0), (l1, h1, s1), (l2, h2, s2), (l3, h3, s3) = plan
    return (words[l0:h0].reshape(s0), words[l1:h1].reshape(s1), words[l2:h2].reshape(s2),
            words[l3:h3].reshape(s3))


def _arrays_over(xp, memory, views) -> tuple:
    """The four CuPy outputs over ``memory`` (a ``cupy.cuda.MemoryPointer``)
    as a :func:`_view_plan`'s ``views`` place them.  Spelt out: a loop over
    the plan took 0.5 us more (the first view starts at 0)."""
    (s0, _), (s1, a1), (s2, a2), (s3, a3) = views
    view, u32 = xp.ndarray, np.uint32
    return (view(s0, u32, memory), view(s1, u32, memory + a1), view(s2, u32, memory + a2),
            view(s3, u32, memory + a3))


def _buffer_words(xp, memory, length, exts):
    """All words of a CuPy :func:`_output_buffer` (the ``memory`` of four
    outputs laid out by :func:`_view_plan`) as one flat uint32 array."""
    return xp.ndarray((_view_plan(length, tuple(exts))[1] >> 2,), np.uint32, memory)


@functools.lru_cache(maxsize=256)
def _view_plan(length, exts) -> tuple:
    """``(((shape, byte offset) of each output view), bytes, shapes)`` of an
    :func:`_output_buffer`: the layout of :func:`_split` ``aligned=True``,
    worked out once per length and forms (a pyramid's layers, a jagged
    schedule's widths, repeated small transitions)."""
    sizes = _word_sizes(length, exts)
    views = tuple(((length, 4) if e else (length,), 4 * at)
                  for e, at in zip(exts, _starts(sizes, aligned=True)))
    return views, 4 * _aligned_total(sizes), tuple(shape for shape, _ in views)


# NumPy outputs of at least _SPACED_BYTES each (see _word_plan) start on
# their own pages, _STAGGER_BYTES further into the page for each view.
_SPACED_BYTES = 1 << 20
_PAGE_BYTES = 4096
_STAGGER_BYTES = 17 * 64


@functools.lru_cache(maxsize=256)
def _word_plan(length, exts) -> tuple:
    """``(words, spaced, views)`` of a NumPy :func:`_output_buffer`: the
    ``words`` to allocate, whether the views are placed from the first page
    boundary in it (``spaced``), and ``(first word, end word, shape)`` of each
    view, counted from there.

    Small outputs are :func:`_view_plan`'s layout: back to back, each from a
    multiple of 16 bytes.  Outputs of 1 MiB or more each (2**18 base
    elements) start at page offsets 0, 1088, 2176 and 3264 bytes, each on
    pages of its own.  Why: back to back, four outputs of a power-of-two
    length lie a power of two apart, and so do the next transition's four
    inputs when it reads them; the CPU fold reads such arrays slower than the
    same words spread out.  On a 2-core AMD EPYC, the second of two
    transitions (into ``out=``) took 35.2-35.6 -> 17.9-21.4 ms reading 2**25
    base elements, 38.3-41.6 -> 32.8-33.0 ms reading 2**23 extension ones,
    and the same at 2**23 base (benchmarks/second_transition.py, alternating
    processes; benchmarks/fold_placement.py: the fold over four separately
    allocated 2**24 arrays 26-29 GB/s, over the same words at staggered page
    offsets 36-45; results: cpu-2026-12-07-output-placement.json in
    benchmarks/results).  The cost: at most two pages a view and one for the
    origin.
    """
    views, nbytes, _ = _view_plan(length, exts)
    sizes = _word_sizes(length, exts)
    if 4 * min(sizes) < _SPACED_BYTES:
        return (nbytes >> 2, False,
                tuple((at >> 2, (at >> 2) + size, shape)
                      for (shape, at), size in zip(views, sizes)))
    plan, at = [], 0
    for i, ((shape, _), size) in enumerate(zip(views, sizes)):
        page = -(-at // _PAGE_BYTES) * _PAGE_BYTES
        start = (page + i * _STAGGER_BYTES % _PAGE_BYTES) >> 2
        plan.append((start, start + size, shape))
        at = 4 * (start + size)
    # (+ the words an allocation's start may lie before its first page boundary)
    return plan[-1][1] + (_PAGE_BYTES >> 2) - 1, True, tuple(plan)


def _numpy_words(words, spaced, zeros=False):
    """A new uint32 array of ``words`` (:func:`_word_plan`; ``zeros``: zeroed),
    ``spaced``: from its first page boundary on."""
    buf = (np.zeros if zeros else np.empty)(words, dtype=np.uint32)
    return _from_page(buf) if spaced else buf


def _from_page(buf):
    """``buf`` from its first page boundary on."""
    return buf[(-buf.ctypes.data % _PAGE_BYTES) >> 2:]


def _fresh_layer(outs, shapes, num_batch_variables, field, aligned=None) -> GkrLayer:
    """The GkrLayer of the fresh outputs ``outs`` of :func:`_fresh_outputs`,
    given what :func:`_trusted` would read off them: their ``shapes``, and on
    CuPy (``aligned`` not None: views of one new allocation of the current
    device) whether they start on 16 bytes (0.9 of its 1.6 us a layer)."""
    layer = object.__new__(GkrLayer)
    layer.__dict__.update(zip(_FIELDS[GkrLayer], (*outs, num_batch_variables, field)),
                          _shapes=shapes)
    if aligned is None:  # NumPy
        layer.__dict__.update(_plain_cupy=False, _device=None)
    else:
        layer.__dict__.update(_plain_cupy=True, _device=outs[0].data.device_id,
                              _aligned=aligned)
    return layer


def _split(buf, sizes, exts, aligned=False):
    """Views of ``buf`` of ``sizes`` words (extension ones ``(-1, 4)``), back to back.

    ``aligned``: each view starts on a multiple of 4 words, so a 16-byte
    aligned ``buf`` gives 16-byte aligned views -- a jagged layer's width is
    any number, and one base view at an odd offset would turn the GPU
    kernels' 16-byte accesses off for the whole launch.  ``buf`` then holds
    :func:`_aligned_total` words.
    """
    outs = []
    for start, size, ext in zip(_starts(sizes, aligned), sizes, exts):
        view = buf[start:start + size]
        outs.append(view.reshape(-1, 4) if ext else view)
    return outs


def _starts(sizes, aligned=False) -> list:
    """Word offsets of the views :func:`_split` makes of ``sizes``."""
    starts, at = [], 0
    for size in sizes:
        starts.append(at)
        at += -(-size // 4) * 4 if aligned else size
    return starts


def _word_sizes(length, exts) -> list:
    """Words of MLEs of ``length`` elements, extension where ``exts`` says."""
    return [length * (4 if e else 1) for e in exts]


def _aligned_total(sizes) -> int:
    """Words of a buffer that :func:`_split` ``aligned=True`` splits into ``sizes``."""
    return sum(-(-size // 4) * 4 for size in sizes)


def _check_fused(fused):
    if fused is not None and not isinstance(fused, (bool, np.bool_)):
        raise TypeError(f"Argument `fused` must be None, True or False, not {fused!r}")


def _require(obj, cls, name, twin=None):
    """``TypeError`` unless ``obj`` is a ``cls``; ``twin`` names the function for
    the other layer kind (the dense and jagged functions come in pairs)."""
    if not isinstance(obj, cls):
        hint = ""
        if twin and isinstance(obj, (GkrLayer, JaggedGkrLayer)):
            hint = f"; for a {type(obj).__name__} use {twin}"
        raise TypeError(f"Argument `{name}` must be a {cls.__name__}, not "
                        f"{type(obj).__name__}{hint}")


def _mode(layer) -> int:
    """The kernels' mode number of a layer: ``2 * (numerators extension) +
    (denominators extension)`` (``kernels.gkr_scalar.mode_of``)."""
    return 2 * _is_ext(layer.numerator_0) + _is_ext(layer.denominator_0)


def _out_ext(layer) -> tuple:
    n_ext, d_ext = _is_ext(layer.numerator_0), _is_ext(layer.denominator_0)
    return n_ext or d_ext, d_ext


def _check_out(out, name: str, like, like_name: str, length: int, exts) -> tuple:
    """The four MLEs of ``out``, checked as a layer to overwrite with a result
    of ``like``'s (argument ``like_name``) kind, field, batch variables or
    segments, array module and device, ``length`` rows (a jagged layer's
    width) and the forms ``exts`` (numerators, numerators, denominators,
    denominators extension or not).  Overlap is checked by the callers."""
    cls = type(like)
    if not isinstance(out, cls):
        made_by = ("layer_transition or build_pyramid" if cls is GkrLayer else
                   "jagged_layer_transition or build_jagged_pyramid")
        raise TypeError(f"Argument `{name}` must be a {cls.__name__} to overwrite (a result "
                        f"of {made_by}), not {_describe(out)}")
    try:
        mles = out.mles
    except ValueError as exc:  # an MLE reshaped in place: say which layer
        raise ValueError(f"Argument `{name}`: {exc}") from None
    if out.field != like.field:
        raise ValueError(f"Argument `{name}` is a {out.field.name} layer; the result is "
                         f"{like.field.name}")
    if cls is GkrLayer and out.num_batch_variables != like.num_batch_variables:
        raise ValueError(f"Argument `{name}` has num_batch_variables = "
                         f"{out.num_batch_variables}; the result has "
                         f"{like.num_batch_variables}")
    if cls is JaggedGkrLayer and out.num_batches != like.num_batches:
        raise ValueError(f"Argument `{name}` has {out.num_batches} segments; the result has "
                         f"{like.num_batches}")
    want = tuple((length, 4) if e else (length,) for e in exts)
    got = tuple(tuple(x.shape) for x in mles)
    if got != want:
        forms = (f"{'extension' if exts[0] else 'base'} numerators, "
                 f"{'extension' if exts[2] else 'base'} denominators")
        size = f"{length} rows" if cls is GkrLayer else f"width of {length}"
        raise ValueError(f"Argument `{name}` must hold the result's {size} with {forms}: "
                         f"MLE shapes {want}, not {got}")
    have, need = _data_kind(out), _data_kind(like)
    if have != need:
        names = {"numpy": "NumPy", "cupy": "CUDA (CuPy)"}
        raise TypeError(f"Argument `{name}` holds {names[have]} arrays; the result lives "
                        f"with the layer's {names[need]} arrays: pass a layer of those")
    if have != "numpy":  # one device with the layer (resolve names the arrays that differ)
        _backend.resolve({**dict(_named(like_name, like.mles)), **dict(_named(name, mles))},
                         None, current=False)
    for n, x in _named(name, mles):
        if not x.flags.c_contiguous:
            raise ValueError(f"Argument `{n}` must be C-contiguous to be written in place")
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            raise ValueError(f"Argument `{n}` is read-only")
    return mles


def _check_out_list(out, first, sizes, count: str) -> tuple:
    """``out`` of a pyramid: a list of one layer per size in ``sizes`` (rows,
    or widths of a jagged pyramid), each checked by :func:`_check_out`
    against ``first``.  ``count`` says how many layers are due, for the
    error.  Returns the layers' MLEs and them named ``out[i].<mle>``."""
    twin = "build_pyramid" if type(first) is GkrLayer else "build_jagged_pyramid"
    if not isinstance(out, (list, tuple)):
        raise TypeError(f"Argument `out` must be a list of {type(first).__name__} "
                        f"(pyramid[1:] of an earlier {twin}), not {_describe(out)}")
    if len(out) != len(sizes):
        raise ValueError(f"Argument `out` must hold one layer per {count}, not {len(out)}")
    n_ext, d_ext = _out_ext(first)
    exts = (n_ext, n_ext, d_ext, d_ext)
    outs = [_check_out(layer, f"out[{i}]", first, "first", size, exts)
            for i, (layer, size) in enumerate(zip(out, sizes))]
    return outs, [named for i, o in enumerate(outs) for named in _named(f"out[{i}]", o)]


def _compiled_overlap_test(mles, backend) -> bool:
    """Whether the CPU kernels will run on ``mles`` themselves (NumPy,
    C-contiguous, backend ``None`` or ``"cpu"``): their compiled prologue then
    refuses outputs overlapping each other or an input (~0.4 us, where the
    named test of :func:`.launch_checks.check_gkr_disjoint` reads every
    address in Python: 14 of a 2**10 transition's 25 us), so only a refusal
    needs the named test."""
    return (backend is None or backend == "cpu") and all(
        type(x) is np.ndarray and x.flags.c_contiguous for x in mles)


def _write_checked(named, compiled: bool, call):
    """``call()``, which writes checked ``out`` layers, behind the overlap test
    ``named`` (:func:`.launch_checks.check_gkr_disjoint`'s arguments): run
    first where the kernels test overlap in compiled code themselves
    (``compiled``, :func:`_compiled_overlap_test`), then only to name the
    arrays of a refusal."""
    if not compiled:
        check_gkr_disjoint(*named)
        return call()
    try:
        return call()
    except ValueError:  # name the arrays that overlap (else re-raise)
        check_gkr_disjoint(*named)
        raise


def _named(prefix: str, mles) -> list:
    """``[(prefix.numerator_0, mle), ...]``: a layer's MLEs named for errors."""
    return [(f"{prefix}.{n}", x) for n, x in zip(_MLE_NAMES, mles)]


# ---------------------------------------------------------------------------
# dense
# ---------------------------------------------------------------------------

def layer_transition(layer: GkrLayer, *, backend: str | None = None,
                     out: GkrLayer | None = None) -> GkrLayer:
    """Fold the lowest row variable of a dense layer.

    For ``k in [0, L/2)``: ``n0'[k]/d0'[k]`` is the fraction sum of node
    ``2k``'s children, ``n1'[k]/d1'[k]`` that of node ``2k + 1``.

    Parameters
    ----------
    layer : GkrLayer
        A layer with at least one row variable.
    backend : {None, "cpu", "cupy", "numba"}, optional
        ``None`` follows the arrays (NumPy -> CPU, CuPy -> CuPy RawKernel).
    out : GkrLayer, optional
        A layer to overwrite with the result instead of allocating one --
        typically an earlier result of the same shape, whose buffers are then
        reused (on the CPU that also saves the operating system zeroing new
        pages: see :func:`build_pyramid`).  Its MLEs must have the result's
        shapes, field and ``num_batch_variables``, live in the layer's array
        module (and on its device), be C-contiguous and writeable, and share
        no memory with ``layer`` or with each other.  ``out`` is returned.

    Returns
    -------
    GkrLayer
        Half the length, same ``num_batch_variables``; numerators extension if
        any input is, denominators extension if the denominators are.  Its
        four MLEs are views of one new buffer -- back to back; large NumPy
        ones (1 MiB or more each) on pages of their own, which the next fold
        reads faster -- (on CuPy, arrays over one allocation, whose ``.base``
        is None), or are ``out``'s MLEs.

    Raises
    ------
    ValueError
        If ``layer`` has no row variable left (it is a floor), ``out`` does
        not fit the result (the message says how), ``backend`` is unknown, or
        ``"numba"`` without a GPU.
    TypeError
        If ``layer`` is not a GkrLayer (a JaggedGkrLayer: see
        :func:`jagged_layer_transition`), ``out`` is not one, or ``backend`` is
        not a str or None, or is ``"cpu"`` on CuPy arrays.
    ImportError
        ``backend="cupy"`` where CuPy is not installed.
    """
    _require(layer, GkrLayer, "layer", "jagged_layer_transition")
    if layer.num_row_variables == 0:
        raise ValueError(f"the layer has no row variable left (nv = nbv = "
                         f"{layer.num_variables}); it is a floor: use extract_outputs")
    if out is None:
        if _as_it_is_on_cupy(layer, backend):
            return _fresh_transition(layer, True)
        if _on_host_as_it_is(layer, backend):
            return _fresh_transition(layer, False)
    field, mode = layer.field, _mode(layer)
    half, (n_ext, d_ext) = layer.numerator_0.shape[0] // 2, _out_ext(layer)
    # The trusted launcher: the layer was checked when built and the outputs
    # are fresh or checked here (the launcher's own checks were 10.7 of the
    # 51 us of host time of a 2**10 transition on CuPy).
    def run(into=None):
        return _run(layer, backend,
                    lambda k, ins, o, _: k.fold_dense_trusted(mode, *ins, *o, field.params),
                    [], half, (n_ext, d_ext), out=into)

    if out is None:
        return _trusted(GkrLayer, *run(), layer.num_batch_variables, field)
    mles = layer.mles  # (before out: it refuses MLEs reshaped in place since the checks)
    into = _check_out(out, "out", layer, "layer", half, (n_ext, n_ext, d_ext, d_ext))
    _write_checked(("layer_transition", _named("out", into), _named("layer", mles)),
                   _compiled_overlap_test(mles, backend), lambda: run(into))
    return out


def _on_host_as_it_is(layer, backend) -> bool:
    """Whether ``layer`` runs on the CPU with its own arrays: exactly NumPy
    arrays (no subclass: a masked array was refused when built), still
    C-contiguous (NumPy lets ``strides`` be set in place), ``backend`` None
    or ``"cpu"``: what :func:`_backend.resolve` and a contiguity pass would
    find in :func:`_run`."""
    if not (backend is None or backend.__class__ is str and backend == "cpu"):
        return False
    d = layer.__dict__
    return all(type(x) is np.ndarray and x.flags.c_contiguous
               for x in (d["numerator_0"], d["numerator_1"], d["denominator_0"],
                         d["denominator_1"]))


def _fresh_transition(layer: GkrLayer, on_cupy: bool) -> GkrLayer:
    """:func:`layer_transition` of a layer :func:`_as_it_is_on_cupy` (or, not
    ``on_cupy``, :func:`_on_host_as_it_is`) into a fresh buffer: what
    :func:`_run` and :func:`_trusted` do there, with what is known read off
    the layer instead of the arrays -- its checked shapes and, on CuPy,
    whether its MLEs start on 16-byte boundaries (looked at once per layer)
    -- and the result's from its own buffer's plan.  2**10 leaves, host time:
    CuPy 14.5 -> 10.0 us (launches not counted; the dispatch target's;
    benchmarks/cupy_host_dispatch.py), CPU base/base 12.3 -> 8.6 us and ext/ext
    21.4 -> 17.0 us, the fold included (benchmarks/small_transition.py)."""
    d = layer.__dict__
    mles = layer.mles  # (refuses MLEs reshaped in place since the checks)
    checked = d["_shapes"]
    half, n_ext, d_ext = checked[0][0] // 2, len(checked[0]) == 2, len(checked[2]) == 2
    exts = (n_ext or d_ext,) * 2 + (d_ext,) * 2
    # _fresh_outputs' buffer and views, from one look at the plan (through
    # _fresh_outputs: 0.5 us more, a twentieth of this call)
    views, nbytes, shapes = _view_plan(half, exts)
    field, mode, nbv = d["field"], 2 * n_ext + d_ext, d["num_batch_variables"]
    if not on_cupy:
        words, spaced, places = _word_plan(half, exts)
        outs = _arrays_in(_numpy_words(words, spaced), places)
        _backend.kernels_for("cpu", "gkr").fold_dense_trusted(mode, *mles, *outs, field.params)
        return _fresh_layer(outs, shapes, nbv, field)
    xp = _backend.get_xp("cupy")
    memory = xp.cuda.alloc(nbytes)  # on the current device: the layer's
    outs = _arrays_over(xp, memory, views)
    aligned = d.get("_aligned")
    if aligned is None:  # (a CuPy array's address cannot change, nor a frozen
        # layer's arrays -- short of object.__setattr__, which every entry the
        # layer remembers from its checks already trusts no one to call)
        aligned = d["_aligned"] = all(x.data.ptr % 16 == 0 for x in mles)
    fresh_aligned = memory.ptr % 16 == 0  # (views start on multiples of 16 bytes)
    _backend.kernels_for("cupy", "gkr").fold_dense_trusted(
        mode, *mles, *outs, field.params, aligned=aligned and fresh_aligned)
    return _fresh_layer(outs, shapes, nbv, field, fresh_aligned)


def build_pyramid(first: GkrLayer, *, backend: str | None = None,
                  fused: bool | None = None, out: list | None = None) -> list:
    """All layers from ``first`` down to the floor: ``nrv + 1`` layers, one buffer each.

    Parameters
    ----------
    first : GkrLayer
    backend : {None, "cpu", "cupy", "numba"}, optional
        ``None`` follows the arrays (NumPy -> CPU, CuPy -> CuPy RawKernel).
    fused : bool, optional
        Fold several layers per kernel call, so intermediate layers are not
        read back from memory: on a GPU each block carries its tile down
        through the layers in shared memory (CuPy arrays on ``"cupy"``; any
        arrays on ``"numba"``), on the CPU each thread carries its tile down
        through four layers in its cache.  ``None`` (default) fuses where it
        applies; ``False`` forces one call per transition.  Both give
        identical bytes.
    out : list (or tuple) of GkrLayer, optional
        The ``nrv`` later layers to overwrite instead of allocating them --
        ``pyramid[1:]`` of an earlier pyramid of a first layer of the same
        shapes and field -- each checked as ``out`` of
        :func:`layer_transition`, all sharing no memory with ``first`` or
        each other.  On the CPU a pyramid's new layers arrive as fresh pages
        the operating system zeroes, about a third of the time of a
        2**24-row pyramid (``reused_out_ms`` in ``python -m zorch_nb bench``
        measures the pyramid with ``out``); overwriting saves that.  On
        ``backend="numba"`` the layers are then folded one launch per
        transition (its fused kernel writes buffers of its own layout).

    Returns
    -------
    list of GkrLayer
        ``[first, ..., floor]``; every later layer is a new buffer (with
        ``out``: ``[first, *out]``, overwritten).

    Raises
    ------
    TypeError
        ``first`` not a GkrLayer; ``fused`` not None or a bool; ``out`` not a list or tuple
        of GkrLayer of ``first``'s module; ``backend`` not a str or None, or ``"cpu"`` on CuPy.
    ValueError
        ``fused=True`` on a floor, on NumPy data with ``backend="cupy"``, or with ``out`` on
        ``"numba"``; an ``out`` that does not fit (the message says how); an unknown ``backend``,
        or ``"numba"`` without a GPU; an MLE of ``first`` reshaped in place since it was built.
    ImportError
        ``backend="cupy"`` where CuPy is not installed.

    Notes
    -----
    The kernels read contiguous MLEs: ``first``'s strided ones (a layer of
    ``leaves[0::2]`` and ``leaves[1::2]``) are copied while the pyramid is
    built, adding the first layer's size to the peak memory, which is
    otherwise the new layers alone (2**19 rows, base numerators over
    extension denominators: 52 MiB where the new layers take 32).
    :meth:`GkrLayer.from_leaves` makes a layer of contiguous halves from
    interleaved leaves.
    """
    _require(first, GkrLayer, "first", "build_jagged_pyramid")
    _check_fused(fused)
    if out is not None:
        return _pyramid_into(first, backend, fused, out)
    if fused is None or fused:
        layers = _fused_pyramid(first, backend)
        if layers is not None:
            return layers
        if fused and first.num_row_variables == 0:
            raise ValueError("fused=True needs a layer with a row variable; this one is a "
                             "floor (nothing to fold): use fused=None")
        if fused:
            raise ValueError("fused=True needs CuPy arrays (for backend='cupy') and a "
                             "layer with a row variable; use fused=None to fall back to "
                             "one launch per transition")
    if not first.num_row_variables:  # a floor: no transition below checks `backend`
        _backend.resolve(dict(zip(_MLE_NAMES, first.mles)), backend)
    layers = [first]
    for _ in range(first.num_row_variables):
        layers.append(layer_transition(layers[-1], backend=backend))
    return layers


def _pyramid_into(first: GkrLayer, backend, fused, out) -> list:
    """:func:`build_pyramid` writing into the layers ``out``."""
    mles = first.mles  # (first: it refuses MLEs reshaped in place since the checks)
    nrv = first.num_row_variables
    outs, written = _check_out_list(
        out, first, [int(mles[0].shape[0]) >> (i + 1) for i in range(nrv)],
        f"transition: {nrv} for this first layer (pyramid[1:] of one of its shape)")
    kind, backend = _backend.resolve(dict(zip(_MLE_NAMES, mles)), backend)
    fusable = nrv > 0 and (backend == "cpu" or (backend == "cupy" and kind == "cupy"))
    if fused and not fusable:
        raise ValueError("fused=True with `out` needs a layer with a row variable, on the "
                         "CPU or on CuPy arrays with backend 'cupy' (the Numba-CUDA fused "
                         "kernel writes layers of its own layout); use fused=None")
    fuse = fusable and (fused is None or fused)  # (np.False_ too: not `is not False`)

    def run():
        if fuse:
            xp = _backend.get_xp(kind)
            ins = [xp.ascontiguousarray(x) for x in mles]
            # the kernel layer's checked launcher: its metadata checks (a few us
            # a layer) are small beside a pyramid large enough to reuse buffers for
            _backend.kernels_for(backend, "gkr").pyramid_dense(ins, list(outs),
                                                               first.field.params)
        else:
            layer = first
            for into in out:
                layer = layer_transition(layer, backend=backend, out=into)

    # (the named test reads 60 addresses in Python for a 2**14-row pyramid,
    # ~100 us; the fused CPU pyramid's compiled one ~0.4 us a layer)
    _write_checked(("build_pyramid", written, _named("first", mles)),
                   fuse and _compiled_overlap_test(mles, backend), run)
    return [first, *out]


def _fused_pyramid(first: GkrLayer, backend):
    """The fused pyramid (CPU, CuPy or Numba-CUDA), or ``None`` where it does not apply."""
    mles = first.mles  # (first: it refuses MLEs reshaped in place since the checks)
    as_it_is = _as_it_is_on_cupy(first, backend)
    if as_it_is:
        kind = backend = "cupy"
    else:
        kind, backend = _backend.resolve(dict(zip(_MLE_NAMES, mles)), backend)
    nrv = first.num_row_variables
    if nrv == 0 or (backend == "cupy" and kind != "cupy"):
        return None
    xp = _backend.get_xp(kind)
    ins = mles if as_it_is else [xp.ascontiguousarray(x) for x in mles]
    n_ext, d_ext = _out_ext(first)
    exts = (n_ext, n_ext, d_ext, d_ext)
    bufs, outs, length = [], [], int(first.numerator_0.shape[0])
    kernels = _backend.kernels_for(backend, "gkr")
    if backend == "cupy":
        # The GPU idles until the first launch, and a bench's (or a user's)
        # event timer counts that host time: so each launch's layers are
        # allocated just before it (one allocation per layer), the trusted
        # launcher runs (the first layer was checked when built) and takes
        # the outputs' addresses, and their views (~3 us a layer: four
        # cupy.ndarrays over its allocation) are made after the launch,
        # while the GPU runs.  With the launcher's checks, per-layer slicing
        # and every layer allocated up front, 455 of the 532 us host time of
        # a 2**26 base/base pyramid passed before its first launch; 118 us
        # after the first two changes (cupy-host-dispatch-2026-12-02-pyramids
        # .json in benchmarks/results), and the views moved behind the launch
        # take 75 -> 42 us on a faster machine (cupy-host-dispatch-2026-12-02b).
        # The addresses and layers come from each layer's cached plan
        # (_view_plan, _fresh_layer): 2**26, to the first launch 37.4 -> 28.0
        # us, the whole 233.4 -> 186.1 (cupy-host-dispatch-2026-12-07b).
        from .kernels.launch_config import gkr_pyramid_plan
        src, mode, out_mode = tuple(ins), _mode(first), 2 * n_ext + d_ext
        nbv, field, layers = first.num_batch_variables, first.field, [first]
        for tile, k in gkr_pyramid_plan(length // 2, nrv, mode == 0):
            pending, addresses = [], []
            for _ in range(k):
                length //= 2
                # (_output_buffer and _output_views from one look at the
                # plan, as in _fresh_transition: 2 of 28 us to the first launch)
                views, nbytes, shapes = _view_plan(length, exts)
                memory = xp.cuda.alloc(nbytes)
                pending.append((memory, views, shapes))
                addresses += [memory.ptr + at for _, at in views]
            kernels.pyramid_launch_trusted(mode, src, tile, addresses, field.params)
            for memory, views, shapes in pending:
                group = _arrays_over(xp, memory, views)
                layers.append(_fresh_layer(group, shapes, nbv, field, memory.ptr % 16 == 0))
            src, mode = group, out_mode
        return layers
    for _ in range(nrv):  # one buffer per layer, allocated before the first launch
        length //= 2
        if backend == "cpu":  # (large layers spaced out: see _word_plan)
            bufs.append(_output_buffer(xp, length, exts))
            outs.append(_output_views(xp, bufs[-1], length, exts))
            continue
        sizes = _word_sizes(length, exts)  # Numba-CUDA takes flat layers
        bufs.append(xp.empty(sum(sizes), dtype=np.uint32))
        outs.append(_split(bufs[-1], sizes, exts))
    if backend == "cpu":  # (the layer was checked, the layers are its own)
        kernels.pyramid_dense_trusted(_mode(first), ins, outs, first.field.params)
    else:  # Numba-CUDA: flat layer buffers (NumPy ones are copied back once)
        kernels.pyramid_dense(ins, bufs, first.field.params)
    return [first] + [_trusted(GkrLayer, *o, first.num_batch_variables, first.field)
                      for o in outs]


def _interleave(a, b):
    xp = _backend.get_xp("numpy" if isinstance(a, np.ndarray) else "cupy")
    a, b = xp.asarray(a), xp.asarray(b)  # any CUDA array as a CuPy view
    return xp.stack([a, b], axis=1).reshape((2 * a.shape[0],) + tuple(a.shape[1:]))


def extract_outputs(floor: GkrLayer) -> LogUpGkrOutput:
    """Interleave the two children of a floor (``nrv == 0``) into the outputs.

    The words are copied as the floor holds them: a transition's outputs are
    canonical (``< p``), but a layer built as a floor (no transition ran, so
    ``build_pyramid`` returned it alone) hands back its own words, any
    non-canonical ones (``>= p``, read mod p) included.

    Parameters
    ----------
    floor : GkrLayer
        A layer with no row variable (``num_batch_variables == num_variables``),
        e.g. ``build_pyramid(layer)[-1]``.

    Returns
    -------
    LogUpGkrOutput
        ``2 nb`` outputs each, new arrays in the floor's module, and the floor's field.

    Raises
    ------
    TypeError
        ``floor`` not a GkrLayer (a JaggedGkrLayer: see :func:`extract_jagged_outputs`).
    ValueError
        ``floor`` has a row variable left.
    """
    _require(floor, GkrLayer, "floor", "extract_jagged_outputs")
    if floor.num_row_variables != 0:
        raise ValueError(f"extract_outputs needs a floor (no row variable left), but the "
                         f"layer has {floor.num_row_variables}; fold it with build_pyramid")
    return LogUpGkrOutput(_interleave(floor.numerator_0, floor.numerator_1),
                          _interleave(floor.denominator_0, floor.denominator_1), floor.field)


# ---------------------------------------------------------------------------
# jagged
# ---------------------------------------------------------------------------

def _check_step(rc, kind: str, out_row_counts, out_width, device=None):
    """Checked ``(orc, out_width)`` of one transition of a layer with counts ``rc``.

    ``kind`` is the array module of the layer's MLEs, ``device`` their GPU
    (``None``: host, or not known).  Host schedules are
    checked against ``out_width`` and, when ``rc`` is on the host too,
    against truncation; device schedules need ``out_width``.
    """
    orc = _row_counts(out_row_counts, "out_row_counts", kind, device)
    nb = int(rc.shape[0])
    if orc.shape[0] != nb:
        raise ValueError(f"Argument `out_row_counts` must have one count per batch element "
                         f"({nb}), not {orc.shape[0]}")
    if isinstance(orc, np.ndarray):
        total = int(orc.sum(dtype=np.int64))
        if out_width is None:  # the default: the caller passed no width to blame
            if total > _INT32_MAX:
                raise ValueError(f"Argument `out_row_counts` must sum to at most "
                                 f"{_INT32_MAX} (int32 offsets), not {total}")
            out_width = total
        out_width = _check_int(out_width, "out_width", 0, _INT32_MAX)
        if total > out_width:
            raise ValueError(f"the output row counts sum to {total}, more than "
                             f"`out_width` = {out_width}")
        if isinstance(rc, np.ndarray):
            # ceil(rc / 2) > orc  <=>  rc - orc > orc; both int32 in [0, 2**31): no overflow
            bad = (rc - orc) > orc
            if bad.any():
                s = int(np.argmax(bad))
                raise ValueError(f"the schedule truncates segment {s}: "
                                 f"out_row_counts[{s}] = {orc[s]} < ceil(row_counts[{s}] / 2) "
                                 f"= {(int(rc[s]) + 1) // 2}")
    elif out_width is None:
        raise ValueError("Argument `out_width` is required when `out_row_counts` is a device "
                         "array: its sum cannot be read without a device->host "
                         "synchronization")
    else:
        out_width = _check_int(out_width, "out_width", 0, _INT32_MAX)
    return orc, out_width


def jagged_layer_transition(layer: JaggedGkrLayer, out_row_counts, out_width=None, *,
                            backend: str | None = None,
                            out: JaggedGkrLayer | None = None) -> JaggedGkrLayer:
    """Fold one row variable of every segment of a jagged layer.

    Output slot ``q`` belongs to segment ``s`` (first ``s`` with
    ``cum[s] > q``, ``cum`` the inclusive prefix sums of ``out_row_counts``)
    at position ``j = q - (cum[s] - orc[s])``.  Its children are the fraction
    sums of input nodes ``base[s] + 2j`` and ``base[s] + 2j + 1`` (the second
    replaced by the neutral fraction 0/1 past the segment's end) while
    ``j < ceil(rc[s]/2)``; later slots of the segment are neutral (0/1 and
    0/1), slots past ``sum(orc)`` are dead (all zero).

    Parameters
    ----------
    layer : JaggedGkrLayer
    out_row_counts : sequence of int, NumPy or CuPy int32 array, or a step
        ``orc``, one count per batch element, ``orc[s] >= ceil(rc[s]/2)``.  A
        CuPy array is consumed on the device without synchronizing; the
        constraints then are the caller's obligation.  A :class:`JaggedStep`
        or a pair ``(counts, width)`` (an entry of :func:`halving_schedule`,
        as :func:`build_jagged_pyramid` takes them) gives both arguments:
        ``for step in halving_schedule(L): L = jagged_layer_transition(L, step)``.
        Device counts outside the constraints give unspecified words, never
        an access outside the layers' arrays.
    out_width : int, optional
        Capacity of the output layer, ``>= sum(orc)``.  Defaults to
        ``sum(orc)`` for host counts; required for device counts; not with a
        step.
    backend : {None, "cpu", "cupy", "numba"}, optional
    out : JaggedGkrLayer, optional
        A layer to overwrite with the result instead of allocating one, as
        ``out`` of :func:`layer_transition`: width ``out_width``, the
        result's forms, field and number of segments, the layer's array
        module and device, C-contiguous, writeable, sharing no memory with
        ``layer`` or itself.  Its MLEs and its ``row_counts`` become the
        result's, and ``out`` is returned.

    Returns
    -------
    JaggedGkrLayer
        With ``row_counts = out_row_counts`` and width ``out_width`` (a
        step's counts and width); ``out`` where given.

    Raises
    ------
    ValueError
        Schedule length differs from the number of batch elements, a host
        schedule truncates a segment (``orc[s] < ceil(rc[s]/2)``) or exceeds
        ``out_width``, device counts without ``out_width``.
    TypeError
        Counts of the wrong type, device counts with NumPy data, or
        ``out_width`` given with a step.
    MemoryError
        Host data whose output layer would not fit in this machine's memory.
    """
    _require(layer, JaggedGkrLayer, "layer", "layer_transition")
    if (isinstance(out_row_counts, (list, tuple)) and out_row_counts
            and isinstance(out_row_counts[0], JaggedStep)):
        # (read as counts it failed as "a rectangular (non-ragged) array of integers")
        raise TypeError(f"Argument `out_row_counts` must be one step, not a schedule of "
                        f"{len(out_row_counts)}: pass its steps one per call, or the whole "
                        f"schedule to build_jagged_pyramid")
    counts, width = _step(out_row_counts)
    if counts is not out_row_counts:  # a step: it holds the width (None: the sum)
        if out_width is not None:
            raise TypeError("Argument `out_width` must not be given with a step (a JaggedStep "
                            "or (counts, width) pair), which holds the width")
        out_row_counts, out_width = counts, width
    orc, out_width = _check_step(layer._counts, _data_kind(layer), out_row_counts,
                                 out_width, _data_device(layer))
    if out is None:
        _check_host_memory(layer, _out_ext(layer), [out_width], "Argument `out_width`")
        return _jagged_run(layer, orc, out_width, backend)
    mles = layer.mles  # (before out: it refuses MLEs reshaped in place since the checks)
    n_ext, d_ext = _out_ext(layer)
    into = _check_out(out, "out", layer, "layer", out_width, (n_ext, n_ext, d_ext, d_ext))
    # (device counts are the caller's arrays: out must not overwrite them either)
    named = ("jagged_layer_transition", _named("out", into), _named("layer", mles) + [
        ("layer.row_counts", layer._counts), ("out_row_counts", orc)])
    return _write_checked(named, _compiled_overlap_test(mles, backend),
                          lambda: _jagged_run(layer, orc, out_width, backend, out))


def _check_host_memory(layer, out_ext, widths, what):
    """``MemoryError`` naming ``what`` where host layers of ``widths`` slots
    (the first with extension flags ``out_ext``) cannot fit in this machine's
    memory: a width is any int32, and NumPy's own error names no argument
    (an overcommitting OS may even grant the allocation and kill the process
    filling it).  Device layers meet CuPy's out-of-memory error instead."""
    if _data_kind(layer) != "numpy":
        return
    n_ext, d_ext = out_ext
    need = 0
    for width in widths:
        need += 4 * _aligned_total(_word_sizes(width, (n_ext, n_ext, d_ext, d_ext)))
        n_ext = n_ext or d_ext
    _refuse_beyond_memory(need, what, "the output layers need")


def _refuse_beyond_memory(need, what, needs):
    """``MemoryError`` naming ``what`` where ``need`` bytes of host layers exceed
    this machine's memory (NumPy's own error names no argument)."""
    have = _backend.physical_memory()
    if have is not None and need > have:
        raise MemoryError(f"{what}: {needs} {need / 2**30:.1f} GiB; this machine has "
                          f"{have / 2**30:.1f} GiB of memory")


def _data_kind(layer) -> str:
    """``"numpy"`` or ``"cupy"``: where a layer's MLEs live."""
    return "numpy" if isinstance(layer.numerator_0, np.ndarray) else "cupy"


def _data_device(layer):
    """The GPU of a layer's CuPy MLEs (``None`` for host or other CUDA arrays)."""
    return _backend.device_of(layer.numerator_0)


def _jagged_run(layer, orc, out_width, backend, out=None):
    """The transition of ``layer`` to the checked step ``(orc, out_width)``,
    into ``out`` (a checked layer) where given."""
    field, mode = layer.field, _mode(layer)
    outs = _run(layer, backend,  # trusted launcher, as in layer_transition
                lambda k, ins, outs, pre: k.jagged_transition_trusted(
                    mode, ins[4], ins[5], pre, *ins[:4], *outs, field.params),
                [layer._counts, orc], out_width, _out_ext(layer), (2, layer.num_batches),
                out=None if out is None else out.mles)
    if out is None:
        return _trusted(JaggedGkrLayer, *outs, orc, field)
    _keep_counts(out, orc)  # its words are the result's: so are its counts
    return out


def _check_steps(layer, steps) -> list:
    """Every ``(out_row_counts, out_width)`` of ``steps`` from ``layer`` on, checked
    (each against the one before), before any runs; errors name ``schedules[i]``."""
    kind, rc = _data_kind(layer), layer._counts
    checked = _check_host_steps(rc, steps)
    if checked is None:  # device counts, other forms, or an error to name
        checked, device = [], _data_device(layer)
        for i, (counts, width) in enumerate(steps):
            try:
                rc, width = _check_step(rc, kind, counts, width, device)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"schedules[{i}]: {exc}") from None
            checked.append((rc, width))
    # every layer is kept: their sum must fit
    _check_host_memory(layer, _out_ext(layer), [w for _, w in checked], "Argument `schedules`")
    return checked


def _check_host_steps(rc, steps):
    """:func:`_check_steps` of a schedule of int32 NumPy counts (of
    :func:`halving_schedule`, say) from host counts ``rc``, in a few array
    operations for all steps at once; ``None`` where another form or a
    failing check needs the step-by-step path (which names the error).

    Why: step by step, each check is a few NumPy calls on short arrays, ~9 us
    a step on the development machine; a 2**26 pyramid has 19 steps, checked
    while the GPU waits for its first launch.  The counts come out as rows of
    one read-only copy (the step-by-step path makes one per step)."""
    if not isinstance(rc, np.ndarray) or not steps:
        return None
    nb = rc.shape[0]
    if rc.dtype != np.int32:  # (never: a layer's checked counts are int32)
        return None
    parts = [rc]
    for counts, width in steps:
        if type(counts) is not np.ndarray or counts.dtype != np.int32 or \
                counts.shape != (nb,) or not (width is None or type(width) is int):
            return None
        parts.append(counts)
    # The private copy (as _frozen_int32's: bytes), the input's counts its
    # first row, so each step's row is compared with the one above it (one
    # concatenate and one copy: 41 -> 30 us for the bench's 19 steps of 1024
    # segments, checked while the GPU waits for the pyramid's first launch)
    words = np.concatenate(parts).tobytes()
    above = np.frombuffer(words, dtype=np.int32).reshape(len(parts), nb)
    rows = above[1:]
    if nb and rows.min() < 0:
        return None
    # ceil(prev / 2) > orc  <=>  prev - orc > orc, as in _check_step
    if nb and ((above[:-1] - rows) > rows).any():
        return None
    checked = []
    for orc, total, (_, width) in zip(rows, rows.sum(axis=1, dtype=np.int64).tolist(), steps):
        width = total if width is None else width
        if not total <= width <= _INT32_MAX:
            return None
        checked.append((orc, width))
    return checked


def _sequence_like(x) -> bool:
    """Whether ``x`` can be a step's counts (1-d), rather than one count."""
    return isinstance(x, (list, tuple, range)) or (getattr(x, "ndim", 0) or 0) >= 1


def _step(entry):
    """``(counts, width)`` of a schedule entry; ``(entry, None)`` for bare counts.

    A pair whose first item is a sequence or an array of counts is a step
    (counts are one per segment, so such a pair cannot be counts itself); a
    pair of integers, 0-d arrays included, is two counts.  A tuple step's
    width may be ``None`` (its counts' sum); a list's must be an integer.
    """
    if isinstance(entry, JaggedStep):
        return entry.row_counts, entry.width
    if isinstance(entry, tuple) and len(entry) == 2 and _sequence_like(entry[0]):
        return entry
    if isinstance(entry, list) and len(entry) == 2 and _sequence_like(entry[0]):
        # (bare counts cannot hold a sequence: a step, whose width the caller
        # checks -- read as counts, a 0-d array or a float width was blamed
        # on `out_row_counts`)
        if entry[1] is None:
            raise TypeError("A list step [counts, width] needs an integer width; for the "
                            "counts' sum pass the tuple (counts, None) or the counts alone")
        return entry[0], entry[1]
    return entry, None


def build_jagged_pyramid(first: JaggedGkrLayer, schedules, *,
                         backend: str | None = None, fused: bool | None = None,
                         out: list | None = None) -> list:
    """Apply one :func:`jagged_layer_transition` per schedule entry.

    Parameters
    ----------
    first : JaggedGkrLayer
    schedules : iterable
        Each entry is a :class:`JaggedStep`, a ``(out_row_counts, out_width)``
        pair (a tuple, or a list ``[counts, width]``), or just
        ``out_row_counts`` (then the width is its sum).  See
        :func:`halving_schedule`.
    backend : {None, "cpu", "cupy", "numba"}, optional
    fused : bool, optional
        GPU backends only (CuPy arrays on ``"cupy"``; any arrays on
        ``"numba"``): the steps run ``GKR_JAGGED_CHUNK`` (3) at a time in one
        fused launch each -- each slot of the third layer is computed from
        its 8 leaves, writing the nodes in between, so intermediate
        layers are never read back -- and, on CuPy, the last steps whose
        output widths are all at most ``GKR_JAGGED_TAIL_SLOTS``
        (:mod:`~zorch_nb.kernels.launch_config`) run in one launch of one
        block.  Host and device schedules alike; every step is checked
        before the first launch; no device->host synchronization.  ``None``
        (default) fuses where it applies; ``False`` forces two launches per
        step.  Both give identical bytes.
    out : list of JaggedGkrLayer, optional
        One layer per step to overwrite instead of allocating -- the later
        layers of an earlier pyramid of the same widths, forms and field,
        e.g. ``pyramid[1:]`` of one built with the same schedule -- each
        checked as ``out`` of :func:`jagged_layer_transition`, all sharing
        no memory with ``first`` or each other.  Their MLEs and row counts
        become the results' (see :func:`build_pyramid` for what it saves).

    Returns
    -------
    list of JaggedGkrLayer
        ``[first, ...]``, one buffer per layer (with ``out``: ``[first, *out]``).

    Raises
    ------
    ValueError
        As :func:`jagged_layer_transition` (every step is checked before any
        step runs), or ``fused=True`` on the CPU backend (it needs CuPy arrays
        on ``"cupy"``, or ``"numba"``).
    TypeError
        ``first`` not a JaggedGkrLayer (a GkrLayer: see :func:`build_pyramid`);
        ``schedules`` one step, not an iterable of steps, or holding entries
        that are not steps; ``fused`` not None or a bool.
    MemoryError
        Host data whose output layers, all kept, would not fit in this
        machine's memory (checked before any step runs).
    """
    _require(first, JaggedGkrLayer, "first", "build_pyramid")
    one_step = TypeError(f"Argument `schedules` must be a list of steps, not one step "
                         f"({type(schedules).__name__}); pass [step]")
    if isinstance(schedules, JaggedStep):
        raise one_step
    try:
        entries = list(schedules)
    except TypeError:
        raise TypeError(f"Argument `schedules` must be an iterable of steps (see "
                        f"halving_schedule), not {type(schedules).__name__}") from None
    if all(type(e) is JaggedStep for e in entries):  # halving_schedule's: as they are
        # (the checks below, ~5 us for 19 steps, ran while a GPU waited)
        steps = entries
    else:
        # A bare integer entry is a step's count or width: one step was passed
        # unwrapped, ([2, 3], 5) or [2, 3] (a step's counts are one per segment);
        # so is a None after counts, the default width of ([2, 3], None).
        if any(is_int(e) for e in entries) or (
                len(entries) == 2 and _sequence_like(entries[0]) and entries[1] is None):
            raise one_step
        steps = [_step(entry) for entry in entries]
    _check_fused(fused)
    checked = None
    if out is not None:  # the steps give the widths out must have: checked first
        checked = _check_steps(first, steps)
        out = _check_jagged_outs(first, checked, out)
    if fused is None or fused:
        kind, run = _backend.resolve(dict(zip(_MLE_NAMES, first.mles)), backend)
        if (kind == "cupy" and run == "cupy") or run == "numba":
            return [first] + _fused_jagged_steps(first, steps, _backend.get_xp(kind),
                                                 _backend.kernels_for(run, "gkr"), out,
                                                 checked)
        if fused:
            raise ValueError("fused=True needs a GPU backend (CuPy arrays on 'cupy', or "
                             "'numba'); use fused=None to fall back to two launches per "
                             "transition")
    if not steps:  # no transition below checks `backend`
        _backend.resolve(dict(zip(_MLE_NAMES, first.mles)), backend)
    if checked is None:
        checked = _check_steps(first, steps)  # every step checked before any runs
    layers = [first]
    for i, (orc, width) in enumerate(checked):
        layers.append(_jagged_run(layers[-1], orc, width, backend,
                                  None if out is None else out[i]))
    return layers


def _check_jagged_outs(first: JaggedGkrLayer, checked, out) -> list:
    """``out`` of :func:`build_jagged_pyramid`, checked against the widths of
    the ``checked`` steps (:func:`_check_steps`)."""
    _, written = _check_out_list(out, first, [width for _, width in checked],
                                 f"step ({len(checked)})")
    # (device counts are the caller's arrays: out must not overwrite them either)
    check_gkr_disjoint("build_jagged_pyramid", written, _named("first", first.mles) + [
        ("first.row_counts", first._counts)] + [(f"schedules[{i}]", orc)
                                                for i, (orc, _) in enumerate(checked)])
    return list(out)


def _fused_jagged_steps(layer: JaggedGkrLayer, steps, xp, kernels, out=None,
                        checked=None) -> list:
    """The layers of ``steps`` from ``layer`` on a GPU backend, fused.

    Every step is checked before the first launch; host counts travel in one
    H2D copy; each launch's output layers are allocated just before it (the
    GPU idles until the first launch, and an event timer counts that host
    time); nothing is read back.  Launches follow
    :func:`~zorch_nb.kernels.launch_config.gkr_jagged_plan`: wide steps
    ``GKR_JAGGED_CHUNK`` at a time, the rest of the wide steps one at a time,
    the small tail in one block (on backends with a tail kernel; Numba-CUDA
    chunks every step it can).  ``xp`` is the data's array module, ``kernels``
    the backend's launcher module (``kernels/gkr_cupy.py`` or
    ``gkr_cuda_numba.py``, whose trusted launchers run: the steps were checked
    here and the outputs are fresh; NumPy data on Numba-CUDA is copied to the
    device per launch: the simulator's path); the host tests pass launchers
    that run the CUDA C kernels' serial twins, so this orchestration is
    checked without a GPU.
    """
    from .kernels.launch_config import GKR_JAGGED_CHUNK, gkr_jagged_plan
    if checked is None:
        checked = _check_steps(layer, steps)  # all checks before the first launch
    # Host counts (the input's and any host step's) travel in one H2D copy.
    host = [c for c in [layer._counts] + [o for o, _ in checked] if isinstance(c, np.ndarray)]
    packed = xp.asarray(np.concatenate(host)) if host else None
    nb, at = layer.num_batches, 0

    def device(counts):
        nonlocal at
        if not isinstance(counts, np.ndarray):
            return counts
        at += nb
        return packed[at - nb:at]

    rc_dev = device(layer._counts)
    n_ext, d_ext = _out_ext(layer)  # every later layer's too
    exts = (n_ext, n_ext, d_ext, d_ext)
    mode, out_mode = _mode(layer), 2 * n_ext + d_ext
    kernel_steps = []

    def allocate(upto):  # the outputs of steps [len(kernel_steps), upto)
        for orc, width in checked[len(kernel_steps):upto]:
            outs = _fresh_outputs(xp, width, exts)[1] if out is None else \
                out[len(kernel_steps)].mles
            kernel_steps.append((device(orc), outs))

    if layer.__dict__.get("_plain_cupy") and xp is not np:  # (contiguous cupy.ndarrays)
        src = list(layer.mles)
    else:
        src = [xp.ascontiguousarray(xp.asarray(x)) for x in layer.mles]
    prefix = xp.empty((GKR_JAGGED_CHUNK + 1) * nb, dtype=np.int64)  # enough for every launch
    params = layer.field.params
    chunked, tail = gkr_jagged_plan([w for _, w in checked], hasattr(kernels, "jagged_tail"))
    i = 0
    while i < tail:
        if i < chunked:
            allocate(i + GKR_JAGGED_CHUNK)
            kernels.jagged_chunk_trusted(mode, rc_dev, prefix,
                                         src, kernel_steps[i:i + GKR_JAGGED_CHUNK], params)
            i += GKR_JAGGED_CHUNK
        else:
            allocate(i + 1)
            orc_dev, outs = kernel_steps[i]
            kernels.jagged_transition_trusted(mode, rc_dev, orc_dev,
                                              prefix[:2 * nb].reshape(2, nb), *src, *outs,
                                              params)
            i += 1
        rc_dev, src = kernel_steps[i - 1]
        mode = out_mode
    if tail < len(steps):
        allocate(len(steps))
        kernels.jagged_tail_trusted(mode, rc_dev, prefix[:2 * nb], src, kernel_steps[tail:],
                                    params)
    if out is not None:  # their words are the results': so are their counts
        for into, (orc, _) in zip(out, checked):
            _keep_counts(into, orc)
        return list(out)
    return [_trusted(JaggedGkrLayer, *outs, orc, layer.field)
            for (orc, _), (_, outs) in zip(checked, kernel_steps)]


def extract_jagged_outputs(floor: JaggedGkrLayer) -> LogUpGkrOutput:
    """Interleave the two children of a jagged floor (``width == nb``, all counts 1).

    Host row counts are checked to be all 1; device counts are not read (that
    would synchronize), so for them this is the caller's obligation, as for
    the transitions.  Words are copied as the floor holds them (see
    :func:`extract_outputs`: a layer that never went through a transition
    keeps any non-canonical words).

    Parameters
    ----------
    floor : JaggedGkrLayer
        The last layer of a schedule ending on a floor, e.g. of
        :func:`halving_schedule`.

    Returns
    -------
    LogUpGkrOutput
        ``2 nb`` outputs each, new arrays in the floor's module, and the floor's field.

    Raises
    ------
    TypeError
        ``floor`` not a JaggedGkrLayer (a GkrLayer: see :func:`extract_outputs`).
    ValueError
        A width other than ``nb``, or a host row count other than 1.
    """
    _require(floor, JaggedGkrLayer, "floor", "extract_outputs")
    if floor.width != floor.num_batches:
        nb = floor.num_batches
        hint = ("fold further (see halving_schedule)" if not floor.counts_on_host or
                bool((floor._counts != 1).any()) else
                f"every count is already 1: one step to out_row_counts [1] * {nb}, "
                f"out_width {nb} compacts it (folding each row's two children: same "
                f"per-batch sums; halving_schedule(layer) returns that step)")
        raise ValueError(f"extract_jagged_outputs needs a floor with width == number of batch "
                         f"elements ({nb}), not width {floor.width}; {hint}")
    if floor.counts_on_host and bool((floor._counts != 1).any()):
        s = int(np.argmax(floor._counts != 1))
        raise ValueError(f"extract_jagged_outputs needs every row count to be 1, but "
                         f"row_counts[{s}] = {floor._counts[s]}")
    return LogUpGkrOutput(_interleave(floor.numerator_0, floor.numerator_1),
                          _interleave(floor.denominator_0, floor.denominator_1), floor.field)


def halving_schedule(layer: JaggedGkrLayer, max_row_count: int | None = None) -> list:
    """The standard schedule: ``orc = ceil(rc / 2)`` per segment until every count is 1.

    An empty segment (count 0) gets one neutral row, so that the schedule
    ends on a floor (``width == nb``, all counts 1), which
    :func:`extract_jagged_outputs` takes.  After ``ceil(log2(max rc))`` steps the
    pyramid reaches the floor of the dense pyramid whose segments are padded to
    a power of two with neutral fractions -- unless every count is 0 or 1 with
    some 0: then one step is needed to give the empty segments their row, and
    it also folds the two children of each count-1 row (same per-batch sums,
    a different floor).

    Parameters
    ----------
    layer : JaggedGkrLayer
    max_row_count : int, optional
        An upper bound ``M`` on every count (of *rows*, not leaves: a segment
        of ``m`` leaves from :meth:`JaggedGkrLayer.from_segments` has
        ``ceil(m / 2)`` rows; a looser bound adds steps and changes the floor's
        split, not its sums).  The number of steps and their widths then follow
        from ``M`` and the layer's width alone -- ``ceil(log2(M))`` steps
        (at least one), widths ``w_t = min(nb * max(ceil(M / 2**t), 1),
        floor(w_{t-1} / 2) + nb)`` (``w_0`` the layer's width) that bound the
        live rows, the last ``nb`` -- and the counts are halved
        where they are: on the device without a synchronization (never read),
        on the host checked against ``M``.  So the same call gives the same
        schedule, hence the same pyramid, whether the counts are host or device
        arrays (a fixed depth, as a prover's circuit may need).  There is
        always at least one step (with ``M <= 1`` a device count may be 0):
        for counts that already are a floor, that step folds each row's two
        children -- same per-batch sums.  Without ``M``, device counts are
        copied to the host once (one synchronization) and the exact schedule
        below is returned.

    Returns
    -------
    list of JaggedStep
        Empty when the layer already is a floor.  A layer whose counts are
        all 1 but which has slack (``width > nb``) gets one step, counts
        ``[1] * nb`` and width ``nb``, that compacts it (it also folds each
        segment's two children: same per-batch sums).

    Raises
    ------
    TypeError
        ``layer`` not a JaggedGkrLayer; ``max_row_count`` not an integer (a bool included).
    ValueError
        ``max_row_count`` outside ``[0, 2**31 - 1]`` or below a host row count; with it,
        device counts on a GPU other than CuPy's current device.
    """
    _require(layer, JaggedGkrLayer, "layer")
    nb = layer.num_batches
    if max_row_count is not None:
        bound = _check_int(max_row_count, "max_row_count", 0, _INT32_MAX)
        counts, width, steps = layer._counts, layer.width, []
        if layer.counts_on_host:
            xp = np
            if nb and int(counts.max()) > bound:  # (a bound too low would truncate)
                s = int(np.argmax(counts > bound))
                raise ValueError(f"Argument `max_row_count` must bound every row count, "
                                 f"but row_counts[{s}] = {counts[s]} > {bound}")
        else:
            xp = _backend.get_xp("cupy")
            # the steps' counts are computed by CuPy on its current device, where
            # the pyramid's kernels will launch: counts of another device are
            # refused, as every other entry point refuses the layer there
            _backend.check_current_device(_backend.device_of(counts), "layer")
        # at least one step: with M <= 1 a count may still be 0 (no way to tell
        # without reading device counts), and the step gives it its neutral row;
        # host counts take the same steps, so both give one pyramid
        while bound > 1 or not steps:
            bound = (bound + 1) // 2
            # ceil(c / 2) as c - c // 2: (c + 1) // 2 wraps the int32 count 2**31 - 1
            counts = xp.maximum(counts - counts // 2, 1).astype(np.int32)
            width = min(nb * max(bound, 1), width // 2 + nb)
            steps.append(JaggedStep(counts, width))
        return steps
    counts = (layer._counts if layer.counts_on_host
              else layer._counts.get()).astype(np.int64)
    steps = []
    while counts.max() > 1 or counts.min() == 0:
        counts = np.maximum((counts + 1) // 2, 1)
        steps.append(JaggedStep(counts.astype(np.int32), int(counts.sum())))
    if not steps and layer.width != nb:  # all 1 with slack: compact it to a floor
        steps.append(JaggedStep(np.ones(nb, np.int32), nb))
    return steps
