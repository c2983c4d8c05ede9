"""The kernel lines of a witness, each with its role and what it is (spec report.md REP-10).

A witness builder records every line it names as a *site* in `details["sites"]`: the role it plays in
the bug (`wrong-wait`, `copy`, `blocked-wait`, `collective-id`, ...; `ROLES`) and one sentence saying
what happens there. The reports choose a finding's primary location from these roles, one table for
every format (`checker/report/places.py`); the other sites are its related locations, with their
sentences. Sites are JSON data (the result cache keeps them as the rest of the details).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from semcheck.model.ops import Loc

ROLES = (
    "wrong-wait",      # race-free: a wait before the access that does not wait for the copy (another semaphore)
    "late-wait",       # race-free: a wait on the copy's semaphore that can pass before the copy is complete
    "wait-here",       # race-free: the access before which the missing wait belongs
    "copy",            # a copy's start (race-free, exit-balance, dma-bytes)
    "access",          # race-free: the other access of the pair
    "collective-id",   # id-disjoint: the `collective_id=` argument
    "barrier",         # id-disjoint: get_barrier_semaphore (the fixed id)
    "allocation",      # id-disjoint: where the internal id is handed out
    "blocked-wait",    # deadlock-free: a wait (or barrier) that never returns
    "never-runs",      # deadlock-free: an operation the blocked wait needs, which never runs
    "astray",          # deadlock-free: an operation on that semaphore that goes where nothing waits for it
    "unwaited",        # exit-balance: the copy or signal whose count nobody waits for
    "wait",            # dma-bytes: the wait whose size does not match the copies
    "mixed-use",       # dma-bytes: a plain signal or semaphore wait on a semaphore that copies count bytes on
    "fails",           # a failing run: the operation where interpret mode raises
)


def site(role: str, loc: Loc | None, note: str) -> dict[str, Any] | None:
    """One site of a witness, or None for an operation without a kernel line."""
    if role not in ROLES:
        raise ValueError(f"unknown site role {role!r}")
    if loc is None or not loc.line:
        return None
    return {"role": role, "file": loc.file, "line": int(loc.line), "text": loc.text, "note": note}


def sites(*found: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The sites given, without Nones and without a second site of the same role on the same line."""
    out, seen = [], set()
    for s in found:
        if s is not None and (s["role"], s["file"], s["line"]) not in seen:
            seen.add((s["role"], s["file"], s["line"]))
            out.append(s)
    return out


def with_sites(v: Any, more: Iterable[dict[str, Any] | None], first: bool = True) -> Any:
    """Verdict `v` with `more` sites added to its witness (before the builder's own when `first`)."""
    w = v.witness
    if w is None:
        return v
    mine = w.details.get("sites", [])
    both = sites(*more, *mine) if first else sites(*mine, *more)
    return dataclasses.replace(v, witness=dataclasses.replace(w, details={**w.details, "sites": both}))


def collective_id_site(v: Any, loc: Loc | None) -> Any:
    """An id-disjoint violation with the `collective_id=` argument's line (the front end's
    `KernelCall.collective_id_loc`), where the id that collides is chosen."""
    if v.property != "id-disjoint" or v.verdict != "violated" or loc is None:
        return v
    cid = v.witness.details.get("collective_id")
    return with_sites(v, [site("collective-id", loc, f"collective_id {cid} is chosen here; internal semaphore "
                                                     "ids start at 2000, so it collides with one")])
