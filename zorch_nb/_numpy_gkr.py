"""The LogUp-GKR transitions in plain NumPy: the benchmarks' yardstick.

This is the code a user would write without zorch_nb -- canonical integers
(not Montgomery words) in ``uint64`` arrays, ``% p`` after the products, the
jagged slot formulas vectorized with ``searchsorted`` -- kept in one place so
that ``python -m zorch_nb bench`` and the asv suite time the same thing (and
tests/test_bench.py checks it computes what the kernels do).

Values: base ``(n,)``, extension ``(n, 4)`` (coefficients of ``1, x, x^2,
x^3`` in ``F_p[x] / (x^4 - w)``), every entry in ``[0, p)`` with ``p < 2**31``.
A product of two is below ``2**62`` and a sum of two products below
``2**63``, so uint64 never wraps where one ``% p`` follows a sum of two
products; a sum of four *reduced* products is below ``2**33``.
"""
import numpy as np

__all__ = ["ext_mul", "times", "node", "dense_transition", "jagged_transition",
           "dense_pyramid", "jagged_pyramid"]


def ext_mul(a, b, p, w):
    """``a * b`` in ``F_p[x] / (x^4 - w)`` for ``(n, 4)`` arrays (schoolbook,
    every product reduced before it is added; ``x^(k+4) = w x^k``)."""
    prods = [[(a[:, i] * b[:, j]) % p for j in range(4)] for i in range(4)]
    out = np.empty_like(a)
    for k in range(4):
        low = sum(prods[i][k - i] for i in range(k + 1))
        high = sum(prods[i][k + 4 - i] for i in range(k + 1, 4))
        out[:, k] = (low + w * (high % p)) % p
    return out


def times(x, d, p, w):
    """``x * d`` reduced, for any combination of base and extension operands
    (a base operand multiplies every coefficient)."""
    if x.ndim == 1 and d.ndim == 1:
        return x * d % p
    if x.ndim == 1:
        return x[:, None] * d % p
    if d.ndim == 1:
        return x * d[:, None] % p
    return ext_mul(x, d, p, w)


def node(n0, n1, d0, d1, p, w):
    """The fraction sum of every node: ``(n0 d1 + n1 d0, d0 d1)``."""
    if n0.ndim == d0.ndim == 1:  # n0 d1 + n1 d0 < 2 p**2 < 2**63: one reduction
        num = (n0 * d1 + n1 * d0) % p
    else:
        num = (times(n0, d1, p, w) + times(n1, d0, p, w)) % p
    return num, times(d0, d1, p, w)


def dense_transition(layer, p, w):
    """One dense transition: output slot ``k`` has the nodes ``2k`` and
    ``2k + 1`` as its two children.  ``layer`` is ``(n0, n1, d0, d1)``; so is
    the result (views of the two node arrays, not copies)."""
    num, den = node(*layer, p, w)
    return num[0::2], num[1::2], den[0::2], den[1::2]


def jagged_transition(layer, rc, orc, width, p, w):
    """One jagged transition: segment ``s`` has ``rc[s]`` rows in and
    ``orc[s]`` slots out, ``width`` slots in all.

    Slot ``j`` of segment ``s`` folds its rows ``2j`` and ``2j + 1`` (a row
    past ``rc[s]`` is the neutral fraction ``0/1``, as is a slot past
    ``ceil(rc[s] / 2)``); slots past ``sum(orc)`` are dead (``0/0``).
    """
    n0, n1, d0, d1 = layer
    rc, orc = np.asarray(rc, np.int64), np.asarray(orc, np.int64)
    cum, start = np.cumsum(orc), np.cumsum(rc) - rc
    q = np.arange(width)
    s = np.minimum(np.searchsorted(cum, q, side="right"), len(orc) - 1)
    j = q - (cum[s] - orc[s])
    alive = q < cum[-1]
    live = alive & (j < (rc[s] + 1) // 2)
    pair = live & (2 * j + 1 < rc[s])
    e = np.where(live, start[s] + 2 * j, 0)
    o = np.where(pair, e + 1, 0)
    a = node(n0[e], n1[e], d0[e], d1[e], p, w)
    b = node(n0[o], n1[o], d0[o], d1[o], p, w)

    def pick(vals, mask, neutral):  # the node's value, else 0/1 padding or 0/0 dead
        fill = np.zeros_like(vals)
        if neutral:
            (fill if fill.ndim == 1 else fill[:, 0])[alive] = 1
        return np.where(mask if vals.ndim == 1 else mask[:, None], vals, fill)
    return (pick(a[0], live, False), pick(b[0], pair, False), pick(a[1], live, True),
            pick(b[1], pair, True))


def dense_pyramid(layer, levels, p, w):
    """``levels`` dense transitions from ``layer``; every layer is kept (a GKR
    prover needs each one): returns ``[layer, first transition, ...]``."""
    out = [tuple(layer)]
    for _ in range(levels):
        out.append(dense_transition(out[-1], p, w))
    return out


def jagged_pyramid(layer, row_counts, steps, p, w):
    """Jagged transitions along ``steps`` (pairs ``(counts, width)``) from
    ``layer`` with ``row_counts``; returns every layer, the first included."""
    out, rc = [tuple(layer)], row_counts
    for orc, width in steps:
        out.append(jagged_transition(out[-1], rc, orc, width, p, w))
        rc = orc
    return out
