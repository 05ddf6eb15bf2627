"""``predict --input``'s answers as CSV text, column by column.

:func:`answer_cells` gives, for rows evaluated together (:class:`wattgpu.predictor.Evaluated`), the output cells
that :func:`wattgpu.record.csv_row` gives of each row's Prediction (:func:`wattgpu.results.prediction`) — the
same values from the same definitions (:func:`wattgpu.results.row_warnings`, :func:`wattgpu.checks.intervals`,
:func:`wattgpu.energy.energy_figures`, ...) — without building one Prediction per row, and already as the text
``csv.writer`` writes (:func:`text`, :func:`quote`), so a row is one join.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from .serving import latency
from . import record, results, ttft_fit
from .checks import intervals, not_finite_error
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


def _level80(factors: Sequence[tuple[float, float, float]]) -> tuple[tuple[float, float, float], ...]:
    """The first factor of the 80 % level (the CSV's interval columns), or none."""
    return next((((lv, lo, hi),) for lv, lo, hi in factors if record.is_level80(lv)), ())


def _pair(ivs: Sequence[Any]) -> tuple[Any, Any]:
    hit = next((i for i in ivs if record.is_level80(i.level)), None)
    return (None, None) if hit is None else (hit.low, hit.high)


def answer_cells(ev: Any, prices: Prices) -> list[tuple[str, ...] | WattGPUError]:
    """Per row of ``ev``: its output cells as CSV text in :func:`wattgpu.record.csv_columns` order, or the
    WattGPUError it raises (as :meth:`~wattgpu.predictor.Evaluated.prediction` returns it)."""
    out: list[Any] = list(ev.errors)
    good = sorted(ev.slot, key=ev.slot.__getitem__)  # row index of each evaluated slot
    if not good:
        return out
    bundle = ev.bundle
    memo = results.memo_for(bundle)
    num, cols, mix_of = ev.numbers, ev.cols, ev.mix
    rows = [ev.triples[i] for i in good]
    lists = {k: num[k].tolist() for k in ("power_w", "raw_power_w", "itl_s", "max_qps", "utilization",
                                          "ttft_s", "e2e_latency_s", "prefill_roofline_s", "step_memory_s",
                                          "step_compute_s", "step_interconnect_s")}
    col = {k: cols[k].tolist() for k in ("fit_batch", "roofline_itl_s", "idle_power_w")}
    max_conc = [int(v) for v in num["max_concurrency"].tolist()]
    overloaded = [bool(v) for v in num["overloaded"].tolist()]
    learned = num["server_learned"].tolist()
    not_finite = num["not_finite"].tolist()
    fit = ttft_fit.of(bundle)
    factor_of: dict[int, tuple[Any, ...]] = {}  # id(gpu) → (power 80 % factor, ITL's, calibration summary, gpu)
    m = len(rows)
    method: list[str] = [""] * m
    idle_w: list[Any] = [None] * m
    idle_src: list[Any] = [None] * m
    warnings: list[str] = [""] * m
    calib: list[str] = [""] * m
    bound: list[str] = [""] * m
    iv: list[list[Any]] = [[None] * m for _ in range(6)]  # power, ITL and TTFT 80 % low/high
    ttft: list[Any] = [None] * m
    e2e: list[Any] = [None] * m
    for k, row in enumerate(rows):
        if not_finite[k]:
            out[good[k]] = not_finite_error(row)
            continue
        gpu, _, wl = row
        mix = mix_of.get(k)
        try:
            warnings[k] = " | ".join(results.row_warnings(
                bundle, row, memo, mix, overloaded[k], lists["max_qps"][k], int(col["fit_batch"][k]), max_conc[k],
                lists["utilization"][k], lists["raw_power_w"][k]))
            f = factor_of.get(id(gpu))
            if f is None or f[3] is not gpu:
                factors, calibrated = results.gpu_factors(bundle, gpu, memo)
                f = factor_of[id(gpu)] = (_level80(factors.get(POWER, ())), _level80(factors.get(ITL, ())),
                                          "" if calibrated is None else calibrated["summary"], gpu)
        except WattGPUError as exc:
            out[good[k]] = exc
            continue
        method[k] = results.power_method(mix, learned[k])
        if mix is not None:
            idle_w[k], idle_src[k] = mix["idle_w"], mix["idle_source"]
        calib[k] = f[2]
        power, itl = lists["power_w"][k], lists["itl_s"][k]
        idle_col = col["idle_power_w"][k]
        roof = col["roofline_itl_s"][k] if mix is None else mix["roofline_itl_s"]
        iv[0][k], iv[1][k] = _pair(intervals(f[0], power, cap=gpu.tdp_w, floor=min(power, idle_col)))
        iv[2][k], iv[3][k] = _pair(intervals(f[1], itl, floor=min(itl, roof)))
        ttft[k], e2e[k] = results._finite(lists["ttft_s"][k]), results._finite(lists["e2e_latency_s"][k])
        iv[4][k], iv[5][k] = _pair(results.ttft_intervals(fit, ttft[k], lists["prefill_roofline_s"][k], wl.burst))
        bound[k] = latency.bound(lists["step_memory_s"][k], lists["step_compute_s"][k],
                                 lists["step_interconnect_s"][k])["kind"]
    tp = [w.tp for _, _, w in rows]
    with np.errstate(all="ignore"):  # rows that are not finite are errors; their numbers are not written
        total = num["power_w"] * np.array(tp, dtype=np.float64)  # Prediction.total_power_w: power_w × tp
        energy = energy_figures(total, num["system_s_per_token"],
                                np.array([int(w.output_tokens) for _, _, w in rows], dtype=np.float64), *prices,
                                gpus=np.array(tp, dtype=np.float64))
    columns: dict[str, list[str]] = {
        "gpu_resolved": _strings([g.name for g, _, _ in rows]), "llm_resolved": _strings([x.name for _, x, _ in rows]),
        "power_w": _floats(lists["power_w"]), "tp": _texts(tp), "total_power_w": _floats(total.tolist()),
        "allreduce_s_per_step": _floats(cols["comm_s"].tolist()), "itl_s": _floats(lists["itl_s"]),
        "power_method": _strings(method), "idle_power_w": _texts(idle_w), "idle_power_source": _texts(idle_src),
        "power_80_low": _texts(iv[0]), "power_80_high": _texts(iv[1]), "itl_80_low": _texts(iv[2]),
        "itl_80_high": _texts(iv[3]), "max_qps": _floats(lists["max_qps"]),
        "utilization": _floats(lists["utilization"]), "max_concurrency": _texts(max_conc),
        "overloaded": _texts(overloaded), "ttft_s": _texts(ttft), "ttft_80_low": _texts(iv[4]),
        "ttft_80_high": _texts(iv[5]), "e2e_latency_s": _texts(e2e), "bound": _strings(bound),
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

