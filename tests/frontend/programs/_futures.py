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


def local_done(x, future, *, interpret=None, rows=None, block=False):
    """Wait for the copy `future` stands for (of `rows` rows, when given); return its destination.

    With `block`, the destination comes in (and goes out) as a VMEM block the call copies in at its
    entry, before the kernel's wait.
    """
    out, sem = future
    dst = pl.BlockSpec(out.shape, lambda: (0,) * len(out.shape)) if block else ANY

    def done_kernel(x_ref, o_ref, sem, o_alias):
        del o_alias
        pltpu.make_async_copy(_rows(x_ref, rows), o_ref, sem).wait()

    return pl.pallas_call(
        done_kernel,
        out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
        in_specs=[ANY, dst, SEM],
        out_specs=dst,
        input_output_aliases={1: 0},
        interpret=interpret,
        name="copy_done",
    )(x, out, sem)


def remote_start(x, *, interpret=None, handshake=True, device_barrier=False, collective_id=0, left=False, tag=None):
    """Start a copy of x to the right neighbour after a barrier handshake; return (x, (out, send, recv)).

    Without `handshake` the call has no collective id, and jax's device barrier orders the copy
    after the neighbour's entry, unless it is skipped (`device_barrier=False`: then the copy
    starts at once, whether or not the neighbour has entered the call). With `left` the copy goes to
    the left neighbour instead (and the handshake to the right one). With `tag` the handshake's barrier
    semaphore carries that tag (`get_barrier_semaphore(tag)`: jax picks the collective id).
    """

    def start_kernel(x_ref, x_alias, o_ref, send_sem, recv_sem):
        del x_alias
        n = jax.lax.axis_size(AXIS)
        me = jax.lax.axis_index(AXIS)
        src = jax.lax.rem(me + n - 1, n)
        dst = jax.lax.rem(me + 1, n)
        if left:
            src, dst = dst, src
        if handshake:
            barrier = pltpu.get_barrier_semaphore() if tag is None else pltpu.get_barrier_semaphore(tag)
            pl.semaphore_signal(barrier, device_id=(src,))
            pl.semaphore_wait(barrier, 1)
        pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(dst,)).start()

    x, out, send_sem, recv_sem = pl.pallas_call(
        start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pl.ANY(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY],
        out_specs=(ANY, ANY, SEM, SEM),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=collective_id, has_side_effects=True) if handshake else
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


def bidi_start(x, *, interpret=None):
    """Send the first half of x to the right neighbour and the second half to the left one, after a
    handshake with both; return (x, (out, (left_send, left_recv), (right_send, right_recv)))."""
    half = x.shape[0] // 2

    def start_kernel(x_ref, x_alias, o_ref, left_sems, right_sems):
        del x_alias
        n = jax.lax.axis_size(AXIS)
        me = jax.lax.axis_index(AXIS)
        left = jax.lax.rem(me + n - 1, n)
        right = jax.lax.rem(me + 1, n)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, device_id=(left,))
        pl.semaphore_signal(barrier, device_id=(right,))
        pl.semaphore_wait(barrier, 2)
        pltpu.make_async_remote_copy(x_ref.at[pl.ds(0, half)], o_ref.at[pl.ds(0, half)], right_sems[0],
                                     right_sems[1], device_id=(right,)).start()
        pltpu.make_async_remote_copy(x_ref.at[pl.ds(half, half)], o_ref.at[pl.ds(half, half)], left_sems[0],
                                     left_sems[1], device_id=(left,)).start()

    pair = (pltpu.SemaphoreType.DMA(()),) * 2
    x, out, left_sems, right_sems = pl.pallas_call(
        start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pl.ANY(x.shape, x.dtype), pair, pair),
        in_specs=[ANY],
        out_specs=(ANY, ANY, (SEM, SEM), (SEM, SEM)),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=interpret,
        name="bidi_start",
    )(x)
    return x, (out, left_sems, right_sems)


def bidi_send_done(x, future, *, interpret=None):
    """Wait until both copies have read their halves of x."""
    _, (left_send, _), (right_send, _) = future
    half = x.shape[0] // 2

    def send_done_kernel(x_ref, left_send, right_send, x_alias):
        del x_alias
        pltpu.make_async_copy(x_ref.at[pl.ds(half, half)], x_ref.at[pl.ds(half, half)], left_send).wait()
        pltpu.make_async_copy(x_ref.at[pl.ds(0, half)], x_ref.at[pl.ds(0, half)], right_send).wait()

    return pl.pallas_call(
        send_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY, SEM, SEM],
        out_specs=ANY,
        input_output_aliases={0: 0},
        interpret=interpret,
        name="bidi_send_done",
    )(x, left_send, right_send)


def bidi_recv_done(x, future, *, interpret=None):
    """Wait until both neighbours' halves have landed; return them."""
    out, (_, left_recv), (_, right_recv) = future
    half = x.shape[0] // 2

    def recv_done_kernel(o_ref, x_ref, left_recv, right_recv, o_alias):
        del o_alias
        pltpu.make_async_copy(x_ref.at[pl.ds(half, half)], o_ref.at[pl.ds(half, half)], left_recv).wait()
        pltpu.make_async_copy(x_ref.at[pl.ds(0, half)], o_ref.at[pl.ds(0, half)], right_recv).wait()

    return pl.pallas_call(
        recv_done_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY, ANY, SEM, SEM],
        out_specs=ANY,
        input_output_aliases={0: 0},
        interpret=interpret,
        name="bidi_recv_done",
    )(out, x, left_recv, right_recv)
