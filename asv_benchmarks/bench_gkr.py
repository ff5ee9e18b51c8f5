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

from . import CHECKED_PREFIX, calls_per_sample, check_equal, peak_bytes, prepare_once

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


def _check_layers(layers, want, what):
    """Each MLE of each of ``layers`` begins with the canonical values of the
    same MLE of the same layer of ``want`` (the yardstick's, on a prefix: a
    batch element's or a segment's rows)."""
    for i, (layer, ref) in enumerate(zip(layers, want)):
        for name, x, w in zip(("n0", "n1", "d0", "d1"), layer.mles, ref):
            w = np.asarray(w)
            check_equal(_canonical(x[:w.shape[0]]), w, f"{what}: layer {i + 1}, {name}")


def _first_segments(canon, rc, orc, segments):
    """``(rows, rc, orc)`` of the first ``segments`` segments: their rows of
    ``canon`` and their counts (a jagged transition's slots for them come first)."""
    rows = int(np.sum(rc[:segments]))
    return [x[:rows] for x in canon], rc[:segments], orc[:segments]


# ---------------------------------------------------------------------------
# benchmarks
# ---------------------------------------------------------------------------

class DenseTransition:
    # 2**10: a layer this small measures the object layer's dispatch overhead;
    # 2**22: past the caches (at 2**18 an ext/ext transition's inputs and
    # outputs, 24 MiB, fit a 32 MiB L3, where a regression that only adds
    # memory traffic would barely show)
    params = ([2**10, 2**14, 2**18, 2**22], list(MODES))
    param_names = ["n", "mode"]

    @prepare_once
    def setup(self, n, mode):
        calls_per_sample(self, n)
        words = _mles(mode, n)
        self.layer = GkrLayer(*words, 0)
        self.canon = [_canonical(x) for x in words]
        out = layer_transition(self.layer)  # compile this size's kernel outside the timing
        rows = min(n, CHECKED_PREFIX)  # (the first rows fold into the first slots)
        want = [plain.dense_transition([x[:rows] for x in self.canon], P, W)]
        _check_layers([out], want, f"dense transition {mode}")
        self.reuse = out
        for x in out.mles:
            x[...] = 0  # (so the check below sees what out= wrote)
        _check_layers([layer_transition(self.layer, out=self.reuse)], want,
                      f"dense transition {mode} into out")

    def time_zorch_nb(self, n, mode):
        layer_transition(self.layer)

    def time_zorch_nb_out(self, n, mode):
        # into an earlier transition's layer: no fresh pages (at 2**22 a
        # call's 32-128 MiB of new outputs cost the page faults and zeroing)
        layer_transition(self.layer, out=self.reuse)

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

    @prepare_once
    def setup(self, n, mode):
        self.rc = _counts(n)
        self.orc = ((self.rc + 1) // 2).astype(np.int32)
        self.width = int(self.orc.sum())
        words = _mles(mode, n)
        self.layer = JaggedGkrLayer(*words, self.rc)
        self.canon = [_canonical(x) for x in words]
        out = jagged_layer_transition(self.layer, self.orc)  # compile this size's kernel
        rows, rc, orc = _first_segments(self.canon, self.rc, self.orc, 3)
        _check_layers([out], [plain.jagged_transition(rows, rc, orc, int(orc.sum()), P, W)],
                      f"jagged transition {mode}")

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

    @prepare_once
    def setup(self, n):
        words = _mles("mixed", n)
        self.layer = GkrLayer(*words, 6)
        self.canon = [_canonical(x) for x in words]
        self.reuse = build_pyramid(self.layer)[1:]  # compile (small layers run serial twins)
        # batch element 0 (the high index bits select it): the first rows of every layer
        nrv = self.layer.num_row_variables
        want = plain.dense_pyramid([x[:2**nrv] for x in self.canon], nrv, P, W)[1:]
        _check_layers(self.reuse, want, "dense pyramid")
        _check_layers(build_pyramid(self.layer, fused=False)[1:], want,
                      "dense pyramid, one call per layer")
        _check_layers(build_pyramid(self.layer, out=self.reuse)[1:], want,
                      "dense pyramid into out")

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

    @prepare_once
    def setup(self, n):
        words = _mles("mixed", n)
        self.layer = JaggedGkrLayer(*words, _counts(n))
        self.schedule = halving_schedule(self.layer)
        self.canon = [_canonical(x) for x in words]
        self.reuse = build_jagged_pyramid(self.layer, self.schedule)[1:]  # compile
        # segment 0: the first slots of every layer, its own one-segment pyramid
        rc = np.asarray(self.layer.row_counts)
        own = [(counts[:1], int(counts[0])) for counts, _ in self.schedule]
        want = plain.jagged_pyramid([x[:int(rc[0])] for x in self.canon], rc[:1], own, P, W)[1:]
        _check_layers(self.reuse, want, "jagged pyramid")
        _check_layers(build_jagged_pyramid(self.layer, self.schedule, out=self.reuse)[1:],
                      want, "jagged pyramid into out")

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

    @prepare_once
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
