"""PRG-183: a call's verdicts over its loop's iterations, each iteration checked with its own values, merge as the
loop runs them: violated when some iteration violates the property (naming it), unknown when some iteration leaves
it undecided and none violates it, and holding only when every iteration's verdict holds."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semcheck.checker.programs.iterations import iteration_checks, merge_iterations
from semcheck.checker.properties.verdict import Verdict, Witness

KINDS = ("proved", "vacuous", "violated", "unknown", "unrunnable")


def _verdict(kind: str, i: int) -> Verdict:
    if kind == "violated":
        return Verdict("deadlock-free", kind, witness=Witness(f"stuck {i}"))
    return Verdict("deadlock-free", kind, reason="" if kind == "proved" else f"why {i}")


@pytest.mark.rule("PRG-183")
@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=8))
def test_the_iterations_verdicts_merge_as_the_loop_runs_them(kinds):
    got = merge_iterations([(f"iteration {i}", _verdict(k, i)) for i, k in enumerate(kinds)])
    if "violated" in kinds:
        i = kinds.index("violated")
        assert got.verdict == "violated"
        assert got.witness.message == f"in iteration {i} (PRG-183): stuck {i}"
    elif any(k in ("unknown", "unrunnable") for k in kinds):
        i = next(i for i, k in enumerate(kinds) if k in ("unknown", "unrunnable"))
        assert got.verdict == kinds[i] and got.reason == f"in iteration {i} (PRG-183): why {i}"
    elif "proved" in kinds:
        assert got.verdict == "proved"
    else:
        assert got.verdict == "vacuous" and got.reason.startswith("in every iteration of the loop: ")


@pytest.mark.rule("PRG-183")
def test_iterations_with_one_lowering_are_checked_once():
    checked = []
    a, b = object(), object()

    def check(program):
        checked.append(program)
        kind = "violated" if program is b else "proved"
        return {"eager": ([_verdict(kind, 0)], 1.0)}

    got = iteration_checks((("iteration 0", a), ("iteration 1", a), ("iteration 2", b), ("iteration 3", a)),
                           ("eager",), check)
    assert checked == [a, b]  # one check per distinct lowering (PRG-183's cost)
    (v,), seconds = got["eager"]
    assert v.verdict == "violated" and v.witness.message.startswith("in iteration 2 (PRG-183)") and seconds == 2.0


@dataclasses.dataclass(frozen=True)
class _Program:
    launch_failure: object = None
    tpu_failure: object = None


@dataclasses.dataclass(frozen=True)
class _Kernel:
    program: _Program
    iterations: tuple = ()
    call: object = None
    name: str = "k"
    loc: object = None


@pytest.mark.rule("PRG-183")
def test_a_call_marked_as_never_running_never_runs_in_any_iteration():
    from semcheck.checker.programs.interpreter import after_failures

    a, b = _Program(), _Program(tpu_failure="own")
    (k,) = after_failures([_Kernel(_Program(launch_failure="launch", tpu_failure="refused"),
                                   (("iteration 0", a), ("iteration 1", b)))])
    assert [p for _, p in k.iterations] == [_Program("launch", "refused"), _Program("launch", "own")]


@pytest.mark.rule("PRG-183")
def test_a_loop_whose_iteration_certainly_fails_beside_other_calls_is_unsupported(monkeypatch):
    from semcheck.checker.frontend.errors import Unsupported
    from semcheck.checker.programs import interpreter

    bad = _Program()
    monkeypatch.setattr(interpreter, "certain_failure", lambda p: "fails" if p is bad else None)
    monkeypatch.setattr(interpreter, "left_manager", lambda p: None)
    looped = _Kernel(_Program(), (("iteration 0", _Program()), ("iteration 1 of the loop", bad)))
    assert interpreter.after_failures([looped]) == [looped]  # alone: its iterations merge (PRG-183)
    with pytest.raises(Unsupported, match="fails in iteration 1 of the loop"):
        interpreter.after_failures([looped, _Kernel(_Program())])
