// zorch_nb: the one Montgomery reduction of the CUDA C sources.
//
// Field constants arrive from the generated preamble (kernels/field_params.py,
// cuda_defines): ZORCH_P, ZORCH_MU_NEG (= -p^-1 mod 2^32), ZORCH_R_MOD_P (the
// Montgomery word of 1) and ZORCH_W_MONT (Montgomery word of W, x^4 = W).
// Every value is a Montgomery word in [0, p); extension elements are four
// words, coefficients of 1, x, x^2, x^3.  The functions are __host__
// __device__ so that the same text can be compiled for the CPU and checked
// against Python big integers without a GPU (tests/test_cuda_sources.py).
#pragma once
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

// x * 2^-32 mod p for 0 <= x < p * 2^32: then m*p < 2^63, x + m*p < 2^64 and
// (x + m*p) / 2^32 < 2p, so one conditional subtraction canonicalises.
ZORCH_HD zorch_u32 zorch_monty_reduce(zorch_u64 x) {
    zorch_u32 m = (zorch_u32)x * ZORCH_MU_NEG;  // mod 2^32 by truncation
    zorch_u64 t = (x + (zorch_u64)m * ZORCH_P) >> 32;
    return (zorch_u32)(t >= ZORCH_P ? t - ZORCH_P : t);
}

// x * 2^-32 mod p for any 64-bit x: x = h 2^32 + l gives h + l 2^-32, with
// h < 2^32 < 3p (two subtractions) and l < 2^32 fit for zorch_monty_reduce.
ZORCH_HD zorch_u32 zorch_monty_reduce_wide(zorch_u64 x) {
    zorch_u32 h = (zorch_u32)(x >> 32);
    if (h >= ZORCH_P) h -= ZORCH_P;
    if (h >= ZORCH_P) h -= ZORCH_P;
    zorch_u32 s = h + zorch_monty_reduce(x & 0xFFFFFFFFull);  // < 2p < 2^32
    return s >= ZORCH_P ? s - ZORCH_P : s;
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

// Product in F_p[x]/(x^4 - W) with 7 reductions instead of 16.
// Wrap sums (i + j >= 4) hold at most 3 products < 3p^2 < 2^64 and are
// reduced once to h (Montgomery); h * W_mont adds W*h after the final
// reduction.  Each final sum has at most 4 terms < 4p^2 < 2^64.
ZORCH_HD zorch_ext4 zorch_ext4_mul(zorch_ext4 a, zorch_ext4 b) {
    const zorch_u64 a0 = a.c0, a1 = a.c1, a2 = a.c2, a3 = a.c3;
    const zorch_u64 b0 = b.c0, b1 = b.c1, b2 = b.c2, b3 = b.c3;
    const zorch_u64 wm = ZORCH_W_MONT;
    const zorch_u64 h0 = zorch_monty_reduce_wide(a1 * b3 + a2 * b2 + a3 * b1);
    const zorch_u64 h1 = zorch_monty_reduce_wide(a2 * b3 + a3 * b2);
    const zorch_u64 h2 = zorch_monty_reduce(a3 * b3);
    zorch_ext4 c;
    c.c0 = zorch_monty_reduce_wide(a0 * b0 + h0 * wm);
    c.c1 = zorch_monty_reduce_wide(a0 * b1 + a1 * b0 + h1 * wm);
    c.c2 = zorch_monty_reduce_wide(a0 * b2 + a1 * b1 + a2 * b0 + h2 * wm);
    c.c3 = zorch_monty_reduce_wide(a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0);
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

// Inverse by two norm steps (see kernels/monty.py ext4_inv for the algebra):
// u = x^2, a = A + xB, N = A^2 - u B^2 = N0 + N1 u, n = N0^2 - W N1^2 in F_p,
// a^-1 = (A - xB)(N0 - N1 u) / n.  The caller guarantees a != 0.
ZORCH_HD zorch_ext4 zorch_ext4_inv(zorch_ext4 a) {
    const zorch_u32 a00 = zorch_mont_mul(a.c0, a.c0);
    const zorch_u32 a11 = zorch_mont_mul(a.c1, a.c1);
    const zorch_u32 a22w = zorch_mont_mul(zorch_mont_mul(a.c2, a.c2), ZORCH_W_MONT);
    const zorch_u32 a33w = zorch_mont_mul(zorch_mont_mul(a.c3, a.c3), ZORCH_W_MONT);
    const zorch_u32 a02 = zorch_mont_mul(a.c0, a.c2);
    const zorch_u32 a13w = zorch_mont_mul(zorch_mont_mul(a.c1, a.c3), ZORCH_W_MONT);
    const zorch_u32 n0 = zorch_sub(zorch_sub(zorch_add(a00, a22w), a13w), a13w);
    const zorch_u32 n1 = zorch_sub(zorch_sub(zorch_add(a02, a02), a11), a33w);
    const zorch_u32 n1w = zorch_mont_mul(n1, ZORCH_W_MONT);
    const zorch_u32 norm = zorch_sub(zorch_mont_mul(n0, n0), zorch_mont_mul(n1w, n1));
    const zorch_u32 ni = zorch_inv(norm);
    zorch_ext4 c;
    c.c0 = zorch_mont_mul(zorch_sub(zorch_mont_mul(a.c0, n0), zorch_mont_mul(a.c2, n1w)), ni);
    c.c1 = zorch_mont_mul(zorch_sub(zorch_mont_mul(a.c3, n1w), zorch_mont_mul(a.c1, n0)), ni);
    c.c2 = zorch_mont_mul(zorch_sub(zorch_mont_mul(a.c2, n0), zorch_mont_mul(a.c0, n1)), ni);
    c.c3 = zorch_mont_mul(zorch_sub(zorch_mont_mul(a.c1, n1), zorch_mont_mul(a.c3, n0)), ni);
    return c;
}

ZORCH_HD zorch_ext4 zorch_ext4_load(const zorch_u32* p, zorch_u64 i) {
    zorch_ext4 v = {p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]};
    return v;
}

ZORCH_HD void zorch_ext4_store(zorch_u32* p, zorch_u64 i, zorch_ext4 v) {
    p[4 * i] = v.c0; p[4 * i + 1] = v.c1; p[4 * i + 2] = v.c2; p[4 * i + 3] = v.c3;
}
