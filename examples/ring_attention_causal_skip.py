"""Ring attention with causal block skipping (clean).

Sequence parallelism: device d holds the queries, keys and values of tokens
d * R .. (d + 1) * R.  The K/V blocks travel round the ring (to the right)
while every device attends its queries to the block it holds; with a causal
mask, the block of a later device is entirely in the future, so its compute
is skipped by a `lax.cond`, but the block must still be forwarded.

Two K/V slots per device (double buffering); at step s the block of device
me - s sits in slot s % 2:

  step s = 0 .. N - 1:
    s > 0: wait the copies of step s - 1 that brought this block
    s < N - 1: signal my left neighbour (I am done with slot (s + 1) % 2), wait
      my right neighbour's signal, start the copies of slot s % 2 into the
      right neighbour's slot (s + 1) % 2
    lax.cond(the block is not in my future): fold it into the online softmax
      (the diagonal block masked)
    s < N - 1: wait the sends

Expected semcheck verdict: every property proved, in every DMA mode.  The
seeded bug, examples/buggy/ring_attention_wait_skipped_with_block.py,
waits the arrival inside the `lax.cond`, so a skipped block is never waited.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "x"


def _interpret_params(dma_mode, interpret):
    if interpret is None or interpret is True:
        return pltpu.InterpretParams(dma_execution_mode=dma_mode)
    return interpret


def kv_copies(k_buf, v_buf, send_sems, recv_sems, s, *, n):
    """Step s's copies: my slot s % 2 into the right neighbour's slot (s + 1) % 2."""
    me = jax.lax.axis_index(AXIS)
    src, dst = jax.lax.rem(s, 2), jax.lax.rem(s + 1, 2)
    right = jax.lax.rem(me + 1, n)
    return tuple(pltpu.make_async_remote_copy(src_ref=buf.at[src], dst_ref=buf.at[dst], send_sem=send_sems.at[i],
                                              recv_sem=recv_sems.at[i, dst], device_id=(right,))
                 for i, buf in enumerate((k_buf, v_buf)))


def forward(k_buf, v_buf, send_sems, recv_sems, s, *, n):
    """Wait until the right neighbour is done with the slot I fill, then start the copies."""
    me = jax.lax.axis_index(AXIS)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + n - 1, n),))
    pl.semaphore_wait(barrier, 1)
    for c in kv_copies(k_buf, v_buf, send_sems, recv_sems, s, n=n):
        c.start()


def attend(q, k_buf, v_buf, s, state, *, n, rows):
    """Fold the block in slot s % 2 (device me - s's tokens) into (m, l, acc); causal mask on the diagonal."""
    me = jax.lax.axis_index(AXIS)
    m, l, acc = state
    slot = jax.lax.rem(s, 2)
    k, v = k_buf[slot], v_buf[slot]
    scores = jnp.dot(q, k.T, preferred_element_type=jnp.float32)
    qpos = me * rows + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
    kpos = jax.lax.rem(me + n - s, n) * rows + jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    scores = jnp.where(kpos <= qpos, scores, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(scores, axis=1, keepdims=True))
    w = jnp.exp(scores - m_new)
    scale = jnp.exp(m - m_new)
    return m_new, l * scale + jnp.sum(w, axis=1, keepdims=True), acc * scale + jnp.dot(w, v)


def visible(s, *, n):
    """Whether step s's block (device me - s's tokens) is not entirely in my future."""
    me = jax.lax.axis_index(AXIS)
    return jax.lax.rem(me + n - s, n) <= me


def _kernel(q_ref, k_ref, v_ref, o_ref, k_buf, v_buf, send_sems, recv_sems, *, n, rows):
    k_buf[0] = k_ref[...]
    v_buf[0] = v_ref[...]
    q = q_ref[...]

    def step(s, state):
        @pl.when(s > 0)
        def _():
            for c in kv_copies(k_buf, v_buf, send_sems, recv_sems, s - 1, n=n):
                c.wait_recv()

        @pl.when(s < n - 1)
        def _():
            forward(k_buf, v_buf, send_sems, recv_sems, s, n=n)

        state = jax.lax.cond(visible(s, n=n), functools.partial(attend, q, k_buf, v_buf, s, n=n, rows=rows),
                             lambda st: st, state)

        @pl.when(s < n - 1)
        def _():
            for c in kv_copies(k_buf, v_buf, send_sems, recv_sems, s, n=n):
                c.wait_send()

        return state

    init = (jnp.full((rows, 1), -jnp.inf, jnp.float32), jnp.zeros((rows, 1), jnp.float32),
            jnp.zeros(q.shape, jnp.float32))
    _, l, acc = jax.lax.fori_loop(0, n, step, init)
    o_ref[...] = acc / l


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, rows: int = 8, dim: int = 128,
          kernel=None):
    n = num_devices
    if n < 2:
        raise ValueError("needs at least 2 devices")
    mesh = jax.make_mesh((n,), (AXIS,))
    block = pl.BlockSpec((rows, dim), lambda i: (0, 0))
    call = pl.pallas_call(
        functools.partial(kernel or _kernel, n=n, rows=rows),
        out_shape=jax.ShapeDtypeStruct((rows, dim), jnp.float32),
        grid=(1,),
        in_specs=[block, block, block],
        out_specs=block,
        scratch_shapes=[pltpu.VMEM((2, rows, dim), jnp.float32), pltpu.VMEM((2, rows, dim), jnp.float32),
                        pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2, 2))],
        compiler_params=pltpu.CompilerParams(collective_id=0, dimension_semantics=("arbitrary",)),
        interpret=_interpret_params(dma_mode, interpret),
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(P(AXIS),) * 3, out_specs=P(AXIS), check_vma=False))
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((n * rows, dim)).astype(np.float32) * 0.1 for _ in range(3))
    put = functools.partial(jax.device_put, device=NamedSharding(mesh, P(AXIS)))
    return fn, (put(jnp.asarray(q)), put(jnp.asarray(k)), put(jnp.asarray(v)))


def reference(q, k, v, *, num_devices: int):
    scores = q @ k.T
    t = np.arange(q.shape[0])
    scores = np.where(t[None, :] <= t[:, None], scores, -np.inf)
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ v
