"""A call that fails in `get_barrier_semaphore` leaves the interpreter's manager, and the call after the next
reuses it (specs/semantics/calls.md PRG-11, PRG-13, PRG-154), held against tests/programs/ground_truth.json.

The recorded runs: examples/programs/buggy/left_manager_id_collision.py (five jitted computations, each
error caught; semcheck checks them as the target's calls build#0 .. build#4) and probe
`barrier_without_collective_id` (which ids the calls after the failure get).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from example_reports import GROUND_TRUTH, REPO, predicted, verdict_text, verify_report  # noqa: E402
from kernel_stub import KernelStub  # noqa: E402

EXAMPLE = "examples/programs/buggy/left_manager_id_collision.py"


@pytest.fixture(scope="module")
def report() -> dict:
    return verify_report(EXAMPLE, timeout=900)


@pytest.mark.jax
@pytest.mark.rule("PRG-11", "PRG-13", "PRG-154")
def test_the_calls_after_a_left_manager_are_predicted_as_recorded(report):
    cases = [c for c in GROUND_TRUTH["cases"] if c["path"] == EXAMPLE]
    assert {(c["devices"], c["dma_mode"]) for c in cases} == {(n, m) for n in (2, 4) for m in ("eager", "on_wait")}
    previous_error = None
    for c in cases:
        assert c["outcome"] == "completed" and c["output_matches_reference"], c["key"]
        for k, step in enumerate(c["steps"]):
            got = predicted(report, f"build#{k}", c["devices"], c["dma_mode"])
            assert got, (c["key"], k)
            violated = {p for p, r in got.items() if r["verdict"] == "violated"}
            deadlock = verdict_text(got["deadlock-free"])
            if step["outcome"] == "completed":
                assert not violated and got["deadlock-free"]["verdict"] == "proved", (c["key"], k, got)
                continue
            error_type, message = step["message"].split(": ", 1)
            if error_type == "TypeError":  # the tagged call, or the re-raise of its error at the next dispatch:
                # an id only jax's TPU lowering picks, so interpret mode cannot run it (D30, REP-21)
                assert {r["verdict"] for r in got.values()} == {"unrunnable"}, (c["key"], k, got)
                assert f"raises {error_type}: {message}" in deadlock, (step, deadlock)
                if "dispatch" in deadlock:  # it never starts: the previous failure's error, in jax's words
                    assert step["message"] == previous_error, (c["key"], k)
                else:
                    assert "no collective_id" in deadlock, deadlock
            elif "dispatch" in deadlock:  # it never starts: the previous failure's error, in jax's words
                assert "deadlock-free" in violated, (c["key"], k, got)
                assert step["message"] == previous_error, (c["key"], k)
                assert f"{error_type}: {message}" in deadlock, (step, deadlock)
                assert violated == {"deadlock-free"}
                assert {r["verdict"] for p, r in got.items() if p != "deadlock-free"} == {"vacuous"}  # LAUNCH-5
            else:  # the collision on the left manager's ids (ERR-1)
                assert "deadlock-free" in violated, (c["key"], k, got)
                assert "id-disjoint" in violated and message in verdict_text(got["id-disjoint"]), got["id-disjoint"]
            previous_error = step["message"]
    # the run of every step is what the record says: fails, re-raises, collides, re-raises, runs
    assert [s["outcome"] for s in cases[0]["steps"]] == ["error"] * 4 + ["completed"]
    # a TPU runs all five (a tag gets jax's id, 2002 is only a number there)
    hw = predicted(report, "build", 2, "hardware")
    assert hw and {r["verdict"] for r in hw.values()} == {"proved"}, hw


def _calls(devices: int, sems: dict[str, int], collective_id: int | None = None):
    """The probe's kernels, as the model's launches: a barrier kernel without an id (it fails), a kernel
    without semaphores, and a kernel with a local semaphore."""
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import BARRIER, GetBarrierSem, SemRef, Signal, Topology, Wait

    topo = Topology(devices)

    def no_id_barrier(n: int):
        bodies = [[GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=(d + 1) % devices), Wait(SemRef(BARRIER), 1)]
                  for d in range(devices)]
        return launch(topo, bodies, scratch=[Scratch(f"s{j}") for j in range(n)])

    def local(n: int, cid: int | None):
        body = [op for j in range(n) for op in (Signal(SemRef(f"s{j}")), Wait(SemRef(f"s{j}")))]
        if cid is not None:  # its barrier first: a collision shows at that lookup, before any wait
            body = [GetBarrierSem(), Signal(SemRef(BARRIER)), Wait(SemRef(BARRIER)), *body]
        return launch(topo, [list(body) for _ in range(devices)], scratch=[Scratch(f"s{j}") for j in range(n)],
                      collective_id=cid)

    return no_id_barrier(sems["failed"]), launch(topo, [[] for _ in range(devices)]), local(sems["next"], collective_id)


def _own_ids(program) -> list[int]:
    """The semaphore ids a run of `program` hands to its own allocations (not the ones a left manager holds)."""
    from semcheck.model.fast import fast_run
    from semcheck.model.ids import FIRST_SEMAPHORE_ID
    from semcheck.model.ops import AllocSem

    out = fast_run(program, "eager", record=False)
    left = sum(op.count for op in program.cores[0] if type(op) is AllocSem and op.label.startswith("left by"))
    return sorted(set(out.state.tables.internal) - set(range(FIRST_SEMAPHORE_ID, FIRST_SEMAPHORE_ID + left)))


@pytest.mark.rule("PRG-154", "PRG-18")
@pytest.mark.parametrize("devices", (2, 4))
@pytest.mark.parametrize("mode", ("eager", "on_wait"))
def test_ids_continue_on_a_left_manager_as_the_probe_recorded(devices, mode):
    """Probe `barrier_without_collective_id`: the failed call took 2000; the next computation never starts;
    the one after runs on the left manager (2001); the one after that on a fresh one (2000)."""
    from semcheck.checker.programs.interpreter import after_failures

    (record,) = [p["result"]["sequence"] for p in GROUND_TRUTH["probes"]
                 if p["probe"] == "barrier_without_collective_id" and p["devices"] == devices
                 and p["dma_mode"] == mode]
    failed, plain, local = _calls(devices, {"failed": 1, "next": 1})
    ks = [KernelStub(p, SimpleNamespace(unit=u), n) for u, (p, n) in enumerate(
        [(failed, "no_id_barrier"), (plain, "add_one"), (local, "local_semaphore"), (local, "local_semaphore")])]
    out = after_failures(ks)
    for row, k in zip(record, out):
        if k.program.launch_failure is not None:  # predicted never to start
            assert row["device_call_starts"] == 0 and row["raised_at_token_input"], row
            assert row["innermost"].endswith(k.program.launch_failure.message), (row, k.program.launch_failure)
            continue
        assert row["device_call_starts"] == devices, row
        assert _own_ids(k.program) == row["semaphore_ids"], (row, k.program.cores[0][:3])


@pytest.mark.rule("PRG-154")
@settings(max_examples=40, deadline=None)
@given(failed=st.integers(0, 3), own=st.integers(1, 3), offset=st.integers(0, 6))
def test_a_collision_appears_on_a_left_manager(failed, own, offset):
    """The call after the next collides (ERR-1) exactly when its collective id is in the left manager's
    internal table: the failed call's `failed` ids from 2000 and its own `own` after them, where a fresh
    manager would hold only 2000 .. 2000 + own - 1. So a collision can appear there, never disappear."""
    from semcheck.checker.programs.interpreter import after_failures
    from semcheck.model.fast import fast_run
    from semcheck.model.ids import FIRST_SEMAPHORE_ID

    cid = FIRST_SEMAPHORE_ID + offset
    bad, plain, reusing = _calls(2, {"failed": failed, "next": own}, cid)
    fresh = reusing
    ks = [KernelStub(p, SimpleNamespace(unit=u), n) for u, (p, n) in enumerate(
        [(bad, "no_id_barrier"), (plain, "add_one"), (reusing, "reusing"), (plain, "after"), (fresh, "fresh")])]
    out = after_failures(ks)
    assert out[1].program.launch_failure is not None  # the next computation never starts

    def collides(program) -> bool:
        f = fast_run(program, "eager", record=False).failure
        return f is not None and "fixed-id and internal" in f.violation.message

    on_left = cid < FIRST_SEMAPHORE_ID + failed + own
    assert collides(out[2].program) == on_left
    # a collision is a wrapped failure: the next computation re-raises it; otherwise it runs
    assert (out[3].program.launch_failure is not None) == on_left
    # either way the manager is gone by then: the last call starts fresh, from 2000
    assert collides(out[4].program) == (cid < FIRST_SEMAPHORE_ID + own)


TAGGED = ["examples/programs/two_patterns_two_tags.py", "examples/programs/buggy/two_patterns_one_tag.py",
          EXAMPLE]


@pytest.mark.jax
@pytest.mark.rule("PRG-155")
@pytest.mark.parametrize("path", TAGGED)
def test_a_call_failing_at_its_barrier_fetch_is_decided_race_free_as_recorded(path):
    """The tagged call fails at get_barrier_semaphore on every device in the interpreter; what runs before
    is decided (no "the program can fail" unknown), and jax's detector agrees: no race in any recorded run."""
    recorded = [c for c in GROUND_TRUTH["cases"] if c["path"] == path and c["detect_races"]]
    assert recorded and all(c["race_messages"] == 0 for c in recorded), recorded
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", path, "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 4), run.stderr[-3000:]
    rows = [r for r in json.loads(run.stdout)["results"] if r["dma_mode"] != "hardware"]
    assert rows and not [r for r in rows if r["verdict"] == "unknown"], [r for r in rows if r["verdict"] == "unknown"]
    first = [r for r in rows if r["target"] == "build#0" and r["property"] == "race-free"]
    # a tag's id exists only on a TPU, so interpret mode cannot run the call (D30, REP-21): the prefix's
    # race-free (PRG-155) is the library's, below; the report says the interpreter cannot run it
    assert first and all(r["verdict"] == "unrunnable" and "D30" in r["reason"] for r in first), first


@pytest.mark.rule("PRG-155")
def test_a_race_before_the_barrier_fetch_is_found():
    """Two cores of a device write one buffer before they reach get_barrier_semaphore (which fails): the
    writes race in every schedule of the prefix, so race-free is violated, with a witness that replays on
    the call itself (the check replays it); without the writes of one core it is proved."""
    from semcheck.checker.properties.decide import decide
    from semcheck.model.launch import launch
    from semcheck.model.ops import Access, BARRIER, GetBarrierSem, Region, SemRef, Signal, Topology, Wait

    topo = Topology(2, 2)
    region = Region(((0, 8),))

    def program(both: bool):
        bodies = []
        for g in range(topo.num_cores):
            d = topo.device_of(g)
            ops = [Access("hbm0", region, True)] if both or topo.local_core_of(g) == 0 else []
            ops += [GetBarrierSem(), Signal(SemRef(BARRIER), 1, device=(d + 1) % 2), Wait(SemRef(BARRIER), 1)]
            bodies.append(ops)
        return launch(topo, bodies, hbm_buffers=1)

    for mode in ("eager", "on_wait"):
        racy = decide("race-free", program(True), mode)
        assert racy.verdict == "violated", racy
        # PRG-155 proves the prefix; the report says the interpreter cannot run the call (D30, REP-21)
        from semcheck.checker.properties.races import race_free

        calm = race_free(program(False), mode)
        assert calm.verdict == "proved", calm
        assert decide("race-free", program(False), mode).verdict == "unrunnable"
