// zorch_nb: elementwise field kernels (base field and quartic extension).
// Preceded by the field preamble and monty.cuh (see kernels/cuda_source.py).
// Each kernel is a grid-stride loop over n elements of contiguous arrays; the
// launcher (kernels/field_cupy.py) has already broadcast and validated them.
// The per-element functions are __host__ __device__ so the CPU can check them;
// they read their operands mod p (zorch_canonical), as kernels/monty.py does.

ZORCH_HD zorch_u32 zorch_base_op1(int op, zorch_u32 a) {
    a = zorch_canonical(a);
    if (op == ZORCH_OP_NEG) return zorch_neg(a);
    if (op == ZORCH_OP_SQUARE) return zorch_mont_mul(a, a);
    return zorch_inv(a);
}

ZORCH_HD zorch_u32 zorch_base_op2(int op, zorch_u32 a, zorch_u32 b) {
    a = zorch_canonical(a);
    b = zorch_canonical(b);
    if (op == ZORCH_OP_ADD) return zorch_add(a, b);
    if (op == ZORCH_OP_SUB) return zorch_sub(a, b);
    return zorch_mont_mul(a, b);
}

ZORCH_HD zorch_ext4 zorch_ext4_op1(int op, zorch_ext4 a) {
    a = zorch_ext4_canonical(a);
    if (op == ZORCH_OP_NEG) return zorch_ext4_neg(a);
    if (op == ZORCH_OP_SQUARE) return zorch_ext4_mul(a, a);
    return zorch_ext4_inv(a);
}

ZORCH_HD zorch_ext4 zorch_ext4_op2(int op, zorch_ext4 a, zorch_ext4 b) {
    a = zorch_ext4_canonical(a);
    b = zorch_ext4_canonical(b);
    if (op == ZORCH_OP_ADD) return zorch_ext4_add(a, b);
    if (op == ZORCH_OP_SUB) return zorch_ext4_sub(a, b);
    return zorch_ext4_mul(a, b);
}

// a op s for the base element s taken as (s, 0, 0, 0), or s op a when
// base_first: the same canonical words as zorch_ext4_op2 on the embedding,
// without the products of its zeros (kernels/monty.py ext4_base_map2).
ZORCH_HD zorch_ext4 zorch_ext4_base_op2(int op, zorch_ext4 a, zorch_u32 s, int base_first) {
    a = zorch_ext4_canonical(a);
    s = zorch_canonical(s);
    if (op == ZORCH_OP_ADD) {
        a.c0 = zorch_add(a.c0, s);
    } else if (op == ZORCH_OP_SUB && base_first) {
        a.c0 = zorch_sub(s, a.c0);
        a.c1 = zorch_neg(a.c1);
        a.c2 = zorch_neg(a.c2);
        a.c3 = zorch_neg(a.c3);
    } else if (op == ZORCH_OP_SUB) {
        a.c0 = zorch_sub(a.c0, s);
    } else {
        a.c0 = zorch_mont_mul(a.c0, s);
        a.c1 = zorch_mont_mul(a.c1, s);
        a.c2 = zorch_mont_mul(a.c2, s);
        a.c3 = zorch_mont_mul(a.c3, s);
    }
    return a;
}

// Bit k of the 128-bit exponent e_hi * 2^64 + e_lo.
ZORCH_HD int zorch_exponent_bit(zorch_u64 e_hi, zorch_u64 e_lo, int k) {
    return (int)((k >= 64 ? e_hi >> (k - 64) : e_lo >> k) & 1ull);
}

// a^e for e = e_hi * 2^64 + e_lo < 2^nbits, left-to-right square and multiply.
ZORCH_HD zorch_u32 zorch_base_pow_e(zorch_u32 a, zorch_u64 e_hi, zorch_u64 e_lo, int nbits) {
    a = zorch_canonical(a);
    zorch_u32 r = ZORCH_R_MOD_P;
    for (int k = nbits - 1; k >= 0; --k) {
        r = zorch_mont_mul(r, r);
        if (zorch_exponent_bit(e_hi, e_lo, k)) r = zorch_mont_mul(r, a);
    }
    return r;
}

ZORCH_HD zorch_ext4 zorch_ext4_pow_e(zorch_ext4 a, zorch_u64 e_hi, zorch_u64 e_lo, int nbits) {
    a = zorch_ext4_canonical(a);
    zorch_ext4 r = {ZORCH_R_MOD_P, 0u, 0u, 0u};
    for (int k = nbits - 1; k >= 0; --k) {
        r = zorch_ext4_mul(r, r);
        if (zorch_exponent_bit(e_hi, e_lo, k)) r = zorch_ext4_mul(r, a);
    }
    return r;
}

// The one element r of r_deg words (1: a base element, embedded), which
// every thread of the fold and eq-split kernels reads.
ZORCH_HD zorch_ext4 zorch_element_of(const zorch_u32* r, int r_deg) {
    zorch_ext4 s = {r[0], 0u, 0u, 0u};
    if (r_deg == 4) {
        s.c1 = r[1];
        s.c2 = r[2];
        s.c3 = r[3];
    }
    return s;
}

// One multilinear fold lo + r (hi - lo) (kernels/monty.py base_fold,
// ext4_fold): the words of add(lo, mul(r, sub(hi, lo))), in one pass.
ZORCH_HD zorch_u32 zorch_base_fold(zorch_u32 lo, zorch_u32 hi, zorch_u32 r) {
    lo = zorch_canonical(lo);
    return zorch_add(lo, zorch_mont_mul(zorch_canonical(r), zorch_sub(zorch_canonical(hi), lo)));
}

// v_deg / r_deg 1: lo, hi / r are base elements in .c0 (the rest ignored),
// embedded; a base side makes the product 4 Montgomery products.
ZORCH_HD zorch_ext4 zorch_ext4_fold(zorch_ext4 lo, zorch_ext4 hi, zorch_ext4 r, int v_deg,
                                    int r_deg) {
    const zorch_ext4 zero = {0u, 0u, 0u, 0u};
    if (v_deg == 1) {
        lo.c1 = lo.c2 = lo.c3 = hi.c1 = hi.c2 = hi.c3 = 0u;
    }
    if (r_deg == 1) {
        r.c1 = r.c2 = r.c3 = 0u;
    }
    lo = zorch_ext4_canonical(lo);
    r = zorch_ext4_canonical(r);
    const zorch_ext4 d = zorch_ext4_sub(zorch_ext4_canonical(hi), lo);
    zorch_ext4 t = zero;
    if (v_deg == 1) {  // a base difference scales r
        t.c0 = zorch_mont_mul(r.c0, d.c0);
        t.c1 = zorch_mont_mul(r.c1, d.c0);
        t.c2 = zorch_mont_mul(r.c2, d.c0);
        t.c3 = zorch_mont_mul(r.c3, d.c0);
    } else if (r_deg == 1) {  // a base r scales the difference
        t.c0 = zorch_mont_mul(r.c0, d.c0);
        t.c1 = zorch_mont_mul(r.c0, d.c1);
        t.c2 = zorch_mont_mul(r.c0, d.c2);
        t.c3 = zorch_mont_mul(r.c0, d.c3);
    } else {
        t = zorch_ext4_mul(d, r);
    }
    return zorch_ext4_add(lo, t);
}

// One eq-table doubling step: an entry a split by the next coordinate r
// into a - a r and a r (kernels/monty.py base_eq_split, ext4_eq_split).
ZORCH_HD void zorch_base_eq_split(zorch_u32 a, zorch_u32 r, zorch_u32* lo, zorch_u32* hi) {
    a = zorch_canonical(a);
    *hi = zorch_mont_mul(a, zorch_canonical(r));
    *lo = zorch_sub(a, *hi);
}

// r_deg 1: r is a base element in .c0 (the rest ignored): 4 products.
ZORCH_HD void zorch_ext4_eq_split(zorch_ext4 a, zorch_ext4 r, int r_deg, zorch_ext4* lo,
                                  zorch_ext4* hi) {
    a = zorch_ext4_canonical(a);
    zorch_ext4 h;
    if (r_deg == 1) {
        const zorch_u32 s = zorch_canonical(r.c0);
        h.c0 = zorch_mont_mul(a.c0, s);
        h.c1 = zorch_mont_mul(a.c1, s);
        h.c2 = zorch_mont_mul(a.c2, s);
        h.c3 = zorch_mont_mul(a.c3, s);
    } else {
        h = zorch_ext4_mul(a, zorch_ext4_canonical(r));
    }
    *lo = zorch_ext4_sub(a, h);
    *hi = h;
}

#ifdef __CUDACC__
#define ZORCH_GRID_STRIDE(i, n) \
    for (zorch_u64 i = (zorch_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (zorch_u64)blockDim.x * gridDim.x)

extern "C" __global__ void zorch_base_map1(int op, const zorch_u32* a, zorch_u32* out,
                                           zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) out[i] = zorch_base_op1(op, a[i]);
}

extern "C" __global__ void zorch_base_map2(int op, const zorch_u32* a, const zorch_u32* b,
                                           zorch_u32* out, zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) out[i] = zorch_base_op2(op, a[i], b[i]);
}

// Extension kernels move each element as one 16-byte access where every
// array is 16-byte aligned (zorch_ext4_load_vec); the test is uniform across
// the grid, so the branch costs nothing.
extern "C" __global__ void zorch_ext4_map1(int op, const zorch_u32* a, zorch_u32* out,
                                           zorch_u64 n) {
    const bool v = zorch_aligned16(a) && zorch_aligned16(out);
    ZORCH_GRID_STRIDE(i, n) {
        zorch_ext4_store_vec(out, i, zorch_ext4_op1(op, zorch_ext4_load_vec(a, i, v)), v);
    }
}

extern "C" __global__ void zorch_ext4_map2(int op, const zorch_u32* a, const zorch_u32* b,
                                           zorch_u32* out, zorch_u64 n) {
    const bool v = zorch_aligned16(a) && zorch_aligned16(b) && zorch_aligned16(out);
    ZORCH_GRID_STRIDE(i, n) {
        const zorch_ext4 x = zorch_ext4_load_vec(a, i, v), y = zorch_ext4_load_vec(b, i, v);
        zorch_ext4_store_vec(out, i, zorch_ext4_op2(op, x, y), v);
    }
}

// Broadcast forms (the contract of kernels/field_cpu.base_map2_bcast): for
// output element i, operand x reads its element (i / run) x_row + (i % run)
// x_step, of x_deg words (4: extension, 1: base, embedded).  Steps are 0 (the
// same element along a run) or 1; run 0 means one run of all n elements.  So
// a one-element operand, a base operand of an extension op, and rows and
// columns of an outer product (x[:, None] op y[None, :]) are read in place.
ZORCH_HD void zorch_bcast_index(zorch_u64 i, zorch_u64 n, zorch_u64 run, zorch_u64 a_row,
                                zorch_u64 a_step, zorch_u64 b_row, zorch_u64 b_step,
                                zorch_u64* ja, zorch_u64* jb) {
    zorch_u64 q = 0, r = i;
    if (run != 0 && run < n) {
        // a 32-bit division where n fits: a third of the 64-bit one's instructions
        q = n <= 0xFFFFFFFFull ? (zorch_u64)((zorch_u32)i / (zorch_u32)run) : i / run;
        r = i - q * run;
    }
    *ja = q * a_row + r * a_step;
    *jb = q * b_row + r * b_step;
}

extern "C" __global__ void zorch_base_map2_bcast(int op, const zorch_u32* a, zorch_u64 a_step,
                                                 const zorch_u32* b, zorch_u64 b_step,
                                                 zorch_u32* out, zorch_u64 run,
                                                 zorch_u64 a_row, zorch_u64 b_row,
                                                 zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) {
        zorch_u64 ja, jb;
        zorch_bcast_index(i, n, run, a_row, a_step, b_row, b_step, &ja, &jb);
        out[i] = zorch_base_op2(op, a[ja], b[jb]);
    }
}

extern "C" __global__ void zorch_ext4_map2_bcast(int op, const zorch_u32* a, zorch_u64 a_step,
                                                 int a_deg, const zorch_u32* b,
                                                 zorch_u64 b_step, int b_deg, zorch_u32* out,
                                                 zorch_u64 run, zorch_u64 a_row,
                                                 zorch_u64 b_row, zorch_u64 n) {
    // Base operands are 4-byte words: only extension operands need alignment.
    const bool v = (a_deg == 1 || zorch_aligned16(a)) && (b_deg == 1 || zorch_aligned16(b)) &&
                   zorch_aligned16(out);
    ZORCH_GRID_STRIDE(i, n) {
        zorch_u64 ja, jb;
        zorch_bcast_index(i, n, run, a_row, a_step, b_row, b_step, &ja, &jb);
        zorch_ext4 c;
        if (a_deg == 4 && b_deg == 4) {
            c = zorch_ext4_op2(op, zorch_ext4_load_vec(a, ja, v), zorch_ext4_load_vec(b, jb, v));
        } else if (a_deg == 4) {
            c = zorch_ext4_base_op2(op, zorch_ext4_load_vec(a, ja, v), b[jb], 0);
        } else {  // a base, b extension (the launcher never passes two base operands)
            c = zorch_ext4_base_op2(op, zorch_ext4_load_vec(b, jb, v), a[ja], 1);
        }
        zorch_ext4_store_vec(out, i, c, v);
    }
}

// Inverses by Montgomery's trick in registers (kernels/field_cpu.py does it
// per chunk): a thread takes ZORCH_INV_BATCH_* elements i0 + k S (S the
// grid's threads, so a warp's accesses stay coalesced), multiplies them up,
// inverts the product once (Fermat, ~60 products) and walks back: 3 products
// an element instead of a Fermat inversion each.  The extension batches the
// norms of its elements.  A zero (or a slot past n) stands aside with the
// factor one and inverts to 0, as Fermat gives; the selects keep the warp
// together.  The grid has ceil(n / batch) threads at most (grid_for).
extern "C" __global__ void zorch_base_inv_batched(const zorch_u32* a, zorch_u32* out,
                                                  zorch_u64 n) {
    const zorch_u64 s = (zorch_u64)blockDim.x * gridDim.x;
    for (zorch_u64 i0 = (zorch_u64)blockIdx.x * blockDim.x + threadIdx.x; i0 < n;
         i0 += s * ZORCH_INV_BATCH_BASE) {
        zorch_u32 x[ZORCH_INV_BATCH_BASE], before[ZORCH_INV_BATCH_BASE];
        zorch_u32 acc = ZORCH_R_MOD_P;
#pragma unroll
        for (int k = 0; k < ZORCH_INV_BATCH_BASE; ++k) {
            const zorch_u64 i = i0 + k * s;
            x[k] = i < n ? zorch_canonical(a[i]) : 0u;
            before[k] = acc;
            acc = zorch_mont_mul(acc, x[k] != 0u ? x[k] : ZORCH_R_MOD_P);
        }
        zorch_u32 inv = zorch_inv(acc);  // of every nonzero x[k] together
#pragma unroll
        for (int k = ZORCH_INV_BATCH_BASE - 1; k >= 0; --k) {
            const zorch_u64 i = i0 + k * s;
            const zorch_u32 r = zorch_mont_mul(inv, before[k]);
            if (i < n) out[i] = x[k] != 0u ? r : 0u;
            inv = zorch_mont_mul(inv, x[k] != 0u ? x[k] : ZORCH_R_MOD_P);
        }
    }
}

extern "C" __global__ void zorch_ext4_inv_batched(const zorch_u32* a, zorch_u32* out,
                                                  zorch_u64 n) {
    const bool v = zorch_aligned16(a) && zorch_aligned16(out);
    const zorch_u64 s = (zorch_u64)blockDim.x * gridDim.x;
    for (zorch_u64 i0 = (zorch_u64)blockIdx.x * blockDim.x + threadIdx.x; i0 < n;
         i0 += s * ZORCH_INV_BATCH_EXT) {
        zorch_ext4 x[ZORCH_INV_BATCH_EXT];
        zorch_u32 n0[ZORCH_INV_BATCH_EXT], n1[ZORCH_INV_BATCH_EXT], norm[ZORCH_INV_BATCH_EXT];
        zorch_u32 before[ZORCH_INV_BATCH_EXT];
        zorch_u32 acc = ZORCH_R_MOD_P;
#pragma unroll
        for (int k = 0; k < ZORCH_INV_BATCH_EXT; ++k) {
            const zorch_u64 i = i0 + k * s;
            const zorch_ext4 zero = {0u, 0u, 0u, 0u};
            x[k] = i < n ? zorch_ext4_canonical(zorch_ext4_load_vec(a, i, v)) : zero;
            norm[k] = zorch_ext4_norm(x[k], &n0[k], &n1[k]);
            before[k] = acc;
            acc = zorch_mont_mul(acc, norm[k] != 0u ? norm[k] : ZORCH_R_MOD_P);
        }
        zorch_u32 inv = zorch_inv(acc);
#pragma unroll
        for (int k = ZORCH_INV_BATCH_EXT - 1; k >= 0; --k) {
            const zorch_u64 i = i0 + k * s;
            // a zero element: N0 = N1 = 0, so its result is 0 whatever ni is
            const zorch_ext4 c = zorch_ext4_inv_finish(x[k], n0[k], n1[k],
                                                       zorch_mont_mul(inv, before[k]));
            if (i < n) zorch_ext4_store_vec(out, i, c, v);
            inv = zorch_mont_mul(inv, norm[k] != 0u ? norm[k] : ZORCH_R_MOD_P);
        }
    }
}

// The inverses' zero check (kernels/field_cpu.py base_first_zero): *first =
// min(*first, i) over the elements i of deg words (1, or 4 for the
// extension) that are 0 mod p; the launcher sets *first = n and reads it
// back.  One read pass, in groups of four words -- an extension element or
// four base elements, one 16-byte load where w is aligned -- since a thread
// stops at its first zero, so its next load waits for this one's test: at
// 4 bytes a load the resident threads would keep too few bytes in flight to
// stream.  Only a thread that finds a zero does an atomic, so the usual
// case (none) writes nothing.  The grid is sized for n * deg / 4 threads.
extern "C" __global__ void zorch_first_zero(const zorch_u32* w, int deg, zorch_u64* first,
                                            zorch_u64 n) {
    const zorch_u64 groups = n * deg / 4;
    const bool v = zorch_aligned16(w);
    ZORCH_GRID_STRIDE(g, groups) {
        const zorch_ext4 x = zorch_ext4_canonical(zorch_ext4_load_vec(w, g, v));
        zorch_u64 hit = n;
        if (deg == 4) {
            if ((x.c0 | x.c1 | x.c2 | x.c3) == 0u) hit = g;
        } else {  // the least of the four base elements that is zero
            hit = x.c0 == 0u ? 4 * g : x.c1 == 0u ? 4 * g + 1 : x.c2 == 0u ? 4 * g + 2
                : x.c3 == 0u ? 4 * g + 3 : n;
        }
        if (hit < n) {
            atomicMin(first, hit);
            break;
        }
    }
    // the last n % 4 base elements, one to a thread of the first block
    const zorch_u64 i = 4 * groups + threadIdx.x;
    if (deg == 1 && blockIdx.x == 0 && i < n && zorch_canonical(w[i]) == 0u) atomicMin(first, i);
}

// The conversions at the boundary to integers (kernels/field_cpu.py encode /
// decode), so that a device array is converted in one pass of the words
// (a uint64 `%` per value, as CuPy ops would do it, is a software division).
//
// out[i] = v[i] 2^32 mod p: one Montgomery product by 2^64 mod p.  A value
// outside [0, p) is reduced mod p as Python's % does when `reduce`, else
// *first = min(*first, i) (the launcher sets *first = n and reads it back;
// only such a value costs an atomic) and out[i] is the word of 0.
extern "C" __global__ void zorch_encode(const long long* v, int reduce, zorch_u32* out,
                                        zorch_u64* first, zorch_u64 n) {
    const long long p = (long long)ZORCH_P;
    ZORCH_GRID_STRIDE(i, n) {
        long long x = v[i];
        if (x < 0 || x >= p) {
            if (reduce) {
                x %= p;  // C's remainder takes the sign of x: into [0, p)
                if (x < 0) x += p;
            } else {
                atomicMin(first, i);
                x = 0;
            }
        }
        out[i] = zorch_mont_mul((zorch_u32)x, ZORCH_R2_MOD_P);
    }
}

// out[i] = w[i] 2^-32 mod p: one Montgomery reduction (a word >= p gives the
// value of w mod p).  *bad = 1 where some word is >= p (the launcher zeroes
// it and reads it back); a thread stores it once, after its loop.  out may
// be w.
extern "C" __global__ void zorch_decode(const zorch_u32* w, zorch_u32* out, zorch_u32* bad,
                                        zorch_u64 n) {
    bool seen = false;
    ZORCH_GRID_STRIDE(i, n) {
        const zorch_u32 x = w[i];
        seen |= x >= ZORCH_P;
        out[i] = zorch_monty_reduce(x);
    }
    if (seen) *bad = 1u;
}

extern "C" __global__ void zorch_base_pow(const zorch_u32* a, zorch_u64 e_hi, zorch_u64 e_lo,
                                          int nbits, zorch_u32* out, zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) out[i] = zorch_base_pow_e(a[i], e_hi, e_lo, nbits);
}

extern "C" __global__ void zorch_ext4_pow(const zorch_u32* a, zorch_u64 e_hi, zorch_u64 e_lo,
                                          int nbits, zorch_u32* out, zorch_u64 n) {
    const bool v = zorch_aligned16(a) && zorch_aligned16(out);
    ZORCH_GRID_STRIDE(i, n) {
        const zorch_ext4 x = zorch_ext4_load_vec(a, i, v);
        zorch_ext4_store_vec(out, i, zorch_ext4_pow_e(x, e_hi, e_lo, nbits), v);
    }
}
// out[i] = v[2i] + r (v[2i+1] - v[2i]): the pairs of a contiguous array,
// the one element r read once per thread.
extern "C" __global__ void zorch_base_mle_fold(const zorch_u32* v, const zorch_u32* r,
                                               zorch_u32* out, zorch_u64 n) {
    const zorch_u32 s = r[0];
    const bool vec = zorch_aligned8(v);
    ZORCH_GRID_STRIDE(i, n) {
        zorch_u32 lo, hi;
        zorch_load_pair(v, i, vec, &lo, &hi);
        out[i] = zorch_base_fold(lo, hi, s);
    }
}

extern "C" __global__ void zorch_ext4_mle_fold(const zorch_u32* v, int v_deg,
                                               const zorch_u32* r, int r_deg, zorch_u32* out,
                                               zorch_u64 n) {
    // (the loads' and the store's vector paths apart: an offset view of
    // the values need not cost the stores theirs)
    const bool vin = v_deg == 1 ? zorch_aligned8(v) : zorch_aligned16(v);
    const bool vout = zorch_aligned16(out);
    const zorch_ext4 s = zorch_element_of(r, r_deg);
    ZORCH_GRID_STRIDE(i, n) {
        zorch_ext4 lo = {0u, 0u, 0u, 0u}, hi = lo;
        if (v_deg == 4) {
            lo = zorch_ext4_load_vec(v, 2 * i, vin);
            hi = zorch_ext4_load_vec(v, 2 * i + 1, vin);
        } else {
            zorch_load_pair(v, i, vin, &lo.c0, &hi.c0);
        }
        zorch_ext4_store_vec(out, i, zorch_ext4_fold(lo, hi, s, v_deg, r_deg), vout);
    }
}

// lo[i], hi[i] = a[i] - a[i] r, a[i] r; lo may be a itself (each thread
// reads its element before it writes it).
extern "C" __global__ void zorch_base_eq_split(const zorch_u32* a, const zorch_u32* r,
                                               zorch_u32* lo, zorch_u32* hi, zorch_u64 n) {
    const zorch_u32 s = r[0];
    ZORCH_GRID_STRIDE(i, n) zorch_base_eq_split(a[i], s, &lo[i], &hi[i]);
}

extern "C" __global__ void zorch_ext4_eq_split(const zorch_u32* a, const zorch_u32* r,
                                               int r_deg, zorch_u32* lo, zorch_u32* hi,
                                               zorch_u64 n) {
    const bool vec = zorch_aligned16(a) && zorch_aligned16(lo) && zorch_aligned16(hi);
    const zorch_ext4 s = zorch_element_of(r, r_deg);
    ZORCH_GRID_STRIDE(i, n) {
        zorch_ext4 x, y;
        zorch_ext4_eq_split(zorch_ext4_load_vec(a, i, vec), s, r_deg, &x, &y);
        zorch_ext4_store_vec(lo, i, x, vec);
        zorch_ext4_store_vec(hi, i, y, vec);
    }
}
#endif  // __CUDACC__
