"""BUGGY (from 4 devices): in one branch of a `lax.cond`, two kernels with different patterns share an id.

Pattern: examples/programs/cond_two_patterns.py with the flag false (the pairwise-first branch runs)
and, in that branch, the ring kernel on the pairwise kernel's collective id 1.

BUG: the pairwise-first branch is examples/programs/buggy/shared_collective_id_two_patterns.py in the
other order: on one barrier semaphore a ring signal can be counted by a pairwise wait or the other
way round, and from 4 devices a copy lands in a device outside its call (invocation-confined violated,
PRG-17). The front end follows the branch the build's flag takes (PRG-126); the other branch is
correct. On 2 devices the two patterns coincide and the program is correct.

What the interpreter does: completes with the right numbers in both DMA modes (PRG-10): it cannot
show the mix-up.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np


def _correct():
    path = Path(__file__).resolve().parents[1] / "cond_two_patterns.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_cond_one_id", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cp = _correct()


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    # BUG: the pairwise-first branch's ring call uses the pairwise kernel's id
    return cp.build(num_devices, dma_mode=dma_mode, interpret=interpret, ring_first=False, second_ring_id=1)


def reference(x, flag, *, num_devices: int):
    return np.asarray(cp.reference(x, flag, num_devices=num_devices))
