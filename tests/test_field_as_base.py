"""``ExtensionField.as_base``: base words read as base elements whatever their
last axis, in place, by add, sub, mul and div -- from a review in which a
sumcheck's base MLE, halved down to four entries, was multiplied as one
extension element (the documented operand rule, but a silent wrong answer).

Every result is checked against Python big ints and against the same call
on the ``from_base`` embedding (byte for byte), on every backend.
"""
import zlib

import numpy as np
import pytest

from conftest import BACKENDS, to_backend, to_host
import naive
from test_field_broadcast_forms import FIELDS, big_int_result, raw_words
from zorch_nb import KoalaBear
from zorch_nb.fields import BaseOperand

#: (shape of the marked base words, shape of the extension operand): the
#: base words' last axis is 4 in all but the last two, so unmarked they would
#: be read as extension elements.
CASES = [((4,), (4, 4)), ((4,), (4,)), ((2, 4), (2, 4, 4)), ((4,), (3, 1, 4)),
         ((1, 4), (3, 4, 4)), ((), (5, 4)), ((5,), (5, 4))]


def _div_reference(F, x, a, marked_first):
    """Big-int ``x / a`` (``a / x`` if ``marked_first``) of extension words
    ``x`` and base words ``a``, broadcast over element shapes."""
    p, w = F.p, F.W
    xs = x.shape[:-1]
    shape = np.broadcast_shapes(xs, a.shape)
    xv = np.broadcast_to(x, shape + (4,)).reshape(-1, 4)
    av = np.broadcast_to(a, shape).reshape(-1)
    rows = []
    for xe, ae in zip(xv, av):
        xe = [naive.dec(int(v) % p, p) for v in xe]
        ae = [naive.dec(int(ae) % p, p), 0, 0, 0]
        num, den = (ae, xe) if marked_first else (xe, ae)
        rows.append([naive.enc(v, p) for v in naive.ext_mul(num, naive.ext_inv(den, p, w), p, w)])
    return np.array(rows, dtype=np.uint32).reshape(shape + (4,))


def _backend_op_shapes():
    """Every backend, op and shape pair; under the CUDA simulator (seconds per
    call) mul and div on the first three pairs: the same broadcast kernels
    as add and sub, and every operand form."""
    for b in BACKENDS:
        backend = b.values[0]
        for op in ("add", "sub", "mul", "div"):
            for shapes in CASES:
                if backend == "numba" and (op in ("add", "sub") or shapes not in CASES[:3]):
                    continue
                yield pytest.param(backend, op, shapes, marks=b.marks,
                                   id=f"{shapes[0]}x{shapes[1]}-{op}-{backend}")


@pytest.mark.parametrize("backend,op,shapes", list(_backend_op_shapes()))
@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("marked_first", [True, False], ids=["marked_a", "marked_b"])
def test_marked_base_words_are_base_elements(F, backend, op, marked_first, shapes):
    E = F.ext
    rng = np.random.default_rng(zlib.crc32(repr((F.name, op, shapes)).encode()))
    a = raw_words(rng, shapes[0], F.p)
    x = raw_words(rng, shapes[1], F.p)
    if op == "div":  # nonzero divisors (a word is zero when p divides it)
        a[a % F.p == 0] = 1
        x[(x % F.p == 0).all(-1)] = 7
    a0, x0 = a.copy(), x.copy()
    fn = getattr(E, op)
    da, dx = to_backend(a, backend), to_backend(x, backend)
    args = (E.as_base(da), dx) if marked_first else (dx, E.as_base(da))
    got = to_host(fn(*args, backend=backend))
    emb = (E.from_base(da), dx) if marked_first else (dx, E.from_base(da))
    assert got.tobytes() == to_host(fn(*emb, backend=backend)).tobytes()
    if op == "div":
        want = _div_reference(F, x, a, marked_first)
    else:
        want = (big_int_result(F, op, a, 1, x, 4, True) if marked_first
                else big_int_result(F, op, x, 4, a, 1, True))
    assert got.dtype == np.uint32 and got.shape == want.shape
    assert (got == want).all()
    assert (to_host(da) == a0).all() and (to_host(dx) == x0).all()  # inputs untouched


@pytest.mark.parametrize("F", FIELDS)
def test_marked_words_are_read_in_place_and_out_works(F):
    E = F.ext
    a = F.random(4, seed=1)
    x = E.random((3, 4), seed=2)
    mark = E.as_base(a)
    assert isinstance(mark, BaseOperand) and mark.words is a  # no copy
    out = np.empty((3, 4, 4), np.uint32)
    assert E.mul(x, mark, out=out) is out
    assert (out == E.mul(x, E.from_base(a))).all()
    # the same words unmarked: one extension element times every element
    assert (E.mul(x, a) == E.mul(x, a[None, None, :])).all()
    assert not (E.mul(x, a) == out).all()


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("F", FIELDS)
def test_two_marked_operands_give_the_embedded_result(F, op):
    """An extension op of two base operands still returns extension elements
    (README, "Base or extension operand"): the base result embedded."""
    E = F.ext
    rng = np.random.default_rng(zlib.crc32(repr((F.name, op, "both")).encode()))
    a, b = raw_words(rng, (3, 4), F.p), raw_words(rng, (4,), F.p)
    got = getattr(E, op)(E.as_base(a), E.as_base(b))
    assert got.shape == (3, 4, 4)
    assert (got == big_int_result(F, op, a, 1, b, 1, True)).all()
    assert (got == E.from_base(getattr(F, op)(a, b))).all()


def test_marker_elsewhere_is_a_clear_type_error():
    F, E = KoalaBear, KoalaBear.ext
    a = F.random(4, seed=3)
    mark = E.as_base(a)
    cases = {"base field": lambda: F.mul(mark, a), "unary": lambda: E.neg(mark),
             "pow": lambda: E.pow(mark, 3), "sum": lambda: E.sum(mark),
             "mle_eval": lambda: E.mle_eval(mark, E.random(2, seed=1)),
             "out": lambda: E.mul(E.one, E.one, out=mark)}
    for what, call in cases.items():  # each names every op that takes one
        with pytest.raises(TypeError, match=r"as_base\(\.\.\.\)` marker, which only the "
                                            r"extension field's add, sub, mul and div operands "
                                            r"and the `point` of eq_table and mle_eval take; "):
            call()
    with pytest.raises(TypeError, match="Argument `a` must have dtype uint32"):
        E.as_base(np.arange(4))
    with pytest.raises(ValueError, match=r"element shapes do not broadcast: `a` \(4,\), `b` \(8,\)"):
        E.mul(E.as_base(a), E.random(8, seed=4))
    with pytest.raises(ValueError, match="is zero"):
        E.div(E.one, E.as_base(np.array([F.params.r_mod_p, 0, 5, 6], np.uint32)))
