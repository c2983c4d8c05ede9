"""Kernel ref accesses: loads from and stores to refs inside the kernel body.

Each load or store of a buffer ref becomes an `Access` op (ACC-1) on every
active device: the buffer's label (that of the `AllocBuffer` the launch or a
`run_scoped` made for the ref), the region of it the view touches (see
`regions`: exact boxes, widened with a reason where an index, a mask or a
transform cannot be pinned down) and whether it writes. Masked-off devices
and an all-false mask emit nothing. A `swap` (`ref[...] = x`, `pl.store`) and
an `addupdate` (`ref[...] += x`) are writes; everything else reads. A load
or store through a reshape, bitcast, transpose or memory-space view carries
the error jax's interpreter raises there (`Access.view_error`, ERR-9, ACC-6).

Their values are opaque (`Unknown`), except for the small integer refs whose
contents `scalar_memory` tracks (scalar-prefetch tables, SMEM state, a loop
bound): there a load of known elements gives their values and a store
updates them, beside the `Access` op. A `run_scoped` buffer is tracked from
its first access if it qualifies. A load or store of a semaphore ref is
refused.
"""

from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import Any

import numpy as np

from jax._src.pallas import primitives as pallas_prims
from jax._src.state import primitives as state_prims
from jax._src.state import types as state_types

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import Evaluator
from semcheck.checker.frontend.interpreter_views import blind_transform, view_error
from semcheck.checker.frontend.region_transforms import lane_chain
from semcheck.checker.frontend.regions import (empty_region, flatten_ref, foreign_transform, lane_keys, ref_regions,
                                               refuse_multi_ref, unindexed, with_windows)
from semcheck.checker.frontend.scalar_memory import past_bound, trackable
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.values import BufRef, SemArray, SomeLanes, Unknown
from semcheck.checker.frontend.window_bounds import (
    lanes_in_bounds,
    need_values,
    predicted,
    past_end_note,
    unpredicted_note,
    window_error,
    window_predicted,
)
from semcheck.model.ops import Access

_MISSING = object()


class AccessRules(Evaluator):
    """`ref[...]`, `ref[...] = x`, `ref[...] += x`, `pl.load`, `pl.store`/`pl.swap`."""

    # ERR-32: the first load, store or copy whose window the interpreter may refuse unseen (its words), "" if none
    unpredicted: str = ""
    # ERR-62: the first load or store whose window runs past its buffer on some lane (its words), "" if none
    past_end: str = ""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.rules.update({
            state_prims.get_p: self._ref_access,
            state_prims.swap_p: self._ref_access,
            state_prims.addupdate_p: self._ref_access,
            pallas_prims.load_p: self._ref_access,
            pallas_prims.swap_p: self._ref_access,
        })
        self._access_kinds = {
            state_prims.get_p: "get",
            state_prims.swap_p: "swap",
            state_prims.addupdate_p: "addupdate",
            pallas_prims.load_p: "load",
            pallas_prims.swap_p: "masked_swap",
        }

    def _ref_access(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        ref = invals[0] if invals else None
        if refuse_multi_ref(ref):
            raise Unsupported(eqn.primitive.name, "a load or store through pl.select_ref (a SelectTransform) "
                              "names no single buffer; jax's TPU interpreter does not run it", self.loc(eqn))
        chain: tuple[Any, ...] = ()
        if isinstance(ref, state_types.TransformedRef):
            ref, chain = flatten_ref(ref)
        t = foreign_transform(chain)
        if t is not None:
            raise Unsupported(eqn.primitive.name, f"a load or store through a {type(t).__name__}, a ref transform "
                              "semcheck does not know (it may name other memory)", self.loc(eqn))
        if isinstance(ref, SemArray):
            raise Unsupported(eqn.primitive.name, "loads and stores of a semaphore ref", self.loc(eqn))
        loc = self.loc(eqn)
        outs = [Unknown("a value loaded from a ref", loc) for _ in eqn.outvars]
        if type(ref) is not BufRef:
            # race-free must not be proved over accesses the lowering cannot place (ACC-1)
            raise Unsupported(eqn.primitive.name, "a load or store of a ref semcheck cannot trace back to the "
                              "buffer the launch or a run_scoped allocated", loc)
        lanes = self.active(mask)
        if not lanes:
            return outs
        static = self._access_static(eqn)
        write, shape, dtype, leaf_at, unflatten = static
        blind = blind_transform(chain) if chain else None
        if blind is None:
            blind = self._blind_in_equation(eqn, invals, static)
        # ACC-6: the interpreter raises at this access (ERR-9); the op carries it for the model
        err = None if blind is None else view_error(loc, blind, "store" if write else "load")
        memory = self.memory
        if ref.name not in memory.ignored and (ref.name in memory or self._first_access(ref.name, chain, loc)):
            outs = self._scalar_access(eqn, invals, ref.name, chain, lanes, loc)
        elif outs and (big := memory.too_large.get(ref.name) or past_bound(flatten_ref(eqn.invars[0].aval)[0])):
            outs = [Unknown(big, loc) for _ in eqn.outvars]  # ACC-54: the table and the bound, at the load's line
        leaves = [invals[i] for i in leaf_at]
        kind = _WINDOW_KINDS.get(self._access_kinds[eqn.primitive])
        if err is None and kind is not None and not self.call.tpu_only and predicted(self.call.interpret_params, kind):
            bad = self._access_window_errors(eqn, invals, static, chain, ref.name, leaves, lanes, loc, kind)
            if bad is not None:  # ERR-20 (ACC-10): some lane's window is refused; rare, so built lane by lane
                self.past_end = self.past_end or past_end_note(next(e for e in bad if e is not None), loc)
                regions = self._access_regions(invals, static, chain)
                for d in lanes:
                    r = regions[d] if len(regions) > 1 else regions[0]
                    if bad[d] is not None and r is None:
                        r = empty_region(len(shape) if not chain else len(_base_shape(invals[0], shape)))
                    if r is not None:
                        self.bodies[d].append(Access(ref.name, r, write, loc, bad[d]))
                return outs
        cache = self.op_cache(eqn, "access", ref.name)
        keys = lane_keys(leaves, self.L) if not chain else None
        bodies = self.bodies
        if keys is not None and len(keys) == 1:
            op = cache.get(keys[0], _MISSING)
            if op is _MISSING:
                (region,) = self._access_regions(invals, static, chain)[:1]
                op = cache[keys[0]] = None if region is None else Access(ref.name, region, write, loc, err)
            if op is not None:
                targets = bodies if mask is None else [bodies[d] for d in lanes]
                any(map(list.append, targets, repeat(op)))  # append returns None: runs to the end
            return outs
        if keys is None:
            regions = self._access_regions(invals, static, chain)
            keys = [("region", id(r)) for r in regions]  # interned: one id per distinct region
            for k, r in zip(keys, regions):
                if k not in cache:
                    cache[k] = None if r is None else Access(ref.name, r, write, loc, err)
        if len(keys) == 1:
            keys = keys * self.L
        try:
            ops = list(map(cache.__getitem__, keys))
        except KeyError:  # a new index value: compute the regions of every lane once
            regions = self._access_regions(invals, static, chain)
            for k, r in zip(keys, regions if len(regions) > 1 else regions * len(keys)):
                if k not in cache:
                    cache[k] = None if r is None else Access(ref.name, r, write, loc, err)
            ops = list(map(cache.__getitem__, keys))
        if mask is not None:
            ops = [ops[d] for d in lanes]
            bodies = [bodies[d] for d in lanes]
        if any(map(is_, repeat(None), ops)):  # lanes whose access touches nothing (an all-false mask, ...)
            pairs = [(b, op) for b, op in zip(bodies, ops) if op is not None]
            bodies, ops = [b for b, _ in pairs], [op for _, op in pairs]
        any(map(list.append, bodies, ops))
        return outs

    def _access_window_errors(self, eqn: Any, invals: list[Any], static: Any, chain: tuple[Any, ...], label: str,
                              leaves: list[Any], lanes: list[int], loc: Any, kind: str) -> list[Any] | None:
        """ERR-20 per lane (length L): what the interpreter raises at this load or store because of its window
        (ACC-10), or None when no active lane's window is refused. Lanes with equal index values share one
        answer. A masked store is refused or not by its mask where its window is not wholly inside the buffer, which
        is not predicted: such a store is unsupported, naming it (ACC-10); inside, its mask changes nothing."""
        write, shape, _, _, unflatten = static
        transforms, mask = unflatten(invals)
        if mask is not None and not write:
            return None  # (a masked load: jax's interpreter refuses it before its window, fe11c1e's rule)
        need_values([*leaves, *_chain_leaves(chain)], eqn.primitive.name, "the store" if write else "the load", loc)
        if chain:
            shape = _base_shape(invals[0], shape)
        view = (*chain, *(t for t in (transforms or ()) if t is not None))
        keys = lane_keys(leaves, self.L) if not chain else None  # a ref view's own values are not in `leaves`
        if keys is None and any(v is not None and not isinstance(v, (int, np.integer, np.ndarray)) for v in leaves):
            if not self.unpredicted and not window_predicted(lane_chain(view, 0), shape):  # ERR-32
                self.unpredicted = unpredicted_note("the store" if write else "the load", loc)
            return None  # an opaque index: no lane's window is predicted (ACC-10)
        memo = self.op_cache(eqn, "window errors", label)
        out: list[Any] = [None] * self.L
        inside = lanes_in_bounds(view, shape, self.L)  # lanes certainly in bounds: nothing to ask of them
        for d in lanes:
            if inside is not None and inside[d]:
                continue
            key = None if keys is None else keys[0] if len(keys) == 1 else keys[d]
            hit = memo.get(key, _MISSING) if key is not None else _MISSING
            if hit is _MISSING:
                hit = window_error(label, shape, lane_chain(view, d), kind, "store" if write else "load", loc)
                if hit is None and not self.unpredicted and not window_predicted(lane_chain(view, d), shape):
                    self.unpredicted = unpredicted_note("the store" if write else "the load", loc)  # ERR-32
                if key is not None:
                    memo[key] = hit
            out[d] = hit
            if hit is not None and mask is not None:
                raise Unsupported(eqn.primitive.name, "a masked store whose window the buffer does not hold whole on "
                                  f"some device ({hit.message or hit.python_type}): whether jax's interpreter refuses "
                                  "it depends on the mask, which is not predicted (ACC-10)", loc)
        return out if any(e is not None for e in out) else None

    def _blind_in_equation(self, eqn: Any, invals: list[Any], static: Any) -> Any:
        """The equation's own transform the interpreter cannot index (ACC-6), or None; their
        classes are static, so the answer is computed once per equation."""
        key = ("interpreter_view", id(eqn))
        hit = self._static_cache.get(key, _MISSING)  # type: ignore[arg-type]
        if hit is _MISSING:
            transforms, _ = static[4](invals)
            hit = blind_transform(tuple(transforms or ()))
            self._static_cache[key] = hit  # type: ignore[index]
        return hit

    def _first_access(self, label: str, chain: tuple[Any, ...], loc: Any) -> bool:
        """A load or store meets a `run_scoped` buffer first: tracked (`track_scoped`) unless through a view."""
        if chain:
            self.memory.ignored.add(label)
            return False
        return self.track_scoped(label, loc)

    def track_scoped(self, label: str, loc: Any) -> bool:
        """Track a `run_scoped` buffer at its first use (a load, a store or, where copies are followed, a copy's
        end: ACC-43), if small and integer (`scalar_memory`); its contents are uninitialised until written."""
        alloc = self.memory.allocation(label)
        if alloc is None or not trackable(*alloc, floats=bool(getattr(self, "follow_floats", False))):  # ACC-41
            self.memory.ignored.add(label)
            return False
        why = Unknown("the initial contents of a run_scoped buffer (uninitialised memory)", loc)
        if self.memory.define(label, alloc[0], alloc[1], None, why, alloc[2]):
            self.memory.uninitialised.add(label)  # ACC-71: the interpreter fills it (`_allocate_buffer`)
            return True
        self.memory.ignored.add(label)
        return False

    def _scalar_access(self, eqn: Any, invals: list[Any], label: str, chain: tuple[Any, ...],
                       lanes: list[int], loc: Any) -> list[Any]:
        """The values a load or store of a tracked ref reads, and its update of the contents."""
        memory = self.memory
        kind = self._access_kinds[eqn.primitive]
        _, _, _, _, unflatten = self._access_static(eqn)
        transforms, pmask = unflatten(invals)
        view = (*chain, *transforms)
        outs: list[Any] = []
        if eqn.outvars:
            # a load, or the old contents a swap returns
            out_shape = tuple(int(s) for s in getattr(eqn.outvars[0].aval, "shape", ()))
            if pmask is not None:
                outs = [Unknown("a masked load from a ref", loc)]
            else:
                outs = [memory.load(label, view, lanes, out_shape, loc, some_lanes=True)]
                if type(outs[0]) is SomeLanes:  # ACC-60: only the numeric rules read its lanes (`opaque`)
                    self.bounds_made = True
        if kind in ("get", "load"):
            return outs
        if kind == "masked_swap":
            value = eqn.params["args_tree"].unflatten(invals)[2]
        else:
            value = invals[1]
        if pmask is not None:
            memory.clobber(label, lanes, Unknown("a masked store to a ref", loc))
        else:
            memory.store(label, view, value, lanes, loc, add=kind == "addupdate")
        return outs

    def _access_static(self, eqn: Any) -> tuple[bool, tuple[int, ...], Any, tuple[int, ...], Any]:
        """Per equation: (writes?, the ref's shape and dtype, where the index leaves are, unflatten)."""
        key = ("access", id(eqn))
        hit = self._static_cache.get(key)  # type: ignore[arg-type]
        if hit is None:
            kind = self._access_kinds[eqn.primitive]
            aval = eqn.invars[0].aval
            shape = tuple(int(s) for s in getattr(aval, "shape", ()))
            dtype = getattr(aval, "dtype", None)
            n = len(eqn.invars)
            if kind == "get":
                leaf_at, write = tuple(range(1, n)), False
                tree = eqn.params["tree"]
                unflatten = lambda inv: (tree.unflatten(inv[1:]), None)  # noqa: E731
            elif kind in ("swap", "addupdate"):
                leaf_at, write = tuple(range(2, n)), True
                tree = eqn.params["tree"]
                unflatten = lambda inv: (tree.unflatten(inv[2:]), None)  # noqa: E731
            else:
                args_tree = eqn.params["args_tree"]
                parts = args_tree.unflatten(list(range(n)))
                # (ref, transforms, mask, other) for a load, (ref, transforms, val, mask) for a swap
                if kind == "load":
                    write = False
                    data = {parts[3]} if parts[3] is not None else set()
                    pick = lambda t: (t[1], t[2])  # noqa: E731
                else:
                    write = True
                    data = {parts[2]} if parts[2] is not None else set()
                    pick = lambda t: (t[1], t[3])  # noqa: E731
                leaf_at = tuple(i for i in range(1, n) if i not in data)

                def unflatten(inv: list[Any], args_tree: Any = args_tree, pick: Any = pick) -> Any:
                    return pick(args_tree.unflatten(inv))

            hit = (write, shape, dtype, leaf_at, unflatten)
            self._static_cache[key] = hit  # type: ignore[index]
        return hit

    def _access_regions(self, invals: list[Any], static: Any, chain: tuple[Any, ...]) -> tuple[Any, ...]:
        _, shape, dtype, _, unflatten = static
        transforms, mask = unflatten(invals)
        if chain:
            # `invals[0]` was itself a view: its shape is not the buffer's.
            shape = _base_shape(invals[0], shape)
        # ERR-27: an unmasked load or store of a size-0 slice is its window, which jax's race detector compares
        view = (*chain, *transforms)
        regions = ref_regions(shape, view, dtype=dtype, mask=mask, windows=mask is None)
        if mask is None:
            return unindexed(regions, view)  # `ref[...]`: a window jax's detector reads as whole (ERR-27)
        if not static[0]:
            return regions
        # ERR-28: the detector takes a masked store to write its indexed window (a masked load the interpreter refuses)
        return with_windows(regions, ref_regions(shape, view, dtype=dtype, windows=True))


def _chain_leaves(chain: tuple[Any, ...]) -> list[Any]:
    """The index values a ref view carries (its own, not the access equation's)."""
    if not chain:
        return []
    import jax  # lazy: the module's rules run only under jax anyway

    return jax.tree_util.tree_leaves(chain)


# ERR-20: what the interpreter does with an access's window, by primitive (a store is a swap, `pltpu.store` too;
# a masked one only where its window is inside the buffer; `addupdate` is not predicted: jax refuses it first, ERR-10)
_WINDOW_KINDS = {"get": "read", "load": "read", "swap": "swap", "masked_swap": "swap"}


def _base_shape(view: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The buffer's shape under a view value: an indexer records it; else the view's own shape
    (a region of another rank, which `Region.overlaps` treats as overlapping everything)."""
    for t in getattr(view, "transforms", ())[:1]:
        base = getattr(t, "shape", None)
        if base is not None and hasattr(t, "indices"):
            return tuple(int(s) for s in base)
    return shape
