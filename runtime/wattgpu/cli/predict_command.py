"""``wattgpu predict``: one LLM on one GPU, or many rows with --input (the question: wattgpu.questions.PREDICT
and BATCH; the answers: wattgpu.answers and wattgpu.batch)."""
from __future__ import annotations

import json
import sys
from typing import Any

import click

from .. import questions as Q
from ..record import field
from .base import _predictor, guarded, main, num
from .options import dtype_option, make_workload, models_option, option, options, price_options, workload_options
from .text import bound_text, explain_power_method, money_rows, ttft_text

SHOWN_ROW_ERRORS = Q.SHOWN_ROW_ERRORS
ITL = field("itl_s")  # scaled, formatted and named for people as the output declaration says (s → ms)


@main.command()
@option(Q.PREDICT.param("llm"))
@option(Q.PREDICT.param("gpu"))
@workload_options
@dtype_option
@price_options
@options(p for p in Q.BATCH.params if p.body is None)
@options(Q.PREDICT.param(n) for n in ("max_itl_ms", "max_ttft_ms"))
@options(Q.LAYOUT)
@click.option("--json", "as_json", is_flag=True, help="Print stable JSON (every key explained in docs/json.md).")
@models_option
@guarded
def predict(llm: str | None, gpu: str | None, as_json: bool, usd_per_kwh: float | None, gco2_per_kwh: float | None,
            pue: float, usd_per_gpu_hour: float | None, max_itl_ms: float | None, max_ttft_ms: float | None,
            input_csv: str | None, output_csv: str | None, on_error: str, errors_csv: str | None, lenient: bool,
            dtype: str, models: str | None, pp: int | None = None, dp: int | None = None, ep: str | None = None,
            nodes: int | None = None, interconnect: str | None = None, **wl: Any) -> None:
    """Predict power, ITL, throughput and energy for one LLM on one GPU (or many rows with --input)."""
    from ..errors import WattGPUError

    if errors_csv is not None and input_csv is None:
        raise WattGPUError("--errors goes with --input (it lists the CSV rows that were skipped)")
    layout = {"pp": pp, "dp": dp, "ep": ep, "nodes": nodes, "interconnect": interconnect}
    if input_csv is not None or output_csv is not None:
        if any(v is not None for v in layout.values()):
            raise WattGPUError("--pp/--dp/--ep/--nodes/--interconnect apply to one --llm/--gpu (a layout), not to "
                               "--input rows")
        if input_csv is None or output_csv is None:
            raise WattGPUError("--input and --output go together (CSV in, CSV out)")
        if llm is not None or gpu is not None:
            raise WattGPUError("--input takes llm and gpu from the CSV; drop --llm/--gpu")
        if dtype.strip().lower() != "auto":
            raise WattGPUError("--dtype applies to --llm; with --input give each row's checkpoint instead")
        if max_itl_ms is not None or max_ttft_ms is not None:
            raise WattGPUError("--max-itl-ms/--max-ttft-ms apply to one --llm/--gpu; use `wattgpu rank` for many GPUs")
        from ..batch import predict_csv

        if lenient and input_csv is None:
            raise WattGPUError("--lenient goes with --input (it is about the CSV's columns)")
        shown: list[str] = []
        examples: dict[str, str] = {}

        def report(msg: str) -> None:
            if msg.startswith("error:"):
                shown.append(msg)  # printed after the summary by reason
            else:
                click.echo(msg, err=True)

        summary = predict_csv(input_csv, output_csv, on_error=on_error, defaults=make_workload(**wl),
                              prices=(usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour), predictor=_predictor(models),
                              report=report, errors_path=errors_csv, report_limit=SHOWN_ROW_ERRORS,
                              lenient=lenient, examples=examples, workers=None)  # the CPUs: wattgpu.csv_workers
        _print_skipped(summary, examples, shown, errors_csv)
        click.echo(f"wrote {'standard output' if output_csv == '-' else output_csv}: {summary.line()}", err=True)
        if errors_csv is not None:
            click.echo(f"wrote {errors_csv}: {summary.skipped} skipped rows", err=True)
        if summary.exit_code:
            sys.exit(summary.exit_code)
        return
    if llm is None or gpu is None:
        raise WattGPUError("give --llm and --gpu (or --input FILE.csv --output FILE.csv)")
    from ..answers import predict_answer

    p = predict_answer(_predictor(models), gpu, llm, make_workload(**wl), dtype=dtype, max_itl_ms=max_itl_ms,
                       max_ttft_ms=max_ttft_ms, prices=(usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour),
                       layout=layout)
    sla = p.get("sla")
    if as_json:
        click.echo(json.dumps(p, indent=2, sort_keys=True))
        return
    if "layout" in p:
        from .layout_table import print_layout_prediction

        print_layout_prediction(p, pue, usd_per_gpu_hour)
        return
    e = p["energy"]
    rows = [
        ("LLM", p["llm"]), ("GPU", p["gpu"]),
        ("workload", f"{p['workload']['kind']}, engine {p['workload']['engine']}, effective batch {p['effective_batch']:.1f}"),
        ("mean power", f"{p['power_w']:.0f} W{_fmt_interval(p['power_intervals'], 1, '.0f')}"
                       + ("" if p["tp"] == 1 else f" per GPU; {p['total_power_w']:.0f} W for {p['tp']} GPUs")),
        ("ITL (per sequence)", f"{ITL.human(p['itl_s'])} {ITL.human_unit}/token"
                               f"{_fmt_interval(p['itl_intervals'], ITL.scale, ITL.fmt)}"),
        ("TTFT", ttft_text(p)),
        ("end-to-end latency", "unbounded (overloaded)" if p["e2e_latency_s"] is None
         else f"{p['e2e_latency_s']:.2f} s per request (TTFT + {p['workload']['output_tokens'] - 1} × ITL)"),
        ("decode step bound", bound_text(p["bound"])),
        ("throughput", f"{num(p['throughput_tok_s'], '.1f')} tokens/s"),
        ("capacity", f"at most {p['max_qps']:.3g} req/s ({p['max_qps'] * p['workload']['output_tokens']:.0f} tokens/s), "
                     f"utilization {p['utilization']:.0%}, KV cache fits {p['max_concurrency']} sequences"),
        ("energy (GPU only)", f"{num(e['j_per_token'], '.3f')} J/token, {num(e['wh_per_request'], '.3f')} Wh/request, "
                              f"{num(e['kwh_per_mtok'], '.3f')} kWh per million tokens"),
        ("baselines", f"TDP {p['baselines']['tdp_w']:.0f} W, load-scaled TDP {p['baselines']['ls_tdp_w']:.0f} W"
                      + ("" if p["tp"] == 1 else " per GPU") + f", roofline ITL {ITL.human(p['baselines']['roofline_itl_s'])} {ITL.human_unit}"),
    ]
    if p["tp"] > 1:
        ar = field("allreduce_s_per_step")
        rows.insert(2, ("GPUs", f"{p['tp']} (tensor parallel; all-reduces {ar.human(p['allreduce_s_per_step'])} "
                                f"{ar.human_unit} per decode step)"))
    if p["idle_power_w"] is not None:
        rows.append(("idle power", f"{p['idle_power_w']:.1f} W ({p['idle_power_source']})"))
    rows += money_rows(e, pue, usd_per_gpu_hour, f"{p['tp']} GPU(s)")
    if sla is not None:
        rows.insert(3, ("SLA", f"batch cap {sla['max_batch']} meets it at the lowest energy per token" if sla["met"]
                        else f"not met: {sla['reason']} (shown at batch cap {sla['max_batch']})"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    click.echo(f"note: mean power {explain_power_method(p['power_method'])}")
    if p["calibration"] is not None:
        click.echo(f"note: {p['calibration']['summary']}")
    if e["usd_per_mtok"] is not None or e["gco2_per_mtok"] is not None:
        click.echo(f"note: cost and carbon include the facility overhead (PUE {pue:g}); "
                   "the energy figures are the GPU's own")
    for w in p["warnings"]:
        if w.startswith("overloaded:"):
            click.echo(f"{w} (throughput held at capacity)")
        else:
            click.echo(f"warning: {w}")


def _fmt_interval(intervals: dict[str, list[float]], scale: float, fmt: str) -> str:
    if "80" not in intervals:
        return ""
    lo, hi = intervals["80"]
    return f"  (80%: {format(lo * scale, fmt)}–{format(hi * scale, fmt)})"


def _print_skipped(summary: Any, examples: dict[str, str], shown: list[str], errors_csv: str | None) -> None:
    """A batch run's skipped rows on stderr: the count of each reason with its first example, then the
    first rows in file order (so 356 rows that do not fit cannot hide 7 typos)."""
    if not summary.skipped:
        return
    from ..batch import REASONS

    click.echo(f"skipped {summary.skipped} rows, by reason:", err=True)
    order = {r: i for i, r in enumerate(REASONS)}
    for reason, n in sorted(summary.reasons.items(), key=lambda t: (-t[1], order.get(t[0], len(order)))):
        click.echo(f"  {reason}: {n} (e.g. {examples.get(reason, '?')})", err=True)
    click.echo(f"first {len(shown)} skipped rows in file order:", err=True)
    for msg in shown:
        click.echo(msg, err=True)
    if summary.skipped > len(shown):
        where = f"all in {errors_csv}" if errors_csv else "--errors FILE lists every one"
        click.echo(f"... {summary.skipped - len(shown)} more skipped rows not shown ({where})", err=True)
