"""Instruction counts of the compiled GKR kernels (SASS), per kernel.

Usage: ``python benchmarks/sass_stats.py KERNELS.cubin [CUOBJDUMP]``

Runs ``cuobjdump -sass`` (the CUDA toolkit's, or the one Triton's wheel
carries) and prints, per kernel, the instruction count and the classes that
bound a memory-bound kernel's arithmetic: integer multiply-adds (``IMAD``,
the 32x32->64 products and Montgomery reductions), compares and selects (the
conditional subtractions), global loads and stores.  For the dense fold the
count is per thread = per output slot (two nodes), so instructions x slots
against the memory time says how much issue headroom the arithmetic leaves.
"""
import collections
import re
import shutil
import subprocess
import sys

# LD / ST: generic loads and stores (the state space resolved at run time),
# e.g. a Numba-CUDA kernel reaching shared memory through an array slice.
_CLASSES = ("IMAD.WIDE", "IMAD", "IMAD.HI", "IADD3", "ISETP", "SEL", "LDG", "STG", "LDS", "STS",
            "LD", "ST", "SHFL", "BAR")


def _class(op: str) -> str:
    """Opcode class: ``IMAD.WIDE`` (a 32x32->64 product) and ``IMAD.HI`` apart
    from plain ``IMAD``; ``IMAD.MOV`` is a register move (``MOV``)."""
    for head in ("IMAD.WIDE", "IMAD.HI"):
        if op.startswith(head):
            return head
    return "MOV" if op.startswith("IMAD.MOV") else op.split(".")[0]


def stats(sass: str) -> list:
    """``[(kernel, total, Counter of opcode classes)]`` from ``cuobjdump -sass`` text."""
    out = []
    for part in re.split(r"\n\s+Function : ", sass)[1:]:
        mangled = part.split("\n", 1)[0].strip()
        name = subprocess.run(["c++filt", mangled], capture_output=True,
                              text=True).stdout.strip() or mangled
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", part)
        out.append((name, len(ops), collections.Counter(_class(op) for op in ops)))
    return out


def main(argv) -> int:
    if len(argv) not in (2, 3):
        print(f"usage: python {argv[0]} KERNELS.cubin [CUOBJDUMP]", file=sys.stderr)
        return 2
    cubin = argv[1]
    tool = argv[2] if len(argv) > 2 else shutil.which("cuobjdump")
    if not tool:
        print("cuobjdump not found (pass its path)", file=sys.stderr)
        return 2
    sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True,
                          check=True).stdout
    print(f"{'kernel':<40} {'instr':>6} " + " ".join(f"{c:>9}" for c in _CLASSES))
    for name, total, c in sorted(stats(sass)):
        short = name.split("(")[0].replace("void ", "").replace("zorch_gkr_", "")
        print(f"{short:<40} {total:>6} " + " ".join(f"{c[k]:>9}" for k in _CLASSES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
