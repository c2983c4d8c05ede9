"""The SARIF report's rules (REP-12): one per property, then `unknown` and `input-error`, each with the
descriptions and help code scanning shows beside an alert, and where to read more."""

from __future__ import annotations

import functools
from typing import Any

from semcheck.checker.properties.registry import REGISTRY

# What a violation means, for a reader who sees the alert and not the spec (the alert's description).
FULL = {
    "id-disjoint": "In jax's Pallas TPU interpret mode the barrier semaphore (get_barrier_semaphore) takes the "
                   "kernel's collective_id as a fixed id, while scratch and run_scoped semaphores are handed internal "
                   "ids counted up from 2000. A collective_id that is also an internal id makes the interpreter raise "
                   "'Semaphore N occurs as both fixed-id and internal.' A TPU has no such ids (semaphores are "
                   "allocation sites), so only interpret-mode runs fail.",
    "id-int16": "The interpreter hands out semaphore and buffer ids in increasing order and never frees them; an "
                "id past the int16 range raises OverflowError or wraps silently. Allocating inside a loop is the "
                "usual cause.",
    "id-agreement": "A remote signal or copy names its semaphore by the id the sender holds. In interpret mode the "
                    "target core must hold the same allocation (site and index) under that id, or the signal lands "
                    "on another semaphore.",
    "deadlock-free": "In some schedule of the kernel's devices and cores, a core reaches a wait (or barrier) that "
                     "never returns: the signals or copies it needs never run, or go elsewhere.",
    "exit-balance": "At the kernel's exit every semaphore count must be zero and no copy in flight: each signal and "
                    "each copy's semaphore increments must be waited for before the kernel returns.",
    "dma-bytes": "A DMA wait waits for a number of bytes on its semaphore; the copies signalling that semaphore "
                 "must deliver exactly that many, copy by copy. A wait for more never returns, a wait for less "
                 "returns before the whole copy has landed and leaves bytes on the semaphore at exit.",
    "race-free": "Two accesses to overlapping data, one of them a write (kernel loads and stores, each copy's read "
                 "and write), are not ordered by the semaphores in every schedule: the kernel can read a buffer a "
                 "copy is still writing, or overwrite one a copy is still reading.",
    "invocation-confined": "A remote signal or copy into a kernel-local object of a device must arrive while that "
                           "device is inside its own invocation of the same call, and a copy into a run_scoped buffer "
                           "must complete while its scope is live.",
}
UNKNOWN = ("semcheck could neither prove nor refute the properties named in the message: a solver timeout, a "
           "construct the front end cannot lower faithfully, a run that can fail before the property can be "
           "decided, and so on. The message gives the reason and the kernel line; nothing is claimed about these "
           "properties.")
UNKNOWN_FIX = ("follow the message: raise --timeout, fix the violation that makes runs fail first, or verify with "
               "--dma-mode hardware")
INPUT_ERROR = ("semcheck could not verify the kernel file or target at all: it does not parse, raised while "
               "imported, built or traced, defines no target, or has no TPU pallas_call. The message names the "
               "error code and the line.")
INPUT_FIX = "run `semcheck verify FILE` to see the one-line error, or add --debug for the traceback"
UNRUNNABLE = ("The interpret modes (eager, on_wait) decide nothing of this kernel: jax's interpreter raises before "
              "the kernel can run (a semaphore output, a primitive without an interpret-mode rule, a collective id "
              "only the TPU lowering picks). The message names the error and the line; --dma-mode hardware still "
              "decides every property.")
UNRUNNABLE_FIX = "gate CI on --dma-mode hardware for this kernel, or change what the interpreter cannot run"
VACUOUS = ("No run reaches the point the property is about (no kernel exit, no access): it is not violated, and "
           "not proved either. Usually another finding (a deadlock, a failing run) explains why.")
VACUOUS_FIX = "fix the finding that stops every run first; the property is then decided"
UNUSED = "The comment names properties for a line, function or target where nothing of them was found."
UNUSED_FIX = "remove the comment, or move it to the line the finding is reported at"

HOME_LABELS = ("homepage", "home", "repository", "source")  # the Project-URL labels that name the project's home


@functools.cache
def information_uri() -> str | None:
    """REP-28: the project's home page, `[project.urls] Homepage` as the installed package's metadata has it (its one
    home: no copy of the URL here), or None when the metadata names none (the report then omits it)."""
    from importlib import metadata

    # every copy of the metadata on the path, first the one imports see: a stale build's (an old
    # *.egg-info beside the sources) may predate [project.urls], so the first that names a URL wins
    for dist in metadata.distributions(name="semcheck"):
        for entry in dist.metadata.get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() in HOME_LABELS and url.strip().startswith("https://"):
                return url.strip().rstrip("/")
    return None


def help_uri(doc: str) -> str | None:
    """Where the rule's spec page is read: the repository's file when the home page is a GitHub repository."""
    home = information_uri()
    return f"{home}/blob/main/specs/{doc}" if home and home.startswith("https://github.com/") else home


def _rule(rid: str, name: str, short: str, full: str, fix: str, spec: str, doc: str, level: str) -> dict[str, Any]:
    uri = help_uri(doc)
    page = f"[specs/{doc}]({uri})" if uri else f"specs/{doc}"
    rule = {
        "id": rid,
        "name": name,
        "shortDescription": {"text": short},
        "fullDescription": {"text": f"{short} {full}"},
        "help": {"text": f"{short} {full} Typical fix: {fix}. Spec: {spec} in specs/{doc} (`semcheck spec {spec}`).",
                 "markdown": f"**{short}**\n\n{full}\n\n**Typical fix:** {fix}.\n\nSpec: {spec} in "
                             f"{page} (`semcheck spec {spec}`)."},
        "defaultConfiguration": {"level": level},
        "properties": {"specRule": spec},
    }
    if uri:
        rule["helpUri"] = uri
    return rule


def rules() -> list[dict[str, Any]]:
    """Every rule, in `RULE_IDS` order."""
    out = [_rule(p.id, "".join(w.capitalize() for w in p.id.split("-")), p.summary, FULL[p.id], p.hint, p.rule,
                 "deciding/properties.md", "error") for p in REGISTRY]
    out.append(_rule("unknown", "NotProved", "semcheck could neither prove nor refute these properties.", UNKNOWN,
                     UNKNOWN_FIX, "REP-12", "deciding/report.md", "warning"))
    out.append(_rule("input-error", "InputError", "semcheck could not verify the kernel file at all.", INPUT_ERROR,
                     INPUT_FIX, "REP-12", "deciding/report.md", "error"))
    out.append(_rule("unrunnable", "InterpreterCannotRun", "jax's interpreter cannot run this kernel.", UNRUNNABLE,
                     UNRUNNABLE_FIX, "REP-21", "deciding/report.md", "warning"))
    out.append(_rule("vacuous", "Vacuous", "The property holds only because no run reaches what it is about.",
                     VACUOUS, VACUOUS_FIX, "REP-20", "deciding/report.md", "note"))
    out.append(_rule("unused-suppression", "UnusedSuppression", "A `# semcheck: ignore` comment suppressed nothing.",
                     UNUSED, UNUSED_FIX, "REP-26", "deciding/report.md", "warning"))
    return out
