"""The grid's block copies (GRID-1, GRID-3) are lowered once for every device when every device's block
is the same: the program is the one the per-device lowering gives."""

from __future__ import annotations

import pytest

EXAMPLES = [
    "examples/ring_allreduce.py",
    "examples/double_buffered_pipeline.py",
    "examples/megacore_grid.py",
    "examples/inplace_prefetch_grid.py",
    "examples/consecutive_output_blocks.py",
    "examples/buggy/revisited_output_block.py",
    "examples/buggy/race_grid_writeback_prefetch_off_by_one.py",
    "examples/buggy/race_megacore_grid_same_output_block.py",
]


def _programs(path: str, devices: int) -> list:
    from semcheck.checker.frontend import load

    return [k.program for k in load(path, devices=devices)]


@pytest.mark.rule("GRID-1", "GRID-3")
@pytest.mark.parametrize("path", EXAMPLES)
def test_block_copies_alike_on_every_device_are_lowered_as_device_by_device(path, monkeypatch):
    from semcheck.checker.frontend import block_copies

    fast = _programs(path, 2)
    monkeypatch.setattr(block_copies, "_uniform", lambda starts: False)
    monkeypatch.setattr(block_copies, "_one_value", lambda v: False)
    assert fast == _programs(path, 2)
