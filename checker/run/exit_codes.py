"""Exit codes of `semcheck verify` (and `semcheck every-n`), and the error that means bad input.

0 every property proved (or vacuous: true because no run reaches what it is about, which is no failure,
REP-20); 1 a property violated; 2 usage or input error; 3 nothing violated but something not proved (unknown,
timeout); 4 nothing violated nor unknown, but jax's interpreter cannot run some kernel, so an interpret mode
decided nothing of it (REP-21: a team that ships to TPUs gates on `--dma-mode hardware`, or accepts 4);
130 interrupted. Here, not in the CLI module, so the engine
and the public API (`semcheck.check`, `semcheck.testing`) use them without importing the CLI.
"""

from __future__ import annotations

EXIT_PROVED, EXIT_VIOLATED, EXIT_INPUT, EXIT_UNKNOWN, EXIT_UNRUNNABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class UsageError(Exception):
    """Bad flags or settings: one line on stderr, exit code 2."""


def exit_code(results, errors: int = 0, claims=()) -> int:
    """1 if anything is violated; else 2 if a kernel file could not be verified; else 3 if
    anything is unknown (or nothing was verified); else 4 if an interpret mode cannot run a kernel; else 0
    (vacuous verdicts count as no failure). With `--every-n` (`claims`,
    parametric.TargetClaims), a traced N that violates a property counts as violated, and a
    property not proved for every N as unknown (PAR-8)."""
    from semcheck.checker.report import render as report

    s = report.summary(results)
    if s["violated"] or any(c.violated_at for t in claims for c in t.claims):
        return EXIT_VIOLATED
    if errors:
        return EXIT_INPUT
    if s["unknown"] or not results or any(t.reason or not all(c.every_n for c in t.claims) for t in claims):
        return EXIT_UNKNOWN
    if s["unrunnable"]:
        return EXIT_UNRUNNABLE
    return EXIT_PROVED
