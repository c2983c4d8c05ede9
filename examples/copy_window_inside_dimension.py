"""CLEAN: a conv state copy that is skipped when it is empty.

The fix of examples/buggy/copy_window_at_dimension_end.py: the kernel starts and waits for the
state copy only when it moves rows (`STATE_ROWS > 0`, known while the kernel is traced), so no window
ever starts at the end of the row dimension; with state rows, `lens[b] - STATE_ROWS` stays inside.

Expected semcheck verdict: all properties proved in every mode.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax.numpy as jnp
from jax.experimental import pallas as pl


def _buggy():
    path = Path(__file__).resolve().parent / "buggy" / "copy_window_at_dimension_end.py"
    spec = importlib.util.spec_from_file_location("semcheck_example_copy_window_at_dimension_end", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_b = _buggy()


def _kernel(lens_ref, x_hbm, o_ref, state, sem):
    if _b.STATE_ROWS > 0:  # an empty copy is not started: its window would start at the end of the rows
        copy = _b.state_copy(x_hbm, state, sem, lens_ref)
        copy.start()
        copy.wait()
    o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype) + lens_ref[pl.program_id(0)].astype(jnp.float32)


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return _b.build(num_devices, dma_mode=dma_mode, interpret=interpret, kernel=_kernel)


def reference(lens, x, *, num_devices: int):
    return _b.reference(lens, x, num_devices=num_devices)
