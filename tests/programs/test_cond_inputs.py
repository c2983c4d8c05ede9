"""PRG-170: kernel calls under a `cond` read the values the branch each device takes gives them.

The two-call ring of examples/programs/ring_attention_two_calls.py inside a `lax.cond` (targets in
followed_targets.py): its loops read the lengths, computed before the cond. One CLI run per target, at once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck_many  # noqa: E402

TARGETS = "tests/programs/followed_targets.py"
RUNS = {"ring_under_cond": "all", "ring_under_cond_last_recv_unwaited": "hardware",
        "ring_under_cond_on_one_device": "hardware"}


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[tuple[str, str], dict]]:
    """target -> (reported target, mode) -> property -> result row, at 2 devices."""
    runs = semcheck_many([(("verify", f"{TARGETS}::{t}", "--devices", "2", "--dma-mode", modes, "--format", "json",
                            "--no-cache"), {"cwd": REPO, "timeout": 900}) for t, modes in RUNS.items()])
    out = {}
    for t, run in zip(RUNS, runs):
        assert run.returncode in (0, 1, 3), (t, run.stderr[-2000:])
        got: dict[tuple[str, str], dict] = {}
        for r in run.json()["results"]:
            got.setdefault((r["target"], r["dma_mode"]), {})[r["property"]] = r
        out[t] = got
    return out


@pytest.mark.jax
@pytest.mark.rule("PRG-170", "PRG-126")
def test_calls_under_a_cond_read_the_values_their_branch_gives(rows):
    """Every device takes the ring's branch: its calls read the lengths, and the program is proved in every
    mode (it was unknown: "launched inside a construct semcheck does not evaluate concretely"); with the last
    receive wait skipped it is violated under hardware as the same ring outside a cond is (invocation-confined
    and race-free; the rest unknown by PRG-114)."""
    assert {r["verdict"] for props in rows["ring_under_cond"].values() for r in props.values()} == {"proved"}
    assert {m for _, m in rows["ring_under_cond"]} == {"eager", "on_wait", "hardware"}
    (bad,) = rows["ring_under_cond_last_recv_unwaited"].values()
    assert {p for p, r in bad.items() if r["verdict"] == "violated"} == {"invocation-confined", "race-free"}
    assert {p: r["verdict"] for p, r in bad.items() if r["verdict"] != "violated"} == {
        "id-disjoint": "proved", "id-int16": "proved", "id-agreement": "unknown", "deadlock-free": "unknown",
        "exit-balance": "unknown", "dma-bytes": "unknown"}  # PRG-215, PRG-216


@pytest.mark.jax
@pytest.mark.rule("PRG-170")
def test_a_branch_only_some_devices_take_gives_its_calls_no_values(rows):
    """Only device 0 takes the branch: its calls have no values (the other device never computes them), so the
    program is unknown, saying why, never decided on one device's values."""
    (got,) = rows["ring_under_cond_on_one_device"].values()
    assert {r["verdict"] for r in got.values()} == {"unknown"}
    assert all("only some devices take" in r["reason"] for r in got.values()), got
