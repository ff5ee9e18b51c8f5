"""CuPy launcher of the SHA-256 Merkle kernels (CUDA C in ``cuda/merkle.cu``).

A graph's commitment of a device buffer is hashed where the buffer is: one
launch hashes subtrees of up to 256 leaves (a thread block each, the levels
in shared memory), then one launch per level above them; only the 32-byte
root comes to the host.  The same tree and node words as
:mod:`.merkle_cpu` (its constants are the ones passed).  Importing this
module requires CuPy.
"""
from __future__ import annotations

import cupy
import numpy as np

from .cuda_source import assemble
from .field_params import FIELDS
from .launch_config import MERKLE_GPU_SUBTREE_LEAVES, THREADS_PER_BLOCK, grid_for
from .merkle_cpu import INITIAL_HASH, ROUND_CONSTANTS

__all__ = ["SUBTREE_LEAVES", "merkle_root_words"]

NVRTC_OPTIONS = ("-std=c++17",)
#: Leaves per thread block of ``zorch_merkle_subtrees`` (its ZORCH_MERKLE_LEAVES).
SUBTREE_LEAVES = MERKLE_GPU_SUBTREE_LEAVES


@cupy.memoize(for_each_device=True)
def _module() -> "cupy.RawModule":
    # field-independent: any field's preamble serves
    return cupy.RawModule(code=assemble(FIELDS["koalabear"], "merkle.cu"),
                          options=NVRTC_OPTIONS)


@cupy.memoize(for_each_device=True)
def _sha_words():
    return cupy.asarray(np.concatenate([ROUND_CONSTANTS, INITIAL_HASH]))


def merkle_root_words(words) -> bytes:
    """The 32-byte root of the Merkle tree over a C-contiguous CuPy uint32
    buffer of ``16 * leaves`` words, ``leaves`` a power of two, at least 32
    (a warp per block; not the commitment:
    :func:`zorch_nb.graph_layout.merkle_root` wraps it)."""
    leaves = words.size // 16
    if words.dtype != np.uint32 or words.ndim != 1 or not words.flags.c_contiguous \
            or leaves < 32 or leaves & (leaves - 1) or words.size != 16 * leaves:
        raise ValueError("Argument `words` must be a C-contiguous uint32 vector of 16 * 2**k "
                         "words, k >= 5")
    module = _module()
    sha = _sha_words()
    per_tree = min(leaves, SUBTREE_LEAVES)
    level = cupy.empty((leaves // per_tree) * 8, dtype=np.uint32)
    module.get_function("zorch_merkle_subtrees")(
        (leaves // per_tree,), (per_tree,), (words, sha, level, np.uint32(per_tree)))
    m = leaves // per_tree
    up = module.get_function("zorch_merkle_level")
    while m > 1:
        m //= 2
        above = cupy.empty(m * 8, dtype=np.uint32)
        up((grid_for(m),), (THREADS_PER_BLOCK,), (level, sha, above, np.uint64(m)))
        level = above
    return level.get().astype(">u4").tobytes()
