"""The front end's one table of synchronisation primitives: jax's semaphore and DMA primitives, and
`run_scoped` (which allocates semaphores and buffers for its body).

Everything that reads jax's primitives as synchronisation reads this table: the lowering's rules
(`sync_rules`, `dma_rules`), the size bound (`size_bound`), the rotation certificate
(`rotation_obligations`, `rotation_walk`), every-N's templates (`parametric.template`) and the
prediction of what the interpreter translates (`interpreter_lowering`); `tests/test_primitive_audit.py`
ties it to the lowering's rule tables and to the audit's kernels. Names as `Primitive.name` spells
them, so that readers which never import jax can use it.
"""

from __future__ import annotations

from typing import Any

# name -> the jax module whose `<name>_p` it is: "tpu" (`pallas/mosaic/primitives.py`) or "pallas"
# (`pallas/primitives.py`)
_HOME = {
    "get_barrier_semaphore": "tpu",
    "semaphore_signal": "pallas",
    "semaphore_wait": "pallas",
    "semaphore_read": "pallas",
    "dma_start": "tpu",
    "dma_wait": "tpu",
    "run_scoped": "pallas",
}

SEMAPHORE = frozenset({"get_barrier_semaphore", "semaphore_signal", "semaphore_wait", "semaphore_read"})
DMA = frozenset({"dma_start", "dma_wait"})
SYNC = SEMAPHORE | DMA
"""The semaphore and DMA primitives."""
SCOPE = "run_scoped"
SYNC_OR_SCOPE = SYNC | {SCOPE}
"""The primitives whose presence in a sub-jaxpr matters to the program."""
NO_INTERPRETER_CASE = frozenset({"semaphore_read"})
"""The semaphore and DMA primitives jax's interpreter has no case of its own for (`_interpret_jaxpr` of
`pallas/mosaic/interpret/interpret_pallas_call.py`, jax 0.12, handles the others itself): it lowers them
through MLIR, which has no CPU rule for them (LAUNCH-3; pinned in tests/test_primitive_audit.py)."""
INTERPRETED = SYNC - NO_INTERPRETER_CASE
DEVICE_ID_OPERAND = {"dma_start": ("tree", 4), "dma_wait": ("tree", 4), "semaphore_signal": ("args_tree", 3)}
"""Where a copy's or signal's target device id sits among its operands: the parameter holding the operand
tree, and the position in it (`None` there: this device)."""


def primitive(name: str) -> Any:
    """jax's primitive object of `name`, a name of the table."""
    from jax._src.pallas import primitives as pallas_prims  # lazy: readers of the names need no jax
    from jax._src.pallas.mosaic import primitives as tpu_prims

    return getattr(tpu_prims if _HOME[name] == "tpu" else pallas_prims, f"{name}_p")


def primitives(names: frozenset[str]) -> frozenset[Any]:
    return frozenset(primitive(n) for n in names)
