"""Demo section of the deferred-graph recorder (``python -m zorch_nb demo``).

Records the reference program (16x2 input 1..32 -> ``add_2`` x16 -> reshape
``[1, 16]`` -> ``add_16`` x1 -> reshape ``[]`` = 528), saves the graph, reloads
it and replays it on new inputs without the program.  Both sums are checked
against Python's own: the recorded one against ``sum(range(1, 33))``, the
replayed one against the new inputs' sum.
"""
from __future__ import annotations

import functools
import os
import tempfile

import numpy as np

from .graph import ComputationGraph, Context, In, Out, kernel, run_computation_graph


@kernel
def add_2(x: In[2], out: Out[()]):
    out[()] = x[0] + x[1]


@kernel
def add_16(x: In[16], out: Out[()]):
    s = x[0]
    for i in range(1, 16):
        s = s + x[i]
    out[()] = s


@functools.lru_cache(maxsize=None)
def cube_and_mix(width: int, rounds: int):
    """A kernel of ``rounds`` rounds over ``width`` lanes (a toy permutation,
    for the tests and benchmarks of long kernels): each round maps every lane
    ``v`` to ``v**3 + r`` (``r`` the round number), then adds the lanes' sum
    to each; ``x: In[width]`` -> ``o: Out[width]``."""
    @kernel
    def rounds_of_cube_and_mix(x: In[(width,)], o: Out[(width,)]):
        s = [x[i] for i in range(width)]
        for r in range(rounds):
            s = [v * v * v + r for v in s]
            total = s[0]
            for v in s[1:]:
                total = total + v
            s = [v + total for v in s]
        for i in range(width):
            o[i] = s[i]
    return rounds_of_cube_and_mix


def run(backend: str, log) -> None:
    """Record, save, reload and replay the reference program; ``log`` is print-like.

    ``backend`` is ``"cpu"`` or ``"cupy"`` (other names run the CPU path).
    """
    if backend not in ("cpu", "cupy"):
        log(f"(the graph recorder has CPU and CuPy evaluators: backend {backend} runs it "
            f"on the CPU)")
        backend = "cpu"
    ctx = Context(backend=backend)
    a = ctx.copy_to_device(np.arange(1, 33).reshape(16, 2))
    (b,) = ctx.call_kernel(add_2, 16, a)
    (c,) = ctx.call_kernel(add_16, 1, b.reshape([1, 16]))
    c = c.reshape([])
    recorded = int(ctx.copy_to_host(c))
    log(f"graph: recorded add_2 x16 -> add_16 x1 on 1..32: {recorded} (expected "
        f"{sum(range(1, 33))})")
    graph = ctx.generate_computation_graph([a], [c])
    log(f"graph: {len(graph.templates)} calls, {len(graph.compiled_kernels)} compiled "
        f"kernels, padded buffers {list(graph.padded_lengths)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "reference.zgraph")
        graph.save(path)
        size = os.path.getsize(path)
        loaded = ComputationGraph.load(path)
    new = np.arange(101, 133).reshape(16, 2)
    (out,), commitments = run_computation_graph(loaded, [new], backend=backend)
    replayed, expected = int(out), sum(range(101, 133))
    log(f"graph: saved ({size} bytes), reloaded, replayed on 101..132: {replayed} "
        f"(expected {expected}); input commitment {commitments[0].hex()[:16]}...")
    if recorded != sum(range(1, 33)) or replayed != expected:
        raise SystemExit(f"graph demo check failed on backend {backend}: recorded "
                         f"{recorded}, replayed {replayed}")
