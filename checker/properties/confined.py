"""PROP-8 `invocation-confined`: a remote signal or copy lands while its target is inside the call that owns
the object (spec PRG-15, PRG-110 .. PRG-113).

Under `hardware` a device is inside an invocation from its first operation of the call to its last
(PRG-104: nothing synchronises devices at call boundaries). For every remote `Signal` and remote `DmaStart`
into an object that is not a barrier semaphore (PRG-105), two questions, each one maximal run (RUN-3):

* **early** (PRG-111): hold the target device's core 0 just before its first operation of the call that
  owns the object, and run every other core as far as it can. Every run in which the target has not
  entered is a prefix of a run of that held program, so the sender gets past the operation there iff
  some schedule lands it before the target entered;
* **late** (PRG-112): hold the sender just before the signal (for a copy: suppress the copy's write
  half, which a TPU may deliver at any time after the start, DMA-5) and run the rest as far as it can.
  If the target's core 0 gets past the last operation of the last call the object lives in, some
  schedule lands it after the target left.

The early release of a barrier by a neighbour's next call (PRG-16) and a collective id shared by kernels
with different partners (PRG-17, decided in both readings, PRG-116) show as landings before the target
entered. A single `pallas_call` is one invocation (PRG-113). Under `eager` / `on_wait` the interpreter's calls are
globally synchronised and its manager is per call (PRG-110): a run that does not fail lands nothing
outside a call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from semcheck.checker.properties.confined_scopes import Starts
from semcheck.checker.properties.confined_totals import Totals, complete
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.model.fast import fast_run
from semcheck.model.ops import BARRIER, AllocBuffer, AllocSem, DmaStart, ExitCheck, Program, Signal
from semcheck.model.step import target_core

PROPERTY = "invocation-confined"


@dataclasses.dataclass(frozen=True)
class Landing:
    """One remote signal or copy and the window of its target in which it may land."""

    core: int  # the sender's global core
    pc: int  # the operation's position on it
    target: int  # the target device's core 0 (it enters and leaves the calls for the device)
    entry: int  # the target core 0's position where the object's first call starts
    exit: int  # ... and where its last call is over (no operation of the window is left)
    owner: str  # how the window is named: "remote_start (call 0, f.py:12)" or "the kernel"
    last: str  # the last call of the window (the same as owner for a kernel-local object)
    carried: bool = False
    owner_loc: Any = None  # the pallas_call line of the window's first call (None: a single kernel)


def _describe_where(pc: int, calls: tuple[int, ...] | None, name: Any) -> str:
    """Where a device's core 0 at `pc` is, in words: inside / between / before / after calls."""
    if calls is None:
        return "before it entered the kernel" if pc <= 0 else "after it left the kernel"
    before = calls[pc - 1] if pc > 0 and pc - 1 < len(calls) else None
    after = calls[pc] if pc < len(calls) else None
    if before is not None and before == after:
        return f"inside {name(before)}"
    if before is None:
        return f"before its first call ({name(after)})" if after is not None else "before its first call"
    if after is None:
        return f"after its last call ({name(before)})"
    return f"between {name(before)} and {name(after)}"


class LandingColumns:
    """PRG-113's landings read off a complete lowering (PRG-147), as columns (RUN-32): each with the counter its
    operation lands on (`counters[counter[j]]`), a `Landing` built only for those `Totals.settled` leaves to be
    asked one by one."""

    def __init__(self, core: np.ndarray, pc: np.ndarray, target: np.ndarray, exit_at: np.ndarray,
                 counter: np.ndarray, counters: list) -> None:
        self.core, self.pc, self.target, self.exit, self.counter = core, pc, target, exit_at, counter
        self.entry = np.zeros(len(core), dtype=np.int64)  # the device enters with its first operation
        self.counters = counters

    def __len__(self) -> int:
        return len(self.core)

    def __getitem__(self, j: int) -> Landing:
        return Landing(int(self.core[j]), int(self.pc[j]), int(self.target[j]), 0, int(self.exit[j]),
                       "the kernel", "the kernel")

    def select(self, keep: np.ndarray) -> LandingColumns:
        return LandingColumns(self.core[keep], self.pc[keep], self.target[keep], self.exit[keep], self.counter[keep],
                              self.counters)


def single_landings(program: Program, mode: str = "hardware", lowering: Any = None) -> list[Landing]:
    """PRG-113: the remote signals and copies of one kernel call, each with the whole kernel as its window.

    With a complete lowering of the mode (`confined_totals.complete`) the targets are its contributions'
    (PRG-147), in the same order (`landing_columns`); otherwise each is resolved here (SIG-1)."""
    if lowering is not None and lowering.mode == mode and complete(lowering):
        columns = landing_columns(program, lowering)
        return [columns[j] for j in range(len(columns))]
    topo = program.topology
    out = []
    exits: dict[int, int] = {}  # a target's core 0 -> where it has left
    for g, ops in enumerate(program.cores):
        for i, op in enumerate(ops):
            if type(op) not in (Signal, DmaStart) or op.device is None:
                continue
            sem = op.sem if type(op) is Signal else op.dst_sem
            if sem.label == BARRIER:
                continue
            tg = target_core(program, mode, g, op.device, op.core, dma=type(op) is DmaStart)
            if not isinstance(tg, int):
                continue  # ERR-4, the program's own failure
            core0 = topo.global_core(topo.device_of(tg), 0)
            if core0 not in exits:
                exits[core0] = _exit_of(program, core0)
            out.append(Landing(g, i, core0, 0, exits[core0], "the kernel", "the kernel"))
    return out


def _exit_of(program: Program, core0: int) -> int:
    """The device enters with its first operation (its allocations) and has left at its exit check."""
    mine = program.cores[core0]
    return next((j for j, o in enumerate(mine) if type(o) is ExitCheck), len(mine))


def landing_columns(program: Program, lowering: Any) -> LandingColumns:
    """PRG-113 and PRG-147: the landings of a complete hardware lowering, from its contributions (a signal's, a
    copy's write half: every signal and copy, in program order, with the core it lands on)."""
    per = program.topology.cores_per_device
    cores = program.cores
    core, pc, target, counter = [], [], [], []
    ids: dict = {}  # counter -> its index in `counters`
    exits: dict[int, int] = {}
    for x in lowering.contributions:
        if x[4] == "dma_read":
            continue
        g, i, c = x[0], x[1], x[3]
        op = cores[g][i]
        if op.device is None or (op.sem if type(op) is Signal else op.dst_sem).label == BARRIER:
            continue
        core0 = c[1] - c[1] % per
        if core0 not in exits:
            exits[core0] = _exit_of(program, core0)
        core.append(g)
        pc.append(i)
        target.append(core0)
        counter.append(ids.setdefault(c, len(ids)))
    exit_at = [exits[t] for t in target]
    return LandingColumns(np.array(core, dtype=np.int64), np.array(pc, dtype=np.int64),
                          np.array(target, dtype=np.int64), np.array(exit_at, dtype=np.int64),
                          np.array(counter, dtype=np.int64), list(ids))


def composed_landings(composed: Any) -> list[Landing]:
    """PRG-111 / PRG-112: the remote signals and copies of a composed program, each with the window of its
    object on its target: the owning call for a kernel-local object, from the first to the last call that has
    it as an operand for a carried one (PRG-15).

    Linear in the program's operations (PRG-153): each call's position is looked up once, each label's
    window is found once, and a target's entry and exit positions are binary searches over the running
    maximum of its core 0's call positions (the first operation whose call is at or past a position is the
    first at which that running maximum is)."""
    from bisect import bisect_left, bisect_right

    from semcheck.checker.frontend.program_lower import program_label, call_prefix, call_renames, operand_labels

    program, calls, ir = composed.program, composed.calls, composed.ir
    topo = program.topology
    invs = ir.invocations
    at_order = {k: j for j, k in reversed(list(enumerate(composed.order)))}  # order.index, once per call
    renames: list[dict[str, str]] = []
    operands: dict[str, set[int]] = {}  # program label -> the calls that have it as an operand
    for inv in invs:
        r, _ = call_renames(inv, ir, renames)
        renames.append(r)
        for local in operand_labels(inv).values():
            operands.setdefault(program_label(local, call_prefix(inv), r), set()).add(inv.index)
    owner: dict[str, int] = {}
    for ops, ks in zip(program.cores, calls):
        for op, k in zip(ops, ks):
            if type(op) in (AllocSem, AllocBuffer):
                owner.setdefault(op.label, k)

    def pos(call: int) -> int:
        if call not in at_order:
            raise ValueError(f"{call!r} is not in list")  # as order.index says it
        return at_order[call]

    spans: dict[str, tuple[int, int, bool]] = {}  # carried labels: one window for every landing

    def window(label: str, k: int) -> tuple[int, int, bool]:
        if label in operands:
            if label not in spans:
                at = [pos(c) for c in operands[label]]
                spans[label] = (min(at), max(at), True)
            return spans[label]
        own = pos(owner.get(label, k))
        return own, own, False

    running: dict[int, list[int]] = {}  # a target's core 0 -> the running maximum of its call positions

    def reach(core0: int) -> list[int]:
        if core0 not in running:
            top, out = -1, []
            for c in calls[core0]:
                top = max(top, pos(c))
                out.append(top)
            running[core0] = out
        return running[core0]

    out = []
    for g, (ops, ks) in enumerate(zip(program.cores, calls)):
        for i, (op, k) in enumerate(zip(ops, ks)):
            if type(op) not in (Signal, DmaStart) or op.device is None:
                continue
            sem = op.sem if type(op) is Signal else op.dst_sem
            if sem.label == BARRIER or sem.label in composed.barrier_labels:
                continue
            tg = target_core(program, "hardware", g, op.device, op.core, dma=type(op) is DmaStart)
            if not isinstance(tg, int):
                continue  # ERR-4, the program's own failure
            labels = [sem.label] + ([op.dst_buf] if type(op) is DmaStart and op.dst_buf is not None else [])
            windows = [window(lb, k) for lb in labels]
            first, last = max(s[0] for s in windows), min(s[1] for s in windows)
            carried = any(s[2] for s in windows)
            core0 = topo.global_core(topo.device_of(tg), 0)
            top = reach(core0)
            entry = bisect_left(top, first)  # the first operation whose call is at or past `first`
            exit_at = bisect_right(top, last)  # ... past `last`
            first_call, last_call = invs[composed.order[first]], invs[composed.order[last]]
            out.append(Landing(g, i, core0, entry, exit_at, first_call.describe(), last_call.describe(), carried,
                               first_call.loc))
    return out


def composed_verdict(composed: Any) -> Verdict:
    """PROP-8 under hardware on a composed program of calls (PRG-111, PRG-112)."""
    from semcheck.checker.properties.launch import launch_verdict

    refused = launch_verdict(PROPERTY, composed.program, "hardware")  # LAUNCH-7: nothing of it runs on a TPU
    if refused is not None:
        return refused
    from semcheck.checker.properties.confined_scopes import combine, scope_verdict

    invs = composed.ir.invocations
    kernel = decide(composed.program, composed_landings(composed), where=lambda k: invs[k].describe(),
                    calls=composed.calls, reading=composed.reading)
    return combine(kernel, scope_verdict(composed.program, "hardware"))  # BUF-13 in every call's scopes


def decide(program: Program, landings: list[Landing] | LandingColumns, *, where: Any = None, calls: Any = None,
           reading: str = "", lowering: Any = None) -> Verdict:
    """PRG-111 / PRG-112 for each landing: violated with a replayable witness, proved, or unknown."""
    from semcheck.model.symmetry import Rotation

    topo = program.topology
    every = len(landings)
    # PRG-131: where rotating the devices by `period` maps the program onto itself, the landings of a
    # device's senders are the rotations of those of its image, and so are their two maximal runs (RUN-3)
    period = Rotation.observe(program).devices if topo.num_devices > 2 and every else topo.num_devices
    if period < topo.num_devices:
        if isinstance(landings, LandingColumns):
            landings = landings.select(landings.core // topo.cores_per_device < period)
        else:
            landings = [la for la in landings if topo.device_of(la.core) < period]
    early_runs: dict[tuple[int, int], Any] = {}
    totals = Totals(program, lowering)
    unsure: list[str] = []
    # RUN-32: a landing that totals rule out both ways does nothing below: only the others are asked
    settled = (totals.settled(landings.core, landings.pc, landings.target, landings.entry, landings.exit,
                              landings.counter, landings.counters) if isinstance(landings, LandingColumns) else None)
    for j in (range(len(landings)) if settled is None else np.flatnonzero(~settled).tolist()):
        la = landings[j]
        op = program.cores[la.core][la.pc]
        what = "signal" if type(op) is Signal else "copy"
        sender_dev, target_dev = topo.device_of(la.core), topo.device_of(la.target)
        key = (la.target, la.entry)
        early = totals.reached_after_entry(la)  # PRG-141: then it cannot land before the target entered
        if not early and key not in early_runs:
            early_runs[key] = fast_run(program, "hardware", hold={la.target: la.entry})
        run = early_runs.get(key)
        if early:
            pass
        elif run.kind in ("completed", "deadlock"):
            if run.state.pcs[la.core] > la.pc:
                return _violation(program, la, run, what, "early", where, calls, reading)
        elif run.state.pcs[la.core] > la.pc:
            unsure.append(f"the {what} at {op.loc} may reach device {target_dev} before it enters {la.owner} "
                          "(a run can fail first)")
        if totals.landed_before_exit(la):
            continue  # PRG-140: the target's waits hold it until this has landed
        late = (_held_copy(program, la) if type(op) is DmaStart
                else fast_run(program, "hardware", hold={la.core: la.pc}))
        if late.state.pcs[la.core] < la.pc:
            continue  # the sender never reaches the operation while it is held: no landing at all
        if late.state.pcs[la.target] >= la.exit:
            if late.kind in ("completed", "deadlock"):
                return _violation(program, la, late, what, "late", where, calls, reading)
            unsure.append(f"the {what} at {op.loc} on device {sender_dev} may reach device {target_dev} after it "
                          f"left {la.last} (a run can fail first)")
    if unsure:
        return Verdict(PROPERTY, "unknown", reason="; ".join(unsure[:2]))
    sym = (("; those of device 0 checked, the program repeating every device (PRG-131)" if period == 1 else
            f"; those of devices 0..{period - 1} checked, the program repeating every {period} devices (PRG-131)")
           if period < topo.num_devices else "")
    return Verdict(PROPERTY, "proved", reason=(
        f"every remote signal and copy ({every}) lands while its target is inside the call that owns "
        f"the object (PRG-111, PRG-112){sym}" if len(landings) else "no remote signal or copy into a "
        "kernel-local or carried object (barrier semaphores aside, PRG-105)"))


class _Held:
    """A run with one copy's write half held back, and the idents of the copies it started."""

    def __init__(self, out: Any, starts: dict[tuple[int, int], int]) -> None:
        self.kind, self.state, self.schedule, self.starts = out.kind, out.state, out.schedule, starts


def _held_copy(program: Program, la: Landing) -> _Held:
    """PRG-112 for a copy: its write half never happens, everything else runs as far as it can."""
    seen = Starts()
    out = fast_run(program, "hardware", suppress=frozenset({(la.core, la.pc, "write")}), observer=seen)
    return _Held(out, seen.starts)


def _violation(program: Program, la: Landing, run: Any, what: str, when: str, where: Any, calls: Any,
               reading: str) -> Verdict:
    """The witness: the run's schedule up to the landing (early), or the run then the landing (late)."""
    topo = program.topology
    op = program.cores[la.core][la.pc]
    # early: the held run itself is the witness (the sender's operation and, under hardware, a copy's
    # halves are in it, and the target never moved past its entry); late: the held run, then the landing
    sched = list(run.schedule)
    if when == "early":
        target_pc = la.entry
    else:
        if type(op) is DmaStart:
            ident = run.starts.get((la.core, la.pc)) if hasattr(run, "starts") else None
            if ident is None:
                return Verdict(PROPERTY, "unknown", reason=f"the copy at {op.loc} may land after its target left "
                               f"{la.last}; its witness could not be built")
            sched.append(("dma_write", ident))
        else:
            sched.append(("core", la.core))
        target_pc = run.state.pcs[la.target]
    describe = where or (lambda k: str(k))
    place = _describe_where(target_pc, calls[la.target] if calls is not None else None, describe)
    sender_dev, target_dev = topo.device_of(la.core), topo.device_of(la.target)
    if calls is not None:
        sender = describe(calls[la.core][la.pc])
    else:
        sender = "the kernel"
    obj = "carried object" if la.carried else "kernel-local object"
    timing = (f"before device {target_dev} enters {la.owner}" if when == "early"
              else f"after device {target_dev} left {la.last}")
    msg = (f"the {what} at {op.loc} in {sender} on device {sender_dev} can land in a {obj} of device "
           f"{target_dev} {timing}" + (f": device {target_dev} is {place} then" if calls is not None else "")
           + (f" (reading: {reading})" if reading else ""))
    locs = tuple(x for x in (op.loc, la.owner_loc) if x is not None)
    details = {"sender": sender, "sender_device": sender_dev, "target_device": target_dev, "target_at": place,
               "when": when, "object": obj, "owner": la.owner}
    if reading:
        details["reading"] = reading
    return Verdict(PROPERTY, "violated", witness=Witness(
        message=msg, schedule=tuple(sched), locs=locs, details=details,
        hint="make the target signal that it has entered the call (a barrier handshake) before the copy, and do "
             "not leave the call before every copy into it has landed (a second barrier, or waiting for it)"))


def faithful(composed: Any, schedule: Any) -> str | None:
    """PRG-128: None when, in the run `schedule` of the composed program, every remote signal and copy into
    a kernel-local or carried object lands while its target is inside the object's window; otherwise what
    lands outside (or why the run could not be followed)."""
    from semcheck.model.errors import ModelBug
    from semcheck.model.state import State
    from semcheck.model.step import step

    program = composed.program
    landings = {(la.core, la.pc): la for la in composed_landings(composed)}
    if not landings:
        return None

    def outside(la: Landing, state: State, what: str) -> str | None:
        at = state.pcs[la.target]
        if la.entry < at < la.exit or la.target == la.core:
            return None
        op = program.cores[la.core][la.pc]
        return f"the {what} at {op.loc} lands in device {program.topology.device_of(la.target)} outside {la.owner}"

    state = State.initial(program)
    in_flight: dict[int, Landing] = {}  # copy ident -> its landing, until its write half
    try:
        for actor in schedule:
            kind, x = actor
            la = None
            if kind == "core":
                la = landings.get((x, state.pcs[x]))
                if la is not None and type(program.cores[x][state.pcs[x]]) is Signal:
                    bad = outside(la, state, "signal")
                    if bad:
                        return bad
            elif kind == "dma_write" and x in in_flight:
                bad = outside(in_flight.pop(x), state, "copy")
                if bad:
                    return bad
            nxt = step(program, "hardware", state, actor)
            if la is not None and type(program.cores[x][state.pcs[x]]) is DmaStart and len(nxt.dmas) > len(state.dmas):
                in_flight[len(state.dmas)] = la
            state = nxt
    except ModelBug:
        return "its run could not be replayed"
    for la in in_flight.values():  # not landed yet: it must not be able to land after the target left
        bad = outside(la, state, "copy")
        if bad:
            return bad
    return None


def lag_two(composed: Any) -> str | None:
    """PRG-130 (PRG-7's condition): None when no device can enter iteration 3 of the window's loop while a
    device it communicates with (a signal or copy either way, in any call of the loop) has not left
    iteration 1, in any schedule; otherwise why not. For each such device its core 0 is held before its
    last operation of iteration 1 and the rest runs as far as it can: by RUN-3 every run in which it has not
    left is a prefix of that run."""
    ((_, _, first, per),) = composed.ir.windows
    program, calls = composed.program, composed.calls
    topo = program.topology
    body = set(range(first, first + 3 * per))
    one, three = set(range(first, first + per)), set(range(first + 2 * per, first + 3 * per))
    partners: dict[int, set[int]] = {}
    for g, (ops, ks) in enumerate(zip(program.cores, calls)):
        for op, k in zip(ops, ks):
            if k not in body or type(op) not in (Signal, DmaStart) or op.device is None:
                continue
            tg = target_core(program, "hardware", g, op.device, op.core, dma=type(op) is DmaStart)
            if not isinstance(tg, int):
                return f"the target of the operation at {op.loc} cannot be resolved"
            a, b = topo.device_of(g), topo.device_of(tg)
            if a != b:
                partners.setdefault(a, set()).add(b)
                partners.setdefault(b, set()).add(a)

    def core0(d: int) -> int:
        return topo.global_core(d, 0)

    for b in sorted(partners):
        mine = calls[core0(b)]
        last = max((j for j, k in enumerate(mine) if k in one), default=None)
        if last is None:
            continue
        run = fast_run(program, "hardware", hold={core0(b): last})
        if run.kind not in ("completed", "deadlock"):
            return f"a run can fail before device {b} leaves the loop's first iteration"
        for a in sorted(partners[b]):
            theirs = calls[core0(a)]
            enter = min((j for j, k in enumerate(theirs) if k in three), default=None)
            if enter is not None and run.state.pcs[core0(a)] > enter:
                return (f"device {a} can enter the loop's third iteration while device {b}, which it communicates "
                        "with, has not left the first: a device can run two iterations ahead of a partner")
    return None


def invocation_confined(program: Program, mode: str, *, timeout_ms: int = 30_000, facts: Any = None) -> Verdict:
    """PROP-8 on a single kernel call (PRG-113); a program of calls is decided by `program_results`.

    `facts`: the program's analysis under `mode`, whose lowering (the other checks' too) holds the targets and
    totals read here when it is complete (PRG-147)."""
    from semcheck.checker.properties.confined_scopes import combine, scope_verdict

    del timeout_ms
    if mode != "hardware":
        kernel = interpreter_verdict(program, mode)
    else:
        low = facts.lowering if facts is not None else None
        if low is not None and complete(low):
            kernel = decide(program, landing_columns(program, low), lowering=low)
        else:
            kernel = decide(program, single_landings(program, mode, low), lowering=low)
    # BUF-13: the same question at the grain of each run_scoped scope, in every mode
    return combine(kernel, facts.scopes if facts is not None else scope_verdict(program, mode))


def interpreter_verdict(program: Program, mode: str) -> Verdict:
    """PRG-110 (on PRG-10's manager per call): under the interpreter nothing lands outside a call, in a run
    that fails too."""
    del program, mode
    return Verdict(PROPERTY, "proved", reason=(
        "the interpreter starts every call on a fresh manager and keeps every device in a call until all devices "
        "reached its end, a device that failed too (PRG-110): nothing lands outside a call"))


__all__ = ["Landing", "LandingColumns", "PROPERTY", "composed_landings", "composed_verdict", "decide", "faithful", "interpreter_verdict",
           "invocation_confined", "lag_two", "landing_columns", "single_landings"]
