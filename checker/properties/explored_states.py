"""Properties judged on every state the explorer reaches (spec RUN-60, ERR-44, ERR-45).

Where no S' stands for the runs (a failure that comes when a copy runs, BUF-14; a wait that fails the race
detector's clock, RACE-1; a lookup of the collective id whose tables depend on the schedule, SEM-3), the
explorer (`model.explore.explore_states`, RUN-4 without RUN-5's reduction) visits every reachable state,
those of runs that then fail included, within ERR-19's budget, and judges each property there:

* `id-disjoint`: no reached state has the collective id in both tables (PROP-1);
* `id-int16`: no reached state holds an id that is not the one allocated, or has failed handing one out (PROP-2);
* `id-agreement`: no run's end (a terminal state: where a run completes, hangs or fails) has a remote use that
  names, on its target, an allocation the target does not hold (PROP-3, as its own check reads one run's end);
  a violation is read only at the end of a run that did not fail (a failed run's target may not have made its
  allocation yet: there nothing is decided).

A proof says "by every schedule, the states of runs that fail included"; a violation's witness is the schedule
to the first state found, replayed on the step relation. Past the budget nothing is decided here.
"""

from __future__ import annotations

from collections.abc import Callable

from semcheck.checker.properties import failing_facts
from semcheck.checker.properties.id_uses import disagreement
from semcheck.checker.properties.id_states import in_both_tables, int16_offence
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.replay import replay_until
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.static.system import EncodingBug
from semcheck.model.explore import ExplorationLimit, StateCheck, StateFinding, explore_states
from semcheck.model.explore_devices import device_states_violate
from semcheck.model.ops import DmaMode, DmaStart, Program, Signal
from semcheck.model.run import run
from semcheck.model.state import State
from semcheck.model.step import target_core

# the properties RUN-60 judges on reached states
PROPS = ("id-disjoint", "id-int16", "id-agreement")
# ERR-44: id-agreement at the end of a run that failed, where the target may not have made its allocation yet
FAILED_AGREEMENT = "id-agreement at a failure"

def state_checks(program: Program, mode: DmaMode) -> dict[str, StateCheck]:
    """RUN-60: each property's judgement of one reached state (`explore_states`' checks)."""
    cid = program.collective_id
    fine: dict = {}

    def disjoint(state: State, terminal: bool) -> object:
        if cid is not None and in_both_tables(state, cid):
            return f"collective id {cid} is both a fixed id (get_barrier_semaphore) and an internal id"
        return None

    def int16(state: State, terminal: bool) -> object:
        return int16_offence(state, fine)

    def agreement(state: State, terminal: bool) -> object:
        return disagreement(program, mode, state.allocs, state.pcs) if terminal and not state.failures else None

    def agreement_failed(state: State, terminal: bool) -> object:
        return disagreement(program, mode, state.allocs, state.pcs) if terminal and state.failures else None

    return {"id-disjoint": disjoint, "id-int16": int16, "id-agreement": agreement, FAILED_AGREEMENT: agreement_failed}


def explored(program: Program, mode: DmaMode, max_states: int, reduced_fits: Callable[[], bool] | None = None,
             ) -> tuple[dict[str, StateFinding | None], int, str] | None:
    """RUN-60: each property's first violating state over every reachable state of an interpreter mode, the states
    visited and how; None past `max_states` or under hardware (ERR-19: a failure there is the model's). Devices that
    meet only at barriers of every device are walked one at a time first (`_alone`), which proves or says nothing.
    `reduced_fits()` False: RUN-5's reduced walk of every actor exceeded `max_states`, so this walk would too."""
    if mode == "hardware" or not isinstance(program, Program):
        return None
    alone = _alone(program, mode, max_states)
    if alone is not None:
        return alone
    if reduced_fits is not None and not reduced_fits():
        return None  # the reduced walk visits some of the states this one does (RUN-60): past the budget too
    try:
        findings, states = explore_states(program, mode, state_checks(program, mode), max_states=max_states)
    except ExplorationLimit:
        return None
    return findings, states, f"{states} states"


def _alone(program: Program, mode: DmaMode, max_states: int) -> tuple[dict[str, StateFinding | None], int, str] | None:
    """RUN-60 on RUN-57's walk, for proofs only: every property holds when no device's walk finds an id handed out
    wrong (`id-int16` reads its cores' allocations and ids, each device's own), no signal or copy names another
    core (no remote use for `id-agreement`), and the collective id is no id any core allocates (RUN-57's walk asks
    that of its lookups, RUN-5), so it never enters the internal table (`id-disjoint`). None otherwise."""
    if any(type(op) in (Signal, DmaStart) and target_core(program, mode, c, op.device, op.core,
                                                          dma=type(op) is DmaStart) != c
           for c, ops in enumerate(program.cores) for op in ops):
        return None
    try:
        walked = device_states_violate(program, mode, {"id-int16": state_checks(program, mode)["id-int16"]},
                                       max_states=max_states)
    except ExplorationLimit:
        return None
    if walked is None or walked[0]["id-int16"]:
        return None
    states = walked[1]
    return dict.fromkeys((*PROPS, FAILED_AGREEMENT)), states, f"{states} states, each device walked alone, RUN-57"


def states_explored(facts) -> tuple[dict[str, StateFinding | None], int, str] | None:
    """`explored` of a mode's analysis within ERR-19's budget (`FALLBACK_STATES`), computed once per mode."""
    def reduced_fits() -> bool:
        ex = failing_facts.explored_outcomes(facts)  # shared with `deadlock-free` and BUF-14's verdicts
        return ex is not None and not ex.walked_alone  # walked alone: the reduced walk had exceeded it

    return facts.whole.shared(("states_explored", facts.mode), lambda: explored(
        facts.program, facts.mode, failing_facts.FALLBACK_STATES, reduced_fits))


def explored_verdict(prop: str, program: Program, mode: DmaMode, found: tuple | None, context: str) -> Verdict | None:
    """RUN-60: `prop` decided on the reached states `found` (`explored`), `context` saying why the explorer was
    asked; None when it was not within its budget or `prop` is not judged per state."""
    if found is None or prop not in PROPS:
        return None
    findings, states, how = found
    stats = {"decided_by": "explorer", "states": states, "rule": "RUN-60"}
    finding = findings[prop]
    if prop == "id-agreement" and finding is None and findings[FAILED_AGREEMENT] is not None:
        return None  # a failed run's end disagrees: its target might have allocated later (ERR-44)
    if finding is None:
        what = ("no run's end has a remote use naming an allocation its target does not hold"
                if prop == "id-agreement" else "no reached state violates it")
        return Verdict(prop, "proved", stats=stats, reason=(
            f"{context}; by every schedule, the states of runs that fail included ({how}; RUN-60): {what}"))
    return Verdict(prop, "violated", stats=stats, witness=_witness(prop, program, mode, finding, context))


def _witness(prop: str, program: Program, mode: DmaMode, finding: StateFinding, context: str) -> Witness:
    """The schedule to the first violating state, replayed on the step relation (cut, for `id-agreement`, at
    the remote use that disagrees)."""
    check = state_checks(program, mode)[prop]
    end = run(program, mode, finding.schedule, finish=False)
    if check(end, True) != finding.found:
        raise EncodingBug(f"{prop}: the explorer's state does not replay to its violation")
    if prop == "id-agreement":
        c, i, op, message = finding.found
        _, taken = replay_until(program, mode, finding.schedule, lambda s: s.pcs[c] > i)
        return Witness(message=f"{message} ({context}; a run the explorer found, RUN-60)", schedule=taken,
                       locs=(op.loc,), details={"sender": c, "pc": i, "rule": "RUN-60"}, hint=BY_ID[prop].hint)
    last = finding.schedule[-1] if finding.schedule else None
    locs = ()
    if end.failure is not None:
        locs = (end.failure.loc,)
    elif last is not None and last[0] == "core":
        before = run(program, mode, finding.schedule[:-1], finish=False)
        locs = (program.cores[last[1]][before.pcs[last[1]]].loc,)
    return Witness(message=f"{finding.found} ({context}; a state the explorer reached, RUN-60)",
                   schedule=finding.schedule, locs=locs, details={"what": str(finding.found), "rule": "RUN-60"},
                   hint=BY_ID[prop].hint)
