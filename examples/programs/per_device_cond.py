"""Calls that only some devices run: a `lax.cond` on the device's own index around a local kernel (correct).

Pattern: every device runs the ring kernel of examples/programs/distinct_collective_ids_two_patterns.py
(collective_id 0: signal the left neighbour, wait for the right one, copy the block to the right
neighbour); then device 0 alone doubles its block with a local kernel (`lax.cond(axis_index == 0, ...)`:
the predicate differs between devices, and the walk computes it on each device); then every device runs
the pairwise kernel (collective_id 1).

What is right: the local kernel neither communicates nor has a barrier, so the devices that skip it wait
for nothing from it, and it leaves no semaphore behind. semcheck gives device 0 its own call sequence
(ring, double, pairwise) and the other devices theirs (ring, pairwise) (specs/deciding/programs.md PRG-145), and
every property is proved under `hardware`. examples/programs/buggy/per_device_cond_partner_skips.py is the
hazard: a communicating kernel that the partner device skips.

What the interpreter does: hangs, at 2 and 4 devices in both DMA modes (the recorded runs are killed after 40 s).
Every interpreted call ends at a clean-up barrier of every device, and a call without a collective id starts at a
start barrier of every device; each trip of either takes one wait of every device (specs/semantics/calls.md
PRG-179). After the ring kernel, device 0 waits at the doubling kernel's start barrier, which no other device
reaches; device 1 waits in the pairwise kernel for device 0's signal (at 4 devices, devices 2 and 3 finish the
pairwise kernel and wait at its clean-up barrier). Device 0 runs one call more than the others, so no run
completes: semcheck says deadlock-free violated in those modes, naming the doubling kernel's line
(specs/deciding/programs.md PRG-180); the ring kernel, which every device runs first, keeps its proofs; the
doubling kernel never starts, so its other properties are vacuous (PRG-181); the pairwise kernel's other seven
properties are proved (2 and 4 devices) over what every run reaches before the hang (PRG-211, PRG-212): only the
devices other than device 0 run it, and their runs of it are runs of the kernel alone in which device 0 has not
moved (device 1 signals device 0's barrier semaphore, which device 0 never reads, and then waits at the barrier for
good).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P


def _patterns():
    path = Path(__file__).resolve().with_name("distinct_collective_ids_two_patterns.py")
    spec = importlib.util.spec_from_file_location("semcheck_programs_two_patterns", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tp = _patterns()
AXIS, ROWS, LANES = tp.AXIS, tp.ROWS, tp.LANES
interpret_params = tp.interpret_params


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def double(x, params):
    return pl.pallas_call(
        _double_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=params,
    )(x)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    if num_devices % 2:
        raise ValueError("the pairwise kernel needs an even number of devices")
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(x):
        y = tp.call(tp._ring_kernel, x, 0, params)
        y = jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: double(v, params), lambda v: v, y)
        return tp.call(tp._pair_kernel, y, 1, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    return fn, (_input(mesh, num_devices),)


def _input(mesh, num_devices):
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    return jax.device_put(x, NamedSharding(mesh, P(AXIS)))


def reference(x, *, num_devices: int):
    parts = np.roll(np.asarray(x).reshape(num_devices, ROWS, LANES), 1, axis=0)  # the ring: from the left
    parts[0] *= 2
    parts = parts.reshape(num_devices // 2, 2, ROWS, LANES)[:, ::-1]  # the pairwise swap
    return parts.reshape(-1, LANES)
