"""The deferred-graph recorder's CuPy backend, run on the host: the generated
CUDA C evaluators compiled under the SIMT emulation of ``cuda_emu.py`` behind
the real ``kernels/graph_cupy.py`` launcher and a NumPy-backed stand-in for
CuPy.  The same checks as the GPU tests of ``test_graph_cuda.py``: replay is
byte-identical to the CPU replay (outputs, padded buffers, commitments), and a
Context on the "cupy" backend records and replays the reference program."""
import pytest

import cuda_emu
from test_graph_cuda import (check_cupy_context_records_and_replays_the_reference_program,
                             check_cupy_replay_is_byte_identical_to_cpu)
from zorch_nb import BabyBear, KoalaBear


@pytest.fixture
def launches(monkeypatch):
    return cuda_emu.emulate(monkeypatch, "graph")[1]


@pytest.mark.parametrize("field", [KoalaBear, BabyBear], ids=["koalabear", "babybear"])
def test_cupy_replay_is_byte_identical_to_cpu(launches, field):
    check_cupy_replay_is_byte_identical_to_cpu(field)
    # the evaluators are the generated kernels; replay's results come back
    # decoded, by the field's conversion kernel
    assert any(n.startswith("zorch_graph_") for n in launches)
    assert {n for n in launches if not n.startswith("zorch_graph_")} <= {"zorch_decode"}


def test_cupy_context_records_and_replays_the_reference_program(launches):
    check_cupy_context_records_and_replays_the_reference_program()
    assert launches
