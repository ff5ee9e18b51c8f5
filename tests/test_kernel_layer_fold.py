"""The sumcheck launchers called directly, on every backend: the fused MLE
folds (``base_mle_fold``, ``ext4_mle_fold``: ``out[k] = v[2k] + r (v[2k+1] -
v[2k])``) and the eq-table doubling (``base_eq_split``, ``ext4_eq_split``:
``lo, hi = a - a r, a r``), against Python big integers
(``test_kernel_layer.Ref``), every degree combination and array form, words
>= p, the CPU's parallel runs, in-place use where allowed and refused where
not (the other misuse cases are in ``test_kernel_layer.misuse_cases``).
"""
import numpy as np
import pytest

from test_kernel_layer import Ref, _arr, check_words, dev, empty, rand_words, small
from conftest import BACKENDS, to_host
from zorch_nb import BabyBear, KoalaBear
from zorch_nb._backend import kernels_for
from zorch_nb.kernels.launch_config import CPU_LANE_RUN

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]


@pytest.fixture(params=BACKENDS)
def k(request):
    """The field kernel module of the backend under test, and its name."""
    return kernels_for(request.param, "field"), request.param


def want_fold(ref, v, r):
    """``lo + r (hi - lo)`` in big ints: ``v`` (2n,) or (2n, 4) values, ``r``
    () or (4,); the result (n,) or (n, 4), base sides embedded where the other
    is an extension."""
    p, r = ref.p, np.asarray(r, dtype=object)
    lo, hi = v[0::2], v[1::2]
    d = (hi - lo) % p
    if v.ndim == 1 and r.ndim == 0:
        return (lo + r[()] * d) % p
    emb = lambda x: x if x.ndim == 2 else np.stack(  # noqa: E731
        [x] + [np.zeros_like(x)] * 3, axis=1)
    rr = np.tile(r if r.ndim == 1 else np.array([r[()], 0, 0, 0], dtype=object),
                 (len(d), 1))
    return (emb(lo) + ref.ext_mul(emb(d), rr)) % p


@pytest.mark.parametrize("F", FIELDS)
def test_fold_launchers_match_big_ints(F, k):
    k, backend = k
    ref, f, n = Ref(F), F.params, small(backend)
    v = rand_words(F, (2 * n,), 1, zeros=True)
    r = rand_words(F, (1,), 2)
    for rw in (r, np.array([2**32 - 1], np.uint32)):  # a word >= p as r
        out = empty(n, backend)
        k.base_mle_fold(dev(v, backend), dev(rw, backend), out, f)
        check_words(ref, out, want_fold(ref, ref.dec(v), ref.dec(rw)[0]), "base_mle_fold")

    ev = rand_words(F, (2 * n, 4), 3, zeros=True)
    er = rand_words(F, (4,), 4)
    er[1] = F.p + 3  # not canonical
    for v_deg, r_deg in ((1, 1), (1, 4), (4, 1), (4, 4)):
        vals = v if v_deg == 1 else ev
        rs = r if r_deg == 1 else er
        want = want_fold(ref, ref.dec(vals), ref.dec(rs)[0] if r_deg == 1 else ref.dec(rs))
        if v_deg == r_deg == 1:  # embedded
            want = np.stack([want] + [np.zeros_like(want)] * 3, axis=1)
        v_forms = [(2 * n,)] if v_deg == 1 else [(2 * n, 4), (8 * n,)]
        r_forms = [(1,)] if r_deg == 1 else [(4,), (1, 4)]
        for vf in v_forms:
            for rf in r_forms:
                for of in ((n, 4), (4 * n,)):
                    out = empty(of, backend)
                    k.ext4_mle_fold(dev(vals.reshape(vf), backend), v_deg,
                                    dev(rs.reshape(rf), backend), r_deg, out, f)
                    check_words(ref, to_host(out).reshape(n, 4), want,
                                f"ext4_mle_fold {v_deg} {r_deg} {vf} {rf} {of}")


@pytest.mark.parametrize("v_deg, r_deg", [(1, 1), (1, 4), (4, 1), (4, 4)])
def test_fold_parallel_cpu_runs(v_deg, r_deg):
    # several CPU_LANE_RUN runs and a ragged last one (the parallel kernel;
    # small calls take the serial twin), against big ints
    F, k = KoalaBear, kernels_for("cpu", "field")
    ref, n = Ref(F), 2 * CPU_LANE_RUN + 37
    v = rand_words(F, (2 * n,) + ((4,) if v_deg == 4 else ()), 5, zeros=True)
    r = rand_words(F, (r_deg,), 6)
    want = want_fold(ref, ref.dec(v), ref.dec(r)[0] if r_deg == 1 else ref.dec(r))
    if v_deg == r_deg == 1:
        out = np.empty(n, np.uint32)
        k.base_mle_fold(v, r, out, F.params)
        check_words(ref, out, want, "base_mle_fold")
    out = np.empty((n, 4), np.uint32)
    k.ext4_mle_fold(v, v_deg, r, r_deg, out, F.params)
    if v_deg == r_deg == 1:  # embedded
        want = np.stack([want] + [np.zeros_like(want)] * 3, axis=1)
    check_words(ref, out, want, f"ext4_mle_fold {v_deg} {r_deg}")


def test_fold_reads_inputs_only(k):
    k, backend = k
    F = KoalaBear
    v, r = rand_words(F, (16, 4), 7), rand_words(F, (4,), 8)
    s, b = rand_words(F, (16,), 9), rand_words(F, (1,), 10)
    dv, dr, ds, db = (dev(x, backend) for x in (v, r, s, b))
    k.ext4_mle_fold(dv, 4, dr, 4, empty((8, 4), backend), F.params)
    k.ext4_mle_fold(ds, 1, dr, 4, empty((8, 4), backend), F.params)
    k.base_mle_fold(ds, db, empty(8, backend), F.params)
    for got, want in ((dv, v), (dr, r), (ds, s), (db, b)):
        assert (to_host(got) == want).all()


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_fold_out_over_its_input_is_refused(k, ext):
    # element k reads 2k and 2k + 1, which another thread's out may lie over:
    # no in-place form at all (also not out = the first half of v)
    k, backend = k
    f = KoalaBear.params
    buf = _arr(backend, (16, 4) if ext else (16,))
    r = _arr(backend, 4 if ext else 1)
    call = (lambda o: k.ext4_mle_fold(buf, 4, r, 4, o, f)) if ext else \
        (lambda o: k.base_mle_fold(buf, r, o, f))
    with pytest.raises(ValueError, match="`out` overlaps argument `v`"):
        call(buf[:8])
    with pytest.raises(ValueError, match="`out` overlaps argument `v`"):
        call(buf[8:])
    o = _arr(backend, 32 if ext else 8)  # r the last element of out
    with pytest.raises(ValueError, match="`out` overlaps argument `r`"):
        if ext:
            k.ext4_mle_fold(buf, 4, o[28:], 4, o, f)
        else:
            k.base_mle_fold(buf, o[7:], o, f)


# ---- the eq-table doubling ------------------------------------------------------

def want_split(ref, a, r):
    """``(a - a r, a r)`` in big ints: ``a`` (n,) or (n, 4), ``r`` an int or (4,)."""
    p, r = ref.p, np.asarray(r, dtype=object)
    if a.ndim == 1:
        h = a * r[()] % p
    else:
        rr = r if r.ndim == 1 else np.array([r[()], 0, 0, 0], dtype=object)
        h = ref.ext_mul(a, np.tile(rr, (len(a), 1)))
    return (a - h) % p, h


@pytest.mark.parametrize("F", FIELDS)
def test_eq_split_launchers_match_big_ints(F, k):
    k, backend = k
    ref, f, n = Ref(F), F.params, small(backend)
    a, r = rand_words(F, (n,), 11, zeros=True), rand_words(F, (1,), 12)
    want = want_split(ref, ref.dec(a), ref.dec(r)[0])
    for in_place in (False, True):
        da = dev(a, backend)
        lo, hi = (da if in_place else empty(n, backend)), empty(n, backend)
        k.base_eq_split(da, dev(r, backend), lo, hi, f)
        check_words(ref, lo, want[0], f"base_eq_split lo {in_place}")
        check_words(ref, hi, want[1], f"base_eq_split hi {in_place}")
    ea, er = rand_words(F, (n, 4), 13, zeros=True), rand_words(F, (4,), 14)
    er[2] = 2**32 - 1  # not canonical
    for r_deg, rs in ((1, r), (4, er)):
        want = want_split(ref, ref.dec(ea), ref.dec(rs)[0] if r_deg == 1 else ref.dec(rs))
        for form in ((n, 4), (4 * n,)):
            for in_place in (False, True):
                da = dev(ea.reshape(form), backend)
                lo, hi = (da if in_place else empty(form, backend)), empty((n, 4), backend)
                k.ext4_eq_split(da, dev(rs.reshape(-1), backend), r_deg, lo, hi, f)
                what = f"ext4_eq_split {r_deg} {form} {in_place}"
                check_words(ref, to_host(lo).reshape(n, 4), want[0], what + " lo")
                check_words(ref, hi, want[1], what + " hi")


@pytest.mark.parametrize("r_deg", [1, 4])
def test_eq_split_parallel_cpu_runs(r_deg):
    F, k = KoalaBear, kernels_for("cpu", "field")
    ref, n = Ref(F), 2 * CPU_LANE_RUN + 37
    a, r = rand_words(F, (n, 4), 15, zeros=True), rand_words(F, (r_deg,), 16)
    want = want_split(ref, ref.dec(a), ref.dec(r)[0] if r_deg == 1 else ref.dec(r))
    lo, hi = a.copy(), np.empty((n, 4), np.uint32)
    k.ext4_eq_split(lo, r, r_deg, lo, hi, F.params)  # in place
    check_words(ref, lo, want[0], "lo")
    check_words(ref, hi, want[1], "hi")
    if r_deg == 1:
        b = rand_words(F, (n,), 17, zeros=True)
        want = want_split(ref, ref.dec(b), ref.dec(r)[0])
        lo, hi = np.empty(n, np.uint32), np.empty(n, np.uint32)
        k.base_eq_split(b, r, lo, hi, F.params)
        check_words(ref, lo, want[0], "base lo")
        check_words(ref, hi, want[1], "base hi")


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_eq_split_overlaps_refused(k, ext):
    # hi overlaps nothing; lo may be a itself, not a shifted view of it
    k, backend = k
    f = KoalaBear.params
    shape = (lambda m: (m, 4)) if ext else (lambda m: (m,))
    buf, r = _arr(backend, shape(16)), _arr(backend, 4 if ext else 1)
    call = (lambda a, lo, hi, rr=r: k.ext4_eq_split(a, rr, 4, lo, hi, f)) if ext else \
        (lambda a, lo, hi, rr=r: k.base_eq_split(a, rr, lo, hi, f))
    for a, lo, hi, match in ((buf[:8], buf[:8], buf[:8], "`hi` overlaps argument `a`"),
                             (buf[:8], _arr(backend, shape(8)), buf[4:12],
                              "`hi` overlaps argument `a`"),
                             (buf[:8], buf[8:], buf[8:], "`hi` overlaps argument `lo`"),
                             (buf[:8], buf[1:9], _arr(backend, shape(8)),
                              "`lo` overlaps argument `a`")):
        with pytest.raises(ValueError, match=match):
            call(a, lo, hi)
    o = _arr(backend, shape(8))
    with pytest.raises(ValueError, match="`hi` overlaps argument `r`"):
        if ext:
            k.ext4_eq_split(buf[:8], o[7], 4, _arr(backend, (8, 4)), o, f)
        else:
            k.base_eq_split(buf[:8], o[7:], _arr(backend, 8), o, f)
