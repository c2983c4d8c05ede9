"""PRG-163: a target whose calls neither communicate nor take or return a semaphore is checked call by call,
but where a `cond` (or `while_loop`) lets only some devices run a call, the interpreter hangs at the call's
clean-up barrier (PRG-145): its verdicts are then unknown, with the call's line, never the calls' own proofs.
Targets: examples/programs/buggy/per_device_local_call.py and tests/programs/local_cond_targets.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLE = "examples/programs/buggy/per_device_local_call.py"
TARGETS = "tests/programs/local_cond_targets.py"
MARKER = "@@SKIPPED@@ "

_DECIDE = """
import json
from semcheck.checker.frontend import lower_target, provision_devices
provision_devices(4)
from semcheck.checker.frontend.programs import calls_some_devices_skip
from semcheck.checker.frontend.targets import load_targets

def decide(name, **kw):
    (t,) = load_targets({path!r} + "::" + name)
    got = calls_some_devices_skip(t, 4, lower_target(t, 4, build_kwargs=kw), build_kwargs=kw)
    return None if got is None else [got[0], None if got[1] is None else got[1].line]

out = {{"masks": [decide("devices_in_mask", mask=m) for m in range(16)],
       "uniform": decide("uniform_flag"), "while": decide("per_device_trip_count")}}
print({marker!r} + json.dumps(out))
"""


def _line(path: str, text: str) -> int:
    return next(i for i, s in enumerate((REPO / path).read_text().splitlines(), 1) if text in s)


def _verify(path: str, devices: str) -> list[dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", path, "--devices", devices,
                          "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return json.loads(run.stdout)["results"]


@pytest.mark.jax
@pytest.mark.rule("PRG-163", "PRG-180", "PRG-181")
def test_a_local_call_only_some_devices_run_is_unknown_in_the_interpreter():
    """The recorded runs hang (2 and 4 devices, both modes, with and without the race detector); semcheck
    says deadlock-free violated there (device 0 runs one call, the others none: PRG-180), every other property
    vacuous (device 0 waits at the call's start barrier before its kernel runs: PRG-181), naming the call and its
    line, and proves every property under `hardware`."""
    truth = json.loads((HERE / "ground_truth.json").read_text())
    runs = [c for c in truth["cases"] if c["path"] == EXAMPLE]
    assert len(runs) == 8 and {c["outcome"] for c in runs} == {"hang"}, [(c["key"], c["outcome"]) for c in runs]
    got = _verify(EXAMPLE, "2,4")
    assert {(r["devices"], r["dma_mode"]) for r in got} == {(n, m) for n in (2, 4) for m in ("eager", "on_wait", "hardware")}
    line = f"per_device_local_call.py:{_line(EXAMPLE, 'return pl.pallas_call(')}"
    for r in got:
        if r["dma_mode"] == "hardware":
            assert r["verdict"] == "proved", r
        elif r["property"] == "deadlock-free":
            msg = r["witness"]["message"]
            assert r["verdict"] == "violated" and "no run completes" in msg and "PRG-180" in msg, r
            assert "_double_kernel" in msg and line in msg and "on device 0" in msg, r
        else:
            assert r["verdict"] == "vacuous" and "PRG-181" in r["reason"] and "start barrier" in r["reason"], r
            assert "_double_kernel" in r["reason"] and line in r["reason"] and "on device 0" in r["reason"], r


@pytest.mark.jax
@pytest.mark.rule("PRG-163", "PRG-197")
def test_which_devices_run_a_local_call_decides_whether_the_interpreter_verdicts_stand():
    """Every subset of the 4 devices running the call (bit d of the mask: device d runs it): the calls alone
    stand exactly when no device or every device runs it. A while_loop whose trip count is the device's index gives
    each device its calls (PRG-197): devices 1 to 3 run the loop's first call, device 0 none."""
    run = subprocess.run([sys.executable, "-c", _DECIDE.format(path=TARGETS, marker=MARKER)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (out,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert out is not None, run.stderr[-3000:]
    got = json.loads(out.removeprefix(MARKER))
    for mask, skipped in enumerate(got["masks"]):
        some = [d for d in range(4) if mask >> d & 1]
        if len(some) in (0, 4):
            assert skipped is None, (mask, skipped)
        else:
            on = f"on device{'s' if len(some) > 1 else ''} {', '.join(map(str, some))})"
            assert skipped is not None and on in skipped[0], (mask, skipped)
    assert got["uniform"] is None
    why, line = got["while"]
    loop = f"local_cond_targets.py:{_line(TARGETS, 'jax.lax.while_loop(')}"
    assert "runs on only some devices" in why and "(counted from 0, of 0 on device 0, 1 on device 1, 2 on device 2, " \
        "3 on device 3) of the loop at " in why and loop in why and "on devices 1, 2, 3" in why, why
    assert line == _line(EXAMPLE, "return pl.pallas_call("), (why, line)


@pytest.mark.jax
@pytest.mark.rule("PRG-163")
def test_a_local_call_under_a_cond_every_device_takes_alike_stays_proved():
    got = _verify(f"{TARGETS}::uniform_flag", "4")
    assert {r["dma_mode"] for r in got} == {"eager", "on_wait", "hardware"}
    assert {r["verdict"] for r in got} == {"proved"}, [r for r in got if r["verdict"] != "proved"]


@pytest.mark.jax
@pytest.mark.rule("PRG-163", "PRG-145", "PRG-212")
def test_a_lone_communicating_call_only_some_devices_run_is_composed():
    """The ring kernel, the program's one call, run by device 0 alone: checked alone, every device would run it
    and every property be proved; composed, device 0 waits for a signal no device sends. In the interpreter device 0
    signals its left neighbour's barrier semaphore and blocks at its wait while the others have finished: the rest
    is proved over what it reaches (PRG-212)."""
    got = {(r["dma_mode"], r["property"]): r for r in _verify(f"{TARGETS}::lone_ring_on_device_0", "4")}
    dead = got[("hardware", "deadlock-free")]
    assert dead["verdict"] == "violated" and "device 0 blocks" in dead["witness"]["message"], dead
    assert all(r["verdict"] == "proved" and "PRG-212" in r["reason"]
               for (m, p), r in got.items() if m != "hardware" and p != "deadlock-free")
    for m in ("eager", "on_wait"):  # device 0 runs one call, the others none (PRG-180)
        assert got[(m, "deadlock-free")]["verdict"] == "violated", got[(m, "deadlock-free")]


@pytest.mark.jax
@pytest.mark.rule("PRG-179", "PRG-180")
def test_calls_of_different_devices_that_meet_at_the_barriers_stay_unknown():
    """Device 0 runs one local kernel, the others another: the interpreter completes the run (PRG-179), so no
    hang is claimed, and what the two calls do in one manager is not modelled. Where only device 0's call has no
    collective id, it waits at a start barrier no other device reaches: deadlock-free violated, naming the call."""
    met = _verify(f"{TARGETS}::other_kernel_on_other_devices", "2")
    assert {r["verdict"] for r in met if r["dma_mode"] != "hardware"} == {"unknown"}, met
    hung = [r for r in _verify(f"{TARGETS}::start_barrier_on_device_0_only", "2")
            if r["dma_mode"] != "hardware" and r["property"] == "deadlock-free"]
    assert hung and all(r["verdict"] == "violated" and "start barrier never trips" in r["witness"]["message"]
                        for r in hung), hung
