"""Every number of a prediction, vectorised (``core``), and the per-row results built from it."""
from __future__ import annotations

import math
import operator
import weakref
from itertools import chain
from operator import itemgetter
from dataclasses import fields
from typing import Any, Callable, Hashable, Mapping, NamedTuple, Sequence

import numpy as np

from . import features as F
from . import ops, physics, raw_columns, record, ttft_fit
from .serving import capacity, latency
from .assemble import Evaluate, Row
from .assemble import reads as assemble_reads
from .assemble import take as assemble_take
from .bundle import ModelBundle
from .calibrated import apply_ttft
from .calibrated import of as calibration_of
from .checks import (capacity_warnings, context_warnings, domain_warnings, intervals, not_finite_error,
                     server_warnings, tp_warnings)
from .energy import energy_figures
from .flags import model_flags
from .prediction import Interval, Prediction
from .serving.server import server_mix
from .targets import ITL, POWER
from .ttft_fit import NO_FIT, TtftFit
from .workload import KINDS

ROW_COLUMNS = ("fit_batch", "roofline_itl_s", "comm_s", "idle_power_w")  # the feature columns prediction() reads
SERVER_CODE = float(KINDS.index("server"))  # wl_kind_code of a Poisson-server row
OFFLINE_CODE = float(KINDS.index("offline"))
TABLE_FIELDS = record.TABLE_FIELDS  # the number columns of predict_table, declared in wattgpu.record
CLOSED_LOOP_CODE = float(KINDS.index("closed_loop"))
Core = dict[str, np.ndarray]
Mix = dict[int, dict[str, Any]]


def core(bundle: ModelBundle, evaluate: Evaluate, rows: Sequence[Row], cols: F.Columns) -> tuple[Core, Mix]:
    """Every number of a prediction for rows that can be predicted, in one pass per model.

    ``evaluate`` maps feature columns to physical model outputs (the facade passes its own so the
    whole pipeline goes through one call site)."""
    server_learned = "server" in bundle.schema.domain.get("kinds", ())
    server = cols["wl_kind_code"] == SERVER_CODE
    server_rows = [int(k) for k in np.flatnonzero(server)]
    out = _evaluate_others(evaluate, cols, server)
    power = out[POWER].copy()
    batch = cols["eff_batch"].copy()
    busy = np.ones(len(rows))
    cap = capacities(bundle, evaluate, rows, cols, server_learned)
    itl, point = capacity.sub_batch(out[ITL], batch, cap["grid_batch"], cap["grid_itl"])
    sub = (point >= 0) & ~server  # decoding as sub-batches of a grid batch: its power
    power = np.where(sub & (point == cap["peak_k"]), cap["peak_power"], power)  # the capacity table has it
    sub = np.flatnonzero(sub & (point != cap["peak_k"]))
    if len(sub):
        at = point[sub]
        power[sub] = capacity.served_point_power(evaluate, cols, sub, cap["grid_conc"][sub, at],
                                                 cap["limit"][sub], server_learned)
    req_s = capacity.request_s(cols, itl)  # server rows' ITL and batch change below, but they never read it
    tokens_per_s = served_token_rate(cols, batch, req_s, cap["max_qps"])
    mix = server_mixes(bundle, evaluate, rows, cols, cap, server_rows, server_learned) if server_rows else {}
    if mix:
        for k, m in mix.items():
            power[k], itl[k], busy[k], batch[k] = m["power"], m["itl"], m["busy"], m["batch"]
            tokens_per_s[k] = min(rows[k][2].qps, m["max_qps"]) * rows[k][2].output_tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        util = utilization(cols, cap["max_qps"], batch, req_s)
        numbers = finish(power, itl, batch, busy, tokens_per_s, cols["gpu_tdp_w"], cols["wl_output_tokens"],
                         server & server_learned, cols["wl_tp"])
    overloaded = (util > 1.0 + 1e-9) & server
    numbers.update(max_qps=cap["max_qps"], utilization=np.where(overloaded, util, np.minimum(util, 1.0)),
                   max_concurrency=cap["max_concurrency"], overloaded=overloaded)  # > 1 only when overloaded
    budget = prefill_budgets(rows)
    clients = np.where(cols["wl_kind_code"] == CLOSED_LOOP_CODE, cols["wl_concurrency"], np.nan)
    wait = latency.closed_loop_wait(clients, tokens_per_s / cols["wl_output_tokens"], req_s)
    if server_rows:
        wait[server_rows] = [latency.server_wait(*a) for a in zip(cols["wl_qps"][server_rows].tolist(),
                                                                  cap["max_qps"][server_rows].tolist(),
                                                                  cap["concurrency"][server_rows].tolist())]
    with np.errstate(divide="ignore", invalid="ignore"):
        numbers.update(latency_numbers(cols, budget, batch, numbers["itl_s"], tokens_per_s,
                                       latency.step_envelope(batch, cap["grid_batch"], cap["grid_itl"]), wait,
                                       ttft_fit.of(bundle), np.array([w.burst for _, _, w in rows])))
    apply_ttft(bundle, cols, numbers)  # a calibrated bundle's TTFT scale (wattgpu.calibration)
    return numbers, mix


def server_mixes(bundle: ModelBundle, evaluate: Evaluate, rows: Sequence[Row], cols: F.Columns,
                 cap: Mapping[str, np.ndarray], server_rows: list[int], learned: bool) -> Mix:
    """The solved Poisson-server state (:func:`wattgpu.serving.server.server_mix`) of rows ``server_rows``, memoised per
    row (its specs and every workload field) in the bundle's :class:`RowMemo`, as the capacities are: a row's
    state depends on the row alone."""
    memo = memo_for(bundle)
    mix: Mix = {}
    todo: list[int] = []
    keys = dict(zip(server_rows, capacity.row_keys([rows[k] for k in server_rows], True)))
    for k in server_rows:
        hit = memo.mix_get((learned, keys[k]), rows[k])
        if hit is None:
            todo.append(k)
        else:
            mix[k] = dict(hit)  # a copy: the memo's entry is never handed out
    if todo:
        every = len(todo) == len(rows)  # a server rank: every row (no copy of ~200 columns)
        sub = cols if every else {c: v[todo] for c, v in cols.items()}
        solved = server_mix(evaluate, rows if every else [rows[k] for k in todo], sub, learned=learned,
                            cap=cap["limit"] if every else cap["limit"][todo],
                            capacity=cap if every else {c: v[todo] for c, v in cap.items()},
                            classes=cap_classes(bundle, sub))
        for j, k in enumerate(todo):
            memo.mix_put((learned, keys[k]), rows[k], solved[j])
            mix[k] = solved[j]
    return mix


def _evaluate_others(evaluate: Evaluate, cols: F.Columns, server: np.ndarray) -> dict[str, np.ndarray]:
    """Power and ITL of the rows that are not Poisson servers at their own columns (NaN for server rows: their
    numbers all come from the solved mix, :func:`wattgpu.serving.server.server_mix`, so these are never read)."""
    others = np.flatnonzero(~server)
    if len(others) == len(server):
        return evaluate(cols)
    out = {t: np.full(len(server), np.nan) for t in (POWER, ITL)}
    if len(others):
        got = evaluate(assemble_take(cols, others, len(server)))
        for t, v in out.items():
            v[others] = got[t]
    return out


def cap_classes(bundle: ModelBundle, cols: F.Columns) -> np.ndarray | None:
    """:func:`wattgpu.features.cap_classes` of ``cols`` when several rows may share a class and no model of
    ``bundle`` reads the batch cap (else None: every row is evaluated on its own)."""
    if len(next(iter(cols.values()))) < 2 or assemble_reads(bundle, "wl_max_batch"):
        return None
    return F.cap_classes(cols)


def prefill_budgets(rows: Sequence[Row]) -> np.ndarray:
    """:func:`latency.prefill_budget` of every row, computed once per (GPU, batch cap)."""
    seen: dict[tuple[int, int], float] = {}
    out = []
    for g, _, w in rows:
        key = (id(g), w.max_batch)
        v = seen.get(key)
        if v is None:
            v = seen[key] = latency.prefill_budget(g, w)
        out.append(v)
    return np.array(out, dtype=np.float64)


class Capacity(NamedTuple):
    """What a prediction reads of a row's capacity table."""

    max_qps: float
    grid_batch: tuple[float, ...]
    grid_itl: tuple[float, ...]
    concurrency: float  # the operating point's concurrency
    limit: float  # sequences the engine runs at once
    grid_conc: tuple[float, ...]  # the grid's concurrencies and request times there (the server solve's bracket)
    grid_req: tuple[float, ...]
    peak_k: int  # the grid point of the highest decode throughput (-1: none) and the busy power there
    peak_power: float

    @classmethod
    def of(cls, table: Mapping[str, np.ndarray], j: int) -> "Capacity":
        """Row ``j`` of a capacity table, its grids cut to their distinct points (the padding repeats the last one:
        :func:`_padded` puts it back). Kept for as long as the row memo holds it, so it stays small."""
        n = int(table["grid_points"][j])
        return cls(float(table["max_qps"][j]), tuple(table["grid_batch"][j, :n].tolist()),
                   tuple(table["grid_itl"][j, :n].tolist()), float(table["concurrency"][j]), float(table["limit"][j]),
                   tuple(table["grid_conc"][j, :n].tolist()), tuple(table["grid_req"][j, :n].tolist()),
                   int(table["peak_k"][j]), float(table["peak_power"][j]))


def _padded(grids: Sequence[tuple[float, ...]]) -> np.ndarray:
    """Grids of distinct points as one rows × capacity.GRID_POINTS array laid out as
    :func:`wattgpu.serving.capacity.capacity_table` lays them out (:func:`wattgpu.serving.capacity.spread`)."""
    points = np.fromiter(map(len, grids), dtype=np.intp, count=len(grids))
    return capacity.spread(np.fromiter(chain.from_iterable(grids), dtype=np.float64, count=int(points.sum())), points)


def capacities(bundle: ModelBundle, evaluate: Evaluate, rows: Sequence[Row], cols: F.Columns,
               learned: bool) -> dict[str, np.ndarray]:
    """:class:`Capacity` fields of every row as arrays (+ ``max_concurrency``), memoised per set-up."""
    memo = memo_for(bundle)
    slot_of: dict[tuple[Any, ...], int] = {}
    firsts: list[int] = []
    where = np.empty(len(rows), dtype=np.intp)
    for i, setup in enumerate(capacity.row_keys(rows, learned)):
        key = (learned, setup)
        s = slot_of.get(key)
        if s is None:
            s = slot_of[key] = len(firsts)
            firsts.append(i)
        where[i] = s
    keys = list(slot_of)
    setups = [rows[i] for i in firsts]
    kept = memo.table_get(keys, setups)
    if kept is None:
        kept = _capacity_arrays(bundle, evaluate, rows, cols, learned, keys, firsts, setups)
    out = {k: v[where] for k, v in kept.items()}
    out["max_concurrency"] = np.maximum(cols["fit_sequences"], 0.0)
    return out


def _capacity_arrays(bundle: ModelBundle, evaluate: Evaluate, rows: Sequence[Row], cols: F.Columns, learned: bool,
                     keys: list[tuple[Any, ...]], firsts: list[int], setups: list[Row]) -> dict[str, np.ndarray]:
    """The :class:`Capacity` fields of the set-ups ``keys`` (first seen at rows ``firsts``) as arrays, one row per
    set-up; each set-up's capacity memoised (as its row of the table computed here, :class:`TableRow`), and these
    arrays kept per list of set-ups (:meth:`RowMemo.table_get`). Set-ups that differ only in their batch cap share
    their grids' evaluations (:func:`cap_classes`)."""
    memo = memo_for(bundle)
    got: list[Any] = [memo.capacity_raw(key, row) for key, row in zip(keys, setups)]
    miss = [s for s, c in enumerate(got) if c is None]
    if miss:
        idx = [firsts[s] for s in miss]
        sub = assemble_take(cols, idx, len(rows))
        table = capacity.capacity_table(evaluate, [setups[s] for s in miss], sub, learned,
                                        classes=cap_classes(bundle, sub))
        for j, s in enumerate(miss):
            got[s] = TableRow(table, j)
        start = max(0, len(miss) - memo.LIMIT)  # the memo keeps no more than the last LIMIT; a larger table
        for j in range(start, len(miss)):  # is not kept alive by them: they are kept as Capacities
            s = miss[j]
            memo.capacity_put(keys[s], setups[s], got[s] if start == 0 else Capacity.of(table, j))
    out = _gathered(got)
    memo.table_put(keys, setups, out)
    return out


CAPACITY_FIELDS = tuple(Capacity._fields)


class TableRow(NamedTuple):
    """A set-up's capacity as row ``j`` of the capacity table it was computed in (:func:`capacity.capacity_table`),
    as the row memo keeps it until a one-row path reads it as a :class:`Capacity` (:meth:`RowMemo.capacity_get`):
    gathering many set-ups' arrays from their tables is a few fancy indexes, not a round trip through tuples."""

    table: Mapping[str, np.ndarray]
    j: int


def _gathered(got: Sequence[Any]) -> dict[str, np.ndarray]:
    """The :class:`Capacity` fields of set-ups (each a :class:`TableRow` or a :class:`Capacity`) as arrays, one row
    per set-up, the grids padded as :func:`capacity.capacity_table` pads them (:func:`_padded`): the same values."""
    groups: dict[int, tuple[Mapping[str, np.ndarray], list[int], list[int]]] = {}
    caps: list[Capacity] = []
    at: list[int] = []
    for s, c in enumerate(got):
        if type(c) is TableRow:
            g = groups.get(id(c.table))
            if g is None:
                g = groups[id(c.table)] = (c.table, [], [])
            g[1].append(s)
            g[2].append(c.j)
        else:
            at.append(s)
            caps.append(c)
    if not caps and len(groups) == 1:
        table, _, js = next(iter(groups.values()))  # every set-up of one table, in order
        return {k: table[k][js] for k in CAPACITY_FIELDS}
    parts = [(np.asarray(pos, dtype=np.intp), {k: table[k][js] for k in CAPACITY_FIELDS})
             for table, pos, js in groups.values()]
    if caps:
        parts.append((np.asarray(at, dtype=np.intp), _capacity_columns(caps)))
    out = {}
    for k in CAPACITY_FIELDS:
        first = parts[0][1][k]
        col = np.empty((len(got), *first.shape[1:]), dtype=first.dtype)
        for pos, arrays in parts:
            col[pos] = arrays[k]
        out[k] = col
    return out


def _capacity_columns(got: Sequence[Capacity]) -> dict[str, np.ndarray]:
    """:class:`Capacity` objects' fields as arrays (the grids padded, :func:`_padded`)."""
    return {"max_qps": np.array([c.max_qps for c in got], dtype=np.float64),
            "grid_batch": _padded([c.grid_batch for c in got]),
            "grid_itl": _padded([c.grid_itl for c in got]),
            "concurrency": np.array([c.concurrency for c in got], dtype=np.float64),
            "limit": np.array([c.limit for c in got], dtype=np.float64),
            "grid_conc": _padded([c.grid_conc for c in got]),
            "grid_req": _padded([c.grid_req for c in got]),
            "peak_k": np.array([c.peak_k for c in got], dtype=np.intp),
            "peak_power": np.array([c.peak_power for c in got], dtype=np.float64)}


def latency_numbers(cols: Any, budget: Any, batch: Any, itl: Any, tokens_per_s: Any, step_s: Any,
                    wait: Any, fit: TtftFit = NO_FIT, burst: Any = 0.0) -> dict[str, Any]:
    """TTFT and its parts, end-to-end latency and the decode step's roofline parts (:mod:`latency`), with
    the bundle's fitted TTFT excess ``fit`` (``burst``: 1 for rows whose clients start together);
    arrays, or floats for the one-row scalar path."""
    out = latency.ttft(cols, budget, batch, ops.maximum(step_s, itl), tokens_per_s / cols["wl_output_tokens"], wait,
                       fit.excess_steps, fit.burst_seconds(burst), fit.pcie_comm)
    out["e2e_latency_s"] = latency.e2e_latency(out["ttft_s"], itl, cols["wl_output_tokens"])
    out["prefill_budget"] = budget
    out.update({f"step_{k}_s": v for k, v in latency.step_parts(cols, batch).items()})
    return out


def finish(power: Any, itl: Any, batch: Any, busy: Any, tokens_per_s: Any, tdp: Any, output_tokens: Any,
           server_learned: Any, gpus: Any) -> dict[str, Any]:
    """The numbers of a prediction from the model outputs (power per GPU capped at TDP; energy of the
    whole group of ``gpus`` GPUs; finiteness); arrays for the vectorised core, floats for the one-row
    scalar path (:mod:`single`)."""
    not_finite = ops.logical_not(ops.isfinite(power) & ops.isfinite(itl) & (power > 0) & (itl > 0)
                                 & (tokens_per_s > 0))
    capped = ops.minimum(power, tdp)
    s_per_tok = 1.0 / tokens_per_s
    energy = energy_figures(capped * gpus, s_per_tok, output_tokens)  # whole TP group
    return {"power_w": capped, "raw_power_w": power, "itl_s": itl, "effective_batch": batch,
            "busy_fraction": busy, "throughput_tok_s": tokens_per_s, "system_s_per_token": s_per_tok,
            "energy_per_token_j": energy["j_per_token"], "energy_per_request_j": energy["j_per_request"],
            "not_finite": not_finite, "server_learned": server_learned}


def served_token_rate(cols: F.Columns, batch: Any, req_s: Any, max_qps: Any) -> Any:
    """Generated tokens/s of ``batch`` busy slots (offline and closed loop), never above capacity.

    Each slot turns out ``output_tokens`` per request time ``req_s`` (Little's W); capped at
    ``max_qps × output_tokens``. Arrays or floats."""
    out = cols["wl_output_tokens"]
    return ops.minimum(batch * out / req_s, max_qps * out)


def utilization(cols: F.Columns, max_qps: Any, batch: Any, req_s: Any) -> Any:
    """Offered load ÷ capacity: server qps / max_qps (above 1: overloaded); offline 1 (saturated by
    definition); closed loop the request rate its clients generate (batch / request time ``req_s``,
    Little's law) / max_qps, at most 1 (a closed loop throttles itself). Arrays or floats."""
    kind = cols["wl_kind_code"]
    loop = ops.minimum(batch / req_s, max_qps)
    # an absurd arrival rate (1e308 req/s) is overloaded, not infinitely so: the ratio stops at MAX_UTILIZATION
    offered = ops.minimum(ops.where(kind == SERVER_CODE, cols["wl_qps"], loop), max_qps * MAX_UTILIZATION)
    return ops.where(kind == OFFLINE_CODE, 1.0, offered / max_qps)


MAX_UTILIZATION = 1e12  # the largest utilization reported (an overloaded server far beyond any real load)


def prediction(bundle: ModelBundle, i: int, row: Row, cols: F.Columns, numbers: Mapping[str, np.ndarray],
               mix: dict[str, Any] | None, memo: "RowMemo | None" = None) -> Prediction:
    """Row ``i`` of the vectorised core as a Prediction, with its warnings and intervals."""
    gpu, llm, wl = row
    n = numbers
    if n["not_finite"][i]:
        raise not_finite_error(row)
    memo = memo_for(bundle) if memo is None else memo
    wl_dict, scenario = memo.spec(wl, _workload_static)
    max_qps, overloaded = float(n["max_qps"][i]), bool(n["overloaded"][i])
    max_conc, utilization = int(n["max_concurrency"][i]), float(n["utilization"][i])
    warnings = row_warnings(bundle, row, memo, mix, overloaded, max_qps, int(cols["fit_batch"][i]), max_conc,
                            utilization, float(n["raw_power_w"][i]))
    power, itl = float(n["power_w"][i]), float(n["itl_s"][i])
    idle_w, idle_src = (None, None) if mix is None else (mix["idle_w"], mix["idle_source"])
    tdp = gpu.tdp_w
    ls_tdp = physics.ls_tdp_power_w(tdp, scenario)
    prefill_roofline = float(n["prefill_roofline_s"][i])
    # at the batch the ITL is predicted at: a server's solved busy batch, not the offline cap
    roofline_itl = float(cols["roofline_itl_s"][i]) if mix is None else mix["roofline_itl_s"]
    baselines = {"tdp_w": tdp, "ls_tdp_w": ls_tdp, "prefill_roofline_s": prefill_roofline,
                 "roofline_itl_s": roofline_itl, "tdp_total_w": tdp * wl.tp, "ls_tdp_total_w": ls_tdp * wl.tp}
    factors, calibrated = gpu_factors(bundle, gpu, memo)
    ttft = _finite(n["ttft_s"][i])
    return _new_prediction(
        llm=llm.name, gpu=gpu.name, workload=dict(wl_dict), power_w=power, itl_s=itl,
        system_s_per_token=float(n["system_s_per_token"][i]), throughput_tok_s=float(n["throughput_tok_s"][i]),
        energy_per_token_j=float(n["energy_per_token_j"][i]),
        energy_per_request_j=float(n["energy_per_request_j"][i]), effective_batch=float(n["effective_batch"][i]),
        busy_fraction=float(n["busy_fraction"][i]), power_method=power_method(mix, bool(n["server_learned"][i])),
        idle_power_w=idle_w, idle_power_source=idle_src,
        power_intervals=intervals(factors.get(POWER, ()), power, cap=tdp,
                                  floor=min(power, float(cols["idle_power_w"][i]))),
        itl_intervals=intervals(factors.get(ITL, ()), itl, floor=min(itl, roofline_itl)),
        baselines=baselines,
        warnings=tuple(warnings), max_qps=max_qps, utilization=utilization,
        max_concurrency=max_conc, overloaded=overloaded,
        tp=wl.tp, allreduce_s_per_step=float(cols["comm_s"][i]), calibration=calibrated,
        ttft_s=ttft, e2e_latency_s=_finite(n["e2e_latency_s"][i]),
        ttft_intervals=ttft_intervals(ttft_fit.of(bundle), ttft, prefill_roofline, wl.burst),
        ttft_breakdown={"prefill_s": float(n["prefill_s"][i]),
                        "prefill_queue_s": float(n["prefill_queue_s"][i]),
                        "slot_wait_s": _finite(n["slot_wait_s"][i]),
                        "prefill_steps": int(n["prefill_steps"][i]),
                        "prefill_allreduce_s": float(n["prefill_allreduce_s"][i]),
                        "prefill_attention_s": float(n["prefill_attention_s"][i]),
                        "ttft_excess_s": float(n["ttft_excess_s"][i]),
                        "step_s": float(n["step_s"][i]),
                        "prefill_budget_tokens": int(n["prefill_budget"][i]),
                        "prefill_efficiency": latency.PREFILL_EFFICIENCY},
        bound=latency.bound(float(n["step_memory_s"][i]), float(n["step_compute_s"][i]),
                            float(n["step_interconnect_s"][i])))


def row_warnings(bundle: ModelBundle, row: Row, memo: "RowMemo", mix: dict[str, Any] | None, overloaded: bool,
                 max_qps: float, fit_batch: int, max_concurrency: int, utilization: float,
                 raw_power_w: float) -> list[str]:
    """A prediction's warnings, in order: training domain and model flags, context, tensor parallelism,
    capacity, the server solve (``mix``) and a power capped at TDP (``raw_power_w`` above it)."""
    gpu, llm, wl = row
    warnings = list(memo.setup_warnings(bundle, gpu, llm, wl))
    warnings.extend(capacity_warnings(gpu, wl, overloaded, max_qps, fit_batch, max_concurrency,
                                      saturated=utilization >= 1.0))
    if mix is not None:
        warnings.extend(server_warnings(gpu, mix))
    if raw_power_w > gpu.tdp_w:
        warnings.append(f"predicted power {raw_power_w:.0f} W exceeds TDP {gpu.tdp_w:.0f} W; capped at TDP")
    return warnings


def own_warning_rows(wls: Sequence[Any], overloaded: np.ndarray, utilization: np.ndarray, fit_batch: np.ndarray,
                     raw_power_w: np.ndarray, tdp_w: np.ndarray, mixes: Mapping[int, Any]) -> np.ndarray:
    """Per row (workloads ``wls``, the table's numbers): whether :func:`row_warnings` may add a warning of the row's
    own to its set-up's (:meth:`RowMemo.setup_warnings`): overloaded, a saturated closed loop, a concurrency above
    the sequences that fit, a Poisson server's solve (``mixes``: row → its state) or a power above TDP. Where it is
    false the row's warnings are its set-up's alone (tests/test_csv_table.py holds the two equal)."""
    n = len(wls)
    closed = np.fromiter((w.kind == "closed_loop" for w in wls), dtype=bool, count=n)
    conc = np.fromiter((math.nan if w.concurrency is None else w.concurrency for w in wls), dtype=np.float64, count=n)
    fit = np.fmax(np.trunc(fit_batch), 1.0)
    with np.errstate(invalid="ignore"):
        own = overloaded.astype(bool) | (closed & (utilization >= 1.0)) | (conc > fit) | (raw_power_w > tdp_w)
    own |= ~np.isfinite(fit_batch)  # (the row path reads int(fit_batch): left to it)
    if mixes:
        own[list(mixes)] = True
    return own


def power_method(mix: dict[str, Any] | None, server_learned: bool) -> str:
    """How a row's mean power was obtained: learned, or a Poisson server's idle/busy mix (``mix``)."""
    if mix is not None:
        return ("learned (server rows in training)" if mix["learned"]
                else "server mix: idle + busy fraction × (learned busy power − idle)")
    return "learned (server rows in training)" if server_learned else "learned"


def gpu_factors(bundle: ModelBundle, gpu: Any, memo: "RowMemo") -> tuple[Mapping[str, Any], dict[str, Any] | None]:
    """The interval factors of a row on ``gpu`` (target → ((level, low, high), ...)) and what a calibrated
    bundle changed for that GPU (None when the bundle is not calibrated)."""
    factors = bundle.interval_factors
    if bundle.schema.calibration is None:
        return factors, None
    cal = calibration_of(bundle)
    calibrated = memo.spec(gpu, cal.describe)  # type: ignore[union-attr]
    return ({t: scaled_factors(f, cal.interval_scale(gpu, t)) for t, f in factors.items()},  # type: ignore[union-attr]
            calibrated)


_PREDICTION_FIELDS = frozenset(f.name for f in fields(Prediction))


def _new_prediction(**values: Any) -> Prediction:
    """``Prediction(**values)`` with every field given, without the frozen dataclass's field-by-field
    ``__init__`` (a fifth of building a whole-catalog rank); the same stored values
    (tests/test_rank.py::test_predictions_equal_the_dataclass_constructor)."""
    if len(values) != len(_PREDICTION_FIELDS) or not _PREDICTION_FIELDS.issuperset(values):
        raise TypeError(f"Prediction fields missing: {sorted(_PREDICTION_FIELDS - set(values))}")
    p = object.__new__(Prediction)
    p.__dict__.update(values)
    return p


def ttft_intervals(fit: TtftFit, ttft_s: float | None, floor_s: float, burst: float) -> tuple[Interval, ...]:
    """The fitted TTFT interval around ``ttft_s`` of a row with burst share ``burst`` (never below the prompt's
    compute roofline ``floor_s``); () without a fitted interval or a bounded TTFT."""
    f = fit.factors(burst)
    if f is None or ttft_s is None:
        return ()
    return intervals(((fit.level, *f),), ttft_s, floor=min(ttft_s, floor_s))


def _finite(x: float) -> float | None:
    """``x`` as a float, or None where it is unbounded (NaN/inf: a server at or beyond capacity)."""
    x = float(x)
    return x if math.isfinite(x) else None


def scaled_factors(factors: tuple[tuple[float, float, float], ...], rho: float) -> tuple[tuple[float, float, float], ...]:
    """Interval factors with their log widths scaled by ``rho`` (a calibrated GPU's residual scatter)."""
    if rho == 1.0:
        return factors
    return tuple((level, lo ** rho, hi ** rho) for level, lo, hi in factors)


class RowMemo:
    """What depends only on the spec objects of a row, kept across calls: derived values of one spec
    (its raw feature columns, a workload's dict), the domain warnings of a (GPU, LLM, kind, engine),
    the capacity of a (GPU, LLM, engine set-up) (a :class:`Capacity`, or a :class:`TableRow` of the table it was
    computed in until a one-row path reads it), and per row (specs and every workload field) its solved
    server state and the numbers the SLA batch-cap search reads of it.

    Keyed by ``id()`` and holding the objects themselves, so a key can never be reused by another
    object while it is cached (every hit checks identity); cleared when it grows past ``LIMIT``."""

    LIMIT = 4096
    MIX_LIMIT = 1024  # solved server states (a dict of ~15 numbers each; a whole-catalog SLA rank has ~400 rows)
    OPTIONS_LIMIT = 1024  # SLA-search rows (~9 caps of 7 numbers each; a whole-catalog rank with tp auto has ~150)
    # capacity arrays of lists of set-ups (a whole-catalog rank: ~50-400 set-ups, ~140 numbers each with the grids):
    # at most ~16 × 512 × 140 × 8 bytes ≈ 9 MB
    TABLES_LIMIT = 16
    TABLE_SETUPS = 512  # longer lists of set-ups are not kept
    COMPILED_LIMIT = 256  # compiled one-row load paths (~30 KB each: code and the constants it holds): ~8 MB
    QUESTIONS_LIMIT = 32  # whole questions' rows and feature columns (a whole-catalog rank: ~60 rows × ~200 columns)

    def __init__(self) -> None:
        self.specs: dict[tuple[int, Any, tuple[Any, ...]], tuple[Any, Any]] = {}
        # (GPU, LLM, kind, engine, context, TP): a row's set-up warnings (:meth:`setup_warnings`)
        self.warnings: dict[tuple[Any, ...], tuple[Any, Any, tuple[str, ...]]] = {}
        self.capacities: dict[tuple[bool, tuple[Any, ...]], tuple[Any, Any, Any]] = {}
        self.mixes: dict[tuple[bool, tuple[Any, ...]], tuple[Any, Any, dict[str, Any]]] = {}
        # per (strict, row): the options of the SLA batch-cap search, every cap tried (wattgpu.ranking._tried)
        self.options: dict[tuple[bool, tuple[Any, ...]], tuple[Any, Any, tuple[Any, ...]]] = {}
        # per list of capacity keys: the rows' (GPU, LLM) objects and their capacities as arrays (capacities())
        self.tables: dict[tuple[Any, ...], tuple[list[Any], list[Any], dict[str, np.ndarray]]] = {}
        # per set-up and load fields but the concurrency: a compiled one-row load path (wattgpu.single.compiled_numbers)
        self.compiled: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
        self._n_compiled = 0  # how many of its values are compiled paths
        # per question (e.g. a rank's GPUs, LLM, workload and group size): what depends on its spec objects alone
        self.questions: dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = {}

    def clear(self) -> None:
        """Forget everything (the objects it holds can then be freed), and the kept slot waits
        (:func:`wattgpu.serving.latency.server_wait`) and batches' set-up columns
        (:func:`wattgpu.raw_columns.columns`), so nothing derived from earlier rows remains."""
        self.specs.clear()
        self.warnings.clear()
        self.capacities.clear()
        self.mixes.clear()
        self.options.clear()
        self.tables.clear()
        self.compiled.clear()
        self._n_compiled = 0
        self.questions.clear()
        latency.forget_waits()
        raw_columns.forget_setups()

    def spec(self, obj: Any, make: Callable[..., Any], *args: Hashable) -> Any:
        """``make(obj, *args)``, computed once per object and arguments."""
        key = (id(obj), make, args)
        hit = self.specs.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        if len(self.specs) > self.LIMIT:
            self.specs.clear()
        value = make(obj, *args)
        self.specs[key] = (obj, value)
        return value

    def setup_warnings(self, bundle: ModelBundle, gpu: Any, llm: Any, wl: Any) -> tuple[str, ...]:
        """A row's training-domain warnings and model flags, then its context and tensor-parallel warnings: they
        read only the specs and the workload's kind, engine, context length and TP degree, so they are kept per
        (GPU, LLM, kind, engine, context, TP)."""
        key = (id(gpu), id(llm), wl.kind, wl.engine, wl.context_tokens, wl.tp)
        hit = self.warnings.get(key)
        if hit is not None and hit[0] is gpu and hit[1] is llm:
            return hit[2]
        base = (*domain_warnings(bundle.schema.domain, gpu, llm, wl), *model_flags(llm, gpu, wl.context_tokens),
                *context_warnings(llm, wl), *tp_warnings(bundle.schema.domain, gpu, llm, wl))
        if len(self.warnings) > self.LIMIT:
            self.warnings.clear()
        self.warnings[key] = (gpu, llm, base)
        return base

    def compiled_get(self, key: tuple[Any, ...], row: Row) -> Any:
        """What :func:`wattgpu.single.compiled_numbers` keeps under ``key``: the compiled load path of a set-up, the
        number of times it was seen before it is compiled, or False (it cannot be); None when nothing is kept."""
        hit = self.compiled.get(key)
        return hit[2] if hit is not None and hit[0] is row[0] and hit[1] is row[1] else None

    def compiled_put(self, key: tuple[Any, ...], row: Row, value: Any) -> None:
        """Keep ``value`` under ``key``: a count (bounded with the other per-set-up memos, :data:`LIMIT`) or a
        compiled path (at most :data:`COMPILED_LIMIT` of them, each ~30 KB)."""
        if len(self.compiled) > self.LIMIT or (callable(value) and self._n_compiled >= self.COMPILED_LIMIT):
            self.compiled.clear()
            self._n_compiled = 0
        self._n_compiled += callable(value)
        self.compiled[key] = (row[0], row[1], value)

    def capacity_get(self, key: tuple[Any, ...], row: Row) -> Any:
        """The memoised Capacity under ``key`` (a :class:`TableRow` read as its Capacity, and kept so), or None."""
        hit = self.capacity_raw(key, row)
        if type(hit) is TableRow:
            hit = Capacity.of(hit.table, hit.j)
            self.capacities[key] = (row[0], row[1], hit)
        return hit

    def capacity_raw(self, key: tuple[Any, ...], row: Row) -> Any:
        """What :meth:`capacity_put` kept under ``key`` for ``row``'s specs (a Capacity or a TableRow), or None."""
        hit = self.capacities.get(key)
        return hit[2] if hit is not None and hit[0] is row[0] and hit[1] is row[1] else None

    def capacity_put(self, key: tuple[Any, ...], row: Row, value: Any) -> None:
        if len(self.capacities) > self.LIMIT:
            self.capacities.clear()
        self.capacities[key] = (row[0], row[1], value)

    def table_get(self, keys: list[tuple[Any, ...]], rows: Sequence[Row]) -> dict[str, np.ndarray] | None:
        """The kept capacity arrays of the set-ups ``keys`` (first seen at ``rows``), or None; read-only."""
        hit = self.tables.get(tuple(keys)) if len(keys) <= self.TABLE_SETUPS else None
        if hit is None or not all(map(operator.is_, hit[0], map(itemgetter(0), rows))) \
                or not all(map(operator.is_, hit[1], map(itemgetter(1), rows))):
            return None
        return hit[2]

    def table_put(self, keys: list[tuple[Any, ...]], rows: Sequence[Row], arrays: dict[str, np.ndarray]) -> None:
        if len(keys) > self.TABLE_SETUPS:
            return
        if len(self.tables) >= self.TABLES_LIMIT:
            self.tables.clear()
        for v in arrays.values():
            v.flags.writeable = False
        self.tables[tuple(keys)] = ([r[0] for r in rows], [r[1] for r in rows], arrays)

    def question_get(self, key: tuple[Any, ...], objs: Sequence[Any]) -> Any:
        """What :meth:`question_put` kept under ``key`` for the spec objects ``objs`` (each the same object), or None."""
        hit = self.questions.get(key)
        if hit is None or len(hit[0]) != len(objs) or not all(map(operator.is_, hit[0], objs)):
            return None
        return hit[1]

    def question_put(self, key: tuple[Any, ...], objs: Sequence[Any], value: Any) -> None:
        """Keep ``value`` under ``key`` while ``objs`` (the spec objects it was derived from) are the ones asked."""
        if len(self.questions) >= self.QUESTIONS_LIMIT:
            self.questions.clear()
        self.questions[key] = (tuple(objs), value)

    def mix_get(self, key: tuple[Any, ...], row: Row) -> dict[str, Any] | None:
        """The memoised server state of ``row`` under ``key`` (:func:`server_mixes`), or None."""
        hit = self.mixes.get(key)
        return hit[2] if hit is not None and hit[0] is row[0] and hit[1] is row[1] else None

    def mix_put(self, key: tuple[Any, ...], row: Row, value: Mapping[str, Any]) -> None:
        if len(self.mixes) > self.MIX_LIMIT:
            self.mixes.clear()
        self.mixes[key] = (row[0], row[1], dict(value))

    def option_get(self, key: tuple[Any, ...], row: Row) -> tuple[Any, ...] | None:
        """The memoised SLA-search options of ``row`` under ``key`` (:func:`wattgpu.ranking.search_caps`), or None."""
        hit = self.options.get(key)
        return hit[2] if hit is not None and hit[0] is row[0] and hit[1] is row[1] else None

    def option_put(self, key: tuple[Any, ...], row: Row, value: tuple[Any, ...]) -> None:
        if len(self.options) > self.OPTIONS_LIMIT:
            self.options.clear()
        self.options[key] = (row[0], row[1], value)


def _workload_static(wl: Any) -> tuple[dict[str, Any], str]:
    """A workload's dict (prediction() copies it into each Prediction) and its paper scenario (the load-scaled
    TDP baseline's)."""
    return wl.to_dict(), physics.paper_scenario(wl.kind, wl.qps)


_MEMOS: "weakref.WeakKeyDictionary[ModelBundle, RowMemo]" = weakref.WeakKeyDictionary()


def memo_for(bundle: ModelBundle) -> RowMemo:
    """The bundle's RowMemo (its domain warnings depend on the bundle's schema)."""
    memo = _MEMOS.get(bundle)
    if memo is None:
        memo = _MEMOS.setdefault(bundle, RowMemo())
    return memo


def empty_table(n: int) -> dict[str, Any]:
    """A table of ``n`` rows, every number NaN."""
    return {k: np.full(n, np.nan) for k in TABLE_FIELDS}
