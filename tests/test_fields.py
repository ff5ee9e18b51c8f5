"""Field ops on every backend against Python big integers (tests/naive.py)."""
import copy
import types

import numba
import numpy as np
import pytest

from conftest import BACKENDS, SIMULATED, to_backend, to_host
import naive
from zorch_nb import BabyBear, KoalaBear

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]


def edge_values(p):
    """Canonical values that stress reductions: 0, 1, p-1, R mod p, 2, p-2."""
    return [0, 1, p - 1, 2**32 % p, 2, p - 2]


def sample(F, n, seed, ext=False):
    """n canonical values (n x 4 for ext): the edge values, then random ones."""
    p = F.p
    rng = np.random.default_rng(seed)
    edges = edge_values(p)
    shape = (n, 4) if ext else (n,)
    vals = rng.integers(0, p, size=shape, dtype=np.int64)
    flat = vals.reshape(-1)
    flat[: len(edges)] = edges
    if ext:  # every edge value also as a whole element and in every slot
        vals[len(edges) : 2 * len(edges), 0] = edges
        vals[len(edges) : 2 * len(edges), 1:] = 0
        vals[2 * len(edges) : 3 * len(edges)] = np.array(edges)[:, None]
    return vals


def words(F, vals):
    return np.array([[naive.enc(int(v), F.p) for v in row] for row in vals], dtype=np.uint32) \
        if vals.ndim == 2 else np.array([naive.enc(int(v), F.p) for v in vals], dtype=np.uint32)


def n_for(backend):
    return 40 if backend == "numba" else 200


# ---------------------------------------------------------------- base field

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_base_ops_match_big_ints(F, backend):
    p = F.p
    n = n_for(backend)
    x, y = sample(F, n, 1), sample(F, n, 2)
    y[:6] = edge_values(p)[::-1]
    a, b = to_backend(words(F, x), backend), to_backend(words(F, y), backend)
    a0, b0 = to_host(a).copy(), to_host(b).copy()
    expect = {
        "add": [(u + v) % p for u, v in zip(x, y)],
        "sub": [(u - v) % p for u, v in zip(x, y)],
        "mul": [u * v % p for u, v in zip(x, y)],
    }
    for op, want in expect.items():
        got = to_host(getattr(F, op)(a, b, backend=backend))
        assert got.dtype == np.uint32 and got.shape == (n,)
        assert [naive.dec(int(w), p) for w in got] == [int(v) for v in want], op
    unary = {"neg": [(-u) % p for u in x], "square": [u * u % p for u in x]}
    for op, want in unary.items():
        got = to_host(getattr(F, op)(a, backend=backend))
        assert [naive.dec(int(w), p) for w in got] == [int(v) for v in want], op
    nz = x.copy()
    nz[nz == 0] = 1
    c = to_backend(words(F, nz), backend)
    for op in ("inv", "batch_inv"):
        got = to_host(getattr(F, op)(c, backend=backend))
        assert [naive.dec(int(w), p) for w in got] == [pow(int(u), -1, p) for u in nz], op
    for e in (0, 1, 2, 5, p - 1, p, 2**70 + 3):
        got = to_host(F.pow(a, e, backend=backend))
        assert [naive.dec(int(w), p) for w in got] == [pow(int(u), e, p) for u in x], e
    got = to_host(F.pow(c, -3, backend=backend))
    assert [naive.dec(int(w), p) for w in got] == [pow(int(u), -3, p) for u in nz]
    got = to_host(F.div(a, c, backend=backend))
    assert [naive.dec(int(w), p) for w in got] == \
        [int(u) * pow(int(v), -1, p) % p for u, v in zip(x, nz)]
    # Inputs untouched.
    assert (to_host(a) == a0).all() and (to_host(b) == b0).all()


@pytest.mark.parametrize("F", FIELDS)
def test_encode_decode_roundtrip_and_constants(F):
    p = F.p
    vals = [0, 1, 2, p - 1, 12345]
    w = F.encode(vals)
    assert w.dtype == np.uint32
    assert [int(v) for v in w] == [naive.enc(v, p) for v in vals]
    assert F.decode(w).tolist() == vals
    assert F.p == naive.P[F.name] and F.W == naive.W[F.name]
    assert int(F.one) == naive.enc(1, p)
    assert F.decode(F.ones((2, 3))).tolist() == [[1] * 3] * 2
    assert F.decode(F.zeros(3)).tolist() == [0, 0, 0]
    assert F.is_canonical(w) and not F.is_canonical(np.array([p], dtype=np.uint32))
    r1, r2 = F.random((3, 4), seed=7), F.random((3, 4), seed=7)
    assert (r1 == r2).all() and r1.shape == (3, 4) and F.is_canonical(r1)
    # Big ints, negative values and every integer dtype with reduce=True.
    big = [2**100 + 5, -1, p, -p - 3]
    assert F.decode(F.encode(big, reduce=True)).tolist() == [v % p for v in big]
    for dt in (np.int8, np.uint16, np.int32, np.int64, np.uint64):
        assert F.decode(F.encode(np.array([0, 1, 100], dtype=dt))).tolist() == [0, 1, 100]


@pytest.mark.parametrize("F", FIELDS)
def test_broadcasting_and_out(F):
    a = F.random((3, 1), seed=1)
    b = F.random((1, 5), seed=2)
    got = F.mul(a, b)
    assert got.shape == (3, 5)
    want = [[naive.dec(int(x), F.p) * naive.dec(int(y), F.p) % F.p for y in b[0]] for x in a[:, 0]]
    assert F.decode(got).tolist() == want
    out = np.empty((3, 5), dtype=np.uint32)
    assert F.mul(a, b, out=out) is out and (out == got).all()
    # out aliasing an input is allowed (elementwise).
    c = F.random(8, seed=3)
    c0 = c.copy()
    F.add(c, c, out=c)
    assert (c == F.add(c0, c0)).all()


# ---------------------------------------------------------------- extension

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_ext_ops_match_big_ints(F, backend):
    p, w = F.p, F.W
    E = F.ext
    n = 24 if backend == "numba" else 120
    x, y = sample(F, n, 3, ext=True), sample(F, n, 4, ext=True)
    a, b = to_backend(words(F, x), backend), to_backend(words(F, y), backend)
    a0 = to_host(a).copy()

    def dec(arr):
        return [[naive.dec(int(v), p) for v in row] for row in to_host(arr)]

    xs, ys = x.tolist(), y.tolist()
    assert dec(E.add(a, b, backend=backend)) == [naive.ext_add(u, v, p) for u, v in zip(xs, ys)]
    assert dec(E.sub(a, b, backend=backend)) == [naive.ext_sub(u, v, p) for u, v in zip(xs, ys)]
    assert dec(E.mul(a, b, backend=backend)) == [naive.ext_mul(u, v, p, w) for u, v in zip(xs, ys)]
    assert dec(E.neg(a, backend=backend)) == [naive.ext_neg(u, p) for u in xs]
    assert dec(E.square(a, backend=backend)) == [naive.ext_mul(u, u, p, w) for u in xs]
    nz = [u if any(u) else [1, 0, 0, 0] for u in xs]
    c = to_backend(words(F, np.array(nz)), backend)
    for op in ("inv", "batch_inv"):
        assert dec(getattr(E, op)(c, backend=backend)) == [naive.ext_inv(u, p, w) for u in nz]
    for e in (0, 1, 7, p**4 - 1, p**4 + 5):
        got = dec(E.pow(a, e, backend=backend))
        assert got == [naive.ext_pow(u, e, p, w) for u in xs], e
    assert (to_host(a) == a0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_ext_promotion_is_embedding(F, backend):
    """Base operand on either side == embedding it as (a, 0, 0, 0)."""
    E = F.ext
    n = 16 if backend == "numba" else 64
    x = to_backend(E.random(n, seed=5), backend)
    s_host = F.random(n, seed=6)
    s_host[:4] = F.encode([0, 1, F.p - 1, 2**32 % F.p])
    s = to_backend(s_host, backend)
    emb_host = np.zeros((n, 4), dtype=np.uint32)
    emb_host[:, 0] = s_host
    emb = to_backend(emb_host, backend)
    for op in ("add", "sub", "mul"):
        f = getattr(E, op)
        assert (to_host(f(x, s, backend=backend)) == to_host(f(x, emb, backend=backend))).all()
        assert (to_host(f(s, x, backend=backend)) == to_host(f(emb, x, backend=backend))).all()
    # broadcasting a base scalar array over an extension array
    k = F.encode([3])
    got = E.mul(to_host(x), k)
    assert (got == E.mul(to_host(x), np.broadcast_to(np.array([k[0], 0, 0, 0], np.uint32), (n, 4)))).all()


def test_ext_constants():
    for F in (KoalaBear, BabyBear):
        E = F.ext
        assert E.one.tolist() == [naive.enc(1, F.p), 0, 0, 0]
        assert E.p == F.p and E.W == F.W
        x = E.encode([[0, 1, 0, 0]])
        assert E.decode(E.pow(x, 4)).tolist() == [[F.W, 0, 0, 0]]
        assert E.decode(E.ones(2)).tolist() == [[1, 0, 0, 0]] * 2


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("F", FIELDS)
def test_inverse_of_zero_raises_with_index(F):
    a = F.encode([1, 2, 0, 4])
    with pytest.raises(ValueError, match=r"index \(2,\)"):
        F.inv(a)
    # each names its argument, as div does (a user review)
    with pytest.raises(ValueError, match=r"^batch_inv: `a`: element at index \(2,\) is zero"):
        F.batch_inv(a)
    e = F.ext.encode([[1, 0, 0, 0], [0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"^inv: `a`: element at index \(1,\) is zero"):
        F.ext.inv(e)
    with pytest.raises(ValueError, match=r"^pow with e = -1 < 0: `a`: element at index \(2,\)"):
        F.pow(a, -1)
    with pytest.raises(ValueError, match=r"div: `b`: element at index \(2,\) is zero"):
        F.div(F.ones(4), a)
    with pytest.raises(ValueError, match=r"div: `b`: element at index \(1,\) is zero"):
        F.ext.div(F.ext.ones(3), a[1:])  # a base divisor (a trailing 4 is an element)
    with pytest.raises(TypeError, match="Argument `b` must be a uint32 array"):
        F.div(a, [1, 2, 3, 4])


@pytest.mark.parametrize("F", FIELDS)
def test_div_is_mul_by_the_inverse_with_broadcasting(F):
    """Quotients of every operand form, against big ints: extension by
    extension, by a base divisor and base by extension, with broadcasting."""
    p, E = F.p, F.ext
    x = sample(F, 24, 3, ext=True).reshape(6, 4, 4)  # (6, 4) elements, the edge values
    y = sample(F, 24, 4, ext=True)[6:10]  # edge values as whole elements
    y[(y == 0).all(axis=1)] = [1, 2, 3, 4]
    s = sample(F, 8, 5)[:6]  # (6,) base: as (6, 1) a column (a trailing 4 is an element)
    s[s == 0] = 7
    a, b, c = words(F, x.reshape(24, 4)).reshape(6, 4, 4), words(F, y), words(F, s)
    inv_y = [naive.ext_inv([int(v) for v in row], p, F.W) for row in y]
    got = E.decode(E.div(a, b))                        # (6, 4) by (4,): broadcast rows
    for i in range(6):
        for j in range(4):
            want = naive.ext_mul([int(v) for v in x[i, j]], inv_y[j], p, F.W)
            assert got[i, j].tolist() == want
    got = E.decode(E.div(a, c[:, None]))               # by a column of base elements
    assert got.tolist() == [[[int(v) * pow(int(s[i]), -1, p) % p for v in x[i, j]]
                             for j in range(4)] for i in range(6)]
    got = E.decode(E.div(c[:, None], b))               # base numerators, outer
    assert got.tolist() == [[naive.ext_mul([int(s[i]), 0, 0, 0], inv_y[j], p, F.W)
                             for j in range(4)] for i in range(6)]
    out = a.copy()
    assert E.div(out, b, out=out) is out and (E.decode(out) == E.decode(E.div(a, b))).all()


def test_fuzzed_arguments_are_named_before_any_work():
    """Found by fuzzing the CPU path: div inverted all of `b` and then
    reported a shape mismatch as a zero divisor; a shape no array can have
    gave NumPy's messages ("Maximum allowed dimension exceeded", "array is
    too big"), which name no argument; np.timedelta64, which NumPy types as
    an integer, passed as an exponent, an axis or a shape."""
    F, E = KoalaBear, KoalaBear.ext
    for div, a in ((F.div, F.random(3)), (E.div, E.random(3))):
        with pytest.raises(ValueError, match=r"do not broadcast: `a` \(3,\), `b` \(5,\)"):
            div(a, F.zeros(5))
    for make, shape in ((F.random, 2**70), (F.zeros, (2**40, 2**40)), (E.ones, 2**62)):
        with pytest.raises(ValueError, match=r"Argument `shape`: an array of shape .* is larger "
                                             r"than any array can be"):
            make(shape)
    one = F.ones(())
    with pytest.raises(ValueError, match=r"the result of the operands' \(broadcast\) shape: an "
                                         r"array of shape \(2147483648, 2147483648\)"):
        F.add(np.broadcast_to(one, (2**31, 1)), np.broadcast_to(one, (1, 2**31)))
    with pytest.raises(ValueError, match=r"the extension elements of `a`: an array of shape "
                                         r"\(1073741824, 1073741824, 4\)"):
        E.from_base(np.broadcast_to(one, (2**30, 2**30)))
    td = np.timedelta64(3, "D")
    for call, match in ((lambda: F.pow(F.random(2), td), "`e` must be an integer"),
                        (lambda: F.encode([td]), "`ints` must hold integers, not timedelta64"),
                        (lambda: F.sum(F.random((2, 3)), axis=np.timedelta64(1)),
                         "`axis` must be None, an int"),
                        (lambda: F.random(td), "`shape` must be an int"),
                        (lambda: F.sum(F.random(2), keepdims=np.timedelta64(1)),
                         "`keepdims` must be True or False")):
        with pytest.raises(TypeError, match=match):
            call()


def test_encode_refuses_bytes_alike_and_reads_integer_buffers():
    """bytes were refused as one object while a bytearray or a memoryview of
    bytes encoded its byte values (a helper's fuzz): all three are refused,
    naming the way to their byte values; a memoryview of integers is read."""
    F = KoalaBear
    for x in (b"12", bytearray(b"12"), memoryview(b"12")):
        with pytest.raises(TypeError, match=rf"`ints` must be a sequence or array of integers, "
                                            rf"not {type(x).__name__}; .*np.frombuffer"):
            F.encode(x)
    ints = np.array([3, F.p - 1, 0], np.int64)
    assert F.encode(memoryview(ints)).tolist() == F.encode(ints).tolist()
    assert F.encode(np.frombuffer(b"12", np.uint8)).tolist() == F.encode([49, 50]).tolist()


def test_host_arrays_past_this_machines_memory_are_refused_by_name(monkeypatch):
    """An array the machine cannot hold is a MemoryError naming the argument
    (F.eq_table of 40 coordinates, F.random(2**40): NumPy's "Unable to
    allocate 4.00 TiB" named none), as graph replays and jagged layers say."""
    import zorch_nb.fields as fields
    F, E = KoalaBear, KoalaBear.ext
    monkeypatch.setattr(fields._backend, "physical_memory", lambda: 2**20)  # 1 MiB
    for make, shape in ((F.random, 2**19), (F.zeros, (2**10, 2**9)), (E.ones, 2**17)):
        with pytest.raises(MemoryError, match=r"Argument `shape`: an array of shape .* needs "
                                              r"0\.0 GiB; this machine has 0\.0 GiB"):
            make(shape)
        make(100)  # (small ones as before)
    with pytest.raises(MemoryError, match=r"Argument `point` has nv = 19 coordinates: its "
                                          r"table of 2\*\*19 elements needs"):
        F.eq_table(F.random(19))
    assert F.eq_table(F.random(19), out=np.empty(2**19, np.uint32)).shape == (2**19,)
    one = F.ones(())
    with pytest.raises(MemoryError, match=r"the result of the operands' \(broadcast\) shape"):
        F.add(np.broadcast_to(one, (2**10, 1)), np.broadcast_to(one, (1, 2**9)))
    # decode and from_base of broadcast views too (NumPy's bare "Unable to allocate")
    with pytest.raises(MemoryError, match=r"the values of `words`: an array of shape "
                                          r"\(2097152,\) needs"):
        F.decode(np.broadcast_to(one, (2**21,)))
    with pytest.raises(MemoryError, match=r"the extension elements of `a`: an array of shape "
                                          r"\(131072, 4\) needs"):
        E.from_base(np.broadcast_to(one, (2**17,)))
    assert F.decode(np.broadcast_to(one, (100,))).tolist() == [1] * 100
    # mle_eval's folds of a broadcast view (NumPy's bare error), and div's
    # inverses named as `b`'s (they blamed `a`)
    for G, point in ((F, F.random(21)), (E, E.random(21))):
        # (base values at an extension point fold three times at once: 2**18 elements)
        with pytest.raises(MemoryError, match=r"the first folds of `values`: an array of shape "
                                              r"\((1048576,|262144, 4)\) needs"):
            G.mle_eval(np.broadcast_to(one, (2**21,)), point)
    with pytest.raises(MemoryError, match=r"the inverses of `b`: an array of shape \(2097152,\)"):
        F.div(F.ones(1), np.broadcast_to(one, (2**21,)))
    # and the sums over an axis of a broadcast view (their uint64 slots)
    with pytest.raises(MemoryError, match=r"the sum of `a` over `axis`: an array of shape "
                                          r"\(262144, 1\) needs"):
        F.sum(np.broadcast_to(one, (2**18, 2)), axis=1)
    assert F.decode(F.sum(np.broadcast_to(one, (100, 2)), axis=1)).tolist() == [2] * 100


def test_bad_input_errors():
    F = KoalaBear
    a = F.random(4, seed=0)
    with pytest.raises(TypeError, match="`b` must have dtype uint32"):
        F.add(a, a.astype(np.int64))
    with pytest.raises(TypeError, match="`a` must be a uint32 array"):
        F.add([1, 2], a)
    with pytest.raises(ValueError, match="do not broadcast"):
        F.mul(a, F.random(3, seed=1))
    # extension data given to a base-field op: the error points to F.ext
    x = F.ext.random(3, seed=2)
    with pytest.raises(ValueError, match=r"`b` looks like KoalaBear extension elements.*"
                                         r"KoalaBear\.ext\."):
        F.mul(F.random(3, seed=1), x)
    with pytest.raises(ValueError, match="do not broadcast: `a` \\(5,\\), `b` \\(3, 4\\)$"):
        F.mul(F.random(5, seed=1), x)  # no broadcast either way: no hint
    with pytest.raises(ValueError, match="do not broadcast: `a` \\(3,\\), `b` \\(4,\\)$"):
        F.add(F.ones(3), F.ones(4))  # a lone axis of 4: as likely base elements, no hint
    assert np.array_equal(F.ext.mul(F.random(3, seed=1), x),
                          F.ext.mul(F.ext.from_base(F.random(3, seed=1)), x))
    # the reverse: base words of shape (..., 4) in an extension op point to as_base
    y, w = F.ext.random((3, 4), seed=3), F.random((3, 4), seed=4)
    for first, second, name in ((y, w, "b"), (w, y, "a")):
        with pytest.raises(ValueError, match=rf"do not broadcast: .* \(`{name}`, of shape "
                                             rf"\(3, 4\), was read as extension elements.*"
                                             rf"mark them, KoalaBear\.ext\.as_base\({name}\)\)$"):
            F.ext.add(first, second)
    with pytest.raises(ValueError, match=r"do not broadcast: `a` \(3, 4\), `b` \(5,\)$"):
        F.ext.add(y, F.random((5, 4), seed=5))  # no broadcast either way: no hint
    np.testing.assert_array_equal(F.ext.add(y, F.ext.as_base(w)),  # what the hint says
                                  F.ext.add(y, F.ext.from_base(w)))
    with pytest.raises(ValueError, match="trailing axis of length 4"):
        F.ext.neg(F.random((4, 3), seed=0))
    with pytest.raises(ValueError, match="trailing axis of length 4"):
        F.ext.encode([1, 2, 3])
    with pytest.raises(ValueError, match=r"\[0, p=.*ints\[1\] = -1"):
        F.encode([1, -1])
    with pytest.raises(ValueError, match="reduce=True"):
        F.encode([F.p])
    with pytest.raises(TypeError, match="integers"):
        F.encode([1.5])
    with pytest.raises(TypeError, match="integers"):
        F.encode(["1"])
    with pytest.raises(TypeError, match="integers, not bool"):
        F.encode([True, 2])
    with pytest.raises(TypeError, match="`reduce` must be True or False"):
        F.encode([1], reduce="no")
    with pytest.raises(ValueError, match=r"ints\[0\] = 9223372036854775808"):
        F.encode([2**63, 1])  # NumPy would read this list as float64
    big = [2**64 - 1, 2**63, -2**70, 1]  # exact Python ints beyond int64, reduced
    assert F.decode(F.encode(big, reduce=True)).tolist() == [v % F.p for v in big]
    # small NumPy scalars beside them (np.int8(1) % p overflowed in the object path)
    mixed = [np.int8(-3), 2**64, np.uint16(7)]
    assert F.decode(F.encode(mixed, reduce=True)).tolist() == [int(v) % F.p for v in mixed]
    # ints past Python's 4300-digit str limit still get their message
    with pytest.raises(ValueError, match=r"ints\[1\] = \(an integer of 14285 bits\)"):
        F.encode([1, 10**4300])
    assert F.decode(F.pow(F.encode([5]), -10**4300)).tolist() == \
        [pow(pow(5, -1, F.p), 10**4300, F.p)]
    with pytest.raises(ValueError, match=r"e = -\(an integer of 14285 bits\) < 0: `a`: element "
                                         r"at index \(1,\) is zero"):
        F.pow(F.encode([5, 0]), -10**4300)
    with pytest.raises(TypeError, match=r"`a` must have dtype uint32 in native byte order, not "
                                        r">u4 \(byte-swapped\); convert it"):
        F.mul(a.astype(">u4"), a)
    with pytest.raises(TypeError, match=r"`out` must have dtype uint32 in native byte order.*"
                                        r"pass a native uint32 array"):
        F.mul(a, a, out=np.empty(4, ">u4"))
    with pytest.raises(TypeError, match=r"`out` must have dtype uint32 \(Montgomery words\), "
                                        r"not int64$"):  # no `encode` advice for out
        F.mul(a, a, out=np.empty(4, np.int64))
    with pytest.raises(TypeError, match=r"`out` must be an array.*not a NumPy scalar"):
        F.mul(a[0], a[1], out=np.uint32(0))
    with pytest.raises(ValueError, match=r"axes of \(2, 3\), not 2$"):
        F.sum(F.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"\(extension coefficients are not an axis here\)"):
        F.ext.sum(F.ext.zeros((2, 3)), axis=2)
    # NumPy-style: array shapes and a 0-d integer exponent
    assert F.zeros(np.array([2, 3])).shape == (2, 3) and F.ones(np.array(2)).shape == (2,)
    assert np.array_equal(F.pow(a, np.array(3)), F.pow(a, 3))
    with pytest.raises(TypeError, match="`e` must be an integer"):
        F.pow(a, np.array([3]))
    with pytest.raises(TypeError, match="`shape` must be an int or a tuple"):
        F.zeros(np.array([2.0]))
    # from_base reduces non-canonical words, as every result is canonical
    assert F.ext.from_base(np.array([F.p + 5, 2**32 - 1], np.uint32))[:, 0].tolist() == \
        [5, (2**32 - 1) % F.p]
    assert F.encode([]).shape == (0,) and F.ext.encode(np.zeros((0, 4), int)).shape == (0, 4)
    with pytest.raises(ValueError, match="decode needs canonical"):
        F.decode(np.array([F.p + 1], dtype=np.uint32))
    with pytest.raises(ValueError, match="`backend` must be one of"):
        F.add(a, a, backend="tpu")
    with pytest.raises(ValueError, match="`out` must have shape"):
        F.add(a, a, out=np.empty(5, dtype=np.uint32))
    with pytest.raises(TypeError, match="`e` must be an integer"):
        F.pow(a, 2.0)
    with pytest.raises(TypeError, match="`xp` must be the numpy or cupy module"):
        F.zeros(3, xp=list)
    assert F.zeros(3, xp="numpy").tolist() == [0, 0, 0]  # the module's name will do
    assert F.encode([1], xp="numpy").tolist() == F.encode([1]).tolist()
    read_only = np.zeros(4, np.uint32)
    read_only.flags.writeable = False
    for out in (read_only, np.broadcast_to(a[:1], (4,))):  # before any kernel runs
        with pytest.raises(ValueError, match="`out` must be writeable"):
            F.mul(a, a, out=out)
        with pytest.raises(ValueError, match="`out` must be writeable"):
            F.ext.mul(F.ext.random(4, seed=0), a, out=np.broadcast_to(out[:, None], (4, 4)))
    # A writeable view repeating words (as a CuPy broadcast view is: CuPy has
    # no read-only flag) kept one of the results written over each other
    words = np.zeros(1, np.uint32)
    repeating = np.lib.stride_tricks.as_strided(words, (4,), (0,))
    assert repeating.flags.writeable
    with pytest.raises(ValueError, match="`out` must be writeable .* broadcast view"):
        F.mul(a, a, out=repeating)
    assert words[0] == 0
    one = np.lib.stride_tricks.as_strided(words, (1, 1), (0, 0))  # a stride of a 1-long axis
    assert F.mul(a[:1], a[:1], out=one.reshape(1)) is not None
    for bad in ((2.7,), "12", True, 2.5, (2, None)):
        with pytest.raises(TypeError, match="`shape` must be an int"):
            F.zeros(bad)
    with pytest.raises(ValueError, match="`shape` must not have negative"):
        F.random(-1)


def test_integer_inputs_numpy_reads_the_same_way():
    """encode reads byte order, nesting and 0-d arrays as NumPy does; names the argument."""
    F = KoalaBear
    p = F.p
    vals = [2**64 - 1, 2**63 + 5, 7]
    for dt in (">u8", "<u8"):  # uint64 beyond int64: exact in either byte order
        assert F.decode(F.encode(np.array(vals, dtype=dt), reduce=True)).tolist() == \
            [v % p for v in vals]
    assert F.decode(F.encode(np.array([3, p - 1], dtype=">i4"))).tolist() == [3, p - 1]
    assert F.encode([np.array(3), np.int64(4)]).tolist() == F.encode([3, 4]).tolist()
    for ragged in ([[1, 2], [3]], [[1, 2, 3, 4], [1, 2, 3]]):
        with pytest.raises(ValueError, match="`ints` must be a rectangular"):
            F.ext.encode(ragged)
    with pytest.raises(ValueError, match=r"but ints = -1;"):  # 0-d: no empty index
        F.encode(-1)
    with pytest.raises(ValueError, match=r"^pow .*index \(1,\) is zero"):
        F.pow(F.encode([1, 0]), -3)
    for seed, exc in ((-1, ValueError), (1.5, TypeError), (True, TypeError),
                      (np.bool_(False), TypeError)):  # (NumPy takes a bool as 0 or 1)
        with pytest.raises(exc, match="`seed` must be"):
            F.random(3, seed=seed)
    masked = np.ma.array(np.array([5, p], np.uint32), mask=[0, 1])
    for call in (lambda: F.is_canonical(masked), lambda: F.add(masked, masked),
                 lambda: F.encode(np.ma.array([1, 2], mask=[0, 1]))):
        with pytest.raises(TypeError, match="masked array"):
            call()


@pytest.mark.parametrize("F", FIELDS)
def test_sum_matches_big_ints(F, monkeypatch):
    """F.sum / E.sum over element axes, as numpy.sum; words >= p count mod p."""
    import zorch_nb.fields as fields_mod
    rng = np.random.default_rng(5)
    words = rng.integers(0, 2**32, size=(4, 6), dtype=np.uint64).astype(np.uint32)
    vals = np.vectorize(lambda w: naive.dec(int(w) % F.p, F.p), otypes=[object])(words)
    ext = rng.integers(0, 2**32, size=(3, 5, 4), dtype=np.uint64).astype(np.uint32)
    evals = np.vectorize(lambda w: naive.dec(int(w) % F.p, F.p), otypes=[object])(ext)
    # contiguous words over trailing axes take the CPU kernel, the rest NumPy's
    # uint64 reductions: both, through the same values in a strided view
    for form in (lambda x: x, strided_copy):
        for exact in (2**32, 2):  # the second: slots reduced mod p in between, as huge sums
            monkeypatch.setattr(fields_mod, "_SUM_EXACT", exact)
            for axis, keep in ((None, False), (0, False), (-1, True), ((0, 1), True)):
                want = vals.sum(axis=axis, keepdims=keep) % F.p
                got = F.decode(F.sum(form(words), axis=axis, keepdims=keep))
                assert got.shape == np.shape(want) and got.tolist() == np.asarray(want).tolist()
            for axis in (None, 0, 1, (1, 0)):
                ax = (0, 1) if axis is None else axis if isinstance(axis, tuple) else (axis,)
                want = evals.sum(axis=ax) % F.p
                got = F.ext.decode(F.ext.sum(form(ext), axis=axis))
                assert got.tolist() == np.asarray(want).tolist()
    assert F.sum(F.random(0, seed=1)).tolist() == 0
    # backend= as the other operations take it (it was an unexpected keyword)
    assert F.sum(words, backend="cpu").tolist() == F.sum(words).tolist()
    with pytest.raises(ValueError, match="`backend` must be one of"):
        F.sum(words, backend="tpu")
    for axis, exc in ((2, ValueError), ((0, 0), ValueError), (1.5, TypeError)):
        with pytest.raises(exc, match="`axis`"):
            F.sum(words, axis=axis)
    with pytest.raises(ValueError, match="`axis`"):
        F.ext.sum(ext, axis=2)  # the coefficient axis is not an element axis


def strided_copy(a):
    """A view of ``a``'s values that is not C-contiguous (every other row of
    a buffer twice its size along axis 0; ``a`` itself where that axis is
    shorter than 2, which stays contiguous)."""
    if a.ndim == 0 or a.shape[0] < 2:
        return a
    return np.repeat(a, 2, axis=0)[::2]


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 0), (0, 5), (3, 5, 6), (2, 40000)],
                         ids=str)
def test_sum_over_trailing_axes_in_one_kernel_pass_matches_big_ints(F, shape):
    """A C-contiguous array summed over its trailing element axes (every axis
    included) is added by the CPU kernel, row by row, in one pass: the same
    words as the NumPy path on a strided view of the same values, and as big
    ints, for every keepdims, with out=, and with empty rows or arrays."""
    E = F.ext
    rng = np.random.default_rng(len(shape) * 7 + sum(shape))
    words = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    ext = rng.integers(0, 2**32, size=shape + (4,), dtype=np.uint64).astype(np.uint32)
    if words.size:
        words.reshape(-1)[:3] = 2**32 - 1  # (the largest words: the sums stay exact)
    dec = np.vectorize(lambda w: naive.dec(int(w) % F.p, F.p), otypes=[object])
    nd = len(shape)
    for G, a in ((F, words), (E, ext)):
        before = a.copy()
        vals = dec(a) if a.size else np.zeros(a.shape, object)
        for k in range(nd):
            for axis in (tuple(range(k, nd)), tuple(range(nd - 1, k - 1, -1)),
                         k - nd if k == nd - 1 else None):
                ax = tuple(range(nd)) if axis is None else axis if isinstance(axis, tuple) \
                    else (axis % nd,)
                for keep in (False, True):
                    want = np.asarray(vals.sum(axis=ax, keepdims=keep) % F.p)
                    got = G.sum(a, axis=axis, keepdims=keep)
                    assert type(got) is np.ndarray and got.dtype == np.uint32 and \
                        got.shape == want.shape, (axis, keep)  # (0-d: an array, no scalar)
                    assert G.decode(got).tolist() == want.tolist(), (G, axis, keep)
                    other = G.sum(strided_copy(a), axis, keep)
                    assert type(other) is np.ndarray and other.tobytes() == got.tobytes()
                    out = np.full(got.shape, 7, np.uint32)
                    assert G.sum(a, axis, keep, out=out) is out and out.tobytes() == \
                        got.tobytes()
        np.testing.assert_array_equal(a, before)


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("backend", [pytest.param("cpu", id="cpu"),
                                     pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)])
def test_sum_over_a_broadcast_axis_is_the_count_times_the_element(F, backend):
    """A summed axis of stride 0 repeats one element: the sum is its count
    times that element (a 2**40-element broadcast took minutes); other axes,
    non-canonical words and keepdims as before.  Big ints are the reference."""
    E = F.ext
    rng = np.random.default_rng(9)
    words = rng.integers(0, 2**32, size=(3, 5), dtype=np.uint64).astype(np.uint32)
    ext = rng.integers(0, 2**32, size=(3, 4), dtype=np.uint64).astype(np.uint32)
    dec = np.vectorize(lambda w: naive.dec(int(w) % F.p, F.p), otypes=[object])
    vals, evals = dec(words), dec(ext)
    w, x = to_backend(words, backend), to_backend(ext, backend)
    xp = __import__("cupy") if backend == "cupy" else np
    big = 2**40 + 3
    cases = [  # (field, view, axis, keepdims, the big-int sums)
        (F, xp.broadcast_to(w[:, None, :], (3, big, 5)), 1, False, vals * big),
        (F, xp.broadcast_to(w[:, None, :], (3, big, 5)), (0, 1), True,
         vals.sum(axis=0, keepdims=True)[:, None, :] * big),
        (F, xp.broadcast_to(w[:, None, :], (3, 7, 5)), None, False, 7 * vals.sum()),
        (E, xp.broadcast_to(x[None], (big, 3, 4)), 0, False, evals * big),
        (E, xp.broadcast_to(x[:, None], (3, 6, 4)), None, True,
         6 * evals.sum(axis=0)[None, None]),
    ]
    for G, view, axis, keep, total in cases:
        got = to_host(G.sum(view, axis=axis, keepdims=keep))
        assert G.decode(got).tolist() == np.asarray(total % F.p).tolist(), (G, axis, keep)


@pytest.mark.parametrize("F", FIELDS)
def test_sum_writes_out_like_numpy(F):
    """``out=``: the result's shape (keepdims included), any strides, returned; it may
    be a view of the input (the sum is complete before it is written); a wrong one
    is refused before any work, the input untouched."""
    rng = np.random.default_rng(9)
    words = rng.integers(0, 2**32, size=(4, 6), dtype=np.uint64).astype(np.uint32)
    ext = rng.integers(0, 2**32, size=(3, 5, 4), dtype=np.uint64).astype(np.uint32)
    for G, a, axis, keep in ((F, words, 0, False), (F, words, 1, True), (F, words, None, False),
                             (F.ext, ext, 1, False), (F.ext, ext, None, True)):
        want = G.sum(a, axis=axis, keepdims=keep)
        out = np.full(want.shape, 7, dtype=np.uint32)
        assert G.sum(a, axis, keep, out=out) is out and out.tobytes() == want.tobytes()
        strided = np.zeros(want.shape + (2,), dtype=np.uint32)[..., 1]
        G.sum(a, axis=axis, keepdims=keep, out=strided)
        assert (strided == want).all()
        with pytest.raises(ValueError, match="`out` must have shape"):
            G.sum(a, axis=axis, keepdims=not keep, out=out)
    inplace = words.copy()
    F.sum(inplace, axis=0, out=inplace[1])
    assert (inplace[1] == F.sum(words, axis=0)).all() and (inplace[0] == words[0]).all()
    before = words.copy()
    for bad, exc in ((np.empty(6, np.int64), TypeError), (np.empty(6, np.uint32)[::-1][:5], ValueError),
                     (np.broadcast_to(np.uint32(0), (6,)), ValueError), ([0] * 6, TypeError)):
        with pytest.raises(exc, match="`out`"):
            F.sum(words, axis=0, out=bad)
    assert (words == before).all()


@pytest.mark.parametrize("F", FIELDS)
def test_mle_eval_matches_the_sum_over_the_hypercube(F):
    """f~(r) = sum_b f(b) prod_j (r_j if b_j else 1 - r_j), point[0] binding the lowest
    index bit, against big ints; base values and a base point on the extension too."""
    p, w, E = F.p, F.W, F.ext
    one = [1, 0, 0, 0]

    def reference(vals, point):  # canonical coefficient lists
        total = [0, 0, 0, 0]
        for b, f in enumerate(vals):
            weight = one
            for j, r in enumerate(point):
                weight = naive.ext_mul(weight, r if (b >> j) & 1 else naive.ext_sub(one, r, p),
                                       p, w)
            total = naive.ext_add(total, naive.ext_mul(weight, f, p, w), p)
        return total

    for nv in (0, 1, 2, 3, 5):
        vals, point = E.random(2**nv, seed=nv), E.random(nv, seed=20 + nv)
        base_vals, base_point = F.random(2**nv, seed=nv), F.random(nv, seed=40 + nv)
        as_ext = lambda x: [[v, 0, 0, 0] for v in F.decode(x).tolist()]  # noqa: E731
        cases = [(E, vals, point, E.decode(vals).tolist(), E.decode(point).tolist()),
                 (E, base_vals, point, as_ext(base_vals), E.decode(point).tolist()),
                 (E, vals, base_point, E.decode(vals).tolist(), as_ext(base_point)),
                 (F, base_vals, base_point, as_ext(base_vals), as_ext(base_point))]
        for G, v, r, ref_v, ref_r in cases:
            got = G.mle_eval(v, r)
            want = reference(ref_v, ref_r)
            if G is F:
                assert got.shape == () and int(F.decode(got)) == want[0]
            else:
                assert got.shape == (4,) and E.decode(got).tolist() == want
    # on the hypercube it is the value itself (point in {0, 1})
    vals = F.random(8, seed=1)
    for b in range(8):
        bits = F.encode([(b >> j) & 1 for j in range(3)])
        assert F.mle_eval(vals, bits) == vals[b]
    # words >= p read mod p, for every nv (nv = 0 runs no fold), into a new array
    for nv in (0, 1):
        raw = np.full(2**nv, F.p + 5, np.uint32)
        got = F.mle_eval(raw, F.zeros(nv))
        assert int(F.decode(got)) == F.decode(np.uint32(5)) and not np.shares_memory(got, raw)
        raw4 = np.tile(np.array([F.p, 2 * F.p, 2**32 - 1, 3], np.uint32), (2**nv, 1))
        got = F.ext.mle_eval(raw4, F.zeros(nv))
        assert got.tolist() == [0, 0, (2**32 - 1) % F.p, 3] and not np.shares_memory(got, raw4)
    with pytest.raises(ValueError, match="`values` must hold 2\\*\\*nv elements"):
        F.mle_eval(F.random(6, seed=1), F.random(3, seed=1))
    with pytest.raises(ValueError, match="`point` must hold nv = 3 base elements"):
        F.mle_eval(F.random(8, seed=1), F.random(2, seed=1))
    with pytest.raises(ValueError, match="an extension point needs F.ext.mle_eval"):
        F.mle_eval(F.random(8, seed=1), F.ext.random(3, seed=1))
    # one extension element as the values is 4 base values: the error says so
    # (a user review: it spoke of nv = 2 without saying why)
    with pytest.raises(ValueError, match=r"nv = 2 elements .*not shape \(0, 4\); `values` "
                                         r"of shape \(4,\) are 4 base values .*shape \(1, 4\)"):
        F.ext.mle_eval(F.ext.random((), seed=1), F.ext.random(0, seed=1))
    with pytest.raises(ValueError, match=r"not shape \(1, 4\)$"):  # no hint for 4 base values
        F.ext.mle_eval(F.random(8, seed=1), F.ext.random(1, seed=1))


def test_pickle_keeps_fields_and_their_constants():
    import pickle

    from zorch_nb.fields import PrimeField
    from zorch_nb.kernels.field_params import BABYBEAR

    for F in (KoalaBear, BabyBear, KoalaBear.ext):  # the module's fields stay singletons
        assert pickle.loads(pickle.dumps(F)) is F
    # a field built by the user keeps its own constants, even under a known name
    for name in ("Foo", "BabyBear"):
        mine = PrimeField(name, BABYBEAR)
        G = pickle.loads(pickle.dumps(mine))
        assert (G.name, G.p, G.ext.p) == (name, BabyBear.p, BabyBear.p)
        # and is the same field, by value (it compared unequal: a layer of it
        # that went through a pickle was refused as another field's)
        assert G == mine and hash(G) == hash(mine) and G.ext == mine.ext
        assert G != BabyBear or name == "BabyBear"
    assert KoalaBear != BabyBear and KoalaBear != KoalaBear.ext and KoalaBear.ext == KoalaBear.ext
    # only the shipped constants: the kernels rely on their checked invariants
    with pytest.raises(ValueError, match="`params`.* differs from the 'babybear' record in w, w_mont"):
        PrimeField("Mine", BABYBEAR._replace(w=5, w_mont=7))
    with pytest.raises(TypeError, match="FieldParams"):
        PrimeField("Mine", (BABYBEAR.p,))


def test_a_field_cannot_take_another_fields_name_or_be_extended_twice():
    """PrimeField("KoalaBear", BabyBear.params) printed as KoalaBear in every
    layer and graph and computed in BabyBear; ExtensionField(KoalaBear.ext)
    printed as a tower (".ext.ext") and was the same degree-4 field (a
    notebook user's review)."""
    from zorch_nb.fields import ExtensionField, PrimeField
    from zorch_nb.kernels.field_params import BABYBEAR
    for name in ("KoalaBear", "koalabear", "KOALABEAR"):
        with pytest.raises(ValueError, match=f"`name` is '{name}', a name of the 'koalabear' "
                                             f"field, but `params` are the 'babybear'"):
            PrimeField(name, BABYBEAR)
    for name in ("", None, b"Foo"):
        with pytest.raises(TypeError, match="`name` must be a non-empty str"):
            PrimeField(name, BABYBEAR)
    assert PrimeField("koalabear", KoalaBear.params).p == KoalaBear.p  # its own name: fine
    with pytest.raises(TypeError, match="an extension already: this is the only degree-4 "
                                        "extension of zorch_nb.KoalaBear, `zorch_nb.KoalaBear.ext`"):
        ExtensionField(KoalaBear.ext)
    with pytest.raises(TypeError, match="`base` must be a PrimeField .*; not int"):
        ExtensionField(3)
    assert ExtensionField(BabyBear) == BabyBear.ext


def test_a_base_mark_belongs_to_its_field():
    """KoalaBear.ext.as_base(w) given to BabyBear.ext read KoalaBear words as
    BabyBear ones: other values, no error."""
    from zorch_nb.fields import BaseOperand, PrimeField
    w, e = KoalaBear.random(3, seed=1), BabyBear.ext.random(3, seed=2)
    mark = KoalaBear.ext.as_base(w)
    assert repr(mark) == "BaseOperand(KoalaBear, shape=(3,))" and mark.field is KoalaBear
    for op in ("add", "sub", "mul", "div"):
        with pytest.raises(ValueError, match=r"`a` is marked as zorch_nb.KoalaBear words "
                                             r"\(zorch_nb.KoalaBear.ext.as_base\), but this is "
                                             r"zorch_nb.BabyBear.ext"):
            getattr(BabyBear.ext, op)(mark, e)
    with pytest.raises(ValueError, match="`b` is marked as zorch_nb.KoalaBear words"):
        BabyBear.ext.div(e, mark)
    # the same params under another name mean the same words
    alias = PrimeField("KB", KoalaBear.params)
    k = KoalaBear.ext.random(3, seed=3)
    assert np.array_equal(alias.ext.mul(mark, k), KoalaBear.ext.mul(KoalaBear.ext.as_base(w), k))
    # a mark made by hand records no field and is taken by either extension
    assert np.array_equal(BabyBear.ext.mul(BaseOperand(w), e),
                          BabyBear.ext.mul(BabyBear.ext.from_base(w), e))
    assert repr(BaseOperand(w)) == "BaseOperand(shape=(3,))"


def test_the_reload_hint_names_only_fields_of_another_import():
    """The hint is for a PrimeField / ExtensionField class of another import
    of zorch_nb.fields: never for this import's fields, nor for a class of
    the same name elsewhere."""
    from zorch_nb.fields import _stale_field_hint
    for F in (KoalaBear, BabyBear, KoalaBear.ext, BabyBear.ext, 3, None):
        assert _stale_field_hint(F) == "", F
    for name in ("PrimeField", "ExtensionField"):
        stale = type(name, (), {"__module__": "zorch_nb.fields"})()  # as a reload leaves it
        assert "a field of another import of zorch_nb.fields" in _stale_field_hint(stale), name
        elsewhere = type(name, (), {"__module__": __name__})()
        assert _stale_field_hint(elsewhere) == "", name
    from zorch_nb.fields import BaseOperand
    assert repr(BaseOperand([1, 2])) == "BaseOperand(shape=())"  # a repr never raises


def test_fields_are_immutable():
    """`KoalaBear.params = BabyBear.params` was accepted: "KoalaBear" then
    computed in BabyBear beside an extension still in KoalaBear, and its hash
    changed inside every dict holding it; a rename broke its pickling as the
    module's singleton."""
    import pickle
    h, want = hash(KoalaBear), KoalaBear.mul(KoalaBear.encode([5]), KoalaBear.encode([7]))
    for F in (KoalaBear, KoalaBear.ext):
        for name, value in (("params", BabyBear.params), ("name", "X"), ("ext", BabyBear.ext),
                            ("cache", {})):
            with pytest.raises(AttributeError, match="KoalaBear(.ext)? is immutable"):
                setattr(F, name, value)
        with pytest.raises(AttributeError, match="is immutable"):
            del F.params
    assert hash(KoalaBear) == h and KoalaBear.ext.p == KoalaBear.p == 2**31 - 2**24 + 1
    assert pickle.loads(pickle.dumps(KoalaBear)) is KoalaBear
    np.testing.assert_array_equal(
        KoalaBear.mul(KoalaBear.encode([5]), KoalaBear.encode([7])), want)


def test_numba_backend_without_a_gpu_is_a_clear_error():
    """No driver and no simulator: a ValueError naming `backend`, not Numba's own error."""
    import os
    import subprocess
    import sys
    from conftest import _has_nvidia_driver
    if _has_nvidia_driver():
        pytest.skip("a CUDA driver is present")
    code = ("from zorch_nb import KoalaBear as F\n"
            "a = F.random(4, seed=0)\n"
            "try:\n    F.add(a, a, backend='numba')\n"
            "except ValueError as e:\n    print('raised:', e)\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert "raised: Argument `backend`='numba' needs a CUDA GPU" in run.stdout, run.stderr


def test_gpu_array_without_cupy_says_which_extra(monkeypatch):
    """A CUDA-array-interface object without CuPy installed names the extra."""
    import sys
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here")
    except ImportError:
        pass

    class FakeDeviceArray:
        dtype = np.dtype(np.uint32)
        shape = (4,)
        ndim = 1
        size = 4
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<u4", "data": (0, False),
                                    "version": 3}

    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ImportError, match=r"zorch_nb\[cuda12\].*zorch_nb\[cuda13\]"):
        KoalaBear.add(FakeDeviceArray(), FakeDeviceArray())

    class TorchLike(FakeDeviceArray):  # a dtype NumPy cannot read: the interface's is used
        dtype = "torch.uint32"

    with pytest.raises(ImportError, match=r"zorch_nb\[cuda12\]"):
        KoalaBear.add(TorchLike(), TorchLike())
    wide = TorchLike()
    wide.__cuda_array_interface__ = dict(wide.__cuda_array_interface__, typestr="<i8")
    with pytest.raises(TypeError, match="`a` must have dtype uint32 .*not int64"):
        KoalaBear.add(wide, TorchLike())
    bare = types.SimpleNamespace(__cuda_array_interface__=FakeDeviceArray.__cuda_array_interface__)
    with pytest.raises(TypeError, match=r"`b` is a CUDA array without `.shape`; pass "
                                        r"`cupy.asarray\(b\)`"):
        KoalaBear.add(TorchLike(), bare)


@pytest.mark.gpu
@pytest.mark.parametrize("F", FIELDS)
def test_random_on_the_device_is_the_hosts(F):
    """random(xp=cupy) holds the host's elements for the seed, in CuPy."""
    import cupy
    for E, shape in ((F, (3, 5)), (F.ext, 7)):
        for xp in (cupy, "cupy"):
            got = E.random(shape, seed=4, xp=xp)
            assert isinstance(got, cupy.ndarray)
            np.testing.assert_array_equal(got.get(), E.random(shape, seed=4))


@pytest.mark.gpu
def test_mixed_modules_rejected():
    import cupy
    a = KoalaBear.random(4, seed=0)
    with pytest.raises(TypeError, match="different modules"):
        KoalaBear.add(a, cupy.asarray(a))


@pytest.mark.gpu
def test_a_device_exponent_is_refused_with_the_way_to_pass_it():
    """pow does not read a 0-d CuPy exponent (that would wait for the GPU
    unasked); its message says how to pass it."""
    import cupy
    a = cupy.asarray(KoalaBear.random(4, seed=0))
    with pytest.raises(TypeError, match=r"`e` must be an integer, not \w+; pass int\(e\) "
                                        r"\(reading a device array waits for the GPU\)$"):
        KoalaBear.pow(a, cupy.asarray(5))
    assert (KoalaBear.pow(a, 5).get() == KoalaBear.pow(a.get(), np.array(5))).all()


@pytest.mark.cudasim
def test_extension_ops_on_numba_device_arrays_name_what_is_missing():
    """(a cross-backend review) Extension inv, pow, sum, mle_fold, decode, ...
    of a Numba device array raised a bare IndexError under the simulator
    (its shapes refuse negative indices), where mul said CuPy is missing.
    With CuPy they run (a non-CuPy CUDA array goes through CuPy)."""
    from numba import cuda
    E = KoalaBear.ext
    host = E.random(8, seed=2)
    x, pt = cuda.to_device(host), cuda.to_device(E.random(3, seed=1))
    calls = {"inv": lambda: E.inv(x), "batch_inv": lambda: E.batch_inv(x),
             "div": lambda: E.div(x, x), "pow": lambda: E.pow(x, 3), "sum": lambda: E.sum(x),
             "mle_fold": lambda: E.mle_fold(x, E.one), "mle_eval": lambda: E.mle_eval(x, pt),
             "eq_table": lambda: E.eq_table(pt), "decode": lambda: E.decode(x),
             "is_canonical": lambda: E.is_canonical(x), "mul": lambda: E.mul(x, x)}
    try:
        import cupy
    except ImportError:
        cupy = None
    for name, call in calls.items():
        if cupy is None:
            with pytest.raises(ImportError, match="a GPU array was passed but CuPy is not "
                                                  "installed"):
                call()
        else:
            got = call()
            if name == "pow":
                assert (cupy.asnumpy(got) == E.pow(host, 3)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("F", FIELDS)
def test_gpu_numba_on_cupy_arrays_and_foreign_cuda_arrays(F, monkeypatch):
    """Numba-CUDA on CuPy arrays, and a non-CuPy CUDA array through the default path."""
    import cupy
    from numba import cuda

    from zorch_nb._backend import kernels_for

    def not_cupy(*args):
        raise AssertionError("backend='numba' ran CuPy's zero scan")
    for name in ("base_first_zero", "ext4_first_zero"):  # backend="numba": Numba's scans
        monkeypatch.setattr(kernels_for("cupy", "field"), name, not_cupy)
    for E in (F, F.ext):
        a, b = E.random(1000, seed=1), E.random(1000, seed=2)
        want = E.mul(a, b)
        da, db = cupy.asarray(a), cupy.asarray(b)
        got = E.mul(da, db, backend="numba")
        assert isinstance(got, cupy.ndarray) and (got.get() == want).all()
        na, nb = cuda.to_device(a), cuda.to_device(b)  # __cuda_array_interface__ only
        got = E.mul(na, nb)
        assert isinstance(got, cupy.ndarray) and (got.get() == want).all()
        assert (E.inv(da, backend="numba").get() == E.inv(a)).all()
        assert (E.pow(da, 2**40 + 1).get() == E.pow(a, 2**40 + 1)).all()
        a[7] = 0
        for call in (lambda: E.inv(cupy.asarray(a), backend="numba"),
                     lambda: E.pow(cupy.asarray(a), -3, backend="numba")):
            with pytest.raises(ValueError, match=r"index \(7,\) is zero"):
                call()


@pytest.mark.gpu
def test_gpu_numba_launches_follow_cupys_current_stream():
    """Under a non-blocking CuPy stream, a Numba launch on Numba's default stream
    was not ordered after the CuPy kernel producing its input (nor before the
    one reading its output): the launch goes on CuPy's current stream."""
    import cupy

    from zorch_nb._backend import kernels_for
    from zorch_nb.kernels import field_cuda_numba
    from zorch_nb.kernels.field_cuda_numba import stream_for
    from zorch_nb.logup_gkr import GkrLayer, layer_transition
    if SIMULATED:
        pytest.skip("the CUDA simulator has no external streams (cuda.external_stream raises)")
    F = KoalaBear
    a, b = F.random(1 << 24, seed=1), F.random(1 << 24, seed=2)
    want = F.add(F.mul(F.add(a, a), b), b)
    layer = GkrLayer(*(F.random(1 << 20, seed=k) for k in range(4)), 0)
    want_layer = layer_transition(layer)
    assert stream_for(a, b) == 0  # host data: Numba's default stream
    with cupy.cuda.Stream.null:
        assert stream_for(cupy.asarray(a)) == 0  # the legacy null stream: the same
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        da, db = cupy.asarray(a), cupy.asarray(b)
        handle = stream_for(da).handle  # the launch goes exactly on CuPy's stream
        assert (handle.value if hasattr(handle, "value") else int(handle)) == stream.ptr
        twice = F.add(da, da)                        # CuPy kernel on `stream`
        prod = F.mul(twice, db, backend="numba")     # must wait for it
        got = F.add(prod, db)                        # CuPy kernel reading the Numba output
        d_mles = [cupy.asarray(x) for x in layer.mles]
        d_layer = layer_transition(GkrLayer(*d_mles, 0), backend="numba")
        # CuPy inputs, host outputs: the copies back wait for the kernel on
        # `stream` (they went on Numba's default stream, which does not)
        host_outs = [np.zeros_like(x) for x in want_layer.mles]
        d_mles = [F.add(x, x) for x in d_mles]  # CuPy kernels on `stream`
        kernels_for("numba", "gkr").fold_dense(*d_mles, *host_outs, F.params)
        want_doubled = layer_transition(GkrLayer(*(F.add(x, x) for x in layer.mles), 0))
        for x, y in zip(want_doubled.mles, host_outs):
            np.testing.assert_array_equal(x, y)
        # the Numba zero scan reads what CuPy wrote on the stream (zeros, then
        # ones) and gives its answer back only when it has run there
        ones = cupy.zeros(1 << 24, np.uint32)
        cupy.add(ones, np.uint32(1), out=ones)
        assert field_cuda_numba.base_first_zero(ones, F.params) == -1
    stream.synchronize()
    assert (got.get() == want).all()
    for x, y in zip(want_layer.mles, d_layer.mles):
        np.testing.assert_array_equal(x, y.get())


@pytest.mark.gpu
def test_gpu_large_arrays_all_backends_agree():
    import cupy
    for F in (KoalaBear, BabyBear):
        for E in (F, F.ext):
            a, b = E.random(1 << 20, seed=3), E.random(1 << 20, seed=4)
            da, db = cupy.asarray(a), cupy.asarray(b)
            for op in ("add", "sub", "mul"):
                want = getattr(E, op)(a, b)
                assert (getattr(E, op)(da, db).get() == want).all()
                assert (getattr(E, op)(da, db, backend="numba").get() == want).all()
            for op in ("neg", "square", "inv", "batch_inv"):
                want = getattr(E, op)(a)
                assert (getattr(E, op)(da).get() == want).all()
                assert (getattr(E, op)(da, backend="numba").get() == want).all()


@pytest.mark.gpu
@pytest.mark.parametrize("F", FIELDS)
def test_gpu_chunked_field_passes_match_the_host(F, monkeypatch):
    """Zero checks, sums, encode/decode, negative powers and mle_eval over many
    device chunks (of 64 words here) give the host's results and errors."""
    import cupy
    import zorch_nb.fields as fields_mod
    monkeypatch.setattr(fields_mod, "_CHUNK_WORDS", {"numpy": 64, "cupy": 64})
    monkeypatch.setattr(fields_mod, "_MAX_CHUNKS", 10**9)
    E = F.ext
    a, x = F.random((40, 33), seed=1), E.random(300, seed=2)
    a[a == 0] = 1
    x[(x == 0).all(axis=-1)] = 1
    for G, h in ((F, a), (E, x)):
        d = cupy.asarray(h)
        for op in ("inv", "batch_inv", "decode", "sum"):
            assert (to_host(getattr(G, op)(d)) == getattr(G, op)(h)).all(), op
        assert (to_host(G.pow(d, -3)) == G.pow(h, -3)).all()
        assert (to_host(G.sum(d, axis=0)) == G.sum(h, axis=0)).all()
        assert G.is_canonical(d)
    ints = np.arange(-50, 2000).reshape(50, 41)
    assert (to_host(F.encode(cupy.asarray(ints), reduce=True)) == F.encode(ints, reduce=True)).all()
    with pytest.raises(ValueError, match=r"must lie in \[0, p="):
        F.encode(cupy.asarray(ints))
    late = np.arange(2050).reshape(50, 41)
    late[37, 6] = F.p  # a strided view takes the ops' path: it names the value as the host does
    with pytest.raises(ValueError, match=r"but ints\[37, 3\] = \d+; pass reduce=True"):
        F.encode(late[:, ::2])
    with pytest.raises(ValueError, match=r"but ints\[37, 3\] = \d+; pass reduce=True"):
        F.encode(cupy.asarray(late)[:, ::2])
    vals, point = E.random(1024, seed=3), E.random(10, seed=4)
    for v in (vals, a.reshape(-1)[:1024]):
        got = E.mle_eval(cupy.asarray(v), cupy.asarray(point))
        assert (to_host(got) == E.mle_eval(v, point)).all()
    a[37, 5] = F.p  # a zero word in a late chunk
    with pytest.raises(ValueError, match=r"index \(37, 5\) is zero"):
        F.inv(cupy.asarray(a))
    with pytest.raises(ValueError, match="holds values >= p"):
        F.decode(cupy.asarray(a))
    assert not F.is_canonical(cupy.asarray(a))


@pytest.mark.parametrize("F", FIELDS)
def test_scalars_zero_d_and_empty(F):
    p = F.p
    s = F.encode(5)
    assert s.shape == () and s.dtype == np.uint32
    assert int(F.decode(F.mul(s, s))) == 25
    assert int(F.decode(F.mul(s[()], s[()]))) == 25  # NumPy scalar operands
    assert int(F.decode(F.inv(s))) == pow(5, -1, p)
    # NumPy scalars decode on the host, to 0-d arrays (uint32 * np.uint32: NumPy 1.x
    # made a Python 0 turn the product into int64)
    for one in (F.one, s[()] * np.uint32(0) + F.one):
        got = F.decode(one)
        assert isinstance(got, np.ndarray) and got.shape == () and int(got) == 1
    e = np.zeros(0, dtype=np.uint32)
    assert F.mul(e, e).shape == (0,) and F.batch_inv(e).shape == (0,)
    assert F.ext.mul(np.zeros((0, 4), np.uint32), e).shape == (0, 4)
    assert F.random((2, 0)).shape == (2, 0)
    assert F.ext.decode(F.ext.mul(F.ext.encode([1, 2, 3, 4]), F.encode(2))).tolist() == [2, 4, 6, 8]


@pytest.mark.parametrize("F", FIELDS)
def test_random_is_one_draw_without_its_int64_copy(F):
    """random draws and encodes a chunk at a time (a whole-shape int64 draw
    was twice the result's memory beside it); its values stay those of one
    ``integers(0, p, dtype=int64)`` draw of the coefficients in C order, for
    any bit generator (each keeps its spare 32 bits between calls)."""
    from peak_memory import peak_bytes
    p = naive.P[F.name]
    # 17 chunks of 2**16 values, the last of 3; 3 chunks in plain Python
    # (NUMBA_DISABLE_JIT=1, where 2**20 encodes took 280 s of a CI stage)
    n = (1 << (17 if numba.config.DISABLE_JIT else 20)) + 3
    for seed in (11, np.random.Generator(np.random.MT19937(4)),
                 np.random.Generator(np.random.SFC64(4))):
        want = np.random.default_rng(copy.deepcopy(seed)).integers(0, p, n, dtype=np.int64)
        got = F.random(n, seed=seed)
        assert got.shape == (n,) and [naive.dec(int(w), p) for w in got[-5:]] == \
            want[-5:].tolist()
        np.testing.assert_array_equal(got, F.encode(want))
    want = np.random.default_rng(5).integers(0, p, (n // 4, 4), dtype=np.int64)
    np.testing.assert_array_equal(F.ext.random(n // 4, seed=5), F.ext.encode(want))
    if numba.config.DISABLE_JIT:
        return  # what random allocates does not depend on the JIT (checked compiled)
    peak, got = peak_bytes(lambda: F.random(1 << 20, seed=1))
    assert peak < 1.5 * got.nbytes, peak  # was 3x: the int64 draw beside the words


@pytest.mark.parametrize("F", FIELDS)
def test_from_base_resolves_trailing_four_ambiguity(F):
    E = F.ext
    base = F.random(4, seed=9)  # a base array whose last axis is 4
    emb = E.from_base(base)
    assert emb.shape == (4, 4) and (emb[:, 0] == base).all() and not emb[:, 1:].any()
    alpha = E.random(1, seed=10)
    got = E.sub(alpha, emb)
    want = [naive.ext_sub([naive.dec(int(v), F.p) for v in alpha[0]],
                          [naive.dec(int(b), F.p), 0, 0, 0], F.p) for b in base]
    assert E.decode(got).tolist() == want
    assert E.from_base(F.encode(3)).shape == (4,)


def test_numba_backend_without_numba_cuda_says_which_extra(monkeypatch):
    import sys
    monkeypatch.delitem(sys.modules, "zorch_nb.kernels.field_cuda_numba", raising=False)
    import numba
    monkeypatch.setitem(sys.modules, "numba.cuda", None)  # import numba.cuda -> ImportError
    monkeypatch.delattr(numba, "cuda", raising=False)
    a = KoalaBear.random(4, seed=0)
    with pytest.raises(ImportError, match=r"numba-cuda.*zorch_nb\[cuda12\].*zorch_nb\[cuda13\]"):
        KoalaBear.add(a, a, backend="numba")


@pytest.mark.parametrize("F", FIELDS)
def test_out_overlapping_an_input_gives_the_same_result(F):
    for E in (F, F.ext):
        buf = E.random(4097, seed=4)  # long enough that SIMD blocks cannot hide the hazard
        want = E.mul(buf[:-1].copy(), buf[:-1].copy())
        got = E.mul(buf[:-1], buf[:-1], out=buf[1:])  # shifted overlap: read-after-write hazard
        assert got is not None and (buf[1:] == want).all()
        strided = np.zeros((16,) + buf.shape[1:], dtype=np.uint32)[::2]  # non-contiguous out
        a, b = E.random(8, seed=5), E.random(8, seed=6)
        E.add(a, b, out=strided)
        assert (strided == E.add(a, b)).all()


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("F", FIELDS)
def test_out_may_be_an_ndarray_subclass(F, tmp_path):
    """np.matrix and np.memmap as ``out``: written in place and handed back.
    (np.matrix.reshape(-1) stays 2-d; the kernels, which flatten, wrote every
    element from the first one, or failed to type.)"""
    E = F.ext
    a, b = F.random((3, 4), seed=1), F.random((3, 4), seed=2)
    x, y = E.random(3, seed=3), E.random(3, seed=4)
    calls = [lambda o: F.mul(a, b, out=o), lambda o: F.add(a, b, out=o),
             lambda o: F.neg(a, out=o), lambda o: F.square(a, out=o),
             lambda o: F.mul(a, a[0], out=o), lambda o: F.pow(a, 3, out=o),
             lambda o: F.pow(a, -3, out=o), lambda o: F.inv(a, out=o),
             lambda o: F.batch_inv(a, out=o), lambda o: E.mul(x, y, out=o),
             lambda o: E.add(x, a[:, 0], out=o), lambda o: E.inv(x, out=o)]
    for i, call in enumerate(calls):
        want = call(None)
        mapped = np.memmap(tmp_path / f"out{i}", dtype=np.uint32, mode="w+", shape=want.shape)
        for out in (np.matrix(np.zeros(want.shape, np.uint32)), mapped):
            got = call(out)
            assert got is out, i
            assert np.array_equal(np.asarray(out), want), i


def test_device_of_reads_the_memory_pointer_id_or_falls_back(monkeypatch):
    """device_of prefers the int id on CuPy's memory pointer (no Device object per
    call) and falls back to ``x.device.id`` where the pointer has none."""
    import sys
    import types

    from zorch_nb import _backend

    class CupyLike:  # array_kind() reads a cupy.* module as a CuPy array
        __module__ = "cupy._fake"

        def __init__(self, data, device):
            self.data, self.device = data, device
    with_id = CupyLike(types.SimpleNamespace(device_id=3), types.SimpleNamespace(id=9))
    without = CupyLike(types.SimpleNamespace(), types.SimpleNamespace(id=2))
    assert _backend.device_of(with_id) == 3
    assert _backend.device_of(without) == 2
    assert _backend.device_of(np.zeros(2)) is None
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))  # resolve needs one
    with pytest.raises(ValueError, match="different devices"):
        _backend.resolve({"a": with_id, "b": without}, None)


def test_foreign_cuda_arrays_are_placed_by_their_pointer(monkeypatch):
    """A __cuda_array_interface__ array (a Numba or PyTorch device array) names
    no device: resolve asks the runtime where its pointer lives, refuses one off
    the current device or beside another device's array, and takes one it
    cannot place (a null pointer, a runtime that does not say) as it is."""
    import sys
    import types

    from zorch_nb import _backend

    class Foreign:
        def __init__(self, ptr):
            self.__cuda_array_interface__ = {"shape": (2,), "typestr": "<u4", "data": (ptr, False),
                                             "version": 3}
    where = {0x1000: 1, 0x2000: 0}

    def attributes(ptr):
        if ptr not in where:
            raise RuntimeError("cudaErrorInvalidValue")
        return types.SimpleNamespace(device=where[ptr])
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDevice=lambda: 0, pointerGetAttributes=attributes))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    on1, on0, unknown, empty = Foreign(0x1000), Foreign(0x2000), Foreign(0x3000), Foreign(0)
    with pytest.raises(ValueError, match="`x` lives on GPU 1 but the current device is GPU 0"):
        _backend.resolve({"x": on1}, None)
    with pytest.raises(ValueError, match="different devices .*`x` on device 0, `y` on device 1"):
        _backend.resolve({"x": on0, "y": on1}, None)
    for ok in ({"x": on0}, {"x": on0, "y": unknown}, {"x": empty}):
        assert _backend.resolve(ok, None) == ("cupy", "cupy")
    assert _backend.resolve({"x": on1}, None, current=False) == ("cupy", "cupy")


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint32])
def test_encode_decode_kernels_match_big_ints_in_every_dtype(F, dtype, monkeypatch):
    """encode/decode run a CPU kernel over int64 (one Montgomery product or
    reduction per value) in blocks; every dtype, reduce=True over values out
    of range, the error's index in a later block and a later kernel chunk."""
    import zorch_nb.fields as fields
    p = F.p
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    if numba.config.DISABLE_JIT:  # plain Python (a CI stage): the same blocks, 16x smaller
        monkeypatch.setitem(fields._CHUNK_WORDS, "numpy", 2**12)
    n = fields._CHUNK_WORDS["numpy"] + 4465  # more than one kernel chunk (70001 compiled)
    vals = rng.integers(max(info.min, -2**40), min(info.max, 2**40), size=n,
                        dtype=np.int64, endpoint=True).astype(dtype)
    vals[:4] = [0, 1, min(info.max, p - 1), info.max]
    big = [int(v) for v in vals]
    want = [v % p * 2**32 % p for v in big]
    for chunk in (None, 4099):  # whole array, and many blocks
        if chunk:
            monkeypatch.setattr(fields, "_chunk_words", lambda *a, **k: chunk)
        words = F.encode(vals, reduce=True)
        assert words.dtype == np.uint32 and words.tolist() == want
        assert F.decode(words).tolist() == [v % p for v in big]
        inside = vals[(vals >= 0) & (vals < p)]
        assert F.encode(inside).tolist() == [v * 2**32 % p for v in map(int, inside)]
    grid = vals[:n // 100 * 100].reshape(-1, 100)
    for view in (grid.T, grid[::3, ::2], np.asfortranarray(grid)):  # other layouts
        got = F.encode(view, reduce=True)
        assert got.shape == view.shape
        assert got.tolist() == [[int(v) % p * 2**32 % p for v in row] for row in view]
        assert F.decode(got).tolist() == [[int(v) % p for v in row] for row in view]
        assert F.decode(got.T).tolist() == [[int(v) % p for v in row] for row in view.T]
    bad = np.zeros(n, dtype=dtype)
    bad[n - 3] = info.max if info.max >= p else (info.min if info.min < 0 else 0)
    if bad[n - 3] != 0:
        with pytest.raises(ValueError, match=rf"ints\[{n - 3}\] = {bad[n - 3]}"):
            F.encode(bad)
    w = F.encode(np.arange(n) % p)
    w[n - 2] = p  # non-canonical, in the last block and the second kernel chunk
    with pytest.raises(ValueError, match="canonical"):
        F.decode(w)


@pytest.mark.parametrize("F", FIELDS)
def test_extension_sum_of_large_blocks_matches_big_ints(F, monkeypatch):
    """A full reduction of a C-ordered extension block (>= 1024 words) sums
    rows of 256 words, then folds them to the coefficients: against big ints
    for a count of elements that is no multiple of 64, in one block and in
    many, with slots reduced mod p in between."""
    import zorch_nb.fields as fields_mod
    rng = np.random.default_rng(9)
    ext = rng.integers(0, 2**32, size=(300, 7, 4), dtype=np.uint64).astype(np.uint32)
    flat = [[int(w) % F.p for w in row] for row in ext.reshape(-1, 4)]
    want = [naive.dec(sum(col) % F.p, F.p) for col in zip(*flat)]
    for chunk, exact in ((None, 2**32), (5000, 2**32), (5000, 700)):
        if chunk:
            monkeypatch.setattr(fields_mod, "_chunk_words", lambda *a, **k: chunk)
        monkeypatch.setattr(fields_mod, "_SUM_EXACT", exact)
        for axis in (None, (0, 1), (1, 0)):
            got = F.ext.sum(ext, axis=axis)
            assert got.shape == (4,) and F.ext.decode(got).tolist() == want
        got = F.ext.sum(ext, axis=None, keepdims=True)
        assert got.shape == (1, 1, 4) and F.ext.decode(got).reshape(-1).tolist() == want


def test_elementwise_docstrings_state_their_parameters():
    """help(F.mul) was one line: no operands, ``out`` or ``backend``."""
    from zorch_nb import KoalaBear as F
    for method in (F.add, F.sub, F.mul, F.div, F.neg, F.square, F.inv, F.ext.mul):
        doc = method.__doc__
        for part in ("Parameters", "out : uint32 array", "backend : {None", "Returns"):
            assert part in doc, (method.__name__, part)


@pytest.mark.parametrize("F", FIELDS)
def test_pow_out_overlapping_its_operand_gives_the_same_result(F):
    """pow's kernels assume no aliasing: an ``out`` overlapping ``a`` shifted
    by one element goes through a temporary, as the elementwise ops' does."""
    p, w = F.p, F.W
    for E, e in ((F, 5), (F.ext, 3)):
        buf = E.random(1025, seed=9)
        vals = [naive.dec(int(v), p) for v in buf[:-1].reshape(-1)]
        if E is F:
            want = [naive.enc(pow(v, e, p), p) for v in vals]
        else:
            want = [naive.enc(c, p) for i in range(0, len(vals), 4)
                    for c in naive.ext_pow(vals[i:i + 4], e, p, w)]
        got = E.pow(buf[:-1], e, out=buf[1:])
        assert got.reshape(-1).tolist() == want and buf[1:].reshape(-1).tolist() == want


@pytest.mark.parametrize("F", FIELDS)
def test_pow_exponents_past_64_bits_against_big_ints(F):
    """The kernels take the reduced exponent as two 64-bit limbs: every bit of
    the low limb (bit 63 too) and the high limb count."""
    p, w = F.p, F.W
    vals = sample(F, 20, seed=3, ext=True)
    x = words(F, vals)
    for e in (2**63, 2**63 + 3, 2**64 - 1, 2**100 + 2**63 + 7, -(2**63 + 1)):
        got = F.ext.pow(x, e) if e > 0 else F.ext.pow(x[np.any(vals != 0, axis=1)], e)
        rows = [[int(v) for v in r] for r in vals if e > 0 or any(r)]
        want = [[naive.enc(c, p) for c in (naive.ext_pow(r, e, p, w) if e > 0 else
                                           naive.ext_pow(naive.ext_inv(r, p, w), -e, p, w))]
                for r in rows]
        assert got.tolist() == want, e
        base = F.pow(x[:, 0], e) if e > 0 else None
        if base is not None:
            assert base.tolist() == [naive.enc(pow(int(r[0]), e, p), p) for r in vals], e


@pytest.mark.parametrize("F", FIELDS)
def test_sum_takes_every_negative_axis(F):
    """``axis=-ndim`` is the first axis, as in NumPy (not an error)."""
    vals = sample(F, 15, seed=5).reshape(3, 5)
    a = words(F, vals.reshape(-1)).reshape(3, 5)
    for axis in (-2, -1, (-2, -1), (-1, -2)):
        got = F.sum(a, axis=axis)
        want = np.asarray(vals.sum(axis=axis) % F.p).reshape(-1)
        assert F.decode(got).reshape(-1).tolist() == want.tolist(), axis
    x = F.ext.random((2, 3), seed=1)
    assert (F.ext.sum(x, axis=-2) == F.ext.sum(x, axis=0)).all()
    with pytest.raises(ValueError, match="`axis` must name distinct element axes"):
        F.sum(a, axis=-3)


@pytest.mark.parametrize("F", FIELDS)
def test_encode_refuses_p_and_bools_on_every_input_path(F):
    """Integers outside [0, p) are refused, naming the first, on the NumPy
    paths too (uint64, strided, beyond int64), not only in the kernel's; bool
    arrays are not integers."""
    p = F.p
    with pytest.raises(ValueError, match=rf"ints\[1\] = {p};"):
        F.encode(np.array([p - 1, p, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(ValueError, match=rf"ints\[1, 0\] = {p};"):
        F.encode(np.array([[1, p], [2, 3]], dtype=np.int64).T)  # strided: the NumPy path
    with pytest.raises(ValueError, match=rf"ints\[0\] = {p};"):
        F.encode([p, 2**70])  # beyond int64: object values
    assert F.decode(F.encode(np.array([p - 1, 0], dtype=np.uint64))).tolist() == [p - 1, 0]
    for bools in (np.array([True, False]), np.zeros((2, 4), dtype=bool)):
        with pytest.raises(TypeError, match="`ints` must hold integers, not bool"):
            (F if bools.ndim == 1 else F.ext).encode(bools)


def test_read_only_or_repeating_out_is_refused_before_any_work():
    """A read-only ``out`` is refused by the field layer on the paths that
    write it through a temporary too (strided, ``sum``), and a view
    repeating one word twice as much as four times."""
    F = KoalaBear
    a = F.random((4, 2), seed=0)
    strided = np.zeros(16, np.uint32)[::2].reshape(4, 2)
    contiguous = np.zeros(2, np.uint32)
    for ro in (strided, contiguous):
        ro.flags.writeable = False
    with pytest.raises(ValueError, match="`out` must be writeable"):
        F.mul(a, a, out=strided)
    with pytest.raises(ValueError, match="`out` must be writeable"):
        F.sum(a, axis=0, out=contiguous)
    with pytest.raises(ValueError, match="`out` must be writeable"):
        F.pow(a, -1, out=strided)
    word = np.zeros(1, np.uint32)
    for shape, strides in (((2,), (0,)), ((2, 2), (0, 0)), ((2, 1), (0, 4))):
        repeating = np.lib.stride_tricks.as_strided(word, shape, strides)
        with pytest.raises(ValueError, match="`out` must be writeable .* broadcast view"):
            F.add(F.random(shape, seed=1), F.random(shape, seed=2), out=repeating)
    assert word[0] == 0


@pytest.mark.parametrize("F", FIELDS)
def test_extension_ops_refuse_zero_d_words_naming_the_trailing_axis(F):
    """A 0-d array or NumPy scalar is no extension element: a ValueError
    naming the trailing axis of 4, not an IndexError from ``shape[-1]``."""
    E = F.ext
    calls = {"neg": lambda w: E.neg(w), "inv": lambda w: E.inv(w),
             "batch_inv": lambda w: E.batch_inv(w), "pow": lambda w: E.pow(w, 3),
             "pow<0": lambda w: E.pow(w, -1), "sum": lambda w: E.sum(w),
             "decode": lambda w: E.decode(w), "is_canonical": lambda w: E.is_canonical(w)}
    for w in (np.array(F.one), F.one):
        for name, call in calls.items():
            with pytest.raises(ValueError, match="trailing axis of length 4"):
                call(w)
    with pytest.raises(ValueError, match="`ints` must have a trailing axis of length 4"):
        E.encode(5)
