"""ACC-80: under `hardware`, a kernel whose followed reads race a write decided by cases of the values a TPU may read.

Where the certified race pass leaves a followed load unordered with a write of its element (ACC-20), every verdict
but `race-free` was unknown under `hardware`. The load reads, on a TPU, one of its candidates, element by element
(`model.racy_candidates`). The kernel is lowered once per combination of every racy load's candidates
(`LoweredKernel.relower` with pins, as ACC-71 gives a read its value), within `MAX_CASES` lowerings, and each
case's program is decided under `hardware` (its racy loads must read what they were given, and every other
followed read is a fact as ACC-9 says). A case whose lowering reaches a racy load not among the first lowering's,
or gives one candidates the enumeration lacks, stops the decision (unknown). Per property the verdicts combine as
ACC-64's (`per_mode_values.combine_cases`); `race-free` stays the first lowering's. Past the budget a property is
still decided unknown where two cases already disagree (proved or vacuous in one, violated in another, or unknown),
and proved where it holds of every program under `hardware` (PRG-215) and the cases seen prove it.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.followed_values import unordered_pairs
from semcheck.checker.properties.per_mode_values import combine_cases
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.ops import Program
from semcheck.model.racy_candidates import Site, racy_sites, site_of

HARDWARE = "hardware"
RACE = "race-free"
MAX_CASES = 64  # lowerings of one kernel's racy reads' cases, as ACC-64's budget
# cases decided where there are more than MAX_CASES: every verdict but PRG-215's is then unknown whatever they give,
# so one case is decided, a count and not a time, so that a verdict never depends on the machine's load
PROBES = 1
OF = "of the values a TPU's racy reads may take"


def by_hardware_cases(k: Any, analysis: Analysis, done: dict, req: Any,
                      decide: Callable[[Analysis, Any], dict], deadline: float | None = None) -> dict:
    """`done` (mode -> (verdicts, seconds) of `analysis.program`, kernel `k`'s), `hardware` decided by the cases of
    its racy reads' values where they made its verdicts unknown (ACC-80); the cases stop at half the time left
    before `deadline` (the others are then not decided, as past the budget)."""
    if HARDWARE not in req.modes or HARDWARE not in done or getattr(k, "relower", None) is None:
        return done
    verdicts, seconds = done[HARDWARE]
    if not any(v.verdict == "unknown" for v in verdicts if v.property != RACE):
        return done
    sites = sites_of(analysis.program, analysis.mode(HARDWARE))
    if sites is None:
        return done
    if isinstance(sites, str):
        return {**done, HARDWARE: (_noted(verdicts, f"the racy reads are not decided by cases: {sites} (ACC-80)"),
                                   seconds)}
    now = time.monotonic()
    got = _decide_cases(k, sites, req, decide, None if deadline is None else now + (deadline - now) / 2)
    if isinstance(got, str):
        return {**done, HARDWARE: (_noted(verdicts, got), seconds)}
    cases, spent, total = got
    old = {v.property: v for v in verdicts}
    out = [old[p] if p == RACE and p in old else v for p, v in zip(req.properties, combined(
        req.properties, cases, total, sites[0].loc))]
    return {**done, HARDWARE: (out, seconds + spent)}


def sites_of(program: Any, facts: Any) -> list[Site] | str | None:
    """The racy loads of `program` under `hardware` with their candidates; None where no pair the certified pass
    leaves unordered touches a followed buffer (the values are not facts for another reason, or are), or why the
    candidates are not known."""
    if not isinstance(program, Program) or program.followed is None:
        return None
    why, pairs = unordered_pairs(program, HARDWARE, facts)
    if why is None or not pairs:
        return None
    sites = racy_sites(program, program.followed, pairs)
    return sites if isinstance(sites, str) or sites else None


def _decide_cases(k: Any, sites: list[Site], req: Any, decide: Callable[[Analysis, Any], dict],
                  stop_at: float | None) -> tuple[list, float, int] | str:
    """The (words, verdicts) of each case decided, the seconds spent and the number of cases; or why not. A case
    whose lowering reaches a racy load the sites lack, or gives one more candidates, adds them, and the
    enumeration starts again over the larger product (within the one budget of lowerings)."""
    by_key = {_id(s): s for s in sites}
    lowered = 0
    while True:
        got = _enumerate(k, by_key, req, decide, MAX_CASES - lowered, stop_at)
        if isinstance(got, tuple) and len(got) == 2:  # (more sites, lowerings spent): start again with them
            more, n = got
            lowered += n
            if _total(by_key.values()) > MAX_CASES:  # past the budget already: the probe stops here
                return ("the racy reads' cases keep reaching racy loads the first lowerings did not, past the "
                        f"{MAX_CASES} cases semcheck decides one by one (ACC-80)")
            for s in more:
                by_key[_id(s)] = s
            continue
        return got


def _enumerate(k: Any, by_key: dict, req: Any, decide: Callable[[Analysis, Any], dict], budget: int,
               stop_at: float | None) -> Any:
    """One round of the cases over `by_key`'s sites (see `_decide_cases`); `stop_at`: when no case starts any
    more (None: never)."""
    sites = list(by_key.values())
    total = _total(sites)
    cases: list[tuple[str, list[Verdict]]] = []
    spent, seen = 0.0, {}
    probing = total > MAX_CASES
    budget = min(budget, PROBES) if probing else budget
    for n, (pins, words) in enumerate(itertools.islice(_combinations(sites), max(budget, 0))):
        if stop_at is not None and time.monotonic() > stop_at:
            break
        try:
            program = k.relower(pins, hardware=True)
        except FrontendError as e:
            return f"the lowering that gives the racy reads the case {words} is refused: {e} (ACC-80)"
        a = Analysis(program) if isinstance(program, Program) else None
        if a is None or program.followed is None:
            return f"the racy reads are not decided by cases: in the case {words}, it follows no values (ACC-80)"
        why = _covered(program, a, by_key)
        if isinstance(why, list):
            return why, n + 1
        if why is not None:
            return f"the racy reads are not decided by cases: in the case {words}, {why} (ACC-80)"
        given = tuple((r.read, tuple(r.pinned[0])) for r in program.followed.reads if r.pinned is not None)
        if given not in seen:  # (pins of loads this case does not reach give the program of another case)
            seen[given] = decide(a, dataclasses.replace(req, modes=(HARDWARE,)))[HARDWARE]
            spent += seen[given][1]
        cases.append((words, seen[given][0]))
        if all(_disagree(p, cases) for p in req.properties if p != RACE):
            break  # no case left can make a property proved or violated
    if not cases:
        return (f"the racy reads' cases took the {MAX_CASES} lowerings semcheck makes, or half the time left, before "
                "one was decided (ACC-80)")
    return cases, spent, total


def _total(sites: Any) -> int:
    """The number of combinations of the sites' candidates."""
    total = 1
    for s in sites:
        total *= s.cases()
    return total


def _combinations(sites: list[Site]) -> Iterator[tuple[dict, str]]:
    """Every combination of the sites' candidates, element by element: the pins and the case in words."""
    per = [list(itertools.product(*s.choices)) for s in sites]
    for pick in case_order(per):
        pins = {(*s.key, s.loc.file, s.loc.line): (s.loc, np.array(v, dtype=object), np.zeros(len(v), dtype=bool))
                for s, v in zip(sites, pick)}
        yield pins, _words(sites, pick)


def case_order(per: list[list]) -> Iterator[tuple]:
    """Every pick of one entry of each list of `per`, each once: the first entries first, then each pick that changes
    one list's entry alone, then the rest (so that cases that disagree come early within the budget)."""
    first = tuple(p[0] for p in per)
    early = [first] + [first[:i] + (alt,) + first[i + 1:] for i, p in enumerate(per) for alt in p[1:]]
    yield from early
    done = set(early)
    yield from (pick for pick in itertools.product(*per) if pick not in done)


def _words(sites: list[Site], pick: tuple) -> str:
    """A case in words: the racy loads that do not read their earliest write's value, and what they read."""
    other = [f"{s.loc.file.rsplit('/', 1)[-1]}:{s.loc.line} on lane {s.key[0]} reads {v[0] if len(v) == 1 else list(v)}"
             for s, v in zip(sites, pick) if any(x != c[0] for x, c in zip(v, s.choices))]
    first = f"each of the {len(sites)} racy loads reads its earliest write's value"
    return first if not other else f"{first} but {', '.join(other[:6])}" + (", ..." if len(other) > 6 else "")


def _covered(program: Program, a: Analysis, by_key: dict) -> str | list[Site] | None:
    """Whether the case's lowering is one of the enumeration's: None when every racy load, and every load given a
    value, is a site with no candidate the sites lack; else the sites to add (a list), or why not (a str)."""
    facts = program.followed
    sites = sites_of(program, a.mode(HARDWARE))
    if isinstance(sites, str):
        return sites
    asked = {s.read: s for s in sites or ()}
    more = []
    for j, r in enumerate(facts.reads):
        if j not in asked and r.pinned is None:
            continue
        s = asked.get(j) or site_of(program, facts, j)
        if isinstance(s, str):
            return s
        first = by_key.get(_id(s))
        if first is None:
            more.append(s)
        elif len(first.choices) != len(s.choices):
            return f"the read at {r.loc} reads another number of elements than at its position in another case"
        elif any(not set(c) <= set(f) for c, f in zip(s.choices, first.choices)):
            more.append(dataclasses.replace(first, choices=tuple(
                f + tuple(v for v in c if v not in f) for c, f in zip(s.choices, first.choices))))
    return more or None


def _id(s: Site) -> tuple:
    """A racy load's identity across the cases' lowerings: its lane, its position in the lane's body and its line."""
    return (*s.key, s.loc.file, s.loc.line)


def _disagree(prop: str, cases: list) -> bool:
    kinds = {next(v.verdict for v in vs if v.property == prop) for _, vs in cases}
    return not kinds <= {"proved", "vacuous"} and kinds != {"violated"}


def _count(n: int) -> str:
    return f"{n:,}" if n < 10 ** 9 else f"more than 10^{len(str(n)) - 1}"


def combined(properties: Any, cases: list, total: int, first: Any = None) -> list[Verdict]:
    """Per property, its verdict over the cases decided (all `total` of them, or fewer: ACC-80); `first`: the line
    of the first racy load, which a verdict past the budget names."""
    out = combine_cases(properties, cases, of=OF, rule="ACC-80")
    if len(cases) == total:
        return out
    n = len(cases)
    for i, (p, v) in enumerate(zip(properties, out)):
        if p == RACE or _disagree(p, cases):
            continue
        if v.verdict == "proved" and BY_ID[p].holds_on_hardware:
            out[i] = dataclasses.replace(v, reason=f"it holds of every program under hardware (PRG-215), so of every one "
                                         f"of the {_count(total)} cases {OF}; {v.reason}")
            continue
        out[i] = Verdict(p, "unknown", stats={**v.stats, "cases": n}, reason=(
            f"under hardware the racy reads{'' if first is None else f' (the first at {first})'} may take "
            f"{_count(total)} combinations of values, past what semcheck decides "
            f"one by one (ACC-80: at most {MAX_CASES} cases, within half the time left); the {n} decided say: "
            f"{v.verdict}"))
    return out


def _noted(verdicts: list[Verdict], why: str) -> list[Verdict]:
    return [dataclasses.replace(v, reason=f"{v.reason}; {why}") if v.verdict == "unknown" and v.property != RACE
            else v for v in verdicts]


__all__ = ["MAX_CASES", "PROBES", "by_hardware_cases", "case_order", "combined", "sites_of"]
