"""Unusual-but-legal NumPy inputs to the field ops, from a review that fed
them to every operation (all results were right; these are the failures it
found slow, unclear or in the wrong order)."""
import numpy as np
import pytest

from conftest import BACKENDS, to_backend, to_host
from test_field_broadcast_forms import FIELDS
from zorch_nb import BabyBear
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


@pytest.mark.parametrize("call, what", [
    # (pow copied the view before its result was checked: at 4 TiB NumPy refused the copy)
    (lambda v: K.pow(np.broadcast_to(ONE, HUGE), 3),
     r"the result of the operands' \(broadcast\) shape"),
    (lambda v: K.ext.pow(np.broadcast_to(K.ext.one, HUGE + (4,)), 3),
     r"the result of the operands' \(broadcast\) shape"),
    (lambda v: K.mle_fold(v, ONE), "a contiguous copy of `values`"),
    (lambda v: K.ext.mle_fold(np.broadcast_to(K.ext.one, v.shape + (4,)), K.ext.one),
     "a contiguous copy of `values`"),
    (lambda v: K.encode(np.broadcast_to(np.int64(1), v.shape)), "the words of `ints`"),
], ids=["pow", "ext_pow", "mle_fold", "ext_mle_fold", "encode"])
def test_copies_past_memory_are_refused_by_name(call, what, monkeypatch):
    """(an adversarial review) A broadcast view these calls copy (or, for
    encode, convert) whole was allocated unchecked: NumPy's "Unable to
    allocate", which names nothing, or on an overcommitting OS a process
    killed filling it.  Checked first now, as the other ops' results are."""
    monkeypatch.setattr(fields._backend, "physical_memory", lambda: 2**20)  # 1 MiB
    v = np.broadcast_to(ONE, (2**20,))  # 4 MiB of words
    with pytest.raises(MemoryError, match=rf"^{what}: an array of shape \((1048576|1099511627776),"
                                          rf"(?: 4)?\) needs \d+\.\d GiB"):
        call(v)


def test_broadcast_failures_say_why():
    big = np.broadcast_to(ONE, (2**32, 1))
    with pytest.raises(ValueError, match=r"the result of the operands' \(broadcast\) shape: an "
                                         r"array of shape \(4294967296, 4294967296\) .* is "
                                         r"larger than any array can be"):
        K.add(big, big.T)
    with pytest.raises(ValueError,
                       match=r"element shapes do not broadcast: `a` \(2,\), `b` \(3,\)"):
        K.add(K.random(2), K.random(3))


@pytest.mark.parametrize("ndim", [33, 64])
def test_operands_of_more_than_32_axes_broadcast(ndim):
    """(an adversarial review) Operands of 33 to 64 axes broadcast as in NumPy:
    np.broadcast_shapes refuses more than 32 (``F.mul(x, scalar)`` of a 33-d
    ``x`` was a ValueError, where NumPy multiplies it)."""
    x = K.random((1,) * (ndim - 1) + (3,), seed=1)
    y = K.random((2,) + (1,) * (ndim - 1), seed=2)
    want = (K.decode(x).astype(object) * K.decode(y).astype(object)) % K.p
    got = K.decode(K.mul(x, y))
    assert got.shape == want.shape == (2,) + (1,) * (ndim - 2) + (3,) and (got == want).all()
    three = K.encode(3)
    assert (K.decode(K.mul(x, three)) == (K.decode(x).astype(object) * 3) % K.p).all()
    e = K.ext.random((1,) * (ndim - 2) + (3,), seed=3)  # ndim axes with the element's
    r = K.ext.random((), seed=4)
    np.testing.assert_array_equal(K.ext.mul(e, r), K.ext.mul(e.reshape(3, 4), r).reshape(e.shape))
    with pytest.raises(ValueError, match=r"element shapes do not broadcast: `a` \(1, "):
        K.mul(x, K.random((1,) * (ndim - 1) + (2,), seed=5))
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


OPS2 = ("add", "sub", "mul")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_out_over_an_operand_is_written_in_place(F, backend):
    """``out`` that is an operand read elementwise (``E.add(acc, x, out=acc)``)
    is written by the kernel directly, as the kernel contracts allow: the
    same bytes as into a fresh array, in every backend; a partial overlap
    still goes through a temporary."""
    E = F.ext
    for G in (F, E):
        a, b = G.random(50, seed=1), G.random(50, seed=2)
        for op in OPS2:
            fn = getattr(G, op)
            for which in ("a", "b", "both"):
                x = to_backend(a.copy(), backend)
                y = x if which == "both" else to_backend(b.copy(), backend)
                target = y if which == "b" else x
                want = fn(a, a if which == "both" else b)
                got = fn(x, y, out=target, backend=backend)
                assert got is target and (to_host(got) == want).all(), (G.name, op, which)
        for op in ("neg", "square", "inv"):
            x = to_backend(a.copy(), backend)
            got = getattr(G, op)(x, out=x, backend=backend)
            assert got is x and (to_host(got) == getattr(G, op)(a)).all(), (G.name, op)
        # partial overlap: a shifted view of the operand as out
        buf = to_backend(np.concatenate([a, a[:1]]), backend)
        got = G.add(buf[:-1], to_backend(b, backend), out=buf[1:], backend=backend)
        assert (to_host(got) == G.add(a, b)).all()
    # broadcast forms: out over the operand read elementwise
    x, r, s = E.random((6, 5), seed=3), E.random((), seed=4), F.random((6, 5), seed=5)
    for op in OPS2:
        fn = getattr(E, op)
        for args, want in (((None, r), fn(x, r)), ((r, None), fn(r, x)),
                           ((E.as_base(to_backend(s, backend)), None), fn(E.as_base(s), x))):
            dx = to_backend(x.copy(), backend)
            call = [dx if v is None else (to_backend(v, backend) if isinstance(v, np.ndarray)
                                          else v) for v in args]
            got = fn(*call, out=dx, backend=backend)
            assert got is dx and (to_host(got) == want).all(), op


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_an_empty_out_is_accepted(F, backend):
    """A fresh empty ``out`` (NumPy gives ``np.zeros((0, 3))`` zero strides)
    is not a broadcast view: every op that takes ``out`` returns it, as the
    call without ``out`` returns an empty result."""
    for G in (F, F.ext):
        x = to_backend(G.zeros((0, 3)), backend)
        calls = {"add": lambda o: G.add(x, x, out=o, backend=backend),
                 "sub": lambda o: G.sub(x, x, out=o, backend=backend),
                 "mul": lambda o: G.mul(x, x, out=o, backend=backend),
                 "div": lambda o: G.div(x, x, out=o, backend=backend),
                 "neg": lambda o: G.neg(x, out=o, backend=backend),
                 "square": lambda o: G.square(x, out=o, backend=backend),
                 "inv": lambda o: G.inv(x, out=o, backend=backend),
                 "batch_inv": lambda o: G.batch_inv(x, out=o, backend=backend),
                 "pow": lambda o: G.pow(x, 5, out=o, backend=backend),
                 "sum": lambda o: G.sum(x, axis=1, out=o, backend=backend)}
        for op, call in calls.items():
            out = to_backend(G.zeros((0,) if op == "sum" else (0, 3)), backend)
            assert call(out) is out, (G.name, op)


def test_in_place_makes_no_temporary():
    from peak_memory import peak_bytes
    E = K.ext
    acc, x = E.random(1 << 16, seed=1), E.random(1 << 16, seed=2)
    E.add(acc, x, out=acc)  # warm
    for op in (E.add, E.mul):
        peak, got = peak_bytes(lambda: op(acc, x, out=acc))
        assert got is acc and peak < acc.nbytes // 8, peak


@pytest.mark.parametrize("F", [K, K.ext], ids=["base", "ext"])
def test_small_call_path_matches_the_general_path(F, monkeypatch):
    """Plain NumPy operands without `out` take FieldBase._map_plain (the general
    path's validation and dispatch were ~8 of a 10 us F.mul of 8 elements): the
    same bytes and shapes as the general path for every form it takes, and
    every form it does not take goes to the general path."""
    import naive
    shapes = [(), (1,), (7,), (3, 5), (2, 3, 4)] if F is K else \
        [(4,), (1, 4), (7, 4), (3, 5, 4), (2, 1, 3, 4)]
    ops = [("add", 2), ("sub", 2), ("mul", 2), ("neg", 1), ("square", 1), ("inv", 1)]
    plain = fields._FieldBase._map_plain
    for shape in shapes:
        n = int(np.prod(shape[:-1] if F is not K else shape))
        a = F.random(n, seed=1).reshape(shape)
        b = F.random(n, seed=2).reshape(shape)
        b.flat[0] = 2**32 - 1  # a word >= p, read mod p as everywhere
        keep = a.copy(), b.copy()
        for op, arity in ops:
            got = getattr(F, op)(*(a, b)[:arity])
            with monkeypatch.context() as m:  # the general path
                m.setattr(fields._FieldBase, "_map_plain", lambda *args: None)
                want = getattr(F, op)(*(a, b)[:arity])
            assert got.shape == want.shape == shape and got.dtype == np.uint32
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {shape}")
            assert not np.shares_memory(got, a) and not np.shares_memory(got, b)
        np.testing.assert_array_equal(a, keep[0])
        np.testing.assert_array_equal(b, keep[1])
    # an independent check of the plain path: big ints
    p, w = naive.P["KoalaBear"], naive.W["KoalaBear"]
    a, b = F.random(5, seed=3), F.random(5, seed=4)
    if F is K:
        want = [naive.enc(naive.dec(int(x), p) * naive.dec(int(y), p) % p, p)
                for x, y in zip(a, b)]
    else:
        want = [[naive.enc(v, p) for v in naive.ext_mul([naive.dec(int(c), p) for c in x],
                                                        [naive.dec(int(c), p) for c in y],
                                                        p, w)] for x, y in zip(a, b)]
    np.testing.assert_array_equal(F.mul(a, b), np.array(want, np.uint32))
    # forms the plain path declines, each checked to reach the general one
    a = F.random(6, seed=5)
    declined = [(a[::2], a[::2].copy()),                    # strided
                (a.astype(a.dtype.newbyteorder()), a),      # byte-swapped: refused there
                (a[:0], a[:0]),                             # empty
                (a, a[:1])]                                 # broadcast
    if F is not K:
        declined.append((F.base.random(6, seed=6), F.base.random(6, seed=7)))  # base words
    calls = []
    monkeypatch.setattr(fields._FieldBase, "_prepare",
                        lambda self, *args, _p=fields._FieldBase._prepare:
                        calls.append(1) or _p(self, *args))
    for x, y in declined:
        try:
            F.add(x, y)
        except TypeError:
            pass  # (the byte-swapped words: the general path's named error)
    assert len(calls) == len(declined)
    taken = plain(F, 2, {"a": F.random(2, seed=1), "b": F.random(2, seed=2)}, None)
    assert taken is not None  # so the comparisons above ran the plain path
    # the inverse too (its zero check ran before): 28 -> 15 us for 8 elements
    assert plain(F, fields.monty.OP_INV, {"a": F.random(2, seed=1)}, None) is not None
    # (a review's finds) a backend that is not a str is the general path's to judge;
    # a `cupy` module without its ndarray yet (another thread importing it) is
    # no reason to fail a call on host data
    assert plain(F, 2, {"a": a, "b": a}, np.str_("cpu")) is None
    import types
    monkeypatch.setitem(__import__("sys").modules, "cupy", types.ModuleType("cupy"))
    class Sub(np.ndarray):  # not an ndarray by type: the plain path looks further
        pass
    one = np.asarray(F.one).reshape(1, -1)
    np.testing.assert_array_equal(F.mul(one.view(Sub), one), one)
    np.testing.assert_array_equal(F.mul(a, a), plain(F, 2, {"a": a, "b": a}, None))


def test_marked_base_operand_small_call_path(monkeypatch):
    """``E.mul(E.as_base(a), x)`` with ``a`` of ``x``'s element shape (a
    sumcheck's base MLE times an extension one) skips the general path's
    validation and broadcast planning (15 -> 9 us for 16 elements; div
    keeps its up-front check of the pair, not its second pass): the same
    bytes as the general path, either operand marked, for add, sub, mul and
    div, and with ``out`` (17 -> 9 us) where it is fresh or exactly the
    extension operand; every other form reaches the general path."""
    E = K.ext
    general_calls = []
    prepare = fields._FieldBase._prepare
    monkeypatch.setattr(fields._FieldBase, "_prepare", lambda self, *args:
                        general_calls.append(1) or prepare(self, *args))

    def general(op, *args):
        with monkeypatch.context() as m:
            m.setattr(fields._FieldBase, "_map_marked", lambda *args: None)
            return getattr(E, op)(*args)

    for shape in [(1,), (8,), (3, 5)]:
        a = K.random(shape, seed=1)
        a.flat[0] = 2**32 - 1  # a word >= p, read mod p as everywhere
        x = E.random(shape, seed=2)
        keep = a.copy(), x.copy()
        for op in ("add", "sub", "mul", "div"):
            for args in ((E.as_base(a), x), (x, E.as_base(a))):
                if op == "div" and args[1] is x:
                    args = (E.as_base(a), E.mul(x, x))  # (x has no zero, checked there)
                want = general(op, *args)
                general_calls.clear()
                got = getattr(E, op)(*args)
                # (div checks the pair with _prepare first, then multiplies)
                assert len(general_calls) == (op == "div"), (op, shape)
                assert got.shape == shape + (4,) and got.dtype == np.uint32
                np.testing.assert_array_equal(got, want, err_msg=f"{op} {shape}")
        np.testing.assert_array_equal(a, keep[0])
        np.testing.assert_array_equal(x, keep[1])
    # an independent check: the embedding's product, element by element in big ints
    import naive
    p, w = naive.P["KoalaBear"], naive.W["KoalaBear"]
    a, x = K.random(3, seed=5), E.random(3, seed=6)
    want = [[naive.enc(v, p) for v in naive.ext_mul(
        [naive.dec(int(s), p), 0, 0, 0], [naive.dec(int(c), p) for c in y], p, w)]
        for s, y in zip(a, x)]
    np.testing.assert_array_equal(E.mul(E.as_base(a), x), np.array(want, np.uint32))
    # declined forms go to the general path (which broadcasts, copies or names the error)
    a, x = K.random(6, seed=7), E.random(6, seed=8)
    declined = [(E.as_base(a[::2]), x[::2]),              # strided
                (E.as_base(a[:1]), x),                    # broadcast
                (E.as_base(a[:0]), x[:0]),                # empty
                (E.as_base(a), E.as_base(a)),             # both marked
                (BabyBear.ext.as_base(a), x)]             # another field's mark: refused there
    for args in declined:
        general_calls.clear()
        try:
            E.mul(*args)
        except ValueError:
            assert args[0].field is BabyBear
        assert general_calls == [1]
    # out: a fresh array or exactly the extension operand's words take the path
    # (the kernel contract); one overlapping the base words or part of the
    # extension operand, or read-only, the general path (a temporary, or its error)
    for op in ("add", "sub", "mul"):
        want = general(op, E.as_base(a), x)
        general_calls.clear()
        o = np.empty((6, 4), np.uint32)
        assert getattr(E, op)(E.as_base(a), x, out=o) is o
        y = x.copy()
        assert getattr(E, op)(y, E.as_base(a), out=y) is y
        assert general_calls == []
        np.testing.assert_array_equal(o, want)
        np.testing.assert_array_equal(y, general(op, x, E.as_base(a)))
        big = np.zeros(30, np.uint32)
        words, ext = big[:6], big[:24].reshape(6, 4)  # out over the base words
        words[:] = a
        want_ext = general(op, E.as_base(a), ext.copy())
        z = np.concatenate([x.reshape(-1), x.reshape(-1)[:4]])  # out: x shifted by one
        shifted = z[4:].reshape(6, 4)
        want_shifted = general(op, E.as_base(a), z[:24].reshape(6, 4))
        general_calls.clear()
        assert getattr(E, op)(E.as_base(words), ext.copy(), out=ext) is ext
        assert getattr(E, op)(E.as_base(a), z[:24].reshape(6, 4), out=shifted) is shifted
        assert general_calls == [1, 1]
        np.testing.assert_array_equal(ext, want_ext)
        np.testing.assert_array_equal(shifted, want_shifted)
    ro = np.empty((6, 4), np.uint32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        E.mul(E.as_base(a), x, out=ro)


@pytest.mark.parametrize("F", [K, K.ext], ids=["base", "ext"])
def test_small_call_path_takes_out(F, monkeypatch):
    """With ``out`` the small-call path was not taken: ``F.mul(a, b, out=o)``
    of 8 elements took 23 us against 8 us without ``out``.  A plain ``out``
    (disjoint from the operands, or exactly one of them, not for the
    inverse) now takes it, with the general path's bytes; every other
    ``out`` reaches the general path, which copies or names the error."""
    shape = (3, 5) if F is K else (3, 5, 4)
    n = 15
    ops = [("add", 2), ("sub", 2), ("mul", 2), ("neg", 1), ("square", 1), ("inv", 1)]
    calls = []
    monkeypatch.setattr(fields._FieldBase, "_prepare",
                        lambda self, *args, _p=fields._FieldBase._prepare:
                        calls.append(1) or _p(self, *args))

    def general(op, *args):
        with monkeypatch.context() as m:
            m.setattr(fields._FieldBase, "_map_plain", lambda *args: None)
            return getattr(F, op)(*args)

    for op, arity in ops:
        a, b = F.random(n, seed=1).reshape(shape), F.random(n, seed=2).reshape(shape)
        want = general(op, *(a, b)[:arity])
        calls.clear()
        o = np.empty(shape, np.uint32)
        assert getattr(F, op)(*(a, b)[:arity], out=o) is o
        np.testing.assert_array_equal(o, want, err_msg=op)
        if op != "inv":  # in place on an operand: the kernel contract allows it
            for k in range(arity):
                xs = [x.copy() for x in (a, b)[:arity]]
                assert getattr(F, op)(*xs, out=xs[k]) is xs[k]
                np.testing.assert_array_equal(xs[k], want, err_msg=f"{op} out=operand {k}")
        assert calls == [], op  # all of the above took the small-call path
        # declined: the general path runs (and gives the same bytes)
        buf = np.concatenate([a.reshape(-1), a.reshape(-1)])
        shifted = buf[:a.size].reshape(shape)
        later = buf[(4 if F is not K else 1):][:a.size].reshape(shape)  # overlaps `shifted`
        declined = [(shifted, later), (np.asfortranarray(np.empty(shape, np.uint32)), None)]
        if op == "inv":
            declined.append((a.copy(), "self"))
        for x, o in declined:
            calls.clear()
            x0 = x.copy()
            o = x if isinstance(o, str) else (np.empty(shape, np.uint32) if o is None else o)
            assert getattr(F, op)(*(x, b)[:arity], out=o) is o
            np.testing.assert_array_equal(o, general(op, *(x0, b)[:arity]), err_msg=op)
            assert calls, op
    calls.clear()
    a = F.random(n, seed=1).reshape(shape)
    for o, err in [(np.empty(shape, np.int32), TypeError),
                   (np.empty(shape, np.uint32)[:1], ValueError),
                   (np.broadcast_to(np.empty(shape[-1:], np.uint32), shape), ValueError)]:
        with pytest.raises(err, match="Argument `out`"):
            F.add(a, a, out=o)
    ro = np.empty(shape, np.uint32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="Argument `out` must be writeable"):
        F.add(a, a, out=ro)
    assert len(calls) == 4


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("F", [K, K.ext], ids=["base", "ext"])
def test_small_call_path_declines_every_out_it_cannot_write_in_place(F):
    """The small-call path writes ``out`` directly, so it must decline an
    ``out`` overlapping the *second* operand one element off (either way: a
    kernel writing ahead of its reads, or behind them), one of another shape
    with the same size, another unsigned dtype and (on the base field) an
    ndarray subclass: each gets the general path's bytes or error."""
    shape = (3, 5) if F is K else (3, 5, 4)
    step = 1 if F is K else 4
    a, b = F.random(15, seed=1).reshape(shape), F.random(15, seed=2).reshape(shape)
    for op in ("add", "sub", "mul"):
        want = getattr(F, op)(a, b)
        for lead in (0, step):  # out one element after b, or one before it
            buf = np.empty(2 * b.size, np.uint32)
            bv = buf[lead:][:b.size].reshape(shape)
            bv[...] = b
            o = buf[step - lead:][:b.size].reshape(shape)
            assert getattr(F, op)(a, bv, out=o) is o
            np.testing.assert_array_equal(o, want, err_msg=f"{op} lead {lead}")
        with pytest.raises(ValueError, match="Argument `out`"):
            getattr(F, op)(a, b, out=np.empty(shape[::-1] if F is K else (5, 3, 4),
                                              np.uint32))
        with pytest.raises(TypeError, match="Argument `out`"):
            getattr(F, op)(a, b, out=np.empty(shape, np.uint64))
        if F is K:
            m = np.asmatrix(np.zeros(shape, np.uint32))
            assert getattr(F, op)(a, b, out=m) is m
            np.testing.assert_array_equal(np.asarray(m), want, err_msg=op)


@pytest.mark.gpu
def test_marked_base_operand_small_call_path_on_cupy_arrays(monkeypatch):
    """CuPy operands take the marked path too (backend None or "cupy", with
    and without ``out``): the host's bytes; mixed modules and strided words
    go to the general path."""
    import cupy
    E = K.ext
    calls = []
    prepare = fields._FieldBase._prepare
    monkeypatch.setattr(fields._FieldBase, "_prepare", lambda self, *args:
                        calls.append(1) or prepare(self, *args))
    a, x = K.random((3, 5), seed=1), E.random((3, 5), seed=2)
    a[0, 0] = 2**32 - 1  # a word >= p, read mod p as everywhere
    da, dx = cupy.asarray(a), cupy.asarray(x)
    for op in ("add", "sub", "mul"):
        for args, host in (((E.as_base(da), dx), (E.as_base(a), x)),
                           ((dx, E.as_base(da)), (x, E.as_base(a)))):
            for backend in (None, "cupy"):
                got = getattr(E, op)(*args, backend=backend)
                assert isinstance(got, cupy.ndarray) and got.shape == (3, 5, 4)
                np.testing.assert_array_equal(got.get(), getattr(E, op)(*host))
        o = cupy.empty_like(dx)
        assert getattr(E, op)(E.as_base(da), dx, out=o) is o
        np.testing.assert_array_equal(o.get(), getattr(E, op)(E.as_base(a), x))
    assert calls == []  # every call above took the marked path
    for args in ((E.as_base(da[:, ::2]), dx[:, ::2]),  # strided
                 (E.as_base(a), dx)):                  # host words beside device ones
        calls.clear()
        try:
            E.mul(*args)
        except (TypeError, ValueError):
            pass  # (mixed modules: the general path's named error)
        assert calls == [1]


@pytest.mark.gpu
@pytest.mark.parametrize("F", [K, K.ext], ids=["base", "ext"])
def test_small_call_path_on_cupy_arrays(F, monkeypatch):
    """CuPy operands take the plain path too (backend None or "cupy"): the
    host's bytes; other backends and mixed forms go to the general path."""
    import cupy
    calls = []
    monkeypatch.setattr(fields._FieldBase, "_prepare",
                        lambda self, *args, _p=fields._FieldBase._prepare:
                        calls.append(1) or _p(self, *args))
    shape = (3, 5, 4) if F is not K else (3, 5)
    a = F.random(15, seed=1).reshape(shape)
    b = F.random(15, seed=2).reshape(shape)
    da, db = cupy.asarray(a), cupy.asarray(b)
    for op, arity in [("add", 2), ("sub", 2), ("mul", 2), ("neg", 1), ("square", 1),
                      ("inv", 1)]:
        for backend in (None, "cupy"):
            got = getattr(F, op)(*(da, db)[:arity], backend=backend)
            assert isinstance(got, cupy.ndarray) and got.shape == shape
            np.testing.assert_array_equal(got.get(), getattr(F, op)(*(a, b)[:arity]))
        o = cupy.empty_like(da)
        assert getattr(F, op)(*(da, db)[:arity], out=o) is o
        np.testing.assert_array_equal(o.get(), getattr(F, op)(*(a, b)[:arity]))
    assert calls == []  # every call above took the plain path
    want = F.mul(a[::2], b[::2])
    calls.clear()
    np.testing.assert_array_equal(F.mul(da[::2], db[::2]).get(), want)
    assert len(calls) == 1  # strided: the general path
