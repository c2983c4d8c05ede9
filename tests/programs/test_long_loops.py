"""PRG-130: a loop longer than the walk unrolls, whose iterations run the same calls, is checked over
PRG-7's window of three iterations (tests/programs/loop_targets.py): proofs stand for the whole loop
where no device can run two iterations ahead of a partner, nothing else is decided."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _verify(target: str, devices: int) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.cli", "verify",
                          f"tests/programs/loop_targets.py::{target}", "--devices", str(devices),
                          "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {r["property"]: r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-130", "PRG-7")
@pytest.mark.parametrize("devices", [4, 5])
def test_a_hundred_calls_with_a_double_barrier_are_proved_from_the_window(devices):
    got = _verify("double_barrier_100", devices)
    assert {r["verdict"] for r in got.values()} == {"proved"}, got
    assert "loop of 100 iterations" in got["deadlock-free"]["reason"] and "PRG-130" in got["deadlock-free"]["reason"]


@pytest.mark.jax
@pytest.mark.rule("PRG-130", "PRG-16")
def test_a_single_barrier_violated_in_the_window_is_unknown_for_the_loop_not_proved():
    got = _verify("single_barrier_100", 5)
    assert {r["verdict"] for r in got.values()} == {"unknown"}, got
    confined = got["invocation-confined"]["reason"]
    assert "violated there" in confined and "beyond the window not decided" in confined
