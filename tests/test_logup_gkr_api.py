"""LogUp-GKR object layer: validation messages, compile-once, and GPU-only checks.

The GPU tests (``gpu`` marker) run every kernel on CuPy and on Numba-CUDA
against the CPU (aligned and offset arrays, every mode, both fields), and check
that a jagged transition with a device schedule never synchronizes with the
host (``cupyx.allow_synchronize(False)``).
"""
import dataclasses
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

from conftest import SETS_SHAPE_IN_PLACE, SIMULATED
from zorch_nb import BabyBear, KoalaBear, logup_gkr
from zorch_nb.kernels.field_params import KOALABEAR
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, JaggedStep, build_jagged_pyramid,
                                build_pyramid, extract_jagged_outputs, extract_outputs,
                                halving_schedule, jagged_layer_transition, layer_transition)

F = KoalaBear


def four(length, ext=(False, False)):
    ne, de = ext
    return [(F.ext if e else F).random(length, seed=i) for i, e in enumerate((ne, ne, de, de))]


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("mutate, exc, match", [
    (lambda a: a.__setitem__(1, a[1][:4]), ValueError, "same length"),
    (lambda a: [a.__setitem__(i, x[:6]) for i, x in enumerate(list(a))], ValueError,
     r"`numerator_0` \.\.\. `denominator_1` must have a power-of-two length"),
    (lambda a: a.__setitem__(0, a[0].astype(np.int64)), TypeError, "dtype uint32"),
    (lambda a: a.__setitem__(2, list(a[2])), TypeError, "must be a uint32 array"),
    (lambda a: a.__setitem__(3, np.zeros((8, 3), np.uint32)), ValueError, r"\(L, 4\)"),
    (lambda a: a.__setitem__(1, np.zeros((8, 4), np.uint32)), ValueError, "same field"),
    (lambda a: a.__setitem__(3, np.zeros((8, 4), np.uint32)), ValueError,
     "`denominator_1` must be in the same field as `denominator_0`"),
    (lambda a: [a.__setitem__(i, np.zeros((8, 5), np.uint32)) for i in range(4)], ValueError,
     r"`numerator_0` must have shape \(L,\) \(base field\) or \(L, 4\) \(extension\), "
     r"not \(8, 5\)"),
])
def test_dense_construction_errors(mutate, exc, match):
    arrays = four(8)
    mutate(arrays)
    with pytest.raises(exc, match=match):
        GkrLayer(*arrays, 0)


def test_dense_batch_variables_and_field_errors():
    arrays = four(8)
    for nbv in (-1, 4):
        with pytest.raises(ValueError, match=r"`num_batch_variables` must be in \[0, 3\]"):
            GkrLayer(*arrays, nbv)
    for nbv in (True, 1.0):
        with pytest.raises(TypeError, match="`num_batch_variables` must be an integer"):
            GkrLayer(*arrays, nbv)
    with pytest.raises(TypeError, match="extension-ness comes from the array shapes"):
        GkrLayer(*arrays, 0, F.ext)
    with pytest.raises(TypeError, match="`field` must be a zorch_nb PrimeField"):
        GkrLayer(*arrays, 0, "koalabear")
    layer = GkrLayer(*arrays, 1, BabyBear)
    assert (layer.num_variables, layer.num_row_variables) == (3, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.num_batch_variables = 2


def test_dense_floor_errors():
    layer = GkrLayer(*four(4), 2)
    with pytest.raises(ValueError, match="no row variable left"):
        layer_transition(layer)
    assert len(build_pyramid(layer)) == 1
    with pytest.raises(ValueError, match="needs a floor"):
        extract_outputs(GkrLayer(*four(4), 1))
    jagged, dense = JaggedGkrLayer(*four(4), [2, 2]), GkrLayer(*four(4), 0)
    # the dense and jagged functions come in pairs: the error names the other one
    for call, arg, match in [
            (layer_transition, jagged, "`layer` must be a GkrLayer, not JaggedGkrLayer; "
                                       "for a JaggedGkrLayer use jagged_layer_transition"),
            (build_pyramid, jagged, "use build_jagged_pyramid"),
            (extract_outputs, jagged, "use extract_jagged_outputs"),
            (lambda x: jagged_layer_transition(x, [1]), dense,
             "`layer` must be a JaggedGkrLayer, not GkrLayer; for a GkrLayer use layer_transition"),
            (lambda x: build_jagged_pyramid(x, []), dense, "use build_pyramid"),
            (extract_jagged_outputs, dense, "use extract_outputs"),
            (halving_schedule, dense, "`layer` must be a JaggedGkrLayer, not GkrLayer$"),
            (layer_transition, "x", "`layer` must be a GkrLayer, not str$")]:
        with pytest.raises(TypeError, match=match):
            call(arg)
    with pytest.raises(ValueError, match="`backend` must be one of"):
        layer_transition(GkrLayer(*four(4), 0), backend="gpu")


@pytest.mark.parametrize("counts, exc, match", [
    ([1, 1, 1], ValueError, "power-of-two length"),
    ([2, -1], ValueError, r"row_counts\[1\] = -1"),
    ([5, 4], ValueError, "`row_counts` must sum to at most the width 8 of the MLEs, not 9"),
    ([1.5, 2.0], TypeError, "must hold integers"),
    ([[1, 2]], ValueError, "must be 1-D"),
    ([], ValueError, "power-of-two length"),
    ([True, 2], TypeError, "must hold integers, not bool"),
    ((c for c in [4, 4]), TypeError, r"`row_counts` must be a sequence.*not an iterator"),
    ([2**63, 1], ValueError, r"row_counts\[0\] = 9223372036854775808"),  # was float64
    ([2**64, 1], ValueError, r"row_counts\[0\] = 18446744073709551616"),  # was OverflowError
    ([1, 2**40], ValueError, r"row_counts\[1\] = 1099511627776"),  # the count out of range
])
def test_jagged_construction_errors(counts, exc, match):
    with pytest.raises(exc, match=match):
        JaggedGkrLayer(*four(8), counts)


def test_jagged_schedule_errors():
    layer = JaggedGkrLayer(*four(8), [5, 3])
    with pytest.raises(ValueError, match=r"one count per batch element \(2\), not 3"):
        jagged_layer_transition(layer, [3, 2, 1])
    with pytest.raises(ValueError, match=r"truncates segment 0: out_row_counts\[0\] = 2 < "
                                         r"ceil\(row_counts\[0\] / 2\) = 3"):
        jagged_layer_transition(layer, [2, 2])
    with pytest.raises(ValueError, match="sum to 5, more than `out_width` = 4"):
        jagged_layer_transition(layer, [3, 2], out_width=4)
    with pytest.raises(ValueError, match=r"`out_width` must be in \[0, 2147483647\], not -1"):
        jagged_layer_transition(layer, [3, 2], out_width=-1)
    with pytest.raises(ValueError, match=r"`out_width` must be in \[0, 2147483647\]"):
        jagged_layer_transition(layer, [3, 2], out_width=2**62)  # was NumPy's own error
    with pytest.raises(TypeError, match="`out_row_counts` must hold integers"):
        jagged_layer_transition(layer, ["a", "b"])
    with pytest.raises(ValueError, match=r"out_row_counts\[0\] = 18446744073709551616"):
        jagged_layer_transition(layer, [2**64, 1])
    with pytest.raises(TypeError, match="`max_row_count` must be an integer"):
        halving_schedule(layer, max_row_count="abc")
    with pytest.raises(ValueError, match=r"`max_row_count` must bound every row count, but "
                                         r"row_counts\[0\] = 5 > 4"):
        halving_schedule(layer, max_row_count=4)  # (it would truncate segment 0)
    # a schedule's step is both arguments: the loop a user writes by hand
    walked = [layer]
    for step in halving_schedule(layer):
        walked.append(jagged_layer_transition(walked[-1], step))
    built = build_jagged_pyramid(layer, halving_schedule(layer))
    assert len(built) == len(walked) == 4
    for a, b in zip(built, walked):
        assert a.width == b.width and all((x == y).all() for x, y in zip(a.mles, b.mles))
    for step in (([3, 2], 6), [[3, 2], 6], JaggedStep(np.array([3, 2], np.int32), 6)):
        assert jagged_layer_transition(layer, step).width == 6
    assert jagged_layer_transition(layer, (3, 2)).width == 5  # a tuple of counts: counts
    with pytest.raises(TypeError, match="`out_width` must not be given with a step"):
        jagged_layer_transition(layer, ([3, 2], 6), 6)
    for step in (([3, 2], None), JaggedStep([3, 2], None)):  # width None: the sum
        assert jagged_layer_transition(layer, step).width == 5
    for call in (lambda: jagged_layer_transition(layer, [[3, 2], None]),
                 lambda: build_jagged_pyramid(layer, [[[3, 2], None]])):
        with pytest.raises(TypeError, match=r"list step \[counts, width\] needs an integer"):
            call()
    for counts in ((np.array(3), np.array(2)), [np.array(3), 2], (np.int64(3), 2)):
        assert jagged_layer_transition(layer, counts).width == 5  # two counts, not a step
    # a list step's width as a 0-d array, as the tuple's; a bad one is named
    # (both were read as bare counts and blamed on `out_row_counts`)
    assert jagged_layer_transition(layer, [[3, 2], np.array(6)]).width == 6
    assert build_jagged_pyramid(layer, [[[3, 2], np.array(6)]])[-1].width == 6
    for call in (lambda: jagged_layer_transition(layer, [[3, 2], 6.0]),
                 lambda: build_jagged_pyramid(layer, [[[3, 2], 6.0]])):
        with pytest.raises(TypeError, match="`out_width` must be an integer, not float"):
            call()
    with pytest.raises(ValueError, match=r"`numerator_0` must have shape \(width,\) \(base "
                                         r"field\) or \(width, 4\)"):
        JaggedGkrLayer(*[np.zeros((8, 3), np.uint32)] * 4, [3, 2])
    for call in (build_pyramid, lambda first, fused: build_jagged_pyramid(first, [], fused=fused)):
        with pytest.raises(TypeError, match="`fused` must be None, True or False"):
            call(GkrLayer(*four(8), 0) if call is build_pyramid else layer, fused="no")
    out = jagged_layer_transition(layer, [3, 2], out_width=7)
    assert out.width == 7 and out.row_counts.tolist() == [3, 2]
    with pytest.raises(ValueError, match="width == number of batch elements.*fold further"):
        extract_jagged_outputs(out)
    with pytest.raises(ValueError, match="fold further"):  # a 0 count: not "already 1"
        extract_jagged_outputs(JaggedGkrLayer(*four(8), [1, 0]))
    spare = JaggedGkrLayer(*four(8), [1, 1])  # all 1 with slack: one compacting step
    (step,) = halving_schedule(spare)
    assert step.row_counts.tolist() == [1, 1] and step.width == 2
    assert halving_schedule(jagged_layer_transition(spare, step)) == []  # a floor
    with pytest.raises(ValueError, match=r"already 1: one step to out_row_counts \[1\] \* 2, "
                                         r"out_width 2 compacts it"):
        extract_jagged_outputs(spare)
    floor = extract_jagged_outputs(jagged_layer_transition(spare, [1, 1], 2))
    num, den = floor  # unpacks, indexes and has a length, as the pair it stands for
    assert num.shape == (4,) and den.shape == (4,)
    assert floor[0] is num and floor[-1] is den and len(floor) == 2 and floor[:] == (num, den)
    with pytest.raises(IndexError):
        floor[2]
    # the default width is the counts' sum: an overflowing sum names the counts
    with pytest.raises(ValueError, match=r"`out_row_counts` must sum to at most 2147483647 "
                                         r"\(int32 offsets\), not 2147483648"):
        jagged_layer_transition(layer, [2**31 - 1, 1])
    with pytest.raises(ValueError, match=r"schedules\[0\]: Argument `out_row_counts` must sum"):
        build_jagged_pyramid(layer, [[2**31 - 1, 1]])
    # a step as a list [counts, width] is the pair it looks like
    as_list = build_jagged_pyramid(layer, [[[3, 2], 7], [np.array([2, 1]), 3]])
    as_tuple = build_jagged_pyramid(layer, [([3, 2], 7), (np.array([2, 1]), 3)])
    assert [g.width for g in as_list] == [layer.width, 7, 3]
    assert all(a.numerator_0.tobytes() == b.numerator_0.tobytes()
               for a, b in zip(as_list, as_tuple))
    for one_step in (JaggedStep([3, 2], 5), ([3, 2], 5), [3, 2], ([3, 2], None),
                     [np.array([3, 2]), None]):
        with pytest.raises(TypeError, match="a list of steps, not one step"):
            build_jagged_pyramid(layer, one_step)
    assert len(build_jagged_pyramid(layer, [([3, 2], 5)])) == 2  # the list of it works
    two = JaggedGkrLayer(*four(2), [2, 0])
    with pytest.raises(ValueError, match=r"every row count to be 1, but row_counts\[0\] = 2"):
        extract_jagged_outputs(two)


def test_jagged_outputs_beyond_memory_name_the_argument(monkeypatch):
    """A width up to 2**31 - 1 is legal; on the host its layer (16 bytes a slot
    with base outputs, 64 with extension ones) was NumPy's bare MemoryError,
    or a 32 GiB allocation an overcommitting OS grants and then kills."""
    from zorch_nb import _backend
    monkeypatch.setattr(_backend, "physical_memory", lambda: 2**20)
    layer = JaggedGkrLayer(*four(8), [5, 3])
    # 4 base MLEs of 2**16 words = 1 MiB: fits; one more slot (aligned) does not
    assert jagged_layer_transition(layer, [3, 2], out_width=2**16).width == 2**16
    with pytest.raises(MemoryError, match=r"Argument `out_width`: the output layers need "
                                          r"0\.0 GiB; this machine has 0\.0 GiB"):
        jagged_layer_transition(layer, [3, 2], out_width=2**16 + 1)
    ext = JaggedGkrLayer(*four(8, (False, True)), [5, 3])  # 16 words a slot
    with pytest.raises(MemoryError, match="Argument `out_width`"):
        jagged_layer_transition(ext, [3, 2], out_width=2**14 + 1)
    # a pyramid keeps every layer: the sum counts, checked before anything runs
    steps = [([3, 2], 2**15), ([2, 1], 2**15 + 4)]
    with pytest.raises(MemoryError, match="Argument `schedules`"):
        build_jagged_pyramid(layer, steps)
    assert len(build_jagged_pyramid(layer, steps[:1] + [([2, 1], 2**15)])) == 3


def test_from_leaves_and_from_segments_lay_out_the_leaves():
    """Leaf 2i + c is child c of row i; an odd segment's last row gets 0/1 as its
    second child; empty segments get no row; the per-batch sums are the leaves'."""
    E = F.ext
    num, den = F.random(8, seed=1), E.random(8, seed=2)
    layer = GkrLayer.from_leaves(num, den, 1, BabyBear)
    want = GkrLayer(num[0::2], num[1::2], den[0::2], den[1::2], 1, BabyBear)
    assert (layer.num_variables, layer.num_batch_variables, layer.field) == (2, 1, BabyBear)
    for a, b in zip(layer.mles, want.mles):
        assert a.flags.c_contiguous and np.array_equal(a, b)
    two = GkrLayer.from_leaves(num[:2], den[:2])  # one row: still copies, not views
    assert not any(np.shares_memory(m, x) for m in two.mles for x in (num, den))
    for bad, match in (((num[:7], den[:7]), "even number"), ((num, den[:4]), "same number"),
                       ((num[:6], den[:6]), "2 L leaves with L a power of two, not 6; pad "
                                            "with neutral leaves 0 / 1.*from_segments"),
                       ((num.astype(np.int64), den), "dtype uint32")):
        with pytest.raises((TypeError, ValueError), match=match):
            GkrLayer.from_leaves(*bad)
    sizes = (5, 2, 0, 1)
    segs = [(F.random(m, seed=3 + m), E.random(m, seed=9 + m)) for m in sizes]
    jag = JaggedGkrLayer.from_segments(segs, width=9)
    assert jag.row_counts.tolist() == [3, 1, 0, 1] and jag.width == 9
    rows = np.cumsum([0, 3, 1, 0, 1])
    for k, (n, d) in enumerate(segs):  # the rows of segment k, child by child
        r0, r1 = rows[k], rows[k + 1]
        np.testing.assert_array_equal(jag.numerator_0[r0:r1], n[0::2])
        np.testing.assert_array_equal(jag.numerator_1[r0:r0 + n[1::2].shape[0]], n[1::2])
        np.testing.assert_array_equal(jag.denominator_0[r0:r1], d[0::2])
        if len(n) % 2:  # the neutral 0/1 closes an odd segment
            assert jag.numerator_1[r1 - 1] == 0 and (jag.denominator_1[r1 - 1] == E.one).all()
    assert not jag.numerator_0[5:].any() and not jag.denominator_1[5:].any()  # dead slots
    out = extract_jagged_outputs(build_jagged_pyramid(jag, halving_schedule(jag))[-1])
    for k, (n, d) in enumerate(segs):
        tn, td = E.encode([0, 0, 0, 0]), E.one
        for i in range(len(n)):  # sum of the segment's leaves, one fraction at a time
            tn, td = E.add(E.mul(tn, d[i]), E.mul(E.from_base(n[i]), td)), E.mul(td, d[i])
        n0, n1 = out.numerator[2 * k], out.numerator[2 * k + 1]
        d0, d1 = out.denominator[2 * k], out.denominator[2 * k + 1]
        got = E.mul(E.add(E.mul(n0, d1), E.mul(n1, d0)), E.inv(E.mul(d0, d1)))
        np.testing.assert_array_equal(got, E.mul(tn, E.inv(td)))
    with pytest.raises(ValueError, match="`width` must be >= 5, the rows the segments need"):
        JaggedGkrLayer.from_segments(segs, width=4)
    with pytest.raises(ValueError, match=r"`width` must be in \[0, 2147483647\]"):
        JaggedGkrLayer.from_segments(segs, width=2**40)  # was NumPy's MemoryError (4 TiB)
    with pytest.raises(TypeError, match="`field` must be a zorch_nb PrimeField"):
        JaggedGkrLayer.from_segments(segs, field="KoalaBear")
    with pytest.raises(TypeError, match=r"`segments\[0\] numerators` must be a uint32 array of "
                                        r"Montgomery words \(NumPy\)"):
        JaggedGkrLayer.from_segments([([1, 2], segs[0][1][:2])])
    with pytest.raises(TypeError, match=r"`segments\[1\]` must be a \(numerators"):
        JaggedGkrLayer.from_segments([segs[0], num])
    with pytest.raises(ValueError, match=r"`segments\[1\] denominators` must be in the field"):
        JaggedGkrLayer.from_segments([segs[0], (segs[1][0], F.random(2, seed=1))])
    for k in (0, 3):
        with pytest.raises(ValueError, match=rf"`segments` must hold a power-of-two number "
                                             rf"of segments.*not {k}"):
            JaggedGkrLayer.from_segments(segs[:k])


@SETS_SHAPE_IN_PLACE
def test_mle_reshaped_in_place_after_construction_is_refused():
    """The kernels trust the checked shapes: a later in-place reshape must not reach them."""
    host = four(1024)
    dense, jagged = GkrLayer(*host, 0), JaggedGkrLayer(*host, [512, 512])
    host[2].shape = (256, 4)  # same memory, now four times fewer (extension) elements
    for call in (lambda: layer_transition(dense), lambda: build_pyramid(dense),
                 lambda: jagged_layer_transition(jagged, [256, 256]),
                 lambda: build_jagged_pyramid(jagged, halving_schedule(jagged))):
        with pytest.raises(ValueError, match="changed shape or dtype after the layer was built"):
            call()
    host[2].shape = (1024,)
    assert len(build_pyramid(dense)) == 11  # shapes as checked: fine again
    host[0].dtype = np.float32  # same bytes, now read as floats: refused too
    with pytest.raises(ValueError, match="changed shape or dtype"):
        layer_transition(dense)


@pytest.mark.gpu
def test_gpu_mle_reshaped_in_place_after_construction_is_refused():
    """As above on CuPy arrays, whose layers skip the backend resolution: a
    reshape that leaves the layer no row variable must not pass as a floor."""
    import cupy
    arrays = [cupy.asarray(x) for x in four(8)]
    dense = GkrLayer(*arrays, 2)
    arrays[0].shape = (4, 2)
    for call in (lambda: layer_transition(dense), lambda: build_pyramid(dense),
                 lambda: build_pyramid(dense, fused=True)):
        with pytest.raises(ValueError, match="changed shape or dtype after the layer was built"):
            call()
    arrays[0].shape = (8,)
    assert len(build_pyramid(dense)) == 2


def test_copies_and_pickles_of_layers_are_checked_again():
    """A copy must not hand out writeable row counts (the kernels trust them)."""
    import copy
    import pickle
    arrays = four(8, (False, True))
    jagged, dense = JaggedGkrLayer(*arrays, [5, 3], BabyBear), GkrLayer(*arrays, 1, BabyBear)
    for clone in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
        j, d = clone(jagged), clone(dense)
        assert not j.row_counts.flags.writeable and j.row_counts.tolist() == [5, 3]
        with pytest.raises(ValueError, match="read-only"):
            j.row_counts[0] = 2**25
        assert (j.field, d.field, d.num_batch_variables) == (BabyBear, BabyBear, 1)
        for a, b in zip(jagged_layer_transition(j, [3, 2]).mles,
                        jagged_layer_transition(jagged, [3, 2]).mles):
            assert np.array_equal(a, b)
        for a, b in zip(layer_transition(d).mles, layer_transition(dense).mles):
            assert np.array_equal(a, b)
    # a layer of a field made with the public constructor: its pickled result
    # (a new field object, the same field) is taken as out
    from zorch_nb.fields import PrimeField
    mine = PrimeField("KoalaBear", KoalaBear.params)
    x = GkrLayer(*[KoalaBear.encode(np.arange(1, 9)) for _ in range(4)], field=mine)
    y = pickle.loads(pickle.dumps(layer_transition(x)))
    assert y.field is not mine and layer_transition(x, out=y) is y
    with pytest.raises(ValueError, match="is a BabyBear layer; the result is KoalaBear"):
        layer_transition(x, out=layer_transition(GkrLayer(*y.mles, field=BabyBear)))


@SETS_SHAPE_IN_PLACE
def test_row_counts_cannot_be_made_writeable_or_reshaped_under_the_kernels():
    """``setflags(write=True)`` on the counts, then counts past the width,
    read past the MLEs (a segfault at 2**30); a ``.shape =`` in place reached
    the schedule checks."""
    arrays = four(8, (False, True))
    layers = [JaggedGkrLayer(*arrays, [4, 4])]
    layers.append(jagged_layer_transition(layers[0], [2, 2], 8))  # built by _trusted
    pyramid = build_jagged_pyramid(layers[0], halving_schedule(layers[0]))  # host steps
    for layer in layers + pyramid[1:]:
        # nor any array a caller reaches through `.base` (the counts' owner
        # took it: the copy made on checking owned its memory)
        a = layer.row_counts
        while isinstance(a, np.ndarray):
            with pytest.raises(ValueError, match="WRITEABLE"):
                a.setflags(write=True)
            a = a.base
    for layer in layers:
        want = [x.copy() for x in jagged_layer_transition(layer, [2, 2]).mles]
        layer.row_counts.shape = (2, 1)
        assert layer.num_batches == 2
        for a, b in zip(jagged_layer_transition(layer, [2, 2]).mles, want):
            assert np.array_equal(a, b)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix itself
def test_argument_conventions():
    """Index-like ints are accepted as NumPy would; other inputs are named in the error."""
    arrays = four(8)
    assert GkrLayer(*arrays, np.array(1)).num_batch_variables == 1  # 0-d int array
    layer = JaggedGkrLayer(*arrays, [5, 3])
    assert jagged_layer_transition(layer, [3, 2], np.array(6)).width == 6
    with pytest.raises(TypeError, match="`num_batch_variables` must be an integer"):
        GkrLayer(*arrays, np.array(True))
    with pytest.raises(TypeError, match="`numerator_0` .* not a NumPy scalar"):
        GkrLayer(np.uint32(5), *arrays[1:], 0)
    for wrapped, match in ((np.ma.array(arrays[0]), "`numerator_0` is a masked array"),
                           (np.asmatrix(arrays[0]), "`numerator_0` must be a plain uint32")):
        with pytest.raises(TypeError, match=match):
            GkrLayer(wrapped, *arrays[1:], 0)
    with pytest.raises(TypeError, match="`schedules` must be an iterable"):
        build_jagged_pyramid(layer, None)
    with pytest.raises(ValueError, match=r"^schedules\[2\]: the schedule truncates segment 0"):
        build_jagged_pyramid(layer, [[3, 2], [2, 1], [0, 1]])


def test_cupy_backend_without_cupy_names_the_backend(monkeypatch):
    import sys
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ImportError, match="backend='cupy' was asked for"):
        layer_transition(GkrLayer(*four(8), 0), backend="cupy")


def test_row_counts_are_read_only_int32():
    layer = JaggedGkrLayer(*four(8), np.array([3, 5], np.int64))
    assert layer.row_counts.dtype == np.int32 and not layer.row_counts.flags.writeable
    assert layer.counts_on_host


@pytest.mark.parametrize("mutate", [
    lambda c: setattr(c, "shape", (2, 4)),
    lambda c: setattr(c.base, "shape", (2, 4)),
    lambda c: setattr(c.base, "dtype", np.float32),
    lambda c: setattr(c.base, "dtype", np.int16),
], ids=["shape", "base shape", "base dtype float32", "base dtype int16"])
@SETS_SHAPE_IN_PLACE
def test_row_counts_metadata_changed_in_place_leaves_the_layer_as_checked(mutate):
    """The transitions run their launchers unchecked: a caller reshaping or
    retyping ``row_counts`` (or its owner, ``.base``) in place must not change
    the counts they read (the trusted array is a private view)."""
    counts, orc = [3, 1, 2, 2, 0, 1, 3, 4], [2, 1, 1, 1, 0, 1, 2, 2]
    host = four(16)
    want = jagged_layer_transition(JaggedGkrLayer(*host, counts), orc, 12)
    layer = JaggedGkrLayer(*host, counts)
    mutate(layer.row_counts)
    assert layer.num_batches == 8
    got = jagged_layer_transition(layer, orc, 12)
    mutate(got.row_counts)
    for x, y in zip(want.mles, got.mles):
        np.testing.assert_array_equal(x, y)
    again = jagged_layer_transition(got, [1, 1, 1, 1, 0, 1, 1, 1], 8)
    np.testing.assert_array_equal(
        jagged_layer_transition(want, [1, 1, 1, 1, 0, 1, 1, 1], 8).mles[2], again.mles[2])


@SETS_SHAPE_IN_PLACE
def test_host_schedules_checked_at_once_equal_the_step_by_step_checks():
    """``_check_steps`` checks a schedule of int32 NumPy counts in a few array
    operations for all steps (a 2**26 pyramid's 19 steps run while the GPU
    waits); anything that fails, or another form, goes step by step, which
    names the error.  Both must accept and refuse the same schedules."""
    from zorch_nb.logup_gkr import _check_host_steps, _check_steps, _step
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 40, 16).astype(np.int32)
    counts[[2, 9]] = [0, 1]
    layer = JaggedGkrLayer(*four(int(counts.sum()) + 3), counts)
    halving = [_step(s) for s in halving_schedule(layer)]

    def step_by_step(steps):
        rc, out = layer._counts, []
        for orc, width in steps:
            rc, width = logup_gkr._check_step(rc, "numpy", orc, width)
            out.append((rc, width))
        return out

    fast = _check_host_steps(layer._counts, halving)
    assert fast is not None  # halving_schedule's steps take the fast path
    assert len(fast) == len(halving) > 3
    for (a, wa), (b, wb) in zip(fast, step_by_step(halving)):
        assert a.dtype == np.int32 and not a.flags.writeable and wa == wb
        np.testing.assert_array_equal(a, b)
    c = halving[0][0]
    bad = {
        "negative": [(np.where(np.arange(16) == 5, -1, c).astype(np.int32), None)],
        "truncates": [(np.maximum(c - 1, 0).astype(np.int32), None)],
        "narrow": [(c, int(c.sum()) - 1)],
        "too wide": [(c, 2**31)],
        "later step truncates": halving[:2] + [(halving[3][0], None)],
    }
    for name, steps in bad.items():
        assert _check_host_steps(layer._counts, steps) is None, name
        with pytest.raises(ValueError):
            step_by_step(steps)
        with pytest.raises(ValueError, match=r"schedules\[\d\]"):
            build_jagged_pyramid(layer, steps)
    others = {  # forms the fast path leaves to the step-by-step one (which accepts them)
        "list counts": [(c.tolist(), None)],
        "int64 counts": [(c.astype(np.int64), None)],
        "NumPy integer width": [(c, np.int64(c.sum()))],
    }
    for name, steps in others.items():
        assert _check_host_steps(layer._counts, steps) is None, name
        assert _check_steps(layer, steps)[0][1] == int(c.sum())
    # the pyramid's counts are its own: changing the schedule afterwards, or
    # the counts' shared owner's metadata, leaves every layer as checked
    schedule = [(s.row_counts.copy(), s.width) for s in halving_schedule(layer)]
    built = build_jagged_pyramid(layer, schedule)
    want = [g.row_counts.copy() for g in built]
    for orc, _ in schedule:
        orc[:] = 7
    built[1].row_counts.base.shape = (-1,)
    for g, w in zip(built, want):
        np.testing.assert_array_equal(g.row_counts, w)
        assert not g.row_counts.flags.writeable
    np.testing.assert_array_equal(
        build_jagged_pyramid(built[1], [halving[1]])[1].numerator_0,
        build_jagged_pyramid(layer, halving[:2])[2].numerator_0)


def test_backend_that_is_not_a_str_is_refused():
    layer = GkrLayer(*four(4), 0)
    with pytest.raises(TypeError, match="`backend` must be one of .* not ndarray"):
        layer_transition(layer, backend=np.array("cpu"))
    with pytest.raises(TypeError, match="`backend` must be one of .* not int"):
        F.add(layer.numerator_0, layer.numerator_0, backend=1)
    np.testing.assert_array_equal(layer_transition(layer, backend=np.str_("cpu")).mles[0],
                                  layer_transition(layer).mles[0])
    # with nothing to fold (a floor, an empty schedule) and fused=False, no
    # transition checks `backend`: it was accepted whatever it was
    floor = GkrLayer(*four(8), 3)
    flat = JaggedGkrLayer(*four(8), [4, 4])
    for fused in (None, False):
        for bad, exc in (("bogus", ValueError), (7, TypeError)):
            with pytest.raises(exc, match="`backend` must be one of"):
                build_pyramid(floor, backend=bad, fused=fused)
            with pytest.raises(exc, match="`backend` must be one of"):
                build_jagged_pyramid(flat, [], backend=bad, fused=fused)
        assert build_pyramid(floor, backend="cpu", fused=fused)[0] is floor


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="counts compiled signatures")
def test_cpu_kernels_compile_once():
    """One CPU compile per kernel of a mode: lengths, counts and fields are runtime."""
    from zorch_nb.kernels import gkr_cpu
    for Fi in (KoalaBear, BabyBear):
        for ext in ((False, False), (True, False), (False, True), (True, True)):
            for length in (4, 16):
                build_pyramid(GkrLayer(*four(length, ext), 1, Fi))
                layer_transition(GkrLayer(*four(length, ext), 1, Fi))
                layer = JaggedGkrLayer(*four(length, ext), [length - 3, 1], Fi)
                build_jagged_pyramid(layer, halving_schedule(layer))
    frozen = four(16, (True, False))
    for x in frozen:
        x.flags.writeable = False  # read-only inputs share the pyramid's signature too
    build_pyramid(GkrLayer(*frozen, 1))
    # these small layers run the serial twins; other tests' larger ones the
    # parallel kernels: one signature each at most
    from zorch_nb.kernels.cpu_threads import serial_twin
    for kernels in gkr_cpu._KERNELS:  # one set per input mode, all four run above
        for k in (kernels.pyramid, kernels.jagged):
            assert len(serial_twin(k).signatures) == 1
            assert len(k.signatures) <= 1
    # the transition takes its inputs as they come (read-only views cost 1.7 us
    # a call): other tests' read-only layers may have added that variant only
    from numba import types
    for kernels in gkr_cpu._KERNELS:
        for k, at_least in ((serial_twin(kernels.fold), 1), (kernels.fold, 0)):
            writable = {tuple(t.copy(readonly=False) if isinstance(t, types.Array) else t
                              for t in sig) for sig in k.signatures}
            assert at_least <= len(writable) <= 1


_ONE_MODE = """
from zorch_nb import KoalaBear as F
from zorch_nb.kernels import gkr_cpu as k
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_pyramid, jagged_layer_transition,
                                layer_transition)
# extension numerators over base denominators (mode EB), whose pyramid's
# later layers are in that mode too
mles = (F.ext.random(64, seed=1), F.ext.random(64, seed=2), F.random(64, seed=3),
        F.random(64, seed=4))
layer_transition(GkrLayer(*mles, 0))
build_pyramid(GkrLayer(*mles, 0))
jagged_layer_transition(JaggedGkrLayer(*mles, [5, 3] * 8), [3, 2] * 8)
others = [f for m in ("bb", "be", "ee") for f in (getattr(k, "_dense_run_" + m),
          getattr(k, "_pair_run_" + m), getattr(k, "_chunk_short_" + m))]
# (the pyramid reads its input as read-only views: a signature of its own)
print([len(f.signatures) for f in others],
      [len(f.signatures) > 0 for f in (k._dense_run_eb, k._pair_run_eb, k._chunk_short_eb)])
"""


@pytest.mark.early
@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="counts compiles")
def test_a_first_call_compiles_its_own_modes_loops_alone(tmp_path):
    """A cold first transition or pyramid compiles its mode's serial loops and
    no other mode's: with the mode a runtime argument of the kernels, Numba
    compiled every mode's loops on any first call (a first mixed jagged
    pyramid 45.7 s cold on the 2-core VM, 22.7 s now).  Short segments, so the
    jagged transition takes its short-segment path too."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))  # nothing loaded: all compiled here
    run = subprocess.run([sys.executable, "-c", _ONE_MODE], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[0, 0, 0, 0, 0, 0, 0, 0, 0] [True, True, True]", run.stdout


@pytest.mark.cudasim
def test_numba_device_prefix_scan():
    """Device-resident counts take the Numba prefix-scan kernel (no host round trip)."""
    from numba import cuda

    from zorch_nb.kernels import gkr_cpu, gkr_cuda_numba
    rng = np.random.default_rng(3)
    rc = rng.integers(0, 5, size=8).astype(np.int32)
    orc = ((rc + 1) // 2 + rng.integers(0, 2, size=8)).astype(np.int32)
    ins = four(int(rc.sum()), (False, True))
    width = int(orc.sum()) + 2
    want = [np.empty((width, 4), np.uint32) for _ in range(4)]
    gkr_cpu.jagged_transition(rc, orc, np.empty((2, 8), np.int64), *ins, *want, KOALABEAR)
    d_prefix = cuda.to_device(np.zeros((2, 8), np.int64))
    d_out = [cuda.to_device(np.zeros((width, 4), np.uint32)) for _ in range(4)]
    gkr_cuda_numba.jagged_transition(cuda.to_device(rc), cuda.to_device(orc), d_prefix,
                                     *(cuda.to_device(x) for x in ins), *d_out, KOALABEAR)
    np.testing.assert_array_equal(d_prefix.copy_to_host(), np.stack([np.cumsum(rc), np.cumsum(orc)]))
    for got, exp in zip(d_out, want):
        np.testing.assert_array_equal(got.copy_to_host(), exp)


# ---------------------------------------------------------------------------
# GPU machine only
# ---------------------------------------------------------------------------

MODES = [(ne, de) for ne in (False, True) for de in (False, True)]


def _dense_length(backend):
    """2**12 rows; 2**8 for Numba-CUDA under the simulator (CI), where the
    fused dense pyramid of 2**12 took 5.5 of the 8 s of each case below (2**8
    is still one fused launch of every layer, the same kernel)."""
    return 1 << 8 if backend == "numba" and SIMULATED else 1 << 12


def _gpu_cases(Fi, ne, de, dense_length=1 << 12):
    """A dense layer and a jagged layer (host arrays) of every field combination."""
    rng = np.random.default_rng(17)
    dense = [(Fi.ext if e else Fi).random(dense_length, seed=i)
             for i, e in enumerate((ne, ne, de, de))]
    counts = rng.integers(0, 200, size=64).astype(np.int32)
    width = int(counts.sum()) + 5
    jag = [(Fi.ext if e else Fi).random(width, seed=i + 9) for i, e in enumerate((ne, ne, de, de))]
    return dense, jag, counts


def _device(x, offset):
    """``x`` on the GPU, ``offset`` words past a fresh allocation (offset 1: unaligned)."""
    import cupy
    buf = cupy.empty(x.size + offset, dtype=np.uint32)
    view = buf[offset:].reshape(x.shape)
    view[...] = cupy.asarray(x)
    return view


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "offset"])
@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("Fi", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_gpu_every_kernel_matches_cpu(Fi, ne, de, offset):
    import cupy
    for backend in ("cupy", "numba"):
        dense, jag, counts = _gpu_cases(Fi, ne, de, _dense_length(backend))
        want = build_pyramid(GkrLayer(*dense, 4, Fi))
        jfirst = JaggedGkrLayer(*jag, counts, Fi)
        jwant = build_jagged_pyramid(jfirst, halving_schedule(jfirst))
        assert len(want) >= 5 and len(jwant) >= 5
        got = build_pyramid(GkrLayer(*(_device(x, offset) for x in dense), 4, Fi),
                            backend=backend)
        dev = JaggedGkrLayer(*(_device(x, offset) for x in jag), counts, Fi)
        jgot = build_jagged_pyramid(dev, halving_schedule(jfirst), backend=backend)
        for a, b in zip(want + jwant, got + jgot):
            for x, y in zip(a.mles, b.mles):
                assert isinstance(y, cupy.ndarray)
                np.testing.assert_array_equal(x, y.get())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba"])
def test_gpu_device_schedule_never_synchronizes(backend):
    import cupy
    import cupyx
    dense, jag, counts = _gpu_cases(KoalaBear, False, True, _dense_length(backend))
    host_first = JaggedGkrLayer(*jag, counts)
    want = build_jagged_pyramid(host_first, halving_schedule(host_first))
    d_layer = GkrLayer(*(cupy.asarray(x) for x in dense), 2)
    d_first = JaggedGkrLayer(*(cupy.asarray(x) for x in jag), cupy.asarray(counts))
    cupy.cuda.get_current_stream().synchronize()
    with cupyx.allow_synchronize(False):
        steps = halving_schedule(d_first, max_row_count=int(counts.max()))
        layers = build_jagged_pyramid(d_first, steps, backend=backend)
        dense_layers = build_pyramid(d_layer, backend=backend)
        out = extract_jagged_outputs(layers[-1])
        extract_outputs(dense_layers[-1])
    assert len(layers) == len(want)
    for a, b in zip(want, layers):
        live = int(np.sum(a.row_counts))
        for x, y in zip(a.mles, b.mles):
            np.testing.assert_array_equal(x[:live], y.get()[:live])
    wout = extract_jagged_outputs(want[-1])
    np.testing.assert_array_equal(wout.numerator, out.numerator.get())
    np.testing.assert_array_equal(wout.denominator, out.denominator.get())


@pytest.mark.gpu
def test_gpu_counts_reshaped_in_place_leave_the_layer_as_checked():
    """CuPy lets a caller set an array's ``.shape`` in place.  The transitions
    run the launchers without their checks (the layer was checked when built),
    so the counts they read are a private view, neither the caller's array
    nor ``row_counts``."""
    import cupy
    counts = np.array([3, 1, 2, 2, 0, 1, 3, 4], np.int32)
    orc = np.array([2, 1, 1, 1, 0, 1, 2, 2], np.int32)
    host = [KoalaBear.random(16, seed=i) for i in range(4)]
    want = jagged_layer_transition(JaggedGkrLayer(*host, counts), orc, 12)
    d_counts, d_orc = cupy.asarray(counts), cupy.asarray(orc)
    layer = JaggedGkrLayer(*(cupy.asarray(x) for x in host), d_counts)
    d_counts.shape = (2, 4)
    layer.row_counts.shape = (4, 2)  # the layer's own view: not the one the kernels read
    assert layer.num_batches == 8 and layer.row_counts.shape == (4, 2)
    got = jagged_layer_transition(layer, d_orc, 12)
    d_orc.shape = (4, 2)
    assert got.row_counts.shape == (8,)
    got.row_counts.shape = (2, 4)
    for x, y in zip(want.mles, got.mles):
        np.testing.assert_array_equal(x, y.get())
    twice = jagged_layer_transition(got, [1, 1, 1, 1, 0, 1, 1, 1], 8)
    np.testing.assert_array_equal(
        jagged_layer_transition(want, [1, 1, 1, 1, 0, 1, 1, 1], 8).mles[2], twice.mles[2].get())


@pytest.mark.parametrize("ne,de", [(False, False), (False, True), (True, False)])
def test_jagged_outputs_start_on_16_byte_boundaries(ne, de):
    """The four outputs share one buffer; with a width of 4 k + 1 a packed split put
    the base views at odd word offsets, and the GPU kernels then ran without
    16-byte accesses for every array of the next launch."""
    layer = JaggedGkrLayer(*four(18, (ne, de)), [9, 9])
    for counts, width in (([5, 5], 13), ([3, 3], 7), ([2, 2], 5)):
        layer = jagged_layer_transition(layer, counts, width)
        base = layer.numerator_0.ctypes.data
        assert [(x.ctypes.data - base) % 16 for x in layer.mles] == [0, 0, 0, 0]
        assert [x.shape[0] for x in layer.mles] == [width] * 4


@pytest.mark.gpu
@pytest.mark.parametrize("ne,de", MODES)
def test_gpu_transition_outputs_are_aligned_views_of_one_buffer(ne, de):
    """A transition's four outputs: C-contiguous, 16-byte aligned, back to back
    in one buffer (on CuPy four cupy.ndarrays over one allocation, each from
    a multiple of 16 bytes: widths 12 and 13 leave a gap after a base output
    or none)."""
    import cupy
    host = four(16, (ne, de))
    dense, jagged = GkrLayer(*host, 0), JaggedGkrLayer(*host, [9, 7])
    d_dense = GkrLayer(*(cupy.asarray(x) for x in host), 0)
    d_jagged = JaggedGkrLayer(*(cupy.asarray(x) for x in host), [9, 7])
    pairs = [(layer_transition(dense), layer_transition(d_dense))]
    pairs += [(jagged_layer_transition(jagged, [5, 4], w),
               jagged_layer_transition(d_jagged, [5, 4], w)) for w in (12, 13)]
    for want, got in pairs:
        ptrs = [x.data.ptr for x in got.mles]
        assert [p % 16 for p in ptrs] == [0, 0, 0, 0]
        assert all(x.flags.c_contiguous for x in got.mles)
        ends = [p + -(-x.nbytes // 16) * 16 for p, x in zip(ptrs, got.mles)]
        assert ptrs[1:] == ends[:3]  # one buffer, no gaps beyond the alignment
        for x, y in zip(want.mles, got.mles):
            assert isinstance(y, cupy.ndarray) and x.shape == y.shape
            np.testing.assert_array_equal(x, y.get())


@pytest.mark.gpu
@pytest.mark.parametrize("backend", [None, "cupy"])
@pytest.mark.parametrize("ne,de", MODES)
def test_gpu_strided_device_mles_fold_as_their_contiguous_copies(ne, de, backend):
    """A layer of strided CuPy views (every second row of a matrix) goes the
    general way (a contiguous copy for the kernels); a layer of contiguous
    CuPy arrays, and every transition's output, the short way, which skips
    those checks: both fold to the host's words."""
    import cupy
    host = four(32, (ne, de))
    want = layer_transition(GkrLayer(*(x[::2] for x in host), 0))
    jag_want = jagged_layer_transition(JaggedGkrLayer(*(x[::2] for x in host), [9, 7]),
                                       [5, 4], 10)
    strided = [cupy.asarray(x)[::2] for x in host]
    assert not any(x.flags.c_contiguous for x in strided)
    for layer in (GkrLayer(*strided, 0), GkrLayer(*(x.copy() for x in strided), 0)):
        got = layer_transition(layer, backend=backend)
        for x, y in zip(want.mles, got.mles):
            np.testing.assert_array_equal(x, y.get())
        again = layer_transition(got, backend=backend)  # an output layer as input
        for x, y in zip(layer_transition(want).mles, again.mles):
            np.testing.assert_array_equal(x, y.get())
    jag = jagged_layer_transition(JaggedGkrLayer(*strided, [9, 7]), [5, 4], 10,
                                  backend=backend)
    for x, y in zip(jag_want.mles, jag.mles):
        np.testing.assert_array_equal(x, y.get())
    for x in strided:  # the caller's views are untouched
        assert not x.flags.c_contiguous


def _one_aligned_buffer(layer):
    """Four C-contiguous 16-byte aligned device views, back to back."""
    ptrs = [x.data.ptr for x in layer.mles]
    ends = [p + -(-x.nbytes // 16) * 16 for p, x in zip(ptrs, layer.mles)]
    return [p % 16 for p in ptrs] == [0] * 4 and ptrs[1:] == ends[:3] and \
        all(x.flags.c_contiguous for x in layer.mles)


@pytest.mark.gpu
@pytest.mark.parametrize("ne,de", MODES)
def test_gpu_pyramid_layers_are_aligned_views_of_one_buffer_each(ne, de):
    """The fused CuPy pyramids allocate each launch's layers just before that
    launch (2**12 elements per MLE: two dense launches), each layer one buffer
    of four aligned views; the bytes are the CPU's."""
    import cupy
    host = four(1 << 12, (ne, de))
    dev = [cupy.asarray(x) for x in host]
    pairs = list(zip(build_pyramid(GkrLayer(*host, 0))[1:],
                     build_pyramid(GkrLayer(*dev, 0))[1:]))
    counts = [1500, 0, 2001, 595]  # widths 2050 down to 4: the one-block tail
    schedule = halving_schedule(JaggedGkrLayer(*host, counts))
    pairs += list(zip(build_jagged_pyramid(JaggedGkrLayer(*host, counts), schedule)[1:],
                      build_jagged_pyramid(JaggedGkrLayer(*dev, counts), schedule)[1:]))
    assert len(pairs) == 12 + len(schedule)
    for want, got in pairs:
        assert _one_aligned_buffer(got)
        for x, y in zip(want.mles, got.mles):
            assert isinstance(y, cupy.ndarray) and x.shape == y.shape
            np.testing.assert_array_equal(x, y.get())


@pytest.mark.gpu
def test_gpu_jagged_outputs_are_16_byte_aligned():
    import cupy
    layer = JaggedGkrLayer(*(cupy.asarray(x) for x in four(18, (False, True))), [9, 9])
    steps = [([5, 5], 13), ([3, 3], 7), ([2, 2], 5)]
    for fused in (False, None):
        for out in build_jagged_pyramid(layer, steps, fused=fused)[1:]:
            assert [x.data.ptr % 16 for x in out.mles] == [0, 0, 0, 0]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba"])
def test_gpu_strided_device_counts_are_read_as_counts(backend):
    """A strided CuPy view of counts (a column of a matrix): the kernels read the
    counts as a plain int array, so the layer keeps a contiguous copy."""
    import cupy
    dense, jag, counts = _gpu_cases(KoalaBear, False, True, _dense_length(backend))
    host_first = JaggedGkrLayer(*jag, counts)
    steps = halving_schedule(host_first)
    want = build_jagged_pyramid(host_first, steps)
    column = cupy.asarray(np.stack([counts, np.full_like(counts, 2**30)], axis=1))[:, 0]
    assert not column.flags.c_contiguous
    d_first = JaggedGkrLayer(*(cupy.asarray(x) for x in jag), column)
    layers = build_jagged_pyramid(d_first, [(cupy.asarray(c), w) for c, w in steps],
                                  backend=backend)
    for a, b in zip(want, layers):
        live = int(np.sum(a.row_counts))
        for x, y in zip(a.mles, b.mles):
            np.testing.assert_array_equal(x[:live], y.get()[:live])


@pytest.mark.gpu
@pytest.mark.parametrize("counts, bound", [([0, 0], 0), ([1, 0, 1, 1], 1), ([1, 1], 1)])
def test_gpu_device_schedule_with_bound_at_most_one_still_reaches_a_floor(counts, bound):
    """Device counts bounded by M <= 1 may hold a 0 the schedule cannot see: it takes
    one step (an empty list left empty segments without their neutral row, and the
    outputs wrong).  The per-batch fraction sums equal the host schedule's."""
    import cupy
    host = four(len(counts), (False, True))
    first = JaggedGkrLayer(*host, counts)
    want = extract_jagged_outputs(build_jagged_pyramid(first, halving_schedule(first))[-1])
    d_first = JaggedGkrLayer(*(cupy.asarray(x) for x in host), cupy.asarray(counts, np.int32))
    steps = halving_schedule(d_first, max_row_count=bound)
    assert len(steps) == 1 and steps[-1].width == len(counts)
    got = extract_jagged_outputs(build_jagged_pyramid(d_first, steps)[-1])
    assert _batch_sums(want, len(counts)) == _batch_sums(got, len(counts))


@pytest.mark.gpu
@pytest.mark.parametrize("bound", [4, 9])
def test_gpu_bounded_schedule_is_the_hosts_step_for_step(bound):
    """One call, one pyramid: halving_schedule(layer, max_row_count=M) takes the
    same steps on device counts as on host ones, so the pyramids agree byte for
    byte (dead slots included), not only in their sums."""
    import cupy
    counts = [3, 1, 0, 4]
    host = four(sum(counts) + 2, (False, True))
    first = JaggedGkrLayer(*host, counts)
    d_first = JaggedGkrLayer(*(cupy.asarray(x) for x in host), cupy.asarray(counts, np.int32))
    steps, d_steps = (halving_schedule(x, max_row_count=bound) for x in (first, d_first))
    assert [(s.row_counts.tolist(), s.width) for s in steps] == \
        [(s.row_counts.get().tolist(), s.width) for s in d_steps]
    for a, b in zip(build_jagged_pyramid(first, steps), build_jagged_pyramid(d_first, d_steps)):
        for x, y in zip(a.mles, b.mles):
            np.testing.assert_array_equal(x, y.get())


def _batch_sums(out, nb):
    """``n0/d0 + n1/d1`` of every batch element of a floor's outputs (decoded)."""
    E = KoalaBear.ext
    num, den = (x if isinstance(x, np.ndarray) else x.get()
                for x in (out.numerator, out.denominator))
    num, den = (E.from_base(x) if x.ndim == 1 else x for x in (num, den))
    sums = []
    for b in range(nb):
        n0, n1, d0, d1 = num[2 * b], num[2 * b + 1], den[2 * b], den[2 * b + 1]
        s = E.mul(E.add(E.mul(n0, d1), E.mul(n1, d0)), E.inv(E.mul(d0, d1)))
        sums.append(E.decode(s).tolist())
    return sums


@pytest.mark.gpu
def test_gpu_errors_and_cupy_backend_on_numpy_data():
    import cupy
    host = four(8, (False, True))
    d_layer = JaggedGkrLayer(*(cupy.asarray(x) for x in host), [5, 3])
    with pytest.raises(ValueError, match="`out_width` is required"):
        jagged_layer_transition(d_layer, cupy.asarray([3, 2], dtype=np.int32))
    with pytest.raises(TypeError, match="must be a 1-D int32 array"):
        jagged_layer_transition(d_layer, cupy.asarray([3, 2]), out_width=5)
    with pytest.raises(TypeError, match="GPU array but the MLEs are NumPy"):
        JaggedGkrLayer(*host, cupy.asarray([5, 3], dtype=np.int32))
    with pytest.raises(TypeError, match="different modules"):
        GkrLayer(host[0], cupy.asarray(host[1]), host[2], host[3], 0)
    with pytest.raises(TypeError, match="backend='cpu' needs NumPy arrays"):
        layer_transition(GkrLayer(*(cupy.asarray(x) for x in host), 0), backend="cpu")
    want = build_pyramid(GkrLayer(*host, 1))
    got = build_pyramid(GkrLayer(*host, 1), backend="cupy")
    for a, b in zip(want, got):
        for x, y in zip(a.mles, b.mles):
            assert isinstance(y, np.ndarray)
            np.testing.assert_array_equal(x, y)


def test_fused_pyramid_of_a_floor_names_the_floor():
    n, d = KoalaBear.random(8, seed=1), KoalaBear.random(8, seed=2)
    with pytest.raises(ValueError, match="this one is a floor"):  # not "needs CuPy arrays"
        build_pyramid(GkrLayer(n, n, d, d, 3, KoalaBear), fused=True)


@pytest.mark.cudasim
def test_mixed_host_and_cuda_arrays_are_named_for_what_they_are():
    """A Numba device array beside NumPy ones was called "cupy" in the error."""
    from numba import cuda
    n, d = F.random(8, seed=1), F.random(8, seed=2)
    with pytest.raises(TypeError, match=r"different modules .*\(`numerator_0` is a CUDA array "
                                        r"\(numba\.cuda\.[\w.]+\), `numerator_1` is NumPy"):
        GkrLayer(cuda.to_device(n), n, d, d)


def test_cuda_arrays_with_their_own_dtype_are_refused_at_construction():
    """A CUDA array whose dtype is its library's (torch's) passed the field checks
    (which read the interface's typestr) but failed at the first transition."""
    class TorchLike:
        dtype = "torch.uint32"
        shape, ndim = (8,), 1
        __cuda_array_interface__ = {"shape": (8,), "typestr": "<u4", "data": (0, False),
                                    "version": 3}
    n, d = F.random(8, seed=1), F.random(8, seed=2)
    with pytest.raises(TypeError, match=r"`numerator_1` has dtype torch.uint32, not a NumPy "
                                        r"dtype; pass `cupy.asarray\(numerator_1\)`"):
        GkrLayer(n, TorchLike(), d, d)


@SETS_SHAPE_IN_PLACE
def test_layers_repr_is_a_summary():
    """The dataclass repr printed all four MLEs (~1 KB at 16 rows)."""
    x, e = KoalaBear.random(16, seed=1), KoalaBear.ext.random(16, seed=2)
    assert repr(GkrLayer(x, x, e, e, 2)) == (
        "<GkrLayer KoalaBear: L = 16 (nv = 4, num_batch_variables = 2), numerators base "
        "(16,), denominators extension (16, 4), numpy>")
    assert repr(JaggedGkrLayer(x, x, x, x, [5, 3], BabyBear)) == (
        "<JaggedGkrLayer BabyBear: width 16, 2 segments, row_counts [5, 3], numerators "
        "base (16,), denominators base (16,), numpy>")
    many = JaggedGkrLayer(*four(128), list(range(16)) + [0] * 16)
    assert "32 segments, row_counts [0, 1, 2, ..., 0, 0] (sum 120)" in repr(many)
    odd = GkrLayer(x.copy(), x, x, x)
    odd.numerator_0.shape = (4, 4)  # reshaped in place: the repr still works
    assert "numerators extension (4, 4)/(16,)" in repr(odd)


def test_outputs_repr_is_a_summary():
    """The dataclass repr of a 64-element batch's output printed every word
    (14,660 characters)."""
    layer = GkrLayer(*[KoalaBear.random(128, seed=k) for k in range(2)],
                     *[KoalaBear.ext.random(128, seed=k) for k in range(2)], 6)
    out = extract_outputs(build_pyramid(layer)[-1])
    assert repr(out) == ("<LogUpGkrOutput: numerator extension (128, 4), denominator "
                         "extension (128, 4), numpy>")
    base = GkrLayer(*[BabyBear.random(8, seed=k) for k in range(4)], 1, BabyBear)
    assert repr(extract_outputs(build_pyramid(base)[-1])) == (
        "<LogUpGkrOutput: numerator base (4,), denominator base (4,), numpy>")


def test_outputs_repr_describes_each_array():
    from zorch_nb.logup_gkr import LogUpGkrOutput
    out = LogUpGkrOutput(KoalaBear.random(4, seed=1), KoalaBear.ext.random(2, seed=2))
    assert repr(out) == ("<LogUpGkrOutput: numerator base (4,), denominator extension "
                         "(2, 4), numpy>")
    assert repr(LogUpGkrOutput([1, 2], None)).startswith(  # a repr never raises
        "<LogUpGkrOutput: numerator base (), denominator base (), ")


@pytest.mark.parametrize("Fi", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_batch_sums_add_the_two_outputs_in_the_floors_field(Fi):
    """batch_sums is n[2b]/d[2b] + n[2b+1]/d[2b+1] in the floor's field, with
    base words read as base elements even where four of them would pass for
    one extension element (a user review: the LogUp sum was wrong silently)."""
    from zorch_nb.logup_gkr import LogUpGkrOutput
    E = Fi.ext
    n, d = Fi.random(8, seed=5), E.random(8, seed=6)  # a floor as built: no fold ran
    out = extract_outputs(GkrLayer(n[0::2].copy(), n[1::2].copy(), d[0::2].copy(),
                                   d[1::2].copy(), 2, Fi))
    assert out.field is Fi
    num, den = out.batch_sums()
    assert num.shape == den.shape == (4, 4)
    for b in range(4):  # the same sum from the embedded copies, one element at a time
        a, c = E.from_base(n[2 * b]), E.from_base(n[2 * b + 1])
        want = E.add(E.mul(a, d[2 * b + 1]), E.mul(c, d[2 * b]))
        np.testing.assert_array_equal(num[b], want)
        np.testing.assert_array_equal(den[b], E.mul(d[2 * b], d[2 * b + 1]))
    swapped = LogUpGkrOutput(d, n, Fi)  # extension numerators over base denominators
    num, den = swapped.batch_sums()
    assert num.shape == (4, 4) and den.shape == (4,)
    np.testing.assert_array_equal(den, Fi.mul(n[0::2], n[1::2]))
    np.testing.assert_array_equal(num[1], E.add(E.mul(d[2], E.from_base(n[3])),
                                                 E.mul(d[3], E.from_base(n[2]))))
    words = n.copy(), d.copy()
    out.batch_sums()
    assert np.array_equal(words[0], n) and np.array_equal(words[1], d)  # inputs untouched
    for bad, err, match in (
            (LogUpGkrOutput(n[:3], d[:3], Fi), ValueError, r"`numerator` must hold an even "
                                                           r"number of outputs.*shape \(3,\)"),
            (LogUpGkrOutput(n, d[:4], Fi), ValueError, "as many outputs, not 8 and 4"),
            (LogUpGkrOutput(n, d[:, :3], Fi), ValueError, r"`denominator`.*shape \(8, 3\)"),
            (LogUpGkrOutput(n.astype(np.int64), d, Fi), TypeError, "`numerator`.*uint32"),
            (LogUpGkrOutput(n, [1, 2], Fi), TypeError, "`denominator`")):
        with pytest.raises(err, match=match):
            bad.batch_sums()
    # a field that is no PrimeField is refused where the output is made (it
    # was taken, and refused by the first batch_sums)
    with pytest.raises(TypeError, match="Argument `field` must be a zorch_nb PrimeField"):
        LogUpGkrOutput(n, d, "KoalaBear")


@pytest.mark.gpu
def test_batch_sums_of_outputs_in_two_modules_names_them():
    """The field ops' TypeError named their own `a` and `b`."""
    import cupy
    from zorch_nb.logup_gkr import LogUpGkrOutput
    n, d = KoalaBear.random(8, seed=5), KoalaBear.ext.random(8, seed=6)
    with pytest.raises(TypeError, match="`numerator` and `denominator` must be arrays of one "
                                        "module, not numpy and cupy"):
        LogUpGkrOutput(n, cupy.asarray(d)).batch_sums()
    num, den = LogUpGkrOutput(cupy.asarray(n), cupy.asarray(d)).batch_sums()
    want = LogUpGkrOutput(n, d).batch_sums()
    assert all(np.array_equal(a.get(), b) for a, b in zip((num, den), want))


def test_a_field_of_a_reloaded_module_is_refused_saying_why():
    """After importlib.reload (or IPython's autoreload) the old KoalaBear prints
    as the one expected: "must be a zorch_nb PrimeField (KoalaBear or BabyBear),
    not zorch_nb.KoalaBear" contradicted itself.  (In a child: a reload here
    would give the other tests' modules another field class.)"""
    script = (
        "import importlib, zorch_nb\n"
        "from zorch_nb import KoalaBear as F, logup_gkr as G\n"
        "importlib.reload(zorch_nb.fields); importlib.reload(G); importlib.reload(zorch_nb.graph)\n"
        "n, d = F.random(4), F.ext.random(4)\n"
        "for call in (lambda: G.GkrLayer(n, n, d, d, field=F),\n"
        "             lambda: zorch_nb.graph.Context(field=F),\n"
        "             lambda: zorch_nb.fields.ExtensionField(F)):\n"
        "    try:\n"
        "        call()\n"
        "    except TypeError as exc:\n"
        "        print(exc)\n")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 3, res.stdout
    for line in lines:
        assert line.endswith("zorch_nb.KoalaBear -- a field of another import of "
                             "zorch_nb.fields (the module was reloaded): take the fields and "
                             "the modules using them from one import (reload those too, or "
                             "restart the interpreter)") or "not PrimeField -- a field of " \
            "another import" in line, line


@pytest.mark.parametrize("counts, bound", [([5, 3, 0, 1], 5), ([5, 3, 0, 1], 16),
                                           ([1, 1], 1), ([0, 0], 0), ([2, 7], 7)])
def test_a_bounded_schedule_of_host_counts_is_the_device_ones(counts, bound):
    """With max_row_count the steps follow from the bound and the width
    alone, on host counts as on device ones (it was ignored on the host, so
    one call gave two pyramids): ceil(log2 M) steps, at least one, widths
    w_t = min(nb ceil(M / 2**t), floor(w_{t-1} / 2) + nb), w_0 the layer's;
    the per-batch sums are the exact schedule's."""
    layer = JaggedGkrLayer(*four(sum(counts) + 3, (False, True)), counts)
    steps = halving_schedule(layer, max_row_count=bound)
    nb, width, want = len(counts), layer.width, []
    rc, m = np.array(counts), bound
    while m > 1 or not want:
        m = (m + 1) // 2
        rc = np.maximum((rc + 1) // 2, 1)
        width = min(nb * max(m, 1), width // 2 + nb)
        want.append((rc.tolist(), width))
    assert [(s.row_counts.tolist(), s.width) for s in steps] == want
    assert len(steps) == max(1, (bound - 1).bit_length())
    floor = build_jagged_pyramid(layer, steps)[-1]
    exact = build_jagged_pyramid(layer, halving_schedule(layer))[-1]
    assert floor.width == nb and floor.row_counts.tolist() == [1] * nb
    got, ref = extract_jagged_outputs(floor), extract_jagged_outputs(exact)
    assert _batch_sums(got, nb) == _batch_sums(ref, nb)


def test_a_bounded_schedule_halves_the_largest_count():
    """The largest count the layer takes, 2**31 - 1, halves to 2**30 under
    max_row_count as without it (its int32 ``c + 1`` wrapped to -2**31, so the
    bounded schedule's counts were all 1 and the pyramid refused it)."""
    m = 2**31 - 1
    z = np.broadcast_to(np.uint32(0), (m,))  # (a layer of width m costs no memory)
    layer = JaggedGkrLayer(z, z, z, z, [m])
    bounded, exact = halving_schedule(layer, max_row_count=m), halving_schedule(layer)
    assert [int(s.row_counts[0]) for s in bounded] == [int(s.row_counts[0]) for s in exact]
    assert [int(s.row_counts[0]) for s in bounded][:2] == [2**30, 2**29]


@pytest.mark.gpu
def test_gpu_bounded_schedule_halves_the_largest_count():
    """The same on device counts (halved by CuPy, never read back: there the
    wrapped counts would have truncated the pyramid unchecked)."""
    import cupy
    m = 2**31 - 1
    z = cupy.broadcast_to(cupy.uint32(0), (m,))
    layer = JaggedGkrLayer(z, z, z, z, cupy.asarray([m], np.int32))
    steps = halving_schedule(layer, max_row_count=m)
    assert [int(s.row_counts.get()[0]) for s in steps][:3] == [2**30, 2**29, 2**28]


def test_from_segments_width_may_equal_the_rows_the_segments_need():
    """``width >= total`` (the rows the segments need): the bound itself is a width."""
    segs = [(F.random(5, seed=1), F.random(5, seed=2)), (F.random(2, seed=3), F.random(2, seed=4))]
    jag = JaggedGkrLayer.from_segments(segs, width=4)  # 3 + 1 rows: no dead slot
    assert jag.width == 4 and jag.row_counts.tolist() == [3, 1]
    default = JaggedGkrLayer.from_segments(segs)
    for a, b in zip(jag.mles, default.mles):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("Fi", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
@pytest.mark.parametrize("ext", [False, True], ids=["base", "extension"])
def test_from_segments_closes_odd_segments_with_the_fields_one(Fi, ext):
    """An odd segment's last row gets the neutral 0/1 as its second child: 1 is
    the Montgomery one of ``field`` (BabyBear's differs from KoalaBear's), for
    base denominators as for extension ones."""
    D = Fi.ext if ext else Fi
    segs = [(Fi.random(3, seed=1), D.random(3, seed=2)), (Fi.random(1, seed=3), D.random(1, seed=4))]
    jag = JaggedGkrLayer.from_segments(segs, field=Fi)
    assert jag.row_counts.tolist() == [2, 1] and jag.field is Fi
    one = [1, 0, 0, 0] if ext else 1
    assert D.decode(jag.denominator_1[[1, 2]]).tolist() == [one, one]  # rows 1 and 2 close
    assert not jag.numerator_1[[1, 2]].any()
    np.testing.assert_array_equal(jag.denominator_1[0], segs[0][1][1])


def test_from_segments_takes_empty_segments_in_their_fields():
    """An empty segment has no rows and the neutral sum; an empty extension
    segment is spelled (0, 4), and a plain empty array there is refused with
    that spelling in the message (a user review found it undocumented)."""
    E = F.ext
    segs = [(F.random(3, seed=1), E.random(3, seed=2)), (np.zeros(0, np.uint32), E.zeros(0))]
    jag = JaggedGkrLayer.from_segments(segs)
    assert jag.row_counts.tolist() == [2, 0] and jag.width == 2
    with pytest.raises(ValueError, match=r"`segments\[1\] denominators` must be in the field "
                                         r"of segment 0's, shape \(3, 4\) .*an empty "
                                         r"extension segment is \(0, 4\)\), not shape \(0,\)"):
        JaggedGkrLayer.from_segments([segs[0], (segs[1][0], np.zeros(0, np.uint32))])
    # segment 0 is the one spelled wrongly: both shapes are named (a user review)
    with pytest.raises(ValueError, match=r"`segments\[1\] denominators` must be in the field "
                                         r"of segment 0's, shape \(0,\) .*not shape \(3, 4\)"):
        JaggedGkrLayer.from_segments([(segs[1][0], np.zeros(0, np.uint32)), segs[0]])


def test_a_whole_schedule_given_as_one_step_is_refused_with_the_way_to_pass_it():
    """jagged_layer_transition(layer, halving_schedule(layer)) said the counts
    must be 'a rectangular (non-ragged) array of integers' (a user review)."""
    E = F.ext
    layer = JaggedGkrLayer.from_segments([(F.random(3, seed=1), E.random(3, seed=2)),
                                          (F.random(9, seed=3), E.random(9, seed=4))])
    steps = halving_schedule(layer)
    for schedule in (steps, steps[:1], tuple(steps)):
        with pytest.raises(TypeError, match=rf"`out_row_counts` must be one step, not a "
                                            rf"schedule of {len(schedule)}: pass its steps one "
                                            rf"per call, or the whole schedule to "
                                            rf"build_jagged_pyramid"):
            jagged_layer_transition(layer, schedule)
    one = jagged_layer_transition(layer, steps[0])  # a step, as the message says
    assert one.row_counts.tolist() == steps[0].row_counts.tolist()


def test_jagged_floor_with_an_empty_segment_is_refused():
    """Width == nb is not enough for a floor: a 0 count (an empty segment, no
    neutral row yet) is refused as well as a count above 1."""
    floor = JaggedGkrLayer(*four(2), [1, 0])
    with pytest.raises(ValueError, match=r"every row count to be 1, but row_counts\[1\] = 0"):
        extract_jagged_outputs(floor)
    (step,) = halving_schedule(floor)  # one step gives segment 1 its neutral row
    assert step.row_counts.tolist() == [1, 1]
    assert len(extract_jagged_outputs(jagged_layer_transition(floor, step))) == 2


@pytest.mark.gpu
def test_gpu_jagged_pyramid_of_numpy_data_on_the_cupy_backend():
    """``backend="cupy"`` on NumPy data: every step runs on the GPU and comes
    back as NumPy arrays (the fused steps need CuPy arrays: the pyramid goes
    one transition at a time), byte for byte the CPU pyramid."""
    host = four(16, (False, True))
    first = JaggedGkrLayer(*host, [9, 7])
    steps = halving_schedule(first)
    want = build_jagged_pyramid(first, steps)
    for fused in (None, False):
        got = build_jagged_pyramid(first, steps, backend="cupy", fused=fused)
        assert len(got) == len(want) == len(steps) + 1
        for a, b in zip(want, got):
            for x, y in zip(a.mles, b.mles):
                assert type(y) is np.ndarray
                np.testing.assert_array_equal(x, y)
