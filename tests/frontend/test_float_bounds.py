"""ACC-35, ACC-36: float values computed by arithmetic that rounds, followed within bounds.

The bounds are checked against what they bound: XLA on the CPU, which computes a kernel's values in jax's
interpreter modes, jitted (fused, contracted, reordered) and bound one primitive at a time; the decisions are
checked against every point of their operands' bounds.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from semcheck.checker.frontend.float_bounds import BASIC, FUNCTIONS, ROUNDING, evaluate, has_bounds
from semcheck.checker.frontend.numeric import NUMERIC
from semcheck.checker.frontend.values import Bounded, Unknown
from semcheck.model.ops import NO_LOC

U = 2.0 ** -24


def _bound_jaxpr(f, x: np.ndarray) -> Bounded | np.ndarray | Unknown:
    """`f(x)` as the front end's numeric rules evaluate it: every equation on lane arrays (one lane), an
    operation that rounds or an operand known within bounds through `float_bounds.evaluate`."""
    import jax

    closed = jax.make_jaxpr(f)(x)
    env = {}
    for v, c in zip(closed.jaxpr.constvars, closed.consts):
        env[v] = np.asarray(c)[None]
    for v in closed.jaxpr.invars:
        env[v] = x[None]

    def read(v):
        if hasattr(v, "val"):  # a literal
            return np.asarray(v.val, dtype=v.aval.dtype)[None]
        return env[v]

    for eqn in closed.jaxpr.eqns:
        name, invals = eqn.primitive.name, [read(v) for v in eqn.invars]
        rank = len(eqn.outvars[0].aval.shape)
        invals = [lift(x, rank) if getattr(v.aval, "shape", None) == () and rank else x
                  for v, x in zip(eqn.invars, invals)]
        dtypes = [v.aval.dtype for v in eqn.outvars]
        if any(isinstance(x, Unknown) and type(x) is not Bounded for x in invals):
            outs = [next(x for x in invals if isinstance(x, Unknown) and type(x) is not Bounded)] * len(dtypes)
        elif has_bounds(invals) or name in ROUNDING:
            outs, _ = evaluate(name, eqn, invals, NUMERIC[name], NO_LOC, dtypes)
        else:
            out = NUMERIC[name](eqn, *invals)
            outs = out if eqn.primitive.multiple_results else [out]
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    (out,) = [read(v) for v in closed.jaxpr.outvars]
    return out


def lift(x, rank):
    if type(x) is Bounded:
        return Bounded(x.why, x.loc, lift(x.lo, rank), lift(x.hi, rank), x.dtype)
    return x.reshape(x.shape[0], *(1,) * rank) if type(x) is np.ndarray and x.ndim == 1 else x


def _softmax(x):
    import jax

    return jax.nn.softmax(x, axis=-1)


def _sigmoid_by_hand(x):  # the shipped fused MoE's sigmoid scoring
    import jax.numpy as jnp

    return 1 / (1 + jnp.exp(-x))


def _functions(x):
    import jax
    import jax.numpy as jnp

    return jnp.tanh(x) * 0.5 + jax.nn.sigmoid(x) - jnp.log(jnp.abs(x) + 1.0)


def _renormalized_top2(x):
    import jax

    p = jax.nn.softmax(x, axis=-1)
    top, _ = jax.lax.top_k(p, 2)
    return top / top.sum(axis=-1, keepdims=True)


def _affine_sum(x):  # a product and a sum XLA may contract into one FMA, summed in XLA's order
    return (x * 1.7 + 0.3).sum(axis=-1)


_FUNCS = {"softmax": _softmax, "sigmoid": _sigmoid_by_hand, "functions": _functions, "top2": _renormalized_top2,
          "affine_sum": _affine_sum}


@pytest.mark.jax
@pytest.mark.rule("ACC-35")
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(_FUNCS)), st.sampled_from([(4, 8), (8, 64), (2, 1024)]), st.integers(0, 2**32 - 1),
       st.sampled_from([0.5, 3.0, 12.0]))
@example("top2", (2, 1024), 2**32 - 1, 0.5)  # (top two within 1.5e-4 relative: a near tie, unknown)
def test_xla_on_the_cpu_computes_inside_the_bounds(fname, shape, seed, scale):
    """Every element XLA on the CPU computes, jitted (fused, an FMA, its own summation order) or one primitive at
    a time, lies in the bounds semcheck carries; the bounds are not loose beyond use (a softmax's of 8 logits that
    spread little within 2^-14 relative)."""
    import jax

    f = _FUNCS[fname]
    rows, cols = shape
    if rows * cols > 1024:  # (the front end evaluates at most 1024 elements; rows of one)
        rows = 1024 // cols
    x = (np.random.default_rng(seed).normal(size=(rows, cols)) * scale).astype(np.float32)
    got = _bound_jaxpr(f, x)
    if scale > 3 and type(got) is Unknown:  # (logits far apart: an exp may be subnormal, which is refused)
        assert "subnormal" in got.why or "overflow" in got.why, got
        return
    if fname == "top2" and type(got) is Unknown:  # (a near tie is unknown, ACC-36: only where there is one)
        assert "near tie" in got.why, got
        p = np.sort(np.asarray(jax.nn.softmax(x, axis=-1)), axis=-1)
        gap = (p[:, -2] - p[:, -3]) / p[:, -2], (p[:, -1] - p[:, -2]) / p[:, -1]
        assert min(gap[0].min(), gap[1].min()) < 2.0 ** -8, (fname, gap)
        return
    assert type(got) is Bounded, got
    lo, hi = got.lo[0], got.hi[0]
    with jax.disable_jit():
        one_at_a_time = np.asarray(f(x))
    for computed in (np.asarray(jax.jit(f)(x)), one_at_a_time):
        c = computed.astype(np.float64)
        assert ((lo <= c) & (c <= hi)).all(), (fname, np.argwhere(~((lo <= c) & (c <= hi)))[:3])
    if fname == "softmax" and scale <= 3 and cols == 8:
        assert ((hi - lo) <= 2.0 ** -14 * np.abs(hi)).all()


@pytest.mark.jax
@pytest.mark.rule("ACC-35")
def test_the_function_bounds_cover_xla_s_error_thirteen_times():
    """The relative bounds of `exp`, `log`, `logistic` and `tanh` are at least 13 times the largest relative error
    of XLA's CPU against float64 on 2^20 float32 inputs each; a division's error is within `BASIC`."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(7)
    n = 1 << 20
    cases = {"exp": (jnp.exp, np.exp, rng.uniform(-87, 88, n)),
             "log": (jnp.log, np.log, np.exp(rng.uniform(-80, 80, n))),
             "logistic": (jax.nn.sigmoid, lambda v: 1 / (1 + np.exp(-v)), rng.uniform(-80, 80, n)),
             "tanh": (jnp.tanh, np.tanh, rng.normal(0, 4, n))}
    for name, (f, ref, x) in cases.items():
        x = x.astype(np.float32)
        want = ref(x.astype(np.float64))
        got = np.asarray(jax.jit(f)(x)).astype(np.float64)
        ok = np.abs(want) >= np.finfo(np.float32).tiny
        worst = float(np.max(np.abs(got[ok] - want[ok]) / np.abs(want[ok])))
        assert worst > 0 and 13 * worst <= FUNCTIONS[name], (name, worst / U)
    a, b = (rng.normal(size=n) * np.exp(rng.uniform(-20, 20, n))).astype(np.float32), \
        (rng.normal(size=n) * np.exp(rng.uniform(-20, 20, n))).astype(np.float32)
    q = np.asarray(jax.jit(jnp.divide)(a, b)).astype(np.float64)
    want = a.astype(np.float64) / b.astype(np.float64)
    assert float(np.max(np.abs(q - want) / np.abs(want))) <= U < BASIC


# --- decisions ----------------------------------------------------------------------------------------------

def _eqn(name, multiple=False, **params):
    return SimpleNamespace(params=params, primitive=SimpleNamespace(name=name, multiple_results=multiple))


@st.composite
def _intervals(draw, shape):
    n = int(np.prod(shape))
    mid = np.array(draw(st.lists(st.floats(-4, 4, width=32), min_size=n, max_size=n)), np.float64).reshape(shape)
    width = np.array(draw(st.lists(st.sampled_from([0.0, 1e-7, 1e-3, 0.5]), min_size=n, max_size=n))).reshape(shape)
    return Bounded("drawn", NO_LOC, (mid - width)[None], (mid + width)[None], np.dtype(np.float32))


def _points(x: Bounded, rng, count=24):
    """Points of the bounds: both ends and random ones between."""
    yield x.lo
    yield x.hi
    for _ in range(count):
        t = rng.uniform(size=x.lo.shape)
        yield x.lo + t * (x.hi - x.lo)


@pytest.mark.rule("ACC-36")
@settings(max_examples=300, deadline=None)
@given(_intervals((3, 5)), st.sampled_from(["argmax", "argmin", "top_k2", "top_k3", "lt", "ge", "eq", "trunc",
                                             "bool"]),
       st.integers(0, 2**32 - 1))
def test_a_decision_from_bounds_holds_for_every_point(x, op, seed):
    """An argmax, argmin, top-k, comparison or conversion to an integer or bool decided from bounds gives, at every
    point of the bounds, the result the operation computes there; undecided (a near tie) is unknown, never a
    guess. With every bound a point and the values distinct, each is decided."""
    rng = np.random.default_rng(seed)
    if op.startswith("top_k"):
        eqn, fn = _eqn("top_k", True, k=int(op[-1]), axis=-1), NUMERIC["top_k"]
    elif op in ("argmax", "argmin"):
        eqn, fn = _eqn(op, axes=(1,), index_dtype=np.int32), NUMERIC[op]
    elif op in ("trunc", "bool"):
        eqn = _eqn("convert_element_type", new_dtype=np.int32 if op == "trunc" else np.bool_)
        fn = NUMERIC["convert_element_type"]
    else:
        eqn, fn = _eqn(op), NUMERIC[op]
    y = Bounded("drawn", NO_LOC, x.lo[:, ::-1].copy(), x.hi[:, ::-1].copy(), x.dtype)
    operands = [x, y] if op in ("lt", "ge", "eq") else [x]
    outs, decided = evaluate(eqn.primitive.name, eqn, operands, fn, NO_LOC, [None] * (2 if op.startswith("top") else 1))
    index = -1 if op.startswith("top_k") else 0
    if isinstance(outs[index], Unknown):
        assert "near tie" in outs[index].why and not decided
    else:
        assert decided
        for p, q in zip(_points(x, rng), _points(y, rng)):
            want = fn(eqn, *([p, q] if len(operands) == 2 else [p]))
            want = want[1] if op.startswith("top_k") else want
            assert np.array_equal(np.asarray(outs[index]), np.asarray(want))
    points = Bounded("drawn", NO_LOC, x.lo, x.lo, x.dtype)
    if len(np.unique(x.lo)) < x.lo.size or (x.lo == np.trunc(x.lo)).any():
        return
    outs, _ = evaluate(eqn.primitive.name, eqn, [points, Bounded("p", NO_LOC, y.lo, y.lo, x.dtype)][:len(operands)],
                       fn, NO_LOC, [None] * (2 if op.startswith("top") else 1))
    assert not isinstance(outs[index], Unknown)


@pytest.mark.rule("ACC-35")
def test_what_may_overflow_be_subnormal_or_divide_by_zero_is_unknown():
    """An `exp` past float32's range, a result that may be subnormal (XLA on the CPU flushes it) and a division
    by bounds holding zero are unknown, not bounded."""
    f32 = np.dtype(np.float32)

    def one(name, *xs):
        eqn = _eqn(name)
        return evaluate(name, eqn, list(xs), NUMERIC[name], NO_LOC, [f32])[0][0]

    assert "overflow" in one("exp", np.array([[100.0]], np.float32)).why
    assert "subnormal" in one("exp", np.array([[-100.0]], np.float32)).why
    around_zero = Bounded("drawn", NO_LOC, np.array([[-1e-3]]), np.array([[1e-3]]), f32)
    assert "zero" in one("div", np.array([[1.0]], np.float32), around_zero).why
    narrow = _eqn("convert_element_type", new_dtype=np.float16)
    (half,), decided = evaluate("convert_element_type", narrow, [around_zero], NUMERIC["convert_element_type"],
                                NO_LOC, [np.float16])
    assert type(half) is Unknown and "near tie" not in half.why and not decided
    assert type(one("exp", np.array([[-np.inf]], np.float32))) is Bounded  # exp(-inf) is exactly 0


@pytest.mark.jax
@pytest.mark.rule("ACC-35")
@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 7))
def test_a_softmax_over_logits_padded_with_minus_infinity(seed, experts):
    """Rows padded to 8 columns with -inf (as MoE kernels pad their experts): the padded probabilities are exactly
    0, the others within bounds that hold XLA's, jitted and one primitive at a time."""
    import jax

    x = np.full((4, 8), -np.inf, np.float32)
    x[:, :experts] = np.random.default_rng(seed).normal(size=(4, experts)).astype(np.float32)
    got = _bound_jaxpr(_softmax, x)
    assert type(got) is Bounded, got
    lo, hi = got.lo[0], got.hi[0]
    assert (lo[:, experts:] == 0).all() and (hi[:, experts:] == 0).all()
    with jax.disable_jit():
        one_at_a_time = np.asarray(_softmax(x))
    for computed in (np.asarray(jax.jit(_softmax)(x)), one_at_a_time):
        c = computed.astype(np.float64)
        assert ((lo <= c) & (c <= hi)).all()
