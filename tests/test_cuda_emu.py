"""The SIMT emulation itself (``cuda_emu.py``): what the kernel tests rely on.

Shared memory starts poisoned in every block, the thread and block orders
follow ``ZORCH_EMU_ORDER``, and barrier waits that can never be released
abort rather than hang.  Without these the emulated kernel tests could
pass on a missing ``__syncthreads`` (a stale value from the previous block
or a lucky order).  A thread outgrowing its stack faults, and the sanitized
build reports overruns, of the arrays passed in and of a thread's own.
"""
import ctypes
import os
import faulthandler
import multiprocessing
import signal

import numpy as np
import pytest

import cuda_emu
from cuda_host import ptr

_PROBE = r"""
// Each thread logs (block, thread) in the order it runs, then reads shared
// memory nobody in its block wrote and writes it for the next block to see.
// (The emulation runs every thread on one host thread: a plain increment of
// the log position is safe here, as it would not be on a GPU.)
extern "C" __global__ void probe(unsigned int* order, unsigned int* next, unsigned int* seen) {
    __shared__ unsigned int s[64];
    order[(*next)++] = blockIdx.x * blockDim.x + threadIdx.x;
    seen[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
    s[threadIdx.x] = 7u;
}

// Lane 0 waits in a shuffle for lanes that wait at the block barrier, which
// in turn waits for lane 0: neither can be released.
extern "C" __global__ void stuck(unsigned int* out) {
    if (threadIdx.x == 0u) out[0] = __shfl_down_sync(0xffffffffu, 1u, 1u);
    else __syncthreads();
}
"""

GRID, BLOCK = 3, 64


def _run_probe(lib):
    order = np.full(GRID * BLOCK, 0xFFFFFFFF, np.uint32)
    seen = np.zeros(GRID * BLOCK, np.uint32)
    nxt = np.zeros(1, np.uint32)
    lib.emu_probe(ctypes.c_uint(GRID), ctypes.c_uint(BLOCK), ptr(order), ptr(nxt), ptr(seen))
    assert nxt[0] == GRID * BLOCK
    return order, seen


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:3"])
def test_shared_memory_starts_poisoned_in_every_block(monkeypatch, order):
    monkeypatch.setenv("ZORCH_EMU_ORDER", order)
    _, seen = _run_probe(cuda_emu.emulated_code(_PROBE))
    assert (seen == 0xA5A5A5A5).all()  # never the 7 the previous block left


def test_thread_and_block_orders(monkeypatch):
    lib = cuda_emu.emulated_code(_PROBE)
    runs = {}
    for order in ("forward", "reverse", "shuffle:3", "shuffle:4"):
        monkeypatch.setenv("ZORCH_EMU_ORDER", order)
        runs[order] = _run_probe(lib)[0]
    ids = np.arange(GRID * BLOCK, dtype=np.uint32)
    assert (runs["forward"] == ids).all()
    rev = np.concatenate([np.arange(b * BLOCK, (b + 1) * BLOCK)[::-1]
                          for b in range(GRID)][::-1]).astype(np.uint32)
    assert (runs["reverse"] == rev).all()
    for key in ("shuffle:3", "shuffle:4"):
        assert sorted(runs[key]) == list(ids)  # every thread once ...
        assert not (runs[key] == ids).all() and not (runs[key] == rev).all()  # ... mixed
    assert not (runs["shuffle:3"] == runs["shuffle:4"]).all()  # the seed matters
    monkeypatch.setenv("ZORCH_EMU_ORDER", "shuffle:3")
    assert (_run_probe(lib)[0] == runs["shuffle:3"]).all()  # and is reproducible


def _stuck_child():
    # The abort is the expected outcome: without this, pytest's faulthandler
    # (inherited through fork) prints "Fatal Python error: Aborted" and a
    # traceback into the CI log, which reads like a crash.
    faulthandler.disable()
    lib = cuda_emu.emulated_code(_PROBE)
    out = np.zeros(32, np.uint32)
    lib.emu_stuck(ctypes.c_uint(1), ctypes.c_uint(32), ptr(out))


def _exit_code_in_child(target, *args, timeout):
    """Exit code of ``target(*args)`` run in a forked child (-N: killed by
    signal N), or None if it did not end within ``timeout`` seconds."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(timeout)
    if child.exitcode is None:  # a hang: do not leave it behind
        child.kill()
        child.join()
        return None
    return child.exitcode


def test_a_deadlock_aborts_instead_of_hanging():
    cuda_emu.emulated_code(_PROBE)  # compile in this process (cached for the child)
    # killed by SIGABRT (the emulator's deadlock abort), not a hang or another failure
    assert _exit_code_in_child(_stuck_child, timeout=60) == -signal.SIGABRT


# A local array larger than a thread's stack, written from its top down (as
# a deep call chain would grow): it must reach the guard below the stack.
_DEEP = r"""
extern "C" __global__ void deep(unsigned int* out, unsigned int n) {
    volatile unsigned char a[DEEP_BYTES];
    for (long i = (long)sizeof(a) - 1; i >= 0; --i) a[i] = (unsigned char)i;
    out[threadIdx.x] = a[n];
}
"""


def _deep_child(src, nbytes):
    faulthandler.disable()  # the fault is the expected outcome (see _stuck_child)
    lib = cuda_emu.emulated_code(src)
    out = np.zeros(64, np.uint32)
    lib.emu_deep(ctypes.c_uint(2), ctypes.c_uint(64), ptr(out), ctypes.c_uint(nbytes - 3))
    # every thread of both blocks wrote its whole array
    raise SystemExit(0 if (out == (nbytes - 3) % 256).all() else 3)


@pytest.mark.parametrize("over", [False, True], ids=["fits", "outgrows"])
def test_a_thread_outgrowing_its_stack_faults(over):
    """Each emulated thread (a fiber) has ``STACK_BYTES`` of stack above an
    inaccessible guard: a kernel needing more faults at once (SIGSEGV) rather
    than writing over the memory below, another fiber's stack or the heap."""
    nbytes = cuda_emu.STACK_BYTES + 4096 if over else cuda_emu.STACK_BYTES // 2
    src = f"#define DEEP_BYTES {nbytes}\n" + _DEEP
    cuda_emu.emulated_code(src)  # compiled in this process (cached for the child)
    code = _exit_code_in_child(_deep_child, src, nbytes, timeout=120)
    if not over:
        assert code == 0
    elif os.environ.get("ZORCH_EMU_SANITIZE") == "1":
        assert code not in (0, None)  # ASan's handler reports the fault and exits
    else:
        assert code == -signal.SIGSEGV


_OOB = r"""
extern "C" __global__ void read_past(unsigned int* x, unsigned int n) {
    x[threadIdx.x] = x[threadIdx.x + n];  // the last n threads read past the end
}

// A thread's own stack array read past its end after a barrier, that is
// after a switch to the scheduler and back: the array's redzones must
// survive the switch (ASan's swapcontext interceptor cleared them).
__attribute__((noinline)) unsigned int word_at(volatile unsigned int* q, unsigned int i) {
    return q[i];  // (a's size unknown here: ASan's check, not UBSan's)
}
extern "C" __global__ void stack_past(unsigned int* x, unsigned int n) {
    volatile unsigned int a[4] = {1u, 2u, 3u, 4u};
    __syncthreads();
    x[threadIdx.x] = word_at(a, 3u + n);
}
"""

_OOB_CHILD = """
import ctypes, sys
import numpy as np
import cuda_emu
from cuda_host import ptr
lib = cuda_emu.emulated_code(cuda_emu_source)
x = np.zeros(32, np.uint32)
getattr(lib, sys.argv[2])(ctypes.c_uint(1), ctypes.c_uint(32), ptr(x), ctypes.c_uint(int(sys.argv[1])))
print("finished")
"""


@pytest.mark.parametrize("past", [0, 1], ids=["in-bounds", "one-past"])
@pytest.mark.parametrize("kernel,report", [("emu_read_past", "heap-buffer-overflow"),
                                           ("emu_stack_past", "stack-buffer-overflow")],
                         ids=["array", "thread-stack"])
def test_sanitized_build_catches_an_out_of_bounds_read(tmp_path, past, kernel, report):
    """ZORCH_EMU_SANITIZE=1 (CI's emulated gpu stage): a kernel reading one word
    past a NumPy array, or past an array on its own stack after a barrier,
    aborts with AddressSanitizer's report; in bounds it runs."""
    import pathlib
    import shutil
    import subprocess
    import sys
    gcc = shutil.which("gcc")
    lib = gcc and subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True,
                                 text=True).stdout.strip()
    if not lib or not os.path.isabs(lib) or not os.path.exists(lib):
        pytest.skip("no libasan to preload")
    script = tmp_path / "child.py"
    script.write_text(f"cuda_emu_source = {_OOB!r}\n" + _OOB_CHILD)
    env = dict(os.environ, ZORCH_EMU_SANITIZE="1", LD_PRELOAD=lib,
               ASAN_OPTIONS="detect_leaks=0",
               PYTHONPATH=str(pathlib.Path(__file__).parent))
    res = subprocess.run([sys.executable, str(script), str(past), kernel], env=env,
                         capture_output=True, text=True, timeout=300)
    if past:
        assert res.returncode != 0 and report in res.stderr, res.stderr[-2000:]
    else:
        assert res.returncode == 0 and "finished" in res.stdout, res.stderr[-2000:]


def test_the_fake_cupy_answers_only_names_cupy_has():
    """The fake answers unfaked names with NumPy's, but only names in CuPy's API
    (cupy_api.txt): a NumPy-only function or ndarray method fails here as it
    would on a GPU, instead of passing every emulated test."""
    fake = cuda_emu.fake_cupy([])
    x = fake.asarray(np.arange(6, dtype=np.uint32))
    assert int(fake.add(x, x).sum().get()) == 30  # listed: NumPy's, wrapped
    assert fake.linalg.norm is not None
    for refused, get in (("cupy.busday_count", lambda: fake.busday_count),
                         ("cupy.ndarray.setflags", lambda: x.setflags),
                         ("cupy.linalg.multi_dot", lambda: fake.linalg.multi_dot)):
        with pytest.raises(AttributeError, match=refused.replace(".", r"\.")):
            get()
