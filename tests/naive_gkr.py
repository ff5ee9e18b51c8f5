"""Pure-Python big-int reference of the LogUp-GKR fraction tree.

Independent of the kernels: values are canonical integers (base) or lists of
four canonical integers (extension), Montgomery words are decoded/encoded with
the constants re-derived in :mod:`naive`, and the index formulas are written
out from DESIGN.md section 2 as plainly as possible.

A reference layer is a dict ``{"n0", "n1", "d0", "d1": list of values,
"n_ext", "d_ext": bool}``; every value is stored as a 4-list (base values as
``[v, 0, 0, 0]``) and the flags say which MLEs are extension.
"""
import numpy as np

from naive import P, W, dec, enc, ext_add, ext_mul


def _as_values(words, name, ext):
    p = P[name]
    a = np.asarray(words)
    if ext:
        return [[dec(int(w), p) for w in row] for row in a]
    return [[dec(int(w), p), 0, 0, 0] for w in a]


def _as_words(values, name, ext):
    p = P[name]
    if ext:
        return np.array([[enc(v, p) for v in row] for row in values], dtype=np.uint32).reshape(-1, 4)
    assert all(v[1:] == [0, 0, 0] for v in values)
    return np.array([enc(v[0], p) for v in values], dtype=np.uint32)


def layer_from_words(name, n0, n1, d0, d1):
    """Reference layer of four host word arrays."""
    n_ext, d_ext = np.asarray(n0).ndim == 2, np.asarray(d0).ndim == 2
    return {"n0": _as_values(n0, name, n_ext), "n1": _as_values(n1, name, n_ext),
            "d0": _as_values(d0, name, d_ext), "d1": _as_values(d1, name, d_ext),
            "n_ext": n_ext, "d_ext": d_ext}


def layer_words(name, layer):
    """``(n0, n1, d0, d1)`` word arrays of a reference layer."""
    return tuple(_as_words(layer[k], name, layer["n_ext"] if k[0] == "n" else layer["d_ext"])
                 for k in ("n0", "n1", "d0", "d1"))


def frac_add(name, a, b, c, d):
    """``a/b + c/d = (a d + c b) / (b d)`` on 4-lists."""
    p, w = P[name], W[name]
    return ext_add(ext_mul(a, d, p, w), ext_mul(c, b, p, w), p), ext_mul(b, d, p, w)


def _node(name, layer, i):
    return frac_add(name, layer["n0"][i], layer["d0"][i], layer["n1"][i], layer["d1"][i])


def _out_layer(layer, n):
    return {"n0": [None] * n, "n1": [None] * n, "d0": [None] * n, "d1": [None] * n,
            "n_ext": layer["n_ext"] or layer["d_ext"], "d_ext": layer["d_ext"]}


def dense_transition(name, layer):
    """Fold the lowest row variable: slot ``k`` takes nodes ``2k`` and ``2k + 1``."""
    half = len(layer["n0"]) // 2
    out = _out_layer(layer, half)
    for k in range(half):
        out["n0"][k], out["d0"][k] = _node(name, layer, 2 * k)
        out["n1"][k], out["d1"][k] = _node(name, layer, 2 * k + 1)
    return out


ZERO = [0, 0, 0, 0]
ONE = [1, 0, 0, 0]


def jagged_transition(name, layer, rc, orc, out_width):
    """Jagged transition, written per segment (not per output slot).

    Segment ``s`` occupies input rows ``base[s] .. base[s] + rc[s]`` and output
    slots ``start[s] .. start[s] + orc[s]``; its first ``ceil(rc/2)`` output
    slots fold node pairs (the last one with a neutral partner when ``rc`` is
    odd), the rest of its slots are neutral, and every slot past ``sum(orc)``
    is dead (all zeros).
    """
    out = _out_layer(layer, out_width)
    for key in ("n0", "n1", "d0", "d1"):
        out[key] = [ZERO] * out_width
    base = 0
    start = 0
    for s in range(len(rc)):
        for j in range(orc[s]):
            q = start + j
            if 2 * j < rc[s]:
                out["n0"][q], out["d0"][q] = _node(name, layer, base + 2 * j)
                if 2 * j + 1 < rc[s]:
                    out["n1"][q], out["d1"][q] = _node(name, layer, base + 2 * j + 1)
                else:
                    out["n1"][q], out["d1"][q] = ZERO, ONE
            else:
                out["n0"][q], out["d0"][q], out["n1"][q], out["d1"][q] = ZERO, ONE, ZERO, ONE
        base += rc[s]
        start += orc[s]
    return out


def fraction_value(name, num, den):
    """The field element ``num / den`` (4-list), inverting with Fermat in F_p^4."""
    p, w = P[name], W[name]
    inv = [1, 0, 0, 0]
    e = p**4 - 2
    base = den
    while e:  # square and multiply, independent of the kernels' inversion
        if e & 1:
            inv = ext_mul(inv, base, p, w)
        base = ext_mul(base, base, p, w)
        e >>= 1
    return ext_mul(num, inv, p, w)


def fraction_sum(name, pairs):
    """Field sum of the fractions ``num/den`` over ``pairs`` (4-lists)."""
    p = P[name]
    total = [0, 0, 0, 0]
    for num, den in pairs:
        total = ext_add(total, fraction_value(name, num, den), p)
    return total
