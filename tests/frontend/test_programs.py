"""Targets whose kernel calls hand semaphores to each other, checked as one program (specs/deciding/programs.md).

The programs are in `programs/` (jax's start/done idiom of `tpu_pallas_async_test.py`, written
afresh, with seeded misuses). The program IR is read in a fresh process (`program_probe.py`); the
verdicts come from the CLI, as a user gets them; interpret mode is run for real where it runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.jax

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
REPO = HERE.parent.parent
SEMCHECK = [sys.executable, "-m", "semcheck.checker.run.cli"]
INTERNAL = re.compile(r"\('(site|internal|fixed|barrier|scoped)'|\(\('|internal \d+ on core|Contribution\(|WaitOp\(")

CORRECT = ["async_local_copy.py", "async_remote_copy.py", "async_copy_loop.py", "async_permute_loop.py",
           "async_two_copies.py", "async_bidi_loop.py", "async_staggered_loop.py", "device_barrier.py",
           "async_two_directions.py::build"]
MISUSES = {  # file -> the properties violated under hardware, the kernels whose lines the report must
    # give (their copy's start, their wait), the semaphore as the report names it (its parameter, the
    # kernel and which call of it), race-free's verdict
    "async_done_without_start.py": ({"deadlock-free", "dma-bytes"}, ("local_start", "local_done"),
                                    "sem[0] of copy_start (call 0)", "proved"),
    "async_start_without_done.py": ({"exit-balance", "dma-bytes", "race-free"}, ("local_start",),
                                    "sem[0] of copy_start (call 0)", "violated"),
    "async_done_wrong_future.py": ({"deadlock-free", "dma-bytes"}, ("local_start", "local_done"),
                                   "sem[0] of copy_start (call 1)", "unknown"),
    # the copy lands in a destination no later call has: after its target left (PRG-112), the rest unknown
    "async_remote_without_recv_done.py": ({"invocation-confined"}, ("remote_start",), None, "unknown"),
}
LINES = {"local_start": ".start()", "local_done": ".wait()", "remote_start": ".start()"}


def _line_of(function: str, text: str) -> int:
    """The line of `text` inside `function` of programs/_futures.py (so the tests follow edits)."""
    lines = (PROGRAMS / "_futures.py").read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith(f"def {function}("))
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def _probe(specs: list[str], devices: int = 2) -> dict[str, dict]:
    out = subprocess.run([sys.executable, str(HERE / "program_probe.py"), "--devices", str(devices), *specs],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(s.split(" ", 1)[1]) for s in out.stdout.splitlines() if s.startswith("@@PROGRAM_PROBE@@ ")]
    return {r["spec"].split("/")[-1]: r for r in rows}


@pytest.fixture(scope="module")
def probed() -> dict[str, dict]:
    names = [*CORRECT, "async_remote_no_handshake.py", "async_two_directions.py::same_id",
             "no_semaphores_handed_on.py",
             *(f"unfollowed.py::{t}" for t in ("done_under_cond", "calls_in_a_while_loop", "semaphore_through_xla",
                                               "returns_its_semaphore", "calls_xla_may_merge"))]
    return _probe([str(PROGRAMS / n) for n in names])


def _verify(name: str, mode: str = "hardware", fmt: str = "text") -> subprocess.CompletedProcess:
    return subprocess.run([*SEMCHECK, "verify", str(PROGRAMS / name), "--devices", "2", "--dma-mode", mode,
                           "--format", fmt], capture_output=True, text=True, cwd=REPO, timeout=600)


def _json_parts(names: list[str]) -> dict[str, SimpleNamespace]:
    """One JSON run over every file (a run per file spent most of its time starting jax): per name, its
    rows of the report as `stdout`."""
    paths = [str(PROGRAMS / n) for n in names]
    run = subprocess.run([*SEMCHECK, "verify", *paths, "--devices", "2", "--dma-mode", "hardware",
                          "--format", "json"], capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-3000:]
    document = json.loads(run.stdout)
    assert not document["errors"], document["errors"]
    out = {}
    for name, path in zip(names, paths):
        part = {k: [r for r in document.get(k, []) if r["file"] == path.split("::")[0]]
                for k in ("results", "differences", "suppressed")}
        out[name] = SimpleNamespace(stdout=json.dumps({**document, **part}))
    return out


@pytest.fixture(scope="module")
def verified() -> dict[str, tuple[subprocess.CompletedProcess, SimpleNamespace]]:
    """Per program its text run (exit code and text, a run each) and its JSON rows (one run for all)."""
    names = [*CORRECT, *MISUSES, "async_remote_no_handshake.py", "async_done_copies_in_too_early.py"]
    with ThreadPoolExecutor(2) as pool:
        js = pool.submit(_json_parts, names)
        text = dict(zip(names, pool.map(_verify, names)))
        js = js.result()
    return {n: (text[n], js[n]) for n in names}


def _verdicts(run: subprocess.CompletedProcess) -> dict[str, str]:
    return {r["property"]: r["verdict"] for r in json.loads(run.stdout)["results"]}


# --- the program IR --------------------------------------------------------------------------


@pytest.mark.rule("PRG-101", "PRG-2")
def test_calls_are_kept_in_program_order_with_their_lines(probed):
    start, done = _line_of("local_start", "pl.pallas_call("), _line_of("local_done", "pl.pallas_call(")
    assert probed["async_local_copy.py"]["calls"] == [
        {"name": "copy_start", "index": 0, "loc": ["_futures.py", start]},
        {"name": "copy_done", "index": 1, "loc": ["_futures.py", done]}]
    remote = probed["async_remote_copy.py"]["calls"]
    assert [(c["name"], c["index"]) for c in remote] == [("remote_start", 0), ("send_done", 1), ("recv_done", 2)]


@pytest.mark.rule("PRG-101")
def test_a_fori_loop_is_one_call_per_iteration(probed):
    loop = probed["async_copy_loop.py"]
    assert [(c["name"], c["index"]) for c in loop["calls"]] == [
        (n, k) for k, n in enumerate(["copy_start", "copy_done"] * 3)]
    # every iteration hands its own semaphore from its start to its done
    assert [link[:4] for link in loop["links"] if link[4] == "semaphore"] == [[0, 2, 1, 2], [2, 2, 3, 2], [4, 2, 5, 2]]
    assert [link[:4] for link in loop["links"] if link[2] == link[0] + 1 and link[0] % 2 == 1] == [[1, 0, 2, 0],
                                                                                                  [3, 0, 4, 0]]


@pytest.mark.rule("PRG-101")
def test_every_order_of_the_calls_xla_may_choose_is_composed(probed):
    # start 1, start 2 (on start 1's x), done 1 (start 1's future), done 2 (start 2's): done 1 may run
    # before or after start 2, and the two dones in either order
    assert probed["async_two_copies.py"]["orders"] == [[0, 1, 2, 3], [0, 1, 3, 2], [0, 2, 1, 3]]
    assert probed["async_local_copy.py"]["orders"] == [[0, 1]]
    assert len(probed["async_copy_loop.py"]["orders"]) == 1  # the loop's carry chains every call


@pytest.mark.rule("PRG-101", "PRG-102")
def test_a_future_carried_across_loop_iterations_links_one_iteration_to_the_next(probed):
    staggered = probed["async_staggered_loop.py"]
    # a start before the loop, a done then a start per iteration (3, unrolled by 2), a done after it
    assert [c["name"] for c in staggered["calls"]] == ["copy_start", "copy_done"] * 4
    sems = [link[:4] for link in staggered["links"] if link[4] == "semaphore"]
    assert sems == [[k, 2, k + 1, 2] for k in range(0, 8, 2)]


@pytest.mark.rule("PRG-101")
def test_an_order_xla_may_choose_that_is_not_proved_makes_the_property_unknown():
    from types import SimpleNamespace

    from semcheck.checker.programs.results import _merge
    from semcheck.checker.properties.verdict import Verdict, Witness

    orders = [SimpleNamespace(describe_order=lambda: "a (call 0), b (call 1)"),
              SimpleNamespace(describe_order=lambda: "b (call 1), a (call 0)")]
    proved = Verdict("deadlock-free", "proved")
    stuck = Verdict("deadlock-free", "violated", witness=Witness(message="deadlock: device 0 blocks"))
    assert _merge([proved, proved], orders) is proved
    assert _merge([stuck, proved], orders) is stuck  # the traced order is one XLA may run
    merged = _merge([proved, stuck], orders)
    assert merged.verdict == "unknown"
    assert "as b (call 1), a (call 0), and then it is violated: deadlock: device 0 blocks" in merged.reason


@pytest.mark.rule("PRG-102")
def test_an_output_semaphore_links_to_the_later_call_that_waits(probed):
    local = probed["async_local_copy.py"]["links"]
    assert sorted(local) == [[0, 0, 1, 0, "buffer"], [0, 1, 1, 1, "buffer"], [0, 2, 1, 2, "semaphore"]]
    remote = probed["async_remote_copy.py"]["links"]
    # the send semaphore goes to send_done, the receive semaphore past it to recv_done; x is threaded
    # through send_done's alias
    assert [0, 2, 1, 1, "semaphore"] in remote and [0, 3, 2, 2, "semaphore"] in remote
    assert [1, 0, 2, 0, "buffer"] in remote and [0, 1, 2, 1, "buffer"] in remote


@pytest.mark.rule("PRG-103", "PRG-127")
def test_what_the_walk_cannot_follow_is_unknown_with_the_line(probed):
    source = (PROGRAMS / "unfollowed.py").read_text().splitlines()

    def line(text: str) -> int:
        return next(i for i, s in enumerate(source) if text in s) + 1

    expect = {"done_under_cond": ("inside a cond whose branch may differ between devices", line("jax.lax.cond(")),
              "calls_in_a_while_loop": ("inside a while", line("jax.lax.while_loop(")),
              "semaphore_through_xla": ("used by optimization_barrier", line("optimization_barrier(sem)"))}
    returned = probed["unfollowed.py::returns_its_semaphore"]
    assert "the program returns semaphore output 'sem' of copy_start (call 0" in returned["unknown"][0]
    merged = probed["unfollowed.py::calls_xla_may_merge"]["unknown"][0]
    assert "copy_start (call 1) is copy_start (call 0" in merged and "XLA may merge the two calls" in merged
    for target, (reason, at) in expect.items():
        r = probed[f"unfollowed.py::{target}"]
        assert reason in r["unknown"][0] and r["unknown"][1] == ["unfollowed.py", at], r["unknown"]
        assert r["composed"]["loc"] == ["unfollowed.py", at] and reason in r["composed"]["error"]


@pytest.mark.rule("PRG-103")
def test_programs_with_generated_inputs_are_unknown_not_checked_call_by_call():
    run = subprocess.run([*SEMCHECK, "verify", f"{PROGRAMS / 'unfollowed.py'}::with_generated_inputs", "--dma-mode",
                          "hardware", "--format", "json", "--examples", "2"], capture_output=True, text=True, cwd=REPO,
                         timeout=600)
    results = json.loads(run.stdout)["results"]
    assert results and {r["verdict"] for r in results} == {"unknown"}, results
    assert all("take or return semaphores" in r["reason"] for r in results)


def test_calls_that_hand_no_semaphore_on_are_still_checked_one_by_one(probed):
    alone = probed["no_semaphores_handed_on.py"]
    assert [c["name"] for c in alone["calls"]] == ["first", "second"] and alone["links"] == [[0, 0, 1, 0, "buffer"]]
    assert alone["composed"] is None
    run = _verify("no_semaphores_handed_on.py")
    assert run.returncode == 0 and "build#0" in run.stdout and "build#1" in run.stdout, run.stdout


# --- the composed program --------------------------------------------------------------------


@pytest.mark.rule("PRG-105", "PRG-6")
def test_a_linked_semaphore_is_the_producers_in_every_later_call(probed):
    assert probed["async_local_copy.py"]["composed"]["sems"] == [["copy_start#0.sem"]] * 2
    assert probed["async_remote_copy.py"]["composed"]["sems"] == [["barrier_semaphore(collective_id=0)",
                                                                   "remote_start#0.send_sem",
                                                                   "remote_start#0.recv_sem"]] * 2
    assert probed["async_copy_loop.py"]["composed"]["sems"][0] == [f"copy_start#{k}.sem" for k in (0, 2, 4)]
    # one barrier semaphore per collective id, made before the first call: it outlives the calls
    two = probed["async_two_directions.py::build"]["composed"]["sems"][0]
    assert two[:2] == ["barrier_semaphore(collective_id=0)", "barrier_semaphore(collective_id=1)"]
    assert probed["async_permute_loop.py"]["composed"]["sems"][0][0] == "barrier_semaphore(collective_id=0)"
    assert probed["async_permute_loop.py"]["composed"]["sems"][0].count("barrier_semaphore(collective_id=0)") == 1
    # PRG-116: different kernels on one id are composed in both readings, the shared one first
    shared = probed["async_two_directions.py::same_id"]["composed"]["sems"][0]
    assert shared.count("barrier_semaphore(collective_id=0)") == 1
    # a linked HBM buffer is not allocated again by the call it flows into
    buffers = probed["async_local_copy.py"]["composed"]["buffers"][0]
    assert not any(b.startswith("copy_done#1.hbm") and b != "copy_done#1.hbm2" for b in buffers), buffers


@pytest.mark.rule("PRG-104", "PRG-1", "PRG-4")
def test_devices_meet_only_at_a_communicating_calls_device_barrier(probed):
    for name in ("async_local_copy.py", "async_remote_copy.py", "async_remote_no_handshake.py"):
        assert probed[name]["composed"]["barriers"] == [[], []], name  # no clean-up barrier, no start barrier
    assert probed["device_barrier.py"]["composed"]["barriers"] == [["start#0"], ["start#0"]]
    calls = probed["async_remote_copy.py"]["composed"]["calls"]
    assert all(ks == sorted(ks) and set(ks) == {0, 1, 2} for ks in calls)


# --- verdicts --------------------------------------------------------------------------------


@pytest.mark.rule("PRG-106", "PRG-8")
@pytest.mark.parametrize("name", CORRECT)
def test_correct_programs_are_proved_on_hardware(verified, name):
    text, js = verified[name]
    assert text.returncode == 0, text.stdout + text.stderr
    assert set(_verdicts(js).values()) == {"proved"}, _verdicts(js)


@pytest.mark.rule("PRG-106", "PRG-108")
@pytest.mark.parametrize("name", sorted(MISUSES))
def test_each_misuse_is_violated_with_both_kernels_lines(verified, name):
    text, js = verified[name]
    bad, functions, semaphore, race = MISUSES[name]
    assert text.returncode == 1, text.stdout + text.stderr
    verdicts = _verdicts(js)
    assert {p for p, v in verdicts.items() if v == "violated"} == bad, verdicts
    # PRG-121: a copy never waited races with the program's return of its destination; PRG-108: a copy
    # into a buffer the program drops before the copy is waited (or never waits) is unknown
    assert verdicts["race-free"] == race, verdicts
    for f in functions:
        assert f"_futures.py:{_line_of(f, LINES[f])}" in text.stdout, (f, text.stdout)
    if semaphore is not None:  # (a landing outside its call names the copy and the target instead)
        assert semaphore in text.stdout  # the semaphore is named by the call that returned it
    assert not INTERNAL.search(text.stdout + js.stdout), INTERNAL.search(text.stdout + js.stdout)


@pytest.mark.rule("PRG-121", "PRG-9")
def test_a_copy_in_flight_when_a_later_call_copies_its_buffer_in_races_with_the_copy_in(verified):
    text, js = verified["async_done_copies_in_too_early.py"]
    verdicts = _verdicts(js)
    assert verdicts.pop("race-free") == "violated" and set(verdicts.values()) == {"proved"}
    start, done = _line_of("local_start", ".start()"), _line_of("local_done", "pl.pallas_call(")
    flat = text.stdout.replace("\n", " ")
    assert f"copy started by device 0 at tests/frontend/programs/_futures.py:{start}" in flat, flat
    assert f"the grid's copy-in of input 'o_ref'" in flat and f"_futures.py:{done}" in flat
    assert text.returncode == 1


@pytest.mark.rule("PRG-109")
def test_a_copy_that_can_arrive_before_its_call_is_unknown(verified):
    text, js = verified["async_remote_no_handshake.py"]
    assert text.returncode == 1, text.stdout + text.stderr
    verdicts = _verdicts(js)  # PRG-111: the landing is invocation-confined's violation, the rest unknown (PRG-114)
    assert verdicts.pop("invocation-confined") == "violated"
    assert verdicts.pop("id-disjoint") == verdicts.pop("id-int16") == "proved"  # PRG-215
    assert set(verdicts.values()) == {"unknown"}
    copy = _line_of("remote_start", "make_async_remote_copy(")
    call = _line_of("remote_start", "pl.pallas_call(")
    assert f"_futures.py:{copy}" in text.stdout and f"_futures.py:{call}" in text.stdout
    assert "before device 1 enters remote_start (call 0" in text.stdout
    # with the handshake (or jax's device barrier) the same copy is proved
    assert verified["async_remote_copy.py"][0].returncode == verified["device_barrier.py"][0].returncode == 0


# --- interpret mode, run for real ------------------------------------------------------------

_RUN = """
import os, sys
sys.path.insert(0, {dir!r})
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
import importlib
m = importlib.import_module({module!r})
fn, (x,) = m.build(2, interpret=pltpu.InterpretParams(dma_execution_mode={mode!r}))
x = jax.device_put(jnp.ones(x.shape, x.dtype), x.sharding)
try:
    jax.block_until_ready(fn(x))
    print("@@RAN@@")
except Exception as e:
    print("@@RAISED@@", type(e).__name__ + ": " + str(e).splitlines()[0])
"""


@pytest.mark.rule("PRG-107", "LAUNCH-2", "REP-21")
@pytest.mark.parametrize("name,mode", [("async_local_copy", "eager"), ("async_local_copy", "on_wait"),
                                       ("async_remote_copy", "eager"), ("copy_then_future", "eager")])
def test_interpret_mode_fails_at_the_first_call_as_predicted(name, mode):
    real = subprocess.run([sys.executable, "-c", _RUN.format(dir=str(PROGRAMS), module=name, mode=mode)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in real.stdout.splitlines() if s.startswith("@@")]
    assert line.startswith("@@RAISED@@ "), real.stdout + real.stderr[-2000:]
    raised = line.removeprefix("@@RAISED@@ ")
    assert raised == "NotImplementedError: nan + dma_sem"
    predicted = _verdicts(_verify(f"{name}.py", mode=mode, fmt="json"))
    # nothing runs, not even a plain call before it in the same jitted program (PRG-12): interpret mode
    # cannot run the kernel, which is no bug of it (REP-21)
    assert set(predicted.values()) == {"unrunnable"}, predicted
    run = _verify(f"{name}.py", mode=mode)
    assert raised.replace(": ", " ", 1).split(" ", 1)[1] in run.stdout and "NotImplementedError" in run.stdout
    assert run.returncode == 4, run.stdout[-2000:]


def test_semcheck_spec_prints_the_program_rules():
    from semcheck.checker.report.spec import rule_text

    for n in range(101, 110):
        assert rule_text(f"PRG-{n}").startswith(f"**PRG-{n} "), n


def test_export_refuses_a_program_of_calls_rather_than_render_each_call_alone():
    # the SPIN oracle's exporter (oracles/spin, run from the checkout's root)
    p = subprocess.run([sys.executable, "-m", "oracles.spin", "export", "--promela", str(PROGRAMS / "async_local_copy.py")],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 2 and "take or return semaphores, so they are one program" in p.stderr, p.stderr
    assert "proctype" not in p.stdout


@pytest.mark.rule("PRG-107", "PRG-12")
def test_under_interpret_mode_a_semaphore_result_fails_its_whole_computation():
    """The failing launch is lowered with the calls before it in one jitted computation, so none of them
    runs (PRG-12, recorded by examples/programs/copy_then_async_copy.py): the first call's leak is never
    seen: interpret mode cannot run the program (REP-21), with the launch's error."""
    for name in ("leak_then_future.py", "copy_then_future.py"):
        js = _verdicts(_verify(name, mode="eager", fmt="json"))
        assert set(js.values()) == {"unrunnable"}, (name, js)
        assert "nan + dma_sem" in _verify(name, mode="eager").stdout
    # on a TPU the leak is there
    hw = _verdicts(_verify("leak_then_future.py", fmt="json"))
    assert {"exit-balance", "dma-bytes"} <= {p for p, v in hw.items() if v == "violated"}, hw


