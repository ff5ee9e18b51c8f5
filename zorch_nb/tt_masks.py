"""Structure holder and structure-keyed kernel cache of the uniform T3 layer.

:class:`UT3Masks` holds the two host boolean masks of a uniform Tucker tensor
train and hashes/compares by content, so a structure rebuilt from fresh
arrays finds the kernels compiled for an identical one.
:class:`KernelCache` is that cache; :func:`kernel_cache_info` reports it.
"""
import collections
import os
import threading

import numpy as np

from ._backend import refuse_masked
from ._text import elided_list

__all__ = ["UT3Masks", "KernelCacheInfo", "kernel_cache_info", "kernel_cache_clear"]


def array_module(a, name="array"):
    """Return ``numpy`` or ``cupy`` for a supercore, without importing CuPy
    unless the array is a CuPy array."""
    if isinstance(a, np.ndarray):
        _refuse_masked(a, name)
        return np
    module = type(a).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy
    raise TypeError(
        f"Argument `{name}` must be a numpy.ndarray or cupy.ndarray, "
        f"not {type(a).__module__}.{type(a).__name__}."
    )


def _refuse_masked(a, name):
    refuse_masked(a, name, "the tensor-train kernels")  # (as the field kernels refuse it)


def ranks_text(tucker_ranks, tt_ranks, d):
    """The ranks for a repr: the stack's shared ranks as (elided) lists, or a
    pointer to the attributes where the trains' ranks differ (a stack's full
    lists ran to tens of kilobytes)."""
    tucker = np.asarray(tucker_ranks).reshape(d, -1)
    tt = np.asarray(tt_ranks).reshape(d + 1, -1)
    if tucker.shape[1] and (tucker == tucker[:, :1]).all() and (tt == tt[:, :1]).all():
        return (f"tucker_ranks={elided_list(tucker[:, 0], 4, 4)}, "
                f"tt_ranks={elided_list(tt[:, 0], 4, 4)}")
    return "ranks per train (.tucker_ranks, .tt_ranks)"


def _host_bool_mask(mask, name):
    """Validate one mask and return an immutable host copy with bytes 0 / 1."""
    _refuse_masked(mask, name)
    if not isinstance(mask, np.ndarray):
        if hasattr(mask, "__cuda_array_interface__") or type(mask).__module__.split(".")[0] == "cupy":
            raise TypeError(
                f"Argument `{name}` must be a host numpy.ndarray of bool, not a device array "
                f"({type(mask).__module__}.{type(mask).__name__}); masks are structure and stay on "
                f"the host even when the supercores are on the GPU: copy it to the host "
                f"first, e.g. `{name}.get()` for CuPy or `{name}.copy_to_host()` for "
                f"numba.cuda."
            )
        try:
            mask = np.asarray(mask)
        except ValueError:  # a ragged nesting
            raise ValueError(f"Argument `{name}` must be a rectangular array of bool, "
                             f"not a ragged nesting.") from None
    if mask.dtype != np.bool_:
        raise TypeError(
            f"Argument `{name}` must have dtype bool, not {mask.dtype}; "
            f"pass `numpy.asarray({name}) != 0` (True marks a real slot)."
        )
    # Bytes other than 0 and 1 are True to NumPy's logic but hash differently:
    # an equal structure would compare unequal and miss the kernel cache.
    clean = mask.view(np.uint8) != 0
    # Backed by an immutable bytes object: NumPy refuses setflags(write=True)
    # on this array and on every array in its .base chain (none owns its
    # data), so the cached hash and the kernels compiled for these bytes stay
    # valid.  (A read-only copy that owned its data could be made writeable
    # again through .base.)
    return np.frombuffer(clean.tobytes(), dtype=bool).reshape(clean.shape)


class UT3Masks(tuple):
    """Structure of a uniform Tucker tensor train: two host boolean masks.

    A 2-tuple ``(tucker_edge_mask, tt_edge_mask)`` that hashes and compares by
    content (shape, dtype and bytes of both masks), with an identity fast
    path and a cached hash.  It keeps immutable copies of the masks (backed
    by ``bytes``; no route makes them writeable), every True stored as byte 1,
    and hands out read-only views of them (indexing, unpacking, ``+`` and
    ``*``, which give plain tuples): assigning a view's ``shape``,
    ``dtype`` or ``strides`` changes that view only, never the structure.
    A plain tuple of arrays compares unequal.  There is no order: ``<``,
    ``<=``, ``>``, ``>=`` raise ``TypeError``, and so do ``in``,
    ``.index()`` and ``.count()`` (tuple's own compared the masks
    elementwise and failed with "truth value of an array is ambiguous");
    compare masks with ``numpy.array_equal``.

    Parameters
    ----------
    tucker_edge_mask : numpy.ndarray of bool, shape ``(d,) + stack + (n,)``
        True marks a real Tucker slot of core ``i``.
    tt_edge_mask : numpy.ndarray of bool, shape ``(d + 1,) + stack + (r,)``
        True marks a real slot of bond ``i`` (bonds ``0`` and ``d`` are the
        boundary bonds).

    Raises
    ------
    TypeError
        If a mask is a device (CuPy) array or not boolean.
    ValueError
        If the shapes do not fit together.

    Examples
    --------
    >>> import numpy as np
    >>> a = UT3Masks(np.ones((2, 3), bool), np.ones((3, 2), bool))
    >>> b = UT3Masks(np.ones((2, 3), bool), np.ones((3, 2), bool))
    >>> a == b and hash(a) == hash(b)
    True
    >>> a.tt_ranks
    array([2, 2, 2])
    """

    #: As a named tuple's: ``dataclasses.asdict`` / ``astuple`` of a train
    #: rebuild a tuple without ``_fields`` from one iterable, which the two
    #: masks' constructor does not take (a bare TypeError came out).
    _fields = ("tucker_edge_mask", "tt_edge_mask")

    def __new__(cls, tucker_edge_mask, tt_edge_mask):
        tk = _host_bool_mask(tucker_edge_mask, "tucker_edge_mask")
        tt = _host_bool_mask(tt_edge_mask, "tt_edge_mask")
        if tk.ndim < 2 or tk.shape[0] < 1:
            raise ValueError(
                "Argument `tucker_edge_mask` must have shape (d,) + stack + (n,) with d >= 1, "
                f"not {tk.shape}."
            )
        if 0 in tk.shape or 0 in tt.shape:  # as ut3_check: no empty stack, n, r >= 1
            raise ValueError(
                f"Arguments `tucker_edge_mask` {tk.shape} and `tt_edge_mask` {tt.shape} must "
                f"have no zero-length axis (stack, n, r >= 1)."
            )
        want = (tk.shape[0] + 1,) + tk.shape[1:-1]
        if tt.ndim != tk.ndim or tt.shape[:-1] != want:
            raise ValueError(
                f"Argument `tt_edge_mask` must have shape {want + ('r',)} to match "
                f"`tucker_edge_mask` of shape {tk.shape}, not {tt.shape}."
            )
        self = super().__new__(cls, (tk, tt))
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_flat", None)
        return self

    def stack_flat(self):
        """The same structure with its stack axes flattened into one,
        ``(d, S, n)`` and ``(d + 1, S, r)`` (cached; ``self`` where the stack is
        one axis already): what the kernels see, so their cache key -- a
        stack ``(6,)`` and its reshape to ``(2, 3)`` share the kernels."""
        flat = self.__dict__["_flat"]
        if flat is None:
            tk, tt = self
            if tk.ndim == 3:
                flat = self
            else:
                S = int(np.prod(tk.shape[1:-1], dtype=np.int64))
                flat = UT3Masks(tk.reshape(tk.shape[0], S, tk.shape[-1]),
                                tt.reshape(tt.shape[0], S, tt.shape[-1]))
            object.__setattr__(self, "_flat", flat)
        return flat

    def __setattr__(self, name, value):
        raise AttributeError("UT3Masks is immutable")

    # Every route out -- indexing, iteration (unpacking), the properties --
    # gives a fresh view: NumPy lets anyone assign .shape, .dtype or .strides
    # of an array it cannot write, and on the stored array that changed the
    # structure behind its cached hash and the kernels compiled for it.
    def __getitem__(self, index):
        got = tuple.__getitem__(self, index)
        return tuple(m.view() for m in got) if isinstance(index, slice) else got.view()

    def __iter__(self):
        return (m.view() for m in tuple.__iter__(self))

    # tuple's concatenation and repetition copy the stored items themselves
    # (`masks + ()`, `() + masks`, `masks * 2`); hand out views there too.
    # Both give plain tuples, as tuple's do: a concatenation is no structure.
    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple(self) + other

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return other + tuple(self)

    def __mul__(self, times):
        return tuple(self) * times

    __rmul__ = __mul__

    def __getnewargs__(self):  # (tuple's gave its stored items, in one tuple)
        return (self[0], self[1])

    def __reduce__(self):
        return (UT3Masks, (self[0], self[1]))

    def __hash__(self):
        h = self.__dict__["_hash"]
        if h is None:
            h = hash(tuple((m.shape, m.dtype.str, m.tobytes()) for m in tuple.__iter__(self)))
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, UT3Masks):
            # tuple's own == would compare the masks elementwise ("truth value
            # of an array is ambiguous"); a plain pair is not a structure
            return False if isinstance(other, tuple) else NotImplemented
        if hash(self) != hash(other):
            return False
        return all(
            a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
            for a, b in zip(tuple.__iter__(self), tuple.__iter__(other))
        )

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def _unordered(self, other):
        # tuple's comparisons would compare the masks elementwise and fail
        # with "truth value of an array is ambiguous"; say what is meant.
        # Raised, not NotImplemented: a tuple on the other side would then
        # try its own comparison with this one and fail that way again.
        raise TypeError("UT3Masks compare for equality only (by content); they have no order.")

    __lt__ = __le__ = __gt__ = __ge__ = _unordered

    def _no_search(self, *args):
        raise TypeError("UT3Masks holds two arrays: `in`, index() and count() would compare "
                        "arrays elementwise; use numpy.array_equal on the masks.")

    __contains__ = index = count = _no_search

    def __repr__(self):
        return (f"UT3Masks(d={self.d}, stack_shape={self.stack_shape}, n={self.n}, r={self.r}, "
                f"{ranks_text(self.tucker_ranks, self.tt_ranks, self.d)})")

    @property
    def tucker_edge_mask(self):
        """Read-only ``(d,) + stack + (n,)`` bool mask of real Tucker slots."""
        return self[0]

    @property
    def tt_edge_mask(self):
        """Read-only ``(d + 1,) + stack + (r,)`` bool mask of real bond slots."""
        return self[1]

    @property
    def d(self):
        """Number of cores."""
        return tuple.__getitem__(self, 0).shape[0]

    @property
    def stack_shape(self):
        """Shape of the stack of trains."""
        return tuple.__getitem__(self, 0).shape[1:-1]

    @property
    def n(self):
        """Padded Tucker rank."""
        return tuple.__getitem__(self, 0).shape[-1]

    @property
    def r(self):
        """Padded TT rank."""
        return tuple.__getitem__(self, 1).shape[-1]

    @property
    def tucker_ranks(self):
        """Tucker ranks, ``(d,) + stack`` ints (per stack element)."""
        return tuple.__getitem__(self, 0).sum(axis=-1)

    @property
    def tt_ranks(self):
        """TT ranks including both boundary bonds, ``(d + 1,) + stack`` ints."""
        return tuple.__getitem__(self, 1).sum(axis=-1)


KernelCacheInfo = collections.namedtuple("KernelCacheInfo", ["hits", "misses", "maxsize", "currsize"])
KernelCacheInfo.__doc__ = """Statistics of the kernel cache, with the fields of
``functools.lru_cache``'s ``cache_info()``: ``(hits, misses, maxsize, currsize)``."""


class KernelCache:
    """Memo of compiled kernels keyed by structure.

    Keys are ``(operation, shape, padded ranks, UT3Masks, ...)``; a miss calls
    the factory, a hit returns the stored kernel.  The padded ranks are the
    supercores' ``n`` and ``r``; their padded mode size ``N`` is no part of a
    key (the kernels read it from the arrays they are given), so trains that
    differ only in ``N`` share an entry.  The factory builds a
    :class:`~zorch_nb.kernels.tt_kernels.StructureKernel` (a Numba
    dispatcher of a generated module); Numba compiles it on its first call,
    or loads it from its on-disk cache, once per dtype of the supercores (a
    float32 and a float64 train of one structure share the entry and compile
    twice).

    Least recently used entries are dropped beyond ``maxsize``.  Dropping one
    frees the dispatcher, but neither its generated module (registered in
    ``sys.modules`` for Numba's cache loads, its index tables with it: at
    most 1 MB a table) nor its machine code: Numba never unloads code it has
    compiled, so every compiled kernel (per operation, structure and dtype)
    costs memory for the life of the process, whether or not its entry is
    evicted (measured for ``to_dense``, resident memory per new structure:
    about 3 MiB compiled in the process, 1 MiB loaded from Numba's on-disk
    cache), besides its compile time (about 0.4 s).
    A loop whose structures keep changing (ranks chosen per iteration)
    grows the process by that much per new structure; reuse structures,
    e.g. pad to fixed ranks, to keep it bounded.  An evicted structure met
    again costs its memory anew, its compile not: the kernel is loaded from
    Numba's on-disk cache (as it is in a later process, see
    :class:`~zorch_nb.kernels.tt_kernels.StructureKernel`).
    """

    def __init__(self, maxsize=256):
        self._maxsize = maxsize
        self._store = collections.OrderedDict()
        self._lock = threading.Lock()
        self._building = {}   # key -> Event set when its one build ends
        self.hits = 0
        self.misses = 0

    def get(self, key, factory):
        """Return the kernel stored under ``key``, building it on a miss.

        One build per key: threads meeting a new structure at once wait for
        the first one's kernel (and count as hits) instead of each building
        -- and, without a writable disk cache, compiling -- their own."""
        while True:
            with self._lock:
                kernel = self._store.get(key)
                if kernel is not None:
                    self.hits += 1
                    self._store.move_to_end(key)
                    return kernel
                done = self._building.get(key)
                if done is None:
                    done = self._building[key] = threading.Event()
                    self.misses += 1
                    break
            # the factory runs outside the lock (a compile takes a second);
            # after its end the entry is there -- or the build failed, or it
            # was evicted at once, and this thread tries itself
            done.wait()
        try:
            kernel = factory()
            with self._lock:
                self._store[key] = kernel
                while len(self._store) > self._maxsize:
                    self._store.popitem(last=False)
        finally:
            with self._lock:
                self._building.pop(key, None)
            done.set()
        return kernel

    def info(self):
        """``KernelCacheInfo(hits, misses, maxsize, currsize)``: lookups that
        found a kernel, lookups that built one, the eviction bound and the
        number of kernels held now."""
        with self._lock:
            return KernelCacheInfo(self.hits, self.misses, self._maxsize, len(self._store))

    def clear(self):
        """Drop every stored kernel and reset the counters.  Frees what
        eviction frees, not the compiled machine code (see the class notes);
        later calls compile anew."""
        with self._lock:
            self._store.clear()
            self.hits = 0
            self.misses = 0


KERNELS = KernelCache()


def _after_fork_in_child():
    # another thread of the parent may have held the lock at the fork (a
    # lookup, kernel_cache_info): in the child no thread would release it
    # and the first train op hung; the stored kernels stay usable
    KERNELS._lock = threading.Lock()
    # and a build running in another thread at the fork never ends here
    KERNELS._building = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def kernel_cache_info():
    """Statistics of the structure-keyed kernel cache.

    Returns
    -------
    KernelCacheInfo
        ``(hits, misses, maxsize, currsize)``, the fields of
        ``functools.lru_cache``'s ``cache_info()``.  A hit means no new
        compiled kernel for the structure; the first call with a new
        supercore dtype still compiles once (see :class:`KernelCache`).

    Notes
    -----
    Entries beyond ``maxsize`` are evicted, but the machine code Numba
    compiled for them stays in memory for the life of the process (about
    3 MiB per compiled kernel, 1 MiB per one loaded from disk); see
    :class:`KernelCache`.
    """
    return KERNELS.info()


def kernel_cache_clear():
    """Drop every cached kernel and reset the counters.

    The compiled machine code is not freed (Numba never unloads it); this
    only makes the next call per structure build its kernel again (loaded
    from Numba's on-disk cache where a process compiled it before)."""
    KERNELS.clear()
