"""Steady-state times (ms, best of 9, 2**22 elements) of the broadcast products
and sums the rows kernels run (kernels/field_cpu._make_rows_kernel)."""
from field_ops import best_ms  # (this script's folder is first on sys.path)
from zorch_nb import KoalaBear as F
E = F.ext
n = 1 << 22
x = E.random(n, seed=1); a = F.random(n, seed=2); e = x[5]
r = F.random((64, n // 64), seed=3); row = F.random((1, n // 64), seed=4)
def best(fn):
    return best_ms(fn, 9)
print("E.mul(x, e) %.2f ms | E.mul(x, a) %.2f ms | F.add rows %.2f ms | E.sub(x, e) %.2f ms" % (
    best(lambda: E.mul(x, e)), best(lambda: E.mul(x, a)), best(lambda: F.add(r, row)),
    best(lambda: E.sub(x, e))))
