"""examples/jax_ops/dynamic_dma_2nd_minor.py waiting on a descriptor one row short (BUG).

The copy moves `size` rows (read from SMEM, see ../dynamic_dma_2nd_minor.py);
the kernel waits on a second descriptor built with `size - 1` rows, an
off-by-one, so each device waits for one row fewer than its copy delivers:
the wait can pass before the copy's last row has landed and the semaphore
ends the kernel with one row's bytes on it (dma-bytes and exit-balance
violated). Fix: wait on the copy's own descriptor.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_PATH = Path(__file__).resolve().parents[1] / "dynamic_dma_2nd_minor.py"
_spec = importlib.util.spec_from_file_location("_dynamic_dma_2nd_minor", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)


def _kernel(array, data, index, size, _out, sem):
    del _out
    pltpu.async_copy(data.at[pl.ds(0, size[0])], array.at[pl.ds(index[0], size[0])], sem)
    short = size[0] - 1  # BUG: one row short
    pltpu.make_async_copy(data.at[pl.ds(0, short)], array.at[pl.ds(index[0], short)], sem).wait()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, index=None, size=None):
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, index=index, size=size,
                       kernel=_kernel)
