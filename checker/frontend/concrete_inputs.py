"""The concrete values a kernel's scalar operands take, from concrete example arguments.

`trace.trace_kernels` only traces: the kernel's operands are abstract. When a
target's example arguments are real arrays, `kernel_inputs` evaluates the
traced program far enough to know the operands a kernel keeps control data in
(`is_scalar_operand`: scalar-prefetch tables and small integer or float
SMEM/VMEM inputs seen whole), as they arrive at each device:

* only the equations those operands depend on run (a backward slice), each by
  binding its primitive on concrete values; float compute runs only where a
  small float operand (ACC-26) needs it, and a float value computed by
  arithmetic that rounds has none (`float_exact`);
* call bodies are entered (`jit`, `closed_call`, `checkpoint`, and the
  primal function of a `custom_vjp`/`custom_jvp`); a `shard_map` body runs once per
  device of its manual axes on that device's shard (`axis_index` is the
  device's coordinate), in passes when it needs a collective: jax runs each
  collective once every device knows its input (`pre_kernel_collectives`, ACC-8);
* a `pallas_call` records its operands (and its dynamic grid bounds, as
  `GridMapping` passes them: before the operands) and does not run: its outputs have no
  value, nor has anything computed from them, or inside a `cond`/loop around a
  kernel; unless a later call's operands need them (PRG-169: `kernel_outputs` runs it),
  and an output known only in part is a `partial_values.Partial`, carried through the
  XLA ops after it element by element (PRG-192, PRG-193).

A value that cannot be computed is `None`, never a guess: the kernel then sees
the operand as unknown (`scalar_memory.AbstractInput` when the example
arguments were shapes), with the reason its first missing input gives (a host
callback, an earlier kernel's output: `KernelInputs.why_of`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from semcheck.checker.frontend.pre_kernel_floats import FloatValues, float_call, per_mode as _per_mode, same_values
from semcheck.checker.frontend.int_overflow import OVERFLOWING
from semcheck.checker.frontend.pre_kernel_order import ORDERED, has_ordered, order_refusal
from semcheck.checker.frontend.integer_eval import integer_numeric
from semcheck.checker.frontend.scalar_memory import trackable
from semcheck.checker.frontend.closed_refs import discharged_order
from semcheck.checker.frontend.cond_inputs import CondInputs
from semcheck.checker.frontend.device_shards import Device, names_axis, shard
from semcheck.checker.frontend.kernel_eqns import (KERNEL_PRIMS, core_map_operands, pallas_operands, sub_jaxprs,
                                                   walk_kernel_eqns)
from semcheck.checker.frontend.kernel_outputs import describe, run_kernel, unwritten_reads
from semcheck.checker.frontend.partial_values import Partial, derive, plain, stack
from semcheck.checker.frontend.pre_kernel_collectives import MAX_PASSES, NOT_DETERMINISTIC, Rounds
from semcheck.checker.frontend.scan_inputs import NOT_EVALUATED, LoopInputs
from semcheck.checker.frontend.trace import KernelCall, Operand, eqn_loc, find_kernels, make_jaxpr
from semcheck.model.ops import NO_LOC

# Calls whose one body's binders are the equation's operands, in order, and whose outputs are that
# body's outputs when it runs forwards: jit, plain calls, rematerialisation (`jax.checkpoint` binds
# `remat2`; older releases named it `checkpoint`), and custom derivatives, whose primal body is the
# function itself (`custom_vjp_call`/`custom_jvp_call`: `call_jaxpr`; the rules, thunks rather than
# jaxprs, only run under differentiation, which the traced program has already done).
_CALLS = ("pjit", "jit", "closed_call", "core_call", "remat2", "checkpoint", "custom_vjp_call",
          "custom_jvp_call", "custom_vjp_call_jaxpr")
_ENTERED = (*_CALLS, "shard_map")


@dataclasses.dataclass(frozen=True)
class KernelInputs:
    """Per kernel operand (`KernelCall.operands` order): its lane array (lanes, *shape), or None."""

    values: tuple[np.ndarray | None, ...]
    # Why an operand has no value: the example arguments were shapes (`abstract`), or else.
    abstract: bool
    why: str = ""
    # Per dynamic grid bound (`KernelCall.dynamic_grid_dims` order): its lane array (lanes,), or None.
    grid_bounds: tuple[np.ndarray | None, ...] = ()
    # Why one value in particular has none (ACC-8: a host callback, an earlier kernel's output, ...):
    # per operand, then per grid bound; None where `why` says it.
    operand_why: tuple[str | None, ...] = ()
    bound_why: tuple[str | None, ...] = ()
    # PRG-169: the earlier kernel calls (indices) whose outputs, run by jax's interpreter, gave some of these
    # values, and their words; empty when none did
    producers: tuple[int, ...] = ()
    computed_by: str = ""
    # PRG-200: of those calls, the ones that may read memory nothing writes, and why, in words ("" when none)
    unwritten: str = ""
    # PRG-183: where a loop's iterations give the launch different values (so it has none above), each
    # iteration's own, in the order the program runs them: (which iteration, in words; its inputs), equal values
    # sharing one object; empty otherwise, or where they cannot be told apart
    iterations: tuple[tuple[str, KernelInputs], ...] = ()
    # PRG-198: for one iteration's inputs, the devices that make that reach where only some do (the others' values
    # are their own last reach's); None where every device does
    reached_by: frozenset[int] | None = None
    hardware: KernelInputs | None = None  # ACC-27: the values under `hardware` where they differ from these
    on_cpu: bool = False  # ACC-28: these are the interpreter modes' values (a tie in the kernel is followed)
    floats: bool = False  # ACC-41: the float operands a lowering following float copies tracks have their values
    cases: Any = None  # ACC-64: in a lowering for `hardware`, the `range_cases.RangeCases` of its case
    pins: Any = None  # ACC-71: the values racy reads are given, `(lane, body position) -> (loc, values, initial)`

    def why_of(self, i: int) -> str:
        """Why operand `i` has no value."""
        return (self.operand_why[i] if i < len(self.operand_why) else None) or self.why

    def why_of_bound(self, k: int) -> str:
        """Why dynamic grid bound `k` has no value."""
        return (self.bound_why[k] if k < len(self.bound_why) else None) or self.why


def is_scalar_operand(op: Operand, floats: bool = False) -> bool:
    """An operand whose contents the front end tracks from the launch on (see `scalar_memory`).

    Scalar-prefetch operands, and inputs in SMEM, VMEM or (integer, ACC-30) HBM
    that the kernel sees whole (block shape = array shape: the interpreter
    copies them in at a core's first grid step and never again). `floats`: as a lowering that follows float
    copies tracks them (`trackable`, ACC-41).
    """
    if op.kind != "buffer" or not trackable(op.shape, op.dtype, op.memory_space, hbm=True, floats=floats):
        return False
    if op.role == "index":
        return True
    return op.role == "input" and op.block_shape is not None and tuple(op.block_shape) == tuple(op.shape)


def trace_with_inputs(fn: Callable[..., Any], args: Sequence[Any], *, path: str = "", per_mode: bool = False,
                      floats: bool = False) -> tuple[list[KernelCall], list[KernelInputs]]:
    """`trace.trace_kernels(fn, args)` and, per kernel, the concrete values of its scalar operands."""
    return inputs_of_trace(make_jaxpr(fn, args, path=path), args, path=path, per_mode=per_mode, floats=floats)


def inputs_of_trace(closed: Any, args: Sequence[Any], *, path: str = "", per_mode: bool = False,
                    floats: bool = False) -> tuple[list[KernelCall], list[KernelInputs]]:
    """`trace_with_inputs` of a trace already made: `closed` is `make_jaxpr(fn, args)`; `floats`: the values of
    the float operands a lowering following float copies tracks too (`kernel_inputs`)."""
    from semcheck.checker.frontend.errors import NotTpuPallasCall

    calls = find_kernels(closed.jaxpr)
    if not calls:
        raise NotTpuPallasCall("no TPU pallas_call or core_map found in the traced function", path=path or None)
    return calls, kernel_inputs(closed, calls, args, run_kernels=True, per_mode=per_mode, floats=floats)


def kernel_inputs(closed: Any, calls: Sequence[KernelCall], args: Sequence[Any], *,
                  run_kernels: bool = False, per_mode: bool = False, floats: bool = False) -> list[KernelInputs]:
    """Per kernel of `closed` (the traced `fn(*args)`), its scalar operands' values (module docstring); `floats`:
    also those of the float operands a lowering following float copies tracks (ACC-41: `is_scalar_operand`).
    `run_kernels` (PRG-169): where a value is computed from an earlier kernel call's output, that call is run
    (`kernel_outputs`), and the values it gives are marked with it. `per_mode` (ACC-27): the values of the
    interpreter's modes, with `hardware`'s where they differ; else the values every mode shares."""
    import jax  # lazy: see trace's docstring

    leaves = [_concrete(x) for x in jax.tree.leaves(tuple(args))]
    abstract = any(x is None for x in leaves)
    empty = [KernelInputs((None,) * len(c.operands), abstract, _ABSTRACT if abstract else "",
                          (None,) * len(c.dynamic_grid_dims), floats=floats) for c in calls]
    if not any(c.dynamic_grid_dims or any(is_scalar_operand(op, floats) for op in c.operands) for c in calls):
        return empty
    if all(x is None for x in leaves):
        return empty  # nothing to compute from: skip the evaluation
    inputs = [*(_concrete(c) for c in closed.consts), *leaves]

    def values(on_cpu: bool) -> tuple[list[KernelInputs], str]:
        got, cpu = _evaluate(closed, calls, inputs, abstract, empty, run_kernels=False, on_cpu=on_cpu, floats=floats)
        if run_kernels and any(_KERNEL_OUTPUT in (w or "") for i in got for w in (*i.operand_why, *i.bound_why)):
            again, cpu = _evaluate(closed, calls, inputs, abstract, empty, run_kernels=True, on_cpu=on_cpu,
                                   floats=floats)
            got = [_computed(a, b) for a, b in zip(got, again)]
        return got, cpu

    if not per_mode:
        return values(False)[0]
    got, cpu = values(True)
    return _per_mode(got, values(False)[0] if cpu else None)  # ACC-27: twice only where the modes may differ


def _computed(before: KernelInputs, after: KernelInputs) -> KernelInputs:
    """PRG-169: `after` (kernels run), marked with the kernels that ran before the call where it gives values
    `before` (no kernel run) lacked; else unmarked (its reasons say why a kernel's output gave no value)."""
    new = any(a is None and b is not None for a, b in zip(before.values, after.values)) or any(
        a is None and b is not None for a, b in zip(before.grid_bounds, after.grid_bounds))
    return after if new and after.producers else dataclasses.replace(after, producers=(), computed_by="")


def _evaluate(closed: Any, calls: Sequence[KernelCall], args: list[Any], abstract: bool, empty: list[KernelInputs],
              *, run_kernels: bool, on_cpu: bool = False, floats: bool = False) -> tuple[list[KernelInputs], str]:
    """The values, and the first followed only on the CPU (ACC-27: `on_cpu`, else "")."""
    interp = _Interpreter(calls, run_kernels=run_kernels, floats=floats)
    interp.on_cpu = on_cpu
    try:
        interp.run(closed.jaxpr, args, None, 0)
    except Exception:  # noqa: BLE001 - a failed evaluation only means: no values
        return empty, ""
    out = []
    for k, call in enumerate(calls):
        per_device = interp.records.get(k)
        if per_device is None:
            out.append(dataclasses.replace(empty[k], why=empty[k].why or _NOT_REACHED))
            continue
        producers = tuple(sorted(j for j in interp.ran if j < k))

        def made(per_device: dict[int, list[Any]], reasons: dict[int, list[str | None]],
                 call: KernelCall = call, producers: tuple[int, ...] = producers) -> KernelInputs:
            return _made(call, per_device, reasons, abstract, producers, interp.ran, interp.unwritten, floats)

        got = made(per_device, interp.reasons.get(k, {}))
        out.append(dataclasses.replace(got, iterations=interp.iteration_inputs(k, made)))  # PRG-183
    return out, interp.cpu_only


def _made(call: KernelCall, per_device: dict[int, list[Any]], reasons: dict[int, list[str | None]], abstract: bool,
          producers: tuple[int, ...], ran: dict[int, str], unwritten: dict[int, str],
          floats: bool = False) -> KernelInputs:
    """One launch's `KernelInputs` from its operands' values per device (and why some have none)."""
    lanes = call.mesh.num_devices
    nb = len(call.dynamic_grid_dims)  # the launch's operands: dynamic grid bounds first
    whys = _first_reasons(reasons)
    bounds = tuple(_stack_bound([per_device[d][b] for d in sorted(per_device)], lanes) for b in range(nb))
    values = []
    for i, op in enumerate(call.operands):
        if not is_scalar_operand(op, floats):
            values.append(None)
            continue
        values.append(_stack([per_device[d][nb + i] if nb + i < len(per_device[d]) else None
                              for d in sorted(per_device)], lanes, op))
    why = _ABSTRACT if abstract else _SOME_DEVICES if len(per_device) < lanes else _NOT_COMPUTED
    return KernelInputs(tuple(values), abstract, why, bounds, operand_why=tuple(whys[nb:]),
                        bound_why=tuple(whys[:nb]), producers=producers,
                        computed_by=", ".join(ran[j] for j in producers),
                        unwritten="; ".join(f"{ran[j]} through {unwritten[j]}" for j in producers if unwritten.get(j)),
                        floats=floats)


def inputs_by_launch(closed: Any, args: Sequence[Any]) -> dict[int, KernelInputs]:
    """PRG-167: `kernel_inputs` per launch equation (by `id`), for a program of calls that finds its calls by
    equation. A launch `find_kernels` counts more than once (a jitted function called twice shares its jaxpr)
    keeps its values only where every count gives the same; otherwise it has none, never a guess. PRG-183: a
    launch counted once keeps its loop iterations' own values (`KernelInputs.iterations`), one per reach."""
    eqns = list(walk_kernel_eqns(closed.jaxpr))
    got = kernel_inputs(closed, find_kernels(closed.jaxpr), args, run_kernels=True)
    out: dict[int, KernelInputs] = {}
    for eqn, inputs in zip(eqns, got):
        seen = out.get(id(eqn))
        if seen is not None and not same_values(seen, inputs):
            inputs = dataclasses.replace(inputs, values=(None,) * len(inputs.values),
                                         grid_bounds=(None,) * len(inputs.grid_bounds), why=_SHARED, operand_why=(),
                                         bound_why=())
        if seen is not None:  # PRG-183: reaches counted apart per launch only where it is counted once
            inputs = dataclasses.replace(inputs, iterations=())
        out[id(eqn)] = inputs
    return out


_SHARED = ("the kernel's launch runs more than once with different scalar inputs (one jaxpr shared by "
           "several calls), which a program of calls does not tell apart")


_KERNEL_OUTPUT = "the output of kernel call"
_ABSTRACT = "the example arguments are shapes (jax.ShapeDtypeStruct), not values"
_NOT_REACHED = NOT_EVALUATED
_SOME_DEVICES = ("the kernel is launched in a branch of a cond that only some devices take, whose calls' values "
                 "are not followed (PRG-170)")
_NOT_COMPUTED = "semcheck could not compute the operand from the example arguments"


def _first_reasons(per_device: dict[int, list[str | None]]) -> list[str | None]:
    """Per launch operand, the reason the lowest device that has one gives."""
    out: list[str | None] = []
    for d in sorted(per_device):
        for i, r in enumerate(per_device[d]):
            if i == len(out):
                out.append(None)
            out[i] = out[i] or r
    return out


def _concrete(x: Any) -> np.ndarray | None:
    """`x` as a numpy array, or None if it is abstract (a ShapeDtypeStruct, a tracer)."""
    import jax  # lazy: see trace's docstring

    if isinstance(x, (jax.ShapeDtypeStruct, jax.core.Tracer)):
        return None
    try:
        arr = np.asarray(x)
    except Exception:  # noqa: BLE001 - a key array, a non-addressable array, ...
        return None
    return None if arr.dtype == object else arr


def _stack(per_device: list[Any], lanes: int, op: Operand) -> np.ndarray | None:
    """Per-device values -> one lane array (leading axis 1 when every device agrees)."""
    if len(per_device) != lanes or any(v is None for v in per_device):
        return None
    if any(isinstance(v, Partial) for v in per_device):  # PRG-193: some elements unknown
        return stack(per_device) if all(np.shape(plain(v)) == tuple(op.shape) for v in per_device) else None
    arrs = [np.asarray(v) for v in per_device]
    if any(a.shape != tuple(op.shape) for a in arrs):
        return None
    out = np.stack(arrs)
    if out.shape[0] > 1 and bool((out == out[:1]).all()):
        out = out[:1]
    return out


def _stack_bound(per_device: list[Any], lanes: int) -> np.ndarray | None:
    """Per-device values of a dynamic grid bound (one integer each) -> a lane array, or None."""
    if len(per_device) != lanes or any(v is None for v in per_device):
        return None
    arrs = [np.asarray(v) for v in per_device]
    if any(a.size != 1 or a.dtype.kind not in "iu" for a in arrs):
        return None
    out = np.array([int(a.reshape(())) for a in arrs], dtype=np.int64)
    if out.shape[0] > 1 and bool((out == out[:1]).all()):
        out = out[:1]
    return out


class _Interpreter(LoopInputs, CondInputs, FloatValues):
    """Binds the equations the kernels' scalar operands depend on (module docstring)."""

    def __init__(self, calls: Sequence[KernelCall], *, run_kernels: bool = False, floats: bool = False) -> None:
        from jax._src import core as jax_core  # lazy: see trace's docstring

        self.calls = calls
        self.records: dict[int, dict[int, list[Any]]] = {}
        # per kernel, per lane: why each launch operand has no value (None: it has one, or no reason known)
        self.reasons: dict[int, dict[int, list[str | None]]] = {}
        self._why: dict[Any, str] = {}  # variable -> why it has no value (ACC-8)
        self._literal = jax_core.Literal
        self._kernel_counts: dict[int, int] = {}
        self._needed: dict[tuple[int, tuple[bool, ...]], tuple[set[Any], tuple[bool, ...]]] = {}
        self._rounds: Rounds | None = None  # the collectives of the shard_map body being evaluated
        self.run_kernels = run_kernels  # PRG-169: run a kernel whose outputs a later call's operands need
        self.floats = floats  # ACC-41: the float operands a lowering following float copies tracks too
        self.ran: dict[int, str] = {}  # the kernel calls run so (index -> their words)
        self.unwritten: dict[int, str] = {}  # PRG-200: of those, why one may read memory nothing writes
        self.start_loops()  # PRG-183: each launch's values per reach, and the loops' iterations around it

    # --- the walk --------------------------------------------------------------------

    def run(self, jaxpr: Any, args: Sequence[Any], dev: Device | None, index: int,
            out_needed: tuple[bool, ...] | None = None) -> tuple[list[Any], int]:
        """Evaluate `jaxpr` (binders: constvars then invars); returns its outputs and the next kernel index.
        `out_needed`: which outputs to compute besides the kernels' operands (a loop's carry)."""
        binders = [*jaxpr.constvars, *jaxpr.invars]
        needed, _ = self._need(jaxpr, out_needed or (False,) * len(jaxpr.outvars))
        env: dict[Any, Any] = dict(zip(binders, args))

        def read(v: Any) -> Any:
            if type(v) is self._literal:
                return _concrete(v.val)
            return env.get(v)

        def whole(x: Any) -> Any:  # PRG-193: a loop or cond around calls takes a value known in part as unknown
            return None if isinstance(x, Partial) else x

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            outs: list[Any] | None = None
            if name in KERNEL_PRIMS:
                lane = dev.lane if dev else 0
                # in the order of the call jax runs (LAUNCH-4: closed-over refs move behind the index operands;
                # a core_map's operands are its kernel's inputs in order, LAUNCH-6, ACC-47)
                order = discharged_order if name == "pallas_call" else (lambda _, xs: list(xs))
                self.records.setdefault(index, {})[lane] = order(eqn, [read(v) for v in eqn.invars])
                self.reasons.setdefault(index, {})[lane] = order(eqn, [self._reason(v) for v in eqn.invars])
                self.reached(index, lane)  # PRG-183
                if self.run_kernels and any(v in needed for v in eqn.outvars):
                    outs, why = run_kernel(eqn, [read(v) for v in eqn.invars], self.calls[index],
                                           [self._reason(v) for v in eqn.invars])  # PRG-206: why one has none
                    if outs is not None:
                        self.ran.setdefault(index, describe(self.calls[index]))
                        why = unwritten_reads(eqn, [read(v) for v in eqn.invars])  # PRG-220: per lane's inputs
                        if not self.unwritten.get(index):
                            self.unwritten[index] = why
                else:
                    why = (f"{_KERNEL_OUTPUT} {index}: semcheck runs a kernel only where a later call's scalar "
                           "inputs need its outputs (PRG-169)")
                if outs is None:  # (PRG-192: an output with some unknown elements is a Partial, saying why)
                    for v in eqn.outvars:
                        self._why.setdefault(v, why)
                index += 1
            elif self._kernels_in(eqn):
                if name in _ENTERED and len(list(sub_jaxprs(eqn))) == 1:
                    outs, index = self._enter(eqn, [read(v) for v in eqn.invars], dev, index)
                elif self.evaluates(eqn):  # PRG-168, PRG-186
                    outs, index = self.loop_or_skip(eqn, [whole(read(v)) for v in eqn.invars], dev, index)
                elif name == "cond":
                    outs, index = self._cond_or_skip(eqn, [whole(read(v)) for v in eqn.invars], dev, index,
                                                     tuple(v in needed for v in eqn.outvars))
                else:
                    index += self._kernels_in(eqn)
            elif any(v in needed for v in eqn.outvars):
                invals = [read(v) for v in eqn.invars]
                entered = name in _CALLS and len(sub_jaxprs(eqn)) == 1 and (  # ACC-26: each equation's floats
                    float_call(eqn) or has_ordered(eqn, ORDERED | OVERFLOWING)  # ACC-33, ACC-34
                    or any(isinstance(x, Partial) for x in invals))  # PRG-193: each one's elements
                outs = self.enter_float_call(eqn, lambda: self._enter(eqn, invals, dev, index, tuple(
                    v in needed for v in eqn.outvars))[0]) if entered else self._bind(eqn, invals, dev)
                if outs is not None and not entered and (rounds := self.float_refusal(
                        eqn, [plain(x) for x in invals], [plain(o) for o in outs]) or order_refusal(
                        eqn, [plain(x) for x in invals], [plain(o) for o in outs], self.float_outer)) is not None:
                    outs = None  # ACC-26: a float computed by arithmetic that rounds is no fact; ACC-33: nor an order
                    for v in eqn.outvars:
                        self._why.setdefault(v, rounds)
                if outs is None or any(o is None for o in outs):
                    cause = self._cause(eqn, dev)
                    for v in eqn.outvars:
                        self._why.setdefault(v, cause)
            if outs is not None:
                for v, o in zip(eqn.outvars, outs):
                    env[v] = o
                    if isinstance(o, Partial):  # PRG-193: why its unknown elements are, for what reads them
                        self._why.setdefault(v, o.why)
        return [read(v) for v in jaxpr.outvars], index

    @staticmethod
    def _value(x: Any) -> np.ndarray | None:
        return _concrete(x)

    def _tracks(self, op: Operand) -> bool:
        return is_scalar_operand(op, self.floats)

    def _reason(self, v: Any) -> str | None:
        return None if type(v) is self._literal else self._why.get(v)

    def _cause(self, eqn: Any, dev: Device | None) -> str:
        """Why `eqn` gave no value: its own nature, else the first input without one."""
        name = eqn.primitive.name
        loc = eqn_loc(eqn, NO_LOC)
        at = f" at {loc}" if loc.line else ""
        if name in NOT_DETERMINISTIC:
            return f"'{name}'{at}, which is not a function of the example arguments semcheck evaluates"
        for v in eqn.invars:
            r = self._reason(v)
            if r:
                return r
        if dev is not None and names_axis(eqn.params, dev.coords):
            return f"the collective '{name}'{at}: a device's input to it has no value, or jax could not run it"
        return f"'{name}'{at}, which semcheck could not evaluate"

    def _enter(self, eqn: Any, invals: list[Any], dev: Device | None, index: int,
               out_needed: tuple[bool, ...] | None = None) -> tuple[list[Any] | None, int]:
        (sub,) = sub_jaxprs(eqn)
        if eqn.primitive.name != "shard_map":
            inner = getattr(sub, "jaxpr", sub)
            consts = [_concrete(c) for c in getattr(sub, "consts", ())]
            self._pass_reasons(eqn.invars, inner.invars)
            outs, index = self.run(inner, [*consts, *invals], dev, index, out_needed)
            self._pass_reasons(inner.outvars, eqn.outvars)
            return outs, index
        start = index
        mesh = eqn.params["mesh"]
        manual = set(eqn.params.get("newly_manual_axes", ())) | set(getattr(mesh, "manual_axes", ()) or ())
        if dev is not None:  # a shard_map inside a shard_map: the kernel's lanes are not followed
            return None, start + self._kernels_in(eqn)
        names = [a for a in mesh.axis_names if a in manual]
        sizes = dict(mesh.shape)
        lanes = math.prod(sizes[a] for a in names)
        specs = eqn.params["in_specs"]
        end = start + self._kernels_in(eqn)
        devices = []
        for lane in range(lanes):
            coords = {}
            rest = lane
            for a in reversed(names):
                coords[a] = rest % sizes[a]
                rest //= sizes[a]
            devices.append(Device(lane, coords))
        shards = [[shard(x, spec, d, sizes, manual) for x, spec in zip(invals, specs)] for d in devices]
        self._pass_reasons(eqn.invars, sub.invars)
        # ACC-8: passes until no collective gains a value; one pass when the body needs none
        self._rounds = Rounds(mesh, names, lanes)
        before = dict(self._why)
        try:
            for _ in range(MAX_PASSES):
                self._why = dict(before)  # a pass's reasons are its own: a later pass may compute the value
                for d in devices:
                    self._rounds.start_device()
                    self.forget_reaches(range(start, end), d.lane)  # PRG-183: each pass's reaches are its own
                    _, end = self.run(sub, shards[d.lane], d, start)
                if not self._rounds.resolve():
                    break
        finally:
            self._rounds = None
        return None, end

    def _pass_reasons(self, outer: Sequence[Any], inner: Sequence[Any]) -> None:
        for a, b in zip(outer, inner):
            r = self._reason(a)
            if r and type(b) is not self._literal:
                self._why.setdefault(b, r)

    def _bind(self, eqn: Any, invals: list[Any], dev: Device | None) -> list[Any] | None:
        if any(isinstance(x, Partial) for x in invals):  # PRG-193: known where its inputs' elements are
            got = derive(eqn, invals, lambda xs: self._bind(eqn, xs, dev))
            return got if got is not None else self._bind(eqn, [None if isinstance(x, Partial) else x
                                                                for x in invals], dev)
        name = eqn.primitive.name
        if any(x is None for x in invals) or name in NOT_DETERMINISTIC:
            if dev is not None and self._rounds is not None and names_axis(eqn.params, dev.coords):
                self._rounds.reach(eqn, invals, dev.lane)  # keeps every device's count of collectives
            return None
        if dev is not None:
            if name == "axis_index":
                axis = eqn.params["axis_name"]
                if axis in dev.coords:
                    return [np.asarray(dev.coords[axis], dtype=np.int32)]
                return None
            if name == "pvary":
                return list(invals)
            if names_axis(eqn.params, dev.coords):
                # a collective: its value depends on the other devices (ACC-8)
                return None if self._rounds is None else self._rounds.reach(eqn, invals, dev.lane)
        quick = integer_numeric(eqn, invals)
        if quick is not None:
            return quick
        try:
            got = eqn.primitive.get_bind_params(eqn.params)
            # older jax returns (subfuns, params), newer the params alone
            subfuns, params = got if isinstance(got, tuple) else ((), got)
            out = eqn.primitive.bind(*subfuns, *invals, **params)
        except Exception:  # noqa: BLE001 - no value, never a guess
            return None
        outs = list(out) if eqn.primitive.multiple_results else [out]
        return [_concrete(o) for o in outs]

    # --- static facts -------------------------------------------------------------------

    def _kernels_of(self, jaxpr: Any) -> int:
        """How many kernel launches `find_kernels` counts in `jaxpr` (a cond's branch)."""
        return sum(1 for _ in walk_kernel_eqns(getattr(jaxpr, "jaxpr", jaxpr)))

    def _kernels_in(self, eqn: Any) -> int:
        """How many kernel launches `find_kernels` counts inside `eqn`'s sub-jaxprs."""
        key = id(eqn)
        hit = self._kernel_counts.get(key)
        if hit is None:
            hit = sum(sum(1 for _ in walk_kernel_eqns(getattr(s, "jaxpr", s))) for s in sub_jaxprs(eqn))
            self._kernel_counts[key] = hit
        return hit

    def _need(self, jaxpr: Any, out_needed: tuple[bool, ...]) -> tuple[set[Any], tuple[bool, ...]]:
        """The variables of `jaxpr` the kernels' scalar operands (and the needed outputs) depend on."""
        key = (id(jaxpr), out_needed)
        hit = self._needed.get(key)
        if hit is not None:
            return hit
        lit = self._literal
        need: set[Any] = {v for v, n in zip(jaxpr.outvars, out_needed) if n and type(v) is not lit}
        for eqn in reversed(jaxpr.eqns):
            name = eqn.primitive.name
            if name == "pallas_call":
                if self.run_kernels and any(v in need for v in eqn.outvars):  # PRG-169: it is run on them
                    need.update(v for v in eqn.invars if type(v) is not lit)
                nb = eqn.params["grid_mapping"].num_dynamic_grid_bounds
                ops = pallas_operands(eqn)
                for i, v in enumerate(discharged_order(eqn, eqn.invars)):
                    if type(v) is lit:
                        continue
                    if i < nb or (i - nb < len(ops) and self._tracks(ops[i - nb])):
                        need.add(v)
            elif name == "mpmd_map":  # a core_map: its operands are its kernel's inputs in order (ACC-47)
                need.update(v for v, op in zip(eqn.invars, core_map_operands(eqn))
                            if type(v) is not lit and is_scalar_operand(op))
            elif self._kernels_in(eqn) and name in _ENTERED and len(list(sub_jaxprs(eqn))) == 1:
                (sub,) = sub_jaxprs(eqn)
                inner = getattr(sub, "jaxpr", sub)
                _, sub_in = self._need(inner, tuple(v in need for v in eqn.outvars))
                for v, n in zip(eqn.invars, sub_in[len(inner.constvars):]):
                    if n and type(v) is not lit:
                        need.add(v)
            elif self._kernels_in(eqn) and self.evaluates(eqn):
                need.update(v for v in self.loop_needs(eqn, need) if type(v) is not lit)
            elif self._kernels_in(eqn) and name == "cond":
                need.update(v for v in self._cond_needs(eqn, need) if type(v) is not lit)
            elif any(v in need for v in eqn.outvars):
                need.update(v for v in eqn.invars if type(v) is not lit)
        binders = [*jaxpr.constvars, *jaxpr.invars]
        hit = (need, tuple(v in need for v in binders))
        self._needed[key] = hit
        return hit


__all__ = ["KernelInputs", "inputs_by_launch", "is_scalar_operand", "kernel_inputs", "trace_with_inputs"]
