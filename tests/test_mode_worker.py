"""The second checking process: same verdicts as checking in-process, and only for large programs."""

from __future__ import annotations

from semcheck.checker.mode_worker import MIN_OPS, ModeWorker, split_modes
from semcheck.checker.verdict import PROPERTIES
from semcheck.checker.verify import check_program
from semcheck.checker.z3.bench import ring_allreduce


def test_worker_verdicts_equal_in_process_verdicts_clean_and_buggy() -> None:
    for program in (ring_allreduce(4), ring_allreduce(4, bug="deadlock")):
        worker = ModeWorker(program, ("hardware", "eager"), PROPERTIES, timeout_ms=60_000, deadline=None)
        got = worker.result()
        for mode in ("hardware", "eager"):
            want = check_program(program, mode, PROPERTIES, timeout_ms=60_000)
            assert [(v.property, v.verdict, v.witness) for v in got[mode]] == \
                   [(v.property, v.verdict, v.witness) for v in want]
    assert any(v.verdict == "violated" for v in got["eager"])  # the buggy one really was checked


def test_hardware_goes_to_the_worker_only_for_large_programs_with_other_modes() -> None:
    modes = ("eager", "on_wait", "hardware")
    assert split_modes(MIN_OPS - 1, modes) == (modes, ())
    here, there = split_modes(MIN_OPS, modes)
    assert (here, there) in {(("eager", "on_wait"), ("hardware",)), (modes, ())}  # () on a one-core machine
    assert split_modes(10 * MIN_OPS, ("hardware",)) == (("hardware",), ())
    assert split_modes(10 * MIN_OPS, ("eager", "on_wait")) == (("eager", "on_wait"), ())
