"""Per-device timelines of a witness schedule, for reports."""

from __future__ import annotations

from collections.abc import Sequence

from semcheck.model.ops import (
    BARRIER,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    Access,
    GetBarrierSem,
    Op,
    Program,
    Read,
    Signal,
    Wait,
)


def describe(op: Op) -> str:
    """A short human description of one operation."""
    if isinstance(op, Signal):
        where = "" if op.device is None else f" -> device {op.device}"
        where += "" if op.core is None else f" core {op.core}"
        return f"signal {op.sem} +{op.inc}{where}"
    if isinstance(op, Wait):
        return f"{'dma wait' if op.kind == 'dma' else 'wait'} {op.sem} for {op.value}"
    if isinstance(op, DmaStart):
        where = "local" if op.device is None else f"-> device {op.device}"
        send = f" send={op.src_sem}" if op.src_sem is not None else ""
        return f"dma start {op.nbytes}B {where}{send} recv={op.dst_sem}"
    if isinstance(op, AllocSem):
        return f"allocate {op.count} semaphore(s) {op.label!r} ({op.scope})"
    if isinstance(op, GetBarrierSem):
        return f"get barrier semaphore ({BARRIER})"
    if isinstance(op, Barrier):
        return f"barrier {op.name!r}"
    if isinstance(op, Read):
        return f"read {op.sem}"
    if isinstance(op, AllocBuffer):
        return f"allocate buffer {op.label!r}"
    if isinstance(op, FreeBuffer):
        return f"free buffer {op.label!r}"
    if isinstance(op, Access):
        what = getattr(op.loc, "what", "")  # a grid copy (GRID-1)
        return f"{'store' if op.write else 'load'} {op.buf}{op.region}" + (f" ({what})" if what else "")
    if isinstance(op, ExitCheck):
        return "exit check"
    return type(op).__name__


def timeline(
    program: Program, pcs: Sequence[int], devices: Sequence[int] | None = None, last: int = 6
) -> list[dict]:
    """The last `last` kernel operations each core executed before positions `pcs`,
    and the operation it was at when the witness ended (stuck at, or failing at).

    Only operations with a source line (the kernel's, not the launch
    wrapper's) are listed. Returns `[{"device": d, "events": [str, ...]}]`.
    """
    topo = program.topology
    wanted = range(topo.num_devices) if devices is None else devices
    out = []
    for d in wanted:
        events: list[str] = []
        for g in topo.cores_of_device(d):
            ops = program.cores[g]
            who = f"core {topo.local_core_of(g)}: " if topo.cores_per_device > 1 else ""
            done = [op for op in ops[: pcs[g]] if op.loc.line > 0][-last:]
            events += [f"{who}{_short(op)}  {describe(op)}" for op in done]
            if pcs[g] < len(ops):
                op = ops[pcs[g]]
                events.append(f"{who}{_short(op)}  >> {describe(op)}")
        out.append({"device": d, "events": events})
    return out


def _short(op: Op) -> str:
    return f"{op.loc.file.rsplit('/', 1)[-1]}:{op.loc.line}" if op.loc.line else "(launch)"
