"""CPU interpreter of the deferred-graph IR, for kernels the replay does not unroll.

:func:`~.graph_codegen.python_source` unrolls a kernel into straight-line
code run one instance at a time: the fastest form for short kernels that
mostly move memory, but its compile grows faster than linearly (a 16-lane,
16-round cube-and-mix permutation subtracting a broadcast value each round,
1553 nodes: 21 s) and a chain of
dependent Montgomery products runs at their latency (the same kernel over
2**16 instances: 144 ms unrolled, 11.4 ms here).  This module runs any kernel
with one compiled function instead (one compile per count of input and
output operands and per form, parallel or serial, cached on disk);
:func:`interprets` says which kernels the replay sends here.

Program
-------
:func:`program` turns the IR and the operand layouts (the arguments of
``python_source``, see :mod:`.graph_codegen`) into rows ``(op, d, a, b)``:

* ``OP_LOAD``: slot ``d`` = input ``a`` at ``base(t) + b``;
* ``OP_CONST``: slot ``d`` = ``consts[a]``;
* ``OP_ADD | OP_SUB | OP_MUL``: slot ``d`` = slot ``a`` op slot ``b``;
  ``OP_NEG``: slot ``d`` = ``-`` slot ``a``;
* ``ROW_ASSERT``: instance fails assertion ``d - 1`` where slots ``a`` and
  ``b`` differ (the smallest failing assertion wins, as in the unrolled
  code, so the row may come wherever both sides exist);
* ``ROW_STORE``: output ``d`` at ``base(t) + b`` = slot ``a``.

Slots are reused once a value is dead, so a kernel needs as many slots as
values live at once (tens for a permutation of any depth), not one per node.
Every row runs over a block of :data:`~.launch_config.GRAPH_CPU_BLOCK`
instances at a time (fewer for a kernel of thousands of live values, see
:data:`~.launch_config.GRAPH_CPU_SCRATCH_BYTES`): the dispatch on ``op``
is paid once per block and the arithmetic runs over a contiguous row of
words, which LLVM vectorizes.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, prange
from numba.core import config as numba_config

from . import launch_config
from .cpu_threads import serial_twin, serialized
from .graph_codegen import OP_ADD, OP_CONST, OP_LOAD, OP_MUL, OP_NEG, OP_SUB, _terms
from .jit import njit  # numba.njit, cache keyed on every kernel source
from .monty import mod_add, mod_neg, mod_sub, mont_mul

__all__ = ["ROW_ASSERT", "ROW_STORE", "Program", "interprets", "program", "run_program"]

ROW_ASSERT = 6
ROW_STORE = 7


class Program(tuple):
    """``(rows, n_slots, in_terms, out_terms)`` of :func:`program`."""

    __slots__ = ()

    @property
    def rows(self) -> np.ndarray:
        return self[0]

    @property
    def n_slots(self) -> int:
        return self[1]


def interprets(nodes, asserts, outputs, out_layouts) -> bool:
    """Whether the CPU replay runs a kernel (its IR ``nodes``, ``asserts``
    pairs and ``outputs`` at the output layouts ``out_layouts``, see
    :mod:`.graph_codegen`) through this interpreter rather than an unrolled
    evaluator: past ``launch_config.GRAPH_CPU_UNROLL_MAX_ROWS`` lines of
    unrolled code (one per node and stored padded slot, two per assertion:
    its compile grows faster than linearly in each), or with at least
    ``GRAPH_CPU_INTERPRET_MULS_PER_ACCESS`` products per loaded or stored
    element (where instances in vector lanes beat one instance at a time)."""
    rows = len(nodes) + 2 * len(asserts) + sum(len(slots) for _, slots in out_layouts)
    if rows > launch_config.GRAPH_CPU_UNROLL_MAX_ROWS:
        return True
    muls = sum(1 for op, _, _ in nodes if op == OP_MUL)
    accesses = sum(1 for op, _, _ in nodes if op == OP_LOAD) + sum(len(o) for o in outputs)
    return muls > 0 and muls >= launch_config.GRAPH_CPU_INTERPRET_MULS_PER_ACCESS * accesses


def _terms_array(layouts) -> np.ndarray:
    """``(operands, terms, 3)`` int64 array of each layout's ``(shift, mask,
    stride)`` terms (:func:`~.graph_codegen._terms`), padded with zero terms;
    at least one operand row (a kernel without inputs gets a dummy one)."""
    terms = [_terms(par) for par, _ in layouts]
    out = np.zeros((max(len(terms), 1), max([len(t) for t in terms] + [1]), 3), np.int64)
    for k, ts in enumerate(terms):
        for m, term in enumerate(ts):
            out[k, m] = term
    return out


def program(nodes, asserts, outputs, in_layouts, out_layouts) -> Program:
    """Rows, slot count and ``base(t)`` terms of one kernel (module docstring).

    ``asserts`` is a sequence of ``(x, y)`` node pairs; the other arguments
    are those of :func:`~.graph_codegen.python_source`.
    """
    n = len(nodes)
    # Where each value is last read: operands by their node, assertion sides
    # by the node after the later side's (the assertion's row follows that
    # side's row), stored outputs never (their rows come last).
    last = [-1] * n
    for i, (op, a, b) in enumerate(nodes):
        if op in (OP_ADD, OP_SUB, OP_MUL, OP_NEG):
            reads = (a, b) if op != OP_NEG else (a,)
            if not all(0 <= int(v) < i for v in reads):  # (the IR is SSA: earlier nodes only)
                raise ValueError(f"node {i} ({op}, {a}, {b}) reads a node not before it")
            for v in reads:
                last[v] = max(last[v], i)
    checks: dict = {}
    for k, (x, y) in enumerate(asserts):
        x, y = int(x), int(y)
        checks.setdefault(max(x, y), []).append((k, x, y))
        last[x] = max(last[x], max(x, y) + 1)
        last[y] = max(last[y], max(x, y) + 1)
    stored = [(j, int(off), int(outputs[j][e]))
              for j, (_, slots) in enumerate(out_layouts) for off, e in slots]
    for _, _, v in stored:
        last[v] = n
    dying: dict = {}
    for v, at in enumerate(last):
        dying.setdefault(at, []).append(v)
    slot = [0] * n
    free: list = []
    top = 0
    rows = []
    for i, (op, a, b) in enumerate(nodes):
        if free:
            s = free.pop()
        else:
            s, top = top, top + 1
        slot[i] = s
        # read at row i for the last time: free once row i has its slot, never
        # its own operand's (a row writing a slot it reads fails LLVM's overlap
        # test of the two rows and runs scalar: 3x slower)
        free.extend(slot[v] for v in dying.get(i, ()) if v < i)
        if op == OP_LOAD:
            rows.append((OP_LOAD, s, int(a), int(in_layouts[a][1][b])))
        elif op == OP_CONST:
            rows.append((OP_CONST, s, int(a), 0))
        elif op == OP_NEG:
            rows.append((OP_NEG, s, slot[a], 0))
        elif op in (OP_ADD, OP_SUB, OP_MUL):
            rows.append((int(op), s, slot[a], slot[b]))
        else:
            raise ValueError(f"unknown opcode {op!r}")
        for k, x, y in checks.get(i, ()):
            rows.append((ROW_ASSERT, k + 1, slot[x], slot[y]))
        if last[i] < 0:  # never read: its slot is free at once
            free.append(s)
    rows.extend((ROW_STORE, j, slot[v], off) for j, off, v in stored)
    return Program((np.array(rows, dtype=np.int64).reshape(-1, 4), max(top, 1),
                    _terms_array(in_layouts), _terms_array(out_layouts)))


@njit(cache=True)
def _bases(terms, t0, nb, out):
    """``out[k, j]`` = ``base(t0 + j)`` of operand ``k`` for ``j < nb``."""
    for k in range(terms.shape[0]):
        for j in range(nb):
            s = 0
            for m in range(terms.shape[1]):
                s += (((t0 + j) >> terms[k, m, 0]) & terms[k, m, 1]) * terms[k, m, 2]
            out[k, j] = s


@njit(parallel=True, cache=True)
def _interpret(ins, outs, rows, in_terms, out_terms, consts, fail, n_inst, n_slots, block,
              n_chunks, p, mu_neg):
    """Run ``rows`` over instances ``0 <= t < n_inst`` (see the module docstring):
    the kernel of :func:`run_program`, which checks its buffers and guards
    its parallel launch for threads and ``fork`` (:mod:`.cpu_threads`).

    ``ins``/``outs``: tuples of uint32 buffers; ``fail[t]`` receives the first
    failing assertion's index + 1 (0 where all hold); ``n_chunks`` parallel
    chunks of consecutive blocks of ``block`` instances, each with its own
    ``(n_slots, block)`` scratch.
    """
    n_blocks = (n_inst + block - 1) // block
    for c in prange(n_chunks):
        vals = np.empty((n_slots, block), dtype=np.uint32)
        ib = np.empty((in_terms.shape[0], block), dtype=np.int64)
        ob = np.empty((out_terms.shape[0], block), dtype=np.int64)
        fl = np.empty(block, dtype=np.uint32)
        for blk in range(c * n_blocks // n_chunks, (c + 1) * n_blocks // n_chunks):
            t0 = blk * block
            nb = min(block, n_inst - t0)
            _bases(in_terms, t0, nb, ib)
            _bases(out_terms, t0, nb, ob)
            for j in range(nb):
                fl[j] = 0
            for r in range(rows.shape[0]):
                op = rows[r, 0]
                d = rows[r, 1]
                a = rows[r, 2]
                b = rows[r, 3]
                # the most frequent rows first
                if op == OP_MUL:
                    for j in range(nb):
                        vals[d, j] = mont_mul(vals[a, j], vals[b, j], p, mu_neg)
                elif op == OP_ADD:
                    for j in range(nb):
                        vals[d, j] = mod_add(vals[a, j], vals[b, j], p)
                elif op == OP_SUB:
                    for j in range(nb):
                        vals[d, j] = mod_sub(vals[a, j], vals[b, j], p)
                elif op == OP_LOAD:
                    src = ins[a]
                    for j in range(nb):
                        vals[d, j] = src[ib[a, j] + b]
                elif op == OP_CONST:
                    w = consts[a]
                    for j in range(nb):
                        vals[d, j] = w
                elif op == OP_NEG:
                    for j in range(nb):
                        vals[d, j] = mod_neg(vals[a, j], p)
                elif op == ROW_ASSERT:
                    for j in range(nb):
                        if vals[a, j] != vals[b, j] and (fl[j] == 0 or fl[j] > d):
                            fl[j] = d
                else:  # ROW_STORE
                    dst = outs[d]
                    for j in range(nb):
                        dst[ob[d, j] + b] = vals[a, j]
            for j in range(nb):
                fail[t0 + j] = fl[j]


def _call(kernel, *args) -> None:
    kernel(*args)


_call_parallel = serialized(_call)
#: stands in for a missing input or output tuple (a Numba tuple of no arrays
#: cannot be indexed): never read or written, as no row names it
_NONE = (np.zeros(1, dtype=np.uint32),)


_WORDS = np.dtype(np.uint32)


def _is_words(x) -> bool:
    """Whether ``x`` is a writable C-contiguous uint32 vector: every buffer of
    a call must have one Numba type, so that the tuples are homogeneous and
    indexable at run time."""
    if type(x) is not np.ndarray or x.ndim != 1 or x.dtype != _WORDS:
        return False
    flags = x.flags  # (each .flags makes an object: once, not twice)
    return flags.c_contiguous and flags.writeable


#: ``(np.uint32(p), np.uint32(mu_neg))`` per field: the kernel's argument types
#: (a Python int would be typed int64 and compile another kernel), made once.
_FIELD_WORDS: dict = {}


def run_program(prog: Program, inputs, outputs, consts, fail, n_inst: int, p: int, mu_neg: int,
                serial: bool = False) -> None:
    """Run ``prog`` over ``n_inst`` padded instances (arguments as
    :func:`~.graph_cpu.run_evaluator`'s); ``serial`` (or a single block of
    instances): on the calling thread, compiled without ``parallel``.
    Inputs of another form (the replay's padded buffers already are writable
    C-contiguous uint32 vectors) are copied, never modified; outputs must be
    of that form."""
    rows, n_slots, in_terms, out_terms = prog
    if n_inst <= 0:
        return
    ins = tuple([x if _is_words(x) else np.array(x, dtype=np.uint32, order="C").reshape(-1)
                 for x in inputs]) or _NONE
    outs = tuple(outputs) or _NONE
    for x in outs:
        if not _is_words(x):  # written in place: refused rather than copied
            raise TypeError("outputs must be writable C-contiguous uint32 vectors")
    words = _FIELD_WORDS.get((p, mu_neg))
    if words is None:
        words = _FIELD_WORDS[p, mu_neg] = (np.uint32(p), np.uint32(mu_neg))
    # (the counts as Python ints: Numba types them int64, as np.int64)
    n_inst, n_slots = int(n_inst), int(n_slots)
    # Instances per block: fewer where a chunk's scratch would pass
    # GRAPH_CPU_SCRATCH_BYTES (per instance 4-byte values, 8-byte operand bases
    # and a 4-byte assertion flag); inline, as recording a call costs ~20 us
    block, budget = launch_config.GRAPH_CPU_BLOCK, launch_config.GRAPH_CPU_SCRATCH_BYTES
    per_instance = 4 * n_slots + 8 * (in_terms.shape[0] + out_terms.shape[0]) + 4
    if per_instance * block > budget:
        block = max(1, budget // per_instance)
    # (one block: nothing to run in parallel; more operands than Numba's
    # parallel regions take as a tuple -- NUMBA_PARFOR_MAX_TUPLE_SIZE, 100 by
    # default -- failed to compile: serial.  Such a kernel is rare and its
    # compile, not its run, dominates)
    if serial or n_inst <= block or \
            max(len(ins), len(outs)) > numba_config.PARFOR_MAX_TUPLE_SIZE:
        _call(serial_twin(_interpret), ins, outs, rows, in_terms, out_terms, consts, fail,
              n_inst, n_slots, block, 1, *words)
    else:
        chunks = min((n_inst + block - 1) // block, 4 * get_num_threads())
        _call_parallel(_interpret, ins, outs, rows, in_terms, out_terms, consts, fail,
                       n_inst, n_slots, block, chunks, *words)
