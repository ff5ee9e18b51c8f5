"""Run the CUDA C kernels of ``kernels/cuda/*.cu`` on the host, as CUDA code.

The other host tests compile the ``__host__ __device__`` per-slot functions
and serial twins of the block kernels.  This module goes further: it compiles
the ``__global__`` kernels themselves with g++ under a small SIMT emulation:
every thread of a block is a fiber (``ucontext``; ``STACK_BYTES`` of stack
above a guard, so a kernel outgrowing it faults) run by a scheduler,
``__syncthreads`` is a block barrier, ``__shfl_up_sync`` / ``__shfl_down_sync``
exchange values through a per-warp barrier, ``atomicMin`` is a plain
read-modify-write (one fiber runs at a time), ``__shared__`` variables are
shared by the block (blocks run one after another, each starting with its
shared memory poisoned), and ``__CUDA_ARCH__`` is defined so the 8/16-byte
vector loads run too.  ``ZORCH_EMU_ORDER`` picks the order in which threads
and blocks run (forward, reverse, shuffled): a missing barrier or a read of
another block's output gives an order-dependent result.
``ZORCH_EMU_SANITIZE=1`` builds the kernels with AddressSanitizer and UBSan
(run Python with ``LD_PRELOAD=$(gcc -print-file-name=libasan.so)
ASAN_OPTIONS=detect_leaks=0``): a read or write past the end of a NumPy-backed
array aborts with a report, the host stand-in for compute-sanitizer.

Any translation unit works: ``extern "C"`` kernels are wrapped by parsing
their signatures, the template kernels of gkr.cu by the table below.

:func:`fake_cupy` then stands in for CuPy under the real launchers
(``kernels/gkr_cupy.py``, ``field_cupy.py``, ``graph_cupy.py``): ``memoize``,
``RawModule`` (whose functions run the emulated kernels with the grid, block
and argument tuple the launcher passes, structs included), and a NumPy-backed
array type with ``.data.ptr``; :func:`install_session_fakes` adds ``cupy.cuda``
and ``cupyx`` for the ``gpu``-marked tests (``ZORCH_EMULATE_CUPY=1``).  So the
launch geometry, the argument order, the struct images, the barriers, the
shared-memory double buffering and the warp shuffles all run here, without a
GPU.

Two devices are modelled, so the object layer's device handling runs too:
``cupy.cuda.Device(i)`` switches the current device, an array belongs to the
device current when its memory was allocated (a view to its base's), memoized
modules are per device, and a launch refuses an array of another device or a
function of another device's module (on a GPU: an illegal address, or an
invalid resource handle).

What it cannot show: timing, memory-ordering subtleties of real hardware
(every emulated load sees every earlier store), and NVRTC itself (the NVRTC
tests cover compilation).
"""
import ctypes
import functools
import os
import re
import sys
import time
import types
import warnings
import weakref

import numpy as np

from cuda_host import compile_text
from cupy_api import names as cupy_api_names
from zorch_nb.kernels.cuda_source import assemble
from zorch_nb.kernels.field_params import FIELDS

#: Bytes of stack each emulated CUDA thread (a fiber) has.
STACK_BYTES = 64 * 1024

PRELUDE = f"#define ZEMU_STACK_BYTES {STACK_BYTES}\n" + r"""
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
// Every __shared__ variable lands in one section, so that each block can
// start with its shared memory poisoned (see zemu_launch).
#define __shared__ static __attribute__((section("zemu_shared")))
#define __align__(n) __attribute__((aligned(n)))
// Aligned as CUDA aligns them, so UBSan (ZORCH_EMU_SANITIZE=1) reports a vector
// access through a pointer that is not: the launch-time alignment checks must
// route such arrays to the 4-byte path.
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct dim3 { unsigned int x, y, z; };
inline dim3 threadIdx = {0u, 0u, 0u};
inline dim3 blockIdx = {0u, 0u, 0u};
inline dim3 blockDim = {1u, 1u, 1u};
inline dim3 gridDim = {1u, 1u, 1u};

// The threads of a block are fibers (ucontext) on one host thread, run by a
// scheduler: each runs until it waits at a barrier or finishes; a block
// barrier (__syncthreads) releases its waiters when every live thread of the
// block waits there, a warp barrier (inside a shuffle) when every live thread
// of the warp does.  Deterministic, and a barrier a thread never reaches is a
// detected deadlock (abort), not a hang.
//
// The order in which the runnable threads of a round run, and the blocks of
// a grid, comes from ZORCH_EMU_ORDER: "forward" (default), "reverse" or
// "shuffle:<seed>" (a fresh permutation every round, seeded per launch).  A
// missing barrier between a write and another thread's read of shared
// memory, or a block reading what another block of the same launch writes,
// gives a result that depends on the order: running the kernels under
// several orders exposes it, where one fixed order could hide it.

// Bounds of the section holding the __shared__ variables (the linker
// defines them; weak, so a unit without shared memory links too).
extern "C" char __start_zemu_shared[] __attribute__((weak));
extern "C" char __stop_zemu_shared[] __attribute__((weak));

namespace zemu {
enum State { RUNNABLE, AT_BLOCK, AT_WARP, DONE };
inline int order_kind = 0;  // 0 forward, 1 reverse, 2 shuffle
inline unsigned long long rng = 0;
inline void read_order() {
    const char* s = getenv("ZORCH_EMU_ORDER");
    if (s == nullptr || strcmp(s, "forward") == 0) { order_kind = 0; return; }
    if (strcmp(s, "reverse") == 0) { order_kind = 1; return; }
    if (strncmp(s, "shuffle:", 8) != 0) abort();  // an unknown order is a test bug
    order_kind = 2;
    rng = strtoull(s + 8, nullptr, 10) * 0x9E3779B97F4A7C15ull + 1u;
}
inline std::vector<unsigned int> order(unsigned int n) {
    std::vector<unsigned int> v(n);
    std::iota(v.begin(), v.end(), 0u);
    if (order_kind == 1) std::reverse(v.begin(), v.end());
    if (order_kind == 2)
        for (unsigned int i = n; i > 1; --i) {  // Fisher-Yates with xorshift64
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            std::swap(v[i - 1], v[rng % i]);
        }
    return v;
}
inline ucontext_t scheduler;
inline std::vector<ucontext_t> fibers;
inline std::vector<char*> stacks;
inline std::vector<State> state;
inline unsigned int current = 0;
inline std::function<void()> body;
inline unsigned long long xchg[1024];
// A fiber's stack: STACK bytes (the kernels peaked at ~6 KiB under ASan),
// above GUARD inaccessible bytes, so a kernel that outgrows its stack faults
// at once instead of writing over another fiber's.
constexpr size_t STACK = ZEMU_STACK_BYTES;
constexpr size_t GUARD = 64 * 1024;
// ASan's swapcontext interceptor clears the shadow of the target context's
// whole stack (uc_stack) at every switch: that made the sanitized emulation
// ~7x slower (at 256 KiB stacks) and erased the redzones of the arrays on a
// thread's stack at each barrier, so an overrun of one went unreported.  So
// a fiber's stack shadow is cleared here once, when a thread starts on it
// (an earlier thread's unfinished entry frame may have left poison there),
// and its uc_stack is emptied after makecontext: the switches leave it be.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
inline void zemu_unpoison(char* p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
inline void zemu_unpoison(char*, size_t) {}
#endif
inline char* new_stack() {
    char* m = (char*)mmap(nullptr, GUARD + STACK, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == (char*)MAP_FAILED || mprotect(m, GUARD, PROT_NONE) != 0) abort();
    return m + GUARD;
}

inline void wait(State s) {
    state[current] = s;
    swapcontext(&fibers[current], &scheduler);
}
inline void entry() {
    body();
    state[current] = DONE;
    swapcontext(&fibers[current], &scheduler);
}
// Run one block of n threads to completion.
inline void run_block(unsigned int n) {
    while (stacks.size() < n) stacks.push_back(new_stack());
    fibers.assign(n, ucontext_t{});
    state.assign(n, RUNNABLE);
    for (unsigned int t = 0; t < n; ++t) {
        getcontext(&fibers[t]);
        fibers[t].uc_stack.ss_sp = stacks[t];
        fibers[t].uc_stack.ss_size = STACK;
        fibers[t].uc_link = nullptr;
        zemu_unpoison(stacks[t], STACK);  // what an earlier block's fiber left there
        makecontext(&fibers[t], entry, 0);
        fibers[t].uc_stack.ss_size = 0;  // (makecontext has used it: see zemu_unpoison)
    }
    for (;;) {
        bool ran = false;
        for (unsigned int t : order(n)) {
            if (state[t] != RUNNABLE) continue;
            current = t;
            threadIdx = {t, 0u, 0u};
            swapcontext(&scheduler, &fibers[t]);
            ran = true;
        }
        bool all_done = true, released = false;
        for (unsigned int w = 0; w < n; w += 32) {  // warps whose live lanes all wait
            bool full = true, any = false;
            for (unsigned int t = w; t < w + 32 && t < n; ++t) {
                if (state[t] == DONE) continue;
                any = true;
                full = full && state[t] == AT_WARP;
            }
            if (any && full) {
                for (unsigned int t = w; t < w + 32 && t < n; ++t)
                    if (state[t] == AT_WARP) state[t] = RUNNABLE;
                released = true;
            }
        }
        bool block_full = true, block_any = false;
        for (unsigned int t = 0; t < n; ++t) {
            if (state[t] != DONE) all_done = false;
            if (state[t] == DONE) continue;
            block_any = true;
            block_full = block_full && state[t] == AT_BLOCK;
        }
        if (all_done) return;
        if (block_any && block_full) {
            for (unsigned int t = 0; t < n; ++t)
                if (state[t] == AT_BLOCK) state[t] = RUNNABLE;
            released = true;
        }
        if (!released && !ran) abort();  // deadlock: a barrier some thread never reaches
    }
}
}  // namespace zemu

inline void __syncthreads() { zemu::wait(zemu::AT_BLOCK); }
// Lane `lane + off` (off may be negative) of this thread's warp, or this
// thread's own value when that lane does not exist (CUDA's rule).
template <class T>
T zemu_shfl(T v, long off) {
    static_assert(sizeof(T) <= 8, "one exchange word per thread");
    const unsigned int t = threadIdx.x, lane = t & 31u;
    memcpy(&zemu::xchg[t], &v, sizeof(T));
    zemu::wait(zemu::AT_WARP);  // every lane has published
    T r = v;
    const long src = (long)lane + off;
    if (src >= 0 && src < 32) memcpy(&r, &zemu::xchg[t - lane + src], sizeof(T));
    zemu::wait(zemu::AT_WARP);  // every lane has read
    return r;
}
template <class T> T __shfl_down_sync(unsigned int, T v, unsigned int d) { return zemu_shfl(v, (long)d); }
template <class T> T __shfl_up_sync(unsigned int, T v, unsigned int d) { return zemu_shfl(v, -(long)d); }
// The fibers run one at a time and switch only at barriers, so a plain
// read-modify-write is atomic here.
inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) {
    const unsigned long long old = *a;
    if (v < old) *a = v;
    return old;
}
template <class K>
void zemu_launch(unsigned int grid, unsigned int block, K kernel) {
    if (block % 32u != 0u || block > 1024u) abort();  // the launchers use whole warps
    gridDim = {grid, 1u, 1u};
    blockDim = {block, 1u, 1u};
    // Blocks run one after another, so a block's __shared__ statics are
    // never used by two blocks at once.  Each block starts with them set to a
    // poison pattern, as real shared memory starts undefined: a read of
    // shared memory that no thread of the block wrote first (e.g. a missing
    // barrier) then gives garbage instead of a stale value left by the
    // previous block or launch, which could be the right one.
    zemu::body = [&] { kernel(); };
    zemu::read_order();
    for (unsigned int b : zemu::order(grid)) {
        if (__start_zemu_shared != nullptr)
            memset(__start_zemu_shared, 0xA5, __stop_zemu_shared - __start_zemu_shared);
        blockIdx = {b, 0u, 0u};
        zemu::run_block(block);
    }
}
"""

# kernel -> parameter list (type names) in launch order; S:<struct> = a struct
# passed by value (the wrapper receives a pointer to its host image)
KERNELS = {
    "zorch_gkr_fold_dense": ["P"] * 8 + ["u64"],
    "zorch_gkr_jagged": ["P", "P", "P", "u32"] + ["P"] * 8 + ["u64", "u64"],
    "zorch_gkr_pyramid_dense": ["P"] * 4 + ["S:zorch_gkr_layers", "u32", "u32"],
    "zorch_gkr_jagged_tail": ["P", "P", "u32"] + ["P"] * 4 + ["u64", "S:zorch_gkr_tail", "u32"],
    "zorch_gkr_jagged_chunk": ["S:zorch_gkr_chunk", "P", "u32"] + ["P"] * 4 + ["u64"],
}
_C = {"P": "void*", "i32": "int", "u32": "unsigned int", "u64": "unsigned long long"}


def _wrapper(symbol, call, params):
    """``extern "C" symbol(grid, block, args...)`` launching ``call`` under the emulation."""
    decl = [f"const {k[2:]}* a{i}" if k.startswith("S:") else f"{_C[k]} a{i}"
            for i, k in enumerate(params)]
    return (f'extern "C" void {symbol}(unsigned int grid, unsigned int block, '
            f'{", ".join(decl)}) {{\n    zemu_launch(grid, block, [&] {{ '
            f'{_cast_call(call, params)} }});\n}}\n')


def _cast_call(call, params):
    args = []
    for i, kind in enumerate(params):
        args.append(f"*a{i}" if kind.startswith("S:") else f"zemu_arg(a{i})")
    return f"{call}({', '.join(args)});"


_ARG_HELPER = r"""
// A void* converts to whatever pointer type the kernel parameter has.
struct zemu_ptr { void* p; template <class T> operator T*() const { return (T*)p; } };
inline zemu_ptr zemu_arg(void* p) { return {p}; }
inline int zemu_arg(int v) { return v; }
inline unsigned int zemu_arg(unsigned int v) { return v; }
inline unsigned long long zemu_arg(unsigned long long v) { return v; }
"""


def _symbol(kernel, mode=None, vec=None):
    return f"emu_{kernel}" if mode is None else f"emu_{kernel}_{mode >> 1}{mode & 1}{int(vec)}"


_EXTERN = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)')


def _param_kind(decl: str) -> str:
    decl = decl.strip()
    if "*" in decl:
        return "P"
    if decl.startswith("const zorch_gkr_"):
        return "S:" + decl.split()[1]
    words = decl.split()[:-1]  # drop the name
    kind = {"int": "i32", "unsigned int": "u32", "zorch_u64": "u64",
            "unsigned long long": "u64"}.get(" ".join(words))
    if kind is None:
        raise ValueError(f"the emulation does not know the parameter type of {decl!r}")
    return kind


def plain_kernels(code: str) -> dict:
    """``extern "C" __global__`` kernels of a translation unit -> parameter kinds."""
    return {name: [_param_kind(d) for d in params.split(",")]
            for name, params in _EXTERN.findall(code)}


def _wrappers(code: str) -> str:
    out = [_ARG_HELPER]
    if "zorch_gkr_fold_dense" in code:  # gkr.cu: every template instance the launchers name
        for kernel, params in KERNELS.items():
            for mode in range(4):
                for vec in (False, True):
                    call = f"{kernel}<{mode >> 1}, {mode & 1}, {'true' if vec else 'false'}>"
                    out.append(_wrapper(_symbol(kernel, mode, vec), call, params))
    for kernel, params in plain_kernels(code).items():
        out.append(_wrapper(_symbol(kernel), kernel, params))
    return "\n".join(out)


def emulated_library(field_name: str, kernel_file: str = "gkr.cu") -> ctypes.CDLL:
    """``kernel_file`` for ``field_name`` compiled as emulated CUDA (cached by content)."""
    return emulated_code(assemble(FIELDS[field_name], kernel_file))


def emulated_code(code: str) -> ctypes.CDLL:
    """Any complete CUDA C translation unit compiled as emulated CUDA (cached by content)."""
    src = PRELUDE + code + "\n" + _wrappers(code)
    flags = ("-std=c++17", "-fno-strict-aliasing")
    if os.environ.get("ZORCH_EMU_SANITIZE") == "1":  # see the module docstring
        flags += ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                  "-fno-omit-frame-pointer")
    return compile_text(src, flags=flags)


# ---------------------------------------------------------------------------
# a NumPy-backed stand-in for CuPy, enough for kernels/gkr_cupy.py
# ---------------------------------------------------------------------------

_SYNC = {"allowed": True}


def _check_sync(what):
    """Device->host reads are synchronizations: refused under allow_synchronize(False)."""
    if not _SYNC["allowed"]:
        raise RuntimeError(f"device synchronization ({what}) under "
                           f"cupyx.allow_synchronize(False)")


#: The emulated devices: how many, and the current one (one thread uses them).
DEVICE_COUNT = 2
_CURRENT = {"device": 0}
#: id(memory owner) -> its device.  An owner is first seen when an array of
#: its memory is wrapped, which is when it was allocated (a view's owner was
#: seen with the array it views; NumPy's own temporaries are new): so the
#: current device then is its device.  An entry goes with its owner.
_OWNER_DEVICE: dict = {}


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _note_owner(a: np.ndarray) -> None:
    owner = _owner(a)
    if id(owner) not in _OWNER_DEVICE:
        _OWNER_DEVICE[id(owner)] = _CURRENT["device"]
        weakref.finalize(owner, _OWNER_DEVICE.pop, id(owner), None)


def device_of_memory(a: np.ndarray) -> int:
    return _OWNER_DEVICE.get(id(_owner(a)), 0)


class _Data:
    def __init__(self, ptr, device_id=0):
        self.ptr = ptr
        self.device_id = device_id


class _MemoryPointer:
    """``cupy.cuda.MemoryPointer`` of :func:`_alloc`: bytes of one host
    allocation from ``offset`` on; ``+`` moves the offset, as CuPy's does."""

    def __init__(self, memory, offset=0):
        self._memory, self._offset = memory, offset

    ptr = property(lambda self: self._memory.ctypes.data + self._offset)
    device_id = property(lambda self: device_of_memory(self._memory))

    def __add__(self, offset):
        return _MemoryPointer(self._memory, self._offset + int(offset))

    def view(self, shape, dtype):
        """The host array of ``cupy.ndarray(shape, dtype, self)`` (C order);
        past the allocation's end is an error here, where a GPU would read
        or write someone else's memory."""
        dtype, shape = np.dtype(dtype), (tuple(shape) if np.ndim(shape) else (int(shape),))
        count = int(np.prod(shape, dtype=np.int64))
        end = self._offset + count * dtype.itemsize
        assert 0 <= self._offset and end <= self._memory.size, \
            f"an array of {shape} {dtype} at byte {self._offset} of a {self._memory.size}-byte " \
            f"allocation"
        return self._memory[self._offset:end].view(dtype).reshape(shape)


def _alloc(size):
    """``cupy.cuda.alloc``: ``size`` bytes on the current device, each 0xA5 (as
    :meth:`EmuXp.empty` fills them), 256-byte aligned as cudaMalloc's."""
    raw = np.full(int(size) + 256, 0xA5, np.uint8)
    start = -raw.ctypes.data % 256
    memory = raw[start:start + int(size)]
    _note_owner(memory)
    return _MemoryPointer(memory)


class EmuArray:
    """A 'device' array: a NumPy array whose ``.data.ptr`` the kernels write through."""

    __module__ = "cupy._emulated"  # array_kind() and tt_masks read it as a CuPy array

    def __init__(self, host, dtype=None, memptr=None):
        if memptr is not None:  # cupy.ndarray(shape, dtype, memptr): a view of the allocation
            host = memptr.view(host, dtype)
        elif dtype is not None or not isinstance(host, np.ndarray):
            raise AssertionError("the emulation makes device arrays of host arrays or of "
                                 "(shape, dtype, memptr)")  # CuPy would allocate: not used
        self._a = host
        _note_owner(host)

    @property
    def data(self):
        return _Data(self._a.ctypes.data, device_of_memory(self._a))

    @property
    def device(self):
        return _Device(device_of_memory(self._a))

    def _set_shape(self, shape):  # CuPy lets a caller reshape an array in place
        with warnings.catch_warnings():  # NumPy 2.5 deprecates it on the host array
            warnings.simplefilter("ignore", DeprecationWarning)
            self._a.shape = shape

    shape = property(lambda self: self._a.shape, _set_shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: self._a.flags)

    def __getitem__(self, key):  # a device index array indexes, as on CuPy
        key = _unwrap(key)
        got = self._a[key]
        if isinstance(got, np.generic):
            # An integer index gives CuPy's 0-d *view* (NumPy's scalar is a
            # copy): writes through it (`out=d[0]`) must reach the array
            got = self._a[(key if isinstance(key, tuple) else (key,)) + (Ellipsis,)]
        return EmuArray(got)

    def reshape(self, *shape):  # a view where possible, else a copy (as CuPy does)
        return EmuArray(self._a.reshape(*shape))

    def get(self):
        _check_sync("get()")
        return self._a.copy()

    def __setitem__(self, key, value):
        self._a[_unwrap(key)] = _unwrap(value)

    def __getattr__(self, name):  # anything else: NumPy's, results re-wrapped
        if name in ("__array_interface__", "__array_struct__"):
            raise AttributeError(name)  # not a host array (see __array__)
        return _wrap(getattr(self._a, _in_cupy("ndarray", name)))

    def __array__(self, *args, **kwargs):
        # As CuPy: np.asarray(device array) is an error, not a silent copy, so a
        # host path handed a device array fails here as it would on the GPU.
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __bool__(self):
        _check_sync("bool()")
        return bool(self._a)

    # scalar reads of a (0-d or one-element) device array copy to the host, as
    # on CuPy: each is a synchronization
    def __int__(self):
        _check_sync("int()")
        return int(self._a)

    def __float__(self):
        _check_sync("float()")
        return float(self._a)

    def __index__(self):
        _check_sync("index()")
        return self._a.__index__()

    def item(self, *args):
        _check_sync("item()")
        return self._a.item(*args)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        _check_sync("iteration")
        return iter(_wrap(list(self._a)))


def _forward(op):
    def method(self, *other):
        return _wrap(getattr(self._a, op)(*_unwrap(other)))
    method.__name__ = op
    return method


# elementwise operators, as on CuPy arrays (no __array__: like CuPy, no silent
# conversion to a host array)
for _op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__",
            "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__mod__",
            "__floordiv__", "__and__", "__or__", "__xor__", "__invert__", "__neg__",
            "__lshift__", "__rshift__", "__truediv__", "__rtruediv__", "__pow__",
            "__rpow__", "__matmul__", "__rmatmul__", "__abs__", "__pos__"):
    setattr(EmuArray, _op, _forward(_op))


class _ModuleProxy:
    def __init__(self, module):
        self._m = module

    def __getattr__(self, name):
        return _wrap(getattr(self._m, _in_cupy(self._m.__name__.split(".")[-1], name)))


_CUPY_API = cupy_api_names()


def _in_cupy(space: str, name: str) -> str:
    """``name`` if CuPy has it in ``space`` (``"cupy"``, ``"linalg"``, ...,
    ``"ndarray"``; tests/cupy_api.txt), else the AttributeError CuPy would
    raise: NumPy answers for the emulation, and a NumPy-only name would pass
    here and fail on a GPU.  Private and dunder names are NumPy's business."""
    full = "cupy." + name if space == "cupy" else f"cupy.{space}.{name}"
    if name.startswith("_") or full in _CUPY_API:
        return name
    raise AttributeError(f"{full} is not in CuPy's API (tests/cupy_api.txt): the emulation "
                         f"answers with NumPy's, a GPU would not")


def _unwrap(x):
    if isinstance(x, EmuArray):
        return x._a
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    return x


def _wrap(x):
    if isinstance(x, np.ndarray):
        return EmuArray(x)
    if isinstance(x, np.generic):  # a reduction's result stays on the device (0-d), as
        return EmuArray(np.asarray(x))  # on CuPy: reading it is a synchronization
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, types.ModuleType):  # cupy.linalg, cupy.random, ...: NumPy's, wrapped
        return _ModuleProxy(x)
    if callable(x) and not isinstance(x, type):  # functions and ufuncs; dtypes stay types
        return lambda *a, **k: _wrap(x(*_unwrap(a), **{n: _unwrap(v) for n, v in k.items()}))
    return x


class EmuXp:
    """The array-module calls the fused paths make (``xp``)."""

    ndarray = EmuArray  # ndarray(shape, dtype, memptr) over cuda.alloc's memory
    cuda = types.SimpleNamespace(alloc=_alloc)

    @staticmethod
    def asarray(x, dtype=None):
        if isinstance(x, EmuArray):
            return x if dtype is None or x.dtype == dtype else EmuArray(x._a.astype(dtype))
        if hasattr(x, "__cuda_array_interface__") and hasattr(x, "_ary"):
            # a Numba simulator device array: a view of the same memory, as
            # cupy.asarray of a foreign CUDA array is
            return EmuArray(x._ary) if dtype is None else EmuArray(x._ary.astype(dtype))
        return EmuArray(np.array(x, dtype=dtype, copy=True))

    @staticmethod
    def ascontiguousarray(x):
        x = EmuXp.asarray(x)
        return x if x.flags.c_contiguous else EmuArray(np.ascontiguousarray(x._a))

    @staticmethod
    def split(x, sections):  # views of one device buffer, as cupy.split's
        return [EmuArray(v) for v in np.split(x._a, sections)]

    @staticmethod
    def empty(shape, dtype):
        # filled with a marker, so a slot no kernel writes shows up
        # (every byte 0xA5: 0xA5A5A5A5 in a uint32 word, negative in signed
        # ones, valid in every integer dtype)
        dtype = np.dtype(dtype)
        if dtype.kind == "b":
            return EmuArray(np.ones(shape, dtype))
        count = int(np.prod(shape, dtype=np.int64))
        return EmuArray(np.full(count * dtype.itemsize, 0xA5, np.uint8).view(dtype)
                        .reshape(shape))


def _ctypes_arg(a):
    if isinstance(a, EmuArray):
        return ctypes.c_void_p(a.data.ptr)
    if isinstance(a, np.ndarray):  # a struct's host image (1-element structured array)
        assert a.dtype.names and a.size == 1
        return ctypes.c_void_p(a.ctypes.data)
    if isinstance(a, np.int32):
        return ctypes.c_int(int(a))
    if isinstance(a, np.uint32):
        return ctypes.c_uint(int(a))
    if isinstance(a, np.uint64):
        return ctypes.c_ulonglong(int(a))
    raise TypeError(f"the launcher passed an argument of type {type(a).__name__}")


#: What CuPy passes for each parameter kind: a device array's pointer, or a
#: NumPy scalar / size-1 structured array copied by value with its own size
#: (so a scalar of the wrong width would shift every later parameter).
_ARG_TYPES = {"P": "EmuArray", "i32": "int32", "u32": "uint32", "u64": "uint64"}


def _check_args(name, params, args):
    """The launch's arguments have the kinds of ``name``'s parameters, in order."""
    assert len(args) == len(params), f"{name}: {len(args)} arguments for {len(params)} parameters"
    for i, (kind, a) in enumerate(zip(params, args)):
        if kind.startswith("S:"):
            ok = isinstance(a, np.ndarray) and a.dtype.names is not None and a.size == 1
        else:
            ok = type(a).__name__ == _ARG_TYPES[kind]
        assert ok, f"{name}: argument {i} is a {type(a).__name__}, the parameter is {kind}"


def _check_devices(name, function_device, args):
    """What a GPU would fault on: a launch on another device than the
    function's module, or with an array of another device."""
    dev = _CURRENT["device"]
    if function_device != dev:
        raise RuntimeError(f"{name}: a function of device {function_device}'s module "
                           f"launched on device {dev} (invalid resource handle)")
    for i, a in enumerate(args):
        if isinstance(a, EmuArray) and a.data.device_id != dev:
            raise RuntimeError(f"{name}: argument {i} lives on device {a.data.device_id}, "
                               f"launched on device {dev} (illegal address)")


class _Function:
    def __init__(self, lib, name, launches, plain):
        m = re.fullmatch(r"(\w+)<(\d), (\d), (true|false)>", name)
        if m:
            kernel, mode, vec = m.group(1), 2 * int(m.group(2)) + int(m.group(3)), m.group(4)
            self.symbol = _symbol(kernel, mode, vec == "true")
            self.params = KERNELS[kernel]
        else:
            self.symbol = _symbol(name)
            self.params = plain[name]
        self.fn, self.name, self.launches = getattr(lib, self.symbol), name, launches
        self.device = _CURRENT["device"]  # (a module is loaded on one device)

    def __call__(self, grid, block, args):
        assert len(grid) == 1 and len(block) == 1
        _check_args(self.name, self.params, args)
        _check_devices(self.name, self.device, args)
        cargs = [ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), *map(_ctypes_arg, args)]

        def launch():
            self.launches.append(self.name)
            self.fn(*cargs)
        if _CAPTURE["calls"] is not None:  # a stream is capturing: record, run at replay
            _CAPTURE["calls"].append(launch)
        else:
            launch()


#: Launches recorded while a fake stream captures a graph (None: not capturing).
_CAPTURE = {"calls": None}


class _Stream:
    """``cupy.cuda.Stream`` with CUDA-graph capture: launches between
    ``begin_capture`` and ``end_capture`` are recorded and replayed by the
    returned graph's ``launch``."""

    def __init__(self, non_blocking=False):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass

    def begin_capture(self, mode=None):
        assert _CAPTURE["calls"] is None, "nested capture"
        _CAPTURE["calls"] = []

    def end_capture(self):
        calls, _CAPTURE["calls"] = _CAPTURE["calls"], None
        return types.SimpleNamespace(launch=lambda stream=None: [c() for c in calls])


# cupy.cuda.Stream.null: the legacy default stream (one stream here, as all are)
_Stream.null = _Stream()


class _Device:
    """``cupy.cuda.Device``: ``Device()`` the current one, ``Device(i)`` device
    ``i``; as a context manager it is current inside the block."""

    def __init__(self, i=None):
        i = _CURRENT["device"] if i is None else int(i)
        if not 0 <= i < DEVICE_COUNT:
            raise RuntimeError(f"cudaErrorInvalidDevice: invalid device ordinal {i}")
        self.id = i
        self._before = []

    def use(self):
        _CURRENT["device"] = self.id

    def __enter__(self):
        self._before.append(_CURRENT["device"])
        self.use()
        return self

    def __exit__(self, *exc):
        _CURRENT["device"] = self._before.pop()
        return False

    def __eq__(self, other):
        return isinstance(other, _Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)


def _runtime_namespace(**more):
    """``cupy.cuda.runtime``: the current device and its setter."""
    return types.SimpleNamespace(getDevice=lambda: _CURRENT["device"],
                                 setDevice=lambda i: _Device(i).use(), **more)


def fake_cupy(launches: list) -> types.ModuleType:
    """A ``cupy`` module for kernels/gkr_cupy.py that runs the emulated kernels."""
    mod = types.ModuleType("cupy")

    def memoize(for_each_device=False):
        def deco(fn):
            cache = {}

            @functools.wraps(fn)  # (as CuPy's keeps the name and docstring)
            def wrapped(*args):
                key = (_CURRENT["device"] if for_each_device else None, args)
                if key not in cache:
                    cache[key] = fn(*args)
                return cache[key]
            return wrapped
        return deco

    class RawModule:
        def __init__(self, code, options=(), name_expressions=()):
            assert tuple(options) == ("-std=c++17",), options
            self.names = set(name_expressions)
            self.lib = emulated_code(code)
            self.plain = plain_kernels(code)

        def get_function(self, name):
            assert "<" not in name or name in self.names, name  # as NVRTC would insist
            return _Function(self.lib, name, launches, self.plain)

    mod.memoize = memoize
    mod.RawModule = RawModule
    mod.ndarray = EmuArray
    # what the object layer calls on CuPy data; any other name is NumPy's
    mod.asarray, mod.empty = EmuXp.asarray, EmuXp.empty
    mod.ascontiguousarray, mod.split = EmuXp.ascontiguousarray, EmuXp.split
    mod.cuda = types.SimpleNamespace(Device=_Device, runtime=_runtime_namespace(), alloc=_alloc)
    mod.__getattr__ = lambda name: _wrap(getattr(np, _in_cupy("cupy", name)))
    return mod


def import_cupy_launchers(monkeypatch, launches: list, family: str = "gkr"):
    """kernels/<family>_cupy.py imported against :func:`fake_cupy` (undone after the test)."""
    import importlib
    name = f"zorch_nb.kernels.{family}_cupy"
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(launches))
    # gkr_cupy imports field_cupy; graph replays hash their buffers with merkle_cupy
    others = ("zorch_nb.kernels.field_cupy", "zorch_nb.kernels.merkle_cupy")
    for mod in (name,) + others:
        monkeypatch.delitem(sys.modules, mod, raising=False)
    module = importlib.import_module(name)
    for mod in (name,) + others:
        monkeypatch.delitem(sys.modules, mod, raising=False)
    return module


def emulate(monkeypatch, family: str) -> tuple:
    """``(kernels/<family>_cupy.py over the emulation, list of launched kernel names)``."""
    launches = []
    return import_cupy_launchers(monkeypatch, launches, family), launches


def install_session_fakes() -> list:
    """Install fake ``cupy`` / ``cupyx`` modules for a whole test session.

    With ``ZORCH_EMULATE_CUPY=1`` (see conftest.py) the ``gpu``-marked tests run
    against the emulated kernels: ``cupy.cuda`` reports two devices, streams
    synchronize trivially, ``cupyx.allow_synchronize(False)`` makes every
    device->host read (``get()``, ``bool()``, iteration) raise, as CuPy does.
    Returns the list the launches are recorded in.
    """
    import contextlib
    launches = []
    mod = fake_cupy(launches)
    stream = types.SimpleNamespace(synchronize=lambda: None)

    class Event:  # host clock: kernels run synchronously here
        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    mod.cuda = types.SimpleNamespace(
        runtime=_runtime_namespace(
            getDeviceCount=lambda: DEVICE_COUNT,
            getDeviceProperties=lambda i: {"name": b"host emulation of CUDA (cuda_emu.py)"}),
        get_current_stream=lambda: stream,
        Device=_Device,
        alloc=_alloc,
        Event=Event,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
        set_allocator=lambda allocator=None: None,  # no pool to switch off here
        Stream=_Stream)
    mod.asnumpy = lambda x: x.get() if isinstance(x, EmuArray) else np.asarray(x)

    @contextlib.contextmanager
    def allow_synchronize(allow):
        before, _SYNC["allowed"] = _SYNC["allowed"], bool(allow)
        try:
            yield
        finally:
            _SYNC["allowed"] = before

    cupyx = types.ModuleType("cupyx")
    cupyx.allow_synchronize = allow_synchronize
    sys.modules["cupy"], sys.modules["cupyx"] = mod, cupyx
    _numba_sees_emulated_arrays()
    return launches


def _numba_sees_emulated_arrays() -> None:
    """Under the CUDA simulator, backend="numba" on an emulated CuPy array wraps
    the same host memory (the simulator has no ``as_cuda_array``)."""
    try:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        from zorch_nb.kernels import field_cuda_numba, gkr_cuda_numba
    except ImportError:  # no numba-cuda, or not the simulator: those tests skip
        return
    original = field_cuda_numba.as_device

    def as_device(x, stream=0):
        return FakeCUDAArray(x._a) if isinstance(x, EmuArray) else original(x, stream)
    field_cuda_numba.as_device = gkr_cuda_numba.as_device = as_device
