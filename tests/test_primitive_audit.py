"""The audit of LAUNCH-3: every primitive semcheck's front end has a rule for, run once in interpret mode.

`PINNED` says what jax's interpret mode does with each primitive the front end's rule tables name
(runs, or raises what), learned by running it (`tests/kernels/primitive_audit.py`: a minimal kernel
per group, each primitive's value used). The tests check that

* the pins cover the rule tables exactly, so a primitive given a rule without a pinned outcome fails;
* each audit kernel really uses the primitives it stands for;
* semcheck predicts each kernel's outcome (a launch failure, LAUNCH-3 / ERR-10, or none);
* interpret mode does what is pinned (one subprocess for the kernels with something to say; the
  whole audit is marked slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))

import primitive_audit as audit  # noqa: E402

pytestmark = pytest.mark.rule("LAUNCH-3", "ERR-10")

RUNS = "runs"
ABSENT = "not a primitive of this jax"  # a rule by name kept for other jax releases
READ = "NotImplementedError: MLIR translation rule for primitive 'semaphore_read' not found for platform cpu"
ADDUPDATE = "ValueError: `addupdate` must be called on `Ref` types: int16[]."

PINNED: dict[str, str] = {
    **{name: RUNS for name in audit.USES["numeric"]},
    **{name: RUNS for name in audit.USES["access"]},
    **{name: RUNS for name in audit.USES["control"]},
    **{name: RUNS for name in audit.USES["mesh"]},
    **{name: RUNS for name in audit.USES["sync"]},
    **{name: RUNS for name in audit.USES["pipeline"]},
    "addupdate": ADDUPDATE,
    "semaphore_read": READ,
    **{name: ABSENT for name in ("pjit", "closed_call", "core_call", "custom_vjp_call_jaxpr", "checkpoint",
                                 "copy_p")},
}
# Primitives with no rule that kernels use for vector compute: the fallback's opaque values, whose
# interpretation the same LAUNCH-3 check predicts (a sample: every other primitive is opaque too).
OPAQUE: dict[str, str] = {name: RUNS for name in audit.USES["opaque"]}

# Run by default: the kernels whose primitives the interpreter cannot translate, and one that runs.
DEFAULT_RUN = ("addupdate", "semaphore_read", "sync")


def _lowerer() -> Any:
    """A lowerer of a trivial kernel: it holds every rule table of the front end."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.lowerer import Lowerer
    from semcheck.checker.frontend.trace import trace_kernels

    def kernel(o_ref):
        o_ref[0] = 1

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
                       out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=pltpu.InterpretParams())
    (call,) = trace_kernels(f, ())
    return Lowerer(call, 1, 1)


def _accepted() -> set[str]:
    """The primitives the front end has a rule for: its rule tables, by name."""
    from semcheck.checker.frontend.numeric import NUMERIC

    lw = _lowerer()
    return {p.name for p in lw.rules} | set(lw.named_rules) | set(NUMERIC)


def test_the_table_of_sync_primitives_is_the_lowerings_the_audits_and_the_interpreters():
    """The front end's one table of sync primitives (`checker/frontend/sync_primitives.py`): the
    lowering has a rule for each and takes exactly these as synchronising, the audit's kernels stand
    for exactly these, and the prediction of LAUNCH-3 lets the interpreter translate exactly those it
    has a case for (`semaphore_read` it has not: pinned above)."""
    from semcheck.checker.frontend.interpreter_lowering import _interpreted
    from semcheck.checker.frontend.sync_primitives import (INTERPRETED, NO_INTERPRETER_CASE, SYNC, SYNC_OR_SCOPE,
                                                           primitives)

    lw = _lowerer()
    assert primitives(SYNC_OR_SCOPE) <= set(lw.rules), "a sync primitive of the table without a lowering rule"
    named = {p.name for p in lw.rules} | set(lw.named_rules)
    sync_like = {n for n in named if n.startswith(("semaphore_", "dma_")) or n.endswith("_semaphore")}
    assert sync_like | {"run_scoped"} == SYNC_OR_SCOPE, "a lowering rule for a sync primitive not in the table"
    assert {p.name for p in lw.sem_prims} - {"emit_pipeline"} == SYNC_OR_SCOPE
    assert set(audit.USES["sync"]) | set(audit.USES["semaphore_read"]) == SYNC_OR_SCOPE
    assert {n for n in NO_INTERPRETER_CASE if PINNED[n] != RUNS} == NO_INTERPRETER_CASE
    own, _ = _interpreted()
    assert {p.name for p in own} & SYNC == INTERPRETED


def _kernel_outcome(kernel: str) -> str:
    """The pinned outcome of an audit kernel: that of its primitive the interpreter cannot take, else runs."""
    outcomes = {{**PINNED, **OPAQUE}[name] for name in audit.USES[kernel]} - {RUNS}
    assert len(outcomes) <= 1, f"{kernel} mixes failures: split it"
    return outcomes.pop() if outcomes else RUNS


def _calls(kernel: str) -> list[tuple[Any, Any]]:
    """The kernel's traced calls, each with the example arguments' values it sees (ACC-4, ACC-5)."""
    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
    from semcheck.checker.frontend.dynamic_grid import resolve_grid

    fn, args = audit.KERNELS[kernel]()
    calls, inputs = trace_with_inputs(fn, args)
    return [(resolve_grid(c, v), v) for c, v in zip(calls, inputs)]


def _names(call: Any, jaxpr: Any, out: set[str]) -> set[str]:
    """The names of the primitives in `jaxpr` and its sub-jaxprs, and in the expansion of each
    `emit_pipeline` (where `pipeline_body` appears), as the interpreter and the front end expand it."""
    from jax._src import core
    from jax._src.pallas.mosaic import pipeline as mosaic_pipeline

    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in inner.eqns:
        out.add(eqn.primitive.name)
        subs = [v for value in eqn.params.values() for v in (value if isinstance(value, (tuple, list)) else (value,))
                if isinstance(v, core.Jaxpr) or isinstance(getattr(v, "jaxpr", None), core.Jaxpr)]
        if eqn.primitive is mosaic_pipeline.emit_pipeline_p:
            subs.append(mosaic_pipeline.emit_pipeline_to_jaxpr(
                [v.aval for v in eqn.invars], grid_names=getattr(call.grid_mapping, "grid_names", None),
                grid_sizes=tuple(call.grid), **eqn.params))
        for sub in subs:
            _names(call, sub, out)
    return out


def test_every_primitive_the_front_end_accepts_has_a_pinned_outcome():
    accepted = _accepted()
    assert not accepted - set(PINNED), f"give these primitives an audit kernel and a pin: {accepted - set(PINNED)}"
    assert not set(PINNED) - accepted, f"pinned but without a rule: {set(PINNED) - accepted}"
    audited = {name for kernel, uses in audit.USES.items() if kernel != "opaque" for name in uses}
    assert audited == {name for name, outcome in PINNED.items() if outcome != ABSENT}
    assert not set(OPAQUE) & accepted


def test_the_primitives_pinned_absent_are_no_primitives_of_this_jax():
    import jax  # noqa: F401 (loads jax's modules)
    from jax._src import core

    names = set()
    for name, module in list(sys.modules.items()):
        if name.startswith("jax") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, core.Primitive):
                    names.add(value.name)
    assert "semaphore_read" in names and "eval_jaxpr" in names  # the scan sees jax's primitives
    assert not {name for name, outcome in PINNED.items() if outcome == ABSENT} & names


@pytest.mark.parametrize("kernel", sorted(audit.KERNELS))
def test_each_audit_kernel_uses_the_primitives_it_stands_for(kernel):
    calls = _calls(kernel)
    seen: set[str] = set()
    with audit.context(kernel):
        for call, _ in calls:
            _names(call, call.jaxpr, seen)
    assert set(audit.USES[kernel]) <= seen, set(audit.USES[kernel]) - seen


@pytest.mark.parametrize("kernel", sorted(audit.KERNELS))
def test_semcheck_predicts_what_interpret_mode_does_with_each_audit_kernel(kernel):
    from semcheck.checker.frontend.lower import lower_kernel

    ((call, values),) = _calls(kernel)
    with audit.context(kernel):
        failure = lower_kernel(call, inputs=values).launch_failure
    predicted = RUNS if failure is None else f"{failure.python_type}: {failure.message}"
    assert predicted == _kernel_outcome(kernel)


def _run(kernels: tuple[str, ...]) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(Path(audit.__file__)), *kernels], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["kernel"]: RUNS if r["outcome"] == "runs" else r["error"] for r in rows}


def test_interpret_mode_does_what_is_pinned_with_the_kernels_it_refuses():
    got = _run(DEFAULT_RUN)
    assert got == {k: _kernel_outcome(k) for k in DEFAULT_RUN}


@pytest.mark.slow
def test_interpret_mode_does_what_is_pinned_with_every_audit_kernel():
    got = _run(tuple(audit.KERNELS))
    assert got == {k: _kernel_outcome(k) for k in audit.KERNELS}
