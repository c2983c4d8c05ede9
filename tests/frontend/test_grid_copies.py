"""The grid's own block copies (specs/semantics/accesses.md GRID-1 .. GRID-4, ERR-11; divergence D24).

GRID-1 is checked against jax's interpreter run for real: its HBM reads and writes of blocks are
recorded (by wrapping the interpreter's `get` and `store` callbacks while the call is traced) and
compared, core by core and in order, with the HBM side of the grid copies semcheck lowers.
"""

from __future__ import annotations

from semcheck.checker.properties.decide import decide
import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.jax

ROOT = Path(__file__).resolve().parents[2]


def _example(rel: str):
    spec = importlib.util.spec_from_file_location(f"semcheck_grid_example_{Path(rel).stem}", ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _program(fn, args):
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels

    (call,) = trace_kernels(fn, args)
    return lower_kernel(call)


def _lowered_copies(program):
    """Per core: the HBM side of each grid copy, in program order: (kind, box)."""
    from semcheck.checker.frontend.grid_copies import grid_copy_of

    return [[(grid_copy_of(op).kind, op.region.box) for op in ops
             if grid_copy_of(op) is not None and grid_copy_of(op).hbm] for ops in program.cores]


def _interpreted_copies(f, args, cores):
    """Per core: the interpreter's own reads (copy-in) and writes (write-back) of HBM blocks, in order."""
    import jax
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax._src.pallas.mosaic.interpret import utils

    seen: list[list[tuple[str, tuple]]] = [[] for _ in range(cores)]
    hbm = ipc.TPU_MEMORY_SPACE_IDXS[ipc.mosaic_core.MemorySpace.HBM]
    real_get, real_store = ipc.get, ipc.store

    def box(transforms):
        rng = utils.to_range(jax.tree.map(int, transforms))
        return tuple((s.start, s.stop) if isinstance(s, slice) else (s, s + 1) for s in rng)

    def get(*a, **k):
        if len(a) > 6 and a[6] is not None and int(a[3]) == hbm:  # a block read with its block indices
            seen[int(a[2])].append(("in", box(a[5])))
        return real_get(*a, **k)

    def store(*a, **k):
        if len(a) > 7 and a[7] is not None and int(a[3]) == hbm:
            seen[int(a[2])].append(("out", box(a[5])))
        return real_store(*a, **k)

    get.__wrapped__ = real_get.__wrapped__
    store.__wrapped__ = real_store.__wrapped__
    ipc.get, ipc.store = get, store
    try:
        jax.block_until_ready(jax.jit(f)(*args))
    finally:
        ipc.get, ipc.store = real_get, real_store
    return seen


def _grid_kernels():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    def squeeze(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    y = jnp.ones((8, 128), jnp.float32)
    z = jnp.arange(2 * 16 * 128, dtype=jnp.float32).reshape(2, 16, 128)
    return {
        # blocks 0, 0, 1, 1 of x and o (copied in before steps 0 and 2, written back after 1 and 3);
        # y's one block copied in once
        "consecutive": (pl.pallas_call(
            add, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i // 2, 0)), pl.BlockSpec((8, 128), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i // 2, 0)),
            interpret=pltpu.InterpretParams()), (x, y), 1),
        # a squeezed leading dimension over a two-dimensional grid
        "squeezed": (pl.pallas_call(
            squeeze, out_shape=jax.ShapeDtypeStruct((2, 16, 128), jnp.float32), grid=(2, 2),
            in_specs=[pl.BlockSpec((None, 8, 128), lambda i, j: (i, j, 0))],
            out_specs=pl.BlockSpec((None, 8, 128), lambda i, j: (1 - i, j, 0)),
            interpret=pltpu.InterpretParams()), (z,), 1),
        # a parallel axis shuffled and split between two cores, an arbitrary one inside it
        "megacore": (pl.pallas_call(
            squeeze, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4, 2),
            in_specs=[pl.BlockSpec((8, 64), lambda i, j: (i, 1 - j))],
            out_specs=pl.BlockSpec((8, 64), lambda i, j: (i, j)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
            interpret=pltpu.InterpretParams(num_cores_or_threads=2, random_seed=7)), (x,), 2),
    }


@pytest.mark.rule("GRID-1")
@pytest.mark.parametrize("name", ["consecutive", "squeezed", "megacore"])
def test_grid_copies_are_where_the_interpreter_makes_them(name):
    f, args, cores = _grid_kernels()[name]
    lowered = _lowered_copies(_program(f, args))
    assert lowered == _interpreted_copies(f, args, cores)
    assert all(lowered)  # every core copies something: the comparison is not vacuous
    if name == "consecutive":
        assert lowered[0] == [("in", ((0, 8), (0, 128))), ("in", ((0, 8), (0, 128))), ("out", ((0, 8), (0, 128))),
                              ("in", ((8, 16), (0, 128))), ("out", ((8, 16), (0, 128)))]


def _verdicts(program, modes=("eager", "on_wait", "hardware")):
    from semcheck.checker.properties.registry import BY_ID

    return {m: {p: decide(p, program, m) for p in BY_ID} for m in modes}


@pytest.mark.rule("GRID-2", "GRID-1")
def test_a_race_with_the_grid_names_its_blockspec_and_step():
    for bug, fix, blockspec, step, hint in [
        ("examples/buggy/race_megacore_grid_same_output_block.py", "examples/megacore_grid.py",
         "the grid's write-back of output 'o_ref' (its BlockSpec's block (1, 0)) after grid step", "(1,)",
         "give each grid step its own output block"),
        ("examples/buggy/race_grid_writeback_prefetch_off_by_one.py", "examples/inplace_prefetch_grid.py",
         "the grid's write-back of output 'o_ref' (its BlockSpec's block (0, 0)) after grid step", "(0,)",
         "inside the grid step, before the grid's write-back of output 'o_ref'"),
    ]:
        for mode, vs in _verdicts(_program(*_example(bug).build(1))).items():
            bad = {p for p, v in vs.items() if v.verdict != "proved"}
            assert bad == {"race-free"} and vs["race-free"].verdict == "violated", (bug, mode, bad)
            message = vs["race-free"].witness.message
            assert blockspec in message and step in message, message
            assert hint in vs["race-free"].witness.hint
        for mode, vs in _verdicts(_program(*_example(fix).build(1))).items():
            assert {p: v.verdict for p, v in vs.items()} == {p: "proved" for p in vs}, (fix, mode)


@pytest.mark.rule("GRID-3", "ERR-11")
def test_a_revisited_output_block_fails_every_interpreter_run():
    from semcheck.checker.properties.failing_facts import view_ops
    from semcheck.model.errors import RevisitedBlock

    recorded = json.loads((ROOT / "tests/kernels/ground_truth.json").read_text())["cases"]
    (jax_says,) = {(c["error_type"], c["error_message"]) for c in recorded
                   if c["path"] == "examples/buggy/revisited_output_block.py"}
    program = _program(*_example("examples/buggy/revisited_output_block.py").build(1))
    (check,) = view_ops(program)
    assert isinstance(check.view_error, RevisitedBlock)
    assert (check.view_error.python_type, check.view_error.message) == jax_says
    vs = _verdicts(program)
    for mode in ("eager", "on_wait"):
        assert vs[mode]["deadlock-free"].verdict == "violated"
        assert jax_says[1] in vs[mode]["deadlock-free"].witness.message
        # no run reaches a kernel exit: exit-balance holds vacuously (REP-20), the rest are proved
        assert {p: v.verdict for p, v in vs[mode].items() if p != "deadlock-free"} == {
            p: "vacuous" if p == "exit-balance" else "proved" for p in vs[mode] if p != "deadlock-free"}
    assert {v.verdict for v in vs["hardware"].values()} == {"proved"}  # a TPU does not check (D24)
    fixed = _program(*_example("examples/consecutive_output_blocks.py").build(1))
    assert not view_ops(fixed)
    # the report's "modes differ" section names D24 (not the view failures' D22) with the kernel's line
    from semcheck.checker.properties.differences import exposures

    assert [(e.code, e.locs) for e in exposures(program)] == [("D24", (check.loc,))]


def _hand_program(after_step: int | None, write_back_step: int = 0):
    """One core: step 0 writes back hbm0 rows 0:8; then (optionally a grid copy of a later step and)
    a kernel read of those rows."""
    from semcheck.checker.frontend.grid_copies import GridCopyLoc
    from semcheck.model.launch import Scratch, launch
    from semcheck.model.ops import Access, Loc, Region, Topology

    rows = Region(((0, 8), (0, 128)))
    out = GridCopyLoc("k.py", 3, what="the grid's write-back of output 'o' after grid step (0,)", kind="out",
                      step=write_back_step, hbm=True)
    body = [Access("o", rows, True, Loc("k.py", 5)), Access("o", rows, False, out), Access("hbm0", rows, True, out)]
    if after_step is not None:
        later = GridCopyLoc("k.py", 3, what="a later copy-in", kind="in", step=after_step, hbm=True)
        body.append(Access("hbm1", rows, False, later))
    body.append(Access("hbm0", rows, False, Loc("k.py", 9)))
    return launch(Topology(1, 1), [body], scratch=[Scratch("o", kind="buffer", nbytes=4096)], hbm_buffers=2)


@pytest.mark.rule("GRID-4")
def test_hardware_keeps_a_proof_only_outside_the_pipeline_windows():
    from semcheck.checker.frontend.grid_copies import hardware_overlap
    from semcheck.checker.properties.races import race_free

    # the read at line 9 may meet the write-back still in flight on a TPU (before step 2 starts)
    for after in (None, 1):
        program = _hand_program(after)
        assert "k.py:9" in hardware_overlap(program)
        assert race_free(program, "eager").verdict == "proved"  # the interpreter copies synchronously
        v = race_free(program, "hardware")
        assert v.verdict == "unknown" and "GRID-4" in v.reason and "k.py:9" in v.reason
    # from step 2 on, the pipeline has waited for the write-back of step 0
    program = _hand_program(2)
    assert hardware_overlap(program) is None and race_free(program, "hardware").verdict == "proved"
    # the lowered in-place kernel: its fetches and the grid's write-backs never share a window
    fixed = _program(*_example("examples/inplace_prefetch_grid.py").build(1))
    assert hardware_overlap(fixed) is None
    buggy = _program(*_example("examples/buggy/race_grid_writeback_prefetch_off_by_one.py").build(1))
    # its fetch of block i is started before the write-back of block i and still in flight at it: that
    # is a race at the interpreter's positions already, which the window contains
    assert hardware_overlap(buggy) is None and race_free(buggy, "hardware").verdict == "violated"


@pytest.mark.rule("GRID-4")
def test_hardware_does_not_trust_the_interpreters_split_of_parallel_steps():
    """Two steps at different parallel coordinates write back one block from one core of a megacore
    device: the interpreter's shuffle put them together, a TPU may not; at one coordinate, fine."""
    from semcheck.checker.frontend.grid_copies import GridCopyLoc, hardware_overlap
    from semcheck.model.launch import launch
    from semcheck.model.ops import Access, Region, Topology

    rows = Region(((8, 16), (0, 128)))

    def program(second: tuple[int, ...]):
        first = GridCopyLoc("k.py", 3, what="write-back after step (0,)", kind="out", step=0, hbm=True, parallel=(0,))
        later = GridCopyLoc("k.py", 3, what="write-back after step (2,)", kind="out", step=2, hbm=True,
                            parallel=second)
        return launch(Topology(1, 2), [[Access("hbm0", rows, True, first), Access("hbm0", rows, True, later)], []],
                      hbm_buffers=1)

    assert "different cores" in hardware_overlap(program((1,)))
    assert hardware_overlap(program((0,))) is None


@pytest.mark.rule("GRID-1", "ACC-4")
def test_a_block_index_from_data_the_arguments_do_not_carry_is_never_guessed():
    """An index map reading a scalar-prefetch table given as a shape: semcheck asks for concrete
    arguments, at the kernel's line; with the table's values it places each step's block."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.scalar_memory import NeedsConcreteInputs
    from semcheck.checker.frontend.trace import trace_kernels

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0))),
        interpret=pltpu.InterpretParams())
    shapes = (jax.ShapeDtypeStruct((2,), jnp.int32), jax.ShapeDtypeStruct((16, 128), jnp.float32))
    (call,) = trace_kernels(f, shapes)
    with pytest.raises(NeedsConcreteInputs, match="block index of input") as raised:
        lower_kernel(call)
    assert raised.value.loc is not None and raised.value.loc.line > 0
    args = (jnp.array([1, 0], jnp.int32), jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128))
    (call,), (values,) = trace_with_inputs(f, args)
    lowered = _lowered_copies(lower_kernel(call, inputs=values))
    assert lowered == _interpreted_copies(f, args, 1)
    assert lowered[0][0] == ("in", ((8, 16), (0, 128)))  # step 0 reads block idx[0] = 1


@pytest.mark.rule("GRID-4", "GRID-2")
@pytest.mark.parametrize("seed", [0, 1])
def test_a_tpu_may_split_parallel_steps_that_share_a_block_otherwise(seed):
    """Four parallel steps on two cores, steps 0, 1 writing block 0 and 2, 3 block 1. The interpreter's
    shuffle (seed 0) gives steps 0 and 1 to different cores: a race there, and jax's detector sees it;
    seed 1 keeps each block on one core: no race there. A TPU splits the steps its own way: unknown."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from semcheck.checker.properties.races import race_free

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i // 2, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i // 2, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=pltpu.InterpretParams(num_cores_or_threads=2, random_seed=seed))
    x = jnp.ones((16, 128), jnp.float32)
    program = _program(f, (x,))
    want = "violated" if seed == 0 else "proved"
    detecting = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i // 2, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i // 2, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=pltpu.InterpretParams(num_cores_or_threads=2, random_seed=seed, detect_races=True, on_race="raise"))
    if seed == 0:  # jax's detector: both cores write rows 0:8 of the output
        with pytest.raises(Exception, match=r"write of \('hbm'"):
            jax.block_until_ready(detecting(x))
    else:
        jax.block_until_ready(detecting(x))
    assert {race_free(program, m).verdict for m in ("eager", "on_wait")} == {want}
    v = race_free(program, "hardware")
    assert v.verdict == "unknown" and "its own way" in v.reason
