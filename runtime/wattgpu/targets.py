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

# name -> (forward(physical, cols) -> learned, inverse(learned, cols) -> physical, description)
TRANSFORMS: dict[str, tuple[Callable[[np.ndarray, Columns], np.ndarray], Callable[[np.ndarray, Columns], np.ndarray], str]] = {
    "ratio_to_tdp": (
        lambda y, c: y / c["gpu_tdp_w"],
        lambda z, c: z * c["gpu_tdp_w"],
        "power / TDP (the paper's normalised power)",
    ),
    "log_ratio_to_roofline": (
        lambda y, c: ops.log(y / c["roofline_itl_s"]),
        lambda z, c: ops.exp(z) * c["roofline_itl_s"],
        "log(ITL / roofline decode-step time at the effective batch): an efficiency",
    ),
    "log_ratio_to_step_time": (
        lambda y, c: ops.log(y / c["step_time_s"]),
        lambda z, c: ops.exp(z) * c["step_time_s"],
        "log(ITL / (roofline step time + layers x engine per-layer overhead)): an efficiency of the physical step",
    ),
    "log_ratio_to_duty_power": (
        lambda y, c: ops.log(y / c["duty_power_w"]),
        lambda z, c: ops.exp(z) * c["duty_power_w"],
        "log(power / TDP·(0.3 + 0.7·roofline duty)): a bounded correction to a physical busy-power estimate",
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
