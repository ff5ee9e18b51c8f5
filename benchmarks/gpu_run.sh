#!/usr/bin/env bash
# One prepared GPU-machine run: GPU benchmark + GPU tests + compute-sanitizer,
# everything into $OUT.
#
# Here, from the project root:  ../shared/gpu/fetch-wheels.sh   (a numpy 2.4 wheel into .whl)
# Then with the device tool:    carry [".whl"], timeout_s 560, command
#     bash benchmarks/gpu_run.sh
# (it installs the carried numpy itself; sourcing .whl/env.sh first is not
# needed, and harmless).
#
# What comes back (the device tool returns at most 8 files; this writes 6):
#   env.txt          versions, the GPU, a smoke test of both toolchains
#   gpu_bench.json   the bench report, rewritten after every section
#   gpu_bench.log    the bench's output (each section's rows as it ends)
#   gpu_tests.log    the whole pytest output; gpu_tests.xml its junit report
#   sanitizer.txt    compute-sanitizer memcheck and racecheck on a small case
# Then, here: copy the JSON to benchmarks/results/gpu-<date>.json and run
# `python benchmarks/plot_report.py JSON PNG` (the chart: the device's
# matplotlib is built for the numpy this run replaces),
# `python benchmarks/readme_table.py JSON` (the README table) and
# `python benchmarks/targets.py JSON` (issue 6's targets).
# The SASS / register figures come from here too (nvcc 13.0 is the device's;
# see benchmarks/results/README.md), so the run leaves them out.
#
# ZORCH_GPU_STEPS picks the steps (default "bench tests sanitize", most
# important first: a device-tool timeout cuts the tail, and what is under
# $OUT comes back).  Each step has a time cap sent as SIGINT, so the bench
# keeps its JSON and pytest writes its summary and XML (each cap adds up to
# 15 s before a kill where SIGINT is not enough); the caps sum to 510 s
# (smoke 60, info 30, bench 180, tests 160, sanitizer 2 x 40; expect ~300 s),
# under the 560 s call.  A machine start takes minutes of the session's 15, so a
# second call must follow while the machine is still warm (30 s).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/zorch_out}
STEPS=" ${ZORCH_GPU_STEPS:-bench tests sanitize} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cap() { timeout -s INT -k 15 "$@"; }  # SIGINT: Python and pytest wind down and write

# 0) numba-cuda 0.30.4 fails to import under the image's numpy 2.5 (np.row_stack
#    is gone): the carried numpy 2.4 goes into /tmp/site.  Everything imports
#    this checkout (zorch_nb/__init__.py finds kernels/ beside it), so the
#    bench, the tests and the sanitizer share one Numba cache.
if ! PYTHONPATH=/tmp/site python3 -c "import numpy; assert numpy.__version__.startswith('2.4')" \
    2>/dev/null; then  # (a warm machine has it from the last call)
  wheel=$(ls .whl/numpy-2.4*cp312*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$wheel" || echo "numpy wheel install FAILED"
  else
    echo "no .whl/numpy-2.4*cp312*.whl: run ../shared/gpu/fetch-wheels.sh and carry .whl"
  fi
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader
  # one import per line: a failing one must not hide the others
  python3 -c "import numpy; print('numpy', numpy.__version__, numpy.__file__)"
  python3 -c "import numba; print('numba', numba.__version__)"
  python3 -c "import numba_cuda; print('numba-cuda', numba_cuda.__version__)"
  python3 -c "import cupy; print('cupy', cupy.__version__)"
  python3 -c "import zorch_nb; print('zorch_nb', zorch_nb.__version__, zorch_nb.__file__)"
  cap 30 python3 -m zorch_nb info  # devices, threads, caches: the same report a user sends
  # 10-second smoke test of both toolchains on the device, so a broken one
  # (e.g. NVVM emitting a PTX version the driver cannot load) shows up first
  cap 60 python3 - <<'PY'
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
  command -v compute-sanitizer >/dev/null || ls /usr/local/cuda/bin/compute-sanitizer \
    >/dev/null 2>&1 || echo "no compute-sanitizer: step sanitize skipped"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 1) GPU benchmark at 2^26 elements per MLE: copy roofline + every kernel, on
#    the cupy and numba backends.  First, so its "1st call" column shows cold
#    compiles (the tests would warm the caches).  Every section is guarded and
#    the JSON rewritten after each, so a failing kernel or the cap keeps what
#    was measured.
if step bench; then
  echo "== bench"
  cap 180 python3 -m zorch_nb bench --device gpu --sizes 26 --repeat 5 \
    --json "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.log"
  echo "bench: exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_bench.log"
fi

# 2) GPU tests (CuPy and Numba-CUDA on the real device), with a cap and, where
#    pytest-timeout is installed (it is on the H200 image), a per-test cap.
#    The whole output goes to the log; the reply shows its tail.
if step tests; then
  echo "== tests"
  per_test=()
  python3 -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout=120)
  # four workers where pytest-xdist is installed (it is on the H200 image):
  # the Numba-CUDA tests spend most of their time compiling, on the host's
  # 16 cores (checked on the 2-core development machine: the emulated gpu
  # tests and the simulator tests pass under xdist)
  python3 -c "import xdist" 2>/dev/null && per_test+=(-n 4)
  # (a CuPy or Numba-CUDA that cannot reach the device fails the run at once:
  # it would skip every test and look like a pass)
  ZORCH_REQUIRE_CUPY=1 ZORCH_REQUIRE_CUDASIM=1 \
  cap 160 python3 -m pytest -m "gpu or cudasim" -q -rfE --durations=25 -p no:cacheprovider \
    ${per_test[@]+"${per_test[@]}"} --junitxml="$OUT/gpu_tests.xml" tests 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -60
  echo "tests: exit ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_tests.log"
fi

# 3) compute-sanitizer on a small workload of every kernel family (CuPy pool
#    off, results checked against the CPU): out-of-bounds accesses (memcheck)
#    and shared-memory races (racecheck) on real hardware, which the host
#    emulation cannot show.  Both tools into one file.
#    Racecheck is far slower: it takes the shared-memory kernels only
#    (--quick: the pyramids and jagged scans, one field).  API errors that
#    CuPy and Numba handle themselves are not reported (--report-api-errors
#    no), so exit 9 means a memory or race error; the case prints each check
#    as it passes, so a capped run shows how far it got.
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if step sanitize && [ -n "$SANITIZER" ]; then
  echo "== sanitize"
  for tool in memcheck racecheck; do
    quick=()
    [ "$tool" = racecheck ] && quick=(--quick)
    echo "---- compute-sanitizer --tool $tool" >> "$OUT/sanitizer.txt"
    cap 40 "$SANITIZER" --tool "$tool" --error-exitcode 9 --report-api-errors no \
      python3 benchmarks/sanitize_case.py ${quick[@]+"${quick[@]}"} >> "$OUT/sanitizer.txt" 2>&1
    echo "compute-sanitizer $tool: exit $?" | tee -a "$OUT/sanitizer.txt"
  done
fi
ls -la "$OUT"
