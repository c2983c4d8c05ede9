"""The property registry: the one list of what semcheck decides (specs/deciding/properties.md).

Each `Property` names its spec rule (PROP-n), says in one line what it means,
points at its decision procedure and carries the fix a violation usually
needs. The CLI, the three report formats, `semcheck spec` and the report
schema's test all read `REGISTRY`; adding a property is one entry here plus
its check function.

This module imports nothing: `verdict.Verdict` validates its property id
against `IDS`, and the checks import `verdict`, so each check is named by
"module:function" and `decide` imports it on first use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

ALL_MODES = frozenset({"eager", "on_wait", "hardware"})
INTERPRETER = frozenset({"eager", "on_wait"})


@dataclasses.dataclass(frozen=True)
class Property:
    """One property: `id` as reports print it, `rule` its PROP-n in specs/deciding/properties.md."""

    id: str
    rule: str
    summary: str  # one line, for `--help`-like listings and the SARIF rule description
    check_ref: str  # "module:function", (program, mode, *, timeout_ms, facts) -> Verdict
    hint: str  # the usual fix for a violation, when the witness brings none
    # the reductions (checker/properties/reductions.py) it accepts, in the order they are tried, each
    # with the DMA modes it is tried in; the whole program decides what none of them does
    reductions: tuple[tuple[str, frozenset[str]], ...] = (("fold", ALL_MODES),)
    # BUF-14: whether its check says itself what a run that may raise at a run_scoped buffer does to it
    # (else a proof from such a run of an interpreter mode is unknown)
    reads_scope_failure: bool = False
    # HW-1: whether it holds of every program under `hardware` (there are no ids there), so that a proof there
    # reads no run and no object of the composed program, and stands where a landing may fall outside its call
    # and over every order of the calls (PRG-215)
    holds_on_hardware: bool = False

    @property
    def folds(self) -> bool:
        """Whether a proof on a fold is a proof on the program (RUN-7)."""
        return any(name == "fold" for name, _ in self.reductions)


REGISTRY: tuple[Property, ...] = (
    Property(
        "id-disjoint", "PROP-1",
        "No semaphore id is both the barrier's fixed id (collective_id) and an internal id.",
        "semcheck.checker.z3.ids:id_disjoint",
        "choose a collective_id below 2000 (internal ids start at 2000)",
        holds_on_hardware=True,
    ),
    Property(
        "id-int16", "PROP-2",
        "Every semaphore and buffer id the interpreter hands out fits int16.",
        "semcheck.checker.z3.ids:id_int16",
        "ids are never freed: allocate semaphores outside loops",
        holds_on_hardware=True,
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
        # RUN-7 lifts the fold's runs with every class in step; a race may need a class out of step, and
        # the run of one class (DR-41) with one pair per orbit (DR-5) is argued for races (RUN-22)
        reductions=(("one-period", ALL_MODES),),
    ),
    Property(
        "invocation-confined", "PROP-8",
        "Every remote signal and copy lands while its target device is inside the call that owns the object.",
        "semcheck.checker.properties.confined:invocation_confined",
        "let the target signal that it has entered the call (a barrier handshake) before copying into it, and "
        "keep it in the call until every copy into it has landed",
        # a landing is an intermediate state of one device against another, as a race is: no fold; one
        # period's order under hardware (PRG-164, PRG-165), the interpreter's reading of no operation
        # (PRG-110) on one period
        reductions=(("one-period-order", frozenset({"hardware"})), ("one-period", INTERPRETER)),
        reads_scope_failure=True,
    ),
)

IDS: tuple[str, ...] = tuple(p.id for p in REGISTRY)
BY_ID: Mapping[str, Property] = MappingProxyType({p.id: p for p in REGISTRY})
BY_RULE: Mapping[str, Property] = MappingProxyType({p.rule: p for p in REGISTRY})
assert len(BY_ID) == len(BY_RULE) == len(REGISTRY), "property ids and rules must be unique"
