"""Physical baselines, computed from spec sheets only (nothing is fitted, so no fold can leak)."""
from __future__ import annotations

import numpy as np

from wattgpu import physics
from wattgpu.targets import inverse

from .dataset import Dataset


def tdp_power(ds: Dataset) -> np.ndarray:
    """Power = TDP."""
    return np.asarray(ds.cols["gpu_tdp_w"], dtype=np.float64).copy()


def ls_tdp_power(ds: Dataset) -> np.ndarray:
    """Load-scaled TDP: ρ(scenario) × TDP with the paper's ρ (physics.LS_TDP_RHO)."""
    rho = np.array([physics.LS_TDP_RHO[physics.paper_scenario(w.kind, w.qps)] for _, _, w in ds.triples])
    return rho * ds.cols["gpu_tdp_w"]


def duty_prior_power(ds: Dataset) -> np.ndarray:
    """The bounded power model with no learned correction (z = 0): idle + (TDP − idle) × the duty-power
    prior's activity, i.e. duty power TDP·(0.3 + 0.7·duty) kept inside [idle, TDP]."""
    return inverse("logit_activity_over_duty", np.zeros(len(ds)), ds.cols)


def roofline_itl(ds: Dataset) -> np.ndarray:
    """Per-sequence ITL = roofline decode-step time at the effective batch (weights + KV + FLOPs)."""
    return np.asarray(ds.cols["roofline_itl_s"], dtype=np.float64).copy()


def paper_roofline_s_per_token(ds: Dataset) -> np.ndarray:
    """The paper's roofline: 2·params_B / bandwidth_GB_s divided by the batch (256 offline, 1 server)."""
    batch = np.array([256.0 if w.kind == "offline" else 1.0 for _, _, w in ds.triples])
    return physics.bandwidth_latency_s(ds.cols["llm_total_params_b"], ds.cols["gpu_memory_bandwidth_gb_s"]) / batch


POWER_BASELINES = {"tdp": tdp_power, "ls_tdp": ls_tdp_power, "duty_prior": duty_prior_power}
ITL_BASELINES = {"roofline": roofline_itl}
