"""Host-side cost of a small transition on real CuPy arrays, without a GPU.

The dispatch target (one transition at L = 2**10 under 15 us on the CuPy
path) is mostly host time: CuPy's array metadata, allocations and views, our
checks, and the launch.  All but the launch run on a machine with no GPU:
CuPy imports without a driver, ``cupy.cuda.set_allocator`` accepts an
allocator that hands out pointers to no memory (``UnownedMemory``), and the
kernel functions are replaced by a no-op, so nothing ever touches device
memory.  What this measures is therefore the object layer's time on CuPy
objects, minus the launch itself (about 6 us on the GPU machine per the
issue; ``python -m zorch_nb bench --device gpu`` reports it as
``launch_only_us``).  Dense transitions only: a jagged one copies or views
its counts with ``cupy.asarray``, which asks the driver for the device.

    pip install cupy-cuda13x   # no driver needed
    python benchmarks/cupy_host_dispatch.py [--json FILE]

Do not import this into a process that uses a GPU: the allocator is global.
"""
import argparse
import datetime
import json
import platform
import sys
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


class _NoLaunch:
    def __call__(self, grid, block, args, **kwargs):
        pass


def _best_us(fn, number=20000, repeat=7):
    fn()
    return round(min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6, 2)


def measure():
    cupy.cuda.set_allocator(_no_memory)
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
    return rows


def main(argv=None):
    from zorch_nb.bench import _commit  # the checkout's HEAD (+dirty)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the report here")
    args = ap.parse_args(argv)
    report = {
        "what": "host time of one small transition on real CuPy arrays; launches are "
                "no-ops and memory is fake, so the GPU launch (~6 us) is not included",
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
