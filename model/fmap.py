"""A small immutable, hashable mapping for model states."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class FMap(Mapping[K, V], Generic[K, V]):
    """Immutable dict. Updates return a new map; equal maps hash equally.

    Entries equal to `default` (when given) are dropped, so a map of counts
    that returned to zero equals one that never left it.
    """

    __slots__ = ("_d", "_hash")

    def __init__(self, items: Mapping[K, V] | None = None) -> None:
        # another map's dict copied whole (RUN-59): `dict(mapping)` asks an FMap key by key
        self._d: dict[K, V] = dict(items._d) if isinstance(items, FMap) else dict(items) if items else {}
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._d[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    # Mapping's own get, `in` and views go through __getitem__ (a missing key raises and is caught):
    # the dict's answer the same, without the exception, on the step relation's every lookup
    def get(self, key, default=None):
        return self._d.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def keys(self):
        return self._d.keys()

    def items(self):
        return self._d.items()

    def values(self):
        return self._d.values()

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._d.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FMap):
            return self._d == other._d
        return NotImplemented

    def __repr__(self) -> str:
        return f"FMap({self._d!r})"

    def set(self, key: K, value: V, *, drop: object = ...) -> FMap[K, V]:
        """A copy with `key` bound to `value` (removed if `value == drop`)."""
        d = dict(self._d)
        if drop is not ... and value == drop:
            d.pop(key, None)
        else:
            d[key] = value
        out: FMap[K, V] = FMap.__new__(FMap)
        out._d, out._hash = d, None
        return out

    def update(self, items: Mapping[K, V]) -> FMap[K, V]:
        d = dict(self._d)
        d.update(items)
        out: FMap[K, V] = FMap.__new__(FMap)
        out._d, out._hash = d, None
        return out
