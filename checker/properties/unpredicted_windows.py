"""ERR-32: `deadlock-free` in the interpreter's modes where a window the interpreter may refuse was not predicted.

ACC-10 predicts the failure of a load, store or copy whose window jax's interpreter refuses; where the front end
cannot (a view that is not a chain of indexers it follows, an index whose value it does not know), it lowers the
access with no failure (`LoweringStats.unpredicted` names the first). A run that raises there fails, which is
`deadlock-free`'s violation in the interpreter's modes, so a proof of it there is not one. The other properties
hold of every prefix of a run, so the runs a failure cuts short keep them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from semcheck.model.ops import INTERPRETER_MODES

DEADLOCK = "deadlock-free"


def unpredicted_reason(lowered: Iterable[Any]) -> str:
    """The words of the first unpredicted window among the lowered kernels and composed programs, "" if none."""
    return next((why for k in lowered if (why := getattr(getattr(k, "stats", k), "unpredicted", ""))), "")


def unpredicted(result: Any, why: str) -> Any:
    """`result` with a proved `deadlock-free` unknown under an interpreter mode when `why` names a window the
    interpreter may refuse unseen."""
    if not why or result.dma_mode not in INTERPRETER_MODES:
        return result
    verdicts = [dataclasses.replace(v, verdict="unknown", reason=f"a run may raise: {why}")
                if v.property == DEADLOCK and v.verdict == "proved" else v for v in result.verdicts]
    return dataclasses.replace(result, verdicts=verdicts)


__all__ = ["unpredicted", "unpredicted_reason"]
