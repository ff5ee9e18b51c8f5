"""Field ops: peak host memory, and the chunked passes that bound it.

The zero check of ``inv`` / ``batch_inv`` / ``pow(e < 0)``, ``sum``,
``encode`` / ``decode`` / ``is_canonical`` and ``mle_eval`` run in chunks
(``zorch_nb.fields._blocks``), so their temporaries are a constant or a small
fraction of the data, not a multiple of it.  NumPy reports its allocations to
tracemalloc, so the peaks below are those of the arrays a call makes (after a
warm-up call, so compiles and caches are not counted).  The chunked paths are
then run with tiny chunks (many blocks, on strided and multi-axis arrays, on
the host and on emulated CuPy arrays) and must give the whole-array results,
the same errors, and on a device the same number of synchronizations.
"""

import numpy as np
import pytest

import cuda_emu
import naive
from peak_memory import peak_bytes
import zorch_nb.fields as fields
from zorch_nb import BabyBear, KoalaBear

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
F = KoalaBear
E = F.ext
N = 1 << 20  # words: 4 MiB, 16 times the host chunk, so a whole-array temporary shows



@pytest.fixture(scope="module")
def data():
    nv = N.bit_length() - 1
    return dict(a=F.random(N, seed=0), x=E.random(N // 4, seed=1), pt=F.random(nv, seed=2),
                ept=E.random(nv, seed=3))


# ---------------------------------------------------------------- peaks

def test_inverse_zero_check_makes_no_input_sized_temporaries(data):
    """The zero check ran (a % p) == 0 over the whole input: 1.25x the input even
    with out= (old: 5 MiB here); pow(a, -3) inverted the whole array first (2x)."""
    a, x = data["a"], data["x"]
    o, ox = np.empty_like(a), np.empty_like(x)
    for name, fn, limit in [("F.inv out=", lambda: F.inv(a, out=o), a.nbytes / 10),
                            ("F.batch_inv out=", lambda: F.batch_inv(a, out=o), a.nbytes / 10),
                            ("E.inv out=", lambda: E.inv(x, out=ox), x.nbytes / 10),
                            ("F.inv", lambda: F.inv(a), 1.1 * a.nbytes),
                            ("F.pow(a, -3)", lambda: F.pow(a, -3), 1.25 * a.nbytes),
                            ("F.pow(a, -3) out=", lambda: F.pow(a, -3, out=o), a.nbytes / 5),
                            ("E.pow(x, -3) out=", lambda: E.pow(x, -3, out=ox), x.nbytes / 5)]:
        peak, _ = peak_bytes(fn)
        assert peak < limit, f"{name}: peak {peak / 2**20:.2f} MiB"
    assert (F.pow(a, -3) == F.pow(F.inv(a), 3)).all()


@pytest.mark.parametrize("G", [F, E], ids=["base", "ext"])
def test_out_an_operand_is_written_in_place_as_documented(G):
    """``out=`` an operand: no temporary, except for the ops the shared ``out``
    text names (pow and batch_inv were said to be written in place, no
    temporary, while both went through one as inv does)."""
    a0 = G.random(N // G.degree, seed=4)
    b = G.random(N // G.degree, seed=5)
    ops = {"add": lambda a: G.add(a, b, out=a), "sub": lambda a: G.sub(a, b, out=a),
           "mul": lambda a: G.mul(a, b, out=a), "neg": lambda a: G.neg(a, out=a),
           "square": lambda a: G.square(a, out=a), "div": lambda a: G.div(b, a, out=a),
           "inv": lambda a: G.inv(a, out=a), "batch_inv": lambda a: G.batch_inv(a, out=a),
           "pow": lambda a: G.pow(a, 3, out=a)}
    doc = " ".join(G.mul.__doc__.split())
    excepted = doc[doc.index("written in place, no temporary;"):doc.index("or overlap one")]
    for name, fn in ops.items():
        a = a0.copy()
        peak, got = peak_bytes(lambda: fn(a))
        assert got is a
        with_temporary = peak > a.nbytes / 2
        assert with_temporary == (f"``{name}``" in excepted), (name, peak / a.nbytes)
        assert peak < 1.1 * a.nbytes, name


def test_sum_temporaries_are_bounded(data):
    """(a % p).astype(uint64).sum() made 3x the input in temporaries."""
    a, x = data["a"], data["x"]
    for name, fn, arr in [("F.sum", lambda: F.sum(a), a),
                          ("F.sum axis=1", lambda: F.sum(a.reshape(64, -1), axis=1), a),
                          ("E.sum", lambda: E.sum(x), x),
                          ("E.sum axis=0", lambda: E.sum(x, axis=0), x),
                          # NumPy's path (the CPU kernel takes the contiguous ones)
                          ("F.sum strided", lambda: F.sum(a[::2]), a[::2]),
                          ("E.sum strided", lambda: E.sum(x[::2]), x[::2])]:
        peak, _ = peak_bytes(fn)
        assert peak < arr.nbytes / 20, f"{name}: peak {peak / 2**20:.2f} MiB"
    want = sum(map(int, F.decode(a).astype(object))) % F.p
    assert int(F.decode(F.sum(a))) == want


def test_encode_decode_peak_is_near_the_output(data):
    """int64/uint64 temporary chains made about 6x the output."""
    a, x = data["a"], data["x"]
    ints, u32 = np.arange(N, dtype=np.int64), np.arange(N, dtype=np.uint32)
    for name, fn, limit in [("F.encode int64", lambda: F.encode(ints), 1.6 * a.nbytes),
                            ("F.encode uint32", lambda: F.encode(u32), 1.6 * a.nbytes),
                            ("F.decode", lambda: F.decode(a), 1.5 * a.nbytes),
                            ("E.decode", lambda: E.decode(x), 1.5 * x.nbytes),
                            ("E.is_canonical", lambda: E.is_canonical(x), x.nbytes / 20)]:
        peak, _ = peak_bytes(fn)
        assert peak < limit, f"{name}: peak {peak / 2**20:.2f} MiB"
    assert (F.decode(F.encode(ints)) == ints).all()


def test_mle_eval_peak_below_the_values(data):
    """Each fold copied its strided halves and the broadcast coordinate (1.5x the
    values); E.mle_eval on base values embedded them as (n, 4) first (10x)."""
    a, x, pt, ept = data["a"], data["x"], data["pt"], data["ept"]
    for name, fn, vals in [("F", lambda: F.mle_eval(a, pt), a),
                           ("E", lambda: E.mle_eval(x, ept[:-2]), x),
                           ("E base values", lambda: E.mle_eval(a, ept), a),
                           ("E base values, base point", lambda: E.mle_eval(a, pt), a)]:
        peak, _ = peak_bytes(fn)
        assert peak < 0.8 * vals.nbytes, f"{name}: peak {peak / 2**20:.2f} MiB"


# ---------------------------------------------------------------- chunked paths

def tiny_chunks(monkeypatch, words=5):
    """Chunks of a few words: every chunked pass runs over many blocks."""
    monkeypatch.setattr(fields, "_CHUNK_WORDS", {"numpy": words, "cupy": words})
    monkeypatch.setattr(fields, "_MAX_CHUNKS", 10**9)
    monkeypatch.setattr(fields, "_MAP_BLOCK", words)


def whole_and_chunked(monkeypatch, fn):
    """``fn()`` with the default chunks (one block at these sizes), then with tiny ones."""
    want = fn()
    tiny_chunks(monkeypatch)
    got = fn()
    monkeypatch.undo()
    return want, got


def outcome(fn):
    try:
        return fn()
    except (ValueError, TypeError) as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("G", [pytest.param(KoalaBear, id="base"),
                               pytest.param(KoalaBear.ext, id="ext")])
def test_chunked_zero_check_names_the_first_zero_and_writes_nothing(monkeypatch, G):
    p = G.p
    ext = G.degree == 4
    tiny_chunks(monkeypatch, words=4 if ext else 3)
    a = G.random((5, 7), seed=3)
    a[a == 0] = 1
    zero = [p, 0, 2 * p, 0] if ext else 2 * p  # non-canonical zeros count
    a[3, 2] = zero
    a[4, 6] = 0
    if ext:
        a[0, 1] = [0, 0, 0, 1]  # not zero: one coefficient is not
    before = a.copy()
    for call in (lambda: G.inv(a), lambda: G.batch_inv(a), lambda: G.inv(a, out=a),
                 lambda: G.batch_inv(a, out=a)):
        with pytest.raises(ValueError, match=r"element at index \(3, 2\) is zero"):
            call()
        assert (a == before).all()  # out=a: raised before anything was written
    o = np.full_like(a, 7)
    with pytest.raises(ValueError, match=r"pow with e = -2 < 0: `a`: element at index \(3, 2\)"):
        G.pow(a, -2, out=o)
    assert (o == 7).all()
    strided = a[1::2, ::3]  # rows 1, 3; columns 0, 3, 6: the zeros above are not in it
    strided[1, 2] = zero  # a[3, 6]
    with pytest.raises(ValueError, match=r"index \(1, 2\)"):
        G.inv(strided)
    single = G.encode([0, 0, 0, 0]) if ext else np.uint32(p)
    with pytest.raises(ValueError, match=r"index \(\)"):
        G.inv(single)


def test_copied_broadcasts_run_in_blocks_near_the_result_size(data, monkeypatch):
    """Operands the broadcast kernels cannot read in place (runs under 64,
    strided views) were copied whole: ``F.mul`` of a (N, 1) and a (1, 63)
    array held both copies beside the result, 3x its memory.  Blocks of
    ``_MAP_BLOCK`` words are copied one at a time."""
    monkeypatch.setattr(fields, "_MAP_BLOCK", 1 << 14, raising=False)
    a, b = data["a"][: 1 << 12, None], data["a"][None, :63]
    pk, r = peak_bytes(lambda: F.mul(a, b))
    assert r.shape == (1 << 12, 63) and pk < 1.2 * r.nbytes, pk / r.nbytes  # 3.0x before
    x = data["x"][:4096, None]
    pk, r = peak_bytes(lambda: E.mul(x, E.as_base(data["a"][None, 100:115])))
    assert r.shape == (4096, 15, 4) and pk < 1.2 * r.nbytes, pk / r.nbytes


@pytest.mark.parametrize("F", FIELDS)
def test_elementwise_ops_in_blocks_give_the_whole_results(monkeypatch, F):
    """Blocks of a few words (many blocks, along the first axis longer than 1)
    give the one-pass results: short-run and strided broadcasts, base words
    under extension ops, unary ops on strided views, and an ``out`` that is
    an operand or overlaps one."""
    E = F.ext
    a, b = F.random((1, 9, 1), seed=1), F.random((1, 1, 7), seed=2)
    c = F.random((9, 14), seed=3)[:, ::2]  # strided, (9, 7)
    x, y = E.random((9, 1), seed=4), E.random((1, 7), seed=5)
    z = E.random((9, 14), seed=6)[:, ::2]

    def into(G, fn, shape, *args, alias=None):
        def run():
            out = G.random(shape, seed=7) if alias is None else alias()
            return fn(*args, out=out)
        return run

    cases = [lambda: F.mul(a, b), lambda: F.sub(b, a), lambda: F.add(c, b[0]),
             lambda: F.neg(c), lambda: F.square(c), lambda: F.inv(c),
             lambda: E.mul(x, y), lambda: E.sub(z, x), lambda: E.add(E.as_base(c), y),
             lambda: E.mul(x, E.as_base(b[0])), lambda: E.inv(z), lambda: E.neg(z),
             into(F, F.mul, (1, 9, 7), a, b)]

    def own_out():  # out is operand c's copy, read elementwise: written in place
        buf = c.copy()
        return F.add(buf, b[0], out=buf)

    def overlapping_out():  # out's first row is the broadcast operand
        buf = F.random((9, 7), seed=8)
        return F.mul(buf[:1], c, out=buf)

    def ext_own_out():
        buf = z.copy()
        return E.mul(buf, y, out=buf)

    cases += [own_out, overlapping_out, ext_own_out]
    for i, case in enumerate(cases):
        want, got = whole_and_chunked(monkeypatch, lambda: outcome(case))
        assert isinstance(got, np.ndarray) and got.shape == want.shape, i
        assert (got == want).all(), i


@pytest.mark.parametrize("F", FIELDS)
def test_chunked_paths_give_the_whole_array_results(monkeypatch, F):
    E = F.ext
    rng = np.random.default_rng(8)
    words = rng.integers(0, 2**32, size=(6, 5), dtype=np.uint64).astype(np.uint32)
    ext = rng.integers(0, 2**32, size=(3, 7, 4), dtype=np.uint64).astype(np.uint32)
    canon = F.random((6, 5), seed=1)
    big = np.array([[2**70 + i, -(2**65) - i, i] for i in range(4)], dtype=object)
    cases = []
    for G, w in ((F, words), (E, ext), (F, words.T), (E, ext[:, ::2])):  # strided too
        for axis in (None, 0, 1, (0, 1), (1, 0)):
            for keep in (False, True):
                cases.append(lambda G=G, w=w, axis=axis, keep=keep: G.sum(w, axis=axis,
                                                                       keepdims=keep))
        cases += [lambda G=G, w=w: G.is_canonical(w), lambda G=G, w=w: G.decode(w),
                  lambda G=G, w=w: G.inv(w), lambda G=G, w=w: G.batch_inv(w),
                  lambda G=G, w=w: G.pow(w, -3)]
    cases += [lambda: F.decode(canon), lambda: F.decode(canon.T),
              lambda: E.decode(E.encode(ext % 9)),
              lambda: F.encode(np.arange(-5, 25).reshape(5, 6) % F.p),
              lambda: F.encode(np.arange(-5, 25).reshape(5, 6)),  # ints[0, 0] = -5: an error
              lambda: F.encode(np.arange(-5, 25).reshape(5, 6), reduce=True),
              lambda: F.encode(np.arange(30, dtype=np.uint64) * np.uint64(2**58), reduce=True),
              lambda: F.encode(big, reduce=True), lambda: F.encode(big),
              lambda: F.encode(list(range(F.p - 3, F.p + 1))),  # the last one is p
              lambda: E.encode(np.arange(40).reshape(10, 4)),
              lambda: F.pow(canon, -2, out=np.empty_like(canon)),
              lambda: F.pow(canon, -2, out=canon[:, ::-1])]  # overlapping out
    for nv in range(8):
        vals, point = E.random(2**nv, seed=nv), E.random(nv, seed=20 + nv)
        base_vals, base_point = F.random(2**nv, seed=nv), F.random(nv, seed=40 + nv)
        base_vals[::3] += np.uint32(F.p)  # words >= p too
        cases += [lambda v=vals, r=point: E.mle_eval(v, r),
                  lambda v=base_vals, r=point: E.mle_eval(v, r),
                  lambda v=vals, r=base_point: E.mle_eval(v, r),
                  lambda v=base_vals, r=base_point: E.mle_eval(v, r),
                  lambda v=base_vals, r=base_point: F.mle_eval(v, r)]
    for i, case in enumerate(cases):
        want, got = whole_and_chunked(monkeypatch, lambda: outcome(case))
        if isinstance(want, (tuple, bool)):  # an error, or is_canonical
            assert got == want, i
        else:
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype, i
            assert got.shape == want.shape and (got == want).all(), i


def test_sum_reduces_its_slots_before_they_could_overflow(monkeypatch):
    """With _SUM_EXACT lowered to a few words, the slots are reduced mod p in
    between, and the sums (of words near 2**32) stay exact."""
    monkeypatch.setattr(fields, "_SUM_EXACT", 3)
    tiny_chunks(monkeypatch, words=2)
    words = np.full((9, 4), 2**32 - 1, dtype=np.uint32)
    words[::2] -= np.uint32(5)
    vals = np.vectorize(lambda w: naive.dec(int(w) % F.p, F.p), otypes=[object])(words)
    for axis in (None, 0, 1):
        want = np.asarray(vals.sum(axis=axis) % F.p)
        assert F.decode(F.sum(words, axis=axis)).tolist() == want.tolist()
    assert E.decode(E.sum(words)).tolist() == (vals.sum(axis=0) % F.p).tolist()
    # The words above fit a uint64 slot without any reduction, so they cannot
    # show one missing.  A full sum in blocks of 2 words with _SUM_EXACT = 3
    # adds one block per reduction; each block's sum raised by a multiple of
    # p past 2**63 (the same value mod p) makes two of them in the slot wrap
    # 2**64 where the reduction in between is missing.
    # (NumPy's path: the CPU kernel adds a contiguous array's words in one
    # pass, without _sum_words; every other row of a buffer twice as long)
    real = fields._sum_words
    lift = np.uint64((2**63 // F.p + 1) * F.p)
    monkeypatch.setattr(fields, "_sum_words", lambda *args: real(*args) + lift)
    strided = np.repeat(words, 2, axis=0)[::2]
    assert not strided.flags.c_contiguous
    assert F.decode(F.sum(strided)).tolist() == vals.sum() % F.p


# ---------------------------------------------------------------- on a device

def test_chunked_device_paths_match_the_host_and_synchronize_once(monkeypatch):
    """On (emulated) CuPy arrays, many blocks: the hit flags stay on the device and
    are read once per check, as the whole-array check read its one flag."""
    _, launches = cuda_emu.emulate(monkeypatch, "field")
    reads = []
    check = cuda_emu._check_sync
    monkeypatch.setattr(cuda_emu, "_check_sync", lambda what: (reads.append(what), check(what)))
    tiny_chunks(monkeypatch, words=16)
    dev = lambda x: cuda_emu.EmuArray(np.array(x, copy=True))  # noqa: E731
    a, x = F.random((9, 11), seed=1), E.random(50, seed=2)
    a[a == 0] = 1
    ints = np.arange(200).reshape(8, 25)
    vals, point = E.random(256, seed=3), E.random(8, seed=4)
    cases = [("F.inv", lambda m: F.inv(m(a)), 1), ("F.batch_inv", lambda m: F.batch_inv(m(a)), 1),
             ("E.inv", lambda m: E.inv(m(x)), 1), ("F.pow -3", lambda m: F.pow(m(a), -3), 1),
             # (C-contiguous operands are scanned by one kernel; a strided one in blocks)
             ("F.inv strided", lambda m: F.inv(m(a)[:, ::2]), 1),
             ("E.inv strided", lambda m: E.inv(m(x)[::3]), 1),
             ("F.decode", lambda m: F.decode(m(a)), 1), ("E.decode", lambda m: E.decode(m(x)), 1),
             ("E.is_canonical", lambda m: E.is_canonical(m(x)), 1),
             ("F.encode", lambda m: F.encode(m(ints)), 1),
             ("F.encode reduce", lambda m: F.encode(m(ints - 100), reduce=True), 0),
             # (other dtypes through int64 copies of blocks: a kernel call each)
             ("F.encode int32 reduce", lambda m: F.encode(m((ints - 100).astype(np.int32)),
                                                          reduce=True), 0),
             ("F.encode uint64", lambda m: F.encode(m(ints.astype(np.uint64))), 1),
             ("F.encode strided", lambda m: F.encode(m(ints)[:, ::2]), 1),
             ("F.decode strided", lambda m: F.decode(m(a)[:, ::3]), 1),
             ("F.sum", lambda m: F.sum(m(a), axis=1), 0), ("E.sum", lambda m: E.sum(m(x)), 0),
             ("E.mle_eval", lambda m: E.mle_eval(m(vals), m(point)), 0),
             ("E.mle_eval base values", lambda m: E.mle_eval(m(a.reshape(-1)[:64]),
                                                             m(point[:6])), 0)]
    for name, call, syncs in cases:
        want = call(lambda v: v)
        del reads[:]
        got = call(dev)
        assert len(reads) == syncs, (name, reads)
        if isinstance(got, bool):
            assert got == want, name
        else:
            assert isinstance(got, cuda_emu.EmuArray), name
            np.testing.assert_array_equal(got.get(), want, err_msg=name)
    a[6, 10] = F.p  # block 4 of 7 (16 words each)
    del launches[:]
    with pytest.raises(ValueError, match=r"index \(6, 10\) is zero"):
        F.inv(dev(a))
    assert launches == ["zorch_first_zero"]  # the scan, and nothing written
    with pytest.raises(ValueError, match=r"index \(6, 5\) is zero"):
        F.inv(dev(a)[:, ::2])
    with pytest.raises(ValueError, match="holds values >= p"):
        F.decode(dev(a))
    assert not F.is_canonical(dev(a))
    with pytest.raises(ValueError, match=r"must lie in \[0, p="):
        F.encode(dev(ints - 1))
    # C-ordered arrays are converted by the kernels, one pass each
    del launches[:]
    F.decode(F.encode(dev(ints)))
    E.decode(dev(x))
    assert launches == ["zorch_encode", "zorch_decode", "zorch_decode"]
    bad = ints.astype(np.int32)
    bad[6, 20] = F.p  # in block 10 of the int64 copies
    for m in (lambda v: v, dev):
        with pytest.raises(ValueError, match=rf"ints\[6, 20\] = {F.p}; pass reduce=True"):
            F.encode(m(bad))


@pytest.mark.parametrize("F", FIELDS)
def test_blocked_ops_with_out_under_a_transposed_operand(monkeypatch, F):
    """An operand that is ``out`` transposed (same first word, same size, not
    C-ordered) is not ``out`` itself: the blocks, which read its columns while
    writing rows of ``out``, go through a temporary."""
    monkeypatch.setattr(fields, "_MAP_BLOCK", 64)
    for G, shape, axes in ((F, (16, 16), (1, 0)), (F.ext, (16, 16), (1, 0, 2))):
        buf, b = G.random(shape, seed=1), G.random(shape, seed=2)
        vals = [naive.dec(int(v), F.p) for v in buf.transpose(axes).reshape(-1)]
        bv = [naive.dec(int(v), F.p) for v in b.reshape(-1)]
        want = [naive.enc((u + v) % F.p, F.p) for u, v in zip(vals, bv)]
        assert G.add(buf.transpose(axes), b, out=buf) is buf
        assert buf.reshape(-1).tolist() == want


@pytest.mark.parametrize("ext", [False, True], ids=["base", "ext"])
def test_is_canonical_reads_a_broadcast_view_once(ext, monkeypatch):
    """A broadcast view repeats what it was made from: is_canonical reads those
    words, not the view's 2**40 elements (it scanned them, ~10 minutes)."""
    G = KoalaBear.ext if ext else KoalaBear
    row = G.random(3, seed=5)  # (3,) or (3, 4): canonical
    shape = (2**40,) + row.shape
    scanned = []
    first_true = fields._first_true

    def spy(x, shape, *args):
        scanned.append(int(np.prod(shape)))
        assert scanned[-1] <= 3 * 4, f"scanning {shape}"  # (fails fast, not in minutes)
        return first_true(x, shape, *args)

    monkeypatch.setattr(fields, "_first_true", spy)
    assert G.is_canonical(np.broadcast_to(row, shape))
    bad = row.copy()
    bad.reshape(-1)[-1] = KoalaBear.p  # the last word of the last element
    assert not G.is_canonical(np.broadcast_to(bad, shape))
    assert not G.is_canonical(np.broadcast_to(bad[:, None], (3, 2**40) + bad.shape[1:]))
