"""The table ``rank --parallel auto`` prints (one row per GPU type, its best layout and the vLLM launch line), and
``predict``'s answer for one layout."""
from __future__ import annotations

import shlex
from typing import Any

import click

from .. import layout as L
from ..layout_search import LayoutRanking


def print_layouts(res: LayoutRanking, show_launch: bool = False) -> None:
    """Print the layout ranking ``res`` and the top candidate's ``vllm serve`` line."""
    llm, workload, choices, link = res.llm, res.workload, res.choices, L.internode_link(res.interconnect)
    limit = f"; ITL ≤ {res.max_itl_ms:g} ms" if res.max_itl_ms is not None else ""
    click.echo(f"{llm.name} — layouts TP × EP × DP × PP on up to {res.max_nodes} node(s) of 8, {link.name} between "
               f"nodes; {workload.input_tokens}→{workload.output_tokens} tokens, batch cap {workload.max_batch} per "
               f"engine{limit}; sorted by energy per token")
    gw = max([3] + [len(c.gpu) for c in choices])
    lw = max([6] + [len(c.layout.describe()) for c in choices])
    click.echo(f"{'#':>3} {'GPU':<{gw}} {'layout':<{lw}} {'GPUs':>4} {'W/GPU':>6} {'kW/node':>7} {'ITL ms':>7} "
               f"{'TTFT ms':>8} {'tok/s':>8} {'J/tok':>7} {'seqs':>6}")
    for i, c in enumerate(choices, 1):
        e = c.estimate
        click.echo(f"{i:>3} {c.gpu:<{gw}} {c.layout.describe():<{lw}} {c.layout.gpus:>4} {e.power_per_gpu_w:>6.0f} "
                   f"{e.power_per_node_w / 1e3:>7.2f} {e.itl_s * 1e3:>7.1f} {e.ttft_s * 1e3:>8.1f} "
                   f"{e.tokens_per_s:>8.0f} {c.j_per_token:>7.3f} {c.sequences:>6}")
    if choices:
        methods = {c.estimate.method for c in choices}
        what = ("anchored: each engine's stage from the learned models, with the layout's all-to-all, stage links "
                "and pipeline bubble, never faster than the roofline" if methods == {"anchored"} else
                "roofline estimates of the layout (bytes / bandwidth, FLOPs / peak, link transfers, the pipeline "
                "bubble), not the learned models" if methods == {"roofline"} else
                "anchored on the learned models where they answer the stage, else roofline (see --json's method)")
        click.echo(f"figures: {what}; seqs = sequences of input + output tokens the KV cache holds")
        for i, c in enumerate(choices if show_launch else choices[:1], 1):
            who = f"#{i}" if show_launch else "the top candidate"
            nodes = f"; spans {c.layout.nodes} nodes: start it with vLLM's multi-node options" if c.layout.nodes > 1 else ""
            click.echo(f"launch {who} ({c.gpu}, {c.layout.describe()}{nodes}): {shlex.join(res.launch_args(c))}")
    if res.excluded:
        click.echo("excluded:")
        for name, why in res.excluded:
            click.echo(f"    {name}: {why}")


def print_layout_prediction(p: dict[str, Any], pue: float, usd_per_gpu_hour: float | None) -> None:
    """Print ``predict``'s answer for a layout (``p``: :data:`wattgpu.record.LAYOUT_PREDICTION`'s JSON) for
    people."""
    from .base import num
    from .text import money_rows

    lay, wl, e = p["layout"], p["workload"], p["energy"]
    link = f", {lay['interconnect']} between nodes" if lay["nodes"] > 1 else ""
    ms = lambda key: f"{p[key] * 1e3:.2f} ms"  # noqa: E731
    rows = [
        ("LLM", p["llm"]), ("GPU", p["gpu"]),
        ("layout", f"{p['label']}: {p['gpus']} GPUs{link}"),
        ("workload", f"{wl['kind']}, engine {wl['engine']}, {p['effective_batch']:.1f} sequences decoding (the KV "
                     f"cache holds {p['kv_sequences']})"),
        ("memory per GPU", f"weights {p['weight_gb_per_gpu']:.1f} GB, KV cache {p['kv_budget_gb_per_gpu']:.1f} GB"),
        ("mean power", f"{p['power_w']:.0f} W per GPU; {p['power_per_node_w'] / 1e3:.2f} kW per node; "
                       f"{p['total_power_w'] / 1e3:.2f} kW for {p['gpus']} GPUs"),
        ("ITL (per sequence)", f"{p['itl_s'] * 1e3:.1f} ms/token (per decode step: all-reduce {ms('allreduce_s_per_step')}, "
                               f"all-to-all {ms('alltoall_s_per_step')}, stage links {ms('p2p_s_per_step')}; "
                               f"pipeline bubble {p['bubble']:.0%})"),
        ("TTFT", f"{p['ttft_s'] * 1e3:.1f} ms (prefill of one prompt through every stage)"),
        ("method", f"{p['method']} (roofline bound: ITL {p['roofline']['itl_s'] * 1e3:.1f} ms, TTFT "
                   f"{p['roofline']['ttft_s'] * 1e3:.1f} ms, {p['roofline']['power_w']:.0f} W per GPU)"),
        ("end-to-end latency", f"{p['e2e_latency_s']:.2f} s per request (TTFT + {wl['output_tokens'] - 1} × ITL)"),
        ("throughput", f"{num(p['throughput_tok_s'], '.1f')} tokens/s"),
        ("capacity", f"at most {p['max_qps']:.3g} req/s, utilization {p['utilization']:.0%}"),
        ("energy (GPU only)", f"{num(e['j_per_token'], '.3f')} J/token, {num(e['wh_per_request'], '.3f')} Wh/request, "
                              f"{num(e['kwh_per_mtok'], '.3f')} kWh per million tokens (all {p['gpus']} GPUs)"),
        ("baselines", f"TDP {p['baselines']['tdp_w']:.0f} W, load-scaled TDP {p['baselines']['ls_tdp_w']:.0f} W per GPU"),
    ]
    rows += money_rows(e, pue, usd_per_gpu_hour, f"{p['gpus']} GPUs")
    sla = p.get("sla")
    if sla is not None:
        rows.insert(3, ("SLA", "met" if sla["met"] else f"not met: {sla['reason']}"))
    rows.append(("launch", shlex.join(p["launch_args"])))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    for w in p["warnings"]:
        click.echo(w if w.startswith("overloaded:") else f"note: {w}")
