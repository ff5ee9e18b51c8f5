"""Compile CUDA C sources for the host to check their arithmetic without a GPU.

The kernel files keep their per-element math in ``ZORCH_HD`` (``__host__
__device__``) functions and guard the ``__global__`` wrappers with
``#ifdef __CUDACC__``, so ``preamble + monty.cuh + <file> + harness`` is plain
C++ that g++ compiles.  ``harness`` adds ``extern "C"`` loops over arrays that
the tests call through ctypes and compare with the big-int references.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from zorch_nb.kernels.cuda_source import assemble
from zorch_nb.kernels.field_params import FIELDS

_BUILD_DIR = os.path.join(tempfile.gettempdir(), "zorch_nb_host_cuda")


def compile_text(src: str, flags=("-std=c++17",)) -> ctypes.CDLL:
    """Shared library of a complete C++ translation unit ``src`` (cached by content).

    Skips the calling test if no C++ compiler exists.
    """
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler to check the CUDA C arithmetic")
    key = hashlib.sha256((" ".join(flags) + src).encode()).hexdigest()[:16]
    os.makedirs(_BUILD_DIR, exist_ok=True)
    lib = os.path.join(_BUILD_DIR, f"{key}.so")
    if not os.path.exists(lib):
        # per-process names: pytest-xdist workers may build the same unit at once,
        # and g++ must never read a source another process is still writing
        cpp = lib[:-3] + f".{os.getpid()}.cpp"
        with open(cpp, "w") as fh:
            fh.write(src)
        tmp = lib + f".{os.getpid()}.tmp"
        subprocess.run([cxx, "-O2", "-shared", "-fPIC", *flags, "-x", "c++", cpp, "-o", tmp],
                       check=True, capture_output=True, text=True)
        os.replace(tmp, lib)
    return ctypes.CDLL(lib)


def compile_host(field_name: str, kernel_file: str, harness: str) -> ctypes.CDLL:
    """Shared library of ``kernel_file`` (for ``field_name``) plus ``harness``.

    ``field_name`` is a key of ``FIELDS`` ("koalabear", "babybear").
    """
    return compile_text(assemble(FIELDS[field_name], kernel_file) + "\n" + harness)


def nvcc_ptx(source_path, ptx_path) -> None:
    """Compile one CUDA C file to PTX for ``sm_90`` and assert it compiled.

    Skips without nvcc, unless ``ZORCH_REQUIRE_NVCC=1`` (CI), which fails.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("ZORCH_REQUIRE_NVCC") == "1":
            pytest.fail("ZORCH_REQUIRE_NVCC=1 but nvcc is not on PATH")
        pytest.skip("nvcc not found (set ZORCH_REQUIRE_NVCC=1 to make this a failure)")
    res = subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-std=c++17", str(source_path),
                          "-o", str(ptx_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    # and cleanly: a warning about the source itself (monty.cuh's "#pragma once
    # in main file" was printed for every unit; the tool's own notes may differ
    # by version and are not the source's)
    name = os.path.basename(str(source_path))
    assert not [ln for ln in res.stderr.splitlines() if name in ln and "warning" in ln], \
        res.stderr


def ptr(a: np.ndarray):
    """ctypes pointer to a C-contiguous array's data."""
    assert a.flags.c_contiguous
    return a.ctypes.data_as(ctypes.c_void_p)
