"""Prediction intervals and the training domain, computed from the training rows only."""
from __future__ import annotations

from typing import Any

import numpy as np

from wattgpu.targets import inverse

from .dataset import Dataset
from .fit import fit_model
from .recipes import ModelRecipe

LEVELS = (80, 95)
# In GPU-weighted calibration a GPU carries total weight min(rows, this) / this: GPUs with at least this
# many rows count equally; a GPU with one or two rows (a single load point) cannot set the interval alone.
FULL_WEIGHT_ROWS = 20
INTERVAL_GPU_FIELDS = ("tdp_w", "memory_bandwidth_gb_s", "fp16_tflops", "memory_size_gb", "release_year")


def grouped_oof(recipe: ModelRecipe, data: Dataset, groups: np.ndarray, n_jobs: int = 1) -> np.ndarray:
    """Out-of-fold predictions (physical units) where each group is held out in turn."""
    pred = np.full(len(data), np.nan)
    for g in np.unique(groups):
        test = groups == g
        if test.all():
            continue
        model = fit_model(recipe, data.subset(~test), n_jobs=n_jobs)
        sub = data.subset(test)
        pred[test] = inverse(recipe.transform, model.predict_learned(sub.X(recipe.features)).astype(np.float64), sub.cols)
    return pred


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest value whose cumulative weight share reaches ``q`` (the 'higher' rule for weights)."""
    order = np.argsort(values, kind="mergesort")
    v, w = values[order], weights[order]
    cum = np.cumsum(w) / w.sum()
    return float(v[min(int(np.searchsorted(cum, q - 1e-12)), len(v) - 1)])


def interval_factors(measured: np.ndarray, predicted: np.ndarray, groups: np.ndarray | None = None) -> dict[str, Any]:
    """Split-conformal style multiplicative intervals from out-of-fold log residuals.

    With ``groups`` (the GPU of each row) every GPU with at least ``FULL_WEIGHT_ROWS`` rows carries the
    same total weight (fewer rows: proportionally less), so a GPU with many rows cannot set the interval
    for all of them: a held-out GPU is one draw from the population of GPUs, and the quantiles are
    taken over that population.
    """
    ok = np.isfinite(predicted) & (predicted > 0)
    r = np.log(measured[ok] / predicted[ok])
    if groups is None:
        w = np.ones(len(r))
    else:
        g = np.asarray(groups, dtype=object)[ok]
        names, inv, counts = np.unique(g, return_inverse=True, return_counts=True)
        w = 1.0 / np.maximum(counts[inv], FULL_WEIGHT_ROWS)
    factors = {}
    for level in LEVELS:
        a = (100 - level) / 200.0
        lo, hi = weighted_quantile(r, w, a), weighted_quantile(r, w, 1 - a)
        factors[str(level)] = [float(np.exp(lo)), float(np.exp(hi))]
    how = "GPU-weighted quantiles" if groups is not None else "quantiles"
    return {"method": f"{how} of leave-one-GPU-out log residuals (measured / predicted)",
            "n_residuals": int(ok.sum()), "factors": factors}


def training_domain(datasets: dict[str, Dataset]) -> dict[str, Any]:
    """Envelope of what the models saw: GPU spec ranges, LLM sizes and kinds, workloads."""
    gpus = {g.name: g for d in datasets.values() for g, _, _ in d.triples}
    llms = {m.name: m for d in datasets.values() for _, m, _ in d.triples}
    wls = [w for d in datasets.values() for _, _, w in d.triples]
    ranges = {}
    for f in INTERVAL_GPU_FIELDS:
        vals = [float(getattr(g, f)) for g in gpus.values()]
        ranges[f] = [min(vals), max(vals)]
    sizes = [m.total_params_b for m in llms.values()]
    return {
        "gpus": sorted(gpus),
        "gpu_ranges": ranges,
        "llm_params_b": [min(sizes), max(sizes)],
        "arch_classes": sorted({m.arch_class for m in llms.values()}),
        "moe_seen": any(m.is_moe for m in llms.values()),
        "quantized_seen": any(m.quantized for m in llms.values()),
        "kinds": sorted({w.kind for w in wls}),
        "engines": sorted({w.engine for w in wls}),
        "tp_range": [min(w.tp for w in wls), max(w.tp for w in wls)],  # tensor-parallel degrees measured
    }
