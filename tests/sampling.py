"""A deterministic sample of a sweep over many kernels, for the default test run.

A test that sweeps every example in the default run checks a sample of every `k`-th file; its
sibling marked `slow` (`make test-long`) checks the whole sweep. Sweeps of one module take
different `offset`s so that between them they reach every file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

LONG = os.environ.get("SEMCHECK_PROFILE") == "ci-long"


def every_kth(items: Sequence[T], k: int, offset: int = 0, keep: Sequence[T] = ()) -> list[T]:
    """Every `k`-th of `items` from `offset` (mod k), in order, plus those of `keep` (which must be items:
    a test names the ones its own asserts are about)."""
    assert k >= 1 and all(x in items for x in keep), [x for x in keep if x not in items]
    return [x for i, x in enumerate(items) if i % k == offset % k or x in keep]
