"""Training as a library: build the catalog, load measured rows, fit, evaluate and export a bundle.

Every ``wattgpu-train`` command is one call here (``sync_catalog`` after a catalog edit); a notebook or a
test calls the same functions::

    from wattgpu_train.pipeline import load, fit, export
    data = load("data", "specs.json")
    result = fit(data)                       # or fit(data, n_estimators=20, intervals=False) for a smoke run
    export(result, "my-models")              # then: wattgpu predict --models my-models …
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from wattgpu.specs import Catalog
from wattgpu.targets import TARGETS, inverse

from .calibrate import grouped_oof, interval_factors, training_domain
from .dataset import Dataset, build_dataset
from .fit import FittedModel, Progress, fit_model
from .loading import load_catalog, load_training_records
from .measurements import load_scored_apart
from .recipes import RECIPES, Recipe
from .selection import LEAVE_ONE_GROUP_OUT, select

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class TrainingData:
    """Measured rows and the catalog they are joined with."""

    records: pd.DataFrame
    catalog: Catalog
    specs_path: Path
    data_dir: Path
    watt_counts: Path | None = None
    # rows a ``score_only`` rule keeps out of training (FP8 runs of BF16 catalog LLMs): evaluate scores them apart
    scored_apart: pd.DataFrame | None = None


@dataclass
class FitResult:
    """The fitted models of one recipe and every manifest section their bundle needs."""

    recipe: Recipe
    data: TrainingData
    datasets: dict[str, Dataset]
    models: dict[str, FittedModel]
    summary: dict[str, Any]
    intervals: dict[str, Any] = field(default_factory=dict)
    domain: dict[str, Any] = field(default_factory=dict)

    def predict_physical(self, target: str, dataset: Dataset) -> np.ndarray:
        """This fit's own predictions (XGBoost, physical units) for the rows of ``dataset``."""
        m = self.models[target]
        learned = m.predict_learned(dataset.X(m.recipe.features)).astype(np.float64)
        return inverse(m.recipe.transform, learned, dataset.cols)


def build_specs(catalog_dir: str | Path, paper_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write ``specs.json`` from the spec tables in ``catalog_dir`` (and the paper's); returns it."""
    from .catalog import write_specs

    return write_specs(Path(out), Path(catalog_dir), Path(paper_dir))


def sync_catalog(catalog_dir: str | Path, paper_dir: str | Path, specs: str | Path, models: str | Path,
                 golden: str | Path | None = None, log: Log = _quiet) -> dict[str, Any]:
    """After a spec table changed (a GPU or LLM added): rebuild ``specs``, install it as the catalog of the
    bundle ``models`` with its manifest hash updated (the ONNX files are kept: no refit), then run the
    golden script ``golden`` (``tests/golden/regenerate.py``) on that bundle. Returns the catalog."""
    from wattgpu.bundle import ModelBundle, rewrite_bundle

    if golden is not None and not Path(golden).is_file():
        raise ValueError(f"{golden}: golden script not found; run from the repository root or skip it (--no-golden)")
    data = build_specs(catalog_dir, paper_dir, specs)
    log(f"wrote {specs}: {len(data['gpus'])} GPUs, {len(data['llms'])} LLMs")
    rewrite_bundle(ModelBundle(models), Path(models), Path(specs).read_bytes())
    log(f"installed it in {models} (manifest catalog sha256 updated; models unchanged)")
    if golden is not None:
        _run_golden(Path(golden), Path(models))
        log(f"regenerated the golden file with {golden}")
    return data


def _run_golden(script: Path, models: Path) -> None:
    """Run the golden script on ``models`` with this process's ``wattgpu`` first on the path."""
    import os
    import subprocess
    import sys

    import wattgpu

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(wattgpu.__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("WATTGPU_MODELS", None)
    done = subprocess.run([sys.executable, str(script), "--models", str(models)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"{script} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")


def load(data_dir: str | Path = "data", specs: str | Path = "specs.json",
         watt_counts: str | Path | None = None) -> TrainingData:
    """Every measured training row in ``data_dir`` (plus a Watt Counts file if given) and the catalog."""
    wc = Path(watt_counts) if watt_counts is not None else None
    return TrainingData(records=load_training_records(Path(data_dir), wc), catalog=load_catalog(Path(specs)),
                        specs_path=Path(specs), data_dir=Path(data_dir), watt_counts=wc,
                        scored_apart=load_scored_apart(Path(data_dir), single_gpu_only=False))


def fit(data: TrainingData, recipe: str | Recipe = "default", *, intervals: bool = True,
        n_estimators: int | None = None, progress: Progress | None = None, log: Log = _quiet,
        n_jobs: int = 2) -> FitResult:
    """Fit every target of ``recipe`` on ``data``; with ``intervals``, calibrate leave-one-GPU-out
    intervals. ``n_estimators`` overrides the recipe's tree count (small values for smoke runs)."""
    rec = RECIPES[recipe] if isinstance(recipe, str) else recipe
    if n_estimators is not None:
        def trees(m: Any) -> Any:
            return replace(m, params={**m.params, "n_estimators": n_estimators})
        rec = replace(rec, **{t: trees(rec.model(t)) for t in TARGETS},
                      grid={t: tuple(trees(m) for m in ms) for t, ms in rec.grid.items()})
    result = FitResult(recipe=rec, data=data, datasets={}, models={}, summary={})
    for target in TARGETS:
        ds = build_dataset(data.records, data.catalog, target)
        result.datasets[target] = ds
        log(f"{target}: {len(ds)} measured rows, {ds.records['gpu'].nunique()} GPUs, "
            f"{ds.records['llm'].nunique()} LLMs")
        # Nested choice among the recipe's candidates, on the training rows only (leave-one-GPU-out).
        cands = rec.candidates(target)
        k, inner = select(cands, ds, ds.records["gpu"].to_numpy(dtype=object), LEAVE_ONE_GROUP_OUT)
        mr = cands[k]
        if len(cands) > 1:
            log(f"{target}: candidate {k} of {len(cands)} chosen by leave-one-GPU-out "
                f"(inner MdAPE {', '.join(f'{v:.1f}' for v in inner)} %)")
        result.models[target] = fit_model(mr, ds, progress=progress)
        result.summary[target] = {
            "rows": len(ds), "gpus": sorted(ds.records["gpu"].unique()), "llms": int(ds.records["llm"].nunique()),
            "sources": {k: int(v) for k, v in ds.records["source"].value_counts().sort_index().items()},
            "records_sha256": hashlib.sha256(ds.records.to_csv(index=False).encode()).hexdigest(),
        }
        if intervals:
            log(f"{target}: calibrating intervals (leave-one-GPU-out)")
            oof = grouped_oof(mr, ds, ds.records["gpu"].to_numpy(), n_jobs=n_jobs)
            result.intervals[target] = interval_factors(ds.y_physical(target), oof, groups=ds.records["gpu"].to_numpy())
    result.domain = training_domain(result.datasets)
    return result


def export(result: FitResult, out: str | Path) -> dict[str, Any]:
    """Write ``result`` as a complete, hashed model bundle in ``out`` (ONNX with the parity gate);
    returns the manifest. Use it with ``wattgpu predict --models OUT`` or ``Predictor(models=OUT)``."""
    from wattgpu_export.onnx_export import export_models

    matrices = {t: result.datasets[t].X(m.recipe.features) for t, m in result.models.items()}
    wc = result.data.watt_counts
    training = {"measured_only": True, "targets": result.summary, "data_dir": str(result.data.data_dir).rstrip("/") + "/",
                "watt_counts": str(wc) if wc else None}
    return export_models(recipe_name=result.recipe.name, models=result.models, matrices=matrices,
                         catalog_path=result.data.specs_path, out_dir=Path(out), training=training,
                         intervals=result.intervals, domain=result.domain)


def evaluate(data: TrainingData, *, quick: bool = False, n_jobs: int = 2, log: Log = _quiet) -> dict[str, Any]:
    """Score the default recipe, the paper's recipe and the physical baselines under CV / LOGO / LOLO / LOSO."""
    from .evaluate import evaluate as run

    return run(data.records, data.catalog, quick=quick, n_jobs=n_jobs, log=log, apart=data.scored_apart)


def kshot(data: TrainingData, *, quick: bool = False, n_jobs: int = 2, log: Log = _quiet) -> dict[str, Any]:
    """The k-shot calibration scoreboard: calibrate each held-out GPU (LOGO) / source (LOSO) on k of its runs."""
    from .evaluate import quick_recipe
    from .kshot import kshot as run
    from .recipes import DEFAULT

    return run(data.records, data.catalog, recipe=quick_recipe(DEFAULT) if quick else DEFAULT, n_jobs=n_jobs, log=log)


def reproduce_paper(watt_counts: str | Path, data_dir: str | Path = "data", specs: str | Path = "specs.json", *,
                    quick: bool = False, n_jobs: int = 2, log: Log = _quiet) -> dict[str, Any]:
    """The paper's recipe and ours on a Watt Counts file, next to the published tables."""
    from .paper_repro import reproduce_paper as run
    from .watt_counts import load_watt_counts_for_catalog

    records = load_watt_counts_for_catalog(Path(watt_counts), Path(data_dir))
    result = run(records, load_catalog(Path(specs)), quick=quick, n_jobs=n_jobs, log=log)
    result["source_file"] = Path(watt_counts).name
    return result


def compare_peers(data: TrainingData, *, raw_configs: str | Path | None = None, quick: bool = False, n_jobs: int = 2,
                  peers: tuple[str, ...] = ("aiconfigurator", "llm-analysis", "ecologits"),
                  log: Log = _quiet) -> dict[str, Any]:
    """WattGPU's leave-one-GPU-out figures beside AIConfigurator, llm-analysis and EcoLogits on the measured
    rows (needs ``pip install "wattgpu[peers]"``; a peer that is missing is reported, not fatal)."""
    from .peers import compare_peers as run

    return run(data.records, data.catalog, data.data_dir, raw_configs=Path(raw_configs) if raw_configs else None,
               n_jobs=n_jobs, quick=quick, peers=peers, log=log)
