"""jax's ragged all-to-all kernel (pallas/ops/tpu/ragged_all_to_all.py upstream), ported (clean).

Every device's input is a concatenation of G = N * GPD groups of rows of
different lengths; group g of every device goes to device g // GPD. The sizes
are data: `sizes[d, g]` rows of group g on device d, read from SMEM. The
kernel runs a grid of G steps; at step i device `me` handles group
`g = (i + me) mod G` (so the copies of one step go to different devices):

1. it builds one remote copy of `pl.ds(in_offset, size)` rows of its input to
   `pl.ds(out_offset, size)` rows of the target's output (`size` read from
   the table: a DMA whose byte count is data), and starts it if `size > 0`;
   every copy signals the one send semaphore and, on the target, the one
   receive semaphore, by its byte count;
2. at the last step it waits on the send semaphore for all the rows it sent
   and on the receive semaphore for all the rows it receives, through "dummy"
   descriptors `pl.ds(0, total)` whose only use is their byte count.

The output offsets lay the groups a device receives side by side (group
order first, then source order), so no two copies write the same rows.
There is no barrier: as upstream, the output is an aliased operand that
exists before the kernel starts.

The default table (`sizes=None`) is `default_sizes`; `build(sizes=...)`
takes any N x G table of entries 0..CAP. semcheck follows the table's values
on each device (ACC-4, ACC-7); tests/generated_inputs/data_sizes.py
draws tables with hypothesis. Seeded bugs: buggy/deadlock_ragged_offsets_receive_count_wrong_row.py
(the receive total of another device) and buggy/race_ragged_offsets_size_off_by_one.py
(one row too many per copy).
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
GPD = 2  # groups per destination device
CAP = 3  # rows per group at most
LANES = 128


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def default_sizes(num_devices: int) -> np.ndarray:
    """sizes[d, g] = (d^2 + 3 g) mod (CAP + 1): empty, full and partial groups, and devices that
    receive different totals."""
    d, g = np.indices((num_devices, num_devices * GPD))
    return ((d * d + 3 * g) % (CAP + 1)).astype(np.int32)


def offsets(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(input offsets, output offsets), both N x G: where each group starts in its source's input
    and in its destination's output."""
    n, groups = sizes.shape
    in_off = np.zeros_like(sizes)
    in_off[:, 1:] = np.cumsum(sizes, axis=1)[:, :-1]
    out_off = np.zeros_like(sizes)
    for t in range(n):
        row = 0
        for k in range(GPD):
            for s in range(n):
                out_off[s, t * GPD + k] = row
                row += sizes[s, t * GPD + k]
    return in_off, out_off


def receive_totals(sizes: np.ndarray) -> np.ndarray:
    """Rows device t receives: the sizes of its groups from every source."""
    n = sizes.shape[0]
    return sizes.reshape(n, n, GPD).sum(axis=(0, 2)).astype(np.int32)


def _kernel(x_ref, in_off_ref, size_ref, out_off_ref, sent_ref, recv_ref, _aliased, o_ref, send_sem,
            recv_sem, *, n):
    me = lax.axis_index(AXIS)
    groups = n * GPD
    step = pl.program_id(0)
    g = lax.rem(step + me, groups)
    size = size_ref[g]
    copy = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(in_off_ref[g], size)], o_ref.at[pl.ds(out_off_ref[g], size)],
        send_sem, recv_sem, device_id={AXIS: g // GPD})

    @pl.when(size > 0)
    def _start():
        copy.start()

    @pl.when(step == groups - 1)
    def _drain():
        # descriptors used for their byte count only: all rows sent, all rows received
        sent = sent_ref[0]
        pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, sent)], o_ref.at[pl.ds(0, sent)], send_sem, recv_sem,
            device_id={AXIS: g // GPD}).wait_send()
        received = recv_ref[0]
        pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, received)], o_ref.at[pl.ds(0, received)], send_sem, recv_sem,
            device_id={AXIS: g // GPD}).wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, sizes=None, kernel=None,
          row_of_receive_total=None, spare_rows=0):
    """The all-to-all on every device of a 1-D mesh, on table `sizes` (N x G, entries 0..CAP).

    `kernel`, `row_of_receive_total` and `spare_rows` are for the seeded variants in buggy/:
    another kernel body, which device's receive total device d is handed (default: its own), and
    rows past the end of input and output (so that a copy one row too long stays in bounds).
    """
    n = num_devices
    groups = n * GPD
    mesh = jax.make_mesh((n,), (AXIS,))
    table = default_sizes(n) if sizes is None else np.asarray(sizes, dtype=np.int32).reshape(n, groups)
    if table.min() < 0 or table.max() > CAP:
        raise ValueError(f"sizes must lie in 0..{CAP}, got {table.tolist()}")
    in_off, out_off = offsets(table)
    totals = receive_totals(table)
    rows_in, rows_out = groups * CAP + spare_rows, n * GPD * CAP + spare_rows
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    call = pl.pallas_call(
        functools.partial(kernel or _kernel, n=n),
        out_shape=jax.ShapeDtypeStruct((rows_out, LANES), jnp.float32),
        grid=(groups,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY), smem, smem, smem, smem, smem,
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        input_output_aliases={6: 0},
        interpret=_interpret_params(dma_mode, interpret),
    )
    recv_row = np.arange(n) if row_of_receive_total is None else np.asarray(row_of_receive_total)

    def local(x, in_off, sizes, out_off, totals, recv_row):
        me = lax.axis_index(AXIS)
        out = jnp.zeros((rows_out, LANES), jnp.float32)
        return call(x[0], in_off[me], sizes[me], out_off[me], sizes[me].sum(keepdims=True),
                    totals[recv_row[me]][None], out)[None]

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(AXIS), P(), P(), P(), P(), P()),
                               out_specs=P(AXIS), check_vma=False))
    x = jnp.arange(n * rows_in * LANES, dtype=jnp.float32).reshape(n, rows_in, LANES)
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    return fn, (x, in_off, table, out_off, totals, recv_row.astype(np.int32))


def reference(x, in_off, sizes, out_off, totals, recv_row, *, num_devices: int):
    """What each device's output holds (numpy); rows nobody wrote are 0."""
    n = num_devices
    sizes = np.asarray(sizes).reshape(n, n * GPD)
    in_off, out_off = offsets(sizes)
    out = np.zeros((n, n * GPD * CAP, LANES), np.float32)
    for s in range(n):
        for g in range(n * GPD):
            k = sizes[s, g]
            out[g // GPD, out_off[s, g]:out_off[s, g] + k] = x[s, in_off[s, g]:in_off[s, g] + k]
    return out
