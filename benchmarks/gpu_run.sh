#!/usr/bin/env bash
# One prepared GPU-machine run: GPU tests + GPU benchmark, everything into $OUT.
# From the project root here:   ../shared/gpu/fetch-wheels.sh
# Then with the device tool:    carry [".whl"], command
#     . .whl/env.sh && bash benchmarks/gpu_run.sh
# Results come back under $OUT: gpu_bench.json, gpu_bench.log, gpu_tests.log, gpu_tests.xml,
# gpu_bench.png, ptxas.txt, sass_stats.txt, env.txt, sanitizer_memcheck.txt,
# sanitizer_racecheck.txt.
# Copy them to benchmarks/results/ as gpu-<date>.json / .png, then
# `python benchmarks/readme_table.py FILE` (README table) and
# `python benchmarks/targets.py FILE` (issue 6's targets, met or missed).  ZORCH_GPU_STEPS
# picks the steps (default "bench tests ptxas sanitize", in that order, most
# important first: a device-tool timeout cuts the tail, and what is under $OUT
# comes back).  About 6 minutes without the sanitizer, which adds up to 3:
# the tests include the fused-pyramid checks on both backends
# (tests/test_gkr_pyramid.py, test_gkr_jagged_pyramid.py,
# test_gkr_jagged_chunk.py: fused vs per-layer vs CPU, aligned and offset
# data, host and device schedules, no synchronization); the bench measures
# every row of issue 6 at 2^26 on the cupy and numba backends (dense folds,
# jagged transitions, fused pyramids with their launch counts, dispatch at
# 2^10, peak pool memory, second-process start-up).
set -u -o pipefail
OUT=${OUT:-/tmp/zorch_out}
STEPS=" ${ZORCH_GPU_STEPS:-bench tests ptxas sanitize} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import numpy, numba, cupy; print('numpy', numpy.__version__, 'numba', numba.__version__, 'cupy', cupy.__version__)"
  # 10-second smoke test of both toolchains on the device, so a broken one
  # (e.g. NVVM emitting a PTX version the driver cannot load) shows up first
  python3 - <<'PY'
import numpy as np
try:
    from numba import cuda

    @cuda.jit
    def add_one(x):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] += 1
    x = cuda.to_device(np.arange(4, dtype=np.uint32))
    add_one[1, 32](x)
    print("numba-cuda smoke:", x.copy_to_host().tolist())
except Exception as exc:
    print("numba-cuda smoke FAILED:", type(exc).__name__, exc)
try:
    import cupy
    k = cupy.RawKernel(r'extern "C" __global__ void k(unsigned int* x) { x[threadIdx.x] += 1; }', "k")
    y = cupy.arange(4, dtype=cupy.uint32)
    k((1,), (4,), (y,))
    print("cupy RawKernel smoke:", y.get().tolist())
except Exception as exc:
    print("cupy smoke FAILED:", type(exc).__name__, exc)
PY
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# 1) GPU benchmark at 2^26 elements per MLE: copy roofline + every kernel.
#    First, so its "1st call" column shows cold compiles (the tests would warm
#    CuPy's kernel cache).  Every section is guarded and the JSON is written
#    as it goes, so a failing kernel or the time cap keeps what was measured.
step bench && timeout 240 python3 -m zorch_nb bench --device gpu --sizes 26 --repeat 5 \
  --json "$OUT/gpu_bench.json" --plot "$OUT/gpu_bench.png" 2>&1 | tee "$OUT/gpu_bench.log"
# 2) GPU tests (CuPy and Numba-CUDA on the real device), with a time cap and,
#    where pytest-timeout is installed (it is on the H200 image), a per-test cap.
per_test=()
python3 -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)
step tests && timeout 210 python3 -m pytest -m "gpu or cudasim" -q -p no:cacheprovider \
  ${per_test[@]+"${per_test[@]}"} --junitxml="$OUT/gpu_tests.xml" tests 2>&1 | tail -40 \
  | tee "$OUT/gpu_tests.log"
# 3) Registers / shared memory / spills of the GKR kernels (for the note).
if step ptxas && command -v nvcc >/dev/null; then
  python3 -c "from zorch_nb.kernels.cuda_source import assemble; \
from zorch_nb.kernels.field_params import KOALABEAR; \
open('/tmp/zorch_gkr.cu', 'w').write(assemble(KOALABEAR, 'gkr.cu'))" &&
  nvcc -cubin -arch=sm_90 -std=c++17 -Xptxas -v /tmp/zorch_gkr.cu -o /tmp/zorch_gkr.cubin \
    > "$OUT/ptxas.txt" 2>&1 &&
  python3 benchmarks/sass_stats.py /tmp/zorch_gkr.cubin > "$OUT/sass_stats.txt" 2>&1
fi
# 4) compute-sanitizer on a small workload of every kernel family (CuPy pool
#    off, results checked against the CPU): out-of-bounds accesses (memcheck)
#    and shared-memory races (racecheck) on real hardware, which the host
#    emulation cannot show.
if step sanitize && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      python3 benchmarks/sanitize_case.py > "$OUT/sanitizer_$tool.txt" 2>&1
    echo "compute-sanitizer $tool: exit $?" | tee -a "$OUT/sanitizer_$tool.txt"
  done
fi
