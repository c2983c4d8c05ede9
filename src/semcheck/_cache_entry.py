"""One result-cache entry as JSON: written field by field, and checked field by field when read.

An entry is plain data: reading one runs no code (a pickle would run whatever the file says, and
anyone who can write to `.semcheck_cache/` -- a committed folder, a restored CI cache -- could
then run code in semcheck and choose its verdicts). Each class an answer holds has one writer and
one reader here; the reader checks every field's type and rebuilds the object through its own
constructor (a `Verdict` checks its property and that a violation has a witness). Anything that
does not read back exactly is `BadEntry`, which the cache treats as a miss.

Free-form data (a verdict's `stats`, a witness's `details`, a result's `program` and `seconds`) is
written with its Python types tagged (`{"t": [...]}` a tuple, `{"l": [...]}` a list, `{"d": [[k, v],
...]}` a dict, `{"loc": ...}` a kernel line, `{"exposure": ...}` a divergence a program exercises), so
that it reads back equal, tuples as tuples; a value of any other type cannot be written
(`Unwritable`), and that answer is not kept.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


class BadEntry(ValueError):
    """An entry that does not parse or does not validate: a miss."""


class Unwritable(TypeError):
    """An answer holding a value the format has no place for: not kept."""


# --- free-form values ----------------------------------------------------------------------------


_PLAIN = frozenset({type(None), bool, str, int})


def value_out(x: Any) -> Any:
    # exact types: a subclass (an enum, a named tuple) would read back as its base, which may print
    # otherwise; such an answer is not kept
    t = type(x)
    if t in _PLAIN:
        return x
    if t is float:
        # JSON has no infinities: a string, tagged
        return x if math.isfinite(x) else {"f": repr(x)}
    if t is tuple:
        return {"t": [value_out(v) for v in x]}
    if t is list:
        return {"l": [value_out(v) for v in x]}
    if t is dict:
        return {"d": [[value_out(k), value_out(v)] for k, v in x.items()]}
    from semcheck.checker.properties.differences import Exposure

    if type(x).__name__ in _loc_classes():
        return {"loc": loc_out(x)}
    if type(x) is Exposure:  # a result's program says which divergences it exercises
        return {"exposure": {"code": x.code, "locs": [loc_out(loc) for loc in x.locs]}}
    raise Unwritable(f"a {type(x).__name__} in an answer")


def value_in(x: Any) -> Any:
    t = type(x)
    if t in _PLAIN or t is float:
        return x
    if t is dict and len(x) == 1:
        ((tag, body),) = x.items()
        if tag == "f" and body in ("inf", "-inf", "nan"):
            return float(body)
        if tag in ("t", "l") and isinstance(body, list):
            items = [value_in(v) for v in body]
            return tuple(items) if tag == "t" else items
        if tag == "loc":
            return loc_in(body)
        if tag == "exposure":
            from semcheck.checker.properties.differences import Exposure

            locs = _list(_field(body, "locs", list), "locs")
            return Exposure(_field(body, "code", str), tuple(loc_in(loc) for loc in locs))
        if tag == "d" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
            out = {}
            for k, v in body:
                k = value_in(k)
                try:
                    out[k] = value_in(v)
                except TypeError:  # an unhashable key
                    raise BadEntry("a dictionary key that is not hashable") from None
            return out
    raise BadEntry(f"not a value of the format: {str(x)[:80]}")


# --- checked fields ------------------------------------------------------------------------------


def _field(d: Any, name: str, kinds: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(d, dict):
        raise BadEntry("an object was expected")
    if name not in d:
        if default is ...:
            raise BadEntry(f"field {name!r} missing")
        return default
    v = d[name]
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in _as_tuple(kinds)):
        raise BadEntry(f"field {name!r}: {type(v).__name__}")
    return v


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _strs(v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise BadEntry(f"{what}: a list of strings was expected")
    return tuple(v)


def _ints(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in v):
        raise BadEntry(f"{what}: a list of integers was expected")
    return tuple(v)


def _list(v: Any, what: str) -> list:
    if not isinstance(v, list):
        raise BadEntry(f"{what}: a list was expected")
    return v


# --- the classes of an answer ----------------------------------------------------------------------


def _loc_classes() -> dict[str, type]:
    """Every kind of kernel line a witness or a program can hold: `Loc` and the front end's kinds of
    it, which say more (what a grid copy or a call-boundary access is)."""
    from semcheck.checker.frontend.call_boundary import BoundaryLoc
    from semcheck.checker.frontend.grid_copies import GridCopyLoc
    from semcheck.model.ops import Loc

    return {c.__name__: c for c in (Loc, BoundaryLoc, GridCopyLoc)}


def loc_out(loc: Any) -> Any:
    if loc is None:
        return None
    if _loc_classes().get(type(loc).__name__) is not type(loc):
        raise Unwritable(f"a {type(loc).__name__} where a kernel line was expected")
    return {"class": type(loc).__name__,
            **{f.name: value_out(getattr(loc, f.name)) for f in dataclasses.fields(loc)}}


def loc_in(d: Any) -> Any:
    if d is None:
        return None
    cls = _loc_classes().get(_field(d, "class", str))
    if cls is None:
        raise BadEntry("a kind of kernel line semcheck does not know")
    names = {f.name for f in dataclasses.fields(cls)}
    if set(d) != names | {"class"}:
        raise BadEntry(f"the fields of a {cls.__name__}")
    _field(d, "file", str), _field(d, "line", int), _field(d, "text", str)
    return cls(**{n: value_in(d[n]) for n in names})


def _witness_out(w: Any) -> Any:
    if w is None:
        return None
    return {"message": w.message, "schedule": value_out(tuple(w.schedule)), "blocked": value_out(tuple(w.blocked)),
            "locs": [loc_out(x) for x in w.locs], "details": value_out(w.details), "hint": w.hint}


def _witness_in(d: Any) -> Any:
    from semcheck.checker.properties.verdict import Witness

    if d is None:
        return None
    schedule, blocked, details = (value_in(_field(d, k, dict)) for k in ("schedule", "blocked", "details"))
    if not isinstance(schedule, tuple) or not all(
            isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str) and isinstance(s[1], int) for s in schedule):
        raise BadEntry("a witness's schedule")
    if not isinstance(blocked, tuple) or not all(isinstance(b, tuple) and len(b) == 3 for b in blocked):
        raise BadEntry("a witness's blocked cores")
    if not isinstance(details, dict):
        raise BadEntry("a witness's details")
    return Witness(_field(d, "message", str), schedule, blocked,
                   tuple(loc_in(x) for x in _list(_field(d, "locs", list), "locs")), details, _field(d, "hint", str))


def _input_out(g: Any) -> Any:
    if g is None:
        return None
    return {"value": value_out(g.value), "text": g.text, "index": g.index, "examples": g.examples,
            "shrunk_from": g.shrunk_from, "shrink_steps": g.shrink_steps}


def _input_in(d: Any) -> Any:
    from semcheck.checker.properties.verdict import GeneratedInput

    if d is None:
        return None
    return GeneratedInput(value_in(_field(d, "value", (dict, str, int, float, bool, type(None)))),
                          _field(d, "text", str), _field(d, "index", int), _field(d, "examples", int),
                          _field(d, "shrunk_from", (str, type(None))), _field(d, "shrink_steps", int))


def verdict_out(v: Any) -> Any:
    return {"property": v.property, "verdict": v.verdict, "reason": v.reason, "witness": _witness_out(v.witness),
            "stats": value_out(v.stats), "input": _input_out(v.input)}


def verdict_in(d: Any) -> Any:
    from semcheck.checker.properties.verdict import KINDS, Verdict

    kind = _field(d, "verdict", str)
    if kind not in KINDS:
        raise BadEntry(f"verdict {kind!r}")
    stats = value_in(_field(d, "stats", dict))
    if not isinstance(stats, dict):
        raise BadEntry("a verdict's stats")
    try:  # Verdict checks the property and what each kind needs
        return Verdict(_field(d, "property", str), kind, _field(d, "reason", str),
                       _witness_in(_field(d, "witness", (dict, type(None)))), stats,
                       _input_in(_field(d, "input", (dict, type(None)))))
    except ValueError as e:
        raise BadEntry(str(e)) from None


def result_out(r: Any) -> Any:
    return {"target": r.target, "devices": r.devices, "dma_mode": r.dma_mode,
            "verdicts": [verdict_out(v) for v in r.verdicts], "program": value_out(r.program),
            "seconds": value_out(r.seconds), "examples": r.examples}


def result_in(d: Any) -> Any:
    from semcheck.checker.run.request import Result
    from semcheck.model.ops import DMA_MODES

    mode = _field(d, "dma_mode", str)
    if mode not in DMA_MODES:
        raise BadEntry(f"DMA mode {mode!r}")
    program, seconds = value_in(_field(d, "program", dict)), value_in(_field(d, "seconds", dict))
    if not isinstance(program, dict) or not isinstance(seconds, dict):
        raise BadEntry("a result's program or seconds")
    return Result(_field(d, "target", str), _field(d, "devices", int), mode,
                  [verdict_in(v) for v in _list(_field(d, "verdicts", list), "verdicts")], program, seconds,
                  _field(d, "examples", (int, type(None))))


def note_out(n: Any) -> Any:
    return {"code": n.code, "message": n.message, "devices": n.devices, "loc": loc_out(n.loc)}


def note_in(d: Any) -> Any:
    from semcheck.checker.run.request import Note

    return Note(_field(d, "code", str), _field(d, "message", str), _field(d, "devices", int),
                loc_in(_field(d, "loc", (dict, type(None)))))


def _claim_out(c: Any) -> Any:
    return {"prop": c.prop, "mode": c.mode, "every_n": c.every_n, "proved_at": list(c.proved_at),
            "traced": list(c.traced), "reason": c.reason, "violated_at": list(c.violated_at),
            "timed_out": c.timed_out, "rule": c.rule}


def _claim_in(d: Any) -> Any:
    from semcheck.checker.parametric.every_n import Claim

    return Claim(_field(d, "prop", str), _field(d, "mode", str), _field(d, "every_n", bool),
                 _ints(_field(d, "proved_at", list), "proved_at"), _ints(_field(d, "traced", list), "traced"),
                 _field(d, "reason", str), _ints(_field(d, "violated_at", list), "violated_at"),
                 _field(d, "timed_out", bool), _field(d, "rule", str))


def claims_out(t: Any) -> Any:
    return {"target": t.target, "claims": [_claim_out(c) for c in t.claims], "reason": t.reason,
            "timed_out": t.timed_out, "modes": list(t.modes)}


def claims_in(d: Any) -> Any:
    from semcheck.checker.parametric.every_n import TargetClaims

    claims = _list(_field(d, "claims", list), "claims")
    return TargetClaims(_field(d, "target", str), tuple(_claim_in(c) for c in claims),
                        _field(d, "reason", str), _field(d, "timed_out", bool),
                        _strs(_field(d, "modes", list), "modes"))


def findings_out(f: Any) -> Any:
    """A kept answer: results, notes and claims (an answer with errors is never kept)."""
    if f.errors:
        raise Unwritable("an answer with input errors")
    return {"results": [result_out(r) for r in f.results], "notes": [note_out(n) for n in f.notes],
            "claims": [claims_out(c) for c in f.claims], "imported": f.imported}


def findings_in(d: Any, dependencies: Any) -> Any:
    from semcheck.checker.run.request import Findings

    return Findings([result_in(r) for r in _list(_field(d, "results", list), "results")],
                    [note_in(n) for n in _list(_field(d, "notes", list), "notes")], dependencies, [],
                    _field(d, "imported", bool),
                    [claims_in(c) for c in _list(_field(d, "claims", list), "claims")])


def dependencies_out(d: Any) -> Any:
    return {"files": [list(p) for p in d.files], "listings": [list(p) for p in d.listings],
            "stats": [list(p) for p in d.stats], "links": [list(p) for p in d.links],
            "env": [list(p) for p in d.env], "whole_env": d.whole_env, "uncacheable": d.uncacheable}


def dependencies_in(d: Any) -> Any:
    from semcheck._dependencies import Dependencies

    return Dependencies(*(_pairs(_field(d, k, list), k) for k in ("files", "listings", "stats", "links")),
                        _pairs(_field(d, "env", list), "env", (str, type(None))),
                        _field(d, "whole_env", (str, type(None))), _field(d, "uncacheable", (str, type(None))))


def _pairs(v: Any, what: str, second: tuple[type, ...] = (str,)) -> tuple[tuple[str, Any], ...]:
    """A dependency table: [[path or name, what it read], ...]."""
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], second) for p in v):
        raise BadEntry(f"{what}: a list of pairs was expected")
    return tuple((a, b) for a, b in v)


def field(d: Any, name: str, kinds: type | tuple[type, ...]) -> Any:
    """A checked field of an entry's top level (`semcheck._cache`)."""
    return _field(d, name, kinds)
