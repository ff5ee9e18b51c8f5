"""The 64-bit-lane CPU loops (kernels/vector_width.py): quiet compiles, no leak.

Forcing LLVM's vector width makes it print a remark for every loop it cannot
vectorize, so the forced compilations must hold nothing but the vectorizable
loops, and the option must be cleared afterwards (a later, unrelated
compilation with a loop that cannot vectorize must print nothing either).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

_PROGRAM = """
import numpy as np
from numba import njit
from zorch_nb import KoalaBear as F
from zorch_nb.kernels import vector_width
from zorch_nb.kernels.vector_width import lanes64_width
# Pinned on every host, AVX-512 or not (LLVM splits a 512-bit vector of a
# narrower target in two; the width never changes results): without it a
# host without AVX-512 compiled nothing pinned, and had nothing to leak.
vector_width._WIDTH = 8
from zorch_nb.logup_gkr import GkrLayer, JaggedGkrLayer, jagged_layer_transition, layer_transition

for G in (F, F.ext):
    for H in (F, F.ext):
        mles = (G.random(8, seed=1), G.random(8, seed=2), H.random(8, seed=3), H.random(8, seed=4))
        layer_transition(GkrLayer(*mles, 0))
        jagged_layer_transition(JaggedGkrLayer(*mles, [5, 3]), [3, 2])
F.ext.mul(F.ext.random(4, seed=1), F.ext.random(4, seed=2))

@njit
def first_negative(a):  # data-dependent exit: never vectorizable
    i = 0
    while i < a.shape[0] and a[i] >= 0:
        i += 1
    return i

assert first_negative(np.arange(5.0) - 2) == 0
print("width", lanes64_width(), vector_width._WIDTH)
"""


@pytest.mark.early
def test_cold_compiles_print_no_remarks_and_the_width_does_not_leak(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))  # empty cache: everything compiles
    run = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    assert "width" in run.stdout and run.stdout.split()[-1] == "8"
    remarks = [line for line in run.stderr.splitlines() if "remark" in line]
    assert not remarks, remarks[:5]


# ---- tests from mutation testing: which width is pinned, and that it is
# cleared, decided without an AVX-512 host (the test above pins the width
# itself, so which width a host would get is checked here)

class _Features:
    def __init__(self, text):
        self.text = text

    def flatten(self):
        return self.text


@pytest.mark.parametrize("cpu_name, cpu_features, host, want", [
    ("skylake-avx512", "+avx2,+avx512f,+avx512bw", None, 8),  # 512 bits / 64
    ("sapphirerapids", "+avx512fp16,-avx512f", None, 0),  # a feature *named* like it
    ("znver4", None, None, 0),  # a cross-target name without explicit features
    ("znver4", "", "+avx512f", 0),  # a cross target never reads the host's
    (None, "", "+avx2,+avx512f", 8),  # the host's own features
    ("host", "", "+avx2,+avx512f", 8),  # NUMBA_CPU_NAME=host is the host too
    ("host", "", "+avx2,-avx512f", 0),
    (None, "", RuntimeError("cannot tell"), 0),  # LLVM cannot tell: LLVM chooses
])
def test_the_pinned_width_follows_the_targets_features(monkeypatch, cpu_name, cpu_features,
                                                      host, want):
    from numba.core import config

    from zorch_nb.kernels import vector_width

    def host_features():
        if isinstance(host, Exception):
            raise host
        if host is None:
            pytest.fail("a cross-target build read the host's features")
        return _Features(host)
    monkeypatch.setattr(config, "CPU_NAME", cpu_name)
    monkeypatch.setattr(config, "CPU_FEATURES", cpu_features)
    monkeypatch.setattr(vector_width.llvm, "get_host_cpu_features", host_features)
    assert vector_width.lanes64_width() == want


def test_the_pinned_width_is_cleared_after_every_compile(monkeypatch):
    """The forced width holds for the pinned compilation alone: cleared after
    it, a failed one included (a leaked width printed remarks for every
    later unvectorizable loop of the process)."""
    import numba

    from zorch_nb.kernels import vector_width
    widths = []
    monkeypatch.setattr(vector_width, "_WIDTH", 8)
    monkeypatch.setattr(vector_width, "_set_width", widths.append)

    def fill(a):
        for i in range(a.shape[0]):
            a[i] = i
    compiled = numba.njit(pipeline_class=vector_width._Lanes64Compiler)(fill)
    a = np.zeros(3)
    compiled(a)
    assert widths == [8, 0] and list(a) == [0, 1, 2]

    def broken(a):
        return a.no_such_attribute
    del widths[:]
    with pytest.raises(numba.core.errors.TypingError):
        numba.njit(pipeline_class=vector_width._Lanes64Compiler)(broken)(a)
    assert widths == [8, 0]


def test_the_noalias_compiler_marks_the_array_arguments():
    """NoaliasCompiler's compilation marks its arrays ``noalias`` (Numba's
    default pipeline does not): without it LLVM guards the loop with a
    runtime overlap test, which an in-place call fails (tests/test_cpu_serial.py
    checks the serial twins use this pipeline)."""
    import numba
    from numba.core.compiler import Compiler

    from zorch_nb.kernels.vector_width import NoaliasCompiler

    def add(a, b):
        for i in range(a.shape[0]):
            a[i] += b[i]

    def noalias_count(pipeline):
        f = numba.njit(pipeline_class=pipeline)(add)
        f(np.zeros(4), np.ones(4))
        (ir,) = f.inspect_llvm().values()
        return sum(line.count("noalias") for line in ir.splitlines() if line.startswith("define"))
    assert noalias_count(NoaliasCompiler) > noalias_count(Compiler)
