"""The IR conformance vectors (specs/conformance/ir) against every engine, in every DMA mode.

Each vector is a program and the outcome every maximal run has per mode; the step relation with
the explorer, the fast run, the least stuck vector, the Z3 certificate and SPIN (when installed)
must each give it, or say why the question is not theirs (`Skip`, reported as a pytest skip).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

RUNNER_PATH = Path(__file__).resolve().parent.parent / "specs" / "conformance" / "ir_runner.py"


def _runner():
    name = "semcheck_ir_runner"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, RUNNER_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


runner = _runner()
VECTORS = runner.load_vectors()

pytestmark = pytest.mark.rule("RUN-2", "RUN-3", "RUN-4", "PROP-4")


@pytest.mark.parametrize("engine", list(runner.ENGINES))
@pytest.mark.parametrize("mode", runner.MODES)
@pytest.mark.parametrize("name,vector", VECTORS, ids=[n for n, _ in VECTORS])
def test_vector(name, vector, mode, engine):
    try:
        problem = runner.check(name, vector, engine, mode)
    except runner.Skip as s:
        pytest.skip(str(s))
    assert problem is None, problem


def test_the_vectors_cover_every_outcome_and_a_divergence_between_modes():
    outcomes = {o for _, v in VECTORS for o in v["expect"].values()}
    assert outcomes == set(runner.OUTCOMES)
    assert any(len(set(v["expect"].values())) > 1 for _, v in VECTORS)
    assert all(v["rules"] for _, v in VECTORS)


def test_a_vector_names_only_operations_of_the_ir():
    with pytest.raises(runner.VectorError, match="unknown operation"):
        runner.decode_op({"op": "Teleport"})
