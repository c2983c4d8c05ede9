"""Programs whose planning call raises in jax's interpreter (specs/deciding/programs.md PRG-208).

Built on examples/programs/buggy/plan_copy_past_its_table.py: a plan whose write-back copy reads past its SMEM
table, then a call whose step count is the plan's first entry.
"""

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


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "buggy" / "plan_copy_past_its_table.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_plan_copy_past_its_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ex = _example()


def _lengths_kernel(lens_ref, out_ref):
    for s in range(ex.SEQS):
        out_ref[s] = lens_ref[s]


@semcheck.target(devices=[2])
def plan_on_a_kernel_s_lengths(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The failing plan reads its lengths from an earlier kernel call's output: its failure would rest on that
    call's run (PRG-169), so the call after it is not stood in for, and the target stays unknown (PRG-208)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))

    def program(lens, x):
        again = pl.pallas_call(_lengths_kernel, out_shape=jax.ShapeDtypeStruct(lens.shape, lens.dtype),
                               in_specs=[smem], out_specs=smem, interpret=params)(lens)
        return ex.run_steps(ex.plan(again, params), x, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)), out_specs=P(ex.AXIS),
                               check_vma=False))
    _, (lens, x) = ex.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


def _fixed_steps_kernel(lens_ref, x_hbm, o_hbm, sem):
    del lens_ref
    for _ in range(2):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem.at[0])
        copy.start()
        copy.wait()


@semcheck.target(devices=[2])
def plan_then_a_call_it_does_not_feed(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The failing plan, then a call that does not read it and is lowered: the plan fails past its start barrier
    (after the launch), in every run, so the second call never starts (PRG-122), though one greedy run's
    failure is not before every wait and barrier."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))

    def program(lens, x):
        plan = ex.plan(lens, params)
        out = pl.pallas_call(
            _fixed_steps_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA((1,))]),
            interpret=params)(lens, x)
        return out, plan

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    _, (lens, x) = ex.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


def _apart_example():
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "buggy" / "plan_writebacks_fail_apart.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_plan_writebacks_fail_apart", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


apart = _apart_example()


@semcheck.target(devices=[2])
def apart_plan_then_a_call_it_does_not_feed(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The plan of plan_writebacks_fail_apart.py, which raises in every run of each mode with another error, then a
    lowered call that does not read it: the call never starts in either mode (PRG-217), each mode naming its own
    error. Before, the two errors differing, the call was checked as if it ran."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (apart.AXIS,))

    def program(lens, x):
        plan = apart.plan(lens, params)
        out = pl.pallas_call(
            _fixed_steps_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA((1,))]),
            interpret=params)(lens, x)
        return out, plan[0]

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(apart.AXIS)),
                               out_specs=(P(apart.AXIS), P(apart.AXIS)), check_vma=False))
    _, (lens, x) = apart.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())),
                jax.device_put(x, NamedSharding(mesh, P(apart.AXIS))))


def _unwaited_plan_kernel(lens_ref, plan_hbm, table, sem):
    for s in range(ex.SEQS):
        table[1 + s] = lens_ref[s]
    table[0] = lens_ref[0] * 0 + 2
    size = (table[0] + ex.PAGE - 1) // ex.PAGE * ex.PAGE  # PAGE entries of a TABLE-entry table
    pltpu.make_async_copy(table.at[pl.ds(0, size)], plan_hbm.at[pl.ds(0, size)], sem.at[0]).start()


@semcheck.target(devices=[2])
def plan_raising_under_eager_only(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A plan whose write-back reads past its table and is never waited: under eager the copy runs, and raises, in
    its start (every run); under on_wait no wait runs it (ACC-11), so the plan completes. The call after it, whose
    step count is the plan's first entry, never starts under eager (PRG-208), and may start under on_wait, where
    it stays unknown (PRG-217)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))

    def program(lens, x):
        plan = pl.pallas_call(
            _unwaited_plan_kernel, out_shape=jax.ShapeDtypeStruct((ex.PAGE,), jnp.int32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SMEM((ex.TABLE,), jnp.int32), pltpu.SemaphoreType.DMA((1,))]),
            interpret=params)(lens)
        return ex.run_steps(plan, x, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)), out_specs=P(ex.AXIS),
                               check_vma=False))
    _, (lens, x) = ex.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


def _per_device_plan_kernel(table_ref, x_ref, o_ref):
    """Reads entry 8 + the device's index of an 8-entry SMEM table: past its end on every device, at another
    entry on each."""
    me = jax.lax.axis_index(ex.AXIS)
    o_ref[...] = x_ref[...] + table_ref[table_ref[0] + 8 + me].astype(x_ref.dtype)


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


@semcheck.target(devices=[2])
def plan_failing_apart_per_device_then_a_call(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A plan that raises in every run, in both modes, with the error of whichever device reads past its table first
    (each reads another entry), then a call that does not read it: the call never starts (PRG-224). Before, the
    failures differing, the call was checked as if it ran (every property proved)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)

    def program(table, x):
        plan = pl.pallas_call(_per_device_plan_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), vmem], out_specs=vmem,
                              interpret=params)(table, x)
        out = pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, interpret=params)(x)
        return out, plan

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)),
                               out_specs=(P(ex.AXIS), P(ex.AXIS)), check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    return fn, (jax.device_put(jnp.zeros((8,), jnp.int32), NamedSharding(mesh, P())),
                jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


@semcheck.target(devices=[2])
def eager_only_plan_then_a_call(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """plan_raising_under_eager_only's plan, then a call that does not read it: under eager the call never starts;
    under on_wait the plan completes and which calls start after it is not decided (PRG-225). Before, the call was
    checked as if it ran in both modes (every property proved under eager, where jax raises in the plan)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)

    def program(lens, x):
        plan = pl.pallas_call(
            _unwaited_plan_kernel, out_shape=jax.ShapeDtypeStruct((ex.PAGE,), jnp.int32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SMEM((ex.TABLE,), jnp.int32), pltpu.SemaphoreType.DMA((1,))]),
            interpret=params)(lens)
        out = pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, interpret=params)(x)
        return out, plan

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ex.AXIS)), out_specs=(P(ex.AXIS), P()),
                               check_vma=False))
    _, (lens, x) = ex.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


def _late_plan_kernel(x_ref, o_ref, table):
    """Fills an 8-entry table, then device d updates it 40 * d times and reads entry 7 + d: device 0 reads in
    bounds and finishes at once, device 1 reads past the end after its updates, in every run."""
    me = jax.lax.axis_index(ex.AXIS)
    for i in range(8):
        table[i] = jnp.int32(i)

    def update(i, carry):
        table[i % 8] = table[(i + 1) % 8] + 1
        return carry

    jax.lax.fori_loop(0, me * 40, update, 0)
    o_ref[...] = x_ref[...] + table[7 + me].astype(x_ref.dtype)


def _leaking_kernel(x_ref, o_ref, flag):
    """A handshake with itself on the barrier semaphore, then a signal of `flag` that nothing waits: a leak at exit
    on every device that runs it."""
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(jax.lax.axis_index(ex.AXIS),))
    pl.semaphore_wait(barrier, 1)
    pl.semaphore_signal(flag, 1)
    o_ref[...] = x_ref[...] + 1


@semcheck.target(devices=[2])
def plan_failing_late_on_one_device_then_a_call(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A plan that raises on device 1 in every run, late, while device 0 finishes its part, then a call with a
    collective id (no start barrier) that leaks a signal: device 0 may pass the plan's clean-up barrier (device 1
    waits there as it fails) and run the second call, which jax's exit check then reports on device 0 (ERR-52).
    Before, the second call was marked as one that never starts (every property vacuous but deadlock-free)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)

    def program(x):
        plan = pl.pallas_call(_late_plan_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                              out_specs=vmem, scratch_shapes=[pltpu.SMEM((8,), jnp.int32)], interpret=params)(x)
        out = pl.pallas_call(_leaking_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                             compiler_params=pltpu.CompilerParams(collective_id=0), interpret=params)(x)
        return out, plan

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(ex.AXIS), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))),)


def _late_counts_kernel(lens_ref, counts_ref, table):
    """`_late_plan_kernel`'s table as a plan, from the device's own lengths (no device id): `lens_ref[0]` updates,
    then entry 7 + `lens_ref[1]` read into the output's first entry: past the table's end on device 1 (after 40
    updates), in bounds on device 0."""
    for i in range(8):
        table[i] = jnp.int32(i)

    def update(i, carry):
        table[i % 8] = table[(i + 1) % 8] + 1
        return carry

    jax.lax.fori_loop(0, lens_ref[0], update, 0)
    for i in range(8):
        counts_ref[i] = table[i]
    counts_ref[0] = table[7 + lens_ref[1]] * 0 + 2


def _counted_leaking_kernel(counts_ref, x_hbm, o_hbm, sem, flag):
    """A handshake with itself on the barrier semaphore, as many local copies of the block as the plan's first entry
    says, then a signal of `flag` that nothing waits."""
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(jax.lax.axis_index(ex.AXIS),))
    pl.semaphore_wait(barrier, 1)

    def step(i, carry):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem.at[0])
        copy.start()
        copy.wait()
        return carry

    jax.lax.fori_loop(0, counts_ref[0], step, 0)
    pl.semaphore_signal(flag, 1)


@semcheck.target(devices=[2])
def late_plan_on_one_device_then_a_call_it_feeds(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """plan_failing_late_on_one_device_then_a_call with a call whose step count is the plan's first entry: semcheck
    cannot lower it (jax cannot run the plan for that entry, PRG-169), and PRG-208's stand-in said it never starts;
    device 0 may finish the plan and run it (ERR-52)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)

    def program(lens, x):
        counts = pl.pallas_call(_late_counts_kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), in_specs=[smem],
                                out_specs=smem, scratch_shapes=[pltpu.SMEM((8,), jnp.int32)], interpret=params)(lens)
        return pl.pallas_call(
            _counted_leaking_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.DMA((1,)), pltpu.SemaphoreType.REGULAR]),
            compiler_params=pltpu.CompilerParams(collective_id=0), interpret=params)(counts, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(ex.AXIS), P(ex.AXIS)), out_specs=P(ex.AXIS),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    lens = jnp.array([[40 * (d % 2), d % 2] for d in range(num_devices)], jnp.int32).reshape(-1)
    return fn, (jax.device_put(lens, NamedSharding(mesh, P(ex.AXIS))),
                jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))))


def _lifo_plan_kernel(x_ref, o_ref, src, idx, table, sem):
    """Two copies into one SMEM word on one semaphore, then a read of an 8-entry table at that word: device d's
    first copy brings 100 * d, its second 0. Where the first lands last (on_wait runs the waits' copies last in,
    first out) device 1 reads past the table; device 0 reads entry 0 whatever the order."""
    me = jax.lax.axis_index(ex.AXIS)
    src[0] = jnp.int32(0)
    src[1] = me * 100
    for i in range(8):
        table[i] = jnp.int32(i)
    first = pltpu.make_async_copy(src.at[pl.ds(1, 1)], idx, sem.at[0])
    second = pltpu.make_async_copy(src.at[pl.ds(0, 1)], idx, sem.at[0])
    first.start()
    second.start()
    first.wait()
    second.wait()

    def update(i, carry):  # device 1 only: it reaches its read late
        table[i % 8] = table[(i + 1) % 8] * 0 + (i + 1) % 8
        return carry

    jax.lax.fori_loop(0, me * 40, update, 0)
    o_ref[...] = x_ref[...] + table[idx[0]].astype(x_ref.dtype)


@semcheck.target(devices=[2])
def plan_failing_on_one_device_in_some_runs_then_a_call(num_devices: int, *, dma_mode: str = "eager",
                                                         interpret=None):
    """A plan whose two copies race for the word it indexes its table with: in some runs device 1 reads past the
    table while device 0 finishes, then a call without a collective id: device 0 waits at that call's start barrier
    for device 1, which failed: the run hangs (PRG-180 counts it against the call). Before, the call was checked as
    if every device ran it (every property proved in every mode)."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)

    def program(x):
        plan = pl.pallas_call(_lifo_plan_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                              out_specs=vmem, scratch_shapes=[pltpu.SMEM((2,), jnp.int32), pltpu.SMEM((1,), jnp.int32),
                                                              pltpu.SMEM((8,), jnp.int32), pltpu.SemaphoreType.DMA((1,))],
                              interpret=params)(x)
        out = pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, interpret=params)(x)
        return out, plan

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(ex.AXIS), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))),)


def _scoped_shift_kernel(x_ref, o_ref, send_sem, recv_sem, ready):
    """Device 0 tells device 1 it is ready, then opens its run_scoped receive buffer and waits there for device 1's
    block; device 1 sends once told. The signal comes before the scope: where device 1 sends before device 0 has
    entered its scope, eager's copy, which runs in its start, finds no such buffer and raises; where device 0 entered
    first, the run completes (as the greedy run does)."""
    me = jax.lax.axis_index(ex.AXIS)

    @pl.when(me == 0)
    def _():
        pl.semaphore_signal(ready, 1, device_id=(1,))

        def clear(r, carry):  # set-up work between the signal and the scope: device 1 is often quicker
            o_ref[pl.ds(r % o_ref.shape[0], 1), :] = jnp.zeros((1, o_ref.shape[1]), o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, 16 * o_ref.shape[0], clear, 0)

    def body(recv_buf):
        copy = pltpu.make_async_remote_copy(src_ref=x_ref, dst_ref=recv_buf, send_sem=send_sem, recv_sem=recv_sem,
                                            device_id=(0,))

        @pl.when(me == 1)
        def _():
            pl.semaphore_wait(ready, 1)
            copy.start()
            copy.wait_send()

        @pl.when(me == 0)
        def _():
            copy.wait_recv()
            o_ref[...] = recv_buf[...]

    pl.run_scoped(body, pltpu.VMEM(x_ref.shape, x_ref.dtype))


@semcheck.target(devices=[2])
def scoped_shift_failing_in_some_runs_then_a_call(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A call whose copy may miss its target's run_scoped buffer in some schedules (its greedy run completes), then
    a call without a collective id: where one device raised and the other finished its part, the survivor waits at
    the next call's start barrier for a device that never arrives. Before ERR-55 the next call was checked as if
    every device ran it."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)

    def program(x):
        shifted = pl.pallas_call(_scoped_shift_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                 in_specs=[vmem], out_specs=vmem,
                                 scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                                                 pltpu.SemaphoreType.REGULAR], interpret=params)(x)
        out = pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, interpret=params)(x)
        return out, shifted

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(ex.AXIS), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))),)


def _handshake_then_scope_kernel(x_ref, o_ref):
    """A barrier handshake (collective id 2000), then device 1 stages its block in a run_scoped buffer whose scope
    also declares a DMA semaphore it does not use: that semaphore is internal id 2000, the barrier's fixed id, and a
    lookup of 2000 raises once both tables hold it (SEM-3). Device 0 does set-up work between its signal and its
    wait: where device 1, signalled, enters its scope first, device 0's wait looks 2000 up after the allocation and
    raises; where device 0's wait began first (as in the greedy run) it keeps the semaphore it found and the run
    completes."""
    me = jax.lax.axis_index(ex.AXIS)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(1 - me,))

    @pl.when(me == 0)
    def _():
        def clear(r, carry):  # set-up work between the signal and the wait: device 1 is often quicker
            o_ref[pl.ds(r % o_ref.shape[0], 1), :] = jnp.zeros((1, o_ref.shape[1]), o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, 16 * o_ref.shape[0], clear, 0)

    pl.semaphore_wait(barrier, 1)

    @pl.when(me == 0)
    def _():
        o_ref[...] = x_ref[...]

    @pl.when(me == 1)
    def _():
        def stage(buf, unused_sem):
            buf[...] = x_ref[...]
            o_ref[...] = buf[...] * 2

        pl.run_scoped(stage, pltpu.VMEM(x_ref.shape, x_ref.dtype), pltpu.SemaphoreType.DMA)


@semcheck.target(devices=[2])
def id_collision_in_some_runs_then_a_call(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """A call whose barrier lookup collides with a scoped semaphore's id in some schedules only (SEM-3; its greedy
    run completes, its values are facts, no run_scoped key or clock is at stake), then a call without a collective
    id: where device 0 raised and device 1 finished its part, device 1 waits at the next call's start barrier for a
    device that never arrives."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)

    def program(x):
        staged = pl.pallas_call(_handshake_then_scope_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                in_specs=[vmem], out_specs=vmem,
                                compiler_params=pltpu.CompilerParams(collective_id=2000), interpret=params)(x)
        out = pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, interpret=params)(x)
        return out, staged

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(ex.AXIS), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))),)


def _flagged_handshake_kernel(flag_ref, x_ref, o_ref):
    """`_handshake_then_scope_kernel` whose device 1 opens its scope (a DMA semaphore it does not use: internal id
    2000, the collective id) only where the SMEM flag is 1: a loop passing its index as the flag gives a first
    iteration that cannot collide and a second that collides in some schedules (SEM-3)."""
    me = jax.lax.axis_index(ex.AXIS)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(1 - me,))

    @pl.when(me == 0)
    def _():
        def clear(r, carry):  # set-up work between the signal and the wait: device 1 is often quicker
            o_ref[pl.ds(r % o_ref.shape[0], 1), :] = jnp.zeros((1, o_ref.shape[1]), o_ref.dtype)
            return carry

        jax.lax.fori_loop(0, 16 * o_ref.shape[0], clear, 0)

    pl.semaphore_wait(barrier, 1)
    o_ref[...] = x_ref[...]

    @pl.when((me == 1) & (flag_ref[0] == 1))
    def _():
        def stage(buf, unused_sem):
            buf[...] = x_ref[...]
            o_ref[...] = buf[...] * 2

        pl.run_scoped(stage, pltpu.VMEM(x_ref.shape, x_ref.dtype), pltpu.SemaphoreType.DMA)


@semcheck.target(devices=[2])
def loop_iteration_colliding_in_some_runs_then_a_call(num_devices: int, *, dma_mode: str = "eager",
                                                      interpret=None):
    """A loop of two calls whose second iteration's barrier lookup collides with a scoped semaphore's id in some
    schedules only (its first iteration cannot), then a call without a collective id: where device 0 raised in the
    second iteration, device 1 waits at the next call's start barrier for a device that never arrives. Before
    ERR-65 the calls after a loop were read off its first iteration's lowering only."""
    params = pltpu.InterpretParams(dma_execution_mode=dma_mode) if interpret in (None, True) else interpret
    mesh = jax.make_mesh((num_devices,), (ex.AXIS,))
    vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)

    def program(x):
        def body(i, y):
            return pl.pallas_call(_flagged_handshake_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  in_specs=[smem, vmem], out_specs=vmem,
                                  compiler_params=pltpu.CompilerParams(collective_id=2000),
                                  interpret=params)(jnp.full((1,), i, jnp.int32), y)

        staged = jax.lax.fori_loop(0, 2, body, x)
        out = pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[vmem],
                             out_specs=vmem, interpret=params)(x)
        return out, staged

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(ex.AXIS), out_specs=(P(ex.AXIS), P(ex.AXIS)),
                               check_vma=False))
    x = jnp.arange(num_devices * 8 * 128, dtype=jnp.float32).reshape(num_devices * 8, 128)
    return fn, (jax.device_put(x, NamedSharding(mesh, P(ex.AXIS))),)
