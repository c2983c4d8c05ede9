"""Windows jax's interpreter refuses (specs/semantics/accesses.md ACC-10, ERR-20; divergence D33).

* the shape-only forms of BUF-10 and BUF-11 (`kernel_buffer.read_refused` / `write_refused`) agree
  with the manager's own read and store on real buffers, over windows drawn by hypothesis;
* the interpreter's range of a view (`window_bounds.interpreter_range`) is jax's `to_range`;
* semcheck's prediction, decided as the failing-runs machinery does (`failing_runs`), matches every
  row of tests/kernels/window_bounds.json, which records jax's interpreter running each case (with the race
  detector on: an on_wait copy of 0 bytes never runs, and its wait fails RACE-1's assertion, ERR-21).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.model import buffer, kernel_buffer as kb

HERE = Path(__file__).resolve().parent
TABLE = json.loads((HERE / "kernels" / "window_bounds.json").read_text())

_dims = st.lists(st.integers(1, 5), min_size=1, max_size=3)


@st.composite
def _windows(draw):
    shape = tuple(draw(_dims))
    rnge = []
    for d in shape[: draw(st.integers(1, len(shape)))]:  # negative values too: numpy counts them from the end
        if draw(st.booleans()):
            rnge.append(draw(st.integers(-d - 1, d + 1)))
        else:
            start, size, stride = draw(st.integers(-d - 2, d + 2)), draw(st.integers(0, d + 1)), draw(st.integers(1, 3))
            rnge.append(slice(start, start + size * stride, stride))
    return shape, tuple(rnge)


def _store(shape):
    s, _ = kb.allocate_for_kernel(buffer.BufferStore(), 0, 0, "vmem", np.zeros(shape, np.float32), 1)
    return s


@pytest.mark.rule("ACC-10", "BUF-10", "BUF-11", "BUF-12")
@settings(max_examples=300, deadline=None)
@given(_windows())
def test_the_shape_rules_agree_with_the_managers_read_and_store(case):
    shape, rnge = case
    got = kb.kernel_get(_store(shape), 0, 0, "vmem", 100, rnge)
    assert kb.read_refused(rnge, shape) is isinstance(got, kb.OutOfBoundsRead)
    want = kb.full_read_shape(rnge, shape)
    value = np.zeros(want, np.float32)
    written = kb.kernel_store(_store(shape), 0, 0, "vmem", 100, rnge, value)
    refused = kb.write_refused(rnge, shape)
    if isinstance(refused, kb.Raised):  # a negative index or start: the manager's assertion (BUF-5a)
        assert refused == written and refused.python_type == "AssertionError"
    else:
        assert refused is isinstance(written, kb.OutOfBoundsWrite)
    swapped = kb.kernel_swap(_store(shape), 0, 0, "vmem", 100, rnge, value)  # a kernel store (BUF-12)
    assert kb.read_refused(rnge, shape) is isinstance(swapped, kb.OutOfBoundsSwap)


@pytest.mark.jax
@pytest.mark.rule("ACC-10")
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-4, 4), st.integers(0, 3), st.integers(1, 2)), min_size=1, max_size=3),
       st.booleans())
def test_the_range_of_a_view_is_the_interpreters(slices, squeeze_first):
    from jax._src.pallas.mosaic.interpret import utils
    from jax._src.state.indexing import NDIndexer, Slice

    from semcheck.checker.frontend.window_bounds import interpreter_range

    shape = (16, 16)
    chain = []
    for k, (start, size, stride) in enumerate(slices):
        first = Slice(start, size, stride)
        if k == 0 and squeeze_first:
            chain.append(NDIndexer((start, Slice(0, 16, 1)), shape, ()))
            shape = (16,)
        else:
            rest = (Slice(0, shape[1], 1),) if len(shape) > 1 else ()
            chain.append(NDIndexer((first, *rest), shape, ()))
            shape = (size, *shape[1:])
    assert interpreter_range(chain) == utils.to_range(chain)


_LABEL = re.compile(r"^(Out-of-bounds (?:read|write|swap) of )\S+?:")


def _predict(name: str, mode: str) -> dict:
    """semcheck's outcome for a case: "ok" (no run fails), "error" (every run raises that, RUN-9) or "unknown"."""
    sys.path.insert(0, str(HERE / "kernels"))
    import window_cases as wc

    from semcheck.checker.properties.failing_runs import failing_run_verdict
    from semcheck.checker.properties.decide import decide
    from semcheck.checker.frontend.errors import KernelRaised
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    try:
        (call,) = trace_kernels(*wc.build_case(name, dma_mode=mode))
    except KernelRaised as e:  # jax refused the kernel while semcheck traced it: before anything runs
        etype, _, msg = str(e.cause and f"{type(e.cause).__name__}: {e.cause}").partition(": ")
        return {"outcome": "error", "error_type": etype, "error_message": msg}
    program = lower_kernel(call)
    v = failing_run_verdict("deadlock-free", program, mode, recheck=decide)
    if v is None:  # not every run fails statically: deadlock-free's own check (an on_wait copy, ACC-11)
        v = decide("deadlock-free", program, mode)
        if v.verdict == "proved":
            return {"outcome": "ok"}
    if v.verdict == "unknown":
        return {"outcome": "unknown", "reason": v.reason}
    d = v.witness.details
    return {"outcome": "error", "error_type": d["error_type"], "error_message": _LABEL.sub(r"\1<buffer>:", d["error_message"])}


def _rows():
    for r in TABLE["rows"]:
        yield pytest.param(r, id=f"{r['case']}-{r['dma_mode']}")


@pytest.mark.jax
@pytest.mark.rule("ACC-10", "ERR-20", "ERR-21")
@pytest.mark.parametrize("row", list(_rows()))
def test_semcheck_predicts_every_recorded_window(row):
    got = _predict(row["case"], row["dma_mode"])
    want = {k: row[k] for k in ("outcome", "error_type", "error_message") if k in row}
    if got["outcome"] == "unknown":
        # ACC-10: an on_wait copy raises when a waiter runs its task, which semcheck does not decide
        assert row["dma_mode"] == "on_wait" and row["access"] == "copy" and row["outcome"] == "error", got
        assert want["error_message"].split(":")[-1].strip() in got["reason"]
        return
    assert got == want


@st.composite
def _batched_views(draw):
    """A buffer's shape, a lane count and a chain of one or two indexers whose starts, sizes and indices are
    one value or one per lane (as a grid's lanes batch them), some of them out of bounds or negative."""
    from jax._src.state.indexing import NDIndexer, Slice

    lanes = draw(st.integers(1, 4))
    shape = tuple(draw(_dims))

    def value(hi):
        if draw(st.booleans()):
            return draw(st.integers(-1, hi))
        return np.array(draw(st.lists(st.integers(-1, hi), min_size=lanes, max_size=lanes)), dtype=np.int32)

    chain, view = [], shape
    for _ in range(draw(st.integers(1, 2))):
        indices, out = [], []
        for d in view:
            if draw(st.booleans()) and len(view) > 1:
                indices.append(value(d + 1))
            else:
                size, stride = draw(st.integers(0, d)), draw(st.integers(1, 2))
                indices.append(Slice(value(d + 1), value(d) if draw(st.booleans()) else size, stride))
                out.append(size)  # the next indexer's view (its own sizes need not be the lanes')
        chain.append(NDIndexer(tuple(indices), view, ()))
        if not out:
            break
        view = tuple(out)
    return shape, lanes, tuple(chain)


@pytest.mark.jax
@pytest.mark.rule("ACC-10", "ERR-20")
@settings(max_examples=300, deadline=None)
@given(_batched_views())
def test_the_lanes_known_in_bounds_are_the_lanes_no_window_refuses(case):
    """`lanes_in_bounds` (every lane at once) marks a lane only where its own range (`interpreter_range` of
    `lane_chain`) is predicted and refused neither read nor written, and marks every lane whose range is
    inside the buffer with whole steps, so the lanes it leaves are few."""
    from semcheck.checker.frontend.region_transforms import lane_chain
    from semcheck.checker.frontend.window_bounds import interpreter_range, lanes_in_bounds, window_error
    from semcheck.model.ops import Loc

    shape, lanes, chain = case
    ok = lanes_in_bounds(chain, shape, lanes)
    ok = np.zeros(lanes, dtype=bool) if ok is None else ok  # None: no lane known (a range longer than the buffer)
    for lane in range(lanes):
        own = lane_chain(chain, lane)
        rng = interpreter_range(own)
        inside = rng is not None and len(rng) <= len(shape) and all(
            0 <= r < d if type(r) is int else 0 <= r.start < r.stop <= d and (r.stop - r.start) % r.step == 0
            for r, d in zip(rng, shape))
        assert bool(ok[lane]) is inside
        if inside:
            for kind in ("read", "write"):
                assert window_error("b", shape, own, kind, "copy", Loc("k.py", 1)) is None


@pytest.mark.jax
@pytest.mark.rule("ACC-10")
@pytest.mark.parametrize("start, refused", [(1, False), (2, True)])
def test_a_masked_store_past_the_end_is_unsupported_naming_it(start, refused):
    """A masked `pltpu.store` of two rows of a (3, 128) buffer: jax's interpreter refuses it past the end exactly
    where the mask is true there (`swap_buffer_content`), which is not predicted, so the store is unsupported with
    its line (before: lowered with no failure, proved where every run raises); inside the buffer it is lowered."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.errors import Unsupported
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    def kernel(x_ref, o_ref, buf):
        k = pl.program_id(0)
        pltpu.store(buf.at[pl.ds(k + start, 2)], jnp.zeros((2, 128), jnp.float32),
                    mask=jnp.ones((2, 128), jnp.bool_))
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(1,),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.VMEM((3, 128), jnp.float32)],
                          interpret=pltpu.InterpretParams(dma_execution_mode="eager"))
    (traced,) = trace_kernels(jax.jit(call), (jnp.zeros((3, 128), jnp.float32),))
    if refused:
        with pytest.raises(Unsupported, match="masked store whose window the buffer does not hold whole"):
            lower_kernel(traced)
    else:
        lower_kernel(traced)
