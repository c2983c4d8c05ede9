"""BUGGY (in interpret mode only): an id collision that appears in the call after the next, because a
failed call left the interpreter's manager behind.

Pattern: a Python program runs five jitted computations on the same devices and catches each error
(as a notebook would): first a ring kernel that asks for its barrier semaphore by tag
(`get_barrier_semaphore("ring")`, an id jax's TPU lowering picks, specs/deciding/programs.md PRG-125) and has
two scratch DMA semaphores; then a kernel that adds one; then, three times, a ring kernel with the manual
`collective_id=2002` and the same two scratch semaphores. `computations(num_devices, ...)` returns the
five jitted computations and their argument; `build` runs them in order, each on the last result that
completed (so on a TPU they form one chain), catching errors, and leaves what each step did in the
attribute `steps` of the function it returns (the ground-truth recorder stores it).

BUG: 2002 is an id the interpreter may hand out. In interpret mode (PRG-11, PRG-13, PRG-154):
1. the tagged kernel allocates its scratch semaphores (internal ids 2000, 2001 on every core), then fails at
   `get_barrier_semaphore` on every device (`TypeError`: the interpreter uses no tags, its collective
   id is None). That callback is not wrapped by `fail_on_exception`, so nobody drops the manager;
2. the next computation re-raises that error at its dispatch (jax's ordered-effect token) and never starts;
3. the first id-2002 call runs on the left manager: its scratch semaphores get 2002 and 2003, and its
   barrier lookup fails with `ValueError: Semaphore 2002 occurs as both fixed-id and internal.`
   (ERR-1; in a fresh manager they would get 2000 and 2001, and it would run);
4. the next computation re-raises that error;
5. the last id-2002 call runs on a fresh manager (the collision's callback was wrapped, so the manager
   was dropped) and completes: the program returns the ring shift of its input.
On a TPU every call runs (ids are not numbered there): all properties proved under `hardware`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES = 8, 128
COLLECTIVE_ID = 2002  # BUG: an internal id of the interpreter once a manager is left with two ids taken


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _ring_kernel(tag):
    def kernel(x_ref, o_ref, landing, send_sem, recv_sem):
        n = jax.lax.axis_size(AXIS)
        me = jax.lax.axis_index(AXIS)
        right, left = jax.lax.rem(me + 1, n), jax.lax.rem(me + n - 1, n)
        barrier = pltpu.get_barrier_semaphore(tag) if tag is not None else pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(x_ref, landing, send_sem, recv_sem, device_id=(right,))
        copy.start()
        copy.wait()
        o_ref[...] = landing[...]

    return kernel


def _add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def computations(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """[(name, jitted computation)] in program order, and their common argument."""
    params = _interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    shape = jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32)

    def sharded(call):
        return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                                     check_vma=False))

    def ring(tag, cid):
        return sharded(pl.pallas_call(
            _ring_kernel(tag), out_shape=shape,
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=cid), interpret=params))

    steps = [("tagged", ring("ring", None)),
             ("add_one", sharded(pl.pallas_call(_add_one_kernel, out_shape=shape, interpret=params))),
             ("fixed_2002_first", ring(None, COLLECTIVE_ID)),
             ("fixed_2002_second", ring(None, COLLECTIVE_ID)),
             ("fixed_2002_third", ring(None, COLLECTIVE_ID))]
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * ROWS, LANES)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return steps, x


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    steps, x = computations(num_devices, dma_mode=dma_mode, interpret=interpret)

    def program(x):
        program.steps = []
        out = x
        for name, fn in steps:
            try:
                out = jax.block_until_ready(fn(out))
                program.steps.append({"call": name, "outcome": "completed"})
            except Exception as e:  # noqa: BLE001 - the program goes on, as a notebook would
                last = [ln for ln in str(e).splitlines() if ln.strip()][-1].strip()
                program.steps.append({"call": name, "outcome": "error",
                                      "error_type": type(e).__name__, "message": last})
        return out

    program.steps = []
    return program, (x,)


def reference(x, *, num_devices: int):
    return np.roll(np.asarray(x).reshape(num_devices, ROWS, LANES), 1, axis=0).reshape(-1, LANES)
