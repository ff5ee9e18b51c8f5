"""Instruction counts of the Numba-CUDA GKR and field kernels (SASS), without a GPU.

Usage: ``python benchmarks/numba_sass.py [OUTDIR] [CUOBJDUMP]`` from the
project root (needs numba-cuda with NVVM, ``ptxas`` and a ``cuobjdump``).

The twin of ``benchmarks/sass_stats.py`` (which reads the CUDA C kernels'
cubin): each Numba-CUDA launch of a dense and a jagged transition (four field
modes), of the fused dense pyramid, of the fused jagged chunk, of twelve
field ops and of the field kernel layer's five other kernels (inverses,
encode, decode, zero scan: the ``field ...`` rows) is compiled to sm_90 PTX
with the argument types their launchers pass (the driverless stand-ins of
``tests/cuda_nodriver.py``), assembled with ``ptxas -arch=sm_90`` and
disassembled; the table is also written to ``OUTDIR/numba_sass.json``.
``instr`` counts the whole kernel: for a dense one, one grid-stride loop
body (one output slot, two nodes) plus the set-up.  (``nvdisasm``, which
``cuobjdump -sass`` runs, must be on ``PATH``; without a CUDA toolkit, the
pip wheels ``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` carry both,
under ``nvidia/cu13/bin``.)

Where the local ``ptxas`` is older than NVVM it rejects the PTX ``.version``
line; the file is then assembled once more with the version ptxas names as
its own (the kernels use no newer PTX feature; ptxas refuses the file if they
do), and the table says so.  ``loop`` is the instruction count of the main
loop alone (the backward branch spanning the most global loads).
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_kernels() -> dict:
    """``{label: ptx}`` of every Numba-CUDA launch of the driven object-layer calls."""
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import cuda_nodriver
    from numba import cuda

    ptx = {}

    def on_launch(disp, sig):
        label = f"{disp.py_func.__qualname__.replace('.<locals>', '')}#{len(ptx)}"
        ptx[label], _ = cuda.compile_ptx(disp.py_func, sig, cc=(9, 0))

    cuda_nodriver.install(on_launch)
    from zorch_nb import KoalaBear as F
    from zorch_nb import logup_gkr as lg
    for n_ext in (False, True):
        for d_ext in (False, True):
            N, D = (F.ext if n_ext else F), (F.ext if d_ext else F)
            mles = [N.random(16, seed=1), N.random(16, seed=2),
                    D.random(16, seed=3), D.random(16, seed=4)]
            mode = f"{'ext' if n_ext else 'base'}/{'ext' if d_ext else 'base'}"
            before = set(ptx)
            lg.layer_transition(lg.GkrLayer(*mles, 1, F), backend="numba")
            lg.build_pyramid(lg.GkrLayer(*mles, 1, F), backend="numba")
            layer = lg.JaggedGkrLayer(*mles, [5, 3, 0, 8], F)
            lg.jagged_layer_transition(layer, [3, 2, 1, 4], backend="numba")
            lg.build_jagged_pyramid(layer, [[3, 2, 1, 4], [2, 1, 1, 2], [1, 1, 1, 1]],
                                    backend="numba")  # the fused three-step chunk
            for label in set(ptx) - before:  # name each launch by its input mode
                ptx[f"{label.split('#')[0]} {mode}"] = ptx.pop(label)
    # the field ops' grid-stride kernels (one launch each; the eq table's
    # doublings all launch one kernel)
    E = F.ext
    a, b, x, y = F.random(64, seed=1), F.random(64, seed=2), E.random(64, seed=3), E.random(
        64, seed=4)
    for what, call in (("base mul", lambda: F.mul(a, b, backend="numba")),
                       ("base neg", lambda: F.neg(a, backend="numba")),
                       ("base pow", lambda: F.pow(a, 5, backend="numba")),
                       ("base mle fold", lambda: F.mle_fold(a, b[0], backend="numba")),
                       ("base eq table", lambda: F.eq_table(a[:4], backend="numba")),
                       ("ext mul", lambda: E.mul(x, y, backend="numba")),
                       ("ext square", lambda: E.square(x, backend="numba")),
                       ("ext pow", lambda: E.pow(x, 5, backend="numba")),
                       ("ext mle fold", lambda: E.mle_fold(x, y[0], backend="numba")),
                       ("ext eq table", lambda: E.eq_table(x[:4], backend="numba")),
                       ("base rows + one row",
                        lambda: F.add(a.reshape(8, 8), b[:8], backend="numba")),
                       ("ext x base", lambda: E.mul(x, a, backend="numba"))):
        before = set(ptx)
        call()
        new = sorted(set(ptx) - before, key=lambda label: int(label.split("#")[1]))
        ptx[f"field {what}"] = ptx.pop(new[0])
        for label in new[1:]:
            del ptx[label]
    # the kernel layer's other grid-stride kernels, one launch per call
    from zorch_nb.kernels import field_cuda_numba as fk
    from zorch_nb.kernels.monty import OP_INV
    f, ints = F.params, np.arange(64, dtype=np.int64)
    for what, call in (("base inverse", lambda: fk.base_batch_inv(a, np.empty_like(a), f)),
                       ("ext inverse", lambda: fk.ext4_map1(OP_INV, x, np.empty_like(x), f)),
                       ("encode", lambda: fk.encode(ints, np.empty(64, np.uint32), False, f)),
                       ("decode", lambda: fk.decode(a, np.empty_like(a), f)),
                       ("zero scan", lambda: fk.base_first_zero(a, f))):
        before = set(ptx)
        call()
        (label,) = set(ptx) - before
        ptx[f"field {what}"] = ptx.pop(label)
    return ptx


def loop_body(sass: str) -> int:
    """Instructions of the kernel's main loop: the backward branch whose span
    holds the most global loads (a grid-stride loop body = one slot)."""
    ins = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)
    addr = [int(a, 16) for a, _ in ins]
    best = (0, 0)
    for at, (_, text) in zip(addr, ins):
        m = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < at:
            body = [t for a, t in zip(addr, (t for _, t in ins)) if int(m.group(1), 16) <= a <= at]
            best = max(best, (sum("LDG" in t for t in body), len(body)))
    return best[1]


def assemble(path_ptx: str, path_cubin: str) -> str:
    """``ptxas -arch=sm_90``; returns a note when the PTX version had to be lowered."""
    cmd = ["ptxas", "-arch=sm_90", path_ptx, "-o", path_cubin]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode == 0:
        return ""
    m = re.search(r"Unsupported \.version (\S+); current version is '(\S+)'", res.stderr)
    if not m:
        raise RuntimeError(res.stderr)
    with open(path_ptx) as fh:
        text = fh.read()
    with open(path_ptx, "w") as fh:
        fh.write(re.sub(r"^\.version \S+", f".version {m.group(2)}", text, count=1, flags=re.M))
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    return f"PTX .version {m.group(1)} assembled as {m.group(2)}"


def main(argv) -> int:
    out = argv[1] if len(argv) > 1 else "/tmp/zorch_numba_sass"
    tool = argv[2] if len(argv) > 2 else None
    os.makedirs(out, exist_ok=True)
    sys.path.insert(0, HERE)
    import sass_stats
    tool = tool or sass_stats.shutil.which("cuobjdump")
    if not tool:
        print("cuobjdump not found (pass its path)", file=sys.stderr)
        return 2
    classes = sass_stats._CLASSES
    print(f"{'kernel (input mode)':<34} {'instr':>6} {'loop':>6} "
          + " ".join(f"{c:>9}" for c in classes))
    notes, rows = set(), []
    for k, (label, text) in enumerate(sorted(compile_kernels().items())):
        ptx, cubin = os.path.join(out, f"k{k}.ptx"), os.path.join(out, f"k{k}.cubin")
        with open(ptx, "w") as fh:
            fh.write(text)
        notes.add(assemble(ptx, cubin))
        sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout
        loop = loop_body(sass)
        for _, total, c in sass_stats.stats(sass):
            print(f"{label:<34} {total:>6} {loop:>6} " + " ".join(f"{c[x]:>9}" for x in classes))
            rows.append({"kernel": label, "instr": total, "loop": loop,
                         **{x: c[x] for x in classes}})
    for note in sorted(notes - {""}):
        print(note)
    with open(os.path.join(out, "numba_sass.json"), "w") as fh:
        json.dump({"arch": "sm_90", "notes": sorted(notes - {""}), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
