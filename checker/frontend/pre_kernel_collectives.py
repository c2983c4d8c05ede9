"""Collectives computed before a kernel, run by jax on the target's own mesh (ACC-8).

`concrete_inputs` evaluates a `shard_map` body once per device. A collective
(`lax.pmax` of per-device group counts, a `psum`, an `all_gather`, a
`ppermute`) needs every device's input at once, so the body is evaluated in
passes (`Rounds`): each pass runs every device, a collective whose inputs are
then known on every device is run once by jax, and the next pass reads its
per-device outputs. jax runs the collective's own equation inside a
`shard_map` over the same mesh and manual axes, on each device's value, so a
collective means exactly what it means in the program (semcheck never
re-implements one). Nothing here guesses: a collective that jax cannot run this
way (an abstract mesh, a failure) has no value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# Primitives whose result is not a function of the example arrays: host callbacks (any Python,
# possibly random or stateful) and XLA's stateful random number generator.
NOT_DETERMINISTIC = ("pure_callback", "io_callback", "debug_callback", "callback", "rng_uniform")

# Each pass resolves at least one more collective or stops; a chain deeper than this is unknown.
MAX_PASSES = 8


class Rounds:
    """The collectives of one `shard_map` body, per pass: their inputs per device, then their outputs."""

    def __init__(self, mesh: Any, names: Sequence[str], lanes: int) -> None:
        self.mesh = mesh
        self.names = tuple(names)
        self.lanes = lanes
        self.seq = 0  # the collective the running device reaches next (SPMD: the same on every device)
        self._inputs: dict[int, dict[int, list[Any]]] = {}
        self._outputs: dict[int, list[list[Any]] | None] = {}
        self._eqns: dict[int, Any] = {}

    def start_device(self) -> None:
        self.seq = 0

    def reach(self, eqn: Any, invals: list[Any], lane: int) -> list[Any] | None:
        """The running device reaches collective `eqn` with `invals`: its outputs, once known."""
        k = self.seq
        self.seq += 1
        if self._eqns.setdefault(k, eqn) is not eqn:
            return None  # devices disagree on which collective comes next: no value
        done = self._outputs.get(k)
        if done is not None:
            return done[lane]
        if all(x is not None for x in invals):
            self._inputs.setdefault(k, {})[lane] = invals
        return None

    def resolve(self) -> bool:
        """Run every collective whose inputs every device now knows; whether one gained values."""
        gained = False
        for k, per_lane in self._inputs.items():
            if k in self._outputs or len(per_lane) != self.lanes:
                continue
            outs = run_collective(self._eqns[k], self.mesh, self.names, [per_lane[i] for i in range(self.lanes)])
            self._outputs[k] = outs
            gained = gained or outs is not None
        return gained


def run_collective(eqn: Any, mesh: Any, names: Sequence[str], per_lane: list[list[Any]]) -> list[list[Any]] | None:
    """`eqn` run by jax over `mesh`'s manual axes `names`, device `lane` given `per_lane[lane]`.

    Lanes are the devices in row-major order of `names` (as `concrete_inputs` numbers them); the
    inputs go in stacked on those axes, so each device's shard is its own value.
    """
    import jax  # lazy: see trace's docstring
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    if not isinstance(mesh, Mesh):
        return None  # an abstract mesh (RUN-14) has no devices to run on
    sizes = tuple(mesh.shape[a] for a in names)
    lanes = math.prod(sizes)
    k = len(names)
    stacked = [np.stack([np.asarray(v[i]) for v in per_lane]).reshape(*sizes, *np.shape(per_lane[0][i]))
               for i in range(len(eqn.invars))]
    spec = P(*names)

    def body(*xs: Any) -> list[Any]:
        xs = [x.reshape(x.shape[k:]) for x in xs]
        got = eqn.primitive.get_bind_params(eqn.params)
        subfuns, params = got if isinstance(got, tuple) else ((), got)
        out = eqn.primitive.bind(*subfuns, *xs, **params)
        outs = list(out) if eqn.primitive.multiple_results else [out]
        return [o.reshape((1,) * k + o.shape) for o in outs]

    placed = [jax.device_put(x, NamedSharding(mesh, spec)) for x in stacked]
    outs = None
    # the body's inputs vary over every manual axis; a program traced without the check
    # (check_vma=False) may bind a collective that only the unchecked form accepts
    for check in (True, False):
        try:
            f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec,) * len(placed),
                                      out_specs=spec, check_vma=check))
            outs = [np.asarray(o) for o in f(*placed)]
            break
        except Exception:  # noqa: BLE001 - no value, never a guess
            continue
    if outs is None:
        return None
    return [[o.reshape(lanes, *o.shape[k:])[lane] for o in outs] for lane in range(lanes)]


__all__ = ["MAX_PASSES", "NOT_DETERMINISTIC", "Rounds", "run_collective"]
