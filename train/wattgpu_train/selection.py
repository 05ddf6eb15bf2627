"""Nested model selection: choose among a recipe's candidates using the training rows only.

``select`` scores each candidate by a grouped k-fold inside the rows it is given (the groups of the
outer split: GPUs for leave-one-GPU-out, LLMs for leave-one-LLM-out, ...), and returns the candidate
with the lowest inner MdAPE. Evaluation calls it once per outer fold, so no reported figure comes
from a choice that saw its own test rows; ``fit`` calls it on all training rows.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from wattgpu.targets import inverse

from . import metrics
from .dataset import Dataset
from .fit import fit_model
from .recipes import ModelRecipe

INNER_FOLDS = 3
LEAVE_ONE_GROUP_OUT = 1_000_000  # as k: one fold per group


def grouped_kfold_masks(groups: Sequence[object], k: int) -> list[np.ndarray]:
    """Deterministic grouped k-fold test masks: groups sorted by size (largest first, ties by name) and
    dealt to the fold with the fewest rows so far. Fewer than 2 groups: no folds."""
    g = np.asarray(list(groups), dtype=object)
    names, counts = np.unique(g, return_counts=True)
    k = int(min(k, len(names)))
    if k < 2:
        return []
    order = sorted(range(len(names)), key=lambda i: (-counts[i], str(names[i])))
    load = np.zeros(k, dtype=np.int64)
    fold_of: dict[object, int] = {}
    for i in order:
        f = int(np.argmin(load))
        fold_of[names[i]] = f
        load[f] += counts[i]
    assign = np.array([fold_of[x] for x in g])
    return [assign == f for f in range(k)]


def inner_oof(recipe: ModelRecipe, data: Dataset, masks: list[np.ndarray]) -> np.ndarray:
    """Out-of-fold physical predictions of ``recipe`` over ``masks`` (single-threaded fits)."""
    pred = np.full(len(data), np.nan)
    for test in masks:
        if not test.any() or test.all():
            continue
        model = fit_model(recipe, data.subset(~test), n_jobs=1)
        sub = data.subset(test)
        pred[test] = inverse(recipe.transform, model.predict_learned(sub.X(recipe.features)).astype(np.float64),
                             sub.cols)
    return pred


def select(candidates: Sequence[ModelRecipe], data: Dataset, groups: Sequence[object],
           k: int | None = None) -> tuple[int, list[float]]:
    """Index of the candidate with the lowest inner grouped-k-fold MdAPE on ``data``, and every score.

    One candidate, or fewer than 2 groups: index 0 and no scores. Ties keep the earlier candidate.
    """
    if len(candidates) < 2:
        return 0, []
    masks = grouped_kfold_masks(groups, INNER_FOLDS if k is None else k)
    if not masks:
        return 0, []
    y = data.y_physical(candidates[0].target)
    scores = []
    for rec in candidates:
        p = inner_oof(rec, data, masks)
        ok = np.isfinite(p)
        scores.append(metrics.mdape(y[ok], p[ok]) if ok.any() else float("inf"))
    return int(np.argmin(scores)), scores
