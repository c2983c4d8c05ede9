"""Verdicts that are every order's (PRG-214, PRG-215) and the hardware's undefined behaviour of a landing outside
its call (PRG-216), on the collective-permute loops whose calls XLA may run in more than 8 orders from 4 devices
and on a program whose copy lands after its target left."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck  # noqa: E402

SKIPPED = "examples/programs/buggy/collective_permute_loop_recv_done_skipped.py"
WRONG_FUTURE = "examples/programs/buggy/collective_permute_loop_recv_done_wrong_future.py"
REMOTE = "examples/programs/buggy/async_remote_copy_recv_done_wrong_future.py"
IDS = ("id-disjoint", "id-int16")
PROPERTIES = ("id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free",
              "invocation-confined")
KINDS = ("proved", "vacuous", "violated", "unknown", "unrunnable")


@pytest.fixture(scope="module")
def cells() -> dict[tuple[str, int, str], dict[str, dict]]:
    """(file, devices, mode) -> property -> the JSON report's row."""
    run = semcheck("verify", SKIPPED, WRONG_FUTURE, REMOTE, "--devices", "2,4", "--dma-mode", "all", "--format",
                   "json", "--no-cache", "--no-config", cwd=REPO, timeout=1800)
    assert run.returncode in (0, 1, 3, 4), run.stderr[-3000:]
    report = run.json()
    assert not report["errors"], report["errors"]
    out: dict[tuple[str, int, str], dict[str, dict]] = {}
    for r in report["results"]:
        out.setdefault((r["file"], r["devices"], r["dma_mode"]), {})[r["property"]] = r
    return out


def _recorded(path: str, devices: int, mode: str) -> list[dict]:
    truth = json.loads((REPO / "tests" / "programs" / "ground_truth.json").read_text())
    return [c for c in truth["cases"] if c["path"] == path and c["devices"] == devices and c["dma_mode"] == mode]


@pytest.mark.jax
@pytest.mark.rule("PRG-214")
@pytest.mark.parametrize("path", [SKIPPED, WRONG_FUTURE])
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_program_the_interpreter_cannot_lower_is_unrunnable_in_every_order(cells, path, mode):
    runs = _recorded(path, 4, mode)  # jax raises while lowering, before any call starts, with and without races
    assert len(runs) == 2 and {(c["outcome"], c["error_message"]) for c in runs} == {("error", "nan + dma_sem")}
    row = cells[(path, 4, mode)]
    assert set(row) == set(PROPERTIES)
    for v in row.values():
        assert v["verdict"] == "unrunnable", v
        assert "nan + dma_sem" in v["reason"] and "PRG-117" not in v["reason"], v
    assert {p: v["verdict"] for p, v in cells[(path, 2, mode)].items()} == {p: "unrunnable" for p in PROPERTIES}


@pytest.mark.jax
@pytest.mark.rule("PRG-215")
def test_the_id_properties_stand_where_a_copy_lands_outside_its_call(cells):
    for path, devices in ((SKIPPED, 2), (REMOTE, 2), (SKIPPED, 4), (WRONG_FUTURE, 4)):
        row = cells[(path, devices, "hardware")]
        assert row["invocation-confined"]["verdict"] == "violated", (path, devices)
        for p in IDS:
            assert row[p]["verdict"] == "proved" and "PRG-215" in row[p]["reason"], (path, devices, row[p])


@pytest.mark.jax
@pytest.mark.rule("PRG-216")
def test_the_rest_stays_unknown_citing_the_hardware_s_undefined_behaviour(cells):
    # the model proves deadlock-free and id-agreement of the skipped receive at 2 devices and finds the rest
    # violated; none of it is a TPU's once the copy can land after its target left
    row = cells[(SKIPPED, 2, "hardware")]
    for p in ("id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free"):
        assert row[p]["verdict"] == "unknown" and "PRG-216" in row[p]["reason"], row[p]
    row = cells[(REMOTE, 2, "hardware")]
    assert row["race-free"]["verdict"] == "violated"  # its run lands nothing outside (PRG-128)
    for p in ("id-agreement", "deadlock-free", "exit-balance", "dma-bytes"):
        assert row[p]["verdict"] == "unknown" and "PRG-216" in row[p]["reason"], row[p]


@st.composite
def _cases(draw):
    return (draw(st.sampled_from(PROPERTIES)), draw(st.sampled_from(KINDS)),
            draw(st.sampled_from(("eager", "on_wait", "hardware"))), draw(st.booleans()))


@pytest.mark.rule("PRG-214", "PRG-215")
@given(_cases())
@example(("race-free", "unrunnable", "eager", True))
@example(("id-int16", "proved", "hardware", False))
@example(("id-agreement", "proved", "hardware", False))
@example(("id-disjoint", "proved", "eager", False))
def test_only_verdicts_that_are_every_order_s_stand_beyond_eight_orders(case):
    from semcheck.checker.programs.results import _unexplored
    from semcheck.checker.properties.verdict import Verdict, Witness

    prop, kind, mode, unlowered = case
    traced = SimpleNamespace(unexplored="more than 8 orders; only the traced order was checked (PRG-117)",
                             fails_while_lowered=unlowered)
    v = Verdict(prop, kind, reason="as the traced order gives it",
                witness=Witness(message="a run") if kind == "violated" else None)
    got = _unexplored(v, traced, mode)
    every_order = (kind == "violated" or (mode != "hardware" and unlowered)
                   or (mode == "hardware" and kind == "proved" and prop in IDS))
    if every_order:
        assert got.verdict == kind
    else:
        assert got.verdict == "unknown" and "only the traced order" in got.reason and kind in got.reason
