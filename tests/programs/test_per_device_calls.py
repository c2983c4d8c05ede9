"""PRG-145: a `cond` whose branch differs between devices but that the walk computes on each device gives
each device its own call sequence (examples/programs/per_device_cond.py and its buggy variant); under the
interpreter's modes such a program is unknown, as its recorded runs hang."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORRECT = "examples/programs/per_device_cond.py"
BUGGY = "examples/programs/buggy/per_device_cond_partner_skips.py"
MARKER = "@@PERDEV@@ "

_WALK = """
import json
from semcheck.checker.frontend import provision_devices
provision_devices({devices})
from semcheck.checker.frontend.programs import _program_irs
from semcheck.checker.frontend.targets import load_targets
from semcheck.checker.frontend.trace import make_jaxpr
out = {{}}
for path in {paths!r}:
    (t,) = load_targets(path)
    out[path] = [[[i.name, None if i.devices is None else sorted(i.devices)] for i in ir.invocations]
                 for ir in _program_irs(t, {devices}, {{}}, make_jaxpr)]
print({marker!r} + json.dumps(out))
"""


def _walk(devices: int) -> dict:
    run = subprocess.run([sys.executable, "-c", _WALK.format(devices=devices, paths=[CORRECT, BUGGY], marker=MARKER)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    return json.loads(line.removeprefix(MARKER))


def _verify(path: str, devices: str, mode: str) -> list[dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", path, "--devices", devices,
                          "--dma-mode", mode, "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return json.loads(run.stdout)["results"]


@pytest.mark.jax
@pytest.mark.rule("PRG-145")
def test_a_call_only_some_devices_run_is_checked_on_those_devices():
    walked = _walk(4)
    assert walked[CORRECT] == [[["_ring_kernel", None], ["_double_kernel", [0]], ["_pair_kernel", None]]]
    assert walked[BUGGY] == [[["_ring_kernel", None], ["_pair_kernel", [0, 2]]]]
    good = _verify(CORRECT, "2,4", "hardware")
    assert {r["devices"] for r in good} == {2, 4} and {r["verdict"] for r in good} == {"proved"}, good
    for r in _verify(BUGGY, "2,4", "hardware"):
        if r["property"] in ("deadlock-free", "exit-balance", "dma-bytes"):
            assert r["verdict"] == "violated", r
        else:
            assert r["verdict"] == "proved", r
        if r["property"] == "deadlock-free":  # only the even devices reach the exchange, and hang in it
            msg = r["witness"]["message"]
            assert ("devices 0, 2 each block" if r["devices"] == 4 else "device 0") in msg, msg
            assert "semaphore_wait(barrier, 1)" in msg, msg


@pytest.mark.jax
@pytest.mark.rule("PRG-145", "PRG-180", "PRG-181", "PRG-212")
def test_the_interpreter_hangs_where_only_some_devices_run_a_call():
    """Every recorded interpret-mode run of both programs hangs. Device 0 runs one call more than device 1, so
    its last clean-up barrier never trips: deadlock-free is violated on every call from the first one only some
    devices run (PRG-180); the ring kernel before it runs as it does alone and keeps its own verdicts; the doubling
    kernel never gets past its start barrier (PRG-181); the pairwise kernel, which the devices that do not wait at
    that start barrier run while the others wait (or have finished), is proved: what it reaches before it blocks
    at its barrier wait is what it reaches alone while its partner has not moved (PRG-212)."""
    truth = json.loads((HERE / "ground_truth.json").read_text())
    for path in (CORRECT, BUGGY):
        runs = [c for c in truth["cases"] if c["path"] == path]
        assert len(runs) == 8 and {c["outcome"] for c in runs} == {"hang"}, [(c["key"], c["outcome"]) for c in runs]
        got = [r for r in _verify(path, "2", "all") if r["dma_mode"] != "hardware"]
        assert {r["dma_mode"] for r in got} == {"eager", "on_wait"}
        ring = [r for r in got if r["target"].endswith("#0")]
        assert ring and {r["verdict"] for r in ring} == {"proved"}, ring
        later = [r for r in got if not r["target"].endswith("#0")]
        for r in later:
            if r["property"] == "deadlock-free":
                msg = r["witness"]["message"]
                runs_more = "device 0 runs 3" if path == CORRECT else "device 0 runs 2"
                assert r["verdict"] == "violated" and "no run completes" in msg and runs_more in msg, r
            elif path == CORRECT and r["target"].endswith("#1"):  # the doubling kernel never starts (PRG-181)
                assert r["verdict"] == "vacuous" and "PRG-181" in r["reason"], r
            else:
                assert r["verdict"] == "proved" and "PRG-212" in r["reason"], r
