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


def _cases():
    """Every vector x mode x engine. SPIN compiles a verifier per case (about 1.7 s each, 60 s of the
    default run for 36 cases): by default it checks every fourth vector, `slow` the rest."""
    for i, (name, vector) in enumerate(VECTORS):
        for mode in runner.MODES:
            for engine in runner.ENGINES:
                slow = engine == "promela" and i % 4
                yield pytest.param(name, vector, mode, engine, id=f"{name}-{mode}-{engine}",
                                   marks=pytest.mark.slow if slow else ())


@pytest.mark.parametrize("name,vector,mode,engine", list(_cases()))
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
