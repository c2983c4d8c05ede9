"""Kernel-level machine state (spec section STATE) and outcomes.

A `State` is an immutable, hashable value, so explorers can branch on it and
de-duplicate it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from semcheck.model.buffer import BufferStore
from semcheck.model.errors import Violation
from semcheck.model.fmap import FMap
from semcheck.model.ops import DmaMode, Loc, Op, Program
from semcheck.model.semaphore import SemKey, SemTables


@dataclasses.dataclass(frozen=True)
class Allocation:
    """What one core knows of a semaphore allocation it can refer to."""

    site: str
    count: int
    base: int | None  # the base id (interpreter semantics); None on hardware
    ids: tuple[int, ...] = ()  # the int16 ids the kernel holds (interpreter semantics)


@dataclasses.dataclass(frozen=True)
class Dma:
    """A started DMA (DMA-1). `phase`: 0 started, 1 read half done, 2 complete.

    `src_amount`/`dst_amount`: what its read and write halves add to their
    semaphores (DMA-6: the byte count, or 1 for a non-DMA semaphore on hardware).
    """

    ident: int
    src_core: int
    dst_core: int
    nbytes: int
    src_key: SemKey | None
    dst_key: SemKey
    loc: Loc
    src_amount: int
    dst_amount: int
    phase: int = 0
    fails: tuple[Violation | None, Violation | None] = (None, None)  # ACC-11: what its (read, write) half raises
                                                                     # when an on_wait waiter runs it
    buffers: tuple = (None, None)  # BUF-14: the run_scoped keys its (read, write) half looks up (interpreter)


@dataclasses.dataclass(frozen=True)
class Failure:
    """The run failed: `violation` raised by core `core` at op `pc` (`loc`)."""

    violation: Violation
    core: int
    pc: int
    loc: Loc


@dataclasses.dataclass(frozen=True)
class ExitWarning:
    """EXIT-1: the interpreter's non-zero-count message for one device."""

    device: int
    nonzero: tuple[tuple[SemKey, int, int], ...]  # (key, core, count)

    def lines(self) -> tuple[str, ...]:
        """Each message the interpreter may print (it prints one of them)."""
        return tuple(
            f"Semaphore {key[1] if len(key) > 1 else key[0]} has non-zero count for {self.device}"
            f" (global core {core}) at kernel exit: {value}"
            for key, core, value in self.nonzero
        )


@dataclasses.dataclass(frozen=True)
class State:
    pcs: tuple[int, ...]
    tables: SemTables = SemTables()
    counts: FMap = FMap()  # (key, core) -> count
    allocs: FMap = FMap()  # (core, label) -> Allocation
    buffers: BufferStore = BufferStore()  # the manager's buffer part: BUF-1 counters (kernel runs keep no contents)
    buffer_keys: FMap = FMap()  # (core, label) -> BufferKey: the buffer an AllocBuffer label denotes there (BUF-8)
    scoped: FMap = FMap()  # BufferKey -> held: the run_scoped keys allocated so far, False once freed (BUF-14)
    dmas: tuple[Dma, ...] = ()
    queues: FMap = FMap()  # (key, core) -> tuple of tasks (on_wait)
    looked_up: FMap = FMap()  # core -> the semaphore its current, unfinished wait looked up
    passed: FMap = FMap()  # (core, barrier name) -> barriers of that name passed
    reads: tuple[tuple[int, int, int], ...] = ()  # (core, pc, value) of each Read
    warnings: tuple[ExitWarning, ...] = ()
    failures: tuple[Failure, ...] = ()  # in order; several only when devices fail alone (ERR-7)
    signals: frozenset = frozenset()  # RACE-1: the counters a plain signal reached (kept only with clocks)

    @property
    def failure(self) -> Failure | None:
        """The first failure, the one the run reports."""
        return self.failures[0] if self.failures else None

    @staticmethod
    def initial(program: Program) -> State:
        return State(pcs=(0,) * program.topology.num_cores)


Actor = tuple  # ("core", g) | ("dma_read", k) | ("dma_write", k)


@dataclasses.dataclass(frozen=True)
class Blocked:
    """A core that cannot move in a terminal state, and why."""

    core: int
    pc: int
    op: Op
    reason: str


OutcomeKind = Literal["completed", "deadlock", "error"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The terminal state of one maximal run, classified (RUN-2)."""

    kind: OutcomeKind
    state: State
    mode: DmaMode
    schedule: tuple[Actor, ...] = ()
    blocked: tuple[Blocked, ...] = ()

    @property
    def failure(self) -> Failure | None:
        return self.state.failure

    @property
    def pending_dmas(self) -> tuple[Dma, ...]:
        return tuple(d for d in self.state.dmas if d.phase < 2)

    def summary(self) -> tuple:
        """What two runs must agree on to be the same outcome (for tests and dedup)."""
        f = self.state.failure
        return (
            self.kind,
            self.state.pcs,
            None if f is None else (f.violation, f.core, f.pc),
        )
