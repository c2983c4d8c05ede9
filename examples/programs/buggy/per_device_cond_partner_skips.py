"""BUGGY: a communicating kernel under a `lax.cond` on the device's index, which its partner skips.

Pattern: examples/programs/per_device_cond.py (ring kernel, then a call only some devices run, then the
pairwise kernel), but the call under the cond is the pairwise exchange itself (collective_id 1: signal the
partner `d ^ 1`, wait for its signal, copy the block to it), run only by the even devices.

BUG: every even device's partner is odd, and the odd devices skip the exchange: on a TPU each even device
waits at its barrier for a signal no device sends, and the program hangs (deadlock-free violated, at the
barrier wait of the pairwise kernel that devices 0, 2, ... run). semcheck gives each device its own call
sequence (specs/deciding/programs.md PRG-145): the even devices (ring, pairwise), the odd ones (ring).

What the interpreter does: hangs, at 2 and 4 devices in both DMA modes (the recorded runs are killed after 40 s):
the even devices wait in the pairwise kernel for their partners' signals, and the odd devices, which have finished,
never reach its clean-up barrier (specs/semantics/calls.md PRG-179). The even devices run one call more, so
semcheck says deadlock-free violated in those modes (specs/deciding/programs.md PRG-180); the ring kernel keeps its
proofs; the pairwise kernel's other seven properties are proved (2 and 4 devices) over what every run reaches
before the hang (PRG-211, PRG-212): only the even devices run it, each signalling its partner's barrier semaphore
(which the finished partner never reads) and then waiting at the barrier for good, so its copy never starts. (Under
`hardware`, where the odd devices exit with that signal unconsumed and no copy reaches the even devices' receive
semaphores, exit-balance and dma-bytes are violated too.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
from jax.sharding import PartitionSpec as P


def _correct():
    path = Path(__file__).resolve().parents[1] / "per_device_cond.py"
    spec = importlib.util.spec_from_file_location("semcheck_programs_per_device_cond", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pc = _correct()
tp = pc.tp


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    if num_devices % 2:
        raise ValueError("the pairwise kernel needs an even number of devices")
    params = pc.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (pc.AXIS,))

    def program(x):
        y = tp.call(tp._ring_kernel, x, 0, params)
        even = jax.lax.rem(jax.lax.axis_index(pc.AXIS), 2) == 0
        # BUG: the partner of an even device is odd, and the odd devices do not run the exchange
        return jax.lax.cond(even, lambda v: tp.call(tp._pair_kernel, v, 1, params), lambda v: v, y)

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=P(pc.AXIS), out_specs=P(pc.AXIS), check_vma=False))
    return fn, (pc._input(mesh, num_devices),)
