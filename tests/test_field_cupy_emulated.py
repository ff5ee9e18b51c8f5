"""The CuPy field launchers (``kernels/field_cupy.py``) over the CUDA C field
kernels of ``kernels/cuda/field_ops.cu``, run on the host under the SIMT
emulation of ``cuda_emu.py``; every result must equal the Numba CPU kernels
byte for byte (every op, both fields, base and extension, edge words)."""
import numpy as np
import pytest

import cuda_emu
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels import field_cpu
from zorch_nb.kernels.monty import OP_ADD, OP_INV, OP_MUL, OP_NEG, OP_SQUARE, OP_SUB
from test_kernel_layer import one_odd_argument


@pytest.fixture
def field_cupy(monkeypatch):
    return cuda_emu.emulate(monkeypatch, "field")[0]


def _operands(F, E, n, seed):
    """Random operands with edge words (1, 2, p - 1, R mod p, 0) in their first rows."""
    a, b = E.random(n, seed=seed), E.random(n, seed=seed + 1)
    col = lambda x: x if x.ndim == 1 else x[:, 0]  # noqa: E731
    for i, v in enumerate([1, 2, F.p - 1, 2**32 % F.p]):
        col(a)[i] = F.encode(v)
        col(b)[i] = F.encode(v)
    col(a)[4] = 0  # a zero word in `a` only: the unary ops (inverse) run on `b`
    return a, b


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_every_field_op_matches_the_cpu(field_cupy, F):
    for E in (F, F.ext):
        n = 700  # three blocks of 256 threads, the last one partial
        a, b = _operands(F, E, n, seed=4)
        dev = lambda x: cuda_emu.EmuArray(x.copy())  # noqa: E731
        kind = "base" if E is F else "ext4"
        for op in (OP_ADD, OP_SUB, OP_MUL):
            want = np.empty_like(a)
            getattr(field_cpu, f"{kind}_map2")(op, a, b, want, F.params)
            got = dev(np.zeros_like(a))
            getattr(field_cupy, f"{kind}_map2")(op, dev(a), dev(b), got, F.params)
            np.testing.assert_array_equal(got.get(), want, err_msg=f"{kind} op {op}")
        for op in (OP_NEG, OP_SQUARE, OP_INV):
            x = b  # nonzero everywhere
            want = np.empty_like(x)
            getattr(field_cpu, f"{kind}_map1")(op, x, want, F.params)
            got = dev(np.zeros_like(x))
            getattr(field_cupy, f"{kind}_map1")(op, dev(x), got, F.params)
            np.testing.assert_array_equal(got.get(), want, err_msg=f"{kind} op {op}")
        for e in (0, 1, 12345, 2**64 + 3):  # a 128-bit exponent in two limbs
            e_hi, e_lo, nbits = e >> 64, e & (2**64 - 1), max(1, e.bit_length())
            want = np.empty_like(a)
            getattr(field_cpu, f"{kind}_pow")(a, e_hi, e_lo, nbits, want, F.params)
            got = dev(np.zeros_like(a))
            getattr(field_cupy, f"{kind}_pow")(dev(a), e_hi, e_lo, nbits, got, F.params)
            np.testing.assert_array_equal(got.get(), want, err_msg=f"{kind} pow {e}")
        # the fused MLE fold: r the edge word p - 1, and an extension r
        for r in ([a[2:3]] if E is F else [a[2:3, 0], b[0]]):
            r_deg = r.size
            want = np.empty((n // 2,) + a.shape[1:], np.uint32)
            got = dev(np.zeros_like(want))
            if E is F:
                field_cpu.base_mle_fold(a, r, want, F.params)
                field_cupy.base_mle_fold(dev(a), dev(r), got, F.params)
            else:
                field_cpu.ext4_mle_fold(a, 4, r.reshape(-1), r_deg, want, F.params)
                field_cupy.ext4_mle_fold(dev(a), 4, dev(r.reshape(-1)), r_deg, got, F.params)
            np.testing.assert_array_equal(got.get(), want, err_msg=f"{kind} mle_fold {r_deg}")
            want_lo, want_hi = np.empty_like(a), np.empty_like(a)
            lo, hi = dev(a), dev(np.zeros_like(a))
            if E is F:
                field_cpu.base_eq_split(a, r, want_lo, want_hi, F.params)
                field_cupy.base_eq_split(lo, dev(r), lo, hi, F.params)
            else:
                field_cpu.ext4_eq_split(a, r.reshape(-1), r_deg, want_lo, want_hi, F.params)
                field_cupy.ext4_eq_split(lo, dev(r.reshape(-1)), r_deg, lo, hi, F.params)
            np.testing.assert_array_equal(lo.get(), want_lo, err_msg=f"{kind} eq_split lo")
            np.testing.assert_array_equal(hi.get(), want_hi, err_msg=f"{kind} eq_split hi")


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
@pytest.mark.parametrize("grid", ["launcher", "small"])
def test_batched_inverse_kernels(field_cupy, F, grid):
    """The GPU inverses run Montgomery's trick per thread over GPU_INV_BATCH_*
    elements strided by the grid: zeros (0 and p) stand aside and invert to 0,
    slots past n are empty, and with a small grid each thread walks several
    batches (grid-stride); every word must equal the CPU kernels' (checked
    against Fermat each and big ints in test_field_batch_inv.py)."""
    from test_field_batch_inv import words_with_zeros
    dev = lambda x: cuda_emu.EmuArray(x.copy())  # noqa: E731
    for n in (1, 5, 300, 1001):
        for G, name in ((F, "zorch_base_inv_batched"), (F.ext, "zorch_ext4_inv_batched")):
            a = words_with_zeros(F, (n,) if G is F else (n, 4), n)
            a[n // 2] = 0  # the last element is zero too (words_with_zeros)
            want = np.empty_like(a)
            (field_cpu.base_map1 if G is F else field_cpu.ext4_map1)(OP_INV, a, want, G.params)
            got = dev(np.full_like(a, 7))
            if grid == "launcher":
                (field_cupy.base_map1 if G is F else field_cupy.ext4_map1)(
                    OP_INV, dev(a), got, G.params)
            else:  # 2 blocks of 32 threads: 64 threads, several batches each
                field_cupy._kernel(G.params, name)((2,), (32,), (dev(a), got, np.uint64(n)))
            np.testing.assert_array_equal(got.get(), want, err_msg=f"{name} n={n} {grid}")
    b = words_with_zeros(F, (300,), 3)
    got = dev(np.full_like(b, 7))
    field_cupy.base_batch_inv(dev(b), got, F.params)
    want = np.empty_like(b)
    field_cpu.base_batch_inv(b, want, F.params)
    np.testing.assert_array_equal(got.get(), want)


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_first_zero_kernel_on_a_small_grid(field_cupy, F):
    """The zero scan with one block of 32 threads over 303 elements: each
    thread walks several groups of four words (grid-stride) and stops at its
    first zero; the least index among the threads' wins (an atomic minimum),
    whichever thread runs first; the least of a base group's zeros; the
    base tail past the last group; words at every alignment (the 16-byte
    path and the 4-byte one)."""
    rng = np.random.default_rng(3)
    n = 303
    for deg in (1, 4):
        a = rng.integers(1, F.p, size=(n, deg), dtype=np.int64).astype(np.uint32)
        zero = [0, F.p, 2 * F.p, 0][:deg]  # (words read mod p)
        # none; the tail only (base); then zeros for several threads, two in
        # base group 18 (words 72-75); then the least
        for zeros, want in (((), -1), ((301,), 301), ((169, 74, 73, 101, 197), 73),
                            ((33,), 33)):
            for i in zeros:
                a[i] = zero
            for k in (0, 1, 2, 3):
                first = cuda_emu.EmuArray(np.array([n], np.uint64))
                field_cupy._kernel(F.params, "zorch_first_zero")(
                    (1,), (32,), (cuda_emu.EmuArray(_word_offset(a.reshape(-1), k)),
                                  np.int32(deg), first, np.uint64(n)))
                assert int(first.get()[0]) == (n if want < 0 else want), (deg, k, zeros)


def _word_offset(x, k):
    """A copy of ``x`` starting ``k`` words past a 16-byte boundary (as an offset
    view of a larger device buffer may)."""
    buf = np.zeros(x.size + 8, np.uint32)
    start = (k - buf.ctypes.data // 4) % 4
    view = buf[start:start + x.size].reshape(x.shape)
    view[...] = x
    assert view.ctypes.data % 16 == 4 * k
    return view


@pytest.mark.parametrize("offsets", [(0, 0, 0), (1, 0, 0), (0, 2, 0), (0, 0, 3), (3, 1, 2)],
                         ids=lambda o: "".join(map(str, o)))
def test_extension_kernels_at_any_word_alignment(field_cupy, offsets):
    """The extension kernels move 16-byte elements in one access only where every
    array is 16-byte aligned; views at 4, 8 or 12 bytes past a boundary take the
    4-byte path and give the same words.  (In the sanitized CI stage the
    emulated uint4 is 16-byte aligned, as CUDA's is, so a vector access on such
    a view would be reported.)"""
    F = KoalaBear
    E, f, n = F.ext, F.params, 300
    a, b = _operands(F, E, n, seed=11)
    s = F.random(n, seed=13)
    oa, ob, oo = offsets
    dev = lambda x, k: cuda_emu.EmuArray(_word_offset(x, k))  # noqa: E731

    def check(launch, want, shape, what):
        got = dev(np.zeros(shape, np.uint32), oo)
        launch(got)
        np.testing.assert_array_equal(got.get(), want, err_msg=f"{what} at {offsets}")

    for op in (OP_ADD, OP_SUB, OP_MUL):
        want = np.empty_like(a)
        field_cpu.ext4_map2(op, a, b, want, f)
        check(lambda o: field_cupy.ext4_map2(op, dev(a, oa), dev(b, ob), o, f), want, a.shape,
              f"ext4_map2 op {op}")
        for a_step, a_deg, x in ((1, 4, a), (0, 4, a[:1]), (1, 1, s)):  # elementwise, one, base
            want = np.empty(4 * n, np.uint32)
            field_cpu.ext4_map2_bcast(op, x.reshape(-1), a_step, a_deg, b.reshape(-1), 1, 4,
                                      want, f)
            check(lambda o: field_cupy.ext4_map2_bcast(
                op, dev(x.reshape(-1), oa), a_step, a_deg, dev(b.reshape(-1), ob), 1, 4, o, f),
                want, (4 * n,), f"ext4_map2_bcast op {op} a_step {a_step} a_deg {a_deg}")
    for op in (OP_NEG, OP_SQUARE, OP_INV):
        want = np.empty_like(b)
        field_cpu.ext4_map1(op, b, want, f)
        check(lambda o: field_cupy.ext4_map1(op, dev(b, oa), o, f), want, b.shape,
              f"ext4_map1 op {op}")
    for r_deg, r in ((4, b[0]), (1, s[:1])):  # the eq-table doubling, lo in place too
        want_lo, want_hi = np.empty_like(a), np.empty_like(a)
        field_cpu.ext4_eq_split(a, r, r_deg, want_lo, want_hi, f)
        got_lo, hi = dev(a, oa), dev(np.zeros_like(a), oo)
        field_cupy.ext4_eq_split(got_lo, dev(r, ob), r_deg, got_lo, hi, f)
        np.testing.assert_array_equal(hi.get(), want_hi, err_msg=f"eq_split hi at {offsets}")
        np.testing.assert_array_equal(got_lo.get(), want_lo, err_msg=f"eq_split lo at {offsets}")
    for v_deg, v, r_deg, r in ((4, a, 4, b[0]), (4, a, 1, s[:1]), (1, s, 4, b[1])):
        want = np.empty((n // 2, 4), np.uint32)
        field_cpu.ext4_mle_fold(v, v_deg, r, r_deg, want, f)
        check(lambda o: field_cupy.ext4_mle_fold(dev(v, oa), v_deg, dev(r, ob), r_deg, o, f),
              want, want.shape, f"ext4_mle_fold {v_deg} {r_deg}")
    want = np.empty_like(a)
    field_cpu.ext4_pow(a, 0, 12345, 14, want, f)
    check(lambda o: field_cupy.ext4_pow(dev(a, oa), 0, 12345, 14, o, f), want, a.shape,
          "ext4_pow")


@pytest.fixture
def emulated_cupy(monkeypatch):
    """The object layer sees (emulated) CuPy arrays and runs the emulated kernels."""
    return cuda_emu.emulate(monkeypatch, "field")[1]


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_field_api_on_emulated_cupy_arrays(emulated_cupy, F):
    """F.add/sub/mul/neg/square/inv/pow/batch_inv with CuPy-kind arrays: base, extension,
    mixed (base promoted), broadcasting, a strided view and ``out=``."""
    E = F.ext
    dev = lambda x: cuda_emu.EmuArray(np.array(x, copy=True))  # noqa: E731
    a, b = F.random((3, 40), seed=1), F.random(40, seed=2)          # broadcast (3, 40) x (40,)
    x, y = E.random((3, 40), seed=3), E.random(40, seed=4)
    cases = [(F, a, b), (E, x, y), (E, x, b), (E, a, y)]              # mixed: base promoted
    for G, u, v in cases:
        for op in ("add", "sub", "mul"):
            got = getattr(G, op)(dev(u), dev(v))
            assert isinstance(got, cuda_emu.EmuArray)
            np.testing.assert_array_equal(got.get(), getattr(G, op)(u, v), err_msg=op)
    for G, u in ((F, b), (E, y)):
        for op in ("neg", "square", "inv", "batch_inv"):
            np.testing.assert_array_equal(getattr(G, op)(dev(u)).get(), getattr(G, op)(u),
                                          err_msg=op)
        np.testing.assert_array_equal(G.pow(dev(u), 2**70 + 5).get(), G.pow(u, 2**70 + 5))
        np.testing.assert_array_equal(G.pow(dev(u), -3).get(), G.pow(u, -3))
    strided = dev(F.random(80, seed=5))[::2]                         # a non-contiguous view
    np.testing.assert_array_equal(F.mul(strided, dev(b)).get(), F.mul(strided.get(), b))
    out = dev(np.zeros(40, np.uint32))
    assert F.mul(dev(b), dev(b), out=out) is out
    np.testing.assert_array_equal(out.get(), F.mul(b, b))
    # one NumPy element next to device operands goes to the device, as CuPy takes
    # NumPy scalars (F.one, E.one); a larger NumPy array is still refused
    for G, u, one in ((F, b, F.one), (E, y, E.one), (E, y, F.one), (E, y, np.asarray(F.one))):
        got = G.mul(dev(u), one)
        assert isinstance(got, cuda_emu.EmuArray)
        np.testing.assert_array_equal(got.get(), u if G is F or u.ndim == 2 else G.mul(u, one))
        np.testing.assert_array_equal(G.add(one, dev(u)).get(), G.add(one, u))
    with pytest.raises(TypeError, match="different modules"):
        F.add(dev(b), b)
    vals, point = E.random(16, seed=7), E.random(4, seed=8)  # an MLE at a point
    got = E.mle_eval(dev(vals), dev(point))
    assert isinstance(got, cuda_emu.EmuArray)
    np.testing.assert_array_equal(got.get(), E.mle_eval(vals, point))
    for G, u in ((F, a), (E, x)):  # field sums: plain integer arithmetic on the device
        for axis in (None, 0, (0, 1)):
            got = G.sum(dev(u), axis=axis)
            assert isinstance(got, cuda_emu.EmuArray)
            np.testing.assert_array_equal(got.get(), G.sum(u, axis=axis))
        out = dev(np.zeros(G.sum(u, axis=0).shape, dtype=np.uint32))
        assert G.sum(dev(u), axis=0, out=out) is out
        np.testing.assert_array_equal(out.get(), G.sum(u, axis=0))
        with pytest.raises(TypeError, match="`out` must be a cupy array"):
            G.sum(dev(u), axis=0, out=out.get())
        # backend= as the other operations take it: "cupy" on host arrays adds
        # on the device and returns host arrays; "cpu" on device arrays is refused
        got = G.sum(u, axis=0, backend="cupy")
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, G.sum(u, axis=0))
        with pytest.raises(TypeError, match="backend"):
            G.sum(dev(u), backend="cpu")
    assert emulated_cupy and all(n.startswith("zorch_") for n in emulated_cupy)


def test_host_arrays_are_refused_naming_the_argument(monkeypatch):
    """A NumPy array given to a CuPy launcher is refused before any launch:
    CuPy passes a one-element one by value, so its word would be read as a
    device pointer (a fault, or whatever lies at that address)."""
    k, launches = cuda_emu.emulate(monkeypatch, "field")
    calls = one_odd_argument(k, KoalaBear, cuda_emu.EmuArray)
    for name, arg, call in calls:
        call(lambda x: x)  # all on the device: runs
        before = len(launches)
        with pytest.raises(TypeError, match=rf"field_cupy\.{name}: argument `{arg}` must be "
                                            rf"a CuPy array"):
            call(lambda x: x.get())
        assert len(launches) == before, name
