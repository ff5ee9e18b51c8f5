"""First-call time (compiles included) of the CPU LogUp-GKR pyramids of one
mode, base numerators over extension denominators (LogUp's layers), small
layers (the serial kernels).  Run with an empty cache to see what a first
call compiles: ``NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/cold_gkr_calls.py``."""
import time

from zorch_nb import KoalaBear as F
from zorch_nb.logup_gkr import GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid
from zorch_nb.logup_gkr import halving_schedule


def mles():
    return (F.random(64, seed=1), F.random(64, seed=2), F.ext.random(64, seed=3),
            F.ext.random(64, seed=4))


t = time.perf_counter()
layer = JaggedGkrLayer(*mles(), [40, 24])
build_jagged_pyramid(layer, halving_schedule(layer))
print("first mixed jagged pyramid %.1f s" % (time.perf_counter() - t), flush=True)
t = time.perf_counter()
build_pyramid(GkrLayer(*mles(), 0))
print("first mixed dense pyramid %.1f s" % (time.perf_counter() - t))
