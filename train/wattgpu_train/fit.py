"""Fit the XGBoost models of a recipe on measured rows (deterministic: fixed seed, one thread)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import xgboost as xgb

from .dataset import Dataset
from .recipes import ModelRecipe

Progress = Callable[[str, int, int], None]


class _ProgressCallback(xgb.callback.TrainingCallback):
    def __init__(self, label: str, total: int, progress: Progress) -> None:
        self.label, self.total, self.progress = label, total, progress

    def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
        self.progress(self.label, epoch + 1, self.total)
        return False


def stderr_progress(label: str, done: int, total: int) -> None:
    """A one-line progress bar on stderr."""
    if done == total or done % max(1, total // 20) == 0:
        width = 30
        filled = int(width * done / total)
        sys.stderr.write(f"\r{label:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


@dataclass
class FittedModel:
    recipe: ModelRecipe
    booster: xgb.XGBRegressor

    def predict_learned(self, X: np.ndarray) -> np.ndarray:
        return self.booster.predict(X)


def fit_model(recipe: ModelRecipe, data: Dataset, progress: Progress | None = None,
              n_jobs: int = 1) -> FittedModel:
    """Train one model of ``recipe`` on every row of ``data`` (rows must have the target)."""
    X = data.X(recipe.features)
    y = data.y(recipe.target, recipe.transform).astype(np.float32)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{recipe.target}: non-finite targets after transform {recipe.transform}")
    params = dict(recipe.params)
    params["n_jobs"] = n_jobs
    if recipe.monotone:
        params["monotone_constraints"] = tuple(recipe.monotone.get(f, 0) for f in recipe.features)
    callbacks = [_ProgressCallback(recipe.target, params["n_estimators"], progress)] if progress else None
    model = xgb.XGBRegressor(**params, callbacks=callbacks)
    weight = None
    if recipe.tp_row_weight != 1.0:
        weight = np.where(np.asarray(data.cols["wl_tp"]) > 1, recipe.tp_row_weight, 1.0).astype(np.float32)
    model.fit(X, y, sample_weight=weight)
    if callbacks:
        model.set_params(callbacks=None)
    return FittedModel(recipe, model)
