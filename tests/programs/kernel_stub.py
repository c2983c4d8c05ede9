"""What `interpreter.after_failures` reads of a lowered kernel, for model-level tests of the calls after a failure."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class KernelStub:
    program: object
    call: object
    name: str
    loc: str = "here"
    modes_apart: tuple = ()
