"""The results of a target checked as one program of kernel calls (specs/deciding/programs.md).

The verifying child process (`child`) calls `program_results` when the front end composed the
target's calls (`frontend.programs.lower_program`): one composed program per order of the calls
XLA may choose (PRG-101), each checked in every requested mode like a single kernel, with what the
composition cannot decide made unknown with its reason (PRG-107, PRG-108, PRG-109). The orders' verdicts are
then merged: a property is proved when every order proves it, violated when the traced order
(an order XLA may choose) violates it, and unknown otherwise, saying which order differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.programs.interpreter_hang import decide, hung, no_run_completes
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.ops import INTERPRETER_MODES
from semcheck.model.launch import launch_failure


def program_results(orders: list[Any], name: str, req: Any, deadline: float, t_lower: float) -> list[Any]:
    """Per requested mode, a `request.Result` for the composed program (`orders[0]`: the traced order)."""
    from semcheck.checker.properties.checking import exposures_of
    from semcheck.checker.run.request import Result

    checked = [_check(c, req, deadline) for c in orders]
    branches = list(dict.fromkeys(getattr(c, "branch", "") for c in orders))  # PRG-126
    traced = orders[0]
    program = traced.program
    exposed = exposures_of(program, req.fold)
    if len(traced.ir.invocations) > 1:  # D25: the interpreter synchronises the calls, a TPU does not
        from semcheck.checker.properties.differences import Exposure

        exposed = (*exposed, Exposure("D25", tuple(dict.fromkeys(inv.loc for inv in traced.ir.invocations))[:3]))
    out = []
    for mode in req.modes:
        verdicts = []
        for i in range(len(req.properties)):
            per_branch = []
            for b in branches:
                mine = [(c, o) for c, o in zip(checked, orders) if getattr(o, "branch", "") == b]
                per_branch.append(_unexplored(_merge([c[mode][0][i] for c, _ in mine], [o for _, o in mine]),
                                              mine[0][1], mode))
            verdicts.append(_over_branches(per_branch, branches))
        out.append(Result(
            target=name, devices=req.devices, dma_mode=mode, verdicts=verdicts,
            program={"ops": program.num_ops, "cores": program.topology.num_cores,
                     "collective_id": program.collective_id, "exposures": exposed,
                     "calls": [inv.describe() for inv in traced.ir.invocations], "orders": len(orders)},
            seconds={"trace_and_lower": round(t_lower, 4), "check": round(sum(c[mode][1] for c in checked), 4)},
        ))
    return out


def _check(composed: Any, req: Any, deadline: float) -> dict[str, tuple[list[Verdict], float]]:
    """mode -> (verdicts, seconds) of one composed program."""
    from semcheck.checker.properties.checking import check_modes
    from semcheck.checker.properties.empty_copies import both_readings

    confined = _confined(composed) if "hardware" in req.modes else None
    if confined is not None:  # decided over the program, after check_modes' naming pass: named here (issue 26.4)
        from semcheck.checker.properties.timeline import naming

        confined = naming(confined, composed.program)
    untrusted = confined is not None and not confined.holds  # (vacuous: nothing lands anywhere, REP-20)
    modes = tuple(m for m in req.modes if (composed.interpreter_exact or m not in INTERPRETER_MODES))
    done = check_modes(composed.program, dataclasses.replace(req, modes=modes), deadline) if modes else {}
    done = both_readings(composed.program, done, req, deadline, check_modes)  # ACC-24: empty copies on hardware
    done.update(_interpreted(composed, tuple(m for m in req.modes if m in INTERPRETER_MODES and m not in modes),
                             req, deadline))
    out = {}
    for mode in req.modes:
        if mode in done:
            verdicts, seconds = done[mode]
            # a program that fails at launch runs no copy, so none is in flight at a use (LAUNCH-5)
            gaps = () if launch_failure(composed.program, mode) is not None else composed.race_gaps
            verdicts = [_gap(v, gaps) for v in verdicts]
            if mode == "hardware" and untrusted:
                verdicts = [_standing(v, composed, confined) for v in verdicts]
            out[mode] = (verdicts, seconds)
        else:
            out[mode] = ([Verdict(p, "unknown", reason=composed.why) for p in req.properties], 0.0)
        if mode == "hardware" and confined is not None:  # PROP-8 over the program, not over one call
            out[mode] = ([confined if v.property == confined.property else v for v in out[mode][0]], out[mode][1])
        if mode in INTERPRETER_MODES and _split(composed.ir) and not composed.fails_while_lowered:
            hang = no_run_completes(composed.ir, req.devices)  # PRG-180
            out[mode] = ([Verdict(v.property, "unknown", reason=_SPLIT) for v in out[mode][0]] if hang is None
                         else hung(out[mode][0], hang, _SPLIT), out[mode][1])
    if getattr(composed.ir, "windows", ()):
        out = _windowed(composed, out, req, deadline)
    if composed.computed_by:
        out = {m: (_computed(composed, m, vs, req, deadline), t) for m, (vs, t) in out.items()}
    return _hbm_access(composed, out)


def _hbm_access(composed: Any, out: dict[str, tuple[list[Verdict], float]]) -> dict[str, tuple[list[Verdict], float]]:
    """ERR-56: under hardware, every property unknown when a call of the program loads or stores a ref in HBM or ANY
    directly (the first such access's reason); ACC-88: or when jax's TPU lowering refuses a call (a stable top_k)."""
    if "hardware" not in out:
        return out
    from semcheck.checker.frontend.refused_launch import first_hardware_unknown

    why = first_hardware_unknown(getattr(inv, "call", None) for inv in composed.ir.invocations)
    if why is None:
        return out
    verdicts, seconds = out["hardware"]
    return {**out, "hardware": ([Verdict(v.property, "unknown", reason=str(why), stats={"rule": why.rule})
                                 for v in verdicts], seconds)}


def _computed(composed: Any, mode: str, verdicts: list[Verdict], req: Any, deadline: float) -> list[Verdict]:
    """PRG-169: the verdicts of a program whose calls read values an earlier call computed, unknown where that
    call's outputs may differ between schedules: the composed program (it holds the producing call) is not
    race-free under `mode`. Its own race-free verdict stands: the producing call's part does not rest on them."""
    from semcheck.checker.properties.computed_inputs import RACE, settle, why_not_facts

    if launch_failure(composed.program, mode) is not None:
        return verdicts  # nothing runs: no value is read (LAUNCH-5)
    race = next((v for v in verdicts if v.property == RACE), None)
    if race is None:
        from semcheck.checker.properties.checking import check_program

        (race,) = check_program(composed.program, mode, (RACE,), timeout_ms=int(req.timeout * 1000),
                                deadline=deadline, fold=req.fold)
        race = _gap(race, composed.race_gaps)
    reason = why_not_facts(composed.computed_by, mode, race, whose="the program of calls", unwritten=composed.unwritten)
    return settle(verdicts, reason, keep_race=True)


_SPLIT = ("a kernel call that only some devices run (a cond whose branch, or a while loop whose trip count, differs "
          "between devices): in the interpreter every device that runs a call waits at its clean-up barrier for "
          "every device of the mesh (`_clean_up_shared_memory`), so the calls of different devices meet there; "
          "not modelled (PRG-145, PRG-197)")


def _split(ir: Any) -> bool:
    """PRG-145: whether some call of the program runs on only some devices."""
    return any(getattr(inv, "devices", None) is not None for inv in ir.invocations)


def interpreter_alone(r: Any, composed: Any, why: str, kernel: Any = None) -> Any:
    """PRG-145: a result of calls checked alone under `eager`/`on_wait` (PRG-115), unknown where some call runs
    on only some devices (or may: a cond the walk could not tell on each device), which a call checked alone
    does not describe."""
    from semcheck.checker.frontend.program_ir import PER_DEVICE

    if r.dma_mode not in INTERPRETER_MODES:
        return r
    if not (PER_DEVICE in (why or "") or any(_split(c.ir) for c in composed or ())):
        return r
    # PRG-180 where the hang is certain: in every program the walk gives (one per branch of an undecided cond)
    hangs = [no_run_completes(c.ir, r.devices) for c in composed or ()]
    known = bool(hangs) and PER_DEVICE not in (why or "") and len({id(c.ir) for c in composed}) == 1
    hang = hangs[0] if known and None not in hangs else None
    return decide(r, hang, _SPLIT, ir=composed[0].ir if known else None, kernel=kernel,
                  composed=composed[0] if known else None)


def interpreter_skipped(r: Any, skipped: tuple[str, Any, Any] | None, kernel: Any = None) -> Any:
    """PRG-163: a result of calls checked alone under `eager`/`on_wait`, unknown where some device may skip a
    call (`frontend.programs.calls_some_devices_skip`: why, and the line)."""
    if skipped is None or r.dma_mode not in INTERPRETER_MODES:
        return r
    why, loc, ir = skipped
    where = f" ({loc})" if loc is not None and str(loc) not in why else ""
    reason = (f"{why}{where}: in the interpreter every "
              "device that runs a call waits at its clean-up barrier for every device of the mesh "
              "(`_clean_up_shared_memory`), so a device that skips a call leaves the others waiting there or "
              "mixes their calls; not modelled (PRG-145, PRG-163)")
    return decide(r, no_run_completes(ir, r.devices), reason, ir=ir, kernel=kernel)  # PRG-180


def _windowed(composed: Any, out: dict, req: Any, deadline: float) -> dict:
    """PRG-130: verdicts over a window of WINDOW iterations of a long loop hold for the whole loop only when
    PRG-7's condition holds (no device two iterations ahead of a partner) and every call's scratch semaphores
    are back to zero at its exit (exit-balance proved); then a proof stands. A violation stands where a run of
    the loop's first iterations shows it (PRG-143); nothing else is decided."""
    from semcheck.checker.frontend.program_ir import WINDOW
    from semcheck.checker.programs.windows import lag_in_some_loop, loop_violation

    loops = [f"{trips} iterations at {loc}, {per} call{'s' if per > 1 else ''} each"
             for loc, trips, _, per in composed.ir.windows]
    where = (f"checked over {WINDOW} consecutive iterations of the loop of {loops[0].replace(', ', ' (', 1)}, "
             "programs.md PRG-130)" if len(loops) == 1 else
             f"checked over {WINDOW} consecutive iterations of each of its loops ({'; '.join(loops)}; programs.md "
             "PRG-130, PRG-144)")
    lag: str | None | bool = False  # not computed yet
    memo: dict = {}  # PRG-143: the cut program and its verdicts, shared by the modes
    done = {}
    for mode, (verdicts, seconds) in out.items():
        if mode in INTERPRETER_MODES and composed.fails_while_lowered:
            done[mode] = (verdicts, seconds)  # the first call fails at launch, whatever the trip count (PRG-107)
            continue
        exits = next((v for v in verdicts if v.property == "exit-balance"), None)
        kept = []
        for v in verdicts:
            if _holds_on_hardware(v, mode):
                kept.append(_stands(v))  # PRG-215: at every trip count, as of every program
                continue
            # vacuous holds as proved does (REP-20 only names it): the window's argument reads that it holds
            if v.holds and (exits is None or exits.holds):
                if lag is False:
                    lag = lag_in_some_loop(composed)
                if lag is None:
                    kept.append(dataclasses.replace(v, reason=f"{where}, which PRG-7 extends to every iteration"
                                                    + (f"; {v.reason}" if v.reason else "")))
                    continue
                why = f"{where}: proved there, but {lag}"
            elif v.holds:
                why = f"{where}: {v.verdict} there, but exit-balance is {exits.verdict} in the window"
            else:
                whole = loop_violation(composed, v, req, deadline, memo) if mode == "hardware" else None
                if whole is not None:
                    kept.append(whole)
                    continue
                said = v.reason or (v.witness.message if v.witness is not None else "")
                why = f"{where}: {v.verdict} there ({said}); beyond the window not decided"
            kept.append(Verdict(v.property, "unknown", reason=why, stats=v.stats))
        done[mode] = (kept, seconds)
    return done


def _confined(composed: Any) -> Verdict:
    """PRG-111 / PRG-112: invocation-confined under hardware, its witness replayed on the model."""
    from semcheck.checker.properties.confined import composed_verdict
    from semcheck.checker.properties.replay import with_replay

    return with_replay(lambda program, mode, timeout_ms=0: composed_verdict(composed))(composed.program, "hardware")


_RUN_WITNESSED = frozenset({"deadlock-free", "race-free"})
"""PRG-128: the properties whose witness is the violating run itself (a count or id found statically is not)."""


def _standing(v: Verdict, composed: Any, confined: Verdict) -> Verdict:
    """PRG-128: where invocation-confined is not proved, a violation whose run lands every remote signal and
    copy inside its call stands; every other verdict is unknown, citing the confinement verdict (PRG-114)."""
    from semcheck.checker.properties.confined import PROPERTY, faithful

    if v.property == PROPERTY:
        return v
    if _holds_on_hardware(v, "hardware"):
        return _stands(v)  # PRG-215
    if v.verdict == "violated" and v.property in _RUN_WITNESSED and v.witness is not None and v.witness.schedule \
            and faithful(composed, v.witness.schedule) is None:
        return dataclasses.replace(v, witness=dataclasses.replace(v.witness, message=(
            f"{v.witness.message} (this run lands every remote signal and copy inside its call, so it is a run "
            "of a TPU although invocation-confined is not proved: PRG-128)")))
    return Verdict(v.property, "unknown", reason=_unconfined(confined), stats=v.stats)


def _unconfined(confined: Verdict) -> str:
    """PRG-114: why the other properties are unknown where a landing may fall outside its call."""
    said = confined.witness.message if confined.witness is not None else confined.reason
    return (f"invocation-confined is {confined.verdict}: {said}; the model gives each call its own semaphores and "
            "buffers, which does not describe a landing outside the call (PRG-114): on a TPU it lands in whatever "
            "holds that memory then, which the program does not fix (PRG-216)")


def _interpreted(composed: Any, modes: tuple[str, ...], req: Any, deadline: float) -> dict:
    """PRG-107: the interpreter runs the calls before the one whose launch fails, each as a single kernel,
    then raises at that launch. A property an earlier call violates is violated; deadlock-free, when every
    earlier call is proved deadlock-free, is the failing launch's (LAUNCH-2); the rest is unknown."""
    from semcheck.checker.properties.checking import check_modes

    if not modes or not composed.interpreted:
        return {}
    sub = dataclasses.replace(req, modes=modes)
    runs = [check_modes(p, sub, deadline) for p in composed.interpreted]
    out = {}
    for mode in modes:
        verdicts = []
        for i, prop in enumerate(req.properties):
            *before, failing = [r[mode][0][i] for r in runs]
            bad = next((v for v in before if v.verdict == "violated"), None)
            if bad is not None:
                verdicts.append(bad)
            elif prop == "deadlock-free" and all(v.verdict == "proved" for v in before):
                verdicts.append(_stops(failing, composed.why))
            else:
                verdicts.append(Verdict(prop, "unknown", reason=composed.why))
        out[mode] = (verdicts, sum(r[mode][1] for r in runs))
    return out


def _stops(v: Verdict, why: str) -> Verdict:
    """The failing launch's verdict, its message saying that the calls before it ran."""
    if v.witness is None:
        return v
    return dataclasses.replace(v, witness=dataclasses.replace(
        v.witness, message=f"{why}; the jitted program raises there and never completes"))


def _gap(v: Verdict, gaps: tuple[str, ...]) -> Verdict:
    """PRG-108: race-free is not proved over a program whose copies may be in flight at an unmodelled use."""
    if v.property != "race-free" or not v.holds or not gaps:
        return v
    return Verdict(v.property, "unknown", reason="; ".join(gaps[:2]) + " (specs/deciding/programs.md PRG-108)", stats=v.stats)


def _unexplored(v: Verdict, traced: Any, mode: str) -> Verdict:
    """PRG-117: with only the traced order checked, a violation stands and nothing else is decided, except a
    verdict that is the same in every order: the interpreter's where it fails while lowering the computation
    (PRG-214), a property every hardware program has (PRG-215)."""
    if not getattr(traced, "unexplored", "") or v.verdict == "violated":
        return v
    if mode in INTERPRETER_MODES and traced.fails_while_lowered:
        return v  # PRG-214: lowering raises before XLA runs any call, in any order
    if _holds_on_hardware(v, mode):
        return _stands(v)  # PRG-215
    said = f" (in the traced order: {v.verdict}{': ' + v.reason if v.reason else ''})"
    return Verdict(v.property, "unknown", reason=traced.unexplored + said, stats=v.stats)


def _holds_on_hardware(v: Verdict, mode: str) -> bool:
    """PRG-215: a proof of a property every hardware program has (HW-1: no ids), which reads no run of the
    composed program and none of its objects."""
    return mode == "hardware" and v.verdict == "proved" and BY_ID[v.property].holds_on_hardware


def _stands(v: Verdict) -> Verdict:
    """PRG-215's proof, its reason saying why it stands (once: a program can need both sayings)."""
    if "(PRG-215)" in (v.reason or ""):
        return v
    said = ("it holds of every program under hardware, so it stands whatever the model's runs say: wherever a copy "
            "lands, in every order of the calls, at every trip count (PRG-215)")
    return dataclasses.replace(v, reason=f"{v.reason}; {said}" if v.reason else said)


def _over_branches(verdicts: list[Verdict], branches: list[str]) -> Verdict:
    """PRG-126: a property over the programs the undecided conds give: proved when proved in every one,
    violated when some program violates it (the witness names its branches), unknown otherwise, naming
    the program that is not proved."""
    if len(verdicts) == 1:
        return verdicts[0]
    for v, b in zip(verdicts, branches):
        if v.verdict == "violated":
            if v.witness is not None:
                return dataclasses.replace(v, witness=dataclasses.replace(
                    v.witness, message=f"{v.witness.message} (when {b})"))
            return v
    if all(v.verdict == "proved" for v in verdicts):
        return verdicts[0]
    v, b = next((v, b) for v, b in zip(verdicts, branches) if v.verdict != "proved")
    return dataclasses.replace(v, reason=f"when {b}: {v.reason}")


def _merge(verdicts: list[Verdict], orders: list[Any]) -> Verdict:
    """One property's verdict over the orders XLA may run the calls in (the traced order first), in each
    reading of a collective id shared by different kernels (PRG-116): violated when the traced order violates
    it in some reading, proved when every order proves it in every reading."""
    first = verdicts[0]
    traced = getattr(orders[0], "order", None)
    for v, c in zip(verdicts, orders):
        if v.verdict == "violated" and (v is first or (traced is not None and getattr(c, "order", None) == traced)):
            reading = getattr(c, "reading", "")
            if reading and v.witness is not None and "reading:" not in v.witness.message:
                v = dataclasses.replace(v, witness=dataclasses.replace(
                    v.witness, message=f"{v.witness.message} (reading: {reading})"))
            return v
    if not first.holds or all(v.holds for v in verdicts):
        return first  # (a vacuous order beside proved ones: the property holds in each, REP-20)
    i, other = next((i, v) for i, v in enumerate(verdicts) if not v.holds)
    said = other.reason or (other.witness.message if other.witness is not None else "")
    reading = getattr(orders[i], "reading", "")
    return Verdict(first.property, "unknown", stats=first.stats, reason=(
        f"proved when the calls run in the traced order; no data dependence stops XLA from running them as "
        f"{orders[i].describe_order()}" + (f" (reading: {reading})" if reading else "")
        + f", and then it is {other.verdict}: {said}"))


__all__ = ["interpreter_alone", "program_results"]
