"""ACC-41, ACC-42, ACC-57: float logits a kernel fetches itself with a local copy, and the bound on float refs.

The test kernels (`kernels/float_tiles.py`) fetch a block of gating logits from an HBM input into a VMEM buffer,
pick each token's expert by an argmax of the block and size a copy with the count routed to the device; one
passes its logits through `pltpu.with_memory_space_constraint` first (ACC-26) and double-buffers them as a shipped
kernel does (2 x 8 x 128 floats, past ACC-25's former 1,024). What jax's interpreter does with them is compared
here: the lowered events (byte counts included) are the interpreter's, and its race detector reports the block
read before the fetch's wait.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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

KERNEL = "tests/frontend/kernels/float_tiles.py"
CLEAN = ["tile_fetch", "gating_double_buffer"]
FETCH, READ = 51, 53  # the racy twin's fetch (its start) and its load of the block
COPY = 60  # the copy the routed count sizes (its start)
IDS_COPY = 127  # `tile_topk_ids`'s copy the histogram of the ids sizes (its start)


def _rows(spec: str, devices: str, code: int) -> list[dict]:
    run = semcheck("verify", spec, "--devices", devices, "--dma-mode", "all", "--format", "json", "--no-cache",
                   "--no-config", cwd=ROOT, timeout=900)
    assert run.returncode == code, run.stderr[-2000:]
    return json.loads(run.stdout)["results"]


@pytest.mark.jax
@pytest.mark.rule("ACC-41", "ACC-42", "ACC-26")
def test_float_tiles_local_copies_move_decide_every_property():
    """Before ACC-41 the block's logits were unknown (a ref a DMA writes) and so was the copy's size: every
    property unknown; `gating_double_buffer` needs ACC-42's bound and ACC-26's constraint too."""
    rows = [r for t in CLEAN for r in _rows(f"{KERNEL}::{t}", "2,4", 0)]
    assert len(rows) == len(CLEAN) * 2 * 3 * 8  # targets x devices x modes x properties
    assert {r["verdict"] for r in rows} == {"proved"}, [r for r in rows if r["verdict"] != "proved"][:1]


@pytest.mark.jax
@pytest.mark.rule("ACC-41", "ACC-71")
def test_a_tile_read_before_its_fetch_wait_is_a_race_and_nothing_else_is_proved():
    """But under eager, which lands the fetch at its start, before the load in every run: the tile read is the
    fetched one and the rest is proved (ACC-71; jax completes the kernel under eager, no semaphore left non-zero).
    Under on_wait the load reads the scratch's NaN fill, which semcheck does not compute through an argmax."""
    rows = _rows(f"{KERNEL}::tile_read_before_wait", "2", 1)
    assert {r["dma_mode"] for r in rows} == {"eager", "on_wait", "hardware"}
    for r in rows:
        if r["property"] == "race-free":
            assert r["verdict"] == "violated"  # the load against the fetch's write, as jax's detector reports
            assert {loc["line"] for loc in r["witness"]["locations"]} == {FETCH, READ}
        elif r["dma_mode"] == "eager":
            assert r["verdict"] == "proved", r
        else:
            assert r["verdict"] == "unknown", r
            assert f"float_tiles.py:{FETCH}" in r["reason"] and "ACC-9" in r["reason"]


@pytest.mark.jax
@pytest.mark.rule("ACC-41")
@pytest.mark.parametrize("devices", [2, 4])
def test_lowered_float_tiles_are_what_the_interpreter_does(devices):
    from float_tiles import count
    from test_frontend import _record

    for r in _record(devices, [f"float_tiles.py::{t}" for t in CLEAN]):
        assert r["status"] == "match", r.get("difference") or r.get("error") or r
        assert r["outcome"] == "completed"
        assert r["lowered_events"] == r["recorded_events"] > 0
    # the counts the lowering followed are not all alike, so a wrong block or device would show in the bytes
    assert len(set(count(devices, 8, 0))) > 1 or len(set(count(devices, 16, 1))) > 1


@pytest.mark.jax
@pytest.mark.rule("ACC-57")
def test_copied_float_ids_used_as_an_index_decide_every_property():
    """The top-1 lanes of the fetched block, moved to SMEM by a local copy and used as a histogram's index, size the
    copy: before ACC-57 the index's value lost its mark and the copy's size was unknown in every mode."""
    rows = _rows(f"{KERNEL}::tile_topk_ids", "2,4", 0)
    assert len(rows) == 2 * 3 * 8
    assert {r["verdict"] for r in rows} == {"proved"}, [r for r in rows if r["verdict"] != "proved"][:1]


@pytest.mark.jax
@pytest.mark.rule("ACC-57")
@pytest.mark.parametrize("devices", [2, 4])
def test_copied_float_ids_lower_to_what_the_interpreter_does(devices):
    from float_tiles import count
    from test_frontend import _record

    (r,) = _record(devices, ["float_tiles.py::tile_topk_ids"])
    assert r["status"] == "match", r.get("difference") or r.get("error") or r
    assert r["outcome"] == "completed" and r["lowered_events"] == r["recorded_events"] > 0
    assert len(set(count(devices, 8, 0))) > 1  # the devices copy different counts: a wrong index would show


@pytest.mark.jax
@pytest.mark.rule("ACC-41")
def test_a_kernel_no_copied_float_decides_keeps_its_data_unfollowed():
    """A data tile a local copy fetches, which decides nothing, is not followed (ACC-41's *when*): the example's
    race on its output stays a race on data, and its deadlock-free violation stands (following every float copy
    made every property but race-free unknown here)."""
    rows = _rows("examples/buggy/race_second_pair_before_empty_copy_at_end.py", "2", 1)
    got = {(r["dma_mode"], r["property"]): r["verdict"] for r in rows}
    assert got[("eager", "race-free")] == "violated"
    assert got[("eager", "deadlock-free")] == "violated"
    assert got[("eager", "id-agreement")] == "proved"


@pytest.mark.rule("ACC-42")
def test_a_float_ref_up_to_the_bound_is_tracked_where_float_copies_are_followed():
    pytest.importorskip("jax")
    from semcheck.checker.frontend.scalar_memory import trackable
    from semcheck.checker.frontend.values import MAX_EVAL_ELEMENTS, MAX_FLOAT_ELEMENTS

    assert MAX_FLOAT_ELEMENTS > MAX_EVAL_ELEMENTS
    # a lowering that follows float copies (ACC-41)
    assert trackable((2, 8, 128), np.float32, "vmem", floats=True)  # the shipped gating buffer (2 x bt x 128)
    assert trackable((MAX_FLOAT_ELEMENTS,), np.float32, "vmem", floats=True)
    assert trackable((16, 128), np.float32, "hbm", hbm=True, floats=True)  # its HBM input
    assert not trackable((MAX_FLOAT_ELEMENTS + 1,), np.float32, "vmem", floats=True)
    assert not trackable((MAX_FLOAT_ELEMENTS + 1,), np.float32, "hbm", hbm=True, floats=True)
    assert not trackable((16, 128), np.float32, "hbm", floats=True)  # HBM only where the caller follows copies
    # every other lowering: ACC-25's bound, and no float data in HBM
    assert trackable((MAX_EVAL_ELEMENTS,), np.float32, "vmem")
    assert not trackable((2, 8, 128), np.float32, "vmem")
    assert not trackable((8,), np.float32, "hbm", hbm=True)


_CHILD = r"""
import json, sys
from semcheck.checker.frontend import provision_devices
provision_devices(2)
import numpy as np
from semcheck.checker.frontend.api import lower_target
from semcheck.checker.frontend.targets import load_targets
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.followed_values import settle
from semcheck.model.ops import DmaStart
table = np.asarray(json.loads(sys.argv[1]), np.float32)
(target,) = load_targets("tests/frontend/kernels/float_tiles.py", target=sys.argv[3])
(kernel,) = lower_target(target, 2, build_kwargs={"table": table})
program = kernel.program
verdicts = {v.property: v for v in check_program(program, "eager")}
verdicts = sorted({v.verdict for v in settle(program, "eager", verdicts, lambda: verdicts["race-free"]).values()})
rows = [sum(op.nbytes for op in core if type(op) is DmaStart and op.loc.line == int(sys.argv[2])) // (128 * 4)
        for core in program.cores]
print(json.dumps({"verdicts": verdicts, "rows": rows}))
"""


@st.composite
def _argmax_lanes(draw):
    """Logits of 2 devices' 8 tokens whose argmax lanes are drawn (each token's top lane above the rest by 1); each
    device's first token is routed to it, so no device's copy is empty (an empty copy is another rule's business,
    ERR-27)."""
    lanes = draw(st.lists(st.integers(0, 127), min_size=16, max_size=16))
    for d in range(2):
        lanes[d * 8] = lanes[d * 8] - lanes[d * 8] % 2 + d % 2
    rest = draw(st.floats(-4, 4, width=32, allow_subnormal=False))
    table = np.full((16, 128), rest, np.float32) + np.arange(128, dtype=np.float32) * np.float32(1e-3)
    table[np.arange(16), lanes] = rest + 2
    return table


@pytest.mark.jax
@pytest.mark.rule("ACC-41")
@settings(max_examples=4, deadline=None, derandomize=True)
@given(_argmax_lanes())
def test_drawn_logits_size_the_copy_as_their_argmax_counts(table):
    """Any logits whose argmax lanes are drawn: the copy each device makes is as many rows as numpy's argmax
    counts on the block the kernel fetched (the logits followed through the local copy), and every property is
    proved in eager."""
    import subprocess

    from float_tiles import count

    p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(table.tolist()), str(COPY), "tile_fetch"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"verdicts": ["proved"], "rows": count(2, 8, 0, table)}


@pytest.mark.jax
@pytest.mark.rule("ACC-57")
@settings(max_examples=3, deadline=None, derandomize=True)
@given(_argmax_lanes())
def test_drawn_logits_size_the_copy_through_the_ids_index(table):
    """Any logits whose top lanes are drawn: through the ids moved to SMEM and the histogram they index, each
    device's copy is as many rows as numpy's argmax counts on the fetched block, and every property is proved."""
    import subprocess

    from float_tiles import count

    p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(table.tolist()), str(IDS_COPY), "tile_topk_ids"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"verdicts": ["proved"], "rows": count(2, 8, 0, table)}


_NARROW_CHILD = r"""
import json
from semcheck.checker.frontend import provision_devices
provision_devices(5)
import numpy as np
from semcheck.checker.frontend.concrete_inputs import trace_with_inputs
from semcheck.checker.frontend.lower import LoweringStats, lower_kernel
from semcheck.checker.frontend.scalar_memory import NeedsFloatCopies, NeedsFloatInputs
from semcheck.checker.frontend.targets import load_targets

out = {}
(t,) = load_targets("tests/frontend/kernels/float_tiles.py", target="tile_fetch")
fn, args = t.build(2)
(call,), (plain,) = trace_with_inputs(fn, args)
(_,), (floats,) = trace_with_inputs(fn, args, floats=True)
out["plain"] = [plain.floats, plain.values[0] is None]
out["floats"] = [floats.floats, bool(np.array_equal(floats.values[0].reshape(-1), np.asarray(args[0]).reshape(-1)))]
for name, kw in (("first", dict(inputs=plain, follow_floats=False)), ("uncomputed", dict(inputs=plain))):
    try:
        lower_kernel(call, **kw)
        out[name] = "lowered"
    except (NeedsFloatCopies, NeedsFloatInputs) as e:
        out[name] = type(e).__name__
out["followed"] = lower_kernel(call, inputs=floats).followed is not None
(t,) = load_targets("examples/ring_allgather.py")
fn, args = t.build(5)
(call,), (inputs,) = trace_with_inputs(fn, args)
stats, first = LoweringStats(), LoweringStats()
program = lower_kernel(call, inputs=inputs, stats=stats)
out["ring"] = [inputs.values[0] is None, program == lower_kernel(call, inputs=inputs, follow_floats=False, stats=first),
               stats.grid_points, stats.grid_points_as_lanes, first.grid_points_as_lanes]
print(json.dumps(out))
"""


@pytest.mark.jax
@pytest.mark.rule("ACC-41", "ACC-42")
def test_float_inputs_are_computed_and_tracked_only_where_a_value_needs_them():
    """ACC-41's *when*: the float logits' HBM input has a value only when asked for (`floats=True`); the first
    lowering, which tracks no float data past 1,024 elements nor in HBM, meets the copied block and asks to follow
    it (`NeedsFloatCopies`), the second asks for the inputs' values (`NeedsFloatInputs`) and, given them, follows.
    A kernel that needs no float value (the ring all-gather at 5 devices, whose per-device float input would
    otherwise make its devices' lanes differ) is lowered once, as without the rule, its grid steps as lanes."""
    import subprocess

    p = subprocess.run([sys.executable, "-c", _NARROW_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["plain"] == [False, True] and got["floats"] == [True, True]
    assert got["first"] == "NeedsFloatCopies" and got["uncomputed"] == "NeedsFloatInputs" and got["followed"]
    none, same, points, as_lanes, first_as_lanes = got["ring"]
    assert none and same and points == as_lanes == first_as_lanes > 0
