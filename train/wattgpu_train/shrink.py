"""Issue 21 design (b): shrink the learned power correction toward the physical prior as a GPU leaves
the training envelope.

The default power model learns z, a logit offset on top of the duty-power prior (power = idle +
(TDP − idle)·σ(z + logit a₀), ``wattgpu.targets``). Inside the envelope of the training GPUs' spec
sheets z is trusted as it is; outside it z is multiplied by w = 1 / (1 + e / ln 2), where e is the
largest log-ratio by which the GPU's TDP, memory bandwidth or FP16 rate lies outside the training
GPUs' range (a GPU twice as far out as the range's edge keeps half its correction). The rule and its
scale were fixed before any figure was computed; nothing is tuned on the evaluation folds.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from wattgpu import ops
from wattgpu.targets import forward, inverse

from .dataset import Dataset

SHRINK_FIELDS = ("gpu_tdp_w", "gpu_memory_bandwidth_gb_s", "gpu_fp16_tflops")
SHRINK_SCALE = math.log(2.0)


def envelope_excess(cols: Mapping[str, np.ndarray], ranges: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Per row, the largest log-ratio by which a spec field lies outside its [low, high] range (0 inside)."""
    n = len(next(iter(cols.values())))
    excess = np.zeros(n)
    for f in SHRINK_FIELDS:
        lo, hi = ranges[f]
        v = np.asarray(cols[f], dtype=np.float64)
        above = ops.log(np.maximum(v, hi) / hi)
        below = ops.log(lo / np.minimum(v, lo))
        excess = np.maximum(excess, np.maximum(above, below))
    return excess


def shrink_weight(excess: np.ndarray) -> np.ndarray:
    """The share of the learned correction kept: 1 inside the envelope, falling smoothly outside it."""
    return 1.0 / (1.0 + np.asarray(excess, dtype=np.float64) / SHRINK_SCALE)


def shrunk_oof(ds: Dataset, folds: Sequence[tuple[str, np.ndarray]], power: np.ndarray, transform: str) -> np.ndarray:
    """Out-of-fold power predictions with each test row's correction shrunk by its distance from the
    envelope of the GPUs in that fold's training rows."""
    if transform != "logit_activity_over_duty":
        raise ValueError(f"shrinking needs the logit-activity power transform, not {transform!r}")
    z = forward(transform, power, ds.cols)
    out = np.asarray(power, dtype=np.float64).copy()
    for _, test in folds:
        train = ~test
        ranges = {f: (float(np.min(ds.cols[f][train])), float(np.max(ds.cols[f][train]))) for f in SHRINK_FIELDS}
        sub = {k: v[test] for k, v in ds.cols.items()}
        w = shrink_weight(envelope_excess(sub, ranges))
        out[test] = inverse(transform, w * z[test], sub)
    return out
