"""ACC-71, RUN-61: followed reads that race a write, decided by the value every run of an interpreter mode
gives them.

RUN-61 on its own first: drawn one-core programs of stores, loads, copies and waits of one followed count, whose
every run is the model's one run (one core), against the write that run lands last before each load. Then ACC-71 on
the same programs (the values are facts exactly where that run reads the lowering's values), and on the seeded
examples whose interpreter runs `tests/kernels/ground_truth.json` records.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

from semcheck.checker.properties.followed_values import case_pins, not_facts  # noqa: E402
from semcheck.model import (  # noqa: E402
    AllocBuffer, Access, DmaStart, Loc, Region, Scratch, SemRef, Signal, Topology, Wait, launch)
from semcheck.model.followed import Elements, FollowedRead, FollowedWrite, ValueFacts, WrittenValues  # noqa: E402
from semcheck.model.landing import landed_writers  # noqa: E402
from semcheck.model.run import run  # noqa: E402
from semcheck.model.state import State  # noqa: E402
from semcheck.model.step import step  # noqa: E402
from semcheck.model.transient import freeze, thaw  # noqa: E402

_R = Region(((0, 1),))
EXAMPLES = ("examples/buggy/race_scoped_schedule_read_before_fetch_wait.py",
            "examples/buggy/moe_count_table_read_before_fetch_wait.py",
            "examples/buggy/race_core_map_route_read_before_fetch_wait.py")


def _drawn(events: list[str], values: list[int]):
    """A one-core program from `events`: "S" stores `count`, "L" loads it, "C0"/"C1" start a copy of 4 bytes into it
    on semaphore d0/d1, "W0"/"W1" wait for 4 bytes on d0/d1 (left out where no copy on it is left to wait: the run
    would block), and a last load. The k-th write leaves `values[k]`. The lowering's writer of each load is the last
    store or copy start before it in program order (the lowering lands a copy at its start). Returns the program
    with its facts."""
    body, writes, loads = [AllocBuffer("y"), AllocBuffer("count")], [], []
    last = -1
    pending = {"0": 0, "1": 0}
    for ev in [*events, "L"]:
        if ev[0] == "W" and not pending[ev[1]]:
            continue
        pending[ev[1:]] = pending.get(ev[1:], 0) + {"C": 1, "W": -1}.get(ev[0], 0)
        line = 100 + len(body)
        if ev == "S":
            body.append(Access("count", _R, True, Loc("k.py", line)))
            writes.append(line)
            last = len(writes) - 1
        elif ev == "L":
            body.append(Access("count", _R, False, Loc("k.py", line)))
            loads.append((line, last))
        elif ev[0] == "C":
            body.append(DmaStart(SemRef(f"d{ev[1]}"), 4, loc=Loc("k.py", line), src_buf="y", src_region=_R,
                                 dst_buf="count", dst_region=_R))
            writes.append(line)
            last = len(writes) - 1
        else:
            body.append(Wait(SemRef(f"d{ev[1]}"), 4, kind="dma", loc=Loc("k.py", line)))
    program = launch(Topology(1), [body], scratch=[Scratch("d0"), Scratch("d1")])
    pc = {op.loc.line: i for i, op in enumerate(program.cores[0]) if getattr(op, "loc", None) is not None}
    facts = ValueFacts(
        tuple(FollowedRead((0, pc[line]), Loc("k.py", line), Elements(0, "count", [0]), (w,)) for line, w in loads),
        tuple(FollowedWrite((0, pc[line]), Loc("k.py", line), Elements.of_set(0, "count", [0]),
                            WrittenValues(np.array([values[k]]), np.array([True]))) for k, line in enumerate(writes)),
        (0,))
    return dataclasses.replace(program, followed=facts)


def _landed_in_the_run(program, mode: str) -> dict[int, int] | None:
    """Per load reached (by its position), the write (index in the facts) the model's run of `mode` lands last before
    it, or -1; None when the run does not complete (some load may be unreached)."""
    full = run(program, mode, ())
    if full.kind != "completed":
        return None
    facts = program.followed
    writer_at = {w.event[1]: k for k, w in enumerate(facts.writes)}
    loads = {r.read[1] for r in facts.reads}
    state = thaw(State.initial(program))
    started: dict[int, int] = {}  # DMA ident -> its write's index
    last, seen = -1, {}
    try:
        for actor in full.schedule:
            pc = state.pcs[0] if actor[0] == "core" else None
            before = {i: d.phase for i, d in enumerate(state.dmas)}
            n = len(state.dmas)
            op = program.cores[0][pc] if pc is not None and pc < len(program.cores[0]) else None
            if pc in loads:
                seen[pc] = last
            state = step(program, mode, state, tuple(actor))
            for ident in range(n, len(state.dmas)):
                started[ident] = writer_at[pc]
            if type(op) is Access and op.write and state.pcs[0] != pc:
                last = writer_at[pc]
            for ident, d in enumerate(state.dmas):
                if d.phase == 2 and before.get(ident, 0) != 2:
                    last = started[ident]
    finally:
        freeze(state)
    return seen


def _own_semaphores(events: list[str]) -> bool:
    copies = [e for e in events if e[0] == "C"]
    return len(copies) == len(set(copies))


_EVENTS = st.lists(st.sampled_from(["S", "L", "C0", "C1", "W0", "W1"]), min_size=1, max_size=8)


@pytest.mark.rule("RUN-61")
@given(_EVENTS, st.sampled_from(["eager", "on_wait"]), st.lists(st.integers(1, 2), min_size=8, max_size=8))
@example(["S", "C0", "L", "W0"], "on_wait", [1] * 8)
@example(["C0", "W0", "C1", "L", "W1"], "on_wait", [1] * 8)
@example(["C0", "C0", "W0", "L", "W0"], "on_wait", [1] * 8)
@settings(max_examples=120, deadline=None)
def test_landed_writers_is_the_write_the_mode_lands_last(events, mode, values):
    program = _drawn(events, values)
    seen = _landed_in_the_run(program, mode)
    assume(seen is not None and program.followed.reads)
    for r in program.followed.reads:
        got = landed_writers(program, program.followed, r, mode)
        if isinstance(got, str):  # undecided: only where a copy's semaphore is shared and waited in between
            assert mode == "on_wait" and not _own_semaphores(events), (events, got)
            continue
        assert got.tolist() == [seen[r.read[1]]], (events, mode, r.loc, got, seen)


@pytest.mark.rule("RUN-61")
def test_hardware_and_another_core_s_eager_copy_are_undecided():
    program = _drawn(["C0", "L", "W0"], [1] * 3)
    read = program.followed.reads[0]
    assert "DMA-5" in landed_writers(program, program.followed, read, "hardware")
    moved = dataclasses.replace(program.followed, writes=tuple(
        dataclasses.replace(w, event=(1, w.event[1])) for w in program.followed.writes))
    two = dataclasses.replace(program, topology=Topology(2), cores=(program.cores[0], program.cores[0]))
    assert "another core" in landed_writers(two, moved, read, "eager")


@pytest.mark.rule("ACC-71")
@given(_EVENTS, st.sampled_from(["eager", "on_wait"]), st.lists(st.integers(1, 2), min_size=8, max_size=8))
@example(["C0", "L", "W0"], "on_wait", [1] * 8)
@example(["S", "C0", "L", "W0"], "on_wait", [1, 2, 1, 1, 1, 1, 1, 1])
@example(["S", "C0", "L", "W0"], "on_wait", [1] * 8)
@example(["S", "C0", "L", "W0"], "eager", [1, 2, 1, 1, 1, 1, 1, 1])
@settings(max_examples=60, deadline=None)
def test_a_drawn_racy_count_is_a_fact_exactly_where_every_run_reads_the_lowering_s_value(events, mode, values):
    program = _drawn(events, values)
    seen = _landed_in_the_run(program, mode)
    assume(seen is not None and program.followed.reads)
    facts = program.followed

    def value(k: int):
        return None if k < 0 else values[k]

    agrees = all(value(seen[r.read[1]]) == value(r.writers[0]) for r in facts.reads)
    why = not_facts(program, mode)
    if why is None:  # sound: the one run reads what the lowering read
        assert agrees, (events, mode, values)
    elif agrees and _own_semaphores(events):  # and complete where every copy has its semaphore
        raise AssertionError((events, mode, values, why))
    pins = case_pins(program, mode)
    if pins:  # a lowering is asked for exactly where a racy read lands another value, and names that value
        assert not agrees
        for (_, pos), (_, given_, initial) in pins.items():
            landed = seen[pos]
            assert bool(initial[0]) == (landed < 0) and (landed < 0 or given_[0] == values[landed])


def _cells(path: str, devices: int) -> dict:
    got = semcheck("verify", path, "--devices", str(devices), "--dma-mode", "all", "--format", "json", "--no-cache",
                   "--no-config", cwd=ROOT, timeout=900)
    report = json.loads(got.stdout)
    cells: dict = {}
    for row in report["results"]:
        cells.setdefault(row["dma_mode"], {})[row["property"]] = row
    return cells


@pytest.mark.rule("ACC-71")
@pytest.mark.parametrize("path", EXAMPLES)
def test_a_read_the_mode_lands_first_decides_every_property_as_the_interpreter_runs_it(path):
    cells = _cells(path, 2)
    truth = json.loads((ROOT / "tests/kernels/ground_truth.json").read_text())
    for mode in ("eager", "on_wait"):
        got = {p: row["verdict"] for p, row in cells[mode].items()}
        assert got.pop("race-free") == "violated"
        assert set(got.values()) == {"proved"}, (mode, got)
        ran = [r for r in truth["cases"] if r["path"] == path and r["devices"] == 2 and r["dma_mode"] == mode]
        assert ran and ran[0]["outcome"] == "completed" and not ran[0]["nonzero_count_warnings"]
    assert "racy_case" in cells["on_wait"]["deadlock-free"].get("stats", {})
    hw = {p: row["verdict"] for p, row in cells["hardware"].items()}
    assert hw.pop("race-free") == "violated" and {hw.pop("id-disjoint"), hw.pop("id-int16")} <= {"unknown", "proved"}
    assert set(hw.values()) == {"unknown"}  # (ACC-80: the id properties hold of every case's program, PRG-215)


@pytest.mark.rule("ACC-71")
@pytest.mark.parametrize("events", [["C0", "L", "W0"], ["C0", "W0", "L"]])
def test_a_value_given_to_a_read_is_checked_against_what_every_run_lands(events):
    """A case's lowering gives a read a value: the values are facts only where every run of the mode lands that
    value there, whether the read races the copy (before its wait) or not (after it)."""
    program = _drawn(events, [7] * 8)
    read = program.followed.reads[0]  # (the drawn program's first load)
    landed = _landed_in_the_run(program, "on_wait")[read.read[1]]

    def given(value: int, initial: bool):
        pinned = dataclasses.replace(read, pinned=(np.array([value]), np.array([initial])))
        facts = dataclasses.replace(program.followed, reads=(pinned, *program.followed.reads[1:]))
        return dataclasses.replace(program, followed=facts)

    right, wrong = (given(0, True), given(7, False)) if landed < 0 else (given(7, False), given(8, False))
    assert not_facts(right, "on_wait") is None
    assert not_facts(wrong, "on_wait") is not None
    assert case_pins(wrong, "on_wait")  # and the lowering asked for gives it the value the run lands


def _peer_copy(extra: str | None):
    """Two devices: device 1 copies 4 bytes into device 0's `count` (receive semaphore d0, send semaphore s); device 0
    stores `count`, waits 2 bytes on d0, loads `count`, waits 2 more. `extra` adds on device 1 a second contributor to
    device 0's d0 before all that: "copy" (another copy into device 0's `y` on d0) or "signal" (a signal of d0)."""
    sem = SemRef("d0")
    load_loc = Loc("k.py", 30)
    copy = DmaStart(sem, 4, src_sem=SemRef("s"), device=0, loc=Loc("k.py", 20), src_buf="y", src_region=_R,
                    dst_buf="count", dst_region=_R)
    peer = [AllocBuffer("y"), AllocBuffer("count")]
    if extra == "copy":
        peer.append(dataclasses.replace(copy, dst_buf="y", loc=Loc("k.py", 21)))
    elif extra == "signal":
        peer.append(Signal(sem, 4, device=0, loc=Loc("k.py", 21)))
    peer += [copy, Wait(SemRef("s"), 4, kind="dma", loc=Loc("k.py", 22))]
    own = [AllocBuffer("y"), AllocBuffer("count"), Access("count", _R, True, Loc("k.py", 28)),
           Wait(sem, 2, kind="dma", loc=Loc("k.py", 29)), Access("count", _R, False, load_loc),
           Wait(sem, 2, kind="dma", loc=Loc("k.py", 31))]
    program = launch(Topology(2), [own, peer], scratch=[Scratch("d0"), Scratch("s")])
    at = {(c, op.loc.line): pc for c, ops in enumerate(program.cores) for pc, op in enumerate(ops)
          if getattr(op, "loc", None) is not None}
    one = WrittenValues(np.array([1]), np.array([True]))
    facts = ValueFacts(
        (FollowedRead((0, at[(0, 30)]), load_loc, Elements(0, "count", [0]), (0,)),),
        (FollowedWrite((0, at[(0, 28)]), Loc("k.py", 28), Elements.of_set(0, "count", [0]), one),
         FollowedWrite((1, at[(1, 20)]), Loc("k.py", 20), Elements.of_set(0, "count", [0]), one)),
        (0,))
    return program, facts


@pytest.mark.rule("RUN-61")
@pytest.mark.parametrize("extra", [None, "copy", "signal"])
def test_another_core_s_copy_lands_on_wait_in_the_reader_s_first_wait_on_its_semaphore(extra):
    """Under on_wait another device's copy into the reader lands in the reader's first wait on the copy's receive
    semaphore (that wait pops its task, even a wait for part of its bytes), so a load after that wait reads the copy
    in every run, whichever device runs first (jax's interpreter agrees on such a kernel: the load reads the copy's
    value, never the store's). A second contributor to that semaphore may satisfy the wait first: undecided. Under
    eager the copy lands when device 1 starts it: undecided."""
    program, facts = _peer_copy(extra)
    read = facts.reads[0]
    got = landed_writers(program, facts, read, "on_wait")
    if extra is None:
        assert got.tolist() == [1], got
    else:
        assert isinstance(got, str) and "k.py:29" in got, got
    assert "another core" in landed_writers(program, facts, read, "eager")
