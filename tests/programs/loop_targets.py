"""Loops longer than the walk unrolls (PRG-130): the shift kernel of
examples/programs/repeated_shift_double_barrier.py called 100 times by a fori_loop, with the double
barrier and with a single one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import semcheck

_path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "repeated_shift_double_barrier.py"
_spec = importlib.util.spec_from_file_location("semcheck_loop_targets_shift", _path)
_shift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shift)


@semcheck.target(devices=[4])
def double_barrier_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=100)


@semcheck.target(devices=[4])
def single_barrier_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=100, double_barrier=False)


def _load(name: str, rel: str):
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / rel
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_copy = _load("semcheck_loop_targets_async_copy", "async_copy.py")
_no_start = _load("semcheck_loop_targets_no_start", "buggy/async_copy_done_without_start.py")


def _copies(num_devices: int, body, after=None, *, dma_mode: str = "eager", interpret=None, trips: int = 100):
    """A fori_loop of `trips` iterations of `body(x, params)` over the local start/done kernels, then `after`."""
    import jax
    from jax.sharding import PartitionSpec as P

    params = _copy.interpret_params(dma_mode, interpret)

    def program(x):
        x = jax.lax.fori_loop(0, trips, lambda _, v: body(v, params), x)
        return after(x, params) if after is not None else x

    mesh, fn = _copy.sharded(program, num_devices, P(_copy.AXIS))
    return fn, (_copy.example_input(mesh, num_devices),)


def _round(x, params):
    x, fut = _copy.copy_start(x, params)
    return _copy.copy_done(x, fut, params)


def _round_no_start(x, params):
    x, fut = _no_start.fake_start(x, params)  # BUG: nothing is copied, the done waits forever
    return _copy.copy_done(x, fut, params)


def _done_twice(x, params):
    x, fut = _copy.copy_start(x, params)
    y = _copy.copy_done(x, fut, params)
    return _copy.copy_done(y, fut, params)  # BUG: the copy's bytes are taken by the first done


@semcheck.target(devices=[2])
def copies_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """Correct: 100 rounds of start and done."""
    return _copies(num_devices, _round, dma_mode=dma_mode, interpret=interpret)


@semcheck.target(devices=[2])
def done_without_start_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """Deadlocks in the loop's first iteration: decided for the loop (PRG-143)."""
    return _copies(num_devices, _round_no_start, dma_mode=dma_mode, interpret=interpret)


@semcheck.target(devices=[2])
def done_twice_after_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """Deadlocks after the loop, in a call linked to its last iteration: a run the window shows only with the
    program ending after its third iteration, so not decided for the loop (PRG-143)."""
    return _copies(num_devices, _round, _done_twice, dma_mode=dma_mode, interpret=interpret)


@semcheck.target(devices=[4])
def single_barrier_8(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """single_barrier_100 with a loop the walk unrolls (PRG-143's premise is checked against it)."""
    return _shift.build(num_devices, dma_mode=dma_mode, interpret=interpret, calls=8, double_barrier=False)


@semcheck.target(devices=[2])
def done_twice_after_8(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _copies(num_devices, _round, _done_twice, dma_mode=dma_mode, interpret=interpret, trips=8)


def _two_loops(num_devices: int, double_barrier: bool, *, dma_mode: str = "eager", interpret=None):
    """The shift kernel called 100 times by one fori_loop, then 100 times by another (PRG-144)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    params = _shift.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (_shift.AXIS,))

    def shift(_, v):
        return _shift.shift(v, double_barrier=double_barrier, params=params)

    def program(x):
        y = jax.lax.fori_loop(0, 100, shift, x)
        return jax.lax.fori_loop(0, 100, shift, y * 2)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(_shift.AXIS), out_specs=P(_shift.AXIS),
                               check_vma=False))
    x = jax.numpy.ones((num_devices * _shift.ROWS, _shift.LANES), jax.numpy.float32)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(_shift.AXIS))),)


@semcheck.target(devices=[4])
def two_loops_double_barrier(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _two_loops(num_devices, True, dma_mode=dma_mode, interpret=interpret)


@semcheck.target(devices=[5])
def two_loops_single_barrier(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _two_loops(num_devices, False, dma_mode=dma_mode, interpret=interpret)


@semcheck.target(devices=[2])
def copies_then_no_start_100(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """100 correct rounds, then a second loop of 100 rounds whose done waits for a copy never started: the
    deadlock is in the second loop, after the first one's every iteration, which no cut shows (PRG-144)."""
    import jax

    def after(x, params):
        return jax.lax.fori_loop(0, 100, lambda _, v: _round_no_start(v, params), x)

    return _copies(num_devices, _round, after, dma_mode=dma_mode, interpret=interpret)
