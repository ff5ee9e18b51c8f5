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
