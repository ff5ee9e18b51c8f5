"""The CUDA C of ``kernels/cuda/gkr.cu``, compiled for the host, against big ints.

The per-slot functions of ``gkr.cu`` (dense slot, jagged slot, the lean
fraction sums of every base/extension mode) are ``__host__ __device__``; here
g++ compiles them with a small harness that loops over slots, and the results
must equal the pure-Python reference (and hence the Numba kernels) byte for
byte.  Edge words (``0``, ``p - 1``, ...) exercise the delayed-reduction
bounds.  The vector loads and the device prefix scan only exist on the GPU;
the GPU tests cover them.
"""
import ctypes

import numpy as np
import pytest

import naive_gkr as ng
from cuda_host import compile_host, ptr
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.kernels.field_params import FIELDS

MODES = [(ne, de) for ne in (0, 1) for de in (0, 1)]

_PTRS = ", ".join(f"{c} zorch_u32* {n}" for c, n in
                  [("const", "n0"), ("const", "n1"), ("const", "d0"), ("const", "d1"),
                   ("", "on0"), ("", "on1"), ("", "od0"), ("", "od1")])
HARNESS = "".join(f"""
extern "C" void host_dense_{ne}{de}({_PTRS}, long half) {{
    for (long k = 0; k < half; ++k)
        zorch_gkr_dense_slot<{ne}, {de}, false>(k, n0, n1, d0, d1, on0, on1, od0, od1);
}}
extern "C" void host_jagged_{ne}{de}(const int* rc, const int* orc, const long long* prefix,
                                     unsigned int nb, {_PTRS}, long width, long in_width) {{
    for (long q = 0; q < width; ++q)
        zorch_gkr_jagged_slot<{ne}, {de}, false>(q, rc, orc, prefix, nb, in_width, n0, n1, d0,
                                                 d1, on0, on1, od0, od1);
}}
""" for ne, de in MODES) + """
extern "C" unsigned int host_find_segment(const long long* cum, unsigned int nb, long long q) {
    return zorch_gkr_find_segment(cum, nb, q);
}
"""

FIELD_OBJ = {"koalabear": KoalaBear, "babybear": BabyBear}


def _mles(field, ne, de, length, seed):
    """Random MLEs with the first rows set to edge words (0, 1, p - 1, ...)."""
    p = field.p
    edges = [p - 1, p - 1, 0, 1, p - 2, 2**32 % p]
    out = []
    for i, ext in enumerate((ne, ne, de, de)):
        a = (field.ext if ext else field).random(length, seed=seed + i)
        for r, v in enumerate(edges[:length]):
            a[r] = field.encode(v) if not (i >= 2 and v == 0) else field.encode(1)
        out.append(a)
    return out


def _outputs(ne, de, width):
    oe = ne or de
    shape = lambda e: (width, 4) if e else (width,)  # noqa: E731
    return [np.full(shape(oe), 7, np.uint32), np.full(shape(oe), 7, np.uint32),
            np.full(shape(de), 7, np.uint32), np.full(shape(de), 7, np.uint32)]


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_dense_slot_on_host(field, ne, de):
    lib = compile_host(field, "gkr.cu", HARNESS)
    F = FIELD_OBJ[field]
    length = 32
    ins = _mles(F, ne, de, length, seed=5)
    outs = _outputs(ne, de, length // 2)
    getattr(lib, f"host_dense_{ne}{de}")(*map(ptr, ins + outs), ctypes.c_long(length // 2))
    ref = ng.dense_transition(F.name, ng.layer_from_words(F.name, *ins))
    for got, want in zip(outs, ng.layer_words(F.name, ref)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("ne,de", MODES)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_jagged_slot_on_host(field, ne, de):
    lib = compile_host(field, "gkr.cu", HARNESS)
    F = FIELD_OBJ[field]
    rc = np.array([5, 0, 1, 8, 3, 2, 0, 4], np.int32)
    orc = np.array([3, 1, 2, 4, 2, 1, 1, 3], np.int32)  # padding, saturation, empties
    width, out_width = int(rc.sum()) + 3, int(orc.sum()) + 4  # slack on both sides
    prefix = np.stack([np.cumsum(rc), np.cumsum(orc)]).astype(np.int64)
    ins = _mles(F, ne, de, width, seed=9)
    outs = _outputs(ne, de, out_width)
    getattr(lib, f"host_jagged_{ne}{de}")(ptr(rc), ptr(orc), ptr(prefix), ctypes.c_uint(8),
                                          *map(ptr, ins + outs), ctypes.c_long(out_width),
                                          ctypes.c_long(width))
    ref = ng.jagged_transition(F.name, ng.layer_from_words(F.name, *ins), list(rc), list(orc),
                               out_width)
    for got, want in zip(outs, ng.layer_words(F.name, ref)):
        np.testing.assert_array_equal(got, want)


def test_find_segment_on_every_backend():
    """The segment of output slot q: the first s with cum[s] > q (inclusive
    prefix sums; empty segments repeat a sum), and nb - 1 for every slot past
    the total -- the dead slots, whose segment index the jagged slot bodies
    still read rc[s] / orc[s] with, so it must stay below nb.  The CUDA C
    binary search, the Numba one (compiled, and as plain Python) agree with
    a linear scan."""
    from zorch_nb.kernels import gkr_cpu, gkr_scalar
    lib = compile_host("koalabear", "gkr.cu", HARNESS)
    lib.host_find_segment.restype = ctypes.c_uint
    for counts in ([0], [3], [0, 0, 5, 0], [2, 0, 0, 1, 4, 0, 0, 0], [1] * 7, [0, 9, 0, 0, 0]):
        cum = np.cumsum(np.array(counts, np.int64))
        prefix = np.stack([cum, cum])  # (row 1 is searched, as in the transition)
        for q in range(int(cum[-1]) + 4):
            want = next((s for s, c in enumerate(cum) if c > q), len(cum) - 1)
            got = (lib.host_find_segment(ptr(cum), ctypes.c_uint(len(cum)), ctypes.c_longlong(q)),
                   gkr_cpu._find_segment(prefix, 1, q), gkr_scalar.find_segment(prefix, 1, q))
            assert got == (want,) * 3, (counts, q)
