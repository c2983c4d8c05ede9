"""REP-24's name of an interpreter semaphore id, read from a per-core index of the allocations
(`Lowered.sem_allocation`), held to the scan of every allocation event it replaced: the same
allocation and index for any events and any (core, id), the first event in order when several cover it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.exit_balance import semaphore_words
from semcheck.checker.static.system import AllocEvent, Lowered


def _lowered(events: list[AllocEvent]) -> Lowered:
    fields = {f.name: None for f in dataclasses.fields(Lowered) if f.init}
    return Lowered(**{**fields, "sem_events": events})


def _scan(events: list[AllocEvent], core: int, sem_id: int):
    """The name's lookup as it was: every event, in order."""
    for ev in events:
        base = ev.bases.get(core)
        if base is not None and base <= sem_id < base + ev.op.count:
            return ev, sem_id - base
    return None


_EVENTS = st.lists(
    st.builds(lambda issuer, count, bases, n: AllocEvent(issuer, 0, SimpleNamespace(label=f"sem{n}", count=count), bases),
              st.integers(0, 3), st.integers(1, 4),
              st.dictionaries(st.integers(0, 5), st.none() | st.integers(0, 12), max_size=6), st.integers(0, 99)),
    max_size=8)


@pytest.mark.rule("REP-24")
@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(_EVENTS, st.integers(0, 6), st.integers(0, 18))
def test_a_semaphore_is_named_by_the_allocation_the_scan_finds(events, core, sem_id):
    low = _lowered(events)
    assert low.sem_allocation(core, sem_id) == _scan(events, core, sem_id)
    assert low.sem_allocation(core, sem_id) == _scan(events, core, sem_id)  # the index, once built
    found = _scan(events, core, sem_id)
    words = semaphore_words(("internal", sem_id), low, core)
    assert words == (f"{found[0].op.label}[{found[1]}] (id {sem_id})" if found else f"semaphore {sem_id}")
