"""RUN-1 (steps and runs) and RUN-2 (the three outcomes of a terminal state), on small programs."""

from __future__ import annotations

import pytest

from semcheck.model import (
    DmaStart,
    ModelBug,
    Scratch,
    SemIndexOutOfBounds,
    SemRef,
    Signal,
    Topology,
    Wait,
    launch,
    run,
)
from semcheck.model.step import enabled

S = SemRef("s")


def _handshake(wait_for: int):
    """Core 0 signals core 1 once; core 1 waits for `wait_for`."""
    return launch(Topology(2), [[Signal(S, 1, device=1)], [Wait(S, wait_for)]], scratch=[Scratch("s")])


@pytest.mark.rule("RUN-1")
def test_a_run_applies_only_enabled_steps():
    p = _handshake(1)
    state = run(p, "eager", [("core", 1)], finish=False)  # core 1 allocates its scratch semaphore
    assert ("core", 1) not in enabled(p, "eager", state)  # its wait has nothing to consume yet
    with pytest.raises(ModelBug):
        run(p, "eager", [("core", 1), ("core", 1)], finish=False)
    assert ("core", 0) in enabled(p, "eager", state)


@pytest.mark.rule("RUN-1", "DMA-5")
def test_under_hardware_in_flight_dma_halves_are_actors_of_their_own():
    p = launch(Topology(1), [[DmaStart(S, 8), Wait(S, 8, kind="dma")]], scratch=[Scratch("s")])
    interp = run(p, "eager", [("core", 0), ("core", 0)], finish=False)
    hw = run(p, "hardware", [("core", 0), ("core", 0)], finish=False)
    assert all(a[0] == "core" for a in enabled(p, "eager", interp))
    assert any(a[0] != "core" for a in enabled(p, "hardware", hw))


@pytest.mark.rule("RUN-2")
@pytest.mark.parametrize("mode", ["eager", "on_wait", "hardware"])
def test_a_terminal_state_is_completed_a_deadlock_or_an_error(mode):
    done = run(_handshake(1), mode)
    assert done.kind == "completed" and not done.blocked and not enabled(_handshake(1), mode, done.state)

    stuck = run(_handshake(2), mode)
    assert stuck.kind == "deadlock" and not enabled(_handshake(2), mode, stuck.state)
    blocked = {b.core: b for b in stuck.blocked}  # each blocked core, its operation and why it waits
    assert set(blocked) == {0, 1}  # core 0 finished its body and waits for core 1 at the launch's barrier
    assert isinstance(blocked[1].op, Wait) and blocked[1].reason.startswith("waits")
    assert "barrier" in blocked[0].reason

    failing = launch(Topology(2), [[Signal(SemRef("s", 3), 1, device=1)], [Wait(S, 1)]], scratch=[Scratch("s")])
    err = run(failing, mode)  # a failure is an error even though core 1 is left unfinished
    assert err.kind == "error" and err.failure.violation == SemIndexOutOfBounds("s", 3, 1)
