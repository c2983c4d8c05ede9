"""SEM-1 .. SEM-8: the manager's semaphore rules."""

from __future__ import annotations

import pytest

from semcheck.model import manager as mgr
from semcheck.model import semaphore as sem
from semcheck.model.errors import IdCollision, UnknownSemaphore
from semcheck.model.fmap import FMap


@pytest.mark.rule("SEM-1")
def test_allocation_counts_per_core_from_2000():
    t, bases = sem.allocate(sem.SemTables(), [0], 3)
    t, more = sem.allocate(t, [0, 1], 2)
    assert bases == {0: 2000}
    assert more == {0: 2003, 1: 2000}
    assert t.internal == frozenset(range(2000, 2005))


@pytest.mark.rule("SEM-1")
def test_device_allocation_gives_every_core_the_same_ids():
    _, bases = sem.allocate(sem.SemTables(), [4, 5], 2)
    assert bases == {4: 2000, 5: 2000}


@pytest.mark.rule("SEM-1")
def test_ids_are_never_freed():
    t = sem.SemTables()
    seen = []
    for _ in range(3):
        t, b = sem.allocate(t, [0], 1)
        seen.append(b[0])
    assert seen == [2000, 2001, 2002]


@pytest.mark.rule("SEM-2")
def test_fixed_id_is_idempotent():
    t = sem.guarantee_fixed(sem.SemTables(), 7)
    assert sem.guarantee_fixed(t, 7) is t
    assert t.fixed == {7}


@pytest.mark.rule("SEM-3")
def test_lookup_prefers_fixed_table():
    t = sem.guarantee_fixed(sem.SemTables(), 7)
    assert sem.lookup(t, 7) == ("fixed", 7)


@pytest.mark.rule("SEM-3", "ERR-1")
def test_lookup_of_id_in_both_tables_raises_collision():
    t, _ = sem.allocate(sem.SemTables(), [0], 1)
    t = sem.guarantee_fixed(t, 2000)
    got = sem.lookup(t, 2000)
    assert got == IdCollision(2000)
    assert got.message == "Semaphore 2000 occurs as both fixed-id and internal."


@pytest.mark.rule("SEM-3", "ERR-2")
def test_lookup_of_unknown_id_fails():
    assert sem.lookup(sem.SemTables(), 2000) == UnknownSemaphore(2000)


@pytest.mark.rule("SEM-4")
def test_signal_adds_to_target_core_only():
    c = sem.signal(FMap(), ("internal", 2000), 1, 3)
    assert sem.count(c, ("internal", 2000), 1) == 3
    assert sem.count(c, ("internal", 2000), 0) == 0


@pytest.mark.rule("SEM-5")
def test_wait_blocks_until_own_core_count_reaches_value():
    key = ("internal", 2000)
    c = sem.signal(FMap(), key, 0, 1)
    assert sem.try_wait(c, key, 0, 2) is None
    c = sem.signal(c, key, 0, 1)
    assert sem.try_wait(c, key, 0, 2) == FMap()


@pytest.mark.rule("SEM-7")
def test_tasks_are_popped_last_in_first_out():
    key = ("internal", 2000)
    q = sem.enqueue_task(FMap(), key, 0, (0, "read"))
    q = sem.enqueue_task(q, key, 0, (1, "read_write"))
    q, t = sem.pop_task(q, key, 0)
    assert t == (1, "read_write")
    q, t = sem.pop_task(q, key, 0)
    assert t == (0, "read")
    assert sem.pop_task(q, key, 0) == (FMap(), None)


@pytest.mark.rule("SEM-8")
def test_nonzero_lists_only_the_devices_cores():
    c = sem.signal(sem.signal(FMap(), ("fixed", 0), 0, 1), ("fixed", 0), 3, 2)
    assert sem.nonzero(c, [2, 3]) == ((("fixed", 0), 3, 2),)


@pytest.mark.rule("RACE-1")
def test_with_race_detection_a_wait_on_a_never_signalled_count_fails():
    racy, quiet = mgr.Config(detect_races=True), mgr.Config()
    m, base = mgr.allocate_semaphores(mgr.Manager(), 0, 2)
    key, other = ("internal", base), ("internal", base + 1)
    m2, failure = mgr.wait(racy, m, key, 0, 0)
    assert failure is not None and failure.python_type == "AssertionError" and failure.message == ""
    assert mgr.wait(quiet, m, key, 0, 0) == (m, None)
    m = mgr.signal(m, key, 0, 0)  # a signal of 0 still leaves a clock
    assert mgr.wait(racy, m, key, 0, 0)[1] is None
    assert mgr.wait(racy, m, key, 1, 0)[1] is not None  # the clock is per core
    # a DMA half that ran leaves one too (eager: at its start)
    m, _ = mgr.dma_start(mgr.Config(detect_races=True, dma_execution_mode="eager"), m, 0, 1, 4, None, base + 1)
    assert mgr.holds_clock(m, other, 1) and not mgr.holds_clock(m, other, 0)
    assert mgr.wait(racy, m, other, 1, 4)[1] is None
