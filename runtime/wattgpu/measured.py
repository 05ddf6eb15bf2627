"""A user's measured runs for ``wattgpu calibrate``: a runs CSV, or the logs of a benchmark.

The runs CSV has the columns of ``wattgpu predict --input`` (read by :mod:`wattgpu.batch` with the
same field rules) plus the measurements of :data:`MEASURED`: ``power_w`` (mean power per GPU over the
run, W) and/or ``itl_s`` (s/token, the row's ``itl_stat``), optionally ``ttft_s`` (s: checked and
calibrated as an overhead term) and ``idle_power_w`` (the GPU's idle power with the model loaded), and
``dtype`` and ``tp`` like any predict row.

From logs: :func:`bench_row` turns the JSON that ``vllm bench serve`` / ``benchmark_serving.py
--save-result`` writes, plus a power log (``nvidia-smi --query-gpu=timestamp,power.draw --format=csv
-lms 200``, or ``dcgmi dmon -e 155`` output), into one such row: power averaged over the benchmark's
window (``date`` − ``duration`` … ``date``; the whole log when the JSON has no ``date`` or the log no
timestamps), ITL and TTFT from the benchmark. Log only the GPUs that served the benchmark.
"""
from __future__ import annotations

import csv
import io
import math
import re
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator

import numpy as np

from . import features as F
from .batch import _open_csv, _resolve_stream, _rows
from .calibration import Runs
from .errors import ConfigFileError, SpecValidationError, WattGPUError
from .rules import NumberRule, is_finite_number
from .safeio import looks_utf16, open_regular, read_json_file
from .targets import ITL, POWER

TTFT = "ttft"  # measured and predicted time to first token (s): reported, not a model output
from .physics import IDLE_FRACTION_OF_TDP
from .workload import Workload

MEASURED = {
    "power_w": NumberRule(0.0, 1e7, "W (mean per GPU)", optional=True, open_lo=True),  # mW: caught by check_run
    "itl_s": NumberRule(0.0, 600.0, "s/token", optional=True, open_lo=True),
    "ttft_s": NumberRule(0.0, 86_400.0, "s", optional=True),
    "idle_power_w": NumberRule(0.0, 10_000.0, "W (per GPU)", optional=True, open_lo=True),
}
MAX_RUNS = 100_000
MAX_LOG_BYTES = 512 * 1024**2
MAX_BENCH_BYTES = 64 * 1024**2  # benchmark_serving.py --save-detailed stores per-request lists
TARGET_OF = {"power_w": POWER, "itl_s": ITL}


def runs_from_csv(path: str, predictor: Any, defaults: Workload | None = None) -> Runs:
    """The measured runs of a runs CSV, resolved and predicted by ``predictor`` (uncalibrated)."""
    with _open_csv(path) as f:
        header, rows = _rows(f, str(path))
        if not {"power_w", "itl_s"} & set(header):
            raise ConfigFileError(str(path), "has neither a power_w nor an itl_s column; add the measured mean "
                                             "power per GPU (W) and/or ITL (s/token) of each run")
        return runs_from_rows(rows, str(path), predictor, defaults)


def runs_from_rows(rows: Iterable[tuple[int, dict[str, str], str | None]], origin: str, predictor: Any,
                   defaults: Workload | None = None) -> Runs:
    """Measured runs from CSV-like rows; the first bad row raises naming origin, line, column and likely mistake."""
    triples, measured, lines = [], [], []
    for line, row, triple in _resolve_stream(iter(rows), defaults, predictor):
        if isinstance(triple, WattGPUError):
            raise WattGPUError(f"{origin}: {triple}")
        values = {}
        for col, rule in MEASURED.items():
            try:
                values[col] = rule.parse("run", col, row.get(col) or "")
            except SpecValidationError as exc:
                raise WattGPUError(f"{origin}: line {line}: column {col!r} = {exc.value!r:.40} is invalid; "
                                   f"expected {exc.expected}") from None
        if values["power_w"] is None and values["itl_s"] is None:
            raise WattGPUError(f"{origin}: line {line}: no measurement; give power_w and/or itl_s")
        triples.append(triple)
        measured.append(values)
        lines.append(line)
        if len(triples) > MAX_RUNS:
            raise WattGPUError(f"{origin}: more than {MAX_RUNS:,} runs; calibrate on a sample")
    if not triples:
        raise WattGPUError(f"{origin}: no runs; add at least one row with llm, gpu and power_w and/or itl_s")
    preds = predictor.predict_specs_safe(triples)
    for line, p in zip(lines, preds):
        if isinstance(p, WattGPUError):
            raise WattGPUError(f"{origin}: line {line}: {p}")

    def column(name: str) -> np.ndarray:
        return np.array([math.nan if v[name] is None else float(v[name] or 0.0) for v in measured])

    idle_measured = low_load_idle(triples, preds, column("power_w"), column("idle_power_w"))
    at = running_columns(triples, preds, idle_measured, predictor.bundle)
    from .assemble import evaluate

    raw = evaluate(predictor.bundle, at)
    learned = "server" in predictor.bundle.schema.domain.get("kinds", ())
    busy = np.array([p.busy_fraction if w.kind == "server" and not learned else 1.0 for (_, _, w), p in zip(triples, preds)])
    for i, (line, (g, _, w), v, p) in enumerate(zip(lines, triples, measured, preds)):
        problem = check_run(g, w, v, p, float(at["roofline_itl_s"][i]), float(at["eff_batch"][i]))
        if problem is not None:
            raise WattGPUError(f"{origin}: line {line}: {problem}")
    ttft_pred = np.array([math.nan if p.ttft_s is None else p.ttft_s for p in preds])

    def ttft_with(models: str) -> np.ndarray:  # the same runs' TTFT by another bundle (the calibrated one)
        res = type(predictor)(models=models).predict_specs_safe(triples)
        return np.array([math.nan if isinstance(p, WattGPUError) or p.ttft_s is None else p.ttft_s for p in res])

    return Runs(triples=triples, gpus=[t[0].name for t in triples], specs=[t[0] for t in triples], cols=at,
                predicted={POWER: np.array([p.power_w for p in preds]), ITL: np.array([p.itl_s for p in preds]),
                           TTFT: ttft_pred},
                measured={POWER: column("power_w"), ITL: column("itl_s"), TTFT: column("ttft_s")},
                idle_measured=idle_measured, raw={POWER: np.asarray(raw[POWER]), ITL: np.asarray(raw[ITL])},
                busy=busy, lines=lines, ttft_with=ttft_with)


LOW_LOAD_BUSY = 0.3  # a server run busy at most this share of the time is mostly an idle reading


def low_load_idle(triples: list[Any], preds: list[Any], power: np.ndarray, idle: np.ndarray) -> np.ndarray:
    """``idle``, plus for a GPU without a reading the idle its low-load server runs imply (busy ≤ LOW_LOAD_BUSY)."""
    out = np.array(idle, dtype=np.float64, copy=True)
    names = [t[0].name for t in triples]
    for name in sorted(set(names)):
        rows = [i for i, n in enumerate(names) if n == name]
        if np.isfinite(idle[rows]).any():
            continue
        for i in rows:
            p, b = preds[i], preds[i].busy_fraction
            if triples[i][2].kind != "server" or not b <= LOW_LOAD_BUSY or not np.isfinite(power[i]) or p.idle_power_w is None:
                continue
            busy_w = p.idle_power_w + (p.power_w - p.idle_power_w) / max(b, 1e-9)
            out[i] = min(max((power[i] - b * busy_w) / (1.0 - b), 0.02 * triples[i][0].tdp_w), power[i])
    return out


ITL_RATIO_MAX = 20.0  # a measured ITL this many times the prediction is a unit mistake, not a slow GPU
TTFT_RATIO_MAX = 20.0


def check_run(gpu: Any, wl: Workload, v: dict[str, Any], p: Any, floor_s: float, batch: float) -> str | None:
    """Why a run cannot be used (one line naming the likely mistake), or None; ITL against the floor at its running batch."""
    itl, power, idle, ttft = v["itl_s"], v["power_w"], v["idle_power_w"], v["ttft_s"]
    if itl is not None:
        if itl > ITL_RATIO_MAX * p.itl_s:
            return (f"itl_s = {itl:g} s/token is {itl / p.itl_s:.0f}× the prediction ({p.itl_s * 1e3:.3g} ms): "
                    f"milliseconds typed as seconds? itl_s is in seconds ({itl:g} ms = {itl / 1e3:g} s)")
        if itl < floor_s:
            return (f"itl_s = {itl:g} s/token is below the floor of this {wl.kind} run on {gpu.name} "
                    f"({floor_s * 1e3:.3g} ms, the roofline step at its running batch {batch:.3g}): is it 1 / throughput "
                    "rather than one sequence's ITL, or the wrong llm, gpu, tp or dtype?")
    if idle is not None:
        anchor, where = idle, "given in idle_power_w"
    elif gpu.idle_power_w is not None:
        anchor, where = gpu.idle_power_w, "the catalog's"
    else:  # no measured idle figure: only half the runtime's estimate is a safe lower bound
        anchor, where = 0.5 * IDLE_FRACTION_OF_TDP * gpu.tdp_w, f"half the {IDLE_FRACTION_OF_TDP:.0%}-of-TDP estimate"
    if idle is not None and idle >= gpu.tdp_w:
        return (f"idle_power_w = {idle:g} W is at or above the TDP of {gpu.name} ({gpu.tdp_w:g} W): give one GPU's "
                "idle power in watts")
    if power is not None:
        if power > gpu.tdp_w:
            return (f"power_w = {power:g} W is above the TDP of {gpu.name} ({gpu.tdp_w:g} W): give the mean power "
                    f"per GPU in watts (a tp group's total divided by tp; not mW)")
        if power < anchor:
            return (f"power_w = {power:g} W is below the idle power of {gpu.name} ({anchor:g} W, {where}): "
                    "kW typed as W, or a log of an idle window or another GPU? If it idles lower, give idle_power_w")
    if ttft is not None and p.ttft_s is not None and p.ttft_s > 0 and ttft > TTFT_RATIO_MAX * p.ttft_s:
        return (f"ttft_s = {ttft:g} s is {ttft / p.ttft_s:.0f}× the prediction ({p.ttft_s * 1e3:.3g} ms): "
                "milliseconds typed as seconds?")
    return None


def running_columns(triples: list[Any], preds: list[Any], idle_measured: np.ndarray, bundle: Any) -> dict[str, np.ndarray]:
    """Each run's model columns: a server's at its running batch, with the runs' measured idle power where given."""
    cols = F.columns(triples)
    names = np.array([t[0].name for t in triples], dtype=object)
    idle = np.array(cols["gpu_idle_power_w"], dtype=np.float64, copy=True)
    for name in sorted(set(names.tolist())):
        m = names == name
        vals = idle_measured[m & np.isfinite(idle_measured)]
        if vals.size:
            idle[m] = float(np.mean(vals))
    cols = {**cols, "gpu_idle_power_w": idle}
    n = len(triples)
    learned = "server" in bundle.schema.domain.get("kinds", ())
    server = np.array([w.kind == "server" for _, _, w in triples])
    out = F.with_concurrency(cols, np.arange(n), cols["wl_concurrency"], closed_loop=False)
    if server.any():
        idx = np.flatnonzero(server)
        level = np.array([preds[i].effective_batch for i in idx], dtype=np.float64)
        part = F.with_concurrency(cols, idx, level, closed_loop=not learned)
        out = {k: np.array(v, dtype=np.float64, copy=True) for k, v in out.items()}
        for k, v in part.items():
            out[k][idx] = v
    return out


# ---- benchmark logs
def read_vllm_bench(path: str) -> dict[str, Any]:
    """The result JSON of ``vllm bench serve`` / ``benchmark_serving.py``, checked for what a run needs."""
    data = read_json_file(path, what="vllm bench result", max_bytes=MAX_BENCH_BYTES, dir_file=None)
    need = ("completed", "total_input_tokens", "total_output_tokens", "duration")
    missing = [k for k in need if k not in data]
    if missing:
        raise ConfigFileError(str(path), f"has no {missing[0]!r}; pass the JSON that `vllm bench serve "
                                         "--save-result` (or benchmark_serving.py --save-result) writes")
    if not any(k in data for k in ("mean_tpot_ms", "mean_itl_ms", "median_itl_ms")):
        raise ConfigFileError(str(path), "has no mean_tpot_ms, mean_itl_ms or median_itl_ms; is it a serving "
                                         "benchmark result?")
    for k in (*need, "mean_tpot_ms", "mean_itl_ms", "median_itl_ms", "mean_ttft_ms"):
        v = data.get(k)
        if k in data and (not is_finite_number(v) or v < 0):
            raise ConfigFileError(str(path), f"field {k!r} = {v!r:.40} is not a finite number ≥ 0")
    if not data["completed"] >= 1 or not data["duration"] > 0:
        raise ConfigFileError(str(path), "reports no completed requests (completed < 1 or duration 0)")
    return data


def bench_window(bench: dict[str, Any]) -> tuple[datetime, datetime] | None:
    """(start, end) of the benchmark: ``date`` (written when it ends, local time) minus ``duration``."""
    date = bench.get("date")
    if not isinstance(date, str):
        return None
    try:
        end = datetime.strptime(date.strip(), "%Y%m%d-%H%M%S")
    except ValueError:
        return None
    return end - timedelta(seconds=float(bench["duration"]) + 1.0), end + timedelta(seconds=1.0)


_SMI_TIME = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def read_power_log(path: str) -> list[tuple[datetime | None, float]]:
    """(time or None, watts) samples of an nvidia-smi CSV (timestamp, power.draw) or a ``dcgmi dmon`` dump."""
    shown = str(path)
    with open_regular(path, what="power log", max_bytes=MAX_LOG_BYTES) as fh:
        raw = fh.read(MAX_LOG_BYTES + 1)
    if looks_utf16(raw):
        raise ConfigFileError(shown, "is UTF-16 text; save the power log as UTF-8")
    if b"\x00" in raw:
        raise ConfigFileError(shown, "contains NUL bytes (binary data); pass the text output of nvidia-smi or dcgmi")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(shown, f"is not UTF-8 text (bad byte at offset {exc.start})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ConfigFileError(shown, "is empty; pass the output of nvidia-smi --query-gpu=timestamp,power.draw "
                                     "--format=csv -lms 200")
    samples = _dcgm(lines, shown) if lines[0].lstrip().startswith("#") else _smi(lines, shown)
    if not samples:
        raise ConfigFileError(shown, "holds no power samples")
    return samples


def _smi(lines: list[str], shown: str) -> list[tuple[datetime | None, float]]:
    head = [c.strip().lower() for c in next(csv.reader([lines[0]]))]
    p_col = next((i for i, c in enumerate(head) if c.startswith("power.draw")), None)
    t_col = next((i for i, c in enumerate(head) if c.startswith("timestamp")), None)
    if p_col is None:
        raise ConfigFileError(shown, "has no power.draw column; log with nvidia-smi --query-gpu=timestamp,power.draw "
                                     "--format=csv -lms 200 (or pass a dcgmi dmon -e 155 dump)")
    out: list[tuple[datetime | None, float]] = []
    bad: list[str] = []
    for n, cells in enumerate(csv.reader(io.StringIO("\n".join(lines[1:]))), start=2):
        if len(cells) <= p_col:
            continue
        cell = cells[p_col].strip()
        if cell.lower().startswith("power.draw"):  # the header again (concatenated logs)
            continue
        if cell.startswith("[") or not cell:  # "[N/A]", "[Not Supported]"
            continue
        m = _NUMBER.match(cell)
        if m is None or not math.isfinite(float(m.group())) or float(m.group()) < 0:
            bad.append(f"line {n}: power.draw = {cell!r:.40} is not a number of watts")
            continue
        when = _parse_time(cells[t_col].strip()) if t_col is not None and len(cells) > t_col else None
        out.append((when, float(m.group())))
    _refuse_bad(shown, bad)
    return out


MAX_BAD_SHOWN = 20  # bad lines named in the message; the rest are counted


def _refuse_bad(shown: str, bad: list[str]) -> None:
    """Every bad line of a log in one error (the first MAX_BAD_SHOWN named, the rest counted)."""
    if bad:
        more = f"; and {len(bad) - MAX_BAD_SHOWN} more" if len(bad) > MAX_BAD_SHOWN else ""
        raise ConfigFileError(shown, f"{len(bad)} bad line{'s' if len(bad) != 1 else ''}: "
                                     + "; ".join(bad[:MAX_BAD_SHOWN]) + more)


def _parse_time(text: str) -> datetime | None:
    for fmt in _SMI_TIME:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def _dcgm(lines: list[str], shown: str) -> list[tuple[datetime | None, float]]:
    head = lines[0].lstrip("#").split()
    if "POWER" not in head:
        raise ConfigFileError(shown, "is a dcgmi dmon dump without a POWER column; record it with dcgmi dmon -e 155")
    col = head.index("POWER")  # rows: "GPU 0  123.4 ...": the entity takes two tokens, the header one
    out: list[tuple[datetime | None, float]] = []
    bad: list[str] = []
    for n, ln in enumerate(lines[1:], start=2):
        parts = ln.split()
        if ln.lstrip().startswith(("#", "ID")) or len(parts) < col + 2 or parts[0] != "GPU":
            continue
        cell = parts[col + 1]
        if cell in ("N/A", "-"):
            continue
        if not _NUMBER.fullmatch(cell):
            bad.append(f"line {n}: POWER = {cell!r:.40} is not a number of watts")
            continue
        out.append((None, float(cell)))
    _refuse_bad(shown, bad)
    return out


MIN_COVERAGE = 0.8  # a power log must span this share of the benchmark's window
IDLE_SHARE = 0.5  # a sample below this share of the window's median power is idle
IDLE_STRETCH = 0.1  # idle samples spanning this share of the window draw a warning


def window_power(samples: list[tuple[datetime | None, float]], window: tuple[datetime, datetime] | None,
                 shown: str) -> tuple[float, int, bool, str | None]:
    """Mean watts of the samples inside ``window`` (all samples without one); (mean, count, windowed, warning).

    Refused when the samples span less than MIN_COVERAGE of the window (a log of part of the run); a warning
    when idle stretches (samples below IDLE_SHARE of the median) cover IDLE_STRETCH of it or more."""
    timed = [(t, w) for t, w in samples if t is not None]
    if window is None or not timed:
        return float(np.mean([w for _, w in samples])), len(samples), False, None
    inside = sorted((t, w) for t, w in timed if window[0] <= t <= window[1])
    if not inside:
        raise ConfigFileError(shown, f"has no power sample between {window[0]:%Y-%m-%d %H:%M:%S} and "
                                     f"{window[1]:%H:%M:%S}, the benchmark's window; log power while it runs "
                                     "(both clocks in local time)")
    span_s = (window[1] - window[0]).total_seconds()
    times = [t for t, _ in inside]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    step = float(np.median(gaps)) if gaps else 0.0
    covered = sum(min(g, 2.0 * step) for g in gaps) + step  # a hole in the log counts as uncovered
    coverage = min(covered / span_s, 1.0) if span_s > 0 else 1.0
    if coverage < MIN_COVERAGE:
        raise ConfigFileError(shown, f"covers {covered:.0f} s of the benchmark's {span_s:.0f} s window "
                                     f"({coverage:.0%} < {MIN_COVERAGE:.0%}); log power for the whole run "
                                     "(nvidia-smi ... -lms 200 started before the benchmark, stopped after it)")
    watts = np.array([w for _, w in inside])
    idle = watts < IDLE_SHARE * float(np.median(watts))
    idle_s = sum(min(g, 2.0 * step) for g, i in zip(gaps, idle[1:]) if i) + (step if idle[0] else 0.0)
    warning = None
    if span_s > 0 and idle_s >= IDLE_STRETCH * span_s:
        warning = (f"{idle_s:.0f} s of the {span_s:.0f} s window ({idle_s / span_s:.0%}) are idle (below "
                   f"{IDLE_SHARE:.0%} of the median {np.median(watts):.0f} W): did the benchmark stall, or is "
                   "the log another GPU's? The mean includes them")
    return float(np.mean(watts)), len(inside), True, warning


def bench_row(bench_path: str, power_path: str | None, gpu: str, llm: str | None = None,
              tp: int = 1) -> tuple[dict[str, str], str]:
    """One runs-CSV row (cells as text) from a vllm bench JSON and a power log, and a note of what it used."""
    bench = read_vllm_bench(bench_path)
    model = llm or bench.get("model_id")
    if not isinstance(model, str) or not model.strip():
        raise ConfigFileError(str(bench_path), "has no model_id; pass --llm")
    done = float(bench["completed"])
    row = {"llm": model.strip(), "gpu": gpu, "engine": "vllm", "tp": str(tp),
           "input_tokens": str(max(1, round(float(bench["total_input_tokens"]) / done))),
           "output_tokens": str(max(1, round(float(bench["total_output_tokens"]) / done))),
           "num_requests": str(int(done))}
    rate, conc = bench.get("request_rate"), bench.get("max_concurrency")
    if is_finite_number(rate) and rate > 0:
        row.update(kind="server", qps=repr(float(rate)))
        if is_finite_number(conc) and conc >= 1:
            row["max_batch"] = str(int(conc))
    elif is_finite_number(conc) and conc >= 1:
        row.update(kind="closed_loop", concurrency=repr(float(conc)))
    else:
        row["kind"] = "offline"
    itl_key = next(k for k in ("mean_tpot_ms", "mean_itl_ms", "median_itl_ms") if k in bench)
    row["itl_stat"] = "median" if itl_key == "median_itl_ms" else "mean"
    row["itl_s"] = repr(float(bench[itl_key]) / 1e3)
    if "mean_ttft_ms" in bench:
        row["ttft_s"] = repr(float(bench["mean_ttft_ms"]) / 1e3)
    note = f"{bench_path}: {row['kind']} run of {row['llm']}, ITL from {itl_key}"
    if power_path is not None:
        mean_w, n, windowed, warning = window_power(read_power_log(power_path), bench_window(bench), str(power_path))
        row["power_w"] = repr(mean_w)
        note += (f"; power {mean_w:.1f} W = mean of {n} samples of {power_path} "
                 + ("inside the benchmark's window" if windowed else "(whole log: no timestamps or no date in the JSON)"))
        if warning is not None:
            note += f"; warning: {warning}"
    return row, note


def rows_of(bench_rows: list[dict[str, str]]) -> Iterator[tuple[int, dict[str, str], str | None]]:
    """Benchmark rows as the CSV reader's ``(line, cells, problem)`` (line = the benchmark's position)."""
    for i, row in enumerate(bench_rows, start=1):
        yield i, row, None
