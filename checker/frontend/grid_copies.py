"""The grid's own block copies as they appear in a lowered program (GRID-1 .. GRID-4); no jax here.

`block_copies` lowers, for every BlockSpec'd operand, the pipeline's copy-in
before a grid step and its write-back after one as `Access` ops of the core
(GRID-1); each carries a `GridCopyLoc`: the pallas_call's line, plus which
operand, which copy and which grid step, so that a race witness names the
BlockSpec and the step. `hardware_overlap` is GRID-4: where a TPU's
asynchronous pipeline (copy-in of the next step and write-back of the last
one overlapping the body) could order an access differently from the
interpreter's synchronous copies, a proof of race-freedom under `hardware`
does not stand.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
from operator import itemgetter

from semcheck.checker.frontend.call_boundary import is_boundary
from semcheck.model.ops import Access, DmaStart, Loc, Program, Region


@dataclasses.dataclass(frozen=True)
class GridCopyLoc(Loc):
    """The location of one grid copy: the pallas_call's line, and what the copy is (GRID-1).

    `kind` is "in" (copy-in before step `step`) or "out" (write-back after it); `step` counts the
    core's grid steps from 0; `hbm` says whether the access is the copy's HBM side (the array's
    block) or its VMEM side (the kernel's block buffer).
    """

    what: str = ""
    operand: str = ""
    kind: str = "in"
    step: int = 0
    hbm: bool = False
    parallel: tuple[int, ...] = ()  # the step's coordinates along the grid's parallel dimensions
    split_forced: bool = True  # every split of the parallel steps between the cores gives each at most one
    shared: str = ""  # two steps at different parallel coordinates that touch one block (GRID-4), if any
    call: int = 0  # the call of a composed program the copy belongs to (PRG-124: pipelines end with their call)


_first = itemgetter(0)


def grid_copy_of(op: object) -> GridCopyLoc | None:
    """The grid copy an op is, or None."""
    loc = getattr(op, "loc", None)
    return loc if type(op) is Access and isinstance(loc, GridCopyLoc) else None


def hardware_overlap(program: Program) -> str | None:
    """GRID-4: why the interpreter's synchronous grid copies may not order an access as a TPU's
    pipeline does, or None when they order everything alike (the module docstring)."""
    topo = program.topology
    copies: dict[str, list[tuple[int, int, Access, GridCopyLoc]]] = {}
    marks: dict[int, tuple[list[int], list[GridCopyLoc]]] = {}
    for g, ops in enumerate(program.cores):
        for q, op in enumerate(ops):
            loc = grid_copy_of(op)
            if loc is None:
                continue
            pos, locs = marks.setdefault(g, ([], []))
            pos.append(q)
            locs.append(loc)
            if loc.hbm:
                copies.setdefault(op.buf, []).append((g, q, op, loc))
    if not copies:
        return None
    for mine in copies.values():
        if mine[0][3].shared:  # the call's parallel steps share a block: a TPU may split them across cores
            return mine[0][3].shared
    # every other access of those buffers: (core, position, region, writes, is a copy half, loc)
    others: dict[str, list[tuple[int, int, Region, bool, bool, Loc]]] = {}
    for g, ops in enumerate(program.cores):
        for p, op in enumerate(ops):
            t = type(op)
            if t is Access and op.buf in copies and grid_copy_of(op) is None:
                if is_boundary(op):
                    continue  # a use outside the call (PRG-120): the pipeline's copies are done by then
                others.setdefault(op.buf, []).append((g, p, op.region, op.write, False, op.loc))
            elif t is DmaStart:
                if op.src_buf in copies and op.src_region is not None:
                    others.setdefault(op.src_buf, []).append((g, p, op.src_region, False, True, op.loc))
                if op.dst_buf in copies and op.dst_region is not None:
                    # a remote copy lands on another device's buffer of this label: compared on every device
                    where = g if op.device is None else -1
                    others.setdefault(op.dst_buf, []).append((where, p, op.dst_region, True, True, op.loc))
                elif op.dst_buf in copies:
                    return f"the copy at {op.loc} writes {op.dst_buf} at places semcheck did not record"

    # Only accesses of one device can meet (a remote copy's landing, core -1, meets every device's):
    # each copy is compared with its device's, in the program's order, so the first reason found is
    # the one comparing it with every access would find.
    device_of = topo.device_of
    copies_on: dict[str, dict[int, list[tuple[int, int, Access, GridCopyLoc]]]] = {}
    for buf, mine in copies.items():
        on_device = copies_on[buf] = {}
        for e in mine:
            on_device.setdefault(device_of(e[0]), []).append(e)
    others_on: dict[str, dict[int, list]] = {}
    landing: dict[str, list] = {}
    for buf, theirs in others.items():
        local = others_on[buf] = {}
        for i, e in enumerate(theirs):
            (local.setdefault(device_of(e[0]), []) if e[0] >= 0 else landing.setdefault(buf, [])).append((i, e))

    def others_meeting(buf: str, g: int):
        local, remote = others_on.get(buf, {}).get(device_of(g), ()), landing.get(buf, ())
        return (e for _, e in (heapq.merge(local, remote, key=_first) if remote else local))

    def after_window_of_out(g: int, step: int, call: int, p: int) -> bool:
        # a write-back of step i is waited at the end of step i + 1: an op of step >= i + 2 is after it
        pos, locs = marks[g]
        k = bisect.bisect_left(pos, p) - 1
        return k >= 0 and (locs[k].call != call or locs[k].step >= step + 2)  # a later call's: after the exit

    def before_window_of_in(g: int, step: int, call: int, p: int) -> bool:
        # a copy-in of step j is started before the body of step j - 1: an op before that body is before it
        pos, locs = marks[g]
        k = bisect.bisect_right(pos, p)
        if k >= len(locs):
            return False
        r = locs[k]
        return r.call != call or r.step <= step - 2 or (r.step == step - 1 and r.kind == "in")  # an earlier call

    for buf, mine in copies.items():
        for g, q, op, loc in mine:
            for g2, q2, op2, loc2 in copies_on[buf][device_of(g)]:
                if (g2, q2) == (g, q) or not (op.write or op2.write):
                    continue
                if not op.region.overlaps(op2.region) or loc2.call != loc.call:
                    continue  # PRG-124: a call's pipeline is done before the next call's starts
                if g2 != g:
                    return f"{loc.what} and {loc2.what} (on another core) touch the same elements of {buf}"
                if topo.cores_per_device > 1 and loc.parallel != loc2.parallel:
                    return (f"{loc.what} and {loc2.what} touch the same elements of {buf}, and a TPU splits the "
                            "grid's parallel dimensions between its cores its own way: it may run the two steps on "
                            "different cores")
                # a later write-back, or a later copy-in of what this one wrote, inside its window: a write-back
                # of step i + 2 starts after the wait; a copy-in of step j starts in step j - 1
                if loc.kind == "out" and q2 > q and loc2.step - (loc2.kind == "in") < loc.step + 2:
                    return f"{loc2.what} touches the elements {loc.what} wrote, which a TPU may still be writing"
            for g2, p, region, write, is_copy, oloc in others_meeting(buf, g):
                if not (op.write or write) or not op.region.overlaps(region):
                    continue
                what = "the copy started" if is_copy else "the access"
                if g2 != g:
                    return f"{what} at {oloc} and {loc.what} touch the same elements of {buf} from different cores"
                if loc.kind == "out":
                    if p > q and not after_window_of_out(g, loc.step, loc.call, p):
                        return (f"{what} at {oloc} comes after {loc.what}, which a TPU may still be writing "
                                "during the next grid step")
                elif p < q and (is_copy or not before_window_of_in(g, loc.step, loc.call, p)):
                    return (f"{what} at {oloc} comes before {loc.what}, which a TPU starts while the previous "
                            "grid step runs")
    return None


def split_dependent(program: Program, first: object, second: object) -> str | None:
    """GRID-4: why a race between two grid copies found on the interpreter's split of the parallel
    steps between cores may not happen on a TPU, which splits them its own way; None when it does."""
    topo = program.topology
    a, b = (program.cores[e.core][e.pc] for e in (first, second))
    la, lb = grid_copy_of(a), grid_copy_of(b)
    if la is None or lb is None or first.core == second.core or topo.device_of(first.core) != topo.device_of(second.core):
        return None
    if la.split_forced or la.parallel == lb.parallel:
        return None
    return (f"{la.what} and {lb.what} race where jax's interpreter runs the two steps on different cores; a TPU "
            "splits the grid's parallel dimensions between its cores its own way and may run both on one")


__all__ = ["GridCopyLoc", "grid_copy_of", "hardware_overlap", "split_dependent"]
