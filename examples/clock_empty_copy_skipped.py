"""CLEAN: a halo copy that is skipped when it is empty, under jax's race detector.

The fix of examples/buggy/clock_empty_copy_wait.py: the kernel starts and waits for the
halo copy only when it moves rows (`HALO_ROWS > 0`, known while the kernel is traced), so no wait
for 0 bytes meets a semaphore that no signal has reached (RACE-1).

Expected semcheck verdict: all properties proved in every mode.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax.numpy as jnp


def _buggy():
    path = Path(__file__).resolve().parent / "buggy" / "clock_empty_copy_wait.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_clock_empty_copy_wait", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_b = _buggy()


def _kernel(x_hbm, o_ref, halo, sem):
    if _b.HALO_ROWS > 0:  # an empty copy is not started: its wait would run no task under on_wait
        copy = _b.halo_copy(x_hbm, halo, sem)
        copy.start()
        copy.wait()
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype) + jnp.float32(_b.HALO_ROWS)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _b.build(num_devices, dma_mode=dma_mode, interpret=interpret, kernel=_kernel)


def reference(x, *, num_devices: int):
    return _b.reference(x, num_devices=num_devices)
