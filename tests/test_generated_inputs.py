"""Targets whose inputs a hypothesis strategy generates (`@semcheck.target(inputs=...)`, issue 17).

The engine (`checker/run/generated_inputs.py`) on a fake kernel, without jax: it
stops at the first violation, shrinks on the same (kernel, mode, property)
only, says exactly what was covered, names the input of an unknown, and a
timeout never proves. Then the CLI on `tests/generated_inputs/paged_lengths.py`,
a paged copy whose lengths come through scalar prefetch and whose seeded bug
(one wait too many) shows only when a length is a multiple of the block (16):
found from the strategy and shrunk to `[16]`, the same on every run; the
clean kernel is proved "for N generated inputs"; a strategy on which the
kernel raises is an input error naming the (shrunk) input; `--examples` and
`[tool.semcheck] examples` out of range are usage errors. And on
`tests/generated_inputs/ragged_all_to_all.py`, the ragged all-to-all of
examples/jax_ops/ on generated send-count tables: its seeded bug (the table
read transposed) hides on symmetric tables and is shrunk to `[0, 1]`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import strategies as st

from semcheck.checker.run.generated_inputs import aggregate, coverage, explore
from semcheck.checker.properties.registry import IDS
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.run.request import Result
from cli._support import SCHEMA, semcheck, semcheck_many

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "tests/generated_inputs/paged_lengths.py"
MODES = ("eager", "hardware")
PROPS = ("deadlock-free", "exit-balance")


# --- the engine, on a fake kernel ------------------------------------------------------------------


def _fake(judge):
    """verify_input / check_key of a kernel whose verdict per (mode, property) is `judge(value, mode, prop)`."""
    calls: list[tuple] = []

    def verdict(value, mode, prop) -> Verdict:
        kind = judge(value, mode, prop)
        if kind == "violated":
            return Verdict(prop, "violated", witness=Witness(f"{prop} fails on {value}"))
        if kind == "unknown":
            return Verdict(prop, "unknown", reason="z3 gave up")
        return Verdict(prop, "proved")

    def verify_input(value, text):
        calls.append(("full", text))
        return [Result("k", 2, mode, [verdict(value, mode, p) for p in PROPS]) for mode in MODES]

    def check_key(value, text, key):
        calls.append(("one", text, key))
        return verdict(value, key[1], key[2])

    return verify_input, check_key, calls


def _run(strategy, judge, examples=20, deadline=None):
    verify_input, check_key, calls = _fake(judge)
    ex = explore(strategy, examples, verify_input, check_key, deadline or time.monotonic() + 60)
    return ex, aggregate(ex, MODES, PROPS), calls


def _verdict(results, mode, prop) -> Verdict:
    (r,) = [r for r in results if r.dma_mode == mode]
    return next(v for v in r.verdicts if v.property == prop)


@pytest.mark.rule("RUN-8")
def test_first_violation_is_shrunk_on_the_same_property_and_mode_only():
    # deadlock-free fails in both modes from 30 on; exit-balance fails in hardware from 10 on. An input
    # from 30 on is first found as an eager deadlock (eager is checked first) and shrinks to 30, not to
    # 10, which breaks exit-balance only; one between 10 and 29 shrinks to 10.
    def judge(x, mode, prop):
        if prop == "deadlock-free" and x >= 30 or prop == "exit-balance" and mode == "hardware" and x >= 10:
            return "violated"
        return "proved"

    ex, results, calls = _run(st.integers(0, 64), judge)
    assert ex.failing is not None
    if ex.failing.value >= 30:
        assert ex.key == ("k", "eager", "deadlock-free")
        shrunk, prop = 30, "deadlock-free"
    else:
        assert ex.key == ("k", "hardware", "exit-balance")
        shrunk, prop = 10, "exit-balance"
    v = _verdict(results, ex.key[1], prop)
    assert v.verdict == "violated" and v.input is not None and v.input.value == shrunk
    assert v.input.index == 0 and v.input.shrunk_from == ex.failing.text != str(shrunk)
    # shrink steps check only the key; the shrunk input is then verified in full once
    assert all(c[2] == ex.key for c in calls if c[0] == "one")
    assert calls[-1] == ("full", str(shrunk))
    # every input verified in full was generated (the shrunk one is not counted)
    assert results[0].examples == len(ex.tried) == sum(c[0] == "full" for c in calls) - 1


@pytest.mark.rule("RUN-8")
def test_clean_kernel_is_proved_for_exactly_the_inputs_tried():
    ex, results, _ = _run(st.integers(0, 1000), lambda x, m, p: "proved", examples=7)
    assert ex.key is None and len(ex.tried) == 7
    assert all(v.verdict == "proved" and v.reason == "proved for 7 generated inputs" and v.input is None
               for r in results for v in r.verdicts)
    assert coverage(results) == ["k: proved for 7 generated inputs at 2 devices"]
    # a strategy with fewer values than asked for: proved for as many as there are
    _, small, _ = _run(st.sampled_from([3, 5]), lambda x, m, p: "proved", examples=20)
    assert {r.examples for r in small} == {2}


@pytest.mark.rule("RUN-8")
def test_an_unknown_on_one_input_makes_the_property_unknown_and_names_it():
    ex, results, _ = _run(st.integers(0, 50), lambda x, m, p: "unknown" if (x, p) == (7, "exit-balance")
                          else "proved", examples=200)
    v = _verdict(results, "eager", "exit-balance")
    assert v.verdict == "unknown" and v.input is not None and v.input.value == 7
    assert v.reason.endswith("(on input 7)")
    assert _verdict(results, "eager", "deadlock-free").verdict == "proved"
    assert coverage(results)[0].startswith("k: exit-balance unknown on input 7;")


@pytest.mark.rule("RUN-8")
def test_a_timeout_before_every_input_was_tried_proves_nothing():
    verify_input, check_key, _ = _fake(lambda x, m, p: "proved")

    def slow(value, text):
        time.sleep(0.05)
        return verify_input(value, text)

    ex = explore(st.integers(0, 10**6), 1000, slow, check_key, time.monotonic() + 0.3)
    results = aggregate(ex, MODES, PROPS)
    assert ex.timed_out and 0 < len(ex.tried) < 1000
    assert all(v.verdict == "unknown" and v.reason.startswith("timeout: --timeout ran out after")
               for r in results for v in r.verdicts)


def test_inputs_must_be_a_strategy():
    import semcheck as api

    with pytest.raises(TypeError, match="hypothesis strategy"):
        api.target(inputs=[1, 2, 3])


# --- the CLI on the paged kernel ---------------------------------------------------------------------


def _cli(*args: str):
    return semcheck("verify", *args, "--no-cache", cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def buggy():
    return _cli(f"{KERNEL}::paged_lengths_boundary_bug", "--devices", "2", "--format", "json")


@pytest.mark.jax
@pytest.mark.rule("RUN-8")
def test_boundary_bug_is_found_and_shrunk_to_one_block(buggy):
    assert buggy.returncode == 1, buggy.stderr
    rows = buggy.json()["results"]
    deadlocks = [r for r in rows if r["property"] == "deadlock-free"]
    assert {r["dma_mode"] for r in deadlocks if r["verdict"] == "violated"} == {"eager", "on_wait", "hardware"}
    for r in deadlocks:
        assert r["input"]["value"] == [16] and r["input"]["index"] == 0
        assert r["input"]["shrunk_from"] != "[16]" and r["input"]["shrink_steps"] > 0
        assert "witness" in r and r["generated_inputs"] >= 1
    proved = [r for r in rows if r["verdict"] == "proved"]
    assert proved and all(r["reason"] == f"proved for {r['generated_inputs']} generated inputs" for r in proved)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(buggy.json())


@pytest.mark.jax
def test_shrunk_input_is_the_same_on_every_run_and_shown_beside_the_witness(buggy):
    text = _cli(f"{KERNEL}::paged_lengths_boundary_bug", "--devices", "2", "--dma-mode", "eager")
    assert text.returncode == 1
    first = next(r for r in buggy.json()["results"] if r["property"] == "deadlock-free")["input"]
    line = f"input: [16], shrunk from generated input {first['shrunk_from']} ({first['shrink_steps']} shrinking tries)"
    assert line in text.stdout.splitlines()
    assert "generated inputs: paged_lengths_boundary_bug: deadlock-free violated on input [16];" in text.stdout


@pytest.mark.jax
def test_clean_kernel_says_exactly_what_was_covered():
    run = _cli(f"{KERNEL}::paged_lengths", "--devices", "2,4", "--examples", "6", "--dma-mode", "hardware")
    assert run.returncode == 0, run.stderr
    assert "generated inputs: paged_lengths: proved for 6 generated inputs at 2, 4 devices" in run.stdout
    assert run.stdout.count("all 8 properties proved for 6 generated inputs") == 2


RAGGED = "tests/generated_inputs/ragged_all_to_all.py"


@pytest.mark.jax
@pytest.mark.rule("RUN-8")
def test_ragged_all_to_all_bug_that_symmetric_tables_hide_is_found_and_shrunk():
    """examples/jax_ops/ragged_all_to_all.py on generated send-count tables: the clean kernel is proved
    for every table tried; the seeded bug (the receiver reads the table transposed) is proved on a
    fixed symmetric table, and found from the strategy and shrunk to [0, 1] (the table [[0, 1], [0, 1]]
    at 2 devices), at 2 and 4 devices in every DMA mode."""
    clean, buggy, fixed = semcheck_many([
        (("verify", f"{RAGGED}::{name}", "--devices", "2,4", "--examples", "8", "--format", "json",
          "--no-cache"), {"cwd": ROOT, "timeout": 300})
        for name in ("ragged_all_to_all", "ragged_all_to_all_transposed_counts",
                     "fixed_symmetric_transposed_counts")])
    assert clean.returncode == 0 and fixed.returncode == 0, clean.stderr + fixed.stderr
    rows = clean.json()["results"]
    assert len(rows) == 2 * 3 * len(IDS)
    assert all(r["verdict"] == "proved" and r["reason"] == "proved for 8 generated inputs" for r in rows)
    assert {r["verdict"] for r in fixed.json()["results"]} == {"proved"}
    assert buggy.returncode == 1, buggy.stderr
    rows = buggy.json()["results"]
    for prop in ("deadlock-free", "dma-bytes"):
        got = {(r["devices"], r["dma_mode"]) for r in rows if r["property"] == prop and r["verdict"] == "violated"}
        assert got == {(n, m) for n in (2, 4) for m in ("eager", "on_wait", "hardware")}, prop
    assert all(r["input"]["value"] == [0, 1] for r in rows if r["verdict"] != "proved")


RAISES = """\
import sys
sys.path.insert(0, {kernels!r})
from hypothesis import strategies as st
import semcheck
import paged_lengths

@semcheck.target(devices=(2,), inputs=st.lists(st.integers(1, 64), min_size=1, max_size=3))
def too_long(num_devices, lengths):
    if sum(lengths) > 40:
        raise ValueError(f"total length {{sum(lengths)}} exceeds the cache of 40 rows")
    return paged_lengths.build(num_devices, lengths=lengths)
"""


@pytest.mark.jax
def test_an_input_the_kernel_raises_on_is_an_input_error_with_the_shrunk_input(tmp_path):
    kernel = tmp_path / "too_long.py"
    kernel.write_text(RAISES.format(kernels=str(ROOT / "tests" / "generated_inputs")))
    run = semcheck("verify", kernel, "--no-cache", "--dma-mode", "eager", cwd=tmp_path)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    (line,) = run.stderr_lines
    assert line.startswith("semcheck: kernel-raised: kernel raised while building target 'too_long' for 2 "
                           "devices on input [41]: ValueError: total length 41 exceeds the cache of 40 rows "
                           "(shrunk from generated input ")


@pytest.mark.parametrize("value", ["0", "-3", "100000"])
def test_examples_out_of_range_is_a_usage_error(value):
    run = _cli(KERNEL, "--examples", value)
    assert run.returncode == 2
    assert run.stderr_lines == [f"semcheck: usage error: --examples {value}: must be an integer between 1 and 10000"]


def test_examples_in_the_project_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.semcheck]\nexamples = 0\n")
    run = semcheck("verify", ROOT / KERNEL, "--no-cache", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr_lines == ["semcheck: usage error: pyproject.toml: [tool.semcheck] examples 0: must be an "
                                "integer between 1 and 10000"]
