"""id-disjoint, id-int16, id-agreement, and the symbolic bounds, against numpy's rules and the model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from z3_strategies import examples, programs

from semcheck.checker.z3 import collision_bound, id_disjoint, id_int16, int16_bound
from semcheck.checker.properties.id_agreement import id_agreement
from ring_programs import ring_allreduce
from semcheck.model import (
    BARRIER,
    DMA_MODES,
    AllocBuffer,
    AllocSem,
    GetBarrierSem,
    Scratch,
    SemRef,
    Signal,
    Topology,
    Wait,
    explore,
    launch,
    run,
)
from semcheck.model.errors import Int16Overflow
from semcheck.model.ids import INT16_MAX, arange_int16

# --- symbolic bounds against numpy's arange rule (IDS-1) --------------------------------------------


def _first_failing_trip(per, prefix, lo, hi, first):
    for t in range(lo, hi + 1):
        base = first + prefix + (t - 1) * per
        ids = arange_int16(base, per)
        if isinstance(ids, Int16Overflow) or any(x != base + k for k, x in enumerate(ids)):
            return t, ("overflow" if isinstance(ids, Int16Overflow) else "wrap")
    return None, None


@examples(200, 5000)
@given(st.integers(1, 6), st.integers(0, 400), st.integers(1, 50), st.integers(0, 300),
       st.integers(32_000, 32_767))
@pytest.mark.rule("PROP-2", "IDS-1")
def test_int16_bound_is_the_first_trip_count_numpy_rejects_or_wraps(per, prefix, lo, width, first):
    hi = lo + width
    b = int16_bound(per, prefix, (lo, hi), first_id=first)
    want, kind = _first_failing_trip(per, prefix, lo, hi, first)
    if want is None:
        assert b.proved and b.smallest_failing is None
    else:
        assert not b.proved and b.smallest_failing == want and b.kind == kind


@pytest.mark.rule("PROP-2", "IDS-1")
def test_int16_bound_at_the_interpreter_scale():
    # one run_scoped DMA + one REGULAR semaphore per grid step, after two scratch semaphores
    b = int16_bound(2, 2, (1, 100_000))  # step k gets ids 2002 + 2k, 2003 + 2k
    assert b.smallest_failing == 15_384 and b.kind == "overflow"  # k = 15383 starts at 32768
    assert int16_bound(2, 2, (1, 15_383)).proved
    # three per step after one: the first failing step wraps silently instead of raising
    w = int16_bound(3, 1, (1, 100_000))
    assert w.kind == "wrap" and "wrap" in w.detail


@examples(200, 5000)
@given(st.integers(0, 2100), st.integers(1, 4), st.integers(0, 30), st.integers(1, 20), st.integers(0, 40))
@pytest.mark.rule("PROP-1")
def test_collision_bound_against_enumeration(cid, per, prefix, lo, width):
    hi = lo + width
    b = collision_bound(cid, per, prefix, (lo, hi), first_id=2000)
    want = None
    for t in range(lo, hi + 1):
        ids = set(range(2000, 2000 + prefix + t * per))
        if cid in ids:
            want = t
            break
    assert b.smallest_failing == want and b.proved == (want is None)


# --- id-disjoint ------------------------------------------------------------------------------------------


@pytest.mark.rule("PROP-1", "ERR-1")
def test_collective_id_colliding_with_scratch_semaphores():
    p = ring_allreduce(3, bug="collide")  # collective_id 2001 = the recv semaphore's id
    for mode in ("eager", "on_wait"):
        v = id_disjoint(p, mode)
        assert v.verdict == "violated"
        d = v.witness.details
        assert d["collective_id"] == 2001 and d["fires"] == "must"
        assert d["message"] == "Semaphore 2001 occurs as both fixed-id and internal."
        assert d["allocation_sites"] == ["ring_allreduce.py:114"]
        assert d["get_barrier_semaphore_sites"] == ["ring_allreduce.py:60"]
        state = run(p, mode, v.witness.schedule, finish=False)
        assert 2001 in state.tables.fixed and 2001 in state.tables.internal
        fired = run(p, mode, d["fire_schedule"], finish=False)
        assert fired.failure.violation.message == d["message"]
    assert id_disjoint(p, "hardware").verdict == "proved"
    assert id_disjoint(ring_allreduce(3), "eager").verdict == "proved"


@pytest.mark.rule("PROP-1")
def test_both_tables_without_any_lookup_of_the_id_does_not_fire():
    # the scratch semaphore gets id 2000 = collective_id, but the kernel never uses the barrier semaphore
    p = launch(Topology(2), [[GetBarrierSem()], [GetBarrierSem()]], collective_id=2000, scratch=[Scratch("s")])
    v = id_disjoint(p, "eager")
    assert v.verdict == "violated" and v.witness.details["fires"] == "no"
    assert explore(p, "eager", reduce=False).kinds() == {"completed"}


@pytest.mark.rule("PROP-1")
def test_get_barrier_semaphore_never_running_means_disjoint():
    p = launch(Topology(2), [[], []], collective_id=2000, scratch=[Scratch("s")])
    assert id_disjoint(p, "eager").verdict == "proved"


# --- id-int16 ----------------------------------------------------------------------------------------


@pytest.mark.rule("PROP-2", "ERR-3")
def test_overflowing_allocation():
    # 30767 semaphores take ids 2000..32766; the next allocation of 2 starts at 32767: 32768 does not fit
    p = launch(Topology(1), [[AllocSem("big", 30_767, site="big"), AllocSem("next", 2, site="next")]])
    v = id_int16(p, "eager")
    assert v.verdict == "violated"
    assert v.witness.message == "Python integer 32768 out of bounds for int16"
    assert run(p, "eager", v.witness.schedule, finish=False).failure.violation == Int16Overflow(32768)


@pytest.mark.rule("PROP-2", "IDS-1")
def test_silently_wrapping_allocation():
    p = launch(Topology(1), [[AllocSem("big", 30_766, site="big"), AllocSem("next", 3, site="next")]])
    v = id_int16(p, "on_wait")
    assert v.verdict == "violated" and "wrap" in v.witness.message
    assert id_int16(p, "hardware").verdict == "proved"


@pytest.mark.rule("PROP-2")
def test_out_of_range_allocation_behind_a_deadlock_never_runs():
    p = launch(Topology(1), [[Wait(SemRef("s")), AllocSem("big", 40_000, site="big")]], scratch=[Scratch("s")])
    v = id_int16(p, "eager")
    assert v.verdict == "proved" and "never execute" in v.reason


@pytest.mark.rule("PROP-2", "IDS-2")
def test_buffer_ids_and_collective_id():
    p = launch(Topology(1), [[GetBarrierSem()]], collective_id=40_000)
    assert id_int16(p, "eager").verdict == "violated"
    bufs = [AllocBuffer(f"b{i}") for i in range(3)]
    assert id_int16(launch(Topology(1), [bufs]), "eager").verdict == "proved"


# --- id-agreement ---------------------------------------------------------------------------------------


def _device_dependent_scope(n=2):
    """Device 0 opens one extra run_scoped region first, so its per-step semaphore ids are shifted."""
    bodies = []
    for d in range(n):
        ops = []
        if d == 0:
            ops.append(AllocSem(f"extra{d}", 1, site="extra"))
        ops.append(AllocSem(f"tok{d}", 1, site="tok"))
        ops.append(Signal(SemRef(f"tok{d}"), 1, device=(d + 1) % n))
        ops.append(Wait(SemRef(f"tok{d}")))
        bodies.append(ops)
    return launch(Topology(n), bodies)


@pytest.mark.rule("PROP-3")
def test_remote_signal_to_a_shifted_scoped_semaphore():
    p = _device_dependent_scope()
    for mode in ("eager", "on_wait"):
        v = id_agreement(p, mode)
        assert v.verdict == "violated"
        assert v.witness.details["sender_id"] == 2001 and v.witness.details["target_ids"] == [[2000]]
        # the symptom: both devices deadlock, each waiting on the id the other never signals
        assert explore(p, mode).kinds() == {"deadlock"}
    assert id_agreement(p, "hardware").verdict == "proved"  # on hardware the site is the semaphore


@pytest.mark.parametrize("mode", DMA_MODES)
@pytest.mark.rule("PROP-3")
def test_rings_agree(mode):
    assert id_agreement(ring_allreduce(4), mode).verdict == "proved"


@pytest.mark.rule("PROP-3")
def test_barrier_semaphore_is_the_same_everywhere():
    p = launch(Topology(2), [[GetBarrierSem(), Signal(SemRef(BARRIER), device=1)], [GetBarrierSem(), Wait(SemRef(BARRIER))]],
               collective_id=0)
    assert id_agreement(p, "eager").verdict == "proved"


# --- the fast paths: what they read is what the scan and the solver read (RUN-27, RUN-28) ----------------


@examples(150)
@given(programs(), st.sampled_from(DMA_MODES))
@pytest.mark.rule("RUN-27")
def test_id_agreement_reads_the_lowerings_uses_in_the_scans_order(program, mode):
    import dataclasses

    from semcheck.checker.properties.id_uses import _remote_uses
    from semcheck.checker.static.least_stuck import s_prime_end
    from semcheck.checker.static.lowering import lower

    low = lower(program, mode)
    if not low.ok:
        return
    pcs = s_prime_end(low).pcs
    read = list(_remote_uses(program, mode, low, pcs))
    scanned = list(_remote_uses(program, mode, dataclasses.replace(low, unsupported=["scan"]), pcs))
    assert read == [u for u in scanned if isinstance(u[4], int)]  # a target that does not resolve is skipped


@examples(150)
@given(programs())
@pytest.mark.rule("RUN-28")
def test_id_disjoint_arithmetic_is_the_solvers_answer(program):
    import z3

    from semcheck.checker.static.lowering import lower
    from semcheck.checker.z3.ids import IdModel, fixed_order_covering

    low = lower(program, "eager")
    cid = program.collective_id
    if cid is None or low.racy_counters:
        return
    model = IdModel(low)
    s = model.solver(30_000)
    conds = model.contains(cid)
    s.add(z3.Or([c for _, c in conds]) if conds else z3.BoolVal(False))
    res = s.check()
    covering = fixed_order_covering(low, cid)
    assert (res == z3.sat) == bool(covering)
    if res == z3.sat:
        m = s.model()
        assert covering == [(k[1], k[2]) for k, c in conds if z3.is_true(m.eval(c, model_completion=True))]
