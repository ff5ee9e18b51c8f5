"""Command line: python -m zorch_nb demo | bench | info.

``demo`` runs every part of the toolkit on one backend and checks each result
against an independent computation; ``bench`` measures kernels against the
copy bandwidth measured in the same process (plus, on the CPU, plain NumPy and
galois baselines); ``info`` reports what zorch_nb runs on
(:func:`zorch_nb.show_config`).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

#: Demo sections in order: (title, module); a section whose module is absent
#: is skipped, so the demo grows with the toolkit.
DEMO_SECTIONS = (
    ("Prime fields and quartic extensions", "zorch_nb._demo_fields"),
    ("LogUp-GKR fractional-sum circuit", "zorch_nb._demo_gkr"),
    ("Deferred-graph recorder", "zorch_nb._demo_graph"),
    ("Uniform Tucker tensor trains", "zorch_nb._demo_tt"),
)


def _gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _numba_cuda_available() -> bool:
    try:
        from numba import cuda
    except ImportError:
        return False
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or cuda.is_available()


def demo(args) -> int:
    backend = "cupy" if args.gpu else args.backend or "cpu"
    if backend == "cupy" and not _gpu_available():
        print("GPU requested but CuPy or a CUDA GPU is not available; "
              "install with pip install 'zorch_nb[cuda12]' or '[cuda13]' on a GPU machine",
              file=sys.stderr)
        return 2
    if backend == "numba" and not _numba_cuda_available():
        print("backend numba needs numba-cuda and a CUDA GPU; without a GPU run it under "
              "the simulator: NUMBA_ENABLE_CUDASIM=1 python -m zorch_nb demo --backend numba",
              file=sys.stderr)
        return 2
    print(f"zorch_nb demo — backend: {backend}")
    t_all = time.perf_counter()
    for title, modname in DEMO_SECTIONS:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name == modname:
                continue
            raise
        print(f"\n== {title} ==")
        mod.run(backend, print)
    print(f"\nall demo checks passed in {time.perf_counter() - t_all:.1f} s")
    return 0


def bench(args) -> int:
    from . import bench as bench_mod
    return bench_mod.main(args)


def info(args) -> int:
    from ._config import show_config
    if args.json:
        import json
        print(json.dumps(show_config("dicts"), indent=2, default=str))
    else:
        show_config()
    return 0


#: log2 element counts the bench accepts.  Above 2**32 one uint32 MLE alone is
#: 16 GiB and an extension fold's arrays 384 GiB; a size that does not fit
#: below that ends the run with a clear error (bench.main).
BENCH_LOG2_SIZES = range(1, 33)


def _log2_size(text: str) -> int:
    """argparse type of ``--sizes``: an int in :data:`BENCH_LOG2_SIZES`."""
    value = int(text)
    if value not in BENCH_LOG2_SIZES:
        raise argparse.ArgumentTypeError(
            f"{value} is not a log2 element count in {BENCH_LOG2_SIZES.start}.."
            f"{BENCH_LOG2_SIZES.stop - 1}")
    return value


#: Most timed repetitions ``--repeat`` takes: the best of them is reported, so
#: more buys little past a few dozen, and a typo's extra zeros would run a
#: 2**26 GPU size (or a 2**22 CPU one) for hours without a word.
BENCH_MAX_REPEAT = 1000


def _positive_int(text: str) -> int:
    """argparse type of ``--repeat``: an int in 1..:data:`BENCH_MAX_REPEAT`."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of repetitions")
    if value > BENCH_MAX_REPEAT:
        raise argparse.ArgumentTypeError(
            f"{value} repetitions is more than {BENCH_MAX_REPEAT} (the best is reported: "
            "a few dozen are plenty)")
    return value


# argparse names the type in "invalid <type> value: 'abc'"
_log2_size.__name__ = "log2 size"
_positive_int.__name__ = "positive int"


def _prog() -> str:
    """How the user started this: the ``zorch_nb`` console script or ``python -m``."""
    return "zorch_nb" if os.path.basename(sys.argv[0]) == "zorch_nb" else "python -m zorch_nb"


def _file_name(text: str) -> str:
    """argparse type of ``--json`` / ``--plot``: a non-empty file name."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty file name")
    return text


_file_name.__name__ = "file name"


def main(argv=None) -> int:
    prog = _prog()
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    from . import __version__
    parser.add_argument("--version", action="version", version=f"zorch_nb {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,bench,info}")
    d = sub.add_parser("demo", help="run a checked tour of every kernel family")
    # (default None, read as cpu: an explicit --backend cpu contradicts --gpu)
    d.add_argument("--backend", choices=("cpu", "cupy", "numba"), default=None,
                   help="cpu (default), cupy (GPU) or numba (Numba-CUDA; without a GPU, "
                        "under the simulator: NUMBA_ENABLE_CUDASIM=1)")
    d.add_argument("--gpu", action="store_true", help="shorthand for --backend cupy")
    d.set_defaults(func=demo)
    b = sub.add_parser(
        "bench", help="measure kernels against the copy / NumPy yardsticks",
        description="Measure the field ops, the LogUp-GKR transitions and pyramids and the "
                    "dispatch of small calls, each against the copy bandwidth measured in the "
                    "same process (and, on the CPU, plain NumPy and galois); compile time "
                    "apart from steady-state time.  Prints a table per size; --json and "
                    "--plot write the report and its bar chart.")
    b.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="cpu (default: the Numba CPU kernels) or gpu (CuPy and Numba-CUDA)")
    b.add_argument("--sizes", type=_log2_size, nargs="+", default=None,
                   help=f"log2 of the element counts to measure ({BENCH_LOG2_SIZES.start}.."
                        f"{BENCH_LOG2_SIZES.stop - 1}; default: 22 on cpu, 26 on gpu)")
    b.add_argument("--json", metavar="FILE", type=_file_name,
                   help="write the results as JSON (after every section, and at the end; "
                        "'-' writes one document to stdout at the end, the tables to stderr)")
    b.add_argument("--plot", metavar="FILE.png", type=_file_name,
                   help="bar chart of each kernel's fraction of the copy bandwidth (matplotlib; "
                        "any image format it writes: .png, .pdf, .svg, ...)")
    b.add_argument("--repeat", type=_positive_int, default=5,
                   help="timed repetitions, the best reported (1..1000, default 5; the "
                        "pyramids' NumPy and galois yardsticks: half as many, at least 1; "
                        "the CPU fold's alternation with the copy: 3x, at least 15)")
    b.add_argument("--backends", nargs="+", choices=("cupy", "numba"), default=None,
                   help="GPU backends to measure (default: both; both need CuPy for "
                        "the device arrays and the copy yardstick)")
    b.set_defaults(func=bench)
    i = sub.add_parser("info", help="report versions, CPU threads, GPUs and caches "
                                    "(zorch_nb.show_config)")
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.set_defaults(func=info)
    _replace_unencodable_output()
    stream = sys.stdout
    watched = sys.stdout = _WatchedStream(stream) if stream is not None else None
    try:
        return _run(parser, argv, prog, d, b, watched)
    finally:
        if watched is not None and sys.stdout is watched:
            sys.stdout = stream


def _run(parser, argv, prog, d, b, watched) -> int:
    """:func:`main` past building the parser, with ``sys.stdout`` watched."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version printed, or a usage error
        # argparse ignores a failed write of its text (`--version > /dev/full`
        # exited 0 with nothing written): say so, as for the commands' output
        if exc.code in (0, None) and watched is not None:
            failure = watched.failure
            if failure is None:
                try:
                    watched.flush()
                except OSError as err:
                    failure = err
            if failure is not None:
                _stdout_to_devnull()
                if not isinstance(failure, BrokenPipeError):  # (`| head`: quiet)
                    print(f"{prog}: cannot write to standard output: {failure}",
                          file=sys.stderr)
                return 1
        raise
    args.argv = sys.argv[1:] if argv is None else list(argv)  # for the report's command
    args.prog = prog
    if args.command == "demo" and args.gpu and args.backend not in (None, "cupy"):
        d.error(f"--gpu means --backend cupy; it contradicts --backend {args.backend}")
    if args.command == "bench" and args.backends and args.device != "gpu":
        b.error("--backends picks GPU backends; it needs --device gpu")
    if sys.stdout is None and (args.command in ("info", "demo") or args.command == "bench"
                               and args.json in (None, "-")):  # (`>&-`: prints were lost)
        keep = ("; pass --json FILE to keep the report" if args.command == "bench" else "")
        print(f"{prog} {args.command}: standard output is closed{keep}", file=sys.stderr)
        return 1
    try:
        status = args.func(args)
        if sys.stdout is not None:  # (bench writes its --json file either way)
            sys.stdout.flush()  # (a pipe closed early fails here, not at exit)
        return status
    except KeyboardInterrupt:  # Ctrl-C (bench keeps its report and returns 130 itself)
        print(f"{prog} {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`... | head`): stop quietly, as
        # other command-line tools do, instead of a traceback.  Python would
        # also fail flushing stdout at exit: point it at /dev/null first.
        _stdout_to_devnull()
        return 1
    except OSError as exc:
        if watched is None or watched.failure is not exc:
            raise
        # Another failed write to standard output (`> /dev/full`: ENOSPC): one
        # line, as for a --json file that cannot be written, not a traceback.
        _stdout_to_devnull()
        print(f"{prog} {args.command}: cannot write to standard output: {exc}",
              file=sys.stderr)
        return 1


def _replace_unencodable_output():
    """Let standard output and error that cannot encode the text's few
    non-ASCII characters (an em dash; PYTHONIOENCODING=ascii) print "?"
    for them instead of failing with a UnicodeEncodeError."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            "\u2014\u00b7".encode(getattr(stream, "encoding", None) or "utf-8")
        except UnicodeEncodeError:
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="replace")
        except LookupError:  # an encoding name Python does not know: leave it
            pass


def _stdout_to_devnull():
    """Point file descriptor 1 at /dev/null, so that Python's flush of
    stdout at exit does not fail (and print a traceback) once more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class _WatchedStream:
    """``sys.stdout`` while a command runs: the same stream, which remembers
    the ``OSError`` its last failed write or flush raised, so that ``main``
    tells a failing standard output from a failing file of the command's."""

    def __init__(self, stream):
        self.stream = stream
        self.failure = None

    def write(self, text):
        try:
            return self.stream.write(text)
        except OSError as exc:
            self.failure = exc
            raise

    def flush(self):
        try:
            return self.stream.flush()
        except OSError as exc:
            self.failure = exc
            raise

    def __getattr__(self, name):  # encoding, fileno, isatty, buffer, ...
        return getattr(self.stream, name)


if __name__ == "__main__":
    sys.exit(main())
