"""Shared test set-up: hypothesis profiles, and the program strategies and the oracles on sys.path.

SEMCHECK_PROFILE selects the size: `default` (CI, minutes), `ci-long`
(nightly-style fuzzing, >= 10,000 examples per property).
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))
# the test oracles outside the product package (oracles/, e.g. SPIN) import from the checkout's root
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The default run (`make test`, CI) draws the same examples every time, so a verdict lands or fails on the
# code alone; `make test-long` (ci-long) draws fresh ones and is where new counterexamples are hunted.
settings.register_profile(
    "default",
    max_examples=100,
    derandomize=True,
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
    """CPU seconds of this process and every descendant, live or reaped.

    A live process's cutime/cstime hold the children it reaped; summing utime, stime, cutime and
    cstime over the live tree counts each process once. The tree matters: verifying children are
    forked by a long-lived forkserver, which reaps them but is itself reaped only at exit."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(x) for x in fields[11:15])
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / tick


_CPU_LOG = os.environ.get("SEMCHECK_TEST_CPU_LOG")  # a file to append each test's CPU seconds to


if _CPU_LOG:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """CPU seconds per test (its process tree), setup included, then wall seconds: on a shared
        machine wall time measures the neighbours too, CPU time the test; a test that waits (a hang
        timeout) shows as wall time without CPU."""
        import time

        start, wall = _cpu_seconds(), time.monotonic()
        yield
        with open(_CPU_LOG, "a", encoding="utf-8") as f:
            f.write(f"{_cpu_seconds() - start:.2f}\t{item.nodeid}\t{time.monotonic() - wall:.2f}\n")
