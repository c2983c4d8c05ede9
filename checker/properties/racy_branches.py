"""ACC-77: racy reads RUN-61 does not settle, decided by cases.

Under `eager` another core's copy lands inside its `dma_start`, on that core, so whether it lands before a read of
its elements depends on the schedule (RUN-61 leaves it undecided). The read then takes one of a finite set of values
(`racy_reads.alternatives`: the write RUN-61 places last on the reading core before it, or any other core's copy of
the element). The kernel is lowered once per combination of those values (`KernelInputs.pins`, each marked as a
case's), depth first, one undecided read at a time, each case's own racy reads asked again (ACC-71's rounds), within
`MAX_CASES` lowerings; each case is decided as any program, and per property the verdicts combine: violated where
a case's witness run reads the values the case gave (`racy_reads.reads_as_given`: a run of the kernel), proved
where every case proves it (vacuous where every case holds and some only vacuously), otherwise unknown, naming a
case of each verdict. A violation every case shows is not combined into one by itself: a case's witness is a run of
its lowering, in which the read may take its value where no run of the kernel can (the value is the schedule's, not
the data's), so without that replay nothing shows that run is the kernel's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.followed_values import racy_pairs
from semcheck.checker.properties.per_mode_values import combine_cases
from semcheck.checker.properties.racy_reads import racy_values, reads_as_given
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.ops import Program

# ACC-77: how many lowerings one mode's cases may take before it stays unknown
MAX_CASES = 64


def by_branches(k: Any, analysis: Analysis, mode: str, req: Any, decide: Callable[[Analysis, Any], dict]) -> Any:
    """ACC-77: `mode`'s (verdicts, seconds, the cases in words) over every case of the racy reads RUN-61 does not
    settle in `analysis.program` (kernel `k`'s first lowering); None where it has none; else why not (a str)."""
    stack: list[tuple[dict, Analysis | None]] = [({}, analysis)]
    leaves: list[tuple[str, list[Verdict], float]] = []
    lowerings = 0
    while stack:
        pins, a = stack.pop()
        if a is None:
            lowerings += 1
            if lowerings > MAX_CASES:
                return (f"the racy reads' cases need more than {MAX_CASES} lowerings (ACC-77: each value a read may "
                        "take under eager is lowered and decided one by one)")
            try:
                program = k.relower(pins)
            except FrontendError as e:
                return f"the lowering of the case {_words(pins)} is refused: {e} (ACC-77)"
            if not isinstance(program, Program) or program.followed is None:
                return f"the lowering of the case {_words(pins)} follows none (ACC-77)"
            a = Analysis(program)
        pairs = racy_pairs(a.program, mode, a.mode(mode))
        branches: list = []
        why, more = None, {}
        if pairs is not None:
            why, more, _ = racy_values(a.program, mode, a.program.followed, pairs, branches)
        if why is not None:
            return f"{why} (in the case {_words(pins)}; ACC-77)" if pins else None
        if not pins and not branches:
            return None  # (no read ACC-77 decides: the mode's verdicts stand as they are)
        if not pins and math.prod(len(alts) for _, _, alts in branches) > MAX_CASES:
            n = math.prod(len(alts) for _, _, alts in branches)
            return (f"the {len(branches)} racy reads RUN-61 does not settle under eager (the first at "
                    f"{branches[0][1]}) may take {n:,} combinations of values, past the {MAX_CASES} cases semcheck "
                    "decides one by one (ACC-77)")
        base = more or pins
        if branches:
            key, loc, alts = branches[0]
            stack.extend(({**base, key: (loc, values, initial, True)}, None) for values, initial in reversed(alts))
        elif more:
            stack.append((more, None))
        else:
            verdicts, seconds = decide(a, dataclasses.replace(req, modes=(mode,)))[mode]
            leaves.append((_words(pins), [_shown(a.program, v) for v in verdicts], seconds))
    return combine(req.properties, leaves), sum(s for _, _, s in leaves), len(leaves)


def _shown(program: Program, v: Verdict) -> Verdict:
    """A case's violation whose witness run reads, at each read the case gave a value, that value (so it is a run
    of the kernel), marked as such (`stats["kernel_run"]`)."""
    if v.verdict != "violated" or v.witness is None or not v.witness.schedule or \
            not reads_as_given(program, program.followed, v.witness.schedule):
        return v
    return dataclasses.replace(v, stats={**v.stats, "kernel_run": True})


def combine(properties: Any, cases: list[tuple[str, list[Verdict], float]]) -> list[Verdict]:
    """ACC-77: per property, violated where a case's witness is a run of the kernel (`_shown`), proved where every
    case proves it (vacuous where every case holds and some only vacuously), unknown otherwise, naming a case of
    each verdict (`per_mode_values.combine_cases`, the one combination of cases)."""
    return combine_cases(properties, [(w, vs) for w, vs, _ in cases], rule="ACC-77", mode="eager",
                         of="of the values the racy reads may take under eager", kernel_runs=True)


def _words(pins: dict) -> str:
    """The values a case gives its undecided reads, in words."""
    said = []
    for (core, _), got in pins.items():
        if len(got) > 3 and got[3]:
            loc, values, initial = got[:3]
            shown = ["the uninitialised fill" if init else str(v) for v, init in zip(values, initial)]
            said.append(f"{shown[0] if len(shown) == 1 else '[' + ', '.join(shown[:4]) + ']'} at {loc} on core {core}")
    return "(" + ", ".join(said[:6]) + (", ..." if len(said) > 6 else "") + ")"


__all__ = ["MAX_CASES", "by_branches", "combine"]
