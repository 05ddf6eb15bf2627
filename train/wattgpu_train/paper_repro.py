"""Reproduce the WattGPU paper's evaluation on its own dataset (a user-supplied Watt Counts file).

Targets as the paper defines them: power = mean board power (learned as power / TDP by both
recipes); ITL = the notebook's ``paper_itl`` (offline: whole-run seconds per generated token;
server: mean per-request decode ITL). Splits as the paper: grouped 5-fold on (model, GPU),
leave-one-GPU-out, leave-one-LLM-out; scores split into offline and server rows like Tables 2–3.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from wattgpu.specs import Catalog

from . import baselines
from .dataset import build_dataset
from .evaluate import (CV_FOLDS, PAPER_PUBLISHED, QUICK_CV_FOLDS, TARGETS, _learned_methods, _round, make_folds,
                       nested_oof, oof_predictions, score)
from .recipes import Recipe

SPLITS = ("cv", "logo", "lolo")  # the paper's splits (one source: no leave-one-source-out)
SCENARIO_GROUPS = {"offline": ("offline",), "server": ("server_low", "server_high")}


def model_gpu_key(records: pd.DataFrame) -> np.ndarray:
    """The paper's CV group: a (model, GPU) configuration never straddles train and test."""
    return (records["llm"] + "|" + records["gpu"]).to_numpy(dtype=object)


def scenario_key(records: pd.DataFrame) -> np.ndarray:
    return records["scenario"].astype(str).to_numpy(dtype=object)


def reproduce_paper(records: pd.DataFrame, catalog: Catalog, quick: bool = False, n_jobs: int = 2,
                    recipes: dict[str, Recipe] | None = None,
                    log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Paper recipe and default on Watt Counts records (``load_watt_counts_for_catalog``)."""
    log = log or (lambda s: None)
    recs = records.copy()
    recs["itl_s"] = recs["x_paper_itl"]  # the paper's per-scenario ITL target
    methods = _learned_methods(quick, recipes)
    cv_folds = QUICK_CV_FOLDS if quick else CV_FOLDS
    out: dict[str, Any] = {}
    for target in TARGETS:
        ds = build_dataset(recs, catalog, target)
        y = ds.y_physical(target)
        if target == "power":
            base = {"tdp": baselines.tdp_power(ds), "ls_tdp": baselines.ls_tdp_power(ds)}
        else:
            base = {"roofline": baselines.paper_roofline_s_per_token(ds)}
        scen = ds.records["scenario"].astype(str)
        res: dict[str, Any] = {}
        for split in SPLITS:
            folds = make_folds(ds.records, split, cv_folds, group_key=model_gpu_key)
            log(f"reproduce-paper {target} {split}: {len(folds)} folds")
            preds = {name: (nested_oof(r, target, ds, folds, split, n_jobs=n_jobs, group_key=model_gpu_key)[0]
                            if len(r.candidates(target)) > 1 else
                            oof_predictions(r.model(target), ds, folds, n_jobs=n_jobs))
                     for name, r in methods.items()}
            preds.update(base)
            res[split] = {}
            for group, members in SCENARIO_GROUPS.items():
                m = scen.isin(members).to_numpy()
                if not m.any():
                    continue
                sub = ds.records.loc[m].reset_index(drop=True)
                res[split][group] = {name: score(y[m], p[m], sub, wkey=scenario_key) for name, p in preds.items()}
        res["rows"] = {g: int(scen.isin(mm).sum()) for g, mm in SCENARIO_GROUPS.items()}
        out[target] = res
    out["data"] = {"rows": int(len(recs)), "gpus": sorted(recs["gpu"].unique().tolist()),
                   "llms": int(recs["llm"].nunique()),
                   "scenarios": {k: int(v) for k, v in recs["scenario"].value_counts().sort_index().items()}}
    out["protocol"] = {"quick": quick, "cv_folds": cv_folds, "cv_group": "(model, GPU)",
                       "itl_target": "x_paper_itl (offline: s per generated token of the whole run; server: mean "
                                     "per-request (e2e - TTFT)/(tokens - 1))",
                       "roofline": "2·params_B / bandwidth_GB_s ÷ batch (256 offline, 1 server)"}
    out["paper_published"] = PAPER_PUBLISHED
    return _round(out)
