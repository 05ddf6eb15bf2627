"""Target transforms: what the trees learn and how the runtime turns it back into watts and seconds.

Training calls ``forward``; the runtime calls ``inverse``; both live here once.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from . import ops

Columns = Mapping[str, np.ndarray]

# The predicted quantities, named once: mean GPU power and per-sequence inter-token latency.
POWER = "power"
ITL = "itl"
TARGETS = (POWER, ITL)
UNITS = {POWER: "W", ITL: "s/token"}

# Transforms whose physical value is bounded whatever the trees output (the default recipe uses only these).
BOUNDED = frozenset({"logit_activity_over_duty", "log_excess_over_roofline", "log_excess_over_step",
                     "log_excess_over_step_time", "log_excess_over_layer_overhead"})

# Bounded transforms (issue 21): what the model outputs is mapped INTO the physical range, so no cap or
# clip after the fact does the work. Power = idle + (TDP − idle)·σ(z + logit a₀) lies strictly between the
# GPU's idle power and its TDP for any z (a₀: the duty-power prior as a share of that range). ITL = floor
# + excess·e^z never goes below the roofline step time (weights + KV read at peak bandwidth, or the FLOPs
# at peak, plus the TP all-reduce), the physical floor of a decode step. Measured rows outside the range
# (a handful, at spec-sheet noise) enter training at the edge: activity within [ACTIVITY_EPS, 1 − ACTIVITY_EPS],
# excess at least EXCESS_MIN of the floor.
ACTIVITY_EPS = 0.01
EXCESS_MIN = 0.02


def _activity(power: np.ndarray, c: Columns) -> np.ndarray:
    """Share of the idle→TDP range, kept inside (0, 1)."""
    span = c["gpu_tdp_w"] - c["idle_power_w"]
    return ops.clip((power - c["idle_power_w"]) / span, ACTIVITY_EPS, 1.0 - ACTIVITY_EPS)


def _logit(a: np.ndarray) -> np.ndarray:
    return ops.log(a / (1.0 - a))


def _prior_logit(c: Columns) -> np.ndarray:
    """logit of the physical prior's activity: duty power (TDP·(0.3 + 0.7·duty)) as a share of idle→TDP."""
    return _logit(_activity(c["duty_power_w"], c))


def _power_from_logit(z: np.ndarray, c: Columns) -> np.ndarray:
    """idle + (TDP − idle)·σ(z + prior): strictly inside [idle, TDP] for every finite z."""
    return c["idle_power_w"] + (c["gpu_tdp_w"] - c["idle_power_w"]) / (1.0 + ops.exp(-(z + _prior_logit(c))))


def _step_excess_s(c: Columns) -> np.ndarray:
    """The physical step's time beyond the roofline: layers × the engine's per-layer overhead (> 0)."""
    return c["step_overhead_s"]


def _layer_overhead_s(c: Columns) -> np.ndarray:
    """The engine's per-layer step overhead (> 0): the step excess divided by the layer count."""
    return c["step_overhead_s"] / c["llm_num_layers"]


Transform = tuple[Callable[[np.ndarray, Columns], np.ndarray], Callable[[np.ndarray, Columns], np.ndarray], str]


def _log_ratio(column: str, description: str) -> Transform:
    """learned = log(physical / ``column``), physical = exp(learned) · ``column``."""
    return (lambda y, c: ops.log(y / c[column]), lambda z, c: ops.exp(z) * c[column], description)


# name -> (forward(physical, cols) -> learned, inverse(learned, cols) -> physical, description)
TRANSFORMS: dict[str, Transform] = {
    "ratio_to_tdp": (
        lambda y, c: y / c["gpu_tdp_w"],
        lambda z, c: z * c["gpu_tdp_w"],
        "power / TDP (the paper's normalised power)",
    ),
    "log_ratio_to_roofline": _log_ratio(
        "roofline_itl_s", "log(ITL / roofline decode-step time at the effective batch): an efficiency"),
    "log_ratio_to_step_time": _log_ratio(
        "step_time_s", "log(ITL / (roofline step time + layers x engine per-layer overhead)): an efficiency of the "
        "physical step"),
    "log_ratio_to_duty_power": _log_ratio(
        "duty_power_w", "log(power / TDP·(0.3 + 0.7·roofline duty)): a bounded correction to a physical busy-power "
        "estimate"),
    "logit_activity_over_duty": (
        lambda y, c: _logit(_activity(y, c)) - _prior_logit(c),
        _power_from_logit,
        "logit of (power − idle)/(TDP − idle) minus the duty-power prior's: power = idle + (TDP − idle)·"
        "σ(learned + prior), inside [idle, TDP] by construction",
    ),
    "log_excess_over_roofline": (
        lambda y, c: ops.log(ops.maximum(y / c["roofline_itl_s"] - 1.0, EXCESS_MIN)),
        lambda z, c: c["roofline_itl_s"] * (1.0 + ops.exp(z)),
        "log(ITL / roofline − 1): ITL = roofline·(1 + e^learned), above the roofline floor by construction",
    ),
    "log_excess_over_step": (
        lambda y, c: ops.log(ops.maximum(y - c["roofline_itl_s"], EXCESS_MIN * c["roofline_itl_s"]) / _step_excess_s(c)),
        lambda z, c: c["roofline_itl_s"] + _step_excess_s(c) * ops.exp(z),
        "log((ITL − roofline) / (layers × engine overhead)): ITL = roofline + overhead·e^learned, above the "
        "roofline floor by construction",
    ),
    "log_excess_over_layer_overhead": (
        lambda y, c: ops.log(ops.maximum(y - c["roofline_itl_s"], EXCESS_MIN * c["roofline_itl_s"]) / _layer_overhead_s(c)),
        lambda z, c: c["roofline_itl_s"] + _layer_overhead_s(c) * ops.exp(z),
        "log((ITL − roofline) / engine per-layer overhead): the step's excess in units of ONE layer's overhead, so "
        "the trees carry the layer count themselves (under a +1 constraint: a deeper model is never faster); "
        "ITL = roofline + overhead·e^learned, above the roofline floor by construction",
    ),
    "log_excess_over_step_time": (
        lambda y, c: ops.log(ops.maximum(y - c["roofline_itl_s"], EXCESS_MIN * c["roofline_itl_s"]) / c["step_time_s"]),
        lambda z, c: c["roofline_itl_s"] + c["step_time_s"] * ops.exp(z),
        "log((ITL − roofline) / (roofline + layers × engine overhead)): the excess in units of the physical step, "
        "which scale with the GPU's bandwidth (roofline) and the engine's per-step overhead; ITL = roofline + "
        "step·e^learned, above the roofline floor by construction",
    ),
    "log": (
        lambda y, c: ops.log(y),
        lambda z, c: ops.exp(z),
        "natural log (the paper's ITL target)",
    ),
}


def forward(name: str, physical: np.ndarray, cols: Columns) -> np.ndarray:
    """Physical target (W or s/token) → the value the model learns."""
    return TRANSFORMS[name][0](ops.asarray(physical), cols)


def inverse(name: str, learned: np.ndarray, cols: Columns) -> np.ndarray:
    """Model output → physical units (W or s/token)."""
    return TRANSFORMS[name][1](ops.asarray(learned), cols)
