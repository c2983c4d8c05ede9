"""RUN-60, ERR-44, ERR-45: the per-state properties judged on every state the explorer reaches, the states
of runs that then fail included, against each property's own check and against every reachable state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs, scope_programs
from test_explore_devices import apart_programs
from test_races import programs_with_accesses

from semcheck.checker.frontend.api import load
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties import failing_facts
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.explored_states import (PROPS, explored, explored_verdict, state_checks,
                                                        states_explored)
from semcheck.model import State, explore
from semcheck.model.explore import ExplorationLimit, explore_states
from semcheck.model.step import enabled, step
from semcheck.model.run import run

ROOT = Path(__file__).resolve().parent.parent
GROUND_TRUTH = ROOT / "tests" / "kernels" / "ground_truth.json"
MODES = ("eager", "on_wait")

# (example, mode) whose runs fail where only the model's runs follow (BUF-14, RACE-1), and every one of whose
# id properties was unknown (ERR-19) before RUN-60
FAILING_CELLS = (("scope_remote_copy_before_entry", "eager"), ("scope_stack_slot_reused_by_next_fill", "on_wait"),
                 ("scope_writeback_outlives_buffer", "on_wait"), ("clock_empty_copy_wait", "on_wait"))


def _recorded(path: str, devices: int, mode: str) -> list[dict]:
    cases = json.loads(GROUND_TRUTH.read_text())["cases"]
    return [c for c in cases if c["path"] == path and c["devices"] == devices and c["dma_mode"] == mode
            and not c.get("kwargs")]


def _every_state(program, mode) -> set:
    """Every reachable state, by a search of the step relation that knows nothing of the explorer."""
    init = State.initial(program)
    seen, todo = {init}, [init]
    while todo:
        state = todo.pop()
        for actor in enabled(program, mode, state):
            nxt = step(program, mode, state, actor)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.jax
@pytest.mark.rule("RUN-60", "ERR-44")
@pytest.mark.parametrize("name,mode", FAILING_CELLS)
def test_the_id_properties_of_runs_that_fail_where_only_the_model_follows_are_decided_on_every_state(name, mode):
    path = f"examples/buggy/{name}.py"
    program = load(str(ROOT / path), devices=2)[0].program
    rows = {v.property: v for v in check_program(program, mode, PROPS)}
    for prop in PROPS:
        v = rows[prop]
        assert v.verdict == "proved" and v.stats.get("rule") == "RUN-60", (prop, v.verdict, v.reason)
        assert "the states of runs that fail included" in v.reason
    runs = _recorded(path, 2, mode)
    assert runs  # interpret mode: the run raises the model's failure, never an id collision or overflow
    for r in runs:
        assert r["outcome"] == "error" and r["error_type"] in ("KeyError", "AssertionError", "BrokenBarrierError")


@pytest.mark.jax
@pytest.mark.rule("ERR-45", "RUN-60")
def test_id_agreement_of_a_schedule_dependent_lookup_is_decided_over_every_run():
    path = "examples/buggy/fixed_id_collision_scoped.py"
    program = load(str(ROOT / path), devices=2)[0].program
    for mode in MODES:
        (v,) = check_program(program, mode, ("id-agreement",))
        assert v.verdict == "proved" and "the lowering is not static" in v.reason
        assert v.stats.get("rule") == "ERR-64", v.reason  # the bounds decide it first, no schedule walked
        e = explored_verdict("id-agreement", program, mode, states_explored(Analysis(program).mode(mode)), "drawn")
        assert e.verdict == "proved" and e.stats.get("rule") == "RUN-60", e.reason  # and every run's end agrees
        (r,) = _recorded(path, 2, mode)
        assert r["outcome"] == "error" and r["error_type"] == "ValueError"  # the collision, not a disagreement


@settings(max_examples=60, deadline=None)
@given(programs(max_devices=2, max_ops=3))
@pytest.mark.rule("RUN-60")
def test_the_explorer_judges_every_reachable_state(program):
    """The walk without reduction visits exactly the reachable states, and each check's first finding is a state
    that replays to that finding; a check that finds nothing finds nothing on any reachable state."""
    for mode in MODES:
        states = _every_state(program, mode)
        found, visited = explore_states(program, mode, state_checks(program, mode), max_states=100_000)
        assert visited == len(states)
        checks = state_checks(program, mode)
        for prop, check in checks.items():
            if found[prop] is None:
                assert not any(check(s, not enabled(program, mode, s)) is not None for s in states), prop
            else:
                end = run(program, mode, found[prop].schedule, finish=False)
                assert end in states and check(end, not enabled(program, mode, end)) == found[prop].found


@settings(max_examples=60, deadline=None)
@given(programs(max_devices=2, max_ops=3) | scope_programs() | programs_with_accesses())
@pytest.mark.rule("RUN-60", "ERR-45")
def test_the_explorer_never_contradicts_a_propertys_own_decision(program):
    """Where a property's own check decides (proved or violated), the explorer's verdict on every state says the
    same; its violations replay (explored_verdict raises otherwise). Drawn among programs that fail before a
    target allocates what a remote use names (a failed run's end decides nothing of id-agreement, ERR-44)."""
    for mode in MODES:
        found = explored(program, mode, 100_000)
        assert found is not None
        own = {v.property: v for v in check_program(program, mode, PROPS, fold=False)}
        for prop in PROPS:
            mine = explored_verdict(prop, program, mode, found, "drawn")
            if own[prop].verdict in ("proved", "violated") and mine is not None:
                assert mine.verdict == own[prop].verdict, (prop, mode, own[prop].reason, mine)
            elif prop != "id-agreement":
                assert mine is not None  # only a failed run's end that disagrees is left undecided


@pytest.mark.rule("ERR-44", "RUN-60")
def test_a_failed_run_whose_target_has_not_allocated_yet_decides_no_disagreement():
    """Device 1 signals device 0's s0[0] (id 2000, which device 0 takes once it allocates), then fetches the barrier
    semaphore under collective id 2000: a run in which device 1 runs first fails at its wait's lookup before device 0
    allocates. That run's end holds no s0 on device 0, but device 0 would have allocated 2000: no violation; the
    runs in which device 0 allocates first agree, and the property's own check (on S''s end) proves it."""
    from semcheck.model import AllocSem, GetBarrierSem, Signal, Topology, Wait, launch
    from semcheck.model.ops import SemRef

    ref = SemRef("s0", 0)
    program = launch(Topology(2), [[AllocSem("s0", 2, site="s0")],
                                   [AllocSem("s0", 2, site="s0"), Signal(ref, 2, device=0, core=0), GetBarrierSem(),
                                    Wait(ref, 2)]], collective_id=2000, scratch=[])
    for mode in MODES:
        found = explored(program, mode, 10_000)
        assert found[0]["id-agreement"] is None and found[0]["id-agreement at a failure"] is not None
        assert explored_verdict("id-agreement", program, mode, found, "drawn") is None
        (own,) = check_program(program, mode, ("id-agreement",), fold=False)
        assert own.verdict == "proved"


@settings(max_examples=80, deadline=None)
@given(apart_programs() | programs(max_devices=3, max_ops=3))
@pytest.mark.rule("RUN-60", "RUN-57")
def test_a_proof_from_devices_walked_alone_holds_on_every_state(program):
    """RUN-60 on RUN-57's walk (the fast path) proves only what the walk of every state (the slow one) finds
    nothing against."""
    for mode in MODES:
        found = explored(program, mode, 100_000)
        if found is None or "walked alone" not in found[2]:
            continue
        assert all(v is None for v in found[0].values())
        every, _ = explore_states(program, mode, state_checks(program, mode), max_states=200_000)
        assert all(every[prop] is None for prop in PROPS), (mode, every)


@settings(max_examples=80, deadline=None)
@given(programs(max_devices=2, max_ops=3) | scope_programs() | apart_programs(), st.sampled_from(MODES),
       st.integers(1, 60))
@pytest.mark.rule("RUN-60")
def test_a_reduced_walk_past_the_budget_means_the_walk_of_every_state_is_past_it(program, mode, budget):
    """The walk of every state is skipped where RUN-5's reduced walk (shared with `deadlock-free`) exceeded the
    budget: the reduced walk's states are some of its states, so it would exceed the budget too, and the per-state
    verdicts are those of the walk of every state at any budget (drawn small, so that both walks run past it)."""
    old = failing_facts.FALLBACK_STATES
    failing_facts.FALLBACK_STATES = budget
    try:
        shared = states_explored(Analysis(program).mode(mode))
    finally:
        failing_facts.FALLBACK_STATES = old
    assert shared == explored(program, mode, budget)
    try:
        explore(program, mode, max_states=budget)
    except ExplorationLimit:
        with pytest.raises(ExplorationLimit):
            explore_states(program, mode, state_checks(program, mode), max_states=budget)
