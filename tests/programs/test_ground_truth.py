"""The interpreter's recorded behaviour on examples/programs/ (ground_truth.json) and its probes.

The cheap tests check the record: every program file has one, made from the file as it is; what
was recorded agrees with what each file says the interpreter does; and the probes recorded what
specs/semantics/calls.md states (PRG-5, PRG-10 .. PRG-13). One live run (the failing call followed by two
more, the interpreter behaviour semcheck must predict) is in the default run; the slow tests re-run
a selection of programs and the probes and compare with the record.

Regenerate the record with `python tests/programs/make_ground_truth.py` after changing an example.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_ground_truth as mgt  # noqa: E402
import probes  # noqa: E402

REPO = mgt.REPO_ROOT
GT = json.loads(mgt.GROUND_TRUTH_PATH.read_text())
CASES = {c["key"]: c for c in GT["cases"]}
FILES = mgt.example_files()
COLLISION = "Semaphore 2000 occurs as both fixed-id and internal."


def _cases(path):
    return [c for c in GT["cases"] if c["path"] == path]


def _probe(name, devices=2, mode="eager"):
    rows = [r for r in GT["probes"] if r["probe"] == name and r["devices"] == devices
            and r["dma_mode"] == mode]
    assert len(rows) == 1, f"no single record of probe {name} at {devices} devices, {mode}"
    assert rows[0]["status"] == "ok", rows[0]
    return rows[0]["result"]


# --- the record covers the files --------------------------------------------------------------


def test_every_program_file_is_described_and_recorded():
    assert set(FILES) == set(mgt.EXAMPLES), sorted(set(FILES) ^ set(mgt.EXAMPLES))
    assert set(GT["examples"]) == set(FILES)
    for key, _ in [(mgt.case_key(p, kw, n, m, r), None) for p, kw, n, m, r in mgt.configs([], None)]:
        assert key in CASES, f"no record for {key}; rerun tests/programs/make_ground_truth.py"


@pytest.mark.parametrize("path", FILES)
def test_record_was_made_from_the_current_file(path):
    assert GT["examples"][path]["sha256"] == mgt.file_sha256(path), (
        f"{path} changed since it was recorded; rerun "
        f"`python tests/programs/make_ground_truth.py --only {path}`")


@pytest.mark.parametrize("path", FILES)
def test_program_file_shape(path):
    """A kernel file in semcheck's format: docstring, build(num_devices, *, dma_mode, interpret)."""
    text = (REPO / path).read_text()
    tree = ast.parse(text)
    doc = ast.get_docstring(tree)
    assert doc and "interpreter" in doc, f"{path}: the docstring must say what the interpreter does"
    builds = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build"]
    assert builds and builds[0].args.args[0].arg == "num_devices"
    assert {"dma_mode", "interpret"} <= {a.arg for a in builds[0].args.kwonlyargs}
    if "/buggy/" in path:
        assert "BUG" in text, f"{path} does not mark its bug"


# --- the record agrees with what the files say ------------------------------------------------


@pytest.mark.parametrize("path", [p for p, s in mgt.EXAMPLES.items()
                                  if s["interpreter"] == mgt.SEMAPHORE_RESULT])
@pytest.mark.rule("PRG-12")
def test_programs_with_semaphore_results_fail_to_lower(path):
    """PRG-12: correct start/done programs and their misuses alike, before any call starts."""
    cases = _cases(path)
    assert cases
    for c in cases:
        assert (c["outcome"], c["error_type"], c["error_message"]) == (
            "error", "NotImplementedError", "nan + dma_sem"), c["key"]
        assert not c["nonzero_count_warnings"]
        # the program itself traces, with a start kernel (or the misuse's stand-in) among its calls:
        # the calls are there for a front end to follow
        assert any("start" in p or "barrier_only" in p for p in c["pallas_calls"]), (c["key"], c["pallas_calls"])
        # lowering raises: nothing of the program is compiled, so no call starts, an earlier one neither
        for step in c.get("steps", ()):
            assert (step["stage"], step["outcome"], step["message"]) == (
                "lower", "error", "nan + dma_sem"), (c["key"], step)


@pytest.mark.parametrize("path", [p for p, s in mgt.EXAMPLES.items()
                                  if s["interpreter"] == "completes"])
def test_programs_without_semaphore_results_complete_correctly(path):
    """PRG-10: every call ends in a barrier of all devices, so even the programs that are wrong on
    a TPU (PRG-16, PRG-17) complete with the right numbers and no race."""
    cases = _cases(path)
    assert cases
    for c in cases:
        assert c["outcome"] == "completed" and c["output_matches_reference"] is True, c["key"]
        assert not c["nonzero_count_warnings"], c["key"]
        if c["detect_races"]:
            assert c["race_messages"] == 0, c["key"]


@pytest.mark.parametrize("path", [p for p, s in mgt.EXAMPLES.items()
                                  if s["interpreter"] == mgt.LAST_ITERATION_OUT_OF_BOUNDS])
@pytest.mark.rule("PRG-183")
@pytest.mark.rule("PRG-186")
def test_a_loop_whose_last_call_reads_past_its_buffer_raises_there(path):
    """PRG-183: the calls of the loop run one by one with their own layer index; the last one's copy reads past
    the end of its source, and jax's interpreter raises there, in every mode, with and without races. The error the
    jitted call re-raises may be another device's `BrokenBarrierError` (the failing device aborts the barrier the
    others wait at; its IndexError is printed from its thread), at 2 devices too (the `while_loop` example's
    2-device `eager` run), but some run re-raises the IndexError itself."""
    cases = _cases(path)
    assert {(c["devices"], c["dma_mode"]) for c in cases} >= {(n, m) for n in mgt.DEVICES for m in mgt.DMA_MODES}
    for c in cases:
        assert c["outcome"] == "error" and c["error_type"] in ("IndexError", "BrokenBarrierError"), c["key"]
        if c["error_type"] == "IndexError":
            assert c["error_message"].startswith("Out-of-bounds read of"), c["key"]
    assert any(c["error_type"] == "IndexError" for c in cases), path


def test_hazard_examples_were_run_where_the_hardware_verdict_changes():
    for path, spec in mgt.EXAMPLES.items():
        if "from_devices" in spec and spec["interpreter"] == "completes":
            assert any(c["devices"] >= spec["from_devices"] for c in _cases(path)), path


@pytest.mark.rule("PRG-9")
def test_unwaited_writeback_in_the_interpreter():
    """PRG-9: eager runs the copy in .start(): exit warning and a reported race against the call's
    read of its result; on_wait never runs it: wrong numbers, no race."""
    for c in _cases("examples/programs/buggy/unwaited_writeback.py"):
        assert c["outcome"] == "completed"
        if c["dma_mode"] == "eager":
            assert c["output_matches_reference"] is True and c["nonzero_count_warnings"]
            if c["detect_races"]:
                assert c["race_messages"] >= 1
                assert all("by dma" in r and "unwaited_writeback.py" in r for r in c["races"])
        else:
            assert c["output_matches_reference"] is False and not c["nonzero_count_warnings"]
            if c["detect_races"]:
                assert c["race_messages"] == 0


@pytest.mark.parametrize("path", [p for p, s in mgt.EXAMPLES.items() if s["interpreter"] == mgt.NO_TAGS])
@pytest.mark.rule("PRG-13", "PRG-125")
def test_tagged_programs_fail_in_the_interpreter(path):
    """PRG-13, D30: the interpreter uses no tags, so a kernel whose id jax picks on a TPU fails at its
    get_barrier_semaphore (the id it converts is None), on every run, with and without races."""
    cases = _cases(path)
    assert {(c["devices"], c["dma_mode"]) for c in cases} >= {(n, m) for n in mgt.DEVICES for m in mgt.DMA_MODES}
    for c in cases:
        assert (c["outcome"], c["error_type"]) == ("error", "TypeError"), c["key"]
        assert c["error_message"].startswith("int() argument must be"), c["key"]
        assert "NoneType" in c["error_message"], c["key"]


@pytest.mark.rule("PRG-11")
def test_failing_call_then_second_call_record():
    """PRG-11: the second computation re-raises the first's error; the third runs."""
    cases = _cases("examples/programs/buggy/failing_call_then_second_call.py")
    assert cases
    for c in cases:
        assert c["outcome"] == "completed" and c["output_matches_reference"] is True
        assert [(s["call"], s["outcome"], s.get("message")) for s in c["steps"]] == [
            ("first", "error", f"ValueError: {COLLISION}"),
            ("second", "error", f"ValueError: {COLLISION}"),
            ("third", "completed", None)], c["key"]


# --- the probes behind the spec ---------------------------------------------------------------


@pytest.mark.rule("PRG-5")
def test_probe_collective_ids():
    """PRG-5 as recorded: auto ids from 0, the same id for a repeated kernel, the limit of 25."""
    r = _probe("collective_ids")
    for mode in ("yes", "override"):
        assert r[f"{mode}/A_A_B_no_ids"]["collective_ids"] == [0, 0, 1]
        assert r[f"{mode}/25_distinct_kernels"]["collective_ids"] == list(range(25))
        assert "exceeded the limit of 25" in r[f"{mode}/26_distinct_kernels"]["error"]
        assert r[f"{mode}/same_kernel_skip_device_barrier_differs"]["collective_ids"] == [0, 1]
        assert "not using a custom barrier" in r[f"{mode}/plain_kernel"]["error"]
    assert r["yes/auto_then_manual_0"]["collective_ids"] == [1, 0]
    assert r["override/auto_then_manual_0"]["collective_ids"] == [0, 1]
    assert "has to be specified when using a custom barrier" in r["no/A_A_B_no_ids"]["error"]
    for mode in ("no", "yes", "override"):
        assert r[f"{mode}/two_kernels_one_tag"]["collective_ids"] == [0, 0]
    assert r["no/remote_copy_without_barrier"]["has_communication"] == ["true"]
    for mode in ("no", "yes", "override"):
        assert "not using a custom barrier" in r[f"{mode}/remote_copy_without_barrier_with_id_0"]["error"]
    assert r["no/plain_kernel"]["has_communication"] == []


@pytest.mark.rule("PRG-10")
@pytest.mark.parametrize("devices", mgt.DEVICES)
@pytest.mark.parametrize("mode", mgt.DMA_MODES)
def test_probe_manager_per_call(devices, mode):
    """PRG-10: a manager per call, dropped at its end; every device reaches the end of call k
    before any enters call k + 1."""
    r = _probe("manager_per_call", devices, mode)
    assert r["run"]["outcome"] == "completed" and r["run"]["first_value"] == 3.0
    assert r["managers_created"] == r["distinct_managers"] == r["calls"] == 3
    assert r["manager_left_after_run"] is False and r["all_reach_clean_up_before_next_call"] is True


@pytest.mark.rule("PRG-11")
@pytest.mark.parametrize("devices", mgt.DEVICES)
@pytest.mark.parametrize("mode", mgt.DMA_MODES)
def test_probe_failure_then_next(devices, mode):
    """PRG-11: the next computation with an interpreted call re-raises the failed call's error at
    dispatch and starts nothing; a plain XLA computation in between is unaffected."""
    r = _probe("failure_then_next", devices, mode)
    fail, again, ok = r["fail_then_two_correct"]
    assert fail["outcome"] == "error" and fail["collision_message"] and not fail["raised_at_token_input"]
    assert fail["device_call_starts"] == devices and fail["manager_left"] is False
    assert again["outcome"] == "error" and again["collision_message"] and again["raised_at_token_input"]
    assert again["device_call_starts"] == 0
    assert ok["outcome"] == "completed" and ok["device_call_starts"] == devices
    two, plain, again, ok = r["two_call_program_fails_first_then_xla_then_correct"]
    assert two["outcome"] == "error" and two["device_call_starts"] == devices  # the 2nd never starts
    assert plain["outcome"] == "completed" and plain["device_call_starts"] == 0
    assert again["raised_at_token_input"] and again["device_call_starts"] == 0
    assert ok["outcome"] == "completed"
    first, fail, again = r["correct_fail_correct"]
    assert first["outcome"] == "completed" and fail["outcome"] == "error"
    assert again["outcome"] == "error" and again["raised_at_token_input"]
    # the collision fails inside wrapped callbacks: the manager is dropped, ids restart at 2000
    fail, again, ok = r["fail_then_semaphore_calls"]
    assert fail["semaphore_ids"] == [2000] and fail["manager_left"] is False
    assert again["raised_at_token_input"] and again["semaphore_ids"] == []
    assert ok["outcome"] == "completed" and ok["semaphore_ids"] == [2000]


@pytest.mark.rule("PRG-12")
def test_probe_semaphore_output_program():
    """PRG-12: tracing succeeds, lowering raises, no call starts."""
    r = _probe("semaphore_output_program")
    assert r["stages"] == {"trace": "ok", "failed_at": "lower",
                           "error": "NotImplementedError: nan + dma_sem"}
    assert r["device_call_starts"] == 0 and r["run"]["error_type"] == "NotImplementedError"


@pytest.mark.rule("PRG-13")
@pytest.mark.parametrize("devices", mgt.DEVICES)
@pytest.mark.parametrize("mode", mgt.DMA_MODES)
def test_probe_barrier_without_collective_id(devices, mode):
    """PRG-13: a TypeError from int(None) at run time, then PRG-11 (a left manager, reused once)."""
    first, again, reuse, fresh = _probe("barrier_without_collective_id", devices, mode)["sequence"]
    assert first["outcome"] == "error" and "NoneType" in first["innermost"]
    assert first["innermost"].startswith("TypeError: int() argument")
    # get_barrier_semaphore is not wrapped by fail_on_exception: the manager is left ...
    assert first["manager_left"] is True and first["semaphore_ids"] == [2000]
    assert again["raised_at_token_input"] and again["device_call_starts"] == 0
    # ... the next call that runs reuses it (ids go on from 2001) and drops it at its end
    assert reuse["outcome"] == "completed" and reuse["semaphore_ids"] == [2001]
    assert reuse["manager_left"] is False
    assert fresh["outcome"] == "completed" and fresh["semaphore_ids"] == [2000]


@pytest.mark.rule("PRG-14")
def test_probe_race_detector_per_call():
    """PRG-14: the detector's flag covers the last call only; the messages cover every call."""
    r = _probe("race_detector_per_call")
    alone, then_clean = r["racy_call_alone"], r["racy_then_clean_call"]
    assert alone["race_messages"] == then_clean["race_messages"] == 2
    assert alone["races_found_flag_after"] is True
    assert then_clean["races_found_flag_after"] is False
    assert then_clean["run"]["outcome"] == "completed"


# --- live runs --------------------------------------------------------------------------------


def _differences(report, case):
    problems = []
    for field in ("outcome", "error_type", "error_message", "output_matches_reference"):
        if report.get(field) != case.get(field):
            problems.append(f"{field}: {report.get(field)!r} != recorded {case.get(field)!r}")
    if bool(report["nonzero_count_warnings"]) != bool(case["nonzero_count_warnings"]):
        problems.append(f"exit warnings {report['nonzero_count_warnings']} vs recorded "
                        f"{case['nonzero_count_warnings']}")
    if case["detect_races"] and bool(report["race_messages"]) != bool(case["race_messages"]):
        problems.append(f"races {report['races']} vs recorded {case['races']}")
    if "steps" in case and report.get("steps") != case["steps"]:
        problems.append(f"steps {report.get('steps')} vs recorded {case['steps']}")
    return problems


def _live(path, devices, mode, kwargs=None, races=False):
    key = mgt.case_key(path, kwargs or {}, devices, mode, races)
    report = mgt.run_case(path, devices, mode, kwargs, races=races)
    return key, _differences(report, CASES[key])


@pytest.mark.rule("PRG-11")
def test_live_failing_call_then_second_call():
    """The interpreter behaviour semcheck must predict for a failed call (PRG-11), run now."""
    key, problems = _live("examples/programs/buggy/failing_call_then_second_call.py", 2, "eager")
    assert not problems, f"{key}: {problems}"


SLOW_SELECTION = [
    ("examples/programs/buggy/unwaited_writeback.py", 2, "eager", None, True),
    ("examples/programs/buggy/unwaited_writeback.py", 2, "on_wait", None, True),
    ("examples/programs/reduce_scatter_twice.py", 4, "on_wait", {"double_barrier": False}, True),
    ("examples/programs/buggy/repeated_shift_single_barrier.py", 5, "eager", None, False),
    ("examples/programs/buggy/shared_collective_id_two_patterns.py", 4, "on_wait", None, True),
    ("examples/programs/async_remote_copy.py", 4, "eager", None, False),
    ("examples/programs/buggy/failing_call_then_second_call.py", 4, "on_wait", None, False),
]


@pytest.mark.slow
@pytest.mark.parametrize("path, devices, mode, kwargs, races", SLOW_SELECTION,
                         ids=[f"{Path(s[0]).stem}-{s[1]}-{s[2]}" for s in SLOW_SELECTION])
def test_live_rerun_agrees_with_record(path, devices, mode, kwargs, races):
    key, problems = _live(path, devices, mode, kwargs, races)
    assert not problems, f"{key}: {problems}"


@pytest.mark.slow
@pytest.mark.parametrize("name", probes.PROBES)
def test_live_probe_agrees_with_record(name):
    live = probes.run_probe(name, 2, "eager")
    recorded = [r for r in GT["probes"] if r["probe"] == name and r["devices"] == 2
                and r["dma_mode"] == "eager"][0]
    assert live["status"] == recorded["status"] == "ok"

    def stable(x):  # the event log's interleaving varies from run to run; its verdict does not
        if isinstance(x, dict):
            return {k: stable(v) for k, v in x.items() if k not in ("log",)}
        if isinstance(x, list):
            return [stable(v) for v in x]
        return x

    assert stable(live["result"]) == stable(recorded["result"])


def test_the_spec_lists_every_example():
    """The examples table of specs/deciding/programs.md states the same intended verdicts as the recorder's EXAMPLES."""
    import re

    text = (REPO / "specs" / "deciding" / "programs.md").read_text()
    table = {}
    for m in re.finditer(r"^\| `(examples/programs/[^`]+)` \| ([^|]*) \| ([^|]*) \|$", text, re.M):
        props = re.findall(r"`([\w-]+)`", m.group(2))
        table[m.group(1)] = (props, m.group(3).strip())
    expected = {p: (s["hardware"], str(s.get("from_devices", ""))) for p, s in mgt.EXAMPLES.items()}
    assert table == expected
