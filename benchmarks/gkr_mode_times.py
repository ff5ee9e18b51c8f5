"""Steady-state times of the CPU LogUp-GKR kernels per mode (ms, best of 9;
base/base, base over extension, extension/extension), with the asv suite's
inputs: ``python benchmarks/gkr_mode_times.py [log2 leaves, default 22]``.
One row per mode; its columns: dense transition, dense pyramid, jagged
transition and jagged pyramid over 64 segments, then (2**18 leaves) the
jagged transition and pyramid over 16384 short segments (1..31 rows), the
short-segment path."""
import os
import sys

import numpy as np

from field_ops import best_ms  # (this script's folder is first on sys.path)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from asv_benchmarks import bench_gkr as b  # noqa: E402  (the suite's inputs)
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid,  # noqa: E402
                                build_pyramid, halving_schedule, jagged_layer_transition,
                                layer_transition)


def best(fn):
    return best_ms(fn, 9)


def jagged(words, rc):
    layer = JaggedGkrLayer(*words, rc)
    orc = ((rc + 1) // 2).astype(np.int32)
    schedule = halving_schedule(layer)
    return (best(lambda: jagged_layer_transition(layer, orc)),
            best(lambda: build_jagged_pyramid(layer, schedule)))


n = 1 << int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 22
d = np.random.default_rng(5).integers(-15, 16, size=8192)
short = np.full(16384, 16)  # pairs (16 + d, 16 - d): 2**18 rows in all
short[0::2] += d
short[1::2] -= d
for mode in b.MODES:
    words = b._mles(mode, n)
    layer = GkrLayer(*words, 6)
    dense = (best(lambda: layer_transition(layer)), best(lambda: build_pyramid(layer)))
    row = dense + jagged(words, b._counts(n)) + jagged(b._mles(mode, 1 << 18),
                                                       short.astype(np.int32))
    print("%-5s" % mode, " ".join("%8.2f" % x for x in row), flush=True)
