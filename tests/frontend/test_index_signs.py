"""PRG-202: the interval analysis that tells whether a kernel's indices are at least 0 is sound on drawn index
expressions: where it finds no index that may be negative, none is, on any input."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from semcheck.checker.frontend.index_signs import negative_index  # noqa: E402

SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
INPUTS = (-2**31, -7, -1, 0, 1, 3, 2**31 - 1)  # the values the two loaded operands take in the check

_LEAF = st.sampled_from(["a", "b", "pid"]) | st.integers(-3, 9).map(str)
_OPS = ["add", "sub", "mul", "max", "min", "mod", "floordiv", "clip", "where"]


def _expr(depth: int):
    if depth == 0:
        return _LEAF
    return st.one_of(_LEAF, st.tuples(st.sampled_from(_OPS), _expr(depth - 1), _expr(depth - 1)))


def _eval(e, env):
    """`e` on int32 scalars (`env`: a, b and pid), as jnp computes it in a kernel."""
    if isinstance(e, str):
        return env[e] if e in env else jnp.int32(int(e))
    op, x, y = e
    x, y = _eval(x, env), _eval(y, env)
    if op in ("mod", "floordiv"):
        y = jnp.maximum(y, 1)  # a divisor >= 1 (a zero divisor is not the question here)
    return {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "max": lambda: jnp.maximum(x, y),
            "min": lambda: jnp.minimum(x, y), "mod": lambda: x % y, "floordiv": lambda: x // y,
            "clip": lambda: jnp.clip(x, 0, jnp.maximum(y, 0)), "where": lambda: jnp.where(x > y, x, y)}[op]()


def _index_eqn(e):
    def kernel(c_ref, o_ref):
        o_ref[0] = c_ref[_eval(e, {"a": c_ref[0], "b": c_ref[1], "pid": pl.program_id(0)})]

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2,), jnp.int32), in_specs=[SMEM],
                              out_specs=SMEM, grid=(3,), interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones((2,), jnp.int32)).eqns if q.primitive.name == "pallas_call")


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
@settings(max_examples=40, deadline=None)
@given(_expr(3))
@example(("max", "a", "0"))
@example(("add", ("max", "a", "0"), ("max", "b", "0")))  # >= 0 as integers, but int32's sum may wrap
@example(("mod", ("max", "a", "0"), "b"))
@example(("sub", "7", "pid"))
@example(("sub", "1", "pid"))  # -1 at the last grid step
@example(("add", "-2", "pid"))
@example(("floordiv", ("clip", "a", "b"), "3"))
def test_an_index_the_analysis_clears_is_at_least_0_on_every_input(e):
    """Where `negative_index` finds nothing, the drawn expression of the two loaded values (any int32) and the
    grid step (of 3) is >= 0 on every input of a grid of extreme and small values."""
    eqn = _index_eqn(e)
    if negative_index(eqn.params["jaxpr"], (3,)) is not None:
        return
    with jax.ensure_compile_time_eval():
        for a in INPUTS:
            for b in INPUTS:
                for pid in range(3):
                    got = int(_eval(e, {"a": jnp.int32(a), "b": jnp.int32(b), "pid": jnp.int32(pid)}))
                    assert got >= 0, (e, a, b, pid, got)


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
def test_a_sum_that_may_wrap_is_not_cleared():
    """`max(a, 0) + max(b, 0)` is >= 0 over the integers, but int32's sum of two large values wraps negative."""
    eqn = _index_eqn(("add", ("max", "a", "0"), ("max", "b", "0")))
    assert negative_index(eqn.params["jaxpr"], (3,)) is not None
    assert int(jnp.int32(2**31 - 1) + jnp.int32(2**31 - 1)) < 0


def _kernel_eqn(kernel):
    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2,), jnp.int32), in_specs=[SMEM],
                              out_specs=SMEM, grid=(3,), interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones((8,), jnp.int32)).eqns if q.primitive.name == "pallas_call")


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
def test_a_while_loops_condition_is_walked():
    """A `while` loop's condition that loads `c[i - 1]` with the counter starting at 0 indexes at -1 on its first
    test: the load in the condition is named, as it would be in the body."""
    def kernel(c_ref, o_ref):
        o_ref[0] = jax.lax.while_loop(lambda i: c_ref[i - 1] > 100, lambda i: i + 1, 0)

    found = negative_index(_kernel_eqn(kernel).params["jaxpr"], (3,))
    assert found is not None and found.primitive.name == "get"


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
def test_an_unsigned_index_above_int_max_is_named():
    """`uint32(pid - 1)` is 2**32 - 1 at the first grid step: >= 0 as an unsigned value, but Mosaic casts the
    index's i32 to an index by sign extension, so the TPU indexes at -1 (and jax's interpreter raises an
    out-of-bounds read): the index is named."""
    def kernel(c_ref, o_ref):
        o_ref[0] = c_ref[(pl.program_id(0) - 1).astype(jnp.uint32)]

    assert negative_index(_kernel_eqn(kernel).params["jaxpr"], (3,)) is not None


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
def test_a_counted_loops_condition_keeps_its_counter():
    """The condition of a `fori_loop` whose body loads `c[i]` is walked with the counter from its start up: the
    loop stays cleared."""
    def kernel(c_ref, o_ref):
        o_ref[0] = jax.lax.fori_loop(0, 8, lambda i, acc: acc + c_ref[i], 0)

    assert negative_index(_kernel_eqn(kernel).params["jaxpr"], (3,)) is None
