"""The examples in the object layer's docstrings run and print what they show.

A user reads them in ``help()`` and copies them: an example that drifted from
the code (a renamed argument, another shape, another repr) would teach the
wrong thing silently.  The kernel layer has no examples; its modules are
listed so that one added there runs too.
"""
import doctest
import importlib
import pkgutil

import pytest

import zorch_nb
import zorch_nb.kernels

# (the kernel layer is its own folder, kernels/, installed as zorch_nb.kernels)
MODULES = sorted(m.name for path, prefix in ((zorch_nb.__path__, "zorch_nb."),
                                             (zorch_nb.kernels.__path__, "zorch_nb.kernels."))
                 for m in pkgutil.walk_packages(path, prefix) if not m.name.endswith("__main__"))
#: the modules whose docstrings hold examples now (a module losing them all fails)
WITH_EXAMPLES = {"zorch_nb.fields", "zorch_nb.graph", "zorch_nb.graph_trace",
                 "zorch_nb.logup_gkr", "zorch_nb.tt", "zorch_nb.tt_masks"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name.endswith("_cupy"):  # (the CuPy launchers import CuPy at the top)
        pytest.importorskip("cupy")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed " \
                               f"(the report above says which)"
    assert (result.attempted > 0) == (name in WITH_EXAMPLES), result


def test_the_module_list_is_the_package():
    assert set(WITH_EXAMPLES) <= set(MODULES)
    assert "zorch_nb.kernels.monty" in MODULES and "zorch_nb.logup_gkr" in MODULES
