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


def assert_layers_equal(got, want, what="", first=0):
    """Two pyramids (or runs of layers) equal byte for byte, layer by layer.

    A layer is a layer object (its ``.mles``) or a sequence of MLEs; device
    arrays (anything with ``.get()``, on either side) are copied to the host first.  ``first``
    numbers the layers in the messages (1 when the input layer is left out).
    """
    assert len(got) == len(want), f"{what}: {len(got)} layers, expected {len(want)}"
    for l, (g, w) in enumerate(zip(got, want), start=first):
        for a, b in zip(getattr(g, "mles", g), getattr(w, "mles", w)):
            np.testing.assert_array_equal(a.get() if hasattr(a, "get") else a,
                                          b.get() if hasattr(b, "get") else b,
                                          err_msg=f"{what} layer {l}")
