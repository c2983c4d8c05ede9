"""Barriers (rule BAR-1): when a core's k-th barrier of a name opens.

The rule is stated once, over how many barriers of the name each participant has reached
(`opens`); the static engines, which know positions rather than counts, ask it through `awaited`
and `opens_at`, and the fast run keeps the count of each barrier's arrivals (`Counted`). The step relation, the fast run, the happens-before of the static system, its least
stuck vector and the deadlock encoding all decide barriers with these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence


def instance(name: str, k: int, participants: frozenset[int]) -> tuple[str, int, frozenset[int]]:
    """BAR-1: the key of one barrier instance, the `k`-th barriers named `name` of `participants`.

    Barriers of one name and `k` whose participant sets differ are other instances (RUN-33): a join or
    a count kept for one must not serve the other. Every engine that keys a barrier instance uses this.
    """
    return (name, k, participants)


def reached(passed: int, at_it: bool) -> int:
    """BAR-1: how many barriers of one name a core has reached: those it passed, and the one it is at."""
    return passed + 1 if at_it else passed


def opens(k: int, reached_by_participant: Iterable[int]) -> bool:
    """BAR-1: a core's `k`-th barrier named `n` opens once every participant has reached its own `k`-th.

    `reached_by_participant` gives, for each participant, how many barriers named `n` it has reached
    (`reached`).
    """
    return all(r >= k for r in reached_by_participant)


def awaited(participants: Iterable[int], kth_position: Callable[[int], int | None]) -> dict[int, int] | None:
    """BAR-1 over positions: where each participant's own `k`-th barrier named `n` is.

    `kth_position(p)` is that position, or None when `p` has no `k`-th barrier of the name: then the
    barrier never opens (None).
    """
    out = {}
    for p in participants:
        pos = kth_position(p)
        if pos is None:
            return None
        out[p] = pos
    return out


def opens_at(k: int, where: Mapping[int, int] | None, positions: Sequence[int]) -> bool:
    """BAR-1 over positions: whether the `k`-th barrier whose participants' own `k`-th are at `where`
    (`awaited`) opens when participant `p` has got to `positions[p]` (at its barrier, or past it)."""
    if where is None:
        return False
    # a participant at or past its k-th barrier has reached k of them; one before it, fewer
    return opens(k, (k if positions[p] >= pos else k - 1 for p, pos in where.items()))


class Counted:
    """BAR-1 counted, for a run that moves its cores forward: per name and `k`, how many participants
    have reached their `k`-th barrier of the name, so that asking whether a barrier opens costs one
    look-up rather than one per participant.

    A participant's `reached` only grows, one barrier at a time, so it has reached its `k`-th once
    it has been counted at `k` (`reach`); the barrier opens once all of them have (`opens`). The
    count holds for a name while every barrier of it that a core reached had one participant set
    (IR-1); otherwise `opens` answers None and the caller asks `opens` of every participant.
    """

    __slots__ = ("count", "level", "parties", "same", "mixed")

    def __init__(self) -> None:
        self.count: dict[tuple[str, int], int] = {}  # (name, k) -> participants that reached their k-th
        self.level: dict[tuple[int, str], int] = {}  # (core, name) -> the last k it was counted at
        self.parties: dict[str, frozenset[int]] = {}  # name -> its participant set
        self.same: dict[tuple[str, int], frozenset[int]] = {}  # (name, id) -> a set found equal to the name's
        self.mixed: set[str] = set()  # names reached with two participant sets: not counted

    def reach(self, core: int, name: str, k: int, participants: frozenset[int]) -> None:
        """`core` stands at its `k`-th barrier named `name` (counted once, however often it arrives)."""
        key = (core, name)
        if self.level.get(key, 0) >= k:
            return
        self.level[key] = k
        if not self._one_set(name, participants):
            self.mixed.add(name)
        elif core in participants:
            at = (name, k)
            self.count[at] = self.count.get(at, 0) + 1

    def opens(self, name: str, k: int, participants: frozenset[int]) -> bool | None:
        """Whether the `k`-th barrier named `name` of `participants` opens; None: not counted."""
        if name in self.mixed or not self._one_set(name, participants):
            return None
        return self.count.get((name, k), 0) == len(participants)

    def _one_set(self, name: str, participants: frozenset[int]) -> bool:
        known = self.parties.setdefault(name, participants)
        if known is participants or self.same.get((name, id(participants))) is participants:
            return True
        if known == participants:  # compared once per set object: the sets of a name are often one object
            self.same[(name, id(participants))] = participants
            return True
        return False
