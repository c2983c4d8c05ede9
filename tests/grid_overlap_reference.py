# GRID-4's `hardware_overlap` (checker/frontend/grid_copies.py) as it was before it compared each grid
# copy only with its own device's accesses, kept unchanged as the reference that
# tests/test_grid_overlap_reference.py holds the current one to.
"""GRID-4: every grid copy compared with every access of its buffer, on any device."""

from __future__ import annotations

import bisect

from semcheck.checker.frontend.call_boundary import is_boundary
from semcheck.checker.frontend.grid_copies import GridCopyLoc, grid_copy_of
from semcheck.model.ops import Access, DmaStart, Loc, Program, Region


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

    def same_device(a: int, b: int) -> bool:
        return a < 0 or b < 0 or topo.device_of(a) == topo.device_of(b)

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
            for g2, q2, op2, loc2 in mine:
                if (g2, q2) == (g, q) or not (op.write or op2.write) or not same_device(g, g2):
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
            for g2, p, region, write, is_copy, oloc in others.get(buf, ()):
                if not (op.write or write) or not same_device(g, g2) or not op.region.overlaps(region):
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
