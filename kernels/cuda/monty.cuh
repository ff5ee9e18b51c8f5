// zorch_nb: the one Montgomery reduction of the CUDA C sources.
//
// Field constants arrive from the generated preamble (kernels/field_params.py,
// cuda_defines): ZORCH_P, ZORCH_MU_NEG (= -p^-1 mod 2^32), ZORCH_R_MOD_P (the
// Montgomery word of 1), ZORCH_W_MONT (Montgomery word of W, x^4 = W) and
// ZORCH_R2_MOD_P (2^64 mod p: a Montgomery product by it encodes).
// Every value is a Montgomery word in [0, p); extension elements are four
// words, coefficients of 1, x, x^2, x^3; words read from user arrays may be
// any uint32 and pass through zorch_canonical first (w >= p counts as the
// element of w mod p; kernels/monty.py canonical).  The functions are __host__
// __device__ so that the same text can be compiled for the CPU and checked
// against Python big integers without a GPU (tests/test_cuda_sources.py).
// An include guard, not #pragma once: the text is pasted into each translation
// unit (cuda_source.assemble, arithmetic_header), where nvcc and g++ warned
// "#pragma once in main file" on every compile.
#ifndef ZORCH_MONTY_CUH
#define ZORCH_MONTY_CUH
#ifndef ZORCH_P
#error "zorch_nb: include the field preamble (ZORCH_P ...) before monty.cuh"
#endif

#ifdef __CUDACC__
#define ZORCH_HD __host__ __device__ __forceinline__
#else
#include <stdint.h>
#define ZORCH_HD static inline
#endif

typedef unsigned int zorch_u32;
typedef unsigned long long zorch_u64;

// (h 2^32 + x_lo - q p) / 2^32 mod p in [0, p) for h < p, where x_lo is the
// low half of x and q = x_lo p^-1 mod 2^32 (p^-1 = -ZORCH_MU_NEG): the low
// halves of x and q p are equal, so the quotient is h minus the high half of
// q p, both < p, in (-p, p); r + p wraps exactly when it is negative.  Past
// the two products everything is 32-bit (kernels/monty.py _high_difference
// says why; the sm_90 SASS of the ext/ext fold_dense: 760 -> 616 instructions).
ZORCH_HD zorch_u32 zorch_high_difference(zorch_u32 h, zorch_u64 x) {
    const zorch_u32 q = (zorch_u32)x * (0u - ZORCH_MU_NEG);  // mod 2^32 by truncation
    const zorch_u32 r = h - (zorch_u32)(((zorch_u64)q * ZORCH_P) >> 32);
    const zorch_u32 s = r + ZORCH_P;
    return s < r ? s : r;
}

// x * 2^-32 mod p for 0 <= x < p * 2^32 (so the high half is < p).
ZORCH_HD zorch_u32 zorch_monty_reduce(zorch_u64 x) {
    return zorch_high_difference((zorch_u32)(x >> 32), x);
}

// a mod p for any 32-bit word: a < 2^32 < 3p (kernels/field_params.py checks
// it), so two conditional subtractions suffice; a no-op on canonical words.
ZORCH_HD zorch_u32 zorch_canonical(zorch_u32 a) {
    a = a >= ZORCH_P ? a - ZORCH_P : a;
    return a >= ZORCH_P ? a - ZORCH_P : a;
}

// x or x - p 2^32, whichever is < p 2^32.  Input x < 2 p 2^32 -- true of a
// sum of four products of canonical words, < 4p^2, as 2p < 2^32 -- so one
// conditional subtraction suffices; x 2^-32 mod p is kept.
ZORCH_HD zorch_u64 zorch_below_pr(zorch_u64 x) {
    const zorch_u64 pr = (zorch_u64)ZORCH_P << 32;
    return x >= pr ? x - pr : x;
}

// x * 2^-32 mod p for 0 <= x < 2 p 2^32 (a sum of up to four products): the
// high half, < 2p, less p when it is at least p (x less p 2^32: the same
// value mod p and the same low half).
ZORCH_HD zorch_u32 zorch_monty_reduce_sum4(zorch_u64 x) {
    const zorch_u32 h = (zorch_u32)(x >> 32);
    return zorch_high_difference(h >= ZORCH_P ? h - ZORCH_P : h, x);
}

ZORCH_HD zorch_u32 zorch_mont_mul(zorch_u32 a, zorch_u32 b) {
    return zorch_monty_reduce((zorch_u64)a * b);  // a*b < p^2 < p*2^32
}

ZORCH_HD zorch_u32 zorch_add(zorch_u32 a, zorch_u32 b) {
    zorch_u32 s = a + b;  // < 2p < 2^32
    return s >= ZORCH_P ? s - ZORCH_P : s;
}

ZORCH_HD zorch_u32 zorch_sub(zorch_u32 a, zorch_u32 b) {
    return a >= b ? a - b : a + (ZORCH_P - b);
}

ZORCH_HD zorch_u32 zorch_neg(zorch_u32 a) { return a == 0u ? 0u : ZORCH_P - a; }

ZORCH_HD zorch_u32 zorch_pow_u32(zorch_u32 a, zorch_u32 e) {
    zorch_u32 r = ZORCH_R_MOD_P;
    for (int k = 31; k >= 0; --k) {
        r = zorch_mont_mul(r, r);
        if ((e >> k) & 1u) r = zorch_mont_mul(r, a);
    }
    return r;
}

// Fermat inverse; the caller guarantees a != 0.
ZORCH_HD zorch_u32 zorch_inv(zorch_u32 a) { return zorch_pow_u32(a, ZORCH_P - 2u); }

struct zorch_ext4 { zorch_u32 c0, c1, c2, c3; };

// (0, W b1, W b2, W b3): the wrap-around multiples of b (Montgomery words).
ZORCH_HD zorch_ext4 zorch_ext4_wrap(zorch_ext4 b) {
    zorch_ext4 w = {0u, zorch_mont_mul(b.c1, ZORCH_W_MONT), zorch_mont_mul(b.c2, ZORCH_W_MONT),
                    zorch_mont_mul(b.c3, ZORCH_W_MONT)};
    return w;
}

struct zorch_wide4 { zorch_u64 c0, c1, c2, c3; };

// Unreduced coefficients of a * b with bw = zorch_ext4_wrap(b):
// c_k = sum_{i+j=k} a_i b_j + sum_{i+j=k+4} a_i bw_j, four products < p^2,
// so each c_k < 4p^2 < 2 p 2^32 (field_params checks p < 2^31), and its
// Montgomery reduction is the Montgomery word of the coefficient (the 2^-32
// of bw_j cancels the 2^32 of W's Montgomery form).
ZORCH_HD zorch_wide4 zorch_ext4_dot(zorch_ext4 a, zorch_ext4 b, zorch_ext4 bw) {
    const zorch_u64 a0 = a.c0, a1 = a.c1, a2 = a.c2, a3 = a.c3;
    const zorch_u64 b0 = b.c0, b1 = b.c1, b2 = b.c2, b3 = b.c3;
    const zorch_u64 w1 = bw.c1, w2 = bw.c2, w3 = bw.c3;
    zorch_wide4 c;
    c.c0 = a0 * b0 + a1 * w3 + a2 * w2 + a3 * w1;
    c.c1 = a0 * b1 + a1 * b0 + a2 * w3 + a3 * w2;
    c.c2 = a0 * b2 + a1 * b1 + a2 * b0 + a3 * w3;
    c.c3 = a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0;
    return c;
}

ZORCH_HD zorch_ext4 zorch_ext4_reduce4(zorch_wide4 c) {
    zorch_ext4 r = {zorch_monty_reduce_sum4(c.c0), zorch_monty_reduce_sum4(c.c1),
                    zorch_monty_reduce_sum4(c.c2), zorch_monty_reduce_sum4(c.c3)};
    return r;
}

// Product in F_p[x]/(x^4 - W) with 7 reductions instead of 16: the three
// wrap-around multiples W b_j, then one reduction per coefficient.
ZORCH_HD zorch_ext4 zorch_ext4_mul(zorch_ext4 a, zorch_ext4 b) {
    return zorch_ext4_reduce4(zorch_ext4_dot(a, b, zorch_ext4_wrap(b)));
}

ZORCH_HD zorch_ext4 zorch_ext4_canonical(zorch_ext4 a) {
    zorch_ext4 c = {zorch_canonical(a.c0), zorch_canonical(a.c1), zorch_canonical(a.c2),
                    zorch_canonical(a.c3)};
    return c;
}

ZORCH_HD zorch_ext4 zorch_ext4_add(zorch_ext4 a, zorch_ext4 b) {
    zorch_ext4 c = {zorch_add(a.c0, b.c0), zorch_add(a.c1, b.c1),
                    zorch_add(a.c2, b.c2), zorch_add(a.c3, b.c3)};
    return c;
}

ZORCH_HD zorch_ext4 zorch_ext4_sub(zorch_ext4 a, zorch_ext4 b) {
    zorch_ext4 c = {zorch_sub(a.c0, b.c0), zorch_sub(a.c1, b.c1),
                    zorch_sub(a.c2, b.c2), zorch_sub(a.c3, b.c3)};
    return c;
}

ZORCH_HD zorch_ext4 zorch_ext4_neg(zorch_ext4 a) {
    zorch_ext4 c = {zorch_neg(a.c0), zorch_neg(a.c1), zorch_neg(a.c2), zorch_neg(a.c3)};
    return c;
}

// a b - c d (canonical words) with one reduction: a b + (p^2 - c d) is a sum
// of two terms <= p^2, in zorch_monty_reduce_sum4's range (monty.py mont_mul_sub).
ZORCH_HD zorch_u32 zorch_mont_mul_sub(zorch_u32 a, zorch_u32 b, zorch_u32 c, zorch_u32 d) {
    const zorch_u64 pp = (zorch_u64)ZORCH_P * ZORCH_P;
    return zorch_monty_reduce_sum4((zorch_u64)a * b + (pp - (zorch_u64)c * d));
}

// The norm n of a down to F_p (zero exactly when a is), with the N0, N1 that
// zorch_ext4_inv_finish takes (kernels/monty.py ext4_norm, for the algebra):
// u = x^2, a = A + xB, N = A^2 - u B^2 = N0 + N1 u, n = N0^2 - W N1^2.  Each
// of N0, N1, n is one reduction of a sum of at most four terms <= p^2 (a
// negated product as p^2 minus it).
ZORCH_HD zorch_u32 zorch_ext4_norm(zorch_ext4 a, zorch_u32* n0, zorch_u32* n1) {
    const zorch_u64 pp = (zorch_u64)ZORCH_P * ZORCH_P;
    const zorch_u64 a0 = a.c0, a1 = a.c1, a2 = a.c2, a3 = a.c3;
    const zorch_u64 a2w = zorch_mont_mul(a.c2, ZORCH_W_MONT);
    const zorch_u64 a3w = zorch_mont_mul(a.c3, ZORCH_W_MONT);
    // N0 = a0^2 + W a2^2 - 2 W a1 a3;  N1 = 2 a0 a2 - a1^2 - W a3^2
    *n0 = zorch_monty_reduce_sum4(a0 * a0 + a2 * a2w + 2u * (pp - a1 * a3w));
    *n1 = zorch_monty_reduce_sum4(2u * (a0 * a2) + (pp - a1 * a1) + (pp - a3 * a3w));
    return zorch_mont_mul_sub(*n0, *n0, zorch_mont_mul(*n1, ZORCH_W_MONT), *n1);
}

// a^-1 = (A - xB)(N0 - N1 u) ni from zorch_ext4_norm's N0, N1 and ni, the
// inverse of the norm (taken into N0, N1 first: M = N ni).  A zero a has
// N0 = N1 = 0, so ni = 0 gives 0.
ZORCH_HD zorch_ext4 zorch_ext4_inv_finish(zorch_ext4 a, zorch_u32 n0, zorch_u32 n1,
                                          zorch_u32 ni) {
    const zorch_u32 m0 = zorch_mont_mul(n0, ni), m1 = zorch_mont_mul(n1, ni);
    const zorch_u32 m1w = zorch_mont_mul(m1, ZORCH_W_MONT);
    zorch_ext4 c = {zorch_mont_mul_sub(a.c0, m0, a.c2, m1w), zorch_mont_mul_sub(a.c3, m1w, a.c1, m0),
                    zorch_mont_mul_sub(a.c2, m0, a.c0, m1), zorch_mont_mul_sub(a.c1, m1, a.c3, m0)};
    return c;
}

// Inverse by the two norm steps; the caller guarantees a != 0.
ZORCH_HD zorch_ext4 zorch_ext4_inv(zorch_ext4 a) {
    zorch_u32 n0, n1;
    const zorch_u32 norm = zorch_ext4_norm(a, &n0, &n1);
    return zorch_ext4_inv_finish(a, n0, n1, zorch_inv(norm));
}

ZORCH_HD zorch_ext4 zorch_ext4_load(const zorch_u32* p, zorch_u64 i) {
    zorch_ext4 v = {p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]};
    return v;
}

ZORCH_HD void zorch_ext4_store(zorch_u32* p, zorch_u64 i, zorch_ext4 v) {
    p[4 * i] = v.c0; p[4 * i + 1] = v.c1; p[4 * i + 2] = v.c2; p[4 * i + 3] = v.c3;
}

// Element i as one 16-byte load / store when `vec` (p 16-byte aligned): four
// 4-byte accesses 16 bytes apart make a warp touch each cache line four
// times, and the compiler cannot merge them without knowing the alignment.
// CuPy allocations are 256-byte aligned; an offset view need not be 16-byte
// aligned, so callers pass zorch_aligned16 of their pointers.  The host
// (tests) always takes the 4-byte path.
ZORCH_HD bool zorch_aligned16(const void* p) {
    return (reinterpret_cast<zorch_u64>(p) & 15ull) == 0;
}

ZORCH_HD bool zorch_aligned8(const void* p) {
    return (reinterpret_cast<zorch_u64>(p) & 7ull) == 0;
}

// Base words 2i and 2i + 1 (the pair an MLE fold reads) as one 8-byte load
// when `vec` (p 8-byte aligned): one access per thread instead of two.
ZORCH_HD void zorch_load_pair(const zorch_u32* p, zorch_u64 i, bool vec, zorch_u32* a,
                              zorch_u32* b) {
#ifdef __CUDA_ARCH__
    if (vec) {
        const uint2 w = reinterpret_cast<const uint2*>(p)[i];
        *a = w.x;
        *b = w.y;
        return;
    }
#endif
    (void)vec;
    *a = p[2 * i];
    *b = p[2 * i + 1];
}

ZORCH_HD zorch_ext4 zorch_ext4_load_vec(const zorch_u32* p, zorch_u64 i, bool vec) {
#ifdef __CUDA_ARCH__
    if (vec) {
        const uint4 w = reinterpret_cast<const uint4*>(p)[i];
        const zorch_ext4 v = {w.x, w.y, w.z, w.w};
        return v;
    }
#endif
    (void)vec;
    return zorch_ext4_load(p, i);
}

ZORCH_HD void zorch_ext4_store_vec(zorch_u32* p, zorch_u64 i, zorch_ext4 v, bool vec) {
#ifdef __CUDA_ARCH__
    if (vec) {
        uint4 w;
        w.x = v.c0; w.y = v.c1; w.z = v.c2; w.w = v.c3;
        reinterpret_cast<uint4*>(p)[i] = w;
        return;
    }
#endif
    (void)vec;
    zorch_ext4_store(p, i, v);
}

#endif  // ZORCH_MONTY_CUH
