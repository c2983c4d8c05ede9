"""PRG-145 for the program walk (`program_walk`): values known device by device inside a `shard_map`, and a
`cond` whose branch differs between devices, each branch walked for the devices that take it.

A mixin of `program_walk._Walker`: it reads the walker's state (`_lanes`, each device's coordinates; `_per`,
the values known device by device; `_devices`, the devices of the branch being walked). Imports of jax sit in the
functions.
"""

from __future__ import annotations

from typing import Any

from semcheck.checker.frontend.program_ir import Outside, Produced, deps_of, Stop
from semcheck.checker.frontend.pre_kernel_order import order_refusal
from semcheck.checker.frontend.program_jaxpr import (
    MAX_FOLD, UNIFORM_COLLECTIVES, branching_collective, collective_in, device_dependent, subs)
from semcheck.checker.frontend.trace import eqn_loc


class PerDevice:
    """The walker's per-device values and per-device conds (PRG-145)."""

    def _lane_values(self, x: Any, v: Any) -> list[Any] | None:
        """PRG-145: the value of `x` on each device, where the walk knows it on every device."""

        if self._lanes is None:
            return None
        uniform, value = self._about(x, v)
        if uniform and value is not None:
            return [value] * len(self._lanes)
        return self._per.get(v.ident) if isinstance(v, Outside) and v.ident else None

    def _fold_lanes(self, eqn: Any, ins: list[Any], outs: list[Any]) -> None:
        """PRG-145: an XLA op's results device by device, where its operands are known on every device
        (`axis_index` is the device's coordinate); a `jit` is walked operation by operation instead (`walk`)."""
        import numpy as np


        if self._lanes is None or subs(eqn):
            return
        if eqn.primitive.name == "axis_index":
            axis = eqn.params["axis_name"]
            if axis in self._lanes[0] and len(outs) == 1 and isinstance(outs[0], Outside):
                self._per[outs[0].ident] = [np.asarray(c[axis], dtype=np.int32) for c in self._lanes]
            return
        per = [self._lane_values(x, v) for x, v in zip(eqn.invars, ins)]
        if not per or any(p is None for p in per) or all(self._about(x, v)[0] for x, v in zip(eqn.invars, ins)):
            return
        if any(int(np.size(p[0])) > MAX_FOLD for p in per):
            return
        lanes: list[list[Any]] = []
        try:
            import jax

            for lane in range(len(self._lanes)):
                with jax.ensure_compile_time_eval():
                    got = eqn.primitive.bind(*[p[lane] for p in per], **eqn.params)
                got = got if eqn.primitive.multiple_results else [got]
                lanes.append([np.asarray(g) for g in got])
        except Exception:  # noqa: BLE001 - a value the walk cannot compute is only not known
            return
        if any(order_refusal(eqn, [p[lane] for p in per], got) for lane, got in enumerate(lanes)):
            return  # ACC-33: an order the implementation chooses: not known
        for k, v in enumerate(outs):
            if isinstance(v, Outside) and v.ident and all(k < len(got) for got in lanes):
                self._per[v.ident] = [got[k] for got in lanes]

    def _split_collective(self, eqn: Any, ins: list[Any]) -> None:
        """PRG-201: Stop where an XLA collective of `eqn` (an operation without kernel calls) may be run by only some
        devices: inside a branch or loop iteration the walk follows for some devices, or inside a `cond` or `while`
        loop whose branch or trip count may differ between devices. Each device that runs a collective waits for the
        others of its group, so such a program may hang outside any kernel."""
        import numpy as np

        if self._devices is not None:
            found = collective_in(eqn)
            if found is not None:
                raise Stop(f"an XLA collective ({found.primitive.name}) inside a cond branch or loop iteration that "
                           f"only devices {sorted(self._devices)} run: the others never join it, and it waits for "
                           "them (not modelled, PRG-201)", eqn_loc(found))
        found = branching_collective(eqn)
        if found is None:
            return
        if eqn.primitive.name == "cond":
            uniform, _ = self._about(eqn.invars[0], ins[0])
            lanes = None if uniform else self._lane_values(eqn.invars[0], ins[0])
            last = len(eqn.params["branches"]) - 1
            if uniform or (lanes is not None and len({int(np.clip(int(np.asarray(v).reshape(-1)[0]), 0, last))
                                                       for v in lanes}) == 1):
                return
        elif not device_dependent(eqn) and all(self._about(x, v)[0] for x, v in zip(eqn.invars, ins)):
            return  # PRG-126: every cond and loop inside runs alike on every device
        raise Stop(f"an XLA collective ({found.primitive.name}) inside a {eqn.primitive.name} whose branch or trip "
                   "count may differ between devices: a device that runs it waits for the others of its group, which "
                   "may not (not modelled, PRG-201)", eqn_loc(found))

    def _reduced_everywhere(self, eqn: Any, outs: list[Any], axes: dict[str, int]) -> None:
        """PRG-201: a `psum`, `pmax`, `pmin`, `all_gather` or `pbroadcast` over every manual axis of a `shard_map`
        whose axes cover the devices gives every device the same result, whatever its operand (its value is not
        known)."""
        if self._lanes is None or eqn.primitive.name not in UNIFORM_COLLECTIVES or eqn.params.get("axis_index_groups"):
            return
        named = eqn.params.get("axes", eqn.params.get("axis_name", ()))
        named = set(named if isinstance(named, (tuple, list)) else (named,))
        if axes and set(axes) <= named:
            for v in outs:
                self.know(v, None)

    def _cond_per_device(self, eqn: Any, ins: list[Any], lanes: list[Any], axes: dict[str, int],
                         physical: int) -> list[Any]:
        """PRG-145: a cond whose index the walk knows on each device: each branch is walked for the devices that
        take it, whose calls only those devices run; a result that differs between the branches is a new value
        (a kernel's result through it is not followed as a link)."""
        import numpy as np


        branches = eqn.params["branches"]
        loc = eqn_loc(eqn)
        mine = sorted(self._devices) if self._devices is not None else range(len(lanes))
        taken: dict[int, set[int]] = {}
        for d in mine:
            b = int(np.clip(int(np.asarray(lanes[d]).reshape(-1)[0]), 0, len(branches) - 1))
            taken.setdefault(b, set()).add(d)
        outer = self._devices
        results = []
        try:
            for b in sorted(taken):
                # every device of the branch's set takes it: the whole set when it is every device the walk is in
                self._devices = None if outer is None and len(taken) == 1 else frozenset(taken[b])
                results.append(self._branch(eqn, branches[b], ins, loc, axes, physical))
        finally:
            self._devices = outer
        if len(results) == 1:
            return results[0]
        order = sorted(taken)
        return self._merge_devices({d: results[order.index(b)] for b in order for d in taken[b]}, loc,
                                   "a cond whose branch differs between devices")

    def _running(self, x: Any, flag: Any, active: frozenset[int]) -> frozenset[int] | None:
        """PRG-197: the devices of `active` on which a while loop's condition `flag` holds, where the walk knows it
        on each device (PRG-145's values); None where it does not."""
        import numpy as np

        lanes = self._lane_values(x, flag)
        if lanes is None:
            return None
        return frozenset(d for d in active if bool(np.asarray(lanes[d]).reshape(-1)[0]))

    def _merge_devices(self, by_device: dict[int, list[Any]], loc: Any, what: str) -> list[Any]:
        """PRG-145, PRG-197: the values after a construct each device leaves with its own (a cond's branch, a while
        loop's last carry): the value where every device has the same one, else a new value (a kernel's result
        through it is not followed as a link; a semaphore is unknown), known on each device where the walk knows
        each device's own."""
        groups = list(by_device.values())
        outs: list[Any] = []
        for k, vals in enumerate(zip(*groups)):
            if all(v == vals[0] for v in vals):
                outs.append(vals[0])
                continue
            for v in vals:
                if isinstance(v, Produced) and self._semaphore(v) is not None:
                    raise Stop(f"semaphore output {self._semaphore(v)!r} of {self.invocations[v.call].describe()} is "
                                f"a result of {what}: the front end cannot tell which semaphore a later use is", loc)
            new = self.outside(f"the result of {what}", loc, deps_of(list(vals)))
            lanes = {d: self._lane_values(None, vs[k]) for d, vs in by_device.items()}
            if self._lanes is not None and all(lane is not None for lane in lanes.values()):
                first = next(iter(lanes.values()))
                self._per[new.ident] = [lanes[d][d] if d in lanes else first[d] for d in range(len(self._lanes))]
            outs.append(new)
        return outs


__all__ = ["PerDevice"]
