"""``mle_fold`` (one sumcheck round's fold) and ``eq_table`` against Python big
ints, on every backend, with base and extension values and points; and their
agreement with ``mle_eval`` byte for byte (nv folds give it; the field sum of
``f * eq_table(point)`` is it).  Added after a review that wrote a LogUp-GKR
sumcheck on the field ops and spent ~25 kernel calls per round on these.
"""
import numpy as np
import pytest

from conftest import BACKENDS, to_backend, to_host
import naive
from zorch_nb import BabyBear, KoalaBear
from test_field_broadcast_forms import FIELDS, raw_words


def _elements(F, w, deg):
    """Big-int elements, as 4-lists, of base (``deg`` 1) or extension words ``w``."""
    p = F.p
    if deg == 4:
        return [[naive.dec(int(v) % p, p) for v in row] for row in w.reshape(-1, 4)]
    return [[naive.dec(int(v) % p, p), 0, 0, 0] for v in w.reshape(-1)]


def _words(F, elems, ext):
    p = F.p
    if ext:
        return np.array([[naive.enc(c, p) for c in e] for e in elems], np.uint32)
    assert all(e[1:] == [0, 0, 0] for e in elems)
    return np.array([naive.enc(e[0], p) for e in elems], np.uint32)


def _one_minus(F, r):
    return naive.ext_sub([1, 0, 0, 0], r, F.p)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("vdeg,rdeg", [(1, 1), (1, 4), (4, 1), (4, 4)])
@pytest.mark.parametrize("nv", [1, 2, 3, 5])  # 3: base values halve to 4 entries
def test_mle_fold_and_eq_table_against_big_ints(F, backend, vdeg, rdeg, nv):
    if backend == "numba" and nv > 3:
        pytest.skip("the CUDA simulator takes seconds here; nv <= 3 covers every path")
    rng = np.random.default_rng(1000 * nv + 10 * vdeg + rdeg)
    p, w = F.p, F.W
    ext = vdeg == 4 or rdeg == 4
    field = F.ext if ext else F
    values = raw_words(rng, (2**nv, 4) if vdeg == 4 else (2**nv,), p)
    point = raw_words(rng, (nv, 4) if rdeg == 4 else (nv,), p)
    v0, pt0 = values.copy(), point.copy()
    dv, dp = to_backend(values, backend), to_backend(point, backend)

    # one fold, by point[0]
    f, r = _elements(F, values, vdeg), _elements(F, point[:1], rdeg)[0]
    want = [naive.ext_add(f[2 * k], naive.ext_mul(r, naive.ext_sub(f[2 * k + 1], f[2 * k], p),
                                                   p, w), p) for k in range(len(f) // 2)]
    got = to_host(field.mle_fold(dv, dp[0], backend=backend))
    assert got.dtype == np.uint32 and (got == _words(F, want, ext)).all()

    # eq(point, b) = prod_j (r_j if b_j else 1 - r_j), b's bit j bound by point[j]
    rs = _elements(F, point, rdeg)
    table = []
    for b in range(2**nv):
        e = [1, 0, 0, 0]
        for j in range(nv):
            e = naive.ext_mul(e, rs[j] if b >> j & 1 else _one_minus(F, rs[j]), p, w)
        table.append(e)
    eq = to_host(field.eq_table(dp, backend=backend))
    assert eq.dtype == np.uint32 and (eq == _words(F, table, ext)).all()

    # both agree with mle_eval, byte for byte
    v = dv
    for j in range(nv):
        v = field.mle_fold(v, dp[j], backend=backend)
    ev = to_host(field.mle_eval(dv, dp, backend=backend))
    assert to_host(v).tobytes() == ev.tobytes()
    emb = F.ext.as_base(dv) if ext and vdeg == 1 else dv
    inner = to_host(field.sum(field.mul(emb, field.eq_table(dp, backend=backend),
                                        backend=backend), axis=0))
    assert inner.tobytes() == ev.tobytes()
    if not ext:  # the extension's ops on base values and a base point: embedded
        got = to_host(F.ext.mle_fold(dv, dp[0], backend=backend))
        assert (got == _words(F, want, True)).all()
        got = to_host(F.ext.mle_eval(dv, dp, backend=backend))
        assert got.tobytes() == F.ext.from_base(ev).tobytes()
    assert (to_host(dv) == v0).all() and (to_host(dp) == pt0).all()  # inputs untouched


@pytest.mark.parametrize("F", FIELDS)
def test_out_and_aliasing(F):
    E = F.ext
    values = E.random(8, seed=1)
    r = E.random((), seed=2)
    want = E.mle_fold(values, r)
    out = np.empty((4, 4), np.uint32)
    assert E.mle_fold(values, r, out=out) is out and (out == want).all()
    v = values.copy()
    E.mle_fold(v, r, out=v[:4])  # the result over the lower half of its own input
    assert (v[:4] == want).all()
    pt = E.random(3, seed=3)
    t = np.empty((8, 4), np.uint32)
    assert E.eq_table(pt, out=t) is t and (t == E.eq_table(pt)).all()
    assert (F.eq_table(F.random(0)) == F.one).all()  # nv = 0: the table [1]


def test_errors_name_the_argument():
    from zorch_nb import KoalaBear as F
    E = F.ext
    with pytest.raises(ValueError, match="`values` has no variable left"):
        E.mle_fold(E.random(1), E.random(()))
    with pytest.raises(ValueError, match=r"`values` must hold 2\*\*nv elements"):
        F.mle_fold(F.random(6), F.one)
    with pytest.raises(ValueError, match=r"`r` must be one KoalaBear element.*F.ext.mle_fold"):
        F.mle_fold(F.random(4), E.random(()))
    with pytest.raises(ValueError, match=r"`r` must be one KoalaBear.ext element"):
        E.mle_fold(E.random(4), E.random(2))
    with pytest.raises(TypeError, match="Argument `r` must be a uint32 array"):
        E.mle_fold(E.random(4), 3)
    with pytest.raises(ValueError, match=r"`point` must hold one element per variable.*"
                                         r"F.ext.eq_table"):
        F.eq_table(E.random(3))
    with pytest.raises(ValueError, match=r"`out` must have shape \(8,\)"):
        F.eq_table(F.random(3), out=np.empty(4, np.uint32))
    for G, nv in ((F, 62), (E, 60), (F, 64)):  # more bytes than an array can hold
        with pytest.raises(ValueError, match=rf"`point` has nv = {nv} coordinates"):
            G.eq_table(G.random(nv))


@pytest.mark.gpu
@pytest.mark.parametrize("F", FIELDS)
def test_numpy_arrays_on_the_cupy_backend(F):
    # backend="cupy" with NumPy arrays: the kernels run on the device and the
    # result comes back as NumPy, the words of the CPU's
    E = F.ext
    for G, values, point in ((F, F.random(16, seed=1), F.random(4, seed=2)),
                             (E, F.random(16, seed=3), E.random(4, seed=4)),
                             (E, E.random(16, seed=5), E.as_base(F.random(4, seed=6)))):
        # (four base coordinates on the extension: marked, as eq_table needs them)
        first = point.words[0] if type(point) is type(E.as_base(values)) else point[0]
        for name, call in (("mle_fold", lambda **kw: G.mle_fold(values, first, **kw)),
                           ("eq_table", lambda **kw: G.eq_table(point, **kw)),
                           ("mle_eval", lambda **kw: G.mle_eval(values, point, **kw))):
            got, want = call(backend="cupy"), call()
            assert type(got) is np.ndarray and got.tobytes() == want.tobytes(), name


@pytest.mark.parametrize("F", FIELDS)
def test_ext_eq_table_refuses_a_point_of_four_words(F):
    """A prover's one extension challenge r of shape (4,) gave E.eq_table a
    16-row table of four base coordinates, where it wanted 2 rows (a GKR
    prover's review); (1, 4) is one coordinate, as_base marks four base ones."""
    E = F.ext
    r = E.random(1, seed=5)
    with pytest.raises(ValueError, match=r"`point` of shape \(4,\) is ambiguous .* one "
                                         r"extension coordinate is shape \(1, 4\); four "
                                         r"base coordinates are marked with `as_base"):
        E.eq_table(r[0])
    assert E.eq_table(r).shape == (2, 4)
    four = F.random(4, seed=6)
    table = E.eq_table(E.as_base(four))
    assert table.tobytes() == E.from_base(F.eq_table(four)).tobytes()
    assert E.eq_table(E.as_base(four[:3])).tobytes() == E.eq_table(four[:3]).tobytes()
    values = E.random(16, seed=7)  # mle_eval takes the marked point too (nv tells it)
    assert E.mle_eval(values, E.as_base(four)).tobytes() == E.mle_eval(values, four).tobytes()
    # where nv is not 4, the challenge's shape error says how one coordinate is spelled
    with pytest.raises(ValueError, match=r"must hold nv = 1 elements \(one per variable\), "
                                         r"not shape \(4,\); one extension coordinate is "
                                         r"shape \(1, 4\)$"):
        E.mle_eval(E.random(2, seed=8), r[0])
    assert E.mle_eval(E.random(2, seed=8), r).shape == (4,)
    # a marked point is base coordinates: an extension point marked was read
    # as extension coordinates, the mark ignored
    for call in (lambda p: E.eq_table(p), lambda p: E.mle_eval(E.random(4, seed=9), p)):
        with pytest.raises(ValueError, match=r"`point` is marked as base words \(as_base\), "
                                             r"so it .* shape \(nv,\), not \(2, 4\)"):
            call(E.as_base(E.random(2, seed=10)))
    other = KoalaBear if F is BabyBear else BabyBear
    with pytest.raises(ValueError, match="`point` is marked as"):
        E.eq_table(other.ext.as_base(four))
    with pytest.raises(TypeError, match="marker, which only the extension field's add, sub, "
                                        "mul and div operands and the `point` of eq_table and "
                                        "mle_eval take"):
        F.eq_table(E.as_base(four))
    # the values of mle_eval are not a point: the message does not say mle_eval takes it
    with pytest.raises(TypeError, match=r"`values` is an `as_base\(...\)` marker, which only "
                                        r".* the `point` of eq_table and mle_eval take; pass "
                                        r"the words themselves here"):
        E.mle_eval(E.as_base(F.random(4, seed=1)), E.random(2, seed=2))


@pytest.mark.parametrize("F", FIELDS)
def test_mle_eval_takes_a_mark_of_its_own_extension_only(F):
    """mle_eval checks a marked point as eq_table does: another field's mark is
    refused, and the base field takes no mark."""
    E = F.ext
    other = KoalaBear if F is BabyBear else BabyBear
    four = F.random(4, seed=6)
    with pytest.raises(ValueError, match="`point` is marked as"):
        E.mle_eval(E.random(16, seed=7), other.ext.as_base(four))
    with pytest.raises(TypeError, match="marker, which only the extension field's"):
        F.mle_eval(F.random(16, seed=8), E.as_base(four))


@pytest.mark.parametrize("F", FIELDS)
def test_eq_table_into_out_holding_the_point(F):
    """``out`` may hold the point itself (the table then goes through a
    temporary): the table is that of the point as it was."""
    for G in (F, F.ext):
        buf = G.random(8, seed=3)
        point = buf[:3]  # a view of out
        want = G.eq_table(point.copy())
        assert G.eq_table(point, out=buf) is buf
        assert (buf == want).all()


def eq_by_launchers(G, F, point):
    """``G.eq_table(point)`` (NumPy) by one checked CPU launcher call per
    doubling: the reference of the trusted path, which runs the small
    doublings in one kernel call."""
    from zorch_nb.kernels import field_cpu
    point = getattr(point, "words", point)  # (an as_base mark's words)
    table = np.zeros((2**point.shape[0],) + ((4,) if G.degree == 4 else ()), np.uint32)
    table[0] = G.one
    m = 1
    for r in point:
        r = np.ascontiguousarray(r).reshape(-1)
        if G.degree == 1:
            field_cpu.base_eq_split(table[:m], r, table[:m], table[m:2 * m], F.params)
        else:
            field_cpu.ext4_eq_split(table[:m], r, r.size, table[:m], table[m:2 * m], F.params)
        m *= 2
    return table


def mle_by_launchers(G, F, values, point):
    """``G.mle_eval(values, point)`` (NumPy) by one checked CPU launcher fold
    per variable: the reference of the trusted path, which runs the folds of
    small values in one kernel call."""
    from zorch_nb.kernels import field_cpu
    point = getattr(point, "words", point)  # (an as_base mark's words)
    if G.degree == 4 and values.ndim == 1 and point.ndim == 1:  # folds in the base field
        return G.from_base(mle_by_launchers(F, F, values, point))
    v = values
    if point.shape[0] == 0:
        return G.pow(G.from_base(v) if G.degree == 4 and v.ndim == 1 else v, 1).reshape(
            (4,) if G.degree == 4 else ())
    for r in point:
        r = np.ascontiguousarray(r).reshape(-1)
        out = np.empty((v.shape[0] // 2,) + ((4,) if G.degree == 4 else ()), np.uint32)
        if G.degree == 1:
            field_cpu.base_mle_fold(v, r, out, F.params)
        else:
            field_cpu.ext4_mle_fold(v, 1 if v.ndim == 1 else 4, r, r.size, out, F.params)
        v = out
    return v.reshape((4,) if G.degree == 4 else ())


def test_cpu_eq_table_and_mle_eval_skip_the_launchers_checks(monkeypatch):
    """On the CPU eq_table and mle_eval run their doublings and folds through
    the kernels' trusted entry points (their buffers are their own, the point
    and values checked once): the checked launchers cost more than a small
    doubling or fold (4 extension coordinates, 16 values: eq_table 38 -> 24
    us, mle_eval 40 -> 28 us; eq_table's small doublings now run in one
    call).  The same bytes as through the checked launchers, for base and
    extension values and points."""
    from zorch_nb.kernels import field_cpu
    rng = np.random.default_rng(7)
    cases = []
    for F in (KoalaBear, BabyBear):
        E = F.ext
        for nv in (0, 1, 4, 9):
            cases += [(F, F, raw_words(rng, (2**nv,), F.p), raw_words(rng, (nv,), F.p)),
                      (E, F, raw_words(rng, (2**nv, 4), F.p), raw_words(rng, (nv, 4), F.p)),
                      (E, F, raw_words(rng, (2**nv,), F.p), raw_words(rng, (nv, 4), F.p)),
                      (E, F, raw_words(rng, (2**nv, 4), F.p),
                       E.as_base(raw_words(rng, (nv,), F.p)))]

    def run():
        return [(G.eq_table(pt).tobytes(), G.mle_eval(v, pt).tobytes()) for G, _, v, pt in cases]

    # eq_table's doublings and mle_eval's folds by the checked launchers, one
    # call each (both run the small ones in one kernel call: eq_table_trusted,
    # mle_eval_trusted)
    assert [(eq_by_launchers(G, F, pt).tobytes(), mle_by_launchers(G, F, v, pt).tobytes())
            for G, F, v, pt in cases] == run()

    # through the checked launchers: the trusted entry points routed to them
    # (which, their checks passed, call the real entry points in turn)
    inside = []

    def via(launcher, trusted):
        def entry(*args):
            if inside:  # the launcher's own call
                return trusted(*args)
            inside.append(1)
            try:
                return launcher(*args)
            finally:
                inside.pop()
        return entry
    eq, fold = field_cpu.eq_split_trusted, field_cpu.mle_fold_trusted
    monkeypatch.setattr(field_cpu, "eq_split_trusted", via(
        lambda deg, a, r, r_deg, lo, hi, f: field_cpu.base_eq_split(a, r, lo, hi, f)
        if deg == 1 else field_cpu.ext4_eq_split(a, r, r_deg, lo, hi, f), eq))
    monkeypatch.setattr(field_cpu, "mle_fold_trusted", via(
        lambda deg, v, v_deg, r, r_deg, out, f: field_cpu.base_mle_fold(v, r, out, f)
        if deg == 1 else field_cpu.ext4_mle_fold(v, v_deg, r, r_deg, out, f), fold))
    want = run()
    monkeypatch.undo()

    # mle_fold, by the checked launchers (one variable of each case's values)
    folds = [mle_by_launchers(G, F, v[:2], getattr(pt, "words", pt)[:1]).tobytes()
             for G, F, v, pt in cases if len(getattr(pt, "words", pt))]

    def refuse(*args, **kwargs):
        raise AssertionError("a checked launcher ran")
    for name in ("base_eq_split", "ext4_eq_split", "base_mle_fold", "ext4_mle_fold"):
        monkeypatch.setattr(field_cpu, name, refuse)
    assert run() == want
    # mle_fold on the CPU takes the trusted fold too, out= over its own values included
    got = []
    for G, F, v, pt in cases:
        pt = getattr(pt, "words", pt)
        if len(pt):
            embed = G.degree == 4 and v.ndim == 1 and pt.ndim == 1  # (folds in the base field)
            H = F if embed else G
            got.append((G.from_base(H.mle_fold(v[:2], pt[0])) if embed else
                        H.mle_fold(v[:2], pt[0])).reshape(-1).tobytes())
            if v.ndim == (2 if H.degree == 4 else 1):  # values of the result's form
                mine = v[:4].copy()
                want_mine = H.mle_fold(mine, pt[0])
                half = mine[:len(mine) // 2]
                assert H.mle_fold(mine, pt[0], out=half) is half and (half == want_mine).all()
    assert got == folds


@pytest.mark.parametrize("F", FIELDS)
def test_cpu_eq_table_chain_then_launches_across_the_boundary(F):
    """eq_table on the CPU runs the doublings of at most CPU_LANE_RUN entries
    in one serial call and the larger ones one launch each: across that
    boundary (nv 12 to 15), the same bytes as one checked launcher call per
    doubling, and entries checked against big ints."""
    from zorch_nb.kernels.launch_config import CPU_LANE_RUN
    assert 2**12 <= CPU_LANE_RUN < 2**14
    rng = np.random.default_rng(21)
    p, w = F.p, F.W
    for G, rdeg in ((F, 1), (F.ext, 1), (F.ext, 4)):
        for nv in (12, 13, 14, 15):
            point = raw_words(rng, (nv, 4) if rdeg == 4 else (nv,), p)
            got = G.eq_table(point)
            assert got.tobytes() == eq_by_launchers(G, F, point).tobytes(), (G, rdeg, nv)
            rs = _elements(F, point, rdeg)
            for b in [0, 2**nv - 1, *rng.integers(0, 2**nv, 6).tolist()]:
                e = [1, 0, 0, 0]
                for j in range(nv):
                    e = naive.ext_mul(e, rs[j] if b >> j & 1 else _one_minus(F, rs[j]), p, w)
                assert (got[b] == _words(F, [e], G.degree == 4)[0]).all(), (G, nv, b)


@pytest.mark.parametrize("F", FIELDS)
def test_cpu_mle_eval_in_one_call_then_chunked_across_the_boundary(F):
    """mle_eval on the CPU runs every fold of at most 2 CPU_LANE_RUN values in
    one serial call, larger values through the chunked folds: across that
    boundary (nv 12 to 14), with base and extension values and points, the
    bytes of one checked launcher fold per variable, values untouched."""
    from zorch_nb.kernels.launch_config import CPU_LANE_RUN
    assert 2**13 == 2 * CPU_LANE_RUN
    rng = np.random.default_rng(23)
    E = F.ext
    for nv in (12, 13, 14):
        for G, vshape, pshape in ((F, (2**nv,), (nv,)), (E, (2**nv, 4), (nv,)),
                                  (E, (2**nv, 4), (nv, 4)), (E, (2**nv,), (nv, 4))):
            values, point = raw_words(rng, vshape, F.p), raw_words(rng, pshape, F.p)
            keep = values.copy()
            got = G.mle_eval(values, point)
            assert got.tobytes() == mle_by_launchers(G, F, values, point).tobytes(), \
                (G, vshape, pshape)
            assert (values == keep).all()
            # a strided view of the same values: copied once, the same bytes
            twice = np.repeat(values, 2, axis=0)[::2]
            assert G.mle_eval(twice, point).tobytes() == got.tobytes()
