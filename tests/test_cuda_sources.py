"""CUDA C sources: nvcc compiles every one; their arithmetic is right on the host.

* Every shipped kernel file, assembled for every field, is compiled to PTX for
  ``sm_90`` with ``nvcc``.  Skipped without nvcc unless ``ZORCH_REQUIRE_NVCC=1``
  (CI sets it, so a syntax error cannot land).
* ``field_ops.cu``'s per-element functions are compiled for the CPU with g++
  and compared with Python big integers, so the CUDA C arithmetic is checked
  on machines without a GPU.
"""
import ctypes
import os

import numpy as np
import pytest

import naive
from cuda_host import compile_host, nvcc_ptx, ptr
from zorch_nb.kernels import monty
from zorch_nb.kernels.cuda_source import assemble, emit_all, kernel_sources
from zorch_nb.kernels.field_params import FIELDS


def test_every_kernel_file_is_listed():
    assert "field_ops.cu" in kernel_sources()


@pytest.mark.parametrize("kernel_file", kernel_sources())
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_nvcc_compiles(field, kernel_file, tmp_path):
    src = tmp_path / f"{field}_{kernel_file}"
    src.write_text(assemble(FIELDS[field], kernel_file))
    nvcc_ptx(src, tmp_path / "out.ptx")
    assert (tmp_path / "out.ptx").stat().st_size > 0


def test_launch_constants_have_one_home():
    """The GKR launch constants reach gkr.cu only through the preamble
    (launch_config.gkr_cuda_defines): the file defines none itself, and a
    unit built without the preamble stops at its #error."""
    import re
    from zorch_nb.kernels.cuda_source import read_source
    from zorch_nb.kernels.launch_config import gkr_cuda_defines
    names = re.findall(r"#define (ZORCH_GKR_\w+)", gkr_cuda_defines())
    assert len(names) == 6
    text = read_source("gkr.cu")
    for name in names:
        assert not re.search(rf"#define\s+{name}\b", text), name
        assert name in text, f"{name} is generated but gkr.cu does not use it"
    assert re.search(r"#ifndef ZORCH_GKR_MAX_FUSED\s*\n#error", text)


HARNESS = r"""
extern "C" void host_base_op1(int op, const zorch_u32* a, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i) out[i] = zorch_base_op1(op, a[i]);
}
extern "C" void host_base_op2(int op, const zorch_u32* a, const zorch_u32* b, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i) out[i] = zorch_base_op2(op, a[i], b[i]);
}
extern "C" void host_ext4_op1(int op, const zorch_u32* a, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i) zorch_ext4_store(out, i, zorch_ext4_op1(op, zorch_ext4_load(a, i)));
}
extern "C" void host_ext4_op2(int op, const zorch_u32* a, const zorch_u32* b, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i)
        zorch_ext4_store(out, i, zorch_ext4_op2(op, zorch_ext4_load(a, i), zorch_ext4_load(b, i)));
}
extern "C" void host_ext4_pow(const zorch_u32* a, unsigned long long hi, unsigned long long lo,
                              int nbits, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i)
        zorch_ext4_store(out, i, zorch_ext4_pow_e(zorch_ext4_load(a, i), hi, lo, nbits));
}
extern "C" void host_base_pow(const zorch_u32* a, unsigned long long hi, unsigned long long lo,
                              int nbits, zorch_u32* out, long n) {
    for (long i = 0; i < n; ++i) out[i] = zorch_base_pow_e(a[i], hi, lo, nbits);
}
"""


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_cuda_c_field_arithmetic_on_host(field):
    lib = compile_host(field, "field_ops.cu", HARNESS)
    f = FIELDS[field]
    p, w = f.p, f.w
    rng = np.random.default_rng(11)
    n = 300
    edges = [0, 1, p - 1, 2**32 % p, 2, p - 2]
    xv = rng.integers(0, p, size=(n, 4))
    yv = rng.integers(0, p, size=(n, 4))
    xv[: len(edges), :] = np.array(edges)[:, None]
    yv[: len(edges), :] = np.array(edges)[::-1, None]
    enc = np.vectorize(lambda v: naive.enc(int(v), p), otypes=[np.uint32])
    a, b = enc(xv), enc(yv)
    out = np.empty_like(a)

    def dec(arr):
        return [[naive.dec(int(v), p) for v in row] for row in arr.reshape(-1, 4)]

    ops2 = {monty.OP_ADD: lambda u, v: naive.ext_add(u, v, p),
            monty.OP_SUB: lambda u, v: naive.ext_sub(u, v, p),
            monty.OP_MUL: lambda u, v: naive.ext_mul(u, v, p, w)}
    for op, ref in ops2.items():
        lib.host_ext4_op2(op, ptr(a), ptr(b), ptr(out), ctypes.c_long(n))
        assert dec(out) == [ref(u, v) for u, v in zip(xv.tolist(), yv.tolist())], op
        flat_out = np.empty(n * 4, dtype=np.uint32)
        lib.host_base_op2(op, ptr(a.ravel()), ptr(b.ravel()), ptr(flat_out), ctypes.c_long(n * 4))
        base_ref = {monty.OP_ADD: lambda u, v: (u + v) % p, monty.OP_SUB: lambda u, v: (u - v) % p,
                    monty.OP_MUL: lambda u, v: u * v % p}[op]
        assert [naive.dec(int(v), p) for v in flat_out] == \
            [base_ref(int(u), int(v)) for u, v in zip(xv.ravel(), yv.ravel())]
    nz = xv.copy()
    nz[~nz.any(axis=1)] = [1, 0, 0, 0]
    c = enc(nz)
    lib.host_ext4_op1(monty.OP_INV, ptr(c), ptr(out), ctypes.c_long(n))
    assert dec(out) == [naive.ext_inv(u, p, w) for u in nz.tolist()]
    lib.host_ext4_op1(monty.OP_NEG, ptr(a), ptr(out), ctypes.c_long(n))
    assert dec(out) == [naive.ext_neg(u, p) for u in xv.tolist()]
    lib.host_ext4_op1(monty.OP_SQUARE, ptr(a), ptr(out), ctypes.c_long(n))
    assert dec(out) == [naive.ext_mul(u, u, p, w) for u in xv.tolist()]
    e = p**4 + 12345
    lib.host_ext4_pow(ptr(a), ctypes.c_ulonglong(e >> 64), ctypes.c_ulonglong(e & (2**64 - 1)),
                      ctypes.c_int(e.bit_length()), ptr(out), ctypes.c_long(n))
    assert dec(out) == [naive.ext_pow(u, e, p, w) for u in xv.tolist()]
    base = np.ascontiguousarray(c[:, 0])
    bout = np.empty_like(base)
    lib.host_base_op1(monty.OP_INV, ptr(base), ptr(bout), ctypes.c_long(n))
    assert [naive.dec(int(v), p) for v in bout] == [pow(int(u), -1, p) for u in nz[:, 0]]
    e = 2**67 + 3
    lib.host_base_pow(ptr(base), ctypes.c_ulonglong(e >> 64), ctypes.c_ulonglong(e & (2**64 - 1)),
                      ctypes.c_int(e.bit_length()), ptr(bout), ctypes.c_long(n))
    assert [naive.dec(int(v), p) for v in bout] == [pow(int(u), e, p) for u in nz[:, 0]]


def test_emit_all_writes_every_field_and_kernel_file(tmp_path):
    """CI's ``--emit DIR`` (what nvcc compiles): one file per field and kernel
    file, each the assembled unit, plus the extra sources given; none
    overwrites another."""
    extra = {"zorch_graph_example.cu": "// a generated evaluator\n"}
    paths = emit_all(str(tmp_path), extra)
    want = {f"{f.name}_{kf}" for f in FIELDS.values() for kf in kernel_sources()}
    assert len(want) == len(FIELDS) * len(kernel_sources())
    assert sorted(os.path.basename(p) for p in paths) == sorted(want | set(extra))
    assert {p.name for p in tmp_path.iterdir()} == want | set(extra)
    for f in FIELDS.values():
        for kf in kernel_sources():
            assert (tmp_path / f"{f.name}_{kf}").read_text() == assemble(f, kf)
    assert (tmp_path / "zorch_graph_example.cu").read_text() == extra["zorch_graph_example.cu"]


_SEGMENT_HARNESS = r"""
extern "C" unsigned int host_find_segment(const long long* cum, unsigned int nb, long long q) {
    return zorch_gkr_find_segment(cum, nb, q);
}
extern "C" void host_scan_run(unsigned int t, unsigned int nthreads, unsigned int nb,
                              unsigned int* lo_hi) {
    zorch_gkr_scan_run(t, nthreads, nb, &lo_hi[0], &lo_hi[1]);
}
"""


_SEGMENT_SEARCH = r"""
import ctypes, mmap, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
lib.host_find_segment.restype = ctypes.c_uint
lib.host_find_segment.argtypes = (ctypes.c_void_p, ctypes.c_uint, ctypes.c_longlong)
noreserve = getattr(mmap, "MAP_NORESERVE", 0x4000)  # (Python 3.13 names it)
for nb in (2**31 + 2, 3 * 2**30, 2**32 - 1):
    try:
        buf = mmap.mmap(-1, 8 * nb, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | noreserve)
    except (OSError, OverflowError, ValueError) as exc:  # (a 32-bit or strict host)
        print(f"skip: no sparse {8 * nb >> 30} GiB mapping here: {exc}")
        sys.exit(0)
    cum = np.frombuffer(buf, dtype=np.int64)
    cum[-2:] = [1, 2]  # every segment empty but the last two, one row each
    want = {0: nb - 2, 1: nb - 1, 5: nb - 1}
    got = {q: lib.host_find_segment(cum.ctypes.data, nb, q) for q in want}
    del cum
    buf.close()
    assert got == want, (nb, got, want)
print("ok")
"""


def test_jagged_segment_search_and_scan_split_past_2_to_the_31_batches():
    """(a review for 32-bit overflow, the H200 holding such counts) The jagged
    kernels' binary search took mid = (lo + hi) >> 1 in 32 bits: past
    nb = 2**31 + 1 it wrapped and the search cycled forever; the block scan's
    run length (nb + nthreads - 1) / nthreads wrapped to 0 near 2**32 (no
    prefix sum written).  The search runs on the host over a sparse 16-32 GiB
    prefix array (untouched pages cost nothing), in a child process: the old
    search never returned."""
    import subprocess
    import sys
    if not sys.platform.startswith("linux"):
        pytest.skip("a sparse mapping (MAP_NORESERVE) is Linux's")
    lib = compile_host("koalabear", "gkr.cu", _SEGMENT_HARNESS)
    try:
        res = subprocess.run([sys.executable, "-c", _SEGMENT_SEARCH, lib._name],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the segment search past 2**31 batches did not return in 60 s")
    assert res.returncode == 0, res.stderr
    if res.stdout.startswith("skip"):
        pytest.skip(res.stdout.strip())
    assert res.stdout.strip() == "ok"
    lo_hi = np.zeros(2, np.uint32)
    for nb, nthreads in ((2**32 - 1, 1024), (2**32 - 5, 256), (3 * 2**30, 1024), (10, 4)):
        runs = []
        for t in (0, 1, nthreads - 1):
            lib.host_scan_run(t, nthreads, ctypes.c_uint(nb), ptr(lo_hi))
            runs.append(tuple(int(v) for v in lo_hi))
        per = -(-nb // nthreads)
        assert runs == [(min(t * per, nb), min(t * per + per, nb)) for t in (0, 1, nthreads - 1)]
