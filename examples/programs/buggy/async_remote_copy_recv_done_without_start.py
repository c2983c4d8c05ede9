"""BUGGY: a remote receive-done kernel waits for a copy that no start kernel started.

Pattern: examples/programs/async_remote_copy.py (one direction): the start kernel synchronises on
the barrier and returns the destination and both DMA semaphores, but this one never starts the
remote copy.

BUG: nothing signals the receive semaphore (nor the send semaphore). On a TPU every device hangs in
its send-done kernel, the first wait on a semaphore result that no copy feeds (deadlock-free
violated, naming the send-done call and the start call whose result it waits on).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "async_remote_copy.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_remote_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rc = _correct()

import jax  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402


def _barrier_only_kernel(src_ref, src_alias_ref, dst_ref, send_sem, recv_sem):
    del src_ref, src_alias_ref, dst_ref, send_sem, recv_sem
    n = jax.lax.axis_size(rc.AXIS)
    left = jax.lax.rem(jax.lax.axis_index(rc.AXIS) - 1 + n, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    # BUG: the remote copy is never started


def fake_start(x, params):
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    sem_spec = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
    x, dst, send_sem, recv_sem = pl.pallas_call(
        _barrier_only_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[any_spec],
        out_specs=(any_spec, any_spec, sem_spec, sem_spec),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True),
        interpret=params,
    )(x)
    return x, (dst, send_sem, recv_sem)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = rc.interpret_params(dma_mode, interpret)

    def program(x):
        x, fut = fake_start(x, params)
        x = rc.send_done(x, fut, params)
        return rc.recv_done(x, fut, params)

    mesh, fn = rc.sharded(program, num_devices, P(rc.AXIS))
    return fn, (rc.example_input(mesh, num_devices),)
