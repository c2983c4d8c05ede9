"""Calls in a loop whose scalar inputs the loop computes (PRG-168, PRG-182, PRG-183): a block sent to the right
neighbour chunk by chunk, one kernel call per chunk in a `fori_loop`, the chunk's row offset a scalar-prefetch
operand the loop computes from its index (`i * ROWS`).

Each call tells its left neighbour that its landing rows are free (the barrier semaphore, collective_id 0), waits
for the same word from its right neighbour, copies rows `[offset, offset + ROWS)` of its input into the same rows
of the right neighbour's output and waits for both halves of the copy; the output is carried through the loop
(`input_output_aliases`). `clean` runs CHUNKS iterations (every offset in bounds; the interpreter completes with
the right numbers); `one_chunk_too_many` runs CHUNKS + 1 (BUG: the last offset is the first row past the block,
and jax's interpreter raises `IndexError: Out-of-bounds read` in that call, in both modes). Before PRG-182 both
were proved in every mode: the copy's region, widened over the iterations' offsets, hid the last one; with PRG-182
both were unknown; PRG-183 lowers each iteration's call with its own offset. `nested_loops` sends the chunks from
two nested loops, 72 launches of one call over 4 offsets: unknown before PRG-185, four lowerings with it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS = "x"
CHUNKS, ROWS, LANES = 4, 8, 128


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _shift_chunk_kernel(offset_ref, x_ref, o_in_ref, o_ref, send_sem, recv_sem):
    del o_in_ref
    n = jax.lax.axis_size(AXIS)
    me = jax.lax.axis_index(AXIS)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me - 1 + n, n),))  # my landing rows are free
    pl.semaphore_wait(barrier, 1)  # the right neighbour's are
    rows = pl.ds(offset_ref[0], ROWS)
    copy = pltpu.make_async_remote_copy(x_ref.at[rows], o_ref.at[rows], send_sem, recv_sem,
                                        device_id=(jax.lax.rem(me + 1, n),))
    copy.start()
    copy.wait_send()
    copy.wait_recv()


def shift_chunk(offset, x, out, params):
    """Send rows [offset, offset + ROWS) of `x` to the same rows of the right neighbour's `out` (aliased)."""
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])
    return pl.pallas_call(
        _shift_chunk_kernel,
        grid_spec=grid_spec,
        out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
        input_output_aliases={2: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True),
        interpret=params,
    )(offset, x, out)


def _offset(row):
    return jnp.reshape(row, (1,)).astype(jnp.int32)


def build_with(num_devices: int, params, *, chunks: int = CHUNKS, nested: tuple[int, int] | None = None):
    """The program sending `chunks` chunks (CHUNKS: the block exactly); `nested`: (outer, inner) trip counts of two
    nested loops instead, chunk `(i * inner + j) % CHUNKS` in iteration (i, j)."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(x):
        def body(i, out):
            return shift_chunk(_offset(i * ROWS), x, out, params)

        if nested is None:
            return jax.lax.fori_loop(0, chunks, body, jnp.zeros_like(x))
        outer, inner = nested

        def outer_body(i, out):
            return jax.lax.fori_loop(0, inner, lambda j, o: shift_chunk(
                _offset(((i * inner + j) % CHUNKS) * ROWS), x, o, params), out)

        return jax.lax.fori_loop(0, outer, outer_body, jnp.zeros_like(x))

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False))
    x = (jnp.arange(num_devices * CHUNKS * ROWS * LANES, dtype=jnp.float32) % 251).reshape(
        num_devices * CHUNKS * ROWS, LANES)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))),)


@semcheck.target(devices=[2])
def clean(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


@semcheck.target(devices=[2])
def one_chunk_too_many(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: CHUNKS + 1 iterations: the last offset is past the block
    return build_with(num_devices, interpret_params(dma_mode, interpret), chunks=CHUNKS + 1)


@semcheck.target(devices=[2])
def nested_loops(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # 72 launches of one call over 4 offsets (PRG-185: four lowerings)
    return build_with(num_devices, interpret_params(dma_mode, interpret), nested=(9, 8))


def reference(x, *, num_devices: int):
    parts = np.asarray(x).reshape(num_devices, CHUNKS * ROWS, LANES)
    return np.roll(parts, 1, axis=0).reshape(-1, LANES)
