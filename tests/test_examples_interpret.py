"""Run the example kernels in Pallas TPU interpret mode and compare with ground truth.

tests/kernels/ground_truth.json records what the interpreter actually does
for every example (completed / hang / error, error message, non-zero-count
warnings).  The default selection below runs a representative subset (about
a minute on two cores); the full matrix is marked slow.

Each run happens in a subprocess (tests/kernels/run_interpret.py): the cases
whose ground truth completes share one per device count, every other case has
its own.  A case whose ground truth is "hang" is given HANG_TIMEOUT seconds;
every other case gets a generous timeout, which costs nothing unless it
unexpectedly hangs.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.jax

REPO = Path(__file__).resolve().parents[1]
_RUNNER = REPO / "tests" / "kernels" / "run_interpret.py"


def _load_runner():
    spec = importlib.util.spec_from_file_location("semcheck_tests_run_interpret", _RUNNER)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


ri = _load_runner()
GT = ri.load_ground_truth()
CASES = {ri.case_key(c["path"], c["devices"], c["dma_mode"], c["kwargs"]): c for c in GT["cases"]}

HANG_TIMEOUT = float(os.environ.get("SEMCHECK_INTERPRET_HANG_TIMEOUT", "15"))
HANG_IDLE = 2.0  # a run expected to hang: this long without CPU in the kernel call ends it (run_interpret._wait)
COMPLETE_TIMEOUT = float(os.environ.get("SEMCHECK_INTERPRET_TIMEOUT", "120"))


def _timeout(case):
    return HANG_TIMEOUT if case["outcome"] == "hang" else COMPLETE_TIMEOUT


def _check(case):
    report = ri.run_kernel(
        REPO / case["path"], case["devices"], case["dma_mode"], _timeout(case),
        kwargs=case["kwargs"], idle=HANG_IDLE if case["outcome"] == "hang" else None,
    )
    problems = ri.compare_to_ground_truth(report, case, GT["examples"].get(case["path"]))
    return report, problems


# A modest selection: every clean kernel once, each failure class at least
# once, both DMA modes and more than one device count.
QUICK = [
    ("examples/ring_permute.py", 2, "eager", {}),
    ("examples/ring_allgather.py", 4, "on_wait", {}),
    ("examples/ring_allreduce.py", 4, "eager", {}),
    ("examples/bidirectional_reduce_scatter.py", 2, "on_wait", {}),
    ("examples/scoped_semaphores.py", 2, "eager", {}),
    ("examples/double_buffered_pipeline.py", 2, "on_wait", {}),
    ("examples/two_core_signal.py", 2, "eager", {}),
    ("examples/emit_pipeline.py", 2, "eager", {}),
    ("examples/buggy/fixed_id_collision.py", 2, "eager", {}),
    ("examples/buggy/fixed_id_collision.py", 2, "eager", {"collective_id": 2002}),
    ("examples/buggy/fixed_id_collision_scoped.py", 2, "on_wait", {}),
    ("examples/buggy/int16_overflow.py", 2, "eager", {}),
    ("examples/buggy/int16_overflow.py", 2, "eager", {"steps": 16}),
    ("examples/buggy/exit_leak_extra_signal.py", 2, "on_wait", {}),
    ("examples/buggy/exit_leak_unwaited_send.py", 4, "eager", {}),
    ("examples/buggy/dma_byte_mismatch_wait_smaller.py", 2, "eager", {}),
    ("examples/buggy/exit_leak_two_semaphores.py", 2, "eager", {}),
    ("examples/buggy/missing_signal_deadlock.py", 2, "eager", {}),
    ("examples/buggy/cyclic_wait_deadlock.py", 2, "on_wait", {}),
    ("examples/buggy/two_core_missing_core_index.py", 2, "eager", {}),
    ("examples/buggy/two_core_signal_hangs_on_tpu.py", 2, "on_wait", {}),
    ("examples/buggy/regular_semaphore_dma_leaks_in_interpreter.py", 2, "on_wait", {}),
    ("examples/jax_ops/ragged_all_to_all.py", 4, "on_wait", {}),
    ("examples/jax_ops/buggy/deadlock_ragged_all_to_all_transposed_counts.py", 4, "eager", {}),
    # DMA sizes from data (ACC-7) and a kernel closing over refs (LAUNCH-4)
    ("examples/jax_ops/ragged_all_to_all_offsets.py", 2, "on_wait", {}),
    ("examples/jax_ops/stateful_async_copy.py", 2, "eager", {}),
    # the grid's block copies (GRID-1 .. GRID-3): the races complete, the revisited block raises
    ("examples/buggy/race_grid_writeback_prefetch_off_by_one.py", 2, "eager", {}),
    ("examples/buggy/race_megacore_grid_same_output_block.py", 2, "on_wait", {}),
    ("examples/inplace_prefetch_grid.py", 2, "on_wait", {}),
    ("examples/buggy/revisited_output_block.py", 2, "eager", {}),
    # run_scoped buffers (BUF-14, D32): a KeyError at the late wait under on_wait; the fix completes
    ("examples/buggy/scope_writeback_outlives_buffer.py", 2, "on_wait", {}),
    ("examples/scope_writeback_waited_in_scope.py", 2, "on_wait", {}),
    # a window past a full sequence's end: the wait that runs the copy raises under on_wait (ACC-10, ACC-11)
    ("examples/buggy/conv_state_window_off_by_one.py", 2, "on_wait", {}),
    # jax's shipped ops, through tests/test_shipped_ops.py's builders
    ("tests/test_shipped_ops.py::paged_attention_megacore_kv_head", 2, "on_wait", {}),
    ("tests/test_shipped_ops.py::ragged_paged_attention", 2, "eager", {}),
]


def _id(cfg):
    path, n, mode, kw = cfg
    name = path.removeprefix("examples/").removesuffix(".py").replace("tests/test_shipped_ops.py::", "")
    extra = "-" + ",".join(f"{k}={v}" for k, v in kw.items()) if kw else ""
    return f"{name}-{n}dev-{mode}{extra}"


@pytest.fixture(scope="module")
def completed_runs():
    """The QUICK cases whose ground truth completes, per device count in one child (`run_kernels`: jax
    started once rather than once per case, ~2.5 s each), on first use; a case that hangs or fails in
    the interpreter keeps a child of its own (a hang is ended by killing its process)."""
    done: dict[int, dict[str, dict]] = {}

    def report(case):
        n = case["devices"]
        if n not in done:
            keys = [ri.case_key(*c) for c in QUICK if c[1] == n]
            cases = [CASES[k] for k in keys if k in CASES and CASES[k]["outcome"] == "completed"]
            runs = ri.run_kernels([(REPO / c["path"], c["dma_mode"], c["kwargs"]) for c in cases], n,
                                  COMPLETE_TIMEOUT)
            done[n] = {ri.case_key(c["path"], n, c["dma_mode"], c["kwargs"]): r for c, r in zip(cases, runs)}
        return done[n][ri.case_key(case["path"], n, case["dma_mode"], case["kwargs"])]

    return report


@pytest.mark.parametrize("cfg", QUICK, ids=[_id(c) for c in QUICK])
def test_example_matches_ground_truth(cfg, completed_runs):
    key = ri.case_key(*cfg)
    assert key in CASES, f"no ground truth for {key}; rerun make_ground_truth.py"
    case = CASES[key]
    if case["outcome"] == "completed":
        report = completed_runs(case)
        problems = ri.compare_to_ground_truth(report, case, GT["examples"].get(case["path"]))
    else:
        report, problems = _check(case)
    assert not problems, (
        f"{key}: {problems}\nreport: {json.dumps({k: v for k, v in report.items() if k != 'stderr_tail'}, indent=1)}"
    )


@pytest.mark.slow
def test_full_matrix_matches_ground_truth():
    workers = int(os.environ.get("SEMCHECK_INTERPRET_WORKERS", "3"))
    failures = []
    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futs = {pool.submit(_check, c): k for k, c in CASES.items()}
        for fut in cf.as_completed(futs):
            _, problems = fut.result()
            if problems:
                failures.append(f"{futs[fut]}: {problems}")
    assert not failures, "\n".join(sorted(failures))


# --------------------------------------------------------------------------
# cheap consistency checks (no kernels run)
# --------------------------------------------------------------------------

EXAMPLE_FILES = sorted(  # programs of several calls have their own record (tests/programs/)
    str(p.relative_to(REPO)) for p in (REPO / "examples").rglob("*.py")
    if p.name != "__init__.py" and "programs" not in p.relative_to(REPO / "examples").parts
)


def test_every_example_has_ground_truth():
    assert set(EXAMPLE_FILES) == set(GT["examples"]), (
        "examples/ and ground_truth.json disagree: "
        f"{sorted(set(EXAMPLE_FILES) ^ set(GT['examples']))}"
    )
    covered = {c["path"] for c in GT["cases"]}
    assert set(EXAMPLE_FILES) <= covered


@pytest.mark.parametrize("path", EXAMPLE_FILES)
def test_example_file_shape(path):
    """Plain jax file: docstring, module-level build(num_devices, **kw), no semcheck import."""
    tree = ast.parse((REPO / path).read_text())
    assert ast.get_docstring(tree), f"{path} lacks a module docstring"
    builds = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build"]
    assert builds, f"{path} has no module-level build()"
    args = builds[0].args
    assert args.args and args.args[0].arg == "num_devices"
    assert "dma_mode" in [a.arg for a in args.kwonlyargs]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "semcheck" for a in node.names)
        if isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] != "semcheck"
    if path.startswith("examples/buggy/"):
        assert "BUG" in (REPO / path).read_text(), f"{path} does not mark its bug"


def test_ground_truth_has_each_outcome_kind():
    outcomes = {c["outcome"] for c in GT["cases"]}
    assert {"completed", "hang", "error"} <= outcomes
    assert not any(o.startswith("flaky") for o in outcomes)


@pytest.mark.parametrize(
    "key", sorted(CASES),
    ids=lambda k: k.replace("examples/", "").replace("tests/test_shipped_ops.py::", "").replace("|", "-")
)
def test_ground_truth_agrees_with_intended_verdict(key):
    """What the interpreter did must be consistent with what the example is meant to be."""
    c = CASES[key]
    kind = c["expected_kind"]
    if kind in ("clean", "tpu_hang"):  # tpu_hang: a bug only a TPU shows (interpret mode completes)
        assert c["outcome"] == "completed" and not c["leaks_observed"]
        assert c["output_matches_reference"] is True
    elif kind in ("deadlock", "id_disagreement"):
        assert c["outcome"] == "hang"
    elif kind == "race":  # semaphores balance: it completes, though the numbers may be wrong
        assert c["outcome"] == "completed"
        # unless the race is on a count the waits are sized by (ACC-9): then only the declared leaks
        declared = GT["examples"][c["path"]].get("expected_leaks", [])
        assert all(p in declared for p in c["leaks_observed"])
    elif kind == "exit_leak":
        assert c["outcome"] == "completed"
        declared = GT["examples"][c["path"]]
        if c["dma_mode"] in declared.get("leaks_in", ("eager", "on_wait")):
            assert c["leaks_observed"]
            assert all(p in declared["expected_leaks"] for p in c["leaks_observed"])
        else:  # PROP-5: under on_wait a copy no wait runs is dropped at the call's end, and nothing is printed
            assert not c["leaks_observed"]
    elif kind == "id_collision":
        assert c["outcome"] == "error" and c["error_type"] == "ValueError"
        cid = GT["examples"][c["path"]]["colliding_id"]
        assert c["error_message"] == f"Semaphore {cid} occurs as both fixed-id and internal."
    elif kind == "int16_overflow":
        # Either the allocation raises, a wrapped (negative) id is looked up,
        # or the wrapped ids are never used and the kernel completes.
        assert (
            (c["outcome"] == "error" and c["error_type"] in ("OverflowError", "KeyError"))
            or (c["outcome"] == "completed" and c["output_matches_reference"])
        )
    elif kind == "window_error":  # ACC-10: eager raises at the empty copy; on_wait's 0-byte wait never runs it
        # (a copy whose bytes a wait needs raises under on_wait too: its `raises_in` says so)
        declared = GT["examples"][c["path"]]
        if c["dma_mode"] in declared.get("raises_in", ["eager"]):  # or the barrier it broke elsewhere (ERR-7)
            assert c["outcome"] == "error"
            assert c["error_type"] in (declared["error_type"], *declared.get("also_surfaces", ()))
        else:
            assert c["outcome"] == "completed" and c["output_matches_reference"]
    elif kind == "clock_error":  # RACE-1: with race detection a wait no signal reached fails its assertion
        declared = GT["examples"][c["path"]]
        if c["dma_mode"] in declared["raises_in"]:  # or the barrier the failure broke on another device (ERR-7)
            assert c["outcome"] == "error"
            assert c["error_type"] in (declared["error_type"], *declared.get("also_surfaces", ()))
        else:
            assert c["outcome"] == "completed" and c["output_matches_reference"] is True
    elif kind == "interpreter_error":  # a TPU runs it; the interpreter raises (D12, D22, D24)
        declared = GT["shipped_ops"].get(c["path"]) or GT["examples"][c["path"]]
        assert c["outcome"] == "error"
        assert c["error_type"] in (declared["error_type"], *declared.get("also_surfaces", ()))
    elif kind == "scope_error":  # BUF-14: KeyError where the interpreter runs a half outside its scope
        declared = GT["examples"][c["path"]]
        if c["dma_mode"] in declared["raises_in"]:  # or the barrier the failure broke on another device (ERR-7)
            assert c["outcome"] == "error"
            assert c["error_type"] in (declared["error_type"], *declared.get("also_surfaces", ()))
            if c["error_type"] == declared["error_type"]:
                assert c["error_fragment"].startswith("('vmem', ")
        else:  # the other mode runs the half inside the scope, with the right numbers (D32)
            assert c["outcome"] == "completed" and c["output_matches_reference"] is True
    else:  # pragma: no cover - new kinds must be handled here
        pytest.fail(f"unknown kind {kind!r}")


def test_innermost_error_unwraps_callback_failures():
    text = (
        "jax.errors.JaxRuntimeError: INTERNAL: CpuCallback error calling callback: "
        "Traceback (most recent call last):\n"
        "RuntimeError: Computation failed on (0, 0) with exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "ValueError: Semaphore 2000 occurs as both fixed-id and internal.\n"
    )
    assert ri.innermost_error(text) == (
        "ValueError", "Semaphore 2000 occurs as both fixed-id and internal."
    )
    assert ri.innermost_error("KeyError: -32768\n") == ("KeyError", "-32768")


def test_nonzero_warning_parsing():
    out = (
        "noise\nSemaphore 2001 has non-zero count for 3 (global core 6) at kernel exit: 2048\n"
        "Semaphore 0 has non-zero count for 1 (global core 1) at kernel exit: 1\n"
    )
    lines = ri.nonzero_count_warnings(out)
    assert len(lines) == 2
    assert ri.parse_nonzero_warning(lines[0]) == {"sem": 2001, "device": 3, "core": 6, "count": 2048}
    assert ri.leak_pairs(lines) == [
        {"semaphore": 0, "count": 1}, {"semaphore": 2001, "count": 2048}
    ]
