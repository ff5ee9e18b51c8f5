"""SHA-256 Merkle kernels (kernels/merkle_cpu.py) against hashlib."""
import hashlib
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from test_graph_memory import naive_merkle_root
from zorch_nb import graph_layout
from zorch_nb.graph_layout import merkle_root
from zorch_nb.kernels import cpu_threads, merkle_cpu

K, H0 = merkle_cpu.ROUND_CONSTANTS, merkle_cpu.INITIAL_HASH


def random_words(n, seed):
    return np.random.default_rng(seed).integers(0, 2 ** 32, size=n, dtype=np.uint64) \
        .astype(np.uint32)


def test_constants_are_fips_180_4s():
    """The computed roots give SHA-256 itself: the digests of the empty and
    the "abc" messages (FIPS 180-4's examples) by a plain one-block SHA-256
    over these constants, and the leading words the standard lists."""
    assert K[0] == 0x428A2F98 and K[63] == 0xC67178F2 and H0[0] == 0x6A09E667
    assert H0[7] == 0x5BE0CD19 and len(set(K.tolist())) == 64

    def one_block(message: bytes) -> bytes:
        rotr = lambda x, n: ((x >> n) | (x << (32 - n))) & 0xFFFFFFFF  # noqa: E731
        padded = message + b"\x80" + bytes(55 - len(message)) \
            + (8 * len(message)).to_bytes(8, "big")
        w = [int.from_bytes(padded[4 * i:4 * i + 4], "big") for i in range(16)]
        for t in range(16, 64):
            s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3)
            s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10)
            w.append((w[t - 16] + s0 + w[t - 7] + s1) & 0xFFFFFFFF)
        a, b, c, d, e, f, g, h = (int(v) for v in H0)
        for t in range(64):
            t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) \
                + int(K[t]) + w[t]
            t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))
            a, b, c, d, e, f, g, h = (t1 + t2) & 0xFFFFFFFF, a, b, c, (d + t1) & 0xFFFFFFFF, \
                e, f, g
        out = [(x + int(y)) & 0xFFFFFFFF for x, y in zip((a, b, c, d, e, f, g, h), H0)]
        return b"".join(x.to_bytes(4, "big") for x in out)

    for message in (b"", b"abc", bytes(range(55))):
        assert one_block(message) == hashlib.sha256(message).digest()


@pytest.mark.parametrize("count", [1, 3, merkle_cpu.LANES, merkle_cpu.LANES + 5])
@pytest.mark.parametrize("prefix", [0, 1, 0xFF])
def test_node_digests_equal_hashlib(count, prefix):
    """Leaf form (little-endian data words, byte-swapped) and inner form
    (big-endian words), any prefix byte, a lane batch and a partial one."""
    words = random_words(16 * count, count + prefix)
    for swap in (True, False):
        out = np.zeros((count, 8), dtype=np.uint32)
        merkle_cpu.node_digests(words, swap, prefix, out, K, H0)
        data = words.astype("<u4" if swap else ">u4").tobytes()
        want = [hashlib.sha256(bytes([prefix]) + data[64 * i:64 * i + 64]).digest()
                for i in range(count)]
        assert [row.astype(">u4").tobytes() for row in out] == want


def test_subtree_roots_equal_hashlib_trees():
    words = random_words(16 * 4 * 3, 5)  # three subtrees of four leaves
    out = np.zeros((3, 8), dtype=np.uint32)
    merkle_cpu.subtree_roots(words, 4, out, K, H0)
    data = words.tobytes()
    for t in range(3):
        level = [hashlib.sha256(b"\x00" + data[64 * i:64 * i + 64]).digest()
                 for i in range(4 * t, 4 * t + 4)]
        left = hashlib.sha256(b"\x01" + level[0] + level[1]).digest()
        right = hashlib.sha256(b"\x01" + level[2] + level[3]).digest()
        assert out[t].astype(">u4").tobytes() == hashlib.sha256(b"\x01" + left + right).digest()


def test_raw_kernels_refuse_shapes_they_would_read_or_write_past():
    """The kernels are in merkle_cpu.__all__ and their docstrings state the
    shapes; called against them, node_digests hashed the words past a short
    payload and wrote past an (n, 4) out, reduce_levels hashed a partial
    tree.  A ValueError now, before anything is written."""
    G = np.uint32(0xDEADBEEF)
    buf = np.full(64 + 64, G, np.uint32)
    out = np.full((6, 8), G, np.uint32)
    with pytest.raises(ValueError, match="`payload` hold 16 n words"):
        merkle_cpu.node_digests(buf[:64], True, 0, out, K, H0)  # 4 nodes, 6 asked
    narrow = buf[64:].copy()
    with pytest.raises(ValueError, match=r"`out` must be \(n, 8\)"):
        merkle_cpu.node_digests(buf[:64], True, 0, narrow[:16].reshape(4, 4), K, H0)
    assert (out == G).all() and (narrow == G).all()
    with pytest.raises(ValueError, match="`k` must be ROUND_CONSTANTS"):
        merkle_cpu.node_digests(buf[:64], True, 0, out[:4], K[:8], H0)
    for m in (0, 3, 6):
        with pytest.raises(ValueError, match="m a power of two"):
            merkle_cpu.reduce_levels(np.zeros((m, 8), np.uint32), K, H0)
    # 64 words are 4 leaves: two subtrees of 4 leaves, 3 leaves a subtree, 4-word roots
    for leaves, roots in ((4, (2, 8)), (3, (1, 8)), (2, (2, 4))):
        with pytest.raises(ValueError, match="subtree_roots"):
            merkle_cpu.subtree_roots(buf[:64], leaves, np.zeros(roots, np.uint32), K, H0)


@pytest.mark.parametrize("count", [1, 2, merkle_cpu.LANES + 1])
@pytest.mark.parametrize("short", [1, 16], ids=["a-word", "a-node"])
def test_node_digests_refuses_a_payload_one_word_or_one_node_short(count, short):
    """``payload`` must hold all ``16 n`` words: one word or one whole node
    fewer is refused before anything is read or written."""
    G = np.uint32(0xDEADBEEF)
    payload = random_words(16 * count, count)[:16 * count - short].copy()
    out = np.full((count, 8), G, np.uint32)
    with pytest.raises(ValueError, match="`payload` hold 16 n words"):
        merkle_cpu.node_digests(payload, True, 0, out, K, H0)
    assert (out == G).all()


def test_node_digests_refuses_an_initial_hash_of_another_length():
    """``h0`` must be the 8 words of INITIAL_HASH (a shorter one was read past)."""
    words = random_words(16, 2)
    out = np.zeros((1, 8), np.uint32)
    for h0 in (H0[:7], H0[:1], np.concatenate([H0, H0])):
        with pytest.raises(ValueError, match="`h0` INITIAL_HASH"):
            merkle_cpu.node_digests(words, True, 0, out, K, h0)


@pytest.mark.parametrize("shape", [(1, 4), (2, 4), (4, 16), (1, 7)])
def test_reduce_levels_refuses_rows_that_are_not_8_words(shape):
    """reduce_levels names its own argument: a single row of 4 words was
    returned as a "root", 2 rows of 4 failed inside node_digests."""
    level = np.zeros(shape, np.uint32)
    with pytest.raises(ValueError, match="reduce_levels: `level` must be \\(m, 8\\)"):
        merkle_cpu.reduce_levels(level, K, H0)


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="the hashlib path runs without the JIT")
@pytest.mark.parametrize("n", [16 * 16, 1 << 12, 1 << 13, 1 << 16, 1 << 18])
@pytest.mark.parametrize("threads", ["serial", "parallel"])
def test_merkle_root_by_the_kernels_equals_hashlib(n, threads, monkeypatch):
    """One subtree, two, many; serial and parallel launches; and the kernel
    path is the one taken for padded buffers of 16 leaves or more."""
    monkeypatch.setattr(cpu_threads, "_one_thread_enough",
                        lambda tasks, words: threads == "serial" or tasks <= 1)
    used = []
    original = graph_layout._root_kernel
    monkeypatch.setattr(graph_layout, "_root_kernel",
                        lambda *a: used.append(1) or original(*a))
    words = random_words(n, n)
    assert merkle_root(words) == naive_merkle_root(words)
    assert used == [1]
    words[n // 3] ^= 1 << 17  # one bit anywhere changes the root
    assert merkle_root(words) == naive_merkle_root(words)


@pytest.mark.parametrize("n", [0, 5, 16, 16 * 8, 16 * 16 - 3, (1 << 12) - 1])
def test_short_buffers_and_short_last_leaves_use_hashlib(n, monkeypatch):
    monkeypatch.setattr(graph_layout, "_root_kernel", None)  # never called
    words = random_words(n, n)
    assert merkle_root(words) == naive_merkle_root(words)


def check_device_roots_equal_the_host_ones(cupy):
    """merkle_root of a CuPy buffer (hashed on its device) equals the host's:
    one subtree smaller than a block, one whole, many, and levels above; the
    host path for a buffer too small."""
    for n in (16 * 16, 16 * 32, 16 * 256, 1 << 14, 1 << 17):
        words = random_words(n, n)
        assert merkle_root(cupy.asarray(words)) == naive_merkle_root(words)
        view = cupy.asarray(random_words(2 * n, 1)).reshape(2, n)[:, 0]  # strided: host path
        assert merkle_root(view) == naive_merkle_root(view.get())


def test_device_roots_equal_the_host_ones_emulated(monkeypatch):
    """The CUDA C kernels under the host SIMT emulation (tests/cuda_emu.py),
    threads in a shuffled order (a missing barrier between a level's reads
    and writes then shows)."""
    import sys
    monkeypatch.setenv("ZORCH_EMU_ORDER", "shuffle:3")

    import cuda_emu
    module, launches = cuda_emu.emulate(monkeypatch, "merkle")
    monkeypatch.setitem(sys.modules, "zorch_nb.kernels.merkle_cupy", module)
    from zorch_nb import _backend
    monkeypatch.setattr(_backend, "_KERNEL_MODULES", {})
    check_device_roots_equal_the_host_ones(sys.modules["cupy"])
    assert {"zorch_merkle_subtrees", "zorch_merkle_level"} <= set(launches)


@pytest.mark.gpu
def test_device_roots_equal_the_host_ones():
    cupy = pytest.importorskip("cupy")
    check_device_roots_equal_the_host_ones(cupy)


def test_device_root_refuses_malformed_buffers_emulated(monkeypatch):
    """merkle_root_words (a public launcher; graph_layout.merkle_root never
    hands it these) refuses, before any launch, a buffer its kernels would
    misread: strided, a leaf count not a power of two (the tree would lose
    leaves), a partial last leaf, fewer than 32 leaves, another dtype."""
    import cuda_emu
    module, launches = cuda_emu.emulate(monkeypatch, "merkle")
    dev = lambda x: cuda_emu.EmuArray(x)  # noqa: E731
    bad = [dev(random_words(2 * 16 * 32, 1))[::2],   # 32 leaves, every other word
           dev(random_words(16 * 96, 2)),            # 96 leaves
           dev(random_words(16 * 64 + 5, 3)),        # 64 leaves and 5 words
           dev(random_words(16 * 16, 4)),            # 16 leaves
           dev(random_words(16 * 32, 5).astype(np.int32))]
    for words in bad:
        with pytest.raises(ValueError, match="C-contiguous uint32 vector of 16 \\* 2\\*\\*k"):
            module.merkle_root_words(words)
    assert not launches
    words = random_words(16 * 32, 6)  # the smallest accepted buffer
    root = module.merkle_root_words(dev(words.copy()))
    assert hashlib.sha256(b"zorch_nb merkle v1" + (words.size).to_bytes(8, "little") + root) \
        .digest() == naive_merkle_root(words)


def test_launchers_name_a_wrong_dtype_dimension_or_layout():
    """The kernels were the public names: a 1-d ``out`` or a 2-d ``words``
    was Numba's TypingError ("tuple index out of range"), a Fortran level a
    NotImplementedError, and a uint64 payload compiled a kernel that hashed
    other bytes.  Each argument is now checked and named first."""
    words = random_words(16 * 4, 1)
    out = np.zeros((4, 8), np.uint32)
    cases = [  # (exception, message, call)
        (TypeError, "`payload` must have dtype uint32",
         lambda: merkle_cpu.node_digests(words.astype(np.uint64), True, 0, out, K, H0)),
        (ValueError, "`out` must be 2-d",
         lambda: merkle_cpu.node_digests(words, True, 0, np.zeros(8, np.uint32), K, H0)),
        (ValueError, "`payload` must be 1-d",
         lambda: merkle_cpu.node_digests(words.reshape(4, 16), True, 0, out, K, H0)),
        (TypeError, "`swap` must be a bool",
         lambda: merkle_cpu.node_digests(words, 1, 0, out, K, H0)),
        (ValueError, r"`prefix` must be in \[0, 255\], not 256",
         lambda: merkle_cpu.node_digests(words, True, 256, out, K, H0)),
        (TypeError, "`k` must have dtype uint32",
         lambda: merkle_cpu.node_digests(words, True, 0, out, K.astype(np.int64), H0)),
        (TypeError, "`payload` must be a NumPy array",
         lambda: merkle_cpu.node_digests(words.tolist(), True, 0, out, K, H0)),
        (ValueError, "`level` must be C-contiguous",
         lambda: merkle_cpu.reduce_levels(np.asfortranarray(np.zeros((4, 8), np.uint32)), K,
                                          H0)),
        (ValueError, "`level` must be 2-d",
         lambda: merkle_cpu.reduce_levels(np.zeros(8, np.uint32), K, H0)),
        (ValueError, "`out` must be writeable",
         lambda: merkle_cpu.subtree_roots(words, 4, np.broadcast_to(out[:1], (1, 8)), K, H0)),
        (ValueError, "`words` must be 1-d",
         lambda: merkle_cpu.subtree_roots(words.reshape(4, 16), 4, out[:1], K, H0)),
        (TypeError, "`leaves` must be an integer",
         lambda: merkle_cpu.subtree_roots(words, True, out[:1], K, H0)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc, match=r"^merkle_cpu\.\w+: argument " + match):
            call()
    assert not out.any()


def test_overlaps_the_kernels_would_misread_are_refused():
    """``node_digests`` may write a tree level over the one below (``out``
    at or before the payload's first word): checked against hashlib.  An
    ``out`` starting after the payload overwrote words not yet read (a
    wrong digest, silently); ``subtree_roots``' ``out`` over ``words`` too."""
    count = merkle_cpu.LANES + 3
    words = random_words(16 * count, 7)
    want = np.zeros((count, 8), np.uint32)
    merkle_cpu.node_digests(words, False, 1, want, K, H0)
    buf = np.concatenate([words, np.zeros(8, np.uint32)])
    merkle_cpu.node_digests(buf[:16 * count], False, 1, buf[:8 * count].reshape(count, 8), K, H0)
    np.testing.assert_array_equal(buf[:8 * count].reshape(count, 8), want)
    buf = np.concatenate([words, np.zeros(8, np.uint32)])
    before = buf.copy()
    with pytest.raises(ValueError, match="`out` overlaps `payload` and starts after it"):
        merkle_cpu.node_digests(buf[:16 * count], False, 1, buf[8:8 * count + 8]
                                .reshape(count, 8), K, H0)
    np.testing.assert_array_equal(buf, before)
    with pytest.raises(ValueError, match="merkle_cpu.subtree_roots.*`out`.*`words`"):
        merkle_cpu.subtree_roots(buf[:64], 4, buf[:8].reshape(1, 8), K, H0)
    np.testing.assert_array_equal(buf, before)
    # the constants are read by every node: an output over them is refused,
    # and the module's own cannot be written at all (every commitment uses them)
    consts = np.concatenate([K, H0])
    with pytest.raises(ValueError, match="node_digests: argument `out` shares memory with `k`"):
        merkle_cpu.node_digests(words, False, 1, consts[:64].reshape(8, 8), consts[:64], H0)
    with pytest.raises(ValueError, match="reduce_levels: argument `level` shares memory with "
                                         "`h0`"):
        merkle_cpu.reduce_levels(consts[64:].reshape(1, 8), K, consts[64:])
    np.testing.assert_array_equal(consts, np.concatenate([K, H0]))
    assert not K.flags.writeable and not H0.flags.writeable
    with pytest.raises(ValueError, match="`out` must be writeable"):
        merkle_cpu.subtree_roots(words, 4, K[:8].reshape(1, 8), K, H0)


_FORKED_CHILD = textwrap.dedent("""
    import os
    import numpy as np
    from zorch_nb import KoalaBear as F
    from zorch_nb.kernels import launch_config, merkle_cpu
    a = F.random(1 << 18, seed=0)
    F.mul(a, a)  # a parallel kernel: the threading layer runs (GNU OpenMP where it loads)
    words = np.random.default_rng(1).integers(0, 2**32, 2 * launch_config.MERKLE_CPU_SERIAL_WORDS,
                                              dtype=np.uint64).astype(np.uint32)
    k, h0 = merkle_cpu.ROUND_CONSTANTS, merkle_cpu.INITIAL_HASH
    want = np.zeros((words.size // 16 // 256, 8), np.uint32)
    merkle_cpu.subtree_roots(words, 256, want, k, h0)
    pid = os.fork()
    if pid == 0:
        got = np.zeros_like(want)
        merkle_cpu.subtree_roots(words, 256, got, k, h0)
        os._exit(0 if (got == want).all() else 3)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="no threading layer without the JIT")
def test_subtree_roots_in_a_child_forked_after_the_threading_layer_started():
    """Called directly, the parallel kernel terminated a child forked after
    GNU OpenMP started (SIGTERM, no exception); the launcher hashes serially
    there, as the graph's commitments always did, with the parent's roots."""
    res = subprocess.run([sys.executable, "-c", _FORKED_CHILD], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "0", res.stdout + res.stderr
