"""ERR-62: a load or store whose window lies outside its buffer in some run (ACC-10 predicts jax's interpreter
refuses it) leaves every verdict under `hardware` unknown, naming the access and its line; the interpreter's
modes keep their verdicts (`deadlock-free` violated at the access, the rest on the runs up to it), and a kernel
whose accesses stay inside keeps its `hardware` proofs.

The kernels (`kernels/past_end_windows.py`) were run in jax's interpreter (`eager` and `on_wait`, 2 devices,
`detect_races=True`): the two past the end raise at their first access there on every run, the one inside
completes with no race. Before ERR-62 all 8 properties were proved under `hardware` for all three."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

KERNEL = "tests/frontend/kernels/past_end_windows.py"


def _line(text: str) -> int:
    return next(i for i, ln in enumerate((ROOT / KERNEL).read_text().splitlines(), 1) if text in ln)


@pytest.fixture(scope="module")
def rows() -> dict:
    run = semcheck("verify", KERNEL, "--devices", "2", "--dma-mode", "all", "--format", "json", "--no-cache",
                   "--no-config", cwd=ROOT, timeout=900)
    assert run.returncode == 1, run.stderr[-2000:]  # violations (the interpreter modes) and unknowns
    return {(r["target"], r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("ERR-62")
@pytest.mark.parametrize(("target", "text"), [("past_end_in_a_loop", "table[at] = i"),
                                              ("load_past_end", "rows[pl.ds(0, 8), :] = rows[")])
def test_an_access_outside_its_buffer_leaves_every_hardware_verdict_unknown(rows, target, text):
    hardware = [r for (t, m, _), r in rows.items() if t == target and m == "hardware"]
    assert len(hardware) == 8 and {r["verdict"] for r in hardware} == {"unknown"}, hardware
    assert all("ERR-62" in r["reason"] and f"past_end_windows.py:{_line(text)}" in r["reason"] for r in hardware)
    for mode in ("eager", "on_wait"):  # the interpreter raises there: ACC-10's failure, as before
        assert rows[(target, mode, "deadlock-free")]["verdict"] == "violated", rows[(target, mode, "deadlock-free")]


@pytest.mark.jax
@pytest.mark.rule("ERR-62")
def test_a_loop_whose_accesses_stay_inside_keeps_its_hardware_proofs(rows):
    got = {m: r["verdict"] for (t, m, p), r in rows.items() if t == "inside_in_a_loop"}
    assert got and set(got.values()) == {"proved"}, got
    assert len([1 for (t, m, _) in rows if t == "inside_in_a_loop" and m == "hardware"]) == 8
