"""The property registry: the one list of what semcheck decides (specs/semantics.md section 7).

Each `Property` names its spec rule (PROP-n), says in one line what it means,
points at its decision procedure and carries the fix a violation usually
needs. The CLI, the three report formats, `semcheck spec` and the report
schema's test all read `REGISTRY`; adding a property is one entry here plus
its check function.

This module imports nothing from the checks: `verdict.Verdict` validates its
property id against `IDS`, and the checks import `verdict`, so each check is
named by "module:function" and imported on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from semcheck.checker.properties.analysis import ModeAnalysis
    from semcheck.checker.properties.verdict import Verdict
    from semcheck.model.ops import Program

Check = Callable[..., "Verdict"]  # (program, mode, *, timeout_ms, facts) -> Verdict


@dataclasses.dataclass(frozen=True)
class Property:
    """One property: `id` as reports print it, `rule` its PROP-n in specs/semantics.md."""

    id: str
    rule: str
    summary: str  # one line, for `--help`-like listings and the SARIF rule description
    check_ref: str  # "module:function", (program, mode, *, timeout_ms, facts) -> Verdict
    hint: str  # the usual fix for a violation, when the witness brings none
    folds: bool = True  # whether a proof on a fold is a proof on the program (RUN-7)

    def check(self, program: Program, mode: str, *, timeout_ms: int = 30_000, facts: ModeAnalysis | None = None
              ) -> Verdict:
        """Decide this property; a violation's witness is replayed on the model first.

        A launch the interpreter refuses decides it without the check (LAUNCH-2); so do runs that
        all raise ERR-9 (`failing_runs`). `facts`: the program's analysis under `mode`
        (`checker.properties.analysis`), shared with the other checks of the program; one is made without it.
        """
        # lazy, as the checks: verdict imports this module
        from semcheck.checker.properties.analysis import analysis_of
        from semcheck.checker.properties.failing_runs import cite_limit, failing_run_verdict
        from semcheck.checker.properties.launch import launch_verdict

        facts = analysis_of(program, mode, facts)
        return cite_limit(launch_verdict(self.id, program, mode)
                          or failing_run_verdict(self.id, program, mode, timeout_ms=timeout_ms, facts=facts)
                          or _checked(self.check_ref)(program, mode, timeout_ms=timeout_ms, facts=facts), facts)


_LOADED: dict[str, Check] = {}


def _checked(ref: str) -> Check:
    if ref not in _LOADED:
        # Imported here, not at the top: the checks import verdict, which imports
        # this registry (and the CLI lists properties without loading Z3).
        from semcheck.checker.properties.replay import with_replay

        module, _, name = ref.partition(":")
        _LOADED[ref] = with_replay(getattr(importlib.import_module(module), name))
    return _LOADED[ref]


REGISTRY: tuple[Property, ...] = (
    Property(
        "id-disjoint", "PROP-1",
        "No semaphore id is both the barrier's fixed id (collective_id) and an internal id.",
        "semcheck.checker.z3.ids:id_disjoint",
        "choose a collective_id below 2000 (internal ids start at 2000)",
    ),
    Property(
        "id-int16", "PROP-2",
        "Every semaphore and buffer id the interpreter hands out fits int16.",
        "semcheck.checker.z3.ids:id_int16",
        "ids are never freed: allocate semaphores outside loops",
    ),
    Property(
        "id-agreement", "PROP-3",
        "A semaphore used remotely names the same allocation on the target core.",
        "semcheck.checker.properties.id_agreement:id_agreement",
        "allocate scoped semaphores in the same order on every device and core",
    ),
    Property(
        "deadlock-free", "PROP-4",
        "No reachable state where an unfinished core can never move.",
        "semcheck.checker.properties.deadlock:deadlock_free",
        "each blocked wait needs signals some schedule always delivers: check the wait's "
        "count and the device_id / core_index of the signals and DMAs meant for it",
    ),
    Property(
        "exit-balance", "PROP-5",
        "Every semaphore count is zero and no DMA is pending when the kernel exits.",
        "semcheck.checker.properties.exit_balance:exit_balance",
        "every signal and DMA needs a matching wait before the kernel exits",
    ),
    Property(
        "dma-bytes", "PROP-6",
        "Each DMA wait waits for exactly the bytes its semaphore's DMAs deliver.",
        "semcheck.checker.properties.dma_bytes:dma_bytes",
        "wait on each copy's own descriptor, for its own size",
    ),
    Property(
        "race-free", "PROP-7",
        "The semaphores order every pair of accesses to overlapping data of which one writes.",
        "semcheck.checker.properties.races:race_free",
        "wait for a copy (its descriptor's .wait()) before touching its destination, and for its send "
        "side before overwriting its source",
        # RUN-7 lifts the fold's runs with every class in step; a race may need a class out of step
        folds=False,
    ),
    Property(
        "invocation-confined", "PROP-8",
        "Every remote signal and copy lands while its target device is inside the call that owns the object.",
        "semcheck.checker.properties.confined:invocation_confined",
        "let the target signal that it has entered the call (a barrier handshake) before copying into it, and "
        "keep it in the call until every copy into it has landed",
        # a landing is an intermediate state of one device against another, as a race is
        folds=False,
    ),
)

IDS: tuple[str, ...] = tuple(p.id for p in REGISTRY)
BY_ID: Mapping[str, Property] = MappingProxyType({p.id: p for p in REGISTRY})
BY_RULE: Mapping[str, Property] = MappingProxyType({p.rule: p for p in REGISTRY})
assert len(BY_ID) == len(BY_RULE) == len(REGISTRY), "property ids and rules must be unique"
