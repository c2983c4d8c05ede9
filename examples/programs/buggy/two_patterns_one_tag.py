"""BUGGY (from 4 devices): a ring kernel and a pairwise kernel share one barrier-semaphore tag.

Pattern: examples/programs/two_patterns_two_tags.py (a ring kernel, then a pairwise kernel, each
asking for its barrier semaphore with a tag, so that jax picks the collective id) with one tag,
"x", for both.

BUG: kernels with one tag get one collective id (specs/semantics/calls.md PRG-5: a tag is keyed with
`skip_device_barrier`, not with the kernel), so this is
examples/programs/buggy/shared_collective_id_two_patterns.py with the id chosen by jax: on one barrier
semaphore a pairwise signal can be counted by a ring wait, and from 4 devices a ring copy lands in a
device that has not entered the ring call (invocation-confined violated, PRG-17, PRG-125). On 2
devices the ring and pairwise partners coincide and the program is correct.

What the interpreter does: fails at the ring call's `get_barrier_semaphore` with `TypeError: int()
argument must be a string, a bytes-like object or a real number, not 'NoneType'`, in both DMA modes
(the interpreter uses no tags, PRG-13): it cannot show the mix-up.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def _correct():
    path = Path(__file__).resolve().parents[1] / "two_patterns_two_tags.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_two_tags", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tt = _correct()
SHARED_TAG = "x"  # BUG: the ring and the pairwise kernel ask for one barrier semaphore


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    return tt.build(num_devices, dma_mode=dma_mode, interpret=interpret, ring_tag=SHARED_TAG,
                    pair_tag=SHARED_TAG)


def reference(x, *, num_devices: int):
    return np.asarray(tt.reference(x, num_devices=num_devices))
