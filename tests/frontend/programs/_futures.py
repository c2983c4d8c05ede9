"""Start/done kernels that hand a DMA's semaphore from one pallas_call to the next.

The idiom of jax's `tests/pallas/tpu_pallas_async_test.py` (written afresh here): a *start*
kernel starts a copy and returns its destination and its DMA semaphore as outputs
(`out_shape=(..., pltpu.SemaphoreType.DMA(()))`, out_spec memory space SEMAPHORE, the source
aliased through `input_output_aliases`); a later *done* kernel takes both and waits.
Each builder takes `interpret` (None: compiled, as on a TPU; or `InterpretParams`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

AXIS = "x"
ROWS, LANES = 8, 128
ANY = pl.BlockSpec(memory_space=pl.ANY)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def _rows(ref, rows):
    return ref if rows is None else ref.at[pl.ds(0, rows)]


def local_start(x, *, interpret=None, rows=None):
    """Start a local copy x -> out (of the first `rows` rows only, when given); return (x, (out, sem))."""
    shape = x.shape if rows is None else (rows, *x.shape[1:])

    def start_kernel(x_ref, x_alias, o_ref, sem):
        del x_alias
        pltpu.make_async_copy(_rows(x_ref, rows), o_ref, sem).start()

    x, out, sem = pl.pallas_call(
        start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pl.ANY(shape, x.dtype),
                   pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY],
        out_specs=(ANY, ANY, SEM),
        input_output_aliases={0: 0},
        interpret=interpret,
        name="copy_start",
    )(x)
    return x, (out, sem)


def local_done(x, future, *, interpret=None, rows=None):
    """Wait for the copy `future` stands for (of `rows` rows, when given); return its destination."""
    out, sem = future

    def done_kernel(x_ref, o_ref, sem, o_alias):
        del o_alias
        pltpu.make_async_copy(_rows(x_ref, rows), o_ref, sem).wait()

    return pl.pallas_call(
        done_kernel,
        out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
        in_specs=[ANY, ANY, SEM],
        out_specs=ANY,
        input_output_aliases={1: 0},
        interpret=interpret,
        name="copy_done",
    )(x, out, sem)


def remote_start(x, *, interpret=None, handshake=True, device_barrier=False):
    """Start a copy of x to the right neighbour after a barrier handshake; return (x, (out, send, recv)).

    Without `handshake` the call has no collective id, and jax's device barrier orders the copy
    after the neighbour's entry, unless it is skipped (`device_barrier=False`: then the copy
    starts at once, whether or not the neighbour has entered the call).
    """

    def start_kernel(x_ref, x_alias, o_ref, send_sem, recv_sem):
        del x_alias
        n = jax.lax.axis_size(AXIS)
        me = jax.lax.axis_index(AXIS)
        left = jax.lax.rem(me + n - 1, n)
        right = jax.lax.rem(me + 1, n)
        if handshake:
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, device_id=(left,))
            pl.semaphore_wait(barrier, 1)
        pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,)).start()

    x, out, send_sem, recv_sem = pl.pallas_call(
        start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pl.ANY(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY],
        out_specs=(ANY, ANY, SEM, SEM),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True) if handshake else
        pltpu.CompilerParams(has_side_effects=True, skip_device_barrier=not device_barrier),
        interpret=interpret,
        name="remote_start",
    )(x)
    return x, (out, send_sem, recv_sem)


def send_done(x, future, *, interpret=None):
    """Wait until the copy `future` stands for has read its source."""
    _, send_sem, _ = future

    def send_done_kernel(x_ref, send_sem, x_alias):
        del x_alias
        pltpu.make_async_copy(x_ref, x_ref, send_sem).wait()

    return pl.pallas_call(
        send_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY, SEM],
        out_specs=ANY,
        input_output_aliases={0: 0},
        interpret=interpret,
        name="send_done",
    )(x, send_sem)


def recv_done(x, future, *, interpret=None):
    """Wait until the copy into this device (from the left neighbour) has landed; return it."""
    out, _, recv_sem = future

    def recv_done_kernel(x_ref, o_ref, recv_sem, o_alias):
        del o_alias
        pltpu.make_async_copy(x_ref, o_ref, recv_sem).wait()

    return pl.pallas_call(
        recv_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY, ANY, SEM],
        out_specs=ANY,
        input_output_aliases={1: 0},
        interpret=interpret,
        name="recv_done",
    )(x, out, recv_sem)


def sharded(fn, num_devices: int, out_specs=P(AXIS)):
    """`fn` under a jit of a shard_map over a 1-d mesh, and an input of ROWS x LANES per device."""
    mesh = jax.make_mesh((num_devices,), (AXIS,), axis_types=(jax.sharding.AxisType.Explicit,))
    spec = P(AXIS)
    x = jax.ShapeDtypeStruct((num_devices * ROWS, LANES), jnp.float32, sharding=jax.NamedSharding(mesh, spec))
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=out_specs, check_vma=False)), (x,)
