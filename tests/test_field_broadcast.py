"""Binary field ops with a one-element operand or a base operand under an
extension op: the broadcast kernels (``*_map2_bcast``), which read such an
operand in place instead of copying it to the full size.  Checked against
Python big ints (tests/naive.py) on every backend, with words >= p (read mod
p), on both sides of every op, and for their memory."""
import itertools

import numba
import numpy as np
import pytest

from conftest import BACKENDS, to_backend, to_host
import naive
from peak_memory import peak_bytes
from zorch_nb import BabyBear, KoalaBear

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
OPS = {"add": lambda x, y, p, w: naive.ext_add(x, y, p),
       "sub": lambda x, y, p, w: naive.ext_sub(x, y, p),
       "mul": lambda x, y, p, w: naive.ext_mul(x, y, p, w)}


def raw_words(rng, shape):
    """Any uint32 words, a quarter of them >= p (the kernels read words mod p)."""
    w = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    edges = [2**32 - 1, 0, 2130706433]  # above both p, zero, KoalaBear's p
    w.reshape(-1)[:3] = edges[:min(3, w.size)]
    return w


def elements(F, w, deg):
    """Big-int extension elements of words ``w`` (base words embedded)."""
    vals = [naive.dec(int(v) % F.p, F.p) for v in w.reshape(-1)]
    if deg == 1:
        return [[v, 0, 0, 0] for v in vals]
    return [vals[i:i + 4] for i in range(0, len(vals), 4)]


# (shape of a's elements, degree of a), same for b; n elements in the result
def forms(n):
    return [((n,), 4), ((), 4), ((n,), 1), ((), 1), ((1,), 4), ((1,), 1)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_extension_forms_match_big_ints(F, backend):
    E = F.ext
    p, w = F.p, F.W
    n = 9 if backend == "numba" else 37
    rng = np.random.default_rng(11)
    for (sa, da), (sb, db) in itertools.product(forms(n), repeat=2):
        if sa != (n,) and sb != (n,):
            continue  # one-element results take the plain kernels
        a_h = raw_words(rng, sa + ((4,) if da == 4 else ()))
        b_h = raw_words(rng, sb + ((4,) if db == 4 else ()))
        a0, b0 = a_h.copy(), b_h.copy()
        a, b = to_backend(a_h, backend), to_backend(b_h, backend)
        xa = elements(F, a_h, da) * (n if a_h.size <= 4 else 1)
        xb = elements(F, b_h, db) * (n if b_h.size <= 4 else 1)
        for name, ref in OPS.items():
            got = to_host(getattr(E, name)(a, b, backend=backend))
            assert got.shape == (n, 4), (name, sa, da, sb, db)
            want = [ref(x, y, p, w) for x, y in zip(xa, xb)]
            assert [[naive.dec(int(v), p) for v in row] for row in got] == want, \
                (name, sa, da, sb, db)
            assert (got < p).all()
        assert (to_host(a) == a0).all() and (to_host(b) == b0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_base_scalar_operand_matches_big_ints(F, backend):
    p = F.p
    n = 9 if backend == "numba" else 53
    rng = np.random.default_rng(12)
    ref = {"add": lambda x, y: (x + y) % p, "sub": lambda x, y: (x - y) % p,
           "mul": lambda x, y: x * y % p}
    # one-element operands, and a general broadcast (copied, plain kernels)
    for sa, sb in (((n,), ()), ((), (n,)), ((n,), (1,)), ((1,), (3, 5)), ((3, 1), (1, 5))):
        a_h, b_h = raw_words(rng, sa), raw_words(rng, sb)
        shape = np.broadcast_shapes(sa, sb)
        a, b = to_backend(a_h, backend), to_backend(b_h, backend)
        xa = np.broadcast_to(a_h, shape).reshape(-1)
        xb = np.broadcast_to(b_h, shape).reshape(-1)
        for name, f in ref.items():
            got = to_host(getattr(F, name)(a, b, backend=backend))
            assert got.shape == shape
            want = [f(naive.dec(int(x) % p, p), naive.dec(int(y) % p, p))
                    for x, y in zip(xa, xb)]
            assert [naive.dec(int(v), p) for v in got.reshape(-1)] == want, (name, sa, sb)


@pytest.mark.parametrize("F", FIELDS)
def test_out_may_be_the_full_operand(F):
    """``E.mul(x, r, out=x)`` and ``E.add(s, x, out=x)`` (s base) write over
    the operand they read; elementwise, so the result is the same."""
    E = F.ext
    x = E.random(64, seed=1)
    r, s = E.random((), seed=2), F.random(64, seed=3)
    for f, args in ((E.mul, (x, r)), (E.add, (s, x)), (E.sub, (x, s))):
        want = f(*args)
        y = x.copy()
        args = tuple(y if a is x else a for a in args)
        assert f(*args, out=y) is y and (y == want).all()


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="what the object layer allocates is "
                    "the same either way; in plain Python these sizes take 40 s a field")
@pytest.mark.parametrize("F", FIELDS)
def test_no_full_size_copy_of_the_broadcast_operand(F):
    """Peak memory is the output alone (it was output + a full-size copy of
    the one-element operand, and 4x the base operand for its embedding)."""
    E = F.ext
    n = 1 << 16
    x, r, s = E.random(n, seed=1), E.random((), seed=2), F.random(n, seed=3)
    a, one = F.random(n, seed=4), F.one
    for fn, out_bytes in ((lambda: E.mul(x, r), 16 * n), (lambda: E.mul(s, x), 16 * n),
                          (lambda: E.mul(r, s), 16 * n), (lambda: F.mul(a, one), 4 * n)):
        peak, _ = peak_bytes(fn)
        assert peak <= out_bytes + 65536, (peak, out_bytes)  # a full-size copy: 4x+ more


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_broadcast_to_views_match_big_ints(F, backend):
    """Operands made by ``broadcast_to`` (stride-0 axes) are read as what they
    repeat: a repeated row, column or element, an extension element whose
    coefficients are one repeated word (its own axis stays), and two
    one-element views, against big ints of the materialized operands."""
    E = F.ext
    p, w = F.p, F.W
    rng = np.random.default_rng(13)
    xp = np if backend != "cupy" else __import__("cupy")
    rows, cols = (3, 5) if backend == "numba" else (5, 70)
    shape = (rows, cols)
    row, col, one = raw_words(rng, (cols,)), raw_words(rng, (rows, 1)), raw_words(rng, ())
    full, ext = (to_backend(raw_words(rng, s), backend) for s in (shape, shape + (4,)))
    coef, erow = raw_words(rng, shape + (1,)), raw_words(rng, (cols, 4))
    bc = lambda x, s: xp.broadcast_to(to_backend(x, backend), s)  # noqa: E731
    base_pairs = [(bc(row, shape), full), (full, bc(row, shape)), (bc(col, shape), bc(row, shape)),
                  (bc(one, shape), bc(one, shape)), (bc(one, shape), full)]
    ext_pairs = [(bc(erow, shape + (4,)), ext), (ext, bc(coef, shape + (4,))),
                 (bc(row, shape), bc(erow, shape + (4,))), (bc(one, shape), ext),
                 (bc(erow[0], shape + (4,)), bc(erow[1], shape + (4,)))]
    for field, pairs in ((F, base_pairs), (E, ext_pairs)):
        for i, (a, b) in enumerate(pairs):
            ha, hb = (np.ascontiguousarray(to_host(x)) for x in (a, b))
            da, db = (4 if field is E and x.shape[-1:] == (4,) and x.ndim == 3 else 1
                      for x in (ha, hb))
            xa, xb = elements(F, ha, da), elements(F, hb, db)
            for name, ref in OPS.items():
                got = to_host(getattr(field, name)(a, b, backend=backend))
                if field is F:
                    want = [ref(x, y, p, w)[0] for x, y in zip(xa, xb)]
                    assert got.shape == shape, (name, i)
                    assert [naive.dec(int(v), p) for v in got.reshape(-1)] == want, (name, i)
                else:
                    want = [ref(x, y, p, w) for x, y in zip(xa, xb)]
                    assert got.shape == shape + (4,), (name, i)
                    assert [[naive.dec(int(v), p) for v in r] for r in got.reshape(-1, 4)] \
                        == want, (name, i)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="what the object layer allocates is "
                    "the same either way; in plain Python these sizes take 40 s a field")
@pytest.mark.parametrize("F", FIELDS)
def test_broadcast_to_views_are_not_copied(F):
    """``F.mul(broadcast_to(r, (n,)), a)`` made a full-size copy of the view
    beside the result; now the peak is the result alone.  And the sizes of
    two broadcast views are refused before anything is copied (8 GiB were)."""
    E = F.ext
    n = 1 << 16
    a, x = F.random(n, seed=1), E.random(n, seed=2)
    r, s = E.random((), seed=3), F.random((), seed=4)
    for fn, out_bytes in ((lambda: F.mul(np.broadcast_to(s, (n,)), a), 4 * n),
                          (lambda: E.mul(x, np.broadcast_to(r, (n, 4))), 16 * n),
                          (lambda: E.mul(np.broadcast_to(x[:1], (n, 4)), x), 16 * n),
                          (lambda: E.add(np.broadcast_to(s, (n,)), x), 16 * n)):
        peak, _ = peak_bytes(fn)
        assert peak <= out_bytes + 65536, (peak, out_bytes)
    big = (np.broadcast_to(s, (2**31, 1)), np.broadcast_to(s, (1, 2**31)))
    peak, _ = peak_bytes(lambda: pytest.raises(ValueError, F.add, *big))
    assert peak < 65536, peak


@pytest.mark.parametrize("F", FIELDS)
def test_extension_operand_repeating_along_its_coefficients(F):
    """An extension operand broadcast along its own coefficient axis (stride 0
    there: ``broadcast_to(w[:, None], (n, 4))`` is the elements (w, w, w, w))
    keeps that axis: only element axes are cut to the words they repeat."""
    E, rng = F.ext, np.random.default_rng(11)
    w, y = raw_words(rng, (70,)), raw_words(rng, (70, 4))
    ey = elements(F, y, 4)
    for x in (np.broadcast_to(w[:, None], (70, 4)), np.broadcast_to(w[:1, None], (70, 4))):
        ex = elements(F, np.ascontiguousarray(x), 4)
        for name, ref in OPS.items():
            for got, pairs in ((getattr(E, name)(x, y), zip(ex, ey)),
                               (getattr(E, name)(y, x), zip(ey, ex))):
                want = [naive.enc(c, F.p) for u, v in pairs for c in ref(u, v, F.p, F.W)]
                assert got.reshape(-1).tolist() == want, name
