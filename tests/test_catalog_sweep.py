"""Issue 38's catalog sweeps on the shipped models (definitions in tests/catalog_sweep.py): answers a user catches
in minutes while every hard bound holds. The third sweep, catalog ids against their config.json, is
tests/test_llm_derivation.py."""
from __future__ import annotations

import pytest

from wattgpu.predictor import Predictor

from .catalog_sweep import dominance_inversions, saturated_power_steps


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def test_the_sweep_sees_enough_pairs_and_steps(pred: Predictor) -> None:
    """The sweeps are not vacuous: thousands of dominance comparisons, and flat cap steps to check."""
    _, n, _ = dominance_inversions(pred)
    assert n > 10_000


def test_no_model_that_reads_more_is_predicted_faster(pred: Predictor) -> None:
    """Holds by construction (recipes._physics_itl: every LLM input of the ITL trees carries a +1 direction on a base
    that rises with bytes, FLOPs and layers); 35 of 133,792 comparisons were inverted before (issue 38)."""
    bad, n, examples = dominance_inversions(pred)
    assert bad == 0, f"{bad} of {n} strict-dominance comparisons inverted:\n" + "\n".join(examples)


def test_no_bigger_batch_cap_draws_more_power_for_no_more_work(pred: Predictor) -> None:
    """Where the sub-batch bound holds tokens/s flat, power is the adopted grid batch's (capacity.sub_batch)."""
    bad, flat, examples = saturated_power_steps(pred)
    assert bad == 0, f"{bad} of {flat} flat cap steps raise power > 5 %:\n" + "\n".join(examples)
