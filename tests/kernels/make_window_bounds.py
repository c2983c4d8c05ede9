"""Regenerate tests/kernels/window_bounds.json: what jax's interpreter does with each window of
window_cases.py (specs/semantics/accesses.md ACC-10, ERR-20; divergence D33).

    python tests/kernels/make_window_bounds.py
    python tests/kernels/make_window_bounds.py --only copy_src_zero_at_end

Each case runs in this process, once per DMA execution mode, and its row records the outcome: "ok",
or "error" with the innermost exception's type and message. The message's stable part replaces the
interpreter's buffer key, `(device core space id)`, with `<buffer>` (semcheck names the buffer by its
label instead). tests/test_window_bounds.py holds semcheck's prediction to every row.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import re
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run_interpret as ri  # noqa: E402 - innermost_error
import window_cases as wc  # noqa: E402

TABLE_PATH = HERE / "window_bounds.json"
DMA_MODES = ("eager", "on_wait")
_KEY = re.compile(r"of \(\d+ \d+ \w+ \d+\):")


def stable(message: str | None) -> str | None:
    """The part of an interpreter message that does not depend on buffer ids."""
    return None if message is None else _KEY.sub("of <buffer>:", message)


def run_case(name: str, mode: str) -> dict:
    import jax

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):  # the interpreter prints each callback's traceback
            fn, args = wc.build_case(name, dma_mode=mode)
            jax.block_until_ready(fn(*args))
    except Exception as e:  # noqa: BLE001 - the outcome is what is recorded
        etype, msg = ri.innermost_error("".join(traceback.format_exception(e)))
        return {"outcome": "error", "error_type": etype, "error_message": stable(msg)}
    return {"outcome": "ok"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[])
    ns = ap.parse_args(argv)
    import jax
    import numpy as np

    old = json.loads(TABLE_PATH.read_text()) if TABLE_PATH.exists() and ns.only else {}
    rows = {(r["case"], r["dma_mode"]): r for r in old.get("rows", [])}
    for name in wc.CASES:
        if ns.only and not any(o in name for o in ns.only):
            continue
        for mode in DMA_MODES:
            rows[(name, mode)] = {"case": name, "access": wc.CASES[name][0], "dma_mode": mode, **run_case(name, mode)}
            print(name, mode, rows[(name, mode)]["outcome"], file=sys.stderr)
    table = {
        "description": ("What jax's Pallas TPU interpret mode does with one load, store or copy window per case "
                        "(tests/kernels/window_cases.py), per DMA execution mode: ok, or the innermost error's "
                        "type and message, the buffer key replaced by <buffer>."),
        "environment": {"jax": jax.__version__, "numpy": np.__version__, "python": platform.python_version()},
        "rows": [rows[k] for k in sorted(rows, key=lambda k: (list(wc.CASES).index(k[0]), k[1]))],
    }
    TABLE_PATH.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(table['rows'])} rows to {TABLE_PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
