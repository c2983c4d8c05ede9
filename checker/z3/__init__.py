"""Z3 encodings of semcheck's properties, one module per property family.

* `deadlock`    -- the certificate of `deadlock-free` (decided in `semcheck.checker.properties.deadlock`):
  the least-stuck-vector query (linear size). Its baseline, a naive bounded encoding with one
  timestamp per event, is a measurement, in bench/timestamped.py.
* `ids`         -- `id-disjoint`, `id-int16`, and symbolic id bounds.

Only modules that use the solver live here: the static system they read is
`semcheck.checker.static`, and the checks that need no solver (`exit-balance`,
`dma-bytes`, `id-agreement`, `race-free`) are modules of `semcheck.checker`.
"""

from __future__ import annotations

import importlib

# The checks are loaded on first use: importing this package loads no solver.
_HOMES = {
    "deadlock_free": "deadlock",
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
    "id_disjoint",
    "id_int16",
    "int16_bound",
]
