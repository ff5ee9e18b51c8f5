"""zorch_nb.graph_layout called directly: its functions take what the graph
recorder takes (negative axes, a -1 size) and refuse, naming the argument,
what they used to truncate, wrap or misread."""
import numpy as np
import pytest

from test_graph_memory import naive_merkle_root
from zorch_nb.graph_layout import (apply_history, dims_of, history_shapes, initial_view,
                                   logical_instance, merge_points, merkle_root, output_layout,
                                   pad, pow2, prefix_points, unapply_history, unpad)


def _random_history(rng, n):
    """Reshapes (a -1 size now and then) and transposes (negative axes now and
    then) of an ``n``-element vector, as a user's handle may record them."""
    shape, history = (n,), []
    for _ in range(rng.integers(1, 6)):
        if rng.random() < 0.5:
            sizes = [d for d in range(1, n + 1) if n % d == 0]
            a = int(rng.choice(sizes))
            new = [a, n // a]
            if rng.random() < 0.5:
                b = int(rng.choice([d for d in sizes if (n // a) % d == 0]))
                new = [a, b, n // a // b]
            shape = tuple(new)
            if rng.random() < 0.3:
                new[int(rng.integers(len(new)))] = -1
            history.append(("reshape", tuple(new)))
        else:
            axes = rng.permutation(len(shape))
            shape = tuple(shape[a] for a in axes)
            history.append(("transpose", tuple(int(a) - (len(axes) if rng.random() < 0.3
                                                         else 0) for a in axes)))
    return history


def test_unapply_history_inverts_apply_history_as_numpy_reads_it():
    rng = np.random.default_rng(7)
    for n in (1, 6, 12, 24, 30):
        flat = np.arange(n)
        for _ in range(40):
            h = _random_history(rng, n)
            view = apply_history(flat, h)
            shapes = history_shapes(n, h)
            assert shapes[-1] == view.shape, h
            np.testing.assert_array_equal(unapply_history(view, h, n), flat, err_msg=str(h))
    # a transpose without axes reverses them, as NumPy's does
    h = [("reshape", (2, 3, 4)), ("transpose", None)]
    assert history_shapes(24, h)[-1] == (4, 3, 2)
    np.testing.assert_array_equal(unapply_history(apply_history(np.arange(24), h), h, 24),
                                  np.arange(24))


@pytest.mark.parametrize("history, match", [
    ([("reshape", (4, 2))], r"step 0, reshape \(4, 2\), does not apply to shape \(6,\)"),
    ([("tranpose", (0,))], r"step 0 must be \(\"reshape\", shape\)"),
    ([("reshape", (2, 3)), ("transpose", (0, 0))], r"step 1, transpose \(0, 0\)"),
    ([("reshape", (2, 3)), ("transpose", (0, 5))], r"step 1, transpose \(0, 5\)"),
    ([("reshape",)], r"step 0 must be"),
])
def test_a_history_numpy_refuses_is_named(history, match):
    with pytest.raises(ValueError, match=match):
        history_shapes(6, history)
    with pytest.raises(ValueError, match=match):
        unapply_history(np.arange(6), history, 6)
    if history[0][0] == "tranpose":  # (was taken for a transpose)
        with pytest.raises(ValueError, match=match):
            apply_history(np.arange(6), history)
    with pytest.raises(ValueError, match=r"`view` must have the shape \(2, 3\)"):
        unapply_history(np.arange(6), [("reshape", (2, 3))], 6)


def test_sizes_and_points_must_be_positive_integer_chains():
    assert [pow2(n) for n in (1, 2, 3, 5, np.int64(8))] == [1, 2, 4, 8, 8]
    for bad, exc in ((0, ValueError), (-5, ValueError), (4.5, TypeError), (False, TypeError),
                     ("8", TypeError), (np.timedelta64(3), TypeError)):
        with pytest.raises(exc, match="`n`"):  # (was 2, 8, 4, 2, 8)
            pow2(bad)
    assert prefix_points((3, 1, 4)) == [1, 3, 12] and dims_of([1, 3, 12]) == (3, 4)
    with pytest.raises(TypeError, match=r"`shape\[0\]` must be an integer"):
        prefix_points((1.5, 2))  # (was [1, 1, 2], a repeat)
    with pytest.raises(ValueError, match=r"`shape\[0\]` must be at least 1"):
        initial_view((0, 3))
    with pytest.raises(ValueError, match=r"`a\[0\]` must be at least 1"):
        merge_points([0, 1], [1, 2])  # (was a ZeroDivisionError)
    assert merge_points([1, 3], [2]) is None and merge_points([1, 3], [6]) == [1, 3, 6]
    for points in ([3, 12], [1, 3, 12, 6], [1, 3, 10]):
        with pytest.raises(ValueError, match="`points` must be a chain"):
            dims_of(points)
    with pytest.raises(ValueError, match="must be a chain"):
        output_layout([1, 3, 12, 6], 3, (4,))  # (was a layout of stride 8)
    with pytest.raises(ValueError, match=r"`points` \[1, 2, 12\] must hold every split "
                                          r"point .* lacks 3"):
        output_layout([1, 2, 12], 3, (4,))  # (was a KeyError)


def test_shape_check_passes_only_plain_positive_ints_unnamed():
    """The shape check's fast path (recording called it on every propagation
    step) takes a tuple of plain ``int`` >= 1 only: a bool, a float, a zero, a
    negative size or a mix of them with ints still take the checked path and
    are refused by position, and NumPy integers come back as Python ints."""
    from zorch_nb.graph_layout import _check_shape
    assert _check_shape([3, 1, 4]) == (3, 1, 4) and _check_shape(()) == ()
    got = _check_shape((np.int64(3), np.uint32(4)))
    assert got == (3, 4) and [type(d) for d in got] == [int, int]
    got = _check_shape((5, np.int64(2)))
    assert got == (5, 2) and [type(d) for d in got] == [int, int]
    for bad, exc, k in [((True, 3), TypeError, 0), ((3, False), TypeError, 1),
                        ((True,), TypeError, 0), ((2, 3.0), TypeError, 1),
                        ((3, 0), ValueError, 1), ((4, -2), ValueError, 1),
                        ((-1, -2), ValueError, 0), ((0,), ValueError, 0)]:
        with pytest.raises(exc, match=rf"`shape\[{k}\]`"):
            _check_shape(bad)


def test_the_recorders_unchecked_helpers_agree_with_the_checked_functions():
    """The recorder's unchecked ``_prefix_points`` / ``_merge_points`` /
    ``_first_axis_dims`` (what recording a call runs) give what the checked
    functions give, over random views of buffers refined by random chains of
    split points; a view that does not fit the points is still refused,
    naming the missing split point."""
    from zorch_nb.graph_layout import (_first_axis_dims, _merge_points, _prefix_points,
                                       axis_dims, view_of_history)
    def view(n):  # a random view of an n-element buffer, its steps as the recorder keeps them
        history = [("reshape", (n,))]
        steps = _random_history(rng, n)
        for (op, arg), shape in zip(steps, history_shapes(n, steps)[1:]):
            history.append(("reshape", shape) if op == "reshape" else
                           ("transpose", tuple(a % len(shape) for a in arg)))
        return view_of_history(history)

    rng = np.random.default_rng(59)
    checked = 0
    for n in (6, 12, 24, 36, 64):
        for _ in range(60):
            v = view(n)
            if v.irregular:
                continue
            own = prefix_points(v.base)
            assert _prefix_points(v.base) == own
            # the buffer's points: the view's own, refined by another view's where they agree
            other = prefix_points(view(n).base)
            merged = merge_points(own, other)
            assert _merge_points(own, other) == merged
            assert _merge_points(own, list(own)) == own
            points = merged or own
            want = (dims_of(points), axis_dims(v, points)[0])
            assert _first_axis_dims(v, points) == want
            checked += 1
    assert checked > 200
    with pytest.raises(ValueError, match=r"`points` \[1, 2, 12\] must hold every split point"):
        _first_axis_dims(initial_view((3, 4)), [1, 2, 12])


def test_logical_instance_takes_only_padded_instances():
    # points [1, 3, 12]: 3 calls of shape (4,), padded to 4 instances
    assert [logical_instance([1, 3, 12], 3, (4,), t) for t in range(4)] == [0, 1, 2, 2]
    for t in (4, 5, 2 ** 70):  # (the bit field wrapped: 0, 1, 0)
        with pytest.raises(ValueError, match=r"`t` must lie in \[0, 4\)"):
            logical_instance([1, 3, 12], 3, (4,), t)
    with pytest.raises(ValueError, match="`t` must be at least 0"):
        logical_instance([1, 3, 12], 3, (4,), -1)
    with pytest.raises(TypeError, match="`t` must be an integer"):
        logical_instance([1, 3, 12], 3, (4,), 1.0)


def test_pad_and_unpad_check_the_buffer_size():
    flat = np.arange(12, dtype=np.uint32)
    padded = pad(np, flat, [1, 3, 12])
    np.testing.assert_array_equal(padded.reshape(4, 4)[3], flat.reshape(3, 4)[2])
    np.testing.assert_array_equal(unpad(padded, [1, 3, 12]), flat)
    with pytest.raises(ValueError, match="`flat` must hold the buffer's 12 values, not 11"):
        pad(np, flat[:11], [1, 3, 12])
    with pytest.raises(ValueError, match=r"`padded` must hold the 16 words of the padded "
                                         r"buffer \[4, 4\], not 12"):
        unpad(flat, [1, 3, 12])


def test_merkle_root_hashes_integer_words_and_refuses_the_rest():
    w = np.arange(16, dtype=np.uint32)
    want = naive_merkle_root(w)
    for same in (w, w.astype(">u4"), w.astype(np.int64), w.astype(np.uint8), list(range(16))):
        assert merkle_root(same) == want
    # (these were cast into words: 2**32 + w, w + 0.5 and -1 hashed as w, w, 2**32 - 1)
    for bad, exc, match in ((w.astype(np.uint64) + 2 ** 32, ValueError, r"in \[0, 2\*\*32\)"),
                            (np.full(16, -1, np.int64), ValueError, r"in \[0, 2\*\*32\)"),
                            (w + 0.5, TypeError, "not float64"),
                            (w > 3, TypeError, "not bool"),
                            ([1.5] * 16, TypeError, "not float64"),
                            ([[1, 2], [3]], ValueError, "rectangular")):
        with pytest.raises(exc, match="`words`.*" + match):
            merkle_root(bad)


def test_split_points_may_not_repeat():
    # a repeated point is an empty dimension of length 1: [1, 3, 3, 12] is not [3, 1, 4]
    for points in ([1, 1, 12], [1, 3, 3, 12], [1, 12, 12]):
        with pytest.raises(ValueError, match="`points` must be a chain of split points, each "
                                             "a larger multiple"):
            dims_of(points)
    assert dims_of([1]) == () and dims_of([1, 3, 12]) == (3, 4)


def test_merkle_root_refuses_the_first_word_past_uint32():
    w = np.arange(16, dtype=np.int64)
    assert merkle_root(np.full(16, 2**32 - 1, np.int64)) == \
        merkle_root(np.full(16, 2**32 - 1, np.uint32))
    for top in (np.int64(2**32), 2**32):  # (hashed as the word 0)
        bad = w.copy() if isinstance(top, np.integer) else list(range(16))
        bad[5] = top
        with pytest.raises(ValueError, match=r"`words` must hold uint32 words, in \[0, 2\*\*32\)"):
            merkle_root(bad)
    # Python ints past int64 make an object array: out of range, not "object values"
    for big in (2**64, -2**70):
        with pytest.raises(ValueError, match=r"`words` must hold uint32 words, in \[0, 2\*\*32\)"):
            merkle_root([big] + [0] * 15)
    assert merkle_root(np.array([2**32 - 1] * 16, dtype=object)) == \
        merkle_root(np.full(16, 2**32 - 1, np.uint32))
    with pytest.raises(TypeError, match="not object values"):  # (bools are not words)
        merkle_root(np.array([True] * 16, dtype=object))
