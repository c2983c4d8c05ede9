"""PRG-128: where invocation-confined is violated, a violation whose run lands nothing outside its call
stands (tests/programs/confined_targets.py), and a run that lands something outside is not taken as a
TPU's (the confinement witness itself)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "@@FAITHFUL@@ "

_RUN = """
import json
from semcheck.checker.frontend import provision_devices
provision_devices(4)
from semcheck.checker.properties.confined import composed_verdict, faithful
from semcheck.checker.frontend import lower_target
from semcheck.checker.frontend.programs import communicating_program
from semcheck.checker.frontend.targets import load_targets
from semcheck.model.fast import fast_run
(t,) = load_targets("examples/programs/buggy/shared_collective_id_two_patterns.py")
composed, _ = communicating_program(t, 4, lower_target(t, 4))
c = composed[0]
v = composed_verdict(c)
print({marker!r} + json.dumps({{"confined": v.verdict, "its_own_run": faithful(c, v.witness.schedule)}}))
"""


@pytest.mark.jax
@pytest.mark.rule("PRG-128", "PRG-114")
def test_a_deadlock_that_needs_no_early_landing_stands():
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          "tests/programs/confined_targets.py::mixed_then_stuck", "--devices", "4",
                          "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]
    got = {r["property"]: r for r in json.loads(run.stdout)["results"]}
    assert got["invocation-confined"]["verdict"] == "violated"
    dead = got["deadlock-free"]
    assert dead["verdict"] == "violated" and "PRG-128" in dead["witness"]["message"]
    assert "_stuck_kernel (call 2)" in dead["witness"]["message"]
    for prop in ("exit-balance", "dma-bytes", "race-free"):
        assert got[prop]["verdict"] == "unknown" and "invocation-confined is violated" in got[prop]["reason"]


@pytest.mark.jax
@pytest.mark.rule("PRG-128")
def test_a_violation_whose_run_lands_outside_stays_unknown():
    """The confinement witness lands a copy before its target entered: not a run PRG-128 lets stand."""
    run = subprocess.run([sys.executable, "-c", _RUN.format(marker=MARKER)], capture_output=True, text=True,
                         cwd=REPO, timeout=900)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    got = json.loads(line.removeprefix(MARKER))
    assert got["confined"] == "violated"
    assert got["its_own_run"] and "outside" in got["its_own_run"], got
