"""``predict --input``'s answers as CSV text, column by column.

:func:`answer_cells` gives, for rows evaluated together (:class:`wattgpu.predictor.Evaluated`), the output cells
that :func:`wattgpu.record.csv_row` gives of each row's Prediction (:func:`wattgpu.results.prediction`) — the
same values from the same definitions (:func:`wattgpu.results.row_warnings`, :func:`wattgpu.checks.intervals`,
:func:`wattgpu.energy.energy_figures`, ...) — without building one Prediction per row, and already as the text
``csv.writer`` writes (:func:`text`, :func:`quote`), so a row is one join.
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from .serving import latency
from . import record, results, ttft_fit
from .checks import interval_ends, not_finite_error
from .energy import Prices, energy_figures
from .errors import WattGPUError
from .targets import ITL, POWER

_SPECIAL = re.compile('[,"\r\n]')  # what makes csv.writer (excel dialect, QUOTE_MINIMAL) quote a cell


def quote(cell: str) -> str:
    """``cell`` as ``csv.writer`` writes it: quoted, its quotes doubled, when it holds a comma, quote or line
    break; else as it is."""
    if _SPECIAL.search(cell) is None:
        return cell
    return '"' + cell.replace('"', '""') + '"'


def text(value: Any) -> str:
    """One output cell as text, as ``csv.writer`` writes :func:`wattgpu.record.csv_row`'s cell: None empty,
    booleans true/false, floats by ``repr``, strings quoted as needed, anything else by ``str``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    return str(value)


def _floats(values: Sequence[float]) -> list[str]:
    """A column of Python floats (from ``ndarray.tolist()``) as text."""
    return list(map(float.__repr__, values))


def _texts(values: Sequence[Any]) -> list[str]:
    return list(map(text, values))


def _strings(values: Sequence[str]) -> list[str]:
    """A column of strings, each distinct one quoted once."""
    seen: dict[str, str] = {}
    return [seen.get(v) or seen.setdefault(v, quote(v)) if v else "" for v in values]


def _level80(factors: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(low, high) factor of the 80 % level (the CSV's interval columns), or None."""
    return next(((lo, hi) for lv, lo, hi in factors if record.is_level80(lv)), None)


def _interval_cells(value: np.ndarray, factor: np.ndarray, floor: np.ndarray,
                    cap: np.ndarray | None = None) -> tuple[list[str], list[str]]:
    """The 80 % interval columns (low, high) of :func:`wattgpu.checks.interval_ends` as text: ``factor`` is rows ×
    (low, high); empty where a row has no 80 % factor (NaN)."""
    low, high = interval_ends(value, factor[:, 0], factor[:, 1], floor, cap)
    lows, highs = _floats(low.tolist()), _floats(high.tolist())
    for k in np.flatnonzero(np.isnan(factor[:, 0])).tolist():
        lows[k] = highs[k] = ""
    return lows, highs


def _lesser(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``min(a, b)`` per row, as Python's min picks: ``b`` only where ``b < a``."""
    return np.where(b < a, b, a)


def answer_cells(ev: Any, prices: Prices) -> list[tuple[str, ...] | WattGPUError]:
    """Per row of ``ev``: its output cells as CSV text in :func:`wattgpu.record.csv_columns` order, or the
    WattGPUError it raises (as :meth:`~wattgpu.predictor.Evaluated.prediction` returns it).

    Column by column: per row in Python only what is per set-up or per GPU (its set-up's warnings, kept in
    the memo, and its interval factors), and the few rows whose warnings are their own
    (:func:`wattgpu.results.own_warning_rows`) or that run as a Poisson server."""
    out: list[Any] = list(ev.errors)
    good = sorted(ev.slot, key=ev.slot.__getitem__)  # row index of each evaluated slot
    if not good:
        return out
    bundle = ev.bundle
    memo = results.memo_for(bundle)
    num, cols, mix_of = ev.numbers, ev.cols, ev.mix
    rows = [ev.triples[i] for i in good]
    m = len(rows)
    gpus = [g for g, _, _ in rows]
    wls = [w for _, _, w in rows]
    lists = {k: num[k].tolist() for k in ("power_w", "raw_power_w", "itl_s", "max_qps", "utilization",
                                          "ttft_s", "e2e_latency_s", "step_memory_s", "step_compute_s",
                                          "step_interconnect_s")}
    fit_batch = cols["fit_batch"].tolist()
    max_conc = [int(v) for v in num["max_concurrency"].tolist()]
    overloaded = [bool(v) for v in num["overloaded"].tolist()]
    learned = num["server_learned"].tolist()
    not_finite = num["not_finite"].tolist()
    tdp = np.array([g.tdp_w for g in gpus], dtype=np.float64)
    own = results.own_warning_rows(wls, num["overloaded"], num["utilization"], cols["fit_batch"],
                                   num["raw_power_w"], tdp, mix_of).tolist()
    factor_of: dict[int, tuple[Any, ...]] = {}  # id(gpu) → (index in `factors`, gpu)
    factors: list[tuple[Any, ...]] = []  # per GPU: (power 80 % factor, ITL's, calibration summary)
    joined: dict[int, tuple[tuple[str, ...], str]] = {}  # id(set-up warnings) → (them, joined)
    gpu_at = np.zeros(m, dtype=np.intp)
    warnings: list[str] = [""] * m
    for k, row in enumerate(rows):
        if not_finite[k]:
            out[good[k]] = not_finite_error(row)
            continue
        gpu, llm, wl = row
        try:
            if own[k]:
                warnings[k] = " | ".join(results.row_warnings(
                    bundle, row, memo, mix_of.get(k), overloaded[k], lists["max_qps"][k], int(fit_batch[k]),
                    max_conc[k], lists["utilization"][k], lists["raw_power_w"][k]))
            else:  # the set-up's warnings alone (own_warning_rows)
                base = memo.setup_warnings(bundle, gpu, llm, wl)
                hit = joined.get(id(base))
                if hit is None or hit[0] is not base:
                    hit = joined[id(base)] = (base, " | ".join(base))
                warnings[k] = hit[1]
            f = factor_of.get(id(gpu))
            if f is None or f[1] is not gpu:
                per_target, calibrated = results.gpu_factors(bundle, gpu, memo)
                factors.append((_level80(per_target.get(POWER, ())), _level80(per_target.get(ITL, ())),
                                "" if calibrated is None else calibrated["summary"]))
                f = factor_of[id(gpu)] = (len(factors) - 1, gpu)
            gpu_at[k] = f[0]
        except WattGPUError as exc:
            out[good[k]] = exc
    method = ["learned (server rows in training)" if v else "learned" for v in learned]
    idle_w: list[Any] = [None] * m
    idle_src: list[Any] = [None] * m
    roof = cols["roofline_itl_s"].copy()
    for k, mix in mix_of.items():
        method[k] = results.power_method(mix, learned[k])
        idle_w[k], idle_src[k] = mix["idle_w"], mix["idle_source"]
        roof[k] = mix["roofline_itl_s"]
    calib = [factors[i][2] for i in gpu_at.tolist()] if factors else [""] * m
    nan2 = (math.nan, math.nan)
    power_f = np.array([f[0] or nan2 for f in factors] or [nan2], dtype=np.float64)[gpu_at]  # NaN: no 80 % factor
    itl_f = np.array([f[1] or nan2 for f in factors] or [nan2], dtype=np.float64)[gpu_at]
    power, itl = num["power_w"], num["itl_s"]
    iv: list[list[str]] = [*_interval_cells(power, power_f, _lesser(power, cols["idle_power_w"]), cap=tdp),
                           *_interval_cells(itl, itl_f, _lesser(itl, roof))]
    ttft_ok = np.isfinite(num["ttft_s"])
    ttft = [v if ok else None for v, ok in zip(lists["ttft_s"], ttft_ok.tolist())]
    e2e = [v if math.isfinite(v) else None for v in lists["e2e_latency_s"]]
    fit = ttft_fit.of(bundle)
    level80 = record.is_level80(fit.level)
    ttft_f = np.array([(fit.factors(w.burst) or nan2) if level80 else nan2 for w in wls],
                      dtype=np.float64).reshape(m, 2)
    ttft_f[~ttft_ok] = math.nan  # an unbounded TTFT has no interval
    iv += _interval_cells(num["ttft_s"], ttft_f, _lesser(num["ttft_s"], num["prefill_roofline_s"]))
    bound = latency.bound_kinds(lists["step_memory_s"], lists["step_compute_s"], lists["step_interconnect_s"])
    tp = [w.tp for w in wls]
    with np.errstate(all="ignore"):  # rows that are not finite are errors; their numbers are not written
        total = num["power_w"] * np.array(tp, dtype=np.float64)  # Prediction.total_power_w: power_w × tp
        energy = energy_figures(total, num["system_s_per_token"],
                                np.array([int(w.output_tokens) for w in wls], dtype=np.float64), *prices,
                                gpus=np.array(tp, dtype=np.float64))
    columns: dict[str, list[str]] = {
        "gpu_resolved": _strings([g.name for g in gpus]), "llm_resolved": _strings([x.name for _, x, _ in rows]),
        "power_w": _floats(lists["power_w"]), "tp": _texts(tp), "total_power_w": _floats(total.tolist()),
        "allreduce_s_per_step": _floats(cols["comm_s"].tolist()), "itl_s": _floats(lists["itl_s"]),
        "power_method": _strings(method), "idle_power_w": _texts(idle_w), "idle_power_source": _texts(idle_src),
        "power_80_low": iv[0], "power_80_high": iv[1], "itl_80_low": iv[2], "itl_80_high": iv[3],
        "max_qps": _floats(lists["max_qps"]), "utilization": _floats(lists["utilization"]),
        "max_concurrency": _texts(max_conc), "overloaded": _texts(overloaded), "ttft_s": _texts(ttft),
        "ttft_80_low": iv[4], "ttft_80_high": iv[5], "e2e_latency_s": _texts(e2e), "bound": _strings(bound),
        "warnings": _strings(warnings), "calibration": _strings(calib)}
    for name in ("system_s_per_token", "throughput_tok_s", "energy_per_token_j", "energy_per_request_j",
                 "effective_batch", "busy_fraction"):
        columns[name] = _floats(num[name].tolist())
    for name in record.ENERGY_CSV:
        v = energy[name]
        columns[name] = [""] * m if v is None else _floats(v.tolist())
    missing = [c for c in record.csv_columns() if c not in columns]
    if missing:  # a field declared in wattgpu.record that this table does not compute: read off each Prediction
        for c in missing:
            columns[c] = [""] * m
        for k, i in enumerate(good):
            if out[i] is None:
                full = record.csv_cells(ev.prediction(i), prices)
                for c in missing:
                    columns[c][k] = text(full[c])
    cells = list(zip(*(columns[c] for c in record.csv_columns())))
    for k, i in enumerate(good):
        if out[i] is None:
            out[i] = cells[k]
    return out

