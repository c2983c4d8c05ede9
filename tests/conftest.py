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
