"""PRG-183: a call checked alone whose loop gives each iteration different scalar inputs, decided iteration by
iteration (specs/deciding/programs.md).

The front end lowers the call once per iteration with that iteration's values (iterations with equal values share
one lowering, `frontend.scan_inputs.lower_iterations`); each lowering is checked as the call itself would be, and
the verdicts merge as the iterations of one loop run them: a property is violated when some iteration violates it
(the witness names the iteration), unknown when some iteration leaves it unknown and none violates it, and holds
only when it holds in every iteration (proved where some iteration proves it, vacuous where none reaches what it is
about).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from semcheck.checker.properties.verdict import Verdict


def iteration_checks(iterations: tuple[tuple[str, Any], ...], modes: tuple[str, ...],
                     check: Callable[[Any], dict[str, tuple[list[Verdict], float]]]
                     ) -> dict[str, tuple[list[Verdict], float]]:
    """mode -> (verdicts, seconds) of the call over its iterations; `check(program)` is what one lowering gets
    (`check_modes`, with what a single call's check adds)."""
    done: dict[int, dict[str, tuple[list[Verdict], float]]] = {}
    for _, program in iterations:
        if id(program) not in done:  # one check per distinct lowering
            done[id(program)] = check(program)
    out = {}
    for mode in modes:
        per = [(words, done[id(p)][mode][0]) for words, p in iterations]
        merged = [merge_iterations([(w, vs[i]) for w, vs in per]) for i in range(len(per[0][1]))]
        out[mode] = (merged, sum(d[mode][1] for d in done.values()))
    return out


def merge_iterations(verdicts: list[tuple[str, Verdict]]) -> Verdict:
    """One property over a loop's iterations, in the order they run (each with its words): the first violation,
    naming its iteration; else the first unknown (or unrunnable), naming its iteration; else proved where some
    iteration proves it, vacuous where every iteration is vacuous."""
    for words, v in verdicts:
        if v.verdict == "violated":
            return dataclasses.replace(v, reason=_in(words, v.reason), witness=dataclasses.replace(
                v.witness, message=_in(words, v.witness.message)))
    for words, v in verdicts:
        if not v.holds:
            return dataclasses.replace(v, reason=_in(words, v.reason))
    proved = next((v for _, v in verdicts if v.verdict == "proved"), None)
    if proved is not None:
        return proved
    words, first = verdicts[0]
    return dataclasses.replace(first, reason=f"in every iteration of the loop: {first.reason}")


def _in(words: str, text: str) -> str:
    """`text` said of one iteration (PRG-183)."""
    return f"in {words} (PRG-183): {text}" if text else f"in {words} (PRG-183)"


__all__ = ["iteration_checks", "merge_iterations"]
