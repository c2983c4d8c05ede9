"""Deciding one property of one program under one DMA mode (the registry's check, with what comes first).

A launch the interpreter refuses decides it without the check (LAUNCH-2); so do runs that all raise
ERR-9 (`failing_runs`, which decides the rest on S''s program through this function again); a
violation's witness is replayed on the model first (`replay`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from semcheck.checker.properties.analysis import analysis_of
from semcheck.checker.properties.failing_runs import cite_limit, failing_run_verdict
from semcheck.checker.properties.launch import launch_verdict, no_id_verdict
from semcheck.checker.properties.registry import BY_ID
from semcheck.checker.properties.replay import with_replay

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import ModeAnalysis
    from semcheck.checker.properties.verdict import Verdict
    from semcheck.model.ops import Program

_LOADED: dict[str, Callable[..., "Verdict"]] = {}


def _checked(ref: str) -> Callable[..., "Verdict"]:
    # named "module:function" in the registry and imported on first use: the CLI lists the properties
    # without loading Z3
    if ref not in _LOADED:
        module, _, name = ref.partition(":")
        _LOADED[ref] = with_replay(getattr(importlib.import_module(module), name))
    return _LOADED[ref]


def decide(prop: str, program: Program, mode: str, *, timeout_ms: int = 30_000,
           facts: ModeAnalysis | None = None) -> Verdict:
    """Property `prop` of `program` under `mode`. `facts`: the program's analysis under `mode`, shared
    with the other checks of the program; one is made without it."""
    facts = analysis_of(program, mode, facts)
    v = cite_limit(launch_verdict(prop, program, mode)
                   or failing_run_verdict(prop, program, mode, timeout_ms=timeout_ms, facts=facts, recheck=decide)
                   or _checked(BY_ID[prop].check_ref)(program, mode, timeout_ms=timeout_ms, facts=facts), facts)
    return no_id_verdict(prop, program, mode, v)  # REP-21: a collective id only a TPU has (D30)
