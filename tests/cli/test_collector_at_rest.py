"""REP-39: the command receives and reports its checking processes' results with the cyclic collector at rest
(millions of small acyclic objects at pod scale), and leaves it as it found it."""

from __future__ import annotations

import gc

import pytest

from semcheck.checker.run import cli


def _seen(monkeypatch) -> list[bool]:
    seen: list[bool] = []

    def verify(args) -> int:
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(cli, "cmd_verify", verify)
    return seen


@pytest.mark.rule("REP-39")
def test_the_command_runs_with_the_cyclic_collector_at_rest_and_restores_it(monkeypatch):
    seen = _seen(monkeypatch)
    assert gc.isenabled()
    assert cli.main(["verify", "k.py", "--no-config"]) == 0
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.rule("REP-39")
def test_a_caller_s_resting_collector_stays_at_rest(monkeypatch):
    seen = _seen(monkeypatch)
    gc.disable()
    try:
        assert cli.main(["verify", "k.py", "--no-config"]) == 0
        assert seen == [False] and not gc.isenabled()
    finally:
        gc.enable()
