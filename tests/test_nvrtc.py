"""Every CUDA C translation unit compiles with NVRTC, as CuPy will compile it.

CuPy's ``RawModule`` compiles with NVRTC, which is stricter than nvcc about
host headers and needs the template instances named (``name_expressions``).
These tests call NVRTC directly through ``cuda.bindings`` (a numba-cuda
dependency) with the options and name expressions the launchers use, so an
NVRTC-only failure is caught without a GPU.  Skipped when the NVRTC library is
missing, unless ``ZORCH_REQUIRE_NVRTC=1`` (CI installs ``nvidia-cuda-nvrtc``).
"""
import os
import re

import pytest

from zorch_nb.kernels.cuda_source import assemble, kernel_sources
from zorch_nb.kernels.field_params import FIELDS
from zorch_nb.kernels.gkr_scalar import CUDA_NAME_EXPRESSIONS

#: Options of every zorch_nb RawModule (kernels/field_cupy.py NVRTC_OPTIONS) plus the
#: architecture CuPy adds for an H200.
OPTIONS = (b"-std=c++17", b"--gpu-architecture=compute_90")

NAME_EXPRESSIONS = {"gkr.cu": CUDA_NAME_EXPRESSIONS}


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
        err = nvrtc.nvrtcVersion()[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(err)
        return nvrtc
    except Exception as exc:  # ImportError or the library not found
        if os.environ.get("ZORCH_REQUIRE_NVRTC") == "1":
            pytest.fail(f"ZORCH_REQUIRE_NVRTC=1 but NVRTC is unusable: {exc}")
        pytest.skip(f"NVRTC unavailable ({type(exc).__name__})")


def nvrtc_compile(source: str, name_expressions=()) -> bytes:
    """PTX of ``source`` compiled by NVRTC; fails the test with NVRTC's log."""
    nvrtc = _nvrtc()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"zorch_nb.cu", 0, [], [])
    assert err == ok, err
    try:
        for name in name_expressions:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, name.encode())
            assert err == ok, (name, err)
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(OPTIONS), list(OPTIONS))
        if err != ok:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            pytest.fail(f"NVRTC failed:\n{log.decode(errors='replace')}")
        for name in name_expressions:
            err, lowered = nvrtc.nvrtcGetLoweredName(prog, name.encode())
            assert err == ok and lowered, name
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        return ptx
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("kernel_file", kernel_sources())
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_nvrtc_compiles_shipped_sources(field, kernel_file):
    ptx = nvrtc_compile(assemble(FIELDS[field], kernel_file),
                        NAME_EXPRESSIONS.get(kernel_file, ()))
    assert b".target sm_90" in ptx or b".target compute_90" in ptx


def test_extension_field_kernels_have_16_byte_accesses():
    """Each extension kernel of field_ops.cu holds a path that loads and stores an
    element as one 16-byte vector (taken when its arrays are aligned; the
    emulated tests run both paths), and the zero scan one that loads so."""
    ptx = nvrtc_compile(assemble(FIELDS["koalabear"], "field_ops.cu")).decode()
    bodies = dict(re.findall(r"\.entry (\w+)\((.*?)\n\}", ptx, re.S))
    ext = [name for name in bodies if name.startswith("zorch_ext4_")]
    assert sorted(ext) == ["zorch_ext4_eq_split", "zorch_ext4_inv_batched", "zorch_ext4_map1",
                           "zorch_ext4_map2", "zorch_ext4_map2_bcast", "zorch_ext4_mle_fold",
                           "zorch_ext4_pow"]
    for name in ext:
        assert re.search(r"ld\.global(\.nc)?\.v4\.u32", bodies[name]), name
        assert re.search(r"st\.global\.v4\.u32", bodies[name]), name
    # and the zero scan, which only reads (four words a load, base or extension)
    assert re.search(r"ld\.global(\.nc)?\.v4\.u32", bodies["zorch_first_zero"])


def test_nvrtc_compiles_generated_graph_kernels():
    from zorch_nb.kernels import graph_codegen
    from zorch_nb.graph import Context, In, Out, kernel

    @kernel
    def mac(x: In[3], m: In[3, 2], out: Out[2]):
        out[0] = x[0] * m[0, 0] + x[1] * m[1, 0] - x[2] * m[2, 0]
        out[1] = -(x[0] * m[0, 1]) + 7

    import numpy as np
    ctx = Context()
    a = ctx.copy_to_device(np.arange(15).reshape(5, 3))
    w = ctx.copy_to_device(np.arange(6).reshape(3, 2))
    (r,) = ctx.call_kernel(mac, 5, a, w)
    g = ctx.generate_computation_graph([a, w], [r])
    for c in range(len(g.compiled_kernels)):
        _, cu_src, _ = g.sources(c)
        ptx = nvrtc_compile(graph_codegen.translation_unit(FIELDS["koalabear"], cu_src))
        assert len(ptx) > 100
