"""What `semcheck verify`'s own process imports before it starts a checking process.

That process plans the run and reports it; jax, z3 and the model's numpy are imported by the
checking processes (their server preloads them, `checker/run/warm_start.py`). Everything the command-line
process imports first delays the start of that server (bench/README.md, "The import floor")."""

from __future__ import annotations

import subprocess
import sys

PARENT = ("semcheck.checker.run.cli", "semcheck.checker.run.planning", "semcheck.checker.run.runs",
          "semcheck.checker.report.render", "semcheck.checker.run.child")


def test_the_command_line_process_imports_no_jax_z3_or_numpy():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in PARENT)
            + "print(sorted(m for m in ('jax', 'z3', 'numpy', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
