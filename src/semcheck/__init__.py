"""semcheck: prove Pallas TPU kernels free of semaphore-id collisions and deadlocks.

Public API: `semcheck.target` marks a verification target in a kernel file; `semcheck.check`
verifies kernel files as `semcheck verify` does and `semcheck.check_program` checks a program of
the model's IR (`semcheck._api`); `semcheck.testing.assert_verified` is the assertion for tests.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from semcheck._api import check, check_program
from semcheck._target import target

try:
    __version__ = version("semcheck")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["target", "check", "check_program", "__version__"]
