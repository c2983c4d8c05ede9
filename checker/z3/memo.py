"""Per-program memo: one lowering and one fast run per (program, mode), shared by the checks.

Every check of every property starts from the same static lowering and the
same maximal runs of the same program; computing them once per program and
mode instead of once per check is most of the verification time on large
kernels. Entries are keyed by the program's identity (hashing a program by
value walks every operation); only the few most recent programs are kept.
Cached values are immutable (frozen dataclasses, or treated as read-only).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from semcheck.model.ops import Program

T = TypeVar("T")


class ProgramMemo:
    """A table of computed values per recent `Program`, keyed by the program's identity.

    The cached values refer to their program (a lowering holds it), so a
    table would keep its program alive: only the `capacity` most recently
    used programs keep theirs. The checks of one program run one after the
    other, so a few suffice; a test suite checking thousands of programs
    stays at a few programs' worth of memory.
    """

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self._tables: OrderedDict[int, tuple[weakref.ref, dict[Hashable, Any]]] = OrderedDict()

    def table(self, program: Program) -> dict[Hashable, Any]:
        key = id(program)
        entry = self._tables.get(key)
        if entry is not None and entry[0]() is program:
            self._tables.move_to_end(key)
            return entry[1]

        def forget(ref: weakref.ref, key: int = key) -> None:
            current = self._tables.get(key)
            if current is not None and current[0] is ref:
                del self._tables[key]

        table: dict[Hashable, Any] = {}
        self._tables[key] = (weakref.ref(program, forget), table)
        self._tables.move_to_end(key)
        while len(self._tables) > self.capacity:
            self._tables.popitem(last=False)
        return table

    def get(self, program: Program, key: Hashable, compute: Callable[[], T]) -> T:
        """The value stored under `key` for `program`, computed by `compute()` the first time."""
        table = self.table(program)
        if key not in table:
            table[key] = compute()
        return table[key]

    def __len__(self) -> int:
        return len(self._tables)

    def clear(self) -> None:
        self._tables.clear()


MEMO = ProgramMemo()
