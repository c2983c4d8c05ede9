"""must_have_passed keeps a barrier's partners once per instance (RUN-34), not once per participant.

Held to the pass as it was (`tests/must_pass_reference.py`) on generated programs: the same vectors
for targets at every core's end and at every wait.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import must_pass_reference  # noqa: E402
from semcheck.checker.static.lowering import lower
from semcheck.checker.static.must_pass import must_have_passed
from semcheck.model import DMA_MODES

sys.path.insert(0, str(Path(__file__).resolve().parent / "z3"))
from z3_strategies import programs, symmetric_programs  # noqa: E402


@pytest.mark.rule("RUN-34")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=150, deadline=None)
@given(program=st.one_of(programs(), symmetric_programs(perturb=True).map(lambda case: case[0])))
def test_must_have_passed_with_barriers_once_per_instance_is_the_pass_per_participant(mode, program):
    low = lower(program, mode)
    if not low.ok:
        return
    targets = {("end", c): (c, low.lengths[c]) for c in range(len(low.lengths))}
    targets.update({("wait", g, i): (g, i) for (g, i) in low.waits})
    got = must_have_passed(low, targets)
    want = must_pass_reference.must_have_passed(low, targets)
    assert (got is None) == (want is None)
    if got is not None:
        assert got.keys() == want.keys()
        for d in got:
            assert np.array_equal(got[d], want[d]), d
