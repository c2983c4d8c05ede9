"""Arrays typed with a memory space (specs/semantics/accesses.md GRID-5): on a TPU the kernel's ref is the array.

A copy started in one call into an output typed `pltpu.VMEM(...)` / `pltpu.SMEM(...)` and waited in the
next is proved under `hardware` (no grid write-back stands between them); reading that array before the
wait is a race; the interpreter cannot launch a call with a semaphore result (PRG-12): `unrunnable` there
(REP-21), exit code 4 where nothing is violated."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from cli._support import semcheck_many  # noqa: E402

pytestmark = pytest.mark.jax

CLEAN = "examples/programs/async_copy_into_memory_spaces.py"
BUGGY = "examples/programs/buggy/async_copy_into_vmem_read_before_done.py"


def _verdicts(run) -> dict[tuple[str, str], dict]:
    assert run.returncode in (0, 1, 4), run.stderr[-2000:]  # 4: unrunnable in interpret mode (REP-21)
    return {(r["dma_mode"], r["property"]): r for r in run.json()["results"]}


@pytest.mark.rule("GRID-5", "PRG-12")
def test_a_typed_array_is_the_kernels_ref_on_a_tpu():
    clean, buggy = (_verdicts(r) for r in semcheck_many(
        [(("verify", path, "--devices", "2", "--dma-mode", "all", "--no-cache", "--format", "json"),
          {"cwd": REPO, "timeout": 600}) for path in (CLEAN, BUGGY)]))
    assert {k: r["verdict"] for k, r in clean.items() if k[0] == "hardware"} == {
        k: "proved" for k in clean if k[0] == "hardware"}
    race = buggy[("hardware", "race-free")]
    assert race["verdict"] == "violated"
    assert "async_copy_into_vmem_read_before_done.py:38" in race["witness"]["message"]  # the early load
    assert all(v["verdict"] == "proved" for k, v in buggy.items() if k[0] == "hardware" and k[1] != "race-free")
    for verdicts in (clean, buggy):  # the interpreter never runs a call with a semaphore result (REP-21)
        for (mode, _), v in verdicts.items():
            if mode != "hardware":
                assert v["verdict"] == "unrunnable" and "nan + dma_sem" in v["reason"], v


def _vmem_output_call():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    call = pl.pallas_call(kernel, out_shape=pltpu.VMEM((8, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          interpret=pltpu.InterpretParams())
    return jax.jit(call), (jax.ShapeDtypeStruct((8, 128), jnp.float32),)


@pytest.mark.rule("GRID-5", "GRID-1")
def test_a_call_the_interpreter_runs_keeps_its_grid_copies():
    from semcheck.checker.frontend.grid_copies import grid_copy_of
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    (call,) = trace_kernels(*_vmem_output_call())
    out = next(o for o in call.operands if o.role == "output")
    assert out.array_space == "vmem" and not call.tpu_only and not call.sees_array(out)
    kinds = {grid_copy_of(op).kind for ops in lower_kernel(call).cores for op in ops if grid_copy_of(op)}
    assert kinds == {"in", "out"}  # the interpreter copies the block in and writes it back (GRID-1)
