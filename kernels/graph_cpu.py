"""Numba CPU runner of the generated deferred-graph evaluators.

The source comes from :func:`zorch_nb.kernels.graph_codegen.python_source`.
Numba's on-disk cache cannot hold functions built from generated text, so
compiled evaluators are memoized in this process, keyed by their source: a
graph replayed twice, or two templates sharing a layout, compile once.
Field constants are runtime arguments, so one compiled evaluator serves every
field.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from .monty import mod_add, mod_neg, mod_sub, mont_mul

__all__ = ["compile_evaluator", "run_evaluator"]


@functools.lru_cache(maxsize=None)
def compile_evaluator(source: str, name: str):
    """``njit(parallel=True)`` dispatcher of the function ``name`` in ``source``."""
    namespace = {"np": np, "prange": prange, "mod_add": mod_add, "mod_sub": mod_sub,
                 "mod_neg": mod_neg, "mont_mul": mont_mul}
    exec(compile(source, f"<zorch_graph {name}>", "exec"), namespace)
    return njit(parallel=True)(namespace[name])


def run_evaluator(fn, inputs, outputs, consts, fail, n_inst, p, mu_neg) -> None:
    """Run ``fn`` over ``n_inst`` padded instances.

    ``inputs``/``outputs`` are C-contiguous uint32 padded buffers, ``consts``
    the Montgomery words of the IR constants, ``fail`` a zeroed uint32 array of
    length ``n_inst``; ``p``/``mu_neg`` the field constants.
    """
    fn(*inputs, *outputs, consts, fail, np.int64(n_inst), np.uint32(p), np.uint32(mu_neg))
