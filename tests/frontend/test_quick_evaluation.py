"""REP-37: what the checking process does to compile less, and that it computes the same values.

The front end's evaluation of what a kernel's scalar operands are computed from (`concrete_inputs`)
takes integer primitives from the numeric table instead of compiling each with XLA; every value must
be the one jax's own evaluation gives. The verify child asks XLA for backend optimization level 0
unless the user's `XLA_FLAGS` names a level.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax._src import core as jax_core

from semcheck.checker.frontend import targets
from semcheck.checker.frontend.integer_eval import integer_numeric

I32 = st.integers(-(2**31), 2**31 - 1)


def _all_by_numeric_equal_jax(fn, *args) -> int:
    """Every equation of `fn`'s jaxpr on `args` evaluated by `integer_numeric` where it answers, checked
    against jax's bind of the same equation on the same inputs; returns how many it answered."""
    closed = jax.make_jaxpr(fn)(*args)
    env = dict(zip(closed.jaxpr.invars, [np.asarray(a) for a in args]))

    def read(v):
        return np.asarray(v.val) if type(v) is jax_core.Literal else env[v]

    answered = 0
    for eqn in closed.jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        want = eqn.primitive.bind(*invals, **eqn.params)
        want = [np.asarray(w) for w in (want if eqn.primitive.multiple_results else [want])]
        got = integer_numeric(eqn, invals)
        if got is not None:
            answered += 1
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape, eqn
                np.testing.assert_array_equal(g, w, err_msg=str(eqn))
        for v, w in zip(eqn.outvars, want):
            env[v] = w
    return answered


@pytest.mark.rule("REP-37")
@settings(max_examples=40, deadline=None)
@given(st.lists(I32, min_size=6, max_size=6), I32, st.integers(-10, 10))
def test_integer_primitives_take_the_values_jax_computes(xs, y, i):
    x = np.asarray(xs, dtype=np.int32)

    def fn(x, y, i):
        a = x + y  # wraps
        b = a * x - y
        c = lax.select(a < b, a, b)
        d = lax.dynamic_slice(c, (i,), (3,))  # a start out of range is clamped
        e = jnp.concatenate([d, lax.clamp(jnp.int32(-5), d, jnp.int32(7))])
        f = e.reshape(2, 3).T.reshape(6)
        g = jnp.sum(f) + jnp.max(f) - jnp.min(x)
        h = (x == y) | (x != 0) & (x >= i)
        k = jnp.any(h) ^ jnp.all(h)
        m = lax.convert_element_type(x, jnp.int8) + lax.convert_element_type(k, jnp.int8)  # narrowing wraps
        n = jnp.broadcast_to(g, (2, 3))[1] + lax.iota(jnp.int32, 3) - (-x[:3])
        return g, m, n, jnp.squeeze(x[None, :1], 0)

    assert _all_by_numeric_equal_jax(fn, x, np.int32(y), np.int32(i)) >= 15


@pytest.mark.rule("REP-37")
def test_floating_point_and_division_are_left_to_jax():
    def fn(x, y):
        return x / 3.0 + 1.0, y // 3, y % 3, y << 2

    assert _all_by_numeric_equal_jax(fn, np.arange(4, dtype=np.float32), np.arange(4, dtype=np.int32)) == 0


@pytest.mark.rule("REP-37")
def test_the_checking_process_compiles_at_level_zero_unless_the_user_names_a_level(monkeypatch):
    monkeypatch.setattr(targets, "jax_initialised", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    targets.compile_quickly()
    assert os.environ["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=4",
                                               "--xla_backend_optimization_level=0"]
    targets.compile_quickly()  # once
    assert os.environ["XLA_FLAGS"].count("optimization_level") == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3")
    targets.compile_quickly()
    assert os.environ["XLA_FLAGS"] == "--xla_backend_optimization_level=3"
    monkeypatch.delenv("XLA_FLAGS")
    targets.compile_quickly()
    assert os.environ["XLA_FLAGS"] == "--xla_backend_optimization_level=0"


@pytest.mark.rule("REP-37")
def test_a_running_jax_is_left_as_it_is(monkeypatch):
    monkeypatch.setattr(targets, "jax_initialised", lambda: True)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    targets.compile_quickly()
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
