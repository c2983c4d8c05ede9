"""Programs of kernel calls whose scalar inputs come from concrete arrays (specs/deciding/programs.md PRG-167).

Built on examples/programs/kv_transfer_layers.py: a start call starts one copy per layer, a later call
waits them, each reading a per-device layer count as a scalar-prefetch operand.
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
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "kv_transfer_layers.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_kv_transfer_layers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


kv = _example()


@semcheck.target(devices=[2])
def wait_reads_other_counts(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The wait call reads counts one higher on device 0 only: its last wait has no copy (a deadlock there)."""
    counts = kv.layer_counts(num_devices)
    wait = counts.copy()
    wait[0] = min(wait[0] + 1, kv.LAYERS)
    if wait[0] == counts[0]:
        counts[0] -= 1
    return kv.build_with(num_devices, kv.interpret_params(dma_mode, interpret), counts=counts, wait_counts=wait)


def _copy_counts_kernel(count_ref, out_ref):
    out_ref[0] = count_ref[0]


@semcheck.target(devices=[2])
def count_from_kernel(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The wait call's counts are the output of an earlier kernel call: semcheck runs no kernel, so the
    wait call's loop bound is not known (unknown, not guessed)."""
    params = kv.interpret_params(dma_mode, interpret)
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    mesh = jax.make_mesh((num_devices,), (kv.AXIS,))

    def program(count, x):
        again = pl.pallas_call(_copy_counts_kernel, out_shape=jax.ShapeDtypeStruct(count.shape, count.dtype),
                               in_specs=[smem], out_specs=smem, interpret=params)(count)
        x, future = kv.kv_start(count, x, params)
        return kv.kv_wait(again, x, future, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(kv.AXIS), P(kv.AXIS)), out_specs=P(kv.AXIS),
                               check_vma=False))
    x = jnp.zeros((num_devices * kv.LAYERS, kv.ROWS, kv.LANES), jnp.float32)
    count = jnp.asarray(kv.layer_counts(num_devices))
    return fn, (jax.device_put(count, NamedSharding(mesh, P(kv.AXIS))),
                jax.device_put(x, NamedSharding(mesh, P(kv.AXIS))))


def _twice(num_devices: int, dma_mode: str, interpret, second):
    """Two transfers through one jitted start and one jitted wait: jax traces each function once, so both
    transfers run the same launch equations, the second on counts `second(first counts)`."""
    params = kv.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (kv.AXIS,))
    start = jax.jit(lambda c, x: kv.kv_start(c, x, params))
    wait = jax.jit(lambda c, x, f: kv.kv_wait(c, x, f, params))

    def program(count, again, x):
        x, future = start(count, x)
        x = wait(count, x, future)
        x, future = start(again, x)
        return wait(again, x, future)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(kv.AXIS),) * 3, out_specs=P(kv.AXIS),
                               check_vma=False))
    x = jnp.zeros((num_devices * kv.LAYERS, kv.ROWS, kv.LANES), jnp.float32)
    counts = kv.layer_counts(num_devices)
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(kv.AXIS)))  # noqa: E731
    return fn, (put(jnp.asarray(counts)), put(jnp.asarray(second(counts))), put(x))


@semcheck.target(devices=[2])
def shared_launch_same_counts(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """Both transfers on the same counts: every reach of a launch agrees, so its values are followed."""
    return _twice(num_devices, dma_mode, interpret, lambda c: c.copy())


@semcheck.target(devices=[2])
def shared_launch_other_counts(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The second transfer on other counts: one launch reached with two different values is not told apart
    (unknown, never the first reach's values for both)."""
    return _twice(num_devices, dma_mode, interpret, lambda c: c % kv.LAYERS + 1)


def _looped(num_devices: int, dma_mode: str, interpret, step, *, wait_ahead: bool = False):
    """Two transfers in a `fori_loop` (a scan of two iterations), the counts carried from one to the next as
    `step(counts)`; `wait_ahead`: the wait call reads the next iteration's counts (`step(counts)`) instead."""
    params = kv.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (kv.AXIS,))

    def program(count, x):
        def transfer(i, carry):
            c, x = carry
            x, future = kv.kv_start(c, x, params)
            return step(c), kv.kv_wait(step(c) if wait_ahead else c, x, future, params)

        return jax.lax.fori_loop(0, 2, transfer, (count, x))[1]

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(kv.AXIS),) * 2, out_specs=P(kv.AXIS),
                               check_vma=False))
    x = jnp.zeros((num_devices * kv.LAYERS, kv.ROWS, kv.LANES), jnp.float32)
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(kv.AXIS)))  # noqa: E731
    return fn, (put(jnp.asarray(kv.layer_counts(num_devices))), put(x))


@semcheck.target(devices=[2])
def loop_same_counts(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """Both iterations of the loop on the counts the arrays give (the carry keeps them): followed (PRG-168)."""
    return _looped(num_devices, dma_mode, interpret, lambda c: c)


@semcheck.target(devices=[2])
def loop_other_counts(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The second iteration on other counts: each iteration's calls read their own (PRG-183; before it, one
    launch reached with two values was not told apart: unknown)."""
    return _looped(num_devices, dma_mode, interpret, lambda c: c % kv.LAYERS + 1)


@semcheck.target(devices=[2])
def loop_wait_ahead(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """BUG: each iteration's wait call reads the next iteration's counts, one more layer than its start call
    started on every device: the first iteration's wait never ends (PRG-183 tells the iterations apart)."""
    return _looped(num_devices, dma_mode, interpret, lambda c: c % kv.LAYERS + 1, wait_ahead=True)


def _count_program(num_devices: int, dma_mode: str, interpret, producer, *, scratch=(), out_len=None,
                   read=lambda again: again):
    """The KV transfer whose wait call reads counts an earlier kernel call (`producer`) writes (PRG-169): `read`
    of its output, of `out_len` elements per device (default: as many as the counts)."""
    params = kv.interpret_params(dma_mode, interpret)
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    mesh = jax.make_mesh((num_devices,), (kv.AXIS,))

    def program(count, x):
        shape = count.shape if out_len is None else (out_len,)
        again = pl.pallas_call(producer, out_shape=jax.ShapeDtypeStruct(shape, count.dtype),
                               in_specs=[smem], out_specs=smem, scratch_shapes=list(scratch), interpret=params)(count)
        x, future = kv.kv_start(count, x, params)
        return kv.kv_wait(read(again), x, future, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(kv.AXIS), P(kv.AXIS)), out_specs=P(kv.AXIS),
                               check_vma=False))
    x = jnp.zeros((num_devices * kv.LAYERS, kv.ROWS, kv.LANES), jnp.float32)
    count = jnp.asarray(kv.layer_counts(num_devices))
    return fn, (jax.device_put(count, NamedSharding(mesh, P(kv.AXIS))),
                jax.device_put(x, NamedSharding(mesh, P(kv.AXIS))))


def _uninitialised_kernel(count_ref, out_ref, tmp_ref):
    del count_ref
    out_ref[0] = jnp.minimum(jnp.maximum(tmp_ref[0], 0), 1)  # a scratch nothing wrote


@semcheck.target(devices=[2])
def count_from_uninitialised(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The wait call's count comes from scratch memory the producer never writes: not a fact (unknown)."""
    return _count_program(num_devices, dma_mode, interpret, _uninitialised_kernel,
                          scratch=[pltpu.SMEM((1,), jnp.int32)])


def _fills_agree_kernel(count_ref, out_ref, tmp_ref):
    t = tmp_ref[0]  # a scratch nothing wrote: 2**31 - 1 under the NaN fill, 0 under the zero fill
    out_ref[0] = count_ref[0] + jnp.where((t > 5) & (t < 1000), 1, 0)  # the count under both fills


@semcheck.target(devices=[2])
def count_from_scratch_the_fills_agree_on(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """BUG on a TPU: the counts add 1 where the producer's scratch holds 6 .. 999, which both of jax's fills miss;
    the wait call then waits for a layer no start call started (PRG-200: unknown under `hardware`)."""
    return _count_program(num_devices, dma_mode, interpret, _fills_agree_kernel,
                          scratch=[pltpu.SMEM((1,), jnp.int32)])


def _last_count_kernel(count_ref, out_ref):
    out_ref[0] = count_ref[jnp.minimum(count_ref[0], 0) - 1]  # index -1: the interpreter reads the last element


@semcheck.target(devices=[2])
def count_at_a_negative_index(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """BUG on a TPU: the producer reads its counts at index -1, which jax's interpreter counts from the end (the
    count itself, in both fills' runs) and a TPU does not (PRG-202: unknown under `hardware`)."""
    return _count_program(num_devices, dma_mode, interpret, _last_count_kernel)


def _row_kernel(row_ref, x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(row_ref[0] * 8, 8)], buf, sem)  # past the input unless row 0
    copy.start()
    copy.wait()
    o_ref[...] = buf[...]


@semcheck.target(devices=[2])
def local_row_from_scratch_the_fills_agree_on(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """BUG on a TPU: a local call copies the row block its scalar prefetch names out of an 8-row input; the row is 0
    plus 1 where the producer's scratch holds 6 .. 999, which both of jax's fills miss (PRG-200)."""
    params = kv.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (kv.AXIS,))
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)

    def program(count, x):
        row = pl.pallas_call(_fills_agree_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32), in_specs=[smem],
                             out_specs=smem, scratch_shapes=[pltpu.SMEM((1,), jnp.int32)], interpret=params)(count)
        return pl.pallas_call(_row_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              grid_spec=pltpu.PrefetchScalarGridSpec(
                                  num_scalar_prefetch=1, grid=(1,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                  out_specs=pl.BlockSpec((8, 128), lambda i, r: (0, 0)),
                                  scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA]),
                              interpret=params)(row, x)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(kv.AXIS), P(kv.AXIS)), out_specs=P(kv.AXIS),
                               check_vma=False))
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(kv.AXIS)))  # noqa: E731
    return fn, (put(jnp.zeros((num_devices,), jnp.int32)), put(jnp.ones((num_devices * 8, 128), jnp.float32)))


def _first_element_kernel(count_ref, out_ref):
    out_ref[0] = count_ref[0]  # elements 1.. of the output: memory nothing writes


@semcheck.target(devices=[2])
def count_from_written_part(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The producer writes element 0 of its 8 only; the wait kernel gets all 8 and reads element 0, the wait
    call's loop bound (PRG-192): a fact (proved)."""
    return _count_program(num_devices, dma_mode, interpret, _first_element_kernel, out_len=8)


@semcheck.target(devices=[2])
def count_from_written_part_computed(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """As `count_from_written_part`, the counts computed by XLA ops from the written element (PRG-193): proved."""
    return _count_program(num_devices, dma_mode, interpret, _first_element_kernel, out_len=8,
                          read=lambda again: jnp.minimum(jnp.where(again > 0, again, 1),
                                                         jnp.concatenate([again, again])[0:8] * 2)[0:1])


@semcheck.target(devices=[2])
def count_from_unwritten_part(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The wait call's counts are element 3 of the producer's output, which it never writes: unknown."""
    return _count_program(num_devices, dma_mode, interpret, _first_element_kernel, out_len=8,
                          read=lambda again: again[3:4] + 0)


@semcheck.target(devices=[2])
def count_from_unwritten_part_reversed(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The wait kernel gets the producer's 8 elements reversed and reads element 0, the producer's element 7,
    which it never writes: unknown in the wait kernel's lowering."""
    return _count_program(num_devices, dma_mode, interpret, _first_element_kernel, out_len=8,
                          read=lambda again: again[::-1])


def _loop_written_kernel(count_ref, out_ref):
    def element(i, carry):
        out_ref[i] = count_ref[i]  # a store only; elements past the loaded bound: memory nothing writes
        return carry

    jax.lax.fori_loop(0, jnp.minimum(count_ref[0], 1), element, 0)


@semcheck.target(devices=[2])
def count_from_a_loop_written_part(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """As `count_from_written_part`, the producer storing element 0 in a `fori_loop` with a loaded bound (PRG-219):
    the loop only stores, so under `hardware` the written element is a fact (proved; it was unknown)."""
    return _count_program(num_devices, dma_mode, interpret, _loop_written_kernel, out_len=8)


@semcheck.target(devices=[2])
def count_from_a_loop_unwritten_part(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The same producer; the wait call's counts are element 3, which its loop never writes: unknown."""
    return _count_program(num_devices, dma_mode, interpret, _loop_written_kernel, out_len=8,
                          read=lambda again: again[3:4] + 0)


def _index_from_input_kernel(count_ref, out_ref):
    out_ref[0] = count_ref[jnp.minimum(count_ref[0], 1) - 1]  # >= 0 as the counts given are >= 1


@semcheck.target(devices=[2])
def count_at_an_index_its_input_holds(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The producer indexes its counts at `min(count, 1) - 1`: 0 for the counts it is given (3 and 2), which it
    never writes (PRG-220: proved under `hardware`; a loaded value was any int32, so the index any, unknown)."""
    return _count_program(num_devices, dma_mode, interpret, _index_from_input_kernel)


def _wrapping_counter_kernel(count_ref, out_ref):
    def body(s):
        i, left = s
        return i + jnp.int16(3), left - 1

    # i wraps past int16's end below the bound: 54,613 trips, not 32,767, so `left` ends below 0
    _, left = jax.lax.while_loop(lambda s: s[0] < jnp.int16(32767), body, (jnp.int16(0), jnp.int32(32767)))
    out_ref[0] = count_ref[jnp.maximum(jnp.minimum(left, 0), -1)]


@semcheck.target(devices=[2])
def count_after_a_wrapping_counter(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The producer reads its count at -1 after a loop whose int16 counter wraps (PRG-233): jax's interpreter
    counts it from the end, a TPU reads before the ref, so the wait call's verdicts are unknown under `hardware`."""
    return _count_program(num_devices, dma_mode, interpret, _wrapping_counter_kernel)


def _racy_count_kernel(count_ref, out_ref, src_ref, tmp_ref, sems):
    src_ref[...] = jnp.zeros_like(src_ref)
    first = pltpu.make_async_copy(src_ref, tmp_ref, sems.at[0])
    first.start()
    first.wait()
    again = pltpu.make_async_copy(src_ref, tmp_ref, sems.at[1])
    again.start()  # rewrites the same values, unordered with the read below: a race, whatever it reads
    out_ref[0] = count_ref[0] + tmp_ref[0, 0]
    again.wait()


@semcheck.target(devices=[2])
def count_from_racy_kernel(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The producer reads its scratch while a second copy into it is in flight: every run computes the same
    counts, but race-free is violated, so nothing that rests on the counts is a fact (unknown)."""
    return _count_program(num_devices, dma_mode, interpret, _racy_count_kernel,
                          scratch=[pltpu.VMEM((8, 128), jnp.int32), pltpu.VMEM((8, 128), jnp.int32),
                                   pltpu.SemaphoreType.DMA((2,))])


def _planned():
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "ring_attention_planned.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_ring_attention_planned", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _racy_plan_kernel(lens_ref, mine_ref, split_ref, rows_ref, src_ref, tmp_ref, sems, *, num_devices):
    planned = _planned()
    planned._plan_kernel(lens_ref, mine_ref, split_ref, rows_ref, num_devices=num_devices, skip_short=False)
    src_ref[...] = jnp.zeros_like(src_ref)
    tmp_ref[...] = jnp.zeros_like(tmp_ref)
    again = pltpu.make_async_copy(src_ref, tmp_ref, sems.at[0])
    again.start()  # unordered with the read below: a race, though every run reads zeros
    rows_ref[0] = rows_ref[0] + tmp_ref[0, 0]
    again.wait()


@semcheck.target(devices=[2])
def planned_ring_racy_plan(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The planned ring (examples/programs/ring_attention_planned.py) whose plan races on a scratch it adds
    zeros from: the ring calls' bounds rest on a racy call's outputs, so nothing of them is decided (PRG-169),
    in the composed program (hardware) and in the calls checked alone (eager, on_wait) alike."""
    import functools

    planned = _planned()
    ring = planned.ring
    params = ring.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (ring.AXIS,))
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)

    def program(lens, mine, x):
        split, rows = pl.pallas_call(
            functools.partial(_racy_plan_kernel, num_devices=num_devices),
            out_shape=(jax.ShapeDtypeStruct((4,), jnp.int32), jax.ShapeDtypeStruct(lens.shape, jnp.int32)),
            in_specs=[smem, smem], out_specs=(smem, smem),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.int32), pltpu.VMEM((8, 128), jnp.int32),
                            pltpu.SemaphoreType.DMA((1,))],
            interpret=params)(lens, mine)
        x, acc = ring.ring_part(split, rows, x, jnp.zeros_like(x), params, part=0)
        return ring.ring_part(split, rows, x, acc, params, part=1)[1]

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(), P(ring.AXIS), P(ring.AXIS)),
                               out_specs=P(ring.AXIS), check_vma=False))
    _, args = planned.build_with(num_devices, params)
    return fn, args


def _ring_under_cond(num_devices: int, dma_mode: str, interpret, flag: int, *, skip: int = 0, per_device=False):
    """The two-call ring of examples/programs/ring_attention_two_calls.py inside a `lax.cond` on a flag
    (replicated, or with `per_device` set on device 0 only); its calls read the lengths and the split as scalar
    prefetch (PRG-170)."""
    ring = _planned().ring
    params = ring.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (ring.AXIS,))
    flags = [flag] + [0] * (num_devices - 1) if per_device else [flag]

    def program(flag, lens, x):
        rows = (lens + ring.TOKENS_PER_ROW - 1) // ring.TOKENS_PER_ROW
        half = (num_devices - 1) // 2
        split = jnp.array([0, half, half, num_devices - 1 - half], dtype=jnp.int32)

        def rounds(x):
            x, acc = ring.ring_part(split, rows, x, jnp.zeros_like(x), params, part=0)
            return ring.ring_part(split, rows, x, acc, params, part=1, skip=skip)[1]

        return jax.lax.cond(flag[0] > 0, rounds, jnp.zeros_like, x)

    flag_spec = P(ring.AXIS) if per_device else P()
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(flag_spec, P(), P(ring.AXIS)), out_specs=P(ring.AXIS),
                               check_vma=False))
    _, (lens, x) = ring.build_with(num_devices, params)
    return fn, (jax.device_put(jnp.asarray(flags, jnp.int32), NamedSharding(mesh, flag_spec)), lens, x)


@semcheck.target(devices=[2])
def ring_under_cond(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The flag is set: every device runs the ring, whose loops read the lengths (proved, PRG-170)."""
    return _ring_under_cond(num_devices, dma_mode, interpret, 1)


@semcheck.target(devices=[2])
def ring_under_cond_last_recv_unwaited(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The ring under the cond with its second call skipping its last receive wait (the seeded bug of
    examples/programs/buggy/ring_attention_two_calls_last_recv_unwaited.py): violated as there."""
    return _ring_under_cond(num_devices, dma_mode, interpret, 1, skip=1)


@semcheck.target(devices=[2])
def ring_under_cond_on_one_device(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """Only device 0's flag is set: the ring's calls run on one device, whose values are not followed (unknown,
    never the values of the devices that take the branch for all of them)."""
    return _ring_under_cond(num_devices, dma_mode, interpret, 1, per_device=True)


def _shift_example():
    path = Path(__file__).resolve().parents[2] / "examples" / "programs" / "repeated_shift_double_barrier.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_repeated_shift_double_barrier", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shifts_while(num_devices: int, dma_mode: str, interpret, *, double_barrier: bool, sharded: bool = False):
    """examples/programs/repeated_shift_double_barrier.py with its trip count an array (a `fori_loop` with a
    traced bound is a `while_loop`): `num_devices - 1` shift calls (PRG-171)."""
    shifts = _shift_example()
    params = shifts.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (shifts.AXIS,))

    def program(steps, x):
        return jax.lax.fori_loop(0, steps[0], lambda _, v: shifts.shift(v, double_barrier=double_barrier,
                                                                         params=params), x)

    spec = P(shifts.AXIS) if sharded else P()
    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(spec, P(shifts.AXIS)), out_specs=P(shifts.AXIS),
                               check_vma=False))
    (x,) = shifts.build(num_devices, dma_mode=dma_mode, interpret=interpret)[1]
    steps = jnp.full((num_devices if sharded else 1,), num_devices - 1, jnp.int32)
    return fn, (jax.device_put(steps, NamedSharding(mesh, spec)), x)


@semcheck.target(devices=[2, 5])
def shifts_while(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The double-barrier shifts in a while loop of a replicated trip count: unrolled, proved (PRG-171)."""
    return _shifts_while(num_devices, dma_mode, interpret, double_barrier=True)


@semcheck.target(devices=[2, 5])
def shifts_while_single_barrier(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The single-barrier shifts (examples/programs/buggy/repeated_shift_single_barrier.py) in the while loop:
    invocation-confined violated from 5 devices, as the static loop is."""
    return _shifts_while(num_devices, dma_mode, interpret, double_barrier=False)


@semcheck.target(devices=[2])
def shifts_while_sharded_bound(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The trip count from a sharded array, the same on every device: the walk computes it on each device (PRG-197)
    and every device runs every call."""
    return _shifts_while(num_devices, dma_mode, interpret, double_barrier=True, sharded=True)


def _scored_count_kernel(scores_ref, out_ref):
    out_ref[0] = jnp.where(scores_ref[0, 0] > 0, 1, 0).astype(jnp.int32)


@semcheck.target(devices=[2])
def count_from_softmax_scores(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    """The producer reads a softmax the program computes before it, whose arithmetic rounds (ACC-26): its input has
    no value, so its output, the wait call's counts, has none; the reason names the softmax's line (PRG-206)."""
    params = kv.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (kv.AXIS,))

    def program(count, x):
        scores = jax.nn.softmax(count.astype(jnp.float32).reshape(1, -1))  # SOFTMAX
        again = pl.pallas_call(_scored_count_kernel, out_shape=jax.ShapeDtypeStruct(count.shape, count.dtype),
                               in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                               out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=params)(scores)
        x, future = kv.kv_start(count, x, params)
        return kv.kv_wait(again, x, future, params)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(kv.AXIS), P(kv.AXIS)), out_specs=P(kv.AXIS),
                               check_vma=False))
    x = jnp.zeros((num_devices * kv.LAYERS, kv.ROWS, kv.LANES), jnp.float32)
    count = jnp.asarray(kv.layer_counts(num_devices))
    return fn, (jax.device_put(count, NamedSharding(mesh, P(kv.AXIS))),
                jax.device_put(x, NamedSharding(mesh, P(kv.AXIS))))
