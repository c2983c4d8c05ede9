"""Hypothesis profiles for the differential suite.

`SEMCHECK_PROFILE=ci-long` selects the long profiles (at least 10,000
examples per state machine); anything else, or nothing, the default ones,
which keep the whole differential suite within a few minutes on two cores.

The profiles (defined in `_support.PROFILES`) are registered here but never
loaded globally: each test in this directory applies its own through
`_support.profile`, so other suites keep whatever settings they choose.
"""

from __future__ import annotations

from ._support import register_profiles

register_profiles()
