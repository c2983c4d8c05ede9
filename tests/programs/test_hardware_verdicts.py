"""semcheck's hardware verdicts on examples/programs are the table of examples in specs/deciding/programs.md.

Each example is verified at 2 devices and, where its violation needs more, at the device count it
needs and the one below (where every property is proved)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_ground_truth as mgt  # noqa: E402
from cli._support import semcheck_many  # noqa: E402

# The unknowns the table's text names (PRG-114 aside): file -> {devices: properties}; every other
# property not violated is proved.
UNKNOWN = {
    "examples/programs/buggy/async_copy_done_wrong_future.py": {n: {"race-free"} for n in (2, 3, 4, 5)},
    "examples/programs/buggy/async_slice_done_wrong_future.py": {n: {"race-free"} for n in (2, 3, 4, 5)},
    "examples/programs/buggy/bidi_permute_loop_start_without_send_done.py": {n: {"race-free"} for n in (3, 4, 5)},
    # PRG-208: the second call reads the plan's outputs, which a TPU's copy past the table leaves unspecified (D33)
    "examples/programs/buggy/plan_copy_past_its_table.py": {2: {
        "id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free",
        "invocation-confined"}},
    # PRG-169: the copy call reads the tables a TPU's store past them leaves unspecified (D33), jax's run raises
    "examples/programs/buggy/chunk_table_planned_table_per_sequence.py": {2: {
        "id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free",
        "invocation-confined"}},
    # PRG-217: likewise after the plan whose write-backs read past their tables
    "examples/programs/buggy/plan_writebacks_fail_apart.py": {2: {
        "id-disjoint", "id-int16", "id-agreement", "deadlock-free", "exit-balance", "dma-bytes", "race-free",
        "invocation-confined"}},
}


def _plan() -> dict[str, list[int]]:
    plan = {}
    for path, spec in mgt.EXAMPLES.items():
        start = spec.get("from_devices")
        ns = {2} | ({start, start - 1} if start else set())
        if "two_patterns" in path:  # the pairwise kernel needs an even number of devices
            ns = {n for n in ns if n % 2 == 0}
        plan[path] = sorted(ns)
    return plan


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[int, dict[str, set[str]]]]:
    # one CLI run per set of device counts over all its files (a run per file spent most of its time
    # importing jax), the larger sets split in two halves side by side
    groups: dict[tuple[int, ...], list[str]] = collections.defaultdict(list)
    for path, ns in _plan().items():
        groups[tuple(ns)].append(path)
    batches = [(paths[i::2], ns) for ns, paths in sorted(groups.items()) for i in range(2) if paths[i::2]]
    runs = semcheck_many([(("verify", *paths, "--dma-mode", "hardware", "--devices", ",".join(map(str, ns)),
                            "--format", "json"), {"cwd": REPO, "timeout": 900 * len(paths)}) for paths, ns in batches])
    out: dict[str, dict[int, dict[str, set[str]]]] = {}
    for (paths, _), run in zip(batches, runs, strict=True):
        assert run.returncode in (0, 1, 3), (paths, run.stderr[-2000:])
        report = run.json()
        assert not report["errors"], report["errors"]
        for path in paths:
            by: dict[int, dict[str, set[str]]] = collections.defaultdict(lambda: collections.defaultdict(set))
            for r in report["results"]:
                if r["file"] == path:
                    by[r["devices"]][r["verdict"]].add(r["property"])
            out[path] = by
    return out


@pytest.mark.jax
@pytest.mark.rule("PRG-15", "PRG-106", "PRG-114", "PRG-121", "PRG-127", "PRG-131", "PRG-215")
@pytest.mark.parametrize("path", sorted(mgt.EXAMPLES))
def test_hardware_verdicts_are_the_specs_table(verdicts, path):
    spec = mgt.EXAMPLES[path]
    start = spec.get("from_devices", 2)
    for n, by in sorted(verdicts[path].items()):
        listed = set(spec["hardware"]) if n >= start else set()
        assert by["violated"] == listed, (n, dict(by))
        if "invocation-confined" in listed:
            assert {"id-disjoint", "id-int16"} <= by["proved"], (n, dict(by))  # PRG-215
            continue  # PRG-114, PRG-216: the rest is unknown, citing the confinement violation
        assert by["unknown"] == UNKNOWN.get(path, {}).get(n, set()), (n, dict(by))
