"""One definition of "a finite JSON number": every reader of a user or bundle document uses it."""
from __future__ import annotations

import pytest

from wattgpu import energy, parallel
from wattgpu.serving import fleet
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


@pytest.mark.parametrize("prices", [(None, None, 1.0, None), (None, None, 1, None), (0.1, None, 1.0, None),
                                    (None, None, 1.0, 2.0), (None, None, 5.0, None)])
def test_default_and_valid_prices_pass(prices):
    energy.check_prices(*prices)  # the defaults take a short cut; every other tuple the full check


@pytest.mark.parametrize("prices, field", [((None, None, True, None), "pue"), ((None, None, 0.5, None), "pue"),
                                           ((None, None, float("nan"), None), "pue"),
                                           ((None, float("inf"), 1.0, None), "gco2_per_kwh"),
                                           ((None, None, 1.0, -1.0), "usd_per_gpu_hour")])
def test_prices_beside_the_defaults_are_still_checked(prices, field):
    with pytest.raises(WattGPUError, match=field):
        energy.check_prices(*prices)
