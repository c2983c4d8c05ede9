"""RUN-41: exit-balance's witness is replayed once, and its held run is decided once per barrier set.

exit-balance replays its witness on the step relation itself; the positions that replay reaches are
what the report's timeline reads (the witness replay does not replay it again). Held to a fresh
replay of the witness's schedule on generated programs in every DMA mode. Whether the checking
cores can all be held at their checks in one run is decided once per participant set of the
barriers after the checks; held to asking it of every check's own barrier.
"""

from __future__ import annotations

import pytest
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import programs

from semcheck.checker.properties.exit_balance import _exit_checks, _held_at_checks, exit_balance
from semcheck.checker.properties.replay import with_replay
from semcheck.model import DMA_MODES
from semcheck.model.ops import Barrier
from semcheck.model.run import run


def _held_everywhere(program, checks) -> bool:
    """The held run's precondition asked of every check: the op after it is a barrier of all checking cores, or none."""
    cores = {c for c, _ in checks.values()}
    for c, x in checks.values():
        ops = program.cores[c]
        if x + 1 < len(ops) and not (isinstance(ops[x + 1], Barrier) and cores <= set(ops[x + 1].participants)):
            return False
    return True


@pytest.mark.rule("RUN-41")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=60, deadline=None)
@given(program=programs())
def test_the_exit_witness_positions_are_those_a_fresh_replay_reaches(mode, program):
    v = exit_balance(program, mode, warnings=False)
    if v.verdict != "violated" or v.witness is None or not v.witness.schedule:
        return
    assert v.stats.get("replayed") is True
    fresh = run(program, mode, v.witness.schedule, finish=False).pcs
    assert v.witness.details["terminal_pcs"] == list(fresh)
    checked = with_replay(exit_balance)(program, mode)
    assert checked.witness.details["terminal_pcs"] == list(fresh)
    assert "timeline" in checked.witness.details


@pytest.mark.rule("RUN-41")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=60, deadline=None)
@given(program=programs(), data=st.data())
def test_the_held_run_is_taken_exactly_when_every_check_is_followed_by_a_barrier_of_all(mode, program, data):
    checks = _exit_checks(program)
    if not checks:
        return
    # a launch follows every check with a barrier of all cores; some checks get a barrier of fewer
    cores = list(program.cores)
    for c, x in data.draw(st.lists(st.sampled_from(sorted(checks.values())), max_size=2, unique=True)):
        few = frozenset({c, *data.draw(st.sets(st.sampled_from(sorted(k for k, _ in checks.values()))))})
        cores[c] = cores[c][:x + 1] + (Barrier(f"extra{c}", few),) + cores[c][x + 1:]
    program = dataclasses.replace(program, cores=tuple(cores))
    held = _held_at_checks(program, mode, checks)
    assert (held is not None) == _held_everywhere(program, checks)
