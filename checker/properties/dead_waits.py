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
from semcheck.model.dma import amounts
from semcheck.model.errors import InterpreterView
from semcheck.model.ops import DmaMode, DmaStart, Loc, Program, SemRef, Signal, Wait
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


Key = tuple[int, str, int]


def _key(program: Program, core: int, device: int | None, sem: SemRef) -> Key:
    # the device the semaphore is on, and the allocation's label and element: labels are unique per allocation
    # instance and the interpreter frees no semaphore (AllocSem, D6); a device's cores are taken together, so
    # every core's signals count toward each of them (more signals, fewer waits found dead)
    return (program.topology.device_of(core) if device is None else device, sem.label, sem.index)


def signals_before(program: Program, mode: DmaMode) -> dict[Key, list[tuple[int, int, int]]]:
    """Per semaphore, what each operation of `program` can add to it in a run that has not failed, as (core,
    position, amount): a signal's increment, and a copy's receive (send) amount unless the copy raises before its
    write (read) half signals it (ACC-11: the read half raises before anything, the write half before its signal)."""
    adds: dict[Key, list[tuple[int, int, int]]] = {}
    for core, ops in enumerate(program.cores):
        for pc, op in enumerate(ops):
            t = type(op)
            if t is Signal:
                adds.setdefault(_key(program, core, op.device, op.sem), []).append((core, pc, max(op.inc, 0)))
            elif t is DmaStart:
                read_err, write_err = deferred_view_failures(op, mode)
                send, recv = amounts(op, mode)
                if read_err is None and write_err is None:
                    adds.setdefault(_key(program, core, op.device, op.dst_sem), []).append((core, pc, max(recv, 0)))
                if op.src_sem is not None and read_err is None:
                    adds.setdefault(_key(program, core, None, op.src_sem), []).append((core, pc, max(send, 0)))
    return adds


def _dead(program: Program, adds: dict, core: int, pc: int, op: Wait, mode: DmaMode) -> DmaStart | bool:
    """Whether the wait at (`core`, `pc`) asks more than every signal that can come before it ever adds: every one
    of another core, and its own core's before `pc` (a core runs in program order), less the copies queued under a
    failing task (ERR-33, `lifo.buried`). True (ACC-39) or the failing copy whose task it runs first (ERR-33) when
    it is dead, else False."""
    reach = sum(a for c, p, a in adds.get(_key(program, core, None, op.sem), ()) if c != core or p < pc)
    if shortfall(reach, op.value) > 0:  # SEM-5: even every such signal leaves it short
        return True
    top, buried = lifo.buried(program, core, pc, op, mode)
    return top if top is not None and shortfall(reach - buried, op.value) > 0 else False


def held_at_dead_waits(program: Program, clean: Program, mode: DmaMode) -> Held | None:
    """`clean` (the program with its views made indexable, same operations at the same positions) held before each
    core's first wait that asks more than its semaphore can get in a run that has not failed (`_dead`); None
    when no core has one (or outside `on_wait`, where a copy raises in its start, or not at all)."""
    if mode != "on_wait":
        return None
    adds = signals_before(program, mode)
    holds: dict[int, int] = {}
    first: Wait | None = None
    runs_first: DmaStart | None = None
    for core, ops in enumerate(program.cores):
        for pc, op in enumerate(ops):
            dead = type(op) is Wait and _dead(program, adds, core, pc, op, mode)
            if dead is not False:
                holds[core] = pc
                if first is None:
                    first, runs_first = op, (dead if type(dead) is DmaStart else None)
                break
    if first is None:
        return None
    # the waits a run can begin before it fails: those before the holds, and the dead waits themselves, which
    # pop the tasks queued on their semaphore (a copy that does not raise runs there) before they block or raise
    reached = truncate(clean, {c: pos + 1 for c, pos in holds.items()})
    return Held(_unrun_halves_apart(truncate(clean, holds), reached, program, mode), holds, first.sem, first.loc,
                runs_first)


def _unrun_halves_apart(held: Program, reached: Program, program: Program, mode: DmaMode) -> Program:
    """`held` with the sides of its copies that no run of `program` accesses before it fails moved onto buffers of
    their own: both sides of a copy whose task no wait of `reached` can pop (no wait on its receive semaphore's
    device and label, nor on its send semaphore's; under on_wait only a wait on a copy's semaphore runs its
    halves, jax's `Semaphore.wait` popping its tasks), and the side through a view the interpreter cannot index
    with what follows it (ERR-9 raises as the view is indexed, before the detector sees the access: the source's
    fails the whole copy, the destination's only the write). The start keeps its semaphores and its place (the
    race detector's clock ticks at a start, so dropping it could order accesses that are not ordered)."""
    topo = held.topology
    waited = {_key(reached, core, None, op.sem) for core, ops in enumerate(reached.cores) for op in ops
              if type(op) is Wait}
    cores = []
    for core, ops in enumerate(held.cores):
        moved = list(ops)
        for pc, op in enumerate(ops):
            if type(op) is not DmaStart or op.src_buf is None or op.dst_buf is None:
                continue  # an unrecorded copy stays as it is (and keeps the race pass's answer unknown)
            unrun = _key(held, core, op.device, op.dst_sem) not in waited and (
                op.src_sem is None or (topo.device_of(core), op.src_sem.label, op.src_sem.index) not in waited)
            read_err, write_err = deferred_view_failures(program.cores[core][pc], mode)
            src = unrun or isinstance(read_err, InterpreterView)
            dst = src or isinstance(write_err, InterpreterView)
            if dst:
                moved[pc] = dataclasses.replace(op, src_buf=f"unrun-copy-{core}-{pc}-src" if src else op.src_buf,
                                                dst_buf=f"unrun-copy-{core}-{pc}-dst")
        cores.append(tuple(moved))
    return dataclasses.replace(held, cores=tuple(cores))
