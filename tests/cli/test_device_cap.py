"""RUN-13: a device count past the cap is a usage error that says what bounds it."""

from __future__ import annotations

import pytest

from semcheck.checker.request import MAX_DEVICES, InputError, check_devices, parse_devices


@pytest.mark.rule("RUN-13")
@pytest.mark.parametrize("ask", [lambda n: parse_devices(str(n)), lambda n: parse_devices(f"2..{n}"),
                                 lambda n: check_devices(n)])
def test_a_device_count_past_the_cap_says_what_bounds_it(ask):
    with pytest.raises(InputError) as e:
        ask(MAX_DEVICES + 1)
    assert "square of the device count" in str(e.value) and "RUN-13" in str(e.value)
    assert ask(MAX_DEVICES) is not None  # the cap itself is verified
    with pytest.raises(InputError) as e:
        parse_devices("0")
    assert "RUN-13" not in str(e.value)  # a count below 1 is bad for another reason
