"""``wattgpu-train``: build the catalog, fit and export models, evaluate them."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import click

# Defaults are relative to the working directory: run wattgpu-train from the repository root.
DEFAULT_DATA = Path("data")
DEFAULT_SPECS = Path("specs.json")
DEFAULT_MODELS = Path("runtime") / "wattgpu" / "models"


@click.group()
def main() -> None:
    """Train, export and evaluate WattGPU models (needs `pip install wattgpu[train]`)."""


@main.command("build-specs")
@click.option("--catalog-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA / "catalog", show_default=True)
@click.option("--paper-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA / "paper", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=DEFAULT_SPECS, show_default=True)
def build_specs_cmd(catalog_dir: Path, paper_dir: Path, out: Path) -> None:
    """Write specs.json from the spec tables in data/."""
    from .catalog import write_specs

    data = write_specs(out, catalog_dir, paper_dir)
    click.echo(f"wrote {out}: {len(data['gpus'])} GPUs, {len(data['llms'])} LLMs (catalog {data['catalog_version']})")


@main.command("fit")
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--watt-counts", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Also train on the paper's watt_counts_subset.csv (unchanged).")
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--recipe", type=click.Choice(["default", "paper"]), default="default", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=DEFAULT_MODELS, show_default=True)
@click.option("--no-intervals", is_flag=True, help="Skip the leave-one-GPU-out interval calibration.")
def fit_cmd(data_dir: Path, watt_counts: Path | None, specs: Path, recipe: str, out: Path, no_intervals: bool) -> None:
    """Fit power and ITL models on measured rows and export them to ONNX (with the parity gate)."""
    from wattgpu_export.onnx_export import export_models

    from .calibrate import grouped_oof, interval_factors, training_domain
    from .dataset import build_dataset
    from .fit import fit_model, stderr_progress
    from .loading import load_catalog, load_training_records
    from .recipes import RECIPES

    rec = RECIPES[recipe]
    catalog = load_catalog(specs)
    records = load_training_records(data_dir, watt_counts)
    datasets, fitted, matrices, summary, intervals = {}, {}, {}, {}, {}
    for target in ("power", "itl"):
        mr = rec.model(target)
        ds = build_dataset(records, catalog, target)
        datasets[target] = ds
        click.echo(f"{target}: {len(ds)} measured rows, {ds.records['gpu'].nunique()} GPUs, "
                   f"{ds.records['llm'].nunique()} LLMs", err=True)
        fitted[target] = fit_model(mr, ds, progress=stderr_progress)
        matrices[target] = ds.X(mr.features)
        summary[target] = {
            "rows": len(ds), "gpus": sorted(ds.records["gpu"].unique()), "llms": int(ds.records["llm"].nunique()),
            "sources": {k: int(v) for k, v in ds.records["source"].value_counts().sort_index().items()},
            "records_sha256": hashlib.sha256(ds.records.to_csv(index=False).encode()).hexdigest(),
        }
        if not no_intervals:
            click.echo(f"{target}: calibrating intervals (leave-one-GPU-out)", err=True)
            oof = grouped_oof(mr, ds, ds.records["gpu"].to_numpy(), n_jobs=2)
            intervals[target] = interval_factors(ds.y_physical(target), oof)
    schema = export_models(recipe_name=recipe, models=fitted, matrices=matrices, catalog_path=specs, out_dir=out,
                           training={"measured_only": True, "targets": summary,
                                     "data_dir": "data/", "watt_counts": str(watt_counts) if watt_counts else None},
                           intervals=intervals, domain=training_domain(datasets))
    for target, m in schema["models"].items():
        click.echo(f"exported {out / m['file']} (parity max rel diff {m['parity_max_rel_diff']:.2g})")


def _write(out: Path, name: str, text: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(text, encoding="utf-8")
    return path


@main.command("evaluate")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("reports"), show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--quick", is_flag=True, help="Smoke run for CI: fewer trees and CV folds (figures not meaningful).")
@click.option("--jobs", type=int, default=2, show_default=True, help="Fold fits run in parallel.")
def evaluate_cmd(out: Path, data_dir: Path, specs: Path, quick: bool, jobs: int) -> None:
    """Score default, paper recipe and physical baselines under CV / LOGO / LOLO; write accuracy.json and .md."""
    import time

    from .evaluate import evaluate
    from .loading import load_catalog, load_training_records
    from .report import evaluate_markdown

    t0 = time.perf_counter()
    result = evaluate(load_training_records(data_dir), load_catalog(specs), quick=quick, n_jobs=jobs,
                      log=lambda s: click.echo(s, err=True))
    elapsed = time.perf_counter() - t0
    j = _write(out, "accuracy.json", json.dumps(result, indent=1, sort_keys=False, ensure_ascii=False) + "\n")
    m = _write(out, "accuracy.md", evaluate_markdown(result))
    for target in ("power", "itl"):
        for split in ("logo", "lolo", "cv"):
            row = ", ".join(f"{k} {v['mdape']:.1f} %" for k, v in result[target][split].items()
                            if isinstance(v, dict) and v.get("mdape") is not None)
            click.echo(f"{target} {split.upper()} MdAPE: {row}")
    click.echo(f"wrote {j} and {m} in {elapsed:.0f} s")


@main.command("reproduce-paper")
@click.option("--watt-counts", type=click.Path(path_type=Path, exists=True, dir_okay=False), required=True,
              help="The paper's watt_counts_subset.csv, unchanged.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("reports"), show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--quick", is_flag=True, help="Smoke run: fewer trees and CV folds.")
@click.option("--jobs", type=int, default=2, show_default=True)
@click.option("--label", default=None, help="Dataset label for the report (default: the file name).")
def reproduce_paper_cmd(watt_counts: Path, out: Path, data_dir: Path, specs: Path, quick: bool, jobs: int,
                        label: str | None) -> None:
    """Run the paper recipe and our default on a Watt Counts file next to the published Tables 2-3."""
    from .loading import load_catalog
    from .paper_repro import reproduce_paper
    from .report import paper_markdown
    from .watt_counts import load_watt_counts_for_catalog

    records = load_watt_counts_for_catalog(watt_counts, data_dir)
    result = reproduce_paper(records, load_catalog(specs), quick=quick, n_jobs=jobs, log=lambda s: click.echo(s, err=True))
    result["source_file"] = watt_counts.name
    j = _write(out, "paper_reproduction.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    md = paper_markdown(result, label or watt_counts.name)
    m = _write(out, "paper_reproduction.md", md)
    click.echo(md)
    click.echo(f"wrote {j} and {m}")


if __name__ == "__main__":
    sys.exit(main())
