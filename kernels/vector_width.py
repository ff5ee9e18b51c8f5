"""Numba CPU kernels compiled with one 64-bit lane per vector slot.

Why: the extension-field loops mix 32-bit words (loads, stores, reduced
results) with 64-bit products.  On AVX-512, LLVM's loop vectorizer sizes such
loops by the narrow type (16 lanes), so every 64-bit value of the body takes
two zmm registers; the all-extension fold body then needs more registers than
exist and a sixth of its instructions are spills.  With the vectorization
factor pinned to 8 (512 bits / 64) each 64-bit value is one register: the
dense ext/ext fold ran about twice as fast at 2**22 leaves on the 2-core
Zen 5 development machine (figures in benchmarks/results/README.md).

How: :func:`njit_lanes64` is ``numba.njit(parallel=True, cache=True)`` with a
compiler pipeline that sets LLVM's ``-force-vector-width`` for the whole
compilation -- the parfor body and the force-inlined callees with loops of
their own are compiled inside it -- and clears it afterwards.  Numba holds
its global compiler lock throughout, so no other Numba compilation sees the
option; the width changes which vector code LLVM emits, never the results.
The cached machine code keeps the width, so a cache hit needs nothing.

Only where it was measured: a target with AVX-512 (measured with llvmlite
0.50 / LLVM 22); any other target gets LLVM's own choice.
"""
import llvmlite.binding as llvm
from numba import njit
from numba.core import config
from numba.core.compiler import Compiler

__all__ = ["njit_lanes64", "lanes64_width"]


def lanes64_width() -> int:
    """The pinned vectorization factor, or 0 (LLVM chooses) where not measured."""
    if config.CPU_NAME in (None, "host"):
        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # LLVM cannot tell on this host
            return 0
    else:  # a cross-target build (NUMBA_CPU_NAME): trust only explicit features
        features = config.CPU_FEATURES or ""
    return 8 if "+avx512f" in features.split(",") else 0


_WIDTH = lanes64_width()


def _set_width(width: int) -> None:
    llvm.set_option("zorch_nb", f"-force-vector-width={width}")


class _Lanes64Compiler(Compiler):
    """Numba's default pipeline, run with the vectorization factor pinned."""

    def compile_extra(self, func):
        if not _WIDTH:
            return super().compile_extra(func)
        _set_width(_WIDTH)
        try:
            return super().compile_extra(func)
        finally:
            _set_width(0)  # 0: LLVM chooses again


def njit_lanes64(fn):
    """``@njit(parallel=True, cache=True)`` with 64-bit-lane vectorization (see module)."""
    return njit(parallel=True, cache=True, pipeline_class=_Lanes64Compiler)(fn)
