"""Clock rows of the happens-before pass (spec DR-45): sparse while a row names few cores, dense after;
the join of a dense row with every rotation of a snapshot (DR-43)."""

from __future__ import annotations

import numpy as np

DENSE_PAST = 64
"""Entries a sparse clock row (`Sparse`) may name before it becomes a dense one (DR-45)."""


class Sparse(dict):
    """DR-45: a clock row that names only the cores it has heard of (core -> entry); every other entry
    is 0. A tree's device knows of about log N others, so its row and every snapshot of it are a few
    entries, not N; `join` makes a row dense once it names more than `DENSE_PAST` cores."""

    __slots__ = ()

    def __missing__(self, core: int) -> int:
        return 0

    def copy(self) -> Sparse:
        return Sparse(self)


def dense(row: Sparse | np.ndarray, n: int) -> np.ndarray:
    """`row` as a dense row of `n` entries (DR-45); a dense row is returned as it is."""
    if type(row) is not Sparse:
        return row
    out = np.zeros(n, dtype=np.int32)
    if row:
        out[list(row)] = list(row.values())
    return out


def join(row: Sparse | np.ndarray, other: Sparse | np.ndarray, n: int) -> Sparse | np.ndarray:
    """`row` joined with `other` (the entrywise maximum, DR-6), in place where `row` stays as it is kept
    (DR-45): the row to keep, `row` itself or its dense form."""
    if type(other) is Sparse:
        if type(row) is Sparse:
            get = row.get
            for c, v in other.items():
                if v > get(c, 0):
                    row[c] = v
            return row if len(row) <= DENSE_PAST else dense(row, n)
        if other:
            at = list(other)
            row[at] = np.maximum(row[at], list(other.values()))
        return row
    if type(row) is Sparse:
        row = dense(row, n)
    np.maximum(row, other, out=row)
    return row


def within(row: Sparse | np.ndarray, other: Sparse | np.ndarray) -> bool:
    """Whether `row` is at most `other` at every core, so that their join is `other` (DR-49). A dense row
    is never said to be within a sparse one (a cheap answer: the caller then joins)."""
    if row is other:
        return True
    if type(row) is Sparse:  # a few entries: read one by one (a numpy call per row cost more)
        if type(other) is Sparse:
            get = other.get
            return all(v <= get(c, 0) for c, v in row.items())
        return all(v <= other[c] for c, v in row.items())
    if type(other) is Sparse:
        return False
    return bool((row <= other).all())


def join_all(rows: list[Sparse | np.ndarray], n: int) -> Sparse | np.ndarray:
    """The join of `rows` (at least one), a new row: sparse while it names at most `DENSE_PAST` cores (DR-45),
    else dense, the sparse rows' entries put in with one numpy call rather than one per row (DR-49: a
    barrier of every device joins as many rows as there are devices)."""
    sparse = [r for r in rows if type(r) is Sparse]
    if len(sparse) == len(rows):
        out = Sparse()
        for r in sparse:
            out = join(out, r, n)
            if type(out) is not Sparse:
                break
        else:
            return out
    out = np.zeros(n, dtype=np.int32)
    for r in rows:
        if type(r) is not Sparse:
            np.maximum(out, r, out=out)
    if sparse:
        at = [c for r in sparse for c in r]
        np.maximum.at(out, at, np.fromiter((v for r in sparse for v in r.values()), dtype=np.int32, count=len(at)))
    return out


def join_every_rotation(row: np.ndarray, snap: np.ndarray, step: int) -> None:
    """`row` joined with `snap` rotated by every multiple of `step` (which divides its length) (DR-43): at each
    core, the snapshot's largest entry among the cores of its residue modulo `step`, in one pass."""
    times = len(row) // step
    np.maximum(row, np.tile(snap.reshape(times, step).max(axis=0), times), out=row)
