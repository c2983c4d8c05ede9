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


def in_mode(events: list[AccessEvent], mode: DmaMode) -> list[AccessEvent]:
    """BUF-15 by mode: on a TPU the executions of a run_scoped site share one buffer (`buffer_of`); in the
    interpreter each execution is a buffer of its own."""
    if mode == "hardware" or not any(e.instance for e in events):
        return events
    return [e if not e.instance else dataclasses.replace(e, buffer=(*e.buffer[:2], e.instance)) for e in events]


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
    program: Program, mode: DmaMode, *, near: int | None = None,
    copies_in: Mapping[int, Sequence[tuple[int, Op]]] | None = None,
) -> tuple[list[AccessEvent], list[Unrecorded]]:
    """ACC-1 .. ACC-3: every access of the program, and the DMAs whose accesses are unknown.

    A DMA whose target is out of range fails at its start (ERR-4) and
    accesses nothing. With `near=k`, only accesses of the buffers of devices
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
                if mine:
                    buf = buffers.get((g, op.buf)) or buffers.setdefault((g, op.buf), buffer_of(program, spaces, g, op.buf))
                    events.append(AccessEvent(g, pc, None, buf, op.region, op.write, g, op.loc, _own(op.buf)))
            elif t is DmaStart:
                dst = target_core(program, mode, g, op.device, op.core, dma=True)
                if not isinstance(dst, int):
                    continue
                if op.src_buf is None or op.dst_buf is None or op.src_region is None or op.dst_region is None:
                    unrecorded.append(Unrecorded(g, pc, op.loc))
                    continue
                if mine and not op.src_region.empty:  # an empty region touches nothing (DR-9's forerunners)
                    src = buffers.get((g, op.src_buf)) or buffers.setdefault((g, op.src_buf), buffer_of(program, spaces, g, op.src_buf))
                    events.append(AccessEvent(g, pc, "read", src, op.src_region, False, g, op.loc, _own(op.src_buf)))
                if (near is None or topo.device_of(dst) < near) and not op.dst_region.empty:
                    dbuf = buffers.get((dst, op.dst_buf)) or buffers.setdefault((dst, op.dst_buf), buffer_of(program, spaces, dst, op.dst_buf))
                    events.append(AccessEvent(g, pc, "write", dbuf, op.dst_region, True, dst, op.loc, _own(op.dst_buf)))
    return in_mode(events, mode), unrecorded


def _own(label: str) -> str | None:
    """The label of one execution of a run_scoped site, when the buffer is named by its site (BUF-15)."""
    return label if stack_slot(label) != label else None


def conflicts(a: AccessEvent, b: AccessEvent) -> bool:
    """ACC-2: overlapping elements of one buffer, at least one a write, not ordered by program order alone.

    Two kernel accesses of one core are ordered by the core's program order;
    the two halves of one DMA are ordered by the DMA itself.
    """
    if a.buffer != b.buffer or not (a.write or b.write):
        return False
    if not a.is_dma and not b.is_dma and a.core == b.core:
        return False
    if a.is_dma and b.is_dma and (a.core, a.pc) == (b.core, b.pc):
        return False
    return a.region.overlaps(b.region)


def box_sweep(items: Sequence[T], box: Callable[[T], tuple[tuple[int, int], ...]]) -> list[tuple[T, T]]:
    """Every pair of `items` whose boxes may overlap, each once: a superset of the overlapping pairs
    (ACC-2). Items are swept in order of their first dimension's start, so only items whose first
    dimensions overlap are paired; scalar and other-rank boxes pair with everything."""
    ranks = [len(box(x)) for x in items]
    if not ranks:
        return []
    rank = max(set(ranks), key=ranks.count)
    swept = sorted((x for x, r in zip(items, ranks) if r == rank and r), key=lambda x: box(x)[0][0])
    wild = [x for x, r in zip(items, ranks) if r != rank or not r]
    out: list[tuple[T, T]] = []
    active: list = []
    for x in swept:
        lo = box(x)[0][0]
        active = [y for y in active if box(y)[0][1] > lo]
        out.extend((y, x) for y in active)
        active.append(x)
    for i, w in enumerate(wild):
        out.extend((w, x) for x in swept)
        out.extend((w, x) for x in wild[i + 1:])
    return out


def conflicting_pairs(
    events: list[AccessEvent],
) -> list[tuple[AccessEvent, AccessEvent]]:
    """ACC-2: every conflicting pair, each once, grouped by buffer (only same-buffer pairs are compared,
    and within a buffer only those `box_sweep` pairs)."""
    by_buffer: dict[BufferInstance, list[AccessEvent]] = defaultdict(list)
    for e in events:
        by_buffer[e.buffer].append(e)
    pairs = []
    for group in by_buffer.values():
        if not any(e.write for e in group):
            continue
        found = [(a, b) for a, b in box_sweep(group, lambda e: e.region.box) if conflicts(a, b)]
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
