"""semcheck's predictions of what jax's interpreter does with the calls after a failing call (PRG-11),
held against tests/programs/ground_truth.json as tests/kernels/ does for single kernels.

The recorded run is examples/programs/buggy/failing_call_then_second_call.py: three jitted computations,
each error caught; semcheck checks them as the target's calls build#0, build#1, build#2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from example_reports import GROUND_TRUTH, predicted, verdict_text, verify_report  # noqa: E402
from kernel_stub import KernelStub  # noqa: E402

EXAMPLE = "examples/programs/buggy/failing_call_then_second_call.py"


@pytest.fixture(scope="module")
def report() -> dict:
    return verify_report(EXAMPLE, timeout=600)


@pytest.mark.jax
@pytest.mark.rule("PRG-11", "PRG-122")
def test_the_calls_after_a_failing_call_are_predicted_as_recorded(report):
    cases = [c for c in GROUND_TRUTH["cases"] if c["path"] == EXAMPLE]
    assert {(c["devices"], c["dma_mode"]) for c in cases} == {(n, m) for n in (2, 4) for m in ("eager", "on_wait")}
    for c in cases:
        for k, step in enumerate(c["steps"]):
            got = predicted(report, f"build#{k}", c["devices"], c["dma_mode"])
            violated = {p for p, r in got.items() if r["verdict"] == "violated"}
            if step["outcome"] == "completed":
                assert not violated and got["deadlock-free"]["verdict"] == "proved", (c["key"], k, got)
            elif k == 0:  # the call that fails itself, in every run
                assert "id-disjoint" in violated and step["message"].split(": ", 1)[1] in verdict_text(got["id-disjoint"])
            else:  # it never starts: the first call's error, raised at its dispatch
                assert violated == {"deadlock-free"}, (c["key"], k, got)
                assert step["message"] in verdict_text(got["deadlock-free"]), (step, verdict_text(got["deadlock-free"]))
                assert "dispatch" in verdict_text(got["deadlock-free"])
                assert {r["verdict"] for p, r in got.items() if p != "deadlock-free"} == {"vacuous"}  # LAUNCH-5
    # a TPU runs all three, one program of calls (PRG-127: separate computations are not merged): the
    # interpreter's behaviour is a divergence (D28)
    hw = predicted(report, "build", 2, "hardware")
    assert hw and {r["verdict"] for r in hw.values()} == {"proved"}, hw


def _kernel(program, unit: int, name: str) -> KernelStub:
    return KernelStub(program, SimpleNamespace(unit=unit), name)


def _failing():
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import SemRef, Signal, Topology

    return launch(Topology(1), [[Signal(SemRef("s", 3))]], scratch=[Scratch("s", 1)])  # ERR-5 in every run


def _clean():
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import SemRef, Signal, Topology, Wait

    return launch(Topology(1), [[Signal(SemRef("s")), Wait(SemRef("s"))]], scratch=[Scratch("s", 1)])


def _failing_after_a_wait():
    """Fails only after a wait: not a failure one greedy run shows every run reaches, but every run does (RUN-11)."""
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import SemRef, Signal, Topology, Wait

    return launch(Topology(1), [[Signal(SemRef("s")), Wait(SemRef("s")), Signal(SemRef("s", 3))]],
                  scratch=[Scratch("s", 1)])


def _hangs_before_failing():
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import SemRef, Signal, Topology, Wait

    return launch(Topology(1), [[Wait(SemRef("s")), Signal(SemRef("s", 3))]], scratch=[Scratch("s", 1)])


@pytest.mark.rule("PRG-11", "PRG-122")
def test_the_next_computation_with_a_call_never_starts_and_the_one_after_runs():
    from semcheck.checker.programs.interpreter import after_failures
    from semcheck.model.errors import EarlierFailure

    # units are the top-level computations: 0 fails; the rest of 0 and the next one with a call (2:
    # a computation without kernel calls in between, 1, has none here) never start; 5 runs
    ks = [_kernel(_failing(), 0, "a"), _kernel(_clean(), 0, "b"), _kernel(_clean(), 2, "c"),
          _kernel(_clean(), 2, "d"), _kernel(_clean(), 5, "e")]
    out = after_failures(ks)
    marks = [o.program.launch_failure for o in out]
    assert marks[0] is None and marks[4] is None
    assert all(isinstance(m, EarlierFailure) for m in marks[1:4])
    assert marks[1].python_type == "IndexError" and "out of bounds" in marks[1].message
    assert "a at here" in marks[1].after
    # a failure past a wait that every run reaches predicts as one before it does (PRG-208's test)
    assert [type(o.program.launch_failure).__name__ for o in after_failures([_kernel(_failing_after_a_wait(), 0, "a"),
                                                                             _kernel(_clean(), 1, "b")])] == [
        "NoneType", "EarlierFailure"]
    # one only some runs reach predicts nothing: a wait that hangs in every run keeps its core from the failure
    assert [o.program.launch_failure for o in after_failures([_kernel(_hangs_before_failing(), 0, "a"),
                                                              _kernel(_clean(), 1, "b")])] == [None, None]
    # two failures in a row: the one after the re-raising computation starts the story again
    chain = after_failures([_kernel(_failing(), 0, "a"), _kernel(_clean(), 1, "b"), _kernel(_failing(), 2, "c"),
                            _kernel(_clean(), 3, "d"), _kernel(_clean(), 4, "e")])
    assert [type(o.program.launch_failure).__name__ for o in chain] == [
        "NoneType", "EarlierFailure", "NoneType", "EarlierFailure", "NoneType"]
