"""Words >= p: every kernel on every backend reads a word w as the element w mod p.

Each uint32 word is < 3p, so a canonical word c has the non-canonical twins
c + p and c + 2p (where they fit in 32 bits).  Every op and GKR transition
fed the twins must return the same bytes as fed the canonical words (which
the other test modules check against big integers), and the results must be
canonical; the products are also checked against big integers directly
(``naive.dec`` of any word is the value of its residue).
"""
import re

import numpy as np
import pytest

import naive
from gkr_cases import assert_layers_equal
from conftest import BACKENDS, to_backend, to_host
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                                halving_schedule, layer_transition)

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
MODES = [pytest.param(ne, de, id=f"{'E' if ne else 'B'}{'E' if de else 'B'}")
         for ne in (False, True) for de in (False, True)]


def raised(F, words, seed):
    """``words`` with a random multiple of p (0, 1 or 2) added where it fits in 32 bits.

    The first words become the edge cases p (zero), 2p (zero), 2**32 - 1 and
    p + (p - 1) when there are enough of them.
    """
    p = np.uint64(F.p)
    w = words.astype(np.uint64)
    k = np.random.default_rng(seed).integers(0, 3, size=w.shape, dtype=np.uint64)
    k = np.minimum(k, (np.uint64(2**32 - 1) - w) // p)
    out = (w + k * p).astype(np.uint32)
    flat = out.reshape(-1)
    edges = [F.p, 2 * F.p, 2**32 - 1, 2 * F.p - 1]
    flat[:min(len(edges), flat.size)] = edges[:flat.size]
    return out


def canonical(F, words):
    return (words.astype(np.uint64) % np.uint64(F.p)).astype(np.uint32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_field_ops_read_words_mod_p(F, backend, ext):
    G = F.ext if ext else F
    n = 12 if backend == "numba" else 96
    ra, rb = raised(F, G.random(n, seed=1), 2), raised(F, G.random(n, seed=3), 4)
    ca, cb = canonical(F, ra), canonical(F, rb)
    a, b = to_backend(ra, backend), to_backend(rb, backend)
    a0 = ra.copy()

    for op in ("add", "sub", "mul"):
        got = to_host(getattr(G, op)(a, b, backend=backend))
        want = to_host(getattr(G, op)(to_backend(ca, backend), to_backend(cb, backend),
                                      backend=backend))
        np.testing.assert_array_equal(got, want, err_msg=op)
        assert (got < F.p).all(), op
    for op in ("neg", "square"):
        got = to_host(getattr(G, op)(a, backend=backend))
        want = to_host(getattr(G, op)(to_backend(ca, backend), backend=backend))
        np.testing.assert_array_equal(got, want, err_msg=op)
    for e in (5, F.p + 1):
        got = to_host(G.pow(a, e, backend=backend))
        np.testing.assert_array_equal(got, to_host(G.pow(to_backend(ca, backend), e,
                                                          backend=backend)), err_msg=str(e))
    # Products against big ints on the raw words (naive.dec reads any word mod p).
    prod = to_host(G.mul(a, b, backend=backend))
    p = F.p
    if ext:
        want = [naive.ext_mul([naive.dec(int(v), p) for v in u], [naive.dec(int(v), p) for v in w],
                              p, F.W) for u, w in zip(ra.tolist(), rb.tolist())]
        assert [[naive.dec(int(v), p) for v in row] for row in prod.tolist()] == want
    else:
        assert [naive.dec(int(v), p) for v in prod] == \
            [naive.dec(int(u), p) * naive.dec(int(w), p) % p for u, w in zip(ra, rb)]
    # Inverses of the twins of nonzero elements; the twins of zero are zero.
    nz = ca.copy()
    zero = (nz == 0) if not ext else (nz == 0).all(axis=-1)
    nz[zero] = G.one
    rnz = raised(F, nz, 5)
    rnz.reshape(-1)[:4] = nz.reshape(-1)[:4] + np.uint32(F.p)  # no zero edge cases here
    for op in ("inv", "batch_inv"):
        got = to_host(getattr(G, op)(to_backend(rnz, backend), backend=backend))
        np.testing.assert_array_equal(got, to_host(getattr(G, op)(to_backend(nz, backend),
                                                                  backend=backend)), err_msg=op)
        z = rnz.copy()
        z.reshape(-1)[:4] = [F.p, 2 * F.p, F.p, 0]  # a zero element (ext) / the word p (base)
        with pytest.raises(ValueError, match="index \\(0,\\) is zero"):
            getattr(G, op)(to_backend(z, backend), backend=backend)
    assert (ra == a0).all() and (to_host(a) == a0).all()


def test_decode_still_insists_on_canonical_words():
    F = KoalaBear
    with pytest.raises(ValueError, match="holds values >= p"):
        F.decode(np.array([F.p], np.uint32))
    with pytest.raises(ValueError, match=r"\(the first: words = 2130706436\)"):
        F.decode(np.uint32(F.p + 3))
    assert F.decode(F.add(np.array([F.p + 5], np.uint32), F.zeros(()))).tolist() == \
        [naive.dec(5, F.p)]


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
def test_gkr_reads_words_mod_p(F, backend, ne, de):
    length = 16 if backend == "numba" else 256
    host = [(F.ext if e else F).random(length, seed=20 + i) for i, e in enumerate((ne, ne, de, de))]
    raw = [raised(F, x, 30 + i) for i, x in enumerate(host)]
    raw[2].reshape(-1)[:2] = host[2].reshape(-1)[:2] + np.uint32(F.p)  # keep d0 nonzero
    raw[3].reshape(-1)[:2] = host[3].reshape(-1)[:2] + np.uint32(F.p)
    canon = [canonical(F, x) for x in raw]
    raw0 = [x.copy() for x in raw]
    mk = lambda ws: GkrLayer(*(to_backend(x, backend) for x in ws), 1, F)  # noqa: E731
    want = build_pyramid(mk(canon), backend=backend, fused=False)
    for fused in (None, False):  # fused: GPU backends carry the first layer through shared memory
        got = build_pyramid(mk(raw), backend=backend, fused=fused)
        assert_layers_equal(got[1:], want[1:], f"dense fused={fused}", first=1)
    assert_layers_equal([layer_transition(mk(raw), backend=backend)], [want[1]], "transition", 1)
    # Jagged: 4 segments of uneven counts, halving to the floor.
    counts = [length // 2, 3, 0, length // 4 + 1]
    jl = lambda ws: JaggedGkrLayer(*(to_backend(x, backend) for x in ws),  # noqa: E731
                                   row_counts=counts, field=F)
    sched = halving_schedule(jl(canon))
    assert_layers_equal(build_jagged_pyramid(jl(raw), sched, backend=backend)[1:],
                        build_jagged_pyramid(jl(canon), sched, backend=backend)[1:], "jagged", 1)
    assert all((x == x0).all() for x, x0 in zip(raw, raw0))  # inputs untouched


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_decode_names_the_first_non_canonical_word(backend):
    """decode's error names the first word >= p in C order (the kernels say
    only whether there is one; the error path looks for it), whatever the
    layout or the module."""
    F, E = KoalaBear, KoalaBear.ext
    w = F.random((5, 6), seed=1)
    x = E.random((3, 5), seed=2)
    w[4, 1] = F.p + 1
    w[3, 4] = 2**32 - 1
    x[1, 2, 3] = F.p
    cases = [(F, w, "words[3, 4] = 4294967295"), (F, w[:, ::2], "words[3, 2] = 4294967295"),
             (F, w.T, "words[1, 4] = 2130706434"), (E, x, "words[1, 2, 3] = 2130706433"),
             (E, x[:, ::-1], "words[1, 2, 3] = 2130706433")]
    for G, words, where in cases:
        before = words.copy()
        with pytest.raises(ValueError, match=rf"holds values >= p={F.p} \(the first: "
                                             rf"{re.escape(where)}\); decode needs"):
            G.decode(to_backend(words, backend))
        np.testing.assert_array_equal(words, before)
