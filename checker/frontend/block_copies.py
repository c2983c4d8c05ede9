"""The grid's block copies (GRID-1) and jax's check for revisited output blocks (GRID-3).

For every BlockSpec'd operand (an input or output whose block lives in VMEM
or SMEM, not a raw `pl.ANY`/HBM ref), jax's interpreter copies, on each core
(`_execute_grid_for_core` of `interpret_pallas_call.py`):

* before a grid step, the input's block from the HBM array into the kernel's
  block buffer, at the core's first step and whenever the block's start
  indices differ from the previous step's;
* after a grid step, the output's block buffer to its block of the HBM
  array (the input's array when `input_output_aliases` aliases them), at the
  core's last step and whenever the next step's start indices differ.

Each copy becomes two `Access` ops of the core in program order (a read of
one side, a write of the other), located at the kernel's line with a
`GridCopyLoc` that names the operand, the copy and the grid step: what the
race check and its witnesses see, per core of a megacore split (GRID-2). The block
indices come from the operand's index map evaluated at the step's grid point
(with the scalar-prefetch operands' tracked contents); the start of a
`Blocked` dimension is the index times the block size, of a squeezed or
`Element` dimension the index itself.

After each step the interpreter checks the step's non-aliased VMEM output
blocks against those it ran before on the core; a block that differs from
the previous step's and equals an earlier one raises (`RevisitedBlock`,
ERR-11). That check is lowered as an access of no element carrying the
failure (as ERR-9's accesses do), so the model fails the run there under
`eager` and `on_wait`; a TPU does not check (GRID-3, D24).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from jax._src.pallas import core as pallas_core

from semcheck.checker.frontend.errors import Unsupported
from semcheck.checker.frontend.grid_copies import GridCopyLoc
from semcheck.checker.frontend.scalar_memory import CONCRETE_HINT, AbstractInput, NeedsConcreteInputs
from semcheck.checker.frontend.values import BufRef, Unknown
from semcheck.model.errors import RevisitedBlock
from semcheck.model.ops import Access, Region

if TYPE_CHECKING:
    from semcheck.checker.frontend.grid import GridRules
    from semcheck.checker.frontend.trace import KernelCall


def hbm_labels(call: KernelCall) -> dict[tuple[str, int], str]:
    """The launch's HBM buffer of each input and output: inputs in order, then the
    outputs that alias no input (an aliased output shares its input's buffer)."""
    nidx = sum(1 for op in call.operands if op.role == "index")
    alias = {int(o): int(i) - nidx for i, o in call.input_output_aliases}
    labels = {("input", j): f"hbm{j}" for j in range(call.num_inputs)}
    k = call.num_inputs
    for o in range(call.num_outputs):
        if o in alias and 0 <= alias[o] < call.num_inputs:
            labels[("output", o)] = labels[("input", alias[o])]
        else:
            labels[("output", o)] = f"hbm{k}"
            k += 1
    return labels


class _Operand:
    """One BlockSpec'd operand: its labels, block dimensions and how it is named."""

    def __init__(self, j: int, bm: Any, op: Any, vmem: str, hbm: str, output: int | None, aliased: bool,
                 loc: Any) -> None:
        self.j, self.bm, self.vmem, self.hbm = j, bm, vmem, hbm
        self.output = output  # the output's index, None for an input
        self.aliased = aliased
        self.name = op.name
        self.dims = []
        for b in bm.block_shape:
            if isinstance(b, pallas_core.Blocked):
                self.dims.append(("blocked", int(b.block_size)))
            elif isinstance(b, pallas_core.Squeezed):
                self.dims.append(("squeezed", 1))
            elif isinstance(b, pallas_core.Element) and not any(getattr(b, "padding", (0, 0)) or ()):
                self.dims.append(("element", int(b.block_size)))
            else:
                raise Unsupported("pallas_call", f"the BlockSpec of {self.role} {op.name!r} has a {type(b).__name__} "
                                  "dimension; semcheck follows Blocked, Squeezed and unpadded Element ones", loc)
        self.local = Region(tuple((0, int(s)) for s in (op.block_shape or ())))

    @property
    def role(self) -> str:
        return "input" if self.output is None else "output"

    def outside(self, starts: tuple[int, ...], shape: tuple[int, ...]) -> bool:
        """Whether the block at `starts` is not wholly inside the array as jax's interpreter holds it: each
        dimension padded up to a whole number of blocks (`pad_to_block_dimension`); it raises at such a copy."""
        return len(shape) != len(self.dims) or any(
            s < 0 or s + size > -(-int(n) // size) * size for s, (_, size), n in zip(starts, self.dims, shape))

    def region(self, starts: tuple[int, ...]) -> Region:
        return Region(tuple((s, s + size) for s, (_, size) in zip(starts, self.dims)))

    def range_text(self, starts: tuple[int, ...]) -> str:
        """The block as the interpreter prints it (`to_range` of its indexer)."""
        parts = [str(s) if kind == "squeezed" else f"slice({s}, {s + size}, 1)"
                 for s, (kind, size) in zip(starts, self.dims)]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


class BlockCopies:
    """Emits one core's grid copies around each grid step (module docstring)."""

    def __init__(self, rules: GridRules, core: int, steps: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]],
                 kernel_args: list[Any]) -> None:
        call = rules.call
        self.rules, self.core, self.steps = rules, core, steps
        self.args = kernel_args
        self.shapes = {j: tuple(call.operands[call.num_index_operands + j].shape)
                       for j in range(len(call.block_mappings))}
        self.k = 0
        self.parallel = tuple(d == "parallel" for d in (call.dimension_semantics or ()))
        subgrid = math.prod(g for g, p in zip(call.grid, self.parallel) if p)
        self.split_forced = rules.cores == 1 or subgrid <= rules.cores  # each core runs one parallel point at most
        self.shared = ""  # GRID-4: set by `parallel_sharing` for the whole call
        nidx = call.num_index_operands
        hbm = hbm_labels(call)
        aliased = {int(o) for _, o in call.input_output_aliases}
        self.ops: list[_Operand] = []
        for j, bm in enumerate(call.block_mappings):
            op = call.operands[nidx + j]
            arg = kernel_args[nidx + j]
            if op.kind != "buffer" or call.sees_array(op) or type(arg) is not BufRef:
                continue  # a raw HBM ref (the kernel copies it itself) or an array in place (GRID-5)
            out = j - call.num_inputs if j >= call.num_inputs else None
            label = hbm[("input", j) if out is None else ("output", out)]
            self.ops.append(_Operand(j, bm, op, arg.name, label, out, out in aliased, call.loc))
        self.history: dict[int, list[list[tuple[tuple[int, ...], tuple[int, ...]]]]] = {}  # output -> per lane
        self._shared_history: set[int] = set()  # outputs whose lanes share one history list (all alike)
        self._starts: dict[tuple[int, tuple[int, ...]], list[tuple[int, ...]]] = {}
        self._prev: dict[int, list[tuple[int, ...]]] = {}

    # --- block indices ----------------------------------------------------------------

    def starts(self, o: _Operand, point: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Per device: the block's start indices at `point` (the index map, evaluated)."""
        key = (o.j, point)
        hit = self._starts.get(key)
        if hit is not None:
            return hit
        rules, call = self.rules, self.rules.call
        nidx = call.num_index_operands
        grid_args = [np.array([p], dtype=np.int32) for p in point]
        saved, outer = rules.bodies, rules.loc_override
        rules.bodies = [[]] * rules.L  # the index map's own loads are not the kernel's: one list takes them all
        rules.loc_override = call.loc
        try:
            outs = rules.eval_closed(o.bm.index_map_jaxpr, [*grid_args, *self.args[:nidx]], None)
        finally:
            rules.bodies, rules.loc_override = saved, outer
        if len(outs) != len(o.dims):
            raise Unsupported("pallas_call", f"the index map of {o.role} {o.name!r} returns {len(outs)} indices "
                              f"for a block of {len(o.dims)} dimensions", call.loc)
        if all(_one_value(v) for v in outs):  # the same block on every device: one tuple, shared
            idx = [self._lane_ints(v, o)[0] for v in outs]
            hit = [tuple(i * size if kind == "blocked" else i for i, (kind, size) in zip(idx, o.dims))] * rules.L
            self._starts[key] = hit
            return hit
        lanes = [self._lane_ints(v, o) for v in outs]
        hit = [tuple(idx[d] * size if kind == "blocked" else idx[d] for idx, (kind, size) in zip(lanes, o.dims))
               for d in range(rules.L)]
        self._starts[key] = hit
        return hit

    def precompute(self, points: list[tuple[int, ...]]) -> None:
        """`starts` of every operand at every one of `points`, from one evaluation of each index map with
        the points as lanes (`GridRules.run_core`); anything unusual is left to `starts`, point by point."""
        rules, call = self.rules, self.rules.call
        todo = [p for p in dict.fromkeys(points) if any((o.j, p) not in self._starts for o in self.ops)]
        if len(todo) < 2 or not call.grid:
            return
        nidx = call.num_index_operands
        devices = rules.lane_devices
        D, S = int(devices.shape[0]), len(todo)
        coords = np.asarray(todo, dtype=np.int32).reshape(S, len(call.grid))
        saved, outer = rules.bodies, rules.loc_override
        rules.set_lanes(np.tile(devices, S))  # lane s * D + d: device d at point s
        rules.bodies = [[]] * rules.L
        rules.loc_override = call.loc
        rules.lossy = False
        found: dict[tuple[int, tuple[int, ...]], list[tuple[int, ...]]] = {}
        try:
            grid_args = [np.repeat(coords[:, d], D) for d in range(coords.shape[1])]
            for o in self.ops:
                outs = rules.eval_closed(o.bm.index_map_jaxpr, [*grid_args, *self.args[:nidx]], None)
                if rules.lossy or len(outs) != len(o.dims) or any(type(v) is not np.ndarray for v in outs):
                    return
                flat = [v.reshape(-1) for v in outs]
                if not flat or any(f.size not in (1, S * D) for f in flat):
                    return
                cols = np.stack([np.broadcast_to(f * size if kind == "blocked" else f, (S * D,))
                                 for f, (kind, size) in zip(flat, o.dims)], axis=1).reshape(S, D, len(o.dims))
                for s, (p, rows) in enumerate(zip(todo, cols.tolist())):
                    first = tuple(rows[0])
                    if rows.count(rows[0]) == D:  # one block for every device: one tuple, shared
                        found[(o.j, p)] = [first] * D
                    else:
                        found[(o.j, p)] = [tuple(r) for r in rows]
        except Exception:  # noqa: BLE001 (an optimisation: `starts` meets and reports it point by point)
            return
        finally:
            rules.set_lanes(devices)
            rules.bodies, rules.loc_override = saved, outer
        for key, hit in found.items():
            self._starts.setdefault(key, hit)

    def _lane_ints(self, v: Any, o: _Operand) -> list[int]:
        """One block index per device; never guessed (ACC-4)."""
        loc = self.rules.call.loc
        what = f"the block index of {o.role} {o.name!r} (its BlockSpec's index map)"
        if isinstance(v, (int, np.integer)):
            return [int(v)] * self.rules.L
        if type(v) is np.ndarray and v.size == 1:
            return [int(v.reshape(-1)[0])] * self.rules.L
        if type(v) is not np.ndarray:
            src = f" (it comes from {v.why})" if isinstance(v, Unknown) else ""
            if isinstance(v, AbstractInput):
                raise NeedsConcreteInputs("pallas_call", f"{what} depends on a value semcheck cannot compute{src}; "
                                          f"{CONCRETE_HINT}", loc)
            raise Unsupported("pallas_call", f"{what} depends on a value semcheck cannot compute{src}", loc)
        flat = v.reshape(-1)
        if flat.size == 1:
            return [int(flat[0])] * self.rules.L
        if flat.size != self.rules.L:
            raise Unsupported("pallas_call", f"{what} is not a scalar", loc)
        return [int(x) for x in flat.tolist()]

    def parallel_sharing(self, points: list[tuple[int, ...]]) -> str:
        """GRID-4: two grid points at different coordinates of the parallel dimensions whose blocks of
        one HBM array conflict (an output's, or an output's and its aliased input's), said as a reason;
        "" when there are none or every split of the parallel points between the cores is the same."""
        if self.split_forced:
            return ""
        entries: dict[tuple[int, str], dict[tuple[Any, ...], tuple[int, ...]]] = {}
        for o in self.ops:
            for pt in points:
                coords = tuple(c for c, p in zip(pt, self.parallel) if p)
                for d, st in enumerate(self.starts(o, pt)):
                    key = (o.region(st).box, coords, o.output is not None)
                    entries.setdefault((d, o.hbm), {}).setdefault(key, pt)
        for seen in entries.values():
            items = list(seen.items())
            for i, ((box1, c1, w1), p1) in enumerate(items):
                for (box2, c2, w2), p2 in items[i + 1:]:
                    if c1 != c2 and (w1 or w2) and all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(box1, box2)):
                        return (f"grid steps {p1} and {p2}, at different coordinates of the parallel dimensions, "
                                "copy overlapping blocks of one array, and a TPU splits the parallel dimensions "
                                "between its cores its own way (not by the interpreter's shuffle): it may run them "
                                "on different cores")
        return ""

    # --- emission ---------------------------------------------------------------------

    def _loc(self, o: _Operand, kind: str, hbm: bool, step: tuple[int, ...], block: tuple[int, ...]) -> GridCopyLoc:
        call = self.rules.call
        blk = tuple(s // size if k == "blocked" else s for s, (k, size) in zip(block, o.dims))
        # a kernel without a grid runs its body once: there is no grid step to name
        when = ((f"before grid step {step}" if step else "before the kernel body") if kind == "in" else
                (f"after grid step {step}" if step else "after the kernel body"))
        what = (f"the grid's copy-in of {o.role} {o.name!r} (its BlockSpec's block {blk}) {when}"
                if kind == "in" else
                f"the grid's write-back of {o.role} {o.name!r} (its BlockSpec's block {blk}) {when}")
        parallel = tuple(c for c, p in zip(step, self.parallel) if p) if self.rules.cores > 1 else ()
        return GridCopyLoc(call.loc.file, call.loc.line, call.loc.text, what=what, operand=o.name, kind=kind,
                           step=self.k, hbm=hbm, parallel=parallel, split_forced=self.split_forced,
                           shared=self.shared)

    def _check_windows(self, o: _Operand, point: tuple[int, ...], cur: list[tuple[int, ...]]) -> None:
        """ERR-32: a block past the array's end (or before its start), which jax's interpreter refuses
        ("Out-of-bounds block index"), leaves `deadlock-free` open in the interpreter's modes; the copy is
        lowered as it is, and a TPU does not check (D33)."""
        rules = self.rules
        if rules.unpredicted:
            return
        for st in dict.fromkeys(cur):
            if o.outside(st, self.shapes[o.j]):
                when = f"at grid step {point}" if point else "of the kernel"
                kind = "copy-in" if o.output is None else "write-back"
                blk = tuple(x // size if k == "blocked" else x for x, (k, size) in zip(st, o.dims))
                rules.unpredicted = (
                    f"the grid's {kind} of {o.role} {o.name!r} {when} at {rules.call.loc.file}:{rules.call.loc.line} "
                    f"is of block {blk}, not inside the array's shape {self.shapes[o.j]} (padded to whole blocks), "
                    "which jax's interpreter refuses (an out-of-bounds block index raises; specs/deciding/failing.md "
                    "ERR-32)")
                return

    def _emit(self, per_lane: list[list[Access]]) -> None:
        bodies = self.rules.bodies
        for d, ops in enumerate(per_lane):
            bodies[d].extend(ops)

    def before(self) -> None:
        """The copy-ins of the core's next grid step."""
        _, point, _ = self.steps[self.k]
        per_lane: list[list[Access]] = [[] for _ in range(self.rules.L)]
        for o in self.ops:
            if o.output is not None:
                continue
            cur = self.starts(o, point)
            self._check_windows(o, point, cur)
            prev = self._prev.get(o.j)
            self._prev[o.j] = cur
            if _uniform(cur) and (prev is None or _uniform(prev)):  # every device alike: decided once
                if prev is None or prev[0] != cur[0]:
                    ops = [Access(o.hbm, o.region(cur[0]), False, self._loc(o, "in", True, point, cur[0])),
                           Access(o.vmem, o.local, True, self._loc(o, "in", False, point, cur[0]))]
                    for lane_ops in per_lane:
                        lane_ops += ops
                continue
            made: dict[tuple[int, ...], list[Access]] = {}  # devices at one block share its ops
            for d in range(self.rules.L):
                if prev is None or prev[d] != cur[d]:
                    ops = made.get(cur[d])
                    if ops is None:
                        ops = made[cur[d]] = [
                            Access(o.hbm, o.region(cur[d]), False, self._loc(o, "in", True, point, cur[d])),
                            Access(o.vmem, o.local, True, self._loc(o, "in", False, point, cur[d]))]
                    per_lane[d] += ops
            self._prev[o.j] = cur
        if any(per_lane):
            self._emit(per_lane)

    def after(self) -> None:
        """The write-backs of the step just run, then the interpreter's revisiting check (GRID-3)."""
        loop_idx, point, nxt = self.steps[self.k]
        last = self.k + 1 == len(self.steps)
        L = self.rules.L
        per_lane: list[list[Access]] = [[] for _ in range(L)]
        checks: list[tuple[_Operand, list[tuple[int, ...]]]] = []
        for o in self.ops:
            if o.output is None:
                continue
            cur = self.starts(o, point)
            self._check_windows(o, point, cur)
            following = self.starts(o, nxt)
            if _uniform(cur) and _uniform(following):  # every device alike: decided once
                if last or following[0] != cur[0]:
                    ops = [Access(o.vmem, o.local, False, self._loc(o, "out", False, point, cur[0])),
                           Access(o.hbm, o.region(cur[0]), True, self._loc(o, "out", True, point, cur[0]))]
                    for lane_ops in per_lane:
                        lane_ops += ops
                if not o.aliased:
                    checks.append((o, cur))
                continue
            made: dict[tuple[int, ...], list[Access]] = {}
            for d in range(L):
                if last or following[d] != cur[d]:
                    ops = made.get(cur[d])
                    if ops is None:
                        ops = made[cur[d]] = [
                            Access(o.vmem, o.local, False, self._loc(o, "out", False, point, cur[d])),
                            Access(o.hbm, o.region(cur[d]), True, self._loc(o, "out", True, point, cur[d]))]
                    per_lane[d] += ops
            if not o.aliased:
                checks.append((o, cur))
        for o, cur in checks:
            hist = self.history.get(o.output)
            if hist is None:  # one history shared by every device while their blocks agree
                hist = self.history[o.output] = [[]] * L
                self._shared_history.add(o.output)
            if o.output in self._shared_history:
                if _uniform(cur):
                    err = self._revisit(o, hist[0], loop_idx, cur[0])
                    hist[0].append((loop_idx, cur[0]))
                    if err is not None:
                        loc = self._loc(o, "out", False, point, cur[0])
                        empty = Region(tuple((0, 0) for _ in o.local.box))
                        for d in range(L):  # each device's check its own operation, as below
                            per_lane[d].append(Access(o.vmem, empty, False, loc, err))
                    continue
                hist = self.history[o.output] = [list(hist[0]) for _ in range(L)]
                self._shared_history.discard(o.output)
            for d in range(L):
                err = self._revisit(o, hist[d], loop_idx, cur[d])
                hist[d].append((loop_idx, cur[d]))
                if err is not None:
                    loc = self._loc(o, "out", False, point, cur[d])
                    empty = Region(tuple((0, 0) for _ in o.local.box))  # no element: a check, not an access
                    per_lane[d].append(Access(o.vmem, empty, False, loc, err))
        if any(per_lane):
            self._emit(per_lane)
        self.k += 1

    def _revisit(self, o: _Operand, hist: list[tuple[tuple[int, ...], tuple[int, ...]]],
                 loop_idx: tuple[int, ...], cur: tuple[int, ...]) -> RevisitedBlock | None:
        """`_check_for_revisiting` for one output on one device (GRID-3)."""
        if not hist or hist[-1][1] == cur:
            return None
        past = [it for it, s in hist if s == cur]
        if not past:
            return None
        call = self.rules.call
        return RevisitedBlock(o.output, o.range_text(cur), _tuple_text(loop_idx), _tuple_text(past[0]),
                              _tuple_text(past[-1]), operand=o.name, where=f"{call.loc.file}:{call.loc.line}")


def _one_value(v: Any) -> bool:
    """Whether an index map's result is one number for every device."""
    return isinstance(v, (int, np.integer)) or (type(v) is np.ndarray and v.size == 1)


def _uniform(starts: list[tuple[int, ...]]) -> bool:
    """Whether every device's block starts are one tuple (`starts` shares it then), compared in C."""
    return starts.count(starts[0]) == len(starts)


def _tuple_text(t: tuple[int, ...]) -> str:
    return repr(tuple(int(x) for x in t))


__all__ = ["BlockCopies"]
