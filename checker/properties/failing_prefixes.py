"""Properties of the runs that fail where only the model's runs follow, up to their failure (spec ERR-49 .. ERR-51).

A run of an interpreter mode may raise when a copy's half meets a `run_scoped` key the manager does not hold
(BUF-14) or when a wait finds no clock (RACE-1, ERR-21): where depends on the schedule, so no S' stands for these
runs. The relaxed program (`relaxed`) is the same program whose halves miss no key and whose waits take no clock:
every step of the program that does not fail is that program's step, and a failing step does no more than that
program's step does there, so every run of the program is, up to its failure, a run of the relaxed one (ERR-49).
`dma-bytes`, `race-free`, `exit-balance`, `invocation-confined`, `id-disjoint` and `id-int16` hold of a run up to
its failure when nothing before the failure breaks them (ERR-50: which events count), so a proof of the relaxed
program holds here; a
violation of it is one here when its witness replays here without a failure and shows it by its own steps
(`shown_before_failure`, ACC-15 (ii)); anything else decides nothing (ERR-51).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.id_uses import agreement_by_bounds
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.model.explore import barrier_used_before_fetched, racy_collective_id, unallocated_id
from semcheck.model.ops import Access, DmaMode, Program
from semcheck.model.run import REPLAY_LIMIT, run

# ERR-50: the properties a run up to its failure decides, read on the relaxed program's runs (the id properties
# of one state where RUN-60's walk of every state exceeds its budget: ERR-44 decides them first)
PROPS = ("dma-bytes", "race-free", "exit-balance", "invocation-confined", "id-disjoint", "id-int16")

# ACC-15: the properties whose witness ends at the step that violates them (the id checks cut the run there,
# exit-balance ends at the exit it judges): a witness that replays on the program without failing shows it there
AT_LAST_STEP = ("id-disjoint", "id-int16", "id-agreement", "exit-balance")

RELAXED = ("the program whose copies' halves miss no run_scoped key and whose waits take no clock (ERR-49)")
RENAMED = ("the program whose collective id is one no core allocates, so that no lookup meets both tables (ERR-49)")

# ERR-49: the properties whose relaxed program may rename the collective id (the id properties ask about the id itself)
RENAMES = ("dma-bytes", "race-free", "exit-balance", "invocation-confined")


def relaxed(program: Program, rename: bool = False) -> Program:
    """ERR-49: `program` with no run_scoped key ever missed (BUF-14) and no clock kept (RACE-1): the two failures
    only the model's runs follow are gone, and nothing else of a step changes. `rename`: and, where every core
    fetches the barrier semaphore before it uses it, the collective id one no core allocates (`renames`)."""
    out = dataclasses.replace(program, scoped_keys=False, detect_races=False)
    return dataclasses.replace(out, collective_id=unallocated_id(program)) if rename and renames(program) else out


def renames(program: Program) -> bool:
    """ERR-49: whether the collective id can be renamed so that no lookup meets both tables: some core allocates it
    (RUN-5), and every core fetches the barrier semaphore before its own first use of it."""
    return (isinstance(program, Program) and racy_collective_id(program)
            and not barrier_used_before_fetched(program))


def prefix_verdict(prop: str, program: Program, mode: DmaMode, said: str, recheck: Callable[..., Verdict],
                   timeout_ms: int) -> tuple[Verdict | None, str]:
    """ERR-50, ERR-51: `prop` on every run of `program` up to its failure, from its verdict on the relaxed program
    (`recheck`: `decide.decide`); (None, why) when that decides nothing here, `why` saying what it found."""
    if prop == "id-agreement":
        return agreement_on_prefixes(program, mode, said), ""
    if prop not in PROPS or not isinstance(program, Program):
        return None, ""
    rename = prop in RENAMES and renames(program)
    clean = relaxed(program, rename)
    v = recheck(prop, clean, mode, timeout_ms=timeout_ms, facts=Analysis(clean).mode(mode))
    name = RENAMED if rename else RELAXED
    why = f"{said}; every run is, up to its failure, a run of {name}"
    if v.verdict in ("proved", "vacuous"):
        head = f"on every run up to its failure ({why}, which {'satisfies' if v.verdict == 'proved' else 'vacuously satisfies'} it, ERR-50)"
        return dataclasses.replace(v, reason=f"{head}: {v.reason}" if v.reason else head,
                                   stats={**v.stats, "rule": "ERR-50"}), ""
    if v.verdict == "violated":
        shown = shown_before_failure(prop, program, mode, v.witness)
        if shown is not None:
            w = v.witness
            return dataclasses.replace(v, stats={**v.stats, "rule": "ERR-51"}, witness=dataclasses.replace(
                w, message=f"{w.message} (in a run that meets no failure first: {why}, ERR-51)", schedule=shown)), ""
        return None, (f"{name} violates it ({v.witness.message}), but whether a run gets there before it fails "
                      "is not decided (ERR-51)")
    return None, f"{name}: {v.reason} (ERR-51)" if v.verdict == "unknown" else ""


def agreement_on_prefixes(program: Program, mode: DmaMode, said: str) -> Verdict | None:
    """ERR-64: `id-agreement` in every state of every run of an interpreter mode, failing runs included (so at every
    run's end, PROP-3), from lower bounds on the relaxed program's progress (`id_uses.agreement_by_bounds`): each
    state of a run of `program` holds the allocations and positions of a state of the relaxed program (ERR-49: its
    failing step moves no position and makes no allocation). None when that shows nothing."""
    if mode == "hardware" or not isinstance(program, Program):
        return None
    rename = renames(program)
    clean = relaxed(program, rename)
    n = agreement_by_bounds(program, mode, lambda: Analysis(clean).mode(mode).lowering)
    if n is None:
        return None
    if n == 0:
        what = "no remote signal or copy names an allocated semaphore, so no run's end has a remote use to judge"
    else:
        what = (f"each of {n} remote semaphore uses names, once it has run, an allocation its target made before, "
                f"by the progress every run of {RENAMED if rename else RELAXED} must have made when it runs")
    return Verdict("id-agreement", "proved", reason=f"{said}; in every state of every run, those that fail "
                   f"included: {what} (ERR-64)", stats={"rule": "ERR-64", "checked": n})


def shown_before_failure(prop: str, program: Program, mode: DmaMode, w: Witness) -> tuple | None:
    """ACC-15: whether witness `w` of a program whose runs are, up to their failure, `program`'s shows its violation
    on a run of `program` that has not failed: its schedule replays here without a failure, and the violation is its
    last step (`AT_LAST_STEP`) or, for `race-free`, two core accesses both next in the state it reaches (either order
    runs, neither is a wait, so neither pops a task; a race of a copy's half is ERR-24's, `both_run`). The witness's
    schedule, or None when not shown."""
    from semcheck.model.errors import ModelBug

    if not w.schedule or len(w.schedule) > REPLAY_LIMIT:
        return None
    try:
        state = run(program, mode, w.schedule, finish=False)
    except ModelBug:
        return None
    if state.failures:
        return None
    if prop in AT_LAST_STEP:
        return tuple(w.schedule)
    if prop != "race-free" or len(w.blocked) != 2:
        return None
    if all(type(program.cores[c][pc]) is Access and state.pcs[c] == pc for c, pc, _ in w.blocked):
        return tuple(w.schedule)
    return None
