"""CuPy runner of the generated deferred-graph evaluators (CUDA C).

A translation unit is the field preamble + ``monty.cuh`` + the generated text
of :func:`zorch_nb.kernels.graph_codegen.cuda_source`.  Modules are memoized
per (field, source, device).  Importing this module requires CuPy.
"""
from __future__ import annotations

import cupy
import numpy as np

from .field_params import FIELDS
from .graph_codegen import translation_unit
from .launch_config import THREADS_PER_BLOCK, grid_for

__all__ = ["raw_module", "run_evaluator"]

NVRTC_OPTIONS = ("-std=c++17",)


@cupy.memoize(for_each_device=True)
def raw_module(field_name: str, generated: str) -> "cupy.RawModule":
    """Compiled module of a generated evaluator on the current device."""
    return cupy.RawModule(code=translation_unit(FIELDS[field_name], generated),
                          options=NVRTC_OPTIONS)


def run_evaluator(field_name, generated, symbol, inputs, outputs, consts, fail, n_inst):
    """Launch ``symbol`` over ``n_inst`` padded instances (arrays are CuPy uint32)."""
    if n_inst == 0:
        return
    fn = raw_module(field_name, generated).get_function(symbol)
    fn((grid_for(n_inst),), (THREADS_PER_BLOCK,),
       tuple(inputs) + tuple(outputs) + (consts, fail, np.uint64(n_inst)))
