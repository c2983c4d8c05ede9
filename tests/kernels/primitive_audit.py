"""Minimal kernels that use every primitive semcheck's front end has a rule for (LAUNCH-3's audit).

`KERNELS[name]()` returns `(fn, args)`: a `pallas_call` in interpret mode (eager DMAs) whose
kernel uses the primitives `USES[name]` lists, each one's value used (pallas drops an unused pure
equation when it traces the kernel, so an unused one would audit nothing).
`tests/test_primitive_audit.py` pins what interpret mode does with each kernel.

As a script, it runs the kernels named on the command line (all when none) in this one process
and prints one JSON line per kernel: `{"kernel": ..., "outcome": "runs" | "raises", "error": ...}`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# The primitives each kernel exercises (by name, as the front end's rule tables key them).
USES: dict[str, tuple[str, ...]] = {
    "numeric": (
        "add", "sub", "mul", "div", "rem", "max", "min", "pow", "and", "or", "xor", "eq", "ne", "lt", "le",
        "gt", "ge", "nextafter", "atan2", "shift_left", "shift_right_logical", "shift_right_arithmetic", "neg",
        "sign", "abs", "not", "floor", "ceil", "round", "sqrt", "exp", "log", "tanh", "logistic", "population_count",
        "integer_pow", "select_n", "clamp", "convert_element_type", "broadcast_in_dim", "reshape", "squeeze",
        "transpose", "iota", "slice", "dynamic_slice", "concatenate", "stack", "reduce_sum", "reduce_max", "reduce_min",
        "reduce_prod", "reduce_and", "reduce_or", "argmax", "argmin", "top_k", "copy", "multiple_of",
        "optimization_barrier", "stop_gradient",
    ),
    "access": ("get", "swap", "masked_load", "masked_swap", "program_id", "num_programs"),
    "addupdate": ("addupdate",),
    "control": ("cond", "while", "scan", "jit", "custom_jvp_call", "custom_vjp_call", "eval_jaxpr", "remat2"),
    "mesh": ("axis_index", "pvary"),
    "sync": ("get_barrier_semaphore", "semaphore_signal", "semaphore_wait", "dma_start", "dma_wait",
             "run_scoped"),
    "semaphore_read": ("semaphore_read",),
    "pipeline": ("emit_pipeline", "pipeline_body"),
    # no rule of their own: the front end's fallback takes them as opaque values
    "opaque": ("roll", "bitcast", "dot_general", "exp2", "erf", "cumsum", "sort"),
}


def _params() -> Any:
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.InterpretParams(dma_execution_mode="eager")


def _smem_call(kernel: Callable[..., None], n_out: int, inputs: tuple[Any, ...], **kw: Any) -> Any:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((n_out,), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM) for _ in inputs],
                          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=_params(), **kw)


def numeric() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl

    def kernel(i_ref, f_ref, o_ref):
        a, b = i_ref[0], i_ref[1]
        x, y = f_ref[0], f_ref[1]
        v = lax.broadcast_in_dim(a, (2, 4), ())
        w = lax.iota(jnp.int32, 8).reshape(2, 4)
        m = lax.transpose(v + w, (1, 0))
        col = lax.squeeze(lax.slice(m, (0, 0), (4, 1)), (1,))
        results = [
            a + b, a - b, a * b, lax.div(a, b), lax.rem(a, b), lax.max(a, b), lax.min(a, b), lax.pow(x, y),
            a & b, a | b, a ^ b, a == b, a != b, a < b, a <= b, a > b, a >= b, lax.nextafter(x, y),
            lax.atan2(x, y), lax.shift_left(a, b), lax.shift_right_logical(a, b),
            lax.shift_right_arithmetic(a, b), -a, lax.sign(a), lax.abs(a), ~a, lax.floor(x), lax.ceil(x),
            lax.round(x), lax.sqrt(x), lax.exp(x), lax.log(x), lax.tanh(x), lax.logistic(x), lax.population_count(a), lax.integer_pow(a, 3),
            lax.select_n(a > b, a, b), lax.clamp(0, a, 5), lax.convert_element_type(a, jnp.float32),
            lax.dynamic_slice(col, (b,), (2,)), lax.concatenate([col, col], 0), jnp.stack([a, b]), jnp.sum(m), jnp.max(m),
            jnp.min(m), jnp.prod(col), jnp.all(m > 0), jnp.any(m > 0), jnp.argmax(col), jnp.argmin(col),
            lax.top_k(col, 2)[1], jnp.copy(a), pl.multiple_of(a * 8, 8), lax.optimization_barrier(a), lax.stop_gradient(x),
        ]
        for k, r in enumerate(results):
            o_ref[k] = jnp.sum(jnp.asarray(r).astype(jnp.float32))

    ints = jax.numpy.array([7, 2], jax.numpy.int32)
    floats = jax.numpy.array([2.5, 1.5], jax.numpy.float32)
    return _smem_call(kernel, 56, (ints, floats)), (ints, floats)


def access() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax._src.pallas import primitives as pallas_prims
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        n = pl.num_programs(0)
        o_ref[...] = x_ref[...] + (i + n).astype(jnp.float32)  # get, swap
        whole = (slice(0, 8), slice(0, 128))
        pallas_prims.store(o_ref, whole, pallas_prims.load(x_ref, whole) * 2.0)  # masked_load, masked_swap

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    x = jnp.ones((16, 128), jnp.float32)

    @jax.jit
    def fn(steps, x):  # a grid bound known at run time only: num_programs stays a primitive
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(steps,),
                              in_specs=[spec], out_specs=spec, interpret=_params())(x)

    return fn, (jnp.int32(2), x)


def addupdate() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax._src.state import primitives as state_prims

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        state_prims.ref_addupdate(o_ref, (), x_ref[...])

    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM), interpret=_params())
    return call, (x,)


def control() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax._src import core as jax_core

    @jax.custom_vjp
    def twice(v):
        return v * 2

    twice.defvjp(lambda v: (v * 2, None), lambda _, g: (g * 2,))
    inner = jax.make_jaxpr(lambda v: v + 3)(1)

    def kernel(i_ref, o_ref):
        a = i_ref[0]
        r = lax.cond(a > 0, lambda v: v + 1, lambda v: v - 1, a)
        r = lax.while_loop(lambda v: v < 20, lambda v: v + 3, r)
        r = lax.fori_loop(0, 4, lambda k, v: v + k, r)  # a scan: static bounds
        r = jax.jit(lambda v: v * 2)(r)
        r = jax.nn.relu(r)  # custom_jvp_call
        r = twice(r)  # custom_vjp_call
        (r,) = jax_core.closed_call_p.bind(r, call_jaxpr=inner)  # eval_jaxpr
        r = jax.checkpoint(lambda v: v + 1)(r)  # remat2
        o_ref[0] = r.astype(jnp.float32)

    ints = jnp.array([3], jnp.int32)
    return _smem_call(kernel, 1, (ints,)), (ints,)


def mesh() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import PartitionSpec as P

    from jax._src import core as jax_core

    def kernel(i_ref, o_ref):
        d = jax.lax.axis_index("x")
        o_ref[0] = (jax_core.pvary_p.bind(i_ref[0], axes=("x",)) + d).astype(jnp.float32)

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=_params())
    m = jax.make_mesh((1,), ("x",))

    fn = jax.jit(jax.shard_map(call, mesh=m, in_specs=P(), out_specs=P("x"), check_vma=False))
    return fn, (jnp.array([4], jnp.int32),)


def sync() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, sem):
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1)
        pl.semaphore_wait(barrier, 1)

        def scoped(buf, dsem):
            copy = pltpu.make_async_copy(x_ref, buf, dsem)
            copy.start()
            copy.wait()
            o_ref[...] = buf[...] + 1.0

        pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA)
        pl.semaphore_signal(sem, 2)
        pl.semaphore_wait(sem, 2)

    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                          compiler_params=pltpu.CompilerParams(collective_id=0), interpret=_params())
    return call, (x,)


def opaque() -> tuple[Any, tuple[Any, ...]]:
    """Vector compute kernels use, which the front end has no rule for (its fallback's opaque values)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref):
        v = x_ref[...]
        r = pltpu.roll(v, 1, 1) + pltpu.bitcast(v, jnp.int32).astype(jnp.float32)
        r = r + jnp.dot(v, v.T)[:, :1] + jnp.exp2(v) + jax.lax.erf(v)
        o_ref[...] = r + jnp.cumsum(v, axis=1) + jnp.sort(v, axis=1)

    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM), interpret=_params())
    return call, (x,)


def semaphore_read() -> tuple[Any, tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, n_ref, sem):  # jax's test_can_read_dma_semaphore, in short
        copy = pltpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        n_ref[0] = pl.semaphore_read(sem)
        copy.wait()

    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.float32),
                                             jax.ShapeDtypeStruct((1,), jnp.int32)),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)),
                          scratch_shapes=[pltpu.SemaphoreType.DMA], interpret=_params())
    return call, (x,)


def pipeline() -> tuple[Any, tuple[Any, ...]]:
    """The repository's emit_pipeline example on one device, traced with jax's pipeline primitives
    (`jax_use_emit_pipeline_primitive`; without it the pipeline is expanded as it is traced)."""
    from jax._src import config

    spec = importlib.util.spec_from_file_location("audit_emit_pipeline", ROOT / "examples" / "emit_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn, args = module.build(1, dma_mode="eager")

    def with_primitives(*a: Any) -> Any:
        with config.use_emit_pipeline_primitive(True):
            return fn(*a)

    return with_primitives, args


def context(name: str) -> Any:
    """The context kernel `name` is expanded in outside its own trace: a pipeline's expansion asks the
    TPU it targets, which the pipeline example names with an abstract mesh."""
    import contextlib

    import jax

    if name != "pipeline":
        return contextlib.nullcontext()
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=jax.sharding.AbstractDevice(
        device_kind="TPU v5 lite", num_cores=1, platform="tpu"))
    return jax.sharding.use_abstract_mesh(mesh)


KERNELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "numeric": numeric, "access": access, "addupdate": addupdate, "control": control, "mesh": mesh,
    "sync": sync, "semaphore_read": semaphore_read, "pipeline": pipeline, "opaque": opaque,
}
assert set(KERNELS) == set(USES)


def run(name: str) -> dict[str, Any]:
    """Run kernel `name` once in interpret mode: what happened."""
    import jax

    fn, args = KERNELS[name]()
    try:
        jax.block_until_ready(fn(*args))
    except Exception as e:  # the outcome being recorded
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"kernel": name, "outcome": "raises", "error": f"{type(e).__name__}: {first}"}
    return {"kernel": name, "outcome": "runs", "error": None}


def main(argv: list[str]) -> int:
    for name in argv or list(KERNELS):
        print(json.dumps(run(name)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
