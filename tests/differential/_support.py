"""Helpers shared by the differential tests: profiles and the conformance runner."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parents[2]
RUNNER_PATH = REPO / "specs" / "conformance" / "runner.py"
LONG = os.environ.get("SEMCHECK_PROFILE", "") == "ci-long"  # same switch as conftest.py


_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

PROFILES = {
    # API-level state machines: examples x steps.
    "semcheck-stateful": dict(max_examples=200, stateful_step_count=40),
    "semcheck-stateful-ci-long": dict(max_examples=10_000, stateful_step_count=60),
    # Whole programs run on the real manager with one thread per core.
    "semcheck-threaded": dict(max_examples=100),
    "semcheck-threaded-ci-long": dict(max_examples=2_000),
}


def register_profiles() -> None:
    """Register the differential suite's hypothesis profiles (idempotent; never loads one)."""
    for name, kw in PROFILES.items():
        settings.register_profile(name, **_COMMON, **kw)


def profile(kind: str) -> settings:
    """The settings of profile `kind` ("stateful", "threaded") for this run."""
    register_profiles()
    return settings.get_profile(f"semcheck-{kind}" + ("-ci-long" if LONG else ""))


def load_runner():
    """specs/conformance/runner.py, imported by path (it is not part of the package)."""
    name = "semcheck_conformance_runner"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, RUNNER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
