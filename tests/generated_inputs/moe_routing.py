"""The expert-parallel MoE of examples/moe_dispatch_combine.py on routings a hypothesis strategy draws
(ACC-9, RUN-8).

A drawn list of expert choices (integers, taken modulo the device count) is laid out over every
device's tokens (repeated, so hypothesis shrinks a list, not a shape): the kernel counts them per
expert, exchanges the counts by remote copies and sizes its copies, waits and branches with them.
`moe_routing_combine_bug` is examples/buggy/moe_combine_waits_wrong_count.py on the same routings: it
hangs exactly when some device sends an expert another number of rows than that expert sends it.

Used by tests/frontend/test_followed_values.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

import semcheck

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CHOICES = st.lists(st.integers(0, 7), min_size=1, max_size=12)


def _example(relative: str):
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(f"_moe_routing_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def routing(choices, num_devices: int, tokens: int) -> np.ndarray:
    """Expert of token t of device d: choices[(d * tokens + t) mod len(choices)] mod N."""
    flat = [choices[i % len(choices)] % num_devices for i in range(num_devices * tokens)]
    return np.asarray(flat, np.int32)


@semcheck.target(devices=(2, 4), inputs=CHOICES)
def moe_routing(num_devices: int, choices: list[int]):
    m = _example("moe_dispatch_combine.py")
    return m.build(num_devices, routing=routing(choices, num_devices, m.TOKENS))


@semcheck.target(devices=(2,), inputs=CHOICES)
def moe_routing_combine_bug(num_devices: int, choices: list[int]):
    m = _example("buggy/moe_combine_waits_wrong_count.py")
    return m.build(num_devices, routing=routing(choices, num_devices, m.TOKENS))
