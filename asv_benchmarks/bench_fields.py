"""Field ops on the CPU: zorch_nb (Numba) against plain vectorized NumPy uint64.

The NumPy reference is what a user would write without zorch_nb: canonical
values in uint64 arrays, ``(a * b) % p`` per coefficient.  Both run in the
same asv process, so their ratio is meaningful on any machine.  (Run with
``asv run --python=same``; compile time is paid in ``setup``.)

``peakmem_*`` is asv's peak of the whole process: the imports, Numba's
compiler and ``setup``'s inputs included (about 140-260 MB here), so a
result of a few MB (a 2^20 product's output is 16 MB) hardly moves it;
compare ``peakmem`` across sizes, not across ops.  ``track_peak_bytes_*``
is the call's own peak (tracemalloc, :func:`asv_benchmarks.peak_bytes`).
"""
import numpy as np

from zorch_nb import KoalaBear

from . import CHECKED_PREFIX, calls_per_sample, check_equal, peak_bytes, prepare_once

F = KoalaBear
E = F.ext
P = np.uint64(F.p)
W = np.uint64(F.W)
#: 2**32 mod p and its inverse: encode multiplies values by the first, decode words by the second
R_MOD_P = np.uint64(2**32 % F.p)
R_INV = np.uint64(pow(2**32, -1, F.p))


def canonical(G, words):
    """Canonical uint64 values of Montgomery words of ``G`` (F or E)."""
    return G.decode(words).astype(np.uint64)


def numpy_base_mul(a, b):
    """Plain NumPy product of canonical uint64 values (< p < 2^31: no overflow)."""
    return (a * b) % P


def numpy_ext_mul(a, b):
    """Plain NumPy product in F_p[x]/(x^4 - W) of canonical (n, 4) uint64 arrays."""
    out = np.empty_like(a)
    for k in range(4):
        acc = np.zeros(a.shape[0], dtype=np.uint64)
        for i in range(4):
            j = k - i
            if j >= 0:
                acc = (acc + a[:, i] * b[:, j]) % P
            else:
                acc = (acc + W * ((a[:, i] * b[:, j + 4]) % P)) % P
        out[:, k] = acc
    return out


class Mul:
    """Base and extension multiply: zorch_nb against the plain NumPy version.

    The 16-element case times the per-call overhead (validation, dispatch).
    """

    params = (["base", "ext"], [2**4, 2**16, 2**20])
    param_names = ["field", "n"]

    @prepare_once
    def setup(self, field, n):
        calls_per_sample(self, n)
        self.E = F if field == "base" else E
        self.reference = numpy_base_mul if field == "base" else numpy_ext_mul
        self.a, self.b = self.E.random(n, seed=1), self.E.random(n, seed=2)
        self.ca, self.cb = canonical(self.E, self.a), canonical(self.E, self.b)
        # compile (or load) outside the timing the kernel this size runs: small
        # calls run a serial twin, larger ones the parallel kernel
        m = CHECKED_PREFIX
        check_equal(canonical(self.E, self.E.mul(self.a, self.b)[:m]),
                    self.reference(self.ca[:m], self.cb[:m]), f"{field} mul")

    def time_zorch_nb(self, field, n):
        self.E.mul(self.a, self.b)

    def time_numpy_uint64(self, field, n):
        self.reference(self.ca, self.cb)

    def peakmem_zorch_nb(self, field, n):
        self.E.mul(self.a, self.b)

    def track_peak_bytes_zorch_nb(self, field, n):
        return peak_bytes(lambda: self.E.mul(self.a, self.b))
    track_peak_bytes_zorch_nb.unit = "bytes"


class Ops:
    """The other field ops, base and extension (unary ones take ``a`` only;
    ``pow`` raises to 7; encode/decode convert int64 values and words)."""

    params = (["base", "ext"], ["add", "sub", "neg", "square", "inv", "batch_inv", "pow",
                                "sum", "encode", "decode"], [2**20])
    param_names = ["field", "op", "n"]

    @prepare_once
    def setup(self, field, op, n):
        G = F if field == "base" else E
        a, b = G.random(n, seed=1), G.random(n, seed=2)
        ints = G.decode(a).astype(np.int64)
        calls = {"add": (G.add, (a, b)), "sub": (G.sub, (a, b)), "neg": (G.neg, (a,)),
                 "square": (G.square, (a,)), "inv": (G.inv, (a,)),
                 "batch_inv": (G.batch_inv, (a,)), "pow": (lambda x: G.pow(x, 7), (a,)),
                 "sum": (G.sum, (a,)), "encode": (G.encode, (ints,)),
                 "decode": (G.decode, (a,))}
        self.fn, self.args = calls[op]
        out = self.fn(*self.args)  # compile this size's kernel outside the timing
        check_equal(*_op_check(G, op, a, b, out), f"{field} {op}")

    def time_op(self, field, op, n):
        self.fn(*self.args)


def _op_check(G, op, a, b, out):
    """``(got, want)`` for :class:`Ops`: ``out = op(a[, b])`` on a prefix (the
    sum on the whole), against plain NumPy on canonical values."""
    m = CHECKED_PREFIX
    mul = numpy_base_mul if G is F else numpy_ext_mul
    ca, cb = canonical(G, a[:m]), canonical(G, b[:m])
    if op == "sum":
        return canonical(G, out), canonical(G, a).sum(axis=0) % P  # (< 2**51: no wrap)
    if op == "encode":  # words v 2**32 mod p of the values of a
        return out[:m], ca * R_MOD_P % P
    if op == "decode":  # values w 2**-32 mod p of the words of a
        return out[:m], a[:m].astype(np.uint64) * R_INV % P
    got = canonical(G, out[:m])
    if op in ("inv", "batch_inv"):  # a a**-1 = 1
        return mul(ca, got), np.broadcast_to(np.eye(1, got[0].size, dtype=np.uint64)[0],
                                             got.shape)
    if op == "pow":
        sq = mul(ca, ca)
        return got, mul(mul(mul(sq, sq), sq), ca)
    return got, {"add": lambda: (ca + cb) % P, "sub": lambda: (ca + P - cb) % P,
                 "neg": lambda: (P - ca) % P, "square": lambda: mul(ca, ca)}[op]()


class ExtBroadcast:
    """Extension ops with a one-element operand (``E.mul(x, r)``) or a base
    operand (``E.mul(s, x)``): read in place by the broadcast kernels, so a
    call allocates the output alone (tracemalloc-checked in the tests; asv's
    whole-process peak cannot show it, see above); ``plain`` is the same op
    on a full-size operand built beforehand (the work the broadcast spares,
    without its copy)."""

    params = (["add", "mul"], ["one element", "base", "plain"], [2**20])
    param_names = ["op", "operand", "n"]

    @prepare_once
    def setup(self, op, operand, n):
        self.fn = getattr(E, op)
        self.x = E.random(n, seed=1)
        self.y = {"one element": E.random((), seed=2), "base": F.random(n, seed=3),
                  "plain": E.random(n, seed=4)}[operand]
        m = CHECKED_PREFIX
        got = canonical(E, self.fn(self.x, self.y)[:m])  # (compiles this size's kernel)
        cx = canonical(E, self.x[:m])
        if operand == "base":  # a base operand: the element (y, 0, 0, 0)
            cy = canonical(F, self.y[:m])
            want = ((cx * cy[:, None]) % P if op == "mul" else
                    (cx + np.pad(cy[:, None], ((0, 0), (0, 3)))) % P)
        else:
            cy = np.broadcast_to(canonical(E, self.y if operand == "one element" else
                                           self.y[:m]), cx.shape)
            want = numpy_ext_mul(cx, cy) if op == "mul" else (cx + cy) % P
        check_equal(got, want, f"E.{op} with a {operand} operand")

    def time_op(self, op, operand, n):
        self.fn(self.x, self.y)

    def peakmem_op(self, op, operand, n):
        self.fn(self.x, self.y)

    def track_peak_bytes_op(self, op, operand, n):
        return peak_bytes(lambda: self.fn(self.x, self.y))
    track_peak_bytes_op.unit = "bytes"


class MarkedBaseMul:
    """``E.mul(E.as_base(a), x)``: base words times extension elements of the
    same shape (a sumcheck's base MLE times an extension one).  At 16
    elements the per-call overhead, which a path of its own keeps near
    ``E.mul``'s (README, "Small calls"); at 2**20 the broadcast kernel."""

    params = ([2**4, 2**20],)
    param_names = ["n"]

    @prepare_once
    def setup(self, n):
        calls_per_sample(self, n)
        words = F.random(n, seed=1)
        self.a, self.x = E.as_base(words), E.random(n, seed=2)
        m = CHECKED_PREFIX
        got = canonical(E, E.mul(self.a, self.x)[:m])  # (compiles this size's kernel)
        check_equal(got, canonical(E, self.x[:m]) * canonical(F, words[:m])[:, None] % P,
                    "E.mul(E.as_base(a), x)")

    def time_zorch_nb(self, n):
        E.mul(self.a, self.x)


class OuterProduct:
    """``G.mul(a[:, None], b[None, :])`` for a column of ``rows`` and a row of
    ``n / rows`` elements: the broadcast kernels read both in runs, so a call
    allocates the output alone (before, both operands were copied to the full
    shape; ``copied`` times that path, forced; the whole-process peakmem
    shows the difference only where it exceeds the process's noise)."""

    params = (["base", "ext"], [64, 4096], ["in place", "copied"], [2**20])
    param_names = ["field", "rows", "path", "n"]

    def setup(self, field, rows, path, n):
        # (every sample: teardown undoes it after each)
        from zorch_nb import fields
        self._fields, self._min = fields, fields._CPU_MIN_RUN
        fields._CPU_MIN_RUN = 2**62 if path == "copied" else 1
        self._prepare(field, rows, path, n)

    @prepare_once
    def _prepare(self, field, rows, path, n):
        G = F if field == "base" else E
        self.fn = G.mul
        self.a = G.random((rows, 1), seed=1)
        self.b = G.random((1, n // rows), seed=2)
        got = canonical(G, self.fn(self.a, self.b)[:2])  # (compiles this size's kernel)
        ca, cb = canonical(G, self.a[:2]), canonical(G, self.b)  # the first two rows
        if field == "base":
            want = ca * cb % P
        else:
            pairs = np.broadcast_arrays(ca, cb)
            want = numpy_ext_mul(*(x.reshape(-1, 4) for x in pairs)).reshape(got.shape)
        check_equal(got, want, f"{field} outer product, {path}")

    def teardown(self, field, rows, path, n):
        self._fields._CPU_MIN_RUN = self._min

    def time_op(self, field, rows, path, n):
        self.fn(self.a, self.b)

    def peakmem_op(self, field, rows, path, n):
        self.fn(self.a, self.b)

    def track_peak_bytes_op(self, field, rows, path, n):
        return peak_bytes(lambda: self.fn(self.a, self.b))
    track_peak_bytes_op.unit = "bytes"


def numpy_ext_fold(values, r):
    """Plain NumPy ``f[2k] + r (f[2k+1] - f[2k])`` of canonical uint64 values
    (``(n,)`` base or ``(n, 4)`` extension) at an extension ``r`` ``(4,)``, or
    of base values at a base ``r`` (a uint64 scalar)."""
    lo, hi = values[0::2], values[1::2]
    d = (hi + P - lo) % P
    if np.ndim(r) == 0:  # base values, base r
        return (lo + d * r) % P
    if d.ndim == 1:  # base differences times r: each coefficient scaled
        return ((d[:, None] * r[None, :]) % P + np.pad(lo[:, None], ((0, 0), (0, 3)))) % P
    return (numpy_ext_mul(d, np.broadcast_to(r, d.shape)) + lo) % P


def numpy_eq_table(point):
    """Plain NumPy ``eq(point, b)`` for every ``b`` (canonical uint64, ``(nv, 4)``
    extension coordinates, or ``(nv,)`` base ones for a base table)."""
    if point.ndim == 1:
        table = np.ones(1, dtype=np.uint64)
        mul = lambda t, r: (t * r) % P  # noqa: E731
    else:
        table = np.array([[1, 0, 0, 0]], dtype=np.uint64)
        mul = lambda t, r: numpy_ext_mul(t, np.broadcast_to(r, t.shape))  # noqa: E731
    for r in point:
        hi = mul(table, r)
        table = np.concatenate([(table + P - hi) % P, hi])
    return table


class Sumcheck:
    """The sumcheck helpers at an extension point: one round's fold
    (``mle_fold``), the eq table of 20 (or 10) variables (``eq_table``) and
    the multilinear extension at a point (``mle_eval``, 20 or 10 folds), of
    base or extension values; against the same in plain NumPy uint64.  At
    2**10 the CPU runs the doublings and the folds in one kernel call each."""

    params = (["base values", "ext values"], ["mle_fold", "eq_table", "mle_eval"],
              [2**10, 2**20])
    param_names = ["values", "op", "n"]

    @prepare_once
    def setup(self, values, op, n):
        calls_per_sample(self, n)
        if op == "eq_table" and values == "ext values":
            # (eq_table reads only the point: the same work as "base values")
            raise NotImplementedError("eq_table takes no values: timed once, as base values")
        G = F if values == "base values" else E
        v = G.random(n, seed=1)
        point = E.random(n.bit_length() - 1, seed=2)
        cv, cp = canonical(G, v), canonical(E, point)
        if op == "mle_fold":
            self.fn, self.args = E.mle_fold, (v, point[0])
            self.ref, self.ref_args = numpy_ext_fold, (cv, cp[0])
        elif op == "eq_table":
            self.fn, self.args = E.eq_table, (point,)
            self.ref, self.ref_args = numpy_eq_table, (cp,)
        else:
            self.fn, self.args = E.mle_eval, (v, point)

            def ref(f, pt):
                for r in pt:
                    f = numpy_ext_fold(f, r)
                return f[0]
            self.ref, self.ref_args = ref, (cv, cp)
        got = E.decode(self.fn(*self.args))  # compiles; and the yardstick computes the same
        assert (got == self.ref(*self.ref_args)).all()

    def time_zorch_nb(self, values, op, n):
        self.fn(*self.args)

    def time_numpy_uint64(self, values, op, n):
        self.ref(*self.ref_args)


class BaseRows:
    """Base-field calls whose serial loops once indexed with a signed counter
    (benchmarks/results/cpu-2026-12-07-field-index.json): rows of ``A``
    (64 rows) plus one row, times one word per row, a base MLE fold at a base
    ``r`` and the eq table of a base point; against the same in plain NumPy
    uint64."""

    params = (["rows + row", "rows x word", "mle_fold", "eq_table"], [2**20])
    param_names = ["op", "n"]

    @prepare_once
    def setup(self, op, n):
        a = F.random((64, n // 64), seed=1)
        ca = canonical(F, a)
        if op == "rows + row":
            row = F.random(n // 64, seed=2)
            self.fn, self.args = F.add, (a, row)
            self.ref, self.ref_args = (lambda x, y: (x + y) % P), (ca, canonical(F, row))
        elif op == "rows x word":
            s = F.random((64, 1), seed=3)
            self.fn, self.args = F.mul, (a, s)
            self.ref, self.ref_args = numpy_base_mul, (ca, canonical(F, s))
        elif op == "mle_fold":
            v, r = a.reshape(-1), F.random((), seed=4)
            self.fn, self.args = F.mle_fold, (v, r)
            self.ref, self.ref_args = numpy_ext_fold, (ca.reshape(-1), np.uint64(F.decode(r)))
        else:
            point = F.random(n.bit_length() - 1, seed=5)
            self.fn, self.args = F.eq_table, (point,)
            self.ref, self.ref_args = numpy_eq_table, (canonical(F, point),)
        got = F.decode(self.fn(*self.args))  # compiles; and the yardstick computes the same
        assert (got == self.ref(*self.ref_args)).all()

    def time_zorch_nb(self, op, n):
        self.fn(*self.args)

    def time_numpy_uint64(self, op, n):
        self.ref(*self.ref_args)
