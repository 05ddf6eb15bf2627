"""Many predictions from a CSV file (standard ``csv`` module), evaluated in vectorised chunks.

Input columns: ``llm``, ``gpu`` (required) and optional workload fields ``workload`` (or ``kind``),
``max_batch``, ``qps``, ``concurrency``, ``input_tokens``, ``output_tokens``, ``engine``,
``gpu_memory_utilization``, ``num_requests``, ``kv_cache_dtype``; an empty cell takes the default. Unknown columns are
copied through. Output: the input columns, then :data:`OUTPUT_COLUMNS`, then ``error``.
"""
from __future__ import annotations

import csv
from dataclasses import replace
from typing import Any, Callable, Iterator

from .errors import WattGPUError
from .workload import Workload

CHUNK_ROWS = 4096
INT_FIELDS = ("max_batch", "input_tokens", "output_tokens", "num_requests")
FLOAT_FIELDS = ("qps", "concurrency", "gpu_memory_utilization")
OUTPUT_COLUMNS = (
    "power_w", "itl_s", "throughput_tok_s", "energy_per_token_j", "energy_per_request_j", "wh_per_request",
    "kwh_per_mtok", "usd_per_mtok", "gco2_per_mtok", "effective_batch", "busy_fraction", "power_method",
    "idle_power_w", "power_80_low", "power_80_high", "itl_80_low", "itl_80_high", "max_qps", "utilization",
    "max_concurrency", "overloaded", "warnings",
)


class RowError(WattGPUError):
    """A bad CSV row, named by its line number."""

    def __init__(self, line: int, problem: str) -> None:
        self.line, self.problem = line, problem
        super().__init__(f"line {line}: {problem}")


def row_workload(row: dict[str, str], defaults: Workload) -> Workload:
    """The Workload a CSV row describes (empty cells keep ``defaults``)."""
    kw: dict[str, Any] = {}
    kind = (row.get("workload") or row.get("kind") or "").strip()
    if kind:
        kw["kind"] = kind
        if kind != "server":
            kw["qps"] = None
        if kind != "closed_loop":
            kw["concurrency"] = None
    for name in INT_FIELDS + FLOAT_FIELDS + ("engine", "kv_cache_dtype"):
        text = (row.get(name) or "").strip()
        if not text:
            continue
        if name in ("engine", "kv_cache_dtype"):
            kw[name] = text
            continue
        try:
            value = float(text)
        except ValueError:
            raise WattGPUError(f"column {name!r} = {text!r} is not a number") from None
        if name in INT_FIELDS:
            if value != int(value):
                raise WattGPUError(f"column {name!r} = {text!r} is not an integer")
            value = int(value)
        kw[name] = value
    return replace(defaults, **kw)


def _rows(path: str) -> Iterator[tuple[int, dict[str, str]]]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or not {"llm", "gpu"} <= {c.strip() for c in reader.fieldnames}:
            raise WattGPUError(f"{path}: needs a header with at least the columns llm and gpu")
        for row in reader:
            yield reader.line_num, {(k or "").strip(): (v or "") for k, v in row.items()}


def predict_rows(path: str, defaults: Workload | None = None, predictor: Any = None,
                 chunk: int = CHUNK_ROWS) -> Iterator[tuple[int, dict[str, str], Any]]:
    """Yield ``(line, row, Prediction | WattGPUError)`` for every data row, in file order; rows are
    resolved one by one (names cached) and predicted ``chunk`` at a time in one vectorised pass."""
    from .predictor import default_predictor

    pred = predictor or default_predictor()
    defaults = defaults or Workload()
    gpu_cache: dict[str, Any] = {}
    llm_cache: dict[str, Any] = {}
    pending: list[tuple[int, dict[str, str], Any]] = []

    def resolve(cache: dict[str, Any], fn: Callable[[str], Any], key: str) -> Any:
        if key not in cache:
            try:
                cache[key] = fn(key)
            except WattGPUError as exc:
                cache[key] = exc
        if isinstance(cache[key], WattGPUError):
            raise cache[key]
        return cache[key]

    def flush() -> Iterator[tuple[int, dict[str, str], Any]]:
        ok = [(i, t) for i, (_, _, t) in enumerate(pending) if isinstance(t, tuple)]
        results = pred.predict_specs_safe([t for _, t in ok]) if ok else []
        out = {i: r for (i, _), r in zip(ok, results)}
        for i, (line, row, t) in enumerate(pending):
            r = out.get(i, t)
            yield line, row, (RowError(line, str(r)) if isinstance(r, WattGPUError) else r)
        pending.clear()

    for line, row in _rows(path):
        try:
            llm_name, gpu_name = row.get("llm", "").strip(), row.get("gpu", "").strip()
            if not llm_name or not gpu_name:
                raise WattGPUError("llm and gpu must not be empty")
            triple: Any = (resolve(gpu_cache, pred.resolve_gpu, gpu_name), resolve(llm_cache, pred.resolve_llm, llm_name),
                           row_workload(row, defaults))
        except WattGPUError as exc:
            triple = exc
        pending.append((line, row, triple))
        if len(pending) >= chunk:
            yield from flush()
    yield from flush()


def _out_fields(p: Any, prices: tuple[float | None, float | None, float]) -> dict[str, Any]:
    e = p.energy(*prices)
    iv_p = {round(i.level * 100): i for i in p.power_intervals}
    iv_i = {round(i.level * 100): i for i in p.itl_intervals}
    return {
        "power_w": p.power_w, "itl_s": p.itl_s, "throughput_tok_s": p.throughput_tok_s,
        "energy_per_token_j": p.energy_per_token_j, "energy_per_request_j": p.energy_per_request_j,
        "wh_per_request": e["wh_per_request"], "kwh_per_mtok": e["kwh_per_mtok"],
        "usd_per_mtok": "" if e["usd_per_mtok"] is None else e["usd_per_mtok"],
        "gco2_per_mtok": "" if e["gco2_per_mtok"] is None else e["gco2_per_mtok"],
        "effective_batch": p.effective_batch, "busy_fraction": p.busy_fraction, "power_method": p.power_method,
        "idle_power_w": "" if p.idle_power_w is None else p.idle_power_w,
        "power_80_low": iv_p[80].low if 80 in iv_p else "", "power_80_high": iv_p[80].high if 80 in iv_p else "",
        "itl_80_low": iv_i[80].low if 80 in iv_i else "", "itl_80_high": iv_i[80].high if 80 in iv_i else "",
        "max_qps": p.max_qps, "utilization": p.utilization, "max_concurrency": p.max_concurrency,
        "overloaded": "true" if p.overloaded else "false", "warnings": " | ".join(p.warnings),
    }


def predict_csv(in_path: str, out_path: str, on_error: str = "skip", defaults: Workload | None = None,
                prices: tuple[float | None, float | None, float] = (None, None, 1.0), predictor: Any = None,
                report: Callable[[str], None] = lambda msg: None) -> tuple[int, int]:
    """Predict every row of ``in_path`` into ``out_path``; returns (rows predicted, rows with errors).

    ``on_error="skip"``: a bad row is reported (``report("line N: …")``), written with an ``error``
    column and the run continues. ``"stop"``: the first bad row raises :class:`RowError` and nothing is
    written.
    """
    from .energy import check_prices

    if on_error not in ("skip", "stop"):
        raise WattGPUError(f"on_error = {on_error!r} is invalid; expected skip or stop")
    check_prices(*prices)
    try:
        results = list(predict_rows(in_path, defaults, predictor))
    except OSError as exc:
        raise WattGPUError(f"{in_path}: cannot read ({exc.strerror or exc.__class__.__name__})") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise WattGPUError(f"{in_path}: not a readable CSV file ({exc})") from None
    if on_error == "stop":
        for _, _, r in results:
            if isinstance(r, WattGPUError):
                raise r
    in_cols: list[str] = []
    for _, row, _ in results:
        for k in row:
            if k not in in_cols:
                in_cols.append(k)
    fields = in_cols + [c for c in OUTPUT_COLUMNS if c not in in_cols] + ["error"]
    n_ok = n_bad = 0
    try:
        with open(out_path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            for _, row, r in results:
                out = dict(row)
                if isinstance(r, WattGPUError):
                    n_bad += 1
                    report(f"error: {r}")
                    out["error"] = getattr(r, "problem", str(r))
                else:
                    n_ok += 1
                    out.update(_out_fields(r, prices))
                    out["error"] = ""
                w.writerow(out)
    except OSError as exc:
        raise WattGPUError(f"{out_path}: cannot write ({exc.strerror or exc.__class__.__name__})") from None
    return n_ok, n_bad
