"""One definition of "a finite JSON number": every reader of a user or bundle document uses it."""
from __future__ import annotations

import pytest

from wattgpu import energy, fleet, parallel
from wattgpu.errors import SpecValidationError, WattGPUError
from wattgpu.rules import is_finite_number


@pytest.mark.parametrize("v, ok", [
    (1, True), (0.5, True), (-3, True), (10 ** 300, True),
    (10 ** 400, False), (float("nan"), False), (float("inf"), False), (True, False), ("1", False), (None, False),
])
def test_is_finite_number(v, ok):
    assert is_finite_number(v) is ok


HUGE = 10 ** 400  # a JSON integer of 401 digits: float() overflows on it


def test_huge_integers_are_refused_with_the_field_named_not_an_overflow():
    with pytest.raises(WattGPUError, match="usd_per_kwh"):
        energy.check_prices(HUGE, None, 1.2)
    with pytest.raises(WattGPUError, match="max_utilization"):
        fleet.check_max_utilization(HUGE)
    with pytest.raises(WattGPUError, match="replicas"):
        fleet.check_replicas(HUGE)
    with pytest.raises(SpecValidationError, match="tp"):
        parallel.check_tp_value(HUGE)
