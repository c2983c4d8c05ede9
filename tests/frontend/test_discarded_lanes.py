"""ACC-60: a select that discards, on some devices only, a value unknown on those devices.

The test kernels (`kernels/discarded_lanes.py`) route a remote copy to `where(me == 0, routes[0, 0], 0)`, where
`routes[0, 0]` is initialised on device 0 only: the select keeps it on device 0 and discards it on the others.
Its twin picks the entry on every device. What jax's interpreter does with them is compared here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE / "kernels"))
sys.path.insert(0, str(HERE))
from cli._support import semcheck  # noqa: E402

KERNEL = "tests/frontend/kernels/discarded_lanes.py"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    run = semcheck("verify", KERNEL, "--devices", "2,4", "--format", "json", "--no-cache", cwd=ROOT, timeout=900)
    assert run.returncode == 3, run.stderr[-2000:]  # the twin's unknowns, nothing violated
    return json.loads(run.stdout)["results"]


@pytest.mark.jax
@pytest.mark.rule("ACC-60")
def test_a_route_the_select_discards_on_some_devices_decides_every_property(rows):
    """Without ACC-60 every verdict is unknown: the load of the entry is unknown as a whole, as device 1's is."""
    got = [r for r in rows if r["target"] == "discarded_route"]
    assert len(got) == 2 * 3 * 8  # devices x modes x properties
    assert {r["verdict"] for r in got} == {"proved"}, [r for r in got if r["verdict"] != "proved"][:1]


@pytest.mark.jax
@pytest.mark.rule("ACC-60")
def test_a_route_the_select_picks_where_it_is_unknown_stays_unknown(rows):
    got = [r for r in rows if r["target"] == "picked_route"]
    assert len(got) == 2 * 3 * 8
    for r in got:
        assert r["verdict"] == "unknown", r
        assert "the device id depends on a value semcheck cannot compute" in r["reason"], r
        assert "uninitialised memory" in r["reason"], r


@pytest.mark.jax
@pytest.mark.rule("ACC-60")
@pytest.mark.parametrize("devices", [2, 4])
def test_the_discarded_route_lowers_to_what_the_interpreter_does(devices):
    from test_frontend import _record

    (r,) = _record(devices, ["discarded_lanes.py::discarded_route"])
    assert r["status"] == "match", r.get("difference") or r.get("error") or r
    assert r["outcome"] == "completed"
    assert r["lowered_events"] == r["recorded_events"] > 0


_INTERPRET = """
import json, logging, os, sys
n = int(sys.argv[1])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, "tests/frontend/kernels")
import jax, numpy as np
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
import discarded_lanes as k
logging.disable(logging.WARNING)
out = {}
for name in ("discarded_route", "picked_route"):
    for mode in ("eager", "on_wait"):
        params = pltpu.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="warn",
                                       vector_clock_size=1024)
        fn, args = getattr(k, name)(n, params=params)
        try:
            got = np.asarray(jax.block_until_ready(fn(*args)))
        except Exception as e:
            out[f"{name}/{mode}"] = ["raised", repr(e)[-300:]]
            continue
        same = bool(np.array_equal(got[:n], k.reference(np.asarray(args[0]), n)))
        out[f"{name}/{mode}"] = ["completed", same, bool(ipc.races is not None and ipc.races.races_found)]
print("@@" + json.dumps(out))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-60")
def test_jax_s_interpreter_runs_the_kernels_as_semcheck_says():
    """The discarded route completes with `reference`'s rows and no race in both modes; the picked one sends to
    the device its uninitialised entry names (the interpreter's filler, no device) and raises."""
    run = subprocess.run([sys.executable, "-c", _INTERPRET, "2"], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    line = next(x for x in run.stdout.splitlines() if x.startswith("@@"))
    got = json.loads(line[2:])
    for mode in ("eager", "on_wait"):
        assert got[f"discarded_route/{mode}"] == ["completed", True, False], got
        assert got[f"picked_route/{mode}"][0] == "raised", got


def _select(pred: np.ndarray, case0: object, case1: object) -> object:
    """`select_n(pred, case0, case1)` (`case1` where `pred`) as the numeric rules evaluate it: its value or
    `Unknown`."""
    import jax
    import jax.numpy as jnp

    from semcheck.checker.frontend.numeric import NUMERIC, unpicked_cases
    from semcheck.checker.frontend.values import Unknown

    eqn = jax.make_jaxpr(lambda p, a, b: jax.lax.select_n(p, a, b))(
        jnp.bool_(True), jnp.int32(0), jnp.int32(0)).jaxpr.eqns[0]
    invals = unpicked_cases(eqn, [pred, case0, case1])
    if any(type(x) is not np.ndarray for x in invals):
        return Unknown("unknown")
    return NUMERIC["select_n"](eqn, *invals)


@pytest.mark.jax
@pytest.mark.rule("ACC-60")
@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(-5, 5)), min_size=2, max_size=8))
@example([(True, True, 3), (False, False, 4)])  # the kernel's case: device 0 keeps its entry, device 1 discards
@example([(True, True, 3), (True, False, 4)])  # picked where unknown
def test_a_select_is_known_where_it_picks_only_known_lanes(lanes):
    """Each lane: (the select picks the case known on some lanes, that lane knows it, its value). The result is
    known exactly when every lane that picks the case knows it, and then it is numpy's `where` on the true values
    (a lane that does not know the case holds another lane's value, which no picked element takes)."""
    from semcheck.checker.frontend.values import SomeLanes, Unknown

    picks = np.array([p for p, _, _ in lanes])
    known = np.array([k for _, k, _ in lanes])
    true = np.array([v for _, _, v in lanes], dtype=np.int32)
    held = np.where(known, true, 99).astype(np.int32)
    other = np.arange(len(lanes), dtype=np.int32) * 10
    case = SomeLanes("uninitialised", None, held, known) if not known.all() else held
    got = _select(picks, other, case)
    if (picks & ~known).any():
        assert isinstance(got, Unknown)
    else:
        assert type(got) is np.ndarray and np.array_equal(got, np.where(picks, true, other))
