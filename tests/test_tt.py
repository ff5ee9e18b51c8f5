"""Tests of the uniform (mask-structured) Tucker tensor trains.

References, all independent of the code under test:

* ``naive_dense`` -- one ``einsum`` over every index of a ragged train;
* ragged per-element algorithms (``ref_*``) written with plain
  ``numpy.linalg.svd`` on the real cores only (same sign convention as the
  library: every frame column sums to >= 0);
* SVDs of the dense unfoldings for the T3-SVD singular values.

The ``path`` fixture runs a test twice on NumPy supercores: through the Numba
kernels, and through the array-module path that CuPy supercores take.
"""
import concurrent.futures
import contextlib
import functools
import math
import os
import re
import signal
import string
import threading
import time
import warnings

import numba
import numpy as np
import pytest

from peak_memory import peak_bytes

import zorch_nb.tt
from zorch_nb import tt_masks, tt_ops
from zorch_nb.kernels import tt_kernels
from zorch_nb.tt_masks import KERNELS
from zorch_nb.tt import (
    NORM_METHODS, ORTHOGONALIZE_KINDS, TuckerTensorTrain, UniformTuckerTensorTrain, UT3Masks, kernel_cache_info,
    ut3_inner, ut3_to_dense,
)

RTOL = 1e-10

# Stack of two trains of shape (3, 4, 2) with different ranks per element.
SHAPE = (3, 4, 2)
X_RANKS = [((2, 3, 2), (2, 3, 2, 1)), ((3, 2, 1), (1, 2, 3, 2))]
Y_RANKS = [((1, 2, 2), (1, 2, 2, 1)), ((2, 2, 2), (2, 1, 2, 1))]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def rand_t3(rng, shape, tucker_ranks, tt_ranks, stack=()):
    d = len(shape)
    tk = [rng.standard_normal(stack + (tucker_ranks[i], shape[i])) for i in range(d)]
    tt = [rng.standard_normal(stack + (tt_ranks[i], tucker_ranks[i], tt_ranks[i + 1])) for i in range(d)]
    return TuckerTensorTrain(tk, tt)


def naive_dense(tk, tt):
    """Dense tensor of one unstacked ragged train by a single einsum."""
    d = len(tk)
    L = string.ascii_letters
    bond, tucker, mode = L[: d + 1], L[d + 1: 2 * d + 1], L[2 * d + 1: 3 * d + 1]
    subs, ops = [], []
    for i in range(d):
        subs += [bond[i] + tucker[i] + bond[i + 1], tucker[i] + mode[i]]
        ops += [tt[i], tk[i]]
    return np.einsum(",".join(subs) + "->" + mode, *ops, optimize=True)


def leaves(nested):
    """Flatten nested tuples of TuckerTensorTrain (C order)."""
    if isinstance(nested, TuckerTensorTrain):
        return [nested]
    return [leaf for item in nested for leaf in leaves(item)]


def stacked_pair(rng, ranks, n=None, r=None, N=None):
    """A uniform stack of len(ranks) random trains and their ragged originals."""
    t3s = tuple(rand_t3(rng, SHAPE, tk, tt) for tk, tt in ranks)
    return UniformTuckerTensorTrain.from_t3(t3s, n=n, r=r, N=N), t3s


def full_masks(x):
    """Host masks of the real slots of both supercores, by their definition."""
    mk, mt = x.masks
    N = x.tucker_supercore.shape[-1]
    phys = (np.arange(N) < np.array(x.shape)[:, None]).reshape((x.d,) + (1,) * len(x.stack_shape) + (1, N))
    mU = mk[..., :, None] & phys
    mG = mt[:-1][..., :, None, None] & mk[..., None, :, None] & mt[1:][..., None, None, :]
    return mU, mG


def with_garbage(x, rng):
    """Same train, 1e3 * randn in every padding slot."""
    mU, mG = full_masks(x)
    U = np.where(mU, x.tucker_supercore, 1e3 * rng.standard_normal(mU.shape))
    G = np.where(mG, x.tt_supercore, 1e3 * rng.standard_normal(mG.shape))
    return UniformTuckerTensorTrain(U, G, x.shape, x.masks)


def gappy(x, rng):
    """Same tensors, real slots moved to random positions (gappy masks)."""
    U, G = np.array(x.tucker_supercore), np.array(x.tt_supercore)
    mk, mt = np.array(x.masks[0]), np.array(x.masks[1])
    d, n, r = x.d, U.shape[-2], G.shape[-1]
    U, G = U.reshape(d, -1, n, U.shape[-1]), G.reshape(d, -1, r, n, r)
    mk, mt = mk.reshape(d, -1, n), mt.reshape(d + 1, -1, r)
    for s in range(U.shape[1]):
        pk = [rng.permutation(n) for _ in range(d)]
        pt = [rng.permutation(r) for _ in range(d + 1)]
        for i in range(d):
            U[i, s] = U[i, s][pk[i]]
            G[i, s] = G[i, s][np.ix_(pt[i], pk[i], pt[i + 1])]
            mk[i, s] = mk[i, s][pk[i]]
        for b in range(d + 1):
            mt[b, s] = mt[b, s][pt[b]]
    stack = x.stack_shape
    return UniformTuckerTensorTrain(
        U.reshape(x.tucker_supercore.shape), G.reshape(x.tt_supercore.shape), x.shape,
        (mk.reshape((d,) + stack + (n,)), mt.reshape((d + 1,) + stack + (r,))),
    )


def rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-300)


def assert_cores_close(got, want, rtol=RTOL):
    """Core-by-core comparison of two ragged trains (TuckerTensorTrain or pairs)."""
    g = got.data if isinstance(got, TuckerTensorTrain) else got
    w = want.data if isinstance(want, TuckerTensorTrain) else want
    for kind, gcs, wcs in (("tucker", g[0], w[0]), ("tt", g[1], w[1])):
        assert len(gcs) == len(wcs)
        for i, (a, b) in enumerate(zip(gcs, wcs)):
            assert a.shape == b.shape, (kind, i, a.shape, b.shape)
            assert rel_err(a, b) <= rtol, (kind, i, rel_err(a, b))


# -- ragged references (per element, real cores only) -----------------------

def ref_frame(A, k):
    """First k left singular vectors of A, each column summing to >= 0."""
    u = np.linalg.svd(A, full_matrices=False)[0][:, :k]
    return u * np.where(u.sum(axis=0) < 0, -1.0, 1.0)


def ref_squash(tk, tt):
    tt = list(tt)
    tt[0] = tt[0].sum(axis=0, keepdims=True)
    tt[-1] = tt[-1].sum(axis=-1, keepdims=True)
    return list(tk), tt


def ref_tucker_down(tk, tt):
    tk, tt = list(tk), list(tt)
    for i, U in enumerate(tk):
        P = ref_frame(U.T, min(U.shape))
        tt[i] = np.einsum("ajb,jx->axb", tt[i], U @ P)
        tk[i] = P.T
    return tk, tt


def ref_max_exponent(a, axis=None):
    """frexp exponent of the largest |entry| (0 for an all-zero slice)."""
    return np.frexp(np.abs(a).max(axis=axis))[1]


def ref_balance(tk, tt):
    """``(tk', tt', e)``: the train is ``2**e`` times that of ``tk'``, ``tt'``,
    whose Tucker rows, and each TT core's slices along its right bond (the
    last core: all of it), have their largest entry in ``[0.5, 1)``; each
    scale moves on into the core that the row or slice multiplies."""
    tk, tt = [U.copy() for U in tk], [G.copy() for G in tt]
    for i, U in enumerate(tk):
        c = ref_max_exponent(U, axis=1)
        tk[i] = np.ldexp(U, -c[:, None])
        tt[i] = np.ldexp(tt[i], c[None, :, None])
    for i in range(len(tt) - 1):
        c = ref_max_exponent(tt[i], axis=(0, 1))
        tt[i] = np.ldexp(tt[i], -c[None, None, :])
        tt[i + 1] = np.ldexp(tt[i + 1], c[:, None, None])
    e = ref_max_exponent(tt[-1])
    tt[-1] = np.ldexp(tt[-1], -e)
    return tk, tt, int(e)


def ref_spread(cores, e):
    """``2**e`` spread over the cores: ``e // d`` each, one more on the first ``e % d``."""
    d = len(cores)
    return [np.ldexp(c, e // d + (i < e % d)) for i, c in enumerate(cores)]


def ref_tt_up(tk, tt):
    tk, tt = list(tk), list(tt)
    for i, G in enumerate(tt):
        ra, n, rb = G.shape
        A = G.transpose(0, 2, 1).reshape(ra * rb, n)
        Q = ref_frame(A, min(A.shape))
        tk[i] = (Q.T @ A) @ tk[i]
        tt[i] = Q.reshape(ra, rb, -1).transpose(0, 2, 1)
    return tk, tt


def ref_left_step(tt, i, max_rank=None):
    ra, n, rb = tt[i].shape
    A = tt[i].reshape(ra * n, rb)
    k = min(A.shape) if max_rank is None else min(min(A.shape), max_rank)
    Q = ref_frame(A, k)
    tt[i + 1] = np.einsum("xb,bjc->xjc", Q.T @ A, tt[i + 1])
    tt[i] = Q.reshape(ra, n, k)
    return np.linalg.svd(A, compute_uv=False)


def ref_right_step(tt, i):
    ra, n, rb = tt[i].shape
    A = tt[i].reshape(ra, n * rb)
    P = ref_frame(A.T, min(A.shape))
    tt[i - 1] = np.einsum("ajb,bx->ajx", tt[i - 1], A @ P)
    tt[i] = P.T.reshape(-1, n, rb)


def ref_orthogonalize(tk, tt, kind):
    """On the balanced train (:func:`ref_balance`); its scale ``2**e`` goes
    back on the cores that carry the weight."""
    tk, tt, e = ref_balance(tk, tt)
    if kind == "tt_up":
        tk, tt = ref_tt_up(tk, tt)
        return ref_spread(tk, e), tt
    tk, tt = ref_tucker_down(tk, tt)
    if kind == "tucker_down":
        return tk, ref_spread(tt, e)
    if kind == "left":
        for i in range(len(tt) - 1):
            ref_left_step(tt, i)
        tt[-1] = np.ldexp(tt[-1], e)
    elif kind == "right":
        for i in range(len(tt) - 1, 0, -1):
            ref_right_step(tt, i)
        tt[0] = np.ldexp(tt[0], e)
    return tk, tt


def ref_svd(tk, tt, max_tk=None, max_tt=None):
    """On the balanced train (:func:`ref_balance`); its scale ``2**e`` goes
    back on the last core and the singular values."""
    d = len(tk)
    tk, tt, e = ref_balance(tk, tt)
    tk, tt = ref_tucker_down(*ref_squash(tk, tt))
    for i in range(d - 1, 0, -1):
        ref_right_step(tt, i)
    tucker_svs, tt_svs = [], []
    for i in range(d):
        ra, n, rb = tt[i].shape
        A = tt[i].transpose(0, 2, 1).reshape(ra * rb, n)
        k = min(A.shape) if max_tk is None else min(min(A.shape), max_tk[i])
        P = ref_frame(A.T, k)
        tt[i] = (A @ P).reshape(ra, rb, k).transpose(0, 2, 1)
        tk[i] = P.T @ tk[i]
        tucker_svs.append(np.linalg.svd(A, compute_uv=False))
        if i < d - 1:
            tt_svs.append(ref_left_step(tt, i, None if max_tt is None else max_tt[i]))
    tt[-1] = np.ldexp(tt[-1], e)
    return ((tk, tt), [np.ldexp(v, e) for v in tucker_svs], [np.ldexp(v, e) for v in tt_svs])


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------

@pytest.fixture
def rng():
    return np.random.default_rng(20240605)


@pytest.fixture(params=["numba", "xp"])
def path(request, monkeypatch):
    """Numba kernels, or the array-module (CuPy) path on NumPy arrays."""
    monkeypatch.setattr(tt_ops, "_NUMBA_CPU", request.param == "numba")
    return request.param


@pytest.fixture(params=["prefix", "gappy"])
def xy(request, rng):
    """Two stacked uniform trains (prefix or gappy masks) and their ragged originals."""
    x, x3 = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    y, y3 = stacked_pair(rng, Y_RANKS, n=3, r=3, N=5)
    if request.param == "gappy":
        x, y = gappy(x, rng), gappy(y, rng)
    return x, y, [naive_dense(*t.data) for t in x3], [naive_dense(*t.data) for t in y3], x3, y3


# ---------------------------------------------------------------------------
# UT3Masks
# ---------------------------------------------------------------------------

def test_masks_hash_and_compare_by_content(rng):
    mk = rng.random((3, 2, 4)) < 0.5
    mt = rng.random((4, 2, 5)) < 0.5
    a, b = UT3Masks(mk, mt), UT3Masks(mk.copy(), mt.copy())
    assert a is not b and a == b and hash(a) == hash(b) and a == a
    assert len({a, b}) == 1
    other = mt.copy()
    other[1, 1, 2] = ~other[1, 1, 2]
    assert UT3Masks(mk, other) != a
    # The same bytes under another shape are another structure.
    assert UT3Masks(mk.reshape(3, 1, 8), mt.reshape(4, 1, 10)) != a
    np.testing.assert_array_equal(a.tucker_ranks, mk.sum(-1))
    np.testing.assert_array_equal(a.tt_ranks, mt.sum(-1))
    assert (a.d, a.stack_shape, a.n, a.r) == (3, (2,), 4, 5)
    tk_mask, tt_mask = a  # unpacks as the pair of masks
    # (views of one stored pair: see test_masks_views_cannot_reshape_the_structure)
    for got, prop, want in ((tk_mask, a.tucker_edge_mask, mk), (tt_mask, a.tt_edge_mask, mt)):
        np.testing.assert_array_equal(got, want)
        assert np.shares_memory(got, prop) and got.base is prop.base


def test_masks_keep_read_only_copies():
    mk, mt = np.ones((2, 3), bool), np.ones((3, 2), bool)
    a = UT3Masks(mk, mt)
    h = hash(a)
    mk[0, 0] = False  # the caller's array changes; the holder does not
    assert a.tucker_edge_mask[0, 0] and hash(a) == h
    with pytest.raises(ValueError):
        a.tucker_edge_mask[0, 0] = False
    for m in a:  # nor can the flag be turned back on (stale hash, stale kernels)
        with pytest.raises(ValueError, match="WRITEABLE"):
            m.setflags(write=True)
        # ... on any array of the .base chain either: a read-only copy that
        # owned its data let `m.base.setflags(write=True)` through
        base = m.base
        while isinstance(base, np.ndarray):
            with pytest.raises(ValueError, match="WRITEABLE"):
                base.setflags(write=True)
            base = base.base
        assert isinstance(base, bytes)
    with pytest.raises(AttributeError):
        a.foo = 1


def test_masks_views_cannot_reshape_the_structure(rng):
    """NumPy lets anyone assign .shape, .dtype or .strides of an array it
    cannot write: done to the stored mask, the structure changed behind its
    cached hash (an equal fresh holder compared unequal) and a train kept
    the kernel compiled for its old masks (a wrong to_dense).  Every route
    out hands a view; changing one changes that view only."""
    mk = np.array([[[1, 0], [1, 0]], [[1, 0], [1, 0]]], bool)
    mt = np.ones((3, 2, 1), bool)
    U, G = rng.standard_normal((2, 2, 2, 2)), rng.standard_normal((2, 2, 1, 2, 1))
    x = UniformTuckerTensorTrain(U, G, (2, 2), (mk, mt))
    want = x.to_dense()
    before = hash(x.masks)
    a, b = x.masks
    a.shape = (2, 4)
    x.masks[1].shape = (3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated in NumPy 2.4
        x.masks.tucker_edge_mask.strides = (4, 2, 0)  # would read every slot as True
        x.masks.tt_edge_mask.dtype = np.uint8
    x.masks[:][0].shape = (4, 2)
    assert x.masks.stack_shape == (2,) and x.masks[0].shape == (2, 2, 2)
    assert x.masks[1].dtype == bool and hash(x.masks) == before
    fresh = UT3Masks(mk, mt)
    assert x.masks == fresh and fresh == x.masks and hash(fresh) == before
    np.testing.assert_array_equal(x.to_dense(), want)
    np.testing.assert_array_equal(
        UniformTuckerTensorTrain(U, G, (2, 2), fresh).to_dense(), want)
    for m in (*x.masks, *x.masks[:], x.masks.tucker_edge_mask, x.masks.tt_edge_mask):
        assert not m.flags.writeable


def test_masks_concatenations_hand_out_views():
    """tuple's + and * copied the stored arrays themselves into the result
    (`masks + ()` then `.shape = ...` reshaped the structure behind its
    hash); they give plain tuples of views, as indexing does."""
    mk = np.array([[[1, 0], [1, 0]], [[1, 0], [1, 0]]], bool)
    mt = np.ones((3, 2, 1), bool)
    a = UT3Masks(mk, mt)
    before = hash(a)
    made = (a + (), () + a, (7,) + a, a + (7,), a * 2, 2 * a, a.__getnewargs__())
    for t in made:
        assert type(t) is tuple
        for m in t:
            if isinstance(m, np.ndarray):
                m.shape = (m.size,)
    assert [len(t) for t in made] == [2, 2, 3, 3, 4, 4, 2]
    assert a.stack_shape == (2,) and a[0].shape == (2, 2, 2) and a[1].shape == (3, 2, 1)
    assert hash(a) == before and a == UT3Masks(mk, mt)
    assert a * 0 == () and a + () is not a and UT3Masks(*a.__getnewargs__()) == a
    with pytest.raises(TypeError):
        a + [mk]
    with pytest.raises(TypeError):
        [mk] + a
    with pytest.raises(TypeError):
        a * 1.5


def test_dataclasses_asdict_and_astuple_of_a_train(xy):
    """(an adversarial review) ``dataclasses.asdict(train)`` raised a bare
    TypeError from the masks' constructor: dataclasses rebuild a tuple
    without ``_fields`` from one iterable.  The masks now come back equal."""
    import dataclasses
    x = xy[0]
    d, t = dataclasses.asdict(x), dataclasses.astuple(x)
    assert type(d["masks"]) is UT3Masks and d["masks"] == x.masks
    assert hash(d["masks"]) == hash(x.masks)
    np.testing.assert_array_equal(d["tt_supercore"], x.tt_supercore)
    assert any(type(v) is UT3Masks and v == x.masks for v in t)


def test_masks_store_true_as_byte_one(rng):
    """Bool bytes other than 0 / 1 are True to NumPy but hashed differently:
    equal structures compared unequal and missed the kernel cache."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1)), n=3, r=3)
    odd = [(np.ascontiguousarray(m).view(np.uint8) * 2).view(bool) for m in x.masks]
    y = UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore, x.shape, odd)
    assert y.masks == x.masks and hash(y.masks) == hash(x.masks)
    assert y.masks[0].view(np.uint8).max() == 1
    x.to_dense()
    before = kernel_cache_info()
    np.testing.assert_array_equal(y.to_dense(), x.to_dense())
    assert kernel_cache_info().misses == before.misses


def test_masks_differ_from_a_plain_pair():
    """tuple's == compared the masks elementwise: 'truth value ... ambiguous'."""
    a = UT3Masks(np.ones((2, 3), bool), np.ones((3, 2), bool))
    pair = (np.ones((2, 3), bool), np.ones((3, 2), bool))
    assert (a == pair) is False and (pair == a) is False and a != pair
    assert a != [pair[0], pair[1]] and a != "masks"
    # tuple's <, in, index() compared arrays elementwise ("truth value of an
    # array is ambiguous"); there is no order and no search, said plainly
    b = UT3Masks(*pair)
    for compare in (lambda: a < b, lambda: a >= b, lambda: a <= pair, lambda: pair > a):
        with pytest.raises(TypeError, match="equality only .* no order"):
            compare()
    for search in (lambda: pair[0] in a, lambda: a.index(pair[0]), lambda: a.count(pair[0])):
        with pytest.raises(TypeError, match=r"`in`, index\(\) and count\(\)"):
            search()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1  # equality and hash unchanged


class _FakeDeviceArray:
    __cuda_array_interface__ = {"shape": (2, 3), "typestr": "|b1", "data": (0, False), "version": 3}


def test_masks_errors_say_what_to_pass():
    with pytest.raises(TypeError, match="dtype bool.*!= 0"):
        UT3Masks(np.ones((2, 3), np.int64), np.ones((3, 2), bool))
    # not every device array is CuPy's: a numba.cuda array has no .get()
    with pytest.raises(TypeError, match=r"host numpy.*copy it to the host first, e\.g\. "
                                        r"`tucker_edge_mask\.get\(\)` for CuPy or "
                                        r"`tucker_edge_mask\.copy_to_host\(\)` for numba\.cuda"):
        UT3Masks(_FakeDeviceArray(), np.ones((3, 2), bool))
    with pytest.raises(ValueError, match=r"tt_edge_mask.*\(3, 'r'\)"):
        UT3Masks(np.ones((2, 3), bool), np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="tucker_edge_mask"):
        UT3Masks(np.ones(3, bool), np.ones((4, 2), bool))
    with pytest.raises(ValueError, match="`tucker_edge_mask` must be a rectangular"):
        UT3Masks([[True, False], [True]], np.ones((3, 1), bool))
    for mk, mt in (((2, 0), (3, 1)), ((2, 1), (3, 0)), ((2, 0, 1), (3, 0, 1))):  # n, r, stack
        with pytest.raises(ValueError, match="no zero-length axis"):
            UT3Masks(np.ones(mk, bool), np.ones(mt, bool))
    x = UniformTuckerTensorTrain.from_t3(rand_t3(np.random.default_rng(1), SHAPE, (2, 2, 2), (1, 2, 2, 1)))
    with pytest.raises(ValueError, match=r"`tucker_edge_mask` must have shape \(3, 2\)"):
        UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore, x.shape,
                                 (x.masks[0][:, :1], x.masks[1]))


# ---------------------------------------------------------------------------
# conversions and structure operations
# ---------------------------------------------------------------------------

def test_from_t3_to_t3_round_trip(rng):
    x, x3 = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    assert x.stack_shape == (2,) and x.padded_sizes == (4, 4, 5)
    np.testing.assert_array_equal(x.tucker_ranks, np.array([tk for tk, _ in X_RANKS]).T)
    np.testing.assert_array_equal(x.tt_ranks, np.array([tt for _, tt in X_RANKS]).T)
    back = x.to_t3()
    assert len(back) == 2
    for got, want in zip(back, x3):
        assert_cores_close(got, want, rtol=0)
    # A stacked ragged train (equal ranks) and a nested stack of stacks.
    s3 = rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1), stack=(3,))
    us = UniformTuckerTensorTrain.from_t3((s3, s3))
    assert us.stack_shape == (2, 3)
    np.testing.assert_allclose(us.to_dense()[1], s3.to_dense(), rtol=1e-12)
    assert isinstance(us.to_t3()[1][2], TuckerTensorTrain)
    with pytest.raises(ValueError, match="at least"):
        UniformTuckerTensorTrain.from_t3(x3, n=1)


def test_repr_shows_the_ranks_beside_the_padding(rng):
    """After svd(max_tt_ranks=1) the repr said only "n=8, r=8": read as the
    ranks (a notebook user's review)."""
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)  # two trains, other ranks each
    assert repr(x) == ("UniformTuckerTensorTrain(shape=(3, 4, 2), stack_shape=(2,), ranks per "
                       "train (.tucker_ranks, .tt_ranks), padded n=4, r=4, N=5, dtype=float64)")
    one = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1)), n=4, r=4)
    assert repr(one) == ("UniformTuckerTensorTrain(shape=(3, 4, 2), stack_shape=(), "
                         "tucker_ranks=[2, 3, 2], tt_ranks=[1, 2, 2, 1], padded n=4, r=4, N=4, "
                         "dtype=float64)")
    same = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1),
                                                    stack=(3,)))
    assert "stack_shape=(3,), tucker_ranks=[2, 2, 2], tt_ranks=[1, 2, 2, 1]" in repr(same)
    long = UniformTuckerTensorTrain.from_t3(rand_t3(rng, (2,) * 10, (1,) * 10, (1,) * 11))
    assert "tucker_ranks=[1, 1, 1, 1, ..., 1, 1, 1, 1], tt_ranks=[1, 1, 1, 1, ..., 1, 1" \
        in repr(long)
    # The masks say it alike (their repr listed every train's ranks: 54 KB for
    # a stack of 2000)
    assert repr(one.masks) == ("UT3Masks(d=3, stack_shape=(), n=4, r=4, tucker_ranks=[2, 3, 2], "
                               "tt_ranks=[1, 2, 2, 1])")
    assert repr(x.masks).endswith("r=4, ranks per train (.tucker_ranks, .tt_ranks))")
    big = UT3Masks(np.ones((4, 2000, 3), bool), np.ones((5, 2000, 2), bool))
    assert repr(big) == ("UT3Masks(d=4, stack_shape=(2000,), n=3, r=2, tucker_ranks=[3, 3, 3, 3], "
                         "tt_ranks=[2, 2, 2, 2, 2])")


def test_repr_ranks_lists_and_trains_that_differ_in_tt_ranks_only(rng):
    from zorch_nb._text import elided_list  # (as the repr calls it)
    assert elided_list(range(8), 4, 4) == "[0, 1, 2, 3, 4, 5, 6, 7]"  # `most`: all shown
    assert elided_list(range(10), 4, 4) == "[0, 1, 2, 3, ..., 6, 7, 8, 9]"
    x, _ = stacked_pair(rng, [((2, 2, 2), (1, 2, 2, 1)), ((2, 2, 2), (1, 1, 2, 1))])
    assert "stack_shape=(2,), ranks per train (.tucker_ranks, .tt_ranks)" in repr(x)


def test_to_dense_matches_naive(xy, path):
    x, y, xd, yd, _, _ = xy
    for u, dense in ((x, xd), (y, yd)):
        got = u.to_dense()
        assert got.shape == (2,) + SHAPE
        for s in range(2):
            assert rel_err(got[s], dense[s]) < RTOL
    # The ragged class agrees too.
    t = rand_t3(np.random.default_rng(3), SHAPE, (2, 3, 2), (2, 2, 3, 2))
    assert rel_err(t.to_dense(), naive_dense(*t.data)) < RTOL


def _guarded_to_dense(x, shape):
    """``(parts, scratch lengths, kernel, buffers, out)`` of the Numba to_dense
    of ``x``: each scratch buffer its length plus a guard zone of 64, and
    ``out``, filled with NaN (a write past a buffer shows in its guard)."""
    p = tt_ops._parts(x.data)
    tables = tt_ops._tables(p)
    lengths = tt_kernels.ut3_to_dense_scratch(shape, tables[1], tables[3])
    kernel = tt_kernels.build_ut3_to_dense(shape, *tables)
    bufs = [np.full(k + 64, np.nan) for k in lengths]
    return p, lengths, kernel, bufs, np.full((p.S, math.prod(shape)), np.nan)


def test_to_dense_scratch_is_exact_where_an_inner_bond_is_widest(rng):
    """The Numba kernel's scratch follows the live ranks, and an inner bond can
    need the most: a too-short bound would let the kernel (no bounds checks)
    write past it, which the NaN guard zone past each buffer would show."""
    shape = (2, 9, 2)
    # element 0 peaks at inner bond 2 (18 * 12 entries, 6x its 36 outputs);
    # element 1 has a last bond of 3 live slots, summed before the last
    # product, which goes into out as element 0's does
    t3s = (rand_t3(rng, shape, (2, 3, 2), (1, 2, 12, 1)), rand_t3(rng, shape, (1, 2, 2), (2, 3, 8, 3)))
    prefix = UniformTuckerTensorTrain.from_t3(t3s, n=3, r=14)
    for x in (prefix, gappy(prefix, rng)):
        # P: the ones vector (2), then after core 1 (18 * 12); Q: after core 0
        # (2 * 3); H: core 1 times its factor (2 * 9 * 12); Uc: core 1's live
        # factor rows (3 * 9); Gc: core 1's live block (2 * 3 * 12)
        _, lengths, kernel, bufs, out = _guarded_to_dense(x, shape)
        assert lengths == (216, 6, 216, 27, 72)
        U, G = np.ascontiguousarray(x.tucker_supercore), np.ascontiguousarray(x.tt_supercore)
        for k in range(5):
            with pytest.raises(ValueError, match="scratch shorter"):
                kernel(U, G, out, *(b[: n - (j == k)] for j, (b, n) in
                                    enumerate(zip(bufs, lengths))), 0, 2)
        assert np.isnan(out).all() and all(np.isnan(b).all() for b in bufs)  # refused first
        kernel(U, G, out, *(b[:n] for b, n in zip(bufs, lengths)), 0, 2)
        assert all(np.isnan(b[n:]).all() for b, n in zip(bufs, lengths))
        for s in range(2):
            assert rel_err(out[s].reshape(shape), naive_dense(*t3s[s].data)) < RTOL
        assert rel_err(x.to_dense(), np.stack([naive_dense(*t.data) for t in t3s])) < RTOL


def test_a_repeated_to_dense_reads_its_structure_once(rng, monkeypatch):
    """A structure's index tables are made when its kernel is built, and its
    scratch sizes are worked out once: made on every call, they were ~55 of
    a one-train to_dense's ~150 us (d = 3)."""
    x = gappy(random_stack(rng, 3), rng)
    made, real = [], tt_ops._tables
    monkeypatch.setattr(tt_ops, "_tables", lambda p: made.append(p) or real(p))
    want = x.to_dense()
    first, hits = len(made), tt_ops._to_dense_scratch.cache_info().hits
    for _ in range(2):
        assert x.to_dense().tobytes() == want.tobytes()
    assert len(made) == first
    assert tt_ops._to_dense_scratch.cache_info().hits == hits + 2
    y = UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore, x.shape,
                                 (np.array(x.masks[0]), np.array(x.masks[1])))
    assert y.to_dense().tobytes() == want.tobytes()  # the same structure, rebuilt
    assert tt_ops._to_dense_scratch.cache_info().hits == hits + 3


@pytest.mark.parametrize("last_rank", [1, 3, 16])
def test_to_dense_peak_memory_follows_live_ranks(rng, last_rank):
    """The Numba to_dense held two scratch tensors of prod(shape) * padded r
    entries, 33x the output at r = 16; then, sized by the live ranks, still
    the last product when bond d had more than one live slot (17x the
    output at r_d = 16).  Now: the output and the widest inner product (the
    last bond is summed before the last product, written into the output)."""
    shape = (32, 32, 32)
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, shape, (6, 6, 6), (1, 14, 14, last_rank)), n=8, r=16)
    peak, dense = peak_bytes(x.to_dense)
    scratch = 1 + 32 * 32 * 14  # P (ones, then after core 1), Q (after core 0)
    small = 14 * 32 * 14 + 6 * 32 + 14 * 6 * 14 + 32 * 14  # H, Uc, Gc (live sizes)
    assert peak < dense.nbytes + 8 * (scratch + small) + 16384, (peak, dense.nbytes)
    assert peak < 2 * dense.nbytes  # what the ragged TuckerTensorTrain.to_dense needs


def test_to_dense_scratch_follows_live_not_padded_ranks(rng, monkeypatch):
    """A 1 MiB train (padded r = 128, live ranks 1) with a 0.5 MiB dense tensor
    asked 8 GiB for its scratch H (padded r * N * r), which the dense-size
    check never saw; sized by the live ranks it needs the tensor and a few
    words.  Scratch that live ranks make large is counted with the output
    and refused up front, as a dense tensor too large is."""
    N, r = 1 << 12, 128
    U = np.ones((2, 1, N))
    G = np.ones((2, r, 1, r))
    mk = np.ones((2, 1), bool)
    mt = np.zeros((3, r), bool)
    mt[:, 0] = True
    x = UniformTuckerTensorTrain(U, G, (N, 1), (mk, mt))
    peak, dense = peak_bytes(x.to_dense)
    np.testing.assert_array_equal(dense, np.ones((N, 1)))
    assert peak < dense.nbytes + 3 * 8 * N + 16384, peak  # H, Uc (N each), P, Q, Gc
    # live ranks 128: H is 128 * N * 128 words (0.5 GiB) for a 32 KiB tensor
    mt[:, :] = True
    wide = UniformTuckerTensorTrain(U, G / r, (N, 1), (mk, mt))
    monkeypatch.setattr(tt_ops._backend, "physical_memory", lambda: 2**28)
    with pytest.raises(ValueError, match=r"needs 0\.5\d* GiB with the kernel's scratch \(live "
                                         r"ranks \[128, 128, 128\]\)"):
        wide.to_dense()


def test_entries_and_apply_take_their_queries_in_chunks(rng, monkeypatch):
    """The per-query core vectors (d * n numbers per query and stack element)
    were made for all queries at once: 400,000 entries of a 16-core train
    peaked at 528x their result (6.3 GiB for 12 MiB).  Chunked, the peak
    is the chunk's, and the values are those of one whole pass."""
    # (the plain-Python kernels of NUMBA_DISABLE_JIT=1 take minutes at 20000)
    K, chunk = (100, 1 << 14) if numba.config.DISABLE_JIT else (20000, 1 << 20)
    d, n, N = 8, 8, 16
    x = UniformTuckerTensorTrain(rng.standard_normal((d, 2, n, N)),
                                 rng.standard_normal((d, 2, 4, n, 4)), (N,) * d,
                                 (np.ones((d, 2, n), bool), np.ones((d + 1, 2, 4), bool)))
    idx = rng.integers(0, N, size=(K, d))
    vecs = [rng.standard_normal((K, N)) for _ in range(d)]
    whole = x.entries(idx), x.apply(vecs)  # (2 * 8 * 8 * 20000 words: 20 MiB of vectors)
    monkeypatch.setattr(tt_ops, "_QUERY_CHUNK_BYTES", chunk, raising=False)
    pk_e, got_e = peak_bytes(lambda: x.entries(idx))
    pk_a, got_a = peak_bytes(lambda: x.apply(vecs))
    np.testing.assert_array_equal(got_e, whole[0])
    np.testing.assert_array_equal(got_a, whole[1])
    assert got_e.shape == got_a.shape == (2, K)
    # a chunk's vectors (twice: gathered, then stacked), the int64 indices and
    # their bounds check, the result
    assert pk_e < 2 * chunk + 3 * idx.nbytes + got_e.nbytes + 65536, pk_e
    assert pk_a < 2 * chunk + got_a.nbytes + 65536, pk_a
    # vectors far from 1 are scaled a chunk at a time (the chunk's scaled
    # rows, each query's exponents, their sum)
    far = [v * 2.0**(300 if i % 2 else -300) for i, v in enumerate(vecs)]
    pk_f, got_f = peak_bytes(lambda: x.apply(far))
    np.testing.assert_array_equal(got_f, whole[1])
    assert pk_f < 3 * chunk + got_f.nbytes + (d + 2) * K * 8 + 65536, pk_f


def test_reverse_squash_apply_masks(xy):
    x, _, xd, _, _, _ = xy
    rev = x.reverse()
    assert rev.shape == SHAPE[::-1]
    sq = x.squash_tails()
    np.testing.assert_array_equal(sq.tt_ranks[0], 1)
    np.testing.assert_array_equal(sq.tt_ranks[-1], 1)
    clean = with_garbage(x, np.random.default_rng(5)).apply_masks()
    mU, mG = full_masks(clean)
    assert not clean.tucker_supercore[~mU].any() and not clean.tt_supercore[~mG].any()
    for s in range(2):
        assert rel_err(rev.to_dense()[s], xd[s].transpose(2, 1, 0)) < RTOL
        assert rel_err(sq.to_dense()[s], xd[s]) < RTOL
        assert rel_err(clean.to_dense()[s], xd[s]) < RTOL


def test_stack_unstack(xy):
    x, y, xd, yd, _, _ = xy
    st = UniformTuckerTensorTrain.stack([x, y])  # different padded n and r
    assert st.stack_shape == (2, 2) and st.padded_sizes == (4, 4, 5)
    dense = st.to_dense()
    for s in range(2):
        assert rel_err(dense[0, s], xd[s]) < RTOL and rel_err(dense[1, s], yd[s]) < RTOL
    a, b = st.unstack()
    assert a.masks[0].shape == x.masks[0].shape[:1] + (2, 4)
    assert rel_err(b.to_dense(), np.stack(yd)) < RTOL
    with pytest.raises(ValueError, match="stacked"):
        a.unstack()[0].unstack()


# ---------------------------------------------------------------------------
# arithmetic
# ---------------------------------------------------------------------------

def ref_add(x, y):
    tk = [np.concatenate([u, v]) for u, v in zip(x[0], y[0])]
    tt = []
    for g, h in zip(x[1], y[1]):
        out = np.zeros((g.shape[0] + h.shape[0], g.shape[1] + h.shape[1], g.shape[2] + h.shape[2]))
        out[: g.shape[0], : g.shape[1], : g.shape[2]] = g
        out[g.shape[0]:, g.shape[1]:, g.shape[2]:] = h
        tt.append(out)
    return tk, tt


def ref_hadamard(x, y):
    tk = [np.einsum("jo,ko->jko", u, v).reshape(-1, u.shape[1]) for u, v in zip(x[0], y[0])]
    tt = [np.einsum("ajb,cke->acjkbe", g, h).reshape(
        g.shape[0] * h.shape[0], g.shape[1] * h.shape[1], g.shape[2] * h.shape[2]) for g, h in zip(x[1], y[1])]
    return tk, tt


def test_arithmetic_matches_dense(xy):
    x, y, xd, yd, _, _ = xy
    alpha = np.array([2.5, -0.5])
    cases = {
        "add": (x + y, [a + b for a, b in zip(xd, yd)]),
        "sub": (x - y, [a - b for a, b in zip(xd, yd)]),
        "neg": (-x, [-a for a in xd]),
        "scale": (3.0 * x, [3 * a for a in xd]),
        "scale_stack": (x * alpha, [al * a for al, a in zip(alpha, xd)]),
        "hadamard": (x.hadamard(y), [a * b for a, b in zip(xd, yd)]),
    }
    for name, (got, want) in cases.items():
        dense = got.to_dense()
        for s in range(2):
            assert rel_err(dense[s], want[s]) < RTOL, name
    s = x + y
    assert s.padded_sizes == (7, 7, 5)
    np.testing.assert_array_equal(s.tucker_ranks, x.tucker_ranks + y.tucker_ranks)
    h = x.hadamard(y)
    np.testing.assert_array_equal(h.tt_ranks, x.tt_ranks * y.tt_ranks)


def test_arithmetic_matches_ragged_cores(xy):
    x, y, _, _, _, _ = xy
    for got, a, b in zip((x + y).to_t3(), x.to_t3(), y.to_t3()):
        assert_cores_close(got, ref_add(a.data, b.data))
    for got, a, b in zip(x.hadamard(y).to_t3(), x.to_t3(), y.to_t3()):
        assert_cores_close(got, ref_hadamard(a.data, b.data))


def test_frontend_checks_structure(rng):
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    other_n, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=6)
    with pytest.raises(ValueError, match="padded N"):
        x + other_n
    with pytest.raises(ValueError, match="padded N"):
        x.hadamard(other_n)
    single = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)), n=4, r=4, N=5)
    with pytest.raises(ValueError, match="stack_shape"):
        x - single
    wrong_shape = UniformTuckerTensorTrain.from_t3(
        tuple(rand_t3(rng, (3, 4, 1), (1, 2, 1), (1, 2, 1, 1)) for _ in range(2)), n=4, r=4, N=5)
    with pytest.raises(ValueError, match="same shape"):
        x + wrong_shape
    with pytest.raises(TypeError, match="hadamard"):
        x * x
    with pytest.raises(TypeError):
        x + 1.0


def test_ndarray_times_train_is_the_train_scaled(rng):
    """NumPy's ndarray.__mul__ took `array * train` first and returned an
    object array of whole scaled trains; it now defers to the train."""
    x, x3 = stacked_pair(rng, X_RANKS)
    want = np.stack([naive_dense(*t.data) for t in x3])
    a = np.array([2.5, -0.5])
    for got, factor in ((a * x, a), (x * a, a), (np.float64(3.0) * x, 3.0), (np.float32(2.0) * x, 2.0)):
        assert isinstance(got, UniformTuckerTensorTrain)
        assert rel_err(got.to_dense(), np.reshape(factor, (-1, 1, 1, 1)) * want) < RTOL


# ---------------------------------------------------------------------------
# inner, norm, entries, apply
# ---------------------------------------------------------------------------

def test_inner_norm_entries_apply(xy, path, rng):
    x, y, xd, yd, _, _ = xy
    ip = x.inner(y)
    assert ip.shape == (2,)
    for s in range(2):
        assert abs(ip[s] - np.sum(xd[s] * yd[s])) <= RTOL * np.linalg.norm(xd[s]) * np.linalg.norm(yd[s])
        assert abs(x.norm()[s] - np.linalg.norm(xd[s])) <= RTOL * np.linalg.norm(xd[s])
    idx = np.array([[[0, 1, 1], [2, 3, 0]], [[1, 0, 1], [2, 2, 1]]])
    ent = x.entries(idx)
    assert ent.shape == (2, 2, 2)
    vs = [rng.standard_normal((4, n)) for n in SHAPE]
    app = x.apply(vs)
    assert app.shape == (2, 4)
    for s in range(2):
        want = xd[s][idx[..., 0], idx[..., 1], idx[..., 2]]
        assert rel_err(ent[s], want) < RTOL
        assert rel_err(app[s], np.einsum("abc,ka,kb,kc->k", xd[s], *vs)) < RTOL
    with pytest.raises(ValueError, match="indices"):
        x.entries(np.array([[0, 4, 0]]))
    with pytest.raises(TypeError, match="integer"):
        x.entries(np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"vectors\[1\]"):
        x.apply([np.ones(3), np.ones(5), np.ones(2)])


@pytest.mark.filterwarnings("error::RuntimeWarning")  # overflows are handled, not warned
def test_dense_entries_and_apply_keep_their_range(xy, path):
    """Cores far from 1 whose products fit (2**600 twice, 2**-600 twice) made to_dense,
    entries and apply inf or NaN (norm and inner gave the value): the chain
    now runs on power-of-two scaled cores, exactly, so such a train gives the
    bytes of the train it equals, padding of inf, NaN or 1e300 included."""
    x, _, _, _, _, _ = xy
    mU, mG = full_masks(x)
    idx = np.stack(np.unravel_index(np.arange(0, math.prod(x.shape), 7), x.shape), axis=-1)
    for dtype, k in ((np.float64, 600), (np.float32, 70)):
        near = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                        x.tt_supercore.astype(dtype), x.shape, x.masks)
        vs = [np.linspace(-1, 2, n).astype(dtype) for n in x.shape]
        want = (near.to_dense(), near.entries(idx), near.apply(vs))
        U, G = np.array(near.tucker_supercore), np.array(near.tt_supercore)
        U[0] *= dtype(2.0**k)  # partial products near 2**(2k): past the range
        G[0] *= dtype(2.0**k)
        U[-1] *= dtype(2.0**-k)
        G[-1] *= dtype(2.0**-k)
        for pad in (0, np.inf, np.nan, 1e300):
            with np.errstate(over="ignore"):
                far = UniformTuckerTensorTrain(np.where(mU, U, dtype(pad)),
                                               np.where(mG, G, dtype(pad)), x.shape, x.masks)
            got = (far.to_dense(), far.entries(idx), far.apply(vs))
            for w, g in zip(want, got):
                assert np.isfinite(w).all() and g.dtype == w.dtype
                np.testing.assert_array_equal(g, w, err_msg=f"{dtype.__name__}, pad {pad}")


def test_compact_puts_live_slots_first_and_cuts_the_padding(xy, path):
    """compact: prefix masks, the same tensor, padding zero and of the size
    asked (default: the largest live ranks), the input left alone; sizes
    below the live ranks are refused."""
    x, y, dx, dy, _, _ = xy
    for t, dense in ((x, dx), (x + y, [a + b for a, b in zip(dx, dy)])):
        keep = (np.array(t.tucker_supercore), np.array(t.tt_supercore))
        c = t.compact()
        n, r = int(t.tucker_ranks.max()), int(t.tt_ranks.max())
        assert c.padded_sizes == (n, r, t.padded_sizes[2])
        np.testing.assert_array_equal(c.tucker_ranks, t.tucker_ranks)
        np.testing.assert_array_equal(c.tt_ranks, t.tt_ranks)
        mk, mt = c.masks
        assert (mk == (np.arange(n) < c.tucker_ranks[..., None])).all()  # prefixes
        assert (mt == (np.arange(r) < c.tt_ranks[..., None])).all()
        for got, want in zip(c.to_dense(), dense):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        mU, mG = full_masks(c)
        assert not c.tucker_supercore[~mU].any() and not c.tt_supercore[~mG].any()
        np.testing.assert_array_equal(t.tucker_supercore, keep[0])
        np.testing.assert_array_equal(t.tt_supercore, keep[1])
        wide = t.compact(n=n + 2, r=r + 3)  # past the old padding too: zeros
        assert wide.padded_sizes == (n + 2, r + 3, t.padded_sizes[2])
        np.testing.assert_allclose(wide.to_dense(), c.to_dense(), rtol=1e-12, atol=1e-12)
        with pytest.raises(ValueError, match=f"`n` must be at least {n}, the largest live "
                                             f"Tucker rank"):
            t.compact(n=n - 1)
        with pytest.raises(ValueError, match=f"`r` must be at least {r}"):
            t.compact(r=r - 1)
        with pytest.raises(TypeError, match="`r` must be an int, not float"):
            t.compact(r=float(r))
        # growth is checked as from_t3's padding is, before any allocation
        with pytest.raises(ValueError, match="the result of `ut3_compact` has supercores .* "
                                             "too large to allocate; ask for smaller `n`, `r`"):
            t.compact(r=2**20)


def test_compact_of_prefix_masks_is_a_masked_slice(rng, monkeypatch, path):
    """svd's masks are prefixes (an optimizer loop compacts its result): the
    cut is then a slice of the supercores, masked at its own size, with the
    bytes of the general gather (which made index arrays as large as each
    gather's output and masked the whole padded train first: 8 trains of
    the asv Svd case compacted after svd(x + 0.1 y) 6.7-7.2 -> 0.32-0.41 ms)."""
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4)
    t = (x + 0.5 * x).svd(max_tt_ranks=2)[0]
    mU, mG = full_masks(t)
    U, G = np.array(t.tucker_supercore), np.array(t.tt_supercore)
    U[~mU], G[~mG] = np.nan, np.inf  # (padding is anything: masked on the way)
    t = UniformTuckerTensorTrain(U, G, t.shape, t.masks)
    nk, rt = int(t.tucker_ranks.max()), int(t.tt_ranks.max())
    assert t.padded_sizes[:2] == (8, 8) and nk < 7 and rt < 7
    # the live ranks, a cut above them, past the padding
    sizes = [(None, None), (nk + 1, rt + 1), (10, 11)]
    is_prefix = tt_ops._is_prefix
    monkeypatch.setattr(tt_ops, "_is_prefix", lambda mask: False)
    general = [t.compact(n=n, r=r) for n, r in sizes]
    monkeypatch.setattr(tt_ops, "_is_prefix", is_prefix)

    def refused(*args, **kwargs):
        raise AssertionError("a gather")
    monkeypatch.setattr(np, "take_along_axis", refused)
    for (n, r), want in zip(sizes, general, strict=True):
        got = t.compact(n=n, r=r)
        assert got.padded_sizes == want.padded_sizes
        for a, b in zip((got.tucker_supercore, got.tt_supercore, *got.masks),
                        (want.tucker_supercore, want.tt_supercore, *want.masks), strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    with pytest.raises(AssertionError, match="a gather"):  # not prefixes: the gather
        gappy(x, rng).compact()


def test_an_optimizer_loop_that_compacts_compiles_once(rng):
    """(a user review) x = svd(x + step) grew the padding every iteration --
    sums add padded sizes, svd keeps them: 6, 9, 12, ..., a new structure and
    a compile each time.  Compacted after each svd, the loop keeps one
    structure: no cache miss after its first iteration."""
    x, _ = stacked_pair(rng, X_RANKS, n=3, r=3)
    y, _ = stacked_pair(rng, Y_RANKS, n=3, r=3)
    sizes, misses = [], []
    for it in range(6):
        x, _ = (x + 0.1 * y).svd(max_tucker_ranks=3, max_tt_ranks=3)
        x = x.compact(n=3, r=3)
        float(x.norm().sum())  # the kernels of a step
        sizes.append(x.padded_sizes)
        misses.append(kernel_cache_info().misses)
    assert sizes == [(3, 3, 4)] * 6
    assert misses[1:] == [misses[1]] * 5, misses


def test_sums_with_other_things_are_refused_by_name(xy):
    """(a user review) ``train + array`` was NumPy's "does not support ufuncs
    (__array_ufunc__=None)", and a padded N mismatch said nothing of how to
    make them agree."""
    x = xy[0]
    for call, op in ((lambda: x + np.ones(3), "+"), (lambda: np.ones(3) + x, "+"),
                     (lambda: x - 2, "-"), (lambda: 2.0 - x, "-"), (lambda: [1] + x, "+")):
        with pytest.raises(TypeError, match=f"`\\{op}` takes two UniformTuckerTensorTrains "
                                            f".*not (ndarray|int|float|list); .*x.to_dense"):
            call()
    wide = UniformTuckerTensorTrain.from_t3(x.to_t3(), N=7)
    with pytest.raises(ValueError, match=r"same padded N, not 5 and 7; re-pad one, e\.g\. "
                                         r"UniformTuckerTensorTrain\.from_t3\(t\.to_t3\(\), N=7\)"):
        x + wide


def test_after_squash_tails_the_left_sweeps_last_core_holds_the_norm(xy):
    """As ut3_orthogonalize documents (a user review followed its "the last
    core carries the weight" on a sum, whose boundary ranks exceed 1, and got
    another number): squash_tails first, and the last core's norm is the
    train's."""
    x, y, _, _, _, _ = xy
    s = x + y
    assert (s.tt_ranks[..., 0] > 1).any()
    o = s.squash_tails().orthogonalize("left")
    mU, mG = full_masks(o)
    last = np.where(mG[-1], o.tt_supercore[-1], 0)
    want = s.norm("orthogonal")
    got = np.sqrt((last ** 2).sum(axis=(-3, -2, -1)))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_hadamard_and_scale_keep_cores_in_range(xy, path):
    """(a user review) A product of finite cores past the dtype's range made
    an inf core, and norm() NaN, though the tensor fit: a train whose first
    core holds 2**600 and second 2**-600 (the same tensor), squared by
    hadamard; a float32 one times 2**60 with 2**100 in its first core.  The
    products are now taken of power-of-two scaled cores, the scale spread
    over the TT cores; a tensor that does not fit gives inf, not NaN."""
    x = xy[0]
    for dtype, k in ((np.float64, 600), (np.float32, 100)):
        base = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                        x.tt_supercore.astype(dtype), x.shape, x.masks)
        G = np.array(base.tt_supercore)
        G[0], G[1] = np.ldexp(G[0], k), np.ldexp(G[1], -k)
        far = UniformTuckerTensorTrain(base.tucker_supercore, G, x.shape, x.masks)
        rtol = 1e-12 if dtype is np.float64 else 1e-5
        sq = far.hadamard(far)
        assert np.isfinite(sq.tt_supercore).all()
        np.testing.assert_allclose(sq.to_dense(), base.hadamard(base).to_dense(), rtol=rtol,
                                   atol=rtol * float(np.abs(base.hadamard(base).to_dense()).max()))
        np.testing.assert_allclose(sq.norm(), base.hadamard(base).norm(), rtol=rtol)
        if dtype is np.float32:
            times = far * 2.0**60
            assert np.isfinite(times.tt_supercore).all()
            want = np.ldexp(base.to_dense(), 60)
            np.testing.assert_allclose(times.to_dense(), want, rtol=rtol,
                                       atol=rtol * float(np.abs(want).max()))
        big = base * (2.0 ** (np.finfo(dtype).maxexp - 2))  # its square cannot fit
        with np.errstate(over="ignore"):
            assert np.isinf(big.hadamard(big).norm()).all()


def test_dense_entries_and_apply_near_the_top_of_the_range(xy, path):
    """(a user review) Entries that fit the dtype came back NaN where the
    product of the cores' maxima passed it: the scale of the range rescue
    was folded back into the last TT core, which became inf (inf - inf).  The
    scale now goes back on the result: the bytes of ldexp(the plain result),
    inf exactly where an entry does not fit."""
    x = xy[0]
    idx = np.stack(np.unravel_index(np.arange(0, math.prod(x.shape), 5), x.shape), axis=-1)
    for dtype in (np.float64, np.float32):
        base = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                        x.tt_supercore.astype(dtype), x.shape, x.masks)
        vs = [np.linspace(-1, 1, n).astype(dtype) for n in x.shape]
        plain = (base.to_dense(), base.entries(idx), base.apply(vs))
        top = int(np.frexp(max(float(np.abs(w).max()) for w in plain))[1])  # all < 2**top
        for k in (np.finfo(dtype).maxexp - top, np.finfo(dtype).maxexp - top + 1):
            U = np.array(base.tucker_supercore)
            U[0] = np.ldexp(U[0], k)  # exact: the train times 2**k
            far = UniformTuckerTensorTrain(U, base.tt_supercore, x.shape, x.masks)
            with np.errstate(over="ignore"):  # (an overflow warns, as NumPy's does)
                want = [np.ldexp(w, k) for w in plain]
                got = (far.to_dense(), far.entries(idx), far.apply(vs))
            assert np.isinf(want[0]).any() == (k > np.finfo(dtype).maxexp - top)
            for w, g in zip(want, got):
                assert not np.isnan(g).any() and g.dtype == w.dtype
                np.testing.assert_array_equal(g, w, err_msg=f"{dtype.__name__}, 2**{k}")


def test_apply_keeps_its_range_with_vectors_far_from_1(xy, path, monkeypatch):
    """Vectors of 2**k, 2**k, 2**-k (a contraction of 2**k times the unscaled
    one, which fits) made apply inf: the chain's partial products, core by
    core, reached 2**(2k).  Each query's vectors are now power-of-two scaled
    and the scale given back to its result, exactly, so the result is the
    bytes of the unscaled query times 2**k;
    integer and bool vectors give the dtype NumPy's promotion gives."""
    x = xy[0]
    rng = np.random.default_rng(5)
    for dtype, k in ((np.float64, 600), (np.float32, 70)):
        t = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                     x.tt_supercore.astype(dtype), x.shape, x.masks)
        vs = [rng.standard_normal((3, n)).astype(dtype) for n in x.shape]
        near = t.apply(vs)
        scales = (k, k) + (-k,) * (x.d - 2)
        up = [v * dtype(2.0**s) for v, s in zip(vs, scales)]
        want = np.ldexp(near, sum(scales))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # overflows are handled, not warned
            got = t.apply(up)
        assert np.isfinite(want).all() and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=dtype.__name__)
        # one query far, one near: each query keeps its own scale
        mixed = [np.stack([u[0], v[1]]) for u, v in zip(up, vs)]
        np.testing.assert_array_equal(t.apply(mixed), np.stack([want[:, 0], near[:, 1]], 1))
        ints = [np.arange(n) - 2 for n in x.shape]
        np.testing.assert_array_equal(
            t.apply(ints), t.apply([v.astype(np.result_type(dtype, np.int64)) for v in ints]))
        assert t.apply([v > 0 for v in ints]).dtype == dtype
        with monkeypatch.context() as m, np.errstate(all="ignore"):  # (what it gave before)
            m.setattr(tt_ops, "_row_scales", lambda xp, rows, dt: None)
            assert not np.isfinite(t.apply(up)).all()


def test_norm_and_inner_keep_their_range_and_digits(xy, path):
    """Both norm methods agree with the dense norm; entries far from 1 (squares
    or partial products past the dtype's range: the chain gave NaN or 0) give
    the norm and inner product that fit; "orthogonal" keeps the digits of a
    difference of nearly equal trains, which "inner" loses (documented)."""
    x, _, xd, _, _, _ = xy
    want = np.array([np.linalg.norm(t) for t in xd])
    U, G = np.array(x.tucker_supercore), np.array(x.tt_supercore)

    def far(dtype, up, down):  # core 0 scaled up, core 1 down: the product fits
        G2 = G.astype(dtype)
        G2[0] *= dtype(2.0**up)
        G2[1] *= dtype(2.0**-down)
        return UniformTuckerTensorTrain(U.astype(dtype), G2, x.shape, x.masks)

    mU, mG = full_masks(x)
    for method in NORM_METHODS:
        assert rel_err(x.norm(method), want) < RTOL
        for k in (520, -560):  # exact scalings whose squares leave float64
            assert rel_err((x * 2.0**k).norm(method) * 2.0**-k, want) < RTOL
        assert rel_err(far(np.float64, 1000, 340).norm(method) * 2.0**-660, want) < RTOL
        for pad in (np.inf, np.nan, 1e300):  # padding must not pick the scale
            y = far(np.float64, 600, 0)
            y = UniformTuckerTensorTrain(np.where(mU, y.tucker_supercore, pad),
                                         np.where(mG, y.tt_supercore, pad), x.shape, x.masks)
            assert rel_err(y.norm(method) * 2.0**-600, want) < RTOL, (method, pad)
        got = far(np.float32, 100, 40).norm(method)
        assert got.dtype == np.float32 and rel_err(got * 2.0**-60, want) < 1e-5
    assert rel_err(x.inner(x * 2.0**500) * 2.0**-500, want**2) < RTOL
    assert rel_err((x * 2.0**-500).inner(x * 2.0**-500) * 2.0**1000, want**2) < RTOL
    w = x * (1 + 2.0**-33)
    exact = np.array([np.linalg.norm(a - b) for a, b in zip(xd, w.to_dense())])
    assert rel_err((x - w).norm("orthogonal"), exact) < 1e-4
    one = UniformTuckerTensorTrain.from_t3(x.to_t3()[0])  # unstacked: a 0-d array
    assert type(one.norm()) is np.ndarray and one.norm().shape == ()
    with pytest.raises(ValueError, match="`method`"):
        x.norm("gram")


def test_norm_of_wide_factors_fits_where_its_square_does_not(path):
    """Entries of 1 everywhere, but each Gram step grows by the factor's width:
    16 Tucker factors of 8192 ones have the norm 2**104 (fits float32), its
    square 2**208 (does not); 128 factors of 4096 ones 2**768 (fits float64),
    its square 2**1536.  "inner" gave inf for both (its rescue scaled the
    largest entries, already 1); "orthogonal" summed the last core's squares
    (an overflow error in float64)."""
    for dtype, d, width in ((np.float32, 16, 2**13), (np.float64, 128, 2**12)):
        t3 = TuckerTensorTrain([np.ones((1, width), dtype)] * d,
                               [np.ones((1, 1, 1), dtype)] * d)
        x = UniformTuckerTensorTrain.from_t3(t3)
        log2_norm = d * int(math.log2(width)) // 2
        want = 2.0**log2_norm
        for method in NORM_METHODS:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                got = x.norm(method)
            assert got.dtype == dtype and abs(got / want - 1) < 1e-4, (dtype, method, got)
        # inner keeps the mantissa apart from the exponent: x . (x / 2**k) fits
        assert abs(x.inner(x * 2.0**-log2_norm) / want - 1) < 1e-5


def test_numba_and_array_module_paths_agree(xy, monkeypatch):
    x, y, _, _, _, _ = xy
    idx = np.array([[0, 1, 1], [2, 3, 0]])
    results = {}
    for flag in (True, False):
        monkeypatch.setattr(tt_ops, "_NUMBA_CPU", flag)
        results[flag] = (x.to_dense(), x.inner(y), x.entries(idx), (x + y).svd(2, 2)[0].to_dense())
    for a, b in zip(results[True], results[False]):
        assert rel_err(a, b) < RTOL


# ---------------------------------------------------------------------------
# padding content is don't-care
# ---------------------------------------------------------------------------

def _all_results(x, y):
    """A result per operation, as dense arrays or values (real parts only)."""
    idx = np.array([[0, 1, 1], [2, 3, 0]])
    vs = [np.linspace(-1, 1, n) for n in SHAPE]
    out = {
        "to_dense": x.to_dense(), "inner": x.inner(y), "norm": x.norm(), "entries": x.entries(idx),
        "apply": x.apply(vs), "add": (x + y).to_dense(), "sub": (x - y).to_dense(),
        "neg": (-x).to_dense(), "scale": (2 * x).to_dense(), "hadamard": x.hadamard(y).to_dense(),
        "reverse": x.reverse().to_dense(), "squash": x.squash_tails().to_dense(),
        "stack": UniformTuckerTensorTrain.stack([x, y]).unstack()[1].to_dense(),
        "apply_masks": x.apply_masks().to_dense(),
        "t3": np.concatenate([np.concatenate([c.ravel() for c in t.tucker_cores + t.tt_cores])
                              for t in leaves(x.to_t3())]),
    }
    for kind in ORTHOGONALIZE_KINDS:
        o = x.orthogonalize(kind)
        out["orth_" + kind] = np.concatenate([o.to_dense().ravel(), o.tucker_supercore.ravel(), o.tt_supercore.ravel()])
    tr, (tsv, ttsv) = x.svd(max_tucker_ranks=2, max_tt_ranks=2)
    out["svd"] = np.concatenate([tr.to_dense().ravel(), tsv.ravel(), ttsv.ravel()])
    return out


def test_garbage_in_padding_changes_nothing(xy, path, rng):
    x, y, _, _, _, _ = xy
    clean = _all_results(x, y)
    dirty = _all_results(with_garbage(x, rng), with_garbage(y, rng))
    for name in clean:
        assert rel_err(dirty[name], clean[name]) < 1e-8, name


# ---------------------------------------------------------------------------
# orthogonalization and SVD
# ---------------------------------------------------------------------------

def _check_orthonormal(mats, masks_rows, masks_cols):
    """Each matrix: columns orthonormal on its real rows, zero elsewhere."""
    for M, rows, cols in zip(mats, masks_rows, masks_cols):
        assert not M[~rows, :].any() and not M[:, ~cols].any()
        k = cols.sum()
        Q = M[np.ix_(rows, cols)]
        np.testing.assert_allclose(Q.T @ Q, np.eye(k), atol=1e-12)


def check_orthogonality(o, kind):
    """Check the defining property of each kind on every stack element."""
    mk, mt = (m.reshape(m.shape[0], -1, m.shape[-1]) for m in o.masks)
    d, S = o.d, mk.shape[1]
    U = o.tucker_supercore.reshape(d, S, *o.tucker_supercore.shape[-2:])
    G = o.tt_supercore.reshape(d, S, *o.tt_supercore.shape[-3:])
    phys = np.arange(U.shape[-1]) < np.array(o.shape)[:, None]
    for s in range(S):
        for i in range(d):
            assert (mk[i, s] == (np.arange(mk.shape[-1]) < mk[i, s].sum())).all()  # prefix
            if kind != "tt_up":
                _check_orthonormal([U[i, s].T], [phys[i]], [mk[i, s]])
        if kind == "tt_up":
            for i in range(d):
                A = G[i, s].transpose(0, 2, 1).reshape(-1, G.shape[3])
                rows = (mt[i, s][:, None] & mt[i + 1, s][None, :]).ravel()
                _check_orthonormal([A], [rows], [mk[i, s]])
        if kind == "left":
            for i in range(d - 1):
                A = G[i, s].reshape(-1, G.shape[-1])
                rows = (mt[i, s][:, None] & mk[i, s][None, :]).ravel()
                _check_orthonormal([A], [rows], [mt[i + 1, s]])
        if kind == "right":
            for i in range(1, d):
                A = G[i, s].reshape(G.shape[2], -1).T
                rows = (mk[i, s][:, None] & mt[i + 1, s][None, :]).ravel()
                _check_orthonormal([A], [rows], [mt[i, s]])


@pytest.mark.parametrize("kind", ORTHOGONALIZE_KINDS)
def test_orthogonalize_matches_ragged(xy, kind):
    x, _, xd, _, _, _ = xy
    o = x.orthogonalize(kind)
    assert o.padded_sizes == x.padded_sizes
    check_orthogonality(o, kind)
    dense = o.to_dense()
    for s, (got, src) in enumerate(zip(o.to_t3(), x.to_t3())):
        assert rel_err(dense[s], xd[s]) < RTOL
        assert_cores_close(got, ref_orthogonalize(*src.data, kind))


def regauged(x, rng, k):
    """The same tensors under a random power-of-two gauge (``2**j``, ``j`` in
    ``[-k, k]``, per stack element): each Tucker row times ``2**j`` and its
    TT core's mode slice times ``2**-j``; each inner bond index's left
    core's slice times ``2**j`` and the right core's times ``2**-j``."""
    U, G = np.array(x.tucker_supercore), np.array(x.tt_supercore)
    d, n, r = x.d, G.shape[-2], G.shape[-1]
    U, G = U.reshape(d, -1, n, U.shape[-1]), G.reshape(d, -1, r, n, r)
    S = G.shape[1]
    for i in range(d):
        t = np.ldexp(1.0, rng.integers(-k, k + 1, (S, n)))
        U[i] *= t[:, :, None]
        G[i] /= t[:, None, :, None]
    for b in range(1, d):
        s = np.ldexp(1.0, rng.integers(-k, k + 1, (S, r)))
        G[b - 1] *= s[:, None, None, :]
        G[b] /= s[:, :, None, None]
    return UniformTuckerTensorTrain(U.reshape(x.tucker_supercore.shape),
                                    G.reshape(x.tt_supercore.shape), x.shape, x.masks)


def test_orthogonalize_and_svd_do_not_depend_on_a_power_of_two_gauge(xy, path):
    """A frame is the SVD of one core's unfolding, accurate relative to its
    largest entry: Tucker rows of 2**-40 and 2**40 (their TT core slices
    2**40 and 2**-40) lost the small row in "tucker_down", "left", "right"
    and the SVD (relative errors 0.5-0.9), a graded bond gauge lost the
    small slices in "tt_up" (1e29).  The cores are balanced first, so a
    power-of-two regauging changes nothing, to the bit."""
    x, _, xd, _, _, _ = xy
    x32 = UniformTuckerTensorTrain(np.float32(x.tucker_supercore), np.float32(x.tt_supercore),
                                   x.shape, x.masks)
    ops = {kind: (lambda t, kind=kind: t.orthogonalize(kind)) for kind in ORTHOGONALIZE_KINDS}
    ops["svd"] = lambda t: t.svd()[0]
    ops["svd, truncated"] = lambda t: t.svd(max_tucker_ranks=2, max_tt_ranks=2)[0]
    for x, rtol in ((x, RTOL), (x32, 1e-5)):
        for k in (3, 40):
            y = regauged(x, np.random.default_rng(k), k)
            for what, op in ops.items():
                a, b = op(x), op(y)
                assert b.tt_supercore.dtype == x.tt_supercore.dtype
                if "truncated" not in what:
                    for s, want in enumerate(xd):
                        assert rel_err(b.to_dense()[s], want) < rtol, (what, k, s)
                np.testing.assert_array_equal(b.tucker_supercore, a.tucker_supercore, what)
                np.testing.assert_array_equal(b.tt_supercore, a.tt_supercore, what)
        svs = x.svd()[1], y.svd()[1]
        for got, want in zip(*svs):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ORTHOGONALIZE_KINDS)
def test_orthogonalize_rank_deficient_is_pad_safe(rng, path, kind):
    """x + x and x * x have exactly rank-deficient cores: the frames must stay
    orthonormal and zero on the padding anyway."""
    x, x3 = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    for z, want in ((x + x, [2 * naive_dense(*t.data) for t in x3]),
                    (x.hadamard(x), [naive_dense(*t.data) ** 2 for t in x3])):
        o = z.orthogonalize(kind)
        check_orthogonality(o, kind)
        for s in range(2):
            assert rel_err(o.to_dense()[s], want[s]) < 1e-9


def test_svd_without_truncation_gives_unfolding_singular_values(xy, path):
    x, _, xd, _, _, _ = xy
    tr, (tsv, ttsv) = x.svd()
    assert tsv.shape == (3, 2, 4) and ttsv.shape == (2, 2, 4)
    check_orthogonality(tr, "left")
    np.testing.assert_array_equal(tr.tt_ranks[[0, -1]], 1)
    for s in range(2):
        D = xd[s]
        assert rel_err(tr.to_dense()[s], D) < RTOL
        for i in range(3):
            want = np.linalg.svd(np.moveaxis(D, i, 0).reshape(SHAPE[i], -1), compute_uv=False)
            k = min(len(want), int(x.tucker_ranks[i, s]), int(x.tt_ranks[i, s] * x.tt_ranks[i + 1, s]))
            np.testing.assert_allclose(tsv[i, s, :k], want[:k], rtol=1e-9, atol=1e-12 * want[0])
            assert not tsv[i, s, k:].any()
        for b in range(2):
            want = np.linalg.svd(D.reshape(int(np.prod(SHAPE[: b + 1])), -1), compute_uv=False)
            k = int(tr.tt_ranks[b + 1, s])
            np.testing.assert_allclose(ttsv[b, s, :k], want[:k], rtol=1e-9, atol=1e-12 * want[0])


@pytest.mark.parametrize("max_tk,max_tt", [(2, 2), ((1, 3, 2), (1, 2))])
def test_svd_truncation_matches_ragged_and_bounds_error(xy, path, max_tk, max_tt):
    x, _, xd, _, _, _ = xy
    tr, (tsv, ttsv) = x.svd(max_tucker_ranks=max_tk, max_tt_ranks=max_tt)
    d = 3
    mtk = [max_tk] * d if isinstance(max_tk, int) else list(max_tk)
    mtt = [max_tt] * (d - 1) if isinstance(max_tt, int) else list(max_tt)
    assert (tr.tucker_ranks <= np.array(mtk)[:, None]).all()
    assert (tr.tt_ranks[1:-1] <= np.array(mtt)[:, None]).all()
    check_orthogonality(tr, "left")
    dense = tr.to_dense()
    cut = []
    for s, (got, src) in enumerate(zip(tr.to_t3(), x.to_t3())):
        (rtk, rtt), rtsv, rttsv = ref_svd(*src.data, mtk, mtt)
        assert_cores_close(got, (rtk, rtt))
        for i in range(d):
            np.testing.assert_allclose(tsv[i, s, : len(rtsv[i])], rtsv[i], rtol=1e-9, atol=1e-12)
        for b in range(d - 1):
            np.testing.assert_allclose(ttsv[b, s, : len(rttsv[b])], rttsv[b], rtol=1e-9, atol=1e-12)
        # Sequential truncation with everything else orthonormal: the errors
        # of the steps are mutually orthogonal, so error^2 is exactly the sum
        # of every discarded sigma^2.
        discarded = sum(np.sum(tsv[i, s, tr.tucker_ranks[i, s]:] ** 2) for i in range(d))
        discarded += sum(np.sum(ttsv[b, s, tr.tt_ranks[b + 1, s]:] ** 2) for b in range(d - 1))
        err2 = np.sum((dense[s] - xd[s]) ** 2)
        np.testing.assert_allclose(err2, discarded, rtol=1e-8, atol=1e-12 * np.sum(xd[s] ** 2))
        cut.append(err2 / np.sum(xd[s] ** 2))
    assert max(cut) > 1e-3  # the truncation really cut something


def assert_minimal_ranks(tr):
    """Lossless bounds: n_i <= r_i r_{i+1}, r_{i+1} <= r_i n_i, r_i <= n_i r_{i+1}."""
    nk, nt = tr.tucker_ranks, tr.tt_ranks
    assert (nk <= nt[:-1] * nt[1:]).all(), (nk, nt)
    assert (nt[1:] <= nt[:-1] * nk).all() and (nt[:-1] <= nk * nt[1:]).all(), (nk, nt)


@pytest.mark.parametrize("max_tk,max_tt,want_tk,want_tt", [  # ranks (d,) / (d + 1,) + stack
    (None, 1, [[1, 1]] * 3, [[1, 1]] * 4),  # Tucker ranks cut after their right bond
    ((3, 2, 1), (1, 2), [[1, 1]] * 3, [[1, 1]] * 4),  # and a bond cut by the ranks to its right
    ((3, 3, 1), None, [[3, 1], [3, 1], [1, 1]], [[1, 1], [3, 1], [1, 1], [1, 1]]),  # a bond only
])
def test_svd_ranks_are_minimal_where_a_truncation_binds(rng, path, max_tk, max_tt, want_tk,
                                                        want_tt):
    """Core i's Tucker rank was truncated before bond i + 1, and a bond before
    the ranks to its right: svd(max_tt_ranks=1) of Tucker ranks 3, TT ranks
    1-3-3-1 gave Tucker ranks [3, 3, 1] with every TT rank 1 (a second svd
    gave [1, 1, 1]); svd((3, 2, 1), (1, 2)) kept bond 2 at 2 beside n_2 = 1.
    The values, singular values and error are those of the sweep (ref_svd)."""
    d = 3
    mtk = [max_tk] * d if isinstance(max_tk, int) else max_tk and list(max_tk)
    mtt = [max_tt] * (d - 1) if isinstance(max_tt, int) else max_tt and list(max_tt)
    # element 0: the reviewer's train; element 1: ranks 1, where nothing binds
    t3s = (rand_t3(rng, (5, 5, 5), (3, 3, 3), (1, 3, 3, 1)), rand_t3(rng, (5, 5, 5), (1,) * 3, (1,) * 4))
    plain = UniformTuckerTensorTrain.from_t3(t3s, n=4, r=4)
    for x in (plain, plain + plain.hadamard(plain)):  # gappy and rank deficient
        tr, (tsv, ttsv) = x.svd(max_tk, max_tt)
        check_orthogonality(tr, "left")
        assert_minimal_ranks(tr)
        again = tr.svd()[0]  # nothing left to compress losslessly
        np.testing.assert_array_equal(again.tucker_ranks, tr.tucker_ranks)
        np.testing.assert_array_equal(again.tt_ranks, tr.tt_ranks)
        if x is plain:
            np.testing.assert_array_equal(tr.tucker_ranks, want_tk)
            np.testing.assert_array_equal(tr.tt_ranks, want_tt)
        dense, full = tr.to_dense(), x.to_dense()
        for s, src in enumerate(x.to_t3()):
            (rtk, rtt), rtsv, rttsv = ref_svd(*src.data, mtk, mtt)
            assert rel_err(dense[s], naive_dense(rtk, rtt)) < 1e-9
            for i in range(d):
                np.testing.assert_allclose(tsv[i, s, : len(rtsv[i])], rtsv[i], rtol=1e-9, atol=1e-9)
            # the error is the sum of the sigma^2 past the limits, whatever ranks
            # the lossless steps leave below them
            discarded = sum(np.sum(tsv[i, s, mtk[i]:] ** 2) for i in range(d)) if mtk else 0
            discarded += sum(np.sum(ttsv[b, s, mtt[b]:] ** 2) for b in range(d - 1)) if mtt else 0
            err2 = np.sum((dense[s] - full[s]) ** 2)
            np.testing.assert_allclose(err2, discarded, rtol=1e-8, atol=1e-12 * np.sum(full[s] ** 2))
        if x is plain:  # the element where no bound binds keeps the sweep's cores
            assert_cores_close(tr.to_t3()[1], ref_svd(*t3s[1].data, mtk, mtt)[0])


def test_unstacked_trains_match_ragged(rng, path):
    """The same comparisons without a stack axis (and a gappy structure)."""
    x3 = rand_t3(rng, (3, 2, 4, 2), (2, 2, 3, 1), (2, 3, 2, 2, 1))
    y3 = rand_t3(rng, (3, 2, 4, 2), (1, 2, 2, 2), (1, 2, 2, 1, 2))
    x = gappy(UniformTuckerTensorTrain.from_t3(x3, n=3, r=4), rng)
    y = UniformTuckerTensorTrain.from_t3(y3, n=2, r=3, N=4)
    xd, yd = naive_dense(*x3.data), naive_dense(*y3.data)
    assert x.stack_shape == () and isinstance(x.to_t3(), TuckerTensorTrain)
    assert rel_err(x.to_dense(), xd) < RTOL
    assert abs(x.inner(y) - np.sum(xd * yd)) < RTOL * np.linalg.norm(xd) * np.linalg.norm(yd)
    # The real slots of the gappy x, in mask order: a permutation of x3's.
    xr, yr = x.to_t3().data, y.to_t3().data
    assert_cores_close(y.to_t3(), y3, rtol=0)
    assert_cores_close((x + y).to_t3(), ref_add(xr, yr))
    assert_cores_close(x.hadamard(y).to_t3(), ref_hadamard(xr, yr))
    for kind in ORTHOGONALIZE_KINDS:
        assert_cores_close(x.orthogonalize(kind).to_t3(), ref_orthogonalize(*xr, kind))
    tr, (tsv, ttsv) = x.svd(max_tucker_ranks=2, max_tt_ranks=(2, 1, 2))
    (rtk, rtt), rtsv, rttsv = ref_svd(*xr, [2] * 4, [2, 1, 2])
    assert_cores_close(tr.to_t3(), (rtk, rtt))
    for i in range(4):
        np.testing.assert_allclose(tsv[i, : len(rtsv[i])], rtsv[i], rtol=1e-9, atol=1e-12)
    for b in range(3):
        np.testing.assert_allclose(ttsv[b, : len(rttsv[b])], rttsv[b], rtol=1e-9, atol=1e-12)


def test_svd_rtol_cuts_the_numerically_zero_directions_of_a_sum(xy, path):
    """(x + x).svd() kept the sum's doubled ranks (singular values of 1e-31 kept;
    a user review); with rtol each step cuts at rtol times its largest value,
    per stack element: the ranks are x's own, and the error is still exactly
    the discarded values."""
    x, y, xd, yd, _, _ = xy
    own, _ = x.svd()  # x's minimal ranks
    plain, _ = (x + x).svd()
    assert (plain.tucker_ranks > own.tucker_ranks).any()  # what rtol is for
    tr, (tsv, ttsv) = (x + x).svd(rtol=1e-12)
    np.testing.assert_array_equal(tr.tucker_ranks, own.tucker_ranks)
    np.testing.assert_array_equal(tr.tt_ranks, own.tt_ranks)
    check_orthogonality(tr, "left")
    for s in range(2):
        assert rel_err(tr.to_dense()[s], 2 * xd[s]) < 1e-9
    # a tolerance that binds: each step keeps the values above rtol * its first
    rtol = 0.3
    cut, (tsv, ttsv) = (x + y).svd(rtol=rtol)
    dense, want = cut.to_dense(), np.asarray(xd) + np.asarray(yd)
    for s in range(2):
        for i in range(3):  # (a lossless bound may cut further, never less)
            assert cut.tucker_ranks[i, s] <= max(1, (tsv[i, s] > rtol * tsv[i, s, 0]).sum())
            assert (tsv[i, s, :cut.tucker_ranks[i, s]] > rtol * tsv[i, s, 0]).all()
        for b in range(2):
            assert cut.tt_ranks[b + 1, s] <= max(1, (ttsv[b, s] > rtol * ttsv[b, s, 0]).sum())
            assert (ttsv[b, s, :cut.tt_ranks[b + 1, s]] > rtol * ttsv[b, s, 0]).all()
        discarded = sum(np.sum(tsv[i, s, cut.tucker_ranks[i, s]:] ** 2) for i in range(3))
        discarded += sum(np.sum(ttsv[b, s, cut.tt_ranks[b + 1, s]:] ** 2) for b in range(2))
        err2 = np.sum((dense[s] - want[s]) ** 2)
        assert err2 > 1e-6 * np.sum(want[s] ** 2)  # it cut something
        np.testing.assert_allclose(err2, discarded, rtol=1e-8, atol=1e-12 * np.sum(want[s] ** 2))
    # with max ranks too, the smaller of the two wins
    both, _ = (x + y).svd(max_tt_ranks=1, rtol=rtol)
    assert (both.tt_ranks <= 1).all()
    assert (both.tucker_ranks <= cut.tucker_ranks).all()
    # a zero train (all singular values 0, none above rtol * 0) keeps one slot
    zero, _ = (x * 0.0).svd(rtol=0.5)
    assert (zero.tucker_ranks == 1).all() and (zero.tt_ranks == 1).all()
    assert not zero.to_dense().any()
    for bad in (-0.1, 1.0, True, "1e-3", np.nan):
        with pytest.raises(ValueError, match=r"`rtol` must be a number in \[0, 1\)"):
            x.svd(rtol=bad)


def test_svd_rank_arguments_are_checked(rng):
    x, _ = stacked_pair(rng, X_RANKS)
    with pytest.raises(ValueError, match="max_tt_ranks"):
        x.svd(max_tt_ranks=(1, 2, 3))
    with pytest.raises(ValueError, match=r"`max_tucker_ranks` must be a positive int or a "
                                         r"sequence of \d+ positive ints, not 0\.$"):
        x.svd(max_tucker_ranks=0)  # the value as given, not the list made of it
    with pytest.raises(ValueError, match="kind"):
        x.orthogonalize("up")
    for bad in (True, 2.0, "2"):  # int() would have read these as 1 / 2
        with pytest.raises(TypeError, match="max_tt_ranks"):
            x.svd(max_tt_ranks=bad)


def test_non_finite_live_entries_are_refused_before_lapack(rng):
    """inf in a live entry made LAPACK's SVD loop forever; NaN failed to converge."""
    for bad in (np.inf, np.nan):
        U = rng.standard_normal((2, 5))
        U[:, 3:] = bad
        x = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain([U], [np.ones((1, 2, 1))]), n=4)
        calls = [x.svd] + [lambda k=k: x.orthogonalize(k)
                           for k in ("left", "right", "tucker_down", "tt_up")]
        for call in calls:  # "tt_up" returned a NaN train instead
            with pytest.raises(ValueError, match="inf or NaN in a live entry"):
                call()
    # on CuPy the check reads a bool back per SVD step: the docs claimed no
    # device-to-host synchronization at all
    from zorch_nb import tt
    assert "no device-to-host synchronization" not in tt.__doc__
    assert "synchronize with the device: every SVD step" in " ".join(tt.__doc__.split())
    for func in (tt_ops.ut3_svd, tt_ops.ut3_orthogonalize):
        assert "On CuPy" in func.__doc__ and "synchronizes" in func.__doc__


def test_scale_and_hadamard_keep_factors_and_small_products(rng):
    """(a user review) The factor of a scale was rounded to the train's dtype
    before the range check: a float32 train of 1e-20 divided by 1e-39 or
    times 1e39 gave inf, one of 1e20 times 1e-46 gave 0 (the results are
    1e19 and 1e-26).  And products that underflow were not looked for:
    cores of 1e-200 and 1e200 times 1e-200, or a hadamard with cores of
    1e-200 and 1.0, gave the exact zero tensor of a 1e-200 one."""
    def train(values, dtype=np.float64):
        return UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
            [np.array([[1.0, 2.0]], dtype)] * len(values),
            [np.full((1, 1, 1), v, dtype) for v in values]))

    small, big = train([1e-20], np.float32), train([1e20], np.float32)
    for got, want in (((small / 1e-39), [1e19, 2e19]), ((small * 1e39), [1e19, 2e19]),
                      ((big * 1e-46), [1e-26, 2e-26]), ((big / 1e46), [1e-26, 2e-26])):
        assert got.tt_supercore.dtype == np.float32
        assert rel_err(got.to_dense().astype(np.float64), np.array(want)) < 1e-6
    # NumPy scalars and arrays promote as NumPy does (NEP 50: by their dtype),
    # Python numbers do not; the result is the dense tensor's times alpha
    dense = small.to_dense()
    for alpha in (np.float64(1e39), np.array(1e39), np.array(3.0), np.int64(3),
                  np.float32(1e30), np.int8(3), True, 2, 2.5, np.bool_(True)):
        got = small * alpha
        strong = getattr(alpha, "dtype", None)  # (NumPy 1.x's result_type reads values)
        want_dt = np.float32 if strong is None else np.result_type(np.float32, strong)
        assert got.tt_supercore.dtype == want_dt, alpha
        assert got.tucker_supercore.dtype == got.tt_supercore.dtype
        want = dense.astype(np.float64) * np.float64(alpha if np.ndim(alpha) == 0 else alpha[()])
        assert rel_err(got.to_dense().astype(np.float64), want) < 1e-6, alpha
    assert (small / np.float64(1e-39)).tt_supercore.dtype == np.float64
    with np.errstate(divide="ignore"):
        assert (small / 0).tt_supercore.dtype == np.float32  # (a Python 0 stays weak)
    a = train([1e-200, 1e200])
    pair = np.outer([1.0, 2.0], [1.0, 2.0])
    for dtype, tiny, t in ((np.float64, 1e-200, a), (np.float32, 1e-30, train([1e-30, 1e30],
                                                                            np.float32))):
        rtol = RTOL if dtype is np.float64 else 1e-6
        assert rel_err((t * tiny).to_dense(), tiny * pair) < rtol
        other = train([tiny, 1.0], dtype)
        assert rel_err(t.hadamard(other).to_dense(), tiny * pair * pair) < rtol
    # a product that truly underflows is 0, as the dense tensor's would be
    with np.errstate(under="ignore"):
        assert not (a * 1e-200 * 1e-200).to_dense().any()


def test_cores_with_entries_far_apart_and_factors_past_the_float_range():
    """(a second user review of the range rescue) (1) A core holding 1e300 and
    1e-300 on two bond indices whose partners hold 1e-300 and 5e299 -- the
    tensor [1, 0.5] -- came out as the zero tensor from to_dense, norm, inner,
    svd and every orthogonalization (hadamard NaN): the rescue divided each
    core by its largest entry; powers of two are now first moved across each
    bond and Tucker index (_balanced).  (2) A one-core train near the top of
    the range, negated or times a train near 1, overflowed its only TT core
    ([-inf, nan]): the scale is spread over the Tucker cores too.  (3) x / a
    subnormal divisor was inf (1 / alpha taken in alpha's precision); Python
    ints and Fractions past the float range were refused or taken as 0."""
    from fractions import Fraction
    E2, one = np.eye(2), np.ones((1, 1))

    def train(tucker, tt, dtype=np.float64):
        return UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
            [np.asarray(u, dtype) for u in tucker], [np.asarray(g, dtype) for g in tt]))

    for dtype, hi, lo in ((np.float64, 1e300, 1e-300), (np.float32, 1e25, 1e-25)):
        g0 = np.zeros((1, 2, 2))
        g0[0, 0, 0], g0[0, 1, 1] = hi, lo
        x = train([E2, one], [g0, np.array([lo, hi / 2]).reshape(2, 1, 1)], dtype)
        want, rtol = np.array([1.0, 0.5]), (1e-14 if dtype is np.float64 else 1e-6)
        assert rel_err(x.to_dense().ravel(), want) < rtol
        assert rel_err(x.entries(np.array([[0, 0], [1, 0]])), want) < rtol
        for norm in (x.norm(), x.norm("orthogonal"), np.sqrt(x.inner(x))):
            assert abs(norm - np.sqrt(1.25)) < rtol
        s, (_, tt_svs) = x.svd()
        assert rel_err(s.to_dense().ravel(), want) < rtol
        assert abs(tt_svs.ravel()[0] - np.sqrt(1.25)) < rtol
        for kind in ORTHOGONALIZE_KINDS:
            assert rel_err(x.orthogonalize(kind).to_dense().ravel(), want) < rtol, kind
        assert rel_err(x.hadamard(x).to_dense().ravel(), want ** 2) < rtol
    top = train([E2], [np.array([1.5e308, 1.0]).reshape(1, 2, 1)])
    for got, want in (((-top), [-1.5e308, -1.0]), ((top * 1.0), [1.5e308, 1.0]),
                      ((top / 1), [1.5e308, 1.0]),
                      (top.hadamard(train([E2], [np.array([0.9, 1.0]).reshape(1, 2, 1)])),
                       [1.35e308, 1.0])):
        assert np.abs(got.to_dense().ravel() / np.array(want) - 1).max() < 1e-15
    tiny = train([one], [[[[1e-300]]]])
    for divisor in (1e-320, np.float64(1e-320), np.array(1e-320)):
        assert rel_err((tiny / divisor).to_dense().ravel(), np.array([1e-300 / 1e-320])) < 1e-12
    t32 = train([one], [[[[1e-30]]]], np.float32)
    got = t32 / np.float32(1e-40)  # a float32 subnormal: its own value, 9.99995e-41
    assert got.tt_supercore.dtype == np.float32
    assert rel_err(got.to_dense().ravel(), np.array([1e-30 / float(np.float32(1e-40))])) < 1e-6
    huge = train([one], [[[[1e300]]]])
    for got in (huge * Fraction(1, 10**400), huge / 10**400):
        assert rel_err(got.to_dense().ravel(), np.array([1e-100])) < 1e-15
    assert rel_err((train([one], [[[[1e-300]]]]) * 10**400).to_dense().ravel(),
                   np.array([1e100])) < 1e-15
    # inner / norm(): a Gram chain through a subnormal lost digits (1e-5 off)
    for dtype, lo, hi in ((np.float64, 1.2345678901234567e-160, 1.1e160),
                          (np.float32, 1.2345678e-20, 1.1e20)):
        pair = train([one, one], [[[[lo]]], [[[hi]]]], dtype)
        want = float(dtype(lo)) * float(dtype(hi))
        assert abs(pair.norm() / want - 1) < 8 * np.finfo(dtype).eps
        assert abs(pair.inner(pair) / want**2 - 1) < 8 * np.finfo(dtype).eps
    # the ragged train's to_dense had no rescue (it gave 0 for a tensor of 1e-100)
    ragged = TuckerTensorTrain([one] * 3, [np.full((1, 1, 1), v) for v in (1e-200, 1e-200, 1e300)])
    assert abs(ragged.to_dense().ravel()[0] / 1e-100 - 1) < 1e-15
    rng = np.random.default_rng(4)
    tk = [rng.standard_normal((2, 3, 4)) for _ in range(2)]
    tt = [rng.standard_normal((2, 1, 3, 2)), rng.standard_normal((2, 2, 3, 1))]
    far = TuckerTensorTrain(tk, [tt[0] * 2.0**700, tt[1] * 2.0**-700]).to_dense()
    assert far.shape == (2, 4, 4)
    assert rel_err(far, TuckerTensorTrain(tk, tt).to_dense()) < 1e-14
    # squash_tails sums boundary slots: 1e308 + 1e308 beside a core of 1e-10 (2e298)
    pair = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
        [one, one], [np.full((2, 1, 1), 1e308), np.full((1, 1, 1), 1e-10)]))
    squashed = pair.squash_tails()
    assert (squashed.tt_ranks[..., 0] == 1).all() and (squashed.tt_ranks[..., -1] == 1).all()
    assert abs(squashed.to_dense().ravel()[0] / 2e298 - 1) < 1e-15
    with pytest.raises(ValueError, match=r"`alpha` must be a scalar or broadcast to the stack "
                                         r"shape \(\), not shape \(1,\)"):
        tiny / np.array([1e-320])  # (as for `*`: it was NumPy's unnamed broadcast error)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("split", [False, True])
def test_balancing_kernel_gives_the_array_versions_bits(rng, monkeypatch, dtype, split):
    """The Numba balancing kernel (read from the words, 2.0**k products in
    place of ldexp) against the array version the CuPy path runs, byte for
    byte: exponents spread past the range (results subnormal, products
    rounded, shifts past +-1022), zeros of both signs, inf, NaN, subnormal
    entries, dead Tucker rows and bond slices; over the threads too."""
    info = np.finfo(dtype)
    spread = [40, 300, 1100] if dtype == np.float64 else [10, 60, 140]

    def cores(shape, big):
        a = np.ldexp(rng.standard_normal(shape), rng.integers(-big, big, shape)).astype(dtype)
        a[rng.random(shape) < 0.3] = 0
        a[rng.random(shape) < 0.1] = -0.0
        return a

    def edges(a, trial):
        if trial % 2:
            a[rng.random(a.shape) < 0.02] = np.inf * rng.choice([-1, 1])
        if trial % 4 == 1:
            a[rng.random(a.shape) < 0.02] = np.nan
        if trial % 3 == 0:
            a[rng.random(a.shape) < 0.2] = info.smallest_subnormal * rng.integers(1, 9)
        return a

    if split:
        monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    seen = set()
    with np.errstate(all="ignore"):
        for trial in range(90):
            d, S, n, N, r = (int(v) for v in rng.integers(1, 5, size=5))
            big = spread[trial % 3]
            U = edges(cores((d, S, n, N), big), trial)
            G = edges(cores((d, S, r, n, r), big), trial)
            if trial % 5 == 0:
                U[:, :, 0] = 0  # a dead Tucker row
                G[0, :, :, :, -1] = 0  # a dead bond slice
            monkeypatch.setattr(tt_ops, "_NUMBA_CPU", False)
            want = tt_ops._balanced(np, U.copy(), G.copy())
            monkeypatch.setattr(tt_ops, "_NUMBA_CPU", True)
            before = U.tobytes(), G.tobytes()
            got = tt_ops._balanced(np, U, G)
            assert (U.tobytes(), G.tobytes()) == before  # (inputs untouched)
            for w, g in zip(want, got):
                assert (w.dtype, w.shape) == (g.dtype, g.shape)
                assert w.tobytes() == g.tobytes(), trial
            live = want[1][np.isfinite(want[1]) & (want[1] != 0)]
            seen.add(bool(np.any(np.abs(live) < info.tiny)))  # subnormal results met
    assert seen == {False, True}


@pytest.mark.parametrize("dtype, ks", [(np.float64, (480, 1000)), (np.float32, (60, 120))])
def test_a_sum_with_a_term_of_cancelling_scales_keeps_both_terms(xy, path, dtype, ks):
    """(an adversarial review) ``a + b``, ``b`` the tensor of ``a`` with its
    Tucker cores scaled by 2**k, 2**-k, ... (they cancel along the chain): the
    rescue divided each core by its largest entry, b's, which flushed a's
    block of the sum's cores to zero -- norm, inner 0 (float64 from k ~ 440,
    float32 from k ~ 60, digits lost before), to_dense, entries and svd 0
    past twice that.  The scales are now carried along the chain to its end
    (_balanced), so every core's entries are near 1."""
    x, _, xd, _, _, _ = xy
    idx = np.stack(np.unravel_index(np.arange(0, math.prod(x.shape), 5), x.shape), axis=-1)
    rtol = 1e-12 if dtype is np.float64 else 2e-4
    a = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                 x.tt_supercore.astype(dtype), x.shape, x.masks)
    want = 2 * np.stack(xd)
    norm = np.array([np.linalg.norm(w) for w in want])
    for k in ks:
        signs = np.array([1, -1, 1, -1, 1][:x.d])
        signs[-1] -= signs.sum()  # (the exponents add up to 0)
        U = np.array(a.tucker_supercore)
        U *= np.ldexp(1.0, k * signs).astype(dtype)[:, None, None, None]
        s = a + UniformTuckerTensorTrain(U, a.tt_supercore, x.shape, x.masks)
        for method in NORM_METHODS:
            assert rel_err(s.norm(method), norm) < rtol, (k, method)
        assert rel_err(s.inner(s), norm**2) < rtol
        assert rel_err(s.to_dense(), want) < rtol
        got = s.entries(idx)
        for e in range(want.shape[0]):
            assert rel_err(got[e], want[e][tuple(idx.T)]) < rtol
        assert rel_err(s.svd()[0].to_dense(), want) < rtol
    # the reviewer's case: four factors of ones scaled 2**k, 2**-k, 2**k, 2**-k
    ones = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
        [np.ones((1, 2), dtype)] * 4, [np.ones((1, 1, 1), dtype)] * 4))
    for k in ks:
        U = np.array(ones.tucker_supercore)
        U *= np.ldexp(1.0, k * np.array([1, -1, 1, -1])).astype(dtype)[:, None, None]
        s = ones + UniformTuckerTensorTrain(U, ones.tt_supercore, ones.shape, ones.masks)
        for got, want in ((s.norm(), 8), (s.norm("orthogonal"), 8), (s.inner(s), 64),
                          (s.to_dense(), np.full((2,) * 4, 2)),
                          (s.svd()[0].to_dense(), np.full((2,) * 4, 2))):
            assert rel_err(got, want) < rtol, k


@pytest.mark.parametrize("dtype, k", [(np.float64, 600), (np.float64, 300), (np.float32, 80),
                                      (np.float32, 40)])
def test_entries_behind_a_zero_slice_do_not_set_the_scale(path, dtype, k):
    """(a second review of the range rescue) Entries of 2**k reached only
    through a zero bond slice or a zero Tucker row add nothing to the tensor,
    but the rescue counted them at face value: they set the last core's scale,
    which flushed every live entry -- the tensor [[[1]]] came out 0 from
    to_dense, norm, inner, svd, x * 2 and hadamard (at the smaller k, norm
    "inner", inner and hadamard only).  They now count for nothing."""
    def train(tucker, tt):
        return UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
            [np.asarray(u, dtype) for u in tucker], [np.asarray(g, dtype) for g in tt]))
    big = 2.0**k
    bond = train([np.ones((1, 1))] * 3, [np.array([1.0, 0]).reshape(1, 1, 2),
                                         np.diag([1.0, big]).reshape(2, 1, 2),
                                         np.array([1.0, big]).reshape(2, 1, 1)])
    row = train([np.array([[1.0], [0.0]]), np.ones((1, 1)), np.ones((1, 1))],
                [np.array([1.0, big]).reshape(1, 2, 1), np.ones((1, 1, 1)), np.ones((1, 1, 1))])
    for x in (bond, row):
        for got, want in ((x.to_dense(), 1), (x.norm(), 1), (x.norm("orthogonal"), 1),
                          (x.inner(x), 1), (x.svd()[0].to_dense(), 1),
                          ((x * 2).to_dense(), 2), (x.hadamard(x).to_dense(), 1),
                          (x.entries(np.zeros((1, 3), int)), 1)):
            assert np.asarray(got).ravel().tolist() == [want]
    # the form a sum takes: a plus zero times a train of far-apart cores
    rng = np.random.default_rng(5)
    a = train([rng.standard_normal((2, 3)) for _ in range(3)],
              [rng.standard_normal(s) for s in ((1, 2, 2), (2, 2, 2), (2, 2, 1))])
    U, G = np.array(a.tucker_supercore), np.array(a.tt_supercore)
    G *= np.ldexp(1.0, [-k, k // 2, k - k // 2]).astype(dtype)[:, None, None, None]
    s = a + 0 * UniformTuckerTensorTrain(U, G, a.shape, a.masks)
    tol = 1e-12 if dtype is np.float64 else 1e-5
    assert abs(s.norm() / a.norm() - 1) < tol and abs(s.inner(s) / a.inner(a) - 1) < tol


@pytest.mark.parametrize("dtype, lo, hi, fac", [(np.float64, -1000, 500, -100),
                                              (np.float32, -120, 60, -40)])
def test_scaling_and_hadamard_keep_a_small_entry_the_next_cores_lift(path, dtype, lo, hi, fac):
    """(a second review of the range rescue) A first core of 1 and 2**lo whose
    partners in the next cores are 2**hi (the tensor holds 1 twice): x * 2**fac
    and x.hadamard(x) flushed the 2**lo entry -- the range test read only the
    largest entries -- so the returned train lost that term.  The smallest
    entries' products are tested too; the rescue then scales exactly."""
    E = np.eye(2)
    g0, g1, g2 = np.zeros((1, 2, 2)), np.zeros((2, 2, 2)), np.zeros((2, 2, 1))
    g0[0, 0, 0], g0[0, 1, 1] = 1, 2.0**lo
    g1[0, 0, 0], g1[1, 1, 1] = 1, 2.0**hi
    g2[0, 0, 0], g2[1, 1, 0] = 1, 2.0**hi
    x = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
        [E.astype(dtype)] * 3, [g.astype(dtype) for g in (g0, g1, g2)]))
    want = np.zeros((2, 2, 2))
    want[0, 0, 0] = want[1, 1, 1] = 1
    assert x.to_dense().tolist() == want.tolist()
    for got, scale in ((x * dtype(2.0**fac), 2.0**fac), (x / dtype(2.0**-fac), 2.0**fac),
                       (x.hadamard(x), 1.0)):
        # the returned cores' own tensor, in float64 by einsum (not through to_dense)
        U, G = ([c.astype(np.float64) for c in cores] for cores in got.to_t3().data)
        dense = np.einsum("ajb,bkc,clz,jx,ky,lw->xyw", G[0], G[1], G[2], U[0], U[1], U[2])
        assert dense.tolist() == (want * scale).tolist()


def test_overflow_during_svd_is_not_blamed_on_the_input(rng):
    """Finite entries whose products overflow (1e200 in float64, 1e30 in
    float32) were reported as 'the train holds inf or NaN in a live entry'."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)))
    for dtype, big in ((np.float64, 1e200), (np.float32, 1e30)):
        U, G = (big * x.tucker_supercore).astype(dtype), (big * x.tt_supercore).astype(dtype)
        assert np.isfinite(U).all() and np.isfinite(G).all()
        y = UniformTuckerTensorTrain(U, G, x.shape, x.masks)
        for call in (y.svd, lambda: y.orthogonalize("left")):
            with np.errstate(over="ignore", invalid="ignore"):
                with pytest.raises(ValueError, match=f"entries are finite, but a product of them "
                                                     f"overflowed {np.dtype(dtype).name} .* rescale"
                                   ) as caught:
                    call()
                # a public class to catch it by (a user review: the traceback
                # named the private tt_ops._Overflow)
                assert caught.type is zorch_nb.tt.TrainOverflowError


def test_a_non_finite_svd_of_a_finite_matrix_is_retried_then_named(rng, monkeypatch):
    """LAPACK builds have returned a NaN column for a finite matrix on one call
    and the right factors on the next; the sweep took that NaN for an overflow
    of the train.  Now it recomputes (again, then in float64 for float32) and
    names LAPACK when every try fails."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)))
    real_svd, calls = np.linalg.svd, []

    def spoiled(A, *args, **kwargs):
        u, s, vh = real_svd(A, *args, **kwargs)
        return np.where(np.arange(u.shape[-1]) == 0, np.nan, u).astype(u.dtype), s, vh

    def flaky(A, *args, **kwargs):  # the first call of all goes wrong
        calls.append(A.dtype)
        return (spoiled if len(calls) == 1 else real_svd)(A, *args, **kwargs)

    def fails_in_float32(A, *args, **kwargs):
        calls.append(A.dtype)
        return (spoiled if A.dtype == np.float32 else real_svd)(A, *args, **kwargs)

    for dtype in (np.float64, np.float32):
        y = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                     x.tt_supercore.astype(dtype), x.shape, x.masks)
        want, (want_tsv, want_ttsv) = y.svd()
        monkeypatch.setattr(np.linalg, "svd", flaky)
        calls.clear()
        got, (tsv, ttsv) = y.svd()
        assert calls[:2] == [np.dtype(dtype)] * 2  # recomputed, same dtype
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.tt_supercore, want.tt_supercore)
        np.testing.assert_array_equal(tsv, want_tsv)
        np.testing.assert_array_equal(ttsv, want_ttsv)
        monkeypatch.setattr(np.linalg, "svd", fails_in_float32)
        calls.clear()
        if dtype == np.float32:  # every float32 SVD spoiled: the float64 one serves
            got, (tsv, ttsv) = y.svd()
            assert np.dtype(np.float64) in calls and got.dtype == np.float32
            assert tsv.dtype == np.float32
            assert rel_err(got.to_dense(), want.to_dense()) < 1e-5
        monkeypatch.setattr(np.linalg, "svd", spoiled)
        with pytest.raises(ValueError, match=r"numpy.linalg.svd\) returned inf or NaN for "
                                             r"finite .* LAPACK/BLAS fault, not the train's"):
            y.svd() if dtype == np.float64 else y.orthogonalize("left")
        monkeypatch.setattr(np.linalg, "svd", real_svd)
    # t3_from_dense's own SVDs of the unfoldings
    dense = x.to_dense()[0]
    want = tt_ops.t3_from_dense(dense)
    monkeypatch.setattr(np.linalg, "svd", flaky)
    calls.clear()
    got = tt_ops.t3_from_dense(dense)
    assert len(calls) == (2 * dense.ndim - 1) + 1  # its 2d - 1 unfoldings, the first twice
    for w, g in zip(want[0] + want[1], got[0] + got[1]):
        np.testing.assert_array_equal(g, w)


def test_a_non_finite_product_of_finite_factors_is_recomputed(rng, monkeypatch):
    """A BLAS that returns NaN from a product (or a QR) of finite matrices
    (OpenBLAS has, on one call in many) made the SVD frames report that the
    train "overflowed" -- in norm("orthogonal"), whose cores are scaled near 1
    and cannot overflow.  Such products are now recomputed without BLAS; a
    true overflow is still named as one."""
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    real_matmul, real_qr, spoiled = np.matmul, np.linalg.qr, []

    def nan_first(c):  # a NaN where the factors had none
        c = np.array(c)
        if c.dtype.kind == "f" and c.size:
            c.flat[0] = np.nan
            spoiled.append(c.shape)
        return c

    for dtype in (np.float64, np.float32):
        y = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                     x.tt_supercore.astype(dtype), x.shape, x.masks)
        want_dense, want_norm = y.to_dense(), y.norm()
        calls = [("svd", lambda: y.svd()[0])] + [
            (k, lambda k=k: y.orthogonalize(k)) for k in ORTHOGONALIZE_KINDS]
        monkeypatch.setattr(np, "matmul", lambda a, b, **kw: nan_first(real_matmul(a, b, **kw)))
        monkeypatch.setattr(np.linalg, "qr", lambda a, *args, **kw: nan_first(real_qr(a, *args, **kw)))
        tol = 1e-4 if dtype == np.float32 else RTOL
        for name, call in calls:
            spoiled.clear()
            got = call()
            assert spoiled, name  # the fault was met, and mended
            assert got.tt_supercore.dtype == dtype
            assert rel_err(got.to_dense(), want_dense) < tol, name
        spoiled.clear()
        assert rel_err(y.norm("orthogonal"), want_norm) < tol and spoiled
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow stays one
            big = UniformTuckerTensorTrain(y.tucker_supercore * dtype(1e30 if dtype == np.float32
                                                                      else 1e200),
                                           y.tt_supercore * dtype(1e30 if dtype == np.float32
                                                                  else 1e200), x.shape, x.masks)
            with pytest.raises(ValueError, match="overflowed .* rescale"):
                big.orthogonalize("left")
        monkeypatch.setattr(np, "matmul", real_matmul)
        monkeypatch.setattr(np.linalg, "qr", real_qr)


def test_float32_trains_that_meet_inf_are_computed_again_in_float64(rng, monkeypatch):
    """A float32 product that comes back as *finite* garbage passes the
    non-finite guard of _matmul, and a later product turns it into inf: the
    CI flake of test_float32[xp] ("overflowed float32" in ut3_svd's first
    right step, after both guards held).  Such a float32 computation is run
    once more in float64 and the result rounded to float32; a result that
    does not fit float32 is still refused as the train's overflow."""
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    y = UniformTuckerTensorTrain(x.tucker_supercore.astype(np.float32),
                                 x.tt_supercore.astype(np.float32), x.shape, x.masks)
    want_dense, want_norm = y.to_dense(), y.norm()
    real_matmul, spoiled = np.matmul, []

    def garbage_first(a, b, **kw):  # the first float32 product of each call: huge, finite
        c = real_matmul(a, b, **kw)
        if c.dtype == np.float32 and c.size and not spoiled:
            c = np.array(c)
            c.flat[0] = np.float32(3e38)
            spoiled.append(c.shape)
        return c

    monkeypatch.setattr(np, "matmul", garbage_first)
    calls = [("svd", lambda: y.svd()[0])] + [
        (k, lambda k=k: y.orthogonalize(k)) for k in ORTHOGONALIZE_KINDS]
    for name, call in calls:
        spoiled.clear()
        with np.errstate(over="ignore", invalid="ignore"):
            got = call()
        assert spoiled, name  # the garbage was met
        assert got.tucker_supercore.dtype == got.tt_supercore.dtype == np.float32, name
        assert rel_err(got.to_dense(), want_dense) < 1e-5, name
    spoiled.clear()
    with np.errstate(over="ignore", invalid="ignore"):
        norm = y.norm("orthogonal")
    assert spoiled and norm.dtype == np.float32 and rel_err(norm, want_norm) < 1e-5
    (tr, (tsv, ttsv)) = tt_ops.ut3_svd(y.data)
    assert all(a.dtype == np.float32 for a in (tr[0], tr[1], tsv, ttsv))
    monkeypatch.setattr(np, "matmul", real_matmul)
    # float64 has no wider retry, and a float32 result past float32 stays refused
    for dtype, big in ((np.float64, 1e200), (np.float32, 1e30)):
        z = UniformTuckerTensorTrain((big * x.tucker_supercore).astype(dtype),
                                     (big * x.tt_supercore).astype(dtype), x.shape, x.masks)
        with np.errstate(over="ignore", invalid="ignore"):
            for call in (z.svd, lambda: z.orthogonalize("left")):
                with pytest.raises(ValueError, match=f"overflowed {np.dtype(dtype).name} "):
                    call()


@pytest.mark.filterwarnings("error::RuntimeWarning")  # overflows are handled, not warned
def test_sweeps_of_cores_far_from_1_keep_the_tensor(rng):
    """Cores of 1e10, 1e300 and 1e-100 (a tensor near 1e210): the remainder
    pushed into the cores after the SVDs overflowed, and "tucker_down",
    "tt_up" and "right" returned inf entries, later refused.  Cores of 1e300,
    1e-200 and 1e-200 (a tensor of 1e-100, user review): the pushes
    underflowed and every orthogonalization and svd returned the zero train
    and zero singular values, silently.  Sweeps now run on power-of-two scaled
    cores and the scale goes back on the cores that carry the weight; only a
    core that cannot hold it (a tensor past the range, in "left", "right" and
    svd) is refused as the overflow."""
    t3 = rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1))
    U, G = [np.array(u) for u in t3.tucker_cores], [np.array(g) for g in t3.tt_cores]
    plain = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(U, G))
    want = plain.to_dense()
    for (u0, g0, g1, g2), factor in (((1e10, 1e300, 1e-100, 1), 1e210),
                                     ((1, 1e300, 1e-200, 1e-200), 1e-100)):
        y = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
            [U[0] * u0] + U[1:], [G[0] * g0, G[1] * g1, G[2] * g2]))
        for kind in ORTHOGONALIZE_KINDS:
            got = y.orthogonalize(kind)
            assert rel_err(got.to_dense() / factor, want) < RTOL, kind
        s, (tsv, ttsv) = y.svd()
        s0, (tsv0, ttsv0) = plain.svd()
        assert rel_err(s.to_dense() / factor, want) < RTOL
        assert rel_err(tsv / factor, tsv0) < RTOL and rel_err(ttsv / factor, ttsv0) < RTOL
        for method in NORM_METHODS:
            assert abs(y.norm(method) / factor - plain.norm()) <= RTOL * plain.norm()
    # float32: cores of 1e30, 1e-30, 1e-30 (a tensor near 1e-30)
    t32 = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
        [u.astype(np.float32) for u in U],
        [(g * k).astype(np.float32) for g, k in zip(G, (1e30, 1e-30, 1e-30))]))
    for got in [t32.orthogonalize(kind) for kind in ORTHOGONALIZE_KINDS] + [t32.svd()[0]]:
        assert got.tt_supercore.dtype == np.float32
        assert rel_err(got.to_dense() / np.float32(1e-30), want) < 1e-5
    # a tensor past the range (near 1e410): the weight's core cannot hold it
    huge = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(
        [U[0] * 1e10] + U[1:], [G[0] * 1e300, G[1] * 1e100, G[2]]))
    with np.errstate(over="ignore", invalid="ignore"):
        for call in (lambda: huge.orthogonalize("left"), lambda: huge.orthogonalize("right"),
                     huge.svd):
            with pytest.raises(zorch_nb.tt.TrainOverflowError, match="overflowed float64"):
                call()
        # ... where the scale is spread over several cores, the train is kept
        for kind in ("tucker_down", "tt_up"):
            kept = huge.orthogonalize(kind)
            assert np.isfinite(kept.tt_supercore).all()
            assert np.isfinite(kept.tucker_supercore).all()
            down = lambda t: t * 2.0**-681 * 2.0**-681  # (2**-1362 is no float64)
            assert rel_err(down(kept).to_dense(), down(huge).to_dense()) < RTOL


def test_bad_arguments_are_named(rng):
    """Each of these failed with a message from C, NumPy or Python that named
    no argument, or (object cores) was accepted."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, (3, 4), (2, 3), (1, 2, 1)))
    # a limit past int64 limits nothing (NumPy raised OverflowError from C)
    big, _ = x.svd(10**30, 10**30)
    np.testing.assert_array_equal(big.to_dense(), x.svd()[0].to_dense())
    with pytest.raises(TypeError, match="`indices` must be an integer array, not a dict"):
        x.entries({0: 1})  # a dict has .get, which was taken for CuPy's
    with pytest.raises(ValueError, match="`indices` must be a rectangular .* ragged"):
        x.entries([[0], [0, 1]])
    with pytest.raises(TypeError, match="`vectors` must be a sequence of 2 arrays, not float"):
        x.apply(1.0)
    with pytest.raises(TypeError, match=r"`vectors` must be .* not generator; pass list\(...\)"):
        x.apply(v for v in (np.ones(3), np.ones(4)))
    # a dict passed len() and gave its keys as vectors: "`vectors[0]` must have shape (3,), not ()"
    with pytest.raises(TypeError, match="`vectors` must be a sequence of 2 arrays, not dict"):
        x.apply({0: np.ones(3), 1: np.ones(4)})
    with pytest.raises(ValueError, match=r"`vectors\[0\]` must be a rectangular .* ragged"):
        x.apply([[[1.0, 2.0, 3.0], [1.0]], np.ones(4)])
    for stack in (UniformTuckerTensorTrain.stack, tt_ops.ut3_stack):  # (not an iterable)
        with pytest.raises(TypeError, match="`trains` must be a sequence of trains, not int"):
            stack(3)
    # padding past the memory was allocated (MemoryError, or the OOM killer)
    with pytest.raises(ValueError, match=r"`from_t3` has supercores of shapes \(2, 3, 4\) and "
                                         r"\(2, 1000000, 3, 1000000\) .* too large to "
                                         r"allocate; ask for smaller `n`, `r`, `N`"):
        UniformTuckerTensorTrain.from_t3(x.to_t3(), n=3, r=10**6, N=4)
    import collections  # any sequence with a length will do, as before
    assert np.allclose(x.apply(collections.deque([np.ones(3), np.ones(4)])),
                       x.apply([np.ones(3), np.ones(4)]))
    for bad in (np.array([["a", "b"]]), np.ones((1, 2), object)):
        with pytest.raises(TypeError, match=r"`tucker_cores\[0\]` must hold real numbers"):
            TuckerTensorTrain([bad], [np.ones((1, 1, 1))])
    with pytest.raises(TypeError, match=r"`tt_cores\[0\]` must hold real numbers"):
        TuckerTensorTrain([np.ones((1, 2))], [np.ones((1, 1, 1), object)])
    assert TuckerTensorTrain([np.ones((1, 2), int)], [np.ones((1, 1, 1), bool)]).to_dense().tolist() == [1, 1]
    # a raw (tucker_cores, tt_cores) pair is checked as the class checks one
    # (complex and str cores came through; a 1-d core raised a bare IndexError)
    for tk, tt, exc, what in (
            ([np.ones((2, 3), complex)], [np.ones((1, 2, 1), complex)], TypeError, "real numbers"),
            ([np.ones(3)], [np.ones((1, 2, 1))], ValueError, r"stack \+ \(n, N\)"),
            ([np.zeros((2, 0))], [np.ones((1, 2, 1))], ValueError, "no zero-length axis"),
            ([np.ones((2, 3), np.longdouble)], [np.ones((1, 2, 1), np.longdouble)], TypeError,
             "`t3` has cores of dtype float128: a uniform train holds float32 or float64")):
        if what.startswith("`t3`") and np.dtype(np.longdouble) == np.float64:
            continue  # no extended precision on this platform
        with pytest.raises(exc, match=what):
            UniformTuckerTensorTrain.from_t3((tk, tt))
    with pytest.raises(ValueError, match="Arguments of `ut3_sub` must have the same shape"):
        x - UniformTuckerTensorTrain.from_t3(rand_t3(rng, (3, 5), (2, 3), (1, 2, 1)))
    with pytest.raises(TypeError, match=r"`trains` must hold .* trains\[1\] is a int"):
        UniformTuckerTensorTrain.stack([x, 3])
    # a 0-d integer array is an int, as in NumPy ("iteration over a 0-d array")
    np.testing.assert_array_equal(x.svd(np.array(2))[0].to_dense(), x.svd(2)[0].to_dense())
    with pytest.raises(ValueError, match="`max_tt_ranks` must be a positive int or a sequence"):
        x.svd(max_tt_ranks=[[1, 2]])  # ragged/nested: not NumPy's "inhomogeneous shape"
    with pytest.raises(TypeError, match="`tucker_supercore` must have dtype float32 or float64 "
                                        "in native byte order, not >f8"):
        UniformTuckerTensorTrain(x.tucker_supercore.astype(">f8"), x.tt_supercore.astype(">f8"),
                                 x.shape, x.masks)


def test_scalars_and_sizes_must_be_numbers(rng):
    from fractions import Fraction
    t3 = TuckerTensorTrain([np.eye(2)], [np.ones((1, 2, 1))])
    y = UniformTuckerTensorTrain.from_t3(t3)
    for bad in (None, "3", np.array(1j), np.complex64(1j), [1j]):
        with pytest.raises(TypeError, match="`alpha` must be a real number"):
            y * bad
    # an int past the float range is taken exactly (it was "`alpha` is too
    # large for a float"): the train holds 1e400, and to_dense is inf there
    big = y * 10**400
    assert np.isfinite(big.tt_supercore).all() and np.isfinite(big.tucker_supercore).all()
    with np.errstate(over="ignore"):
        assert np.isinf(big.to_dense()).all()
    np.testing.assert_allclose((big * Fraction(1, 10**400)).to_dense(), y.to_dense(), rtol=1e-15)
    np.testing.assert_allclose((big / 10**400).to_dense(), y.to_dense(), rtol=1e-15)
    np.testing.assert_allclose((y * Fraction(1, 2)).to_dense(), 0.5 * y.to_dense())
    for name, bad in (("n", 2.9), ("n", "4"), ("r", True), ("N", 3.0)):
        with pytest.raises(TypeError, match=f"`{name}` must be an int"):
            UniformTuckerTensorTrain.from_t3(t3, **{name: bad})
    with pytest.raises(TypeError, match="`shape` must be a tuple of ints"):
        UniformTuckerTensorTrain(y.tucker_supercore, y.tt_supercore, (1.9,), y.masks)
    for bad in (np.array([1.0]), np.array([True]), np.array([[2]]), np.array(2)):
        # a 0-d array failed with NumPy's "iteration over a 0-d array"
        with pytest.raises(TypeError, match="`shape` must be a tuple of ints"):
            UniformTuckerTensorTrain(y.tucker_supercore, y.tt_supercore, bad, y.masks)
    # a 1-d integer array is a shape, as NumPy takes it; NumPy bools scale as Python's
    z = UniformTuckerTensorTrain(y.tucker_supercore, y.tt_supercore, np.array(y.shape), y.masks)
    assert z.shape == y.shape and type(z.shape[0]) is int
    np.testing.assert_array_equal((y * np.bool_(True)).to_dense(), (y * True).to_dense())
    np.testing.assert_array_equal((y * np.array(False)).to_dense(), 0 * y.to_dense())


def test_zero_length_axes_are_refused_at_construction(rng):
    """An empty stack or a rank 0 used to fail later inside to_dense / svd (reshape, IndexError)."""
    with pytest.raises(ValueError, match="no zero-length axis"):
        TuckerTensorTrain([np.zeros((0, 2, 3))], [np.zeros((0, 1, 2, 1))])
    with pytest.raises(ValueError, match="no zero-length axis"):
        TuckerTensorTrain([rng.standard_normal((2, 3))] * 2,
                          [np.ones((1, 2, 0)), np.ones((0, 2, 1))])
    x = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain([np.eye(2)], [np.ones((1, 2, 1))]))
    with pytest.raises(ValueError, match="no zero-length axis"):
        UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore[..., :0, :, :0], x.shape,
                                 x.masks)


def test_from_dense_recovers_a_low_rank_tensor(rng):
    """dense -> ragged -> uniform: Tucker SVDs then TT-SVD, exact up to rounding."""
    tk = [rng.standard_normal((2, 5)), rng.standard_normal((3, 4)), rng.standard_normal((2, 6))]
    tt = [rng.standard_normal((1, 2, 3)), rng.standard_normal((3, 3, 2)),
          rng.standard_normal((2, 2, 1))]
    dense = TuckerTensorTrain(tk, tt).to_dense()
    x = TuckerTensorTrain.from_dense(dense)
    assert x.tucker_ranks == (2, 3, 2) and x.tt_ranks == (1, 2, 2, 1)  # n_0 = 2 bounds r_1
    np.testing.assert_allclose(x.to_dense(), dense, rtol=0, atol=1e-12 * np.abs(dense).max())
    for u in x.tucker_cores:  # orthonormal rows
        np.testing.assert_allclose(u @ u.T, np.eye(u.shape[0]), atol=1e-12)
    u3 = UniformTuckerTensorTrain.from_dense(dense, n=4, r=4)
    assert u3.tucker_supercore.shape == (3, 4, 6)
    np.testing.assert_allclose(u3.to_dense(), dense, rtol=0, atol=1e-12 * np.abs(dense).max())
    one = TuckerTensorTrain.from_dense(dense, max_tucker_ranks=1, max_tt_ranks=1)
    assert one.tucker_ranks == (1, 1, 1) and one.tt_ranks == (1, 1, 1, 1)
    # a best rank-1 approximation's error is no larger than the data's own norm
    assert np.linalg.norm(one.to_dense() - dense) < np.linalg.norm(dense)
    # an exactly rank-2 tensor of shape (3,)*8: NumPy's matrix_rank tolerance on
    # every unfolding (max(M, N) * eps) -- min(M, N) * eps kept rounding noise as rank
    for seed in range(20):
        g = np.random.default_rng(seed)
        vecs = [[g.standard_normal(3) for _ in range(8)] for _ in range(2)]
        c = sum(np.einsum("a,b,c,d,e,f,g,h->abcdefgh", *v) for v in vecs)
        assert TuckerTensorTrain.from_dense(c).tucker_ranks == (2,) * 8, seed
    zero = TuckerTensorTrain.from_dense(np.zeros((3, 4), np.float32))
    assert zero.tt_ranks == (1, 1, 1) and not zero.to_dense().any()
    assert zero.to_dense().dtype == np.float32
    for bad, exc, match in ((np.zeros((0, 3)), ValueError, "no zero-length axis"),
                            (np.array([1.0, np.nan]), ValueError, "finite"),
                            (np.ones(4, complex), TypeError, "real numbers"),
                            (np.array(["a"]), TypeError, "real numbers")):
        with pytest.raises(exc, match=match):
            TuckerTensorTrain.from_dense(bad)
    # integer data promote as a train's integer cores do (it was a TypeError)
    ints = np.arange(24).reshape(2, 3, 4) % 5
    t = TuckerTensorTrain.from_dense(ints)
    assert t.tucker_cores[0].dtype == np.float64 and np.allclose(t.to_dense(), ints)
    assert TuckerTensorTrain.from_dense(ints.astype(np.int8)).tucker_cores[0].dtype == np.float32
    # x / alpha as x * (1 / alpha); a train is no divisor
    x = UniformTuckerTensorTrain.from_t3(t)
    assert np.allclose((x / 4).to_dense(), ints / 4)
    with pytest.raises(TypeError, match="divides a train by a scalar"):
        x / x
    with pytest.raises(TypeError, match="unsupported operand"):
        x / "2"
    with pytest.raises(ValueError, match="`rtol` must be"):
        TuckerTensorTrain.from_dense(dense, rtol=2.0)
    with pytest.raises(ValueError, match="`max_tt_ranks` must be"):
        TuckerTensorTrain.from_dense(dense, max_tt_ranks=[1, 2, 3])


def test_rank_zero_and_oversized_trains_fail_clearly():
    """A rank-0 mask row is the zero tensor: to_dense gives it, to_t3 says why it cannot;
    a dense size past the address space is refused before any allocation (np.prod
    wrapped to 0 at 2**64 and the kernel wrote past its scratch)."""
    one = np.ones((1, 1, 2)), np.ones((1, 1, 1, 1))
    z = UniformTuckerTensorTrain(*one, (2,), (np.array([[False]]), np.ones((2, 1), bool)))
    assert z.to_dense().tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"rank 0 where `tucker_edge_mask`\[0\] is all False"):
        z.to_t3()
    for d in (63, 64, 65):
        x = UniformTuckerTensorTrain(np.ones((d, 1, 2)), np.ones((d, 1, 1, 1)), (2,) * d,
                                     (np.ones((d, 1), bool), np.ones((d + 1, 1), bool)))
        with pytest.raises(ValueError, match="too many to allocate"):
            x.to_dense()
        assert x.apply([np.ones(2)] * d) == 2.0 ** d  # the train itself is fine
    with pytest.raises(TypeError, match=r"`vectors\[0\]` must hold real numbers"):
        x.apply([np.array(["a", "b"])] + [np.ones(2)] * (d - 1))


def test_ragged_to_dense_shares_the_size_guard(rng, path, monkeypatch):
    """TuckerTensorTrain.to_dense had no size guard: 40 cores of 2x2 (8 TiB)
    grew its partial products until the OOM killer ended the process.  The
    ragged and the uniform to_dense now refuse, before any allocation, a dense
    tensor larger than this machine's memory (pretended small here, so that
    nothing large is allocated should the guard be missing)."""
    monkeypatch.setattr(tt_ops._backend, "physical_memory", lambda: 2**20)
    d = 20  # 2**20 float64 entries: 8 MiB against a pretended 1 MiB
    t3 = TuckerTensorTrain([rng.standard_normal((2, 2)) for _ in range(d)],
                           [rng.standard_normal((1 if i == 0 else 2, 2, 1 if i == d - 1 else 2))
                            for i in range(d)])
    for x in (t3, UniformTuckerTensorTrain.from_t3(t3)):
        with pytest.raises(ValueError, match=r"shape \(2, 2, .*\) has 1048576 entries "
                                             r"\(0\.0078.*too many to allocate; use `entries`"):
            x.to_dense()
    small = rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1))  # 24 entries fit
    assert rel_err(small.to_dense(), naive_dense(*small.data)) < RTOL
    assert rel_err(UniformTuckerTensorTrain.from_t3(small).to_dense(), naive_dense(*small.data)) < RTOL


@pytest.mark.parametrize("dtype,value", [(np.bool_, True), (np.int8, 100), (np.int64, 2**40)])
def test_ragged_to_dense_computes_in_float_as_the_uniform_path(path, dtype, value):
    """t3_to_dense multiplied in the cores' own dtype: bool cores as logical
    OR, int8 wrapping (100 * 100 * 2 gave 32), int64 2**40 squared giving 0,
    while the uniform path promotes.  Every entry here is 8 * value**4,
    exact in the promoted float dtype."""
    tk = [np.full((2, 3), value, dtype), np.full((2, 2), value, dtype)]
    tt = [np.full((1, 2, 2), value, dtype), np.full((2, 2, 1), value, dtype)]
    want_dtype = np.result_type(dtype, np.float32)  # ut3_from_t3's promotion
    reference = naive_dense([u.astype(np.float64) for u in tk], [g.astype(np.float64) for g in tt])
    assert (reference == 8.0 * float(value) ** 4).all()
    uniform = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain(tk, tt)).to_dense()
    assert uniform.dtype == want_dtype
    for got in (tt_ops.t3_to_dense(tk, tt), TuckerTensorTrain(tk, tt).to_dense()):
        assert got.dtype == want_dtype
        np.testing.assert_array_equal(got, reference)
        np.testing.assert_array_equal(got, uniform)
    assert tk[0].dtype == dtype and tt[1].dtype == dtype  # the caller's cores stay as they were


def test_t3_to_dense_checks_its_cores_as_the_class_does():
    """The public t3_to_dense skipped the class's checks: zip dropped an extra
    TT core (and returned [1, 1, 1]), other mistakes gave raw NumPy errors."""
    one = np.ones((1, 3))
    cases = [
        (([one], [np.ones((1, 1, 1)), 5 * np.ones((1, 1, 1))]), ValueError, "equally long, not 1 and 2"),
        (([], []), ValueError, "must be non-empty"),
        (([one], [np.ones((2, 1, 1, 1))]), ValueError, r"`tt_cores\[0\]` must have shape"),
        (([np.array([["a", "b"]])], [np.ones((1, 2, 1))]), TypeError, r"`tucker_cores\[0\]` must hold real"),
        (([one, one], [np.ones((1, 1, 2)), np.ones((3, 1, 1))]), ValueError,
         r"`tt_cores\[1\]` must start with rank 2, not 3"),
        ((5, [np.ones((1, 1, 1))]), TypeError, "`tucker_cores` must be a sequence of arrays, not int"),
        ((np.eye(2), np.ones((1, 2, 1))), ValueError,
         r"not 2 and 1 \(`tucker_cores` is one array, read as its 2 rows: for one core pass \[array\]\)"),
        (([one], [[[[1.0]]]]), TypeError, r"`tt_cores\[0\]` must be a numpy.ndarray"),
    ]
    for args, exc, match in cases:
        for build in (tt_ops.t3_to_dense, TuckerTensorTrain):
            with pytest.raises(exc, match=match):
                build(*args)


def test_add_and_hadamard_refuse_a_result_too_large_to_allocate(rng, monkeypatch):
    """ut3_hadamard built (d, S, r^2, n^2, r^2) blocks with no size check
    (r = 64, n = 16: NumPy's raw MemoryError for 64 GiB, or the OOM killer
    between free memory and swap); add had none either.  Both now refuse as
    to_dense does (a pretended 1 MiB of memory, so nothing large is
    allocated should the guard be missing)."""
    monkeypatch.setattr(tt_ops._backend, "physical_memory", lambda: 2**20)
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)), n=4, r=8)
    # hadamard: 3 * 64 * 16 * 64 + 3 * 16 * 4 float64 entries, 1.5 MiB
    with pytest.raises(ValueError, match=r"result of `ut3_hadamard` has supercores of shapes "
                                         r"\(3, 16, 4\) and \(3, 64, 16, 64\) \(0\.00147 GiB\), too large"):
        x.hadamard(x)
    wide = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)), n=8, r=32)
    with pytest.raises(ValueError, match=r"result of `ut3_add` has supercores of shapes "
                                         r"\(3, 16, 4\) and \(3, 64, 16, 64\)"):
        wide + wide
    small = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)))
    assert rel_err(small.hadamard(small).to_dense(), small.to_dense() ** 2) < RTOL
    assert rel_err((small + small).to_dense(), 2 * small.to_dense()) < RTOL


def test_frame_repair_kernel_matches_array_module_twin(rng):
    """The Numba repair and its array-module twin (the CuPy path) agree, and
    produce orthonormal frames on the real rows from degenerate candidates."""
    B, M, K = 6, 7, 4
    Q = rng.standard_normal((B, M, K))
    Q[:, :, 2] = Q[:, :, 0]  # a dependent column: must be replaced
    Q[1, :, 1] = 0  # an empty column
    row_mask = rng.random((B, M)) < 0.8
    row_mask[:, :K] = True
    kcount = np.array([4, 4, 3, 2, 4, 1])
    a = np.ascontiguousarray(np.swapaxes(Q, 1, 2))  # the kernel stores vectors as rows
    tt_kernels.orthonormal_frame_repair(a, row_mask, kcount)
    a = np.swapaxes(a, 1, 2)
    b = tt_ops._repair_xp(np, Q.copy(), row_mask, kcount)
    np.testing.assert_allclose(a, b, atol=1e-12)
    for k in range(B):
        cols = np.arange(K) < kcount[k]
        _check_orthonormal([a[k]], [row_mask[k]], [cols])
        assert (a[k][:, cols].sum(axis=0) >= 0).all()


# ---------------------------------------------------------------------------
# structure-keyed compile cache
# ---------------------------------------------------------------------------

def test_rebuilt_identical_structure_compiles_once(rng):
    """A loop that rebuilds identical masks from fresh arrays compiles once."""
    t3 = rand_t3(rng, (3, 2, 3, 2), (2, 2, 1, 2), (1, 3, 2, 2, 1))
    base = UniformTuckerTensorTrain.from_t3(t3, n=3, r=4, N=3)
    mk, mt = (np.array(m) for m in base.masks)
    mk[1, 2] = True  # a structure no other test uses: gappy Tucker slot 2 of core 1
    mk[1, 1] = False
    U = np.array(base.tucker_supercore)
    U[1, [1, 2]] = U[1, [2, 1]]
    G = np.array(base.tt_supercore)
    G[1][:, [1, 2]] = G[1][:, [2, 1]]
    before = kernel_cache_info()
    for _ in range(5):
        masks = (np.array(mk.tolist()), np.array(mt.tolist()))  # fresh arrays each time
        x = UniformTuckerTensorTrain(U.copy(), G.copy(), base.shape, masks)
        assert rel_err(x.to_dense(), naive_dense(*t3.data)) < RTOL
    after = kernel_cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (4, 1)
    assert after.currsize == before.currsize + 1
    # The functional layer, fed raw mask arrays, finds the same kernel.
    ut3_to_dense((U, G, base.shape, (mk.copy(), mt.copy())))
    assert kernel_cache_info().misses == after.misses
    # A genuinely different structure (one more real bond slot) misses.
    mt2 = mt.copy()
    mt2[2, 2] = True
    x2 = UniformTuckerTensorTrain(U, G, base.shape, (mk, mt2))
    x2.to_dense()
    assert kernel_cache_info().misses == after.misses + 1
    # inner is keyed by both structures.
    ut3_inner(x.data, x.data)
    ut3_inner(x.data, UniformTuckerTensorTrain(U, G, base.shape, (mk.copy(), mt.copy())).data)
    final = kernel_cache_info()
    assert final.misses == after.misses + 2 and final.hits >= after.hits + 2


def test_padded_n_is_not_structure(rng):
    """Trains differing only in their padded N (the Tucker supercore's last
    axis) share the kernels: N was part of the keys, so each new N compiled
    to_dense, inner and the chain of entries again."""
    t3 = rand_t3(rng, (3, 2, 3), (2, 2, 1), (1, 3, 2, 1))
    x, y = (UniformTuckerTensorTrain.from_t3(t3, n=3, r=3, N=N) for N in (3, 7))
    idx = np.array([[0, 1, 2], [2, 0, 1]])
    want = (x.to_dense(), x.inner(x), x.entries(idx))  # (compiled here)
    before = kernel_cache_info()
    got = (y.to_dense(), y.inner(y), y.entries(idx))
    assert kernel_cache_info().misses == before.misses
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(want[0], naive_dense(*t3.data), rtol=1e-12)


def test_a_reshaped_stack_shares_the_kernels(rng):
    """The kernels see the stack flattened: six trains as a stack (6,) and as
    (2, 3) are one structure to them (a reshape compiled them all again)."""
    xs = [UniformTuckerTensorTrain.from_t3(rand_t3(rng, (2, 3, 2), (2, 1, 2),
                                                   (1, 2, 2, 1)), n=3, r=3)
          for _ in range(6)]
    flat = UniformTuckerTensorTrain.stack(xs)
    U, G = flat.tucker_supercore, flat.tt_supercore
    mk, mt = flat.masks
    grid = UniformTuckerTensorTrain(U.reshape((3, 2, 3) + U.shape[2:]),
                                    G.reshape((3, 2, 3) + G.shape[2:]), flat.shape,
                                    (mk.reshape(3, 2, 3, -1), mt.reshape(4, 2, 3, -1)))
    assert grid.masks != flat.masks  # (different holders: the stacks differ)
    want_dense, want_inner = flat.to_dense(), flat.inner(flat)
    before = kernel_cache_info()
    np.testing.assert_array_equal(grid.to_dense(), want_dense.reshape((2, 3) + flat.shape))
    np.testing.assert_array_equal(grid.inner(grid), want_inner.reshape(2, 3))
    assert kernel_cache_info().misses == before.misses
    assert grid.masks.stack_flat() == flat.masks and flat.masks.stack_flat() is flat.masks


def test_division_by_zero_as_numpy(rng):
    # x / 0 divided as NumPy does (inf, a RuntimeWarning), not ZeroDivisionError
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1)),
                                         n=3, r=3)
    for zero in (0, 0.0, -0.0, np.float64(0), np.int64(0), False):
        with pytest.warns(RuntimeWarning):
            y = x / zero
        assert np.isinf(y.tt_supercore[0][x.masks[1][0]]).any()
    np.testing.assert_allclose((x / 4).to_dense(), x.to_dense() / 4, rtol=1e-12)
    assert not (x / 10**400).to_dense().any()  # an int past float range: 1 / it is 0.0
    x32 = UniformTuckerTensorTrain(x.tucker_supercore.astype(np.float32),
                                   x.tt_supercore.astype(np.float32), x.shape, x.masks)
    assert (x32 / 2).dtype == np.float32 and (x32 / 0.5).dtype == np.float32
    # the zero's sign is kept, as NumPy's 1 / -0.0 = -inf (it gave +inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for zero, inf in ((-0.0, -np.inf), (np.float64(-0.0), -np.inf), (0.0, np.inf)):
            np.testing.assert_array_equal((x / zero).tt_supercore, (x * inf).tt_supercore)
    # per-stack factors divide as they multiply (a list was a TypeError for `/`)
    t3 = rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1))
    pair = UniformTuckerTensorTrain.from_t3((t3, t3), n=3, r=3)
    np.testing.assert_array_equal((pair / [2, 4]).tt_supercore,
                                  (pair * [0.5, 0.25]).tt_supercore)
    np.testing.assert_array_equal((pair / (2, 4)).tt_supercore,
                                  (pair / np.array([2, 4])).tt_supercore)
    # every real zero as 0 (Fraction's raised ZeroDivisionError); a value that
    # is not real is named as given (the message showed its inverse)
    from decimal import Decimal
    from fractions import Fraction
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal((x / Fraction(0)).tt_supercore, (x / 0.0).tt_supercore)
    np.testing.assert_array_equal((x / Fraction(1, 4)).tt_supercore, (x * 4).tt_supercore)
    for bad in (Decimal(2), Decimal(0), 1j, np.complex128(0), np.array([1j])):
        with pytest.raises(TypeError, match=f"`alpha` must be a real .*not {re.escape(repr(bad))}"):
            x / bad
    for op in (lambda: pair * [1, [2, 3]], lambda: pair / [1, [2, 3]]):
        with pytest.raises(ValueError, match="`alpha` must be a scalar or a rectangular"):
            op()


def test_list_factors_promote_as_numpy_arrays(rng):
    """A list or tuple of per-train factors takes part in the dtype as the
    NumPy array it makes (NumPy's float32 array times [1.0, 2.0] is float64),
    for `*` and `/` alike: `*` kept float32 while `/` gave float64."""
    t3 = rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1))
    pair = UniformTuckerTensorTrain.from_t3((t3, t3), n=3, r=3)
    pair32 = UniformTuckerTensorTrain(pair.tucker_supercore.astype(np.float32),
                                      pair.tt_supercore.astype(np.float32), pair.shape,
                                      pair.masks)
    dense = pair32.to_dense()
    for alpha in ([1.0, 2.0], (1.0, 2.0), [1, 2], [True, False], np.array([1, 2], np.int8)):
        want = np.result_type(dense, np.asarray(alpha))
        for got, ref in ((pair32 * alpha, dense * np.reshape(alpha, (2, 1, 1, 1))),
                         (alpha * pair32, dense * np.reshape(alpha, (2, 1, 1, 1)))):
            assert got.dtype == want == ref.dtype, alpha
            np.testing.assert_allclose(got.to_dense(), ref, rtol=1e-6)
        if not any(np.asarray(alpha) == 0):
            got = pair32 / alpha
            assert got.dtype == want, alpha
            np.testing.assert_allclose(got.to_dense(), dense / np.reshape(alpha, (2, 1, 1, 1)),
                                       rtol=1e-6)
    # a Python number stays weak: the train's dtype
    assert (pair32 * 2.0).dtype == (pair32 / 2.0).dtype == np.float32


def test_kernel_cache_info_has_lru_cache_fields():
    """kernel_cache_info claimed to be like lru_cache's cache_info() but had
    no maxsize."""
    info = kernel_cache_info()
    assert info._fields == functools.lru_cache()(len).cache_info()._fields
    assert info.maxsize == KERNELS._maxsize and info.currsize == len(KERNELS._store)
    for method in (KERNELS.info, KERNELS.clear):
        assert method.__doc__
    # eviction is documented for what it frees and what it cannot
    assert "never unloads" in " ".join(type(KERNELS).__doc__.split())


def _has_read_only_arg(dispatcher):
    return any(isinstance(t, numba.types.Array) and not t.mutable
               for sig in dispatcher.signatures for t in sig)


def test_read_only_supercores_reuse_the_compiled_kernel(rng):
    """np.ascontiguousarray passes a read-only array through, and Numba typed
    it as another array type: a second compile of each kernel while
    kernel_cache_info reported a hit.  Read-only inputs are copied for the
    kernels (never written) and reuse the compiled signature."""
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    idx = np.array([[0, 1, 1], [2, 3, 0]])
    vs = [np.linspace(-1, 1, n) for n in SHAPE]

    def run(t):
        return t.to_dense(), t.inner(t), t.entries(idx), t.apply(vs)

    want = run(x)
    p = tt_ops._parts(x.data)
    sizes = (p.n, p.r)  # (the padded N is no part of a key)
    keys = [("to_dense", x.shape, sizes, x.masks), ("inner", x.shape, sizes + sizes, x.masks, x.masks),
            ("chain", sizes, x.masks)]
    kernels = [KERNELS._store[k] for k in keys]
    counts = [len(getattr(k, "signatures", ())) for k in kernels]
    frozen = []
    for a in (x.tucker_supercore, x.tt_supercore):
        ro = a.copy()
        ro.setflags(write=False)
        frozen.append((ro, np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape),
                       np.broadcast_to(a, a.shape)))
    misses = kernel_cache_info().misses
    for U, G in zip(*frozen):
        assert not U.flags.writeable and not G.flags.writeable
        before = (U.copy(), G.copy())
        for got, ref in zip(run(UniformTuckerTensorTrain(U, G, x.shape, x.masks)), want):
            np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(U, before[0])
        np.testing.assert_array_equal(G, before[1])
    assert kernel_cache_info().misses == misses
    if numba.config.DISABLE_JIT:  # the kernels are plain Python functions: no signatures
        return
    assert [len(k.signatures) for k in kernels] == counts
    x.svd()  # the SVD frames' repair kernel got read-only masks from np.broadcast_to
    for k in kernels + [tt_kernels.orthonormal_frame_repair]:
        assert not _has_read_only_arg(k), k.signatures


# ---------------------------------------------------------------------------
# the stack split over threads
# ---------------------------------------------------------------------------

def random_stack(rng, count, shape=SHAPE, n=4, r=4, N=5):
    """A uniform stack of ``count`` trains whose ranks differ per element."""
    t3s = []
    for _ in range(count):
        tk = rng.integers(1, n + 1, size=len(shape))
        tt = rng.integers(1, r + 1, size=len(shape) + 1)
        t3s.append(rand_t3(rng, shape, tk, tt))
    return UniformTuckerTensorTrain.from_t3(tuple(t3s), n=n, r=r, N=N)


class _RecordingPool:
    """The module's pool, recording the stack ranges submitted to it."""

    def __init__(self, pool):
        self.pool, self.ranges = pool, []

    def submit(self, fn, *args):
        self.ranges.append(args[-2:])
        return self.pool.submit(fn, *args)


def _kernel_results(x, y, idx, vs):
    return [x.to_dense(), x.inner(y), x.norm(), x.entries(idx), x.apply(vs)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("count", [1, 7])
def test_threaded_stack_gives_the_serial_bytes(rng, monkeypatch, dtype, count):
    """to_dense, inner, norm, entries and apply over a stack split into
    ranges on 2, 3 and 4 threads (7 = uneven for each; the pool has fewer
    workers than 3 or 4 on a small machine, so ranges also queue) give the
    bytes of one serial call; a stack of one stays on the calling thread."""
    def cast(t):
        return UniformTuckerTensorTrain(t.tucker_supercore.astype(dtype),
                                        t.tt_supercore.astype(dtype), t.shape, t.masks)

    x, y = cast(random_stack(rng, count)), cast(gappy(random_stack(rng, count, n=3, r=3), rng))
    idx = rng.integers(0, 2, size=(5, len(SHAPE)))
    vs = [rng.standard_normal((2, N)).astype(dtype) for N in SHAPE]
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 1 << 62)
    serial = _kernel_results(x, y, idx, vs)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    recording = _RecordingPool(tt_ops._thread_pool())
    monkeypatch.setattr(tt_ops, "_thread_pool", lambda: recording)
    for threads in (2, 3, 4):
        monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: threads)
        recording.ranges.clear()
        for got, want in zip(_kernel_results(x, y, idx, vs), serial):
            assert got.dtype == dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
        if count == 1:
            assert recording.ranges == []
        else:  # the calling thread computes [0, bounds[1]) of each of the 5 calls
            bounds = [count * t // threads for t in range(threads + 1)]
            assert recording.ranges == 5 * list(zip(bounds[1:-1], bounds[2:]))
    want = np.stack([naive_dense(*t.data) for t in leaves(x.to_t3())])
    assert rel_err(serial[0], want) < (1e-5 if dtype == np.float32 else RTOL)
    if numba.config.DISABLE_JIT:  # plain Python kernels: no signatures
        return
    # the split and the serial calls ran one compiled kernel per structure and dtype
    kernels = [k for key, k in KERNELS._store.items()
               if any(isinstance(m, UT3Masks) and m == x.masks for m in key)]
    assert len(kernels) == 4  # to_dense, inner (x, y), inner (x, x), chain
    for kernel in kernels:
        assert [str(sig[0].dtype) for sig in kernel.signatures].count(np.dtype(dtype).name) == 1


def _svd_results(x):
    """Every array of the SVD-based results of ``x``."""
    out = []
    for tr, (tsv, ttsv) in (x.svd(), x.svd(max_tucker_ranks=2, max_tt_ranks=2, rtol=1e-2)):
        out += [tr.tucker_supercore, tr.tt_supercore, *tr.masks, tsv, ttsv]
    for kind in ORTHOGONALIZE_KINDS:
        o = x.orthogonalize(kind)
        out += [o.tucker_supercore, o.tt_supercore, *o.masks]
    return out + [x.norm("orthogonal")]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("chunked", [False, True])
def test_threaded_svds_give_the_serial_bytes(rng, monkeypatch, path, dtype, chunked):
    """A large stack's LAPACK SVDs are split over the threads (LAPACK runs
    without the GIL; 64 trains of the asv Svd case 83 -> 68-80 ms on 2
    cores), and so are its chunks (TT_CPU_CHUNK_BYTES; each chunk's SVDs
    then stay on its thread); each matrix and each chunk is computed alone,
    so svd, the orthogonalizations and norm("orthogonal") give the bytes of
    one serial call."""
    x = random_stack(rng, 7)
    x = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                 x.tt_supercore.astype(dtype), x.shape, x.masks)
    if chunked:  # chunks of 2 stack elements: 4 of them
        n, r, N = x.padded_sizes
        monkeypatch.setattr(tt_ops._config, "TT_CPU_CHUNK_BYTES",
                            2 * max(r * n * r, n * N) * np.dtype(dtype).itemsize)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 1 << 62)
    serial = _svd_results(x)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    recording = _RecordingPool(tt_ops._thread_pool())
    monkeypatch.setattr(tt_ops, "_thread_pool", lambda: recording)
    for threads in (2, 3):
        monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: threads)
        recording.ranges.clear()
        for got, want in zip(_svd_results(x), serial, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes()
        assert recording.ranges  # (the split ran)
        if chunked:  # ranges of the 4 chunks only: none of a chunk's own SVD batches
            assert all(end <= 4 for _, end in recording.ranges)


def test_train_linear_algebra_runs_blas_on_one_thread(rng, monkeypatch):
    """The SVD, orthogonalizations and norm("orthogonal") run BLAS and LAPACK
    on one thread (threadpoolctl; OpenBLAS's threads slowed their many small
    calls 2x on 2 cores and contended with the stack's own split), and put
    the process's setting back -- after an error too, and where threads
    call them at once (the last one out restores it)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")  # (a dependency: CI has it)

    def blas_threads():
        return [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
                if lib["user_api"] == "blas"]

    seen = []
    masked = tt_ops._masked
    monkeypatch.setattr(tt_ops, "_masked", lambda p: seen.append(blas_threads()) or masked(p))
    x = random_stack(rng, 7)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        assert blas_threads() and set(blas_threads()) == {2}
        x.svd(max_tucker_ranks=2)
        x.orthogonalize("right")
        x.norm("orthogonal")
        assert seen and all(set(s) == {1} for s in seen)
        assert set(blas_threads()) == {2}
        bad = x.tt_supercore.copy()
        bad[(0,) * bad.ndim] = np.inf  # (slot 0 of every rank is live)
        with pytest.raises(ValueError, match="inf or NaN"):
            UniformTuckerTensorTrain(x.tucker_supercore, bad, x.shape, x.masks).svd()
        assert set(blas_threads()) == {2}
        barrier = threading.Barrier(4)

        def call(_):
            barrier.wait()
            return x.svd(max_tucker_ranks=2)[0].tt_supercore

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(call, range(4)))
        assert all(r.tobytes() == results[0].tobytes() for r in results)
        assert set(blas_threads()) == {2}


def _flat_stack(a, stack):
    """``a`` (a result of :func:`_svd_results`) with its stack axes as one:
    axis 0 of the norm, axis 1 of the others."""
    at = 0 if a.ndim == len(stack) else 1
    return a.reshape(a.shape[:at] + (-1,) + a.shape[at + len(stack):]), at


def _sub_stack(x, lo, hi):
    """Stack elements ``[lo, hi)`` of ``x``'s flattened stack, as a 1-d stack."""
    k = len(x.stack_shape)
    U, G, shape, masks = x.data
    flat = [a.reshape(a.shape[:1] + (-1,) + a.shape[1 + k:])[:, lo:hi]
            for a in (U, G, masks[0], masks[1])]
    return UniformTuckerTensorTrain(flat[0], flat[1], shape, UT3Masks(flat[2], flat[3]))


def _assert_whole_is_its_chunks(x, whole, ranges, stack, calls):
    """Each range ``[lo, hi)`` of ``x``'s flat stack, computed alone and in
    one chunk (``calls``: the recorded ``_stack_chunks`` results), gives byte
    for byte its part of ``whole`` (:func:`_svd_results` of ``x``, stack
    shape ``stack``)."""
    for lo, hi in ranges:
        calls.clear()
        part = _svd_results(_sub_stack(x, lo, hi))
        assert calls and all(c == [(0, hi - lo)] for c in calls)  # (no chunks in a chunk)
        for got, want in zip(whole, part, strict=True):
            got, at = _flat_stack(got, stack)
            got = got[(slice(None),) * at + (slice(lo, hi),)]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("stack", [(7,), (2, 3)])
def test_a_large_stack_is_computed_as_its_chunks(rng, monkeypatch, path, dtype, stack):
    """Past TT_CPU_CHUNK_BYTES per core slab the NumPy SVD, orthogonalizations
    and norm("orthogonal") run on chunks of the stack (a sum of 64 trains at
    n = 16, r = 32: its SVD 661-785 -> 361-387 ms on 2 cores): the result
    is, byte for byte, each chunk's own put together, masks and singular
    values included."""
    x = random_stack(rng, math.prod(stack))
    U, G, shape, masks = x.data
    U, G, mk, mt = (a.reshape(a.shape[:1] + stack + a.shape[2:])
                    for a in (U.astype(dtype), G.astype(dtype), masks[0], masks[1]))
    x = UniformTuckerTensorTrain(U, G, shape, UT3Masks(mk, mt))
    n, r, N = x.padded_sizes
    slab = max(r * n * r, n * N) * np.dtype(dtype).itemsize
    monkeypatch.setattr(tt_ops._config, "TT_CPU_CHUNK_BYTES", 3 * slab + slab // 2)  # 3 a chunk
    # (7: three chunks of at most 3, made an even count of equal ones)
    sizes = [1, 2, 2, 2] if stack == (7,) else [3, 3]
    calls, computed = [], []
    chunks, masked = tt_ops._stack_chunks, tt_ops._masked
    monkeypatch.setattr(tt_ops, "_stack_chunks",
                        lambda p: calls.append(got := chunks(p)) or got)
    monkeypatch.setattr(tt_ops, "_masked", lambda p: computed.append(p.S) or masked(p))
    whole = _svd_results(x)
    bounds = np.cumsum([0] + sizes)
    assert calls and all(c == list(zip(bounds[:-1], bounds[1:])) for c in calls)
    assert sorted(set(computed)) == sorted(set(sizes))  # (each chunk apart)
    _assert_whole_is_its_chunks(x, whole, zip(bounds[:-1], bounds[1:]), stack, calls)


@pytest.mark.parametrize("count", [1, 7])
def test_a_stack_with_enough_work_is_computed_as_its_halves(rng, monkeypatch, path, count):
    """Within one chunk, a stack whose SVD work reaches TT_CPU_SPLIT_WORK is
    computed as its two halves (a sum of 8 trains at n = 16, r = 32: its
    SVD 50.6-51.9 -> 33.4-33.8 ms on 2 cores): byte for byte each half's
    own result, on any number of threads; a stack of one is never split,
    and below the threshold the stack stays whole."""
    x = random_stack(rng, count)
    work = tt_ops._chunks_work(tt_ops._parts(x.data))
    calls = []
    chunks = tt_ops._stack_chunks
    monkeypatch.setattr(tt_ops, "_stack_chunks", lambda p: calls.append(got := chunks(p)) or got)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SPLIT_WORK", work + 1)
    _svd_results(x)
    assert calls and all(c == [(0, count)] for c in calls)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SPLIT_WORK", work)
    calls.clear()
    whole = _svd_results(x)
    halves = [(0, 3), (3, 7)] if count == 7 else [(0, 1)]
    assert calls and all(c == halves for c in calls)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    recording = _RecordingPool(tt_ops._thread_pool())
    monkeypatch.setattr(tt_ops, "_thread_pool", lambda: recording)
    for threads in (2, 3):
        monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: threads)
        for got, want in zip(_svd_results(x), whole, strict=True):
            assert got.tobytes() == want.tobytes()
    if count > 1:  # the second half went to a thread (nothing split inside a half)
        assert recording.ranges and set(recording.ranges) == {(1, 2)}
    _assert_whole_is_its_chunks(x, whole, halves, (count,), calls)  # (a half's work: less)


def test_svds_leave_out_rows_and_columns_that_are_padding_in_every_matrix(rng, monkeypatch,
                                                                          path):
    """Rows and columns that are padding in every stack element are zero and
    left out of the SVDs (an SVD costs ~ rows x columns^2): after a
    truncating step the next left unfolding has 32 live rows of r n = 128
    (64 trains of the asv Svd case 92-96 -> 83-84 ms on one thread), and a
    small stack's matrices shrink to their real sizes (one train of that
    case 4.3 -> 3.7 ms).  LAPACK met such zero rows and columns in every
    sweep."""
    x = random_stack(rng, 3)
    real_svd, seen = np.linalg.svd, []

    def svd(A, *args, **kwargs):
        seen.append(np.array(A))
        return real_svd(A, *args, **kwargs)

    want = _svd_results(x)
    monkeypatch.setattr(np.linalg, "svd", svd)
    got = _svd_results(x)
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
    assert len(seen) > 20
    for A in seen:  # (random live entries: a live row or column is nonzero somewhere)
        batch = tuple(range(A.ndim - 2))
        assert (A != 0).any(axis=batch + (-1,)).all(), A.shape
        assert (A != 0).any(axis=batch + (-2,)).all(), A.shape


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_frame_is_zero_outside_its_masks(rng, monkeypatch, path, dtype):
    """What leaving rows and columns out of the SVDs rests on: at every call
    of _frame (each step of svd, the orthogonalizations and norm("orthogonal"),
    and the lossless bound steps) the matrix is zero outside its element's
    row mask x column mask: the input is masked, and each step leaves the
    next step's padding zero.  Gappy masks, ranks 1 and 0, and stacks that
    hold no live slot at all included."""
    real_frame, calls = tt_ops._frame, []

    def checked(A, row_mask, col_mask, *args, **kwargs):
        batch = A.shape[:-2]
        live = (np.broadcast_to(row_mask, batch + A.shape[-2:-1])[..., :, None]
                & np.broadcast_to(col_mask, batch + A.shape[-1:])[..., None, :])
        assert not np.asarray(A)[~live].any()
        calls.append(A.shape)
        return real_frame(A, row_mask, col_mask, *args, **kwargs)

    monkeypatch.setattr(tt_ops, "_frame", checked)
    stacks = [random_stack(rng, 4), gappy(random_stack(rng, 3, n=3, r=4), rng)]
    sparse = random_stack(rng, 3)  # some slots of each mask dropped, some all
    mk, mt = (np.array(m) & (rng.random(m.shape) < f) for m, f in zip(sparse.masks, (0.7, 0.6)))
    stacks.append(UniformTuckerTensorTrain(sparse.tucker_supercore, sparse.tt_supercore,
                                           sparse.shape, (mk, mt)))
    stacks.append(UniformTuckerTensorTrain(sparse.tucker_supercore, sparse.tt_supercore,
                                           sparse.shape, (mk & False, mt)))
    for x in stacks:
        x = UniformTuckerTensorTrain(x.tucker_supercore.astype(dtype),
                                     x.tt_supercore.astype(dtype), x.shape, x.masks)
        _svd_results(x)
        x.svd(max_tucker_ranks=1, max_tt_ranks=1)
        x.svd(rtol=0.3)
    assert len(calls) > 100


def test_worker_exceptions_propagate_and_scratch_is_checked_per_thread(rng, monkeypatch):
    """A short scratch set is refused by the kernel on the thread that got it:
    the ValueError reaches the caller, which returns only after every running
    range: a worker's error leaves the other ranges computed; the caller's own
    leaves each other range computed or untouched (not started: dropped)."""
    x = random_stack(rng, 6)
    p = tt_ops._parts(x.data)
    tables = tt_ops._tables(p)
    kernel = tt_kernels.build_ut3_to_dense(p.shape, *tables)
    lengths = tt_kernels.ut3_to_dense_scratch(p.shape, tables[1], tables[3])
    want = x.to_dense().reshape(6, -1)
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: 3)
    for short in range(3):  # set 0 goes to the caller (range 0-1), 1 and 2 to workers
        made = []

        def scratch():
            made.append(len(made))
            cut = 1 if made[-1] == short else 0
            return (np.empty(lengths[0] - cut), *(np.empty(n) for n in lengths[1:]))

        out = np.full(want.shape, np.nan)
        with pytest.raises(ValueError, match="scratch shorter"):
            tt_ops._run_stack(kernel, 6, 1, (p.U, p.G, out), scratch)
        bad = {0: slice(0, 2), 1: slice(2, 4), 2: slice(4, 6)}[short]
        assert np.isnan(out[bad]).all()
        for lo in range(0, 6, 2):
            if lo != bad.start:
                done = out[lo:lo + 2].tobytes() == want[lo:lo + 2].tobytes()
                assert done or (short == 0 and np.isnan(out[lo:lo + 2]).all())


def test_a_split_at_interpreter_shutdown_runs_on_the_calling_thread(rng, monkeypatch):
    """After interpreter shutdown began, concurrent.futures takes no new work (an
    atexit handler, a non-daemon thread still running): the ranges run on the
    calling thread, with the serial bytes."""
    x = random_stack(rng, 6)
    want = x.to_dense()
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: 3)

    def closed():
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")
    monkeypatch.setattr(tt_ops, "_thread_pool", closed)
    assert x.to_dense().tobytes() == want.tobytes()


def test_small_calls_start_no_pool(rng, monkeypatch):
    """Below TT_CPU_SERIAL_WORK the kernels run on the calling thread: no pool
    is created and no thread started; above it the pool is created once."""
    monkeypatch.setattr(tt_ops, "_pool", None)
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    idx = np.array([[0, 1, 1], [2, 3, 0]])
    vs = [np.linspace(-1, 1, n) for n in SHAPE]
    threads = threading.active_count()
    for f in (x.to_dense, x.norm, lambda: x.inner(x), lambda: x.entries(idx), lambda: x.apply(vs)):
        f()
    assert tt_ops._pool is None and threading.active_count() == threads
    # above the threshold: the pool is created on the first call, then reused
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: 2)
    created = []
    real = tt_ops.concurrent.futures.ThreadPoolExecutor
    monkeypatch.setattr(tt_ops.concurrent.futures, "ThreadPoolExecutor",
                        lambda *a: created.append(a) or real(*a))
    x.to_dense()
    x.inner(x)
    assert len(created) == 1 and tt_ops._pool is not None
    tt_ops._pool.shutdown()  # (monkeypatch puts the module's own pool back)


def test_threaded_stack_in_a_forked_child(rng, monkeypatch):
    """A child forked after the parent's pool ran gets a pool of its own (the
    parent's workers do not exist there) and computes the same bytes."""
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    monkeypatch.setattr(tt_ops._config, "TT_CPU_SERIAL_WORK", 0)
    monkeypatch.setattr(tt_ops, "_cpu_threads", lambda: 2)
    x = random_stack(rng, 5)
    want = x.to_dense()
    parent_pool = tt_ops._pool
    assert parent_pool is not None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        ok = False
        try:
            ok = tt_ops._pool is None and x.to_dense().tobytes() == want.tobytes() and \
                tt_ops._pool is not parent_pool
        finally:
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_child_forked_inside_an_op_gets_its_blas_threads_back():
    """A child forked while a parent's thread runs BLAS on one thread (inside
    svd and the like) would keep that setting, no thread of its own leaving
    the op: it gets the original back at the fork; the parent's is restored
    when its op ends."""
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return {lib["num_threads"] for lib in threadpoolctl.threadpool_info()
                if lib["user_api"] == "blas"}

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        with tt_ops._one_blas_thread():
            assert blas_threads() == {1}
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                ok = False
                try:
                    ok = blas_threads() == {2} and tt_ops._blas_users == 0
                    with tt_ops._one_blas_thread():
                        ok = ok and blas_threads() == {1}
                    ok = ok and blas_threads() == {2}
                finally:
                    os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            assert blas_threads() == {1}
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert blas_threads() == {2}


def test_kernel_cache_builds_each_key_once_across_threads():
    """Threads meeting a new structure at once each built (and, without a
    writable disk cache, compiled) their own kernel; the last one stored won
    and every thread counted a miss.  One build per key; the others wait and
    count hits; a failed build lets a waiter try again."""
    cache = tt_masks.KernelCache()
    calls, ready = [], threading.Event()

    def factory():
        calls.append(threading.get_ident())
        ready.wait(5)  # every thread reaches get while this build runs
        return object()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get, "k", factory) for _ in range(8)]
        time.sleep(0.2)
        ready.set()
        got = {id(f.result()) for f in futures}
    assert len(calls) == 1 and len(got) == 1
    assert cache.info()[:2] == (7, 1) and cache._building == {}

    tries, building, release = [], threading.Event(), threading.Event()

    def failing_once():
        tries.append(1)
        if len(tries) == 1:
            building.set()
            release.wait(5)
            raise RuntimeError("first build fails")
        return "kernel"

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.get, "f", failing_once)
        assert building.wait(5)  # the first call is the builder
        second = pool.submit(cache.get, "f", failing_once)
        time.sleep(0.1)
        release.set()
        with pytest.raises(RuntimeError, match="first build fails"):
            first.result()
        assert second.result() == "kernel"
    assert len(tries) == 2 and cache._building == {}


@contextlib.contextmanager
def _kernel_build_in_flight(x):
    """The state of another thread building ``x``'s to_dense kernel."""
    p = tt_ops._parts(x.data)
    key = ("to_dense", x.shape, (p.n, p.r), x.masks.stack_flat())
    kernel = KERNELS._store.pop(key)
    KERNELS._building[key] = threading.Event()
    try:
        yield
    finally:
        KERNELS._building.pop(key).set()
        KERNELS._store[key] = kernel


@pytest.mark.parametrize("held", ["lock", "build"])
def test_kernel_cache_state_at_a_fork(rng, held):
    """A child forked while another thread of the parent held the kernel
    cache's lock (a lookup, ``kernel_cache_info``) hung in its first train op:
    no thread of the child would release it; so would one forked while
    another thread was building a kernel (a build that never ends there).
    The child gets a lock and a table of builds of its own."""
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    x = random_stack(rng, 3)
    want = x.to_dense()
    # (held as by another thread at the fork)
    with KERNELS._lock if held == "lock" else _kernel_build_in_flight(x):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            ok = False
            try:
                signal.alarm(60)  # a hang ends the child, not the suite
                ok = x.to_dense().tobytes() == want.tobytes()
            finally:
                os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# ---------------------------------------------------------------------------
# dtypes, files, functional layer
# ---------------------------------------------------------------------------

def test_float32(rng, path):
    x, x3 = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    x32 = UniformTuckerTensorTrain(x.tucker_supercore.astype(np.float32),
                                   x.tt_supercore.astype(np.float32), x.shape, x.masks)
    assert x32.to_dense().dtype == np.float32
    assert x32.inner(x32).dtype == np.float32
    assert rel_err(x32.to_dense(), x.to_dense()) < 1e-5
    tr, (tsv, _) = x32.svd()
    assert tr.dtype == np.float32 and tsv.dtype == np.float32
    assert rel_err(tr.to_dense(), x.to_dense()) < 1e-5
    with pytest.raises(TypeError, match="float32 or float64"):
        UniformTuckerTensorTrain(x.tucker_supercore.astype(np.int64), x.tt_supercore, x.shape, x.masks)


def test_save_load_round_trip(xy, tmp_path):
    x, _, _, _, _, _ = xy
    path = tmp_path / "train.npz"
    x.save(path)
    y = UniformTuckerTensorTrain.load(path)
    assert y.masks == x.masks and y.masks[0].dtype == np.bool_ and isinstance(y.masks[0], np.ndarray)
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y.tucker_supercore, x.tucker_supercore)
    np.testing.assert_array_equal(y.tt_supercore, x.tt_supercore)
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="lacks"):
        UniformTuckerTensorTrain.load(tmp_path / "other.npz")
    # a name without .npz: np.savez writes name.npz, and load takes the name back
    x.save(str(tmp_path / "bare"))
    assert (tmp_path / "bare.npz").exists() and not (tmp_path / "bare").exists()
    for name in (str(tmp_path / "bare"), tmp_path / "bare"):
        np.testing.assert_array_equal(UniformTuckerTensorTrain.load(name).tt_supercore,
                                      x.tt_supercore)
    with open(tmp_path / "file.npz", "wb") as fh:  # an open file, as np.savez takes
        x.save(fh)
    with open(tmp_path / "file.npz", "rb") as fh:
        assert UniformTuckerTensorTrain.load(fh).shape == x.shape
    with pytest.raises(FileNotFoundError):
        UniformTuckerTensorTrain.load(tmp_path / "missing")


def test_load_of_a_missing_name_says_both_files_were_tried(tmp_path):
    """save("c") writes c.npz and load("c") reads it; where neither exists the
    error named only 'c' (a user's review)."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(np.random.default_rng(2), SHAPE, (2, 2, 2),
                                                 (1, 2, 2, 1)))
    x.save(str(tmp_path / "c"))
    back = UniformTuckerTensorTrain.load(str(tmp_path / "c"))
    np.testing.assert_array_equal(back.to_dense(), x.to_dense())
    missing = str(tmp_path / "d")
    with pytest.raises(FileNotFoundError, match=re.escape(f"(nor '{missing}.npz'): '{missing}'")):
        UniformTuckerTensorTrain.load(missing)
    with pytest.raises(FileNotFoundError) as info:  # (a .npz name: that file alone)
        UniformTuckerTensorTrain.load(missing + ".npz")
    assert "nor" not in str(info.value)


def test_load_refuses_what_is_not_a_ut3_file(tmp_path):
    """Other files failed with whatever NumPy or zipfile raised (a context
    manager TypeError, BadZipFile, 'pickled data', 'only 0-dimensional
    arrays'), and a float shape or version was truncated by int()."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(np.random.default_rng(2), SHAPE, (2, 2, 2),
                                                 (1, 2, 2, 1)))
    good = tmp_path / "good.npz"
    x.save(good)
    fields = dict(np.load(good))
    raw = good.read_bytes()
    (tmp_path / "text.npz").write_text("hello")
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    np.save(tmp_path / "array.npy", np.ones(3))
    cases = {"text.npz": "neither a .npz archive nor a .npy file",
             "empty.npz": "an empty, truncated or corrupted",
             "truncated.npz": "an empty, truncated or corrupted",
             "array.npy": "a single .npy array"}
    for key, value, what in (("shape", np.array([[3], [4]]), "`shape` must be a 1-d integer"),
                             ("shape", np.array([3.5, 4.0, 2.0]), "`shape` must be a 1-d integer"),
                             ("format_version", np.array([1, 1]), "`format_version` must be one"),
                             ("format_version", np.array(1.7), "`format_version` must be one"),
                             ("format_version", np.array(2), "format version 2"),
                             ("tt_supercore", np.array([None], dtype=object), "an entry .* holds Python objects"),
                             ("tucker_edge_mask", fields["tucker_edge_mask"].astype(np.uint8),
                              "it holds no valid train.*dtype bool")):
        name = f"bad_{len(cases)}.npz"
        np.savez(tmp_path / name, **{**fields, key: value})
        cases[name] = what
    for name, what in cases.items():
        with pytest.raises(ValueError, match=f"`path` \\('.*{name}'\\) is not a zorch_nb UT3 file: {what}"):
            UniformTuckerTensorTrain.load(tmp_path / name)
    # a file from a machine of the other byte order is a valid train
    np.savez(tmp_path / "swapped.npz", **{**fields, **{k: fields[k].astype(">f8") for k in
                                                       ("tucker_supercore", "tt_supercore")}})
    y = UniformTuckerTensorTrain.load(tmp_path / "swapped.npz")
    assert y.dtype == np.float64 and y.masks == x.masks
    np.testing.assert_array_equal(y.tt_supercore, x.tt_supercore)
    # found by fuzzing: an entry whose .npy header claims a huge shape made
    # NumPy allocate it first (MemoryError: 7.28 TiB for a file of 1 KiB)
    import io
    import zipfile
    for key in ("shape", "tt_supercore"):
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)})
        with zipfile.ZipFile(good) as src, zipfile.ZipFile(tmp_path / "claims.npz", "w") as out:
            for member in src.namelist():
                out.writestr(member, header.getvalue() + bytes(16) if member == key + ".npy"
                             else src.read(member))
        with pytest.raises(ValueError, match=rf"entry `{key}` claims 8000000000000 bytes of "
                                             rf"int64 data of shape \(1000000000000,\), but "
                                             f"holds 16"):
            UniformTuckerTensorTrain.load(tmp_path / "claims.npz")
    # found by fuzzing: one flipped field of an entry's central-directory
    # record (encrypted, an unknown compression method or zip version) raised
    # zipfile's RuntimeError / NotImplementedError
    import struct
    record = raw.index(b"PK\x01\x02")
    for offset, value in ((8, 1), (10, 99), (6, 255), (8, 0x20)):
        bad = bytearray(raw)
        bad[record + offset:record + offset + 2] = struct.pack("<H", value)
        with pytest.raises(ValueError, match="not a zorch_nb UT3 file: (an entry is corrupted"
                                             "|an empty, truncated or corrupted)"):
            UniformTuckerTensorTrain.load(io.BytesIO(bytes(bad)))
    # neither a name nor a binary file: NumPy's errors named no argument
    with open(tmp_path / "t.txt", "w") as text:
        for bad, what in ((None, "not NoneType"), (3, "not int"),
                          (text, "opened in binary mode, not the text-mode file")):
            for call in (x.save, UniformTuckerTensorTrain.load):
                with pytest.raises(TypeError, match=f"Argument `path` must be a file name .*{what}"):
                    call(bad)
    buffer = io.BytesIO()
    x.save(buffer)
    buffer.seek(0)
    assert UniformTuckerTensorTrain.load(buffer).masks == x.masks


def test_functional_layer_on_data(xy):
    x, y, xd, yd, _, _ = xy
    data = tt_ops.ut3_add(x.data, y.data)
    assert isinstance(data[3], UT3Masks)
    dense = tt_ops.ut3_to_dense(data)
    assert rel_err(dense, np.stack(xd) + np.stack(yd)) < RTOL
    tk, tt = x.data[0], x.data[1]
    raw = (tk, tt, list(x.shape), (np.array(x.masks[0]), np.array(x.masks[1])))
    assert rel_err(tt_ops.ut3_norm(raw), x.norm()) < RTOL
    with pytest.raises(TypeError, match="4-tuple"):
        tt_ops.ut3_norm(raw[:3])


# ---------------------------------------------------------------------------
# CuPy supercores (GPU machine)
# ---------------------------------------------------------------------------

@pytest.mark.gpu
def test_cupy_supercores_match_numpy(xy):
    cp = pytest.importorskip("cupy")
    x, y, xd, yd, _, _ = xy
    gx = UniformTuckerTensorTrain(cp.asarray(x.tucker_supercore), cp.asarray(x.tt_supercore), x.shape, x.masks)
    gy = UniformTuckerTensorTrain(cp.asarray(y.tucker_supercore), cp.asarray(y.tt_supercore), y.shape, y.masks)
    assert isinstance(gx.masks[0], np.ndarray)
    idx = np.array([[0, 1, 1], [2, 3, 0]])
    pairs = [
        (gx.to_dense(), x.to_dense()), (gx.inner(gy), x.inner(y)), (gx.norm(), x.norm()),
        (gx.entries(idx), x.entries(idx)), ((gx + gy).to_dense(), (x + y).to_dense()),
        (gx.hadamard(gy).to_dense(), x.hadamard(y).to_dense()),
        (gx.svd(2, 2)[0].to_dense(), x.svd(2, 2)[0].to_dense()),
        ((gx + gx).svd(rtol=1e-12)[0].tt_supercore, (x + x).svd(rtol=1e-12)[0].tt_supercore),
        ((gx + gy).compact(r=7).tt_supercore, (x + y).compact(r=7).tt_supercore),
    ]
    G = np.array(x.tt_supercore)  # the same tensor, cores far from 1: products rebalanced
    G[0], G[1] = np.ldexp(G[0], 600), np.ldexp(G[1], -600)
    far = UniformTuckerTensorTrain(x.tucker_supercore, G, x.shape, x.masks)
    gfar = UniformTuckerTensorTrain(cp.asarray(x.tucker_supercore), cp.asarray(G), x.shape,
                                    x.masks)
    pairs += [(gfar.hadamard(gfar).tt_supercore, far.hadamard(far).tt_supercore),
              ((gfar * 2.0**500).tt_supercore, (far * 2.0**500).tt_supercore)]
    for kind in ORTHOGONALIZE_KINDS:
        pairs.append((gx.orthogonalize(kind).tt_supercore, x.orthogonalize(kind).tt_supercore))
    for g, c in pairs:
        assert isinstance(g, cp.ndarray)
        assert rel_err(cp.asnumpy(g), c) < 1e-9
    with pytest.raises(TypeError, match=r"\.get\(\)"):
        UniformTuckerTensorTrain(gx.tucker_supercore, gx.tt_supercore, x.shape,
                                 (cp.asarray(x.masks[0]), x.masks[1]))
    # a device scale or vector beside a NumPy train is named (CuPy's own
    # refusal of the implicit copy named nothing); host ones beside a CuPy
    # train are copied to the device
    vectors = [np.ones(n) for n in x.shape]
    with pytest.raises(TypeError, match="`alpha` is a device array"):
        x * cp.asarray(2.0)
    with pytest.raises(TypeError, match=r"`vectors\[1\]` is a device array"):
        x.apply([vectors[0], cp.asarray(vectors[1])] + vectors[2:])
    for g, c in (((gx * np.asarray(2.0)).to_dense(), (x * 2.0).to_dense()),
                 (gx.apply(vectors), x.apply(vectors))):
        assert isinstance(g, cp.ndarray) and rel_err(cp.asnumpy(g), c) < 1e-9


def test_mask_index_table_is_its_definition(rng):
    """idx[..., :cnt] the True positions in order, the rest 0 (documented;
    the padding slot at position cnt was left unzeroed by a `>` for `>=`:
    from mutation testing), cnt the count; for any mask, all-False and
    all-True rows included."""
    mask = rng.random((3, 5, 6)) < 0.5
    mask[0, 0], mask[0, 1] = False, True
    idx, cnt = tt_kernels.mask_index_table(mask)
    assert idx.dtype == cnt.dtype == np.int64 and idx.shape == mask.shape
    for pos in np.ndindex(mask.shape[:-1]):
        real = np.flatnonzero(mask[pos])
        assert cnt[pos] == len(real)
        assert idx[pos].tolist() == real.tolist() + [0] * (mask.shape[-1] - len(real)), pos


@pytest.mark.filterwarnings("error::RuntimeWarning")  # overflows are handled, not warned
def test_range_is_kept_where_only_one_stack_element_is_far(xy, path):
    """The scaling decision takes the worst stack element: cores of 2**600
    and 2**-600 in element 0 only, element 1 (the last) near 1, gave inf
    where it looked at the last element alone (from mutation testing)."""
    x = xy[0]
    idx = np.stack(np.unravel_index(np.arange(0, math.prod(x.shape), 7), x.shape), axis=-1)
    vs = [np.linspace(-1, 2, n) for n in x.shape]
    want = (x.to_dense(), x.entries(idx), x.apply(vs))
    U, G = np.array(x.tucker_supercore), np.array(x.tt_supercore)
    k = 600
    U[0, 0] *= 2.0**k  # (d, S, ...): core 0 of element 0 up, its last core down
    G[0, 0] *= 2.0**k
    U[-1, 0] *= 2.0**-k
    G[-1, 0] *= 2.0**-k
    far = UniformTuckerTensorTrain(U, G, x.shape, x.masks)
    got = (far.to_dense(), far.entries(idx), far.apply(vs))
    for w, g in zip(want, got):
        assert np.isfinite(w).all()
        np.testing.assert_array_equal(g, w)


def test_frame_repair_reorthogonalizes_a_long_candidate():
    """A candidate mostly along an earlier vector (1e6 q0 + 0.8 w, w a unit
    vector orthogonal to q0) keeps 0.8 of norm after one Gram-Schmidt pass,
    with the rounding of 1e6 q0 left along q0; the second pass removes it
    (a single pass left |q0 . q1| ~ 4e-10: from mutation testing)."""
    M = 6
    q0 = np.ones(M) / np.sqrt(M)
    w = np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5])
    w /= np.linalg.norm(w)
    F = np.stack([q0, 1e6 * q0 + 0.8 * w])[None].copy()
    tt_kernels.orthonormal_frame_repair(F, np.ones((1, M), bool), np.array([2]))
    np.testing.assert_allclose(F[0] @ F[0].T, np.eye(2), atol=1e-14)
    assert abs(F[0, 1] @ w) > 1 - 1e-9  # (the sign: w sums to 0, so either)


def test_to_dense_scratch_where_the_last_bond_has_no_live_slot(rng):
    """With no live slot on bond d the last core's H still holds its
    tt_cnt[d - 1] * N bond sums (the zero tensor), the widest scratch here:
    sized by tt_cnt[d] alone it was 0 and the kernel wrote past a shorter H
    (no bounds checks; from mutation testing)."""
    shape, n, r = (2, 9), 3, 4
    U = rng.standard_normal((2, n, 9))
    G = rng.standard_normal((2, r, n, r))
    mk = np.ones((2, n), bool)
    mt = np.ones((3, r), bool)
    mt[0, 1:] = False
    mt[2, :] = False  # bond d: no live slot
    x = UniformTuckerTensorTrain(U, G, shape, (mk, mt))
    # P: ones (1); Q: after core 0 (2 * 4); H: core 1's 4 * 9 bond sums;
    # Uc: 3 * 9 factor rows; Gc: core 0's live block (1 * 3 * 4)
    p, lengths, kernel, bufs, out = _guarded_to_dense(x, shape)
    assert lengths == (1, 8, 36, 27, 12)
    assert p.U.shape == (2, 1, n, 9)  # the stack axis (here of one) as the kernel takes it
    kernel(np.ascontiguousarray(p.U), np.ascontiguousarray(p.G), out,
           *(b[:k] for b, k in zip(bufs, lengths)), 0, 1)
    assert all(np.isnan(b[k:]).all() for b, k in zip(bufs, lengths))
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(x.to_dense(), np.zeros(shape))


# ---------------------------------------------------------------------------
# from mutation testing of tt_masks, tt_ops and tt
# ---------------------------------------------------------------------------

def test_kernel_cache_holds_maxsize_entries():
    """Eviction starts past maxsize, not at it (a `>=` kept maxsize - 1
    entries and evicted the kernel just built when maxsize was 1)."""
    cache = tt_masks.KernelCache(maxsize=2)
    for key in "ab":
        assert cache.get(key, lambda key=key: key.upper()) == key.upper()
    assert cache.info() == (0, 2, 2, 2)
    assert cache.get("a", lambda: "built again") == "A"  # a hit; "b" is now the oldest
    cache.get("c", lambda: "C")
    assert cache.info() == (1, 3, 2, 2)
    assert cache.get("a", lambda: "built again") == "A"  # kept
    assert cache.get("b", lambda: "B again") == "B again"  # evicted, built anew
    one = tt_masks.KernelCache(maxsize=1)
    one.get("k", lambda: "K")
    assert one.info().currsize == 1 and one.get("k", lambda: "again") == "K"


def test_supercore_shapes_and_dtypes_are_checked_against_each_other(rng):
    """Each of these mismatches passed ut3_check (a mode size 0, a TT
    supercore whose two bond axes differ, supercores of two dtypes, a tt mask
    of another padded r) and failed later, or computed on garbage."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, (3, 2), (2, 2), (1, 2, 1)), n=2, r=3)
    U, G, shape, (mk, mt) = x.data
    with pytest.raises(ValueError, match=r"`shape` must be 2 ints in \[1, 3\] .*not \(0, 2\)"):
        UniformTuckerTensorTrain(U, G, (0, 2), x.masks)
    wide = np.concatenate([G, np.zeros(G.shape[:-1] + (1,))], axis=-1)  # (d, r, n, r + 1)
    for masks in ((mk, np.concatenate([mt, np.zeros(mt.shape[:-1] + (1,), bool)], axis=-1)),
                  x.masks):
        with pytest.raises(ValueError, match=r"`tt_supercore` must have shape \(2, 'r', 2, 'r'\)"):
            UniformTuckerTensorTrain(U, wide, shape, masks)
    with pytest.raises(TypeError, match="must have the same dtype, not float64 and float32"):
        UniformTuckerTensorTrain(U, G.astype(np.float32), shape, x.masks)
    with pytest.raises(TypeError, match="must have the same dtype, not float32 and float64"):
        UniformTuckerTensorTrain(U.astype(np.float32), G, shape, x.masks)
    wider_mt = np.concatenate([mt, np.ones(mt.shape[:-1] + (1,), bool)], axis=-1)  # r + 1 slots
    with pytest.raises(ValueError, match=r"`masks` must hold masks of shapes \(2, 2\) and "
                                         r"\(3, 3\) for these supercores, not \(2, 2\) and \(3, 4\)"):
        UniformTuckerTensorTrain(U, G, shape, (mk, wider_mt))


def test_a_bad_tucker_mask_is_the_one_blamed(rng):
    """A Tucker mask of the wrong stack, given as a pair, is named as the
    argument at fault (a user review: the pair's own check blamed the sound
    `tt_edge_mask` for not matching it)."""
    t3 = rand_t3(rng, (3, 2), (2, 2), (1, 2, 1))
    x = UniformTuckerTensorTrain.from_t3(((t3, t3), (t3, t3)), n=2, r=3)
    U, G, shape, (mk, mt) = x.data
    with pytest.raises(ValueError, match=r"`tucker_edge_mask` must have shape \(2, 2, 2, 2\) "
                                         r"for these supercores, not \(2, 1, 2, 2\)"):
        UniformTuckerTensorTrain(U, G, shape, (mk[:, :1], mt))
    with pytest.raises(ValueError, match=r"`tucker_edge_mask` must have shape \(2, 2, 2, 2\) "
                                         r"for these supercores, not \(2, 2, 2, 3\)"):
        UniformTuckerTensorTrain(U, G, shape, (np.ones((2, 2, 2, 3), bool), mt))


def test_from_dense_rtol_below_one(rng):
    """rtol must lie in [0, 1): 1 itself is refused as 2.0 is (from mutation
    testing: `<= 1` passed every test)."""
    dense = rng.standard_normal((3, 4))
    for bad in (1, 1.0, np.float64(1.0), -0.1):
        with pytest.raises(ValueError, match=r"`rtol` must be a number in \[0, 1\)"):
            TuckerTensorTrain.from_dense(dense, rtol=bad)
    assert TuckerTensorTrain.from_dense(dense, rtol=0.999).tucker_ranks == (1, 1)


def test_add_of_float32_and_float64_is_float64(rng, path):
    """A sum of trains of two dtypes takes NumPy's promotion, whichever comes
    first (taking the first one's dtype rounded the float64 train to float32)."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1)))
    y = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (1, 2, 2), (1, 2, 1, 1)))
    y32 = UniformTuckerTensorTrain(y.tucker_supercore.astype(np.float32),
                                   y.tt_supercore.astype(np.float32), y.shape, y.masks)
    xd = x.to_dense()
    yd = UniformTuckerTensorTrain(y32.tucker_supercore.astype(np.float64),  # y32's values
                                  y32.tt_supercore.astype(np.float64), y.shape, y.masks).to_dense()
    for got, want in ((x + y32, xd + yd), (y32 + x, xd + yd), (x - y32, xd - yd),
                      (y32 - x, yd - xd)):
        assert got.dtype == got.tt_supercore.dtype == np.float64
        dense = got.to_dense()
        assert dense.dtype == np.float64 and rel_err(dense, want) < RTOL


def test_entries_refuse_negative_indices(rng, path):
    """A negative index is out of range, as one past the end is (without the
    check -1 read the last padded slot of N: a padding value, not x[..., -1])."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1)), N=6)
    for bad, at in (([0, -1, 0], r"indices\[1\] = -1 \(axis 1 has size 4\)"),
                    ([-3, 0, 0], r"indices\[0\] = -3 \(axis 0"),
                    ([[0, 0, 0], [2, 3, -1]], r"indices\[1, 2\] = -1 \(axis 2 has size 2\)"),
                    ([[[0, 0, 0]], [[3, 4, 2]]], r"indices\[1, 0, 0\] = 3 \(axis 0 has size 3")):
        with pytest.raises(ValueError, match=r"`indices` must lie in \[0, shape\) with shape "
                                             r"\(3, 4, 2\), but " + at):
            x.entries(np.array(bad))
    # uint64 past int64 is quoted as given (its int64 copy wrapped: -2**63)
    with pytest.raises(ValueError, match=r"but indices\[0, 1\] = 9223372036854775808 \(axis 1"):
        x.entries(np.array([[0, 2**63, 0]], dtype=np.uint64))


def test_masked_arrays_are_refused_by_name(rng):
    """A NumPy masked array is refused wherever a train reads arrays, as the
    field kernels refuse it (np.ndarray checks let it through and its hidden
    entries were read: a Tucker core with a masked 2.0 gave [4, 6], as if
    unmasked)."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1)), N=6)
    t = x.to_t3()
    U, G = x.data[0], x.data[1]

    def ma(a):
        return np.ma.masked_array(a, mask=np.zeros(np.shape(a), bool))

    cases = [
        (lambda: TuckerTensorTrain([ma(t.data[0][0])] + list(t.data[0][1:]), t.data[1]),
         r"tucker_cores\[0\]"),
        (lambda: TuckerTensorTrain.from_dense(ma(t.to_dense())), "dense"),
        (lambda: UniformTuckerTensorTrain.from_dense(ma(t.to_dense())), "dense"),
        (lambda: UniformTuckerTensorTrain(U, ma(G), x.shape, x.masks), "tt_supercore"),
        (lambda: UT3Masks(ma(x.masks[0]), x.masks[1]), "tucker_edge_mask"),
        (lambda: x.apply([ma(np.ones(n)) for n in SHAPE]), r"vectors\[0\]"),
        (lambda: x.entries(ma(np.zeros(3, np.int64))), "indices"),
        (lambda: x * ma(np.array(2.0)), "alpha"),
        (lambda: x / ma(np.array(2.0)), "alpha"),
    ]
    for call, name in cases:
        with pytest.raises(TypeError, match=rf"`{name}` is a masked array; the tensor-train"):
            call()


@pytest.mark.filterwarnings("error::RuntimeWarning")  # overflows are handled, not warned
def test_partial_range_rescue_leaves_the_supercores_alone(rng, path):
    """norm and inner rescale (by powers of two) only the stack elements whose
    plain Gram chain left the range, in copies of the stack; written into the
    caller's supercores instead (a mutant of the copy passed every test),
    element 1 of the train came back with its cores scaled."""
    x, x3 = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    U, G = np.array(x.tucker_supercore), np.array(x.tt_supercore)
    k = 600
    G[0, 1] *= 2.0**-k  # element 1: its Gram 2**-1200 underflows; element 0 stays plain
    tiny = UniformTuckerTensorTrain(U, G, x.shape, x.masks)
    want = np.array([np.linalg.norm(naive_dense(*t.data)) for t in x3])
    got = tiny.norm()
    assert rel_err(got * np.array([1, 2.0**k]), want) < RTOL
    assert tiny.tucker_supercore is U and tiny.tt_supercore is G
    np.testing.assert_array_equal(U, x.tucker_supercore)
    np.testing.assert_array_equal(G[:, 0], x.tt_supercore[:, 0])
    np.testing.assert_array_equal(G[1:, 1], x.tt_supercore[1:, 1])
    np.testing.assert_array_equal(tiny.norm(), got)  # the same train, the same values


def test_functional_errors_name_the_argument_at_fault(rng):
    """The two-train functions name which train is malformed (ut3_add read
    both as `x` in a mutant that passed every test)."""
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)))
    bad = x.data[:3]
    for func in (tt_ops.ut3_add, tt_ops.ut3_sub, tt_ops.ut3_hadamard, tt_ops.ut3_inner):
        with pytest.raises(TypeError, match=r"Argument `y` must be a 4-tuple .* of length 3"):
            func(x.data, bad)
        with pytest.raises(TypeError, match=r"Argument `x` must be a 4-tuple .* of length 3"):
            func(bad, x.data)
    with pytest.raises(TypeError, match=r"Argument `trains\[1\]` must be a 4-tuple"):
        tt_ops.ut3_stack([x.data, bad])
    # the one-train functions name their parameter, `data` (they said `x`)
    for func in (tt_ops.ut3_to_dense, tt_ops.ut3_norm, tt_ops.ut3_unstack, tt_ops.ut3_svd):
        with pytest.raises(TypeError, match=r"Argument `data` must be a 4-tuple .* of length 3"):
            func(bad)
    with pytest.raises(ValueError, match=r"Only a stacked train .* can be unstacked"):
        tt_ops.ut3_unstack(x.data)


def test_from_dense_pads_to_the_asked_n_and_r(rng):
    """UniformTuckerTensorTrain.from_dense's `n` pads the Tucker ranks and `r`
    the TT ranks (the existing test asked n = r = 4, so a swap passed)."""
    dense = TuckerTensorTrain([rng.standard_normal((2, 5)), rng.standard_normal((2, 4))],
                              [rng.standard_normal((1, 2, 2)), rng.standard_normal((2, 2, 1))]).to_dense()
    u = UniformTuckerTensorTrain.from_dense(dense, n=3, r=6)
    assert u.padded_sizes == (3, 6, 5)
    assert u.tucker_supercore.shape == (2, 3, 5) and u.tt_supercore.shape == (2, 6, 3, 6)
    np.testing.assert_allclose(u.to_dense(), dense, rtol=0, atol=1e-12 * np.abs(dense).max())
    with pytest.raises(ValueError, match="at least"):
        UniformTuckerTensorTrain.from_dense(dense, n=3, r=1)  # r below the TT rank 2


def test_to_t3_refuses_a_rank_zero_row_among_live_ones(rng):
    """One all-False mask row (core 1 of stack element 1) is enough to make
    the train zero and the ragged form impossible; the check looked at
    every row at once in a mutant that passed (the existing case had one row)."""
    x, _ = stacked_pair(rng, X_RANKS, n=4, r=4, N=5)
    mk, mt = (np.array(m) for m in x.masks)
    mk[1, 1] = False
    z = UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore, x.shape, (mk, mt))
    with pytest.raises(ValueError, match=r"rank 0 where `tucker_edge_mask`\[1, 1\] is all False"):
        z.to_t3()
    assert not z.to_dense()[1].any() and rel_err(z.to_dense()[0], x.to_dense()[0]) == 0
    mt2 = np.array(x.masks[1])
    mt2[2, 0] = False
    with pytest.raises(ValueError, match=r"rank 0 where `tt_edge_mask`\[2, 0\] is all False"):
        UniformTuckerTensorTrain(x.tucker_supercore, x.tt_supercore, x.shape,
                                 (x.masks[0], mt2)).to_t3()


def test_norm_of_a_near_cancellation_is_never_nan(path):
    """The Gram chain of x - x * (1 + 2**-40) is rounding noise of either sign
    (here -1.6e-12, -7.1e-15, ... for some of the 16 elements, in both
    paths); norm("inner") clamps it at 0: the square root of the raw value
    gave NaN (a mutant without the clamp passed every test)."""
    rng = np.random.default_rng(20240605)
    x = UniformTuckerTensorTrain.from_t3(rand_t3(rng, SHAPE, (2, 3, 2), (1, 2, 2, 1), stack=(16,)))
    w = x - x * (1 + 2.0**-40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (sqrt of a negative warns)
        got = w.norm()
    assert got.shape == (16,) and np.isfinite(got).all() and (got >= 0).all()
    # the noise bound of the method: about sqrt(eps) of the terms' norms
    assert (got <= 1e-5 * x.norm()).all()
    assert rel_err(w.norm("orthogonal"), 2.0**-40 * x.norm()) < 1e-2


def test_load_refuses_an_entry_holding_more_than_its_header_claims(tmp_path):
    """An entry whose .npy header claims fewer bytes than it holds is corrupted
    as surely as one claiming more; NumPy reads the claimed prefix and drops
    the rest, so only the size check tells (a `>` for `!=` passed every test:
    this file loaded as a valid train)."""
    import io
    import zipfile
    x = UniformTuckerTensorTrain.from_t3(rand_t3(np.random.default_rng(2), SHAPE, (2, 2, 2),
                                                 (1, 2, 2, 1)))
    good = tmp_path / "good.npz"
    x.save(good)
    for key, extra in (("format_version", 8), ("tt_supercore", 16)):
        with zipfile.ZipFile(good) as src, zipfile.ZipFile(tmp_path / "long.npz", "w") as out:
            for member in src.namelist():
                data = src.read(member)
                out.writestr(member, data + bytes(extra) if member == key + ".npy" else data)
        with pytest.raises(ValueError, match=rf"not a zorch_nb UT3 file: entry `{key}` claims "
                                             rf"\d+ bytes of .* but holds \d+"):
            UniformTuckerTensorTrain.load(tmp_path / "long.npz")
        with open(tmp_path / "long.npz", "rb") as fh:
            with pytest.raises(ValueError, match=rf"entry `{key}` claims"):
                UniformTuckerTensorTrain.load(io.BytesIO(fh.read()))


def test_a_singular_value_past_the_range_is_an_overflow_not_a_lapack_fault():
    """Finite entries whose norm exceeds float64 (three of 1.2e308: 2.08e308)
    make every SVD try return inf; _finite_svd said "this is a LAPACK/BLAS
    fault, not the train's" where the documented error is the overflow one
    ("rescale the train").  A power-of-two scaled SVD that comes back finite
    now names the overflow.  float32 was right: its float64 retry succeeds
    and the overflow is found on the cast back."""
    x = UniformTuckerTensorTrain.from_t3(TuckerTensorTrain([np.eye(3)], [np.full((1, 3, 1), 1.2e308)]))
    with np.errstate(over="ignore", invalid="ignore"):
        with pytest.raises(ValueError, match="overflowed float64 .* rescale"):
            x.svd()
    # "tt_up" puts the norm into the Tucker core, scaled from near 1: the
    # entries fit, and so does the train (it was refused as the svd)
    np.testing.assert_array_equal(x.orthogonalize("tt_up").to_dense(), np.full(3, 1.2e308))
    # from_dense names its argument: the last TT core must hold its norm
    for dtype, v in ((np.float64, 1.2e308), (np.float32, 3e38)):
        with pytest.raises(ValueError, match=f"`dense` has a norm past {np.dtype(dtype).name}'s "
                                             f"range, which the last TT core must hold"):
            TuckerTensorTrain.from_dense(np.full((2, 2), v, dtype))
    # entries far from 1 whose norm fits: the SVDs run on them scaled
    for v in (1e300, 1e-300, 1e-310):
        got = TuckerTensorTrain.from_dense(np.full((2, 3), v)).to_dense()
        assert np.abs(got / v - 1).max() < (RTOL if v > 1e-308 else 1e-3)  # (subnormal)


def test_refusals_of_malformed_stacks_indices_vectors_and_scalars():
    """Refusals no other test reached, each naming its argument: a supercore
    without its (n, N) axes, ragged nestings of trains, trains of another
    length, an empty stack, entries' indices of the wrong length, apply's
    vectors of the wrong count, and a complex scale."""
    from zorch_nb.tt_ops import ut3_check
    rng = np.random.default_rng(11)
    x = random_stack(rng, 2)
    a, b = (rand_t3(rng, SHAPE, (2, 2, 2), (1, 2, 2, 1)) for _ in range(2))
    short = rand_t3(rng, SHAPE[:2], (2, 2), (1, 2, 1))
    U, G = x.tucker_supercore, x.tt_supercore
    for call, exc, match in (
            (lambda: ut3_check((U[:, 0, 0], G) + tuple(x.data[2:])), ValueError,
             r"`tucker_supercore` must have shape \(d,\) \+ stack \+ \(n, N\), not \(3, 5\)"),
            (lambda: UniformTuckerTensorTrain.from_t3(((a, b), a)), ValueError,
             r"`t3` must be nested evenly"),
            (lambda: UniformTuckerTensorTrain.from_t3((a, short)), ValueError,
             r"`t3` must hold trains of 3 Tucker and 3 TT cores each"),
            (lambda: UniformTuckerTensorTrain.stack([]), ValueError,
             r"`trains` must hold at least one train, not none"),
            (lambda: x.entries(np.zeros((2, 4, 2), np.int64)), ValueError,
             r"`indices` must have shape batch \+ \(3,\), not \(2, 4, 2\)"),
            (lambda: x.apply([np.ones(3), np.ones(4)]), ValueError,
             r"`vectors` must hold 3 arrays, not 2"),
            (lambda: x * 1j, TypeError, r"`alpha` must be a real number, not 1j")):
        with pytest.raises(exc, match=match):
            call()
