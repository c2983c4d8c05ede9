"""PRG-221: a kernel call with a semaphore result that no device runs (a cond's other branch, a loop body run zero
times) still fails interpret mode's lowering of its computation: the programs of
tests/programs/unlowered_branch_targets.py, held against jax. PRG-222: so does every other failure jax raises while
it lowers a call (LAUNCH-3, ERR-36), the first in the order jax lowers them; PRG-223: the reports name the line of
the call that fails (the lines marked `# fails`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGETS = "tests/programs/unlowered_branch_targets.py"
NAMES = ("semaphore_result_in_the_other_branch", "semaphore_result_in_a_loop_run_zero_times")
# PRG-222: target -> (what jax raises, the rule the reports give, the text of the line they name)
LOWERING = {
    "untranslatable_call_before_a_semaphore_result": (
        ["NotImplementedError", "MLIR translation rule for primitive 'semaphore_read' not found for platform cpu"],
        "LAUNCH-3", "count = pl.semaphore_read(sem)  # fails"),
    "typed_argument_in_the_other_branch": (
        ["NotImplementedError", "Unsupported memory space: vmem"], "ERR-36", "in_specs=[_ANY],  # fails"),
}
FAILING_LINE = {**{n: "x, dst, sem = pl.pallas_call(  # fails" for n in NAMES}, **{n: v[2] for n, v in LOWERING.items()}}
MARKER = "@@RAISED@@ "

_JAX = """
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/programs")
import jax
from jax.experimental.pallas import tpu as pltpu
import unlowered_branch_targets as t
out = {}
for name in %r:
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, vector_clock_size=1024)
        fn, args = getattr(t, name)(2, dma_mode=mode, interpret=params)
        try:
            jax.block_until_ready(fn(*args))
            out[name + " " + mode] = None
        except Exception as e:
            out[name + " " + mode] = [type(e).__name__, str(e)]
print(%r + json.dumps(out))
""" % (NAMES + tuple(LOWERING), MARKER)


@pytest.fixture(scope="module")
def report() -> list[dict]:
    """The JSON report's rows, every target of the file."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", TARGETS, "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert run.returncode in (0, 1, 3, 4), run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert not got["errors"], got["errors"]
    return got["results"]


@pytest.fixture(scope="module")
def rows(report) -> dict[tuple[str, str], dict[str, dict]]:
    """(target, mode) -> property -> the JSON report's row."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for r in report:
        out.setdefault((r["target"], r["dma_mode"]), {})[r["property"]] = r
    return out


def _line(text: str) -> int:
    lines = (REPO / TARGETS).read_text().splitlines()
    (number,) = [k + 1 for k, s in enumerate(lines) if s.rstrip().endswith(text)]
    return number


@pytest.mark.rule("PRG-221")
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_semaphore_result_no_device_runs_makes_the_program_unrunnable(rows, name, mode):
    row = rows[(name, mode)]
    assert len(row) == 8
    for v in row.values():
        assert v["verdict"] == "unrunnable", v
        assert "nan + dma_sem" in v["reason"], v


@pytest.mark.rule("PRG-221")
@pytest.mark.parametrize("name", NAMES)
def test_on_a_tpu_the_taken_calls_run(rows, name):
    """A TPU lowers the semaphore result (LAUNCH-2 is the interpreter's): the copy the program makes is proved."""
    for v in rows[(name, "hardware")].values():
        assert v["verdict"] == "proved", v


@pytest.mark.jax
@pytest.mark.rule("PRG-221", "PRG-222")
def test_jax_fails_both_programs_while_lowering_them():
    run = subprocess.run([sys.executable, "-c", _JAX], capture_output=True, text=True, cwd=REPO, timeout=900)
    line = next((s for s in run.stdout.splitlines() if s.startswith(MARKER)), None)
    assert line is not None, run.stderr[-3000:]
    got = json.loads(line.removeprefix(MARKER))
    assert set(got) == {f"{n} {m}" for n in NAMES + tuple(LOWERING) for m in ("eager", "on_wait")}
    for key, raised in got.items():
        name = key.split()[0]
        assert raised == (LOWERING[name][0] if name in LOWERING else ["NotImplementedError", "nan + dma_sem"]), got


@pytest.mark.rule("PRG-222")
@pytest.mark.parametrize("name", sorted(LOWERING))
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_every_failure_at_lowering_of_a_call_no_device_runs_is_the_programs(report, name, mode):
    """Each call's every property is unrunnable with the error jax raises first while it lowers the computation:
    the untranslatable call's before the semaphore result lowered after it (not `nan + dma_sem`)."""
    raised, rule, _ = LOWERING[name]
    got = [r for r in report if r["target"].split("#")[0] == name and r["dma_mode"] == mode]
    assert got and len(got) % 8 == 0, got
    for v in got:
        assert v["verdict"] == "unrunnable", v
        assert f"jax raises {raised[0]}: {raised[1]}" in v["reason"] and v["stats"]["rule"] == rule, v
    for v in (r for r in report if r["target"].split("#")[0] == name and r["dma_mode"] == "hardware"):
        assert v["verdict"] == "proved", v


@pytest.mark.rule("PRG-223")
@pytest.mark.parametrize("name", sorted(FAILING_LINE))
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_the_reports_name_the_line_of_the_call_that_fails(report, name, mode):
    """Not the line of the first call the devices run: the failing call's (its kernel line, for LAUNCH-3)."""
    at = f"unlowered_branch_targets.py:{_line(FAILING_LINE[name])}"
    got = [r for r in report if r["target"].split("#")[0] == name and r["dma_mode"] == mode]
    assert got
    for v in got:
        assert at in v["reason"], (at, v)
