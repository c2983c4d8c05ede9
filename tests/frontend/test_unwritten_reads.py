"""PRG-200: which kernels run by PRG-169 may read memory nothing writes, where the two fills of jax's interpreter
need not show it (a TPU leaves there what was there)."""

from __future__ import annotations

import pytest

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
