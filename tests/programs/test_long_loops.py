"""PRG-130: a loop longer than the walk unrolls, whose iterations run the same calls, is checked over
PRG-7's window of three iterations (tests/programs/loop_targets.py): proofs stand for the whole loop
where no device can run two iterations ahead of a partner, nothing else is decided."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _verify(target: str, devices: int) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          f"tests/programs/loop_targets.py::{target}", "--devices", str(devices),
                          "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {r["property"]: r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-130", "PRG-7")
@pytest.mark.parametrize("devices", [4, 5])
def test_a_hundred_calls_with_a_double_barrier_are_proved_from_the_window(devices):
    got = _verify("double_barrier_100", devices)
    assert {r["verdict"] for r in got.values()} == {"proved"}, got
    assert "loop of 100 iterations" in got["deadlock-free"]["reason"] and "PRG-130" in got["deadlock-free"]["reason"]


@pytest.mark.jax
@pytest.mark.rule("PRG-130", "PRG-143", "PRG-16")
def test_a_single_barrier_violated_in_the_loops_first_iterations_is_violated_for_the_loop():
    """At 5 devices the single barrier lets a copy of the first call land before its target entered, in a run
    of the loop's first two iterations: every trip count has that run (PRG-143). The rest stays unknown: the
    model's verdicts do not describe a program whose landings leave their call (PRG-114)."""
    got = _verify("single_barrier_100", 5)
    confined = got.pop("invocation-confined")
    assert confined["verdict"] == "violated", confined
    msg = confined["witness"]["message"]
    assert "before device" in msg and "first 2 iterations of the loop of 100 iterations" in msg and "PRG-143" in msg
    assert {p: r["verdict"] for p, r in got.items()} == {
        "id-disjoint": "proved", "id-int16": "proved", "id-agreement": "unknown", "deadlock-free": "unknown",
        "exit-balance": "unknown", "dma-bytes": "unknown", "race-free": "unknown"}, got  # PRG-215, PRG-216


@pytest.mark.jax
@pytest.mark.rule("PRG-143")
def test_a_deadlock_in_the_loops_first_iterations_is_violated_for_the_loop():
    got = _verify("done_without_start_100", 2)
    dead = got["deadlock-free"]
    assert dead["verdict"] == "violated", dead
    assert "PRG-143" in dead["witness"]["message"] and "_no_start_kernel" in dead["witness"]["message"]
    assert got["invocation-confined"]["verdict"] == "proved"


@pytest.mark.jax
@pytest.mark.rule("PRG-143")
def test_a_violation_the_window_shows_only_by_ending_stays_unknown():
    """The second done after the loop deadlocks in the window; that run needs the loop to end after its third
    iteration, so the loop's verdict is not decided from it (it is a violation for every trip count, which
    PRG-143 does not show)."""
    got = _verify("done_twice_after_100", 2)
    dead = got["deadlock-free"]
    assert dead["verdict"] == "unknown" and "violated there" in dead["reason"], dead
    assert _verify("copies_100", 2)["deadlock-free"]["verdict"] == "proved"


_PREFIX = """
import json, sys
from semcheck.checker.frontend import provision_devices
provision_devices({devices})
from semcheck.checker.frontend.api import lower_target
from semcheck.checker.frontend.programs import communicating_program, lower_program
from semcheck.checker.frontend.targets import load_targets
from semcheck.checker.programs.windows import cut

def composed(name):
    (t,) = load_targets("tests/programs/loop_targets.py::" + name)
    kernels = lower_target(t, {devices})
    got = lower_program(t, {devices}, kernels)
    return got if got is not None else communicating_program(t, {devices}, kernels)[0]

window, = composed({window!r})[:1]
unrolled, = composed({unrolled!r})[:1]
c = cut(window)
same = [list(window.program.cores[g][:c.at[g]]) == list(unrolled.program.cores[g][:c.at[g]])
        and list(c.calls[g]) == list(unrolled.calls[g][:c.at[g]]) for g in range(len(c.at))]
print("@@CUT@@ " + json.dumps({{"same": same, "at": list(c.at), "windows": len(window.ir.windows),
                               "unrolled_windows": len(unrolled.ir.windows)}}))
"""


@pytest.mark.jax
@pytest.mark.rule("PRG-143")
@pytest.mark.parametrize("window,unrolled", [("single_barrier_100", "single_barrier_8"),
                                             ("done_twice_after_100", "done_twice_after_8")])
def test_the_cut_is_the_first_operations_of_every_longer_loop(window, unrolled):
    """PRG-143's premise, checked: the operations the cut keeps are, core by core, the first operations of
    the program that unrolls a longer loop (8 iterations: the walk unrolls it), with the same calls."""
    run = subprocess.run([sys.executable, "-c", _PREFIX.format(devices=4, window=window, unrolled=unrolled)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith("@@CUT@@ ")] or [None]
    assert line is not None, run.stderr[-3000:]
    got = json.loads(line.removeprefix("@@CUT@@ "))
    assert got["windows"] == 1 and got["unrolled_windows"] == 0
    assert all(got["same"]) and any(got["at"]), got


def _line(text: str) -> int:
    path = REPO / "tests" / "programs" / "loop_targets.py"
    return next(i for i, s in enumerate(path.read_text().splitlines(), 1) if text in s)


@pytest.mark.jax
@pytest.mark.rule("PRG-144", "PRG-130")
def test_each_long_loop_of_a_program_is_checked_over_its_window():
    """Two loops of 100 calls one after the other: each is windowed, and the proofs name both (PRG-144)."""
    got = _verify("two_loops_double_barrier", 4)
    assert {r["verdict"] for r in got.values()} == {"proved"}, got
    first, second = _line("y = jax.lax.fori_loop(0, 100, shift, x)"), _line("fori_loop(0, 100, shift, y * 2)")
    reason = got["deadlock-free"]["reason"]
    assert f"loop_targets.py:{first}" in reason and f"loop_targets.py:{second}" in reason and "PRG-144" in reason


@pytest.mark.jax
@pytest.mark.rule("PRG-144", "PRG-143")
def test_with_two_loops_only_the_first_loops_violations_are_decided():
    """A violation in the first loop's first iterations is one of the program (PRG-143); one in the second
    loop needs the first loop to have run every iteration, which the window does not show: unknown."""
    bad = _verify("two_loops_single_barrier", 5)["invocation-confined"]
    assert bad["verdict"] == "violated" and "PRG-143" in bad["witness"]["message"], bad
    later = _verify("copies_then_no_start_100", 2)["deadlock-free"]
    assert later["verdict"] == "unknown" and "violated there" in later["reason"], later
