"""Model behaviours the Z3 work flagged, now fixed in the model (kept as regression tests)."""

from __future__ import annotations

import pytest

from semcheck.model import (
    BARRIER,
    Barrier,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    fast_run,
    launch,
)


@pytest.mark.rule("IR-1")
def test_barrier_participant_lists_that_differ_are_not_a_program():
    n = 4
    everyone = frozenset(range(n))
    bodies = [[Wait(SemRef("s"), 2), Barrier("user", everyone)]] + [[Barrier("user", everyone)] for _ in range(n - 1)]
    bodies[2] = [Barrier("user", frozenset({2, 3}))]  # core 2 only waits for core 3
    with pytest.raises(ValueError, match="two different participant sets"):
        launch(Topology(n), bodies, collective_id=0, scratch=[Scratch("s")])


@pytest.mark.rule("RUN-5")
def test_reduction_keeps_the_unknown_semaphore_race():
    p = launch(Topology(2), [[GetBarrierSem(), Wait(SemRef(BARRIER))], [Signal(SemRef(BARRIER), device=0)]],
               collective_id=0)
    assert explore(p, "eager").kinds() == explore(p, "eager", reduce=False).kinds() == {"completed", "error"}


@pytest.mark.rule("RUN-3")
def test_freezing_a_core_before_a_signal():
    p = launch(Topology(2), [[Signal(SemRef("a"), 1, device=1), Wait(SemRef("a"))], [Wait(SemRef("a"))]],
               scratch=[Scratch("a")])
    first_signal = next(i for i, op in enumerate(p.cores[0]) if isinstance(op, Signal))
    out = fast_run(p, "eager", hold={0: first_signal})
    assert out.state.pcs[0] == first_signal
