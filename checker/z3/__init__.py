"""Z3 encodings of semcheck's properties, one module per property family.

* `deadlock`    -- the certificate of `deadlock-free` (decided in `semcheck.checker.deadlock`):
  the least-stuck-vector query (linear size). Its baseline, a naive bounded encoding with one
  timestamp per event, is a measurement, in bench/timestamped.py.
* `ids`         -- `id-disjoint`, `id-int16`, `id-agreement`, and symbolic id bounds.
* `balance`     -- `exit-balance`, `dma-bytes`.

Every check takes a `Program` and a DMA mode and returns a
`semcheck.checker.verdict.Verdict`; the property registry
(`semcheck.checker.properties`) says which check decides which property.
"""

from __future__ import annotations

import importlib

# The checks are loaded on first use: the static system (`counters`), the symmetry and the memo
# need no solver, and a module that imports one of them must not load Z3 through this package.
_HOMES = {
    "dma_bytes": "balance",
    "exit_balance": "balance",
    "deadlock_free": "deadlock",
    "id_agreement": "ids",
    "id_disjoint": "ids",
    "id_int16": "ids",
    "int16_bound": "ids",
    "collision_bound": "ids",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"semcheck.checker.z3.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "collision_bound",
    "deadlock_free",
    "dma_bytes",
    "exit_balance",
    "id_agreement",
    "id_disjoint",
    "id_int16",
    "int16_bound",
]
