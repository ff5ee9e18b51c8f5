"""``out=`` of ``layer_transition`` and ``build_pyramid`` (and their jagged
twins): results written into the layers of an earlier result.

The bytes must be those of a fresh result (which test_logup_gkr.py checks
against the big-int reference) on every path -- the fused CPU pyramid, one
transition per call, the Numba-CUDA backend (the simulator in CI) -- with
``out`` holding stale words beforehand; the call returns ``out`` itself and
leaves its input alone.  Every misfit is refused before anything is written.
(CuPy arrays: tests/test_gkr_cupy_emulated.py.)
"""
import numpy as np
import pytest

from conftest import SETS_SHAPE_IN_PLACE
from gkr_cases import random_jagged_layer
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                                halving_schedule, jagged_layer_transition, layer_transition)

MODES = [(ne, de) for ne in (0, 1) for de in (0, 1)]
FIELDS = [KoalaBear, BabyBear]


def _layer(F, ne, de, nv, nbv, seed):
    return GkrLayer(*[(F.ext if e else F).random(2**nv, seed=seed + i)
                      for i, e in enumerate((ne, ne, de, de))], nbv, F)


def _stale(layers):
    """Layers of the same forms as ``layers``, full of a word no fold writes
    there by chance (not canonical: >= p)."""
    return [GkrLayer(*(np.full_like(x, 0xFFFFFFFF) for x in la.mles),
                     la.num_batch_variables, la.field) for la in layers]


def _assert_same(got, want):
    assert len(got) == len(want)
    for l, (g, w) in enumerate(zip(got, want)):
        for x, y in zip(g.mles, w.mles):
            assert type(x) is np.ndarray and x.shape == y.shape
            np.testing.assert_array_equal(x, y, err_msg=f"layer {l}")


def _check_into(first, want, pyramid, transition, stale, same, fused_options):
    """``pyramid(fused, out)`` and ``transition(out)`` (``None``: a floor) of
    ``first`` into ``stale`` layers: the bytes of ``want``, ``out`` returned,
    ``first`` untouched."""
    keep = [x.copy() for x in first.mles]
    for fused in fused_options:
        out = stale(want[1:])
        got = pyramid(fused, out)
        assert got[0] is first and all(g is o for g, o in zip(got[1:], out))
        same(got, want)
    if transition is not None:
        into = stale(want[1:2])[0]
        assert transition(into) is into
        same([into], want[1:2])
    for x, y in zip(keep, first.mles):
        np.testing.assert_array_equal(x, y)  # input untouched


def _check_paths(F, ne, de, backend, fused_options, cases):
    for nv, nbv in cases:
        first = _layer(F, ne, de, nv, nbv, seed=nv + 17)
        # (a floor has nothing to fuse or fold: test_floor_with_out)
        _check_into(first, build_pyramid(first, fused=False),
                    lambda fused, out: build_pyramid(first, backend=backend, fused=fused,
                                                     out=out),
                    (lambda out: layer_transition(first, backend=backend, out=out))
                    if nv > nbv else None, _stale, _assert_same,
                    [f for f in fused_options if nv > nbv or not f])


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", FIELDS, ids=["koalabear", "babybear"])
def test_cpu_out_equals_fresh(F, ne, de):
    """Fused (several tiles, several calls) and per-transition, a batch, a floor."""
    _check_paths(F, ne, de, None, (None, True, False),
                 [(14, 0), (11, 3), (3, 0), (4, 4)])


@pytest.mark.cudasim
@pytest.mark.parametrize("ne,de", MODES)
def test_numba_out_equals_fresh(ne, de):
    """backend="numba" with ``out``: one launch per transition (its fused
    kernel writes layer buffers of its own layout), host arrays copied back."""
    F = KoalaBear if ne == de else BabyBear
    _check_paths(F, ne, de, "numba", (None, False), [(6, 0), (4, 2), (2, 2)])
    first = _layer(F, ne, de, 4, 0, seed=3)
    out = build_pyramid(first)[1:]
    with pytest.raises(ValueError, match="fused=True with `out` needs .* use fused=None"):
        build_pyramid(first, backend="numba", fused=True, out=out)


def test_out_reused_again_and_again():
    """One set of buffers through several pyramids of different inputs."""
    out = None
    for seed in range(3):
        first = _layer(KoalaBear, 0, 1, 10, 1, seed=100 * seed)
        want = build_pyramid(first)
        out = want[1:] if out is None else out
        got = build_pyramid(first, out=out)
        _assert_same(got, want)


def _refused(exc, match, call, outs):
    before = [x.copy() for la in outs for x in la.mles]
    with pytest.raises(exc, match=match):
        call()
    after = [x for la in outs for x in la.mles]
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)  # nothing written


def test_out_misfits_are_refused_before_writing():
    F = KoalaBear
    first = _layer(F, 0, 1, 6, 0, seed=1)  # base numerators, extension denominators
    pyr = build_pyramid(first)
    out = _stale(pyr[1:])
    one = out[0]
    _refused(TypeError, r"`out` must be a GkrLayer to overwrite .* not str",
             lambda: layer_transition(first, out="layer"), [])
    _refused(TypeError, r"`out` must be a list of GkrLayer .* not GkrLayer",
             lambda: build_pyramid(first, out=one), [one])
    _refused(ValueError, r"`out` must hold one layer per transition: 6 .* not 5",
             lambda: build_pyramid(first, out=out[1:]), out)
    _refused(ValueError, r"`out\[1\]` must hold the result's 16 rows with extension "
             r"numerators, extension denominators: MLE shapes \(\(16, 4\),",
             lambda: build_pyramid(first, out=[out[0], out[0]] + out[2:]), out)
    _refused(ValueError, r"`out` must hold the result's 32 rows",
             lambda: layer_transition(first, out=out[1]), out)
    bb = build_pyramid(_layer(F, 0, 0, 6, 0, seed=2))[1]
    _refused(ValueError, r"32 rows with extension numerators, extension denominators: MLE "
             r"shapes \(\(32, 4\), \(32, 4\), \(32, 4\), \(32, 4\)\), not \(\(32,\),",
             lambda: layer_transition(first, out=bb), [bb])
    other = GkrLayer(*one.mles, 0, BabyBear)
    _refused(ValueError, r"`out` is a BabyBear layer; the result is KoalaBear",
             lambda: layer_transition(first, out=other), [other])
    batched = GkrLayer(*one.mles, 2, F)
    _refused(ValueError, r"`out` has num_batch_variables = 2; the result has 0",
             lambda: layer_transition(first, out=batched), [batched])
    frozen = _stale(pyr[1:])
    frozen[2].denominator_1.flags.writeable = False
    _refused(ValueError, r"`out\[2\]\.denominator_1` is read-only",
             lambda: build_pyramid(first, out=frozen), frozen)
    wide = np.zeros((32, 8), np.uint32)
    strided = GkrLayer(wide[:, :4], *one.mles[1:])
    _refused(ValueError, r"`out\.numerator_0` must be C-contiguous",
             lambda: layer_transition(first, out=strided), [strided])


def test_out_sharing_memory_is_refused():
    F = KoalaBear
    # an output over the input: a strided input reaches past its nbytes
    big = np.zeros(128, np.uint32)
    big[::2] = F.random(64, seed=1)
    first = GkrLayer(big[::2], F.random(64, seed=2), F.random(64, seed=3),
                     F.random(64, seed=4))
    over = GkrLayer(big[65:97], *(np.zeros(32, np.uint32) for _ in range(3)))
    _refused(ValueError, r"layer_transition: argument `out\.numerator_0` overlaps argument "
             r"`layer\.numerator_0`", lambda: layer_transition(first, out=over), [over])
    # two outputs over one another, in one layer and across layers
    a = np.zeros(32, np.uint32)
    twice = GkrLayer(a, a, np.zeros(32, np.uint32), np.zeros(32, np.uint32))
    _refused(ValueError, r"argument `out\.numerator_1` overlaps argument `out\.numerator_0`",
             lambda: layer_transition(first, out=twice), [twice])
    # across layers of a pyramid, on every path (a contiguous first layer takes
    # the CPU pyramid's compiled test, a strided one the named test up front)
    plain = _layer(F, 0, 0, 6, 0, seed=5)
    for layer in (first, plain):
        for fused in (None, False):
            out = _stale(build_pyramid(layer)[1:])
            out[3] = GkrLayer(out[1].denominator_0[:4], *out[3].mles[1:])
            _refused(ValueError, r"build_pyramid: argument `out\[3\]\.numerator_0` overlaps "
                     r"argument `out\[1\]\.denominator_0`",
                     lambda: build_pyramid(layer, fused=fused, out=out), out)
    out = _stale(build_pyramid(plain)[1:])
    out[0] = GkrLayer(*out[0].mles[:3], plain.denominator_1[32:])
    _refused(ValueError, r"build_pyramid: argument `out\[0\]\.denominator_1` overlaps "
             r"argument `first\.denominator_1`", lambda: build_pyramid(plain, out=out), out)
    # part of the input layer itself as an output
    own = GkrLayer(first.numerator_1[:32], *(np.zeros(32, np.uint32) for _ in range(3)))
    _refused(ValueError, r"argument `out\.numerator_0` overlaps argument `layer\.numerator_1`",
             lambda: layer_transition(first, out=own), [own])


def test_floor_with_out():
    floor = _layer(KoalaBear, 1, 1, 3, 3, seed=9)
    assert build_pyramid(floor, out=[]) == [floor]
    with pytest.raises(ValueError, match="fused=True with `out` needs a layer with a row"):
        build_pyramid(floor, fused=True, out=[])


@pytest.mark.gpu
@pytest.mark.parametrize("ne,de", MODES)
def test_gpu_out_equals_fresh(ne, de):
    """CuPy arrays: fused and per-transition into device ``out``, without
    synchronizing, byte for byte the CPU pyramid."""
    import cupy
    import cupyx
    F = KoalaBear if ne == de else BabyBear
    for nv, nbv in [(12, 0), (9, 2)]:
        host = _layer(F, ne, de, nv, nbv, seed=nv + 31)
        want = build_pyramid(host)
        first = GkrLayer(*(cupy.asarray(x) for x in host.mles), nbv, F)
        for fused in (None, False):
            out = build_pyramid(GkrLayer(*(cupy.asarray(x) for x in _stale([host])[0].mles),
                                         nbv, F))[1:]
            cupy.cuda.get_current_stream().synchronize()
            with cupyx.allow_synchronize(False):
                got = build_pyramid(first, fused=fused, out=out)
            assert all(g is o for g, o in zip(got[1:], out))
            for l, (g, w) in enumerate(zip(got, want)):
                for x, y in zip(g.mles, w.mles):
                    np.testing.assert_array_equal(x.get(), y, err_msg=f"fused={fused} {l}")


def test_fused_false_alike_with_out(monkeypatch):
    """``fused=np.False_`` means one call per transition with ``out`` as without."""
    from zorch_nb.kernels import gkr_cpu

    def refuse(*args):
        raise AssertionError("the fused CPU pyramid ran")
    first = _layer(KoalaBear, 1, 0, 8, 0, seed=4)
    want = build_pyramid(first)
    monkeypatch.setattr(gkr_cpu, "pyramid_dense", refuse)
    for fused in (False, np.False_):
        _assert_same(build_pyramid(first, fused=fused, out=_stale(want[1:])), want)


@SETS_SHAPE_IN_PLACE
def test_layers_reshaped_in_place_are_named():
    first = _layer(KoalaBear, 1, 1, 4, 0, seed=6)
    out = _stale(build_pyramid(first)[1:])
    out[3].denominator_1.shape = (4,)
    _refused(ValueError, r"Argument `out\[3\]`: an MLE of this layer changed shape",
             lambda: build_pyramid(first, out=out), out[:3])
    out = _stale(build_pyramid(first)[1:])
    first.numerator_0.shape = (64,)
    for call in (lambda: build_pyramid(first, out=out),
                 lambda: layer_transition(first, out=out[0])):
        _refused(ValueError, r"^an MLE of this layer changed shape", call, out)


# ---- jagged layers --------------------------------------------------------

def _jagged_stale(layers):
    """Jagged layers of the widths and forms of ``layers``, stale words and
    other row counts (all in the first segment)."""
    out = []
    for la in layers:
        counts = np.zeros(la.num_batches, np.int32)
        counts[0] = la.width
        out.append(JaggedGkrLayer(*(np.full_like(x, 0xFFFFFFFF) for x in la.mles), counts,
                                  la.field))
    return out


def _assert_jagged_same(got, want):
    _assert_same(got, want)
    for l, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g.row_counts, w.row_counts, err_msg=f"layer {l}")
        assert g.width == w.width


def _check_jagged_paths(F, ne, de, backend, fused_options):
    rc = np.array([9, 0, 17, 1, 32, 5, 2, 3], np.int32)
    first = random_jagged_layer(F, ne, de, rc, int(rc.sum()) + 3, seed=ne + 2 * de)
    steps = [(s.row_counts, s.width) for s in halving_schedule(first)]
    _check_into(first, build_jagged_pyramid(first, steps, fused=False),
                lambda fused, out: build_jagged_pyramid(first, steps, backend=backend,
                                                        fused=fused, out=out),
                lambda out: jagged_layer_transition(first, steps[0], backend=backend, out=out),
                _jagged_stale, _assert_jagged_same, fused_options)


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", FIELDS, ids=["koalabear", "babybear"])
def test_cpu_jagged_out_equals_fresh(F, ne, de):
    _check_jagged_paths(F, ne, de, None, (None, False))


@pytest.mark.cudasim
@pytest.mark.parametrize("ne,de", MODES)
def test_numba_jagged_out_equals_fresh(ne, de):
    """The fused Numba-CUDA chunks write into ``out`` (host arrays copied back)."""
    _check_jagged_paths(KoalaBear if ne == de else BabyBear, ne, de, "numba", (None, False))


def test_jagged_out_misfits_are_refused():
    F = KoalaBear
    rc = np.array([6, 3, 0, 4], np.int32)
    first = random_jagged_layer(F, 0, 1, rc, 16, seed=3)
    steps = [(s.row_counts, s.width) for s in halving_schedule(first)]
    pyr = build_jagged_pyramid(first, steps)
    out = _jagged_stale(pyr[1:])
    dense = build_pyramid(_layer(F, 0, 1, 3, 0, seed=1))[1]
    _refused(TypeError, r"`out` must be a JaggedGkrLayer to overwrite \(a result of "
             r"jagged_layer_transition or build_jagged_pyramid\), not GkrLayer",
             lambda: jagged_layer_transition(first, steps[0], out=dense), [dense])
    _refused(TypeError, r"`out` must be a list of JaggedGkrLayer",
             lambda: build_jagged_pyramid(first, steps, out=out[0]), out)
    _refused(ValueError, rf"`out` must hold one layer per step \({len(steps)}\), not "
             rf"{len(steps) - 1}", lambda: build_jagged_pyramid(first, steps, out=out[1:]), out)
    _refused(ValueError, rf"`out\[1\]` must hold the result's width of {pyr[2].width} with "
             r"extension numerators, extension denominators",
             lambda: build_jagged_pyramid(first, steps, out=[out[0], out[0]] + out[2:]), out)
    wrong = JaggedGkrLayer(*out[0].mles, np.array([1, 1], np.int32), F)
    _refused(ValueError, r"`out` has 2 segments; the result has 4",
             lambda: jagged_layer_transition(first, steps[0], out=wrong), [wrong])
    twice = list(out)
    twice[1] = JaggedGkrLayer(*out[1].mles[:3], out[0].numerator_0[:out[1].width],
                              out[1].row_counts, F)
    _refused(ValueError, r"build_jagged_pyramid: argument `out\[1\]\.denominator_1` overlaps "
             r"argument `out\[0\]\.numerator_0`",
             lambda: build_jagged_pyramid(first, steps, out=twice), out)
    own = JaggedGkrLayer(first.denominator_0[:pyr[1].width], *out[0].mles[1:],
                         out[0].row_counts, F)
    _refused(ValueError, r"argument `out\.numerator_0` overlaps argument `layer\.denominator_0`",
             lambda: jagged_layer_transition(first, steps[0], out=own), [])
