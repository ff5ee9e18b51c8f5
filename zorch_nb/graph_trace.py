"""Kernel definition for the deferred-graph recorder: ``@kernel`` and tracing.

A kernel is a Python function over fixed-shape arrays of field elements::

    @kernel
    def add_2(x: In[2], out: Out[()]):
        out[()] = x[0] + x[1]

Decorating runs the body once on tracer objects and records an SSA IR
(:class:`KernelIR`); the body is never run again.  Inside the body, inputs
are indexed with integers (one per dimension; negative ones count from the
end, as in Python: ``x[-1]`` is the last), elements combine with ``+``, ``-``, ``*``,
unary ``-`` (integer constants allowed) and ``**`` by a Python integer
(unrolled into multiplications), :func:`assert_eq` records an
equality the values must satisfy, and outputs are assigned by item.  Plain
Python control flow over Python integers (``for i in range(8)``) unrolls.
Anything else is refused when the decorator runs, with the line and the
variable involved in the message.
"""
from __future__ import annotations

import inspect
import linecache
import math
import sys
import threading
from typing import NamedTuple

import numpy as np

from ._ints import is_int
from .kernels.graph_codegen import OP_ADD, OP_CONST, OP_LOAD, OP_MUL, OP_NEG, OP_SUB

__all__ = ["In", "Out", "InOut", "ParamSpec", "Kernel", "KernelIR", "kernel", "assert_eq",
           "KernelDefinitionError"]

_I64 = 1 << 63


class KernelDefinitionError(ValueError):
    """A ``@kernel`` body that cannot be traced into the IR."""


class ParamSpec(NamedTuple):
    """One annotated kernel parameter: ``kind`` is ``"in"``, ``"out"`` or ``"inout"``."""

    kind: str
    shape: tuple

    @property
    def size(self) -> int:
        """Element count of ``shape`` (1 for a scalar ``()``)."""
        return math.prod(self.shape)


#: Most elements one parameter may have: a kernel body is unrolled per
#: element (and graph files cap buffers at 2**40 words anyway).
MAX_PARAM_ELEMENTS = 1 << 24


def _shape_key(kind: str, item) -> ParamSpec:
    items = item if isinstance(item, tuple) else (item,)
    label = {"in": "In", "out": "Out", "inout": "InOut"}[kind]
    shape = []
    for d in items:
        if not is_int(d) or d < 1:
            raise TypeError(f"{label}[...] takes positive integer dimensions "
                            f"(e.g. {label}[16], {label}[4, 8], {label}[()]), not {item!r}")
        shape.append(int(d))
    if math.prod(shape) > MAX_PARAM_ELEMENTS:  # Python ints: no int64 wrap
        raise TypeError(f"{label}{list(shape)} has {math.prod(shape)} elements; a kernel "
                        f"parameter holds at most {MAX_PARAM_ELEMENTS} (the body is traced "
                        f"element by element)")
    return ParamSpec(kind, tuple(shape))


class _Marker:
    _kind = ""

    def __class_getitem__(cls, item):
        return _shape_key(cls._kind, item)


class In(_Marker):
    """Annotation of an input parameter: ``In[16]``, ``In[4, 8]``, ``In[()]``."""

    _kind = "in"


class Out(_Marker):
    """Annotation of an output parameter (a fresh buffer per call)."""

    _kind = "out"


class InOut(_Marker):
    """Annotation of a parameter read and written (the input is not mutated:
    the written result is a fresh buffer; unassigned elements keep their
    input value)."""

    _kind = "inout"


class KernelIR(NamedTuple):
    """The traced form of a kernel: plain data, serializable, field-agnostic.

    Attributes
    ----------
    name : str
        The function's name (messages only).
    params : tuple of (name, kind, shape)
        Parameters in declaration order.
    consts : tuple of int
        Integer constants (signed 64-bit), reduced modulo p when run.
    nodes : tuple of (op, a, b)
        SSA nodes (see :mod:`zorch_nb.kernels.graph_codegen`); ``OP_LOAD``
        operands count the In/InOut parameters in order.
    asserts : tuple of (x, y, where)
        Node pairs that must be equal; ``where`` locates the ``assert_eq``.
    outputs : tuple of tuple of int
        Per Out/InOut parameter (in order), the node of every element.
    """

    name: str
    params: tuple
    consts: tuple
    nodes: tuple
    asserts: tuple
    outputs: tuple

    @property
    def in_params(self) -> tuple:
        """``(name, kind, shape)`` of the parameters read: In and InOut, in order."""
        return tuple(p for p in self.params if p[1] in ("in", "inout"))

    @property
    def out_params(self) -> tuple:
        """``(name, kind, shape)`` of the parameters written: Out and InOut, in order."""
        return tuple(p for p in self.params if p[1] in ("out", "inout"))


class Kernel:
    """A traced kernel; create with :func:`kernel`.

    Pickles by value (its IR), so it can be sent to spawned worker
    processes; the copy's ``__wrapped__`` (the traced function) is None.

    Attributes
    ----------
    name : str
    ir : KernelIR
    fingerprint : str
        Hex SHA-256 of the serialized IR with the assertions' source
        locations left out (a comment line above a kernel does not make it
        another one): the identity used to deduplicate compiled kernels and
        to compare graphs.
    """

    def __init__(self, ir: KernelIR, fn=None):
        from .graph_format import kernel_fingerprint
        self.ir = ir
        self.name = ir.name
        self.fingerprint = kernel_fingerprint(ir)
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)
        # as functools.wraps would: help(), IPython and Sphinx look for them
        self.__name__ = ir.name
        self.__qualname__ = getattr(fn, "__qualname__", ir.name)
        if fn is not None:
            self.__module__ = fn.__module__

    @property
    def params(self) -> tuple:
        """``(name, kind, shape)`` of every parameter, in the signature's order."""
        return self.ir.params

    def __repr__(self):
        label = {"in": "In", "out": "Out", "inout": "InOut"}
        sig = ", ".join(f"{n}: {label[k]}[{', '.join(map(str, s)) if s else '()'}]"
                        for n, k, s in self.ir.params)
        return f"<zorch_nb kernel {self.name}({sig}), {len(self.ir.nodes)} nodes>"

    def __reduce__(self):
        # By value (its IR), not by name: the module-level name of a decorated
        # function is the Kernel itself, so pickle's by-name lookup of the
        # function fails; the IR is all a spawned worker needs.  The copy's
        # ``__wrapped__`` is None (the traced function is not sent).
        return (_kernel_from_ir, (self.ir, self.__doc__))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel `{self.name}` is not called directly; use "
                        f"Context.call_kernel({self.name}, num_parallel, *handles)")


def _kernel_from_ir(ir, doc):
    """The :class:`Kernel` of a pickle (see :meth:`Kernel.__reduce__`)."""
    k = Kernel(ir)
    k.__doc__ = doc
    return k


# ---------------------------------------------------------------- tracing ----

_state = threading.local()


class _Tracer:
    def __init__(self, name: str, code):
        self.name = name
        self.code = code
        self.nodes: list = []
        self.memo: dict = {}
        self.consts: list = []
        self.const_index: dict = {}
        self.asserts: list = []
        self.refusal = None  # the first refusal raised into the body

    def where(self) -> str:
        """``line N (`source`)`` of the kernel body line being traced."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not self.code:
            frame = frame.f_back
        if frame is None:
            return "in the body"
        return self._line(frame.f_lineno)

    def where_raised(self, exc) -> str | None:
        """``line N (`source`)`` of the body line ``exc`` was raised through, or None."""
        lineno, tb = None, exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is self.code:
                lineno = tb.tb_lineno
            tb = tb.tb_next
        return None if lineno is None else self._line(lineno)

    def _line(self, lineno: int) -> str:
        filename = self.code.co_filename
        # the file as it is now (tracebacks do the same): a kernel redefined
        # after an edit, in a notebook or REPL, quoted the old line
        linecache.checkcache(filename)
        text = linecache.getline(filename, lineno).strip()
        return f"line {lineno} (`{text}`)" if text else f"line {lineno}"

    def fail(self, message: str, cls=KernelDefinitionError):
        exc = cls(f"kernel `{self.name}`, {self.where()}: {message}")
        # Kept: a body that catches it (a helper's ``except ValueError``) must
        # not trace on into a kernel that silently computes something else.
        if self.refusal is None:
            self.refusal = exc
        raise exc

    def node(self, op, a, b=0) -> int:
        key = (op, a, b)
        if key not in self.memo:
            self.memo[key] = len(self.nodes)
            self.nodes.append(key)
        return self.memo[key]

    def const(self, value, context: str) -> int:
        if not is_int(value):
            self.fail(f"{context}: constant {_text(value)} must be an integer "
                      f"(field elements are integers modulo p), not {type(value).__name__}")
        value = int(value)
        if not -_I64 <= value < _I64:
            # (the IR stores constants as int64, and a kernel does not know its
            # field until it runs, so it cannot reduce them itself)
            self.fail(f"{context}: constant {_text(value)} must fit in a signed 64-bit integer; "
                      f"reduce it modulo the p of the field the kernel runs in first (e.g. "
                      f"`{_text(value)} % KoalaBear.p` under KoalaBear)")
        if value not in self.const_index:
            self.const_index[value] = len(self.consts)
            self.consts.append(value)
        return self.node(OP_CONST, self.const_index[value])


def _require_own(obj, what: str) -> None:
    """Refuse a traced value or parameter outside the trace that made it.

    Its node ids index its own kernel's IR: kept past the body (a list, a
    global) and used while another kernel is traced, they would silently
    name that kernel's nodes instead -- a wrong kernel, not an error.
    """
    active = getattr(_state, "tracer", None)
    if active is obj._tr:
        return
    if active is None:
        raise KernelDefinitionError(
            f"{what} of kernel `{obj._tr.name}` is used outside its @kernel body; traced "
            f"values and parameters exist only while that body is traced")
    active.fail(f"{what} belongs to kernel `{obj._tr.name}`, not to this one (it was kept "
                f"from that kernel's trace); compute it inside this kernel's body")


def _active(what: str) -> _Tracer:
    tr = getattr(_state, "tracer", None)
    if tr is None:
        raise RuntimeError(f"{what} can only be used inside a @kernel body")
    return tr


#: Longest expression text a traced value keeps for error messages; past it
#: the value is named by its node (the text of a deep chain grows
#: exponentially: 40 rounds of a 3-word permutation ran out of memory).
_LABEL_MAX = 60


def _text(obj) -> str:
    """``repr(obj)``, an integer of more than 256 bits by its size: Python
    refuses to print one of over 4300 digits (a ValueError from a label)."""
    if isinstance(obj, (int, np.integer)) and int(obj).bit_length() > 256:
        return f"<{int(obj).bit_length()}-bit integer>"
    return repr(obj)


class _Value:
    """A traced field element (one IR node)."""

    __slots__ = ("_tr", "_id", "_label")

    def __init__(self, tr, node_id, label):
        self._tr = tr
        self._id = node_id
        self._label = label if len(label) <= _LABEL_MAX else f"<value #{node_id}>"

    def _operand(self, other, op_text):
        _require_own(self, f"field value `{self._label}`")
        if isinstance(other, _Value):
            _require_own(other, f"field value `{other._label}`")
            return other._id, other._label
        if isinstance(other, _TracedArray):
            self._tr.fail(f"`{other._name}` is an array; index it (e.g. `{other._name}"
                          f"[{', '.join('0' * len(other._shape)) or '()'}]`) before `{op_text}`")
        return self._tr.const(other, f"`{self._label} {op_text} {_text(other)}`"), _text(other)

    def _bin(self, op, other, sym, swap=False):
        oid, olabel = self._operand(other, sym)
        a, b = (oid, self._id) if swap else (self._id, oid)
        la, lb = (olabel, self._label) if swap else (self._label, olabel)
        return _Value(self._tr, self._tr.node(op, a, b), f"({la} {sym} {lb})")

    def __add__(self, o):
        return self._bin(OP_ADD, o, "+")

    def __radd__(self, o):
        return self._bin(OP_ADD, o, "+", swap=True)

    def __sub__(self, o):
        return self._bin(OP_SUB, o, "-")

    def __rsub__(self, o):
        return self._bin(OP_SUB, o, "-", swap=True)

    def __mul__(self, o):
        return self._bin(OP_MUL, o, "*")

    def __rmul__(self, o):
        return self._bin(OP_MUL, o, "*", swap=True)

    def __neg__(self):
        _require_own(self, f"field value `{self._label}`")
        return _Value(self._tr, self._tr.node(OP_NEG, self._id), f"(-{self._label})")

    # NumPy scalars and arrays on the left (``MDS[i, j] * x``) defer to the
    # reflected operators instead of converting this value to an array.
    __array_ufunc__ = None

    def __pow__(self, e, modulus=None):
        """``x ** e`` for a Python integer ``e >= 0``: unrolled into multiplications
        (square and multiply, so ``x ** 7`` is four of them)."""
        if modulus is not None:
            self._tr.fail(f"`pow({self._label}, {_text(e)}, {_text(modulus)})`: field "
                          f"arithmetic is already modulo p; use `{self._label} ** {_text(e)}`")
        if not is_int(e) or e < 0:
            self._tr.fail(f"`{self._label} ** {_text(e)}`: the exponent must be a Python "
                          f"integer >= 0 (it is unrolled into multiplications)")
        if e == 0:
            return _Value(self._tr, self._tr.const(1, f"`{self._label} ** 0`"), "1")
        _require_own(self, f"field value `{self._label}`")
        result, square, k = None, self, int(e)
        while k:
            if k & 1:
                result = square if result is None else result * square
            k >>= 1
            if k:
                square = square * square
        return _Value(self._tr, result._id, f"({self._label} ** {_text(e)})")

    def __pos__(self):
        _require_own(self, f"field value `{self._label}`")
        return self

    def __getattr__(self, name):
        raise AttributeError(name)

    def __bool__(self):
        self._tr.fail(f"field value `{self._label}` has no truth value (data-dependent "
                      f"control flow cannot be traced); use assert_eq(a, b) to check values")

    def __index__(self):
        self._tr.fail(f"field value `{self._label}` cannot be used as an index or int; "
                      f"indices must be Python integers")

    __int__ = __index__
    __float__ = __index__

    def __eq__(self, other):
        self._tr.fail(f"`==` is not supported on field value `{self._label}`; "
                      f"use assert_eq(a, b)")

    __hash__ = None

    def __repr__(self):
        return f"<traced field value {self._label}>"


def _install_refusals():
    ops = {"__truediv__": "`/`", "__rtruediv__": "`/`", "__floordiv__": "`//`",
           "__rfloordiv__": "`//`", "__mod__": "`%`", "__rmod__": "`%`",
           "__rpow__": "`**`", "__lshift__": "`<<`", "__rlshift__": "`<<`",
           "__rshift__": "`>>`", "__rrshift__": "`>>`", "__and__": "`&`", "__rand__": "`&`",
           "__or__": "`|`", "__ror__": "`|`", "__xor__": "`^`", "__rxor__": "`^`",
           "__invert__": "`~`", "__matmul__": "`@`", "__rmatmul__": "`@`",
           "__lt__": "`<`", "__le__": "`<=`", "__gt__": "`>`", "__ge__": "`>=`",
           "__ne__": "`!=`", "__abs__": "abs()", "__divmod__": "divmod()",
           "__array__": "conversion to a NumPy array", "__round__": "round()"}
    for meth, what in ops.items():
        def refuse(self, *args, _what=what):
            self._tr.fail(f"{_what} is not supported on field value `{self._label}`; "
                          f"kernels support + - * , ** by a Python int, unary - and "
                          f"assert_eq(a, b)")
        setattr(_Value, meth, refuse)


_install_refusals()


class _TracedArray:
    """Stand-in for one kernel parameter while the body is traced."""

    def __init__(self, tr, name, spec, in_index):
        self._tr = tr
        self._name = name
        self._kind = spec.kind
        self._shape = spec.shape
        self._in_index = in_index
        self._assigned: dict = {}

    def _flat(self, idx) -> tuple:
        _require_own(self, f"parameter `{self._name}`")
        items = idx if isinstance(idx, tuple) else (idx,)
        shown = f"{self._name}[{', '.join(repr(i) for i in items) if items else '()'}]"
        if len(items) != len(self._shape):
            self._tr.fail(f"`{shown}` must index all {len(self._shape)} dimensions of "
                          f"`{self._name}` (shape {self._shape}) with integers")
        flat = 0
        for i, n in zip(items, self._shape):
            if isinstance(i, _Value):
                self._tr.fail(f"`{self._name}` is indexed with the field value "
                              f"`{i._label}`; indices must be Python integers")
            if not is_int(i):
                self._tr.fail(f"`{shown}`: indices of `{self._name}` must be integers, "
                              f"not {type(i).__name__} (slices are not supported)")
            i = int(i)
            if not -n <= i < n:
                self._tr.fail(f"`{shown}` reads past the shape of `{self._name}` "
                              f"{self._shape}")
            flat = flat * n + (i % n)
        return flat, shown

    def __getitem__(self, idx):
        flat, shown = self._flat(idx)
        if flat in self._assigned:
            return self._assigned[flat]
        if self._kind == "out":
            self._tr.fail(f"`{shown}` reads the output `{self._name}` before it is assigned")
        return _Value(self._tr, self._tr.node(OP_LOAD, self._in_index, flat), shown)

    def __setitem__(self, idx, value):
        flat, shown = self._flat(idx)
        if self._kind == "in":
            self._tr.fail(f"`{self._name}` is an input (In[...]) and cannot be assigned; "
                          f"declare it Out[...] or InOut[...]")
        if isinstance(value, _TracedArray):
            self._tr.fail(f"`{shown} = {value._name}` assigns a whole array; assign "
                          f"one element (e.g. `{value._name}[...]`)")
        if isinstance(value, _Value):
            _require_own(value, f"field value `{value._label}`")
        else:
            value = _Value(self._tr, self._tr.const(value, f"`{shown} = {_text(value)}`"),
                           repr(value))
        self._assigned[flat] = value

    def _refuse(self, *args):
        self._tr.fail(f"`{self._name}` is an array parameter; index it with integers "
                      f"(arithmetic, iteration and len() apply to elements only)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __neg__ = __iter__ = __len__ = __bool__ = __truediv__ = __matmul__ = _refuse

    def __array__(self, *args, **kwargs):
        # np.sum(x), np.prod(x), np.asarray(x): NumPy wrapped the parameter in
        # a 0-d object array and handed it back, and the refusal then quoted
        # an assignment of `x` the body never wrote
        self._tr.fail(f"`{self._name}` is an array parameter: NumPy functions (np.sum, "
                      f"np.prod, np.asarray, ...) cannot run on it while the kernel is "
                      f"traced; index it with integers and combine the elements (e.g. "
                      f"`s = {self._name}[0]` then `s = s + {self._name}[i]` in a loop)")

    @property
    def shape(self) -> tuple:
        """The parameter's shape (a tuple of ints)."""
        return self._shape


def assert_eq(a, b) -> None:
    """Inside a ``@kernel`` body: require ``a == b`` in the field.

    Recorded in the IR; a call whose values break it raises ``ValueError``
    naming the kernel, the line and the first failing instance.  Two Python
    integers are compared when the kernel is defined: equal, nothing is
    recorded (a static check, say of a shape); unequal, the definition is
    refused, since the assertion would fail at every call.
    """
    tr = _active("assert_eq")
    if is_int(a) and is_int(b):
        if int(a) != int(b):
            # (not reduced modulo p: the kernel's field is not known until it
            # runs, and two distinct constants meant as one element are a slip)
            tr.fail(f"assert_eq compares two different integer constants ({_text(a)} and "
                    f"{_text(b)}), so it would fail at every call; compare a value computed "
                    f"from the kernel's inputs")
        return
    ids = []
    for v in (a, b):
        if isinstance(v, _Value):
            _require_own(v, f"field value `{v._label}`")
            ids.append(v._id)
        elif isinstance(v, _TracedArray):
            tr.fail(f"assert_eq compares elements; `{v._name}` is an array (index it)")
        else:
            ids.append(tr.const(v, "assert_eq"))
    tr.asserts.append((ids[0], ids[1], tr.where()))


def _failing_annotation(fn, scope) -> str:
    """Which of ``fn``'s string annotations fails to evaluate, for the error
    (each evaluated alone, as ``inspect.get_annotations`` evaluates them)."""
    for pname, text in inspect.get_annotations(fn).items():
        if isinstance(text, str):
            try:
                eval(text, fn.__globals__, scope)  # (what get_annotations ran)
            except Exception:
                return ("the return annotation" if pname == "return"
                        else f"the annotation of parameter `{pname}`")
    return "the parameter annotations"


def _trace(fn, scope=None) -> KernelIR:
    """Trace ``fn``; ``scope``: the names its string annotations may use besides its
    globals (under ``from __future__ import annotations``)."""
    name = getattr(fn, "__name__", "kernel")
    if not inspect.isfunction(fn):
        raise TypeError(f"Argument `fn` of @kernel must be a Python function, not "
                        f"{type(fn).__name__}")
    try:  # (the graph format stores it as UTF-8; a lone surrogate has none)
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise KernelDefinitionError(f"kernel {name!r}: the function's __name__ must be "
                                    f"encodable as UTF-8 (it holds a lone surrogate)") from None
    try:
        hints = inspect.get_annotations(fn, eval_str=True, locals=scope)
    except Exception as exc:
        raise KernelDefinitionError(f"kernel `{name}`: cannot evaluate "
                                    f"{_failing_annotation(fn, scope)} ({exc})") from None
    params = []
    for pname, prm in inspect.signature(fn).parameters.items():
        if prm.kind not in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD):
            raise KernelDefinitionError(f"kernel `{name}`: parameter `{pname}` must be a "
                                        f"plain positional parameter")
        spec = hints.get(pname)
        if not isinstance(spec, ParamSpec):
            raise KernelDefinitionError(
                f"kernel `{name}`: parameter `{pname}` must be annotated In[...], Out[...] "
                f"or InOut[...], not {spec!r}")
        params.append((pname, spec))
    if not any(s.kind in ("out", "inout") for _, s in params):
        raise KernelDefinitionError(f"kernel `{name}` has no Out[...] or InOut[...] "
                                    f"parameter, so it computes nothing")
    tr = _Tracer(name, fn.__code__)
    arrays = []
    n_in = 0
    for pname, spec in params:
        arrays.append(_TracedArray(tr, pname, spec, n_in if spec.kind != "out" else None))
        n_in += spec.kind != "out"
    if getattr(_state, "tracer", None) is not None:
        raise KernelDefinitionError(f"kernel `{name}` is defined inside another kernel body")
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or \
            inspect.isasyncgenfunction(fn):
        raise KernelDefinitionError(f"kernel `{name}` must be a plain function, not a "
                                    f"generator or `async def` function")
    _state.tracer = tr
    try:
        result = fn(*arrays)
    except KernelDefinitionError:
        raise
    except Exception as exc:
        if tr.refusal is not None:  # the body turned a refusal into another error
            raise tr.refusal from None
        where = tr.where_raised(exc)
        hint = ("; NumPy functions do not take traced field values: use + - * and ** "
                "with an integer exponent" if isinstance(exc, TypeError)
                and "__array_ufunc__" in str(exc) else "")
        raise KernelDefinitionError(
            f"kernel `{name}`{', ' + where if where else ''} cannot be traced: "
            f"{type(exc).__name__}: {exc}{hint}") from exc
    finally:
        _state.tracer = None
    if tr.refusal is not None:  # raised into the body and caught there
        raise KernelDefinitionError(f"{tr.refusal} (the kernel body caught this error and "
                                    f"went on; a traced kernel cannot take that branch)")
    if result is not None:
        raise KernelDefinitionError(f"kernel `{name}` returns a value; kernels assign "
                                    f"their Out[...] parameters by item instead")
    outputs = []
    for arr in arrays:
        if arr._kind == "in":
            continue
        size = math.prod(arr._shape)
        ids = []
        for flat in range(size):
            if flat in arr._assigned:
                ids.append(arr._assigned[flat]._id)
            elif arr._kind == "inout":
                ids.append(tr.node(OP_LOAD, arr._in_index, flat))
            else:
                idx = np.unravel_index(flat, arr._shape) if arr._shape else ()
                raise KernelDefinitionError(
                    f"kernel `{name}` leaves output `{arr._name}` element "
                    f"{arr._name}[{', '.join(str(int(i)) for i in idx) or '()'}] unassigned; "
                    f"assign every element of an Out[...] parameter")
        outputs.append(tuple(ids))
    return KernelIR(name=name,
                    params=tuple((n, s.kind, s.shape) for n, s in params),
                    consts=tuple(tr.consts),
                    nodes=tuple(tr.nodes),
                    asserts=tuple(tr.asserts),
                    outputs=tuple(outputs))


def kernel(fn) -> Kernel:
    """Decorator: trace ``fn`` into a :class:`Kernel`.

    Parameters
    ----------
    fn : function
        Every parameter annotated ``In[shape]``, ``Out[shape]`` or
        ``InOut[shape]``; at least one output.

    Returns
    -------
    Kernel

    Raises
    ------
    KernelDefinitionError
        (a ``ValueError``) for an unassigned output element, an index past a
        shape, an unsupported operation or a bad annotation, naming the
        variable and the line.
    TypeError
        For ``fn`` that is not a function; ``In[...]`` / ``Out[...]`` with a
        dimension that is not a positive integer raise it already where the
        annotation is evaluated (when the ``def`` runs; under ``from
        __future__ import annotations``, in ``@kernel``, which reports it as
        a KernelDefinitionError naming the parameter).

    Examples
    --------
    >>> @kernel
    ... def add_2(x: In[2], out: Out[()]):
    ...     out[()] = x[0] + x[1]
    >>> add_2.params
    (('x', 'in', (2,)), ('out', 'out', ()))
    """
    return Kernel(_trace(fn, _defining_scope(fn)), fn)


def _defining_scope(fn):
    """Local names of the scope whose ``def`` made ``fn``, for its string
    annotations (PEP 563), or None.

    Such annotations are evaluated here, not where the ``def`` ran: a kernel
    made in a factory (``In[n]``, ``n`` an argument of the factory) needs that
    frame's names, and only that frame's -- the one whose code holds ``fn``'s
    code (not a wrapper that applies the decorator, whose locals would give
    another ``n``).  Not on the stack (the function returned by its factory
    first): only its globals and closure, as ``inspect`` would.
    """
    annotations = getattr(fn, "__annotations__", None)
    if not inspect.isfunction(fn) or not isinstance(annotations, dict) or \
            not any(isinstance(a, str) for a in annotations.values()):
        return None
    frame = sys._getframe(1)
    try:
        while frame is not None and fn.__code__ not in frame.f_code.co_consts:
            frame = frame.f_back
        scope = dict(frame.f_locals) if frame is not None else {}
    finally:
        del frame
    scope.update(inspect.getclosurevars(fn).nonlocals)
    return scope
