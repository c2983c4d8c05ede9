"""PRG-217, PRG-218: a call after a planning call that raises in every run of a mode never starts in that mode,
decided per interpreter mode with that mode's error; a mode where the plan is not shown to raise in every run keeps
the call as it is (unknown where it cannot be lowered, with why).

One CLI run per path at 2 devices, two at once (module fixture). The interpreter's outcomes are recorded in
tests/programs/ground_truth.json (the example) and in the spec (the two targets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck_many  # noqa: E402

EXAMPLE = "examples/programs/buggy/plan_writebacks_fail_apart.py"
NOT_FED = "tests/programs/failing_plan_targets.py::apart_plan_then_a_call_it_does_not_feed"
EAGER_ONLY = "tests/programs/failing_plan_targets.py::plan_raising_under_eager_only"
BY_DEVICE = "tests/programs/failing_plan_targets.py::plan_failing_apart_per_device_then_a_call"
ONE_MODE = "tests/programs/failing_plan_targets.py::eager_only_plan_then_a_call"
LATE = "tests/programs/failing_plan_targets.py::plan_failing_late_on_one_device_then_a_call"
FED = "tests/programs/failing_plan_targets.py::late_plan_on_one_device_then_a_call_it_feeds"
SOME_RUNS = "tests/programs/failing_plan_targets.py::plan_failing_on_one_device_in_some_runs_then_a_call"
SCOPED = "tests/programs/failing_plan_targets.py::scoped_shift_failing_in_some_runs_then_a_call"
COLLIDES = "tests/programs/failing_plan_targets.py::id_collision_in_some_runs_then_a_call"
LOOP = "tests/programs/failing_plan_targets.py::loop_iteration_colliding_in_some_runs_then_a_call"
PATHS = (EXAMPLE, NOT_FED, EAGER_ONLY, BY_DEVICE, ONE_MODE, LATE, FED, SOME_RUNS, SCOPED, COLLIDES, LOOP)
# the table each mode's error names: eager raises at the first start, on_wait in the first wait, which runs the
# copy started second (last in, first out)
NAMED = {"eager": "Out-of-bounds read of counts", "on_wait": "Out-of-bounds read of offsets"}


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[tuple[str, str], dict]]:
    """path -> (call, mode) -> property -> result row."""
    got = semcheck_many([(("verify", path, "--devices", "2", "--dma-mode", "all", "--format", "json", "--no-cache"),
                          {"cwd": REPO, "timeout": 900}) for path in PATHS])
    out = {}
    for path, run in zip(PATHS, got):
        assert run.returncode in (0, 1, 3), (path, run.stderr[-2000:])
        by: dict[tuple[str, str], dict] = {}
        for r in run.json()["results"]:
            by.setdefault((r["target"].rsplit("#", 1)[-1], r["dma_mode"]), {})[r["property"]] = r
        out[path] = by
    return out


def _never_starts(props: dict, said: str, plan: str = "_plan_kernel at") -> None:
    dl = props["deadlock-free"]
    assert dl["verdict"] == "violated", dl
    assert said in dl["witness"]["message"] and plan in dl["witness"]["message"], dl
    assert {r["verdict"] for p, r in props.items() if p != "deadlock-free"} == {"vacuous"}


@pytest.mark.jax
@pytest.mark.rule("PRG-217")
def test_a_call_after_a_plan_raising_other_errors_in_the_two_modes_never_starts_in_either(rows):
    """jax raises the first table's IndexError under eager and the second's under on_wait, in every recorded run;
    the second call, which semcheck cannot lower (the plan cannot be run for its step count), is decided in each
    mode as a call that never starts, naming that mode's error; hardware stays unknown. Before, the errors
    differing, every cell of that call was unknown."""
    cases = json.loads((REPO / "tests" / "programs" / "ground_truth.json").read_text())["cases"]
    recorded = [c for c in cases if c["path"] == EXAMPLE]
    assert {(c["devices"], c["dma_mode"]) for c in recorded} == {(n, m) for n in (2, 4) for m in NAMED}
    for c in recorded:  # the tables are the plan's 3rd and 4th SMEM buffers: ids 104 and 105
        table = {"eager": "smem 104)", "on_wait": "smem 105)"}[c["dma_mode"]]
        assert c["outcome"] == "error" and table in c["error_message"], c["key"]
    got = rows[EXAMPLE]
    for mode, said in NAMED.items():
        _never_starts(got[("1", mode)], said)
    assert {r["verdict"] for r in got[("1", "hardware")].values()} == {"unknown"}


@pytest.mark.jax
@pytest.mark.rule("PRG-218")
def test_a_lowered_call_after_it_never_starts_in_either_mode(rows):
    """The same plan, then a call that does not read it: that call was checked as if it ran in both modes (every
    property proved, where jax raises in the plan); it now never starts, in each mode with that mode's error, and
    runs under hardware (D28)."""
    got = rows[NOT_FED]
    for mode, said in NAMED.items():
        _never_starts(got[("1", mode)], said)
    assert {r["verdict"] for r in got[("1", "hardware")].values()} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("PRG-217")
def test_a_mode_where_the_plan_is_not_shown_to_raise_keeps_the_call_unknown_with_why(rows):
    """A plan whose bad write-back is never waited raises in every eager run and completes under on_wait: the call
    after it never starts under eager, and under on_wait (and hardware) its lowering error stands, the on_wait
    reason saying why the stand-in does not hold there. Before, every cell of that call was unknown."""
    got = rows[EAGER_ONLY]
    _never_starts(got[("1", "eager")], "Out-of-bounds read of table")
    for mode in ("on_wait", "hardware"):
        assert {r["verdict"] for r in got[("1", mode)].values()} == {"unknown"}
        assert all("plan_copy_past_its_table.py:74" in r["reason"] for r in got[("1", mode)].values())
    assert all("not shown to raise in every on_wait run" in r["reason"] and "PRG-217" in r["reason"]
               for r in got[("1", "on_wait")].values())


@pytest.mark.jax
@pytest.mark.rule("PRG-224", "ERR-62")
def test_a_call_after_a_plan_failing_one_way_or_another_in_every_run_never_starts(rows):
    """Each device's plan reads past its table at another entry, so every run raises one of two errors (jax: both
    seen in each mode, whichever device reads first) and the call after it never starts. It was checked as if it
    ran (every interpreter property proved); now it never starts in either mode, naming both errors. Under hardware
    it was proved (D28); the plan's load past its table is undocumented on a TPU, so it is unknown (ERR-62)."""
    got = rows[BY_DEVICE]
    for mode in ("eager", "on_wait"):
        _never_starts(got[("1", mode)], "each run raises one of:", "_per_device_plan_kernel at")
        message = got[("1", mode)]["deadlock-free"]["witness"]["message"]
        assert "reading [(8,)]" in message and "reading [(9,)]" in message, message
    assert {r["verdict"] for r in got[("1", "hardware")].values()} == {"unknown"}
    assert all("ERR-62" in r["reason"] for r in got[("1", "hardware")].values())


@pytest.mark.jax
@pytest.mark.rule("PRG-225")
def test_a_call_after_a_plan_failing_in_one_mode_only_never_starts_there_and_is_unknown_in_the_other(rows):
    """jax raises in the plan in every eager run and runs both calls under on_wait (checked at 2 devices). The call
    after the plan was checked as if it ran in both modes (eager: every property proved); it now never starts under
    eager, is unknown under on_wait with why, and runs under hardware (D28)."""
    got = rows[ONE_MODE]
    _never_starts(got[("1", "eager")], "Out-of-bounds read of table", "_unwaited_plan_kernel at")
    on_wait = got[("1", "on_wait")].values()
    assert {r["verdict"] for r in on_wait} == {"unknown"}
    assert all("not shown to raise in every on_wait run" in r["reason"] and "PRG-225" in r["reason"] for r in on_wait)
    assert {r["verdict"] for r in got[("1", "hardware")].values()} == {"proved"}


@pytest.mark.rule("ERR-52")
def test_a_call_after_a_plan_only_some_devices_fail_is_unknown_where_a_device_may_run_it(rows):
    """The plan raises on device 1 in every run, after device 0 may have finished its part: device 0 then passes the
    clean-up barrier and runs the second call (jax, below). Its interpreter cells are unknown, naming ERR-52 and the
    device; before, the call was marked as one that never starts (deadlock-free violated, the rest vacuous). The
    plan's own verdicts and hardware's are as before."""
    for path in (LATE, FED):  # FED: the call reads the plan and is stood in for (PRG-208), then made unknown
        by = rows[path]
        for mode in ("eager", "on_wait"):
            second = by[("1", mode)]
            assert {r["verdict"] for r in second.values()} == {"unknown"}, (path, second)
            assert all("ERR-52" in r["reason"] and "device 0 may finish" in r["reason"] for r in second.values())
            assert by[("0", mode)]["deadlock-free"]["verdict"] == "violated"


_LATE_JAX = """
import contextlib, io, json, os, sys, threading
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/programs")
import jax
from jax.experimental.pallas import tpu as pltpu
import failing_plan_targets as f
mode = sys.argv[1]
params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn", vector_clock_size=1024)
fn, args = getattr(f, sys.argv[2])(2, dma_mode=mode, interpret=params)
printed, out = io.StringIO(), {}
def go():
    try:
        jax.block_until_ready(fn(*args)); out["r"] = "completed"
    except Exception as e:
        out["r"] = "raised " + type(e).__name__
with contextlib.redirect_stdout(printed):
    t = threading.Thread(target=go, daemon=True); t.start(); t.join(30)
print("@@" + json.dumps([out.get("r", "hangs"), [s for s in printed.getvalue().splitlines() if "non-zero" in s]]))
sys.stdout.flush(); os._exit(0)
"""


@pytest.mark.jax
@pytest.mark.rule("ERR-52")
def test_jax_runs_the_call_after_the_plan_on_the_device_that_finished_it():
    """jax, eager and on_wait with the race detector (the run read after 30 s), both targets: device 0 runs the
    leaking call (its exit check reports the signal left at 1 on device 0 only) and then waits at its clean-up
    barrier for device 1, which failed in the plan: the program hangs."""
    for target, flag in ((LATE, 2000), (FED, 2001)):  # (FED's DMA semaphore is 2000)
        for mode in ("eager", "on_wait"):
            run = subprocess.run([sys.executable, "-c", _LATE_JAX, mode, target.split("::")[1]], cwd=REPO,
                                 capture_output=True, text=True, timeout=600, env={**os.environ})
            line = next((x for x in run.stdout.splitlines() if x.startswith("@@[")), None)
            assert line is not None, run.stderr[-2000:]
            ended, exits = json.loads(line[2:])
            leak = f"Semaphore {flag} has non-zero count for 0 (global core 0) at kernel exit: 1"
            assert ended == "hangs" and exits == [leak], (target, mode, ended, exits)


@pytest.mark.jax
@pytest.mark.rule("ERR-53")
def test_a_call_after_a_plan_failing_on_one_device_in_some_runs_is_unknown(rows):
    """The plan's two copies race for the word it indexes its table with, so the program checked may not be the
    kernel's under on_wait (ACC-9: its waits pop the copies last in, first out, which RUN-61 does not settle) and
    some run may fail on device 1 while device 0 goes on (jax: on_wait hangs at the second call's start barrier,
    below). The second call's on_wait cells are unknown, naming ERR-53; before, all 8 were proved as if every device
    ran it. Under eager every run lands the copies in their starts' order (RUN-61), so the plan's values are facts
    (ACC-71), no run fails and the second call is decided as jax runs it (it completes). hardware (every call runs,
    D28) keeps its 8 proved; the plan's race-free is violated in each mode."""
    by = rows[SOME_RUNS]
    second = by[("1", "on_wait")]
    assert {r["verdict"] for r in second.values()} == {"unknown"}, second
    assert all("ERR-53" in r["reason"] and "start barrier" in r["reason"] for r in second.values())
    assert {r["verdict"] for r in by[("0", "eager")].values()} == {"proved", "violated"}
    assert by[("0", "eager")]["deadlock-free"]["verdict"] == "proved"
    assert {r["verdict"] for r in by[("1", "eager")].values()} == {"proved"}
    for mode in ("eager", "on_wait"):
        assert by[("0", mode)]["race-free"]["verdict"] == "violated"
    assert {r["verdict"] for r in by[("1", "hardware")].values()} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("ERR-53")
def test_jax_hangs_at_the_start_of_the_call_after_a_plan_one_device_fails_under_on_wait():
    """jax with the race detector (the run read after 30 s): under on_wait the plan's waits run its copies last in,
    first out, so device 1 reads past its table while device 0, done, waits at the second call's start barrier: the
    program hangs. Under eager the copies land in their starts' order and the program completes."""
    got = {}
    for mode in ("eager", "on_wait"):
        run = subprocess.run([sys.executable, "-c", _LATE_JAX, mode, SOME_RUNS.split("::")[1]], cwd=REPO,
                             capture_output=True, text=True, timeout=600, env={**os.environ})
        line = next((x for x in run.stdout.splitlines() if x.startswith("@@[")), None)
        assert line is not None, run.stderr[-2000:]
        got[mode] = json.loads(line[2:])[0]
    assert got == {"eager": "completed", "on_wait": "hangs"}, got


@pytest.mark.jax
@pytest.mark.rule("ERR-55")
def test_a_call_after_one_whose_greedy_run_completes_but_another_run_raises_is_unknown(rows):
    """The first call's copy may reach device 0's run_scoped buffer before device 0 entered its scope: under eager
    some schedule raises KeyError (its deadlock-free is violated) while the greedy run completes, and its values
    are facts, so neither ERR-52 nor ERR-53 applied and all 8 properties of the second call were proved under
    eager, as if every device ran it (jax: the program raises, below). Now they are unknown there, naming the
    first call and ERR-55. on_wait lands the copy in device 0's wait, inside the scope: no run raises and the
    second call stays proved; hardware (every call runs, D28) too."""
    by = rows[SCOPED]
    assert by[("0", "eager")]["deadlock-free"]["verdict"] == "violated"
    assert by[("0", "on_wait")]["deadlock-free"]["verdict"] == "proved"
    second = by[("1", "eager")]
    assert {r["verdict"] for r in second.values()} == {"unknown"}, second
    assert all("ERR-55" in r["reason"] and "_scoped_shift_kernel at" in r["reason"] for r in second.values())
    assert {r["verdict"] for r in by[("1", "on_wait")].values()} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("ERR-55")
def test_jax_raises_in_the_call_before_the_next_one_under_eager_only():
    """jax with the race detector (the run read after 30 s): under eager device 1's copy meets no buffer on
    device 0, which has not entered its scope yet (its set-up work is slower), and the program raises; under
    on_wait the copy lands in device 0's wait, inside the scope, and the program completes."""
    got = {}
    for mode in ("eager", "on_wait"):
        run = subprocess.run([sys.executable, "-c", _LATE_JAX, mode, SCOPED.split("::")[1]], cwd=REPO,
                             capture_output=True, text=True, timeout=600, env={**os.environ})
        line = next((x for x in run.stdout.splitlines() if x.startswith("@@[")), None)
        assert line is not None, run.stderr[-2000:]
        got[mode] = json.loads(line[2:])[0]
    assert got == {"eager": "raised JaxRuntimeError", "on_wait": "completed"}, got


@pytest.mark.jax
@pytest.mark.rule("ERR-57")
def test_a_call_after_one_whose_lookup_collides_in_some_schedules_is_unknown(rows):
    """The first call's barrier lookup meets the collective id in both tables in some schedules only (SEM-3): its
    greedy run completes, its values are facts and no scope or clock is at stake, so neither ERR-53 nor ERR-55
    applied and all 8 properties of the second call were proved in both interpreter modes, as if every device ran
    it (jax: the program hangs at its start barrier, below). Now they are unknown there, naming the first call and
    ERR-57, read off the first call's deadlock-free (violated in both modes by a schedule that raises); hardware
    (every call runs, D28; the two calls checked as one program there) keeps its 8 proved."""
    by = rows[COLLIDES]
    for mode in ("eager", "on_wait"):
        first = by[("0", mode)]["deadlock-free"]
        assert first["verdict"] == "violated" and "occurs as both fixed-id and internal" in first["witness"]["message"]
        second = by[("1", mode)]
        assert {r["verdict"] for r in second.values()} == {"unknown"}, second
        assert all("ERR-57" in r["reason"] and "_handshake_then_scope_kernel at" in r["reason"]
                   and "start barrier" in r["reason"] for r in second.values())
    assert {r["verdict"] for r in by[(COLLIDES.split("::")[1], "hardware")].values()} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("ERR-57")
def test_jax_hangs_after_the_lookup_collides_on_device_0():
    """jax with the race detector (the run read after 30 s), both modes: device 1, signalled, enters its scope while
    device 0 is still at its set-up work, so device 0's wait looks the collective id up after the scope's allocation
    and raises the collision, and device 1, done with the first call, waits at the second call's start barrier for a
    device that never arrives: the program hangs."""
    for mode in ("eager", "on_wait"):
        run = subprocess.run([sys.executable, "-c", _LATE_JAX, mode, COLLIDES.split("::")[1]], cwd=REPO,
                             capture_output=True, text=True, timeout=600, env={**os.environ})
        line = next((x for x in run.stdout.splitlines() if x.startswith("@@[")), None)
        assert line is not None, run.stderr[-2000:]
        assert json.loads(line[2:])[0] == "hangs", (mode, line)
        assert "ValueError: Semaphore 2000 occurs as both fixed-id and internal." in run.stderr, run.stderr[-2000:]


@pytest.mark.jax
@pytest.mark.rule("ERR-65")
def test_a_call_after_a_loop_whose_second_iteration_collides_in_some_schedules_is_unknown(rows):
    """The loop's first iteration cannot collide, its second does in some schedules (SEM-3): the call after the
    loop was read off the first iteration's lowering alone and all 8 of its properties proved in both interpreter
    modes (jax: the program hangs at its start barrier, below). Now they are unknown there, naming the second
    iteration and ERR-65; the loop's own deadlock-free is violated in that iteration (PRG-183)."""
    by = rows[LOOP]
    for mode in ("eager", "on_wait"):
        loop = by[("0", mode)]["deadlock-free"]
        assert loop["verdict"] == "violated" and "iteration 1" in loop["reason"], loop
        after = by[("1", mode)]
        assert {r["verdict"] for r in after.values()} == {"unknown"}, after
        assert all("in iteration 1 (counted from 0, of 2)" in r["reason"] and "ERR-65" in r["reason"]
                   and "ERR-57" in r["reason"] for r in after.values())


@pytest.mark.jax
@pytest.mark.rule("ERR-65")
def test_jax_hangs_after_the_loop_s_second_iteration_collides():
    """jax with the race detector (the run read after 30 s), both modes: in the second iteration device 0 raises
    the collision and device 1, done with the loop, waits at the next call's start barrier: the program hangs."""
    for mode in ("eager", "on_wait"):
        run = subprocess.run([sys.executable, "-c", _LATE_JAX, mode, LOOP.split("::")[1]], cwd=REPO,
                             capture_output=True, text=True, timeout=600, env={**os.environ})
        line = next((x for x in run.stdout.splitlines() if x.startswith("@@[")), None)
        assert line is not None, run.stderr[-2000:]
        assert json.loads(line[2:])[0] == "hangs", (mode, line)
