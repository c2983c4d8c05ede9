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

import bisect
import dataclasses
import gc
import itertools
from typing import NamedTuple

from semcheck.model.dma import counts_bytes
from semcheck.model.ops import DmaStart, Op, Program, Region


class Split(NamedTuple):
    """The split program, where its forerunners are, and the copies left whole."""

    program: Program
    forerunners: tuple[tuple[int, ...], ...]  # per core: the split positions of its forerunners, ascending
    mixed: tuple[DmaStart, ...]  # copies with a semaphore that counts copies, not bytes, on the other side

    def origin(self, core: int, pc: int) -> int:
        """The program's position of split position `pc` of `core` (a forerunner's is its copy's)."""
        return pc - bisect.bisect_left(self.forerunners[core], pc)


def _empty(region: Region) -> Region:
    """A region of the same buffer that touches no element (ACC-1)."""
    return Region(tuple((lo, lo) for lo, _ in region.box) or ((0, 0),))


def _with(op: DmaStart, **fields: object) -> DmaStart:
    """`dataclasses.replace(op, **fields)` for these plain fields, without re-running the constructor
    (a large ring has hundreds of thousands of copies)."""
    new = object.__new__(DmaStart)
    new.__dict__.update(op.__dict__)
    new.__dict__.update(fields)
    return new


def splittable(op: DmaStart) -> bool:
    """Whether the copy can land in parts that its semaphores count (DR-9)."""
    return (op.nbytes >= 2 and op.src_region is not None and op.dst_region is not None
            and counts_bytes(op.dst_sem_type, "hardware")
            and (op.src_sem is None or counts_bytes(op.src_sem_type, "hardware")))


def split(program: Program) -> Split:
    """DR-9: the program with a forerunner before each copy that can land in parts.

    Like the lowering, it allocates an object or two per copy, none of them cyclic: the cycle collector
    rests until the split program is built."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _split(program)
    finally:
        if collecting:
            gc.enable()


def _split(program: Program) -> Split:
    cores: list[tuple[Op, ...]] = []
    where: list[tuple[int, ...]] = []
    mixed: dict[int, DmaStart] = {}
    pairs: dict[int, tuple[DmaStart, DmaStart]] = {}
    empty: dict[Region, Region] = {}
    for ops in program.cores:
        pieces: list[tuple[Op, ...]] = []
        inserted: list[int] = []
        prev = 0
        for pc in [pc for pc, op in enumerate(ops) if type(op) is DmaStart]:
            op = ops[pc]
            pair = pairs.get(id(op))
            if pair is None:
                if not splittable(op):
                    if op.nbytes >= 2 and op.src_region is not None and op.dst_region is not None and (
                            counts_bytes(op.dst_sem_type, "hardware")
                            or (op.src_sem is not None and counts_bytes(op.src_sem_type, "hardware"))):
                        mixed.setdefault(id(op), op)  # one side counts bytes, the other copies
                    continue
                src, dst = op.src_region, op.dst_region
                src_empty = empty.get(src) or empty.setdefault(src, _empty(src))
                dst_empty = empty.get(dst) or empty.setdefault(dst, _empty(dst))
                pair = pairs[id(op)] = (_with(op, nbytes=op.nbytes - 1, src_region=src_empty, dst_region=dst_empty),
                                        _with(op, nbytes=1))
            pieces += (ops[prev:pc], pair)
            inserted.append(pc + len(inserted))
            prev = pc + 1
        if not inserted:
            cores.append(ops)
        else:
            pieces.append(ops[prev:])
            cores.append(tuple(itertools.chain.from_iterable(pieces)))
        where.append(tuple(inserted))
    if not pairs:
        return Split(program, tuple(() for _ in program.cores), tuple(mixed.values()))
    return Split(dataclasses.replace(program, cores=tuple(cores)), tuple(where), tuple(mixed.values()))


__all__ = ["Split", "split", "splittable"]
