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

from semcheck.checker.z3.balance import dma_bytes, exit_balance
from semcheck.checker.z3.deadlock import deadlock_free
from semcheck.checker.z3.ids import id_agreement, id_disjoint, id_int16, int16_bound, collision_bound

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
