"""What else may change a tracked ref (`scalar_memory`): DMAs, scopes, other devices.

`ScalarStateRules` sits on top of the rule mixins (first in `Lowerer`'s bases):
once every rule is registered, it wraps two of them.

* `dma_start`: a copy into a tracked ref makes the ref unknown on the devices
  that start it, from its start on (the copy lands at some point before its
  wait; semcheck does not copy contents along, which is always sound);
* `run_scoped`: buffers tracked inside the body are forgotten when it ends.

Before the kernel runs, it finds every DMA that names a device (a remote
copy): another device's copy may land in this device's ref at any point of its
program, so refs of the shape and dtype such a copy writes are never tracked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax._src.pallas import primitives as pallas_prims
from jax._src.pallas.mosaic import primitives as tpu_prims

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import Evaluator, sub_jaxprs
from semcheck.checker.frontend.regions import flatten_ref
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.values import BufRef, Unknown


class ScalarStateRules(Evaluator):
    """Wraps `dma_start` and `run_scoped` to keep `self.memory` sound (module docstring)."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.memory.remote_signatures |= remote_dma_destinations(call.jaxpr, self._jaxpr_types)
        dma_start = self.rules.get(tpu_prims.dma_start_p)
        if dma_start is not None:
            self.rules[tpu_prims.dma_start_p] = self._wrap_dma_start(dma_start)
        run_scoped = self.rules.get(pallas_prims.run_scoped_p)
        if run_scoped is not None:
            self.rules[pallas_prims.run_scoped_p] = self._wrap_run_scoped(run_scoped)

    def _wrap_dma_start(self, rule: Any) -> Any:
        def dma_start(eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
            if self.memory:
                _src, dst, _dsem, _ssem, device_id = eqn.params["tree"].unflatten(invals)
                base, _ = flatten_ref(dst)
                if type(base) is BufRef and base.name in self.memory:
                    if device_id is not None:
                        # `remote_dma_destinations` keeps such refs untracked; never rely on a value
                        # another device's copy may overwrite at any time
                        raise Unsupported(eqn.primitive.name, "a remote DMA writes a ref whose contents "
                                          "semcheck follows as control data", self.loc(eqn))
                    why = Unknown("a ref a DMA writes (semcheck does not copy contents along)", self.loc(eqn))
                    self.memory.clobber(base.name, self.active(mask), why)
            return rule(eqn, invals, mask)

        return dma_start

    def _wrap_run_scoped(self, rule: Any) -> Any:
        def run_scoped(eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
            self.memory.push_scope()
            try:
                return rule(eqn, invals, mask)
            finally:
                self.memory.pop_scope()

        return run_scoped


def remote_dma_destinations(jaxpr: Any, jaxpr_types: tuple[type, ...]) -> set[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of the base ref of every DMA destination in `jaxpr` that names a device."""
    out: set[tuple[tuple[int, ...], str]] = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive is tpu_prims.dma_start_p:
            avals = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])
            if avals[4] is not None:
                base, _ = flatten_ref(avals[1])
                shape = tuple(int(s) for s in getattr(base, "shape", ()))
                try:
                    out.add((shape, str(np.dtype(base.dtype))))
                except (TypeError, AttributeError):
                    pass
        for sub in sub_jaxprs(eqn.params, jaxpr_types):
            out |= remote_dma_destinations(getattr(sub, "jaxpr", sub), jaxpr_types)
    return out
