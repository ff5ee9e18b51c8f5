"""The fused MLE fold launchers (``base_mle_fold``, ``ext4_mle_fold``) called
directly, on every backend: ``out[k] = v[2k] + r (v[2k+1] - v[2k])`` against
Python big integers (``test_kernel_layer.Ref``), every degree combination and
array form, words >= p, the CPU's parallel runs, and ``out`` over an input
refused (the other misuse cases are in ``test_kernel_layer.misuse_cases``).
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
