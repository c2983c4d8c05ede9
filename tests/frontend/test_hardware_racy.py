"""ACC-80: under `hardware`, racy reads of followed values decided by cases of the values a TPU may read.

The candidates first (`model.racy_candidates`), on drawn one-core programs of stores, never-waited copies and loads
of one followed count: every value a TPU run may give a load (the last store before it, or the contents before any
write where there is none, or any copy started before it, which lands at any moment) is a candidate, and a load
that may read the contents before any write has none (uninitialised memory is not enumerable). Then the cases'
combination, and the seeded examples under `hardware`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

from semcheck.checker.properties.hardware_cases import MAX_CASES, case_order, combined  # noqa: E402
from semcheck.checker.properties.verdict import Verdict, Witness  # noqa: E402
from semcheck.model import AllocBuffer, Access, DmaStart, Loc, Region, Scratch, SemRef, Topology, launch  # noqa: E402
from semcheck.model.followed import Elements, FollowedRead, FollowedWrite, ValueFacts, WrittenValues  # noqa: E402
from semcheck.model.racy_candidates import site_of  # noqa: E402

_R = Region(((0, 1),))


def _program(events: list[tuple[str, int]]):
    """A one-core program: ("S", v) stores v into `count`, ("C", v) starts a copy leaving v in it (never waited),
    ("L", _) loads it. Returns the program, its facts and, per load, the values a TPU run may give it (None: the
    contents before any write)."""
    body, writes, loads = [AllocBuffer("y"), AllocBuffer("count")], [], []
    last_store, started = None, []
    for kind, v in events:
        line = 100 + len(body)
        if kind == "S":
            body.append(Access("count", _R, True, Loc("k.py", line)))
            writes.append((line, v))
            last_store = v
        elif kind == "C":
            body.append(DmaStart(SemRef("d"), 4, loc=Loc("k.py", line), src_buf="y", src_region=_R,
                                 dst_buf="count", dst_region=_R))
            writes.append((line, v))
            started.append(v)
        else:
            body.append(Access("count", _R, False, Loc("k.py", line)))
            loads.append((line, {last_store, *started}))
    program = launch(Topology(1), [body], scratch=[Scratch("d")])
    pc = {op.loc.line: i for i, op in enumerate(program.cores[0]) if getattr(op, "loc", None) is not None}
    facts = ValueFacts(
        tuple(FollowedRead((0, pc[line]), Loc("k.py", line), Elements(0, "count", [0]), (-1,)) for line, _ in loads),
        tuple(FollowedWrite((0, pc[line]), Loc("k.py", line), Elements.of_set(0, "count", [0]),
                            WrittenValues(np.array([v], dtype=np.int32), np.array([True]))) for line, v in writes),
        (0,))
    return dataclasses.replace(program, followed=facts), facts, [seen for _, seen in loads]


_EVENTS = st.lists(st.tuples(st.sampled_from("SCL"), st.integers(0, 3)), min_size=1, max_size=8)


@pytest.mark.rule("ACC-80")
@given(_EVENTS)
@example([("S", 0), ("C", 1), ("L", 0)])
@example([("C", 1), ("L", 0), ("S", 2)])
@example([("S", 0), ("C", 1), ("S", 2), ("L", 0)])
def test_every_value_a_tpu_run_may_give_a_racy_load_is_a_candidate(events):
    program, facts, seen = _program(events)
    for j, values in enumerate(seen):
        got = site_of(program, facts, j)
        if None in values:  # no store before the load: it may read the uninitialised contents
            assert isinstance(got, str) and "before any write" in got
            continue
        assert not isinstance(got, str), got
        (choices,) = got.choices
        assert values <= set(choices), (events, j, values, choices)


@pytest.mark.rule("ACC-80")
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True), min_size=1, max_size=4))
@example([[0, 1], [2, 3, 1], [5]])
def test_the_cases_are_every_combination_of_the_candidates_each_once(per):
    import itertools

    got = list(case_order(per))
    assert sorted(got) == sorted(itertools.product(*per))
    assert got[0] == tuple(p[0] for p in per)


def _verdicts(kinds: dict[str, str]) -> list[Verdict]:
    return [Verdict(p, k, reason="r", witness=Witness("w") if k == "violated" else None) for p, k in kinds.items()]


_PROPS = ("id-disjoint", "deadlock-free", "exit-balance")


@pytest.mark.rule("ACC-80")
@given(st.lists(st.tuples(*[st.sampled_from(["proved", "violated", "unknown"])] * 3), min_size=1, max_size=6),
       st.integers(0, 3))
@example([("proved", "proved", "violated")], 5)
def test_a_property_is_proved_or_violated_only_where_every_case_says_so(kinds, more):
    cases = [(f"case {i}", _verdicts(dict(zip(_PROPS, k)))) for i, k in enumerate(kinds)]
    total = len(cases) + more
    out = {v.property: v for v in combined(_PROPS, cases, total)}
    for i, p in enumerate(_PROPS):
        seen = {k[i] for k in kinds}
        v = out[p]
        if v.verdict == "proved":
            assert seen == {"proved"} and (more == 0 or p == "id-disjoint"), (p, v.reason)
        if v.verdict == "violated":
            assert seen == {"violated"} and more == 0
        if seen == {"proved"} and more == 0:
            assert v.verdict == "proved"


@pytest.mark.rule("ACC-80")
def test_every_load_before_the_fetch_s_wait_is_a_racy_site_at_the_program_s_position():
    # DR-9's split program puts a forerunner before each copy: its pairs are read back at the program's positions,
    # or the first load after the fetch's start would be missed (it would take the lowering's value in every case)
    from semcheck.checker.frontend.api import load
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.hardware_cases import sites_of

    (k,) = load(str(ROOT / "examples/buggy/race_core_map_route_read_before_fetch_wait.py"), devices=2)
    sites = sites_of(k.program, Analysis(k.program).mode("hardware"))
    loads = [r for r in k.program.followed.reads if r.loc.line == 80]
    assert len(loads) == 16 and sorted(s.read for s in sites) == [k.program.followed.reads.index(r) for r in loads]
    assert all(len(s.choices) == 1 and len(s.choices[0]) in (1, 2) for s in sites)


def _cells(path: str, devices: int) -> dict:
    got = semcheck("verify", path, "--devices", str(devices), "--dma-mode", "hardware", "--format", "json",
                   "--no-cache", "--no-config", cwd=ROOT, timeout=900)
    return {row["property"]: row for row in json.loads(got.stdout)["results"]}


@pytest.mark.rule("ACC-80")
def test_routes_read_before_their_fetch_lands_are_decided_by_cases_under_hardware():
    cells = _cells("examples/buggy/race_core_map_route_read_before_fetch_wait.py", 2)
    assert cells["race-free"]["verdict"] == "violated"
    assert cells["id-disjoint"]["verdict"] == "proved" and "PRG-215" in cells["id-disjoint"]["reason"]
    # 16 racy loads of two candidates each: past the budget, one case is decided (a count, not a time, so the
    # verdicts do not depend on the machine's load), and only PRG-215's properties are proved
    for prop in ("deadlock-free", "exit-balance", "dma-bytes", "invocation-confined", "id-agreement"):
        row = cells[prop]
        assert row["verdict"] == "unknown" and "65,536 combinations" in row["reason"] and \
            str(MAX_CASES) in row["reason"] and "ACC-80" in row["reason"], row["reason"]


@pytest.mark.rule("ACC-80")
@pytest.mark.parametrize("path", ["examples/buggy/race_scoped_schedule_read_before_fetch_wait.py",
                                  "examples/buggy/moe_count_read_before_wait.py"])
def test_a_racy_read_of_uninitialised_memory_stays_unknown_naming_it(path):
    cells = _cells(path, 2)
    assert cells.pop("race-free")["verdict"] == "violated"
    for row in cells.values():
        assert row["verdict"] == "unknown" and "uninitialised memory is not enumerable" in row["reason"], row
