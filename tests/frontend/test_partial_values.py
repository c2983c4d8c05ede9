"""PRG-193: what XLA ops compute from an earlier kernel call's output known only in part (PRG-192).

The soundness property, over drawn arrays, masks and operations: an output element `derive` calls known is the
same whatever values the unknown input elements hold (it is computed from known elements only); and an operation
whose dependence `derive` does not state leaves its whole output unknown."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from semcheck.checker.frontend.partial_values import Partial, derive, partial, same_value, stack  # noqa: E402

# One-operand programs over an int32 (4, 6) array, each one XLA op (besides what jnp adds around it).
OPS = {
    "slice": lambda x: x[1:3, 2:5],
    "reshape": lambda x: x.reshape(6, 4),
    "transpose": lambda x: x.T,
    "rev": lambda x: lax.rev(x, (1,)),
    "broadcast": lambda x: jnp.broadcast_to(x[None], (2, 4, 6)),
    "concatenate": lambda x: jnp.concatenate([x, x * 0 + 1], axis=0),
    "pad": lambda x: lax.pad(x, np.int32(-1), [(1, 0, 0), (0, 2, 1)]),
    "dynamic_slice": lambda x: lax.dynamic_slice(x, (np.int32(1), np.int32(4)), (2, 3)),  # clamped
    "dynamic_update_slice": lambda x: lax.dynamic_update_slice(x, x[:2, :2] * 3, (np.int32(1), np.int32(3))),
    "add": lambda x: x + 5,
    "mul": lambda x: x * x,
    "select": lambda x: lax.select_n(x > 3, x, -x),
    "convert": lambda x: x.astype(jnp.float32),
    "reduce_sum": lambda x: x.sum(axis=1),
    "reduce_max": lambda x: x.max(axis=1),
    "argmax": lambda x: jnp.argmax(x, axis=1),
    "cumsum": lambda x: lax.cumsum(x, axis=1),
    "cumsum_reverse": lambda x: lax.cumsum(x, axis=1, reverse=True),
    "sort": lambda x: lax.sort(x, dimension=1),  # not stated: every output element unknown
    "gather": lambda x: x[jnp.array([2, 0, 3])],  # not stated
}


def _bind(eqn, xs):
    got = eqn.primitive.get_bind_params(eqn.params)
    subfuns, params = got if isinstance(got, tuple) else ((), got)
    out = eqn.primitive.bind(*subfuns, *xs, **params)
    return [np.asarray(o) for o in (out if eqn.primitive.multiple_results else [out])]


def _evaluate(jaxpr, x):
    """`jaxpr` on `x` (an array or a `Partial`), each equation by `derive` where an operand is a `Partial`, and
    unknown (None) where derive does not say or an operand is unknown."""
    env = dict(zip(jaxpr.jaxpr.invars, [x]))
    env.update(zip(jaxpr.jaxpr.constvars, [np.asarray(c) for c in jaxpr.consts]))

    def read(v):
        return np.asarray(v.val) if type(v).__name__ == "Literal" else env.get(v)

    for eqn in jaxpr.jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if any(v is None for v in invals):
            outs = [None] * len(eqn.outvars)
        elif any(isinstance(v, Partial) for v in invals):
            outs = derive(eqn, invals, lambda xs, eqn=eqn: _bind(eqn, xs)) or [None] * len(eqn.outvars)
        else:
            outs = _bind(eqn, invals)
        env.update(zip(eqn.outvars, outs))
    return read(jaxpr.jaxpr.outvars[0])


def _known(out, shape):
    """The known elements of an evaluated output: a boolean array."""
    if out is None:
        return np.zeros(shape, bool)
    if isinstance(out, Partial):
        return ~out.unknown
    return np.ones(shape, bool)


def _values(out):
    return out.values if isinstance(out, Partial) else out


@pytest.mark.jax
@pytest.mark.rule("PRG-193")
@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(sorted(OPS)), seed=st.integers(0, 2**31 - 1), rows=st.integers(0, 4))
def test_an_element_called_known_is_computed_from_known_elements_only(op, seed, rows):
    """The first `rows` rows are known (as a planning kernel writes a prefix), plus random elements: the known
    outputs are those of every filling of the unknown elements."""
    rng = np.random.default_rng(seed)
    unknown = np.ones((4, 6), bool)
    unknown[:rows] = False
    unknown &= rng.random((4, 6)) < 0.7
    a = rng.integers(-9, 9, (4, 6), dtype=np.int32)
    b = np.where(unknown, rng.integers(-9, 9, (4, 6), dtype=np.int32), a)
    jaxpr = jax.make_jaxpr(OPS[op])(a)
    want_a, want_b = np.asarray(OPS[op](a)), np.asarray(OPS[op](b))
    x = partial(a, unknown, "element of the plan") if unknown.any() else a
    got = _evaluate(jaxpr, x)
    known = _known(got, want_a.shape)
    assert np.array_equal(want_a[known], want_b[known]), op
    if got is not None:
        assert np.array_equal(_values(got)[known], want_a[known]), op
    if not unknown.any():
        assert known.all(), op  # nothing unknown: everything computed, as before
    if op in ("sort", "gather") and unknown.any():
        assert not known.any(), op  # not stated: unknown whole
    if op in ("slice", "add", "transpose") and rows == 4:
        assert known.all(), op


@pytest.mark.jax
@pytest.mark.rule("PRG-193")
def test_a_slice_of_the_known_part_is_known_and_one_that_takes_an_unknown_element_is_not():
    values = np.arange(8, dtype=np.int32)
    x = partial(values, np.arange(8) >= 2, "element [2] (and 5 more) of output 0")
    first = _evaluate(jax.make_jaxpr(lambda v: v[0:2] * 2)(values), x)
    assert type(first) is np.ndarray and first.tolist() == [0, 2]
    third = _evaluate(jax.make_jaxpr(lambda v: v[2:3] + 1)(values), x)
    assert third is None  # all unknown: the caller names the Partial's reason
    mixed = _evaluate(jax.make_jaxpr(lambda v: v[1:4])(values), x)
    assert isinstance(mixed, Partial) and mixed.unknown.tolist() == [False, True, True]
    assert mixed.why == x.why
    assert _evaluate(jax.make_jaxpr(lambda v: v.sum())(values), x) is None


@pytest.mark.rule("PRG-193")
def test_values_with_unknown_elements_are_not_arrays_and_compare_by_their_known_elements():
    """Code that does not know a `Partial` sees no value (numpy makes an object of it); two are the same where
    the same elements are unknown and the known ones are equal."""
    a = partial(np.array([1, 2, 3]), np.array([False, True, False]), "w")
    b = partial(np.array([1, 9, 3]), np.array([False, True, False]), "w")
    assert np.asarray(a).dtype == object
    assert same_value(a, b) and not same_value(a, np.array([1, 2, 3])) and same_value(None, None)
    c = partial(np.array([1, 2, 4]), np.array([False, True, False]), "w")
    assert not same_value(a, c)
    lanes = stack([a, b])
    assert isinstance(lanes, Partial) and lanes.shape == (1, 3)  # one row: every device's known elements agree
    lanes = stack([a, np.array([1, 2, 3])])
    assert isinstance(lanes, Partial) and lanes.unknown.tolist() == [[False, True, False], [False, False, False]]
