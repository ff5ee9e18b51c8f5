"""SHA-256 Merkle trees of word buffers on the CPU (the graph's commitments).

The tree is the one :func:`zorch_nb.graph_layout.merkle_root` documents:
leaves ``sha256(0x00 || 64-byte chunk)``, inner nodes ``sha256(0x01 || left
|| right)``.  Every node hashes a 65-byte message, two SHA-256 blocks of
fixed shape, so the kernels hash many nodes at once, one per vector lane
(lanes innermost in every loop), where :mod:`hashlib` hashed one node per
Python call (~0.5 us of call per 64 bytes).

Words
-----
A node's 64-byte payload is held as 16 big-endian words ``P`` (SHA-256's
reading of bytes): for a leaf, the byte-swapped little-endian data words;
for an inner node, its children's digests (8 words each) side by side, so
one level's ``(m, 8)`` digests reshaped to ``(m / 2, 16)`` are the next
level's payloads.  The one-byte prefix shifts the payload by a byte in the
message: block 1 is ``prefix << 24 | P[0] >> 8``, then ``P[j-1] << 24 |
P[j] >> 8``; block 2 is ``P[15] << 24 | 0x80 << 16``, zeros, and the
message length in bits (520).

The round constants and initial hash are FIPS 180-4's: the first 32 bits of
the fractional parts of the cube roots (square roots) of the first 64 (8)
primes, computed here with integer roots.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from . import cpu_threads, launch_config
from .jit import njit  # numba.njit, cache keyed on every kernel source
from .launch_checks import as_int, check_gkr_disjoint, check_words
from .vector_width import NoaliasCompiler

__all__ = ["ROUND_CONSTANTS", "INITIAL_HASH", "LANES", "node_digests", "reduce_levels",
           "subtree_roots"]


def _primes(count: int) -> list:
    out, k = [], 2
    while len(out) < count:
        if all(k % q for q in out if q * q <= k):
            out.append(k)
        k += 1
    return out


def _iroot(x: int, k: int) -> int:
    """``floor(x ** (1 / k))`` for a non-negative integer ``x``."""
    lo, hi = 0, 1 << (x.bit_length() // k + 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid ** k <= x:
            lo = mid
        else:
            hi = mid - 1
    return lo


#: ``K[t]``: fractional bits of the cube root of the ``t``-th prime.
ROUND_CONSTANTS = np.array([_iroot(q << 96, 3) & 0xFFFFFFFF for q in _primes(64)],
                           dtype=np.uint32)
#: ``H0[i]``: fractional bits of the square root of the ``i``-th prime.
INITIAL_HASH = np.array([_iroot(q << 64, 2) & 0xFFFFFFFF for q in _primes(8)],
                        dtype=np.uint32)
# Read-only: every graph commitment hashes with these two arrays, so a write
# through them (an `out=` given by mistake) would change every later root.
ROUND_CONSTANTS.flags.writeable = INITIAL_HASH.flags.writeable = False
#: Nodes hashed side by side (one vector lane each).
LANES = 32
_MESSAGE_BITS = np.uint32(8 * 65)


@njit(cache=True)
def _add(x):
    """A sum of a few words (computed in uint64: it never wraps) mod 2**32."""
    return np.uint32(x & np.uint64(0xFFFFFFFF))


@njit(cache=True)
def _rotr(x, n):
    return np.uint32((x >> np.uint32(n)) | np.uint32(x << np.uint32(32 - n)))


@njit(cache=True, pipeline_class=NoaliasCompiler)
def _compress(state, w, a_, e_, nb, k):
    """One SHA-256 block for lanes ``0 <= l < nb``: ``state`` (8, LANES) is
    updated from the message words ``w[0:16]`` (``w`` (64, LANES) receives
    the schedule); ``a_``/``e_`` (8, LANES) are rings: round ``r``'s ``a``
    is ``a_[(r + 3) & 7]``, its ``b, c, d`` the three rows before, and the
    round writes the next ``a`` over the row no round reads again (likewise
    ``e``).  Rings of 68 rows (every round's) ran 8% faster but took
    17 KiB a thread more; a rolled 16-row schedule ran 30% slower."""
    for i in range(4):
        for lane in range(nb):
            a_[3 - i, lane] = state[i, lane]
            e_[3 - i, lane] = state[4 + i, lane]
    for r in range(16, 64):
        for lane in range(nb):
            x, y = w[r - 15, lane], w[r - 2, lane]
            s0 = _rotr(x, 7) ^ _rotr(x, 18) ^ (x >> np.uint32(3))
            s1 = _rotr(y, 17) ^ _rotr(y, 19) ^ (y >> np.uint32(10))
            w[r, lane] = _add(np.uint64(w[r - 16, lane]) + s0 + w[r - 7, lane] + s1)
    for r in range(64):
        kr = k[r]
        r0, r1, r2, r3, r4 = r & 7, (r + 1) & 7, (r + 2) & 7, (r + 3) & 7, (r + 4) & 7
        for lane in range(nb):
            a, b, c, d = a_[r3, lane], a_[r2, lane], a_[r1, lane], a_[r0, lane]
            e, f, g, h = e_[r3, lane], e_[r2, lane], e_[r1, lane], e_[r0, lane]
            t1 = _add(np.uint64(h) + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25))
                      + ((e & f) ^ (~e & g)) + kr + w[r, lane])
            t2 = _add(np.uint64(_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22))
                      + ((a & b) ^ (a & c) ^ (b & c)))
            e_[r4, lane] = _add(np.uint64(d) + t1)
            a_[r4, lane] = _add(np.uint64(t1) + t2)
    for i in range(4):  # after round 63: a, b, c, d in rows 3, 2, 1, 0
        for lane in range(nb):
            state[i, lane] = _add(np.uint64(state[i, lane]) + a_[3 - i, lane])
            state[4 + i, lane] = _add(np.uint64(state[4 + i, lane]) + e_[3 - i, lane])


@njit(cache=True)
def _node_digests(payload, swap, prefix, out, k, h0):
    # the kernel of node_digests (its docstring); the shape checks stay here
    # too, as reduce_levels' kernel calls this one directly
    if out.shape[1] != 8 or payload.shape[0] < 16 * out.shape[0]:
        raise ValueError("node_digests: `out` must be (n, 8) and `payload` hold 16 n words")
    if k.shape[0] != 64 or h0.shape[0] != 8:
        raise ValueError("node_digests: `k` must be ROUND_CONSTANTS and `h0` INITIAL_HASH")
    st = np.empty((8, LANES), dtype=np.uint32)
    w = np.empty((64, LANES), dtype=np.uint32)
    a_ = np.empty((8, LANES), dtype=np.uint32)
    e_ = np.empty((8, LANES), dtype=np.uint32)
    pre = np.uint32(np.uint32(prefix) << np.uint32(24))
    tail = np.empty(LANES, dtype=np.uint32)  # block 2's first word per lane
    count = out.shape[0]
    for lo in range(0, count, LANES):
        nb = min(LANES, count - lo)
        for lane in range(nb):
            base = 16 * (lo + lane)
            prev = pre
            for j in range(16):
                v = payload[base + j]
                if swap:
                    v = np.uint32(((v & np.uint32(0xFF)) << np.uint32(24))
                                  | ((v & np.uint32(0xFF00)) << np.uint32(8))
                                  | ((v >> np.uint32(8)) & np.uint32(0xFF00))
                                  | (v >> np.uint32(24)))
                w[j, lane] = np.uint32(prev | (v >> np.uint32(8)))
                prev = np.uint32(v << np.uint32(24))
            tail[lane] = np.uint32(prev | np.uint32(0x800000))  # last byte, then 0x80
        for i in range(8):
            for lane in range(nb):
                st[i, lane] = h0[i]
        _compress(st, w, a_, e_, nb, k)
        for lane in range(nb):
            w[0, lane] = tail[lane]
            for j in range(1, 15):
                w[j, lane] = np.uint32(0)
            w[15, lane] = _MESSAGE_BITS
        _compress(st, w, a_, e_, nb, k)
        for lane in range(nb):
            for i in range(8):
                out[lo + lane, i] = st[i, lane]


@njit(cache=True)
def _reduce_levels(level, k, h0):
    # the kernel of reduce_levels (its docstring)
    m = level.shape[0]
    if m < 1 or m & (m - 1) or level.shape[1] != 8:
        raise ValueError("reduce_levels: `level` must be (m, 8) with m a power of two")
    flat = level.reshape(-1)
    while m > 1:
        m //= 2
        _node_digests(flat[:16 * m], False, 1, level[:m], k, h0)


@njit(parallel=True, cache=True)
def _subtree_roots(words, leaves, out, k, h0):
    # the kernel of subtree_roots (its docstring)
    if leaves < 1 or leaves & (leaves - 1) or out.shape[1] != 8 or \
            words.shape[0] < 16 * leaves * out.shape[0]:
        raise ValueError("subtree_roots: `leaves` must be a power of two, `out` (n, 8) and "
                         "`words` hold 16 leaves n words")
    for t in prange(out.shape[0]):
        level = np.empty((leaves, 8), dtype=np.uint32)
        _node_digests(words[16 * leaves * t:16 * leaves * (t + 1)], True, 0, level, k, h0)
        _reduce_levels(level, k, h0)
        for i in range(8):
            out[t, i] = level[0, i]


# The launchers: the kernels' arguments checked first (Numba's own errors for
# another dtype or number of dimensions name no argument, and a 64-bit
# buffer compiled a kernel of its own: it hashed each word's value as one
# 32-bit word where it fit, not the buffer's bytes, and neither above 2**32),
# then the kernel.


def _constants(where, k, h0, written, name):
    # (k and h0 are read by every node: an output over them changes them mid-run)
    for const, x in (("k", k), ("h0", h0)):
        check_words(where, const, x, 1)
        if np.may_share_memory(written, x):
            raise ValueError(f"{where}: argument `{name}` shares memory with `{const}`")


def _address(x):
    return x.__array_interface__["data"][0]


def node_digests(payload, swap, prefix, out, k, h0):
    """``out[i]`` (8 big-endian words) = SHA-256 of ``prefix || node i``,
    node ``i`` the 16 words ``payload[16 i : 16 i + 16]`` (byte-swapped
    first where ``swap``: little-endian data), for ``i < out.shape[0]``;
    serial, in lanes of LANES nodes.  All payloads of a lane batch are read
    before any digest is written, so ``out`` may overlap ``payload`` as one
    tree level over the one below (``out`` starting at or before the
    payload's first word); any other overlap is refused.

    ``payload``, ``k`` (ROUND_CONSTANTS) and ``h0`` (INITIAL_HASH): 1-d
    C-contiguous uint32 arrays; ``out``: a writeable C-contiguous ``(n, 8)``
    uint32 array; ``swap`` a bool; ``prefix`` a byte, ``0 <= prefix < 256``.

    Raises TypeError for another type or dtype, ValueError for another
    shape or layout, where ``payload`` holds fewer than ``16 n`` words, or
    for an overlap the kernel would read after writing.
    """
    where = "merkle_cpu.node_digests"
    check_words(where, "payload", payload, 1)
    check_words(where, "out", out, 2, writes=True)
    _constants(where, k, h0, out, "out")
    if not isinstance(swap, (bool, np.bool_)):
        raise TypeError(f"{where}: argument `swap` must be a bool, not {type(swap).__name__}")
    prefix = as_int(f"{where}: argument `prefix`", prefix, 0, 255)
    if out.size and payload.size and _address(out) > _address(payload) and \
            np.may_share_memory(out, payload):
        raise ValueError(f"{where}: argument `out` overlaps `payload` and starts after it: "
                         f"digests would overwrite payload words not yet read")
    _node_digests(payload, bool(swap), prefix, out, k, h0)


def reduce_levels(level, k, h0):
    """Hash the ``(m, 8)`` digests ``level`` (``m`` a power of two) up to
    their root, in place, level by level: the root ends in ``level[0]``
    (the other rows are overwritten).  ``level``: a writeable C-contiguous
    uint32 array; ``k`` and ``h0`` as :func:`node_digests` takes them.
    Raises ValueError for another ``m`` (it hashed a partial tree) or
    shape, TypeError for another dtype or type."""
    where = "merkle_cpu.reduce_levels"
    check_words(where, "level", level, 2, writes=True)
    _constants(where, k, h0, level, "level")
    _reduce_levels(level, k, h0)


def subtree_roots(words, leaves, out, k, h0):
    """``out[t]`` = root (8 big-endian words) of the Merkle subtree over
    leaves ``[t leaves, (t + 1) leaves)`` of the little-endian data
    ``words`` (16 words a leaf; ``leaves`` a power of two); subtrees in
    parallel, each with a scratch of ``leaves`` digests.

    ``words``: a 1-d C-contiguous uint32 array; ``out``: a writeable
    C-contiguous ``(n, 8)`` uint32 array sharing no memory with ``words``;
    ``k`` and ``h0`` as :func:`node_digests` takes them.  Up to
    ``MERKLE_CPU_SERIAL_WORDS`` words, and in a process forked after GNU
    OpenMP started, the subtrees are hashed serially on the calling thread
    (no threading layer: see :mod:`.cpu_threads`); else in parallel, one
    thread at a time in the process where the threading layer is not
    threadsafe.

    Raises TypeError for another type or dtype, ValueError for another
    shape, layout or ``leaves``, where ``words`` holds fewer than
    ``16 leaves n`` words, or where ``out`` overlaps ``words``.
    """
    where = "merkle_cpu.subtree_roots"
    check_words(where, "words", words, 1)
    check_words(where, "out", out, 2, writes=True)
    _constants(where, k, h0, out, "out")
    leaves = as_int(f"{where}: argument `leaves`", leaves, 1)
    check_gkr_disjoint(where, (("out", out),), (("words", words),))
    if words.size <= launch_config.MERKLE_CPU_SERIAL_WORDS or cpu_threads.forked_after_gnu_omp():
        kernel = cpu_threads.serial_twin(_subtree_roots)
    else:
        kernel = cpu_threads.sized(_subtree_roots, out.shape[0])
    kernel(words, leaves, out, k, h0)
