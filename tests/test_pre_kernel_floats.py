"""Float values computed before a kernel, per DMA mode (ACC-27, ACC-28).

tests/frontend/float_bound_kernels.py divides an example argument before the
`pallas_call` and uses the quotient as the kernel's copy count. A quotient
that does not round is what every correctly rounded division gives, XLA's on
the CPU included (jax's interpreter modes): proved there, unknown under
hardware naming the division's line; a quotient that rounds is unknown in
every mode (ACC-26). Ties and subnormals are followed where XLA on the CPU
computes the program, as jax's interpreter does.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cli._support import semcheck_many
from semcheck.checker.frontend.float_exact import rounds_floats

pytestmark = pytest.mark.jax

ROOT = Path(__file__).resolve().parent.parent
KERNELS = "tests/frontend/float_bound_kernels.py"
MODES = ("eager", "on_wait", "hardware")


@pytest.fixture(scope="module")
def report():
    (run,) = semcheck_many([(("verify", KERNELS, "--devices", "1", "--dma-mode", "all", "--format", "json",
                              "--no-cache", "--no-config"), {"cwd": ROOT, "timeout": 900})])
    assert run.returncode == 3, run.stderr[-2000:]
    return run.json()["results"]


@pytest.mark.rule("ACC-27")
def test_a_quotient_that_does_not_round_is_a_fact_in_the_interpreter_modes_only(report):
    """8 / 4: every property proved in eager and on_wait; under hardware unknown, naming ACC-27 and the division's
    line (before ACC-27: unknown in every mode)."""
    exact = [r for r in report if r["target"] == "exact"]
    assert {(r["dma_mode"], r["verdict"]) for r in exact} == {("eager", "proved"), ("on_wait", "proved"),
                                                              ("hardware", "unknown")}
    assert all("ACC-27" in r["reason"] and "float_bound_kernels.py:36" in r["reason"]
               for r in exact if r["dma_mode"] == "hardware")


@pytest.mark.rule("ACC-26", "ACC-27")
def test_a_quotient_that_rounds_is_unknown_in_every_mode(report):
    rounds = [r for r in report if r["target"] == "rounds"]
    assert {r["dma_mode"] for r in rounds} == set(MODES)
    assert all(r["verdict"] == "unknown" and "ACC-26" in r["reason"] and "float_bound_kernels.py:36" in r["reason"]
               for r in rounds)


@pytest.mark.rule("ACC-27")
@pytest.mark.parametrize("dma_mode", ["eager", "on_wait"])
def test_the_interpreter_copies_the_rows_semcheck_computed(dma_mode):
    """Ground truth: jax's interpreter runs `exact` to completion and copies exactly 8 / 4 = 2 rows."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "frontend"))
    from float_bound_kernels import build

    fn, (x, total) = build(8.0, dma_mode=dma_mode)
    out = np.asarray(fn(x, total))
    assert np.array_equal(out[:2], np.asarray(x)[:2]) and not np.array_equal(out[2], np.asarray(x)[2])


@pytest.mark.rule("ACC-27")
def test_the_modes_share_one_lowering_where_their_values_agree():
    """Only a kernel whose values differ between the modes is lowered twice: the integer twin of the division
    has one set of values (`hardware` None), the exact division two (`hardware` the unknown count)."""
    import sys

    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs

    sys.path.insert(0, str(ROOT / "tests" / "frontend"))
    from float_bound_kernels import build

    fn, args = build(8.0)
    (_,), (inputs,) = trace_with_inputs(fn, args, per_mode=True)
    assert int(inputs.values[0][0, 0]) == 2 and inputs.hardware is not None
    assert inputs.hardware.values[0] is None and "ACC-27" in inputs.hardware.why_of(0)
    (_,), (shared,) = trace_with_inputs(fn, args)  # without per_mode: the values every mode shares
    assert shared.values[0] is None
    fn, args = build(8)
    (_,), (ints,) = trace_with_inputs(fn, args, per_mode=True)
    assert int(ints.values[0][0, 0]) == 2 and ints.hardware is None


_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@pytest.mark.rule("ACC-27")
@settings(max_examples=300, deadline=None)
@given(a=_F32, b=_F32.filter(lambda b: b != 0), small=st.booleans())
def test_a_division_is_followed_where_its_exact_quotient_is_its_result(a, b, small):
    """The interpreter's modes follow `a / b` exactly when the rational quotient is the float32 result (then any
    correctly rounded division gives it); hardware never follows a division."""
    if small:  # quotients that are exact: a multiple of b by a power of two or a small integer
        a = float(np.float32(b) * np.float32(4.0))
    a32, b32 = np.float32(a), np.float32(b)
    with np.errstate(all="ignore"):
        q = a32 / b32
    exact = np.isfinite(q) and (q == 0 or abs(q) >= np.finfo(np.float32).tiny) and \
        Fraction(float(a32)) / Fraction(float(b32)) == Fraction(float(q))
    got = rounds_floats("div", [np.array(a32), np.array(b32)], [np.array(q)], {}, interpreter=True)
    assert (got is None) == bool(exact)
    assert rounds_floats("div", [np.array(a32), np.array(b32)], [np.array(q)], {}) is not None


@pytest.mark.rule("ACC-28")
def test_ties_and_subnormals_are_followed_as_xla_on_the_cpu_computes_them():
    """XLA on the CPU, fused or bound one primitive at a time as semcheck binds it, breaks an argmax's and a
    top-k's ties by the lowest index and flushes subnormals to zero: followed in the interpreter's modes,
    refused under hardware."""
    import jax
    import jax.numpy as jnp

    row = np.array([[1.0, 3.0, 3.0, 2.0]], np.float32)
    assert int(jax.jit(lambda x: jnp.argmax(x, axis=1))(row)[0]) == int(jax.lax.argmax(row, 1, jnp.int32)[0]) == 1
    assert list(jax.jit(lambda x: jax.lax.top_k(x, 2)[1])(row)[0]) == [1, 2]
    sub = np.float32(1e-40)
    assert float(jax.jit(lambda s: s + s)(sub)) == float(jax.lax.add(sub, sub)) == 0.0
    params = {"axes": (1,), "index_dtype": np.int32}
    assert rounds_floats("argmax", [row], [np.array([1])], params) is not None
    assert rounds_floats("argmax", [row], [np.array([1])], params, interpreter=True) is None
    pair = [np.array(sub), np.array(np.float32(0))]
    assert rounds_floats("max", pair, [np.array(sub)], {}) is not None
    assert rounds_floats("max", pair, [np.array(sub)], {}, interpreter=True) is None


@pytest.mark.rule("ACC-26")
@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 5), min_size=1, max_size=8))
def test_a_histogram_s_counts_are_exact_in_every_mode(counts):
    """`scatter-add` of integer-valued floats whose magnitudes sum to at most 2^24 (a histogram's counts): every
    partial sum is exact, in any order."""
    operand = np.zeros(len(counts), np.float32)
    idx = np.repeat(np.arange(len(counts)), counts).reshape(-1, 1)
    ones = np.ones(len(idx), np.float32)
    out = np.array(counts, np.float32)
    assert rounds_floats("scatter-add", [operand, idx, ones], [out], {}) is None
    half = np.full(len(idx), 0.5, np.float32)
    if len(idx):
        assert rounds_floats("scatter-add", [operand, idx, half], [out / 2], {}) is not None


@pytest.mark.rule("ACC-27")
def test_hardware_is_decided_on_its_own_lowering_where_it_needs_no_such_value(report):
    """`unused` passes the quotient as a scalar-prefetch operand its control never reads: lowered twice, and
    `hardware` is proved on the lowering without the value (it is not made unknown wholesale)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "frontend"))
    from semcheck.checker.frontend.api import lower_target
    from semcheck.checker.frontend.targets import load_targets
    from semcheck.model.ops import Program

    rows = [r for r in report if r["target"] == "unused"]
    assert {r["dma_mode"] for r in rows} == set(MODES) and {r["verdict"] for r in rows} == {"proved"}
    (t,) = load_targets(str(ROOT / KERNELS), target="unused")
    (k,) = lower_target(t, 1, per_mode=True)
    assert isinstance(k.hardware, Program)
    (shared,) = lower_target(t, 1)
    assert shared.hardware is None


@pytest.mark.rule("ACC-28")
def test_a_tie_inside_the_kernel_is_decided_in_the_interpreter_modes_only(report):
    """`tie`: the kernel's copy count is an argmax over logits with a tie. The interpreter's modes break it as numpy
    does (the lowest index): proved there, unknown under hardware naming the argmax's line; a tie between -0.0 and
    0.0 (`tie_of_zeros`), which XLA's top-k orders and numpy does not, stays unknown in every mode."""
    tie = [r for r in report if r["target"] == "tie"]
    assert {(r["dma_mode"], r["verdict"]) for r in tie} == {("eager", "proved"), ("on_wait", "proved"),
                                                            ("hardware", "unknown")}
    assert all("ACC-28" in r["reason"] and "float_bound_kernels.py:101" in r["reason"]
               for r in tie if r["dma_mode"] == "hardware")
    zeros = [r for r in report if r["target"] == "tie_of_zeros"]
    assert {r["dma_mode"] for r in zeros} == set(MODES) and {r["verdict"] for r in zeros} == {"unknown"}


@pytest.mark.rule("ACC-28")
@pytest.mark.parametrize("dma_mode", ["eager", "on_wait"])
def test_the_interpreter_breaks_the_kernel_s_tie_as_semcheck_does(dma_mode):
    """Ground truth: jax's interpreter takes index 1 of [1, 3, 3, 2] and copies exactly one row."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "frontend"))
    from float_bound_kernels import build_tie

    fn, (logits, x) = build_tie(dma_mode=dma_mode)
    out = np.asarray(fn(logits, x))
    assert np.array_equal(out[0], np.asarray(x)[0]) and not np.array_equal(out[1], np.asarray(x)[1])


@pytest.mark.rule("ACC-28")
@settings(max_examples=200, deadline=None)
@given(row=st.lists(st.sampled_from([-1.0, -0.0, 0.0, 1.0, 2.0]), min_size=2, max_size=6),
       k=st.integers(1, 3))
def test_numpy_s_tie_break_is_xla_s_where_semcheck_follows_it(row, k):
    """Where the kernel's rule follows a tie for the interpreter's modes, semcheck's argmax and top-k (numpy, the
    front end's table) choose what XLA on the CPU chooses."""
    import types

    import jax
    import jax.numpy as jnp

    from semcheck.checker.frontend.float_exact import refusal
    from semcheck.checker.frontend.numeric import NUMERIC

    k = min(k, len(row))
    x = np.array([row], np.float32)
    lanes = x[None]  # (lanes, 1, n): the front end's lane axis first
    arg = {"axes": (1,), "index_dtype": np.int32}
    if refusal("argmax", [lanes], arg, ties=True) is None:
        got = NUMERIC["argmax"](types.SimpleNamespace(params=arg), lanes)
        assert int(got[0, 0]) == int(jax.lax.argmax(x, 1, jnp.int32)[0])
    top = {"k": k, "axis": -1}
    if refusal("top_k", [lanes], top, ties=True) is None:
        _, idx = NUMERIC["top_k"](types.SimpleNamespace(params=top), lanes)
        assert list(idx[0, 0]) == list(np.asarray(jax.lax.top_k(x, k)[1])[0])


# a row whose top 32 XLA on the CPU orders otherwise than lowest index first when unstable (it puts index 1 first)
_UNSTABLE_ROW = [2.0, 2.0, 1.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0,
                 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 2.0, 2.0, 2.0]


@pytest.mark.rule("ACC-89")
@settings(max_examples=40, deadline=None)
@given(row=st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=2, max_size=40), k=st.integers(1, 40),
       stable=st.booleans())
@example(row=_UNSTABLE_ROW, k=32, stable=False)
def test_a_top_k_s_tie_is_followed_only_where_xla_breaks_it_lowest_index_first(row, k, stable):
    """Where semcheck follows a `top_k` through a tie (ACC-28 in a kernel, ACC-27 before it), its choice is XLA's on
    the CPU, bound alone and inside a kernel jax's interpreter runs; an unstable top-k's tie (`is_stable=False`) is
    never followed: XLA orders its equal values otherwise (the pinned row: index 1 first, where numpy puts 0)."""
    import types

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.float_exact import refusal
    from semcheck.checker.frontend.numeric import NUMERIC

    k = min(k, len(row))
    x = np.array([row], np.float32)
    lanes = x[None]
    params = {"k": k, "axis": -1, "is_stable": stable}
    followed = [refusal("top_k", [lanes], params, ties=True), refusal("top_k", [lanes], params, interpreter=True)]
    head = sorted(row, reverse=True)[:k + 1]
    if not stable:  # refused exactly where the values it orders tie
        assert [why is not None for why in followed] == [len(set(head)) < len(head)] * 2, (row, k, followed)
    if any(why is not None for why in followed):
        return
    _, idx = NUMERIC["top_k"](types.SimpleNamespace(params=params), lanes)

    def kernel(x_ref, o_ref):
        o_ref[...] = jax.lax.top_k(x_ref[...], k, is_stable=stable)[1]

    in_kernel = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, k), jnp.int32),
                               interpret=pltpu.InterpretParams())(jnp.asarray(x))
    for got in (jax.lax.top_k(x, k, is_stable=stable)[1], in_kernel):
        assert list(idx[0, 0]) == list(np.asarray(got)[0]), (row, k, stable)


@pytest.mark.rule("ACC-26")
@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_subnormal=False), min_size=1, max_size=16),
       st.sampled_from(["HBM", "VMEM", "SMEM"]))
def test_a_memory_space_constraint_is_its_operand(xs, space):
    """`pltpu.with_memory_space_constraint` gives its operand (jax's primitive, bound alone and jitted, on the
    drawn floats), so semcheck follows a float through it as through a copy (a shipped MoE's gating logits)."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    x = np.array(xs, np.float32)
    memory = getattr(pltpu, space)
    alone = np.asarray(pltpu.with_memory_space_constraint(x, memory))
    jitted = np.asarray(jax.jit(lambda v: pltpu.with_memory_space_constraint(v, memory))(x))
    assert alone.tobytes() == x.tobytes() == jitted.tobytes()
    assert rounds_floats("with_memory_space_constraint", [x], [alone], {"memory_space": memory}) is None
