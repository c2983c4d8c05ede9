"""Data accesses of a program and which pairs of them conflict (spec rules ACC-1 .. ACC-3).

An *access* is a kernel load or store (`Access` op) or one half of a DMA: its
read of the source region on the issuing core's buffer, or its write of the
destination region on the target core's buffer. Accesses name buffers by
allocation label; `buffer_of` turns a (core, label) into the buffer instance
the label denotes there (BUF-8: HBM and ANY buffers are one per device, other
spaces one per core). Buffers are keyed by allocation label, not by the
interpreter's buffer id: a TPU reuses a `run_scoped` buffer's memory in the
next iteration, so the executions of one allocation site are one buffer (ACC-1, BUF-15).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, TypeVar

from semcheck.model.buffer import SHARED_SPACES
from semcheck.model.detector_windows import detector_windows_meet
from semcheck.model.ops import Access, AllocBuffer, DmaMode, DmaStart, Loc, Op, Program, Region
from semcheck.model.scope import stack_slot
from semcheck.model.step import target_core

T = TypeVar("T")
BufferInstance = tuple  # (device, local core or None when the device's cores share it, label)
Half = Literal["read", "write"]


@dataclasses.dataclass(frozen=True)
class AccessEvent:
    """One access (ACC-1, ACC-3).

    `core`/`pc` is the operation that performs it: the accessing core, or the
    DMA's issuing core and its `DmaStart` (then `half` says which half).
    `where` is the core whose buffer is touched (the DMA's target for a write).
    """

    core: int
    pc: int
    half: Half | None
    buffer: BufferInstance
    region: Region
    write: bool
    where: int
    loc: Loc
    instance: str | None = None  # the run_scoped execution's own label, where `buffer` names its site (BUF-15)
    elements: Region | None = None  # ERR-28: the elements, where `region` is the detector's window (`in_mode`)

    @property
    def is_dma(self) -> bool:
        return self.half is not None

    def at_pc(self, pc: int) -> AccessEvent:
        """This access at position `pc` (itself when it stands there): `dataclasses.replace(self, pc=pc)`,
        its fields copied as they are (a split program moves every access of its cores, DR-32)."""
        if pc == self.pc:
            return self
        moved = object.__new__(AccessEvent)
        fields = moved.__dict__
        fields.update(self.__dict__)
        fields["pc"] = pc
        return moved

    def describe(self) -> str:
        label = self.buffer[2]
        if self.half == "read":
            return f"the copy reading {label}{self.region}"
        if self.half == "write":
            return f"the copy writing {label}{self.region}"
        return f"{'store to' if self.write else 'load of'} {label}{self.region}"


@dataclasses.dataclass(frozen=True)
class Unrecorded:
    """A DMA whose regions the front end did not record: its accesses are unknown (ACC-3)."""

    core: int
    pc: int
    loc: Loc


def buffer_spaces(program: Program, near: int | None = None) -> dict[tuple[int, str], str]:
    """The memory space of every buffer label, per device (from its `AllocBuffer` ops); with `near=k`,
    of devices `0 .. k-1` only."""
    topo = program.topology
    spaces: dict[tuple[int, str], str] = {}
    cores = program.cores if near is None else program.cores[: near * topo.cores_per_device]
    for g, ops in enumerate(cores):
        d = topo.device_of(g)
        for op in ops:
            if type(op) is AllocBuffer:
                spaces[(d, op.label)] = op.memory_space
    return spaces


def in_mode(events: list[AccessEvent], mode: DmaMode | None) -> list[AccessEvent]:
    """The accesses `mode` sees, from those of every mode (`accesses(program, None)`). BUF-15: on a TPU the
    executions of a run_scoped site share one buffer (`buffer_of`); in the interpreter each execution is a
    buffer of its own. ERR-27: an access of no element is seen only by the interpreter's race detector (its
    window may meet another's); on a TPU it touches nothing, so `hardware` drops it. ERR-28: where the
    detector's window differs from the elements (`Region.window`, a masked store), the interpreter modes
    read the window as the access's region (its elements kept as `elements`). `None`: every mode's."""
    if mode is None:
        return events
    if mode == "hardware":
        if any(e.region.empty for e in events):
            return [e for e in events if not e.region.empty]
        return events
    if not any(e.instance or e.region.window for e in events):
        return events
    return [e if not (e.instance or e.region.window) else _interpreted(e) for e in events]


def _interpreted(e: AccessEvent) -> AccessEvent:
    """`e` as the interpreter's race detector sees it: its run_scoped execution's own buffer (BUF-15), its
    window for its region (ERR-28)."""
    changes: dict = {}
    if e.instance:
        changes["buffer"] = (*e.buffer[:2], e.instance)
    if e.region.window is not None:
        changes["region"], changes["elements"] = e.region.window, e.region
    return dataclasses.replace(e, **changes)


def buffer_of(program: Program, spaces: dict[tuple[int, str], str], core: int, label: str) -> BufferInstance:
    """ACC-1 with BUF-8: the buffer `label` denotes on `core`."""
    topo = program.topology
    d = topo.device_of(core)
    space = spaces.get((d, label), "vmem")
    shared = space in SHARED_SPACES or topo.cores_per_device == 1
    # BUF-15: every execution of a run_scoped site is one stack slot on a TPU; in the interpreter the
    # executions are distinct buffers, but none outlives its scope unless BUF-13 is violated
    return (d, None if shared else topo.local_core_of(core), stack_slot(label))


def accesses(
    program: Program, mode: DmaMode | None, *, near: int | None = None,
    copies_in: Mapping[int, Sequence[tuple[int, Op]]] | None = None,
) -> tuple[list[AccessEvent], list[Unrecorded]]:
    """ACC-1 .. ACC-3: every access of the program, and the DMAs whose accesses are unknown.

    A DMA whose target is out of range fails at its start (ERR-4) and
    accesses nothing. A copy half or a kernel access of no element is listed (ERR-27: the interpreter's
    race detector sees its window) unless the interpreter raises at it first (ERR-9); `in_mode` drops it
    under `hardware`. `mode` None: the accesses of every mode, before `in_mode` (a copy lands where SIG-1
    says whatever the mode). With `near=k`, only accesses of the buffers of devices
    `0 .. k-1` (under a rotation by `k`, every pair has an image there, DR-5);
    every unrecorded DMA is still listed. `copies_in` (with `near`): for the cores of the other devices,
    their (position, copy) pairs that land on devices `0 .. k-1`, read instead of those cores (DR-35).
    """
    spaces = buffer_spaces(program, near)
    topo = program.topology
    events: list[AccessEvent] = []
    unrecorded: list[Unrecorded] = []
    buffers: dict[tuple[int, str], BufferInstance] = {}
    if copies_in is None:
        cores: Iterable = ((g, enumerate(ops)) for g, ops in enumerate(program.cores))
    else:
        inside = near * topo.cores_per_device
        cores = itertools.chain(((g, enumerate(program.cores[g])) for g in range(inside)),
                                sorted(item for item in copies_in.items() if item[0] >= inside))
    for g, ops in cores:
        mine = near is None or topo.device_of(g) < near
        for pc, op in ops:
            t = type(op)
            if not mine and (t is not DmaStart or (
                    op.dst_region is not None and op.src_region is not None and op.src_buf is not None
                    and op.dst_buf is not None and (op.device is None or not 0 <= op.device < near))):
                # a recorded copy of another device lands on its own device, on one `near` leaves out, or
                # on none (ERR-4): nothing of it is listed (the cheap test for most of a large program)
                continue
            if t is Access:
                if mine and not (op.view_error is not None and op.region.empty):  # raises before (ERR-9)
                    buf = buffers.get((g, op.buf)) or buffers.setdefault((g, op.buf), buffer_of(program, spaces, g, op.buf))
                    events.append(AccessEvent(g, pc, None, buf, op.region, op.write, g, op.loc, _own(op.buf)))
            elif t is DmaStart:
                dst = target_core(program, mode or "hardware", g, op.device, op.core, dma=True)
                if not isinstance(dst, int):
                    continue
                if op.src_buf is None or op.dst_buf is None or op.src_region is None or op.dst_region is None:
                    unrecorded.append(Unrecorded(g, pc, op.loc))
                    continue
                raises = op.view_error is not None  # an empty window the interpreter refuses raises first (ERR-9)
                if mine and not (raises and op.src_region.empty):
                    src = buffers.get((g, op.src_buf)) or buffers.setdefault((g, op.src_buf), buffer_of(program, spaces, g, op.src_buf))
                    events.append(AccessEvent(g, pc, "read", src, op.src_region, False, g, op.loc, _own(op.src_buf)))
                if (near is None or topo.device_of(dst) < near) and not (raises and op.dst_region.empty):
                    dbuf = buffers.get((dst, op.dst_buf)) or buffers.setdefault((dst, op.dst_buf), buffer_of(program, spaces, dst, op.dst_buf))
                    events.append(AccessEvent(g, pc, "write", dbuf, op.dst_region, True, dst, op.loc, _own(op.dst_buf)))
    return in_mode(events, mode), unrecorded


def _own(label: str) -> str | None:
    """The label of one execution of a run_scoped site, when the buffer is named by its site (BUF-15)."""
    return label if stack_slot(label) != label else None


def regions_meet(r1: Region, r2: Region, mode: DmaMode) -> bool:
    """ACC-2 and, in the interpreter modes, ERR-27: whether two regions of one buffer are taken to meet (DR-47).

    Under `hardware` they meet when they share an element. jax's race detector compares windows instead:
    two windows with elements meet exactly when they share one, but a window of no element whose start
    lies inside another meets it too (`detector_windows_meet`). A widened region's window is not known:
    against a window of no element it may meet."""
    if r1.overlaps(r2):
        return True
    if mode == "hardware" or not (r1.empty or r2.empty):
        return False
    if not (r1.exact and r2.exact):
        return True
    return detector_windows_meet(r1.box, r2.box)


def conflicts(a: AccessEvent, b: AccessEvent, mode: DmaMode) -> bool:
    """ACC-2 (DR-1): regions of one buffer that meet in `mode` (`regions_meet`), at least one a write, not
    ordered by program order alone. The one test of a conflict: every pass that decides races calls it (DR-47).

    Two kernel accesses of one core are ordered by the core's program order;
    the two halves of one DMA are ordered by the DMA itself.
    """
    if a.buffer != b.buffer or not (a.write or b.write):
        return False
    if not a.is_dma and not b.is_dma and a.core == b.core:
        return False
    if a.is_dma and b.is_dma and (a.core, a.pc) == (b.core, b.pc):
        return False
    return regions_meet(a.region, b.region, mode)


def sweep_box(r: Region) -> tuple[tuple[int, int], ...] | None:
    """The box `box_sweep` sweeps region `r` by: None (paired with every region) for a region of no element
    whose window is not known, which jax's race detector may take to meet any other (ERR-27)."""
    return None if not r.exact and r.empty else r.box


def box_sweep(items: Sequence[T], box: Callable[[T], tuple[tuple[int, int], ...] | None]) -> list[tuple[T, T]]:
    """Every pair of `items` whose boxes may meet, each once: a superset of the pairs that meet (ACC-2,
    ERR-27). Items are swept in order of their first dimension's start, so only items whose first
    dimensions overlap, or start at one row (a window of no element meets one with elements that starts
    where it does, ERR-27), are paired; scalar and other-rank boxes, and items without one (None), pair
    with everything."""
    boxes = [box(x) for x in items]
    ranks = [-1 if b is None else len(b) for b in boxes]
    if not ranks:
        return []
    rank = max(set(ranks), key=ranks.count)
    swept = sorted((i for i, r in enumerate(ranks) if r == rank and r > 0), key=lambda i: boxes[i][0][0])
    wild = [items[i] for i, r in enumerate(ranks) if r != rank or r <= 0]
    out: list[tuple[T, T]] = []
    active: list[int] = []
    for i in swept:
        lo = boxes[i][0][0]
        active = [j for j in active if boxes[j][0][1] > lo or boxes[j][0][0] == lo]
        out.extend((items[j], items[i]) for j in active)
        active.append(i)
    tame = [items[i] for i in swept]
    for k, w in enumerate(wild):
        out.extend((w, x) for x in tame)
        out.extend((w, x) for x in wild[k + 1:])
    return out


def conflicting_pairs(
    events: list[AccessEvent], mode: DmaMode,
) -> list[tuple[AccessEvent, AccessEvent]]:
    """ACC-2: every pair that conflicts in `mode`, each once, grouped by buffer (only same-buffer pairs are
    compared, and within a buffer only those `box_sweep` pairs)."""
    by_buffer: dict[BufferInstance, list[AccessEvent]] = defaultdict(list)
    for e in events:
        by_buffer[e.buffer].append(e)
    pairs = []
    for group in by_buffer.values():
        if not any(e.write for e in group):
            continue
        found = [(a, b) for a, b in box_sweep(group, lambda e: sweep_box(e.region)) if conflicts(a, b, mode)]
        order = {id(e): i for i, e in enumerate(group)}
        found = [(a, b) if order[id(a)] < order[id(b)] else (b, a) for a, b in found]
        found.sort(key=lambda p: (order[id(p[0])], order[id(p[1])]))
        pairs.extend(found)
    return pairs


def skeleton(program: Program) -> Program:
    """The program without its data: no `Access` ops, no DMA regions (ACC-1).

    Every property but race-free reads only this synchronisation skeleton, and
    where devices work on device-dependent regions (a ring's chunk `d - s`) only
    the skeleton repeats round the devices (RUN-7).
    """
    memo: dict[int, DmaStart] = {}
    cores = []
    for ops in program.cores:
        kept = []
        for op in ops:
            t = type(op)
            if t is Access:
                continue
            if t is DmaStart and op.dst_buf is not None:
                new = memo.get(id(op))
                if new is None:  # the front end shares operation objects: each distinct one once
                    new = memo[id(op)] = _without_regions(op)
                op = new
            kept.append(op)
        cores.append(tuple(kept))
    return dataclasses.replace(program, cores=tuple(cores))


def _without_regions(op: DmaStart) -> DmaStart:
    """`op` with no buffers or regions: `dataclasses.replace(op, src_buf=None, ...)` without its
    `__init__` (bench/README.md, "Costs the code relies on")."""
    new = object.__new__(DmaStart)
    fields = new.__dict__
    fields.update(op.__dict__)
    fields["src_buf"] = fields["src_region"] = fields["dst_buf"] = fields["dst_region"] = None
    return new
