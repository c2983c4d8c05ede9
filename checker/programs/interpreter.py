"""What jax's interpreter does with the calls after a call that fails (spec PRG-11, PRG-122).

Under the interpreter every call runs on a manager of its own and ends in a barrier of all devices
(PRG-10), so each call is lowered and checked as its own launch (LAUNCH-1), and its races are its own
(PRG-14: jax's detector is per call too): this module changes that only where a failure reaches the
calls after it.

A target's calls are checked one by one when they hand no semaphore on, each as its own launch
(every interpreted call has a fresh manager). But a call that fails in every run changes
what the calls after it do, through jax's ordered-effect token, not through the interpreter's
state (PRG-11): the rest of its own jitted computation never starts, and the next computation with
an interpreted call raises the failed call's error at its dispatch, before any of its calls starts.
`after_failures` marks those calls with an `EarlierFailure` launch failure, so that under `eager`
and `on_wait` they are decided as a launch that fails (deadlock-free violated with the error, the
rest unknown, LAUNCH-2's treatment); the computation after that one runs as usual. A TPU runs them
all (divergence D28).

"Fails in every run" is decided from one greedy run (RUN-3): the run fails at an operation that its
core reaches in every schedule, its core passing no wait and no barrier before it; past a wait or a barrier,
per interpreter mode (`raised_per_mode`, PRG-208, PRG-217): the two modes may raise different errors (a copy runs
in its start under `eager`, in the wait that pops it under `on_wait`), or only one may be shown to raise in every
run; the calls after it are then marked per mode (PRG-218, `LoweredKernel.modes_apart`).

A failure of `get_barrier_semaphore` (PRG-13: a kernel without a collective id, e.g. one whose id
only jax's TPU lowering picks, PRG-125) is not wrapped by `fail_on_exception`: the interpreter leaves
its manager (PRG-11, PRG-154). It is predicted where every core of every device reaches its first
`get_barrier_semaphore` in every schedule, having only allocated, accessed its own memory and passed
barriers before it (`left_manager`): then every device fails there, the calls that never start are
marked as above, and the first call of the computation after the next runs on the left manager, so
its ids continue from the failed call's: its program begins, on each core, with the allocations that
core made in the failed call (`reuse`), which the id handout (SEM-1) then counts and whose ids stay in
the internal table, so an id collision (ERR-1) can appear there. Where a core does anything else before it, the failure is not
predicted and the calls after it are left as they are (checked as fresh launches).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from semcheck.model.errors import EarlierFailure, NoCollectiveId, Violation
from semcheck.model.ops import AllocBuffer, AllocSem, Barrier, DmaStart, FreeBuffer, Program, Signal, Wait

_MODES = ("eager", "on_wait")


def certain_failure(program: Program) -> Violation | None:
    """The failure every interpreted run of `program` ends in (the same in both modes), or None."""
    return _certain(program, _greedy_failures(program))


def _greedy_failures(program: Program) -> list[Any] | None:
    """The failure one greedy run (RUN-3) of each interpreter mode ends in; None when one of them completes."""
    from semcheck.model.fast import fast_run

    seen = []
    for mode in _MODES:
        f = fast_run(program, mode, record=False).failure
        if f is None:
            return None
        seen.append(f)
    return seen


def _certain(program: Program, failures: list[Any] | None) -> Violation | None:
    """`certain_failure` read off the greedy runs' `failures`: each at an operation its core reaches in every
    schedule (no wait or barrier before it), one failure in both modes."""
    if failures is None:
        return None
    for f in failures:
        ops = program.cores[f.core]
        if not ops[f.pc].propagates_failure or any(type(op) in (Wait, Barrier) for op in ops[:f.pc]):
            return None
    seen = [f.violation for f in failures]
    return seen[0] if all(v == seen[0] for v in seen) else None


# what jax's interpreter raises at get_barrier_semaphore without a collective id (PRG-13, recorded)
NO_ID_TEXT = "int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"
_PREFIX_OPS = {AllocSem, AllocBuffer, FreeBuffer}  # what a left manager keeps of a core's prefix (ids)


def _barrier_fetch_prefix(program: Program) -> tuple[Program, list[int]] | None:
    """The program of every core's operations before its first `get_barrier_semaphore`, and where those
    are, when no core waits, signals or copies before it and the prefixes run to their ends in both modes
    (in every schedule: RUN-3); None otherwise."""
    from semcheck.model.fast import fast_run

    firsts = []
    for ops in program.cores:
        j = next((i for i, op in enumerate(ops) if op.fetches_barrier), None)
        if j is None:
            return None
        if any(type(op) in (Wait, Signal, DmaStart) for op in ops[:j]):
            return None  # it may wait, or state beyond ids may be left: not predicted
        firsts.append(j)
    prefix = Program(program.topology, tuple(ops[:j] for ops, j in zip(program.cores, firsts)),
                     collective_id=program.collective_id, name=program.name, names=program.names,
                     detect_races=program.detect_races)
    for mode in _MODES:
        ran = fast_run(prefix, mode, record=False)
        if ran.failure is not None or list(ran.state.pcs) != firsts:
            return None  # a core does not reach its get_barrier_semaphore in some schedule
    return prefix, firsts


def stopped_at_barrier_fetch(program: Program) -> Program | None:
    """PRG-155: the program every interpreted run of `program` is, up to its failure, when every core fails
    at its first `get_barrier_semaphore` (`left_manager`'s case): the operations before it. None otherwise."""
    found = _barrier_fetch_prefix(program)
    return found[0] if found is not None and left_manager(program) is not None else None


def left_manager(program: Program) -> tuple[Violation, tuple[tuple[Any, ...], ...]] | None:
    """PRG-13 / PRG-154: (the failure, per core the allocations it made before it) when every interpreted
    run of `program` ends with every device failing at its first `get_barrier_semaphore`, which leaves the
    manager; None otherwise (module docstring)."""
    from semcheck.model.fast import fast_run

    found = _barrier_fetch_prefix(program)
    if found is None:
        return None
    _, firsts = found
    seen = []
    for mode in _MODES:
        out = fast_run(program, mode, record=False)
        f = out.failure
        if f is None or not program.cores[f.core][f.pc].fetches_barrier or f.pc != firsts[f.core]:
            return None
        seen.append(f.violation)
    if not all(v == seen[0] for v in seen):
        return None
    kept = tuple(tuple(op for op in ops[:j] if type(op) in _PREFIX_OPS) for ops, j in zip(program.cores, firsts))
    return seen[0], kept


def reuse(program: Program, kept: tuple[tuple[Any, ...], ...], failed: str) -> Program:
    """PRG-154: `program` run on the manager a failed call left: each core first holds the allocations it
    made there (renamed, so they are no label of this call's), which the id handout counts."""
    def renamed(op: Any) -> Any:
        return dataclasses.replace(op, label=f"left by {failed}: {op.label}")

    cores = tuple(tuple(renamed(op) for op in left) + tuple(ops) for left, ops in zip(kept, program.cores))
    return dataclasses.replace(program, cores=cores)


def _earlier(failure: Violation, failed: str) -> EarlierFailure:
    if isinstance(failure, NoCollectiveId):  # the interpreter's own words for it (PRG-13)
        return EarlierFailure("TypeError", NO_ID_TEXT, failed)
    return EarlierFailure(getattr(failure, "python_type", type(failure).__name__), failure.message, failed)


def _earlier_of(failures: frozenset, failed: str) -> EarlierFailure:
    """PRG-224: the earlier failure a later call carries where every run of a mode raises one of `failures`."""
    if len(failures) == 1:
        return _earlier(next(iter(failures)), failed)
    each = sorted((_earlier(v, failed) for v in failures), key=lambda e: (e.error_type, e.error))
    kinds = {e.error_type for e in each}
    kind = kinds.pop() if len(kinds) == 1 else "Exception"
    text = "each run raises one of: " + "; ".join(f"{e.error_type}: {e.error}" for e in each)
    return EarlierFailure(kind, text, failed)


def _unchecked(program: Program, mode: str, analysis: Any = None) -> str | None:
    """`after_failures`' default `not_facts`: any followed value counts as not shown to be a fact."""
    return None if getattr(program, "followed", None) is None else "the values its lowering followed are not checked"


def after_failures(kernels: list[Any], not_facts: Callable[..., str | None] = _unchecked) -> list[Any]:
    """PRG-11: `kernels` (in program order, each with its `call.unit`, the top-level computation it is
    dispatched in) with the calls that never start after a failed call marked (module docstring); and,
    for `hardware`, the calls jax's TPU lowering refuses (LAUNCH-7, which the interpreter
    runs: `collective_ids.mark_refused`). `not_facts(program, mode, analysis)`: why the values a call's lowering
    followed are not facts under the mode (ACC-9, `followed_values.not_facts`; handed in, which keeps the import graph
    acyclic), for ERR-53; the front end's also says why a run may raise where the greedy one completes (ERR-55), or
    why the call's own deadlock-free does not show that no run raises (ERR-57, read off `analysis`, the program's
    analysis, which a kernel with an `analysis` field keeps for its checks)."""
    from semcheck.checker.frontend.collective_ids import mark_refused
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.model.fast import fast_run

    out = mark_refused(list(kernels))
    _refuse_failing_iterations(out)
    i, unshown, unsure = 0, None, []
    while i < len(out):
        k = out[i]
        if k.call is None or k.program.launch_failure is not None or i == len(out) - 1:
            i += 1
            continue
        greedy = _greedy_failures(k.program)
        failure, kept, marks = _certain(k.program, greedy), None, None
        failed = f"{k.name} at {k.loc}"
        analysis = Analysis(k.program)  # ERR-57: what the call's own checks read too
        if hasattr(k, "analysis"):
            out[i] = k = dataclasses.replace(k, analysis=analysis)

        def facts(modes: tuple[str, ...], k: Any = k, failed: str = failed, a: Any = analysis) -> dict[str, str]:
            # ERR-53, ERR-55, ERR-57: the later calls are unknown in these modes (those without a mark); ERR-65: so
            # where another iteration of the call's loop (PRG-183) may raise there
            return {**_iterations_undecided(k, failed, not_facts, modes), **undecided_runs(k.program, failed, (),
                                                                                            not_facts, modes, a)}
        if failure is None:
            left = left_manager(k.program)  # PRG-13: get_barrier_semaphore fails and leaves the manager
            failing = tuple(m for m in _MODES if fast_run(k.program, m, record=False).failure is not None)
            if left is not None:
                failure, kept = left
            elif failing:
                # PRG-122: a greedy run fails past a wait or a barrier; does every run of its mode? (PRG-218: both
                # modes must be shown, each with its error: the calls after the next computation are then checked as
                # usual in both, and a later failure starts the rule again in both)
                # PRG-224: every run of a mode fails, with one of several failures: the later calls never start
                marks = {m: None if not v else _earlier_of(v, failed)
                         for m, v in failures_per_mode(k.program, analysis).items()}
            if failure is None and (marks is None or all(v is None for v in marks.values())):
                # ERR-53: some run of the `failing` modes raises, not shown to be every run
                rest = tuple(m for m in _MODES if m not in failing)
                unsure.append((i, {**facts(rest), **undecided_runs(k.program, failed, failing, not_facts)}))
                i += 1
                continue
            if failure is None and unshown is None and any(v is None for v in marks.values()):
                unshown = (i, _unshown_reasons(marks, failed))  # PRG-225
        if marks is None:
            marks = {m: _earlier(failure, failed) for m in _MODES}
        on = {m: why for m in _MODES if marks[m] is not None and (why := goes_on(k.program, m, failed)) is not None}
        if on:  # ERR-52: a device that may finish the call first runs the next one: the later calls are unknown there
            marks = {m: None if m in on else v for m, v in marks.items()}
            if unshown is None:
                unshown = (i, {**_unshown_reasons(marks, failed), **on} if any(marks.values()) else on)
            if not any(marks.values()):
                unsure.append((i, facts(_MODES)))
                i += 1
                continue
        unsure.append((i, facts(tuple(m for m in _MODES if marks[m] is None))))
        unit = k.call.unit
        later = sorted({o.call.unit for o in out[i + 1:] if o.call is not None and o.call.unit > unit})
        stops = {unit, *later[:1]}
        j = i + 1
        while j < len(out):
            o = out[j]
            if o.call is not None and o.call.unit in stops and o.program.launch_failure is None:
                out[j] = _marked(o, marks)
            j += 1
        # the computation after the next runs as usual; a failure there starts the story again
        i = next((j for j in range(i + 1, len(out)) if out[j].call is not None and out[j].call.unit not in stops),
                 len(out))
        if kept is not None and i < len(out) and out[i].program.launch_failure is None:
            # PRG-154: the first call that runs next finds the left manager; its clean-up drops it
            if getattr(out[i], "iterations", ()):
                from semcheck.checker.frontend.errors import Unsupported

                raise Unsupported("program", f"{out[i].name} runs in a loop (PRG-183) on the manager {failed} left "
                                  "(PRG-154): only the first iteration's call finds it, which is not modelled",
                                  out[i].loc)
            out[i] = dataclasses.replace(out[i], program=reuse(out[i].program, kept, failed))
    if unshown is not None:
        _unknown_after(out, *unshown)
    for at, reasons in unsure:
        if reasons:
            _unknown_after(out, at, reasons)
    return [_with_iterations(k) for k in out]


def undecided_runs(program: Program, failed: str, failing: tuple[str, ...], not_facts: Callable[..., str | None],
                   modes: tuple[str, ...] = _MODES, analysis: Any = None) -> dict[str, str]:
    """ERR-53: per interpreter mode, why the calls after `program` (the call `failed` names) are not decided there:
    a mode of `failing` has a run that raises (its greedy run) and is not shown to raise in every run, or the values
    the lowering followed are not facts under the mode (ACC-9), so the program checked may not be the kernel's. In
    either, some run of the call may fail on some devices while another device finishes its part, passes the
    clean-up barrier and starts its next call (ERR-52), which the failed devices never reach: a call without a
    collective id then hangs at its start barrier (PRG-180 counts it against that call). Modes absent: no reason;
    only `modes` are asked. `analysis`: the program's, handed to `not_facts` (ERR-57 reads a verdict off it)."""
    out = {}
    for m in modes:
        why = (f"{failed} raises in some {m} run, not shown to raise in every one" if m in failing
               else None if failing or (said := not_facts(program, m, analysis)) is None else f"{failed}: {said}")
        if why is not None:
            out[m] = (f"{why}; so some run of it may fail on some devices while another device finishes its part and "
                      "starts its next call, which the failed devices never reach (a call without a collective id "
                      "then hangs at its start barrier): which of the later calls run on which devices is not "
                      "decided (ERR-53)")
    return out


def _iterations_undecided(k: Any, failed: str, not_facts: Callable[..., str | None],
                          modes: tuple[str, ...]) -> dict[str, str]:
    """ERR-65: ERR-53, ERR-55 and ERR-57 asked of every iteration's own lowering of a call in a loop (PRG-183) but
    the one `k.program` is (the first, which the caller asks): per mode of `modes`, why some run of a later iteration
    may raise on some devices, which leaves the calls after the loop undecided as a failure of the first would."""
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.model.fast import fast_run

    out: dict[str, str] = {}
    seen = {id(k.program)}
    for words, program in getattr(k, "iterations", ()):
        if id(program) in seen or program.launch_failure is not None:
            continue
        seen.add(id(program))
        name = f"{failed} in {words} (ERR-65)"
        failing = tuple(m for m in modes if fast_run(program, m, record=False).failure is not None)
        rest = tuple(m for m in modes if m not in failing)
        found = {**undecided_runs(program, name, (), not_facts, rest, Analysis(program)),
                 **undecided_runs(program, name, failing, not_facts, failing)}
        out.update({m: why for m, why in found.items() if m not in out})
        if len(out) == len(modes):
            break
    return out


def goes_on(program: Program, mode: str, failed: str) -> str | None:
    """ERR-52: why a device of `program` (a call whose every `mode` run fails) may finish its part of the call before
    any failure, and so pass the clean-up barrier (the failing devices wait there in `set_failed`) and start its next
    call; None when no device can. Each failure of the greedy run is held (its core stops before it) until a run
    raises nothing: every run in which no core has failed yet is a prefix of a run of that program, whose greedy run
    ends at the least stuck vector (RUN-3), so a device that finishes in some such run finishes in it."""
    from semcheck.model.fast import fast_run

    cores, held = list(program.cores), set()
    while True:
        ran = fast_run(dataclasses.replace(program, cores=tuple(cores)), mode, record=False)
        f = ran.failure
        if f is None:
            break
        if f.core in held:  # (a held core fails no more: not expected, nothing is claimed)
            return f"{failed}: the run past its failures is not followed (ERR-52)"
        held.add(f.core)
        cores[f.core] = cores[f.core][:f.pc]
    topo = program.topology
    for d in range(topo.num_devices):
        mine = [topo.global_core(d, c) for c in range(topo.cores_per_device)]
        left = [op for c in mine for op in program.cores[c][ran.state.pcs[c]:]]
        if not held & set(mine) and all(type(op) is Barrier for op in left):
            return (f"{failed} raises in every {mode} run, but device {d} may finish its part of the call before any "
                    f"core fails, pass the clean-up barrier the failing devices wait at, and start its next call, "
                    f"which the others never reach (ERR-52)")
    return None


def _unshown_reasons(marks: dict[str, Any], failed: str) -> dict[str, str]:
    shown = ", ".join(m for m, v in marks.items() if v is not None)
    return {m: f"{failed} raises in every {shown} run but is not shown to raise in every {m} run, so which calls "
               f"after it start under {m} is not decided (PRG-225)" for m, v in marks.items() if v is None}


def _unknown_after(out: list[Any], i: int, reasons: dict[str, str]) -> None:
    """PRG-225: every call after out[i], whose failure only some modes show in every run, is unknown in the other
    modes (the calls the failure stops in the modes that show it are marked there)."""
    for j in range(i + 1, len(out)):
        o = out[j]
        if o.call is None:
            continue
        if getattr(o, "iterations", ()):
            from semcheck.checker.frontend.errors import Unsupported

            raise Unsupported("program", f"{o.name} runs in a loop (PRG-183) after {reasons[next(iter(reasons))]}",
                              o.loc)
        apart = dict(getattr(o, "modes_apart", ()))  # a reason of its own (PRG-217's) stays: unknown either way
        apart.update({m: r for m, r in reasons.items() if not isinstance(apart.get(m), str)})
        out[j] = dataclasses.replace(o, modes_apart=tuple(apart.items()))


def _marked(o: Any, marks: dict[str, Any]) -> Any:
    """PRG-122: call `o`, which never starts, marked with the earlier call's error; PRG-218: per interpreter mode
    where the modes' errors differ. Per-mode marks are not carried into a loop's iterations (PRG-183): such a call
    is left as it is."""
    first = next(v for v in marks.values() if v is not None)
    program = dataclasses.replace(o.program, launch_failure=first)
    own = own_modes(program, marks, lambda m: o.program)
    if not own:
        return dataclasses.replace(o, program=program)
    if getattr(o, "iterations", ()):
        return o
    return dataclasses.replace(o, program=program, modes_apart=own)


def raised_in_every_run(program: Program) -> Violation | None:
    """PRG-208: the failure every interpreted run of `program` raises, the same in both modes, or None."""
    raised = raised_per_mode(program)
    first = raised[_MODES[0]]
    return first if first is not None and all(v == first for v in raised.values()) else None


def raised_per_mode(program: Program) -> dict[str, Violation | None]:
    """PRG-208, PRG-217: per interpreter mode, the failure every run of `program` raises in that mode, or None. Wider
    than `certain_failure` (one greedy run, no wait or barrier before the failure): RUN-11's S' (every run fails, each
    failure ends the whole run, ERR-7), else each device's one run (ERR-47: one core per device, meeting only at
    barriers of every device), else, outside S' (an `on_wait` copy that raises in its waiter, ACC-11), every schedule
    within ERR-19's budget ends in a failure; in each, every failing position (or outcome) raises one failure."""
    return {m: _one(v) for m, v in failures_per_mode(program).items()}


def failures_per_mode(program: Program, analysis: Any = None) -> dict[str, frozenset | None]:
    """PRG-224: per interpreter mode, the failures one of which every run of `program` raises (found as
    `raised_per_mode` finds one), or None where a run of the mode is not shown to fail. `analysis`: the program's,
    when the caller has one."""
    from semcheck.checker.properties.analysis import Analysis

    if program.launch_failure is not None:
        return {m: None for m in _MODES}
    if analysis is None or analysis.program is not program:
        analysis = Analysis(program)
    return {m: _failures_in(program, m, analysis) for m in _MODES}


def _one(raised: frozenset | None) -> Violation | None:
    return next(iter(raised)) if raised is not None and len(raised) == 1 else None


def _failures_in(program: Program, mode: str, analysis: Any) -> frozenset | None:
    from semcheck.checker.properties import failing_facts
    from semcheck.model.explore import ExplorationLimit
    from semcheck.model.explore_devices import explore_outcomes, failures_one_run_per_device
    from semcheck.model.fast import fast_run

    if fast_run(program, mode, record=False).failure is None:
        return None  # a run of the mode that raises nothing (it completes or hangs, RUN-3)
    ending = analysis.mode(mode).every_run_fails
    if ending is not None:
        raised = {v for _, v in ending.low.failing.values()}
    else:
        raised = failures_one_run_per_device(program, mode)  # ERR-47
        if raised is None:
            try:
                ex = explore_outcomes(program, mode, max_states=failing_facts.FALLBACK_STATES)
            except ExplorationLimit:
                return None
            if not ex.outcomes or any(o.kind != "error" for o in ex.outcomes):
                return None
            raised = {o.failure.violation for o in ex.outcomes}
    return frozenset(raised) if raised else None


def never_starts_unlowered(call: Any, error: Exception, earlier: list[Any], units: list[int], *,
                           cores: int | None, name: str) -> tuple[Program, Any, Any, tuple] | None:
    """PRG-208: for a call whose kernel could not be lowered (`error`), when an earlier call of `earlier` (the
    target's kernels lowered so far) raises in every interpreted run (`raised_per_mode`) and this call is in
    its computation or the next one with a call (`units`: every call's computation, PRG-122), so that it never
    starts in the interpreter: (its stand-in program, whose launch fails with that error, why `hardware` has none,
    the failing kernel, the interpreter modes whose stand-in differs: PRG-217's `own_modes`); else None. The failing
    call must read no earlier kernel's outputs (PRG-169: its failure then rests on the example arguments alone) and
    run in no loop (PRG-183); no earlier call may fail at launch; and for a call of the next computation, no call
    may come before the failing call's computation."""
    from semcheck.checker.frontend.refused_launch import stands_for_unlowered, unlowered_launch
    from semcheck.checker.frontend.scalar_memory import NeedsFloatInputs

    if not stands_for_unlowered(error) or isinstance(error, NeedsFloatInputs):
        return None  # (ACC-41: the lowering is tried again with the float inputs' values)
    for i, k in enumerate(earlier):
        if k.program.launch_failure is not None:
            return None  # a launch that fails (LAUNCH-2, LAUNCH-3) stops more than its computation: not stood in
        if k.call is None or k.producers or getattr(k, "iterations", ()):
            continue
        raised = raised_per_mode(k.program)
        if all(v is None for v in raised.values()):
            continue
        # its own computation never goes on; the next one with a call re-raises its error, unless a call of an
        # earlier computation may have failed first (then this computation may be the one after the next, which runs)
        after = sorted({u for u in units if u > k.call.unit})
        alone = all(j.call is None or j.call.unit == k.call.unit for j in earlier[:i])
        if not (call.unit == k.call.unit or (alone and after[:1] == [call.unit])):
            return None
        failed = f"{k.name} at {k.loc}"
        marks = {m: None if v is None else _earlier(v, failed) for m, v in raised.items()}
        first = next(m for m in _MODES if marks[m] is not None)
        program, why = unlowered_launch(call, marks[first], error, cores=cores, name=name, rule="PRG-208")
        return program, why, k, own_modes(program, marks, lambda m: (
            f"{why}; the earlier call {failed} raises in every {first} run, which stops this call there (PRG-208), "
            f"but it is not shown to raise in every {m} run, where this call may start (PRG-217)"))
    return None


def own_modes(program: Program, marks: dict[str, Any], unshown: Any) -> tuple[tuple[str, Program | str], ...]:
    """PRG-217: the interpreter modes whose program is not `program` (marked with the first mode's failure that
    `marks` holds): a mode with another failure gets `program` marked with it, a mode with none `unshown(mode)`
    (the program it is checked on, or why it stays unknown)."""
    first = next(v for v in marks.values() if v is not None)
    out = []
    for m, mark in marks.items():
        if mark is None:
            out.append((m, unshown(m)))
        elif mark != first:
            out.append((m, dataclasses.replace(program, launch_failure=mark)))
    return tuple(out)


def _refuse_failing_iterations(kernels: list[Any]) -> None:
    """PRG-183 with PRG-11: a call in a loop one of whose iterations certainly fails (or leaves the manager,
    PRG-154) stops the calls after it in that iteration and after, while the earlier iterations' calls ran;
    which of the target's other calls run is not modelled per iteration, so such a target of several calls is
    unsupported (a single call's iterations are merged, PRG-183)."""
    if len(kernels) < 2:
        return
    from semcheck.checker.frontend.errors import Unsupported

    for k in kernels:
        for words, program in getattr(k, "iterations", ()):
            if program.launch_failure is None and (certain_failure(program) is not None
                                                   or left_manager(program) is not None):
                raise Unsupported("program", f"{k.name} fails in {words} (PRG-183), and which of the target's other "
                                  "calls run after a failure in a loop's iteration is not modelled (PRG-11)", k.loc)


def _with_iterations(k: Any) -> Any:
    """PRG-183: the launch failures marked on a call (LAUNCH-3, LAUNCH-7, PRG-11) hold for each of its iterations."""
    its = getattr(k, "iterations", ())
    if not its:
        return k
    marks = {f: getattr(k.program, f) for f in ("launch_failure", "tpu_failure") if getattr(k.program, f) is not None}
    if not marks:
        return k
    return dataclasses.replace(k, iterations=tuple(
        (w, dataclasses.replace(p, **{f: v for f, v in marks.items() if getattr(p, f) is None})) for w, p in its))


__all__ = ["after_failures", "certain_failure", "left_manager", "never_starts_unlowered", "own_modes",
           "raised_in_every_run", "raised_per_mode", "failures_per_mode", "undecided_runs",
           "reuse", "stopped_at_barrier_fetch"]
