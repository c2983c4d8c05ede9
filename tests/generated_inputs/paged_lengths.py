"""A paged copy whose per-sequence lengths and page table come through scalar prefetch (issue 17, 2).

Each grid step `s` is one sequence: it starts one DMA per block of the
sequence, `pl.cdiv(length, BLOCK)` of them, from the pages the page table
names into VMEM, all on one DMA semaphore, then waits for them one block at
a time (the descriptor of block 0: a wait needs only the size). Lengths and
the page table are scalar-prefetch operands, so the number of copies and of
waits depends on the data: semcheck follows it on concrete inputs (spec
ACC-4), and the targets below draw those inputs from a hypothesis strategy.

* `paged_lengths` (clean): as many waits as copies.
* `paged_lengths_boundary_bug` (seeded bug): the waits are counted as
  `length // BLOCK + 1` ("the full blocks and the partial tail"), one too
  many when a length is an exact multiple of BLOCK: the extra wait never
  returns (deadlock-free violated in every DMA mode). Any other length is
  fine, so a fixed example such as `lengths=[20, 37]` proves it; semcheck
  finds the bug from the strategy and shrinks it to `[16]`.

Used by tests/test_generated_inputs.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

AXIS = "x"
BLOCK = 16  # rows per page
LANES = 128
MAX_LEN = 64
MAX_BLOCKS = MAX_LEN // BLOCK

LENGTHS = st.lists(st.integers(1, MAX_LEN), min_size=1, max_size=3)
"""Per-sequence lengths: one to three sequences of 1..64 rows."""


def page_table(lengths) -> np.ndarray:
    """Pages allocated in order: sequence s, block b -> its page (unused entries 0)."""
    table = np.zeros((len(lengths), MAX_BLOCKS), dtype=np.int32)
    page = 0
    for s, length in enumerate(lengths):
        for b in range(-(-length // BLOCK)):
            table[s, b] = page
            page += 1
    return table


def _kernel(lengths_ref, pages_ref, x_hbm, o_ref, buf, sem, *, boundary_bug: bool):
    s = pl.program_id(0)
    length = lengths_ref[s]

    def copy(b):
        return pltpu.make_async_copy(x_hbm.at[pages_ref[s, b]], buf.at[b], sem)

    def start(b, carry):
        copy(b).start()
        return carry

    jax.lax.fori_loop(0, pl.cdiv(length, BLOCK), start, 0)
    if boundary_bug:
        waits = length // BLOCK + 1  # BUG: counts a partial tail block even when there is none
    else:
        waits = pl.cdiv(length, BLOCK)

    def wait(b, carry):
        copy(0).wait()
        return carry

    jax.lax.fori_loop(0, waits, wait, 0)
    o_ref[...] = buf[0]


def build(num_devices: int, *, lengths=(20, 37), boundary_bug: bool = False, dma_mode: str = "eager",
          interpret=None):
    """The kernel on every device, on concrete `lengths` (the page table follows from them)."""
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    lengths = np.asarray(lengths, dtype=np.int32)
    pages = page_table(lengths)
    num_pages = max(1, int(pages.max()) + 1)
    params = interpret if interpret not in (None, True) else pltpu.InterpretParams(dma_execution_mode=dma_mode)
    call = pl.pallas_call(
        functools.partial(_kernel, boundary_bug=boundary_bug),
        out_shape=jax.ShapeDtypeStruct((len(lengths) * BLOCK, LANES), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(len(lengths),),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((BLOCK, LANES), lambda s, *_: (s, 0)),
            scratch_shapes=[pltpu.VMEM((MAX_BLOCKS, BLOCK, LANES), jnp.float32), pltpu.SemaphoreType.DMA(())],
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(), P(), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    x = jax.ShapeDtypeStruct((num_devices * num_pages, BLOCK, LANES), jnp.float32,
                             sharding=NamedSharding(mesh, P(AXIS)))
    return fn, (lengths, pages, x)


@semcheck.target(devices=(2,), inputs=LENGTHS)
def paged_lengths(num_devices: int, lengths: list[int]):
    return build(num_devices, lengths=lengths)


@semcheck.target(devices=(2,), inputs=LENGTHS)
def paged_lengths_boundary_bug(num_devices: int, lengths: list[int]):
    return build(num_devices, lengths=lengths, boundary_bug=True)


@semcheck.target(devices=(2,))
def fixed_lengths_boundary_bug(num_devices: int):
    """The buggy kernel on one fixed example whose lengths are no multiple of BLOCK: proved."""
    return build(num_devices, lengths=(20, 37), boundary_bug=True)
