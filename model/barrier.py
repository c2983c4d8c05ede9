"""Barriers (rule BAR-1): when a core's k-th barrier of a name opens.

The rule is stated once, over how many barriers of the name each participant has reached
(`opens`); the static engines, which know positions rather than counts, ask it through `awaited`
and `opens_at`. The step relation, the fast run, the happens-before of the static system, its least
stuck vector and the deadlock encoding all decide barriers with these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence


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
