"""The CPU inverses run Montgomery's batch trick (base elements, and the
norms of extension elements) in chunks, each as BATCH_INV_LANES chains side
by side; checked here against the elementwise Fermat inverse of
kernels/monty.py and Python big ints, across chunk boundaries and short
last rows of the chains, with zeros (the trick must keep them from spoiling
their chain: at the kernel level a zero inverts to 0, as Fermat gives) and
words >= p."""
import numpy as np
import pytest
from numba import njit

import naive
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels import field_cpu
from zorch_nb.kernels.field_params import kernel_words
from zorch_nb.kernels.launch_config import BATCH_INV_CHUNK, BATCH_INV_LANES, CPU_LANE_RUN
from zorch_nb.kernels.monty import (OP_INV, OP_SQUARE, base_map1, base_pow, ext4_inv, ext4_mul,
                                    ext4_pow)

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
SIZES = [1, 7, BATCH_INV_LANES - 1, BATCH_INV_LANES + 1, 5 * BATCH_INV_LANES + 7,
         BATCH_INV_CHUNK - 1, BATCH_INV_CHUNK, BATCH_INV_CHUNK + 1, 2 * BATCH_INV_CHUNK + 3]


@njit
def _fermat_each(a, out, p, mu, one):
    for i in range(a.shape[0]):
        out[i] = base_map1(OP_INV, a[i], p, mu, one)


@njit
def _ext_fermat_each(a, out, p, mu, wm, one):
    for i in range(a.shape[0]):
        x = [np.uint32(a[i, k] % p) for k in range(4)]
        if x[0] == 0 and x[1] == 0 and x[2] == 0 and x[3] == 0:
            for k in range(4):
                out[i, k] = 0
            continue
        c = ext4_inv(x[0], x[1], x[2], x[3], p, mu, wm, one)
        for k in range(4):
            out[i, k] = c[k]


def words_with_zeros(F, shape, seed):
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    flat = w.reshape(shape[0], -1)
    zero_rows = rng.random(shape[0]) < 0.02
    flat[zero_rows] = 0
    flat[rng.random(shape[0]) < 0.01] = F.p  # also zero (read mod p)
    flat[-1] = 0  # the last element of the last chunk
    return w


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("n", SIZES)
def test_base_inverse_kernel_equals_fermat_each(F, n):
    p, mu, _, one = kernel_words(F.params)
    a = words_with_zeros(F, (n,), n)
    a0 = a.copy()
    want = np.empty_like(a)
    _fermat_each(a, want, p, mu, one)
    for run in (lambda o: field_cpu.base_map1(OP_INV, a, o, F.params),
                lambda o: field_cpu.base_batch_inv(a, o, F.params)):
        got = np.empty_like(a)
        run(got)
        np.testing.assert_array_equal(got, want)
    assert (a == a0).all()
    some = np.flatnonzero(a % F.p)[:20]  # and the big-int inverse of a few
    for i in some:
        v = naive.dec(int(a[i]) % F.p, F.p)
        assert naive.dec(int(want[i]), F.p) == pow(v, F.p - 2, F.p)


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("pattern", ["all", "one-chain", "every-other-row", "tail"])
def test_inverse_kernels_with_zero_chains(F, pattern):
    """Zeros laid out along the chains: every element, every element of chain
    3 (its product stays one), whole rows, and the short last row's."""
    n = BATCH_INV_CHUNK + 3 * BATCH_INV_LANES + 5  # a second chunk with a short row
    a = words_with_zeros(F, (n, 4), 11)
    rows = np.arange(n) % BATCH_INV_CHUNK // BATCH_INV_LANES
    lane = np.arange(n) % BATCH_INV_CHUNK % BATCH_INV_LANES
    zero = {"all": np.ones(n, bool), "one-chain": lane == 3, "every-other-row": rows % 2 == 0,
            "tail": np.arange(n) >= n - 5}[pattern]
    a[zero] = 0
    a[zero & (lane % 2 == 1)] = F.p  # zero too, read mod p
    for G, x in ((F, a[:, 0]), (F.ext, a)):
        p, mu, wm, one = kernel_words(G.params)
        x = np.ascontiguousarray(x)
        want = np.empty_like(x)
        if G.degree == 1:
            _fermat_each(x, want, p, mu, one)
        else:
            _ext_fermat_each(x, want, p, mu, wm, one)
        got = np.empty_like(x)
        (field_cpu.ext4_map1 if G.degree == 4 else field_cpu.base_map1)(OP_INV, x, got, G.params)
        np.testing.assert_array_equal(got, want)
        assert not got[zero].any()


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("n", SIZES)
def test_extension_inverse_kernel_equals_fermat_each(F, n):
    p, mu, wm, one = kernel_words(F.ext.params)
    a = words_with_zeros(F, (n, 4), n + 1)
    a0 = a.copy()
    want = np.empty_like(a)
    _ext_fermat_each(a, want, p, mu, wm, one)
    got = np.empty_like(a)
    field_cpu.ext4_map1(OP_INV, a, got, F.ext.params)
    np.testing.assert_array_equal(got, want)
    assert (a == a0).all()
    for i in np.flatnonzero((a % F.p).any(axis=1))[:8]:  # x * x^-1 = 1 in big ints
        x = [naive.dec(int(v) % F.p, F.p) for v in a[i]]
        y = [naive.dec(int(v), F.p) for v in got[i]]
        assert naive.ext_mul(x, y, F.p, F.W) == [1, 0, 0, 0]


def _one_block_inverses(G, a):
    """``a``'s inverses by the Numba-CUDA batched kernel of ``G`` on one block
    of 4 threads (over a dirty output), and by the CPU kernel."""
    from zorch_nb.kernels import field_cuda_numba as fcn
    p, mu, wm, one = kernel_words(G.params)
    want = np.empty_like(a)
    (field_cpu.base_map1 if G.degree == 1 else field_cpu.ext4_map1)(OP_INV, a, want, G.params)
    got = np.full_like(a, 7)
    if G.degree == 1:
        fcn._base_inv_batched_kernel[1, 4](a, p, mu, one, got)
    else:
        fcn._ext4_inv_batched_kernel[1, 4](a, p, mu, wm, one, got)
    return got, want


@pytest.mark.cudasim
@pytest.mark.parametrize("F", FIELDS)
def test_numba_cuda_batched_inverse_kernels(F):
    """The Numba-CUDA inverses run Montgomery's trick per thread over
    GPU_INV_BATCH_* elements strided by the grid (as the CUDA C kernels,
    tested in test_field_cupy_emulated.py); with one block of 4 threads each
    walks several batches, the last ones part empty, over zeros (0 and p).
    Under the simulator: small inputs."""
    from zorch_nb.kernels import field_cuda_numba as fcn
    for G in (F, F.ext):
        for n in (1, 3, 70):
            a = words_with_zeros(F, (n,) if G is F else (n, 4), n + 7)
            a[n // 2] = 0
            got, want = _one_block_inverses(G, a)
            np.testing.assert_array_equal(got, want, err_msg=f"degree {G.degree}, n={n}")
        # and through the launchers (their own grid)
        a = words_with_zeros(F, (9,) if G is F else (9, 4), 5)
        got = np.full_like(a, 7)
        (fcn.base_map1 if G is F else fcn.ext4_map1)(OP_INV, a, got, G.params)
        want = np.empty_like(a)
        (field_cpu.base_map1 if G is F else field_cpu.ext4_map1)(OP_INV, a, want, G.params)
        np.testing.assert_array_equal(got, want)


@pytest.mark.cudasim
@pytest.mark.parametrize("F", FIELDS)
def test_numba_cuda_batched_inverse_reads_words_mod_p(F):
    """A word that is a nonzero multiple of p (p, 2 p, ... below 2**32) is the
    zero element: its thread's batch must set it aside as for the word 0.
    Taken as a nonzero factor it turned the batch's product to 0 and every
    other inverse of that batch with it (random words are such multiples
    with probability ~1e-9; the zeros of the test above are rarely p).  One
    block of 4 threads, 40 elements: batches of three threads hold one
    beside nonzero elements."""
    multiples = [k * F.p for k in range(1, 2**32 // F.p + 1)]
    for G in (F, F.ext):
        rng = np.random.default_rng(9)
        shape = (40,) if G is F else (40, 4)
        a = rng.integers(1, F.p, size=shape, dtype=np.int64).astype(np.uint32)
        zeros = [1, 6, 19, 35]  # (thread, batch slot): (1, 0), (2, 1), (3, 4), (3, 0)
        for j, i in enumerate(zeros):
            a[i] = multiples[j % len(multiples)]
        got, want = _one_block_inverses(G, a)
        assert not want[zeros].any()
        np.testing.assert_array_equal(got, want, err_msg=f"degree {G.degree}")


@pytest.mark.cudasim
@pytest.mark.parametrize("F", FIELDS)
def test_numba_cuda_first_zero_finds_every_base_tail_element(F):
    """The last n % 4 base elements are scanned one to a thread after the
    groups of four: a zero at each of them alone is found, the first of the
    tail (index 4 (n // 4)) included, by the kernel on a small grid and by
    the launcher."""
    from zorch_nb.kernels import field_cuda_numba as fcn
    p = kernel_words(F.params)[0]
    rng = np.random.default_rng(5)
    for n in (201, 202, 203):
        a = rng.integers(1, F.p, size=n, dtype=np.int64).astype(np.uint32)
        assert fcn.base_first_zero(a, F.params) == -1
        for i in range(4 * (n // 4), n):
            for zero in (0, F.p):
                b = a.copy()
                b[i] = zero
                first = np.array([n], np.uint64)
                fcn._first_zero_kernel[1, 32](b, np.int32(1), p, first)
                assert first[0] == i, (n, i)
                assert fcn.base_first_zero(b, F.params) == i, (n, i)


@pytest.mark.cudasim
@pytest.mark.parametrize("F", FIELDS)
def test_numba_cuda_first_zero_kernel_on_a_small_grid(F):
    """The Numba-CUDA zero scan (as the CUDA C one, tested in
    test_field_cupy_emulated.py) with one block of 32 threads over 203
    elements: several threads find zeros and the least index wins (an atomic
    minimum); the least of a base group's four; the base tail."""
    from zorch_nb.kernels import field_cuda_numba as fcn
    p = kernel_words(F.params)[0]
    rng = np.random.default_rng(4)
    n = 203
    for deg in (1, 4):
        a = rng.integers(1, F.p, size=(n, deg), dtype=np.int64).astype(np.uint32)
        for zeros, want in (((), n), ((201,), 201), ((169, 74, 73, 101, 197), 73),
                            ((33,), 33)):
            for i in zeros:
                a[i] = [0, F.p, 2 * F.p, 0][:deg]
            first = np.array([n], np.uint64)
            fcn._first_zero_kernel[1, 32](a.reshape(-1), np.int32(deg), p, first)
            assert first[0] == want, (deg, zeros)


@pytest.mark.parametrize("F", FIELDS)
def test_first_zero_scans(F):
    """The inverses' zero check on the CPU: the index of the first element
    whose words are all 0 mod p (0, p, 2p), in the first, a middle or the
    last chunk of the parallel count, or -1; an extension element with one
    nonzero word is not zero."""
    from zorch_nb.kernels.launch_config import ZERO_SCAN_CHUNK
    n = 2 * ZERO_SCAN_CHUNK + 5
    rng = np.random.default_rng(1)
    for deg, scan in ((1, field_cpu.base_first_zero), (4, field_cpu.ext4_first_zero)):
        a = rng.integers(1, F.p, size=(n, 4) if deg == 4 else n, dtype=np.int64).astype(np.uint32)
        assert scan(a, F.params) == -1
        assert scan(a[:0], F.params) == -1
        for where in (0, ZERO_SCAN_CHUNK - 1, ZERO_SCAN_CHUNK + 7, n - 1):
            b = a.copy()
            b[where] = F.p if deg == 1 else [0, F.p, 2 * F.p, 0]
            b[min(n - 1, where + 3)] = 0  # a later zero does not count
            assert scan(b, F.params) == where, (deg, where)
            if deg == 4:
                b[where, 2] = 1  # one nonzero coefficient: not zero
                assert scan(b, F.params) == min(n - 1, where + 3) if where + 3 < n else -1
                assert scan(b.reshape(-1), F.params) == scan(b, F.params)  # flat words


@pytest.mark.parametrize("F", FIELDS)
def test_extension_square_kernel_is_the_product(F):
    p, mu, wm, _ = kernel_words(F.ext.params)
    a = words_with_zeros(F, (1001, 4), 3)
    got = np.empty_like(a)
    field_cpu.ext4_map1(OP_SQUARE, a, got, F.ext.params)
    for i in range(0, 1001, 37):
        x = [np.uint32(v % p) for v in a[i]]
        assert list(ext4_mul(*x, *x, p, mu, wm)) == got[i].tolist()


def _big_pow(F, words, e):
    """The Montgomery word(s) of ``words ** e`` (one base word or four
    extension words, any uint32, read mod p), in Python big ints."""
    v = [naive.dec(int(w) % F.p, F.p) for w in np.atleast_1d(words)]
    if len(v) == 4:
        return [naive.enc(c, F.p) for c in naive.ext_pow(v, e, F.p, F.W)]
    return naive.enc(pow(v[0], e, F.p), F.p)


@njit
def _pow_each(a, e_hi, e_lo, nbits, out, p, mu, wm, one):
    # the per-element square and multiply of kernels/monty.py
    for i in range(a.shape[0]):
        if a.ndim == 1:
            out[i] = base_pow(a[i], e_hi, e_lo, nbits, p, mu, one)
        else:
            c = ext4_pow(a[i, 0], a[i, 1], a[i, 2], a[i, 3], e_hi, e_lo, nbits, p, mu, wm, one)
            for k in range(4):
                out[i, k] = c[k]


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_pow_kernel_equals_square_and_multiply_each(F, ext):
    """The CPU powers run square and multiply over runs of elements, one
    vectorized product per step; against the per-element loop of monty.py,
    across run boundaries (CPU_LANE_RUN), words >= p, zero exponents and
    128-bit ones."""
    from zorch_nb.kernels.launch_config import CPU_LANE_RUN
    G = F.ext if ext else F
    p, mu, wm, one = kernel_words(G.params)
    n = 2 * CPU_LANE_RUN + 3
    a = words_with_zeros(F, (n, 4) if ext else (n,), 5)
    a0 = a.copy()
    for e, extra in ((0, 0), (0, 1), (1, 0), (2, 0), (7, 0), (7, 5), (2**64 + 3, 0),
                     (F.p**4 - 2, 0), (2**127 + 2**64 - 1, 0), (5, 70)):
        # e < 2**nbits, nbits its bit length plus `extra` (leading zero bits)
        e_hi, e_lo = np.uint64(e >> 64), np.uint64(e & (2**64 - 1))
        nbits = np.int64(e.bit_length() + extra)
        want, got = np.empty_like(a), np.empty_like(a)
        _pow_each(a, e_hi, e_lo, nbits, want, p, mu, wm, one)
        (field_cpu.ext4_pow if ext else field_cpu.base_pow)(a, e_hi, e_lo, nbits, got, G.params)
        np.testing.assert_array_equal(got, want, err_msg=str(e))
        # and big ints, on each side of every run boundary
        for i in (0, CPU_LANE_RUN - 1, CPU_LANE_RUN, 2 * CPU_LANE_RUN, n - 1):
            assert got[i].tolist() == _big_pow(F, a[i], e), (e, i)
    assert (a == a0).all()


@pytest.mark.parametrize("F", FIELDS)
@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_scalar_pow_reads_bits_past_128_as_zero(F, ext):
    """monty.base_pow / ext4_pow called with nbits > 128 (the launchers cap it;
    user code calling the scalar functions need not): bit k >= 128 shifted a
    uint64 by >= 64, which LLVM leaves undefined -- x86 masked the count and
    2**64 + 5 came out wrong at nbits = 129.  Leading zero bits change
    nothing."""
    G = F.ext if ext else F
    p, mu, wm, one = kernel_words(G.params)
    a = words_with_zeros(F, (64, 4) if ext else (64,), 9)
    for e in (2**64 + 5, 2**127 + 3, 12345):
        e_hi, e_lo = np.uint64(e >> 64), np.uint64(e & (2**64 - 1))
        want = np.empty_like(a)
        _pow_each(a, e_hi, e_lo, np.int64(e.bit_length()), want, p, mu, wm, one)
        for nbits in (129, 130, 192):
            got = np.empty_like(a)
            _pow_each(a, e_hi, e_lo, np.int64(nbits), got, p, mu, wm, one)
            np.testing.assert_array_equal(got, want, err_msg=f"e={e}, nbits={nbits}")
        for i in range(0, 64, 9):  # big ints
            assert got[i].tolist() == _big_pow(F, a[i], e), (e, i)


@pytest.mark.parametrize("F", FIELDS)
def test_extension_pow_zero_writes_every_word(F):
    """a ** 0 is (1, 0, 0, 0) whatever out held before, across a run
    boundary: the kernel writes the three zero coefficients too (the test
    above caught their omission only through what np.empty_like happened to
    hold; from mutation testing)."""
    n = CPU_LANE_RUN + 3
    a = words_with_zeros(F, (n, 4), 7)
    one = [naive.enc(1, F.p), 0, 0, 0]
    for nbits in (0, 3):  # e = 0, with and without leading zero bits
        out = np.full((n, 4), 0xFFFFFFFF, np.uint32)
        field_cpu.ext4_pow(a, np.uint64(0), np.uint64(0), np.int64(nbits), out, F.ext.params)
        assert (out == np.array(one, np.uint32)).all(), nbits
