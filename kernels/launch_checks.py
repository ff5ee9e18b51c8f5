"""O(1) argument checks of the field launchers, one implementation for every
backend (:mod:`.field_cpu`, :mod:`.field_cuda_numba`, :mod:`.field_cupy`).

The kernels themselves validate nothing, and a launcher misused from research
code must not give a wrong answer, hang or crash the process: these checks
raise ``TypeError`` (a wrong kind of argument: not an array, a dtype, a
non-integer) or ``ValueError`` (a wrong value: an opcode, a shape, a length, a
layout, an overlap), naming the launcher and the argument.

They read only metadata -- dtype, shape, flags and, for the overlap test, the
first address and byte size -- so they cost the same for every length, and
work on NumPy arrays, CuPy arrays, Numba device arrays (and the simulator's
and the CuPy emulation's stand-ins).  NumPy arrays take a fast path: they are
what the object layer hands the CPU kernels on every call.

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

from .field_params import FieldParams
from .monty import OP_ADD, OP_INV, OP_MUL, OP_NEG, OP_SQUARE, OP_SUB

__all__ = ["UNARY", "BINARY", "IN_PLACE_UNARY", "check_map", "check_bcast", "check_pow",
           "check_encode", "check_decode"]

_U32 = np.dtype(np.uint32)
_I64 = np.dtype(np.int64)
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


def _field(where, f):
    if type(f) is not FieldParams:
        raise TypeError(f"{where}: argument `f` must be a FieldParams (e.g. "
                        f"KoalaBear.params), not {type(f).__name__}")


def _op(where, op, ops):
    try:
        if op in ops and not isinstance(op, bool):
            return
    except TypeError:  # unhashable
        pass
    raise ValueError(f"{where}: argument `op` must be one of {_names(ops)}, not {op!r}")


def _int(where, name, v, lo=0, hi=None):
    """``v`` as a Python int in ``[lo, hi]`` (Python or NumPy integers only)."""
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{where}: argument `{name}` must be an integer, not "
                        f"{type(v).__name__}") from None
    if v < lo or (hi is not None and v > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{where}: argument `{name}` must be {bound}, not {v}")
    return v


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
    dt, shape = getattr(x, "dtype", None), getattr(x, "shape", None)
    if dt is None or shape is None or isinstance(x, np.generic):
        raise TypeError(f"{where}: argument `{name}` must be a NumPy, CuPy or Numba "
                        f"device array, not {type(x).__name__}")
    if dt != dtype:
        hint = " (Montgomery words)" if dtype == _U32 else \
            " (signed values: uint64 ones past 2**63 would read as negative; reduce " \
            "them mod p, or cast, first)"
        raise TypeError(f"{where}: argument `{name}` must have dtype {dtype}{hint}, not {dt}")
    if not _flag(x, "C_CONTIGUOUS", "c_contiguous", False):
        raise ValueError(f"{where}: argument `{name}` must be C-contiguous (the kernels "
                         f"index its words directly), not a strided view of shape "
                         f"{tuple(shape)}; pass a contiguous copy")
    if writes and not _flag(x, "WRITEABLE", "writeable", True):
        raise ValueError(f"{where}: argument `{name}` must be writeable (it is read-only "
                         f"or a broadcast view)")
    return tuple(shape)


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


def _same(where, name, m, n):
    if m != n:
        raise ValueError(f"{where}: argument `{name}` must hold as many elements as `out` "
                         f"({n}), not {m}")


# ---- overlap -------------------------------------------------------------------

def _address(x):
    """First byte address of a C-contiguous array (checked by then)."""
    if type(x) is np.ndarray:
        return x.ctypes.data
    ptr = getattr(getattr(x, "data", None), "ptr", None)  # CuPy (and its emulation)
    if ptr is None:  # Numba device arrays; the simulator's wrap NumPy arrays
        face = getattr(x, "__cuda_array_interface__", None) or \
            getattr(x, "__array_interface__", None)
        ptr = face["data"][0] if face else None
    return ptr


def _overlap(where, out, x, name, alias_ok):
    """Refuse ``out`` sharing memory with input ``x``, unless it is ``x`` itself
    (same first address and byte size) and ``alias_ok``.  Address ranges are
    compared as they are: with CUDA's unified addressing, host and device
    arrays never overlap."""
    if type(out) is np.ndarray and type(x) is np.ndarray:
        if not np.may_share_memory(out, x):  # bounds only, O(1)
            return
    size_o, size_x = out.nbytes, x.nbytes
    if not size_o or not size_x:
        return
    lo_o, lo_x = _address(out), _address(x)
    if lo_o is None or lo_x is None:
        raise TypeError(f"{where}: cannot tell where argument `{name}` or `out` lies in "
                        f"memory ({type(x).__name__}, {type(out).__name__})")
    if lo_o + size_o <= lo_x or lo_x + size_x <= lo_o:
        return
    if alias_ok and lo_o == lo_x and size_o == size_x:
        return
    why = "the same array is allowed here only as an elementwise operand" if alias_ok else \
        "this kernel reads its operands after writing out"
    raise ValueError(f"{where}: argument `out` overlaps argument `{name}` ({why}); write "
                     f"into a separate array")


# ---- the launcher signatures ---------------------------------------------------

def _fast_elements(x, deg, writes=False):
    """Element count of an array of a documented form, or -1 for anything
    else: the hot path's test, in as few attribute reads as it takes (the
    general checks then say what is wrong, or accept what is merely rarer).
    NumPy arrays, and CuPy ones (no writeable flag: always writeable)."""
    if type(x) is _ndarray:
        if x.dtype is not _U32:
            return -1
        flags = x.flags
        if not flags.c_contiguous or writes and not flags.writeable:
            return -1
    else:
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


def check_map(where, f, op, ops, in_place, deg, out, a, b=None, name="a"):
    """Elementwise ``out = op(a)`` or ``op(a, b)``: ``op`` in ``ops``, the arrays
    base (``deg`` 1) or extension (``deg`` 4) of one element count, which is
    returned; ``out`` may be an operand itself where ``op`` is in ``in_place``.
    ``ops`` None: no opcode (``op`` then only selects ``in_place``); ``name``:
    the first operand's argument name."""
    # The hot path (every object-layer call): NumPy or CuPy arrays, a Python
    # int opcode, no shared memory.
    if type(f) is FieldParams and type(op) is int and (ops is None or op in ops):
        n = _fast_elements(out, deg, True)
        if n >= 0 and _fast_elements(a, deg) == n and _fast_disjoint(out, a) and (
                b is None or _fast_elements(b, deg) == n and _fast_disjoint(out, b)):
            return n
    _field(where, f)
    if ops is not None:
        _op(where, op, ops)
    n = _elements(where, "out", out, deg, True)
    _same(where, name, _elements(where, name, a, deg), n)
    if b is not None:
        _same(where, "b", _elements(where, "b", b, deg), n)
    alias = op in in_place
    _overlap(where, out, a, name, alias)
    if b is not None:
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
    if (type(f) is FieldParams and type(op) is int and op in BINARY and type(a_step) is int
            and type(b_step) is int and type(run) is int and a_step in _STEPS
            and b_step in _STEPS and (out_deg == 1 or (a_deg, b_deg) in _EXT_DEGS)):
        n = _fast_elements(out, out_deg, True)
        if n > 0:
            if run == 0 or run >= n:
                rows, run, a_row, b_row = 1, n, 0, 0
            elif n % run or type(a_row) is not int or type(b_row) is not int or \
                    a_row not in (0, 1, run) or b_row not in (0, 1, run):
                rows = 0  # the general checks say which
            else:
                rows = n // run
            if rows and _fast_elements(a, a_deg) >= _reach(n, rows, run, a_step, a_row) and \
                    _fast_elements(b, b_deg) >= _reach(n, rows, run, b_step, b_row) and \
                    _fast_disjoint(out, a) and _fast_disjoint(out, b):
                return n, rows, run, a_step, b_step, a_row, b_row
    _field(where, f)
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
    returns the element count.  Never in place (the CPU kernel squares a run of
    ``out`` and multiplies by the operand, which would be that run)."""
    _field(where, f)
    hi = _int(where, "e_hi", e_hi, 0, 2**64 - 1)
    lo = _int(where, "e_lo", e_lo, 0, 2**64 - 1)
    bits = _int(where, "nbits", nbits, 0, 128)
    length = (hi << 64 | lo).bit_length()
    if length > bits:
        raise ValueError(f"{where}: argument `nbits` must be at least the bit length of the "
                         f"exponent e_hi * 2**64 + e_lo ({length}), not {bits}")
    n = _fast_elements(out, deg, True)
    if n >= 0 and _fast_elements(a, deg) == n and _fast_disjoint(out, a):
        return n  # the hot path; else the general checks
    n = _elements(where, "out", out, deg, True)
    _same(where, "a", _elements(where, "a", a, deg), n)
    _overlap(where, out, a, "a", False)
    return n


def check_encode(where, f, v, out):
    """``encode``: flat int64 values (uint64 would be read as negative), flat
    uint32 ``out`` of the same length, no overlap (8-byte values under 4-byte
    words)."""
    _field(where, f)
    n = _elements(where, "out", out, 1, True)
    _same(where, "v", _elements(where, "v", v, 1, dtype=_I64), n)
    _overlap(where, out, v, "v", False)
    return n


def check_decode(where, f, w, out):
    """``decode``: flat uint32 words and ``out`` (which may be ``w`` itself)."""
    return check_map(where, f, 0, None, (0,), 1, out, w, name="w")
