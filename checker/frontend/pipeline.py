"""`pltpu.emit_pipeline`: expanded into its jaxpr, as the interpreter does.

The expansion's own semaphore and DMA ops are reported at the
`emit_pipeline` line; the user's pipeline body runs with the pipeline's step
indices as its grid (what `program_id` returns inside it).
"""

from __future__ import annotations

from typing import Any

from jax._src import tree_util
from jax._src.pallas.mosaic import pipeline as mosaic_pipeline

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import Evaluator
from semcheck.checker.frontend.trace import KernelCall


class PipelineRules(Evaluator):
    """`emit_pipeline` (expanded once per equation and cached) and its `pipeline_body`."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self._pipeline_cache: dict[int, Any] = {}
        self.rules[mosaic_pipeline.emit_pipeline_p] = self._emit_pipeline
        self.rules[mosaic_pipeline.pipeline_body_p] = self._pipeline_body
        self.sem_prims.add(mosaic_pipeline.emit_pipeline_p)

    def _emit_pipeline(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        gm = self.call.grid_mapping
        key = id(eqn)
        jaxpr = self._pipeline_cache.get(key)
        if jaxpr is None:
            avals_in = [v.aval for v in eqn.invars]
            try:
                jaxpr = mosaic_pipeline.emit_pipeline_to_jaxpr(
                    avals_in,
                    grid_names=getattr(gm, "grid_names", None),
                    grid_sizes=tuple(self.call.grid),
                    **eqn.params,
                )
            except Exception as e:
                raise Unsupported("emit_pipeline", f"expanding the pipeline failed: {type(e).__name__}: {e}",
                                  self.loc(eqn)) from e
            self._pipeline_cache[key] = (jaxpr, eqn)
        else:
            jaxpr = jaxpr[0]
        outer = self.loc_override
        self.loc_override = self.loc(eqn)
        try:
            self.eval_closed(jaxpr, invals, mask)
        finally:
            self.loc_override = outer
        return []

    def _pipeline_body(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        ps, body_consts, refs = eqn.params["in_tree"].unflatten(invals)
        ps_flat, _ = tree_util.tree_flatten(ps)
        if eqn.params.get("_explicit_indices", False):
            body_invals = [*body_consts, *ps_flat, *refs]
        else:
            body_invals = [*body_consts, *refs]
        cur = self.grid_env[-1] if self.grid_env else ()
        env = tuple(
            (self.known(idx, eqn, "the pipeline step index"), cur[i][1] if i < len(cur) else 0)
            for i, idx in enumerate(ps.index)
        ) + tuple(cur[len(ps.index) :])
        self.grid_env.append(env)
        outer = self.loc_override
        self.loc_override = None  # the body is the user's code
        try:
            self.eval_sub(eqn, eqn.params["jaxpr"], body_invals, mask, closed=False)
        finally:
            self.loc_override = outer
            self.grid_env.pop()
        return []
