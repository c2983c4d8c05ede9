"""A loop whose carry toggles a double buffer's slot (the rotation certificate's tests, RUN-18): `init`
`zero` starts every device on slot 0 (the carry is the same on every device at every iteration, so the
program repeats every device); `parity` starts device d on slot d mod 2 (the program repeats every two
devices, but the carry's start names the device, which the certificate does not follow)."""

from __future__ import annotations

import functools
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding, PartitionSpec as P

def _kernel(x_ref, o_ref, buf, sems, *, n, init):
    me = jax.lax.axis_index("x")
    right = jax.lax.rem(me + 1, n)
    def body(i, slot):
        c = pltpu.make_async_remote_copy(src_ref=x_ref.at[pl.ds(0, 8)], dst_ref=buf.at[slot], send_sem=sems.at[0, slot], recv_sem=sems.at[1, slot], device_id=(right,))
        c.start(); c.wait_send(); c.wait_recv()
        return 1 - slot
    s0 = jnp.int32(0) if init == "zero" else jax.lax.rem(me, 2)
    jax.lax.fori_loop(0, 4, body, s0)

def build(num_devices: int, *, init: str = "zero"):
    n = num_devices
    mesh = jax.make_mesh((n,), ("x",))
    call = pl.pallas_call(functools.partial(_kernel, n=n, init=init),
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2, 2))],
        interpret=pltpu.InterpretParams())
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jax.device_put(jnp.zeros((8 * n, 128), jnp.float32), NamedSharding(mesh, P("x")))
    return fn, (x,)
