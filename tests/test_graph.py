"""Deferred-graph recorder (DESIGN.md §3): recording, layouts, replay, serialization."""
import copy
import io
import json
import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

from zorch_nb import BabyBear, KoalaBear
from zorch_nb._demo_graph import add_2, add_16
from zorch_nb.graph import (ComputationGraph, Context, In, InOut, KernelDefinitionError, Out,
                            _sources, assert_eq, kernel, run_computation_graph)
from zorch_nb.kernels import graph_codegen

P = KoalaBear.p


@kernel
def row_sum_5(x: In[5], out: Out[()]):
    out[()] = x[0] + x[1] + x[2] + x[3] + x[4]


@kernel
def row_sum_3(x: In[3], out: Out[()]):
    out[()] = x[0] + x[1] + x[2]


@kernel
def add_xy(x: In[()], y: In[()], out: Out[()]):
    out[()] = x[()] + y[()]


@kernel
def sum_3x5(x: In[3, 5], out: Out[()]):
    s = x[0, 0]
    for i in range(3):
        for j in range(5):
            if (i, j) != (0, 0):
                s = s + x[i, j]
    out[()] = s


def reference_program(ctx, lanes=1, offset=0):
    """16x2 input per lane -> add_2 x16 -> [lanes,16] -> add_16 x lanes -> [] or [lanes]."""
    vals = np.arange(1, 33).reshape(16, 2)
    data = np.concatenate([vals + offset + k for k in range(lanes)])
    a = ctx.copy_to_device(data)
    (b,) = ctx.call_kernel(add_2, 16 * lanes, a)
    (c,) = ctx.call_kernel(add_16, lanes, b.reshape([lanes, 16]))
    return a, (c.reshape([]) if lanes == 1 else c)


@kernel
def _sum_and_triple(x: In[3], total: Out[()], again: Out[3]):
    total[()] = x[0] + x[1] + x[2]
    for i in range(3):
        again[i] = x[i] * 3


def test_each_handle_remembers_the_use_its_calls_record():
    """A call reads the entry it adds to its buffer's uses (the view as a
    message shows it, and its split points) off the handle: made on the
    handle's first call, or for a call's output taken from its buffer's own
    first use.  Each must equal the entry worked out afresh from the
    handle's view: inputs, outputs, a reshape and a transpose."""
    from zorch_nb.graph import _describe, _Operand, _prefix_points
    ctx = Context(KoalaBear)
    a, c = reference_program(ctx, lanes=2)  # a: an input; c: an output, shape (2,)
    (d,) = ctx.call_kernel(add_xy, 2, c, c)
    x = ctx.copy_to_device(np.arange(15)).reshape(3, 5).T
    (e,) = ctx.call_kernel(row_sum_3, 5, x)
    e5 = e.reshape(5, 1).reshape(5)
    ctx.call_kernel(add_xy, 5, e5, e)
    f, g = ctx.call_kernel(_sum_and_triple, 5, x)  # two outputs of other shapes
    for h in (a, c, d, x, e, e5, f, g):
        op = _Operand(h.buffer_id, h._view, False, h.shape, h._history)
        want = (_describe(op), tuple(_prefix_points(h._view.base)))
        assert h._use == want, (h.shape, h._use, want)
        assert want in ctx._buffers[h.buffer_id].uses


# ------------------------------------------------------------ reference ----

def test_reference_program_gives_528():
    ctx = Context()
    a, c = reference_program(ctx)
    assert c.shape == ()
    out = ctx.copy_to_host(c)
    assert out.shape == () and int(out) == 528


class _ArrayLike:
    """Array-like through ``__array__`` alone (a CPU tensor, a DataFrame)."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a

    def __iter__(self):  # rows, as a tensor's
        return iter(self.a)


def test_reference_lanes_give_528_plus_32k():
    ctx = Context()
    a, c = reference_program(ctx, lanes=5)
    np.testing.assert_array_equal(ctx.copy_to_host(c), 528 + 32 * np.arange(5))
    g = ctx.generate_computation_graph([a], [c])
    new = np.concatenate([np.arange(1, 33).reshape(16, 2) + 10 * k for k in range(5)])
    (out,), _ = run_computation_graph(g, [new])
    np.testing.assert_array_equal(out, 528 + 320 * np.arange(5))
    for bad, exc, match in ((None, TypeError, "`inputs` must be a sequence"),
                            ({"a": new}, TypeError, "`inputs` must be a sequence"),
                            (new, TypeError, r"not one array of shape \(80, 2\); pass a "
                                             r"list: \[x\]$"),
                            (_ArrayLike(new), TypeError, "not one array of shape"),
                            ([new * 1.0], TypeError, "`inputs\\[0\\]` must hold integers"),
                            ([-new], ValueError, r"inputs\[0\]\[0, 0\] = -1; pass "
                                                 r"reduce=True to reduce modulo p$"),
                            ([[[1, 2], [3]]], ValueError, r"`inputs\[0\]` must be a rectangular"),
                            # (the replay computed with the hidden values, as if unmasked)
                            ([np.ma.masked_array(new, mask=new > 3)], TypeError,
                             r"`inputs\[0\]` is a masked array; field kernels would ignore")):
        with pytest.raises(exc, match=match):
            run_computation_graph(g, bad)
    # reduce=True reads any integer modulo p, as copy_to_device(..., reduce=True)
    wrapped = [new - 3 * P, np.array(new + P, dtype=object) + 2**70 * P]
    for raw in wrapped:
        (got,), _ = run_computation_graph(g, [raw], reduce=True)
        assert got.tobytes() == out.tobytes()
    # a 0-d input's value is named as the input itself (encode's own name was left)
    ctx0 = Context()
    s = ctx0.copy_to_device(7)
    (y,) = ctx0.call_kernel(add_xy, 1, s, s)
    g0 = ctx0.generate_computation_graph([s], [y])
    with pytest.raises(ValueError, match=r"must lie in \[0, p=\d+\), but inputs\[0\] = -1; "
                                         r"pass reduce=True to reduce modulo p$"):
        run_computation_graph(g0, [np.array(-1)])
    for flag in ("reduce", "padded"):  # ("no" is truthy: it asked for the padded buffers)
        with pytest.raises(TypeError, match=f"`{flag}` must be True or False"):
            run_computation_graph(g, [new], **{flag: "no"})
    assert a.transpose(None).history == a.transpose().history  # NumPy's spelling
    for axes in ((1.9, 0.2), ("x", None), (True, False)):
        with pytest.raises(TypeError, match="`axes` must be integers"):
            a.transpose(*axes)


def test_graph_structure_and_replay_matches_recording():
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    assert g.field == "koalabear"
    assert g.buffer_points == ((1, 16, 32), (1, 16), (1,))
    assert g.padded_lengths == (32, 16, 1)
    assert [t.num_parallel for t in g.templates] == [16, 1]
    assert [t.padded_parallel for t in g.templates] == [16, 1]
    assert [t.broadcast for t in g.templates] == [(False,), (False,)]
    assert [t.inputs for t in g.templates] == [(0,), (1,)]
    assert [t.outputs for t in g.templates] == [(1,), (2,)]
    assert len(g.commitments) == 3 and all(len(x) == 32 for x in g.commitments)
    (out,), commitments = run_computation_graph(g, [np.arange(1, 33).reshape(16, 2)])
    assert int(out) == 528
    assert commitments == g.commitments  # compiled, padded replay == eager recording
    (out,), commitments = run_computation_graph(g, [np.arange(32).reshape(16, 2)])
    assert int(out) == 496 and commitments != g.commitments


def test_compiled_kernels_are_deduplicated():
    ctx = Context()
    x = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    (y,) = ctx.call_kernel(add_2, 16, x)
    (z,) = ctx.call_kernel(add_2, 16, x)
    (w,) = ctx.call_kernel(add_2, 8, y.reshape([8, 2]))
    g = ctx.generate_computation_graph([x], [z, w])
    assert len(g.kernels) == 1
    assert [t.compiled for t in g.templates] == [0, 0, 1]


def test_kernels_pickle_by_value():
    # A module-level @kernel's name is the Kernel, so pickling by name (the
    # function's way) failed; spawned workers and executors need the kernel.
    import copy
    import pickle
    local = kernel(add_xy.__wrapped__)  # (a kernel not reachable by any name)
    for k in (add_2, row_sum_3, local):
        for twin in (pickle.loads(pickle.dumps(k)), copy.deepcopy(k)):
            assert type(twin) is type(k) and twin.ir == k.ir
            assert twin.fingerprint == k.fingerprint and twin.__doc__ == k.__doc__
            assert twin.__name__ == k.__name__ == k.name  # (a Kernel had no __name__)
    assert (add_2.__qualname__, add_2.__module__) == ("add_2", add_2.__wrapped__.__module__)
    ctx = Context()
    x = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    (y,) = ctx.call_kernel(pickle.loads(pickle.dumps(add_2)), 16, x)
    np.testing.assert_array_equal(ctx.copy_to_host(y), np.arange(32).reshape(16, 2).sum(1))


def test_context_takes_a_field_name_and_has_a_summary_repr():
    ctx = Context("BabyBear")  # the name, as a graph file records it (any case)
    assert ctx.field is BabyBear and Context("koalabear").field is KoalaBear
    with pytest.raises(ValueError, match="`field` must name one of"):
        Context("goldilocks")
    a = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    ctx.call_kernel(add_2, 16, a)
    assert repr(ctx) == ("<zorch_nb graph Context: BabyBear, backend cpu, 2 buffers, "
                         "1 call recorded>")


def test_graph_repr_counts_and_sources_index():
    """'1 calls' in the graph's repr; ``sources(5)`` on a one-kernel graph was a
    bare "tuple index out of range" (a notebook user's review)."""
    ctx = Context()
    a = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    (b,) = ctx.call_kernel(add_2, 16, a)
    g = ctx.generate_computation_graph([a], [b])
    assert repr(g) == ("<ComputationGraph koalabear: 1 call, 1 compiled kernel, 2 buffers>")
    assert repr(a) == "<zorch_nb graph handle: buffer 0, shape (16, 2)>"  # as a.shape
    assert g.sources(-1) is g.sources(0) and g.sources(np.int64(0)) is g.sources(0)
    assert g.sources(0)[2] and "def " in g.sources(0)[0]
    for bad in (1, 5, -2):
        with pytest.raises(IndexError, match=rf"`index` is {bad}, but this graph has 1 "
                                             r"compiled kernel \(indices -1..0\)"):
            g.sources(bad)
    for bad in (0.0, "0", True, None):
        with pytest.raises(TypeError, match="`index` must be an int"):
            g.sources(bad)


# ------------------------------------------------------ save / reload -----

_REPLAY_SCRIPT = """
import json, sys
import numpy as np
from zorch_nb.graph import ComputationGraph, run_computation_graph
g = ComputationGraph.load(sys.argv[1])
new = np.concatenate([np.arange(1, 33).reshape(16, 2) * 2 + k for k in range(3)])
(out,), commitments = run_computation_graph(g, [new])
from zorch_nb.graph import _sources
from zorch_nb.kernels import graph_cpu
evaluators = {}  # this replay's evaluators, in the form (serial or not) each ran
for t in g.templates:
    ck = g.compiled_kernels[t.compiled]
    src, _, name = _sources(g.kernels[ck.kernel], ck)
    serial = graph_cpu.use_serial(t.padded_parallel, len(g.kernels[ck.kernel].nodes))
    evaluators[t.compiled] = graph_cpu.compile_evaluator(src, name, serial)
stats = [getattr(fn, "stats", None) for fn in evaluators.values()]
stats = [s for s in stats if s is not None]  # (none under NUMBA_DISABLE_JIT=1)
print(json.dumps({"out": out.tolist(), "commitments": [c.hex() for c in commitments],
                  "hits": sum(sum(s.cache_hits.values()) for s in stats),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats)}))
"""


def test_sources_of_a_graph_without_kernels_and_a_kernels_qualname():
    ctx = Context()
    a = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    g = ctx.generate_computation_graph([a], [a])  # no call: no compiled kernel
    with pytest.raises(IndexError, match=r"`index` is 0, but this graph has no compiled "
                                         r"kernels$"):
        g.sources(0)

    def make():
        @kernel
        def twice(x: In[()], out: Out[()]):
            out[()] = x[()] + x[()]
        return twice
    k = make()
    assert (k.__name__, k.__qualname__) == ("twice", make.__qualname__ + ".<locals>.twice")
    import pickle
    twin = pickle.loads(pickle.dumps(add_2))  # no traced function: the kernel's name
    assert (twin.__name__, twin.__qualname__) == ("add_2", "add_2")


def test_save_load_in_fresh_process_and_replay(tmp_path):
    ctx = Context()
    a, c = reference_program(ctx, lanes=3)
    g = ctx.generate_computation_graph([a], [c])
    path = tmp_path / "reference.zgraph"
    g.save(path)
    assert ComputationGraph.load(path) == g
    res = subprocess.run([sys.executable, "-c", _REPLAY_SCRIPT, str(path)], check=True,
                         capture_output=True, text=True, env=dict(os.environ))
    got = json.loads(res.stdout.strip().splitlines()[-1])
    new = np.concatenate([np.arange(1, 33).reshape(16, 2) * 2 + k for k in range(3)])
    (out,), commitments = run_computation_graph(g, [new])
    assert got["out"] == out.tolist() == [2 * 528 + 32 * k for k in range(3)]
    assert got["commitments"] == [x.hex() for x in commitments]


def test_values_the_same_in_every_instance_are_computed_before_the_instance_loop(monkeypatch):
    """Nodes that read only broadcast operands and constants, and assertions
    between them, left inside the evaluator's instance loop made LLVM take
    time exponential in their depth: 4 rounds of x^3 + i checked by
    assert_eq on one instance compiled for over 60 s (3 rounds: 2.6 s).  They
    are computed once before the loop; the first failing assertion in kernel
    order is still the one reported, at the first failing instance."""
    from zorch_nb.kernels import graph_cpu, launch_config
    # (a chain of products would be interpreted: unrolled here, the form tested)
    monkeypatch.setattr(launch_config, "GRAPH_CPU_INTERPRET_MULS_PER_ACCESS", float("inf"))
    used = []
    original = graph_cpu.run_evaluator
    monkeypatch.setattr(graph_cpu, "run_evaluator", lambda *a: used.append(1) or original(*a))
    rounds = 8

    def reference(v):
        for i in range(rounds):
            v = (v ** 3 + i) % P
        return v

    @kernel
    def hashed(x: In[()], y: In[()], z: In[()], o: Out[()]):
        s = x[()]
        for i in range(rounds):
            s = s * s * s + i
        assert_eq(s, y[()])       # both sides broadcast below: before the loop
        assert_eq(z[()], s * 0 + 7)  # z per instance: in the loop
        o[()] = s + z[()]

    ctx = Context()
    x, y = ctx.copy_to_device(5), ctx.copy_to_device(reference(5))
    z = ctx.copy_to_device(np.full(3, 7))
    (o,) = ctx.call_kernel(hashed, 3, x, y, z)
    g = ctx.generate_computation_graph([x, y, z], [o])
    py = g.sources(0)[0]
    head, loop = py.split("for t in prange(n_inst):")
    # (s * 0 + 7 is fixed too: the loop loads z, checks it and adds)
    assert head.count("mont_mul") == 2 * rounds + 1 and "mont_mul" not in loop
    assert "c0 = " in head and "if c0:" in loop  # the fixed assertion, as a flag
    (out,), _ = run_computation_graph(g, [5, reference(5), np.full(3, 7)])
    np.testing.assert_array_equal(out, [(reference(5) + 7) % P] * 3)
    assert used
    with pytest.raises(ValueError, match=r"assert_eq failed in kernel `hashed` \(.*\) at "
                                         r"instance 0 of 3"):
        run_computation_graph(g, [5, reference(5) + 1, np.full(3, 6)])  # both fail: the 1st
    with pytest.raises(ValueError, match=r"at instance 2 of 3.*: 6 != 7"):
        run_computation_graph(g, [5, reference(5), np.array([7, 7, 6])])


def test_save_replaces_the_file_whole_and_refuses_descriptors(tmp_path, monkeypatch):
    """``save`` encodes first and renames a finished file over the old one:
    it opened the file (emptying it) before encoding, so a graph that could
    not be encoded, or a failed write, destroyed the last good file.  An int
    (or bool) ``path`` was taken by ``open`` as a file descriptor: the graph
    went to stdout, which was then closed (``load``: stdin, read to its end)."""
    import io
    ctx = Context()
    a, c = reference_program(ctx, lanes=3)
    g = ctx.generate_computation_graph([a], [c])
    path = tmp_path / "g.zgraph"
    g.save(path)
    good = path.read_bytes()
    assert good == g.to_bytes()

    def unencodable(self):
        raise ValueError("cannot encode")

    with monkeypatch.context() as m:
        m.setattr(ComputationGraph, "to_bytes", unencodable)
        with pytest.raises(ValueError, match="cannot encode"):
            g.save(path)
    with monkeypatch.context() as m:
        m.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "disk full")))
        with pytest.raises(OSError, match="disk full"):
            g.save(path)
    assert path.read_bytes() == good and os.listdir(tmp_path) == ["g.zgraph"]
    for bad in (1, True, 2.5, None):
        with pytest.raises(TypeError, match="`path` must be a file name"):
            g.save(bad)
        with pytest.raises(TypeError, match="`path` must be a file name"):
            ComputationGraph.load(bad)
    buf = io.BytesIO()
    g.save(buf)
    assert buf.getvalue() == good and ComputationGraph.load(io.BytesIO(good)) == g
    # a text-mode file: io's "write() argument must be str" / a UnicodeDecodeError
    binary = r"`path` must be .* binary mode \(open\(\.\.\., 'wb'\)"
    with open(tmp_path / "t.txt", "w") as fh, pytest.raises(TypeError, match=binary):
        g.save(fh)
    with open(tmp_path / "g.zgraph") as fh, pytest.raises(TypeError, match="'rb'"):
        ComputationGraph.load(fh)
    os.remove(tmp_path / "t.txt")
    g.save(os.fsencode(tmp_path / "b.zgraph"))
    assert ComputationGraph.load(str(tmp_path / "b.zgraph")) == g
    with pytest.raises(IsADirectoryError):
        g.save(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        g.save(tmp_path / "missing" / "g.zgraph")
    assert err.value.filename == str(tmp_path / "missing" / "g.zgraph")
    assert sorted(os.listdir(tmp_path)) == ["b.zgraph", "g.zgraph"]


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="nothing is compiled")
def test_replay_in_a_new_process_loads_the_compiled_evaluators(tmp_path):
    """The generated evaluators go through Numba's on-disk cache: the second process
    replaying a saved graph compiles nothing (a 400-operation kernel took ~5 s)."""
    ctx = Context()
    a, c = reference_program(ctx, lanes=3)
    path = tmp_path / "reference.zgraph"
    ctx.generate_computation_graph([a], [c]).save(path)
    env = dict(os.environ, ZORCH_NB_CACHE_DIR=str(tmp_path / "zc"),
               NUMBA_CACHE_DIR=str(tmp_path / "nc"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", _REPLAY_SCRIPT, str(path)],
                                      check=True, capture_output=True, text=True,
                                      env=env).stdout.strip().splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["out"] == runs[1]["out"] == [2 * 528 + 32 * k for k in range(3)]
    assert runs[0]["misses"] == 2 and runs[0]["hits"] == 0  # two evaluators compiled
    assert runs[1]["misses"] == 0 and runs[1]["hits"] == 2  # and loaded from disk
    assert len(list((tmp_path / "zc").glob("graph-evaluators-*/zorch_graph_*.py"))) == 2


def test_save_and_load_refuse_any_text_stream():
    """A graph is bytes: a text stream that is not a file (``io.StringIO``) is
    refused by save and load as a text file is, naming the binary mode."""
    ctx = Context()
    x = ctx.copy_to_device(np.arange(6).reshape(3, 2))
    (o,) = ctx.call_kernel(add_2, 3, x)
    g = ctx.generate_computation_graph([x], [o])
    with pytest.raises(TypeError, match=r"`path` must be .* binary mode \(open\(\.\.\., 'wb'\)"):
        g.save(io.StringIO())
    with pytest.raises(TypeError, match=r"binary mode \(open\(\.\.\., 'rb'\)"):
        ComputationGraph.load(io.StringIO("text"))


def test_padded_lengths_are_made_once_per_graph(monkeypatch):
    """Each replay asked for ``padded_lengths`` twice, walking every buffer's
    points each time (a quarter of a 10,000-call replay); a graph is
    immutable, so they are made once.  Its pickle makes them again, equal."""
    import zorch_nb.graph as graph_module

    ctx = Context()
    x = ctx.copy_to_device(np.arange(6).reshape(3, 2))
    (o,) = ctx.call_kernel(add_2, 3, x)
    g = ctx.generate_computation_graph([x], [o])
    (first,), _ = run_computation_graph(g, [np.arange(6).reshape(3, 2)])
    walked = []
    original = graph_module.padded_dims
    monkeypatch.setattr(graph_module, "padded_dims",
                        lambda dims: walked.append(dims) or original(dims))
    for _ in range(3):
        (again,), _ = run_computation_graph(g, [np.arange(6).reshape(3, 2)])
    assert again.tolist() == first.tolist() and walked == []
    assert g.padded_lengths is g.padded_lengths
    copied = copy.deepcopy(g)
    assert copied.padded_lengths == g.padded_lengths == (8, 4) and len(walked) == 2


def test_a_replay_encodes_each_kernels_constants_once(monkeypatch):
    """A replay of many small calls encoded the same constants once per call
    (with padded_lengths' np.prod, 60% of a 1000-call replay's time)."""
    from zorch_nb.fields import PrimeField

    @kernel
    def affine(x: In[2], o: Out[()]):
        o[()] = x[0] * 7 + x[1] * 11 + 13

    ctx = Context()
    x = ctx.copy_to_device(np.arange(6).reshape(3, 2))
    for _ in range(50):
        (o,) = ctx.call_kernel(affine, 3, x)
    g = ctx.generate_computation_graph([x], [o])
    new = np.arange(6).reshape(3, 2) + 5
    want = [(a * 7 + b * 11 + 13) % P for a, b in new.tolist()]
    (got,), _ = run_computation_graph(g, [new])
    encoded = []
    original = PrimeField.encode
    monkeypatch.setattr(PrimeField, "encode",
                        lambda self, v, *a, **k: encoded.append(len(v)) or original(self, v, *a, **k))
    (again,), _ = run_computation_graph(g, [new])
    assert got.tolist() == again.tolist() == want
    assert len(encoded) == 1  # the input; the constants' words were kept from the first
    (bb,), _ = run_computation_graph(graph_of_one_call(BabyBear, affine, new), [new])
    assert bb.tolist() == [(a * 7 + b * 11 + 13) % BabyBear.p for a, b in new.tolist()]


def graph_of_one_call(field, k, values):
    """The graph of one call of ``k`` over ``len(values)`` instances of its one input."""
    ctx = Context(field)
    x = ctx.copy_to_device(values)
    (o,) = ctx.call_kernel(k, len(values), x)
    return ctx.generate_computation_graph([x], [o])


@pytest.mark.parametrize("work", [0, 1 << 30], ids=["parallel", "serial"])
def test_replays_run_serial_and_parallel_evaluators_alike(work, monkeypatch):
    """Small calls replay with evaluators compiled without ``parallel`` (a thread
    launch per call cost milliseconds on a busy machine); both forms give the
    same outputs and commitments, and each compiles under its own name."""
    from zorch_nb.kernels import graph_cpu, launch_config
    ctx = Context()
    a, c = reference_program(ctx, lanes=3)
    g = ctx.generate_computation_graph([a], [c])
    new = np.concatenate([np.arange(1, 33).reshape(16, 2) * 2 + k for k in range(3)])
    want = run_computation_graph(g, [new])
    monkeypatch.setattr(launch_config, "GRAPH_CPU_SERIAL_WORK", work)
    used = []
    original = graph_cpu.run_evaluator
    monkeypatch.setattr(graph_cpu, "run_evaluator",
                        lambda *args: used.append(args[-1]) or original(*args))
    got = run_computation_graph(g, [new])
    assert used == [work > 0] * len(g.templates)
    assert [o.tolist() for o in got[0]] == [o.tolist() for o in want[0]]
    assert got[1] == want[1]
    if work and not numba.config.DISABLE_JIT:
        ck = g.compiled_kernels[0]
        fn = graph_cpu.compile_evaluator(*_sources(g.kernels[ck.kernel], ck)[::2], True)
        assert fn.py_func.__name__.endswith("__serial") and not fn.targetoptions.get("parallel")


def test_serial_evaluators_up_to_exactly_the_work_threshold(monkeypatch):
    """use_serial: ``n_inst * max(nodes, 1) <= GRAPH_CPU_SERIAL_WORK`` runs serially,
    one unit of work more runs in parallel (on a machine with several threads)."""
    from zorch_nb.kernels import graph_cpu, launch_config
    monkeypatch.setattr(graph_cpu, "one_thread_set", lambda: False)
    w = launch_config.GRAPH_CPU_SERIAL_WORK
    assert graph_cpu.use_serial(w, 1) and graph_cpu.use_serial(w // 4, 4)
    assert graph_cpu.use_serial(w, 0)  # (no nodes count as one)
    assert not graph_cpu.use_serial(w + 1, 1) and not graph_cpu.use_serial(w // 4, 5)
    monkeypatch.setattr(graph_cpu, "one_thread_set", lambda: True)
    assert graph_cpu.use_serial(w + 1, 1)


@kernel
def skew_2x2(x: In[2, 2], out: Out[()]):
    out[()] = x[0, 1] * 3 - x[1, 0]


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "broadcast"])
def test_calls_differing_only_in_element_offsets_get_their_own_evaluators(parallel):
    """The same kernel over a buffer and over its transpose: the IR and the
    parallel layout are the same, only the element offsets differ.  The
    generated text reads at those offsets, so the two calls must not share a
    source (its memo key holds the offsets), nor its replay the values."""
    n = 4
    shape = (n, 2, 2) if parallel else (2, 2)
    ctx = Context()
    x = ctx.copy_to_device(np.arange(int(np.prod(shape))).reshape(shape))
    (a,) = ctx.call_kernel(skew_2x2, n, x)
    (b,) = ctx.call_kernel(skew_2x2, n, x.transpose(0, 2, 1) if parallel else x.transpose())
    g = ctx.generate_computation_graph([x], [a, b])
    assert len({g.sources(c)[2] for c in range(len(g.compiled_kernels))}) == 2
    vals = np.random.default_rng(11).integers(0, P, size=shape)
    (got_a, got_b), _ = run_computation_graph(g, [vals])
    v = vals.astype(object)
    if not parallel:
        v = np.broadcast_to(v, (n, 2, 2))
    assert got_a.tolist() == ((v[:, 0, 1] * 3 - v[:, 1, 0]) % P).tolist()
    assert got_b.tolist() == ((v[:, 1, 0] * 3 - v[:, 0, 1]) % P).tolist()


def test_threads_replaying_one_new_graph_build_its_evaluator_once(monkeypatch):
    """(a thread-safety review) compile_evaluator was an lru_cache, which let
    eight threads replaying one new graph build its evaluator seven times
    (one compile, six disk loads, each keeping its machine code).  A miss is
    now built under a lock; the waiting threads get that build."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from zorch_nb.graph import _sources
    from zorch_nb.kernels import graph_cpu
    ctx = Context()
    a, c = reference_program(ctx, lanes=3)
    g = ctx.generate_computation_graph([a], [c])
    ck = g.compiled_kernels[g.templates[0].compiled]
    src, _, name = _sources(g.kernels[ck.kernel], ck)
    builds, real = [], graph_cpu.njit

    def slow_njit(*args, **kwargs):  # slow enough that all eight threads overlap
        builds.append(kwargs.get("parallel"))
        time.sleep(0.2)
        return real(*args, **kwargs)
    monkeypatch.setattr(graph_cpu, "njit", slow_njit)
    graph_cpu.compile_evaluator.cache_clear()
    start = threading.Barrier(8)

    def replay(i):
        start.wait()
        return graph_cpu.compile_evaluator(src, name, bool(i % 2))
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(replay, range(8)))
    finally:
        graph_cpu.compile_evaluator.cache_clear()  # (built by the spy: not kept)
    assert sorted(builds) == [False, True]  # one serial, one parallel evaluator
    assert all(f is got[i % 2] for i, f in enumerate(got)) and got[0] is not got[1]


def test_replay_without_a_writable_cache_folder_compiles_in_memory(tmp_path, monkeypatch):
    from zorch_nb.kernels import graph_cpu
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(blocker))
    graph_cpu.evaluator_cache_dir.cache_clear()
    graph_cpu.compile_evaluator.cache_clear()
    try:
        # said once a process, naming the folder and the variable (kernels
        # compiled in memory in every process were only slow starts before)
        with pytest.warns(RuntimeWarning, match=rf"cannot create its folder for generated "
                          rf"kernels, {re.escape(str(blocker))}/graph-evaluators-[0-9a-f]+ \(Not a "
                          rf"directory\): .*set "
                          rf"ZORCH_NB_CACHE_DIR to a folder that can be written"):
            assert graph_cpu.evaluator_cache_dir() is None
        ctx = Context()
        a, c = reference_program(ctx, lanes=2)
        g = ctx.generate_computation_graph([a], [c])
        new = np.concatenate([np.arange(1, 33).reshape(16, 2) + 3 * k for k in range(2)])
        (out,), _ = run_computation_graph(g, [new])
        assert out.tolist() == [528, 624]
    finally:
        graph_cpu.evaluator_cache_dir.cache_clear()
        graph_cpu.compile_evaluator.cache_clear()


def test_evaluator_folders_of_other_sources_are_pruned_when_unused(tmp_path, monkeypatch):
    """Folders of other kernel sources (past versions) unused for
    STALE_FOLDER_DAYS are deleted; recently used ones, other files and the
    current folder stay; the current folder is marked used."""
    import time

    from zorch_nb.kernels import graph_cpu
    root = tmp_path / "zc"
    days = graph_cpu.STALE_FOLDER_DAYS
    old, recent = root / "graph-evaluators-0000000000000000", root / "graph-evaluators-1111"
    other = root / "not-ours"
    for folder in (old, recent, other):
        (folder / "__pycache__").mkdir(parents=True)
        (folder / "zorch_graph_k.py").write_text("x = 1\n")
    now = time.time()
    for folder, age in ((old, days + 1), (recent, days - 1), (other, 10 * days)):
        os.utime(folder, (now - age * 86400,) * 2)
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(root))
    graph_cpu.evaluator_cache_dir.cache_clear()
    try:
        current = graph_cpu.evaluator_cache_dir()
    finally:
        graph_cpu.evaluator_cache_dir.cache_clear()
    assert not old.exists() and recent.exists() and other.exists()
    assert os.path.isdir(current) and os.stat(current).st_mtime > now - 60
    os.utime(current, (now - 2 * days * 86400,) * 2)  # its own folder is never pruned
    graph_cpu.evaluator_cache_dir.cache_clear()
    try:
        assert graph_cpu.evaluator_cache_dir() == current and os.path.isdir(current)
        assert os.stat(current).st_mtime > now - 60  # marked used again
    finally:
        graph_cpu.evaluator_cache_dir.cache_clear()


def test_evaluators_unused_for_long_are_pruned_with_their_numba_files(tmp_path, monkeypatch):
    """Within the current folder, evaluator files not loaded for STALE_FOLDER_DAYS
    go with their Numba cache files; a load marks a file used; other files stay."""
    import time

    from zorch_nb.kernels import graph_cpu
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(tmp_path / "zc"))
    graph_cpu.evaluator_cache_dir.cache_clear()
    graph_cpu.compile_evaluator.cache_clear()
    try:
        folder = graph_cpu.evaluator_cache_dir()
        days, now = graph_cpu.STALE_FOLDER_DAYS, time.time()
        files = {"old": "zorch_graph_kaaaa.py", "old_serial": "zorch_graph_kaaaa__serial.py",
                 "recent": "zorch_graph_kbbbb.py", "other": "notes.txt"}
        numba_files = ["zorch_graph_kaaaa.kaaaa-5.py311.nbi",
                       "zorch_graph_kaaaa.kaaaa-5.py311.1.nbc", "zorch_graph_kbbbb.kbbbb-5.py311.nbi"]
        for key, name in files.items():
            path = os.path.join(folder, name)
            with open(path, "w") as fh:
                fh.write("x = 1\n")
            age = days - 1 if key == "recent" else days + 1
            os.utime(path, (now - age * 86400,) * 2)
        # where Numba keeps the files' machine code: __pycache__ beside them, or
        # a folder of NUMBA_CACHE_DIR named by theirs
        from zorch_nb import kernels
        cache = kernels._numba_cache_folder(folder, files["old"])
        os.makedirs(cache, exist_ok=True)
        for name in numba_files:
            open(os.path.join(cache, name), "w").close()
        # a real evaluator, loaded long ago: loading it again marks it used
        ctx = Context()
        a, c = reference_program(ctx)
        g = ctx.generate_computation_graph([a], [c])
        run_computation_graph(g, [np.arange(1, 33).reshape(16, 2)])
        used = [n for n in os.listdir(folder) if n.startswith("zorch_graph_k") and
                n not in files.values()]
        assert used
        for n in used:
            os.utime(os.path.join(folder, n), (now - 2 * days * 86400,) * 2)
        graph_cpu.compile_evaluator.cache_clear()
        run_computation_graph(g, [np.arange(1, 33).reshape(16, 2)])
        graph_cpu.evaluator_cache_dir.cache_clear()
        assert graph_cpu.evaluator_cache_dir() == folder  # (prunes)
        left = set(os.listdir(folder))
        assert files["old"] not in left and files["old_serial"] not in left
        assert {files["recent"], files["other"]} <= left and set(used) <= left
        cached = os.listdir(cache)
        assert numba_files[2] in cached and not any(n.startswith("zorch_graph_kaaaa")
                                                    for n in cached)
    finally:
        graph_cpu.evaluator_cache_dir.cache_clear()
        graph_cpu.compile_evaluator.cache_clear()


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="nothing is compiled")
def test_evaluator_cache_survives_damaged_files_and_a_full_disk(tmp_path, monkeypatch):
    """A cached evaluator file that is not byte for byte the generated source (not
    even UTF-8) is rewritten, never run; a cache Numba cannot write (a full disk,
    no writable folder at all) falls back to compiling in memory; the replay is
    right every time."""
    import types

    from zorch_nb.kernels import graph_cpu
    monkeypatch.setenv("ZORCH_NB_CACHE_DIR", str(tmp_path / "zc"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "nc"))
    ctx = Context()
    a, c = reference_program(ctx, lanes=2)
    g = ctx.generate_computation_graph([a], [c])
    new = np.concatenate([np.arange(1, 33).reshape(16, 2) + 3 * k for k in range(2)])

    def replay():
        graph_cpu.evaluator_cache_dir.cache_clear()
        graph_cpu.compile_evaluator.cache_clear()
        (out,), _ = run_computation_graph(g, [new])
        assert out.tolist() == [528, 624]

    try:
        replay()
        files = sorted((tmp_path / "zc").glob("graph-evaluators-*/zorch_graph_*.py"))
        good = [f.read_bytes() for f in files]
        for f in files:
            f.write_bytes(b"# caf\xe9 -- not the generated source\n")
        replay()
        assert [f.read_bytes() for f in files] == good  # rewritten
        real_njit = graph_cpu.njit

        def full_disk_njit(**kwargs):
            def decorate(fn):
                if kwargs.get("cache"):  # Numba failing to write its index
                    def compile_(sig):
                        raise OSError(28, "No space left on device")
                    return types.SimpleNamespace(compile=compile_)
                return real_njit(**kwargs)(fn)
            return decorate
        monkeypatch.setattr(graph_cpu, "njit", full_disk_njit)
        replay()
        assert not list((tmp_path / "zc").glob("graph-evaluators-*/*.tmp"))

        def nowhere_njit(**kwargs):  # a read-only cache and no writable Numba cache
            def decorate(fn):
                if kwargs.get("cache"):
                    raise RuntimeError(f"cannot cache function {fn.__name__!r}: "
                                       f"no locator available for file '...'")
                return real_njit(**kwargs)(fn)
            return decorate
        monkeypatch.setattr(graph_cpu, "njit", nowhere_njit)
        replay()
    finally:
        graph_cpu.evaluator_cache_dir.cache_clear()
        graph_cpu.compile_evaluator.cache_clear()


def test_kernels_differing_only_in_constants_share_an_evaluator():
    from zorch_nb.graph import _sources
    graphs = []
    for const in (3, 5):
        scope = {"kernel": kernel, "In": In, "Out": Out}
        exec(f"@kernel\ndef k{const}(x: In[()], out: Out[()]):\n"
             f"    out[()] = x[()] * {const} + 1\n", scope)
        ctx = Context()
        x = ctx.copy_to_device(np.arange(8))
        (y,) = ctx.call_kernel(scope[f"k{const}"], 8, x)
        g = ctx.generate_computation_graph([x], [y])
        (out,), _ = run_computation_graph(g, [np.arange(8)])
        assert out.tolist() == [(v * const + 1) % P for v in range(8)]
        graphs.append(g)
    names = [_sources(g.kernels[ck.kernel], ck)[2] for g in graphs for ck in g.compiled_kernels]
    assert names[0] == names[1]  # constants are runtime arguments: one compile


@kernel
def _sum_then_product(x: In[2], out: Out[2]):
    s = x[0] + x[1]
    d = x[0] * x[1]
    out[0] = s
    out[1] = d


@kernel
def _product_then_sum(x: In[2], out: Out[2]):
    s = x[0] + x[1]
    d = x[0] * x[1]
    out[0] = d
    out[1] = s


def test_kernels_differing_only_in_their_outputs_replay_apart():
    """Same nodes, same operand layouts, the outputs swapped: each call keeps its
    own compiled kernel and its own evaluator (the outputs are part of both keys)."""
    assert _sum_then_product.ir.nodes == _product_then_sum.ir.nodes
    vals = np.arange(1, 9).reshape(4, 2)
    ctx = Context()
    x = ctx.copy_to_device(vals)
    (sp,) = ctx.call_kernel(_sum_then_product, 4, x)
    (ps,) = ctx.call_kernel(_product_then_sum, 4, x)
    g = ctx.generate_computation_graph([x], [sp, ps])
    assert [t.compiled for t in g.templates] == [0, 1]
    assert g.sources(0)[2] != g.sources(1)[2]
    new = vals * 3 + 1
    want = np.stack([new.sum(axis=1), new.prod(axis=1)], axis=1)
    (got_sp, got_ps), commitments = run_computation_graph(g, [new])
    np.testing.assert_array_equal(got_sp, want)
    np.testing.assert_array_equal(got_ps, want[:, ::-1])
    assert run_computation_graph(g, [vals])[1] == g.commitments


def test_serialization_is_deterministic():
    graphs = []
    for _ in range(2):
        ctx = Context()
        a, c = reference_program(ctx, lanes=2)
        graphs.append(ctx.generate_computation_graph([a], [c]).to_bytes())
    assert graphs[0] == graphs[1]
    assert graphs[0][:8] == b"ZORCHGR\x00"
    g = ComputationGraph.from_bytes(graphs[0])
    assert g.to_bytes() == graphs[0]


@pytest.fixture(scope="module")
def small_graph_bytes():
    ctx = Context()
    a, c = reference_program(ctx)
    return ctx.generate_computation_graph([a], [c]).to_bytes()


def test_every_flipped_byte_is_detected(small_graph_bytes):
    data = small_graph_bytes
    for i in range(len(data)):
        for bit in (0x01, 0x80):
            bad = bytearray(data)
            bad[i] ^= bit
            with pytest.raises(ValueError):
                ComputationGraph.from_bytes(bytes(bad))


def test_truncated_wrong_version_and_crafted_files(small_graph_bytes):
    data = small_graph_bytes
    for n in (0, 5, 19, 20, len(data) // 2, len(data) - 1):
        with pytest.raises(ValueError, match="truncated|shorter"):
            ComputationGraph.from_bytes(data[:n])
    with pytest.raises(ValueError, match="trailing"):
        ComputationGraph.from_bytes(data + b"\x00")
    wrong = bytearray(data)
    wrong[8:12] = (2).to_bytes(4, "little")
    with pytest.raises(ValueError, match="version 2"):
        ComputationGraph.from_bytes(bytes(wrong))
    with pytest.raises(ValueError, match="bad magic"):
        ComputationGraph.from_bytes(b"\x80\x04" + data[2:])  # e.g. a pickle
    with pytest.raises(ValueError, match="checksum"):
        ComputationGraph.from_bytes(data[:-1] + bytes([data[-1] ^ 1]))


def test_crafted_graph_with_valid_checksum_is_refused():
    import hashlib
    from zorch_nb import graph_format as fmt
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    # An evaluator offset past its buffer: the checksum is fine, validation is not.
    ck = g.compiled_kernels[0]
    par, offsets = ck.in_layouts[0]
    evil = ComputationGraph(g.field, g.kernels,
                            [ck._replace(in_layouts=((par, (0, 10**6)),))] +
                            list(g.compiled_kernels[1:]), g.buffer_points, g.templates,
                            g.inputs, g.outputs, g.constants, g.commitments)
    with pytest.raises(ValueError, match="reads past padded buffer"):
        ComputationGraph.from_bytes(evil.to_bytes())
    body = g.to_bytes()[:-32]
    body = body.replace(b"koalabear", b"koalabeaR")
    with pytest.raises(ValueError, match="unknown field"):
        ComputationGraph.from_bytes(body + hashlib.sha256(body).digest())
    assert fmt.FORMAT_VERSION == 1


def test_broadcast_flags_other_than_0_and_1_are_refused(monkeypatch):
    """A flag byte of 2..255 decoded as True and encoded back as 1: a file
    (with a valid checksum) that did not round-trip."""
    from zorch_nb import graph_format as fmt
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    real = fmt._Writer.arr

    def odd_flags(self, values, dtype):
        if dtype == "<u1" and len(values):
            values = [2 + int(values[0]) * 7] + list(values[1:])
        return real(self, values, dtype)

    with monkeypatch.context() as m:
        m.setattr(fmt._Writer, "arr", odd_flags)
        data = g.to_bytes()
    with pytest.raises(ValueError, match="corrupted graph: a broadcast flag is (2|9), not 0 or 1"):
        ComputationGraph.from_bytes(data)
    assert ComputationGraph.from_bytes(g.to_bytes()).to_bytes() == g.to_bytes()


def test_hand_built_graph_is_validated_before_its_first_replay():
    """The constructor is public and the evaluators index unchecked: a graph built
    by hand is checked as a decoded file is (an offset past its buffer segfaulted,
    reversed templates failed in Numba's typing), and a graph cannot be changed
    after it was checked."""
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    x = np.arange(1, 33).reshape(16, 2)
    ck = g.compiled_kernels[0]
    par, _ = ck.in_layouts[0]
    parts = [g.field, g.kernels, g.compiled_kernels, g.buffer_points, g.templates, g.inputs,
             g.outputs, g.constants, g.commitments]

    def built(k, value):
        return ComputationGraph(*(parts[:k] + [value] + parts[k + 1:]))

    for evil, match in ((built(2, [ck._replace(in_layouts=((par, (0, 10**9)),))]
                                + list(g.compiled_kernels[1:])), "reads past padded buffer"),
                        (built(4, g.templates[::-1]), "before it is written"),
                        (built(3, [(1, 3)] * len(g.buffer_points)), "invalid computation graph"),
                        # (the output's index, and its buffer's)
                        (built(6, [(g.outputs[0][0], (("reshape", (3, 3)),))]),
                         rf"graph output 0 \(buffer {g.outputs[0][0]}\) reshapes"),
                        # negative numbers, which a file cannot hold (unsigned): an
                        # offset or stride before the buffer's start segfaulted, a
                        # negative buffer id read a buffer counted from the end
                        (built(2, [ck._replace(in_layouts=((par, (0, -10**12)),))]
                               + list(g.compiled_kernels[1:])), "compiled kernel holds -"),
                        (built(2, [ck._replace(in_layouts=((((par[0][0], -2),)
                                                            + tuple(par[1:]), (0, 1)),))]
                               + list(g.compiled_kernels[1:])), "compiled kernel holds -2"),
                        (built(4, [g.templates[0]._replace(inputs=(-2,))]
                               + list(g.templates[1:])), "template holds -2"),
                        (built(2, [ck._replace(in_layouts=((par, (0, 1.5)),))]
                               + list(g.compiled_kernels[1:])), "holds 1.5 where"),
                        (built(1, [g.kernels[0]._replace(nodes=((0, -1, 0),)
                                                         + tuple(g.kernels[0].nodes[1:]))]
                               + list(g.kernels[1:])), "kernel 0 holds -1")):
        with pytest.raises(ValueError, match=match):
            run_computation_graph(evil, [x])
    # containers that are not sequences: a bare "'NoneType' object is not
    # iterable" TypeError from to_bytes and the replay, where ValueError is documented
    names = ["field", "kernels", "compiled_kernels", "buffer_points", "templates", "inputs",
             "outputs"]
    for k in range(1, 7):
        for value in (None, 5, 1.5):
            evil = built(k, value)
            for call in (lambda: run_computation_graph(evil, [x]), evil.to_bytes):
                with pytest.raises(ValueError, match=rf"the graph's {names[k]} must be a "
                                                     rf"sequence, not {type(value).__name__}"):
                    call()
    with pytest.raises(ValueError, match="buffer 0's split points must be a sequence, not int"):
        built(3, [5] + list(g.buffer_points[1:])).to_bytes()
    for part in ("params", "asserts", "consts", "nodes", "outputs"):
        evil = built(1, [g.kernels[0]._replace(**{part: None})] + list(g.kernels[1:]))
        with pytest.raises(ValueError, match="kernel 0 needs tuples of parameters"):
            evil.to_bytes()
    evil = built(1, [g.kernels[0]._replace(params=(5,) + g.kernels[0].params[1:])]
                 + list(g.kernels[1:]))
    with pytest.raises(ValueError, match="kernel 0 needs tuples of parameters"):
        evil.to_bytes()
    same = ComputationGraph(*parts)
    assert run_computation_graph(same, [x])[1] == g.commitments
    for attr in ("templates", "field", "_validated"):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(same, attr, getattr(g, attr))
    with pytest.raises(AttributeError, match="immutable"):
        del same.kernels
    ints = np.array([5, 6], dtype=np.int64)
    held = ComputationGraph(*parts[:7], [(0, ints)], parts[8]).constants[0][1]
    assert held.dtype == np.uint32 and not held.flags.writeable
    ints[0] = 9
    assert held.tolist() == [5, 6]
    with pytest.raises(ValueError):
        held.setflags(write=True)  # (an array owning its memory could be made writeable)
    # the caller's lists inside the parts are copied: changing them after a replay
    # (once validated) reaches nothing (it segfaulted through the offsets)
    offsets = list(ck.in_layouts[0][1])
    built_from_lists = built(2, [ck._replace(in_layouts=[(par, offsets)])]
                             + list(g.compiled_kernels[1:]))
    assert run_computation_graph(built_from_lists, [x])[1] == g.commitments
    offsets[1] = 10**8
    assert run_computation_graph(built_from_lists, [x])[1] == g.commitments
    # pickle and copies go through the constructor (frozen, validated anew)
    import copy
    import pickle
    for twin in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g), copy.copy(g)):
        assert not twin._validated and twin == g
        assert run_computation_graph(twin, [x])[1] == g.commitments
    with pytest.raises(ValueError, match="`constants` must hold canonical values"):
        ComputationGraph(*parts[:7], [(0, np.array([2**32 + 1]))], parts[8])


def _with_constant(values):
    """The reference program's graph holding ``values`` as its one constant
    (a graph built by hand), and the array the graph keeps for it."""
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    graph = ComputationGraph(g.field, g.kernels, g.compiled_kernels, g.buffer_points,
                             g.templates, g.inputs, g.outputs, [(0, values)], g.commitments)
    return graph, graph.constants[0][1]


@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.uint8])
def test_graph_constants_are_read_only_copies_whatever_the_integer_dtype(dtype):
    """A uint32 array is copied too (only a graph's own frozen constants are
    taken as they are): the caller changing it reaches nothing."""
    mine = np.array([5, 6], dtype=dtype)
    _, held = _with_constant(mine)
    mine[0] = 9
    assert held.dtype == np.uint32 and held.tolist() == [5, 6] and not held.flags.writeable


@pytest.mark.parametrize("shape", [(2,), (2, 3), (), (0,)])
def test_a_graphs_own_constants_are_shared_not_copied_again(shape):
    """Constants a graph froze are immutable: a graph made from another's
    (``__eq__``'s bare copies, pickling, ``copy``) holds the same arrays, of
    every shape, instead of copying each one again."""
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    _, first = _with_constant(values)
    graph, again = _with_constant(first)
    assert again is first
    assert first.shape == shape and first.tolist() == values.tolist()
    with pytest.raises(ValueError):
        first.setflags(write=True)  # frozen for good: nothing can change it later
    assert copy.copy(graph).constants[0][1] is first


def test_graph_constants_must_be_integers_below_2_32():
    def held(values):
        return _with_constant(values)[1]

    assert held(np.array([2**32 - 1, 0])).tolist() == [2**32 - 1, 0]  # (>= p: validation's)
    for wraps in ([2**32], [-1, 3]):
        with pytest.raises(ValueError, match="`constants` must hold canonical values"):
            held(np.array(wraps))
    for bad in (np.array([5.0, 6.0]), np.array([True, False])):
        with pytest.raises(TypeError, match=rf"`constants` must hold integer arrays, "
                                            rf"not {bad.dtype}$"):
            held(bad)


@kernel
def _pair_sum(x: In[2], out: Out[()]):
    out[()] = x[0] + x[1]


@kernel
def _pair_products(x: In[2], out: Out[()]):  # 3 products for 3 accesses: interpreted
    out[()] = x[0] * x[1] * x[0] * 3


@pytest.mark.parametrize("k", [_pair_sum, _pair_products])  # unrolled / interpreted on the CPU
def test_layouts_a_file_may_hold_replay_or_are_refused(k):
    """Found by fuzzing hand-built and re-encoded graphs: a parallel input of
    stride 0 (every instance reads one row; the file format allows it) failed
    in Numba's typing (the CPU evaluator read an index it never computed); a
    constant node's unused operand of 2**63 passed the check, then could not be
    encoded; a crafted parallel size (2**70) overflowed inside the check and a
    stride of 2**70 on a size-1 dimension passed it, then failed in Numba."""
    ctx = Context()
    a = ctx.copy_to_device(np.arange(1, 9).reshape(4, 2))
    (r,) = ctx.call_kernel(k, 4, a)
    g = ctx.generate_computation_graph([a], [r])
    ck = g.compiled_kernels[0]
    (par, offsets), = ck.in_layouts
    parts = [g.field, g.kernels, g.compiled_kernels, g.buffer_points, g.templates, g.inputs,
             g.outputs, g.constants, g.commitments]

    def with_par(new_par):
        return ComputationGraph(*parts[:2], (ck._replace(in_layouts=((new_par, offsets),)),),
                                *parts[3:])

    x = np.array([[5, 7], [1, 2], [3, 4], [6, 8]], dtype=np.uint32)
    row0 = np.repeat(x[:1], 4, axis=0)
    want = run_computation_graph(g, [row0])[0][0]
    for evil in (with_par(tuple((lg, 0) for lg, _ in par)),):
        for h in (evil, ComputationGraph.from_bytes(evil.to_bytes())):
            np.testing.assert_array_equal(run_computation_graph(h, [x])[0][0], want)
    assert not (run_computation_graph(g, [x])[0][0] == want).all()  # (the rows differ)
    nodes = g.kernels[0].nodes
    spare = tuple((op, u, 2**63 if op == graph_codegen.OP_CONST else v) for op, u, v in nodes)
    evils = [(with_par(((2**70, 1),)), "parallel dimension over 2\\*\\*40"),
             (with_par(((0, 2**70),) + tuple(par)), "or a stride of 2\\*\\*40 or more")]
    if spare != nodes:
        evils.append((ComputationGraph(parts[0], (g.kernels[0]._replace(nodes=spare),),
                                       *parts[2:]), "node .* is malformed"))
    assert len(evils) == 2 + (k is _pair_products)
    for evil, match in evils:
        for call in (evil.to_bytes, lambda: run_computation_graph(evil, [x])):
            with pytest.raises(ValueError, match="invalid computation graph: .*" + match):
                call()


def test_what_a_file_cannot_hold_is_refused_before_replay_and_encoding():
    """Validation and encoding agreed only on decoded files: a hand-built graph
    replayed what ``to_bytes`` then could not encode (a constant beyond 64 bits,
    a float count: OverflowError, struct.error) or encoded something else (a
    3-byte commitment, five zero bytes for the int 5), truncated a float
    constant (1.5 multiplied by 1), took an unknown view step for a
    transpose, and let a dict or a string reach a KeyError or TypeError
    deep inside.  Each is a ValueError from replay, ``to_bytes`` and ``==``."""
    ctx = Context()
    a = ctx.copy_to_device(np.arange(4))

    @kernel
    def affine(x: In[()], out: Out[()]):
        out[()] = 7 * x[()] + 1

    (b,) = ctx.call_kernel(affine, 4, a)
    g = ctx.generate_computation_graph([a], [b])
    parts = dict(field=g.field, kernels=g.kernels, compiled_kernels=g.compiled_kernels,
                 buffer_points=g.buffer_points, templates=g.templates, inputs=g.inputs,
                 outputs=g.outputs, constants=g.constants, commitments=g.commitments)
    ir, t = g.kernels[0], g.templates[0]
    out_spec = g.outputs[0]
    for match, change in (
            ("commitment 0 is b'abc'", dict(commitments=(b"abc",) + g.commitments[1:])),
            ("commitment 0 is 5", dict(commitments=(5,) + g.commitments[1:])),
            ("constant 1.5: constants are signed 64-bit", dict(kernels=(ir._replace(
                consts=(1.5, 1)),))),
            ("constant '7'", dict(kernels=(ir._replace(consts=("7", 1)),))),
            ("constant 1180591620717411303424", dict(kernels=(ir._replace(
                consts=(2**70, 1)),))),
            ("constant True", dict(kernels=(ir._replace(consts=(True, 1)),))),
            ("kernel 0 has a name", dict(kernels=(ir._replace(name=5),))),
            ("kernel 0 has a name", dict(kernels=(ir._replace(name="\ud800"),))),
            ("parameter kind", dict(kernels=(ir._replace(
                params=((ir.params[0][0], "sideways", ()),) + ir.params[1:]),))),
            ("buffer 0's split points must be a sequence, not dict",
             dict(buffer_points=({1: 4},) + g.buffer_points[1:])),
            ("buffer 0's split points must be a sequence, not ndarray",
             dict(buffer_points=(np.array([1, 4]),) + g.buffer_points[1:])),
            ("template holds 4.0", dict(templates=(t._replace(num_parallel=4.0),))),
            ("template holds '4'", dict(templates=(t._replace(num_parallel="4"),))),
            ("broadcast flags", dict(templates=(t._replace(broadcast=(2,)),))),
            ("graph output 0 is", dict(outputs=((out_spec[0], out_spec[1]
                                                 + (("flip", (0,)),)),))),
            ("graph outputs holds '4'", dict(outputs=((out_spec[0], (("reshape", ("4",)),)),))),
            ("constant's buffer id holds 1.9", dict(constants=((1.9, np.array([1])),))),
            ("the field is", dict(field=["koalabear"]))):
        evil = ComputationGraph(**{**parts, **change})
        for what in (lambda: run_computation_graph(evil, [np.arange(4)]), evil.to_bytes,
                     lambda: evil == g):
            with pytest.raises(ValueError, match="invalid computation graph: .*" + re.escape(
                    match)):
                what()
    with pytest.raises(ValueError, match=r"constant buffer 2 holds values of shape \(1, 3\)"):
        c = ctx.copy_to_device([1, 2, 3])
        (d,) = ctx.call_kernel(affine, 3, c)
        h = ctx.generate_computation_graph([a], [d])
        ComputationGraph(h.field, h.kernels, h.compiled_kernels, h.buffer_points, h.templates,
                         h.inputs, h.outputs, [(2, np.array([[1, 2, 3]]))],
                         h.commitments).to_bytes()


def test_crafted_counts_shapes_and_sizes_are_refused(monkeypatch):
    """Checksum-valid files whose numbers disagree: refused by validation, not
    an IndexError/KeyError (or a 2 TiB allocation) at replay."""
    ctx = Context()
    a = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    (b,) = ctx.call_kernel(add_2, 16, a)
    g = ctx.generate_computation_graph([a], [b])
    t = g.templates[0]
    parts = dict(field=g.field, kernels=g.kernels, compiled_kernels=g.compiled_kernels,
                 buffer_points=g.buffer_points, templates=g.templates, inputs=g.inputs,
                 outputs=g.outputs, constants=g.constants, commitments=g.commitments)

    def refused(match, **change):
        evil = ComputationGraph(**{**parts, **change})
        with pytest.raises(ValueError, match=match):
            ComputationGraph.from_bytes(evil.to_bytes())

    for n in (3, 8, 15):  # the output buffer holds 16 instances
        refused(r"template 0 writes \d+ instances", templates=(t._replace(num_parallel=n),))
    bid = g.outputs[0][0]
    refused("view of 65 dimensions",
            outputs=((bid, (("reshape", (16,)), ("reshape", (1,) * 64 + (16,)))),))
    # parameter dimensions whose product wraps int64 (2**21 cubed = 2**63)
    ir = g.kernels[0]
    name, kind, _ = ir.params[0]
    wrapped = ir._replace(params=((name, kind, (1 << 21,) * 3),) + tuple(ir.params[1:]))
    refused(r"parameter `x` has shape", kernels=(wrapped,))
    from zorch_nb.graph_format import _MAX_NDIM  # NumPy's limit: 64, or 32 before 2.0
    with pytest.raises(ValueError, match=f"at most {_MAX_NDIM} dimensions"):
        a.reshape((1,) * 64 + (32,))
    # a kernel with no Out/InOut parameter (which @kernel refuses): replay
    # had nothing to write and failed on an IndexError
    c = g.compiled_kernels[0]
    refused("kernel 0 has no Out or InOut parameter",
            kernels=(ir._replace(params=ir.params[:1], outputs=()),),
            compiled_kernels=(c._replace(out_layouts=()),) + tuple(g.compiled_kernels[1:]),
            buffer_points=g.buffer_points[:1], templates=(t._replace(outputs=()),),
            commitments=g.commitments[:1])
    # a replay that cannot fit in memory says so before allocating anything
    from zorch_nb import graph as graph_mod
    monkeypatch.setattr(graph_mod._backend, "physical_memory", lambda: 100)
    with pytest.raises(MemoryError, match=r"needs 0\.0 GiB for its 2 padded buffers"):
        run_computation_graph(g, [np.arange(32).reshape(16, 2)])
    monkeypatch.undo()
    # ... and in a container its memory limit is the machine's memory (the
    # OOM killer ends a process past it; the host's RAM was read)
    monkeypatch.setattr(graph_mod._backend, "cgroup_memory_limits",
                        lambda root="/": [(3 << 30, 0), (100, 7)])
    cap = graph_mod._backend._memory_cap  # (read once per process: again here)
    cap.cache_clear()
    try:
        assert graph_mod._backend.physical_memory() == 100
        with pytest.raises(MemoryError, match=r"needs 0\.0 GiB .* this machine has 0\.0 GiB"):
            run_computation_graph(g, [np.arange(32).reshape(16, 2)])
    finally:
        monkeypatch.undo()
        cap.cache_clear()


def test_output_layout_must_write_every_padded_slot_once():
    """An output buffer longer than its writer's slots: replay read np.empty memory."""
    @kernel
    def mul_add(x: In[2], y: In[()], out: Out[()]):
        out[()] = x[0] * y[()] + x[1]

    ctx = Context()
    a, k = ctx.copy_to_device(np.arange(8).reshape(4, 2)), ctx.copy_to_device(3)
    (r,) = ctx.call_kernel(mul_add, 4, a, k)
    g = ctx.generate_computation_graph([a, k], [r])
    points = list(g.buffer_points)
    points[g.outputs[0][0]] = (1, 8)  # 8 slots, the 4 instances write 4
    evil = ComputationGraph(g.field, g.kernels, g.compiled_kernels, tuple(points), g.templates,
                            g.inputs, ((g.outputs[0][0], (("reshape", (8,)),)),), g.constants,
                            g.commitments)
    # (refused by the instance count now, which runs first; _tiles below)
    with pytest.raises(ValueError, match="does not write every slot of buffer|writes 4 "
                                         r"instances of \[\] into buffer \d+ of 8 elements"):
        ComputationGraph.from_bytes(evil.to_bytes())


def test_tiling_check_matches_enumeration():
    """graph_format._tiles against brute force on random small layouts."""
    from zorch_nb import graph_format as fmt
    rng = np.random.default_rng(7)
    seen = {True: 0, False: 0}
    for _ in range(3000):
        par = [(int(rng.integers(0, 3)), int(rng.choice([0, 1, 2, 3, 4, 6, 8]))) for _ in
               range(int(rng.integers(0, 3)))]
        m = int(rng.integers(1, 5))
        if rng.random() < 0.5:  # often a regular block or stride, sometimes anything
            offsets = list(range(0, m * int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4])))[:m])
        else:
            offsets = [int(v) for v in rng.integers(0, 12, size=m)]
        n = len(offsets) << sum(lg for lg, _ in par)
        hits = np.zeros(64 + n, dtype=np.int64)
        for digits in np.ndindex(*[1 << lg for lg, _ in par]):
            base = sum(d * st for d, (_, st) in zip(digits, par))
            for o in offsets:
                hits[base + o] += 1
        want = bool((hits[:n] == 1).all() and hits[n:].sum() == 0)
        assert fmt._tiles(offsets, par, n) == want, (offsets, par, n)
        seen[want] += 1
    assert min(seen.values()) > 200  # both outcomes exercised

def test_parallel_3x5_and_1x3x5_share_one_32_slot_buffer():
    ctx = Context()
    vals = np.arange(15).reshape(3, 5) * 7 + 1
    x = ctx.copy_to_device(vals)
    (rows,) = ctx.call_kernel(row_sum_5, 3, x)
    (total,) = ctx.call_kernel(sum_3x5, 1, x.reshape([1, 3, 5]))
    np.testing.assert_array_equal(ctx.copy_to_host(rows), vals.sum(axis=1))
    np.testing.assert_array_equal(ctx.copy_to_host(total), [vals.sum()])
    g = ctx.generate_computation_graph([x], [rows, total])
    assert g.buffer_points[x.buffer_id] == (1, 3, 15)
    assert g.buffer_dims[x.buffer_id] == (3, 5)
    assert g.padded_lengths[x.buffer_id] == 32
    users = [t for t in g.templates if x.buffer_id in t.inputs]
    assert len(users) == 2  # both calls read buffer 0: one buffer, one commitment
    (r, t), commitments, padded = run_computation_graph(g, [vals], padded=True)
    assert commitments[x.buffer_id] == g.commitments[x.buffer_id]
    assert padded[x.buffer_id].shape == (4, 8)
    np.testing.assert_array_equal(r, vals.sum(axis=1))
    np.testing.assert_array_equal(t, [vals.sum()])


def test_3x5_with_5x3_is_refused():
    ctx = Context()
    x = ctx.copy_to_device(np.arange(15).reshape(3, 5))
    ctx.call_kernel(row_sum_5, 3, x)
    with pytest.raises(ValueError, match=r"illegal shape operation.*\[3, 5\].*\[5, 3\]"):
        ctx.call_kernel(row_sum_3, 5, x.reshape([5, 3]))
    # The refused call left nothing behind: the buffer keeps its [3, 5] layout.
    (y,) = ctx.call_kernel(row_sum_5, 3, x)
    g = ctx.generate_computation_graph([x], [y])
    assert len(g.templates) == 2 and g.buffer_points[0] == (1, 3, 15)


def test_two_transposed_regroupings_name_their_steps_and_the_remedy_works():
    """Two views of one buffer that need different layouts: the refusal shows
    each view as the steps that made it (it used to show an internal
    regrouping, "[12, 2] (transposed, over [3, 2, 4])" for a [2, 3, 4]
    buffer) and says how to proceed -- for an input, its data copied in a
    second time; for a call's output, a copy by a one-instance kernel --
    and each remedy is then accepted and replays right."""
    @kernel
    def pair_sum(x: In[2], out: Out[()]):
        out[()] = x[0] + x[1]

    @kernel
    def double(x: In[()], out: Out[()]):
        out[()] = x[()] + x[()]

    @kernel
    def regroup(x: In[24], out: Out[12, 2]):
        # out = x.reshape(2, 3, 4).transpose(2, 1, 0).reshape(12, 2), one instance
        order = [(i * 3 + j) * 4 + k for k in range(4) for j in range(3) for i in range(2)]
        for m, src in enumerate(order):
            out[m // 2, m % 2] = x[src]

    def views(h):
        h = h.reshape(2, 3, 4)
        return h.transpose(2, 0, 1).reshape(12, 2), h.transpose(2, 1, 0).reshape(12, 2)

    vals = np.arange(24).reshape(2, 3, 4)
    new = vals + 7
    want = [v.sum(axis=1) for v in (new.transpose(2, 0, 1).reshape(12, 2),
                                    new.transpose(2, 1, 0).reshape(12, 2))]
    # an input: copied in twice
    ctx = Context()
    a = ctx.copy_to_device(vals)
    (first,) = ctx.call_kernel(pair_sum, 12, views(a)[0])
    with pytest.raises(ValueError, match=re.escape(
            "buffer 0 is used as [12, 2] (`.transpose(2, 0, 1).reshape(12, 2)` of its [2, 3, 4]) "
            "and as [12, 2] (`.transpose(2, 1, 0).reshape(12, 2)` of its [2, 3, 4]);")
            + r".*copy it to the device a second time \(copy_to_device: one more input "
              r"of the graph\)"):
        ctx.call_kernel(pair_sum, 12, views(a)[1])
    a2 = ctx.copy_to_device(vals)
    (second,) = ctx.call_kernel(pair_sum, 12, views(a2)[1])
    g = ctx.generate_computation_graph([a, a2], [first, second])
    (r1, r2), _ = run_computation_graph(g, [new, new])
    np.testing.assert_array_equal(r1, want[0])
    np.testing.assert_array_equal(r2, want[1])
    # a call's output: copied by a kernel of one instance
    ctx = Context()
    a = ctx.copy_to_device(vals // 2)
    (c,) = ctx.call_kernel(double, 24, a.reshape(24))
    (first,) = ctx.call_kernel(pair_sum, 12, views(c)[0])
    with pytest.raises(ValueError, match=r"buffer 1 is used as .*a kernel of one instance "
                                         r"\(num_parallel=1\) that takes the buffer flat"):
        ctx.call_kernel(pair_sum, 12, views(c)[1])
    (copy,) = ctx.call_kernel(regroup, 1, c.reshape(-1))
    (second,) = ctx.call_kernel(pair_sum, 12, copy.reshape(12, 2))
    g = ctx.generate_computation_graph([a], [first, second])
    (r1, r2), _ = run_computation_graph(g, [new])
    np.testing.assert_array_equal(r1, 2 * want[0])
    np.testing.assert_array_equal(r2, 2 * want[1])


def test_recording_follows_a_kernels_current_ir():
    """What recording reads of a kernel's IR (its parameters, output shapes,
    the eager program) is worked out once per kernel and kept on it; a kernel
    whose ``ir`` attribute is replaced records the new IR, not the kept one."""
    @kernel
    def twice(x: In[()], out: Out[()]):
        out[()] = x[()] + x[()]

    @kernel
    def pair(x: In[()], out: Out[2]):
        out[0] = x[()] * x[()]
        out[1] = x[()] + 1

    ctx = Context()
    x = ctx.copy_to_device(np.arange(5))
    (a,) = ctx.call_kernel(twice, 5, x)
    twice.ir = pair.ir
    (b,) = ctx.call_kernel(twice, 5, x)
    assert b.shape == (5, 2)
    np.testing.assert_array_equal(ctx.copy_to_host(a), 2 * np.arange(5))
    np.testing.assert_array_equal(ctx.copy_to_host(b),
                                  np.stack([np.arange(5) ** 2, np.arange(5) + 1], axis=1))


def test_call_clashing_with_itself_is_refused_and_not_recorded():
    # 6 instances split as 2 x 3 by one operand and 3 x 2 by the other: no
    # layout can serve the call, so it is refused when made, not when a graph
    # is built (which would leave every later graph of this Context blocked).
    ctx = Context()
    x = ctx.copy_to_device(np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match=r"illegal shape operation.*\[2, 3\].*\[3, 2\].*"
                                         r"not recorded"):
        ctx.call_kernel(add_xy, 6, x.reshape(6), x.T.reshape(6))
    (same,) = ctx.call_kernel(add_xy, 6, x.T.reshape(6), x.T.reshape(6))
    g = ctx.generate_computation_graph([x], [same])
    assert len(g.templates) == 1
    (out,), _ = run_computation_graph(g, [np.arange(6).reshape(2, 3)])
    np.testing.assert_array_equal(out, 2 * np.arange(6).reshape(2, 3).T.reshape(6))


def test_call_making_an_earlier_call_impossible_is_refused():
    """add(a, b) over 6 instances, then a used as 2 x 3 and b as 3 x 2: the third
    call splits add's instances both ways.  It used to be recorded and every later
    graph of the Context failed, blaming call 0; now it is refused when made,
    named, and the Context still builds its graph."""
    @kernel
    def s3(x: In[3], out: Out[()]):
        out[()] = x[0] + x[1] + x[2]

    @kernel
    def s2(x: In[2], out: Out[()]):
        out[()] = x[0] * x[1]

    ctx = Context()
    a, b = ctx.copy_to_device(np.arange(6)), ctx.copy_to_device(np.arange(6) + 10)
    (c,) = ctx.call_kernel(add_xy, 6, a, b)
    (d,) = ctx.call_kernel(s3, 2, a.reshape(2, 3))
    with pytest.raises(ValueError, match=r"illegal shape operation: buffer 1 used as \[3, 2\] "
                                         r"clashes with the layout the recorded calls fixed "
                                         r"for it \(split points \[1, 2, 6\], last refined by "
                                         r"call 1 \(kernel `s3`\), through calls \[0\]\); the "
                                         r"call was not recorded"):
        ctx.call_kernel(s2, 3, b.reshape(3, 2))
    (e,) = ctx.call_kernel(s3, 2, b.reshape(2, 3))  # the compatible split is fine
    g = ctx.generate_computation_graph([a, b], [c, d, e])
    assert len(g.templates) == 3
    outs, _ = run_computation_graph(g, [np.arange(6), np.arange(6) + 10])
    np.testing.assert_array_equal(outs[0], 2 * np.arange(6) + 10)
    np.testing.assert_array_equal(outs[2], (np.arange(6) + 10).reshape(2, 3).sum(axis=1))
    # the points kept call by call are the fixed point the graph is built from
    assert [list(buf.fixed) for buf in ctx._buffers] == [list(p) for p in ctx._propagate()]


def test_clash_through_many_calls_names_the_refining_call_briefly():
    """The same clash with add(a, b) recorded 40 times: the message listed every
    call through which the points reached b (29,062 characters at 5,000) and
    not the call that set them; now the ends of the list and that call."""
    @kernel
    def s3(x: In[3], out: Out[()]):
        out[()] = x[0] + x[1] + x[2]

    ctx = Context()
    a, b = ctx.copy_to_device(np.arange(6)), ctx.copy_to_device(np.arange(6) + 10)
    for _ in range(40):
        ctx.call_kernel(add_xy, 6, a, b)
    ctx.call_kernel(s3, 2, a.reshape(2, 3))
    with pytest.raises(ValueError) as info:
        ctx.call_kernel(s3, 2, b.reshape(3, 2).T.reshape(2, 3))
    message = str(info.value)
    assert ("(split points [1, 2, 6], last refined by call 40 (kernel `s3`), through calls "
            "[0, 1, 2, ..., 38, 39] (40 calls)); the call was not recorded") in message
    assert len(message) < 500  # (with the view's steps and the remedy: 469)


def test_a_clash_after_an_interrupted_call_names_the_call_that_refined_the_points():
    """``last refined by`` names the call whose recording changed the buffer's
    split points, not a call whose recording was interrupted: the rollback
    restores the earlier call (the rolled-back index names no call, or a
    later one).  Eight calls are listed whole, nine by their ends and count."""
    from zorch_nb.graph import _call_list

    @kernel
    def s2(x: In[2], out: Out[()]):
        out[()] = x[0] * x[1]

    @kernel
    def s3(x: In[3], out: Out[()]):
        out[()] = x[0] + x[1] + x[2]

    @kernel
    def s4(x: In[4], out: Out[()]):
        out[()] = x[0] + x[3]

    class Interrupted(list):
        def append(self, call):
            raise KeyboardInterrupt  # "Ctrl-C" as the call is committed

    ctx = Context()
    a, b = ctx.copy_to_device(np.arange(12)), ctx.copy_to_device(np.arange(12) + 5)
    ctx.call_kernel(add_xy, 12, a, b)
    ctx.call_kernel(s2, 6, a.reshape(6, 2))  # call 1 splits a (and b, through add) as 6 x 2
    ctx._calls = Interrupted(ctx._calls)
    with pytest.raises(KeyboardInterrupt):
        ctx.call_kernel(s4, 3, a.reshape(3, 4))  # would split both further, as 3 x 2 x 2
    ctx._calls = list(ctx._calls)
    assert [list(buf.fixed) for buf in ctx._buffers[:2]] == [[1, 6, 12]] * 2
    with pytest.raises(ValueError, match=r"split points \[1, 6, 12\], last refined by call 1 "
                                         r"\(kernel `s2`\), through calls \[0\]\)"):
        ctx.call_kernel(s3, 4, b.reshape(4, 3))
    assert _call_list(range(8)) == "[0, 1, 2, 3, 4, 5, 6, 7]"
    assert _call_list(range(9)) == "[0, 1, 2, ..., 7, 8] (9 calls)"


def test_padding_repeats_last_element_and_row():
    ctx = Context()
    vals = np.arange(15).reshape(3, 5) + 100
    x = ctx.copy_to_device(vals)
    (rows,) = ctx.call_kernel(row_sum_5, 3, x)
    g = ctx.generate_computation_graph([x], [rows])
    _, _, padded = run_computation_graph(g, [vals], padded=True)
    px = padded[x.buffer_id]
    expected = vals[np.minimum(np.arange(4), 2)][:, np.minimum(np.arange(8), 4)]
    np.testing.assert_array_equal(px, expected)
    assert (px[3] == px[2]).all() and (px[:, 5:] == px[:, 4:5]).all()
    # Outputs are padded the same way: the 4th instance repeats the 3rd.
    pr = padded[rows.buffer_id]
    np.testing.assert_array_equal(pr, np.append(vals.sum(axis=1), vals[2].sum()))


@kernel
def _pair_add(a: In[2], b: In[2], out: Out[2]):
    out[0] = a[0] + b[0]
    out[1] = a[1] * b[1]


@kernel
def _block_sum(a: In[3, 2], out: Out[()]):
    out[()] = a[0, 0] + a[1, 0] + a[2, 0] + a[0, 1] + a[1, 1] + a[2, 1]


def test_parallel_boundary_splits_propagate_to_a_fixed_point():
    # x is also used as [2, 3, 2] (instances split 2 x 3); y only as [6, 2].  The
    # call over both must give y the same instance split, or the padded
    # instances of x (2 x 4) and y (8) would not line up.
    xv = np.arange(12).reshape(6, 2) + 1
    yv = np.arange(12).reshape(6, 2) * 3 + 5
    ctx = Context()
    x = ctx.copy_to_device(xv)
    y = ctx.copy_to_device(yv)
    (s,) = ctx.call_kernel(_block_sum, 2, x.reshape([2, 3, 2]))
    (z,) = ctx.call_kernel(_pair_add, 6, x, y)
    g = ctx.generate_computation_graph([x, y], [s, z])
    assert g.buffer_points[x.buffer_id] == (1, 2, 6, 12)
    assert g.buffer_points[y.buffer_id] == (1, 2, 6, 12)  # propagated
    assert g.buffer_points[z.buffer_id] == (1, 2, 6, 12)  # and to the output
    expect = np.stack([xv[:, 0] + yv[:, 0], xv[:, 1] * yv[:, 1]], axis=1)
    np.testing.assert_array_equal(ctx.copy_to_host(z), expect)
    (os_, oz), commitments = run_computation_graph(g, [xv, yv])
    np.testing.assert_array_equal(oz, expect)
    np.testing.assert_array_equal(os_, xv.reshape(2, 6).sum(axis=1))
    assert commitments == g.commitments


@pytest.mark.parametrize("order", ["split_first", "split_after"])
def test_a_call_seen_changing_nothing_before_still_propagates_new_splits(order):
    """A call whose views over buffers of the same split points changed nothing
    is not propagated again.  Seen before over unsplit buffers, `_pair_add(x, y)`
    after x was split 2 x 3 must still split y (the points are part of that
    memo); seen before as a no-op, `_block_sum` splitting x must still reach
    the earlier `_pair_add(x, y)` (a call that changes a buffer is propagated)."""
    xv = np.arange(12).reshape(6, 2) + 1
    yv = np.arange(12).reshape(6, 2) * 3 + 5
    ctx = Context()
    u, v = ctx.copy_to_device(xv + 7), ctx.copy_to_device(yv + 7)
    for _ in range(2):  # the second time: a call that changes nothing
        if order == "split_first":
            ctx.call_kernel(_pair_add, 6, u, v)
        else:
            ctx.call_kernel(_block_sum, 2, u.reshape(2, 3, 2))
    x, y = ctx.copy_to_device(xv), ctx.copy_to_device(yv)
    if order == "split_first":
        (s,) = ctx.call_kernel(_block_sum, 2, x.reshape(2, 3, 2))
        (z,) = ctx.call_kernel(_pair_add, 6, x, y)
    else:
        (z,) = ctx.call_kernel(_pair_add, 6, x, y)
        (s,) = ctx.call_kernel(_block_sum, 2, x.reshape(2, 3, 2))
    g = ctx.generate_computation_graph([x, y], [s, z])
    for h in (x, y, z):
        assert g.buffer_points[h.buffer_id] == (1, 2, 6, 12)
    new_x, new_y = xv * 5 + 2, yv + 11
    (got_s, got_z), commitments = run_computation_graph(g, [new_x, new_y])
    np.testing.assert_array_equal(got_s, new_x.reshape(2, 6).sum(axis=1))
    np.testing.assert_array_equal(got_z, np.stack([new_x[:, 0] + new_y[:, 0],
                                                   new_x[:, 1] * new_y[:, 1]], axis=1))
    assert run_computation_graph(g, [xv, yv])[1] == g.commitments


def test_view_histories_fold_and_keep_numpy_semantics():
    """Each handle held its whole view history: alternating reshape(2, 4) and
    reshape(8) 21,000 times took 12 s and 1.8 GB.  Reshapes of reshapes and
    transposes of transposes fold into one step (the identity transpose and a
    reshape to the shape it starts from into none); random chains of both
    still give NumPy's views, eagerly and as graph outputs replayed."""
    ctx = Context()
    h = a = ctx.copy_to_device(np.arange(8))
    for _ in range(1000):
        h = h.reshape(2, 4).reshape(8)
    assert h._history == (("reshape", (8,)),)  # back to the buffer's shape: no step
    assert len(h.reshape(2, 4).T.T._history) == 2  # T.T: no step
    # a reshape to the view's own shape is no step either, so transposes around
    # it meet and cancel: h.T.reshape(4, 4) 32,000 times held 64,001 steps (12 s)
    h = ctx.copy_to_device(np.arange(16).reshape(4, 4))
    for _ in range(1001):
        h = h.T.reshape(4, 4)
    assert h._history == (("reshape", (4, 4)), ("transpose", (1, 0)))
    assert h.reshape(16).reshape(4, 4)._history == h._history
    np.testing.assert_array_equal(ctx.copy_to_host(h), np.arange(16).reshape(4, 4).T)
    rng = np.random.default_rng(5)
    for trial in range(40):
        ctx = Context()
        values = np.arange(24).reshape(2, 3, 4)
        h = a = ctx.copy_to_device(values)
        want = values
        for _ in range(int(rng.integers(1, 12))):
            if rng.random() < 0.5:
                shape = [(24,), (4, 6), (2, 3, 4), (3, 2, 2, 2), (6, 4), (1, 24)][
                    int(rng.integers(6))]
                h, want = h.reshape(*shape), want.reshape(shape)
            else:
                axes = tuple(int(v) for v in rng.permutation(want.ndim))
                h, want = h.transpose(*axes), want.transpose(axes)
        np.testing.assert_array_equal(ctx.copy_to_host(h), want, err_msg=str(trial))
        (c,) = ctx.call_kernel(add_2, 12, a.reshape(12, 2))
        g = ctx.generate_computation_graph([a], [h, c])
        (got, _), _ = run_computation_graph(g, [values + 1])
        np.testing.assert_array_equal(got, want + 1, err_msg=str(trial))


def test_reshapes_after_a_transpose_fold_against_the_transposed_shape():
    """A reshape folded into the reshape before it is no step when it returns
    to the shape *before* that reshape, which a transpose in between changes:
    ``b.T.reshape(6).reshape(2, 3)`` of a 2 x 3 buffer is b.T's words read as
    2 x 3.  Taking the transpose as keeping the shape dropped both reshapes
    and left a 3 x 2 history under a 2 x 3 handle (wrong values eagerly and
    replayed).  Every permutation and target, against NumPy; an identity
    transpose is no step."""
    from zorch_nb import graph as G

    values = np.arange(24).reshape(2, 3, 4)
    ctx = Context()
    a = ctx.copy_to_device(values)
    assert a.transpose(0, 1, 2).history == a.history  # identity transpose: no step
    assert a.reshape(4, 6).transpose(0, 1).history == a.reshape(4, 6).history
    for axes in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]:
        for target in [(2, 3, 4), (4, 3, 2), (3, 2, 4), (4, 2, 3), (2, 12), (24,)]:
            h = a.transpose(*axes).reshape(24).reshape(*target)
            want = values.transpose(axes).reshape(target)
            assert h.shape == target and G._history_shape(h.history) == target, (axes, target)
            np.testing.assert_array_equal(ctx.copy_to_host(h), want, err_msg=f"{axes} {target}")
    small = np.arange(6).reshape(2, 3)
    b = ctx.copy_to_device(small)
    h = b.T.reshape(6).reshape(2, 3)
    assert h.history == (("reshape", (2, 3)), ("transpose", (1, 0)), ("reshape", (2, 3)))
    (c,) = ctx.call_kernel(add_2, 3, b.reshape(3, 2))
    g = ctx.generate_computation_graph([b], [h, c])
    (got, _), _ = run_computation_graph(g, [small + 1])
    np.testing.assert_array_equal(got, small.T.reshape(2, 3) + 1)


def test_views_reshape_and_transpose_honoured():
    ctx = Context()
    vals = np.arange(15).reshape(3, 5)
    x = ctx.copy_to_device(vals)
    t = x.transpose()
    assert t.shape == (5, 3) and t.buffer_id == x.buffer_id
    np.testing.assert_array_equal(ctx.copy_to_host(t), vals.T)
    np.testing.assert_array_equal(ctx.copy_to_host(t.reshape(15)), vals.T.reshape(15))
    np.testing.assert_array_equal(ctx.copy_to_host(x.reshape(5, 3).transpose(1, 0)),
                                  vals.reshape(5, 3).T)
    assert t.history == (("reshape", (3, 5)), ("transpose", (1, 0)))
    # A transposed view in a call: column sums of the [3, 5] buffer.
    (cols,) = ctx.call_kernel(row_sum_3, 5, t)
    np.testing.assert_array_equal(ctx.copy_to_host(cols), vals.sum(axis=0))
    (rows,) = ctx.call_kernel(row_sum_5, 3, x)
    g = ctx.generate_computation_graph([x], [cols, rows, t])
    new = np.arange(15).reshape(3, 5) ** 2
    (c, r, tt), commitments = run_computation_graph(g, [new])
    np.testing.assert_array_equal(c, new.sum(axis=0))
    np.testing.assert_array_equal(r, new.sum(axis=1))
    np.testing.assert_array_equal(tt, new.T)
    (c, r, tt), commitments = run_computation_graph(g, [vals])
    assert commitments == g.commitments
    # NumPy's argument conventions: NumPy integers, an array of dims, one -1,
    # negative axes
    for shape in ((np.int64(5), np.int64(3)), (np.array([5, 3]),), (-1, 3), ((5, -1),)):
        np.testing.assert_array_equal(ctx.copy_to_host(x.reshape(*shape)), vals.reshape(5, 3))
    assert x.reshape(np.prod(x.shape)).shape == (15,)
    assert x.transpose(-1, 0).history == t.history
    with pytest.raises(ValueError, match="`ints` must be a rectangular"):
        ctx.copy_to_device([[1, 2], [3]])
    with pytest.raises(ValueError, match="reduce=True"):  # the hint names a real keyword
        ctx.copy_to_device([P])
    assert ctx.copy_to_host(ctx.copy_to_device([P + 2, -1], reduce=True)).tolist() == [2, P - 1]
    for shape, exc in (((-1, -1), ValueError), ((4, -1), ValueError), ((0, 15), ValueError),
                       ((2.5, 6), TypeError), ((True, 15), TypeError)):
        with pytest.raises(exc, match="`shape` must be|is not a multiple of 4"):
            x.reshape(*shape)
    # A reshape of a transposed view that needs a copy is fine on the host but
    # refused in a call.
    odd = t.reshape(3, 5)
    np.testing.assert_array_equal(ctx.copy_to_host(odd), vals.T.reshape(3, 5))
    with pytest.raises(ValueError, match=r"illegal shape operation.*would need a copy; regroup "
                                         r"it in a kernel instead: one instance "
                                         r"\(num_parallel=1\) taking the view before that "
                                         r"reshape whole"):
        ctx.call_kernel(row_sum_5, 3, odd)

    @kernel
    def regroup(x: In[5, 3], out: Out[3, 5]):
        for i in range(15):
            out[i // 5, i % 5] = x[i // 3, i % 3]
    (own,) = ctx.call_kernel(regroup, 1, t)  # what the message says to do
    np.testing.assert_array_equal(ctx.copy_to_host(ctx.call_kernel(row_sum_5, 3,
                                                                   own.reshape(3, 5))[0]),
                                  vals.T.reshape(3, 5).sum(axis=1))
    # ... and reshaped back it is the transposed view again, accepted (its
    # folded history is t's; the way through the copy kept it refused, naming
    # a reshape that history no longer holds), here and through a 3-d buffer
    back = odd.reshape(5, 3)
    assert back.history == t.history and back._view == t._view
    np.testing.assert_array_equal(ctx.copy_to_host(ctx.call_kernel(row_sum_3, 5, back)[0]),
                                  vals.sum(axis=0))
    cube = ctx.copy_to_device(np.arange(30).reshape(5, 2, 3))
    flat = cube.transpose(0, 2, 1).reshape(30)
    for way in (cube.transpose(0, 2, 1).reshape(5, 2, 3).reshape(30),
                cube.transpose(0, 2, 1).reshape(6, 5).T.T.reshape(30),
                cube.transpose(0, 2, 1).reshape(6, 5).reshape(3, 2, 5).T.T.reshape(2, 15)
                .T.T.reshape(30)):
        assert way._view.irregular == "" and way._view == flat._view
        np.testing.assert_array_equal(ctx.copy_to_host(way), ctx.copy_to_host(flat))
        np.testing.assert_array_equal(ctx.copy_to_host(ctx.call_kernel(add_xy, 30, way, way)[0]),
                                      2 * np.arange(30).reshape(5, 2, 3).transpose(0, 2, 1)
                                      .reshape(30))
    # ... but one NumPy does as a view is accepted (was refused: the base axes
    # that the transpose keeps adjacent and in order act as one axis), and so
    # are the reshapes of that view
    cube = np.arange(12).reshape(2, 3, 2)
    y = ctx.copy_to_device(cube)
    v = y.transpose(2, 0, 1).reshape(2, 3, 2)
    assert np.shares_memory(cube, cube.transpose(2, 0, 1).reshape(2, 3, 2))
    assert not v._view.irregular
    (sums,) = ctx.call_kernel(row_sum_3, 4, v.reshape(4, 3))
    want = lambda c: c.transpose(2, 0, 1).reshape(4, 3).sum(axis=1) % P
    np.testing.assert_array_equal(ctx.copy_to_host(sums), want(cube))
    g = ctx.generate_computation_graph([y], [sums])
    new = cube ** 3 + 5
    np.testing.assert_array_equal(run_computation_graph(g, [new])[0][0], want(new))


def test_views_take_numpys_most_dimensions_and_every_negative_axis():
    from zorch_nb.graph_format import _MAX_NDIM
    ctx = Context()
    vals = np.arange(24).reshape(2, 3, 4)
    x = ctx.copy_to_device(vals)
    deep = (1,) * (_MAX_NDIM - 1) + (24,)  # NumPy's most dimensions (one more is refused)
    assert ctx.copy_to_host(x.reshape(deep)).shape == deep
    for axes in ((-3, -1, -2), (-1, -3, 1), (2, -2, -3), (-3, -2, -1)):
        h = x.transpose(*axes)
        assert h.shape == vals.transpose(axes).shape
        np.testing.assert_array_equal(ctx.copy_to_host(h), vals.transpose(axes))
    for axes in ((-4, 1, 2), (3, 1, 0)):
        with pytest.raises(ValueError, match=r"`axes` must be a permutation of \[0, 1, 2\]"):
            x.transpose(*axes)


def test_broadcast_matrix_operand_over_64_rows():
    @kernel
    def row_times_matrix(v: In[5], m: In[5, 6], out: Out[6]):
        for j in range(6):
            s = v[0] * m[0, j]
            for i in range(1, 5):
                s = s + v[i] * m[i, j]
            out[j] = s

    rng = np.random.default_rng(1)
    rows = rng.integers(0, P, size=(64, 5))
    mat = rng.integers(0, P, size=(5, 6))
    expect = (rows.astype(object) @ mat.astype(object)) % P
    ctx = Context()
    v = ctx.copy_to_device(rows)
    m = ctx.copy_to_device(mat)
    (out,) = ctx.call_kernel(row_times_matrix, 64, v, m)
    np.testing.assert_array_equal(ctx.copy_to_host(out).astype(object), expect)
    g = ctx.generate_computation_graph([v, m], [out])
    assert g.templates[0].broadcast == (False, True)
    assert g.padded_lengths[m.buffer_id] == 8 * 8
    rows2 = rng.integers(0, P, size=(64, 5))
    mat2 = rng.integers(0, P, size=(5, 6))
    (o,), _ = run_computation_graph(g, [rows2, mat2])
    np.testing.assert_array_equal(o.astype(object), (rows2.astype(object) @ mat2) % P)


def test_assert_eq_fails_at_call_time_and_at_replay():
    @kernel
    def checked_square(x: In[2], out: Out[()]):
        assert_eq(x[0] * x[0], x[1])
        out[()] = x[1] + 1

    ctx = Context()
    good = np.array([[2, 4], [3, 9], [5, 25]])
    x = ctx.copy_to_device(good)
    (y,) = ctx.call_kernel(checked_square, 3, x)
    np.testing.assert_array_equal(ctx.copy_to_host(y), [5, 10, 26])
    bad = ctx.copy_to_device(np.array([[2, 4], [3, 10], [5, 25]]))
    with pytest.raises(ValueError, match=r"assert_eq failed in kernel `checked_square`.*"
                                         r"assert_eq\(x\[0\] \* x\[0\], x\[1\]\).*instance 1"):
        ctx.call_kernel(checked_square, 3, bad)
    g = ctx.generate_computation_graph([x], [y])
    assert len(g.templates) == 1  # the failed call was not recorded
    # the replay names both sides too (recomputed on the host for that instance)
    with pytest.raises(ValueError, match=r"assert_eq failed in kernel `checked_square`.* at "
                                         r"instance 2 of 3 .*: 25 != 24$"):
        run_computation_graph(g, [np.array([[2, 4], [3, 9], [5, 24]])])


def test_replay_assert_names_the_users_instance_not_the_padded_one():
    @kernel
    def is_one(x: In[()], out: Out[()]):
        assert_eq(x[()] * 0 + 1, x[()])
        out[()] = x[()]

    ctx = Context()
    x = ctx.copy_to_device(np.ones(15, dtype=np.int64))
    (y,) = ctx.call_kernel(is_one, 15, x)
    ctx.call_kernel(row_sum_5, 3, x.reshape(3, 5))  # instances split 3 x 5, padded 4 x 8
    g = ctx.generate_computation_graph([x], [y])
    for t in (5, 9, 14):
        bad = np.ones(15, dtype=np.int64)
        bad[t] = 2
        with pytest.raises(ValueError, match=rf"at instance {t} of 15 \(call 0; padded "
                                             rf"instance {8 * (t // 5) + t % 5} of 32\): 1 != 2$"):
            run_computation_graph(g, [bad])
        with pytest.raises(ValueError, match=rf"at instance {t} of 15"):  # as eagerly
            ctx.call_kernel(is_one, 15, ctx.copy_to_device(bad))


def test_eager_and_replay_name_the_same_failing_assertion_and_instance():
    """Instance 1 fails the second assertion, instance 3 the first: both runs name
    the first assertion in the kernel's order at its first failing instance
    (the replay named the first failing instance with its own first assertion)."""
    @kernel
    def two_checks(x: In[2], out: Out[()]):
        assert_eq(x[0], 1)
        assert_eq(x[1], 2)
        out[()] = x[0] + x[1]

    ctx = Context()
    x = ctx.copy_to_device(np.tile([1, 2], (5, 1)))
    (y,) = ctx.call_kernel(two_checks, 5, x)
    g = ctx.generate_computation_graph([x], [y])
    bad = np.tile([1, 2], (5, 1))
    bad[1, 1], bad[3, 0], bad[4, 0] = 7, 7, 7
    message = r"\(`assert_eq\(x\[0\], 1\)`\)\) at instance 3 of 5.*: 7 != 1$"
    with pytest.raises(ValueError, match=message):
        ctx.call_kernel(two_checks, 5, ctx.copy_to_device(bad))
    with pytest.raises(ValueError, match=message):
        run_computation_graph(g, [bad])


def test_a_kernel_name_the_format_cannot_store_is_refused_at_definition():
    """(an adversarial review) A ``__name__`` holding a lone surrogate raised a
    bare UnicodeEncodeError from the fingerprint's encoder, naming nothing."""
    def f(x: In[()], out: Out[()]):
        out[()] = x[()] + 1
    f.__name__ = "odd\ud800"
    with pytest.raises(KernelDefinitionError, match=r"kernel 'odd\\ud800': the function's "
                                                    r"__name__ must be encodable as UTF-8"):
        kernel(f)


def test_assert_eq_between_two_constants_is_decided_at_definition():
    """Two integers cannot depend on the inputs: unequal ones were recorded and
    then failed at every call; equal ones (a static check, say of a shape)
    record nothing, so the kernel has no assertion to evaluate."""
    with pytest.raises(KernelDefinitionError,
                       match=r"kernel `never`, line \d+ \(`assert_eq\(3, 4\)`\): assert_eq "
                             r"compares two different integer constants \(3 and 4\)"):
        @kernel
        def never(x: In[2], out: Out[()]):
            assert_eq(3, 4)
            out[()] = x[0]

    @kernel
    def static(x: In[2], out: Out[()]):
        assert_eq(x.shape[0], 2)
        assert_eq(np.int64(5), 5)
        out[()] = x[0]

    assert static.ir.asserts == ()
    ctx = Context()
    (y,) = ctx.call_kernel(static, 3, ctx.copy_to_device(np.arange(6).reshape(3, 2)))
    assert ctx.copy_to_host(y).tolist() == [0, 2, 4]


def test_one_evaluator_serves_every_padded_size():
    """The generated text does not depend on the outermost instance count: the
    same program recorded at other sizes (new power-of-two buckets) reuses its
    source and its compiled evaluator, and the replays stay exact."""
    from zorch_nb.kernels import graph_cpu

    @kernel
    def affine(x: In[3], out: Out[()]):
        out[()] = x[0] * x[1] + x[2] * 5

    names, misses = set(), []
    for n in (5, 100, 1000, 3):
        ctx = Context()
        a = ctx.copy_to_device(np.arange(3 * n).reshape(n, 3) % P)
        (b,) = ctx.call_kernel(affine, n, a)
        g = ctx.generate_computation_graph([a], [b])
        names.add(g.sources(0)[2])
        x = np.random.default_rng(n).integers(0, P, size=(n, 3))
        (got,), _ = run_computation_graph(g, [x])
        want = (x[:, 0].astype(object) * x[:, 1] + x[:, 2] * 5) % P
        assert got.tolist() == want.tolist()
        misses.append(graph_cpu.compile_evaluator.cache_info().misses)
    assert len(names) == 1
    assert misses[1:] == misses[:1] * 3  # (one serial form: every call here is small)
    # the outermost term's size-free mask is an identity on every valid graph
    from zorch_nb import graph_format
    assert graph_codegen.OUTER_MASK == (1 << graph_format._MAX_LOG2) - 1


def test_skeleton_keeps_everything_the_generated_text_depends_on():
    """skeleton() keys the memo of generated sources: layouts of one IR whose
    texts differ must not share a key.  Only the outermost parallel size goes
    (its mask is OUTER_MASK); inner sizes, strides and offsets or slots stay.
    (Recorded layouts tie inner sizes to strides; a graph file need not.)"""
    nodes = ((graph_codegen.OP_LOAD, 0, 0), (graph_codegen.OP_LOAD, 0, 1),
             (graph_codegen.OP_SUB, 0, 1))
    ins, out = (((1, 4), (1, 2)), (0, 1)), (((1, 2), (1, 1)), ((0, 0),))
    variants = [(ins, out),
                ((((3, 4), (1, 2)), (0, 1)), out),  # outer size: the same text
                ((((1, 4), (2, 2)), (0, 1)), out),  # inner size
                ((((1, 4), (1, 8)), (0, 1)), out),  # inner stride
                ((((1, 4), (1, 2)), (1, 0)), out),  # offsets
                (ins, (((0, 2), (2, 1)), ((0, 0),))),  # output inner size
                (ins, (((1, 2), (1, 1)), ((1, 0),)))]  # output slots
    texts = {}
    for i, o in variants:
        text = (graph_codegen.python_source("k", nodes, (), ((2,),), [i], [o]),
                graph_codegen.cuda_source("k", nodes, (), ((2,),), [i], [o]))
        key = (graph_codegen.skeleton([i]), graph_codegen.skeleton([o]))
        assert texts.setdefault(key, text) == text, (i, o)
    assert len(texts) == len(variants) - 1 == len({t for t, _ in texts.values()})


def test_replay_assert_values_match_the_eager_ones_through_every_operation():
    """The replay's failure path recomputes the failing instance on the host: every
    opcode (load, const, add, sub, mul, neg) gives the values the eager run names."""
    @kernel
    def mixed(x: In[3], out: Out[()]):
        assert_eq(-(x[0] * x[1]) + 5 - x[2], x[2] * 3)
        out[()] = x[0]

    ctx = Context(KoalaBear)
    ok = np.array([[1, 1, 1], [2, 3, 0]])
    ok[:, 2] = [(-(a * b) + 5) * pow(4, -1, KoalaBear.p) % KoalaBear.p for a, b in ok[:, :2]]
    x = ctx.copy_to_device(ok)
    (y,) = ctx.call_kernel(mixed, 2, x)
    g = ctx.generate_computation_graph([x], [y])
    bad = ok.copy()
    bad[1, 2] = 7
    lhs, rhs = (-(2 * 3) + 5 - 7) % KoalaBear.p, 21
    message = rf"at instance 1 of 2.*: {lhs} != {rhs}$"
    with pytest.raises(ValueError, match=message):
        ctx.call_kernel(mixed, 2, ctx.copy_to_device(bad))
    with pytest.raises(ValueError, match=message):
        run_computation_graph(g, [bad])


def test_layout_propagation_is_linear_in_the_calls(monkeypatch):
    """A chain of N calls whose far end splits the instances: each call is looked at a
    bounded number of times (restarting from call 0 after every change was quadratic:
    1600 calls took 15 s to build)."""
    @kernel
    def inc(x: In[()], out: Out[()]):
        out[()] = x[()] * 3 + 1

    n = 300
    ctx = Context()
    a = h = ctx.copy_to_device(np.arange(15))
    for _ in range(n):
        (h,) = ctx.call_kernel(inc, 15, h)
    looked = []
    original = Context._propagate_call
    monkeypatch.setattr(Context, "_propagate_call",
                        lambda self, *args: looked.append(1) or original(self, *args))
    ctx.call_kernel(row_sum_5, 3, h.reshape(3, 5))  # recording propagates: linearly
    assert len(looked) <= 4 * (n + 1), len(looked)
    g = ctx.generate_computation_graph([a], [h])  # (from the points kept call by call)
    assert all(pts == (1, 3, 15) for pts in g.buffer_points[:n + 1])  # reached call 0
    assert [list(b.fixed) for b in ctx._buffers] == [list(p) for p in ctx._propagate()]
    (out,), _ = run_computation_graph(g, [np.arange(15)])
    expect = np.arange(15, dtype=object)
    for _ in range(n):
        expect = (expect * 3 + 1) % P
    np.testing.assert_array_equal(out, expect.astype(np.int64))


def test_recording_many_calls_on_one_buffer_appends_to_its_users():
    """Every call reading one buffer in parallel adds itself to the buffer's users:
    appended in place -- a copy per call (a tuple) made recording quadratic in the
    calls (303 against 51 us per call at 32000 calls)."""
    ctx = Context()
    v = ctx.copy_to_device(np.arange(16)).reshape(8, 2)
    users = ctx._buffers[v.buffer_id].calls
    for _ in range(50):
        ctx.call_kernel(add_2, 8, v)
    assert ctx._buffers[v.buffer_id].calls is users and users == list(range(50))


def test_integer_powers_unroll_into_multiplications():
    @kernel
    def powers(x: In[()], out: Out[4]):
        out[0] = x[()] ** 0
        out[1] = x[()] ** 1
        out[2] = x[()] ** 7 + 5
        out[3] = (x[()] + 1) ** np.int64(13)

    assert sum(op == 4 for op, _, _ in powers.ir.nodes) == 4 + 5  # ** 7: 4, ** 13: 5
    vals = np.array([0, 1, 2, P - 1, 123456789])
    ctx = Context()
    x = ctx.copy_to_device(vals)
    (y,) = ctx.call_kernel(powers, len(vals), x)
    want = [[1, v, (pow(v, 7, P) + 5) % P, pow(v + 1, 13, P)] for v in vals.tolist()]
    assert ctx.copy_to_host(y).tolist() == want
    (out,), _ = run_computation_graph(ctx.generate_computation_graph([x], [y]), [vals])
    assert out.tolist() == want
    for bad in ("-1", "2.0", "x[()]"):
        with pytest.raises(KernelDefinitionError, match="exponent must be a Python integer"):
            scope = {"kernel": kernel, "In": In, "Out": Out}
            exec("@kernel\ndef k(x: In[()], out: Out[()]):\n    out[()] = x[()] ** " + bad,
                 scope)


def test_deep_kernels_keep_their_messages_short():
    """A value's expression text is for messages only: past a few dozen characters
    the value is named by its node (the text of a 3-word permutation grew 3x per
    round; 40 rounds ran out of memory while tracing)."""
    src = ("@kernel\n"
           "def deep(x: In[3], out: Out[()]):\n"
           "    a, b, c = x[0], x[1], x[2]\n"
           "    for r in range(12):\n"
           "        a, b, c = a * a + b * 3 + r, b * c + a, c - a * 2 + 1\n"
           "    if a:\n"
           "        pass\n")
    with pytest.raises(KernelDefinitionError, match="has no truth value") as err:
        exec(src, {"kernel": kernel, "In": In, "Out": Out})
    assert len(str(err.value)) < 400 and "<value #" in str(err.value)


def test_assert_line_is_not_part_of_a_kernels_identity():
    """The same kernel one line lower (a comment added above it) is the same kernel: a
    saved graph still loads, and the compiled evaluator is shared."""
    src = ("@kernel\n"
           "def sq(x: In[2], out: Out[()]):\n"
           "    assert_eq(x[0] * x[0], x[1])\n"
           "    out[()] = x[1]\n")
    kernels = []
    for blank in (0, 1):
        scope = {"kernel": kernel, "In": In, "Out": Out, "assert_eq": assert_eq}
        exec(compile("\n" * blank + src, f"<sq{blank}>", "exec"), scope)
        kernels.append(scope["sq"])
    assert kernels[0].ir.asserts[0][2] != kernels[1].ir.asserts[0][2]  # line 3 vs line 4
    assert kernels[0].fingerprint == kernels[1].fingerprint
    graphs = []
    for k in kernels:
        ctx = Context()
        x = ctx.copy_to_device(np.array([[2, 4], [3, 9]]))
        ctx.call_kernel(k, 2, x)
        graphs.append((ctx, ctx.generate_computation_graph([x], [])))
    graphs[1][0].load_computation_graph(graphs[0][1])
    graphs[0][0].load_computation_graph(graphs[1][1])
    # == agrees (the bytes differ only in the assertion's line text)
    assert graphs[0][1].to_bytes() != graphs[1][1].to_bytes()
    assert graphs[0][1] == graphs[1][1]


def test_kernel_with_two_outputs_and_constants_and_inout():
    @kernel
    def sum_and_scaled_diff(x: In[2], s: Out[()], d: Out[()]):
        s[()] = x[0] + x[1]
        d[()] = 3 * (x[0] - x[1]) - 1

    @kernel
    def bump(x: InOut[3]):
        x[1] = -x[1] + x[0]

    ctx = Context(field=BabyBear)
    p = BabyBear.p
    vals = np.array([[5, 2], [1, 7], [0, 0], [p - 1, 1]])
    x = ctx.copy_to_device(vals)
    s, d = ctx.call_kernel(sum_and_scaled_diff, 4, x)
    np.testing.assert_array_equal(ctx.copy_to_host(s), (vals[:, 0] + vals[:, 1]) % p)
    np.testing.assert_array_equal(ctx.copy_to_host(d),
                                  (3 * (vals[:, 0] - vals[:, 1]) - 1) % p)
    w = ctx.copy_to_device(np.array([[1, 2, 3], [4, 5, 6]]))
    (w2,) = ctx.call_kernel(bump, 2, w)
    np.testing.assert_array_equal(ctx.copy_to_host(w2), [[1, p - 1, 3], [4, p - 1, 6]])
    np.testing.assert_array_equal(ctx.copy_to_host(w), [[1, 2, 3], [4, 5, 6]])  # unchanged
    with pytest.raises(ValueError, match=r"InOut parameter cannot be broadcast$"):
        ctx.call_kernel(bump, 2, ctx.copy_to_device(np.array([1, 2, 3])))
    one = ctx.copy_to_device(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"InOut parameter cannot be broadcast \(one instance: "
                                         r"`.reshape\(1, 3\)`\)"):
        ctx.call_kernel(bump, 1, one)
    np.testing.assert_array_equal(ctx.copy_to_host(ctx.call_kernel(bump, 1, one.reshape(1, 3))[0]),
                                  [[1, p - 1, 3]])
    g = ctx.generate_computation_graph([x], [s, d, w2])
    assert g.field == "babybear"
    constant_ids = [c[0] for c in g.constants]
    assert w.buffer_id in constant_ids and x.buffer_id not in constant_ids
    (s2, d2, w3), commitments = run_computation_graph(g, [vals[::-1].copy()])
    np.testing.assert_array_equal(s2, ((vals[:, 0] + vals[:, 1]) % p)[::-1])
    np.testing.assert_array_equal(w3, [[1, p - 1, 3], [4, p - 1, 6]])
    (_, _, _), commitments = run_computation_graph(g, [vals])
    assert commitments == g.commitments


# -------------------------------------------------------- re-recording -----

def test_load_computation_graph_checks_the_rerecorded_program():
    ctx = Context()
    a, c = reference_program(ctx, lanes=2)
    g = ctx.generate_computation_graph([a], [c])
    again = Context()
    a2, c2 = reference_program(again, lanes=2, offset=7)
    commitments = again.load_computation_graph(g)
    new = np.concatenate([np.arange(1, 33).reshape(16, 2) + 7 + k for k in range(2)])
    assert commitments == run_computation_graph(g, [new])[1]
    other = Context()
    x = other.copy_to_device(np.arange(1, 65).reshape(32, 2))
    (y,) = other.call_kernel(add_2, 32, x)
    other.call_kernel(add_2, 16, y.reshape([16, 2]))
    with pytest.raises(ValueError, match="does not match the graph: call 1 runs kernel "
                                         "`add_2` in the graph but .*|does not match"):
        other.load_computation_graph(g)
    short = Context()
    x = short.copy_to_device(np.arange(1, 65).reshape(32, 2))
    short.call_kernel(add_2, 32, x)
    # a buffer count apart names the first call that differs (a user review:
    # the counts alone said nothing of where)
    with pytest.raises(ValueError, match=r"graph has 3 buffers, this recording 2; first "
                                         r"difference: call 1 \(kernel `add_16`\) of the "
                                         r"graph is not in this recording$"):
        short.load_computation_graph(g)
    x = short.copy_to_device(np.arange(1, 17))
    short.call_kernel(add_16, 1, x)
    short.call_kernel(add_16, 1, x)
    with pytest.raises(ValueError, match=r"graph has 3 buffers, this recording 5; first "
                                         r"difference: call 2 \(kernel `add_16`\) of this "
                                         r"recording is not in the graph$"):
        short.load_computation_graph(g)
    swapped = Context()
    x = swapped.copy_to_device(np.arange(1, 65).reshape(32, 2))
    swapped.call_kernel(add_16, 4, x.reshape([4, 16]))
    with pytest.raises(ValueError, match=r"graph has 3 buffers, this recording 2; first "
                                         r"difference: call 0 runs kernel `add_2` in the "
                                         r"graph but `add_16` here$"):
        swapped.load_computation_graph(g)


def test_load_checks_the_graph_inputs_and_outputs_against_handles_given():
    """A graph from elsewhere with its output rewired to the program's input
    (a well-formed file) passed the check, which took the outputs from the
    graph itself, and its replay then returned the caller's input.  Given the
    handles, the views must be the graph's; without them the graph's are
    taken (as documented).  A hand-built graph is validated first (an input
    id out of range was an IndexError)."""
    ctx = Context()
    a, c = reference_program(ctx, lanes=2)
    g = ctx.generate_computation_graph([a], [c])
    rewired = ComputationGraph.from_bytes(ComputationGraph(
        g.field, g.kernels, g.compiled_kernels, g.buffer_points, g.templates, g.inputs,
        ((a.buffer_id, (("reshape", (64,)),)),), g.constants, g.commitments).to_bytes())
    again = Context()
    a2, c2 = reference_program(again, lanes=2, offset=7)
    assert again.load_computation_graph(g, [a2], [c2]) == again.load_computation_graph(g)
    assert again.load_computation_graph(rewired) is not None  # the graph's own choice
    with pytest.raises(ValueError, match=r"does not match the graph: graph output 0 is buffer "
                                         r"0 viewed as \[64\], but `outputs\[0\]` is buffer 2 "
                                         r"viewed as \[2\]"):
        again.load_computation_graph(rewired, outputs=[c2])
    with pytest.raises(ValueError, match=r"graph input 0 is buffer 0 viewed as \[32, 2\], but "
                                         r"`inputs\[0\]` is buffer 0 viewed as \[2, 32\]"):
        again.load_computation_graph(g, inputs=[a2.transpose()])
    with pytest.raises(ValueError, match=r"the graph has 1 outputs, `outputs` holds 2 handles"):
        again.load_computation_graph(g, outputs=[c2, c2])
    with pytest.raises(ValueError, match=r"`inputs\[0\]` must come from copy_to_device"):
        again.load_computation_graph(g, inputs=[c2])
    with pytest.raises(TypeError, match=r"`outputs` must be a sequence of Handles"):
        again.load_computation_graph(g, outputs=5)
    # a dict or set of Handles gave its keys as the inputs (a helper's review);
    # run_computation_graph already refused a dict
    for bad in ({a2: "x"}, {a2}):
        with pytest.raises(TypeError, match=rf"`inputs` must be a sequence of Handles, not "
                                            rf"{type(bad).__name__}"):
            again.generate_computation_graph(bad, [c2])
        with pytest.raises(TypeError, match=rf"`outputs` must be a sequence of Handles, not "
                                            rf"{type(bad).__name__}"):
            again.load_computation_graph(g, outputs={c2} if type(bad) is set else {c2: 0})
    broken = ComputationGraph(g.field, g.kernels, g.compiled_kernels, g.buffer_points,
                              g.templates, ((99, (("reshape", (64,)),)),), g.outputs,
                              g.constants, g.commitments)
    with pytest.raises(ValueError, match="graph input 0 names buffer 99"):
        again.load_computation_graph(broken)


def test_load_names_a_differing_constant_and_its_values():
    @kernel
    def scale(x: In[()], k: In[2], out: Out[()]):
        out[()] = x[()] * k[1] + k[0]

    def record(k):
        ctx = Context()
        a = ctx.copy_to_device(np.arange(6))
        (b,) = ctx.call_kernel(scale, 6, a, ctx.copy_to_device(k))
        return ctx, a, b

    ctx, a, b = record([1, 3])
    g = ctx.generate_computation_graph([a], [b])
    assert record([1, 3])[0].load_computation_graph(g) == g.commitments
    with pytest.raises(ValueError, match=r"constant buffer 1 holds different values: element 1 "
                                         r"is 3 in the graph but 4 here$"):
        record([1, 4])[0].load_computation_graph(g)


def test_load_names_a_layout_difference():
    ctx = Context()
    a, c = reference_program(ctx, lanes=2)
    g = ctx.generate_computation_graph([a], [c])
    again = Context()
    x = again.copy_to_device(np.arange(1, 65).reshape(32, 2))
    (y,) = again.call_kernel(add_2, 32, x)
    again.call_kernel(add_16, 2, y.reshape([16, 2]).transpose())  # columns, not rows
    with pytest.raises(ValueError, match=r"does not match the graph: buffer 0 has layout "
                                         r"\[2, 16, 2\].* but \[16, 2, 2\]"):
        again.load_computation_graph(g)


def test_load_names_a_graph_input_the_recording_computes_and_a_broadcast_flag():
    def record(computed):
        ctx = Context()
        a = ctx.copy_to_device(np.arange(32).reshape(16, 2))
        b = ctx.call_kernel(add_2, 16, a)[0] if computed else ctx.copy_to_device(np.arange(16))
        (c,) = ctx.call_kernel(add_xy, 16, b, b)
        return ctx, a, b, c

    ctx, a, b, c = record(False)
    g = ctx.generate_computation_graph([a, b], [c])
    assert record(False)[0].load_computation_graph(g) == g.commitments
    with pytest.raises(ValueError, match=r"does not match the graph: graph input 1 is buffer "
                                         r"1, which this recording computes$"):
        record(True)[0].load_computation_graph(g)

    # one instance: a [2] view is broadcast, a [1, 2] view of the same buffer is
    # not; the layouts agree, the templates do not
    def one(parallel):
        ctx = Context()
        x = ctx.copy_to_device([3, 4])
        (y,) = ctx.call_kernel(add_2, 1, x.reshape(1, 2) if parallel else x)
        return ctx, x, y

    ctx, x, y = one(False)
    g = ctx.generate_computation_graph([x], [y])
    assert one(False)[0].load_computation_graph(g) == g.commitments
    with pytest.raises(ValueError, match=r"call 0 \(kernel `add_2`\) has broadcast \(True,\) "
                                         r"in the graph but \(False,\) here$"):
        one(True)[0].load_computation_graph(g)


# ------------------------------------------------------------- errors ------

def test_call_errors_name_both_accepted_shapes():
    ctx = Context()
    x = ctx.copy_to_device(np.arange(32))
    with pytest.raises(ValueError, match=r"`x` of kernel `add_2` must have shape \[2\] "
                                         r"\(broadcast\) or \[16, 2\] \(parallel\), not \[32\]"):
        ctx.call_kernel(add_2, 16, x)
    with pytest.raises(TypeError, match="takes 1 input handle"):
        ctx.call_kernel(add_2, 16)
    with pytest.raises(ValueError, match="num_parallel"):
        ctx.call_kernel(add_2, 0, x.reshape(16, 2))
    for bad in (16.0, "16", True, None):
        with pytest.raises(TypeError, match="num_parallel"):
            ctx.call_kernel(add_2, bad, x.reshape(16, 2))
    with pytest.raises(ValueError, match="keep the element count"):
        x.reshape(5, 6)
    with pytest.raises(ValueError, match="another Context"):
        Context().call_kernel(add_2, 16, x.reshape(16, 2))
    with pytest.raises(ValueError, match="must lie in"):
        ctx.copy_to_device([P])
    with pytest.raises(ValueError, match="must come from copy_to_device"):
        (y,) = ctx.call_kernel(add_2, 16, x.reshape(16, 2))
        ctx.generate_computation_graph([y], [y])
    with pytest.raises(ValueError, match="backend"):
        Context(backend="tpu")


def test_recording_refuses_empty_arrays_and_2_40_instances():
    ctx = Context()
    for empty in ([], np.zeros(0, dtype=np.int64), np.zeros((3, 0), dtype=np.int64)):
        with pytest.raises(ValueError, match=r"`ints` must hold at least one element, not "
                                             rf"shape \({np.shape(empty)[0]},"):
            ctx.copy_to_device(empty)
    with pytest.raises(ValueError, match=r"`num_parallel` must be below 2\*\*40 \(a graph "
                                         r"file's limit on instances\), not 1099511627776$"):
        ctx.call_kernel(add_2, 2**40, ctx.copy_to_device([1, 2]))


def test_replay_inputs_must_match_the_graph_inputs_in_number_and_shape():
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    x = np.arange(1, 33).reshape(16, 2)
    assert int(run_computation_graph(g, [x])[0][0]) == 528
    for bad in ([], [x, x]):
        with pytest.raises(ValueError, match=rf"`inputs` must hold 1 array \(one per graph "
                                             rf"input\), not {len(bad)}$"):
            run_computation_graph(g, bad)
    b = ctx.copy_to_device(np.arange(1, 33).reshape(16, 2))
    g2 = ctx.generate_computation_graph([a, b], [c])
    with pytest.raises(ValueError, match=r"`inputs` must hold 2 arrays \(one per graph "
                                         r"input\), not 1$"):
        run_computation_graph(g2, [x])
    for wrong in (x.T, x.reshape(32), x.reshape(1, 16, 2)):  # the same 32 elements
        with pytest.raises(ValueError, match=rf"`inputs\[0\]` must have shape \[16, 2\], "
                                             rf"not {re.escape(str(list(wrong.shape)))}$"):
            run_computation_graph(g, [wrong])


FACTORY = """
from __future__ import annotations
from zorch_nb.graph import In, Out, kernel

def row_sum(n):
    @kernel
    def total(x: In[n], out: Out[()]):
        acc = x[0]
        for i in range(1, n):
            acc = acc + x[i]
        out[()] = acc
    return total

def shaped(m):
    k = m + 1  # used by the annotation only: no closure cell under PEP 563

    @kernel
    def widen(x: In[()], out: Out[k]):
        for i in range(k):
            out[i] = x[()] * (i + 1)
    return widen


def my_kernel(fn):  # a user's wrapper of the decorator: its locals are not the scope
    n = 2
    return kernel(fn)


def wrapped(n):
    @my_kernel
    def total(x: In[n], out: Out[()]):
        out[()] = x[0]
    return total


def undecorated(n):
    def total(x: In[n], out: Out[()]):
        out[()] = x[0]
    return total


def bad_dimension():
    @kernel
    def k(x: In[2], y: In[0], out: Out[()]):
        out[()] = x[0]
    return k
"""


def test_kernel_factories_work_under_postponed_annotations():
    """``from __future__ import annotations`` makes ``In[n]`` a string evaluated when
    the kernel is traced: names of the factory's scope (arguments, locals used
    only in the annotation) resolve, as without the import."""
    import __future__
    ns: dict = {}
    exec(compile(FACTORY, "<factory>", "exec", dont_inherit=True,
                 flags=__future__.annotations.compiler_flag), ns)
    ctx = Context()
    x = ctx.copy_to_device(np.arange(12).reshape(4, 3))
    (y,) = ctx.call_kernel(ns["row_sum"](3), 4, x)
    np.testing.assert_array_equal(ctx.copy_to_host(y), [3, 12, 21, 30])
    (z,) = ctx.call_kernel(ns["shaped"](1), 2, ctx.copy_to_device([5, 7]))
    np.testing.assert_array_equal(ctx.copy_to_host(z), [[5, 10], [7, 14]])
    assert ns["row_sum"](5).params[0] == ("x", "in", (5,))
    # the names are the defining frame's, not those of a wrapper that decorates
    assert ns["wrapped"](5).params[0] == ("x", "in", (5,))
    # decorated after its factory returned: that frame is gone, refused clearly
    with pytest.raises(KernelDefinitionError, match="cannot evaluate the annotation of "
                                                    "parameter `x` .name 'n' is not defined"):
        kernel(ns["undecorated"](5))
    # the parameter is named, as documented (the message named none)
    with pytest.raises(KernelDefinitionError, match=r"kernel `k`: cannot evaluate the annotation "
                                                    r"of parameter `y` \(In\[\.\.\.\] takes "
                                                    r"positive integer dimensions"):
        ns["bad_dimension"]()


def test_definition_errors_quote_the_current_line(tmp_path):
    """(a user review) A kernel redefined after its file changed, as in a
    notebook or REPL, quoted the file's old line (linecache's stale copy); an
    error the body raised on its own (a NumPy function on a traced value)
    named no line at all."""
    path = tmp_path / "mykernels.py"
    body = ("from zorch_nb.graph import In, Out, kernel\n"
            "@kernel\n"
            "def k(x: In[2], out: Out[()]):\n"
            "    out[()] = {}\n")
    for expr, what in (("x[0] / x[1]", "`/`"), ("x[0] % x[1] % x[0]", "`%`")):
        path.write_text(body.format(expr))
        with pytest.raises(KernelDefinitionError, match=re.escape(
                f"line 4 (`out[()] = {expr}`): {what} is not supported")):
            exec(compile(path.read_text(), str(path), "exec"), {})
    path.write_text(body.format("np.add(x[0], x[1])"))
    with pytest.raises(KernelDefinitionError, match=re.escape(
            "kernel `k`, line 4 (`out[()] = np.add(x[0], x[1])`) cannot be traced: TypeError")
            + ".*NumPy functions do not take traced field values: use \\+ - \\*"):
        exec(compile(path.read_text(), str(path), "exec"), {"np": np})


def test_negative_indices_count_from_the_end():
    """As documented (graph_trace): ``x[-1]`` is the last element, in reads and
    in assignments, every dimension; ``-n - 1`` reads past the shape."""
    @kernel
    def ends(x: In[2, 3], out: Out[2]):
        out[-1] = x[-1, -1] - x[0, -3]
        out[0] = x[-2, 1]
    ctx = Context()
    (y,) = ctx.call_kernel(ends, 2, ctx.copy_to_device(np.arange(12).reshape(2, 2, 3)))
    np.testing.assert_array_equal(ctx.copy_to_host(y), [[1, 5], [7, 5]])
    with pytest.raises(KernelDefinitionError, match=r"`x\[-3\]` reads past the shape"):
        @kernel
        def past(x: In[2], out: Out[()]):
            out[()] = x[-3]


def test_definition_errors_name_the_variable():
    with pytest.raises(KernelDefinitionError, match=r"output `out`.*out\[1\] unassigned"):
        @kernel
        def partial(x: In[2], out: Out[2]):
            out[0] = x[0]

    with pytest.raises(KernelDefinitionError, match=r"`x\[2\]` reads past the shape of `x`"):
        @kernel
        def too_far(x: In[2], out: Out[()]):
            out[()] = x[0] + x[2]

    with pytest.raises(KernelDefinitionError,
                       match=r"line \d+ \(`out\[\(\)\] = x\[0\] / x\[1\]`\): `/` is not "
                             r"supported on field value `x\[0\]`"):
        @kernel
        def divide(x: In[2], out: Out[()]):
            out[()] = x[0] / x[1]

    with pytest.raises(KernelDefinitionError, match="no truth value"):
        @kernel
        def branch(x: In[2], out: Out[()]):
            out[()] = x[0] if x[1] else x[0]

    with pytest.raises(KernelDefinitionError, match=r"constant 1180591620717411303424 must fit "
                                                    r"in a signed 64-bit.*the p of the field "
                                                    r"the kernel runs in.*% KoalaBear\.p` "
                                                    r"under KoalaBear"):
        @kernel
        def huge(x: In[()], out: Out[()]):
            out[()] = x[()] * 2**70

    # integers Python refuses to print (over 4300 digits) are named by their
    # size: the label and messages failed with int-to-str's ValueError
    def tracing(body):
        def traced(x: In[()], out: Out[()]):
            out[()] = body(x[()])
        return traced

    for body, match in ((lambda x: x + 2**20000, r"`x\[\(\)\] \+ <20001-bit integer>`: "
                                                  r"constant <20001-bit integer> must fit"),
                        (lambda x: x ** -(2**20000), r"\*\* <20001-bit integer>`: the exponent"),
                        (lambda x: pow(x, 2, 2**20000), r"pow\(x\[\(\)\], 2, <20001-bit")):
        with pytest.raises(KernelDefinitionError, match=match):
            kernel(tracing(body))
    assert kernel(tracing(lambda x: x ** (2**20000 - 1))).ir.nodes  # (its label too)

    # NumPy handed the parameter back (np.sum of an object wrapping it), and
    # the refusal quoted `out[()] = x`, a line the body never wrote
    for reduce in (np.sum, np.prod, np.asarray):
        with pytest.raises(KernelDefinitionError,
                           match=r"line \d+ \(`out\[\(\)\] = reduce\(x\)`\): `x` is an array "
                                 r"parameter: NumPy functions"):
            @kernel
            def total(x: In[4], out: Out[()]):
                out[()] = reduce(x)


def test_a_refusal_the_body_catches_still_refuses_the_kernel():
    """A helper's ``except ValueError`` swallowed KernelDefinitionError (a
    ValueError) and tracing went on: the kernel always took one branch."""
    def safe_is_zero(v):
        try:
            return v == 0
        except ValueError:
            return False

    with pytest.raises(KernelDefinitionError, match=r"`==` is not supported.*the kernel body "
                                                    r"caught this error"):
        @kernel
        def g(x: In[2], o: Out[()]):
            o[()] = x[1] if safe_is_zero(x[0]) else x[0]

    with pytest.raises(KernelDefinitionError, match=r"`%` is not supported"):
        @kernel
        def h(x: In[2], o: Out[()]):
            try:
                o[()] = (x[0] * x[1]) % P
            except (TypeError, ValueError):
                o[()] = x[0] * x[1]


def test_numpy_constants_on_the_left_and_other_tracer_corners():
    mds = np.array([[2, 3], [1, 1]])

    @kernel
    def mix(x: In[2], o: Out[2]):
        for i in range(2):  # NumPy integers left of a traced value: reflected ops
            o[i] = mds[i, 0] * x[0] + mds[i, 1] * x[1] - np.int64(5)

    ctx = Context()
    (y,) = ctx.call_kernel(mix, 1, ctx.copy_to_device([[4, 7]]))
    assert ctx.copy_to_host(y).tolist() == [[2 * 4 + 3 * 7 - 5, 4 + 7 - 5]]
    with pytest.raises(KernelDefinitionError, match=r"generator or `async def`"):
        @kernel
        def gen(x: In[()], o: Out[()]):
            o[()] = x[()]
            yield
    with pytest.raises(KernelDefinitionError, match=r"already modulo p; use `x\[\(\)\] \*\* 3`"):
        @kernel
        def three(x: In[()], o: Out[()]):
            o[()] = pow(x[()], 3, 7)
    for ann in ("Out[2**32, 2**32]", "In[2**64]"):  # sizes past int64 wrapped to 0
        with pytest.raises(TypeError, match=r"holds at most 16777216"):
            eval(ann)


def test_handles_are_read_only_and_replays_take_values():
    ctx = Context()
    a = ctx.copy_to_device(np.arange(6).reshape(2, 3))
    for attr, value in (("shape", (6,)), ("buffer_id", 0)):
        with pytest.raises(AttributeError):
            setattr(a.T, attr, value)
    with pytest.raises(ValueError, match=r"\[-1, 4\] cannot keep the element count 6: 6 is "
                                         r"not a multiple of 4"):
        a.reshape(-1, 4)
    assert (a.ndim, len(a), a.T.ndim, len(a.T)) == (2, 2, 2, 3)
    scalar = ctx.copy_to_device(5)
    assert scalar.ndim == 0 and bool(scalar)
    with pytest.raises(TypeError, match="len"):
        len(scalar)
    for to_array in (np.asarray, np.array, lambda h: h + np.zeros(3)):  # no 0-d object arrays
        with pytest.raises(TypeError, match=r"read them with Context\.copy_to_host"):
            to_array(a)
    (b,) = ctx.call_kernel(add_2, 1, ctx.copy_to_device([1, 2]))
    g = ctx.generate_computation_graph([], [b])
    assert run_computation_graph(g, [])[0][0].tolist() == [3]
    (c,) = ctx.call_kernel(add_xy, 6, a.reshape(6), a.reshape(6))
    g = ctx.generate_computation_graph([a], [c])
    for bad, match in ((a, "not Handle; a replay takes values: pass ctx.copy_to_host"),
                       (None, "not NoneType$")):
        with pytest.raises(TypeError, match=match):
            run_computation_graph(g, [bad])
    with pytest.raises(ValueError, match=r"`num_parallel` must be below 2\*\*40"):
        ctx.call_kernel(add_2, 2**62, ctx.copy_to_device([1, 2]))
    from zorch_nb import _backend
    old = _backend.physical_memory
    try:
        _backend.physical_memory = lambda: 2**20
        with pytest.raises(MemoryError, match=r"`num_parallel` = 1000000: the call's outputs "
                                              r"need 0\.0 GiB"):
            ctx.call_kernel(add_2, 10**6, ctx.copy_to_device([1, 2]))
    finally:
        _backend.physical_memory = old


def test_a_constant_reduced_mod_p_as_the_error_suggests():
    for F in (KoalaBear, BabyBear):
        c = 2**70 % F.p

        @kernel
        def scaled(x: In[()], out: Out[()]):
            out[()] = x[()] * c - 5

        ctx = Context(F)
        (r,) = ctx.call_kernel(scaled, 3, ctx.copy_to_device(np.array([0, 1, 12345])))
        want = [(v * 2**70 - 5) % F.p for v in (0, 1, 12345)]
        assert ctx.copy_to_host(r).tolist() == want

    with pytest.raises(KernelDefinitionError, match="`x` is an input"):
        @kernel
        def write_input(x: In[2], out: Out[()]):
            x[0] = 1
            out[()] = x[0]

    with pytest.raises(KernelDefinitionError, match="must be an integer"):
        @kernel
        def float_const(x: In[2], out: Out[()]):
            out[()] = x[0] * 1.5

    with pytest.raises(KernelDefinitionError, match="`x` is an array"):
        @kernel
        def whole_array(x: In[2], out: Out[()]):
            out[()] = x + 1

    with pytest.raises(KernelDefinitionError, match="reads the output `out` before"):
        @kernel
        def read_out(x: In[2], out: Out[2]):
            out[0] = out[1]
            out[1] = x[0]

    with pytest.raises(KernelDefinitionError, match="parameter `y` must be annotated"):
        @kernel
        def unannotated(x: In[2], y, out: Out[()]):
            out[()] = x[0]

    with pytest.raises(TypeError, match=r"In\[\.\.\.\] takes positive integer"):
        In[0]
    with pytest.raises(RuntimeError, match="inside a @kernel body"):
        assert_eq(1, 1)
    with pytest.raises(TypeError, match="not called directly"):
        add_2(1)


def test_values_kept_from_another_trace_are_refused():
    """A traced value or parameter kept past its body (here in a list) names
    nodes of its own kernel's IR; another kernel used to take it silently as
    its own node of the same number (a wrong kernel, no error)."""
    kept = []

    @kernel
    def first(x: In[2], out: Out[()]):
        kept.extend([x[1] * 7, x])
        out[()] = x[0]

    value, param = kept
    bodies = {
        "operand": lambda y, out: out.__setitem__((), y[0] + value),
        "left operand": lambda y, out: out.__setitem__((), value * y[0]),
        "alone": lambda y, out: out.__setitem__((), -value),
        "power": lambda y, out: out.__setitem__((), value ** 3),
        "assigned": lambda y, out: out.__setitem__((), value),
        "assert_eq": lambda y, out: (assert_eq(value, y[0]), out.__setitem__((), y[0])),
        "parameter": lambda y, out: out.__setitem__((), param[0] + y[0]),
    }
    for what, body in bodies.items():
        def second(y: In[2], out: Out[()]):
            body(y, out)
        with pytest.raises(KernelDefinitionError,
                           match=r"kernel `second`.*belongs to kernel `first`"):
            kernel(second)
    with pytest.raises(KernelDefinitionError, match="used outside its @kernel body"):
        value + 1
    with pytest.raises(KernelDefinitionError, match="used outside its @kernel body"):
        param[0]


def test_demo_section_runs():
    from zorch_nb import _demo_graph
    lines = []
    _demo_graph.run("cpu", lines.append)
    assert "528 (expected 528)" in lines[0] and "3728 (expected 3728)" in lines[-1]


def test_demo_section_notices_a_wrong_replay(monkeypatch):
    from zorch_nb import _demo_graph
    replay = _demo_graph.run_computation_graph

    def off_by_one(*args, **kwargs):
        (out,), commitments = replay(*args, **kwargs)
        return (out + 1,), commitments
    monkeypatch.setattr(_demo_graph, "run_computation_graph", off_by_one)
    with pytest.raises(SystemExit, match="graph demo check failed on backend cpu: "
                                         "recorded 528, replayed 3729"):
        _demo_graph.run("cpu", lambda line: None)


# ------------------------------------------------- interruption, threads ----

@kernel
def two_outs(x: In[2], y: In[()], o1: Out[()], o2: Out[()]):
    o1[()] = x[0] * y[()] + x[1]
    o2[()] = x[0] + y[()]


@kernel
def cube_plus_1(x: In[()], out: Out[()]):
    out[()] = x[()] * x[()] * x[()] + 1


def _recorded_state(ctx):
    # (fixed and calls too: a call's propagation reads them, and an interrupted
    # call must leave them as they were)
    return (len(ctx._calls), [(b.source, tuple(b.points), tuple(b.uses), tuple(b.fixed),
                               tuple(b.calls)) for b in ctx._buffers])


def test_ctrl_c_at_any_line_leaves_the_context_before_or_after_each_call():
    """KeyboardInterrupt raised (with sys.settrace, as a signal would be: between
    lines) at every line the recorder runs in two calls: the Context is as
    before a call or with it whole, and the program then records and replays."""
    from zorch_nb import graph as G
    xv, kv = np.arange(32).reshape(16, 2), 7

    def fresh():
        ctx = Context()
        return ctx, ctx.copy_to_device(xv), ctx.copy_to_device(kv)

    def program(ctx, a, k, states=None):
        r, r2 = ctx.call_kernel(two_outs, 16, a, k)
        if states is not None:
            states.append(_recorded_state(ctx))
        (s,) = ctx.call_kernel(cube_plus_1, 16, r.reshape(4, 4).reshape(16))
        return s, r2

    ctx, a, k = fresh()
    states = [_recorded_state(ctx)]
    s, r2 = program(ctx, a, k, states)
    states.append(_recorded_state(ctx))
    want = [ctx.copy_to_host(s), ctx.copy_to_host(r2)]
    replayed = set()
    fire = 0
    while True:
        fire += 1
        G.__dict__.get("_PLANS", {}).clear()  # interrupt the plan's making too
        G.__dict__.get("_EAGER_PROGRAMS", {}).clear()  # and the eager program's
        ctx, a, k = fresh()
        lines = [0]

        def local(frame, event, arg):
            if event == "line":
                lines[0] += 1
                if lines[0] == fire:
                    raise KeyboardInterrupt  # "Ctrl-C"; tracing stops here
            return local

        sys.settrace(lambda frame, event, arg:
                     local if frame.f_code.co_filename == G.__file__ else None)
        try:
            program(ctx, a, k)
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        finally:
            sys.settrace(None)
        if not interrupted:
            break
        state = _recorded_state(ctx)
        assert state in states, f"interrupted at line event {fire}"
        s, r2 = program(ctx, a, k)  # the user runs it again on the same Context
        g = ctx.generate_computation_graph([a, k], [s, r2])
        got = [[ctx.copy_to_host(s), ctx.copy_to_host(r2)]]
        if states.index(state) not in replayed:  # once per state: replays take a while
            replayed.add(states.index(state))
            got.append(run_computation_graph(g, [xv, np.array(kv)])[0])
        for outs in got:
            for x, y in zip(outs, want):
                np.testing.assert_array_equal(x, y)
    assert fire > 100 and len(replayed) == 3  # the sweep went through the calls' lines


def test_one_context_shared_by_threads_records_some_serial_order():
    from concurrent.futures import ThreadPoolExecutor
    shared = Context()

    def job(seed):
        rng = np.random.default_rng(seed)
        xv, kv = rng.integers(0, 1000, size=(16, 2)), int(rng.integers(0, 100))
        a, k = shared.copy_to_device(xv), shared.copy_to_device(kv)
        r, _ = shared.call_kernel(two_outs, 16, a, k)
        (s,) = shared.call_kernel(cube_plus_1, 16, r)
        want = np.array([(pow(int(x) * kv + int(y), 3, P) + 1) % P for x, y in xv],
                        dtype=np.uint32)
        np.testing.assert_array_equal(shared.copy_to_host(s), want)
        g = shared.generate_computation_graph([a, k], [s])
        np.testing.assert_array_equal(run_computation_graph(g, [xv, np.array(kv)])[0][0], want)
        return s

    job(0)  # compiles the evaluators before the threads start
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(job, range(1, 65)))
    finally:
        sys.setswitchinterval(interval)
    g = shared.generate_computation_graph([], outs)
    assert len(g.templates) == 2 * 65 and len(g.buffer_points) == 5 * 65
    assert sorted(h.buffer_id for h in outs) == sorted(set(h.buffer_id for h in outs))


# ------------------------------------------- crafted files and hand-built graphs ----

def _resealed(payload, version=1):
    """File bytes around ``payload``: header and a valid checksum (what anyone
    who edits a file can recompute)."""
    import hashlib
    from zorch_nb import graph_format as fmt
    header = fmt._HEADER.pack(fmt.MAGIC, version, len(payload))
    return header + payload + hashlib.sha256(header + payload).digest()


def test_only_format_version_1_is_read_even_with_a_valid_checksum(small_graph_bytes):
    payload = small_graph_bytes[20:-32]
    assert ComputationGraph.from_bytes(_resealed(payload)).to_bytes() == small_graph_bytes
    for version in (0, 2, 2**32 - 1):  # (an older version is as unreadable as a newer one)
        with pytest.raises(ValueError, match=f"format version {version}; this zorch_nb "
                                             "reads version 1"):
            ComputationGraph.from_bytes(_resealed(payload, version))


def test_an_output_buffer_that_does_not_split_its_instances_is_refused_by_name():
    """Split points of a template's first output that lack the instance
    boundary: ``validate`` names the template -- its handler caught the
    KeyError ``axis_dims`` once raised, and let the ValueError about a
    function argument (`points`) through instead."""
    @kernel
    def dup(x: In[()], out: Out[2]):
        out[0] = x[()]
        out[1] = x[()] + 1

    ctx = Context()
    a = ctx.copy_to_device(np.arange(3))
    (b,) = ctx.call_kernel(dup, 3, a)
    g = ctx.generate_computation_graph([a], [b])
    points = list(g.buffer_points)
    points[b.buffer_id] = (1, 2, 6)  # 3 instances of 2: the split at 3 is missing
    evil = ComputationGraph(g.field, g.kernels, g.compiled_kernels, points, g.templates,
                            g.inputs, g.outputs, g.constants, g.commitments)
    with pytest.raises(ValueError, match=r"invalid computation graph: template 0's first "
                                         r"output buffer does not split its 3 instances"):
        evil.to_bytes()


@kernel
def _mix3(x: In[3], k: In[()], out: Out[3]):
    for i in range(3):
        out[i] = x[i] * k[()] - x[(i + 2) % 3] + 5


@kernel
def _fold_into(acc: InOut[2], y: In[2]):
    assert_eq(acc[0] + y[0], y[0] + acc[0])
    acc[1] = acc[0] * y[1] + acc[1]


def test_edited_files_load_and_replay_or_raise_value_error(monkeypatch):
    """3000 seeded edits of a file's payload (a byte changed, bytes cut out or
    put in), resealed with a valid checksum, as anyone editing a file can:
    each is refused with a ValueError when loaded, or loads as a graph whose
    replay runs or raises a ValueError -- never another exception (an
    IndexError, a KeyError) or a crash of the evaluators, which index their
    buffers unchecked.  The program has transposed inputs and outputs, a
    broadcast, a constant, an InOut and an assertion; the replays run the
    interpreter, so no edited graph compiles an evaluator of its own."""
    import random

    from zorch_nb import graph_format as fmt
    from zorch_nb.graph_layout import history_shapes
    from zorch_nb.kernels import launch_config
    monkeypatch.setattr(launch_config, "GRAPH_CPU_UNROLL_MAX_ROWS", -1)
    ctx = Context()
    x = ctx.copy_to_device(np.arange(12).reshape(4, 3))
    k = ctx.copy_to_device(7)
    (m,) = ctx.call_kernel(_mix3, 4, x, k)
    (s,) = ctx.call_kernel(_fold_into, 6, m.T.reshape(3, 2, 2).reshape(6, 2),
                           ctx.copy_to_device([2, 9]))
    g = ctx.generate_computation_graph([x.T, k], [s.reshape(12), m])
    payload = g.to_bytes()[fmt._HEADER.size:-32]

    def ones(graph):  # inputs of the shapes the (edited) graph asks for
        return [np.ones(history_shapes(graph.buffer_points[b][-1], h)[-1], np.int64)
                for b, h in graph.inputs]

    run_computation_graph(g, ones(g))
    seen = {"refused": 0, "replayed": 0, "replay refused": 0}
    for seed in range(3000):
        rng = random.Random(seed)
        edited = bytearray(payload)
        i = rng.randrange(len(edited))
        if seed % 3 == 0:
            edited[i] = rng.choice([0, 1, 0xFF, edited[i] ^ (1 << rng.randrange(8)),
                                    (edited[i] + 1) & 0xFF])
        elif seed % 3 == 1:
            del edited[i:i + rng.randint(1, 8)]
        else:
            edited[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        try:
            graph = ComputationGraph.from_bytes(_resealed(bytes(edited)))
        except ValueError:
            seen["refused"] += 1
            continue
        try:
            run_computation_graph(graph, ones(graph))
            seen["replayed"] += 1
        except ValueError:  # (an edited constant can fail the assertion)
            seen["replay refused"] += 1
    assert seen["refused"] > 2000 and seen["replayed"] > 100, seen  # both kinds were met


def test_crafted_payload_fields_are_refused_as_corrupted(monkeypatch):
    """Checksum-valid files whose payload the decoder cannot take as written:
    an out-of-range enum byte was an IndexError, and arrays of differing
    lengths were zipped short (a file that did not round-trip)."""
    from zorch_nb import graph_format as fmt
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    real_kernel, real_history, real_par = fmt._write_kernel, fmt._write_history, fmt._write_par

    def kind_3(w, ir):  # parameter kinds are the only u8 scalars of a kernel
        w.u8 = lambda v, real=w.u8: real(3)
        real_kernel(w, ir)
        del w.u8

    def op_2(w, history):  # history ops are the only u8 scalars of a history
        w.u8 = lambda v, real=w.u8: real(2)
        real_history(w, history)
        del w.u8

    def extra_stride(w, par):
        w.arr = lambda v, dt, real=w.arr: real(list(v) + [0] if dt == "<u8" else v, dt)
        real_par(w, par)
        del w.arr

    def extra_operand(w, ir):  # one more second operand (the <u8 array after two <u1 ... )
        seen = []

        def arr(values, dtype, real=w.arr):
            seen.append(dtype)
            if seen[-3:] == ["<u1", "<u8", "<u8"]:
                values = list(values) + [0]
            real(values, dtype)
        w.arr = arr
        real_kernel(w, ir)
        del w.arr

    def extra_slot_element(w, ck):
        w.u32(len(ck.in_layouts))
        for par, offsets in ck.in_layouts:
            fmt._write_par(w, par)
            w.arr(offsets, "<u8")
        w.u32(len(ck.out_layouts))
        for par, slots in ck.out_layouts:
            fmt._write_par(w, par)
            w.arr([s[0] for s in slots], "<u8")
            w.arr([s[1] for s in slots] + [0], "<u8")

    def trailing_byte(w, real=fmt._Writer.bytes):
        return real(w) + b"\x00"

    for target, patch, match in (
            (fmt, ("_write_kernel", kind_3), "kernel `add_2` has parameter kind 3"),
            (fmt, ("_write_history", op_2), "unknown history op 2"),
            (fmt, ("_write_par", extra_stride), "parallel sizes and strides differ"),
            (fmt, ("_write_kernel", extra_operand), "kernel `add_2` node arrays differ"),
            (fmt, ("_write_layouts", extra_slot_element), "slot arrays differ in length"),
            (fmt._Writer, ("bytes", trailing_byte), "1 bytes left after the payload")):
        with monkeypatch.context() as m:
            m.setattr(target, *patch)
            data = g.to_bytes()
        with pytest.raises(ValueError, match="corrupted graph: " + match):
            ComputationGraph.from_bytes(data)
    assert ComputationGraph.from_bytes(g.to_bytes()) == g


def test_padded_buffers_must_stay_under_2_40_words():
    """Validation refuses a padded buffer of 2**40 words (graph_codegen.MAX_LOG2:
    no padded buffer reaches 2**40), also when its logical length is below."""
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    bid = g.inputs[0][0]
    for n, points, match in ((3 << 38, (1, 3, 3 << 38), "a padded buffer is too long"),
                             (1 << 40, (1, 1 << 40), f"buffer {bid} is too long")):
        points = tuple(points if b == bid else p for b, p in enumerate(g.buffer_points))
        evil = ComputationGraph(g.field, g.kernels, g.compiled_kernels, points, g.templates,
                                ((bid, (("reshape", (n,)),)),), g.outputs, g.constants,
                                g.commitments)
        with pytest.raises(ValueError, match="invalid computation graph: " + match):
            evil.to_bytes()


def test_a_read_one_past_the_padded_buffer_is_refused_whatever_the_offset_order():
    """The 16 x 2 input pads to 32 words and add_2's instances step by 2: offsets
    (0, 2) or (2, 0) make the last instance read word 32, one past the buffer."""
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    ck = g.compiled_kernels[0]
    (par, offsets), = ck.in_layouts
    assert offsets == (0, 1) and par == ((4, 2),) and g.padded_lengths[a.buffer_id] == 32
    for evil_offsets in ((0, 2), (2, 0)):
        evil = ComputationGraph(g.field, g.kernels,
                                [ck._replace(in_layouts=((par, evil_offsets),))]
                                + list(g.compiled_kernels[1:]), g.buffer_points, g.templates,
                                g.inputs, g.outputs, g.constants, g.commitments)
        with pytest.raises(ValueError, match="reads past padded buffer"):
            ComputationGraph.from_bytes(evil.to_bytes())


def test_constants_must_be_canonical_and_fill_their_buffer_exactly():
    @kernel
    def affine(x: In[()], out: Out[()]):
        out[()] = 7 * x[()] + 1

    ctx = Context()
    a = ctx.copy_to_device(np.arange(4))
    (b,) = ctx.call_kernel(affine, 4, a)
    g = ctx.generate_computation_graph([], [b])  # a is a constant buffer
    (bid, values), = g.constants

    def with_values(v):
        return ComputationGraph(g.field, g.kernels, g.compiled_kernels, g.buffer_points,
                                g.templates, g.inputs, g.outputs, [(bid, np.array(v))],
                                g.commitments)

    assert with_values([0, 1, 2, P - 1]).to_bytes()  # p - 1 is canonical
    with pytest.raises(ValueError, match=rf"constant buffer {bid} holds a word >= p "
                                         rf"\({P}\), not canonical words"):
        with_values([0, 1, 2, P]).to_bytes()
    for v in ([0, 1, 2, 3, 4], [0, 1, 2]):  # (the message said "values or values >= p")
        with pytest.raises(ValueError, match=rf"constant buffer {bid} holds values of shape "
                                             rf"\({len(v)},\), not its 4 canonical words"):
            with_values(v).to_bytes()


def test_view_histories_start_with_a_reshape_and_may_have_numpys_dimensions():
    from zorch_nb.graph_format import _MAX_NDIM
    ctx = Context()
    a = ctx.copy_to_device(np.arange(32).reshape(16, 2))
    (b,) = ctx.call_kernel(add_2, 16, a)
    g = ctx.generate_computation_graph([a], [b])
    bid = g.outputs[0][0]

    def with_output(history):
        return ComputationGraph(g.field, g.kernels, g.compiled_kernels, g.buffer_points,
                                g.templates, g.inputs, ((bid, history),), g.constants,
                                g.commitments)

    # NumPy's most dimensions are a valid view (only one more is refused)
    deep = (1,) * (_MAX_NDIM - 1) + (16,)
    h = ComputationGraph.from_bytes(with_output((("reshape", (16,)), ("reshape", deep)))
                                    .to_bytes())
    (out,), _ = run_computation_graph(h, [np.arange(32).reshape(16, 2)])
    assert out.shape == deep
    np.testing.assert_array_equal(out.reshape(16), np.arange(32).reshape(16, 2).sum(axis=1))
    # a history must begin with the buffer's shape (was a TypeError on the missing shape)
    with pytest.raises(ValueError, match=rf"graph output 0 \(buffer {bid}\) has a history "
                                         "that does not start with its shape"):
        with_output((("transpose", (0,)),)).to_bytes()


def test_kernel_nodes_must_read_inside_their_parameters_and_earlier_nodes():
    @kernel
    def neg_first(x: In[2], out: Out[()]):
        out[()] = -x[0]

    ctx = Context()
    a = ctx.copy_to_device(np.arange(8).reshape(4, 2))
    (b,) = ctx.call_kernel(neg_first, 4, a)
    g = ctx.generate_computation_graph([a], [b])
    ir = g.kernels[0]
    assert ir.nodes == ((graph_codegen.OP_LOAD, 0, 0), (graph_codegen.OP_NEG, 0, 0))
    for node in ((graph_codegen.OP_LOAD, 0, 2), (graph_codegen.OP_NEG, 1, 0)):
        evil = ComputationGraph(g.field, (ir._replace(nodes=(ir.nodes[0], node)),),
                                *(g.compiled_kernels, g.buffer_points, g.templates, g.inputs,
                                  g.outputs, g.constants, g.commitments))
        with pytest.raises(ValueError, match=re.escape(f"kernel 0 node 1 {node} is malformed")):
            evil.to_bytes()


def test_a_buffer_cannot_be_a_graph_input_twice():
    ctx = Context()
    a, c = reference_program(ctx)
    g = ctx.generate_computation_graph([a], [c])
    evil = ComputationGraph(g.field, g.kernels, g.compiled_kernels, g.buffer_points,
                            g.templates, g.inputs * 2, g.outputs, g.constants, g.commitments)
    with pytest.raises(ValueError, match=f"buffer {a.buffer_id} is a graph input twice"):
        evil.to_bytes()


def test_building_or_loading_with_a_buffer_named_twice_as_input_is_refused():
    ctx = Context()
    a, c = reference_program(ctx)
    with pytest.raises(ValueError, match=rf"Argument `inputs` names a buffer twice: "
                                         rf"`inputs\[0\]` and `inputs\[1\]` are views of "
                                         rf"buffer {a.buffer_id}"):
        ctx.generate_computation_graph([a, a.reshape(32)], [c])
    b = ctx.copy_to_device([1, 2])  # the message names the two places, not the first
    with pytest.raises(ValueError, match=r"`inputs\[1\]` and `inputs\[2\]` are views"):
        ctx.generate_computation_graph([b, a, a.T, b.reshape(1, 2)], [c])
    g = ctx.generate_computation_graph([a], [c])
    with pytest.raises(ValueError, match=r"Argument `inputs` names a buffer twice"):
        ctx.load_computation_graph(g, inputs=[a, a])


def test_tiling_refuses_layouts_that_write_a_slot_twice():
    """Offsets {0, 3} + {0, 7} + {0, 1, 2, 3}: 16 writes, slots 3 and 10 twice and
    14, 15 never (the check once went on past the overlap and passed it)."""
    from zorch_nb import graph_format as fmt
    assert not fmt._tiles([0, 3], [(1, 7), (2, 1)], 16)
    assert fmt._tiles([0, 1], [(2, 2), (1, 8)], 16)


@kernel
def _weighted_6(x: In[6], out: Out[()]):
    out[()] = x[0] + 2 * x[1] + 3 * x[2] + 4 * x[3] + 5 * x[4] + 6 * x[5]


def test_an_operand_axis_over_several_buffer_dimensions_reads_them_in_order():
    """x of 12 is split [4, 3] by one call and read as [2, 6] by another: the
    buffer is [2, 2, 3] (padded [2, 2, 4]) and each In[6] operand spans its
    two inner dimensions, the inner one fastest."""
    ctx = Context()
    vals = np.arange(1, 13)
    x = ctx.copy_to_device(vals)
    ctx.call_kernel(row_sum_3, 4, x.reshape(4, 3))
    (w,) = ctx.call_kernel(_weighted_6, 2, x.reshape(2, 6))
    g = ctx.generate_computation_graph([x], [w])
    assert g.buffer_points[x.buffer_id] == (1, 2, 4, 12)
    assert g.compiled_kernels[-1].in_layouts[0][1] == (0, 1, 2, 4, 5, 6)
    new = vals ** 2 + 3
    want = new.reshape(2, 6) @ np.arange(1, 7) % P
    np.testing.assert_array_equal(run_computation_graph(g, [new])[0][0], want)


def test_kernel_index_and_size_limits_are_exact():
    # x[-2] is x[0] as in NumPy, x[-3] reads past an In[2] (was x[1])
    @kernel
    def last_first(x: In[2], out: Out[()]):
        out[()] = x[-2] + 2 * x[-1]

    assert last_first.ir.nodes[:2] == ((graph_codegen.OP_LOAD, 0, 0),
                                       (graph_codegen.OP_LOAD, 0, 1))
    with pytest.raises(KernelDefinitionError, match=r"`x\[-3\]` reads past the shape of `x`"):
        @kernel
        def too_far_back(x: In[2], out: Out[()]):
            out[()] = x[-3]

    from zorch_nb.graph_trace import MAX_PARAM_ELEMENTS
    assert In[MAX_PARAM_ELEMENTS].shape == (MAX_PARAM_ELEMENTS,)  # the most is allowed
    with pytest.raises(TypeError, match=f"has {MAX_PARAM_ELEMENTS + 1} elements"):
        In[MAX_PARAM_ELEMENTS + 1]
    # signed 64-bit constants: both ends fit, one past the top does not
    @kernel
    def extremes(x: In[()], out: Out[()]):
        out[()] = x[()] * (2**63 - 1) + x[()] * -2**63

    assert set(extremes.ir.consts) == {2**63 - 1, -2**63}
    with pytest.raises(KernelDefinitionError, match="constant 9223372036854775808 must fit"):
        @kernel
        def top(x: In[()], out: Out[()]):
            out[()] = x[()] * 2**63
