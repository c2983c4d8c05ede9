"""A kernel closing over refs, as in jax's `PallasCallStatefulAsyncTest` (tests/pallas/tpu_pallas_async_test.py) (clean).

jax's stateful async-copy tests run a `pallas_call` inside `run_state`: the
kernel takes no array operands; it closes over the refs `run_state` hands its
body (`x_ref`, `y_ref`), which makes them constants of the kernel's jaxpr.
jax runs such a call as its state discharge rule rewrites it: each closed-over
ref becomes an input in memory space ANY aliased to an output (spec LAUNCH-4).

Here, on every device of a 1-D mesh, the kernel meets its right neighbour at
the barrier semaphore and copies its `x_ref` into the right neighbour's
`y_ref`, waiting for its send and for the copy arriving from its left
neighbour: a ring permute through closed-over refs. (The tests split start
and wait over two calls that hand a semaphore along, which jax's interpreter
cannot run, divergence D21; one call keeps the closed-over refs.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src.state import discharge as state_discharge
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, wait_send: bool = True):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    params = _interpret_params(dma_mode, interpret)

    def local(x):
        y = jnp.zeros_like(x)

        def body(refs):
            x_ref, y_ref = refs

            def kernel(send_sem, recv_sem):
                me = lax.axis_index(AXIS)
                right, left = lax.rem(me + 1, n), lax.rem(me + n - 1, n)
                barrier = pltpu.get_barrier_semaphore()
                pl.semaphore_signal(barrier, 1, device_id={AXIS: left})
                pl.semaphore_wait(barrier, 1)
                copy = pltpu.make_async_remote_copy(x_ref, y_ref, send_sem, recv_sem, device_id={AXIS: right})
                copy.start()
                if wait_send:
                    copy.wait_send()
                copy.wait_recv()

            pl.pallas_call(kernel, out_shape=(), scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
                           compiler_params=pltpu.CompilerParams(collective_id=0), interpret=params)()

        _, y = state_discharge.run_state(body)((x, y))
        return y

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


def reference(x, *, num_devices: int):
    """Device d ends with device d - 1's block."""
    blocks = np.asarray(x).reshape(num_devices, 8, 128)
    return np.roll(blocks, 1, axis=0).reshape(num_devices * 8, 128)
