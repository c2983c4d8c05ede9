"""The front end's numeric rules on what jax 0.12 traces for shipped kernels' index arithmetic.

* A binary op of an array and a rank-0 value (`jnp.arange(R) < n`) is traced as one `lt` whose
  operands differ in rank: jax broadcasts the scalar. Lane arrays carry a lane axis first, so the
  scalar's `(lanes,)` must be lifted to `(lanes, 1, ...)` before numpy broadcasts it.
* `jnp.stack` of scalars is a `stack` primitive.

Each case is compared, lane by lane, with jax evaluating the same function.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from semcheck.checker.frontend.numeric import NUMERIC, _ELEMENTWISE, _lift_scalars

pytestmark = pytest.mark.jax

_OPS = {"lt": lax.lt, "ge": lax.ge, "add": lax.add, "mul": lax.mul, "max": lax.max, "rem": lax.rem}


def _eval(fn, lanes: list[tuple]) -> np.ndarray:
    """`fn` on every lane's arguments through the front end's numeric rules, equation by equation."""
    closed = jax.make_jaxpr(fn)(*lanes[0])
    env = {v: np.stack([np.asarray(args[i]) for args in lanes]) for i, v in enumerate(closed.jaxpr.invars)}

    def read(v):
        return np.asarray(v.val)[None] if isinstance(v, jax.extend.core.Literal) else env[v]

    for eqn in closed.jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive.name in _ELEMENTWISE:
            invals = _lift_scalars(eqn, invals)
        env[eqn.outvars[0]] = np.asarray(NUMERIC[eqn.primitive.name](eqn, *invals))
    return read(closed.jaxpr.outvars[0])


@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from(sorted(_OPS)), rows=st.integers(1, 9), lanes=st.integers(1, 5),
       scalar_first=st.booleans(), data=st.data())
def test_rank0_operand_broadcasts_like_jax(op, rows, lanes, scalar_first, data):
    vec = np.arange(rows, dtype=np.int32) + 1
    scalars = [np.int32(data.draw(st.integers(1, 12))) for _ in range(lanes)]

    def fn(v, s):
        return _OPS[op](s, v) if scalar_first else _OPS[op](v, s)

    got = _eval(fn, [(vec, s) for s in scalars])
    want = np.stack([np.asarray(fn(jnp.asarray(vec), jnp.asarray(s))) for s in scalars])
    assert got.shape == want.shape and (got == want).all()


def test_select_of_a_scalar_predicate_broadcasts():
    def fn(p, v):
        return lax.select_n(p, v, -v)

    vec = np.arange(4, dtype=np.int32)
    got = _eval(fn, [(np.bool_(True), vec), (np.bool_(False), vec)])
    assert (got == np.stack([-vec, vec])).all()


def test_stack_of_scalars_per_lane():
    def fn(a, b):
        return jnp.stack([a, b, a + b])

    got = _eval(lambda a, b: jnp.stack([a, b, b]), [(np.int32(1), np.int32(2)), (np.int32(5), np.int32(7))])
    assert got.tolist() == [[1, 2, 2], [5, 7, 7]]
    del fn
