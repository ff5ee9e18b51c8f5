"""asv benchmarks of zorch_nb on the CPU (see README, "Benchmarks").

``peak_bytes(call)``: the peak bytes ``call()`` allocates on top of what
exists (tracemalloc), for the ``track_peak_bytes_*`` benchmarks.  asv's
``peakmem_*`` is the whole process's peak -- the pages of the imports and
Numba's compiler it touches, ``setup``'s inputs (60-260 MB here) -- which a
no-op body matched at every size; this is the call's own figure.  (It sees
what NumPy allocates -- outputs, layers, temporaries made in Python -- but
not what a compiled Numba function allocates inside itself: a jagged
chunk's small scratch.)

asv.conf.json sets ``launch_method`` to ``forkserver``: each benchmark runs
in a process forked from one that imported these modules (and so zorch_nb
and Numba) once, instead of a fresh interpreter per parameter combination
-- ``asv run --quick`` took 138 s instead of ~280 s on 2 cores.  Times are
unchanged (``setup`` runs in the forked process, untimed); ``peakmem_*``
counts fewer inherited pages, so its absolute figures are lower than a
spawned process's and only their growth with the size means anything.

Every ``setup`` checks the call it times (on the whole result, or on a
prefix where a NumPy yardstick of the whole would dominate ``asv run
--quick``) against a plain NumPy (or, for the tensor trains, ragged)
computation, so a wrong kernel fails its benchmarks instead of being timed.
That work is done once per benchmark process (:func:`prepare_once`), not
before every timed call as asv_runner 0.3 would.
"""
import functools

import numpy as np

from zorch_nb._bench_gkr import traced_peak as peak_bytes

__all__ = ["peak_bytes", "check_equal", "check_close", "prepare_once", "calls_per_sample"]

#: Elements of a result checked against a yardstick where only a prefix is.
CHECKED_PREFIX = 4096

#: Sizes up to this are dispatch-scale (a call of a few us), timed
#: ``SMALL_CALLS`` calls to a sample (:func:`calls_per_sample`).
SMALL_N = 2**10
SMALL_CALLS = 100


def check_equal(got, want, what: str) -> None:
    """``AssertionError`` naming ``what`` unless ``got`` equals ``want``
    (canonical integers; same shape)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: the kernel's result differs from the yardstick's")


def check_close(got, want, what: str, rtol: float = 1e-9) -> None:
    """``AssertionError`` naming ``what`` unless the float arrays ``got`` and
    ``want`` agree to ``rtol`` of ``want``'s largest magnitude (a tensor
    train's contractions round differently from a NumPy loop's)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.allclose(got, want, rtol=0,
                                                  atol=rtol * np.abs(want).max()):
        raise AssertionError(f"{what}: the kernel's result differs from the yardstick's")


def prepare_once(setup):
    """``setup`` run once per parameter combination on its benchmark object;
    a later call with the same parameters returns at once.

    asv_runner 0.3 runs ``setup`` before every timed call and then times one
    call per sample (asv#966).  The setups here make the inputs and check the
    kernel against a NumPy yardstick, so every timed call came right after
    that work, its caches and branch predictors cold (a 16-element base
    product: 5.8-7.3 us in asv against 4.6 us in a plain loop), and each
    sample paid the setup again.  The timed calls only read what ``setup`` made (their outputs are
    fresh or written whole each call), so one preparation serves every
    sample, as it did under asv_runner < 0.3.  A setup that changes a module
    setting (undone in ``teardown``) sets it in an undecorated ``setup``
    around a decorated preparation, since ``teardown`` still runs after
    every sample.
    """
    @functools.wraps(setup)
    def once(self, *params):
        if self.__dict__.get("_prepared_for") != params:
            setup(self, *params)
            self._prepared_for = params
    return once


def calls_per_sample(bench, n: int) -> None:
    """asv's ``number`` for a benchmark of ``n`` elements, set on ``bench``
    (asv reads it from the benchmark object after ``setup``).

    With a ``setup``, asv_runner 0.3 times one call per sample unless
    ``number`` says otherwise: ten single calls of a few microseconds gave
    spreads of +-2 us on 6 us.  ``SMALL_CALLS`` calls (each timed alone,
    between asv's clock reads) average that out; larger calls keep one per
    sample.  ``--quick`` still runs one call (its own ``number`` wins).
    """
    if n <= SMALL_N:
        bench.number = SMALL_CALLS
    else:  # (asv's default, the class's own if it has one)
        bench.__dict__.pop("number", None)
