"""Deferred-graph recorder: record kernel calls, decide layouts late, replay.

Record a program of :func:`kernel` calls on device buffers once, let the
recorder decide padded memory layouts when the whole program is known, then
run the saved graph again on new inputs without the program (see the README's
tour).

Examples
--------
>>> import numpy as np
>>> from zorch_nb.graph import Context, In, Out, kernel, run_computation_graph
>>> @kernel
... def add_2(x: In[2], out: Out[()]):
...     out[()] = x[0] + x[1]
>>> @kernel
... def add_16(x: In[16], out: Out[()]):
...     s = x[0]
...     for i in range(1, 16):
...         s = s + x[i]
...     out[()] = s
>>> ctx = Context()
>>> a = ctx.copy_to_device(np.arange(1, 33).reshape(16, 2))
>>> (b,) = ctx.call_kernel(add_2, 16, a)
>>> (c,) = ctx.call_kernel(add_16, 1, b.reshape([1, 16]))
>>> c = c.reshape([])
>>> int(ctx.copy_to_host(c))
528
>>> graph = ctx.generate_computation_graph([a], [c])
>>> outs, commitments = run_computation_graph(graph, [np.arange(32).reshape(16, 2)])
>>> int(outs[0])
496
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import heapq
import io
import itertools
import math
import operator
import os
import re
import threading
import weakref
from typing import NamedTuple

import numpy as np

from . import _backend
from ._ints import is_int
from ._text import elided_list
from .fields import BabyBear, KoalaBear, PrimeField, _stale_field_hint
from .graph_format import _MAX_LOG2, _MAX_NDIM
from .graph_layout import (ViewForm, _first_axis_dims, _jit_disabled, _merge_points,
                           _prefix_points, apply_history, dims_of, history_shapes,
                           initial_view, input_layout, logical_instance, merkle_root,
                           output_layout, pad, padded_dims, reshape_view, transpose_view,
                           unapply_history, unpad, view_of_history)
from .graph_trace import (In, InOut, Kernel, KernelDefinitionError, KernelIR, Out, assert_eq,
                          kernel)
from .kernels import cpu_threads, graph_codegen, graph_cpu, graph_interp, launch_config

__all__ = ["Context", "Handle", "ComputationGraph", "Template", "CompiledKernel",
           "run_computation_graph", "kernel", "Kernel", "KernelIR", "In", "Out", "InOut",
           "assert_eq", "KernelDefinitionError", "FIELDS_BY_NAME"]

#: Fields a graph may name.
FIELDS_BY_NAME = {"koalabear": KoalaBear, "babybear": BabyBear}

_GRAPH_BACKENDS = ("cpu", "cupy")


def _check_backend(backend):
    if backend is None:
        return "cpu"
    if backend not in _GRAPH_BACKENDS:
        raise ValueError(f"Argument `backend` must be one of {_GRAPH_BACKENDS} or None, "
                         f"not {backend!r}")
    return backend


def _xp(backend):
    return np if backend == "cpu" else _backend.get_xp("cupy", "backend='cupy' was asked for")


def _to_host(x):
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def _index_args(args, name) -> tuple:
    """``f(2, 3)``, ``f((2, 3))``, ``f(np.array([2, 3]))`` -> ``(2, 3)`` as Python ints, or
    a TypeError naming ``name`` (NumPy's conventions; bools are not integers)."""
    if len(args) == 1 and (isinstance(args[0], (tuple, list))
                           or (isinstance(args[0], np.ndarray) and args[0].ndim == 1)):
        args = tuple(args[0])
    out = []
    for d in args:
        try:
            if isinstance(d, (bool, np.bool_)) or getattr(d, "dtype", None) == bool:
                raise TypeError
            out.append(operator.index(d))
        except TypeError:
            raise TypeError(f"Argument `{name}` must be integers, not {list(args)!r}") from None
    return tuple(out)


def _shape_arg(shape, size: int, name="shape") -> tuple:
    """Positive dimensions; one ``-1`` is inferred from ``size`` as in NumPy."""
    shape = _index_args(shape, name)
    if shape == ():
        return shape
    known = int(np.prod([d for d in shape if d != -1], dtype=object))
    if shape.count(-1) == 1 and known >= 1 and size % known == 0:
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif shape.count(-1) == 1 and known >= 1 and all(d > 0 or d == -1 for d in shape):
        raise ValueError(f"Argument `{name}` {list(shape)!r} cannot keep the element count "
                         f"{size}: {size} is not a multiple of {known}")
    if any(d < 1 for d in shape):
        raise ValueError(f"Argument `{name}` must be positive integers (at most one -1), "
                         f"not {list(shape)!r}")
    return shape


class Handle:
    """A view of one recorded buffer.

    Handles are cheap: :meth:`reshape` and :meth:`transpose` return new views of
    the same buffer and extend the recorded shape history; host copies and
    kernel calls read through the view.

    Attributes
    ----------
    shape : tuple of int
        The view's shape.
    buffer_id : int
        The buffer, numbered in creation order within its context.
    """

    # Read-only: a view's shape and buffer are facts the recorder relies on
    # (a reassigned shape reached the layout code as an IndexError later).
    __slots__ = ("_ctx", "_buffer_id", "_shape", "_view", "_history", "_use")

    def __init__(self, ctx, buffer_id, shape, view, history, use=None):
        self._ctx = ctx
        self._buffer_id = buffer_id
        self._shape = tuple(shape)
        self._view = view
        self._history = tuple(history)
        # (the entry a call using this view adds to its buffer's uses:
        # _describe of it and its split points; made on its first call)
        self._use = use

    @property
    def shape(self) -> tuple:
        """The view's shape."""
        return self._shape

    def __copy__(self):
        return self  # (immutable: a copy would be the same view)

    def __reduce__(self):
        # (pickling and deepcopy went on to the Context and named only that)
        raise TypeError("A graph Handle is a view into its Context's live buffers and cannot "
                        "be pickled or deep-copied; pickle its values (ctx.copy_to_host("
                        "handle)) or the graph (generate_computation_graph(...), whose "
                        "to_bytes() is a portable file)")

    @property
    def buffer_id(self) -> int:
        """The buffer, numbered in creation order within its context."""
        return self._buffer_id

    @property
    def size(self) -> int:
        """Number of elements of the view."""
        return math.prod(self._shape)

    @property
    def history(self) -> tuple:
        """The recorded shape history: ``("reshape", shape)``/``("transpose", axes)``."""
        return self._history

    def reshape(self, *shape) -> "Handle":
        """View with the same elements in row-major order and shape ``shape``.

        Parameters
        ----------
        *shape : ints, or one tuple, list or 1-d array of ints
            Positive dimensions; one of them may be ``-1``, inferred as in NumPy.

        Returns
        -------
        Handle
            A view of the same buffer.

        Raises
        ------
        TypeError
            A dimension that is not an integer (bools included).
        ValueError
            A dimension below 1 other than one ``-1``, a shape of another element
            count, or more dimensions than NumPy allows.
        """
        shape = _shape_arg(shape, self.size)
        if len(shape) > _MAX_NDIM:  # copy_to_host and replay make NumPy arrays of it
            raise ValueError(f"Argument `shape` may have at most {_MAX_NDIM} dimensions "
                             f"(NumPy's limit), not {len(shape)}")
        if int(np.prod(shape, dtype=object)) != self.size:
            raise ValueError(f"Argument `shape` must keep the element count {self.size} of "
                             f"the view {list(self.shape)}, not {list(shape)}")
        history = _extended(self._history, "reshape", shape, self.shape)
        return Handle(self._ctx, self.buffer_id, shape,
                      self._next_view(history, reshape_view, self.shape, shape), history)

    def transpose(self, *axes) -> "Handle":
        """View with axes permuted (default: reversed), like ``numpy.transpose``.

        Parameters
        ----------
        *axes : ints, or one tuple, list or 1-d array of ints, or None
            A permutation of the view's axes; negative axes count from the end.
            Returns a view of the same buffer; an axis that is not an integer
            is a ``TypeError``, ``axes`` that are no permutation a ``ValueError``.
        """
        if len(axes) == 1 and axes[0] is None:  # transpose(None), as NumPy's
            axes = ()
        axes = _index_args(axes, "axes")
        nd = len(self.shape)
        if not axes:
            axes = tuple(range(nd))[::-1]
        # negative axes count from the end, as in NumPy
        norm = tuple(a + nd if -nd <= a < 0 else a for a in axes)
        if sorted(norm) != list(range(nd)):
            raise ValueError(f"Argument `axes` must be a permutation of "
                             f"{list(range(nd))}, not {list(axes)}")
        axes = norm
        history = _extended(self._history, "transpose", axes, self.shape)
        return Handle(self._ctx, self.buffer_id, tuple(self.shape[a] for a in axes),
                      self._next_view(history, transpose_view, axes), history)

    def _next_view(self, history, step, *args):
        """The view of ``history``, this handle's history and one more step.

        Where the step was appended, the step taken on this view; where it
        folded into the last step (or cancelled it), the folded history's
        view: ``h.T.reshape(2, 3)`` needs a copy, but its ``.reshape(3, 2)``
        is ``h.T`` again, which needs none (it was refused in calls, naming
        the reshape its history no longer holds).
        """
        if len(history) == len(self._history) + 1:
            return step(self._view, *args)
        return view_of_history(history)

    @property
    def T(self) -> "Handle":
        """The view with its axes reversed (``transpose()``)."""
        return self.transpose()

    @property
    def ndim(self) -> int:
        """Number of dimensions of the view."""
        return len(self._shape)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d handle")
        return self._shape[0]

    def __bool__(self) -> bool:
        # A handle is a reference, always true (as before it had __len__):
        # `h or default` must not depend on its shape.
        return True

    def __array__(self, dtype=None, copy=None):
        # np.asarray(handle) made a 0-d object array that failed far away.
        raise TypeError("a graph handle holds no values on the host; read them with "
                        "Context.copy_to_host(handle)")

    def __repr__(self):
        return f"<zorch_nb graph handle: buffer {self.buffer_id}, shape {tuple(self.shape)}>"


def _call_list(calls) -> str:
    """Call indices for a message: all of a few, the ends of many (a clash on a
    buffer 5,000 calls read listed all 5,000)."""
    calls = list(calls)
    return elided_list(calls, 3, 2) + (f" ({len(calls)} calls)" if len(calls) > 8 else "")


def _history_shape(history: tuple) -> tuple:
    """The shape a view history ends in (its first step is a reshape)."""
    shape = ()
    for op, arg in history:
        shape = arg if op == "reshape" else tuple(shape[a] for a in arg)
    return shape


def _extended(history: tuple, op: str, arg: tuple, shape: tuple) -> tuple:
    """``history`` (ending in ``shape``) followed by the view step ``(op,
    arg)``, folded into its last step where they compose: a reshape of a
    reshape is one reshape (both act on the row-major order), a transpose of
    a transpose one transpose, and an identity step -- a reshape to the shape
    it starts from, the identity transpose -- is no step.  Each handle holds
    its whole history, so alternating reshape(2, 4) and reshape(8) 21,000
    times took 12 s and 1.8 GB, and ``h = h.T.reshape(4, 4)`` 32,000 times
    12 s; folded, a history is as long as its alternations of the two."""
    last_op, last_arg = history[-1] if history else (None, None)
    if arg == (tuple(range(len(arg))) if op == "transpose" else shape):
        return history
    if op == last_op == "reshape" and len(history) > 1 or op == last_op == "transpose":
        # (the first step, the buffer's own shape, stays)
        arg = arg if op == "reshape" else tuple(last_arg[a] for a in arg)
        history = history[:-1]
        if arg == (tuple(range(len(arg))) if op == "transpose"
                   else _history_shape(history)):
            return history
    return history + ((op, arg),)


class _Buffer:
    def __init__(self, length, values, source, shape, points, use=None):
        self.length = length
        self.values = values  # logical Montgomery words (flat), in the context's module
        self.source = source  # "input" or index of the producing call
        # points and uses are replaced, never mutated in place: call_kernel's
        # commit can then put the old lists back if it is interrupted.
        self.points = points
        self.uses = [use or _buffer_use(shape, points)]
        # The split points after the recorded calls' instance boundaries are
        # propagated (Context._fixed_point), and the calls that propagate
        # into this buffer (parallel operand or output): kept up to date call
        # by call, so a call that would make the graph impossible is refused.
        self.fixed = points
        self.fixed_by = None  # the call whose recording last changed `fixed` (for errors)
        self.calls = []  # ascending; appended to (a rollback truncates it)


def _buffer_use(shape, points) -> tuple:
    """A new buffer's first entry in :attr:`_Buffer.uses`: its own shape."""
    return (f"{list(shape)}", tuple(points))


def _output_forms(sig, num_parallel) -> tuple:
    """Per output of a call of ``num_parallel`` instances: its shape, the view
    and history of its handle, its buffer's split points and first use, kept
    on ``sig`` per instance count (up to 64 counts: a propagation walks every
    call of a deep halving pyramid, one count per level, over and over)."""
    forms = sig.output_forms.get(num_parallel)
    if forms is None:
        forms = []
        for shape in sig.out_shapes:
            shape = (num_parallel,) + shape
            view = initial_view(shape)
            points = tuple(_prefix_points(view.base))
            forms.append((shape, view, (("reshape", shape),), points, _buffer_use(shape, points)))
        if len(sig.output_forms) >= 64:
            sig.output_forms.clear()
        forms = sig.output_forms[num_parallel] = tuple(forms)
    return forms


class _Overlay(dict):
    """A call's refinements of split points over the recorded fixed points.

    Reads fall through to the buffers' ``fixed`` points (or, for the call's
    new outputs, the points of a fresh ``[num_parallel] + shape`` buffer);
    writes stay here until the call is committed.
    """

    def __init__(self, buffers, output_forms, first):
        super().__init__()
        self._buffers, self._first = buffers, first
        self._forms = output_forms  # the call's _output_forms

    def __missing__(self, bid):
        if bid < self._first:
            return self._buffers[bid].fixed
        return list(self._forms[bid - self._first][3])


class _Operand(NamedTuple):
    buffer_id: int
    view: ViewForm
    broadcast: bool
    shape: tuple
    history: tuple


class _Call(NamedTuple):
    kernel: Kernel
    num_parallel: int
    inputs: tuple
    outputs: tuple


class _Signature(NamedTuple):
    """What recording a call reads of its kernel's IR, worked out once per kernel."""

    ir: KernelIR
    in_params: tuple
    out_params: tuple
    out_shapes: tuple
    out_words: int  # words of one instance's outputs
    output_forms: dict  # num_parallel -> _output_forms(...)
    const_words: dict  # field name -> _const_words(field, ir, np) (the eager CPU run's)


def _signature(kernel: Kernel) -> _Signature:
    """``kernel``'s :class:`_Signature`, kept on the kernel (not pickled: see
    :meth:`Kernel.__reduce__`); made again if ``kernel.ir`` was replaced.
    (Each ``in_params`` / ``out_params`` builds its tuple anew: a call read
    them six times.)"""
    sig = kernel.__dict__.get("_recorder_signature")
    if sig is None or sig.ir is not kernel.ir:
        ir = kernel.ir
        outs = ir.out_params
        shapes = tuple(s for _, _, s in outs)
        sig = _Signature(ir, ir.in_params, outs, shapes, sum(math.prod(s) for s in shapes), {},
                         {})
        kernel.__dict__["_recorder_signature"] = sig
    return sig


class Template(NamedTuple):
    """One recorded call in a graph.

    Attributes
    ----------
    compiled : int
        Index into :attr:`ComputationGraph.compiled_kernels`.
    kernel : int
        Index into :attr:`ComputationGraph.kernels`.
    inputs, outputs : tuple of int
        Buffer ids of the In/InOut operands and of the Out/InOut results.
    num_parallel : int
        Parallel instances of the recorded call.
    padded_parallel : int
        Instances the evaluator runs (a power-of-two product).
    broadcast : tuple of bool
        Per input operand.
    """

    compiled: int
    kernel: int
    inputs: tuple
    outputs: tuple
    num_parallel: int
    padded_parallel: int
    broadcast: tuple


class CompiledKernel(NamedTuple):
    """A kernel specialised to operand layouts (see :mod:`~zorch_nb.kernels.graph_codegen`).

    ``in_layouts[k] = (par, offsets)``, ``out_layouts[j] = (par, slots)``.
    """

    kernel: int
    in_layouts: tuple
    out_layouts: tuple


def _frozen_words(values) -> np.ndarray:
    """A read-only uint32 copy (a graph's constants are not the caller's arrays).

    Over an immutable ``bytes`` object: an array that owns its memory can be
    made writeable again with ``setflags``, this one cannot.
    """
    if isinstance(values, np.ndarray) and values.dtype == np.uint32 and \
            isinstance(values.base, bytes):  # frozen already (a graph's own constants)
        return values
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"Argument `constants` must hold integer arrays, not {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 1 << 32):
        raise ValueError("Argument `constants` must hold canonical values (a cast to uint32 "
                         "would wrap these)")
    # (the array made over the bytes directly, not a reshaped view of a flat
    # one: a view's base is that array, and the check above would copy the
    # graph's own constants again every time a graph is rebuilt from them)
    return np.ndarray(arr.shape, dtype=np.uint32, buffer=arr.astype(np.uint32).tobytes())


def _frozen(obj):
    """``obj`` with every list, tuple and named tuple rebuilt as tuples, NumPy
    integers as Python ints: nothing a caller keeps can change a graph later
    (its offsets index the evaluators' buffers unchecked)."""
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_frozen(v) for v in obj))
    if isinstance(obj, (tuple, list)):
        return tuple(_frozen(v) for v in obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


#: ``tuple(range(n))`` for the ranks a view's base can have (its axes are >= 2 long)
_IDENTITY_PERMS = tuple(tuple(range(n)) for n in range(65))


def _unpermuted(view: ViewForm) -> bool:
    """Whether ``view`` reads its buffer's elements in their order (reshapes only)."""
    perm = view.perm
    n = len(perm)
    return perm == (_IDENTITY_PERMS[n] if n < len(_IDENTITY_PERMS) else tuple(range(n)))


def _describe(op: _Operand) -> str:
    """An operand's view for a message: its shape, and for a transposed view
    the steps that made it from the buffer, as the user wrote them (the
    view's internal base, a regrouping of the buffer's axes, meant nothing
    to a reader: "[12, 2] (transposed, over [3, 2, 4])" for a [2, 3, 4] buffer)."""
    if _unpermuted(op.view):
        return f"{list(op.shape)}"
    steps = "".join(f".{name}({', '.join(map(str, arg))})" for name, arg in op.history[1:])
    return f"{list(op.shape)} (`{steps}` of its {list(op.history[0][1])})"


def _operand_text(what) -> str:
    """:func:`_describe` of an operand, or an output's shape marked as one."""
    return _describe(what) if isinstance(what, _Operand) else f"{list(what)} (output)"


def _copy_remedy(buffers, bid) -> str:
    """What to do when two uses of buffer ``bid`` cannot share a layout: an
    input's data copied in twice, one buffer per use; else a copy by a kernel
    of one instance.  (Only that decouples them: a parallel copy's output
    takes the tiling of its input, and the buffer's own shape may clash too,
    where its flat view never does.)"""
    if bid < len(buffers) and buffers[bid].source == "input":
        return ("; to use the data both ways, copy it to the device a second time "
                "(copy_to_device: one more input of the graph) for one of the uses")
    return ("; to use the buffer both ways, give one of the calls a copy in the shape it "
            "needs, written by a kernel of one instance (num_parallel=1) that takes the "
            "buffer flat (`.reshape(-1)`)")


def _check_binary_file(fh, mode: str) -> None:
    """Refuse a text-mode file object (a graph is bytes: writing one failed
    with io's "write() argument must be str", reading with a UnicodeDecodeError)."""
    if isinstance(fh, io.TextIOBase):
        raise TypeError(f"Argument `path` must be a file name or a file opened in binary mode "
                        f"(open(..., {mode!r})), not a text file")


class ComputationGraph:
    """A recorded program with its layouts; replay with :func:`run_computation_graph`.

    Attributes
    ----------
    field : str
        Field name (``"koalabear"``, ``"babybear"``).
    kernels : tuple of KernelIR
        The traced kernels, deduplicated.
    compiled_kernels : tuple of CompiledKernel
        Kernels specialised to operand layouts, deduplicated.
    buffer_points : tuple of tuple of int
        Split points of every buffer.
    templates : tuple of Template
        One per recorded call, in order.
    inputs, outputs : tuple of (buffer id, history)
        The graph's inputs (replaced at replay) and outputs, with the views.
    constants : tuple of (buffer id, uint32 array)
        Canonical values of buffers copied to the device but not graph inputs.
    commitments : tuple of bytes
        Merkle root of every padded buffer of the recorded run, over its
        Montgomery words (``v * 2**32 mod p``, little-endian uint32; see
        :func:`~zorch_nb.graph_layout.merkle_root`), not the canonical values.

    A graph is immutable: the generated evaluators index buffers with its
    offsets unchecked, so a graph built by hand (the constructor is public)
    is validated as a decoded file is, once, before its first replay.
    """

    def __init__(self, field, kernels, compiled_kernels, buffer_points, templates, inputs,
                 outputs, constants, commitments):
        set_ = object.__setattr__
        set_(self, "field", field)
        set_(self, "kernels", _frozen(kernels))
        set_(self, "compiled_kernels", _frozen(compiled_kernels))
        set_(self, "buffer_points", _frozen(buffer_points))
        set_(self, "templates", _frozen(templates))
        set_(self, "inputs", _frozen(inputs))
        set_(self, "outputs", _frozen(outputs))
        set_(self, "constants", tuple((_frozen(b), _frozen_words(v)) for b, v in constants))
        # (bytes(5) would be five zero bytes: only bytes-like objects are taken)
        set_(self, "commitments", tuple(bytes(c) if isinstance(c, (bytes, bytearray, memoryview))
                                        else c for c in commitments))
        set_(self, "_validated", False)  # (set by the recorder and by from_bytes)
        set_(self, "_sources", {})  # compiled kernel index -> sources(index)

    def __setattr__(self, name, value):
        raise AttributeError(f"a ComputationGraph is immutable (setting `{name}`); build a "
                             f"new one with ComputationGraph(...)")

    def __delattr__(self, name):
        raise AttributeError(f"a ComputationGraph is immutable (deleting `{name}`)")

    def __reduce__(self):
        # pickle and copy go through the constructor: the copy is frozen and
        # validated before its first replay like any graph built by hand
        return (ComputationGraph, (self.field, self.kernels, self.compiled_kernels,
                                   self.buffer_points, self.templates, self.inputs,
                                   self.outputs, self.constants, self.commitments))

    def _checked(self) -> "ComputationGraph":
        """``self`` after :func:`~zorch_nb.graph_format.validate` (run once)."""
        if not getattr(self, "_validated", False):  # (absent in a pickle of 0.1.0's graphs)
            from .graph_format import validate
            validate(self)
            object.__setattr__(self, "_validated", True)
        return self

    # ---- derived ---------------------------------------------------------
    @property
    def buffer_dims(self) -> tuple:
        """Logical dimensions of every buffer (outer first)."""
        return tuple(dims_of(p) for p in self.buffer_points)

    @property
    def buffer_lengths(self) -> tuple:
        """Logical length (element count) of every buffer."""
        return tuple(p[-1] for p in self.buffer_points)

    @property
    def padded_lengths(self) -> tuple:
        """Length of every padded buffer (a power of two)."""
        # Made once per graph (it is immutable): each replay asked twice, and
        # walking every buffer's points was a quarter of a 10,000-call replay.
        lengths = getattr(self, "_padded_lengths", None)
        if lengths is None:
            lengths = tuple(math.prod(padded_dims(dims_of(p))) for p in self.buffer_points)
            object.__setattr__(self, "_padded_lengths", lengths)
        return lengths

    def sources(self, index: int) -> tuple:
        """``(python_source, cuda_source, name)`` of compiled kernel ``index``
        (an int, ``-len(compiled_kernels) <= index < len(compiled_kernels)``).

        Raises
        ------
        TypeError
            ``index`` is not an integer.
        IndexError
            ``index`` is out of that range.
        """
        # Made once per graph: the key walks the whole layout, and every call
        # of a compiled kernel asked for it (a replay of 1000 calls reading one
        # 16384-element table spent 97% of its time there).
        memo = getattr(self, "_sources", None)  # (absent in a pickle of 0.1.0's graphs)
        if memo is None:
            memo = {}
            object.__setattr__(self, "_sources", memo)
        if type(index) is int and index in memo:  # the replay's path: checked before
            return memo[index]
        count = len(self.compiled_kernels)
        if not is_int(index):
            raise TypeError(f"Argument `index` must be an int (a compiled kernel's position), "
                            f"not {type(index).__name__}")
        if not -count <= index < count:  # (a bare "tuple index out of range" before)
            raise IndexError(f"Argument `index` is {int(index)}, but this graph has "
                             + (f"{count} compiled kernel{'' if count == 1 else 's'} "
                                f"(indices {-count}..{count - 1})" if count else
                                "no compiled kernels"))
        at = int(index) % count
        if at not in memo:
            memo[at] = _sources(self.kernels[self.compiled_kernels[at].kernel],
                                self.compiled_kernels[at])
        return memo[at]

    # ---- serialization ---------------------------------------------------
    def to_bytes(self) -> bytes:
        """Deterministic little-endian encoding (see :mod:`zorch_nb.graph_format`).

        Raises
        ------
        ValueError
            The graph (one built by hand) is not valid; the message says why.
        """
        from .graph_format import graph_to_bytes
        return graph_to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> "ComputationGraph":
        """Decode :meth:`to_bytes` output.

        Raises
        ------
        TypeError
            ``data`` is not bytes-like (``bytes``, ``bytearray``, ``memoryview``).
        ValueError
            ``data`` is not a valid graph (truncated, corrupted, another format or
            version); the message says what is wrong.
        """
        from .graph_format import graph_from_bytes
        return graph_from_bytes(data)

    def save(self, path) -> None:
        """Write :meth:`to_bytes` to ``path``: a file name (str, bytes or
        ``os.PathLike``) or an open binary file.

        The graph is encoded first, and a named file is replaced whole (written
        beside it, then renamed): a graph that cannot be encoded, a full disk
        or a kill mid-write leaves the file as it was.

        Raises
        ------
        TypeError
            ``path`` is neither a file name nor a file object, or is a text-mode file.
        ValueError
            The graph (one built by hand) is not valid (as :meth:`to_bytes`).
        OSError
            The file cannot be written (``FileNotFoundError`` for a missing folder).
        """
        data = self.to_bytes()
        if hasattr(path, "write") and not isinstance(path, (str, bytes, os.PathLike)):
            _check_binary_file(path, "wb")
            path.write(data)
            return
        name = _file_name(path)
        if os.path.exists(name) and not os.path.isfile(name):  # a folder, a device
            with open(name, "wb") as fh:  # (a folder: IsADirectoryError, naming it)
                fh.write(data)
            return
        suffix = f".{os.getpid()}.{threading.get_ident()}.tmp"
        tmp = name + (os.fsencode(suffix) if isinstance(name, bytes) else suffix)
        try:
            try:
                fh = open(tmp, "wb")
            except OSError as exc:  # named after the user's file, not the temporary
                raise type(exc)(exc.errno, exc.strerror, name) from None
            with fh:
                fh.write(data)
            os.replace(tmp, name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise

    @classmethod
    def load(cls, path) -> "ComputationGraph":
        """Read a graph written by :meth:`save` (checked as :meth:`from_bytes`)
        from a file name or an open binary file.

        Raises
        ------
        TypeError
            ``path`` is neither a file name nor a file object, or is a text-mode file.
        ValueError
            The file holds no valid graph (as :meth:`from_bytes`).
        OSError
            The file cannot be read (``FileNotFoundError`` and the like).
        """
        if hasattr(path, "read") and not isinstance(path, (str, bytes, os.PathLike)):
            _check_binary_file(path, "rb")
            return cls.from_bytes(path.read())
        with open(_file_name(path), "rb") as fh:
            return cls.from_bytes(fh.read())

    def __eq__(self, other):
        """Equal serialized forms, apart from the source text of ``assert_eq``
        locations (it only feeds error messages; :meth:`Context.load_computation_graph`
        and kernel deduplication ignore it too).  ``ValueError`` for a graph
        built by hand that is not valid (as :meth:`to_bytes`)."""
        if not isinstance(other, ComputationGraph):
            return False
        from .graph_format import _identity
        keys = []
        for g in (self, other):
            g._checked()
            bare = ComputationGraph(g.field, tuple(_identity(ir) for ir in g.kernels),
                                    g.compiled_kernels, g.buffer_points, g.templates, g.inputs,
                                    g.outputs, g.constants, g.commitments)
            object.__setattr__(bare, "_validated", True)  # (as g, but for the texts)
            keys.append(bare.to_bytes())
        return keys[0] == keys[1]

    __hash__ = None

    def __repr__(self):
        def count(n, what):
            return f"{n} {what}{'' if n == 1 else 's'}"
        return (f"<ComputationGraph {self.field}: {count(len(self.templates), 'call')}, "
                f"{count(len(self.compiled_kernels), 'compiled kernel')}, "
                f"{count(len(self.buffer_points), 'buffer')}>")


def _file_name(path):
    """``os.fspath(path)``; anything but a name is a TypeError: ``open`` takes an
    int (a bool too) as a file descriptor, and would write the graph to stdout
    (or wait on stdin) and then close it."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"Argument `path` must be a file name (str, bytes or os.PathLike) or "
                        f"an open binary file, not {type(path).__name__}")
    return os.fspath(path)


# ------------------------------------------------------------ evaluators ----

class _Memo(collections.OrderedDict):
    """A memo of the ``maxsize`` most recently used entries: a process that
    replays graph after graph of new kernels (a sweep over shapes) kept the
    sources, programs and constants of every one it ever met."""

    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = maxsize

    def get_or_make(self, key, make):
        """The value stored under ``key``, made by ``make()`` (and stored) if none is."""
        try:
            self.move_to_end(key)
            return self[key]
        except KeyError:  # (also a key another thread evicted in between)
            value = make()
            self[key] = value
            while len(self) > self.maxsize:
                self.popitem(last=False)
            return value


#: Kernels whose generated sources, interpreter programs and constants a
#: process keeps (the compiled evaluators themselves stay: Numba never frees
#: machine code, and one compiled again would be loaded a second time).
_MEMO_KERNELS = 256
_SOURCE_CACHE = _Memo(_MEMO_KERNELS)  # skeleton key -> (python source, CUDA source, name)
_PROGRAM_CACHE = _Memo(_MEMO_KERNELS)  # (name, thresholds) -> graph_interp.Program or None
_CONST_WORDS = _Memo(_MEMO_KERNELS)  # (field name, constants) -> Montgomery words (host)


def _plain(obj):
    """Nested tuples of Python ints (the generators' arguments, hashed below)."""
    if isinstance(obj, (tuple, list)):
        return tuple(_plain(v) for v in obj)
    return int(obj)


def _sources(ir: KernelIR, ck: CompiledKernel):
    """``(python source, CUDA source, name)`` of a kernel at its operand layouts.

    Named by a hash of exactly what the generated code depends on -- the nodes,
    the assertion pairs, the outputs and the layouts' skeletons (all but the
    outermost parallel size, see :func:`~zorch_nb.kernels.graph_codegen.skeleton`)
    -- so kernels that differ only in their name, assertion text, constant
    values (runtime arguments) or outer instance count share one evaluator and
    one compile.
    """
    args = _plain((ir.nodes, tuple((a, b) for a, b, _ in ir.asserts), ir.outputs,
                   ck.in_layouts, ck.out_layouts))
    key = args[:3] + (graph_codegen.skeleton(args[3]), graph_codegen.skeleton(args[4]))

    def make():
        name = "k" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        return (graph_codegen.python_source(name, *args), graph_codegen.cuda_source(name, *args),
                name)

    return _SOURCE_CACHE.get_or_make(key, make)


def _program(ir: KernelIR, ck: CompiledKernel, name: str):
    """The interpreter's program of a kernel at its operand layouts (see
    :mod:`~zorch_nb.kernels.graph_interp`), or None where the CPU replay
    unrolls the kernel instead (``graph_interp.interprets``); memoized under
    its evaluator's name (both are fixed by what that name hashes) and the
    thresholds the choice was made with."""
    key = (name, launch_config.GRAPH_CPU_UNROLL_MAX_ROWS,
           launch_config.GRAPH_CPU_INTERPRET_MULS_PER_ACCESS)
    return _PROGRAM_CACHE.get_or_make(key, lambda: graph_interp.program(
        ir.nodes, tuple((a, b) for a, b, _ in ir.asserts), ir.outputs, ck.in_layouts,
        ck.out_layouts) if graph_interp.interprets(ir.nodes, ir.asserts, ir.outputs,
                                                    ck.out_layouts) else None)


def _const_words(F: PrimeField, ir: KernelIR, xp):
    """The Montgomery words of a kernel's constants (at least one word); on the
    host memoized per field and constants (a replay of many small calls
    encoded them once per call), never written by the evaluators."""
    def make():
        return F.encode(np.array([c % F.p for c in ir.consts] or [0], dtype=np.int64), xp=xp)

    if xp is not np:
        return make()
    return _CONST_WORDS.get_or_make((F.params.name, ir.consts), make)


def _run_compiled(F, backend, ir, ck, sources, template, index, ins, outs, out_points):
    py_src, cu_src, name = sources
    n = template.padded_parallel
    xp = _xp(backend)
    consts = _const_words(F, ir, xp)
    fail = xp.zeros(n, dtype=np.uint32)
    if backend == "cpu":
        serial = graph_cpu.use_serial(n, len(ir.nodes))
        program = _program(ir, ck, name)
        if program is not None:
            graph_interp.run_program(program, ins, outs, consts, fail, n, F.params.p,
                                     F.params.mu_neg, serial)
        else:
            fn = graph_cpu.compile_evaluator(py_src, name, serial)
            graph_cpu.run_evaluator(fn, ins, outs, consts, fail, n, F.params.p,
                                    F.params.mu_neg, serial)
    else:
        kernels = _backend.kernels_for("cupy", "graph")
        kernels.run_evaluator(F.params.name, cu_src, graph_codegen.cuda_symbol(name), ins,
                              outs, consts, fail, n)
    fail = _to_host(fail)
    if fail.any():
        # As the eager run reports: the first failing assertion in the kernel's
        # order (``fail`` holds each instance's first), at its first instance.
        # Padded instances repeat logical ones, in the same order (the padded
        # index's bit fields, clamped, are the logical digits): the first
        # padded instance names the user's first.
        k = int(fail[fail > 0].min()) - 1
        t = int(np.flatnonzero(fail == k + 1)[0])
        j = logical_instance(out_points, template.num_parallel, ir.out_params[0][2], t)
        x, y = _assert_sides(F, xp, ir, ck, ins, consts, k, t)
        raise ValueError(f"assert_eq failed in kernel `{ir.name}` ({ir.asserts[k][2]}) at "
                         f"instance {j} of {template.num_parallel} (call {index}; padded "
                         f"instance {t} of {n}): {x} != {y}")


def _assert_sides(F, xp, ir, ck, ins, consts, k: int, t: int):
    """Both sides of assertion ``k`` at padded instance ``t``, decoded.

    The evaluators report only which assertion failed where (a side buffer as
    wide as the grid would cost every replay memory), so the failure path
    recomputes that one instance on the host with Python ints, from the same
    input words the evaluator read (a gather of a few elements, not a copy of
    the buffers).
    """
    x, y = ir.asserts[k][0], ir.asserts[k][1]
    top = max(x, y)
    where: dict = {}
    for node, (op, a, b) in enumerate(ir.nodes[:top + 1]):
        if op == graph_codegen.OP_LOAD:
            par, offsets = ck.in_layouts[a]
            where.setdefault(a, []).append((node, graph_codegen.instance_base(par, t)
                                            + int(offsets[b])))
    loaded = {}
    for a, pairs in where.items():
        idx = np.array([i for _, i in pairs], dtype=np.int64)
        got = _to_host(ins[a][xp.asarray(idx)])
        loaded.update((node, int(w)) for (node, _), w in zip(pairs, got))
    p, r_inv = F.p, F.params.r_inv
    words = [int(c) for c in _to_host(consts)]
    v = [0] * (top + 1)
    for node, (op, a, b) in enumerate(ir.nodes[:top + 1]):
        if op == graph_codegen.OP_LOAD:
            v[node] = loaded[node]
        elif op == graph_codegen.OP_CONST:
            v[node] = words[a]
        elif op == graph_codegen.OP_ADD:
            v[node] = (v[a] + v[b]) % p
        elif op == graph_codegen.OP_SUB:
            v[node] = (v[a] - v[b]) % p
        elif op == graph_codegen.OP_MUL:
            v[node] = v[a] * v[b] * r_inv % p
        else:
            v[node] = -v[a] % p
    return v[x] * r_inv % p, v[y] * r_inv % p


# ------------------------------------------------------- eager evaluation ----

class _Step(NamedTuple):
    """One IR node of :meth:`Context._evaluate`'s walk (see :func:`_eval_plan`)."""

    node: int
    code: int
    a: int
    b: object      # an OP_LOAD's element index into its operand's param shape, else int
    contiguous: bool  # an OP_LOAD read by field operations: copied out of its strided column once
    checks: tuple  # assertions whose two values exist from this node on
    slots: tuple   # (output, column) pairs holding this node
    free: tuple    # nodes read for the last time here
    free_operands: tuple  # operands loaded for the last time here


def _eval_plan(ir: KernelIR) -> tuple:
    """The nodes :meth:`Context._evaluate` computes, in order, with their liveness.

    Only the nodes the outputs and assertions need are computed.  Outputs are
    written and assertions checked as soon as their values exist, so a node
    lives until its last consumer reads it and no longer: the peak memory of a
    call follows the values alive at once, not the length of the kernel.
    """
    nodes = ir.nodes
    binary = (graph_codegen.OP_ADD, graph_codegen.OP_SUB, graph_codegen.OP_MUL)

    def reads(code, a, b):
        return (a, b) if code in binary else (a,) if code == graph_codegen.OP_NEG else ()

    needed = [False] * len(nodes)
    for i in [i for ids in ir.outputs for i in ids] + [v for x, y, _ in ir.asserts
                                                        for v in (x, y)]:
        needed[i] = True
    for i in range(len(nodes) - 1, -1, -1):
        if needed[i]:
            for j in reads(*nodes[i]):
                needed[j] = True
    last = list(range(len(nodes)))  # the last step reading each node
    consumed = [False] * len(nodes)
    last_load: dict = {}
    for i, (code, a, b) in enumerate(nodes):
        if needed[i]:
            for j in reads(code, a, b):
                last[j], consumed[j] = i, True
            if code == graph_codegen.OP_LOAD:
                last_load[a] = i
    checks: dict = {}
    for k, (x, y, _) in enumerate(ir.asserts):
        at = max(x, y)
        checks.setdefault(at, []).append(k)
        last[x], last[y] = max(last[x], at), max(last[y], at)
    slots: dict = {}
    for o, ids in enumerate(ir.outputs):
        for c, i in enumerate(ids):
            slots.setdefault(i, []).append((o, c))
    free: dict = {}
    for i in range(len(nodes)):
        if needed[i]:
            free.setdefault(last[i], []).append(i)
    free_operands: dict = {}
    for a, i in last_load.items():
        free_operands.setdefault(i, []).append(a)
    in_shapes = [pshape for _, _, pshape in ir.in_params]
    steps = []
    for i, (code, a, b) in enumerate(nodes):
        if not needed[i]:
            continue
        if code == graph_codegen.OP_LOAD:
            b = tuple(int(v) for v in np.unravel_index(b, in_shapes[a])) if in_shapes[a] else ()
        steps.append(_Step(i, code, a, b, consumed[i], tuple(checks.get(i, ())),
                           tuple(slots.get(i, ())), tuple(free.get(i, ())),
                           tuple(free_operands.get(i, ()))))
    return tuple(steps)


#: Kernel -> (its IR, plan): computed once per kernel, dropped with it.
_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _plan_of(kernel: Kernel) -> tuple:
    ir = kernel.ir
    entry = _PLANS.get(kernel)
    if entry is None or entry[0] is not ir:  # `ir` is an attribute: check it is the same
        entry = (ir, _eval_plan(ir))
        _PLANS[kernel] = entry
    return entry[1]


#: Whether the eager run of a CPU call interprets the kernel in one call
#: (:meth:`Context._evaluate_interpreted`) rather than walking its nodes;
#: the tests switch it off to check the walk too.
_EAGER_INTERPRETER = True
#: Kernel -> (its IR, {broadcast flags: interpreter program of the eager layouts}).
_EAGER_PROGRAMS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _eager_program(kernel: Kernel, broadcast: tuple):
    """The interpreter's program of ``kernel`` over contiguous operands: instance
    ``t`` of a per-instance operand of ``e`` elements starts at word ``t * e``,
    a broadcast operand at word 0, an output of ``e`` elements at ``t * e``."""
    ir = kernel.ir
    entry = _EAGER_PROGRAMS.get(kernel)
    if entry is None or entry[0] is not ir:  # `ir` is an attribute: check it is the same
        entry = (ir, {})
        _EAGER_PROGRAMS[kernel] = entry
    prog = entry[1].get(broadcast)
    if prog is None:
        # (the outermost term's mask is fixed, graph_codegen.OUTER_MASK: its
        # log2 count, 0 here, is never read)
        ins = [((() if flag else ((0, math.prod(s)),)), tuple(range(math.prod(s))))
               for (_, _, s), flag in zip(ir.in_params, broadcast)]
        outs = [(((0, len(ids)),), tuple((e, e) for e in range(len(ids))))
                for ids in ir.outputs]
        prog = graph_interp.program(ir.nodes, tuple((a, b) for a, b, _ in ir.asserts),
                                    ir.outputs, ins, outs)
        entry[1][broadcast] = prog
    return prog


# ---------------------------------------------------------------- context ----

#: Every Context alive, for the fork hooks below.
_LIVE_CONTEXTS = weakref.WeakSet()


class _InUseAtFork:
    """The lock of a Context, in a forked child, that another thread held at the
    fork: the record may be half-written, so every locked method raises."""

    def __enter__(self):
        raise RuntimeError("This graph Context was in use by another thread when the "
                           "process forked, so its record may be half-written; create a "
                           "new Context in the child process")

    def __exit__(self, *exc):
        return False

    def acquire(self, blocking=True):  # (a later fork from the child: still in use)
        return False


#: Per forking thread (two threads may fork at once): the Contexts whose
#: locks its fork took, and those another thread held.
_FORKING = threading.local()


def _before_fork():
    # Take every idle Context's lock, so that none is mid-call in the child;
    # one held by another thread is noted instead (waiting could deadlock).
    # The snapshot is one C-level copy of the WeakSet's references: iterating
    # the WeakSet itself fails when another thread adds a Context meanwhile.
    taken, busy = [], []
    for ref in list(_LIVE_CONTEXTS.data):
        ctx = ref()
        if ctx is not None:
            (taken if ctx._lock.acquire(blocking=False) else busy).append(ctx)
    _FORKING.taken, _FORKING.busy = taken, busy


def _after_fork(child: bool):
    taken, busy = getattr(_FORKING, "taken", ()), getattr(_FORKING, "busy", ())
    _FORKING.taken = _FORKING.busy = ()
    for ctx in taken:  # (the forking thread is the owner in the child too)
        ctx._lock.release()
    if child:
        for ctx in busy:
            ctx._lock = _InUseAtFork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=lambda: _after_fork(False),
                        after_in_child=lambda: _after_fork(True))


class Context:
    """Records kernel calls on device buffers.

    Parameters
    ----------
    field : PrimeField or str, optional
        ``KoalaBear`` (default) or ``BabyBear``, or its name as a graph file
        records it (``"koalabear"``, any case).
    backend : {None, "cpu", "cupy"}
        Where buffers live and calls run eagerly: ``None``/``"cpu"`` NumPy and
        Numba, ``"cupy"`` CuPy on the GPU.

    Raises
    ------
    ValueError
        ``field`` is a string naming no known field, or ``backend`` is not one of
        ``None``, ``"cpu"``, ``"cupy"``.
    TypeError
        ``field`` is neither such a string nor ``KoalaBear``/``BabyBear``.
    ImportError
        ``backend="cupy"`` where CuPy is not installed.

    Notes
    -----
    With ``backend="cupy"`` the buffers live on the GPU that is CuPy's
    current device when the Context is made; its methods run there,
    whichever device is current when they are called.

    Calls evaluate at once (results are visible through :meth:`copy_to_host`)
    with a vectorized interpretation of the kernel IR.  The padded layouts are
    decided when the graph is built (:meth:`generate_computation_graph`, no
    compilation there); :func:`run_computation_graph` generates and compiles
    the evaluators of those layouts on first use, memoized by the generated
    code (which depends on the nodes, assertions, outputs and layouts only:
    kernels differing in constants share one), and the CPU evaluators are
    also cached on disk under ``$ZORCH_NB_CACHE_DIR``.

    A Context may be shared by threads: its methods hold a per-Context lock,
    so calls on one Context run one at a time and the recording equals some
    serial order of them (record on separate Contexts to run calls in
    parallel; :class:`Handle` views touch no shared state).  A call
    interrupted (``KeyboardInterrupt``) leaves the Context as it was before
    the call or with the whole call recorded.  In a child process forked
    while another thread held the Context's lock (inside a method, while it
    reads or writes the record: ``copy_to_host`` holds it only to look the
    buffer up), the Context raises ``RuntimeError`` (its record may be
    half-written); one whose lock was free at the fork works on in the
    child.  A Context holds live buffers and is not pickled:
    send its graph (:meth:`generate_computation_graph`, ``to_bytes``).
    """

    def __init__(self, field=KoalaBear, backend=None):
        if isinstance(field, str):
            if field.lower() not in FIELDS_BY_NAME:
                raise ValueError(f"Argument `field` must name one of "
                                 f"{sorted(FIELDS_BY_NAME)}, not {field!r}")
            field = FIELDS_BY_NAME[field.lower()]
        if not isinstance(field, PrimeField) or field.params.name not in FIELDS_BY_NAME:
            raise TypeError(f"Argument `field` must be KoalaBear or BabyBear, not "
                            f"{field!r}{_stale_field_hint(field)}")
        self.field = field
        self.backend = _check_backend(backend)
        self._xp = _xp(self.backend)
        self._device = _backend.current_device() if self.backend == "cupy" else None
        self._buffers: list = []
        self._calls: list = []
        self._quiet_calls: set = set()  # see _fixed_point
        # Reentrant, so a method holding it may call another public one.
        self._lock = threading.RLock()
        _LIVE_CONTEXTS.add(self)

    def __repr__(self):
        with self._lock:
            nbuf, ncall = len(self._buffers), len(self._calls)
        return (f"<zorch_nb graph Context: {self.field.name}, backend "
                f"{self.backend or 'cpu'}, {nbuf} buffer{'s' * (nbuf != 1)}, {ncall} "
                f"call{'s' * (ncall != 1)} recorded>")

    def __reduce__(self):
        raise TypeError("A graph Context holds live buffers and cannot be pickled; pickle "
                        "or send its graph instead (generate_computation_graph(...), whose "
                        "to_bytes() is a portable file)")

    def _on_device(self):
        """The Context's GPU as the current device, where it is not already
        (its buffers live there: the field kernels refuse them elsewhere)."""
        if self._device is None or self._device == _backend.current_device():
            return contextlib.nullcontext()
        return self._xp.cuda.Device(self._device)

    # ---- buffers -----------------------------------------------------------
    def _new_buffer(self, values, shape) -> Handle:
        """Record a copied-in buffer (one append: an interruption adds it or not)."""
        n = int(values.size)
        bid = len(self._buffers)
        self._buffers.append(_Buffer(n, values, "input", shape, [1, n] if n > 1 else [1]))
        return Handle(self, bid, shape, initial_view(shape), (("reshape", tuple(shape)),))

    def _own(self, h, name) -> Handle:
        if not isinstance(h, Handle):
            raise TypeError(f"Argument `{name}` must be a graph Handle (from copy_to_device "
                            f"or call_kernel), not {type(h).__name__}")
        if h._ctx is not self:
            raise ValueError(f"Argument `{name}` belongs to another Context")
        return h

    def copy_to_device(self, ints, *, reduce: bool = False) -> Handle:
        """Copy canonical integers (any shape, at least one element) into a new buffer.

        Values, not Montgomery words: the field ops' words (``F.mul`` results)
        go through :meth:`~zorch_nb.fields.PrimeField.decode` first, or they
        are read as the integers they spell.

        Parameters
        ----------
        ints : array_like of int
            Values in ``[0, p)``: a Python int, nested lists, or an integer NumPy
            or CuPy array, of any shape with at least one element.
        reduce : bool, optional
            Reduce any integer (negative or ``>= p``) modulo ``p`` instead of
            raising, as in :meth:`~zorch_nb.fields.PrimeField.encode`.

        Returns
        -------
        Handle
            A view of the new buffer, in the shape of ``ints``.

        Raises
        ------
        ValueError
            ``ints`` is ragged or has no element, or, without ``reduce``, holds a
            value outside ``[0, p)`` (the message names its index).
        TypeError
            ``ints`` holds non-integers (floats, bools, strings), or ``reduce`` is
            not a bool.
        """
        try:
            shape = tuple(int(d) for d in np.shape(ints))
        except ValueError:  # NumPy's "inhomogeneous shape"
            raise ValueError("Argument `ints` must be a rectangular (non-ragged) array of "
                             "integers") from None
        if int(np.prod(shape, dtype=np.int64)) == 0:
            raise ValueError(f"Argument `ints` must hold at least one element, not shape {shape}")
        with self._on_device():
            words = self.field.encode(_to_host(ints) if not isinstance(ints, np.ndarray)
                                      and hasattr(ints, "get") else ints, xp=self._xp,
                                      reduce=reduce)
        with self._lock:
            return self._new_buffer(words.reshape(-1), shape)

    def copy_to_host(self, handle) -> np.ndarray:
        """Canonical values (uint32 NumPy array) of ``handle`` in its view's shape.

        Values, not Montgomery words: :meth:`~zorch_nb.fields.PrimeField.encode`
        them before passing them to a field op (which reads words).

        Parameters
        ----------
        handle : Handle
            A view from this Context.

        Returns
        -------
        numpy.ndarray
            uint32, of shape ``handle.shape`` (on the host, whatever the backend).

        Raises
        ------
        TypeError
            ``handle`` is not a :class:`Handle`.
        ValueError
            ``handle`` belongs to another Context.
        """
        h = self._own(handle, "handle")
        with self._lock:
            values = self._buffers[h.buffer_id].values
        # Buffer values are never written after they are recorded: read them unlocked.
        with self._on_device():
            return _to_host(self.field.decode(apply_history(values, h._history).copy()))

    # ---- calls -------------------------------------------------------------
    def _merge(self, pending, bid, points, op):
        cur = pending.get(bid, self._buffers[bid].points)
        merged = _merge_points(cur, points)
        if merged is None:
            desc = _describe(op)
            for used, pts in self._buffers[bid].uses:
                if _merge_points(pts, points) is None:
                    raise ValueError(
                        f"illegal shape operation: buffer {bid} is used as {used} and as "
                        f"{desc}; their split points {list(pts)} and {list(points)} do not "
                        f"divide one another" + _copy_remedy(self._buffers, bid))
            raise ValueError(f"illegal shape operation: buffer {bid} used as {desc} clashes "
                             f"with its layout so far (split points {list(cur)})"
                             + _copy_remedy(self._buffers, bid))
        pending[bid] = merged

    def call_kernel(self, kernel, num_parallel, *inputs) -> tuple:
        """Run ``kernel`` over ``num_parallel`` instances and record the call.

        A refused call (any exception below) is not recorded; the Context stays
        usable.

        Parameters
        ----------
        kernel : Kernel
        num_parallel : int
            Number of parallel instances (>= 1).
        *inputs : Handle
            One per In/InOut parameter, in declaration order.  A view of the
            parameter's shape is broadcast to every instance; a view of shape
            ``[num_parallel] + shape`` gives each instance its own slice.

        Returns
        -------
        tuple of Handle
            Fresh buffers, one per Out/InOut parameter in declaration order,
            of shape ``[num_parallel] + shape``.

        Raises
        ------
        ValueError
            A handle of another Context, wrong handle shapes, ``num_parallel``
            below 1 or at least ``2**40``, or ``assert_eq`` failing on these values.
        ValueError
            "illegal shape operation": a view needing a copy (a transposed view regrouped),
            or views that cannot agree on a layout with each other or with the recorded
            calls (split points only get refined, so no later graph could be built).
        TypeError
            Not a kernel, a non-integer ``num_parallel``, the wrong number
            of handles, or an input that is not a :class:`Handle`.
        MemoryError
            The call's outputs cannot fit in this machine's memory (CPU).
        """
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Argument `kernel` must be a @kernel-decorated function, "
                            f"not {type(kernel).__name__}")
        if type(num_parallel) is not int and not is_int(num_parallel):
            raise TypeError(f"Argument `num_parallel` must be a positive integer, not "
                            f"{type(num_parallel).__name__} {num_parallel!r}")
        if num_parallel < 1:
            raise ValueError(f"Argument `num_parallel` must be a positive integer, "
                             f"not {num_parallel!r}")
        num_parallel = int(num_parallel)
        sig = _signature(kernel)
        ir = sig.ir
        if num_parallel >= 1 << _MAX_LOG2:
            raise ValueError(f"Argument `num_parallel` must be below 2**{_MAX_LOG2} (a graph "
                             f"file's limit on instances), not {num_parallel}")
        # the eager outputs alone, before NumPy's own "array is too big" or a
        # MemoryError that names nothing
        need = 4 * num_parallel * sig.out_words
        have = _backend.physical_memory() if self.backend == "cpu" else None  # (CuPy: its own OOM)
        if have is not None and need > have:
            raise MemoryError(f"Argument `num_parallel` = {num_parallel}: the call's outputs "
                              f"need {need / 2**30:.1f} GiB; this machine has "
                              f"{have / 2**30:.1f} GiB of memory")
        in_params = sig.in_params
        if len(inputs) != len(in_params):
            raise TypeError(f"kernel `{ir.name}` takes {len(in_params)} input handle(s) "
                            f"({', '.join(n for n, _, _ in in_params)}), not {len(inputs)}")
        if self._device is None:  # (_on_device() would be a nullcontext)
            with self._lock:
                return self._record_call(kernel, sig, num_parallel, inputs)
        with self._lock, self._on_device():
            return self._record_call(kernel, sig, num_parallel, inputs)

    def _record_call(self, kernel, sig, num_parallel, inputs) -> tuple:
        ir = sig.ir
        operands, op_uses = [], []
        pending: dict = {}
        for (pname, kind, pshape), h in zip(sig.in_params, inputs):
            h = self._own(h, pname)
            par_shape = (num_parallel,) + pshape
            if h.shape == pshape and kind == "in":
                broadcast = True
            elif h.shape == par_shape:
                broadcast = False
            else:
                accepted = (f"{list(par_shape)} (parallel)" if kind == "inout" else
                            f"{list(pshape)} (broadcast) or {list(par_shape)} (parallel)")
                one = (f" (one instance: `.reshape({', '.join(map(str, par_shape))})`)"
                       if num_parallel == 1 else "")
                raise ValueError(f"Argument `{pname}` of kernel `{ir.name}` must have shape "
                                 f"{accepted}, not {list(h.shape)}"
                                 + (f"; an InOut parameter cannot be broadcast{one}"
                                    if kind == "inout" and h.shape == pshape else ""))
            if h._view.irregular:
                # (an elementwise copy would not do: its output takes the input's tiling)
                raise ValueError(f"illegal shape operation: argument `{pname}` of kernel "
                                 f"`{ir.name}`: {h._view.irregular}; regroup it in a kernel "
                                 f"instead: one instance (num_parallel=1) taking the view "
                                 f"before that reshape whole and writing its elements in the "
                                 f"shape you need")
            op = _Operand(h.buffer_id, h._view, broadcast, h.shape, h._history)
            use = h._use
            if use is None:
                use = h._use = (_describe(op), tuple(_prefix_points(op.view.base)))
            self._merge(pending, h.buffer_id, list(use[1]), op)
            operands.append(op)
            op_uses.append(use)
        fixed = self._fixed_point(kernel, sig, num_parallel, operands, pending)
        values = self._evaluate(kernel, num_parallel, operands, sig)
        # The call succeeded.  Build everything it records first ...
        layouts = {}  # input buffer -> (new points, new uses); the old lists stay intact
        for op, entry in zip(operands, op_uses):
            points, uses = layouts.get(op.buffer_id, (pending[op.buffer_id],
                                                     self._buffers[op.buffer_id].uses))
            layouts[op.buffer_id] = (points, uses if entry in uses else uses + [entry])
        first, call_index = len(self._buffers), len(self._calls)
        outs, new_buffers = [], []
        for (shape, view, history, points, use), vals in zip(_output_forms(sig, num_parallel),
                                                            values):
            h = Handle(self, first + len(outs), shape, view, history, use)
            new_buffers.append(_Buffer(int(vals.size), vals, call_index, shape,
                                       list(points), use))
            outs.append(h)
        call = _Call(kernel, num_parallel, tuple(operands), tuple(range(first, first + len(outs))))
        # ... then change the Context in three steps, undone if an interruption
        # (Ctrl-C) lands between them: a buffer whose call was never recorded, or
        # split points no recorded call asked for, would break every later graph.
        for j, buf in enumerate(new_buffers):
            buf.fixed = fixed.get(first + j, buf.points)
            buf.fixed_by = call_index if first + j in fixed else None
            buf.calls = [call_index]
        parallel = {op.buffer_id for op in operands if not op.broadcast}
        touched = sorted(b for b in parallel | set(fixed) if b < first)
        saved = [(self._buffers[bid], self._buffers[bid].points, self._buffers[bid].uses,
                  self._buffers[bid].fixed, self._buffers[bid].fixed_by,
                  len(self._buffers[bid].calls))
                 for bid in sorted(set(layouts) | set(touched))]
        try:
            for bid, (points, uses) in layouts.items():
                self._buffers[bid].points, self._buffers[bid].uses = points, uses
            for bid in touched:
                buf = self._buffers[bid]
                if bid in fixed and list(fixed[bid]) != list(buf.fixed):
                    buf.fixed, buf.fixed_by = fixed[bid], call_index
                if bid in parallel and (not buf.calls or buf.calls[-1] != call_index):
                    buf.calls.append(call_index)  # O(1): calls come in ascending order
            self._buffers.extend(new_buffers)
            self._calls.append(call)
        except BaseException:
            for buf, points, uses, fixed_points, fixed_by, ncalls in saved:
                buf.points, buf.uses, buf.fixed, buf.fixed_by = points, uses, fixed_points, fixed_by
                del buf.calls[ncalls:]
            del self._buffers[first:], self._calls[call_index:]
            raise
        return tuple(outs)

    def _fixed_point(self, kernel, sig, num_parallel, operands, pending) -> dict:
        """The recorded calls' fixed point (:meth:`_propagate`) with this call added.

        Starts from every buffer's ``fixed`` points (the fixed point of the
        calls so far), merges this call's views in and propagates from this
        call -- only calls touching a changed buffer are looked at again.
        Returns ``{buffer: new fixed points}`` (the call's outputs included)
        to commit; a clash raises ``ValueError`` and the call is refused,
        because split points only ever get refined: a clash now would stop
        every later :meth:`generate_computation_graph` of this Context
        (``a.reshape(6)`` beside ``a.T.reshape(6)`` splits 6 instances as
        2 x 3 and as 3 x 2; calls ``s3(a.reshape(2, 3))`` and
        ``s2(b.reshape(3, 2))`` after ``add(a, b)`` split its instances both
        ways).
        """
        ir = sig.ir
        first, ci = len(self._buffers), len(self._calls)
        out_shapes = sig.out_shapes
        outs = tuple(range(first, first + len(out_shapes)))
        # The operands first, without the overlay: they are recorded buffers
        # (bid < first), so what over[bid] would read is a refinement made here,
        # else the buffer's fixed points (`cur`); `refined` holds what the
        # overlay would (the entries written), `now` what it would read.
        refined: dict = {}
        now: dict = {}
        for op in operands:
            bid = op.buffer_id
            cur = now[bid] if bid in now else self._buffers[bid].fixed
            merged = _merge_points(cur, pending[bid])
            if merged is None:
                buf = self._buffers[bid]
                origin = ""
                if bid < first and buf.fixed_by is not None and list(buf.fixed) == list(cur):
                    k = buf.fixed_by  # (cur may hold this call's own refinement)
                    origin = (f", last refined by call {k} "
                              f"(kernel `{self._calls[k].kernel.ir.name}`)")
                raise ValueError(f"illegal shape operation: buffer {bid} used as "
                                 f"{_describe(op)} clashes with the layout the recorded calls "
                                 f"fixed for it (split points {list(cur)}{origin}"
                                 + (f", through calls {_call_list(buf.calls)}" if buf.calls
                                    else "")
                                 + "); the call was not recorded"
                                 + _copy_remedy(self._buffers, bid))
            if list(merged) != list(cur):
                cur = refined[bid] = merged
            now[bid] = cur
        pushed = {ci}
        for bid in refined:  # (users(bid) below, less ci: in already)
            pushed.update(self._buffers[bid].calls)
        # A call whose views, over buffers with the same points, were already
        # found to change nothing changes nothing again (what the call
        # propagates depends on its views and their buffers' points, not on
        # which buffers): the common case of a program calling one kernel on
        # many buffers of one layout costs no propagation.
        quiet = (num_parallel, tuple([(op.view, op.broadcast, tuple(now[op.buffer_id]))
                                      for op in operands]), out_shapes)
        if len(pushed) == 1 and quiet in self._quiet_calls:
            return dict(refined)  # (what the overlay holds)
        mine = {op.buffer_id for op in operands if not op.broadcast} | set(outs)

        def users(bid):  # an iterator: copying a long list per call was quadratic
            old = self._buffers[bid].calls if bid < first else ()
            return itertools.chain(old, (ci,) if bid in mine else ())

        call = _Call(kernel, num_parallel, tuple(operands), outs)
        over = _Overlay(self._buffers, _output_forms(sig, num_parallel), first)
        over.update(refined)
        heap = sorted(pushed)
        changed = False
        while heap:
            cj = heapq.heappop(heap)
            pushed.discard(cj)
            try:
                bid = self._propagate_call(over, cj, call if cj == ci else self._calls[cj])
            except ValueError as exc:
                text = str(exc).split("; every recorded call")[0]
                raise ValueError(text + ("; the call was not recorded" if cj == ci else
                                         f"; recording call {ci} (kernel `{ir.name}`) made "
                                         f"this clash, so it was not recorded")) from None
            if bid is not None:
                changed = True
                for ck in users(bid):  # includes cj: it may split further
                    if ck not in pushed:
                        pushed.add(ck)
                        heapq.heappush(heap, ck)
        if not changed and len(over) == 0:
            self._quiet_calls.add(quiet)
        return dict(over)

    def _evaluate(self, kernel: Kernel, n: int, operands, sig) -> list:
        """The call's outputs, flat ``(n * elements,)`` each (logical, unpadded).

        On the CPU the graph interpreter runs the whole kernel in one call
        (:func:`_evaluate_interpreted`); on CuPy, under ``NUMBA_DISABLE_JIT``
        and where an assertion fails (for its message), the IR is walked node
        by node over all instances at once: a node's value has shape
        ``(n,)``, or ``(1,)`` when it is the same for every instance
        (constants, broadcast operands); each is dropped after its last use
        (:func:`_eval_plan`).
        """
        if _EAGER_INTERPRETER and self._xp is np and not _jit_disabled():
            outs = self._evaluate_interpreted(kernel, n, operands, sig)
            if outs is not None:
                return outs
        F, xp, ir = self.field, self._xp, kernel.ir
        ops = []  # each operand as (rows, *param shape): a view where the history allows
        for op, (_, _, pshape) in zip(operands, sig.in_params):
            values = apply_history(self._buffers[op.buffer_id].values, op.history)
            ops.append(values.reshape((1 if op.broadcast else n,) + pshape))
        consts = _const_words(F, ir, xp)
        outs = [xp.empty((n, len(ids)), dtype=np.uint32) for ids in ir.outputs]
        vals: list = [None] * len(ir.nodes)
        wide: dict = {}  # node -> its (1,) value repeated n times, made once for all uses
        failed: dict = {}  # assertion -> (instance, left value, right value)

        def spread(j):
            if j not in wide:
                wide[j] = xp.ascontiguousarray(xp.broadcast_to(vals[j], (n,)))
            return wide[j]

        for step in _plan_of(kernel):
            code, a, b = step.code, step.a, step.b
            if code == graph_codegen.OP_LOAD:
                v = ops[a][(slice(None),) + b]
                if step.contiguous:  # the field operations would copy the strided column per use
                    v = xp.ascontiguousarray(v)
            elif code == graph_codegen.OP_CONST:
                v = consts[a:a + 1]
            elif code == graph_codegen.OP_NEG:
                v = F.neg(vals[a])
            else:
                x, y = vals[a], vals[b]
                if x.shape != y.shape:  # one is (1,): else F broadcasts it anew for every use
                    x, y = (spread(a), y) if x.shape[0] == 1 else (x, spread(b))
                if code == graph_codegen.OP_ADD:
                    v = F.add(x, y)
                elif code == graph_codegen.OP_SUB:
                    v = F.sub(x, y)
                else:
                    v = F.mul(x, y)
            vals[step.node] = v
            for o, c in step.slots:
                outs[o][:, c] = v
            for k in step.checks:
                x, y = vals[ir.asserts[k][0]], vals[ir.asserts[k][1]]
                bad = _to_host(xp.broadcast_to(x != y, (n,)))
                if bad.any():
                    t = int(np.flatnonzero(bad)[0])
                    failed[k] = (t, int(F.decode(x[t % x.shape[0]:][:1])[0]),
                                 int(F.decode(y[t % y.shape[0]:][:1])[0]))
            for j in step.free:
                vals[j] = None
                wide.pop(j, None)
            for j in step.free_operands:
                ops[j] = None
        if failed:  # the first failing assertion in the kernel's order, as documented
            k = min(failed)
            t, x, y = failed[k]
            raise ValueError(f"assert_eq failed in kernel `{ir.name}` ({ir.asserts[k][2]}) at "
                             f"instance {t} of {n}: {x} != {y}")
        return [o.reshape(-1) for o in outs]

    def _evaluate_interpreted(self, kernel: Kernel, n: int, operands, sig):
        """The call's outputs by one run of the graph interpreter
        (:mod:`~zorch_nb.kernels.graph_interp`) over the operands laid out
        contiguously, ``(n, elements)`` (a broadcast one: ``(elements,)``):
        flat outputs as :meth:`_evaluate`'s, or None where an assertion
        fails, for the node walk to name it.

        Node by node, every node cost a field call over all instances (~15 us
        of dispatch for a few instances, a temporary of ``n`` words and a pass
        over memory each for many): ``call_kernel`` of a 7-node kernel (3 of
        them arithmetic) over 6 instances took 104 us (now 65 us), of a
        176-node cube-and-mix kernel over 2^16 instances 15.6 ms (now 2.7 ms).
        """
        F, ir = self.field, kernel.ir
        prog = _eager_program(kernel, tuple([op.broadcast for op in operands]))
        # (a view without a permutation reads its buffer's words in their order)
        ins = [self._buffers[op.buffer_id].values if _unpermuted(op.view)
               else np.ascontiguousarray(apply_history(self._buffers[op.buffer_id].values,
                                                       op.history)).reshape(-1)
               for op in operands]
        outs = [np.empty(n * len(ids), dtype=np.uint32) for ids in ir.outputs]
        fail = np.empty(n, dtype=np.uint32)  # (every instance's word is written)
        # serial where a replay of the call would be (small work, Numba set to one
        # thread); for at most CPU_SERIAL_WORDS instances, where the node walk's
        # field calls were serial too: recording small calls starts no threading
        # layer (a process that records, then forks workers); and in a child
        # forked after GNU OpenMP started, where a parallel kernel would be
        # refused (the walk recorded a kernel of copies there: no field call)
        serial = (n <= launch_config.CPU_SERIAL_WORDS or graph_cpu.use_serial(n, len(ir.nodes))
                  or cpu_threads.forked_after_gnu_omp())
        consts = sig.const_words.get(F.params.name)
        if consts is None:
            consts = sig.const_words[F.params.name] = _const_words(F, ir, np)
        graph_interp.run_program(prog, ins, outs, consts, fail, n,
                                 F.params.p, F.params.mu_neg, serial)
        if np.count_nonzero(fail):  # (a quarter of fail.any()'s time)
            return None
        return outs

    # ---- graph -------------------------------------------------------------
    def _propagate(self) -> list:
        """Split points of every buffer after the parallel-boundary fixed point.

        Always the lowest-numbered call that can still change something goes
        next (the order of a rescan from call 0 after every change, so the same
        fixed point and the same first clash), but only the calls touching a
        changed buffer are looked at again: linear in the calls, not quadratic.
        """
        points = [list(b.points) for b in self._buffers]
        users: dict = {}
        for ci, call in enumerate(self._calls):
            for bid in {op.buffer_id for op in call.inputs if not op.broadcast} | \
                    set(call.outputs):
                users.setdefault(bid, []).append(ci)
        pending = list(range(len(self._calls)))  # a heap of call indices
        queued = set(pending)
        while pending:
            ci = heapq.heappop(pending)
            queued.discard(ci)
            bid = self._propagate_call(points, ci, self._calls[ci])
            if bid is not None:
                for cj in users[bid]:  # includes ci: it may split further
                    if cj not in queued:
                        queued.add(cj)
                        heapq.heappush(pending, cj)
        return points

    def _propagate_call(self, points, ci, call):
        """Merge the instance splits of one call into its parallel operands.

        Returns the buffer whose split points changed (one at most), or None.
        """
        sig = _signature(call.kernel)
        ir = sig.ir
        # (buffer, view, what the error messages call it: the operand or the output's shape)
        par = [(op.buffer_id, op.view, op) for op in call.inputs if not op.broadcast]
        for bid, (shape, view, *_) in zip(call.outputs, _output_forms(sig, call.num_parallel)):
            par.append((bid, view, shape))
        union = _prefix_points([call.num_parallel])
        seen = []
        for bid, view, what in par:
            dims, first = _first_axis_dims(view, points[bid])
            sizes = tuple(dims[i] for i in first)
            merged = _merge_points(union, _prefix_points(sizes))
            if merged is None:
                sizes_pts = _prefix_points(sizes)
                ob, ow, osz = next((b, w, s) for b, w, s, *_ in seen
                                   if _merge_points(_prefix_points(s), sizes_pts) is None)
                raise ValueError(
                    f"illegal shape operation: call {ci} (kernel `{ir.name}`, "
                    f"{call.num_parallel} instances) has parallel operands buffer {ob} as "
                    f"{_operand_text(ow)} and buffer {bid} as {_operand_text(what)}, whose "
                    f"layouts (fixed by their other uses) split the instances as {list(osz)} "
                    f"and {list(sizes)}; every recorded call belongs to the graph, so record "
                    f"the program again without this combination")
            union = merged
            seen.append((bid, what, sizes, dims, first))
        for bid, what, _, dims, first in seen:
            c = 1
            for i in first:
                inside = [u for u in union if c < u < c * dims[i]]
                if inside:
                    new = points[bid][i] * (inside[0] // c)
                    merged = _merge_points(points[bid], [new])
                    if merged is None:
                        raise ValueError(
                            f"illegal shape operation: buffer {bid} (used as "
                            f"{_operand_text(what)} in call "
                            f"{ci}, kernel `{ir.name}`) cannot be split at {new} to match the "
                            f"other operands; its split points are {points[bid]}"
                            + _copy_remedy(self._buffers, bid))
                    points[bid] = merged
                    return bid
                c *= dims[i]
        return None

    def _specs(self, handles, name, inputs: bool) -> list:
        # (a dict or set of Handles gave its keys, in an order the caller may
        # not expect: refused, as run_computation_graph refuses a dict)
        if isinstance(handles, (dict, set, frozenset, str, bytes)):
            raise TypeError(f"Argument `{name}` must be a sequence of Handles, not "
                            f"{type(handles).__name__}")
        try:
            handles = list(handles)
        except TypeError:
            raise TypeError(f"Argument `{name}` must be a sequence of Handles") from None
        specs = []
        for k, h in enumerate(handles):
            h = self._own(h, f"{name}[{k}]")
            if inputs and self._buffers[h.buffer_id].source != "input":
                raise ValueError(f"Argument `{name}[{k}]` must come from copy_to_device; "
                                 f"buffer {h.buffer_id} is computed by call "
                                 f"{self._buffers[h.buffer_id].source}")
            specs.append((h.buffer_id, h._history))
        if inputs and len({b for b, _ in specs}) != len(specs):
            seen = {}
            for k, (b, _) in enumerate(specs):
                if b in seen:
                    raise ValueError(f"Argument `{name}` names a buffer twice: `{name}"
                                     f"[{seen[b]}]` and `{name}[{k}]` are views of buffer {b} "
                                     f"(each input is one buffer, given once)")
                seen[b] = k
        return specs

    def generate_computation_graph(self, inputs, outputs) -> ComputationGraph:
        """Decide the layouts and build the graph of everything recorded so far.

        Parameters
        ----------
        inputs : sequence of Handle
            Buffers from :meth:`copy_to_device` whose values are supplied anew at
            replay (in this order, in these views).  Other copied buffers become
            constants of the graph.
        outputs : sequence of Handle
            Views returned by :func:`run_computation_graph`.

        Returns
        -------
        ComputationGraph

        Raises
        ------
        TypeError
            ``inputs`` or ``outputs`` is not a sequence of :class:`Handle` (a
            dict or set of them is refused: its order is not the caller's).
        ValueError
            Handles of another Context, an input not from
            :meth:`copy_to_device` or named twice.  (Layout clashes are
            refused by :meth:`call_kernel` when the call is made.)
        """
        with self._lock, self._on_device():
            return self._build(self._specs(inputs, "inputs", True),
                               self._specs(outputs, "outputs", False))

    def _build(self, in_specs, out_specs) -> ComputationGraph:
        from .graph_format import kernel_fingerprint
        # the fixed point kept call by call (_fixed_point; equal to _propagate())
        points = [list(b.fixed) for b in self._buffers]
        kernels, kernel_ids = [], {}
        compiled, compiled_ids = [], {}
        templates = []
        # Calls repeat kernels and operand layouts: each fingerprint, layout and
        # compiled kernel is made once, under a key of the few numbers it
        # depends on (a layout is as long as its operand, and 1000 calls
        # reading one 16384-element table spent 3 s making and hashing them).
        fingerprints, layouts, compiled_keys = {}, {}, {}
        for call in self._calls:
            ir = call.kernel.ir
            if id(ir) not in fingerprints:  # (every ir stays alive in self._calls)
                fingerprints[id(ir)] = kernel_fingerprint(ir)
            fp = fingerprints[id(ir)]
            if fp not in kernel_ids:
                kernel_ids[fp] = len(kernels)
                kernels.append(ir)
            keys = tuple(("in", op.view, tuple(points[op.buffer_id]), op.broadcast, pshape)
                         for op, (_, _, pshape) in zip(call.inputs, ir.in_params)) + \
                tuple(("out", tuple(points[bid]), call.num_parallel, pshape)
                      for bid, (_, _, pshape) in zip(call.outputs, ir.out_params))
            for key in keys:
                if key not in layouts:
                    layouts[key] = (input_layout(*key[1:]) if key[0] == "in"
                                    else output_layout(*key[1:]))
            if (fp, keys) not in compiled_keys:
                ck = CompiledKernel(kernel_ids[fp], tuple(layouts[k] for k in keys
                                                          if k[0] == "in"),
                                    tuple(layouts[k] for k in keys if k[0] == "out"))
                if ck not in compiled_ids:
                    compiled_ids[ck] = len(compiled)
                    compiled.append(ck)
                compiled_keys[fp, keys] = compiled_ids[ck]
            ck = compiled[compiled_keys[fp, keys]]
            padded = 1 << sum(lg for lg, _ in ck.out_layouts[0][0])
            templates.append(Template(compiled_keys[fp, keys], kernel_ids[fp],
                                      tuple(op.buffer_id for op in call.inputs), call.outputs,
                                      call.num_parallel, padded,
                                      tuple(op.broadcast for op in call.inputs)))
        input_ids = {b for b, _ in in_specs}
        constants = [(b, _to_host(self.field.decode(buf.values)))
                     for b, buf in enumerate(self._buffers)
                     if buf.source == "input" and b not in input_ids]
        commitments = [merkle_root(pad(self._xp, buf.values, pts))
                       for buf, pts in zip(self._buffers, points)]
        graph = ComputationGraph(self.field.params.name, kernels, compiled, points, templates,
                                 in_specs, out_specs, constants, commitments)
        object.__setattr__(graph, "_validated", True)  # the recorder's own layouts
        return graph

    def load_computation_graph(self, graph: ComputationGraph, inputs=None,
                               outputs=None) -> tuple:
        """Check that the program recorded here is the one ``graph`` was made from.

        Run the same program (on any input values) in this context first.  The
        layouts, kernels, templates and constants must match.

        Parameters
        ----------
        graph : ComputationGraph
        inputs, outputs : sequence of Handle, optional
            The handles you would pass to :meth:`generate_computation_graph`:
            the graph's inputs and outputs must then be these views, in this
            order.  Without them the graph's own choice is taken, checked only
            to name this recording's buffers (its inputs ones from
            :meth:`copy_to_device`): a graph from elsewhere may then return
            any buffer of the program -- an input, say -- as an output at
            replay.  Pass them to check a graph you did not make.

        Returns
        -------
        tuple of bytes
            The commitments of this run's padded buffers under the graph's
            layout.

        Raises
        ------
        TypeError
            ``graph`` is not a :class:`ComputationGraph`, or ``inputs``/``outputs``
            is not a sequence of :class:`Handle`.
        ValueError
            The recording differs from ``graph`` (naming the first difference),
            ``graph`` (built by hand) is not valid, or ``inputs``/``outputs`` fail
            the checks of :meth:`generate_computation_graph`.
        """
        if not isinstance(graph, ComputationGraph):
            raise TypeError(f"Argument `graph` must be a ComputationGraph, not "
                            f"{type(graph).__name__}")
        graph._checked()  # (a graph built by hand: ids in range before they are used)
        with self._lock, self._on_device():
            expected = [None if h is None else self._specs(h, name, name == "inputs")
                        for h, name in ((inputs, "inputs"), (outputs, "outputs"))]
            return self._load(graph, *expected)

    def _load(self, graph: ComputationGraph, in_specs=None, out_specs=None) -> tuple:
        diff = None
        if graph.field != self.field.params.name:
            diff = f"the graph is over {graph.field}, this context over {self.field.params.name}"
        elif len(graph.buffer_points) != len(self._buffers):
            calls = _first_call_difference(graph, self._calls)
            diff = (f"the graph has {len(graph.buffer_points)} buffers, this recording "
                    f"{len(self._buffers)}" + (f"; first difference: {calls}" if calls else ""))
        else:
            diff = (self._view_difference(graph, "inputs", in_specs)
                    or self._view_difference(graph, "outputs", out_specs))
            for k, (b, _) in enumerate(graph.inputs):
                if diff is None and self._buffers[b].source != "input":
                    diff = f"graph input {k} is buffer {b}, which this recording computes"
        built = None
        if diff is None:
            built = self._build(graph.inputs, graph.outputs)
            diff = _first_difference(graph, built)
        if diff is not None:
            raise ValueError(f"the recorded program does not match the graph: {diff}")
        return built.commitments

    def _view_difference(self, graph, kind: str, specs):
        """Text of the first difference between the graph's ``kind`` views and
        those of the caller's handles (``None`` if equal or none given)."""
        if specs is None:
            return None
        theirs = getattr(graph, kind)
        if len(specs) != len(theirs):
            return f"the graph has {len(theirs)} {kind}, `{kind}` holds {len(specs)} handles"
        for k, ((b, history), (gb, g_history)) in enumerate(zip(specs, theirs)):
            if (b, tuple(history)) != (gb, tuple(g_history)):
                mine = history_shapes(self._buffers[b].length, history)[-1]
                shape = history_shapes(graph.buffer_points[gb][-1], g_history)[-1]
                return (f"graph {kind[:-1]} {k} is buffer {gb} viewed as {list(shape)}, but "
                        f"`{kind}[{k}]` is buffer {b} viewed as {list(mine)}"
                        + (" (through other views)" if (b, mine) == (gb, shape) else ""))
        return None


def _first_call_difference(graph: ComputationGraph, calls) -> str | None:
    """Text of the first call where ``graph`` and a recording's ``calls`` run
    different kernels, or one has a call the other lacks (``None`` if none):
    what to name where their buffers differ in number and no layout compares."""
    from .graph_format import kernel_fingerprint
    for k in range(max(len(graph.templates), len(calls))):
        ours = graph.kernels[graph.templates[k].kernel] if k < len(graph.templates) else None
        theirs = calls[k].kernel.ir if k < len(calls) else None
        if ours is None:
            return f"call {k} (kernel `{theirs.name}`) of this recording is not in the graph"
        if theirs is None:
            return f"call {k} (kernel `{ours.name}`) of the graph is not in this recording"
        if kernel_fingerprint(ours) != kernel_fingerprint(theirs):
            return f"call {k} runs kernel `{ours.name}` in the graph but `{theirs.name}` here"
    return None


def _first_difference(g: ComputationGraph, h: ComputationGraph):
    """Text of the first difference between two graphs (``None`` if equal)."""
    from .graph_format import kernel_fingerprint
    if len(g.templates) != len(h.templates):
        return f"the graph has {len(g.templates)} calls, this recording {len(h.templates)}"
    for b, (p, q) in enumerate(zip(g.buffer_points, h.buffer_points)):
        if p != q:
            return (f"buffer {b} has layout {list(dims_of(p))} (split points {list(p)}) in "
                    f"the graph but {list(dims_of(q))} (split points {list(q)}) here")
    for k, (s, t) in enumerate(zip(g.templates, h.templates)):
        ks, kt = g.kernels[s.kernel], h.kernels[t.kernel]
        if kernel_fingerprint(ks) != kernel_fingerprint(kt):
            return f"call {k} runs kernel `{ks.name}` in the graph but `{kt.name}` here" + (
                "" if ks.name != kt.name else " (same name, different body)")
        for field in Template._fields:
            if field in ("compiled", "kernel"):
                continue
            if getattr(s, field) != getattr(t, field):
                return (f"call {k} (kernel `{ks.name}`) has {field} {getattr(s, field)} in "
                        f"the graph but {getattr(t, field)} here")
        if g.compiled_kernels[s.compiled][1:] != h.compiled_kernels[t.compiled][1:]:
            return f"call {k} (kernel `{ks.name}`) has different operand layouts"

    def view(graph, spec):  # (the layouts are equal by now)
        bid, history = spec
        shape = history_shapes(graph.buffer_points[bid][-1], history)[-1]
        return f"buffer {bid} viewed as {list(shape)}"

    for name in ("inputs", "outputs"):
        ours, theirs = getattr(g, name), getattr(h, name)
        if len(ours) != len(theirs):
            return f"the graph has {len(ours)} {name}, this recording {len(theirs)}"
        for k, (s, t) in enumerate(zip(ours, theirs)):
            if s != t:
                return (f"{name[:-1]} {k} is {view(g, s)} in the graph but {view(h, t)} here"
                        + ("" if view(g, s) != view(h, t) else " (through other reshapes)"))
    if [b for b, _ in g.constants] != [c for c, _ in h.constants]:
        return (f"the constant buffers are {[b for b, _ in g.constants]} in the graph but "
                f"{[c for c, _ in h.constants]} here")
    for (b, v), (_, w) in zip(g.constants, h.constants):
        if not np.array_equal(v, w):
            i = int(np.flatnonzero(v != w)[0]) if v.shape == w.shape else None
            return f"constant buffer {b} holds different values" + (
                "" if i is None else f": element {i} is {int(v[i])} in the graph but "
                                     f"{int(w[i])} here")
    return None


def _dropped_after(graph: ComputationGraph) -> list:
    """``drop[k]``: the buffers no later call reads and no output is, freed after
    call ``k`` (``drop[-1]``: inputs and constants no call reads) when a replay
    keeps no commitments."""
    last = {}
    for ti, t in enumerate(graph.templates):
        for b in t.inputs:
            last[b] = ti
        for b in t.outputs:
            last.setdefault(b, ti)  # (written, never read: dropped at once)
    kept = {b for b, _ in graph.outputs}
    drop = [[] for _ in range(len(graph.templates) + 1)]
    for b in [b for b, _ in graph.inputs] + [b for b, _ in graph.constants]:
        if b not in last and b not in kept:
            drop[-1].append(b)
    for b in kept:
        last.pop(b, None)
    for b, ti in last.items():
        drop[ti].append(b)
    return drop


def _live_words(graph: ComputationGraph, drop) -> int:
    """The most padded words a replay that frees ``drop`` holds at once."""
    lengths = graph.padded_lengths
    placed = {b for b, _ in graph.inputs} | {b for b, _ in graph.constants}
    live = sum(lengths[b] for b in placed)
    peak = live
    live -= sum(lengths[b] for b in drop[-1])
    for t, gone in zip(graph.templates, drop):
        live += sum(lengths[b] for b in t.outputs)
        peak = max(peak, live)
        live -= sum(lengths[b] for b in gone)
    return peak


def _check_host_memory(graph: ComputationGraph, padded: bool, drop=None) -> None:
    """``MemoryError`` up front when a replay cannot fit: a graph file may
    declare buffers of up to 2**40 words, and list one buffer as an output any
    number of times, which an overcommitting OS would grant and then kill the
    process filling.  Counted in words: every padded buffer (all stay alive
    unless ``drop`` frees them; device buffers hashed on the host come there
    for their commitments), every output's decoded values, and the largest of
    what lives for a moment beside them (one output's copy, one call's
    assertion flags) or, with ``padded``, the decoded padded buffers."""
    lengths = graph.padded_lengths
    outputs = [graph.buffer_points[b][-1] for b, _ in graph.outputs]
    passing = max(outputs + [t.padded_parallel for t in graph.templates], default=0)
    held = sum(lengths) if drop is None else _live_words(graph, drop)
    need = 4 * (held + sum(outputs) + max(passing, sum(lengths) if padded else 0))
    have = _backend.physical_memory()
    if have is not None and need > have:
        raise MemoryError(f"replaying this graph needs {need / 2**30:.1f} GiB for its "
                          f"{len(lengths)} padded buffers and {len(outputs)} outputs; this "
                          f"machine has {have / 2**30:.1f} GiB of memory")


def run_computation_graph(graph: ComputationGraph, inputs, backend=None, *,
                          padded: bool = False, reduce: bool = False,
                          commitments: bool = True) -> tuple:
    """Evaluate a saved graph on new inputs, without the program that made it.

    Parameters
    ----------
    graph : ComputationGraph
    inputs : sequence of array_like
        Canonical integers, one array per graph input, in that input's view
        shape.
    backend : {None, "cpu", "cupy"}
        ``None``/``"cpu"``: Numba CPU evaluators; ``"cupy"``: generated CUDA C.
    padded : bool, optional
        Also return every padded buffer (canonical values, NumPy, shaped by
        its padded dimensions) as a third element.  Axes of length 1 are
        not dimensions of a padded layout: a view of shape ``(1, 5)`` lives
        in a buffer of shape ``(8,)``.
    reduce : bool, optional
        Reduce any integer input (negative or ``>= p``) modulo ``p``, as
        :meth:`Context.copy_to_device` does; by default such a value is a
        ValueError naming its input and index.
    commitments : bool, optional
        Hash every padded buffer (the default).  ``False`` skips the hashing
        (most of a replay's time on large buffers) and, unless ``padded``,
        frees each buffer after the last call that reads it: memory then
        grows with the buffers alive at once, not with the number of calls.

    Returns
    -------
    (outputs, commitments) or (outputs, commitments, padded) : tuple
        ``outputs``: NumPy uint32 arrays of canonical values, one per graph
        output in its view shape; ``commitments``: the Merkle root (bytes) of
        every padded buffer of this run, over its Montgomery words (encode
        the ``padded`` values to check one), or ``None`` under
        ``commitments=False``; with ``padded=True`` a third element, every
        padded buffer (see ``padded``).

    Raises
    ------
    ValueError
        Inputs of the wrong number, shape or range, an unknown ``backend``,
        or an ``assert_eq`` that does not hold: the message names the kernel,
        the assertion, the user's instance and both sides' values (as a
        failing eager call does).
    TypeError
        ``graph``, ``inputs`` or a flag of the wrong type.
    MemoryError
        The replay's host buffers need more than the machine's physical
        memory (checked before any is allocated).
    """
    if not isinstance(graph, ComputationGraph):
        raise TypeError(f"Argument `graph` must be a ComputationGraph, not "
                        f"{type(graph).__name__}")
    graph._checked()
    for name, flag in (("reduce", reduce), ("padded", padded), ("commitments", commitments)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"Argument `{name}` must be True or False, not {flag!r}")
    backend = _check_backend(backend)
    xp = _xp(backend)
    F = FIELDS_BY_NAME[graph.field]
    if isinstance(inputs, (dict, str, bytes)) or not hasattr(inputs, "__iter__"):
        raise TypeError(f"Argument `inputs` must be a sequence of arrays (one per graph "
                        f"input), not {type(inputs).__name__}")
    if any(hasattr(inputs, a) for a in ("__array__", "__array_interface__",
                                        "__cuda_array_interface__")):
        # one array (NumPy, CuPy, anything array-like) would be taken row by
        # row as the inputs: almost always a forgotten list around one input
        raise TypeError(f"Argument `inputs` must be a sequence of arrays (one per graph "
                        f"input), not one array of shape {tuple(np.shape(inputs))}; pass a "
                        f"list: [x]" + (", or list(x) to take its rows as the inputs"
                                        if len(graph.inputs) > 1 else ""))
    inputs = list(inputs)
    if len(inputs) != len(graph.inputs):
        n = len(graph.inputs)
        raise ValueError(f"Argument `inputs` must hold {n} array{'' if n == 1 else 's'} (one "
                         f"per graph input), not {len(inputs)}")
    points = graph.buffer_points
    lengths = graph.padded_lengths
    drop = None if commitments or padded else _dropped_after(graph)
    _check_host_memory(graph, bool(padded), drop)
    bufs: list = [None] * len(points)

    def place(bid, history, values, name, reduce=False):
        n = points[bid][-1]
        shape = history_shapes(n, history)[-1]
        if isinstance(values, Handle) or values is None:
            raise TypeError(f"Argument `{name}` must be an array of canonical integers, not "
                            f"{type(values).__name__}" + ("; a replay takes values: pass "
                            "ctx.copy_to_host(handle)" if values is not None else ""))
        _backend.refuse_masked(values, name)  # (np.asarray below would drop the mask)
        try:
            values = np.asarray(_to_host(values) if hasattr(values, "get") else values)
        except ValueError:  # NumPy's "inhomogeneous shape"
            raise ValueError(f"Argument `{name}` must be a rectangular (non-ragged) array of "
                             f"integers") from None
        if values.shape != shape:
            raise ValueError(f"Argument `{name}` must have shape {list(shape)}, "
                             f"not {list(values.shape)}")
        try:
            words = F.encode(values, reduce=reduce)
        except (TypeError, ValueError) as exc:  # encode names its argument `ints`
            # (`ints`, ints[i, j] = ..., and a 0-d input's bare ints = ...)
            msg = re.sub(r"`ints`|\bints(?=\[| = )", lambda m: m[0].replace("ints", name),
                         str(exc))
            if name.startswith("constant"):  # (the graph's own values: no reduce= to suggest)
                msg = msg.split("; pass reduce=True")[0]
            raise type(exc)(msg) from None
        # Undo the view's history on the words themselves: an int64 index array
        # per buffer (arange, scattered through) cost twice the buffer.
        bufs[bid] = pad(xp, xp.asarray(unapply_history(words, history, n)), points[bid])

    for k, ((bid, history), values) in enumerate(zip(graph.inputs, inputs)):
        place(bid, history, values, f"inputs[{k}]", bool(reduce))
    for bid, values in graph.constants:
        place(bid, (("reshape", (points[bid][-1],)),), values, f"constant {bid}")
    for b in drop[-1] if drop else ():
        bufs[b] = None
    for ti, t in enumerate(graph.templates):
        ck = graph.compiled_kernels[t.compiled]
        outs = [xp.empty(lengths[b], dtype=np.uint32) for b in t.outputs]
        _run_compiled(F, backend, graph.kernels[ck.kernel], ck, graph.sources(t.compiled),
                      t, ti, [bufs[b] for b in t.inputs], outs, points[t.outputs[0]])
        for b, o in zip(t.outputs, outs):
            bufs[b] = o
        del outs
        for b in drop[ti] if drop else ():
            bufs[b] = None
    results = []
    for bid, history in graph.outputs:
        words = apply_history(unpad(bufs[bid], points[bid]), history)
        results.append(_to_host(F.decode(words.copy())))
    # (device buffers are hashed there)
    roots = tuple(merkle_root(b) for b in bufs) if commitments else None
    if padded:
        host = [_to_host(b) for b in bufs]
        exported = tuple(F.decode(b).reshape(padded_dims(dims_of(pts)))
                         for b, pts in zip(host, points))
        return tuple(results), roots, exported
    return tuple(results), roots
