"""Scalar Montgomery arithmetic for 31-bit primes, in Numba.

The one Montgomery reduction of the Numba kernels lives here.  Every function
is an ``@njit`` scalar function; the CPU kernels call it from ``prange`` loops
and the ``@cuda.jit`` kernels call the very same function (Numba-CUDA compiles
``@njit`` callees for the device), so CPU and GPU share one definition of the
arithmetic.

Conventions
-----------
* Every value named ``a``, ``b``, ``c*`` is a Montgomery word in ``[0, p)``
  (canonical): the scalar functions trust it, and a word ``>= p`` given to
  one of them (``mod_add``, ``mont_mul``, ``ext4_mul``, ...) can give a
  wrong or non-canonical result; :func:`canonical` reduces any uint32 word.
  Words read from user arrays may be any uint32: the op entry points
  (``base_map*``, ``ext4_map*``, ``*_pow``) and the GKR loads pass them
  through :func:`canonical` first, so a word ``w >= p`` counts as the field
  element of ``w mod p`` and every result is canonical.
* Field constants arrive as arguments (``p``, ``mu_neg``, ``w_mont``; see
  :mod:`zorch_nb.kernels.field_params`), so one compiled kernel serves every
  field and nothing is compiled per field, length or shape.
* Every intermediate is cast explicitly to ``np.uint64`` / ``np.uint32``.
  Compiled Numba widens ``uint32 * uint32`` to 64 bits while the CUDA
  simulator (NumPy scalars) wraps it; explicit casts make both agree.  No
  expression below ever wraps, so the results are also identical with
  ``NUMBA_DISABLE_JIT=1``.
* Extension elements are passed as four coefficients (of 1, x, x^2, x^3) and
  returned as a 4-tuple; the modulus is x^4 - W.
"""
import numpy as np

from .jit import njit  # numba.njit, cache keyed on every kernel source

#: The scalar functions for use in your own ``@njit`` / ``@cuda.jit`` code
#: (see README, "The kernels in your own Numba code"), and the opcodes.
__all__ = ["monty_reduce", "canonical", "mont_mul", "mont_mul_sub", "mod_add", "mod_sub",
           "mod_neg", "to_monty", "from_monty", "mont_pow_u32", "mont_inv", "ext4_mul", "ext4_inv",
           "base_pow", "ext4_pow", "base_fold", "ext4_fold", "base_eq_split", "ext4_eq_split",
           "OP_ADD", "OP_SUB", "OP_MUL", "OP_NEG", "OP_SQUARE", "OP_INV"]

# Opcodes shared by the map kernels of every backend (the CUDA C preamble
# receives the same numbers).
OP_ADD = 0
OP_SUB = 1
OP_MUL = 2
OP_NEG = 3
OP_SQUARE = 4
OP_INV = 5

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_R32 = np.uint64(1 << 32)


@njit(cache=True)
def monty_reduce(x, p, mu_neg):
    """Return ``x * 2**-32 mod p`` in ``[0, p)``.

    Input range: ``0 <= x < p * 2**32`` (uint64).  With ``q = x * p**-1 mod
    2**32`` (``2**32 - mu_neg`` is ``p**-1``), ``x - q p`` is divisible by
    ``2**32``: the low halves of ``x`` and ``q p`` are equal, so the quotient is
    the difference of the high halves, each ``< p``, in ``(-p, p)``; adding
    ``p`` when it is negative makes it canonical (:func:`_high_difference`).
    """
    x = np.uint64(x)
    return _high_difference(x >> _SHIFT32, x, p, mu_neg)


@njit(cache=True)
def _high_difference(h, x, p, mu_neg):
    """``(h * 2**32 + x_lo - q p) / 2**32 mod p`` in ``[0, p)`` for ``h < p``.

    ``x_lo`` is the low half of ``x``; ``q = x_lo * p**-1 mod 2**32``.  Why
    this form rather than ``(x + m p) >> 32`` with ``m = x_lo * mu_neg``: past
    the two products everything is 32-bit (a difference and an unsigned
    min), where that one needs a 64-bit sum, shift and compare -- which AVX2
    has no unsigned instruction for.  On one AVX2 core (Zen 1), 2**22
    elements: base products 7.7 -> 6.2 ms, extension products 84 -> 73 ms,
    the dense base/base GKR fold 17.0 -> 13.3 ms; the sm_90 SASS of the
    Numba-CUDA ext/ext fold 992 -> 808 instructions (Hopper fuses the add and
    the min into one ``VIADDMNMX``; benchmarks/results/README.md).  Written
    so that no expression wraps: the compiled loops vectorize the same, and
    NumPy scalars (the CUDA simulator, ``NUMBA_DISABLE_JIT=1``) give the same
    words without overflow warnings.
    """
    pp = np.uint64(p)
    # 2**32 - mu_neg = p**-1, left 64-bit: on AVX2 LLVM then multiplies with
    # vpmuludq; a uint32 factor became vpmulld, 10-17% slower on Zen 1.  AVX-512
    # takes vpmullq for it (and for q p); masking both factors to 32 bits gets
    # vpmuludq there, but was slower on Zen 4: GKR folds of 2**14 leaves on 2
    # cores, base/base 37.4 -> 33.5 GB/s, base/ext 27.4 -> 25.2, ext/ext 22.4
    # -> 21.4 (session 62)
    q = ((np.uint64(x) & _MASK32) * (_R32 - np.uint64(mu_neg))) & _MASK32
    # h - (q p)_hi mod 2**32: h - g when h >= g, else 2**32 - (g - h) > 2**32 - p
    r = np.uint32((np.uint64(h) + (_R32 - ((q * pp) >> _SHIFT32))) & _MASK32)
    # r + p wraps exactly when the difference was negative, then lands in [0, p)
    return min(r, np.uint32((np.uint64(r) + pp) & _MASK32))


@njit(cache=True)
def canonical(a, p):
    """``a mod p`` for any uint32 word ``a``.

    ``a < 2**32 < 3p`` (checked for both fields at import of field_params),
    so two conditional subtractions suffice (two unsigned mins once
    vectorized).  A no-op on canonical words.
    """
    a = np.uint32(a)
    pp = np.uint32(p)
    # np.uint32(...) keeps the result 32-bit: Numba types uint32 - uint32 as
    # 64-bit, and a product of two such values then takes a 64x64 multiply
    # (three IMADs on the GPU instead of one IMAD.WIDE)
    if a >= pp:
        a = np.uint32(a - pp)
    if a >= pp:
        a = np.uint32(a - pp)
    return a


@njit(cache=True)
def reduce_once(a, p):
    """``a`` or ``a - p``: any uint32 word brought below ``2**32 - p``.

    Not canonical, but ``2**32 - p < 1.14 p`` for both fields, and
    field_params checks that a product of two such words stays below
    ``p * 2**32`` (:func:`monty_reduce`) and a sum of two below ``2 p * 2**32``
    (:func:`monty_reduce_sum4`); the reduced result is canonical.  Half the
    cost of :func:`canonical` where only products are taken (the base/base
    fold: 12% faster cache-resident on the CPU).
    """
    a = np.uint32(a)
    pp = np.uint32(p)
    if a >= pp:
        a = np.uint32(a - pp)  # 32-bit, as in canonical
    return a


@njit(cache=True)
def below_pr(x, p):
    """``x`` or ``x - p * 2**32``, whichever is ``< p * 2**32``.

    Input ``x < 2 p * 2**32`` -- which holds for a sum of four products of
    canonical words, ``< 4 p**2``, since ``2p < 2**32`` -- so one conditional
    subtraction suffices.  Subtracting ``p * 2**32`` leaves ``x * 2**-32 mod p``
    unchanged.
    """
    x = np.uint64(x)
    pr = np.uint64(p) << _SHIFT32
    if x >= pr:
        x -= pr
    return x


@njit(cache=True)
def monty_reduce_sum4(x, p, mu_neg):
    """Return ``x * 2**-32 mod p`` in ``[0, p)`` for ``0 <= x < 2 p * 2**32``.

    Covers a sum of up to four products of canonical words (``< 4 p**2``):
    the high half of ``x``, below ``2p``, less ``p`` when it is at least
    ``p`` (which leaves ``x * 2**-32 mod p`` and the low half unchanged)
    brings ``x`` into :func:`monty_reduce`'s range with one 32-bit unsigned
    min, instead of reducing the high and low halves apart.
    """
    x = np.uint64(x)
    h = np.uint32(x >> _SHIFT32)
    # h - p mod 2**32: below p when h >= p; when h < p it wraps to 2**32 - p + h > h.
    # (Not reduce_once: the same on the CPU, but its compare-and-subtract cost the
    # Numba-CUDA ext/ext fold 32 more sm_90 instructions; the min fuses with the add.)
    h = min(h, np.uint32((np.uint64(h) + (_R32 - np.uint64(p))) & _MASK32))
    return _high_difference(h, x, p, mu_neg)


@njit(cache=True)
def mont_mul(a, b, p, mu_neg):
    """Montgomery product ``a * b * 2**-32 mod p``; ``a * b < p**2 < p * 2**32``."""
    return monty_reduce(np.uint64(a) * np.uint64(b), p, mu_neg)


@njit(cache=True)
def to_monty(v, p, mu_neg, r2):
    """The Montgomery word of the integer ``v`` (any uint32): ``(v mod p) 2**32 mod p``.

    ``r2`` is ``2**64 mod p`` (``FieldParams.r2_mod_p``): the Montgomery
    product of ``v`` and ``r2`` is ``v 2**64 2**-32``.  ``v < 2**32 < p
    2**32`` keeps the product in range, so ``v`` need not be reduced first.
    """
    return monty_reduce(np.uint64(v) * np.uint64(r2), p, mu_neg)


@njit(cache=True)
def from_monty(a, p, mu_neg):
    """The canonical integer in ``[0, p)`` of the Montgomery word ``a`` (any
    uint32, read mod p): ``a 2**-32 mod p``."""
    return monty_reduce(np.uint64(a), p, mu_neg)


@njit(cache=True)
def mod_add(a, b, p):
    """``a + b mod p``; ``a + b < 2p < 2**32``.

    The sum is cast back to 32 bits (it fits): Numba types ``uint32 + uint32``
    as 64-bit, and a 64-bit compare has no unsigned AVX2 instruction, where the
    32-bit one is an unsigned min.
    """
    s = np.uint32(np.uint32(a) + np.uint32(b))
    if s >= np.uint32(p):
        s = np.uint32(s - np.uint32(p))
    return s


@njit(cache=True)
def mod_sub(a, b, p):
    """``a - b mod p`` as ``a + (p - b)`` less ``p`` if that reaches ``p``.

    Never negative (``b < p``) and below ``2p < 2**32``; the shape of
    :func:`mod_add` (one compare, one conditional subtract), which LLVM
    vectorizes.  The former two-return form (``a - b`` if ``a >= b``) left
    the CPU base-field ``sub`` scalar: 14x slower than ``add`` at 2**22.
    """
    s = np.uint32(np.uint32(a) + np.uint32(np.uint32(p) - np.uint32(b)))
    if s >= np.uint32(p):
        s -= np.uint32(p)
    return np.uint32(s)


@njit(cache=True)
def mod_neg(a, p):
    """``-a mod p`` (0 stays 0), for ``a`` in ``[0, p)`` (a word ``>= p`` gives
    one that is not canonical: reduce it with :func:`canonical` first)."""
    a = np.uint32(a)
    if a == np.uint32(0):
        return np.uint32(0)
    return np.uint32(np.uint32(p) - a)


@njit(cache=True)
def mont_pow_u32(a, e, p, mu_neg, one):
    """``a ** e`` for a 32-bit exponent ``e`` (read as uint32), left-to-right square
    and multiply; ``one`` is the Montgomery word of 1 (``FieldParams.r_mod_p``).
    ``a`` may be any uint32 word (read mod p); the result is canonical."""
    r = np.uint32(one)
    e = np.uint32(e)
    for k in range(31, -1, -1):
        r = mont_mul(r, r, p, mu_neg)
        if (e >> np.uint32(k)) & np.uint32(1):
            r = mont_mul(r, a, p, mu_neg)
    return r


@njit(cache=True)
def mont_inv(a, p, mu_neg, one):
    """``a ** (p - 2)`` (Fermat): the inverse of a nonzero ``a``, any uint32 word
    (read mod p), canonical.  Zero (a word ``== 0 mod p``) gives 0: the caller
    checks for it."""
    return mont_pow_u32(a, np.uint32(p) - np.uint32(2), p, mu_neg, one)


@njit(cache=True)
def base_map1(op, a, p, mu_neg, one):
    """Unary base-field op selected by opcode (NEG, SQUARE, INV) on ``a mod p``."""
    a = canonical(a, p)
    if op == OP_NEG:
        return mod_neg(a, p)
    if op == OP_SQUARE:
        return mont_mul(a, a, p, mu_neg)
    return mont_inv(a, p, mu_neg, one)


@njit(cache=True)
def base_map2(op, a, b, p, mu_neg):
    """Binary base-field op selected by opcode (ADD, SUB, MUL) on ``a, b mod p``."""
    a = canonical(a, p)
    if op == OP_ADD:
        return mod_add(a, canonical(b, p), p)
    if op == OP_SUB:
        return mod_sub(a, canonical(b, p), p)
    # a < p and b < 2**32 keep a * b < p * 2**32, mont_mul's range, and its
    # result is canonical: b needs no reduction (the same bytes; 2**22
    # products 8.2 -> 7.4 ms on one AVX2 core)
    return mont_mul(a, b, p, mu_neg)


@njit(cache=True)
def ext4_wrap(b1, b2, b3, p, mu_neg, w_mont):
    """``(W b_1, W b_2, W b_3)``: the wrap-around multiples of ``b`` (Montgomery words)."""
    return (mont_mul(b1, w_mont, p, mu_neg), mont_mul(b2, w_mont, p, mu_neg),
            mont_mul(b3, w_mont, p, mu_neg))


@njit(cache=True)
def ext4_dot(a0, a1, a2, a3, b0, b1, b2, b3, bw1, bw2, bw3):
    """Unreduced coefficients of ``a * b`` in ``F_p[x]/(x^4 - W)``.

    ``bw_j = W * b_j`` (Montgomery words, :func:`ext4_wrap`).
    ``c_k = sum_{i+j=k} a_i b_j + sum_{i+j=k+4} a_i bw_j``: four products
    ``< p**2`` each, so every returned uint64 is ``< 4 p**2 < 2 p * 2**32``
    (``p < 2**31`` is checked for both fields at import of field_params) and
    :func:`monty_reduce_sum4` of it is the Montgomery word of ``c_k`` (the
    extra ``2**-32`` of ``bw_j`` cancels the ``2**32`` of the Montgomery form
    of ``W``).
    """
    a0, a1, a2, a3 = np.uint64(a0), np.uint64(a1), np.uint64(a2), np.uint64(a3)
    b0, b1, b2, b3 = np.uint64(b0), np.uint64(b1), np.uint64(b2), np.uint64(b3)
    bw1, bw2, bw3 = np.uint64(bw1), np.uint64(bw2), np.uint64(bw3)
    return (a0 * b0 + a1 * bw3 + a2 * bw2 + a3 * bw1,
            a0 * b1 + a1 * b0 + a2 * bw3 + a3 * bw2,
            a0 * b2 + a1 * b1 + a2 * b0 + a3 * bw3,
            a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0)


@njit(cache=True)
def ext4_mul(a0, a1, a2, a3, b0, b1, b2, b3, p, mu_neg, w_mont):
    """Product in F_p[x]/(x^4 - W) with 7 reductions instead of 16; every
    coefficient of ``a`` and ``b`` in ``[0, p)`` (see the module's Conventions).

    The three wrap-around multiples ``W b_j`` (3 Montgomery products), then
    every coefficient is a sum of four 32x32->64 products reduced once
    (:func:`ext4_dot`, :func:`monty_reduce_sum4`).
    """
    bw1, bw2, bw3 = ext4_wrap(b1, b2, b3, p, mu_neg, w_mont)
    c = ext4_dot(a0, a1, a2, a3, b0, b1, b2, b3, bw1, bw2, bw3)
    return (monty_reduce_sum4(c[0], p, mu_neg), monty_reduce_sum4(c[1], p, mu_neg),
            monty_reduce_sum4(c[2], p, mu_neg), monty_reduce_sum4(c[3], p, mu_neg))


@njit(cache=True)
def mont_mul_sub(a, b, c, d, p, mu_neg):
    """Montgomery word of ``a b - c d`` (canonical words) with one reduction:
    ``a b + (p**2 - c d)`` is a sum of two terms ``<= p**2``, in
    :func:`monty_reduce_sum4`'s range, and ``p**2`` vanishes mod p."""
    pp = np.uint64(p) * np.uint64(p)
    return monty_reduce_sum4(np.uint64(a) * np.uint64(b) + (pp - np.uint64(c) * np.uint64(d)),
                             p, mu_neg)


@njit(cache=True)
def ext4_norm(a0, a1, a2, a3, p, mu_neg, w_mont):
    """``(N0, N1, n)`` of ``a`` for :func:`ext4_inv`: ``n`` is the norm of
    ``a`` down to F_p, zero exactly when ``a`` is (``x^4 - W`` is irreducible).

    With ``u = x^2`` (``u^2 = W``), ``a = A + x B``, ``A = a0 + a2 u``,
    ``B = a1 + a3 u``.  ``(A + xB)(A - xB) = A^2 - u B^2 = N0 + N1 u`` and
    ``(N0 + N1 u)(N0 - N1 u) = N0^2 - W N1^2 = n``.

    Each of ``N0``, ``N1``, ``n`` is one reduction of a sum of products
    (negated terms as ``p**2`` minus the product, each term ``<= p**2``,
    at most four in all, so :func:`monty_reduce_sum4` takes it): 6
    reductions where one per product took 12.
    """
    pp = np.uint64(p) * np.uint64(p)
    a2w = np.uint64(mont_mul(a2, w_mont, p, mu_neg))  # W a2, W a3 (Montgomery words)
    a3w = np.uint64(mont_mul(a3, w_mont, p, mu_neg))
    a0, a1, a2, a3 = np.uint64(a0), np.uint64(a1), np.uint64(a2), np.uint64(a3)
    two = np.uint64(2)
    # N0 = a0^2 + W a2^2 - 2 W a1 a3;  N1 = 2 a0 a2 - a1^2 - W a3^2
    n0 = monty_reduce_sum4(a0 * a0 + a2 * a2w + two * (pp - a1 * a3w), p, mu_neg)
    n1 = monty_reduce_sum4(two * (a0 * a2) + (pp - a1 * a1) + (pp - a3 * a3w), p, mu_neg)
    n1w = mont_mul(n1, w_mont, p, mu_neg)
    return n0, n1, mont_mul_sub(n0, n0, n1w, n1, p, mu_neg)


@njit(cache=True)
def ext4_inv_finish(a0, a1, a2, a3, n0, n1, ni, p, mu_neg, w_mont):
    """``a^-1 = (A - xB)(N0 - N1 u) ni`` from :func:`ext4_norm`'s ``N0, N1``
    and ``ni``, the inverse of its norm (``ni`` is taken into ``N0``, ``N1``
    first, so each coefficient is one :func:`mont_mul_sub`)."""
    m0 = mont_mul(n0, ni, p, mu_neg)
    m1 = mont_mul(n1, ni, p, mu_neg)
    m1w = mont_mul(m1, w_mont, p, mu_neg)
    # (A - xB)(M0 - M1 u): c0 = a0 M0 - W a2 M1, c1 = W a3 M1 - a1 M0,
    # c2 = a2 M0 - a0 M1, c3 = a1 M1 - a3 M0.
    return (mont_mul_sub(a0, m0, a2, m1w, p, mu_neg), mont_mul_sub(a3, m1w, a1, m0, p, mu_neg),
            mont_mul_sub(a2, m0, a0, m1, p, mu_neg), mont_mul_sub(a1, m1, a3, m0, p, mu_neg))


@njit(cache=True)
def ext4_inv(a0, a1, a2, a3, p, mu_neg, w_mont, one):
    """Inverse in F_p[x]/(x^4 - W) by two norm steps (:func:`ext4_norm`):
    ``a^-1 = (A - xB)(N0 - N1 u) / n``, coefficients in ``[0, p)``; the caller
    ensures ``a != 0``."""
    n0, n1, norm = ext4_norm(a0, a1, a2, a3, p, mu_neg, w_mont)
    ni = mont_inv(norm, p, mu_neg, one)
    return ext4_inv_finish(a0, a1, a2, a3, n0, n1, ni, p, mu_neg, w_mont)


@njit(cache=True)
def ext4_map1(op, a0, a1, a2, a3, p, mu, wm, one):
    """Unary extension op selected by opcode (NEG, SQUARE, INV), coefficients mod p."""
    a0, a1, a2, a3 = canonical(a0, p), canonical(a1, p), canonical(a2, p), canonical(a3, p)
    if op == OP_NEG:
        return mod_neg(a0, p), mod_neg(a1, p), mod_neg(a2, p), mod_neg(a3, p)
    if op == OP_SQUARE:
        return ext4_mul(a0, a1, a2, a3, a0, a1, a2, a3, p, mu, wm)
    return ext4_inv(a0, a1, a2, a3, p, mu, wm, one)


@njit(cache=True)
def ext4_map2(op, a0, a1, a2, a3, b0, b1, b2, b3, p, mu, wm):
    """Binary extension op selected by opcode (ADD, SUB, MUL), coefficients mod p."""
    a0, a1, a2, a3 = canonical(a0, p), canonical(a1, p), canonical(a2, p), canonical(a3, p)
    b0, b1, b2, b3 = canonical(b0, p), canonical(b1, p), canonical(b2, p), canonical(b3, p)
    if op == OP_ADD:
        return mod_add(a0, b0, p), mod_add(a1, b1, p), mod_add(a2, b2, p), mod_add(a3, b3, p)
    if op == OP_SUB:
        return mod_sub(a0, b0, p), mod_sub(a1, b1, p), mod_sub(a2, b2, p), mod_sub(a3, b3, p)
    return ext4_mul(a0, a1, a2, a3, b0, b1, b2, b3, p, mu, wm)


@njit(cache=True)
def ext4_base_map2(op, a0, a1, a2, a3, s, base_first, p, mu):
    """Binary op between the extension element ``a`` and the base element ``s``.

    ``s`` counts as the embedded ``(s, 0, 0, 0)``: ``a op s``, or ``s op a``
    when ``base_first`` is true.  Byte-identical to :func:`ext4_map2` on the
    embedding (both give the canonical words), without its zero products: a
    product scales each coefficient (4 reductions instead of 7).
    """
    a0, a1, a2, a3 = canonical(a0, p), canonical(a1, p), canonical(a2, p), canonical(a3, p)
    s = canonical(s, p)
    if op == OP_ADD:
        return mod_add(a0, s, p), a1, a2, a3
    if op == OP_SUB:
        if base_first:  # s - a
            return mod_sub(s, a0, p), mod_neg(a1, p), mod_neg(a2, p), mod_neg(a3, p)
        return mod_sub(a0, s, p), a1, a2, a3
    return (mont_mul(a0, s, p, mu), mont_mul(a1, s, p, mu), mont_mul(a2, s, p, mu),
            mont_mul(a3, s, p, mu))


@njit(cache=True)
def base_fold(lo, hi, r, p, mu_neg):
    """One multilinear fold ``lo + r (hi - lo)`` of base words (read mod p).

    The words of ``add(lo, mul(r, sub(hi, lo)))`` (all canonical), in one
    pass: the fused kernels of ``mle_fold`` read each pair once.
    """
    lo = canonical(lo, p)
    d = mod_sub(canonical(hi, p), lo, p)
    return mod_add(lo, mont_mul(canonical(r, p), d, p, mu_neg), p)


@njit(cache=True)
def ext4_fold(l0, l1, l2, l3, h0, h1, h2, h3, r0, r1, r2, r3, v_deg, r_deg, p, mu_neg,
              w_mont):
    """One multilinear fold ``lo + r (hi - lo)`` on the extension (words read mod p).

    ``v_deg`` 1: ``lo``, ``hi`` are base elements in ``l0``, ``h0`` (the
    other coefficients are ignored), embedded as ``(s, 0, 0, 0)``; ``r_deg``
    1 likewise for ``r``.  The difference stays base where the values are,
    so the product takes 4 Montgomery products where one side is base and
    the 7-reduction :func:`ext4_mul` only where both are extension elements;
    the words are those of the extension ops on the embeddings (canonical).
    """
    l0, h0, r0 = canonical(l0, p), canonical(h0, p), canonical(r0, p)
    zero = np.uint32(0)
    if r_deg == 1:
        r1 = r2 = r3 = zero
    else:
        r1, r2, r3 = canonical(r1, p), canonical(r2, p), canonical(r3, p)
    d0 = mod_sub(h0, l0, p)
    if v_deg == 1:  # a base difference scales r
        return (mod_add(l0, mont_mul(r0, d0, p, mu_neg), p), mont_mul(r1, d0, p, mu_neg),
                mont_mul(r2, d0, p, mu_neg), mont_mul(r3, d0, p, mu_neg))
    l1, l2, l3 = canonical(l1, p), canonical(l2, p), canonical(l3, p)
    d1 = mod_sub(canonical(h1, p), l1, p)
    d2 = mod_sub(canonical(h2, p), l2, p)
    d3 = mod_sub(canonical(h3, p), l3, p)
    if r_deg == 1:  # a base r scales the difference
        t0, t1 = mont_mul(r0, d0, p, mu_neg), mont_mul(r0, d1, p, mu_neg)
        t2, t3 = mont_mul(r0, d2, p, mu_neg), mont_mul(r0, d3, p, mu_neg)
    else:
        t0, t1, t2, t3 = ext4_mul(d0, d1, d2, d3, r0, r1, r2, r3, p, mu_neg, w_mont)
    return mod_add(l0, t0, p), mod_add(l1, t1, p), mod_add(l2, t2, p), mod_add(l3, t3, p)


@njit(cache=True)
def base_eq_split(a, r, p, mu_neg):
    """``(a - a r, a r)`` for base words (read mod p): one eq-table doubling
    step, an entry ``eq(point, b)`` split by the next variable ``r`` into its
    ``b_j = 0`` and ``b_j = 1`` children (the words of ``mul`` then ``sub``)."""
    a = canonical(a, p)
    h = mont_mul(a, canonical(r, p), p, mu_neg)
    return mod_sub(a, h, p), h


@njit(cache=True)
def ext4_eq_split(a0, a1, a2, a3, r0, r1, r2, r3, r_deg, p, mu_neg, w_mont):
    """:func:`base_eq_split` on the extension, ``a`` extension words and ``r``
    extension (``r_deg`` 4) or base (1: ``r0``, the rest ignored; 4
    products).  Returns the 4 words of ``a - a r`` then the 4 of ``a r``."""
    a0, a1, a2, a3 = canonical(a0, p), canonical(a1, p), canonical(a2, p), canonical(a3, p)
    r0 = canonical(r0, p)
    if r_deg == 1:
        h0, h1 = mont_mul(a0, r0, p, mu_neg), mont_mul(a1, r0, p, mu_neg)
        h2, h3 = mont_mul(a2, r0, p, mu_neg), mont_mul(a3, r0, p, mu_neg)
    else:
        h0, h1, h2, h3 = ext4_mul(a0, a1, a2, a3, r0, canonical(r1, p), canonical(r2, p),
                                  canonical(r3, p), p, mu_neg, w_mont)
    return (mod_sub(a0, h0, p), mod_sub(a1, h1, p), mod_sub(a2, h2, p), mod_sub(a3, h3, p),
            h0, h1, h2, h3)


@njit(cache=True)
def exponent_bit(e_hi, e_lo, k):
    """Bit ``k`` of the 128-bit exponent ``e_hi * 2**64 + e_lo`` (0 for ``k >= 128``)."""
    if k >= 128:  # a uint64 shifted by >= 64 is undefined in LLVM (x86 masks the count)
        return np.uint64(0)
    if k >= 64:
        return (np.uint64(e_hi) >> np.uint64(k - 64)) & np.uint64(1)
    return (np.uint64(e_lo) >> np.uint64(k)) & np.uint64(1)


@njit(cache=True)
def base_pow(a, e_hi, e_lo, nbits, p, mu_neg, one):
    """``(a mod p) ** e`` for ``e = e_hi * 2**64 + e_lo < 2**nbits`` (square and multiply).

    ``one`` is the Montgomery word of 1 (``FieldParams.r_mod_p``), as in every
    function here that takes it; ``nbits`` above 128 only adds leading zeros.
    """
    a = canonical(a, p)
    r = np.uint32(one)
    for k in range(nbits - 1, -1, -1):
        r = mont_mul(r, r, p, mu_neg)
        if exponent_bit(e_hi, e_lo, k):
            r = mont_mul(r, a, p, mu_neg)
    return r


@njit(cache=True)
def ext4_pow(a0, a1, a2, a3, e_hi, e_lo, nbits, p, mu_neg, w_mont, one):
    """Extension ``a ** e`` for ``e = e_hi * 2**64 + e_lo < 2**nbits``, coefficients mod p."""
    a0, a1, a2, a3 = canonical(a0, p), canonical(a1, p), canonical(a2, p), canonical(a3, p)
    r0 = np.uint32(one)
    r1 = np.uint32(0)
    r2 = np.uint32(0)
    r3 = np.uint32(0)
    for k in range(nbits - 1, -1, -1):
        r0, r1, r2, r3 = ext4_mul(r0, r1, r2, r3, r0, r1, r2, r3, p, mu_neg, w_mont)
        if exponent_bit(e_hi, e_lo, k):
            r0, r1, r2, r3 = ext4_mul(r0, r1, r2, r3, a0, a1, a2, a3, p, mu_neg, w_mont)
    return r0, r1, r2, r3
