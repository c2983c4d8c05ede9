"""The second checking process: same verdicts as checking in-process, and only for large programs."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.checker.run.mode_worker import MIN_OPS, ModeWorker, split_modes
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.registry import IDS as PROPERTIES
from semcheck import check_program
from semcheck.checker.properties.checking import check_program as engine_check
from ring_programs import ring_allreduce
from strategies import programs


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "subprocess"])
def test_worker_verdicts_equal_in_process_verdicts_clean_and_buggy(fork: bool) -> None:
    if fork and not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    for program in (ring_allreduce(4), ring_allreduce(4, bug="deadlock")):
        worker = ModeWorker(program, ("hardware", "eager"), PROPERTIES, check=engine_check, timeout_ms=60_000, deadline=None, fork=fork)
        got = worker.result()
        for mode in ("hardware", "eager"):
            want = check_program(program, mode, PROPERTIES, timeout_ms=60_000)
            assert [(v.property, v.verdict, v.witness) for v in got[mode]] == \
                   [(v.property, v.verdict, v.witness) for v in want]
    assert any(v.verdict == "violated" for v in got["eager"])  # the buggy one really was checked


def test_hardware_goes_to_the_worker_only_for_large_programs_with_other_modes() -> None:
    modes = ("eager", "on_wait", "hardware")
    assert split_modes(MIN_OPS - 1, modes) == (modes, ())
    here, there = split_modes(MIN_OPS, modes)
    assert (here, there) in {(("eager", "on_wait"), ("hardware",)), (modes, ())}  # () on a one-core machine
    assert split_modes(10 * MIN_OPS, ("hardware",)) == (("hardware",), ())
    assert split_modes(10 * MIN_OPS, ("eager", "on_wait")) == (("eager", "on_wait"), ())


def _large_program():
    program = ring_allreduce(44)
    assert program.num_ops >= MIN_OPS
    return program


# race-free is decided on the whole program (its fold proofs do not carry over): at 44 devices that
# takes minutes, so the worker plumbing is tested on the other properties
PLUMBING = tuple(p for p in PROPERTIES if BY_ID[p].folds)


def _request(modes: tuple[str, ...], fold: bool = False, properties: tuple[str, ...] = PLUMBING):
    from semcheck.checker.run.request import Request

    return Request(path="kernel.py", target=None, entry=None, devices=44, cores=None, modes=modes, timeout=600,
                   fold=fold, properties=properties)


def test_a_worker_that_fails_has_its_modes_checked_here(monkeypatch, capsys) -> None:
    import time

    from semcheck.checker.properties.checking import check_modes

    def failing(self):
        self.kill()
        raise RuntimeError("the mode worker exited with code -9")

    monkeypatch.setattr(ModeWorker, "result", failing)
    done = check_modes(_large_program(), _request(("eager", "hardware")), time.monotonic() + 600)
    assert set(done) == {"eager", "hardware"}
    assert [v.verdict for v in done["hardware"][0]] == ["proved"] * len(PLUMBING)
    assert "checking hardware in this process" in capsys.readouterr().err


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "subprocess"])
def test_a_killed_worker_has_no_answer(fork: bool) -> None:
    if fork and not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    # every property at 44 devices takes far longer than the kill that follows the start
    worker = ModeWorker(_large_program(), ("hardware",), PROPERTIES, check=engine_check, timeout_ms=600_000, deadline=None, fork=fork)
    worker.kill()
    with pytest.raises(RuntimeError, match="exited with code -9"):
        worker.result()


def test_a_worker_that_cannot_start_leaves_every_mode_here(monkeypatch, capsys) -> None:
    import time

    from semcheck.checker.properties.checking import check_modes

    def cannot_start(self, *args, **kwargs):
        raise OSError("no processes left")

    monkeypatch.setattr(ModeWorker, "__init__", cannot_start)
    done = check_modes(_large_program(), _request(("eager", "hardware")), time.monotonic() + 600)
    assert [v.verdict for v in done["hardware"][0]] == ["proved"] * len(PLUMBING)
    assert "checking all modes in this process" in capsys.readouterr().err


def test_a_large_program_proved_on_its_fold_starts_no_worker(monkeypatch) -> None:
    import time

    from semcheck.checker.properties.checking import check_modes

    def no_worker(self, *args, **kwargs):
        raise AssertionError("a worker was started")

    # a 44-device ring folds onto 4 devices (RUN-7): every property whose fold proofs carry over is done there
    monkeypatch.setattr(ModeWorker, "__init__", no_worker)
    done = check_modes(_large_program(), _request(("eager", "on_wait", "hardware"), fold=True),
                        time.monotonic() + 600)
    for mode in ("eager", "on_wait", "hardware"):
        assert [v.verdict for v in done[mode][0]] == ["proved"] * len(PLUMBING)
        assert all(v.stats["fold"]["devices"] == 4 for v in done[mode][0])


def test_a_property_whose_fold_proofs_do_not_carry_is_decided_on_the_program() -> None:
    import time

    from semcheck.checker.properties.checking import check_modes

    done = check_modes(ring_allreduce(8), _request(("hardware",), fold=True, properties=PROPERTIES),
                        time.monotonic() + 600)
    verdicts = {v.property: v for v in done["hardware"][0]}
    assert [v.property for v in done["hardware"][0]] == list(PROPERTIES)
    assert all(v.verdict == "proved" for v in verdicts.values())
    assert "fold" not in verdicts["race-free"].stats  # RUN-7 does not carry race-freedom proofs
    assert verdicts["deadlock-free"].stats["fold"]["devices"] == 4


def test_forking_the_worker_warns_nothing_with_jax_loaded() -> None:
    """The verify child has jax (and its threads) loaded; the fork's warnings would reach the user's terminal."""
    import warnings

    import jax

    jax.devices()  # jax warns at a fork once its backend (and its threads) are up
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = ModeWorker(ring_allreduce(2), ("hardware",), PLUMBING, check=engine_check, timeout_ms=60_000, deadline=None, fork=True)
        got = worker.result()
    assert [str(w.message) for w in caught] == []
    assert [v.verdict for v in got["hardware"]] == ["proved"] * len(PLUMBING)


@pytest.mark.rule("RUN-15")
def test_a_symmetric_has_its_hardware_mode_checked_apart_with_the_verdicts_of_one_process(monkeypatch) -> None:
    import time

    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.checking import check_modes
    from semcheck.checker.properties.checking import check_program as check_one
    from semcheck.checker.frontend.symmetric_lowering import SYMMETRIC_FROM, lower_call
    from semcheck.checker.run.request import Request
    from test_symmetric_lowering import _calls

    n = SYMMETRIC_FROM + 3
    (call, values), = _calls("examples/ring_allreduce.py", n)
    sym = lower_call(call, cores=None, name="ring", stats=None, inputs=values)
    started = []
    real = ModeWorker.__init__

    def recording(self, analysis, modes, properties, **kwargs):
        started.append((modes, kwargs.get("fold")))
        real(self, analysis, modes, properties, **kwargs)

    monkeypatch.setattr(ModeWorker, "__init__", recording)
    # invocation-confined under hardware below RUN-21's bound runs PRG-113's held runs: minutes at this size
    props = tuple(p for p in PROPERTIES if p != "invocation-confined")
    modes = ("eager", "on_wait", "hardware")
    req = Request(path="kernel.py", target=None, entry=None, devices=n, cores=None, modes=modes, timeout=600,
                  fold=True, properties=props)
    done = check_modes(sym, req, time.monotonic() + 600)
    assert started == ([(("hardware",), True)] if (os.cpu_count() or 1) >= 2 else [])
    one = Analysis(sym, modes=modes)
    for mode in modes:
        want = check_one(sym, mode, props, analysis=one)
        assert [(v.property, v.verdict, v.reason) for v in done[mode][0]] == \
               [(v.property, v.verdict, v.reason) for v in want]


@pytest.mark.rule("RUN-52")
@pytest.mark.parametrize("bug", [None, "deadlock"])
def test_the_accesses_are_listed_once_for_both_processes(monkeypatch, tmp_path, bug) -> None:
    """The race pass here and the forked worker's read one listing of the accesses, made before the fork;
    the verdicts are those of one process."""
    import time

    from semcheck.checker.properties import race_order
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.properties.checking import check_modes
    from semcheck.checker.run import mode_worker

    if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        pytest.skip("no forked worker here")
    calls = tmp_path / "listings"
    real = race_order.accesses

    def counted(*args, **kwargs):
        with open(calls, "a") as f:  # from either process: the worker's writes land here too
            f.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(race_order, "accesses", counted)
    monkeypatch.setattr(mode_worker, "MIN_OPS", 0)  # a small program goes to a worker as a large one does
    program = ring_allreduce(4, bug=bug)
    modes = ("eager", "on_wait", "hardware")
    req = _request(modes, properties=PROPERTIES)
    done = check_modes(program, req, time.monotonic() + 600)
    assert len(calls.read_text().split()) == 1
    one = Analysis(program, modes=modes)
    for mode in modes:
        want = engine_check(program, mode, PROPERTIES, analysis=one, fold=False)
        assert [(v.property, v.verdict, v.reason, v.witness) for v in done[mode][0]] == \
               [(v.property, v.verdict, v.reason, v.witness) for v in want]


@pytest.mark.rule("RUN-63")
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "subprocess"])
def test_the_worker_names_its_verdicts_once_as_this_process_would(monkeypatch, fork: bool) -> None:
    """The worker's hardware verdicts come back in the kernel's words (REP-34), named there once and not again
    here; the verdicts are those of naming them here (texts, witnesses, details). Naming is marked (each text
    it makes ends with one mark) so that a text named twice, or never, shows; a forked worker inherits the mark,
    a spawned one names as semcheck does."""
    import time

    from semcheck.checker.properties import checking
    from semcheck.checker.properties import timeline

    if fork and not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("no worker on a one-core machine")
    program = ring_allreduce(44, bug="deadlock")
    assert program.num_ops >= MIN_OPS
    real_init = ModeWorker.__init__
    handed = []

    def started(finish_here: bool):
        def init(self, *args, **kwargs):
            handed.append(kwargs.get("finish"))
            real_init(self, *args, **{**kwargs, "fork": fork, **({} if finish_here else {"finish": None})})
        return init

    real_humanize = timeline.humanize
    if fork:
        monkeypatch.setattr(timeline, "humanize", lambda text, *a, **k: real_humanize(text, *a, **k) + " †")
    req = _request(("eager", "hardware"))
    monkeypatch.setattr(ModeWorker, "__init__", started(True))
    got = checking.check_modes(program, req, time.monotonic() + 600)
    assert handed == [timeline.naming]
    monkeypatch.setattr(ModeWorker, "__init__", started(False))  # every verdict named here, as before RUN-63
    want = checking.check_modes(program, req, time.monotonic() + 600)
    for mode in ("eager", "hardware"):
        assert [(v.property, v.verdict, v.reason, v.witness) for v in got[mode][0]] == \
               [(v.property, v.verdict, v.reason, v.witness) for v in want[mode][0]]
    dead = {v.property: v for v in got["hardware"][0]}["deadlock-free"]
    assert dead.verdict == "violated"
    if fork:
        assert dead.witness.message.endswith("†") and not dead.witness.message.endswith("† †")


def _exposures_counted(monkeypatch, calls):
    """`differences.exposures` writing the id of the process that calls it to `calls`, as a forked worker does too."""
    from semcheck.checker.properties import differences

    real = differences.exposures

    def counted(*args, **kwargs):
        with open(calls, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(differences, "exposures", counted)


def _forked_worker_here() -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("no worker on a one-core machine")


@pytest.mark.rule("RUN-65")
@pytest.mark.parametrize("fold", [False, True], ids=["program", "fold"])
def test_the_worker_finds_the_exposures_this_process_would(monkeypatch, tmp_path, fold: bool) -> None:
    """With a forked worker, the program's exposures (the report's divergence notes) are found there, once its
    checks are done, and not in this process; they are what finding them here gives."""
    import time

    from semcheck.checker.properties import checking
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.run import mode_worker

    _forked_worker_here()
    calls = tmp_path / "calls"
    calls.write_text("")
    _exposures_counted(monkeypatch, calls)
    monkeypatch.setattr(mode_worker, "MIN_OPS", 0)  # a small program goes to a worker as a large one does
    program = ring_allreduce(4, bug="deadlock")
    analysis = Analysis(program)
    checking.check_modes(analysis, _request(("eager", "on_wait", "hardware"), fold=fold, properties=PROPERTIES),
                         time.monotonic() + 600)
    got = checking.exposures_of(analysis, fold)
    found_in = calls.read_text().split()
    assert len(found_in) == 1 and found_in[0] != str(os.getpid())  # once, in the worker
    want = checking.exposures_of(Analysis(program), fold)
    assert got == want and {e.code for e in got} >= {"D3-D4"}
    assert checking.exposures_of(analysis, not fold) == checking.exposures_of(Analysis(program), not fold)


@pytest.mark.rule("RUN-65")
def test_exposures_the_worker_could_not_find_are_found_here(monkeypatch, tmp_path) -> None:
    """A worker whose exposures raise sends its verdicts all the same, and this process finds the exposures."""
    import time

    from semcheck.checker.properties import checking, differences
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.run import mode_worker

    _forked_worker_here()
    here = os.getpid()
    real = differences.exposures

    def only_here(*args, **kwargs):
        if os.getpid() != here:
            raise RuntimeError("exposures raised in the worker")
        return real(*args, **kwargs)

    monkeypatch.setattr(differences, "exposures", only_here)
    monkeypatch.setattr(mode_worker, "MIN_OPS", 0)
    program = ring_allreduce(4, bug="deadlock")
    analysis = Analysis(program)
    req = _request(("eager", "hardware"), properties=PROPERTIES)
    done = checking.check_modes(analysis, req, time.monotonic() + 600)
    assert analysis.exposed == {}
    assert checking.exposures_of(analysis, False) == real(program)
    want = engine_check(program, "hardware", PROPERTIES, analysis=Analysis(program, modes=("hardware",)), fold=False)
    assert [(v.property, v.verdict) for v in done["hardware"][0]] == [(v.property, v.verdict) for v in want]


@pytest.mark.rule("RUN-65")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(programs(max_devices=3, max_ops=4), st.booleans())
def test_the_exposures_a_worker_finds_are_those_found_here(monkeypatch, program, fold: bool) -> None:
    """Over drawn programs, with and without the fold: what `exposures_of` answers after a check with a forked
    worker is what it answers of the program in a fresh analysis."""
    import time

    from semcheck.checker.properties import checking
    from semcheck.checker.properties.analysis import Analysis
    from semcheck.checker.run import mode_worker

    _forked_worker_here()
    monkeypatch.setattr(mode_worker, "MIN_OPS", 0)  # every drawn program goes to a worker
    analysis = Analysis(program)
    checking.check_modes(analysis, _request(("eager", "on_wait", "hardware"), fold=fold,
                                            properties=("deadlock-free", "exit-balance")), time.monotonic() + 600)
    assert checking.exposures_of(analysis, fold) == checking.exposures_of(Analysis(program), fold)
