"""Tucker tensor trains, ragged and uniform (mask-structured).

A Tucker tensor train (T3) of shape ``(N_0, ..., N_{d-1})`` has Tucker cores
``U_i`` of shape ``(n_i, N_i)`` and TT cores ``G_i`` of shape
``(r_i, n_i, r_{i+1})``; its dense tensor is the TT chain of
``G'_i[a, o, b] = sum_j G_i[a, j, b] U_i[j, o]`` with both boundary bonds
summed against vectors of ones.  An optional leading ``stack_shape`` batches
many trains.

* :class:`TuckerTensorTrain` -- the ragged form (a tuple of cores each).
* :class:`UniformTuckerTensorTrain` -- two padded supercores
  ``(d,) + stack + (n, N)`` and ``(d,) + stack + (r, n, r)``, the static
  ``shape``, and a :class:`UT3Masks` structure holder with host boolean masks
  ``(d,) + stack + (n,)`` and ``(d + 1,) + stack + (r,)`` (True = real slot).
  Ranks are ``mask.sum(-1)`` and may differ per stack element; masks may be
  gappy (after ``+`` or :meth:`~UniformTuckerTensorTrain.hadamard`), the SVD
  and the orthogonalizations make them prefixes.  Padding content is
  don't-care: every operation masks on entry.

The rule: **structure is host data resolved at compile time; only supercores
flow at run time.**  Masks, ranks and ``shape`` never leave the host (masks
stay NumPy even with CuPy supercores), every output structure is computed on
the host from input structures, never from supercore values, and the
Numba kernels are compiled per structure -- the masks become index tables
frozen into the machine code -- and memoized in a cache keyed by the
operation, the padded ranks ``n`` and ``r`` and the :class:`UT3Masks` with
its stack axes flattened into one (both trains' for ``inner``; a reshaped
stack shares the kernels), plus ``shape`` for ``to_dense`` and ``inner``
(the one kernel of ``entries`` and ``apply`` has no ``shape`` in its key).
The padded ``N`` is in no key: the kernels read it off the arrays (see
:class:`~zorch_nb.tt_masks.KernelCache`).  :class:`UT3Masks` compares
and hashes by content, so a loop that rebuilds an identical structure every
iteration (as a manifold optimizer does) compiles once (padded ranks are part
of the structure: sums add them and ``svd`` keeps them, so such a loop
compacts after its ``svd``, see :meth:`UniformTuckerTensorTrain.compact`) -- once per
supercore dtype, that is: a float32 and a float64 train of one structure
share a cache entry and compile one machine-code version each (read-only
supercores, e.g. from ``np.frombuffer`` or ``np.load(mmap_mode='r')``, are
copied for the kernels, so they compile nothing new).
:func:`kernel_cache_info` reports ``(hits, misses, maxsize, currsize)``.
Each structure's kernel is also a generated file of zorch_nb's cache
folder (``$ZORCH_NB_CACHE_DIR``, see
:class:`~zorch_nb.kernels.tt_kernels.StructureKernel`), compiled with
Numba's ``cache=True``: a later process meeting the structure loads its
machine code instead of compiling it again (0.5-0.6 s per kernel).  Numba
never unloads compiled code, so each compiled kernel (per operation,
structure and dtype) holds memory for the life of the process (about
3 MiB compiled, 1 MiB loaded from disk, measured for ``to_dense``), even
after its cache entry is evicted (see :class:`~zorch_nb.tt_masks.KernelCache`).

Backends:

* NumPy supercores -- ``to_dense``, ``inner``/``norm``, ``entries`` and
  ``apply`` run structure-specialized Numba kernels
  (:mod:`zorch_nb.kernels.tt_kernels`) that read real slots only (large
  stacks split over a thread pool, byte for byte the serial result: see
  ``kernels/launch_config.TT_CPU_SERIAL_WORK``); the SVD frames are repaired
  by a generic Numba kernel; everything else is batched NumPy (``einsum``,
  ``matmul``, ``linalg.svd``).  ``svd``, ``orthogonalize`` and
  ``norm("orthogonal")`` run BLAS on one thread (threadpoolctl) and take
  a large stack in chunks over the threads (``TT_CPU_CHUNK_BYTES``;
  a smaller one with enough SVD work in its two halves,
  ``TT_CPU_SPLIT_WORK``).
* CuPy supercores -- the same operations as batched CuPy calls (``einsum``,
  ``matmul``, ``linalg.svd``) on masked supercores; results agree with the
  NumPy path within rounding.  Most operations only queue device work; these
  synchronize with the device: every SVD step of ``svd`` and
  ``orthogonalize``, and their entry (each reads back one bool, whether
  its matrix is finite: LAPACK's SVD never returns on inf, and a NaN would
  spread silently), ``hadamard`` and scaling (one bool each, whether a
  product of the cores could leave the range, read off their largest
  entries: then the products are taken of power-of-two scaled cores, the
  scale spread over the TT cores),
  ``entries`` with CuPy ``indices`` (bounds-checked on the host), ``save``,
  and ``TuckerTensorTrain.from_dense`` (its ranks depend on singular values).

Every operation exists as a method and as a functional ``ut3_*`` function of
``.data``; see :mod:`zorch_nb.tt_ops`.
"""
import dataclasses
import fractions
import math
import numbers

import numpy as np

from .tt_masks import UT3Masks, array_module, kernel_cache_clear, kernel_cache_info, ranks_text
from .tt_ops import (
    NORM_METHODS, ORTHOGONALIZE_KINDS, TrainOverflowError, _alpha_array, _scale, _t3_check,
    _train_list, t3_from_dense, t3_to_dense, ut3_add, ut3_apply, ut3_apply_masks, ut3_check,
    ut3_compact, ut3_entries, ut3_from_t3, ut3_hadamard, ut3_inner, ut3_load, ut3_neg,
    ut3_norm, ut3_orthogonalize, ut3_reverse,
    ut3_save, ut3_scale, ut3_squash_tails, ut3_stack, ut3_sub, ut3_svd, ut3_to_dense, ut3_to_t3,
    ut3_unstack,
)

__all__ = [
    "TuckerTensorTrain", "UniformTuckerTensorTrain", "UT3Masks", "kernel_cache_info",
    "kernel_cache_clear", "ORTHOGONALIZE_KINDS", "NORM_METHODS", "TrainOverflowError",
    "t3_from_dense", "t3_to_dense", "ut3_add", "ut3_apply",
    "ut3_apply_masks", "ut3_check", "ut3_compact", "ut3_entries", "ut3_from_t3",
    "ut3_hadamard", "ut3_inner", "ut3_load", "ut3_neg", "ut3_norm", "ut3_orthogonalize",
    "ut3_reverse", "ut3_save", "ut3_scale",
    "ut3_squash_tails", "ut3_stack", "ut3_sub", "ut3_svd", "ut3_to_dense", "ut3_to_t3",
    "ut3_unstack",
]


def _not_a_train(op, other):
    """Refuse ``train op other`` for ``other`` not a train (NumPy's refusal of
    ``train + array`` named only ``__array_ufunc__``)."""
    raise TypeError(f"`{op}` takes two UniformTuckerTensorTrains (same shape, stack shape and "
                    f"padded N), not {type(other).__name__}; for a dense result, use the dense "
                    f"tensor `x.to_dense()`")


@dataclasses.dataclass(frozen=True, eq=False)
class TuckerTensorTrain:
    """A ragged Tucker tensor train.

    Parameters
    ----------
    tucker_cores : sequence of arrays
        ``U_i`` of shape ``stack + (n_i, N_i)``, real (bool, int or float).
    tt_cores : sequence of arrays
        ``G_i`` of shape ``stack + (r_i, n_i, r_{i+1})``, real.

    Notes
    -----
    Values are computed in floating point: :meth:`to_dense` and
    :meth:`UniformTuckerTensorTrain.from_t3` use
    ``np.result_type(*core dtypes, np.float32)`` (bool and small ints give
    float32, int64 gives float64), never the cores' own integer or bool
    arithmetic.

    Examples
    --------
    >>> import numpy as np
    >>> x = TuckerTensorTrain([np.eye(2)], [np.ones((1, 2, 1))])
    >>> x.to_dense()
    array([1., 1.])
    """

    tucker_cores: tuple
    tt_cores: tuple

    def __post_init__(self):
        tk, tt = _t3_check(self.tucker_cores, self.tt_cores)
        object.__setattr__(self, "tucker_cores", tk)
        object.__setattr__(self, "tt_cores", tt)

    @property
    def data(self):
        """``(tucker_cores, tt_cores)``."""
        return (self.tucker_cores, self.tt_cores)

    @property
    def d(self):
        """Number of cores."""
        return len(self.tucker_cores)

    @property
    def stack_shape(self):
        """Leading shape of a stack of trains (``()`` for one train)."""
        return tuple(self.tucker_cores[0].shape[:-2])

    @property
    def shape(self):
        """Mode sizes ``(N_0, ..., N_{d-1})``."""
        return tuple(int(u.shape[-1]) for u in self.tucker_cores)

    @property
    def tucker_ranks(self):
        """``(n_0, ..., n_{d-1})``: a tuple of ``d`` Python ints (one set for a whole
        stack)."""
        return tuple(int(u.shape[-2]) for u in self.tucker_cores)

    @property
    def tt_ranks(self):
        """``(r_0, ..., r_d)`` including both boundary bonds: a tuple of ``d + 1``
        Python ints (one set for a whole stack)."""
        return tuple(int(g.shape[-3]) for g in self.tt_cores) + (int(self.tt_cores[-1].shape[-1]),)

    def to_dense(self):
        """Dense tensor, ``stack_shape + shape``; ``ValueError`` if it is too
        large to allocate (see :func:`~zorch_nb.tt_ops.ut3_to_dense`)."""
        return t3_to_dense(self.tucker_cores, self.tt_cores)

    @classmethod
    def from_dense(cls, dense, max_tucker_ranks=None, max_tt_ranks=None, rtol=None):
        """Train of a dense (unstacked) tensor by Tucker SVDs and TT-SVD; see
        :func:`~zorch_nb.tt_ops.t3_from_dense`."""
        return cls(*t3_from_dense(dense, max_tucker_ranks, max_tt_ranks, rtol))

    def __repr__(self):
        return (f"TuckerTensorTrain(shape={self.shape}, stack_shape={self.stack_shape}, "
                f"tucker_ranks={self.tucker_ranks}, tt_ranks={self.tt_ranks})")


def _wrap_t3(nested):
    if hasattr(nested[0][0], "shape"):  # a (tucker_cores, tt_cores) leaf
        return TuckerTensorTrain(*nested)
    return tuple(_wrap_t3(item) for item in nested)


@dataclasses.dataclass(frozen=True, eq=False)
class UniformTuckerTensorTrain:
    """A uniform (padded, mask-structured) Tucker tensor train.

    Parameters
    ----------
    tucker_supercore : numpy.ndarray or cupy.ndarray
        ``(d,) + stack + (n, N)``, float32 or float64.
    tt_supercore : numpy.ndarray or cupy.ndarray
        ``(d,) + stack + (r, n, r)``, same module and dtype.
    shape : tuple of int
        Real mode sizes (``N_i <= N``; the real physical slots are a prefix).
    masks : UT3Masks or (tucker_edge_mask, tt_edge_mask)
        Host NumPy bool masks ``(d,) + stack + (n,)`` and
        ``(d + 1,) + stack + (r,)``.

    Notes
    -----
    Frozen (its fields cannot be reassigned; the supercores are the arrays
    you passed, not copies: write to them and the train changes -- the
    masks are read-only copies); ``.data`` is the tuple the functional
    ``ut3_*`` functions take.
    ``+``, ``-`` and :meth:`hadamard` need equal ``shape``, ``stack_shape``
    and padded ``N``.  ``*`` multiplies by a scalar, or by an array that
    broadcasts to ``stack_shape`` (one factor per train), in either order.
    """

    # NumPy defers binary operators to this class: `ndarray * train` calls
    # __rmul__ instead of making an object array of scaled trains.
    __array_ufunc__ = None

    tucker_supercore: object
    tt_supercore: object
    shape: tuple
    masks: UT3Masks

    def __post_init__(self):
        U, G, shape, masks = ut3_check((self.tucker_supercore, self.tt_supercore, self.shape, self.masks))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "masks", masks)

    # -- structure -----------------------------------------------------------
    @property
    def data(self):
        """``(tucker_supercore, tt_supercore, shape, masks)``; ``masks`` is the
        :class:`UT3Masks` pair ``(tucker_edge_mask, tt_edge_mask)``."""
        return (self.tucker_supercore, self.tt_supercore, self.shape, self.masks)

    @property
    def d(self):
        """Number of cores."""
        return len(self.shape)

    @property
    def stack_shape(self):
        """Leading shape of a stack of trains (``()`` for one train)."""
        return tuple(self.tucker_supercore.shape[1:-2])

    @property
    def padded_sizes(self):
        """``(n, r, N)``."""
        return (self.tucker_supercore.shape[-2], self.tt_supercore.shape[-1], self.tucker_supercore.shape[-1])

    @property
    def tucker_ranks(self):
        """Tucker ranks: a NumPy integer array of shape ``(d,) + stack_shape``, the
        ranks of each stack element (on the host, also for CuPy supercores)."""
        return self.masks.tucker_ranks

    @property
    def tt_ranks(self):
        """TT ranks, both boundary bonds included: a NumPy integer array of shape
        ``(d + 1,) + stack_shape``, the ranks of each stack element (on the host)."""
        return self.masks.tt_ranks

    @property
    def dtype(self):
        """dtype of the supercores (float32 or float64)."""
        return self.tucker_supercore.dtype

    def __repr__(self):
        # The ranks, not only the padding: after svd(max_tt_ranks=1) the
        # padded r=8 read as the ranks.  A stack's trains share them or not.
        n, r, N = self.padded_sizes
        try:
            ranks = ranks_text(self.tucker_ranks, self.tt_ranks, self.d)
        except Exception:  # noqa: BLE001 -- a repr never raises
            ranks = "ranks unknown"
        return (f"UniformTuckerTensorTrain(shape={self.shape}, stack_shape={self.stack_shape}, "
                f"{ranks}, padded n={n}, r={r}, N={N}, dtype={self.dtype})")

    # -- conversions ---------------------------------------------------------
    @classmethod
    def from_t3(cls, t3, n=None, r=None, N=None):
        """Pad ragged train(s) (see :func:`ut3_from_t3`)."""
        return cls(*ut3_from_t3(t3, n=n, r=r, N=N))

    @classmethod
    def from_dense(cls, dense, max_tucker_ranks=None, max_tt_ranks=None, rtol=None, *,
                   n=None, r=None):
        """Uniform train of a dense (unstacked) tensor:
        ``from_t3(TuckerTensorTrain.from_dense(...), n=n, r=r)``; ``n`` and ``r``
        pad the Tucker and TT ranks (default: the largest of the train)."""
        t3 = TuckerTensorTrain.from_dense(dense, max_tucker_ranks, max_tt_ranks, rtol)
        return cls.from_t3(t3, n=n, r=r)

    def to_t3(self):
        """Ragged train, or nested tuples of them (stack shape) when stacked.

        Raises ``ValueError`` if a mask row is all False (a rank-0 Tucker core
        or bond): such a train is the zero tensor, and a ragged train needs
        ranks >= 1 (the functional ``ut3_to_t3`` returns the zero-size cores).
        """
        for name, mask in zip(("tucker_edge_mask", "tt_edge_mask"), self.masks):
            empty = ~mask.any(axis=-1)
            if empty.any():
                at = tuple(int(i) for i in np.argwhere(empty)[0])
                raise ValueError(f"the train has rank 0 where `{name}`[{', '.join(map(str, at))}] "
                                 f"is all False: it is the zero tensor, which a "
                                 f"TuckerTensorTrain (ranks >= 1) cannot hold; use to_dense()")
        return _wrap_t3(ut3_to_t3(self.data))

    def to_dense(self):
        """Dense tensors, ``stack_shape + shape``."""
        return ut3_to_dense(self.data)

    def apply_masks(self):
        """The same train with every padding slot zeroed."""
        return type(self)(*ut3_apply_masks(self.data))

    def reverse(self):
        """The train of the tensor with its axes reversed."""
        return type(self)(*ut3_reverse(self.data))

    def squash_tails(self):
        """The same tensor with the boundary bonds summed, so ``r_0 = r_d = 1``."""
        return type(self)(*ut3_squash_tails(self.data))

    def compact(self, n=None, r=None):
        """The same tensor with live slots first and padding ``n``, ``r``
        (default: the largest live ranks); see :func:`~zorch_nb.tt_ops.ut3_compact`.
        In an optimizer loop, ``x = (x + step).svd(...)[0].compact(n, r)``
        keeps one structure (``svd`` keeps its input's padded sizes, and
        every sum adds them)."""
        return type(self)(*ut3_compact(self.data, n, r))

    @staticmethod
    def stack(trains):
        """Stack trains along a new leading stack axis."""
        trains = _train_list(trains)
        for k, t in enumerate(trains):
            if not isinstance(t, UniformTuckerTensorTrain):
                raise TypeError(f"Argument `trains` must hold UniformTuckerTensorTrains, but "
                                f"trains[{k}] is a {type(t).__name__}.")
        return UniformTuckerTensorTrain(*ut3_stack([t.data for t in trains]))

    def unstack(self):
        """The trains of a stack, along its first stack axis."""
        return tuple(type(self)(*t) for t in ut3_unstack(self.data))

    # -- arithmetic ----------------------------------------------------------
    def _other(self, other, op):
        if not isinstance(other, UniformTuckerTensorTrain):
            raise TypeError(f"Argument of `{op}` must be a UniformTuckerTensorTrain, not {type(other).__name__}.")
        return other.data

    def __add__(self, other):
        if not isinstance(other, UniformTuckerTensorTrain):
            _not_a_train("+", other)
        return type(self)(*ut3_add(self.data, other.data))

    def __sub__(self, other):
        if not isinstance(other, UniformTuckerTensorTrain):
            _not_a_train("-", other)
        return type(self)(*ut3_sub(self.data, other.data))

    # (array + train: NumPy defers here, as __array_ufunc__ is None)
    def __radd__(self, other):
        _not_a_train("+", other)

    def __rsub__(self, other):
        _not_a_train("-", other)

    def __neg__(self):
        return type(self)(*ut3_neg(self.data))

    def __mul__(self, alpha):
        if isinstance(alpha, UniformTuckerTensorTrain):
            raise TypeError("`*` multiplies a train by a scalar; use `x.hadamard(y)` for the elementwise product.")
        return type(self)(*ut3_scale(self.data, alpha))

    __rmul__ = __mul__

    def __truediv__(self, alpha):
        """``x / alpha``: ``x * (1 / alpha)`` for a scalar or per-stack array ``alpha``.

        The inverse is not rounded to a float first: a Python number's is
        exact (a Fraction), a NumPy or CuPy factor's a float64 mantissa and a
        power of two, so ``x / 1e-320`` is ``x * 1e320`` where that fits
        though ``1e320`` is no float64; dtypes promote as for ``*``.

        Dividing by 0 (as multiplying by inf) puts the infinite factor on one
        TT core, so an entry the dense ``x.to_dense() / 0`` would give as
        +-inf comes out NaN wherever the train's sum mixes terms of both
        signs (or a zero factor)."""
        if isinstance(alpha, UniformTuckerTensorTrain):
            raise TypeError("`/` divides a train by a scalar; trains do not divide elementwise.")
        if isinstance(alpha, (list, tuple)):  # per-stack factors, as `*` takes them
            alpha = _alpha_array(alpha)
        # `*`'s check of alpha, here on what the user passed (not its inverse)
        if isinstance(alpha, numbers.Number):
            real = isinstance(alpha, numbers.Real)  # (not complex, not Decimal)
        else:  # (other objects: `1 / alpha` decides)
            real = not hasattr(alpha, "dtype") or alpha.dtype.kind in "biuf"
        if not real:
            raise TypeError(f"Argument `alpha` must be a real number or an array of reals, "
                            f"not {alpha!r}.")
        weak = isinstance(alpha, numbers.Number) and not hasattr(alpha, "dtype")
        if isinstance(alpha, numbers.Number) and alpha == 0:
            # as a NumPy array divides: by 0 (or False) gives inf/nan with a
            # RuntimeWarning (Python's 1 / 0, Fraction's, raised ZeroDivisionError);
            # -0.0 keeps its sign (-inf)
            return self * float(1 / np.float64(alpha))  # (weak: the dtype is kept)
        if weak and (isinstance(alpha, (int, fractions.Fraction))
                     or isinstance(alpha, float) and math.isfinite(alpha)):
            # the exact inverse (1 / 1e-320 is past the float range; the
            # product is not): `*` rounds it once, or splits it off as a power
            return self * (fractions.Fraction(1) / fractions.Fraction(alpha))
        dtype = getattr(alpha, "dtype", None)
        if dtype is not None and dtype.kind in "biuf":
            # a NumPy or CuPy factor: its inverse as a float64 mantissa and a power
            # of two (1 / np.float32(1e-40) is inf in float32), promoted by its dtype
            xp = np if isinstance(alpha, np.generic) else array_module(alpha, "alpha")
            m, k = xp.frexp(xp.asarray(alpha).astype(np.float64))
            inverse = 1 / m  # (a zero: inf and NumPy's warning, as x / 0)
            k = k if xp is np else xp.asnumpy(k)  # (powers are host ints)
            return type(self)(*_scale(self.data, inverse, -k, like=dtype))
        try:
            inverse = 1 / alpha
        except TypeError:  # not a number: Python's own "unsupported operand" error
            return NotImplemented
        return self * inverse

    def hadamard(self, other):
        """Elementwise product (Kronecker products of the cores)."""
        return type(self)(*ut3_hadamard(self.data, self._other(other, "hadamard")))

    def inner(self, other):
        """``sum(self * other)`` per stack element.

        Returns
        -------
        array, shape ``stack_shape``
            A 0-d array (not a scalar) for an unstacked train; ``float()``
            or ``.item()`` gives the number.
        """
        return ut3_inner(self.data, self._other(other, "inner"))

    def norm(self, method="inner"):
        """Frobenius norm per stack element.

        ``method="inner"`` (default): ``sqrt(inner(x, x))``, fast, but for a
        difference of nearly equal trains (``(x_next - x).norm()``) only
        accurate to about ``sqrt(eps)`` of the terms' norms; ``"orthogonal"``:
        through a left orthogonalization, accurate to about ``eps`` of them,
        7-30x the cost (see :func:`ut3_norm`).

        Returns
        -------
        array, shape ``stack_shape``
            A 0-d array (not a scalar) for an unstacked train; ``float()``
            or ``.item()`` gives the number.
        """
        return ut3_norm(self.data, method)

    # -- orthogonalization and SVD ------------------------------------------
    def orthogonalize(self, kind="left"):
        """Orthogonalized train; ``kind`` in ``ORTHOGONALIZE_KINDS`` (see
        :func:`ut3_orthogonalize`)."""
        return type(self)(*ut3_orthogonalize(self.data, kind))

    def svd(self, max_tucker_ranks=None, max_tt_ranks=None, rtol=None):
        """Truncating T3-SVD: ``(train, (tucker_svs, tt_svs))`` (see :func:`ut3_svd`;
        ``rtol`` also cuts the singular values at most ``rtol`` times each step's
        largest: ``(x + x).svd(rtol=1e-12)`` has ``x.svd()``'s ranks, the sum's
        zero directions cut)."""
        data, svs = ut3_svd(self.data, max_tucker_ranks, max_tt_ranks, rtol)
        return type(self)(*data), svs

    # -- evaluation ----------------------------------------------------------
    def entries(self, indices):
        """Entries at ``indices`` (``batch + (d,)`` ints).

        Returns
        -------
        array, shape ``stack_shape + batch``
            A 0-d array (not a scalar) for an unstacked train and one index
            tuple of shape ``(d,)``.
        """
        return ut3_entries(self.data, indices)

    def apply(self, vectors):
        """Contract with one vector per mode: ``stack + batch``."""
        return ut3_apply(self.data, vectors)

    # -- files ---------------------------------------------------------------
    def save(self, path):
        """Write a ``.npz`` file (``.npz`` appended to a name without it, as
        ``np.savez`` does; :meth:`load` takes the same name)."""
        ut3_save(path, self.data)

    @classmethod
    def load(cls, path):
        """Read a ``.npz`` file written by :meth:`save` (NumPy supercores)."""
        return cls(*ut3_load(path))

