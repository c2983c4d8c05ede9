"""SEM-1 / BUF-1 statically: which allocations advance which core's id counters, in the order every run
makes them (by happens-before), and the ids each hands out, as the model hands them out.

Part of the lowering (`checker/static/lowering.py`, whose docstring says when ids are static)."""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any

from semcheck.model.buffer import advanced as buffer_advanced
from semcheck.model.buffer import handout as buffer_handout
from semcheck.model.ids import arange_int16
from semcheck.model.ops import AllocSem, Program
from semcheck.model.semaphore import advanced as sem_advanced
from semcheck.model.semaphore import handout as sem_handout
from semcheck.checker.static.system import AllocEvent, HappensBefore, SemAlloc


class _Unordered(Exception):
    pass



def alloc_events(program: Program, hb: HappensBefore, alloc_at: list[list[int]]) -> tuple[dict, dict]:
    """Which reached allocations advance which core's semaphore and buffer counters (SEM-1, BUF-1)."""
    topo = program.topology
    sem_by_core: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
    buf_by_core: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
    for c, ops in enumerate(program.cores):
        for i in alloc_at[c]:
            op = ops[i]
            if not hb.reached(c, i):
                continue
            scope = topo.cores_of_device(topo.device_of(c)) if op.scope == "device" else (c,)
            target = sem_by_core if isinstance(op, AllocSem) else buf_by_core
            for t in scope:
                target[t].append((c, i, op))
    return sem_by_core, buf_by_core


def _ordered(events: list, core: int, what: str, hb: HappensBefore, hw: bool, racy_counters: set,
             unsupported: list[str]) -> list | None:
    """The allocations that advance one core's counter, in the order every run makes them; None (and why,
    in `unsupported`) when happens-before does not order them."""
    issuers = {e[0] for e in events}
    if len(issuers) <= 1 or hw:  # on hardware no ids are handed out: any order will do
        if len(issuers) > 1:
            racy_counters.add((what, core))
        return sorted(events, key=lambda e: e[1])

    def cmp(x, y):
        if hb.before(x[0], x[1], y[0], y[1]):
            return -1
        if hb.before(y[0], y[1], x[0], x[1]):
            return 1
        raise _Unordered(x, y)

    try:
        out = sorted(events, key=functools.cmp_to_key(cmp))
        for x, y in zip(out, out[1:]):
            cmp(x, y)
        return out
    except _Unordered as u:
        (a, i, _), (b, j, _) = u.args
        racy_counters.add((what, core))
        unsupported.append(
            f"the {what} ids of core {core} depend on the schedule: core {a} op {i} and core {b} op {j} "
            "both allocate for it and are not ordered by barriers"
        )
        return None


def handed_out(by_core: dict, what: str, hb: HappensBefore, hw: bool, racy_counters: set,
                unsupported: list[str]) -> dict[tuple[int, int], AllocEvent]:
    """Each allocation's event with the base id it hands each core, as the model's SEM-1 / BUF-1 hand ids out
    along the order `_ordered` finds."""
    events_out: dict[tuple[int, int], AllocEvent] = {}
    for core, evs in by_core.items():
        ordered = _ordered(evs, core, what, hb, hw, racy_counters, unsupported)
        if ordered is None:
            continue
        nxt: dict[int, int] = {}  # this core's counter
        for a, i, op in ordered:
            ev = events_out.setdefault((a, i), AllocEvent(a, i, op, {}))
            if what == "semaphore":
                ranges = sem_handout(nxt, (core,), op.count)
                ev.bases[core] = ranges[core].start
                nxt.update(sem_advanced(ranges))
            else:
                ids = buffer_handout(nxt, (core,))
                ev.bases[core] = ids[core]
                nxt.update(buffer_advanced(ids))
    return events_out


def allocs_by_label(topo, sem_events: dict, hw: bool, unsupported: list[str]) -> dict[tuple[int, str], SemAlloc]:
    """Each core's semaphore allocation by label, with the ids it holds (IDS-1: None under hardware)."""
    sem_allocs: dict[tuple[int, str], SemAlloc] = {}
    for (a, i), ev in sem_events.items():
        op = ev.op
        scope = topo.cores_of_device(topo.device_of(a)) if op.scope == "device" else (a,)
        if hw:
            ids = None
        else:
            ids = arange_int16(ev.bases[a], op.count) if a in ev.bases else None
        for t in scope:
            if (t, op.label) in sem_allocs:
                unsupported.append(f"allocation label {op.label!r} is allocated twice for core {t}")
            sem_allocs[(t, op.label)] = SemAlloc(op.label, op.site, op.count, a, i, ev.bases.get(t), ids, op)
    return sem_allocs
