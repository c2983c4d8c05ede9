"""ACC-21: per-expert counts all-gathered round a ring in VMEM rows decide an expert-parallel dispatch.

examples/moe_counts_ring_allreduce.py exchanges its count rows by remote copies into a VMEM int32 table
(a barrier per step, as shipped MoE kernels do), moves the table to SMEM and sizes its dispatch with it;
tests/frontend/kernels/moe_counts_ring_row_read_before_wait.py waits only for each step's send half. Both are
verified once, in one CLI run (JSON), at 2 and 4 devices in every mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from cli._support import semcheck  # noqa: E402

pytestmark = pytest.mark.jax

CLEAN = "examples/moe_counts_ring_allreduce.py"
BUGGY = "tests/frontend/kernels/moe_counts_ring_row_read_before_wait.py"
RING_COPY, TABLE_COPY = 89, 96  # the step's remote copy of a row; the local copy of the table to SMEM


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    run = semcheck("verify", CLEAN, BUGGY, "--devices", "2,4", "--format", "json", "--no-cache", cwd=ROOT,
                   timeout=600)
    assert run.returncode == 1, run.stderr[-2000:]
    return json.loads(run.stdout)["results"]


def _file(rows: list[dict], path: str) -> list[dict]:
    return [r for r in rows if r["file"] == path]


@pytest.mark.rule("ACC-21", "ACC-9")
def test_counts_exchanged_in_vmem_rows_decide_every_property(rows):
    clean = _file(rows, CLEAN)
    assert len(clean) == 2 * 3 * 8  # devices x modes x properties
    assert {r["verdict"] for r in clean} == {"proved"}, [r for r in clean if r["verdict"] != "proved"][:1]


@pytest.mark.rule("ACC-21", "ACC-20")
def test_a_count_row_used_before_it_lands_is_a_race_and_nothing_else_is_proved(rows):
    buggy = _file(rows, BUGGY)
    assert len(buggy) == 2 * 3 * 8
    race = [r for r in buggy if r["property"] == "race-free"]
    assert {r["verdict"] for r in race} == {"violated"}
    for r in race:  # the row's copy, and at 2 devices (one step) the table's copy that reads it
        assert f"moe_counts_ring_allreduce.py:{RING_COPY}" in json.dumps(r), r
        assert r["devices"] != 2 or f"moe_counts_ring_allreduce.py:{TABLE_COPY}" in json.dumps(r), r
    others = [r for r in buggy if r["property"] != "race-free"]
    assert {r["verdict"] for r in others} == {"unknown"}
    assert all(f"moe_counts_ring_allreduce.py:{RING_COPY}" in json.dumps(r) for r in others)
