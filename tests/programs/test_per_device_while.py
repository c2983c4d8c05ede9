"""PRG-197: a `while_loop` around kernel calls whose condition the walk computes on each device runs, on each device,
as many iterations as that device's condition allows: each iteration's calls are run by the devices still in the
loop (PRG-145's per-device calls), and the interpreter's hang and the hardware verdicts follow from there.

examples/programs/ragged_chunks_while.py (each device processes its own number of chunks with a local kernel) and
its twin examples/programs/buggy/ragged_chunks_while_ring_uneven.py (a ring exchange per chunk); drawn trip counts
for the walk itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORRECT = "examples/programs/ragged_chunks_while.py"
BUGGY = "examples/programs/buggy/ragged_chunks_while_ring_uneven.py"
MARKER = "@@PERDEVWHILE@@ "

# Drawn trip counts (0 to 3 per device, 2 to 4 devices): the walk of a fori_loop bounded by each device's count,
# then a cond on the loop's final counter (known on each device only through the loop's merged carry), then a cond
# on a flag a per-device cond returns (known on each device only through that cond's merged results).
_DRAWN = """
import json
import numpy as np
from hypothesis import given, settings, strategies as st
from semcheck.checker.frontend import provision_devices
provision_devices(4)
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from semcheck.checker.frontend.program_walk import program_irs
from semcheck.checker.frontend.trace import make_jaxpr
from semcheck.checker.programs.interpreter_hang import no_run_completes
from semcheck.checker.frontend.concrete_inputs import inputs_by_launch
from semcheck.checker.frontend.programs import invocation_inputs

def _k(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1

def inc(x):
    return pl.pallas_call(_k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)

def _twice(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2

def twice(x):
    return pl.pallas_call(_twice, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)

def walked(counts):
    n = len(counts)
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def program(c, x):
        i, x = jax.lax.while_loop(lambda s: s[0] < c[0], lambda s: (s[0] + 1, inc(s[1])), (jnp.int32(0), x))
        x = jax.lax.cond(i >= 2, twice, lambda v: v, x)
        # a cond whose branch differs between devices (`%`: a jit of XLA operations, evaluated on each device): its
        # flag result is known on each device after it
        x, flag = jax.lax.cond(i % 2 == 0, lambda v: (inc(v), i * 0 + 1), lambda v: (v, i * 0), x)
        return jax.lax.cond(flag == 1, twice, lambda v: v, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False))
    args = (jax.device_put(jnp.asarray(counts, jnp.int32), NamedSharding(mesh, P("x"))),
            jax.device_put(jnp.zeros((8 * n, 128), jnp.float32), NamedSharding(mesh, P("x"))))
    (ir,) = program_irs(make_jaxpr(fn, args).jaxpr, jax.tree.leaves(args))
    return ir

bad = []

@settings(max_examples=25, deadline=None, database=None)
@given(st.integers(2, 4).flatmap(lambda n: st.lists(st.integers(0, 3), min_size=n, max_size=n)))
def check(counts):
    ir = walked(counts)
    n = len(counts)
    assert ir.unknown is None, (counts, ir.unknown)
    runs = [[inv.name for inv in ir.invocations if inv.devices is None or d in inv.devices] for d in range(n)]
    want = [["_k"] * c + (["_twice"] if c >= 2 else []) + (["_k", "_twice"] if c % 2 == 0 else []) for c in counts]
    if runs != want:
        bad.append([counts, runs])
    hang = no_run_completes(ir, n) is not None
    if hang is (len(set(map(len, want))) == 1):  # every call is local, without a collective id (PRG-179)
        bad.append([counts, "hang" if hang else "no hang"])

def _pick(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1

def pick(i, table):
    spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(1,),
                                        in_specs=[pl.BlockSpec((8, 128), lambda g, idx: (idx[0], 0))],
                                        out_specs=pl.BlockSpec((8, 128), lambda g, idx: (0, 0)))
    return pl.pallas_call(_pick, grid_spec=spec, out_shape=jax.ShapeDtypeStruct((8, 128), table.dtype),
                          interpret=True)(jnp.reshape(i, (1,)), table)

@settings(max_examples=15, deadline=None, database=None)
@given(st.integers(2, 4).flatmap(lambda n: st.lists(st.integers(1, 3), min_size=n, max_size=n)))
def check_values(counts):
    # PRG-198: each iteration's call reads that iteration's index on every device that runs it
    n = len(counts)
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def program(c, table):
        return jax.lax.fori_loop(0, c[0], lambda i, acc: acc + pick(i, table), jnp.zeros((8, 128), table.dtype))

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False))
    args = (jax.device_put(jnp.asarray(counts, jnp.int32), NamedSharding(mesh, P("x"))),
            jnp.zeros((8 * 3, 128), jnp.float32))
    closed = make_jaxpr(fn, args)
    (ir,) = program_irs(closed.jaxpr, jax.tree.leaves(args))
    got = invocation_inputs(ir, inputs_by_launch(closed, args))
    for k, (inv, inputs) in enumerate(zip(ir.invocations, got)):
        runs = [d for d in range(n) if inv.devices is None or d in inv.devices]
        if runs != [d for d in range(n) if counts[d] > k] or inputs is None or inputs.values[0] is None \
                or any(int(np.asarray(inputs.values[0][d % len(inputs.values[0])]).reshape(-1)[0]) != k
                       for d in runs):  # a lane array of one row: every device's
            bad.append([counts, k, runs, None if inputs is None or inputs.values[0] is None
                        else np.asarray(inputs.values[0]).reshape(-1).tolist()])

check()
check_values()
print({marker!r} + json.dumps(bad))
"""


def _verify(path: str, devices: str) -> list[dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", path, "--devices", devices,
                          "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return json.loads(run.stdout)["results"]


def _line(path: str, text: str) -> int:
    return next(i for i, s in enumerate((REPO / path).read_text().splitlines(), 1) if text in s)


@pytest.mark.jax
@pytest.mark.rule("PRG-197", "PRG-198")
def test_each_device_runs_as_many_iterations_as_its_own_condition_allows():
    """Device d runs its own count of calls, and the cond on the loop's final counter runs its call on exactly the
    devices whose count is at least 2; the interpreter hangs (PRG-180) exactly where the devices' sequences differ.
    PRG-198: a call that reads the loop's counter as a scalar-prefetch operand reads, in the walk's k-th call, k on
    every device that runs it."""
    run = subprocess.run([sys.executable, "-c", _DRAWN.format(marker=MARKER)], capture_output=True, text=True,
                         cwd=REPO, timeout=900)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    assert json.loads(line.removeprefix(MARKER)) == []


@pytest.mark.jax
@pytest.mark.rule("PRG-197", "PRG-180", "PRG-212")
def test_ragged_chunks_per_device_are_decided_in_every_mode():
    """The recorded interpret-mode runs of both programs hang (2 and 4 devices, both modes, with and without the race
    detector): semcheck says deadlock-free violated there, naming the loop and each device's trip count, and proves
    the rest over the two iterations every device runs before the third call's start barrier (PRG-212). Under
    `hardware` the local kernel is proved; the ring exchange the devices with three chunks run once more deadlocks
    at its barrier wait."""
    truth = json.loads((HERE / "ground_truth.json").read_text())
    for path in (CORRECT, BUGGY):
        runs = [c for c in truth["cases"] if c["path"] == path]
        assert len(runs) == 8 and {c["outcome"] for c in runs} == {"hang"}, [(c["key"], c["outcome"]) for c in runs]
    loop = f"ragged_chunks_while.py:{_line(CORRECT, 'jax.lax.fori_loop(')}"
    for r in _verify(CORRECT, "2"):
        if r["dma_mode"] == "hardware":
            assert r["verdict"] == "proved", r
        elif r["property"] == "deadlock-free":
            msg = r["witness"]["message"]
            assert r["verdict"] == "violated" and "no run completes" in msg, r
            assert "of 2 on device 0, 3 on device 1) of the loop at" in msg and loop in msg, msg
        else:  # the calls before the third iteration run as they do alone; the third never starts (PRG-212)
            assert r["verdict"] == "proved" and "PRG-212" in r["reason"], r
    for r in _verify(BUGGY, "2"):
        if r["dma_mode"] != "hardware":
            assert r["verdict"] == ("violated" if r["property"] == "deadlock-free" else "proved"), r
        elif r["property"] in ("deadlock-free", "exit-balance", "dma-bytes"):
            assert r["verdict"] == "violated", r
        else:
            assert r["verdict"] == "proved", r
        if r["dma_mode"] == "hardware" and r["property"] == "deadlock-free":
            msg = r["witness"]["message"]
            assert "device 1 blocks" in msg and "semaphore_wait(barrier, 2)" in msg, msg
