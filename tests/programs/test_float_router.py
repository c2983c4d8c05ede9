"""ACC-57, PRG-207: a router call's float logits, fetched by the dispatch call of the same program.

float_router_targets.py: a router kernel computes each token's logits, a dispatch kernel fetches them from HBM by a
local copy, routes each token to its top-1 expert (ids moved to SMEM, a count table indexed by them) and sizes its
copies by the counts. In the interpreter's modes each call is checked alone and the router's outputs are PRG-169's;
under `hardware` the calls communicate and are composed, which follows no copy in a kernel (ACC-9's last clause).
What jax's interpreter does with them (eager and on_wait, its race detector on) is run here at 2 devices.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck  # noqa: E402

TARGETS = "tests/programs/float_router_targets.py"
CLEAN, SHORT = "router_then_dispatch", "router_then_dispatch_wait_one_row_short"


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, int, str], dict[str, dict]]:
    """(target, devices, mode) -> property -> row (a call checked alone: its properties merged, worst first)."""
    run = semcheck("verify", TARGETS, "--devices", "2,4", "--dma-mode", "all", "--format", "json", "--no-cache",
                   "--no-config", cwd=REPO, timeout=900)
    assert run.returncode == 1, run.stderr[-2000:]
    out: dict[tuple[str, int, str], dict[str, dict]] = {}
    rank = {"violated": 0, "unknown": 1, "proved": 2, "vacuous": 3}
    for r in json.loads(run.stdout)["results"]:
        key = (r["target"].split("#")[0], r["devices"], r["dma_mode"])
        seen = out.setdefault(key, {}).get(r["property"])
        if seen is None or rank[r["verdict"]] < rank[seen["verdict"]]:
            out[key][r["property"]] = r
    return out


def _violated(props: dict[str, dict]) -> set[str]:
    return {p for p, r in props.items() if r["verdict"] == "violated"}


@pytest.mark.jax
@pytest.mark.rule("ACC-57", "PRG-169")
def test_the_dispatch_of_a_router_s_logits_is_decided_in_the_interpreter_modes(rows):
    """Before ACC-57 the dispatch call's count table, indexed by ids computed from the fetched logits, was unknown,
    and so was every property of the dispatch call in every mode."""
    for n in (2, 4):
        for mode in ("eager", "on_wait"):
            assert {r["verdict"] for r in rows[(CLEAN, n, mode)].values()} == {"proved"}, (n, mode)
            # the seeded twin: the short wait leaves a row's bytes on its semaphore (and, at 4, a race)
            want = {"exit-balance", "dma-bytes"} | ({"race-free"} if n == 4 else set())
            got = rows[(SHORT, n, mode)]
            assert _violated(got) == want, (n, mode)
            assert {r["verdict"] for p, r in got.items() if p not in want} == {"proved"}
            lines = {(loc["file"].rsplit("/", 1)[-1], loc["line"]) for loc in got["dma-bytes"]["witness"]["locations"]}
            assert ("moe_topk_dispatch_wait_one_row_short.py", 93) in lines, lines  # the dispatch


@pytest.mark.jax
@pytest.mark.rule("PRG-207")
def test_the_composed_program_says_it_follows_no_copy_not_that_it_needs_float_inputs(rows):
    """Under `hardware` the calls are composed; its lowering of the dispatch call follows no copy, so it is unknown
    naming PRG-115 and the branch on the count table, not asking for float inputs it would never compute."""
    for target in (CLEAN, SHORT):
        for n in (2, 4):
            for r in rows[(target, n, "hardware")].values():
                assert r["verdict"] == "unknown"
                assert "PRG-115" in r["reason"] and "float input" not in r["reason"], r["reason"]


_CHILD = r"""
import io, json, sys, contextlib
from semcheck.checker.frontend import provision_devices
provision_devices(2)
sys.path.insert(0, "tests/programs")
import jax, numpy as np
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
import float_router_targets as f
out = {}
for target in ("router_then_dispatch", "router_then_dispatch_wait_one_row_short"):
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, vector_clock_size=1024)
        fn, args = getattr(f, target)(2, dma_mode=mode, interpret=params)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            got = np.asarray(jax.block_until_ready(fn(*args)))
        leaks = [l for l in said.getvalue().splitlines() if "non-zero count" in l]
        out[f"{target} {mode}"] = [bool(np.array_equal(got, f.reference(2))), bool(ipc.races.races_found), leaks]
print(json.dumps(out))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-57")
def test_the_interpreter_runs_the_two_calls_as_semcheck_says():
    """jax's interpreter at 2 devices: the correct program gives the reference output with no race and no semaphore
    left non-zero; the seeded twin leaves one row's 512 bytes on a semaphore of each device, and no race."""
    from float_router_targets import counts

    p = subprocess.run([sys.executable, "-c", _CHILD], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    for mode in ("eager", "on_wait"):
        assert got[f"{CLEAN} {mode}"] == [True, False, []]
        match, race, leaks = got[f"{SHORT} {mode}"]
        assert not race and len(leaks) == 2 and all(line.endswith(": 512") for line in leaks), leaks
    assert len(set(counts(2))) > 1  # the experts receive different counts: a wrong id would show
