"""k-shot calibration scoreboard: how much a user's first k runs fix the held-out error.

For each held-out group of a split (a GPU under LOGO, a source under LOSO) the out-of-fold
predictions come from models that never saw the group. The user's runs are simulated by a fixed
rule, blind to the errors: the group's LLM with the most single-GPU rows (ties: name), its rows in
``row_id`` order, the first k (all of them when it has fewer). :func:`wattgpu.calibration.fit` — the
runtime's own code — fits the correction on those k rows, :meth:`Calibration.apply` corrects the
group's other rows, and both are scored against the measurements (MdAPE, before vs after).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import pandas as pd

from wattgpu.calibration import SHRINK, Runs, fit
from wattgpu.specs import Catalog
from wattgpu.targets import TARGETS

from . import metrics
from .dataset import Dataset, build_dataset
from .evaluate import make_folds, oof_predictions
from .recipes import DEFAULT, Recipe

KS = (1, 3, 10)
KSHOT_SPLITS = {"logo": "gpu", "loso": "source"}
TARGETS_PCT = {("logo", "power"): 8.0, ("logo", "itl"): 10.0, ("loso", "power"): 15.0, ("loso", "itl"): 15.0}
# Earlier designs of the correction, scored by this table on data/ while it was being written (k = 3,
# all scored rows, uncalibrated → calibrated MdAPE). Kept so the reader knows the current design was
# chosen after seeing these figures; the priors were not changed between the runs.
HISTORY = (
    "Design 1: stack + GPU levels, equal weight per run: LOGO power 19.2 → 17.0 %, ITL 17.1 → 20.4 %; "
    "LOSO power 37.6 → 18.6 %, ITL 42.1 → 25.8 %.",
    "Design 2: + an LLM level that is fitted but not applied (runs of one LLM cannot pass its own error off as "
    "the GPU's): LOGO power → 14.8 %, ITL → 19.4 %; LOSO power → 20.8 %, ITL → 25.5 %.",
    "Design 3: + delta-method weights: LOGO power 17.9 → 16.4 %, ITL 18.5 → 14.8 %; LOSO power 47.8 → 23.3 %, "
    "ITL 45.7 → 25.8 %.",
    "Design 4 (current, issue 33): per GPU, two physical parameters per quantity, MAP with the LLM level, kept by "
    "leave-one-run-out; without the LLM level (shrink 1): LOGO power 17.9 → 13.5 %, ITL 18.5 → 18.2 %; LOSO "
    "(measured GPUs only) power 47.8 → 29.6 %, ITL 45.7 → 28.3 %. With it: the table above.",
)
RULE = ("the held-out group's LLM with the most single-GPU rows (ties: name), its rows in row_id order, the first "
        "k; scored on every other single-GPU row of the group")


def calibration_rows(records: pd.DataFrame, idx: np.ndarray, k: int) -> np.ndarray:
    """The k rows (indices into ``records``) a user of group ``idx`` would have measured: see :data:`RULE`."""
    rec = records.iloc[idx]
    counts = rec["llm"].value_counts()
    top = sorted(counts[counts == counts.max()].index.tolist())[0]
    mine = idx[(rec["llm"] == top).to_numpy()]
    order = np.argsort(records["row_id"].to_numpy(dtype=object)[mine].astype(str), kind="stable")
    return mine[order][:k]


def runs_of(ds: Dataset, target: str, pred: np.ndarray, rows: np.ndarray) -> Runs:
    """The calibration rows as the runtime's :class:`Runs` (measured ``target`` only)."""
    triples = [ds.triples[i] for i in rows]
    return Runs(triples=triples, gpus=[t[0].name for t in triples], specs=[t[0] for t in triples],
                cols={k: v[rows] for k, v in ds.cols.items()}, predicted={target: pred[rows]},
                measured={target: ds.y_physical(target)[rows]}, idle_measured=np.full(len(rows), np.nan))


def _mdape(y: np.ndarray, p: np.ndarray) -> float:
    return metrics.mdape(y, p) if len(y) else float("nan")


def group_scores(ds: Dataset, target: str, pred: np.ndarray, idx: np.ndarray, ks: tuple[int, ...],
                 shrink: float = SHRINK, other_gpus: bool = False) -> dict[str, Any]:
    """Before/after MdAPE on group ``idx``'s rows outside each k's calibration rows: all of them
    (``all``), and those of the calibration runs' source (``same_source``: the user's own stack)."""
    y = ds.y_physical(target)
    source = ds.records["source"].to_numpy(dtype=object)
    out: dict[str, Any] = {"rows": int(len(idx))}
    for k in ks:
        cal_rows = calibration_rows(ds.records, idx, k)
        rest = np.setdiff1d(idx, cal_rows)
        cal = fit(runs_of(ds, target, pred, cal_rows), shrink=shrink, apply_to_other_gpus=other_gpus)
        fixed = np.asarray(cal.apply({target: pred[rest]}, {c: v[rest] for c, v in ds.cols.items()})[target])
        f = cal.targets.get(target)
        entry: dict[str, Any] = {"k_used": int(len(cal_rows)), "llm": str(ds.records["llm"].iloc[cal_rows[0]]),
                                 "source": str(source[cal_rows[0]]), "runs_fitted": 0 if f is None else f.runs,
                                 "parameters": None if f is None else dict(f.gpu.get(str(ds.triples[cal_rows[0]][0].name), {})),
                                 "loro": None if f is None or not f.loro else
                                 next(iter(f.loro.values())).note}
        for name, keep in (("all", np.ones(len(rest), dtype=bool)), ("same_source", source[rest] == source[cal_rows[0]])):
            entry[name] = {"rest": int(keep.sum()), "mdape_before": _mdape(y[rest][keep], pred[rest][keep]),
                           "mdape_after": _mdape(y[rest][keep], fixed[keep]), "y": y[rest][keep].tolist(),
                           "before": pred[rest][keep].tolist(), "after": fixed[keep].tolist()}
        out[str(k)] = entry
    return out


# Prior scale multipliers tried; the runtime's SHRINK is the one with the fewest held-out groups made worse
# (both splits, both targets, every k), ties by the mean pooled MdAPE: see the grid in reports/calibration.md.
SHRINK_GRID = (0.25, 0.5, 0.7, 1.0, 1.4)


def kshot(records: pd.DataFrame, catalog: Catalog, recipe: Recipe = DEFAULT, ks: tuple[int, ...] = KS, n_jobs: int = 2,
          preds: dict[str, dict[str, np.ndarray]] | None = None,
          log: Callable[[str], None] | None = None, shrink_grid: tuple[float, ...] = SHRINK_GRID) -> dict[str, Any]:
    """The k-shot scoreboard (JSON-ready); ``preds[target][split]``: out-of-fold predictions to reuse, else
    fitted here. Tables at the runtime's ``SHRINK``; every ``shrink_grid`` value scored too."""
    log = log or (lambda s: None)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"rule": RULE, "ks": list(ks), "targets_pct": {f"{s} {t}": v for (s, t), v in TARGETS_PCT.items()},
                           "predictions": "reused from the full evaluate (nested selection)" if preds else
                           f"out-of-fold, {recipe.name if hasattr(recipe, 'name') else 'default'} recipe's first "
                           "candidate per target (no nested selection)", "shrink": SHRINK}
    data: dict[str, tuple[Dataset, dict[str, np.ndarray]]] = {}
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
        data[target] = (ds, by_split)
    out["fit_s"] = round(time.perf_counter() - t0, 1)

    def tables(shrink: float) -> dict[str, Any]:
        res: dict[str, Any] = {}
        for target, (ds, by_split) in data.items():
            res[target] = {}
            for split, col in KSHOT_SPLITS.items():
                pred = by_split[split]
                groups = {}
                for g in sorted(ds.records[col].unique()):
                    idx = np.flatnonzero((ds.records[col] == g).to_numpy() & np.isfinite(pred))
                    if len(idx) >= 2:
                        groups[g] = group_scores(ds, target, pred, idx, ks, shrink, other_gpus=split == "loso")
                res[target][split] = {"groups": groups, "summary": summarize(groups, ks)}
        return res

    grid = {}
    for shrink in sorted(set(shrink_grid) | {SHRINK}):
        log(f"k-shot: scoring shrink {shrink:g}")
        t = tables(shrink)
        if shrink == SHRINK:
            out.update(t)
        grid[f"{shrink:g}"] = {f"{split} {target} k={k}": {
            "mdape_after": t[target][split]["summary"]["all"][str(k)]["mdape_after"],
            "groups_worse": len(t[target][split]["summary"]["all"][str(k)]["groups_worse"])}
            for target in TARGETS for split in KSHOT_SPLITS for k in ks}
    out["shrink_grid"] = grid
    log("k-shot: TTFT")
    out["ttft"] = ttft_kshot(records, catalog, ks)
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    return _strip(out)


def ttft_kshot(records: pd.DataFrame, catalog: Catalog, ks: tuple[int, ...]) -> dict[str, Any]:
    """TTFT k-shot: the runtime TTFT (nothing in it fitted on TTFT) calibrated by wattgpu.calibration.fit_ttft."""
    from wattgpu.calibration import TTFT, fit_ttft
    from wattgpu.errors import WattGPUError
    from wattgpu.predictor import Predictor
    from wattgpu.targets import ITL

    from .ttft import TTFT_COLUMN

    ttft = pd.to_numeric(records.get(TTFT_COLUMN, pd.Series(np.nan, index=records.index)), errors="coerce")
    sub = records[(ttft > 0).to_numpy()]
    if sub.empty:
        return {"rows": 0}
    ds = build_dataset(sub, catalog, ITL)
    one = np.asarray(ds.cols["wl_tp"]) == 1
    ds = ds.subset(one)
    res = Predictor().predict_specs_safe(ds.triples)
    pred = np.array([np.nan if isinstance(r, WattGPUError) or r.ttft_s is None else r.ttft_s for r in res])
    y = pd.to_numeric(ds.records[TTFT_COLUMN], errors="coerce").to_numpy(dtype=np.float64)
    out: dict[str, Any] = {"rows": int(np.isfinite(pred).sum())}
    for split, col in KSHOT_SPLITS.items():
        groups: dict[str, Any] = {}
        for g in sorted(ds.records[col].unique()):
            idx = np.flatnonzero((ds.records[col] == g).to_numpy() & np.isfinite(pred) & np.isfinite(y))
            if len(idx) < 2:
                continue
            entry: dict[str, Any] = {"rows": int(len(idx))}
            for k in ks:
                cal_rows = calibration_rows(ds.records, idx, k)
                rest = np.setdiff1d(idx, cal_rows)
                triples = [ds.triples[i] for i in cal_rows]
                # the user's stack: one overhead for every GPU of the held-out group (as --apply-to-other-gpus)
                runs = Runs(triples=triples, gpus=[g] * len(cal_rows), specs=[t[0] for t in triples],
                            cols={c: v[cal_rows] for c, v in ds.cols.items()}, predicted={TTFT: pred[cal_rows]},
                            measured={TTFT: y[cal_rows]}, idle_measured=np.full(len(cal_rows), np.nan))
                fitted = fit_ttft(runs, shrink=SHRINK).get(g)
                overhead = 0.0 if fitted is None else fitted[0]["overhead_s"]
                after = np.maximum(pred[rest] + overhead, 0.5 * pred[rest])
                entry[str(k)] = {"k_used": int(len(cal_rows)), "overhead_s": overhead,
                                 "all": {"rest": int(len(rest)), "mdape_before": _mdape(y[rest], pred[rest]),
                                         "mdape_after": _mdape(y[rest], after), "y": y[rest].tolist(),
                                         "before": pred[rest].tolist(), "after": after.tolist()}}
            groups[str(g)] = entry
        summ: dict[str, Any] = {}
        for k in ks:
            parts = {n: e[str(k)]["all"] for n, e in groups.items() if e[str(k)]["all"]["rest"] > 0}
            cat = {key: np.concatenate([p[key] for p in parts.values()]) if parts else np.array([])
                   for key in ("y", "before", "after")}
            summ[str(k)] = {"groups": len(parts), "rows": int(len(cat["y"])),
                            "mdape_before": _mdape(cat["y"], cat["before"]), "mdape_after": _mdape(cat["y"], cat["after"]),
                            "groups_worse": [n for n, p in parts.items() if p["mdape_after"] > p["mdape_before"] + 1e-9]}
        for e in groups.values():
            for k in ks:
                for key in ("y", "before", "after"):
                    e[str(k)]["all"].pop(key, None)
        out[split] = {"groups": groups, "summary": summ}
    return out


SCORED = ("all", "same_source")


def summarize(groups: dict[str, Any], ks: tuple[int, ...]) -> dict[str, Any]:
    """Per scored set and k: pooled MdAPE over every scored row, the median of the groups' MdAPEs,
    the groups made worse."""
    res: dict[str, Any] = {}
    for scored in SCORED:
        res[scored] = {}
        for k in ks:
            parts = {name: g[str(k)][scored] for name, g in groups.items() if g[str(k)][scored]["rest"] > 0}
            cat = {key: np.concatenate([p[key] for p in parts.values()]) if parts else np.array([])
                   for key in ("y", "before", "after")}
            med = {key: float(np.median([p[f"mdape_{key}"] for p in parts.values()])) if parts else float("nan")
                   for key in ("before", "after")}
            res[scored][str(k)] = {
                "groups": len(parts), "rows": int(len(cat["y"])), "mdape_before": _mdape(cat["y"], cat["before"]),
                "mdape_after": _mdape(cat["y"], cat["after"]), "median_group_before": med["before"],
                "median_group_after": med["after"],
                "groups_worse": [n for n, p in parts.items() if p["mdape_after"] > p["mdape_before"] + 1e-9]}
    return res


def _strip(out: dict[str, Any]) -> dict[str, Any]:
    """Drop the per-row arrays (used by the summary only) and round for a stable JSON."""
    for target in TARGETS:
        for split in KSHOT_SPLITS:
            for g in out[target][split]["groups"].values():
                for v in g.values():
                    if isinstance(v, dict):
                        for scored in SCORED:
                            for key in ("y", "before", "after"):
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
    lines = ["# Calibration on a few runs (k-shot)", "",
             "`wattgpu calibrate` corrects the models with a user's own measured runs (formula in "
             "`docs/calibration.md`). Here each held-out group plays the user: its rows never reach "
             f"training, and its k calibration runs are chosen by a fixed rule: {r['rule']}.", "",
             f"Predictions: {r['predictions']}. Scored rows: **all** = every other single-GPU row of the held-out "
             "group; **same source** = those from the calibration runs' source (the user's own serving stack; "
             "under LOSO the two are the same). MdAPE is pooled over the scored rows; 'groups worse' lists "
             "groups whose MdAPE rose with calibration.", "",
             f"Runtime of this scoreboard (`wattgpu-train evaluate --kshot-only`): {r['runtime_s']} s.", ""]
    lines += ["Design history (same data, same rule): the correction's design was changed after "
              "seeing this table; the figures of the earlier designs:", ""] + [f"- {h}" for h in HISTORY] + [""]
    lines += ["LOGO: the runs calibrate the held-out GPU only (the default). LOSO: the held-out source is a user's "
              "new stack; its pooled level terms reach its other GPUs (`--apply-to-other-gpus`).", "",
              f"Shrinkage `SHRINK = {r['shrink']:g}` (wattgpu/calibration.py): the grid value with the fewest held-out "
              "groups made worse over both splits, targets and k (ties: mean pooled MdAPE), one value for all.", "",
              "| shrink | groups made worse (all cells) | mean pooled MdAPE after (all cells) | LOGO power k=3 | "
              "LOGO ITL k=3 | LOSO power k=3 | LOSO ITL k=3 |", "|---|---|---|---|---|---|---|"]
    for sh, cells in r["shrink_grid"].items():
        worse = sum(c["groups_worse"] for c in cells.values())
        vals = [c["mdape_after"] for c in cells.values() if c["mdape_after"] is not None]
        k3 = [cells[f"{sp} {t} k=3"]["mdape_after"] for sp, t in (("logo", "power"), ("logo", "itl"),
                                                                   ("loso", "power"), ("loso", "itl"))]
        lines.append(f"| {sh} | {worse} | {sum(vals) / max(len(vals), 1):.1f} % | " + " | ".join(_pct(v) for v in k3) + " |")
    lines += [""]
    lines += ["| split | target | scored | k | groups | rows | MdAPE uncalibrated | MdAPE calibrated | target (k=3) | met | "
              "median of groups (before → after) | groups worse |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for split in KSHOT_SPLITS:
        for target in TARGETS:
            for scored in (SCORED if split == "logo" else SCORED[:1]):
                for k in r["ks"]:
                    s = r[target][split]["summary"][scored][str(k)]
                    goal = r["targets_pct"].get(f"{split} {target}") if k == 3 else None
                    met = "–" if goal is None or s["mdape_after"] is None else (
                        "yes" if s["mdape_after"] <= goal else "**no**")
                    lines.append(f"| {split.upper()} | {target} | {scored.replace('_', ' ')} | {k} | {s['groups']} | "
                                 f"{s['rows']} | {_pct(s['mdape_before'])} | {_pct(s['mdape_after'])} | "
                                 f"{'–' if goal is None else f'≤ {goal:g} %'} | {met} | "
                                 f"{_pct(s['median_group_before'])} → {_pct(s['median_group_after'])} | "
                                 f"{', '.join(s['groups_worse']) or 'none'} |")
    for split in KSHOT_SPLITS:
        for target in TARGETS:
            lines += ["", f"### {target}, {split.upper()}: per held-out group, all scored rows "
                          "(MdAPE before → after; same-source rows in brackets under LOGO)", "",
                      "| group | rows | calibration LLM (source) | " + " | ".join(f"k={k}" for k in r["ks"]) + " |",
                      "|---|---|---|" + "---|" * len(r["ks"])]
            for name, g in r[target][split]["groups"].items():
                cells = []
                for k in r["ks"]:
                    v = g[str(k)]
                    a, same = v["all"], v["same_source"]
                    cell = ("no rows left" if not a["rest"] else
                            f"{_pct(a['mdape_before'])} → {_pct(a['mdape_after'])} ({v['k_used']} runs, {a['rest']} scored)")
                    if split == "logo" and same["rest"] and same["rest"] != a["rest"]:
                        cell += f" [{_pct(same['mdape_before'])} → {_pct(same['mdape_after'])}, {same['rest']}]"
                    cells.append(cell)
                lines.append(f"| {name} | {g['rows']} | {g['1']['llm']} ({g['1']['source']}) | " + " | ".join(cells) + " |")
    t = r.get("ttft", {})
    if t.get("rows"):
        lines += ["", "### TTFT: the overhead term (rows with a measured TTFT)", "",
                  f"{t['rows']} rows. `wattgpu calibrate` reports this term; the bundle does not apply it yet.", "",
                  "| split | k | groups | rows | MdAPE uncalibrated | MdAPE calibrated | groups worse |",
                  "|---|---|---|---|---|---|---|"]
        for split in KSHOT_SPLITS:
            for k in r["ks"]:
                s = t[split]["summary"][str(k)]
                lines.append(f"| {split.upper()} | {k} | {s['groups']} | {s['rows']} | {_pct(s['mdape_before'])} | "
                             f"{_pct(s['mdape_after'])} | {', '.join(s['groups_worse']) or 'none'} |")
    return "\n".join(lines) + "\n"


def _pct(x: Any) -> str:
    return "–" if x is None else f"{x:.1f} %"
