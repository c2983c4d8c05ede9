"""The reductions a property may be decided on, registered once, each with the spec rule that argues it.

What every reduction keeps (stated once, here): `decide` returns a verdict that holds of the whole
program, or None, and then the property's next accepted reduction is tried, and last the whole program
(`on_program`). A property declares the reductions it accepts in the registry (`Property.reductions`);
`checking` loops over them and names no property.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from semcheck.checker.properties.confined_order import confined_on_period
from semcheck.checker.properties.decide import decide
from semcheck.checker.properties.failing_runs import fold_unsafe
from semcheck.checker.properties.folding import proved_on_fold
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.symmetric import WholeProgramNeeded

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import Analysis

Decide = Callable[["Analysis", str, str, int], "Verdict | None"]  # (analysis, property, mode, timeout_ms)


@dataclasses.dataclass(frozen=True)
class Reduction:
    """One reduction: `applies` says whether it can be tried on the program under a mode (with folding
    allowed or not), `decide` tries it. `rule` is the spec rule whose argument makes it sound."""

    name: str
    rule: str
    applies: Callable[["Analysis", str, bool], bool]
    decide: Decide


REDUCTIONS: dict[str, Reduction] = {}


def reduction(name: str, rule: str, applies: Callable[["Analysis", str, bool], bool]
              ) -> Callable[[Decide], Decide]:
    """Register `decide` as the reduction `name`, argued by spec rule `rule`."""
    def register(fn: Decide) -> Decide:
        assert name not in REDUCTIONS, f"reduction {name!r} registered twice"
        REDUCTIONS[name] = Reduction(name, rule, applies, fn)
        return fn
    return register


def _foldable(analysis: Analysis, mode: str, fold: bool) -> bool:
    # the fold reads the skeleton, which drops the accesses that raise in the interpreter (ERR-9)
    return fold and not fold_unsafe(analysis, mode) and analysis.fold is not None


@reduction("fold", "RUN-7", _foldable)
def _on_fold(analysis: Analysis, prop: str, mode: str, timeout_ms: int) -> Verdict | None:
    """RUN-7 (RUN-37's quotient): a proof on the skeleton's quotient under the program's rotation (RUN-36) is a proof of the
    program: faithful (RUN-7's fold) or, without one, the class run's (RUN-31)."""
    return proved_on_fold(analysis.fold, prop, mode, timeout_ms=timeout_ms, analysis=analysis.fold_analysis)


def _symmetric(analysis: Analysis, mode: str, fold: bool) -> bool:
    return analysis.symmetric


@reduction("one-period", "RUN-22", _symmetric)
def _on_one_period(analysis: Analysis, prop: str, mode: str, timeout_ms: int) -> Verdict | None:
    """RUN-22: a property of a Symmetric (a program given by one period and its rotation, RUN-20, RUN-36)
    decided on the Symmetric itself, kept only when proved; None when
    its check needs every core (`WholeProgramNeeded`) or does not prove."""
    try:
        v = decide(prop, analysis.program, mode, timeout_ms=timeout_ms, facts=analysis.mode(mode))
    except WholeProgramNeeded:
        return None
    return v if v.verdict == "proved" else None


@reduction("one-period-order", "PRG-164", _symmetric)
def _on_one_period_order(analysis: Analysis, prop: str, mode: str, timeout_ms: int) -> Verdict | None:
    """PRG-164, PRG-165: invocation-confined of a Symmetric under hardware from one period's order; where
    it shows nothing the whole program's held runs decide (PRG-113)."""
    return confined_on_period(analysis.program, mode)


def reduced(analysis: Analysis, accepted: tuple[tuple[str, frozenset[str]], ...], prop: str, mode: str,
            budget: Callable[[], int | None], *, fold: bool, only: frozenset[str] | None = None
            ) -> Verdict | None:
    """The first verdict one of `accepted`'s reductions (name, modes) gives `prop` under `mode`, or None.
    `budget()` is the time a try may take (None: none left); `only`: the reductions to try, all if None."""
    for name, modes in accepted:
        if mode not in modes or (only is not None and name not in only):
            continue
        red = REDUCTIONS[name]
        if not red.applies(analysis, mode, fold):
            continue
        ms = budget()
        if ms is None:
            return None
        v = red.decide(analysis, prop, mode, ms)
        if v is not None:
            return v
    return None


def on_program(analysis: Analysis, prop: str, mode: str, timeout_ms: int) -> Verdict:
    """The fallback: `prop` decided on the whole program; a Symmetric's is materialised (RUN-21), or the
    verdict is unknown with the reason it is not built."""
    if analysis.symmetric:
        whole = analysis.whole_program
        if isinstance(whole, str):
            return Verdict(prop, "unknown", reason=whole)
        return decide(prop, whole.program, mode, timeout_ms=timeout_ms, facts=whole.mode(mode))
    return decide(prop, analysis.program, mode, timeout_ms=timeout_ms, facts=analysis.mode(mode))
