"""Cached closures have symbols of their own (``kernels/jit.py``).

Numba names a function's machine code by its qualified name, a counter of
its process and its argument types.  The four mode closures of
``gkr_cpu._make_runs`` shared one qualified name; two processes could give
two of them the same count, and a third process that linked both cache
entries into ``_dense_run`` kept one definition for both (LLVM takes
same-named ``linkonce_odr`` definitions as interchangeable): one mode ran
the other's loop.  Seen once as zeros in the later layers of the serial
pyramid kernel; replayed here by forcing the count.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba.core import bytecode

import naive_gkr
from zorch_nb.kernels import jit

JIT = os.environ.get("NUMBA_DISABLE_JIT") != "1"


def _closures(tag=None):
    def make(k):
        def run(x):
            return x + k
        return run if tag is None else jit.closure_named(run, f"{tag}{k}")
    return make(1), make(2)


def test_a_cached_closure_needs_a_name_of_its_own():
    one, _ = _closures()
    with pytest.raises(TypeError, match="closure_named"):
        jit.njit(cache=True)(one)
    with pytest.raises(TypeError, match="closure_named"):
        jit.njit(one, cache=True)
    one, two = _closures("k")
    assert one.__qualname__.endswith("run_k1") and two.__qualname__.endswith("run_k2")
    assert jit.njit(lambda x: x)(3) == 3  # uncached closures and lambdas: as numba.njit
    assert jit.njit(_closures()[0])(3) == 4


@pytest.mark.skipif(not JIT, reason="no machine code with the JIT off")
def test_no_two_cached_package_kernels_share_a_name():
    """Every cached CPU dispatcher of the package, closures included, has a
    qualified name no other one has (the factories' closures too)."""
    import importlib
    import pkgutil
    import zorch_nb.kernels as kernels
    seen = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        if "cuda" in info.name or "cupy" in info.name:
            continue  # GPU kernels: each loads as a module of its own, nothing links two
        module = importlib.import_module(f"zorch_nb.kernels.{info.name}")
        for value in vars(module).values():
            fn = getattr(value, "py_func", None)
            cache = type(getattr(value, "_cache", None)).__name__
            if fn is None or cache in ("NoneType", "NullCache"):
                continue
            key = (fn.__module__, fn.__qualname__)
            assert seen.setdefault(key, fn) is fn, f"two cached kernels named {key}"
    assert ("zorch_nb.kernels.gkr_cpu", "_make_runs.<locals>.dense_run_ee") in seen


# One mode's dense loop compiled as the 5000th function of its process (the
# count two processes that compile alike would reach alike).
_COMPILE = """
    import itertools, sys
    from numba import types
    from numba.core import bytecode
    from zorch_nb.kernels import gkr_cpu
    fn = getattr(gkr_cpu, "_dense_run_" + sys.argv[1])
    array = types.Array(types.uint32, 1, "C")
    bytecode.FunctionIdentity._unique_ids = itertools.count(5000)
    fn.compile((types.int64, types.int64) + (array,) * 8 + (types.uint32,) * 3)
"""

# A dense transition per mode (its kernel links every mode's loop), written
# out for the reference.
_FOLD = """
    import sys
    import numpy as np
    from zorch_nb import KoalaBear as F
    from zorch_nb.kernels import gkr_cpu
    found = {}
    for mode, (ne, de) in (("bb", (0, 0)), ("ee", (1, 1))):
        ins = [(F.ext if e else F).random(64, seed=k) for k, e in enumerate((ne, ne, de, de))]
        outs = [np.zeros((32, 4) if e else 32, np.uint32) for e in (ne, ne, de, de)]
        gkr_cpu.fold_dense(*ins, *outs, F.params)
        for k, x in enumerate(ins + outs):
            found[f"{mode}{k}"] = x
    np.savez(sys.argv[1], **found)
"""


@pytest.mark.skipif(not JIT, reason="no machine code with the JIT off")
@pytest.mark.skipif(not hasattr(bytecode.FunctionIdentity, "_unique_ids"),
                    reason="Numba counts functions otherwise")
@pytest.mark.early
def test_sibling_closures_cached_by_two_processes_stay_apart(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    for mode in ("bb", "ee"):
        subprocess.run([sys.executable, "-c", textwrap.dedent(_COMPILE), mode], env=env,
                       check=True, timeout=600)
    out = tmp_path / "fold.npz"
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(_FOLD), str(out)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr  # (a wrong loop can corrupt the heap)
    got = np.load(out)
    for mode in ("bb", "ee"):
        layer = naive_gkr.layer_from_words("KoalaBear", *(got[f"{mode}{k}"] for k in range(4)))
        want = naive_gkr.layer_words("KoalaBear", naive_gkr.dense_transition("KoalaBear", layer))
        for k, w in enumerate(want):
            assert np.array_equal(got[f"{mode}{k + 4}"], w), (mode, k)


# Two different parallel loops in one module file, cached; names of one
# length and bodies of one shape, so forked children allocate alike for them.
_LOOPS = """
import numpy as np
from numba import njit, prange

@njit(parallel=True, cache=True)
def add_one(a):
    out = np.empty_like(a)
    for i in prange(a.shape[0]):
        out[i] = a[i] + 1
    return out

@njit(parallel=True, cache=True)
def mul_two(a):
    out = np.empty_like(a)
    for i in prange(a.shape[0]):
        out[i] = a[i] * 2
    return out
"""

# A parent that imported zorch_nb forks a child per loop; each compiles one.
_FORKED = """
import os, sys
import numpy as np
import zorch_nb  # noqa: F401  (its at-fork handlers)
import loops
for name in ("add_one", "mul_two"):
    pid = os.fork()
    if pid == 0:
        getattr(loops, name)(np.arange(8.0))
        from numba.core.bytecode import FunctionIdentity
        print(next(FunctionIdentity._unique_ids), flush=True)  # the child's next count
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
"""


@pytest.mark.skipif(not JIT, reason="no machine code with the JIT off")
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_parallel_loops_compiled_in_forked_children_stay_apart(tmp_path):
    """Forked children count alike and allocate alike: without a counter of
    their own, the two loops' functions got one symbol, and the process that
    loaded both entries ran add_one's loop for mul_two (where the two
    children's loops got one address: 2 runs in 3 here)."""
    (tmp_path / "loops.py").write_text(_LOOPS)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=str(tmp_path))
    counts = subprocess.run([sys.executable, "-c", _FORKED], env=env, check=True, timeout=600,
                            capture_output=True, text=True).stdout.split()
    assert len(counts) == 2 and counts[0] != counts[1], counts  # (alike, the loops may meet)
    res = subprocess.run([sys.executable, "-c", "import numpy as np, loops; a = np.arange(8.0); "
                          "print(*loops.add_one(a), *loops.mul_two(a))"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    a = np.arange(8.0)
    assert [float(x) for x in res.stdout.split()] == [*(a + 1), *(a * 2)]


def test_the_function_counter_starts_apart_in_each_process_and_forked_child():
    """Numba's per-process function counter (in every symbol) starts at a
    random point: in two processes, and in a forked child against its
    parent, the next counts differ (kernels/jit.py's guard; counting from 1
    alike, two processes' closures could share a symbol)."""
    script = ("import zorch_nb.kernels.jit\n"
              "from numba.core.bytecode import FunctionIdentity as F\n"
              "print(next(F._unique_ids))")
    counts = [int(subprocess.run([sys.executable, "-c", script], capture_output=True,
                                 text=True, check=True, timeout=300).stdout)
              for _ in range(2)]
    assert counts[0] != counts[1], counts
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next count, then leave at once
        os.write(write, str(next(bytecode.FunctionIdentity._unique_ids)).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = int(os.read(read, 64))
    os.close(read)
    assert status == 0 and child != next(bytecode.FunctionIdentity._unique_ids)
