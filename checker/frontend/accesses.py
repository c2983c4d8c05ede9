"""Kernel ref accesses: loads from and stores to refs inside the kernel body.

Their values are opaque (`Unknown`): the front end never tracks buffer
contents. A load or store of a semaphore ref is refused. The IR's `Access`
ops, when the front end emits them, are built here, next to the DMA rules
of `sync_rules` that they are checked against.
"""

from __future__ import annotations

from typing import Any

from jax._src.pallas import primitives as pallas_prims
from jax._src.state import primitives as state_prims
from jax._src.state import types as state_types

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import Evaluator
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.values import SemArray, Unknown


class AccessRules(Evaluator):
    """`ref[...]`, `ref[...] = x`, `ref[...] += x`, `pl.load`, `pl.store`/`pl.swap`."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.rules.update({
            state_prims.get_p: self._ref_read,
            state_prims.swap_p: self._ref_read,
            state_prims.addupdate_p: self._ref_read,
            pallas_prims.load_p: self._ref_read,
            pallas_prims.swap_p: self._ref_read,
        })

    def _ref_read(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        ref = invals[0] if invals else None
        if isinstance(ref, state_types.TransformedRef):
            ref = ref.ref
        if isinstance(ref, SemArray):
            raise Unsupported(eqn.primitive.name, "loads and stores of a semaphore ref", self.loc(eqn))
        why = "a value loaded from a ref"
        loc = self.loc(eqn)
        return [Unknown(why, loc) for _ in eqn.outvars]
