"""Broadcasts read in runs: rows and columns of an outer product
(``a[:, None]`` op ``b[None, :]``), a row repeated under a full operand, a
column beside one.  The broadcast kernels read operand element
``(i // run) * row + (i % run) * step`` for output element ``i``
(``fields._broadcast_runs`` plans it), so no operand is copied to the full
shape.  The plan is checked against ``np.broadcast_to`` index by index; the
results against Python big ints on every backend, for base and extension
operands on both sides, words >= p, and the memory they take."""
import itertools
import math

import numpy as np
import pytest

from conftest import BACKENDS, to_backend, to_host
import naive
from peak_memory import peak_bytes
from test_field_broadcast import elements, raw_words
from zorch_nb import BabyBear, KoalaBear, fields

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]

# (element shape of a, element shape of b): every pair broadcasts (no element
# shape ends in 4: under an extension op that axis would be the coefficients)
PAIRS = [((3, 1), (1, 5)), ((3, 1), (5,)), ((1, 5), (3, 1)), ((3, 5), (3, 1)), ((3, 1), (3, 5)),
         ((3, 5), (5,)), ((1, 5), (3, 5)), ((2, 1, 1), (1, 3, 6)), ((2, 3, 6), (2, 1, 1)),
         ((2, 3, 6), (3, 6)), ((2, 1, 6), (1, 3, 1)), ((3, 1, 5), (1, 4, 1)), ((1, 1), (3, 5)),
         ((2, 3, 1), (2, 3, 5)), ((4, 1, 3), (4, 2, 3))]


@pytest.mark.parametrize("ea, eb", PAIRS + [((7,), ()), ((), (7,)), ((1, 1), (1, 1)),
                                             ((2, 1), (2, 3)), ((1,), (6,)), ((0, 1), (1, 3))])
def test_run_plan_reads_what_broadcast_to_reads(ea, eb):
    shape = np.broadcast_shapes(ea, eb)
    plan = fields._broadcast_runs(shape, [ea, eb])
    if plan is None:  # then no split of the axes works for both operands
        return
    run, steps_rows = plan
    n = math.prod(shape)
    assert run >= 1 and n % run == 0
    assert any(step for step, _ in steps_rows)  # one operand steps along the run
    i = np.arange(n)
    for e, (step, row) in zip((ea, eb), steps_rows):
        want = np.broadcast_to(np.arange(math.prod(e)).reshape(e), shape).reshape(-1)
        assert step in (0, 1)
        np.testing.assert_array_equal((i // run) * row + (i % run) * step, want, err_msg=(e, shape))


def test_run_plans_of_the_common_forms():
    plan = fields._broadcast_runs
    assert plan((3, 5), [(3, 1), (1, 5)]) == (5, [(0, 1), (1, 0)])   # outer product
    assert plan((3, 5), [(3, 5), (5,)]) == (5, [(1, 5), (1, 0)])     # row under a matrix
    assert plan((3, 5), [(3, 5), (3, 1)]) == (5, [(1, 5), (0, 1)])   # column beside it
    assert plan((2, 3, 6), [(2, 1, 1), (1, 3, 6)]) == (18, [(0, 1), (1, 0)])
    assert plan((7,), [(7,), ()]) == (7, [(1, 0), (0, 0)])           # one element: one run
    assert plan((3, 4, 5), [(3, 1, 5), (1, 4, 1)]) is None           # two run lengths: copied


@pytest.fixture
def every_run(monkeypatch):
    """Short runs (here 3 to 20 elements) take the run kernels on the CPU too."""
    monkeypatch.setattr(fields, "_CPU_MIN_RUN", 1)


def _check(F, E, name, a_h, da, b_h, db, got, shape):
    """``got`` (E op) against big ints on the broadcast elements."""
    p, w = F.p, F.W
    ref = {"add": naive.ext_add, "sub": naive.ext_sub,
           "mul": lambda x, y, p: naive.ext_mul(x, y, p, w)}[name]
    ia = np.broadcast_to(np.arange(a_h.size // da).reshape(a_h.shape[:a_h.ndim - (da == 4)]),
                         shape).reshape(-1)
    ib = np.broadcast_to(np.arange(b_h.size // db).reshape(b_h.shape[:b_h.ndim - (db == 4)]),
                         shape).reshape(-1)
    xa, xb = elements(F, a_h, da), elements(F, b_h, db)
    if E is F:
        want = [ref(xa[i], xb[j], p)[0] for i, j in zip(ia, ib)]
        have = [naive.dec(int(v), p) for v in got.reshape(-1)]
    else:
        want = [ref(xa[i], xb[j], p) for i, j in zip(ia, ib)]
        have = [[naive.dec(int(v), p) for v in row] for row in got.reshape(-1, 4)]
    assert have == want, (name, a_h.shape, da, b_h.shape, db)
    assert (got < p).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_run_broadcasts_match_big_ints(F, backend, every_run):
    rng = np.random.default_rng(21)
    pairs = PAIRS[:6] + PAIRS[7:9] + PAIRS[10:12] if backend == "numba" else PAIRS
    for (ea, eb), E in itertools.product(pairs, (F, F.ext)):
        shape = np.broadcast_shapes(ea, eb)
        degs = [(1, 1)] if E is F else [(4, 4), (1, 4), (4, 1)]
        for da, db in degs:
            a_h = raw_words(rng, ea + ((4,) if da == 4 else ()))
            b_h = raw_words(rng, eb + ((4,) if db == 4 else ()))
            a0, b0 = a_h.copy(), b_h.copy()
            a, b = to_backend(a_h, backend), to_backend(b_h, backend)
            for name in ("add", "sub", "mul"):
                got = to_host(getattr(E, name)(a, b, backend=backend))
                assert got.shape == shape + ((4,) if E is not F else ())
                _check(F, E, name, a_h, da, b_h, db, got, shape)
            assert (to_host(a) == a0).all() and (to_host(b) == b0).all()


@pytest.mark.parametrize("F", FIELDS)
def test_long_runs_strided_and_out(F):
    """Runs longer than a CPU task (CPU_LANE_RUN elements), without the
    monkeypatch; strided and read-only operands; ``out=`` a preallocated
    array and ``out=`` over the full operand."""
    E = F.ext
    x, y = E.random(3, seed=1), E.random(5000, seed=2)
    got = E.mul(x[:, None], y[None, :])
    for i in range(3):
        np.testing.assert_array_equal(got[i], E.mul(y, x[i]))
    s = F.random((6, 5000), seed=3)[::2, :]   # strided base rows under an extension op
    s.flags.writeable = False
    got = E.sub(s, y)
    for i in range(3):
        np.testing.assert_array_equal(got[i], E.sub(s[i], y))
    out = np.zeros((3, 5000, 4), np.uint32)
    assert E.add(x[:, None], y, out=out) is out
    np.testing.assert_array_equal(out, E.add(np.broadcast_to(x[:, None], (3, 5000, 4)).copy(),
                                             np.broadcast_to(y, (3, 5000, 4)).copy()))
    full = E.random((3, 5000), seed=4)
    want = E.mul(full, x[:, None])
    assert E.mul(full, x[:, None], out=full) is full
    np.testing.assert_array_equal(full, want)
    a, b = F.random((200, 1), seed=5), F.random(300, seed=6)
    np.testing.assert_array_equal(F.mul(a, b), F.mul(np.repeat(a, 300, axis=1),
                                                     np.tile(b, (200, 1))))


@pytest.mark.parametrize("F", FIELDS)
def test_outer_product_takes_the_output_alone(F):
    """No operand is copied to the full shape: the peak is the output (it was
    the output and two full-size copies)."""
    E = F.ext
    x, y = E.random(256, seed=1), E.random(512, seed=2)
    s = F.random(256, seed=3)
    for fn, words in ((lambda: E.mul(x[:, None], y[None, :]), 4),
                      (lambda: E.add(s[:, None], y), 4),
                      (lambda: F.mul(s[:, None], s[None, :128]), 1)):
        peak, res = peak_bytes(fn)
        out_bytes = res.nbytes
        assert out_bytes == 256 * (512 if words == 4 else 128) * 4 * words
        assert peak <= out_bytes + 65536, (peak, out_bytes)
