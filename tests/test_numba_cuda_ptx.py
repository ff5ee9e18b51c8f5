"""The Numba-CUDA kernels compile for a real GPU (sm_90 PTX), without a GPU.

The CUDA simulator (see conftest.py) runs the ``@cuda.jit`` kernels as
Python, so it cannot catch what only the CUDA target refuses (typing of the
``@njit`` callees on the device, unsupported NumPy calls, tuple returns).
This test drives every Numba-CUDA launch path of the object layer in a
subprocess where each launch is replaced by ``numba.cuda.compile_ptx`` of the
kernel with the argument types of that launch.  It needs numba-cuda, NVVM and
NVRTC (not a driver); skipped when those are missing unless
``ZORCH_REQUIRE_NVRTC=1``.
"""
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r'''
    import os, sys
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    import numba
    from numba import cuda

    sys.path.insert(0, sys.argv[1])  # tests/: the driverless stand-ins
    import cuda_nodriver

    compiled = set()

    def compile_ptx(disp, sig):
        # Keyed by the dispatcher: the GKR kernels are one closure per field mode.
        key = (id(disp), disp.py_func.__module__, disp.py_func.__qualname__, str(sig))
        if key not in compiled:
            ptx, _ = cuda.compile_ptx(disp.py_func, sig, cc=(9, 0))
            assert ".target sm_90" in ptx
            compiled.add(key)

    cuda_nodriver.install(compile_ptx)
    from zorch_nb.kernels import gkr_cuda_numba

    from zorch_nb import BabyBear, KoalaBear
    from zorch_nb import logup_gkr as lg
    for F in (KoalaBear, BabyBear):
        for E in (F, F.ext):
            a, b = E.random(8, seed=1), E.random(8, seed=2)
            for op in ("add", "sub", "mul"):
                getattr(E, op)(a, b, backend="numba")
            for op in ("neg", "square", "inv", "batch_inv"):
                getattr(E, op)(a, backend="numba")
            E.pow(a, 12345, backend="numba")
        # the broadcast kernels: a one-element operand, base operands of extension ops
        base, ext = F.random(8, seed=7), F.ext.random(8, seed=8)
        for op in ("add", "sub", "mul"):
            getattr(F, op)(base, base[0], backend="numba")
            getattr(F.ext, op)(ext, base, backend="numba")
            getattr(F.ext, op)(base, ext[0], backend="numba")
        # the fused MLE folds: base and extension values and r
        F.mle_fold(base, base[0], backend="numba")
        for vals in (base, ext):
            for r in (base[0], ext[0]):
                F.ext.mle_fold(vals, r, backend="numba")
        F.eq_table(base[:3], backend="numba")  # the eq-table doubling
        F.ext.eq_table(base[:3], backend="numba")
        F.ext.eq_table(ext[:3], backend="numba")
        for n_ext in (False, True):
            for d_ext in (False, True):
                N, D = (F.ext if n_ext else F), (F.ext if d_ext else F)
                mles = [N.random(16, seed=3), N.random(16, seed=4),
                        D.random(16, seed=5), D.random(16, seed=6)]
                lg.layer_transition(lg.GkrLayer(*mles, 1, F), backend="numba")
                # fused pyramid: every input mode's kernel (16 leaves: one launch)
                lg.build_pyramid(lg.GkrLayer(*mles, 1, F), backend="numba")
                layer = lg.JaggedGkrLayer(*mles, [5, 3, 0, 8], F)
                lg.jagged_layer_transition(layer, [3, 2, 1, 4], backend="numba")
                # fused jagged chunk (three steps in one launch)
                lg.build_jagged_pyramid(layer, [[3, 2, 1, 4], [2, 1, 1, 2], [1, 1, 1, 1]],
                                        backend="numba")
    # The device-side prefix sums run only for device schedules: compile directly.
    t = numba.types
    cuda.compile_ptx(gkr_cuda_numba._prefix_kernel.py_func,
                     (t.int32[::1], t.int32[::1], t.int64[:, ::1]), cc=(9, 0))
    cuda.compile_ptx(gkr_cuda_numba._chunk_scan_kernel.py_func,
                     (t.UniTuple(t.int32[::1], 4), t.int64[:, ::1]), cc=(9, 0))
    # and the zero scan, which the object layer runs on device arrays only
    # (the CPU scans host ones, as the launches above pass)
    from zorch_nb.kernels import field_cuda_numba
    cuda.compile_ptx(field_cuda_numba._first_zero_kernel.py_func,
                     (t.uint32[::1], t.int32, t.uint32, t.uint64[::1]), cc=(9, 0))
    # and the conversions, which the object layer runs through CuPy's kernels
    u32 = t.uint32
    cuda.compile_ptx(field_cuda_numba._encode_kernel.py_func,
                     (t.int64[::1], t.boolean, u32, u32, u32, u32[::1], t.uint64[::1]),
                     cc=(9, 0))
    cuda.compile_ptx(field_cuda_numba._decode_kernel.py_func,
                     (u32[::1], u32, u32, u32[::1], u32[::1]), cc=(9, 0))
    print("compiled", len(compiled) + 5, "kernel signatures")
    kernels = sorted({k[1] + "." + k[2] for k in compiled})
    print("\n".join(kernels))
''')


@pytest.mark.early
def test_numba_cuda_kernels_compile_to_sm90_ptx():
    try:
        from cuda.bindings import nvrtc
        if nvrtc.nvrtcVersion()[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError("nvrtcVersion failed")
    except Exception as exc:
        if os.environ.get("ZORCH_REQUIRE_NVRTC") == "1":
            pytest.fail(f"ZORCH_REQUIRE_NVRTC=1 but NVRTC is unusable: {exc}")
        pytest.skip(f"NVRTC unavailable ({type(exc).__name__})")
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    res = subprocess.run([sys.executable, "-c", SCRIPT, os.path.dirname(__file__)],
                         capture_output=True, text=True,
                         env=env, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    assert "compiled" in res.stdout
    for name in ("_base_map2_bcast_kernel", "_ext4_map2_bcast_kernel",
                 "_base_mle_fold_kernel", "_ext4_mle_fold_kernel", "_base_eq_split_kernel",
                 "_ext4_eq_split_kernel"):
        assert name in res.stdout, res.stdout
    print(res.stdout)
