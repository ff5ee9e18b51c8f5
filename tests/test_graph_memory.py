"""Deferred-graph recorder: peak memory of recording, building and replaying.

NumPy reports its allocations to tracemalloc, so the peaks below are those of
the arrays a call makes (after a warm-up call, so compiles and caches are not
counted).
"""
import hashlib
import struct

import numpy as np
import pytest

from peak_memory import peak_bytes
from zorch_nb import KoalaBear
from zorch_nb import graph as G
from zorch_nb.graph import Context, In, InOut, Out, assert_eq, kernel, run_computation_graph
from zorch_nb import graph_layout
from zorch_nb.graph_layout import apply_history, merkle_root

P = KoalaBear.p



def chain_kernel(rounds):
    @kernel
    def chain(x: In[2], out: Out[()]):
        s = x[0]
        for i in range(rounds):
            s = s * x[1] + i
        out[()] = s
    return chain


def chain_reference(vals, rounds):
    s = [int(v) for v in vals[:, 0]]
    for i in range(rounds):
        s = [(v * int(w) + i) % P for v, w in zip(s, vals[:, 1])]
    return np.array(s, dtype=np.uint32)


@pytest.mark.parametrize("eager", ["interpreted", "walk"])
def test_recording_memory_follows_the_live_values_not_the_kernel_length(eager, monkeypatch):
    # Every node's column used to stay alive until the end of the call: 200
    # rounds (600 nodes) peaked at ~400 output columns.  The node walk (CuPy,
    # NUMBA_DISABLE_JIT) frees each after its last use; the interpreter keeps
    # a block of instances per slot.
    monkeypatch.setattr(G, "_EAGER_INTERPRETER", eager == "interpreted")
    n = 1 << 14
    column = 4 * n
    vals = np.arange(2 * n).reshape(n, 2) % 1000
    ctx = Context()
    a = ctx.copy_to_device(vals)
    peaks = {}
    for rounds in (10, 200):
        chain = chain_kernel(rounds)
        peaks[rounds], (out,) = peak_bytes(lambda: ctx.call_kernel(chain, n, a))
        np.testing.assert_array_equal(ctx.copy_to_host(out), chain_reference(vals, rounds))
    assert peaks[200] < 12 * column, peaks
    assert peaks[200] < 1.5 * peaks[10], peaks


def test_the_evaluation_plan_is_made_once_per_kernel(monkeypatch):
    """The node walk's plan (CuPy, NUMBA_DISABLE_JIT, a failing assertion)."""
    monkeypatch.setattr(G, "_EAGER_INTERPRETER", False)
    made = []
    real = G._eval_plan
    monkeypatch.setattr(G, "_eval_plan", lambda ir: made.append(ir.name) or real(ir))
    chain = chain_kernel(3)
    ctx = Context()
    a = ctx.copy_to_device(np.arange(8).reshape(4, 2))
    for _ in range(3):
        ctx.call_kernel(chain, 4, a)
    other = Context()
    other.call_kernel(chain, 1, other.copy_to_device([[1, 2]]))
    assert made == ["chain"]  # per kernel, not per call or per Context
    ctx.call_kernel(chain_kernel(3), 4, a)
    assert made == ["chain", "chain"]


@pytest.mark.parametrize("eager", ["interpreted", "walk"])
def test_a_kernel_given_another_ir_is_evaluated_by_that_ir(eager, monkeypatch):
    """The plan and the eager program are kept per kernel together with the IR
    they were made from: ``ir`` is a plain attribute, and one replaced is
    planned anew, not run with the old plan."""
    monkeypatch.setattr(G, "_EAGER_INTERPRETER", eager == "interpreted")

    @kernel
    def twice(x: In[()], out: Out[()]):
        out[()] = x[()] + x[()]

    @kernel
    def square(x: In[()], out: Out[()]):
        out[()] = x[()] * x[()]

    ctx = Context()
    a = ctx.copy_to_device([3, 5])
    assert ctx.copy_to_host(ctx.call_kernel(twice, 2, a)[0]).tolist() == [6, 10]
    twice.ir = square.ir
    assert ctx.copy_to_host(ctx.call_kernel(twice, 2, a)[0]).tolist() == [9, 25]


def test_building_loading_and_replaying_walk_a_shared_layout_once(monkeypatch):
    """Calls that share a compiled kernel share its layouts: the build made
    each layout per call, the sources' key (a walk of the whole layout) was
    made per call, and validation took the span and tiling of each per call,
    so 1000 calls reading one 16384-element table took 1.8 s to record and
    build and 2.3 s to replay (3.5 MB, 4000 calls: 177 s) for microseconds of
    work.  Now once per compiled kernel and operand."""
    from zorch_nb import graph_format

    @kernel
    def pick(x: In[64], y: In[()], out: Out[()]):
        out[()] = x[5] + y[()]

    ctx = Context()
    table = ctx.copy_to_device(np.arange(64))
    a = h = ctx.copy_to_device(np.arange(4))
    for _ in range(20):
        (h,) = ctx.call_kernel(pick, 4, table, h)
    calls = dict.fromkeys(("input_layout", "output_layout", "kernel_fingerprint", "_span",
                           "_tiles", "_sources"), 0)
    for module, name in ((G, "input_layout"), (G, "output_layout"),
                         (graph_format, "kernel_fingerprint"), (graph_format, "_span"),
                         (graph_format, "_tiles"), (G, "_sources")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name:
                            calls.__setitem__(_name, calls[_name] + 1) or _real(*a))
    blob = ctx.generate_computation_graph([a], [h]).to_bytes()
    # building (which made every layout and fingerprint per call): the table's
    # layout, the chain's (the first call's input is its own buffer), the output's
    assert (calls["input_layout"], calls["output_layout"], calls["kernel_fingerprint"]) \
        == (2, 1, 1)
    g = G.ComputationGraph.from_bytes(blob)
    assert len(g.templates) == 20 and len(g.compiled_kernels) == 1
    assert (calls["_span"], calls["_tiles"], calls["_sources"]) == (3, 1, 0)  # 2 in, 1 out
    (out,), _ = run_computation_graph(g, [np.arange(4)])
    np.testing.assert_array_equal(out, np.arange(4) + 20 * 5)
    assert calls["_sources"] == 1
    run_computation_graph(g, [np.arange(4)])
    assert (calls["_span"], calls["_tiles"], calls["_sources"]) == (3, 1, 1)


def test_the_eager_program_is_made_once_per_kernel_and_broadcast_form(monkeypatch):
    """The interpreter's program of a CPU call: per kernel and broadcast flags,
    not per call or per Context."""
    made = []
    real = G.graph_interp.program
    monkeypatch.setattr(G.graph_interp, "program",
                        lambda *args: made.append(args[3]) or real(*args))

    @kernel
    def scale(x: In[2], k: In[()], o: Out[()]):
        o[()] = x[0] * k[()] + x[1]

    vals = np.arange(8).reshape(4, 2)
    ctx, other = Context(), Context()
    a, k = ctx.copy_to_device(vals), ctx.copy_to_device(5)
    ks = ctx.copy_to_device([5, 6, 7, 8])
    for _ in range(3):
        (o,) = ctx.call_kernel(scale, 4, a, k)
    (o2,) = other.call_kernel(scale, 2, other.copy_to_device(vals[:2]), other.copy_to_device(5))
    if G._jit_disabled():  # the node walk runs instead
        assert made == []
        return
    assert [[par for par, _ in layouts] for layouts in made] == [[((0, 2),), ()]]
    (o3,) = ctx.call_kernel(scale, 4, a, ks)  # once more for (parallel, parallel)
    assert [[par for par, _ in layouts] for layouts in made][1:] == [[((0, 2),), ((0, 1),)]]
    assert ctx.copy_to_host(o).tolist() == [1, 13, 25, 37]
    assert other.copy_to_host(o2).tolist() == [1, 13]
    assert ctx.copy_to_host(o3).tolist() == [1, 15, 33, 55]


@pytest.mark.parametrize("eager", ["interpreted", "walk"])
def test_eager_evaluation_matches_the_replay_on_every_kind_of_node(eager, monkeypatch):
    """Broadcast operands and constants next to per-instance values, transposed and
    strided operands, nodes used by outputs only, unused nodes, an InOut
    passthrough and assertions: the eager values equal the compiled replay's
    (and the big-int values), interpreted in one call or walked node by node."""
    monkeypatch.setattr(G, "_EAGER_INTERPRETER", eager == "interpreted")
    @kernel
    def mixed(x: In[3], m: In[2, 2], k: In[()], y: InOut[3], o: Out[2], c: Out[()]):
        unused = x[0] * x[1] * 12345  # noqa: F841  (never read: not computed)
        t = x[0] * m[0, 1] + k[()] * 7 - x[2]
        assert_eq(k[()] * 2, k[()] + k[()])
        y[1] = t * t + m[1, 0]
        o[0] = -t
        o[1] = x[1]  # a load written straight to an output
        c[()] = 9  # a constant output

    rng = np.random.default_rng(5)
    xv = rng.integers(0, P, size=(3, 6))  # read transposed: a strided operand
    mv = rng.integers(0, P, size=(2, 2))
    yv = rng.integers(0, P, size=(6, 3))
    ctx = Context()
    x, m, k, y = (ctx.copy_to_device(v) for v in (xv, mv, 11, yv))
    outs = ctx.call_kernel(mixed, 6, x.T, m, k, y)
    g = ctx.generate_computation_graph([x, m, k, y], outs)
    replayed, commitments = run_computation_graph(g, [xv, mv, np.array(11), yv])
    for h, r in zip(outs, replayed):
        np.testing.assert_array_equal(ctx.copy_to_host(h), r)
    assert commitments == g.commitments
    t = (xv[0].astype(object) * int(mv[0, 1]) + 77 - xv[2]) % P
    np.testing.assert_array_equal(ctx.copy_to_host(outs[0])[:, 1], (t * t + int(mv[1, 0])) % P)
    np.testing.assert_array_equal(ctx.copy_to_host(outs[0])[:, [0, 2]], yv[:, [0, 2]])
    np.testing.assert_array_equal(ctx.copy_to_host(outs[1]), np.stack([(-t) % P, xv[1]], 1))
    np.testing.assert_array_equal(ctx.copy_to_host(outs[2]), [9] * 6)


def test_the_first_assertion_in_kernel_order_is_reported():
    # Assertions are checked as soon as their values exist; the one reported is
    # still the first in the kernel's order, at its first failing instance.
    @kernel
    def two_checks(x: In[2], out: Out[()]):
        late = x[0] * x[0] * x[0]
        assert_eq(late, x[1])  # listed first, computed last
        assert_eq(x[0], x[1])
        out[()] = late

    ctx = Context()
    bad = ctx.copy_to_device(np.array([[2, 8], [3, 5], [1, 1]]))
    with pytest.raises(ValueError, match=r"assert_eq\(late, x\[1\]\).*instance 1 of 3: "
                                         r"27 != 5"):
        ctx.call_kernel(two_checks, 3, bad)


def naive_merkle_root(words) -> bytes:
    """The commitment as documented, level by level over a byte copy."""
    data = np.asarray(words, dtype="<u4").tobytes()
    level = [hashlib.sha256(b"\x00" + data[i:i + 64]).digest()
             for i in range(0, max(len(data), 1), 64)]
    while len(level) > 1:
        level = [hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest()
                 for i in range(0, len(level), 2)]
    return hashlib.sha256(b"zorch_nb merkle v1" + struct.pack("<Q", len(data) // 4)
                          + level[0]).digest()


@pytest.mark.parametrize("n", [0, 1, 3, 16, 20, 32, (1 << 14) - 3, 1 << 16])
def test_merkle_root_is_unchanged_and_copies_nothing(n):
    words = np.random.default_rng(n).integers(0, 2 ** 32, size=n, dtype=np.uint64)
    words = words.astype(np.uint32)
    assert merkle_root(words) == naive_merkle_root(words)
    assert merkle_root(words.astype(np.int64)) == merkle_root(words)
    if n == 1 << 16:
        pk, _ = peak_bytes(lambda: merkle_root(words))
        assert pk < 0.25 * words.nbytes  # a byte copy and every leaf digest: 2.7x


def test_commitments_hash_the_montgomery_words_of_the_padded_buffers():
    """As documented: a user checks a replay's commitments against its ``padded``
    buffers by encoding them first (the canonical values hash to other roots)."""
    from zorch_nb import KoalaBear
    from zorch_nb._demo_graph import add_2
    ctx = Context()
    a = ctx.copy_to_device(np.arange(24).reshape(12, 2))
    (b,) = ctx.call_kernel(add_2, 12, a)
    g = ctx.generate_computation_graph([a], [b])
    _, commitments, padded = run_computation_graph(g, [np.arange(24).reshape(12, 2)],
                                                   padded=True)
    assert commitments == g.commitments
    assert [naive_merkle_root(KoalaBear.encode(v).reshape(-1)) for v in padded] \
        == list(commitments)
    assert naive_merkle_root(padded[0].reshape(-1)) != commitments[0]


@pytest.mark.parametrize("n", [48, 16 * 6 + 1])
def test_merkle_root_refuses_a_leaf_count_that_is_not_a_power_of_two(n):
    with pytest.raises(ValueError, match="power-of-two number of 16-word leaves"):
        merkle_root(np.zeros(n, dtype=np.uint32))


@pytest.mark.parametrize("history", [
    (("reshape", (24,)),),
    (("reshape", (2, 3, 4)), ("transpose", (2, 0, 1))),
    (("reshape", (4, 6)), ("transpose", (1, 0)), ("reshape", (3, 2, 4)),
     ("transpose", (1, 2, 0)), ("reshape", (8, 3))),
])
def test_unapply_history_inverts_apply_history(history):
    flat = np.arange(100, 124, dtype=np.uint32)
    view = np.ascontiguousarray(apply_history(flat, history))
    np.testing.assert_array_equal(graph_layout.unapply_history(view, history, 24), flat)


@kernel
def mul_3(x: In[2], out: Out[()]):
    out[()] = x[0] * x[1] + 3


def transposed_graph(n):
    vals = (np.arange(2 * n) % 1000).astype(np.uint32).reshape(2, n)
    ctx = Context()
    h = ctx.copy_to_device(vals)
    (r,) = ctx.call_kernel(mul_3, n, h.T)
    return ctx, h, r, vals


def test_building_a_graph_makes_no_copy_of_power_of_two_buffers():
    ctx, h, r, _ = transposed_graph(1 << 17)
    pk, g = peak_bytes(lambda: ctx.generate_computation_graph([h], [r]))
    assert pk < 0.5 * sum(g.padded_lengths) * 4  # merkle_root's copies: 1.8x


def test_replay_places_inputs_without_an_index_array():
    n = 1 << 17
    ctx, h, r, vals = transposed_graph(n)
    g = ctx.generate_computation_graph([h], [r])
    pk, ((out,), commitments) = peak_bytes(lambda: run_computation_graph(g, [vals]))
    assert commitments == g.commitments
    np.testing.assert_array_equal(out, ctx.copy_to_host(r))
    # int64 arange per input (2x its words) and merkle_root's copies: 6.2x before
    assert pk < 4 * sum(g.padded_lengths) * 4


@pytest.mark.parametrize("padded", [False, True])
def test_replay_memory_guard_counts_outputs_listed_many_times(monkeypatch, padded):
    """A 1 KB file listing one 2**26-word buffer as an output 40 times passed
    the guard (which counted each padded buffer once, 0.25 GiB) and then
    needed ~20 GiB: each output is decoded apart.  The guard counts every
    output, and what it counts bounds the replay's peak (but a constant)."""
    @kernel
    def copy(x: In[()], out: Out[()]):
        out[()] = x[()]

    ctx = Context()
    (y,) = ctx.call_kernel(copy, 4, ctx.copy_to_device(7))
    g = ctx.generate_computation_graph([], [y])
    log, repeats = 16, 6
    n = 1 << log
    ck = g.compiled_kernels[0]
    many = G.ComputationGraph(
        g.field, g.kernels, [ck._replace(out_layouts=((((log, 1),), ck.out_layouts[0][1]),))],
        [g.buffer_points[0], (1, n)],
        [g.templates[0]._replace(num_parallel=n, padded_parallel=n)], (),
        [(1, (("reshape", (n,)),))] * repeats, g.constants, g.commitments)
    many = G.ComputationGraph.from_bytes(many.to_bytes())
    counted = 4 * (sum(many.padded_lengths) + repeats * n + (sum(many.padded_lengths)
                                                              if padded else n))
    run_computation_graph(many, [], padded=padded)  # (warm-up: the evaluator's compile)
    pk, res = peak_bytes(lambda: run_computation_graph(many, [], padded=padded))
    assert len(res[0]) == repeats and all((o == 7).all() for o in res[0])
    assert pk <= counted + 2**16  # (+ the calls' small arrays: 6 KB here)
    monkeypatch.setattr(G._backend, "physical_memory", lambda: counted - 1)
    with pytest.raises(MemoryError, match=rf"for its 2 padded buffers and {repeats} outputs"):
        run_computation_graph(many, [], padded=padded)


def test_replay_memos_keep_only_the_most_recently_used_kernels(monkeypatch):
    """A process replaying graphs of ever new kernels (a sweep) kept the
    generated sources, interpreter programs and constants of each one ever
    met; the memos keep the last ``maxsize``, and a kernel dropped from them is
    made again, with the same outputs and commitments."""
    # fresh memos: entries an earlier test of this process left (its kernels'
    # constants, say) would be hits here, never evicted (one pytest-xdist
    # worker's order left 21 constant entries)
    for name in ("_SOURCE_CACHE", "_PROGRAM_CACHE", "_CONST_WORDS"):
        monkeypatch.setattr(G, name, G._Memo(2))
    vals = np.arange(1, 17).reshape(8, 2)

    def replay(rounds):
        ctx = Context()
        x = ctx.copy_to_device(vals)
        (o,) = ctx.call_kernel(chain_kernel(rounds), 8, x)
        g = ctx.generate_computation_graph([x], [o])
        (out,), commitments = run_computation_graph(g, [vals])
        assert out.tolist() == chain_reference(vals, rounds).tolist()
        return g.sources(0)[2], commitments

    first = replay(1)
    names = [replay(r)[0] for r in (2, 3)]
    for memo in (G._SOURCE_CACHE, G._PROGRAM_CACHE, G._CONST_WORDS):
        assert len(memo) == 2
    assert [k[2] for k in G._SOURCE_CACHE.values()] == names  # 1 round: dropped
    assert replay(1) == first  # made again, alike
    assert [k[2] for k in G._SOURCE_CACHE.values()] == [names[1], first[0]]


def test_a_memo_drops_its_least_recently_used_entry():
    memo = G._Memo(2)
    made = []

    def make(v):
        return lambda: made.append(v) or v

    assert [memo.get_or_make(k, make(k)) for k in "aba"] == list("aba")
    assert made == ["a", "b"]
    assert memo.get_or_make("c", make("c")) == "c"  # "b" was used least recently
    assert list(memo) == ["a", "c"]
    assert memo.get_or_make("b", make("b2")) == "b2" and list(memo) == ["c", "b"]


@kernel
def square_plus_1(x: In[()], out: Out[()]):
    out[()] = x[()] * x[()] + 1


def test_replay_without_commitments_frees_each_buffer_after_its_last_read(monkeypatch):
    """A replay kept every buffer for the commitments, so its memory grew with
    the number of calls (64 calls on 2 MiB buffers: 134 MiB), and hashing was
    90% of its time.  ``commitments=False`` hashes nothing and frees each
    buffer after its last reader; outputs (and ``padded``) are unchanged, and
    the memory guard counts the buffers alive at once."""
    n, calls = 1 << 15, 24
    ctx = Context()
    x = h = ctx.copy_to_device(np.arange(n))
    kept = []
    for k in range(calls):
        (h,) = ctx.call_kernel(square_plus_1, n, h)
        if k == 5:
            kept.append(h)  # an output in the middle stays alive to the end
    g = ctx.generate_computation_graph([x], kept + [h])
    new = np.arange(n) + 3
    full = run_computation_graph(g, [new])
    pk_full, _ = peak_bytes(lambda: run_computation_graph(g, [new]))
    pk_lean, lean = peak_bytes(lambda: run_computation_graph(g, [new], commitments=False))
    assert lean[1] is None and len(full[1]) == len(g.commitments) == calls + 1
    for a, b in zip(lean[0], full[0]):
        np.testing.assert_array_equal(a, b)
    want = new.astype(object)
    for _ in range(calls):
        want = (want * want + 1) % KoalaBear.p
    np.testing.assert_array_equal(lean[0][1].astype(object), want)
    words = 4 * n
    assert pk_full > calls * words  # every buffer alive
    assert pk_lean < 6 * words  # input, two outputs, a call's in and out (+ decoding)
    padded = run_computation_graph(g, [new], padded=True, commitments=False)
    assert padded[1] is None and len(padded[2]) == calls + 1
    np.testing.assert_array_equal(padded[2][-1], full[0][1])
    # the guard: enough memory for the lean replay, not for every buffer
    monkeypatch.setattr(G._backend, "physical_memory", lambda: 8 * words)
    with pytest.raises(MemoryError, match="padded buffers"):
        run_computation_graph(g, [new])
    (a, b), none = run_computation_graph(g, [new], commitments=False)
    assert none is None and (b == full[0][1]).all()
    with pytest.raises(TypeError, match="Argument `commitments` must be True or False"):
        run_computation_graph(g, [new], commitments="no")


@kernel
def mul_add(x: In[()], y: In[()], k: In[()], out: Out[()]):
    out[()] = x[()] * y[()] + k[()]


def test_replay_without_commitments_frees_a_buffer_after_its_last_reader_only():
    """Freeing after a buffer's *last* reader: ``c1`` is read by calls 1 and 2,
    a graph input that is also an output and read by no call stays, an input
    or constant no call reads is freed at once.  The memory guard counts the padded words
    alive at once, exactly: its peak is the placed inputs and constants before
    the unread input goes (with it) or the third call's (without it)."""
    n = 1 << 10
    vals = np.arange(n)
    for unread in (True, False):
        ctx = Context()
        x, z = ctx.copy_to_device(vals), ctx.copy_to_device(vals + 1)
        u = ctx.copy_to_device(np.arange(4 * n).reshape(n, 4)) if unread else None
        k = ctx.copy_to_device(vals + 7)  # a constant of the graph
        ctx.copy_to_device(vals + 9)  # one no call reads: freed at once
        (c1,) = ctx.call_kernel(square_plus_1, n, x)
        (c2,) = ctx.call_kernel(square_plus_1, n, c1)
        (c3,) = ctx.call_kernel(mul_add, n, c1, c2, k)
        g = ctx.generate_computation_graph([x, z] + [u] * unread, [c3, z])
        assert len(g.constants) == 2
        new = [vals + 3, vals + 5] + [np.zeros((n, 4), np.int64)] * unread
        full, roots = run_computation_graph(g, new)
        lean, none = run_computation_graph(g, new, commitments=False)
        assert roots is not None and none is None
        for a, b in zip(lean, full):
            np.testing.assert_array_equal(a, b)
        w1 = (new[0].astype(object) ** 2 + 1) % P
        np.testing.assert_array_equal(lean[0].astype(object), (w1 * ((w1 * w1 + 1) % P)
                                                               + vals + 7) % P)
        np.testing.assert_array_equal(lean[1], new[1])
        # padded words alive at once: x, z, u and the constants placed (8n; u
        # and the unread constant go at once), or the third call's z, k, c1,
        # c2, c3 (5n); then the two outputs' values and one output's copy
        need = 4 * ((8 * n if unread else 5 * n) + 2 * n + n)
        for have, fits in [(need, True), (need - 1, False)]:
            with pytest.MonkeyPatch.context() as m:
                m.setattr(G._backend, "physical_memory", lambda: have)
                if fits:
                    run_computation_graph(g, new, commitments=False)
                else:
                    with pytest.raises(MemoryError, match="padded buffers"):
                        run_computation_graph(g, new, commitments=False)
