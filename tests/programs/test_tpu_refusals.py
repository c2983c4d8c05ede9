"""A call jax's TPU lowering refuses: a collective id and no barrier semaphore (specs/semantics/kernels.md LAUNCH-7, D31).

semcheck's prediction of which calls jax refuses is checked against what jax's TPU lowering did in probe
`collective_ids` (tests/programs/ground_truth.json: the programs lowered for a TPU on CPU, nothing run),
and its verdicts on `examples/programs/buggy/auto_ids_call_without_barrier.py` against the interpreter's
recorded runs of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GROUND_TRUTH = json.loads((HERE / "ground_truth.json").read_text())
MARKER = "@@REFUSED@@ "
EXAMPLE = "examples/programs/buggy/auto_ids_call_without_barrier.py"

_RUN = """
import json, sys
sys.path.insert(0, {here!r})
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import probes
from semcheck.checker.frontend.collective_ids import refusals
from semcheck.checker.frontend.trace import find_kernels
mesh = jax.make_mesh((2,), ("x",))
x = jax.ShapeDtypeStruct((16, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
out = {{}}
for name, f in probes.collective_id_programs(2).items():
    fn = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    calls = find_kernels(fn.trace(x).jaxpr.jaxpr)
    for mode in ("no", "yes", "override"):
        got = refusals(calls, mode, 25)
        out[mode + "/" + name] = [got[id(c)] for c in calls if id(c) in got]
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
@pytest.mark.rule("LAUNCH-7")
def test_jax_s_tpu_lowering_refusals_are_predicted(predicted):
    """Every program jax refused for want of a barrier is refused by semcheck, with jax's text, and no
    other (a barrier kernel without an id is PRG-123's error, not this one)."""
    from semcheck.checker.frontend.collective_ids import NO_BARRIER

    (record,) = [p["result"] for p in GROUND_TRUTH["probes"] if p["probe"] == "collective_ids" and p["devices"] == 2]
    assert set(predicted) == set(record)
    refused = {k for k, v in record.items() if v.get("error", "").startswith(NO_BARRIER)}
    assert refused and {k for k, v in record.items() if "error" not in v}, "the probe covers both outcomes"
    for key in record:
        if key in refused:
            assert predicted[key] and all(e == NO_BARRIER for e in predicted[key]), (key, predicted[key])
        else:
            assert predicted[key] == [], (key, predicted[key], record[key])


def _cases(mode: str) -> list[dict]:
    return [c for c in GROUND_TRUTH["cases"] if c["path"] == EXAMPLE and c["dma_mode"] == mode]


@pytest.mark.jax
@pytest.mark.rule("LAUNCH-7")
def test_a_refused_program_is_a_launch_failure_on_hardware_and_runs_in_the_interpreter():
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", EXAMPLE, "--devices", "2,4",
                          "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]
    report = json.loads(run.stdout)
    by: dict[tuple, dict] = {(r["target"], r["devices"], r["dma_mode"], r["property"]): r for r in report["results"]}
    targets = {t for t, *_ in by}
    assert len(targets) == 2  # the two calls, checked one by one
    for (target, devices, mode, prop), r in by.items():
        if mode == "hardware" and prop == "deadlock-free":
            assert r["verdict"] == "violated", r
            assert "collective_id has to be unspecified or None when not using a custom barrier" in \
                r["witness"]["message"], r
            assert r["witness"]["locations"], r
        elif mode == "hardware":
            assert r["verdict"] == "vacuous" and "every run fails before any core starts" in r["reason"], r
        else:
            # what the interpreter did: both calls ran, right numbers, no race, no exit warning
            recorded = [c for c in _cases(mode) if c["devices"] == devices]
            assert recorded and all(c["outcome"] == "completed" for c in recorded), recorded
            assert all(c["output_matches_reference"] for c in recorded if not c["detect_races"])
            assert all(not c.get("race_messages") for c in recorded if c["detect_races"])
            assert r["verdict"] == "proved", r
    causes = {c["divergence"] for d in report["differences"] for c in d["causes"]}
    assert "D31" in causes, report["differences"]


@pytest.mark.jax
@pytest.mark.rule("LAUNCH-7")
def test_a_refused_call_in_a_composed_program_refuses_the_program():
    """Two barrier kernels whose ids `yes` picks are composed (PRG-125); a third call without a barrier gets
    an id as well and jax refuses it, so nothing of the program runs on a TPU."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          "tests/programs/refusal_targets.py::yes_with_a_plain_call", "--devices", "4",
                          "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]
    by = {r["property"]: r for r in json.loads(run.stdout)["results"]}
    dead = by.pop("deadlock-free")
    assert dead["verdict"] == "violated" and "_add_one_kernel" in dead["witness"]["message"], dead
    assert "not using a custom barrier" in dead["witness"]["message"]
    assert {r["verdict"] for r in by.values()} == {"vacuous"}, by  # nothing runs (LAUNCH-5, REP-20)
    assert all("every run fails before any core starts" in r["reason"] for r in by.values()), by
