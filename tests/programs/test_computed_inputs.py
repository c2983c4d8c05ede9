"""PRG-169: a later call's scalar inputs computed by an earlier kernel call of the program, which semcheck runs
in interpret mode, and keeps as facts only where that call is race-free in the mode.

The planned ring (examples/programs/ring_attention_planned.py) and its seeded misuse are checked in every mode;
the targets of followed_targets.py pin the composed program and a racy producer. One CLI run per target, two at
once (module fixture); the hypothesis test of the values is `slow`, the gate's
own test their cheap sibling."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck_many  # noqa: E402

PLANNED = "examples/programs/ring_attention_planned.py"
SKIPS = "examples/programs/buggy/ring_attention_planned_skips_steps.py"
TARGETS = "tests/programs/followed_targets.py"
RUNS = {
    PLANNED: "all",
    SKIPS: "all",
    f"{TARGETS}::count_from_kernel": "hardware",
}
RACY = f"{TARGETS}::planned_ring_racy_plan"


def _rows(runs: dict[str, str]) -> dict[str, dict[tuple[str, str], dict]]:
    """path -> (target, mode) -> property -> result row, at 2 devices (one CLI run per path, two at once)."""
    got = semcheck_many([(("verify", path, "--devices", "2", "--dma-mode", modes, "--format", "json", "--no-cache"),
                          {"cwd": REPO, "timeout": 900}) for path, modes in runs.items()])
    out = {}
    for path, run in zip(runs, got):
        assert run.returncode in (0, 1, 3), (path, run.stderr[-2000:])
        rows: dict[tuple[str, str], dict] = {}
        for r in run.json()["results"]:
            rows.setdefault((r["target"], r["dma_mode"]), {})[r["property"]] = r
        out[path] = rows
    return out


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[tuple[str, str], dict]]:
    return _rows(RUNS)


def _by_mode(rows: dict) -> dict[str, set[str]]:
    """mode -> the verdicts of every call's properties in it."""
    out: dict[str, set[str]] = {}
    for (_, mode), props in rows.items():
        out.setdefault(mode, set()).update(r["verdict"] for r in props.values())
    return out


def _recorded(path: str) -> list[dict]:
    cases = json.loads((REPO / "tests" / "programs" / "ground_truth.json").read_text())["cases"]
    return [c for c in cases if c["path"] == path and not c.get("kwargs")]


@pytest.mark.jax
@pytest.mark.rule("PRG-169", "PRG-115")
def test_a_plan_kernel_s_outputs_decide_the_ring(verdicts):
    """The ring calls' step and row loops come from the plan call's outputs: the correct program is proved in
    every mode (it was unknown: "semcheck runs no kernel"), as interpret mode completes it with the right
    numbers and no race; the plan that gives the device with the longest sequence no second-half step is a
    deadlock in every mode, as interpret mode hangs in the second ring call."""
    assert _by_mode(verdicts[PLANNED]) == {m: {"proved"} for m in ("eager", "on_wait", "hardware")}
    for c in _recorded(PLANNED):
        assert c["outcome"] == "completed" and c["output_matches_reference"] is True, c["key"]
        assert not c["nonzero_count_warnings"] and not c.get("race_messages"), c["key"]
    bad = verdicts[SKIPS]
    hardware = bad[("build", "hardware")]
    assert {p for p, r in hardware.items() if r["verdict"] == "violated"} == {"deadlock-free", "exit-balance",
                                                                            "dma-bytes"}
    assert "unknown" not in {r["verdict"] for r in hardware.values()}
    for mode in ("eager", "on_wait"):  # the interpreter checks each call alone (PRG-115): the last one hangs
        dl = [props["deadlock-free"] for (_, m), props in bad.items() if m == mode]
        assert sorted(r["verdict"] for r in dl) == ["proved", "proved", "violated"], dl
    assert {c["outcome"] for c in _recorded(SKIPS)} == {"hang"}


@pytest.mark.jax
@pytest.mark.rule("PRG-169", "PRG-167")
def test_an_earlier_kernels_output_is_followed_into_a_composed_program(verdicts):
    """The KV transfer's wait call reads counts a copying kernel wrote: run, its outputs are the counts, and the
    composed program (its calls hand semaphores over) is proved under hardware."""
    rows = verdicts[f"{TARGETS}::count_from_kernel"]
    assert {r["verdict"] for r in rows[("count_from_kernel", "hardware")].values()} == {"proved"}


@pytest.mark.rule("PRG-169")
def test_verdicts_rest_on_a_producer_only_where_it_is_race_free():
    """The gate alone (the cheap sibling of the next test): a race-free (or vacuously race-free) producer keeps
    every verdict; otherwise every verdict but, in a composed program, race-free's own is unknown, naming the
    call and the race verdict."""
    from semcheck.checker.properties.computed_inputs import settle, why_not_facts
    from semcheck.checker.properties.verdict import Verdict, Witness

    verdicts = [Verdict("deadlock-free", "proved"), Verdict("race-free", "violated", witness=Witness("a race"))]
    for holds in ("proved", "vacuous"):
        race = Verdict("race-free", holds, reason="r")
        assert why_not_facts("kernel call 0 (plan)", "eager", race, whose="x") is None
    for race in (verdicts[1], Verdict("race-free", "unknown", reason="timeout")):
        why = why_not_facts("kernel call 0 (plan)", "on_wait", race, whose="x")
        assert why is not None and "kernel call 0 (plan)" in why and f"is {race.verdict} under on_wait" in why
        assert [v.verdict for v in settle(verdicts, why, keep_race=True)] == ["unknown", "violated"]
        assert [v.verdict for v in settle(verdicts, why, keep_race=False)] == ["unknown", "unknown"]
    assert settle(verdicts, None, keep_race=False) == verdicts


@pytest.mark.jax
@pytest.mark.rule("PRG-169", "ACC-9")
def test_a_racy_producer_leaves_its_consumers_unknown():
    """The plan races on a scratch (every run reads the same zeros, so its three runs agree): its race-free is
    violated in every mode, and nothing that rests on its outputs is decided: in the composed program (hardware)
    every other property is unknown, and each ring call checked alone (eager, on_wait) is unknown whole."""
    rows = _rows({RACY: "all"})[RACY]
    hardware = rows[("planned_ring_racy_plan", "hardware")]
    assert hardware["race-free"]["verdict"] == "violated"
    assert {r["verdict"] for p, r in hardware.items() if p != "race-free"} == {"unknown"}
    said = hardware["deadlock-free"]["reason"]
    assert "PRG-169" in said and "_racy_plan_kernel" in said, said
    for mode in ("eager", "on_wait"):
        plan = rows[("planned_ring_racy_plan#0", mode)]
        assert plan["race-free"]["verdict"] == "violated"
        for ring in ("planned_ring_racy_plan#1", "planned_ring_racy_plan#2"):
            got = rows[(ring, mode)]
            assert {r["verdict"] for r in got.values()} == {"unknown"}, (ring, mode)
            # ERR-53 says it first: the plan's own followed values are not facts, so which calls run is not decided
            assert all("race-free of kernel call 0 is violated" in r["reason"]
                       or ("_racy_plan_kernel" in r["reason"] and "ERR-53" in r["reason"]) for r in got.values())


@pytest.mark.jax
@pytest.mark.rule("PRG-206")
def test_a_producer_s_uncomputed_input_is_named_with_its_line():
    """The producer's input is a softmax computed before it: the wait call's counts are unknown in every mode, and
    the reason names the operation that rounds and its line, not only the producer."""
    path = f"{TARGETS}::count_from_softmax_scores"
    rows = _rows({path: "all"})[path]
    assert {m for _, m in rows} == {"eager", "on_wait", "hardware"}
    line = next(i for i, text in enumerate((REPO / TARGETS).read_text().splitlines(), 1) if "# SOFTMAX" in text)
    for props in rows.values():
        for r in props.values():
            assert r["verdict"] == "unknown", r
            assert "_scored_count_kernel" in r["reason"] and "whose inputs semcheck could not compute: " in r["reason"]
            assert f"followed_targets.py:{line} (specs/deciding/frontend.md ACC-26)" in r["reason"], r["reason"]


def _plan_values_match(drawn: list[list[int]]) -> None:
    """In a fresh process with 2 host devices: per drawn pair of lengths, the ring calls read the rows per device
    the plan computes, marked with the plan call; the plan itself takes nothing from a kernel."""
    import importlib.util

    from semcheck.checker.frontend import provision_devices

    provision_devices(2)
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs

    spec = importlib.util.spec_from_file_location("semcheck_programs_ring_attention_planned", REPO / PLANNED)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn, (_, mine, kv) = mod.build(2)
    mesh = mine.sharding.mesh
    for lens in drawn:
        given_lens = jax.device_put(jnp.asarray(lens, dtype=jnp.int32), NamedSharding(mesh, P()))
        mine = jax.device_put(jnp.asarray(lens, dtype=jnp.int32), NamedSharding(mesh, P(mod.AXIS)))
        calls, inputs = trace_with_inputs(fn, (given_lens, mine, kv))
        assert [c.name for c in calls] == ["_plan_kernel", "_ring_kernel", "_ring_kernel"]
        assert inputs[0].producers == ()
        rows = (np.asarray(lens) + mod.TOKENS_PER_ROW - 1) // mod.TOKENS_PER_ROW
        for got in inputs[1:]:
            assert got.producers == (0,) and "_plan_kernel" in got.computed_by
            split, rows_in = got.values[0], got.values[1]
            assert split.tolist() == [[0, 0, 0, 1]] and rows_in.tolist() == [rows.tolist()], (lens, got)


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.rule("PRG-169")
def test_the_values_are_the_plan_kernel_s_outputs():
    """Hypothesis draws lengths; the values the ring calls read are the plan's outputs on them."""
    import concurrent.futures
    import multiprocessing

    drawn: list[list[int]] = []

    @settings(max_examples=4, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.integers(1, 128), min_size=2, max_size=2))
    def draw(lens):
        drawn.append(lens)

    draw()
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_plan_values_match, drawn).result()
