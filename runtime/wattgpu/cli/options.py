"""Click options generated from the request declarations (:mod:`wattgpu.questions`): one flag, type, default and
help per declared field, so the CLI, the service and the OpenAPI document cannot disagree."""
from __future__ import annotations

from typing import Any, Callable, Iterable

import click

from .. import questions as Q
from ..rules import ChoiceRule
from ..workload import Workload


def option(p: Q.Param, **override: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of declared field ``p`` (its flag, a destination named like the field, type, default and
    help); ``override`` changes a keyword (e.g. ``required=True``)."""
    if p.flag is None:
        raise ValueError(f"{p.name} has no CLI flag")
    kw: dict[str, Any] = {"help": p.doc, "default": p.default}
    if p.show_default:
        kw["show_default"] = True
    if p.kind == "boolean":
        kw["is_flag"] = True
        kw["default"] = bool(p.default)
    elif p.kind == "number":
        kw["type"] = float
    elif p.kind == "integer":
        kw["type"] = int
    elif p.kind == "choice":
        assert isinstance(p.rule, ChoiceRule)
        kw["type"] = click.Choice(p.rule.spellings, case_sensitive=not p.rule.aliases)
    elif p.kind == "paths":
        kw.update(multiple=True, type=click.Path(dir_okay=False), default=())
    elif p.kind == "path" and p.name not in ("models", "out_dir"):
        kw["type"] = click.Path(dir_okay=False, allow_dash=p.name == "output_csv")  # `--output -`: stdout
    kw.update(override)
    return click.option(p.flag, p.name, **kw)


def options(params: Iterable[Q.Param], **overrides: dict[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of ``params`` that have a flag, in order (``overrides``: per field name, option keywords)."""
    made = [option(p, **overrides.get(p.name, {})) for p in params if p.flag is not None]

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        for o in reversed(made):
            fn = o(fn)
        return fn
    return apply


def models_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return option(Q.MODELS, metavar="DIR")(fn)


workload_options = options(Q.WORKLOAD_OPTIONS)
price_options = options(Q.PRICES)
dtype_option = option(Q.DTYPE)


def parse_tp(text: str) -> int:
    """``--tp`` as a whole number of GPUs, or a one-line error naming the field."""
    from ..errors import SpecValidationError
    from ..parallel import check_tp_value

    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SpecValidationError("workload", "tp", text, "a whole number of GPUs >= 1 ('auto' only with rank)") from None
    return check_tp_value(int(value) if value.is_integer() else value)


def make_workload(kind: str | None, max_batch: int, qps: float | None, concurrency: float | None, input_tokens: int,
                  output_tokens: int, engine: str, gpu_memory_utilization: float, kv_cache_dtype: str = "auto",
                  engine_era: str = "current", itl_stat: str = "mean", tp: str = "1", arrival: str = "auto") -> Workload:
    """The Workload of the workload options (the kind: :func:`wattgpu.questions.default_kind`)."""
    return Workload(kind=Q.default_kind({"kind": kind, "qps": qps}), max_batch=max_batch, qps=qps,
                    concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens, engine=engine,
                    gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
                    engine_era=engine_era, itl_stat=itl_stat, tp=parse_tp(tp), arrival=arrival)
