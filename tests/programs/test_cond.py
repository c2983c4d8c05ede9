"""PRG-126: kernel calls under a `lax.cond` (tests/programs/cond_targets.py): the branch the walk can
tell is followed, an undecided one (the same on every device) is checked branch by branch, one that may
differ between devices is unknown with its line. PRG-129: a call inside `run_state`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TARGETS = "tests/programs/cond_targets.py"
MARKER = "@@COND@@ "

_WALK = """
import json, sys
from semcheck.checker.frontend import provision_devices
provision_devices(4)
from semcheck.checker.frontend.programs import _program_irs
from semcheck.checker.frontend.targets import load_targets
from semcheck.checker.frontend.trace import make_jaxpr
out = {{}}
for name in {names!r}:
    (t,) = load_targets({path!r} + "::" + name)
    irs = _program_irs(t, 4, {{}}, make_jaxpr)
    out[name] = [{{"calls": [i.name for i in ir.invocations], "branches": [[n, l.line, b] for n, l, b in ir.branches],
                  "devices": [None if i.devices is None else sorted(i.devices) for i in ir.invocations],
                  "unknown": None if ir.unknown is None else [ir.unknown[0], ir.unknown[1].line]}} for ir in irs]
print({marker!r} + json.dumps(out))
"""


def _line(text: str) -> int:
    return next(i for i, s in enumerate((REPO / TARGETS).read_text().splitlines(), 1) if text in s)


@pytest.fixture(scope="module")
def walked() -> dict:
    names = ["taken_branch_correct", "undecided_flag", "per_device_flag", "per_device_big_flag", "loop_counter_cond",
             "device_index_in_jit", "shifted_flag_in_jit", "tiled_flag", "psum_in_device_cond",
             "psum_in_uniform_cond", "psum_in_device_while", "psum_in_device_branch", "flag_split_two_ways"]
    run = subprocess.run([sys.executable, "-c", _WALK.format(names=names, path=TARGETS, marker=MARKER)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    (line,) = [s for s in run.stdout.splitlines() if s.startswith(MARKER)] or [None]
    assert line is not None, run.stderr[-3000:]
    return json.loads(line.removeprefix(MARKER))


def _verify(target: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", f"{TARGETS}::{target}",
                          "--devices", "4", "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return {r["property"]: r for r in json.loads(run.stdout)["results"]}


@pytest.mark.jax
@pytest.mark.rule("PRG-126")
def test_the_branch_the_build_takes_is_followed(walked):
    """The build's flag is known: one program, the true branch's (ring then pairwise); the false
    branch's shared id is never run, so every property is proved."""
    (ir,) = walked["taken_branch_correct"]
    assert ir["calls"] == ["_ring_kernel", "_pair_kernel"] and not ir["branches"] and ir["unknown"] is None
    got = _verify("taken_branch_correct")
    assert {r["verdict"] for r in got.values()} == {"proved"}, got


@pytest.mark.jax
@pytest.mark.rule("PRG-126")
def test_an_undecided_cond_checks_every_branch_and_names_the_violating_one(walked):
    irs = walked["undecided_flag"]
    cond = _line("jax.lax.cond(predicate(f)")
    assert sorted((ir["branches"][0][2], tuple(ir["calls"])) for ir in irs) == [
        (0, ("_pair_kernel", "_ring_kernel")), (1, ("_ring_kernel", "_pair_kernel"))]
    assert all(ir["branches"][0][:2] == [2, cond] for ir in irs)
    bad = _verify("undecided_flag")["invocation-confined"]
    assert bad["verdict"] == "violated"
    assert f"cond_targets.py:{cond} takes branch 0)" in bad["witness"]["message"]
    good = _verify("undecided_flag_correct")
    assert {r["verdict"] for r in good.values()} == {"proved"}, good


@pytest.mark.jax
@pytest.mark.rule("PRG-126", "PRG-145")
def test_a_cond_whose_branch_differs_between_devices_is_unknown_with_its_line(walked):
    """The predicate reads each device's block of a flag too large to evaluate: not known on each device."""
    (ir,) = walked["per_device_big_flag"]
    reason, line = ir["unknown"]
    assert "may differ between devices" in reason and line == _line("jax.lax.cond(predicate(f)")
    got = _verify("per_device_big_flag")
    assert got["invocation-confined"]["verdict"] == "unknown"
    assert "may differ between devices" in got["invocation-confined"]["reason"]


@pytest.mark.jax
@pytest.mark.rule("PRG-126")
def test_a_jit_that_moves_data_between_devices_does_not_make_a_uniform_predicate(walked):
    """A `jit` of uniform operands whose body moves data between devices (a `ppermute` over an open chain) gives
    each device another value: its devices run different branches, so the program is unknown, never one
    branch taken by every device (which was proved in every mode)."""
    irs = walked["shifted_flag_in_jit"]
    assert irs and all(ir["unknown"] is not None and "may differ between devices" in ir["unknown"][0] for ir in irs)


@pytest.mark.jax
@pytest.mark.rule("PRG-126", "PRG-145")
def test_a_jit_that_reads_the_device_is_followed_device_by_device(walked):
    """A `jit` reading `axis_index` from a replicated flag (and jnp's `%`, itself a jit) is walked operation by
    operation on each device: odd devices take the true branch, as the sharded flag `d % 2` of
    `per_device_flag` makes them; before, the jit's result was taken as uniform and one branch for all."""
    (ir,) = walked["device_index_in_jit"]
    (same,) = walked["per_device_flag"]
    assert ir["unknown"] is None and (ir["calls"], ir["devices"]) == (same["calls"], same["devices"])


@pytest.mark.jax
@pytest.mark.rule("PRG-126")
def test_a_shard_map_result_split_over_an_axis_is_not_its_block(walked):
    """A replicated flag returned by a shard_map under `out_specs=P(axis)` is n copies of itself, and each device
    of a second shard_map gets the whole flag, whose first element is 0 everywhere: the devices take one branch.
    Before, the walk took the result for the flag itself and cut it into blocks, so device d read `[d]`, and
    devices 1.. took the other branch, which no device takes (in the interpreter's modes: deadlock-free
    violated where every run completes). The whole is not known to the walk: unknown, with the cond's line."""
    (ir,) = walked["tiled_flag"]
    assert ir["unknown"] is not None and "may differ between devices" in ir["unknown"][0], ir
    assert ir["unknown"][1] == _line("return jax.lax.cond(f[0] != 0"), ir


@pytest.mark.jax
@pytest.mark.rule("PRG-145")
def test_a_value_split_two_ways_gives_each_device_the_block_of_each_split(walked):
    """The same flag split by rows, then by columns: the second shard_map's cond reads each device's column block,
    0 on every device, so every device runs the pairwise kernel. Before, the walk kept one block per value and
    split axes, the rows, and sent devices 1.. to the ring (in the interpreter's modes: deadlock-free violated,
    where jax completes)."""
    (ir,) = walked["flag_split_two_ways"]
    assert ir["unknown"] is None and ir["calls"] == ["_pair_kernel"] and ir["devices"] == [None], ir


@pytest.mark.jax
@pytest.mark.rule("PRG-201")
def test_a_collective_only_some_devices_run_is_unknown_with_its_line(walked):
    """A psum in a cond branch, or a while loop's iteration, that only some devices run waits for devices that never
    join it: the program is unknown, naming the psum's line (before: all 8 properties proved in every mode, where
    jax's interpreter hangs at the all-reduce). A psum in a cond every device takes alike is followed."""
    psum_line = _line("lambda v: v + jax.lax.psum(v[0, 0], tp.AXIS) * 0")
    for name, line in (("psum_in_device_cond", psum_line),
                       ("psum_in_device_while", _line("return c[0] + 1, c[1] + jax.lax.psum(")),
                       ("psum_in_device_branch", _line("tp.call(tp._pair_kernel, x, 1, params) + jax.lax.psum"))):
        (ir,) = walked[name]
        assert ir["unknown"] is not None and "XLA collective (psum)" in ir["unknown"][0], (name, ir)
        assert ir["unknown"][1] == line, (name, ir)
    (ir,) = walked["psum_in_uniform_cond"]
    assert ir["unknown"] is None and ir["calls"] == ["_pair_kernel"], ir


@pytest.mark.jax
@pytest.mark.rule("PRG-201")
def test_a_collective_only_some_devices_run_before_a_call_checked_alone_is_unknown_in_every_mode():
    """The psum over x runs on the devices of x = 1 only (the predicate is summed over y alone), before a local call
    that is checked alone: every verdict of every mode is unknown, naming the psum's line and PRG-201 (before: all 8
    proved in every mode at 4 devices, where jax's interpreter hangs at the all-reduce in both modes). A psum beside
    a local call in a branch device 0 alone takes: unknown in every mode too (before: proved under `hardware`)."""
    for target, text in (("psum_over_one_axis_before_a_local_call", 'lambda v: v + jax.lax.psum(v[0, 0], "x") * 0'),
                         ("psum_and_a_local_call_in_device_branch", "lambda v: local(v) + jax.lax.psum(")):
        run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", f"{TARGETS}::{target}",
                              "--devices", "4", "--dma-mode", "all", "--format", "json", "--no-cache"],
                             capture_output=True, text=True, cwd=REPO, timeout=900)
        assert run.returncode in (0, 1, 3), run.stderr[-3000:]
        results = json.loads(run.stdout)["results"]
        assert {r["dma_mode"] for r in results} == {"eager", "on_wait", "hardware"}
        assert {r["verdict"] for r in results} == {"unknown"}, (target, results)
        line = _line(text)
        assert all("PRG-201" in r["reason"] and f"cond_targets.py:{line}" in r["reason"] for r in results), results[0]


@pytest.mark.jax
@pytest.mark.rule("PRG-145")
def test_a_cond_known_on_each_device_gives_each_device_its_calls(walked):
    """The build's flag is `d % 2` on device d: the even devices take the false branch (pairwise, then ring),
    the odd ones the true branch (ring, then pairwise), each call run only by its branch's devices; the
    patterns then wait on each other's barrier ids in a cycle, a deadlock a TPU has too."""
    (ir,) = walked["per_device_flag"]
    assert ir["unknown"] is None and not ir["branches"], ir
    assert list(zip(ir["calls"], ir["devices"])) == [("_pair_kernel", [0, 2]), ("_ring_kernel", [0, 2]),
                                                     ("_ring_kernel", [1, 3]), ("_pair_kernel", [1, 3])]
    got = _verify("per_device_flag")
    assert got["deadlock-free"]["verdict"] == "violated", got["deadlock-free"]


@pytest.mark.jax
@pytest.mark.rule("PRG-126")
def test_a_cond_on_the_loop_counter_is_followed_per_iteration(walked):
    (ir,) = walked["loop_counter_cond"]
    assert ir["calls"] == ["_ring_kernel", "_pair_kernel", "_pair_kernel"] and not ir["branches"], ir


@pytest.mark.jax
@pytest.mark.rule("PRG-129")
def test_a_single_call_inside_run_state_is_decided():
    """jax's stateful async-copy pattern: one pallas_call inside run_state, closing over its refs. The walk
    follows it, so invocation-confined is decided (PRG-113) instead of unknown."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", "examples/jax_ops/stateful_async_copy.py",
                          "--devices", "2", "--dma-mode", "hardware", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=900)
    got = {r["property"]: r for r in json.loads(run.stdout)["results"]}
    assert got["invocation-confined"]["verdict"] == "proved", got["invocation-confined"]
    assert {r["verdict"] for r in got.values()} == {"proved"}


@pytest.mark.jax
@pytest.mark.rule("PRG-146", "PRG-126")
def test_an_undecided_cond_with_ids_jax_picks_is_decided_per_branch():
    """Tags under an undecided cond: each branch program gets the ids jax lowers the whole program with; two
    tags in both branches prove every property, a shared tag in branch 0 mixes the patterns there."""
    good = _verify("undecided_tags")
    assert {r["verdict"] for r in good.values()} == {"proved"}, good
    bad = _verify("undecided_one_tag_in_branch_0")["invocation-confined"]
    assert bad["verdict"] == "violated", bad
    assert f"cond_targets.py:{_line('jax.lax.cond(jnp.sum(f) > 0')} takes branch 0)" in bad["witness"]["message"]
