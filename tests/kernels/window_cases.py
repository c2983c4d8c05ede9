"""Kernels that load, store or copy one window of a buffer, for the table of jax's interpreter bounds
checks (tests/kernels/make_window_bounds.py, window_bounds.json; specs/semantics/accesses.md ACC-10, ERR-20).

Every case is one pallas_call on one device with a grid of one step: `k = pl.program_id(0)` is 0 but
not known while the kernel is traced, so `k + s` is a start the interpreter sees only when it runs
(a static start past an end is refused while tracing instead, `static_*`). The buffer is (3, 128)
(a dimension of 3 rows), or (2, 3, 128) for the squeezed cases; `x` is the input (HBM, or VMEM when
the case says so), `buf` a (3, 128) VMEM scratch, `s` a (3,) int32 SMEM scratch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

ROWS, LANES = 3, 128


def _copy(src, dst, sem):
    c = pltpu.make_async_copy(src, dst, sem)
    c.start()
    c.wait()


def _store_rows(ref, view_of):
    view = view_of(ref)
    view[...] = jnp.zeros(view.shape, view.dtype)


# name -> (what, input space, body(x, buf, s, sem, k)); "what" is the access whose window is tested
CASES = {
    # a copy's source window along a dimension of 3
    "copy_src_zero_at_start": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k, 0)], b.at[pl.ds(0, 0)], m)),
    "copy_src_zero_in_middle": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 1, 0)], b.at[pl.ds(0, 0)], m)),
    "copy_src_zero_at_end": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 3, 0)], b.at[pl.ds(0, 0)], m)),
    "copy_src_zero_past_end": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 4, 0)], b.at[pl.ds(0, 0)], m)),
    "copy_src_last_row": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 2, 1)], b.at[pl.ds(0, 1)], m)),
    "copy_src_one_past_end": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 3, 1)], b.at[pl.ds(0, 1)], m)),
    "copy_src_overhang": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 2, 2)], b.at[pl.ds(0, 2)], m)),
    "copy_src_strided_inside": ("copy", "hbm",
                                lambda x, b, s, m, k: _copy(x.at[pl.ds(k, 2, stride=2)], b.at[pl.ds(0, 2)], m)),
    "copy_src_strided_past_end": ("copy", "hbm",
                                  lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 1, 2, stride=2)], b.at[pl.ds(0, 2)], m)),
    "copy_src_nested_zero_at_end": ("copy", "hbm",
                                    lambda x, b, s, m, k: _copy(x.at[pl.ds(1, 2)].at[pl.ds(k + 2, 0)],
                                                                b.at[pl.ds(0, 0)], m)),
    "copy_src_vmem_zero_at_end": ("copy", "vmem", lambda x, b, s, m, k: _copy(x.at[pl.ds(k + 3, 0)], b.at[pl.ds(0, 0)], m)),
    # a copy's destination window
    "copy_dst_zero_at_end": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(0, 0)], b.at[pl.ds(k + 3, 0)], m)),
    "copy_dst_overhang": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(0, 2)], b.at[pl.ds(k + 2, 2)], m)),
    "copy_dst_one_past_end": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(0, 1)], b.at[pl.ds(k + 3, 1)], m)),
    # squeezed (integer-indexed) dimensions of a (2, 3, 128) source
    "copy_src_squeezed_inside": ("copy", "hbm3", lambda x, b, s, m, k: _copy(x.at[k + 1], b, m)),
    "copy_src_squeezed_past_end": ("copy", "hbm3", lambda x, b, s, m, k: _copy(x.at[k + 2], b, m)),
    "copy_src_squeezed_zero_at_end": ("copy", "hbm3",
                                      lambda x, b, s, m, k: _copy(x.at[k + 1, pl.ds(k + 3, 0)], b.at[pl.ds(0, 0)], m)),
    # kernel loads and stores of a VMEM ref
    "load_zero_in_middle": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__(
        (pl.ds(0, 1),), x[pl.ds(k + 1, 0), :].sum(axis=0, keepdims=True))),
    "load_zero_at_end": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__(
        (pl.ds(0, 1),), x[pl.ds(k + 3, 0), :].sum(axis=0, keepdims=True))),
    "load_overhang": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__((pl.ds(0, 2),), x[pl.ds(k + 2, 2), :])),
    "load_nested_zero_at_end": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__(
        (pl.ds(0, 1),), x.at[pl.ds(1, 2)][pl.ds(k + 2, 0), :].sum(axis=0, keepdims=True))),
    "load_nested_view_start_at_end": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__(
        (pl.ds(0, 1),), x.at[pl.ds(k + 3, 0)][...].sum(axis=0, keepdims=True))),
    "store_zero_at_end": ("store", "vmem", lambda x, b, s, m, k: _store_rows(b, lambda r: r.at[pl.ds(k + 3, 0)])),
    "store_overhang": ("store", "vmem", lambda x, b, s, m, k: _store_rows(b, lambda r: r.at[pl.ds(k + 2, 2)])),
    "store_last_row": ("store", "vmem", lambda x, b, s, m, k: _store_rows(b, lambda r: r.at[pl.ds(k + 2, 1)])),
    # SMEM scalars
    "smem_load_inside": ("load", "hbm", lambda x, b, s, m, k: s.__setitem__(0, s[k + 2])),
    "smem_load_past_end": ("load", "hbm", lambda x, b, s, m, k: s.__setitem__(0, s[k + 3])),
    "smem_store_past_end": ("store", "hbm", lambda x, b, s, m, k: s.__setitem__(k + 3, jnp.int32(1))),
    # negative starts and indices: the manager reads as numpy does (from the end) and asserts at a write
    "copy_src_negative_inside": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(k - 2, 1)], b.at[pl.ds(0, 1)], m)),
    "copy_src_negative_to_start": ("copy", "hbm",
                                   lambda x, b, s, m, k: _copy(x.at[pl.ds(k - 1, 1)], b.at[pl.ds(0, 1)], m)),
    "copy_src_negative_before_start": ("copy", "hbm",
                                       lambda x, b, s, m, k: _copy(x.at[pl.ds(k - 4, 1)], b.at[pl.ds(0, 1)], m)),
    "copy_dst_negative_inside": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(0, 1)], b.at[pl.ds(k - 2, 1)], m)),
    "copy_src_squeezed_negative": ("copy", "hbm3", lambda x, b, s, m, k: _copy(x.at[k - 1], b, m)),
    "copy_src_squeezed_negative_past_start": ("copy", "hbm3", lambda x, b, s, m, k: _copy(x.at[k - 3], b, m)),
    "load_negative_inside": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__((pl.ds(0, 1),), x[pl.ds(k - 2, 1), :])),
    "load_negative_overhang": ("load", "vmem", lambda x, b, s, m, k: b.__setitem__((pl.ds(0, 2),), x[pl.ds(k - 1, 2), :])),
    "store_negative_inside": ("store", "vmem", lambda x, b, s, m, k: _store_rows(b, lambda r: r.at[pl.ds(k - 2, 1)])),
    "store_negative_to_start": ("store", "vmem", lambda x, b, s, m, k: _store_rows(b, lambda r: r.at[pl.ds(k - 1, 1)])),
    "smem_load_negative": ("load", "hbm", lambda x, b, s, m, k: s.__setitem__(0, s[k - 1])),
    "smem_load_negative_past_start": ("load", "hbm", lambda x, b, s, m, k: s.__setitem__(0, s[k - 4])),
    "smem_store_negative": ("store", "hbm", lambda x, b, s, m, k: s.__setitem__(k - 1, jnp.int32(1))),
    # `pltpu.store`: a swap as `ref[...] = x` is, unmasked; masked, past the end, refused where the mask is true there
    "pstore_overhang": ("store", "vmem", lambda x, b, s, m, k: pltpu.store(
        b.at[pl.ds(k + 2, 2)], jnp.zeros((2, LANES), jnp.float32))),
    "pstore_inside": ("store", "vmem", lambda x, b, s, m, k: pltpu.store(
        b.at[pl.ds(k + 1, 2)], jnp.zeros((2, LANES), jnp.float32))),
    # a start known while tracing: jax refuses it there
    "static_copy_src_zero_at_end": ("copy", "hbm", lambda x, b, s, m, k: _copy(x.at[pl.ds(3, 0)], b.at[pl.ds(0, 0)], m)),
}


def build_case(name: str, *, dma_mode: str = "eager"):
    """(fn, args) of case `name` under `dma_mode`."""
    _, space, body = CASES[name]

    def kernel(x_ref, o_ref, buf, s_ref, sem):
        s_ref[0] = jnp.int32(0)
        s_ref[1] = jnp.int32(0)
        s_ref[2] = jnp.int32(0)
        body(x_ref, buf, s_ref, sem, pl.program_id(0))
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)

    shape = (2, ROWS, LANES) if space == "hbm3" else (ROWS, LANES)
    in_space = pltpu.VMEM if space == "vmem" else pl.ANY
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, LANES), jnp.float32),
        grid=(1,),
        in_specs=[pl.BlockSpec(memory_space=in_space)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SMEM((ROWS,), jnp.int32),
                        pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams(dma_execution_mode=dma_mode, detect_races=True),
    )
    return jax.jit(call), (jnp.arange(2 * ROWS * LANES if space == "hbm3" else ROWS * LANES,
                                      dtype=jnp.float32).reshape(shape),)
