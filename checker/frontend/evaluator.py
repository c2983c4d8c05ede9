"""The SPMD evaluator core: runs a kernel jaxpr for all devices at once.

Every integer value is a lane array (see `values`): leading axis 1 when the
value is the same on every device, D when it differs. A lane mask restricts
the devices that execute a stretch of code (a branch taken by some devices
only); ops are appended to the program of each active device. A lane is a
device (`set_lanes`: some devices only, with `subset`), or a device at one of
several grid steps or loop iterations evaluated at once (`repeat_lanes`).

`Evaluator` holds what every rule needs (lanes, masks, locations, caches, the
rule tables) and dispatches each equation to a rule; the rule modules
(`grid`, `sync_rules`, `accesses`, `control_flow`, `pipeline`, `numeric`) are
mixins over it that register their rules in `__init__`, and `lowerer` stacks
them into the one class that lowers a kernel.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from jax._src import core as jax_core

from semcheck.checker.frontend.errors import FrontendError, Unsupported
from semcheck.checker.frontend.scalar_memory import (CONCRETE_HINT, AbstractInput, CopiedFloat, DivergedValue,
                                                     NeedsConcreteInputs, NeedsFloatCopies, NeedsFloatInputs,
                                                     ScalarMemory, UncomputedFloatInput)
from semcheck.checker.frontend.trace import KernelCall, jaxpr_classes, eqn_loc
from semcheck.checker.frontend.values import MAX_EVAL_ELEMENTS, BufRef, Unknown, opaque
from semcheck.model.ops import NO_LOC, Loc, Op, SemRef

# A rule: (equation, input values, lane mask or None for all lanes) -> output values.
Rule = Callable[[Any, list[Any], Any], list[Any]]


class SubsetRefused(Unsupported):
    """The devices `lower_kernel(devices=...)` was asked for cannot be lowered without the others: what
    they do would depend on how the other devices' lanes evaluate (a branch taken by other devices only,
    a loop they run longer). Lowering every device decides it."""

    code = "unsupported"


class Evaluator:
    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        self.call = call
        self.num_devices = num_devices
        self.cores = cores
        self.axis_names = call.mesh.axis_names
        self.axis_sizes = call.mesh.axis_sizes
        # The device each lane evaluates (`set_lanes`): every device, lane d being device d, unless
        # `lower_kernel` lowers only some (`subset`) or runs several grid steps as lanes at once.
        self.lane_devices = np.arange(num_devices, dtype=np.int64)
        self.subset = False
        # Set by `merge` when lanes evaluated together lose what one lane alone would know (a
        # branch's or iteration's result unknown on some lanes): the grid steps run as lanes fall back.
        self.lossy = False
        self.memory = ScalarMemory(num_devices)
        self.set_lanes(self.lane_devices)
        self.core_axis_names = (call.core_axis_name,) if call.core_axis_name else ()
        self.core = 0
        # Per device: the ops of the current core, in program order.
        self.bodies: list[list[Op]] = []
        # The grid coordinates `program_id` sees (a stack: emit_pipeline nests a grid).
        self.grid_env: list[tuple[tuple[Any, int], ...]] = []
        self.loc_override: Loc | None = None
        # Equations traced inside a nested trace (run_scoped, loops, ...) may carry
        # truncated tracebacks without a user frame: they get their parent's line.
        self.parent_loc: Loc = call.loc
        self.eqn_count = 0
        self.warnings: list[str] = []
        self._loc_cache: dict[int, Loc] = {}
        self._site_cache: dict[int, str] = {}
        self._site_lines: dict[tuple[str, int], int] = {}
        self._static_cache: dict[int, Any] = {}
        self._semref_cache: dict[tuple[str, int], SemRef] = {}
        self._has_sem_cache: dict[int, bool] = {}
        self._op_cache: dict[tuple[Any, ...], dict[Any, Op]] = {}
        self._drop_var = jax_core.DropVar
        self._literal = jax_core.Literal
        self._jaxpr_types = jaxpr_classes(jax_core)
        # Rules by primitive object, and by primitive name (for primitives
        # whose object differs between jax releases); the mixins fill them.
        self.rules: dict[Any, Rule] = {}
        self.named_rules: dict[str, Rule] = {}
        # Primitives that make a sub-jaxpr matter to the program (semaphore and DMA ops).
        self.sem_prims: set[Any] = set()
        # ACC-35: float values known within bounds (`values.Bounded`) exist once `bounds_made`; the numeric rules
        # read them, the calls in `passes_bounds` pass them to their body and back, every other rule sees them as
        # the plain `Unknown` they are (`opaque`): a lane-wise merge or a store never carries bounds. ACC-60's
        # values known on some lanes (`values.SomeLanes`) are kept the same way (a load that reads one sets it).
        self.bounds_made = False
        self.passes_bounds: frozenset[str] = frozenset()
        self._keep_bounds = False

    def set_lanes(self, devices: np.ndarray) -> None:
        """Evaluate lane i as device `devices[i]`: its mesh coordinates (row-major logical device ids) are
        what `axis_index` and mesh-style device ids see, so remote targets are real device ids."""
        self.lane_devices = devices
        self.L = int(devices.shape[0])
        self.all_lanes = list(range(self.L))
        self.axis_coords: dict[str, np.ndarray] = {}
        for i, name in enumerate(self.axis_names):
            inner = math.prod(self.axis_sizes[i + 1 :])
            self.axis_coords[name] = ((devices // inner) % self.axis_sizes[i]).astype(np.int32)
        self.memory.L = self.L

    def select_devices(self, devices: Sequence[int]) -> None:
        """Lower only `devices` (`lower.lower_kernel`'s `devices`), exactly or not at all (`SubsetRefused`).

        One device gets a second lane (a copy of it): a device-dependent value then has a lane axis
        of length 2, which is how the rules tell it from a device-independent one (`refuse_split`).
        """
        self.subset = True
        self.set_lanes(np.asarray(list(devices) * (2 if len(devices) == 1 else 1), dtype=np.int64))
        self.memory.subset = True

        def refuse(loc: Loc) -> None:
            raise SubsetRefused("load", "a load from a ref whose contents may differ between the devices "
                                "lowered and the others (written on some devices only): semcheck lowers "
                                "this kernel for every device at once, not for some of them", loc)

        self.memory.refuse = refuse

    def repeat_lanes(self, n: int) -> Callable[[], None]:
        """Lanes repeated `n` times (lane k * L + l is lane l again, for an iteration k evaluated as lanes):
        what every lane sees besides its operands (its device, the grid coordinates) repeats with them.
        Returns what restores the lanes."""
        devices, env = self.lane_devices, self.grid_env[:]
        L = self.L
        self.set_lanes(np.tile(devices, n))
        self.grid_env[:] = [tuple((np.tile(a, n) if type(a) is np.ndarray and a.shape[0] == L > 1 else a, size)
                                  for a, size in dims) for dims in env]

        def restore() -> None:
            self.set_lanes(devices)
            self.grid_env[:] = env

        return restore

    # --- the evaluator ------------------------------------------------------------

    def eval_jaxpr(self, jaxpr: Any, args: Sequence[Any], mask: np.ndarray | None) -> list[Any]:
        env: dict[Any, Any] = {}
        binders = list(jaxpr.constvars) + list(jaxpr.invars)
        if len(binders) != len(args):
            raise Unsupported("jaxpr", f"arity mismatch ({len(binders)} binders, {len(args)} values)",
                              self.loc_override or NO_LOC)
        for v, a in zip(binders, args):
            env[v] = a
        keep, self._keep_bounds = self._keep_bounds, False  # (this jaxpr's results go back through a call)
        literal = self._literal
        drop = self._drop_var
        rules = self.rules
        named = self.named_rules
        tracked = self.memory.refs  # a dict: truthy while any ref's contents are tracked
        for eqn in jaxpr.eqns:
            self.eqn_count += 1
            invals = [self._lit(v) if type(v) is literal else env[v] for v in eqn.invars]
            prim = eqn.primitive
            rule = rules.get(prim)
            if rule is None:
                rule = named.get(prim.name)
            try:
                if rule is not None:
                    if prim.name in self.passes_bounds:
                        self._keep_bounds = True
                    elif self.bounds_made:
                        invals = [opaque(x) for x in invals]
                    outs = rule(eqn, invals, mask)
                    self._keep_bounds = False
                else:
                    if tracked:
                        self._escape(eqn, invals, mask)
                    outs = self._numeric(eqn, invals)
            except FrontendError:
                self._keep_bounds = False
                raise
            except Exception as e:  # never an internal error over a kernel's construct
                self._keep_bounds = False
                raise self.cannot_lower(eqn, e) from e
            for v, o in zip(eqn.outvars, outs):
                if type(v) is not drop:
                    env[v] = o
        outs = [self._lit(v) if type(v) is literal else env[v] for v in jaxpr.outvars]
        return outs if keep or not self.bounds_made else [opaque(x) for x in outs]

    def cannot_lower(self, eqn: Any, e: BaseException) -> Unsupported:
        """`Unsupported` for an equation a rule failed on: the construct is unknown, with its line.

        A rule that meets something it was not written for (a ref transform of
        a newer jax, an operand of an unexpected type) must not end the run
        in an internal error: semcheck says it cannot lower the line.
        """
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        what = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
        return Unsupported(eqn.primitive.name, f"semcheck's front end cannot lower this equation ({what})",
                           self.loc(eqn))

    def _escape(self, eqn: Any, invals: list[Any], mask: np.ndarray | None) -> None:
        """A tracked ref handed to a primitive without a rule may be written there: its contents
        become unknown on the devices that run it (`scalar_memory`)."""
        why = None
        for x in invals:
            while hasattr(x, "transforms") and hasattr(x, "ref"):  # a TransformedRef
                x = x.ref
            if type(x) is BufRef and x.name in self.memory:
                why = why or Unknown(f"a ref passed to {eqn.primitive.name}, which semcheck does not follow",
                                     self.loc(eqn))
                self.memory.clobber(x.name, self.active(mask), why)

    def _numeric(self, eqn: Any, invals: list[Any]) -> list[Any]:
        """The rule of every primitive without one (`numeric.NumericRules`)."""
        raise NotImplementedError

    def eval_closed(self, closed: Any, args: Sequence[Any], mask: np.ndarray | None) -> list[Any]:
        """Evaluate a jaxpr whose attached constants (if any) are not among `args`."""
        consts = getattr(closed, "consts", None)
        inner = closed.jaxpr
        if consts and len(args) == len(inner.invars):
            return self.eval_jaxpr(inner, [*self._consts(closed), *args], mask)
        return self.eval_jaxpr(inner, args, mask)

    def eval_sub(self, eqn: Any, jaxpr: Any, args: Sequence[Any], mask: Any, closed: bool = True) -> list[Any]:
        """Evaluate a sub-jaxpr of `eqn`, whose line is the fallback location inside."""
        outer = self.parent_loc
        self.parent_loc = self.loc(eqn)
        try:
            if closed:
                return self.eval_closed(jaxpr, args, mask)
            return self.eval_jaxpr(jaxpr, args, mask)
        finally:
            self.parent_loc = outer

    # --- constants and literals ------------------------------------------------------

    def _consts(self, closed: Any) -> list[Any]:
        key = id(closed)
        hit = self._static_cache.get(("consts", key))  # type: ignore[arg-type]
        if hit is None:
            hit = [self._from_python(c, "a constant") for c in closed.consts]
            self._static_cache[("consts", key)] = hit  # type: ignore[index]
        return hit

    def _from_python(self, c: Any, what: str) -> Any:
        try:
            arr = np.asarray(c)
        except Exception:
            return Unknown(what)
        if arr.dtype == object or arr.size > MAX_EVAL_ELEMENTS:
            return Unknown(what)
        return arr[None]

    def _lit(self, v: Any) -> Any:
        key = id(v)
        hit = self._static_cache.get(key)
        if hit is None:
            val = v.val
            dtype = getattr(v.aval, "dtype", None)
            try:
                arr = np.asarray(val, dtype=dtype) if dtype is not None else np.asarray(val)
            except Exception:
                arr = None
            if arr is None or arr.dtype == object or arr.size > MAX_EVAL_ELEMENTS:
                hit = Unknown("a literal")
            else:
                hit = arr[None]
            self._static_cache[key] = (hit, v)  # keep `v` alive: ids must not be reused
            return hit
        return hit[0]

    # --- locations and sites --------------------------------------------------------

    def loc(self, eqn: Any) -> Loc:
        if self.loc_override is not None:
            return self.loc_override
        key = id(eqn)
        hit = self._loc_cache.get(key)
        if hit is None:
            hit = eqn_loc(eqn, self.parent_loc)
            self._loc_cache[key] = hit
        return hit

    def site(self, eqn: Any, loc: Loc) -> str:
        """A stable name for the allocation site `eqn` (`scoped@file:line[.n]`)."""
        key = id(eqn)
        hit = self._site_cache.get(key)
        if hit is None:
            base = f"{os.path.basename(loc.file)}:{loc.line}"
            n = self._site_lines.get((loc.file, loc.line), 0)
            self._site_lines[(loc.file, loc.line)] = n + 1
            hit = f"scoped@{base}" + (f".{n + 1}" if n else "")
            self._site_cache[key] = hit
        return hit

    # --- lanes and masks --------------------------------------------------------------

    def active(self, mask: np.ndarray | None) -> list[int]:
        if mask is None:
            return self.all_lanes
        return np.flatnonzero(mask).tolist()

    def known(self, value: Any, eqn: Any, what: str) -> np.ndarray:
        """`value` as a lane array; `Unsupported` if it is opaque."""
        if type(value) is np.ndarray:
            return value
        if isinstance(value, Unknown):
            src = f" (it comes from {value.why}" + (f" at {value.loc}" if value.loc.line else "") + ")"
            if isinstance(value, DivergedValue):
                raise SubsetRefused(eqn.primitive.name, f"{what} depends on {value.why}", self.loc(eqn))
            if isinstance(value, AbstractInput):
                raise NeedsConcreteInputs(eqn.primitive.name, f"{what} depends on a value semcheck cannot "
                                          f"compute{src}; {CONCRETE_HINT}", self.loc(eqn))
            if isinstance(value, UncomputedFloatInput):
                raise NeedsFloatInputs(eqn.primitive.name, f"{what} depends on a float input's contents, which "
                                       f"semcheck computes only where a lowering follows float copies (ACC-41){src}",
                                       self.loc(eqn))
            if isinstance(value, CopiedFloat):
                raise NeedsFloatCopies(eqn.primitive.name, f"{what} depends on a value semcheck cannot compute{src}",
                                       self.loc(eqn))
            raise Unsupported(eqn.primitive.name, f"{what} depends on a value semcheck cannot compute{src}",
                              self.loc(eqn))
        if isinstance(value, (int, np.integer, bool, np.bool_)):
            return np.array([value])
        raise Unsupported(eqn.primitive.name, f"{what} is a {type(value).__name__}, not a number",
                          self.loc(eqn))

    def lane_ints(self, arr: np.ndarray, eqn: Any, what: str) -> list[int]:
        """A per-lane scalar as a Python list of length L."""
        if arr.ndim > 1 and math.prod(arr.shape[1:]) != 1:
            raise Unsupported(eqn.primitive.name, f"{what} is an array of shape {arr.shape[1:]}, not a scalar",
                              self.loc(eqn))
        flat = arr.reshape(arr.shape[0])
        if flat.shape[0] == 1:
            return [int(flat[0])] * self.L
        return [int(x) for x in flat.tolist()]

    def merge(self, mask: np.ndarray, new: Any, old: Any) -> Any:
        """`new` on the lanes of `mask`, `old` elsewhere."""
        if old is None or new is old:
            return new
        if type(new) is not np.ndarray or type(old) is not np.ndarray:
            self.lossy = True
            if isinstance(new, Unknown):
                return new
            if isinstance(old, Unknown):
                return old
            return new  # refs: identical on every lane
        m = mask.reshape((self.L,) + (1,) * (max(new.ndim, old.ndim) - 1))
        out = np.where(m, new, old).astype(new.dtype, copy=False)
        if out.shape[0] > 1 and not self.subset and bool((out == out[:1]).all()):
            out = out[:1]  # (not for a subset of devices: the others may differ, `select_devices`)
        return out

    # --- building ops ----------------------------------------------------------------

    def op_cache(self, eqn: Any, *extra: Any) -> dict[Any, Op]:
        """Ops already built for `eqn` (identical ops are shared, across lanes and iterations)."""
        key = (id(eqn), self.loc_override, *extra)
        cache = self._op_cache.get(key)
        if cache is None:
            cache = self._op_cache[key] = {}
        return cache

    def semref(self, label: str, index: int) -> SemRef:
        key = (label, index)
        ref = self._semref_cache.get(key)
        if ref is None:
            ref = self._semref_cache[key] = SemRef(label, index)
        return ref

    # --- sub-jaxprs --------------------------------------------------------------------

    def refuse_split(self, eqn: Any, what: str) -> None:
        """`SubsetRefused` when only some devices are lowered and `eqn` decides by a device-dependent
        value (`lower.lower_kernel`'s `devices`; lanes of a per-device value have a lane axis of length
        L > 1 even for one device: `lower_kernel` gives a one-device subset two lanes)."""
        raise SubsetRefused(eqn.primitive.name, f"{what}, which may depend on the device: semcheck lowers "
                            "this kernel for every device at once, not for some of them", self.loc(eqn))

    def contains(self, jaxpr: Any, prims: frozenset[Any]) -> bool:
        """Whether `jaxpr` (open or closed, or any jaxpr nested in it) uses a primitive of `prims`."""
        key = ("contains", id(jaxpr), prims)
        hit = self._static_cache.get(key)  # type: ignore[arg-type]
        if hit is None:
            inner = getattr(jaxpr, "jaxpr", jaxpr)
            hit = any(e.primitive in prims or any(self.contains(sub, prims) for sub in
                                                   sub_jaxprs(e.params, self._jaxpr_types))
                      for e in inner.eqns)
            self._static_cache[key] = (hit, jaxpr)  # type: ignore[index]  # keep `jaxpr` alive: ids are keys
            return hit
        return hit[0]

    def _has_sem_ops(self, jaxpr: Any) -> bool:
        """Whether `jaxpr` (or any jaxpr nested in it) uses a primitive of `sem_prims`."""
        key = id(jaxpr)
        hit = self._has_sem_cache.get(key)
        if hit is None:
            inner = jaxpr.jaxpr
            hit = False
            for e in inner.eqns:
                if e.primitive in self.sem_prims:
                    hit = True
                    break
                for sub in sub_jaxprs(e.params, self._jaxpr_types):
                    if self._has_sem_ops(sub):
                        hit = True
                        break
                if hit:
                    break
            self._has_sem_cache[key] = hit
        return hit


def append_to_each(bodies: list[list[Op]], op: Op) -> None:
    """Append one operation to each of `bodies`, in C (a ring at 1,024 devices does so per device and step)."""
    any(map(list.append, bodies, itertools.repeat(op)))


def sub_jaxprs(params: dict[str, Any], jaxpr_types: tuple[type, ...]) -> Iterator[Any]:
    """The jaxprs among an equation's parameters (one level deep)."""
    for value in params.values():
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if isinstance(v, jaxpr_types):
                yield v
