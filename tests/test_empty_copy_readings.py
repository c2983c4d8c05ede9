"""ACC-24: under hardware, an empty copy on a REGULAR semaphore is decided on both readings (it adds 1, as
DMA-6 says a completed copy does, or nothing); a verdict the readings disagree on is unknown, never proved."""

from __future__ import annotations

import time

import pytest

from semcheck.checker.properties.checking import check_modes
from semcheck.checker.properties.empty_copies import both_readings, first_empty_copy
from semcheck.checker.run.request import Request
from semcheck.model import DmaStart, Scratch, SemRef, Topology, Wait, launch
from semcheck.model.dma import empty_copies_signal_nothing

SEM = SemRef("sem")


def _counting(sizes: tuple[int, ...], waited: int):
    """One core starts one local copy per size on a REGULAR semaphore and waits `waited` copies."""
    body = [DmaStart(SEM, n, src_sem_type="regular", dst_sem_type="regular") for n in sizes]
    return launch(Topology(1), [body + ([Wait(SEM, waited)] if waited else [])], scratch=[Scratch("sem")])


def _decide(program):
    req = Request("k.py", None, None, devices=1, cores=None, modes=("eager", "hardware"), timeout=60.0)
    done = check_modes(program, req, time.monotonic() + 60)
    settled = both_readings(program, done, req, time.monotonic() + 60, check_modes)
    return {m: {v.property: v for v in vs} for m, (vs, _) in settled.items()}


@pytest.mark.rule("ACC-24")
def test_only_empty_copies_on_non_dma_semaphores_have_another_reading():
    assert empty_copies_signal_nothing(_counting((64, 64), 2)) is None  # no empty copy: DMA-6 alone
    dma_sem = launch(Topology(1), [[DmaStart(SEM, 0), Wait(SEM, 0, kind="dma")]], scratch=[Scratch("sem")])
    assert empty_copies_signal_nothing(dma_sem) is None  # a DMA semaphore counts bytes: 0 either way
    p = _counting((64, 0, 64), 2)
    other = empty_copies_signal_nothing(p)
    assert other is not None and first_empty_copy(p).nbytes == 0
    changed = [(a, b) for a, b in zip(p.cores[0], other.cores[0]) if a != b]
    assert [(a.nbytes, b.dst_sem_type) for a, b in changed] == [(0, "dma")]


@pytest.mark.rule("ACC-24")
@pytest.mark.parametrize("waited, expect", [
    (2, "unknown"),  # waits the non-empty copies (a shipped kernel's count): balanced only if the empty one adds 0
    (3, "unknown"),  # waits every copy: balanced only if the empty one adds 1, else it hangs
])
def test_a_count_the_readings_disagree_on_is_unknown_under_hardware_only(waited, expect):
    got = _decide(_counting((64, 0, 64), waited))
    hw = got["hardware"]["exit-balance"]
    assert hw.verdict == expect and "ACC-24" in hw.reason and "empty copy" in hw.reason
    assert got["hardware"]["id-disjoint"].verdict == "proved"  # what no count decides is decided
    assert "ACC-24" not in got["eager"]["exit-balance"].reason  # the interpreter adds the bytes (D20): one reading


@pytest.mark.rule("ACC-24")
def test_a_verdict_both_readings_share_stands():
    # two empty copies and no wait: nothing left at exit if they add 0, 2 if they add 1 -> unknown;
    # with a non-empty copy never waited, exit-balance is violated on both readings -> violated
    got = _decide(_counting((0, 64), 0))
    assert got["hardware"]["exit-balance"].verdict == "violated"


@pytest.mark.rule("ACC-24")
def test_a_kernel_whose_copy_sizes_are_data_gets_both_readings_end_to_end():
    """Through the front end: a size of 0 from scalar data is an empty copy; without one, DMA-6 alone."""
    import json

    from tests.cli._support import semcheck

    kernel = "tests/frontend/kernels/empty_copy_regular.py"
    r = semcheck("verify", kernel, "--devices", "2", "--dma-mode", "hardware", "--no-cache", "--no-config",
                 "--format", "json")
    got = {(row["target"], row["property"]): row for row in json.loads(r.stdout)["results"]}
    skipped = got[("one_slot_skipped", "exit-balance")]
    assert skipped["verdict"] == "unknown" and "ACC-24" in skipped["reason"]
    assert f"the copy at {kernel}:" in skipped["reason"] and "violated; if it adds nothing, proved" in skipped["reason"]
    assert {row["verdict"] for (t, _), row in got.items() if t == "no_slot_skipped"} == {"proved"}


@pytest.mark.rule("ACC-24", "RUN-20")
def test_a_program_given_by_one_period_gets_its_other_reading_without_being_built():
    # Pod-scale hardware checks read a program given by its representatives; iterating every core of it
    # raises (RUN-21). The other reading is made in the representatives, and every rotated core follows.
    from semcheck.model.symmetric import Symmetric

    one = _counting((64, 0), 1)
    program = Symmetric(Topology(4096), 1, {}, (one.cores[0],))
    other = empty_copies_signal_nothing(program)
    assert isinstance(other, Symmetric) and first_empty_copy(program).nbytes == 0
    last = [(op.nbytes, op.dst_sem_type) for op in other.cores[4095] if isinstance(op, DmaStart)]
    assert last == [(64, "regular"), (0, "dma")]
