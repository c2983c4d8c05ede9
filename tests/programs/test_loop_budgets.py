"""Calls in loops past PRG-183's first cap (tests/programs/loop_budget_targets.py): PRG-184 (a call the evaluation
never reaches is never proved over a widened region), PRG-185 (the budget of a loop's iterations and distinct
values), PRG-186 (a `while_loop` run as XLA runs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGETS = "tests/programs/loop_budget_targets.py"
FLUSH = "examples/programs/dirty_page_flush_while.py"
FLUSH_BUG = "examples/programs/buggy/dirty_page_flush_while_count_past_staging.py"
MODES = ("eager", "on_wait", "hardware")
# the update kernel's copy start, where PRG-184's refusal points
START = 1 + (REPO / TARGETS).read_text().splitlines().index("    copy.start()")


def _verify(*paths: str) -> dict[tuple[str, str, str, str], dict]:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", *paths, "--devices", "2",
                          "--dma-mode", "all", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {(Path(r["file"]).name, r["target"], r["dma_mode"], r["property"]): r
            for r in json.loads(run.stdout)["results"]}


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, str, str, str], dict]:
    return _verify(TARGETS, FLUSH, FLUSH_BUG)


def _of(verdicts: dict, target: str, file: str = Path(TARGETS).name) -> dict[tuple[str, str], dict]:
    got = {(m, p): r for (f, t, m, p), r in verdicts.items() if f == file and t == target}
    assert {m for m, _ in got} == set(MODES), (target, sorted(got))
    return got


@pytest.mark.jax
@pytest.mark.rule("PRG-184")
def test_a_call_in_a_loop_the_evaluation_does_not_run_is_never_proved(verdicts):
    """A loop past the evaluation's budget, and a while loop whose count a kernel computes: the layer index is
    never computed, and a copy at it may be past the cache (as `layers_128_one_past_cache`'s last one is, which was
    proved before PRG-184): every property unknown, with the copy's line and the reason."""
    for target in ("layers_1025", "while_count_from_kernel"):
        for (mode, prop), r in _of(verdicts, target).items():
            assert r["verdict"] == "unknown" and "PRG-184" in r["reason"], (target, mode, prop, r)
            assert "never computes" in r["reason"] and f"loop_budget_targets.py:{START}" in r["reason"], r


@pytest.mark.jax
@pytest.mark.rule("PRG-185")
def test_a_loop_past_sixty_four_iterations_is_decided_per_iteration(verdicts):
    """128 layers: every iteration's call checked with its own index. The twin over a 127-layer cache is violated
    in its last iteration under the interpreter's modes (jax's interpreter raises `ValueError: Out-of-bounds write`
    there) and, as a single call whose copy runs past its buffer (D33), proved under `hardware`."""
    for (mode, prop), r in _of(verdicts, "layers_128").items():
        assert r["verdict"] == "proved", (mode, prop, r)
    for (mode, prop), r in _of(verdicts, "layers_128_one_past_cache").items():
        if mode == "hardware" or prop != "deadlock-free":
            assert r["verdict"] == "proved", (mode, prop, r)
            continue
        assert r["verdict"] == "violated", (mode, r)
        message = r["witness"]["message"]
        assert message.startswith("in iteration 127 (counted from 0, of 128) of the loop at "), message
        assert "Out-of-bounds write" in message, message


@pytest.mark.jax
@pytest.mark.rule("PRG-185")
@pytest.mark.rule("PRG-182")
def test_past_the_budget_of_distinct_inputs_the_call_is_unknown_with_the_budget(verdicts):
    """129 distinct layer indices: more than PRG-185 lowers one by one; unknown in every mode, the reason naming
    the budget, never proved over the widened region."""
    for (mode, prop), r in _of(verdicts, "layers_129").items():
        assert r["verdict"] == "unknown" and "PRG-182" in r["reason"], (mode, prop, r)
        assert "at most 128 distinct inputs" in r["reason"] and "PRG-185" in r["reason"], r


@pytest.mark.jax
@pytest.mark.rule("PRG-186")
def test_a_while_loop_s_calls_are_decided_per_iteration(verdicts):
    """A while loop whose count is an input array: its trip count is known on every device and each iteration's
    call is checked with its own values. The example's twin counts one page past the staging area: violated in
    its fifth iteration in the interpreter's modes (jax's interpreter raises `IndexError: Out-of-bounds read`
    there, tests/programs/ground_truth.json)."""
    for target, file in (("while_count_from_input", Path(TARGETS).name), ("build", Path(FLUSH).name)):
        for (mode, prop), r in _of(verdicts, target, file).items():
            assert r["verdict"] == "proved", (target, mode, prop, r)
    for (mode, prop), r in _of(verdicts, "build", Path(FLUSH_BUG).name).items():
        if mode == "hardware" or prop != "deadlock-free":
            assert r["verdict"] == "proved", (mode, prop, r)
            continue
        assert r["verdict"] == "violated", (mode, r)
        message = r["witness"]["message"]
        assert message.startswith("in iteration 4 (counted from 0, of 5) of the loop at "
                                  "examples/programs/dirty_page_flush_while.py:"), message
        assert "Out-of-bounds read" in message and "dirty_page_flush_while.py:50" in message, message


@pytest.mark.jax
@pytest.mark.rule("PRG-186", "PRG-198", "PRG-212")
def test_a_while_loop_whose_trip_count_differs_between_devices_is_decided_per_device(verdicts):
    """Device d runs d + 1 iterations: each device's reaches are told apart (PRG-198), the second iteration's call
    run by device 1 alone, so each call is lowered with its layer and proved under `hardware` (before PRG-198 every
    property was unknown, PRG-182); the interpreter hangs on the devices' unequal numbers of calls (PRG-180) at device
    1's second call's start barrier, after the first iteration every device runs as it does alone (PRG-212)."""
    for (mode, prop), r in _of(verdicts, "while_count_per_device").items():
        if mode == "hardware":
            assert r["verdict"] == "proved", (mode, prop, r)
        elif prop == "deadlock-free":
            msg = r["witness"]["message"]
            assert r["verdict"] == "violated" and "no run completes" in msg, (mode, r)
            assert "iteration 1 (counted from 0, of 1 on device 0, 2 on device 1) of the loop at" in msg, msg
        else:
            assert r["verdict"] == "proved" and "PRG-212" in r["reason"], (mode, prop, r)  # over the first iteration


@pytest.mark.jax
@pytest.mark.rule("PRG-187")
def test_a_composed_loop_s_witness_names_the_iteration():
    """Under `hardware` a composed program names each call's semaphores with the iteration of the loop the call is
    in (tests/programs/followed_targets.py::loop_wait_ahead: the first iteration's wait call waits for a layer its
    start call never started); before PRG-187 only with the call index ("of _start_kernel (call 0)")."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          "tests/programs/followed_targets.py::loop_wait_ahead", "--devices", "2", "--dma-mode",
                          "hardware", "--format", "json", "--no-cache", "--no-config"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]
    (r,) = [r for r in json.loads(run.stdout)["results"] if r["property"] == "deadlock-free"]
    assert r["verdict"] == "violated", r
    message = r["witness"]["message"]
    assert ("of _start_kernel (call 0, iteration 0 (counted from 0, of 2) of the loop at "
            "tests/programs/followed_targets.py:117)") in message, message


@pytest.mark.jax
@pytest.mark.rule("PRG-126", "PRG-183")
def test_a_switch_between_calls_is_followed_per_iteration():
    """A `lax.switch` per layer on a replicated layer-kind table chooses between two calls, reached four and two
    times: each reach is checked with its layer. The twin's last clear call writes past the cache: violated there
    in the interpreter's modes, as jax's interpreter raises (tests/programs/ground_truth.json). A switch on
    `layer % 3` (a `jit` of XLA operations, which the walk now evaluates) is followed the same way."""
    got = _verify("examples/programs/hybrid_layers_switch.py",
                  "examples/programs/buggy/hybrid_layers_switch_clears_next_layer.py", TARGETS + "::switch_on_layer_mod_3")
    good = {k: r for k, r in got.items() if k[0] in ("hybrid_layers_switch.py", Path(TARGETS).name)}
    assert {k[1] for k in good} == {"build#0", "build#1", "switch_on_layer_mod_3#0", "switch_on_layer_mod_3#1"}, \
        sorted({k[1] for k in good})
    assert {r["verdict"] for r in good.values()} == {"proved"}, [r for r in good.values() if r["verdict"] != "proved"]
    bug = {k[1:]: r for k, r in got.items() if k[0] == "hybrid_layers_switch_clears_next_layer.py"}
    for (target, mode, prop), r in bug.items():
        if target == "build#0" or mode == "hardware" or prop != "deadlock-free":
            assert r["verdict"] == "proved", (target, mode, prop, r)
            continue
        message = r["witness"]["message"]
        assert r["verdict"] == "violated" and message.startswith("in iteration 5 (counted from 0, of 6) of the loop"), r
        assert "Out-of-bounds write" in message and "hybrid_layers_switch.py:61" in message, message


def test_the_switch_example_s_clear_call_raises_past_the_cache():
    """The interpreter's ground truth of the switch example's twin: every run raises at the out-of-bounds clear
    (or re-raises another device's aborted barrier), some run the ValueError itself; the correct one completes."""
    sys.path.insert(0, str(REPO / "tests" / "programs"))
    import make_ground_truth as mgt

    cases = [c for c in json.loads(mgt.GROUND_TRUTH_PATH.read_text())["cases"]
             if c["path"] == "examples/programs/buggy/hybrid_layers_switch_clears_next_layer.py"]
    assert {(c["devices"], c["dma_mode"]) for c in cases} >= {(n, m) for n in mgt.DEVICES for m in mgt.DMA_MODES}
    for c in cases:
        assert c["outcome"] == "error" and c["error_type"] in ("ValueError", "BrokenBarrierError"), c["key"]
    assert any(c["error_type"] == "ValueError" and c["error_message"].startswith("Out-of-bounds write of")
               for c in cases)
