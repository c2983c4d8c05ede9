"""Values before a kernel whose order of updates the implementation chooses (specs/deciding/frontend.md ACC-33).

* the targets of tests/frontend/order_kernels.py: a table computed by a scatter whose updates overlap with
  different values, or by an unstable sort of tied keys, has no value (every property unknown in every mode, the
  reason naming ACC-33 and the line); unique or equal updates and a stable sort are followed;
* `order_refusal` refuses a scatter exactly where two orders of its updates give different results (hypothesis,
  against applying the updates in every order), and an unstable sort exactly where its keys tie.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli._support import semcheck_many

pytestmark = pytest.mark.jax

ROOT = Path(__file__).resolve().parent.parent
KERNELS = "tests/frontend/order_kernels.py"


def _line(text: str) -> str:
    """`order_kernels.py:N`, N the line of the kernels file that holds `text`."""
    lines = (ROOT / KERNELS).read_text().splitlines()
    return f"order_kernels.py:{next(k for k, s in enumerate(lines, 1) if text in s)}"


@pytest.fixture(scope="module")
def report():
    (run,) = semcheck_many([(("verify", KERNELS, "--dma-mode", "all", "--format", "json", "--no-cache",
                              "--no-config"), {"cwd": ROOT, "timeout": 900})])
    assert run.returncode == 1, run.stderr[-2000:]
    return run.json()["results"]


@pytest.mark.rule("ACC-33")
def test_an_order_the_implementation_chooses_gives_no_value(report):
    """Before ACC-33 `scatter_overlap` and `unstable_sort_tie` were proved in every mode (24 of 24 each at 2
    devices): semcheck's bind picked 100 as `t[1]`, where jax's documentation lets a TPU pick 3 and leak."""
    scatter, sort = _line("return jnp.zeros(4, jnp.int32).at["), _line("return jax.lax.sort(")
    for target, line in (("scatter_overlap", scatter), ("scatter_overlap_in_jit", scatter), ("unstable_sort_tie", sort)):
        rows = [r for r in report if r["target"] == target]
        assert len(rows) == 3 * 8 and {r["verdict"] for r in rows} == {"unknown"}, target
        assert all("ACC-33" in r["reason"] and line in r["reason"] for r in rows), rows[0]["reason"]


@pytest.mark.rule("ACC-33")
def test_an_order_that_changes_nothing_is_followed(report):
    """Unique indices, overlapping updates of equal values: `t[1]` is 3 and the signal leaks in every mode; a
    stable sort keeps 100 first: nothing leaks."""
    for target, want in (("scatter_unique", "violated"), ("scatter_overlap_equal", "violated"),
                         ("stable_sort_tie", "proved")):
        rows = [r for r in report if r["target"] == target]
        assert len(rows) == 3 * 8, target
        got = {r["verdict"] for r in rows if r["property"] == "exit-balance"}
        assert got == {want}, (target, got)
        assert {r["verdict"] for r in rows if r["property"] != "exit-balance"} == {"proved"}, target


def _eqn(fn, *args):
    import jax

    (eqn,) = [e for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns if e.primitive.name in ("scatter", "sort")]
    return eqn


@pytest.mark.rule("ACC-33")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-2, 2)), min_size=1, max_size=4))
def test_a_scatter_is_refused_exactly_where_two_orders_differ(updates):
    """Indices 0..5 of an operand of 4 (4 and 5 are dropped, jax's default mode): every order of the updates is
    applied by numpy; the scatter is refused exactly when two give different arrays."""
    import jax.numpy as jnp

    from semcheck.checker.frontend.pre_kernel_order import order_refusal

    ids = np.array([i for i, _ in updates], np.int32)
    vals = np.array([v for _, v in updates], np.int32)
    eqn = _eqn(lambda i, v: jnp.zeros(4, jnp.int32).at[i].set(v), ids, vals)
    results = set()
    for order in itertools.permutations(range(len(updates))):
        t = np.zeros(4, np.int32)
        for k in order:
            if ids[k] < 4:
                t[ids[k]] = vals[k]
        results.add(tuple(t))
    out = jnp.zeros(4, jnp.int32).at[ids].set(vals)
    got = order_refusal(eqn, [np.zeros(4, np.int32), ids.reshape(-1, 1), vals], [np.asarray(out)])
    assert (got is not None) is (len(results) > 1), (updates, got)


@pytest.mark.rule("ACC-33")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.booleans())
def test_an_unstable_sort_is_refused_exactly_where_its_keys_tie(keys, stable):
    import jax

    from semcheck.checker.frontend.pre_kernel_order import order_refusal

    k = np.array(keys, np.int32)
    v = np.arange(len(keys), dtype=np.int32)
    eqn = _eqn(lambda a, b: jax.lax.sort((a, b), num_keys=1, is_stable=stable), k, v)
    outs = [np.asarray(o) for o in jax.lax.sort((k, v), num_keys=1, is_stable=stable)]
    got = order_refusal(eqn, [k, v], outs)
    assert (got is not None) is (not stable and len(set(keys)) < len(keys)), (keys, stable, got)


@pytest.mark.rule("ACC-34")
def test_an_integer_overflow_is_a_fact_in_the_interpreter_modes_only(report):
    """`lax.div(7, 0)` before the call and inside the kernel: XLA on the CPU gives -1, so the signal leaks in
    `eager` and `on_wait`; under `hardware` the value is the implementation's (before ACC-34: violated there too,
    on the CPU's value), so every property is unknown naming ACC-34 and the division. `lax.div(9, 3)` is 3
    everywhere: violated in every mode."""
    for target, line in (("division_by_zero", _line("plus + jax.lax.div(")),
                         ("division_by_zero_in_kernel", _line("@pl.when(jax.lax.div("))):
        rows = [r for r in report if r["target"] == target]
        assert len(rows) == 3 * 8, target
        interp = {r["verdict"] for r in rows if r["dma_mode"] != "hardware" and r["property"] == "exit-balance"}
        assert interp == {"violated"}, (target, interp)
        hw = [r for r in rows if r["dma_mode"] == "hardware"]
        assert {r["verdict"] for r in hw} == {"unknown"}, target
        assert all("ACC-34" in r["reason"] and line in r["reason"] for r in hw), hw[0]["reason"]
    exact = [r for r in report if r["target"] == "division_exact" and r["property"] == "exit-balance"]
    assert {(r["dma_mode"], r["verdict"]) for r in exact} == {(m, "violated") for m in ("eager", "on_wait",
                                                                                           "hardware")}


@pytest.mark.rule("ACC-34")
@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["div", "rem", "shift_left", "shift_right_logical", "shift_right_arithmetic"]),
       st.sampled_from([np.int8, np.int32, np.uint8, np.uint32]),
       st.lists(st.tuples(st.integers(-2**31, 2**32 - 1), st.integers(-2, 2)), min_size=1, max_size=4))
def test_an_overflow_is_named_exactly_where_the_value_is_the_implementation_s(name, dtype, pairs):
    from semcheck.checker.frontend.int_overflow import int_overflow

    info = np.iinfo(dtype)
    a = np.array([min(max(x, info.min), info.max) for x, _ in pairs], dtype)
    b = np.array([min(max(y, info.min), info.max) for _, y in pairs], dtype)
    if name.startswith("shift"):  # an amount outside [0, width): `arith.shli` and its kin give poison
        want = any(not 0 <= y < 8 * np.dtype(dtype).itemsize for y in b.tolist())
    else:
        want = any(y == 0 or (info.min < 0 and x == info.min and y == -1) for x, y in zip(a.tolist(), b.tolist()))
    assert (int_overflow(name, [a, b]) is not None) is want
