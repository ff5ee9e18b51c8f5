"""Unusual-but-legal NumPy inputs to the field ops, from a review that fed
them to every operation (all results were right; these are the failures it
found slow, unclear or in the wrong order)."""
import numpy as np
import pytest

from zorch_nb import KoalaBear as K
from zorch_nb import fields

ONE = np.uint32(K.one)
HUGE = (2**40,)  # a 4 TiB result: no machine allocates it


@pytest.mark.parametrize("call", [
    lambda: K.inv(np.broadcast_to(ONE, HUGE)),
    lambda: K.batch_inv(np.broadcast_to(ONE, HUGE)),
    lambda: K.pow(np.broadcast_to(ONE, HUGE), -3),
    lambda: K.div(ONE, np.broadcast_to(ONE, HUGE)),
    lambda: K.ext.inv(np.broadcast_to(K.ext.one, HUGE + (4,))),
], ids=["inv", "batch_inv", "pow", "div", "ext_inv"])
def test_result_too_large_fails_before_the_zero_check(call, monkeypatch):
    """The zero check reads every element of a broadcast view (hours at 2**40);
    the result, which cannot be allocated, is allocated first."""
    def zero_check(*args):
        raise AssertionError("the zero check ran before the result was allocated")
    monkeypatch.setattr(fields._FieldBase, "_raise_if_zero", zero_check)
    with pytest.raises(MemoryError):
        call()


def test_broadcast_failures_say_why():
    big = np.broadcast_to(ONE, (2**32, 1))
    with pytest.raises(ValueError, match=r"element shapes `a` \(4294967296, 1\), `b` "
                                         r"\(1, 4294967296\) cannot be broadcast: .*too large"):
        K.add(big, big.T)
    many = np.ones((1,) * 32 + (2,), np.uint32)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        K.mul(many, np.uint32(3))
    assert (K.mul(many, many) == K.mul(many.ravel(), many.ravel()).reshape(many.shape)).all()
    with pytest.raises(ValueError, match=r"element shapes do not broadcast: `a` \(2,\), `b` \(3,\)"):
        K.add(K.random(2), K.random(3))


def test_mle_eval_of_a_0d_value_is_a_value_error():
    for F in (K, K.ext):
        with pytest.raises(ValueError, match=r"`values` must hold 2\*\*nv elements.*not \(\)"):
            F.mle_eval(np.uint32(5), np.zeros((0, 4), np.uint32))


def test_div_names_a_before_it_inverts_b():
    with pytest.raises(TypeError, match="Argument `a` must be a uint32 array"):
        K.div([1, 2], np.zeros(2, np.uint32))  # b is all zero: a is the first fault
    with pytest.raises(TypeError, match=r"`a` is an `as_base\(\.\.\.\)` marker"):
        K.div(K.ext.as_base(K.random(4)), np.zeros(4, np.uint32))


def test_eq_table_checks_backend_at_nv_0():
    with pytest.raises(ValueError, match="backend"):
        K.eq_table(K.random(0), backend="bogus")


def test_sum_takes_axis_and_keepdims_as_numpy_does():
    a = K.random((3, 5), seed=1)
    want = K.sum(a, axis=1, keepdims=True)
    assert (K.sum(a, axis=np.array(1), keepdims=1) == want).all()
    assert (K.sum(a, axis=np.int64(-1), keepdims=np.True_) == want).all()
    assert K.sum(a, axis=1, keepdims=0).shape == (3,)
    with pytest.raises(TypeError, match="`keepdims` must be True or False"):
        K.sum(a, keepdims=2)
