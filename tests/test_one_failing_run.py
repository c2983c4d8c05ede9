"""ACC-12: past the explorer's budget, one run that fails or is stuck still decides `deadlock-free` violated.

Programs outside the static system (an on_wait copy through a window the interpreter refuses, ACC-10 and
ACC-11) are decided by every schedule within a budget (ERR-19); a kernel of many independent devices has
more schedules than that. The fast run continued on the step relation is one run of the mode: when it fails
or deadlocks, the program is not deadlock-free whatever the other schedules do; when it completes, nothing is
decided and the verdict stays unknown.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.deadlock import deadlock_free
from semcheck.model import DmaStart, Loc, Scratch, SemRef, Topology, Wait, launch, run
from semcheck.model.errors import WindowOutOfBounds
from semcheck.model.explore import explore

pytestmark = pytest.mark.rule("ACC-12")

PAST_END = WindowOutOfBounds("copy", "read", "x_hbm", (0, slice(6, 9, 1)), (4, 8), "k.py:7")


def _devices(n: int, *, waited: bool = True, stuck: bool = False):
    """Every device starts a local copy whose source window ends one row past its buffer (line 7) and waits it
    (line 9); with `stuck`, device 0 then waits a semaphore nobody signals (line 11)."""
    def body(d):
        ops = [DmaStart(SemRef("r"), 1536, view_error=PAST_END, loc=Loc("k.py", 7))]
        ops += [Wait(SemRef("r"), 1536, "dma", Loc("k.py", 9))] if waited else []
        ops += [Wait(SemRef("s"), 1, "regular", Loc("k.py", 11))] if stuck and d == 0 else []
        return ops
    return launch(Topology(n), [body(d) for d in range(n)], scratch=[Scratch("r"), Scratch("s")])


def test_a_failing_fast_run_decides_past_the_budget_with_both_lines():
    p = _devices(4)
    v = deadlock_free(p, "on_wait", fallback_states=3)
    assert v.verdict == "violated" and "ACC-12" in v.reason and "exceeded 3 states" in v.reason
    again = run(p, "on_wait", v.witness.schedule)  # the witness is a run of the model that fails
    assert again.kind == "error" and again.failure.violation == PAST_END
    assert [loc.line for loc in v.witness.locs] == [7, 9]  # the copy and the wait that ran it (ACC-11)
    assert "run under on_wait by the wait at k.py:9" in v.witness.message


def test_a_stuck_fast_run_decides_a_deadlock():
    p = _devices(2, waited=False, stuck=True)
    v = deadlock_free(p, "on_wait", fallback_states=2)
    assert v.verdict == "violated" and "a deadlock" in v.reason
    assert run(p, "on_wait", v.witness.schedule).kind == "deadlock"


def test_a_fast_run_that_completes_decides_nothing():
    p = _devices(3, waited=False)  # no waiter ever runs the copy: every run completes (ACC-11)
    v = deadlock_free(p, "on_wait", fallback_states=2)
    assert v.verdict == "unknown" and "exceeded 2 states" in v.reason


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 3), waited=st.booleans(), stuck=st.booleans(), budget=st.integers(1, 6))
def test_one_run_never_contradicts_every_schedule(n, waited, stuck, budget):
    p = _devices(n, waited=waited, stuck=stuck)
    small = deadlock_free(p, "on_wait", fallback_states=budget)
    full = explore(p, "on_wait").kinds()
    if small.verdict == "violated":
        assert full != {"completed"}
    if small.verdict == "proved":
        assert full == {"completed"}
