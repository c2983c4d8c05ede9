"""PRG-199: the lowerings of a call's loop iterations that make the same program are one program, checked once, and
PRG-185's budget counts distinct programs: a loop whose scalar inputs differ in more than 128 ways, but only in a
value the kernel reads as data, is decided iteration by iteration.

examples/programs/ring_slots_loop.py (136 steps over a ring of 4 slots, the step stamped as data) and its twin
examples/programs/buggy/ring_slots_loop_one_slot_short.py; drawn iteration values for `lower_iterations` itself."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from semcheck.checker.frontend import scan_inputs
from semcheck.checker.frontend.loop_budget import MAX_ITERATION_LOWERINGS

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORRECT = "examples/programs/ring_slots_loop.py"
BUGGY = "examples/programs/buggy/ring_slots_loop_one_slot_short.py"


@dataclasses.dataclass(frozen=True)
class _Program:
    ops: tuple[int, ...]
    names: tuple[str, ...] = dataclasses.field(default=(), compare=False)


@dataclasses.dataclass(frozen=True)
class _Values:
    iterations: tuple


@pytest.mark.rule("PRG-199", "PRG-185")
@settings(max_examples=60, deadline=None)
@given(st.integers(1, 140), st.lists(st.integers(0, 400), min_size=1, max_size=300))
@example(4, list(range(200)))  # 200 distinct inputs, 4 programs: past the budget before PRG-199
@example(140, list(range(200)))  # 140 programs: past the budget
def test_iterations_whose_lowerings_are_one_program_are_checked_once(modulus, reaches):
    """Each reach's inputs (equal values: one object) lower to program `value % modulus` (the rest of the value only
    data): the iterations keep their order, lowerings with equal programs share one object, and the call is over
    PRG-185's budget exactly when its distinct programs are more than 128."""
    inputs = {}
    its = tuple((f"iteration {k}", inputs.setdefault(value, object())) for k, value in enumerate(reaches))
    program_of = {id(inputs[v]): _Program((v % modulus,)) for v in reaches}
    lowered = []

    def lower(values):
        lowered.append(values)
        return dataclasses.replace(program_of[id(values)])  # a fresh object per lowering

    with pytest.MonkeyPatch.context() as mp:  # the fake programs have no regions to refuse (PRG-182)
        mp.setattr(scan_inputs, "refuse_regions_a_loop_varies", lambda program: None)
        got = scan_inputs.lower_iterations(_Values(its), lower)
    distinct = {program_of[id(i)] for _, i in its}
    if len(distinct) > MAX_ITERATION_LOWERINGS:
        assert got == ()
        return
    assert [w for w, _ in got] == [w for w, _ in its]
    assert all(p == program_of[id(i)] for (_, p), (_, i) in zip(got, its))
    assert len({id(p) for _, p in got}) == len(distinct)  # one object, so one check, per program
    assert len(lowered) == len({id(i) for _, i in its})  # one lowering per distinct inputs


@pytest.mark.rule("PRG-199")
def test_programs_that_name_labels_differently_are_not_one():
    a, b = _Program((1,), names=("a",)), _Program((1,), names=("b",))
    assert a == b and not scan_inputs.same_program(a, b) and scan_inputs.same_program(a, _Program((1,), ("a",)))


def _verify(*paths: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", *paths, "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {(r["file"], r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-199", "PRG-183")
def test_a_loop_of_136_distinct_inputs_over_4_programs_is_decided_per_iteration():
    """136 (slot, step) pairs, 4 programs: every property proved in every mode (24 unknown before PRG-199, PRG-182:
    more distinct inputs than PRG-185's budget); the twin's fourth call writes past its 3-slot cache, where jax's
    interpreter raises in both modes (tests/programs/ground_truth.json): deadlock-free violated there, in iteration
    3, and everything else proved (under `hardware` a copy past its buffer is a single call's, D33)."""
    truth = json.loads((HERE / "ground_truth.json").read_text())
    good = [c for c in truth["cases"] if c["path"] == CORRECT]
    assert len(good) == 8 and all(c["outcome"] == "completed" and c.get("output_matches_reference") is not False
                                  for c in good), [(c["key"], c["outcome"]) for c in good]
    bad = [c for c in truth["cases"] if c["path"] == BUGGY]
    # the jitted call re-raises the failing device's ValueError or another device's BrokenBarrierError (the
    # failing device aborts the barrier the others wait at), as in test_ground_truth.py's loops
    assert len(bad) == 8 and all(c["outcome"] == "error" and c["error_type"] in ("ValueError", "BrokenBarrierError")
                                 for c in bad), [(c["key"], c["outcome"], c.get("error_type")) for c in bad]
    assert all(c["error_message"].startswith("Out-of-bounds write of") for c in bad if c["error_type"] == "ValueError")
    assert any(c["error_type"] == "ValueError" for c in bad)
    got = _verify(CORRECT, BUGGY)
    assert {r["verdict"] for (f, _, _), r in got.items() if f == CORRECT} == {"proved"}, got
    for (f, mode, prop), r in got.items():
        if f != BUGGY:
            continue
        if mode != "hardware" and prop == "deadlock-free":
            msg = r["witness"]["message"]
            assert r["verdict"] == "violated" and "in iteration 3 (counted from 0, of 136)" in msg, r
            assert "Out-of-bounds write" in msg, msg
        else:
            assert r["verdict"] == "proved", (mode, prop, r)
