"""Assemble the CUDA C sources shipped under ``kernels/cuda`` for one field.

A full translation unit is ``preamble + monty.cuh + <kernel file>``: the
preamble (``#define``s) specialises it to a field and carries the launch
constants the kernels share with ``launch_config``; the header holds the one
Montgomery reduction of the CUDA C sources.  Sources are read with
:mod:`importlib.resources`, so this works from an installed wheel.  CuPy
compiles these texts at run time; CI compiles every one of them with ``nvcc``
(``python -m zorch_nb.kernels.cuda_source --emit DIR``).
"""
from __future__ import annotations

import functools
import importlib.resources
import os
import sys

from . import monty
from .field_params import FIELDS, FieldParams, cuda_defines
from .launch_checks import check_field
from .launch_config import gkr_cuda_defines

__all__ = ["kernel_sources", "read_source", "assemble", "arithmetic_header", "emit_all"]


def kernel_sources() -> tuple:
    """Names of every kernel file (``*.cu``) shipped under ``kernels/cuda``."""
    folder = importlib.resources.files(__package__).joinpath("cuda")
    return tuple(sorted(e.name for e in folder.iterdir() if e.name.endswith(".cu")))


@functools.lru_cache(maxsize=None)
def read_source(name: str) -> str:
    """Text of ``kernels/cuda/<name>`` from the installed package."""
    return importlib.resources.files(__package__).joinpath("cuda", name).read_text()


def opcode_defines() -> str:
    names = [n for n in dir(monty) if n.startswith("OP_")]
    return "".join(f"#define ZORCH_{n} {getattr(monty, n)}\n" for n in sorted(names))


@functools.lru_cache(maxsize=None)
def assemble(field: FieldParams, kernel_file: str) -> str:
    """Complete CUDA C translation unit of ``kernel_file`` for ``field``."""
    return (
        cuda_defines(field)
        + opcode_defines()
        + gkr_cuda_defines()
        + read_source("monty.cuh")
        + "\n"
        + read_source(kernel_file)
    )


def arithmetic_header(field: FieldParams) -> str:
    """The CUDA C field arithmetic, as a header for your own kernels.

    ``field``'s ``#define`` preamble (``ZORCH_P``, ``ZORCH_MU_NEG``,
    ``ZORCH_R_MOD_P``, ``ZORCH_W_MONT``, ``ZORCH_R2_MOD_P``) followed by
    ``monty.cuh``: ``zorch_mont_mul``, ``zorch_add``, ``zorch_sub``,
    ``zorch_neg``, ``zorch_inv``, ``zorch_canonical``, the extension's
    ``zorch_ext4_mul`` / ``zorch_ext4_add`` / ... on ``zorch_ext4`` structs,
    all ``__host__ __device__``, on Montgomery words in ``[0, p)`` (words
    read from arrays go through ``zorch_canonical`` first).  Append your
    kernels and compile the text as C++ (CuPy's ``RawModule(code=...,
    options=("-std=c++17",))``, NVRTC or ``nvcc``; ``g++`` for the host).
    """
    check_field("cuda_source.arithmetic_header", field, "field")
    return cuda_defines(field) + read_source("monty.cuh") + "\n"


def emit_all(directory: str, extra: dict | None = None) -> list:
    """Write every assembled source (every field x kernel file) to ``directory``.

    ``extra`` maps file names to further complete sources (e.g. generated
    kernels) to write alongside.  Returns the written paths.
    """
    os.makedirs(directory, exist_ok=True)
    paths = []
    for field in FIELDS.values():
        for kf in kernel_sources():
            path = os.path.join(directory, f"{field.name}_{kf}")
            with open(path, "w") as fh:
                fh.write(assemble(field, kf))
            paths.append(path)
    for name, text in (extra or {}).items():
        path = os.path.join(directory, name)
        with open(path, "w") as fh:
            fh.write(text)
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover - CI entry point
    if len(sys.argv) != 3 or sys.argv[1] != "--emit":
        sys.exit("usage: python -m zorch_nb.kernels.cuda_source --emit DIR")
    for p in emit_all(sys.argv[2]):
        print(p)
