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

extern "C" __global__ void zorch_ext4_map1(int op, const zorch_u32* a, zorch_u32* out,
                                           zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) zorch_ext4_store(out, i, zorch_ext4_op1(op, zorch_ext4_load(a, i)));
}

extern "C" __global__ void zorch_ext4_map2(int op, const zorch_u32* a, const zorch_u32* b,
                                           zorch_u32* out, zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) {
        zorch_ext4_store(out, i, zorch_ext4_op2(op, zorch_ext4_load(a, i), zorch_ext4_load(b, i)));
    }
}

extern "C" __global__ void zorch_base_pow(const zorch_u32* a, zorch_u64 e_hi, zorch_u64 e_lo,
                                          int nbits, zorch_u32* out, zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) out[i] = zorch_base_pow_e(a[i], e_hi, e_lo, nbits);
}

extern "C" __global__ void zorch_ext4_pow(const zorch_u32* a, zorch_u64 e_hi, zorch_u64 e_lo,
                                          int nbits, zorch_u32* out, zorch_u64 n) {
    ZORCH_GRID_STRIDE(i, n) {
        zorch_ext4_store(out, i, zorch_ext4_pow_e(zorch_ext4_load(a, i), e_hi, e_lo, nbits));
    }
}
#endif  // __CUDACC__
