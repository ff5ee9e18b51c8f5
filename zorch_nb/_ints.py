"""One test of "an integer argument" for every argument check.

NumPy types ``np.timedelta64`` as a signed integer (``issubclass(np.timedelta64,
np.signedinteger)``), so ``isinstance(v, (int, np.integer))`` let a time span
through as a shape, an axis or an exponent: later ``int()`` of it failed
with a message naming no argument, or it was taken as a count.  Booleans are
refused too (``True`` is a Python int): an integer argument is never a flag.
"""
import numpy as np

__all__ = ["is_int", "is_int_type"]


def is_int_type(t) -> bool:
    """Whether the type ``t`` is ``int`` or a NumPy integer type (not a bool,
    not ``np.timedelta64``)."""
    return (issubclass(t, (int, np.integer))
            and not issubclass(t, (bool, np.bool_, np.timedelta64)))


def is_int(v) -> bool:
    """Whether ``v`` is a Python int or a NumPy integer scalar (not a bool, not
    a ``np.timedelta64``)."""
    return is_int_type(type(v))
