"""Each device processes its own number of ragged chunks: a `while_loop` around a local kernel (correct on a TPU).

Pattern: every device holds `MAX_CHUNKS` chunks of rows and a count of how many of them are filled (a sharded
input: device d has `2 + d % 2`). A `fori_loop` whose bound is that count (a traced bound: a `while_loop`) runs a
local kernel once per filled chunk, adding the chunk's squares into an accumulator carried by the loop. The kernel
neither communicates nor takes or returns a semaphore, so on a TPU each device runs its calls alone: a device with
fewer chunks leaves the loop earlier and waits for nothing. semcheck computes the loop's condition on each device
(the count is a block of a known input), gives each device its own calls, and proves every property under
`hardware` (specs/deciding/programs.md PRG-197). examples/programs/buggy/ragged_chunks_while_ring_uneven.py is the
hazard on a TPU: a communicating call in such a loop.

What the interpreter does: hangs, at 2 and 4 devices in both DMA modes (the recorded runs are killed after 40 s).
Every interpreted call ends at a clean-up barrier of every device of the mesh, and this kernel (no collective id)
starts at a start barrier of every device; each trip of either takes one wait of every device (specs/semantics/
calls.md PRG-179). The devices with three chunks wait at their third call's start barrier for devices that have
left the loop after two, so no run completes: semcheck says deadlock-free violated in those modes, naming the
loop's iteration and the kernel's line (PRG-180, PRG-197).
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
MAX_CHUNKS, ROWS, LANES = 3, 8, 128


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _square_add_kernel(chunk_ref, acc_ref, o_ref):
    o_ref[...] = acc_ref[...] + chunk_ref[...] * chunk_ref[...]


def square_add(chunk, acc, params):
    return pl.pallas_call(
        _square_add_kernel,
        out_shape=jax.ShapeDtypeStruct(acc.shape, acc.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=params,
    )(chunk, acc)


def chunk_counts(num_devices: int) -> np.ndarray:
    return np.array([2 + d % 2 for d in range(num_devices)], np.int32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(counts, chunks):
        def step(i, acc):
            return square_add(jax.lax.dynamic_index_in_dim(chunks, i, keepdims=False), acc, params)

        # each device's own trip count: the devices run different numbers of calls
        return jax.lax.fori_loop(0, counts[0], step, jnp.zeros((ROWS, LANES), chunks.dtype))

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    chunks = (jnp.arange(num_devices * MAX_CHUNKS * ROWS * LANES, dtype=jnp.float32) % 13).reshape(
        num_devices * MAX_CHUNKS, ROWS, LANES)
    return fn, (jax.device_put(jnp.asarray(chunk_counts(num_devices)), NamedSharding(mesh, P(AXIS))),
                jax.device_put(chunks, NamedSharding(mesh, P(AXIS))))


def reference(counts, chunks, *, num_devices: int):
    parts = np.asarray(chunks).reshape(num_devices, MAX_CHUNKS, ROWS, LANES)
    counts = np.asarray(counts)
    return np.concatenate([(parts[d, :counts[d]] ** 2).sum(axis=0) for d in range(num_devices)])
