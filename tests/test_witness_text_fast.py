"""A pod-scale witness's words cost what they say, not the size of the program.

The timeline reads each core's last few lined operations backwards from its position, and naming
names each distinct text of a witness once; both held to the plain definitions they replace. A
timeline is made once per positions for the modes of one program (RUN-47), held to each mode's own.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.checking import check_program
from semcheck.checker.properties.timeline import _last_lined, _plain, humanize
from semcheck.model import DMA_MODES
from semcheck.model.ops import Loc


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=30), st.integers(0, 30), st.integers(1, 8))
def test_last_lined_is_the_tail_of_the_lined_prefix(lines, pc, last):
    ops = [SimpleNamespace(loc=Loc("k.py", line)) for line in lines]
    pc = min(pc, len(ops))
    assert _last_lined(ops, pc, last) == [op for op in ops[:pc] if op.loc.line > 0][-last:]


_TEXTS = st.sampled_from([
    "wait for 1 on scoped@k.py:12#0[0]", "buf@k.py:9#1/2 written", "k#1.sem[0] count 2", "hbm3 read",
    "device 2 core 0 at k.py:4", "nothing to name", "",
])


def _named_one_by_one(x, names):
    if isinstance(x, str):
        return humanize(x, names=names)
    if isinstance(x, dict):
        return {k: _named_one_by_one(v, names) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_named_one_by_one(v, names) for v in x)
    return x


class _Text(str):
    pass


class _Rows(list):
    pass


def _typed(x):
    """`x` with each value's exact type beside it: equal only where the types are the same throughout (a
    text is a text: naming an equal text once may give it as the `str` named first, as the memo always did)."""
    if isinstance(x, str):
        return (str, str(x))
    if isinstance(x, dict):
        return (type(x), {k: _typed(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return (type(x), [_typed(v) for v in x])
    return (type(x), x)


_SCALARS = _TEXTS | _TEXTS.map(_Text) | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()


@pytest.mark.rule("RUN-54")
@settings(max_examples=200, deadline=None)
@given(st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                    | st.lists(inner, max_size=3).map(_Rows)
                    | st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=20))
def test_naming_each_text_once_names_as_one_by_one(details):
    names = {"scoped@k.py:12#0": "send_sem", "hbm3": "x_ref"}
    assert _typed(_plain(details, names)) == _typed(_named_one_by_one(details, names))


@pytest.mark.rule("RUN-47")
@settings(max_examples=60, deadline=None)
@given(program=programs())
def test_a_timeline_shared_by_the_modes_is_each_modes_own(program):
    shared = Analysis(program)
    for mode in DMA_MODES:
        for mine, own in zip(check_program(program, mode, analysis=shared), check_program(program, mode)):
            assert mine.verdict == own.verdict
            if own.witness is not None:
                assert mine.witness.details.get("timeline") == own.witness.details.get("timeline")


_DETAILS = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                        | st.lists(inner, max_size=3).map(_Rows)
                        | st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=12)


@pytest.mark.rule("RUN-54")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["timeline", "blocked", "what", "n"]), _DETAILS, max_size=4),
                min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["timeline", "blocked", "what", "n"])), max_size=4))
def test_naming_the_verdicts_of_a_program_in_a_row_names_each_as_alone(details, reuse):
    """Naming several verdicts with one shared memo (texts, and each list or dict detail by the object, as the
    modes' witnesses share a timeline) gives each verdict what naming it alone gives, types included."""
    import dataclasses

    from semcheck.checker.properties.timeline import naming
    from semcheck.checker.properties.verdict import Verdict, Witness
    from semcheck.model.ops import Topology
    from semcheck.model.launch import launch

    for i, key in reuse:  # a later verdict's detail is an earlier one's object (RUN-47's shared timeline)
        if i < len(details) and key in details[0]:
            details[i][key] = details[0][key]
    program = dataclasses.replace(launch(Topology(2), [[], []]),
                                  names=(("scoped@k.py:12#0", "send_sem"), ("hbm3", "x_ref")))
    verdicts = [Verdict("deadlock-free", "violated", reason="core 1 op 0 on scoped@k.py:12#0[0]",
                        witness=Witness(message="core 0 waits on hbm3", schedule=(), blocked=((0, 0, "hbm3 read"),),
                                        details=d)) for d in details]
    shared: dict = {}
    for v in verdicts:
        alone, in_a_row = naming(v, program), naming(v, program, shared)
        assert _typed(in_a_row.witness.details) == _typed(alone.witness.details)
        assert (in_a_row.reason, in_a_row.witness.message, in_a_row.witness.blocked) == \
               (alone.reason, alone.witness.message, alone.witness.blocked)


@pytest.mark.rule("RUN-54")
def test_a_timeline_two_verdicts_share_is_named_once():
    import dataclasses

    from semcheck.checker.properties import timeline as module
    from semcheck.checker.properties.verdict import Verdict, Witness
    from semcheck.model.ops import Topology
    from semcheck.model.launch import launch

    program = dataclasses.replace(launch(Topology(2), [[], []]), names=(("hbm3", "x_ref"),))
    rows = [{"device": d, "events": ["hbm3 read", f"core {d} waits"]} for d in range(2)]
    verdicts = [Verdict("deadlock-free", "violated", witness=Witness(message="m", schedule=(), blocked=(),
                                                                     details={"timeline": rows, "n": [i]}))
                for i in range(2)]
    shared: dict = {}
    first, second = (module.naming(v, program, shared) for v in verdicts)
    assert first.witness.details["timeline"] is second.witness.details["timeline"]
    assert first.witness.details["timeline"][0]["events"][0] == "x_ref read"
    assert second.witness.details["n"] == [1]
