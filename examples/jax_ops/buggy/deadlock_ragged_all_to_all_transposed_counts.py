"""examples/jax_ops/ragged_all_to_all.py with the receive count read from the wrong end of the table (BUG).

The ragged all-to-all of LLM serving stacks (see ../ragged_all_to_all.py):
device `i` sends `counts[i, j]` chunks to device `j`, the table coming through
scalar prefetch, each copy under `pl.when(count > 0)`; every device then waits
on each source's receive semaphore as many chunks as that source sent it.

BUG: the receiver reads its count as `counts[me, s]` (what it sends to `s`)
instead of `counts[s, me]` (what `s` sends to it), at line 82. The two agree
whenever the table is symmetric, which is what a balanced routing or a test
with uniform counts produces, so such inputs pass. On any other table some
pair has counts[i, j] != counts[j, i]: of the two devices, the one that waits
for more chunks than it is sent blocks on that wait forever (deadlock-free
violated in every DMA mode; the interpreter hangs), and the other is left with
chunks nobody waits for (dma-bytes violated: bytes left at exit; under eager
at 2 devices the interpreter prints that count at the device's exit). The
default table `default_counts` ([[0, 2], [1, 3]] at 2 devices) is not
symmetric. tests/generated_inputs/ragged_all_to_all.py draws tables from a
hypothesis strategy: semcheck finds the bug there and shrinks it to a
smallest asymmetric table.

Fix: `received = counts_ref[s, me]`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"
CAP = 3  # chunks per (source, destination) pair at most
CHUNK = 8  # rows per chunk
LANES = 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def default_counts(num_devices: int) -> np.ndarray:
    """counts[i, j] = (i + 2 j) mod (CAP + 1): zeros, full slots and partial ones, not symmetric."""
    i, j = np.indices((num_devices, num_devices))
    return ((i + 2 * j) % (CAP + 1)).astype(np.int32)


def _kernel(counts_ref, x_ref, o_ref, send_sems, recv_sems, *, n):
    me = lax.axis_index(AXIS)

    barrier = pltpu.get_barrier_semaphore()
    for k in range(1, n):
        pl.semaphore_signal(barrier, 1, device_id={AXIS: lax.rem(me + k, n)})
    pl.semaphore_wait(barrier, n - 1)

    def chunk_copy(peer, src, dst, chunk):
        """The copy of one chunk from device `src` to device `dst`, seen from `peer`'s side."""
        return pltpu.make_async_remote_copy(
            x_ref.at[dst, chunk], o_ref.at[src, chunk], send_sems.at[dst], recv_sems.at[src],
            device_id={AXIS: peer})

    for p in range(n):
        count = counts_ref[me, p]

        @pl.when(count > 0)
        def _send(p=p, count=count):
            def start(c, carry):
                chunk_copy(p, me, p, c).start()
                return carry

            lax.fori_loop(0, count, start, 0)

    for s in range(n):
        received = counts_ref[me, s]  # BUG: what I send to s, not what s sends me

        @pl.when(received > 0)
        def _receive(s=s, received=received):
            def wait(c, carry):
                chunk_copy(s, s, me, 0).wait_recv()
                return carry

            lax.fori_loop(0, received, wait, 0)

    for p in range(n):
        sent = counts_ref[me, p]

        @pl.when(sent > 0)
        def _sent(p=p, sent=sent):
            def wait(c, carry):
                chunk_copy(p, me, p, 0).wait_send()
                return carry

            lax.fori_loop(0, sent, wait, 0)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, counts=None):
    """The all-to-all on every device of a 1-D mesh, on table `counts` (N x N, entries 0..CAP)."""
    n = num_devices
    mesh = jax.make_mesh((n,), (AXIS,))
    table = default_counts(n) if counts is None else np.asarray(counts, dtype=np.int32).reshape(n, n)
    if table.min() < 0 or table.max() > CAP:
        raise ValueError(f"counts must lie in 0..{CAP}, got {table.tolist()}")
    block = (n, CAP, CHUNK, LANES)
    call = pl.pallas_call(
        functools.partial(_kernel, n=n),
        out_shape=jax.ShapeDtypeStruct(block, jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SemaphoreType.DMA((n,)), pltpu.SemaphoreType.DMA((n,))],
        ),
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=_interpret_params(dma_mode, interpret),
    )

    def local(counts, x):
        out = call(counts, x.reshape(block))
        # the chunks no source sent are whatever the buffer held: zero them
        sent = jnp.arange(CAP)[None, :] < counts[:, lax.axis_index(AXIS)][:, None]
        return jnp.where(sent[:, :, None, None], out, 0.0)[None]

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.arange(n * n * CAP * CHUNK * LANES, dtype=jnp.float32).reshape(n, *block)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (table, x)


def reference(counts, x, *, num_devices: int):
    """What device j ends with (numpy): out[j, i, c] = x[i, j, c] for the c < counts[i, j], else 0."""
    n = num_devices
    out = np.zeros_like(x)
    for i in range(n):
        for j in range(n):
            c = counts[i, j]
            out[j, i, :c] = x[i, j, :c]
    return out
