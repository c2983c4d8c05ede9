"""RUN-35: a witness replays in place, and the exit query reads only its device's counters (RUN-59: its maps' lookups).

`run` applies a schedule's steps to one transient state (`model.transient`): the step relation's own
rules, their updates made in place. It is held to the step relation as it is (`in_place=False`, one
new State per step) on generated programs and random schedules of enabled steps, in every DMA mode:
the state each prefix reaches, and the finished outcome. SEM-8's exit query given the counters by
core (the fast run's and a replay's) is held to reading every count. RUN-40: a replay's growing
sequences (copies, warnings, reads) change in place and hold what the step relation's tuples hold.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

from semcheck.model import DMA_MODES
from semcheck.model.errors import ModelBug
from semcheck.model.fmap import FMap
from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import SemRef, Signal, Topology, Wait
from semcheck.model.run import run
from semcheck.model.semaphore import nonzero
from semcheck.model.state import State
from semcheck.model.step import enabled, step
from semcheck.model.transient import TransientCounts, TransientList, TransientMap, appended, freeze, replaced, thaw

sys.path.insert(0, str(Path(__file__).resolve().parent / "z3"))
from z3_strategies import programs as z3_programs  # noqa: E402


def _random_schedule(program, mode, rnd, limit: int = 80) -> list:
    state, schedule = State.initial(program), []
    for _ in range(limit):
        actors = enabled(program, mode, state)
        if not actors:
            break
        actor = rnd.choice(actors)
        state = step(program, mode, state, actor)
        schedule.append(actor)
    return schedule


@pytest.mark.rule("RUN-35", "RUN-40", "RUN-59")
@pytest.mark.parametrize("mode", DMA_MODES)
@settings(max_examples=150, deadline=None)
@given(program=st.one_of(programs(), z3_programs()), rnd=st.randoms(use_true_random=False), data=st.data())
def test_a_replay_in_place_reaches_the_states_of_the_step_relation(mode, program, rnd, data):
    schedule = _random_schedule(program, mode, rnd)
    cut = data.draw(st.integers(0, len(schedule)))
    reference = run(program, mode, schedule[:cut], finish=False, in_place=False)
    replayed = run(program, mode, schedule[:cut], finish=False)
    assert type(replayed) is State
    assert replayed == reference
    assert run(program, mode, schedule[:cut]) == run(program, mode, schedule[:cut], in_place=False)


@pytest.mark.rule("RUN-35")
def test_a_transient_state_refuses_to_be_probed_and_freezes_to_its_value():
    program = launch(Topology(2, 1), [[Signal(SemRef("s0", 0), 1, device=1)], [Wait(SemRef("s0", 0), 1)]],
                     scratch=[Scratch("s0", 1)])
    state = thaw(State.initial(program))
    with pytest.raises(ModelBug):
        enabled(program, "eager", state)
    assert freeze(state) == State.initial(program)


@pytest.mark.rule("SEM-8", "RUN-35")
@settings(max_examples=200, deadline=None)
@given(entries=st.dictionaries(st.tuples(st.sampled_from([("internal", 2000), ("fixed", 0)]), st.integers(0, 5)),
                               st.integers(-2, 2)),
       cores=st.sets(st.integers(0, 5)))
def test_the_exit_query_by_core_is_the_query_over_every_count(entries, cores):
    by_core: dict[int, list] = {}
    for counter in entries:
        by_core.setdefault(counter[1], []).append(counter)
    assert nonzero(FMap(entries), cores, by_core) == nonzero(FMap(entries), cores)
    counts = TransientCounts()
    for counter, value in entries.items():
        counts.set(counter, value, drop=0)
    assert nonzero(counts, cores, counts.by_core) == nonzero(FMap(entries), cores)


@pytest.mark.rule("RUN-40")
@settings(max_examples=200, deadline=None)
@given(start=st.lists(st.integers(), max_size=6),
       edits=st.lists(st.tuples(st.booleans(), st.integers(0, 10), st.integers()), max_size=12))
def test_a_growing_sequence_changes_in_place_as_a_tuple_would(start, edits):
    as_tuple, in_place = tuple(start), TransientList(start)
    for append, at, value in edits:
        if append:
            as_tuple, grown = appended(as_tuple, value), appended(in_place, value)
        elif as_tuple:
            i = at % len(as_tuple)
            as_tuple, grown = replaced(as_tuple, i, value), replaced(in_place, i, value)
        else:
            continue
        assert grown is in_place  # changed in place, not copied
        assert type(as_tuple) is tuple and tuple(in_place) == as_tuple
    with pytest.raises(TypeError):
        hash(in_place)


_KEYS = st.tuples(st.sampled_from([("internal", 2000), ("fixed", 0), ("site", 1, 0)]), st.integers(0, 3))


@pytest.mark.rule("RUN-59")
@settings(max_examples=200, deadline=None)
@given(start=st.dictionaries(_KEYS, st.integers(-2, 2), max_size=6), counts=st.booleans(),
       edits=st.lists(st.tuples(st.booleans(), _KEYS, st.integers(-2, 2), st.booleans()), max_size=12))
def test_a_transient_map_answers_get_as_the_map_it_stands_for(start, counts, edits):
    source = FMap(start)
    kind = TransientCounts if counts else TransientMap
    in_place, as_value = kind(source), source
    for one, key, value, drop in edits:
        if one:
            grown = in_place.set(key, value, drop=0) if drop else in_place.set(key, value)
            as_value = as_value.set(key, value, drop=0) if drop else as_value.set(key, value)
        else:
            grown, as_value = in_place.update({key: value}), as_value.update({key: value})
        assert grown is in_place  # changed in place, its bound `get` still its own dict's
        for k in set(start) | {key}:
            assert in_place.get(k) == as_value.get(k) and in_place.get(k, "none") == as_value.get(k, "none")
    assert FMap(in_place) == as_value and dict(FMap(in_place).items()) == dict(as_value.items())
    assert source == FMap(start)  # the map it was made from is left as it was (a copy, not its dict)
