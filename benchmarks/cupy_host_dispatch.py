"""Host-side cost of small transitions, of whole pyramids and of small field
products on real CuPy arrays, without a GPU.

The dispatch target (one transition at L = 2**10 under 15 us on the CuPy
path) is mostly host time: CuPy's array metadata, allocations and views, our
checks, and the launch.  All but the launch run on a machine with no GPU:
CuPy imports without a driver, ``cupy.cuda.set_allocator`` accepts an
allocator that hands out pointers to no memory (``UnownedMemory``), and the
kernel functions are replaced by a no-op, so nothing ever touches device
memory.  What this measures is therefore the object layer's time on CuPy
objects, minus the launches themselves (about 6 us each on the GPU machine
per the issue; ``python -m zorch_nb bench --device gpu`` reports it as
``launch_only_us``).

A pyramid's host time matters before its first launch: the GPU idles until
then, and the bench's event timer (like a user's) counts it.  So the pyramid
rows give the time to the first launch and the whole call.  Jagged pyramids
need ``cupy.asarray``, which asks the driver for the device: here it is
replaced by a stand-in that views a CuPy array and allocates (without
copying) for a NumPy one, so the packed counts' one H2D copy is left out.

    pip install cupy-cuda13x   # no driver needed
    python benchmarks/cupy_host_dispatch.py [--json FILE]

Do not import this into a process that uses a GPU: the allocator is global.
"""
import argparse
import datetime
import json
import platform
import sys
import time
import timeit

import numpy as np

try:
    import cupy
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("needs CuPy (pip install cupy-cuda13x; no GPU or driver needed)")

_NEXT = [1 << 40]  # fake device addresses, 512-byte aligned as CuPy's pool's


def _no_memory(size):
    ptr = _NEXT[0]
    _NEXT[0] += -(-max(size, 1) // 512) * 512
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, max(size, 1), None, 0), 0)


_FIRST_LAUNCH = []  # perf_counter of the first launch since it was cleared


class _NoLaunch:
    def __call__(self, grid, block, args, **kwargs):
        if not _FIRST_LAUNCH:
            _FIRST_LAUNCH.append(time.perf_counter())


def _asarray_without_driver(a, dtype=None, order=None, **kwargs):
    """``cupy.asarray`` for this script: a view of a CuPy array, a fresh
    (uncopied) buffer for a NumPy one."""
    if isinstance(a, np.ndarray):
        return cupy.empty(a.shape, dtype or a.dtype)
    if isinstance(a, cupy.ndarray) and (dtype is None or a.dtype == dtype):
        return a.view()
    return _CUPY_ASARRAY(a, dtype, order, **kwargs)


_CUPY_ASARRAY = cupy.asarray


def _pyramid_us(build, calls, rounds=5):
    """``(to first launch, whole call)`` in us: the best round's means."""
    build()
    first, whole = [], []
    for _ in range(rounds):
        to_first = total = 0.0
        for _ in range(calls):
            _FIRST_LAUNCH.clear()
            t0 = time.perf_counter()
            build()
            t1 = time.perf_counter()
            to_first += _FIRST_LAUNCH[0] - t0
            total += t1 - t0
        first.append(to_first / calls * 1e6)
        whole.append(total / calls * 1e6)
    return round(min(first), 1), round(min(whole), 1)


def _best_us(fn, number=20000, repeat=7):
    fn()
    return round(min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6, 2)


def measure():
    cupy.cuda.set_allocator(_no_memory)
    # Without a driver cudaGetDevice fails; the object layer asks it once per
    # call (arrays off the current device are refused), and on a GPU it is a
    # thread-local read.  Device 0, as the fake memory says.
    cupy.cuda.runtime.getDevice = lambda: 0
    from zorch_nb import KoalaBear
    from zorch_nb.kernels import gkr_cupy
    from zorch_nb.logup_gkr import GkrLayer, _fresh_outputs, layer_transition
    gkr_cupy._function = lambda *key: _NoLaunch()  # memoized kernel lookup -> no-op
    f, length, rows = KoalaBear.params, 1 << 10, {}
    for name, shape in (("base/base", (length,)), ("ext/ext", (length, 4))):
        layer = GkrLayer(*(cupy.empty(shape, np.uint32) for _ in range(4)))
        ins, ext = layer.mles, len(shape) == 2

        def fresh(ext=ext):  # as the object layer makes them: one buffer, four views
            return _fresh_outputs(cupy, length // 2, (ext,) * 4)[1]
        outs, mode = fresh(), 3 if ext else 0
        rows[f"dense transition {name}"] = {
            "us_per_call": _best_us(lambda layer=layer: layer_transition(layer)),
            "buffer_and_views_us": _best_us(fresh),
            "trusted_launcher_us": _best_us(
                lambda ins=ins, outs=outs, mode=mode: gkr_cupy.fold_dense_trusted(
                    mode, *ins, *outs, f)),
            "checked_launcher_us": _best_us(
                lambda ins=ins, outs=outs: gkr_cupy.fold_dense(*ins, *outs, f)),
        }
    rows.update(_pyramids(f))
    rows.update(_field_calls())
    return rows


def _field_calls(n=16):
    """Small field products: ``E.mul`` of extension elements, of ``as_base``
    marked base words and extension elements (its own small-call path, and
    the general path it replaced, in the same process), and ``F.mul``."""
    from zorch_nb import KoalaBear as F
    from zorch_nb import fields
    from zorch_nb.kernels import field_cupy
    E = F.ext
    field_cupy._kernel = lambda *key: _NoLaunch()  # memoized kernel lookup -> no-op
    cupy.asarray = _asarray_without_driver
    a, x, y = (cupy.empty(s, np.uint32) for s in ((n,), (n, 4), (n, 4)))
    mark = E.as_base(a)
    marked_path = fields._FieldBase._map_marked
    try:
        rows = {f"F.mul, {n} elements": {"us_per_call": _best_us(lambda: F.mul(a, a))},
                f"E.mul, {n} elements": {"us_per_call": _best_us(lambda: E.mul(x, y))},
                f"E.mul(E.as_base(a), x), {n} elements": {
                    "us_per_call": _best_us(lambda: E.mul(mark, x))}}
        fields._FieldBase._map_marked = lambda *args: None
        rows[f"E.mul(E.as_base(a), x), {n} elements"]["general_path_us"] = _best_us(
            lambda: E.mul(mark, x))
    finally:
        fields._FieldBase._map_marked = marked_path
        cupy.asarray = _CUPY_ASARRAY
    return rows


def _pyramids(f):
    from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid,
                                    build_pyramid, halving_schedule)
    cupy.asarray = _asarray_without_driver
    rows, rng = {}, np.random.default_rng(0)
    try:
        for log2 in (10, 20, 26):
            n, calls = 1 << log2, 2000 if log2 < 26 else 300
            for name, shape in (("base/base", (n,)), ("ext/ext", (n, 4))):
                layer = GkrLayer(*(cupy.empty(shape, np.uint32) for _ in range(4)))
                first, whole = _pyramid_us(lambda layer=layer: build_pyramid(layer), calls)
                rows[f"dense pyramid {name}, 2^{log2}"] = {
                    "to_first_launch_us": first, "whole_us": whole}
            nb = min(1024, n // 4)  # the bench's segments: random cuts
            cuts = np.sort(rng.choice(np.arange(1, n), nb - 1, replace=False))
            counts = np.diff(np.concatenate([[0], cuts, [n]])).astype(np.int32)
            words = [cupy.empty(s, np.uint32) for s in ((n,), (n,), (n, 4), (n, 4))]
            layer = JaggedGkrLayer(*words, counts)
            schedule = halving_schedule(layer)
            first, whole = _pyramid_us(
                lambda layer=layer, schedule=schedule: build_jagged_pyramid(layer, schedule),
                calls // 4)
            rows[f"jagged pyramid base/ext ({nb} seg.), 2^{log2}"] = {
                "steps": len(schedule), "to_first_launch_us": first, "whole_us": whole}
    finally:
        cupy.asarray = _CUPY_ASARRAY
    return rows


def main(argv=None):
    from zorch_nb.bench import _commit  # the checkout's HEAD (+dirty)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)
    report = {
        "what": "host time of one small transition, of whole pyramids and of small field "
                "products on real CuPy arrays; launches are no-ops and memory is fake, so "
                "the GPU launches (~6 us each) are not included, nor the jagged pyramid's "
                "H2D copy of its packed counts",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "python": platform.python_version(),
        "cupy": cupy.__version__,
        "commit": _commit(),
        "command": " ".join(["python benchmarks/cupy_host_dispatch.py"] +
                            (argv if argv is not None else sys.argv[1:])),
        "length": 1 << 10,
        "results": measure(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
