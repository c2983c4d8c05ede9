"""Checking lowered programs: every requested property of a program under each DMA mode.

One path for every caller: the verifying child process (`checker/run/child.py`), the mode worker,
generated inputs and the tests all go through `check_program` / `check_modes`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from functools import partial

from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.empty_copies import both_readings
from semcheck.checker.properties.per_mode_values import mode_program, split_modes
from semcheck.checker.properties.race_order import listed_ahead
from semcheck.checker.properties.reductions import REDUCTIONS, on_program, reduced
from semcheck.checker.properties.registry import BY_ID, IDS
from semcheck.checker.run.request import Request, Result, unknown_results
from semcheck.checker.properties.verdict import Verdict
from semcheck.checker.properties.sites import collective_id_site
from semcheck.model.ops import Program


def check_program(program, mode: str, properties=IDS, *, timeout_ms: int = 30_000,
                  deadline: float | None = None, fold: bool = True, analysis: Analysis | None = None,
                  settled: bool = True) -> list[Verdict]:
    """All requested properties of one lowered program under one DMA mode.

    Each property is tried on the reductions it accepts (`Property.reductions`: with `fold`, a
    program whose devices repeat is first decided on its fold, spec RUN-7), keeping what they decide,
    and the rest is decided on the program itself (`reductions.on_program`). With a `deadline` (a
    `time.monotonic()` value) each property gets the time left, and those reached after it are
    unknown without being tried. `analysis`: the program's, when the caller checks it in other modes
    too (they share it); one is made otherwise.
    With `settled`, a verdict that rests on followed values that are not facts is unknown (ACC-9);
    `check_modes` settles its own, fold verdicts included.
    """
    if analysis is None:
        analysis = Analysis(program)
    elif analysis.program is not program:
        raise ValueError("the analysis handed to check_program is of another program")
    out = []
    for p in properties:
        v = reduced(analysis, BY_ID[p].reductions, p, mode, lambda: _budget(timeout_ms, deadline), fold=fold)
        if v is None:
            budget = _budget(timeout_ms, deadline)
            v = (Verdict(p, "unknown", reason="timeout: --timeout ran out before this property was checked")
                 if budget is None else on_program(analysis, p, mode, budget))
        out.append(v)
    if settled and getattr(program, "followed", None) is not None:
        out = list(_settle(program, mode, {v.property: v for v in out}, timeout_ms, deadline, analysis).values())
    return _past_scope_failure(out, _scope_facts(analysis, mode))


def _scope_facts(analysis: Analysis, mode: str):
    """The analysis BUF-13 reads under `mode`: of the whole program when a Symmetric has run_scoped buffers
    (its scopes need every core's run) and that program is built (RUN-21); else the analysis itself."""
    if analysis.symmetric:
        from semcheck.checker.properties.confined_scopes import has_scopes

        if has_scopes(analysis.program):
            whole = analysis.whole_program
            if not isinstance(whole, str):
                return whole.mode(mode)
    return analysis.mode(mode)


def _settle(program, mode: str, verdicts: dict[str, Verdict], timeout_ms: int, deadline: float | None,
            analysis: Analysis) -> dict[str, Verdict]:
    """ACC-9: `verdicts`, unknown where the values the lowering followed are not facts."""
    from semcheck.checker.properties.followed_values import settle

    return settle(program, mode, verdicts, lambda: check_program(
        program, mode, ("race-free",), timeout_ms=timeout_ms, deadline=deadline, fold=False, analysis=analysis,
        settled=False)[0], analysis.mode(mode))


def _past_scope_failure(verdicts: list[Verdict], facts) -> list[Verdict]:
    """BUF-14: where a run of an interpreter mode raises at a run_scoped buffer (or may: the explorer ran out),
    a proof that did not come through that decision (`failing_runs.scope_failure_verdict`: a reduction's, say)
    stands for runs it did not follow, so it is unknown (but by a property whose check says it:
    `reads_scope_failure`)."""
    from semcheck.checker.properties.failing_runs import explored_failure, scope_raises

    why = explored_failure(facts)  # RACE-1's failing waits too (ERR-21), which no property's check reads
    if why is None or scope_raises(facts) is False:
        return verdicts
    reads = facts.clock_failure is None
    return [v if not v.holds or (reads and _reads_scope_failure(v.property)) or v.stats.get("rule") in ("BUF-14", "RACE-1", "RUN-60", "ERR-50", "ERR-51", "ERR-64")
            else Verdict(v.property, "unknown", reason=why) for v in verdicts]


def _reads_scope_failure(prop: str) -> bool:
    p = BY_ID.get(prop)
    return p is not None and p.reads_scope_failure


_AFTER_FOLD = frozenset(REDUCTIONS) - {"fold"}


def _budget(timeout_ms: int, deadline: float | None) -> int | None:
    """Milliseconds a check may take: the timeout, or what is left before the deadline (None: nothing)."""
    if deadline is None:
        return timeout_ms
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    return max(1, min(timeout_ms, int(left * 1000)))


def exposures_of(target: Program | Analysis, fold: bool) -> tuple:
    """The interpreter divergences the program exercises (for the report's "modes differ" notes).

    A fold has the same operations as the program on fewer devices, so the skeleton's fold is read
    instead when there is one (with --no-fold, the program). The skeleton drops accesses, so the
    views the interpreter cannot index (ERR-9), the copies and accesses of no element (ERR-27) and the masked
    stores' windows (ERR-28) are read off the program."""
    from semcheck.checker.properties.differences import exposures, masked_window_lines, no_element_lines

    analysis = target if isinstance(target, Analysis) else Analysis(target)
    known = analysis.exposed.get(fold)
    if known is not None:  # RUN-65: what the mode worker found, this very function on its fork
        return known
    folded = analysis.fold if fold else None
    if folded is None and analysis.symmetric:  # RUN-21: read off the whole program, when it is built
        whole = analysis.whole_program
        if isinstance(whole, str):
            return ()
        analysis = whole
    program = analysis.program  # the skeleton's fold drops regions: the copies of no element are the program's
    cores = program.representatives if analysis.symmetric else program.cores
    return exposures(folded.program if folded is not None else program, views=analysis.view_ops,
                     empty=no_element_lines(cores), masked=masked_window_lines(cores))



_RACES = "race-free"


def check_modes(target: Program | Analysis, req: Request, deadline: float) -> dict[str, tuple[list[Verdict], float]]:
    """mode -> (verdicts, seconds) for every requested mode of one program.

    A program whose devices repeat is first checked on its fold (RUN-7):
    what is proved there is proved; the rest of each mode (a property not
    proved on the fold, or one whose fold proofs do not carry over, such as
    race-free) is checked on the program itself. On a large program the
    hardware mode then goes to a second process
    (`semcheck.checker.run.mode_worker`) while this one checks the others; if
    that process cannot start or fails, its modes are checked here. Every
    check reads the program's analysis (`target`, or one made of it); the
    worker starts with what it holds so far.
    """
    analysis = target if isinstance(target, Analysis) else Analysis(target)
    program = analysis.program
    from semcheck.checker.run.mode_worker import ModeWorker, forks, split_modes

    timeout_ms = int(req.timeout * 1000)
    t = time.monotonic()  # finding the fold counts towards the first mode's time
    fold = req.fold and analysis.fold is not None  # found here: it counts towards the first mode's time
    modes, apart, first, t_apart = req.modes, None, analysis, time.monotonic()
    if analysis.symmetric:
        # RUN-15: a Symmetric's hardware mode, fold and all, in a second process from here on; it starts
        # with the symmetry and fold found above, and its verdicts are check_program's, as in this one
        modes, there = split_modes(program.num_ops, req.modes)
        if there:
            try:
                apart = ModeWorker(analysis, there, req.properties, check=check_program, timeout_ms=timeout_ms, deadline=deadline,
                                   fold=req.fold)
            except OSError as e:
                print(f"semcheck: no mode worker ({e}); checking all modes in this process", file=sys.stderr)
                modes = req.modes
        analysis.modes = modes  # the interpreter's modes checked here share race-free's run (DR-7)
    on_fold: dict[str, dict[str, Verdict]] = {m: {} for m in modes}
    spent: dict[str, float] = {m: 0.0 for m in modes}
    for mode in modes:  # what a reduction does not decide is decided on the program (its devices' names)
        if fold:
            for p in req.properties:
                v = reduced(analysis, BY_ID[p].reductions, p, mode, lambda: _budget(timeout_ms, deadline),
                            fold=True, only=frozenset({"fold"}))
                if v is not None:
                    on_fold[mode][p] = v
            spent[mode] = time.monotonic() - t
            t = time.monotonic()
    missing = {m: tuple(p for p in req.properties if p not in on_fold[m]) for m in modes}
    for m in modes:  # RUN-22: what one period proves of a Symmetric needs no built program
        for p in missing[m]:
            v = reduced(analysis, BY_ID[p].reductions, p, m, lambda: _budget(timeout_ms, deadline),
                        fold=req.fold, only=_AFTER_FOLD)
            if v is not None:
                on_fold[m][p] = v
    missing = {m: tuple(p for p in req.properties if p not in on_fold[m]) for m in modes}
    if analysis.symmetric and any(missing.values()):
        # RUN-21: what the fold did not prove is decided on the materialised program, when it is built
        whole = analysis.whole_program
        if isinstance(whole, str):
            for m in modes:
                on_fold[m].update({p: Verdict(p, "unknown", reason=whole) for p in missing[m]})
            missing = {m: () for m in modes}
        else:
            analysis, program = whole, whole.program
    rest = tuple(m for m in modes if missing[m])
    wanted = tuple(p for p in req.properties if any(p in missing[m] for m in rest))
    here, there = split_modes(program.num_ops, rest)
    t0 = time.monotonic()
    worker = None
    if there and forks() and all(_RACES in missing[m] for m in there) and any(_RACES in missing[m] for m in here):
        listed_ahead(analysis)  # RUN-52: listed once, here, for the fork to start with
    from semcheck.checker.properties.timeline import naming

    # RUN-63: where nothing below replaces a verdict the worker gives (no ACC-9 settling, no BUF-14 step: hardware
    # only), the worker names its own verdicts, as this process would, while this one checks its modes
    names_there = getattr(first.program, "followed", None) is None and all(m == "hardware" for m in there)
    # RUN-65: a fork starts with what this process knows of the program, so it finds the program's exposures (the
    # report's divergence notes) as this process would; it does once its checks are done, off this one's path
    also = partial(exposures_of, fold=req.fold) if analysis is first and forks() else None
    if there:
        try:
            worker = ModeWorker(analysis, there, wanted, check=check_program, timeout_ms=timeout_ms, deadline=deadline,
                                finish=naming if names_there else None, also=also)
        except OSError as e:
            print(f"semcheck: no mode worker ({e}); checking all modes in this process", file=sys.stderr)
            here, there = rest, ()

    def locally(mode: str) -> tuple[list[Verdict], float]:
        t = time.monotonic()
        return check_program(program, mode, missing[mode], timeout_ms=timeout_ms, deadline=deadline,
                             fold=False, analysis=analysis, settled=False), time.monotonic() - t

    analysis.modes = here  # the interpreter's modes checked here share race-free's run (DR-7)
    full: dict[str, tuple[list[Verdict], float]] = {mode: locally(mode) for mode in here}
    named: set[int] = set()  # ids of the verdicts the worker named (RUN-63), kept alive in `full`
    if worker is not None:
        try:
            # the worker ran alongside since t0
            answer = worker.result()
            full.update({mode: (v, time.monotonic() - t0) for mode, v in answer.items()})
            if also is not None and worker.extra is not None:
                analysis.exposed[req.fold] = worker.extra
            if worker.finish is naming:
                named.update(id(v) for vs in answer.values() for v in vs)
        except RuntimeError as e:
            print(f"semcheck: {e}; checking {', '.join(there)} in this process", file=sys.stderr)
            full.update({mode: locally(mode) for mode in there})
    if apart is not None:
        t1 = time.monotonic()
        try:
            for mode, v in apart.result().items():
                full[mode], on_fold[mode], spent[mode] = (v, 0.0), {}, time.monotonic() - t_apart
        except RuntimeError as e:
            print(f"semcheck: {e}; checking {', '.join(apart.modes)} in this process", file=sys.stderr)
            for mode in apart.modes:
                full[mode] = (check_program(first.program, mode, req.properties, timeout_ms=timeout_ms,
                                            deadline=deadline, fold=req.fold, analysis=first), time.monotonic() - t1)
                on_fold[mode], spent[mode] = {}, 0.0
    done: dict[str, tuple[list[Verdict], float]] = {}
    shared: dict = {}  # RUN-54: what naming the verdicts of this program has named so far
    for mode in req.modes:
        checked, seconds = full.get(mode, ([], 0.0))
        by_prop = {**on_fold[mode], **{v.property: v for v in checked}}
        if getattr(first.program, "followed", None) is not None:  # ACC-9: only where the values it read are facts
            by_prop = _settle(first.program, mode, by_prop, timeout_ms, deadline, first)
        if mode != "hardware":  # BUF-14 for what a fold or one period proved too
            by_prop = {v.property: v for v in _past_scope_failure(list(by_prop.values()), _scope_facts(analysis, mode))}
        # every property's text in the kernel's words, whichever check wrote it (issue 26.4)
        done[mode] = ([by_prop[p] if id(by_prop[p]) in named else naming(by_prop[p], program, shared)
                       for p in req.properties], spent[mode] + seconds)
    return done



def kernel_label(name: str, kernels, k) -> str:
    """How reports name kernel `k` of a target: the target's name, NAME#i when it launches several."""
    return name if len(kernels) == 1 else f"{name}#{k.index}"


def kernel_results(name: str, kernels, req: Request, deadline: float,
                   seconds_lowering: float) -> Iterator[Result]:
    """The `Result` of every (kernel, mode) of one target's lowered kernels, each kernel's as soon
    as it is checked (the child sends them on at once: a timeout later loses none of them)."""
    races: dict[tuple[int, str], Verdict] = {}  # PRG-169: per (kernel, mode), race-free, for the calls after it
    for pos, k in enumerate(kernels):
        label = kernel_label(name, kernels, k)
        shared = getattr(k, "analysis", None)  # ERR-57: the one `after_failures` read the call's deadlock-free off
        analysis = shared if shared is not None and shared.program is k.program else Analysis(k.program)
        if getattr(k, "iterations", ()):  # PRG-183: each iteration of the loop around the call with its own values
            from semcheck.checker.programs.iterations import iteration_checks

            done = iteration_checks(k.iterations, req.modes, lambda p: both_readings(
                p, check_modes(Analysis(p), req, deadline), req, deadline, check_modes))
        else:
            def decide(p, r, analysis=analysis, program=k.program):  # ACC-27: each mode's lowering where the modes' values differ
                a = analysis if p is program else Analysis(p)
                done = both_readings(p, check_modes(a, r, deadline), r, deadline, check_modes)  # ACC-24
                if p is program and getattr(k, "relower", None) is not None:  # ACC-71: racy reads' values
                    from semcheck.checker.properties.racy_cases import by_cases

                    from semcheck.checker.properties.hardware_cases import by_hardware_cases

                    def case(b, rq):
                        return both_readings(b.program, check_modes(b, rq, deadline), rq, deadline, check_modes)

                    done = by_hardware_cases(k, a, by_cases(k, a, done, r, case), r, case, deadline)  # ACC-80
                return done

            done = split_modes(k, req, decide)
        if k.producers or any(pos in getattr(later, "producers", ()) for later in kernels):
            done = _computed(kernels, pos, analysis, done, races, req, deadline)
        exposed = exposures_of(analysis, req.fold)
        cid_at = k.call.collective_id_loc if k.call is not None else None  # REP-11: the line that picks the id
        for mode in req.modes:
            verdicts, seconds = done[mode]
            verdicts = [collective_id_site(v, cid_at) for v in verdicts]
            yield Result(
                target=label, devices=req.devices, dma_mode=mode, verdicts=verdicts,
                program={"ops": k.program.num_ops, "cores": k.program.topology.num_cores,
                         "collective_id": k.program.collective_id, "exposures": exposed},
                seconds={"trace_and_lower": round(seconds_lowering, 4), "check": round(seconds, 4)},
            )


def _computed(kernels, pos: int, analysis: Analysis, done: dict, races: dict, req: Request, deadline: float) -> dict:
    """PRG-169: a call checked alone whose scalar inputs an earlier call computed keeps its verdicts under a mode
    only where every such call is race-free there (its outputs are then every schedule's); a call checked alone
    stands for its own runs, so its race-free verdict rests on them too. Records this call's race-free verdict
    for the calls after it."""
    from semcheck.checker.properties.computed_inputs import RACE, settle, why_not_facts

    k = kernels[pos]
    out = {}
    for mode, (verdicts, seconds) in done.items():
        race = next((v for v in verdicts if v.property == RACE), None)
        if race is None:
            (race,) = check_program(k.program, mode, (RACE,), timeout_ms=int(req.timeout * 1000), deadline=deadline,
                                    fold=req.fold, analysis=analysis)
        reason = None
        own = mode_program(k, mode)  # PRG-217: the mode's own program; ACC-64: its cases share one launch
        if getattr(own[0][1] if isinstance(own, tuple) else own, "launch_failure", True) is None:
            for j in k.producers:
                got = races.get((j, mode))
                reason = why_not_facts(k.computed_by, mode, got if got is not None else Verdict(
                    RACE, "unknown", reason="the call was not checked"), whose=f"kernel call {j}", of="this call",
                    unwritten=k.unwritten)
                if reason is not None:
                    break
        verdicts = settle(verdicts, reason, keep_race=False)
        races[(pos, mode)] = race if reason is None else Verdict(RACE, "unknown", reason=reason)
        out[mode] = (verdicts, seconds)
    return out


def generated_results(t, req: Request, deadline: float, recorder) -> list[Result]:
    """A target with `inputs=`: up to `req.examples` generated inputs, the first violation shrunk
    (`checker/run/generated_inputs.py`); raises `GeneratedInputRaised` when the kernel raises on one."""
    from semcheck._dependencies import observe
    from semcheck.checker.frontend import lower_target
    from semcheck.checker.frontend.errors import Unsupported
    from semcheck.checker.frontend.programs import jax_picks_ids, takes_or_returns_semaphores
    from semcheck.checker.run.generated_inputs import aggregate, explore

    def lowered(value, text: str):
        with observe(recorder):
            return lower_target(t.with_input(value, text), req.devices, cores=req.cores)

    def verify_input(value, text: str) -> list[Result]:
        t0 = time.monotonic()
        try:
            kernels = lowered(value, text)
        except Unsupported as e:
            return unknown_results(req, [t.name], f"unsupported {str(e).removeprefix('unsupported ')}")
        if takes_or_returns_semaphores(kernels):  # specs/deciding/programs.md: calls that hand semaphores on are one program
            return unknown_results(req, [t.name], "kernel calls that take or return semaphores, with generated "
                                   "inputs: such programs are not composed yet (specs/deciding/programs.md)")
        if jax_picks_ids(kernels):  # PRG-125: the TPU's ids are the composed program's, not composed here
            return unknown_results(req, [t.name], "a kernel whose collective id jax picks, with generated inputs: "
                                   "such programs are not composed yet (specs/deciding/programs.md PRG-125)")
        from semcheck.checker.properties.unpredicted_windows import past_end_reason, unpredicted, unpredicted_reason

        unseen, past = unpredicted_reason(kernels), past_end_reason(kernels)  # ERR-32, ERR-62
        return [unpredicted(r, unseen, past) for r in kernel_results(t.name, kernels, req, deadline, time.monotonic() - t0)]

    def check_key(value, text: str, key) -> Verdict | None:
        name, mode, prop = key
        try:
            kernels = lowered(value, text)
        except Unsupported:
            return None
        for k in kernels:
            if kernel_label(t.name, kernels, k) == name:
                program = mode_program(k, mode)  # PRG-217: the mode's own program, or why it has none
                if isinstance(program, (str, tuple)):  # ACC-64: a verdict over cases is not one program's
                    return None
                (v,) = check_program(program, mode, (prop,), timeout_ms=int(req.timeout * 1000),
                                     deadline=deadline, fold=req.fold)
                return v
        return None

    found = explore(t.inputs, req.examples, verify_input, check_key, deadline)
    if found.raised is not None:
        raise found.raised
    return aggregate(found, req.modes, req.properties)


