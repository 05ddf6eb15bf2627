"""``wattgpu calibrate``: correct the models with your own measured runs (wattgpu.questions.CALIBRATE)."""
from __future__ import annotations

import json
from typing import Any

import click

from .. import questions as Q
from .base import _predictor, guarded, main
from .options import models_option, options, parse_tp


@main.command()
@options(Q.CALIBRATE.params, out_dir={"required": True, "metavar": "DIR"})
@click.option("--json", "as_json", is_flag=True, help="Print the calibration section as JSON (docs/json.md).")
@models_option
@guarded
def calibrate(measurements: str | None, benches: tuple[str, ...], power_logs: tuple[str, ...], gpu: str | None,
              llm: str | None, tp_text: str, out_dir: str, other_gpus: bool, as_json: bool, models: str | None) -> None:
    """Correct the models with your own measured runs; writes a bundle for --models / WATTGPU_MODELS."""
    from ..calibration import calibrate as run_calibration
    from ..calibration import check_base
    from ..errors import WattGPUError
    from ..measured import bench_row, rows_of, runs_from_csv, runs_from_rows

    if (measurements is None) == (not benches):
        raise WattGPUError("give --measurements runs.csv, or --vllm-bench FILE (with --gpu and --nvidia-smi), not both")
    if measurements is not None and (power_logs or gpu or llm):
        raise WattGPUError("--nvidia-smi, --gpu and --llm go with --vllm-bench; a runs CSV names them per row")
    predictor = _predictor(models)
    check_base(predictor.bundle)
    if measurements is not None:
        runs = runs_from_csv(measurements, predictor)
    else:
        if gpu is None:
            raise WattGPUError("--vllm-bench needs --gpu: the benchmark JSON does not say which GPU served it")
        if len(power_logs) not in (0, 1, len(benches)):
            raise WattGPUError(f"{len(power_logs)} --nvidia-smi logs for {len(benches)} --vllm-bench files; "
                               "give one log per benchmark, or one that covers them all")
        tp = parse_tp(tp_text)
        rows = []
        for i, b in enumerate(benches):
            log = power_logs[i] if len(power_logs) == len(benches) else (power_logs[0] if power_logs else None)
            row, note = bench_row(b, log, gpu, llm, tp)
            click.echo(f"read {note}", err=True)
            rows.append(row)
        runs = runs_from_rows(rows_of(rows), "--vllm-bench", predictor)
    cal = run_calibration(runs, predictor.bundle, out_dir, apply_to_other_gpus=other_gpus)
    if as_json:
        click.echo(json.dumps(cal.to_section(), indent=2, sort_keys=True))
        return
    _print_calibration(cal, runs, out_dir)


def _print_calibration(cal: Any, runs: Any, out_dir: str) -> None:
    """Per GPU and quantity: the parameters kept, the leave-one-run-out error before and after, the gap closed."""
    from ..calibration import report

    click.echo(report(cal, runs, out_dir))


