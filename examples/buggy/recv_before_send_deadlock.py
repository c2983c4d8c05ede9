"""BUGGY: ring all-reduce that waits for its receive before it sends (cyclic wait).

Pattern: the reduce-scatter / all-gather ring all-reduce of
`examples/ring_allreduce.py`, without the credit handshake: at every grid
step each device sends one chunk to its right neighbour's landing buffer and
receives one from its left neighbour.

Bug: each step waits for the incoming chunk (`rs_copy.wait_recv()`) *before*
it starts its own outgoing copy (`rs_copy.start()`).  Device d's receive is
device d-1's send, which comes after device d-1's own receive wait, and so on
around the ring: every device waits for its left neighbour, a wait-for cycle
of length N, and no copy ever starts.

Expected semcheck report: deadlock-free violated under every DMA mode; the
explanation names the cycle (each device waits at the `wait_recv` line for
the copy its left neighbour would start at the `start` line, which never
runs).  Interpret mode: hangs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _kernel(x_ref, acc_ref, landing, send_sems, recv_sems, *, num_devices, rows):
    n = num_devices
    step = pl.program_id(0)
    me = jax.lax.axis_index(AXIS)
    right = jax.lax.rem(me + 1, n)

    @pl.when(step == 0)
    def _():
        acc_ref[...] = x_ref[...]

    def chunk(i):
        return pl.ds(pl.multiple_of(i * rows, rows), rows)

    @pl.when(step < n - 1)
    def _reduce_scatter():
        send_idx = jax.lax.rem(me - step + n, n)
        recv_idx = jax.lax.rem(me - step - 1 + 2 * n, n)
        rs_copy = pltpu.make_async_remote_copy(
            src_ref=acc_ref.at[chunk(send_idx)],
            dst_ref=landing,
            send_sem=send_sems.at[0],
            recv_sem=recv_sems.at[0],
            device_id=(right,),
        )
        rs_copy.wait_recv()  # BUG: waits for the left neighbour's copy ...
        rs_copy.start()  # ... which starts only after that neighbour's own wait.
        rs_copy.wait_send()
        acc_ref[chunk(recv_idx), :] += landing[...]

    @pl.when(step >= n - 1)
    def _all_gather():
        t = step - (n - 1)
        idx = jax.lax.rem(me + 1 - t + n, n)
        ag_copy = pltpu.make_async_remote_copy(
            src_ref=acc_ref.at[chunk(idx)],
            dst_ref=acc_ref.at[chunk(idx)],
            send_sem=send_sems.at[1],
            recv_sem=recv_sems.at[1],
            device_id=(right,),
        )
        ag_copy.start()
        ag_copy.wait_send()
        ag_copy.wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None,
          rows: int = 8, lanes: int = 128):
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    full = (n * rows, lanes)
    call = pl.pallas_call(
        functools.partial(_kernel, num_devices=n, rows=rows),
        out_shape=jax.ShapeDtypeStruct(full, jnp.float32),
        grid=(2 * (n - 1),),
        in_specs=[pl.BlockSpec(full, lambda s: (0, 0))],
        out_specs=pl.BlockSpec(full, lambda s: (0, 0)),
        scratch_shapes=[
            pltpu.VMEM((rows, lanes), jnp.float32),
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.SemaphoreType.DMA((2,)),
        ],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    x = (jnp.arange(n * n * rows * lanes, dtype=jnp.float32) % 97).reshape(n * n * rows, lanes)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x,)


def reference(x, *, num_devices: int):
    parts = np.split(x, num_devices, axis=0)
    total = np.sum(parts, axis=0)
    return np.concatenate([total] * num_devices, axis=0)
