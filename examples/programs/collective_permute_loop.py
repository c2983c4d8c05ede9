"""A collective permute built from a remote start/done program in a fori_loop (correct).

Pattern (the collective-permute loop of jax's tests/pallas/tpu_pallas_async_test.py, written anew,
with the building blocks of examples/programs/async_remote_copy.py): every loop iteration calls the
right-going remote start kernel (barrier on collective_id 0, copy to the right neighbour), then its
send-done and receive-done kernels; `num_devices - 1` iterations move every device's block all the
way round but one step, i.e. one device to the left.

What is right: the same start kernel is invoked repeatedly on one collective id with a single
barrier, and that is safe here: a device finishes an iteration only after receiving its left
neighbour's copy, which that neighbour starts after its barrier of the same iteration, so no device
can signal a neighbour for iteration k + 1 before the neighbour passed iteration k's barrier
(specs/deciding/confined.md PRG-16); three invocations of the body suffice to decide it (PRG-7).

What the interpreter does: lowering fails with `NotImplementedError: nan + dma_sem` (PRG-12, D21)
before any call starts, in both DMA modes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import numpy as np
from jax.sharding import PartitionSpec as P


def _blocks():
    path = Path(__file__).resolve().with_name("async_remote_copy.py")
    spec = importlib.util.spec_from_file_location("semcheck_programs_async_remote_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rc = _blocks()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = rc.interpret_params(dma_mode, interpret)

    def body(_, x):
        x, fut = rc.remote_start(x, params, "right")
        x = rc.send_done(x, fut, params)
        return rc.recv_done(x, fut, params)

    def program(x):
        return jax.lax.fori_loop(0, num_devices - 1, body, x)

    mesh, fn = rc.sharded(program, num_devices, P(rc.AXIS))
    return fn, (rc.example_input(mesh, num_devices),)


def reference(x, *, num_devices: int):
    parts = np.asarray(x).reshape(num_devices, rc.ROWS, rc.LANES)
    return np.roll(parts, -1, axis=0).reshape(-1, rc.LANES)
