"""ERR-32: a load, store or copy whose window the front end cannot predict (ACC-10) leaves `deadlock-free`
unknown in the interpreter's modes, naming the access; `hardware` and the other properties stand.

The test kernels (`kernels/unpredicted_windows.py`) store at a row computed from float data a copy fetched,
which the front end does not follow. jax's interpreter (checked by running it, eager and on_wait, 2 devices):
`row_inside` completes, `row_past_the_end` raises at the store on every run. Before ERR-32 both were proved in
every mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

KERNEL = "tests/frontend/kernels/unpredicted_windows.py"
STORE = 27  # the store at the row read from float data


@pytest.fixture(scope="module")
def rows() -> dict:
    run = semcheck("verify", KERNEL, "--devices", "2", "--format", "json", "--no-cache", "--no-config", cwd=ROOT,
                   timeout=900)
    assert run.returncode == 3, run.stderr[-2000:]
    return {(r["target"], r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("ERR-32")
@pytest.mark.parametrize("target", ["row_inside", "row_past_the_end"])
def test_an_unpredicted_window_leaves_deadlock_freedom_open_in_the_interpreter(rows, target):
    for mode in ("eager", "on_wait"):
        got = rows[(target, mode, "deadlock-free")]
        assert got["verdict"] == "unknown", (mode, got)
        assert f"unpredicted_windows.py:{STORE}" in got["reason"] and "ERR-32" in got["reason"]
    assert rows[(target, "hardware", "deadlock-free")]["verdict"] == "proved"


@pytest.mark.jax
@pytest.mark.rule("ERR-32")
def test_the_other_properties_hold_of_the_runs_a_failure_cuts_short(rows):
    others = [r for (t, m, p), r in rows.items() if p != "deadlock-free"]
    assert others and all(r["verdict"] in ("proved", "vacuous") for r in others)


BLOCKS = "tests/frontend/kernels/block_windows.py"


@pytest.fixture(scope="module")
def blocks() -> dict:
    run = semcheck("verify", BLOCKS, "--devices", "2", "--format", "json", "--no-cache", "--no-config", cwd=ROOT,
                   timeout=900)
    assert run.returncode == 3, run.stderr[-2000:]
    return {(r["target"], r["dma_mode"], r["property"]): r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("ERR-32")
def test_a_grid_block_past_the_array_s_end_leaves_deadlock_freedom_open_in_the_interpreter(blocks):
    # jax's interpreter raises "Out-of-bounds block index (2, 0)" at the second step's copy-in, eager and on_wait
    # (checked by running it); before, semcheck proved deadlock-free in both
    for mode in ("eager", "on_wait"):
        got = blocks[("block_past_the_end", mode, "deadlock-free")]
        assert got["verdict"] == "unknown", (mode, got)
        assert "block (2, 0)" in got["reason"] and "block_windows.py:" in got["reason"] and "ERR-32" in got["reason"]
    assert blocks[("block_past_the_end", "hardware", "deadlock-free")]["verdict"] == "proved"  # a TPU does not check
    others = [r for (t, m, p), r in blocks.items() if t == "block_past_the_end" and p != "deadlock-free"]
    assert others and all(r["verdict"] in ("proved", "vacuous") for r in others)


@pytest.mark.jax
@pytest.mark.rule("ERR-32")
def test_a_ragged_last_block_inside_the_padded_array_is_proved(blocks):
    # the interpreter pads the 20 rows to 24 and completes (checked by running it)
    rows = [r for (t, m, p), r in blocks.items() if t == "ragged_last_block"]
    assert len(rows) == 24 and all(r["verdict"] == "proved" for r in rows), rows
