"""Conversions at the boundary to integers (encode, decode, random, and so
``Context.copy_to_device``) start no threading layer: on GNU OpenMP
(Numba's ``omp`` layer on Linux) a process forked after that layer started
cannot run the parallel kernels (``kernels/cpu_threads.serialized`` raises
there), so a parent that only builds data must leave its forked children
(``multiprocessing``'s default start method on Linux) free to run field ops,
and a forked child must still convert.  Their CPU kernels run serially
for that reason (found by review: the first, parallel version broke both)
until a parallel kernel has started the layer in the process itself.
Each case runs in a fresh interpreter that forks.
"""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


_FORK = """
    import os
    import numpy as np
    from zorch_nb import KoalaBear as F
    {parent}
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if ({child}) else 3)
        except RuntimeError as exc:
            print("child:", exc, flush=True)
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
"""


def _child_status(parent, child):
    """Exit status of a child forked after ``parent`` (statements) that
    evaluates ``child`` (an expression): 0 true, 3 false, 4 RuntimeError."""
    script = textwrap.dedent(_FORK).format(parent=parent, child=child)
    res = subprocess.run([sys.executable, "-c", script], env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_children_forked_after_encode_and_random_run_field_ops():
    """The parent only encoded / drew data; a forked child runs field ops
    (encode and random start no threading layer)."""
    parent = ("a = F.random(64, seed=1); b = F.encode(np.arange(1, 65)); "
              "x = F.ext.encode(np.arange(1, 257).reshape(64, 4)); vals = F.decode(b)")
    child = ("(F.decode(F.mul(b, F.inv(b))) == 1).all() and "
             "F.ext.mul(x, F.ext.inv(x)).shape == (64, 4)")
    assert _child_status(parent, child) == "0"


def test_encode_decode_in_a_forked_child_of_a_parent_that_ran_kernels():
    """encode / decode / random run in any forked child, whatever the
    threading layer (here the parent's field op started it)."""
    parent = "a = F.encode(np.arange(1, 65)); F.mul(a, a)"
    child = ("F.decode(F.encode(np.arange(10))).tolist() == list(range(10)) "
             "and F.random(8, seed=2).shape == (8,)")
    assert _child_status(parent, child) == "0"


def test_large_conversions_go_parallel_only_where_the_layer_may_run():
    """Past the serial size the conversions use the threading layer once a
    parallel kernel has started it -- in the parent, not in a child forked
    after GNU OpenMP started (the parent's memory says started there; a
    parallel conversion would raise or be fatal), where they stay serial."""
    parent = ("from numba.np.ufunc import parallel\n"
              "from zorch_nb.kernels import cpu_threads\n"
              "assert not cpu_threads.layer_running()\n"
              "a = F.random(1 << 16, seed=1); F.mul(a, a)  # parallel: starts the layer\n"
              "assert parallel._is_initialized and cpu_threads.layer_running()\n"
              "v = np.arange(1 << 16); assert (F.decode(F.encode(v)) == v).all()")
    child = "(F.decode(F.encode(v)) == v).all() and (F.decode(a) < F.p).all()"
    assert _child_status(parent, child) == "0"


_GRAPH = """
    from zorch_nb.graph import Context, In, Out, kernel, run_computation_graph
    from zorch_nb.graph_layout import merkle_root
    from numba.np.ufunc import parallel

    @kernel
    def inc(x: In[()], o: Out[()]):
        o[()] = x[()] + 1

    ctx = Context(F)
    x = ctx.copy_to_device(np.arange(8192))
    (o,) = ctx.call_kernel(inc, 8192, x)
    g = ctx.generate_computation_graph([x], [o])
    ok = run_computation_graph(g, [np.arange(8192)])[1] == g.commitments
"""


def test_a_small_replay_and_its_commitments_start_no_threading_layer():
    """A replay whose evaluator runs serially hashes its (8192-word) buffers
    serially too: the Numba Merkle kernels' first version launched a
    parallel kernel for any buffer of 512 leaves, so a child forked after
    such a replay could not run field ops on GNU OpenMP (found by review)."""
    parent = textwrap.dedent(_GRAPH) + "\nassert ok and not parallel._is_initialized"
    child = "(F.decode(F.mul(F.encode(np.arange(1, 9)), F.encode(np.arange(1, 9)))) " \
            "== np.arange(1, 9) ** 2).all()"
    assert _child_status(parent, child) == "0"


def test_commitments_in_a_child_forked_after_the_threading_layer_started():
    """Where parallel kernels would be fatal (a child of a parent whose GNU
    OpenMP layer ran), replays' commitments still hash, on one thread, as
    hashlib did before; of a large buffer too."""
    parent = (textwrap.dedent(_GRAPH) + "\nbig = F.random(1 << 18, seed=3); "
              "want = merkle_root(big); F.mul(big, big)")
    child = ("run_computation_graph(g, [np.arange(8192)])[1] == g.commitments "
             "and merkle_root(big) == want")
    assert _child_status(parent, child) == "0"


def test_recording_a_small_call_of_a_long_kernel_starts_no_threading_layer():
    """Recording runs the graph interpreter (one call per kernel call); its
    first version chose the parallel form by the replay's rule (instances x
    nodes), so a 176-node call of 512 instances started GNU OpenMP where the
    node walk's field calls had stayed serial, and a child forked after it
    could not run field ops (found by review)."""
    parent = textwrap.dedent("""
        from numba.np.ufunc import parallel
        from zorch_nb._demo_graph import cube_and_mix
        from zorch_nb.graph import Context
        ctx = Context(F)
        x = ctx.copy_to_device(np.arange(512 * 16).reshape(512, 16))
        (o,) = ctx.call_kernel(cube_and_mix(16, 2), 512, x)
        assert ctx.copy_to_host(o).shape == (512, 16) and not parallel._is_initialized
    """)
    child = "(F.decode(F.mul(F.encode(np.arange(1, 9)), F.encode(np.arange(1, 9)))) " \
            "== np.arange(1, 9) ** 2).all()"
    assert _child_status(parent, child) == "0"


def test_a_child_forked_after_the_threading_layer_started_records_any_call():
    """In a child forked after GNU OpenMP started, the interpreter's parallel
    form would be refused; the node walk had recorded a kernel of copies there
    (no field call), so the recording runs serially instead (found by a fuzz)."""
    parent = textwrap.dedent("""
        from zorch_nb.graph import Context, In, Out, kernel

        @kernel
        def cube(x: In[()], o: Out[()]):
            o[()] = x[()] * x[()] * x[()]

        @kernel
        def copy10(x: In[10], o: Out[10]):
            for i in range(10):
                o[i] = x[i]

        ctx = Context(F)
        ctx.call_kernel(cube, 1 << 16, ctx.copy_to_device(np.arange(1 << 16)))
        data = np.arange(9000 * 10).reshape(9000, 10) % 1000
    """)
    child = "(ctx.copy_to_host(ctx.call_kernel(copy10, 9000, ctx.copy_to_device(data))[0]) " \
            "== data).all()"
    assert _child_status(parent, child) == "0"
