"""Scale: the order-encoded stuck-vector query proves a 64-device ring all-reduce in seconds."""

from __future__ import annotations


import pytest

from semcheck.checker.z3 import deadlock_free, id_disjoint
from semcheck.checker.properties.dma_bytes import dma_bytes
from semcheck.checker.properties.exit_balance import exit_balance
from semcheck.checker.properties.id_agreement import id_agreement
from ring_programs import ring_allreduce


@pytest.mark.rule("PROP-4")
def test_ring_allreduce_64_devices_is_proved_by_one_large_query():
    p = ring_allreduce(64)  # 48,832 operations
    v = deadlock_free(p, "hardware", symmetry=False)
    assert v.verdict == "proved"
    # one query over every core's stoppable positions (speed is measured in bench/, not asserted)
    assert v.stats["clauses"] > 15_000 and v.stats["z3"] == "unsat"


@pytest.mark.rule("RUN-6", "PROP-4")
def test_ring_allreduce_64_devices_is_proved_on_one_orbit():
    """RUN-6: the ring is rotation-symmetric, so the query needs one device's positions."""
    p = ring_allreduce(64)
    full = deadlock_free(p, "hardware", symmetry=False)
    v = deadlock_free(p, "hardware")
    assert v.verdict == "proved" and v.stats["symmetry"] == {"rotate_devices": 1, "orbits": 1}
    assert v.stats["vars"] * 64 == full.stats["vars"]


@pytest.mark.rule("PROP-4")
def test_ring_allreduce_64_devices_deadlock_is_found_and_replayed():
    v = deadlock_free(ring_allreduce(64, bug="deadlock"), "eager")
    assert v.verdict == "violated"
    assert [b[0] for b in v.witness.blocked] == list(range(64))  # everyone ends up waiting


@pytest.mark.rule("PROP-1", "PROP-3", "PROP-5", "PROP-6")
def test_other_properties_at_64_devices():
    p = ring_allreduce(64)
    for check in (id_disjoint, id_agreement, exit_balance, dma_bytes):
        assert check(p, "eager").verdict == "proved", check.__name__


@pytest.mark.slow
@pytest.mark.parametrize("n", [128, 256])
@pytest.mark.rule("PROP-4")
def test_ring_allreduce_scales(n):
    v = deadlock_free(ring_allreduce(n), "hardware", timeout_ms=600_000)
    assert v.verdict == "proved"
