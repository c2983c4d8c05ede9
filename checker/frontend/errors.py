"""Typed front-end errors.

Every failure of the front end is a `FrontendError` subclass with a stable
`code` (for the CLI and machine-readable reports) and a message whose first
words do not change between releases. The CLI maps them to exit codes; tests
match on the class and `code`, not on the full text.
"""

from __future__ import annotations

from semcheck.model.ops import Loc


class FrontendError(Exception):
    """Base class of every error the front end raises on purpose."""

    code = "frontend-error"
    related: Loc | None = None  # a second line the error is about (`KernelRaised`: the call, ERR-23)

    def __init__(self, message: str, *, path: str | None = None, loc: Loc | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.loc = loc

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple:
        # pickled by state, not by `__init__`'s arguments (subclasses take others): a worker process's error
        # reaches its parent whole
        return (_restored, (type(self), self.message, dict(self.__dict__)))


def _restored(cls: type, message: str, state: dict) -> FrontendError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class KernelFileNotFound(FrontendError):
    code = "file-missing"


class KernelSyntaxError(FrontendError):
    code = "syntax-error"


class KernelRaised(FrontendError):
    """The kernel file raised while being imported, built or traced."""

    code = "kernel-raised"

    def __init__(self, message: str, *, stage: str, cause: BaseException | None = None,
                 path: str | None = None, loc: Loc | None = None, related: Loc | None = None):
        super().__init__(message, path=path, loc=loc)
        self.stage = stage  # "import" | "build" | "trace"
        self.cause = cause
        self.related = related  # ERR-23: where the user's code that raised was entered (the call), if elsewhere


class NoTargets(FrontendError):
    code = "no-targets"


class BadTargetReturn(FrontendError):
    code = "bad-target-return"


class NotTpuPallasCall(FrontendError):
    """The traced function contains no TPU `pallas_call` the front end can lower."""

    code = "not-tpu-pallas-call"


class DeviceProvisioningError(FrontendError):
    """jax is already initialised with fewer host devices than a target needs."""

    code = "devices-unavailable"


class Unsupported(FrontendError):
    """A construct the front end cannot lower faithfully.

    `primitive` is the jax primitive's name (or a construct name), `reason`
    says why, `loc` points at the kernel line. The front end raises this
    instead of guessing: a verdict over a wrong program would be worthless.
    """

    code = "unsupported"

    def __init__(self, primitive: str, reason: str, loc: Loc | None = None):
        where = f" at {loc}" if loc is not None and loc.line else ""
        super().__init__(f"unsupported {primitive}{where}: {reason}", loc=loc)
        self.primitive = primitive
        self.reason = reason
