"""LogUp-GKR transitions and pyramids on the CPU: zorch_nb against plain NumPy uint64.

The NumPy reference (``zorch_nb._numpy_gkr``, the yardstick ``python -m
zorch_nb bench`` times too) is the same fold written the way a user would
without zorch_nb: canonical values in uint64 arrays, ``% p`` after the
products, the jagged index formulas vectorized with ``searchsorted``.  Both
run in the same asv process.  Field modes: ``base`` (base/base), ``mixed`` (base numerators
under extension denominators, the LogUp case), ``ext`` (extension/extension).
Compile time is paid in ``setup``; run with ``asv run --python=same``.
``peakmem_*`` is asv's peak of the whole process (imports, Numba's compiler
and ``setup``'s inputs and yardstick copies included: a no-op body measured
the same); ``track_peak_bytes_*`` is the call's own peak (tracemalloc), the
figure to read -- a pyramid's is about its new layers.
"""
import numpy as np

from zorch_nb import KoalaBear
from zorch_nb import _numpy_gkr as plain
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                                halving_schedule, jagged_layer_transition, layer_transition)

from . import peak_bytes

F = KoalaBear
P = np.uint64(F.p)
W = np.uint64(F.W)
MODES = {"base": (False, False), "mixed": (False, True), "ext": (True, True)}
NUM_BATCHES = 64


def _canonical(words):
    return (F.ext if words.ndim == 2 else F).decode(words).astype(np.uint64)


def _mles(mode, length, seed=1):
    """Random MLEs: uniform words in [0, p) (valid Montgomery words), drawn fast
    so that setup does not dominate ``asv run --quick``."""
    from zorch_nb._bench_gkr import _words
    ne, de = MODES[mode]
    return [_words(np, (length, 4) if e else (length,), seed + i)
            for i, e in enumerate((ne, ne, de, de))]


def _counts(total):
    rng = np.random.default_rng(3)
    raw = rng.random(NUM_BATCHES) + 0.05
    counts = np.maximum(1, (raw / raw.sum() * total).astype(np.int64))
    counts[0] += total - counts.sum()
    return counts.astype(np.int32)


# ---------------------------------------------------------------------------
# benchmarks
# ---------------------------------------------------------------------------

class DenseTransition:
    # 2**10: a layer this small measures the object layer's dispatch overhead;
    # 2**22: past the caches (2**18 of extension data, 24 MiB, fits a 32 MiB L3,
    # where a regression that only adds memory traffic would barely show)
    params = ([2**10, 2**14, 2**18, 2**22], list(MODES))
    param_names = ["n", "mode"]

    def setup(self, n, mode):
        words = _mles(mode, n)
        self.layer = GkrLayer(*words, 0)
        self.canon = [_canonical(x) for x in words]
        layer_transition(self.layer)  # compile this size's kernel outside the timing

    def time_zorch_nb(self, n, mode):
        layer_transition(self.layer)

    def time_numpy_uint64(self, n, mode):
        plain.dense_transition(self.canon, P, W)

    def peakmem_zorch_nb(self, n, mode):
        layer_transition(self.layer)

    def track_peak_bytes_zorch_nb(self, n, mode):
        return peak_bytes(lambda: layer_transition(self.layer))
    track_peak_bytes_zorch_nb.unit = "bytes"


class JaggedTransition:
    params = ([2**14, 2**18], list(MODES))
    param_names = ["n", "mode"]

    def setup(self, n, mode):
        self.rc = _counts(n)
        self.orc = ((self.rc + 1) // 2).astype(np.int32)
        self.width = int(self.orc.sum())
        words = _mles(mode, n)
        self.layer = JaggedGkrLayer(*words, self.rc)
        self.canon = [_canonical(x) for x in words]
        jagged_layer_transition(self.layer, self.orc)  # compile this size's kernel

    def time_zorch_nb(self, n, mode):
        jagged_layer_transition(self.layer, self.orc)

    def time_numpy_uint64(self, n, mode):
        plain.jagged_transition(self.canon, self.rc, self.orc, self.width, P, W)

    def peakmem_zorch_nb(self, n, mode):
        jagged_layer_transition(self.layer, self.orc)

    def track_peak_bytes_zorch_nb(self, n, mode):
        return peak_bytes(lambda: jagged_layer_transition(self.layer, self.orc))
    track_peak_bytes_zorch_nb.unit = "bytes"


class DensePyramid:
    """64 batches (``num_batch_variables`` 6): the pyramid ends at 64 rows, one
    per batch, where ``python -m zorch_nb bench``'s pyramid goes to one row."""
    params = [2**14, 2**18]
    param_names = ["n"]

    def setup(self, n):
        words = _mles("mixed", n)
        self.layer = GkrLayer(*words, 6)
        self.canon = [_canonical(x) for x in words]
        self.reuse = build_pyramid(self.layer)[1:]  # compile (small layers run serial twins)
        build_pyramid(self.layer, fused=False)

    def time_zorch_nb(self, n):
        build_pyramid(self.layer)

    def time_zorch_nb_out(self, n):
        # overwriting an earlier pyramid's layers: no allocations (on large
        # layers, no fresh pages for the operating system to zero)
        build_pyramid(self.layer, out=self.reuse)

    def time_zorch_nb_per_layer(self, n):
        # one parallel call per transition: what the CPU's fused pyramid
        # (a tile carried through four layers in cache) saves
        build_pyramid(self.layer, fused=False)

    def time_numpy_uint64(self, n):
        plain.dense_pyramid(self.canon, self.layer.num_row_variables, P, W)

    def peakmem_zorch_nb(self, n):
        build_pyramid(self.layer)

    def track_peak_bytes_zorch_nb(self, n):
        return peak_bytes(lambda: build_pyramid(self.layer))
    track_peak_bytes_zorch_nb.unit = "bytes"


class JaggedPyramid:
    params = [2**14, 2**18]
    param_names = ["n"]

    def setup(self, n):
        words = _mles("mixed", n)
        self.layer = JaggedGkrLayer(*words, _counts(n))
        self.schedule = halving_schedule(self.layer)
        self.canon = [_canonical(x) for x in words]
        self.reuse = build_jagged_pyramid(self.layer, self.schedule)[1:]  # compile

    def time_zorch_nb(self, n):
        build_jagged_pyramid(self.layer, self.schedule)

    def time_zorch_nb_out(self, n):
        build_jagged_pyramid(self.layer, self.schedule, out=self.reuse)

    def time_numpy_uint64(self, n):
        plain.jagged_pyramid(self.canon, self.layer.row_counts, self.schedule, P, W)

    def peakmem_zorch_nb(self, n):
        build_jagged_pyramid(self.layer, self.schedule)

    def track_peak_bytes_zorch_nb(self, n):
        return peak_bytes(lambda: build_jagged_pyramid(self.layer, self.schedule))
    track_peak_bytes_zorch_nb.unit = "bytes"


class DenseFoldBaseline:
    """The base/base fold written with galois ``GF(p)`` arrays (bench extra).

    Compare with ``DenseTransition.time_zorch_nb`` / ``time_numpy_uint64`` at
    the same size; one size only, as building ``GF(p)`` takes a second.
    """

    params = [2**18]
    param_names = ["n"]

    def setup(self, n):
        from zorch_nb._bench_gkr import _galois_field
        GF = _galois_field()
        if GF is None:
            raise NotImplementedError("galois is not installed (pip install 'zorch_nb[bench]')")
        self.gf = [GF(_canonical(x).astype(np.int64)) for x in _mles("base", n)]
        from zorch_nb._bench_gkr import galois_fold
        galois_fold(*self.gf)  # (its first call ran ~30% slower: warmed outside the timing)

    def time_galois(self, n):
        from zorch_nb._bench_gkr import galois_fold
        galois_fold(*self.gf)
