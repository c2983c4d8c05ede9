"""Copies that land in parts, for the race pass under `hardware` (spec DR-9).

A TPU's DMA engine moves a copy in pieces and adds each piece's bytes to the
copy's DMA semaphore as it lands (DMA-6 counts bytes); nothing promises that
a wait which took fewer bytes than a copy's size saw that copy whole, nor that
the bytes a wait took came from one copy. The model's hardware step relation
moves each half in one step (DMA-5), which is right for the counts and for
every property but race-freedom. For the race pass, `split(program)` gives
each copy whose semaphores all count bytes a *forerunner*: a copy of the same
semaphores, started just before it, that signals all its bytes but one and
touches no element; the copy itself keeps its regions and signals the last
byte. A half's data is then pending until a wait that needed every byte of it
has passed, and a wait that can pass on the forerunner's bytes (fewer than the
copy's, or another copy's) orders nothing. Every run of the program is a run
of the split program (each forerunner half taken just before its copy's), so
a split program without races has none; a race of the split program may need
a copy to have landed in part, which the unsplit model cannot replay.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from semcheck.model.dma import counts_bytes
from semcheck.model.ops import DmaStart, Op, Program, Region


class Split(NamedTuple):
    """The split program, where each of its positions was in the program, and the copies left whole."""

    program: Program
    origin: tuple[tuple[int, ...], ...]  # per core: split position -> the program's position
    mixed: tuple[DmaStart, ...]  # copies with a semaphore that counts copies, not bytes, on the other side


def _empty(region: Region) -> Region:
    """A region of the same buffer that touches no element (ACC-1)."""
    return Region(tuple((lo, lo) for lo, _ in region.box) or ((0, 0),))


def splittable(op: DmaStart) -> bool:
    """Whether the copy can land in parts that its semaphores count (DR-9)."""
    return (op.nbytes >= 2 and op.src_region is not None and op.dst_region is not None
            and counts_bytes(op.dst_sem_type, "hardware")
            and (op.src_sem is None or counts_bytes(op.src_sem_type, "hardware")))


def split(program: Program) -> Split:
    """DR-9: the program with a forerunner before each copy that can land in parts."""
    cores: list[tuple[Op, ...]] = []
    origin: list[tuple[int, ...]] = []
    mixed: dict[int, DmaStart] = {}
    forerunners: dict[int, tuple[DmaStart, DmaStart]] = {}
    for ops in program.cores:
        out: list[Op] = []
        where: list[int] = []
        for pc, op in enumerate(ops):
            if type(op) is DmaStart:
                pair = forerunners.get(id(op))
                if pair is None and splittable(op):
                    pair = forerunners[id(op)] = (
                        dataclasses.replace(op, nbytes=op.nbytes - 1, src_region=_empty(op.src_region),
                                            dst_region=_empty(op.dst_region)),
                        dataclasses.replace(op, nbytes=1))
                if pair is not None:
                    out += pair
                    where += (pc, pc)
                    continue
                if op.nbytes >= 2 and op.src_region is not None and op.dst_region is not None and (
                        counts_bytes(op.dst_sem_type, "hardware")
                        or (op.src_sem is not None and counts_bytes(op.src_sem_type, "hardware"))):
                    mixed.setdefault(id(op), op)  # one side counts bytes, the other copies
            out.append(op)
            where.append(pc)
        cores.append(tuple(out))
        origin.append(tuple(where))
    if not forerunners:
        return Split(program, tuple(tuple(range(len(ops))) for ops in program.cores), tuple(mixed.values()))
    return Split(dataclasses.replace(program, cores=tuple(cores)), tuple(origin), tuple(mixed.values()))


__all__ = ["Split", "split", "splittable"]
