"""Where a finding is shown: its primary location, the line a user changes, and its related
locations, each with a message (spec report.md REP-10). Every format places findings with `places`.

The witness builders record the lines they name as role-tagged sites (`checker/properties/sites.py`);
`PRIMARY` says, per property, which role is the line to change, in order of preference:

* race-free: the wait on the wrong semaphore; else a wait on the copy's semaphore that passes too
  early; else, where no wait orders the pair, the access before which the wait belongs; else the
  copy's start (an access after the call: nothing in the kernel is before it);
* id-disjoint: the `collective_id=` argument; else get_barrier_semaphore;
* deadlock-free: the wait that never returns (or, when runs fail, the operation that raises);
* exit-balance: the copy or signal whose count nobody waits for;
* dma-bytes: the wait whose size does not match; else a plain signal or wait on the copies' semaphore;
  else the copy (no wait at all).

The other sites are related locations. A witness without sites (a property that records none, a
failing run) is placed at its first kernel line, its other lines related, as before.
"""

from __future__ import annotations

import dataclasses
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.ops import Loc

PRIMARY: dict[str, tuple[str, ...]] = {
    "race-free": ("wrong-wait", "late-wait", "wait-here", "copy"),
    "id-disjoint": ("collective-id", "barrier", "allocation"),
    "deadlock-free": ("blocked-wait", "fails"),
    "exit-balance": ("unwaited",),
    "dma-bytes": ("wait", "mixed-use", "copy"),
}


@dataclasses.dataclass(frozen=True)
class Place:
    loc: Loc
    message: str  # what happens on this line, in one sentence
    role: str = ""  # the site's role (`checker/properties/sites.py`), "" for a witness line without one


@dataclasses.dataclass(frozen=True)
class Places:
    primary: Place | None  # None: the kernel file as a whole
    related: tuple[Place, ...] = ()

    @property
    def locs(self) -> tuple[Loc, ...]:
        """Every line, the primary first: what the text, markdown and HTML reports list."""
        return tuple(p.loc for p in (self.primary, *self.related) if p is not None)


def places(v: Verdict, override: Place | None = None) -> Places:
    """The primary and related locations of violated verdict `v`. `override`: a line that explains the
    finding better than its witness (a divergence between interpret mode and a TPU tied to a line,
    `findings.py`) is the primary, the witness's own choice then related."""
    w = v.witness
    if w is None:
        return Places(override)
    found = [_place(s) for s in w.details.get("sites", ()) if isinstance(s, dict) and s.get("line")]
    order = PRIMARY.get(v.property, ())
    ranked = [p for role in order for p in found if p.role == role]
    lines = [Place(x, _line_message(x)) for x in w.locs if x is not None and x.line > 0]
    if lines and not found:  # no sites: the first line, said with the witness's own sentence
        lines[0] = Place(lines[0].loc, _sentence(w.message))
    chosen = ranked[0] if ranked else found[0] if found else lines[0] if lines else None
    primary = override or chosen
    if primary is None:
        return Places(None)
    # then the other sites, and any witness line no site names (a builder's extra context), as before
    rest = _distinct(p for p in ([chosen] if chosen is not None else []) + found + lines
                     if (p.loc.file, p.loc.line) != (primary.loc.file, primary.loc.line))
    return Places(primary, tuple(rest))


def _place(s: dict) -> Place:
    return Place(Loc(str(s["file"]), int(s["line"]), str(s.get("text", ""))), str(s.get("note", "")), str(s["role"]))


def _sentence(text: str, limit: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[:limit - 1].rstrip() + "…"


def _line_message(loc: Loc) -> str:
    text = loc.text.strip()
    return f"involved: `{text}`" if text else "involved"


def _distinct(ps) -> list[Place]:
    out, seen = [], set()
    for p in ps:
        key = (p.loc.file, p.loc.line)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out
