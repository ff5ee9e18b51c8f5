"""The Numba-CUDA kernels sit on Numba-CUDA's on-disk cache, and a second
process loads them instead of compiling, without a GPU.

Two fresh processes drive the Numba-CUDA launch paths of the object layer
(field ops, dense and jagged transitions, the fused dense pyramid, the fused
jagged chunk) with each launch replaced by ``dispatcher.compile`` for that
launch's argument types, against one empty ``NUMBA_CACHE_DIR``.  There is no driver here, so the device is
named (sm_90) and the cubin step (``_Kernel.bind``) is skipped: the cache
entries hold the PTX; on a GPU they hold the cubin too.  The first process
must compile and save every kernel, the second must load every one (a
closure whose cache key changed between processes -- e.g. one holding a
device function, pickled with a per-process UUID -- would compile again).
Needs numba-cuda and NVVM; skipped without them unless
``ZORCH_REQUIRE_NVRTC=1``.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numba.cuda.codegen as codegen
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda.dispatcher import CUDACache

    sys.path.insert(0, sys.argv[1])  # tests/: the driverless stand-ins
    import cuda_nodriver

    # No driver: the PTX is compiled for the named sm_90, no cubin is linked.
    codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0)
    codegen.JITCUDACodegen.magic_tuple = lambda self: ((13, 0), (9, 0))
    dispatcher._Kernel.bind = lambda self: None

    seen = {}

    def compile_launch(disp, sig):
        disp.compile(sig)  # loads from the disk cache when it can
        seen[id(disp)] = disp

    cuda_nodriver.install(compile_launch)

    from zorch_nb import KoalaBear as F
    from zorch_nb import logup_gkr as lg
    a, b = F.random(8, seed=1), F.random(8, seed=2)
    F.mul(a, b, backend="numba")
    F.ext.inv(F.ext.random(8, seed=3), backend="numba")
    mles = [F.random(16, seed=4), F.random(16, seed=5),
            F.ext.random(16, seed=6), F.ext.random(16, seed=7)]
    lg.layer_transition(lg.GkrLayer(*mles, 1, F), backend="numba")
    lg.build_pyramid(lg.GkrLayer(*mles, 1, F), backend="numba")  # fused, base/ext
    layer = lg.JaggedGkrLayer(*mles, [5, 3, 0, 8], F)
    lg.jagged_layer_transition(layer, [3, 2, 1, 4], backend="numba")
    lg.build_jagged_pyramid(layer, [[3, 2, 1, 4], [2, 1, 1, 2], [1, 1, 1, 1]],
                            backend="numba")  # the fused three-step chunk
    report = {}
    for disp in seen.values():
        st = disp.stats
        report[disp.py_func.__qualname__] = {
            "cached": isinstance(disp._cache, CUDACache),
            "hits": sum(st.cache_hits.values()), "misses": sum(st.cache_misses.values())}
    print(json.dumps(report))
''')


def _run(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    res = subprocess.run([sys.executable, "-c", SCRIPT, os.path.dirname(__file__)],
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_numba_cuda_kernels_load_from_the_disk_cache_in_a_second_process(tmp_path):
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # this process may run the simulator
    probe = subprocess.run([sys.executable, "-c", "from numba.cuda.cudadrv import nvvm; "
                            "nvvm.NVVM()"], capture_output=True, text=True, env=env)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["?"])[-1]
        if os.environ.get("ZORCH_REQUIRE_NVRTC") == "1":
            pytest.fail(f"ZORCH_REQUIRE_NVRTC=1 but NVVM is unusable: {why}")
        pytest.skip(f"NVVM unavailable ({why})")
    first = _run(tmp_path)
    second = _run(tmp_path)
    # field ops, the transitions, both pyramid kernels (base/ext, then ext/ext), the
    # jagged chunk
    assert {"_base_map2_kernel", "_ext4_inv_batched_kernel", "_kernels.<locals>.dense",
            "_kernels.<locals>.jagged", "_pyramid_kernel.<locals>.pyramid",
            "_chunk_kernel.<locals>.chunk"} <= set(first), first
    for name, st in first.items():
        assert st["cached"], f"{name} is not on the disk cache"
        assert st["misses"] >= 1 and st["hits"] == 0, (name, st)
    assert second.keys() == first.keys()
    for name, st in second.items():
        assert st["misses"] == 0 and st["hits"] == first[name]["misses"], \
            f"{name} compiled again in a second process: {st}"
    assert any(f.endswith(".nbi") for _, _, files in os.walk(tmp_path) for f in files)
