"""The same kernels with the interpreter's on_wait DMA mode (DMAs run when awaited)."""

from __future__ import annotations

import semcheck

import ring_allreduce
import scoped


@semcheck.target(devices=(2, 4))
def ring_on_wait(num_devices: int):
    return ring_allreduce.build(num_devices, dma_mode="on_wait")


@semcheck.target(devices=(2, 4))
def scoped_on_wait(num_devices: int):
    return scoped.build(num_devices, dma_mode="on_wait")
