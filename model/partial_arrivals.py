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
from collections.abc import Callable, Sequence
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


class _Splitter:
    """Splits cores one at a time (DR-9), sharing each copy's pair and each empty region between cores."""

    def __init__(self) -> None:
        self.mixed: dict[int, DmaStart] = {}
        self.pairs: dict[int, tuple[DmaStart, DmaStart]] = {}
        self.empty: dict[Region, Region] = {}
        self.empty_of: dict[int, tuple[Region, Region]] = {}  # by object first: the front end shares regions

    def _empty(self, r: Region) -> Region:
        got = self.empty_of.get(id(r))
        if got is None:
            e = self.empty.get(r) or self.empty.setdefault(r, _empty(r))
            got = self.empty_of[id(r)] = (r, e)  # the region is kept so that its id is not reused
        return got[1]

    def core(self, ops: tuple[Op, ...]) -> tuple[tuple[Op, ...], tuple[int, ...]]:
        """The core's split operations and the split positions of its forerunners."""
        pairs, empty = self.pairs, self._empty
        pieces: list[tuple[Op, ...]] = []
        inserted: list[int] = []
        prev = 0
        for pc in [pc for pc, op in enumerate(ops) if type(op) is DmaStart]:
            op = ops[pc]
            pair = pairs.get(id(op))
            if pair is None:
                if not splittable(op):
                    if _mixed(op):
                        self.mixed.setdefault(id(op), op)  # one side counts bytes, the other copies
                    continue
                pair = pairs[id(op)] = (_with(op, nbytes=op.nbytes - 1, src_region=empty(op.src_region),
                                              dst_region=empty(op.dst_region)),
                                        _with(op, nbytes=1))
            pieces += (ops[prev:pc], pair)
            inserted.append(pc + len(inserted))
            prev = pc + 1
        if not inserted:
            return ops, ()
        pieces.append(ops[prev:])
        return tuple(itertools.chain.from_iterable(pieces)), tuple(inserted)


def _mixed(op: DmaStart) -> bool:
    """A copy that could land in parts but has a semaphore that counts copies on one side (DR-9)."""
    return (not splittable(op) and op.nbytes >= 2 and op.src_region is not None and op.dst_region is not None
            and (counts_bytes(op.dst_sem_type, "hardware")
                 or (op.src_sem is not None and counts_bytes(op.src_sem_type, "hardware"))))


def _split(program: Program) -> Split:
    splitter = _Splitter()
    cores: list[tuple[Op, ...]] = []
    where: list[tuple[int, ...]] = []
    for ops in program.cores:
        split_ops, inserted = splitter.core(ops)
        cores.append(split_ops)
        where.append(inserted)
    mixed = tuple(splitter.mixed.values())
    if not splitter.pairs:
        return Split(program, tuple(() for _ in program.cores), mixed)
    return Split(_with_cores(program, tuple(cores)), tuple(where), mixed)


def _with_cores(program: Program, cores) -> Program:
    """`program` with these cores, IR-1 not checked again: the split keeps every barrier as it is."""
    parts = object.__new__(Program)
    for f in dataclasses.fields(Program):
        object.__setattr__(parts, f.name, getattr(program, f.name))
    object.__setattr__(parts, "cores", cores)
    return parts


class _LazyCores(Sequence):
    """The split program's cores, each split when it is first read (DR-31)."""

    def __init__(self, cores: Sequence[tuple[Op, ...]], splitter: _Splitter) -> None:
        self._cores = cores
        self._splitter = splitter
        self._done: dict[int, tuple[tuple[Op, ...], tuple[int, ...]]] = {}

    def split_core(self, i: int) -> tuple[tuple[Op, ...], tuple[int, ...]]:
        """Core `i`'s split operations and its forerunners' split positions."""
        n = len(self._cores)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        got = self._done.get(i)
        if got is None:
            got = self._done[i] = self._splitter.core(self._cores[i])
        return got

    def __len__(self) -> int:
        return len(self._cores)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(self.split_core(j)[0] for j in range(*i.indices(len(self))))
        return self.split_core(i)[0]

    def __iter__(self):
        return (self.split_core(i)[0] for i in range(len(self._cores)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    @property
    def cores_split(self) -> int:
        """How many cores have been split so far (DR-31 leaves the others alone)."""
        return len(self._done)


class _Forerunners(Sequence):
    """`Split.forerunners` of a lazily split program: each core's, read off its split."""

    def __init__(self, cores: _LazyCores) -> None:
        self._cores = cores

    def __len__(self) -> int:
        return len(self._cores)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return tuple(self._cores.split_core(j)[1] for j in range(*i.indices(len(self))))
        return self._cores.split_core(i)[1]


def split_lazily(program: Program, period: int) -> Split:
    """DR-31: `split(program)` for a program that the rotation by `period` devices maps onto itself (DR-5,
    checked by the caller): whether any copy is split, and which are mixed, are read off the cores of
    devices `0 .. period-1`, and every core is split when it is first read.

    The rotation keeps every field `splittable` and the mixed test read (the byte count, whether the
    regions are there, the semaphores and their types: RUN-7's kept fields), so every device's copies
    are split, or mixed, as their preimages on the first `period` devices are; the first mixed copy in
    core order lies on core 0's device range either way."""
    topo = program.topology
    reps = program.cores[: period * topo.cores_per_device]
    splitter = _Splitter()
    any_split = False
    for ops in reps:
        for op in ops:
            if type(op) is DmaStart:
                if splittable(op):
                    any_split = True
                elif _mixed(op):
                    splitter.mixed.setdefault(id(op), op)
    mixed = tuple(splitter.mixed.values())
    if not any_split:
        return Split(program, tuple(() for _ in program.cores), mixed)
    splitter.mixed = {}  # the cores' own splits need not list them again
    cores = _LazyCores(program.cores, splitter)
    return Split(_with_cores(program, cores), _Forerunners(cores), mixed)  # type: ignore[arg-type]


def split_position(forerunners: Sequence[int], pc: int) -> int:
    """The split position of the program's operation at `pc` of a core with these forerunners (the
    inverse of `Split.origin` on the program's positions): `pc` moves past every forerunner inserted at
    or before it (a split copy's forerunner comes just before the copy)."""
    return split_positions(forerunners)(pc)


def split_positions(forerunners: Sequence[int]) -> Callable[[int], int]:
    """`split_position` for one core, its forerunners read once (a core's accesses are many)."""
    # the j-th forerunner stands before the program's operation at forerunners[j] - j
    before = [f - j for j, f in enumerate(forerunners)]
    return lambda pc: pc + bisect.bisect_right(before, pc)


__all__ = ["Split", "split", "split_lazily", "split_position", "split_positions", "splittable"]
