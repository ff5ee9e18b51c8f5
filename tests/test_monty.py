"""The Montgomery reductions at the edges of their input ranges.

The field and circuit tests reach these functions through whole kernels;
here every reduction is driven to the bounds its docstring promises
(``x < p 2**32`` for ``monty_reduce``, ``x < 2 p 2**32`` for
``monty_reduce_sum4``, four products of ``p - 1`` for ``ext4_dot``), in the
Numba source (compiled and as plain Python) and in ``monty.cuh`` built for
the host, each against Python big integers.
"""
import warnings

import numpy as np
import pytest

from naive import P, W, dec, enc, ext_mul, ext_pow
from zorch_nb.kernels import monty
from zorch_nb.kernels.field_params import FIELDS
from cuda_host import compile_host, ptr

FIELD_NAMES = [pytest.param("koalabear", id="koalabear"), pytest.param("babybear", id="babybear")]
_BIG = {"koalabear": "KoalaBear", "babybear": "BabyBear"}
R = 2**32


def _inputs(p, bound, seed=0):
    """Edge values of ``[0, bound)`` and a random spread, as Python ints."""
    edges = [0, 1, p - 1, p, R - 1, R, p * R - 1, p * R, p * R + 1, 4 * (p - 1) ** 2,
             bound - 1]
    rng = np.random.default_rng(seed)
    rand = [int(v) for v in rng.integers(0, bound, size=200, dtype=np.uint64)]
    return [x for x in edges if 0 <= x < bound] + rand


def _numba_variants(name):
    # The plain-Python variant is how the CUDA simulator and NUMBA_DISABLE_JIT
    # run the function (numpy scalars, nothing may wrap).
    fn = getattr(monty, name)
    if not hasattr(fn, "py_func"):  # NUMBA_DISABLE_JIT=1: only the Python one exists
        return [pytest.param(fn, id="python")]
    return [pytest.param(fn, id="compiled"), pytest.param(fn.py_func, id="python")]


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("impl", _numba_variants("monty_reduce"))
def test_monty_reduce_whole_range(field, impl):
    f = FIELDS[field]
    p = f.p
    # nothing may wrap in plain Python either (NumPy scalars warn on overflow);
    # the callees run as Python too under NUMBA_DISABLE_JIT=1 (CI's plain stage)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in _inputs(p, p * R):
            got = int(impl(np.uint64(x), np.uint32(p), np.uint32(f.mu_neg)))
            assert got == x * pow(R, -1, p) % p, x


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("to, back", [
    pytest.param(t.values[0], b.values[0], id=t.id)
    for t, b in zip(_numba_variants("to_monty"), _numba_variants("from_monty"))])
def test_to_and_from_monty_cover_the_uint32_range(field, to, back):
    """The public scalar encode/decode pair (README: the kernels in your own
    code), every uint32 value read mod p, against big ints."""
    f = FIELDS[field]
    p, mu, r2 = np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.r2_mod_p)
    for v in _inputs(f.p, R):
        w = int(to(np.uint32(v), p, mu, r2))
        assert w == v * R % f.p, v
        assert int(back(np.uint32(v), p, mu)) == v * pow(R, -1, f.p) % f.p, v
        assert int(back(np.uint32(w), p, mu)) == v % f.p, v


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("impl", _numba_variants("monty_reduce_sum4"))
def test_monty_reduce_sum4_whole_range(field, impl):
    f = FIELDS[field]
    p = f.p
    assert 4 * (p - 1) ** 2 < 2 * p * R  # the bound the function relies on
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no wrap in plain Python (see above)
        for x in _inputs(p, 2 * p * R):
            got = int(impl(np.uint64(x), np.uint32(p), np.uint32(f.mu_neg)))
            assert got == x * pow(R, -1, p) % p, x


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("add, sub, neg", [
    pytest.param(*(v.values[0] for v in vs), id=vs[0].id)
    for vs in zip(*(_numba_variants(n) for n in ("mod_add", "mod_sub", "mod_neg")))])
def test_modular_add_sub_neg_at_their_bounds(field, add, sub, neg):
    """Canonical words in, canonical words out: a sum reaching p exactly
    (1 + (p - 1)) and the negation of 0 must give 0, not p (the field and
    graph kernels reach them through whole kernels, where no test met
    either edge: a `>` for `>=` in mod_add, or mod_neg without its zero
    case, passed every other test)."""
    p = FIELDS[field].p
    rng = np.random.default_rng(3)
    vals = [0, 1, 2, p // 2, p // 2 + 1, p - 2, p - 1] + [int(v) for v in rng.integers(0, p, 8)]
    for a in vals:
        assert int(neg(np.uint32(a), np.uint32(p))) == -a % p, a
        for b in vals:
            assert int(add(np.uint32(a), np.uint32(b), np.uint32(p))) == (a + b) % p, (a, b)
            assert int(sub(np.uint32(a), np.uint32(b), np.uint32(p))) == (a - b) % p, (a, b)


def _words(p, seed=2):
    """Edge uint32 words around 0, p, 2p and 2**32, and a random spread."""
    edges = [0, 1, p - 1, p, p + 1, 2 * p - 1, 2 * p, 2 * p + 1, R - p - 1, R - p, R - 2, R - 1]
    rng = np.random.default_rng(seed)
    return edges + [int(v) for v in rng.integers(0, R, size=40, dtype=np.uint64)]


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("name", ["canonical", "reduce_once"])
def test_word_reductions_cover_every_uint32(field, name):
    f = FIELDS[field]
    p = f.p
    fn = getattr(monty, name)
    for impl in (fn, getattr(fn, "py_func", fn)):  # (no py_func under NUMBA_DISABLE_JIT)
        for w in _words(p):
            got = int(impl(np.uint32(w), np.uint32(p)))
            assert got % p == w % p and got < (p if name == "canonical" else R - p), (w, got)


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_base_fraction_sum_of_once_reduced_words(field):
    """gkr_scalar.frac_bb on reduce_once inputs (its CPU loads) is the canonical fraction sum."""
    from zorch_nb.kernels.gkr_scalar import frac_bb
    f = FIELDS[field]
    p, mu = np.uint32(f.p), np.uint32(f.mu_neg)
    words = _words(f.p)
    rng = np.random.default_rng(3)
    quads = [(R - 1, R - 1, R - 1, R - 1), (R - f.p - 1,) * 4, (2 * f.p - 1,) * 4]
    quads += [tuple(int(words[i]) for i in rng.integers(0, len(words), 4)) for _ in range(300)]
    for impl in (frac_bb, getattr(frac_bb, "py_func", frac_bb)):
        for n0, n1, d0, d1 in quads:
            a, b, c, d = (monty.reduce_once(np.uint32(w), p) for w in (n0, n1, d0, d1))
            num, den = (int(x) for x in impl(a, b, c, d, p, mu))
            v = [dec(w % f.p, f.p) for w in (n0, n1, d0, d1)]
            assert num == enc((v[0] * v[3] + v[1] * v[2]) % f.p, f.p), (n0, n1, d0, d1)
            assert den == enc(v[2] * v[3] % f.p, f.p), (n0, n1, d0, d1)


def _ext_cases(p, seed=1):
    rng = np.random.default_rng(seed)
    cases = [([p - 1] * 4, [p - 1] * 4), ([0] * 4, [p - 1] * 4), ([1, 0, 0, 0], [p - 1] * 4),
             ([p - 1, 0, p - 1, 0], [0, p - 1, 0, p - 1])]
    cases += [(list(map(int, rng.integers(0, p, 4))), list(map(int, rng.integers(0, p, 4))))
              for _ in range(100)]
    return cases


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_ext4_mul_extremes(field):
    """Canonical values p - 1 in every coefficient make every coefficient sum
    of ``ext4_dot`` its largest (four products of ``(p - 1)**2``)."""
    f = FIELDS[field]
    p, w = P[_BIG[field]], W[_BIG[field]]
    for a, b in _ext_cases(p):
        words = [enc(v, p) for v in a + b]
        got = monty.ext4_mul(*(np.uint32(v) for v in words), np.uint32(p), np.uint32(f.mu_neg),
                   np.uint32(f.w_mont))
        assert [dec(int(c), p) for c in got] == ext_mul(a, b, p, w), (a, b)


def _twin(name, like):
    """monty's ``name`` in the variant of ``like`` (compiled, or the plain
    Python the simulator runs)."""
    fn = getattr(monty, name)
    return fn if hasattr(like, "py_func") else getattr(fn, "py_func", fn)


def _scalars(field):
    f = FIELDS[field]
    return np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.w_mont)


def _word_cases(p, count, size, slots, seed):
    """``count`` lists of ``size`` random uint32 words (as Python ints); the
    first ones hold every pair of edge words at positions ``slots``."""
    rng = np.random.default_rng(seed)
    edges = [0, 1, p - 1, p, R - 1, R % p]
    for t in range(count):
        words = [int(x) for x in rng.integers(0, R, size, dtype=np.uint64)]
        if t < len(edges) ** 2:
            words[slots[0]], words[slots[1]] = edges[t % len(edges)], edges[t // len(edges)]
        yield words


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("fold", _numba_variants("ext4_fold"))
def test_mle_folds_read_any_words(field, fold):
    """``base_fold`` / ``ext4_fold`` (the scalar arithmetic of the fused MLE
    fold kernels, CPU and Numba-CUDA) give ``lo + r (hi - lo)`` for any uint32
    words (read mod p), in every (values, r) degree pair, the coefficients a
    base side ignores set to garbage."""
    p, w, (pp, mu, wm) = P[_BIG[field]], W[_BIG[field]], _scalars(field)
    base = _twin("base_fold", fold)
    for words in _word_cases(p, 120, 12, (0, 4), seed=5):  # edge pairs as lo[0], hi[0]
        lo, hi, r = ([dec(x % p, p) for x in words[i:i + 4]] for i in (0, 4, 8))
        for v_deg in (1, 4):
            for r_deg in (1, 4):
                L = lo if v_deg == 4 else [lo[0], 0, 0, 0]
                H = hi if v_deg == 4 else [hi[0], 0, 0, 0]
                S = r if r_deg == 4 else [r[0], 0, 0, 0]
                prod = ext_mul([(x - y) % p for x, y in zip(H, L)], S, p, w)
                want = [(x + y) % p for x, y in zip(L, prod)]
                got = fold(*(np.uint32(x) for x in words), v_deg, r_deg, pp, mu, wm)
                assert [dec(int(c), p) for c in got] == want, (words, v_deg, r_deg)
                assert all(int(c) < p for c in got)
        got = base(np.uint32(words[0]), np.uint32(words[4]), np.uint32(words[8]), pp, mu)
        assert dec(int(got), p) == (lo[0] + r[0] * (hi[0] - lo[0])) % p, words


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("split", _numba_variants("ext4_eq_split"))
def test_eq_splits_read_any_words(field, split):
    """``base_eq_split`` / ``ext4_eq_split`` give ``(a - a r, a r)`` for any
    uint32 words, a base ``r``'s other words set to garbage."""
    p, w, (pp, mu, wm) = P[_BIG[field]], W[_BIG[field]], _scalars(field)
    base = _twin("base_eq_split", split)
    for words in _word_cases(p, 60, 8, (0, 4), seed=6):  # edge pairs as a[0], r[0]
        a, r = ([dec(x % p, p) for x in words[i:i + 4]] for i in (0, 4))
        for r_deg in (1, 4):
            h = ext_mul(a, r if r_deg == 4 else [r[0], 0, 0, 0], p, w)
            want = [(x - y) % p for x, y in zip(a, h)] + h
            got = split(*(np.uint32(x) for x in words), r_deg, pp, mu, wm)
            assert [dec(int(c), p) for c in got] == want, (words, r_deg)
            assert all(int(c) < p for c in got)
        got = base(np.uint32(words[0]), np.uint32(words[4]), pp, mu)
        h = a[0] * r[0] % p
        assert [dec(int(c), p) for c in got] == [(a[0] - h) % p, h], words


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("split", _numba_variants("ext4_eq_split"))
def test_eq_split_reduces_a_noncanonical_r_before_its_sums(field, split):
    """An extension ``r`` with one word ``2**32 - 1`` (not canonical) and every
    other word of ``a`` and ``r`` ``p - 1``: ``a[i] r[j]`` is near ``p 2**32``
    and with three ``(p - 1)**2`` beside it a coefficient sum of ``ext4_dot``
    passes ``2 p 2**32`` unless ``r`` is reduced first (found by mutation
    testing: ext4_eq_split passing ``r[1]`` raw passed every other test -- the
    random words of test_eq_splits_read_any_words never reach such sums)."""
    p, w, (pp, mu, wm) = P[_BIG[field]], W[_BIG[field]], _scalars(field)
    for j in range(4):
        words = [p - 1] * 8
        words[4 + j] = R - 1
        a, r = ([dec(x % p, p) for x in words[i:i + 4]] for i in (0, 4))
        h = ext_mul(a, r, p, w)
        want = [(x - y) % p for x, y in zip(a, h)] + h
        got = split(*(np.uint32(x) for x in words), 4, pp, mu, wm)
        assert [dec(int(c), p) for c in got] == want, j
        assert all(int(c) < p for c in got), j


_HARNESS = r"""
extern "C" void reduce_sum4(const zorch_u64* x, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i) out[i] = zorch_monty_reduce_sum4(x[i]);
}
extern "C" void ext_mul(const zorch_u32* a, const zorch_u32* b, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i)
        zorch_ext4_store(out, i, zorch_ext4_mul(zorch_ext4_load(a, i), zorch_ext4_load(b, i)));
}
extern "C" void mul_sub(const zorch_u32* w, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i)
        out[i] = zorch_mont_mul_sub(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
}
extern "C" void ext_inv(const zorch_u32* a, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i) zorch_ext4_store(out, i, zorch_ext4_inv(zorch_ext4_load(a, i)));
}
"""


def _extreme_words(p):
    """Every 4-tuple of the canonical words 0, 1, p - 1 and the Montgomery
    one: the products of ``mont_mul_sub`` and of the extension norm's sums
    at their largest and smallest."""
    edges = [0, 1, p - 1, R % p]
    return [[edges[(t >> (2 * k)) & 3] for k in range(4)] for t in range(4 ** 4)]


@pytest.mark.parametrize("field", FIELD_NAMES)
@pytest.mark.parametrize("impl", _numba_variants("mont_mul_sub"))
def test_mont_mul_sub_and_the_extension_inverse_at_their_bounds(field, impl):
    """``a b - c d`` with one reduction (``a b + p**2 - c d < 2 p**2``), and
    the extension inverse, whose norm sums up to four such terms, on every
    element of extreme coefficients, against big ints (the Numba source and
    monty.cuh built for the host)."""
    pp, mu, wm = _scalars(field)
    p, w = P[_BIG[field]], W[_BIG[field]]
    one = np.uint32(R % p)
    cases = _extreme_words(p)
    lib = compile_host(field, "field_ops.cu", _HARNESS)
    words = np.array(cases, dtype=np.uint32)
    c_out = np.empty(len(cases), dtype=np.uint32)
    lib.mul_sub(ptr(words), ptr(c_out), len(cases))
    inv = _twin("ext4_inv", impl)
    c_inv = np.empty_like(words)
    lib.ext_inv(ptr(words), ptr(c_inv), len(cases))
    for t, (a, b, c, d) in enumerate(cases):
        want = (dec(a, p) * dec(b, p) - dec(c, p) * dec(d, p)) % p
        got = impl(*(np.uint32(v) for v in (a, b, c, d)), pp, mu)
        assert dec(int(got), p) == want and int(got) < p, (a, b, c, d)
        assert int(c_out[t]) == int(got)
        if not any(cases[t]):
            continue  # zero has no inverse
        x = [dec(v, p) for v in cases[t]]
        y = inv(*(np.uint32(v) for v in cases[t]), pp, mu, wm, one)
        assert all(int(v) < p for v in y)
        assert ext_mul(x, [dec(int(v), p) for v in y], p, w) == [1, 0, 0, 0], cases[t]
        assert [int(v) for v in c_inv[t]] == [int(v) for v in y]


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_cuda_c_reductions_match_big_ints(field):
    """The same bounds for monty.cuh, compiled for the host."""
    lib = compile_host(field, "field_ops.cu", _HARNESS)
    p, w = P[_BIG[field]], W[_BIG[field]]
    xs = np.array(_inputs(p, 2 * p * R), dtype=np.uint64)
    out = np.empty(xs.shape, dtype=np.uint32)
    lib.reduce_sum4(ptr(xs), ptr(out), len(xs))
    assert [int(v) for v in out] == [int(x) * pow(R, -1, p) % p for x in xs]
    cases = _ext_cases(p)
    a = np.array([[enc(v, p) for v in c[0]] for c in cases], dtype=np.uint32)
    b = np.array([[enc(v, p) for v in c[1]] for c in cases], dtype=np.uint32)
    out = np.empty_like(a)
    lib.ext_mul(ptr(a), ptr(b), ptr(out), len(cases))
    for row, (x, y) in zip(out, cases):
        assert [dec(int(c), p) for c in row] == ext_mul(x, y, p, w), (x, y)


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_broken_field_constants_are_refused(field):
    """The import-time checks of the constants are explicit (they ran as
    ``assert`` and vanished under ``python -O``)."""
    from zorch_nb.kernels import field_params
    f = FIELDS[field]
    field_params._check(f)  # the shipped constants pass
    for broken, what in [(f._replace(mu_neg=f.mu_neg ^ 2), "mu_neg"),
                         (f._replace(r_inv=f.r_inv + 1), "r_inv"),
                         (f._replace(w=4), "reducible"),
                         (f._replace(p=f.p + 2), "prime|4 does not divide"),
                         # the derived words, each on its own (r_mod_p = r_inv = 1
                         # passed the product check; none was compared with its
                         # definition)
                         (f._replace(r_mod_p=1, r_inv=1), "r_mod_p != 2\\^32"),
                         (f._replace(r_mod_p=f.r_mod_p + f.p), "r_mod_p != 2\\^32"),
                         (f._replace(r2_mod_p=f.r2_mod_p + 1), "r2_mod_p"),
                         (f._replace(w_mont=f.w), "w_mont"),
                         (f._replace(w=f.w + f.p), "w must lie in")]:
        with pytest.raises(RuntimeError, match=f"{field}: .*({what})"):
            field_params._check(broken)


# Records no shipped field reaches, each failing exactly one of the checks,
# so every check must hold on its own (found by mutation testing: a check
# dropped or weakened passed every other test, as both shipped fields pass
# all of them).  Each prime and its non-square w are spelled out.
_SQUARE_OF_PRIME = 46337 ** 2  # 2147117569: a prime above 2**15 squared, below 2**31


@pytest.mark.parametrize("p, w, what", [
    # 3p < 2**32 (every check but the bounds holds): a 32-bit word needs a third subtraction
    (1431655661, 2, "a 32-bit word must lie below 3p"),
    # 3p > 2**32 but (2**32 - p - 1)**2 >= p 2**32: a word reduced once no longer
    # multiplies into Montgomery reduction's range
    (1431655777, 5, "reduce_once bounds"),
    # the square of a prime: every divisor below it but not its root, and a
    # divisor above 2**15 (Euler's criterion cannot hold mod a square: that
    # check fails too, but later)
    (_SQUARE_OF_PRIME, 3, "p is not prime"),
    # 2**31 - 1: a prime, all bounds hold, but 4 does not divide p - 1 (3 is a non-square)
    ((1 << 31) - 1, 3, "4 does not divide p - 1"),
    # w = 0 (or any multiple of p): x**4 - w = x**4 is reducible, and w**((p-1)/2) is 0, not -1
    ((1 << 31) - (1 << 24) + 1, 0, "x\\^4 - 0 is reducible"),
])
def test_each_field_check_refuses_on_its_own(p, w, what):
    from zorch_nb.kernels import field_params
    f = field_params._make("mine", p=p, w=w)  # every derived constant consistent
    with pytest.raises(RuntimeError, match=f"^zorch_nb field constants of mine: {what}$"):
        field_params._check(f)


@pytest.mark.parametrize("shipped, wrong, what", [
    pytest.param("p=(1 << 31) - (1 << 24) + 1, w=3)", "p=(1 << 31) - (1 << 24) + 1, w=4)",
                 "koalabear: x\\^4 - 4 is reducible", id="koalabear-w"),
    pytest.param("p=(1 << 31) - (1 << 27) + 1, w=11)", "p=(1 << 31) - (1 << 27) + 3, w=11)",
                 "babybear: (p is not prime|4 does not divide)", id="babybear-p"),
])
def test_a_wrong_shipped_constant_fails_the_import(shipped, wrong, what):
    """The checks run when the module is imported, on every shipped field: the
    module's own source with one constant changed does not import (the tests
    above call ``_check`` themselves, which passed with the import's loop gone)."""
    import types

    from zorch_nb.kernels import field_params
    with open(field_params.__file__) as fh:
        source = fh.read()
    assert source.count(shipped) == 1, shipped
    module = types.ModuleType("field_params_with_a_wrong_constant")
    code = compile(source.replace(shipped, wrong), field_params.__file__, "exec")
    with pytest.raises(RuntimeError, match=f"^zorch_nb field constants of {what}"):
        exec(code, module.__dict__)


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_scalar_powers_and_folds_at_the_words_that_overflow(field):
    """Inputs found by mutation testing, each of which passed every other
    test with one reduction or bound removed: a 32-bit exponent's top bit
    (mont_pow_u32), bit 128 of a 128-bit exponent (exponent_bit: 0, a shift
    by 64 read it as bit 64), and non-canonical words whose sums overflow
    64 bits unless ext4_fold reduces r and ext4_pow reduces a[3] first (the
    Numba-CUDA kernels pass them raw)."""
    f = FIELDS[field]
    p, w = f.p, W[_BIG[field]]
    pp, mu, wm, one = np.uint32(p), np.uint32(f.mu_neg), np.uint32(f.w_mont), np.uint32(f.r_mod_p)
    for impl in (monty.mont_pow_u32, getattr(monty.mont_pow_u32, "py_func", None)):
        if impl is not None:
            for e in (2**31, 2**32 - 1, 2**31 + 1):
                got = impl(np.uint32(enc(2, p)), np.uint32(e), pp, mu, one)
                assert dec(int(got), p) == pow(2, e, p), e
    bit = monty.exponent_bit
    for impl in (bit, getattr(bit, "py_func", bit)):
        for hi, lo, k, want in ((1, 0, 128, 0), (1, 0, 64, 1), (0, 1, 64, 0), (2**63, 0, 127, 1),
                                (0, 2**63, 63, 1), (2**64 - 1, 2**64 - 1, 129, 0)):
            assert int(impl(np.uint64(hi), np.uint64(lo), k)) == want, (hi, lo, k)
    # r = (2**32 - 1, rj, rj, rj) with W * rj the word p - 1; lo 0, hi p - 1
    rj = enc(dec(p - 1, p) * pow(w, -1, p) % p, p)
    lo, hi, r = [0] * 4, [p - 1] * 4, [R - 1, rj, rj, rj]
    vals = [[dec(x % p, p) for x in v] for v in (lo, hi, r)]
    want = [(x + y) % p for x, y in zip(
        vals[0], ext_mul([(x - y) % p for x, y in zip(vals[1], vals[0])], vals[2], p, w))]
    for fold in (monty.ext4_fold, getattr(monty.ext4_fold, "py_func", None)):
        if fold is not None:
            got = fold(*(np.uint32(x) for x in lo + hi + r), 4, 4, pp, mu, wm)
            assert [dec(int(g), p) for g in got] == want
    a = [p - 46, p - 7, p - 49, R - 1]
    for e in (35, 2**64 + 35):
        want = ext_pow([dec(x % p, p) for x in a], e, p, w)
        for pw in (monty.ext4_pow, getattr(monty.ext4_pow, "py_func", None)):
            if pw is not None:
                got = pw(*(np.uint32(x) for x in a), np.uint64(e >> 64), np.uint64(e % 2**64),
                         e.bit_length(), pp, mu, wm, one)
                assert [dec(int(g), p) for g in got] == want, e


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_inlined_arithmetic_holds_every_public_function(field):
    """``gkr_scalar.inlined_arithmetic()`` (the README's way to keep your hot
    loops vectorizable) has every function of ``monty.__all__``, and the
    copies a user review found missing compute what their originals do
    (against big ints)."""
    from naive import ext_inv

    from zorch_nb.kernels.gkr_scalar import inlined_arithmetic
    inl = inlined_arithmetic()
    assert {n for n in monty.__all__ if not n.startswith("OP_")} <= set(inl)
    f = FIELDS[field]
    p, w = f.p, W[_BIG[field]]
    pp, mu, wm, one = np.uint32(p), np.uint32(f.mu_neg), np.uint32(f.w_mont), np.uint32(f.r_mod_p)
    u = np.uint32
    assert int(inl["to_monty"](u(R - 1), pp, mu, u(f.r2_mod_p))) == enc((R - 1) % p, p)
    assert int(inl["from_monty"](u(enc(7, p)), pp, mu)) == 7
    assert dec(int(inl["mod_neg"](u(enc(7, p)), pp)), p) == p - 7
    assert dec(int(inl["mont_pow_u32"](u(enc(2, p)), u(2**31 + 1), pp, mu, one)), p) == \
        pow(2, 2**31 + 1, p)
    assert dec(int(inl["mont_inv"](u(enc(3, p)), pp, mu, one)), p) == pow(3, -1, p)
    a = [5, p - 1, 12345, 2]
    got = inl["ext4_inv"](*(u(enc(x, p)) for x in a), pp, mu, wm, one)
    assert [dec(int(g), p) for g in got] == ext_inv(a, p, w)
    e = 2**64 + 35
    assert dec(int(inl["base_pow"](u(enc(3, p)), np.uint64(1), np.uint64(35), e.bit_length(),
                                   pp, mu, one)), p) == pow(3, e, p)
    got = inl["ext4_pow"](*(u(enc(x, p)) for x in a), np.uint64(1), np.uint64(35),
                          e.bit_length(), pp, mu, wm, one)
    assert [dec(int(g), p) for g in got] == ext_pow(a, e, p, w)


# Plonky3's KoalaBear / BabyBear: (p, W, MONTY_MU, its multiplication test vector
# a * b = c on canonical values).  A user moves raw words between the two
# libraries; this pins the facts the field_params docstring states.
PLONKY3 = {"koalabear": (0x7F000001, 3, 0x81000001, (0x34167C58, 0x61F3207B, 0x54B46B81)),
           "babybear": (0x78000001, 11, 0x88000001, (0x34167C58, 0x61F3207B, 0x1B5C8046))}


@pytest.mark.parametrize("field", FIELD_NAMES)
def test_the_constants_and_words_are_plonky3s(field):
    from zorch_nb import BabyBear, KoalaBear
    f = FIELDS[field]
    p, w, monty_mu, (a, b, c) = PLONKY3[field]
    assert (f.p, f.w) == (p, w)
    assert (f.mu_neg + monty_mu) % 2**32 == 0  # the same multiplier, opposite sign
    F = {"koalabear": KoalaBear, "babybear": BabyBear}[field]
    words = F.encode([a, b])
    # Plonky3 holds v as v * 2**32 mod p, as here
    assert words.tolist() == [(a << 32) % p, (b << 32) % p]
    assert int(F.decode(F.mul(words[0], words[1]))) == c
