"""PRG-200: which kernels run by PRG-169 may read memory nothing writes, where the two fills of jax's interpreter
need not show it (a TPU leaves there what was there)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from semcheck.checker.frontend.kernel_outputs import unwritten_reads  # noqa: E402

SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _eqn(kernel, *, scratch=(), aliases=None, grid=(), rows=2, block=None):
    def f(x):
        specs = dict(in_specs=[SMEM], out_specs=SMEM) if block is None else dict(
            in_specs=[pl.BlockSpec((block,), lambda i: (i,))], out_specs=pl.BlockSpec((block,), lambda i: (i,)))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((rows,), jnp.int32), grid=grid,
                              scratch_shapes=list(scratch), input_output_aliases=aliases or {}, interpret=True,
                              **specs)(x)

    return next(e for e in jax.make_jaxpr(f)(jnp.ones((rows,), jnp.int32)).eqns if e.primitive.name == "pallas_call")


def _coincide(c_ref, o_ref, t_ref):
    t = t_ref[0]  # 2**31 - 1 under the NaN fill, 0 under the zero fill: the sum is the count in both runs
    o_ref[0] = c_ref[0] + jnp.where((t > 5) & (t < 1000), 1, 0)


def _stores(c_ref, o_ref, *sems):
    o_ref[0] = c_ref[0]

    @pl.when(c_ref[0] > 0)
    def _():
        o_ref[1] = c_ref[1]


def _reads_back(c_ref, o_ref):
    o_ref[0] = c_ref[0]
    o_ref[1] = o_ref[1] + 1  # element 1: memory nothing wrote, unless the output aliases the input


def _scoped(c_ref, o_ref):
    o_ref[0] = c_ref[0] + pl.run_scoped(lambda t_ref: jnp.minimum(t_ref[0], 0) * 0, pltpu.SMEM((1,), jnp.int32))


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


@pytest.mark.jax
@pytest.mark.rule("PRG-200")
def test_a_kernel_that_may_read_memory_nothing_writes_says_through_what():
    """A scratch buffer, an output read back, a run_scoped buffer and a block past its array's end may each hold what
    was there on a TPU; the two fills agree on `_coincide`'s output, so they cannot be the evidence."""
    assert unwritten_reads(_eqn(_coincide, scratch=[pltpu.SMEM((1,), jnp.int32)])) == "a scratch buffer"
    assert unwritten_reads(_eqn(_reads_back)) == "output 0, read back by the kernel"
    assert unwritten_reads(_eqn(_scoped)) == "a run_scoped buffer"
    padded = unwritten_reads(_eqn(_copy, grid=(2,), rows=12, block=8))
    assert "block of shape (8,)" in padded and "(12,)" in padded, padded


@pytest.mark.jax
@pytest.mark.rule("PRG-200")
def test_a_kernel_that_reads_its_inputs_only_is_not_named():
    """Stores (under a pl.when too), semaphore scratch, an output that aliases its input and blocks that tile the
    array read nothing the fills stand for."""
    assert unwritten_reads(_eqn(_stores)) == ""
    assert unwritten_reads(_eqn(_stores, scratch=[pltpu.SemaphoreType.DMA])) == ""
    assert unwritten_reads(_eqn(_reads_back, aliases={0: 0})) == ""
    assert unwritten_reads(_eqn(_copy, grid=(2,), rows=16, block=8)) == ""


def _at_negative(c_ref, o_ref):
    o_ref[0] = c_ref[jnp.minimum(c_ref[0], 0) - 1]  # -1: numpy's last element in the interpreter


def _at_loaded(c_ref, o_ref):
    o_ref[0] = c_ref[c_ref[0]]  # a value loaded from a ref may be negative


def _only_under_when(c_ref, o_ref):
    @pl.when(c_ref[0] > 0)
    def _():
        o_ref[c_ref[0] - 1] = 1  # >= 0 where it runs, which the walk does not follow


def _non_negative(c_ref, o_ref):
    o_ref[0] = c_ref[jnp.clip(c_ref[0], 0, 1)]
    o_ref[1] = c_ref[jnp.maximum(c_ref[0], 0) % 2]
    o_ref[pl.program_id(0)] = c_ref[1 - pl.program_id(0)]

    def body(i, carry):
        return carry + c_ref[1 - i] + c_ref[(2 * i + 1) // 2]

    o_ref[0] = jax.lax.fori_loop(0, jnp.minimum(c_ref[0], 2), body, 0) + jax.lax.fori_loop(0, 2, body, 0)


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
def test_a_kernel_that_may_index_at_a_negative_position_is_named_with_the_line():
    """An index computed as -1, one loaded from a ref, and one that is >= 0 only under the `pl.when` that guards it
    may be negative: jax's interpreter reads from the end there, a TPU before the ref."""
    for kernel, text in ((_at_negative, "jnp.minimum(c_ref[0], 0) - 1"), (_at_loaded, "c_ref[c_ref[0]]"),
                         (_only_under_when, "o_ref[c_ref[0] - 1] = 1")):
        why = unwritten_reads(_eqn(kernel, grid=(2,)))
        line = next(i for i, ln in enumerate(open(__file__).read().splitlines(), 1) if text in ln)
        assert "an index semcheck cannot show is at least 0" in why and f"test_unwritten_reads.py:{line}" in why, why


@pytest.mark.jax
@pytest.mark.rule("PRG-202")
def test_indices_from_constants_grid_steps_clamps_and_loop_counters_are_not_named():
    """A clamp, a max with 0 then a remainder, the grid step (of 2) and the counters of a `fori_loop` with a static
    and with a loaded bound (kept below `min(c[0], 2)`) are all >= 0."""
    assert unwritten_reads(_eqn(_non_negative, grid=(2,))) == ""


def _stores_in_loops(c_ref, o_ref):
    def row(i, carry):
        o_ref[i] = c_ref[i] + carry  # a store only, in a loop with a loaded bound (a `while`) ...
        return carry

    jax.lax.fori_loop(0, jnp.minimum(c_ref[0], 2), row, 0)

    def static(i, carry):
        o_ref[i] = carry  # ... and in one with a static bound (a `scan`)
        return carry + 1

    jax.lax.fori_loop(0, 2, static, 0)


def _reads_back_in_a_loop(c_ref, o_ref):
    def row(i, carry):
        o_ref[i] = c_ref[i]
        return carry + o_ref[1 - i]  # element 1 may be read before it is written

    o_ref[0] = jax.lax.fori_loop(0, jnp.minimum(c_ref[0], 2), row, 0)


def _reads_back_in_a_static_loop(c_ref, o_ref):
    def row(i, carry):
        return carry + o_ref[i]

    o_ref[0] = jax.lax.fori_loop(0, 2, row, 0)


@pytest.mark.jax
@pytest.mark.rule("PRG-219")
def test_stores_inside_a_fori_loop_are_followed_into_the_loop():
    """A `fori_loop` (a `while` with a loaded bound, a `scan` with a static one) that only stores into the output
    reads nothing the fills stand for; one whose body loads the output is still named."""
    assert unwritten_reads(_eqn(_stores_in_loops)) == ""
    assert unwritten_reads(_eqn(_reads_back_in_a_loop)) == "output 0, read back by the kernel"
    assert unwritten_reads(_eqn(_reads_back_in_a_static_loop)) == "output 0, read back by the kernel"


def _at_loaded_then_stored(c_ref, o_ref):
    o_ref[0] = c_ref[c_ref[0]]
    c_ref[0] = -1  # the input may then hold what its values do not


def _at_loaded_in_a_loop(c_ref, o_ref):
    def body(i, carry):
        return carry + c_ref[c_ref[i]]

    o_ref[0] = jax.lax.fori_loop(0, jnp.minimum(c_ref[0], 2), body, 0)


@pytest.mark.jax
@pytest.mark.rule("PRG-220")
def test_an_index_loaded_from_an_input_takes_the_inputs_values():
    """Given the values the call runs on, a load from an input the kernel never writes (in a loop too) is in their
    interval: `c[c[0]]` is cleared for values in [0, 1] and named where it indexes by a -1 among them, for an
    input the kernel also stores into, and for one that aliases an output; without values it is named, as
    before."""
    def why(kernel, values, **kw):
        eqn = _eqn(kernel, **kw)
        return unwritten_reads(eqn, [jnp.asarray(values, jnp.int32)])

    assert why(_at_loaded, [1, 0]) == ""
    assert why(_at_loaded_in_a_loop, [1, 0]) == ""
    for kernel, values, kw in ((_at_loaded, [-1, 0], {}), (_at_loaded_then_stored, [1, 0], {}),
                               (_at_loaded, [1, 0], {"aliases": {0: 0}}), (_at_loaded_in_a_loop, [2, -1], {})):
        assert "an index semcheck cannot show is at least 0" in why(kernel, values, **kw), (kernel, values, kw)
    assert "an index semcheck cannot show is at least 0" in unwritten_reads(_eqn(_at_loaded))


@pytest.mark.jax
@pytest.mark.rule("PRG-230")
def test_a_loaded_index_is_cleared_exactly_when_the_values_it_indexes_by_are_not_negative():
    """Over drawn inputs of 2 .. 4 values: `c[c[0]]` is cleared exactly where `c[0]`, the value it indexes by, is
    not negative (PRG-230: a load at a known index reads that element; PRG-220 alone cleared it only where no
    value of the input was negative)."""
    eqns = {n: _eqn(_at_loaded, rows=n) for n in (2, 3, 4)}

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.integers(-3, 3), min_size=2, max_size=4))
    @example([0, -1])
    @example([3, 0, 1])
    @example([-1, 2])
    def check(values):
        why = unwritten_reads(eqns[len(values)], [jnp.asarray(values, jnp.int32)])
        assert (why == "") == (values[0] >= 0), (values, why)

    check()
