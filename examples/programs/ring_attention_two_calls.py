"""Ring attention split over two kernel calls, with per-device sequence lengths (correct).

Pattern (written for semcheck): every device holds one KV block of up to ROWS token rows; how many of
them are real comes from a concrete array of per-device sequence lengths (`SEQ_LENS`, replicated on
every device). The ring runs `num_devices - 1` steps split over two calls of one kernel: the first
call runs the first half, the second call the rest (the split is a scalar-prefetch table computed
before the calls). A step synchronises with both neighbours (a double barrier: the first on the
barrier semaphore, the second on a `run_scoped` REGULAR semaphore), sends the block it holds to its
right neighbour's landing buffer, waits its send and its receive, and folds the received block into
an accumulator over as many rows as its owner's length gives (a running sum stands in for the
softmax accumulation of attention: the synchronisation is the point). Both calls take the lengths and
the split, so both their step counts and their per-step row loops are read from the concrete arrays
(specs/deciding/programs.md PRG-167).

What is right: each step's copy lands in a neighbour that is inside the same step of the same call
(the double barrier, PRG-15, PRG-16), every copy is waited in its step, and the barrier count returns
to zero in each call. On a TPU each device's accumulator is the sum of the other devices' real rows.

What the interpreter does: completes with the right numbers in both DMA modes (its calls are globally
synchronised, PRG-10).

`build_with` is the building block of the seeded misuse in
examples/programs/buggy/ring_attention_two_calls_last_recv_unwaited.py.
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
ROWS, LANES = 8, 128
TOKENS_PER_ROW = 16


def seq_lens(num_devices: int) -> np.ndarray:
    """Per-device sequence lengths in tokens: 1 .. ROWS * TOKENS_PER_ROW, different on neighbours."""
    return np.array([TOKENS_PER_ROW * (1 + (5 * d + 3) % ROWS) - 7 * (d % 2) for d in range(num_devices)],
                    dtype=np.int32)


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _double_barrier(left, right):
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    def second(sem):
        pl.semaphore_signal(sem, 1, device_id=(left,))
        pl.semaphore_signal(sem, 1, device_id=(right,))
        pl.semaphore_wait(sem, 2)

    pl.run_scoped(second, pltpu.SemaphoreType.REGULAR)


def _ring_kernel(split_ref, rows_ref, kv_ref, acc_in_ref, kv_out_ref, acc_ref, landing, send_sem, recv_sem,
                 *, part, skip):
    n = jax.lax.axis_size(AXIS)
    me = jax.lax.axis_index(AXIS)
    left, right = jax.lax.rem(me - 1 + n, n), jax.lax.rem(me + 1, n)
    first, steps = split_ref[2 * part], split_ref[2 * part + 1]  # this call's global steps: first .. first+steps
    kv_out_ref[...] = kv_ref[...]
    acc_ref[...] = acc_in_ref[...]

    def step(s, carry):
        _double_barrier(left, right)
        copy = pltpu.make_async_remote_copy(kv_out_ref, landing, send_sem, recv_sem, device_id=(right,))
        copy.start()
        copy.wait_send()

        @pl.when(s < steps - skip)
        def _():
            copy.wait_recv()

        kv_out_ref[...] = landing[...]
        owner = jax.lax.rem(me - first - s - 1 + 2 * n, n)  # whose block arrived

        def fold(r, c):
            acc_ref[pl.ds(r, 1), :] += kv_out_ref[pl.ds(r, 1), :]
            return c

        jax.lax.fori_loop(0, rows_ref[owner], fold, 0)
        return carry

    jax.lax.fori_loop(0, steps, step, 0)


def ring_part(split, rows, kv, acc, params, *, part, skip=0):
    """One call of the ring: the steps `split` gives `part` (0: the first half, 1: the rest)."""
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(1,), in_specs=[vmem, vmem], out_specs=(vmem, vmem),
        scratch_shapes=[pltpu.VMEM(kv.shape, kv.dtype), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        functools.partial(_ring_kernel, part=part, skip=skip),
        grid_spec=grid_spec,
        out_shape=(jax.ShapeDtypeStruct(kv.shape, kv.dtype), jax.ShapeDtypeStruct(acc.shape, acc.dtype)),
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )(split, rows, kv, acc)


def build_with(num_devices: int, params, *, skip=0):
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(lens, kv):
        rows = (lens + TOKENS_PER_ROW - 1) // TOKENS_PER_ROW  # real rows of each device's block
        half = (num_devices - 1) // 2
        split = jnp.array([0, half, half, num_devices - 1 - half], dtype=jnp.int32)
        kv, acc = ring_part(split, rows, kv, jnp.zeros_like(kv), params, part=0)
        _, acc = ring_part(split, rows, kv, acc, params, part=1, skip=skip)
        return acc

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    kv = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    lens = jnp.asarray(seq_lens(num_devices))
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(kv, NamedSharding(mesh, P(AXIS))))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(lens, kv, *, num_devices: int):
    rows = (np.asarray(lens) + TOKENS_PER_ROW - 1) // TOKENS_PER_ROW
    parts = np.asarray(kv).reshape(num_devices, ROWS, LANES)
    acc = np.zeros_like(parts)
    for me in range(num_devices):
        for owner in range(num_devices):
            if owner != me:
                acc[me, :rows[owner]] += parts[owner, :rows[owner]]
    return acc.reshape(-1, LANES)
