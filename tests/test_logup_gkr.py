"""LogUp-GKR circuit on every backend against the big-int reference (tests/naive_gkr.py).

One test body per property, parametrised over field x backend (``BACKENDS``
from conftest: ``cpu`` always, ``numba`` under the CUDA simulator with small
inputs, ``cupy`` on a GPU).  Every layer is compared byte for byte with the
reference, and the rational sum of every batch element is checked down to the
outputs with an independent modular inverse.
"""
import numpy as np
import pytest

import naive_gkr as ng
from conftest import BACKENDS, to_backend, to_host
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, JaggedStep, build_jagged_pyramid,
                                build_pyramid, extract_jagged_outputs, extract_outputs,
                                halving_schedule, jagged_layer_transition, layer_transition)

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
#: (numerators extension, denominators extension)
MODES = [pytest.param(ne, de, id=f"{'E' if ne else 'B'}{'E' if de else 'B'}")
         for ne in (False, True) for de in (False, True)]


def mles(F, ne, de, length, seed):
    """Four random MLEs: numerator pair in F (or F.ext), denominator pair likewise."""
    return [(F.ext if ext else F).random(length, seed=seed + i)
            for i, ext in enumerate((ne, ne, de, de))]


def small(backend, cpu_value, numba_value):
    """Sizes: the simulator runs one Python thread per CUDA thread, keep it tiny."""
    return numba_value if backend == "numba" else cpu_value


def host_mles(layer):
    return [to_host(x) for x in layer.mles]


def assert_layer_equal(layer, ref_words):
    for got, want in zip(host_mles(layer), ref_words):
        assert got.dtype == np.uint32
        np.testing.assert_array_equal(got, want)


def ref_value(F, words):
    """Values (4-lists) of a host word array (base or extension)."""
    return ng._as_values(words, F.name, np.asarray(words).ndim == 2)


def check_batch_sums(F, leaves, segments, out):
    """Sum of every segment's leaf fractions == sum of its two output fractions."""
    n0, n1, d0, d1 = (ref_value(F, w) for w in leaves)
    num, den = ref_value(F, to_host(out.numerator)), ref_value(F, to_host(out.denominator))
    for b, rows in enumerate(segments):
        pairs = [(n0[i], d0[i]) for i in rows] + [(n1[i], d1[i]) for i in rows]
        want = ng.fraction_sum(F.name, pairs)
        got = ng.fraction_sum(F.name, [(num[2 * b], den[2 * b]), (num[2 * b + 1], den[2 * b + 1])])
        assert got == want, f"batch element {b}"


def check_output_sums(F, out):
    """out.batch_sums() is frac_add of each batch element's two outputs, word
    for word, in the forms the products give (extension where an operand is)."""
    n, d = to_host(out.numerator), to_host(out.denominator)
    num, den = out.batch_sums()
    num, den = to_host(num), to_host(den)
    assert num.shape == (n.shape[0] // 2,) + ((4,) if n.ndim + d.ndim > 2 else ())
    assert den.shape == (n.shape[0] // 2,) + d.shape[1:]
    nv, dv = ref_value(F, n), ref_value(F, d)
    got_n, got_d = ref_value(F, num), ref_value(F, den)
    for b in range(n.shape[0] // 2):
        want = ng.frac_add(F.name, nv[2 * b], dv[2 * b], nv[2 * b + 1], dv[2 * b + 1])
        assert (got_n[b], got_d[b]) == want, f"batch element {b}"


# ---------------------------------------------------------------------------
# hand examples
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_dense_hand_example(F, backend):
    enc = lambda v: to_backend(F.encode(v), backend)  # noqa: E731
    layer = GkrLayer(enc([1, 2]), enc([5, 6]), enc([3, 4]), enc([7, 8]), 0, F)
    assert (layer.num_variables, layer.num_row_variables) == (1, 1)
    floor = layer_transition(layer, backend=backend)
    # node 0: 1/3 + 5/7 = (1*7 + 5*3)/(3*7) = 22/21; node 1: 2/4 + 6/8 = 40/32
    assert [F.decode(to_host(x)).tolist() for x in floor.mles] == [[22], [40], [21], [32]]
    out = extract_outputs(floor)
    assert F.decode(to_host(out.numerator)).tolist() == [22, 40]
    assert F.decode(to_host(out.denominator)).tolist() == [21, 32]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_jagged_hand_example(F, backend):
    # Two segments: 3 rows and 1 row, one dead slot (zero) at the end.  With
    # all denominators 1, a node's fraction is (n0 + n1) / 1.
    enc = lambda v: to_backend(F.encode(v), backend)  # noqa: E731
    n0, n1 = enc([1, 2, 3, 4, 0]), enc([10, 20, 30, 40, 0])
    d = enc([1, 1, 1, 1, 0])
    layer = JaggedGkrLayer(n0, n1, d, d, [3, 1], F)
    assert (layer.num_batches, layer.num_batch_variables, layer.width) == (2, 1, 5)
    nxt = jagged_layer_transition(layer, [3, 1], out_width=6, backend=backend)
    dec = [F.decode(to_host(x)).tolist() for x in nxt.mles]
    # segment 0: slot 0 = (node 0, node 1), slot 1 = (node 2, neutral), slot 2
    # = neutral padding; segment 1: slot 3 = (node 3, neutral); slots 4, 5 dead.
    assert dec[0] == [11, 33, 0, 44, 0, 0]
    assert dec[1] == [22, 0, 0, 0, 0, 0]
    assert dec[2] == [1, 1, 1, 1, 0, 0]
    assert dec[3] == [1, 1, 1, 1, 0, 0]
    floor = build_jagged_pyramid(nxt, [JaggedStep([2, 1], 3), ([1, 1], 2)], backend=backend)[-1]
    out = extract_jagged_outputs(floor)
    # segment 0: (11 + 22) + (33 + 0) over 1, and (0 + 0) from the padding slot
    assert F.decode(to_host(out.numerator)).tolist() == [66, 0, 44, 0]
    assert F.decode(to_host(out.denominator)).tolist() == [1, 1, 1, 1]


# ---------------------------------------------------------------------------
# dense: random layers, pyramids, outputs, invariants
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_dense_pyramid_matches_reference(F, backend, ne, de):
    shapes = small(backend, [(1, 0), (3, 0), (4, 2), (5, 5), (6, 1)], [(4, 1), (2, 2)])
    for nv, nbv in shapes:
        host = mles(F, ne, de, 2**nv, seed=10 * nv + nbv)
        first = GkrLayer(*(to_backend(x, backend) for x in host), nbv, F)
        layers = build_pyramid(first, backend=backend)
        assert len(layers) == nv - nbv + 1
        ref = ng.layer_from_words(F.name, *host)
        for layer in layers[1:]:
            ref = ng.dense_transition(F.name, ref)
            assert layer.num_batch_variables == nbv and layer.field is F
            assert_layer_equal(layer, ng.layer_words(F.name, ref))
        out = extract_outputs(layers[-1])
        out_ext = (ne or de) if nv > nbv else ne  # no fold: the floor is the first layer
        assert to_host(out.numerator).shape == (2**(nbv + 1),) + ((4,) if out_ext else ())
        rows = 2**(nv - nbv)
        check_batch_sums(F, host, [range(b * rows, (b + 1) * rows) for b in range(2**nbv)], out)
        check_output_sums(F, out)  # (nv == nbv == 2: four base outputs read as base)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_mixed_fields_equal_all_extension_copy(F, backend):
    nv = small(backend, 5, 3)
    for ne, de in [(False, True), (True, False), (False, False)]:
        host = mles(F, ne, de, 2**nv, seed=3)
        embed = [x if x.ndim == 2 else np.stack([x] + [np.zeros_like(x)] * 3, axis=1)
                 for x in host]
        mixed = build_pyramid(GkrLayer(*(to_backend(x, backend) for x in host), 1, F),
                              backend=backend)
        full = build_pyramid(GkrLayer(*(to_backend(x, backend) for x in embed), 1, F),
                             backend=backend)
        for a, b in zip(mixed[1:], full[1:]):
            for x, y in zip(host_mles(a), host_mles(b)):
                if x.ndim == 1:  # a base output must be the embedded extension output
                    assert not y[:, 1:].any()
                    y = y[:, 0]
                np.testing.assert_array_equal(x, y)
        # base numerators under extension denominators: everything extension
        if (ne, de) == (False, True):
            assert all(x.ndim == 2 for x in mixed[1].mles)
        if (ne, de) == (True, False):
            assert [x.ndim for x in mixed[1].mles] == [2, 2, 1, 1]


# ---------------------------------------------------------------------------
# jagged
# ---------------------------------------------------------------------------

def random_counts(rng, nb, hi):
    counts = rng.integers(0, hi + 1, size=nb)
    counts[rng.integers(0, nb)] = hi  # make the maximum appear
    if nb > 2:
        counts[rng.integers(0, nb)] = 1  # a saturated segment
    return counts.astype(np.int32)


def jagged_first(F, ne, de, counts, slack, seed, backend):
    """A jagged layer with ``slack`` dead slots holding zeros."""
    live = int(np.sum(counts))
    host = mles(F, ne, de, live + slack, seed)
    for x in host:
        x[live:] = 0
    return host, JaggedGkrLayer(*(to_backend(x, backend) for x in host), counts, F)


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_jagged_pyramid_matches_reference(F, backend, ne, de):
    rng = np.random.default_rng(7)
    cases = small(backend, [(1, 9, 0), (4, 7, 3), (8, 12, 5), (16, 5, 0)], [(4, 5, 2)])
    for nb, hi, slack in cases:
        counts = random_counts(rng, nb, hi)
        host, first = jagged_first(F, ne, de, counts, slack, int(rng.integers(1 << 30)), backend)
        # A schedule with extra neutral padding and slack in some steps, then
        # the standard halving down to the floor.
        rc = counts
        schedule = []
        for extra in (1, 0):
            orc = ((rc + 1) // 2 + rng.integers(0, extra + 1, size=nb)).astype(np.int32)
            schedule.append(JaggedStep(orc, int(orc.sum()) + extra * 3))
            rc = orc
        layers = build_jagged_pyramid(first, schedule, backend=backend)
        layers += build_jagged_pyramid(layers[-1], halving_schedule(layers[-1]),
                                       backend=backend)[1:]
        ref = ng.layer_from_words(F.name, *host)
        for prev, layer in zip(layers, layers[1:]):
            ref = ng.jagged_transition(F.name, ref, list(prev.row_counts),
                                       list(layer.row_counts), layer.width)
            assert_layer_equal(layer, ng.layer_words(F.name, ref))
        assert layers[-1].width == nb
        bases = np.concatenate([[0], np.cumsum(counts)])
        out = extract_jagged_outputs(layers[-1])
        check_batch_sums(F, host, [range(bases[b], bases[b + 1]) for b in range(nb)], out)
        check_output_sums(F, out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_jagged_equal_counts_equals_dense(F, backend):
    nbv, nrv = small(backend, (2, 4), (1, 3))
    for ne, de in [(False, False), (False, True), (True, True)]:
        host = [to_backend(x, backend) for x in mles(F, ne, de, 2**(nbv + nrv), seed=21)]
        dense = build_pyramid(GkrLayer(*host, nbv, F), backend=backend)
        first = JaggedGkrLayer(*host, [2**nrv] * 2**nbv, F)
        jagged = build_jagged_pyramid(first, halving_schedule(first), backend=backend)
        assert len(jagged) == len(dense)
        for a, b in zip(dense, jagged):
            for x, y in zip(host_mles(a), host_mles(b)):
                np.testing.assert_array_equal(x, y)
        da, ja = extract_outputs(dense[-1]), extract_jagged_outputs(jagged[-1])
        np.testing.assert_array_equal(to_host(da.numerator), to_host(ja.numerator))
        np.testing.assert_array_equal(to_host(da.denominator), to_host(ja.denominator))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_jagged_halving_reaches_padded_dense_floor(F, backend):
    rng = np.random.default_rng(5)
    nb, hi = small(backend, (8, 13), (2, 5))
    for ne, de in [(False, True), (True, True), (False, False)]:
        counts = random_counts(rng, nb, hi)
        host, first = jagged_first(F, ne, de, counts, 0, 40, backend)
        schedule = halving_schedule(first)
        nrv = int(np.ceil(np.log2(counts.max())))
        assert len(schedule) == nrv
        floor = build_jagged_pyramid(first, schedule, backend=backend)[-1]
        # Dense layout: each segment padded to 2^nrv rows with 0/1.
        rows = 2**nrv
        padded = []
        for x, is_den in zip(host, (False, False, True, True)):
            pad = np.zeros((nb * rows,) + x.shape[1:], np.uint32)
            if is_den:
                (pad[:, 0] if x.ndim == 2 else pad)[:] = F.one
            start = 0
            for b, c in enumerate(counts):
                pad[b * rows:b * rows + c] = x[start:start + c]
                start += c
            padded.append(to_backend(pad, backend))
        dense = build_pyramid(GkrLayer(*padded, nb.bit_length() - 1, F), backend=backend)[-1]
        for x, y in zip(host_mles(floor), host_mles(dense)):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_jagged_slack_keeps_live_prefix_and_zero_tail(F, backend):
    counts = np.array([3, 6, 1, 0], np.int32)
    live = int(counts.sum())
    host = mles(F, True, True, live, seed=2)
    garbage = [np.concatenate([x, (F.ext.random(5, seed=9) if x.ndim == 2 else F.random(5, seed=9))])
               for x in host]  # dead slots must never be read: fill them with junk
    tight = JaggedGkrLayer(*(to_backend(x, backend) for x in host), counts, F)
    slack = JaggedGkrLayer(*(to_backend(x, backend) for x in garbage), counts, F)
    orc = [2, 3, 1, 1]
    a = jagged_layer_transition(tight, orc, backend=backend)
    b = jagged_layer_transition(slack, orc, out_width=11, backend=backend)
    assert b.width == 11
    for x, y in zip(host_mles(a), host_mles(b)):
        np.testing.assert_array_equal(y[:7], x)
        assert not y[7:].any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_saturated_segment_unchanged_after_first_step(F, backend):
    host = [to_backend(x, backend) for x in mles(F, False, True, 3, seed=4)]
    layer = JaggedGkrLayer(*host, [1, 2], F)  # segment 0 saturated from the start
    layers = build_jagged_pyramid(layer, [[1, 1]] * 4, backend=backend)
    first = [to_host(x)[0] for x in layers[1].mles]
    for later in layers[2:]:
        for x, y in zip(first, (to_host(m)[0] for m in later.mles)):
            np.testing.assert_array_equal(x, y)
    # after the first step segment 0's second child is the neutral fraction
    assert not to_host(layers[1].numerator_1)[0].any()
    assert to_host(layers[1].denominator_1)[0].tolist() == [F.one, 0, 0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_single_batch_element(F, backend):
    length = small(backend, 16, 8)
    host = mles(F, False, False, length, seed=8)
    dense = build_pyramid(GkrLayer(*(to_backend(x, backend) for x in host), 0, F), backend=backend)
    jag = JaggedGkrLayer(*(to_backend(x, backend) for x in host), [length], F)
    assert jag.num_batches == 1 and jag.num_batch_variables == 0
    jfloor = build_jagged_pyramid(jag, halving_schedule(jag), backend=backend)[-1]
    d, j = extract_outputs(dense[-1]), extract_jagged_outputs(jfloor)
    np.testing.assert_array_equal(to_host(d.numerator), to_host(j.numerator))
    np.testing.assert_array_equal(to_host(d.denominator), to_host(j.denominator))
    check_batch_sums(F, host, [range(length)], d)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_segments_and_zero_width(backend):
    F = KoalaBear
    host = [to_backend(np.zeros(0, np.uint32), backend) for _ in range(4)]
    layer = JaggedGkrLayer(*host, [0, 0], F)
    steps = halving_schedule(layer)
    assert [s.row_counts.tolist() for s in steps] == [[1, 1]]
    floor = build_jagged_pyramid(layer, steps, backend=backend)[-1]
    out = extract_jagged_outputs(floor)  # empty sums: neutral fractions
    assert F.decode(to_host(out.numerator)).tolist() == [0, 0, 0, 0]
    assert F.decode(to_host(out.denominator)).tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("F", FIELDS)
def test_demo_check_notices_wrong_outputs(F):
    """The demo's LogUp identity holds for zeroed or scaled numerators too;
    its comparison with the NumPy pyramid of each batch element does not."""
    from zorch_nb import _demo_gkr
    E = F.ext
    dense = GkrLayer(*_demo_gkr._lookup_leaves(F, [8] * 4, 1, np), 2, F)
    counts = np.array([5, 1, 8, 3])
    jagged = JaggedGkrLayer(*_demo_gkr._lookup_leaves(F, counts, 2, np), counts, F)
    schedule = halving_schedule(jagged)
    cases = [(dense, extract_outputs(build_pyramid(dense)[-1]), None),
             (jagged, extract_jagged_outputs(build_jagged_pyramid(jagged, schedule)[-1]),
              schedule)]
    for first, out, steps in cases:
        assert _demo_gkr._sums_vanish(F, out) and _demo_gkr._agrees_with_numpy(F, first, out,
                                                                              steps)
        two = E.encode([[2, 0, 0, 0]])
        for wrong in (np.zeros_like(out.numerator), E.mul(out.numerator, two)):
            bad = type(out)(wrong, out.denominator, F)
            assert _demo_gkr._sums_vanish(F, bad)  # (why the identity alone is not enough)
            assert not _demo_gkr._agrees_with_numpy(F, first, bad, steps)
        den = out.denominator.copy()
        den[-1] = E.mul(den[-1:], two)[0]
        assert not _demo_gkr._agrees_with_numpy(F, first, type(out)(out.numerator, den, F),
                                                steps)


class _Subclass(np.ndarray):
    pass


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", FIELDS)
def test_cpu_transition_of_plain_layers_skips_the_general_path(F, ne, de, monkeypatch):
    """``layer_transition`` of a layer of C-contiguous NumPy arrays, without
    ``out``, reads what it needs off the layer and never runs the general
    ``_run``: the reference's bytes step after step, each result remembering
    what ``_trusted`` reads off its arrays (``backend="cpu"`` given or not).
    A layer of strided views or of a NumPy subclass goes the general way."""
    from zorch_nb import logup_gkr
    host = mles(F, ne, de, 2**4, seed=3)
    runs, general = [], logup_gkr._run
    monkeypatch.setattr(logup_gkr, "_run", lambda *a, **k: runs.append(1) or general(*a, **k))
    ref = ng.layer_from_words(F.name, *host)
    layer = GkrLayer(*host, 1, F)
    for step in range(3):
        layer = layer_transition(layer, backend=None if step else "cpu")
        ref = ng.dense_transition(F.name, ref)
        assert_layer_equal(layer, ng.layer_words(F.name, ref))
        known = logup_gkr._trusted(GkrLayer, *layer.mles, 1, F).__dict__
        assert layer.__dict__.keys() == known.keys()
        for key in ("_shapes", "_plain_cupy", "_device", "num_batch_variables", "field"):
            assert layer.__dict__[key] == known[key], (step, key)
        assert all(type(x) is np.ndarray and x.flags.c_contiguous for x in layer.mles)
    assert runs == []
    want = ng.layer_words(F.name, ng.dense_transition(F.name, ng.layer_from_words(F.name, *host)))
    for other in ([np.repeat(x, 2, axis=0)[::2] for x in host], [x.view(_Subclass) for x in host]):
        runs.clear()
        assert_layer_equal(layer_transition(GkrLayer(*other, 1, F)), want)
        assert runs == [1]
    for x in host:  # the caller's arrays are untouched
        assert x.flags.c_contiguous and type(x) is np.ndarray


# ---------------------------------------------------------------------------
# where fresh NumPy outputs lie
# ---------------------------------------------------------------------------

def test_large_numpy_outputs_start_on_their_own_pages_staggered():
    """``_word_plan``: outputs of 1 MiB or more each start on pages of their
    own, at page offsets 0, 1088, 2176 and 3264 bytes, and fit the words it
    allocates from any page offset an allocation may start at; smaller ones
    lie back to back, as on CuPy."""
    from zorch_nb import logup_gkr as lg
    for length, exts in [(1 << 18, (False,) * 4), (1 << 16, (True,) * 4),
                         ((1 << 18) + 3, (False, False, True, True))]:
        words, spaced, plan = lg._word_plan(length, exts)
        assert spaced
        sizes = lg._word_sizes(length, exts)
        for i, ((lo, hi, shape), size) in enumerate(zip(plan, sizes)):
            assert hi - lo == size and shape == ((length, 4) if exts[i] else (length,))
            assert (4 * lo) % 4096 == (1088 * i) % 4096
            if i:  # its own pages: none shared with the view before
                assert lo // 1024 > (plan[i - 1][1] - 1) // 1024
        # the views are placed from the first page boundary of the allocation,
        # which lies up to 1023 words in (NumPy arrays start on 16 bytes)
        assert plan[-1][1] + 1023 <= words <= sum(sizes) + 4 * 2048
    small = lg._word_plan((1 << 18) - 1, (False,) * 4)
    assert small[1] is False and small[0] == lg._view_plan((1 << 18) - 1, (False,) * 4)[1] // 4
    assert [lo for lo, _, _ in small[2]] == [0, 262144, 524288, 786432]
    # the smallest view decides: below 1 MiB, all back to back
    assert not lg._word_plan((1 << 16) - 1, (True,) * 4)[1]
    assert not lg._word_plan(1 << 17, (False, False, True, True))[1]


@pytest.fixture
def spaced_from_64_bytes(monkeypatch):
    """Every fresh NumPy output of 64 bytes or more spaced out as a large one."""
    from zorch_nb import logup_gkr as lg
    monkeypatch.setattr(lg, "_SPACED_BYTES", 64)
    lg._word_plan.cache_clear()
    yield
    lg._word_plan.cache_clear()


def assert_spaced(layer):
    for i, x in enumerate(layer.mles):
        assert x.ctypes.data % 4096 == (1088 * i) % 4096, i


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("F", FIELDS)
def test_spaced_outputs_hold_the_reference_words(F, ne, de, spaced_from_64_bytes):
    """Transitions (plain layers' short path and the general one), fused CPU
    pyramids and jagged steps into spaced-out outputs give the reference's
    bytes, each output where the plan places it, and their next transitions
    read them as any layer."""
    host = mles(F, ne, de, 2**7, seed=5)
    ref = ng.layer_from_words(F.name, *host)
    want = []
    for _ in range(3):
        ref = ng.dense_transition(F.name, ref)
        want.append(ng.layer_words(F.name, ref))
    layer = GkrLayer(*host, 0, F)
    strided = GkrLayer(*(np.repeat(x, 2, axis=0)[::2] for x in host), 0, F)  # general path
    for chain in ([layer, layer_transition(layer)], [strided, layer_transition(strided)],
                  build_pyramid(layer, backend="cpu")[:3]):
        if len(chain) == 2:
            chain.append(layer_transition(chain[1]))
        for got, words in zip(chain[1:], want):
            assert_layer_equal(got, words)
            assert_spaced(got)
    counts = np.array([40, 0, 51, 37], dtype=np.int32)
    first = JaggedGkrLayer(*host, counts, F)
    layers = build_jagged_pyramid(first, halving_schedule(first), backend="cpu")
    ref = ng.layer_from_words(F.name, *host)
    for prev, got in zip(layers, layers[1:]):
        ref = ng.jagged_transition(F.name, ref, list(prev.row_counts), list(got.row_counts),
                                   got.width)
        assert_layer_equal(got, ng.layer_words(F.name, ref))
        if got.width * 4 >= 64:
            assert_spaced(got)


@pytest.mark.parametrize("ne,de", MODES)
def test_from_leaves_places_numpy_children_as_a_transition_does(ne, de, spaced_from_64_bytes):
    """``GkrLayer.from_leaves`` of NumPy leaves copies the children into one
    buffer laid out as a transition's outputs (spaced out here), the
    caller's leaves untouched."""
    F = KoalaBear
    nums, dens = ((F.ext if e else F).random(64, seed=s) for s, e in ((1, ne), (2, de)))
    keep = nums.copy(), dens.copy()
    layer = GkrLayer.from_leaves(nums, dens)
    assert_spaced(layer)
    for got, want in zip(layer.mles, (nums[0::2], nums[1::2], dens[0::2], dens[1::2])):
        assert got.flags.c_contiguous and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(nums, keep[0])
    np.testing.assert_array_equal(dens, keep[1])


@pytest.mark.parametrize("ne,de", MODES)
def test_from_segments_places_its_mles_as_a_transition_does(ne, de, spaced_from_64_bytes):
    """``JaggedGkrLayer.from_segments`` writes its MLEs into one zeroed
    buffer laid out as a transition's outputs (spaced out here): the
    children, the odd segments' neutral ``0/1``, zero dead slots."""
    F = KoalaBear
    sizes, width = (5, 0, 8, 3), 20
    segs = [tuple((F.ext if e else F).random(m, seed=10 * b + s)
                  .reshape((m, 4) if e else (m,)) for s, e in ((1, ne), (2, de)))
            for b, m in enumerate(sizes)]
    layer = JaggedGkrLayer.from_segments(segs, width)
    assert_spaced(layer)
    one = F.params.r_mod_p
    for k, c in ((0, 0), (0, 1), (1, 0), (1, 1)):
        want, at = np.zeros_like(layer.mles[2 * k + c]), 0
        for seg, m in zip(segs, sizes):
            leaves = seg[k][c::2]
            want[at:at + leaves.shape[0]] = leaves
            if k == 1 and c == 1 and m % 2:
                want[at + (m + 1) // 2 - 1] = (one, 0, 0, 0) if want.ndim == 2 else one
            at += (m + 1) // 2
        np.testing.assert_array_equal(layer.mles[2 * k + c], want)
    assert list(layer.row_counts) == [3, 0, 4, 2]


class _Leaves(np.ndarray):
    pass


@pytest.mark.parametrize("spaced", [False, True])
def test_from_leaves_gives_plain_arrays_and_checks_before_copying(spaced, monkeypatch):
    """``GkrLayer.from_leaves`` of NumPy subclass leaves holds plain C-ordered
    ndarrays, small and large alike; a bad ``num_batch_variables`` or ``field``
    is refused before any copy is made."""
    from zorch_nb import logup_gkr as lg
    if spaced:
        monkeypatch.setattr(lg, "_SPACED_BYTES", 64)
    lg._word_plan.cache_clear()
    try:
        F = KoalaBear
        nums = F.random(64, seed=1).view(_Leaves)
        dens = np.asfortranarray(F.ext.random(64, seed=2)).view(_Leaves)
        layer = GkrLayer.from_leaves(nums, dens, 2)
        for got, want in zip(layer.mles, (nums[0::2], nums[1::2], dens[0::2], dens[1::2])):
            assert type(got) is np.ndarray and got.flags.c_contiguous
            np.testing.assert_array_equal(got, want)
        copies = []
        for name in ("_output_buffer", "_output_views"):
            monkeypatch.setattr(lg, name, lambda *a, name=name: copies.append(name))
        monkeypatch.setattr(np, "array", lambda *a, **k: copies.append("np.array"))
        with pytest.raises(ValueError, match="num_batch_variables"):
            GkrLayer.from_leaves(nums, dens, 6)
        with pytest.raises(TypeError, match="field"):
            GkrLayer.from_leaves(nums, dens, 0, "KoalaBear")
        assert copies == []
    finally:
        lg._word_plan.cache_clear()
