"""PRG-212 / PRG-213: where every interpreter run hangs at the first call only some devices run, the verdicts of
the calls that still run are read off what they reach while the other devices wait or have finished.
Targets: tests/programs/hang_reach_targets.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGETS = "tests/programs/hang_reach_targets.py"
MODES = ("eager", "on_wait")


def _verify(target: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", f"{TARGETS}::{target}",
                          "--devices", "2", "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {(r["target"], r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-212", "PRG-213")
def test_a_call_run_while_its_partner_waits_elsewhere_is_proved_over_what_it_reaches():
    """Device 1 runs the pairwise kernel, then the doubling kernel; device 0 runs nothing. Device 1 signals device
    0's barrier semaphore and waits for a signal that never comes: the pairwise kernel's properties hold over what
    it reaches (proved, PRG-212) and the doubling kernel never runs (vacuous, PRG-213)."""
    got = _verify("pair_then_double_on_odd_devices")
    for mode in MODES:
        for (target, m, prop), r in got.items():
            if m != mode:
                continue
            if prop == "deadlock-free":
                assert r["verdict"] == "violated" and "no run completes" in r["witness"]["message"], r
            elif target.endswith("#0"):  # the pairwise kernel
                assert r["verdict"] == "proved" and "PRG-212" in r["reason"], r
            else:
                assert r["verdict"] == "vacuous" and "PRG-213" in r["reason"], r


@pytest.mark.jax
@pytest.mark.rule("PRG-212")
def test_a_call_that_copies_into_a_device_waiting_elsewhere_stays_unknown():
    """Device 1's exchange copies into device 0 before its handshake, while device 0 waits at the start barrier
    of the doubling kernel: the copy lands in the doubling kernel's memory (jax fails under `eager`), which a run of
    the exchange alone never shows, so nothing is proved of it."""
    got = _verify("copy_before_handshake")
    rush = [r for (t, m, p), r in got.items() if t.endswith("#1") and m in MODES and p != "deadlock-free"]
    assert len(rush) == 14 and all(r["verdict"] == "unknown" and "PRG-145" in r["reason"] for r in rush), rush


@pytest.mark.jax
@pytest.mark.rule("PRG-212")
def test_a_call_run_where_a_waiting_device_allocated_a_semaphore_stays_unknown():
    """Device 0 allocates its local copy's DMA semaphore and waits at that kernel's start barrier while device 1
    runs the pairwise kernel in the same manager: one table of semaphore ids holds both calls' ids (and the
    pairwise kernel's fixed id), which a run of the pairwise kernel alone does not show, so nothing is proved."""
    got = _verify("semaphore_kernel_waits_then_pair")
    pair = [r for (t, m, p), r in got.items() if t.endswith("#1") and m in MODES and p != "deadlock-free"]
    assert len(pair) == 14 and all(r["verdict"] == "unknown" and "PRG-145" in r["reason"] for r in pair), pair


@pytest.mark.jax
@pytest.mark.rule("PRG-212")
def test_a_violation_of_a_call_every_device_runs_before_the_hang_stands():
    """Every device runs the unbalanced kernel once, then device 1 waits at its second call's start barrier: the
    first call runs as the kernel does alone, so its exit with the semaphore at 1 (jax prints the non-zero count on
    both devices before it hangs) is an exit-balance violation of every run; the rest is proved."""
    got = _verify("unbalanced_kernel_per_device_trips")
    for mode in MODES:
        mine = {p: r for (t, m, p), r in got.items() if m == mode}
        assert mine["exit-balance"]["verdict"] == "violated", mine["exit-balance"]
        assert mine["deadlock-free"]["verdict"] == "violated", mine["deadlock-free"]
        assert all(r["verdict"] == "proved" and "PRG-212" in r["reason"]
                   for p, r in mine.items() if p not in ("exit-balance", "deadlock-free")), mine
