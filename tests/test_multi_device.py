"""GPU arrays off CuPy's current device (machines with two GPUs or more).

zorch_nb launches its kernels on CuPy's current device, as CuPy does.  An
array of another device handed to such a launch is an illegal address on the
GPU, which poisons the whole CUDA context; so the object layer refuses it
with a ``ValueError`` that names the argument and both devices.  A graph
``Context`` keeps its buffers on the device it was made on and runs there.

These run under the emulated CuPy (``ZORCH_EMULATE_CUPY=1``, which models
two devices and faults a launch with another device's array) and on a
machine with two GPUs; with one GPU they are skipped.
"""
import numpy as np
import pytest

from conftest import EMULATED_CUPY
from zorch_nb import BabyBear, KoalaBear
from zorch_nb.graph import Context, In, Out, kernel
from zorch_nb.logup_gkr import (GkrLayer, JaggedGkrLayer, build_jagged_pyramid, build_pyramid,
                                halving_schedule, jagged_layer_transition, layer_transition)

pytestmark = pytest.mark.gpu

FIELDS = [pytest.param(KoalaBear, id="koalabear"), pytest.param(BabyBear, id="babybear")]


@pytest.fixture
def cp():
    import cupy
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    assert cupy.cuda.runtime.getDevice() == 0
    return cupy


def on(cp, device, host):
    with cp.cuda.Device(device):
        return cp.asarray(host)


def device_id(x):
    return x.data.device_id


OFF_DEVICE = r"`{}` lives on GPU 1 but the current device is GPU 0.*cupy\.cuda\.Device\(1\)"


@pytest.mark.parametrize("F", FIELDS)
def test_field_ops_run_on_the_current_device_and_refuse_another(cp, F):
    E = F.ext
    a, b = F.random(64, seed=1), F.random(64, seed=2)
    x, y = E.random(64, seed=3), E.random(64, seed=4)
    da, db, dx, dy = (on(cp, 1, v) for v in (a, b, x, y))
    calls = {  # name: (call, the argument the error names)
        "mul": (lambda a, b, x, y, **o: F.mul(a, b, **o), "a"),
        "mul by one element": (lambda a, b, x, y, **o: F.mul(a, b[3], **o), "a"),
        "square": (lambda a, b, x, y, **o: F.square(a, **o), "a"),
        "pow": (lambda a, b, x, y, **o: F.pow(a, 2**70 + 5, **o), "a"),
        "inv": (lambda a, b, x, y, **o: E.inv(x, **o), "a"),
        "ext mul": (lambda a, b, x, y, **o: E.mul(x, y, **o), "a"),
        "ext times base": (lambda a, b, x, y, **o: E.mul(x, a, **o), "a"),
        "batch_inv": (lambda a, b, x, y, **o: F.batch_inv(a, **o), "a"),
        "sum": (lambda a, b, x, y, **o: F.sum(x, **o), "a"),
        "mle_fold": (lambda a, b, x, y, **o: E.mle_fold(x, y[0], **o), "values"),
        "eq_table": (lambda a, b, x, y, **o: E.eq_table(y[:5], **o), "point"),
    }
    for what, (call, name) in calls.items():
        want = call(a, b, x, y)
        with cp.cuda.Device(1):
            got = call(da, db, dx, dy)
            assert device_id(got) == 1, what
            assert np.array_equal(got.get(), want), what
            out = cp.empty_like(got)
            assert call(da, db, dx, dy, out=out) is out, what
            assert np.array_equal(out.get(), want), what
            # an out on another device than the operands
            with pytest.raises(ValueError, match="different devices.*`out` on device 0"):
                call(da, db, dx, dy, out=on(cp, 0, np.zeros_like(want)))
        with pytest.raises(ValueError, match=OFF_DEVICE.format(name)):
            call(da, db, dx, dy)
    # a host scalar or point beside device operands: the device operand is named
    for call, name in ((lambda: F.mul(np.uint32(5), db), "b"), (lambda: E.add(E.one, dy), "b"),
                       (lambda: E.mle_eval(dx[:8], y[:3]), "values"),
                       (lambda: F.mle_eval(da[:8], a[:3]), "values")):
        with pytest.raises(ValueError, match=OFF_DEVICE.format(name)):
            call()
    # a point or coordinate on another device than the values, named as such
    with cp.cuda.Device(1):
        dy0 = on(cp, 0, y)
        for call in (lambda: E.mle_eval(dx[:8], dy0[:3]), lambda: F.mle_eval(da[:8], dy0[:3, 0]),
                     lambda: E.mle_fold(dx, dy0[0]),
                     # no variables: the empty point is checked all the same
                     lambda: E.mle_eval(dx[:1], dy0[:0]), lambda: F.mle_eval(da[:1], dy0[:0, 0])):
            with pytest.raises(ValueError, match="different devices.*`(point|r)` on device 0"):
                call()
    for backend in (None, "cpu"):  # and host values with a device point, at any nv
        for nv in (0, 3):
            with pytest.raises(TypeError, match="`values` is NumPy, `point` is CuPy"):
                E.mle_eval(x[:1 << nv], dy[:nv], backend=backend)


@pytest.mark.cudasim
def test_numba_backend_refuses_another_device(cp):
    a = KoalaBear.random(8, seed=1)
    da = on(cp, 1, a)
    with pytest.raises(ValueError, match=OFF_DEVICE.format("a")):
        KoalaBear.mul(da, da, backend="numba")


def _dense_layer(F, xp_of, n=64, seed=5):
    rng = np.random.default_rng(seed)
    mles = [F.encode(rng.integers(0, F.p, size=shape)) for shape in
            [(n,), (n,), (n, 4), (n, 4)]]
    return GkrLayer(*map(xp_of, mles), num_batch_variables=0, field=F)


@pytest.mark.parametrize("F", FIELDS)
def test_gkr_transitions_refuse_a_layer_off_the_current_device(cp, F):
    host = _dense_layer(F, lambda v: v)
    layer = _dense_layer(F, lambda v: on(cp, 1, v))  # built off its device: no launch yet
    want = [m for lay in build_pyramid(host) for m in lay.mles]
    with cp.cuda.Device(1):
        nxt = layer_transition(layer)  # the trusted path: the layer was checked
        assert {device_id(m) for m in nxt.mles} == {1}
        pyramid = build_pyramid(layer)
        got = [m for lay in pyramid for m in lay.mles]
        assert all(np.array_equal(g.get(), w) for g, w in zip(got, want))
    floor = pyramid[-1]  # nothing left to launch: refused all the same, fused or not
    for call in (lambda: layer_transition(layer), lambda: layer_transition(nxt),
                 lambda: build_pyramid(layer), lambda: build_pyramid(layer, fused=False),
                 lambda: build_pyramid(floor), lambda: build_pyramid(floor, fused=False)):
        with pytest.raises(ValueError, match=OFF_DEVICE.format("numerator_0")):
            call()


def test_jagged_pyramid_refuses_a_layer_off_the_current_device(cp):
    F = KoalaBear
    rng = np.random.default_rng(9)
    segments = [(F.encode(rng.integers(0, F.p, size=c)), F.encode(rng.integers(1, F.p, size=c)))
                for c in (5, 8, 1, 3)]
    host = JaggedGkrLayer.from_segments(segments, field=F)
    layer = JaggedGkrLayer(*(on(cp, 1, m) for m in host.mles), row_counts=host.row_counts,
                           field=F)
    schedule = halving_schedule(host)
    want = [m for lay in build_jagged_pyramid(host, schedule) for m in lay.mles]
    with cp.cuda.Device(1):
        got = [m for lay in build_jagged_pyramid(layer, schedule) for m in lay.mles]
    assert all(np.array_equal(g.get(), w) for g, w in zip(got, want))
    with pytest.raises(ValueError, match=OFF_DEVICE.format("numerator_0")):
        build_jagged_pyramid(layer, schedule)


def test_device_row_counts_must_share_the_mles_device(cp):
    """The kernels read device counts on the MLEs' device: counts on another
    one are refused where they are given (layer, transition, schedule)."""
    F = KoalaBear
    rng = np.random.default_rng(3)
    segments = [(F.encode(rng.integers(0, F.p, size=c)), F.encode(rng.integers(1, F.p, size=c)))
                for c in (5, 8, 1, 3)]
    host = JaggedGkrLayer.from_segments(segments, field=F)
    orc = np.asarray([(int(c) + 1) // 2 for c in host.row_counts], np.int32)
    want = jagged_layer_transition(host, orc)
    with cp.cuda.Device(1):
        mles = [cp.asarray(m) for m in host.mles]
        with pytest.raises(ValueError, match="`row_counts` on device 0, the MLEs on device 1"):
            JaggedGkrLayer(*mles, row_counts=on(cp, 0, np.asarray(host.row_counts)), field=F)
        layer = JaggedGkrLayer(*mles, row_counts=cp.asarray(np.asarray(host.row_counts)),
                               field=F)
        with pytest.raises(ValueError, match="`out_row_counts` on device 0"):
            jagged_layer_transition(layer, on(cp, 0, orc), out_width=int(orc.sum()))
        with pytest.raises(ValueError, match=r"schedules\[0\]: .*`out_row_counts` on device 0"):
            build_jagged_pyramid(layer, [(on(cp, 0, orc), int(orc.sum()))])
        got = jagged_layer_transition(layer, cp.asarray(orc), out_width=int(orc.sum()))
        assert all(np.array_equal(g.get(), w) for g, w in zip(got.mles, want.mles))
        steps = halving_schedule(layer, max_row_count=8)  # computed on the counts' device
        assert all(device_id(s.row_counts) == 1 for s in steps)
    # ... and refused off it, where the steps' counts would land on device 0
    with pytest.raises(ValueError, match=OFF_DEVICE.format("layer")):
        halving_schedule(layer, max_row_count=8)
    exact = halving_schedule(layer)  # (host counts: a copy back, no kernel on device 0)
    assert [s.width for s in exact] == [s.width for s in halving_schedule(host)]


@kernel
def _affine(x: In[2], out: Out[()]):
    out[()] = x[0] * x[1] + 7


def test_a_graph_context_runs_on_the_device_it_was_made_on(cp):
    values = np.arange(24, dtype=np.int64).reshape(12, 2) * 1000003
    results = []
    for make_on in (None, 1):
        if make_on is None:
            ctx = Context(KoalaBear)
        else:
            with cp.cuda.Device(make_on):
                ctx = Context(KoalaBear, backend="cupy")
        # every call from here on with device 0 current
        x = ctx.copy_to_device(values)
        (y,) = ctx.call_kernel(_affine, 12, x)
        results.append(ctx.copy_to_host(y))
        graph = ctx.generate_computation_graph([x], [y])
        assert ctx.load_computation_graph(graph) == graph.commitments
        if make_on is not None:
            assert {device_id(b.values) for b in ctx._buffers} == {1}
    assert np.array_equal(results[0], results[1])
    assert np.array_equal(results[0], (values[:, 0] * values[:, 1] + 7) % KoalaBear.p)


@pytest.mark.skipif(not EMULATED_CUPY, reason="on a GPU this launch would poison the context")
def test_the_emulation_faults_a_launch_with_another_devices_array(cp):
    """What the device checks prevent: a kernel launched on device 0 with an
    array of device 1 (on a GPU an illegal address), here through a trusted
    launcher, which checks nothing (the checked ones refuse it by name)."""
    from zorch_nb import _backend
    k = _backend.kernels_for("cupy", "gkr")
    F = KoalaBear
    a = on(cp, 1, F.random(8, seed=1))
    out = cp.empty_like(a[:4])
    with pytest.raises(RuntimeError, match="illegal address"):
        k.fold_dense_trusted(0, a, a, a, a, out, out, out, out, F.params)


def test_gkr_out_on_another_device_is_refused(cp):
    """``out=`` layers on GPU 1 for a layer on GPU 0: refused before any
    launch, naming the input argument and ``out``; the same out on GPU 0 works."""
    F = KoalaBear
    host = [F.random(32, seed=i) for i in range(4)]
    first = GkrLayer(*(on(cp, 0, x) for x in host))
    want = build_pyramid(GkrLayer(*host))
    stale = [[np.full(x.shape, 0xFFFFFFFF, np.uint32) for x in la.mles] for la in want[1:]]
    off = [GkrLayer(*(on(cp, 1, x) for x in la)) for la in stale]
    for call, name in ((lambda: build_pyramid(first, out=off), "first"),
                       (lambda: layer_transition(first, out=off[0]), "layer")):
        with pytest.raises(ValueError, match=rf"`{name}\.numerator_0` on device 0.*"
                                             rf"`out(\[0\])?\.numerator_0` on device 1"):
            call()
        assert all(np.array_equal(x.get(), y) for la, s in zip(off, stale)
                   for x, y in zip(la.mles, s))  # nothing written
    out = [GkrLayer(*(on(cp, 0, x) for x in la)) for la in stale]
    got = build_pyramid(first, out=out)
    assert all(device_id(x) == 0 and np.array_equal(x.get(), y)
               for g, w in zip(got[1:], want[1:]) for x, y in zip(g.mles, w.mles))


@pytest.mark.parametrize("F", FIELDS)
def test_conversions_run_on_the_arrays_device(cp, F):
    """``encode`` / ``decode`` / ``is_canonical`` take an array of any device
    and convert it there (their kernels run under its device): before the
    conversion kernels they ran CuPy ops on the current device."""
    E = F.ext
    ints = np.arange(-40, 200, dtype=np.int64).reshape(6, 40)
    ext = np.arange(400, dtype=np.int32).reshape(100, 4)
    for host, G, reduce in ((ints, F, True), (ints % F.p, F, False), (ext, E, False),
                            (ints.astype(np.uint64) % np.uint64(F.p), F, False),
                            (ints[:, ::3] % F.p, F, False)):  # uint64 and strided: CuPy ops
        want = G.encode(host, reduce=reduce)
        got = G.encode(on(cp, 1, host), reduce=reduce)
        assert device_id(got) == 1 and np.array_equal(got.get(), want)
        back = G.decode(got)
        assert device_id(back) == 1 and np.array_equal(back.get(), G.decode(want))
        back = G.decode(got[::2])
        assert device_id(back) == 1 and np.array_equal(back.get(), G.decode(want[::2]))
        assert G.is_canonical(got)
        if G is F:  # the embedding too (it was made on the current device)
            up = E.from_base(got)
            assert device_id(up) == 1 and np.array_equal(up.get(), E.from_base(want))
    with pytest.raises(ValueError, match=r"ints\[0, 0\] = -40"):
        F.encode(on(cp, 1, ints))
    bad = F.encode(ints % F.p)
    bad[2, 3] += np.uint32(F.p)
    with pytest.raises(ValueError, match=r"holds values >= p.*words\[2, 3\]"):
        F.decode(on(cp, 1, bad))
    assert not F.is_canonical(on(cp, 1, bad))
    assert cp.cuda.runtime.getDevice() == 0  # (the device context was left)


@pytest.mark.parametrize("F", FIELDS)
def test_kernel_layer_launchers_refuse_arrays_of_another_device(cp, F):
    """The kernel layer is called directly from research code: its CuPy
    launchers refused host arrays but launched another device's, an illegal
    address on the current device (the object layer alone checked)."""
    from zorch_nb._backend import kernels_for
    from zorch_nb.kernels.monty import OP_MUL
    field_cupy, gkr_cupy = kernels_for("cupy", "field"), kernels_for("cupy", "gkr")
    f = F.params
    a, b = F.random(64, seed=1), F.random(64, seed=2)
    for launch in (lambda a, b, out: field_cupy.base_map2(OP_MUL, a, b, out, f),
                   lambda a, b, out: gkr_cupy.fold_dense(a, b, a, b, out[:32], out[32:],
                                                         cp.empty_like(out[:32]),
                                                         cp.empty_like(out[32:]), f)):
        da, db = on(cp, 1, a), on(cp, 1, b)
        with cp.cuda.Device(1):
            out = cp.empty_like(da)
        with pytest.raises(ValueError, match=r"argument `(a|n0)` lives on GPU 1 but the "
                                             r"current device is GPU 0, where the kernel runs"):
            launch(da, on(cp, 0, b), cp.empty(64, np.uint32))
        with pytest.raises(ValueError, match=r"lives on GPU 1 but the current device is GPU 0"):
            launch(on(cp, 0, a), on(cp, 0, b), out)  # the output too
        with cp.cuda.Device(1):  # all on one device, that one current: as before
            launch(da, db, out)
    with cp.cuda.Device(1):
        field_cupy.base_map2(OP_MUL, da, db, out, f)
    np.testing.assert_array_equal(out.get(), F.mul(a, b))


@pytest.mark.cudasim
@pytest.mark.parametrize("F", FIELDS)
def test_numba_kernel_layer_launchers_refuse_arrays_of_another_device(cp, F):
    """The Numba-CUDA launchers, called directly, launched on the current
    device (Numba takes the thread's current context, CuPy's current device)
    with another device's CuPy arrays: an illegal address there.  Each
    checked launcher now refuses any such argument, the outputs too, before
    any work; with that device current they run as before."""
    from zorch_nb._backend import kernels_for
    from zorch_nb.kernels.monty import OP_MUL, OP_SQUARE
    from zorch_nb.kernels.launch_config import GKR_JAGGED_CHUNK
    fk, gk = kernels_for("numba", "field"), kernels_for("numba", "gkr")
    f = F.params
    a, b = F.random(64, seed=1), F.random(64, seed=2)
    x, y = F.ext.random(16, seed=3), F.ext.random(16, seed=4)
    r = F.ext.random((), seed=5)
    rc, half = np.array([64], np.int32), np.array([32], np.int32)

    def jagged_chunk(d):  # three fused steps of a 64-leaf base/base segment
        steps = [(np.array([64 >> (l + 1)], np.int32),
                  tuple(d(np.zeros(64 >> (l + 1), np.uint32)) for _ in range(4)))
                 for l in range(GKR_JAGGED_CHUNK)]
        return gk.jagged_chunk(d(rc), d(np.zeros(4, np.int64)), (d(a), d(b), d(a), d(b)),
                               steps, f)

    launches = {  # name: a launch whose device arrays (and outputs) d makes
        "encode": lambda d: fk.encode(d(np.arange(64, dtype=np.int64)), d(np.empty_like(a)),
                                      False, f),
        "decode": lambda d: fk.decode(d(a), d(np.empty_like(a)), f),
        "base_map1": lambda d: fk.base_map1(OP_SQUARE, d(a), d(np.empty_like(a)), f),
        "base_map2": lambda d: fk.base_map2(OP_MUL, d(a), d(b), d(np.empty_like(a)), f),
        "ext4_map1": lambda d: fk.ext4_map1(OP_SQUARE, d(x), d(np.empty_like(x)), f),
        "ext4_map2": lambda d: fk.ext4_map2(OP_MUL, d(x), d(y), d(np.empty_like(x)), f),
        "base_map2_bcast": lambda d: fk.base_map2_bcast(OP_MUL, d(a), 1, d(b[:1]), 0,
                                                        d(np.empty_like(a)), f),
        "ext4_map2_bcast": lambda d: fk.ext4_map2_bcast(OP_MUL, d(x), 1, 4, d(r), 0, 4,
                                                        d(np.empty_like(x)), f),
        "base_pow": lambda d: fk.base_pow(d(a), 0, 5, 3, d(np.empty_like(a)), f),
        "ext4_pow": lambda d: fk.ext4_pow(d(x), 0, 5, 3, d(np.empty_like(x)), f),
        "base_batch_inv": lambda d: fk.base_batch_inv(d(a), d(np.empty_like(a)), f),
        "base_first_zero": lambda d: fk.base_first_zero(d(a), f),
        "ext4_first_zero": lambda d: fk.ext4_first_zero(d(x), f),
        "base_mle_fold": lambda d: fk.base_mle_fold(d(a), d(b[:1]), d(a[:32].copy()), f),
        "ext4_mle_fold": lambda d: fk.ext4_mle_fold(d(x), 4, d(r), 4, d(x[:8].copy()), f),
        "base_eq_split": lambda d: fk.base_eq_split(d(a[:32]), d(b[:1]), d(a[:32].copy()),
                                                    d(a[:32].copy()), f),
        "ext4_eq_split": lambda d: fk.ext4_eq_split(d(x[:8]), d(r), 4, d(x[:8].copy()),
                                                    d(x[:8].copy()), f),
        "fold_dense": lambda d: gk.fold_dense(
            d(a), d(b), d(a), d(b), *(d(np.zeros(32, np.uint32)) for _ in range(4)), f),
        "jagged_transition": lambda d: gk.jagged_transition(
            d(rc), d(half), d(np.zeros((2, 1), np.int64)), d(a), d(b), d(a), d(b),
            *(d(np.zeros(32, np.uint32)) for _ in range(4)), f),
        "pyramid_dense": lambda d: gk.pyramid_dense(
            (d(a), d(b), d(a), d(b)), [d(np.zeros(4 * (64 >> (l + 1)), np.uint32))
                                       for l in range(3)], f),
        "jagged_chunk": jagged_chunk,
    }
    assert {n for n in launches if n in fk.__all__} | {n for n in launches if n in gk.__all__} \
        >= set(fk.__all__) | {n for n in gk.__all__ if not n.endswith("_trusted")}

    def on1(v):
        return on(cp, 1, v)
    for name, call in launches.items():
        # every argument on GPU 1 (host counts aside), GPU 0 current: the first named
        with pytest.raises(ValueError, match=r"^gkr_cuda_numba\.|^field_cuda_numba\."
                                             r".*lives on GPU 1 but the current device is GPU 0"):
            call(on1)
        with cp.cuda.Device(1):
            call(on1)  # that device current: runs
    with cp.cuda.Device(1):
        out = on1(np.empty_like(a))
        fk.base_map2(OP_MUL, on1(a), on1(b), out, f)
    np.testing.assert_array_equal(out.get(), F.mul(a, b))
    with pytest.raises(ValueError, match=r"argument `out` lives on GPU 1"):
        fk.base_map2(OP_MUL, on(cp, 0, a), on(cp, 0, b), out, f)
    with pytest.raises(ValueError, match=r"argument `od1` lives on GPU 1"):
        gk.fold_dense(*(on(cp, 0, v) for v in (a, b, a, b)),
                      *(on(cp, 0, np.zeros(32, np.uint32)) for _ in range(3)),
                      on1(np.zeros(32, np.uint32)), f)


def test_merkle_root_refuses_a_buffer_of_another_device(cp):
    """``merkle_root`` launched its kernels on the current device with another
    device's buffer (an illegal address; the emulation faults it): refused
    like every other entry point, large and small buffers alike, and hashed
    on its own device under ``cupy.cuda.Device``."""
    from zorch_nb.graph_layout import merkle_root
    for n in (16 * 64, 16):  # the device kernels' path and the host copy's
        words = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)
        d1 = on(cp, 1, words)
        with pytest.raises(ValueError, match=OFF_DEVICE.format("words")):
            merkle_root(d1)
        with cp.cuda.Device(1):
            assert merkle_root(d1) == merkle_root(words)
