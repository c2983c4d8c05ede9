"""BUGGY: ring attention whose causal block skipping skips the arrival's wait too.

Pattern: as examples/ring_attention_causal_skip.py: K/V blocks travel right
round the ring in two slots; a `lax.cond` skips the compute of a block that
is entirely in the device's future, and every block is forwarded.

Bug: the wait for a block's arrival was moved into the `lax.cond` with its
compute (line 53), so a skipped block is never waited: device 0 skips every
block after its own.  Each skipped arrival leaves its bytes on device 0's
receive semaphores at exit, and from 4 devices on device 0's next forward
(line 61; the copy starts at line 64 of the clean kernel) reads the slot the
left neighbour's copy may still be writing (a data race).  At 2 devices the
skipped block is the last one, never forwarded: no race there, and on a TPU
the unwaited copy may land after device 0 has left the kernel.

Expected semcheck report: exit-balance and dma-bytes violated in every mode
at 2 and 4 devices, race-free from 4 devices, invocation-confined under
hardware.  Ids and deadlock hold.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _clean():
    path = Path(__file__).resolve().parent.parent / "ring_attention_causal_skip.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_ring_attention_causal_skip", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_c = _clean()


def _kernel(q_ref, k_ref, v_ref, o_ref, k_buf, v_buf, send_sems, recv_sems, *, n, rows):
    k_buf[0] = k_ref[...]
    v_buf[0] = v_ref[...]
    q = q_ref[...]

    def step(s, state):
        def arrive_and_attend(st):
            @pl.when(s > 0)
            def _():
                for c in _c.kv_copies(k_buf, v_buf, send_sems, recv_sems, s - 1, n=n):
                    c.wait_recv()  # BUG: skipped with the compute when the block is in the future

            return _c.attend(q, k_buf, v_buf, s, st, n=n, rows=rows)

        state = jax.lax.cond(_c.visible(s, n=n), arrive_and_attend, lambda st: st, state)

        @pl.when(s < n - 1)
        def _():
            _c.forward(k_buf, v_buf, send_sems, recv_sems, s, n=n)
            for c in _c.kv_copies(k_buf, v_buf, send_sems, recv_sems, s, n=n):
                c.wait_send()

        return state

    init = (jnp.full((rows, 1), -jnp.inf, jnp.float32), jnp.zeros((rows, 1), jnp.float32),
            jnp.zeros(q.shape, jnp.float32))
    _, l, acc = jax.lax.fori_loop(0, n, step, init)
    o_ref[...] = acc / l


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _c.build(num_devices, dma_mode=dma_mode, interpret=interpret, kernel=functools.partial(_kernel))


def reference(q, k, v, *, num_devices: int):
    return _c.reference(q, k, v, num_devices=num_devices)
