"""Scalar Montgomery arithmetic for 31-bit primes, in Numba.

The one Montgomery reduction of the Numba kernels lives here.  Every function
is an ``@njit`` scalar function; the CPU kernels call it from ``prange`` loops
and the ``@cuda.jit`` kernels call the very same function (Numba-CUDA compiles
``@njit`` callees for the device), so CPU and GPU share one definition of the
arithmetic.

Conventions
-----------
* Every value named ``a``, ``b``, ``c*`` is a Montgomery word in ``[0, p)``.
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
from numba import njit

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


@njit(cache=True)
def monty_reduce(x, p, mu_neg):
    """Return ``x * 2**-32 mod p`` in ``[0, p)``.

    Input range: ``0 <= x < p * 2**32`` (uint64).  Then ``m * p < 2**63`` and
    ``x + m * p < 2**64`` (no wrap), and ``t = (x + m p) / 2**32 < 2p``, so one
    conditional subtraction makes the result canonical.
    """
    x = np.uint64(x)
    pp = np.uint64(p)
    # (x mod 2^32) * mu_neg < 2^64: the product itself never wraps.
    m = ((x & _MASK32) * np.uint64(mu_neg)) & _MASK32
    t = (x + m * pp) >> _SHIFT32
    if t >= pp:
        t -= pp
    return np.uint32(t)


@njit(cache=True)
def monty_reduce_wide(x, p, mu_neg):
    """Return ``x * 2**-32 mod p`` in ``[0, p)`` for any uint64 ``x``.

    With ``x = h * 2**32 + l``: ``x * 2**-32 = h + l * 2**-32 (mod p)``.
    ``l < 2**32 <= p * 2**32`` suits :func:`monty_reduce`; ``h < 2**32 < 3p``
    needs at most two subtractions.
    """
    x = np.uint64(x)
    pp = np.uint64(p)
    h = x >> _SHIFT32
    if h >= pp:
        h -= pp
    if h >= pp:
        h -= pp
    s = h + np.uint64(monty_reduce(x & _MASK32, p, mu_neg))  # < 2p < 2^32
    if s >= pp:
        s -= pp
    return np.uint32(s)


@njit(cache=True)
def mont_mul(a, b, p, mu_neg):
    """Montgomery product ``a * b * 2**-32 mod p``; ``a * b < p**2 < p * 2**32``."""
    return monty_reduce(np.uint64(a) * np.uint64(b), p, mu_neg)


@njit(cache=True)
def mod_add(a, b, p):
    """``a + b mod p``; ``a + b < 2p < 2**32``."""
    s = np.uint32(a) + np.uint32(b)
    if s >= np.uint32(p):
        s -= np.uint32(p)
    return np.uint32(s)


@njit(cache=True)
def mod_sub(a, b, p):
    """``a - b mod p`` without ever forming a negative number."""
    a = np.uint32(a)
    b = np.uint32(b)
    if a >= b:
        return np.uint32(a - b)
    return np.uint32(a + (np.uint32(p) - b))  # < p since a < b


@njit(cache=True)
def mod_neg(a, p):
    """``-a mod p`` (0 stays 0)."""
    a = np.uint32(a)
    if a == np.uint32(0):
        return np.uint32(0)
    return np.uint32(np.uint32(p) - a)


@njit(cache=True)
def mont_pow_u32(a, e, p, mu_neg, one):
    """``a ** e`` for a 32-bit exponent, left-to-right square and multiply."""
    r = np.uint32(one)
    e = np.uint32(e)
    for k in range(31, -1, -1):
        r = mont_mul(r, r, p, mu_neg)
        if (e >> np.uint32(k)) & np.uint32(1):
            r = mont_mul(r, a, p, mu_neg)
    return r


@njit(cache=True)
def mont_inv(a, p, mu_neg, one):
    """``a ** (p - 2)`` (Fermat); the caller guarantees ``a != 0``."""
    return mont_pow_u32(a, np.uint32(p) - np.uint32(2), p, mu_neg, one)


@njit(cache=True)
def base_map1(op, a, p, mu_neg, one):
    """Unary base-field op selected by opcode (NEG, SQUARE, INV)."""
    if op == OP_NEG:
        return mod_neg(a, p)
    if op == OP_SQUARE:
        return mont_mul(a, a, p, mu_neg)
    return mont_inv(a, p, mu_neg, one)


@njit(cache=True)
def base_map2(op, a, b, p, mu_neg):
    """Binary base-field op selected by opcode (ADD, SUB, MUL)."""
    if op == OP_ADD:
        return mod_add(a, b, p)
    if op == OP_SUB:
        return mod_sub(a, b, p)
    return mont_mul(a, b, p, mu_neg)


@njit(cache=True)
def ext4_mul(a0, a1, a2, a3, b0, b1, b2, b3, p, mu_neg, w_mont):
    """Product in F_p[x]/(x^4 - W), 7 reductions instead of 16.

    ``c_k = sum_{i+j=k} a_i b_j + W * sum_{i+j=k+4} a_i b_j``.  Products are
    accumulated as uint64 (each ``< p**2``) and reduced once per sum:

    * wrap sums (``i + j >= 4``) hold at most 3 products ``< 3 p**2 < 2**64``
      and are reduced wide, giving ``h`` in Montgomery form;
      ``h * W_mont`` then adds ``W * h`` after the final reduction;
    * the final sum per coefficient is at most 4 terms ``< 4 p**2 < 2**64``
      (see the import-time check in field_params) and is reduced wide.
    """
    a0 = np.uint64(a0)
    a1 = np.uint64(a1)
    a2 = np.uint64(a2)
    a3 = np.uint64(a3)
    b0 = np.uint64(b0)
    b1 = np.uint64(b1)
    b2 = np.uint64(b2)
    b3 = np.uint64(b3)
    wm = np.uint64(w_mont)
    h0 = np.uint64(monty_reduce_wide(a1 * b3 + a2 * b2 + a3 * b1, p, mu_neg))
    h1 = np.uint64(monty_reduce_wide(a2 * b3 + a3 * b2, p, mu_neg))
    h2 = np.uint64(monty_reduce(a3 * b3, p, mu_neg))
    c0 = monty_reduce_wide(a0 * b0 + h0 * wm, p, mu_neg)
    c1 = monty_reduce_wide(a0 * b1 + a1 * b0 + h1 * wm, p, mu_neg)
    c2 = monty_reduce_wide(a0 * b2 + a1 * b1 + a2 * b0 + h2 * wm, p, mu_neg)
    c3 = monty_reduce_wide(a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0, p, mu_neg)
    return c0, c1, c2, c3


@njit(cache=True)
def ext4_inv(a0, a1, a2, a3, p, mu_neg, w_mont, one):
    """Inverse in F_p[x]/(x^4 - W) by two norm steps; caller ensures a != 0.

    With ``u = x^2`` (``u^2 = W``), ``a = A + x B``, ``A = a0 + a2 u``,
    ``B = a1 + a3 u``.  ``(A + xB)(A - xB) = A^2 - u B^2 = N0 + N1 u`` and
    ``(N0 + N1 u)(N0 - N1 u) = N0^2 - W N1^2 = n`` lies in F_p, so
    ``a^-1 = (A - xB)(N0 - N1 u) / n``.
    """
    # Products a_i a_j and the W-multiples they need (all Montgomery words).
    a00 = mont_mul(a0, a0, p, mu_neg)
    a11 = mont_mul(a1, a1, p, mu_neg)
    a22w = mont_mul(mont_mul(a2, a2, p, mu_neg), w_mont, p, mu_neg)
    a33w = mont_mul(mont_mul(a3, a3, p, mu_neg), w_mont, p, mu_neg)
    a02 = mont_mul(a0, a2, p, mu_neg)
    a13w = mont_mul(mont_mul(a1, a3, p, mu_neg), w_mont, p, mu_neg)
    # N0 = a0^2 + W a2^2 - 2 W a1 a3;  N1 = 2 a0 a2 - a1^2 - W a3^2
    n0 = mod_sub(mod_sub(mod_add(a00, a22w, p), a13w, p), a13w, p)
    n1 = mod_sub(mod_sub(mod_add(a02, a02, p), a11, p), a33w, p)
    n1w = mont_mul(n1, w_mont, p, mu_neg)
    norm = mod_sub(mont_mul(n0, n0, p, mu_neg), mont_mul(n1w, n1, p, mu_neg), p)
    ni = mont_inv(norm, p, mu_neg, one)
    # (A - xB)(N0 - N1 u): c0 = a0 N0 - W a2 N1, c1 = W a3 N1 - a1 N0,
    # c2 = a2 N0 - a0 N1, c3 = a1 N1 - a3 N0.
    c0 = mod_sub(mont_mul(a0, n0, p, mu_neg), mont_mul(a2, n1w, p, mu_neg), p)
    c1 = mod_sub(mont_mul(a3, n1w, p, mu_neg), mont_mul(a1, n0, p, mu_neg), p)
    c2 = mod_sub(mont_mul(a2, n0, p, mu_neg), mont_mul(a0, n1, p, mu_neg), p)
    c3 = mod_sub(mont_mul(a1, n1, p, mu_neg), mont_mul(a3, n0, p, mu_neg), p)
    return (mont_mul(c0, ni, p, mu_neg), mont_mul(c1, ni, p, mu_neg),
            mont_mul(c2, ni, p, mu_neg), mont_mul(c3, ni, p, mu_neg))


@njit(cache=True)
def ext4_map1(op, a0, a1, a2, a3, p, mu, wm, one):
    """Unary extension op selected by opcode (NEG, SQUARE, INV)."""
    if op == OP_NEG:
        return mod_neg(a0, p), mod_neg(a1, p), mod_neg(a2, p), mod_neg(a3, p)
    if op == OP_SQUARE:
        return ext4_mul(a0, a1, a2, a3, a0, a1, a2, a3, p, mu, wm)
    return ext4_inv(a0, a1, a2, a3, p, mu, wm, one)


@njit(cache=True)
def ext4_map2(op, a0, a1, a2, a3, b0, b1, b2, b3, p, mu, wm):
    """Binary extension op selected by opcode (ADD, SUB, MUL)."""
    if op == OP_ADD:
        return mod_add(a0, b0, p), mod_add(a1, b1, p), mod_add(a2, b2, p), mod_add(a3, b3, p)
    if op == OP_SUB:
        return mod_sub(a0, b0, p), mod_sub(a1, b1, p), mod_sub(a2, b2, p), mod_sub(a3, b3, p)
    return ext4_mul(a0, a1, a2, a3, b0, b1, b2, b3, p, mu, wm)


@njit(cache=True)
def exponent_bit(e_hi, e_lo, k):
    """Bit ``k`` of the 128-bit exponent ``e_hi * 2**64 + e_lo``."""
    if k >= 64:
        return (np.uint64(e_hi) >> np.uint64(k - 64)) & np.uint64(1)
    return (np.uint64(e_lo) >> np.uint64(k)) & np.uint64(1)


@njit(cache=True)
def base_pow(a, e_hi, e_lo, nbits, p, mu_neg, one):
    """``a ** e`` for ``e = e_hi * 2**64 + e_lo < 2**nbits`` (square and multiply)."""
    r = np.uint32(one)
    for k in range(nbits - 1, -1, -1):
        r = mont_mul(r, r, p, mu_neg)
        if exponent_bit(e_hi, e_lo, k):
            r = mont_mul(r, a, p, mu_neg)
    return r


@njit(cache=True)
def ext4_pow(a0, a1, a2, a3, e_hi, e_lo, nbits, p, mu_neg, w_mont, one):
    """Extension ``a ** e`` for ``e = e_hi * 2**64 + e_lo < 2**nbits``."""
    r0 = np.uint32(one)
    r1 = np.uint32(0)
    r2 = np.uint32(0)
    r3 = np.uint32(0)
    for k in range(nbits - 1, -1, -1):
        r0, r1, r2, r3 = ext4_mul(r0, r1, r2, r3, r0, r1, r2, r3, p, mu_neg, w_mont)
        if exponent_bit(e_hi, e_lo, k):
            r0, r1, r2, r3 = ext4_mul(r0, r1, r2, r3, a0, a1, a2, a3, p, mu_neg, w_mont)
    return r0, r1, r2, r3
