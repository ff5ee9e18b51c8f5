"""The GKR launchers called directly (``zorch_nb.kernels.gkr_cpu``,
``gkr_cuda_numba``, ``gkr_cupy``), as research code calls them.

Valid calls against the big-int reference of ``naive_gkr.py`` -- every mode,
a pyramid shorter than its first layer allows, jagged layers with empty,
odd and padded segments and dead slots, the fused GPU chunk and tail -- and
every misuse refused with a ``TypeError``/``ValueError`` naming the launcher
and the argument, on every backend (the checks are one module,
``kernels/launch_checks.py``).  Before the checks, a non-power-of-two pyramid
left output slots unwritten, a strided output was never written, and short
or mismatched arrays were read and written out of bounds.

The Numba-CUDA launchers run under the simulator with tiny inputs; the CuPy
ones on a GPU or, with ``ZORCH_EMULATE_CUPY=1``, under the host emulation.
"""
import re

import numpy as np
import pytest

import naive_gkr
from conftest import BACKENDS, to_backend, to_host
from zorch_nb import BabyBear, KoalaBear
from zorch_nb._backend import kernels_for
from zorch_nb.kernels import monty
from zorch_nb.kernels.launch_config import GKR_JAGGED_CHUNK

MODES = [pytest.param(ne, de, id=f"{'e' if ne else 'b'}{'e' if de else 'b'}")
         for ne in (False, True) for de in (False, True)]
F = KoalaBear


@pytest.fixture(params=BACKENDS)
def k(request):
    """The GKR kernel module of the backend under test, and its name."""
    return kernels_for(request.param, "gkr"), request.param


def words(Fi, n, ext, seed):
    return (Fi.ext if ext else Fi).random(n, seed=seed)


def layer(Fi, n, ne, de, seed=0):
    """Four host MLEs: numerators extension if ``ne``, denominators if ``de``."""
    return [words(Fi, n, e, seed + i) for i, e in enumerate((ne, ne, de, de))]


def out_shapes(n, ne, de):
    """Shapes of the four outputs of an input layer in mode ``(ne, de)``."""
    on = (n, 4) if ne or de else (n,)
    od = (n, 4) if de else (n,)
    return on, on, od, od


def zeros(shape, backend, dtype=np.uint32):
    return to_backend(np.zeros(shape, dtype), backend)


def outs(n, ne, de, backend):
    return [zeros(s, backend) for s in out_shapes(n, ne, de)]


def dev(xs, backend):
    return [to_backend(np.array(x, copy=True), backend) for x in xs]


def reference_words(Fi, ref):
    return naive_gkr.layer_words(Fi.name, ref)


def assert_words(got, want, what=""):
    for g, w in zip(got, want):
        g = to_host(g)
        assert g.shape == w.shape, what
        np.testing.assert_array_equal(g, w, err_msg=what)


# ---- valid calls ---------------------------------------------------------------

@pytest.mark.parametrize("Fi", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
@pytest.mark.parametrize("ne,de", MODES)
def test_fold_dense_matches_big_ints(k, Fi, ne, de):
    k, backend = k
    ins = layer(Fi, 8, ne, de)
    got = outs(4, ne, de, backend)
    k.fold_dense(*dev(ins, backend), *got, Fi.params)
    ref = naive_gkr.dense_transition(Fi.name, naive_gkr.layer_from_words(Fi.name, *ins))
    assert_words(got, reference_words(Fi, ref))


@pytest.mark.parametrize("ne,de", MODES)
def test_jagged_transition_matches_big_ints(k, ne, de):
    k, backend = k
    rc = np.array([3, 0, 4, 1], np.int32)
    orc = np.array([2, 1, 3, 1], np.int32)  # padding in segments 1 and 2
    width = int(orc.sum()) + 2  # two dead slots
    ins = layer(F, int(rc.sum()) + 1, ne, de, seed=5)  # one unused input row
    got = outs(width, ne, de, backend)
    prefix = zeros((2, 4), backend, np.int64)
    k.jagged_transition(to_backend(rc, backend), to_backend(orc, backend), prefix,
                        *dev(ins, backend), *got, F.params)
    ref = naive_gkr.jagged_transition(F.name, naive_gkr.layer_from_words(F.name, *ins),
                                      list(rc), list(orc), width)
    assert_words(got, reference_words(F, ref))
    assert to_host(prefix).tolist() == [np.cumsum(rc).tolist(), np.cumsum(orc).tolist()]


def _flat_buffers(layers, backend):
    """Numba-CUDA's pyramid form: one flat buffer per layer, on0 | on1 | od0 | od1."""
    return [to_backend(np.concatenate([to_host(x).reshape(-1) for x in o]), backend)
            for o in layers]


@pytest.mark.parametrize("ne,de", MODES)
def test_fold_dense_of_the_largest_words_matches_big_ints(k, ne, de):
    """Every input word p - 1 (the largest sums of products; random words
    almost never reach them): frac_ee's last numerator coefficient
    overflowed with one reduction removed, and passed every other test."""
    k, backend = k
    ins = [np.full(s, F.p - 1, np.uint32) for s in out_shapes(2, ne, de)]
    if not ne and de:  # the base numerators of a mixed layer
        ins[:2] = [np.full(2, F.p - 1, np.uint32)] * 2
    got = outs(1, ne, de, backend)
    k.fold_dense(*dev(ins, backend), *got, F.params)
    ref = naive_gkr.dense_transition(F.name, naive_gkr.layer_from_words(F.name, *ins))
    assert_words(got, reference_words(F, ref))


def test_touching_arrays_are_not_overlapping():
    """The GPU launchers' overlap check: an output ending where an input
    starts (adjacent slices of one buffer) shares no memory and is accepted."""
    from zorch_nb.kernels.launch_checks import check_gkr_disjoint
    buf = np.zeros(8, np.uint32)
    check_gkr_disjoint("t", [("on0", buf[:4])], [("n0", buf[4:])])
    check_gkr_disjoint("t", [("on0", buf[4:])], [("n0", buf[:4])])
    with pytest.raises(ValueError, match="`on0`.*overlaps.*`n0`|`n0`.*`on0`"):
        check_gkr_disjoint("t", [("on0", buf[:5])], [("n0", buf[4:])])


def _check_pyramid(k, backend, ne, de, n, depth, seq=list):
    """A dense pyramid of ``depth`` layers against the big ints, its sequence
    arguments passed through ``seq`` (``iter``: read once)."""
    ins = layer(F, n, ne, de, seed=2)
    want, ref = [], naive_gkr.layer_from_words(F.name, *ins)
    for _ in range(depth):
        ref = naive_gkr.dense_transition(F.name, ref)
        want.append(reference_words(F, ref))
    layers = [outs(n >> (l + 1), ne, de, backend) for l in range(depth)]
    if backend == "numba":
        bufs = _flat_buffers(layers, backend)
        k.pyramid_dense(seq(dev(ins, backend)), seq(bufs), F.params)
        got = [to_host(b) for b in bufs]
        want = [np.concatenate([w.reshape(-1) for w in ws]) for ws in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    else:
        k.pyramid_dense(seq(dev(ins, backend)), seq([seq(o) for o in layers]), F.params)
        for l, (g, w) in enumerate(zip(layers, want)):
            assert_words(g, w, f"layer {l + 1}")


@pytest.mark.parametrize("ne,de", MODES)
def test_pyramid_dense_matches_big_ints(k, ne, de):
    k, backend = k
    _check_pyramid(k, backend, ne, de, 16, 3)  # fewer layers than log2(16): it may stop early


def _jagged_steps(backend, ne, de, nb_counts=((5, 2, 0, 7), (3, 1, 0, 4), (2, 1, 0, 2),
                                              (1, 1, 0, 1))):
    """A jagged layer and GKR_JAGGED_CHUNK halving steps, with references."""
    rc = np.array(nb_counts[0], np.int32)
    ins = layer(F, int(rc.sum()), ne, de, seed=11)
    ref = naive_gkr.layer_from_words(F.name, *ins)
    steps, want, prev = [], [], list(rc)
    for counts in nb_counts[1:]:
        width = sum(counts) + 1  # one dead slot per layer
        ref = naive_gkr.jagged_transition(F.name, ref, prev, list(counts), width)
        want.append(reference_words(F, ref))
        steps.append((to_backend(np.array(counts, np.int32), backend),
                      outs(width, ne, de, backend)))
        prev = list(counts)
    return to_backend(rc, backend), dev(ins, backend), steps, want


@pytest.mark.parametrize("ne,de", MODES)
def test_fused_jagged_chunk_and_tail_match_big_ints(k, ne, de):
    k, backend = k
    if backend == "cpu":
        pytest.skip("the fused jagged launchers are GPU launchers")
    rc, ins, steps, want = _jagged_steps(backend, ne, de)
    prefix = zeros(4 * 4, backend, np.int64)
    k.jagged_chunk(rc, prefix, ins, steps, F.params)
    for l, ((_, got), w) in enumerate(zip(steps, want)):
        assert_words(got, w, f"chunk layer {l + 1}")
    if hasattr(k, "jagged_tail"):
        rc, ins, steps, want = _jagged_steps(backend, ne, de)
        k.jagged_tail(rc, zeros(2 * 4, backend, np.int64), ins, steps, F.params)
        for l, ((_, got), w) in enumerate(zip(steps, want)):
            assert_words(got, w, f"tail layer {l + 1}")


def test_direct_calls_match_the_object_layer():
    """The object layer's transitions are these launchers (CPU)."""
    from zorch_nb.logup_gkr import GkrLayer, JaggedGkrLayer, jagged_layer_transition, \
        layer_transition
    k = kernels_for("cpu", "gkr")
    ins = layer(F, 32, True, False, seed=3)
    got = outs(16, True, False, "cpu")
    k.fold_dense(*ins, *got, F.params)
    assert_words(got, layer_transition(GkrLayer(*ins, 0, F)).mles)
    rc, orc = np.array([7, 0, 9, 0], np.int32), np.array([4, 1, 5, 0], np.int32)
    ins = layer(F, 16, False, True, seed=4)
    got = outs(10, False, True, "cpu")
    k.jagged_transition(rc, orc, np.empty((2, 4), np.int64), *ins, *got, F.params)
    assert_words(got, jagged_layer_transition(JaggedGkrLayer(*ins, rc, F), orc).mles)


def test_fold_dense_of_an_empty_layer_writes_nothing(k):
    k, backend = k
    k.fold_dense(*(zeros(0, backend) for _ in range(8)), F.params)


# ---- misuse: refused, naming the launcher and the argument ---------------------

def _strided(backend, n, ext=False):
    # every other row of a larger array: C-discontiguous
    return to_backend(np.zeros((2 * n, 4) if ext else (2 * n,), np.uint32), backend)[::2]


def _fold(k, d, ins=None, outs_=None, f=F.params, n=8, ne=False, de=False):
    ins = dev(layer(F, n, ne, de), d) if ins is None else ins
    outs_ = outs(n // 2, ne, de, d) if outs_ is None else outs_
    return k.fold_dense(*ins, *outs_, f)


def _jagged(k, d, rc=None, orc=None, prefix=None, ins=None, outs_=None, ne=False, de=True):
    rc = to_backend(np.array([3, 2], np.int32), d) if rc is None else rc
    orc = to_backend(np.array([2, 1], np.int32), d) if orc is None else orc
    prefix = zeros((2, 2), d, np.int64) if prefix is None else prefix
    ins = dev(layer(F, 5, ne, de), d) if ins is None else ins
    outs_ = outs(3, ne, de, d) if outs_ is None else outs_
    return k.jagged_transition(rc, orc, prefix, *ins, *outs_, F.params)


def _over(d, n):
    """One zeroed buffer of ``2 n`` words on the backend (views of it overlap)."""
    return zeros(2 * n, d)


def misuse_cases():
    """(id, call(k, backend), exception, words its message must contain); the
    launcher's name is checked too."""
    I, O = dev, outs  # noqa: E741 (short names keep the table readable)

    def base(d, n=8, seed=0):
        return I(layer(F, n, False, False, seed), d)

    cases = [
        # fold_dense: forms, lengths, dtypes, layouts
        ("fold odd length", lambda k, d: _fold(k, d, ins=base(d, 7), outs_=O(3, 0, 0, d)),
         ValueError, ["fold_dense", "`n0`", "even"]),
        ("fold outputs not half", lambda k, d: _fold(k, d, outs_=O(3, 0, 0, d)),
         ValueError, ["fold_dense", "`on0`", "(4,)"]),
        ("fold n1 shorter", lambda k, d: _fold(k, d, ins=[base(d)[0], base(d, 6)[1]]
                                                + base(d)[2:]),
         ValueError, ["fold_dense", "`n1`"]),
        ("fold d0 longer", lambda k, d: _fold(k, d, ins=base(d)[:2] + base(d, 10)[2:]),
         ValueError, ["fold_dense", "`d0`", "8"]),
        ("fold n1 ext, n0 base", lambda k, d: _fold(
            k, d, ins=[base(d)[0], I([words(F, 8, True, 1)], d)[0]] + base(d)[2:]),
         ValueError, ["fold_dense", "`n1`", "shape"]),
        ("fold flat ext output", lambda k, d: _fold(
            k, d, ne=True, outs_=[zeros(16, d)] + O(4, True, False, d)[1:]),
         ValueError, ["fold_dense", "`on0`", "(4, 4)"]),
        ("fold base od0 in ext-denominator mode", lambda k, d: _fold(
            k, d, de=True, outs_=O(4, True, True, d)[:2] + [zeros(4, d), zeros((4, 4), d)]),
         ValueError, ["fold_dense", "`od0`", "(4, 4)"]),
        # flat (4 n,) extension words, which the field launchers take: read
        # as base words here, so the message says which and why
        ("fold flat ext denominators", lambda k, d: _fold(
            k, d, ins=base(d)[:2] + [I([words(F, 8, True, 2)], d)[0].reshape(-1)] * 2),
         ValueError, ["fold_dense", "`d0`", "`d0` reads as 32 base words", "(n, 4) arrays"]),
        ("fold (n, 3) input", lambda k, d: _fold(
            k, d, ins=[zeros((8, 3), d)] * 2 + base(d)[2:]),
         ValueError, ["fold_dense", "`n0`", "(n, 4)"]),
        ("fold int32 input", lambda k, d: _fold(
            k, d, ins=base(d)[:3] + [zeros(8, d, np.int32)]),
         TypeError, ["fold_dense", "`d1`", "uint32"]),
        ("fold uint64 output", lambda k, d: _fold(
            k, d, outs_=O(4, 0, 0, d)[:3] + [zeros(4, d, np.uint64)]),
         TypeError, ["fold_dense", "`od1`", "uint32"]),
        ("fold list input", lambda k, d: _fold(k, d, ins=[[0] * 8] + base(d)[1:]),
         TypeError, ["fold_dense", "`n0`"]),
        ("fold field object", lambda k, d: _fold(k, d, f=KoalaBear),
         TypeError, ["fold_dense", "`f`", "FieldParams"]),
        ("fold strided ext output (never written)", lambda k, d: _fold(
            k, d, ne=True, outs_=[to_backend(np.zeros((4, 8), np.uint32), d)[:, :4]]
            + O(4, True, False, d)[1:]),
         ValueError, ["fold_dense", "`on0`", "C-contiguous"]),
        ("fold strided input", lambda k, d: _fold(k, d, ins=[base(d)[0], _strided(d, 8)]
                                                  + base(d)[2:]),
         ValueError, ["fold_dense", "`n1`", "C-contiguous"]),
        ("fold strided ext input", lambda k, d: _fold(
            k, d, de=True, ins=base(d)[:2] + [_strided(d, 8, True)] * 2,
            outs_=O(4, True, True, d)),
         ValueError, ["fold_dense", "`d0`", "C-contiguous"]),
        # overlaps: an output over an input, two outputs over each other
        ("fold output over an input", lambda k, d: (lambda b: _fold(
            k, d, ins=[b[:8]] + base(d)[1:], outs_=[b[2:6]] + O(4, 0, 0, d)[1:]))(_over(d, 8)),
         ValueError, ["fold_dense", "`on0`", "`n0`", "overlaps"]),
        ("fold output is an input's tail", lambda k, d: (lambda b: _fold(
            k, d, ins=base(d)[:3] + [b[:8]], outs_=O(4, 0, 0, d)[:3] + [b[4:8]]))(
            _over(d, 8)),
         ValueError, ["fold_dense", "`od1`", "`d1`", "overlaps"]),
        ("fold two outputs one array", lambda k, d: (lambda o: _fold(
            k, d, outs_=[o, o] + O(4, 0, 0, d)[2:]))(zeros(4, d)),
         ValueError, ["fold_dense", "`on", "overlaps"]),
        ("fold outputs half over", lambda k, d: (lambda b: _fold(
            k, d, outs_=O(4, 0, 0, d)[:2] + [b[:4], b[2:6]]))(_over(d, 4)),
         ValueError, ["fold_dense", "`od", "overlaps"]),
        # jagged_transition: counts, prefix, widths
        ("jagged orc longer", lambda k, d: _jagged(
            k, d, orc=to_backend(np.array([2, 1, 0], np.int32), d)),
         ValueError, ["jagged_transition", "`orc`", "2"]),
        # on0 is the odd one: the message on on1 says the width is on0's (it
        # read as if on1 were wrong)
        ("jagged on0 narrower", lambda k, d: _jagged(
            k, d, outs_=[zeros((2, 4), d)] + O(3, False, True, d)[1:]),
         ValueError, ["jagged_transition", "`on1`", "`on0`'s width 2"]),
        ("jagged no segments", lambda k, d: _jagged(
            k, d, rc=zeros(0, d, np.int32), orc=zeros(0, d, np.int32),
            prefix=zeros((2, 0), d, np.int64)),
         ValueError, ["jagged_transition", "`rc`", "nb >= 1"]),
        ("jagged rc int64", lambda k, d: _jagged(k, d, rc=zeros(2, d, np.int64)),
         TypeError, ["jagged_transition", "`rc`", "int32", "astype(numpy.int32)"]),
        ("jagged prefix int32", lambda k, d: _jagged(k, d, prefix=zeros((2, 2), d, np.int32)),
         TypeError, ["jagged_transition", "`prefix`", "int64", "astype(numpy.int64)"]),
        ("jagged rc 2-d", lambda k, d: _jagged(k, d, rc=zeros((2, 1), d, np.int32)),
         ValueError, ["jagged_transition", "`rc`", "1-d"]),
        ("jagged strided orc", lambda k, d: _jagged(
            k, d, orc=to_backend(np.zeros(4, np.int32), d)[::2]),
         ValueError, ["jagged_transition", "`orc`", "C-contiguous"]),
        ("jagged prefix flat", lambda k, d: _jagged(k, d, prefix=zeros(4, d, np.int64)),
         ValueError, ["jagged_transition", "`prefix`", "(2, 2)"]),
        ("jagged prefix short", lambda k, d: _jagged(k, d, prefix=zeros((2, 1), d, np.int64)),
         ValueError, ["jagged_transition", "`prefix`"]),
        ("jagged prefix int32", lambda k, d: _jagged(k, d, prefix=zeros((2, 2), d, np.int32)),
         TypeError, ["jagged_transition", "`prefix`", "int64"]),
        ("jagged outputs of two widths", lambda k, d: _jagged(
            k, d, outs_=O(3, 0, 1, d)[:3] + [zeros((4, 4), d)]),
         ValueError, ["jagged_transition", "`od1`", "(3, 4)"]),
        ("jagged inputs of two lengths", lambda k, d: _jagged(
            k, d, ins=I(layer(F, 5, 0, 1), d)[:3] + [I([words(F, 4, True, 9)], d)[0]]),
         ValueError, ["jagged_transition", "`d1`"]),
        ("jagged prefix over an output", _jagged_prefix_over,
         ValueError, ["jagged_transition", "`prefix`", "overlaps"]),
        ("jagged output over rc", _jagged_output_over_counts,
         ValueError, ["jagged_transition", "`on0`", "`rc`", "overlaps"]),
    ]
    return cases


def _jagged_prefix_over(k, d):
    # the prefix scratch and an output in one allocation, overlapping
    buf = to_backend(np.zeros(16, np.int64), d)
    words_ = buf.view(np.uint32)
    return _jagged(k, d, prefix=buf[:4].reshape(2, 2),
                   outs_=[words_[6:18].reshape(3, 4)] + outs(3, False, True, d)[1:])


def _jagged_output_over_counts(k, d):
    buf = to_backend(np.zeros(16, np.int32), d)
    return _jagged(k, d, rc=buf[:2], outs_=[buf.view(np.uint32)[1:13].reshape(3, 4)]
                   + outs(3, False, True, d)[1:])


MISUSE = misuse_cases()


def _check_refusal(k, backend, call, exc, words_):
    with pytest.raises(exc) as info:
        call(k, backend)
    msg = str(info.value)
    assert k.__name__.rsplit(".", 1)[1] in msg, msg  # the launcher's module
    for w in words_:
        assert w in msg, msg


@pytest.mark.parametrize("case", MISUSE, ids=[c[0] for c in MISUSE])
def test_misuse_is_refused_naming_the_argument(k, case):
    k, backend = k
    _, call, exc, words_ = case
    _check_refusal(k, backend, call, exc, words_)


def test_refused_calls_write_nothing(k):
    # the checks run before any launch: an overlap found by the CPU kernels'
    # compiled test also leaves every output untouched
    k, backend = k
    ins = dev(layer(F, 8, False, False), backend)
    buf = to_backend(np.full(8, 7, np.uint32), backend)
    with pytest.raises(ValueError, match="overlaps"):
        k.fold_dense(*ins, buf[:4], buf[2:6], zeros(4, backend), zeros(4, backend), F.params)
    assert (to_host(buf) == 7).all()


@pytest.mark.parametrize("backend", ["cpu", pytest.param("numba", marks=pytest.mark.cudasim)])
@pytest.mark.parametrize("rc, orc, message", [
    ([3, -1], [2, 1], r"`rc` must hold counts >= 0, but rc\[1\] = -1"),
    ([3, 2], [2, -1], r"`orc` must hold counts >= 0, but orc\[1\] = -1"),
    ([4, 2], [2, 1], r"`rc` sums to 6, more than the input length 5"),
    ([-4, 9], [0, 5], r"`rc` must hold counts >= 0, but rc\[0\] = -4"),  # (the sum fits)
    ([0, -1], [-1, 0], r"`orc` must hold counts >= 0, but orc\[0\] = -1"),  # the scan's first
])
def test_jagged_host_counts_that_would_read_out_of_bounds_are_refused(backend, rc, orc, message):
    """The CPU kernel indexes with the counts unchecked: its own scan refuses
    values that would read outside the inputs (a direct caller's rc summing
    past the input read past it), writing no output.  Host counts cost the
    Numba-CUDA launcher an O(nb) look and no sync: it refuses the same
    (rc past the input read past it on the GPU, a negative count ran
    silently).  Truncating schedules and sum(orc) past the width stay in
    bounds and keep their per-slot meaning (tests/test_gkr_cpu_fast.py)."""
    k = kernels_for(backend, "gkr")
    outs_ = outs(3, False, True, "cpu")
    for o in outs_:
        o.fill(7)
    where = {"cpu": "gkr_cpu", "numba": "gkr_cuda_numba"}[backend]
    with pytest.raises(ValueError, match=where + ".jagged_transition: argument " + message):
        _jagged(k, "cpu", rc=np.array(rc, np.int32), orc=np.array(orc, np.int32), outs_=outs_)
    assert all((o == 7).all() for o in outs_)
    _jagged(k, "cpu", rc=np.array([3, 2], np.int32), orc=np.array([1, 3], np.int32),
            outs_=outs_)  # truncating, sum(orc) past the width 3: runs


@pytest.mark.cudasim
@pytest.mark.parametrize("rc, orc, on_device, message", [
    ([-20, 6], [4, 3], "orc", r"`rc` must hold counts >= 0, but rc\[0\] = -20"),
    ([4, 2], [2, 1], "orc", r"`rc` sums to 6, more than the input length 5"),
    ([3, 2], [2, -1], "rc", r"`orc` must hold counts >= 0, but orc\[1\] = -1"),
])
def test_numba_host_counts_beside_device_counts_are_checked(rc, orc, on_device, message):
    """The Numba-CUDA launcher checked host counts only when all of them were
    host arrays: a bad host rc beside a device orc ran silently."""
    from numba import cuda
    k = kernels_for("numba", "gkr")
    counts = {"rc": np.array(rc, np.int32), "orc": np.array(orc, np.int32)}
    counts[on_device] = cuda.to_device(counts[on_device])
    outs_ = outs(3, False, True, "cpu")
    for o in outs_:
        o.fill(7)
    with pytest.raises(ValueError, match="gkr_cuda_numba.jagged_transition: argument " + message):
        _jagged(k, "cpu", rc=counts["rc"], orc=counts["orc"], outs_=outs_)
    assert all((o == 7).all() for o in outs_)


@pytest.mark.cudasim
@pytest.mark.parametrize("step, counts, message", [
    (None, (6, 2, 0, 7), r"`rc` sums to 15, more than the input length 14"),
    (0, (3, 1, 0, -4), r"`steps\[0\]\[0\]` must hold counts >= 0, but steps\[0\]\[0\]\[3\] = -4"),
    # truncating: layer 1's live slots were left unwritten by the fused kernel
    (0, (3, 1, 0, 3), r"`steps\[0\]\[0\]` must hold at least ceil\(rc\[s\] / 2\) rows .* "
                      r"steps\[0\]\[0\]\[3\] = 3 < ceil\(7 / 2\)"),
    (2, (1, 0, 0, 1), r"`steps\[2\]\[0\]` must hold at least ceil\(steps\[1\]\[0\]\[s\] / 2\)"),
    # past the width (sum + 1): the fused kernel wrote past the outputs
    (1, (2, 1, 0, 4), r"`steps\[1\]\[0\]` sums to 7, more than its outputs' width 6"),
])
def test_numba_fused_chunk_host_counts_outside_the_schedule_are_refused(step, counts, message):
    """The fused chunk stores every node of a slot's subtree at
    prefix - count + i: host counts overrunning a step's width wrote past
    its outputs (an IndexError under the simulator, memory corruption on a
    GPU), truncating ones left live slots unwritten.  Refused before any
    launch, naming the step; device counts stay the caller's obligation."""
    from zorch_nb.kernels import gkr_cuda_numba
    rc, ins, steps, want = _jagged_steps("cpu", False, True)
    if step is None:
        rc = np.array(counts, np.int32)
    else:
        steps[step] = (np.array(counts, np.int32), steps[step][1])
    for _, layer_ in steps:
        for o in layer_:
            o.fill(7)
    with pytest.raises(ValueError, match="gkr_cuda_numba.jagged_chunk: argument " + message):
        gkr_cuda_numba.jagged_chunk(rc, np.zeros(16, np.int64), ins, steps, F.params)
    assert all((o == 7).all() for _, layer_ in steps for o in layer_)


# ---- device counts outside the contract -----------------------------------------
# Device counts are never read on the host (that would synchronize), so their
# values stay the caller's obligation: counts outside the contract give
# unspecified words, but no kernel may read or write outside the arrays it
# was given, or run on for 2**31 slots.  Outputs are views into buffers with
# canary words either side; the simulator raises IndexError on an index past
# a device array, and CI's sanitized emulation stage reports a CUDA C read
# past an input (AddressSanitizer).

GPU_BACKENDS = [b for b in BACKENDS if b.values != ("cpu",)]  # (conftest's, with their marks)
CANARY, GUARD = 0xC0FFEE11, 8
BIG = 2**31 - 1


def _on_device(x, backend):
    """Counts as device arrays, which no launcher reads on the host."""
    if backend == "numba":
        from numba import cuda
        return cuda.to_device(np.ascontiguousarray(x, np.int32))
    return to_backend(np.ascontiguousarray(x, np.int32), backend)


def _guarded_outs(n, ne, de, backend):
    """``(buffers, outputs)``: outputs of ``n`` slots, views of buffers with
    ``GUARD`` canary slots before and after them."""
    bufs = [to_backend(np.full((n + 2 * GUARD,) + s[1:], CANARY, np.uint32), backend)
            for s in out_shapes(n, ne, de)]
    return bufs, [b[GUARD:GUARD + n] for b in bufs]


def _assert_guards(bufs, what):
    for b in bufs:
        h = to_host(b)
        assert (h[:GUARD] == CANARY).all() and (h[-GUARD:] == CANARY).all(), what


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("rc, orc", [
    ([6, 9], [3, 2]),                  # sum(rc) past the input (8 slots): read past it
    ([-6, 9], [1, 4]),                 # a negative count: its nodes before the input
    ([3, 5], [-4, 9]),                 # a negative output count
    ([BIG, BIG], [2**30, 2**30]),      # counts near 2**31
    ([3, 5], [1, 1]),                  # truncating
], ids=["past-input", "negative-rc", "negative-orc", "huge", "truncating"])
def test_jagged_device_counts_outside_the_contract_stay_in_bounds(backend, rc, orc):
    k = kernels_for(backend, "gkr")
    for ne, de in ((False, False), (True, True)):
        bufs, got = _guarded_outs(5, ne, de, backend)
        k.jagged_transition(_on_device(rc, backend), _on_device(orc, backend),
                            zeros((2, 2), backend, np.int64),
                            *dev(layer(F, 8, ne, de, seed=2), backend), *got, F.params)
        _assert_guards(bufs, f"{rc} {orc}")


def _bad_steps(backend, ne, de, which, counts):
    """``_jagged_steps`` (widths 9, 6, 5 after an input of 14 slots) with the
    counts of ``which`` (0 the input, l the output layer l) replaced, every
    count on the device, the outputs guarded."""
    rc, ins, steps, _ = _jagged_steps("cpu", ne, de)
    all_counts = [rc] + [orc for orc, _ in steps]
    all_counts[which] = np.array(counts, np.int32)
    guarded = [_guarded_outs(o[0].shape[0], ne, de, backend) for _, o in steps]
    steps = [(_on_device(c, backend), g[1]) for c, g in zip(all_counts[1:], guarded)]
    return (_on_device(all_counts[0], backend), dev(ins, backend), steps,
            [b for bufs, _ in guarded for b in bufs])


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("which, counts", [
    (0, (40, 2, 0, 7)),                # sum(rc) 49 past the input (14 slots)
    (0, (-9, 2, 0, 30)),               # a negative input count
    (1, (9, 9, 9, 9)),                 # layer 1 sums to 36 past its width 9
    (2, (-3, 1, 0, 4)),                # a negative count in layer 2
    (1, (1, 1, 0, 1)),                 # truncating: layer 1 below ceil(rc / 2)
    (3, (BIG, BIG, 0, 1)),             # the last layer's total near 2**32
], ids=["past-input", "negative-input", "past-width", "negative", "truncating", "huge"])
def test_fused_jagged_device_counts_outside_the_contract_stay_in_bounds(backend, which, counts):
    """The fused chunk stores every node of a slot's subtree at
    prefix - count + i, and walked the last layer's total count: such counts
    wrote past the outputs (IndexError under the simulator) and a total near
    2**32 ran 2**34 lane items (a hang under the emulation)."""
    k = kernels_for(backend, "gkr")
    for ne, de in ((False, True), (True, True)):
        rc, ins, steps, bufs = _bad_steps(backend, ne, de, which, counts)
        k.jagged_chunk(rc, zeros(16, backend, np.int64), ins, steps, F.params)
        _assert_guards(bufs, f"chunk {which} {counts}")
        if hasattr(k, "jagged_tail"):
            rc, ins, steps, bufs = _bad_steps(backend, ne, de, which, counts)
            k.jagged_tail(rc, zeros(8, backend, np.int64), ins, steps, F.params)
            _assert_guards(bufs, f"tail {which} {counts}")


@pytest.mark.parametrize("ne,de", MODES[::3])
def test_sequences_may_be_iterators(k, ne, de):
    """The checks read the sequence arguments once (an iterator is exhausted
    after it) and the launchers used the caller's again: a TypeError
    ('list_iterator' is not subscriptable), 'max() arg is an empty
    sequence', or a kernel launched with its arguments shifted."""
    k, backend = k
    _check_pyramid(k, backend, ne, de, 16, 2, seq=iter)
    if backend == "cpu":
        return
    rc, ins, steps, want = _jagged_steps(backend, ne, de)
    k.jagged_chunk(rc, zeros(16, backend, np.int64), iter(ins),
                   iter([(orc, iter(o)) for orc, o in steps]), F.params)
    for l, ((_, got), w) in enumerate(zip(steps, want)):
        assert_words(got, w, f"chunk layer {l + 1}")


def test_read_only_outputs_refused():
    # (CuPy arrays have no read-only flag; host arrays on the CPU and Numba paths do)
    k = kernels_for("cpu", "gkr")
    ro = np.zeros(4, np.uint32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="gkr_cpu.fold_dense: argument `od0`.*writeable"):
        k.fold_dense(*layer(F, 8, False, False), *outs(4, 0, 0, "cpu")[:2], ro,
                     np.zeros(4, np.uint32), F.params)
    pre = np.zeros((2, 2), np.int64)
    pre.flags.writeable = False
    with pytest.raises(ValueError, match="`prefix`.*writeable"):
        _jagged(k, "cpu", prefix=pre)
    # read-only inputs and counts are fine
    ins = layer(F, 8, False, False)
    for x in ins:
        x.flags.writeable = False
    k.fold_dense(*ins, *outs(4, 0, 0, "cpu"), F.params)


# ---- pyramids -------------------------------------------------------------------

def _pyramid(k, d, n, sizes, ne=False, de=False, first=None):
    """``pyramid_dense`` with output layers of ``sizes`` elements (flat buffers
    on Numba-CUDA, of the words those sizes take)."""
    first = dev(layer(F, n, ne, de), d) if first is None else first
    layers = [outs(s, ne, de, d) for s in sizes]
    if d == "numba":
        layers = _flat_buffers(layers, d)
    return k.pyramid_dense(first, layers, F.params)


PYRAMID_MISUSE = [
    # the review's case, scaled down: 12 leaves left slots of its 6 unwritten
    ("length 12", lambda k, d: _pyramid(k, d, 12, [6]), ["`first`", "power-of-two", "12"]),
    ("length 0", lambda k, d: _pyramid(k, d, 0, [0]), ["`first`", "power-of-two"]),
    ("too many layers", lambda k, d: _pyramid(k, d, 4, [2, 1, 0]),
     ["at most 2 transitions", "not 3"]),
    ("first of mixed lengths", lambda k, d: _pyramid(
        k, d, 8, [4], first=dev(layer(F, 8, 0, 0)[:3] + layer(F, 16, 0, 0)[3:], d)),
     ["`first[3]`"]),
    ("first not four", lambda k, d: _pyramid(k, d, 8, [4], first=dev(layer(F, 8, 0, 0)[:3], d)),
     ["`first`", "four"]),
]
# the layers' own forms: four arrays each (CPU, CuPy) or one flat buffer (Numba-CUDA)
PYRAMID_LAYERS_MISUSE = [
    ("second layer too long", lambda k, d: k.pyramid_dense(
        dev(layer(F, 8, 0, 0), d), [outs(4, 0, 0, d), outs(4, 0, 0, d)], F.params),
     ["`layers[1][0]`", "(2,)"]),
    ("base numerators in an extension mode", lambda k, d: k.pyramid_dense(
        dev(layer(F, 8, 0, 1), d), [[zeros(4, d)] + outs(4, 0, 1, d)[1:]], F.params),
     ["`layers[0][0]`", "(4, 4)"]),
    ("layer of three", lambda k, d: k.pyramid_dense(
        dev(layer(F, 8, 0, 0), d), [outs(4, 0, 0, d)[:3]], F.params),
     ["`layers[0]`", "four"]),
    ("strided layer", lambda k, d: k.pyramid_dense(
        dev(layer(F, 8, 0, 0), d), [outs(4, 0, 0, d)[:3] + [_strided(d, 4)]], F.params),
     ["`layers[0][3]`", "C-contiguous"]),
    ("later layer over the first", lambda k, d: (lambda ins: k.pyramid_dense(
        ins, [outs(4, 0, 0, d), outs(2, 0, 0, d)[:3] + [ins[2][6:8]]], F.params))(
        dev(layer(F, 8, 0, 0), d)),
     ["`layers[1][3]`", "`first[2]`", "overlaps"]),
    ("two layers share words", lambda k, d: (lambda b: k.pyramid_dense(
        dev(layer(F, 8, 0, 0), d), [outs(4, 0, 0, d)[:3] + [b[:4]],
                                    [b[3:5]] + outs(2, 0, 0, d)[1:]], F.params))(zeros(8, d)),
     ["`layers[", "overlaps"]),
]
NUMBA_BUFFERS_MISUSE = [
    ("buffer of the wrong size", lambda k, d: k.pyramid_dense(
        dev(layer(F, 8, 0, 1), d), [zeros(4 * 16 - 1, d)], F.params),
     ["`buffers[0]`", "(64,)"]),
    ("buffer 2-d", lambda k, d: k.pyramid_dense(
        dev(layer(F, 8, 0, 0), d), [zeros((4, 4), d)], F.params),
     ["`buffers[0]`", "flat"]),
    ("buffer over the first", lambda k, d: (lambda b: k.pyramid_dense(
        [b[:32]] + dev(layer(F, 32, 0, 0)[1:], d), [b[16:80]], F.params))(zeros(96, d)),
     ["`buffers[0]`", "`first[0]`", "overlaps"]),
]


@pytest.mark.parametrize("case", PYRAMID_MISUSE + PYRAMID_LAYERS_MISUSE + NUMBA_BUFFERS_MISUSE,
                         ids=[c[0] for c in PYRAMID_MISUSE + PYRAMID_LAYERS_MISUSE
                              + NUMBA_BUFFERS_MISUSE])
def test_pyramid_misuse_is_refused(k, case):
    k, backend = k
    name, call, words_ = case
    numba_only = any(name == c[0] for c in NUMBA_BUFFERS_MISUSE)
    if numba_only != (backend == "numba") and not any(name == c[0] for c in PYRAMID_MISUSE):
        pytest.skip("another backend's layer form")
    _check_refusal(k, backend, call, ValueError, ["pyramid_dense"] + words_)


def test_the_reviewed_pyramid_is_refused_not_half_written():
    # gkr_cpu.pyramid_dense of 12000 leaves left 1904 slots of 6000 at 0
    k = kernels_for("cpu", "gkr")
    first = [F.random(12000, seed=s) for s in range(4)]
    o = [np.zeros(6000, np.uint32) for _ in range(4)]
    with pytest.raises(ValueError, match="power-of-two"):
        k.pyramid_dense(first, [o], F.params)


# ---- the fused GPU jagged launchers -------------------------------------------------

def _chunk(k, d, drop=0, prefix_words=16, orc_len=4, overlap=False):
    rc, ins, steps, _ = _jagged_steps(d, False, True)
    steps = steps[:len(steps) - drop]
    if orc_len != 4:
        steps[1] = (zeros(orc_len, d, np.int32), steps[1][1])
    if overlap:  # layer 2's od0 over layer 1's od1
        steps[1][1][2] = steps[0][1][3][:steps[1][1][2].shape[0]]
    return k.jagged_chunk(rc, zeros(prefix_words, d, np.int64), ins, steps, F.params)


CHUNK_MISUSE = [
    ("two steps", lambda k, d: _chunk(k, d, drop=1), ["`steps`", f"exactly {GKR_JAGGED_CHUNK}"]),
    ("prefix short", lambda k, d: _chunk(k, d, prefix_words=15), ["`prefix`", "16"]),
    ("step counts short", lambda k, d: _chunk(k, d, orc_len=3), ["`steps[1][0]`", "4"]),
    ("steps share an output", lambda k, d: _chunk(k, d, overlap=True), ["overlaps"]),
]


@pytest.mark.parametrize("case", CHUNK_MISUSE, ids=[c[0] for c in CHUNK_MISUSE])
def test_fused_jagged_misuse_is_refused(k, case):
    k, backend = k
    if backend == "cpu":
        pytest.skip("the fused jagged launchers are GPU launchers")
    _, call, words_ = case
    _check_refusal(k, backend, call, ValueError, ["jagged_chunk"] + words_)


@pytest.mark.gpu
def test_cupy_jagged_tail_misuse_is_refused():
    k = kernels_for("cupy", "gkr")
    rc, ins, steps, _ = _jagged_steps("cupy", True, False)
    with pytest.raises(ValueError, match="gkr_cupy.jagged_tail: argument `prefix`"):
        k.jagged_tail(rc, zeros(7, "cupy", np.int64), ins, steps, F.params)
    steps[2] = (steps[2][0], steps[2][1][:2] + [zeros((3, 4), "cupy")] + steps[2][1][3:])
    with pytest.raises(ValueError, match=r"gkr_cupy.jagged_tail: argument `steps\[2\]\[1\]\[2\]`"):
        k.jagged_tail(rc, zeros(8, "cupy", np.int64), ins, steps, F.params)


@pytest.mark.cudasim
def test_numba_launchers_check_device_arrays():
    # Numba device arrays take the general checks (their flags are a dict)
    from numba import cuda
    k = kernels_for("numba", "gkr")
    ins = [cuda.to_device(x) for x in layer(F, 8, True, False)]
    good = [cuda.to_device(np.zeros((4, 4), np.uint32)) for _ in range(2)] + \
        [cuda.to_device(np.zeros(4, np.uint32)) for _ in range(2)]
    k.fold_dense(*ins, *good, F.params)
    ref = naive_gkr.dense_transition(F.name, naive_gkr.layer_from_words(
        F.name, *(x.copy_to_host() for x in ins)))
    assert_words([g.copy_to_host() for g in good], reference_words(F, ref))
    with pytest.raises(ValueError, match="`on1`.*C-contiguous"):
        k.fold_dense(*ins, good[0], cuda.device_array((4, 8), np.uint32)[:, :4], *good[2:],
                     F.params)
    with pytest.raises(ValueError, match="`od[01]` overlaps argument `od[01]`"):
        k.fold_dense(*ins, *good[:2], good[3], good[3], F.params)
    with pytest.raises(ValueError, match="`on0`.*shape"):
        k.fold_dense(*ins, good[2], *good[1:], F.params)


def _with_host(xs, i):
    """``xs`` (device arrays) with element ``i`` copied back to a NumPy array."""
    return [to_host(x) if j == i else x for j, x in enumerate(xs)]


@pytest.mark.gpu
def test_cupy_launchers_refuse_host_arrays():
    """A NumPy array among a CuPy launcher's arrays is refused naming it,
    before any launch: CuPy passes a one-element NumPy array (one segment's
    counts) by value, so the kernel took its word for a device pointer, and
    other host arrays failed inside CuPy, unnamed."""
    k, d = kernels_for("cupy", "gkr"), "cupy"

    def refused(name, call):
        with pytest.raises(TypeError, match=rf"gkr_cupy\.\w+: argument `{re.escape(name)}` "
                                            r"must be a CuPy array"):
            call()

    ins, outs_ = dev(layer(F, 8, False, True), d), outs(4, False, True, d)
    refused("n1", lambda: k.fold_dense(*_with_host(ins, 1), *outs_, F.params))
    refused("od1", lambda: k.fold_dense(*ins, *_with_host(outs_, 3), F.params))
    one = [to_backend(np.array([c], np.int32), d) for c in (8, 4)]  # nb = 1
    prefix = zeros((2, 1), d, np.int64)
    for i, name in enumerate(("rc", "orc", "prefix")):
        args = _with_host(one + [prefix], i)
        refused(name, lambda: k.jagged_transition(*args, *ins, *outs_, F.params))
    layers = [outs(8 >> (l + 1), False, True, d) for l in range(2)]
    refused("layers[1][2]", lambda: k.pyramid_dense(
        ins, [layers[0], _with_host(layers[1], 2)], F.params))
    refused("first[0]", lambda: k.pyramid_dense(_with_host(ins, 0), layers, F.params))
    rc, first, steps, _ = _jagged_steps(d, False, True)
    host_orc = [(to_host(steps[0][0]), steps[0][1])] + steps[1:]
    host_out = [(steps[0][0], _with_host(steps[0][1], 0))] + steps[1:]
    for launcher, rows in ((k.jagged_chunk, 4), (k.jagged_tail, 2)):
        prefix = zeros(rows * 4, d, np.int64)
        refused("rc", lambda: launcher(to_host(rc), prefix, first, steps, F.params))
        refused("prefix", lambda: launcher(rc, to_host(prefix), first, steps, F.params))
        refused("first[3]", lambda: launcher(rc, prefix, _with_host(first, 3), steps, F.params))
        refused("steps[0][0]", lambda: launcher(rc, prefix, first, host_orc, F.params))
        refused("steps[0][1][0]", lambda: launcher(rc, prefix, first, host_out, F.params))
    assert all((to_host(o) == 0).all() for o in outs_ + [x for l in layers for x in l])


@pytest.mark.cudasim
@pytest.mark.parametrize("counts_on,prefix_on", [("host", "device"), ("device", "host")])
def test_numba_jagged_counts_and_prefix_on_different_sides(counts_on, prefix_on):
    """The Numba-CUDA launchers take host or device arrays, mixed: host
    counts with a device ``prefix`` failed in ``np.cumsum`` (it cannot write
    device memory), and device counts left a host ``prefix`` unwritten --
    it holds the prefix sums afterwards on every backend."""
    from numba import cuda
    k = kernels_for("numba", "gkr")
    place = lambda x, side: cuda.to_device(x) if side == "device" else x  # noqa: E731
    sums = lambda p: (p.copy_to_host() if hasattr(p, "copy_to_host") else p)  # noqa: E731
    rc, orc = np.array([3, 0, 4, 1], np.int32), np.array([2, 1, 3, 1], np.int32)
    width = int(orc.sum()) + 2
    ins = layer(F, int(rc.sum()) + 1, False, True, seed=5)
    got = outs(width, False, True, "numba")
    prefix = place(np.full((2, 4), -7, np.int64), prefix_on)
    k.jagged_transition(place(rc, counts_on), place(orc, counts_on), prefix, *ins, *got,
                        F.params)
    ref = naive_gkr.jagged_transition(F.name, naive_gkr.layer_from_words(F.name, *ins),
                                      list(rc), list(orc), width)
    assert_words(got, reference_words(F, ref))
    assert sums(prefix).tolist() == [np.cumsum(rc).tolist(), np.cumsum(orc).tolist()]

    rc, first, steps, want = _jagged_steps("numba", False, True)
    prefix = place(np.full(4 * 4, -7, np.int64), prefix_on)
    steps = [(place(orc, counts_on), o) for orc, o in steps]
    k.jagged_chunk(place(rc, counts_on), prefix, first, steps, F.params)
    for l, ((_, o), w) in enumerate(zip(steps, want)):
        assert_words(o, w, f"chunk layer {l + 1}")
    counts = [rc] + [sums(orc) for orc, _ in steps]
    assert sums(prefix).reshape(4, 4).tolist() == [np.cumsum(c).tolist() for c in counts]


@pytest.mark.cudasim
def test_numba_device_scan_of_more_segments_than_scan_threads():
    """Device counts are scanned by one block of GKR_NUMBA_SCAN_THREADS threads,
    each summing a run of ceil(nb / threads) segments before a scan of the
    per-thread totals.  The tests above have 4 segments, one per thread: a
    run length rounded down (segments past threads * floor(nb / threads)
    never scanned) passed them.  Here nb = 2 threads + 45: runs of 3, the
    last ones short or empty; against the CPU launcher (host scan)."""
    from numba import cuda

    from zorch_nb.kernels.launch_config import GKR_NUMBA_SCAN_THREADS
    k = kernels_for("numba", "gkr")
    nb = 2 * GKR_NUMBA_SCAN_THREADS + 45
    rng = np.random.default_rng(3)
    rc = rng.integers(0, 4, nb).astype(np.int32)
    orc = ((rc + 1) // 2).astype(np.int32)
    width = int(orc.sum()) + 1
    ins = layer(F, int(rc.sum()), False, True, seed=4)
    got = outs(width, False, True, "numba")
    prefix = cuda.to_device(np.full((2, nb), -7, np.int64))
    k.jagged_transition(cuda.to_device(rc), cuda.to_device(orc), prefix, *ins, *got, F.params)
    assert prefix.copy_to_host().tolist() == [np.cumsum(rc).tolist(), np.cumsum(orc).tolist()]
    want = outs(width, False, True, "cpu")
    kernels_for("cpu", "gkr").jagged_transition(rc, orc, np.zeros((2, nb), np.int64), *ins,
                                                *want, F.params)
    assert_words(got, want)


@pytest.mark.cudasim
@pytest.mark.parametrize("launcher", ["field", "fold_dense", "jagged_transition",
                                      "pyramid_dense", "jagged_chunk"])
def test_numba_host_copies_go_on_the_launch_stream(launcher, monkeypatch):
    """Host arrays are copied in and back on the stream the kernel runs on,
    and that stream is waited for after the copies back.  The GKR launchers
    copied on Numba's default stream: beside CuPy arrays under a non-blocking
    CuPy stream (the launch's, :func:`stream_for`), a copy back did not wait
    for the kernel.  Here ``stream_for`` hands out a Numba stream, and every
    copy is checked to name it (the simulator has no external streams)."""
    from numba import cuda

    from zorch_nb.kernels import field_cuda_numba, gkr_cuda_numba
    k = kernels_for("numba", "gkr")
    stream = cuda.stream()
    events = []
    DevArray = type(cuda.to_device(np.zeros(1, np.uint32)))
    to_device, to_host_ = cuda.to_device, DevArray.copy_to_host
    sync = type(stream).synchronize

    def spy_to_device(x, stream=0, **kw):
        events.append(("in", stream))
        return to_device(x, stream=stream, **kw)

    def spy_copy_to_host(self, ary=None, stream=0):
        events.append(("back", stream))
        return to_host_(self, ary, stream=stream)

    def spy_sync(self):
        events.append(("sync", self))
        return sync(self)

    rc, orc = np.array([3, 0, 4, 1], np.int32), np.array([2, 1, 3, 1], np.int32)
    # device counts with a host prefix: the prefix comes back
    d_rc, d_orc = cuda.to_device(rc), cuda.to_device(orc)
    chunk_rc, first, steps, chunk_want = _jagged_steps("numba", False, True)
    d_chunk_rc, d_steps = cuda.to_device(chunk_rc), [(cuda.to_device(c), o) for c, o in steps]
    for module in (field_cuda_numba, gkr_cuda_numba):
        monkeypatch.setattr(module, "stream_for", lambda *arrays: stream)
    monkeypatch.setattr(cuda, "to_device", spy_to_device)
    monkeypatch.setattr(DevArray, "copy_to_host", spy_copy_to_host)
    monkeypatch.setattr(type(stream), "synchronize", spy_sync)

    if launcher == "field":
        a, b = F.random(40, seed=1), F.random(40, seed=2)
        got = np.zeros(40, np.uint32)
        kernels_for("numba", "field").base_map2(monty.OP_MUL, a, b, got, F.params)
        want, got = [F.mul(a, b)], [got]
    elif launcher == "fold_dense":
        ins = layer(F, 16, True, False, seed=3)
        got = outs(8, True, False, "numba")
        k.fold_dense(*ins, *got, F.params)
        want = reference_words(F, naive_gkr.dense_transition(
            F.name, naive_gkr.layer_from_words(F.name, *ins)))
    elif launcher == "jagged_transition":
        width = int(orc.sum()) + 2
        ins = layer(F, int(rc.sum()) + 1, False, True, seed=5)
        prefix = np.full((2, 4), -7, np.int64)
        got = outs(width, False, True, "numba")
        k.jagged_transition(d_rc, d_orc, prefix, *ins, *got, F.params)
        want = reference_words(F, naive_gkr.jagged_transition(
            F.name, naive_gkr.layer_from_words(F.name, *ins), list(rc), list(orc), width))
        want, got = list(want) + [np.stack([np.cumsum(rc), np.cumsum(orc)])], got + [prefix]
    elif launcher == "pyramid_dense":
        ins = layer(F, 16, False, False, seed=7)
        ref, want = naive_gkr.layer_from_words(F.name, *ins), []
        for _ in range(2):
            ref = naive_gkr.dense_transition(F.name, ref)
            want.append(np.concatenate([w.reshape(-1) for w in reference_words(F, ref)]))
        got = [np.zeros_like(w) for w in want]
        k.pyramid_dense(ins, got, F.params)
    else:
        prefix = np.full(4 * 4, -7, np.int64)
        k.jagged_chunk(d_chunk_rc, prefix, first, d_steps, F.params)
        got = [x for _, o in d_steps for x in o]
        want = [x for w in chunk_want for x in w]
        counts = [chunk_rc] + [c for c, _ in steps]
        want.append(np.concatenate([np.cumsum(c) for c in counts]))
        got.append(prefix)
    assert_words(got, want, launcher)
    copies = [s for kind, s in events if kind != "sync"]
    assert "back" in [kind for kind, _ in events] and len(copies) >= 2, events
    assert all(s is stream for s in copies), events
    last_back = max(i for i, (kind, _) in enumerate(events) if kind == "back")
    assert ("sync", stream) in events[last_back + 1:], events


@pytest.mark.cudasim
def test_numba_launch_stream_is_chosen_from_every_array(monkeypatch):
    """:func:`stream_for` picks CuPy's current stream where any argument is a
    CuPy array; the dense and jagged transitions asked it about their inputs
    and first output only, so CuPy arrays among ``on1``, ``od0`` and ``od1``
    beside host others launched on Numba's default stream."""
    from zorch_nb.kernels import gkr_cuda_numba
    k = kernels_for("numba", "gkr")
    asked = []
    real = gkr_cuda_numba.stream_for
    monkeypatch.setattr(gkr_cuda_numba, "stream_for",
                        lambda *arrays: asked.append({id(a) for a in arrays}) or real(*arrays))
    ins, got = layer(F, 16, True, False, seed=3), outs(8, True, False, "numba")
    k.fold_dense(*ins, *got, F.params)
    assert asked.pop() >= {id(a) for a in (*ins, *got)}
    rc, orc = np.array([3, 0, 4, 1], np.int32), np.array([2, 1, 3, 1], np.int32)
    prefix = np.zeros((2, 4), np.int64)
    ins, got = layer(F, int(rc.sum()), False, True, seed=5), outs(7, False, True, "numba")
    k.jagged_transition(rc, orc, prefix, *ins, *got, F.params)
    assert asked.pop() >= {id(a) for a in (rc, orc, prefix, *ins, *got)}


@pytest.mark.gpu
def test_cupy_jagged_launchers_refuse_more_batches_than_the_kernels_count():
    """The CUDA kernels take nb as an unsigned int: 2**32 counts raised
    NumPy's OverflowError naming nothing (NumPy 1.x wrapped nb to 0)."""
    import types

    from zorch_nb.kernels import gkr_cupy
    gkr_cupy._check_batches("gkr_cupy.jagged_chunk", types.SimpleNamespace(shape=(2**32 - 1,)))
    with pytest.raises(ValueError, match=r"gkr_cupy.jagged_chunk: argument `rc` holds "
                                         r"4294967296 counts; the CUDA kernels take "
                                         r"nb <= 2\*\*32 - 1 batch elements"):
        gkr_cupy._check_batches("gkr_cupy.jagged_chunk", types.SimpleNamespace(shape=(2**32,)))


@pytest.mark.parametrize("launcher", ["fold_dense_trusted", "pyramid_dense_trusted",
                                      "jagged_transition_trusted"])
def test_cpu_trusted_launchers_refuse_a_mode_outside_0_to_3(launcher):
    """The trusted launchers check nothing else; a mode of -1 ran the ext/ext
    kernels through Python's negative index, 4 or more raised IndexError."""
    import inspect

    from zorch_nb.kernels import gkr_cpu
    fn = getattr(gkr_cpu, launcher)
    rest = [None] * (len(inspect.signature(fn).parameters) - 1)  # (never read)
    for mode in (-1, 4, 1.0, None):
        with pytest.raises(ValueError, match=r"argument `mode` must be an input mode 0-3"):
            fn(mode, *rest)
