"""BUGGY: a ring exchange per ragged chunk, inside a loop whose trip count differs between devices.

Pattern: examples/programs/ragged_chunks_while.py (device d processes its own `2 + d % 2` chunks in a `fori_loop`
bounded by its chunk count), where each chunk's accumulator is also passed one device to the right by the shift
kernel of examples/programs/repeated_shift_double_barrier.py (a barrier with both neighbours on the barrier
semaphore, then a remote copy into the right neighbour).

BUG: the shift kernel communicates, and the devices with three chunks run it once more than their neighbours. On
a TPU that third call signals both neighbours and waits for their two signals at the barrier, which never come:
the neighbours have left the loop after two chunks. semcheck gives each device its own calls
(specs/deciding/programs.md PRG-197) and says deadlock-free violated under `hardware` at that wait (with
exit-balance and dma-bytes: the neighbours exit with the signals of the extra call unconsumed).
What the interpreter does: hangs, at 2 and 4 devices in both DMA modes (the recorded runs are killed after 40 s):
the devices' numbers of calls differ, and each call ends at a clean-up barrier of every device (PRG-179, PRG-180).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_HERE = Path(__file__).resolve().parent
ragged = _load(_HERE.parent / "ragged_chunks_while.py", "semcheck_programs_ragged_chunks_while")
shifts = _load(_HERE.parent / "repeated_shift_double_barrier.py", "semcheck_programs_repeated_shift_double_barrier")
AXIS, MAX_CHUNKS, ROWS, LANES = ragged.AXIS, ragged.MAX_CHUNKS, ragged.ROWS, ragged.LANES


def build(num_devices: int, *, dma_mode: str = "eager", interpret=None):
    params = ragged.interpret_params(dma_mode, interpret)
    mesh = jax.make_mesh((num_devices,), (AXIS,))

    def program(counts, chunks):
        def step(i, acc):
            acc = ragged.square_add(jax.lax.dynamic_index_in_dim(chunks, i, keepdims=False), acc, params)
            # BUG: a communicating call in a loop whose trip count differs between devices
            return shifts.shift(acc, double_barrier=True, params=params)

        return jax.lax.fori_loop(0, counts[0], step, jnp.zeros((ROWS, LANES), chunks.dtype))

    fn = jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS),
                               check_vma=False))
    chunks = (jnp.arange(num_devices * MAX_CHUNKS * ROWS * LANES, dtype=jnp.float32) % 13).reshape(
        num_devices * MAX_CHUNKS, ROWS, LANES)
    return fn, (jax.device_put(jnp.asarray(ragged.chunk_counts(num_devices)), NamedSharding(mesh, P(AXIS))),
                jax.device_put(chunks, NamedSharding(mesh, P(AXIS))))


def reference(counts, chunks, *, num_devices: int):
    """What the program would compute if every device ran as many chunks as the most (it hangs instead)."""
    parts = np.asarray(chunks).reshape(num_devices, MAX_CHUNKS, ROWS, LANES)
    acc = np.zeros((num_devices, ROWS, LANES), np.float32)
    for i in range(int(np.max(counts))):
        acc = np.roll(acc + parts[:, i] ** 2, 1, axis=0)
    return acc.reshape(-1, LANES)
