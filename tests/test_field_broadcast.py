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
