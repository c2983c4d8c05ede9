"""SEM-3 / HW-1 statically: the key every semaphore reference of a program denotes in every run, and the
two ways the lowering stops at an operation (a static failure, or a key that depends on the schedule).

Part of the lowering (`checker/static/lowering.py`, whose docstring says when a lookup is static)."""

from __future__ import annotations

from collections.abc import Callable

from semcheck.model.errors import UnknownSemaphore, Violation
from semcheck.model.ops import BARRIER, DmaMode, Program, SemRef
from semcheck.model.semaphore import lookup_in
from semcheck.model.step import named
from semcheck.checker.static.system import HappensBefore, Key


class Fail(Exception):
    """The operation fails in every run that reaches it (a static failure, ERR-7)."""

    def __init__(self, violation: Violation) -> None:
        self.violation = violation



class Unsupported(Exception):
    """What the operation does depends on the schedule, or is outside the lowering: it refuses."""



def resolver(program: Program, mode: DmaMode, hb: HappensBefore, sem_allocs: dict, sem_events: dict,
              gets: list[tuple[int, int]]) -> tuple[Callable[[int, int, SemRef], Key], dict]:
    """SEM-3 / HW-1 statically: `resolve(c, i, ref)`, the key a reference at core c op i denotes in every run
    (raises `Fail` for a static failure, `Unsupported` where it depends on the schedule), and the keys it
    found stable, by (core, label, index)."""
    hw = mode == "hardware"
    cid = program.collective_id
    cid_inserts = []  # allocation events whose range holds the collective id
    if cid is not None and not hw:
        for (a, i), ev in sem_events.items():
            if any(b <= cid < b + ev.op.count for b in ev.bases.values()):
                cid_inserts.append((a, i))

    def earliest(events: list[tuple[int, int]]) -> dict[int, int]:
        out: dict[int, int] = {}
        for a, j in events:
            out[a] = min(j, out.get(a, j))
        return out

    first_get, first_insert = earliest(gets), earliest(cid_inserts)

    def table_status(first: dict[int, int], c: int, i: int) -> str:
        # clocks grow along program order, so each core's earliest insertion decides
        if first.get(c, i) < i or any(hb.before(a, j, c, i) for a, j in first.items() if a != c):
            return "always"
        if all(hb.before(c, i, a, j) for a, j in first.items()):
            return "never"
        return "maybe"

    # A lookup's key is often the same for every later op of the core: the
    # happens-before facts it rests on grow along program order. Those are
    # remembered per (core, label, index); the lowering visits each core's ops
    # in order, so a remembered key is only reused at later positions.
    stable: dict[tuple[int, str, int], Key] = {}

    def resolve(c: int, i: int, ref: SemRef) -> Key:
        known = stable.get((c, ref.label, ref.index))
        if known is not None:
            return known
        key = _resolve(c, i, ref)
        # Lookups of the collective id depend on where the core is relative to
        # the table insertions; only "fixed, and nothing ever inserts it
        # internally" cannot change further along (get_barrier_semaphore
        # having happened before stays so).
        if hw or key[1] != cid or (key[0] == "fixed" and not first_insert):
            stable[(c, ref.label, ref.index)] = key
        return key

    def _resolve(c: int, i: int, ref: SemRef) -> Key:
        # SEM-3 / HW-1 statically: the model's own `named` (a SemAlloc has the
        # fields it reads) and `lookup_in`, fed with which tables hold the id at
        # op i in every run, as happens-before decides it.
        alloc = None
        if ref.label != BARRIER:
            alloc = sem_allocs.get((c, ref.label))
            if alloc is None or not hb.before(alloc.issuer, alloc.pos, c, i):
                raise Unsupported(
                    f"core {c} op {i} uses semaphore allocation {ref.label!r}"
                    + (" that it never allocates" if alloc is None else " not ordered after its allocation")
                )
            if not hw and 0 <= ref.index < alloc.count and (alloc.ids is None or isinstance(alloc.ids, Violation)):
                raise Fail(alloc.ids if isinstance(alloc.ids, Violation) else UnknownSemaphore(-1))
        sid = named(program, mode, alloc, c, ref)
        if isinstance(sid, Violation):
            raise Fail(sid)
        if type(sid) is not int:
            return sid  # hardware: the physical semaphore
        if sid != cid:  # only the collective id ever enters the fixed table
            issuer_base = sem_events[(alloc.issuer, alloc.pos)].bases[alloc.issuer]
            in_fixed, in_internal = False, sid == issuer_base + ref.index  # a wrapped id (IDS-1) is in no table
        else:
            fixed = table_status(first_get, c, i)
            internal = table_status(first_insert, c, i)
            if "maybe" in (fixed, internal):
                raise Unsupported(
                    f"core {c} op {i} looks up the collective id {sid}: whether the fixed-id table "
                    f"({fixed}) and the internal table ({internal}) hold it depends on the schedule"
                )
            in_fixed, in_internal = fixed == "always", internal == "always"
        key = lookup_in((sid,) if in_fixed else (), (sid,) if in_internal else (), sid)
        if isinstance(key, Violation):
            raise Fail(key)
        return key

    return resolve, stable
