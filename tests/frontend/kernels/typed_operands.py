"""Calls given an argument typed with a memory space (`pltpu.with_memory_space_constraint`), ERR-36, ACC-47.

* `table_call(kind, space, ...)`: a `core_map` (`pl.kernel`) or a `pallas_call` whose first argument, a
  one-entry int32 table, is typed with `space` (None leaves it untyped). With `reads=True` the kernel
  starts `table[0]` copies of its block into the output on one DMA semaphore and waits for one: one
  start is clean, two leave a copy in flight at the exit; with `reads=False` it copies once and never
  reads the table (the interpreter's refusal does not depend on what the kernel does).
* `core_map_smem_bound` (`table[0]` = 1) and `core_map_smem_leak` (2): the table typed SMEM, read by the
  kernel, as the routing kernels of shipped MoE layers hand a `core_map` their tables.
* `core_map_smem_copied`: the kernel copies the table into an SMEM scratch and bounds its loop with the copy,
  which the front end follows in a `core_map` over one core (ACC-55); `core_map_untyped_copied`: the same with
  the table untyped, which the interpreter runs.
* `core_map_smem_copied_early`: the same, the bound loaded before the copy's wait (a race on it), as a shipped
  routing kernel's index window is reloaded while its next step's fetch lands (ACC-56).
* `core_map_smem_unlowered`, `core_map_untyped_unlowered`: the same over two cores per device, where the front
  end does not follow the copy (ACC-9, as in any kernel of several cores per device), so the kernel is not
  lowered (ERR-37).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import semcheck

from _common import LANES, ROWS

SPACES = {None: None, "any": pl.ANY, "hbm": pltpu.HBM, "smem": pltpu.SMEM, "vmem": pltpu.VMEM}


def _body(reads: bool):
    def body(n_ref, x_ref, o_ref, sem):
        starts = n_ref[0] if reads else 1

        @pl.loop(0, starts)
        def _(i):
            pltpu.make_async_copy(x_ref, o_ref, sem).start()

        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    return body


def _core_map(reads: bool, n, x):
    def kernel(n_ref, x_ref, o_ref):
        pl.run_scoped(lambda sem: _body(reads)(n_ref, x_ref, o_ref, sem), pltpu.SemaphoreType.DMA(()))

    return pl.kernel(kernel, mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=1),
                     out_type=jnp.empty((ROWS, LANES), jnp.float32))(n, x)


def _pallas_call(reads: bool, n, x):
    return pl.pallas_call(
        _body(reads),
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA(())],
    )(n, x)


def table_call(kind: str, space: str | None, *, starts: int = 1, reads: bool = True):
    """(fn, args): the call of `kind` ("core_map" or "pallas_call") given the table typed with `space`."""
    call = _core_map if kind == "core_map" else _pallas_call

    def fn(n, x):
        if SPACES[space] is not None:
            n = pltpu.with_memory_space_constraint(n, SPACES[space])
        return call(reads, n, x)

    return jax.jit(fn), (jnp.array([starts], jnp.int32), jnp.ones((ROWS, LANES), jnp.float32))


@semcheck.target(devices=(2,))
def core_map_smem_bound(num_devices: int):
    return table_call("core_map", "smem", starts=1)


@semcheck.target(devices=(2,))
def core_map_smem_leak(num_devices: int):
    return table_call("core_map", "smem", starts=2)


def _copied_bound(n_ref, x_ref, o_ref):
    def scoped(sem, bound):
        pltpu.make_async_copy(n_ref, bound, sem).start()
        pltpu.make_async_copy(n_ref, bound, sem).wait()

        @pl.loop(0, bound[0])
        def _(i):
            pltpu.make_async_copy(x_ref, o_ref, sem).start()

        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    pl.run_scoped(scoped, pltpu.SemaphoreType.DMA(()), pltpu.SMEM((1,), jnp.int32))


def _copied_bound_early(n_ref, x_ref, o_ref):
    def scoped(sem, bound):
        bound[0] = 1  # a start until the copy lands (so an early load never reads uninitialised memory)
        pltpu.make_async_copy(n_ref, bound, sem).start()
        starts = bound[0]  # before the copy's wait: a race on the bound
        pltpu.make_async_copy(n_ref, bound, sem).wait()

        @pl.loop(0, starts)
        def _(i):
            pltpu.make_async_copy(x_ref, o_ref, sem).start()

        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    pl.run_scoped(scoped, pltpu.SemaphoreType.DMA(()), pltpu.SMEM((1,), jnp.int32))


def copied_bound_call(space: str | None, *, cores: int = 1, starts: int = 1, early: bool = False):
    """(fn, args): a `core_map` over `cores` cores per device whose loop bound is the table (`[starts]`) copied
    into SMEM, the table typed with `space`; `early`: the bound loaded before the copy's wait."""

    def fn(n, x):
        if SPACES[space] is not None:
            n = pltpu.with_memory_space_constraint(n, SPACES[space])
        return pl.kernel(_copied_bound_early if early else _copied_bound,
                         mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=cores),
                         out_type=jnp.empty((ROWS, LANES), jnp.float32))(n, x)

    return jax.jit(fn), (jnp.array([starts], jnp.int32), jnp.ones((ROWS, LANES), jnp.float32))


@semcheck.target(devices=(2,))
def core_map_smem_copied(num_devices: int):
    return copied_bound_call("smem")


@semcheck.target(devices=(2,))
def core_map_smem_copied_leak(num_devices: int):
    return copied_bound_call("smem", starts=2)


@semcheck.target(devices=(2,))
def core_map_smem_copied_early(num_devices: int):
    return copied_bound_call("smem", early=True)


@semcheck.target(devices=(2,))
def core_map_untyped_copied(num_devices: int):
    return copied_bound_call(None)


@semcheck.target(devices=(2,))
def core_map_smem_unlowered(num_devices: int):
    return copied_bound_call("smem", cores=2)


@semcheck.target(devices=(2,))
def core_map_untyped_unlowered(num_devices: int):
    return copied_bound_call(None, cores=2)
