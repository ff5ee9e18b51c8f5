"""The one home of every field constant.

Each supported prime field is a :class:`FieldParams` record.  Every backend
(Numba CPU, Numba-CUDA, CUDA C through CuPy) reads its constants from here; the
CUDA C sources receive them through the ``#define`` preamble built by
:func:`cuda_defines`.  The invariants the Montgomery arithmetic relies on are
checked when this module is imported, so a wrong constant cannot ship.

Representation
--------------
An element ``v`` of F_p is stored as its Montgomery word ``v * 2**32 mod p``,
always fully reduced into ``[0, p)``.  An element of the degree-4 extension
F_p[x] / (x^4 - W) is stored as four such words, coefficients of
``1, x, x^2, x^3`` in that order (the trailing axis of length 4).

These are Plonky3's conventions for its KoalaBear and BabyBear fields (the
same p, radix 2**32, W = 3 and 11, and coefficient order; checked against
its sources and its test vectors): a word array here holds the bytes of
Plonky3's internal Montgomery values, and a C-contiguous ``(n, 4)`` array
those of a ``Vec`` of its ``BinomialExtensionField<F, 4>``.  One sign
differs: Plonky3's ``MONTY_MU`` is ``+p**-1 mod 2**32`` (its reduction
subtracts), ``mu_neg`` here its negative (the reduction adds), so the two
sum to ``2**32``.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

__all__ = ["FieldParams", "KOALABEAR", "BABYBEAR", "FIELDS", "cuda_defines"]

_R_BITS = 32
_R = 1 << _R_BITS


class FieldParams(NamedTuple):
    """Constants of one 31-bit Montgomery prime field and its quartic extension.

    Attributes
    ----------
    name : str
        Field name, also used as a cache key by every backend.
    p : int
        The prime, ``p < 2**31`` (so ``2p < 2**32`` and ``4p**2 < 2p * 2**32``).
    mu_neg : int
        ``-p**-1 mod 2**32``, the Montgomery reduction multiplier.
    r_mod_p : int
        ``2**32 mod p``: the Montgomery word of 1.
    r2_mod_p : int
        ``2**64 mod p``: multiplying a canonical value by it in Montgomery form
        encodes it.
    r_inv : int
        ``2**-32 mod p``: decoding multiplies a word by it.
    w : int
        The extension is F_p[x] / (x^4 - w); ``w`` canonical.
    w_mont : int
        Montgomery word of ``w``.
    """

    name: str
    p: int
    mu_neg: int
    r_mod_p: int
    r2_mod_p: int
    r_inv: int
    w: int
    w_mont: int


def _make(name: str, p: int, w: int) -> FieldParams:
    return FieldParams(
        name=name,
        p=p,
        mu_neg=(-pow(p, -1, _R)) % _R,
        r_mod_p=_R % p,
        r2_mod_p=(_R * _R) % p,
        r_inv=pow(_R, -1, p),
        w=w,
        w_mont=(w * _R) % p,
    )


KOALABEAR = _make("koalabear", p=(1 << 31) - (1 << 24) + 1, w=3)
BABYBEAR = _make("babybear", p=(1 << 31) - (1 << 27) + 1, w=11)
FIELDS = {f.name: f for f in (KOALABEAR, BABYBEAR)}


def _check(f: FieldParams) -> None:
    """Raise unless ``f``'s constants meet what the arithmetic relies on
    (explicit checks, not ``assert``: they must hold under ``python -O`` too)."""
    p = f.p
    q = (1 << 32) - p - 1  # the largest word reduced once (monty.reduce_once)
    checks = [
        # Bounds every delayed reduction in monty.py / monty.cuh relies on.
        (p < (1 << 31), "p must fit in 31 bits"),
        # A sum of four products (< 4p^2) must lie below 2 p 2^32: one conditional
        # subtraction of p 2^32 then brings it into Montgomery reduction's range.
        (4 * p * p < (2 * p) << 32, "four products must lie below 2 p 2^32"),
        # Any 32-bit word is < 3p: two conditional subtractions read it mod p
        # (monty.canonical, zorch_canonical).
        (3 * p > 1 << 32, "a 32-bit word must lie below 3p"),
        # A word reduced once is < 2^32 - p: one product of two must be
        # Montgomery-reducible, a sum of two must lie below 2 p 2^32.
        (q * q < p << 32 and 2 * q * q < (2 * p) << 32, "reduce_once bounds"),
        (all(p % d for d in range(2, 1 << 16) if d * d <= p), "p is not prime"),
        ((p * f.mu_neg) % _R == _R - 1, "p * mu_neg != -1 mod 2^32"),
        ((f.r_mod_p * f.r_inv) % p == 1, "r_mod_p * r_inv != 1 mod p"),
        # x^4 - w is irreducible over F_p iff 4 | p - 1 and w is a non-square.
        ((p - 1) % 4 == 0, "4 does not divide p - 1"),
        (pow(f.w, (p - 1) // 2, p) == p - 1, f"x^4 - {f.w} is reducible"),
        # The derived words, each against its definition (the product check
        # above holds for r_mod_p = r_inv = 1 too); canonical, as every word
        # the kernels are handed.
        (0 < f.w < p, "w must lie in [1, p)"),
        (f.r_mod_p == _R % p, "r_mod_p != 2^32 mod p"),
        (f.r_inv == pow(_R, -1, p), "r_inv != 2^-32 mod p"),
        (f.r2_mod_p == (_R * _R) % p, "r2_mod_p != 2^64 mod p"),
        (f.w_mont == (f.w * _R) % p, "w_mont != w 2^32 mod p"),
    ]
    for ok, what in checks:
        if not ok:
            raise RuntimeError(f"zorch_nb field constants of {f.name}: {what}")


for _f in FIELDS.values():
    _check(_f)


@functools.lru_cache(maxsize=None)
def kernel_words(f: FieldParams) -> tuple:
    """``(p, mu_neg, w_mont, r_mod_p)`` as NumPy uint32 scalars: the runtime
    field arguments of every Numba kernel, built once per field (making four
    NumPy scalars on every launch cost ~1 us of dispatch)."""
    return np.uint32(f.p), np.uint32(f.mu_neg), np.uint32(f.w_mont), np.uint32(f.r_mod_p)


def cuda_defines(f: FieldParams) -> str:
    """``#define`` preamble that specialises the CUDA C sources to field ``f``.

    One field per translation unit: a second preamble is an ``#error``.  (Two
    headers in one source kept the first field's functions -- monty.cuh's
    include guard skipped the second -- under the second field's macros, with
    only a "ZORCH_P redefined" warning.)"""
    return (
        f"// zorch_nb field preamble: {f.name}\n"
        f"#ifdef ZORCH_P\n"
        f"#error \"zorch_nb: one field per source: a field preamble (arithmetic_header) is "
        f"here already\"\n"
        f"#else\n"  # (not redefined after the error: their warnings came first)
        f"#define ZORCH_P {f.p}u\n"
        f"#define ZORCH_MU_NEG {f.mu_neg}u\n"
        f"#define ZORCH_R_MOD_P {f.r_mod_p}u\n"
        f"#define ZORCH_W_MONT {f.w_mont}u\n"
        f"#define ZORCH_R2_MOD_P {f.r2_mod_p}u\n"
        f"#endif\n"
    )
