"""ACC-30, ACC-31: values that arrive by a kernel's own local copies, and tables past 1024 entries.

examples/moe_count_table_fetch.py fetches a per-expert count table of 2,048 entries from HBM into SMEM
with a local copy and sizes its all-to-all with it; its seeded twin
examples/buggy/moe_count_table_read_before_fetch_wait.py waits for the fetch only at the end. The test
kernels (`kernels/local_copies.py`) move tables between HBM, VMEM and SMEM, through static slices and a
slice whose start is itself a followed entry. What jax's interpreter does with the examples is recorded in
tests/kernels/ground_truth.json and race_ground_truth.json; the test kernels are compared with it here.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(HERE / "kernels"))
sys.path.insert(0, str(HERE))
from cli._support import semcheck  # noqa: E402

KERNEL = "local_copies.py"
FOLLOWED = ["hbm_rows_to_smem", "hbm_to_vmem_to_smem", "followed_row_to_smem"]
CLEAN = "examples/moe_count_table_fetch.py"
BUGGY = "examples/buggy/moe_count_table_read_before_fetch_wait.py"
FETCH, READ = 64, 94  # the twin's fetch (its start) and the first load of the table it races with


def _rows(*args: str, code: int) -> list[dict]:
    run = semcheck("verify", *args, "--devices", "2,4", "--format", "json", "--no-cache", cwd=ROOT, timeout=900)
    assert run.returncode == code, run.stderr[-2000:]
    return json.loads(run.stdout)["results"]


# --- the kernels -------------------------------------------------------------------------------


@pytest.mark.jax
@pytest.mark.rule("ACC-30", "ACC-31")
def test_values_local_copies_move_decide_every_property():
    # exit code 1: the file's `discarded_read_before_start` is violated (ACC-10), `aliased_table` unknown
    rows = [r for r in _rows(f"tests/frontend/kernels/{KERNEL}", code=1) if r["target"] in FOLLOWED]
    assert len(rows) == len(FOLLOWED) * 2 * 3 * 8  # targets x devices x modes x properties
    assert {r["verdict"] for r in rows} == {"proved"}, [r for r in rows if r["verdict"] != "proved"][:1]


@pytest.mark.jax
@pytest.mark.rule("ACC-30")
def test_an_aliased_hbm_table_is_not_followed():
    """An output aliasing the table is written back by the pipeline, which records no write: not followed."""
    run = semcheck("verify", f"tests/frontend/kernels/{KERNEL}::aliased_table", "--format", "json", "--no-cache",
                   cwd=ROOT, timeout=600)
    rows = json.loads(run.stdout)["results"]
    assert rows and {r["verdict"] for r in rows} == {"unknown"}
    assert all("data a copy moves from a ref semcheck does not follow" in r["reason"] for r in rows), rows[0]


@pytest.fixture(scope="module")
def examples() -> list[dict]:
    return _rows(CLEAN, BUGGY, code=1)


@pytest.mark.jax
@pytest.mark.rule("ACC-30", "ACC-31")
def test_the_count_table_fetch_decides_every_property(examples):
    clean = [r for r in examples if r["file"] == CLEAN]
    assert len(clean) == 2 * 3 * 8
    assert {r["verdict"] for r in clean} == {"proved"}, [r for r in clean if r["verdict"] != "proved"][:1]


@pytest.mark.jax
@pytest.mark.rule("ACC-30", "ACC-20", "ACC-71", "ACC-80")
def test_a_table_read_before_its_fetch_wait_is_a_race_decided_where_the_interpreter_lands_it(examples):
    """Under `hardware` nothing but the race is claimed; under eager and on_wait each load reads, in every run, the
    fetched count (eager) or the zero stored first (on_wait), and the rest is proved (ACC-71)."""
    buggy = [r for r in examples if r["file"] == BUGGY]
    assert len(buggy) == 2 * 3 * 8
    fetch, read = f"{Path(BUGGY).name}:{FETCH}", f"{Path(BUGGY).name}:{READ}"
    for r in buggy:
        text = json.dumps(r)
        if r["property"] == "race-free":
            assert r["verdict"] == "violated", r
            assert fetch in text and read in text, r
        elif r["dma_mode"] == "hardware":  # ACC-80: PRG-215's properties hold of every case, if one was decided in
            # time; the rest: cases that disagree, or too many to decide one by one
            proved = r["property"] in ("id-disjoint", "id-int16")
            assert r["verdict"] in (("proved", "unknown") if proved else ("unknown",)) and "ACC-80" in r["reason"], r
        else:
            assert r["verdict"] == "proved", r


@pytest.mark.jax
@pytest.mark.rule("ACC-32")
def test_a_read_a_known_select_discards_decides_nothing():
    """The select's predicate is false on every device: the read out of bounds is not needed, and the table's
    other entries stay known after it."""
    rows = _rows(f"tests/frontend/kernels/{KERNEL}::discarded_read", code=0)
    assert len(rows) == 2 * 3 * 8
    assert {r["verdict"] for r in rows} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("ACC-32", "ACC-10", "ERR-62")
def test_a_discarded_read_the_interpreter_refuses_is_not_proved_there():
    """The select discards the load's value, but the load still runs: at an index before the row's start jax's
    interpreter raises `IndexError` there in every run (both modes, 2 and 4 devices), so `deadlock-free` is
    violated at the load in `eager` and `on_wait`; a TPU's kernel indexes outside the row too, which no document
    specifies, so every `hardware` verdict is unknown (ERR-62; it was proved)."""
    rows = _rows(f"tests/frontend/kernels/{KERNEL}::discarded_read_before_start", code=1)
    for r in rows:
        if r["dma_mode"] == "hardware":
            assert r["verdict"] == "unknown" and "ERR-62" in r["reason"], r
        elif r["property"] == "deadlock-free":
            assert r["verdict"] == "violated", r
            assert "IndexError: Out-of-bounds read of rows" in json.dumps(r), r
        else:
            assert r["verdict"] in ("proved", "vacuous"), r


@pytest.mark.jax
@pytest.mark.rule("ACC-30", "ACC-32")
@pytest.mark.parametrize("devices", [2, 4])
def test_lowered_local_copies_are_what_the_interpreter_does(devices):
    from test_frontend import _record

    for r in _record(devices, [f"{KERNEL}::{t}" for t in (*FOLLOWED, "discarded_read")]):
        assert r["status"] == "match", r.get("difference") or r.get("error") or r
        assert r["outcome"] == "completed"
        assert r["lowered_events"] == r["recorded_events"] > 0


# --- ACC-31: the table bound and the cost of an access --------------------------------------------


def _indexer(shape: tuple[int, ...], key: list[Any]) -> Any:
    from jax._src.state.indexing import NDIndexer, Slice

    idx = tuple(Slice(k[0], k[1]) if isinstance(k, tuple) else np.array([k]) for k in key)
    out = tuple(k[1] for k in key if isinstance(k, tuple))
    return NDIndexer(idx, shape, ()), out


@st.composite
def _tables(draw):
    from semcheck.checker.frontend.values import MAX_TABLE_ELEMENTS

    rows = draw(st.integers(1, 64))
    cols = draw(st.integers(1, MAX_TABLE_ELEMENTS // rows))
    key = []
    for dim in (rows, cols):
        if draw(st.booleans()):
            start = draw(st.integers(0, dim - 1))
            key.append((start, draw(st.integers(0, dim - start))))
        else:
            key.append(draw(st.integers(0, dim - 1)))
    return (rows, cols), key, draw(st.integers(0, 2**31 - 1))


@pytest.mark.rule("ACC-31")
@settings(max_examples=60, deadline=None)
@given(_tables())
def test_a_table_up_to_the_bound_is_tracked_and_read_exactly(case):
    pytest.importorskip("jax")
    from semcheck.checker.frontend.scalar_memory import ScalarMemory, trackable
    from semcheck.checker.frontend.values import Unknown
    from semcheck.model.ops import NO_LOC

    shape, key, seed = case
    assert trackable(shape, np.int32, "smem") and trackable(shape, np.int32, "hbm", hbm=True)
    values = np.random.default_rng(seed).integers(-1000, 1000, size=(2, *shape)).astype(np.int32)
    m = ScalarMemory(2)
    assert m.define("t", shape, np.int32, values, Unknown("x"))
    view, out_shape = _indexer(shape, key)
    got = m.load("t", (view,), [0, 1], out_shape, NO_LOC)
    want = values[(slice(None), *(slice(k[0], k[0] + k[1]) if isinstance(k, tuple) else k for k in key))]
    assert np.array_equal(np.broadcast_to(got, want.shape), want)
    flat = m.elements("t", (view,), 1)
    assert np.array_equal(values[1].reshape(-1)[flat], want[1].reshape(-1))
    # an access names its view's elements only: the ref's positions are made once (read-only), not per access
    assert m.refs["t"].index.size == math.prod(shape) and not m.refs["t"].index.flags.writeable


@pytest.mark.rule("ACC-31")
def test_a_table_past_the_bound_is_not_tracked():
    pytest.importorskip("jax")
    from semcheck.checker.frontend.scalar_memory import trackable
    from semcheck.checker.frontend.values import MAX_EVAL_ELEMENTS, MAX_TABLE_ELEMENTS

    assert trackable((2, 1024), np.int32, "smem")  # the shipped MoE's routing table (2 x bt x 128, bt = 8)
    assert trackable((MAX_TABLE_ELEMENTS,), np.int32, "vmem")
    assert not trackable((MAX_TABLE_ELEMENTS + 1,), np.int32, "smem")
    assert not trackable((MAX_EVAL_ELEMENTS + 1,), np.float32, "smem")  # float data: ACC-25's bound
    assert not trackable((8,), np.int32, "hbm")  # HBM only where the caller follows copies (ACC-30)
    assert not trackable((8,), np.float32, "hbm", hbm=True)  # and only integer tables
