"""A SparseCore kernel is unknown in every mode, with its line, not bad input (specs/deciding/report.md ERR-26)."""

from __future__ import annotations

import json

import pytest

from semcheck.checker.properties.registry import IDS
from semcheck.checker.run.exit_codes import EXIT_UNKNOWN
from tests.cli._support import semcheck

KERNEL = "tests/frontend/kernels/sparse_core.py"
# target -> the start of the line its reason names: the kernel body (pl.kernel) or the core_map
LINES = {"kernel_on_subcores": "def _copy_row", "core_map_on_subcores": "@pl.core_map(_subcores())"}


@pytest.mark.rule("ERR-26")
def test_a_sparse_core_kernel_is_unknown_in_every_mode_with_its_line():
    r = semcheck("verify", KERNEL, "--devices", "2", "--no-cache", "--no-config", "--format", "json")
    assert r.returncode == EXIT_UNKNOWN, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["errors"] == []
    rows = report["results"]
    assert sorted((row["target"], row["dma_mode"], row["property"]) for row in rows) == sorted(
        (t, mode, prop) for t in LINES for mode in ("eager", "on_wait", "hardware") for prop in IDS)
    source = open(KERNEL).read().splitlines()
    for row in rows:
        line = next(i for i, text in enumerate(source, 1) if text.strip().startswith(LINES[row["target"]]))
        assert row["verdict"] == "unknown"
        assert row["reason"].startswith(f"unsupported SparseCore kernel at {KERNEL}:{line}: it runs on a "
                                        "VectorSubcoreMesh"), row["reason"]
    assert r.stderr.count("unsupported: SparseCore kernel") == 2
