"""Hypothesis profiles for the differential suite.

`SEMCHECK_PROFILE=ci-long` selects the long profiles (10,000 runs of the
API state machine, 2,000 threaded programs); anything else, or nothing, the
default ones (400 and 200), which keep the whole differential suite to about
two minutes on two cores. `SEMCHECK_HANG_SECONDS` (default 1) is how long all
threads of a threaded run must be blocked before it counts as a hang; raise
it on a heavily loaded machine.

The profiles (defined in `_support.PROFILES`) are registered here but never
loaded globally: each test in this directory applies its own through
`_support.profile`, so other suites keep whatever settings they choose.
"""

from __future__ import annotations

from ._support import register_profiles

register_profiles()
