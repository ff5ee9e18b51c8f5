"""Steady-state times (ms, best of 9, 2**22 elements) of the broadcast products
and sums the rows kernels run (kernels/field_cpu._make_rows_kernel)."""
import time
from zorch_nb import KoalaBear as F
E = F.ext
n = 1 << 22
x = E.random(n, seed=1); a = F.random(n, seed=2); e = x[5]
r = F.random((64, n // 64), seed=3); row = F.random((1, n // 64), seed=4)
def best(fn, k=9):
    fn(); ts = []
    for _ in range(k):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return min(ts) * 1e3
print("E.mul(x, e) %.2f ms | E.mul(x, a) %.2f ms | F.add rows %.2f ms | E.sub(x, e) %.2f ms" % (
    best(lambda: E.mul(x, e)), best(lambda: E.mul(x, a)), best(lambda: F.add(r, row)),
    best(lambda: E.sub(x, e))))
