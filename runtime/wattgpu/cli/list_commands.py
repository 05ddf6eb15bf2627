"""``wattgpu gpus`` and ``wattgpu llms``: the catalog, hash-verified like predict."""
from __future__ import annotations

import json

import click

from .base import _predictor, guarded, main
from .options import models_option


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Every field, aliases, idle-power basis and each row's sources "
              "(docs/json.md).")
@models_option
@guarded
def gpus(as_json: bool, models: str | None) -> None:
    """List the catalog GPUs (hash-verified like predict): specs, aliases, idle power measured or estimated."""
    from ..listing import gpu_rows

    pred = _predictor(models)
    pred.bundle.verify()  # a damaged bundle is exit 3 here too, though listing reads only its catalog
    rows = gpu_rows(pred.bundle)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    gw = max([3] + [len(r["name"]) for r in rows])  # names are never cut
    click.echo(f"{'GPU':<{gw}} {'TDP W':>6} {'mem GiB':>7} {'BW GB/s':>8} {'FP16 TF':>8} {'year':>5} {'idle W':>12} "
               f"{'trained':>7}  aliases")
    for r in rows:
        idle = f"{r['idle']['w']:.0f} {'meas' if r['idle']['basis'] == 'measured' else 'est'}"
        aliases = ", ".join(r["aliases"])
        click.echo(f"{r['name']:<{gw}} {r['tdp_w']:>6.0f} {r['memory_size_gb']:>7.0f} {r['memory_bandwidth_gb_s']:>8.0f} "
                   f"{r['fp16_tflops']:>8.1f} {r['release_year']:>5} {idle:>12} {'yes' if r['measured_in_training'] else '-':>7}"
                   f"  {aliases}")
    from ..serving.server import IDLE_FRACTION_OF_TDP

    click.echo(f"idle W: meas = measured with a model loaded (source in --json); "
               f"est = {IDLE_FRACTION_OF_TDP:.0%} of TDP (an estimate)")
    click.echo("trained: yes = the models were trained on measurements of this GPU; - = predicted from its spec sheet")
    shared = sorted({a for r in rows for a in r["shared_aliases"]})
    if shared:
        click.echo(f"aliases: each one names its GPU for --gpu; {len(shared)} shared by several GPUs are not shown "
                   f"(--gpu refuses them as ambiguous: {', '.join(shared)}; --json lists them as shared_aliases)")


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help="Every LlmSpec field of each catalog LLM, and the unsupported ones with the reason (docs/json.md).")
@models_option
@guarded
def llms(as_json: bool, models: str | None) -> None:
    """List the catalog LLMs."""
    pred = _predictor(models)
    pred.bundle.verify()
    cat = pred.catalog
    if as_json:
        from ..answers import llms_answer

        click.echo(json.dumps(llms_answer(pred), indent=2))
        return
    lw = max(len(n) for n in [m.name for m in cat.llms] + [n for n, _ in cat.unsupported_llms])
    click.echo(f"{'LLM':<{lw}} {'params B':>9} {'active B':>9} {'class':<24}")
    for m in cat.llms:
        click.echo(f"{m.name:<{lw}} {m.total_params_b:>9.2f} {m.active_params_b:>9.2f} {m.arch_class:<24}")
    for n, why in cat.unsupported_llms:
        click.echo(f"{n:<{lw}} {'':>9} {'':>9} unsupported: {why}")
