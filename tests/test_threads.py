"""CPU kernels called from several Python threads at once.

Numba's ``workqueue`` threading layer (its fallback where OpenMP and TBB do
not load) terminates the process when two threads enter parallel kernels
together; ``kernels/cpu_threads.py`` serializes the launches there.  Each
case runs in a child process with the layer forced, and compares every
threaded result with the same call made alone.  The last tests race threads
on the kernel makers in this process (one dispatcher per key for all).
"""
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

_CHILD = textwrap.dedent("""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import numba
    from zorch_nb import KoalaBear as F
    from zorch_nb.graph import Context, In, Out, kernel, run_computation_graph
    from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid,
                                    build_pyramid, halving_schedule)

    E = F.ext
    n = LEAVES  # past CPU_SERIAL_WORDS: smaller calls run serial twins, no threading layer
    a, b = F.random(n, seed=1), F.random(n, seed=2)
    x, y = E.random(n, seed=3), E.random(n, seed=4)
    dense = GkrLayer(a, b, x, y, 0, F)
    jag = JaggedGkrLayer(a, b, x, y, np.array([5, 0, n // 2 + 99, n // 4], np.int32), F)

    @kernel
    def mul_add(u: In[2], v: In[()], out: Out[()]):
        out[()] = u[0] * v[()] + u[1]

    ctx = Context()
    gu = ctx.copy_to_device(np.arange(64).reshape(32, 2))
    gv = ctx.copy_to_device(3)
    (gr,) = ctx.call_kernel(mul_add, 32, gu, gv)
    graph = ctx.generate_computation_graph([gu, gv], [gr])

    def flat(obj):
        if isinstance(obj, np.ndarray):
            return [obj]
        if isinstance(obj, (list, tuple)):
            return [w for o in obj for w in flat(o)]
        return [w for m in obj.mles for w in flat(m)]

    jobs = {
        "mul": lambda: F.mul(a, b),
        "ext mul": lambda: E.mul(x, y),
        "inv": lambda: F.inv(a),
        "pow": lambda: E.pow(x, 12345),
        "pyramid": lambda: build_pyramid(dense),
        "jagged pyramid": lambda: build_jagged_pyramid(jag, halving_schedule(jag)),
        "graph replay": lambda: run_computation_graph(
            graph, [np.arange(64).reshape(32, 2) + 1, np.array(5)])[0],
    }
    alone = {name: flat(job()) for name, job in jobs.items()}

    def check(i):
        name = list(jobs)[i % len(jobs)]
        for _ in range(REPEAT):
            got = flat(jobs[name]())
            assert len(got) == len(alone[name]) and all(
                np.array_equal(g, w) for g, w in zip(got, alone[name])), name
        return name

    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(check, range(4 * len(jobs))))
    print(numba.threading_layer(), len(done))
""")


@pytest.mark.parametrize("layer", ["workqueue", "default"])
def test_cpu_kernels_from_threads(layer, tmp_path):
    env = dict(os.environ)
    if layer != "default":
        env["NUMBA_THREADING_LAYER"] = layer
    jit = env.get("NUMBA_DISABLE_JIT") != "1"
    script = tmp_path / "threads.py"
    script.write_text(_CHILD.replace("REPEAT", "10" if jit else "1")
                      .replace("LEAVES", str(1 << 14 if jit else 1 << 10)))
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    used, count = res.stdout.split()
    assert int(count) == 28
    if layer != "default" and jit:
        assert used == layer


_FIRST_CALLS = textwrap.dedent("""
    import sys, threading
    from zorch_nb import KoalaBear as F
    from zorch_nb.logup_gkr import GkrLayer, layer_transition
    a, b = F.random(64, seed=0), F.random(64, seed=1)
    calls = [lambda: F.add(a, b), lambda: layer_transition(GkrLayer(a, b, a, b, 0, F))]
    barrier = threading.Barrier(8)
    errors = []
    def worker(i):
        barrier.wait()
        try:
            calls[i % 2]()
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print(errors)
""")


def _child(script, env=None, timeout=300):
    return subprocess.run([sys.executable, "-c", script], env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=timeout)


def test_first_calls_from_threads_wait_for_the_kernel_import():
    # sys.modules holds a kernel module from the moment its import starts: the
    # threads that lost the race used to get it half initialized
    # (AttributeError: partially initialized module ... field_cpu)
    for _ in range(2):
        res = _child(_FIRST_CALLS)
        assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr


#: Prepended to the fork scripts below: a child's end, with a deadline.
_WAIT_FOR = textwrap.dedent("""
    import os, time

    def wait_for(pid, seconds=60):
        \"\"\"The child's exit status (minus the signal that ended it), or "hang"
        (still running after ``seconds``: killed).\"\"\"
        deadline = time.time() + seconds
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
            time.sleep(0.05)
        os.kill(pid, 9)
        return "hang"
""")

_FORK = _WAIT_FOR + textwrap.dedent("""
    import os, sys, threading, time
    import numba
    from zorch_nb import KoalaBear as F
    a = F.random(1 << 16, seed=0)
    want = F.mul(a, a)
    busy = threading.Event()
    def background():  # a thread inside kernels while the main thread forks
        while not busy.is_set():
            F.pow(a, 123456789)
    threading.Thread(target=background, daemon=True).start()
    time.sleep(0.3)
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if (F.mul(a, a) == want).all() else 3)
        except RuntimeError as exc:
            os._exit(4 if "fork-safe" in str(exc) and "spawn" in str(exc) else 5)
    status = wait_for(pid)
    busy.set()
    layer = numba.threading_layer() if not numba.config.DISABLE_JIT else "nojit"
    from numba.np.ufunc import omppool
    print(layer, omppool.openmp_vendor, status)
""")


_FORK_AT_START = _WAIT_FOR + textwrap.dedent("""
    import os, sys, threading, time
    import numba
    from numba.np.ufunc import omppool, parallel
    from zorch_nb import KoalaBear as F
    a = F.random(1 << 16, seed=0)  # (parallel-sized: the call starts the layer)
    starting, launch = threading.Event(), parallel._launch_threads

    def start_and_say():  # the layer's start, announced as it begins
        starting.set()
        time.sleep(0.05)  # (past the fork below, were nothing to hold it back)
        launch()
    parallel._launch_threads = start_and_say
    threading.Thread(target=lambda: F.mul(a, a), daemon=True).start()
    starting.wait(60)
    pid = os.fork()  # while that thread starts the layer for the first parallel call
    if pid == 0:
        try:
            got = F.mul(a, a)  # (its first words against a small call's: a serial twin)
            os._exit(0 if (got[:8] == F.mul(a[:8], a[:8])).all() else 3)
        except RuntimeError as exc:
            os._exit(4 if "fork-safe" in str(exc) else 5)
    print(numba.threading_layer(), omppool.openmp_vendor, wait_for(pid))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("layer", ["workqueue", "default"])
@pytest.mark.parametrize("script", ["_FORK", "_FORK_AT_START"])
def test_kernels_in_a_forked_child(layer, script):
    """A child forked while a thread runs kernels: on the workqueue it computes
    (its copy of the launch lock was held: it used to wait forever); on GNU
    OpenMP, which Numba cannot use after a fork (it terminated the child),
    the kernel raises a RuntimeError saying what to do; elsewhere it computes.

    ``_FORK_AT_START``: forked while the thread starts the threading layer
    (the process's first parallel-sized call).  The child hung at its first
    parallel call, holding Numba's layer-start lock copied from a thread it
    does not have; the start now runs under Numba's compiler lock, which a
    fork waits for."""
    if script == "_FORK_AT_START" and numba.config.DISABLE_JIT:
        pytest.skip("no threading layer without the JIT")
    env = dict(os.environ)
    if layer != "default":
        env["NUMBA_THREADING_LAYER"] = layer
    res = _child(globals()[script], env)
    assert res.returncode == 0, res.stdout + res.stderr
    used, vendor, status = res.stdout.split()
    assert status == ("4" if used == "omp" and vendor == "GNU" else "0"), res.stdout + res.stderr


_USER_KERNEL_BESIDE = textwrap.dedent("""
    import threading
    import numpy as np
    from numba import njit, prange
    from zorch_nb import KoalaBear as F
    from zorch_nb.kernels.cpu_threads import serialized

    @njit(parallel=True)
    def doubled_sum(x):
        s = 0.0
        for i in prange(x.shape[0]):
            s += 2.0 * x[i]
        return s
    x, a = np.ones(1 << 20), F.random(1 << 18, seed=1)
    mine = serialized(doubled_sum)
    want = F.mul(a, a)
    ok = []
    def users():
        ok.append(all(mine(x) == 2.0 * x.size for _ in range(2000)))
    def ours():
        ok.append(all((F.mul(a, a) == want).all() for _ in range(2000)))
    threads = [threading.Thread(target=users), threading.Thread(target=ours)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(ok)
""")


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="no threading layer without the JIT")
def test_a_users_parallel_function_beside_ours_on_the_workqueue():
    """The README's remedy: on the workqueue layer, where two threads in
    parallel code at once end the process, a user's ``parallel=True``
    function wrapped in ``cpu_threads.serialized`` takes turns with ours."""
    res = _child(_USER_KERNEL_BESIDE, dict(os.environ, NUMBA_THREADING_LAYER="workqueue"))
    assert res.returncode == 0 and res.stdout.split() == ["[True,", "True]"], \
        res.stdout + res.stderr


_ONE_THREAD = textwrap.dedent("""
    import os, sys
    import numba
    import numpy as np
    from numba.np.ufunc import parallel
    from zorch_nb import KoalaBear as F
    from zorch_nb.kernels import cpu_threads, field_cpu
    from zorch_nb.logup_gkr import GkrLayer, build_pyramid
    E = F.ext
    a, x = F.random(1 << 16, seed=0), E.random(1 << 16, seed=1)
    from zorch_nb.graph import Context, In, Out, kernel, run_computation_graph

    @kernel
    def mul_add(u: In[2], out: Out[()]):
        out[()] = u[0] * u[1] + u[0]

    def work():  # every call above the serial sizes: parallel kernels on 2+ threads
        floor = build_pyramid(GkrLayer(a, a, x, x, 0, F))[-1]
        ctx = Context()
        u = np.arange(1 << 17).reshape(-1, 2)
        h = ctx.copy_to_device(u)
        (r,) = ctx.call_kernel(mul_add, 1 << 16, h)
        (replayed,), _ = run_computation_graph(ctx.generate_computation_graph([h], [r]), [u])
        return [F.mul(a, a), E.mul(x, x), E.pow(x, 5), floor.numerator_0, ctx.copy_to_host(r),
                replayed]
    want = None
    if sys.argv[1] == "runtime":  # the layer runs first, then this thread asks for one
        want = work()
        assert parallel._is_initialized and numba.get_num_threads() > 1
        numba.set_num_threads(1)
    big = cpu_threads.sized(field_cpu._base_map2_kernel, 1 << 20, 1 << 20)
    assert big is cpu_threads.serial_twin(field_cpu._base_map2_kernel), big
    got = work()
    if sys.argv[1] == "env":  # NUMBA_NUM_THREADS=1: the layer never started
        assert not parallel._is_initialized
    else:
        assert all((g == w).all() for g, w in zip(got, want))
    pid = os.fork()
    if pid == 0:  # one thread: twins, so a child forked after GNU OpenMP computes
        os._exit(0 if all((g == w).all() for g, w in zip(work(), got)) else 3)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("how", ["env", "runtime"])
def test_one_thread_runs_the_serial_twins(how):
    """Numba set to one thread (NUMBA_NUM_THREADS=1, or numba.set_num_threads(1)
    on the calling thread): every kernel runs its serial twin, so no threading
    layer starts (or is waited on), and a forked child computes; from a
    review whose fork pool raised under NUMBA_NUM_THREADS=1."""
    env = dict(os.environ)
    if how == "env":
        env["NUMBA_NUM_THREADS"] = "1"
    else:
        import numba
        if numba.config.NUMBA_NUM_THREADS < 2:
            pytest.skip("one CPU: Numba runs one thread already")
        env.pop("NUMBA_NUM_THREADS", None)
    res = subprocess.run([sys.executable, "-c", _ONE_THREAD, how], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout.strip() == "0", res.stdout + res.stderr



_FORK_CONTEXT = textwrap.dedent("""
    import os, threading, time
    import numpy as np
    from zorch_nb.graph import Context, In, Out, kernel

    @kernel
    def pair_sum(u: In[2], out: Out[()]):
        out[()] = u[0] + u[1]

    busy, idle = Context(), Context()
    h = busy.copy_to_device(np.arange(8192).reshape(4096, 2))
    g = idle.copy_to_device(np.arange(8).reshape(4, 2))
    (r,) = idle.call_kernel(pair_sum, 4, g)
    entered = threading.Event()
    def record():  # inside busy's methods nearly all the time
        while True:
            entered.set()
            busy.call_kernel(pair_sum, 4096, h)
    threading.Thread(target=record, daemon=True).start()
    entered.wait()
    codes = []
    for _ in range(20):  # forks land inside and between its calls
        time.sleep(0.01)
        pid = os.fork()
        if pid == 0:
            try:
                busy.copy_to_host(h)
                code = 10  # idle at the fork: works on
            except RuntimeError as exc:
                code = 11 if "forked" in str(exc) and "new Context" in str(exc) else 12
            try:
                (r2,) = idle.call_kernel(pair_sum, 4, g)
                ok = [idle.copy_to_host(x).tolist() for x in (r, r2)] == [[1, 5, 9, 13]] * 2
                code += 0 if ok else 20
            except Exception:
                code += 30
            os._exit(code)
        deadline = time.time() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes.append(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
                break
            if time.time() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                codes.append("hang")
                break
            time.sleep(0.005)
        if "hang" in codes:
            break
    print(*sorted(set(codes), key=str))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_context_in_a_child_forked_while_another_thread_records():
    """From a review: a child forked while another thread was inside a
    Context's method inherited its lock held and waited forever on its next
    call.  Such a Context now raises in the child (code 11), one idle at the
    fork works on (10), and another Context always works."""
    res = subprocess.run([sys.executable, "-c", _FORK_CONTEXT], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    codes = set(res.stdout.split())
    assert codes <= {"10", "11"} and "11" in codes, res.stdout + res.stderr


def test_context_and_handles_are_not_pickled():
    """A Handle's pickle or deepcopy went on to its Context, whose message
    named only the Context; a shallow copy is the same immutable view."""
    import copy
    import pickle
    from zorch_nb.graph import Context
    ctx = Context()
    with pytest.raises(TypeError, match="Context holds live buffers and cannot be pickled.*"
                                        "generate_computation_graph"):
        pickle.dumps(ctx)
    h = ctx.copy_to_device(np.arange(4))
    for call in (pickle.dumps, copy.deepcopy):
        with pytest.raises(TypeError, match=r"Handle is a view .* cannot be pickled or "
                                            r"deep-copied; .*ctx\.copy_to_host\(handle\)"):
            call(h)
    assert copy.copy(h) is h


def test_context_in_use_at_fork_survives_a_second_fork():
    """The child's marker lock takes part in the fork hooks of a later fork
    (a grandchild): still in use, and no hook fails."""
    from zorch_nb import graph
    ctx = graph.Context()
    ctx._lock = graph._InUseAtFork()
    graph._before_fork()
    assert ctx in graph._FORKING.busy
    graph._after_fork(True)
    assert isinstance(ctx._lock, graph._InUseAtFork)
    with pytest.raises(RuntimeError, match="new Context"):
        ctx.copy_to_device([1, 2])


_SUM_FORK = textwrap.dedent("""
    import os
    import numpy as np
    from numba.np.ufunc import parallel
    from zorch_nb import KoalaBear as F
    rows = F.random((4, 1 << 14), seed=1)  # rows and words enough for a parallel launch
    want = F.sum(rows, axis=1)
    assert not parallel._is_initialized, "a sum started the threading layer"
    F.mul(F.random(1 << 18, seed=2), F.random(1 << 18, seed=3))  # a kernel starts it
    assert parallel._is_initialized and (F.sum(rows, axis=1) == want).all()
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if (F.sum(rows, axis=1) == want).all() else 3)
        except RuntimeError:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="no threading layer")
def test_sums_never_start_the_threading_layer_and_run_in_forked_children():
    """F.sum was NumPy's and started nothing; its CPU kernel must not start
    Numba's threading layer either (a process forked afterwards could not
    run parallel kernels on GNU OpenMP), and in a child forked after another
    kernel started it the sum runs serially (it raised RuntimeError there)."""
    res = _child(_SUM_FORK)
    assert res.returncode == 0 and res.stdout.strip() == "0", res.stdout + res.stderr


def _race(get, key, threads=8):
    """``get(key)`` from ``threads`` threads released together; their results."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    start = threading.Barrier(threads)

    def one(_):
        start.wait()
        return get(key)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(threads)))


def test_made_once_hands_every_racing_thread_the_first_object():
    """kernels.jit.made_once: threads that miss together all get the object
    stored first, so a lazily compiled kernel compiles once (functools.lru_cache
    gives each its own: this test fails with it)."""
    import time
    from zorch_nb.kernels.jit import made_once
    calls = []

    @made_once
    def maker(mode):
        calls.append(mode)
        time.sleep(0.05)  # every thread is inside before the first returns
        return object()

    got = _race(maker, 3)
    assert len(calls) > 1  # (the race happened: several threads made one)
    assert all(g is got[0] for g in got)
    assert maker(3) is got[0] and maker(2) is not got[0]
    maker.cache_clear()
    assert maker(3) is not got[0]
    assert maker.__name__ == "maker"


@pytest.mark.cudasim
def test_numba_cuda_kernel_makers_give_racing_threads_one_kernel(monkeypatch):
    """The Numba-CUDA GKR kernels are made per mode on first use; threads
    asking at once get the same dispatchers (one compile on a GPU)."""
    import time
    from zorch_nb.kernels import gkr_cuda_numba as g
    decorate = g.cached_kernel

    def slow(fn):  # a real decoration is too quick to race reliably
        time.sleep(0.02)
        return decorate(fn)

    monkeypatch.setattr(g, "cached_kernel", slow)
    for maker in (g._kernels, g._pyramid_kernel, g._chunk_kernel):
        maker.cache_clear()
        got = _race(maker, 3)
        assert all(x is got[0] for x in got), maker.__name__
        maker.cache_clear()  # (not keep the slowly made ones)
