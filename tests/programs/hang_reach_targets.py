"""Programs whose devices run different calls and hang in the interpreter (PRG-211 .. PRG-213): what the calls that
do run may reach before the hang. The kernels are those of examples/programs/per_device_cond.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "per_device_cond.py"
_spec = importlib.util.spec_from_file_location("semcheck_hang_reach_targets", _path)
pc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pc)
tp, AXIS = pc.tp, pc.AXIS


def _rush_kernel(x_ref, o_ref, landing, send_sem, recv_sem):
    """Copies the block to the partner `d ^ 1` before the handshake on the barrier semaphore, then waits for both
    halves."""
    partner = jax.lax.bitwise_xor(jax.lax.axis_index(AXIS), 1)
    copy = pltpu.make_async_remote_copy(x_ref, landing, send_sem, recv_sem, device_id=(partner,))
    copy.start()
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(partner,))
    pl.semaphore_wait(barrier, 1)
    copy.wait_send()
    copy.wait_recv()
    o_ref[...] = landing[...]


def _build(num_devices, interpret, program):
    params = pc.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    fn = jax.jit(jax.shard_map(lambda x: program(x, params), mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False))
    return fn, (pc._input(mesh, num_devices),)


@semcheck.target(devices=[2])
def copy_before_handshake(num_devices: int, *, interpret=None):
    """Device 0 doubles its block (a local kernel, no collective id: it waits at the start barrier), then every
    device runs the rushing exchange (collective id 1). Device 1 starts that exchange while device 0 waits at the
    doubling kernel's start barrier, and its copy lands on device 0 in memory the doubling kernel allocated."""

    def program(x, params):
        y = jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: pc.double(v, params), lambda v: v, x)
        return tp.call(_rush_kernel, y, 1, params)

    return _build(num_devices, interpret, program)


@semcheck.target(devices=[2])
def pair_then_double_on_odd_devices(num_devices: int, *, interpret=None):
    """The odd devices run the pairwise kernel (collective id 1) and then double their block; the even devices run
    nothing. The odd devices signal their partners' barrier semaphore and wait for signals that never come, so the
    doubling kernel never runs."""

    def program(x, params):
        odd = jax.lax.rem(jax.lax.axis_index(AXIS), 2) == 1
        return jax.lax.cond(odd, lambda v: pc.double(tp.call(tp._pair_kernel, v, 1, params), params),
                            lambda v: v, x)

    return _build(num_devices, interpret, program)


def _local_copy_kernel(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()


def _local_copy(x, params):
    return pl.pallas_call(_local_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SemaphoreType.DMA], interpret=params)(x)


@semcheck.target(devices=[2])
def semaphore_kernel_waits_then_pair(num_devices: int, *, interpret=None):
    """Device 0 copies its block locally (a kernel with a DMA semaphore and no collective id: it allocates the
    semaphore, then waits at the start barrier), then every device runs the pairwise kernel. Device 1 runs the
    pairwise kernel in the manager where device 0 allocated that semaphore."""

    def program(x, params):
        y = jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: _local_copy(v, params), lambda v: v, x)
        return tp.call(tp._pair_kernel, y, 1, params)

    return _build(num_devices, interpret, program)


def _unbalanced_kernel(x_ref, o_ref, sem):
    """Signals its own scratch semaphore and never waits on it: it exits with a count of 1 (exit-balance)."""
    pl.semaphore_signal(sem, 1)
    o_ref[...] = x_ref[...] + 1


def _unbalanced(x, params):
    return pl.pallas_call(_unbalanced_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=params)(x)


@semcheck.target(devices=[2])
def unbalanced_kernel_per_device_trips(num_devices: int, *, interpret=None):
    """Device d runs the unbalanced kernel d + 1 times (a while loop on its index): every device runs the first
    call, which exits with its semaphore at 1, and device 1's second call waits at its start barrier forever."""

    def program(x, params):
        me = jax.lax.axis_index(AXIS)
        return jax.lax.while_loop(lambda c: c[0] <= me, lambda c: (c[0] + 1, _unbalanced(c[1], params)), (0, x))[1]

    return _build(num_devices, interpret, program)
