"""PRG-189: PRG-169's runs of an earlier kernel stop at the first that disagrees with the kept one: a kernel whose
output shows its uninitialised memory is not run again under on_wait; one whose runs agree is run all three times."""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from semcheck.checker.frontend.kernel_outputs import run_kernel  # noqa: E402
from semcheck.model.ops import Loc  # noqa: E402

CALL = types.SimpleNamespace(index=0, name="plan", loc=Loc("plan.py", 7))


def _launch(kernel, *args, scratch=()):
    """The `pallas_call` equation of `kernel` on `args`, one (8, 128) float32 output."""
    def f(*xs):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              scratch_shapes=list(scratch), interpret=True)(*xs)

    return next(e for e in jax.make_jaxpr(f)(*args).eqns if e.primitive.name == "pallas_call")


def _runs(eqn, args) -> tuple[list | None, str, int]:
    """`run_kernel`'s answer and how many interpreted runs jax compiled for it (one module a run)."""
    seen: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Seen()
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles(True):
            out, why = run_kernel(eqn, list(args), CALL)
    finally:
        logging.getLogger("jax").removeHandler(handler)
    return out, why, sum(m.startswith("Finished XLA compilation of jit(<lambda>)") for m in seen)


def _copy_scratch(o_ref, s_ref):
    o_ref[...] = s_ref[...]


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


@pytest.mark.jax
@pytest.mark.rule("PRG-189", "PRG-169")
def test_a_run_that_shows_uninitialised_memory_ends_the_runs():
    eqn = _launch(_copy_scratch, scratch=[pltpu.VMEM((8, 128), jnp.float32)])
    out, why, compiled = _runs(eqn, [])
    assert out is None and "never writes" in why and "plan at plan.py:7" in why, why
    assert compiled == 2  # eager with NaN, eager with zeros; no on_wait run


@pytest.mark.jax
@pytest.mark.rule("PRG-189", "PRG-169")
def test_runs_that_agree_are_all_made():
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    out, why, compiled = _runs(_launch(_add_one, x), [x])
    assert why == "" and np.array_equal(out[0], x + 1.0)
    assert compiled == 3


def _write_first_rows(o_ref, s_ref):
    """Rows 0..3 of the output are written; rows 4..7 are a copy of a scratch nothing writes."""
    o_ref[...] = s_ref[...]
    o_ref[0:4, :] = jnp.full((4, 128), 7.0, jnp.float32)


@pytest.mark.jax
@pytest.mark.rule("PRG-192", "PRG-189")
def test_the_elements_the_runs_agree_on_are_kept_and_the_others_unknown():
    """The runs agree on the written rows only: those are kept, the others unknown, and the reason names the first
    element that is not (row 4); a run that disagrees on some elements does not end the runs (all three made)."""
    from semcheck.checker.frontend.partial_values import Partial

    eqn = _launch(_write_first_rows, scratch=[pltpu.VMEM((8, 128), jnp.float32)])
    out, why, compiled = _runs(eqn, [])
    (got,) = out
    assert isinstance(got, Partial) and not isinstance(got, np.ndarray)
    assert got.unknown[4:].all() and not got.unknown[:4].any()
    assert np.array_equal(got.values[:4], np.full((4, 128), 7.0, np.float32))
    assert "element [4, 0] (and 511 more) of output 0" in why and "never writes" in why, why
    assert got.why == why and "plan at plan.py:7" in why
    assert compiled == 3
