"""k-shot calibration scoreboard (reports/calibration.md): each held-out group (LOGO: a GPU, LOSO: a source)
calibrated on k of its runs by the runtime's own :func:`wattgpu.calibration.fit`, scored on its other rows and
its other LLMs' rows; GPU_SHARE chosen per group on the split's other groups (:func:`nested`)."""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import pandas as pd

from wattgpu.calibration import GPU_SHARE, TTFT, Calibration, Runs, fit, gap_closed
from wattgpu.calibration_format import PARAMS
from wattgpu.specs import Catalog
from wattgpu.targets import TARGETS

from . import metrics
from .dataset import Dataset, build_dataset
from .evaluate import make_folds, oof_predictions
from .recipes import DEFAULT, Recipe

KS = (1, 3, 10)
KSHOT_SPLITS = {"logo": "gpu", "loso": "source"}
# targets at k = 3 on the scored set they apply to (issue 39: LOGO on the GPU's other LLMs)
TARGETS_PCT = {("logo", "power"): 10.0, ("logo", "itl"): 12.0, ("loso", "power"): 15.0, ("loso", "itl"): 15.0}
TARGET_SCORED = {"logo": "other_llms", "loso": "all"}
# Earlier designs of the correction, scored by this table on data/ while it was being written (k = 3,
# all scored rows, uncalibrated → calibrated MdAPE). Kept so the reader knows the current design was
# chosen after seeing these figures; the priors were not changed between the runs.
HISTORY = (  # earlier designs, scored on the same data and rule (k = 3); designs 1-3: git history of this file
    "Design 4 (issue 33): LLM level fitted, not applied; SHRINK 0.5 chosen on the test groups: LOGO power 15.4 → "
    "14.3 %, ITL 18.2 → 14.3 % (all other rows); A100 SXM4 40GB, B200 worse; TTFT not applied.",
    "Design 5a (issue 39): LLM share applied, GPU terms to all its LLMs, one nested GPU share (0.3–0.95), τ slope "
    "0.125, σ weight 3: LOGO other LLMs power 15.6 → 13.6 %, ITL 18.0 → 15.1 %; B200, RTX 5070 Ti worse.",
    "Design 5b: GPU share per quantity (0.1–0.95): power → 14.0 %, ITL → 13.7 %; B200, RTX 5070 Ti worse.",
    "Design 5c: 5b + τ slope 0.5, σ weight 1, TTFT slope, τ_llm from the LLMs' disagreement: LOGO other LLMs k=3 "
    "power 16.9 → 15.1 %, ITL 17.5 → 14.4 % (main 6cc1a8f); the +10 % fixture's power 2.1 % off at cap 128.",
    "Design 6a (round 3, reverted): 5c + a cap on the GPU level carried to unmeasured LLMs, nested with the share: "
    "power 13.9 %, ITL 14.0 %. Design 6b (analysis): the LLM's own offset from its residuals on other GPUs makes 5 "
    "of 8 groups worse (power). Design 6c (reverted): the carry scaled down by the runs' spread, nested: power "
    "13.8 %, ITL 14.0 %, LOSO ITL 37.8 → 34.5 %. reports/calibration_experiments.md.",
    "Design 7a (round 4, not shipped): power corrected as a ratio above idle: fixture met; LOGO other LLMs power "
    "k=3 16.8 % (logit 15.1 %), five groups worse.",
    "Design 8 (round 5, not shipped): only the measured LLM's own power share as a ratio above idle (τ 0.4): "
    "fixture within 0.7 %; LOGO other LLMs power k=1/3/10 17.7/15.2/15.1 % (5c: 17.4/15.1/13.2 %), 3 groups worse "
    "(4). 8b, the power slope as a ratio: 18.1/15.5/14.6 %.",
    "Design 5d (current): 5c with σ₀ weighed 0.3 pseudo-runs on power (ν_σ; ITL, TTFT 1): the table below; the +10 % "
    "fixture within 1.6 % at its caps, 3.4 % at other caps.",
    "Design 9 (round 5, not shipped): the GPU's level × c ∈ {0, 0.5, 1} (nested with the share) unless every run "
    "and the model's residuals on same-architecture training GPUs agree in sign with it: LOGO other LLMs k=3 power "
    "17.7 %, ITL 17.6 %, five power groups worse.",
)
RULE = ("the held-out group's LLM with the most single-GPU rows (ties: name), its rows in row_id order, the first "
        "k; scored on every other single-GPU row of the group (all) and on its other LLMs' rows (other LLMs)")
SCORED = ("all", "same_source", "other_llms")
# GPU_SHARE values tried; each held-out group is scored at the value the rule picks on the other groups
GPU_SHARE_GRID = (0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 0.95)
# Design 9 (scored, see reports/calibration_experiments.md): the factor c on the GPU's level where the runs do
# not all agree in sign with it, or the model's residuals on the GPU's neighbours disagree (1: no gate). A grid
# of more than one value is nested with the GPU share.
GATE_GRID: tuple[float, ...] = (1.0,)


def calibration_rows(records: pd.DataFrame, idx: np.ndarray, k: int) -> np.ndarray:
    """The k rows (indices into ``records``) a user of group ``idx`` would have measured: see :data:`RULE`."""
    rec = records.iloc[idx]
    counts = rec["llm"].value_counts()
    top = sorted(counts[counts == counts.max()].index.tolist())[0]
    mine = idx[(rec["llm"] == top).to_numpy()]
    order = np.argsort(records["row_id"].to_numpy(dtype=object)[mine].astype(str), kind="stable")
    return mine[order][:k]


def runs_of(ds: Dataset, target: str, pred: np.ndarray, rows: np.ndarray, y: np.ndarray | None = None) -> Runs:
    """The calibration rows as the runtime's :class:`Runs` (measured ``target`` only)."""
    triples = [ds.triples[i] for i in rows]
    y = ds.y_physical(target) if y is None else y
    return Runs(triples=triples, gpus=[t[0].name for t in triples], specs=[t[0] for t in triples],
                cols={k: v[rows] for k, v in ds.cols.items()}, predicted={target: pred[rows]},
                measured={target: y[rows]}, idle_measured=np.full(len(rows), np.nan))


def _mdape(y: np.ndarray, p: np.ndarray) -> float:
    return metrics.mdape(y, p) if len(y) else float("nan")


def _corrected(cal: Any, target: str, pred: np.ndarray, cols: dict[str, np.ndarray]) -> np.ndarray:
    """The runtime's correction of ``pred`` (rows ``cols``): Calibration.apply, or apply_ttft for TTFT."""
    if target == TTFT:
        numbers = {"ttft_s": pred.copy(), "itl_s": np.zeros(len(pred)), "e2e_latency_s": pred.copy()}
        cal.apply_ttft(cols, numbers)
        return np.asarray(numbers["ttft_s"], dtype=np.float64)
    return np.asarray(cal.apply({target: pred}, cols)[target], dtype=np.float64)


def neighbour_sign(ds: Dataset, pred: np.ndarray, y: np.ndarray, idx: np.ndarray) -> float:
    """The sign of the model's median log-ratio (truth / out-of-fold prediction) on the rows outside group
    ``idx`` whose GPU has the architecture of the group's first GPU (none such: the same source); 0 if none."""
    arch = np.array([t[0].architecture for t in ds.triples], dtype=object)
    source = ds.records["source"].to_numpy(dtype=object)
    out = np.ones(len(y), dtype=bool)
    out[idx] = False
    out &= np.isfinite(pred) & np.isfinite(y) & (pred > 0) & (y > 0)
    nb = out & (arch == arch[idx[0]])
    if not nb.any():
        nb = out & (source == source[idx[0]])
    return float(np.sign(np.median(np.log(y[nb] / pred[nb])))) if nb.any() else 0.0


def gate_level(cal: Calibration, target: str, gpu: str, llm: str, runs_gap: np.ndarray, nb_sign: float,
               c: float) -> bool:
    """Design 9: keep GPU ``gpu``'s level in full only where every run's gap (log truth / prediction) and the
    neighbours' residual sign agree with its sign; else multiply it by ``c`` and give what it loses to the
    measured LLM's own share (its runs keep their fit). True when it gated."""
    f = cal.targets.get(target)
    level = PARAMS[target][0]
    p = None if f is None else f.gpu.get(gpu)
    if c >= 1.0 or f is None or not p or level not in p or p[level] == 0.0:
        return False
    sign = float(np.sign(p[level]))
    if bool(np.all(np.sign(runs_gap) == sign)) and nb_sign == sign:
        return False
    removed = (1.0 - c) * p[level]
    p[level] *= c
    own = f.llm.get(gpu, {}).get(llm)
    if own is not None:
        own[level] = own.get(level, 0.0) + removed
    return True


def group_scores(ds: Dataset, target: str, pred: np.ndarray, idx: np.ndarray, ks: tuple[int, ...],
                 gpu_share: float | None = None, other_gpus: bool = False, y: np.ndarray | None = None,
                 gate: float = 1.0, nb_sign: float = 0.0) -> dict[str, Any]:
    """Before/after MdAPE on group ``idx``'s rows outside each k's calibration rows: all of them …"""
    y = ds.y_physical(target) if y is None else y
    source = ds.records["source"].to_numpy(dtype=object)
    llm = ds.records["llm"].to_numpy(dtype=object)
    gpu_of = np.array([t[0].name for t in ds.triples], dtype=object)
    lnb = np.log(np.maximum(np.asarray(ds.cols["eff_batch"], dtype=np.float64), 1.0))
    out: dict[str, Any] = {"rows": int(len(idx))}
    for k in ks:
        cal_rows = calibration_rows(ds.records, idx, k)
        rest = np.setdiff1d(idx, cal_rows)
        runs = runs_of(ds, target, pred, cal_rows, y)
        cal = fit(runs, gpu_share=gpu_share, apply_to_other_gpus=other_gpus)
        gpu_name = str(ds.triples[cal_rows[0]][0].name)
        with np.errstate(all="ignore"):
            gap = np.log(y[cal_rows] / pred[cal_rows])
        gated = gate_level(cal, target, gpu_name, str(llm[cal_rows[0]]), gap, nb_sign, gate)
        fixed = _corrected(cal, target, pred[rest], {c: v[rest] for c, v in ds.cols.items()})
        f = cal.targets.get(target)
        closed = gap_closed(runs, cal).get(target, np.array([]))
        entry: dict[str, Any] = {"k_used": int(len(cal_rows)), "llm": str(llm[cal_rows[0]]),
                                 "source": str(source[cal_rows[0]]), "runs_fitted": 0 if f is None else f.runs,
                                 "parameters": None if f is None else dict(f.gpu.get(str(ds.triples[cal_rows[0]][0].name), {})),
                                 "loro": None if f is None or not f.loro else next(iter(f.loro.values())).note,
                                 "gap_closed": [float(c) for c in closed], "gated": gated}
        for name, keep in (("all", np.ones(len(rest), dtype=bool)), ("same_source", source[rest] == source[cal_rows[0]]),
                           ("other_llms", llm[rest] != llm[cal_rows[0]])):
            yk, pk = y[rest][keep], pred[rest][keep]
            oracles = oracle_fits(yk, pk, lnb[rest][keep], {"source": (gpu_of + "|" + source)[rest][keep],
                                                            "llm": (gpu_of + "|" + llm)[rest][keep]})
            entry[name] = {"rest": int(keep.sum()), "mdape_before": _mdape(yk, pk),
                           "mdape_after": _mdape(yk, fixed[keep]), "y": yk.tolist(),
                           "before": pk.tolist(), "after": fixed[keep].tolist(),
                           **{key: v.tolist() for key, v in oracles.items()}}
        out[str(k)] = entry
    return out


# Ceilings, fitted in hindsight on the scored rows themselves (oracles, not methods): what the best correction
# of each form would reach. "oracle": one factor per group; "oracle_slope": per group a factor times batch^slope
# (median regression of the log-ratio on ln batch); "oracle_source": one factor per (GPU, source);
# "oracle_llm": one factor per (GPU, LLM) — what is left after it is not a level of any kind.
ORACLES = {"oracle": "oracle level", "oracle_slope": "oracle level + slope", "oracle_source": "oracle (GPU, source)",
           "oracle_llm": "oracle (GPU, LLM)"}


def _median_line(x: np.ndarray, r: np.ndarray, iters: int = 50) -> tuple[float, float]:
    """(a, b) minimising Σ|r − a − b·x| (iteratively reweighted least squares); b = 0 when x does not vary."""
    if len(r) < 3 or np.ptp(x) < 1e-9:
        return float(np.median(r)) if len(r) else 0.0, 0.0
    X = np.column_stack([np.ones_like(x), x])
    w = np.ones_like(r)
    coef = np.zeros(2)
    for _ in range(iters):
        sw = np.sqrt(w)
        coef = np.linalg.lstsq(X * sw[:, None], r * sw, rcond=None)[0]
        w = 1.0 / np.maximum(np.abs(r - X @ coef), 1e-6)
    return float(coef[0]), float(coef[1])


def oracle_fits(y: np.ndarray, p: np.ndarray, lnb: np.ndarray, pair: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The scored rows' predictions corrected by each :data:`ORACLES` form, fitted on those rows' truth
    (``pair``: "source" / "llm" → the (GPU, that) label of each row)."""
    out = {key: p.copy() for key in ORACLES}
    if not len(y):
        return out
    r = np.log(y / p)
    out["oracle"] = p * np.exp(np.median(r))
    a, b = _median_line(lnb, r)
    out["oracle_slope"] = p * np.exp(a + b * lnb)
    for kind, labels in pair.items():
        for lab in set(labels.tolist()):
            m = labels == lab
            out[f"oracle_{kind}"][m] = p[m] * np.exp(np.median(r[m]))
    return out


def _worse(cell: dict[str, Any]) -> bool:
    return cell["rest"] > 0 and cell["mdape_after"] > cell["mdape_before"] + 1e-9


def selection_score(groups: list[dict[str, Any]], ks: tuple[int, ...]) -> tuple[int, float]:
    """The rule that picks GPU_SHARE from scored groups (each item: target → group → entry): the fewest …"""
    worse, logs = 0, []
    for by_target in groups:
        for g in (e for by_group in by_target.values() for e in by_group.values()):
            for k in ks:
                c = g[str(k)]["other_llms"]
                if c["rest"] > 0 and c["mdape_before"] > 0 and c["mdape_after"] > 0:
                    worse += _worse(c)
                    logs.append(float(np.log(c["mdape_after"] / c["mdape_before"])))
    return worse, float(np.mean(logs)) if logs else 0.0


def nested(per_share: dict[float, dict[str, dict[str, Any]]], ks: tuple[int, ...]
           ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float]]]:
    """Per quantity and held-out group, its scores at the GPU share the rule picks on the split's other …"""
    shares = sorted(per_share)
    out: dict[str, dict[str, Any]] = {}
    used: dict[str, dict[str, float]] = {}
    for t in per_share[shares[0]]:
        out[t], used[t] = {}, {}
        for g in sorted(per_share[shares[0]][t]):
            def score(sh: float) -> tuple[int, float]:
                return selection_score([{t: {n: e for n, e in per_share[sh][t].items() if n != g}}], ks)

            pick = min(shares, key=lambda sh: (score(sh), sh))
            used[t][g] = pick
            out[t][g] = per_share[pick][t][g]
    return out, used


def kshot(records: pd.DataFrame, catalog: Catalog, recipe: Recipe = DEFAULT, ks: tuple[int, ...] = KS, n_jobs: int = 2,
          preds: dict[str, dict[str, np.ndarray]] | None = None,
          log: Callable[[str], None] | None = None, share_grid: tuple[float, ...] = GPU_SHARE_GRID,
          gate_grid: tuple[float, ...] | None = None) -> dict[str, Any]:
    """The k-shot scoreboard (JSON-ready); ``preds[target][split]``: out-of-fold predictions to reuse, …"""
    log = log or (lambda s: None)
    gate_grid = GATE_GRID if gate_grid is None else gate_grid
    t0 = time.perf_counter()
    out: dict[str, Any] = {"rule": RULE, "ks": list(ks), "targets_pct": {f"{s} {t}": v for (s, t), v in TARGETS_PCT.items()},
                           "target_scored": TARGET_SCORED,
                           "predictions": "reused from the full evaluate (nested selection)" if preds else
                           f"out-of-fold, {recipe.name if hasattr(recipe, 'name') else 'default'} recipe's first "
                           "candidate per target (no nested selection)", "gpu_share": GPU_SHARE}
    data: dict[str, tuple[Dataset, dict[str, np.ndarray], np.ndarray]] = {}
    for target in TARGETS:
        full = build_dataset(records, catalog, target)
        one = np.asarray(full.cols["wl_tp"]) == 1
        ds = full.subset(one)
        by_split = {}
        for split in KSHOT_SPLITS:
            if preds is not None:
                by_split[split] = preds[target][split]
            else:
                log(f"k-shot {target} {split}: fitting out-of-fold models")
                by_split[split] = oof_predictions(recipe.model(target), full, make_folds(full.records, split),
                                                  n_jobs=n_jobs)[one]
        data[target] = (ds, by_split, ds.y_physical(target))
    ttft = ttft_data(records, catalog)
    if ttft is not None:
        data[TTFT] = ttft
    out["fit_s"] = round(time.perf_counter() - t0, 1)

    grid: dict[str, Any] = {}
    per_split: dict[str, dict[float, dict[str, dict[str, Any]]]] = {s: {} for s in KSHOT_SPLITS}
    signs: dict[tuple[str, str, str], float] = {}
    settings = [(sh, c) if len(gate_grid) > 1 else sh
                for sh in sorted(set(share_grid) | set(GPU_SHARE.values())) for c in sorted(gate_grid)]
    for setting in settings:
        share, gate = setting if isinstance(setting, tuple) else (setting, 1.0)
        log(f"k-shot: scoring GPU share {_setting(setting)}")
        for split, col in KSHOT_SPLITS.items():
            per_split[split][setting] = {}
            for target, (ds, by_split, y) in data.items():
                pred = by_split[split]
                groups = {}
                for g in sorted(ds.records[col].unique()):
                    idx = np.flatnonzero((ds.records[col] == g).to_numpy() & np.isfinite(pred) & np.isfinite(y))
                    if len(idx) >= 2:
                        if gate < 1.0 and (split, target, str(g)) not in signs:
                            signs[(split, target, str(g))] = neighbour_sign(ds, pred, y, idx)
                        groups[str(g)] = group_scores(ds, target, pred, idx, ks, share, other_gpus=split == "loso", y=y,
                                                      gate=gate, nb_sign=signs.get((split, target, str(g)), 0.0))
                per_split[split][setting][target] = groups
        grid[_setting(setting)] = {f"{split} {target} k={k}": {
            "mdape_after": summarize(per_split[split][setting][target], ks)[TARGET_SCORED[split]][str(k)]["mdape_after"],
            "groups_worse": len(summarize(per_split[split][setting][target], ks)[TARGET_SCORED[split]][str(k)]["groups_worse"])}
            for target in data for split in KSHOT_SPLITS for k in ks}
        grid[_setting(setting)]["selection"] = {split: list(selection_score([per_split[split][setting]], ks))
                                           for split in KSHOT_SPLITS}
    out["share_grid"] = grid
    out["gpu_share_rule_pick"] = {}  # the runtime's GPU_SHARE: the rule on all LOGO groups, per quantity
    for target in data:
        logo_all = {sh: selection_score([{target: per_split["logo"][sh][target]}], ks) for sh in per_split["logo"]}
        out["gpu_share_rule_pick"][target] = min(logo_all, key=lambda sh: (logo_all[sh], sh))
    out["share_used"] = {}
    for split in KSHOT_SPLITS:
        chosen, used = nested(per_split[split], ks)
        out["share_used"][split] = used
        for target in data:
            out.setdefault(target, {})[split] = {"groups": chosen[target], "summary": summarize(chosen[target], ks)}
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    return _strip(out)


def ttft_data(records: pd.DataFrame, catalog: Catalog) -> tuple[Dataset, dict[str, np.ndarray], np.ndarray] | None:
    """TTFT rows: the runtime's TTFT (nothing in it fitted on TTFT, so one prediction serves both splits)."""
    from wattgpu.errors import WattGPUError
    from wattgpu.predictor import Predictor
    from wattgpu.targets import ITL

    from .ttft import TTFT_COLUMN

    ttft = pd.to_numeric(records.get(TTFT_COLUMN, pd.Series(np.nan, index=records.index)), errors="coerce")
    sub = records[(ttft > 0).to_numpy()]
    if sub.empty:
        return None
    ds = build_dataset(sub, catalog, ITL)
    ds = ds.subset(np.asarray(ds.cols["wl_tp"]) == 1)
    res = Predictor().predict_specs_safe(ds.triples)
    pred = np.array([np.nan if isinstance(r, WattGPUError) or r.ttft_s is None else r.ttft_s for r in res])
    y = pd.to_numeric(ds.records[TTFT_COLUMN], errors="coerce").to_numpy(dtype=np.float64)
    return ds, {split: pred for split in KSHOT_SPLITS}, y


def summarize(groups: dict[str, Any], ks: tuple[int, ...]) -> dict[str, Any]:
    """Per scored set and k: pooled MdAPE over every scored row, the median of the groups' MdAPEs, the …"""
    res: dict[str, Any] = {}
    for scored in SCORED:
        res[scored] = {}
        for k in ks:
            parts = {name: g[str(k)][scored] for name, g in groups.items() if g[str(k)][scored]["rest"] > 0}
            cat = {key: np.concatenate([p[key] for p in parts.values()]) if parts else np.array([])
                   for key in ("y", "before", "after", *ORACLES)}
            med = {key: float(np.median([p[f"mdape_{key}"] for p in parts.values()])) if parts else float("nan")
                   for key in ("before", "after")}
            closed = [c for g in groups.values() for c in g[str(k)].get("gap_closed", [])]
            res[scored][str(k)] = {
                "groups": len(parts), "rows": int(len(cat["y"])), "mdape_before": _mdape(cat["y"], cat["before"]),
                "mdape_after": _mdape(cat["y"], cat["after"]), "mdape_oracle_level": _mdape(cat["y"], cat["oracle"]),
                "mdape_oracle_slope": _mdape(cat["y"], cat["oracle_slope"]),
                "mdape_oracle_source": _mdape(cat["y"], cat["oracle_source"]),
                "mdape_oracle_llm": _mdape(cat["y"], cat["oracle_llm"]),
                "median_group_before": med["before"], "median_group_after": med["after"],
                "gap_closed_median": float(np.median(closed)) if closed else float("nan"),
                "groups_worse": [n for n, p in parts.items() if _worse(p)]}
    return res


def _strip(out: dict[str, Any]) -> dict[str, Any]:
    """Drop the per-row arrays (used by the summary only) and round for a stable JSON."""
    for target in (*TARGETS, TTFT):
        for split in KSHOT_SPLITS:
            for g in out.get(target, {}).get(split, {}).get("groups", {}).values():
                for v in g.values():
                    if isinstance(v, dict):
                        for scored in SCORED:
                            for key in ("y", "before", "after", *ORACLES):
                                v[scored].pop(key, None)
    return _round(out)


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.4g}") if np.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


def markdown(r: dict[str, Any]) -> str:
    """reports/calibration.md."""
    quantities = [t for t in (*TARGETS, TTFT) if t in r]
    lines = ["# Calibration on a few runs (k-shot)", "",
             "Each held-out group plays a user (formula: `docs/calibration.md`): its rows never reach training; its "
             f"k runs: {r['rule']}.", "",
             f"Predictions: {r['predictions']}; TTFT: the runtime's serving math. Scored: **all** other single-GPU rows "
             "of the group; **same source** as the runs; **other LLMs** than the runs'. MdAPE pooled; 'groups worse': "
             "MdAPE rose. **Gap closed**: per calibration run 1 − |log(y/calibrated)| / |log(y/uncalibrated)|, median. "
             "**Oracle level**: each group times the one factor fitting its own scored rows best — a ceiling for any "
             "one-level correction, not a method. Beside it, the ceilings of richer corrections fitted the same way: "
             "**level + slope** (a factor × batch^slope, median regression on ln batch), one factor per **(GPU, "
             "source)**, one per **(GPU, LLM)**. When every per-GPU ceiling is above a target, no per-GPU correction "
             "carried from one LLM's runs can meet it: what is left is the LLM-on-this-GPU error.", "",
             f"Runtime (`wattgpu-train evaluate --kshot-only`): {r['runtime_s']} s.", "", "Design history:", ""]
    lines += [f"- {h}" for h in HISTORY] + [""]
    lines += ["LOGO: runs calibrate the held-out GPU only. LOSO: a new stack; pooled level terms reach its other GPUs "
              "(`--apply-to-other-gpus`).", "",
              "**GPU share, chosen inside the training folds**: each group is scored at the grid value with the fewest "
              "(group, k) cells made worse on other LLMs' rows among the split's OTHER groups (ties: mean log ratio "
              "after/before), per quantity. Runtime `GPU_SHARE`: "
              + ", ".join(f"{t} {v:g}" for t, v in r["gpu_share"].items()) + "; the rule on all LOGO groups: "
              + ", ".join(f"{t} {_setting(v)}" for t, v in r["gpu_share_rule_pick"].items()) + ".", "",
              "| GPU share | LOGO cells worse | LOSO cells worse | LOGO power k=3 (other LLMs) | LOGO ITL k=3 (other LLMs) | "
              "LOSO power k=3 | LOSO ITL k=3 |", "|---|---|---|---|---|---|---|"]
    for sh, cells in r["share_grid"].items():
        k3 = [cells[f"{sp} {t} k=3"]["mdape_after"] for sp, t in (("logo", "power"), ("logo", "itl"),
                                                                   ("loso", "power"), ("loso", "itl"))]
        lines.append(f"| {sh} | {cells['selection']['logo'][0]} | {cells['selection']['loso'][0]} | "
                     + " | ".join(_pct(v) for v in k3) + " |")
    lines += ["", "Share used per held-out group (nested):", ""]
    for sp, by_t in r["share_used"].items():
        for t, used in by_t.items():
            lines.append(f"- {sp.upper()} {t}: " + ", ".join(f"{g} {_setting(v)}" for g, v in used.items()))
    lines += [""]
    lines += ["| split | quantity | scored | k | groups | rows | MdAPE uncalibrated | MdAPE calibrated | target (k=3) | met | "
              "oracle level | oracle level + slope | oracle (GPU, source) | oracle (GPU, LLM) | median of groups (before → after) | "
              "runs' gap closed (median) | groups worse |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for split in KSHOT_SPLITS:
        for target in quantities:
            for scored in (SCORED if split == "logo" else ("all",)):
                for k in r["ks"]:
                    s = r[target][split]["summary"][scored][str(k)]
                    goal = (r["targets_pct"].get(f"{split} {target}")
                            if k == 3 and scored == r["target_scored"][split] else None)
                    met = "–" if goal is None or s["mdape_after"] is None else (
                        "yes" if s["mdape_after"] <= goal else "**no**")
                    worse = "–" if not s["groups"] else (", ".join(s["groups_worse"]) or "none")
                    gc = s.get("gap_closed_median")
                    lines.append(f"| {split.upper()} | {target} | {scored.replace('_', ' ')} | {k} | {s['groups']} | "
                                 f"{s['rows']} | {_pct(s['mdape_before'])} | {_pct(s['mdape_after'])} | "
                                 f"{'–' if goal is None else f'≤ {goal:g} %'} | {met} | {_pct(s.get('mdape_oracle_level'))} | "
                                 f"{_pct(s.get('mdape_oracle_slope'))} | {_pct(s.get('mdape_oracle_source'))} | "
                                 f"{_pct(s.get('mdape_oracle_llm'))} | "
                                 f"{_pct(s['median_group_before'])} → {_pct(s['median_group_after'])} | "
                                 f"{'–' if gc is None else f'{gc * 100:.0f} %'} | {worse} |")
    for split in KSHOT_SPLITS:
        for target in quantities:
            lines += ["", f"### {target}, {split.upper()}: per held-out group (MdAPE before → after; other LLMs' rows "
                          "in brackets; the runs' gap closed, each run)", "",
                      "| group | rows | calibration LLM (source) | " + " | ".join(f"k={k}" for k in r["ks"]) + " |",
                      "|---|---|---|" + "---|" * len(r["ks"])]
            for name, g in r[target][split]["groups"].items():
                cells = []
                for k in r["ks"]:
                    v = g[str(k)]
                    a, oth = v["all"], v["other_llms"]
                    cell = ("no rows left" if not a["rest"] else
                            f"{_pct(a['mdape_before'])} → {_pct(a['mdape_after'])} ({v['k_used']} runs, {a['rest']} scored)")
                    if oth["rest"] and oth["rest"] != a["rest"]:
                        cell += f" [{_pct(oth['mdape_before'])} → {_pct(oth['mdape_after'])}, {oth['rest']}]"
                    closed = [c for c in v.get("gap_closed", []) if c is not None]
                    if closed:
                        cell += " gap closed " + "/".join(f"{c * 100:.0f}" for c in closed) + " %"
                    cells.append(cell)
                lines.append(f"| {name} | {g['rows']} | {g['1']['llm']} ({g['1']['source']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_lines(r: dict[str, Any]) -> list[str]:
    """What `wattgpu-train evaluate --kshot-only` prints: per split and quantity, on the scored set its …"""
    out = []
    for split in KSHOT_SPLITS:
        scored = r["target_scored"][split]
        for target in (t for t in (*TARGETS, TTFT) if t in r):
            summ = r[target][split]["summary"][scored]
            row = ", ".join(f"k={k} {_pct(v['mdape_before'])} → {_pct(v['mdape_after'])}" for k, v in summ.items())
            k3 = summ.get("3", {})
            goal = r["targets_pct"].get(f"{split} {target}")
            met = "" if goal is None or k3.get("mdape_after") is None else (
                f"; target k=3 ≤ {goal:g} %: {'met' if k3['mdape_after'] <= goal else 'MISSED'}")
            gc = k3.get("gap_closed_median")
            out.append(f"k-shot {split.upper()} {target} ({scored.replace('_', ' ')}) MdAPE uncalibrated → calibrated: "
                       f"{row}{met}; ceilings k=3: oracle level {_pct(k3.get('mdape_oracle_level'))}, level + slope "
                       f"{_pct(k3.get('mdape_oracle_slope'))}, (GPU, source) {_pct(k3.get('mdape_oracle_source'))}, "
                       f"(GPU, LLM) {_pct(k3.get('mdape_oracle_llm'))}; runs' gap closed k=3 "
                       f"{'–' if gc is None else f'{gc * 100:.0f} %'}; groups worse k=3: "
                       f"{', '.join(k3.get('groups_worse', [])) or 'none'}")
    return out


def _setting(s: Any) -> str:
    """A grid setting as text: the GPU share, or "share/gate" when design 9's gate is nested with it."""
    return f"{s[0]:g}/{s[1]:g}" if isinstance(s, (tuple, list)) else f"{s:g}"


def _pct(x: Any) -> str:
    return "–" if x is None else f"{x:.1f} %"
