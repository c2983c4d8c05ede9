"""The deadlock explanation's stray operation (PROP-4), found from the devices nearest each blocked core.

`_astray` names, for a blocked wait, the nearest operation on its semaphore that adds to a counter
more than is waited for there. It used to scan every counter for each blocked core (quadratic over a
pod's devices); it now looks at the issuing devices in order of distance (`_strays`). Held here to
that scan on generated programs, for every wait of every core.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.checker.properties.deadlock_explanation import _astray, _strays
from semcheck.checker.static.lowering import lower
from semcheck.model import DMA_MODES

sys.path.insert(0, str(Path(__file__).resolve().parent / "z3"))
from z3_strategies import programs, symmetric_programs  # noqa: E402


def _scanned(low, w, c, topo):
    """The stray operation by a scan of every counter (the rank `_astray` documents)."""
    n, best = topo.num_devices, None
    for counter, xs in low.by_counter.items():
        if counter[0] != w.counter[0] or counter[1] == c:
            continue
        if sum(x.amount for x in xs) - sum(v.value for v in low.waits_by_counter.get(counter, ())) <= 0:
            continue
        for x in xs:
            if x.kind == "dma_read":
                continue
            rank = ((topo.device_of(x.owner) - topo.device_of(c)) % n, topo.local_core_of(x.owner),
                    (topo.device_of(counter[1]) - topo.device_of(c)) % n, topo.local_core_of(counter[1]), x.pos)
            if best is None or rank < best[0]:
                best = (rank, x, counter[1])
    return None if best is None else best[1:]


@pytest.mark.rule("PROP-4")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=150, deadline=None)
@given(program=st.one_of(programs(), symmetric_programs(perturb=True).map(lambda case: case[0])))
def test_the_stray_operation_is_the_nearest_one_a_scan_of_every_counter_finds(mode, program):
    low = lower(program, mode)
    topo = program.topology
    strays = _strays(low, topo)
    for (c, _), w in low.waits.items():
        _, found = _astray(strays, w, c, lambda a, b: "", lambda x: "", topo)
        assert found == _scanned(low, w, c, topo)
