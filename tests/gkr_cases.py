"""Test inputs shared by the GKR test modules (not references: see naive_gkr.py)."""
import numpy as np

from zorch_nb.logup_gkr import JaggedGkrLayer


def random_jagged_layer(F, ne, de, counts, width, seed):
    """A jagged layer with random live rows and zero dead slots.

    ``ne`` / ``de``: whether the numerator / denominator pair is extension.
    """
    counts = np.asarray(counts, np.int32)
    live = int(counts.sum())
    mles = []
    for i, e in enumerate((ne, ne, de, de)):
        x = (F.ext if e else F).random(width, seed=seed + i)
        x[live:] = 0
        mles.append(x)
    return JaggedGkrLayer(*mles, counts, F)
