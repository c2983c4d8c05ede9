"""semcheck: prove Pallas TPU kernels free of semaphore-id collisions and deadlocks.

Public API for kernel files: `semcheck.target` marks a verification target.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from semcheck._target import target

try:
    __version__ = version("semcheck")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["target", "__version__"]
