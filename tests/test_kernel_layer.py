"""The field launchers called directly (``zorch_nb.kernels.field_cpu``,
``field_cuda_numba``, ``field_cupy``), as research code calls them.

Results against Python big integers (the constants of ``naive.py``), every
legal combination of the broadcast forms' steps and rows, both extension
array forms, in-place use where the contract allows it -- and every misuse
refused with a ``TypeError``/``ValueError`` naming the argument, identically
on every backend (the checks are one module, ``kernels/launch_checks.py``).
The Numba-CUDA launchers run under the simulator with tiny inputs; the CuPy
ones on a GPU or, with ``ZORCH_EMULATE_CUPY=1``, under the host emulation.
"""
import os

import numpy as np
import pytest

import naive
from conftest import BACKENDS, to_backend, to_host
from zorch_nb import BabyBear, KoalaBear
from zorch_nb._backend import kernels_for
from zorch_nb.kernels.launch_config import CPU_LANE_RUN, CPU_SERIAL_WORDS
from zorch_nb.kernels.monty import OP_ADD, OP_INV, OP_MUL, OP_NEG, OP_SQUARE, OP_SUB

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
LAUNCHERS = ("base_map1", "base_map2", "ext4_map1", "ext4_map2", "base_map2_bcast",
             "ext4_map2_bcast", "base_pow", "ext4_pow", "base_batch_inv", "base_mle_fold",
             "ext4_mle_fold", "base_eq_split", "ext4_eq_split")
BINARY = (OP_ADD, OP_SUB, OP_MUL)


def small(backend):
    """Element count per call: tiny under the simulator (a Python thread per CUDA thread)."""
    return 6 if backend == "numba" else 37


# ---- big-int references on object arrays of canonical ints -------------------

class Ref:
    """Canonical values and field ops in Python ints (vectorized over object
    arrays), from naive.py's constants, not the kernels'."""

    def __init__(self, F):
        self.p, self.w = naive.P[F.name], naive.W[F.name]
        self.rinv = pow(naive.R, -1, self.p)

    def dec(self, words):
        """Canonical values of Montgomery words (read mod p, as the kernels do)."""
        return np.asarray(to_host(words)).astype(object) * self.rinv % self.p

    def words(self, vals):
        return np.asarray([naive.enc(int(v), self.p) for v in np.ravel(vals)],
                          dtype=np.uint32).reshape(np.shape(vals))

    def base(self, op, x, y=None):
        p = self.p
        return {OP_ADD: lambda: (x + y) % p, OP_SUB: lambda: (x - y) % p,
                OP_MUL: lambda: x * y % p, OP_NEG: lambda: -x % p,
                OP_SQUARE: lambda: x * x % p,
                OP_INV: lambda: np.array([pow(int(v), p - 2, p) for v in x], dtype=object)}[op]()

    def ext_mul(self, x, y):
        """Schoolbook product mod x^4 - W of (n, 4) object arrays."""
        c = [0] * 7
        for i in range(4):
            for j in range(4):
                c[i + j] = c[i + j] + x[:, i] * y[:, j]
        return np.stack([(c[k] + self.w * (c[k + 4] if k < 3 else 0)) % self.p
                         for k in range(4)], axis=1)

    def ext(self, op, x, y=None):
        p = self.p
        if op == OP_ADD:
            return (x + y) % p
        if op == OP_SUB:
            return (x - y) % p
        if op == OP_NEG:
            return -x % p
        if op == OP_SQUARE:
            return self.ext_mul(x, x)
        return self.ext_mul(x, y)

    def ext_pow(self, x, e):
        r = np.zeros_like(x)
        r[:, 0] = 1
        for bit in bin(e)[2:] if e else "":
            r = self.ext_mul(r, r)
            if bit == "1":
                r = self.ext_mul(r, x)
        return r


def rand_words(F, shape, seed, zeros=False):
    """Montgomery words: random canonical ones, edge values first, some words
    >= p (read mod p), and optionally some zero elements."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, F.p, size=shape, dtype=np.uint32)
    flat = w.reshape(-1)
    edges = [0, 1, F.p - 1, 2**32 % F.p, F.p, 2**32 - 1]  # the last two are not canonical
    k = min(len(edges), flat.size)
    flat[:k] = edges[:k]
    if not zeros:
        if w.ndim == 1:
            w[w % F.p == 0] = 1
        else:
            w[(w % F.p == 0).all(axis=1), 0] = 1
    return w


def check_words(ref, got, want_vals, what=""):
    got = to_host(got)
    assert got.dtype == np.uint32
    assert (got < ref.p).all(), f"{what}: non-canonical result words"
    np.testing.assert_array_equal(ref.dec(got).astype(np.int64),
                                  np.asarray(want_vals).astype(np.int64), err_msg=what)


@pytest.fixture(params=BACKENDS)
def k(request):
    """The field kernel module of the backend under test."""
    return kernels_for(request.param, "field"), request.param


def dev(x, backend):
    """A fresh copy of host words ``x`` in the backend's array type."""
    return to_backend(np.array(x, copy=True), backend)


def empty(shape, backend):
    return dev(np.zeros(shape, np.uint32), backend)


# ---- results ------------------------------------------------------------------

def test_the_reference_is_naive_py():
    # The vectorized product and inverse agree with naive.py's list versions.
    F = KoalaBear
    ref = Ref(F)
    x = ref.dec(rand_words(F, (3, 4), 1))
    y = ref.dec(rand_words(F, (3, 4), 2))
    for i in range(3):
        assert ref.ext_mul(x, y)[i].tolist() == naive.ext_mul(list(x[i]), list(y[i]), ref.p,
                                                              ref.w)
    assert ref.ext_pow(x, 5)[1].tolist() == naive.ext_pow(list(x[1]), 5, ref.p, ref.w)


@pytest.mark.parametrize("F", FIELDS)
def test_elementwise_launchers_match_big_ints(F, k):
    k, backend = k
    ref, f, n = Ref(F), F.params, small(backend)
    a, b = rand_words(F, (n,), 1), rand_words(F, (n,), 2)
    x, y = ref.dec(a), ref.dec(b)
    for op in BINARY:
        out = empty(n, backend)
        k.base_map2(op, dev(a, backend), dev(b, backend), out, f)
        check_words(ref, out, ref.base(op, x, y), f"base_map2 {op}")
    for op in (OP_NEG, OP_SQUARE, OP_INV):
        out = empty(n, backend)
        k.base_map1(op, dev(a, backend), out, f)
        check_words(ref, out, ref.base(op, x), f"base_map1 {op}")
    out = empty(n, backend)
    k.base_batch_inv(dev(a, backend), out, f)
    check_words(ref, out, ref.base(OP_INV, x), "base_batch_inv")
    # Python int limbs past 2**63 after smaller ones (which compile int64
    # signatures): the launchers cast them (an OverflowError before)
    for e in (0, 1, 7, F.p - 1, 2**64 + 5, 2**64 - 1, 2**127 + 2**63 + 3):
        out = empty(n, backend)
        k.base_pow(dev(a, backend), e >> 64, e & (2**64 - 1), e.bit_length(), out, f)
        check_words(ref, out, [pow(int(v), e, ref.p) for v in x], f"base_pow {e}")

    ea, eb = rand_words(F, (n, 4), 3), rand_words(F, (n, 4), 4)
    ex, ey = ref.dec(ea), ref.dec(eb)
    for form in ((n, 4), (4 * n,)):  # both extension forms, every launcher
        A, B = dev(ea.reshape(form), backend), dev(eb.reshape(form), backend)
        for op in BINARY:
            out = empty(form, backend)
            k.ext4_map2(op, A, B, out, f)
            check_words(ref, to_host(out).reshape(n, 4), ref.ext(op, ex, ey),
                        f"ext4_map2 {op} {form}")
        for op in (OP_NEG, OP_SQUARE):
            out = empty(form, backend)
            k.ext4_map1(op, A, out, f)
            check_words(ref, to_host(out).reshape(n, 4), ref.ext(op, ex), f"ext4_map1 {op}")
        out = empty(form, backend)
        k.ext4_map1(OP_INV, B, out, f)  # x * x^-1 = 1 in big ints
        inv = ref.dec(to_host(out).reshape(n, 4))
        assert (to_host(out) < ref.p).all()
        want = np.zeros((n, 4), dtype=object)
        want[:, 0] = 1
        assert (ref.ext_mul(ey, inv) == want).all(), f"ext4_map1 inv {form}"
        for e in (0, 1, 5, 2**64 + 3, 2**128 - 1):
            out = empty(form, backend)
            k.ext4_pow(A, e >> 64, e & (2**64 - 1), e.bit_length(), out, f)
            check_words(ref, to_host(out).reshape(n, 4), ref.ext_pow(ex, e),
                        f"ext4_pow {e} {form}")
    # the forms mixed in one call
    out = empty((n, 4), backend)
    k.ext4_map2(OP_MUL, dev(ea.reshape(-1), backend), dev(eb, backend), out, f)
    check_words(ref, out, ref.ext(OP_MUL, ex, ey), "ext4_map2 mixed forms")


def test_inverse_of_zero_is_zero(k):
    k, backend = k
    F = KoalaBear
    a = np.zeros(3, np.uint32)
    a[1] = F.p  # a zero word too: read mod p
    for call in (lambda o: k.base_map1(OP_INV, dev(a, backend), o, F.params),
                 lambda o: k.base_batch_inv(dev(a, backend), o, F.params)):
        out = dev(np.full(3, 7, np.uint32), backend)
        call(out)
        assert (to_host(out) == 0).all()


@pytest.mark.parametrize("F", FIELDS)
def test_first_zero_launchers(F, k):
    """The inverses' zero check: the index of the first element whose words
    are all 0 mod p (0, p, 2p), wherever the zeros lie (several zeros, so
    the threads that find one must agree on the least), or -1; an extension
    element with one nonzero word is not zero; both extension forms; the
    words are only read."""
    k, backend = k
    f, n = F.params, small(backend)
    base = np.asarray(rand_words(F, (n,), 5), np.uint32)
    base[base % F.p == 0] = 1
    ext = np.asarray(rand_words(F, (n, 4), 6), np.uint32)
    ext[:, 0][ext[:, 0] % F.p == 0] = 1
    cases = [(k.base_first_zero, base, F.p), (k.ext4_first_zero, ext, [0, F.p, 2 * F.p, 0])]
    for scan, words, zero in cases:
        assert scan(dev(words, backend), f) == -1
        assert scan(dev(words[:0], backend), f) == -1
        for where in ((n - 1,), (0, n - 1), (1, 3, 4), (n - 2, 2)):
            a = words.copy()
            for i in where:
                a[i] = zero
            d = dev(a, backend)
            assert scan(d, f) == min(where), (scan.__name__, where)
            assert np.array_equal(to_host(d), a)
            if a.ndim == 2:
                assert scan(dev(a.reshape(-1), backend), f) == min(where)
                a[min(where), 3] = 1  # one nonzero coefficient: not zero
                rest = sorted(where)[1:]
                assert scan(dev(a, backend), f) == (rest[0] if rest else -1)


# ---- the broadcast forms: every step / row combination --------------------------

def bcast_index(n, run, step, row):
    """Operand element read for each output element (field_cpu.base_map2_bcast)."""
    i = np.arange(n)
    if run == 0 or run >= n:
        return i * step
    return (i // run) * row + (i % run) * step


def bcast_cases(n_rows, run):
    """(run, a_step, b_step, a_row, b_row): one run (run 0, run = n, run > n,
    rows unused) and n_rows runs with every row 0, 1 or run per operand."""
    n = n_rows * run
    for sa in (0, 1):
        for sb in (0, 1):
            for one in (0, n, n + 3):
                yield one, sa, sb, 0, 0
            for ra in (0, 1, run):
                for rb in (0, 1, run):
                    yield run, sa, sb, ra, rb


def poisoned(words, reach, deg, rng, backend):
    """The operand's first ``reach`` elements, as a prefix of a longer buffer whose
    tail is random words: a read past ``reach`` changes the result."""
    need = reach * deg
    buf = np.empty(need + 8 * deg, np.uint32)
    buf[:need] = words.reshape(-1)[:need]
    buf[need:] = rng.integers(0, 2**32, size=buf.size - need, dtype=np.uint32)
    return to_backend(buf, backend)[:need]


def _bcast_sweep(F, k, backend, ext, n_rows, run, ops, with_big_ints=True):
    ref, f, n = Ref(F), F.params, n_rows * run
    rng = np.random.default_rng(n)
    degs = [(4, 4), (4, 1), (1, 4)] if ext else [(1, 1)]
    for da, db in degs:
        src = {d: (rand_words(F, (n, d) if d == 4 else (n,), 10 + d),
                   rand_words(F, (n, d) if d == 4 else (n,), 20 + d)) for d in (1, 4)}
        for op in ops:
            for r, sa, sb, ra, rb in bcast_cases(n_rows, run):
                ja, jb = bcast_index(n, r, sa, ra), bcast_index(n, r, sb, rb)
                wa, wb = src[da][0], src[db][1]
                a = poisoned(wa, int(ja.max()) + 1, da, rng, backend)
                b = poisoned(wb, int(jb.max()) + 1, db, rng, backend)
                what = f"deg {da}{db} op {op} run {r} steps {sa}{sb} rows {ra}{rb}"
                if ext:
                    out = empty(4 * n, backend)
                    k.ext4_map2_bcast(op, a, sa, da, b, sb, db, out, f, run=r, a_row=ra,
                                      b_row=rb)
                    got = to_host(out).reshape(n, 4)
                else:
                    out = empty(n, backend)
                    k.base_map2_bcast(op, a, sa, b, sb, out, f, run=r, a_row=ra, b_row=rb)
                    got = to_host(out)
                if with_big_ints:
                    x, y = ref.dec(wa)[ja], ref.dec(wb)[jb]
                    if ext:  # a base operand is its embedding (s, 0, 0, 0)
                        x, y = (np.stack([v] + [v * 0] * 3, axis=1) if v.ndim == 1 else v
                                for v in (x, y))
                        want = ref.ext(op, x, y)
                    else:
                        want = ref.base(op, x, y)
                    check_words(ref, got, want, what)
                else:  # the plain elementwise launcher on the gathered operands
                    ga, gb = wa[ja], wb[jb]
                    if ext:
                        ga, gb = (np.stack([v] + [v * 0] * 3, axis=1) if v.ndim == 1 else v
                                  for v in (ga, gb))
                        want = np.empty((n, 4), np.uint32)
                        kernels_for("cpu", "field").ext4_map2(op, ga, gb, want, f)
                    else:
                        want = np.empty(n, np.uint32)
                        kernels_for("cpu", "field").base_map2(op, ga, gb, want, f)
                    np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
@pytest.mark.parametrize("F", FIELDS)
def test_bcast_every_step_row_combination(F, k, ext):
    """Both steps 0 with several rows was wrong on the CPU (it read the
    operand that does not step as if it did)."""
    k, backend = k
    ops = (OP_SUB, OP_MUL) if backend == "numba" else BINARY  # (the simulator is slow)
    n_rows, run = (2, 3) if backend == "numba" else (3, 5)
    _bcast_sweep(F, k, backend, ext, n_rows, run, ops)


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_bcast_every_combination_on_the_parallel_cpu_paths(ext):
    # Past CPU_SERIAL_WORDS (the parallel kernels) with runs longer than
    # CPU_LANE_RUN (several tasks per row), against the elementwise launchers.
    k = kernels_for("cpu", "field")
    run = CPU_LANE_RUN + 5
    assert 3 * run > CPU_SERIAL_WORDS
    _bcast_sweep(KoalaBear, k, "cpu", ext, 3, run, (OP_SUB, OP_MUL), with_big_ints=False)


@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="counts signatures")
def test_base_and_ext_broadcast_rows_share_one_compile():
    """The base and extension row broadcasts of add run one kernel:
    passed the same scalar types, it compiles once for both (the base
    launcher passed its unused ``wm`` as an int 0, typed int64: a second
    compile, 8.5 s cold)."""
    from numba import types

    from zorch_nb.kernels import field_cpu
    from zorch_nb.kernels.cpu_threads import serial_twin
    F, k = KoalaBear, kernels_for("cpu", "field")
    for rows, run in ((2, 8), (3, CPU_LANE_RUN + 5)):  # the serial twin, then the kernel
        # rows of a, each plus the one row of b
        a, b = F.random(rows * run, seed=1), F.random(run, seed=2)
        k.base_map2_bcast(OP_ADD, a, 1, b, 1, np.empty_like(a), F.params, run=run,
                          a_row=run, b_row=0)
        x, y = F.ext.random(rows * run, seed=1), F.ext.random(run, seed=2)
        k.ext4_map2_bcast(OP_ADD, x, 1, 4, y, 1, 4, np.empty_like(x), F.params, run=run,
                          a_row=run, b_row=0)
    coef = field_cpu._rows_kernel(4, field_cpu._ADD)
    for kernel in (coef, serial_twin(coef)):
        # (other tests may add read-only operands' signatures: set aside here)
        sigs = {tuple(t.copy(readonly=False) if isinstance(t, types.Array) else t for t in s)
                for s in kernel.signatures}
        assert len(sigs) == 1, sigs


_ONE_ELEMENT = """
import numpy as np
from zorch_nb import KoalaBear as F
from zorch_nb.kernels import field_cpu as k
x = F.ext.random(64, seed=1)
F.ext.mul(x, x[3])  # the rows kernel of an extension times one element
others = (k._run_add, k._run_sub, k._run_rsub, k._run_mul, k._ext4_mul_run)
print([len(f.signatures) for f in others], len(k._ext4_mul_by_run.signatures))
"""


@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="counts compiles")
def test_an_extension_times_one_element_compiles_its_loop_alone(tmp_path):
    """A first ``E.mul(x, e)`` compiles the one serial loop it runs: the rows
    kernel branched on the form and kind at run time, and Numba compiled
    every loop it named (11.2 s cold on the 2-core VM, 1.8 s alone)."""
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))  # nothing loaded: all compiled here
    run = subprocess.run([sys.executable, "-c", _ONE_ELEMENT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("]")[0] == "[0, 0, 0, 0, 0", run.stdout
    assert run.stdout.split()[-1] == "1", run.stdout


def test_bcast_issue_example():
    # The reported case: steps both 0, run 100, column rows.
    F = KoalaBear
    k = kernels_for("cpu", "field")
    a, b = F.random(3, seed=1), F.random(3, seed=2)
    o = np.zeros(300, np.uint32)
    k.base_map2_bcast(OP_MUL, a, 0, b, 0, o, F.params, run=100, a_row=1, b_row=1)
    np.testing.assert_array_equal(o, np.repeat(F.mul(a, b), 100))


def test_empty_calls_write_nothing(k):
    k, backend = k
    f, z = KoalaBear.params, empty(0, backend)
    k.base_map2_bcast(OP_MUL, z, 0, z, 0, z, f)  # read a[0] on the CPU before
    k.ext4_map2_bcast(OP_MUL, z, 0, 4, z, 0, 1, z, f)
    k.base_map2(OP_ADD, z, z, z, f)
    k.ext4_map1(OP_INV, empty((0, 4), backend), empty((0, 4), backend), f)
    k.base_pow(z, 0, 3, 2, empty(0, backend), f)


# ---- in place ---------------------------------------------------------------------

def test_in_place_where_allowed(k):
    """out = an input where the kernel is elementwise: the same words as into a
    separate array (n = 20000 on the CPU: the parallel, vectorized kernels)."""
    k, backend = k
    F = KoalaBear
    f = F.params
    n = 20000 if backend == "cpu" else small(backend)

    def same(call, ins, what):  # call(*ins, out) into a fresh array, then over ins[j]
        want = empty(ins[0].shape, backend)
        call(*[dev(x, backend) for x in ins], want)
        for j in range(len(ins)):
            xs = [dev(x, backend) for x in ins]
            call(*xs, xs[j])
            np.testing.assert_array_equal(to_host(xs[j]), to_host(want), err_msg=f"{what} {j}")
        x = dev(ins[0], backend)  # one array as every operand and out
        if all(y is ins[0] for y in ins):
            call(*[x] * len(ins), x)
            np.testing.assert_array_equal(to_host(x), to_host(want), err_msg=f"{what} all")

    a, b = rand_words(F, (n,), 1), rand_words(F, (n,), 2)
    ea, eb = rand_words(F, (n, 4), 3), rand_words(F, (n, 4), 4)
    for op in BINARY:
        same(lambda x, y, o: k.base_map2(op, x, y, o, f), [a, b], f"base_map2 {op}")
        same(lambda x, y, o: k.base_map2(op, x, y, o, f), [a, a], f"base_map2 {op} a=b")
        same(lambda x, y, o: k.ext4_map2(op, x, y, o, f), [ea, eb], f"ext4_map2 {op}")
        same(lambda x, y, o: k.ext4_map2(op, x, y, o, f), [ea, ea], f"ext4_map2 {op} a=b")
        # broadcast forms: out over the operand read elementwise
        one = rand_words(F, (1, 4), 5)
        same(lambda x, o: k.base_map2_bcast(op, x, 1, dev(b[:1], backend), 0, o, f), [a],
             f"base_map2_bcast {op}")
        same(lambda x, o: k.base_map2_bcast(op, dev(b[:1], backend), 0, x, 1, o, f), [a],
             f"base_map2_bcast {op} right")
        same(lambda x, o: k.ext4_map2_bcast(op, x, 1, 4, dev(one, backend), 0, 4, o, f),
             [ea], f"ext4_map2_bcast {op}")
        same(lambda x, o: k.ext4_map2_bcast(op, dev(a, backend), 1, 1, x, 1, 4, o, f), [ea],
             f"ext4_map2_bcast {op} base left")
        same(lambda x, y, o: k.ext4_map2_bcast(op, x, 1, 4, y, 1, 4, o, f), [ea, eb],
             f"ext4_map2_bcast {op} both")
    for op in (OP_NEG, OP_SQUARE):
        same(lambda x, o: k.base_map1(op, x, o, f), [a], f"base_map1 {op}")
        same(lambda x, o: k.ext4_map1(op, x, o, f), [ea], f"ext4_map1 {op}")


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_encode_and_decode_match_big_ints(k, F):
    """``encode`` / ``decode`` on every backend against Python ints: the GPU
    conversions are kernels of their own (CuPy ops did a uint64 ``%``)."""
    k, backend = k
    ref = Ref(F)
    rng = np.random.default_rng(7)
    edges = [0, 1, F.p - 1, F.p, -1, F.p + 5, 2**63 - 1, -2**63, -F.p, 2 * F.p, 12345]
    v = np.concatenate([np.array(edges, np.int64),
                        rng.integers(-2**63, 2**63 - 1, 40, dtype=np.int64, endpoint=True),
                        rng.integers(0, F.p, 600, dtype=np.int64)])
    canon = [int(x) % F.p for x in v]
    out = empty(v.size, backend)
    assert k.encode(dev(v, backend), out, True, F.params) == -1
    check_words(ref, out, canon, "encode reduce")
    # the first value outside [0, p), wherever the bad ones are
    for bad_at in ([3], [599, 640], [650]):
        w = v.copy()
        w[:] = np.abs(w) % F.p
        w[bad_at] = [F.p + i for i in range(len(bad_at))]
        assert k.encode(dev(w, backend), empty(v.size, backend), False, F.params) == bad_at[0]
    good = np.abs(v) % F.p
    out = empty(v.size, backend)
    assert k.encode(dev(good, backend), out, False, F.params) == -1
    check_words(ref, out, good, "encode")
    for bad in (None, "yes", np.True_, 1):  # each would compile another kernel
        with pytest.raises(TypeError, match=r"\.encode: argument `reduce` must be"):
            k.encode(dev(v, backend), out, bad, F.params)
    # decode: out = w 2**-32 mod p; False if a word is >= p (its value mod p
    # is still written), in place too
    words = to_host(out).copy()
    words[[5, 70]] += np.uint32(F.p)  # non-canonical words of the same values
    got = empty(v.size, backend)
    assert k.decode(dev(to_host(out), backend), got, F.params)
    np.testing.assert_array_equal(to_host(got), good.astype(np.uint32))
    assert not k.decode(dev(words, backend), got, F.params)
    np.testing.assert_array_equal(to_host(got), good.astype(np.uint32))
    w = dev(to_host(out), backend)
    assert k.decode(w, w, F.params)  # in place: elementwise
    np.testing.assert_array_equal(to_host(w), good.astype(np.uint32))
    assert k.encode(dev(np.zeros(0, np.int64), backend), empty(0, backend), False,
                    F.params) == -1


@pytest.mark.parametrize("F", FIELDS)
def test_decode_flags_the_word_p_itself(k, F):
    """The word p is not canonical (the element 0 is the word 0): decode
    returns False for it as for any word >= p, and still writes its value
    mod p.  The test above adds p to canonical words, never giving p
    itself: a kernel testing ``> p`` passed it."""
    k, backend = k
    ref = Ref(F)
    for w, ok in (([F.p], False), ([F.p - 1], True), ([7, F.p, 3, 1], False),
                  ([7, F.p - 1, 3, 1], True)):
        w = np.array(w, np.uint32)
        got = empty(w.size, backend)
        assert k.decode(dev(w, backend), got, F.params) == ok, w
        np.testing.assert_array_equal(to_host(got), ref.dec(w).astype(np.uint32))
    assert k.decode(empty(0, backend), empty(0, backend), F.params)


@pytest.mark.parametrize("threads", ["serial", "parallel"])
def test_cpu_conversions_over_many_runs(threads, monkeypatch):
    """The CPU conversions run in runs of CPU_LANE_RUN values, serially until
    a parallel kernel has started the threading layer, then in parallel:
    both give the big-int results, and the first index out of range when
    several runs hold one, in place too."""
    from zorch_nb.kernels import field_cpu
    from zorch_nb.kernels.launch_config import CPU_LANE_RUN
    monkeypatch.setattr(field_cpu, "layer_running", lambda: threads == "parallel")
    F, k = KoalaBear, kernels_for("cpu", "field")
    ref = Ref(F)
    n = 3 * CPU_LANE_RUN + 5
    v = np.random.default_rng(3).integers(0, F.p, n, dtype=np.int64)
    for bad_at in ([n - 1], [CPU_LANE_RUN + 7, 2 * CPU_LANE_RUN, n - 2]):
        w = v.copy()
        w[bad_at] = -5
        assert k.encode(w, np.empty(n, np.uint32), False, F.params) == bad_at[0]
        out = np.empty(n, np.uint32)
        assert k.encode(w, out, True, F.params) == -1
        check_words(ref, out, [int(x) % F.p for x in w], f"encode reduce {bad_at}")
    out = np.empty(n, np.uint32)
    assert k.encode(v, out, False, F.params) == -1
    check_words(ref, out, v, "encode")
    words = out.copy()
    words[[5, CPU_LANE_RUN + 1, n - 1]] += np.uint32(F.p)  # the same values, non-canonical
    got = np.empty(n, np.uint32)
    assert not k.decode(words, got, F.params)
    np.testing.assert_array_equal(got, v.astype(np.uint32))
    assert k.decode(out, out, F.params)  # in place
    np.testing.assert_array_equal(out, v.astype(np.uint32))


# ---- misuse: refused, naming the argument ----------------------------------------

def _arr(backend, shape, dtype=np.uint32):
    return dev(np.zeros(shape, dtype), backend)


def _strided(backend, n, ext=False):
    # a C-discontiguous view: every other row of a larger array
    return to_backend(np.zeros((2 * n, 4) if ext else (2 * n,), np.uint32), backend)[::2]


def misuse_cases():
    """(id, call(k, backend, f), exception, words its message must contain)."""
    n = 5
    A = _arr
    cases = [
        # opcodes the launcher does not implement (they fell through to INV / MUL)
        ("base_map1 op MUL", lambda k, d, f: k.base_map1(OP_MUL, A(d, n), A(d, n), f),
         ValueError, ["base_map1", "`op`"]),
        ("base_map2 op NEG", lambda k, d, f: k.base_map2(OP_NEG, A(d, n), A(d, n), A(d, n), f),
         ValueError, ["base_map2", "`op`"]),
        ("ext4_map1 op ADD",
         lambda k, d, f: k.ext4_map1(OP_ADD, A(d, (n, 4)), A(d, (n, 4)), f),
         ValueError, ["ext4_map1", "`op`"]),
        ("ext4_map2 op INV",
         lambda k, d, f: k.ext4_map2(OP_INV, A(d, (n, 4)), A(d, (n, 4)), A(d, (n, 4)), f),
         ValueError, ["ext4_map2", "`op`"]),
        ("base bcast op SQUARE",
         lambda k, d, f: k.base_map2_bcast(OP_SQUARE, A(d, n), 1, A(d, 1), 0, A(d, n), f),
         ValueError, ["base_map2_bcast", "`op`"]),
        ("ext bcast op 99",
         lambda k, d, f: k.ext4_map2_bcast(99, A(d, 4 * n), 1, 4, A(d, 1), 0, 1, A(d, 4 * n), f),
         ValueError, ["ext4_map2_bcast", "`op`"]),
        ("op float", lambda k, d, f: k.base_map2(2.5, A(d, n), A(d, n), A(d, n), f),
         TypeError, ["`op`", "integer opcode"]),
        # 2.0 == OP_MUL and np.True_ == OP_SUB compare equal to opcodes
        ("op float equal to MUL",
         lambda k, d, f: k.base_map2(2.0, A(d, n), A(d, n), A(d, n), f),
         TypeError, ["`op`", "not float"]),
        ("op numpy bool", lambda k, d, f: k.base_map2(np.True_, A(d, n), A(d, n), A(d, n), f),
         TypeError, ["`op`", "not bool"]),
        ("run bool", lambda k, d, f: k.base_map2_bcast(OP_ADD, A(d, n), 1, A(d, 1), 0,
                                                      A(d, n), f, run=True),
         TypeError, ["`run`", "integer"]),
        ("a_deg unhashable", lambda k, d, f: k.ext4_map2_bcast(
            OP_MUL, A(d, 4 * n), 1, [4], A(d, 1), 0, 1, A(d, 4 * n), f),
         TypeError, ["ext4_map2_bcast", "`a_deg`", "integer"]),
        # dtypes, kinds, the field
        ("a int32", lambda k, d, f: k.base_map2(OP_ADD, A(d, n, np.int32), A(d, n), A(d, n), f),
         TypeError, ["`a`", "uint32"]),
        ("out uint64", lambda k, d, f: k.base_map1(OP_NEG, A(d, n), A(d, n, np.uint64), f),
         TypeError, ["`out`", "uint32"]),
        ("b a list", lambda k, d, f: k.base_map2(OP_ADD, A(d, n), [0] * n, A(d, n), f),
         TypeError, ["`b`"]),
        ("f a field object", lambda k, d, f: k.base_map2(OP_ADD, A(d, n), A(d, n), A(d, n),
                                                         KoalaBear),
         TypeError, ["`f`", "FieldParams"]),
        # a record with other constants would compute silently wrong (and the
        # CUDA C backends compile per field name)
        ("f altered constant", lambda k, d, f: k.base_map2(OP_MUL, A(d, n), A(d, n), A(d, n),
                                                           f._replace(mu_neg=12345)),
         ValueError, ["`f`", "differs from the 'koalabear' record in mu_neg"]),
        ("f unknown field", lambda k, d, f: k.ext4_map2_bcast(
            OP_MUL, A(d, 4 * n), 1, 4, A(d, 1), 0, 1, A(d, 4 * n), f._replace(name="mine")),
         ValueError, ["`f`", "no field named 'mine'"]),
        ("f unhashable name", lambda k, d, f: k.base_map1(OP_NEG, A(d, n), A(d, n),
                                                          f._replace(name=["koalabear"])),
         ValueError, ["`f`", "no field named ['koalabear']"]),
        ("f altered p, pow", lambda k, d, f: k.base_pow(A(d, n), 0, 3, 2, A(d, n),
                                                        f._replace(p=2**32 - 5)),
         ValueError, ["`f`", "record in p"]),
        # lengths and shapes (the segfault: a short operand under a long out)
        ("out longer", lambda k, d, f: k.base_map2(OP_MUL, A(d, n), A(d, n), A(d, 4096), f),
         ValueError, ["`a`", "4096"]),
        ("b shorter", lambda k, d, f: k.base_map2(OP_MUL, A(d, n), A(d, n - 1), A(d, n), f),
         ValueError, ["`b`"]),
        ("base 2-d", lambda k, d, f: k.base_map1(OP_NEG, A(d, (n, 1)), A(d, (n, 1)), f),
         ValueError, ["`out`", "1-d"]),
        ("ext (n, 3)", lambda k, d, f: k.ext4_map1(OP_NEG, A(d, (n, 3)), A(d, (n, 4)), f),
         ValueError, ["`a`", "(n, 4)"]),
        ("ext flat not 4n", lambda k, d, f: k.ext4_pow(A(d, 4 * n + 2), 0, 3, 2,
                                                       A(d, (n, 4)), f),
         ValueError, ["`a`"]),
        ("ext pow count", lambda k, d, f: k.ext4_pow(A(d, (n + 1, 4)), 0, 3, 2, A(d, (n, 4)), f),
         ValueError, ["`a`"]),
        ("batch_inv count", lambda k, d, f: k.base_batch_inv(A(d, n), A(d, n + 1), f),
         ValueError, ["`a`"]),
        # layouts: a strided out was silently never written; inputs read as contiguous
        ("ext out strided", lambda k, d, f: k.ext4_map2(
            OP_MUL, A(d, (n, 4)), A(d, (n, 4)),
            to_backend(np.zeros((n, 8), np.uint32), d)[:, :4], f),
         ValueError, ["`out`", "C-contiguous"]),
        ("base a strided", lambda k, d, f: k.base_map1(OP_SQUARE, _strided(d, n), A(d, n), f),
         ValueError, ["`a`", "C-contiguous"]),
        ("ext a strided", lambda k, d, f: k.ext4_map1(OP_NEG, _strided(d, n, True),
                                                      A(d, (n, 4)), f),
         ValueError, ["`a`", "C-contiguous"]),
        ("bcast b strided", lambda k, d, f: k.base_map2_bcast(OP_ADD, A(d, n), 1,
                                                              _strided(d, n), 1, A(d, n), f),
         ValueError, ["`b`", "C-contiguous"]),
        # broadcast contract
        ("bcast step 2", lambda k, d, f: k.base_map2_bcast(OP_ADD, A(d, 2 * n), 2, A(d, 1), 0,
                                                           A(d, n), f),
         ValueError, ["`a_step`"]),
        ("bcast step -1", lambda k, d, f: k.base_map2_bcast(OP_ADD, A(d, n), 1, A(d, n), -1,
                                                            A(d, n), f),
         ValueError, ["`b_step`"]),
        ("bcast run float", lambda k, d, f: k.base_map2_bcast(OP_ADD, A(d, n), 1, A(d, 1), 0,
                                                              A(d, n), f, run=2.0),
         TypeError, ["`run`"]),
        ("bcast run negative", lambda k, d, f: k.base_map2_bcast(  # n % -1 == 0: wrote nothing
            OP_ADD, A(d, n), 1, A(d, 1), 0, A(d, n), f, run=-1),
         ValueError, ["`run`", ">= 0"]),
        ("ext bcast run negative", lambda k, d, f: k.ext4_map2_bcast(
            OP_MUL, A(d, 4 * n), 1, 4, A(d, 4), 0, 4, A(d, 4 * n), f, run=-2),
         ValueError, ["`run`", ">= 0"]),
        ("bcast run not dividing", lambda k, d, f: k.base_map2_bcast(
            OP_ADD, A(d, 6), 1, A(d, 1), 0, A(d, 6), f, run=4, a_row=4),
         ValueError, ["`run`"]),
        ("bcast row 2", lambda k, d, f: k.base_map2_bcast(
            OP_ADD, A(d, 6), 1, A(d, 3), 0, A(d, 6), f, run=3, a_row=3, b_row=2),
         ValueError, ["`b_row`"]),
        ("bcast one-element operand stepping", lambda k, d, f: k.base_map2_bcast(
            OP_MUL, A(d, n), 1, A(d, 1), 1, A(d, n), f),
         ValueError, ["`b`", f"at least {n}"]),
        ("bcast rows past the operand", lambda k, d, f: k.base_map2_bcast(
            OP_MUL, A(d, 3), 0, A(d, 3), 1, A(d, 6), f, run=3, a_row=1, b_row=3),
         ValueError, ["`b`", "at least 6"]),
        ("ext bcast short ext operand", lambda k, d, f: k.ext4_map2_bcast(
            OP_MUL, A(d, 4 * n - 4), 1, 4, A(d, 1), 0, 1, A(d, 4 * n), f),
         ValueError, ["`a`", f"at least {n}"]),
        ("ext bcast degrees 1, 1", lambda k, d, f: k.ext4_map2_bcast(
            OP_MUL, A(d, n), 1, 1, A(d, n), 1, 1, A(d, 4 * n), f),
         ValueError, ["`a_deg`"]),
        ("ext bcast degree 2", lambda k, d, f: k.ext4_map2_bcast(
            OP_MUL, A(d, 4 * n), 1, 4, A(d, 2), 0, 2, A(d, 4 * n), f),
         ValueError, ["`b_deg`"]),
        # powers: the exponent's limbs and bit count
        ("pow nbits short", lambda k, d, f: k.base_pow(A(d, n), 0, 8, 3, A(d, n), f),
         ValueError, ["`nbits`"]),
        ("pow nbits > 128", lambda k, d, f: k.base_pow(A(d, n), 0, 8, 129, A(d, n), f),
         ValueError, ["`nbits`"]),
        ("pow e_lo negative", lambda k, d, f: k.base_pow(A(d, n), 0, -1, 64, A(d, n), f),
         ValueError, ["`e_lo`"]),
        ("pow e_hi 2**64", lambda k, d, f: k.ext4_pow(A(d, 4 * n), 2**64, 0, 128, A(d, 4 * n),
                                                      f),
         ValueError, ["`e_hi`"]),
        ("pow nbits float", lambda k, d, f: k.base_pow(A(d, n), 0, 8, 4.0, A(d, n), f),
         TypeError, ["`nbits`"]),
    ]
    # overlaps where the kernel is not elementwise in place, and partial ones
    m = 12

    def over(d, shape, lo=0):  # views over one buffer (buffer kept alive by the view)
        buf = to_backend(np.zeros(2 * int(np.prod(shape)) + 8, np.uint32), d)
        size = int(np.prod(shape))
        return buf[lo:lo + size].reshape(shape), buf

    def inplace(call):
        return lambda k, d, f: call(k, d, f, *over(d, (m,)))

    cases += [
        ("base inv in place", inplace(lambda k, d, f, x, _: k.base_map1(OP_INV, x, x, f)),
         ValueError, ["base_map1", "`out`", "`a`", "overlaps"]),
        ("batch_inv in place", inplace(lambda k, d, f, x, _: k.base_batch_inv(x, x, f)),
         ValueError, ["`out`", "overlaps"]),
        ("base pow in place", inplace(lambda k, d, f, x, _: k.base_pow(x, 0, 7, 3, x, f)),
         ValueError, ["`out`", "overlaps"]),
        ("ext inv in place", inplace(lambda k, d, f, x, _: k.ext4_map1(
            OP_INV, x, x.reshape(m // 4, 4), f)),
         ValueError, ["ext4_map1", "overlaps"]),
        ("ext pow in place", inplace(lambda k, d, f, x, _: k.ext4_pow(x, 0, 7, 3, x, f)),
         ValueError, ["ext4_pow", "overlaps"]),
        ("base map2 shifted", inplace(lambda k, d, f, x, buf: k.base_map2(
            OP_ADD, x, A(d, m), buf[1:m + 1], f)),
         ValueError, ["`out`", "`a`", "overlaps"]),
        ("ext map2 shifted by a word", inplace(lambda k, d, f, x, buf: k.ext4_map2(
            OP_MUL, A(d, m), x, buf[1:m + 1], f)),
         ValueError, ["`out`", "`b`", "overlaps"]),
        ("base map2 in place over a, b shifted over it", inplace(  # (out is a: allowed)
            lambda k, d, f, x, buf: k.base_map2(OP_ADD, x, buf[1:m + 1], x, f)),
         ValueError, ["`out`", "`b`", "overlaps"]),
        ("ext map2 in place over b, a shifted over it", inplace(
            lambda k, d, f, x, buf: k.ext4_map2(OP_MUL, buf[4:m + 4], x, x, f)),
         ValueError, ["`out`", "`a`", "overlaps"]),
        ("base neg half over", inplace(lambda k, d, f, x, buf: k.base_map1(
            OP_NEG, x, buf[m // 2:m // 2 + m], f)),
         ValueError, ["`out`", "overlaps"]),
        ("bcast out over the one element", inplace(lambda k, d, f, x, _: k.base_map2_bcast(
            OP_MUL, A(d, m), 1, x[:1], 0, x, f)),
         ValueError, ["`out`", "`b`", "overlaps"]),
        ("bcast out over a column", inplace(lambda k, d, f, x, _: k.base_map2_bcast(
            OP_MUL, x[:3], 0, A(d, m), 1, x, f, run=4, a_row=1, b_row=4)),
         ValueError, ["`out`", "`a`", "overlaps"]),
        ("ext bcast out over a base operand", inplace(lambda k, d, f, x, _: k.ext4_map2_bcast(
            OP_ADD, x[:m // 4], 1, 1, A(d, m), 1, 4, x, f)),
         ValueError, ["`out`", "`a`", "overlaps"]),
    ]
    cases += [  # the fused MLE folds
        ("base v odd count", lambda k, d, f: k.base_mle_fold(A(d, 9), A(d, 1), A(d, 4), f),
         ValueError, ["base_mle_fold", "`v`", "twice"]),
        ("base r two words", lambda k, d, f: k.base_mle_fold(A(d, 8), A(d, 2), A(d, 4), f),
         ValueError, ["base_mle_fold", "`r`", "one element"]),
        ("base r 0-d", lambda k, d, f: k.base_mle_fold(A(d, 8), A(d, ()), A(d, 4), f),
         ValueError, ["base_mle_fold", "`r`"]),
        ("base out int64", lambda k, d, f: k.base_mle_fold(A(d, 8), A(d, 1),
                                                            A(d, 4, np.int64), f),
         TypeError, ["base_mle_fold", "`out`", "uint32"]),
        ("base v strided", lambda k, d, f: k.base_mle_fold(A(d, 16)[::2], A(d, 1), A(d, 4), f),
         ValueError, ["base_mle_fold", "`v`", "C-contiguous"]),
        ("ext v_deg 2", lambda k, d, f: k.ext4_mle_fold(A(d, (8, 4)), 2, A(d, 4), 4,
                                                         A(d, (4, 4)), f),
         ValueError, ["ext4_mle_fold", "`v_deg`"]),
        ("ext r_deg bool", lambda k, d, f: k.ext4_mle_fold(A(d, (8, 4)), 4, A(d, 4), True,
                                                            A(d, (4, 4)), f),
         TypeError, ["ext4_mle_fold", "`r_deg`"]),
        ("ext v count", lambda k, d, f: k.ext4_mle_fold(A(d, (6, 4)), 4, A(d, 4), 4,
                                                         A(d, (4, 4)), f),
         ValueError, ["ext4_mle_fold", "`v`", "twice"]),
        ("ext base v count", lambda k, d, f: k.ext4_mle_fold(A(d, 32), 1, A(d, 4), 4,
                                                              A(d, (4, 4)), f),
         ValueError, ["ext4_mle_fold", "`v`", "twice"]),
        ("ext r two elements", lambda k, d, f: k.ext4_mle_fold(A(d, (8, 4)), 4, A(d, 8), 4,
                                                                A(d, (4, 4)), f),
         ValueError, ["ext4_mle_fold", "`r`", "one element"]),
        ("ext r base given 4 words", lambda k, d, f: k.ext4_mle_fold(A(d, (8, 4)), 4, A(d, 4),
                                                                      1, A(d, (4, 4)), f),
         ValueError, ["ext4_mle_fold", "`r`", "one element"]),
        ("ext out flat not 4n", lambda k, d, f: k.ext4_mle_fold(A(d, (8, 4)), 4, A(d, 4), 4,
                                                                 A(d, 18), f),
         ValueError, ["ext4_mle_fold", "`out`"]),
    ]
    cases += [  # the eq-table doubling
        ("base split hi count", lambda k, d, f: k.base_eq_split(A(d, 8), A(d, 1), A(d, 8),
                                                                 A(d, 7), f),
         ValueError, ["base_eq_split", "`lo`", "as many elements as `hi`"]),
        ("base split a count", lambda k, d, f: k.base_eq_split(A(d, 9), A(d, 1), A(d, 8),
                                                                A(d, 8), f),
         ValueError, ["base_eq_split", "`a`", "as many elements as `hi`"]),
        ("base split r two", lambda k, d, f: k.base_eq_split(A(d, 8), A(d, 2), A(d, 8),
                                                              A(d, 8), f),
         ValueError, ["base_eq_split", "`r`", "one element"]),
        ("ext split r_deg 3", lambda k, d, f: k.ext4_eq_split(A(d, (8, 4)), A(d, 4), 3,
                                                               A(d, (8, 4)), A(d, (8, 4)), f),
         ValueError, ["ext4_eq_split", "`r_deg`"]),
        ("ext split hi int32", lambda k, d, f: k.ext4_eq_split(A(d, (8, 4)), A(d, 4), 4,
                                                                A(d, (8, 4)),
                                                                A(d, (8, 4), np.int32), f),
         TypeError, ["ext4_eq_split", "`hi`", "uint32"]),
        ("ext split lo strided", lambda k, d, f: k.ext4_eq_split(
            A(d, (8, 4)), A(d, 4), 4, _strided(d, 8, True), A(d, (8, 4)), f),
         ValueError, ["ext4_eq_split", "`lo`", "C-contiguous"]),
    ]
    return cases


MISUSE = misuse_cases()


@pytest.mark.parametrize("case", MISUSE, ids=[c[0] for c in MISUSE])
def test_misuse_is_refused_naming_the_argument(k, case):
    k, backend = k
    _, call, exc, words = case
    with pytest.raises(exc) as info:
        call(k, backend, KoalaBear.params)
    msg = str(info.value)
    # the launcher's module and name
    mod = k.__name__.rsplit(".", 1)[1]
    assert mod in msg, msg
    for w in words:
        assert w in msg, msg


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("backend", ["cpu", pytest.param("numba", marks=pytest.mark.cudasim)])
def test_numpy_subclasses_and_a_missing_operand_are_refused(backend):
    """An np.matrix passed every check (C-contiguous uint32 of the right shape),
    then its reshape(-1) stayed 2-d and the kernels' word indices wrote whole
    rows: 992 words past an ext4_eq_split `lo` (heap corruption), 240 past a
    fold's output, nothing at all from ext4_map2.  A masked array's mask
    would be ignored; ``b=None`` failed inside Numba, naming nothing."""
    k, g, f = kernels_for(backend, "field"), kernels_for(backend, "gkr"), KoalaBear.params
    n, G = 8, np.uint32(0xDEADBEEF)
    rng = np.random.default_rng(0)

    def ext(m=n):
        return rng.integers(0, f.p, (m, 4), dtype=np.uint32)

    buf = np.full(4 * n + 1024, G, np.uint32)
    mat = np.asmatrix(buf[:4 * n].reshape(n, 4))  # (guard words after it)
    half = np.asmatrix(buf[:2 * n].reshape(n // 2, 4))
    cases = [
        ("out", lambda: k.ext4_map2(OP_MUL, ext(), ext(), mat, f)),
        ("a", lambda: k.ext4_map2(OP_MUL, np.asmatrix(ext()), ext(), ext(), f)),
        ("lo", lambda: k.ext4_eq_split(ext(), ext(1), 4, mat, ext(), f)),
        ("out", lambda: k.ext4_mle_fold(ext(2 * n), 4, ext(1), 4, mat, f)),
        ("out", lambda: k.ext4_map2_bcast(OP_ADD, ext(), 1, 4, ext(1), 0, 4, mat, f)),
        ("on0", lambda: g.fold_dense(*[ext() for _ in range(4)], half,
                                     *[ext(n // 2) for _ in range(3)], f)),
        ("on0", lambda: g.jagged_transition(
            np.array([n], np.int32), np.array([n // 2], np.int32), np.zeros((2, 1), np.int64),
            *[ext() for _ in range(4)], half, *[ext(n // 2) for _ in range(3)], f)),
    ]
    for name, call in cases:
        with pytest.raises(TypeError, match=f"argument `{name}` must be a plain NumPy array, "
                                            f"not a numpy.matrix"):
            call()
        assert (buf[4 * n:] == G).all() and (buf[:4 * n] == G).all(), name
    a = np.ma.masked_array(rng.integers(0, f.p, n, dtype=np.uint32))
    with pytest.raises(TypeError, match="`a` must be a plain NumPy array, not a "
                                        "numpy.ma.MaskedArray"):
        k.base_map2(OP_ADD, a, a.data, np.zeros(n, np.uint32), f)
    for launcher, shape in ((k.base_map2, (n,)), (k.ext4_map2, (n, 4))):
        with pytest.raises(TypeError, match="argument `b` must be"):
            launcher(OP_ADD, np.zeros(shape, np.uint32), None, np.zeros(shape, np.uint32), f)


def test_read_only_out_refused():
    # (CuPy arrays have no read-only flag; host arrays on the CPU and Numba paths do)
    k = kernels_for("cpu", "field")
    out = np.zeros(4, np.uint32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="`out`.*writeable"):
        k.base_map2(OP_ADD, np.zeros(4, np.uint32), np.zeros(4, np.uint32), out,
                    KoalaBear.params)
    with pytest.raises(ValueError, match="`out`.*writeable"):
        k.ext4_map2_bcast(OP_ADD, np.zeros(4, np.uint32), 1, 4, np.zeros(1, np.uint32), 0, 1,
                          out, KoalaBear.params)
    # a broadcast out is strided as well: its fault is that it cannot be
    # written (a user review: it was told to pass a contiguous copy)
    out = np.broadcast_to(np.zeros(1, np.uint32), (4,))
    with pytest.raises(ValueError, match="`out` must be writeable .*broadcast view"):
        k.base_map2(OP_ADD, np.zeros(4, np.uint32), np.zeros(4, np.uint32), out,
                    KoalaBear.params)


def test_encode_refuses_other_dtypes_and_overlap():
    F, k = KoalaBear, kernels_for("cpu", "field")
    # uint64 2**64 - 1 was read as -1 (the word of p - 1) under reduce
    for v in (np.array([2**64 - 1], np.uint64), np.array([1], np.int32),
              np.array([1.0])):
        with pytest.raises(TypeError, match="field_cpu.encode: argument `v`.*int64"):
            k.encode(v, np.empty(1, np.uint32), True, F.params)
    with pytest.raises(ValueError, match="`v`"):
        k.encode(np.zeros(3, np.int64), np.empty(2, np.uint32), True, F.params)
    buf = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="`out` overlaps argument `v`"):
        k.encode(buf[:2], buf.view(np.uint32)[:2], True, F.params)
    with pytest.raises(TypeError, match="field_cpu.decode: argument `out`"):
        k.decode(np.zeros(2, np.uint32), np.zeros(2, np.int64), F.params)
    # and the object layer, which passes int64 blocks, still takes uint64 values
    assert F.decode(F.encode(np.array([2**64 - 1], np.uint64), reduce=True)).tolist() == \
        [(2**64 - 1) % F.p]


@pytest.mark.cudasim
def test_numba_launchers_take_device_arrays():
    from numba import cuda
    k, F = kernels_for("numba", "field"), KoalaBear
    ref = Ref(F)
    a, b = rand_words(F, (4, 4), 1), rand_words(F, (4, 4), 2)
    da, db, do = cuda.to_device(a), cuda.to_device(b), cuda.device_array((16,), np.uint32)
    k.ext4_map2(OP_MUL, da, db, do, F.params)  # out flat, operands (n, 4)
    check_words(ref, do.copy_to_host().reshape(4, 4), ref.ext(OP_MUL, ref.dec(a), ref.dec(b)))
    with pytest.raises(ValueError, match="`out`.*C-contiguous"):
        k.ext4_map2(OP_MUL, da, db, cuda.device_array((4, 8), np.uint32)[:, :4], F.params)
    with pytest.raises(ValueError, match="`out` overlaps argument `a`"):
        k.ext4_map1(OP_INV, da, da, F.params)
    with pytest.raises(TypeError, match="`b`.*uint32"):
        k.ext4_map2(OP_MUL, da, cuda.to_device(b.astype(np.int64)), do, F.params)


@pytest.mark.cudasim
def test_numba_launchers_take_touching_device_slices():
    """Device arrays are compared by address range: an `out` ending exactly
    where an operand starts, or starting where it ends (adjacent slices of
    one device buffer), shares no memory and is accepted (found by mutation
    testing: the first refused with `<=` read as `<` passed every other
    test -- NumPy arrays never reach the address comparison)."""
    from numba import cuda
    k, F = kernels_for("numba", "field"), KoalaBear
    ref = Ref(F)
    a, b = rand_words(F, (8,), 1), rand_words(F, (8,), 2)
    want = ref.base(OP_MUL, ref.dec(a), ref.dec(b))
    for out_first in (True, False):
        host = np.concatenate([np.zeros(8, np.uint32), a] if out_first else
                              [a, np.zeros(8, np.uint32)])
        buf = cuda.to_device(host)
        out, da = (buf[:8], buf[8:]) if out_first else (buf[8:], buf[:8])
        k.base_map2(OP_MUL, da, cuda.to_device(b), out, F.params)
        check_words(ref, out.copy_to_host(), want, f"out first: {out_first}")
        np.testing.assert_array_equal(da.copy_to_host(), a)  # the operand is untouched


def one_odd_argument(k, F, make):
    """``(launcher, argument, call(odd))`` for every launcher of the field
    kernel module ``k``: ``call`` runs the launcher on small arrays
    ``make(numpy array)``, the named argument passed through ``odd`` too
    (one-element where the launcher takes one element: the form CuPy passes
    by value)."""
    def d(n, w=1):
        return make(np.ones((n, w) if w > 1 else n, np.uint32))
    f = F.params
    calls = [
        ("base_map1", "a", lambda o: k.base_map1(OP_NEG, o(d(1)), d(1), f)),
        ("base_map2", "b", lambda o: k.base_map2(OP_ADD, d(1), o(d(1)), d(1), f)),
        ("ext4_map1", "out", lambda o: k.ext4_map1(OP_SQUARE, d(1, 4), o(d(1, 4)), f)),
        ("ext4_map2", "a", lambda o: k.ext4_map2(OP_MUL, o(d(1, 4)), d(1, 4), d(1, 4), f)),
        ("base_map2_bcast", "b", lambda o: k.base_map2_bcast(OP_MUL, d(4), 1, o(d(1)), 0,
                                                             d(4), f)),
        ("ext4_map2_bcast", "b", lambda o: k.ext4_map2_bcast(OP_MUL, d(4, 4), 1, 4, o(d(1)), 0,
                                                             1, d(4, 4), f)),
        ("base_pow", "a", lambda o: k.base_pow(o(d(1)), 0, 3, 2, d(1), f)),
        ("ext4_pow", "out", lambda o: k.ext4_pow(d(1, 4), 0, 3, 2, o(d(1, 4)), f)),
        ("base_batch_inv", "a", lambda o: k.base_batch_inv(o(d(1)), d(1), f)),
        ("base_mle_fold", "r", lambda o: k.base_mle_fold(d(8), o(d(1)), d(4), f)),
        ("ext4_mle_fold", "r", lambda o: k.ext4_mle_fold(d(8, 4), 4, o(d(1)), 1, d(4, 4), f)),
        ("base_eq_split", "r", lambda o: k.base_eq_split(d(4), o(d(1)), d(4), d(4), f)),
        ("ext4_eq_split", "hi", lambda o: k.ext4_eq_split(d(4, 4), d(1), 1, d(4, 4),
                                                          o(d(4, 4)), f)),
        ("base_first_zero", "a", lambda o: k.base_first_zero(o(d(3)), f)),
        ("ext4_first_zero", "a", lambda o: k.ext4_first_zero(o(d(3, 4)), f)),
        ("encode", "v", lambda o: k.encode(o(make(np.zeros(2, np.int64))), d(2), True, f)),
        ("decode", "out", lambda o: k.decode(d(2), o(d(2)), f)),
    ]
    assert sorted(c[0] for c in calls) == sorted(k.__all__)  # every launcher
    return calls


@pytest.mark.cudasim
@pytest.mark.parametrize("device", ["numba", "cupy-emulated"])
def test_cpu_launchers_refuse_device_arrays(device):
    """A device array among a CPU launcher's arrays is a TypeError naming it:
    Numba could not type it and failed with its own error (not a TypeError),
    naming the kernel's argument position."""
    from numba import cuda
    import cuda_emu
    to_device = cuda.to_device if device == "numba" else cuda_emu.EmuArray
    k = kernels_for("cpu", "field")
    for name, arg, call in one_odd_argument(k, KoalaBear, np.asarray):
        call(lambda x: x)  # all NumPy: runs
        with pytest.raises(TypeError, match=rf"field_cpu\.{name}: argument `{arg}` must be a "
                                            rf"NumPy array .*copy it to the host"):
            call(to_device)
    g = kernels_for("cpu", "gkr")
    ins = [np.ones(4, np.uint32) for _ in range(4)]
    outs = [np.zeros(2, np.uint32) for _ in range(4)]
    with pytest.raises(TypeError, match=r"gkr_cpu\.fold_dense: argument `od0` must be a NumPy"):
        g.fold_dense(*ins, *outs[:2], to_device(outs[2]), outs[3], KoalaBear.params)
    with pytest.raises(TypeError, match=r"gkr_cpu\.jagged_transition: argument `orc` must be"):
        g.jagged_transition(np.array([4], np.int32), to_device(np.array([2], np.int32)),
                            np.zeros((2, 1), np.int64), *ins, *outs, KoalaBear.params)
    with pytest.raises(TypeError, match=r"gkr_cpu\.pyramid_dense: argument `layers\[1\]\[0\]`"):
        g.pyramid_dense(ins, [outs, [to_device(np.zeros(1, np.uint32))]
                              + [np.zeros(1, np.uint32) for _ in range(3)]], KoalaBear.params)
    assert all((o == 0).all() for o in outs)


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launchers_say_their_contract(name, k):
    k, backend = k
    doc = getattr(k, name).__doc__ or ""
    if backend == "cpu":
        ops = {"map1": ["NEG", "SQUARE", "INV"], "map2": ["ADD", "SUB", "MUL"]}
        for kind, names in ops.items():
            if kind in name:
                assert all(o in doc for o in names), (name, doc)
        assert ("(n,)" in doc) == name.startswith("base") or "bcast" in name, (name, doc)
        if name.startswith("ext4"):
            assert "(4 n,)" in doc and "(n, 4)" in doc, (name, doc)
    else:
        assert f"field_cpu.{name}" in doc, (name, doc)


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_bcast_rows_whose_last_task_is_one_element(ext):
    """Several rows of CPU_LANE_RUN + 1 elements: each row's last task holds
    one element (a task count per row rounded down left it unwritten; from
    mutation testing), against big ints."""
    F, k = KoalaBear, kernels_for("cpu", "field")
    ref, f, n_rows, run = Ref(F), KoalaBear.params, 2, CPU_LANE_RUN + 1
    n = n_rows * run
    degs = [(4, 4), (4, 1), (1, 4)] if ext else [(1, 1)]
    for da, db in degs:
        wa = rand_words(F, (n, 4) if da == 4 else (n,), 31)
        wb = rand_words(F, (n, 4) if db == 4 else (n,), 32)
        for op in (OP_SUB, OP_MUL):
            # (steps, rows): a runs along, b one per row; the reverse; both along
            for sa, sb, ra, rb in ((1, 0, run, 1), (0, 1, 1, run), (1, 1, run, 0)):
                ja, jb = bcast_index(n, run, sa, ra), bcast_index(n, run, sb, rb)
                x, y = ref.dec(wa)[ja], ref.dec(wb)[jb]
                out = np.full(4 * n if ext else n, 0xFFFFFFFF, np.uint32)
                if ext:
                    k.ext4_map2_bcast(op, wa, sa, da, wb, sb, db, out, f, run=run, a_row=ra,
                                      b_row=rb)
                    x, y = (np.stack([v] + [v * 0] * 3, axis=1) if v.ndim == 1 else v
                            for v in (x, y))
                    got, want = out.reshape(n, 4), ref.ext(op, x, y)
                else:
                    k.base_map2_bcast(op, wa, sa, wb, sb, out, f, run=run, a_row=ra, b_row=rb)
                    got, want = out, ref.base(op, x, y)
                check_words(ref, got, want, f"deg {da}{db} op {op} steps {sa}{sb} rows {ra} {rb}")


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_cpu_sum_rows_match_big_ints_and_refuse_what_they_cannot_add(F):
    """``base_sum_rows`` / ``ext4_sum_rows`` (the CPU launchers of ``F.sum``):
    rows of any words added exactly mod p -- the largest words over several
    partial-sum chunks, rows run in parallel -- and bad arguments refused
    by name before anything is written."""
    from zorch_nb.kernels.launch_config import CPU_SUM_CHUNK
    k, f = kernels_for("cpu", "field"), F.params
    rng = np.random.default_rng(11)
    for rows, run in ((1, 0), (3, 1), (2, 2 * CPU_SUM_CHUNK + 5), (5, 4000), (1, 3 * 2**14)):
        for deg, launch in ((1, k.base_sum_rows), (4, k.ext4_sum_rows)):
            a = rng.integers(0, 2**32, rows * run * deg, dtype=np.uint64).astype(np.uint32)
            if run > CPU_SUM_CHUNK:
                a[: deg * (CPU_SUM_CHUNK + 3)] = 2**32 - 1  # a chunk and more at the top
            before = a.copy()
            out = np.full(rows * deg, 7, np.uint32)
            launch(a, rows, out if deg == 1 else out.reshape(rows, 4), f)
            words = a.astype(object).reshape(rows, run, deg) % F.p
            want = words.sum(axis=1) % F.p if run else np.zeros((rows, deg), object)
            assert out.astype(object).reshape(rows, deg).tolist() == want.tolist(), \
                (rows, run, deg)
            assert (out < F.p).all()  # canonical words
            np.testing.assert_array_equal(a, before)
    a, out = np.ones(12, np.uint32), np.zeros(3, np.uint32)
    k.base_sum_rows(np.zeros(0, np.uint32), 0, np.zeros(0, np.uint32), f)  # no rows
    bad = [  # (error, message, call)
        (ValueError, r"`a` \(12 words\) must split into `rows` = 5",
         lambda: k.base_sum_rows(a, 5, np.zeros(5, np.uint32), f)),
        (ValueError, r"`a` \(12 words\) must split into `rows` = 0",
         lambda: k.base_sum_rows(a, 0, np.zeros(0, np.uint32), f)),
        (ValueError, r"`a` \(12 words\) must split into `rows` = 2 equal rows of whole 4-word",
         lambda: k.ext4_sum_rows(a, 2, np.zeros((2, 4), np.uint32), f)),
        (ValueError, r"`out` must hold one element per row \(3\), not 4",
         lambda: k.base_sum_rows(a, 3, np.zeros(4, np.uint32), f)),
        (ValueError, r"`a` must be flat words",
         lambda: k.base_sum_rows(a.reshape(3, 4), 3, out, f)),
        (TypeError, r"`a` must have dtype uint32",
         lambda: k.base_sum_rows(a.astype(np.int64), 3, out, f)),
        (TypeError, r"`rows` must be an integer",
         lambda: k.base_sum_rows(a, 3.0, out, f)),
        (ValueError, r"`rows` must be >= 0",
         lambda: k.base_sum_rows(a, -3, out, f)),
        (ValueError, r"`out` must be writeable",
         lambda: k.base_sum_rows(a, 3, np.broadcast_to(np.uint32(0), (3,)), f)),
        (ValueError, r"`out`.*`a`",
         lambda: k.base_sum_rows(a, 3, a[:3], f)),
        (TypeError, r"`a` must be a NumPy array",
         lambda: k.base_sum_rows(a.tolist(), 3, out, f)),
    ]
    for exc, match, call in bad:
        with pytest.raises(exc, match=r"^field_cpu\.(base|ext4)_sum_rows: argument " + match):
            call()
    assert (a == 1).all() and (out == 0).all()
