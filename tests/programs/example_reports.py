"""semcheck's JSON report on one example program, read as the interpreter-prediction tests read it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GROUND_TRUTH = json.loads((REPO / "tests" / "programs" / "ground_truth.json").read_text())


def verify_report(example: str, timeout: float) -> dict:
    """`semcheck verify EXAMPLE --devices 2,4 --dma-mode all --format json`, uncached."""
    run = subprocess.run([sys.executable, "-m", "semcheck.checker.run.cli", "verify", example, "--devices", "2,4",
                          "--dma-mode", "all", "--format", "json", "--no-cache"],
                         capture_output=True, text=True, cwd=REPO, timeout=timeout)
    assert run.returncode in (0, 1, 3), run.stderr[-3000:]
    return json.loads(run.stdout)


def predicted(report: dict, target: str, devices: int, mode: str) -> dict[str, dict]:
    """The report's verdicts on one target, device count and mode, by property."""
    return {r["property"]: r for r in report["results"]
            if r["target"] == target and r["devices"] == devices and r["dma_mode"] == mode}


def verdict_text(row: dict) -> str:
    """What a verdict says: its witness's message, or its reason."""
    return (row.get("witness") or {}).get("message", "") or row.get("reason", "")
