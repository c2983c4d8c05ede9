"""Where a kernel behaves differently in interpret mode and on a TPU: which properties, and what can explain it."""

from __future__ import annotations

from semcheck.checker.properties.differences import Exposure, differences, exposures
from semcheck.checker.properties.registry import IDS as PROPERTIES
from semcheck.checker.properties.verdict import Verdict, Witness
from semcheck.checker.run.request import Result
from semcheck.model import DmaStart, Loc, Scratch, SemRef, Signal, Topology, Wait, launch

LINE = Loc("k.py", 7, "pl.semaphore_signal(s, 1)")


def _result(mode: str, verdicts: dict[str, str], exposed=(), devices: int = 2) -> Result:
    vs = []
    for p in PROPERTIES:
        kind = verdicts.get(p, "proved")
        if kind == "violated":
            vs.append(Verdict(p, "violated", witness=Witness("bad")))
        elif kind == "unknown":
            vs.append(Verdict(p, "unknown", reason="z3 gave up"))
        else:
            vs.append(Verdict(p, "proved"))
    return Result("build", devices, mode, vs, program={"exposures": tuple(exposed)})


def test_a_property_proved_on_hardware_and_violated_in_the_interpreter_is_a_difference_d1_can_explain():
    exposed = (Exposure("D1", (LINE,)), Exposure("D3-D4"), Exposure("D5-D7"))
    rs = [_result("eager", {"deadlock-free": "violated"}, exposed),
          _result("on_wait", {"deadlock-free": "violated"}, exposed),
          _result("hardware", {}, exposed)]
    (d,) = differences(rs)
    assert (d.property, d.verdicts) == ("deadlock-free", {"eager": "violated", "on_wait": "violated",
                                                          "hardware": "proved"})
    assert [e.code for e in d.causes] == ["D1"]  # not DMAs: eager and on_wait agree; not ids: none violated
    assert d.describe() == "deadlock-free: violated under eager, on_wait; proved on hardware"


def test_eager_and_on_wait_disagreeing_is_explained_by_dmas():
    exposed = (Exposure("D3-D4"),)
    rs = [_result("eager", {}, exposed), _result("on_wait", {"deadlock-free": "violated"}, exposed),
          _result("hardware", {}, exposed)]
    (d,) = differences(rs)
    assert [e.code for e in d.causes] == ["D3-D4"]


def test_a_wrong_id_explains_the_other_properties_it_breaks():
    exposed = (Exposure("D5-D7"),)
    bad = {"id-agreement": "violated", "deadlock-free": "violated"}
    rs = [_result("eager", bad, exposed), _result("on_wait", bad, exposed), _result("hardware", {}, exposed)]
    ds = differences(rs)
    assert [(d.property, [e.code for e in d.causes]) for d in ds] == [("id-agreement", ["D5-D7"]),
                                                                       ("deadlock-free", ["D5-D7"])]


def test_unknown_verdicts_and_agreeing_modes_are_no_difference():
    rs = [_result("eager", {"deadlock-free": "unknown"}), _result("on_wait", {"deadlock-free": "violated"}),
          _result("hardware", {"deadlock-free": "violated"})]
    assert differences(rs) == []
    # and a difference without an exercised divergence has no cause
    rs = [_result("eager", {"exit-balance": "violated"}), _result("hardware", {})]
    (d,) = differences(rs)
    assert d.causes == ()


def test_each_device_count_is_compared_on_its_own():
    rs = [_result("eager", {"deadlock-free": "violated"}, devices=2), _result("hardware", {}, devices=4)]
    assert differences(rs) == []


def test_only_a_signal_without_core_index_from_a_core_other_than_core_0_exercises_d1():
    here, there = Loc("k.py", 5, "signal"), Loc("k.py", 6, "signal")
    bodies = [[Signal(SemRef("s"), 1, loc=here), Wait(SemRef("s"), 1)],
              [Signal(SemRef("s"), 1, loc=there), Signal(SemRef("s"), 1, core=1, loc=Loc("k.py", 9))]]
    codes = {e.code: e for e in exposures(launch(Topology(1, 2), bodies, scratch=[Scratch("s", 1)]))}
    assert codes["D1"].locs == (there,)
    one_core = launch(Topology(2), [[Signal(SemRef("s"), 1, device=1 - d, loc=here)] for d in range(2)],
                      scratch=[Scratch("s", 1)])
    assert "D1" not in {e.code for e in exposures(one_core)}
    assert "D5-D7" in {e.code for e in exposures(one_core)}  # it allocates semaphores


def test_dmas_exercise_d3_d4():
    line = Loc("k.py", 3, "copy.start()")
    p = launch(Topology(2), [[DmaStart(SemRef("s"), 8, device=1 - d, loc=line), Wait(SemRef("s"), 8, kind="dma")]
                             for d in range(2)], scratch=[Scratch("s", 1)])
    (dma,) = [e for e in exposures(p) if e.code == "D3-D4"]
    assert dma.locs == (line,)


def test_a_dma_on_a_regular_semaphore_exercises_d20_and_explains_an_interpreter_hardware_difference():
    line = Loc("k.py", 9, "copy.start()")
    bodies = [[DmaStart(SemRef("s"), 8, device=1 - d, dst_sem_type="regular", loc=line), Wait(SemRef("s"), 1)]
              for d in range(2)]
    (d20,) = [e for e in exposures(launch(Topology(2), bodies, scratch=[Scratch("s", 1)])) if e.code == "D20"]
    assert d20.locs == (line,)
    plain = [[DmaStart(SemRef("s"), 8, device=1 - d), Wait(SemRef("s"), 8, kind="dma")] for d in range(2)]
    assert "D20" not in {e.code for e in exposures(launch(Topology(2), plain, scratch=[Scratch("s", 1)]))}
    exposed = (Exposure("D3-D4"), d20)
    rs = [_result("eager", {"exit-balance": "violated"}, exposed),
          _result("on_wait", {"exit-balance": "violated"}, exposed),
          _result("hardware", {}, exposed)]
    (d,) = differences(rs)
    assert [e.code for e in d.causes] == ["D20"]


def test_a_launch_the_interpreter_refuses_exercises_d21():
    from semcheck.model.errors import SemaphoreOutput

    p = launch(Topology(2), [[], []], launch_failure=SemaphoreOutput("sem_out"))
    assert [e.code for e in exposures(p)] == ["D21"]
    assert "D21" not in {e.code for e in exposures(launch(Topology(2), [[], []]))}


def test_an_access_the_interpreter_cannot_index_exercises_d22_at_its_line():
    from semcheck.model.errors import InterpreterView
    from semcheck.model.ops import Access, Region

    loc = Loc("k.py", 7)
    access = Access("buf", Region(((0, 8),)), False, loc, InterpreterView("ReshapeTransform", "load", "k.py:7"))
    p = launch(Topology(1), [[Access("buf", Region(((0, 8),)), False, Loc("k.py", 5)), access]])
    assert [(e.code, e.locs) for e in exposures(p)] == [("D22", (loc,))]
