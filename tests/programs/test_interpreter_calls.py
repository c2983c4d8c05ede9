"""semcheck's interpreter modes run every call on its own manager, globally synchronised (PRG-10), and
decide races per call (PRG-14): held against probes `manager_per_call` and `race_detector_per_call`
(tests/programs/ground_truth.json), whose programs are the targets of tests/programs/interpreter_targets.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GROUND_TRUTH = json.loads((HERE / "ground_truth.json").read_text())
TARGETS = "tests/programs/interpreter_targets.py"
MARKER = "@@CALLS@@ "

_LOWER = """
import json, sys
from semcheck.checker.frontend import provision_devices
provision_devices({devices})
from semcheck.checker.frontend import lower_target
from semcheck.checker.frontend.targets import load_targets
from semcheck.model.fast import fast_run
from semcheck.model.ops import AllocSem, Barrier
(t,) = load_targets({spec!r})
out = []
for k in lower_target(t, {devices}, dma_mode="eager"):
    p = k.program
    first = [p.topology.global_core(d, 0) for d in range(p.topology.num_devices)]
    ends = [[op.name, sorted(op.participants)] for op in (p.cores[g][-1] for g in first) if type(op) is Barrier]
    run = fast_run(p, "eager", record=False)
    out.append({{"name": k.name, "ends": ends, "first_cores": first,
                "ids": sorted(run.state.tables.internal), "failure": run.failure is not None}})
print({marker!r} + json.dumps(out))
"""


def _lowered(target: str, devices: int) -> list[dict]:
    run = subprocess.run([sys.executable, "-c", _LOWER.format(devices=devices, spec=f"{TARGETS}::{target}",
                                                              marker=MARKER)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    return json.loads(line.removeprefix(MARKER))


def _probe(name: str, devices: int, mode: str) -> dict:
    (row,) = [p for p in GROUND_TRUTH["probes"] if p["probe"] == name and p["devices"] == devices
              and p["dma_mode"] == mode]
    assert row["status"] == "ok", row
    return row["result"]


@pytest.mark.jax
@pytest.mark.rule("PRG-10")
@pytest.mark.parametrize("devices", (2, 4))
def test_every_call_is_its_own_launch_ended_by_a_barrier_of_all_devices(devices):
    """The probe saw one manager per call, none left, and every device at call k's clean-up barrier before
    any device entered call k + 1; semcheck lowers each call as its own launch (its own ids, from the first
    one) whose every device ends at a clean-up barrier of all devices."""
    calls = _lowered("three_calls", devices)
    for mode in ("eager", "on_wait"):
        r = _probe("manager_per_call", devices, mode)
        assert r["run"]["outcome"] == "completed"
        assert len(calls) == r["managers_created"] == r["distinct_managers"] == r["calls"]
        assert r["manager_left_after_run"] is False and r["all_reach_clean_up_before_next_call"] is True
    for c in calls:
        assert not c["failure"]
        assert c["ends"] == [["cleanup", c["first_cores"]]] * devices, c  # every device meets every other
    assert len({json.dumps(c["ids"]) for c in calls}) == 1  # each starts from a fresh manager's ids


def _verify(target: str) -> dict[tuple, dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", f"{TARGETS}::{target}",
                          "--devices", "2", "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    return {(r["target"], r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-14", "PRG-10")
def test_races_are_decided_per_call_as_the_detector_logs_them():
    """The detector logged the racy call's race (one message per device) whether or not a race-free call
    followed, and its flag kept only the last call's: semcheck's race-free is per call, and the racy call
    is violated in both programs, the clean one proved."""
    r = _probe("race_detector_per_call", 2, "eager")
    alone, then_clean = r["racy_call_alone"], r["racy_then_clean_call"]
    assert alone["race_messages"] == then_clean["race_messages"] == 2  # one per device, from the racy call
    assert alone["races_found_flag_after"] and not then_clean["races_found_flag_after"]
    solo = _verify("racy_call_alone")
    pair = _verify("racy_then_clean_call")
    racy = solo[("racy_call_alone", "eager", "race-free")]
    assert racy["verdict"] == "violated", racy
    assert "after the call" in racy["witness"]["message"], racy  # the copy against the read of the result
    assert pair[("racy_then_clean_call#0", "eager", "race-free")]["verdict"] == "violated"
    assert pair[("racy_then_clean_call#1", "eager", "race-free")]["verdict"] == "proved"
    # under the interpreter nothing lands outside a call (PRG-110, resting on PRG-10)
    for key, row in pair.items():
        if key[1] != "hardware" and key[2] == "invocation-confined":
            assert row["verdict"] == "proved" and "PRG-110" in row["reason"], row
