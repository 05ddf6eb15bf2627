"""``wattgpu-train``: parses arguments and calls :mod:`wattgpu_train.pipeline` (nothing else lives here)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click  # a runtime dependency; pandas/XGBoost load only inside the commands

# Defaults are relative to the working directory: run wattgpu-train from the repository root.
DEFAULT_DATA = Path("data")
DEFAULT_SPECS = Path("specs.json")
DEFAULT_MODELS = Path("runtime") / "wattgpu" / "models"
DEFAULT_GOLDEN = Path("tests") / "golden" / "regenerate.py"


def _require_training_extra() -> None:
    """Exit 2 with one line naming the extra when the training dependencies are missing."""
    from . import EXTRA_HINT, missing_training_deps

    missing = missing_training_deps()
    if missing:
        sys.stderr.write(f"error: wattgpu-train needs {', '.join(missing)}, which are not installed: {EXTRA_HINT}\n")
        raise SystemExit(2)


def _write(out: Path, name: str, text: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(text, encoding="utf-8")
    return path


def _echo_err(msg: str) -> None:
    click.echo(msg, err=True)


def _out_dir(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    """An output directory that exists as something else (a device such as /dev/full, a FIFO) is refused
    before any training, not after it."""
    if value.exists() and not value.is_dir():
        raise click.BadParameter(f"{value} exists and is not a directory; choose another output directory")
    return value


def _pipeline() -> Any:
    from . import pipeline

    return pipeline


class _OneLineErrors(click.Group):
    """Every command's failures as one ``error:`` line and an exit status, never a traceback: WattGPU
    errors with their own status; bad data files and paths (ValueError, OSError, as the loaders raise
    them with the file and the fix) exit 2; anything else is a bug, exit 70."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except (BrokenPipeError, KeyboardInterrupt):
            sys.exit(130)
        except Exception as exc:
            from wattgpu.cli import fail
            from wattgpu.errors import WattGPUError

            if isinstance(exc, WattGPUError):
                fail(str(exc), exc.exit_code)
            if isinstance(exc, OSError):
                where = f"{exc.filename}: " if exc.filename else ""
                fail(f"{where}{exc.strerror or exc}; check the path", 2)
            if isinstance(exc, ValueError):
                fail(str(exc) or exc.__class__.__name__, 2)
            fail(f"internal error ({exc.__class__.__name__}: {exc}); please report it", 70)


@click.group(cls=_OneLineErrors)
def main() -> None:
    """Train, export and evaluate WattGPU models (from a source checkout: `pip install -e ".[train]"`)."""

@main.command("sync-catalog")
@click.option("--catalog-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA / "catalog", show_default=True)
@click.option("--paper-dir", type=click.Path(path_type=Path), default=DEFAULT_DATA / "paper", show_default=True)
@click.option("--specs", type=click.Path(path_type=Path), default=DEFAULT_SPECS, show_default=True)
@click.option("--models", type=click.Path(path_type=Path, file_okay=False), default=DEFAULT_MODELS, show_default=True,
              help="The bundle that gets the new catalog (its models are kept).")
@click.option("--golden", type=click.Path(path_type=Path, dir_okay=False), default=DEFAULT_GOLDEN, show_default=True,
              help="Golden script to rerun on that bundle.")
@click.option("--no-golden", is_flag=True, help="Do not regenerate the golden file.")
def sync_catalog_cmd(catalog_dir: Path, paper_dir: Path, specs: Path, models: Path, golden: Path, no_golden: bool) -> None:
    """After adding a GPU or LLM to data/catalog: rebuild specs.json, copy it into the models bundle with its
    manifest hash updated (no refit) and regenerate the golden predictions."""
    data = _pipeline().sync_catalog(catalog_dir, paper_dir, specs, models, None if no_golden else golden, log=click.echo)
    click.echo(f"catalog {data['catalog_version']} in sync: {specs}, {models}")

@main.command("fit")
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--watt-counts", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="Also train on the paper's watt_counts_subset.csv (unchanged).")
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--recipe", type=click.Choice(["default", "paper"]), default="default", show_default=True)
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), callback=_out_dir, default=DEFAULT_MODELS, show_default=True,
              help="Bundle directory to write (use it with `wattgpu predict --models DIR`).")
@click.option("--no-intervals", is_flag=True, help="Skip the leave-one-GPU-out interval calibration.")
@click.option("--trees", type=click.IntRange(1, 10_000), default=None,
              help="Override the recipe's number of trees (small values: a quick smoke bundle).")
def fit_cmd(data_dir: Path, watt_counts: Path | None, specs: Path, recipe: str, out: Path, no_intervals: bool,
            trees: int | None) -> None:
    """Fit power and ITL models on measured rows and write a complete, hashed bundle to --out."""
    from .fit import stderr_progress

    data = _pipeline().load(data_dir, specs, watt_counts)
    result = _pipeline().fit(data, recipe, intervals=not no_intervals, n_estimators=trees,
                          progress=stderr_progress, log=_echo_err)
    schema = _pipeline().export(result, out)
    for m in schema["models"].values():
        click.echo(f"exported {out / m['file']} (parity max rel diff {m['parity_max_rel_diff']:.2g})")
    _fit_ttft(out, data)


def _fit_ttft(models: Path, data: Any) -> None:
    """Fit the bundle's ``ttft`` section (wattgpu.ttft_fit) on the measured TTFT rows and report it."""
    from .ttft import install

    try:
        fit = install(models, data.records, data.catalog)
    except ValueError as exc:
        click.echo(f"no ttft section: {exc}", err=True)
        return
    click.echo(f"ttft section in {models}: excess {fit.excess_steps:.2f} decode steps, burst {fit.burst_s:.3f} s, "
               f"80 % interval factors {fit.interval}, burst arrivals {fit.burst_interval} ({fit.rows} rows)")


@main.command("fit-ttft")
@click.option("--models", type=click.Path(path_type=Path, exists=True, file_okay=False), required=True,
              help="Bundle directory to add the fitted TTFT section to (format 5; model files unchanged).")
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
def fit_ttft_cmd(models: Path, data_dir: Path, specs: Path) -> None:
    """Fit the TTFT excess and 80 % interval on the measured TTFT rows with --models' step times, and write them
    into that bundle's manifest (no refit of the power or ITL models)."""
    _fit_ttft(models, _pipeline().load(data_dir, specs))

@main.command("evaluate")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), callback=_out_dir, default=Path("reports"), show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--quick", is_flag=True, help="Smoke run for CI: fewer trees and CV folds (figures not meaningful).")
@click.option("--jobs", type=int, default=2, show_default=True, help="Fold fits run in parallel.")
@click.option("--kshot-only", is_flag=True,
              help="Only the k-shot calibration table (calibration.json and .md), not the full scoreboard.")
@click.option("--ttft-only", is_flag=True,
              help="Only the TTFT table: updates the 'ttft' key of OUT/accuracy.json and rewrites accuracy.md (seconds).")
def evaluate_cmd(out: Path, data_dir: Path, specs: Path, quick: bool, jobs: int, kshot_only: bool,
                 ttft_only: bool) -> None:
    """Score default, paper recipe and physical baselines under CV / LOGO / LOLO / LOSO; write accuracy.json and .md,
    and the k-shot calibration table (calibration.json and .md)."""
    from .report import evaluate_markdown

    if kshot_only:
        _kshot(out, _pipeline().load(data_dir, specs), quick, jobs)
        return
    if ttft_only:
        _ttft(out, _pipeline().load(data_dir, specs))
        return
    t0 = time.perf_counter()
    result = _pipeline().evaluate(_pipeline().load(data_dir, specs), quick=quick, n_jobs=jobs, log=_echo_err)
    elapsed = time.perf_counter() - t0
    j = _write(out, "accuracy.json", json.dumps(result, indent=1, sort_keys=False, ensure_ascii=False) + "\n")
    m = _write(out, "accuracy.md", evaluate_markdown(result))
    for target in ("power", "itl"):
        for split in ("logo", "lolo", "loso", "cv"):
            row = ", ".join(f"{k} {v['mdape']:.1f} %" for k, v in result[target][split].items()
                            if isinstance(v, dict) and v.get("mdape") is not None)
            click.echo(f"{target} {split.upper()} MdAPE: {row}")
        tp = result.get("tp", {}).get(target, {})
        for split in ("logo", "lolo"):
            if split in tp:
                row = ", ".join(f"{k} {v['mdape']:.1f} %" for k, v in tp[split].items()
                                if isinstance(v, dict) and v.get("mdape") is not None)
                click.echo(f"{target} TP rows ({tp['rows']}) {split.upper()} MdAPE: {row}")
    from .ttft import summary_lines as ttft_summary

    for line in ttft_summary(result.get("ttft", {})):
        click.echo(line)
    click.echo(f"wrote {j} and {m} in {elapsed:.0f} s")
    _kshot(out, _pipeline().load(data_dir, specs), quick, jobs)


def _ttft(out: Path, data: Any) -> None:
    """Score TTFT (physics vs prefill roofline), store it under accuracy.json's 'ttft' key, rewrite accuracy.md."""
    from .report import evaluate_markdown
    from .ttft import summary_lines as ttft_summary
    from .ttft import ttft_scores

    result = ttft_scores(data.records, data.catalog)
    path = out / "accuracy.json"
    whole = json.loads(path.read_text()) if path.exists() else None
    if whole is not None:
        whole["ttft"] = result
        _write(out, "accuracy.json", json.dumps(whole, indent=1, sort_keys=False, ensure_ascii=False) + "\n")
        _write(out, "accuracy.md", evaluate_markdown(whole))
    else:
        _write(out, "ttft.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    for line in ttft_summary(result):
        click.echo(line)


def _kshot(out: Path, data: Any, quick: bool, jobs: int) -> None:
    """Write the k-shot calibration scoreboard (calibration.json, calibration.md) and print its summary."""
    from .kshot import markdown, summary_lines

    result = _pipeline().kshot(data, quick=quick, n_jobs=jobs, log=_echo_err)
    j = _write(out, "calibration.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    m = _write(out, "calibration.md", markdown(result))
    for line in summary_lines(result):
        click.echo(line)
    click.echo(f"k-shot scoreboard in {result['runtime_s']} s; wrote {j} and {m}")


@main.command("reproduce-paper")
@click.option("--watt-counts", type=click.Path(path_type=Path, exists=True, dir_okay=False), required=True,
              help="The paper's watt_counts_subset.csv, unchanged.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), callback=_out_dir, default=Path("reports"), show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--quick", is_flag=True, help="Smoke run: fewer trees and CV folds.")
@click.option("--jobs", type=int, default=2, show_default=True)
@click.option("--label", default=None, help="Dataset label for the report (default: the file name).")
def reproduce_paper_cmd(watt_counts: Path, out: Path, data_dir: Path, specs: Path, quick: bool, jobs: int,
                        label: str | None) -> None:
    """Run the paper recipe and our default on a Watt Counts file next to the published Tables 2-3."""
    from .report import paper_markdown

    result = _pipeline().reproduce_paper(watt_counts, data_dir, specs, quick=quick, n_jobs=jobs, log=_echo_err)
    j = _write(out, "paper_reproduction.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    md = paper_markdown(result, label or watt_counts.name)
    m = _write(out, "paper_reproduction.md", md)
    click.echo(md)
    click.echo(f"wrote {j} and {m}")


@main.command("compare-peers")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), callback=_out_dir, default=Path("reports"), show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path, exists=True), default=DEFAULT_DATA, show_default=True)
@click.option("--specs", type=click.Path(path_type=Path, exists=True), default=DEFAULT_SPECS, show_default=True)
@click.option("--raw-configs", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Folder of stored HF config copies (<org>--<name>.json with a 'config' key) for AIConfigurator; "
                   "without it, config.json is rebuilt from data/catalog/llm_configs.csv.")
@click.option("--peer", "peers", type=click.Choice(["aiconfigurator", "llm-analysis", "ecologits"]), multiple=True,
              help="Run only these peers (repeatable; default: all three).")
@click.option("--quick", is_flag=True, help="Smoke run: WattGPU with few trees (figures not meaningful).")
@click.option("--jobs", type=int, default=2, show_default=True, help="Fold fits run in parallel.")
def compare_peers_cmd(out: Path, data_dir: Path, specs: Path, raw_configs: Path | None, peers: tuple[str, ...],
                      quick: bool, jobs: int) -> None:
    """WattGPU (leave-one-GPU-out) beside AIConfigurator, llm-analysis and EcoLogits on data/; writes peers.json and .md.
    Needs `pip install "wattgpu[peers]"`; takes tens of minutes."""
    from .peers import peers_markdown

    t0 = time.perf_counter()
    result = _pipeline().compare_peers(_pipeline().load(data_dir, specs), raw_configs=raw_configs, quick=quick,
                                       n_jobs=jobs, peers=peers or ("aiconfigurator", "llm-analysis", "ecologits"),
                                       log=_echo_err)
    result["runtime_s"] = round(time.perf_counter() - t0, 1)
    j = _write(out, "peers.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    m = _write(out, "peers.md", peers_markdown(result))
    for name, p in result["peers"].items():
        for metric, block in p["metrics"].items():
            b = block["pooled"]
            click.echo(f"{name} {metric}: n {b['n']}, MdAPE peer {b['peer']['mdape']} % vs WattGPU LOGO "
                       f"{b['wattgpu']['mdape']} %; {p['unanswered']} rows not answered")
    click.echo(f"wrote {j} and {m} in {result['runtime_s']:.0f} s")


def run(argv: list[str] | None = None) -> Any:
    """Console entry point: check the training extra first (even for --help), then run the group."""
    _require_training_extra()
    return main(args=argv)


if __name__ == "__main__":
    sys.exit(run())
