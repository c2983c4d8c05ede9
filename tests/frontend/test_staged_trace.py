"""A target's staged build is traced once per check of it (`checker/frontend/staged_trace.py`), and only
within that check: outside it every call traces again."""

from __future__ import annotations

import pytest

from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.frontend.staged_trace import sharing, staged_trace
from semcheck.checker.frontend.targets import Target


def _counting_target(name: str = "t", *, fails: bool = False) -> tuple[Target, list[int]]:
    import jax.numpy as jnp

    calls: list[int] = []

    def builder(num_devices: int):
        calls.append(num_devices)

        def fn(x):
            if fails:
                raise ValueError("the kernel raised")
            return x * num_devices

        return fn, (jnp.zeros((4,), jnp.float32),)

    return Target(name=name, builder=builder, path=__file__), calls


def test_one_trace_per_target_and_device_count_within_a_check():
    t, calls = _counting_target()
    with sharing():
        first = staged_trace(t, 2, {})
        again = staged_trace(t, 2, {})
        assert again is not None and first is not None and again[1] is first[1]
        assert calls == [2]
        staged_trace(t, 4, {})  # another device count is another trace
        assert calls == [2, 4]
        other, other_calls = _counting_target()  # same name, another builder (a generated input's)
        staged_trace(other, 4, {})
        assert other_calls == [4]


def test_every_call_traces_outside_a_check():
    t, calls = _counting_target()
    a, b = staged_trace(t, 2, {}), staged_trace(t, 2, {})
    assert calls == [2, 2] and a is not None and b is not None and a[1] is not b[1]


def test_a_failed_trace_fails_again_for_the_second_user():
    t, calls = _counting_target(fails=True)
    with sharing():
        for _ in range(2):
            with pytest.raises(FrontendError):
                staged_trace(t, 2, {})
    assert calls == [2]
