"""The table ``rank --parallel auto`` prints: one row per GPU type, its best layout and the vLLM launch line."""
from __future__ import annotations

import shlex
import click

from .. import layout as L
from ..layout_search import LayoutRanking


def print_layouts(res: LayoutRanking, show_launch: bool = False) -> None:
    """Print the layout ranking ``res`` (roofline figures) and the top candidate's ``vllm serve`` line."""
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
        click.echo("figures are roofline estimates of the layout (bytes / bandwidth, FLOPs / peak, link transfers, "
                   "the pipeline bubble), not the learned models; seqs = sequences of input + output tokens the KV "
                   "cache holds")
        for i, c in enumerate(choices if show_launch else choices[:1], 1):
            who = f"#{i}" if show_launch else "the top candidate"
            nodes = f"; spans {c.layout.nodes} nodes: start it with vLLM's multi-node options" if c.layout.nodes > 1 else ""
            click.echo(f"launch {who} ({c.gpu}, {c.layout.describe()}{nodes}): {shlex.join(res.launch_args(c))}")
    if res.excluded:
        click.echo("excluded:")
        for name, why in res.excluded:
            click.echo(f"    {name}: {why}")
