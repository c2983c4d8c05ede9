"""RUN-3/RUN-4/RUN-5: the fast maximal run, the step relation and the explorer agree.

The default run checks 1,200 generated programs (400 per DMA mode). The fast
run is a driver over the step relation's rule functions that keeps its own
working copies of counts, queues and DMA phases; replaying its schedule on the
step relation and comparing whole states (ids, allocations, buffer keys,
counts, warnings, failures) is what states their equivalence.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

from semcheck.model import DMA_MODES, AllocBuffer, explore, fast_run, run, visible

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


@st.composite
def programs_with_buffers(draw):
    """`programs()` with buffer allocations (BUF-8) inserted anywhere: device-scoped ones on a
    device's first core, `run_scoped` ones on any core, in every memory space."""
    program = draw(programs())
    topo = program.topology
    cores = []
    for g, ops in enumerate(program.cores):
        ops = list(ops)
        for k in range(draw(st.integers(0, 3))):
            scope = "device" if topo.local_core_of(g) == 0 and draw(st.booleans()) else "core"
            space = draw(st.sampled_from(["vmem", "smem", "hbm", "any"]))
            ops.insert(draw(st.integers(0, len(ops))), AllocBuffer(f"b{g}_{k}", 64, space, scope))
        cores.append(tuple(ops))
    return dataclasses.replace(program, cores=tuple(cores))


@pytest.mark.parametrize("mode", DMA_MODES)
@given(program=programs_with_buffers())
@pytest.mark.rule("RUN-3", "RUN-1", "BUF-1", "BUF-8")
def test_fast_run_and_step_relation_give_buffers_the_same_ids_and_keys(program, mode):
    fast = fast_run(program, mode)
    assert run(program, mode, fast.schedule, finish=False) == fast.state
    assert visible(fast) in {visible(o) for o in explore(program, mode).outcomes}


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


@pytest.mark.rule("RUN-5")
def test_reduction_keeps_the_order_of_two_cores_starts_into_one_on_wait_queue():
    """Regression (RUN-5), shrunk from a differential run on jax's manager at 4 devices: a waiter pops
    the task queued last, so whether core 1's copy into core 0 is queued before or after core 0's own
    decides which one runs, and a local start is not independent of it."""
    from semcheck.model import DmaStart, Scratch, SemRef, Signal, Topology, Wait, launch

    s, t = SemRef("s"), SemRef("t")
    p = launch(Topology(2), [[DmaStart(s, 2), Wait(t, 1), Wait(s, 1)],
                             [DmaStart(s, 1, device=0), Signal(t, 1, device=0)]],
               scratch=[Scratch("s"), Scratch("t")])
    reduced = {visible(o) for o in explore(p, "on_wait").outcomes}
    assert reduced == {visible(o) for o in explore(p, "on_wait", reduce=False).outcomes}
    assert len(reduced) == 2  # the local copy run (1 left at the exit) or the remote one (none left)


@st.composite
def programs_with_blind_copies(draw):
    """`programs()` with some copies through a view the interpreter cannot index, on either side (ACC-11)."""
    from semcheck.model import DmaStart, InterpreterView

    program = draw(programs())
    cores = []
    for ops in program.cores:
        ops = list(ops)
        for i, op in enumerate(ops):
            if type(op) is DmaStart and draw(st.booleans()):
                side = draw(st.sampled_from(["source", "destination"]))
                ops[i] = dataclasses.replace(op, view_error=InterpreterView("ReshapeTransform", "copy", "k.py:1", side=side))
        cores.append(tuple(ops))
    return dataclasses.replace(program, cores=tuple(cores))


@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=EXAMPLES)
@given(program=programs_with_blind_copies())
@pytest.mark.rule("ACC-11", "RUN-3", "RUN-4")
def test_copies_through_blind_views_fail_alike_in_the_fast_run_and_every_schedule(program, mode):
    """The fast run raises where the step relation does (its schedule replays to its state) and ends in one of
    the explored outcomes, whichever waiter runs a failing task."""
    fast = fast_run(program, mode)
    assert run(program, mode, fast.schedule, finish=False) == fast.state
    assert visible(fast) in {visible(o) for o in explore(program, mode).outcomes}
