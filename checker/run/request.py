"""A verification request and what comes back: the data the planner, the child process and the
reports share (`checker/run/planning.py` makes requests, `checker/run/child.py` answers them)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

from semcheck.checker.properties.registry import IDS
from semcheck.checker.properties.verdict import Verdict
from semcheck.model.ops import DmaMode, Loc

from semcheck._target import DEFAULT_DEVICES  # noqa: F401 - one definition, re-exported here

MAX_DEVICES = 16384
# RUN-13: what bounds the device count, said with every refusal of a larger one; below it the size of the
# program a run would build bounds it (checker/frontend/size_bound.py)
CAP_REASON = ("16384 is past the largest TPU pod, 8960 chips; below it what bounds a run is the size of the "
              "program it builds, refused before it is built; specs/deciding/runs.md RUN-13")


@dataclasses.dataclass(frozen=True)
class Request:
    path: str
    target: str | None
    entry: str | None
    devices: int
    cores: int | None
    modes: tuple[str, ...]
    timeout: float
    properties: tuple[str, ...] = IDS
    fold: bool = True  # decide repeating programs on their fold first (RUN-7)
    examples: int = 20  # inputs generated for a target with `inputs=` (checker/run/generated_inputs.py)
    # the parametric check (specs/deciding/parametric.md PAR-8) instead of one device count: `devices` is the largest
    # N it traces; a field of the request, so the result cache keys it (an answer without it is never one with it)
    every_n: bool = False


@dataclasses.dataclass
class Result:
    """Verdicts of one target x devices x mode."""

    target: str
    devices: int
    dma_mode: DmaMode
    verdicts: list[Verdict]
    program: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    examples: int | None = None  # a target with generated inputs: how many were verified in full
    cached: bool = False  # answered from the result cache (`semcheck._cache`), not verified in this run


NOT_CACHED = "not-cached"
"""The code of a note saying why an answer was not kept in the result cache (printed under -v only)."""


@dataclasses.dataclass(frozen=True)
class Note:
    """Why some verdicts are unknown without a property saying so: a timeout or an unsupported construct.

    The CLI prints each as one line on stderr; the verdicts carry the reason too.
    """

    code: str  # "timeout" | "unsupported" | NOT_CACHED
    message: str
    devices: int
    loc: Loc | None = None


@dataclasses.dataclass
class Findings:
    """The results and notes one device count (or a merged sweep) produced."""

    results: list[Result]
    notes: list[Note] = dataclasses.field(default_factory=list)
    # what importing the kernel file and running `build` read (`semcheck._dependencies`); None
    # when the child did not finish, so the result cache does not keep the answer
    dependencies: Any = None
    # (target, error) of each target whose build raised while the file's other targets were verified
    errors: list[tuple[str, InputError]] = dataclasses.field(default_factory=list)
    imported: bool = True  # False: the child was stopped before the kernel file's import finished
    claims: list = dataclasses.field(default_factory=list)  # parametric.TargetClaims of an every_n request
    # report.suppress.Suppression: the properties not checked, and why (set by `semcheck.check`, never cached)
    suppressed: list = dataclasses.field(default_factory=list)
    # set by `semcheck.check` only (REP-26, REP-29): the comments that suppressed nothing; for a directory, each
    # kernel file found under it (as discovered) with its own Findings, whose `error` says why a file could
    # not be verified at all (the directory's own `error` is then the first such, so nothing reads as complete)
    unused: list = dataclasses.field(default_factory=list)
    files: dict[str, Findings] = dataclasses.field(default_factory=dict)
    error: InputError | None = None


class InputError(Exception):
    """Bad input: the CLI prints one line and exits 2."""

    def __init__(self, code: str, message: str, loc: Loc | None = None, *, debug_text: str = "",
                 file: str | None = None, related: Loc | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.loc = code, message, loc
        self.related = related  # ERR-23: the call into the user's code that raised, when elsewhere
        self.debug_text = debug_text  # the child's traceback, shown with --debug
        self.file = file  # the kernel file, named when neither the message nor loc does

    def one_line(self) -> str:
        where = ""
        if self.loc is not None and self.loc.line:
            if f"{self.loc.file}:{self.loc.line}" not in self.message:
                where = f" ({self.loc.file}:{self.loc.line})"
        elif self.file and os.path.basename(self.file) not in self.message:
            where = f" ({self.file})"
        return relpaths(f"{self.code}: {self.message}{where}")


def relpaths(text: str) -> str:
    """Paths under the working directory as the user would type them."""
    cwd = os.getcwd()
    return text.replace(cwd + os.sep, "") if cwd != os.sep else text



def parse_devices(text: str) -> list[int]:
    """`2,4,8`, `2..64` (both ends and the powers of two between them) or one count."""
    text = text.strip()
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split("..", 1))
            if lo < 1 or hi < lo:
                raise InputError("usage", f"--devices {text}: a range lo..hi needs 1 <= lo <= hi")
            if hi > MAX_DEVICES:
                raise InputError("usage", f"--devices {text}: the range ends past {MAX_DEVICES}, the "
                                          f"largest device count semcheck verifies ({CAP_REASON})")
            counts = {lo, hi} | {1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi}
        else:
            items = text.split(",")
            if len(items) > 1 and not all(x.strip() for x in items):  # `2,,4`: a count left out (REP-3)
                raise InputError("usage", f"--devices {text!r}: an empty entry between commas")
            counts = {int(x) for x in items if x.strip()}
    except ValueError:
        raise InputError("usage", f"--devices {text!r}: expected a count, a list like 2,4,8 "
                                  "or a range like 2..64") from None
    if not counts:
        raise InputError("usage", "--devices needs at least one device count")
    for n in sorted(counts):
        if not 1 <= n <= MAX_DEVICES:
            raise InputError("usage", f"--devices {n}: a device count must be between 1 and {MAX_DEVICES}"
                                      + (f" ({CAP_REASON})" if n > MAX_DEVICES else ""))
    return sorted(counts)


def check_devices(devices: int | Sequence[int]) -> list[int]:
    counts = [devices] if isinstance(devices, int) else list(devices)
    if not counts:
        raise InputError("usage", "no device counts given")
    for n in counts:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_DEVICES:
            raise InputError("usage", f"device count {n!r}: must be an integer between 1 and {MAX_DEVICES}"
                                      + (f" ({CAP_REASON})" if isinstance(n, int) and n > MAX_DEVICES else ""))
    return sorted(set(counts))


def check_timeout(timeout: float) -> float:
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise InputError("usage", f"--timeout {timeout!r}: must be a positive number of seconds")
    return float(timeout)


def unknown_results(req: Request, names: Sequence[str], reason: str) -> list[Result]:
    return [
        Result(target=name, devices=req.devices, dma_mode=mode,
               verdicts=[Verdict(p, "unknown", reason=reason) for p in req.properties])
        for name in names
        for mode in req.modes
    ]
