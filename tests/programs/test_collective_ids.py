"""semcheck's collective ids (PRG-123) against what jax lowered for a TPU in probe `collective_ids`
(tests/programs/ground_truth.json): the same programs, traced by semcheck's front end, under each
value of `jax_pallas_auto_assign_collective_ids`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GROUND_TRUTH = json.loads((HERE / "ground_truth.json").read_text())
MARKER = "@@IDS@@ "

_RUN = """
import json, sys
sys.path.insert(0, {here!r})
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import probes
from semcheck.checker.frontend.collective_ids import assign
from semcheck.checker.frontend.trace import find_kernels
mesh = jax.make_mesh((2,), ("x",))
x = jax.ShapeDtypeStruct((16, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
out = {{}}
for name, f in probes.collective_id_programs(2).items():
    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    calls = find_kernels(fn.trace(x).jaxpr.jaxpr)
    for mode in ("no", "yes", "override"):
        got = assign(calls, mode, 25)
        errors = [got[id(c)].error for c in calls if got[id(c)].error]
        out[mode + "/" + name] = ({{"error": errors[0]}} if errors else
                                  {{"collective_ids": [got[id(c)].collective_id for c in calls
                                                       if got[id(c)].collective_id is not None]}})
print({marker!r} + json.dumps(out))
"""


@pytest.fixture(scope="module")
def predicted() -> dict:
    run = subprocess.run([sys.executable, "-c", _RUN.format(here=str(HERE), marker=MARKER)], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    return json.loads(line.removeprefix(MARKER))


@pytest.mark.jax
@pytest.mark.rule("PRG-5", "PRG-123")
def test_collective_ids_are_assigned_as_jax_lowers_them(predicted):
    (record,) = [p["result"] for p in GROUND_TRUTH["probes"] if p["probe"] == "collective_ids" and p["devices"] == 2]
    assert set(predicted) == set(record)
    for key, jax_did in record.items():
        ours = predicted[key]
        if "error" in jax_did:
            assert "error" in ours and jax_did["error"].startswith(ours["error"][:60]), (key, ours, jax_did)
        else:
            assert ours == {"collective_ids": jax_did["collective_ids"]}, (key, ours, jax_did)


def _verify(target: str) -> tuple[int, dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          f"tests/frontend/programs/async_remote_auto_ids.py::{target}", "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    return run.returncode, json.loads(run.stdout)


@pytest.mark.jax
@pytest.mark.rule("PRG-123")
def test_a_barrier_kernel_jax_cannot_lower_is_an_input_error_with_its_line():
    code, report = _verify("no_id")
    assert code == 2 and not report["results"], report
    (error,) = report["errors"]
    assert error["code"] == "kernel-raised"
    assert "ValueError: collective_id has to be specified when using a custom barrier" in error["message"]
    source = (REPO / "tests" / "frontend" / "programs" / "_futures.py").read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if "barrier = pltpu.get_barrier_semaphore()" in s)
    assert error["location"]["line"] == line


@pytest.mark.jax
@pytest.mark.rule("PRG-123", "PRG-125")
def test_a_kernel_whose_id_jax_picks_is_checked_with_that_id():
    """The tagged start kernel gets the id jax picks on a TPU (all proved, as with its own id); the
    interpreter, which uses no tags, still fails at the launch of its semaphore result (PRG-12)."""
    code, report = _verify("tagged")
    by = {(r["dma_mode"], r["property"]): r for r in report["results"]}
    assert {r["verdict"] for (mode, _), r in by.items() if mode == "hardware"} == {"proved"}, report
    # interpret mode cannot run a semaphore result: not a deadlock, exit code 4 (REP-21)
    assert by[("eager", "deadlock-free")]["verdict"] == "unrunnable" and code == 4
    assert "nan + dma_sem" in by[("eager", "deadlock-free")]["reason"]


def _verify_auto(target: str, devices: int = 4) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          f"tests/programs/auto_id_targets.py::{target}", "--devices", str(devices),
                          "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    return {r["property"]: r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-125")
@pytest.mark.parametrize("target, confined", [
    ("yes_two_kernels_without_ids", "proved"),  # two modules, two ids
    ("override_one_manual_id", "proved"),  # the shared manual id is ignored: two ids again
    ("no_mode_one_manual_id", "violated"),  # the shared id stands, and so does PRG-17's mix-up
])
def test_the_mode_s_ids_decide_whether_two_patterns_mix(target, confined):
    got = _verify_auto(target)
    assert got["invocation-confined"]["verdict"] == confined, got["invocation-confined"]
    if confined == "proved":
        assert {r["verdict"] for r in got.values()} == {"proved"}, got


@pytest.mark.jax
@pytest.mark.rule("PRG-125", "PRG-13")
def test_the_interpreter_modes_predict_the_failure_jax_s_interpreter_recorded():
    """Checked as the interpreter runs it (no id), the tagged ring kernel fails at its barrier
    semaphore: semcheck names that failure and line; the record has jax's TypeError there."""
    path = "examples/programs/two_patterns_two_tags.py"
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", path, "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    results = [r for r in json.loads(run.stdout)["results"] if r["dma_mode"] != "hardware"]
    assert results and not any(r["verdict"] == "proved" and r["property"] == "deadlock-free" for r in results)
    line = next(i for i, s in enumerate((REPO / path).read_text().splitlines(), 1)
                if "get_barrier_semaphore(tag)" in s)
    said = {(r["target"], r["dma_mode"]): r.get("reason") or (r.get("witness") or {}).get("message", "")
            for r in results if r["property"] == "deadlock-free"}
    first = [s for (t, _), s in said.items() if t == "build#0"]
    assert first and all("no collective_id" in s and f"two_patterns_two_tags.py:{line}" in s for s in first), said
    # the pairwise call after it in the same jitted program never starts (PRG-13, PRG-154): jax's error
    later = [s for (t, _), s in said.items() if t != "build#0"]
    assert later and all("int() argument must be" in s and "NoneType" in s and "no core ever starts" in s
                         for s in later), said
    recorded = [c for c in GROUND_TRUTH["cases"] if c["path"] == path and c["devices"] == 2]
    assert recorded and all(c["error_type"] == "TypeError" for c in recorded)


_COND = """
import json, sys
sys.path.insert(0, {here!r})
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import probes
from semcheck.checker.frontend.program_walk import program_irs
mesh = jax.make_mesh((2,), ("x",))
x = jax.ShapeDtypeStruct((16, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
flag = jax.ShapeDtypeStruct((8, 1024), jnp.float32, sharding=NamedSharding(mesh, P()))
out = {{}}
for mode in ("yes", "override"):
    jax.config.update("jax_pallas_auto_assign_collective_ids", mode)
    for name, (f, shape) in probes.collective_id_cond_programs(2).items():
        fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False))
        irs = program_irs(fn.trace(x, flag).jaxpr.jaxpr)
        out[mode + "/" + name] = {{str(ir.branches[0][2]): [[i.name, i.collective_id, i.id_picked] for i in ir.invocations]
                                  for ir in irs}}
print({marker!r} + json.dumps(out))
"""


@pytest.mark.jax
@pytest.mark.rule("PRG-146", "PRG-125")
def test_each_branch_program_gets_the_ids_jax_lowers_over_both_branches():
    """Probe `collective_ids_cond`: jax lowers both branches of a cond, branch 0 first, and assigns ids over
    all of them (a manual id in the branch not taken is still reserved). Each program of an undecided cond
    (PRG-126) carries, for its calls, the ids jax gave those calls in the whole program's lowering."""
    (record,) = [p["result"] for p in GROUND_TRUTH["probes"] if p["probe"] == "collective_ids_cond"]
    run = subprocess.run([sys.executable, "-c", _COND.format(here=str(HERE), marker=MARKER)], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    ours = json.loads(line.removeprefix(MARKER))
    assert set(ours) == {k for k in record if not k.startswith("no/")}
    for key, programs in ours.items():
        before, false, true, after = record[key]["shape"]
        ids = record[key]["collective_ids"]  # the custom calls in lowering order: before, branch 0, branch 1, after
        segments = {"0": ids[before:before + false], "1": ids[before + false:before + false + true]}
        assert set(programs) == {"0", "1"}, (key, programs)
        for branch, calls in programs.items():
            expect = ids[:before] + segments[branch] + ids[before + false + true:]
            assert [cid for _, cid, _ in calls] == expect, (key, branch, calls, ids)
