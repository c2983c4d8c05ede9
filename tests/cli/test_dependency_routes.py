"""The dependency record (`semcheck._dependencies`) sees every route of tests/cli/test_cache_staleness.py's
ROUTES under every change: whenever a change alters what the route reads, the recorded dependencies
no longer read as they did; when nothing changed, they still do. No jax: the recorder runs on the
route alone, in one subprocess (installing it wraps `os` functions for the process's life)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .test_cache_staleness import CHANGES, ROUTES

SCRIPT = r"""
import json, os, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from semcheck import _dependencies as d
from tests.cli.test_cache_staleness import CHANGES, ROUTES, _change, _route_bit

rec = d.install()
out = []
for route in sorted(ROUTES):
    for linked in (False, True):
        for change in CHANGES:
            here = Path(tempfile.mkdtemp())
            (here / "a").write_text("0")
            (here / "b").write_text("1\n")
            if linked:
                os.symlink("a", here / "thing")
            else:
                (here / "thing").write_text("0")
            os.environ.pop("ROUTE_BUG", None)
            rec.__init__()  # a fresh record, through the hooks installed once
            with d.observe(rec):
                before = _route_bit(route, here)
            deps = rec.dependencies()
            unchanged = deps.changed()
            _change(here, change, os.environ)
            after = _route_bit(route, here)
            out.append([route, linked, change, before != after, unchanged, deps.changed()])
print(json.dumps(out))
"""

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, bool, str], tuple[bool, str | None, str | None]]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {(r, linked, c): (moved, unchanged, changed)
            for r, linked, c, moved, unchanged, changed in json.loads(proc.stdout)}


@pytest.mark.parametrize("linked", [False, True], ids=["file", "link"])
@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_change_the_route_sees_is_a_changed_dependency(outcomes, route, linked, change):
    moved, unchanged, changed = outcomes[(route, linked, change)]
    assert unchanged is None, f"nothing changed yet, but the record says {unchanged}"
    if moved:
        assert changed is not None, f"{route} reads another value after a {change}, and the record did not see it"


def test_every_change_alters_what_some_route_reads(outcomes):
    """Else the test above would prove little."""
    moved = {c for (_, _, c), (m, _, _) in outcomes.items() if m}
    assert moved == set(CHANGES)
