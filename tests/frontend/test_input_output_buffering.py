"""Input-output BufferedRefs of `emit_pipeline` (`kernels/input_output_buffering.py`): a block revisited in
fewer steps than its prefetch and write-back span races, in every DMA mode, at the pipeline's copy; one
whose write-back is synchronous is proved. jax's interpreter reports the same race (and no other) on
concrete inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "kernels"))

pytestmark = pytest.mark.jax

KERNEL = HERE / "kernels" / "input_output_buffering.py"


def _verdicts(entry: str) -> dict[tuple[str, str], dict]:
    from semcheck.testing import verify_target

    report, _, _ = verify_target(str(KERNEL), devices=(2,), dma_mode="all", entry=entry, cache=False)
    return {(r["dma_mode"], r["property"]): r for r in report["results"]}


def test_a_block_revisited_before_its_write_back_is_waited_races_in_every_mode():
    got = _verdicts("revisited_too_soon")
    for mode in ("eager", "on_wait", "hardware"):
        race = got[(mode, "race-free")]
        assert race["verdict"] == "violated", (mode, race)
        assert "input_output_buffering.py" in race["witness"]["message"]
    assert {k: r["verdict"] for k, r in got.items() if k[1] != "race-free"} == {
        k: "proved" for k in got if k[1] != "race-free"}


def test_a_synchronous_write_back_before_the_next_prefetch_is_proved():
    got = _verdicts("revisited_after_write_back")
    assert {k: r["verdict"] for k, r in got.items()} == {k: "proved" for k in got}


@pytest.mark.parametrize("dma_mode", ["eager", "on_wait"])
def test_the_interpreter_reports_the_race_only_for_the_early_revisit(dma_mode):
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import tpu as pltpu

    import input_output_buffering as k

    found = {}
    for counts in ((2, 2), (2, 1)):
        params = pltpu.InterpretParams(dma_execution_mode=dma_mode, detect_races=True)
        fn, (arg, _) = k.build(1, counts=counts, interpret_params=params)
        x = jnp.ones(arg.shape, arg.dtype)
        try:
            jax.block_until_ready(fn(jax.device_put(x, arg.sharding), jax.device_put(jnp.zeros_like(x), arg.sharding)))
            found[counts] = "no race"
        except Exception as e:  # the detector raises (on_race="raise") from inside the interpreter's callback
            found[counts] = "race" if "RACE DETECTED" in str(e) else repr(e)
    assert found == {(2, 2): "race", (2, 1): "no race"}
