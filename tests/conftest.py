"""Shared test set-up: hypothesis profiles and the program strategies on sys.path.

SEMCHECK_PROFILE selects the size: `default` (CI, minutes), `ci-long`
(nightly-style fuzzing, >= 10,000 examples per property).
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci-long",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("SEMCHECK_PROFILE", "default"))


def _cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


_CPU_LOG = os.environ.get("SEMCHECK_TEST_CPU_LOG")  # a file to append each test's CPU seconds to


if _CPU_LOG:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """CPU seconds per test (its process and the subprocesses it waited for), setup included: on a
        shared machine wall time measures the neighbours, CPU time the test."""
        start = _cpu_seconds()
        yield
        with open(_CPU_LOG, "a", encoding="utf-8") as f:
            f.write(f"{_cpu_seconds() - start:.2f}\t{item.nodeid}\n")
