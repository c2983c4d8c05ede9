"""BUGGY: the collective-permute loop's start kernel synchronises but never starts its copy.

Pattern: examples/programs/collective_permute_loop.py, with the start kernel of
examples/programs/buggy/async_remote_copy_recv_done_without_start.py (barrier handshake, no copy) in
the loop body.

BUG: the send-done kernel of the first iteration waits on a send semaphore no copy feeds: on a TPU
every device hangs there (deadlock-free violated, naming the send-done call of iteration 0 and the
start call whose result it waits on).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem`
(specs/semantics/calls.md PRG-12) before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.sharding import PartitionSpec as P


def _load(name):
    path = Path(__file__).resolve().parent / f"{name}.py"
    if not path.exists():
        path = Path(__file__).resolve().parents[1] / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"semcheck_programs_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rc = _load("async_remote_copy")
no_start = _load("async_remote_copy_recv_done_without_start")


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = rc.interpret_params(dma_mode, interpret)

    def body(_, x):
        x, fut = no_start.fake_start(x, params)  # BUG: synchronises, starts nothing
        x = rc.send_done(x, fut, params)
        return rc.recv_done(x, fut, params)

    mesh, fn = rc.sharded(lambda x: jax.lax.fori_loop(0, num_devices - 1, body, x), num_devices,
                          P(rc.AXIS))
    return fn, (rc.example_input(mesh, num_devices),)
