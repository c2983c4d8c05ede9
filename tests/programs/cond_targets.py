"""Programs with a `lax.cond` around kernel calls (PRG-126), built from the ring and pairwise kernels of
examples/programs/distinct_collective_ids_two_patterns.py. Branch 1 (the cond's true branch) runs ring
then pairwise on ids 0 and 1; branch 0 runs pairwise then ring, the ring on `late_ring_id`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "distinct_collective_ids_two_patterns.py"
_spec = importlib.util.spec_from_file_location("semcheck_cond_targets_patterns", _path)
tp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tp)


def _build(num_devices, interpret, predicate, flag, late_ring_id, flag_spec=P()):
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))

    def ring_then_pair(x):
        return tp.call(tp._pair_kernel, tp.call(tp._ring_kernel, x, 0, params), 1, params)

    def pair_then_ring(x):
        return tp.call(tp._ring_kernel, tp.call(tp._pair_kernel, x, 1, params), late_ring_id, params)

    def program(x, f):
        return jax.lax.cond(predicate(f), ring_then_pair, pair_then_ring, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(tp.AXIS), flag_spec), out_specs=P(tp.AXIS),
                               check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))), jax.device_put(flag, NamedSharding(mesh, flag_spec)))


@semcheck.target(devices=[4])
def taken_branch_correct(num_devices: int, *, interpret=None):
    """The build's flag takes the true branch (correct); the false branch shares id 0 (wrong, never run)."""
    return _build(num_devices, interpret, lambda f: f[0] != 0, jnp.asarray([1], jnp.int32), late_ring_id=1)


@semcheck.target(devices=[4])
def undecided_flag(num_devices: int, *, interpret=None):
    """The predicate is computed from a replicated input too large for the walk to evaluate: both branches
    are checked, and the false branch (branch 0) shares id 1 between the two patterns."""
    big = jnp.ones((8, 1024), jnp.float32)
    return _build(num_devices, interpret, lambda f: jnp.sum(f) > 0, big, late_ring_id=1)


@semcheck.target(devices=[4])
def undecided_flag_correct(num_devices: int, *, interpret=None):
    """As `undecided_flag`, both branches correct."""
    big = jnp.ones((8, 1024), jnp.float32)
    return _build(num_devices, interpret, lambda f: jnp.sum(f) > 0, big, late_ring_id=0)


@semcheck.target(devices=[4])
def per_device_flag(num_devices: int, *, interpret=None):
    """The predicate depends on the device (its shard of the flag): devices may run different calls."""
    flag = jnp.arange(num_devices, dtype=jnp.int32) % 2
    return _build(num_devices, interpret, lambda f: f[0] != 0, flag, late_ring_id=0, flag_spec=P(tp.AXIS))


@semcheck.target(devices=[4])
def per_device_big_flag(num_devices: int, *, interpret=None):
    """As `per_device_flag`, the flag too large for the walk to evaluate on each device (PRG-145): unknown."""
    flag = jnp.ones((num_devices * 8, 1024), jnp.int32)
    return _build(num_devices, interpret, lambda f: jnp.sum(f) > 0, flag, late_ring_id=0, flag_spec=P(tp.AXIS))


@semcheck.target(devices=[4])
def device_index_in_jit(num_devices: int, *, interpret=None):
    """The predicate is computed by a `jit` that reads `axis_index` from a replicated flag: odd devices take the
    true branch, even ones the false one, though the jit's operand is the same on every device."""
    def predicate(f):
        return jax.jit(lambda g: jax.lax.axis_index(tp.AXIS) % 2 + g[0] * 0 != 0)(f)
    return _build(num_devices, interpret, predicate, jnp.asarray([1], jnp.int32), late_ring_id=0)


@semcheck.target(devices=[4])
def shifted_flag_in_jit(num_devices: int, *, interpret=None):
    """The predicate is a replicated flag moved one device along an open chain by a `ppermute` inside a `jit`:
    device 0 receives zeros (false branch), the others the flag (true branch)."""
    def predicate(f):
        pairs = [(d, d + 1) for d in range(num_devices - 1)]
        return jax.jit(lambda g: jax.lax.ppermute(g, tp.AXIS, pairs)[0] != 0)(f)
    return _build(num_devices, interpret, predicate, jnp.asarray([1], jnp.int32), late_ring_id=0)


def _then_pair(num_devices, interpret, before):
    """`before(x)` (XLA operations, without kernel calls), then the pairwise kernel on every device."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))

    def program(x):
        return tp.call(tp._pair_kernel, before(x), 1, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(tp.AXIS), out_specs=P(tp.AXIS), check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))),)


def _psum_if(pred, x):
    return jax.lax.cond(pred, lambda v: v + jax.lax.psum(v[0, 0], tp.AXIS) * 0, lambda v: v, x)


@semcheck.target(devices=[4])
def psum_in_device_cond(num_devices: int, *, interpret=None):
    """A cond without kernel calls whose branch only device 0 takes holds a psum: device 0 waits there for devices
    that never join it (the interpreter hangs at the all-reduce), and the others wait in the pairwise kernel."""
    return _then_pair(num_devices, interpret, lambda x: _psum_if(jax.lax.axis_index(tp.AXIS) == 0, x))


@semcheck.target(devices=[4])
def psum_in_uniform_cond(num_devices: int, *, interpret=None):
    """As `psum_in_device_cond`, the cond on a value every device has alike: every device joins the psum."""
    return _then_pair(num_devices, interpret, lambda x: _psum_if(jax.lax.psum(x[0, 0], tp.AXIS) > 0, x))


@semcheck.target(devices=[4])
def psum_in_device_while(num_devices: int, *, interpret=None):
    """A while loop without kernel calls that device d runs d times, a psum in each iteration."""
    def before(x):
        def body(c):
            return c[0] + 1, c[1] + jax.lax.psum(c[1][0, 0], tp.AXIS) * 0
        return jax.lax.while_loop(lambda c: c[0] < jax.lax.axis_index(tp.AXIS), body, (0, x))[1]
    return _then_pair(num_devices, interpret, before)


@semcheck.target(devices=[4])
def psum_in_device_branch(num_devices: int, *, interpret=None):
    """Device 0 alone takes a branch with a kernel call and a psum (`lax.cond(axis_index == 0, ...)`)."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))

    def alone(x):
        return tp.call(tp._pair_kernel, x, 1, params) + jax.lax.psum(x[0, 0], tp.AXIS) * 0

    def program(x):
        return jax.lax.cond(jax.lax.axis_index(tp.AXIS) == 0, alone, lambda v: v, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(tp.AXIS), out_specs=P(tp.AXIS), check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))),)


@semcheck.target(devices=[4])
def flag_split_two_ways(num_devices: int, *, interpret=None):
    """One flag split over the axis by rows in a first shard_map and by columns in a second: row d of the flag is all
    d, so each device's column block starts with 0 and every device takes the true branch (pairwise) in the second.
    Device d's block is not its row there (that would send devices 1.. to the ring)."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,), axis_types=(jax.sharding.AxisType.Auto,))
    flag = jnp.repeat(jnp.arange(num_devices, dtype=jnp.int32)[:, None], num_devices, axis=1)

    def second(x, f):
        return jax.lax.cond(f[0, 0] == 0, lambda v: tp.call(tp._pair_kernel, v, 1, params),
                            lambda v: tp.call(tp._ring_kernel, v, 0, params), x)

    def program(x, f):
        rows = jax.shard_map(lambda g: g * 2, mesh=mesh, in_specs=P(tp.AXIS), out_specs=P(tp.AXIS), check_vma=False)(f)
        out = jax.shard_map(second, mesh=mesh, in_specs=(P(tp.AXIS), P(None, tp.AXIS)), out_specs=P(tp.AXIS),
                            check_vma=False)(x, f)
        return out, rows

    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return jax.jit(program), (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))), flag)


@semcheck.target(devices=[4])
def tiled_flag(num_devices: int, *, interpret=None):
    """A first shard_map returns the replicated flag `[0, 1, .., n-1]` split over the axis, so the whole is n
    copies of it and each device of the second shard_map gets the whole flag: `f[0]` is 0 on every device, and
    every device takes the false branch. The flag's block is not the whole's (device d's block is not `[d]`)."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))

    def program(x, f):
        return jax.lax.cond(f[0] != 0, lambda v: tp.call(tp._pair_kernel, v, 1, params),
                            lambda v: tp.call(tp._ring_kernel, v, 0, params), x)

    def outer(x, flag):
        tiled = jax.shard_map(lambda f: f, mesh=mesh, in_specs=P(), out_specs=P(tp.AXIS), check_vma=False)(flag)
        return jax.shard_map(program, mesh=mesh, in_specs=(P(tp.AXIS), P(tp.AXIS)), out_specs=P(tp.AXIS),
                             check_vma=False)(x, tiled)

    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return jax.jit(outer), (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))), jnp.arange(num_devices, dtype=jnp.int32))


@semcheck.target(devices=[4])
def loop_counter_cond(num_devices: int, *, interpret=None):
    """A fori_loop of 3 whose body runs the ring kernel in iteration 0 and the pairwise kernel after."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))

    def program(x):
        def body(i, x):
            return jax.lax.cond(i == 0, lambda x: tp.call(tp._ring_kernel, x, 0, params),
                                lambda x: tp.call(tp._pair_kernel, x, 1, params), x)

        return jax.lax.fori_loop(0, 3, body, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(tp.AXIS), out_specs=P(tp.AXIS), check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))),)


_tags_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "two_patterns_two_tags.py"
_tags_spec = importlib.util.spec_from_file_location("semcheck_cond_targets_tags", _tags_path)
tt = importlib.util.module_from_spec(_tags_spec)
_tags_spec.loader.exec_module(tt)


def _tagged(num_devices, interpret, late_ring_tag):
    """PRG-146: the ring and pairwise kernels with tags (jax picks their ids) under an undecided cond: branch 1
    runs ring ("ring") then pairwise ("pair"); branch 0 runs pairwise ("pair") then ring (`late_ring_tag`)."""
    params = tt.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tt.AXIS,))

    def ring_then_pair(x):
        return tt.call(tt._pair_kernel("pair"), tt.call(tt._ring_kernel("ring"), x, params), params)

    def pair_then_ring(x):
        return tt.call(tt._ring_kernel(late_ring_tag), tt.call(tt._pair_kernel("pair"), x, params), params)

    def program(x, f):
        return jax.lax.cond(jnp.sum(f) > 0, ring_then_pair, pair_then_ring, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(tt.AXIS), P()), out_specs=P(tt.AXIS),
                               check_vma=False))
    x = jnp.ones((num_devices * tt.ROWS, tt.LANES), jnp.float32)
    big = jnp.ones((8, 1024), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tt.AXIS))), jax.device_put(big, NamedSharding(mesh, P())))


@semcheck.target(devices=[4])
def undecided_tags(num_devices: int, *, interpret=None):
    """Two tags in both branches: two ids, both branches correct."""
    return _tagged(num_devices, interpret, late_ring_tag="ring")


@semcheck.target(devices=[4])
def undecided_one_tag_in_branch_0(num_devices: int, *, interpret=None):
    """Branch 0's ring shares the pairwise kernel's tag, so one id for two patterns (PRG-17) there."""
    return _tagged(num_devices, interpret, late_ring_tag="pair")


def _local_copy_kernel(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()


@semcheck.target(devices=[4])
def psum_over_one_axis_before_a_local_call(num_devices: int, *, interpret=None):
    """A 2 x (n/2) mesh: the cond's predicate sums the x coordinate over y (0 on x = 0, positive on x = 1), and its
    branch sums over x, whose groups pair a device of x = 0 with one of x = 1: only one of each pair joins (jax's
    interpreter hangs there). Then a local kernel every device runs, which does not communicate."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((2, num_devices // 2), ("x", "y"))
    local = pl.pallas_call(_local_copy_kernel, out_shape=jax.ShapeDtypeStruct((tp.ROWS, tp.LANES), jnp.float32),
                           in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                           scratch_shapes=[pltpu.SemaphoreType.DMA(())], interpret=params)

    def program(x):
        joins = jax.lax.psum(jax.lax.axis_index("x"), "y") > 0
        return local(jax.lax.cond(joins, lambda v: v + jax.lax.psum(v[0, 0], "x") * 0, lambda v: v, x))

    spec = P(("x", "y"))
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, spec)),)


@semcheck.target(devices=[4])
def psum_and_a_local_call_in_device_branch(num_devices: int, *, interpret=None):
    """Device 0 alone takes a branch with a local call (it does not communicate, so it is checked alone) and a psum
    that waits for devices that never join it."""
    params = tp.interpret_params("eager", interpret)
    mesh = jax.make_mesh((num_devices,), (tp.AXIS,))
    local = pl.pallas_call(_local_copy_kernel, out_shape=jax.ShapeDtypeStruct((tp.ROWS, tp.LANES), jnp.float32),
                           in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                           scratch_shapes=[pltpu.SemaphoreType.DMA(())], interpret=params)

    def program(x):
        return jax.lax.cond(jax.lax.axis_index(tp.AXIS) == 0,
                            lambda v: local(v) + jax.lax.psum(v[0, 0], tp.AXIS) * 0, lambda v: v, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(tp.AXIS), out_specs=P(tp.AXIS), check_vma=False))
    x = jnp.ones((num_devices * tp.ROWS, tp.LANES), jnp.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(tp.AXIS))),)
