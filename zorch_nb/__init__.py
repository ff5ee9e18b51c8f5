"""zorch_nb: Numba/CuPy array toolkit for GPU proof-system research.

Fields (:mod:`zorch_nb.fields`) are importable from the top level::

    >>> import zorch_nb as zn
    >>> F = zn.KoalaBear
    >>> F.decode(F.mul(F.encode([3]), F.encode([5])))
    array([15], dtype=uint32)
"""
import importlib.util as _ilu
import os as _os
import sys as _sys

# Installed, ``kernels/`` is the subpackage ``zorch_nb.kernels`` (setup.cfg
# package_dir).  Run from a source checkout (``python -m zorch_nb`` in the
# repository root) it is a sibling folder: load it under the same name.
if _ilu.find_spec(__name__ + ".kernels") is None:  # pragma: no cover - checkout only
    _root = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), _os.pardir, "kernels")
    _spec = _ilu.spec_from_file_location(__name__ + ".kernels", _os.path.join(_root, "__init__.py"),
                                         submodule_search_locations=[_root])
    _mod = _ilu.module_from_spec(_spec)
    _sys.modules[_spec.name] = _mod
    _spec.loader.exec_module(_mod)

from .fields import BabyBear, ExtensionField, KoalaBear, PrimeField  # noqa: E402

__version__ = "0.1.0"
__all__ = ["KoalaBear", "BabyBear", "PrimeField", "ExtensionField", "show_config",
           "__version__"]

#: Submodules reachable as attributes (``zorch_nb.tt`` after ``import
#: zorch_nb``), imported on first use: the graph and tensor-train modules are
#: not loaded by ``import zorch_nb`` itself.
_SUBMODULES = ("fields", "logup_gkr", "graph", "graph_format", "graph_layout", "graph_trace",
               "tt", "tt_masks", "tt_ops", "bench", "kernels")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    if name == "show_config":  # (its module imports the bench's helpers: on first use)
        from ._config import show_config
        return show_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | {"show_config"})
