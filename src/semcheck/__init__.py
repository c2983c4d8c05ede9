"""semcheck: prove Pallas TPU kernels free of semaphore-id collisions and deadlocks.

Public API (typed; the package ships `py.typed`): `semcheck.target` marks a verification target
in a kernel file; `semcheck.check` verifies kernel files as `semcheck verify` does and returns
`Findings`, which `semcheck.render` writes in any `--format`; `semcheck.check_program` checks a
program of the model's IR (`semcheck._api`); `semcheck.testing.assert_verified` is the assertion
for tests. Bad input is an `InputError`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from typing import TYPE_CHECKING, Any

from semcheck._target import target

if TYPE_CHECKING:  # what type checkers read; at run time `__getattr__` imports these on first use
    from semcheck._api import (PathOrTarget as PathOrTarget, check as check, check_program as check_program,
                               render as render)
    from semcheck.checker.properties.verdict import (GeneratedInput as GeneratedInput, Verdict as Verdict,
                                                     VerdictKind as VerdictKind, Witness as Witness)
    from semcheck.checker.run.config import DmaModeOption as DmaModeOption, Format as Format
    from semcheck.checker.run.request import (Findings as Findings, InputError as InputError, Note as Note,
                                              Result as Result)
    from semcheck.model.ops import DmaMode as DmaMode, Loc as Loc

# `import semcheck` in a kernel file (for `@semcheck.target`) stays cheap: the checker and the model load
# only when a name below is first used
_LAZY = {
    "semcheck._api": ("PathOrTarget", "check", "check_program", "render"),
    "semcheck.checker.properties.verdict": ("GeneratedInput", "Verdict", "VerdictKind", "Witness"),
    "semcheck.checker.run.config": ("DmaModeOption", "Format"),
    "semcheck.checker.run.request": ("Findings", "InputError", "Note", "Result"),
    "semcheck.model.ops": ("DmaMode", "Loc"),
}


def __getattr__(name: str) -> Any:
    import importlib

    for module, names in _LAZY.items():
        if name in names:
            value = getattr(importlib.import_module(module), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'semcheck' has no attribute {name!r}")


try:
    __version__ = version("semcheck")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["target", "check", "check_program", "render", "__version__", "InputError", "Findings", "Result", "Note",
           "Verdict", "VerdictKind", "Witness", "GeneratedInput", "Loc", "DmaMode", "DmaModeOption", "Format",
           "PathOrTarget"]
