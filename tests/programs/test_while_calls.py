"""PRG-171: kernel calls under a `while_loop` (a `fori_loop` with a traced bound) are one call per iteration where
the walk knows the loop's condition on every iteration, the same on every device (PRG-197: or on each device).

examples/programs/repeated_shift_double_barrier.py's shift calls, their trip count an array (targets in
followed_targets.py). One CLI run per target, two at once (module fixture)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck_many  # noqa: E402

TARGETS = "tests/programs/followed_targets.py"
RUNS = {"shifts_while": ("2", "all"), "shifts_while_single_barrier": ("5", "hardware"),
        "shifts_while_sharded_bound": ("2", "all")}


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[tuple[int, str], dict]]:
    """target -> (devices, mode) -> property -> result row."""
    runs = semcheck_many([(("verify", f"{TARGETS}::{t}", "--devices", n, "--dma-mode", modes, "--format", "json",
                            "--no-cache"), {"cwd": REPO, "timeout": 900}) for t, (n, modes) in RUNS.items()])
    out = {}
    for t, run in zip(RUNS, runs):
        assert run.returncode in (0, 1, 3), (t, run.stderr[-2000:])
        got: dict[tuple[int, str], dict] = {}
        for r in run.json()["results"]:
            got.setdefault((r["devices"], r["dma_mode"]), {})[r["property"]] = r
        out[t] = got
    return out


@pytest.mark.jax
@pytest.mark.rule("PRG-171", "PRG-115", "PRG-187")
def test_a_while_loop_with_a_known_trip_count_is_unrolled(rows):
    """The replicated trip count: the loop is unrolled into its shift calls and proved in every mode (it was
    unknown: "a kernel call inside a while"); with a single barrier the program is invocation-confined violated
    at 5 devices, as the same calls in a static loop are (examples/programs/buggy/repeated_shift_single_barrier.py)."""
    got = rows["shifts_while"]
    assert {m for _, m in got} == {"eager", "on_wait", "hardware"}
    assert {r["verdict"] for props in got.values() for r in props.values()} == {"proved"}
    (bad,) = rows["shifts_while_single_barrier"].values()
    assert bad["invocation-confined"]["verdict"] == "violated"
    # PRG-187: the witness names each call's iteration of the while loop, with its trip count
    message = bad["invocation-confined"]["witness"]["message"]
    assert ("_shift_kernel (call 0, iteration 0 (counted from 0, of 4) of the loop at "
            "tests/programs/followed_targets.py:") in message, message
    assert {r["verdict"] for p, r in bad.items() if p not in ("invocation-confined", "id-disjoint", "id-int16")} \
        == {"unknown"}  # PRG-114, PRG-216
    assert bad["id-disjoint"]["verdict"] == bad["id-int16"]["verdict"] == "proved"  # PRG-215


@pytest.mark.jax
@pytest.mark.rule("PRG-171", "PRG-197")
def test_a_trip_count_from_a_sharded_array_is_followed_on_each_device(rows):
    """The trip count from a sharded array: not one value for every device to the walk (PRG-171), but known on each
    device, where it is the same: every device runs every call, and every property is proved in every mode (before
    PRG-197 every property was unknown, "a while loop whose condition the walk cannot compute")."""
    got = rows["shifts_while_sharded_bound"]
    assert {m for _, m in got} == {"eager", "on_wait", "hardware"}
    assert {r["verdict"] for props in got.values() for r in props.values()} == {"proved"}, got
