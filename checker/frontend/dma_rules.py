"""DMA rules: `dma_start` and `dma_wait` become `DmaStart` and DMA-kind `Wait` ops (DMA-1, ACC-3).

The byte count is the source ref's size; a DMA's source and destination buffers
and regions come from the same transformed refs, through `regions`. The
semaphore and device operands are read with `sync_rules`' helpers, which this
mixin extends.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
from jax._src import state
from jax._src.pallas.mosaic import primitives as tpu_prims

from semcheck.checker.frontend.byte_counts import INT32, interpreter_count
from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import append_to_each
from semcheck.checker.frontend.interpreter_views import blind_transform, view_error
from semcheck.checker.frontend.region_transforms import dynamic_sizes, lane_chain, size_lanes, view_shape
from semcheck.checker.frontend.regions import NO_WINDOW, empty_region, flatten_ref, lane_keys, ref_regions, unindexed
from semcheck.checker.frontend.sync_rules import SyncRules
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.values import BufRef
from semcheck.checker.frontend.window_bounds import (
    lanes_in_bounds,
    need_values,
    predicted,
    unpredicted_note,
    window_error,
    window_predicted,
)
from semcheck.model.ops import DmaStart, Wait


class DmaRules(SyncRules):
    """`dma_start` and `dma_wait`."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.rules.update({tpu_prims.dma_start_p: self._dma_start, tpu_prims.dma_wait_p: self._dma_wait})

    def _dma_nbytes(self, eqn: Any, src: Any, mask: Any) -> list[int] | int:
        """Bytes moved by a DMA: the size of its (transformed) source ref `src` (evaluated).

        Static for most views; a view whose slice size is data (`pl.ds(start, n)` with `n` read
        from scalar memory) has its size per lane, from the evaluated size (ACC-7): a list of L.
        """
        key = ("nbytes", id(eqn))
        hit = self._static_cache.get(key)  # type: ignore[arg-type]
        if hit is None:
            aval_src = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])[0]
            self.refuse_selected(aval_src, eqn, "the DMA's source")
            try:
                if isinstance(aval_src, state.TransformedRef):
                    aval = state.transform_type(aval_src.transforms, aval_src.ref)
                else:
                    aval = aval_src
                if isinstance(aval_src, state.TransformedRef) and any(
                        getattr(t, "is_dynamic_size", False) for t in aval_src.transforms):
                    base, _ = flatten_ref(aval_src)
                    hit = ("dynamic", tuple(int(x) for x in base.shape), base.dtype)
                else:
                    shape = tuple(int(s) for s in aval.shape)
                    hit = math.prod(shape) * np.dtype(aval.dtype).itemsize
            except Exception as e:  # a view jax itself cannot type
                raise Unsupported(eqn.primitive.name, f"the byte count of the DMA's source view cannot be "
                                  f"computed ({type(e).__name__}: {e})", self.loc(eqn)) from e
            self._static_cache[key] = hit  # type: ignore[index]
        if type(hit) is int:
            return hit
        return self._dynamic_nbytes(eqn, src, hit[1], hit[2], mask)

    def _dynamic_nbytes(self, eqn: Any, src: Any, shape: tuple[int, ...], dtype: Any, mask: Any) -> list[int]:
        """ACC-7: per lane, the bytes of a source view whose slice sizes are evaluated values."""
        _, chain = flatten_ref(src)
        for size in dynamic_sizes(chain):  # an opaque size: unknown, with the hint for shapes (ERR-14)
            self.known(size, eqn, "the size of the DMA's source view")
        lanes = size_lanes(chain)
        out = [-1] * lanes  # lanes that do not run the DMA: never read
        for lane in (self.active(mask) if lanes > 1 else [0]):
            got = view_shape(shape, dtype, lane_chain(chain, lane))
            if got is None or any(d < 0 for d in got[0]):
                raise Unsupported(eqn.primitive.name, "the DMA's source view has a slice size semcheck cannot "
                                  "compute (negative or not an integer)", self.loc(eqn))
            out[lane] = math.prod(got[0]) * np.dtype(got[1]).itemsize
            if out[lane] >= INT32 and self._interpreter_only():  # ACC-76: the count jax's interpreter gives
                count = interpreter_count(got[0], np.dtype(got[1]).itemsize, math.prod(shape),
                                          eqn.primitive is tpu_prims.dma_wait_p)
                if count is not None:  # (a lowering `hardware` reads too is made again without it: ACC-27)
                    self.cpu_only = self.cpu_only or (f"the DMA's byte count, {out[lane]:,}, passes int32 at "
                                                      f"{self.loc(eqn)} (specs/deciding/frontend.md ACC-76)")
                    out[lane] = count
                    continue
            if out[lane] >= INT32:  # ACC-72: jax's interpreter multiplies the traced sizes in int32, and wraps
                raise Unsupported(eqn.primitive.name, f"the DMA's byte count, {out[lane]:,}, passes int32, in which "
                                  "jax's interpreter computes a byte count over sizes that are data (and wraps it): "
                                  "specs/deciding/frontend.md ACC-72", self.loc(eqn))
        return out * self.L if lanes == 1 else out

    def _interpreter_only(self) -> bool:
        """ACC-76: whether this lowering is for the interpreter's modes alone: one with their values (ACC-28's
        `on_cpu`, whose `hardware` is lowered again where it marks `cpu_only`), or ACC-71's, racy reads given values."""
        inputs = getattr(self, "_inputs", None)
        return bool(getattr(inputs, "on_cpu", False) or getattr(inputs, "pins", None))

    def _dma_start(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        # `src` and `dst` are the refs (with their transforms) that the DMA moves
        # between: where the op's source and destination regions come from.
        src, dst, dst_sem, src_sem, device_id = eqn.params["tree"].unflatten(invals)
        loc = self.loc(eqn)
        for ref, what in ((src, "the DMA's source"), (dst, "the DMA's destination")):
            self.refuse_selected(ref, eqn, what)
        nbytes = self._dma_nbytes(eqn, src, mask)
        dlabel, didx = self.sem_indices(dst_sem, (), eqn, "the DMA's destination semaphore")
        slabel, sidx = (None, None)
        if src_sem is not None:
            slabel, sidx = self.sem_indices(src_sem, (), eqn, "the DMA's source semaphore")
        devs, dict_core = self.logical_device(device_id, eqn.params["device_id_type"], eqn)
        sbuf, sview, dbuf, dview, err = self._dma_views(eqn, invals, src, dst)
        skeys, dkeys = sview.keys(self.L), dview.keys(self.L)
        # Regions by index values, per equation: computed for all lanes on a miss only.
        sregions, dregions = self.op_cache(eqn, "src regions"), self.op_cache(eqn, "dst regions")
        cache = self.op_cache(eqn, dlabel, slabel, sbuf, dbuf)
        templates = self.op_cache(eqn, dlabel, slabel, sbuf, dbuf, "fields")
        none = [None] * self.L
        if len(skeys) == 1:
            skeys = skeys * self.L
        if len(dkeys) == 1:
            dkeys = dkeys * self.L
        # The per-lane work runs in C (zip, map) where it can: a ring at 256
        # devices passes here once per device and step.
        # A byte count that is data (ACC-7) is part of the key; a static one is the same on every lane.
        sizes = itertools.repeat(nbytes) if type(nbytes) is int else nbytes
        # ERR-20 (ACC-10): per lane, a window the interpreter refuses when the copy runs (a view's ERR-9 first)
        # (a call the interpreter never runs, GRID-5's `tpu_only`, needs no prediction)
        bounds = none if err is not None or self.call.tpu_only else \
            self._copy_window_errors(eqn, sbuf, sview, dbuf, dview, skeys, dkeys)
        keys = list(zip(didx, sidx or none, devs or none, dict_core or none, skeys, dkeys, sizes, bounds))
        if mask is None:
            targets = self.bodies
        else:
            lanes = self.active(mask)
            keys = [keys[d] for d in lanes]
            targets = [self.bodies[d] for d in lanes]
        ops = list(map(cache.get, keys))
        missing = [i for i, op in enumerate(ops) if op is None]
        if missing:
            sget, dget = sregions.get, dregions.get
            for i in missing:
                key = keys[i]
                op = cache.get(key)  # an earlier lane of this step may have built it
                if op is None:
                    # One op per device and index values, from a template shared by
                    # the ops with the same semaphores and target.
                    tkey = (*key[:4], key[6])
                    fields = templates.get(tkey)
                    if fields is None:
                        fields = templates[tkey] = dict(zip(_DMA_FIELDS, (
                            self.semref(dlabel, key[0]),
                            key[6],
                            self.semref(slabel, key[1]) if slabel is not None else None,
                            key[2],
                            key[3],
                            loc,
                            sbuf,
                            None,
                            dbuf,
                            None,
                        )))
                        # DMA-6: what a half adds depends on its semaphore's type
                        fields["src_sem_type"] = self.sem_type(src_sem) if src_sem is not None else "dma"
                        fields["dst_sem_type"] = self.sem_type(dst_sem)
                        fields["view_error"] = err  # ERR-9: the interpreter raises when the copy runs
                    sr = sget(key[4], _NO_VIEW)
                    if sr is _NO_VIEW:
                        sr = sview.region(key[4], sregions)
                    dr = dget(key[5], _NO_VIEW)
                    if dr is _NO_VIEW:
                        dr = dview.region(key[5], dregions)
                    op = _new_dma_start(fields, sr, dr)
                    if key[7] is not None:
                        op = dataclasses.replace(op, view_error=key[7])
                    cache[key] = op
                ops[i] = op
        any(map(list.append, targets, ops))  # append each lane's op (append returns None)
        return []

    def _dma_views(self, eqn: Any, invals: list[Any], src: Any, dst: Any) -> tuple[Any, ...]:
        """The DMA's source and destination buffers (labels, or None) and their per-lane views (ACC-3),
        and what the interpreter raises when the copy runs (ERR-9, ACC-6), or None."""
        static = self._static_cache.get(("dma views", id(eqn)))  # type: ignore[arg-type]
        if static is None:
            # Where each ref's index values sit among the operands, and the buffers' shapes.
            tree = eqn.params["tree"]
            counts = [c.num_leaves for c in tree.children()[:2]]
            avals = tree.unflatten([v.aval for v in eqn.invars])
            static = []
            start = 0
            for n, aval in zip(counts, avals[:2]):
                base, _ = flatten_ref(aval)
                shape = tuple(int(x) for x in getattr(base, "shape", ()))
                static.append((tuple(range(start + 1, start + n)), shape, getattr(base, "dtype", None)))
                start += n
            self._static_cache[("dma views", id(eqn))] = static  # type: ignore[index]
        out: list[Any] = []
        err = None
        for side, ref, (leaf_at, shape, dtype) in zip(("source", "destination"), (src, dst), static):
            base, chain = flatten_ref(ref)
            blind = blind_transform(chain) if chain and err is None else None
            if blind is not None:  # the interpreter's copy raises on it (ACC-6); the source is read first
                err = view_error(self.loc(eqn), blind, "copy", side)
            if type(base) is BufRef:
                out += [base.name, _View(shape, dtype, chain, [invals[i] for i in leaf_at])]
            else:
                out += [None, _NO_VIEW]
        return (*out, err)

    def _copy_window_errors(self, eqn: Any, sbuf: str | None, sview: Any, dbuf: str | None, dview: Any,
                       skeys: list[Any], dkeys: list[Any]) -> list[Any]:
        """ERR-20 per lane: the copy's read of its source window, else its write of its destination window,
        that the interpreter refuses (ACC-10), or None. Lanes with equal index values share one answer."""
        params, loc = self.call.interpret_params, self.loc(eqn)
        ends = [(buf, view, kind) for buf, view, kind in ((sbuf, sview, "read"), (dbuf, dview, "write"))
                if buf is not None and view is not _NO_VIEW and predicted(params, kind)]
        if not ends:
            return [None] * self.L
        for _, view, _ in ends:
            need_values(view.leaves, eqn.primitive.name, "the copy", loc)
        memo = self.op_cache(eqn, "window errors")
        inside = None  # the lanes whose every end is certainly in bounds: nothing to ask of them
        for _, view, _ in ends:
            ok = lanes_in_bounds(view.chain, view.shape, self.L)
            inside = ok if inside is None or ok is None else inside & ok
            if ok is None:
                break
        out = []
        for lane, key in enumerate(zip(skeys, dkeys)):
            if inside is not None and inside[lane]:
                out.append(None)
                continue
            cacheable = not any(type(k) is tuple and k[:1] == ("region",) for k in key)
            hit = memo.get(key, _NO_VIEW) if cacheable else _NO_VIEW
            if hit is _NO_VIEW:
                hit = next((e for buf, view, kind in ends
                            if (e := window_error(buf, view.shape, lane_chain(view.chain, lane), kind, "copy", loc))),
                           None)
                if hit is None and not self.unpredicted and not all(
                        window_predicted(lane_chain(view.chain, lane), view.shape) for _, view, _ in ends):
                    self.unpredicted = unpredicted_note("the copy", loc)  # ERR-32
                if cacheable:
                    memo[key] = hit
            out.append(hit)
        return out

    def _dma_wait(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        # For `wait_send`/`wait_read` the descriptor's src/dst are already swapped in
        # the operands: the awaited semaphore sits in the dst_sem slot and the byte
        # count comes from the ref in the src slot, whichever way round.
        _src, _dst, sem, _src_sem, _dev = eqn.params["tree"].unflatten(invals)
        loc = self.loc(eqn)
        self.refuse_selected(_src, eqn, "the awaited DMA's source")
        nbytes = self._dma_nbytes(eqn, _src, mask)
        label, idx = self.sem_indices(sem, (), eqn, "the awaited DMA semaphore")
        bodies = self.bodies
        cache = self.op_cache(eqn, label)
        if type(nbytes) is int and idx.count(idx[0]) == len(idx):  # one wait for every device: appended in C
            op = cache.get((idx[0], nbytes))
            if op is None:
                op = cache[(idx[0], nbytes)] = Wait(self.semref(label, idx[0]), nbytes, "dma", loc)
            append_to_each(bodies if mask is None else [bodies[d] for d in self.active(mask)], op)
            return []
        for d in self.active(mask):
            n = nbytes if type(nbytes) is int else nbytes[d]  # ACC-7: the lane's own byte count
            op = cache.get((idx[d], n))
            if op is None:
                op = cache[(idx[d], n)] = Wait(self.semref(label, idx[d]), n, "dma", loc)
            bodies[d].append(op)
        return []

    # --- rules: run_scoped allocations ------------------------------------------------


_DMA_FIELDS = tuple(f.name for f in dataclasses.fields(DmaStart))


def _new_dma_start(fields: dict[str, Any], src_region: Any, dst_region: Any) -> DmaStart:
    """`DmaStart(**fields)` with the two regions, without the frozen dataclass's
    per-field `object.__setattr__` (bench/README.md, costs); the same object in
    every respect (fields, ==, hash, repr)."""
    op = object.__new__(DmaStart)
    d = op.__dict__
    d.update(fields)
    d["src_region"] = src_region
    d["dst_region"] = dst_region
    return op


if hasattr(DmaStart, "__post_init__") or hasattr(DmaStart, "__slots__"):
    # the IR grew validation or slots: construct it the ordinary way
    def _new_dma_start(fields: dict[str, Any], src_region: Any, dst_region: Any) -> DmaStart:  # type: ignore[no-redef]
        return DmaStart(**{**fields, "src_region": src_region, "dst_region": dst_region})


class _View:
    """A DMA end's view of its buffer: per-lane keys, and its regions computed once, on demand."""

    __slots__ = ("shape", "dtype", "chain", "leaves", "_keys", "_regions")

    def __init__(self, shape: tuple[int, ...], dtype: Any, chain: tuple[Any, ...], leaves: list[Any]) -> None:
        self.shape = shape
        self.dtype = dtype
        self.chain = chain
        self.leaves = leaves
        self._keys: list[Any] = []
        self._regions: tuple[Any, ...] | None = None

    def keys(self, lanes: int) -> list[Any]:
        """Per lane (or one for all), a key of the region: equal keys, equal regions."""
        keys = lane_keys(self.leaves, lanes)
        if keys is None:  # no cheap key: the regions themselves (interned) are the key
            keys = [("region", id(r)) for r in self.regions()]
        self._keys = keys
        return keys

    def regions(self) -> tuple[Any, ...]:
        if self._regions is None:
            # a view of no elements (a size-0 slice, ACC-7): the copy touches nothing, known, and its window is
            # where jax's race detector takes it to start (ERR-27); where that is not known, an inexact region
            regions = ref_regions(self.shape, self.chain, dtype=self.dtype, windows=True)
            regions = tuple(empty_region(len(self.shape), why=NO_WINDOW) if r is None else r for r in regions)
            self._regions = unindexed(regions, self.chain)  # a copy of an unsliced ref: a whole window (ERR-27)
        return self._regions

    def region(self, key: Any, known: dict[Any, Any]) -> Any:
        """The region under `key`, from `known` (the equation's) or computed with every lane's."""
        region = known.get(key, _NO_VIEW)
        if region is _NO_VIEW:
            regions = self.regions()
            for k, r in zip(self._keys, regions if len(regions) > 1 else regions * len(self._keys)):
                known.setdefault(k, r)
            region = known[key]
        return region


class _NoView:
    def keys(self, lanes: int) -> list[Any]:
        return [None]

    def region(self, key: Any, known: dict[Any, Any]) -> Any:
        return None


_NO_VIEW = _NoView()
