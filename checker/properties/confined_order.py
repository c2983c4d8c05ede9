"""PROP-8 `invocation-confined` of a single call under `hardware`, from the happens-before order of one
run of a period of the program (spec PRG-164).

PRG-113 asks, for every remote signal and copy, whether it can land before its target entered (a run
with the target's core 0 held at its first operation) or after it left (a run with the sender held).
Both are runs of the whole program. Here the same two questions are answered by DR-6's relation E,
which holds in every schedule: the target's first operation E-before the sender's operation (early
side), and the landing (a signal; a copy's write half) E-before the target's exit check (late side).
The relation is computed on the run of one period (DR-41's class run) or DR-8's fold, whose events are
the representatives'; the rotation maps every other operation and its target onto a representative's
(RUN-20, RUN-7). A run that stops early is terminal, so what it never issues lands nowhere and a target
that never reaches its exit check never leaves (PRG-166). Where anything is not shown, None: the caller
decides as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semcheck.checker.properties.verdict import Verdict
from semcheck.model.clock_rows import Sparse
from semcheck.model.fast import fast_run
from semcheck.model.hb_observers import Observer, SymmetricObserver
from semcheck.model.ops import BARRIER, DmaStart, ExitCheck, Program, Signal
from semcheck.model.step import target_core
from semcheck.model.symmetric import Symmetric

PROPERTY = "invocation-confined"


def _landings(program: Any, cores: int) -> list[tuple[int, int, bool, int]]:
    """(core, pc, is a copy, target core or -1) of the remote signals and copies of cores `0 .. cores-1`
    whose semaphore is not a barrier semaphore (PRG-105, PRG-113); the target is SIG-1's under hardware,
    read once per operation."""
    out = []
    for c in range(cores):
        for pc, op in enumerate(program.cores[c]):
            t = type(op)
            if t not in (Signal, DmaStart) or op.device is None:
                continue
            if (op.sem if t is Signal else op.dst_sem).label == BARRIER:
                continue
            got = target_core(program, "hardware", c, op.device, op.core, dma=t is DmaStart)
            out.append((c, pc, t is DmaStart, got if isinstance(got, int) else -1))
    return out


def _exit_of(ops: tuple) -> int | None:
    return next((j for j, o in enumerate(ops) if type(o) is ExitCheck), None)


class _Recorder:
    """What PRG-164 reads off the observer while the run goes on, taken at waits and barriers only: a
    core's clock grows nowhere else (DR-6), so per (representative core, target core 0) the first
    position from which the core's clock has that target's entry past 0 decides the early side of every
    landing of the core (PRG-164), and each representative core 0's clock before its first wait or
    barrier past its exit check is its clock at the exit check (late side). The other events go to the
    observer without passing through here."""

    def __init__(self, observer: Observer, exits: dict[int, int | None], landings: list, per: int) -> None:
        self.o = observer
        self.signal, self.start, self.arrive, self.access = observer.signal, observer.start, observer.arrive, observer.access
        self.exits = {c: e for c, e in exits.items() if e is not None}
        self.at_exit: dict[int, Sparse | np.ndarray] = {}  # a row, sparse or dense (DR-45)
        # core -> the target cores 0 it does not know of yet (a core is never told of itself)
        self.unknown: dict[int, set[int]] = {}
        for c, _, _, t in landings:
            if t >= 0 and t - t % per != c:
                self.unknown.setdefault(c, set()).add(t - t % per)
        self.known_from: dict[tuple[int, int], int] = {}  # (core, target core 0) -> first position knowing it
        self.watched = set(self.unknown) | set(self.exits)

    def _before(self, core: int, pc: int) -> None:
        e = self.exits.get(core)
        if e is not None and pc > e and core not in self.at_exit:
            self.at_exit[core] = self.o.clock[core].copy()

    def _after(self, core: int, pc: int) -> None:
        wanted = self.unknown.get(core)
        if wanted:
            row = self.o.clock[core]
            for t0 in [t0 for t0 in wanted if row[t0] > 0]:
                wanted.discard(t0)
                self.known_from[(core, t0)] = pc + 1  # what this wait or barrier joined holds past it
        if not wanted and (core not in self.exits or core in self.at_exit):
            self.watched.discard(core)

    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None:
        if core not in self.watched:
            self.o.wait(core, pc, counter, value)
            return
        self._before(core, pc)
        self.o.wait(core, pc, counter, value)
        self._after(core, pc)

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        if core not in self.watched:
            self.o.barrier(core, pc, name, k, participants)
            return
        self._before(core, pc)
        self.o.barrier(core, pc, name, k, participants)
        self._after(core, pc)

    def entered(self, core: int, pc: int, target: int, per: int) -> bool:
        """Early side: `target`'s core 0 ran its first operation E-before (core, pc), or is `core`."""
        if target < 0:
            return False
        t0 = target - target % per
        return t0 == core or self.known_from.get((core, t0), _NEVER) <= pc

    def clock_at_exit(self, core: int) -> Sparse | np.ndarray:
        got = self.at_exit.get(core)
        return self.o.clock[core] if got is None else got


_NEVER = 1 << 62


def _period(program: Symmetric | Program) -> int:
    if isinstance(program, Symmetric):
        return program.period
    from semcheck.model.symmetry import Rotation

    return Rotation.observe(program, shifted=True).devices


def confined_on_period(program: Symmetric | Program, mode: str) -> Verdict | None:
    """PRG-164: `invocation-confined` proved for a single call under `hardware` when, on the run of one
    period, every remote signal and copy of the representatives is E-after its target's entry and lands
    E-before its target's exit check; None when that is not shown (or the mode is not `hardware`, or a copy
    touches a run_scoped buffer, BUF-13)."""
    from semcheck.model.quotient import class_quotient

    if mode != "hardware":
        return None
    topo = program.topology
    n, per = topo.num_cores, topo.cores_per_device
    if getattr(program, "launch_failure", None) is not None or getattr(program, "tpu_failure", None) is not None:
        return None
    from semcheck.checker.properties.confined_scopes import has_scopes

    if has_scopes(program):  # BUF-13 asks of each run_scoped scope what this asks of the kernel: the held runs
        return None
    k = _period(program)
    fold = class_quotient(program, k) if k < topo.num_devices else None
    if fold is None and isinstance(program, Symmetric):
        return None  # DR-41 does not apply, and the whole program's run is not ours to build here
    if fold is not None:
        obs: Observer = SymmetricObserver(program, fold, (), "completion", "hardware")
        runs, reps = fold.program, fold.devices * per
    else:
        obs = Observer(program, (), "completion")
        runs, reps = program, n
    # the representatives' own operations, read once (a Symmetric's core is built on each read)
    landings = _landings(program, reps)
    exits = {c: _exit_of(runs.cores[c]) for c in range(0, reps, per)}
    rec = _Recorder(obs, exits, landings, per)
    state = fast_run(runs, "hardware", record=False, observer=rec).state
    # DR-6's certificate: a failure-free run, no id in both tables, every arrival after the waits before it
    if obs.broken or obs.broken_counters or state.failures or (state.tables.internal & state.tables.fixed):
        return None
    # PRG-166: a run that stops early is terminal (RUN-3), so what it does not run no schedule runs
    ran = state.pcs
    stuck = any(ran[c] < len(runs.cores[c]) for c in range(reps))
    for c, pc, is_copy, t in landings:
        if pc >= ran[c]:
            continue  # never issued in any schedule
        if not rec.entered(c, pc, t, per):
            return None  # early side (PRG-111) not shown
        t0 = t - t % per
        s = t0 - t0 % reps  # the rotation by whole periods that makes the target a representative
        r0 = t0 - s
        e = exits.get(r0)
        if e is None:
            return None
        if ran[r0] <= e:
            continue  # the target's core 0 runs its exit check in no schedule: nothing lands after it left
        sender = (c - s) % n  # the sender's image under that rotation: its operations are c's (RUN-20)
        if not is_copy:  # a signal arrives where it happens (SIG-1)
            ok = pc < e if sender == r0 else bool(rec.clock_at_exit(r0)[sender] > pc)
        else:  # some wait follows the write
            row = rec.clock_at_exit(r0)
            ok = any(wq < e if wc == r0 else bool(row[wc] > wq) for wc, wq in obs.waits_after((sender, pc), "write"))
        if not ok:
            return None  # late side (PRG-112) not shown
    where = ("" if fold is None else
             f" on the run of devices 0..{fold.devices - 1} (the program repeats every {k} devices)")
    if not stuck or not landings:
        return Verdict(PROPERTY, "proved", reason=(
            f"every remote signal and copy ({len(landings)} of the representatives) comes after its target "
            f"entered the kernel and lands before it reaches its exit check in every schedule: the "
            f"happens-before order{where} shows both (specs/deciding/confined.md PRG-164)"),
            stats={"landings": len(landings), "period": k})
    issued = sum(pc < ran[c] for c, pc, _, _ in landings)
    run = "the program's run" if fold is None else f"the run of one period ({k} device{'s' * (k != 1)})"
    stats = {"landings": len(landings), "issued": issued, "period": k}
    if not issued:
        return Verdict(PROPERTY, "proved", stats=stats, reason=(
            f"no remote signal or copy is issued in any schedule: {run} stops before each of the "
            f"representatives' {len(landings)}, and what it does not run no schedule runs "
            f"(specs/deciding/confined.md PRG-164, PRG-166)"))
    skipped = (f", so no schedule issues {len(landings) - issued} of the representatives' {len(landings)}"
               if issued < len(landings) else "")
    return Verdict(PROPERTY, "proved", stats=stats, reason=(
        f"every remote signal and copy that is ever issued comes after its target entered the kernel and "
        f"lands before it reaches its exit check, or while it never reaches it: {run} stops early{skipped}, "
        f"and its happens-before order shows both for the {issued} it issues (specs/deciding/confined.md PRG-164, "
        f"PRG-166)"))
