"""``wattgpu`` command line: predict, rank, gpus, llms, calibrate. Input errors exit 2 with one line; never a traceback."""
from __future__ import annotations

import json
import shlex
import sys
from typing import Any, Callable

import click

from .errors import WattGPUError
from .workload import (ENGINE_ERAS, ENGINES, ITL_STATS, KINDS, KV_CACHE_DTYPES, WORKLOAD_CHOICES, WORKLOAD_NUMBERS,
                       Workload)


def fail(problem: object, code: int = 2) -> None:
    """Print ``problem`` (an exception or a message) as one ``error:`` line on stderr and exit ``code``
    (also wattgpu-train's way out)."""
    one_line = str(problem).replace("\r", "\\r").replace("\n", "\\n")  # names from files may hold newlines
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
            fail(exc, exc.exit_code)
        except (BrokenPipeError, KeyboardInterrupt):
            sys.exit(130)
        except OSError as exc:
            from .safeio import WRITE_ERRNOS, write_problem

            if exc.errno not in WRITE_ERRNOS:  # not an output that cannot be written: a bug
                fail(f"internal error ({exc.__class__.__name__}: {exc}); please report it", 70)
            fail(f"cannot write the output: {write_problem(exc)}", 2)  # e.g. stdout redirected to /dev/full
        except Exception as exc:  # a bug: still one line, different status
            fail(f"internal error ({exc.__class__.__name__}: {exc}); please report it", 70)
    return wrapper


_WL = Workload()  # the defaults live once, on the Workload dataclass
SHOWN_ROW_ERRORS = 10  # skipped CSV rows printed on stderr; the rest are counted by reason (and --errors FILE)


def workload_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--workload", "kind", type=click.Choice(KINDS), default=None,
                     help="offline: all requests queued; server: Poisson arrivals at --qps; closed_loop: --concurrency "
                          "clients. Default: server when --qps is given, else offline."),
        click.option("--max-batch", type=int, default=_WL.max_batch, show_default=True, help="Engine batch cap (vLLM max_num_seqs)."),
        click.option("--qps", type=float, default=None, help="Arrival rate in requests/s (server)."),
        click.option("--concurrency", type=float, default=None, help="Concurrent sequences (closed_loop, or a fixed batch)."),
        click.option("--input-tokens", type=int, default=_WL.input_tokens, show_default=True,
                     help="Prompt length of each request (tokens)."),
        click.option("--output-tokens", type=int, default=_WL.output_tokens, show_default=True,
                     help="Tokens generated per request."),
        click.option("--engine", default=_WL.engine, show_default=True, help=f"One of {', '.join(ENGINES)}."),
        click.option("--gpu-memory-utilization", type=float, default=_WL.gpu_memory_utilization, show_default=True,
                     help="Share of GPU memory the engine may use for weights and KV cache (vLLM's flag of the same name)."),
        click.option("--kv-cache-dtype", type=click.Choice(KV_CACHE_DTYPES), default=_WL.kv_cache_dtype, show_default=True,
                     help="KV-cache element type: auto (16-bit) or fp8 (1 byte)."),
        click.option("--engine-era", type=click.Choice(ENGINE_ERAS), default="current", show_default=True,
                     help="Serving-stack era: current = vLLM >= 0.6 and its contemporaries (today's stack); "
                          "legacy = older stacks (vLLM <= 0.5, HF transformers loops, TGIS)."),
        click.option("--itl-stat", type=click.Choice(ITL_STATS), default="mean", show_default=True,
                     help="Which ITL statistic to predict: mean decode gap per request ((e2e - TTFT)/(tokens - 1)) "
                          "or the median inter-token gap."),
        click.option("--tp", default="1", show_default=True,
                     help="Tensor-parallel degree: GPUs of the chosen type the model is split over "
                          "(rank also takes 'auto': tries 1, 2, 4, 8 per GPU type)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def parse_tp(text: str) -> int:
    """``--tp`` as a whole number of GPUs, or a one-line error naming the field."""
    from .errors import SpecValidationError
    from .parallel import check_tp_value

    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SpecValidationError("workload", "tp", text, "a whole number of GPUs >= 1 ('auto' only with rank)") from None
    return check_tp_value(int(value) if value.is_integer() else value)


def make_workload(kind: str | None, max_batch: int, qps: float | None, concurrency: float | None, input_tokens: int,
                  output_tokens: int, engine: str, gpu_memory_utilization: float, kv_cache_dtype: str = "auto",
                  engine_era: str = "current", itl_stat: str = "mean", tp: str = "1") -> Workload:
    if kind is None:
        kind = "server" if qps is not None else "offline"
    return Workload(kind=kind, max_batch=max_batch, qps=qps, concurrency=concurrency, input_tokens=input_tokens,
                    output_tokens=output_tokens, engine=engine, gpu_memory_utilization=gpu_memory_utilization,
                    kv_cache_dtype=kv_cache_dtype, engine_era=engine_era, itl_stat=itl_stat, tp=parse_tp(tp))


def dtype_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--dtype", default="auto", show_default=True,
                        help="Weight dtype as served: auto (the checkpoint's), bfloat16, float16, fp8, int8, int4.")(fn)


READABLE_FIXED = 1e7  # at and above this, fixed-point figures switch to 4 significant digits


def num(x: float, spec: str) -> str:
    """``format(x, spec)`` for a fixed-point ``spec`` such as ``">8.3f"``; 4 significant digits in the same
    width once ``|x|`` reaches READABLE_FIXED (an idle server's J/token can be 1e+20, not 21 digits)."""
    if abs(x) >= READABLE_FIXED and x == x and abs(x) != float("inf"):
        return format(x, spec[:spec.index(".")] + ".4g")
    return format(x, spec)


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


def models_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--models", "models", default=None, metavar="DIR",
                        help="Model bundle directory (`wattgpu-train fit --out DIR`); default $WATTGPU_MODELS, "
                             "else the packaged models.")(fn)


def _predictor(models: str | None) -> Any:
    """The predictor over ``--models DIR`` (or $WATTGPU_MODELS, or the packaged bundle)."""
    from .predictor import Predictor, check_bundle_dir, default_predictor

    if models:
        check_bundle_dir(models, "--models")  # named as the option the user typed
        return Predictor(models)
    return default_predictor()


def price_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--usd-per-kwh", type=float, default=None, help="Electricity price; adds $ per million tokens."),
        click.option("--gco2-per-kwh", type=float, default=None, help="Grid carbon intensity; adds gCO2e per million tokens."),
        click.option("--pue", type=float, default=1.0, show_default=True, help="Facility PUE applied to cost and carbon."),
        click.option("--usd-per-gpu-hour", type=float, default=None,
                     help="GPU rent ($ per GPU-hour); adds the GPU-hour cost per million tokens."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


@main.command()
@click.option("--llm", default=None, help="Catalog id (see `wattgpu llms`), a config.json, or a model directory.")
@click.option("--gpu", default=None, help="Catalog name or alias (see `wattgpu gpus`), or a GPU spec JSON file.")
@workload_options
@dtype_option
@price_options
@click.option("--input", "input_csv", default=None, type=click.Path(dir_okay=False),
              help="CSV of many predictions, one row each; needs --output. Columns: llm, gpu (required) and, "
                   "optional (an empty cell or a missing column takes the option's value): workload (or kind), "
                   f"{', '.join((*WORKLOAD_NUMBERS, *(c for c in WORKLOAD_CHOICES if c != 'kind')))}, dtype (as --dtype). "
                   "Any other "
                   "column is an error naming the closest one (see --lenient); docs/json.md lists the output columns.")
@click.option("--lenient", is_flag=True,
              help="With --input: warn about a column that is not an input column and copy it through, "
                   "instead of refusing the file.")
@click.option("--output", "output_csv", default=None, type=click.Path(dir_okay=False), help="CSV to write (with --input).")
@click.option("--on-error", type=click.Choice(["skip", "stop"]), default="skip", show_default=True,
              help="With --input: skip a bad row (reported with its line, `error` column) or stop at it.")
@click.option("--errors", "errors_csv", default=None, type=click.Path(dir_okay=False),
              help="With --input: write every skipped row (line, column, reason, error) to this CSV; stderr "
                   f"shows the first {SHOWN_ROW_ERRORS} and a summary by reason.")
@click.option("--max-itl-ms", type=float, default=None,
              help="ITL SLA (ms): search the batch cap (1, 2, 4, … up to --max-batch and memory) for the one that meets "
                   "it at the lowest energy per token.")
@click.option("--max-ttft-ms", type=float, default=None, help="TTFT SLA (ms), searched like --max-itl-ms.")
@click.option("--json", "as_json", is_flag=True, help="Print stable JSON (every key explained in docs/json.md).")
@models_option
@guarded
def predict(llm: str | None, gpu: str | None, as_json: bool, usd_per_kwh: float | None, gco2_per_kwh: float | None,
            pue: float, usd_per_gpu_hour: float | None, max_itl_ms: float | None, max_ttft_ms: float | None,
            input_csv: str | None, output_csv: str | None, on_error: str, errors_csv: str | None, lenient: bool,
            dtype: str, models: str | None, **wl: Any) -> None:
    """Predict power, ITL, throughput and energy for one LLM on one GPU (or many rows with --input)."""
    from .errors import WattGPUError

    if errors_csv is not None and input_csv is None:
        raise WattGPUError("--errors goes with --input (it lists the CSV rows that were skipped)")
    if input_csv is not None or output_csv is not None:
        if input_csv is None or output_csv is None:
            raise WattGPUError("--input and --output go together (CSV in, CSV out)")
        if llm is not None or gpu is not None:
            raise WattGPUError("--input takes llm and gpu from the CSV; drop --llm/--gpu")
        if dtype.strip().lower() != "auto":
            raise WattGPUError("--dtype applies to --llm; with --input give each row's checkpoint instead")
        if max_itl_ms is not None or max_ttft_ms is not None:
            raise WattGPUError("--max-itl-ms/--max-ttft-ms apply to one --llm/--gpu; use `wattgpu rank` for many GPUs")
        from .batch import predict_csv

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
                              lenient=lenient, examples=examples)
        _print_skipped(summary, examples, shown, errors_csv)
        click.echo(f"wrote {output_csv}: {summary.line()}", err=True)
        if errors_csv is not None:
            click.echo(f"wrote {errors_csv}: {summary.skipped} skipped rows", err=True)
        if summary.exit_code:
            sys.exit(summary.exit_code)
        return
    if llm is None or gpu is None:
        raise WattGPUError("give --llm and --gpu (or --input FILE.csv --output FILE.csv)")
    from .answers import predict_answer

    p = predict_answer(_predictor(models), gpu, llm, make_workload(**wl), dtype=dtype, max_itl_ms=max_itl_ms,
                       max_ttft_ms=max_ttft_ms, prices=(usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour))
    sla = p.get("sla")
    if as_json:
        click.echo(json.dumps(p, indent=2, sort_keys=True))
        return
    e = p["energy"]
    rows = [
        ("LLM", p["llm"]), ("GPU", p["gpu"]),
        ("workload", f"{p['workload']['kind']}, engine {p['workload']['engine']}, effective batch {p['effective_batch']:.1f}"),
        ("mean power", f"{p['power_w']:.0f} W{_fmt_interval(p['power_intervals'], 1, '.0f')}"
                       + ("" if p["tp"] == 1 else f" per GPU; {p['total_power_w']:.0f} W for {p['tp']} GPUs")),
        ("ITL (per sequence)", f"{p['itl_s'] * 1e3:.1f} ms/token{_fmt_interval(p['itl_intervals'], 1e3, '.1f')}"),
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
                      + ("" if p["tp"] == 1 else " per GPU") + f", roofline ITL {p['baselines']['roofline_itl_s'] * 1e3:.1f} ms"),
    ]
    if p["tp"] > 1:
        rows.insert(2, ("GPUs", f"{p['tp']} (tensor parallel; all-reduces {p['allreduce_s_per_step'] * 1e3:.2f} ms per decode step)"))
    if p["idle_power_w"] is not None:
        rows.append(("idle power", f"{p['idle_power_w']:.1f} W ({p['idle_power_source']})"))
    if e["usd_per_mtok"] is not None:
        rows.append(("cost", f"${num(e['usd_per_mtok'], '.4f')} per million tokens (PUE {pue:g})"))
    if e["usd_per_mtok_gpu_hours"] is not None:
        rows.append(("GPU rent", f"${num(e['usd_per_mtok_gpu_hours'], '.4f')} per million tokens "
                                 f"(${usd_per_gpu_hour:g} per GPU-hour × {p['tp']} GPU(s))"))
    if e["gco2_per_mtok"] is not None:
        rows.append(("carbon", f"{num(e['gco2_per_mtok'], '.1f')} gCO2e per million tokens (PUE {pue:g})"))
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


def _print_skipped(summary: Any, examples: dict[str, str], shown: list[str], errors_csv: str | None) -> None:
    """A batch run's skipped rows on stderr: the count of each reason with its first example, then the
    first rows in file order (so 356 rows that do not fit cannot hide 7 typos)."""
    if not summary.skipped:
        return
    from .batch import REASONS

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


def dur(seconds: float) -> str:
    """A duration as ``12.3 ms`` below 10 s, else ``12.35 s``."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{num(seconds, '.2f')} s"


def ttft_text(p: dict[str, Any]) -> str:
    """The TTFT line of ``predict``: the total and its parts."""
    if p["ttft_s"] is None:
        return "unbounded: the queue grows without limit (overloaded)"
    b = p["ttft_breakdown"]
    parts = f"prefill {dur(b['prefill_s'])} in {b['prefill_steps']} step(s) of ≤ {b['prefill_budget_tokens']} tokens"
    if b.get("prefill_allreduce_s", 0.0) >= 5e-5:
        parts += f" (incl. all-reduces {dur(b['prefill_allreduce_s'])})"
    if b["prefill_queue_s"] >= 5e-5:
        parts += f", behind other prompts {dur(b['prefill_queue_s'])}"
    if b["slot_wait_s"] and b["slot_wait_s"] >= 5e-5:
        parts += f", waiting for a batch slot {dur(b['slot_wait_s'])}"
    return f"{dur(p['ttft_s'])} ({parts}; compute roofline {dur(p['baselines']['prefill_roofline_s'])})"


def bound_text(b: dict[str, Any]) -> str:
    """``memory-bound (memory 73 %, compute 27 %, interconnect 0 %)``."""
    return (f"{b['kind']}-bound (memory {b['memory_share']:.0%}, compute {b['compute_share']:.0%}, "
            f"interconnect {b['interconnect_share']:.0%} of the roofline parts)")


def explain_power_method(method: str) -> str:
    """The power method of a prediction in plain words (for the notes under a table)."""
    if method.startswith("server mix"):
        return ("mixes idle and busy power: the GPU idles between requests, so mean power = idle power + "
                "(share of time busy) × (busy power − idle power)")
    if method.startswith("learned (server"):
        return "is predicted directly by the model, which was trained on measured server (arrival-rate) runs"
    return "is predicted directly by the model trained on measured runs"


@main.command("rank")
@click.option("--llm", required=True, help="Catalog id (see `wattgpu llms`), a config.json, or a model directory.")
@workload_options
@click.option("--max-itl-ms", type=float, default=None,
              help="Latency SLA: largest acceptable ITL per sequence (ms); the batch cap is searched to meet it.")
@click.option("--max-ttft-ms", type=float, default=None,
              help="Latency SLA: largest acceptable mean time to first token (ms); the batch cap is searched to meet it.")
@click.option("--strict", is_flag=True, help="Judge the SLA by the ITL interval's upper bound (95%, else 80%).")
@click.option("--gpus", default=None, help="Comma-separated GPU names/aliases (default: the whole catalog).")
@click.option("--sort", type=click.Choice(["energy", "power", "itl", "cost"]), default="energy", show_default=True,
              help="Order of the candidates: energy per token (with --replicas: fleet energy), mean power, ITL, or "
                   "cost ($ per million tokens: --usd-per-gpu-hour rent plus --usd-per-kwh electricity).")
@click.option("--max-model-len", type=int, default=None,
              help="Longest sequence (prompt + output tokens) the launched server must accept; the launch lines set "
                   "vLLM's --max-model-len to it and count the sequences the KV cache holds at that length. "
                   "[default: the model's context, lowered to what the KV cache holds]")
@click.option("--launch", "show_launch", is_flag=True,
              help="Print the `vllm serve` line of every candidate (default: the top candidate's only).")
@click.option("--replicas", default=None,
              help="auto: per GPU type the fewest replicas that carry --qps (total) within the SLA and "
                   "--max-utilization; or a fixed count.")
@click.option("--max-utilization", type=float, default=None,
              help="Headroom for a server load: highest utilization (qps per replica ÷ its capacity) a replica "
                   "may run at. With --replicas auto it sizes the fleet; without --replicas, single GPUs above it "
                   "are ranked after those within it. [default: 0.8]")
@dtype_option
@price_options
@click.option("--json", "as_json", is_flag=True, help="Print stable JSON (every key explained in docs/json.md).")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Write an SVG of energy per token vs ITL with the SLA line.")
@models_option
@guarded
def rank_cmd(llm: str, max_itl_ms: float | None, max_ttft_ms: float | None, strict: bool, gpus: str | None, sort: str,
             usd_per_kwh: float | None, gco2_per_kwh: float | None, pue: float, usd_per_gpu_hour: float | None,
             as_json: bool, plot_path: str | None, replicas: str | None, max_utilization: float | None,
             max_model_len: int | None, show_launch: bool, dtype: str, models: str | None, **wl: Any) -> None:
    """Rank GPUs for serving one LLM: candidates by energy per token, excluded GPUs with the reason.

    Exits 4 when no GPU qualifies (the exclusions are still printed)."""
    if plot_path is not None:
        from .plot import check_svg_path

        check_svg_path(plot_path)  # before any work: a wrong name fails fast
    names = None if gpus is None else [g.strip() for g in gpus.split(",") if g.strip()]
    auto = str(wl["tp"]).strip().lower() == "auto"
    if auto:
        wl["tp"] = "1"
    workload, predictor = make_workload(**wl), _predictor(models)

    from .answers import rank_result

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
        from .plot import write_svg

        try:
            write_svg(res, plot_path)
        except OSError as exc:
            from .errors import WattGPUError

            from .safeio import write_problem

            raise WattGPUError(f"--plot {plot_path}: cannot write: {write_problem(exc)}") from None
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=2, sort_keys=True))
    else:
        _print_rank(res, show_launch)
        if plot_path:
            click.echo(f"plot written to {plot_path}")
    if not res.candidates:
        from .errors import NO_CANDIDATE_EXIT

        fail(f"no GPU qualifies for {res.llm} under this load and SLA (every one is excluded; see the reasons); "
             f"exit status {NO_CANDIDATE_EXIT}", NO_CANDIDATE_EXIT)


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
    head = f"{'#':>3} {'GPU':<{gw}} {'meas':>4}"
    head += f" {'repl':>6} {'fleet W':>9}" if fleet else ""
    head += f" {'N':>2} {'total W':>8} {'W/GPU':>7}" if multi else f" {'power W':>8}"
    head += f" {'cap':>5} {'ITL ms':>7} {'TTFT ms':>8} {'bound':>5} {'tok/s':>8} {'max q/s':>8} {'util':>5} {'J/tok':>8} {'Wh/req':>7} {'kWh/Mtok':>9}"
    rented = res.usd_per_gpu_hour is not None
    head += f" {'$/Mtok*':>8}" if priced else ""
    head += f" {'$GPUh/Mtok':>10}" if rented else ""
    head += f" {'gCO2/Mtok*':>10}" if carbon else ""
    click.echo(head)
    above = False
    for i, c in enumerate(res.candidates, 1):
        e = c.energy
        if (not fleet and not above and res.max_utilization is not None and c.utilization is not None
                and c.utilization > res.max_utilization + 1e-12):
            above = True
            click.echo(f"--- above the {res.max_utilization:.0%} headroom (queues grow sharply with bursts); "
                       "--replicas auto adds replicas instead ---")
        line = f"{i:>3} {c.gpu:<{gw}} {'yes' if c.measured_in_training else '-':>4}"
        line += f" {c.replicas:>6} {c.fleet_power_w:>9.0f}" if fleet else ""
        line += f" {c.tp:>2} {c.total_power_w:>8.1f} {c.power_w:>7.1f}" if multi else f" {c.power_w:>8.1f}"
        ttft = "inf" if c.ttft_s is None else num(c.ttft_s * 1e3, ">8.1f")
        short = {"memory": "mem", "compute": "comp", "interconnect": "link"}.get(str(c.bound.get("kind")), "?")
        line += (f" {c.max_batch:>5} {c.itl_s * 1e3:>7.1f} {ttft:>8} {short:>5} {num(c.throughput_tok_s, '>8.1f')} {c.max_qps or 0.0:>8.3g}"
                 f" {c.utilization or 0.0:>5.0%} {num(e['j_per_token'], '>8.3f')} {num(e['wh_per_request'], '>7.3f')}"
                 f" {num(e['kwh_per_mtok'], '>9.3f')}")
        line += f" {num(e['usd_per_mtok'], '>8.4f')}" if priced else ""
        line += f" {num(e['usd_per_mtok_gpu_hours'], '>10.4f')}" if rented else ""
        line += f" {num(e['gco2_per_mtok'], '>10.1f')}" if carbon else ""
        click.echo(line)
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
                       f"holds {c.kv_sequences} sequence{'s' if c.kv_sequences != 1 else ''} of {c.max_model_len} "
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


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Every field, aliases, idle-power basis and each row's sources "
              "(docs/json.md).")
@models_option
@guarded
def gpus(as_json: bool, models: str | None) -> None:
    """List the catalog GPUs (hash-verified like predict): specs, aliases, idle power measured or estimated."""
    from .listing import gpu_rows

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
    from .server import IDLE_FRACTION_OF_TDP

    click.echo(f"idle W: meas = measured with a model loaded (source in --json); "
               f"est = {IDLE_FRACTION_OF_TDP:.0%} of TDP (an estimate)")
    click.echo("trained: yes = the models were trained on measurements of this GPU; - = predicted from its spec sheet")
    shared = sorted({a for r in rows for a in r["shared_aliases"]})
    if shared:
        click.echo(f"aliases: each one names its GPU for --gpu; {len(shared)} shared by several GPUs are not shown "
                   f"(--gpu refuses them as ambiguous: {', '.join(shared)}; --json lists them as shared_aliases)")


@main.command()
@click.option("--measurements", default=None, type=click.Path(dir_okay=False),
              help="CSV of your runs: the columns of `predict --input` plus measured power_w (mean W per GPU) "
                   "and/or itl_s (s/token); optional ttft_s, idle_power_w.")
@click.option("--vllm-bench", "benches", multiple=True, type=click.Path(dir_okay=False),
              help="Result JSON of `vllm bench serve --save-result` (repeatable; one run each); needs --gpu.")
@click.option("--nvidia-smi", "power_logs", multiple=True, type=click.Path(dir_okay=False),
              help="Power log of the benchmark(s): nvidia-smi --query-gpu=timestamp,power.draw --format=csv -lms 200, "
                   "or a dcgmi dmon -e 155 dump; one per --vllm-bench, or one covering them all.")
@click.option("--gpu", default=None, help="GPU the --vllm-bench runs used (catalog name or spec JSON).")
@click.option("--llm", default=None, help="LLM of the --vllm-bench runs (default: the JSON's model_id).")
@click.option("--tp", "tp_text", default="1", show_default=True, help="GPUs per replica of the --vllm-bench runs.")
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Directory to write the calibrated bundle to.")
@click.option("--apply-to-other-gpus", "other_gpus", is_flag=True,
              help="Also move GPUs without runs by the measured GPUs' pooled level terms (default: only the "
                   "measured GPUs change).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration section as JSON (docs/json.md).")
@models_option
@guarded
def calibrate(measurements: str | None, benches: tuple[str, ...], power_logs: tuple[str, ...], gpu: str | None,
              llm: str | None, tp_text: str, out_dir: str, other_gpus: bool, as_json: bool, models: str | None) -> None:
    """Correct the models with your own measured runs; writes a bundle for --models / WATTGPU_MODELS."""
    from .calibration import calibrate as run_calibration
    from .calibration import check_base
    from .errors import WattGPUError
    from .measured import bench_row, rows_of, runs_from_csv, runs_from_rows

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
    from .calibration import report

    click.echo(report(cal, runs, out_dir))


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
        from .answers import llms_answer

        click.echo(json.dumps(llms_answer(pred), indent=2))
        return
    lw = max(len(n) for n in [m.name for m in cat.llms] + [n for n, _ in cat.unsupported_llms])
    click.echo(f"{'LLM':<{lw}} {'params B':>9} {'active B':>9} {'class':<24}")
    for m in cat.llms:
        click.echo(f"{m.name:<{lw}} {m.total_params_b:>9.2f} {m.active_params_b:>9.2f} {m.arch_class:<24}")
    for n, why in cat.unsupported_llms:
        click.echo(f"{n:<{lw}} {'':>9} {'':>9} unsupported: {why}")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 exposes it to the network: put it behind a proxy).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="TCP port to listen on.")
@models_option
@guarded
def serve(host: str, port: int, models: str | None) -> None:
    """Serve the JSON API and the GPU-picker page over HTTP (needs the extra: pip install "wattgpu[serve]")."""
    from .service.run import serve as run_server

    run_server(host, port, models)


if __name__ == "__main__":
    main()
