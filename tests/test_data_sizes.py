"""DMAs whose sizes are data (ACC-7) and kernels that close over refs (LAUNCH-4).

The kernels are ports of jax's own (examples/jax_ops/): its ragged
all-to-all (`pl.ds(offset, size)`, sizes from SMEM, dummy descriptors for
the byte totals), the race-detection test kernel (a wait for a
data-dependent receive count), `test_dynamic_dma_on_2nd_minor`, and a
stateful call closing over `run_state`'s refs; with seeded variants.

* regions per device from per-device slice sizes (no kernel: the region
  walk on hand-built views, against numpy's slicing);
* lowered programs equal what jax's interpreter does, event by event with
  byte counts (`tests/frontend/recorder.py`), at 2 and 4 devices;
* shapes-only arguments: unknown with the hint to pass arrays;
* generated inputs: the clean kernels are proved for the tables drawn, the
  seeded bugs are found and shrunk.

The verdicts against interpret mode's record are tests/test_predictions.py
and tests/test_race_ground_truth.py (ground_truth.json,
race_ground_truth.json hold these examples).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "frontend"))
sys.path.insert(0, str(ROOT / "tests"))

from cli._support import semcheck, semcheck_many  # noqa: E402

from semcheck.checker.properties.registry import IDS  # noqa: E402

jax = pytest.importorskip("jax")
from jax._src.state.indexing import NDIndexer, Slice  # noqa: E402

from semcheck.checker.frontend.regions import ref_regions  # noqa: E402

EXAMPLES = ROOT / "examples" / "jax_ops"
DATA_SIZED = [  # (the deadlocking variant hangs the interpreter: its record is ground_truth.json's)
    "ragged_all_to_all_offsets.py",
    "buggy/race_ragged_offsets_size_off_by_one.py",
    "recv_count_race_detection.py",
    "buggy/race_recv_count_two_writers.py",
    "dynamic_dma_2nd_minor.py",
    "buggy/dma_bytes_dynamic_dma_wait_one_row_short.py",
]
CLOSED_OVER = ["stateful_async_copy.py", "buggy/exit_leak_stateful_copy_unwaited_send.py"]
GENERATED = "tests/generated_inputs/data_sizes.py"
MODES = ("eager", "on_wait", "hardware")


# --- regions, without a kernel ------------------------------------------------------------


@pytest.mark.rule("ACC-7")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 24)), min_size=2, max_size=6))
def test_each_device_s_slice_size_gives_its_own_region(copies):
    """`x.at[pl.ds(start, size)]` with start and size per device: each device's region is the rows
    numpy's slicing gives it, exact; a size of 0 touches nothing."""
    starts = np.array([s for s, _ in copies], np.int32)
    sizes = np.array([n for _, n in copies], np.int32)
    view = NDIndexer((Slice(starts, sizes, 1), Slice(0, 128, 1)), (64, 128), ())
    regions = ref_regions((64, 128), (view,), dtype=np.float32)
    if len(regions) == 1:
        regions = regions * len(copies)
    for (start, size), region in zip(copies, regions):
        if size == 0:
            assert region is None
        else:
            assert region.box == ((start, start + size), (0, 128)) and region.exact


@pytest.mark.rule("ACC-7")
def test_a_size_the_same_on_every_device_keeps_one_region():
    view = NDIndexer((Slice(np.array([3]), np.array([5]), 1), Slice(0, 128, 1)), (64, 128), ())
    (region,) = ref_regions((64, 128), (view,), dtype=np.int32)
    assert region.box == ((3, 8), (0, 128)) and region.exact


# --- lowered == interpreted -----------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded():
    from test_frontend import _record

    specs = [str(EXAMPLES / p) for p in DATA_SIZED + CLOSED_OVER]
    return {(r["spec"], n): r for n in (2, 4) for r in _record(n, specs)}


@pytest.mark.jax
@pytest.mark.rule("ACC-7")
@pytest.mark.parametrize("devices", (2, 4))
@pytest.mark.parametrize("path", DATA_SIZED)
def test_data_sized_copies_and_waits_are_what_the_interpreter_does(recorded, path, devices):
    r = recorded[(str(EXAMPLES / path), devices)]
    assert r["status"] == "match", r.get("difference") or r.get("error") or r


@pytest.mark.jax
@pytest.mark.rule("LAUNCH-4")
@pytest.mark.parametrize("devices", (2, 4))
@pytest.mark.parametrize("path", CLOSED_OVER)
def test_a_kernel_closing_over_refs_is_the_call_jax_runs(recorded, path, devices):
    r = recorded[(str(EXAMPLES / path), devices)]
    assert r["status"] == "match", r.get("difference") or r.get("error") or r


# --- verdicts ---------------------------------------------------------------------------------


def _verdicts(run) -> dict[tuple[int, str, str], str]:
    return {(r["devices"], r["dma_mode"], r["property"]): r["verdict"] for r in run.json()["results"]}


@pytest.mark.jax
@pytest.mark.rule("ACC-7", "LAUNCH-4")
def test_the_ported_kernels_decide_every_property():
    """No property is unknown on the data-sized or closed-over kernels at 2 and 4 devices, in any mode;
    the clean ones are proved and each seeded bug is violated where it was put."""
    paths = ["ragged_all_to_all_offsets.py", "recv_count_race_detection.py", "dynamic_dma_2nd_minor.py",
             "stateful_async_copy.py", "buggy/race_recv_count_two_writers.py",
             "buggy/exit_leak_stateful_copy_unwaited_send.py"]
    runs = semcheck_many([(("verify", str(EXAMPLES / p), "--devices", "2,4", "--format", "json", "--no-cache"),
                           {"cwd": ROOT, "timeout": 600}) for p in paths])
    expect = {"buggy/race_recv_count_two_writers.py": {"race-free"},
              "buggy/exit_leak_stateful_copy_unwaited_send.py": {"exit-balance", "dma-bytes"}}
    for path, run in zip(paths, runs):
        got = _verdicts(run)
        assert len(got) == 2 * 3 * len(IDS), (path, run.stderr)
        violated = expect.get(path, set())
        for (n, mode, prop), verdict in got.items():  # a call inside run_state is followed too (PRG-129)
            assert verdict == ("violated" if prop in violated else "proved"), (path, n, mode, prop, verdict)


SHAPES = """\
import importlib.util
import jax

spec = importlib.util.spec_from_file_location("m", {path!r})
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)


def build(num_devices, dma_mode="eager", interpret=None):
    fn, (index, size) = m.build(num_devices, dma_mode=dma_mode, interpret=interpret)
    return fn, tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (index, size))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-7")
def test_a_size_from_arguments_given_as_shapes_is_unknown_with_the_hint(tmp_path):
    target = tmp_path / "shapes_only.py"
    target.write_text(SHAPES.format(path=str(EXAMPLES / "dynamic_dma_2nd_minor.py")))
    run = semcheck("verify", str(target), "--devices", "2", "--format", "json", "--no-cache", cwd=ROOT)
    rows = run.json()["results"]
    assert rows and all(r["verdict"] == "unknown" for r in rows), run.stderr
    reason = rows[0]["reason"]
    assert "the size of the DMA's source view" in reason and "not jax.ShapeDtypeStruct" in reason
    assert "dynamic_dma_2nd_minor.py:" in reason


# --- generated inputs ---------------------------------------------------------------------------


def _generated(name: str, devices: str, examples: int):
    return (("verify", f"{GENERATED}::{name}", "--devices", devices, "--examples", str(examples),
             "--format", "json", "--no-cache"), {"cwd": ROOT, "timeout": 600})


@pytest.mark.jax
@pytest.mark.slow  # five generated-input runs with shrinking: about 40 s on two cores
@pytest.mark.rule("ACC-7", "RUN-8")
def test_generated_sizes_prove_the_clean_kernels_and_shrink_the_seeded_bugs():
    clean, copy, wrong_row, short, off_by_one, pairs = semcheck_many([
        _generated("ragged_offsets", "2,4", 4), _generated("dynamic_dma", "2,4", 4),
        _generated("ragged_offsets_wrong_row", "2,4", 8), _generated("dynamic_dma_short_wait", "2,4", 4),
        _generated("ragged_offsets_off_by_one", "2", 4), _generated("recv_count_pairs", "2", 10)])
    for run in (clean, copy):
        rows = run.json()["results"]
        assert run.returncode == 0 and len(rows) == 2 * 3 * len(IDS), run.stderr
        assert all(r["verdict"] == "proved" and r["reason"] == "proved for 4 generated inputs" for r in rows)

    rows = wrong_row.json()["results"]
    deadlocks = [r for r in rows if r["property"] == "deadlock-free"]
    assert {(r["devices"], r["dma_mode"]) for r in deadlocks if r["verdict"] == "violated"} == {
        (n, m) for n in (2, 4) for m in MODES}
    for r in deadlocks:
        values = r["input"]["value"]
        assert r["input"]["shrink_steps"] > 0 and len(values) <= len(json.loads(r["input"]["shrunk_from"]))
        # the shrunk table really gives some device a receive total other than its neighbour's
        assert _totals_differ(values, r["devices"])

    rows = short.json()["results"]
    for prop in ("exit-balance", "dma-bytes"):
        got = [r for r in rows if r["property"] == prop]
        assert {r["verdict"] for r in got} == {"violated"}
        assert all(r["input"]["value"] == [[0, 1]] for r in got)  # one copy of one row, from row 0

    rows = off_by_one.json()["results"]
    races = [r for r in rows if r["property"] == "race-free"]
    assert {r["verdict"] for r in races} == {"violated"} and len(races) == 3
    assert all("witness" in r for r in races)

    # jax's race-detection kernel: two copies into one device's block, shrunk to device 0's two to itself
    races = [r for r in pairs.json()["results"] if r["property"] == "race-free"]
    assert {r["verdict"] for r in races} == {"violated"}
    assert all(r["input"]["value"] == [[0, 0], [0, 0]] for r in races)


def _totals_differ(values: list[int], n: int) -> bool:
    groups = 2 * n
    flat = [values[k % len(values)] for k in range(n * groups)]
    sizes = np.asarray(flat).reshape(n, n, 2)
    totals = sizes.sum(axis=(0, 2))
    return bool((totals != np.roll(totals, -1)).any())


@pytest.mark.jax
@pytest.mark.rule("DR-4")
def test_off_by_one_on_a_uniform_table_at_four_devices_has_a_replayable_witness(tmp_path):
    target = tmp_path / "uniform.py"
    target.write_text(
        "import importlib.util\nimport numpy as np\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(EXAMPLES / 'buggy/race_ragged_offsets_size_off_by_one.py')!r})\n"
        "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\n\n\n"
        "def build(num_devices, dma_mode='eager', interpret=None):\n"
        "    return m.build(num_devices, dma_mode=dma_mode, interpret=interpret,\n"
        "                   sizes=np.ones((num_devices, 2 * num_devices), np.int32))\n")
    run = semcheck("verify", str(target), "--devices", "4", "--dma-mode", "eager", "--format", "json",
                   "--no-cache", cwd=ROOT)
    assert run.returncode == 1, run.stderr
