"""Verdicts when every interpreter run fails (spec RUN-9 .. RUN-11, ERR-16 .. ERR-19; ACC-6, GRID-3).

A static failure (RUN-9: an id collision the static system resolves, an int16 overflow, a bad
target or index, a view the interpreter cannot index, ERR-9, a revisited output block, ERR-11)
is a core's failing position; S' holds every core there. When S''s end has a core at its failing
position, every maximal run fails (RUN-9 (iii)); when each such failure ends the whole run
(RUN-10), nothing happens after it, and under that mode (RUN-11):

* `deadlock-free` is violated (ERR-16), witnessed by the fast run, which fails;
* `exit-balance` is proved when S' ends before every device's exit check (ERR-17), else decided as
  for a program that hangs, with S''s end for the stuck positions (`exit_balance.exit_balance`);
* `race-free` is decided on S' itself (ERR-18);
* the other properties decide such programs themselves, except when every failure is ERR-9 or
  ERR-11: then they are decided on S' too (ACC-6; `dma-bytes` judges the waits that run, not bytes
  left at an exit no run reaches).

An `on_wait` copy through a view the interpreter cannot index raises only when a waiter runs its
task (ACC-11: which waiter, if any, depends on the schedule), so it has no S': the lowering refuses
it, and ERR-19 decides `deadlock-free` and `exit-balance` by every schedule; the other properties
are decided on the program with the views made indexable, every run of which is, up to the wait
that raises, a run of the program (ACC-15).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from semcheck.checker.properties import clock_waits, failing_facts
from semcheck.checker.properties.analysis import Analysis, ModeAnalysis, analysis_of
from semcheck.checker.properties.confined_scopes import HINT as SCOPE_HINT
from semcheck.checker.properties.dead_waits import held_at_dead_waits
from semcheck.checker.properties.dma_bytes import dma_bytes
from semcheck.checker.properties.explored_states import explored_verdict, states_explored
from semcheck.checker.properties.failing_facts import At, view_ops
from semcheck.checker.properties.failing_prefixes import RENAMES, prefix_verdict, renames, shown_before_failure
from semcheck.checker.properties.race_before_failure import before_failing_waits, both_run
from semcheck.checker.properties.races import more_races
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.sites import site, sites
from semcheck.checker.properties.timeline import timeline
from semcheck.checker.properties.verdict import UP_TO_FAILURE, Verdict, Witness, vacuous
from semcheck.checker.static.least_stuck import failure_reached
from semcheck.checker.static.system import EncodingBug
from semcheck.model.errors import (IdCollision, Int16Overflow, InterpreterView, RevisitedBlock, UnclockedWait,
                                   UnknownBuffer, Violation, WindowOutOfBounds)
from semcheck.model.explore import ExplorationLimit
from semcheck.model.explore_devices import explore_outcomes
from semcheck.model.ops import Access, DmaMode, DmaStart, ExitCheck, Op, Program, Region
from semcheck.model.run import REPLAY_LIMIT, run
from semcheck.model.state import Outcome
from semcheck.model.step import is_global

REVISIT_HINT = ("order the grid so that the steps using one output block are consecutive (the index map of "
                "the innermost axes), or make the axis that revisits it the innermost; --dma-mode hardware "
                "checks the kernel as a TPU runs it")

# RUN-11: the properties decided here for any static failure that ends the whole run
ON_S_PRIME = ("deadlock-free", "exit-balance", "race-free")

WINDOW_HINT = ("keep every window inside its buffer; skip a zero-size copy or access (pl.when on its size) "
               "instead of starting it at a dimension's end; --dma-mode hardware checks the kernel as a TPU runs it")

HINT = ("jax's TPU interpreter indexes loads, stores and copies only through indexers (ref.at[...], slices): "
        "read or write the whole ref and reshape or bitcast the value instead to test it in interpret mode; "
        "--dma-mode hardware checks the kernel as a TPU runs it")


def fold_unsafe(analysis: Analysis, mode: str) -> bool:
    """Whether a fold's proof must not stand for the program under `mode`: the fold reads the program's
    skeleton, which drops accesses and with them the failures ERR-9 gives them in the interpreter, and
    the copies' buffers, whose scopes decide BUF-14's."""
    facts = analysis.mode(mode)
    return mode != "hardware" and (bool(analysis.view_ops) or facts.scope_failure is not None
                                   or facts.clock_failure is not None)


# The lowering's words for a lookup of the collective id whose tables depend on the schedule (SEM-3) and for
# an on_wait copy whose view raises in the waiter that runs it (ACC-11): the refusals ERR-19 names as limits
# (`static.lowering`, "core C op I looks up the collective id N: ...", "... raises when a waiter runs its task").
SCHEDULE_LOOKUP = "looks up the collective id"
DEFERRED_VIEW = "raises when a waiter runs its task"
_NO_S_PRIME = {SCHEDULE_LOOKUP: "a lookup of the collective id that depends on the schedule, so no S'",
               DEFERRED_VIEW: "an on_wait copy through a view the interpreter cannot index, which raises in the "
                              "waiter that runs it, if any, which depends on the schedule (ACC-11), so no S'"}


def undecided_failure(facts: ModeAnalysis) -> str | None:
    """ERR-19: which of its limits keeps the properties of a program whose runs can fail undecided, or None."""
    low = facts.lowering
    if not low.ok:
        kinds = {k for u in low.unsupported for k in _NO_S_PRIME if k in u}
        if low.unsupported and all(any(k in u for k in _NO_S_PRIME) for u in low.unsupported):
            return "; ".join(_NO_S_PRIME[k] for k in _NO_S_PRIME if k in kinds)
        return None
    if not low.failing:
        return None
    fails = failure_reached(low, facts.end.pcs)
    if not fails:
        return None
    if facts.mode == "hardware":
        return "a failure under hardware is the model's, not a TPU's"
    if not all(is_global(facts.program, At(c, pos)) for c, pos, _ in fails):
        return "a failure that ends only its device, after which the others run on"
    return None


# ERR-19: the probe that stands for a kernel exit (an operation that raises wherever a core reaches it)
EXIT_PROBE = InterpreterView("exit probe", "load")


def no_exit_reached(program: Program, mode: DmaMode, states: int) -> bool | None:
    """ERR-19: whether no run reaches a kernel exit (every run fails or hangs first), by every schedule (RUN-4)
    of the program with each exit check replaced by an operation that raises; None when the explorer
    exceeds `states`. A run reaches an exit iff its prefix in the probe program reaches that probe, whose
    failure RUN-5's reduction keeps as an outcome of its own."""
    probe = dataclasses.replace(program, cores=tuple(
        tuple(Access("", Region(()), False, op.loc, EXIT_PROBE) if type(op) is ExitCheck else op for op in ops)
        for ops in program.cores))
    try:
        ex = explore_outcomes(probe, mode, max_states=states)
    except ExplorationLimit:
        return None
    return not any(f.violation is EXIT_PROBE for o in ex.outcomes for f in o.state.failures)


def cite_limit(v: Verdict, facts: ModeAnalysis) -> Verdict:
    """An unknown verdict that ERR-19's limits explain says which one, as RUN-12 asks of every unknown (a
    verdict that is not unknown is kept)."""
    if v.verdict != "unknown" or "ERR-19" in v.reason:
        return v
    limit = undecided_failure(facts)
    return v if limit is None else dataclasses.replace(v, reason=f"{v.reason} ({limit}: ERR-19)")


def failing_run_verdict(prop: str, program: Program, mode: DmaMode, *, timeout_ms: int = 30_000,
                        facts: ModeAnalysis | None = None, recheck: Callable[..., Verdict]) -> Verdict | None:
    """RUN-11 under an interpreter mode: the verdict on `prop`, or None when the usual check decides it.
    `recheck` decides a property of S''s program (`decide.decide`, passed in: it calls this function)."""
    if mode == "hardware":
        return None  # ERR-19: a TPU's failures are not the interpreter's
    facts = analysis_of(program, mode, facts)
    if facts.scope_failure is not None and prop != "invocation-confined":
        v = scope_failure_verdict(prop, program, mode, facts, recheck, timeout_ms)
        if v is not None:
            return v
    if facts.clock_failure is not None:  # RACE-1 (ERR-21): decided as BUF-14's, by every schedule
        v = scope_failure_verdict(prop, program, mode, facts, recheck, timeout_ms)
        if v is not None:
            return v
    if prop == "exit-balance" and mode != "hardware" and undecided_failure(facts) is not None:
        if no_exit_reached(program, mode, failing_facts.FALLBACK_STATES):
            return vacuous(prop, "no run reaches a kernel exit: every schedule fails or hangs "
                           f"before one, by exhaustive exploration ({undecided_failure(facts)}; ERR-19): no count "
                           "is left and no copy is pending at an exit, and the interpreter prints no exit warning")
        if mode == "on_wait" and facts.deferred_views:
            return _deferred_verdict(prop, program, mode, facts, timeout_ms, recheck)
        return _renamed_verdict(prop, program, mode, facts, timeout_ms, recheck)
    # a Symmetric is never renamed: its lowering would build every core (RUN-21), and one period decides it (RUN-22)
    if prop in RENAMES and not facts.deferred_views and not facts.whole.symmetric:
        v = _renamed_verdict(prop, program, mode, facts, timeout_ms, recheck)
        if v is not None:
            return v
    views = facts.whole.view_ops
    if views and mode == "on_wait" and prop != "deadlock-free" and facts.deferred_views:
        return _deferred_verdict(prop, program, mode, facts, timeout_ms, recheck)
    if not views and (prop not in ON_S_PRIME or (prop == "race-free" and facts.race_order.ordering.certified)):
        return None  # a certified happens-before pass met no failure (DR-6): no lowering needed to say so
    end = facts.every_run_fails
    if end is None or (not end.views_only and prop not in ON_S_PRIME):
        return None
    failure = end.real.failure
    raised = _raised(failure.violation)
    where = _where(failure.violation, failure.loc)
    if prop == "deadlock-free":
        return Verdict(prop, "violated", witness=failure_witness(program, mode, end.real, facts.whole.view_ops))
    if prop == "exit-balance":
        exits = [(c, i) for c, ops in enumerate(program.cores) for i, op in enumerate(ops) if type(op) is ExitCheck]
        if any(end.s_prime.state.pcs[c] > i for c, i in exits):
            return None  # some device passes its exit check before the failure: exit_balance decides (ERR-17)
        return vacuous(prop, f"no run reaches a kernel exit: every run raises {raised} {where} "
                       f"or at another failing operation first, which ends the run (ERR-7, RUN-9): no count is "
                       "left and no copy is pending at an exit, and the interpreter prints no exit warning")
    if prop == "dma-bytes":  # the waits that run are judged; no bytes are left at an exit that never comes
        v = dma_bytes(end.s_prime_program, mode, timeout_ms=timeout_ms, exits=False,
                      facts=end.s_prime_analysis.mode(mode))
    else:
        v = recheck(prop, end.s_prime_program, mode, timeout_ms=timeout_ms, facts=end.s_prime_analysis.mode(mode))
    prefix = (f"on every run up to its failure (every run raises {raised} {where} or at another failing "
              "operation, which ends it, ERR-7, RUN-9)")
    if v.verdict == "violated":
        return dataclasses.replace(v, witness=dataclasses.replace(
            v.witness, message=f"{v.witness.message} ({prefix})"))
    return dataclasses.replace(v, reason=f"{prefix}: {v.reason}" if v.reason else prefix,
                               stats={**v.stats, UP_TO_FAILURE: True})


def _renamed_verdict(prop: str, program: Program, mode: DmaMode, facts: ModeAnalysis, timeout_ms: int,
                     recheck: Callable[..., Verdict]) -> Verdict | None:
    """ERR-49, ERR-50: where the only limit is a lookup of the collective id that depends on the schedule (SEM-3), `prop`
    on every run up to its failure, from the program whose collective id no core allocates; None when that program
    decides nothing or the id cannot be renamed so."""
    limit = undecided_failure(facts)
    if limit != _NO_S_PRIME[SCHEDULE_LOOKUP] or not renames(program):
        return None
    said = f"{limit}: a lookup that meets the id in both tables raises ValueError (ERR-1), which ends the run (ERR-19)"
    return prefix_verdict(prop, program, mode, said, recheck, timeout_ms)[0]


def indexable(program: Program) -> Program:
    """`program` with its copies' views made indexable (ACC-11): under on_wait its runs are the program's
    own when no run runs a half of such a copy (`deferred_never_raise`)."""
    cores = tuple(tuple(dataclasses.replace(op, view_error=None) if type(op) is DmaStart and op.view_error is not None
                        else op for op in ops) for ops in program.cores)
    return dataclasses.replace(program, cores=cores)


def _deferred_verdict(prop: str, program: Program, mode: DmaMode, facts: ModeAnalysis, timeout_ms: int,
                      recheck: Callable[..., Verdict]) -> Verdict:
    """ACC-11 under on_wait: a property other than deadlock-free (the explorer's, ERR-19) of a program with a copy
    through a view the interpreter cannot index. When no run runs a half of such a copy the runs are those of
    the program with the views made indexable, which decides it; else ACC-15 decides it on that program."""
    copy = next(op for op in facts.whole.view_ops if type(op) is DmaStart)
    clean = indexable(program)
    if prop == "race-free":  # DR-51: a proof on the held program first; it holds whatever else is found
        held = _held_verdict(prop, program, clean, mode, timeout_ms, recheck)
        if held is not None:
            return held
    v = recheck(prop, clean, mode, timeout_ms=timeout_ms, facts=Analysis(clean).mode(mode))
    if facts.deferred_never_raise:
        why = (f"no run runs the copy at {copy.loc} through a view the interpreter cannot index, by every "
               "schedule (ACC-11, RUN-4): the runs are those of the program with the view made indexable")
        if v.verdict == "violated":
            return dataclasses.replace(v, witness=dataclasses.replace(v.witness, message=f"{v.witness.message} ({why})"))
        return dataclasses.replace(v, reason=f"{why}: {v.reason}" if v.reason else why)
    return _up_to_failure(prop, program, mode, copy, v, facts.deferred_never_raise, clean=clean, timeout_ms=timeout_ms)


def _held_verdict(prop: str, program: Program, clean: Program, mode: DmaMode, timeout_ms: int,
                  recheck: Callable[..., Verdict]) -> Verdict | None:
    """ACC-39: `race-free` proved on the program with the views made indexable held before each core's first wait
    that no run completes before it fails (`dead_waits`); None when there is no such wait or no proof there."""
    held = held_at_dead_waits(program, clean, mode)
    if held is None:
        return None
    v = recheck(prop, held.program, mode, timeout_ms=timeout_ms, facts=Analysis(held.program).mode(mode))
    if v.verdict != "proved":
        return None
    if held.runs_first is None:
        since, rule = f"only copies that raise in their waiter before they signal it raise {held.sem}", "ACC-39"
    else:
        since, rule = (f"it pops the task of the copy at {held.runs_first.loc}, which raises, before every task that "
                       f"could raise {held.sem} enough (tasks run last-in-first-out, SEM-7; ERR-33)"), "ERR-33"
    said = (f"on every run up to its failure: no run completes the wait at {held.loc} before it fails, since {since}, "
            "so every run is, until it fails, a run of the program with the views made indexable held before each "
            "core's first such wait (ACC-39, ACC-15)")
    return dataclasses.replace(v, reason=f"{said}: {v.reason}" if v.reason else said,
                               stats={**v.stats, "rule": rule, UP_TO_FAILURE: True})


def _up_to_failure(prop: str, program: Program, mode: DmaMode, copy: DmaStart, v: Verdict,
                   never: bool | None, *, clean: Program | None = None, timeout_ms: int = 30_000) -> Verdict:
    """ACC-15: the verdict of `prop` on the runs of `program` up to the wait that raises, from `v`, its verdict on
    the program with the views made indexable (`indexable`). Every run of the program is, up to its failure, a
    run of that one (the two differ only in what a waiter does when it pops such a copy's task), so a proof
    there holds here; a violation there is one here when its witness replays here without a failure and shows
    the violation by its own steps (ERR-24; ERR-29: other races of `clean`, the indexable program, when the
    witness's cannot run). Anything else stays unknown (ERR-19)."""
    how = ("some run runs it" if never is False else "the schedules are more than the explorer's budget")
    raised = f"{_raised(copy.view_error)} in the waiter that runs the copy at {copy.loc} under on_wait ({how})"
    why = (f"{raised}; every run is, up to that wait, a run of the program with the view made indexable, so the "
           "property is decided on that program's runs (ACC-15)")
    if v.verdict in ("proved", "vacuous"):
        said = f"on every run up to its failure ({why})"
        return dataclasses.replace(v, reason=f"{said}: {v.reason}" if v.reason else said,
                                   stats={**v.stats, "rule": "ACC-15", UP_TO_FAILURE: True})
    w, alt = v.witness, None
    if v.verdict == "violated" and prop == "race-free" and any(h for _, _, h in w.details.get("halves", ())):
        shown, alt = both_run(program, mode, w) if 0 < len(w.schedule) <= REPLAY_LIMIT else (None, None)
        if shown is None and clean is not None and not w.details.get("alternatives"):
            shown, alt = _other_races(program, clean, mode, w, timeout_ms)
    else:
        shown = shown_before_failure(prop, program, mode, w) if v.verdict == "violated" else None
    if shown is not None:
        rule, said = "ACC-15", f"in a run that meets no failing copy first: {why}"
        if shown != tuple(w.schedule):  # ERR-24: a run that performs both events before any wait raises
            rule, said = "ERR-24", (f"this schedule runs both accesses before any wait raises, and jax's detector "
                                    f"orders neither after the other (ERR-24); {why}")
        if alt is not None:  # another race the pass found: the witness's own meets a failing wait first
            w = dataclasses.replace(w, message=alt["message"], locs=tuple(alt["locs"]), blocked=(),
                                    details={"halves": alt["halves"]}, hint=alt.get("hint", w.hint))
            if alt.get("rule") == "ERR-31":
                rule, said = "ERR-31", (f"{said}; the race was found among the accesses a run makes before any "
                                        "wait that may run a failing copy's task (ERR-31)")
        return dataclasses.replace(v, stats={**v.stats, "rule": rule}, witness=dataclasses.replace(
            w, message=f"{w.message} ({said})", schedule=shown))
    if v.verdict == "violated":
        return Verdict(prop, "unknown", reason=f"{raised}: the program with the view made indexable violates it "
                       f"({v.witness.message}), but whether a run gets there before a wait raises is not decided "
                       "(ACC-15, ERR-19)")
    if v.verdict == "unknown":
        return Verdict(prop, "unknown", reason=f"{raised}; with the view made indexable: {v.reason} (ACC-15, ERR-19)")
    return v


def _other_races(program: Program, clean: Program, mode: DmaMode, w: Witness, timeout_ms: int) -> tuple:
    """ERR-29: `both_run` over the other races of `clean` (the program with the views made indexable), asked of the
    race pass only now: the race pass stops at the witness's, whose events meet a failing wait first. ERR-31: then
    over the races among the events that `clean`, cut before the waits that may pop a failing task, runs."""
    mine = [tuple(h) for h in w.details["halves"]]
    if len(w.schedule) > REPLAY_LIMIT:
        return None, None
    for ask in (lambda: more_races(clean, mode, timeout_ms=timeout_ms), lambda: _races_before_cut(program, clean, mode,
                                                                                                   timeout_ms)):
        others = [a for a in ask() if [tuple(h) for h in a["halves"]] != mine]
        if others:  # the witness's own race was tried before (`_up_to_failure`)
            details = {**w.details, "alternatives": others, "own_tried": True}
            shown, alt = both_run(program, mode, dataclasses.replace(w, details=details))
            if alt is not None:
                return shown, alt
    return None, None


def _races_before_cut(program: Program, clean: Program, mode: DmaMode, timeout_ms: int) -> list[dict]:
    """ERR-31: the races of `clean` cut before every wait that may pop a failing copy's task, among the events its
    maximal run performs (`race_before_failure.before_failing_waits`); none when nothing is cut."""
    cut = before_failing_waits(program, clean, mode)
    found = [] if cut is None else more_races(cut[0], mode, timeout_ms=timeout_ms, keep=cut[1])
    return [{**a, "rule": "ERR-31"} for a in found]


def _freed(o: Outcome) -> bool:
    """BUF-14's KeyError at a run_scoped buffer, or RACE-1's assertion at a wait (ERR-21): the failures only
    the model's runs follow."""
    return o.kind == "error" and isinstance(o.failure.violation, (UnknownBuffer, UnclockedWait))


def explored_failure(facts: ModeAnalysis) -> str | None:
    """Why this mode's runs may fail where only the model's runs follow it (BUF-14, RACE-1), or None."""
    if facts.mode == "hardware":
        return None
    return facts.scope_failure or facts.clock_failure


def scope_raises(facts: ModeAnalysis) -> bool | None:
    """BUF-14, RACE-1: whether some run of this interpreter mode raises KeyError at a run_scoped buffer or
    fails a wait's clock assertion, by every schedule (False: none does, or none can; None: the explorer's
    budget ran out)."""
    if explored_failure(facts) is None:
        return False
    explored = facts.scope_runs_explored
    return None if explored is None else any(_freed(o) for o in explored[0])


def scope_failure_verdict(prop: str, program: Program, mode: DmaMode, facts: ModeAnalysis,
                          recheck: Callable[..., Verdict], timeout_ms: int) -> Verdict | None:
    """BUF-14 under an interpreter mode: where a copy may touch a run_scoped buffer outside its scope, the
    model's runs raise KeyError where jax's do (an eager start, the waiter of an on_wait task), and every
    schedule is explored (RUN-4) within ERR-19's budget. None when no run raises there: the runs are those
    the usual checks read. Else `deadlock-free` is violated (a run that fails ends with unfinished cores,
    PROP-4, ERR-19), `exit-balance` vacuous when no run reaches an exit (REP-20), the id properties judged on every
    reached state (ERR-44), the others on every run up to its failure (ERR-50), and the rest unknown (ERR-19)."""
    if not isinstance(program, Program):  # a Symmetric (RUN-20): its runs are the built program's (RUN-21)
        built = facts.whole.whole_program if facts.whole.symmetric else "not built"
        if isinstance(built, str):
            return Verdict(prop, "unknown", reason=f"{explored_failure(facts)}; the program is decided on one "
                           "period of its devices, whose runs the explorer does not follow: check it at fewer devices")
        return scope_failure_verdict(prop, built.program, mode, built.mode(mode), recheck, timeout_ms)
    raises = scope_raises(facts)
    if raises is False:
        return None
    if raises is None:
        real = facts.maximal_run()
        over = f"the explorer exceeded {failing_facts.FALLBACK_STATES} states"
        if not _freed(real):
            said = f"{explored_failure(facts)}; whether a run raises there is not known: {over} (BUF-14, RACE-1, ERR-19)"
            decided, why = prefix_verdict(prop, program, mode, f"if a run raises there ({over})", recheck, timeout_ms)
            return decided or Verdict(prop, "unknown", reason=f"{said}; {why}" if why else said)
        f = real.failure
        rule = _explored_rule(f.violation)
        said = (f"interpret mode raises {_raised(f.violation)} at {f.loc} in some runs at least: the fast "
                f"run (RUN-3) is one ({over}, so not every schedule is known; {rule}, ERR-19)")
        if prop == "deadlock-free":  # one real run that fails is a violation (PROP-4)
            return Verdict(prop, "violated", reason=said, stats={"rule": rule},
                           witness=failure_witness(program, mode, real, explored=False))
        decided, why = prefix_verdict(prop, program, mode, said, recheck, timeout_ms)
        return decided or Verdict(prop, "unknown", reason=f"{said}; {why}" if why else said, stats={"rule": rule})
    outcomes, states, how = facts.scope_runs_explored
    bad = [o for o in outcomes if _freed(o)]
    every = len(bad) == len(outcomes)
    f = bad[0].failure
    rule = _explored_rule(f.violation)
    said = (f"interpret mode raises {_raised(f.violation)} at {f.loc} in "
            f"{'every run' if every else 'some runs'}, by every schedule ({how}; {rule})")
    stats = {"decided_by": "explorer", "states": states, "rule": rule}
    if prop == "deadlock-free":
        return Verdict(prop, "violated", reason=said, stats=stats,
                       witness=failure_witness(program, mode, bad[0], explored=all(o.kind == "error" for o in outcomes)))
    if prop == "exit-balance" and no_exit_reached(program, mode, failing_facts.FALLBACK_STATES):
        return vacuous(prop, f"no run reaches a kernel exit: {said} or fails or hangs first (ERR-19): no count is "
                       "left and no copy is pending at an exit", stats=stats)
    decided = explored_verdict(prop, program, mode, states_explored(facts), said)  # ERR-44: the id properties
    if decided is not None:
        return decided
    decided, why = prefix_verdict(prop, program, mode, said, recheck, timeout_ms)  # ERR-50: the runs' prefixes
    if decided is not None:
        return decided
    no_s_prime = ("a wait's clock failure has no S' (whether the wait finds a clock depends on what ran before "
                  "it, ERR-21)" if rule == "RACE-1" else
                  "a failure that comes when a copy runs has no S' (where it ends a run depends on the schedule)")
    return Verdict(prop, "unknown", stats=stats, reason=(
        f"{said}; {no_s_prime}, and the explorer keeps outcomes, not the states along a run, so this property is "
        f"not decided (ERR-19){'; ' + why if why else ''}"))


def _explored_rule(err: Violation) -> str:
    """The rule of a failure only the model's runs follow: RACE-1's assertion (ERR-21), else BUF-14's KeyError."""
    return "RACE-1" if isinstance(err, UnclockedWait) else "BUF-14"


def _raised(err: Violation) -> str:
    if isinstance(err, UnclockedWait):  # the manager's bare assert: no message to quote
        return f"{err.python_type} (the race detector's clock, RACE-1)"
    return f"{err.python_type}: {err.message}"


def _deferred_copy(program: Program, failure) -> DmaStart | None:
    """ACC-11: the on_wait copy whose task raised in the wait where `failure` happened, or None."""
    err = failure.violation
    if (not isinstance(err, (InterpreterView, WindowOutOfBounds)) or err.access != "copy"
            or type(program.cores[failure.core][failure.pc]) is DmaStart):
        return None
    return next((op for op in view_ops(program) if type(op) is DmaStart and op.view_error == err), None)


def _where(err: Violation, loc: object) -> str:
    if isinstance(err, RevisitedBlock):
        return f"after the grid step that comes back to a block of output {err.operand!r} (the pallas_call at {loc})"
    if isinstance(err, (InterpreterView, WindowOutOfBounds)):
        return f"at the {err.access} at {loc}"
    return f"at {loc}"


def failure_witness(program: Program, mode: DmaMode, real: Outcome, view_ops: tuple[Op, ...] = (), *,
                    explored: bool | None = None) -> Witness:
    """A run that fails, replayed on the step relation (up to `REPLAY_LIMIT` steps): the fast run when every
    run fails by RUN-9 (iii) (`explored` None), else one the explorer found (`explored`: whether every run
    it followed fails)."""
    failure = real.failure
    if len(real.schedule) <= REPLAY_LIMIT:
        again = run(program, mode, real.schedule)
        if again.kind != "error" or again.failure != failure:
            raise EncodingBug(f"the failing run replays to {again.kind} ({again.failure}), not {failure}")
    err = failure.violation
    text = f"{_raised(err)} {_where(err, failure.loc)}"
    copy = _deferred_copy(program, failure)
    locs = (failure.loc,) if failure.loc.line else ()
    if copy is not None:  # the wait ran the copy's task (ACC-11): both lines are the failure's
        what = (f"whose {'destination' if err.kind == 'write' else 'source'} window it refuses"
                if isinstance(err, WindowOutOfBounds) else f"whose {err.side or 'source'} view it cannot index")
        text = (f"{_raised(err)} at the copy at {copy.loc}, {what}, run under on_wait by the wait at {failure.loc} "
                "(ACC-11)")
        locs = tuple(dict.fromkeys(x for x in (copy.loc, failure.loc) if x.line))
    others = sorted({str(op.loc) for op in view_ops if op.loc.line and op.loc not in (failure.loc, *locs)})
    details = {"error_type": err.python_type, "error_message": err.message, "core": failure.core,
               "pc": failure.pc, "other_lines": others[:8]}
    if isinstance(err, RevisitedBlock):
        details.update(rule="ERR-11", output=err.operand, block=err.block, iteration=err.iteration)
        why = ("jax's TPU interpreter refuses a grid step whose output block the grid visited before and has "
               "left since (specs/semantics/divergences.md D24)")
        hint = REVISIT_HINT
    elif isinstance(err, WindowOutOfBounds):
        details.update(rule="ERR-20", access=err.access, buffer=err.buffer, range=repr(err.rnge), shape=list(err.shape))
        why = ("jax's TPU interpreter refuses a window the buffer does not hold whole when it reads it, and one "
               "with an element past an end (or a negative index or start, an assertion) when it writes it; a "
               "zero-size window starting at a dimension's end "
               "is refused as a read (specs/semantics/divergences.md D33)")
        hint = WINDOW_HINT
    elif isinstance(err, UnknownBuffer) and (freed := _freed_copy(real, err)) is not None:
        half, dma = freed
        by = ("in its start (eager)" if type(program.cores[failure.core][failure.pc]) is DmaStart
              else f"in the wait at {failure.loc}, which runs its task (on_wait)")
        text = (f"{_raised(err)} at the copy at {dma.loc}, whose {half} half runs {by} when the manager does not "
                "hold its run_scoped buffer (the scope has ended there, or not begun)")
        locs = tuple(dict.fromkeys(x for x in (dma.loc, failure.loc) if x.line))
        details.update(rule="BUF-14", half=half, copy_line=str(dma.loc), key=list(err.key))
        why = ("jax's TPU interpreter deletes a run_scoped buffer when its scope ends and allocates it when the "
               "scope is entered; a copy half that runs outside that window meets no key (specs/semantics/buffers.md BUF-14, "
               "specs/semantics/divergences.md D32)")
        hint = SCOPE_HINT
    elif isinstance(err, UnclockedWait):
        unrun = clock_waits.unreached_copies(real, err)
        text = f"{_raised(err)} at the wait at {failure.loc}, whose semaphore no signal has reached on this core"
        if unrun:
            text += (f" (the copy at {unrun[-1].loc}, of {unrun[-1].nbytes} bytes, would signal it, but under "
                     f"{mode} a wait for {program.cores[failure.core][failure.pc].value} needs none of its tasks, "
                     "so it never runs)")
        locs = tuple(dict.fromkeys(x for x in (*(d.loc for d in unrun), failure.loc) if x.line))
        details.update(rule="RACE-1", wait_line=str(failure.loc), copy_lines=[str(d.loc) for d in unrun][:8])
        why = clock_waits.WHY
        hint = clock_waits.HINT
    elif isinstance(err, InterpreterView):
        details.update(rule="ERR-9" if copy is None else "ACC-11", transform=err.transform, access=err.access)
        if copy is not None:
            details.update(side=err.side or "source", copy_line=str(copy.loc))
        why = (f"jax's TPU interpreter indexes loads, stores and copies only through indexers, not a "
               f"{err.transform} view (specs/semantics/divergences.md D22)")
        hint = HINT
    else:
        details.update(rule="ERR-16" if explored is None else "ERR-19")
        why = {None: "every run reaches this operation or another failing one first (RUN-9)",
               True: "every schedule the explorer follows fails (RUN-4, ERR-19), this one here",
               False: "a schedule the explorer found (RUN-4, ERR-19)"}[explored]
        hint = _failure_hint(err)
    devices = sorted({program.topology.device_of(c) for c in (failure.core, *(b.core for b in real.blocked))})
    details["timeline"] = timeline(program, list(real.state.pcs), devices)
    details["sites"] = sites(  # REP-10
        site("fails", copy.loc if copy is not None else failure.loc, f"interpret mode raises {_raised(err)} here"
             + (f", when the wait at line {failure.loc.line} runs this copy under on_wait" if copy is not None else "")),
        site("fails", failure.loc, f"this wait runs the copy at line {copy.loc.line}, which raises")
        if copy is not None else None)
    ends = ("the failure ends the run (ERR-7), so no run completes" if explored is None else
            "the failing device's cores never finish (ERR-7)" + (", and no run completes" if explored else ""))
    if copy is not None and explored is not None:  # a wait's failure ends every device's run (ERR-7)
        ends = ("the failure ends the run (ERR-7)" + (", and every schedule the explorer follows fails this way"
                                                       " or another" if explored else ""))
    return Witness(
        message=f"interpret mode raises {text}: {why}; {ends}",
        schedule=tuple(real.schedule),
        blocked=tuple((b.core, b.pc, f"{_core_words(program, b.core)}: {b.reason}") for b in real.blocked),
        locs=locs,
        details=details,
        hint=hint,
    )


def _freed_copy(real: Outcome, err: UnknownBuffer) -> tuple[str, object] | None:
    """BUF-14: ("read" | "write", the started copy) whose half looked up the key that raised, or None."""
    for d in reversed(real.state.dmas):
        if err.key in d.buffers:
            return ("read" if d.buffers[0] == err.key else "write"), d
    return None


def _failure_hint(err: Violation) -> str:
    """The usual fix of a failure other than a view's or a grid step's: the property that names it."""
    if isinstance(err, IdCollision):
        return BY_ID["id-disjoint"].hint
    if isinstance(err, Int16Overflow):
        return BY_ID["id-int16"].hint
    return f"fix the operation that raises ({err.python_type}) first: then this property can be decided on the runs"


def _core_words(program: Program, core: int) -> str:
    """A core as the user knows it: its device, and which of the device's cores when it has several."""
    topo = program.topology
    d = topo.device_of(core)
    return f"device {d}" if topo.cores_per_device == 1 else f"device {d} core {topo.local_core_of(core)}"
