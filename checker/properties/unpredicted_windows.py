"""ERR-32: `deadlock-free` in the interpreter's modes where a window the interpreter may refuse was not predicted;
ERR-62: every verdict under `hardware` where a load or store indexes outside its buffer.

ACC-10 predicts the failure of a load, store or copy whose window jax's interpreter refuses; where the front end
cannot (a view that is not a chain of indexers it follows, an index whose value it does not know), it lowers the
access with no failure (`LoweringStats.unpredicted` names the first). A run that raises there fails, which is
`deadlock-free`'s violation in the interpreter's modes, so a proof of it there is not one. The other properties
hold of every prefix of a run, so the runs a failure cuts short keep them.

ERR-62: where ACC-10 predicts that a load or store's window lies outside its buffer in some run, a TPU's kernel
indexes there too, which no Pallas TPU document specifies (a runtime bounds check that stops the kernel, or,
with `disable_bounds_checks`, memory the ref does not own), so nothing decided under `hardware` is argued.
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


def past_end_reason(lowered: Iterable[Any]) -> str:
    """ERR-62: the words of the first load or store outside its buffer among the lowered kernels and composed
    programs, "" if none."""
    return next((why for k in lowered if (why := getattr(getattr(k, "stats", k), "past_end", ""))), "")


def unpredicted(result: Any, why: str, past_end: str = "") -> Any:
    """`result` with a proved `deadlock-free` unknown under an interpreter mode when `why` names a window the
    interpreter may refuse unseen; under `hardware`, every decided verdict unknown when `past_end` names a load or
    store outside its buffer (ERR-62)."""
    if past_end and result.dma_mode == "hardware":
        verdicts = [v if v.verdict == "unknown" else dataclasses.replace(v, verdict="unknown", reason=past_end)
                    for v in result.verdicts]  # an unknown keeps its own reason
        return dataclasses.replace(result, verdicts=verdicts)
    if not why or result.dma_mode not in INTERPRETER_MODES:
        return result
    verdicts = [dataclasses.replace(v, verdict="unknown", reason=f"a run may raise: {why}")
                if v.property == DEADLOCK and v.verdict == "proved" else v for v in result.verdicts]
    return dataclasses.replace(result, verdicts=verdicts)


__all__ = ["past_end_reason", "unpredicted", "unpredicted_reason"]
