"""What else may change a tracked ref (`scalar_memory`): DMAs, scopes, other devices.

`ScalarStateRules` sits on top of the rule mixins (first in `Lowerer`'s bases):
once every rule is registered, it wraps two of them.

* `dma_start`: a copy into a tracked ref makes the ref unknown on the devices
  that start it, from its start on (the copy lands at some point before its
  wait), unless the copy's data is followed (below);
* `run_scoped`: buffers tracked inside the body are forgotten when it ends; a
  buffer it allocates is tracked from its first use, a copy's end included where
  copies are followed (ACC-43).

Following copies (ACC-9). In a one-core kernel evaluated device by device (a
`pallas_call`'s, or a `core_map`'s over a one-core mesh: ACC-55), a copy (local or remote) into a tracked ref moves its source's values to the
target device's ref where it starts, and every load from a followed ref (an SMEM
ref of the shape and dtype of some copy's SMEM end, an integer VMEM or HBM ref of
those of some copy's end: ACC-21, ACC-30, or a float one of a local copy's end that
no remote copy shares: ACC-41) records, per element, which write it read
from (`FollowedRead`), as does a copy's read half; each store and copy of such a ref
is a `FollowedWrite`. Only a followed source's values move. Those values are facts only when the program is race-free and
one run agrees with them (`model.followed.misread`): `check_modes` asks, and
makes every verdict that rests on them unknown otherwise.

Elsewhere (several cores per device, some devices lowered, grid steps as lanes)
the copy is not followed: refs of the shape and dtype a remote copy writes are
never tracked (another device's copy may land in them at any point), and a
local copy makes its destination unknown.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax._src.pallas import primitives as pallas_prims
from jax._src.pallas.mosaic import primitives as tpu_prims
from jax._src.state import primitives as state_prims
from jax._src.state import types as state_types

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.evaluator import Evaluator, SubsetRefused, sub_jaxprs
from semcheck.checker.frontend.regions import flatten_ref
from semcheck.checker.frontend.racy_pins import pinned_values, with_pins
from semcheck.checker.frontend.scalar_memory import CopiedFloat
from semcheck.checker.frontend.trace import KernelCall, memory_space_name
from semcheck.checker.frontend.values import BufRef, Unknown
from semcheck.model.followed import WrittenValues, Elements, Flat, FollowedRead, FollowedWrite, ValueFacts
from semcheck.model.ops import Access, DmaStart

_ACCESS_PRIMS = (state_prims.get_p, state_prims.swap_p, state_prims.addupdate_p, pallas_prims.load_p,
                 pallas_prims.swap_p)


class ScalarStateRules(Evaluator):
    """Wraps `dma_start` and `run_scoped` to keep `self.memory` sound (module docstring)."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int, *, follow_copies: bool = True,
                 follow_floats: bool = False) -> None:
        super().__init__(call, num_devices, cores)
        # ACC-9: one core per device, so a device's tracked refs live while every lane runs (a `core_map` over a
        # one-core mesh too: its core axis has one index, ACC-55); `follow_copies` False: ACC-4's treatment, for a
        # program of several calls (ACC-9's last clause)
        self.follow_copies = follow_copies and cores == 1
        ends = dma_ends(call.jaxpr, self._jaxpr_types)
        # ACC-9 follows SMEM, where kernels keep the control data they exchange, and (ACC-21) integer VMEM
        # that a remote copy writes (counts exchanged row by row before they are moved to SMEM); ACC-30:
        # every end of a copy in SMEM, and every integer end in VMEM or HBM (an input's table a local copy
        # fetches, a computed table moved to SMEM), local or remote. Float VMEM (data tiles) keeps ACC-4's
        # treatment. Keyed by memory space too: a VMEM ref is never taken for an SMEM ref of its shape.
        # ACC-41: float VMEM and HBM ends of local copies (a gating block fetched from the logits' input),
        # where no remote copy has an end of their shape, dtype and memory space (a remote copy's end is data
        # exchanged between devices: tokens, partial results). A lowering follows them only when one that did
        # not needed such a value (`follow_floats`, `lower.lower_kernel`), and only then tracks float refs past
        # ACC-25's bound or in HBM (`trackable`): until then a copy into one makes it `CopiedFloat`, so the
        # kernels whose lowering needs no such value keep ACC-4's treatment of their data
        self.follow_floats = follow_floats
        remote_ends = {(sig, space) for sig, space, remote, _dst in ends if remote}
        self.float_ends = ({(sig, space) for sig, space, _remote, _dst in ends if space in ("vmem", "hbm")
                            and not _integer(sig) and (sig, space) not in remote_ends} if self.follow_copies else set())
        self.fed_signatures = ({(sig, space) for sig, space, _remote, _dst in ends
                                if space == "smem" or (space in ("vmem", "hbm") and _integer(sig))}
                               | (self.float_ends if follow_floats else set())
                               if self.follow_copies else set())
        self.memory.remote_signatures |= {sig for sig, space, remote, dst in ends
                                          if remote and dst and (sig, space) not in self.fed_signatures}
        self.followed_reads: list[tuple[int, int, Any, tuple, tuple]] = []  # (lane, body pos, loc, elements, writers)
        # (lane, body pos, loc, [(device, label, flat indices)]): ACC-53, an array per buffer, not an object per element
        self.followed_writes: list[tuple[int, int, Any, list]] = []
        dma_start = self.rules.get(tpu_prims.dma_start_p)
        if dma_start is not None:
            self.rules[tpu_prims.dma_start_p] = self._wrap_dma_start(dma_start)
        run_scoped = self.rules.get(pallas_prims.run_scoped_p)
        if run_scoped is not None:
            self.rules[pallas_prims.run_scoped_p] = self._wrap_run_scoped(run_scoped)
        if self.follow_copies:
            for prim in _ACCESS_PRIMS:
                rule = self.rules.get(prim)
                if rule is not None:
                    self.rules[prim] = self._wrap_access(rule)

    # --- ACC-9 ------------------------------------------------------------------------

    def _following(self) -> bool:
        """Whether lanes are this evaluation's devices, one each (not a subset, nor steps as lanes)."""
        return (self.follow_copies and not self.subset and self.L == self.num_devices
                and bool((self.lane_devices == np.arange(self.num_devices)).all()))

    def _fed(self, label: str) -> bool:
        c = self.memory.refs.get(label)
        return c is not None and ((c.shape, str(c.dtype)), c.space) in self.fed_signatures

    def value_facts(self, offsets: list[int]) -> ValueFacts | None:
        """The followed reads and writes, at their positions in the launched program (`offsets[lane]`:
        where the lane's kernel body starts); None when nothing was followed."""
        if not self.followed_reads:
            return None
        writes = tuple(FollowedWrite((lane, offsets[lane] + pos), loc, *_write_elements(els))
                       for lane, pos, loc, els in self.followed_writes)
        reads = tuple(FollowedRead((lane, offsets[lane] + pos), loc, elements, writers, *pin)
                      for lane, pos, loc, elements, writers, *pin in self.followed_reads)
        return ValueFacts(reads, writes, tuple(offsets))

    def _new_write(self, lane: int, pos: int, loc: Any) -> int:
        self.followed_writes.append((lane, pos, loc, []))
        return len(self.followed_writes) - 1

    def _written(self, wid: int, device: int, lane: int, label: str, flat: np.ndarray) -> None:
        """Write `wid` wrote elements `flat` of `label` on `device` (memory lane `lane`), just now: its elements,
        and (ACC-62) the values it left there, each known or not."""
        c = self.memory.refs[label]
        self.followed_writes[wid][3].append((device, label, flat, c.values[lane, flat].copy(), c.cause[lane, flat] == 0))

    def _wrap_access(self, rule: Any) -> Any:
        def access(eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
            ref = invals[0] if invals else None
            chain: tuple[Any, ...] = ()
            if isinstance(ref, state_types.TransformedRef):
                ref, chain = flatten_ref(ref)
            if (type(ref) is BufRef and not chain and ref.name not in self.memory and ref.name not in self.memory.ignored
                    and self.memory.allocation(ref.name) is not None and self._following()):
                self.track_scoped(ref.name, self.loc(eqn))  # ACC-71: a first store is a recorded write too (ACC-43)
            if type(ref) is not BufRef or not self._fed(ref.name) or not self._following():
                # not following: copies into the ref make it unknown (`dma_start`), as ACC-4 says
                return self._copied_float(eqn, ref, rule(eqn, invals, mask))
            label, loc = ref.name, self.loc(eqn)
            memory = self.memory
            transforms, _ = self._access_static(eqn)[4](invals)
            view = (*chain, *transforms)
            lanes = self.active(mask)
            at = {lane: len(self.bodies[lane]) for lane in lanes}
            before: dict[int, Any] = {}
            for lane in lanes:
                flat = memory.elements(label, view, lane)
                known = not isinstance(flat, Unknown) and type(memory.read_flat(label, lane, flat, loc)) is np.ndarray
                before[lane] = flat if isinstance(flat, Unknown) else (flat, memory.writers(label, lane, flat), known)
            write = eqn.primitive is not state_prims.get_p and eqn.primitive is not pallas_prims.load_p
            ids = None
            if write:
                ids = np.full(self.L, -1, dtype=np.int64)
                for lane in lanes:
                    ids[lane] = self._new_write(lane, at[lane], loc)
                memory.writer_now = ids
            try:
                outs = rule(eqn, invals, mask)
            finally:
                memory.writer_now = None
            pins = getattr(getattr(self, "_inputs", None), "pins", None) if not write else None
            pinned: dict[int, Any] = {}
            for lane in lanes:
                ops = self.bodies[lane]
                got = before[lane]
                if not write and isinstance(got, Unknown) and len(ops) == at[lane] + 1:
                    continue  # a read of elements semcheck cannot name (an index out of bounds): its value is
                    # unknown (`ScalarMemory.load`), and a read changes no element (ACC-32)
                if len(ops) != at[lane] + 1 or type(ops[at[lane]]) is not Access or isinstance(got, Unknown):
                    # the lowering cannot tie this access to the program's: its value is not a fact
                    why = got if isinstance(got, Unknown) else Unknown(
                        "a value semcheck cannot tie to the kernel's accesses", loc)
                    memory.clobber(label, [lane], why)
                    continue
                flat, writers, known = got
                device = int(self.lane_devices[lane])
                pin = None if not pins else pinned_values(
                    pins, lane, at[lane], loc, flat, memory, label,
                    getattr(self.call.interpret_params, "uninitialized_memory", None) or "nan")
                if pin is not None:  # ACC-71: a racy read's case
                    pinned[lane], known = pin[0], True
                if known:  # an unknown value decides nothing (the lowering refuses it where it would)
                    self.followed_reads.append((lane, at[lane], loc, Elements(device, label, flat), Flat(writers),
                                                pin))
                if ids is not None:
                    self._written(int(ids[lane]), device, lane, label, flat)
            if pinned:
                outs = [with_pins(outs[0], pinned, lanes, self.L, tuple(eqn.outvars[0].aval.shape)), *outs[1:]]
            return outs

        return access

    def _follow_copy(self, eqn: Any, invals: list[Any], mask: Any, rule: Any) -> list[Any]:
        """ACC-9: run `rule` (the copy's `DmaStart`s) and move the source's values to each target lane."""
        src, dst, _dsem, _ssem, device_id = eqn.params["tree"].unflatten(invals)
        loc = self.loc(eqn)
        memory = self.memory
        dbase, dchain = flatten_ref(dst)
        sbase, schain = flatten_ref(src)
        lanes = self.active(mask)
        at = {lane: len(self.bodies[lane]) for lane in lanes}
        if device_id is None:
            targets = {lane: lane for lane in lanes}
        else:
            devs, _ = self.logical_device(device_id, eqn.params["device_id_type"], eqn)
            targets = {lane: int(devs[lane]) for lane in lanes}
        outs = rule(eqn, invals, mask)
        label = dbase.name
        # ACC-30: only a followed source's values move (its read is recorded, so the facts' condition covers
        # the writes it read); a tracked source that is not followed is data whose read half is not ordered
        src_known = type(sbase) is BufRef and sbase.name in memory and self._fed(sbase.name)
        for lane in lanes:
            ops = self.bodies[lane]
            target = targets[lane]
            if len(ops) != at[lane] + 1 or type(ops[at[lane]]) is not DmaStart or not 0 <= target < self.L:
                memory.clobber(label, self.all_lanes, Unknown("a copy semcheck cannot tie to the kernel's DMAs", loc))
                continue
            wid = self._new_write(lane, at[lane], loc)
            flat = memory.elements(label, dchain, lane)  # the destination view's indices are the issuer's
            if isinstance(flat, Unknown):
                memory.writer_now = np.full(self.L, wid, dtype=np.int64)
                memory.clobber(label, [target], Unknown("a copy into a view semcheck cannot place", loc))
                memory.writer_now = None
                size = memory.refs[label].values.shape[1]
                self._written(wid, target, target, label, np.arange(size))
                continue
            sflat = memory.elements(sbase.name, schain, lane) if src_known else None
            if sflat is None or isinstance(sflat, Unknown) or sflat.shape != flat.shape:
                memory.write_flat(label, target, flat, Unknown("data a copy moves from a ref semcheck does not "
                                                               "follow", loc), wid)
                self._written(wid, target, target, label, flat)
                continue
            # ACC-43: element by element; the read half reads followed data where it is known (the lowering uses
            # no other element: an unknown one stays unknown, with its reason)
            writers = memory.writers(sbase.name, lane, sflat)
            known = memory.move_flat(sbase.name, lane, sflat, label, target, flat, wid)
            self._written(wid, target, target, label, flat)
            if known.any():
                self.followed_reads.append((lane, at[lane], loc, Elements(lane, sbase.name, sflat[known]),
                                            Flat(writers[known])))
        return outs

    def _copied_float(self, eqn: Any, ref: Any, outs: list[Any]) -> list[Any]:
        """ACC-41: a load from a float ref this lowering does not track (past ACC-25's bound, or in HBM) that a
        lowering following float copies would follow gives `CopiedFloat`, so that what needs it lowers again."""
        if (self.follow_floats or not self.float_ends or type(ref) is not BufRef or ref.name in self.memory
                or not (self._following() or self.subset)):
            return outs
        base, _ = flatten_ref(eqn.invars[0].aval)
        try:
            sig = ((tuple(int(d) for d in base.shape), str(np.dtype(base.dtype))),
                   memory_space_name(getattr(base, "memory_space", None)))
        except (TypeError, AttributeError):
            return outs
        if sig not in self.float_ends:
            return outs
        return [CopiedFloat(o.why, o.loc) if type(o) is Unknown else o for o in outs]

    def _wrap_dma_start(self, rule: Any) -> Any:
        def dma_start(eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
            if self.fed_signatures and (self.subset or self._following()):  # (a subset: refused below)
                self._track_scoped_ends(eqn, invals)
            if self.memory:
                _src, dst, _dsem, _ssem, device_id = eqn.params["tree"].unflatten(invals)
                base, _ = flatten_ref(dst)
                if type(base) is BufRef and base.name in self.memory:
                    if self._fed(base.name):
                        if self._following():
                            return self._follow_copy(eqn, invals, mask, rule)
                        if device_id is not None or self.subset:  # another device's ref, which these lanes
                            # do not hold; or, lowering some devices, a value the whole lowering follows (ACC-9)
                            what = "a remote copy" if device_id is not None else "a copy"
                            raise (SubsetRefused if self.subset else Unsupported)(
                                eqn.primitive.name, f"{what} into a ref whose contents semcheck follows, where it "
                                "cannot follow copies (the lanes are not one per device)", self.loc(eqn))
                    if device_id is not None:
                        # `dma_ends` keeps such refs untracked; never rely on a value
                        # another device's copy may overwrite at any time
                        raise Unsupported(eqn.primitive.name, "a remote DMA writes a ref whose contents "
                                          "semcheck follows as control data", self.loc(eqn))
                    c = self.memory.refs[base.name]
                    # (lowering some devices, what needs it refuses the subset: `lower.lower_kernel`)
                    copied = ((c.shape, str(c.dtype)), c.space) in self.float_ends and (
                        self._following() or self.subset)
                    why = (CopiedFloat if copied else Unknown)(
                        "a ref a DMA writes (semcheck does not copy contents along)", self.loc(eqn))
                    self.memory.clobber(base.name, self.active(mask), why)
            return rule(eqn, invals, mask)

        return dma_start

    def _track_scoped_ends(self, eqn: Any, invals: list[Any]) -> None:
        """ACC-43: a copy whose end is a `run_scoped` buffer of a followed signature, met here first, is its
        first use: the buffer is tracked from here (uninitialised), so the copy is followed into it (in a lowering
        of some devices, a copy into a followed ref: the subset is refused, and the whole lowering decides)."""
        src, dst, _dsem, _ssem, _device_id = eqn.params["tree"].unflatten(invals)
        memory = self.memory
        for end in (src, dst):
            base, _ = flatten_ref(end)
            if type(base) is not BufRef or base.name in memory or base.name in memory.ignored:
                continue
            alloc = memory.allocation(base.name)
            if alloc is not None and ((alloc[0], str(np.dtype(alloc[1]))), alloc[2]) in self.fed_signatures:
                self.track_scoped(base.name, self.loc(eqn))

    def _wrap_run_scoped(self, rule: Any) -> Any:
        def run_scoped(eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
            self.memory.push_scope()
            try:
                return rule(eqn, invals, mask)
            finally:
                self.memory.pop_scope()

        return run_scoped


def _write_elements(groups: list[tuple[int, str, np.ndarray, np.ndarray, np.ndarray]]) -> tuple[Any, Any]:
    """A write's elements (ACC-53): one buffer's as one `Elements` (a set: sorted, each once), else the set of
    `Element`s (none, or, were a write to span buffers, all of theirs); and (ACC-62) the values it left, aligned
    with the one buffer's elements (`WrittenValues`; None for the set)."""
    if len({(d, label) for d, label, *_ in groups}) == 1:
        device, label = groups[0][:2]
        flat = np.concatenate([g[2] for g in groups])
        elements = Elements.of_set(device, label, flat)
        # the value each element was left with: its last occurrence in the write's order
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
        values = np.concatenate([g[3] for g in groups])[last]
        known = np.concatenate([g[4] for g in groups])[last]
        return elements, WrittenValues(values, known)
    return frozenset((d, label, int(i)) for d, label, flat, *_ in groups for i in flat), None


def _integer(sig: tuple[tuple[int, ...], str]) -> bool:
    return np.dtype(sig[1]).kind in "iub"


End = tuple[tuple[tuple[int, ...], str], str | None, bool, bool]  # ((shape, dtype), space, remote?, destination?)


def dma_ends(jaxpr: Any, jaxpr_types: tuple[type, ...]) -> set[End]:
    """((shape, dtype), memory space, remote?, destination?) of the base ref of every DMA's source and
    destination in `jaxpr`."""
    out: set[End] = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive is tpu_prims.dma_start_p:
            avals = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])
            for k, dst in ((0, False), (1, True)):
                base, _ = flatten_ref(avals[k])
                shape = tuple(int(s) for s in getattr(base, "shape", ()))
                space = memory_space_name(getattr(base, "memory_space", None))
                try:
                    out.add(((shape, str(np.dtype(base.dtype))), space, avals[4] is not None, dst))
                except (TypeError, AttributeError):
                    pass
        for sub in sub_jaxprs(eqn.params, jaxpr_types):
            out |= dma_ends(getattr(sub, "jaxpr", sub), jaxpr_types)
    return out
