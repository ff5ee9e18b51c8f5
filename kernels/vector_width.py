"""Numba CPU kernels compiled with one 64-bit lane per vector slot.

Why: the extension-field loops mix 32-bit words (loads, stores, reduced
results) with 64-bit products.  On AVX-512, LLVM's loop vectorizer sizes such
loops by the narrow type (16 lanes), so every 64-bit value of the body takes
two zmm registers; the all-extension fold body then needs more registers than
exist and a sixth of its instructions are spills.  With the vectorization
factor pinned to 8 (512 bits / 64) each 64-bit value is one register: the
dense ext/ext fold ran about twice as fast at 2**22 leaves on the 2-core
Zen 5 development machine (figures in benchmarks/results/README.md).

How: :func:`njit_lanes64` compiles a *serial* loop function -- a run of
slots, called per chunk from a parallel kernel -- with a compiler pipeline
that sets LLVM's ``-force-vector-width`` for its compilation only and clears
it afterwards (Numba holds its global compiler lock throughout, so no other
compilation sees it; the width changes which vector code LLVM emits, never
the results), and with its array arguments marked ``noalias`` as a parfor
body's are, so the loop needs no runtime alias checks.  The launchers pass
no overlapping arrays (``launch_checks``) except ``out`` *being* an input of
an elementwise op (``E.mul(a, b, out=a)``): iteration ``i`` stores only
the words of element ``i``, computed from the loads of element ``i`` (a data
dependence no reordering breaks), and no other iteration reads them, so
the result is the same (checked in place at 20000 elements by
tests/test_kernel_layer.py).  Keep such a function to the one vectorizable loop:
with the width forced LLVM prints a remark for every loop it cannot
vectorize.  The cached machine code keeps the width, so a cache hit needs
nothing.

Only where it was measured: a target with AVX-512 (measured with llvmlite
0.50 / LLVM 22); any other target gets LLVM's own choice.
"""
import llvmlite.binding as llvm
from numba.core import config
from numba.core.compiler import Compiler

from .jit import njit  # numba.njit, cache keyed on every kernel source

__all__ = ["njit_lanes64", "lanes64_width", "NoaliasCompiler"]


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


class NoaliasCompiler(Compiler):
    """Numba's default pipeline with its array arguments marked ``noalias``, as
    a parfor body's are.  For the serial twins of the parallel kernels
    (:func:`.cpu_threads.serial_twin`): without it LLVM guards each loop
    with a runtime overlap test, and an elementwise op writing over its
    operand (``E.add(acc, x, out=acc)``, allowed by the launch checks) fails
    the test and runs the scalar loop -- 11x slower at 2**20 on one thread.
    The launchers pass overlapping arrays only as such elementwise aliases,
    so the assumption holds as it does for the parallel compile."""

    def compile_extra(self, func):
        self.state.flags.noalias = True  # this compilation's own flags
        return super().compile_extra(func)


class _Lanes64Compiler(NoaliasCompiler):
    """:class:`NoaliasCompiler` with the vectorization factor pinned."""

    def compile_extra(self, func):
        if not _WIDTH:
            return super().compile_extra(func)
        _set_width(_WIDTH)
        try:
            return super().compile_extra(func)
        finally:
            _set_width(0)  # 0: LLVM chooses again


def njit_lanes64(fn):
    """``@njit(cache=True)`` for a serial loop function with ``noalias`` arrays and
    64-bit-lane vectorization (see module)."""
    return njit(cache=True, pipeline_class=_Lanes64Compiler)(fn)
