"""PROP-8 `invocation-confined` at the grain of a `run_scoped` scope (specs/semantics/buffers.md BUF-13 .. BUF-15;
a scoped semaphore's counts: kernels.md SEM-10).

A copy that reads or writes a `run_scoped` buffer must do so inside the scope on the buffer's core:
its half on the buffer after the scope's allocation and before its end. The copies' halves are
placed as a TPU places them (DMA-5: any time after the start), which is where every mode's copy can
be; each touch is asked the two questions of the kernel-level check (`confined.decide`), with the
scope's window instead of the kernel's:

* **early** (a write into another core's scope): hold the owner core just before the scope's
  `AllocBuffer` and run the rest as far as it can (RUN-3); if the issuer gets past the start, some
  schedule lands the copy before the owner entered;
* **late**: suppress the half and run the rest; if the owner gets past the scope's `FreeBuffer`, some
  schedule runs the half after the scope ended.

A count on a scoped semaphore (SEM-10: a copy's half counting on it, a signal from another core) is asked
the same two questions; a signal's late question holds the signalling core at the signal instead.

Under `eager` / `on_wait` the verdict says what jax's interpreter does with such a copy (BUF-14): a
`KeyError` where it runs the half outside the window, a clean run where `eager` runs it inside its
start (D32). The hardware runs stand for the interpreter's only on one core per device, where the two
semantics schedule the cores alike; with more cores only where the text keeps every half inside its
window in the interpreter (PRG-210, `interpreter_keeps_inside`), else a scope touch there is unknown.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.properties.timeline import timeline
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.model.errors import ModelBug
from semcheck.model.fast import fast_run
from semcheck.model.ops import AllocBuffer, AllocSem, DmaStart, Program, Signal, Wait
from semcheck.model.run import REPLAY_LIMIT, run
from semcheck.model.scope import (ScopeTouch, interpreter_keeps_inside, interpreter_raises, scope_touches,
                                  touch_counts, unrecorded_copies)


class Starts:
    """A fast run's observer that keeps the ident of every copy it starts (a witness names a write half by it)."""

    def __init__(self) -> None:
        self.starts: dict[tuple[int, int], int] = {}

    def start(self, core: int, pc: int, ident: int) -> None:
        self.starts[(core, pc)] = ident

    def signal(self, *a: Any) -> None: ...
    def wait(self, *a: Any) -> None: ...
    def arrive(self, *a: Any) -> None: ...
    def barrier(self, *a: Any) -> None: ...
    def access(self, *a: Any) -> None: ...


PROPERTY = "invocation-confined"
HINT = ("wait for the copy inside the scope (before `run_scoped`'s body returns); for a copy into another "
        "device's scoped buffer, have the target signal that it has entered the scope before the copy starts, "
        "and wait for the copy there before the scope ends; or allocate the buffer as scratch")

SEMAPHORE_HINT = ("have the target signal a scratch semaphore once it has entered the scope before you signal or copy "
                  "onto its scoped semaphore, and wait for every count on a scoped semaphore inside its scope (a copy's "
                  "send semaphore included); or allocate the semaphore as scratch")


def _retiring_wait(program: Program, t: ScopeTouch) -> Any:
    """The first wait, after the start on the issuer, on a semaphore the copy's half counts on (DMA-2):
    the wait the kernel meant to retire it with (None: no such wait). For a count on a scoped semaphore
    (SEM-10), a wait on that semaphore."""
    op = program.cores[t.core][t.pc]
    if t.kind == "semaphore":
        sems = {op.src_sem if t.half == "read" else op.dst_sem}
    else:
        sems = {op.dst_sem} | ({op.src_sem} if op.src_sem is not None else set())
    for later in program.cores[t.core][t.pc + 1:]:
        if type(later) is Wait and later.sem in sems:
            return later
    return None


def _name(program: Program, label: str) -> str:
    """The kernel's name of a scoped buffer label (its parameter in the run_scoped body), else its site."""
    site = label.rsplit("/", 1)[0]
    return dict(program.names).get(site, site)


def _semaphore_message(program: Program, t: ScopeTouch, when: str, mode: str, owner: str) -> str:
    """SEM-10's words: a count that lands on a scoped semaphore outside its scope on `owner`."""
    op = program.cores[t.core][t.pc]
    sem = _name(program, t.label)
    what = "signal" if t.half == "signal" else f"copy's {t.half} half"
    scope = f"run_scoped scope of semaphore '{sem}' (line {program.cores[t.owner][t.enter].loc.line}) on {owner}"
    if when == "early":
        msg = f"the {what} started at {op.loc} counts on '{sem}' and can land before {owner} has entered the {scope}"
    else:
        wait = _retiring_wait(program, t) if t.half != "signal" else None
        retired = ("" if t.half == "signal" else f": the wait at {wait.loc} that retires it can come after the scope ends"
                   if wait is not None else ": no wait after it retires it")
        msg = f"the {what} started at {op.loc} counts on '{sem}' and can land after the {scope} has ended{retired}"
    msg += f" ({owner} allocates semaphores in another run_scoped region too, which a TPU may give the same slot)"
    if mode != "hardware":
        msg += (f"; under {mode} jax's interpreter raises nothing there (it frees no semaphore and gives each entry "
                "of a scope fresh ids, SEM-9), but on a TPU the scope's semaphore slot belongs to whichever scope "
                "is allocated there then (SEM-10)")
    return msg


def _message(program: Program, t: ScopeTouch, when: str, mode: str) -> tuple[str, dict[str, Any]]:
    topo = program.topology
    op = program.cores[t.core][t.pc]
    alloc = program.cores[t.owner][t.enter]
    buf = _name(program, t.label)
    if t.kind == "semaphore":
        owner = f"device {topo.device_of(t.owner)}" + (f" core {topo.local_core_of(t.owner)}"
                                                       if topo.cores_per_device > 1 else "")
        wait = _retiring_wait(program, t) if t.half != "signal" else None
        return _semaphore_message(program, t, when, mode, owner), {
            "raises": False, "scope": buf, "label": t.label, "owner": t.owner, "scope_line": alloc.loc.line,
            "copy_line": op.loc.line, "half": t.half, "when": when, "owner_device": topo.device_of(t.owner),
            "wait_line": wait.loc.line if wait is not None else None, "rule": "SEM-10"}
    what = "reading" if t.half == "read" else "writing"
    owner = f"device {topo.device_of(t.owner)}" + (f" core {topo.local_core_of(t.owner)}"
                                                   if topo.cores_per_device > 1 else "")
    scope = f"run_scoped scope of '{buf}' (line {alloc.loc.line}) on {owner}"
    wait = _retiring_wait(program, t)
    if when == "early":
        msg = f"the copy at {op.loc} {what} '{buf}' can land before {owner} has entered the {scope}"
    else:
        retired = (f"the wait at {wait.loc} that retires it can come after the scope ends" if wait is not None
                   else "no wait after it retires it")
        msg = f"the copy at {op.loc} {what} '{buf}' can still be in flight when the {scope} ends: {retired}"
    if mode != "hardware":
        if interpreter_raises(program, t, mode):
            msg += (f"; under {mode} jax's interpreter can raise KeyError(('{alloc.memory_space}', <buffer id>, "
                    f"{topo.device_of(t.owner)}, {topo.local_core_of(t.owner)})) where it runs the copy's {t.half} "
                    "half outside the scope (BUF-14)")
        else:
            msg += (f"; under {mode} jax's interpreter runs the copy's {t.half} half inside the scope, so no run "
                    "fails there (BUF-14, D32), but on a TPU the scope's memory is reused (BUF-15)")
    details = {"raises": mode != "hardware" and interpreter_raises(program, t, mode), "scope": buf, "label": t.label,
               "owner": t.owner, "scope_line": alloc.loc.line, "copy_line": op.loc.line, "half": t.half,
               "when": when, "owner_device": topo.device_of(t.owner),
               "wait_line": wait.loc.line if wait is not None else None, "rule": "BUF-13"}
    return msg, details


def _witness(program: Program, t: ScopeTouch, run_out: Any, when: str, mode: str,
             starts: dict[tuple[int, int], int] | None = None) -> Verdict:
    """The violation, its schedule replayed on the hardware semantics (the halves are actors there)."""
    sched = list(run_out.schedule)
    if when == "late" and t.half == "signal":  # the held issuer now signals (SEM-10)
        sched.append(("core", t.core))
    elif when == "late":
        ident = (starts or {}).get((t.core, t.pc))
        if ident is None:
            return Verdict(PROPERTY, "unknown", reason=f"the copy at {program.cores[t.core][t.pc].loc} may touch "
                           "its run_scoped buffer outside the scope; its witness could not be built")
        sched.append(("dma_read" if t.half == "read" else "dma_write", ident))
    msg, details = _message(program, t, when, mode)
    op = program.cores[t.core][t.pc]
    alloc = program.cores[t.owner][t.enter]
    stats: dict[str, Any] = {}
    if mode != "hardware":  # the witness is a hardware schedule: replay it here, where its halves are actors
        if len(sched) <= REPLAY_LIMIT:
            try:
                pcs = run(program, "hardware", tuple(sched), finish=False).pcs
            except ModelBug as e:
                raise ModelBug(f"{PROPERTY} scope witness does not replay on the model: {e}") from e
        else:
            pcs = list(run_out.state.pcs)
        details["terminal_pcs"] = list(pcs)
        details["timeline"] = timeline(program, pcs, sorted({program.topology.device_of(c) for c in (t.core, t.owner)}))
        stats["replayed"] = True
    return Verdict(PROPERTY, "violated", stats=stats, witness=Witness(
        message=msg, schedule=tuple(sched), locs=(op.loc, alloc.loc), details=details,
        hint=SEMAPHORE_HINT if t.kind == "semaphore" else HINT))


def has_scopes(program: Any) -> bool:
    """Whether BUF-13 has anything to ask of the program: a run_scoped buffer a copy touches (of a
    Symmetric, any run_scoped buffer of its representatives)."""
    if not isinstance(program, Program):
        reps = getattr(program, "representatives", ())
        if any(type(op) is AllocBuffer and op.scope == "core" for ops in reps for op in ops):
            return True
        sems = {op.label for ops in reps for op in ops if type(op) is AllocSem and op.scope == "core"}
        return bool(sems) and any(_counts_on(op, sems) for ops in reps for op in ops)
    return bool(scope_touches(program) or unrecorded_copies(program))


def _counts_on(op: Any, sems: set[str]) -> bool:
    """SEM-10: whether `op` may land a count on one of the scoped semaphores `sems` from outside the body
    that names it (a copy's half, a signal to another core)."""
    t = type(op)
    if t is Signal:
        return op.sem.label in sems and (op.device is not None or op.core is not None)
    return t is DmaStart and (op.dst_sem.label in sems or (op.src_sem is not None and op.src_sem.label in sems))


MAX_RUNS = 2048
"""The held runs one program's scope check may make (two per touch at most); past it, unknown."""


@dataclasses.dataclass
class ScopeRuns:
    """What the held runs of BUF-13 found, the same in every mode (they are hardware runs): the touches
    asked, the violations (touch, "early" | "late", the run, its copies' idents) and the touches a
    failing run left undecided (touch, why)."""

    touches: int
    found: list[tuple[ScopeTouch, str, Any, dict]]
    unsure: list[tuple[ScopeTouch, str]]
    period: int
    too_many: str = ""


def scope_runs(program: Program) -> ScopeRuns | None:
    """BUF-13's held runs for every copy half on a run_scoped buffer (module docstring); None when there is
    none. Where rotating the devices by a period maps the program onto itself, the touches of the first
    period's issuers stand for all (PRG-131's argument: their held runs are rotations of each other)."""
    from semcheck.model.symmetry import Rotation

    touches = scope_touches(program)
    blind = unrecorded_copies(program)
    if not touches and not blind:
        return None
    topo = program.topology
    if blind:
        return ScopeRuns(len(touches), [], [], topo.num_devices, too_many=(
            f"the copy at {blind[0].loc} has buffers the front end did not record (ACC-3), and the kernel has "
            "run_scoped buffers it may touch outside their scope (BUF-13)"))
    period = Rotation.observe(program).devices if topo.num_devices > 2 else topo.num_devices
    asked = [t for t in touches if topo.device_of(t.core) < period]
    out = ScopeRuns(len(touches), [], [], period)
    runs = len({(t.owner, t.enter) for t in asked if t.owner != t.core}) + sum(t.free is not None for t in asked)
    if runs > MAX_RUNS:
        out.too_many = (f"{runs} held runs would be needed for the {len(asked)} copy halves on run_scoped buffers "
                        f"(at most {MAX_RUNS}, BUF-13)")
        return out
    early_runs: dict[tuple[int, int], Any] = {}
    for t in asked:
        op = program.cores[t.core][t.pc]
        if t.enter is None:
            what = "counts on" if t.kind == "semaphore" else "writes"
            out.unsure.append((t, f"the copy at {op.loc} {what} '{_name(program, t.label)}' on a core that never "
                                  "allocates it"))
            continue
        if t.owner != t.core:
            key = (t.owner, t.enter)
            if key not in early_runs:
                early_runs[key] = fast_run(program, "hardware", hold={t.owner: t.enter})
            early = early_runs[key]
            if early.state.pcs[t.core] > t.pc:
                if early.kind in ("completed", "deadlock"):
                    out.found.append((t, "early", early, {}))
                else:
                    out.unsure.append((t, f"the copy at {op.loc} may land before its target enters the scope (a "
                                          "run can fail first)"))
        if t.free is not None and t.half == "signal":  # SEM-10: hold the signal back; can the owner leave?
            late = fast_run(program, "hardware", hold={t.core: t.pc})
            if late.state.pcs[t.owner] > t.free:
                if late.kind in ("completed", "deadlock"):
                    out.found.append((t, "late", late, {}))
                else:
                    out.unsure.append((t, f"the signal at {op.loc} may land after its target left the scope (a "
                                          "run can fail first)"))
        elif t.free is not None:
            seen = Starts()
            late = fast_run(program, "hardware", suppress=frozenset({(t.core, t.pc, t.half)}), observer=seen)
            # (a copy that never starts while its half is held back lands nowhere)
            if late.state.pcs[t.core] > t.pc and late.state.pcs[t.owner] > t.free:
                if late.kind in ("completed", "deadlock"):
                    out.found.append((t, "late", late, seen.starts))
                else:
                    out.unsure.append((t, f"the copy at {op.loc} may touch its run_scoped buffer after the scope "
                                          "ends (a run can fail first)"))
    return out


def scope_verdict(program: Any, mode: str, runs: ScopeRuns | None = None) -> Verdict | None:
    """BUF-13 under `mode` from the held runs (`scope_runs`, made here when not given); None when no copy
    touches a run_scoped buffer. In the interpreter's modes the witness is, where there is one, a touch the
    interpreter can raise at (BUF-14: that decides whether anything else of the mode stands)."""
    if not isinstance(program, Program):  # a Symmetric (RUN-20): its scopes would need every core's run
        if has_scopes(program):
            return Verdict(PROPERTY, "unknown", reason=(
                "the kernel allocates run_scoped buffers and is decided on one period of its devices, where "
                "the scope check (BUF-13) is not made: check it at fewer devices"))
        return None
    runs = runs if runs is not None else scope_runs(program)
    if runs is None:
        return None
    if runs.too_many:
        return Verdict(PROPERTY, "unknown", reason=runs.too_many)
    if mode != "hardware" and program.topology.cores_per_device > 1 and not all(
            interpreter_keeps_inside(program, t, mode) for t in scope_touches(program)
            if touch_counts(program, t, mode)):  # PRG-210
        return Verdict(PROPERTY, "unknown", reason=(
            f"{runs.touches} copy half(s) touch run_scoped buffers, and with several cores per device the "
            f"interpreter's schedules are not the hardware runs the scope check reads (BUF-13)"))
    found = [x for x in runs.found if touch_counts(program, x[0], mode)]  # ACC-67, ACC-68
    unsure = [x for x in runs.unsure if touch_counts(program, x[0], mode)]
    raising = [x for x in found if interpreter_raises(program, x[0], mode)]
    maybe = [why for t, why in unsure
             if t.kind == "buffer" and (t.enter is None or interpreter_raises(program, t, mode))]
    if found:
        t, when, run_out, starts = (raising or found)[0]
        v = _witness(program, t, run_out, when, mode, starts)
        if not raising and maybe:  # undecided elsewhere, where the interpreter may raise
            v = dataclasses.replace(v, stats={**v.stats, "unsure_raises": maybe[0]})
        return v
    if unsure:
        return Verdict(PROPERTY, "unknown", reason="; ".join(why for _, why in unsure[:2]),
                       stats={"raises": bool(maybe)})
    sym = (f"; those of devices 0..{runs.period - 1} checked, the program repeating every {runs.period} devices "
           "(PRG-131)" if runs.period < program.topology.num_devices else "")
    return Verdict(PROPERTY, "proved", reason=(
        f"every copy half on a run_scoped buffer and every count on a run_scoped semaphore ({runs.touches}) lands "
        f"inside its scope on its core (BUF-13, SEM-10){sym}"))


def _raises(v: Verdict) -> bool:
    return v.witness is not None and bool(v.witness.details.get("raises"))


def interpreter_failure(scopes: Verdict | None, mode: str) -> str | None:
    """BUF-14: under an interpreter mode, why a run may raise KeyError at a run_scoped buffer (the scope
    verdict is violated by a half the interpreter runs outside its window, or undecided); None when
    none can, or under hardware (a TPU raises nothing there: BUF-15)."""
    if mode == "hardware" or scopes is None or scopes.holds:
        return None
    if scopes.verdict == "unknown":
        if not scopes.stats.get("raises", True):
            return None
        return f"a copy may touch a run_scoped buffer outside its scope, where jax's interpreter raises ({scopes.reason})"
    if not scopes.witness.details.get("raises"):
        maybe = scopes.stats.get("unsure_raises")
        return None if maybe is None else (f"a copy may touch a run_scoped buffer outside its scope, where jax's "
                                           f"interpreter raises ({maybe})")
    return (f"{scopes.witness.message.split('; under', 1)[0]}, and jax's interpreter can raise KeyError then (BUF-14); "
            "semcheck does not follow a run past that failure")


def combine(kernel: Verdict, scopes: Verdict | None) -> Verdict:
    """PROP-8 over the kernel's window and its scopes': a violation of either, else unknown, else proved."""
    if scopes is None or kernel.verdict == "violated":
        return kernel
    if not scopes.holds:
        return scopes
    if not kernel.holds:
        return kernel
    # REP-20: proved when either part shows something; vacuous only when neither reaches what it is about
    kind = "proved" if "proved" in (kernel.verdict, scopes.verdict) else "vacuous"
    return Verdict(PROPERTY, kind, reason=f"{kernel.reason}; {scopes.reason}")


__all__ = ["combine", "has_scopes", "interpreter_failure", "scope_verdict"]
