"""The broadcast kernels (``*_map2_bcast``) and the lean path of the binary
field ops (``_lean`` / ``_bcast_call`` in zorch_nb/fields.py), from a review:

* ``test_ext4_map2_bcast_contract_two_elementwise_extension_operands``: the
  kernel contract admits two elementwise extension operands (steps 1, 1;
  degrees 4, 4) in every backend; the CPU launcher once read b's first
  element for every i there.
* ``test_plain_op_copies_a_strided_operand_once``: a non-contiguous operand
  of a plain op is copied once (``_lean`` once copied it before deciding
  that the plain kernels run, and ``_flat`` copied it again).
* The others: element shapes of several axes, one-element operands of
  shape (1, 1) / (1, 1, 4), ``out`` over either operand, strided and
  read-only operands, and mle_eval for every value/point degree with tiny
  chunks, all against Python big ints.
"""
import itertools

import numpy as np
import pytest

from conftest import BACKENDS, to_backend, to_host
import naive
from zorch_nb import BabyBear, KoalaBear, fields
from zorch_nb import _backend
from zorch_nb.kernels import monty

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
OPS = {"add": monty.OP_ADD, "sub": monty.OP_SUB, "mul": monty.OP_MUL}


def raw_words(rng, shape, p):
    """Any uint32 words, with the edges p - 1, p, 2p, 2**32 - 1 and 0 mixed in."""
    w = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0, p - 1, p, p + 1, 2 * p - 1, 2 * p, 2**32 - 1], dtype=np.uint64)
    mask = rng.random(shape) < 0.3
    w[mask] = rng.choice(edges, size=int(mask.sum())).astype(np.uint32)
    return w


def _value(w, p):
    return naive.dec(int(w) % p, p)


def _elements(F, w, deg, ext):
    """(element shape, flat list of big-int elements) of words ``w``."""
    p = F.p
    if not ext:
        return w.shape, [_value(v, p) for v in w.reshape(-1)]
    if deg == 4:
        return w.shape[:-1], [[_value(v, p) for v in row] for row in w.reshape(-1, 4)]
    return w.shape, [[_value(v, p), 0, 0, 0] for v in w.reshape(-1)]


def big_int_result(F, name, a, da, b, db, ext):
    """The canonical Montgomery words of ``a op b`` (NumPy broadcasting over
    element shapes; base words embedded as (s, 0, 0, 0))."""
    p, w = F.p, F.W
    sa, va = _elements(F, a, da, ext)
    sb, vb = _elements(F, b, db, ext)
    shape = np.broadcast_shapes(sa, sb)
    ia = np.broadcast_to(np.arange(len(va)).reshape(sa), shape).reshape(-1)
    ib = np.broadcast_to(np.arange(len(vb)).reshape(sb), shape).reshape(-1)
    rows = []
    for i, j in zip(ia, ib):
        x, y = va[i], vb[j]
        if ext:
            r = {"add": lambda: naive.ext_add(x, y, p), "sub": lambda: naive.ext_sub(x, y, p),
                 "mul": lambda: naive.ext_mul(x, y, p, w)}[name]()
            rows.append([naive.enc(v, p) for v in r])
        else:
            rows.append(naive.enc({"add": x + y, "sub": x - y, "mul": x * y}[name] % p, p))
    return np.array(rows, dtype=np.uint32).reshape(shape + ((4,) if ext else ()))


# ------------------------------------------------------------ kernel contract

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_ext4_map2_bcast_contract_two_elementwise_extension_operands(F, backend):
    """Steps 1 and 1, degrees 4 and 4 are inside the documented contract of
    ``ext4_map2_bcast`` (steps 0 or 1, not both 0; the same contract in every
    backend)."""
    kernels = _backend.kernels_for(backend, "field")
    n = 9 if backend == "numba" else 37
    rng = np.random.default_rng(21)
    a_h, b_h = raw_words(rng, (n, 4), F.p), raw_words(rng, (n, 4), F.p)
    a0, b0 = a_h.copy(), b_h.copy()
    a, b = to_backend(a_h.reshape(-1), backend), to_backend(b_h.reshape(-1), backend)
    for name, op in OPS.items():
        out = to_backend(np.zeros(4 * n, np.uint32), backend)
        kernels.ext4_map2_bcast(op, a, 1, 4, b, 1, 4, out, F.params)
        want = big_int_result(F, name, a_h, 4, b_h, 4, True).reshape(-1)
        np.testing.assert_array_equal(to_host(out), want, err_msg=name)
    assert (to_host(a) == a0.reshape(-1)).all() and (to_host(b) == b0.reshape(-1)).all()


# ---------------------------------------------- copies made by the plain path

@pytest.mark.parametrize("F", FIELDS)
def test_plain_op_copies_a_strided_operand_once(F, monkeypatch):
    """A plain op (same shapes, same degrees) on a non-contiguous operand
    makes one contiguous copy of it (two cost F.add on a strided 2**21-word
    operand ~1.0 -> ~1.7 ms)."""
    copies = []
    original = np.ascontiguousarray

    def counting(x, *args, **kwargs):
        y = original(x, *args, **kwargs)
        if isinstance(x, np.ndarray) and not np.shares_memory(x, y):
            copies.append(x.shape)
        return y

    E = F.ext
    for G in (F, E):
        strided = G.random((64, 2), seed=1)[:, 0]  # elements (64,), every other one
        assert not strided.flags.c_contiguous
        other = G.random(64, seed=2)
        G.add(strided, other)  # compile outside the count
        monkeypatch.setattr(np, "ascontiguousarray", counting)
        copies.clear()
        got = G.add(strided, other)
        monkeypatch.setattr(np, "ascontiguousarray", original)
        np.testing.assert_array_equal(got, G.add(strided.copy(), other))
        assert len(copies) == 1, (G.degree, copies)


# ------------------------------------- operand forms, layouts and out= (pass)

def _forms(n, ext):
    base = [((n,), 1), ((), 1), ((1,), 1), ((1, 1), 1)]
    if not ext:
        return base
    return [((n,), 4), ((), 4), ((1,), 4), ((1, 1), 4)] + base


MULTI = [((3, 5), (1,)), ((3, 5), ()), ((1,), (3, 5)), ((2, 3, 5), (1, 1, 1)),
         ((3, 5), (3, 5)), ((1, 5), (3, 5))]


def _cases(ext, n=7):
    for (sa, da), (sb, db) in itertools.product(_forms(n, ext), repeat=2):
        yield sa, da, sb, db
    for sa, sb in MULTI:
        for da, db in itertools.product((4, 1) if ext else (1,), repeat=2):
            yield sa, da, sb, db


def _strided(w):
    if w.ndim == 0:
        return w
    big = np.zeros(tuple(2 * d for d in w.shape), np.uint32)
    view = big[tuple(slice(None, None, 2) for _ in w.shape)]
    view[...] = w
    return view


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
@pytest.mark.parametrize("F", FIELDS)
def test_forms_layouts_and_out_against_big_ints(F, ext):
    G = F.ext if ext else F
    rng = np.random.default_rng(22)
    for sa, da, sb, db in _cases(ext):
        a = raw_words(rng, sa + ((4,) if da == 4 else ()), F.p)
        b = raw_words(rng, sb + ((4,) if db == 4 else ()), F.p)
        for name in OPS:
            want = big_int_result(F, name, a, da, b, db, ext)
            fn = getattr(G, name)
            where = (name, sa, da, sb, db)
            ra, rb = a.copy(), b.copy()
            ra.setflags(write=False)
            rb.setflags(write=False)
            for x, y, how in ((a, b, "plain"), (ra, rb, "read-only"),
                              (_strided(a), _strided(b), "strided")):
                got = fn(x, y)
                assert got.shape == want.shape and (got == want).all(), where + (how,)
                assert (x == a).all() and (y == b).all(), where + (how,)
            for which in ("a", "b"):  # out= over either full-size operand
                x, y = a.copy(), b.copy()
                o = x if which == "a" else y
                if o.shape != want.shape:
                    continue
                assert fn(x, y, out=o) is o and (o == want).all(), where + (which,)
            o = _strided(np.zeros(want.shape, np.uint32)) if want.ndim else \
                np.zeros(want.shape, np.uint32)
            assert fn(a, b, out=o) is o and (o == want).all(), where + ("strided out",)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] != "cpu"])
@pytest.mark.parametrize("F", FIELDS)
def test_forms_on_device_backends_against_big_ints(F, backend):
    E = F.ext
    rng = np.random.default_rng(23)
    n = 3 if backend == "numba" else 7
    cases = list(_cases(True, n))
    if backend == "numba":  # the simulator is slow: the one-element forms of two axes
        cases = [c for c in cases if (1, 1) in (c[0], c[2]) or len(c[0]) > 1]
    for sa, da, sb, db in cases:
        a = raw_words(rng, sa + ((4,) if da == 4 else ()), F.p)
        b = raw_words(rng, sb + ((4,) if db == 4 else ()), F.p)
        for name in OPS:
            want = big_int_result(F, name, a, da, b, db, True)
            got = to_host(getattr(E, name)(to_backend(a, backend), to_backend(b, backend),
                                           backend=backend))
            assert got.shape == want.shape and (got == want).all(), (name, sa, da, sb, db)


# ------------------------------------------------------------- mle_eval (pass)

def _mle_big_int(F, values, vdeg, point, pdeg, ext):
    p = F.p

    def element(w, d):
        return [_value(x, p) for x in w] if d == 4 else [_value(w, p), 0, 0, 0]

    v = [element(x, vdeg) for x in values]
    for r in (element(x, pdeg) for x in point):
        v = [naive.ext_add(v[2 * k], naive.ext_mul(r, naive.ext_sub(v[2 * k + 1], v[2 * k], p),
                                                   p, F.W), p) for k in range(len(v) // 2)]
    words = [naive.enc(x, p) for x in v[0]]
    return np.array(words if ext else words[0], dtype=np.uint32)


@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "tiny-chunks"])
@pytest.mark.parametrize("F", FIELDS)
def test_mle_eval_every_degree_against_big_ints(F, chunk, monkeypatch):
    if chunk:
        monkeypatch.setattr(fields, "_CHUNK_WORDS", {"numpy": chunk, "cupy": chunk})
        monkeypatch.setattr(fields, "_MAX_CHUNKS", 10**9)
    rng = np.random.default_rng(24)
    for nv in range(0, 8):
        for G, vdeg, pdeg in ((F, 1, 1), (F.ext, 4, 4), (F.ext, 1, 4), (F.ext, 4, 1),
                              (F.ext, 1, 1)):
            values = raw_words(rng, (1 << nv,) + ((4,) if vdeg == 4 else ()), F.p)
            point = raw_words(rng, (nv,) + ((4,) if pdeg == 4 else ()), F.p)
            v0, p0 = values.copy(), point.copy()
            got = G.mle_eval(values, point)
            want = _mle_big_int(F, values, vdeg, point, pdeg, G.degree == 4)
            assert got.shape == want.shape and (got == want).all(), (nv, G.degree, vdeg, pdeg)
            assert (values == v0).all() and (point == p0).all()
