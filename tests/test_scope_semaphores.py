"""run_scoped semaphores reached outside their scope (specs/semantics/kernels.md SEM-9, SEM-10; D6, HW-1).

The interpreter gives each entry of a scope fresh semaphore ids and frees none, so an early remote
signal waits on the id for the target's allocation and a late one is stranded; a TPU has one semaphore
per site, so a stray count is the next execution's. Model-level here; the same programs run on jax's
manager in tests/differential/test_scoped_programs.py.
"""

from __future__ import annotations

import pytest

from semcheck.checker.properties.decide import decide
from semcheck.model.explore import explore
from semcheck.model.launch import launch
from semcheck.model.ops import BARRIER, AllocSem, DmaStart, FreeBuffer, GetBarrierSem, SemRef, Signal, Topology, Wait


def early_signal():
    """Device 0 signals device 1's scoped semaphore, then tells device 1 (on the barrier semaphore) to
    enter the scope and wait for it: the signal lands before the target's allocation."""
    scoped = AllocSem("s", 1, "scope@k.py:5", "core")
    bodies = [[GetBarrierSem(), scoped, Signal(SemRef("s"), 1, device=1), Signal(SemRef(BARRIER), 1, device=1)],
              [GetBarrierSem(), Wait(SemRef(BARRIER), 1), scoped, Wait(SemRef("s"), 1)]]
    return launch(Topology(2), bodies, collective_id=0, name="early signal to a scoped semaphore")


def stray_count():
    """Two executions of one scope site: the first signals its semaphore and leaves, the second waits on
    its own without a signal of its own."""
    first, second = AllocSem("t1", 1, "scope@k.py:9", "core"), AllocSem("t2", 1, "scope@k.py:9", "core")
    bodies = [[first, Signal(SemRef("t1"), 1), second, Wait(SemRef("t2"), 1)]]
    return launch(Topology(1), bodies, name="stray count on a scoped semaphore")


@pytest.mark.rule("SEM-9")
@pytest.mark.parametrize("mode", ["eager", "on_wait", "hardware"])
def test_an_early_signal_to_a_scoped_semaphore_waits_for_the_target(mode):
    p = early_signal()
    assert explore(p, mode).kinds() == {"completed"}  # the count waits on the id the target then allocates
    assert decide("deadlock-free", p, mode).verdict == "proved"
    assert decide("exit-balance", p, mode).verdict == "proved"


@pytest.mark.rule("SEM-9")
def test_a_stray_count_is_the_next_scopes_only_on_a_tpu():
    p = stray_count()
    for mode in ("eager", "on_wait"):  # fresh ids per entry: the second scope's wait has nothing
        assert explore(p, mode).kinds() == {"deadlock"}
        assert decide("deadlock-free", p, mode).verdict == "violated"
    # one physical semaphore per site (HW-1): the first execution's count passes the second's wait
    assert explore(p, "hardware").kinds() == {"completed"}
    assert decide("deadlock-free", p, "hardware").verdict == "proved"


def _sem_scope_program(kind: str, other_region: bool = True):
    """Two devices, each with a scope of a scoped semaphore `s` (its end marked by a FreeBuffer, SEM-10),
    with a scope of another region's semaphore `o` (which a TPU may give the same slot) unless not
    `other_region`.

    early: device 0 signals device 1's `s` before device 1 is known to be in the scope;
    late: device 1 signals device 0's `s` once device 0 has told it (barrier) that it left the scope;
    send: device 0's remote copy counts on its own scoped `s` as the send semaphore, never waited there;
    confined: each device tells the other it is inside (barrier) before the signal, and waits for the
    signal inside its scope."""
    s, end = AllocSem("s", 1, "scope@k.py:5#0", "core"), FreeBuffer("s")
    recv = AllocSem("r", 1, "scratch@k.py:1", "device")
    other = [AllocSem("o", 1, "scope@k.py:3#0", "core"), FreeBuffer("o")] if other_region else []
    if kind == "early":
        bodies = [[GetBarrierSem(), s, Signal(SemRef("s"), 1, device=1), end],
                  [GetBarrierSem(), s, Wait(SemRef("s"), 1), end]]
    elif kind == "late":
        bodies = [[GetBarrierSem(), s, end, Signal(SemRef(BARRIER), 1, device=1)],
                  [GetBarrierSem(), Wait(SemRef(BARRIER), 1), s, Signal(SemRef("s"), 1, device=0), end]]
    elif kind == "send":
        copy = DmaStart(SemRef("r"), 64, src_sem=SemRef("s"), device=1)
        bodies = [[recv, GetBarrierSem(), s, copy, end], [recv, GetBarrierSem(), Wait(SemRef("r"), 64, "dma")]]
    else:
        bodies = [[GetBarrierSem(), s, Signal(SemRef(BARRIER), 1, device=1), Wait(SemRef("s"), 1), end],
                  [GetBarrierSem(), s, Wait(SemRef(BARRIER), 1), Signal(SemRef("s"), 1, device=0), end]]
    bodies = [[*body[:-1], *other, body[-1]] if body[-1] is end else [*body, *other] for body in bodies]
    return launch(Topology(2), bodies, collective_id=0, name=f"{kind} count on a scoped semaphore")


@pytest.mark.rule("SEM-10")
@pytest.mark.parametrize("kind,when,half", [("early", "early", "signal"), ("late", "late", "signal"),
                                            ("send", "late", "read")])
def test_a_count_outside_a_scoped_semaphores_scope_is_found(kind, when, half):
    from semcheck.checker.properties.confined_scopes import scope_verdict

    p = _sem_scope_program(kind)
    for mode in ("eager", "on_wait", "hardware"):
        v = scope_verdict(p, mode)
        assert v.verdict == "violated", (mode, v)
        d = v.witness.details
        assert (d["rule"], d["when"], d["half"], d["raises"]) == ("SEM-10", when, half, False)
        # the interpreter frees no semaphore (SEM-9): nothing raises, so no run of the mode fails there
        assert ("raises nothing" in v.witness.message) == (mode != "hardware")
    if kind != "early":  # the witness replays to a state past the scope's end with the count still to land
        assert decide("invocation-confined", p, "on_wait").verdict == "violated"
    assert explore(p, "on_wait").kinds() <= {"completed", "deadlock"}


@pytest.mark.rule("SEM-10")
@pytest.mark.parametrize("mode", ["eager", "on_wait", "hardware"])
def test_a_count_inside_its_scope_is_confined(mode):
    from semcheck.checker.properties.confined_scopes import scope_verdict

    v = scope_verdict(_sem_scope_program("confined"), mode)
    assert v.verdict == "proved" and "SEM-10" in v.reason


@pytest.mark.rule("SEM-10")
@pytest.mark.parametrize("kind", ["early", "late", "send"])
def test_a_count_outside_the_only_region_is_the_sites_own(kind):
    """Where one region allocates every scoped semaphore of the target (the tutorial's double barrier), a
    count outside the scope is that site's next or previous execution's, which HW-1 counts: not SEM-10's."""
    from semcheck.checker.properties.confined_scopes import scope_verdict

    for mode in ("eager", "on_wait", "hardware"):
        assert scope_verdict(_sem_scope_program(kind, other_region=False), mode) is None
