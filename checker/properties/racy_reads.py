"""ACC-71: followed reads that race a write, decided by the value every run of an interpreter mode gives them.

ACC-9 needs every write of a followed element ordered with its reads (a): otherwise the value a read sees may
depend on the schedule. But in the interpreter's modes where a write lands is the program's (RUN-61,
`model.landing`): for each racy read the write that lands last before it is the same in every run. Where that is
the write the lowering took the value from, or one that left the same value (ACC-62), the lowering's value is
every run's; where it is another, the lowering given that value (`pins`, `frontend.racy_pins`) is: the checker
lowers the kernel again with it (`by_cases`) and decides the mode on that program, whose own racy reads must then
read, in it, what the mode gives them. Proof (ACC-9's, read by read): in any run of the kernel take the first
read of another value than the lowering's. Up to it the run is a run of the lowering, so a racy read's last write
is the one RUN-61 names, which wrote the lowering's value (every read it rests on agreed): the read agrees, a
contradiction; another read is ordered with every write of its elements, and ACC-9 (a) and (b) apply.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from semcheck.model.followed import Elements, Flat, ValueFacts, followed_labels, unordered_pairs_on_followed
from semcheck.model.followed_runs import untied_write
from semcheck.model.landing import MODES, candidate_writers, landed_writers, write_index
from semcheck.model.ops import Access, DmaStart, Program
from semcheck.model.racy_candidates import given_values
from semcheck.model.scope import stack_slot
from semcheck.model.state import State
from semcheck.model.step import step

# How many times one mode's lowering is made again with more racy reads' values before it stays unknown.
MAX_ROUNDS = 16
# ACC-77: how many values one read RUN-61 does not settle may take before it stays unknown
MAX_ALTERNATIVES = 64


def racy_values(program: Program, mode: str, facts: ValueFacts, pairs: list,
                branches: list | None = None) -> tuple[str | None, dict, frozenset]:
    """(why not, pins, reads): `why not` None when every read of a buffer some pair of `pairs` (the unordered
    conflicting pairs that touch a followed buffer) races reads, in every run of `mode`, one write RUN-61 names;
    `pins` then holds, per read whose value that write makes another than the lowering's, its values
    (`(lane, body position) -> (loc, values, initial)`; in a lowering that gave some reads values, those reads' too),
    empty when the lowering's values are every run's; `reads`: the indices of those racy reads (ACC-9 (b) does not
    ask of them). ACC-77: a read RUN-61 does not settle is decided where a case of the lowering by cases gave it one
    of its `alternatives` (or it has one); else, with `branches` (a list), it joins them as `(key, loc, alternatives)`
    for the caller to lower once per alternative."""
    if mode not in MODES:  # ACC-80: a lowering of one case of the values a TPU may read
        why, reads = given_values(program, facts, pairs)
        return (None if why is None else f"under {mode} a copy lands at any moment, in parts (DMA-5, DR-9): {why}",
                {}, reads)
    untied = untied_write(program, facts)
    if untied is not None:
        return untied, {}, frozenset()
    # the loads the pairs name, by position and line: DR-5 lists one pair of each orbit of the devices' rotations,
    # which keep an operation's position, so a racy load of any device is at one of these
    at, written = set(), set()
    for pair in pairs:
        if all(e.write for e in pair):  # two writes: every read of the buffer is then asked which lands last
            written.update(stack_slot(e.buffer[2]) for e in pair)
            continue
        reads = [e for e in pair if not e.write and e.half is None]
        if len(reads) != 1:
            a, b = pair
            why = f"{a.describe()} at {a.loc} and {b.describe()} at {b.loc} are not a load and a write"
            return why, {}, frozenset()
        at.add((reads[0].pc, reads[0].loc.file, reads[0].loc.line))
    index = write_index(facts)
    pins: dict = {}
    changed: list = []
    racy = []
    for j, r in enumerate(facts.reads):
        labels = {stack_slot(e[1]) for e in r.elements}
        if (r.read[1], r.loc.file, r.loc.line) not in at and not labels & written and r.pinned is None:
            continue  # (a read given a value is always asked: the value is the case's, not the lowering's)
        op = program.cores[r.read[0]][r.read[1]]
        if type(op) is not Access:
            if labels & written:
                return f"the copy at {r.loc} reads a buffer whose writes race", {}, frozenset()
            continue  # (a copy's read half, at the position of another core's racy load, is no load)
        r = _with_elements(r)
        if r is None:
            return f"the read at {facts.reads[j].loc} reads elements of several buffers", {}, frozenset()
        got = landed_writers(program, facts, r, mode, index)
        offset = len(facts.offsets) > r.read[0] and facts.offsets[r.read[0]]
        if isinstance(got, str):
            why = _undecided(program, facts, r, mode, index, pins, branches, offset, f"the read at {r.loc}: {got}")
            if why is not None:
                return why, {}, frozenset()
            racy.append(j)
            continue
        racy.append(j)
        why = _agree_or_pin(facts, r, got, pins, changed, offset)
        if why is not None:
            return why, {}, frozenset()
    return None, pins if changed else {}, frozenset(racy)


def _with_elements(r):
    """`r` with its elements as one `Elements` (ACC-53), or None where they are of several buffers."""
    if isinstance(r.elements, Elements):
        return r
    keys = {(e[0], e[1]) for e in r.elements}
    if len(keys) != 1:
        return None
    (device, label), = keys
    return dataclasses.replace(r, elements=Elements(device, label, [e[2] for e in r.elements]))


def _agree_or_pin(facts: ValueFacts, r, landed: np.ndarray, pins: dict, changed: list, offset: int) -> str | None:
    """Whether read `r` reads, per element, what `landed` (its writers in every run) left. Into `pins`: the pin that
    gives it that, where it was given one (kept) or needs one (then `changed` is appended to); else why not."""
    took = np.asarray(r.writers.array if isinstance(r.writers, Flat) else list(r.writers), dtype=np.int64)
    flat = r.elements.flat.array
    if r.pinned is None and bool(((landed == took) | np.array(
            [_same(facts, int(landed[i]), int(took[i]), r.elements, flat[i]) for i in range(flat.size)],
            dtype=bool)).all()):
        return None  # the lowering's values are every run's
    values = np.zeros(flat.size, dtype=object)
    initial = landed < 0
    for i in range(flat.size):
        k = int(landed[i])
        if k >= 0:
            v = _left(facts, k, r.elements, flat[i])
            if v is None:
                return f"the write at {facts.writes[k].loc} leaves a value semcheck does not know where {r.loc} reads"
            values[i] = v
    key = (r.read[0], r.read[1] - offset)
    if r.pinned is not None:  # a case's lowering: the values it gave must be what the mode gives
        given, was_initial = r.pinned[:2]
        pins[key] = (r.loc, values, initial)
        if not (np.array_equal(was_initial, initial)
                and all(bool(given[i] == values[i]) for i in range(flat.size) if not initial[i])):
            changed.append(key)  # (an earlier round's value, at a read the lowering now reaches otherwise)
        return None
    pins[key] = (r.loc, values, initial)
    changed.append(key)
    return None


def _undecided(program: Program, facts: ValueFacts, r, mode: str, index: dict, pins: dict, branches: list | None,
               offset: int, why: str) -> str | None:
    """ACC-77: read `r`, which RUN-61 does not settle (`why`): kept where it was given one of its `alternatives` by a
    case (`chosen`) or by ACC-71 where it has only that one (into `pins`); else into `branches` where given; else
    why not."""
    if r.pinned is None and branches is None:
        return why
    alts = alternatives(program, facts, r, mode, index)
    if isinstance(alts, str):
        return f"{why}; {alts}"
    key = (r.read[0], r.read[1] - offset)
    if r.pinned is not None:
        given, initial = r.pinned[:2]
        chosen = len(r.pinned) > 2 and bool(r.pinned[2])
        if (chosen or len(alts) == 1) and any(_same_case(given, initial, v, i) for v, i in alts):
            pins[key] = (r.loc, given, initial, True) if chosen else (r.loc, given, initial)
            return None
    if branches is None:
        return why
    branches.append((key, r.loc, alts))
    return None


def alternatives(program: Program, facts: ValueFacts, r, mode: str, index: dict | None = None) -> list | str:
    """ACC-77: the values read `r` may take in a run of `mode` (`landing.candidate_writers`, per element), as
    `(values, initial)` (the contents before any write where `initial`), one per combination of the elements'
    distinct values, at most `MAX_ALTERNATIVES`; else why not (a str)."""
    cands = candidate_writers(program, facts, r, mode, index)
    if isinstance(cands, str):
        return cands
    flat = r.elements.flat.array
    per = []
    for i, ks in enumerate(cands):
        opts: dict = {}
        for k in ks:
            if k < 0:
                opts[("initial",)] = (None, True)
                continue
            v = _left(facts, k, r.elements, flat[i])
            if v is None:
                return f"the write at {facts.writes[k].loc} leaves a value semcheck does not know where {r.loc} reads"
            opts.setdefault(("value", repr(v)), (v, False))
        per.append(list(opts.values()))
    count = math.prod(len(o) for o in per)
    if count > MAX_ALTERNATIVES:
        return f"it may take {count:,} values, past the {MAX_ALTERNATIVES} semcheck decides one by one (ACC-77)"
    out = []
    for combo in itertools.product(*per):
        values = np.zeros(len(combo), dtype=object)
        initial = np.array([init for _, init in combo], dtype=bool)
        for i, (v, init) in enumerate(combo):
            if not init:
                values[i] = v
        out.append((values, initial))
    return out


def reads_as_given(program: Program, facts: ValueFacts, schedule) -> bool:
    """ACC-77: whether, replayed under eager, run `schedule` of a case's lowering lands before each read given one of
    its alternatives (`pinned` marked as a case's) a write that leaves, per element, the value given (or none where
    the contents before any write were), every such read reached: then the run is the kernel's (ACC-71's proof, read
    by read)."""
    chosen = {r.read: _with_elements(r) for r in facts.reads
              if r.pinned is not None and len(r.pinned) > 2 and r.pinned[2]}
    if not chosen or any(r is None for r in chosen.values()):
        return False
    writer_at = {w.event: k for k, w in enumerate(facts.writes)}
    state, last, started = State.initial(program), {}, {}
    reached = set()
    for actor in schedule:
        actor = tuple(actor)
        at = (actor[1], state.pcs[actor[1]]) if actor[0] == "core" else None
        r = chosen.get(at)
        if r is not None:
            reached.add(at)
            given, initial = r.pinned[:2]
            for i, element in enumerate(r.elements):
                k = last.get(element, -1)
                if bool(initial[i]) != (k < 0) or (k >= 0 and not _same_value(facts, k, r, i, given[i])):
                    return False
        n = len(state.dmas)
        try:
            nxt = step(program, "eager", state, actor)
        except Exception:  # (not a run of this program: nothing is shown)
            return False
        k = writer_at.get(at)
        if k is not None and type(program.cores[at[0]][at[1]]) is DmaStart:
            started.update((ident, k) for ident in range(n, len(nxt.dmas)))
        elif k is not None and nxt.pcs[at[0]] != at[1]:
            last.update((e, k) for e in facts.writes[k].elements)
        for ident, d in enumerate(nxt.dmas):
            if d.phase == 2 and (ident >= n or state.dmas[ident].phase != 2) and ident in started:
                last.update((e, started[ident]) for e in facts.writes[started[ident]].elements)
        state = nxt
    return reached == set(chosen)


def _same_value(facts: ValueFacts, k: int, r, i: int, given) -> bool:
    v = _left(facts, k, r.elements, r.elements.flat.array[i])
    return v is not None and bool(v == given)


def _same_case(given, initial, values, init) -> bool:
    return bool(np.array_equal(np.asarray(initial, dtype=bool), init)) and all(
        bool(given[i] == values[i]) for i in range(len(init)) if not init[i])


def _left(facts: ValueFacts, k: int, elements: Elements, i: int):
    """The value write `k` left at element `i` of `elements`' buffer, when the lowering knows it."""
    w = facts.writes[k]
    if w.values is None or not isinstance(w.elements, Elements) or \
            (w.elements.device, w.elements.label) != (elements.device, elements.label):
        return None
    v, known = w.values.at(w.elements, np.asarray([i], dtype=np.int64))
    return v[0] if known[0] else None


def _same(facts: ValueFacts, a: int, b: int, elements: Elements, i: int) -> bool:
    """ACC-62: two writes that left the same known value at element `i`."""
    if a < 0 or b < 0:
        return False
    va, vb = _left(facts, a, elements, i), _left(facts, b, elements, i)
    return va is not None and vb is not None and bool(va == vb)


def pairs_on_followed(candidates, facts: ValueFacts) -> list:
    """The pairs of `candidates` (unordered conflicting accesses) that touch a followed buffer."""
    return list(unordered_pairs_on_followed(candidates, followed_labels(facts)))


__all__ = ["MAX_ALTERNATIVES", "MAX_ROUNDS", "alternatives", "pairs_on_followed", "racy_values", "reads_as_given"]
