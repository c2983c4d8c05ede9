"""PRG-180: the interpreter's hang on a program whose devices run different kernel calls (PRG-145, PRG-163).

jax's interpreter ends every interpreted call with a wait on its clean-up barrier and, for a call without a
collective id of its own, starts the kernel with a wait on its start barrier; both are `threading.Barrier`s of
every device (PRG-179 in specs/semantics/calls.md). A trip takes one wait of each device, so a run in which every
device finishes has every device run as many calls, and at each position in those sequences either every
device's call waits at the start barrier or none does. A program whose per-device call sequences break either
count has no run that completes: `deadlock-free` is violated (PRG-180). The calls every device runs before the
first one only some devices run keep their own verdicts; a kernel that never gets past its start barrier is
vacuous (PRG-181); the rest stays unknown (PRG-145).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.model.ops import BARRIER, INTERPRETER_MODES, AllocSem, DmaStart, Signal


@dataclasses.dataclass(frozen=True)
class Hang:
    """Why no run of the program completes in the interpreter: the message and the kernel lines it names."""

    message: str
    locs: tuple[Any, ...]


def _devices(devs: list[int]) -> str:
    return f"device{'s' if len(devs) > 1 else ''} {', '.join(map(str, devs))}"


def _starts(inv: Any) -> bool:
    """Whether the interpreter waits at the start barrier of this call: it has no collective id of its own."""
    return inv.call.collective_id is None


def no_run_completes(ir: Any, num_devices: int) -> Hang | None:
    """PRG-180 (PRG-179's counts): why no interpreter run of `ir` on `num_devices` devices completes, or None
    where the counts match (then the calls of different devices may meet at the barriers and the run may
    complete: PRG-145 leaves it unknown). Each device runs its calls in the traced order (`Invocation.devices`)."""
    if num_devices < 2 or ir is None or getattr(ir, "unknown", None) is not None:
        return None
    invs = ir.invocations
    if any((inv.call.mesh.num_devices, inv.call.mesh.physical_devices) != (num_devices, num_devices) for inv in invs):
        return None  # a call on part of the devices: whose barrier it waits at is not argued here
    seqs = [[inv for inv in invs if inv.devices is None or d in inv.devices] for d in range(num_devices)]
    split = next((inv for inv in invs if inv.devices is not None), None)
    if split is None:
        return None
    first = f"the first call only some devices run is {split.describe()}"
    counts = sorted({len(s) for s in seqs})
    if len(counts) > 1:
        most = [d for d, s in enumerate(seqs) if len(s) == counts[-1]]
        fewer = [d for d, s in enumerate(seqs) if len(s) < counts[-1]]
        last = seqs[most[0]][-1]
        msg = (f"in the interpreter no run completes: {_devices(most)} run{'s' if len(most) == 1 else ''} "
               f"{counts[-1]} kernel call{'s' if counts[-1] > 1 else ''} and {_devices(fewer)} fewer "
               f"({', '.join(str(len(seqs[d])) for d in fewer)}); "
               "every interpreted call ends with a wait at the clean-up barrier (`_clean_up_shared_memory`), a "
               "`threading.Barrier` of every device each trip of which takes one wait of each device, so the wait "
               f"that ends {last.describe()} on {_devices(most)} never trips; {first} (PRG-180)")
        return Hang(msg, tuple(dict.fromkeys((split.loc, last.loc))))
    for j in range(counts[0]):
        calls = [s[j] for s in seqs]
        waiting = [d for d, inv in enumerate(calls) if _starts(inv)]
        if waiting and len(waiting) < num_devices:
            call = calls[waiting[0]]
            others = [d for d in range(num_devices) if d not in waiting]
            msg = (f"in the interpreter no run completes: the call {j + 1} of {_devices(waiting)}, "
                   f"{call.describe()}, has no collective id, so it starts with a wait at the interpreter's start "
                   "barrier (`_barrier`), a `threading.Barrier` of every device each trip of which takes one wait of "
                   f"each device; the call {j + 1} of {_devices(others)} "
                   f"({calls[others[0]].describe()}) has one and waits at no start barrier, and every device's calls "
                   f"meet call by call at the clean-up barrier, so that start barrier never trips; {first} (PRG-180)")
            return Hang(msg, tuple(dict.fromkeys((call.loc, split.loc))))
    return None


def _first_split(ir: Any) -> int | None:
    return next((i for i, inv in enumerate(ir.invocations) if inv.devices is not None), None)


def runs_before_the_split(ir: Any, kernel: Any) -> bool:
    """PRG-180: whether every invocation of `kernel` (a `LoweredKernel`, matched by name and line, `_is`) comes
    before the first call only some devices run. Every device runs those calls, in the same order, each after
    the clean-up barrier of the one before (fresh memory, every device out of it): they run as they do alone,
    so their own verdicts are the program's up to there."""
    if ir is None or kernel is None or getattr(ir, "unknown", None) is not None:
        return False
    split = _first_split(ir)
    mine = [i for i, inv in enumerate(ir.invocations) if _is(inv, kernel)]
    return bool(mine) and split is not None and max(mine) < split


def _is(inv: Any, kernel: Any) -> bool:
    """Whether invocation `inv` may be a run of `kernel` (a `LoweredKernel`): the same name and `pallas_call`
    line. Not the index: the walk numbers the calls it reaches, the kernel list every call of the traced program
    (both branches of a cond), so the numbers can differ; two kernels of one name and line are then both taken
    for each one's invocations, which only ever keeps a claim from being made."""
    return (inv.call.name, inv.call.loc) == (kernel.name, kernel.loc)


def never_starts(ir: Any, num_devices: int, kernel: Any) -> str | None:
    """PRG-181: why no kernel body of `kernel` runs in any interpreter run, or None. At the first call only some
    devices run (position K of every device's sequence), let S be the devices whose K-th call has no collective id.
    When S is not empty and some device is not in S (it has no K-th call, or one with a collective id), the start
    barrier the devices of S wait at never trips (PRG-179): they never run their K-th kernel nor any later call
    (another device's failure only aborts the barrier, and they raise there). A device not in S runs its K-th call,
    and no call after it where some device has no K-th call (the K-th clean-up barrier then never trips); where
    every device has one, a failure could trip it, so those later calls are not claimed."""
    if ir is None or kernel is None or getattr(ir, "unknown", None) is not None:
        return None
    split = _first_split(ir)
    if split is None:
        return None
    seqs = [[i for i, inv in enumerate(ir.invocations) if inv.devices is None or d in inv.devices]
            for d in range(num_devices)]
    waiting = [d for d, s in enumerate(seqs) if len(s) > split and _starts(ir.invocations[s[split]])]
    if not waiting or len(waiting) == num_devices:
        return None
    finished = any(len(s) <= split for s in seqs)
    mine = [(d, j) for d, s in enumerate(seqs) for j, i in enumerate(s) if _is(ir.invocations[i], kernel)]
    if not mine or any(j < split or (d not in waiting and (j == split or not finished)) for d, j in mine):
        return None
    call = ir.invocations[seqs[waiting[0]][split]]
    others = [d for d in range(num_devices) if d not in waiting]
    return (f"no run reaches the kernel: in the interpreter {_devices(waiting)} wait{'s' if len(waiting) == 1 else ''} "
            f"at the start barrier of {call.describe()} (it has no collective id) before any of its kernel runs, "
            f"and {_devices(others)} never wait{'s' if len(others) == 1 else ''} at it (no call there, or one with a "
            "collective id), so it never trips and no later call of those devices runs (PRG-179, PRG-181)")


def hung(verdicts: list[Verdict], hang: Hang, why: str, idle: str | None = None) -> list[Verdict]:
    """PRG-180: `deadlock-free` violated by the hang; every other property unknown with `why` (what the calls of
    different devices do in one shared memory before the hang is not modelled, PRG-145), or vacuous where no
    kernel body of the call runs (`idle`, PRG-181: nothing reaches what the property is about, REP-20)."""
    out = []
    for v in verdicts:
        if v.property == "deadlock-free":
            out.append(Verdict(v.property, "violated", witness=Witness(hang.message, locs=hang.locs)))
        elif idle is not None:
            out.append(Verdict(v.property, "vacuous", reason=idle))
        else:
            out.append(Verdict(v.property, "unknown",
                               reason=f"{why}; and no run completes (deadlock-free is violated, PRG-180)"))
    return out


@dataclasses.dataclass(frozen=True)
class Reach:
    """PRG-211: the calls whose kernel body some interpreter run reaches, where every run hangs at the position
    `split` of the devices' call sequences (the first call only some devices run): the calls before it, and the
    `split`-th calls of the devices that wait at no start barrier there (`at_split`), run while the devices of
    `waiting` wait at that start barrier and those of `finished` have no more calls."""

    ran: frozenset[int]  # invocation indices
    at_split: frozenset[int]
    held: frozenset[int]  # the K-th calls of the waiting devices, whose kernels never start (PRG-181)
    running: tuple[int, ...]
    waiting: tuple[int, ...]
    finished: tuple[int, ...]
    split: int


def reached(ir: Any, num_devices: int) -> Reach | None:
    """PRG-211 (PRG-179's barriers as the waits they count): at the first position K only some devices' calls
    share, a device with no K-th call waits at no barrier again, and one whose K-th call has no collective id waits
    at that manager's start barrier, which needs a wait of every device. Where some device has no K-th call, or the
    K-th calls neither all nor none wait there, the devices that wait never run their K-th kernel (an abort of the
    barrier by a failure makes them raise) and the K-th clean-up barrier needs them (or the finished devices): so
    no call after K runs on any device, and the calls that run are those before K and the K-th calls of the other
    devices. Where every device has a K-th call and one that runs it has a later call, a failure could trip the
    clean-up barrier and let that device go on: None (not decided); None too where the K-th calls meet at the
    barriers (all or none wait at the start barrier: PRG-145's unknown)."""
    if num_devices < 2 or ir is None or getattr(ir, "unknown", None) is not None:
        return None
    invs = ir.invocations
    if any((inv.call.mesh.num_devices, inv.call.mesh.physical_devices) != (num_devices, num_devices) for inv in invs):
        return None
    split = _first_split(ir)
    if split is None:
        return None
    seqs = [[i for i, inv in enumerate(invs) if inv.devices is None or d in inv.devices] for d in range(num_devices)]
    if any(s[:split] != list(range(split)) for s in seqs):
        return None
    have = [d for d, s in enumerate(seqs) if len(s) > split]
    waiting = tuple(d for d in have if _starts(invs[seqs[d][split]]))
    running = tuple(d for d in have if d not in waiting)
    if len(have) == num_devices and (not waiting or not running or any(len(seqs[d]) > split + 1 for d in running)):
        return None
    at = frozenset(seqs[d][split] for d in running)
    finished = tuple(d for d in range(num_devices) if d not in have)
    held = frozenset(seqs[d][split] for d in waiting)
    return Reach(frozenset(range(split)) | at, at, held, running, waiting, finished, split)


def _apart(reach: Reach, kernel: Any, mode: str, composed: Any) -> bool:
    """PRG-212: whether the call run at the split position stays apart from the devices that do not run it. One
    call there (`kernel`'s, one lowering), run as its lowering alone with every core of the other devices held
    before its first operation (RUN-3: by persistence the greedy run gets each core of the running devices as far
    as any run in which the others do not move): no operation it passes is a copy or a signal into another device,
    but a barrier semaphore's signal (one object per id, PRG-13, that the held devices never read), and it does
    not fail; and the waiting devices' own calls allocate no semaphore (one id table per manager, PROP-1), read
    off the composed program (`program_lower.ComposedProgram`)."""
    from semcheck.model.fast import fast_run

    program = getattr(kernel, "program", None)
    if (composed is None or program is None or len(reach.at_split) != 1 or getattr(kernel, "iterations", ())
            or program.topology.num_devices != len(reach.running) + len(reach.waiting) + len(reach.finished)):
        return False
    topo, held = program.topology, [d for d in range(program.topology.num_devices) if d not in reach.running]
    out = fast_run(program, mode, hold={g: 0 for d in held for g in topo.cores_of_device(d)}, record=False)
    if out.failure is not None:
        return False
    for d in reach.running:
        for g in topo.cores_of_device(d):
            for op in program.cores[g][:out.state.pcs[g]]:
                target = getattr(op, "device", None)
                if type(op) is Signal and op.sem.label == BARRIER:
                    continue
                if type(op) in (Signal, DmaStart) and target is not None and target != d:
                    if target not in reach.running:
                        return False
    whole = composed.program
    return not any(type(op) is AllocSem and op.label not in composed.barrier_labels  # those come before any call
                   for d in reach.waiting for g in whole.topology.cores_of_device(d)
                   for op, k in zip(whole.cores[g], composed.calls[g]) if k in reach.held)


def before_the_hang(r: Any, reach: Reach, ir: Any, kernel: Any, why: str, composed: Any = None) -> list[Any] | None:
    """PRG-212 / PRG-213: the verdicts of `kernel` other than `deadlock-free` over the states every interpreter run
    reaches before it hangs, or None where not decided. Each call before the split runs as it does alone (PRG-180
    item 2); a call at the split position runs, on the devices that run it, as a run of the call alone in which the
    other devices have not moved yet, where `_apart` holds: so a property the call checked alone proves holds there.
    A violation alone stands where a call of this very kernel runs before the split and the kernel has one lowering.
    A kernel none of whose calls is reached runs no operation: vacuous (PRG-213)."""
    mine = {i for i, inv in enumerate(ir.invocations) if _is(inv, kernel)}
    ran = mine & reach.ran
    if not mine or (ran & reach.at_split and not _apart(reach, kernel, r.dma_mode, composed)):
        return None
    if not ran:
        idle = (f"no run reaches the kernel: in the interpreter every run hangs at the call {reach.split + 1} of each "
                f"device ({_devices(list(reach.waiting)) + ' wait at its start barrier, ' if reach.waiting else ''}"
                f"{_devices(list(reach.finished)) + ' have no such call, ' if reach.finished else ''}"
                "so its clean-up barrier never trips) and none of its calls comes before (PRG-211, PRG-213)")
        return [Verdict(v.property, "vacuous", reason=idle) for v in r.verdicts]
    # a call of this very kernel (its index among the target's kernels) before the split, one lowering for all of
    # its calls: that call is a run of the lowering alone, so a violation alone is one every run may reach
    alone = not getattr(kernel, "iterations", ()) and any(
        ir.invocations[i].call.index == getattr(kernel, "index", None) for i in mine if i < reach.split)
    where = ("the calls every device runs before the first one only some devices run"
             + (f", and call {min(reach.at_split)} on {_devices(list(reach.running))}, which the others do not "
                "enter" if ran & reach.at_split else ""))
    out = []
    for v in r.verdicts:
        if v.verdict == "proved":
            out.append(dataclasses.replace(v, reason=f"proved over {where}: every interpreter run reaches no other "
                                                     "state of the kernel before it hangs (PRG-211, PRG-212)"))
        elif v.verdict == "vacuous" or (v.verdict == "violated" and alone):  # vacuous: what no run of the calls
            out.append(v)  # alone reaches, no run of fewer calls reaches
        else:
            out.append(Verdict(v.property, "unknown", reason=f"{why}; the kernel checked alone is not proved "
                               f"{v.property} ({v.verdict}), and only {where} run (PRG-212)"))
    return out


def decide(r: Any, hang: Hang | None, why: str, *, ir: Any = None, kernel: Any = None, composed: Any = None) -> Any:
    """A `request.Result` of the interpreter's modes for one kernel of the program `ir` (`kernel`, None for the
    whole program): its own where it runs before the first call only some devices run, else `hung` where `hang`
    is known (with PRG-212's verdicts over what every run reaches, where `reached` decides it), else every verdict
    unknown."""
    if r.dma_mode not in INTERPRETER_MODES or runs_before_the_split(ir, kernel):
        return r
    idle = never_starts(ir, r.devices, kernel) if hang is not None else None
    verdicts = hung(r.verdicts, hang, why, idle) if hang is not None else [
        Verdict(v.property, "unknown", reason=why) for v in r.verdicts]
    reach = reached(ir, r.devices) if hang is not None and idle is None and kernel is not None else None
    settled = before_the_hang(r, reach, ir, kernel, why, composed) if reach is not None else None
    if settled is not None:
        verdicts = [h if h.property == "deadlock-free" else s for h, s in zip(verdicts, settled)]
    return dataclasses.replace(r, verdicts=verdicts)


__all__ = ["Hang", "Reach", "before_the_hang", "decide", "hung", "never_starts", "no_run_completes", "reached",
           "runs_before_the_split"]
