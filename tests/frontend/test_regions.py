"""Regions of a buffer touched by kernel ref views (checker/frontend/regions.py).

The views come from real kernels: each test traces a small Pallas TPU kernel
with `jax.make_jaxpr` (nothing runs, no jax backend starts) and feeds the
transforms of its loads and stores to `ref_regions`, with index values filled
in per lane by a tiny evaluator below (program ids, iotas, comparisons,
scalars read from SMEM), as the front end's SPMD evaluator does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax._src import core as jax_core  # noqa: E402
from jax._src.state import types as state_types  # noqa: E402
from jax._src.state.indexing import NDIndexer, Slice  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from semcheck.checker.frontend.regions import (  # noqa: E402
    RegionCache,
    flatten_ref,
    full_region,
    ref_regions,
)
from semcheck.model.ops import Region  # noqa: E402

pytestmark = pytest.mark.jax

ACCESS_PRIMS = ("get", "swap", "addupdate", "masked_load", "masked_swap")


@pytest.fixture(autouse=True, scope="module")
def _no_backend():
    """Tracing must not start a jax backend (other tests fix the device count later).

    Only checkable when no earlier test module started one already."""
    from semcheck.checker.frontend.targets import jax_initialised

    before = jax_initialised()
    yield
    if not before:
        assert not jax_initialised()


@dataclasses.dataclass
class Opaque:
    """What the front end's evaluator holds for a value it cannot compute."""

    why: str
    loc: Any = None


@dataclasses.dataclass
class View:
    prim: str
    shape: tuple[int, ...]
    dtype: Any
    transforms: tuple[Any, ...]
    mask: Any

    def regions(self, cache: RegionCache | None = None) -> tuple[Region | None, ...]:
        return ref_regions(self.shape, self.transforms, dtype=self.dtype, mask=self.mask, cache=cache)

    def region(self) -> Region | None:
        (r,) = self.regions()
        return r


_NUMERIC = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.logical_and,
    "or": np.logical_or,
}


def trace_views(
    kernel: Any,
    in_shapes: list[tuple[tuple[int, ...], Any, Any]],
    out_shape: tuple[tuple[int, ...], Any],
    *,
    program_id: Any = 0,
    smem_values: list[Any] = (),
    grid: tuple[int, ...] = (1,),
) -> list[View]:
    """The ref views of every load and store of `kernel`, with per-lane index values.

    `in_shapes` are (shape, dtype, memory space) per input; the output lives in
    VMEM. `program_id` is the (per-lane) value of `pl.program_id(0)`; scalar
    loads from refs take the next of `smem_values` (per-lane arrays) or stay
    opaque once they run out.
    """

    def f(*xs):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(*out_shape),
            grid=grid,
            in_specs=[pl.BlockSpec(memory_space=ms) for _, _, ms in in_shapes],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        )(*xs)

    closed = jax.make_jaxpr(f)(*(jax.ShapeDtypeStruct(s, d) for s, d, _ in in_shapes))
    (call,) = [e for e in closed.eqns if e.primitive.name == "pallas_call"]
    jaxpr = call.params["jaxpr"]
    env: dict[Any, Any] = {}
    smem = iter(smem_values)

    def val(v: Any) -> Any:
        if isinstance(v, jax_core.Literal):
            return np.asarray(v.val)[None]
        return env.get(v, v)

    views = []
    for e in jaxpr.eqns:
        name = e.primitive.name
        ins = [val(v) for v in e.invars]
        known = all(type(x) is np.ndarray for x in ins)
        if name == "program_id":
            env[e.outvars[0]] = program_id if isinstance(program_id, Opaque) else np.atleast_1d(program_id)
        elif name == "iota":
            p = e.params
            shape = tuple(p["shape"])
            view = [1] * len(shape)
            view[p["dimension"]] = shape[p["dimension"]]
            env[e.outvars[0]] = np.broadcast_to(np.arange(shape[p["dimension"]]).reshape(view), shape)[None]
        elif name in _NUMERIC and known:
            rank = max(x.ndim for x in ins)  # a per-lane scalar meets a per-lane array
            env[e.outvars[0]] = _NUMERIC[name](*(x.reshape(x.shape + (1,) * (rank - x.ndim)) for x in ins))
        elif name in ("broadcast_to", "broadcast_in_dim") and known and ins[0].ndim == 1:
            env[e.outvars[0]] = np.broadcast_to(ins[0].reshape((-1,) + (1,) * len(e.params["shape"])),
                                                (ins[0].shape[0], *e.params["shape"]))
        elif name == "convert_element_type" and known:
            env[e.outvars[0]] = ins[0]
        if name not in ACCESS_PRIMS:
            continue
        ref_aval = e.invars[0].aval
        if name == "get":
            transforms, mask = e.params["tree"].unflatten(ins[1:]), None
        elif name in ("swap", "addupdate"):
            transforms, mask = e.params["tree"].unflatten(ins[2:]), None
        elif name == "masked_load":
            _, transforms, mask, _ = e.params["args_tree"].unflatten(ins)
        else:
            _, transforms, _, mask = e.params["args_tree"].unflatten(ins)
        views.append(View(name, tuple(ref_aval.shape), ref_aval.dtype, tuple(transforms), mask))
        out = e.outvars[0] if e.outvars else None
        if name == "get" and out is not None and out.aval.shape == () and out.aval.dtype == jnp.int32:
            nxt = next(smem, None)
            env[out] = np.atleast_1d(np.asarray(nxt)) if nxt is not None else Opaque("a value loaded from a ref")
    return views


VMEM = pltpu.VMEM
SMEM = pltpu.SMEM
F32_32x128 = ((32, 128), jnp.float32, VMEM)
OUT = ((32, 128), jnp.float32)


def boxes(regions: tuple[Region | None, ...]) -> list[Any]:
    return [None if r is None else r.box for r in regions]


# --- whole refs, slices, integer indices ---------------------------------------------


def test_whole_ref_read_and_write_are_the_full_box():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    load, store = trace_views(kernel, [F32_32x128], OUT)
    assert (load.prim, store.prim) == ("get", "swap")
    for v in (load, store):
        r = v.region()
        assert r == Region(((0, 32), (0, 128)))
        assert r.exact and r.why == ""


def test_pl_ds_with_a_per_lane_start():
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(i * 8, 8), pl.ds(0, 32)] = x_ref[pl.ds(i * 8, 8), pl.ds(16, 32)]

    load, store = trace_views(kernel, [F32_32x128], OUT, program_id=np.array([0, 1, 3, 1]))
    assert boxes(load.regions()) == [((0, 8), (16, 48)), ((8, 16), (16, 48)), ((24, 32), (16, 48)),
                                     ((8, 16), (16, 48))]
    regions = store.regions()
    assert all(r.exact for r in regions)
    assert regions[1] is regions[3]  # equal regions are one object


def test_integer_indices_drop_dims_but_keep_their_element():
    def kernel(x_ref, o_ref):
        o_ref[3, pl.ds(0, 4)] = x_ref[2, pl.ds(1, 4)]
        o_ref[pl.ds(0, 4), 0] = x_ref[pl.ds(4, 4), 127]

    a, b, c, d = trace_views(kernel, [F32_32x128], OUT)
    assert a.region().box == ((2, 3), (1, 5))
    assert b.region().box == ((3, 4), (0, 4))
    assert c.region().box == ((4, 8), (127, 128))
    assert d.region().box == ((0, 4), (0, 1))
    assert all(v.region().exact for v in (a, b, c, d))


def test_nested_at_views_compose():
    def kernel(x_ref, o_ref):
        o_ref[pl.ds(0, 4), pl.ds(0, 64)] = x_ref.at[pl.ds(8, 16)].at[pl.ds(2, 4), pl.ds(32, 64)][...]
        o_ref[0, pl.ds(0, 4)] = x_ref.at[5][pl.ds(1, 4)]

    a, _, c, _ = trace_views(kernel, [F32_32x128], OUT)
    assert len(a.transforms) == 2
    assert a.region() == Region(((10, 14), (32, 96)))
    assert c.region() == Region(((5, 6), (1, 5)))


def test_composed_views_with_per_lane_values_at_both_levels():
    x = NDIndexer((Slice(np.array([0, 16]), 16, 1), Slice(0, 128, 1)), (32, 128), ())
    y = NDIndexer((Slice(np.array([2, 4]), 4, 1), Slice(np.array([8]), 8, 1)), (16, 128), ())
    assert boxes(ref_regions((32, 128), (x, y))) == [((2, 6), (8, 16)), ((20, 24), (8, 16))]


def test_a_scalar_buffer_is_the_empty_box():
    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * s_ref[...]

    _, s, _ = trace_views(kernel, [((), jnp.float32, SMEM), F32_32x128], OUT)
    assert s.shape == ()
    assert s.region() == Region(())


def test_size_zero_slice_touches_nothing():
    idx = NDIndexer((Slice(3, 0, 1), Slice(0, 128, 1)), (32, 128), ())
    assert ref_regions((32, 128), (idx,)) == (None,)


# --- widening -------------------------------------------------------------------------


@pytest.mark.rule("ACC-16")
def test_a_stride_is_exactly_its_elements():
    def kernel(x_ref, o_ref):
        o_ref[4, pl.ds(0, 64)] = x_ref[1, ::2]
        o_ref[5, pl.ds(0, 1)] = x_ref[1, pl.ds(7, 1, stride=4)]

    strided, _, single, _ = trace_views(kernel, [F32_32x128], OUT)
    r = strided.region()
    assert r.box == ((1, 2), (0, 127)) and r.exact
    assert r.parts == tuple(((1, 2), (c, c + 1)) for c in range(0, 128, 2))
    assert single.region() == Region(((1, 2), (7, 8)))  # one element: a stride does not matter


def test_an_index_loaded_from_smem_is_exact_when_known_and_whole_dim_when_not():
    def kernel(s_ref, x_ref, o_ref):
        idx = s_ref[0]
        o_ref[idx] = x_ref[idx]

    views = trace_views(kernel, [((4,), jnp.int32, SMEM), F32_32x128], OUT, smem_values=[np.array([1, 7])])
    smem, load, store = views
    assert smem.region() == Region(((0, 1),))  # the scalar read is an access too
    assert boxes(load.regions()) == [((1, 2), (0, 128)), ((7, 8), (0, 128))]

    (smem, load, store) = trace_views(kernel, [((4,), jnp.int32, SMEM), F32_32x128], OUT)
    r = load.region()
    assert r.box == ((0, 32), (0, 128))
    assert not r.exact
    assert "dim 0" in r.why and "a value loaded from a ref" in r.why


def test_an_unknown_slice_start_widens_only_its_dimension():
    def kernel(s_ref, x_ref, o_ref):
        o_ref[pl.ds(0, 8), pl.ds(0, 8)] = x_ref[pl.ds(s_ref[0], 8), pl.ds(16, 8)]

    _, load, _ = trace_views(kernel, [((4,), jnp.int32, SMEM), F32_32x128], OUT)
    r = load.region()
    assert r.box == ((0, 32), (16, 24))
    assert not r.exact and "dim 0: the slice start depends on a value loaded from a ref" in r.why


def test_an_out_of_bounds_index_widens_to_the_whole_dimension():
    idx = NDIndexer((Slice(np.array([0, 28]), 8, 1), np.array([3, 70])), (32, 64), ())
    ok, bad = ref_regions((32, 64), (idx,))
    assert ok == Region(((0, 8), (3, 4)))
    assert bad.box == ((0, 32), (0, 64)) and not bad.exact
    assert "out of bounds" in bad.why


def test_an_unevaluated_jax_variable_is_unknown_not_an_error():
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[pl.ds(0, 8), :] = x_ref[pl.ds(i * 8, 8), :]

    load, _ = trace_views(kernel, [F32_32x128], OUT, program_id=Opaque("program_id"))
    r = load.region()
    assert r.box == ((0, 32), (0, 128)) and not r.exact


# --- masks ------------------------------------------------------------------------------


def test_a_known_mask_bounds_the_region():
    def kernel(x_ref, o_ref):
        m = jnp.arange(128) < 5
        v = pltpu.load(x_ref.at[0, pl.ds(0, 128)], mask=m)
        pltpu.store(o_ref.at[2, pl.ds(0, 128)], v, mask=m)

    load, store = trace_views(kernel, [F32_32x128], OUT)
    assert (load.prim, store.prim) == ("masked_load", "masked_swap")
    assert load.region() == Region(((0, 1), (0, 5)))  # a prefix mask is exact
    assert store.region() == Region(((2, 3), (0, 5)))


@pytest.mark.rule("ACC-16")
def test_a_mask_with_holes_is_exactly_its_true_elements():
    def kernel(x_ref, o_ref):
        i = jnp.arange(128)
        m = (i > 3) & (i < 9) & (i != 6)
        pltpu.store(o_ref.at[0, pl.ds(0, 128)], x_ref[0, pl.ds(0, 128)], mask=m)

    _, store = trace_views(kernel, [F32_32x128], OUT)
    r = store.region()
    assert r.box == ((0, 1), (4, 9)) and r.exact
    assert r.parts == (((0, 1), (4, 6)), ((0, 1), (7, 9)))


def test_a_per_lane_mask_and_an_all_false_lane():
    def kernel(x_ref, o_ref):
        m = jnp.arange(128) < pl.program_id(0)
        pltpu.store(o_ref.at[1, pl.ds(0, 128)], x_ref[1, pl.ds(0, 128)], mask=m)

    _, store = trace_views(kernel, [F32_32x128], OUT, program_id=np.array([0, 3, 128]))
    assert boxes(store.regions()) == [None, ((1, 2), (0, 3)), ((1, 2), (0, 128))]


def test_an_unknown_mask_keeps_the_indexed_view():
    def kernel(s_ref, x_ref, o_ref):
        m = jnp.arange(128) < s_ref[0]
        pltpu.store(o_ref.at[6, pl.ds(0, 128)], x_ref[6, pl.ds(0, 128)], mask=m)

    _, _, store = trace_views(kernel, [((4,), jnp.int32, SMEM), F32_32x128], OUT)
    r = store.region()
    assert r.box == ((6, 7), (0, 128))
    assert not r.exact and "masked access" in r.why


# --- gathers -------------------------------------------------------------------------------


def test_a_gather_of_consecutive_indices_is_exact():
    def kernel(x_ref, o_ref):
        o_ref[pl.ds(0, 4), 0] = x_ref[jnp.arange(4) + 2, 0]

    load, _ = trace_views(kernel, [F32_32x128], OUT)
    assert load.region() == Region(((2, 6), (0, 1)))


@pytest.mark.rule("ACC-16")
def test_a_sparse_gather_is_exactly_its_rows():
    idx = NDIndexer((np.array([[0, 5, 2]]), Slice(0, 8, 1)), (16, 8), (3,))
    (r,) = ref_regions((16, 8), (idx,))
    assert r.box == ((0, 6), (0, 8)) and r.exact
    assert r.parts == (((0, 1), (0, 8)), ((2, 3), (0, 8)), ((5, 6), (0, 8)))


@pytest.mark.rule("ACC-16")
def test_a_two_dimensional_gather_on_a_diagonal_is_its_elements():
    diag = np.arange(4)[None]
    idx = NDIndexer((diag, diag), (8, 8), (4,))
    (r,) = ref_regions((8, 8), (idx,))
    assert r.box == ((0, 4), (0, 4)) and r.exact
    assert r.parts == tuple(((k, k + 1), (k, k + 1)) for k in range(4))


def test_an_unknown_gather_index_widens_its_dimension():
    idx = NDIndexer((Opaque("vector data"), Slice(2, 3, 1)), (16, 8), (5,))
    (r,) = ref_regions((16, 8), (idx,))
    assert r.box == ((0, 16), (2, 5)) and not r.exact and "vector data" in r.why


# --- transposes, reshapes, bitcasts, unknown transforms --------------------------------------


def test_transposed_views_map_back_to_buffer_dims():
    def kernel(x_ref, o_ref):
        o_ref.T[pl.ds(0, 4), :] = x_ref.T[pl.ds(8, 4), pl.ds(0, 32)]

    load, store = trace_views(kernel, [F32_32x128], OUT)
    assert load.region() == Region(((0, 32), (8, 12)))
    assert store.region() == Region(((0, 32), (0, 4)))


def test_a_reshape_of_a_contiguous_part_is_exact():
    def kernel(x_ref, o_ref):
        o_ref[7] = x_ref.reshape(4, 8, 128)[1, 2]
        o_ref[pl.ds(8, 8), :] = x_ref.reshape(4, 8, 128)[2]

    a, _, b, _ = trace_views(kernel, [F32_32x128], OUT)
    assert a.region() == Region(((10, 11), (0, 128)))
    assert b.region() == Region(((16, 24), (0, 128)))


@pytest.mark.rule("ACC-2")
def test_a_reshape_of_a_scattered_part_is_exactly_its_boxes():
    x = state_types.ReshapeTransform((4, 8, 128))
    idx = NDIndexer((Slice(0, 4, 1), 2, Slice(0, 128, 1)), (4, 8, 128), ())
    (r,) = ref_regions((32, 128), (x, idx))  # rows 2, 10, 18, 26
    assert r.box == ((2, 27), (0, 128)) and r.exact
    assert r.parts == tuple(((k, k + 1), (0, 128)) for k in (2, 10, 18, 26))
    row_3 = Region(((3, 4), (0, 128)))
    assert not r.overlaps(row_3) and not row_3.overlaps(r) and r.overlaps(Region(((10, 11), (5, 6))))


@pytest.mark.rule("ACC-16")
def test_a_reshape_of_a_part_of_many_boxes_is_exactly_its_boxes():
    x = state_types.ReshapeTransform((600, 2))
    idx = NDIndexer((Slice(0, 600, 1), 1), (600, 2), ())
    (r,) = ref_regions((1200,), (x, idx))  # every other element: 600 boxes
    assert r.box == ((1, 1200),) and r.exact and r.parts == tuple(((k, k + 1),) for k in range(1, 1200, 2))


def test_bitcasts_scale_the_second_minor_dimension():
    def kernel(x_ref, o_ref):
        o_ref.bitcast(jnp.int32)[8] = x_ref.bitcast(jnp.int32)[9]

    load, store = trace_views(kernel, [F32_32x128], OUT)
    assert load.region() == Region(((9, 10), (0, 128)))  # same width: element for element
    assert store.region() == Region(((8, 9), (0, 128)))

    wide = state_types.BitcastTransform(np.dtype(np.int32))
    row = NDIndexer((1, Slice(0, 128, 1)), (8, 128), ())
    assert ref_regions((32, 128), (wide, row), dtype=np.int8) == (Region(((4, 8), (0, 128))),)

    narrow = state_types.BitcastTransform(jnp.bfloat16)
    rows = NDIndexer((Slice(2, 4, 1), Slice(0, 128, 1)), (64, 128), ())
    assert ref_regions((32, 128), (narrow, rows), dtype=np.float32) == (Region(((1, 3), (0, 128))),)
    odd = NDIndexer((Slice(1, 2, 1), Slice(0, 128, 1)), (64, 128), ())
    (r,) = ref_regions((32, 128), (narrow, odd), dtype=np.float32)
    assert r.box == ((0, 2), (0, 128)) and not r.exact and "part of an element" in r.why


def test_a_bitcast_without_a_dtype_widens_above_it():
    narrow = state_types.BitcastTransform(jnp.bfloat16)
    rows = NDIndexer((Slice(2, 4, 1), Slice(0, 128, 1)), (64, 128), ())
    (r,) = ref_regions((32, 128), (narrow, rows))
    assert r.box == ((0, 32), (0, 128)) and not r.exact and "BitcastTransform" in r.why


@dataclasses.dataclass(frozen=True)
class StrangeTransform:
    """A transform semcheck has never heard of."""

    def transform_type(self, x: Any) -> Any:
        return x


def test_an_unknown_transform_costs_only_what_lies_above_it():
    row = NDIndexer((3, Slice(0, 128, 1)), (32, 128), ())
    cols = NDIndexer((Slice(0, 8, 1),), (128,), ())
    (r,) = ref_regions((32, 128), (row, StrangeTransform(), cols))
    assert r.box == ((3, 4), (0, 128)) and not r.exact and "StrangeTransform" in r.why
    (r,) = ref_regions((32, 128), (StrangeTransform(),))
    assert r == full_region((32, 128), why=r.why) and not r.exact


def test_garbage_never_raises():
    for transforms in [("not a transform",), (NDIndexer((Slice(0, 4, 1),), (4,), ()),), (None, 42)]:
        regions = ref_regions((32, 128), transforms)
        assert len(regions) == 1 and regions[0] is not None and not regions[0].exact
    (r,) = ref_regions((32, 128), (None,))
    assert r == Region(((0, 32), (0, 128)))


def test_identity_transforms_are_transparent():
    cast = state_types.MemorySpaceCastTransform(VMEM)
    idx = NDIndexer((Slice(4, 4, 1), Slice(0, 128, 1)), (32, 128), ())
    assert ref_regions((32, 128), (cast, idx)) == (Region(((4, 8), (0, 128))),)


# --- DMAs and sharing ---------------------------------------------------------------------------


def test_dma_source_and_destination_views():
    def kernel(x_hbm, o_ref, sem):
        i = pl.program_id(0)
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * 8, 8)], o_ref.at[pl.ds(8, 8), pl.ds(0, 128)], sem)
        copy.start()
        copy.wait()

    def f(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
            grid=(4,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=VMEM),
            scratch_shapes=[pltpu.SemaphoreType.DMA],
        )(x)

    closed = jax.make_jaxpr(f)(jax.ShapeDtypeStruct((32, 128), jnp.float32))
    (call,) = [e for e in closed.eqns if e.primitive.name == "pallas_call"]
    jaxpr = call.params["jaxpr"]
    env: dict[Any, Any] = {}
    for e in jaxpr.eqns:
        if e.primitive.name == "program_id":
            env[e.outvars[0]] = np.array([0, 2])
        elif e.primitive.name == "mul":
            a, b = (np.asarray(v.val)[None] if isinstance(v, jax_core.Literal) else env[v] for v in e.invars)
            env[e.outvars[0]] = a * b
        elif e.primitive.name == "dma_start":
            vals = [np.asarray(v.val)[None] if isinstance(v, jax_core.Literal) else env.get(v, v)
                    for v in e.invars]
            src, dst, *_ = e.params["tree"].unflatten(vals)
            src_base, src_chain = flatten_ref(src)
            dst_base, dst_chain = flatten_ref(dst)
            assert src_base is vals[0]
            assert boxes(ref_regions((32, 128), src_chain)) == [((0, 8), (0, 128)), ((16, 24), (0, 128))]
            assert ref_regions((32, 128), dst_chain) == (Region(((8, 16), (0, 128))),)
            break
    else:
        pytest.fail("no dma_start")


def test_flatten_ref_joins_nested_views():
    inner = state_types.TransformedRef("buf", (NDIndexer((Slice(8, 16, 1),), (32,), ()),))
    outer = state_types.TransformedRef(inner, (NDIndexer((Slice(2, 4, 1),), (16,), ()),))
    base, chain = flatten_ref(outer, (None,))
    assert base == "buf" and len(chain) == 2
    assert ref_regions((32,), chain) == (Region(((10, 14),)),)


def test_regions_are_interned():
    cache = RegionCache()
    idx = NDIndexer((Slice(np.array([0, 8, 0, 8]), 8, 1),), (16,), ())
    a = ref_regions((16,), (idx,), cache=cache)
    b = ref_regions((16,), (idx,), cache=cache)
    assert len(cache) == 2
    assert a[0] is a[2] is b[0] and a[1] is b[3]
    # lanes that agree collapse to one entry
    same = NDIndexer((Slice(np.array([4, 4, 4]), 8, 1),), (16,), ())
    assert len(ref_regions((16,), (same,), cache=cache)) == 1


def test_lane_keys_identify_regions_per_lane():
    from semcheck.checker.frontend.regions import lane_keys

    assert lane_keys([np.array([3]), 5], 4) == [(3, 5)]
    assert lane_keys([np.array([0, 8, 0, 8])], 4) == [0, 8, 0, 8]
    assert lane_keys([np.array([0, 8]), np.array([1]), 7], 2) == [(0, 1, 7), (8, 1, 7)]
    assert lane_keys([np.array([[1, 2]])], 2) is None  # an array index: no cheap key
    assert lane_keys([Opaque("data")], 2) is None
    assert lane_keys([], 3) == [()]


# --- the lowering emits them ---------------------------------------------------------------------

_LOWER = r"""
import json, sys
from semcheck.checker import frontend
from semcheck.checker.frontend.grid_copies import grid_copy_of
from semcheck.model.ops import Access, AllocBuffer, DmaStart
out = []
for k in frontend.load(sys.argv[1], devices=int(sys.argv[2]), dma_mode="hardware"):
    for ops in k.program.cores:
        bufs = [op.label for op in ops if isinstance(op, AllocBuffer)]
        core = []
        for op in ops:
            grid = grid_copy_of(op)
            if grid is not None:  # GRID-1: the pipeline's copy-in ("GI") or write-back ("GO")
                core.append(["G" + grid.kind[0].upper(), op.buf, op.region.box, op.write, grid.step])
            elif isinstance(op, Access):
                core.append(["W" if op.write else "R", op.buf, op.region.box, op.region.exact, op.loc.line])
            elif isinstance(op, DmaStart):
                core.append(["DMA", op.src_buf, op.src_region and op.src_region.box, op.dst_buf,
                             op.dst_region and op.dst_region.box, op.device])
        out.append({"buffers": bufs, "ops": core})
print("@@REGIONS@@" + json.dumps(out))
"""


def _lower(spec: str, devices: int) -> list[dict[str, Any]]:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", _LOWER, str(repo / spec), str(devices)], env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@REGIONS@@")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[0][len("@@REGIONS@@"):])


def _t(x: Any) -> Any:
    return tuple(_t(y) for y in x) if isinstance(x, list) else x


def test_lowering_emits_accesses_and_dma_regions_of_the_ring_allreduce():
    cores = _lower("examples/ring_allreduce.py", 4)
    rows = lambda c: ((8 * c, 8 * c + 8), (0, 128))  # noqa: E731
    for me, core in enumerate(cores):
        # the kernel's refs name buffers the launch allocates
        assert {"x_ref", "acc_ref", "landing"} <= set(core["buffers"])
        ops = [_t(op) for op in core["ops"]]
        # the grid's copy-in of the whole x block before its one step, and the write-back of o after it (GRID-1)
        assert ops[:2] == [("GI", "hbm0", ((0, 32), (0, 128)), False, 0), ("GI", "x_ref", ((0, 32), (0, 128)), True, 0)]
        # after the cores, each device's read of its result (PRG-120)
        assert ops[-1][:3] == ("R", "hbm1", ((0, 32), (0, 128)))
        ops = ops[:-1]
        assert [op[0] for op in ops[-2:]] == ["GO", "GO"] and ops[-1][1:4] == ("hbm1", ((0, 32), (0, 128)), True)
        ops = [op for op in ops if not op[0].startswith("G")]
        # step 0: acc_ref[...] = x_ref[...], whole buffers
        assert ops[0] == ("R", "x_ref", ((0, 32), (0, 128)), True, ops[0][4])
        assert ops[1][:4] == ("W", "acc_ref", ((0, 32), (0, 128)), True)
        dmas = [op for op in ops if op[0] == "DMA"]
        assert len(dmas) == 2 * (4 - 1)
        for s, op in enumerate(dmas[:3]):  # reduce-scatter: my chunk (me - s) into the right's landing
            assert op == ("DMA", "acc_ref", rows((me - s) % 4), "landing", ((0, 8), (0, 128)), (me + 1) % 4)
        for t, op in enumerate(dmas[3:]):  # all-gather: chunk (me + 1 - t) into the same chunk
            c = (me + 1 - t) % 4
            assert op == ("DMA", "acc_ref", rows(c), "acc_ref", rows(c), (me + 1) % 4)
        adds = [op for op in ops if op[0] in "RW" and op[1] in ("acc_ref", "landing")][1:]
        assert len(adds) == 3 * 3  # acc[chunk] += landing[...]: read acc, read landing, write acc
        for s in range(3):
            c = rows((me - s - 1) % 4)
            assert [op[:4] for op in adds[3 * s: 3 * s + 3]] == [
                ("R", "acc_ref", c, True), ("R", "landing", ((0, 8), (0, 128)), True), ("W", "acc_ref", c, True)]


def test_hbm_operands_name_the_launch_buffers():
    cores = _lower("examples/ring_allgather.py", 2)
    for core in cores:
        assert core["buffers"][:2] == ["hbm0", "hbm1"]
        dmas = [op for op in core["ops"] if op[0] == "DMA"]
        assert dmas and all(op[1] in ("hbm0", "hbm1") and op[3] in ("hbm0", "hbm1") for op in dmas)


def test_emit_pipeline_copies_and_scoped_buffers_carry_regions():
    (core, *_) = _lower("examples/emit_pipeline.py", 2)
    ops = [_t(op) for op in core["ops"]]
    assert ops[:2] == [("GI", "hbm0", ((0, 1),), False, 0), ("GI", "scale_ref", ((0, 1),), True, 0)]  # SMEM too
    ops = [op for op in ops if not op[0].startswith("G")]
    assert ops[0][:3] == ("R", "scale_ref", ((0, 1),))  # the SMEM scalar read is an access too
    dmas = [op for op in ops if op[0] == "DMA"]
    assert dmas and all(op[2] is not None and op[4] is not None for op in dmas)
    allocated = set(core["buffers"])
    for op in dmas:
        assert op[1] in allocated and op[3] in allocated
    # the pipeline's fetches walk row blocks of this grid step's column panel of the HBM inputs
    fetched = [op[2] for op in dmas if op[1] == "hbm1"]
    assert fetched[:2] == [((0, 8), (0, 128)), ((8, 16), (0, 128))]
    # ... into the two slots of a scoped double buffer, which the body then reads
    slots = {op[4] for op in dmas if op[1] == "hbm1"}
    assert slots == {((0, 1), (0, 8), (0, 128)), ((1, 2), (0, 8), (0, 128))}
    body_reads = {op[2] for op in ops if op[0] == "R" and op[1].startswith("buf@")}
    assert body_reads <= slots | {((0, 1), (0, 8), (0, 128)), ((1, 2), (0, 8), (0, 128))}

    (core, *_) = _lower("examples/scoped_semaphores.py", 2)
    scoped = [b for b in core["buffers"] if b.startswith("buf@")]
    copies = [_t(op) for op in core["ops"] if op[0] == "DMA"]
    assert [op[3] for op in copies] == scoped  # a fresh run_scoped buffer per step, by its label
    assert [op[2] for op in copies] == [((8 * s, 8 * s + 8), (0, 128)) for s in range(len(copies))]
