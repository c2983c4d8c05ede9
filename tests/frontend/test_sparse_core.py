"""A SparseCore kernel is unknown in every mode, with its line, not bad input (specs/deciding/report.md ERR-26)."""

from __future__ import annotations

import json

import pytest

from semcheck.checker.properties.registry import IDS
from semcheck.checker.run.exit_codes import EXIT_UNKNOWN
from tests.cli._support import semcheck

KERNEL = "tests/frontend/kernels/sparse_core.py"


@pytest.mark.rule("ERR-26")
def test_a_sparse_core_kernel_is_unknown_in_every_mode_with_its_line():
    r = semcheck("verify", KERNEL, "--devices", "2", "--no-cache", "--no-config", "--format", "json")
    assert r.returncode == EXIT_UNKNOWN, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["errors"] == []
    rows = report["results"]
    assert sorted((row["dma_mode"], row["property"]) for row in rows) == sorted(
        (mode, prop) for mode in ("eager", "on_wait", "hardware") for prop in IDS)
    line = next(i for i, text in enumerate(open(KERNEL), 1) if text.startswith("def _copy_row"))
    for row in rows:
        assert row["verdict"] == "unknown"
        assert row["reason"].startswith(f"unsupported SparseCore kernel at {KERNEL}:{line}: it runs on a "
                                        "VectorSubcoreMesh"), row["reason"]
    assert "unsupported: SparseCore kernel" in r.stderr
