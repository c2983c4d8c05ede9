"""Exit warnings (PROP-5, EXIT-1) from fast runs and lower bounds, not from a per-event encoding.

`test_z3_crosscheck.py` holds every warning behaviour against the explorer on generated
programs; these tests pin the pieces: the lower bound `must_have_passed` is below every
reachable state, a ring whose copies are never waited is decided at 8 and 64 devices, and the
id-int16 witness is a short prefix.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from z3_strategies import examples, programs

from semcheck.checker.z3 import id_int16
from semcheck.checker.properties.exit_balance import exit_balance
from semcheck.checker.static.must_pass import must_have_passed
from semcheck.checker.static.lowering import lower
from semcheck.model import (
    BARRIER,
    DMA_MODES,
    AllocSem,
    DmaStart,
    GetBarrierSem,
    Loc,
    Scratch,
    SemRef,
    Signal,
    State,
    Topology,
    Wait,
    enabled,
    explore,
    launch,
    step,
)


@pytest.mark.rule("PROP-5", "RUN-3")
@examples(150)
@given(programs(), st.integers(0, 2**31), st.sampled_from(DMA_MODES))
def test_the_lower_bound_is_below_every_state_a_random_schedule_reaches(p, seed, mode):
    low = lower(p, mode)
    if not low.ok:
        return
    rng = random.Random(seed)
    state = State.initial(p)
    for _ in range(60):
        if state.failure is not None:
            break
        c = rng.randrange(p.topology.num_cores)
        bounds = must_have_passed(low, {0: (c, state.pcs[c])})
        assert bounds is not None
        assert all(int(b) <= q for b, q in zip(bounds[0], state.pcs)), (c, list(bounds[0]), state.pcs)
        actors = enabled(p, mode, state)
        if not actors:
            break
        state = step(p, mode, state, rng.choice(actors))


def _ring(n: int, *, unwaited_sends: int) -> object:
    """A ring: per step a credit handshake, a copy to the right, its waits; the last
    `unwaited_sends` steps never wait for their send semaphore (the local copy's completion)."""
    bodies = []
    steps = 2 * (n - 1)
    for d in range(n):
        ops = []
        for s in range(steps):
            ops += [GetBarrierSem(loc=Loc("k.py", 1)), Signal(SemRef(BARRIER), 1, device=(d - 1) % n, loc=Loc("k.py", 2)),
                    Wait(SemRef(BARRIER), 1, loc=Loc("k.py", 3)),
                    DmaStart(SemRef("recv"), 8, src_sem=SemRef("send"), device=(d + 1) % n, loc=Loc("k.py", 4))]
            if s < steps - unwaited_sends:
                ops.append(Wait(SemRef("send"), 8, kind="dma", loc=Loc("k.py", 5)))
            ops.append(Wait(SemRef("recv"), 8, kind="dma", loc=Loc("k.py", 6)))
        bodies.append(ops)
    return launch(Topology(n), bodies, collective_id=0, scratch=[Scratch("send"), Scratch("recv")])


def _warned(outcome, device):
    return any(w.device == device and w.nonzero for w in outcome.state.warnings)


@pytest.mark.rule("PROP-5", "EXIT-1")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_an_unwaited_local_copy_agrees_with_the_explorer(mode):
    # two devices, the last step's send never waited: under hardware and on_wait its read half may
    # still be in flight at the check, under eager it has happened at the start
    p = _ring(2, unwaited_sends=1)
    v = exit_balance(p, mode)
    assert v.verdict == "violated"
    outs = explore(p, mode).outcomes
    for d in ("0", "1"):
        w = v.witness.details["warnings"][d]
        some, every = any(_warned(o, int(d)) for o in outs), all(_warned(o, int(d)) for o in outs)
        assert w["behaviour"] == ("must" if every else "may" if some else "never"), (mode, d, w)
        if w["behaviour"] == "may" and mode != "on_wait":
            assert w["not_must"]


@pytest.mark.rule("PROP-5", "EXIT-1")
@pytest.mark.parametrize("n", [8, 64])
@pytest.mark.parametrize("mode", DMA_MODES)
def test_a_ring_whose_copies_are_never_waited_must_warn_on_every_device(mode, n):
    # all but the first grid step's send unwaited: the next credit handshake cannot happen before the
    # right neighbour received the copy, so at least one unwaited read half is in before the check
    # (the timestamp encoding took minutes here at 8 devices)
    p = _ring(n, unwaited_sends=n - 1)
    v = exit_balance(p, mode)
    assert v.verdict == "violated"
    assert {w["behaviour"] for w in v.witness.details["warnings"].values()} == {"must"}


@pytest.mark.rule("PROP-2", "IDS-1")
def test_the_int16_witness_is_the_failing_cores_prefix():
    # core 0 of each of 8 devices allocates 3 x 16000 ids: the third allocation overflows; the
    # witness needs device 0 alone (and the others at the start barrier), not every device's run
    bodies = [[AllocSem(f"a{k}", 16000, site=f"a{k}", loc=Loc("k.py", 10 + k)) for k in range(3)] for _ in range(8)]
    p = launch(Topology(8), bodies)
    v = id_int16(p, "eager")
    assert v.verdict == "violated"
    per_core = {}
    for actor in v.witness.schedule:
        per_core[actor[1]] = per_core.get(actor[1], 0) + 1
    failing = v.witness.schedule[-1][1]
    assert per_core[failing] == len(p.cores[failing]) - 3 - 1 + 1  # up to and including the failing allocation
    assert all(k <= 1 for c, k in per_core.items() if c != failing)  # the others: at most the start barrier


def _two_local_copies_one_wait(waits: int) -> object:
    """One device: two 4 KiB local copies into one semaphore, `waits` waits of 4 KiB on it."""
    ops = [DmaStart(SemRef("recv"), 4096, loc=Loc("k.py", 1)), DmaStart(SemRef("recv"), 4096, loc=Loc("k.py", 2))]
    ops += [Wait(SemRef("recv"), 4096, kind="dma", loc=Loc("k.py", 3 + i)) for i in range(waits)]
    return launch(Topology(1), [ops], scratch=[Scratch("recv")])


@pytest.mark.rule("PROP-5", "EXIT-1", "DMA-3")
@pytest.mark.parametrize("mode", DMA_MODES)
def test_a_copy_no_waiter_runs_under_on_wait_is_never_warned_of(mode):
    # under on_wait the one wait runs one copy's task and is met: the other copy stays queued, the
    # count is zero at the check in every run, and the interpreter prints nothing (PROP-5 still
    # reports the pending copy); eager lands both copies at their starts, hardware may land the
    # second before the check
    p = _two_local_copies_one_wait(1)
    v = exit_balance(p, mode)
    assert v.verdict == "violated"
    outs = explore(p, mode).outcomes
    some, every = any(_warned(o, 0) for o in outs), all(_warned(o, 0) for o in outs)
    want = "must" if every else "may" if some else "never"
    assert want == {"on_wait": "never", "eager": "must", "hardware": "may"}[mode]
    assert v.witness.details["warnings"]["0"]["behaviour"] == want
