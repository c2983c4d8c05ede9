"""Ragged sequences split into fixed-size row chunks: a metadata call fills a chunk table in a loop, a second call
copies the chunks it lists (correct).

Pattern (written for semcheck): a first kernel call, the metadata kernel, reads the sequences' cumulative lengths
(a scalar-prefetch operand, replicated on every device) and walks the sequences in a `fori_loop`. Per sequence it
counts the CHUNK-row chunks the sequence needs and, in a nested `fori_loop`, stores each chunk's sequence and
first row at `count + j` of two SMEM tables, where `count` is the number of chunks of the sequences before: an
accumulator the outer loop carries and grows by each sequence's chunk count. After the loop it stores the total
in a third table. The second call takes the three tables as its scalar-prefetch operands and, for each of the
`total` chunks, copies that chunk's rows of the device's block from HBM to its HBM output, started and waited
one at a time.

What is right: the tables hold one entry per chunk (MAX_CHUNKS, the most chunks SEQS sequences of TOKENS rows in
all can need), so every store of the metadata kernel lands inside them, at an index that is never negative: the
accumulator starts at 0 and only grows. Every copy of the second call is waited before the next starts, and the
chunks are rows of the device's own block, so no two copies meet.

What the interpreter does: completes in both DMA modes, its race detector reports nothing, and the output is the
input block row for row (each chunk copied once). semcheck runs the metadata call (specs/deciding/programs.md
PRG-169) and, under `hardware`, bounds its store indices by walking its loops trip by trip (PRG-228) on the
lengths it is run on (PRG-230), so the second call's verdicts stand there too.

`build_with` is the building block of the seeded misuse in
examples/programs/buggy/chunk_table_planned_table_per_sequence.py.
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
CHUNK = 8  # rows per chunk
LENGTHS = (3, 17, 9, 1)  # rows of each sequence (the same on every device)
SEQS, TOKENS = len(LENGTHS), sum(LENGTHS)
MAX_CHUNKS = -(-TOKENS // CHUNK) + SEQS - 1  # a sequence boundary inside a chunk costs one more
ROWS, LANES = SEQS * CHUNK + TOKENS, 128  # each device's block: every chunk's rows fit


def interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def _metadata_kernel(cu_ref, seq_ref, first_ref, total_ref):
    def sequence(s, count):
        start, end = cu_ref[s], cu_ref[s + 1]
        chunks = (end - start + CHUNK - 1) // CHUNK

        def chunk(j, carry):
            seq_ref[count + j] = s
            first_ref[count + j] = start + j * CHUNK
            return carry

        jax.lax.fori_loop(0, chunks, chunk, 0)
        return count + chunks

    total_ref[0] = jax.lax.fori_loop(0, SEQS, sequence, jnp.int32(0))


def metadata(cu, params, *, table=MAX_CHUNKS):
    """The metadata call: (each chunk's sequence, each chunk's first row, the number of chunks)."""
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(
        _metadata_kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(1,), out_specs=(smem, smem, smem)),
        out_shape=(jax.ShapeDtypeStruct((table,), jnp.int32), jax.ShapeDtypeStruct((table,), jnp.int32),
                   jax.ShapeDtypeStruct((1,), jnp.int32)),
        interpret=params,
    )(cu)


def _copy_kernel(seq_ref, first_ref, total_ref, x_hbm, zeros_hbm, o_hbm, sem):
    del seq_ref, zeros_hbm  # the output aliases the zeros it starts as

    def one(i, carry):
        rows = pl.ds(first_ref[i], CHUNK)
        copy = pltpu.make_async_copy(x_hbm.at[rows], o_hbm.at[rows], sem)
        copy.start()
        copy.wait()
        return carry

    jax.lax.fori_loop(0, total_ref[0], one, 0)


def copy_chunks(seq, first, total, x, params):
    """The second call: each listed chunk's rows of `x` copied to the output (rows no chunk lists are zeros)."""
    anyspace = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        _copy_kernel,
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=3, grid=(1,), in_specs=[anyspace, anyspace],
                                               out_specs=anyspace, scratch_shapes=[pltpu.SemaphoreType.DMA]),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={4: 0},
        interpret=params,
    )(seq, first, total, x, jnp.zeros_like(x))


def build_with(num_devices: int, params, *, table=MAX_CHUNKS):
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(cu, x):
        seq, first, total = metadata(cu, params, table=table)
        return copy_chunks(seq, first, total, x, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=P(AXIS), check_vma=False))
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(LENGTHS)]), jnp.int32)
    x = (jnp.arange(num_devices * ROWS * LANES, dtype=jnp.float32) % 251).reshape(num_devices * ROWS, LANES)
    return fn, (jax.device_put(cu, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(AXIS))))


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return build_with(num_devices, interpret_params(dma_mode, interpret))


def reference(cu, x, *, num_devices: int):
    """Each device's output: the rows of its block that some chunk covers, zeros elsewhere."""
    cu = np.asarray(cu)
    covered = np.zeros(ROWS, bool)
    for s in range(SEQS):
        for j in range(-(-(int(cu[s + 1]) - int(cu[s])) // CHUNK)):
            covered[int(cu[s]) + j * CHUNK:int(cu[s]) + (j + 1) * CHUNK] = True
    blocks = np.asarray(x).reshape(num_devices, ROWS, LANES)
    return (blocks * covered[None, :, None]).reshape(num_devices * ROWS, LANES)
