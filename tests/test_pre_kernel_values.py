"""Values computed before the kernel, collectives included (ACC-8).

examples/reduce_scatter_grouped_matmul.py computes its group-loop bound inside
the `shard_map`, before the `pallas_call`: each device's group count, then
`lax.pmax` over the devices. semcheck evaluates that on the example arrays,
device by device, with the collective run by jax on the target's mesh, and
lowers each device's loop with the value it gets. Where the value is not a
function of the arguments semcheck evaluates (a host callback) or comes from
an earlier kernel's output that is not a fact (PRG-169), every property is unknown and the reason says why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli._support import semcheck_many

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "frontend"))

pytestmark = pytest.mark.jax

EXAMPLE = "examples/reduce_scatter_grouped_matmul.py"
BOUNDS = "tests/generated_inputs/grouped_matmul_bounds.py"
MODES = ("eager", "on_wait", "hardware")


@pytest.fixture(scope="module")
def runs():
    """The CLI's reports (json), two processes at a time."""
    calls = {
        "example": ("verify", EXAMPLE, "--devices", "2,4"),
        "clean": ("verify", f"{BOUNDS}::grouped_rounds", "--devices", "2,4", "--examples", "5"),
        "own": ("verify", f"{BOUNDS}::grouped_rounds_own_count", "--devices", "2", "--examples", "5"),
        "callback": ("verify", f"{BOUNDS}::bound_through_callback", "--devices", "2", "--dma-mode", "hardware"),
        "kernel": ("verify", f"{BOUNDS}::bound_from_earlier_kernel", "--devices", "2", "--dma-mode", "hardware"),
        "shapes": ("verify", f"{BOUNDS}::shapes_only", "--devices", "2", "--dma-mode", "hardware"),
    }
    got = semcheck_many([((*args, "--format", "json", "--no-cache", "--no-config"), {"cwd": ROOT, "timeout": 900})
                         for args in calls.values()])
    return dict(zip(calls, got, strict=True))


@pytest.mark.rule("ACC-8")
def test_a_bound_computed_by_a_collective_is_followed_per_device(runs):
    """Every property proved at 2 and 4 devices in every mode, and the lowered program is the interpreter's:
    the same events, rounds included, on every device (before ACC-8: every property unknown, the loop
    bound 'could not be computed')."""
    from test_frontend import _record

    run = runs["example"]
    assert run.returncode == 0, run.stderr[-2000:]
    rows = run.json()["results"]
    assert {(r["devices"], r["dma_mode"]) for r in rows} == {(n, m) for n in (2, 4) for m in MODES}
    assert {r["verdict"] for r in rows} == {"proved"}
    (rec,) = _record(2, [str(ROOT / EXAMPLE)], 300.0)
    assert rec["status"] == "match" and rec["outcome"] == "completed", rec
    assert rec["lowered_events"] == rec["recorded_events"] > 0


@pytest.mark.rule("ACC-8", "RUN-8")
def test_generated_group_counts_prove_the_kernel_and_find_the_bound_that_differs(runs):
    """Drawn per-device group counts: with `pmax` proved for every draw; with each device's own count the
    devices run different numbers of rounds, found and shrunk to counts [1, 2]."""
    clean = runs["clean"]
    assert clean.returncode == 0, clean.stderr[-2000:]
    rows = clean.json()["results"]
    assert rows and all(r["verdict"] == "proved" and r["reason"] == "proved for 5 generated inputs" for r in rows)
    own = runs["own"]
    assert own.returncode == 1, own.stderr[-2000:]
    rows = own.json()["results"]
    stuck = {r["dma_mode"] for r in rows if r["property"] == "deadlock-free" and r["verdict"] == "violated"}
    assert stuck == set(MODES)
    assert all(r["input"]["value"] == [1, 2] for r in rows if r["verdict"] == "violated")


@pytest.mark.rule("ACC-8")
def test_a_callback_is_unknown_with_why(runs):
    """Not a value the evaluation computes from the arguments: unknown, and the reason names the source;
    with the arguments given as shapes, ACC-4's hint."""
    for name, words in (("callback", ("'pure_callback' at", "grouped_matmul_bounds.py:")),
                        ("shapes", ("which the example arguments do not carry", "hint: give the target concrete"))):
        run = runs[name]
        assert run.returncode == 3, run.stderr[-2000:]
        rows = run.json()["results"]
        assert rows and {r["verdict"] for r in rows} == {"unknown"}
        for r in rows:
            assert "bound_ref" in r["reason"] and all(w in r["reason"] for w in words), r["reason"]


@pytest.mark.rule("ACC-8", "PRG-169")
def test_a_bound_through_an_earlier_kernel_s_output_is_followed(runs):
    """The count passes through an earlier kernel call (a copy into SMEM) before its pmax: that call is run
    (PRG-169), it is race-free, so the bound is a fact and the program is proved (it was unknown)."""
    run = runs["kernel"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert {r["verdict"] for r in run.json()["results"]} == {"proved"}


def _collectives_match(seed_values: list[list[int]]) -> None:
    """In a fresh process with 4 host devices: per drawn per-device vector, the scalar-prefetch operand
    computed by a chain of collectives is, on every device, what jax computes running the same body."""
    import functools

    from semcheck.checker.frontend import provision_devices

    provision_devices(4)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs

    mesh = jax.make_mesh((4,), ("x",))

    def pre(v):
        v = v[0]
        top = jax.lax.pmax(jnp.max(v), "x")
        total = jax.lax.psum(jnp.sum(v), "x")
        low = jax.lax.pmin(jnp.min(v) + total, "x")
        gathered = jax.lax.all_gather(jnp.sum(v) + top, "x")
        shifted = jax.lax.ppermute(v[0] * low, "x", [(i, (i + 1) % 4) for i in range(4)])
        return jnp.concatenate([jnp.cumsum(gathered), jnp.stack([top, total, low, shifted])]).astype(jnp.int32)

    def kernel(table_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, t: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, t: (0, 0))),
        interpret=pltpu.InterpretParams())
    with_kernel = jax.jit(jax.shard_map(lambda v, x: call(pre(v), x), mesh=mesh, in_specs=(P("x"), P("x")),
                                        out_specs=P("x"), check_vma=False))
    only_pre = jax.jit(jax.shard_map(lambda v: pre(v)[None], mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                     check_vma=False))
    put = functools.partial(jax.device_put, device=NamedSharding(mesh, P("x")))
    for values in seed_values:
        v = put(np.asarray(values, np.int32).reshape(4, -1))
        x = put(np.zeros((32, 128), np.float32))
        _, (inputs,) = trace_with_inputs(with_kernel, (v, x))
        want = np.asarray(only_pre(v))  # (devices, 8): each device's row
        got = inputs.values[0]
        assert got is not None, inputs.why_of(0)
        assert np.array_equal(np.broadcast_to(got, want.shape), want), (values, got, want)


@pytest.mark.rule("ACC-8")
def test_collectives_are_what_jax_computes():
    """Hypothesis draws per-device vectors; the operand's value on every device equals jax's own run."""
    import concurrent.futures
    import multiprocessing

    from hypothesis import given, settings
    from hypothesis import strategies as st

    drawn: list[list[int]] = []

    @settings(max_examples=25, derandomize=True)
    @given(st.lists(st.integers(-50, 50), min_size=8, max_size=8))
    def draw(values):
        drawn.append(values)

    draw()
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_collectives_match, drawn).result()
