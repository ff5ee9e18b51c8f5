"""Binary format of a :class:`~zorch_nb.graph.ComputationGraph` (no pickle).

File layout (all integers little-endian)::

    magic     8 bytes   b"ZORCHGR\\0"
    version   u32       FORMAT_VERSION (1)
    length    u64       payload length in bytes
    payload   length bytes
    checksum  32 bytes  SHA-256 of magic + version + length + payload

The payload is a sequence of fields: ``u8``/``u32``/``u64``/``i64`` scalars,
``str`` (u32 byte count + UTF-8), and arrays (u32 count + packed items).
In order: the field name; the kernels (name, parameters ``(name, kind u8,
shape u64[])``, constants ``i64[]``, node ops ``u8[]`` and operands ``u64[]``
x2, assertions (u32 count, then ``u64``, ``u64``, ``str`` each: the two
nodes and where the assertion is), outputs ``u64[]`` each); the
compiled kernels (kernel index, then per input operand ``par`` = log2 sizes
``u8[]`` + strides ``u64[]`` and offsets ``u64[]``, per output ``par`` and
slot offsets/elements ``u64[]`` x2); the buffers' split points ``u64[]``; the
templates (compiled, kernel, inputs ``u32[]``, outputs ``u32[]``,
num_parallel, padded_parallel, broadcast ``u8[]``); inputs and outputs
(buffer u32 + history: per step op u8 (0 reshape, 1 transpose) + ``u64[]``);
constants (buffer u32 + canonical values ``u32[]``); commitments (32 bytes
each).

Decoding checks the magic, the version, the length and the checksum first,
then every structural invariant the evaluators rely on (indices in range,
layouts inside their padded buffers, each buffer written once before it is
read), so a crafted file can neither crash the process nor run code: the
generated evaluators only ever contain integers taken from validated data.
The checksum catches corruption, not intent: whoever can edit a file can
recompute it, and a well-formed edit (a changed constant, a rewired kernel
call) loads and computes something else.  A graph you did not make can be
checked against your own program (``Context.load_computation_graph``: the
same kernels, layouts and constants as the program recorded there).
"""
from __future__ import annotations

import hashlib
import math
import struct

import numpy as np

from .graph_layout import logical_instance
from .kernels import graph_codegen

__all__ = ["MAGIC", "FORMAT_VERSION", "graph_to_bytes", "graph_from_bytes",
           "kernel_bytes", "kernel_fingerprint"]

MAGIC = b"ZORCHGR\x00"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ")
_KINDS = ("in", "out", "inout")
_HIST = ("reshape", "transpose")
_MAX_LOG2 = graph_codegen.MAX_LOG2  # no padded dimension or buffer beyond 2**40 elements
#: NumPy's limit on array dimensions (32 before 2.0), so on a view's shape.
_MAX_NDIM = 64 if int(np.__version__.split(".")[0]) >= 2 else 32


class _Writer:
    def __init__(self):
        self.parts = []

    def u8(self, v):
        self.parts.append(struct.pack("<B", v))

    def u32(self, v):
        self.parts.append(struct.pack("<I", v))

    def u64(self, v):
        self.parts.append(struct.pack("<Q", v))

    def str(self, s):
        b = s.encode("utf-8")
        self.u32(len(b))
        self.parts.append(b)

    def arr(self, values, dtype):
        a = np.ascontiguousarray(np.asarray(values, dtype=dtype).reshape(-1))
        self.u32(a.size)
        self.parts.append(a.tobytes())

    def raw(self, b):
        self.parts.append(bytes(b))

    def bytes(self):
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def _take(self, n, what):
        if n > len(self.data) - self.pos:
            raise ValueError(f"corrupted graph: payload ends inside {what} (byte {self.pos})")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u8(self, what):
        return self._take(1, what)[0]

    def u32(self, what):
        return struct.unpack("<I", self._take(4, what))[0]

    def u64(self, what):
        return struct.unpack("<Q", self._take(8, what))[0]

    def str(self, what):
        n = self.u32(what)
        try:
            return self._take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"corrupted graph: {what} is not UTF-8") from None

    def arr(self, dtype, what):
        n = self.u32(what)
        size = np.dtype(dtype).itemsize
        return np.frombuffer(self._take(n * size, what), dtype=dtype).copy()

    def count(self, what, limit=1 << 24):
        n = self.u32(what)
        if n > limit or n > len(self.data) - self.pos:
            raise ValueError(f"corrupted graph: implausible count {n} of {what}")
        return n


# ---------------------------------------------------------------- kernels ---

def _write_kernel(w: _Writer, ir) -> None:
    w.str(ir.name)
    w.u32(len(ir.params))
    for name, kind, shape in ir.params:
        w.str(name)
        w.u8(_KINDS.index(kind))
        w.arr(shape, "<u8")
    w.arr(ir.consts, "<i8")
    nodes = np.array(ir.nodes, dtype=np.int64).reshape(-1, 3)
    w.arr(nodes[:, 0], "<u1")
    w.arr(nodes[:, 1], "<u8")
    w.arr(nodes[:, 2], "<u8")
    w.u32(len(ir.asserts))
    for x, y, where in ir.asserts:
        w.u64(x)
        w.u64(y)
        w.str(where)
    w.u32(len(ir.outputs))
    for ids in ir.outputs:
        w.arr(ids, "<u8")


def _read_kernel(r: _Reader):
    from .graph_trace import KernelIR
    name = r.str("kernel name")
    params = []
    for _ in range(r.count("kernel parameters")):
        pname = r.str("parameter name")
        kind = r.u8("parameter kind")
        if kind >= len(_KINDS):
            raise ValueError(f"corrupted graph: kernel `{name}` has parameter kind {kind}")
        shape = tuple(int(d) for d in r.arr("<u8", "parameter shape"))
        params.append((pname, _KINDS[kind], shape))
    consts = tuple(int(c) for c in r.arr("<i8", "kernel constants"))
    ops = r.arr("<u1", "node ops")
    a = r.arr("<u8", "node operands")
    b = r.arr("<u8", "node operands")
    if not len(ops) == len(a) == len(b):
        raise ValueError(f"corrupted graph: kernel `{name}` node arrays differ in length")
    nodes = tuple((int(o), int(x), int(y)) for o, x, y in zip(ops, a, b))
    asserts = []
    for _ in range(r.count("assertions")):
        asserts.append((r.u64("assertion"), r.u64("assertion"), r.str("assertion text")))
    outputs = tuple(tuple(int(i) for i in r.arr("<u8", "output nodes"))
                    for _ in range(r.count("kernel outputs")))
    return KernelIR(name, tuple(params), consts, nodes, tuple(asserts), outputs)


def kernel_bytes(ir) -> bytes:
    """A kernel's IR in the payload's encoding (its fingerprint is the SHA-256
    of this encoding with the assertions' locations left out: see
    :func:`kernel_fingerprint`)."""
    w = _Writer()
    _write_kernel(w, ir)
    return w.bytes()


def _identity(ir):
    """The IR without the assertions' source locations: a comment line above a
    kernel must not make it another kernel (the text only feeds error messages)."""
    return ir._replace(asserts=tuple((x, y, "") for x, y, _ in ir.asserts))


def kernel_fingerprint(ir) -> str:
    """Hex SHA-256 of a kernel's serialized IR, assertion locations left out."""
    return hashlib.sha256(kernel_bytes(_identity(ir))).hexdigest()


def _write_par(w, par):
    w.arr([lg for lg, _ in par], "<u1")
    w.arr([st for _, st in par], "<u8")


def _read_par(r):
    lg = r.arr("<u1", "parallel sizes")
    st = r.arr("<u8", "parallel strides")
    if len(lg) != len(st):
        raise ValueError("corrupted graph: parallel sizes and strides differ in length")
    return tuple((int(x), int(y)) for x, y in zip(lg, st))


def _write_layouts(w, ck):
    w.u32(len(ck.in_layouts))
    for par, offsets in ck.in_layouts:
        _write_par(w, par)
        w.arr(offsets, "<u8")
    w.u32(len(ck.out_layouts))
    for par, slots in ck.out_layouts:
        _write_par(w, par)
        w.arr([s[0] for s in slots], "<u8")
        w.arr([s[1] for s in slots], "<u8")


# ------------------------------------------------------------------ graph ---

def _write_history(w, history):
    w.u32(len(history))
    for op, arg in history:
        w.u8(_HIST.index(op))
        w.arr(arg, "<u8")


def _read_history(r):
    out = []
    for _ in range(r.count("history steps")):
        op = r.u8("history op")
        if op >= len(_HIST):
            raise ValueError(f"corrupted graph: unknown history op {op}")
        out.append((_HIST[op], tuple(int(v) for v in r.arr("<u8", "history shape"))))
    return tuple(out)


def graph_to_bytes(g) -> bytes:
    """The file bytes of graph ``g`` (header, payload, checksum: see the module
    docstring); :meth:`ComputationGraph.to_bytes`.  Deterministic: a graph
    gives the same bytes every time, and graphs equal field by field give
    equal bytes (``==`` ignores where the assertions are in the source,
    which the bytes keep for the messages).  A graph built by hand is
    validated first: the encoder takes its invariants for granted."""
    g._checked()
    w = _Writer()
    w.str(g.field)
    w.u32(len(g.kernels))
    for ir in g.kernels:
        _write_kernel(w, ir)
    w.u32(len(g.compiled_kernels))
    for ck in g.compiled_kernels:
        w.u32(ck.kernel)
        _write_layouts(w, ck)
    w.u32(len(g.buffer_points))
    for pts in g.buffer_points:
        w.arr(pts, "<u8")
    w.u32(len(g.templates))
    for t in g.templates:
        w.u32(t.compiled)
        w.u32(t.kernel)
        w.arr(t.inputs, "<u4")
        w.arr(t.outputs, "<u4")
        w.u64(t.num_parallel)
        w.u64(t.padded_parallel)
        w.arr(t.broadcast, "<u1")
    for specs in (g.inputs, g.outputs):
        w.u32(len(specs))
        for bid, history in specs:
            w.u32(bid)
            _write_history(w, history)
    w.u32(len(g.constants))
    for bid, values in g.constants:
        w.u32(bid)
        w.arr(values, "<u4")
    w.u32(len(g.commitments))
    for c in g.commitments:
        w.raw(c)
    payload = w.bytes()
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload))
    return header + payload + hashlib.sha256(header + payload).digest()


def graph_from_bytes(data) -> "object":
    """The :class:`~zorch_nb.graph.ComputationGraph` of file bytes ``data``, every
    invariant checked (see the module docstring); ``ValueError`` says what is
    wrong, ``TypeError`` for ``data`` that is not bytes-like."""
    from .graph import CompiledKernel, ComputationGraph, Template
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"Argument `data` must be bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise ValueError(f"not a zorch_nb computation graph: {len(data)} bytes is shorter "
                         f"than the {_HEADER.size}-byte header (truncated?)")
    magic, version, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"not a zorch_nb computation graph: bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported computation graph format version {version}; this "
                         f"zorch_nb reads version {FORMAT_VERSION}")
    expected = _HEADER.size + length + 32
    if len(data) < expected:
        raise ValueError(f"truncated computation graph: {len(data)} bytes, the header "
                         f"announces {expected}")
    if len(data) > expected:
        raise ValueError(f"corrupted computation graph: {len(data) - expected} unexpected "
                         f"trailing bytes (or a corrupted length field)")
    body, digest = data[:-32], data[-32:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("corrupted computation graph: checksum mismatch")
    r = _Reader(body[_HEADER.size:])
    field = r.str("field name")
    kernels = [_read_kernel(r) for _ in range(r.count("kernels"))]
    compiled = []
    for _ in range(r.count("compiled kernels")):
        k = r.u32("compiled kernel")
        ins = []
        for _ in range(r.count("input layouts")):
            par = _read_par(r)
            ins.append((par, tuple(int(o) for o in r.arr("<u8", "offsets"))))
        outs = []
        for _ in range(r.count("output layouts")):
            par = _read_par(r)
            offs = r.arr("<u8", "slot offsets")
            elems = r.arr("<u8", "slot elements")
            if len(offs) != len(elems):
                raise ValueError("corrupted graph: slot arrays differ in length")
            outs.append((par, tuple((int(o), int(e)) for o, e in zip(offs, elems))))
        compiled.append(CompiledKernel(k, tuple(ins), tuple(outs)))
    points = [tuple(int(p) for p in r.arr("<u8", "split points"))
              for _ in range(r.count("buffers"))]
    templates = []
    for _ in range(r.count("templates")):
        templates.append(Template(
            r.u32("template"), r.u32("template"),
            tuple(int(b) for b in r.arr("<u4", "template inputs")),
            tuple(int(b) for b in r.arr("<u4", "template outputs")),
            r.u64("template"), r.u64("template"),
            _flags(r.arr("<u1", "broadcast flags"))))
    specs = []
    for what in ("inputs", "outputs"):
        specs.append(tuple((r.u32(what), _read_history(r)) for _ in range(r.count(what))))
    constants = [(r.u32("constant"), r.arr("<u4", "constant values"))
                 for _ in range(r.count("constants"))]
    commitments = [r._take(32, "commitment") for _ in range(r.count("commitments"))]
    if r.pos != len(r.data):
        raise ValueError(f"corrupted graph: {len(r.data) - r.pos} bytes left after the payload")
    return ComputationGraph(field, kernels, compiled, points, templates, specs[0], specs[1],
                            constants, commitments)._checked()


def _flags(raw):
    """Broadcast flags as bools: bytes 0 and 1 only (any other byte decoded
    as True and encoded back as 1: a file that did not round-trip)."""
    odd = [int(x) for x in raw if x > 1]
    if odd:
        raise ValueError(f"corrupted graph: a broadcast flag is {odd[0]}, not 0 or 1")
    return tuple(bool(x) for x in raw)


def _bad(msg):
    raise ValueError(f"invalid computation graph: {msg}")


def _validate_kernel(k, ir):
    sizes = [math.prod(s) for _, _, s in ir.params]  # Python ints: crafted shapes never wrap
    for (n, kind, shape), size in zip(ir.params, sizes):
        if any(d < 1 for d in shape) or size >= 1 << _MAX_LOG2:
            _bad(f"kernel {k} parameter `{n}` has shape {shape}")
    in_sizes = [s for (_, kind, _), s in zip(ir.params, sizes) if kind != "out"]
    out_sizes = [s for (_, kind, _), s in zip(ir.params, sizes) if kind != "in"]
    if not out_sizes:  # @kernel refuses these; a call must write something to replay
        _bad(f"kernel {k} has no Out or InOut parameter")
    from .kernels.graph_codegen import OP_CONST, OP_LOAD, OP_NEG
    for i, (op, a, b) in enumerate(ir.nodes):
        if op == OP_LOAD:
            ok = a < len(in_sizes) and b < in_sizes[a]
        elif op == OP_CONST:  # (an unused operand is 0: one encoding per kernel)
            ok = a < len(ir.consts) and b == 0
        elif op == OP_NEG:
            ok = a < i and b == 0
        else:
            ok = op <= 5 and a < i and b < i
        if not ok:
            _bad(f"kernel {k} node {i} {(op, a, b)} is malformed")
    if any(x >= len(ir.nodes) or y >= len(ir.nodes) for x, y, _ in ir.asserts):
        _bad(f"kernel {k} asserts on a missing node")
    if len(ir.outputs) != len(out_sizes) or any(
            len(ids) != s or any(i >= len(ir.nodes) for i in ids)
            for ids, s in zip(ir.outputs, out_sizes)):
        _bad(f"kernel {k} outputs do not match its Out parameters")
    return in_sizes, out_sizes


def _span(par, offsets):
    """The last element a layout reaches (``lg`` bounded by the caller)."""
    return sum(((1 << lg) - 1) * st for lg, st in par) + (max(offsets) if offsets else 0)


#: Most distinct slots :func:`_tiles` tracks for an irregular layout.
_TILE_CAP = 1 << 22


def _tiles(offsets, par, n) -> bool:
    """Whether a layout's writes hit each slot of ``[0, n)`` exactly once.

    The slots written are ``O + sum_j digit_j * st_j`` over the instances'
    digits ``digit_j < 2**lg_j`` -- the sumset of ``O`` and the two-element
    sets ``{0, st_j 2**b}`` (``b < lg_j``).  Checked without enumerating the
    (possibly huge) buffer: with ``[0, t)`` the run of ``O`` from 0, either
    ``O == [0, t)`` -- then the rest must tile ``t * [0, n / t)``, so every
    generator is a multiple of ``t`` and everything divides by ``t`` -- or
    ``t`` can only be reached by a generator equal to ``t``, which is merged
    into ``O`` (disjointly).  Irregular layouts whose merged ``O`` exceeds
    ``_TILE_CAP`` slots are refused.
    """
    O = np.unique(np.asarray(offsets, dtype=np.int64))
    gens = sorted(st << b for lg, st in par for b in range(lg))
    if O.size != len(offsets) or O.size << len(gens) != n or O[0] != 0:
        return False
    while gens:
        t = int(np.argmin(O == np.arange(O.size))) if O[-1] != O.size - 1 else O.size
        if t == O.size and t > 1:  # O = [0, t): the rest tiles t * [0, n / t)
            if any(g % t for g in gens):
                return False
            gens, n, O = [g // t for g in gens], n // t, O[:1]
            continue
        if gens[0] != t:
            return False
        merged = np.union1d(O, O + t)
        if merged.size != 2 * O.size or merged.size > _TILE_CAP:
            return False
        O, gens = merged, gens[1:]
    return O.size == n and O[-1] == n - 1


def _naturals(obj, what):
    """Refuse anything but nested tuples of non-negative ints in ``obj`` (ids,
    offsets, strides, sizes, flags).  The format stores these unsigned, so a
    decoded graph has nothing else; a hand-built graph's negative offset or
    stride read before a buffer's start (the evaluators index unchecked: a
    crash), a negative id counted from the end, and a float, string or dict
    failed later with an unrelated error, or was truncated when encoded."""
    if isinstance(obj, tuple):
        for v in obj:
            _naturals(v, what)
    elif not (isinstance(obj, int) and obj >= 0):
        _bad(f"{what} holds {obj!r} where a non-negative integer belongs")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # (a lone surrogate)
        return False
    return True


def _check_structure(g) -> None:
    """The types the encoder and the checks below take for granted: the named
    tuples, the strings, the constants the format stores (signed 64-bit) and
    the commitments (32-byte roots); values are checked by :func:`validate`."""
    from .graph import CompiledKernel, Template
    from .graph_trace import KernelIR
    if not isinstance(g.field, str):
        _bad(f"the field is {g.field!r}, not a field's name")
    # the containers first: None or 5 in a hand-built graph was iterated below,
    # a bare TypeError ("'NoneType' object is not iterable") from to_bytes (the
    # constructor already iterates `constants` and `commitments` into tuples)
    for name in ("kernels", "compiled_kernels", "buffer_points", "templates", "inputs",
                 "outputs"):
        if not isinstance(getattr(g, name), tuple):
            _bad(f"the graph's {name} must be a sequence, not {type(getattr(g, name)).__name__}")
    for b, pts in enumerate(g.buffer_points):
        if not isinstance(pts, tuple):
            _bad(f"buffer {b}'s split points must be a sequence, not {type(pts).__name__}")
    for what, items, kind in (("kernel", g.kernels, KernelIR),
                              ("compiled kernel", g.compiled_kernels, CompiledKernel),
                              ("template", g.templates, Template)):
        for i, item in enumerate(items):
            if not isinstance(item, kind):
                _bad(f"{what} {i} is a {type(item).__name__}, not a {kind.__name__}")
    for k, ir in enumerate(g.kernels):
        if not all(isinstance(v, tuple) for v in ir[1:]) or \
                not all(isinstance(t, tuple) and len(t) == 3 for t in ir.params + ir.asserts):
            _bad(f"kernel {k} needs tuples of parameters (name, kind, shape), constants, "
                 f"nodes, assertions (x, y, where) and outputs")
        texts = (ir.name, *(n for n, _, _ in ir.params), *(w for _, _, w in ir.asserts))
        if not all(isinstance(t, str) and _utf8(t) for t in texts):
            _bad(f"kernel {k} has a name, parameter name or assertion text that is not a "
                 f"str (of UTF-8 encodable characters)")
        if any(kind not in _KINDS for _, kind, _ in ir.params):
            _bad(f"kernel {k} has a parameter kind outside {_KINDS}")
        for c in ir.consts:
            if not isinstance(c, int) or isinstance(c, bool) or not -2**63 <= c < 2**63:
                _bad(f"kernel {k} holds the constant {c!r}: constants are signed 64-bit ints")
    for i, t in enumerate(g.templates):
        if not all(isinstance(v, tuple) for v in (t.inputs, t.outputs, t.broadcast)) or \
                any(f not in (0, 1) or isinstance(f, float) for f in t.broadcast):
            _bad(f"template {i} needs tuples of buffer ids and of broadcast flags (bools)")
    for kind, specs in (("input", g.inputs), ("output", g.outputs)):
        for i, spec in enumerate(specs):
            if not (isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], tuple)
                    and all(isinstance(st, tuple) and len(st) == 2 and st[0] in _HIST
                            for st in spec[1])):
                _bad(f"graph {kind} {i} is {spec!r}, not (buffer id, view history) with "
                     f"steps {_HIST}")
    for i, c in enumerate(g.commitments):
        if not isinstance(c, bytes) or len(c) != 32:
            _bad(f"commitment {i} is {c!r:.40}, not the 32 bytes of a Merkle root")


def validate(g) -> None:
    """Check every invariant the evaluators rely on; ``ValueError`` if one fails."""
    from .graph import FIELDS_BY_NAME
    _check_structure(g)
    if g.field not in FIELDS_BY_NAME:
        _bad(f"unknown field {g.field!r}")
    for k, ir in enumerate(g.kernels):  # (all but the names, kinds and signed constants)
        _naturals((tuple(shape for _, _, shape in ir.params), ir.nodes,
                   tuple((x, y) for x, y, _ in ir.asserts), ir.outputs), f"kernel {k}")
    for what, part in (("a compiled kernel", g.compiled_kernels),
                       ("a buffer's split points", g.buffer_points), ("a template", g.templates),
                       ("the graph inputs", tuple((b, tuple(a for _, a in h))
                                                  for b, h in g.inputs)),
                       ("the graph outputs", tuple((b, tuple(a for _, a in h))
                                                   for b, h in g.outputs)),
                       ("a constant's buffer id", tuple(b for b, _ in g.constants))):
        _naturals(part, what)
    p = FIELDS_BY_NAME[g.field].p
    for b, pts in enumerate(g.buffer_points):
        if not pts or pts[0] != 1 or any(hi <= lo or hi % lo for lo, hi in zip(pts, pts[1:])):
            _bad(f"buffer {b} has split points {list(pts)}")
        if pts[-1] >= 1 << _MAX_LOG2:
            _bad(f"buffer {b} is too long")
    padded = g.padded_lengths
    if any(n >= 1 << _MAX_LOG2 for n in padded):
        _bad("a padded buffer is too long")
    sizes = [_validate_kernel(k, ir) for k, ir in enumerate(g.kernels)]
    for c, ck in enumerate(g.compiled_kernels):
        if ck.kernel >= len(g.kernels):
            _bad(f"compiled kernel {c} names kernel {ck.kernel}")
        ins, outs = sizes[ck.kernel]
        if len(ck.in_layouts) != len(ins) or len(ck.out_layouts) != len(outs):
            _bad(f"compiled kernel {c} has the wrong number of operand layouts")
        for par, _ in (*ck.in_layouts, *ck.out_layouts):
            # Bounded before any arithmetic on them (1 << lg of a crafted lg
            # ran out of memory).  A stride of 2**40 or more no buffer needs:
            # only a size-1 dimension's escapes the span check, and past 2**63
            # the evaluators' int64 index arithmetic is typed float.
            if any(lg > _MAX_LOG2 or st >= 1 << _MAX_LOG2 for lg, st in par):
                _bad(f"compiled kernel {c} has a parallel dimension over 2**{_MAX_LOG2} "
                     f"or a stride of 2**{_MAX_LOG2} or more")
        for (par, offsets), s in zip(ck.in_layouts, ins):
            if len(offsets) != s:
                _bad(f"compiled kernel {c} has an input layout of {len(offsets)} elements")
        for (par, slots), s in zip(ck.out_layouts, outs):
            if not par and len(slots) == 0 or any(e >= s for _, e in slots):
                _bad(f"compiled kernel {c} has a malformed output layout")
    # A compiled kernel's operand spans and tilings, checked once: calls share
    # compiled kernels, and a layout may be as long as its buffer.
    spans, tilings = {}, {}

    def span(c, j, par, offsets, ti):
        if (c, j) not in spans:
            spans[c, j] = _span(par, offsets)
        return spans[c, j]

    def tiles(c, j, par, slots, n):
        if (c, j, n) not in tilings:
            tilings[c, j, n] = _tiles([o for o, _ in slots], par, n)
        return tilings[c, j, n]

    defined = [False] * len(g.buffer_points)
    for kind, specs in (("input", g.inputs), ("output", g.outputs)):
        for i, (bid, history) in enumerate(specs):
            if bid >= len(defined):
                _bad(f"graph {kind} {i} names buffer {bid}")
            _check_history(g.buffer_points[bid][-1], history, f"graph {kind} {i} (buffer {bid})")
    for bid, _ in g.inputs:
        if defined[bid]:
            _bad(f"buffer {bid} is a graph input twice")
        defined[bid] = True
    for bid, values in g.constants:
        if bid >= len(defined) or defined[bid]:
            _bad(f"constant buffer {bid} is out of range or defined twice")
        if values.ndim != 1 or values.size != g.buffer_points[bid][-1]:
            _bad(f"constant buffer {bid} holds values of shape {values.shape}, not its "
                 f"{g.buffer_points[bid][-1]} canonical words in a row")
        if values.size and values.max() >= p:
            _bad(f"constant buffer {bid} holds a word >= p ({int(values.max())}), not "
                 f"canonical words")
        defined[bid] = True
    for ti, t in enumerate(g.templates):
        if t.compiled >= len(g.compiled_kernels) or \
                g.compiled_kernels[t.compiled].kernel != t.kernel:
            _bad(f"template {ti} names compiled kernel {t.compiled} / kernel {t.kernel}")
        ck = g.compiled_kernels[t.compiled]
        if len(t.inputs) != len(ck.in_layouts) or len(t.outputs) != len(ck.out_layouts) \
                or len(t.broadcast) != len(t.inputs):
            _bad(f"template {ti} has the wrong number of operands")
        if not 1 <= t.num_parallel <= t.padded_parallel < 1 << _MAX_LOG2:
            _bad(f"template {ti} runs {t.padded_parallel} instances for {t.num_parallel}")
        # Each output is a fresh [num_parallel] + shape buffer whose split
        # points cut the instances off (replay's assert_eq message relies on it).
        for b, (_, _, shape) in zip(t.outputs, g.kernels[t.kernel].out_params):
            if b < len(defined) and g.buffer_points[b][-1] != \
                    t.num_parallel * int(np.prod(shape, dtype=object)):
                _bad(f"template {ti} writes {t.num_parallel} instances of {list(shape)} "
                     f"into buffer {b} of {g.buffer_points[b][-1]} elements")
        if t.outputs and t.outputs[0] < len(defined):
            try:
                logical_instance(g.buffer_points[t.outputs[0]], t.num_parallel,
                                 g.kernels[t.kernel].out_params[0][2], 0)
            except ValueError:  # (axis_dims: points that lack a split of the view)
                _bad(f"template {ti}'s first output buffer does not split its "
                     f"{t.num_parallel} instances apart")
        for j, (b, (par, offsets), bc) in enumerate(zip(t.inputs, ck.in_layouts, t.broadcast)):
            if b >= len(defined) or not defined[b]:
                _bad(f"template {ti} reads buffer {b} before it is written")
            if (par if bc else 1 << sum(lg for lg, _ in par) != t.padded_parallel):
                _bad(f"template {ti} has an inconsistent parallel layout")
            if span(t.compiled, j, par, offsets, ti) >= padded[b]:
                _bad(f"template {ti} reads past padded buffer {b}")
        for j, (b, (par, slots)) in enumerate(zip(t.outputs, ck.out_layouts), len(t.inputs)):
            if b >= len(defined) or defined[b]:
                _bad(f"template {ti} writes buffer {b}, which exists already")
            if 1 << sum(lg for lg, _ in par) != t.padded_parallel:
                _bad(f"template {ti} has an inconsistent output layout")
            if span(t.compiled, j, par, [o for o, _ in slots], ti) >= padded[b]:
                _bad(f"template {ti} writes past padded buffer {b}")
            if not tiles(t.compiled, j, par, slots, padded[b]):
                _bad(f"template {ti} does not write every slot of buffer {b} exactly once")
            defined[b] = True
    if not all(defined):
        _bad(f"buffer {defined.index(False)} is never written")
    if len(g.commitments) != len(g.buffer_points):
        _bad(f"{len(g.commitments)} commitments for {len(g.buffer_points)} buffers")


def _check_history(n, history, what):
    if not history or history[0][0] != "reshape":
        _bad(f"{what} has a history that does not start with its shape")
    shape = None
    for op, arg in history:
        if len(arg) > _MAX_NDIM:
            _bad(f"{what} has a view of {len(arg)} dimensions (NumPy allows {_MAX_NDIM})")
        if op == "reshape":
            if int(np.prod(arg, dtype=object)) != n:
                _bad(f"{what} reshapes {n} elements to {list(arg)}")
            shape = arg
        elif sorted(arg) != list(range(len(shape))):
            _bad(f"{what} transposes {list(shape)} with axes {list(arg)}")
        else:
            shape = tuple(shape[a] for a in arg)
