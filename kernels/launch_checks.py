"""O(1) argument checks of the field launchers, one implementation for every
backend (:mod:`.field_cpu`, :mod:`.field_cuda_numba`, :mod:`.field_cupy`),
and of the GKR launchers (:mod:`.gkr_cpu`, :mod:`.gkr_cuda_numba`,
:mod:`.gkr_cupy`; their section at the end states their array forms).

The kernels themselves validate nothing, and a launcher misused from research
code must not give a wrong answer, hang or crash the process: these checks
raise ``TypeError`` (a wrong kind of argument: not an array, a dtype, a
non-integer) or ``ValueError`` (a wrong value: an opcode, a shape, a length, a
layout, an overlap), naming the launcher and the argument.

They read only metadata -- dtype, shape, flags and, for the overlap test, the
first address and byte size -- so they cost the same for every length, and
work on NumPy arrays, CuPy arrays, Numba device arrays (and the simulator's
and the CuPy emulation's stand-ins).  NumPy arrays take a fast path: they are
what the object layer hands the CPU kernels on every call.  Each backend
takes its own kind: the CPU launchers NumPy arrays only
(:func:`check_host_arrays`), the CuPy launchers no NumPy array
(:func:`check_device_arrays`), the Numba-CUDA ones any of them; the GPU
launchers refuse a CuPy array of another device than the current one
(:func:`check_current_device`).

Array forms (the same in every backend):

* base words: 1-d ``(n,)``;
* extension words: ``(n, 4)`` or the same words flat, ``(4 n,)``; the
  launchers reshape (a view: the arrays are C-contiguous) to the form their
  kernels index.

Every array is C-contiguous ``uint32`` (``encode`` takes ``int64`` values), and
``out`` is writeable.  A strided view is refused rather than copied: the CuPy
kernels take bare pointers and would read it as if it were contiguous.

``out`` may share memory with an input only where the kernel is correct in
place: where ``out`` *is* that input (the same first address and size) and
the launcher's result word ``i`` depends on that input's word ``i`` alone
(``aliasing`` below).  Any other overlap -- a shifted view, an inverse or power
written over its operand, a broadcast operand under ``out`` -- is refused:
the kernels read such words after they were written.
"""
import operator

import numpy as np

from .field_params import FIELDS, FieldParams
from .monty import OP_ADD, OP_INV, OP_MUL, OP_NEG, OP_SQUARE, OP_SUB

__all__ = ["UNARY", "BINARY", "IN_PLACE_UNARY", "check_map", "check_bcast", "check_pow",
           "check_encode", "check_decode", "check_sum_rows", "check_gkr_fold",
           "check_gkr_jagged",
           "check_gkr_pyramid", "check_gkr_pyramid_flat", "check_gkr_steps",
           "check_gkr_disjoint", "check_field", "check_host_arrays", "check_device_arrays",
           "check_current_device", "layer_names", "check_words", "check_count_values",
           "as_int", "cupy_device", "current_cupy_device"]

_U32 = np.dtype(np.uint32)
_I64 = np.dtype(np.int64)
#: ``id`` of each shipped field record: the hot paths trust these objects
#: (an identity test); an equal copy -- an unpickled one -- takes the general
#: check, which compares values.
_SHIPPED = frozenset(id(f) for f in FIELDS.values())
# module-level names for the hot path (a global read, not a global and an attribute)
_ndarray = np.ndarray
_may_share = np.may_share_memory

#: The opcodes each launcher family implements: monty.base_map1 / ext4_map1
#: and zorch_base_op1 / zorch_ext4_op1 of cuda/field_ops.cu take NEG, SQUARE
#: and INV (any other code falls through to INV); monty.base_map2 / ext4_map2
#: and zorch_base_op2 / zorch_ext4_op2 take ADD, SUB and MUL (others fall
#: through to MUL), and so do the broadcast forms.
UNARY = frozenset((OP_NEG, OP_SQUARE, OP_INV))
BINARY = frozenset((OP_ADD, OP_SUB, OP_MUL))
#: Unary ops correct with ``out`` the operand itself: elementwise in every
#: backend.  The inverse is not (the CPU's batch trick writes its prefix
#: products into ``out`` before it reads the operand again).
IN_PLACE_UNARY = frozenset((OP_NEG, OP_SQUARE))
_STEPS = (0, 1)
_EXT_DEGS = frozenset(((1, 4), (4, 1), (4, 4)))  # (a_deg, b_deg): at least one extension
_OP_NAMES = {OP_ADD: "OP_ADD", OP_SUB: "OP_SUB", OP_MUL: "OP_MUL", OP_NEG: "OP_NEG",
             OP_SQUARE: "OP_SQUARE", OP_INV: "OP_INV"}


def _names(ops):
    return ", ".join(f"{_OP_NAMES[o]} ({o})" for o in sorted(ops))


def check_field(where, f, name="f"):
    """Refuse ``f`` (argument ``name``) unless it is a shipped field's record.

    Only those: the kernels rely on invariants checked for them at import
    (:mod:`.field_params`), and the CUDA C backends compile per field
    *name* -- a record with other constants would run silently wrong.
    An equal copy (an unpickled one) is accepted.
    """
    if type(f) is not FieldParams:
        raise TypeError(f"{where}: argument `{name}` must be a FieldParams (e.g. "
                        f"KoalaBear.params), not {type(f).__name__}")
    known = FIELDS.get(f.name) if isinstance(f.name, str) else None
    if known != f:
        what = (f"it differs from the {f.name!r} record in "
                f"{', '.join(k for k in f._fields if getattr(f, k) != getattr(known, k))}"
                ) if known is not None else f"there is no field named {f.name!r}"
        raise ValueError(f"{where}: argument `{name}` must be the parameters of a supported "
                         f"field (KoalaBear.params or BabyBear.params, i.e. one of "
                         f"field_params.FIELDS), but {what}")


def _op(where, op, ops):
    # an integer, not a bool (np.True_ == 1 would run OP_SUB) nor a float
    # (2.0 == OP_MUL would compile another specialisation), nor a
    # np.timedelta64 (NumPy's integer subclass: equal to an opcode too)
    if isinstance(op, (bool, np.bool_, np.timedelta64)) or not isinstance(op, (int, np.integer)):
        raise TypeError(f"{where}: argument `op` must be an integer opcode ({_names(ops)}), "
                        f"not {type(op).__name__}")
    if op not in ops:
        raise ValueError(f"{where}: argument `op` must be one of {_names(ops)}, not {op!r}")


def as_int(label, v, lo=0, hi=None):
    """``v`` as a Python int in ``[lo, hi]``: anything ``operator.index``
    takes (Python and NumPy integers, 0-d integer arrays), not a bool.
    ``label`` starts the error (``"Argument `n`"``); also the object layer's
    integer check (``logup_gkr``), so both say it the same way."""
    try:
        if isinstance(v, (bool, np.bool_)) or (isinstance(v, np.ndarray) and v.dtype == bool):
            raise TypeError
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{label} must be an integer, not {type(v).__name__}") from None
    if v < lo or (hi is not None and v > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{label} must be {bound}, not {v}")
    return v


def _int(where, name, v, lo=0, hi=None):
    """``v`` as a Python int in ``[lo, hi]`` (see :func:`as_int`)."""
    return as_int(f"{where}: argument `{name}`", v, lo, hi)


# ---- one array ---------------------------------------------------------------

def _flag(x, key, attr, default):
    # NumPy, CuPy and the simulator's arrays have flag objects with
    # attributes; Numba device arrays a dict keyed like NumPy's
    flags = getattr(x, "flags", None)
    value = getattr(flags, attr, None)
    if value is None and isinstance(flags, dict):
        value = flags.get(key)
    return default if value is None else bool(value)


def _shape(where, name, x, dtype, writes):
    """Shape of ``x`` after checking it is a C-contiguous array of ``dtype``
    (writeable where the launcher ``writes`` it)."""
    if type(x) is np.ndarray and x.dtype is dtype:  # the hot path: only flags left
        flags = x.flags
        if flags.c_contiguous and (not writes or flags.writeable):
            return x.shape
    if where.startswith(HOST_LAUNCHERS) and not isinstance(x, _ndarray):
        check_host_arrays(where, ((name, x),))
    dt, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
    if dt is None or shape is None or isinstance(x, np.generic):
        raise TypeError(f"{where}: argument `{name}` must be a NumPy, CuPy or Numba "
                        f"device array, not {type(x).__name__}")
    if isinstance(x, (np.matrix, np.ma.MaskedArray)):
        # a matrix's reshape(-1) stays 2-d, so the kernels' word indices read
        # and wrote whole rows (past the end of `out`); a mask would be ignored
        raise TypeError(f"{where}: argument `{name}` must be a plain NumPy array, not a "
                        f"{type(x).__module__}.{type(x).__name__}; pass numpy.asarray({name})")
    if dt != dtype:
        if dtype == _U32:
            hint = " (Montgomery words)"
        elif name == "v":  # encode's values
            hint = (" (signed values: uint64 ones past 2**63 would read as negative; reduce "
                    "them mod p, or cast, first)")
        else:  # counts, prefix scratch: the kernels' index types
            hint = f" (cast with .astype(numpy.{dtype}))"
        raise TypeError(f"{where}: argument `{name}` must have dtype {dtype}{hint}, not {dt}")
    # writeable first: a broadcast `out` is strided too, and a contiguous copy
    # (the other message's advice) would take the results away from the caller
    if writes and not _flag(x, "WRITEABLE", "writeable", True):
        raise ValueError(f"{where}: argument `{name}` must be writeable (it is read-only "
                         f"or a broadcast view)")
    if not _flag(x, "C_CONTIGUOUS", "c_contiguous", False):
        raise ValueError(f"{where}: argument `{name}` must be C-contiguous (the kernels "
                         f"index its words directly), not a strided view of shape "
                         f"{tuple(shape)}; pass a contiguous copy")
    return tuple(shape)


def check_words(where, name, x, ndim, writes=False):
    """Shape of ``x`` after checking it is a C-contiguous uint32 array of
    ``ndim`` dimensions (writeable where the launcher ``writes`` it): the
    word buffers of the launchers outside the field and GKR families."""
    shape = _shape(where, name, x, _U32, writes)
    if len(shape) != ndim:
        raise ValueError(f"{where}: argument `{name}` must be {ndim}-d, not shape {shape}")
    return shape


#: The ``where`` prefixes of the CPU launchers: their kernels (Numba
#: ``@njit``) read host memory, so they take NumPy arrays only.
HOST_LAUNCHERS = ("field_cpu.", "gkr_cpu.", "merkle_cpu.")


def check_host_arrays(where, named):
    """Refuse anything but a NumPy array among ``named``, ``(name, array)``
    pairs: the CPU launchers' arguments (Numba cannot type a device array,
    and its own error names no argument)."""
    for name, x in named:
        if not isinstance(x, _ndarray):
            on_device = hasattr(x, "__cuda_array_interface__") or hasattr(
                x, "copy_to_host") or type(x).__module__.split(".")[0] == "cupy"
            raise TypeError(f"{where}: argument `{name}` must be a NumPy array (the CPU "
                            f"kernels read host memory), not {type(x).__name__}"
                            + ("; copy it to the host (cupy.asnumpy, .copy_to_host()) or "
                               "call the GPU backend's launcher" if on_device else ""))


def check_device_arrays(where, named):
    """Refuse a NumPy (host) array among ``named``, ``(name, array)`` pairs:
    the CuPy launchers' arguments live in device memory.  Needed because
    CuPy's RawKernel passes a one-element NumPy array by value, so its word
    would be taken for a device pointer (a fault, or a read of whatever lies
    there); larger ones fail inside CuPy without the argument's name.

    Also refuse a CuPy array of another device than CuPy's current one
    (:func:`check_current_device`)."""
    named = tuple(named)
    for name, x in named:
        if isinstance(x, _ndarray):
            raise TypeError(f"{where}: argument `{name}` must be a CuPy array (device "
                            f"memory), not a NumPy array; move it with cupy.asarray")
    check_current_device(where, named)


def layer_names(first, layers, label):
    """``(name, array)`` of the input layer ``first`` (``first[i]``) and of
    each output layer, ``label(l, i)`` naming output layer ``l``'s array
    ``i``: the GPU launchers' device checks name every array they take."""
    yield from ((f"first[{i}]", x) for i, x in enumerate(first))
    for l, layer in enumerate(layers):
        yield from ((label(l, i), x) for i, x in enumerate(layer))


def check_current_device(where, named):
    """Refuse a CuPy array among ``named``, ``(name, array)`` pairs, that lives
    on another device than CuPy's current one, where the launch runs: its
    pointer read there is an illegal address, which poisons the whole CUDA
    context (the object layer checked this; a direct caller of the kernel
    layer was not told).  Numba-CUDA launches run there too: Numba takes the
    thread's current CUDA context, the one CuPy's current device makes.
    Other arrays (NumPy, Numba's device arrays) pass unchecked."""
    current = None
    for name, x in named:
        device = cupy_device(x)
        if device is not None:
            if current is None:
                current = current_cupy_device()
            if device != current:
                raise ValueError(f"{where}: argument `{name}` lives on GPU {device} but the "
                                 f"current device is GPU {current}, where the kernel runs; "
                                 f"call it under `with cupy.cuda.Device({device}):`")


def cupy_device(x):
    """The device id of a CuPy array (its memory pointer's), else None."""
    return getattr(getattr(x, "data", None), "device_id", None)


def current_cupy_device():
    """CuPy's current device id: where a CuPy launch runs."""
    import cupy  # (only reached with a CuPy array in hand)
    return cupy.cuda.runtime.getDevice()


def _elements(where, name, x, deg, writes=False, dtype=_U32):
    """Element count of the base (``deg`` 1) or extension (``deg`` 4) array ``x``."""
    s = _shape(where, name, x, dtype, writes)
    if deg == 1:
        if len(s) == 1:
            return s[0]
        want = "a 1-d (n,) array"
    else:
        if len(s) == 2 and s[1] == 4:
            return s[0]
        if len(s) == 1 and not s[0] & 3:
            return s[0] >> 2
        want = "extension words, (n, 4) or flat (4 n,)"
    raise ValueError(f"{where}: argument `{name}` must be {want}, not shape {s}")


def _same(where, name, m, n, out="out"):
    if m != n:
        raise ValueError(f"{where}: argument `{name}` must hold as many elements as `{out}` "
                         f"({n}), not {m}")


# ---- overlap -------------------------------------------------------------------

def _address(x):
    """Address of the first element (index 0 on every axis) of an array."""
    if type(x) is np.ndarray:
        return x.ctypes.data
    ptr = getattr(getattr(x, "data", None), "ptr", None)  # CuPy (and its emulation)
    if ptr is None:  # Numba device arrays; the simulator's wrap NumPy arrays
        face = getattr(x, "__cuda_array_interface__", None) or \
            getattr(x, "__array_interface__", None)
        ptr = face["data"][0] if face else None
    return ptr


def _overlap(where, out, x, name, alias_ok, out_name="out"):
    """Refuse ``out`` (argument ``out_name``) sharing memory with input ``x``,
    unless it is ``x`` itself (same first address and byte size) and
    ``alias_ok``.  Address ranges are compared as they are: with CUDA's
    unified addressing, host and device arrays never overlap."""
    if type(out) is np.ndarray and type(x) is np.ndarray:
        if not np.may_share_memory(out, x):  # bounds only, O(1)
            return
    size_o, size_x = out.nbytes, x.nbytes
    if not size_o or not size_x:
        return
    lo_o, lo_x = _address(out), _address(x)
    if lo_o is None or lo_x is None:
        raise TypeError(f"{where}: cannot tell where argument `{name}` or `{out_name}` lies "
                        f"in memory ({type(x).__name__}, {type(out).__name__})")
    if lo_o + size_o <= lo_x or lo_x + size_x <= lo_o:
        return
    if alias_ok and lo_o == lo_x and size_o == size_x:
        return
    why = "the same array is allowed here only as an elementwise operand" if alias_ok else \
        f"this kernel reads its operands after writing {out_name}"
    raise ValueError(f"{where}: argument `{out_name}` overlaps argument `{name}` ({why}); "
                     f"write into a separate array")


# ---- the launcher signatures ---------------------------------------------------

def _fast_elements(where, x, deg, writes=False):
    """Element count of an array of a documented form, or -1 for anything
    else: the hot path's test, in as few attribute reads as it takes (the
    general checks then say what is wrong, or accept what is merely rarer).
    NumPy arrays, and CuPy ones (no writeable flag: always writeable) except
    on a CPU launcher (``where``)."""
    if type(x) is _ndarray:
        if x.dtype is not _U32:
            return -1
        flags = x.flags
        if not flags.c_contiguous or writes and not flags.writeable:
            return -1
    else:
        # (a CuPy array on a CPU launcher; a NumPy subclass, np.matrix: _shape says)
        if where.startswith(HOST_LAUNCHERS) or isinstance(x, _ndarray):
            return -1
        try:
            if x.dtype is not _U32:
                return -1
            flags = x.flags
            if not flags.c_contiguous or writes and not getattr(flags, "writeable", True):
                return -1
        except AttributeError:  # a Numba device array (dict flags) or no array at all
            return -1
    s = x.shape
    if len(s) == 1:
        n = s[0]
        return n if deg == 1 else -1 if n & 3 else n >> 2
    return s[0] if deg == 4 and len(s) == 2 and s[1] == 4 else -1


def _fast_disjoint(out, x):
    """Whether ``out`` and ``x`` surely share no memory (False: ask _overlap)."""
    if type(out) is _ndarray and type(x) is _ndarray:
        return not _may_share(out, x)  # bounds only, O(1)
    try:  # CuPy arrays: first address and size
        lo_o, lo_x = out.data.ptr, x.data.ptr
    except AttributeError:
        return False
    return lo_o + out.nbytes <= lo_x or lo_x + x.nbytes <= lo_o


#: ``check_map``'s ``b`` of a one-operand launcher (a binary one's ``b=None``
#: was read as "no b", and its kernel then failed on None, naming nothing).
_NO_B = object()


def check_map(where, f, op, ops, in_place, deg, out, a, b=_NO_B, name="a"):
    """Elementwise ``out = op(a)`` or ``op(a, b)``: ``op`` in ``ops``, the arrays
    base (``deg`` 1) or extension (``deg`` 4) of one element count, which is
    returned; ``out`` may be an operand itself where ``op`` is in ``in_place``.
    ``ops`` None: no opcode (``op`` then only selects ``in_place``); ``name``:
    the first operand's argument name."""
    # The hot path (every object-layer call): NumPy or CuPy arrays, a Python
    # int opcode, no shared memory.
    if id(f) in _SHIPPED and type(op) is int and (ops is None or op in ops):
        n = _fast_elements(where, out, deg, True)
        # (`out` written in place: the very object, an elementwise operand; the
        # general path's address reads cost ~2 us each, most of a small call)
        if n >= 0 and _fast_elements(where, a, deg) == n and (
                _fast_disjoint(out, a) or out is a and op in in_place) and (
                b is _NO_B or _fast_elements(where, b, deg) == n and (
                    _fast_disjoint(out, b) or out is b and op in in_place)):
            return n
    check_field(where, f)
    if ops is not None:
        _op(where, op, ops)
    n = _elements(where, "out", out, deg, True)
    _same(where, name, _elements(where, name, a, deg), n)
    if b is not _NO_B:
        _same(where, "b", _elements(where, "b", b, deg), n)
    alias = op in in_place
    _overlap(where, out, a, name, alias)
    if b is not _NO_B:
        _overlap(where, out, b, "b", alias)
    return n


def _reach(n, rows, run, step, row):
    """Elements an operand must hold: one past the highest index read."""
    if not n:
        return 0
    if rows == 1:
        return (n - 1) * step + 1
    return (rows - 1) * row + (run - 1) * step + 1


def check_bcast(where, f, op, a, a_step, a_deg, b, b_step, b_deg, out, out_deg, run, a_row,
                b_row):
    """The broadcast forms (contract of ``field_cpu.base_map2_bcast``).

    Returns ``(n, rows, run, a_step, b_step, a_row, b_row)`` as Python ints:
    ``rows`` runs of ``run`` elements (one run of all ``n`` for ``run`` 0 or
    ``>= n``, where the rows are unused and returned 0).
    """
    # The hot path: Python ints, NumPy or CuPy arrays, no shared memory (as
    # the object layer passes); anything else takes the general checks below.
    if (id(f) in _SHIPPED and type(op) is int and op in BINARY and type(a_step) is int
            and type(b_step) is int and type(run) is int and a_step in _STEPS
            and b_step in _STEPS and (out_deg == 1 or (type(a_deg) is int and type(b_deg) is int
                                                        and (a_deg, b_deg) in _EXT_DEGS))):
        n = _fast_elements(where, out, out_deg, True)
        if n > 0:
            if run == 0 or run >= n:
                rows, run, a_row, b_row = 1, n, 0, 0
            elif run < 0 or n % run or type(a_row) is not int or type(b_row) is not int or \
                    a_row not in (0, 1, run) or b_row not in (0, 1, run):
                rows = 0  # the general checks say which
            else:
                rows = n // run
            if rows and _fast_elements(where, a, a_deg) >= _reach(n, rows, run, a_step, a_row) and \
                    _fast_elements(where, b, b_deg) >= _reach(n, rows, run, b_step, b_row) and \
                    _fast_disjoint(out, a) and _fast_disjoint(out, b):
                return n, rows, run, a_step, b_step, a_row, b_row
    check_field(where, f)
    _op(where, op, BINARY)
    if out_deg == 4:
        a_deg = _int(where, "a_deg", a_deg, 1, 4)
        b_deg = _int(where, "b_deg", b_deg, 1, 4)
        if a_deg not in (1, 4) or b_deg not in (1, 4) or a_deg == b_deg == 1:
            raise ValueError(f"{where}: arguments `a_deg`, `b_deg` must each be 1 (base) or "
                             f"4 (extension), at least one 4, not ({a_deg}, {b_deg})")
    a_step = _int(where, "a_step", a_step, 0, 1)
    b_step = _int(where, "b_step", b_step, 0, 1)
    run = _int(where, "run", run)
    n = _elements(where, "out", out, out_deg, True)
    if run == 0 or run >= n:  # one run: rows unused
        rows, run, a_row, b_row = 1, n, 0, 0
    else:
        if n % run:
            raise ValueError(f"{where}: argument `run` must divide the {n} elements of "
                             f"`out`, not {run}")
        rows = n // run
        a_row = _int(where, "a_row", a_row)
        b_row = _int(where, "b_row", b_row)
        for name, row in (("a_row", a_row), ("b_row", b_row)):
            if row not in (0, 1, run):
                raise ValueError(f"{where}: argument `{name}` must be 0, 1 or run ({run}), "
                                 f"not {row}")
    for name, x, deg, step, row in (("a", a, a_deg, a_step, a_row),
                                    ("b", b, b_deg, b_step, b_row)):
        have = _elements(where, name, x, deg)
        need = _reach(n, rows, run, step, row)
        if have < need:
            raise ValueError(
                f"{where}: argument `{name}` must hold at least {need} elements (read up to "
                f"index {need - 1} for n={n}, run={run}, step={step}, row={row}), not {have}")
        # out may be this operand itself only where element i reads element i
        elementwise = deg == out_deg and (n <= 1 or (step == 1 or run == 1) and
                                          (rows == 1 or row == run))
        _overlap(where, out, x, name, elementwise)
    return n, rows, run, a_step, b_step, a_row, b_row


def check_pow(where, f, deg, a, e_hi, e_lo, nbits, out):
    """``out = a ** e`` for ``e = e_hi 2**64 + e_lo < 2**nbits``, ``nbits <= 128``;
    returns the element count and ``(e_hi, e_lo, nbits)`` as ``np.uint64``,
    ``np.uint64``, ``np.int64`` (the object layer's types: one compiled
    signature, and a Python int limb past 2**63 cannot meet an int64 one).
    Never in place (the CPU kernel squares a run of ``out`` and multiplies by
    the operand, which would be that run)."""
    check_field(where, f)
    hi = _int(where, "e_hi", e_hi, 0, 2**64 - 1)
    lo = _int(where, "e_lo", e_lo, 0, 2**64 - 1)
    bits = _int(where, "nbits", nbits, 0, 128)
    length = (hi << 64 | lo).bit_length()
    if length > bits:
        raise ValueError(f"{where}: argument `nbits` must be at least the bit length of the "
                         f"exponent e_hi * 2**64 + e_lo ({length}), not {bits}")
    exponent = np.uint64(hi), np.uint64(lo), np.int64(bits)
    n = _fast_elements(where, out, deg, True)
    if n >= 0 and _fast_elements(where, a, deg) == n and _fast_disjoint(out, a):
        return n, exponent  # the hot path; else the general checks
    n = _elements(where, "out", out, deg, True)
    _same(where, "a", _elements(where, "a", a, deg), n)
    _overlap(where, out, a, "a", False)
    return n, exponent


_DEGS = (1, 4)


def check_mle_fold(where, f, v, v_deg, r, r_deg, out, out_deg):
    """``out[k] = v[2k] + r (v[2k+1] - v[2k])``: ``out`` ``n`` elements of
    ``out_deg`` words, ``v`` exactly ``2 n`` elements of ``v_deg`` words, ``r``
    one element of ``r_deg`` words (base field: all three degrees 1;
    extension: ``out_deg`` 4 and each of ``v_deg``, ``r_deg`` 1 or 4).  ``out``
    shares memory with neither input (element k reads elements 2k and 2k + 1,
    which another thread's output may lie over).  Returns ``(n, v_deg, r_deg)``
    as Python ints."""
    # The hot path: the object layer's calls (shipped field, contiguous
    # NumPy/CuPy arrays, Python int degrees, no shared memory).
    if id(f) in _SHIPPED and type(v_deg) is int and type(r_deg) is int and (
            v_deg == r_deg == out_deg == 1 or out_deg == 4 and v_deg in _DEGS
            and r_deg in _DEGS):
        n = _fast_elements(where, out, out_deg, True)
        if n >= 0 and _fast_elements(where, v, v_deg) == 2 * n \
                and _fast_elements(where, r, r_deg) == 1 \
                and _fast_disjoint(out, v) and _fast_disjoint(out, r):
            return n, v_deg, r_deg
    check_field(where, f)
    if out_deg == 4:
        v_deg = _int(where, "v_deg", v_deg, 1, 4)
        r_deg = _int(where, "r_deg", r_deg, 1, 4)
        for name, deg in (("v_deg", v_deg), ("r_deg", r_deg)):
            if deg not in _DEGS:
                raise ValueError(f"{where}: argument `{name}` must be 1 (base) or 4 "
                                 f"(extension), not {deg}")
    n = _elements(where, "out", out, out_deg, True)
    m = _elements(where, "v", v, v_deg)
    if m != 2 * n:
        raise ValueError(f"{where}: argument `v` must hold twice the elements of `out` "
                         f"({2 * n}: pairs v[2k], v[2k+1]), not {m}")
    if _elements(where, "r", r, r_deg) != 1:
        raise ValueError(f"{where}: argument `r` must hold one element"
                         f"{' (4 words)' if r_deg == 4 else ''}, not shape "
                         f"{tuple(r.shape)}")
    _overlap(where, out, v, "v", False)
    _overlap(where, out, r, "r", False)
    return n, v_deg, r_deg


def check_eq_split(where, f, a, r, r_deg, lo, hi, deg):
    """``lo[k], hi[k] = a[k] - a[k] r, a[k] r``: ``a``, ``lo``, ``hi`` ``n``
    elements of ``deg`` words, ``r`` one element of ``r_deg`` words (base
    field: both 1; extension: ``deg`` 4, ``r_deg`` 1 or 4).  ``lo`` may be
    ``a`` itself (element k reads and writes only element k); otherwise no
    written array shares memory with another argument.  Returns ``(n,
    r_deg)`` as Python ints."""
    if id(f) in _SHIPPED and type(r_deg) is int and (r_deg == deg == 1 or
                                                     deg == 4 and r_deg in _DEGS):
        n = _fast_elements(where, hi, deg, True)
        if n >= 0 and _fast_elements(where, lo, deg, True) == n \
                and _fast_elements(where, a, deg) == n \
                and _fast_elements(where, r, r_deg) == 1 and _fast_disjoint(hi, a) \
                and _fast_disjoint(hi, lo) and _fast_disjoint(hi, r) \
                and _fast_disjoint(lo, r) and (lo is a or _fast_disjoint(lo, a)):
            return n, r_deg
    check_field(where, f)
    if deg == 4:
        r_deg = _int(where, "r_deg", r_deg, 1, 4)
        if r_deg not in _DEGS:
            raise ValueError(f"{where}: argument `r_deg` must be 1 (base) or 4 (extension), "
                             f"not {r_deg}")
    n = _elements(where, "hi", hi, deg, True)
    _same(where, "lo", _elements(where, "lo", lo, deg, True), n, "hi")
    _same(where, "a", _elements(where, "a", a, deg), n, "hi")
    if _elements(where, "r", r, r_deg) != 1:
        raise ValueError(f"{where}: argument `r` must hold one element"
                         f"{' (4 words)' if r_deg == 4 else ''}, not shape "
                         f"{tuple(r.shape)}")
    _overlap(where, hi, a, "a", False, "hi")
    _overlap(where, hi, lo, "lo", False, "hi")
    _overlap(where, hi, r, "r", False, "hi")
    _overlap(where, lo, r, "r", False, "lo")
    _overlap(where, lo, a, "a", True, "lo")
    return n, r_deg


def check_encode(where, f, v, out, reduce=False):
    """``encode``: flat int64 values (uint64 would be read as negative), flat
    uint32 ``out`` of the same length, no overlap (8-byte values under 4-byte
    words); ``reduce`` a bool (another type would compile another kernel)."""
    check_field(where, f)
    if type(reduce) is not bool:
        raise TypeError(f"{where}: argument `reduce` must be True or False, not {reduce!r}")
    n = _elements(where, "out", out, 1, True)
    _same(where, "v", _elements(where, "v", v, 1, dtype=_I64), n)
    _overlap(where, out, v, "v", False)
    return n


def check_sum_rows(where, f, a, deg, rows, out):
    """``base_sum_rows`` / ``ext4_sum_rows``: the words of ``a`` (read only,
    flat), split into ``rows`` equal rows of whole elements of ``deg``
    words; ``out`` one element per row, sharing no memory with ``a``.
    Returns ``rows``."""
    check_field(where, f)
    size = _shape(where, "a", a, _U32, False)
    if len(size) != 1:
        raise ValueError(f"{where}: argument `a` must be flat words (n,), not shape {size}")
    rows = _int(where, "rows", rows)
    if size[0] % max(rows * deg, 1) or (rows == 0 and size[0]):
        raise ValueError(f"{where}: argument `a` ({size[0]} words) must split into `rows` = "
                         f"{rows} equal rows of whole {deg}-word elements")
    m = _elements(where, "out", out, deg, writes=True)
    if m != rows:
        raise ValueError(f"{where}: argument `out` must hold one element per row ({rows}), "
                         f"not {m}")
    _overlap(where, out, a, "a", False)
    return rows


def check_first_zero(where, f, a, deg):
    """``base_first_zero`` / ``ext4_first_zero``: the words of ``a`` (read only)."""
    check_field(where, f)
    return _elements(where, "a", a, deg)


def check_decode(where, f, w, out):
    """``decode``: flat uint32 words and ``out`` (which may be ``w`` itself)."""
    return check_map(where, f, 0, None, (0,), 1, out, w, name="w")


# ---- GKR launchers (gkr_cpu, gkr_cuda_numba, gkr_cupy) ----------------------
#
# MLE forms differ from the field launchers': the GKR kernels take the mode
# (base or extension numerators and denominators) from ``ndim``, so a base
# MLE is 1-d ``(n,)`` and an extension MLE exactly ``(n, 4)`` -- a flat
# ``(4 n,)`` extension would be read as 4 n base words.  Row counts are
# C-contiguous int32 ``(nb,)``, ``nb >= 1`` (the kernels read the last prefix
# sum); prefix scratch is C-contiguous writeable int64.  The counts' *values*
# (``sum(rc)`` within the input, ``orc[s] >= ceil(rc[s] / 2)``, ``sum(orc)``
# within the output) are the caller's obligation: reading device counts would
# synchronize, and host ones cost O(nb); the object layer checks them.  The
# GPU kernels bound every node they read or write by its layer's width, so
# counts outside the contract give unspecified words, never an access outside
# the arrays, and their loops by the output widths.  (The
# CPU jagged kernel's own scan refuses counts that would read outside its
# inputs: see gkr_cpu.jagged_transition; the Numba-CUDA launchers, which take
# host counts too, refuse those with check_count_values.)
#
# No written array (an output, the prefix scratch) may share memory with any
# other argument: every slot reads its inputs in an order no launch fixes,
# and two outputs over the same words would each lose the other's writes.
# (A fold's output is half its input, so it can never *be* the input.)

_I32 = np.dtype(np.int32)


def _mle(where, name, x, writes):
    """Shape of a GKR MLE: C-contiguous uint32 ``(n,)`` or ``(n, 4)``."""
    s = _shape(where, name, x, _U32, writes)
    if len(s) == 1 or len(s) == 2 and s[1] == 4:
        return s
    raise ValueError(f"{where}: argument `{name}` must be a base MLE (n,) or an extension "
                     f"MLE (n, 4) (a flat (4 n,) extension would be read as base words), "
                     f"not shape {s}")


def _counts(where, name, x, nb=None):
    s = _shape(where, name, x, _I32, False)
    if len(s) != 1:
        raise ValueError(f"{where}: argument `{name}` must be 1-d row counts (nb,), not "
                         f"shape {s}")
    if nb is None:
        if not s[0]:
            raise ValueError(f"{where}: argument `{name}` must hold at least one row count "
                             f"(nb >= 1), not 0")
    elif s[0] != nb:
        raise ValueError(f"{where}: argument `{name}` must hold one count per batch element, "
                         f"as `rc` ({nb}), not {s[0]}")
    return s[0]


def _four(where, name, x):
    """``x`` as a list of four MLEs (an input layer or one layer's outputs)."""
    try:
        x = list(x)
    except TypeError:
        raise TypeError(f"{where}: argument `{name}` must be a sequence of four MLEs "
                        f"(n0, n1, d0, d1), not {type(x).__name__}") from None
    if len(x) != 4:
        raise ValueError(f"{where}: argument `{name}` must hold four MLEs (n0, n1, d0, d1), "
                         f"not {len(x)}")
    return x


def _layer_in(where, names, xs):
    """``(mode, length)`` of four input MLEs ``(n0, n1, d0, d1)``."""
    s = [_mle(where, name, x, False) for name, x in zip(names, xs)]
    n = s[0][0]
    for i, ref in ((1, 0), (3, 2)):  # a pair's second MLE reads as its first
        if s[i] != s[ref]:
            raise ValueError(f"{where}: argument `{names[i]}` must have the shape of "
                             f"`{names[ref]}`, {s[ref]}, not {s[i]}")
    if s[2][0] != n:
        # (the field launchers take flat (4 n,) extension words; these cannot
        # tell them from base words, whose mode is another kernel)
        flat = [i for i in (0, 2) if len(s[i]) == 1 and s[i][0] == 4 * s[2 - i][0]]
        hint = (f"; `{names[flat[0]]}` reads as {s[flat[0]][0]} base words: the GKR "
                f"launchers take extension MLEs as (n, 4) arrays only" if flat else "")
        raise ValueError(f"{where}: argument `{names[2]}` must hold as many elements as "
                         f"`{names[0]}` ({n}), not {s[2][0]}{hint}")
    return 2 * (len(s[0]) == 2) + (len(s[2]) == 2), n


def _layer_out(where, names, xs, mode, n, what):
    """Four outputs of an input ``mode`` (numerators extension unless base/base,
    denominators extension when the input's are), ``n`` elements each.  The
    output mode of an output mode is itself, so every later layer of a
    pyramid or chunk checks against its first input's mode too."""
    ext = (mode != 0, mode != 0, mode & 1, mode & 1)
    for name, x, e in zip(names, xs, ext):
        s = _mle(where, name, x, True)
        want = (n, 4) if e else (n,)
        if s != want:
            kind = "extension" if e else "base"
            raise ValueError(f"{where}: argument `{name}` must have shape {want} ({what}; "
                             f"{kind} in this mode), not {s}")


def _span(where, name, x):
    # [first byte, past the last byte) of x: its size for a contiguous array;
    # a strided view (an object-layer input) reaches as far as its strides
    if not x.nbytes:
        return None
    lo = _address(x)
    if lo is None:
        raise TypeError(f"{where}: cannot tell where argument `{name}` lies in memory "
                        f"({type(x).__name__})")
    hi = lo + x.itemsize
    for n, step in zip(x.shape, x.strides):
        if step < 0:
            lo += (n - 1) * step
        else:
            hi += (n - 1) * step
    return lo, hi


def check_gkr_disjoint(where, written, read):
    """Refuse any array of ``written`` sharing memory with another argument
    (``written`` and ``read``: sequences of ``(name, array)``; arrays in
    ``read`` may share memory with each other).  O(n log n) in the number
    of arrays; address ranges compared as they are (see :func:`_overlap`)."""
    spans = []
    for items, w in ((written, True), (read, False)):
        for name, x in items:
            sp = _span(where, name, x)
            if sp is not None:
                spans.append((sp[0], sp[1], w, name))
    spans.sort(key=lambda t: t[0])
    end_any = end_w = None  # (end, name) of the furthest-reaching span so far
    for lo, hi, w, name in spans:
        hit = end_any if w else end_w
        if hit is not None and lo < hit[0]:
            a, b = (name, hit[1]) if w else (hit[1], name)
            raise ValueError(f"{where}: argument `{a}` overlaps argument `{b}` (an array "
                             f"the kernels write must share no memory with another argument: "
                             f"slots are written and read in no fixed order); write into "
                             f"separate arrays")
        if end_any is None or hi > end_any[0]:
            end_any = (hi, name)
        if w and (end_w is None or hi > end_w[0]):
            end_w = (hi, name)


_IN = ("n0", "n1", "d0", "d1")
_OUT = ("on0", "on1", "od0", "od1")


def _plain(*xs):
    """Whether no array of ``xs`` is a NumPy subclass (np.matrix indexes by
    rows, a masked array would lose its mask): :func:`_shape` refuses them."""
    for x in xs:  # (a loop: a generator cost a microsecond on the hot path)
        if type(x) is not _ndarray and isinstance(x, _ndarray):
            return False
    return True


def _fast_ins(n0, n1, d0, d1):
    """``(mode, length)`` of an input layer of C-contiguous uint32 NumPy or
    CuPy arrays of the documented forms, else None: the hot path's test, in
    as few attribute reads as it takes (anything else, a Numba device array
    included, goes to the general checks).  Raises AttributeError or
    IndexError for some non-arrays (the callers catch them)."""
    sn, sd = n0.shape, d0.shape
    if n1.shape != sn or d1.shape != sd or n0.dtype is not _U32 or n1.dtype is not _U32 or \
            d0.dtype is not _U32 or d1.dtype is not _U32 or not (
            n0.flags.c_contiguous and n1.flags.c_contiguous and d0.flags.c_contiguous and
            d1.flags.c_contiguous) or not _plain(n0, n1, d0, d1):
        return None
    ne, de = len(sn) == 2, len(sd) == 2
    if sd[0] != sn[0] or not (ne and sn[1] == 4 or len(sn) == 1) or \
            not (de and sd[1] == 4 or len(sd) == 1):
        return None
    return 2 * ne + de, sn[0]


def _fast_outs(on0, on1, od0, od1, mode, n):
    """Whether four outputs are writeable C-contiguous uint32 NumPy or CuPy
    arrays of ``n`` elements in the output mode of input ``mode``."""
    sn = (n, 4) if mode else (n,)
    sd = (n, 4) if mode & 1 else (n,)
    if on0.shape != sn or on1.shape != sn or od0.shape != sd or od1.shape != sd or \
            on0.dtype is not _U32 or on1.dtype is not _U32 or od0.dtype is not _U32 or \
            od1.dtype is not _U32 or not _plain(on0, on1, od0, od1):
        return False
    for x in (on0, on1, od0, od1):
        # NumPy: carray = C-contiguous, aligned and writeable in one read;
        # CuPy arrays are always writeable
        if not (x.flags.carray if type(x) is _ndarray else x.flags.c_contiguous):
            return False
    return True


_NOT_FAST = (AttributeError, IndexError, TypeError, ValueError)
_SEQ = (list, tuple)


def check_gkr_fold(where, f, n0, n1, d0, d1, on0, on1, od0, od1, disjoint=True):
    """``fold_dense``: an input layer of even length ``L``, outputs of
    ``L / 2`` in the output mode; returns the input mode.  ``disjoint``
    False: the caller checks overlaps itself (the CPU kernels, compiled)."""
    try:  # the hot path: NumPy or CuPy arrays of the documented forms
        got = _fast_ins(n0, n1, d0, d1) if id(f) in _SHIPPED else None
        if got is not None and not got[1] & 1 and \
                _fast_outs(on0, on1, od0, od1, got[0], got[1] >> 1):
            if disjoint:
                check_gkr_disjoint(where, zip(_OUT, (on0, on1, od0, od1)),
                                   zip(_IN, (n0, n1, d0, d1)))
            return got[0]
    except _NOT_FAST:  # not arrays, or Numba device arrays: the general checks
        pass
    check_field(where, f)
    mode, n = _layer_in(where, _IN, (n0, n1, d0, d1))
    if n & 1:
        raise ValueError(f"{where}: argument `n0` must have an even length (a fold pairs "
                         f"nodes 2k and 2k + 1), not {n}")
    _layer_out(where, _OUT, (on0, on1, od0, od1), mode, n >> 1,
               f"half the {n} elements of `n0`")
    if disjoint:
        check_gkr_disjoint(where, zip(_OUT, (on0, on1, od0, od1)), zip(_IN, (n0, n1, d0, d1)))
    return mode


def check_gkr_jagged(where, f, rc, orc, prefix, n0, n1, d0, d1, on0, on1, od0, od1,
                     disjoint=True):
    """``jagged_transition``: counts ``rc``/``orc`` int32 ``(nb,)``, ``prefix``
    int64 ``(2, nb)``, input MLEs of one length, outputs of one length in the
    output mode; returns the input mode."""
    try:  # the hot path
        got = _fast_ins(n0, n1, d0, d1) if id(f) in _SHIPPED else None
        sc = rc.shape
        if got is not None and len(sc) == 1 and sc[0] and orc.shape == sc and \
                prefix.shape == (2, sc[0]) and rc.dtype is _I32 and orc.dtype is _I32 and \
                prefix.dtype is _I64 and rc.flags.c_contiguous and orc.flags.c_contiguous and \
                _plain(rc, orc, prefix) and \
                (prefix.flags.carray if type(prefix) is _ndarray
                 else prefix.flags.c_contiguous) and \
                _fast_outs(on0, on1, od0, od1, got[0], on0.shape[0]):
            if disjoint:
                _jagged_disjoint(where, rc, orc, prefix, (n0, n1, d0, d1),
                                 (on0, on1, od0, od1))
            return got[0]
    except _NOT_FAST:
        pass
    check_field(where, f)
    nb = _counts(where, "rc", rc)
    _counts(where, "orc", orc, nb)
    s = _shape(where, "prefix", prefix, _I64, True)
    if s != (2, nb):
        raise ValueError(f"{where}: argument `prefix` must be int64 scratch of shape (2, nb) "
                         f"= {(2, nb)}, not {s}")
    mode, _ = _layer_in(where, _IN, (n0, n1, d0, d1))
    w = _mle(where, "on0", on0, True)[0]
    _layer_out(where, _OUT, (on0, on1, od0, od1), mode, w,
               f"`on0`'s width {w}: one width for all four outputs")
    if disjoint:
        _jagged_disjoint(where, rc, orc, prefix, (n0, n1, d0, d1), (on0, on1, od0, od1))
    return mode


def _jagged_disjoint(where, rc, orc, prefix, ins, outs):
    check_gkr_disjoint(where, [("prefix", prefix)] + list(zip(_OUT, outs)),
                       [("rc", rc), ("orc", orc)] + list(zip(_IN, ins)))


def _pyramid_first(where, f, first, nl):
    """``(mode, length)`` of a pyramid's first layer for ``nl`` transitions:
    a power-of-two length ``L`` and ``nl <= log2(L)`` (the launch plans tile
    power-of-two layers; another length left slots unwritten)."""
    check_field(where, f)
    first = _four(where, "first", first)
    mode, n = _layer_in(where, [f"first[{i}]" for i in range(4)], first)
    if n < 1 or n & (n - 1):
        raise ValueError(f"{where}: argument `first` must have a power-of-two length (the "
                         f"fused tiles halve it exactly), not {n}")
    if nl > n.bit_length() - 1:
        raise ValueError(f"{where}: a first layer of {n} elements has at most "
                         f"{n.bit_length() - 1} transitions, not {nl} output layers")
    return mode, n, first


def _sequence(where, name, x):
    try:
        return list(x)
    except TypeError:
        raise TypeError(f"{where}: argument `{name}` must be a sequence, not "
                        f"{type(x).__name__}") from None


def check_gkr_pyramid(where, f, first, layers, disjoint=True):
    """``pyramid_dense`` (CPU, CuPy): ``layers[l]`` = the four outputs of
    layer ``l + 1``, ``L >> (l + 1)`` elements each in the output mode.
    Returns ``(mode, first, layers)`` as lists.  O(number of layers)."""
    # an iterator is read once: the hot path's unpacking would leave the
    # general check (and the launch) an exhausted one
    if type(first) not in _SEQ:
        first = _four(where, "first", first)
    if type(layers) not in _SEQ:
        layers = _sequence(where, "layers", layers)
    try:  # the hot path: lists of NumPy or CuPy arrays of the documented forms
        got = _fast_ins(*first) if id(f) in _SHIPPED else None
        if got is not None:
            mode, n = got
            nl = len(layers)
            if n and not n & (n - 1) and nl < n.bit_length():
                for layer in layers:
                    n >>= 1
                    if type(layer) not in _SEQ or not _fast_outs(*layer, mode, n):
                        break
                else:
                    first, layers = list(first), [list(x) for x in layers]
                    if disjoint:
                        _pyramid_disjoint(where, first, layers)
                    return mode, first, layers
    except _NOT_FAST:
        pass
    layers = _sequence(where, "layers", layers)
    mode, n, first = _pyramid_first(where, f, first, len(layers))
    layers = [_four(where, f"layers[{l}]", x) for l, x in enumerate(layers)]
    for l, outs in enumerate(layers):
        _layer_out(where, [f"layers[{l}][{i}]" for i in range(4)], outs, mode, n >> (l + 1), f"layer {l + 1} of a first layer of {n}")
    if disjoint:
        _pyramid_disjoint(where, first, layers)
    return mode, first, layers


def _pyramid_disjoint(where, first, layers):
    check_gkr_disjoint(where, [(f"layers[{l}][{i}]", x) for l, outs in enumerate(layers)
                               for i, x in enumerate(outs)],
                       [(f"first[{i}]", x) for i, x in enumerate(first)])


def check_gkr_pyramid_flat(where, f, first, buffers):
    """``gkr_cuda_numba.pyramid_dense``: ``buffers[l]`` one flat uint32 array of
    ``on0 | on1 | od0 | od1`` of layer ``l + 1``: ``(L >> (l + 1)) * (2 nw + 2 dw)``
    words (``nw``/``dw``: 4 for extension numerators / denominators, else 1).
    Returns ``(mode, first, buffers)``, the sequences as lists (an iterator is
    read once, here)."""
    buffers = _sequence(where, "buffers", buffers)
    mode, n, first = _pyramid_first(where, f, first, len(buffers))
    nw = 4 if mode else 1
    dw = 4 if mode & 1 else 1
    for l, buf in enumerate(buffers):
        name = f"buffers[{l}]"
        s = _shape(where, name, buf, _U32, True)
        want = (n >> (l + 1)) * (2 * nw + 2 * dw)
        if s != (want,):
            raise ValueError(f"{where}: argument `{name}` must be flat, ({want},): layer "
                             f"{l + 1} of a first layer of {n} as on0 | on1 | od0 | od1 with "
                             f"{nw} and {dw} words per numerator and denominator, not {s}")
    check_gkr_disjoint(where, [(f"buffers[{l}]", x) for l, x in enumerate(buffers)],
                       [(f"first[{i}]", x) for i, x in enumerate(first)])
    return mode, first, buffers


def check_gkr_steps(where, f, rc, prefix, first, steps, depth, rows):
    """``jagged_chunk`` / ``jagged_tail``: ``steps[l]`` = ``(orc, (on0, on1,
    od0, od1))`` of layer ``l + 1`` -- ``orc`` int32 ``(nb,)``, four outputs of
    one width in the output mode -- exactly ``depth`` steps (None: any
    number), ``prefix`` int64 of at least ``rows * nb`` elements.  Returns
    ``(mode, first, steps)``: the sequences as lists, each step as ``(orc,
    [on0, on1, od0, od1])`` (an iterator is read once, here)."""
    check_field(where, f)
    steps = _sequence(where, "steps", steps)
    if depth is not None and len(steps) != depth:
        raise ValueError(f"{where}: argument `steps` must hold exactly {depth} steps (the "
                         f"fused kernel's depth), not {len(steps)}")
    nb = _counts(where, "rc", rc)
    s = _shape(where, "prefix", prefix, _I64, True)
    size = int(np.prod(s))
    if size < rows * nb:
        raise ValueError(f"{where}: argument `prefix` must hold at least {rows} * nb = "
                         f"{rows * nb} int64 words, not {size}")
    first = _four(where, "first", first)
    mode, _ = _layer_in(where, [f"first[{i}]" for i in range(4)], first)
    written, read = [("prefix", prefix)], [("rc", rc)]
    read += [(f"first[{i}]", x) for i, x in enumerate(first)]
    checked = []
    for l, step in enumerate(steps):
        try:
            orc, outs = step
        except (TypeError, ValueError):
            raise TypeError(f"{where}: argument `steps[{l}]` must be a pair (orc, (on0, on1, "
                            f"od0, od1)), not {type(step).__name__}") from None
        _counts(where, f"steps[{l}][0]", orc, nb)
        outs = _four(where, f"steps[{l}][1]", outs)
        names = [f"steps[{l}][1][{i}]" for i in range(4)]
        w = _mle(where, names[0], outs[0], True)[0]
        _layer_out(where, names, outs, mode, w,
                   "one width for a step's four outputs")
        read.append((f"steps[{l}][0]", orc))
        written += list(zip(names, outs))
        checked.append((orc, outs))
    check_gkr_disjoint(where, written, read)
    return mode, first, checked


def check_count_values(where, rc, length, steps=(), fused=False):
    """Refuse host row counts a GPU kernel would take outside its arrays.

    ``rc``: the input layer's counts over ``length`` elements; ``steps``:
    ``(name, orc, width)`` per output layer.  Every count must be ``>= 0``
    and ``sum(rc) <= length`` (else the kernels read past the inputs, as the
    CPU kernel's scan refuses).  ``fused`` (a jagged chunk, which stores
    every node of a slot's subtree): also ``orc[s] >= ceil(c[s] / 2)`` of
    the layer below and ``sum(orc) <= width`` -- a truncating schedule left
    live slots unwritten there, an overrunning one wrote past the width.
    O(nb) per layer.  Only host (NumPy) counts are checked, each where it
    is one -- a host ``rc`` beside device ``orc`` too; device counts are not
    read (that would synchronize), and a pair of layers is compared only
    where both are on the host.
    """
    layers = [(n, np.asarray(c) if isinstance(c, np.ndarray) else None, w)
              for n, c, w in [("rc", rc, length), *steps]]
    # the first negative count slot by slot, rc before the steps (the CPU scan's order)
    negative = [(int(np.argmax(c < 0)), l) for l, (_, c, _) in enumerate(layers)
                if c is not None and c.size and c.min() < 0]
    if negative:
        s, l = min(negative)
        name = layers[l][0]
        raise ValueError(f"{where}: argument `{name}` must hold counts >= 0, but "
                         f"{name}[{s}] = {int(layers[l][1][s])}")
    if layers[0][1] is not None:
        total = int(layers[0][1].sum(dtype=np.int64))
        if total > length:
            raise ValueError(f"{where}: argument `rc` sums to {total}, more than the input "
                             f"length {length}")
    if not fused:
        return
    for (below, c, _), (name, orc, width) in zip(layers, layers[1:]):
        if orc is None:
            continue
        if c is not None:
            short = orc.astype(np.int64) < (c.astype(np.int64) + 1) // 2
            if short.any():
                s = int(np.argmax(short))
                raise ValueError(f"{where}: argument `{name}` must hold at least "
                                 f"ceil({below}[s] / 2) rows per segment (the fused kernel "
                                 f"writes every live slot of the layer), but {name}[{s}] = "
                                 f"{int(orc[s])} < ceil({int(c[s])} / 2)")
        total = int(orc.sum(dtype=np.int64))
        if total > width:
            raise ValueError(f"{where}: argument `{name}` sums to {total}, more than its "
                             f"outputs' width {width}")

