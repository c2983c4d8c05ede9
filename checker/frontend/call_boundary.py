"""Accesses at a call's boundary: the end-of-call read of its results and the XLA uses between calls.

No jax here. Two kinds of access stand outside a kernel's body (spec PRG-120, PRG-121):

* the read of every result a `pallas_call` returns, after the call: jax's interpreter reads each
  output buffer on core 0 once every core has finished, before its exit check
  (`interpret_pallas_call`, the `get` of each output buffer); on a TPU the XLA operation or call
  that consumes the result reads it after the call's exit. A single call is lowered with that read
  (`exit_reads`), so a copy into a result that is never waited races with it in every mode;
* in a program of calls, each XLA operation that uses a call's result, and the program's return of
  it, as an access of the result's buffer (`program_lower` places them, PRG-121).

Each carries a `BoundaryLoc`: the line, and what the access is in words, so that a race witness
names it. A grid copy's location is a `GridCopyLoc` instead (GRID-1); the two never mix.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from semcheck.model.ops import Access, Loc, Region

if TYPE_CHECKING:
    from semcheck.checker.frontend.trace import KernelCall


@dataclasses.dataclass(frozen=True)
class BoundaryLoc(Loc):
    """Where an access at a call boundary is, and what it is.

    `kind` is "exit" (the interpreter's read of a result at the end of its call: a program of calls
    drops it, PRG-121), "xla" (an XLA operation's use of a result) or "result" (the program returns
    it).
    """

    what: str = ""
    kind: str = "exit"


def is_boundary(op: object) -> bool:
    """Whether `op` is an access at a call boundary (not a kernel's own access nor a grid copy)."""
    return type(op) is Access and isinstance(getattr(op, "loc", None), BoundaryLoc)


def full_region(shape: tuple[int, ...]) -> Region:
    return Region(tuple((0, int(s)) for s in shape))


def exit_reads(call: KernelCall, hbm: dict[tuple[str, int], str]) -> list[Access]:
    """PRG-120: the read of each result buffer after the call's cores finish (`hbm`: (role, position) ->
    the launch's HBM label, LAUNCH-1), in output order, as jax's interpreter makes them."""
    out: list[Access] = []
    outputs = [o for o in call.operands if o.role == "output"]
    for j, o in enumerate(outputs):
        if o.kind == "semaphore" or ("output", j) not in hbm:
            continue  # a semaphore result is no buffer (its launch fails in the interpreter, LAUNCH-2)
        loc = BoundaryLoc(call.loc.file, call.loc.line, call.loc.text,
                          what=f"the read of result {o.name!r} after the call", kind="exit")
        out.append(Access(hbm[("output", j)], full_region(o.shape), False, loc))
    return out


__all__ = ["BoundaryLoc", "exit_reads", "full_region", "is_boundary"]
