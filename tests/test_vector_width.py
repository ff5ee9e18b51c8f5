"""The 64-bit-lane CPU loops (kernels/vector_width.py): quiet compiles, no leak.

Forcing LLVM's vector width makes it print a remark for every loop it cannot
vectorize, so the forced compilations must hold nothing but the vectorizable
loops, and the option must be cleared afterwards (a later, unrelated
compilation with a loop that cannot vectorize must print nothing either).
"""
import os
import subprocess
import sys

import pytest

_PROGRAM = """
import numpy as np
from numba import njit
from zorch_nb import KoalaBear as F
from zorch_nb.kernels.vector_width import lanes64_width
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
print("width", lanes64_width())
"""


@pytest.mark.early
def test_cold_compiles_print_no_remarks_and_the_width_does_not_leak(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))  # empty cache: everything compiles
    run = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    assert "width" in run.stdout
    remarks = [line for line in run.stderr.splitlines() if "remark" in line]
    assert not remarks, remarks[:5]
