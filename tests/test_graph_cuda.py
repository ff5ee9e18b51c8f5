"""Generated CUDA C of the graph evaluators: nvcc, host compilation, GPU replay.

* ``nvcc -ptx -arch=sm_90`` compiles every generated translation unit (skipped
  without nvcc unless ``ZORCH_REQUIRE_NVCC=1``, which turns the skip into a
  failure);
* g++ compiles the same text for the host (the ``__global__`` wrapper is
  guarded by ``__CUDACC__``) and its element function must give the bytes of
  the Numba CPU evaluator on the same padded buffers;
* on a GPU machine (``gpu`` marker) the CuPy replay must match the CPU replay.
"""
import ctypes

import numpy as np
import pytest

from cuda_host import compile_text, nvcc_ptx
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.graph import (ComputationGraph, Context, In, InOut, Out, assert_eq, kernel,
                            run_computation_graph)
from zorch_nb.kernels import graph_codegen, graph_cpu
from zorch_nb.kernels.field_params import FIELDS



@kernel
def mix(v: In[5], m: In[5, 3], acc: InOut[3], out: Out[2]):
    for j in range(3):
        s = v[0] * m[0, j]
        for i in range(1, 5):
            s = s + v[i] * m[i, j]
        acc[j] = acc[j] - s
    out[0] = -(acc[0] * 7) + 12345
    out[1] = v[4] - v[3]
    assert_eq(v[0] * 0, 0)


@kernel
def pair(x: In[2], out: Out[()]):
    out[()] = x[0] * x[1] + x[0]


@kernel
def column(x: In[6], out: Out[()]):
    out[()] = x[0] * x[1] - x[2] * x[3] + x[4] * x[5]


def _graph(field):
    """A small program with broadcast, parallel, InOut, transposed and padded operands."""
    rng = np.random.default_rng(7)
    p = field.p
    ctx = Context(field=field)
    values = [rng.integers(0, p, size=s) for s in ((6, 5), (5, 3), (6, 3))]
    v, m, acc = (ctx.copy_to_device(x) for x in values)
    acc2, out = ctx.call_kernel(mix, 6, v, m, acc)
    (q,) = ctx.call_kernel(pair, 6, out)
    (r,) = ctx.call_kernel(column, 5, v.transpose())
    return ctx.generate_computation_graph([v, m, acc], [acc2, out, q, r]), values


def _padded_inputs(g, field, seed):
    """Padded Montgomery buffers of a random replay (for driving one evaluator)."""
    rng = np.random.default_rng(seed)
    ins = [rng.integers(0, field.p, size=np.shape(_view_shape(g, k)))
           for k in range(len(g.inputs))]
    _, _, padded = run_computation_graph(g, ins, padded=True)
    return [field.encode(b).reshape(-1) for b in padded]


def _view_shape(g, k):
    from zorch_nb.graph_layout import apply_history
    bid, history = g.inputs[k]
    return apply_history(np.zeros(g.buffer_points[bid][-1]), history)


def _host_library(field_name, generated, name, n_in, n_out):
    """Shared library with ``run(i.., o.., consts, fail, n)`` over the element function."""
    sym = graph_codegen.cuda_symbol(name)
    params = [f"const zorch_u32* i{k}" for k in range(n_in)] + \
        [f"zorch_u32* o{k}" for k in range(n_out)]
    args = [f"i{k}" for k in range(n_in)] + [f"o{k}" for k in range(n_out)]
    harness = (f'extern "C" void run({", ".join(params)}, const zorch_u32* consts, '
               f'zorch_u32* fail, unsigned long long n) {{\n'
               f'    for (unsigned long long t = 0; t < n; ++t) '
               f'{sym}_element(t, {", ".join(args)}, consts, fail);\n}}\n')
    return compile_text(graph_codegen.translation_unit(FIELDS[field_name], generated)
                        + "\n" + harness)


def _ptr(a):
    assert a.flags.c_contiguous and a.dtype == np.uint32
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("field", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_compiled_replay_matches_the_eager_recording(field):
    g, values = _graph(field)
    _, commitments = run_computation_graph(g, values)
    assert commitments == g.commitments
    again = ComputationGraph.from_bytes(g.to_bytes())  # transposes, InOut, constants
    assert again == g and run_computation_graph(again, values)[1] == g.commitments


@pytest.mark.parametrize("field", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_host_compiled_cuda_matches_numba_evaluator(field):
    g, _ = _graph(field)
    bufs = _padded_inputs(g, field, seed=3)
    lengths = g.padded_lengths
    assert len(g.compiled_kernels) == 3
    for ti, t in enumerate(g.templates):
        ck = g.compiled_kernels[t.compiled]
        ir = g.kernels[ck.kernel]
        py_src, cu_src, name = g.sources(t.compiled)
        consts = field.encode(np.array([c % field.p for c in ir.consts] or [0]))
        ins = [bufs[b] for b in t.inputs]
        n = t.padded_parallel
        outs_cpu = [np.zeros(lengths[b], np.uint32) for b in t.outputs]
        fail_cpu = np.zeros(n, np.uint32)
        fn = graph_cpu.compile_evaluator(py_src, name)
        graph_cpu.run_evaluator(fn, ins, outs_cpu, consts, fail_cpu, n, field.p,
                                field.params.mu_neg)
        lib = _host_library(field.params.name, cu_src, name, len(ins), len(outs_cpu))
        outs_host = [np.zeros(lengths[b], np.uint32) for b in t.outputs]
        fail_host = np.zeros(n, np.uint32)
        lib.run(*[_ptr(a) for a in ins + outs_host], _ptr(consts), _ptr(fail_host),
                ctypes.c_ulonglong(n))
        for a, b, bid in zip(outs_cpu, outs_host, t.outputs):
            assert a.tobytes() == b.tobytes()
            assert a.tobytes() == bufs[bid].tobytes()  # == the replay's own buffers
        assert not fail_cpu.any() and not fail_host.any()


def test_host_compiled_cuda_reports_the_first_failing_assertion():
    @kernel
    def two_checks(x: In[2], out: Out[()]):
        assert_eq(x[0], 1)
        assert_eq(x[1], 2)
        out[()] = x[0]

    ctx = Context()
    x = ctx.copy_to_device(np.array([[1, 2], [1, 2], [1, 2]]))
    (y,) = ctx.call_kernel(two_checks, 3, x)
    g = ctx.generate_computation_graph([x], [y])
    py_src, cu_src, name = g.sources(0)
    words = KoalaBear.encode(np.array([[1, 2], [1, 5], [0, 5], [1, 2]])).reshape(-1)
    consts = KoalaBear.encode(np.array([1, 2]))
    out = np.zeros(4, np.uint32)
    fail_cpu = np.zeros(4, np.uint32)
    graph_cpu.run_evaluator(graph_cpu.compile_evaluator(py_src, name), [words], [out],
                            consts, fail_cpu, 4, KoalaBear.p, KoalaBear.params.mu_neg)
    fail_host = np.zeros(4, np.uint32)
    lib = _host_library("koalabear", cu_src, name, 1, 1)
    lib.run(_ptr(words), _ptr(np.zeros(4, np.uint32)), _ptr(consts), _ptr(fail_host),
            ctypes.c_ulonglong(4))
    np.testing.assert_array_equal(fail_cpu, [0, 2, 1, 0])
    np.testing.assert_array_equal(fail_host, fail_cpu)


def test_generated_cuda_compiles_with_nvcc(tmp_path):
    g, _ = _graph(KoalaBear)
    for c in range(len(g.compiled_kernels)):
        _, cu_src, name = g.sources(c)
        src = tmp_path / f"{name}.cu"
        src.write_text(graph_codegen.translation_unit(FIELDS["koalabear"], cu_src))
        nvcc_ptx(src, tmp_path / f"{name}.ptx")
        ptx = (tmp_path / f"{name}.ptx").read_text()
        assert graph_codegen.cuda_symbol(name) in ptx


def check_cupy_replay_is_byte_identical_to_cpu(field):
    """Replay on the "cupy" backend equals the CPU replay (also run under emulation)."""
    g, _ = _graph(field)
    rng = np.random.default_rng(11)
    ins = [rng.integers(0, field.p, size=_view_shape(g, k).shape)
           for k in range(len(g.inputs))]
    outs_cpu, com_cpu, pad_cpu = run_computation_graph(g, ins, padded=True)
    outs_gpu, com_gpu, pad_gpu = run_computation_graph(g, ins, backend="cupy", padded=True)
    for a, b in zip(outs_cpu + pad_cpu, outs_gpu + pad_gpu):
        assert a.tobytes() == b.tobytes()
    assert com_cpu == com_gpu
    # without commitments each device buffer is freed after its last reader
    lean, none = run_computation_graph(g, ins, backend="cupy", commitments=False)
    assert none is None and all(a.tobytes() == b.tobytes() for a, b in zip(outs_cpu, lean))


def check_cupy_context_records_and_replays_the_reference_program():
    """A Context on the "cupy" backend records and replays the reference program."""
    from zorch_nb._demo_graph import add_2, add_16
    ctx = Context(backend="cupy")
    a = ctx.copy_to_device(np.concatenate([np.arange(1, 33).reshape(16, 2) + k
                                           for k in range(2)]))
    (b,) = ctx.call_kernel(add_2, 32, a)
    (c,) = ctx.call_kernel(add_16, 2, b.reshape(2, 16))
    np.testing.assert_array_equal(ctx.copy_to_host(c), [528, 560])
    g = ctx.generate_computation_graph([a], [c])
    new = np.concatenate([np.arange(1, 33).reshape(16, 2) + 3 * k for k in range(2)])
    (o_gpu,), com_gpu = run_computation_graph(g, [new], backend="cupy")
    (o_cpu,), com_cpu = run_computation_graph(g, [new])
    np.testing.assert_array_equal(o_gpu, [528, 624])
    assert o_gpu.tobytes() == o_cpu.tobytes() and com_gpu == com_cpu
    (o,), com = run_computation_graph(g, [np.concatenate([np.arange(1, 33).reshape(16, 2) + k
                                                           for k in range(2)])])
    assert com == g.commitments

    @kernel
    def doubles(x: In[2], out: Out[()]):
        assert_eq(x[0] + x[0], x[1])
        out[()] = x[1]

    # a failing assertion of an eager call names the instance and both values, as on
    # the CPU (reading them back from the device)
    for c in (ctx, Context()):
        with pytest.raises(ValueError, match=r"assert_eq failed in kernel `doubles` .* at "
                                             r"instance 1 of 2: 6 != 5$"):
            c.call_kernel(doubles, 2, c.copy_to_device(np.array([[1, 2], [3, 5]])))
    # and so does the replay, on both backends (the words gathered from the device)
    x = ctx.copy_to_device(np.array([[1, 2], [3, 6], [4, 8]]))
    (y,) = ctx.call_kernel(doubles, 3, x)
    g = ctx.generate_computation_graph([x], [y])
    for backend in ("cupy", "cpu"):
        with pytest.raises(ValueError, match=r"assert_eq failed in kernel `doubles` .* at "
                                             r"instance 2 of 3 \(call \d+; padded instance 2 "
                                             r"of 4\): 8 != 9$"):
            run_computation_graph(g, [np.array([[1, 2], [3, 6], [4, 9]])], backend=backend)


@pytest.mark.gpu
@pytest.mark.parametrize("field", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_cupy_replay_is_byte_identical_to_cpu(field):
    check_cupy_replay_is_byte_identical_to_cpu(field)


@pytest.mark.gpu
def test_cupy_context_records_and_replays_the_reference_program():
    check_cupy_context_records_and_replays_the_reference_program()
