"""PRG-208: a call that cannot be lowered, after a planning call that raises in every interpreted run, never
starts in the interpreter and is decided so under `eager` and `on_wait`; `hardware` stays unknown.

One CLI run per path at 2 devices, two at once (module fixture). The interpreter's outcome is recorded in
tests/programs/ground_truth.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck_many  # noqa: E402

EXAMPLE = "examples/programs/buggy/plan_copy_past_its_table.py"
ON_LENGTHS = "tests/programs/failing_plan_targets.py::plan_on_a_kernel_s_lengths"
NOT_FED = "tests/programs/failing_plan_targets.py::plan_then_a_call_it_does_not_feed"
INTERPRETER = ("eager", "on_wait")


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[tuple[str, str], dict]]:
    """path -> (target, mode) -> property -> result row."""
    got = semcheck_many([(("verify", path, "--devices", "2", "--dma-mode", "all", "--format", "json", "--no-cache"),
                          {"cwd": REPO, "timeout": 900}) for path in (EXAMPLE, ON_LENGTHS, NOT_FED)])
    out = {}
    for path, run in zip((EXAMPLE, ON_LENGTHS, NOT_FED), got):
        assert run.returncode in (0, 1, 3), (path, run.stderr[-2000:])
        by: dict[tuple[str, str], dict] = {}
        for r in run.json()["results"]:
            by.setdefault((r["target"], r["dma_mode"]), {})[r["property"]] = r
        out[path] = by
    return out


def _recorded(path: str) -> list[dict]:
    cases = json.loads((REPO / "tests" / "programs" / "ground_truth.json").read_text())["cases"]
    return [c for c in cases if c["path"] == path and not c.get("kwargs")]


@pytest.mark.jax
@pytest.mark.rule("PRG-208")
def test_a_call_after_a_plan_that_raises_in_every_run_never_starts(rows):
    """The plan's write-back reads 1024 entries of a 256-entry table: jax raises in the plan in both modes, so the
    second call, whose step count semcheck cannot compute (the plan cannot be run for it), never starts: decided
    there as a call that never starts, naming the plan's line; unknown under hardware, naming its own loop."""
    recorded = _recorded(EXAMPLE)
    assert {(c["devices"], c["dma_mode"]) for c in recorded} >= {(2, m) for m in INTERPRETER}
    for c in recorded:
        assert c["outcome"] == "error" and "Out-of-bounds read" in c["error_message"], c["key"]
    got = rows[EXAMPLE]
    for mode in INTERPRETER:
        plan, steps = got[("build#0", mode)], got[("build#1", mode)]
        assert plan["deadlock-free"]["verdict"] == "violated"
        assert "plan_copy_past_its_table.py:53" in json.dumps(plan["deadlock-free"])
        dl = steps["deadlock-free"]
        assert dl["verdict"] == "violated", dl
        said = dl["witness"]["message"]
        assert "Out-of-bounds read of table" in said and "_plan_kernel at" in said, said
        assert {r["verdict"] for p, r in steps.items() if p != "deadlock-free"} == {"vacuous"}
    hardware = got[("build#1", "hardware")]
    assert {r["verdict"] for r in hardware.values()} == {"unknown"}
    assert all("plan_copy_past_its_table.py:74" in r["reason"] for r in hardware.values())


@pytest.mark.jax
@pytest.mark.rule("PRG-208")
def test_a_plan_whose_inputs_an_earlier_kernel_computed_is_not_taken_to_fail(rows):
    """The same plan on lengths an earlier kernel call gives: its failure would rest on that call's run, so the
    call after it is not stood in for: every cell unknown, naming the call's loop, never a verdict."""
    got = rows[ON_LENGTHS]
    assert {r["verdict"] for props in got.values() for r in props.values()} == {"unknown"}
    assert all("plan_copy_past_its_table.py:74" in r["reason"] for props in got.values() for r in props.values())


@pytest.mark.jax
@pytest.mark.rule("PRG-122")
def test_a_lowered_call_after_a_call_failing_past_its_barrier_never_starts(rows):
    """The plan fails after its start barrier, so one greedy run does not show that every run fails; every run
    does (RUN-11), the same in both modes, so the lowered call after it never starts: deadlock-free violated naming
    the plan, the rest vacuous. Before, that call was checked as if it ran: every property proved."""
    got = {(t.rsplit("#", 1)[-1], mode): props for (t, mode), props in rows[NOT_FED].items()}
    for mode in INTERPRETER:
        steps = got[("1", mode)]
        dl = steps["deadlock-free"]
        assert dl["verdict"] == "violated", dl
        assert "Out-of-bounds read of table" in dl["witness"]["message"], dl
        assert {r["verdict"] for p, r in steps.items() if p != "deadlock-free"} == {"vacuous"}
    assert {r["verdict"] for r in got[("1", "hardware")].values()} == {"proved"}
