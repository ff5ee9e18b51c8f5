"""The Numba-CUDA kernels across several blocks and grid-stride rounds.

Under the CUDA simulator the inputs stay small (a simulated thread is a
Python thread), so with 256 threads per block every launch was one block
(and the launchers size a block down to the warps that cover fewer items):
a kernel indexing by ``threadIdx.x`` instead of ``cuda.grid(1)`` passed
every simulator test.  Here the launchers' block size and grid cap are cut
to 32 threads and 3 blocks, so ~300 elements span blocks and loop.
Checked against the CPU backend, itself checked against big ints.
"""
import numpy as np
import pytest

from zorch_nb import BabyBear, KoalaBear
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                                halving_schedule, jagged_layer_transition, layer_transition)

pytestmark = pytest.mark.cudasim


@pytest.fixture
def small_blocks(monkeypatch):
    from zorch_nb.kernels import field_cuda_numba, gkr_cuda_numba
    for mod in (field_cuda_numba, gkr_cuda_numba):
        monkeypatch.setattr(mod, "block_for", lambda n: 32)
        monkeypatch.setattr(mod, "grid_for",
                            lambda n, threads=32: max(1, min(3, (n + threads - 1) // threads)))


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_field_ops_span_blocks(F, small_blocks):
    E = F.ext
    a, b = F.random(300, seed=1), F.random(300, seed=2)
    x, y = E.random(150, seed=3), E.random(150, seed=4)
    for op in ("add", "sub", "mul"):
        np.testing.assert_array_equal(getattr(F, op)(a, b, backend="numba"), getattr(F, op)(a, b))
        np.testing.assert_array_equal(getattr(E, op)(x, y, backend="numba"), getattr(E, op)(x, y))
    np.testing.assert_array_equal(E.mul(x, a[:150], backend="numba"), E.mul(x, a[:150]))
    np.testing.assert_array_equal(F.square(a, backend="numba"), F.square(a))


def test_gkr_transitions_span_blocks(small_blocks):
    F = KoalaBear
    n0, n1 = F.random(256, seed=5), F.random(256, seed=6)
    d0, d1 = F.ext.random(256, seed=7), F.ext.random(256, seed=8)
    dense = GkrLayer(n0, n1, d0, d1, 2)
    for got, want in zip(layer_transition(dense, backend="numba").mles,
                         layer_transition(dense).mles):
        np.testing.assert_array_equal(got, want)
    jag = JaggedGkrLayer(n0, n1, d0, d1, [70, 0, 101, 85])
    steps = halving_schedule(jag)
    for got, want in zip(jagged_layer_transition(jag, steps[0], backend="numba").mles,
                         jagged_layer_transition(jag, steps[0]).mles):
        np.testing.assert_array_equal(got, want)
    for fused in (False, None):
        for a, b in zip(build_jagged_pyramid(jag, steps, backend="numba", fused=fused),
                        build_jagged_pyramid(jag, steps)):
            for got, want in zip(a.mles, b.mles):
                np.testing.assert_array_equal(got, want)
        for a, b in zip(build_pyramid(dense, backend="numba", fused=fused), build_pyramid(dense)):
            for got, want in zip(a.mles, b.mles):
                np.testing.assert_array_equal(got, want)


def test_a_launch_over_few_items_gets_the_warps_that_cover_them():
    from zorch_nb.kernels.launch_config import THREADS_PER_BLOCK, block_for, grid_for
    for n, threads in ((0, 32), (1, 32), (32, 32), (33, 64), (200, 224),
                       (THREADS_PER_BLOCK, THREADS_PER_BLOCK), (10**9, THREADS_PER_BLOCK)):
        assert block_for(n) == threads, n
        if n <= THREADS_PER_BLOCK:  # one block, a thread for every item
            assert grid_for(n, block_for(n)) == 1 and block_for(n) >= n, n


def test_a_grid_covers_every_item_up_to_the_block_cap():
    # a grid-stride loop over n items: one thread an item while the blocks
    # needed fit under MAX_BLOCKS, then MAX_BLOCKS
    from zorch_nb.kernels.launch_config import MAX_BLOCKS, grid_for
    for n, threads, blocks in ((0, 256, 1), (1, 256, 1), (256, 256, 1), (257, 256, 2),
                               (511, 256, 2), (513, 256, 3), (33, 32, 2), (100, 64, 2),
                               (256 * MAX_BLOCKS - 1, 256, MAX_BLOCKS),
                               (256 * MAX_BLOCKS + 1, 256, MAX_BLOCKS)):
        assert grid_for(n, threads) == blocks, (n, threads)
    assert grid_for(257) == 2  # THREADS_PER_BLOCK by default


@pytest.mark.parametrize("F", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_every_field_launcher_spans_blocks(F, small_blocks):
    """Every field launcher of ``field_cuda_numba`` over more items than the
    3 x 32 threads (so every grid-stride loop takes several rounds), against
    the CPU launchers (``field_cpu``, the same contract).  The test above
    covers add/sub/mul/square only: a grid-stride step of another kernel
    (pow, the broadcast forms, the folds, the eq splits, NEG, the
    conversions) could skip elements and pass every simulator test."""
    from zorch_nb._backend import kernels_for
    from zorch_nb.kernels.monty import OP_INV, OP_MUL, OP_NEG, OP_SUB
    g, c = kernels_for("numba", "field"), kernels_for("cpu", "field")
    f, fe = F.params, F.ext.params
    a, b = F.random(300, seed=11), F.random(300, seed=12)
    x, y = F.ext.random(150, seed=13), F.ext.random(150, seed=14)
    r, re = F.random(1, seed=15), F.ext.random(1, seed=16)

    def same(call, *shapes):
        got = [np.full(s, 7, np.uint32) for s in shapes]
        want = [np.full(s, 7, np.uint32) for s in shapes]
        call(g, *got)
        call(c, *want)
        for i, (u, v) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(u, v, err_msg=f"output {i}")
    same(lambda k, o: k.base_map1(OP_NEG, a, o, f), 300)
    same(lambda k, o: k.base_map1(OP_INV, a, o, f), 300)
    same(lambda k, o: k.ext4_map1(OP_NEG, x, o, fe), (150, 4))
    same(lambda k, o: k.ext4_map1(OP_INV, x, o, fe), (150, 4))
    same(lambda k, o: k.base_pow(a, 0, 2**40 + 3, 41, o, f), 300)
    same(lambda k, o: k.ext4_pow(x, 0, 2**20 + 3, 21, o, fe), (150, 4))
    same(lambda k, o: k.base_map2_bcast(OP_SUB, a, 1, b[:1], 0, o, f), 300)
    same(lambda k, o: k.base_map2_bcast(OP_SUB, a, 1, b, 1, o, f, run=100, a_row=100,
                                        b_row=0), 300)
    same(lambda k, o: k.ext4_map2_bcast(OP_MUL, x, 1, 4, y[:1], 0, 4, o, fe), (150, 4))
    same(lambda k, o: k.ext4_map2_bcast(OP_SUB, a[:150], 1, 1, y, 1, 4, o, fe), (150, 4))
    same(lambda k, o: k.base_mle_fold(a, r, o, f), 150)
    same(lambda k, o: k.ext4_mle_fold(a, 1, re, 4, o, fe), (150, 4))
    same(lambda k, o: k.ext4_mle_fold(np.concatenate([x, y]), 4, r, 1, o, fe), (150, 4))
    same(lambda k, lo, hi: k.base_eq_split(a, r, lo, hi, f), 300, 300)
    same(lambda k, lo, hi: k.ext4_eq_split(x, re, 4, lo, hi, fe), (150, 4), (150, 4))
    v = np.arange(-150, 150, dtype=np.int64) * 7919
    for k in (g, c):  # encode (a value outside [0, p) reduced), decode, back to v mod p
        enc, dec = np.zeros(300, np.uint32), np.zeros(300, np.uint32)
        assert k.encode(v, enc, True, f) == -1
        assert k.decode(enc, dec, f)
        np.testing.assert_array_equal(dec, v % F.p)
    w = v % F.p
    w[[250, 290]] = F.p  # the first value outside [0, p), found by a late thread round
    assert g.encode(w, np.zeros(300, np.uint32), False, f) == 250
    bad = enc.copy()
    bad[299] = 2**32 - 1  # a non-canonical word in the last round
    assert not g.decode(bad, np.zeros(300, np.uint32), f)
    for i in (299, 263, 201):  # a zero seen only by a later round of the scan
        z = a.copy()
        z[i] = 0
        assert g.base_first_zero(z, f) == i
        e = x.copy()
        e[i % 150] = 0
        assert g.ext4_first_zero(e, fe) == i % 150
