"""BUGGY: ring attention whose planning kernel gives the second call a per-device step count.

examples/programs/ring_attention_planned.py with the plan "saving" the second call's steps that would only
bring blocks no longer than the device's own: it counts the devices with a longer sequence and runs no more
second-half steps than that. The count is computed by the plan kernel (an earlier `pallas_call`) from the
lengths and the device's own length (specs/deciding/programs.md PRG-169).

BUG: the ring's steps are collective (each step meets both neighbours at a double barrier and exchanges
blocks), so the step count must be the same on every device. The device with the longest sequence runs no
second-half step while its neighbours run theirs: they wait at the barrier for signals that never come, a
deadlock on a TPU at every device count.

What the interpreter does: the same deadlock: the second ring call hangs in both DMA modes (the plan and the
first ring call complete).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _correct():
    path = Path(__file__).resolve().parents[1] / "ring_attention_planned.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_ring_attention_planned", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


planned = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return planned.build_with(num_devices, planned.ring.interpret_params(dma_mode, interpret), skip_short=True)


def reference(lens, mine, kv, *, num_devices: int):
    return planned.reference(lens, mine, kv, num_devices=num_devices)
