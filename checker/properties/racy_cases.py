"""ACC-71: an interpreter mode decided on the lowering that gives racy reads the values every run of it gives.

`followed_values.case_pins` names, per mode, the racy reads whose value in every run (RUN-61) is another than the
lowering's; the kernel is lowered again with those values (`LoweredKernel.relower`), and the mode is decided on that
program, where the reads must read what they were given (`racy_reads.racy_values`): its verdicts are the kernel's
(ACC-71's proof), but race-free, which is the first lowering's (its race comes before anything the value decides).
A lowering that asks for more values is made again with them, up to `racy_reads.MAX_ROUNDS` times; a case the front
end refuses, or one past that, leaves the mode's verdicts as they were (unknown, with their reason).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.followed_values import case_pins
from semcheck.checker.properties.racy_reads import MAX_ROUNDS
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.landing import MODES
from semcheck.model.ops import Program

RACE = "race-free"


def by_cases(k: Any, analysis: Analysis, done: dict, req: Any, decide: Callable[[Analysis, Any], dict]) -> dict:
    """`done` (mode -> (verdicts, seconds) of `analysis.program`, kernel `k`'s), each interpreter mode whose racy
    reads take other values in every run decided on the lowering that gives them (ACC-71)."""
    out = dict(done)
    for mode in req.modes:
        if mode not in MODES or mode not in done:
            continue
        pins = case_pins(analysis.program, mode, analysis.mode(mode))
        if not pins:
            out[mode] = _branches(k, analysis, mode, done[mode], req, decide)
            continue
        got = _case(k, mode, pins, req, decide)
        if isinstance(got, str):  # the verdicts stay unknown, saying why the case was not decided
            out[mode] = ([v if v.verdict != "unknown" else dataclasses.replace(v, reason=f"{v.reason}; {got}")
                          for v in done[mode][0]], done[mode][1])
            continue
        (verdicts, seconds), said = got
        old = {v.property: v for v in done[mode][0]}
        out[mode] = ([old[RACE] if v.property == RACE and RACE in old else _said(v, said) for v in verdicts],
                     done[mode][1] + seconds)
    return out


def _branches(k: Any, analysis: Analysis, mode: str, done: Any, req: Any, decide: Callable) -> Any:
    """ACC-77: `done` (the mode's verdicts, seconds) where reads RUN-61 does not settle leave some unknown, decided
    over every case of the values they may take (`racy_branches.by_branches`); unknown with why where not."""
    if all(v.verdict != "unknown" or v.property == RACE for v in done[0]):
        return done
    from semcheck.checker.properties.racy_branches import by_branches

    got = by_branches(k, analysis, mode, req, decide)
    if got is None:
        return done
    if isinstance(got, str):
        return ([v if v.verdict != "unknown" else dataclasses.replace(v, reason=f"{v.reason}; {got}")
                 for v in done[0]], done[1])
    verdicts, seconds, _ = got
    old = {v.property: v for v in done[0]}
    return ([old[RACE] if v.property == RACE and RACE in old else v for v in verdicts], done[1] + seconds)


def _case(k: Any, mode: str, pins: dict, req: Any, decide: Callable[[Analysis, Any], dict]) -> Any:
    """The mode's (verdicts, seconds) on the lowering with `pins` (more added as it asks), and the case in words;
    else why there is none (a str)."""
    for _ in range(MAX_ROUNDS):
        try:
            program = k.relower(pins)
        except FrontendError as e:
            return f"the lowering that gives those reads their values is refused: {e} (ACC-71)"
        if not isinstance(program, Program) or program.followed is None:
            return "the lowering that gives those reads their values follows none (ACC-71)"
        a = Analysis(program)
        more = case_pins(program, mode, a.mode(mode))
        if more:  # every racy read of this lowering, with the value the mode gives it
            pins = more
            continue
        said = "; ".join(f"the read at {p[0]} takes {_words(p[1], p[2])}" for p in pins.values())
        return decide(a, dataclasses.replace(req, modes=(mode,)))[mode], said
    return f"the lowerings that give racy reads their values asked for more past {MAX_ROUNDS} rounds (ACC-71)"


def _words(values: Any, initial: Any) -> str:
    shown = ["the uninitialised fill" if init else str(v) for v, init in zip(values, initial)]
    return shown[0] if len(shown) == 1 else "[" + ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "") + "]"


def _said(v: Verdict, said: str) -> Verdict:
    return dataclasses.replace(v, stats={**v.stats, "racy_case": f"in every run of the mode {said} (ACC-71, RUN-61)"})


__all__ = ["by_cases"]
