"""The happens-before pass of a program under a mode (spec DR-6, DR-7), with its accesses listed once.

`ModeAnalysis.race_order` keeps the pass; the race check (`races`) reads it, and so do the failing-run
checks (a certified pass that met no failure needs no lowering, DR-6). This module sits below the
analysis and the properties: it imports neither (the analysis hands itself in).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from semcheck.model.access import AccessEvent, Unrecorded, accesses
from semcheck.model.happens_before import reading
from semcheck.model.ops import DmaStart, Op, Program
from semcheck.model.partial_arrivals import split_positions
from semcheck.model.race import Ordered, ordered_modes
from semcheck.model.symmetric import Symmetric, with_cores

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import Analysis, ModeAnalysis


def listed(analysis: Analysis, near: int | None) -> tuple[list[AccessEvent], list[Unrecorded]]:
    """The program's accesses (near DR-5's representatives), listed once for every mode: a copy lands
    where SIG-1 says whatever the mode (ACC-1); DR-35: read off the cores that can make them."""
    def compute() -> tuple[list[AccessEvent], list[Unrecorded]]:
        program = analysis.program
        if near is not None and near == analysis.symmetry[0]:
            found = near_copies(program, near)
            if found is not None:
                return accesses(found[0], None, near=near, copies_in=found[1])
        return accesses(program, None, near=near)

    return analysis.shared(("accesses", near), compute)


def listed_ahead(analysis: Analysis) -> None:
    """RUN-52: the program's accesses listed now, as the race pass lists them (`listed`, near DR-5's
    representatives of `analysis.symmetry`), before a forked mode worker starts: both processes' race
    passes then read the one listing the worker inherits."""
    k = analysis.symmetry[0]
    listed(analysis, k if k < analysis.program.topology.num_devices else None)


def near_copies(program: Program, k: int) -> tuple[Program, dict[int, list[tuple[int, Op]]]] | None:
    """DR-35: the program with only the cores of devices `0 .. k-1` (the others left empty), and for each
    other core the copies it makes that land on those devices under DR-5's rotation by `k` devices, by
    position; None where the rotation does not tell (a copy with unrecorded regions, which `accesses`
    lists wherever it is, or a device out of range)."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    if k >= n:
        return None
    # a Symmetric of this period rotates one operation at a time (RUN-20); other cores are built already
    sym = program if isinstance(program, Symmetric) and program.period == k else None
    copies: dict[int, list[tuple[int, Op]]] = {}
    for c in range(k * per):
        for pc, op in enumerate(program.cores[c]):
            if type(op) is not DmaStart:
                continue
            if op.src_region is None or op.dst_region is None or op.src_buf is None or op.dst_buf is None:
                return None
            if op.device is None:
                continue
            if not 0 <= op.device < n:
                return None
            # device d + j*k copies to (t + j*k) mod n: into 0 .. k-1 for exactly one j (k divides n)
            j = -(op.device // k) % (n // k)
            if j:
                g = (topo.device_of(c) + j * k) * per + topo.local_core_of(c)
                copies.setdefault(g, []).append((pc, sym.rotated(op, j) if sym is not None else program.cores[g][pc]))
    # (only these are read: DR-42)
    inside = k * per
    return with_cores(program, tuple(program.cores[c] if c < inside else () for c in range(topo.num_cores))), copies


def access_lister(facts: ModeAnalysis) -> Callable[[int | None], tuple[list[AccessEvent], list[Unrecorded]]]:
    """How to list the program's accesses (`listed`); DR-32: for DR-9's split program, from the program's:
    a forerunner touches no element (its regions are empty, ACC-1) and a split copy keeps its regions, so
    they are the program's accesses with each position moved past the forerunners before it (only the
    cores with accesses near the representatives are split to find them)."""
    if facts.whole.split_of is None:
        return lambda near: listed(facts.whole, near)
    whole, parts = facts.whole.split_of

    def moved_listed(near: int | None) -> tuple[list[AccessEvent], list[Unrecorded]]:
        events, unrecorded = listed(whole, near)
        fr = parts.forerunners
        # DR-42: under DR-5's rotation every core's copies are split where its preimage's are (DR-31), so
        # its forerunners stand where those of its core on the first period stand: no other core is split
        per = near * whole.program.topology.cores_per_device if near == whole.symmetry[0] else None
        moves: dict[int, Callable[[int], int]] = {}

        def moved(c: int, pc: int) -> int:
            home = c if per is None else c % per
            if home not in moves:
                moves[home] = split_positions(fr[home])
            return moves[home](pc)

        return ([e.at_pc(moved(e.core, e.pc)) for e in events],
                [dataclasses.replace(u, pc=moved(u.core, u.pc)) for u in unrecorded])

    return moved_listed


def ordered(facts: ModeAnalysis) -> Ordered:
    """The happens-before pass (DR-6) for the analysis' mode, computed with the other interpreter mode
    when the program is to be checked in that one too (`Analysis.modes`, DR-7)."""
    planned = facts.whole.modes
    mode = facts.mode
    modes = [m for m in ("eager", "on_wait") if m in planned] if mode != "hardware" and mode in planned else [mode]
    whole = facts.whole
    runs = None if whole.symmetric else whole.traced  # DR-46: a run the maximal run recorded is not run again

    def computed() -> dict:
        out = ordered_modes(facts.program, modes, symmetry=whole.symmetry, listed=access_lister(facts), runs=runs)
        for run_mode in {reading(m)[0] for m in modes}:
            whole.read_trace(run_mode)  # read: its calls are not kept any longer
        return out

    if len(modes) == 1:
        return computed()[mode]
    return whole.shared(("race-order", "interpreter"), computed)[mode]
