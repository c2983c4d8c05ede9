"""Unknown only where the spec argues a limit (RUN-12), and the programs that used to be unknown decided
as interpret mode runs them: calls that never run (LAUNCH-5) and a schedule-dependent collision (ERR-19,
ERR-45).

The verdicts are what a user gets (`semcheck verify --format json`, in a process of its own); interpret
mode's side is the recorded ground truth (`tests/kernels/ground_truth.json`,
`tests/programs/ground_truth.json`, with their recorder scripts)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from semcheck.checker.report.spec import rule_text

ROOT = Path(__file__).resolve().parent.parent
SEMCHECK = [sys.executable, "-m", "semcheck.checker.run.cli"]
KERNEL_TRUTH = ROOT / "tests" / "kernels" / "ground_truth.json"
PROGRAM_TRUTH = ROOT / "tests" / "programs" / "ground_truth.json"

# A few of every kind: a launch failure (semaphore output, CPU compile), a failure in every run, a
# schedule-dependent collision, a grid that revisits a block, closed-over refs, and a clean ring.
REPRESENTATIVE = (
    "examples/buggy/fixed_id_collision.py",
    "examples/buggy/fixed_id_collision_scoped.py",
    "examples/buggy/semaphore_read_in_interpret_mode.py",
    "examples/programs/async_copy.py",
    "examples/buggy/revisited_output_block.py",
    "examples/jax_ops/stateful_async_copy.py",
    "examples/ring_allreduce.py",
)



def _verify(paths, devices: str = "2") -> list[dict]:
    p = subprocess.run([*SEMCHECK, "verify", *paths, "--devices", devices, "--dma-mode", "all", "--format", "json",
                        "--no-cache", "--no-config"], capture_output=True, text=True, cwd=ROOT, timeout=3000)
    assert p.returncode in (0, 1, 3, 4), p.stderr[-3000:]  # 4: interpret mode cannot run one (REP-21)
    report = json.loads(p.stdout)
    assert not report.get("errors"), report["errors"]
    return report["results"]


def argued_limits() -> tuple[str, ...]:
    """The rule ids RUN-12 lists as argued limits."""
    text = rule_text("RUN-12")
    listed = text[text.index("These are the rules"):].split(".")[0]
    return tuple(re.findall(r"\b[A-Z]+-\d+\b", listed))


def _uncited(results: list[dict]) -> list[tuple]:
    cite = re.compile(r"\b(" + "|".join(map(re.escape, argued_limits())) + r")\b")
    return [(r["file"], r["devices"], r["dma_mode"], r["property"], r["reason"]) for r in results
            if r["verdict"] == "unknown" and not cite.search(r["reason"])]


@pytest.mark.jax
@pytest.mark.rule("RUN-12")
def test_every_unknown_cites_an_argued_limit():
    assert {"ERR-19"} <= set(argued_limits())
    results = _verify(REPRESENTATIVE)
    assert {r["file"].split("examples/")[-1] for r in results} == {p.removeprefix("examples/") for p in REPRESENTATIVE}
    assert not _uncited(results)


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.rule("RUN-12")
def test_every_unknown_over_every_example_cites_an_argued_limit():
    results = _verify(["examples"], devices="2,4")
    assert {r["devices"] for r in results} == {2, 4}
    assert not _uncited(results)


def _recorded(truth: Path, path: str, devices: int, mode: str) -> list[dict]:
    cases = json.loads(truth.read_text())["cases"]
    return [c for c in cases if c["path"] == path and c["devices"] == devices and c["dma_mode"] == mode
            and not c.get("kwargs")]


@pytest.mark.jax
@pytest.mark.rule("LAUNCH-5", "LAUNCH-2", "LAUNCH-3", "REP-21")
def test_a_call_that_never_runs_decides_every_property_as_interpret_mode_runs():
    cases = {"examples/programs/async_copy.py": PROGRAM_TRUTH,
             "examples/buggy/semaphore_read_in_interpret_mode.py": KERNEL_TRUTH}
    results = _verify(list(cases))
    for path, truth in cases.items():
        for mode in ("eager", "on_wait"):
            rows = {r["property"]: r for r in results if r["file"].endswith(path) and r["dma_mode"] == mode}
            # the interpreter's limitation, not the kernel's deadlock (REP-21): nothing is decided in this mode
            assert len(rows) == 8 and all(r["verdict"] == "unrunnable" and r["reason"].startswith(
                "interpret mode cannot run this kernel: jax raises ") for r in rows.values()), (path, mode)
            dl = rows["deadlock-free"]
            runs = _recorded(truth, path, 2, mode)
            assert runs, (path, mode)
            for run in runs:  # interpret mode: raises what semcheck names, warns of nothing, detects no race
                assert run["outcome"] == "error" and run["error_message"] in dl["reason"]
                assert not run["nonzero_count_warnings"] and not run.get("races")


@pytest.mark.jax
@pytest.mark.rule("ERR-19", "PROP-4", "ERR-45", "ERR-50")
def test_a_schedule_dependent_collision_is_decided_by_every_schedule():
    path = "examples/buggy/fixed_id_collision_scoped.py"
    results = _verify([path])
    for mode in ("eager", "on_wait"):
        rows = {r["property"]: r for r in results if r["dma_mode"] == mode}
        dl = rows["deadlock-free"]
        assert dl["verdict"] == "violated" and "exhaustive exploration" in dl["reason"]
        (run,) = _recorded(KERNEL_TRUTH, path, 2, mode)
        assert run["outcome"] == "error" and f"{run['error_type']}: {run['error_message']}" in dl["witness"]["message"]
        assert rows["id-disjoint"]["verdict"] == "violated"
        # ERR-45: id-agreement over every run's end (it was unknown: one run's end proves nothing of the others)
        # (ERR-64: now by bounds on the progress of the program whose collective id no core allocates)
        assert rows["id-agreement"]["verdict"] == "proved" and "ERR-64" in rows["id-agreement"]["reason"]
        # ERR-50: on every run up to the collision, from the program whose collective id no core allocates (ERR-49)
        for prop in ("dma-bytes", "race-free"):
            assert rows[prop]["verdict"] == "proved" and "ERR-50" in rows[prop]["reason"], prop
        assert all(r["outcome"] == "error" and not r["race_reported"] for r in _recorded(RACE_TRUTH, path, 2, mode))
        unknown = [r for r in rows.values() if r["verdict"] == "unknown"]
        assert all("ERR-19" in r["reason"] for r in unknown)
        if not any(r["property"] == "exit-balance" and r["verdict"] == "vacuous" for r in rows.values()):
            continue
        assert not run["nonzero_count_warnings"]  # a proof that no run reaches an exit: none warns


RACE_TRUTH = ROOT / "tests" / "kernels" / "race_ground_truth.json"


@pytest.mark.jax
@pytest.mark.rule("ERR-50", "ERR-49", "RACE-1", "BUF-14")
def test_runs_that_fail_at_a_clock_are_decided_up_to_their_failure():
    """Once unknown (ERR-19: no S', and the explorer keeps outcomes): every on_wait run of these raises where only
    the model's runs follow (RACE-1's assertion, BUF-14's KeyError); the relaxed program's proofs hold on every run
    up to its failure, and the interpreter's detector runs raise with no race reported."""
    paths = ("examples/buggy/clock_empty_copy_wait.py", "examples/buggy/scope_writeback_outlives_buffer.py")
    results = _verify(paths)
    for path in paths:
        rows = {r["property"]: r for r in results if r["file"].endswith(path) and r["dma_mode"] == "on_wait"}
        assert not [r for r in rows.values() if r["verdict"] == "unknown"], path
        for prop in ("dma-bytes", "race-free"):
            assert rows[prop]["verdict"] == "proved" and "ERR-50" in rows[prop]["reason"], (path, prop)
        runs = _recorded(RACE_TRUTH, path, 2, "on_wait")
        assert runs and all(r["outcome"] == "error" and not r["race_reported"] for r in runs), path


@pytest.mark.jax
@pytest.mark.rule("ACC-11", "ACC-15", "ERR-19", "PROP-4")
def test_an_on_wait_copy_through_a_view_is_decided_where_its_waiter_raises():
    """Once unknown in every property under on_wait (ACC-6's limit, no longer on RUN-12's list): the receive's
    wait runs the copy into a reshape view and raises there, as interpret mode did on every recorded run; the
    other properties, once unknown too, hold on every run up to that wait (ACC-15: no race, no exit warning
    in the recorded runs)."""
    path = "examples/buggy/ring_copy_into_reshaped_view.py"
    rows = {r["property"]: r for r in _verify([path]) if r["dma_mode"] == "on_wait"}
    dl = rows["deadlock-free"]
    assert dl["verdict"] == "violated" and "exhaustive exploration" in dl["reason"]
    assert [loc["line"] for loc in dl["witness"]["locations"]] == [53, 55]  # the copy, the receive's wait
    (run,) = _recorded(KERNEL_TRUTH, path, 2, "on_wait")
    assert run["outcome"] == "error" and f"{run['error_type']}: {run['error_message']}" in dl["witness"]["message"]
    assert rows["exit-balance"]["verdict"] == "vacuous" and not run["nonzero_count_warnings"]  # REP-20
    assert not [r for r in rows.values() if r["verdict"] == "unknown"]
    proved = [r for r in rows.values() if r["verdict"] == "proved"]
    assert len(proved) == 6 and all("ACC-15" in r["reason"] for r in proved) and not run.get("races")
    assert "ACC-6" not in argued_limits()


@pytest.mark.jax
@pytest.mark.rule("LAUNCH-6", "LAUNCH-4")
def test_a_core_map_closing_over_a_value_is_unknown_where_the_interpreter_swaps_it_for_an_id():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.errors import Unsupported
    from semcheck.checker.frontend.trace import trace_kernels

    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=1)

    def program(x, scale, *, close_over_value):
        def stateful(refs):
            x_ref, o_ref = refs

            @pl.core_map(mesh, interpret=pltpu.InterpretParams(dma_execution_mode="eager", detect_races=True))
            def _():
                def body(buf, sem):
                    copy = pltpu.make_async_copy(x_ref, buf, sem)
                    copy.start()
                    copy.wait()
                    if close_over_value:
                        buf[...] = buf[...] * scale
                    back = pltpu.make_async_copy(buf, o_ref, sem)
                    back.start()
                    back.wait()

                pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA)

        return pl.run_state(stateful)((x, jnp.zeros_like(x)))[1]

    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    scale = jnp.float32(2.0)
    refs_only = jax.jit(lambda x, s: program(x, s, close_over_value=False))
    with_value = jax.jit(lambda x, s: program(x, s, close_over_value=True))
    # interpret mode: closed-over refs run (LAUNCH-4); the value reaches the kernel as an int16 id
    assert (jax.device_get(refs_only(x, scale)) == jax.device_get(x)).all()
    with pytest.raises(TypeError, match="int16"):
        with_value(x, scale)
    assert len(trace_kernels(refs_only, (x, scale))) == 1
    with pytest.raises(Unsupported, match="LAUNCH-6"):
        trace_kernels(with_value, (x, scale))


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.rule("ACC-12", "ACC-10", "ERR-19")
def test_a_window_copy_past_the_explorer_s_budget_is_decided_by_one_failing_run():
    """Once unknown at 4 devices under on_wait (four independent devices: more schedules than ERR-19's budget):
    the fast run raises in the wait that runs the copy, as every recorded interpret-mode run does (ACC-12)."""
    path = "examples/buggy/conv_state_window_off_by_one.py"
    rows = {r["property"]: r for r in _verify([path], devices="4") if r["dma_mode"] == "on_wait"}
    dl = rows["deadlock-free"]
    assert dl["verdict"] == "violated" and "ACC-12" in dl["reason"]
    assert [loc["line"] for loc in dl["witness"]["locations"]] == [46, 48]  # the copy, the wait that runs it
    (run,) = _recorded(KERNEL_TRUTH, path, 4, "on_wait")
    assert run["outcome"] == "error" and f"{run['error_type']}: {run['error_message']}".split(" of ")[0] in (
        dl["witness"]["message"])
    assert all("ERR-19" in r["reason"] for r in rows.values() if r["verdict"] == "unknown")
