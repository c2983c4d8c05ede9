"""run_scoped semaphores reached outside their scope (specs/semantics/kernels.md SEM-9; D6, HW-1).

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
from semcheck.model.ops import BARRIER, AllocSem, GetBarrierSem, SemRef, Signal, Topology, Wait


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
