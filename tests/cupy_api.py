"""The public names of CuPy's API, for the emulated CuPy (``cuda_emu.py``).

The emulation answers any name it does not fake with NumPy's, so a call of
a NumPy function that CuPy lacks (or an ndarray method CuPy arrays do not
have) would pass every emulated test and fail on the first GPU.  It refuses
names outside ``cupy_api.txt``: the public names of CuPy's module, of the
submodules the object layer may reach (``linalg``, ``fft``, ...) and of
``cupy.ndarray``, read off an installed CuPy by::

    python tests/cupy_api.py > tests/cupy_api.txt     # CuPy importable; no GPU needed
"""
import os
import types

#: Submodules whose names are listed (``cupy.cuda`` is faked separately).
SUBMODULES = ("fft", "lib", "linalg", "polynomial", "random")
_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cupy_api.txt")


def names(path: str = _PATH) -> frozenset:
    """``{"cupy.add", "cupy.linalg.svd", "cupy.ndarray.sum", ...}`` from the list."""
    with open(path) as fh:
        return frozenset(line.strip() for line in fh
                         if line.strip() and not line.startswith("#"))


def main() -> None:
    import cupy
    print(f"# public names of CuPy {cupy.__version__}'s API: module, submodules "
          f"{', '.join(SUBMODULES)}, ndarray")
    print("# written by `python tests/cupy_api.py > tests/cupy_api.txt` (see cupy_api.py)")
    listed = [f"cupy.{n}" for n in dir(cupy) if not n.startswith("_")]
    for sub in SUBMODULES:
        module = getattr(cupy, sub)
        assert isinstance(module, types.ModuleType), sub
        listed += [f"cupy.{sub}.{n}" for n in dir(module) if not n.startswith("_")]
    listed += [f"cupy.ndarray.{n}" for n in dir(cupy.ndarray) if not n.startswith("_")]
    print("\n".join(sorted(set(listed))))


if __name__ == "__main__":
    main()
