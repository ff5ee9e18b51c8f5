// zorch_nb: LogUp-GKR layer transitions (dense fold, jagged transition).
// Preceded by the field preamble and monty.cuh (see kernels/cuda_source.py);
// the Numba twin is kernels/gkr_scalar.py, the launcher kernels/gkr_cupy.py.
//
// A node i carries the child fractions n0[i]/d0[i] and n1[i]/d1[i]; folding
// it gives N = n0 d1 + n1 d0, D = d0 d1.  Every value is a Montgomery word in
// [0, p); extension values are four words (coefficients of 1, x, x^2, x^3,
// modulus x^4 - W).  Template parameters NE / DE say whether the numerator /
// denominator pair is extension; N is extension if either is, D if DE.  Base
// values travel in .c0 of a zorch_ext4.  VEC selects 8/16-byte vector loads
// and stores (the launcher sets it when every pointer is 16-byte aligned).
//
// The per-slot functions are __host__ __device__ so the host test harness
// (tests/test_gkr_cuda_host.py) runs exactly this text with g++.

#ifdef __CUDA_ARCH__
#define ZORCH_GKR_DEVICE 1
#else
#define ZORCH_GKR_DEVICE 0
#endif

// s * u_k + t * v_k per coefficient: two products < 2p^2 < p 2^32, so
// zorch_monty_reduce (input range [0, p 2^32)) applies once per coefficient.
ZORCH_HD zorch_ext4 zorch_gkr_scale2(zorch_u32 s, zorch_ext4 u, zorch_u32 t, zorch_ext4 v) {
    const zorch_u64 s64 = s, t64 = t;
    zorch_ext4 r = {zorch_monty_reduce(s64 * u.c0 + t64 * v.c0),
                    zorch_monty_reduce(s64 * u.c1 + t64 * v.c1),
                    zorch_monty_reduce(s64 * u.c2 + t64 * v.c2),
                    zorch_monty_reduce(s64 * u.c3 + t64 * v.c3)};
    return r;
}

struct zorch_gkr_frac { zorch_ext4 n, d; };

// The neutral fraction 0/1 (0 and the Montgomery word of 1; extension values
// in coefficient 0).
ZORCH_HD zorch_gkr_frac zorch_gkr_neutral() {
    const zorch_gkr_frac r = {{0u, 0u, 0u, 0u}, {ZORCH_R_MOD_P, 0u, 0u, 0u}};
    return r;
}

// Fraction sum of a node's children n0/d0 + n1/d1.  Reductions per node:
// BB 2, BE 4 + 7, EB 4 + 1, EE 6 + 4 + 4 (see kernels/gkr_scalar.py).
template <int NE, int DE>
ZORCH_HD zorch_gkr_frac zorch_gkr_fold(zorch_ext4 n0, zorch_ext4 n1, zorch_ext4 d0, zorch_ext4 d1) {
    zorch_gkr_frac r = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}};
    if constexpr (!NE && !DE) {
        // n0 d1 + n1 d0 < 2p^2 < p 2^32: one reduction.
        r.n.c0 = zorch_monty_reduce((zorch_u64)n0.c0 * d1.c0 + (zorch_u64)n1.c0 * d0.c0);
        r.d.c0 = zorch_mont_mul(d0.c0, d1.c0);
    } else if constexpr (!NE && DE) {
        r.n = zorch_gkr_scale2(n0.c0, d1, n1.c0, d0);
        r.d = zorch_ext4_reduce4(zorch_ext4_dot(d0, d1, zorch_ext4_wrap(d1)));
    } else if constexpr (NE && !DE) {
        r.n = zorch_gkr_scale2(d1.c0, n0, d0.c0, n1);
        r.d.c0 = zorch_mont_mul(d0.c0, d1.c0);
    } else {
        const zorch_ext4 w0 = zorch_ext4_wrap(d0), w1 = zorch_ext4_wrap(d1);
        const zorch_wide4 x = zorch_ext4_dot(n0, d1, w1);  // each < 4p^2
        const zorch_wide4 y = zorch_ext4_dot(n1, d0, w0);
        // below_pr(x) + below_pr(y) < 2 p 2^32: one reduction per coefficient.
        zorch_wide4 s;
        s.c0 = zorch_below_pr(x.c0) + zorch_below_pr(y.c0);
        s.c1 = zorch_below_pr(x.c1) + zorch_below_pr(y.c1);
        s.c2 = zorch_below_pr(x.c2) + zorch_below_pr(y.c2);
        s.c3 = zorch_below_pr(x.c3) + zorch_below_pr(y.c3);
        r.n = zorch_ext4_reduce4(s);
        r.d = zorch_ext4_reduce4(zorch_ext4_dot(d0, d1, w1));
    }
    return r;
}

// Element i of an MLE (E: extension), its words read mod p (zorch_canonical:
// user layers may hold words >= p).  Extension elements are 16 bytes, one
// uint4 load when VEC (the array is 16-byte aligned).
template <int E, bool VEC>
ZORCH_HD zorch_ext4 zorch_gkr_load(const zorch_u32* p, zorch_u64 i) {
    zorch_ext4 v = {0u, 0u, 0u, 0u};
    if constexpr (E) {
        v = zorch_ext4_canonical(zorch_ext4_load_vec(p, i, VEC));
    } else {
        v.c0 = zorch_canonical(p[i]);
    }
    return v;
}

// Elements 2k and 2k + 1 (a node pair of a dense layer): one 8-byte load for
// base data, two 16-byte loads for extension data when VEC.
template <int E, bool VEC>
ZORCH_HD void zorch_gkr_load_pair(const zorch_u32* p, zorch_u64 k, zorch_ext4* a, zorch_ext4* b) {
#if ZORCH_GKR_DEVICE
    if constexpr (!E && VEC) {
        const uint2 w = reinterpret_cast<const uint2*>(p)[k];
        *a = {zorch_canonical(w.x), 0u, 0u, 0u};
        *b = {zorch_canonical(w.y), 0u, 0u, 0u};
        return;
    }
#endif
    *a = zorch_gkr_load<E, VEC>(p, 2 * k);
    *b = zorch_gkr_load<E, VEC>(p, 2 * k + 1);
}

template <int E, bool VEC>
ZORCH_HD void zorch_gkr_store(zorch_u32* p, zorch_u64 i, zorch_ext4 v) {
    if constexpr (E) {
        zorch_ext4_store_vec(p, i, v, VEC);
    } else {
        p[i] = v.c0;
    }
}

template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_store_slot(zorch_u64 q, zorch_gkr_frac c0, zorch_gkr_frac c1,
                                   zorch_u32* on0, zorch_u32* on1, zorch_u32* od0, zorch_u32* od1) {
    constexpr int OE = NE || DE;  // output numerators are extension if any input is
    zorch_gkr_store<OE, VEC>(on0, q, c0.n);
    zorch_gkr_store<OE, VEC>(on1, q, c1.n);
    zorch_gkr_store<DE, VEC>(od0, q, c0.d);
    zorch_gkr_store<DE, VEC>(od1, q, c1.d);
}

// Dense slot k: the fraction sums of nodes 2k (child 0) and 2k + 1 (child 1).
template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_dense_fold2(zorch_u64 k, const zorch_u32* n0, const zorch_u32* n1,
                                    const zorch_u32* d0, const zorch_u32* d1,
                                    zorch_gkr_frac* c0, zorch_gkr_frac* c1) {
    zorch_ext4 a0, a1, b0, b1, e0, e1, f0, f1;  // n0, n1, d0, d1 at nodes 2k / 2k + 1
    zorch_gkr_load_pair<NE, VEC>(n0, k, &a0, &a1);
    zorch_gkr_load_pair<NE, VEC>(n1, k, &b0, &b1);
    zorch_gkr_load_pair<DE, VEC>(d0, k, &e0, &e1);
    zorch_gkr_load_pair<DE, VEC>(d1, k, &f0, &f1);
    *c0 = zorch_gkr_fold<NE, DE>(a0, b0, e0, f0);
    *c1 = zorch_gkr_fold<NE, DE>(a1, b1, e1, f1);
}

template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_dense_slot(zorch_u64 k, const zorch_u32* n0, const zorch_u32* n1,
                                   const zorch_u32* d0, const zorch_u32* d1, zorch_u32* on0,
                                   zorch_u32* on1, zorch_u32* od0, zorch_u32* od1) {
    zorch_gkr_frac c0, c1;
    zorch_gkr_dense_fold2<NE, DE, VEC>(k, n0, n1, d0, d1, &c0, &c1);
    zorch_gkr_store_slot<NE, DE, VEC>(k, c0, c1, on0, on1, od0, od1);
}

// ---- fused dense pyramid -------------------------------------------------
// One launch folds up to ZORCH_GKR_MAX_FUSED layers.  A block owns a tile of
// T consecutive slots of the first layer it writes (2T nodes of the input
// layer): those slots depend on nothing outside the tile, and neither do the
// T/2, T/4, ... slots below them.  Step 1 reads the input from global memory;
// every step writes its slots to that layer's global buffer (a GKR prover
// needs every layer) and, except the last, to shared memory, from which the
// next step reads.  So a launch of K layers reads its input layer once and
// writes each of its K layers once -- the compulsory bytes -- instead of
// re-reading K - 1 intermediate layers.  After step 1 the numerators are
// extension iff the outputs are (OE = NE || DE): later steps fold in mode
// <OE, DE>.  Shared memory is double-buffered: A holds T slots, B T/2; step l
// reads one and writes the other, and a __syncthreads() separates steps.

// Words of one slot (n0, n1, d0, d1) of a layer with output mode <OE, DE>.
template <int OE, int DE>
struct zorch_gkr_tile_shape {
    static constexpr unsigned int words = 2u * (OE ? 4u : 1u) + 2u * (DE ? 4u : 1u);
    // Slots per tile: the largest power of two with 1.5 T slots <= 6144 words
    // (24 KiB of shared memory, so 8 blocks of 256 threads fit on an SM).
    static constexpr unsigned int slots =
        words == 4u ? ZORCH_GKR_TILE_SLOTS_BASE : ZORCH_GKR_TILE_SLOTS_EXT;
    static_assert(3u * slots * words / 2u <= 6144u, "tile exceeds 24 KiB of shared memory");
};

// ZORCH_GKR_MAX_FUSED, the tile slots above, ZORCH_GKR_MAX_TAIL,
// ZORCH_GKR_TAIL_THREADS and ZORCH_GKR_CHUNK come from the preamble
// (launch_config.gkr_cuda_defines), so the Python plans use the same values.
#ifndef ZORCH_GKR_MAX_FUSED
#error "gkr.cu is built through cuda_source.assemble (its preamble defines the launch constants)"
#endif

// Output pointers of the fused layers, passed by value (layer l: on0, on1, od0, od1).
struct zorch_gkr_layers { zorch_u32* p[ZORCH_GKR_MAX_FUSED][4]; };

// Slot j of the four MLEs of a shared-memory buffer of `cap` slots at `buf`
// (n0 | n1 | d0 | d1, each `cap` elements): the pointers are recomputed from
// scalars, never kept in an indexed array (that would live in local memory).
#ifdef __CUDACC__
#define ZORCH_GKR_MEMBER __host__ __device__ __forceinline__
#else
#define ZORCH_GKR_MEMBER inline  // ZORCH_HD's `static` is not allowed on members
#endif

template <int OE, int DE>
struct zorch_gkr_tile_buf {
    zorch_u32* buf;
    unsigned int cap;
    ZORCH_GKR_MEMBER zorch_u32* n0() const { return buf; }
    ZORCH_GKR_MEMBER zorch_u32* n1() const { return buf + cap * (OE ? 4u : 1u); }
    ZORCH_GKR_MEMBER zorch_u32* d0() const { return buf + 2u * cap * (OE ? 4u : 1u); }
    ZORCH_GKR_MEMBER zorch_u32* d1() const { return d0() + cap * (DE ? 4u : 1u); }
};

// Step 1 of a tile, slot j: fold input slot base + j, write it to the first
// output layer and (when more steps follow, `keep`) to slot j of `dst`.
template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_tile_first(zorch_u64 base, unsigned int j, const zorch_u32* n0,
                                   const zorch_u32* n1, const zorch_u32* d0,
                                   const zorch_u32* d1, zorch_u32* const* out,
                                   zorch_gkr_tile_buf<NE || DE, DE> dst, bool keep) {
    zorch_gkr_frac c0, c1;
    zorch_gkr_dense_fold2<NE, DE, VEC>(base + j, n0, n1, d0, d1, &c0, &c1);
    zorch_gkr_store_slot<NE, DE, VEC>(base + j, c0, c1, out[0], out[1], out[2], out[3]);
    if (keep) zorch_gkr_store_slot<NE, DE, false>(j, c0, c1, dst.n0(), dst.n1(), dst.d0(), dst.d1());
}

// Later step, slot j: fold slot j of `src` (mode <OE, DE>), write global slot
// base + j of this step's layer and (when `keep`) slot j of `dst`.
template <int OE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_tile_next(zorch_u64 base, unsigned int j, zorch_gkr_tile_buf<OE, DE> src,
                                  zorch_u32* const* out, zorch_gkr_tile_buf<OE, DE> dst,
                                  bool keep) {
    zorch_gkr_frac c0, c1;
    zorch_gkr_dense_fold2<OE, DE, false>(j, src.n0(), src.n1(), src.d0(), src.d1(), &c0, &c1);
    zorch_gkr_store_slot<OE, DE, VEC>(base + j, c0, c1, out[0], out[1], out[2], out[3]);
    if (keep) zorch_gkr_store_slot<OE, DE, false>(j, c0, c1, dst.n0(), dst.n1(), dst.d0(), dst.d1());
}

// Shared buffers of a tile of t slots in `smem`: A (t slots) then B (t / 2).
// Step l >= 1 reads A and writes B when l is odd, the other way when even.
template <int OE, int DE>
ZORCH_HD zorch_gkr_tile_buf<OE, DE> zorch_gkr_tile_side(zorch_u32* smem, unsigned int t,
                                                        bool second) {
    zorch_gkr_tile_buf<OE, DE> r = {second ? smem + t * zorch_gkr_tile_shape<OE, DE>::words : smem,
                                    second ? t / 2u : t};
    return r;
}

// A whole tile on one thread: the serial twin of zorch_gkr_pyramid_dense's
// block loop (same functions, same order of steps), used by the host tests
// and by nothing on the device.  `scratch` holds 1.5 t slots.
template <int NE, int DE>
ZORCH_HD void zorch_gkr_tile_serial(zorch_u64 tile, unsigned int t, unsigned int nlayers,
                                    const zorch_u32* n0, const zorch_u32* n1,
                                    const zorch_u32* d0, const zorch_u32* d1,
                                    const zorch_gkr_layers* outs, zorch_u32* scratch) {
    constexpr int OE = NE || DE;
    unsigned int cnt = t;
    for (unsigned int j = 0; j < cnt; ++j)
        zorch_gkr_tile_first<NE, DE, false>(tile * t, j, n0, n1, d0, d1, outs->p[0],
                                            zorch_gkr_tile_side<OE, DE>(scratch, t, false),
                                            nlayers > 1u);
    for (unsigned int l = 1; l < nlayers; ++l) {
        cnt >>= 1;
        for (unsigned int j = 0; j < cnt; ++j)
            zorch_gkr_tile_next<OE, DE, false>(
                tile * cnt, j, zorch_gkr_tile_side<OE, DE>(scratch, t, !(l & 1u)), outs->p[l],
                zorch_gkr_tile_side<OE, DE>(scratch, t, l & 1u), l + 1u < nlayers);
    }
}

template <int NE, int DE, bool VEC>
ZORCH_HD zorch_gkr_frac zorch_gkr_fold_node(zorch_u64 i, const zorch_u32* n0, const zorch_u32* n1,
                                            const zorch_u32* d0, const zorch_u32* d1) {
    return zorch_gkr_fold<NE, DE>(zorch_gkr_load<NE, VEC>(n0, i), zorch_gkr_load<NE, VEC>(n1, i),
                                  zorch_gkr_load<DE, VEC>(d0, i), zorch_gkr_load<DE, VEC>(d1, i));
}

// First s with cum[s] > q, clamped to nb - 1 (binary search; cum is small and
// stays in L1/L2).  mid as lo + (hi - lo) / 2: (lo + hi) wraps past 2^32 (nb past
// 2^31 + 1), and the search then cycled forever.
ZORCH_HD unsigned int zorch_gkr_find_segment(const long long* cum, unsigned int nb, long long q) {
    unsigned int lo = 0, hi = nb - 1;
    while (lo < hi) {
        const unsigned int mid = lo + ((hi - lo) >> 1);
        if (cum[mid] > q) hi = mid; else lo = mid + 1;
    }
    return lo;
}

// Jagged output slot q (slot meanings: gkr_cpu.py, jagged_transition).  rc_cum / orc_cum hold the
// inclusive prefix sums of rc / orc (nb each); the input has in_width slots.  Counts outside
// the contract (device counts are never checked: that would synchronize) must still not read
// outside the input: a node at or past in_width (or before 0: a negative count's offsets
// wrap to huge unsigned values) is read as the neutral fraction instead.  Within the contract
// every node is below in_width, so this changes no byte.
template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_jagged_slot_at(zorch_u64 q, const int* rc, const int* orc,
                                       const long long* rc_cum, const long long* orc_cum,
                                       unsigned int nb, zorch_u64 in_width,
                                       const zorch_u32* n0, const zorch_u32* n1,
                                       const zorch_u32* d0, const zorch_u32* d1, zorch_u32* on0,
                                       zorch_u32* on1, zorch_u32* od0, zorch_u32* od1) {
    const long long qq = (long long)q;
    const zorch_gkr_frac neutral = zorch_gkr_neutral();
    zorch_gkr_frac c0 = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}}, c1 = c0;  // dead: all zero
    if (qq < orc_cum[nb - 1]) {
        const unsigned int s = zorch_gkr_find_segment(orc_cum, nb, qq);
        const long long rows = rc[s];
        const long long j = qq - (orc_cum[s] - orc[s]);
        c0 = neutral;  // live neutral padding unless j names a node pair
        c1 = neutral;
        const zorch_u64 e = (zorch_u64)(rc_cum[s] - rows + 2 * j);
        if (j < (rows + 1) / 2 && e < in_width) {
            c0 = zorch_gkr_fold_node<NE, DE, VEC>(e, n0, n1, d0, d1);
            if (2 * j + 1 < rows && e + 1 < in_width)
                c1 = zorch_gkr_fold_node<NE, DE, VEC>(e + 1, n0, n1, d0, d1);
        }
    }
    zorch_gkr_store_slot<NE, DE, VEC>(q, c0, c1, on0, on1, od0, od1);
}

// The same with prefix[0 .. nb) = inclusive sums of rc, prefix[nb .. 2nb) of orc.
template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_jagged_slot(zorch_u64 q, const int* rc, const int* orc,
                                    const long long* prefix, unsigned int nb,
                                    zorch_u64 in_width, const zorch_u32* n0, const zorch_u32* n1,
                                    const zorch_u32* d0, const zorch_u32* d1, zorch_u32* on0,
                                    zorch_u32* on1, zorch_u32* od0, zorch_u32* od1) {
    zorch_gkr_jagged_slot_at<NE, DE, VEC>(q, rc, orc, prefix, prefix + nb, nb, in_width, n0, n1,
                                          d0, d1, on0, on1, od0, od1);
}

// ---- block prefix sums ---------------------------------------------------
// A block of `nthreads` threads scans nb counts: thread t owns the contiguous
// run [lo, hi) of segments (the same split on the device and in the serial
// twin), sums it, the run totals are scanned across the block, and each
// thread writes the inclusive sums of its run.  Sums are int64: nb counts
// below 2^31 each cannot overflow.
ZORCH_HD void zorch_gkr_scan_run(unsigned int t, unsigned int nthreads, unsigned int nb,
                                 unsigned int* lo, unsigned int* hi) {
    // 64-bit: nb + nthreads - 1, t * per and lo + per pass 2^32 for nb near it
    const zorch_u64 per = ((zorch_u64)nb + nthreads - 1) / nthreads;
    const zorch_u64 a = (zorch_u64)t * per < nb ? (zorch_u64)t * per : nb;
    *lo = (unsigned int)a;
    *hi = (unsigned int)(a + per < nb ? a + per : nb);
}

ZORCH_HD long long zorch_gkr_run_sum(const int* x, unsigned int lo, unsigned int hi) {
    long long a = 0;
    for (unsigned int i = lo; i < hi; ++i) a += x[i];
    return a;
}

// out[i] = start + x[lo] + ... + x[i] for i in [lo, hi); `start` is the sum
// of every count before lo.
ZORCH_HD void zorch_gkr_run_write(const int* x, unsigned int lo, unsigned int hi,
                                  long long start, long long* out) {
    for (unsigned int i = lo; i < hi; ++i) {
        start += x[i];
        out[i] = start;
    }
}

// Serial twin of zorch_gkr_block_scan (host tests only).
ZORCH_HD void zorch_gkr_scan_serial(const int* x, long long* out, unsigned int nb,
                                    unsigned int nthreads) {
    long long start = 0;
    for (unsigned int t = 0; t < nthreads; ++t) {
        unsigned int lo, hi;
        zorch_gkr_scan_run(t, nthreads, nb, &lo, &hi);
        const long long own = zorch_gkr_run_sum(x, lo, hi);
        zorch_gkr_run_write(x, lo, hi, start, out);
        start += own;
    }
}

// ---- fused jagged tail -----------------------------------------------------
// The last transitions of a jagged schedule, once every remaining layer has
// at most a few thousand slots, run in ONE launch of one block: per layer
// the block scans the output counts, then folds all output slots.  A small
// layer cannot fill the GPU anyway, so the launches (two per transition
// otherwise) are what costs.  Every layer is written to its own buffer (a
// GKR prover needs each); layer l + 1 reads layer l back from global memory,
// which the block wrote before a __syncthreads() (visible to the block).

// Output layer l of a tail launch: its counts (device int32, nb), its four
// output MLEs (n0, n1, d0, d1) and its width.  Passed by value.
struct zorch_gkr_tail_layer {
    const int* orc;
    zorch_u32* p[4];
    zorch_u64 width;
};
struct zorch_gkr_tail { zorch_gkr_tail_layer l[ZORCH_GKR_MAX_TAIL]; };

// Slots first, first + stride, ... of tail layer l, whose input has counts rc,
// in_width slots and MLEs in[0..4) in mode <NE, DE>.  rc_cum / orc_cum: inclusive sums.
template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_tail_slots(unsigned int first, unsigned int stride,
                                   const zorch_gkr_tail_layer& out, const int* rc,
                                   const long long* rc_cum, const long long* orc_cum,
                                   unsigned int nb, zorch_u64 in_width, const zorch_u32* n0,
                                   const zorch_u32* n1, const zorch_u32* d0,
                                   const zorch_u32* d1) {
    for (zorch_u64 q = first; q < out.width; q += stride)
        zorch_gkr_jagged_slot_at<NE, DE, VEC>(q, rc, out.orc, rc_cum, orc_cum, nb, in_width, n0,
                                              n1, d0, d1, out.p[0], out.p[1], out.p[2],
                                              out.p[3]);
}

// Step l >= 0 of a tail: layer 0 reads the launch's input (mode <NE, DE>,
// in_width slots), layer l > 0 reads layer l - 1 (numerators extension if
// either input pair was: mode <NE || DE, DE>).  The prefix scratch holds two rows of nb:
// layer l's input sums are row l & 1 and its output sums row (l + 1) & 1, so
// layer l's output sums are layer l + 1's input sums.
template <int NE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_tail_step(unsigned int l, unsigned int first, unsigned int stride,
                                  const int* rc, long long* prefix, unsigned int nb,
                                  zorch_u64 in_width, const zorch_u32* n0, const zorch_u32* n1,
                                  const zorch_u32* d0, const zorch_u32* d1,
                                  const zorch_gkr_tail& tail) {
    const long long* rc_cum = prefix + (l & 1u) * (zorch_u64)nb;
    const long long* orc_cum = prefix + ((l + 1u) & 1u) * (zorch_u64)nb;
    if (l == 0) {
        zorch_gkr_tail_slots<NE, DE, VEC>(first, stride, tail.l[0], rc, rc_cum, orc_cum, nb,
                                          in_width, n0, n1, d0, d1);
    } else {
        const zorch_gkr_tail_layer& in = tail.l[l - 1];
        zorch_gkr_tail_slots<NE || DE, DE, VEC>(first, stride, tail.l[l], in.orc, rc_cum,
                                                orc_cum, nb, in.width, in.p[0], in.p[1],
                                                in.p[2], in.p[3]);
    }
}

// Serial twin of zorch_gkr_jagged_tail: the same steps, scans split over
// `nthreads` runs like the block's threads (host tests only).
template <int NE, int DE>
ZORCH_HD void zorch_gkr_tail_serial(const int* rc, long long* prefix, unsigned int nb,
                                    zorch_u64 in_width, const zorch_u32* n0, const zorch_u32* n1,
                                    const zorch_u32* d0, const zorch_u32* d1,
                                    const zorch_gkr_tail* tail, unsigned int nlayers,
                                    unsigned int nthreads) {
    zorch_gkr_scan_serial(rc, prefix, nb, nthreads);
    for (unsigned int l = 0; l < nlayers; ++l) {
        zorch_gkr_scan_serial(tail->l[l].orc, prefix + ((l + 1u) & 1u) * (zorch_u64)nb, nb,
                              nthreads);
        zorch_gkr_tail_step<NE, DE, false>(l, 0u, 1u, l ? tail->l[l - 1].orc : rc, prefix, nb,
                                           in_width, n0, n1, d0, d1, *tail);
    }
}

// ---- fused jagged chunk -----------------------------------------------------
// ZORCH_GKR_CHUNK (C) consecutive transitions of a jagged schedule in one
// launch (after one scan launch).  Within a segment a jagged layer is a binary
// tree over positions: position j of layer m + 1 holds the fraction sums
// F_m(2j), F_m(2j + 1) of positions 2j, 2j + 1 of layer m, where F_m(i) is the
// fold of node i when i < count_m (the segment's row count in layer m) and the
// neutral fraction 0/1 otherwise (as in gkr_cpu.py's jagged_transition: the neutral partner of
// an odd segment's last node, and live padding, are exactly that; folding a
// stored neutral node gives 0/1 again, byte for byte).  So slot q of the LAST
// layer, at position j of segment s, depends only on the 2^C leaves [2^C j,
// 2^C (j + 1)) of the input layer, and its subtree holds every node of the
// layers in between that it needs; each stored position belongs to exactly
// one such subtree (each step keeps orc >= ceil(rc / 2)).  A launch thus reads
// its input layer once and writes each of its C layers once: intermediate
// layers are never read back.
//
// Work split, for coalesced loads: G = 2^(C-1) consecutive lanes of a warp
// share one last-layer slot.  Lane `sub` folds the leaf pair of layer-1
// position p1 = G j + sub (so a warp reads 2 x 32 consecutive leaves of a
// segment, like the one-step kernel), stores that layer-1 node, and the
// group combines upwards with warp shuffles: at level m the lanes whose sub
// is a multiple of 2^(m-1) join their value with the one 2^(m-2) lanes up,
// store the level-m node and fold it.  Positions past a layer's count are
// neither stored nor folded (their value is neutral).  Dead slots (past a
// layer's total, up to its width) are zero-filled by a second grid-stride
// loop of the same launch.  The per-lane steps below are __host__ __device__;
// the serial twin runs them in lane order for the host tests.

#define ZORCH_GKR_CHUNK_LANES (1 << (ZORCH_GKR_CHUNK - 1))

// Counts of the input layer (cnt[0]) and of output layers 1..C; the output
// MLEs (n0, n1, d0, d1) and width of output layer m at p[m - 1], width[m - 1];
// the input layer's width.  Passed by value; prefix row m (nb int64) holds
// the inclusive sums of cnt[m].
//
// Counts outside the contract (device counts are never checked: that would
// synchronize) must still not touch memory outside the layers: a node at or
// past its layer's width -- or before 0, whose offset wraps to a huge
// unsigned value -- is read as neutral and not stored, and the live slots
// walked are cut to the last layer's width.  Within the contract every node
// is below its width, so these tests change no byte.
struct zorch_gkr_chunk {
    const int* cnt[ZORCH_GKR_CHUNK + 1];
    zorch_u32* p[ZORCH_GKR_CHUNK][4];
    zorch_u64 width[ZORCH_GKR_CHUNK];
    zorch_u64 in_width;
};

// Live slots of the last layer to walk: its total count, cut to [0, width].
ZORCH_HD long long zorch_gkr_chunk_total(const zorch_gkr_chunk& c, const long long* prefix,
                                         unsigned int nb) {
    const long long total = prefix[(zorch_u64)ZORCH_GKR_CHUNK * nb + nb - 1];
    const zorch_u64 width = c.width[ZORCH_GKR_CHUNK - 1];
    return total < 0 ? 0 : ((zorch_u64)total < width ? total : (long long)width);
}

// Where last-layer slot q sits: its segment s and position j (q < total).
ZORCH_HD void zorch_gkr_chunk_locate(const zorch_gkr_chunk& c, const long long* prefix,
                                     unsigned int nb, long long q, unsigned int* s,
                                     long long* j) {
    const long long* cum = prefix + (zorch_u64)ZORCH_GKR_CHUNK * nb;
    *s = zorch_gkr_find_segment(cum, nb, q);
    *j = q - (cum[*s] - c.cnt[ZORCH_GKR_CHUNK][*s]);
}

// Level 1 of lane position p1 of segment s: F_0 of input positions 2 p1 and
// 2 p1 + 1 (input mode <NE, DE>), the node stored at layer 1 when p1 is below
// its count; returns F_1(p1).
template <int NE, int DE, bool VEC>
ZORCH_HD zorch_gkr_frac zorch_gkr_chunk_level1(const zorch_gkr_chunk& c, const long long* prefix,
                                               unsigned int nb, unsigned int s, long long p1,
                                               const zorch_u32* n0, const zorch_u32* n1,
                                               const zorch_u32* d0, const zorch_u32* d1) {
    const long long cnt1 = c.cnt[1][s];
    if (p1 >= cnt1) return zorch_gkr_neutral();
    const long long cnt0 = c.cnt[0][s];
    const zorch_u64 e = (zorch_u64)(prefix[s] - cnt0 + 2 * p1);  // input slot of node 2 p1
    zorch_gkr_frac f0 = zorch_gkr_neutral(), f1 = zorch_gkr_neutral();
    if (2 * p1 < cnt0 && e < c.in_width) f0 = zorch_gkr_fold_node<NE, DE, VEC>(e, n0, n1, d0, d1);
    if (2 * p1 + 1 < cnt0 && e < c.in_width && e + 1 < c.in_width)
        f1 = zorch_gkr_fold_node<NE, DE, VEC>(e + 1, n0, n1, d0, d1);
    zorch_u32* const* out = c.p[0];
    const zorch_u64 slot = (zorch_u64)(prefix[(zorch_u64)nb + s] - cnt1 + p1);
    if (slot < c.width[0])
        zorch_gkr_store_slot<NE || DE, DE, VEC>(slot, f0, f1, out[0], out[1], out[2], out[3]);
    return zorch_gkr_fold<NE || DE, DE>(f0.n, f1.n, f0.d, f1.d);
}

// Level m >= 2 at position p of segment s from the two child values (mode
// <OE, DE>): the node is stored at layer m when p is below its count (always
// for the last layer, whose slot q is live); returns F_m(p) (unused at m = C).
template <int OE, int DE, bool VEC>
ZORCH_HD zorch_gkr_frac zorch_gkr_chunk_up(const zorch_gkr_chunk& c, const long long* prefix,
                                           unsigned int nb, int m, unsigned int s, long long p,
                                           zorch_gkr_frac f0, zorch_gkr_frac f1) {
    const long long cnt = c.cnt[m][s];
    if (p >= cnt) return zorch_gkr_neutral();
    zorch_u32* const* out = c.p[m - 1];
    const zorch_u64 slot = (zorch_u64)(prefix[(zorch_u64)m * nb + s] - cnt + p);
    if (slot < c.width[m - 1])
        zorch_gkr_store_slot<OE, DE, VEC>(slot, f0, f1, out[0], out[1], out[2], out[3]);
    if (m == ZORCH_GKR_CHUNK) return f0;  // the last layer's value is not needed
    return zorch_gkr_fold<OE, DE>(f0.n, f1.n, f0.d, f1.d);
}

// Dead-slot fill of item g: slot g of every output layer where it is dead.
template <int OE, int DE, bool VEC>
ZORCH_HD void zorch_gkr_chunk_dead(zorch_u64 g, const zorch_gkr_chunk& c, const long long* prefix,
                                   unsigned int nb) {
    const zorch_gkr_frac dead = {{0u, 0u, 0u, 0u}, {0u, 0u, 0u, 0u}};
    for (int m = 1; m <= ZORCH_GKR_CHUNK; ++m) {
        const long long total = prefix[(zorch_u64)m * nb + nb - 1];
        if ((long long)g >= total && g < c.width[m - 1])
            zorch_gkr_store_slot<OE, DE, VEC>(g, dead, dead, c.p[m - 1][0], c.p[m - 1][1],
                                              c.p[m - 1][2], c.p[m - 1][3]);
    }
}

// Serial twin of zorch_gkr_jagged_chunk_scan + zorch_gkr_jagged_chunk (host
// tests only): the same per-lane steps, each lane group in lane order.
template <int NE, int DE>
ZORCH_HD void zorch_gkr_chunk_serial(const zorch_gkr_chunk* c, long long* prefix,
                                     unsigned int nb, const zorch_u32* n0, const zorch_u32* n1,
                                     const zorch_u32* d0, const zorch_u32* d1, zorch_u64 items,
                                     unsigned int nthreads) {
    constexpr int OE = NE || DE, G = ZORCH_GKR_CHUNK_LANES;
    for (int m = 0; m <= ZORCH_GKR_CHUNK; ++m)
        zorch_gkr_scan_serial(c->cnt[m], prefix + (zorch_u64)m * nb, nb, nthreads);
    const long long total = zorch_gkr_chunk_total(*c, prefix, nb);
    for (long long q = 0; q < total; ++q) {
        unsigned int s;
        long long j;
        zorch_gkr_chunk_locate(*c, prefix, nb, q, &s, &j);
        zorch_gkr_frac v[G];
        for (int sub = 0; sub < G; ++sub)
            v[sub] = zorch_gkr_chunk_level1<NE, DE, false>(*c, prefix, nb, s, j * G + sub, n0,
                                                            n1, d0, d1);
        for (int m = 2, step = 1; m <= ZORCH_GKR_CHUNK; ++m, step *= 2)
            for (int sub = 0; sub < G; sub += 2 * step)
                v[sub] = zorch_gkr_chunk_up<OE, DE, false>(*c, prefix, nb, m, s,
                                                           (j * G + sub) >> (m - 1), v[sub],
                                                           v[sub + step]);
    }
    for (zorch_u64 g = 0; g < items; ++g) zorch_gkr_chunk_dead<OE, DE, false>(g, *c, prefix, nb);
}

#ifdef __CUDACC__
#define ZORCH_GKR_GRID_STRIDE(i, n) \
    for (zorch_u64 i = (zorch_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (zorch_u64)blockDim.x * gridDim.x)

// Dense transition: half = L / 2 output slots.
template <int NE, int DE, bool VEC>
__global__ void zorch_gkr_fold_dense(const zorch_u32* __restrict__ n0,
                                     const zorch_u32* __restrict__ n1,
                                     const zorch_u32* __restrict__ d0,
                                     const zorch_u32* __restrict__ d1,
                                     zorch_u32* __restrict__ on0, zorch_u32* __restrict__ on1,
                                     zorch_u32* __restrict__ od0, zorch_u32* __restrict__ od1,
                                     zorch_u64 half) {
    ZORCH_GKR_GRID_STRIDE(k, half) {
        zorch_gkr_dense_slot<NE, DE, VEC>(k, n0, n1, d0, d1, on0, on1, od0, od1);
    }
}

// Fused dense pyramid: nlayers (<= ZORCH_GKR_MAX_FUSED, <= log2(t) + 1)
// transitions of a layer whose first output layer has gridDim.x * t slots, t
// = min(tile slots, half) a power of two (see the comment above
// zorch_gkr_tile_shape).  blockDim.x threads stride over each step's slots.
template <int NE, int DE, bool VEC>
__global__ void zorch_gkr_pyramid_dense(const zorch_u32* __restrict__ n0,
                                        const zorch_u32* __restrict__ n1,
                                        const zorch_u32* __restrict__ d0,
                                        const zorch_u32* __restrict__ d1,
                                        const zorch_gkr_layers outs, unsigned int t,
                                        unsigned int nlayers) {
    constexpr int OE = NE || DE;
    using shape = zorch_gkr_tile_shape<OE, DE>;
    __shared__ __align__(16) zorch_u32 smem[3u * shape::slots * shape::words / 2u];
    const zorch_u64 tile = blockIdx.x;
    unsigned int cnt = t;
    for (unsigned int j = threadIdx.x; j < cnt; j += blockDim.x)
        zorch_gkr_tile_first<NE, DE, VEC>(tile * t, j, n0, n1, d0, d1, outs.p[0],
                                          zorch_gkr_tile_side<OE, DE>(smem, t, false),
                                          nlayers > 1u);
    for (unsigned int l = 1; l < nlayers; ++l) {
        __syncthreads();  // step l - 1 has written all of this step's source
        cnt >>= 1;
        const zorch_gkr_tile_buf<OE, DE> src = zorch_gkr_tile_side<OE, DE>(smem, t, !(l & 1u));
        const zorch_gkr_tile_buf<OE, DE> dst = zorch_gkr_tile_side<OE, DE>(smem, t, l & 1u);
        for (unsigned int j = threadIdx.x; j < cnt; j += blockDim.x)
            zorch_gkr_tile_next<OE, DE, VEC>(tile * cnt, j, src, outs.p[l], dst,
                                             l + 1u < nlayers);
    }
}

// Jagged transition over width output slots of an input of in_width slots;
// prefix from zorch_gkr_jagged_scan.
template <int NE, int DE, bool VEC>
__global__ void zorch_gkr_jagged(const int* __restrict__ rc, const int* __restrict__ orc,
                                 const long long* __restrict__ prefix, unsigned int nb,
                                 const zorch_u32* __restrict__ n0,
                                 const zorch_u32* __restrict__ n1,
                                 const zorch_u32* __restrict__ d0,
                                 const zorch_u32* __restrict__ d1,
                                 zorch_u32* __restrict__ on0, zorch_u32* __restrict__ on1,
                                 zorch_u32* __restrict__ od0, zorch_u32* __restrict__ od1,
                                 zorch_u64 width, zorch_u64 in_width) {
    ZORCH_GKR_GRID_STRIDE(q, width) {
        zorch_gkr_jagged_slot<NE, DE, VEC>(q, rc, orc, prefix, nb, in_width, n0, n1, d0, d1,
                                           on0, on1, od0, od1);
    }
}

// Inclusive prefix sums of x[0 .. nb) into out by the whole block
// (blockDim.x a multiple of 32, at most 1024): run sums (zorch_gkr_scan_run),
// warps scan them with shuffles, warp 0 scans the warp totals.  Ends with a
// __syncthreads(): out is complete for the block and warp_sums free again.
__device__ __forceinline__ void zorch_gkr_block_scan(const int* x, long long* out,
                                                     unsigned int nb) {
    __shared__ long long warp_sums[32];
    const unsigned int t = threadIdx.x, lane = t & 31u, warp = t >> 5;
    unsigned int lo, hi;
    zorch_gkr_scan_run(t, blockDim.x, nb, &lo, &hi);
    const long long own = zorch_gkr_run_sum(x, lo, hi);
    long long a = own;
    for (unsigned int off = 1; off < 32; off <<= 1) {
        const long long u = __shfl_up_sync(0xffffffffu, a, off);
        if (lane >= off) a += u;
    }
    if (lane == 31u) warp_sums[warp] = a;
    __syncthreads();
    if (warp == 0) {
        long long w = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0;
        for (unsigned int off = 1; off < 32; off <<= 1) {
            const long long u = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += u;
        }
        warp_sums[lane] = w;
    }
    __syncthreads();
    // exclusive start of this run: inclusive warp-local sum minus own, plus earlier warps
    zorch_gkr_run_write(x, lo, hi, a - own + (warp ? warp_sums[warp - 1] : 0), out);
    __syncthreads();
}

// Inclusive prefix sums of rc and orc into prefix[0 .. nb) and prefix[nb ..
// 2nb), on the device (so device schedules need no synchronization).  One
// block of at most 1024 threads.
extern "C" __global__ void zorch_gkr_jagged_scan(const int* __restrict__ rc,
                                                 const int* __restrict__ orc,
                                                 long long* __restrict__ prefix,
                                                 unsigned int nb) {
    zorch_gkr_block_scan(rc, prefix, nb);
    zorch_gkr_block_scan(orc, prefix + nb, nb);
}

// Fused jagged tail: nlayers (<= ZORCH_GKR_MAX_TAIL) transitions of the
// layer (rc; n0, n1, d0, d1) in one block of ZORCH_GKR_TAIL_THREADS threads;
// prefix: 2 nb int64 scratch.  No __restrict__ on anything the kernel
// writes and reads back (prefix, the layers): a read-only (non-coherent)
// cached load could miss the block's own earlier stores.
template <int NE, int DE, bool VEC>
__global__ void __launch_bounds__(ZORCH_GKR_TAIL_THREADS)
zorch_gkr_jagged_tail(const int* rc, long long* prefix, unsigned int nb, const zorch_u32* n0,
                      const zorch_u32* n1, const zorch_u32* d0, const zorch_u32* d1,
                      zorch_u64 in_width, const zorch_gkr_tail tail, unsigned int nlayers) {
    zorch_gkr_block_scan(rc, prefix, nb);
    for (unsigned int l = 0; l < nlayers; ++l) {
        // Layer l - 1's slots (which read row (l + 1) & 1 as their input
        // sums) all finished before the __syncthreads() ending the last step.
        zorch_gkr_block_scan(tail.l[l].orc, prefix + ((l + 1u) & 1u) * (zorch_u64)nb, nb);
        zorch_gkr_tail_step<NE, DE, VEC>(l, threadIdx.x, blockDim.x,
                                         l ? tail.l[l - 1].orc : rc, prefix, nb, in_width, n0,
                                         n1, d0, d1, tail);
        __syncthreads();  // layer l is written before layer l + 1 reads it
    }
}

// Prefix sums of the C + 1 count rows of a jagged chunk into prefix (row m
// at m * nb), one block of at most 1024 threads.
extern "C" __global__ void zorch_gkr_jagged_chunk_scan(const zorch_gkr_chunk c,
                                                       long long* __restrict__ prefix,
                                                       unsigned int nb) {
    for (int m = 0; m <= ZORCH_GKR_CHUNK; ++m)
        zorch_gkr_block_scan(c.cnt[m], prefix + (zorch_u64)m * nb, nb);
}

// Shuffle of a whole fraction (8 words) from the lane `delta` up.
__device__ __forceinline__ zorch_gkr_frac zorch_gkr_shfl_down(zorch_gkr_frac v, unsigned int delta) {
    zorch_gkr_frac r;
    r.n.c0 = __shfl_down_sync(0xffffffffu, v.n.c0, delta);
    r.n.c1 = __shfl_down_sync(0xffffffffu, v.n.c1, delta);
    r.n.c2 = __shfl_down_sync(0xffffffffu, v.n.c2, delta);
    r.n.c3 = __shfl_down_sync(0xffffffffu, v.n.c3, delta);
    r.d.c0 = __shfl_down_sync(0xffffffffu, v.d.c0, delta);
    r.d.c1 = __shfl_down_sync(0xffffffffu, v.d.c1, delta);
    r.d.c2 = __shfl_down_sync(0xffffffffu, v.d.c2, delta);
    r.d.c3 = __shfl_down_sync(0xffffffffu, v.d.c3, delta);
    return r;
}

// Fused jagged chunk.  Loop 1: warps stride over lane items t (G per live
// last-layer slot; whole warps iterate together, so every shuffle has all 32
// lanes); loop 2: dead fill over items = the largest output width.
// blockDim.x must be a multiple of 32.
template <int NE, int DE, bool VEC>
__global__ void zorch_gkr_jagged_chunk(const zorch_gkr_chunk c,
                                       const long long* __restrict__ prefix, unsigned int nb,
                                       const zorch_u32* __restrict__ n0,
                                       const zorch_u32* __restrict__ n1,
                                       const zorch_u32* __restrict__ d0,
                                       const zorch_u32* __restrict__ d1, zorch_u64 items) {
    constexpr int OE = NE || DE, G = ZORCH_GKR_CHUNK_LANES;
    const zorch_u64 lane_items = (zorch_u64)zorch_gkr_chunk_total(c, prefix, nb) * G;
    const unsigned int sub = threadIdx.x % G;
    const zorch_u64 stride = (zorch_u64)blockDim.x * gridDim.x;
    for (zorch_u64 t0 = (zorch_u64)blockIdx.x * blockDim.x + (threadIdx.x & ~31u);
         t0 < lane_items; t0 += stride) {  // t0: the warp's first item (uniform in the warp)
        const zorch_u64 t = t0 + (threadIdx.x & 31u);
        const bool live = t < lane_items;
        unsigned int s = 0;
        long long j = 0;
        zorch_gkr_frac v = zorch_gkr_neutral();
        if (live) {
            zorch_gkr_chunk_locate(c, prefix, nb, (long long)(t / G), &s, &j);
            v = zorch_gkr_chunk_level1<NE, DE, VEC>(c, prefix, nb, s, j * G + sub, n0, n1, d0,
                                                    d1);
        }
        for (int m = 2, step = 1; m <= ZORCH_GKR_CHUNK; ++m, step *= 2) {
            const zorch_gkr_frac w = zorch_gkr_shfl_down(v, step);
            if (live && sub % (2 * step) == 0)
                v = zorch_gkr_chunk_up<OE, DE, VEC>(c, prefix, nb, m, s,
                                                    (j * G + sub) >> (m - 1), v, w);
        }
    }
    ZORCH_GKR_GRID_STRIDE(g, items) { zorch_gkr_chunk_dead<OE, DE, VEC>(g, c, prefix, nb); }
}

// Explicit instantiations: every variant the launcher may ask for is compiled
// (and checked by nvcc in CI); kernels/gkr_cupy.py names them the same way.
#define ZORCH_GKR_INSTANTIATE(NE, DE, VEC)                                                   \
    template __global__ void zorch_gkr_fold_dense<NE, DE, VEC>(                              \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__,                       \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__, zorch_u32* __restrict__, \
        zorch_u32* __restrict__, zorch_u32* __restrict__, zorch_u32* __restrict__, zorch_u64); \
    template __global__ void zorch_gkr_jagged<NE, DE, VEC>(                                  \
        const int* __restrict__, const int* __restrict__, const long long* __restrict__,     \
        unsigned int, const zorch_u32* __restrict__, const zorch_u32* __restrict__,           \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__, zorch_u32* __restrict__, \
        zorch_u32* __restrict__, zorch_u32* __restrict__, zorch_u32* __restrict__, zorch_u64, \
        zorch_u64);                                                                          \
    template __global__ void zorch_gkr_pyramid_dense<NE, DE, VEC>(                           \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__,                       \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__,                       \
        const zorch_gkr_layers, unsigned int, unsigned int);                                 \
    template __global__ void zorch_gkr_jagged_tail<NE, DE, VEC>(                             \
        const int*, long long*, unsigned int, const zorch_u32*, const zorch_u32*,            \
        const zorch_u32*, const zorch_u32*, zorch_u64, const zorch_gkr_tail, unsigned int);  \
    template __global__ void zorch_gkr_jagged_chunk<NE, DE, VEC>(                            \
        const zorch_gkr_chunk, const long long* __restrict__, unsigned int,                  \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__,                       \
        const zorch_u32* __restrict__, const zorch_u32* __restrict__, zorch_u64);
ZORCH_GKR_INSTANTIATE(0, 0, false)
ZORCH_GKR_INSTANTIATE(0, 0, true)
ZORCH_GKR_INSTANTIATE(0, 1, false)
ZORCH_GKR_INSTANTIATE(0, 1, true)
ZORCH_GKR_INSTANTIATE(1, 0, false)
ZORCH_GKR_INSTANTIATE(1, 0, true)
ZORCH_GKR_INSTANTIATE(1, 1, false)
ZORCH_GKR_INSTANTIATE(1, 1, true)
#endif  // __CUDACC__
