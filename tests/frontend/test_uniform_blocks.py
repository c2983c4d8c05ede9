"""The grid's block copies (GRID-1, GRID-3) and the waits are lowered once for every device when every
device's block (or semaphore and value) is the same: the program is the one the per-device lowering gives."""

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
    "examples/ring_allgather.py",
    "examples/bidirectional_reduce_scatter.py",
    "examples/scoped_semaphores.py",
    "examples/two_core_signal.py",
    "examples/jax_ops/all_gather.py",
    "examples/jax_ops/ragged_all_to_all.py",
]


def _programs(path: str, devices: int) -> list:
    from semcheck.checker.frontend import load

    return [k.program for k in load(path, devices=devices)]


class _Differ(list):
    """A per-device list whose devices never all agree, as far as the fast paths ask."""

    def count(self, value):
        return -1


def _alike_as_device_by_device(paths: list[str]) -> dict[str, bool]:
    """For each example, whether its program with the fast paths is the per-device lowering's (run in a
    fresh process: jax fixes its device count when it first starts, and another test of the calling
    process may have started it with one)."""
    from semcheck.checker.frontend import block_copies, provision_devices, sync_rules

    provision_devices(2)
    out = {}
    for path in paths:
        fast = _programs(path, 2)
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setattr(block_copies, "_uniform", lambda starts: False)
            monkeypatch.setattr(block_copies, "_one_value", lambda v: False)
            sem_indices = sync_rules.SyncRules.sem_indices

            def per_device(self, *args, **kwargs):
                label, idx = sem_indices(self, *args, **kwargs)
                return label, _Differ(idx)

            monkeypatch.setattr(sync_rules.SyncRules, "sem_indices", per_device)
            out[path] = fast == _programs(path, 2)
    return out


@pytest.fixture(scope="module")
def alike() -> dict[str, bool]:
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_alike_as_device_by_device, EXAMPLES).result()


@pytest.mark.rule("GRID-1", "GRID-3")
@pytest.mark.parametrize("path", EXAMPLES)
def test_what_every_device_does_alike_is_lowered_as_device_by_device(path, alike):
    assert alike[path]
