"""Each core's semaphore references and static failures, resolved without running the program (the
first step of the Promela rendering)."""

from __future__ import annotations

from semcheck.model.ids import FIRST_BUFFER_ID, FIRST_SEMAPHORE_ID, arange_int16, scalar_int16
from semcheck.model.ops import BARRIER, AllocBuffer, AllocSem, GetBarrierSem, Op, Program, SemRef
from semcheck.model.step import target_core


class PromelaUnsupported(Exception):
    """The program (or mode) is outside what the rendering describes faithfully."""


def refuse(core: int, pc: int, op: Op, why: str) -> PromelaUnsupported:
    return PromelaUnsupported(f"core {core} op {pc} ({type(op).__name__} at {op.loc}): {why}")


def refuse(core: int, pc: int, op: Op, why: str) -> PromelaUnsupported:
    return PromelaUnsupported(f"core {core} op {pc} ({type(op).__name__} at {op.loc}): {why}")


class Fails(Exception):
    """The operation fails whatever the schedule (a static failure, ERR-7: it ends every run that reaches it)."""


class Resolver:
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
                except Fails as f:
                    self.fail(core, pc, op, str(f))
                    break  # the core's later operations never run
        cid = program.collective_id
        self.racy_cid = (not self.hw) and cid is not None and cid in internal

    def fail(self, core: int, pc: int, op: Op, why: str) -> None:
        """Record a static failure; one that ends only its own device (ERR-7) is not rendered."""
        if not op.propagates_failure and self.program.topology.cores_per_device == 1:
            raise refuse(core, pc, op, f"{why}, which ends only its own device")
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
                    raise Fails(f"semaphore ids overflow int16 ({got.message})")
                ids = got
            for c in cores:
                self.allocs[(c, op.label)] = (op.site, op.count, ids)
        elif isinstance(op, AllocBuffer) and not self.hw:
            cores = topo.cores_of_device(topo.device_of(core)) if op.scope == "device" else (core,)
            for c in cores:
                i = next_buf.get(c, FIRST_BUFFER_ID)
                next_buf[c] = i + 1
                if c == core and not isinstance(scalar_int16(i), int):
                    raise Fails(f"buffer id {i} overflows int16")
        elif isinstance(op, GetBarrierSem):
            if program.collective_id is None:
                raise Fails("the kernel has no collective_id")
            if not self.hw and not isinstance(scalar_int16(program.collective_id), int):
                raise Fails("the collective id overflows int16")

    def key(self, core: int, pc: int, op: Op, ref: SemRef) -> tuple:
        if ref.label == BARRIER:
            if self.program.collective_id is None:
                raise Fails("the barrier semaphore needs a collective_id")
            if self.hw:
                return ("barrier",)
            fetched = any(o.fetches_barrier for o in self.program.cores[core][:pc])
            if self.racy_cid:
                self._collision(core, pc, op, fetched and self._holds_cid(core, pc))
            if not fetched:
                raise refuse(core, pc, op, "the barrier semaphore is used before get_barrier_semaphore")
            return ("fixed", self.program.collective_id)
        got = self.allocs.get((core, ref.label))
        if got is None:
            raise refuse(core, pc, op, f"no allocation {ref.label!r} on this core")
        site, count, ids = got
        if not 0 <= ref.index < count:
            raise Fails(f"index {ref.index} out of bounds for {ref.label!r} ({count} semaphores)")
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
            raise Fails(f"collective id {self.program.collective_id} is in both id tables (ERR-1)")
        raise refuse(core, pc, op, f"collective id {self.program.collective_id} is also an internal "
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
            raise Fails(f"bad target: {t.message}")
        return t
