"""Local kernels (no communication, no semaphore in or out) under a `cond` or `while_loop` inside a
`shard_map` (PRG-163): checked call by call, but in the interpreter a call that only some devices run waits at
its clean-up barrier for the others (PRG-145). `lone_ring_on_device_0` is the communicating counterpart."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "buggy" / "per_device_local_call.py"
_spec = importlib.util.spec_from_file_location("semcheck_local_cond_targets", _path)
lc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lc)
AXIS = lc.AXIS


def _build(num_devices, interpret, program, flag, flag_spec=P()):
    mesh = jax.make_mesh((num_devices,), (AXIS,))
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), flag_spec), out_specs=P(AXIS),
                               check_vma=False))
    x = jnp.ones((num_devices * lc.ROWS, lc.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(AXIS))), jax.device_put(flag, NamedSharding(mesh, flag_spec)))


def _params(interpret):
    return lc.pltpu.InterpretParams() if interpret in (None, True) else interpret


@semcheck.target(devices=[4])
def uniform_flag(num_devices: int, *, interpret=None):
    """A replicated flag (the same on every device) picks the branch that runs the kernel: every device runs
    it (correct in every mode)."""
    params = _params(interpret)

    def program(x, f):
        return jax.lax.cond(f[0] != 0, lambda v: lc.double(v, params), lambda v: v, x)

    return _build(num_devices, interpret, program, jnp.asarray([1], jnp.int32))


@semcheck.target(devices=[4])
def devices_in_mask(num_devices: int, *, mask: int = 1, interpret=None):
    """Device d runs the kernel when bit d of `mask` is set."""
    params = _params(interpret)

    def program(x, f):
        bit = jax.lax.shift_right_logical(jnp.int32(mask), jax.lax.axis_index(AXIS).astype(jnp.int32)) & 1
        return jax.lax.cond(bit != 0, lambda v: lc.double(v, params), lambda v: v, x)

    return _build(num_devices, interpret, program, jnp.asarray([1], jnp.int32))


@semcheck.target(devices=[4])
def per_device_trip_count(num_devices: int, *, interpret=None):
    """Device d runs the kernel d times, in a while_loop the walk follows on each device (PRG-197)."""
    params = _params(interpret)

    def program(x, f):
        me = jax.lax.axis_index(AXIS)
        return jax.lax.while_loop(lambda c: c[0] < me, lambda c: (c[0] + 1, lc.double(c[1], params)), (0, x))[1]

    return _build(num_devices, interpret, program, jnp.asarray([1], jnp.int32))


_patterns_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "distinct_collective_ids_two_patterns.py"
_patterns_spec = importlib.util.spec_from_file_location("semcheck_local_cond_targets_patterns", _patterns_path)
tp = importlib.util.module_from_spec(_patterns_spec)
_patterns_spec.loader.exec_module(tp)


@semcheck.target(devices=[4])
def lone_ring_on_device_0(num_devices: int, *, interpret=None):
    """Not local: the program's one call, the ring kernel, run by device 0 alone. It signals its left
    neighbour and waits for its right one's signal, which no device sends: a deadlock on a TPU too."""
    params = tp.interpret_params("eager", interpret)

    def program(x, f):
        return jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: tp.call(tp._ring_kernel, v, 0, params),
                            lambda v: v, x)

    return _build(num_devices, interpret, program, jnp.asarray([1], jnp.int32))


def _scaled(x, params, factor, collective_id=None):
    """A local kernel multiplying its block by `factor`; `collective_id` only decides whether the interpreter
    waits at its start barrier (it does when the call has none)."""
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * factor

    extra = {} if collective_id is None else {"compiler_params": lc.pltpu.CompilerParams(collective_id=collective_id)}
    return lc.pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                             in_specs=[lc.pl.BlockSpec(memory_space=lc.pltpu.VMEM)],
                             out_specs=lc.pl.BlockSpec(memory_space=lc.pltpu.VMEM), interpret=params, **extra)(x)


@semcheck.target(devices=[4])
def other_kernel_on_other_devices(num_devices: int, *, interpret=None):
    """Device 0 doubles its block, the others triple theirs: every device runs one call, neither with a
    collective id, so the interpreter's barriers of the two calls meet (PRG-179 claims no hang)."""
    params = _params(interpret)

    def program(x, f):
        return jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: _scaled(v, params, 2),
                            lambda v: _scaled(v, params, 3), x)

    return _build(num_devices, interpret, program, jnp.asarray([1], jnp.int32))


@semcheck.target(devices=[4])
def start_barrier_on_device_0_only(num_devices: int, *, interpret=None):
    """As `other_kernel_on_other_devices`, but the others' call has a collective id of its own: device 0 waits at
    a start barrier no other device reaches (PRG-179: no run completes)."""
    params = _params(interpret)

    def program(x, f):
        return jax.lax.cond(jax.lax.axis_index(AXIS) == 0, lambda v: _scaled(v, params, 2),
                            lambda v: _scaled(v, params, 3, collective_id=7), x)

    return _build(num_devices, interpret, program, jnp.asarray([1], jnp.int32))
