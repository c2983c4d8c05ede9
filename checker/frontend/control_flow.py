"""Control flow, unrolled: `cond`/`switch`, `while_loop`, `scan`/`fori_loop`, calls.

A predicate that differs between devices runs each branch (or each further
loop iteration) under a lane mask, like SIMT hardware, and merges the results
per lane (`Evaluator.merge`). Predicates must be known: an opaque one raises
`Unsupported` rather than guess which ops run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax._src import core as jax_core
from jax._src.pallas import primitives as pallas_prims
from jax._src.pallas.mosaic import pipeline as mosaic_pipeline

from semcheck.checker.frontend.errors import FrontendError, Unsupported
from semcheck.checker.frontend.evaluator import Evaluator
from semcheck.checker.frontend.trace import KernelCall
from semcheck.checker.frontend.values import MAX_EVAL_ELEMENTS, Unknown

# A `while` loop that runs longer than this is reported, not unrolled forever.
MAX_WHILE_ITERATIONS = 1_000_000

# The primitives that allocate (`run_scoped`, and `emit_pipeline`, whose expansion does): each evaluation
# takes the next allocation label, for every lane at once.
SCOPED = frozenset({pallas_prims.run_scoped_p, mosaic_pipeline.emit_pipeline_p})


class ControlFlowRules(Evaluator):
    """Rules by primitive name: the control-flow primitives' objects moved between jax releases."""

    def __init__(self, call: KernelCall, num_devices: int, cores: int) -> None:
        super().__init__(call, num_devices, cores)
        self.iterations_as_lanes = 0
        self.named_rules.update({
            "cond": self._cond,
            "while": self._while,
            "scan": self._scan,
            "jit": self._call,
            "pjit": self._call,
            "closed_call": self._call,
            "core_call": self._call,
            "eval_jaxpr": self._call,
            "custom_jvp_call": self._call,
            "custom_vjp_call": self._call,
            "custom_vjp_call_jaxpr": self._call,
            "checkpoint": self._call,
            "remat2": self._call,
        })
        # ACC-35: a call's body is evaluated inline, so float values known within bounds pass through it
        self.passes_bounds = frozenset({"jit", "pjit", "closed_call", "core_call", "custom_jvp_call",
                                        "custom_vjp_call", "custom_vjp_call_jaxpr", "checkpoint", "remat2"})

    def _cond(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        branches = eqn.params["branches"]
        index = self.known(invals[0], eqn, "the branch condition")
        idx = np.clip(index.reshape(index.shape[0]).astype(np.int64), 0, len(branches) - 1)
        if self.subset and idx.shape[0] > 1:
            # a branch only other devices take would change these devices' values (`merge`) and, with a
            # run_scoped, the allocation labels after it (their counter runs over every lane)
            if eqn.outvars:
                self.refuse_split(eqn, "the branch condition decides values used after the branch")
            if any(self.contains(b, SCOPED) for b in branches):
                self.refuse_split(eqn, "the branch condition decides a run_scoped allocation")
            # a branch other devices take (these may take none) may write a tracked ref there, and what
            # the branches store here, other devices may not (`scalar_memory`)
            self.memory.diverged.update(self.memory.refs)
            self.memory.divergent += 1
            try:
                return self._branches(eqn, branches, idx, invals[1:], mask)
            finally:
                self.memory.divergent -= 1
        return self._branches(eqn, branches, idx, invals[1:], mask)

    def _branches(self, eqn: Any, branches: Any, idx: np.ndarray, ops: list[Any], mask: Any) -> list[Any]:
        n = len(branches)
        if idx.shape[0] == 1:
            return self.eval_sub(eqn, branches[int(idx[0])], ops, mask)
        if bool((idx == idx[0]).all()):
            return self.eval_sub(eqn, branches[int(idx[0])], ops, mask)
        base = np.ones(self.L, dtype=bool) if mask is None else mask
        outs: list[Any] | None = None
        for b in range(n):
            m = base & (idx == b)
            if not m.any():
                continue
            res = self.eval_sub(eqn, branches[b], ops, m)
            if outs is None:
                outs = list(res)
            else:
                outs = [self.merge(m, r, o) for r, o in zip(res, outs)]
        if outs is None:  # no lane active: the outputs are never observed
            outs = [Unknown("an inactive branch") for _ in eqn.outvars]
        return outs

    def _while(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        p = eqn.params
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, vals = invals[:cn], invals[cn : cn + bn], list(invals[cn + bn :])
        cond_jaxpr, body_jaxpr = p["cond_jaxpr"], p["body_jaxpr"]
        base = mask
        iterations = 0
        while True:
            (c,) = self.eval_sub(eqn, cond_jaxpr, [*cconsts, *vals], base)
            c = self.known(c, eqn, "the loop condition").reshape(-1)
            if c.shape[0] == 1 and (base is None or bool(base.all())):
                if not bool(c[0]):
                    break
                vals = self.eval_sub(eqn, body_jaxpr, [*bconsts, *vals], base)
            else:
                if self.subset and c.shape[0] > 1:  # other devices may run more iterations, changing the carried values (`merge`)
                    self.refuse_split(eqn, "the loop condition")
                running = np.broadcast_to(c.astype(bool), (self.L,))
                if base is not None:
                    running = running & base
                if not running.any():
                    break
                new = self.eval_sub(eqn, body_jaxpr, [*bconsts, *vals], running)
                vals = [self.merge(running, n_, o_) for n_, o_ in zip(new, vals)]
                base = running
            iterations += 1
            if iterations > MAX_WHILE_ITERATIONS:
                raise Unsupported("while", f"the loop ran more than {MAX_WHILE_ITERATIONS} iterations",
                                  self.loc(eqn))
        return vals

    def _scan(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        p = eqn.params
        consts, carry, xs = (list(g) for g in p["ft_in"].update(invals).unpack())
        length = int(p["length"])
        reverse = bool(p["reverse"])
        body = p["jaxpr"]
        if length > 1 and not xs and len(eqn.outvars) == len(carry) and self.L * length <= ITERATION_LANES:
            counted = self._scan_as_lanes(eqn, body, consts, carry, length, mask)
            if counted is not None:
                return counted
        ys_steps: list[list[Any]] = []
        for step in range(length):
            i = length - 1 - step if reverse else step
            x_i = [x[:, i] if type(x) is np.ndarray else x for x in xs]
            ret = self.eval_sub(eqn, body, [*consts, *carry, *x_i], mask)
            carry_out, ys = (list(g) for g in p["ft_out"].update(ret).unpack())
            carry = carry_out
            ys_steps.append(ys)
        if ys_steps and ys_steps[0]:
            if reverse:
                ys_steps.reverse()
            ys_out = []
            for k in range(len(ys_steps[0])):
                col = [s[k] for s in ys_steps]
                if all(type(c) is np.ndarray for c in col) and length * col[0][0].size <= MAX_EVAL_ELEMENTS:
                    lanes = max(c.shape[0] for c in col)
                    ys_out.append(np.stack([np.broadcast_to(c, (lanes,) + c.shape[1:]) for c in col], axis=1))
                else:
                    ys_out.append(Unknown("stacked scan outputs"))
        else:
            n_ys = len(eqn.outvars) - len(carry)
            ys_out = [Unknown("stacked scan outputs") for _ in range(n_ys)]
        return [*carry, *ys_out]

    def _scan_as_lanes(self, eqn: Any, body: Any, consts: list[Any], carry: list[Any], length: int,
                       mask: Any) -> list[Any] | None:
        """A `fori_loop`-like scan (no xs, no ys; every carry unchanged or a counter plus a constant) with its
        iterations as lanes of one evaluation (lane k * L + l: iteration k of lane l), or None to unroll it.

        Exact when the iterations share nothing else: no tracked scalar memory, no run_scoped labels
        (`SCOPED`), no merge that loses what one lane alone knows (`Evaluator.lossy`), no error (an
        error is met again unrolled, in the interpreter's order).
        """
        if self.memory or self.contains(body, SCOPED):
            return None
        steps = _counter_steps(body.jaxpr, len(consts), len(carry))
        if steps is None:
            return None
        L = self.L
        start = []
        for c, step in zip(carry, steps):
            if step:
                if type(c) is not np.ndarray or c.ndim != 1 or c.dtype.kind not in "iu" or c.shape[0] not in (1, L):
                    return None
                start.append(np.broadcast_to(c, (L,)).astype(np.int64))
            else:
                start.append(None)
        k = np.repeat(np.arange(length, dtype=np.int64), L)
        bodies, lossy = self.bodies, self.lossy
        restore = self.repeat_lanes(length)
        try:
            self.bodies = [[] for _ in range(L * length)]
            self.lossy = False
            tiled = [_tile(v, L, length) for v in consts]
            counters = [_tile(c, L, length) if s0 is None else (np.tile(s0, length) + k * step).astype(c.dtype)
                        for c, s0, step in zip(carry, start, steps)]
            self.eval_sub(eqn, body, [*tiled, *counters], None if mask is None else np.tile(mask, length))
            if self.lossy:
                return None
            per_iteration = self.bodies
        except FrontendError:
            return None
        finally:  # a lossy evaluation is dropped: the loop is unrolled, which finds its own merges
            restore()
            self.bodies, self.lossy = bodies, lossy
        for i in range(length):
            any(map(list.extend, bodies, per_iteration[i * L : (i + 1) * L]))
        self.iterations_as_lanes += length
        return [c if s0 is None else (s0 + length * step).astype(c.dtype)[: c.shape[0]]
                for c, s0, step in zip(carry, start, steps)]

    def _call(self, eqn: Any, invals: list[Any], mask: Any) -> list[Any]:
        p = eqn.params
        sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
        if sub is None:
            return self._numeric(eqn, invals)
        if eqn.primitive.name not in ("jit", "pjit") and self._has_sem_ops(sub):
            raise Unsupported(eqn.primitive.name, "semaphore or DMA operations inside a "
                              f"{eqn.primitive.name} (the interpreter does not run them there)", self.loc(eqn))
        return self.eval_sub(eqn, sub, invals, mask)


# At most this many lanes (lanes x iterations) for a scan's iterations as lanes (`_scan_as_lanes`).
ITERATION_LANES = 1 << 15


def _tile(v: Any, lanes: int, n: int) -> Any:
    """A value of `lanes` lanes repeated for `n` iterations (a one-lane value is every lane's already)."""
    if type(v) is np.ndarray and v.shape[0] == lanes and lanes > 1:
        return np.tile(v, (n,) + (1,) * (v.ndim - 1))
    return v


def _counter_steps(jaxpr: Any, nconsts: int, ncarry: int) -> list[int] | None:
    """Per carry of a scan body: 0 when the body returns it unchanged, `s` when it returns it plus the
    integer literal `s`; None when some carry is anything else."""
    carries = jaxpr.invars[nconsts : nconsts + ncarry]
    made = {id(v): e for e in jaxpr.eqns for v in e.outvars}
    steps = []
    for c, out in zip(carries, jaxpr.outvars[:ncarry]):
        if out is c:
            steps.append(0)
            continue
        e = made.get(id(out))
        if e is None or e.primitive.name != "add" or len(e.invars) != 2:
            return None
        a, b = e.invars
        lit = b if a is c else a if b is c else None
        val = lit.val if type(lit) is jax_core.Literal else None
        if val is None or np.ndim(val) != 0 or np.asarray(val).dtype.kind not in "iu":
            return None
        steps.append(int(val))
    return steps
