"""examples/jax_ops/ragged_all_to_all_offsets.py with every copy one row too long (BUG).

jax's ragged all-to-all (see ../ragged_all_to_all_offsets.py) copies
`pl.ds(offset, size)` rows of each group, `size` read from the sizes table,
into rows the output offsets give each (source, group) pair alone.

BUG: the copy is `pl.ds(offset, size + 1)` (line 43), an off-by-one that reads
one row past the group and writes one row past its slot. The extra row
lands on the first row of the next slot of the destination, which another
source's copy writes too: two copies from different devices write one row
with nothing ordering them (race-free violated; jax's race detector reports
it), and each device receives more bytes than its drain waits for
(dma-bytes). One spare row past the ends keeps every copy in bounds, so the
bug shows as a race and not as an out-of-bounds copy.

Fix: `pl.ds(offset, size)`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_PATH = Path(__file__).resolve().parents[1] / "ragged_all_to_all_offsets.py"
_spec = importlib.util.spec_from_file_location("_ragged_all_to_all_offsets", _PATH)
clean = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean)
AXIS, GPD = clean.AXIS, clean.GPD


def _kernel(x_ref, in_off_ref, size_ref, out_off_ref, sent_ref, recv_ref, _aliased, o_ref, send_sem,
            recv_sem, *, n):
    me = lax.axis_index(AXIS)
    groups = n * GPD
    step = pl.program_id(0)
    g = lax.rem(step + me, groups)
    size = size_ref[g]
    copy = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(in_off_ref[g], size + 1)], o_ref.at[pl.ds(out_off_ref[g], size + 1)],  # BUG
        send_sem, recv_sem, device_id={AXIS: g // GPD})

    @pl.when(size > 0)
    def _start():
        copy.start()

    @pl.when(step == groups - 1)
    def _drain():
        sent = sent_ref[0]
        pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, sent)], o_ref.at[pl.ds(0, sent)], send_sem, recv_sem,
            device_id={AXIS: g // GPD}).wait_send()
        received = recv_ref[0]
        pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, received)], o_ref.at[pl.ds(0, received)], send_sem, recv_sem,
            device_id={AXIS: g // GPD}).wait_recv()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None, sizes=None):
    return clean.build(num_devices, dma_mode=dma_mode, interpret=interpret, sizes=sizes, kernel=_kernel,
                       spare_rows=1)
