"""Where a kernel behaves differently in jax's interpret mode and on a TPU, and why.

semcheck decides every property under three semantics: the interpreter's two
DMA modes (`eager`, `on_wait`) and the hardware. A property proved under one
and violated under another is a place where the kernel behaves differently:
an interpret-mode run would hang or fail where a TPU would not, or the other
way round. The report says so, with the interpreter divergences
(specs/semantics/divergences.md) the kernel exercises that can explain it:

* D1: a signal without `core_index` from a core other than core 0 of its
  device (the interpreter delivers it to core 0, a TPU to the signalling core);
* D3/D4: DMAs (under on_wait a DMA runs only when something waits on its
  semaphore, the last queued first; on a TPU every DMA completes by itself);
* D5-D7: semaphore ids (the interpreter numbers semaphores from 2000, as
  int16, never frees them, and keeps the collective id in a table of its own;
  a TPU allocates by site and has none of those failures);
* D20: a DMA signalling a non-DMA (REGULAR or barrier) semaphore (the
  interpreter adds the copy's bytes, a TPU adds 1: DMA-6);
* D12: a primitive the interpreter cannot compile for the CPU, `pl.semaphore_read` (it fails before
  the kernel runs, a TPU runs it: LAUNCH-3);
* D21: a semaphore output (the interpreter fails at launch, a TPU runs it: LAUNCH-2).
* D22: a load or store through a reshape/bitcast/transpose view (the interpreter raises there, a TPU
  runs it: ACC-6).
* D24: a grid step that comes back to an output block the grid had left (the interpreter raises
  after it, a TPU writes the block back again: GRID-3).
* D33: a load, store or copy of a window the interpreter refuses (it raises there, ACC-10; a TPU is not
  predicted to).
* ERR-27: a copy, load or store of no element (a size-0 window), which jax's race detector takes to meet a
  window its start lies in (specs/semantics/buffers.md; on a TPU it touches nothing), for race-free;
* ERR-28: a masked store, which jax's race detector takes to write its whole indexed window (on a TPU only
  the mask's true elements are written), for race-free;
* D25: a program of several calls (the interpreter synchronises all devices at each call's start and
  end, a TPU does not: PRG-110; invocation-confined cannot be violated there).

What the program exercises is found statically in the verify child
(`exposures`, sent with each result); the report pairs it with the verdicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from semcheck.model.errors import EarlierFailure, RevisitedBlock, Untranslatable, WindowOutOfBounds
from semcheck.model.ops import INTERPRETER_MODES, Access, DmaStart, Loc, Op, Program, Signal

CAUSES = {
    "D1": "in interpret mode a signal without core_index goes to core 0 of the target device; "
          "on a TPU it goes to the signalling core's own index",
    "D3-D4": "in on_wait mode a DMA runs only when a wait on its semaphore needs it, the last queued first; "
             "in eager mode it runs when started; on a TPU every DMA completes on its own",
    "D5-D7": "only the interpreter numbers semaphores (from 2000, as int16, never freed, with the collective "
             "id in a table of its own); a TPU allocates them by site",
    "D20": "a copy signalling a REGULAR (or barrier) semaphore adds its byte count to it in interpret mode "
           "and 1 on a TPU",
    "D12": "the interpreter fails before the kernel runs on a primitive it cannot compile for the CPU "
           "(pl.semaphore_read); a TPU runs it",
    "D21": "the interpreter fails at launch on a semaphore output of the pallas_call; a TPU runs it",
    "D22": "the interpreter raises at a load or store through a reshape, bitcast, transpose or memory-space "
           "view of a ref (it indexes only through indexers); a TPU runs it",
    "D24": "the interpreter raises after a grid step that comes back to an output block the grid had left; "
           "a TPU writes the block back again",
    "D33": "the interpreter raises at a load, store or copy of a window the buffer does not hold (a read of "
           "one it does not hold whole, a zero-size one starting at a dimension's end included; a write past an "
           "end); a TPU's DMA engine and loads are not checked that way",
    "D25": "the interpreter runs every call of a program on a fresh manager and keeps all devices in a call until "
           "every device reached its end; on a TPU a device enters and leaves a call on its own, so a remote "
           "signal or copy can land outside the call and barrier counts carry from call to call",
    "D30": "the interpreter uses no barrier-semaphore tags or auto-assigned collective ids and fails at "
           "get_barrier_semaphore of a kernel without collective_id; on a TPU jax picks the kernel's id",
    "D31": "jax's TPU lowering refuses a call with a collective id and no barrier semaphore (an auto-assigned "
           "id under jax_pallas_auto_assign_collective_ids='yes' or 'override', or a manual one), so nothing of "
           "its computation runs on a TPU; the interpreter ignores collective ids it does not use and runs it",
    "ERR-27": "jax's race detector reports two windows of one buffer as meeting when one's start lies inside the "
              "other, a window of no element (a copy, load or store of size 0) included, though they share no "
              "element; on a TPU no data is shared",
    "ERR-28": "jax's race detector takes a masked store to write its whole indexed window, not only the mask's "
              "true elements, so it reports a race with an access of the window's other elements; on a TPU no "
              "data is shared",
    "D28": "the interpreter re-raises an earlier call's failure at the dispatch of the next computation and "
           "runs none of its calls (jax's ordered-effect token); a TPU runs them",
}
ID_PROPERTIES = ("id-disjoint", "id-int16", "id-agreement")
MAX_LOCS = 3


@dataclasses.dataclass(frozen=True)
class Exposure:
    """A divergence the program exercises, with (a few of) the kernel lines that do."""

    code: str
    locs: tuple[Loc, ...] = ()


@dataclasses.dataclass(frozen=True)
class Difference:
    """One property of one target x device count, proved under some modes and violated under others."""

    target: str
    devices: int
    property: str
    verdicts: dict[str, str]  # mode -> "proved" | "vacuous" | "violated"
    causes: tuple[Exposure, ...]

    def describe(self) -> str:
        """`deadlock-free: violated under eager, on_wait; proved on hardware`."""
        parts = []
        for kind in ("violated", "proved", "vacuous"):  # vacuous is said as such, never as proved (REP-20)
            modes = [m for m, v in self.verdicts.items() if v == kind]
            if modes:
                parts.append(f"{kind} {'on' if modes == ['hardware'] else 'under'} {', '.join(modes)}")
        return f"{self.property}: " + "; ".join(parts)


def exposures(program: Program, views: Sequence[Op] | None = None,
              empty: Sequence[Loc] | None = None, masked: Sequence[Loc] | None = None) -> tuple[Exposure, ...]:
    """The divergences of `CAUSES` that `program` exercises (static: whether a run reaches them is not asked).

    `views`: the operations through a view the interpreter cannot index (ERR-9), and `empty`: the lines of
    the copies and accesses of no element (ERR-27, `no_element_lines`), and `masked`: the masked stores whose
    window is more than their elements (ERR-28, `masked_window_lines`), when the caller has them (a fold
    without accesses has none of its program's)."""
    topo = program.topology
    d1: list[Loc] = []
    dma: list[Loc] = []
    typed: list[Loc] = []  # DMAs signalling a non-DMA semaphore (D20)
    ids = False
    for c, ops in enumerate(program.cores):
        local = topo.local_core_of(c)
        for op in ops:
            t = type(op)
            if t is Signal and op.core is None and local != 0:  # on core 0 both semantics agree
                d1.append(op.loc)
            elif t is DmaStart:
                dma.append(op.loc)
                if op.dst_sem_type != "dma" or (op.src_sem is not None and op.src_sem_type != "dma"):
                    typed.append(op.loc)
            elif op.hands_out_ids:
                ids = True
    out = []
    if d1:
        out.append(Exposure("D1", _first_lines(d1)))
    if dma:
        out.append(Exposure("D3-D4", _first_lines(dma)))
    if ids:
        out.append(Exposure("D5-D7"))
    if typed:
        out.append(Exposure("D20", _first_lines(typed)))
    # ERR-9: the first load or store the interpreter cannot index, else the first such copy
    if views is None:
        views = [op for ops in program.cores for op in ops
                 if (type(op) is Access or type(op) is DmaStart) and op.view_error is not None]
    revisits = [op for op in views if isinstance(op.view_error, RevisitedBlock)]
    windows = [op for op in views if isinstance(op.view_error, WindowOutOfBounds)]
    views = [op for op in views if not isinstance(op.view_error, (RevisitedBlock, WindowOutOfBounds))]
    if views:
        first = min(views, key=lambda op: type(op) is not Access)
        out.append(Exposure("D22", (first.loc,) if first.loc.line > 0 else ()))
    if revisits:
        out.append(Exposure("D24", (revisits[0].loc,) if revisits[0].loc.line > 0 else ()))
    if windows:
        out.append(Exposure("D33", _first_lines([op.loc for op in windows])))
    if empty is None:
        empty = no_element_lines(program.cores)
    if empty:
        out.append(Exposure("ERR-27", _first_lines(empty)))
    if masked is None:
        masked = masked_window_lines(program.cores)
    if masked:
        out.append(Exposure("ERR-28", _first_lines(masked)))
    if program.collective_id is None:  # PRG-125: only jax's TPU lowering picks an id (a tag, an auto mode)
        picked = [op.loc for ops in program.cores for op in ops if op.fetches_barrier]
        if picked:
            out.append(Exposure("D30", _first_lines(picked)))
    if program.tpu_failure is not None:
        out.append(Exposure("D31"))  # LAUNCH-7: jax's TPU lowering refuses the call; the interpreter runs it
    if isinstance(program.launch_failure, EarlierFailure):
        out.append(Exposure("D28"))  # PRG-11: the call never starts after an earlier call's failure
    elif program.launch_failure is not None:
        out.append(Exposure("D12") if isinstance(program.launch_failure, Untranslatable) else Exposure("D21"))
    return tuple(out)


def no_element_lines(cores: Sequence[Sequence[Op]]) -> list[Loc]:
    """ERR-27: the lines of the copies, loads and stores of no element that jax's race detector sees."""
    return [op.loc for ops in cores for op in ops if _no_element(op)]


def masked_window_lines(cores: Sequence[Sequence[Op]]) -> list[Loc]:
    """ERR-28: the lines of the masked stores jax's race detector takes to write more than their elements."""
    return [op.loc for ops in cores for op in ops if type(op) is Access and op.region.window is not None]


def _no_element(op: Op) -> bool:
    """ERR-27: whether `op` is a copy, load or store of no element that jax's race detector sees."""
    t = type(op)
    if t is Access:  # a masked store of no element is ERR-28's: the detector sees its whole window
        return op.region.empty and op.view_error is None and op.region.window is None
    if t is DmaStart:
        return op.view_error is None and any(r is not None and r.empty for r in (op.src_region, op.dst_region))
    return False


def _first_lines(locs: Sequence[Loc]) -> tuple[Loc, ...]:
    seen = dict.fromkeys(loc for loc in locs if loc.line > 0)
    return tuple(list(seen)[:MAX_LOCS])


def differences(results: Sequence[Any]) -> list[Difference]:
    """Every property whose proved/violated verdict depends on the mode, per target x device count.

    `results` are `semcheck.checker.run.request.Result`s; unknown verdicts say nothing either way and
    are left out. Causes: the exercised divergences that can explain the difference -- D5-D7 for
    the id properties, and for any property the interpreter and the hardware disagree on when
    an id property is violated in the interpreter; D1 for any property they disagree on; D3-D4
    when eager and on_wait disagree (they differ only in when DMAs run); D20 for any property the
    interpreter and the hardware disagree on, and D12, D21, D22, D24 and D33 likewise; ERR-27 and ERR-28 for
    race-free when the interpreter and the hardware disagree on it.
    """
    groups: dict[tuple[str, int], list[Any]] = {}
    for r in results:
        groups.setdefault((r.target, r.devices), []).append(r)
    out = []
    for (target, n), rs in groups.items():
        exposed = {e.code: e for r in rs for e in r.program.get("exposures", ())}
        # an id the interpreter hands out wrongly sends later signals to other semaphores
        ids_broken = any(v.verdict == "violated" and v.property in ID_PROPERTIES
                         for r in rs if r.dma_mode in INTERPRETER_MODES for v in r.verdicts)
        props = list(dict.fromkeys(v.property for r in rs for v in r.verdicts))
        for prop in props:
            # unknown says nothing either way, nor does a mode the interpreter cannot run (REP-21); proved and
            # vacuous both hold, so only a violation against either is a difference
            by_mode = {r.dma_mode: v.verdict for r in rs for v in r.verdicts
                       if v.property == prop and v.verdict in ("proved", "vacuous", "violated")}
            if "violated" not in by_mode.values() or set(by_mode.values()) == {"violated"}:
                continue
            interp = {by_mode[m] == "violated" for m in INTERPRETER_MODES if m in by_mode}
            hw = by_mode["hardware"] == "violated" if "hardware" in by_mode else None
            against_hw = hw is not None and bool(interp - {hw})
            causes = []
            if "D5-D7" in exposed and (prop in ID_PROPERTIES or (against_hw and ids_broken)):
                causes.append(exposed["D5-D7"])
            if "D1" in exposed and against_hw:
                causes.append(exposed["D1"])
            if "D3-D4" in exposed and len(interp) > 1:  # the interpreter's two modes differ only in DMAs
                causes.append(exposed["D3-D4"])
            for code in ("D12", "D20", "D21", "D22", "D24", "D25", "D28", "D30", "D31", "D33"):
                if code in exposed and against_hw:
                    causes.append(exposed[code])
            for code in ("ERR-27", "ERR-28"):
                if code in exposed and against_hw and prop == "race-free":
                    causes.append(exposed[code])
            out.append(Difference(target, n, prop, by_mode, tuple(causes)))
    return out


def difference_json(d: Difference) -> dict[str, Any]:
    """The JSON form (specs/report-schema.json, `differences[]`)."""
    return {
        "target": d.target,
        "devices": d.devices,
        "property": d.property,
        "verdicts": dict(d.verdicts),
        "causes": [
            {"divergence": e.code, "explanation": CAUSES[e.code],
             "locations": [{"file": loc.file, "line": loc.line, "text": loc.text} for loc in e.locs]}
            for e in d.causes
        ],
    }
