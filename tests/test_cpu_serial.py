"""The serial twins of the CPU kernels (``kernels/cpu_threads.sized``).

Small CPU calls run the serial compile of a ``parallel=True`` kernel on the
calling thread; larger ones the parallel kernel.  Every test elsewhere now
runs its small inputs serially, so here each launcher is run at sizes of
several tasks with the choice forced both ways: the two compiles must give
the same bytes (the parallel kernels are the ones checked against big ints
at large sizes in the other test files, and the small cases there check
the twins).  Then what the twins are for: a small call starts no threading
layer (so it runs in a process forked after GNU OpenMP started), and a twin
has a cache entry of its own.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels import cpu_threads
from zorch_nb.kernels.launch_config import CPU_LANE_RUN, CPU_SERIAL_WORDS
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid,
                                build_pyramid, halving_schedule, layer_transition)

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]
JIT = os.environ.get("NUMBA_DISABLE_JIT") != "1"


def _words(F, rng, shape):
    # any uint32 words, some >= p: the kernels read them mod p
    return rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32)


def _flat(obj):
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [w for o in obj for w in _flat(o)]
    return [w for m in obj.mles for w in _flat(m)]


def _jobs(F):
    """Every CPU launcher at a size of several tasks (and past CPU_SERIAL_WORDS)."""
    E = F.ext
    rng = np.random.default_rng(7)
    n = 3 * CPU_LANE_RUN + 5  # base: 3 tasks and a ragged one; > CPU_SERIAL_WORDS
    m = 2 * CPU_LANE_RUN + 3  # extension elements
    assert n > CPU_SERIAL_WORDS
    a, b = _words(F, rng, n), _words(F, rng, n)
    x, y = _words(F, rng, (m, 4)), _words(F, rng, (m, 4))
    col, row = _words(F, rng, (m // 64, 1)), _words(F, rng, (1, 64))
    xcol, xrow = _words(F, rng, (m // 64, 1, 4)), _words(F, rng, (1, 64, 4))
    nz = np.where(a % np.uint32(F.p) == 0, np.uint32(1), a)  # invertible
    xnz = x.copy()
    xnz[(x % np.uint32(F.p) == 0).all(axis=1), 0] = 1
    k = 1 << 15  # GKR leaves: the pyramids' first calls have several tiles
    g = [_words(F, rng, k) for _ in range(2)] + [_words(F, rng, (k, 4)) for _ in range(2)]
    dense = GkrLayer(*g, 0, F)
    bb = GkrLayer(g[0], g[1], g[1][::-1].copy(), g[0][::-1].copy(), 0, F)
    counts = np.array([5, 0, 9001, 4096, 1, 12000, 77, 2048], np.int32)
    jag = JaggedGkrLayer(*g, counts, F)
    # MLE folds: 2**14 pairs (4 tasks; base outputs past CPU_SERIAL_WORDS)
    fa, fx = _words(F, rng, 1 << 15), _words(F, rng, (1 << 15, 4))

    def in_place(op, u, v, which):  # op(u, v) written over a fresh copy of operand `which`
        u, v = u.copy(), v.copy()
        return op(u, v, out=(u, v)[which])

    return {
        "add": lambda: F.add(a, b), "sub": lambda: F.sub(a, b), "mul": lambda: F.mul(a, b),
        "neg": lambda: F.neg(a), "square": lambda: F.square(a), "inv": lambda: F.inv(nz),
        "batch inv": lambda: F.batch_inv(nz),
        "pow": lambda: F.pow(a, 123456789), "one element": lambda: F.mul(a, b[3]),
        "outer": lambda: F.mul(col, row), "sub rows": lambda: F.sub(row, col),
        "ext add": lambda: E.add(x, y), "ext sub": lambda: E.sub(x, y),
        "ext mul": lambda: E.mul(x, y), "ext neg": lambda: E.neg(x),
        "ext square": lambda: E.square(x), "ext inv": lambda: E.inv(xnz),
        "ext pow": lambda: E.pow(x, 1000003), "ext one element": lambda: E.mul(x, y[5]),
        "base x ext": lambda: E.mul(a[:m], x), "ext add base": lambda: E.add(x, a[:m]),
        "ext outer": lambda: E.mul(xcol, xrow), "ext sub rows": lambda: E.sub(xrow, xcol),
        "ext x base column": lambda: E.mul(xrow, col),
        "mle fold": lambda: F.mle_fold(fa, b[0]), "ext mle fold": lambda: E.mle_fold(fx, y[1]),
        "mle fold base values": lambda: E.mle_fold(fa, y[2]),
        "mle fold base r": lambda: E.mle_fold(fx, b[4]),
        # in place (out an operand): the twins compile with noalias arrays
        "add in place": lambda: in_place(F.add, a, b, 0),
        "mul in place": lambda: in_place(F.mul, a, b, 1),
        "ext add in place": lambda: in_place(E.add, x, y, 0),
        "ext mul in place": lambda: in_place(E.mul, x, y, 1),
        # eq tables: the last doublings past CPU_SERIAL_WORDS and several tasks
        "eq table": lambda: F.eq_table(a[:15]), "ext eq table": lambda: E.eq_table(x[:14]),
        "ext eq table, base point": lambda: E.eq_table(a[:14]),
        "transition": lambda: layer_transition(dense),
        "pyramid": lambda: build_pyramid(dense), "pyramid bb": lambda: build_pyramid(bb),
        "jagged pyramid": lambda: build_jagged_pyramid(jag, halving_schedule(jag)),
    }


def _run(F, monkeypatch, answer):
    """Results of every job with the choice left alone (None) or forced, and
    for each job whether it ran a serial twin at all."""
    jobs = _jobs(F)
    results, used = {}, {}
    with monkeypatch.context() as m:
        if answer is not None:
            m.setattr(cpu_threads, "_one_thread_enough", lambda tasks, words: answer)
        twin, calls = cpu_threads.serial_twin, []
        m.setattr(cpu_threads, "serial_twin", lambda k: calls.append(k) or twin(k))
        for name, job in jobs.items():
            calls.clear()
            results[name] = _flat(job())
            used[name] = bool(calls)
    return results, used


@pytest.mark.skipif(not JIT, reason="with the JIT off both are the same Python")
@pytest.mark.parametrize("F", FIELDS)
def test_serial_twins_give_the_parallel_kernels_bytes(F, monkeypatch):
    chosen, _ = _run(F, monkeypatch, None)
    serial, used_serial = _run(F, monkeypatch, True)
    parallel, used_parallel = _run(F, monkeypatch, False)
    for name in chosen:
        assert used_serial[name] and not used_parallel[name], name  # the force took
        for got, other, want in zip(serial[name], chosen[name], parallel[name]):
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert np.array_equal(got, want), f"{name}: serial twin differs"
            assert np.array_equal(other, want), f"{name}: default choice differs"


@pytest.mark.skipif(not JIT, reason="with the JIT off there is no compile")
def test_twins_compile_with_noalias_arrays():
    # Without noalias LLVM guards each loop with an overlap test, and an
    # in-place elementwise call (out an operand) ran the scalar loop: 11x
    # slower on one thread.
    from zorch_nb.kernels import field_cpu
    from zorch_nb.kernels.vector_width import NoaliasCompiler
    twin = cpu_threads.serial_twin(field_cpu._base_map2_kernel)
    assert issubclass(twin._compiler.pipeline_class, NoaliasCompiler)


def test_the_size_rule():
    enough = cpu_threads._one_thread_enough
    assert enough(1, None) and enough(1, 10 ** 9)  # one task: nothing to share
    assert not enough(2, None)  # heavy kernels: any second task is worth a thread
    assert enough(CPU_SERIAL_WORDS, CPU_SERIAL_WORDS)
    assert not enough(CPU_SERIAL_WORDS + 1, CPU_SERIAL_WORDS + 1)


def test_tasks_counts_a_partial_run_as_a_task():
    # the prange trip count over runs: a last, partial run is a task of its
    # own (else a call of 1.5 runs would count one task and run serially)
    tasks = cpu_threads.tasks
    assert [tasks(n, 4) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 1, 1, 1, 2, 2, 3]
    assert tasks(4097, 4096) == 2 and not cpu_threads._one_thread_enough(tasks(4097, 4096), None)


@pytest.mark.skipif(not JIT, reason="needs compiled kernels")
def test_a_twin_is_serial_memoized_and_cached_apart():
    from zorch_nb.kernels import field_cpu
    kernel = field_cpu._base_map2_kernel
    twin = cpu_threads.serial_twin(kernel)
    assert cpu_threads.serial_twin(kernel) is twin
    assert kernel.targetoptions.get("parallel") and not twin.targetoptions.get("parallel")
    assert twin.py_func.__code__ is kernel.py_func.__code__
    # Numba names the cache files after the qualified name: a twin sharing
    # the parallel kernel's would load (or overwrite) its machine code
    assert twin.py_func.__qualname__ != kernel.py_func.__qualname__
    a = KoalaBear.random(16, seed=1)
    assert cpu_threads.sized(kernel, 16, 16) is twin
    assert np.array_equal(KoalaBear.mul(a, a), KoalaBear.mul(a, a))


_NO_LAYER = textwrap.dedent("""
    import os
    import numba
    import numpy as np
    from zorch_nb import KoalaBear as F
    from zorch_nb.logup_gkr import GkrLayer, build_pyramid
    E = F.ext
    a, x = F.random(1000, seed=1), E.random(300, seed=2)
    F.mul(a, a); F.batch_inv(a); F.pow(a, 77); E.mul(x, x); E.batch_inv(x); E.add(x, a[:300])
    x2 = E.random(512, seed=4)
    build_pyramid(GkrLayer(a[:512], a[:512], x2, x2, 0, F))
    try:
        numba.threading_layer()
        print("started")
    except ValueError:
        print("none")
    big = F.random(1 << 16, seed=3)
    F.mul(big, big)  # a parallel one
    pid = os.fork()
    if pid == 0:
        try:  # small calls still run in the child, whatever the layer
            ok = (F.mul(F.batch_inv(a), a) == F.one).all() and E.mul(x, x).shape == (300, 4)
            os._exit(0 if ok else 3)
        except Exception:
            os._exit(5)
    _, status = os.waitpid(pid, 0)
    print(numba.threading_layer(), os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
""")


@pytest.mark.skipif(not JIT or not hasattr(os, "fork"), reason="needs compiled kernels, fork")
def test_small_calls_start_no_threading_layer_and_run_after_fork():
    res = subprocess.run([sys.executable, "-c", _NO_LAYER], env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    before, _layer, child = res.stdout.split()
    assert before == "none", res.stdout
    assert child == "0", res.stdout + res.stderr


@pytest.mark.skipif(not JIT, reason="needs compiled kernels")
def test_a_kernel_without_a_source_file_gets_an_uncached_twin():
    from numba import njit
    namespace = {}
    exec("from numba import prange\n"
         "def double(a, out):\n"
         "    for i in prange(a.shape[0]):\n"
         "        out[i] = a[i] * 2\n", namespace)
    kernel = njit(parallel=True)(namespace["double"])  # no file: Numba cannot cache it
    a, out = np.arange(5, dtype=np.uint32), np.zeros(5, np.uint32)
    cpu_threads.serial_twin(kernel)(a, out)
    assert out.tolist() == [0, 2, 4, 6, 8]
