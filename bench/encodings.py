"""Size and time of the deadlock-free encodings against the device count, on ring all-reduce.

Run `python bench/encodings.py [max_devices]` from a checkout for the table. The programs
come from the test fixtures (tests/ring_programs.py): this is a developer's measurement, not
part of the product.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# The ring programs are a test fixture, not product code; bench runs from a checkout.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ring_programs import ring_allreduce  # noqa: E402

from semcheck.checker.z3.deadlock import deadlock_free  # noqa: E402
from timestamped import deadlock_free_timestamped  # noqa: E402 - bench/, this script's directory
import integer_encodings  # noqa: E402, F401 - registers the plain and compact renderings

LIMITS = {"order": 10**9, "compact": 128, "plain": 64, "timestamped": 16}


def measure(n: int, *, bug: str | None = None, mode: str = "hardware", limits: dict = LIMITS,
            timeout_ms: int = 120_000) -> dict:
    """One row of the table: size and time of each encoding on `ring_allreduce(n, bug=bug)`.

    An encoding is skipped above its size limit (where it no longer answers
    within the timeout).
    """
    t0 = time.perf_counter()
    p = ring_allreduce(n, bug=bug)
    row: dict = {"devices": n, "ops": p.num_ops, "build_s": round(time.perf_counter() - t0, 3)}
    for enc in ("order", "compact", "plain", "timestamped"):
        if n > limits.get(enc, 0):
            continue
        t1 = time.perf_counter()
        if enc == "timestamped":
            v = deadlock_free_timestamped(p, mode, timeout_ms=timeout_ms)
        else:
            v = deadlock_free(p, mode, encoding=enc, timeout_ms=timeout_ms)
        st = v.stats
        size = st.get("clauses") if enc == "order" else (st.get("ite_terms") or 0) + (st.get("threshold_atoms") or 0)
        row[enc] = {
            "verdict": v.verdict if v.verdict != "unknown" else "timeout" if "gave up" in v.reason else "unknown",
            "size": size,
            "total_s": round(time.perf_counter() - t1, 3),
            **{k: st.get(k) for k in ("lower_s", "s_prime_s", "encode_s", "solve_s")},
        }
    return row


def table(sizes=(2, 4, 8, 16, 32, 64, 128, 256), *, bug: str | None = None, mode: str = "hardware",
          limits: dict = LIMITS, out=sys.stdout) -> list[dict]:
    """Print (and return) the scaling table. size = clauses (order) or If-terms + comparisons (others)."""
    rows = []
    print(f"ring all-reduce, mode={mode}, bug={bug}; each cell: verdict size solve_s/total_s", file=out)
    encs = ("order", "compact", "plain", "timestamped")
    print(f"{'dev':>4} {'ops':>7} | " + " | ".join(f"{e:^30}" for e in encs), file=out)
    for n in sizes:
        r = measure(n, bug=bug, mode=mode, limits=limits)
        rows.append(r)
        cells = []
        for e in encs:
            c = r.get(e)
            cells.append(f"{'-':^30}" if c is None else
                         f"{c['verdict']:>8} {c['size']:>8} {c['solve_s'] if c['solve_s'] is not None else '-':>6}/{c['total_s']:<6}")
        print(f"{n:>4} {r['ops']:>7} | " + " | ".join(cells), file=out, flush=True)
    return rows


if __name__ == "__main__":
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    sizes = [s for s in (2, 4, 8, 16, 32, 64, 128, 256, 512) if s <= top]
    table(sizes)
