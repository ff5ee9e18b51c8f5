"""zorch_nb: Numba/CuPy array toolkit for GPU proof-system research.

Fields (:mod:`zorch_nb.fields`) are importable from the top level::

    >>> import zorch_nb as zn
    >>> F = zn.KoalaBear
    >>> F.decode(F.mul(F.encode([3]), F.encode([5])))
    array([15], dtype=uint32)
"""
from .fields import BabyBear, ExtensionField, KoalaBear, PrimeField

__version__ = "0.1.0"
__all__ = ["KoalaBear", "BabyBear", "PrimeField", "ExtensionField", "__version__"]
