"""Per-program memo: one lowering and one fast run per (program, mode), shared by the checks.

Every check of every property starts from the same static lowering and the
same maximal runs of the same program; computing them once per program and
mode instead of once per check is most of the verification time on large
kernels. Entries are keyed by the program's identity (hashing a program by
value walks every operation) and vanish when the program is collected.
Cached values are immutable (frozen dataclasses, or treated as read-only).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from semcheck.model.ops import Program

T = TypeVar("T")


class ProgramMemo:
    """A table of computed values per live `Program`, keyed by the program's identity."""

    def __init__(self) -> None:
        self._tables: dict[int, tuple[weakref.ref, dict[Hashable, Any]]] = {}

    def table(self, program: Program) -> dict[Hashable, Any]:
        key = id(program)
        entry = self._tables.get(key)
        if entry is not None and entry[0]() is program:
            return entry[1]

        def forget(ref: weakref.ref, key: int = key) -> None:
            current = self._tables.get(key)
            if current is not None and current[0] is ref:
                del self._tables[key]

        table: dict[Hashable, Any] = {}
        self._tables[key] = (weakref.ref(program, forget), table)
        return table

    def get(self, program: Program, key: Hashable, compute: Callable[[], T]) -> T:
        """The value stored under `key` for `program`, computed by `compute()` the first time."""
        table = self.table(program)
        if key not in table:
            table[key] = compute()
        return table[key]

    def clear(self) -> None:
        self._tables.clear()


MEMO = ProgramMemo()

