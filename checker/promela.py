"""Render a lowered `Program` as a Promela model, and ask SPIN whether it deadlocks.

This is an independent route to the `deadlock-free` verdict: the same
program, written down for a general-purpose model checker. The benchmark
(`bench/run.py`) uses it as the explicit-state baseline semcheck is measured
against, and `tests/test_promela.py` holds SPIN's verdicts against the
reference model's.

The rendering, for one DMA mode:

* every semaphore count `(key, core)` is one element of the global array
  `semcnt`; amounts on one count are divided by their greatest common divisor
  (counts only ever change by those amounts and are compared with them, so
  the verdict is unchanged and the state vector stays small);
* one `active proctype` per global core, its operations in order:
  a signal is `semcnt[i] = semcnt[i] + inc`, a wait is
  `atomic { semcnt[i] >= v -> semcnt[i] = semcnt[i] - v }` (SEM-5), the k-th barrier
  named n is an arrival counter `arrived[b]` that every participant increments
  and then waits to see complete (BAR-1);
* `eager` (DMA-2): a DMA start adds to both of its counts in one step;
  `hardware` (DMA-5): a DMA start only marks the DMA started, and one
  `dma_engine` process performs each started DMA's read half and then its
  write half, as two separate steps in any order with everything else; its
  loop carries an `end` label, so an idle engine is a valid end state;
  `on_wait` (DMA-3, DMA-4): a DMA start pushes its tasks on the task stacks of
  its counters, and a wait whose count is short pops the last one and runs it
  (each half at most once), until its count suffices or the stack is empty;
* allocations, reads, buffer operations and the exit check do not change
  what can block, so they are resolved statically and rendered as comments;
* a static failure (ERR-7: an out-of-bounds index, a bad target, a missing
  collective id, an int16 overflow, a view the interpreter cannot index, a
  lookup that finds the collective id in both tables) is `assert(false)` at
  its operation: SPIN reports an assertion violation when some run reaches it.

A core that finishes terminates; a core still blocked in a state with no
successor is what SPIN's invalid-end-state check reports: a deadlock.

Not rendered (`PromelaUnsupported`): what depends on the schedule beyond the
interleaving of these steps (a lookup of the collective id that another core's
allocation may or may not have reached, an `on_wait` copy through a view the
interpreter cannot index), and a failure that ends only its own device.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections import defaultdict

from semcheck.model.dma import amounts as dma_amounts
from semcheck.model.ids import FIRST_BUFFER_ID, FIRST_SEMAPHORE_ID, arange_int16, scalar_int16
from semcheck.model.ops import (
    BARRIER,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaMode,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    Access,
    GetBarrierSem,
    Op,
    Program,
    Read,
    SemRef,
    Signal,
    Wait,
)
from semcheck.model.step import target_core, view_failure
from semcheck.checker.spin import SpinResult, run_spin, spin_available  # noqa: F401 - the module's API

MODES: tuple[str, ...] = ("hardware", "eager", "on_wait")
MAX_PROCESSES = 255  # SPIN numbers processes with one byte


class PromelaUnsupported(Exception):
    """The program (or mode) is outside what the rendering describes faithfully."""


@dataclasses.dataclass(frozen=True)
class Rendering:
    """A Promela model of one program under one mode, and what SPIN needs to check it."""

    text: str
    mode: str
    counters: tuple[tuple, ...]  # semcnt[i] is the count of counters[i] = (key, core)
    scale: tuple[int, ...]  # semcnt[i] holds the real count divided by scale[i]
    barriers: tuple[tuple[str, int], ...]  # arrived[b] is the k-th barrier named n: (n, k)
    dmas: int
    processes: int
    max_steps: int  # an upper bound on the length of any run
    vector_bytes: int  # an upper bound on SPIN's state vector


# --- static resolution of semaphore references ----------------------------------------


def _refuse(core: int, pc: int, op: Op, why: str) -> PromelaUnsupported:
    return PromelaUnsupported(f"core {core} op {pc} ({type(op).__name__} at {op.loc}): {why}")


class _Fails(Exception):
    """The operation fails whatever the schedule (a static failure, ERR-7: it ends every run that reaches it)."""


class _Resolver:
    """Each core's semaphore references, resolved without running the program.

    Per-core id counters advance only through that core's own allocations and
    its device's (made by the device's first core before its other cores
    fork), so ids are the same in every run; cores are therefore processed in
    order. The barrier semaphore resolves to the fixed-id table, which is
    schedule-independent only when the collective id is no internal id.
    """

    def __init__(self, program: Program, mode: str) -> None:
        self.program = program
        self.mode = mode
        self.hw = mode == "hardware"
        topo = program.topology
        self.allocs: dict[tuple[int, str], tuple[str, int, tuple[int, ...]]] = {}
        next_id: dict[int, int] = {}
        next_buf: dict[int, int] = {}
        internal: set[int] = set()
        self.fail_at: dict[int, tuple[int, str]] = {}  # core -> its first static failure: (position, why)
        for core, ops in enumerate(program.cores):
            for pc, op in enumerate(ops):
                try:
                    self._allocate(core, pc, op, next_id, next_buf, internal)
                except _Fails as f:
                    self.fail(core, pc, op, str(f))
                    break  # the core's later operations never run
        cid = program.collective_id
        self.racy_cid = (not self.hw) and cid is not None and cid in internal

    def fail(self, core: int, pc: int, op: Op, why: str) -> None:
        """Record a static failure; one that ends only its own device (ERR-7) is not rendered."""
        if not op.propagates_failure and self.program.topology.cores_per_device == 1:
            raise _refuse(core, pc, op, f"{why}, which ends only its own device")
        self.fail_at[core] = (pc, why)

    def _allocate(self, core: int, pc: int, op: Op, next_id: dict, next_buf: dict, internal: set) -> None:
        topo = self.program.topology
        program = self.program
        if isinstance(op, AllocSem):
            cores = topo.cores_of_device(topo.device_of(core)) if op.scope == "device" else (core,)
            bases = {}
            for c in cores:
                bases[c] = next_id.get(c, FIRST_SEMAPHORE_ID)
                next_id[c] = bases[c] + op.count
                internal.update(range(bases[c], bases[c] + op.count))
            ids: tuple[int, ...] = ()
            if not self.hw:
                got = arange_int16(bases[core], op.count)
                if not isinstance(got, tuple):
                    raise _Fails(f"semaphore ids overflow int16 ({got.message})")
                ids = got
            for c in cores:
                self.allocs[(c, op.label)] = (op.site, op.count, ids)
        elif isinstance(op, AllocBuffer) and not self.hw:
            cores = topo.cores_of_device(topo.device_of(core)) if op.scope == "device" else (core,)
            for c in cores:
                i = next_buf.get(c, FIRST_BUFFER_ID)
                next_buf[c] = i + 1
                if c == core and not isinstance(scalar_int16(i), int):
                    raise _Fails(f"buffer id {i} overflows int16")
        elif isinstance(op, GetBarrierSem):
            if program.collective_id is None:
                raise _Fails("the kernel has no collective_id")
            if not self.hw and not isinstance(scalar_int16(program.collective_id), int):
                raise _Fails("the collective id overflows int16")

    def key(self, core: int, pc: int, op: Op, ref: SemRef) -> tuple:
        if ref.label == BARRIER:
            if self.program.collective_id is None:
                raise _Fails("the barrier semaphore needs a collective_id")
            if self.hw:
                return ("barrier",)
            fetched = any(o.fetches_barrier for o in self.program.cores[core][:pc])
            if self.racy_cid:
                self._collision(core, pc, op, fetched and self._holds_cid(core, pc))
            if not fetched:
                raise _refuse(core, pc, op, "the barrier semaphore is used before get_barrier_semaphore")
            return ("fixed", self.program.collective_id)
        got = self.allocs.get((core, ref.label))
        if got is None:
            raise _refuse(core, pc, op, f"no allocation {ref.label!r} on this core")
        site, count, ids = got
        if not 0 <= ref.index < count:
            raise _Fails(f"index {ref.index} out of bounds for {ref.label!r} ({count} semaphores)")
        if self.hw:
            return ("site", site, ref.index)
        sid = ids[ref.index]
        if self.program.collective_id is not None and sid == self.program.collective_id:
            self._collision(core, pc, op, any(o.fetches_barrier for o in self.program.cores[core][:pc]))
        return ("internal", sid)

    def _collision(self, core: int, pc: int, op: Op, certain: bool) -> None:
        """A lookup of the collective id while it is an internal id too: ERR-1 when the core itself has
        put it in both tables before (tables only grow, SEM-1, SEM-2); else the schedule decides."""
        if certain:
            raise _Fails(f"collective id {self.program.collective_id} is in both id tables (ERR-1)")
        raise _refuse(core, pc, op, f"collective id {self.program.collective_id} is also an internal "
                                    "semaphore id; which semaphore it names depends on the schedule")

    def _holds_cid(self, core: int, pc: int) -> bool:
        """Whether `core` holds an allocation of the collective id before `pc` (its own, or its device's)."""
        cid = self.program.collective_id
        own = {op.label for op in self.program.cores[core][:pc] if isinstance(op, AllocSem)}
        mine = {op.label for op in self.program.cores[core] if isinstance(op, AllocSem)}
        return any(c == core and cid in ids and (label in own or label not in mine)
                   for (c, label), (_, _, ids) in self.allocs.items())

    def target(self, core: int, pc: int, op: Op, device, local, *, dma: bool) -> int:
        t = target_core(self.program, self.mode, core, device, local, dma=dma)
        if not isinstance(t, int):
            raise _Fails(f"bad target: {t.message}")
        return t


# --- rendering ---------------------------------------------------------------------------


def _key_text(key: tuple) -> str:
    if key[0] == "site":
        return f"{key[1]}[{key[2]}]"
    if key[0] == "barrier":
        return "barrier"
    return f"{key[0]} id {key[1]}"


def _comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


def _loc(op: Op) -> str:
    loc = op.loc
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc.line else ""


def _int_type(lo: int, hi: int) -> tuple[str, int]:
    if 0 <= lo and hi <= 255:
        return "byte", 1
    if -(2**15) <= lo and hi < 2**15:
        return "short", 2
    if -(2**31) <= lo and hi < 2**31:
        return "int", 4
    raise PromelaUnsupported(f"semaphore counts can reach {hi}, beyond Promela's int")


def render(program: Program, mode: DmaMode = "hardware") -> Rendering:
    """The Promela model of `program` under `mode`: the abstract actions (`_Abstract`), the declarations,
    one process per core and, under hardware, the DMA engine."""
    if mode not in MODES:
        raise PromelaUnsupported(f"the Promela rendering covers the modes {', '.join(MODES)}, not {mode!r}")
    hw = mode == "hardware"
    procs = program.topology.num_cores + (1 if hw else 0)
    if procs > MAX_PROCESSES:
        raise PromelaUnsupported(f"{procs} processes: SPIN runs at most {MAX_PROCESSES}")
    ab = _Abstract(program, mode)
    scale, types = _scales(ab)
    out = _declarations(program, ab, scale, types)
    for core, acts in enumerate(ab.actions):
        out += _core_process(ab, scale, core, acts)
    if hw and ab.dma_list:
        out += _dma_engine(ab, scale)
    elif hw:
        procs -= 1

    # Every rendered op is one step, a barrier two (arrive, then leave), a hardware DMA two more.
    actions, dma_list, queued = ab.actions, ab.dma_list, ab.queued
    max_steps = sum(len(a) for a in actions) + sum(x[0] == "barrier" for a in actions for x in a)
    max_steps += 2 * len(dma_list) if hw else 0
    tasks = sum(map(len, queued.values()))  # on_wait: each popped task is one more step of a wait
    max_steps += 2 * tasks + sum(x[0] == "wait" for a in actions for x in a)
    vector = (len(ab.counter_ix) * types["count"][1] + len(ab.barrier_ix) * types["arrivals"][1]
              + (len(dma_list) if hw or queued else 0) + 8 * procs + 64)
    vector += tasks * types["task"][1] + len(queued)
    return Rendering(
        text="\n".join(out) + "\n",
        mode=mode,
        counters=tuple(ab.counter_ix),
        scale=tuple(scale),
        barriers=tuple(ab.barrier_ix),
        dmas=len(dma_list),
        processes=procs,
        max_steps=max_steps,
        vector_bytes=vector,
    )


class _Abstract:
    """The first pass: every operation resolved into an abstract action on counter / barrier indices,
    per core (`actions`), with what touches each counter."""

    def __init__(self, program: Program, mode: DmaMode) -> None:
        self.mode = mode
        self.res = _Resolver(program, mode)
        self.counter_ix: dict[tuple, int] = {}
        self.incs: dict[int, list[int]] = defaultdict(list)  # every increment of each counter
        self.waits: dict[int, list[int]] = defaultdict(list)  # every value waited for on each counter
        self.barrier_ix: dict[tuple[str, int], int] = {}
        self.barrier_size: dict[int, int] = {}
        # (src counter, dst counter, what the read and the write half add (DMA-6), core, text)
        self.dma_list: list[tuple[int | None, int, int, int, int, str]] = []
        self.queued: dict[int, list[int]] = defaultdict(list)  # on_wait: the tasks each counter's queue gets (DMA-3)
        self.actions: list[list[tuple]] = [self._core(core, ops) for core, ops in enumerate(program.cores)]

    def _core(self, core: int, ops: tuple[Op, ...]) -> list[tuple]:
        """One core's actions, up to its first failure (ERR-7: it ends the run)."""
        res, mode = self.res, self.mode
        seen: dict[str, int] = defaultdict(int)
        acts: list[tuple] = []
        for pc, op in enumerate(ops):
            t = type(op)
            try:
                if res.fail_at.get(core, (-1,))[0] == pc:
                    raise _Fails(res.fail_at[core][1])
                if (t is Access or t is DmaStart) and op.view_error is not None:
                    if mode == "on_wait" and t is DmaStart:
                        raise _refuse(core, pc, op, "an on_wait copy through a view the interpreter cannot index "
                                                    "raises when a waiter runs it, which depends on the schedule")
                    err = view_failure(op, mode)
                    if err is not None:
                        raise _Fails(err.message)
                self.action(core, pc, op, acts, seen)
            except _Fails as f:
                res.fail(core, pc, op, str(f))
                if any(getattr(o, "scope", None) == "device" for o in ops[pc + 1:]):
                    raise _refuse(core, pc, op, "a device-scope allocation follows a failure") from None
                acts.append(("fail", 0, 0, f"fails: {f}", op))
                break
        return acts

    def cix(self, key: tuple, core: int) -> int:
        if (key, core) not in self.counter_ix:
            self.counter_ix[(key, core)] = len(self.counter_ix)
        return self.counter_ix[(key, core)]

    def action(self, core: int, pc: int, op: Op, acts: list, seen: dict) -> None:
        """One operation as an abstract action (appended to `acts`); raises _Fails for a static failure."""
        res, mode, cix, incs = self.res, self.mode, self.cix, self.incs
        dma_list, queued, barrier_ix, barrier_size = self.dma_list, self.queued, self.barrier_ix, self.barrier_size
        t = type(op)
        if t is Signal:
            key = res.key(core, pc, op, op.sem)
            tgt = res.target(core, pc, op, op.device, op.core, dma=False)
            i = cix(key, tgt)
            incs[i].append(op.inc)
            acts.append(("signal", i, op.inc, f"signal {op.sem} +{op.inc} -> core {tgt}", op))
        elif t is Wait:
            key = res.key(core, pc, op, op.sem)
            i = cix(key, core)
            self.waits[i].append(op.value)
            acts.append(("wait", i, op.value, f"{op.kind} wait {op.sem} >= {op.value}", op))
        elif t is DmaStart:
            src = None
            if op.src_sem is not None:
                src = cix(res.key(core, pc, op, op.src_sem), core)
            dst_key = res.key(core, pc, op, op.dst_sem)
            dst_core = res.target(core, pc, op, op.device, op.core, dma=True)
            dst = cix(dst_key, dst_core)
            src_inc, dst_inc = dma_amounts(op, mode)
            if src is not None:
                incs[src].append(src_inc)
            incs[dst].append(dst_inc)
            text = f"dma {op.nbytes} B, send {op.src_sem} on core {core}, recv {op.dst_sem} on core {dst_core}"
            dma_list.append((src, dst, src_inc, dst_inc, core, text))
            if mode == "on_wait":  # a read task on the send counter, a read-then-write task on the receive one
                if src is not None:
                    queued[src].append(2 * (len(dma_list) - 1))
                queued[dst].append(2 * (len(dma_list) - 1) + 1)
            acts.append(("dma", len(dma_list) - 1, 0, text, op))
        elif t is Barrier:
            seen[op.name] += 1
            bk = (op.name, seen[op.name])
            if core not in op.participants:
                raise _refuse(core, pc, op, "a core waits at a barrier it does not take part in")
            if bk not in barrier_ix:
                barrier_ix[bk] = len(barrier_ix)
                barrier_size[barrier_ix[bk]] = len(op.participants)
            elif barrier_size[barrier_ix[bk]] != len(op.participants):
                raise _refuse(core, pc, op, f"barrier {op.name!r} #{bk[1]} has different participant sets")
            acts.append(("barrier", barrier_ix[bk], len(op.participants), f"barrier {op.name!r} #{bk[1]}", op))
        elif t is Read:
            res.key(core, pc, op, op.sem)
            acts.append(("note", 0, 0, f"read {op.sem} (no effect on blocking)", op))
        elif t in (AllocSem, AllocBuffer, FreeBuffer, Access, GetBarrierSem, ExitCheck):
            acts.append(("note", 0, 0, type(op).__name__, op))
        else:  # pragma: no cover - a new op kind must be rendered deliberately
            raise _refuse(core, pc, op, "operation not rendered")


def _scales(ab: _Abstract) -> tuple[list[int], dict[str, tuple[str, int]]]:
    """Each counter's unit (the gcd of everything that touches it), and the Promela type and bytes of a
    count, an arrival count and a queued task, each sized to what it holds."""
    ncnt, incs, waits = len(ab.counter_ix), ab.incs, ab.waits
    scale = [1] * ncnt
    lo, hi = 0, 0
    for i in range(ncnt):
        g = 0
        for v in incs[i] + waits[i]:
            g = math.gcd(g, abs(v))
        scale[i] = g or 1
        # a wait only subtracts what is there, so a count stays within [negative incs, positive incs]
        hi = max(hi, sum(v for v in incs[i] if v > 0) // scale[i])
        lo = min(lo, sum(v for v in incs[i] if v < 0) // scale[i])
    return scale, {"count": _int_type(lo, hi), "arrivals": _int_type(0, max(ab.barrier_size.values(), default=1)),
                   "task": _int_type(0, 2 * len(ab.dma_list) + 1)}


def _declarations(program: Program, ab: _Abstract, scale: list[int], types: dict[str, tuple[str, int]]) -> list[str]:
    """The header comments and the global arrays: counts, barrier arrivals, DMA phases, task stacks."""
    topo, mode, ncnt = program.topology, ab.mode, len(ab.counter_ix)
    hw = mode == "hardware"
    counter_ix, barrier_ix, barrier_size, dma_list, queued = (ab.counter_ix, ab.barrier_ix, ab.barrier_size,
                                                              ab.dma_list, ab.queued)
    out: list[str] = []
    w = out.append
    w(_comment(f"semcheck Promela rendering of {program.name}: {topo.num_devices} devices x "
               f"{topo.cores_per_device} cores, dma mode {mode}"))
    w(_comment("a deadlock is an invalid end state: some core blocked while nothing can move"))
    w("")
    w(f"{types['count'][0]} semcnt[{max(ncnt, 1)}];")
    for (key, core), i in counter_ix.items():
        w(_comment(f"semcnt[{i}]: {_key_text(key)} on core {core}" + (f", in units of {scale[i]}" if scale[i] != 1 else "")))
    if barrier_ix:
        w(f"{types['arrivals'][0]} arrived[{len(barrier_ix)}];")
        for (name, k), b in barrier_ix.items():
            w(_comment(f"arrived[{b}]: arrivals at barrier {name!r} #{k} ({barrier_size[b]} participants)"))
    if hw and dma_list:
        w(f"byte dmaphase[{len(dma_list)}];  " + _comment("0 not started, 1 started, 2 read half done, 3 complete"))
    if queued:
        w(f"byte dmaphase[{len(dma_list)}];  " + _comment("0 queued, 1 read half done, 2 complete"))
        for i, tasks in sorted(queued.items()):
            w(f"{types['task'][0]} queue{i}[{len(tasks)}]; byte queued{i};  "
              + _comment(f"semcnt[{i}]'s task stack (DMA-3): 2k reads DMA k, 2k+1 reads then writes it"))
    w("")
    return out


def _half(ab: _Abstract, scale: list[int], k: int, write: bool) -> str:
    """DMA-2's half of DMA k, at most once (the on_wait phases)."""
    src, dst, src_inc, dst_inc, _, _ = ab.dma_list[k]
    counter, inc, phase = (dst, dst_inc, 1) if write else (src, src_inc, 0)
    add = "" if counter is None else f"semcnt[{counter}] = semcnt[{counter}] + {inc // scale[counter]}; "
    return f"if :: dmaphase[{k}] == {phase} -> {add}dmaphase[{k}] = {phase + 1} :: else -> skip fi"


def _pop(ab: _Abstract, scale: list[int], a: int, v: int) -> str:
    """SEM-7 / DMA-4: a short wait on counter `a` runs the last task queued there."""
    cases = " ".join(f":: queue{a}[queued{a}] == {t} -> {_half(ab, scale, t // 2, False)}"
                     + (f"; {_half(ab, scale, t // 2, True)}" if t % 2 else "")
                     for t in sorted(set(ab.queued[a])))
    return (f"d_step {{ semcnt[{a}] < {v // scale[a]} && queued{a} > 0 -> queued{a} = queued{a} - 1; "
            f"if {cases} fi }}")


def _core_process(ab: _Abstract, scale: list[int], core: int, acts: list[tuple]) -> list[str]:
    """One core's process: each abstract action as one Promela step (one case per action kind)."""
    mode, dma_list, queued = ab.mode, ab.dma_list, ab.queued
    hw = mode == "hardware"

    def s(i: int, v: int) -> int:
        return v // scale[i]

    out: list[str] = []
    w = out.append
    w(f"active proctype core{core}() {{")
    body = 0
    for kind, a, b, text, op in acts:
        where = _loc(op)
        note = _comment(text + (f" @ {where}" if where else ""))
        if kind == "signal":
            w(f"  semcnt[{a}] = semcnt[{a}] + {s(a, b)}; {note}")
        elif kind == "wait" and a in queued:  # SEM-5 first, else a queued task, else blocked
            w(f"  do :: atomic {{ semcnt[{a}] >= {s(a, b)} -> semcnt[{a}] = semcnt[{a}] - {s(a, b)} }}; break")
            w(f"     :: {_pop(ab, scale, a, b)} od; skip; {note}")  # break lands on skip, never inside a d_step
        elif kind == "wait":
            w(f"  atomic {{ semcnt[{a}] >= {s(a, b)} -> semcnt[{a}] = semcnt[{a}] - {s(a, b)} }}; {note}")
        elif kind == "dma":
            src, dst, src_inc, dst_inc, _, _ = dma_list[a]
            if hw:
                w(f"  dmaphase[{a}] = 1; {note}")
            elif mode == "on_wait":
                pushes = [f"queue{c}[queued{c}] = {t}; queued{c} = queued{c} + 1"
                          for c, t in (((src, 2 * a),) if src is not None else ()) + ((dst, 2 * a + 1),)]
                w(f"  d_step {{ {'; '.join(pushes)} }}; {note}")
            else:
                parts = ([f"semcnt[{src}] = semcnt[{src}] + {s(src, src_inc)}"] if src is not None else [])
                parts.append(f"semcnt[{dst}] = semcnt[{dst}] + {s(dst, dst_inc)}")
                w(f"  d_step {{ {'; '.join(parts)} }}; {note}")
        elif kind == "barrier":
            w(f"  atomic {{ arrived[{a}] = arrived[{a}] + 1; arrived[{a}] == {b} }}; {note}")
        elif kind == "fail":  # ERR-7: the failure ends the run; SPIN reports the assertion
            w(f"  assert(false); {note}")
        else:
            w(f"  {note}")
            continue
        body += 1
    if body == 0:
        w("  skip")
    w("}")
    w("")
    return out


def _dma_engine(ab: _Abstract, scale: list[int]) -> list[str]:
    """Under hardware, the process that lands each started DMA's two halves (DMA-2), in any order."""
    out = ["active proctype dma_engine() {", "end:", "  do"]
    w = out.append
    for k, (src, dst, src_inc, dst_inc, core, text) in enumerate(ab.dma_list):
        w(f"  {_comment(f'dmaphase[{k}] from core {core}: {text}')}")
        read = f"semcnt[{src}] = semcnt[{src}] + {src_inc // scale[src]}; " if src is not None else ""
        w(f"  :: d_step {{ dmaphase[{k}] == 1 -> {read}dmaphase[{k}] = 2 }}")
        w(f"  :: d_step {{ dmaphase[{k}] == 2 -> semcnt[{dst}] = semcnt[{dst}] + {dst_inc // scale[dst]}; "
          f"dmaphase[{k}] = 3 }}")
    w("  od")
    w("}")
    return out


# --- `semcheck export --promela` ---------------------------------------------------------------


def export_main(argv: list[str] | None = None) -> int:
    """`semcheck export --promela KERNEL.py[::target] --devices N [--dma-mode M] [-o FILE] [--spin]`.

    Lowers the kernel at one device count and writes its Promela model (one
    file per kernel launch; with several, `-o x.pml` becomes `x.0.pml`,
    `x.1.pml`, ...). `--spin` also runs SPIN on it and prints the verdict.
    Exit codes: 0 written (and, with --spin, deadlock-free), 1 SPIN found a
    deadlock or a failing run, 2 usage or input error, 3 SPIN could not decide.
    """
    from semcheck.checker.report.escape import line  # kernel names and exception text (REP-1)

    ap = argparse.ArgumentParser(prog="semcheck export", description="Export a kernel's lowered program.")
    ap.add_argument("file", help="kernel.py or kernel.py::target")
    ap.add_argument("--promela", action="store_true", help="write Promela for SPIN (the only format so far)")
    ap.add_argument("--devices", type=int, default=2, help="device count (default 2)")
    ap.add_argument("--cores", type=int, default=None, help="cores per device (default: the kernel's)")
    ap.add_argument("--dma-mode", default="hardware", choices=MODES, help="semantics to render (default hardware)")
    ap.add_argument("--entry", default=None, help="name of a build-like function")
    ap.add_argument("--output", "-o", default=None, help="write here instead of stdout")
    ap.add_argument("--spin", action="store_true", help="also run SPIN and print its verdict on stderr")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if not args.promela:
        print("semcheck export: choose a format (--promela)", file=sys.stderr)
        return 2
    if args.devices < 1:
        print("semcheck export: --devices must be at least 1", file=sys.stderr)
        return 2
    path, _, target = args.file.partition("::")
    if not os.path.isfile(path):
        print(line(f"semcheck export: no such kernel file: {path}"), file=sys.stderr)
        return 2
    from semcheck.checker.frontend import FrontendError, provision_devices

    try:
        provision_devices(args.devices)
        from semcheck.checker.frontend import load

        kernels = load(path, target=target or None, entry=args.entry, devices=args.devices, cores=args.cores)
    except FrontendError as e:
        print(line(f"semcheck export: {e}"), file=sys.stderr)
        return 2
    from semcheck.checker.frontend.programs import takes_or_returns_semaphores

    if takes_or_returns_semaphores(kernels):  # specs/deciding/programs.md: such calls are one program, not each alone
        print("semcheck export: the kernel calls take or return semaphores, so they are one program "
              "(specs/deciding/programs.md), and export renders one call at a time", file=sys.stderr)
        return 2
    if args.spin and not spin_available():
        print("semcheck export: --spin needs `spin` and a C compiler on PATH", file=sys.stderr)
        return 2
    status = 0
    for k in kernels:
        try:
            r = render(k.program, args.dma_mode)
        except PromelaUnsupported as e:
            print(line(f"semcheck export: {k.target} #{k.index}: cannot render: {e}"), file=sys.stderr)
            return 2
        if args.output:
            dest = args.output
            if len(kernels) > 1:
                stem, ext = os.path.splitext(args.output)
                dest = f"{stem}.{k.index}{ext or '.pml'}"
            with open(dest, "w", encoding="utf-8") as f:
                f.write(r.text)
        else:
            sys.stdout.write(r.text)
        if args.spin:
            sr = run_spin(r)
            extra = f" ({sr.reason})" if sr.reason else ""
            print(line(f"spin: {k.target} #{k.index} at {args.devices} devices, {args.dma_mode}: {sr.verdict}{extra}"
                       f", {sr.states_stored} states"), file=sys.stderr)
            code = {"deadlock-free": 0, "deadlock": 1, "error": 1}.get(sr.verdict, 3)
            status = 1 if 1 in (status, code) else max(status, code)
    return status


if __name__ == "__main__":
    sys.exit(export_main())
