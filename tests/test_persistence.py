"""RUN-3/RUN-4/RUN-5: the fast maximal run, the step relation and the explorer agree.

The default run checks 1,200 generated programs (400 per DMA mode).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from strategies import programs

from semcheck.model import DMA_MODES, explore, fast_run, run, visible

EXAMPLES = settings().max_examples * 4  # 400 in the default profile


@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=EXAMPLES)
@given(program=programs())
@pytest.mark.rule("RUN-3", "RUN-4")
def test_fast_run_is_one_of_the_explored_outcomes(program, mode):
    fast = fast_run(program, mode)
    explored = explore(program, mode)
    assert visible(fast) in {visible(o) for o in explored.outcomes}


@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=EXAMPLES)
@given(program=programs())
@pytest.mark.rule("RUN-3")
def test_without_failures_every_schedule_ends_in_the_same_cores_positions(program, mode):
    explored = explore(program, mode)
    if any(o.kind == "error" for o in explored.outcomes):
        return
    assert len({o.state.pcs for o in explored.outcomes}) == 1
    assert len({o.kind for o in explored.outcomes}) == 1
    assert fast_run(program, mode).kind == explored.outcomes[0].kind


@pytest.mark.parametrize("mode", DMA_MODES)
@given(program=programs())
@pytest.mark.rule("RUN-3", "RUN-1")
def test_fast_run_schedule_replays_on_the_step_relation(program, mode):
    fast = fast_run(program, mode)
    assert run(program, mode, fast.schedule, finish=False) == fast.state


@pytest.mark.parametrize("mode", DMA_MODES)
@given(program=programs(max_devices=2, max_ops=3))
@pytest.mark.rule("RUN-5")
def test_partial_order_reduction_preserves_visible_outcomes(program, mode):
    reduced = explore(program, mode)
    full = explore(program, mode, reduce=False, max_states=400_000)
    assert {visible(o) for o in reduced.outcomes} == {visible(o) for o in full.outcomes}
    assert reduced.states <= full.states


@pytest.mark.parametrize("mode", DMA_MODES)
@given(program=programs())
@pytest.mark.rule("RUN-4")
def test_every_explored_witness_replays_to_its_outcome(program, mode):
    for outcome in explore(program, mode).outcomes:
        replayed = run(program, mode, outcome.schedule)
        assert visible(replayed) == visible(outcome)


@pytest.mark.rule("RUN-5")
def test_reduction_keeps_the_order_of_a_signal_and_an_on_wait_task():
    """Regression (RUN-5): core 1's signal decides whether core 0's wait runs its queued DMA."""
    from semcheck.model import DmaStart, Scratch, SemRef, Signal, Topology, Wait, launch

    s = SemRef("s0")
    p = launch(Topology(1, 2), [[DmaStart(s, 1), Wait(s, 1)], [Signal(s, 1)]], scratch=[Scratch("s0")])
    reduced = {visible(o) for o in explore(p, "on_wait").outcomes}
    assert reduced == {visible(o) for o in explore(p, "on_wait", reduce=False).outcomes}
    assert len(reduced) == 2  # with and without the exit warning
