"""Every ref transform class jax defines: lowered, or refused with the kernel's line (never a crash).

The classes are discovered from jax's state and pallas packages (every
subclass of `jax._src.state.types.Transform` in a module that imports), so a
transform added by a newer jax is walked too. Each one is put in front of the
views a real kernel's rules see: the source and destination of a DMA, the
awaited DMA's source, a signalled and an awaited semaphore, a load and a
store. The kernel is traced with `jax.make_jaxpr` (nothing runs); the probe
transform is inserted at the rule, innermost in the ref's chain, as
`x_ref.<transform>.at[...]` would put it. What must hold:

* the lowering ends in a program or in `Unsupported` with a kernel line:
  no other exception (the CLI's `internal-error`);
* the transforms whose meaning the front end knows (indexers, transposes,
  reshapes, bitcasts, memory-space casts, access assumptions) are lowered
  when they keep the view's shape;
* `SelectTransform` (`pl.select_ref`) is refused, naming `pl.select_ref`:
  jax's interpreter cannot run a DMA through it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax._src.state import types as state_types  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from semcheck.checker.frontend.errors import Unsupported  # noqa: E402
from semcheck.checker.frontend.lowerer import Lowerer  # noqa: E402
from semcheck.checker.frontend.trace import trace_kernels  # noqa: E402
from semcheck.checker.frontend.values import BufRef, SemArray  # noqa: E402

ROWS, LANES = 8, 128


def _transform_classes() -> list[type]:
    found: dict[str, type] = {}
    packages = ["jax._src.state", "jax._src.pallas"]
    for pkg_name in packages:
        pkg = importlib.import_module(pkg_name)
        names = [pkg_name] + [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg_name + ".")]
        for name in names:
            try:
                mod = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module needing a GPU toolchain, say
                continue
            for _, cls in inspect.getmembers(mod, inspect.isclass):
                if state_types.Transform in cls.__mro__[1:] and cls is not state_types.MultiRefTransform:
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[k] for k in sorted(found)]


CLASSES = _transform_classes()


def test_discovery_finds_the_transforms_the_front_end_knows() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"NDIndexer", "TransposeTransform", "ReshapeTransform", "BitcastTransform",
            "MemorySpaceCastTransform", "SelectTransform", "AccessAssumptionTransform"} <= names
    assert len(CLASSES) >= 10  # the GPU back end's transforms are walked too


def _instance(cls: type) -> Any:
    """A transform of `cls` that keeps an (8, 128) float32 view's shape where one can be made."""
    from jax._src.state.indexing import NDIndexer, Slice

    name = cls.__name__
    if cls is NDIndexer:
        return NDIndexer((Slice(0, ROWS), Slice(0, LANES)), (ROWS, LANES), (), validate=True)
    if name == "TransposeTransform":
        return cls((0, 1))
    if name == "ReshapeTransform":
        return cls((ROWS, LANES))
    if name == "BitcastTransform":
        return cls(jnp.dtype(jnp.float32))
    if name == "MemorySpaceCastTransform":
        return cls(pltpu.VMEM)
    if name == "SelectTransform":
        return cls(0)
    if name == "AccessAssumptionTransform":
        return cls(None)
    return object.__new__(cls)  # fields unset: whatever a rule reads of it is missing


KNOWN = {"NDIndexer", "TransposeTransform", "ReshapeTransform", "BitcastTransform",
         "MemorySpaceCastTransform", "AccessAssumptionTransform"}


def _kernel(x_ref, o_ref, buf, sems, dsem):
    pl.semaphore_signal(sems.at[0], 1)
    pl.semaphore_wait(sems.at[0], 1)
    pltpu.async_copy(x_ref.at[0:ROWS], buf.at[0:ROWS], dsem).wait()
    o_ref[0:ROWS] = buf[0:ROWS]


def _call():
    call = pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((ROWS, LANES), jnp.float32), pltpu.SemaphoreType.REGULAR((2,)),
                        pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams(),
    )
    (kc,) = trace_kernels(call, [jax.ShapeDtypeStruct((ROWS, LANES), jnp.float32)])
    return kc


@pytest.fixture(scope="module")
def kernel_call():
    return _call()


# (rule's primitive name, which operand gets the probe): the ref views a rule reads.
SITES = [
    ("dma_start", "src"),
    ("dma_start", "dst"),
    ("dma_start", "dst_sem"),
    ("dma_wait", "src"),
    ("dma_wait", "dst_sem"),
    ("semaphore_signal", "sem"),
    ("semaphore_wait", "sem"),
    ("get", "ref"),
    ("swap", "ref"),
]


def _probing_lowerer(kernel_call, prim_name: str, slot: str, probe: Any) -> Lowerer:
    from semcheck.checker.frontend.grid import grid_schedule, launch_operands

    lw = Lowerer(kernel_call, 1, 1)

    def wrap(rule):
        def probed(eqn, invals, mask):
            invals = list(invals)
            if prim_name in ("dma_start", "dma_wait"):
                tree = eqn.params["tree"]
                counts = [c.num_leaves for c in tree.children()]
                at = {"src": 0, "dst": counts[0], "dst_sem": counts[0] + counts[1]}[slot]
            elif prim_name.startswith("semaphore"):
                at = 0
            else:
                at = 0
            base = invals[at]
            assert isinstance(base, (BufRef, SemArray)), (prim_name, slot, base)
            if isinstance(probe, state_types.MultiRefTransform):  # as pl.select_ref builds it
                invals[at] = state_types.TransformedRef((base, base), (probe,))
            else:
                invals[at] = state_types.TransformedRef(base, (probe,))
            return rule(eqn, invals, mask)
        return probed

    for prim in list(lw.rules):
        if getattr(prim, "name", None) == prim_name:
            lw.rules[prim] = wrap(lw.rules[prim])
    lw._probe_ops = (launch_operands, grid_schedule)  # type: ignore[attr-defined]
    return lw


def _lower(kernel_call, lw: Lowerer) -> None:
    launch_operands, grid_schedule = lw._probe_ops  # type: ignore[attr-defined]
    _, kernel_args, _ = launch_operands(kernel_call)
    lw.set_launch_values(kernel_args, None)  # as lower_kernel drives it (the grid's copies read the args)
    lw.start_core(0)
    for point in grid_schedule(kernel_call, 1)[0]:
        lw.run_grid_point(point, kernel_args)


def test_the_kernel_lowers_without_probes(kernel_call) -> None:
    from semcheck.checker.frontend.lower import lower_kernel

    prog = lower_kernel(kernel_call)
    assert prog.num_ops > 0


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__.rsplit('.', 2)[-2]}.{c.__name__}")
@pytest.mark.parametrize("site", SITES, ids=lambda s: f"{s[0]}-{s[1]}")
def test_every_transform_is_lowered_or_refused_with_its_line(kernel_call, cls: type, site: tuple[str, str]) -> None:
    probe = _instance(cls)
    lw = _probing_lowerer(kernel_call, *site, probe)
    try:
        _lower(kernel_call, lw)
    except Unsupported as e:
        assert e.loc is not None and e.loc.line > 0 and e.loc.file.endswith("test_transforms.py"), str(e)
        if cls is state_types.SelectTransform:
            assert "select_ref" in e.reason
        elif cls.__name__ in KNOWN and site[1] in ("src", "dst", "ref"):
            pytest.fail(f"a {cls.__name__} of a buffer view should lower: {e}")
        return
    # lowered: only what the front end understands may get here, on a buffer view or
    # as an identity of a semaphore view
    assert cls.__name__ in KNOWN, f"{cls.__name__} at {site} was lowered without being understood"
    assert cls is not state_types.SelectTransform


def test_lowering_turns_a_rule_crash_into_unsupported_with_the_line(kernel_call) -> None:
    """The safety net: whatever a rule raises becomes `Unsupported` at the equation's line."""
    lw = Lowerer(kernel_call, 1, 1)
    for prim in list(lw.rules):
        if getattr(prim, "name", None) == "semaphore_signal":
            def boom(eqn, invals, mask):
                raise NotImplementedError("a construct of a newer jax")
            lw.rules[prim] = boom
    lw._probe_ops = _probing_lowerer(kernel_call, "get", "ref", None)._probe_ops  # type: ignore[attr-defined]
    with pytest.raises(Unsupported) as info:
        _lower(kernel_call, lw)
    assert info.value.primitive == "semaphore_signal"
    assert "NotImplementedError" in info.value.reason
    assert info.value.loc.file.endswith("test_transforms.py")
    assert info.value.loc.line == _kernel.__code__.co_firstlineno + 1
