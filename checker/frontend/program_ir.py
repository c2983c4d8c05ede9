"""A traced target as a program of kernel calls: the data the walk makes (`program_walk`).

A `ProgramIR` is every `pallas_call` (and `core_map`) in the order the program runs them (spec
PRG-101), each run an `Invocation` (kernel, call index, the pallas_call's line); an
operand of a call that is an output of an earlier call is a `Link` (PRG-102), including through
the call's own `input_output_aliases`; what the walk cannot follow leaves the program `unknown`
with the reason and the line (PRG-103).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from semcheck.checker.frontend.trace import KernelCall
from semcheck.model.ops import NO_LOC, Loc

WINDOW = 3
"""PRG-7 / PRG-130: the consecutive iterations of a long loop the composed program checks."""

PER_DEVICE = "may differ between devices"
"""How the walk says a cond's branch is not known on each device (PRG-126, PRG-145)."""

UNKNOWN_TRIPS = "a while loop whose condition the walk cannot compute"
"""How the walk says a while loop's trip count is not known (PRG-171): the concrete arguments may tell it."""

MAX_UNROLL = 64
"""The most iterations of a `scan` around a kernel call the walk unrolls (PRG-103)."""

class Trips:
    """A `while_loop`'s trip count, unknown while the loop runs: the words of its iterations (`iteration_words`)
    read it once it is known (PRG-186, PRG-187)."""

    n: int | None = None
    words: str | None = None  # PRG-197: each device's count, where they differ

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trips) and self.n == other.n

    def __hash__(self) -> int:
        return hash(self.n)

    def __str__(self) -> str:
        return self.words if self.words is not None else str(self.n)


def per_device_trips(counts: dict[int, int]) -> str:
    """PRG-197: a while loop's trip counts where devices differ ("1 on device 0, 2 on device 1", devices grouped
    by count)."""
    by: dict[int, list[int]] = {}
    for d in sorted(counts):
        by.setdefault(counts[d], []).append(d)
    return ", ".join(f"{n} on device{'s' if len(ds) > 1 else ''} {', '.join(map(str, ds))}"
                     for n, ds in sorted(by.items()))


def iteration_words(stack: tuple[tuple[Any, int, Any], ...]) -> str:
    """PRG-183, PRG-187: which iteration of which loop(s) a call is, outermost first (each entry: the loop's line,
    the iteration, the trip count or the words for it)."""
    return ", ".join(f"iteration {i} (counted from 0, of {n}) of the loop at {loc}" for loc, i, n in stack)


CALL_PRIMITIVES = frozenset({"jit", "pjit", "closed_call", "core_call", "remat", "checkpoint",
                              "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "named_call"})


@dataclasses.dataclass(frozen=True)
class Produced:
    """Output `output` of invocation `call`."""

    call: int
    output: int


@dataclasses.dataclass(frozen=True)
class Outside:
    """A value no kernel call produced: a program input, a literal or an XLA op's result.

    `deps` are the calls whose outputs it was computed from (an XLA op runs after them); `ident`
    tells values apart (0: a literal).
    """

    what: str
    loc: Loc = NO_LOC
    deps: frozenset[int] = frozenset()
    ident: int = 0


Value = Produced | Outside


@dataclasses.dataclass(frozen=True)
class Invocation:
    """One run of a kernel in the program (PRG-101)."""

    call: KernelCall  # what the kernel is (shared by the invocations of one pallas_call)
    index: int  # the call index: position in the traced order of kernel runs
    inputs: tuple[Value, ...]  # per input operand (role "input"), in order
    after: frozenset[int] = frozenset()  # the calls whose outputs its operands are computed from
    # PRG-125: the collective id jax lowers the call with for a TPU (PRG-123's assignment; the call's own
    # under `no`), whether jax picked it, and jax's lowering error when it gives none
    collective_id: int | None = None
    id_picked: bool = False
    id_error: str | None = None
    devices: frozenset[int] | None = None  # PRG-145: the devices that run it (None: every device)
    # PRG-167: the launch equation, to find the concrete values `concrete_inputs` gives this call
    eqn: Any = dataclasses.field(default=None, compare=False, repr=False)
    # PRG-187: the iterations of the loops around the call the walk unrolled (`iteration_words`), outermost first
    loops: tuple[tuple[Any, int, Any], ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def loc(self) -> Loc:
        return self.call.loc

    def describe(self) -> str:
        """How reports name the call: kernel name, call index and the pallas_call's line (and the devices that
        run it, where a cond gives devices different calls, PRG-145)."""
        where = f"call {self.index}, {iteration_words(self.loops)}" if self.loops else f"call {self.index}"
        if self.devices is not None:
            on = ", ".join(str(d) for d in sorted(self.devices))
            return f"{self.name} ({where}, {self.loc}, on device{'s' if len(self.devices) > 1 else ''} {on})"
        return f"{self.name} ({where}, {self.loc})"


@dataclasses.dataclass(frozen=True)
class Link:
    """Output `output` of call `producer` is input `input` of the later call `consumer` (PRG-102)."""

    producer: int
    output: int
    consumer: int
    input: int
    kind: str  # "semaphore" | "buffer"


@dataclasses.dataclass(frozen=True)
class Use:
    """A use of a call's result outside kernel calls (PRG-121): an XLA operation, a scalar operand of a
    later call, or the program's return of it.

    `after` are the calls whose outputs the use needs (the operation runs after their exits);
    `entry` is the call whose entry reads it (a scalar operand), None otherwise; `kind` is "xla" or
    "result".
    """

    value: Produced
    what: str
    loc: Loc
    after: frozenset[int]
    kind: str = "xla"
    entry: int | None = None
    devices: frozenset[int] | None = None  # PRG-145: the devices that make the use (None: every device)


@dataclasses.dataclass(frozen=True)
class ProgramIR:
    """The kernel calls of a traced target, in order, and their links.

    `unknown` is (reason, line) when the walk could not follow the program (PRG-103); the
    invocations found before that point are kept for the report.
    `escapes` are the produced values used outside kernel calls, each with how (an XLA op and its
    line, or the program's result); `uses` are the same uses with where they happen (PRG-121).
    """

    invocations: tuple[Invocation, ...]
    links: tuple[Link, ...]
    unknown: tuple[str, Loc] | None = None
    escapes: tuple[tuple[Produced, str], ...] = ()
    uses: tuple[Use, ...] = ()
    # PRG-126: at each cond around a kernel call whose branch the walk could not tell, (the number of
    # branches, the cond's line, the branch this program takes)
    branches: tuple[tuple[int, Loc, int], ...] = ()
    # PRG-130: each loop longer than MAX_UNROLL checked over WINDOW iterations: (its line, its trip count,
    # the call index of its first iteration's first call, the calls per iteration)
    windows: tuple[tuple[Loc, int, int, int], ...] = ()
    # PRG-221: the top-level computation whose lowering the interpreter fails, as jax lowers it (every branch of
    # every cond and every loop body, taken or not): (its index, the failure of its first call with a semaphore
    # result); None when no call of the traced function has one
    unlowerable: tuple[int, Any] | None = None

    def describe_branches(self) -> str:
        """Which branch of each undecided cond this program takes ("" when none)."""
        return ", ".join(f"the cond at {loc} takes branch {b}" for _, loc, b in self.branches)

    @property
    def semaphore_links(self) -> tuple[Link, ...]:
        return tuple(link for link in self.links if link.kind == "semaphore")

    def links_into(self, consumer: int) -> dict[int, Link]:
        """Input position -> the link feeding it, for one call."""
        return {link.input: link for link in self.links if link.consumer == consumer}

    def orders(self, limit: int) -> list[tuple[int, ...]] | None:
        """PRG-101: every order of the calls their data dependences allow (XLA keeps only those), the
        traced order first; None when there are more than `limit`."""
        n = len(self.invocations)
        after = [inv.after for inv in self.invocations]
        found: list[tuple[int, ...]] = []

        def extend(order: list[int], placed: set[int]) -> bool:
            if len(order) == n:
                found.append(tuple(order))
                return len(found) <= limit
            for k in range(n):
                if k not in placed and after[k] <= placed:
                    order.append(k)
                    placed.add(k)
                    ok = extend(order, placed)
                    order.pop()
                    placed.discard(k)
                    if not ok:
                        return False
            return True

        return found if extend([], set()) else None

    @property
    def carries_semaphores(self) -> bool:
        """Whether some call takes or returns a semaphore (then calls cannot be checked alone)."""
        return any(o.kind == "semaphore" and o.role in ("input", "output")
                   for inv in self.invocations for o in inv.call.operands)


class Stop(Exception):
    def __init__(self, reason: str, loc: Loc) -> None:
        super().__init__(reason)
        self.reason, self.loc = reason, loc


MAX_BRANCH_PROGRAMS = 8
"""The most programs the undecided conds around kernel calls may give; more are unknown (PRG-126)."""


# --- jaxpr helpers ---------------------------------------------------------------------


def deps_of(values: list[Value]) -> frozenset[int]:
    """The calls `values` are computed from."""
    out: set[int] = set()
    for v in values:
        if isinstance(v, Produced):
            out.add(v.call)
        else:
            out |= v.deps
    return frozenset(out)


__all__ = ["Invocation", "Link", "Trips", "per_device_trips", "iteration_words", "MAX_BRANCH_PROGRAMS", "MAX_UNROLL", "Outside", "Produced", "ProgramIR", "Use",
           "WINDOW"]
