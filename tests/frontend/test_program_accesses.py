"""Accesses at call boundaries: the read of a call's results after it, and the XLA uses of results
between the calls of a program (specs/semantics/calls.md PRG-9, PRG-108, PRG-120, PRG-121).

The read after a call is compared with jax's interpreter run for real (its `get` callbacks
recorded); the verdicts come from the CLI, as a user gets them, and are held against
tests/programs/ground_truth.json, where jax's race detector ran the same examples.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.jax

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SEMCHECK = [sys.executable, "-m", "semcheck.checker.run.cli"]
WRITEBACK = "examples/programs/buggy/unwaited_writeback.py"
START_WITHOUT_DONE = "examples/programs/buggy/async_copy_start_without_done.py"
GROUND_TRUTH = json.loads((REPO / "tests" / "programs" / "ground_truth.json").read_text())


def _verify(path: str, mode: str = "all", devices: str = "2") -> dict:
    run = subprocess.run([*SEMCHECK, "verify", path, "--devices", devices, "--dma-mode", mode, "--format", "json",
                          "--no-cache"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    jobs = {WRITEBACK: (WRITEBACK, "all", "2,4"), START_WITHOUT_DONE: (START_WITHOUT_DONE, "hardware", "2"),
            "dropped": (str(HERE / "programs" / "async_remote_without_recv_done.py"), "hardware", "2")}
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(jobs, pool.map(lambda a: _verify(*a), jobs.values())))


def _rows(report: dict, prop: str) -> list[dict]:
    return [r for r in report["results"] if r["property"] == prop]


def _message(row: dict) -> str:
    return (row.get("witness") or {}).get("message", "") or row.get("reason", "")


def _line(path: str, text: str) -> int:
    return next(i for i, s in enumerate((REPO / path).read_text().splitlines(), 1) if text in s)


# --- the read of the results after a call --------------------------------------------------------


def _kernels():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def two_results(x_ref, o_ref, p_ref, acc, sem):
        o_ref[...] = x_ref[...] * 2.0
        acc[...] = x_ref[...] + 1.0
        c = pltpu.make_async_copy(acc, p_ref, sem)
        c.start()
        c.wait()

    x = jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128)
    call = pl.pallas_call(
        two_results, grid=(2,),
        out_shape=(jax.ShapeDtypeStruct((16, 128), jnp.float32), jax.ShapeDtypeStruct((8, 128), jnp.float32)),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=(pl.BlockSpec((8, 128), lambda i: (i, 0)), pl.BlockSpec(memory_space=pl.ANY)),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=pltpu.InterpretParams())
    return call, (x,)


def _interpreted_result_reads(f, args):
    """The interpreter's reads of HBM buffers without block indices: its read of the results at the end."""
    import jax
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax._src.pallas.mosaic.interpret import utils

    seen: list[tuple[int, tuple]] = []
    hbm = ipc.TPU_MEMORY_SPACE_IDXS[ipc.mosaic_core.MemorySpace.HBM]
    real_get = ipc.get

    def get(*a, **k):
        if len(a) == 6 and int(a[3]) == hbm:  # (token, device, core, space, buffer, transforms): no grid step
            rng = utils.to_range(jax.tree.map(int, a[5]))
            seen.append((int(a[2]), tuple((s.start, s.stop) for s in rng)))
        return real_get(*a, **k)

    get.__wrapped__ = real_get.__wrapped__
    ipc.get = get
    try:
        jax.block_until_ready(jax.jit(f)(*args))
    finally:
        ipc.get = real_get
    return seen


@pytest.mark.rule("PRG-120")
def test_a_call_reads_its_results_after_its_cores_as_the_interpreter_does():
    from semcheck.checker.frontend.call_boundary import is_boundary
    from semcheck.checker.frontend.lower import lower_kernel
    from semcheck.checker.frontend.trace import trace_kernels
    from semcheck.model.ops import Access, ExitCheck

    f, args = _kernels()
    (call,) = trace_kernels(f, args)
    program = lower_kernel(call)
    (core,) = program.cores
    reads = [op for op in core if is_boundary(op)]
    assert [(0, op.region.box) for op in reads] == _interpreted_result_reads(f, args)
    assert [op.region.box for op in reads] == [((0, 16), (0, 128)), ((0, 8), (0, 128))]
    assert all(type(op) is Access and not op.write for op in reads)
    # after every other access of the call, right before its exit check
    last = max(i for i, op in enumerate(core) if type(op) is Access and not is_boundary(op))
    first_read = core.index(reads[0])
    assert last < first_read and type(core[first_read + len(reads)]) is ExitCheck


@pytest.mark.rule("PRG-120", "PRG-9")
def test_an_unwaited_write_back_races_with_the_read_of_the_result(reports):
    start = _line(WRITEBACK, "make_async_copy(acc, o_hbm, sem).start()")
    rows = _rows(reports[WRITEBACK], "race-free")
    assert {(r["devices"], r["dma_mode"]) for r in rows} == {(n, m) for n in (2, 4)
                                                             for m in ("eager", "on_wait", "hardware")}
    for r in rows:
        assert r["verdict"] == "violated", r
        msg = _message(r)
        assert f"unwaited_writeback.py:{start}" in msg and "the read of result 'o_hbm' after the call" in msg, msg


@pytest.mark.rule("PRG-120", "PRG-14")
def test_the_prediction_agrees_with_jax_s_race_detector(reports):
    """Where jax's detector (one message per device and call) reported the race, semcheck finds it; where the
    copy never ran (on_wait), the read is stale: the recorded result is wrong."""
    verdicts = {(r["devices"], r["dma_mode"]): r["verdict"] for r in _rows(reports[WRITEBACK], "race-free")}
    cases = [c for c in GROUND_TRUTH["cases"] if c["path"] == WRITEBACK]
    assert {c["dma_mode"] for c in cases if c["detect_races"]} >= {"eager"}
    for c in cases:
        key = (c["devices"], c["dma_mode"])
        if key not in verdicts:
            continue
        if c["dma_mode"] == "eager" and c["detect_races"]:
            assert c["race_messages"] >= 1 and verdicts[key] == "violated", c["key"]
        if c["dma_mode"] == "on_wait":
            assert c["output_matches_reference"] is False and verdicts[key] == "violated", c["key"]


@pytest.mark.rule("PRG-120")
def test_an_on_wait_race_with_the_read_after_the_call_says_what_jax_shows(reports):
    """Under on_wait jax drops the copy and its detector is silent (D29): the message says so, so that a
    violated race-free next to jax's clean race report reads as a prediction, not a contradiction."""
    for r in _rows(reports[WRITEBACK], "race-free"):
        msg = _message(r)
        said = "drops one left in flight at the end of the call (D29)" in msg and "reports nothing" in msg
        assert said == (r["dma_mode"] == "on_wait"), (r["dma_mode"], msg)


# --- uses of results between the calls of a program -------------------------------------------


def _probe(spec: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "program_probe.py"), "--devices", "2", spec],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(s.split(" ", 1)[1]) for s in out.stdout.splitlines() if s.startswith("@@PROGRAM_PROBE@@ ")]
    return row


@pytest.mark.rule("PRG-121")
def test_xla_uses_of_results_are_accesses_at_their_lines():
    row = _probe(START_WITHOUT_DONE)
    xla = _line(START_WITHOUT_DONE, "return dst + 0.0")
    boundary = row["composed"]["boundary"]
    assert len(boundary) == 2  # core 0 of each device, each using its own shard
    for per_core in boundary:
        ((call, buf, write, what, file, line),) = per_core
        # the XLA add is its destination's last use: XLA may put the add's result there (a write)
        assert (call, file, line, write) == (0, "async_copy_start_without_done.py", xla, True), per_core
        assert what.startswith("the XLA operation 'add' on result 'dst_ref' of _start_kernel (call 0")
        assert buf == "_start_kernel#0.hbm1"
    # a program that returns its calls' results reads them at its end, after the last call; the
    # interpreter's own read at the end of each call is not a TPU's
    correct = _probe("examples/programs/async_copy.py")
    for ks, per_core in zip(correct["composed"]["calls"], correct["composed"]["boundary"]):
        assert [(a[0], a[2]) for a in per_core] == [(ks[-1], False)] * 2, per_core
        assert all(a[3].startswith("the program's return of result") for a in per_core)
        assert {a[1] for a in per_core} == {"_start_kernel#0.hbm1", "_start_kernel#1.hbm1"}


@pytest.mark.rule("PRG-121", "PRG-9")
def test_a_start_without_done_races_with_the_xla_read(reports):
    (row,) = _rows(reports[START_WITHOUT_DONE], "race-free")
    assert row["verdict"] == "violated", row
    msg = _message(row)
    copy = _line("examples/programs/async_copy.py", "pltpu.make_async_copy(src_ref, dst_ref, sem).start()")
    call = _line("examples/programs/async_copy.py", "x, dst, sem = pl.pallas_call(")
    xla = _line(START_WITHOUT_DONE, "return dst + 0.0")
    assert f"async_copy.py:{copy}" in msg and f"async_copy.py:{call}" in msg
    assert f"async_copy_start_without_done.py:{xla}" in msg and "the XLA operation 'add'" in msg


@pytest.mark.rule("PRG-108")
def test_a_copy_into_a_buffer_the_program_drops_is_unknown(reports):
    (row,) = _rows(reports["dropped"], "race-free")
    assert row["verdict"] == "unknown", row
    # the copy is remote and lands after its destination's last use: invocation-confined is violated
    # there, and PRG-114's reason (which cites it) takes precedence over PRG-108's gap
    assert ("after the last use of its buffer in the program" in row["reason"]
            or "invocation-confined is violated" in row["reason"]), row["reason"]
    assert "_futures.py:" in row["reason"]
