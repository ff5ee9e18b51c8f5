"""The CPU interpreter of graph kernels too large to unroll (kernels/graph_interp.py)."""
import numpy as np
import pytest

import test_graph
from test_graph import graph_of_one_call
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.graph import Context, In, Out, assert_eq, kernel, run_computation_graph
from zorch_nb.kernels import graph_codegen, graph_cpu, graph_interp, launch_config

P = KoalaBear.p


@pytest.fixture
def interpreted(monkeypatch):
    """Every graph kernel replays through the interpreter; an unrolled
    evaluator compiled or run is an error."""
    monkeypatch.setattr(launch_config, "GRAPH_CPU_UNROLL_MAX_ROWS", -1)

    def refuse(*args, **kwargs):
        raise AssertionError("an unrolled evaluator was used")

    monkeypatch.setattr(graph_cpu, "compile_evaluator", refuse)
    monkeypatch.setattr(graph_cpu, "run_evaluator", refuse)


def permutation(width: int, rounds: int):
    """A cube-and-mix kernel of ``rounds * (4 * width + 1) + ...`` nodes, and its
    Python big-int reference."""
    def one_round(s, r, y):
        cubes = [v * v * v + r for v in s]
        total = sum(cubes[1:], cubes[0])
        return [v + total - y for v in cubes]

    @kernel
    def perm(x: In[(width,)], y: In[()], o: Out[(width,)]):
        s = [x[i] for i in range(width)]
        for r in range(rounds):
            s = one_round(s, r, y[()])
        for i in range(width):
            o[i] = s[i]

    def reference(row, y, p):
        s = [int(v) for v in row]
        for r in range(rounds):
            s = [(v ** 3 + r) % p for v in s]
            tot = sum(s)
            s = [(v + tot - y) % p for v in s]
        return s

    return perm, reference


@pytest.mark.parametrize("field", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
@pytest.mark.parametrize("n", [3, 300])  # serial and parallel runs
def test_large_kernels_are_interpreted_and_match_big_ints(field, n, monkeypatch):
    """A kernel over GRAPH_CPU_UNROLL_MAX_ROWS nodes replays without compiling
    an unrolled evaluator (its compile time grew faster than linearly: 21 s
    for 1553 nodes), and its replay equals Python big ints and the eager run."""
    monkeypatch.setattr(graph_cpu, "compile_evaluator", None)  # never called
    perm, reference = permutation(6, 16)
    assert len(perm.ir.nodes) > launch_config.GRAPH_CPU_UNROLL_MAX_ROWS
    rng = np.random.default_rng(n)
    p = field.p
    ctx = Context(field)
    x = ctx.copy_to_device(rng.integers(0, p, size=(n, 6)))
    y = ctx.copy_to_device(17)
    (o,) = ctx.call_kernel(perm, n, x, y)
    g = ctx.generate_computation_graph([x, y], [o])
    new = rng.integers(0, p, size=(n, 6))
    (got,), commitments = run_computation_graph(g, [new, 5])
    assert got.tolist() == [reference(row, 5, p) for row in new.tolist()]
    (again,), _ = run_computation_graph(g, [ctx.copy_to_host(x), 17])
    assert again.tolist() == ctx.copy_to_host(o).tolist()


# The graph tests whose replays check values, padding, views, broadcasts and
# failure messages: run again with every kernel interpreted.
REPLAYED = ["test_reference_program_gives_528", "test_reference_lanes_give_528_plus_32k",
            "test_graph_structure_and_replay_matches_recording",
            "test_padding_repeats_last_element_and_row",
            "test_parallel_3x5_and_1x3x5_share_one_32_slot_buffer",
            "test_views_reshape_and_transpose_honoured",
            "test_broadcast_matrix_operand_over_64_rows",
            "test_assert_eq_fails_at_call_time_and_at_replay",
            "test_replay_assert_names_the_users_instance_not_the_padded_one",
            "test_eager_and_replay_name_the_same_failing_assertion_and_instance",
            "test_replay_assert_values_match_the_eager_ones_through_every_operation",
            "test_integer_powers_unroll_into_multiplications",
            "test_kernel_with_two_outputs_and_constants_and_inout"]


@pytest.mark.parametrize("name", REPLAYED)
def test_graph_replays_alike_when_every_kernel_is_interpreted(name, interpreted):
    getattr(test_graph, name)()


@pytest.mark.parametrize("work", [0, 1 << 30], ids=["parallel", "serial"])
def test_interpreted_and_unrolled_padded_buffers_are_identical(work, monkeypatch):
    """Both evaluators write every padded slot alike (outputs repeat their last
    row), on views, broadcast operands, constants and two outputs."""
    @kernel
    def mix(x: In[3, 2], m: In[2, 3], c: In[()], s: Out[3], d: Out[()]):
        for i in range(3):
            s[i] = x[i, 0] * m[0, i] - x[i, 1] * m[1, i] + 7
        d[()] = -(x[0, 0] * c[()]) + x[2, 1]

    monkeypatch.setattr(launch_config, "GRAPH_CPU_SERIAL_WORK", work)
    rng = np.random.default_rng(3)
    ctx = Context()
    x = ctx.copy_to_device(rng.integers(0, P, size=(2, 5, 3)))  # viewed as 5 x 3 x 2
    m = ctx.copy_to_device(rng.integers(0, P, size=(2, 3)))
    c = ctx.copy_to_device(rng.integers(0, P, size=()))
    s, d = ctx.call_kernel(mix, 5, x.transpose(1, 2, 0), m, c)
    g = ctx.generate_computation_graph([x, m, c], [s, d])
    new = [rng.integers(0, P, size=(2, 5, 3)), rng.integers(0, P, size=(2, 3)), 11]
    unrolled = run_computation_graph(g, new, padded=True)
    monkeypatch.setattr(launch_config, "GRAPH_CPU_UNROLL_MAX_ROWS", -1)
    monkeypatch.setattr(graph_cpu, "compile_evaluator", None)
    interpreted = run_computation_graph(g, new, padded=True)
    for a, b in zip(unrolled[0] + unrolled[2], interpreted[0] + interpreted[2]):
        assert a.tolist() == b.tolist()
    assert unrolled[1] == interpreted[1]
    xs = new[0].transpose(1, 2, 0).astype(object)
    want_s = (xs[:, :, 0] * new[1][0] - xs[:, :, 1] * new[1][1] + 7) % P
    assert interpreted[0][0].tolist() == want_s.tolist()
    assert interpreted[0][1].tolist() == ((-(xs[:, 0, 0] * 11) + xs[:, 2, 1]) % P).tolist()


def test_an_assertion_on_a_value_read_for_the_last_time_keeps_its_slot(interpreted):
    """``a`` is last read by ``b = a + a``; the assertion ``a == b`` follows
    ``b``'s row.  Were ``a``'s slot free before ``b`` is written, ``b`` would
    take it and the assertion would compare a slot with itself."""
    @kernel
    def check(x: In[2], out: Out[()]):
        a = x[0] * x[1]
        b = a + a
        assert_eq(a, b)
        out[()] = b

    rows = graph_interp.program(check.ir.nodes, [(a, b) for a, b, _ in check.ir.asserts],
                                check.ir.outputs, [((), (0, 1))], [((), ((0, 0),))])
    asserted = [r for r in rows.rows.tolist() if r[0] == graph_interp.ROW_ASSERT]
    assert len(asserted) == 1 and asserted[0][2] != asserted[0][3]
    g = graph_of_one_call(KoalaBear, check, np.array([[0, 3], [4, 0]]))  # a == 0 == b
    (got,), _ = run_computation_graph(g, [np.array([[0, 7], [8, 0]])])
    assert got.tolist() == [0, 0]
    with pytest.raises(ValueError, match=r"at instance 1 of 2 .*: 72 != 144$"):
        run_computation_graph(g, [np.array([[0, 7], [8, 9]])])


def test_first_failing_assertion_in_kernel_order_whatever_the_row_order(interpreted):
    """Assertion rows follow the later of their sides, not the kernel's order
    (here assertion 1's row comes first): the report still names the first
    assertion of the kernel that fails, at its first failing instance, as
    the eager run does."""
    @kernel
    def checks(x: In[3], out: Out[()]):
        u = x[0] + 1
        v = x[1]
        late = x[0] * x[1] * x[2]
        assert_eq(late, x[2] * 2)
        assert_eq(u, v)
        out[()] = late

    rows = graph_interp.program(checks.ir.nodes, [(a, b) for a, b, _ in checks.ir.asserts],
                                checks.ir.outputs, [((), (0, 1, 2))], [((), ((0, 0),))])
    asserted = [r[1] for r in rows.rows.tolist() if r[0] == graph_interp.ROW_ASSERT]
    assert asserted == [2, 1]
    ctx = Context()
    ok = np.tile([1, 2, 3], (6, 1))
    x = ctx.copy_to_device(ok)
    (o,) = ctx.call_kernel(checks, 6, x)
    g = ctx.generate_computation_graph([x], [o])
    bad = ok.copy()
    bad[2] = [2, 4, 0]  # fails assertion 1 only
    bad[4] = [2, 3, 1]  # fails assertion 0 only
    bad[5] = [2, 5, 1]  # fails both
    first = r"\(`assert_eq\(late, x\[2\] \* 2\)`\)\) at instance "
    for where in (4, 5):
        with pytest.raises(ValueError, match=first + f"{where} of 6"):
            run_computation_graph(g, [bad])
        with pytest.raises(ValueError, match=first + f"{where} of 6"):
            ctx.call_kernel(checks, 6, ctx.copy_to_device(bad))
        bad[4] = [1, 2, 3]


def test_slots_are_reused_once_values_are_dead():
    """A chain of any depth needs a handful of slots; rows are the nodes, then
    the assertions and one store per padded output slot."""
    perm, _ = permutation(4, 40)
    nodes = perm.ir.nodes
    outputs = perm.ir.outputs
    prog = graph_interp.program(nodes, (), outputs, [((), (0, 1, 2, 3)), ((), (0,))],
                                [((), tuple((k, k) for k in range(4)))])
    assert len(nodes) > 600 and prog.n_slots <= 12
    assert len(prog.rows) == len(nodes) + 4
    # no row writes a slot it reads (LLVM's overlap test of the two rows then
    # fails and the row runs scalar, 3x slower)
    for op, d, a, b in prog.rows.tolist():
        if op in (graph_codegen.OP_ADD, graph_codegen.OP_SUB, graph_codegen.OP_MUL):
            assert d not in (a, b)
        elif op == graph_codegen.OP_NEG:
            assert d != a
    ops = prog.rows[:, 0].tolist()
    assert ops[:len(nodes)] == [op for op, _, _ in nodes] and ops[len(nodes):] == [7] * 4
    # a never-read value frees its slot at once: the output's and one more
    dead = ((graph_codegen.OP_CONST, 0, 0),) * 5
    assert graph_interp.program(dead, (), ((0,),), [], [((), ((0, 0),))]).n_slots == 2


def test_asserted_values_free_their_slots_after_the_assertion():
    """A value last read by an assertion (its later side here) frees its slot
    on the next row: a kernel checking many fresh products needs a handful of
    slots, not one per assertion."""
    checks = 50
    nodes = [(graph_codegen.OP_LOAD, 0, 0)]
    asserts = []
    for k in range(checks):
        nodes.append((graph_codegen.OP_CONST, k, 0))
        nodes.append((graph_codegen.OP_MUL, 0, len(nodes) - 1))
        asserts.append((0, len(nodes) - 1))
    prog = graph_interp.program(tuple(nodes), tuple(asserts), ((0,),), [((), (0,))],
                                [((), ((0, 0),))])
    assert prog.n_slots <= 4
    rows = prog.rows.tolist()
    assert [r[1] for r in rows if r[0] == graph_interp.ROW_ASSERT] == \
        list(range(1, checks + 1))
    # the values: x * 1 == x holds, x * 2 == x only for x == 0
    consts = KoalaBear.encode(np.array([1] + [2] * (checks - 1)))
    words = KoalaBear.encode(np.array([5]))
    fail = np.zeros(1, np.uint32)
    out = np.zeros(1, np.uint32)
    graph_interp.run_program(prog, [words], [out], consts, fail, 1, KoalaBear.params.p,
                             KoalaBear.params.mu_neg)
    assert fail.tolist() == [2] and KoalaBear.decode(out).tolist() == [5]


def test_interpreter_copies_strided_inputs_and_refuses_strided_outputs():
    """Buffers of one call must be one Numba type: a strided input is copied
    (next to a contiguous one), never modified; a strided output cannot be
    copied back, so it is refused before anything runs."""
    nodes = ((graph_codegen.OP_LOAD, 0, 0), (graph_codegen.OP_LOAD, 1, 0),
             (graph_codegen.OP_SUB, 0, 1))
    par = ((3, 1),)
    prog = graph_interp.program(nodes, (), ((2,),), [(par, (0,)), (par, (0,))],
                                [(par, ((0, 0),))])
    p, mu = KoalaBear.params.p, KoalaBear.params.mu_neg
    wide = KoalaBear.encode(np.arange(16) * 7)
    before = wide.copy()
    strided, plain = wide[::2], KoalaBear.encode(np.arange(8))
    assert not strided.flags.c_contiguous
    out = np.zeros(8, np.uint32)
    fail = np.zeros(8, np.uint32)
    graph_interp.run_program(prog, [strided, plain], [out], KoalaBear.encode([0]), fail, 8, p, mu)
    assert KoalaBear.decode(out).tolist() == [(14 * v - v) % P for v in range(8)]
    assert wide.tolist() == before.tolist() and not fail.any()
    G = np.uint32(0xDEADBEEF)
    target = np.full(16, G, np.uint32)
    with pytest.raises(TypeError, match="outputs must be writable C-contiguous"):
        graph_interp.run_program(prog, [plain, plain], [target[::2]], KoalaBear.encode([0]),
                                 fail, 8, p, mu)
    assert (target == G).all()


def test_kernels_past_exactly_the_row_limit_are_interpreted(monkeypatch):
    """interprets: a kernel of exactly GRAPH_CPU_UNROLL_MAX_ROWS rows (nodes,
    two per assertion, one per stored padded slot) is unrolled, one row more
    is interpreted; neither has a product."""
    monkeypatch.setattr(launch_config, "GRAPH_CPU_UNROLL_MAX_ROWS", 6)
    nodes = ((graph_codegen.OP_LOAD, 0, 0), (graph_codegen.OP_LOAD, 0, 1),
             (graph_codegen.OP_ADD, 0, 1))
    slots = [((), ((0, 0), (1, 0), (2, 0)))]  # 3 nodes + 3 stored slots: 6 rows
    assert not graph_interp.interprets(nodes, (), ((2,),), slots)
    assert graph_interp.interprets(nodes, (), ((2,),), [((), slots[0][1] + ((3, 0),))])
    assert graph_interp.interprets(nodes, ((0, 1),), ((2,),), slots)  # 8 rows
    monkeypatch.setattr(launch_config, "GRAPH_CPU_UNROLL_MAX_ROWS", 8)
    assert not graph_interp.interprets(nodes, ((0, 1),), ((2,),), slots)


def test_interpreter_leaves_its_inputs_and_refuses_read_only_outputs():
    nodes = ((graph_codegen.OP_LOAD, 0, 0), (graph_codegen.OP_NEG, 0, 0))
    prog = graph_interp.program(nodes, (), ((1,),), [(((3, 1),), (0,))], [(((3, 1),), ((0, 0),))])
    words = KoalaBear.encode(np.arange(8))
    frozen = words.copy()
    frozen.setflags(write=False)
    out = np.zeros(8, np.uint32)
    fail = np.zeros(8, np.uint32)
    p, mu = KoalaBear.params.p, KoalaBear.params.mu_neg
    graph_interp.run_program(prog, [frozen], [out], KoalaBear.encode([0]), fail, 8, p, mu)
    assert KoalaBear.decode(out).tolist() == [(-v) % P for v in range(8)]
    assert frozen.tolist() == words.tolist() and not fail.any()
    with pytest.raises(TypeError, match="outputs must be writable"):
        graph_interp.run_program(prog, [words], [frozen], KoalaBear.encode([0]), fail, 8, p, mu)


def test_size_and_products_per_access_choose_the_interpreter(monkeypatch):
    """By default the replay unrolls small kernels with few products per memory
    access (they run faster one instance at a time) and interprets long ones
    and product-heavy ones (vector lanes hide the products' latency)."""
    used = []
    for module, name in ((graph_interp, "run_program"), (graph_cpu, "run_evaluator")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _o=original, _n=name, **k:
                            used.append(_n == "run_program") or _o(*a, **k))

    @kernel
    def add(x: In[2], o: Out[()]):
        o[()] = x[0] + x[1]

    @kernel
    def dot4(x: In[8], o: Out[()]):  # 4 products, 9 accesses
        o[()] = x[0] * x[4] + x[1] * x[5] + x[2] * x[6] + x[3] * x[7]

    @kernel
    def power(x: In[()], o: Out[()]):  # 5 products, 2 accesses
        o[()] = x[()] ** 17

    @kernel
    def long_sum(x: In[300], o: Out[()]):  # no product, 599 nodes
        s = x[0]
        for i in range(1, 300):
            s = s + x[i]
        o[()] = s

    rng = np.random.default_rng(9)
    for k, shape, want_interpreted, reference in (
            (add, (2,), False, lambda v: v.sum(axis=1)),
            (dot4, (8,), False, lambda v: (v[:, :4] * v[:, 4:]).sum(axis=1)),
            (power, (), True, lambda v: np.array([pow(int(a), 17, P) for a in v])),
            (long_sum, (300,), True, lambda v: v.sum(axis=1))):
        g = graph_of_one_call(KoalaBear, k, rng.integers(0, P, size=(5,) + shape))
        new = rng.integers(0, P, size=(5,) + shape).astype(object)
        used.clear()
        (got,), _ = run_computation_graph(g, [new])
        assert used == [want_interpreted], k.ir.name
        assert got.tolist() == (reference(new) % P).tolist()
    one_slot = [((), ((0, 0),))]
    assert graph_interp.interprets(power.ir.nodes, (), power.ir.outputs, one_slot)
    monkeypatch.setattr(launch_config, "GRAPH_CPU_INTERPRET_MULS_PER_ACCESS", 3)
    assert not graph_interp.interprets(power.ir.nodes, (), power.ir.outputs, one_slot)


def test_kernels_storing_or_asserting_much_are_interpreted(monkeypatch):
    """A few nodes stored to many output slots, or checked by many assertions,
    make as long an unrolled evaluator as many nodes (a 15-node kernel storing
    2048 slots compiled for 44 s): they count toward GRAPH_CPU_UNROLL_MAX_ROWS."""
    monkeypatch.setattr(graph_cpu, "compile_evaluator", None)  # never called
    limit = launch_config.GRAPH_CPU_UNROLL_MAX_ROWS

    @kernel
    def wide(x: In[()], o: Out[limit]):
        vals = [x[()] + c for c in range(7)]
        for i in range(limit):
            o[i] = vals[i % 7]

    @kernel
    def checked(x: In[2], o: Out[()]):
        a, b = x[0], x[1]
        for _ in range(limit // 2 + 1):
            assert_eq(a, b)
        o[()] = x[0]

    assert len(wide.ir.nodes) < 16 and len(checked.ir.nodes) < 4
    assert len(checked.ir.asserts) > limit // 2
    g = graph_of_one_call(KoalaBear, wide, np.arange(5))
    (got,), _ = run_computation_graph(g, [np.arange(5) + 10])
    assert got.tolist() == [[(v + i % 7) % P for i in range(limit)] for v in range(10, 15)]
    g = graph_of_one_call(KoalaBear, checked, np.array([[1, 1], [2, 2]]))
    (got,), _ = run_computation_graph(g, [np.array([[3, 3], [4, 4]])])
    assert got.tolist() == [3, 4]
    with pytest.raises(ValueError, match=r"at instance 1 of 2 .*: 4 != 5$"):
        run_computation_graph(g, [np.array([[3, 3], [4, 5]])])


def test_program_refuses_a_node_reading_a_later_one():
    nodes = ((graph_codegen.OP_ADD, 1, 1), (graph_codegen.OP_CONST, 0, 0))
    with pytest.raises(ValueError, match=r"node 0 .* reads a node not before it"):
        graph_interp.program(nodes, (), ((0,),), [], [((), ((0, 0),))])


def test_one_block_of_instances_runs_serially(monkeypatch):
    """A parallel launch of one chunk costs a launch and gains nothing."""
    monkeypatch.setattr(graph_interp, "_call_parallel", None)  # never called
    nodes = ((graph_codegen.OP_LOAD, 0, 0), (graph_codegen.OP_MUL, 0, 0))
    prog = graph_interp.program(nodes, (), ((1,),), [(((8, 1),), (0,))],
                                [(((8, 1),), ((0, 0),))])
    n = launch_config.GRAPH_CPU_BLOCK
    words = KoalaBear.encode(np.arange(n))
    out = np.zeros(n, np.uint32)
    graph_interp.run_program(prog, [words], [out], KoalaBear.encode([0]),
                             np.zeros(n, np.uint32), n, KoalaBear.params.p,
                             KoalaBear.params.mu_neg, serial=False)
    assert KoalaBear.decode(out).tolist() == [v * v % P for v in range(n)]


def test_more_operands_than_a_parallel_region_takes_run_serially():
    """Numba passes at most NUMBA_PARFOR_MAX_TUPLE_SIZE (100) tuple members
    into a parallel region: a replay of an interpreted kernel of 101 inputs
    over several blocks of instances failed to compile (a helper's review of
    loaded graphs); it runs serially instead."""
    m, n = 101, 2 * launch_config.GRAPH_CPU_BLOCK + 3
    nodes = [(graph_codegen.OP_LOAD, k, 0) for k in range(m)]
    for k in range(1, m):  # a running sum of the loads: node m + k - 1
        nodes.append((graph_codegen.OP_ADD, len(nodes) - 1 if k > 1 else 0, k))
    par = ((10, 1),)  # up to 1024 instances, stride 1
    prog = graph_interp.program(tuple(nodes), (), ((len(nodes) - 1,),),
                                [(par, (0,))] * m, [(par, ((0, 0),))])
    ins = [KoalaBear.encode(np.arange(n) + 7 * k) for k in range(m)]
    out = np.zeros(n, np.uint32)
    fail = np.ones(n, np.uint32)
    graph_interp.run_program(prog, ins, [out], KoalaBear.encode([0]), fail, n,
                             KoalaBear.params.p, KoalaBear.params.mu_neg)
    want = [sum(t + 7 * k for k in range(m)) % P for t in range(n)]
    assert KoalaBear.decode(out).tolist() == want and not fail.any()


@pytest.mark.parametrize("block", [1, 3])
def test_blocks_shrink_to_the_scratch_budget_with_the_same_bytes(block, monkeypatch):
    """A kernel of many live values runs blocks smaller than GRAPH_CPU_BLOCK
    (a chunk's scratch is bounded by GRAPH_CPU_SCRATCH_BYTES); the padded
    buffers, outputs and the first failing assertion are those of full blocks."""
    @kernel
    def wide(x: In[3], out: Out[2]):
        a, b, c = x[0] * x[1], x[1] * x[2], x[0] * x[2]
        d = a * b * c
        assert_eq(d * 0, c * 0 + a - a)
        assert_eq(a, b)
        out[0] = d + a
        out[1] = b * c - a

    monkeypatch.setattr(launch_config, "GRAPH_CPU_UNROLL_MAX_ROWS", -1)  # interpreted
    monkeypatch.setattr(launch_config, "GRAPH_CPU_SERIAL_WORK", 0)  # parallel chunks
    n = 3 * launch_config.GRAPH_CPU_BLOCK + 5
    rng = np.random.default_rng(11)
    x = np.ones((n, 3), np.int64)
    ctx = Context()
    hx = ctx.copy_to_device(x)
    (o,) = ctx.call_kernel(wide, n, hx)
    g = ctx.generate_computation_graph([hx], [o])
    vals = rng.integers(0, P, size=(n, 3))
    vals[:, 1] = vals[:, 0]
    vals[:, 2] = vals[:, 0]  # a == b everywhere ...
    full = run_computation_graph(g, [vals], padded=True)
    bad = vals.copy()
    bad[[n - 2, 2 * launch_config.GRAPH_CPU_BLOCK + 1], 2] += 1  # ... but at two instances
    with pytest.raises(ValueError, match=f"at instance {2 * launch_config.GRAPH_CPU_BLOCK + 1} "):
        run_computation_graph(g, [bad])
    prog = graph_interp.program(wide.ir.nodes, [(a, b) for a, b, _ in wide.ir.asserts],
                                wide.ir.outputs, [((), (0, 1, 2))], [((), ((0, 0), (1, 1)))])
    per_instance = 4 * prog.n_slots + 8 * 2 + 4  # (one input, one output operand)
    monkeypatch.setattr(launch_config, "GRAPH_CPU_SCRATCH_BYTES", (block + 1) * per_instance - 1)
    blocks = []
    parallel = graph_interp._call_parallel

    def spy(kernel, *args):
        blocks.append(args[9])  # (ins, outs, rows, terms x 2, consts, fail, n, slots, block)
        return parallel(kernel, *args)

    monkeypatch.setattr(graph_interp, "_call_parallel", spy)
    small = run_computation_graph(g, [vals], padded=True)
    assert blocks == [block]
    for a, b in zip(full[0] + full[2], small[0] + small[2]):
        assert a.tolist() == b.tolist()
    assert full[1] == small[1]
    with pytest.raises(ValueError, match=f"at instance {2 * launch_config.GRAPH_CPU_BLOCK + 1} "):
        run_computation_graph(g, [bad])
