"""First-call time of common field ops in one process, in this order (compiles
included): run with an empty NUMBA_CACHE_DIR to see what each first call
compiles, e.g. ``NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/cold_field_ops.py``."""
import time
t = time.time()
from zorch_nb import KoalaBear as F
print("import %.1f" % (time.time() - t))
E = F.ext
def tm(name, fn):
    t = time.time(); fn(); print("%-28s %.1f s" % (name, time.time() - t), flush=True)
a = b = x = y = None
def setup():
    global a, b, x, y
    a, b = F.random(1000, seed=1), F.random(1000, seed=2)
    x, y = E.random(1000, seed=1), E.random(1000, seed=2)
tm("random base+ext", setup)
tm("F.mul", lambda: F.mul(a, b))
tm("F.add", lambda: F.add(a, b))
tm("E.mul", lambda: E.mul(x, y))
tm("E.add", lambda: E.add(x, y))
tm("E.mul by one element", lambda: E.mul(x, y[0]))
tm("F.mul by one element", lambda: F.mul(a, b[0]))
tm("E.mul by base (mixed)", lambda: E.mul(x, a))
tm("F.inv", lambda: F.inv(a))
tm("E.inv", lambda: E.inv(x))
tm("E.sum", lambda: E.sum(x))
tm("F.decode", lambda: F.decode(a))
