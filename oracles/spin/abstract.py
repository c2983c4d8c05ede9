"""The rendering's first pass: every operation of a program as an abstract action on counter and
barrier indices, per core, with what touches each counter."""

from __future__ import annotations

from collections import defaultdict

from semcheck.model.dma import amounts as dma_amounts
from semcheck.model.ops import (
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
    Signal,
    Wait,
)
from semcheck.model.step import view_failure
from oracles.spin.resolve import Fails, Resolver, refuse


class Abstract:
    """The first pass: every operation resolved into an abstract action on counter / barrier indices,
    per core (`actions`), with what touches each counter."""

    def __init__(self, program: Program, mode: DmaMode) -> None:
        self.mode = mode
        self.res = Resolver(program, mode)
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
                    raise Fails(res.fail_at[core][1])
                if (t is Access or t is DmaStart) and op.view_error is not None:
                    if mode == "on_wait" and t is DmaStart:
                        raise refuse(core, pc, op, "an on_wait copy through a view the interpreter cannot index "
                                                    "raises when a waiter runs it, which depends on the schedule")
                    err = view_failure(op, mode)
                    if err is not None:
                        raise Fails(err.message)
                self.action(core, pc, op, acts, seen)
            except Fails as f:
                res.fail(core, pc, op, str(f))
                if any(getattr(o, "scope", None) == "device" for o in ops[pc + 1:]):
                    raise refuse(core, pc, op, "a device-scope allocation follows a failure") from None
                acts.append(("fail", 0, 0, f"fails: {f}", op))
                break
        return acts

    def cix(self, key: tuple, core: int) -> int:
        if (key, core) not in self.counter_ix:
            self.counter_ix[(key, core)] = len(self.counter_ix)
        return self.counter_ix[(key, core)]

    def action(self, core: int, pc: int, op: Op, acts: list, seen: dict) -> None:
        """One operation as an abstract action (appended to `acts`); raises Fails for a static failure."""
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
                raise refuse(core, pc, op, "a core waits at a barrier it does not take part in")
            if bk not in barrier_ix:
                barrier_ix[bk] = len(barrier_ix)
                barrier_size[barrier_ix[bk]] = len(op.participants)
            elif barrier_size[barrier_ix[bk]] != len(op.participants):
                raise refuse(core, pc, op, f"barrier {op.name!r} #{bk[1]} has different participant sets")
            acts.append(("barrier", barrier_ix[bk], len(op.participants), f"barrier {op.name!r} #{bk[1]}", op))
        elif t is Read:
            res.key(core, pc, op, op.sem)
            acts.append(("note", 0, 0, f"read {op.sem} (no effect on blocking)", op))
        elif t in (AllocSem, AllocBuffer, FreeBuffer, Access, GetBarrierSem, ExitCheck):
            acts.append(("note", 0, 0, type(op).__name__, op))
        else:  # pragma: no cover - a new op kind must be rendered deliberately
            raise refuse(core, pc, op, "operation not rendered")
