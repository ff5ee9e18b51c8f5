"""Scalar and per-slot arithmetic of the LogUp-GKR fraction tree, in Numba.

Shared by the Numba CPU kernels (:mod:`.gkr_cpu`) and the Numba-CUDA kernels
(:mod:`.gkr_cuda_numba`); the CUDA C twin is ``cuda/gkr.cu``.

Math
----
A node ``i`` of a layer carries two child fractions ``n0[i]/d0[i]`` and
``n1[i]/d1[i]``; folding it gives their fraction sum

    ``N = n0 * d1 + n1 * d0``,   ``D = d0 * d1``.

Every value is a Montgomery word in ``[0, p)`` (base field) or four of them
(coefficients of ``1, x, x^2, x^3`` of an element of ``F_p[x]/(x^4 - W)``);
words are read mod p (:func:`.monty.canonical`), so a layer holding words
``>= p`` folds as the elements they are congruent to.
The numerator pair and the denominator pair may each be base or extension;
the *mode* ``2 * numerators_ext + denominators_ext`` names the combination
(:data:`MODE_BB` ... :data:`MODE_EE`).  ``N`` is extension when any input is,
``D`` when the denominators are.  Because every stored word is canonical, the
lean mixed formulas below give the same bytes as embedding base values as
``(a, 0, 0, 0)`` and multiplying in the extension.

Reduction budget (the point of the lean formulas): an extension product
``a * b`` is computed from ``b`` and ``W b_1, W b_2, W b_3`` (3 Montgomery
products) with every coefficient a sum of four 32x32->64 products reduced
once -- 4 reductions per product instead of 16, and the ``W b_j`` are shared
between the products that use the same ``b``.  ``n0 d1 + n1 d0`` in the
extension reduces each coefficient once (two 4-product sums brought below
``p * 2**32`` by a conditional subtraction, then added).

Two kinds of functions live here:

* ``@njit`` *scalar* functions (``frac_*``): scalars in, tuples out.  Numba-CUDA
  compiles them for the device; they never receive arrays (the CUDA simulator
  cannot unbox a device array into an ``@njit`` function).
* plain Python *array* functions (``fold_node``, ``put_neutral``, ...): the
  bodies of one output slot.  Each backend compiles them with its own
  decorator through :func:`make_slot_functions` (``numba.njit`` on the CPU,
  ``cuda.jit(device=True)`` on the GPU), so the slot logic is written once.

All integer intermediates are cast explicitly (see :mod:`.monty`), so compiled
Numba, the CUDA simulator and ``NUMBA_DISABLE_JIT=1`` agree bit for bit.
"""
import types

import numpy as np

from .jit import njit  # numba.njit, cache keyed on every kernel source

from .monty import (_high_difference, base_eq_split, base_fold, base_pow, below_pr, canonical,
                    ext4_dot, ext4_eq_split, ext4_fold, ext4_inv, ext4_inv_finish, ext4_mul,
                    ext4_norm, ext4_pow, ext4_wrap, exponent_bit, from_monty, mod_add, mod_neg,
                    mod_sub, mont_inv, mont_mul, mont_mul_sub, mont_pow_u32, monty_reduce,
                    monty_reduce_sum4, reduce_once, to_monty)

__all__ = ["MODE_BB", "MODE_BE", "MODE_EB", "MODE_EE", "mode_of", "output_mode",
           "mle_words", "SLOT_LIVE",
           "SLOT_PAD", "SLOT_DEAD", "frac_bb", "frac_be", "frac_eb", "frac_ee",
           "dense_slot", "jagged_slot", "make_slot_functions",
           "make_node_functions"]

#: Base numerators, base denominators.
MODE_BB = 0
#: Base numerators under extension denominators (outputs: extension, extension).
MODE_BE = 1
#: Extension numerators over base denominators (outputs: extension, base).
MODE_EB = 2
#: Extension numerators and denominators.
MODE_EE = 3

#: Jagged output slot kinds: folds live nodes / live neutral padding / dead.
SLOT_LIVE = 0
SLOT_PAD = 1
SLOT_DEAD = 2

# uint64 index constants of the array functions (see below).
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)
_U4 = np.uint64(4)


def mode_of(numerators_ext: bool, denominators_ext: bool) -> int:
    """Mode number of a numerator/denominator field combination."""
    return 2 * int(bool(numerators_ext)) + int(bool(denominators_ext))


def output_mode(mode: int) -> int:
    """Mode of a transition's outputs: numerators extension unless base/base,
    denominators extension when the inputs' are."""
    return mode_of(mode != MODE_BB, mode & 1)


def mle_words(mode: int) -> tuple:
    """Words per element of ``(numerators, denominators)`` of a layer in ``mode``."""
    return (4 if mode >> 1 else 1), (4 if mode & 1 else 1)


def cuda_kernel_name(kernel: str, mode: int, vec: bool) -> str:
    """Name expression of a ``gkr.cu`` template instance: ``kernel<NE, DE, VEC>``."""
    return f"{kernel}<{mode >> 1}, {mode & 1}, {'true' if vec else 'false'}>"


#: Every template instance the CuPy launchers use (all are instantiated in gkr.cu).
CUDA_NAME_EXPRESSIONS = tuple(cuda_kernel_name(k, m, v)
                              for k in ("zorch_gkr_fold_dense", "zorch_gkr_jagged",
                                        "zorch_gkr_pyramid_dense", "zorch_gkr_jagged_tail",
                                        "zorch_gkr_jagged_chunk")
                              for m in range(4) for v in (False, True))


@njit(cache=True)
def frac_bb(n0, n1, d0, d1, p, mu):
    """Base fraction sum: ``(n0 d1 + n1 d0, d0 d1)``, canonical results.

    Inputs may be words reduced only once (< ``2**32 - p``,
    :func:`.monty.reduce_once`): ``d0 d1`` then stays Montgomery-reducible and
    ``n0 d1 + n1 d0 < 2 p * 2**32`` takes one :func:`.monty.monty_reduce_sum4`.
    """
    num = monty_reduce_sum4(np.uint64(n0) * np.uint64(d1) + np.uint64(n1) * np.uint64(d0), p, mu)
    return num, mont_mul(d0, d1, p, mu)


@njit(cache=True)
def frac_be(n0, n1, a0, a1, a2, a3, b0, b1, b2, b3, p, mu, wm):
    """Base numerators ``n0, n1`` over extension denominators ``a = d0, b = d1``.

    Returns ``(N_0..N_3, D_0..D_3)``: ``N_k = n0 b_k + n1 a_k`` (two products
    ``< 2 p**2 < p * 2**32``: one :func:`monty_reduce` per coefficient) and
    ``D = a * b`` via :func:`ext4_dot` (3 + 4 reductions).
    """
    n0 = np.uint64(n0)
    n1 = np.uint64(n1)
    bw1, bw2, bw3 = ext4_wrap(b1, b2, b3, p, mu, wm)
    c = ext4_dot(a0, a1, a2, a3, b0, b1, b2, b3, bw1, bw2, bw3)
    return (monty_reduce(n0 * np.uint64(b0) + n1 * np.uint64(a0), p, mu),
            monty_reduce(n0 * np.uint64(b1) + n1 * np.uint64(a1), p, mu),
            monty_reduce(n0 * np.uint64(b2) + n1 * np.uint64(a2), p, mu),
            monty_reduce(n0 * np.uint64(b3) + n1 * np.uint64(a3), p, mu),
            monty_reduce_sum4(c[0], p, mu), monty_reduce_sum4(c[1], p, mu),
            monty_reduce_sum4(c[2], p, mu), monty_reduce_sum4(c[3], p, mu))


@njit(cache=True)
def frac_eb(u0, u1, u2, u3, v0, v1, v2, v3, d0, d1, p, mu):
    """Extension numerators ``u = n0, v = n1`` over base denominators.

    Returns ``(N_0..N_3, D)``: ``N_k = u_k d1 + v_k d0`` (two products
    ``< 2 p**2 < p * 2**32``, one reduction) and ``D = d0 d1``.
    """
    d0 = np.uint64(d0)
    d1 = np.uint64(d1)
    return (monty_reduce(np.uint64(u0) * d1 + np.uint64(v0) * d0, p, mu),
            monty_reduce(np.uint64(u1) * d1 + np.uint64(v1) * d0, p, mu),
            monty_reduce(np.uint64(u2) * d1 + np.uint64(v2) * d0, p, mu),
            monty_reduce(np.uint64(u3) * d1 + np.uint64(v3) * d0, p, mu),
            mont_mul(d0, d1, p, mu))


@njit(cache=True)
def frac_ee(u0, u1, u2, u3, v0, v1, v2, v3, a0, a1, a2, a3, b0, b1, b2, b3, p, mu, wm):
    """All-extension fraction sum of ``u/a`` and ``v/b``: ``(u b + v a, a b)``.

    Returns ``(N_0..N_3, D_0..D_3)`` with 14 reductions: ``W a_j``, ``W b_j``
    (6), then per coefficient ``x = [u b]_k``, ``y = [v a]_k`` (each
    ``< 4 p**2``) brought below ``p * 2**32`` by :func:`below_pr`, so
    ``x + y < 2 p * 2**32 < 2**64`` is reduced once (4), and ``[a b]_k`` (4).
    """
    aw1, aw2, aw3 = ext4_wrap(a1, a2, a3, p, mu, wm)
    bw1, bw2, bw3 = ext4_wrap(b1, b2, b3, p, mu, wm)
    x = ext4_dot(u0, u1, u2, u3, b0, b1, b2, b3, bw1, bw2, bw3)
    y = ext4_dot(v0, v1, v2, v3, a0, a1, a2, a3, aw1, aw2, aw3)
    z = ext4_dot(a0, a1, a2, a3, b0, b1, b2, b3, bw1, bw2, bw3)
    return (monty_reduce_sum4(below_pr(x[0], p) + below_pr(y[0], p), p, mu),
            monty_reduce_sum4(below_pr(x[1], p) + below_pr(y[1], p), p, mu),
            monty_reduce_sum4(below_pr(x[2], p) + below_pr(y[2], p), p, mu),
            monty_reduce_sum4(below_pr(x[3], p) + below_pr(y[3], p), p, mu),
            monty_reduce_sum4(z[0], p, mu), monty_reduce_sum4(z[1], p, mu),
            monty_reduce_sum4(z[2], p, mu), monty_reduce_sum4(z[3], p, mu))


# ---------------------------------------------------------------------------
# Array functions: one output slot.  Arrays are *flat* C-contiguous uint32:
# a base MLE is ``(n,)``, an extension MLE its ``(4 n,)`` view, and the mode
# says which is which.  Element indices are uint64: Numba then emits no
# negative-index wrap-around, so LLVM sees plain unit/stride-2 accesses and
# vectorizes the CPU loops (with signed indices it fell back to gathers and
# scatters, 3x slower).  Plain Python here; compiled per backend.
# ---------------------------------------------------------------------------

def load1(a, i, p):
    """Element ``i`` of a flat base MLE ``a``, mod p."""
    return canonical(a[i], p)


def load1_once(a, i, p):
    """Element ``i`` of a flat base MLE ``a``, reduced once (< ``2**32 - p``;
    enough for :func:`frac_bb`)."""
    return reduce_once(a[i], p)


def load4(a, i, p):
    """The four words of extension element ``i`` of a flat MLE ``a``, mod p."""
    j = i * _U4
    return (canonical(a[j], p), canonical(a[j + _U1], p), canonical(a[j + _U2], p),
            canonical(a[j + _U3], p))


def store4(a, k, c0, c1, c2, c3):
    """Extension element ``k`` of a flat MLE ``a`` is set to ``(c0, c1, c2, c3)``."""
    j = k * _U4
    a[j] = c0
    a[j + _U1] = c1
    a[j + _U2] = c2
    a[j + _U3] = c3


def fold_node(mode, n0, n1, d0, d1, i, on, od, k, p, mu, wm):
    """``on[k], od[k] = n0[i]/d0[i] + n1[i]/d1[i]`` (fraction sum) in ``mode``."""
    if mode == MODE_BB:
        c = frac_bb(load1_once(n0, i, p), load1_once(n1, i, p), load1_once(d0, i, p),
                    load1_once(d1, i, p), p, mu)
        on[k] = c[0]
        od[k] = c[1]
        return
    if mode == MODE_EB:
        u = load4(n0, i, p)
        v = load4(n1, i, p)
        c = frac_eb(u[0], u[1], u[2], u[3], v[0], v[1], v[2], v[3],
                    load1(d0, i, p), load1(d1, i, p), p, mu)
        store4(on, k, c[0], c[1], c[2], c[3])
        od[k] = c[4]
        return
    a = load4(d0, i, p)
    b = load4(d1, i, p)
    if mode == MODE_BE:
        c = frac_be(load1(n0, i, p), load1(n1, i, p), a[0], a[1], a[2], a[3],
                    b[0], b[1], b[2], b[3], p, mu, wm)
    else:
        u = load4(n0, i, p)
        v = load4(n1, i, p)
        c = frac_ee(u[0], u[1], u[2], u[3], v[0], v[1], v[2], v[3],
                    a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], p, mu, wm)
    store4(on, k, c[0], c[1], c[2], c[3])
    store4(od, k, c[4], c[5], c[6], c[7])


def put_constant(mode, on, od, k, num0, den0):
    """``on[k] = (num0, 0, 0, 0)``, ``od[k] = (den0, 0, 0, 0)`` (or their base words).

    Output numerators are extension unless ``mode`` is base/base, output
    denominators when the denominators are.  With ``(0, one)`` this writes the
    neutral fraction 0/1, with ``(0, 0)`` a dead slot.
    """
    zero = np.uint32(0)
    if mode == MODE_BB:
        on[k] = num0
    else:
        store4(on, k, num0, zero, zero, zero)
    if mode & 1:
        store4(od, k, den0, zero, zero, zero)
    else:
        od[k] = den0


def find_segment(prefix, row, q):
    """First segment ``s`` with ``cum[s] > q`` (``cum = prefix[row]``), clamped to ``nb - 1``.

    Binary search over inclusive prefix sums of counts (row 1 of a jagged
    transition's ``prefix``: the output counts).
    """
    lo = 0
    hi = prefix.shape[1] - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if prefix[row, mid] > q:
            hi = mid
        else:
            lo = mid + 1
    return lo


def jagged_source(q, s, rc, orc, prefix, in_nodes):
    """Kind of output slot ``q`` of segment ``s`` and the first node it folds.

    ``prefix[0]`` / ``prefix[1]`` are the inclusive prefix sums of ``rc`` /
    ``orc`` (int64); the input has ``in_nodes`` slots.  Returns
    ``(kind, e, partner)``: ``kind`` is :data:`SLOT_DEAD` when
    ``q >= sum(orc)``; else with ``j = q - (cum[s] - orc[s])``,
    :data:`SLOT_LIVE` when ``j < ceil(rc[s] / 2)`` -- then
    ``e = base[s] + 2 j`` (uint64) and ``partner`` tells whether node
    ``e + 1`` is live (``2 j + 1 < rc[s]``) -- and :data:`SLOT_PAD` (neutral
    padding) otherwise.

    Counts outside the contract (the GPU launchers never read device counts)
    must still not read outside the input: a node ``e`` outside
    ``[0, in_nodes)`` is read as padding, a partner past it as absent.
    Within the contract every node is inside, so no byte changes.
    """
    nb = prefix.shape[1]
    if q >= prefix[1, nb - 1]:
        return SLOT_DEAD, _U0, False
    rows = np.int64(rc[s])
    j = q - (prefix[1, s] - np.int64(orc[s]))
    e = prefix[0, s] - rows + 2 * j
    if j < (rows + 1) // 2 and e >= 0 and e < in_nodes:
        return SLOT_LIVE, np.uint64(e), 2 * j + 1 < rows and e + 1 < in_nodes
    return SLOT_PAD, _U0, False


def dense_slot(mode, k, n0, n1, d0, d1, on0, on1, od0, od1, p, mu, wm):
    """Dense slot ``k`` (uint64): child 0 from node ``2k``, child 1 from node ``2k + 1``."""
    e = k + k
    fold_node(mode, n0, n1, d0, d1, e, on0, od0, k, p, mu, wm)
    fold_node(mode, n0, n1, d0, d1, e + _U1, on1, od1, k, p, mu, wm)


def jagged_slot(mode, q, s, rc, orc, prefix, in_nodes, n0, n1, d0, d1, on0, on1, od0, od1,
                p, mu, wm, one):
    """Jagged output slot ``q`` (int64) of segment ``s`` of an input of
    ``in_nodes`` slots (the slot meanings are in :mod:`.gkr_cpu`'s contract
    of ``jagged_transition``)."""
    kind, e, partner = jagged_source(q, s, rc, orc, prefix, in_nodes)
    k = np.uint64(q)
    zero = np.uint32(0)
    if kind == SLOT_LIVE:
        fold_node(mode, n0, n1, d0, d1, e, on0, od0, k, p, mu, wm)
        if partner:
            fold_node(mode, n0, n1, d0, d1, e + _U1, on1, od1, k, p, mu, wm)
        else:
            put_constant(mode, on1, od1, k, zero, one)
    elif kind == SLOT_PAD:
        put_constant(mode, on0, od0, k, zero, one)
        put_constant(mode, on1, od1, k, zero, one)
    else:
        put_constant(mode, on0, od0, k, zero, zero)
        put_constant(mode, on1, od1, k, zero, zero)


def _rebind(fn, env):
    """``fn`` with the global names in ``env`` bound to other objects."""
    glb = dict(fn.__globals__)
    glb.update(env)
    out = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__qualname__, out.__module__, out.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return out


def make_slot_functions(jit, inline_arithmetic=False):
    """Compile the slot bodies with ``jit``: ``(dense_slot, jagged_slot, find_segment)``.

    ``jit`` is ``numba.njit`` (CPU) or ``numba.cuda.jit(device=True)``.  The
    leaf array functions are compiled first and bound to the names the slot
    bodies call, so every backend runs the same source text.  With
    ``inline_arithmetic`` (CPU only) the field arithmetic is bound to
    force-inlined copies (see :func:`inlined_arithmetic`).
    """
    env = _node_env(jit, inline_arithmetic)
    return (jit(_rebind(dense_slot, env)), jit(_rebind(jagged_slot, env)),
            jit(find_segment))


def inlined_arithmetic():
    """Force-inlined (LLVM ``alwaysinline``) copies of the scalar arithmetic, by name.

    Same source as the ``@njit`` functions above, each bound to the others'
    inlined copies.  Left to itself LLVM keeps the extension fraction sums
    (``frac_be``, ``frac_ee``) as out-of-line calls, and a call in a loop body
    stops the loop vectorizer: the CPU dense folds with extension
    denominators measured 3x faster with everything inlined (2**22 leaves,
    base/ext 35 -> 11 ms, ext/ext 55 -> 18 ms).  CPU only: Numba-CUDA
    compiles its own device functions.  The field kernels (``field_cpu``)
    take their inlined arithmetic from here too, and so can your own loops
    (README, "The kernels in your own Numba code"): every name of
    ``monty.__all__`` but the opcodes is here.  Each call makes new,
    uncompiled dispatchers: call it once, at module level, and use its
    functions from there (a call per use compiles them again).
    """
    env = {}
    # Callees before callers: each copy is bound to the copies made so far.
    # (The rest of monty's public functions come last, so that adding them
    # left the copies the library's kernels use bound as they were.)
    for fn in (canonical, reduce_once, _high_difference, monty_reduce, below_pr,
               monty_reduce_sum4, mont_mul, mont_mul_sub, mod_add, mod_sub, ext4_wrap, ext4_dot,
               ext4_mul, ext4_norm, ext4_inv_finish, base_fold, ext4_fold, base_eq_split,
               ext4_eq_split, frac_bb, frac_be, frac_eb, frac_ee, mod_neg, to_monty, from_monty,
               mont_pow_u32, mont_inv, ext4_inv, exponent_bit, base_pow, ext4_pow):
        env[fn.__name__] = njit(forceinline=True)(_rebind(getattr(fn, "py_func", fn), env))
    return env


def _node_env(jit, inline=False):
    """The leaf array functions compiled with ``jit``, by name."""
    env = inlined_arithmetic() if inline else {}
    for fn in (load1, load1_once, load4, store4, jagged_source):
        env[fn.__name__] = jit(_rebind(fn, env))
    env["fold_node"] = jit(_rebind(fold_node, env))
    env["put_constant"] = jit(_rebind(put_constant, env))
    return env


def make_node_functions(jit, inline_arithmetic=False):
    """Compile the node bodies with ``jit``: ``(fold_node, put_constant)``.

    For kernels that walk runs of slots of one kind themselves (the CPU
    jagged transition) instead of calling a per-slot body.
    ``inline_arithmetic`` as in :func:`make_slot_functions`.
    """
    env = _node_env(jit, inline_arithmetic)
    return env["fold_node"], env["put_constant"]
