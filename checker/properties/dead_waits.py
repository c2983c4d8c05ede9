"""ACC-39: the waits no `on_wait` run completes before it fails, and the program held at them.

Under `on_wait` a copy through a view the interpreter cannot index raises in the waiter that runs its task
(ACC-11), before it signals its receive semaphore (and, when its source fails, before its send semaphore). A
semaphore's count in a run that has not failed is at most what the other signals add; a wait that asks more than
every such signal that can come before it never completes before the run fails, so each core of a run that has
not failed is at or before its first such wait. Every such run is a run of the program with the views made indexable (ACC-15) held there.
"""

from __future__ import annotations

import dataclasses

from semcheck.checker.properties import lifo
from semcheck.checker.static.least_stuck import truncate
from semcheck.checker.static.lowering import lower
from semcheck.checker.static.system import Lowered, WaitOp
from semcheck.model.errors import InterpreterView
from semcheck.model.ops import DmaMode, DmaStart, Loc, Program, SemRef, Wait
from semcheck.model.semaphore import shortfall
from semcheck.model.step import deferred_view_failures


@dataclasses.dataclass(frozen=True)
class Held:
    """`program` held before each core's first dead wait (`holds`: core -> position), and the first one's words
    (with the failing copy it runs first when it is dead by ERR-33)."""

    program: Program
    holds: dict[int, int]
    sem: SemRef
    loc: Loc
    runs_first: DmaStart | None = None  # ERR-33: the failing copy whose task the first dead wait pops first (LIFO)


Key = tuple  # (device, the lowering's semaphore key)


def _key(low: Lowered, counter: tuple) -> Key:
    # the semaphore a reference denotes on the core it lands on, as the lowering resolves it (SEM-1, SEM-3: by
    # the id the *issuing* core holds, so a remote signal through a label of its own can land on a semaphore
    # the target core names by another label); a device's cores are taken together, which only adds signals
    key, core = counter
    return (low.program.topology.device_of(core), key)


def signals_before(program: Program, low: Lowered, mode: DmaMode) -> dict[Key, list[tuple[int, int, int]]]:
    """Per semaphore, what each operation of `program` (lowered with its views made indexable: `low`) can add to
    it in a run that has not failed, as (core, position, amount): a signal's increment, and a copy's receive
    (send) amount unless the copy raises before its write (read) half signals it (ACC-11: the read half raises
    before anything, the write half before its signal). Each lands on the semaphore the lowering finds for it."""
    adds: dict[Key, list[tuple[int, int, int]]] = {}
    cores = program.cores
    for x in low.contributions:
        if x.kind != "signal":
            op = cores[x.owner][x.pos]
            read_err, write_err = deferred_view_failures(op, mode)
            if read_err is not None or (x.kind == "dma_write" and write_err is not None):
                continue
        adds.setdefault(_key(low, x.counter), []).append((x.owner, x.pos, max(x.amount, 0)))
    return adds


def _dead(low: Lowered, adds: dict, wait: WaitOp, program: Program, mode: DmaMode) -> DmaStart | bool:
    """Whether `wait` asks more than every signal that can come before it ever adds: every one of another core,
    and its own core's before it (a core runs in program order), less the copies queued under a failing task
    (ERR-33, `lifo.buried`). True (ACC-39) or the failing copy whose task it runs first (ERR-33) when it is dead,
    else False."""
    core, pc = wait.core, wait.pos
    reach = sum(a for c, p, a in adds.get(_key(low, wait.counter), ()) if c != core or p < pc)
    if shortfall(reach, wait.value) > 0:  # SEM-5: even every such signal leaves it short
        return True
    top, buried = lifo.buried(program, core, pc, program.cores[core][pc], mode)
    return top if top is not None and shortfall(reach - buried, wait.value) > 0 else False


def held_at_dead_waits(program: Program, clean: Program, mode: DmaMode) -> Held | None:
    """`clean` (the program with its views made indexable, same operations at the same positions) held before each
    core's first wait that asks more than its semaphore can get in a run that has not failed (`_dead`); None
    when no core has one, when the lowering of `clean` (whose semaphores are `program`'s) cannot say which
    semaphore each reference denotes, or outside `on_wait` (where a copy raises in its start, or not at all)."""
    if mode != "on_wait":
        return None
    low = lower(clean, mode)
    if not low.ok:
        return None  # e.g. ids that depend on the schedule: which wait a signal reaches is not known
    adds = signals_before(program, low, mode)
    holds: dict[int, int] = {}
    first: Wait | None = None
    runs_first: DmaStart | None = None
    for wait in sorted(low.waits.values(), key=lambda w: (w.core, w.pos)):
        if wait.core in holds:
            continue
        dead = _dead(low, adds, wait, program, mode)
        if dead is not False:
            holds[wait.core] = wait.pos
            if first is None:
                first = program.cores[wait.core][wait.pos]
                runs_first = dead if type(dead) is DmaStart else None
    if first is None:
        return None
    # the waits a run can begin before it fails: those before the holds, and the dead waits themselves, which
    # pop the tasks queued on their semaphore (a copy that does not raise runs there) before they block or raise
    reached = truncate(clean, {c: pos + 1 for c, pos in holds.items()})
    return Held(_unrun_halves_apart(truncate(clean, holds), reached, program, low, mode), holds, first.sem, first.loc,
                runs_first)


def _unrun_halves_apart(held: Program, reached: Program, program: Program, low: Lowered, mode: DmaMode) -> Program:
    """`held` with the sides of its copies that no run of `program` accesses before it fails moved onto buffers of
    their own: both sides of a copy whose task no wait of `reached` can pop (no wait on its receive semaphore's
    device and label, nor on its send semaphore's; under on_wait only a wait on a copy's semaphore runs its
    halves, jax's `Semaphore.wait` popping its tasks), and the side through a view the interpreter cannot index
    with what follows it (ERR-9 raises as the view is indexed, before the detector sees the access: the source's
    fails the whole copy, the destination's only the write). The start keeps its semaphores and its place (the
    race detector's clock ticks at a start, so dropping it could order accesses that are not ordered)."""
    waited = {_key(low, w.counter) for w in low.waits.values() if w.pos < len(reached.cores[w.core])}
    copies = {(d.core, d.pos): d for d in low.dmas}
    cores = []
    for core, ops in enumerate(held.cores):
        moved = list(ops)
        for pc, op in enumerate(ops):
            lowered = copies.get((core, pc))
            if type(op) is not DmaStart or op.src_buf is None or op.dst_buf is None or lowered is None:
                continue  # an unrecorded copy stays as it is (and keeps the race pass's answer unknown)
            unrun = _key(low, lowered.dst_counter) not in waited and (
                lowered.src_counter is None or _key(low, lowered.src_counter) not in waited)
            read_err, write_err = deferred_view_failures(program.cores[core][pc], mode)
            src = unrun or isinstance(read_err, InterpreterView)
            dst = src or isinstance(write_err, InterpreterView)
            if dst:
                moved[pc] = dataclasses.replace(op, src_buf=f"unrun-copy-{core}-{pc}-src" if src else op.src_buf,
                                                dst_buf=f"unrun-copy-{core}-{pc}-dst")
        cores.append(tuple(moved))
    return dataclasses.replace(held, cores=tuple(cores))
