"""``wattgpu`` command line: predict, gpus, llms. Input errors exit 2 with one line; never a traceback."""
from __future__ import annotations

import json
import sys
from typing import Any, Callable

import click

from .errors import WattGPUError
from .workload import ENGINES, KINDS, Workload


def _fail(exc: Exception, code: int = 2) -> None:
    one_line = str(exc).replace("\r", "\\r").replace("\n", "\\n")  # names from files may hold newlines
    click.echo(f"error: {one_line}", err=True)
    sys.exit(code)


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn WattGPU errors (and anything unexpected) into a one-line message and an exit status."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except WattGPUError as exc:
            _fail(exc, exc.exit_code)
        except (BrokenPipeError, KeyboardInterrupt):
            sys.exit(130)
        except Exception as exc:  # a bug: still one line, different status
            _fail(RuntimeError(f"internal error ({exc.__class__.__name__}: {exc}); please report it"), 70)
    return wrapper


def workload_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--workload", "kind", type=click.Choice(KINDS), default="offline", show_default=True,
                     help="offline: all requests queued; server: Poisson arrivals at --qps; closed_loop: --concurrency clients."),
        click.option("--max-batch", type=int, default=256, show_default=True, help="Engine batch cap (vLLM max_num_seqs)."),
        click.option("--qps", type=float, default=None, help="Arrival rate in requests/s (server)."),
        click.option("--concurrency", type=float, default=None, help="Concurrent sequences (closed_loop, or a fixed batch)."),
        click.option("--input-tokens", type=int, default=512, show_default=True),
        click.option("--output-tokens", type=int, default=256, show_default=True),
        click.option("--engine", default="vllm", show_default=True, help=f"One of {', '.join(ENGINES)}."),
        click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def make_workload(kind: str, max_batch: int, qps: float | None, concurrency: float | None, input_tokens: int,
                  output_tokens: int, engine: str, gpu_memory_utilization: float) -> Workload:
    return Workload(kind=kind, max_batch=max_batch, qps=qps, concurrency=concurrency, input_tokens=input_tokens,
                    output_tokens=output_tokens, engine=engine, gpu_memory_utilization=gpu_memory_utilization)


def _fmt_interval(intervals: dict[str, list[float]], scale: float, fmt: str) -> str:
    if "80" not in intervals:
        return ""
    lo, hi = intervals["80"]
    return f"  (80%: {format(lo * scale, fmt)}–{format(hi * scale, fmt)})"


_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class _OneLineErrors(click.Group):
    """Click's own usage errors (unknown option, bad number, missing --gpu) as one ``error:`` line, status 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            rc = super().main(*args, **kwargs)
        except _NO_ARGS_IS_HELP as exc:  # bare `wattgpu`: show the help, as click < 8.2 did
            click.echo(exc.format_message())
            sys.exit(0)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            sys.exit(130)
        sys.exit(rc if isinstance(rc, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wattgpu")
def main() -> None:
    """Predict mean GPU power and inter-token latency of serving an LLM on an NVIDIA GPU."""


@main.command()
@click.option("--llm", required=True, help="Catalog id (see `wattgpu llms`), a config.json, or a model directory.")
@click.option("--gpu", required=True, help="Catalog name or alias (see `wattgpu gpus`), or a GPU spec JSON file.")
@workload_options
@click.option("--json", "as_json", is_flag=True, help="Print stable JSON.")
@guarded
def predict(llm: str, gpu: str, as_json: bool, **wl: Any) -> None:
    """Predict power, ITL, throughput and energy for one LLM on one GPU."""
    from .predictor import default_predictor

    p = default_predictor().predict(llm, gpu, make_workload(**wl)).to_dict()
    if as_json:
        click.echo(json.dumps(p, indent=2, sort_keys=True))
        return
    rows = [
        ("LLM", p["llm"]), ("GPU", p["gpu"]),
        ("workload", f"{p['workload']['kind']}, engine {p['workload']['engine']}, effective batch {p['effective_batch']:.1f}"),
        ("mean power", f"{p['power_w']:.0f} W{_fmt_interval(p['power_intervals'], 1, '.0f')}  [{p['power_method']}]"),
        ("ITL (per sequence)", f"{p['itl_s'] * 1e3:.1f} ms/token{_fmt_interval(p['itl_intervals'], 1e3, '.1f')}"),
        ("throughput", f"{p['throughput_tok_s']:.1f} tokens/s"),
        ("energy", f"{p['energy_per_token_j']:.3f} J/token, {p['energy_per_request_j']:.1f} J/request"),
        ("baselines", f"TDP {p['baselines']['tdp_w']:.0f} W, load-scaled TDP {p['baselines']['ls_tdp_w']:.0f} W, "
                      f"roofline ITL {p['baselines']['roofline_itl_s'] * 1e3:.1f} ms"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    for w in p["warnings"]:
        click.echo(f"warning: {w}")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@guarded
def gpus(as_json: bool) -> None:
    """List the catalog GPUs."""
    from .specs import default_catalog

    cat = default_catalog()
    if as_json:
        click.echo(json.dumps([g.to_dict() for g in cat.gpus], indent=2))
        return
    click.echo(f"{'GPU':<52} {'TDP W':>6} {'mem GB':>7} {'BW GB/s':>8} {'FP16 TF':>8} {'year':>5}")
    for g in cat.gpus:
        click.echo(f"{g.name:<52} {g.tdp_w:>6.0f} {g.memory_size_gb:>7.0f} {g.memory_bandwidth_gb_s:>8.0f} "
                   f"{g.fp16_tflops:>8.1f} {g.release_year:>5}")


@main.command()
@click.option("--json", "as_json", is_flag=True)
@guarded
def llms(as_json: bool) -> None:
    """List the catalog LLMs."""
    from .specs import default_catalog

    cat = default_catalog()
    if as_json:
        out = [m.to_dict() for m in cat.llms]
        out += [{"name": n, "unsupported_reason": why} for n, why in cat.unsupported_llms]
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"{'LLM':<62} {'params B':>9} {'active B':>9} {'class':<24}")
    for m in cat.llms:
        click.echo(f"{m.name:<62} {m.total_params_b:>9.2f} {m.active_params_b:>9.2f} {m.arch_class:<24}")
    for n, why in cat.unsupported_llms:
        click.echo(f"{n:<62} {'':>9} {'':>9} unsupported: {why}")


if __name__ == "__main__":
    main()
