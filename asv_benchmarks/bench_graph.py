"""Replayed graph kernels on the CPU: the unrolled evaluator, the interpreter
and plain vectorized NumPy, in the same process.

Three kernels over 2^14 instances: ``dot8``, an 8-term dot product (31 IR
nodes, 0.47 products per memory access: unrolled by default); ``rounds2``
and ``rounds8``, 2 and 8 rounds of a cube-and-mix function over 16 lanes
(each round: every lane cubed plus the round number, then the lanes' sum
added to each; 176 and 656 nodes, interpreted by default, the first for its
products per access, the second for its size too -- its unrolled compile
takes seconds and is not timed here).  ``unrolled`` is
``graph_cpu.run_evaluator`` of the generated source, ``interpreted`` is
``graph_interp.run_program``, both on the padded Montgomery buffers a replay
hands them; ``numpy`` is what one writes without zorch_nb: canonical values
in uint64 arrays, ``% p`` after every product and sum, vectorized over the
instances.  The ratios are the data for retuning
``launch_config.GRAPH_CPU_UNROLL_MAX_ROWS`` and
``GRAPH_CPU_INTERPRET_MULS_PER_ACCESS``.  ``setup`` records the graph,
compiles, runs each form once and checks all three agree with the eager
run (the replay's Merkle commitments, which cost more than these kernels,
are left out of the timing).

``ReplayManySmallCalls`` times whole replays (``run_computation_graph``) of
100 and 1000 small calls: the per-call cost of a replay.
"""
import numpy as np

from zorch_nb import KoalaBear
from zorch_nb._demo_graph import cube_and_mix
from zorch_nb.graph import Context, In, Out, kernel, run_computation_graph
from zorch_nb.kernels import graph_cpu, graph_interp

from . import check_equal, prepare_once

F = KoalaBear
P = np.uint64(F.p)
LANES = 16
INSTANCES = 1 << 14


@kernel
def dot8(x: In[(LANES,)], o: Out[(1,)]):
    s = x[0] * x[8]
    for i in range(1, 8):
        s = s + x[i] * x[8 + i]
    o[0] = s


def numpy_rounds(x, rounds: int):
    """The round kernel on canonical values, (instances, 16) uint64, in NumPy."""
    s = x.astype(np.uint64)
    for r in range(rounds):
        s = (s * s % P * s + np.uint64(r)) % P
        s = (s + s.sum(axis=1, keepdims=True) % P) % P
    return s


def numpy_dot8(x):
    s = x.astype(np.uint64)
    return ((s[:, :8] * s[:, 8:]) % P).sum(axis=1, keepdims=True) % P


KERNELS = {"dot8": (dot8, numpy_dot8),
           "rounds2": (cube_and_mix(LANES, 2), lambda x: numpy_rounds(x, 2)),
           "rounds8": (cube_and_mix(LANES, 8), lambda x: numpy_rounds(x, 8))}


class GraphEvaluator:
    params = (list(KERNELS), ["unrolled", "interpreted", "numpy"])
    param_names = ["kernel", "form"]

    @prepare_once
    def setup(self, name, form):
        if name == "rounds8" and form == "unrolled":
            raise NotImplementedError("a compile of seconds; interpreted by default")
        k, numpy_kernel = KERNELS[name]
        rng = np.random.default_rng(len(name))
        self.x = rng.integers(0, F.p, size=(INSTANCES, LANES))
        ctx = Context(F)
        x = ctx.copy_to_device(self.x)
        (o,) = ctx.call_kernel(k, INSTANCES, x)
        want = ctx.copy_to_host(o)
        g = ctx.generate_computation_graph([x], [o])
        if form == "numpy":
            self.run = lambda: numpy_kernel(self.x)
            got = self.run()
        else:
            ck = g.compiled_kernels[g.templates[0].compiled]
            ir = g.kernels[ck.kernel]
            ins = [F.encode(self.x).reshape(-1)]
            outs = [np.empty(want.size, dtype=np.uint32)]
            consts = F.encode(np.array([c % F.p for c in ir.consts] or [0]))
            fail = np.zeros(INSTANCES, dtype=np.uint32)
            p, mu = F.params.p, F.params.mu_neg
            if form == "unrolled":
                py_src, _, name = g.sources(g.templates[0].compiled)
                fn = graph_cpu.compile_evaluator(py_src, name, False)
                self.run = lambda: graph_cpu.run_evaluator(fn, ins, outs, consts, fail,
                                                           INSTANCES, p, mu)
            else:
                prog = graph_interp.program(ir.nodes, [(a, b) for a, b, _ in ir.asserts],
                                            ir.outputs, ck.in_layouts, ck.out_layouts)
                self.run = lambda: graph_interp.run_program(prog, ins, outs, consts, fail,
                                                            INSTANCES, p, mu)
            self.run()
            got = F.decode(outs[0]).reshape(want.shape)
        if np.asarray(got).tolist() != want.tolist():
            raise AssertionError(f"{form} differs from the eager run")

    def time_evaluate(self, name, form):
        self.run()


@kernel
def _affine(x: In[2], o: Out[()]):
    o[()] = x[0] * 7 + x[1] + 3


def numpy_affine(x):
    """``_affine`` on canonical values, ``(instances, 2)``, in NumPy."""
    s = x.astype(np.uint64)
    return (s[:, 0] * np.uint64(7) + s[:, 1] + np.uint64(3)) % P


class ReplayManySmallCalls:
    """A replay of ``calls`` calls of a 6-instance kernel, all reading one input:
    the per-call cost of a replay (layout lookups, constants, the evaluator's
    launch, one Merkle root per output buffer), which dominates graphs of many
    small calls."""
    params = [100, 1000]
    param_names = ["calls"]

    @prepare_once
    def setup(self, calls):
        ctx = Context(F)
        self.x = np.arange(12).reshape(6, 2)
        x = ctx.copy_to_device(self.x)
        for _ in range(calls):
            (o,) = ctx.call_kernel(_affine, 6, x)
        self.graph = ctx.generate_computation_graph([x], [o])
        (out,), _ = run_computation_graph(self.graph, [self.x])  # compiles
        check_equal(out, numpy_affine(self.x), f"replay of {calls} calls")

    def time_replay(self, calls):
        run_computation_graph(self.graph, [self.x])


class RecordCall:
    """One ``call_kernel``, the eager run that records a call: ``interpreted``
    (the CPU default: one graph-interpreter call over the operands) against
    ``walk`` (one field call per IR node, as the CuPy backend runs it).
    ``affine6`` is a 7-node kernel (3 of them arithmetic) over 6 instances
    (the recorder's own overhead dominates), ``rounds2`` the 176-node
    cube-and-mix kernel over 2^14 instances.  ``number = 1`` with a fresh
    Context per sample (asv
    runs ``setup`` before each), so recorded buffers do not pile up."""
    params = (["affine6", "rounds2"], ["interpreted", "walk"])
    param_names = ["kernel", "eager"]
    number = 1

    def setup(self, name, eager):
        from zorch_nb import graph
        self.graph = graph
        graph._EAGER_INTERPRETER = eager == "interpreted"
        if name == "affine6":
            self.kernel, n, x = _affine, 6, np.arange(12).reshape(6, 2)
            want = numpy_affine(x)
        else:
            self.kernel, n = KERNELS["rounds2"][0], INSTANCES
            x = np.random.default_rng(2).integers(0, F.p, size=(n, LANES))
            want = numpy_rounds(x, 2)
        self.n = n
        self.ctx = Context(F)
        self.x = self.ctx.copy_to_device(x)
        (o,) = self.ctx.call_kernel(self.kernel, n, self.x)  # compiles, makes the program
        check_equal(self.ctx.copy_to_host(o), want, f"{name}, {eager}")

    def teardown(self, name, eager):
        self.graph._EAGER_INTERPRETER = True

    def time_call_kernel(self, name, eager):
        self.ctx.call_kernel(self.kernel, self.n, self.x)
