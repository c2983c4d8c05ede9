"""DMA halves and waits that run queued tasks (rules DMA-2 .. DMA-5, SEM-5, SEM-7, ACC-11).

The halves (DMA-2, DMA-4) are written once, over a small store interface (`Halves`): a view of
any frozen state with the fields `counts`, `queues` and `dmas` (the kernel-level `State`, through
`semcheck.model.step`, and the manager's own state, `semcheck.model.manager`), and the fast run's
working copies (`semcheck.model.fast`). So every level runs DMAs by the same rules.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Self, TypeVar

from semcheck.model import semaphore as sem
from semcheck.model.errors import ModelBug, Violation
from semcheck.model.ops import DmaMode, DmaStart, SemType, core_field
from semcheck.model.scope_keys import freed_failures
from semcheck.model.semaphore import SemKey, Task
from semcheck.model.state import Dma
from semcheck.model.transient import appended, changed, replaced

S = TypeVar("S")  # a state with counts, queues and dmas


def _set_dma(state: S, dma: Dma) -> S:
    return changed(state, dmas=replaced(state.dmas, dma.ident, dma))


def half_amount(nbytes: int, sem_type: SemType, mode: DmaMode) -> int:
    """DMA-6: what one half of an `nbytes` copy adds to a semaphore of type `sem_type`.

    The interpreter adds the byte count whatever the type (D20). On hardware
    a DMA semaphore counts bytes and any other (REGULAR, barrier) counts the
    completed copy: 1.
    """
    return nbytes if counts_bytes(sem_type, mode) else 1


def counts_bytes(sem_type: SemType, mode: DmaMode) -> bool:
    """DMA-6: whether a DMA half adds its byte count to a semaphore of this type under `mode`."""
    return mode != "hardware" or sem_type == "dma"


def amounts(op: DmaStart, mode: DmaMode) -> tuple[int, int]:
    """DMA-6: what the read half adds to the send semaphore and the write half to the receive one."""
    return half_amount(op.nbytes, op.src_sem_type, mode), half_amount(op.nbytes, op.dst_sem_type, mode)


class Halves(Protocol):
    """What the half rules read and change. A frozen state's view returns a new view from each change;
    a working copy changes itself and returns itself."""

    def phase(self, ident: int) -> int:
        """DMA `ident`'s phase: 0 started, 1 read half done, 2 complete."""
        ...

    def fields(self, ident: int) -> Any:
        """DMA `ident`'s fields as `Dma` names them (src_key, src_core, src_amount, dst_key, ...)."""
        ...

    def signalled(self, key: SemKey, core: int, amount: int, source: tuple) -> Self:
        """SEM-4 by a half; `source` is `(ident, "read" | "write")` (what a run's observer is told)."""
        ...

    def moved(self, ident: int, phase: int) -> Self:
        """DMA `ident` now in `phase`."""
        ...


def read_half(store: Halves, ident: int) -> Halves:
    """DMA-2 read half: signal the send semaphore (if any) on the source core with its amount (DMA-6).

    At most once: a half already read (through another task) does nothing.
    """
    if store.phase(ident) != 0:
        return store
    d = store.fields(ident)
    if d.src_key is not None:
        store = store.signalled(d.src_key, d.src_core, d.src_amount, (ident, "read"))
    return store.moved(ident, 1)


def write_half(store: Halves, ident: int) -> Halves:
    """DMA-2 write half: signal the receive semaphore on the destination core with its amount (DMA-6).

    After the read half, at most once.
    """
    phase = store.phase(ident)
    if phase == 0:
        raise ModelBug(f"DMA {ident} written before read")
    if phase == 2:
        return store
    d = store.fields(ident)
    return store.signalled(d.dst_key, d.dst_core, d.dst_amount, (ident, "write")).moved(ident, 2)


def run_half_task(store: Halves, task: tuple) -> Halves:
    """DMA-4: a waiter runs a popped task: the read half, or read-then-write (each half at most once).

    An eager start runs its DMA's halves as this task (DMA-2).
    """
    ident, kind = task
    store = read_half(store, ident)
    if kind == "read_write":
        store = write_half(store, ident)
    return store


@dataclasses.dataclass(frozen=True)
class _Frozen:
    """The `Halves` view of a frozen state with fields `counts` and `dmas`."""

    state: Any

    def phase(self, ident: int) -> int:
        return self.state.dmas[ident].phase

    def fields(self, ident: int) -> Dma:
        return self.state.dmas[ident]

    def signalled(self, key: SemKey, core: int, amount: int, source: tuple) -> _Frozen:
        return self._of(changed(self.state, counts=sem.signal(self.state.counts, key, core, amount)))

    def moved(self, ident: int, phase: int) -> _Frozen:
        return self._of(_set_dma(self.state, _with_phase(self.state.dmas[ident], phase)))

    def _of(self, state: Any) -> _Frozen:
        # a replay's transient state is changed in place (RUN-35): the view of it stays the same
        return self if state is self.state else _Frozen(state)


def _with_phase(d: Dma, phase: int) -> Dma:
    """`dataclasses.replace(d, phase=phase)` (a `Dma` has no __post_init__ to run), at the cost of a dict copy:
    each half of every copy a replay runs makes one."""
    out = object.__new__(Dma)
    out.__dict__.update(d.__dict__)
    out.__dict__["phase"] = phase
    return out


def dma_read(state: S, ident: int) -> S:
    """DMA-2 read half on a frozen state (`read_half`)."""
    return read_half(_Frozen(state), ident).state


def dma_write(state: S, ident: int) -> S:
    """DMA-2 write half on a frozen state (`write_half`)."""
    return write_half(_Frozen(state), ident).state


def run_task(state: S, task: tuple) -> S:
    """DMA-4 on a frozen state (`run_half_task`)."""
    return run_half_task(_Frozen(state), task).state


def tasks(dma: Dma) -> tuple[tuple[SemKey, int, Task], ...]:
    """DMA-3: the tasks an on_wait start queues, as (semaphore, core, task): a read task on
    (send semaphore, source core) if there is one, then a read-then-write task on
    (receive semaphore, destination core)."""
    read_write = (dma.dst_key, dma.dst_core, (dma.ident, "read_write"))
    if dma.src_key is None:
        return (read_write,)
    return ((dma.src_key, dma.src_core, (dma.ident, "read")), read_write)


def start(state: S, dma: Dma, mode: DmaMode) -> S:
    """DMA-2 / DMA-3 / DMA-5: start `dma` (its semaphores already looked up, DMA-1) per mode.

    eager: both halves run now, read then write. on_wait: a read task is
    queued on (send semaphore, source core) if there is one, and a
    read-then-write task on (receive semaphore, destination core). hardware:
    the halves are actors of their own.
    """
    state = changed(state, dmas=appended(state.dmas, dma))
    if mode == "eager":
        return run_task(state, (dma.ident, "read_write"))
    if mode == "on_wait":
        queues = state.queues
        for key, core, task in tasks(dma):
            queues = sem.enqueue_task(queues, key, core, task)
        return changed(state, queues=queues)
    return state


def deferred_failure(fails: tuple[Violation | None, Violation | None], phase: int, kind: str
                     ) -> tuple[Violation | None, bool]:
    """ACC-11: what a waiter running task `kind` of an on_wait copy in `phase` raises, and whether the read
    half runs first; `fails` is what the copy's (read, write) half raises (a view the interpreter cannot
    index, ERR-9).

    The read half reads the source view: with a source the interpreter cannot index it raises before
    it signals anything. The write half writes the destination view: with only the destination
    unindexable, a read-then-write task reads (and signals the send semaphore) and then raises. A
    half that already ran raises nothing again (DMA-4).
    """
    read_err, write_err = fails
    if phase == 0 and read_err is not None:
        return read_err, False
    if kind == "read_write" and phase < 2 and write_err is not None:
        return write_err, phase == 0
    return None, False


def first_failures(views: tuple, scoped: tuple) -> tuple:
    """ACC-11 with BUF-14: what each half of a copy raises, a view the interpreter cannot index before a
    missing run_scoped key (the view fails as the half computes its window)."""
    return tuple(v if v is not None else k for v, k in zip(views, scoped))


def wait_once(state: S, key: SemKey, core: int, value: int) -> tuple[S, bool, Violation | None] | None:
    """SEM-5 + SEM-7 / DMA-4: one step of `core`'s wait for `value` on `key` (already looked up).

    The count suffices: it is consumed and the wait is done (True). Else the
    last queued task on (key, core) runs and the wait goes on (False); a task
    of a copy the interpreter cannot index raises in the waiter instead (the
    violation, ACC-11). Else the wait is blocked (None).
    """
    counts = sem.try_wait(state.counts, key, core, value)
    if counts is not None:
        return changed(state, counts=counts), True, None
    queues, task = sem.pop_task(state.queues, key, core)
    if task is None:
        return None
    state = changed(state, queues=queues)
    d = state.dmas[task[0]]
    fails = d.fails
    if d.buffers != (None, None):  # BUF-14: a half at a run_scoped key the manager no longer (or not yet) holds
        fails = first_failures(fails, freed_failures(state.scoped, d.buffers))
    err, read_first = deferred_failure(fails, d.phase, task[1])
    if err is not None:
        return (dma_read(state, task[0]) if read_first else state), False, err
    return run_task(state, task), False, None


def empty_copies_signal_nothing(program: Any) -> Any:
    """ACC-24: the other hardware reading of a program with empty copies on non-DMA semaphores.

    DMA-6 lets a completed copy add 1 to a REGULAR or barrier semaphore on a TPU; whether a copy of
    0 bytes completes that way is documented nowhere. This is the program in which every such half
    adds nothing (its semaphore side counts bytes, 0 of them); None when the program has no such
    copy, so that its one reading is DMA-6's."""
    field = core_field(program)  # a program given by one period: its representatives (RUN-20)
    changed_any = False
    cores = []
    for ops in getattr(program, field):
        out = []
        for op in ops:
            if isinstance(op, DmaStart) and op.nbytes == 0 and (op.dst_sem_type != "dma" or (
                    op.src_sem is not None and op.src_sem_type != "dma")):
                op = dataclasses.replace(op, src_sem_type="dma", dst_sem_type="dma")  # adds its 0 bytes
                changed_any = True
            out.append(op)
        cores.append(tuple(out))
    return dataclasses.replace(program, **{field: tuple(cores)}) if changed_any else None
