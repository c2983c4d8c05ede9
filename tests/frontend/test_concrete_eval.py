"""The concrete evaluation of the program around a kernel (issue 17): call wrappers, run-time grids.

The kernels (`kernels/concrete_eval.py`) need values only the outer program
computes: a scalar-prefetch table computed inside `jax.custom_vjp`,
`jax.custom_jvp` or `jax.checkpoint` (ACC-4: their primal bodies are
entered), and a grid bound computed from a table outside the kernel (ACC-5).
With concrete example arguments the lowered programs are what jax's TPU
interpreter does on the same inputs, and follow the values; with shapes, or
a bound that differs between devices, every property is unknown at the
pallas_call's line (never a guessed grid).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "kernels"))
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.jax

KERNEL = "concrete_eval.py"
WRAPPED = ["prefetch_when_in_custom_vjp", "prefetch_when_in_custom_jvp", "prefetch_when_in_checkpoint"]
CONCRETE = [*WRAPPED, "dynamic_grid"]


def _specs(names: list[str]) -> list[str]:
    return [f"{KERNEL}::{n}" for n in names]


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, int], dict[str, Any]]:
    from test_frontend import _record

    return {(r["spec"], n): r for n in (2, 4) for r in _record(n, _specs(CONCRETE))}


@pytest.mark.rule("ACC-4", "ACC-5")
@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("name", CONCRETE)
def test_program_matches_interpreter(recorded, name: str, devices: int) -> None:
    r = recorded[(f"{KERNEL}::{name}", devices)]
    assert r["status"] == "match", r.get("difference") or r.get("error") or r
    assert r["outcome"] == "completed"
    assert r["lowered_events"] == r["recorded_events"] > 0


@pytest.fixture(scope="module")
def probed() -> dict[str, dict[str, Any]]:
    from test_frontend import _probe

    return _probe(4, _specs([*CONCRETE, "dynamic_grid_abstract", "dynamic_grid_per_device"]))


def _device_ops(r: dict[str, Any], device: int) -> list[dict[str, Any]]:
    (k,) = r["kernels"]
    return k["cores"][device * k["cores_per_device"]]


@pytest.mark.rule("ACC-4")
@pytest.mark.parametrize("name", WRAPPED)
def test_wrapped_table_is_followed(probed, name: str) -> None:
    """As `scalar_data.prefetch_when`: device d copies and signals iff its count is positive."""
    from test_scalar_data import _tables

    counts = _tables()["COUNTS"][:4]
    r = probed[f"{KERNEL}::{name}"]
    assert "error" not in r, r.get("error")
    for d in range(4):
        ops = _device_ops(r, d)
        assert sum(op["op"] == "DmaStart" for op in ops) == (counts[d] > 0)
        assert [s["inc"] for s in ops if s["op"] == "Signal"] == ([counts[d]] if counts[d] else [])


@pytest.mark.rule("ACC-5")
def test_dynamic_grid_runs_its_computed_extent(probed) -> None:
    """The bound is how many of the 4 counts are positive: one copy per grid step."""
    from test_scalar_data import _tables

    steps = sum(1 for c in _tables()["COUNTS"][:4] if c > 0)
    r = probed[f"{KERNEL}::dynamic_grid"]
    assert "error" not in r, r.get("error")
    for d in range(4):
        assert sum(op["op"] == "DmaStart" for op in _device_ops(r, d)) == steps == 2


@pytest.mark.rule("ACC-5")
@pytest.mark.parametrize("name,words", [
    ("dynamic_grid_abstract", ("run time", "not jax.ShapeDtypeStruct")),
    ("dynamic_grid_per_device", ("differs between devices", "[1, 2, 4]")),
])
def test_dynamic_grid_is_never_guessed(probed, name: str, words: tuple[str, ...]) -> None:
    err = probed[f"{KERNEL}::{name}"]["error"]
    assert err["code"] == "unsupported" and err["primitive"] == "pallas_call", err
    assert all(w in err["message"] for w in words), err["message"]
    assert err["loc"][0] == KERNEL


def test_wrapped_and_dynamic_grid_kernels_are_verified() -> None:
    from semcheck.testing import assert_verified

    for name in CONCRETE:
        assert_verified(str(HERE / "kernels" / f"{KERNEL}::{name}"), devices=(2,))
