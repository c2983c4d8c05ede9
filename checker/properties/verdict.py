"""Verdicts: what semcheck concludes about one property of one kernel configuration."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from semcheck.checker.properties.registry import IDS
from semcheck.model.ops import Loc

VerdictKind = Literal["proved", "vacuous", "violated", "unknown", "unrunnable"]

# REP-20, REP-21: the kinds in report order. `vacuous` holds only because no run reaches what the property is
# about (no run reaches a kernel exit, no access runs): true, but nothing was shown, so never counted as proved.
# `unrunnable` is a kernel jax's interpreter cannot run at all (a semaphore output, a primitive with no
# interpret-mode rule): a limitation of the interpreter, not of the kernel, so neither a proof nor a bug.
KINDS: tuple[str, ...] = ("proved", "vacuous", "violated", "unknown", "unrunnable")


@dataclasses.dataclass(frozen=True)
class Witness:
    """A counterexample that replays on the reference model.

    `schedule` is a sequence of model actors (`("core", g)`, `("dma_read", k)`,
    `("dma_write", k)`) from the initial state; `blocked` lists
    `(core, pc, description)` of the cores stuck at the end; `locs` are the
    kernel lines involved; `details` carries property-specific facts
    (semaphore, counts, allocation sites, ...), JSON-serialisable.
    """

    message: str
    schedule: tuple[tuple[str, int], ...] = ()
    blocked: tuple[tuple[int, int, str], ...] = ()
    locs: tuple[Loc, ...] = ()
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    hint: str = ""


@dataclasses.dataclass(frozen=True)
class GeneratedInput:
    """The generated input a verdict of a target with `inputs=` is about (`checker/run/generated_inputs.py`).

    `value` is the input in JSON form (None when it has none), `text` how
    reports show it; `index` its position among the generated inputs (1-based;
    0 for an input found by shrinking, then `shrunk_from` is the generated
    input it was shrunk from, in `shrink_steps` tries); `examples` how many
    inputs were verified in full.
    """

    value: Any
    text: str
    index: int
    examples: int
    shrunk_from: str | None = None
    shrink_steps: int = 0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """`proved`, `vacuous` (with the reason: what no run reaches), `violated` (with a witness), `unknown`
    (with the reason) or `unrunnable` (with the reason: what jax's interpreter raises, and where)."""

    property: str
    verdict: VerdictKind
    reason: str = ""
    witness: Witness | None = None
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)
    input: GeneratedInput | None = None  # a target with generated inputs: the input this verdict is about

    def __post_init__(self) -> None:
        if self.property not in IDS:
            raise ValueError(f"unknown property {self.property!r}")
        if self.verdict == "violated" and self.witness is None:
            raise ValueError("a violation needs a witness")
        if self.verdict in ("unknown", "vacuous", "unrunnable") and not self.reason:
            raise ValueError(f"a verdict {self.verdict} needs a reason")

    @property
    def holds(self) -> bool:
        """Whether the property is true of every run: proved, or vacuously (REP-20). What another check
        builds on may use this; what counts as proved must ask `verdict == "proved"`."""
        return self.verdict in ("proved", "vacuous")


# a stats key: the verdict holds of the runs only up to a failure every run raises (ACC-15, ACC-39, RUN-11), so not
# of what a run would do past it (PRG-231)
UP_TO_FAILURE = "up_to_failure"

# a stats key of `deadlock-free` under an interpreter mode: True where its check showed that no run of the program
# raises (S''s end at no failing operation, RUN-9, or every schedule explored, ERR-19), so that a violation is a
# hang alone, which starts no later call (ERR-57)
NO_RUN_RAISES = "no_run_raises"


def vacuous(prop: str, reason: str, **kw: Any) -> Verdict:
    """REP-20: `prop` holds only because no run reaches what it is about; `reason` says what is not reached."""
    return Verdict(prop, "vacuous", reason=reason, **kw)


def unknown_kind(reason: str) -> str:
    """A coarse class of an unknown verdict's reason, for grouping and hints."""
    r = reason.lower()
    if r.startswith(("timeout", "timed out")) or "z3 gave up: timeout" in r or "canceled" in r:
        return "timeout"
    if r.startswith("unsupported"):
        return "unsupported"
    if "program can fail" in r:
        return "fails"
    if "deadlocks" in r:
        return "deadlocks"
    if "outside the encoding" in r or "not static" in r:
        return "encoding"
    return "other"
