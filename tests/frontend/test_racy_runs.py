"""ACC-61: a violation whose witness run reads every followed value as the lowering did is the kernel's, even
where a race leaves the values no facts (ACC-20).

The rule on its own: a one-core program copies into a followed `count` and loads it before the copy's start,
between its start and its wait, or after the wait, the lowering having taken the load's value from the copy or
from the launch; a signal nobody waits leaks at exit in every run. The leak stands exactly where the run's last
write of `count` before the load, as the mode lands the copy, is the lowering's. Then the kernel
`tests/frontend/kernels/racy_runs.py`, against jax's interpreter.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

from semcheck.checker.properties.checking import check_program  # noqa: E402
from semcheck.checker.properties.followed_values import not_facts  # noqa: E402
from semcheck.model import (  # noqa: E402
    Access, AllocBuffer, DmaStart, InterpreterView, Loc, Region, Scratch, SemRef, Signal, Topology, Wait, launch)
from semcheck.model.followed import Elements, FollowedRead, FollowedWrite, ValueFacts, WrittenValues  # noqa: E402
from semcheck.model.followed_runs import run_is_kernels, untied_write  # noqa: E402

KERNEL = "tests/frontend/kernels/racy_runs.py"
_LOAD = Loc("k.py", 20, "count[0]")
_COPY = Loc("k.py", 9, "copy")
_R = Region(((0, 1),))


def _program(where: str, writer: int, record_copy: bool = True):
    """A local copy into `count` (its `DmaStart` the one recorded write), a load of `count` `where` ("before" the
    start, "between" start and wait, "after" the wait) whose value the lowering took from `writer` (0: the copy;
    -1: the launch), and a signal nobody waits."""
    copy = DmaStart(SemRef("d"), 4, loc=_COPY, src_buf="y", src_region=_R, dst_buf="count", dst_region=_R)
    load = Access("count", _R, False, _LOAD)
    steps = [copy, Wait(SemRef("d"), 4, kind="dma")]
    steps.insert({"before": 0, "between": 1, "after": 2}[where], load)
    body = [AllocBuffer("y"), AllocBuffer("count"), *steps, Signal(SemRef("leak"))]
    program = launch(Topology(1), [body], scratch=[Scratch("d"), Scratch("leak")])
    at = {type(op).__name__ + str(getattr(op, "buf", "")): pc for pc, op in enumerate(program.cores[0])}
    read = FollowedRead((0, at["Accesscount"]), _LOAD, ((0, "count", 0),), (writer,))
    writes = (FollowedWrite((0, at["DmaStart"]), _COPY, frozenset({(0, "count", 0)})),) if record_copy else ()
    return dataclasses.replace(program, followed=ValueFacts((read,), writes))


def _expected(where: str, writer: int, mode: str) -> str:
    """exit-balance's verdict: the copy lands at its start under eager, in the wait under on_wait; the race
    (a load between start and wait) is decided only through a run under an interpreter mode (ACC-61)."""
    if where == "before":  # ordered, and the run reads the launch's contents: facts when the lowering did too
        return "violated" if writer == -1 else "unknown"
    if where == "after":  # ordered, and the run reads the copy
        return "violated" if writer == 0 else "unknown"
    landed = {"eager": 0, "on_wait": -1}.get(mode)
    return "violated" if landed == writer else "unknown"


@pytest.mark.rule("PRG-232")
@pytest.mark.rule("ACC-61")
@pytest.mark.parametrize("mode", ["eager", "on_wait", "hardware"])
@pytest.mark.parametrize("writer", [0, -1])
@pytest.mark.parametrize("where", ["before", "between", "after"])
def test_a_leak_every_eager_run_shows_stands_past_a_racy_read(where, writer, mode):
    program = _program(where, writer)
    got = {v.property: v for v in check_program(program, mode)}
    facts = (where, writer) in (("before", -1), ("after", 0))  # ordered, and the run reads what the lowering read
    # PRG-232: a race found stands; a proof of a program whose runs are not shown to be the kernel's does not
    assert got["race-free"].verdict == ("violated" if where == "between" else "proved" if facts else "unknown"), \
        got["race-free"]
    leak = got["exit-balance"]
    assert leak.verdict == _expected(where, writer, mode), leak
    if where == "between" and leak.verdict == "violated":  # ACC-61's run, or ACC-71: every run reads the lowering's
        assert "ACC-61" in leak.witness.details.get("kernel_run", "") or not_facts(program, mode) is None
    if where == "between" and leak.verdict == "unknown":
        assert "ACC-61" in leak.reason and "k.py:20" in leak.reason


@pytest.mark.rule("ACC-61")
def test_a_write_the_lowering_did_not_record_keeps_the_rule_unapplied():
    """The copy into `count` not recorded: a run whose load follows the launch's contents agrees with every
    recorded write, but the unrecorded copy lands before the load: the leak is not shown to be the kernel's."""
    program = _program("between", -1, record_copy=False)
    assert "k.py:9" in untied_write(program, program.followed)
    assert "did not record" in run_is_kernels(program, program.followed, "eager", (("core", 0),))
    leak = next(v for v in check_program(program, "eager") if v.property == "exit-balance")
    assert leak.verdict == "unknown" and "did not record" in leak.reason
    recorded = _program("between", 0)
    assert untied_write(recorded, recorded.followed) is None


def _rows():
    run = semcheck("verify", f"{KERNEL}::refetch_leaking", "--devices", "2", "--dma-mode", "all", "--format", "json",
                   "--no-cache", "--no-config", cwd=ROOT, timeout=900)
    assert run.returncode == 1, run.stderr[-2000:]
    return {(r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


def _load_line() -> int:
    lines = (ROOT / KERNEL).read_text().splitlines()
    return 1 + next(i for i, line in enumerate(lines) if "may still be landing" in line)


@pytest.mark.jax
@pytest.mark.rule("ACC-62")
def test_a_read_before_a_copy_of_the_same_bytes_lands_reads_the_lowering_s_value():
    rows = _rows()
    for mode in ("eager", "on_wait", "hardware"):
        assert rows[(mode, "race-free")]["verdict"] == "violated"
        others = {p: r["verdict"] for (m, p), r in rows.items() if m == mode and p not in ("race-free", "exit-balance")}
        # ACC-71: every run of an interpreter mode lands the second fetch at a point the program fixes (eager: its
        # start, on_wait: its wait), so the load reads one value, the same bytes (ACC-62), in every run
        assert set(others.values()) == ({"unknown"} if mode == "hardware" else {"proved"}), others
    for mode in ("eager", "on_wait"):  # on_wait: the load reads the first fetch's bytes, which the second's are
        leak = rows[(mode, "exit-balance")]
        assert leak["verdict"] == "violated", leak
        assert "flag[0] (id 2001) on device 0" in leak["witness"]["message"]
        assert "flag[0] (id 2001) on device 1" in leak["witness"]["message"]
        assert "ACC-61" in leak["witness"]["details"].get("kernel_run", "ACC-61 or ACC-71: the values are facts")
    r = rows[("hardware", "exit-balance")]
    assert r["verdict"] == "unknown" and "ACC-61" in r["reason"] and f"racy_runs.py:{_load_line()}" in r["reason"], r


_JAX = """
import contextlib, io, json, logging, os, re, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/frontend/kernels")
import jax
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
import racy_runs
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger().addHandler(Keep(level=logging.WARNING))
out = {}
for mode in ("eager", "on_wait"):
    said.clear()
    params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn", vector_clock_size=1024)
    fn, args = racy_runs.refetch_leaking(2, params=params)
    printed = io.StringIO()  # the interpreter prints its exit check's warning
    with contextlib.redirect_stdout(printed):
        jax.block_until_ready(fn(*args))
    lines = sorted({int(m) for s in said for m in re.findall(r"racy_runs.py:(\\d+)", s)})
    out[mode] = [bool(ipc.races is not None and ipc.races.races_found), lines, [s for s in printed.getvalue().splitlines() if "non-zero" in s]]
print("@@" + json.dumps(out))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-61")
def test_jax_runs_the_racy_kernel_as_semcheck_says():
    """jax, eager and on_wait with the race detector: the race at the load, and `flag` (id 2001) left at 1 on both
    devices at exit, which semcheck's eager witness names."""
    run = subprocess.run([sys.executable, "-c", _JAX], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ})
    line = next((x for x in run.stdout.splitlines() if x.startswith("@@{")), None)
    assert line is not None, run.stderr[-2000:]
    got = json.loads(line[2:])
    for mode in ("eager", "on_wait"):
        found, lines, exits = got[mode]
        assert found and _load_line() in lines, got
        warned = {m for s in exits for m in re.findall(r"Semaphore 2001 has non-zero count for (\d) .* at kernel exit: 1$", s)}
        assert warned == {"0", "1"} and len(exits) == 2, got




@pytest.mark.rule("PRG-231")
@pytest.mark.rule("PRG-232")
def test_a_race_free_proof_up_to_a_failure_does_not_make_the_values_facts():
    """`count` stored, a copy into it started, `count` loaded (the lowering took the copy's value), then a copy that
    raises in its waiter under on_wait (ACC-11), waited before the count's copy: every on_wait run fails there, and
    race-free is proved of the runs up to that failure (ACC-39), which never land the count's copy. The greedy run
    agrees with the load only as a copy landing at its start (ACC-9 (b)); as on_wait lands it, the load reads the
    store: the program checked is not shown to be the kernel's. Before, every verdict stood."""
    store = Access("count", _R, True, Loc("k.py", 5, "count[0] = 8"))
    load = Access("count", _R, False, Loc("k.py", 7, "count[0]"))
    bad = InterpreterView("ReshapeTransform", "copy", "k.py:8", side="source")
    block = DmaStart(SemRef("d", 1), 32, src_buf="x", src_region=Region(((0, 8),)), dst_buf="z",
                     dst_region=Region(((0, 8),)), view_error=bad, loc=Loc("k.py", 8))
    copy = DmaStart(SemRef("d", 0), 4, loc=_COPY, src_buf="y", src_region=_R, dst_buf="count", dst_region=_R)
    body = [AllocBuffer("y"), AllocBuffer("count"), store, copy, load, block,
            Wait(SemRef("d", 1), 32, kind="dma", loc=Loc("k.py", 9)), Wait(SemRef("d", 0), 4, kind="dma"),
            Signal(SemRef("leak"))]
    program = launch(Topology(1), [body], scratch=[Scratch("d", 2), Scratch("leak")])
    at = {op: pc for pc, op in enumerate(program.cores[0])}
    elements = ((0, "count", 0),)
    facts = ValueFacts((FollowedRead((0, at[load]), load.loc, elements, (1,)),),
                       (FollowedWrite((0, at[store]), store.loc, frozenset(elements)),
                        FollowedWrite((0, at[copy]), copy.loc, frozenset(elements))))
    got = {v.property: v for v in check_program(dataclasses.replace(program, followed=facts), "on_wait")}
    assert {v.verdict for v in got.values()} == {"unknown"}, got
    assert all("PRG-231" in v.reason for v in got.values()), got
    assert "PRG-232" in got["race-free"].reason

_SIZED = "tests/frontend/kernels/racy_runs.py::racy_size_past_the_block"


@pytest.mark.jax
@pytest.mark.rule("PRG-231")
@pytest.mark.rule("PRG-232")
def test_a_failure_a_racy_count_causes_in_the_program_checked_is_not_the_kernel_s():
    """The count's copy lands at its start in the program checked (ACC-9 (b)), whose block copy then reads past the
    block and raises in every run, before the count's copy lands in its waiter under on_wait: race-free holds of
    those runs up to the failure, and the greedy run agrees with the load only as a copy landing at its start. jax
    runs on under on_wait (the load reads the stored count). Before, on_wait said deadlock-free violated (that
    failure) and race-free proved."""
    run = semcheck("verify", _SIZED, "--devices", "2", "--dma-mode", "all", "--format", "json", "--no-cache",
                   "--no-config", cwd=ROOT, timeout=900)
    assert run.returncode == 1, run.stderr[-2000:]
    rows = {(r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}
    raised = rows[("eager", "deadlock-free")]  # every eager run reads the copy's count and raises: it stands
    assert raised["verdict"] == "violated" and "slice(0, 32, 1)" in raised["witness"]["message"], raised
    on_wait = {p: r for (m, p), r in rows.items() if m == "on_wait"}
    assert {r["verdict"] for r in on_wait.values()} == {"unknown"}, on_wait
    assert "PRG-232" in on_wait["race-free"]["reason"], on_wait["race-free"]
    assert rows[("hardware", "race-free")]["verdict"] == "violated"


_JAX_SIZED = """
import contextlib, io, json, logging, os, re, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/frontend/kernels")
import jax
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
import racy_runs
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger().addHandler(Keep(level=logging.WARNING))
mode = sys.argv[1]
params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn", vector_clock_size=1024)
fn, args = racy_runs.racy_size_past_the_block(2, params=params)
printed, raised = io.StringIO(), None
with contextlib.redirect_stdout(printed):
    try:
        jax.block_until_ready(fn(*args))
    except Exception as e:
        # the block copy's read past the block, or, where the other device's error surfaces first, its barrier
        # broken by that read (which device's error jax reports depends on the threads' timing)
        raised = "reading [(slice(0, 32, 1)" in str(e) or "BrokenBarrierError" in str(e)
print("@@" + json.dumps([raised, bool(ipc.races is not None and ipc.races.races_found),
                         [s for s in printed.getvalue().splitlines() if "non-zero" in s]]))
"""


@pytest.mark.jax
@pytest.mark.rule("PRG-231")
def test_jax_runs_the_racy_count_kernel_on_under_on_wait():
    """jax with the race detector, one process per mode (a failed computation's error rides on to the next, PRG-11):
    under eager the block copy reads 32 rows of an 8-row block and raises (or the other device's barrier, broken by
    it, surfaces first); under on_wait the run completes, the detector reports the count's race, and the signal is
    left at 1 on both devices at exit."""
    got = {}
    for mode in ("eager", "on_wait"):
        run = subprocess.run([sys.executable, "-c", _JAX_SIZED, mode], cwd=ROOT, capture_output=True, text=True,
                             timeout=900, env={**os.environ})
        line = next((x for x in run.stdout.splitlines() if x.startswith("@@[")), None)
        assert line is not None, run.stderr[-2000:]
        got[mode] = json.loads(line[2:])
    assert got["eager"][0] is True and got["eager"][1], got
    raised, found, exits = got["on_wait"]
    assert raised is None and found, got
    warned = {m for s in exits for m in re.findall(r"Semaphore \d+ has non-zero count for (\d) .*exit: 1$", s)}
    assert warned == {"0", "1"}, got

def _drawn(events: list[str], values: list[int]):
    """A one-core program from `events`: "S" stores `count`, "L" loads it, "C" starts a copy into it (each on a
    semaphore of its own), "W" waits the oldest copy not waited (then every copy left is waited); a signal
    nobody waits at the end. The k-th write leaves `values[k]`. The lowering's writer of each load: the last
    store or copy start before it in program order (the lowering lands a copy at its start). Returns the program
    with its facts, and per load (the lowering's writer, the writer under on_wait: the last store or copy wait
    before it)."""
    body, pending, writes, loads = [AllocBuffer("y"), AllocBuffer("count")], [], [], []
    last = last_landed = -1
    copies = 0
    for ev in [*events, *"W" * events.count("C")]:
        line = 100 + len(body)
        if ev == "S":
            body.append(Access("count", _R, True, Loc("k.py", line)))
            writes.append(line)
            last = last_landed = len(writes) - 1
        elif ev == "L":
            body.append(Access("count", _R, False, Loc("k.py", line)))
            loads.append((line, last, last_landed))
        elif ev == "C":
            body.append(DmaStart(SemRef(f"d{copies}"), 4, loc=Loc("k.py", line), src_buf="y", src_region=_R,
                                 dst_buf="count", dst_region=_R))
            writes.append(line)
            pending.append((copies, len(writes) - 1))
            copies += 1
            last = len(writes) - 1
        elif ev == "W" and pending:
            sem, k = pending.pop(0)
            body.append(Wait(SemRef(f"d{sem}"), 4, kind="dma", loc=Loc("k.py", line)))
            last_landed = k
    body.append(Signal(SemRef("leak")))
    program = launch(Topology(1), [body], scratch=[*(Scratch(f"d{i}") for i in range(copies)), Scratch("leak")])
    pc = {op.loc.line: i for i, op in enumerate(program.cores[0]) if getattr(op, "loc", None) is not None}
    facts = ValueFacts(
        tuple(FollowedRead((0, pc[line]), Loc("k.py", line), Elements(0, "count", [0]), (w,)) for line, w, _ in loads),
        tuple(FollowedWrite((0, pc[line]), Loc("k.py", line), Elements.of_set(0, "count", [0]),
                            WrittenValues(np.array([values[k]]), np.array([True]))) for k, line in enumerate(writes)))
    return dataclasses.replace(program, followed=facts), loads


def _racy(events: list[str]) -> bool:
    """Whether some access or copy start of `count` runs while a copy into it is pending."""
    pending = 0
    for ev in events:
        if ev in "SLC" and pending:
            return True
        pending += {"C": 1, "W": -1 if pending else 0}.get(ev, 0)
    return False


@pytest.mark.rule("ACC-61")
@pytest.mark.rule("ACC-62")
@given(st.lists(st.sampled_from("SLCW"), min_size=1, max_size=7), st.sampled_from(["eager", "on_wait", "hardware"]),
       st.lists(st.integers(1, 2), min_size=7, max_size=7))
@example(list("CLW"), "on_wait", [1] * 7)
@example(list("SCSWL"), "on_wait", [1] * 7)
@example(list("SCSWL"), "on_wait", [1, 1, 2, 1, 1, 1, 1])
@example(list("CWL"), "on_wait", [1] * 7)
@example(list("SWCLW"), "on_wait", [1] * 7)
@example(list("SWCLW"), "on_wait", [1, 2, 1, 1, 1, 1, 1])
@settings(max_examples=80, deadline=None)
def test_a_drawn_racy_count_decides_the_leak_exactly_where_the_run_reads_the_lowering_s_values(events, mode, values):
    """The leak stands where the values are facts (no race on `count`), and besides exactly where the witness
    run, copies landing as the mode lands them (eager: at the start; on_wait: at the wait), reads each load's
    value from the lowering's write or from a write that left the same value (ACC-62; never the launch's
    contents in place of a write); under hardware only without a race."""
    assume("L" in events)  # (a lowering that followed no read records no facts)
    program, loads = _drawn(events, values)
    leak = next(v for v in check_program(program, mode) if v.property == "exit-balance")
    if mode == "hardware":
        want = not _racy(events)
    else:
        want = mode == "eager" or all(lowered == landed or min(lowered, landed) >= 0 and values[lowered] == values[landed]
                                      for _, lowered, landed in loads)
    assert leak.verdict == ("violated" if want else "unknown"), (leak.verdict, leak.reason)
