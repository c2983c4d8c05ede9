"""ACC-19: where the greedy run ends before a followed read that no run reaches, the verdicts stand;
ACC-20: a race on data no followed value comes from leaves the followed values facts.

The MoE whose combine waits for the wrong count (examples/buggy/moe_combine_waits_wrong_count.py) hangs
in interpret mode before reading the counts of its later experts; semcheck decides every property where
race-free holds, as the recorded runs say (tests/kernels/ground_truth.json). A read that the greedy run
misses only because it failed first, and that another schedule reaches, stays unknown.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

from semcheck.checker.properties.checking import check_program  # noqa: E402
from semcheck.checker.properties.registry import IDS  # noqa: E402
from semcheck.model import (  # noqa: E402
    Access, AllocBuffer, DmaStart, Loc, Region, Scratch, SemRef, Signal, Topology, Wait, launch)
from semcheck.model.errors import InterpreterView  # noqa: E402
from semcheck.model.followed import FollowedRead, ValueFacts, misread, reachable_read, unordered_on_followed  # noqa: E402

COMBINE = "examples/buggy/moe_combine_waits_wrong_count.py"
TRUTH = ROOT / "tests" / "kernels" / "ground_truth.json"
INTERPRET = ("eager", "on_wait")
_LOAD = Loc("k.py", 20, "count[0]")


# --- the rule on its own --------------------------------------------------------------------------


@pytest.mark.rule("ACC-19")
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6)), max_size=6),
       st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)))
def test_reachable_read_is_what_the_end_allows(positions, ends):
    reads = tuple(FollowedRead((c, pc), _LOAD, (), ()) for c, pc in positions)
    got = reachable_read(reads, ends)
    below = [r for r in reads if r.read[1] < ends[r.read[0]]]
    assert got == (below[0] if below else None)


def _followed(program, core: int):
    """`program` with the first load of `count` on `core` recorded as a followed read of the launch's value."""
    pc = next(i for i, op in enumerate(program.cores[core]) if isinstance(op, Access) and op.buf == "count")
    read = FollowedRead((core, pc), _LOAD, ((core, "count", 0),), (-1,))
    return dataclasses.replace(program, followed=ValueFacts((read,), ()))


def _count_load() -> Access:
    return Access("count", Region(((0, 1),)), False, _LOAD)


@pytest.mark.rule("ACC-19")
@pytest.mark.parametrize("mode", INTERPRET + ("hardware",))
def test_a_read_behind_a_deadlock_in_every_run_keeps_every_verdict(mode):
    """Device 1 waits for a signal nobody sends, then reads a followed count: no run reaches the read."""
    program = _followed(launch(Topology(2), [[], [Wait(SemRef("s")), _count_load()]], scratch=[Scratch("s")]), 1)
    bad = misread(program, program.followed, mode)
    assert bad is not None and not bad.reached and bad.stuck
    got = {v.property: v for v in check_program(program, mode)}
    assert got["deadlock-free"].verdict == "violated"
    assert all("ACC-9" not in (v.reason or "") for v in got.values()), got
    assert got["race-free"].holds


@pytest.mark.rule("PRG-232")
@pytest.mark.rule("ACC-19")
@pytest.mark.parametrize("mode", INTERPRET)
def test_a_read_another_schedule_reaches_stays_unknown(mode):
    """Device 0 signals device 1 and then fails (ERR-9, which ends every device); the greedy run runs device 0
    to its failure first, so it never reaches device 1's read, but a run that wakes device 1 between the
    signal and the failure reads the count: the rule must not keep the verdicts."""
    view = Access("x", Region(((0, 8),)), False, Loc("k.py", 7), InterpreterView("ReshapeTransform", "load", "k.py:7"))
    program = _followed(launch(Topology(2), [[Signal(SemRef("s"), device=1), view],
                                             [Wait(SemRef("s")), _count_load()]], scratch=[Scratch("s")]), 1)
    bad = misread(program, program.followed, mode)
    assert bad is not None and not bad.reached and bad.stuck  # the greedy run misses it: the case is live
    got = check_program(program, mode)
    unknown = {v.property for v in got if v.verdict == "unknown" and "ACC-19" in (v.reason or "")}
    # the greedy run is a run of the kernel and fails: deadlock-free's violation stands (ACC-9), nothing
    # else: race-free's proof is of the program checked, whose runs may not be the kernel's (PRG-232)
    assert unknown == set(IDS) - {"deadlock-free"}, [(v.property, v.verdict, v.reason) for v in got]
    assert next(v for v in got if v.property == "deadlock-free").verdict == "violated"
    assert "k.py:20" in next(v for v in got if v.property == "exit-balance").reason


# --- ACC-20: races on other data -------------------------------------------------------------------


@pytest.mark.rule("ACC-20")
@pytest.mark.parametrize("mode", INTERPRET + ("hardware",))
@pytest.mark.parametrize("racy", ["data", "count"])
def test_a_race_keeps_the_values_facts_only_when_it_touches_none_of_them(mode, racy):
    """A local copy into `racy` and a store to it before the copy's wait race; then the core reads a followed
    count. A race on other data changes no followed value: the verdicts stand. On the count's buffer,
    nothing but race-free is decided (the greedy run agrees with the read: only ACC-20 can say so)."""
    r = Region(((0, 1),))
    copy = DmaStart(SemRef("d"), 4, loc=Loc("k.py", 9), src_buf="y", src_region=r, dst_buf=racy, dst_region=r)
    body = [*(AllocBuffer(b) for b in dict.fromkeys((racy, "y", "count"))), copy,
            Access(racy, r, True, Loc("k.py", 10)), Wait(SemRef("d"), 4, kind="dma"), _count_load()]
    program = _followed(launch(Topology(1), [body], scratch=[Scratch("d")]), 0)
    assert misread(program, program.followed, mode) is None
    got = {v.property: v for v in check_program(program, mode)}
    assert got["race-free"].verdict == "violated"
    followed = {p for p, v in got.items() if v.verdict == "unknown" and "ACC-20" in (v.reason or "")}
    assert followed == (set() if racy == "data" else set(IDS) - {"race-free"}), got
    if racy == "data":
        assert all(v.verdict != "unknown" for v in got.values()), got


@pytest.mark.rule("ACC-20")
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("abc")), max_size=5), st.sets(st.sampled_from("abc")))
def test_unordered_on_followed_is_the_first_pair_touching_a_followed_buffer(pairs, labels):
    class E:  # the one field the rule reads of an `AccessEvent`
        def __init__(self, label: str) -> None:
            self.buffer = (0, None, label)

    events = [(E(a), E(b)) for a, b in pairs]
    got = unordered_on_followed(events, frozenset(labels))
    touching = [p for p, (a, b) in zip(events, pairs) if a in labels or b in labels]
    assert got is (touching[0] if touching else None)


# a buffer of the kernel, or an execution of one of two run_scoped sites (`buf@<site>/<execution>`)
_BUFFERS = st.sampled_from(["a", "buf@s#0/1", "buf@s#0/2", "buf@t#0/3"])


@pytest.mark.rule("ACC-44")
@given(st.lists(st.tuples(_BUFFERS, _BUFFERS, st.booleans(), st.booleans()), max_size=5), st.sets(_BUFFERS))
def test_unordered_on_followed_matches_a_run_scoped_buffer_by_its_site(pairs, labels):
    """Under `hardware` an access names a run_scoped buffer by its site (BUF-15), in the interpreter's modes by
    its execution: either way a pair touches followed data when an access's site is a followed buffer's."""
    from semcheck.model.scope import stack_slot

    class E:
        def __init__(self, label: str, by_site: bool) -> None:
            self.buffer = (0, None, stack_slot(label) if by_site else label)

    events = [(E(a, sa), E(b, sb)) for a, b, sa, sb in pairs]
    got = unordered_on_followed(events, frozenset(labels))
    sites = {stack_slot(label) for label in labels}
    touching = [p for p, (a, b, _, _) in zip(events, pairs) if stack_slot(a) in sites or stack_slot(b) in sites]
    assert got is (touching[0] if touching else None)


# --- the MoE's combine, against interpret mode --------------------------------------------------------


def _recorded(devices: int, mode: str) -> dict:
    return next(c for c in json.loads(TRUTH.read_text())["cases"]
                if c["path"] == COMBINE and c["devices"] == devices and c["dma_mode"] == mode and not c.get("kwargs"))


@pytest.fixture(scope="module")
def combine() -> list[dict]:
    run = semcheck("verify", COMBINE, "--devices", "2,4", "--dma-mode", "all", "--format", "json", "--no-cache",
                   "--no-config", cwd=ROOT, timeout=900)
    assert run.returncode == 1, run.stderr[-2000:]
    return json.loads(run.stdout)["results"]


@pytest.mark.jax
@pytest.mark.rule("ACC-19", "ACC-20")
def test_the_combine_s_wrong_wait_is_decided_as_interpret_mode_runs_it(combine):
    rows = {(r["devices"], r["dma_mode"], r["property"]): r for r in combine}
    for devices in (2, 4):
        for mode in INTERPRET:
            case = _recorded(devices, mode)
            got = {p: rows[devices, mode, p]["verdict"] for p in IDS}
            assert "unknown" not in got.values(), (devices, mode, got)
            # interpret mode hangs: every run ends at the combine's wait with a core unfinished
            assert case["outcome"] == "hang" and got["deadlock-free"] == "violated"
            # the exit warnings: device 0 leaves with back_recv[1]'s 1024 bytes at 2 devices; at 4 no device exits
            leaks = case["leaks_observed"]
            if leaks:
                assert got["exit-balance"] == "violated"
                said = rows[devices, mode, "exit-balance"]["witness"]["message"]
                assert all(f"id {leak['semaphore']}" in said and "device 0" in said for leak in leaks), said
            else:
                assert got["exit-balance"] == "vacuous"
            assert got["race-free"] == "proved" and not case.get("race_reported")
    # a TPU: at 4 devices race-free holds; at 2 a partial arrival races the output's write-back, which no
    # count is read from (ACC-20): every property is decided in both
    for devices in (2, 4):
        hw = {p: rows[devices, "hardware", p]["verdict"] for p in IDS}
        assert "unknown" not in hw.values() and hw["deadlock-free"] == "violated", (devices, hw)
    assert rows[2, "hardware", "race-free"]["verdict"] == "violated"
