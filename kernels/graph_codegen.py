"""Source generators of the deferred-graph evaluators (plain data in, text out).

A traced kernel (see :mod:`zorch_nb.graph`) reaches this module as plain
tuples; nothing here imports from the object layer.

IR
--
``nodes`` is a tuple of ``(op, a, b)`` triples in SSA order (node ``k`` only
refers to nodes ``< k``):

* ``(OP_LOAD, operand, element)``: element ``element`` (row-major flat index
  of the parameter shape) of input operand ``operand``;
* ``(OP_CONST, index, 0)``: the Montgomery word ``consts[index]`` (a runtime
  array, so the code does not depend on the field);
* ``(OP_ADD | OP_SUB | OP_MUL, x, y)`` and ``(OP_NEG, x, 0)``: field
  arithmetic on Montgomery words in ``[0, p)``.

``asserts`` is a tuple of ``(x, y)`` node pairs that must be equal;
``outputs[j][e]`` is the node stored into element ``e`` of output operand
``j``.

Layouts
-------
Every operand lives in a padded buffer whose dimensions are powers of two.
A padded instance ``t`` (``0 <= t < prod(P)``) starts at

    ``base(t) = sum_k ((t >> shift_k) & (P_k - 1)) * stride_k``

where ``par = ((log2 P_0, stride_0), ...)`` lists the parallel sub-dimensions
outer first (``shift_k`` = sum of the ``log2 P`` of the dimensions after
``k``); a broadcast operand has ``par = ()`` and ``base = 0``.

* input layout ``(par, offsets)``: element ``e`` is read at
  ``base(t) + offsets[e]``;
* output layout ``(par, slots)``: every padded slot ``(offset, e)`` of the
  instance receives element ``e``, so the padding of an output repeats its
  last element/row exactly like the padding of an input.

The outermost term needs no exact mask (``t < prod(P)``, so ``t >> shift_0
< P_0``): it gets a fixed one, :data:`OUTER_MASK`, so the text does not
depend on ``P_0`` and the same program recorded with another outer instance
count (the usual size sweep) reuses its compiled evaluator; :func:`skeleton`
is the cache key that says so.

Generated code
--------------
:func:`python_source` gives a function ``name(i0, ..., o0, ..., consts,
fail, n_inst, p, mu_neg)`` meant for ``@njit(parallel=True)`` with a
``prange`` over instances (values the same in every instance computed
before it); :func:`cuda_source` gives a ``ZORCH_HD`` element
function plus an ``extern "C" __global__`` grid-stride wrapper guarded by
``#ifdef __CUDACC__`` (so the element function compiles on the host too).
Both call the one Montgomery arithmetic of their language (``monty.py``,
``monty.cuh``) and write ``fail[t] = k + 1`` when assertion ``k`` (the first
failing one) does not hold.  Only integers from the IR and layouts are
formatted into the text, never names or strings.
"""
from __future__ import annotations

from .cuda_source import read_source
from .field_params import FieldParams, cuda_defines

__all__ = ["OP_LOAD", "OP_CONST", "OP_ADD", "OP_SUB", "OP_MUL", "OP_NEG", "OP_NAMES",
           "python_source", "cuda_source", "cuda_symbol", "translation_unit", "instance_base",
           "skeleton", "MAX_LOG2", "OUTER_MASK"]

OP_LOAD = 0
OP_CONST = 1
OP_ADD = 2
OP_SUB = 3
OP_MUL = 4
OP_NEG = 5
OP_NAMES = ("load", "const", "add", "sub", "mul", "neg")


def _shifts(par):
    """Right-shift of each parallel sub-dimension (outer first)."""
    out = []
    acc = 0
    for log2p, _ in reversed(par):
        out.append(acc)
        acc += int(log2p)
    return out[::-1]


def instance_base(par, t: int) -> int:
    """``base(t)`` of one padded instance, as the generated code computes it."""
    return sum(((int(t) >> shift) & mask) * stride for shift, mask, stride in _terms(par))


#: No padded dimension or buffer of a graph reaches ``2**MAX_LOG2`` elements
#: (graph files and recordings are checked against it).
MAX_LOG2 = 40

#: The outermost term's mask: an identity on every valid instance, there so
#: the compiler knows the index is non-negative and bounded.  Without it Numba
#: kept its negative-index wraparound and the evaluator loop ran several times
#: slower; with the exact ``P_0 - 1`` the text, and the compile, depended on
#: the instance count.
OUTER_MASK = (1 << MAX_LOG2) - 1


def _terms(par):
    """``(shift, mask, stride)`` of every term of ``base(t)``, outer first, as
    the generated code computes them (one home for :func:`instance_base` and
    the generators); terms that are always 0 are left out."""
    out = []
    for k, ((log2p, stride), shift) in enumerate(zip(par, _shifts(par))):
        mask = OUTER_MASK if k == 0 else (1 << int(log2p)) - 1
        if int(stride) and mask:
            out.append((int(shift), mask, int(stride)))
    return out


def skeleton(layouts) -> tuple:
    """``layouts`` with the outermost ``log2 P_0`` of each parallel part replaced
    by -1: exactly what the generated text depends on (a cache key)."""
    return tuple((tuple((-1 if k == 0 else int(lg), int(st)) for k, (lg, st) in enumerate(par)),
                  rest) for par, rest in layouts)


def _base_terms(par, t: str, suffix: str = ""):
    """Terms of ``base(t)`` as source text (empty for a broadcast operand)."""
    return [f"(({t} >> {shift}{suffix}) & {mask}{suffix}) * {stride}{suffix}"
            for shift, mask, stride in _terms(par)]


def python_source(name: str, nodes, asserts, outputs, in_layouts, out_layouts) -> str:
    """Numba-ready Python source of one evaluator (see the module docstring).

    The body is straight-line code per instance; the caller executes the text
    with ``prange``, ``np``, ``mod_add``, ``mod_sub``, ``mod_neg`` and
    ``mont_mul`` in its namespace and wraps the function in
    ``njit(parallel=True)``.

    Nodes that read only broadcast operands and constants (the same in every
    instance), and the assertions between them, are computed once before the
    instance loop: left in it, with an assertion on them, LLVM's optimizer
    took time exponential in their depth (a 12-multiplication chain checked
    by ``assert_eq`` on ``num_parallel=1`` compiled for over 60 s, one more
    round of 3 multiplications took ~6x longer).
    """
    ins = [f"i{k}" for k in range(len(in_layouts))]
    outs = [f"o{k}" for k in range(len(out_layouts))]
    # An input whose every stride is 0 (a file may say so) is read at the same
    # place by every instance: a broadcast one, with no a{k} to compute.
    spread = [bool(_terms(par)) for par, _ in in_layouts]
    fixed = [False] * len(nodes)  # the same value in every instance
    for n, (op, a, b) in enumerate(nodes):
        if op == OP_LOAD:
            fixed[n] = not spread[a]
        elif op == OP_CONST:
            fixed[n] = True
        elif op == OP_NEG:
            fixed[n] = fixed[a]
        else:
            fixed[n] = fixed[a] and fixed[b]
    before, body = [], []
    for k, (par, _) in enumerate(in_layouts):
        terms = _base_terms(par, "t")
        if terms:
            body.append(f"a{k} = {' + '.join(terms)}")
    for k, (par, _) in enumerate(out_layouts):
        terms = _base_terms(par, "t")
        body.append(f"b{k} = {' + '.join(terms) if terms else '0'}")
    for n, (op, a, b) in enumerate(nodes):
        if op == OP_LOAD:
            off = int(in_layouts[a][1][b])
            line = (f"v{n} = i{int(a)}[a{int(a)} + {off}]" if spread[a]
                    else f"v{n} = i{int(a)}[{off}]")
        elif op == OP_CONST:
            line = f"v{n} = consts[{int(a)}]"
        elif op == OP_ADD:
            line = f"v{n} = mod_add(v{int(a)}, v{int(b)}, p)"
        elif op == OP_SUB:
            line = f"v{n} = mod_sub(v{int(a)}, v{int(b)}, p)"
        elif op == OP_MUL:
            line = f"v{n} = mont_mul(v{int(a)}, v{int(b)}, p, mu_neg)"
        elif op == OP_NEG:
            line = f"v{n} = mod_neg(v{int(a)}, p)"
        else:
            raise ValueError(f"unknown opcode {op!r}")
        (before if fixed[n] else body).append(line)
    # Checked last to first so that fail[t] ends up holding the first failure.
    for k in range(len(asserts) - 1, -1, -1):
        x, y = int(asserts[k][0]), int(asserts[k][1])
        if fixed[x] and fixed[y]:
            before.append(f"c{k} = v{x} != v{y}")
            body.append(f"if c{k}:")
        else:
            body.append(f"if v{x} != v{y}:")
        body.append(f"    fail[t] = {k + 1}")
    for j, (_, slots) in enumerate(out_layouts):
        for off, e in slots:
            body.append(f"o{j}[b{j} + {int(off)}] = v{int(outputs[j][e])}")
    lines = [f"def {name}({', '.join(ins + outs + ['consts', 'fail', 'n_inst', 'p', 'mu_neg'])}):"]
    lines += ["    " + s for s in before]
    lines += ["    for t in prange(n_inst):"]
    lines += ["        " + s for s in body]
    return "\n".join(lines) + "\n"


def cuda_symbol(name: str) -> str:
    """Name of the ``__global__`` kernel generated under ``name``."""
    return f"zorch_graph_{name}"


def cuda_source(name: str, nodes, asserts, outputs, in_layouts, out_layouts) -> str:
    """CUDA C of one evaluator, to follow the field preamble and ``monty.cuh``.

    Defines ``ZORCH_HD void zorch_graph_<name>_element(t, i0.., o0.., consts,
    fail)`` (host-compilable) and, under ``__CUDACC__``, the grid-stride
    kernel ``extern "C" __global__ zorch_graph_<name>(i0.., o0.., consts,
    fail, n_inst)``.
    """
    sym = cuda_symbol(name)
    params = [f"const zorch_u32* __restrict__ i{k}" for k in range(len(in_layouts))]
    params += [f"zorch_u32* __restrict__ o{k}" for k in range(len(out_layouts))]
    params += ["const zorch_u32* __restrict__ consts", "zorch_u32* __restrict__ fail"]
    args = [f"i{k}" for k in range(len(in_layouts))] + \
        [f"o{k}" for k in range(len(out_layouts))] + ["consts", "fail"]
    body = []
    for k, (par, _) in enumerate(in_layouts):
        terms = _base_terms(par, "t", "ull")
        body.append(f"const zorch_u64 a{k} = {' + '.join(terms) if terms else '0ull'};")
    for k, (par, _) in enumerate(out_layouts):
        terms = _base_terms(par, "t", "ull")
        body.append(f"const zorch_u64 b{k} = {' + '.join(terms) if terms else '0ull'};")
    for n, (op, a, b) in enumerate(nodes):
        if op == OP_LOAD:
            off = int(in_layouts[a][1][b])
            rhs = f"i{int(a)}[a{int(a)} + {off}ull]"
        elif op == OP_CONST:
            rhs = f"consts[{int(a)}]"
        elif op == OP_ADD:
            rhs = f"zorch_add(v{int(a)}, v{int(b)})"
        elif op == OP_SUB:
            rhs = f"zorch_sub(v{int(a)}, v{int(b)})"
        elif op == OP_MUL:
            rhs = f"zorch_mont_mul(v{int(a)}, v{int(b)})"
        elif op == OP_NEG:
            rhs = f"zorch_neg(v{int(a)})"
        else:
            raise ValueError(f"unknown opcode {op!r}")
        body.append(f"const zorch_u32 v{n} = {rhs};")
    if asserts:
        body.append("zorch_u32 f = 0u;")
        for k in range(len(asserts) - 1, -1, -1):
            x, y = asserts[k]
            body.append(f"if (v{int(x)} != v{int(y)}) f = {k + 1}u;")
        body.append("if (f) fail[t] = f;")
    for j, (_, slots) in enumerate(out_layouts):
        for off, e in slots:
            body.append(f"o{j}[b{j} + {int(off)}ull] = v{int(outputs[j][e])};")
    text = [f"// zorch_nb deferred-graph evaluator {name} (generated)",
            f"ZORCH_HD void {sym}_element(zorch_u64 t, {', '.join(params)}) {{"]
    text += ["    " + s for s in body]
    text += ["}", "", "#ifdef __CUDACC__",
             f'extern "C" __global__ void {sym}({", ".join(params)}, zorch_u64 n_inst) {{',
             "    const zorch_u64 step = (zorch_u64)blockDim.x * gridDim.x;",
             "    for (zorch_u64 t = (zorch_u64)blockIdx.x * blockDim.x + threadIdx.x; "
             "t < n_inst; t += step) {",
             f"        {sym}_element(t, {', '.join(args)});",
             "    }", "}", "#endif", ""]
    return "\n".join(text)


def translation_unit(field: FieldParams, generated: str) -> str:
    """Complete CUDA C source: field preamble + ``monty.cuh`` + ``generated``."""
    return cuda_defines(field) + read_source("monty.cuh") + "\n" + generated
