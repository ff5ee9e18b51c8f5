"""Naive references with Python big integers (independent of the kernels).

Everything here works on canonical integers (not Montgomery words) and
re-derives the field constants from their definitions, so a wrong constant in
``kernels/field_params.py`` cannot hide.
"""
P = {"KoalaBear": 2**31 - 2**24 + 1, "BabyBear": 2**31 - 2**27 + 1}
W = {"KoalaBear": 3, "BabyBear": 11}
R = 2**32


def enc(v, p):
    """Montgomery word of a canonical value."""
    return v * R % p


def dec(w, p):
    """Canonical value of a Montgomery word."""
    return w * pow(R, -1, p) % p


def ext_add(a, b, p):
    return [(x + y) % p for x, y in zip(a, b)]


def ext_sub(a, b, p):
    return [(x - y) % p for x, y in zip(a, b)]


def ext_neg(a, p):
    return [(-x) % p for x in a]


def ext_mul(a, b, p, w):
    """Schoolbook product modulo x^4 - w."""
    c = [0] * 7
    for i in range(4):
        for j in range(4):
            c[i + j] += a[i] * b[j]
    return [(c[k] + w * (c[k + 4] if k + 4 < 7 else 0)) % p for k in range(4)]


def ext_pow(a, e, p, w):
    r = [1, 0, 0, 0]
    for bit in bin(e)[2:] if e else "":
        r = ext_mul(r, r, p, w)
        if bit == "1":
            r = ext_mul(r, a, p, w)
    return r


def ext_inv(a, p, w):
    """Inverse as a^(p^4 - 2) (Lagrange), independent of the kernels' norm method."""
    return ext_pow(a, p**4 - 2, p, w)
