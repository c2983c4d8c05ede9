"""PRG-131, PRG-132: a program of calls that every device runs alike is folded, and invocation-confined
is decided on one device's landings (bench/kernels/program_calls.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.jax
@pytest.mark.rule("PRG-131", "PRG-132")
@pytest.mark.parametrize("calls", [2, 4])
def test_a_program_of_calls_is_folded_and_its_landings_checked_on_one_device(calls):
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          f"bench/kernels/program_calls.py::calls_{calls}", "--devices", "8", "--dma-mode", "hardware",
                          "--format", "json", "--no-cache"], capture_output=True, text=True, cwd=REPO, timeout=900)
    got = {r["property"]: r for r in json.loads(run.stdout)["results"]}
    assert {r["verdict"] for r in got.values()} == {"proved"}, got
    for prop in ("deadlock-free", "exit-balance", "dma-bytes"):
        assert "proved on a fold onto" in got[prop]["reason"], got[prop]
    confined = got["invocation-confined"]["reason"]
    assert "those of device 0 checked" in confined and "PRG-131" in confined
