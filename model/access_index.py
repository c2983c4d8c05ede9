"""The index of one list of accesses that the happens-before observers read (spec DR-42): the chains of
accesses of one region and each access's partners, built once for every observer of the list."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from semcheck.model.access import AccessEvent, box_sweep, conflicts, regions_meet, sweep_box
from semcheck.model.ops import DmaMode

Pos = tuple[int, int]  # (core, pc) of an operation


class Chain:
    """Accesses of one buffer region so far: the last write and the reads since it."""

    __slots__ = ("write", "reads")

    def __init__(self) -> None:
        self.write: AccessEvent | None = None
        self.reads: list[AccessEvent] = []

    def copied(self) -> Chain:
        c = Chain()
        c.write, c.reads = self.write, list(self.reads)
        return c


def one_core(groups: Iterable[list[AccessEvent]]) -> bool:
    """DR-50: whether the accesses of one buffer are all kernel accesses (no copy half) of one core."""
    core = None
    for group in groups:
        for e in group:
            if e.half is not None or (core is not None and e.core != core):
                return False
            core = e.core
    return True


class AccessIndex:
    """Where each access is reached, its chain and its partners: what the observers of one list of
    accesses only read, built once for all of them (DR-42). `mode`: whose conflicts (ACC-2, ERR-27: `conflicts`)."""

    def __init__(self, events: Iterable[AccessEvent], mode: DmaMode) -> None:
        self.events = list(events)
        self.mode = mode
        self.at: dict[Pos, list[AccessEvent]] = defaultdict(list)
        self.chain: dict[int, int] = {}  # id of an access -> the number of its chain
        self.chains = 0
        self.partners: dict[int, list[AccessEvent]] = defaultdict(list)
        self._index(self.events)
        # what `Observer._reach` reads of each access, looked up once: (access, its chain, its partners)
        self.entries: dict[Pos, list[tuple[AccessEvent, int, list[AccessEvent]]]] = {
            pos: [self.entry(x) for x in xs] for pos, xs in self.at.items()}

    def entry(self, x: AccessEvent) -> tuple[AccessEvent, int, list[AccessEvent]]:
        return (x, self.chain[id(x)], self.partners.get(id(x)) or [])

    def _index(self, events: list[AccessEvent]) -> None:
        """Chains of accesses with one region; partners for different regions that conflict (ACC-2). Accesses of
        one region of no element do not meet (ERR-27: neither start lies inside the other's empty window): each
        is a chain of its own."""
        mode = self.mode
        by_buffer: dict = defaultdict(lambda: defaultdict(list))
        for e in events:
            r = e.region
            by_buffer[e.buffer][(r.box, r.exact, r.parts, id(e) if r.empty else None)].append(e)
        at, chain_of = self.at, self.chain
        for regions in by_buffer.values():
            if not any(e.write for group in regions.values() for e in group):
                continue
            if one_core(regions.values()):
                continue  # DR-50: program order orders every pair of them: none is ever a candidate
            keys = list(regions)
            for key in keys:
                chain = self.chains
                self.chains += 1
                for e in regions[key]:
                    at[(e.core, e.pc)].append(e)
                    chain_of[id(e)] = chain
            # different regions: only those `box_sweep` pairs are compared
            for k1, k2 in box_sweep(keys, lambda k: sweep_box(regions[k][0].region)):
                r1, r2 = regions[k1][0].region, regions[k2][0].region
                if not regions_meet(r1, r2, mode):
                    continue
                for a in regions[k1]:
                    for b in regions[k2]:
                        if conflicts(a, b, mode):
                            self.partners[id(a)].append(b)
                            self.partners[id(b)].append(a)
