"""Every word of the CLI explained (issue 32 item 5): each option has help, --json points to docs/json.md,
rank sorts by cost."""
from __future__ import annotations

import click
from click.testing import CliRunner

from wattgpu.cli import main


def _commands(group: click.Group, path: tuple[str, ...] = ("wattgpu",)):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # commands load on first use: not all are in group.commands yet
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))
        else:
            yield " ".join((*path, name)), cmd


def test_every_option_has_help_and_json_points_to_the_doc() -> None:
    missing, json_without_doc = [], []
    for name, cmd in _commands(main):
        for p in cmd.params:
            if isinstance(p, click.Option) and not (p.help or "").strip():
                missing.append(f"{name} {p.opts[0]}")
            if isinstance(p, click.Option) and "--json" in p.opts and "docs/json.md" not in (p.help or ""):
                json_without_doc.append(name)
    assert not missing, missing
    assert not json_without_doc, json_without_doc


def test_rank_sorts_by_cost_and_needs_a_price() -> None:
    args = ["rank", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "NVIDIA L4,NVIDIA H100 SXM5 80GB,NVIDIA A30",
            "--sort", "cost"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "needs a price" in r.stderr
    import json

    from wattgpu.ranking import cost_per_mtok

    r = CliRunner().invoke(main, [*args, "--usd-per-gpu-hour", "2", "--usd-per-kwh", "0.1", "--json"])
    assert r.exit_code == 0, r.output
    costs = [c["energy"]["usd_per_mtok"] + c["energy"]["usd_per_mtok_gpu_hours"] for c in json.loads(r.output)["candidates"]]
    assert costs == sorted(costs) and len(costs) == 3
    assert cost_per_mtok({"usd_per_mtok": 1.0, "usd_per_mtok_gpu_hours": None}) == 1.0
