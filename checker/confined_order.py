"""PROP-8 `invocation-confined` of a single call under `hardware`, from the happens-before order of one
run of a period of the program (spec programs.md PRG-164).

PRG-113 asks, for every remote signal and copy, whether it can land before its target entered (a run
with the target's core 0 held at its first operation) or after it left (a run with the sender held).
Both are runs of the whole program. Here the same two questions are answered by DR-6's relation E,
which holds in every schedule: the target's first operation E-before the sender's operation (early
side), and the landing (a signal; a copy's write half) E-before the target's exit check (late side).
The relation is computed on the run of one period (DR-41's class run) or DR-8's fold, whose events are
the representatives'; the rotation maps every other operation and its target onto a representative's
(RUN-20, RUN-7). Where anything is not shown, None: the caller decides as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semcheck.checker.verdict import Verdict
from semcheck.model.fast import fast_run
from semcheck.model.hb_observers import Observer, SymmetricObserver
from semcheck.model.ops import BARRIER, DmaStart, ExitCheck, Program, Signal
from semcheck.model.step import target_core
from semcheck.model.symmetric import Symmetric

PROPERTY = "invocation-confined"


def _landings(program: Any, cores: int) -> list[tuple[int, int, bool]]:
    """(core, pc, is a copy) of the remote signals and copies of cores `0 .. cores-1` whose semaphore is
    not a barrier semaphore (PRG-105, PRG-113)."""
    out = []
    for c in range(cores):
        for pc, op in enumerate(program.cores[c]):
            t = type(op)
            if t not in (Signal, DmaStart) or op.device is None:
                continue
            if (op.sem if t is Signal else op.dst_sem).label == BARRIER:
                continue
            out.append((c, pc, t is DmaStart))
    return out


def _exit_of(ops: tuple) -> int | None:
    return next((j for j, o in enumerate(ops) if type(o) is ExitCheck), None)


class _Recorder:
    """What PRG-164 reads off the observer while the run goes on: the sender's clock entry for its
    target's core 0 at each landing's operation (early side), and each representative core 0's clock at
    its exit check (late side: the clock only grows at waits and barriers, so it is the clock before the
    first of those past the exit)."""

    def __init__(self, observer: Observer, program: Any, reps: int, target) -> None:
        self.o = observer
        self.target = target  # (core, pc) -> the program's core the operation lands on, or -1
        topo = program.topology
        self.per = topo.cores_per_device
        self.watch = {(c, pc) for c, pc, _ in _landings(program, reps)}
        self.entered: dict[tuple[int, int], bool] = {}  # landing -> its target's core 0 is E-before it
        self.exits = {c: _exit_of(program.cores[c]) for c in range(0, reps, self.per)}
        self.at_exit: dict[int, np.ndarray] = {}

    def _early(self, core: int, pc: int) -> None:
        if (core, pc) not in self.watch or (core, pc) in self.entered:
            return
        t = self.target(core, pc)
        if t < 0:
            self.entered[(core, pc)] = False
            return
        t0 = t - t % self.per
        # core 0 itself running the operation has entered; otherwise its first operation must be known
        self.entered[(core, pc)] = t0 == core or bool(self.o.clock[core, t0] > 0)

    def _joining(self, core: int, pc: int) -> None:
        e = self.exits.get(core)
        if e is not None and pc > e and core not in self.at_exit:
            self.at_exit[core] = self.o.clock[core].copy()

    def signal(self, counter: tuple, inc: int, source: tuple) -> None:
        if type(source[1]) is not str:
            self._early(*source)
        self.o.signal(counter, inc, source)

    def start(self, core: int, pc: int, ident: int) -> None:
        self._early(core, pc)
        self.o.start(core, pc, ident)

    def wait(self, core: int, pc: int, counter: tuple, value: int) -> None:
        self._joining(core, pc)
        self.o.wait(core, pc, counter, value)

    def barrier(self, core: int, pc: int, name: str, k: int, participants: tuple[int, ...]) -> None:
        self._joining(core, pc)
        self.o.barrier(core, pc, name, k, participants)

    def arrive(self, core: int, pc: int, name: str, k: int) -> None:
        self.o.arrive(core, pc, name, k)

    def access(self, core: int, pc: int) -> None:
        self.o.access(core, pc)

    def clock_at_exit(self, core: int) -> np.ndarray:
        got = self.at_exit.get(core)
        return self.o.clock[core] if got is None else got


def _period(program: Symmetric | Program) -> int:
    if isinstance(program, Symmetric):
        return program.period
    from semcheck.model.fold import race_symmetry

    return race_symmetry(program)[0]


def confined_on_period(program: Symmetric | Program, mode: str) -> Verdict | None:
    """PRG-164: `invocation-confined` proved for a single call under `hardware` when, on the run of one
    period, every remote signal and copy of the representatives is E-after its target's entry and lands
    E-before its target's exit check; None when that is not shown (or the mode is not `hardware`)."""
    from semcheck.model.happens_before import class_fold

    if mode != "hardware":
        return None
    topo = program.topology
    n, per = topo.num_cores, topo.cores_per_device
    if getattr(program, "launch_failure", None) is not None or getattr(program, "tpu_failure", None) is not None:
        return None
    k = _period(program)
    fold = class_fold(program, k) if k < topo.num_devices else None
    if fold is None and isinstance(program, Symmetric):
        return None  # DR-41 does not apply, and the whole program's run is not ours to build here
    if fold is not None:
        obs: Observer = SymmetricObserver(program, fold, (), "completion", "hardware")
        runs, reps = fold.program, fold.devices * per
        target = obs.target_of  # DR-8: a representative's target, rotated for a class member
    else:
        obs = Observer(program, (), "completion")
        runs, reps = program, n
        memo: dict = {}

        def target(core: int, pc: int) -> int:
            if (core, pc) not in memo:
                op = program.cores[core][pc]
                t = target_core(program, "hardware", core, op.device, op.core, dma=type(op) is DmaStart)
                memo[(core, pc)] = t if isinstance(t, int) else -1
            return memo[(core, pc)]
    rec = _Recorder(obs, program, reps, target)
    state = fast_run(runs, "hardware", record=False, observer=rec).state
    # DR-6's certificate: a failure-free run, no id in both tables, every arrival after the waits before it
    if obs.broken or obs.broken_counters or state.failures or (state.tables.internal & state.tables.fixed):
        return None
    if any(state.pcs[c] < len(runs.cores[c]) for c in range(reps)):
        return None  # the run of the period stops early: a deadlock is another property's, and E is partial
    landings = _landings(program, reps)
    for c, pc, is_copy in landings:
        if not rec.entered.get((c, pc), False):
            return None  # early side (PRG-111) not shown
        t = target(c, pc)
        t0 = t - t % per
        s = t0 - t0 % reps  # the rotation by whole periods that makes the target a representative
        r0 = t0 - s
        e = rec.exits.get(r0)
        if e is None:
            return None
        row = rec.clock_at_exit(r0)
        sender = (c - s) % n  # the sender's image under that rotation: its operations are c's (RUN-20)

        def before_exit(w: tuple[int, int]) -> bool:
            wc, wq = w
            return wq < e if wc == r0 else bool(row[wc] > wq)

        if not is_copy:
            ok = before_exit((sender, pc))  # a signal arrives where it happens (SIG-1)
        else:
            ok = any(before_exit(w) for w in obs.waits_after((sender, pc), "write"))  # some wait follows the write
        if not ok:
            return None  # late side (PRG-112) not shown
    where = ("" if fold is None else
             f" on the run of devices 0..{fold.devices - 1} (the program repeats every {k} devices)")
    return Verdict(PROPERTY, "proved", reason=(
        f"every remote signal and copy ({len(landings)} of the representatives) comes after its target "
        f"entered the kernel and lands before it reaches its exit check in every schedule: the "
        f"happens-before order{where} shows both (specs/programs.md PRG-164)"),
        stats={"landings": len(landings), "period": k})
