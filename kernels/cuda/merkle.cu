// zorch_nb: SHA-256 Merkle trees of word buffers on the GPU (the graph's
// commitments): the tree of zorch_nb.graph_layout.merkle_root, nodes hashed
// as kernels/merkle_cpu.py hashes them (see there for the words of a 65-byte
// node: a prefix byte, then 16 big-endian payload words, in two blocks).
// Field-independent; assembled after the preamble like every unit.  `sha`
// holds FIPS 180-4's 64 round constants, then its 8 initial words
// (merkle_cpu.ROUND_CONSTANTS, merkle_cpu.INITIAL_HASH: one home for them).

ZORCH_HD zorch_u32 zorch_rotr(zorch_u32 x, int n) { return (x >> n) | (x << (32 - n)); }

ZORCH_HD zorch_u32 zorch_bswap(zorch_u32 v) {
    return (v << 24) | ((v & 0xFF00u) << 8) | ((v >> 8) & 0xFF00u) | (v >> 24);
}

// One block: st += compress(st, w); w[16] is the schedule, rolled in place.
ZORCH_HD void zorch_sha256_block(zorch_u32 st[8], zorch_u32 w[16], const zorch_u32* sha) {
    zorch_u32 a = st[0], b = st[1], c = st[2], d = st[3];
    zorch_u32 e = st[4], f = st[5], g = st[6], h = st[7];
    for (int r = 0; r < 64; ++r) {
        if (r >= 16) {  // w[r & 15] holds w[r - 16] until overwritten
            const zorch_u32 x = w[(r - 15) & 15], y = w[(r - 2) & 15];
            w[r & 15] += (zorch_rotr(x, 7) ^ zorch_rotr(x, 18) ^ (x >> 3)) + w[(r - 7) & 15]
                         + (zorch_rotr(y, 17) ^ zorch_rotr(y, 19) ^ (y >> 10));
        }
        const zorch_u32 t1 = h + (zorch_rotr(e, 6) ^ zorch_rotr(e, 11) ^ zorch_rotr(e, 25))
                             + ((e & f) ^ (~e & g)) + sha[r] + w[r & 15];
        const zorch_u32 t2 = (zorch_rotr(a, 2) ^ zorch_rotr(a, 13) ^ zorch_rotr(a, 22))
                             + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d;
    st[4] += e; st[5] += f; st[6] += g; st[7] += h;
}

// out = SHA-256(prefix byte || the 16 big-endian words p).
ZORCH_HD void zorch_merkle_node(const zorch_u32 p[16], zorch_u32 prefix, const zorch_u32* sha,
                                zorch_u32 out[8]) {
    zorch_u32 w[16];
    for (int i = 0; i < 8; ++i) out[i] = sha[64 + i];
    w[0] = (prefix << 24) | (p[0] >> 8);
    for (int j = 1; j < 16; ++j) w[j] = (p[j - 1] << 24) | (p[j] >> 8);
    zorch_sha256_block(out, w, sha);
    w[0] = (p[15] << 24) | 0x800000u;  // the last payload byte, then the 0x80 pad
    for (int j = 1; j < 15; ++j) w[j] = 0u;
    w[15] = 8u * 65u;  // the message length in bits
    zorch_sha256_block(out, w, sha);
}

#ifdef __CUDACC__
// Block b: the root of the subtree over leaves [b leaves, (b + 1) leaves) of
// the little-endian data `words` (16 words a leaf) into roots[8 b ..];
// leaves == blockDim.x, a power of two, at most ZORCH_MERKLE_LEAVES (the
// preamble's, launch_config.MERKLE_GPU_SUBTREE_LEAVES).  Each
// thread hashes a leaf into shared memory, then each level's nodes are read
// by the lower half of the threads before any is overwritten (a barrier
// between the reads and the writes of a level, and between levels).
extern "C" __global__ void zorch_merkle_subtrees(const zorch_u32* __restrict__ words,
                                                 const zorch_u32* __restrict__ sha_in,
                                                 zorch_u32* __restrict__ roots,
                                                 unsigned int leaves) {
    __shared__ zorch_u32 sha[72];
    __shared__ zorch_u32 level[ZORCH_MERKLE_LEAVES * 8];
    const unsigned int t = threadIdx.x;
    for (unsigned int i = t; i < 72u; i += blockDim.x) sha[i] = sha_in[i];
    __syncthreads();
    zorch_u32 p[16], d[8];
    const zorch_u32* leaf = words + ((zorch_u64)blockIdx.x * leaves + t) * 16u;
    for (int j = 0; j < 16; ++j) p[j] = zorch_bswap(leaf[j]);
    zorch_merkle_node(p, 0u, sha, d);
    for (int i = 0; i < 8; ++i) level[t * 8u + i] = d[i];
    for (unsigned int m = leaves / 2u; m >= 1u; m /= 2u) {
        __syncthreads();
        if (t < m) {
            for (int j = 0; j < 16; ++j) p[j] = level[t * 16u + j];
            zorch_merkle_node(p, 1u, sha, d);
        }
        __syncthreads();
        if (t < m)
            for (int i = 0; i < 8; ++i) level[t * 8u + i] = d[i];
    }
    if (t == 0u)
        for (int i = 0; i < 8; ++i) roots[(zorch_u64)blockIdx.x * 8u + i] = level[i];
}

// One tree level: above[8 i ..] = the node over below[16 i ..] (two digests),
// for i < count; grid-stride.
extern "C" __global__ void zorch_merkle_level(const zorch_u32* __restrict__ below,
                                              const zorch_u32* __restrict__ sha,
                                              zorch_u32* __restrict__ above, zorch_u64 count) {
    const zorch_u64 step = (zorch_u64)blockDim.x * gridDim.x;
    for (zorch_u64 i = (zorch_u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        zorch_u32 p[16], d[8];
        for (int j = 0; j < 16; ++j) p[j] = below[i * 16u + j];
        zorch_merkle_node(p, 1u, sha, d);
        for (int k = 0; k < 8; ++k) above[i * 8u + k] = d[k];
    }
}
#endif
