"""Concrete scalar data in the front end (issue 17): control flow read from SMEM and scalar prefetch.

The kernels (`kernels/scalar_data.py`) decide their copies, signals, waits
and loop trip counts from scalar-prefetch tables, a whole SMEM input and SMEM
scratch carried across grid steps. With concrete example arguments:

* the lowered programs are exactly what jax's TPU interpreter does on the
  same inputs (semaphore, DMA and allocation events per core, `recorder.py`);
* they follow the tables (which devices copy, how many iterations, which slot);
* semcheck decides every property.

With `jax.ShapeDtypeStruct` arguments the kernel is unknown at the branch or
loop, with the hint to pass concrete inputs; refs a DMA writes (locally or
from another device) are never followed. `ScalarMemory` itself is checked
without a kernel. jax's shipped paged attention, on concrete lengths and a
page table, lowers to what the interpreter does and is verified; its
megacore mode run on one interpreter core (which hangs) deadlocks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "kernels"))
sys.path.insert(0, str(HERE))

pytestmark = pytest.mark.jax

KERNEL = "scalar_data.py"
CONCRETE = ["prefetch_when", "smem_length_loop", "carried_slot"]


def _specs(names: list[str]) -> list[str]:
    return [f"{KERNEL}::{n}" for n in names]


def _tables() -> dict[str, Any]:
    """The kernel file's input tables (literal lines: read without importing jax here)."""
    ns: dict[str, Any] = {}
    for line in (HERE / "kernels" / KERNEL).read_text().splitlines():
        if line.startswith(("COUNTS =", "LENGTHS =", "STEPS =")):
            exec(line, ns)  # noqa: S102 - a literal from the test's own kernel file
    return ns


# --- lowered == interpreted ----------------------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict[tuple[str, int], dict[str, Any]]:
    from test_frontend import _record

    return {(r["spec"], n): r for n in (2, 4) for r in _record(n, _specs(CONCRETE))}


@pytest.mark.rule("ACC-4")
@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("name", CONCRETE)
def test_data_driven_program_matches_interpreter(recorded, name: str, devices: int) -> None:
    r = recorded[(f"{KERNEL}::{name}", devices)]
    assert r["status"] == "match", r.get("difference") or r.get("error") or r
    assert r["outcome"] == "completed"
    assert r["lowered_events"] == r["recorded_events"] > 0


# --- the programs follow the tables ------------------------------------------------------


@pytest.fixture(scope="module")
def probed() -> dict[str, dict[str, Any]]:
    from test_frontend import _probe

    names = [*CONCRETE, "prefetch_when_abstract", "smem_length_loop_abstract", "dma_into_smem", "remote_flag"]
    return _probe(4, _specs(names))


def _device_ops(r: dict[str, Any], device: int) -> list[dict[str, Any]]:
    (k,) = r["kernels"]
    return k["cores"][device * k["cores_per_device"]]


def test_scalar_prefetch_count_decides_copy_signal_and_wait(probed) -> None:
    counts = _tables()["COUNTS"][:4]
    r = probed[f"{KERNEL}::prefetch_when"]
    assert "error" not in r, r.get("error")
    for d in range(4):
        ops = _device_ops(r, d)
        starts = [op for op in ops if op["op"] == "DmaStart"]
        signals = [op for op in ops if op["op"] == "Signal"]
        waits = [op for op in ops if op["op"] == "Wait" and op["kind"] == "semaphore"]
        assert len(starts) == (counts[d] > 0)
        assert [(s["inc"], s["device"]) for s in signals] == ([(counts[d], (d + 1) % 4)] if counts[d] else [])
        left = counts[(d - 1) % 4]
        assert [w["value"] for w in waits] == ([left] if left else [])


def test_loop_bound_read_from_smem_input(probed) -> None:
    lengths = _tables()["LENGTHS"][:4]
    r = probed[f"{KERNEL}::smem_length_loop"]
    assert "error" not in r, r.get("error")
    for d in range(4):
        assert sum(op["op"] == "DmaStart" for op in _device_ops(r, d)) == lengths[d]


def test_slot_carried_in_smem_scratch_across_grid_steps(probed) -> None:
    steps = _tables()["STEPS"]
    r = probed[f"{KERNEL}::carried_slot"]
    assert "error" not in r, r.get("error")
    ops = _device_ops(r, 0)
    started = [op["dst_sem"][1] for op in ops if op["op"] == "DmaStart"]
    awaited = [op["sem"][1] for op in ops if op["op"] == "Wait"]
    assert awaited == [s % 2 for s in range(steps)]  # each step waits on the slot the previous one filled
    assert started == [s % 2 for s in range(steps)]


@pytest.mark.rule("ACC-4")
@pytest.mark.parametrize("name,primitive", [("prefetch_when_abstract", "cond"),
                                            ("smem_length_loop_abstract", "while")])
def test_shapes_only_arguments_are_unknown_with_the_hint(probed, name: str, primitive: str) -> None:
    err = probed[f"{KERNEL}::{name}"]["error"]
    assert err["code"] == "unsupported" and err["primitive"] == primitive
    assert "concrete example arguments" in err["message"]
    assert "not jax.ShapeDtypeStruct" in err["message"]
    assert err["loc"][0] == KERNEL


@pytest.mark.rule("ACC-4", "ACC-30", "ACC-31")
def test_data_a_copy_brings_from_an_untracked_ref_is_not_followed(probed) -> None:
    err = probed[f"{KERNEL}::dma_into_smem"]["error"]
    assert err["code"] == "unsupported" and err["primitive"] == "cond"
    assert "data a copy moves from a ref semcheck does not follow" in err["reason"]
    assert "concrete example arguments" not in err["message"]  # concrete inputs would not help


@pytest.mark.rule("ACC-9")
def test_a_flag_a_remote_copy_brings_is_followed(probed) -> None:
    # the lowering follows it (ACC-9); tests/frontend/test_followed_values.py checks that the verdicts
    # resting on it are unknown, since the read races with the copy
    r = probed[f"{KERNEL}::remote_flag"]
    assert "error" not in r, r.get("error")


def test_data_driven_kernels_are_verified() -> None:
    from semcheck.testing import assert_verified

    for name in CONCRETE:
        assert_verified(str(HERE / "kernels" / f"{KERNEL}::{name}"), devices=(2,))


# --- ScalarMemory without a kernel -------------------------------------------------------


@pytest.fixture()
def memory():
    pytest.importorskip("jax")
    from semcheck.checker.frontend.scalar_memory import ScalarMemory
    from semcheck.checker.frontend.values import Unknown

    m = ScalarMemory(3)
    m.define("t", (4,), np.int32, np.array([[5, 6, 7, 8]], dtype=np.int32), Unknown("x"))
    return m


def _ix(*indices: Any) -> Any:
    """An indexer of the (4,) test ref; integer indices as lane arrays, as the evaluator has them."""
    from jax._src.state.indexing import NDIndexer, Slice

    from semcheck.checker.frontend.values import Unknown

    idx = tuple(i if isinstance(i, (Slice, Unknown)) else np.asarray(i).reshape(-1) for i in indices)
    return NDIndexer(idx, (4,), ())


def _ds(start: int, size: int) -> Any:
    from jax._src.state.indexing import Slice

    return Slice(start, size)


def test_memory_loads_known_values_per_lane(memory) -> None:
    from semcheck.model.ops import NO_LOC

    out = memory.load("t", (_ix(np.array([0, 1, 3])),), [0, 1, 2], (), NO_LOC)
    assert out.tolist() == [5, 6, 8]
    out = memory.load("t", (_ix(_ds(1, 2)),), [0, 1, 2], (2,), NO_LOC)
    assert out.shape == (1, 2) and out.tolist() == [[6, 7]]


def test_memory_store_updates_only_running_lanes(memory) -> None:
    from semcheck.model.ops import NO_LOC

    memory.store("t", (_ix(0),), np.array([9]), [1], NO_LOC)
    assert memory.load("t", (_ix(0),), [0, 1, 2], (), NO_LOC).tolist() == [5, 9, 5]
    memory.store("t", (_ix(0),), np.array([1]), [0, 1, 2], NO_LOC, add=True)
    assert memory.load("t", (_ix(0),), [0, 1, 2], (), NO_LOC).tolist() == [6, 10, 6]


@pytest.mark.rule("ACC-4")
def test_memory_unknown_stores_and_indices_are_never_guessed(memory) -> None:
    from semcheck.checker.frontend.scalar_memory import AbstractInput
    from semcheck.checker.frontend.values import Unknown
    from semcheck.model.ops import NO_LOC

    memory.store("t", (_ix(2),), Unknown("float data"), [0], NO_LOC)
    assert isinstance(memory.load("t", (_ix(2),), [0], (), NO_LOC), Unknown)
    assert memory.load("t", (_ix(2),), [1, 2], (), NO_LOC).tolist() == [7]  # other lanes keep theirs
    assert memory.load("t", (_ix(1),), [0], (), NO_LOC).tolist() == [6]  # other elements keep theirs
    memory.store("t", (_ix(Unknown("where")),), np.array([0]), [1], NO_LOC)  # an unknown index: all of it
    assert all(isinstance(memory.load("t", (_ix(i),), [1], (), NO_LOC), Unknown) for i in range(4))
    assert isinstance(memory.load("t", (_ix(4),), [2], (), NO_LOC), Unknown)  # out of bounds
    memory.store("t", (_ix(3),), AbstractInput("shapes only"), [2], NO_LOC)
    assert type(memory.load("t", (_ix(3),), [2], (), NO_LOC)) is AbstractInput  # the hint survives
    memory.clobber("t", [2], Unknown("a DMA"))
    assert isinstance(memory.load("t", (_ix(0),), [2], (), NO_LOC), Unknown)


def test_memory_refuses_large_and_remotely_written_refs() -> None:
    pytest.importorskip("jax")
    from semcheck.checker.frontend.scalar_memory import ScalarMemory, trackable
    from semcheck.checker.frontend.values import MAX_EVAL_ELEMENTS, MAX_TABLE_ELEMENTS, Unknown

    assert trackable((8,), np.int32, "smem") and trackable((2,), np.bool_, "vmem")
    assert trackable((8,), np.float32, "smem")  # exact float operations are followed (ACC-25)
    assert not trackable((MAX_EVAL_ELEMENTS + 1,), np.float32, "vmem")
    assert not trackable((MAX_TABLE_ELEMENTS + 1,), np.int32, "smem")  # integer tables: ACC-31's bound
    assert not trackable((8,), np.int32, "hbm")  # HBM only where copies are followed (ACC-30)
    m = ScalarMemory(2)
    m.remote_signatures.add(((1,), "int32"))
    assert not m.define("flag", (1,), np.int32, None, Unknown("x"))
    assert "flag" not in m


# --- jax's shipped paged attention on concrete inputs -------------------------------------

PAGED = "paged_attention_concrete.py"
PAGED_TARGETS = ["inline", "grid_over_blocks", "megacore_batch"]


def test_paged_attention_lowers_to_what_the_interpreter_does() -> None:
    from test_frontend import _record

    for r in _record(1, [f"{PAGED}::{t}" for t in PAGED_TARGETS]):
        assert r["status"] == "match", r.get("difference") or r.get("error") or r
        assert r["outcome"] == "completed" and r["lowered_events"] == r["recorded_events"] > 0


@pytest.mark.parametrize("target", PAGED_TARGETS)
def test_paged_attention_is_verified(target: str) -> None:
    from semcheck.testing import assert_verified

    assert_verified(str(HERE / "kernels" / f"{PAGED}::{target}"), devices=(1,))


def test_paged_attention_megacore_on_one_core_deadlocks() -> None:
    """Interpret mode hangs on it (checked by hand: a 60 s run never returns); semcheck says why."""
    from semcheck.testing import verify_target

    data, text, code = verify_target(str(HERE / "kernels" / f"{PAGED}::megacore_batch_on_one_core"), (1,),
                                     "hardware", None)
    assert code == 1, text
    verdicts = {r["property"]: r for r in data["results"]}
    assert verdicts["deadlock-free"]["verdict"] == "violated", text
    assert "a DMA wait" in verdicts["deadlock-free"]["witness"]["message"]  # a block's wait_and_get_loaded
