"""Time ``Context.call_kernel`` on the CPU: the recorder's own cost per call (us).

Usage: ``python benchmarks/record_calls.py`` prints one JSON line, each row
the best of 7 rounds (a fresh Context per round):

* ``mul2 chain``: 1000 calls of a product kernel over 1024 instances, each
  taking the last call's output (a new buffer per call, one layout);
* ``affine``: 1000 calls of a 7-node kernel over 6 instances on one input
  (asv's ``RecordCall`` ``affine6``: the recorder's overhead alone);
* ``sum4, transposed``: 1000 calls over a transposed view (8 instances);
* ``halving pyramid``: a pair-sum kernel from 2^11 instances down to 1, each
  call on ``reshape(n, 2)`` of the last output (12 calls).  Each reshape
  refines the split points of the last output, and that refinement travels
  back through every earlier call: the propagation path, not the cached one;
* ``rounds2 2^14``: the 176-node cube-and-mix kernel over 2^14 instances
  (the eager run dominates: the control row).

For a before/after comparison run it in alternating processes, one checkout
each (``python benchmarks/ab_run.py <checkout> benchmarks/record_calls.py``, a
separate ``NUMBA_CACHE_DIR`` per side), as
for ``benchmarks/results/cpu-2026-12-07-record-calls.json``.
"""
import json
import time

import numpy as np

from zorch_nb import KoalaBear as F
from zorch_nb._demo_graph import cube_and_mix
from zorch_nb.graph import Context, In, Out, kernel


@kernel
def mul2(x: In[()], y: In[()], out: Out[()]):
    out[()] = x[()] * y[()]


@kernel
def affine(x: In[2], o: Out[()]):
    o[()] = x[0] * 7 + x[1] + 3


@kernel
def sum4(x: In[4], o: Out[2]):
    o[0] = x[0] + x[1]
    o[1] = x[2] + x[3]


@kernel
def halve(x: In[2], o: Out[()]):
    o[()] = x[0] + x[1]


def _best_us(setup, step, calls, rounds=7):
    """Best per-call time of ``calls`` steps, each round on a fresh ``setup()``."""
    times = []
    for _ in range(rounds):
        state = setup()
        t0 = time.perf_counter()
        for _ in range(calls):
            state = step(state)
        times.append((time.perf_counter() - t0) / calls)
    return round(min(times) * 1e6, 1)


def main() -> dict:
    def chain():
        ctx = Context(F)
        b = ctx.copy_to_device(np.arange(1, 1025))
        return ctx, b, b

    def chain_step(state):
        ctx, x, b = state
        (y,) = ctx.call_kernel(mul2, 1024, x, b)
        return ctx, y, b

    def one_input(shape, transpose=False):
        def setup():
            ctx = Context(F)
            x = ctx.copy_to_device(np.arange(int(np.prod(shape))).reshape(shape))
            return ctx, (x.T if transpose else x)
        return setup

    def pyramid():
        ctx = Context(F)
        return ctx, ctx.copy_to_device(np.arange(1 << 12)), 1 << 11

    def halve_step(state):
        ctx, h, n = state
        (h,) = ctx.call_kernel(halve, n, h.reshape(n, 2))
        return ctx, h.reshape(n), n // 2

    rounds = cube_and_mix(16, 2)
    x0 = np.random.default_rng(2).integers(0, F.p, size=(1 << 14, 16))

    def big():
        ctx = Context(F)
        return ctx, ctx.copy_to_device(x0)

    def big_step(state):
        state[0].call_kernel(rounds, 1 << 14, state[1])
        return state

    return {
        "mul2 chain, 1024 inst": _best_us(chain, chain_step, 1000),
        "affine, 6 inst, one input": _best_us(
            one_input((6, 2)), lambda s: (s[0].call_kernel(affine, 6, s[1]), s)[1], 1000),
        "sum4, transposed view, 8 inst": _best_us(
            one_input((4, 8), transpose=True),
            lambda s: (s[0].call_kernel(sum4, 8, s[1]), s)[1], 1000),
        "halving pyramid 2^12, per call": _best_us(pyramid, halve_step, 12, rounds=30),
        "rounds2 2^14": _best_us(big, big_step, 5),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
