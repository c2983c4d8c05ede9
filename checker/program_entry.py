"""PRG-109: a remote signal or copy reaches a device only once that device has entered the call that owns
its semaphore.

The composed program (`frontend.program_lower`) gives each call its own semaphores and a linked
semaphore the call that first returns it. That is what a TPU does only if no device signals or
copies into another device's semaphore before that device has entered the owning call: before, the
semaphore memory belongs to whatever the device is running then. So for every remote `Signal` and
remote `DmaStart` (the barrier semaphores aside: they outlive the calls, PRG-105),
the target's core is frozen just before its first operation of the owning call and every other core
runs as far as it can (`model.fast.fast_run`, RUN-3): every run in which the target has not entered
the call is a prefix of a run of that frozen program, so the sender gets past the operation there
iff some schedule sends before the target enters. Such a program's verdicts are not trusted: its
hardware results are unknown with the two calls' lines.
"""

from __future__ import annotations

from semcheck.model.fast import fast_run
from semcheck.model.ops import BARRIER, AllocSem, DmaStart, Signal
from semcheck.model.step import target_core


def entry_gaps(composed) -> tuple[str, ...]:
    """Why the composed program's hardware verdicts cannot be trusted (PRG-109); empty when they can."""
    program, calls, ir = composed.program, composed.calls, composed.ir
    if len(ir.invocations) < 2:
        return ()
    owner: dict[str, int] = {}
    for ops, ks in zip(program.cores, calls):
        for op, k in zip(ops, ks):
            if type(op) is AllocSem:
                owner.setdefault(op.label, k)
    runs: dict[tuple[int, int], tuple[int, ...] | None] = {}
    gaps: list[str] = []
    for g, (ops, ks) in enumerate(zip(program.cores, calls)):
        for i, (op, k) in enumerate(zip(ops, ks)):
            if type(op) not in (Signal, DmaStart) or op.device is None:
                continue
            sem = op.sem if type(op) is Signal else op.dst_sem
            if sem.label == BARRIER or sem.label in composed.barrier_labels:
                continue
            tg = target_core(program, "hardware", g, op.device, op.core, dma=type(op) is DmaStart)
            if not isinstance(tg, int):
                continue  # a target outside the topology is the program's own failure (ERR-4)
            k_own = owner.get(sem.label, k)
            own_at = composed.position(k_own)
            entry = next((j for j, kk in enumerate(calls[tg]) if composed.position(kk) >= own_at), len(calls[tg]))
            if (tg, entry) not in runs:
                out = fast_run(program, "hardware", freeze={tg: entry}, record=False)
                runs[(tg, entry)] = out.state.pcs if out.kind in ("completed", "deadlock") else None
            pcs = runs[(tg, entry)]
            if pcs is not None and pcs[g] <= i:
                continue
            topo = program.topology
            what = "signal" if type(op) is Signal else "copy"
            inv, own = ir.invocations[k], ir.invocations[k_own]
            why = ("can" if pcs is not None else "may") + f" reach device {topo.device_of(tg)}"
            text = (f"the {what} at {op.loc} in {inv.describe()} on device {topo.device_of(g)} {why} before that "
                    f"device enters {own.describe()}, whose semaphore it targets; the semaphore is not that call's "
                    "yet (programs.md PRG-109)")
            if text not in gaps:
                gaps.append(text)
    return tuple(gaps)


__all__ = ["entry_gaps"]
