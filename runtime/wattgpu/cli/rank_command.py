"""``wattgpu rank``: GPUs for one LLM (the question: wattgpu.questions.RANK; the answer: wattgpu.answers) and its
table, whose columns read the output declaration (wattgpu.record)."""
from __future__ import annotations

import json
import shlex
from typing import Any

import click

from .. import questions as Q
from .base import _predictor, fail, guarded, main, num
from .options import make_workload, models_option, option, options, price_options, workload_options
from .text import explain_power_method


@main.command("rank")
@option(Q.RANK.param("llm"), required=True)
@workload_options
@options(Q.RANK.param(n) for n in ("max_itl_ms", "max_ttft_ms", "strict"))
@option(Q.RANK.param("gpus"))
@options(Q.RANK.param(n) for n in ("sort", "max_model_len"))
@click.option("--launch", "show_launch", is_flag=True,
              help="Print the `vllm serve` line of every candidate (default: the top candidate's only).")
@options(Q.RANK.param(n) for n in ("replicas", "max_utilization", "dtype"))
@options(Q.LAYOUT_SEARCH)
@price_options
@click.option("--json", "as_json", is_flag=True, help="Print stable JSON (every key explained in docs/json.md).")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Write an SVG of energy per token vs ITL with the SLA line.")
@models_option
@guarded
def rank_cmd(llm: str, max_itl_ms: float | None, max_ttft_ms: float | None, strict: bool, gpus: str | None, sort: str,
             usd_per_kwh: float | None, gco2_per_kwh: float | None, pue: float, usd_per_gpu_hour: float | None,
             as_json: bool, plot_path: str | None, replicas: str | None, max_utilization: float | None,
             max_model_len: int | None, show_launch: bool, dtype: str, models: str | None, parallel: str = "tp",
             max_nodes: int = 4, interconnect: str = "InfiniBand NDR", **wl: Any) -> None:
    """Rank GPUs for serving one LLM: candidates by energy per token, excluded GPUs with the reason.

    Exits 4 when no GPU qualifies (the exclusions are still printed)."""
    if plot_path is not None:
        from ..plot import check_svg_path

        check_svg_path(plot_path)  # before any work: a wrong name fails fast
    names = None if gpus is None else [g.strip() for g in gpus.split(",") if g.strip()]
    auto = str(wl["tp"]).strip().lower() == "auto"
    if auto:
        wl["tp"] = "1"
    workload, predictor = make_workload(**wl), _predictor(models)
    if parallel == "auto":
        _rank_layouts(predictor, llm, workload, names, max_nodes, interconnect, max_itl_ms, as_json, show_launch)
        return

    from ..answers import rank_result

    tp_given = click.get_current_context().get_parameter_source("tp") != click.core.ParameterSource.DEFAULT
    res, fell_back = rank_result(predictor, llm, workload, tp_auto=auto, tp_given=tp_given, gpus=names,
                                 max_itl_ms=max_itl_ms, strict=strict, sort=sort, usd_per_kwh=usd_per_kwh,
                                 gco2_per_kwh=gco2_per_kwh, pue=pue, replicas=replicas, dtype=dtype,
                                 max_ttft_ms=max_ttft_ms, usd_per_gpu_hour=usd_per_gpu_hour,
                                 max_utilization=max_utilization, max_model_len=max_model_len)
    if fell_back:
        # no single GPU holds the model: the question is then which group of GPUs, as --tp auto answers
        click.echo(f"note: {res.llm} does not fit on any of these GPUs alone; ranking tensor-parallel groups of "
                   "1, 2, 4 and 8 GPUs (--tp auto; pass --tp 1 for single GPUs only)", err=True)
    if plot_path is not None:
        from ..plot import write_svg

        try:
            write_svg(res, plot_path)
        except OSError as exc:
            from ..errors import WattGPUError

            from ..safeio import write_problem

            raise WattGPUError(f"--plot {plot_path}: cannot write: {write_problem(exc)}") from None
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=2, sort_keys=True))
    else:
        _print_rank(res, show_launch)
        if plot_path:
            click.echo(f"plot written to {plot_path}")
    if not res.candidates:
        from ..errors import NO_CANDIDATE_EXIT

        fail(f"no GPU qualifies for {res.llm} under this load and SLA (every one is excluded; see the reasons); "
             f"exit status {NO_CANDIDATE_EXIT}", NO_CANDIDATE_EXIT)


def _rank_layouts(predictor: Any, llm: str, workload: Any, names: list[str] | None, max_nodes: int,
                  interconnect: str, max_itl_ms: float | None, as_json: bool, show_launch: bool) -> None:
    """``rank --parallel auto``: the layout search (wattgpu.layout_search) and its table or JSON."""
    from ..layout_search import layouts_answer
    from .layout_table import print_layouts

    res = layouts_answer(predictor, llm, workload, names, max_nodes, interconnect, max_itl_ms)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=2, sort_keys=True))
    else:
        print_layouts(res, show_launch)
    if not res.choices:
        from ..errors import NO_CANDIDATE_EXIT

        fail(f"no layout of these GPUs on up to {max_nodes} node(s) holds {res.llm.name} within the limits; exit "
             f"status {NO_CANDIDATE_EXIT}", NO_CANDIDATE_EXIT)


_BOUND_SHORT = {"memory": "mem", "compute": "comp", "interconnect": "link"}


def rank_columns(fleet: bool, multi: bool, priced: bool, rented: bool, carbon: bool) -> list[tuple[str, str, int]]:
    """The number columns of the rank table: (output field of :mod:`wattgpu.record`, header, width); each
    cell is the field's value scaled and formatted as its declaration says."""
    cols = [("replicas", "repl", 6), ("fleet_power_w", "fleet W", 9)] if fleet else []
    cols += ([("tp", "N", 2), ("total_power_w", "total W", 8), ("power_w", "W/GPU", 7)] if multi
             else [("power_w", "power W", 8)])
    cols += [("max_batch", "cap", 5), ("itl_s", "ITL ms", 7), ("ttft_s", "TTFT ms", 8), ("bound", "bound", 5),
             ("throughput_tok_s", "tok/s", 8), ("max_qps", "max q/s", 8), ("utilization", "util", 5),
             ("j_per_token", "J/tok", 8), ("wh_per_request", "Wh/req", 7), ("kwh_per_mtok", "kWh/Mtok", 9)]
    cols += [("usd_per_mtok", "$/Mtok*", 8)] if priced else []
    cols += [("usd_per_mtok_gpu_hours", "$GPUh/Mtok", 10)] if rented else []
    cols += [("gco2_per_mtok", "gCO2/Mtok*", 10)] if carbon else []
    return cols


def rank_cell(c: Any, energy: dict[str, Any], name: str, width: int) -> str:
    """One cell of the rank table: field ``name`` of candidate ``c`` (or of its ``energy`` figures)."""
    from ..record import field

    if name == "bound":
        return f"{_BOUND_SHORT.get(str(c.bound.get('kind')), '?'):>{width}}"
    out = field(name)
    value = energy[name] if name in energy else getattr(c, name)
    if value is None:
        if name == "ttft_s":
            return f"{'inf':>{width}}"  # unbounded
        value = 0.0
    if out.kind == "integer":
        return f"{value:>{width}}"
    return num(value * out.scale, f">{width}{out.fmt}")


def _print_rank(res: Any, show_launch: bool = False) -> None:
    wl = res.workload
    load = f"server at {wl.qps:g} req/s" if wl.kind == "server" else f"{wl.kind}, batch cap {wl.max_batch}"
    fleet = res.replicas is not None
    if fleet:
        load += f" in total, replicas {res.replicas}"
    limits = ([f"ITL ≤ {res.max_itl_ms:g} ms ({res.sla_basis})"] if res.max_itl_ms is not None else []) + (
        [f"TTFT ≤ {res.max_ttft_ms:g} ms"] if res.max_ttft_ms is not None else [])
    sla = "no SLA" if not limits else "SLA " + ", ".join(limits) + "; batch cap searched per GPU"
    if fleet and res.max_utilization is not None:
        sla += f"; replica utilization ≤ {res.max_utilization:.0%}"
    elif res.max_utilization is not None:
        sla += f"; utilization ≤ {res.max_utilization:.0%} ranked first"
    order = "fleet energy" if fleet and res.sort == "energy" else res.sort
    group = " tensor-parallel groups of 1/2/4/8 GPUs;" if res.tp == "auto" else (
        f" {res.tp} GPUs per group;" if res.tp != 1 else "")
    click.echo(f"{res.llm} — {load}, {wl.input_tokens}→{wl.output_tokens} tokens, {wl.engine};{group} {sla}; "
               f"sorted by {order}")
    if fleet:
        click.echo("assumption: load split evenly over independent replicas (qps / n each; a replica is one GPU "
                   "or one tensor-parallel group); fleet power = n × replica power; J/token and Wh/request are the fleet's")
    priced = res.usd_per_kwh is not None
    carbon = res.gco2_per_kwh is not None
    multi = res.tp != 1
    gw = max([3] + [len(c.gpu) for c in res.candidates])  # GPU names are never cut
    rented = res.usd_per_gpu_hour is not None
    cols = rank_columns(fleet, multi, priced, rented, carbon)
    click.echo(f"{'#':>3} {'GPU':<{gw}} {'meas':>4}" + "".join(f" {h:>{w}}" for _, h, w in cols))
    above = False
    for i, c in enumerate(res.candidates, 1):
        if (not fleet and not above and res.max_utilization is not None and c.utilization is not None
                and c.utilization > res.max_utilization + 1e-12):
            above = True
            click.echo(f"--- above the {res.max_utilization:.0%} headroom (queues grow sharply with bursts); "
                       "--replicas auto adds replicas instead ---")
        e = c.energy_figures
        line = f"{i:>3} {c.gpu:<{gw}} {'yes' if c.measured_in_training else '-':>4}"
        click.echo(line + "".join(f" {rank_cell(c, e, name, w)}" for name, _, w in cols))
    if fleet and res.candidates:
        click.echo("(power W, ITL ms, TTFT ms, tok/s, max q/s and util are per replica)")
        for i, c in enumerate(res.candidates, 1):
            for w in c.warnings:
                if "far below the" in w and "headroom" in w:
                    click.echo(f"note (#{i} {c.gpu}{f' ×{c.tp}' if c.tp > 1 else ''}): {w}")
    if res.candidates:
        click.echo("meas = yes: the models were trained on measurements of this GPU (-: predicted from its spec "
                   "sheet); cap = engine batch cap (vLLM --max-num-seqs); TTFT = mean time to first token; "
                   "bound = the largest roofline part of a decode step (mem = DRAM, comp = tensor cores, link = "
                   "the TP group's all-reduces); util = offered load ÷ capacity")
        for i, c in enumerate(res.candidates if show_launch else res.candidates[:1], 1):
            if c.launch_args is None:
                continue
            who = "the top candidate" if not show_launch else f"#{i}"
            click.echo(f"launch {who} ({c.gpu}{f' ×{c.tp}' if c.tp > 1 else ''}"
                       f"{f', {c.replicas} replica' + ('s' if c.replicas != 1 else '') if fleet else ''}; KV cache "
                       f"holds {c.kv_sequences_at_max_model_len} sequence{'s' if c.kv_sequences_at_max_model_len != 1 else ''} of {c.max_model_len} "
                       f"tokens): {shlex.join(c.launch_args)}")
        if not show_launch and len(res.candidates) > 1:
            click.echo("(--launch prints the line of every candidate)")
    if rented:
        click.echo(f"$GPUh/Mtok = GPU rent at ${res.usd_per_gpu_hour:g} per GPU-hour × GPUs per million tokens")
    if priced or carbon:
        click.echo(f"* includes the facility overhead (PUE {res.pue:g}); J/tok, Wh/req and kWh/Mtok are the GPU's own energy")
    methods = sorted({c.power_method for c in res.candidates})
    for m in methods:
        who = "all candidates" if len(methods) == 1 else ", ".join(c.gpu for c in res.candidates if c.power_method == m)
        click.echo(f"note ({who}): mean power {explain_power_method(m)}")
    if res.excluded:
        click.echo("excluded:")
        for x in res.excluded:
            click.echo(f"    {x.gpu}{f' ×{x.tp}' if x.tp > 1 else ''}: {x.reason}")
    if res.candidates:
        shared = set(res.candidates[0].warnings).intersection(*(set(c.warnings) for c in res.candidates[1:]))
        for w in sorted(shared):
            click.echo(f"note (all candidates): {w}")
        measured = [c.gpu for c in res.candidates if c.calibration is not None and c.calibration["gpu"] is not None]
        if res.candidates[0].calibration is not None:
            click.echo(f"note: {res.candidates[0].calibration['bundle_summary']}"
                       + (f"; GPU factors applied to {', '.join(measured)}" if measured else "; no candidate was measured"))
        n = sum(1 for c in res.candidates if set(c.warnings) - shared)
        if n:
            click.echo(f"note: {n} candidates carry GPU-specific warnings (see --json)")
