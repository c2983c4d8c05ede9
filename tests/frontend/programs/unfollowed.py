"""Programs the front end cannot follow yet: each target must be unknown with the reason and the line."""

from __future__ import annotations

import jax
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import semcheck
from _futures import AXIS, local_done, local_start, sharded


@semcheck.target(devices=[2])
def done_under_cond(num_devices: int):
    def f(x):
        x, fut = local_start(x)
        return jax.lax.cond(x[0, 0] > 0, lambda x: local_done(x, fut), lambda x: x, x)

    return sharded(f, num_devices)


@semcheck.target(devices=[2])
def calls_in_a_while_loop(num_devices: int):
    def f(x):
        def body(carry):
            i, x = carry
            x, fut = local_start(x)
            return i + 1, local_done(x, fut)

        # the condition reads a kernel's output, which the walk does not know (PRG-171; with a count it
        # knows, the loop is unrolled and decided)
        return jax.lax.while_loop(lambda c: c[1][0, 0] < c[0], body, (0, x))[1]

    return sharded(f, num_devices)


@semcheck.target(devices=[2])
def semaphore_through_xla(num_devices: int):
    def f(x):
        x, (out, sem) = local_start(x)
        sem = jax.lax.optimization_barrier(sem)
        return local_done(x, (out, sem))

    return sharded(f, num_devices)


@semcheck.target(devices=[2])
def calls_xla_may_merge(num_devices: int):
    def f(x):
        x1, fut1 = local_start(x)
        x2, fut2 = local_start(x)  # the same kernel on the same operand, without has_side_effects
        return local_done(x1, fut1) + local_done(x2, fut2)

    return sharded(f, num_devices)


@semcheck.target(devices=[2])
def returns_its_semaphore(num_devices: int):
    def f(x):
        x, (out, sem) = local_start(x)
        return out, sem  # whatever runs after the program may wait on it

    return sharded(f, num_devices, out_specs=(P(AXIS), P()))


@semcheck.target(devices=[2], inputs=st.integers(1, 3))
def with_generated_inputs(num_devices: int, copies: int):
    def f(x):
        for _ in range(copies):
            x, fut = local_start(x)
            x = local_done(x, fut)
        return x

    return sharded(f, num_devices)
