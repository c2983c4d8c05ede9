"""Id properties across calls (specs/deciding/programs.md PRG-18).

Under `hardware`, `id-agreement` on a composed program compares allocation sites, which the composition
names per call (`kernel#call.label`, PRG-105) and which a carried semaphore keeps from the call that
returned it: both ends of a remote signal or copy into a carried semaphore must name the same link.
Under the interpreter ids restart in every call (PRG-10), which
`test_left_manager.py::test_ids_continue_on_a_left_manager_as_the_probe_recorded` holds against the
probe that recorded them (the one exception: a manager a failed call left, PRG-154).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.id_agreement import id_agreement
from semcheck.model.ops import AllocSem, Program, SemRef, Signal, Topology

REPO = Path(__file__).resolve().parents[2]


def _futures(devices: int, named: list[int]) -> Program:
    """Two calls each return a semaphore (links `start#0.recv` and `start#1.recv`) on every device; then
    every device signals its right neighbour's link `named[d]` and waits on its own link 0."""
    cores = []
    for d in range(devices):
        ops = [AllocSem(f"start#{k}.recv", 1, f"start#{k}.recv", "device") for k in (0, 1)]
        ops += [Signal(SemRef(f"start#{named[d]}.recv"), 1, device=(d + 1) % devices)]
        cores.append(tuple(ops))
    return Program(Topology(devices), tuple(cores))


@pytest.mark.rule("PRG-18")
@settings(max_examples=30, deadline=None)
@given(devices=st.integers(2, 4), data=st.data())
def test_both_ends_of_a_signal_into_a_carried_semaphore_name_one_link(devices, data):
    """Every device holds both links, so a signal always names an allocation the target has: the same link
    on both ends, whichever link each device signals (the sites are the links)."""
    named = data.draw(st.lists(st.integers(0, 1), min_size=devices, max_size=devices))
    v = id_agreement(_futures(devices, named), "hardware")
    assert v.verdict == "proved", v


@pytest.mark.rule("PRG-18")
@settings(max_examples=30, deadline=None)
@given(devices=st.integers(2, 4), data=st.data())
def test_a_link_the_target_does_not_hold_is_a_disagreement(devices, data):
    """A device whose program never made link 1 (it did not run the call that returns it) cannot be the
    target of a signal into link 1: id-agreement is violated and names the link."""
    named = data.draw(st.lists(st.integers(0, 1), min_size=devices, max_size=devices))
    program = _futures(devices, named)
    missing = data.draw(st.integers(0, devices - 1))
    cores = list(program.cores)
    cores[missing] = tuple(op for op in cores[missing] if not (type(op) is AllocSem and op.label == "start#1.recv")
                           ) if named[missing] == 0 else cores[missing]
    v = id_agreement(Program(program.topology, tuple(cores)), "hardware")
    sender = (missing - 1) % devices  # the device whose right neighbour is `missing`
    if named[missing] == 0 and named[sender] == 1:
        assert v.verdict == "violated" and "start#1.recv" in v.witness.message, v
    else:
        assert v.verdict == "proved", v


@pytest.mark.jax
@pytest.mark.rule("PRG-18")
def test_the_remote_start_done_programs_agree_on_their_links():
    """The remote copies of the async start/done programs signal the receive semaphore their start call
    returned (a carried semaphore): id-agreement is proved under hardware, on those uses."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify",
                          "examples/programs/async_remote_copy.py", "--devices", "2", "--dma-mode", "hardware",
                          "--format", "json", "--no-cache"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    (row,) = [r for r in json.loads(run.stdout)["results"] if r["property"] == "id-agreement"]
    assert row["verdict"] == "proved", row
    uses = int(row["reason"].split()[0])
    assert uses > 0, row
