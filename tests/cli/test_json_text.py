"""REP-38: the JSON report's text is what `json.dumps(indent=2)` writes, written faster; its texts relative
to the working directory as `rel` makes each."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from enum import IntEnum

import pytest
from hypothesis import given, settings, strategies as st

from semcheck.checker.report.findings import rel
from semcheck.checker.report.json_text import dumps
from semcheck.checker.report.render import dump_json, rel_all

pytestmark = pytest.mark.rule("REP-38")


class Level(IntEnum):
    LOW = 1


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int
    y: str


def _default(o):
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


_texts = st.text(st.characters(codec="utf-8"), max_size=6) | st.sampled_from(["]", "}", "],\n  [", '"', "\\"])
_scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | _texts
            | st.just(Level.LOW) | _texts.map(Name) | st.just(math.inf) | st.just(-math.inf))
_keys = _texts | st.integers(-5, 5) | st.booleans() | st.none() | st.floats(allow_nan=False)
_others = st.builds(Point, st.integers(), _texts) | st.frozensets(st.integers(), max_size=3) | st.just(object)


def _values(children):
    rows = st.lists(st.lists(_scalars, min_size=0, max_size=3) | st.tuples(_scalars, _scalars), max_size=4)
    dict_rows = st.lists(st.dictionaries(_keys, _scalars, max_size=3), max_size=4)
    return (st.lists(children, max_size=4) | st.tuples(children, children) | rows | dict_rows
            | st.dictionaries(_keys, children, max_size=4))


_json = st.recursive(_scalars | _others, _values, max_leaves=30)


@settings(max_examples=600, deadline=None)
@given(_json)
def test_the_json_report_text_is_what_json_dumps_writes(value):
    assert dumps(value, _default) == json.dumps(value, indent=2, default=_default)


def test_a_pod_scale_witness_is_written_as_json_dumps_writes_it():
    """The shapes of a big witness: a schedule of pairs, a timeline of dicts with lists of steps, at depth."""
    schedule = [["core", i % 7] for i in range(3000)] + [("dma_read", 3), ("dma_write", 3)]
    steps = [{"file": "k.py", "line": i, "op": f"wait s[{i}]", "stop": i % 5 == 0} for i in range(40)]
    timeline = [{"device": d, "events": [f"k.py:{d}  signal"] * 3, "steps": steps} for d in range(200)]
    report = {"results": [{"witness": {"schedule": schedule, "details": {"timeline": timeline, "n": 1.5}}}]}
    assert dump_json(report) == json.dumps(report, indent=2, default=str)


def _rel_each(x):
    """`rel` of every text of `x`, tuples as lists (what the report has always made of a witness's details)."""
    if isinstance(x, str):
        return rel(x)
    if isinstance(x, dict):
        return {k: _rel_each(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rel_each(v) for v in x]
    return x


_paths = st.sampled_from([os.getcwd() + os.sep + "k.py:3", "k.py", os.getcwd(), "x " + os.getcwd() + os.sep + "a"])
_details = st.recursive(_scalars | _paths | _paths.map(Name),
                        lambda c: st.lists(c, max_size=4) | st.tuples(c, c) | st.dictionaries(_texts, c, max_size=4),
                        max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_details)
def test_a_witness_details_texts_are_made_relative_each_as_rel_makes_it(value):
    out = rel_all(value)
    assert out == _rel_each(value)
    assert json.dumps(out, default=str) == json.dumps(_rel_each(value), default=str)
