"""Capacity: the largest Poisson request rate one GPU sustains, and what happens beyond it.

Each request holds one of the engine's batch slots for its whole time in the system,
``W(b) = prefill + output_tokens × ITL(b)``, where ``ITL(b)`` is the learned inter-token latency with
``b`` sequences decoding together and prefill is the compute-roofline time of the prompt (the same
request time the server prediction's Little's-law solve uses, :mod:`wattgpu.serving.solve`). With at most ``B`` slots
(``B`` = min(batch cap, sequences whose KV cache fits)), Little's law L = λ·W caps the rate at

    max_qps = max over b ≤ B of  b / W(b)        (and, with an ITL SLA, only over b with ITL(b) ≤ SLA)

evaluated on a grid of batch sizes shared by every cap — :data:`BATCH_GRID` (1, 2, 3, 4, 6, 8, 12, … : the
powers of two and 1.5 × them) below ``B``, and ``B`` — so a learned ITL that is not monotone in the batch
cannot inflate the capacity beyond a batch the engine can actually run, and a larger cap's grid holds every
smaller cap on the grid: the best throughput over it, and so the work served, never falls as the cap grows
(a cap of 128 can decode sub-batches of 96 where a cap of 96 runs 96).

The same grid bounds the ITL from above (:func:`sub_batch_itl`).

Beyond capacity the queue grows without bound: the GPU runs saturated at the capacity's batch, its
throughput stays at ``max_qps × output_tokens`` and the prediction says so (``overloaded``).
"""
from __future__ import annotations

import math
from dataclasses import fields
from operator import attrgetter
from typing import Any, Callable, Sequence

import numpy as np

from .. import features as F
from .. import ops, physics

# Batch sizes every cap's grid draws from (the powers of two and 1.5 × them, up to the largest concurrency a
# workload may ask for): shared, so a cap's grid holds every smaller cap that is on it.
# (sorted, not np.unique: the two series never meet, and a bare np.unique imports numpy.ma, ~6 ms of cold start)
BATCH_GRID = np.sort(np.concatenate([2.0 ** np.arange(17), 3.0 * 2.0 ** np.arange(15)]))  # 1 … 65536
GRID_POINTS = len(BATCH_GRID) + 1  # columns of a row's grid: the grid batches below its limit, the limit, padding
WORKLOAD_MAX_CONCURRENCY = 65536.0  # Workload.concurrency's upper bound


def batch_limit(cols: F.Columns) -> np.ndarray:
    """Sequences the engine can run at once: min(batch cap, sequences whose KV fits), ≥ 1.

    The KV count is the one the learned models see (``fit_batch``: full-context KV in every layer), so
    the ITL evaluated at batch b is really at b; for sliding-window models this is conservative until
    the models are retrained on window-aware features (``max_concurrency`` reports the window-aware fit)."""
    return np.maximum(np.fmin(cols["wl_max_batch"], cols["fit_batch"]), 1.0)


def prefill_s(cols: F.Columns) -> np.ndarray:
    """Compute-roofline time of one request's prompt (s): 2 × active params × input tokens / matmul peak."""
    return physics.compute_latency_s(cols["gpu_active_params_b"], cols["compute_tflops"]) * cols["wl_input_tokens"]  # per GPU of a TP group


def request_s(cols: F.Columns, itl: Any) -> Any:
    """A request's time in its batch slot: prefill + output tokens × ITL (the W of Little's law for the
    capacity, the closed loop's request rate and the served token rate). Arrays or one row of floats."""
    return prefill_s(cols) + cols["wl_output_tokens"] * itl


def load_point(conc: Any, cap: Any, learned: bool) -> tuple[Any, Any]:
    """(busy batch, concurrency the models see) at mean concurrency ``conc``, ``cap`` slots."""
    cap = ops.minimum(cap, WORKLOAD_MAX_CONCURRENCY)
    batch = ops.minimum(physics.busy_batch(conc), cap)
    return batch, (ops.clip(ops.minimum(conc, cap), 1e-3, WORKLOAD_MAX_CONCURRENCY) if learned else batch)


def request_time(evaluate: Callable[..., dict[str, np.ndarray]], cols: F.Columns, index: np.ndarray,
                 conc: np.ndarray, cap: np.ndarray, learned: bool,
                 targets: Sequence[str] | None = None, classes: np.ndarray | None = None) -> dict[str, Any]:
    """Per-request time in the system at mean concurrency ``conc`` for rows ``index`` of ``cols`` (at
    most ``cap`` sequences decode at once).

    Without server rows in training the models are evaluated as a closed loop at the busy batch
    (zero-truncated Poisson mean, capped at ``cap``); with them (``learned``), as the server workload
    at concurrency ``conc`` (capped). Returns ``request_s``, the model outputs ``res`` and ``batch``.

    ``classes`` (per row of ``cols``, :func:`wattgpu.features.cap_classes`; only for models that do not read
    ``wl_max_batch``): rows of one class at the same model concurrency within their caps are evaluated once
    (the batch caps a search tries climb alike at a light load).
    """
    batch, level = load_point(np.asarray(conc, dtype=np.float64), np.asarray(cap, dtype=np.float64), learned)
    index = np.asarray(index, dtype=np.intp)
    first, back = (None, None) if classes is None else _same_point(classes, cols["wl_max_batch"], index, level)
    if first is not None:
        index, level = index[first], level[first]
    at = F.with_concurrency(cols, index, level, closed_loop=not learned)
    res = evaluate(at) if targets is None else evaluate(at, targets)  # only ``targets`` (ITL suffices for W)
    req = request_s(at, res["itl"]) if "itl" in res else None
    if back is None:
        return {"res": res, "batch": at["eff_batch"] if learned else batch, "roofline_itl_s": at["roofline_itl_s"],
                "request_s": req}
    return {"res": {k: v[back] for k, v in res.items()}, "batch": at["eff_batch"][back] if learned else batch,
            "roofline_itl_s": at["roofline_itl_s"][back], "request_s": None if req is None else req[back]}


def _same_point(classes: np.ndarray, max_batch: np.ndarray, index: np.ndarray,
                level: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(first, back): the rows ``index`` to evaluate at model concurrency ``level`` (each distinct (class, level)
    once, where the level is within the row's cap ``max_batch``) and where each row's result is among them;
    (None, None) when every row is distinct."""
    n = len(index)
    if n < 2:
        return None, None
    shared = level <= max_batch[index]  # NaN: not shared
    key = np.empty((n, 2), dtype=np.int64)
    key[:, 0] = np.where(shared, classes[index], -1 - np.arange(n))
    key[:, 1] = np.ascontiguousarray(level, dtype=np.float64).view(np.int64)  # by bits
    first, back = ops.distinct_rows(key)
    if len(first) == n:
        return None, None
    return first, back


def capacity_table(evaluate: Callable[[F.Columns], dict[str, np.ndarray]], triples: Sequence[tuple[Any, Any, Any]],
                   cols: F.Columns, learned: bool,
                   max_itl_s: np.ndarray | None = None, itl_scale: float = 1.0,
                   classes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Capacity of each row (vectorised): ``max_qps``, the batch it is reached at (``batch``), the
    ``itl_s``, busy ``power_w`` and ``request_s`` there, the batch ``limit`` and ``max_concurrency``; the grid
    point of the highest decode throughput ``peak_k`` (-1: none) and the busy power there ``peak_power``;
    the grid itself (rows × points): ``grid_batch``, ``grid_itl``, its concurrencies ``grid_conc`` and
    request times ``grid_req`` (the server solve's bracket, :mod:`wattgpu.serving.solve`), of which the first
    ``grid_points`` are distinct (the rest repeat the limit's column).

    With ``max_itl_s`` (per row, NaN = no SLA) only batches whose ITL × ``itl_scale`` meets it count;
    a row whose ITL misses the SLA even at batch 1 gets ``max_qps`` 0.

    ``classes`` (per row of ``cols``, :func:`wattgpu.features.cap_classes`; only for models that do not read the
    batch cap): set-ups that differ only in their cap share their grid points below both caps, and each is
    evaluated once (:func:`request_time`), as the caps an SLA search tries have it.
    """
    keys = row_keys(triples, learned)
    first: dict[Any, int] = {}
    where = np.array([first.setdefault(k, i) for i, k in enumerate(keys)], dtype=np.intp)
    uniq = np.array(sorted(first.values()), dtype=np.intp)  # rows with the same engine set-up share a capacity
    slot = np.searchsorted(uniq, where)
    n = len(uniq)
    limit = batch_limit(cols)[uniq]
    grid, distinct = batch_grid(limit)
    # The grid needs the ITL model (W(b)); power is needed only at each row's chosen point and peak point: for a few
    # set-ups it is evaluated on the whole grid in this pass (cheaper than a second pass), else below at those points
    # (ONE_PASS_MAX_SETUPS). Only the distinct points are evaluated (the padding repeats the limit).
    er, ec = np.nonzero(np.arange(GRID_POINTS)[None, :] < distinct[:, None])
    one_pass = n <= ONE_PASS_MAX_SETUPS
    got = request_time(evaluate, cols, uniq[er], grid[er, ec], limit[er], learned,
                       targets=("itl", "power") if one_pass else ("itl",), classes=classes)
    req = spread(got["request_s"], distinct)
    itl = spread(got["res"]["itl"], distinct)
    batch = spread(np.asarray(got["batch"], dtype=np.float64), distinct)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(np.isfinite(req) & (req > 0), grid / req, 0.0)
    lam = lam[slot]  # back to one row per triple (the SLA may differ per row)
    if max_itl_s is not None:
        sla = np.asarray(max_itl_s, dtype=np.float64)[:, None]
        lam = np.where(np.isnan(sla) | (itl[slot] * itl_scale <= sla), lam, 0.0)
    k = np.argmax(lam, axis=1)
    pick = (slot, k)
    # the grid point whose throughput b / ITL(b) is highest: where the sub-batch bound binds for a row at the
    # batch limit, its power is this point's (sub_batch)
    _, peak = sub_batch(np.full(n, np.inf), limit, batch, itl)
    peak_k = np.where(peak >= 0, peak, 0)
    if one_pass:
        grid_power = spread(got["res"]["power"], distinct)
        power_w, peak_power = grid_power[pick], grid_power[np.arange(n), peak_k]
    else:
        power_w, peak_power = _chosen_power(evaluate, cols, learned, uniq, grid, limit, slot * GRID_POINTS + k,
                                            np.arange(n) * GRID_POINTS + peak_k, classes)
    return {"max_qps": lam[np.arange(len(triples)), k], "batch": batch[pick], "concurrency": grid[pick],
            "itl_s": itl[pick], "power_w": power_w, "request_s": req[pick],
            "peak_k": np.where(peak >= 0, peak, -1)[slot], "peak_power": peak_power[slot],
            "limit": limit[slot], "grid_batch": batch[slot], "grid_itl": itl[slot], "grid_conc": grid[slot],
            "grid_req": req[slot], "grid_points": distinct[slot],
            "max_concurrency": np.maximum(cols["fit_sequences"], 0.0)}


# At most this many distinct set-ups, :func:`capacity_table` evaluates power on the whole grid in the ITL pass
# (a one-row question: ~0.1 ms less than a second pass); above it, power only at the chosen points. Either way
# each point's power comes from the same feature row, so the same value (row-wise models).
ONE_PASS_MAX_SETUPS = 2


def _chosen_power(evaluate: Callable[..., dict[str, np.ndarray]], cols: F.Columns, learned: bool,
                  uniq: np.ndarray, grid: np.ndarray, limit: np.ndarray, picked: np.ndarray,
                  peaks: np.ndarray, classes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Power at the flat grid points ``picked`` (one per triple) and ``peaks`` (one per set-up), each distinct
    point evaluated once (of set-ups that differ only in their cap too, with ``classes``): the same feature row as
    in the grid, at 1/GRID_POINTS of evaluating the whole grid."""
    chosen, back = np.unique(np.concatenate([picked, peaks]), return_inverse=True)  # distinct (set-up, point)
    back = back.reshape(-1)
    cs, ck = chosen // GRID_POINTS, chosen % GRID_POINTS
    power = request_time(evaluate, cols, uniq[cs], grid[cs, ck], limit[cs], learned, targets=("power",),
                         classes=classes)["res"]["power"]
    return power[back[:len(picked)]], power[back[len(picked):]]


_GRID_AND_END = np.append(BATCH_GRID, np.inf)


def batch_grid(limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(grid, points): rows × :data:`GRID_POINTS`, each row's :data:`BATCH_GRID` batches below its ``limit``
    (ascending; the first is batch 1, which the "misses the SLA at any load" check reads), then the limit, then
    the limit again as padding (so every row has the same width and the last point is the limit); ``points``: how
    many of a row's are distinct (all but the padding)."""
    below = _GRID_AND_END[None, :] < limit[:, None]  # a prefix of each row
    return np.where(below, _GRID_AND_END[None, :], limit[:, None]), below.sum(axis=1) + 1


def spread(values: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Each row's first ``points`` grid values (``values``: all rows' in row-major order, flat) on the full
    rows × :data:`GRID_POINTS` grid, the padding repeating each row's last value (the limit's)."""
    col = np.arange(GRID_POINTS)[None, :]
    full = np.empty((len(points), GRID_POINTS), dtype=np.float64)
    full[col < points[:, None]] = values
    return full[np.arange(len(points))[:, None], np.minimum(col, points[:, None] - 1)]


def sub_batch_itl(itl: np.ndarray, batch: np.ndarray, grid_batch: np.ndarray, grid_itl: np.ndarray) -> np.ndarray:
    """ITL at ``batch`` no longer than running it as sub-batches allows: ``min(ITL, batch / best)``, where
    ``best`` is the highest throughput ``b / ITL(b)`` over the capacity grid's batches ``b <= batch``
    (rows × points). Leaves ITL as it is where no grid point qualifies. Arrays of rows."""
    return sub_batch(itl, batch, grid_batch, grid_itl)[0]


def sub_batch(itl: np.ndarray, batch: np.ndarray, grid_batch: np.ndarray,
              grid_itl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(:func:`sub_batch_itl`, the grid point whose throughput it adopts: its column index where the bound
    binds, -1 where the row runs at its own batch). Where it binds the GPU decodes sub-batches of that grid
    batch back to back, so the row's power is the power at that grid point (:func:`served_point_power`):
    equal tokens/s means the same served batch and the same power. One-row arrays give the scalar path the
    same bits (:func:`sub_batch_one`)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (grid_batch <= batch[:, None]) & np.isfinite(grid_itl) & (grid_itl > 0)
        tput = np.where(ok, grid_batch / grid_itl, 0.0)
        k = np.argmax(tput, axis=1)
        best = tput[np.arange(len(k)), k]
        bounded = batch / best
        binds = (best > 0) & (bounded < itl)
        return np.where(binds, bounded, itl), np.where(binds, k, -1)


def sub_batch_one(itl: float, batch: float, grid_batch: Sequence[float],
                  grid_itl: Sequence[float]) -> tuple[float, int]:
    """:func:`sub_batch` of one row on floats (the same operations, so the same bits)."""
    best, k = 0.0, -1
    for j, (b, i) in enumerate(zip(grid_batch, grid_itl)):
        if b <= batch and math.isfinite(i) and i > 0.0 and b / i > best:
            best, k = b / i, j
    if best > 0.0 and batch / best < itl:
        return batch / best, k
    return itl, -1


def served_point_power(evaluate: Callable[..., dict[str, np.ndarray]], cols: F.Columns, index: np.ndarray,
                       grid_conc: np.ndarray, limit: np.ndarray, learned: bool) -> np.ndarray:
    """Power of rows ``index`` at their adopted grid points (concurrencies ``grid_conc``, ``limit`` slots):
    the same feature rows as the capacity grid, so the same values."""
    return request_time(evaluate, cols, index, grid_conc, limit, learned, targets=("power",))["res"]["power"]


# Workload fields that describe the offered load; every other field describes the engine set-up.
LOAD_FIELDS = ("kind", "qps", "concurrency", "num_requests")


def _key(t: tuple[Any, Any, Any], learned: bool) -> tuple[Any, ...]:
    """What the capacity of a row depends on: the specs and every engine set-up field (batch cap, tokens,
    engine, era, ITL statistic, TP degree, …), not the offered load (except through the workload
    features of a model trained on server rows). Derived from the dataclass fields, so a new Workload
    field is part of the key unless it is listed in :data:`LOAD_FIELDS`."""
    g, m, w = t
    get = _SETUP.get((type(w), learned))
    if get is None:  # once per workload class: reading fields() per row cost ~15 % of predict_table
        names = [f.name for f in fields(w) if learned or f.name not in LOAD_FIELDS]
        get = _SETUP[(type(w), learned)] = attrgetter(*names)
    return (id(g), id(m), *get(w))


_SETUP: dict[tuple[type, bool], Callable[[Any], tuple[Any, ...]]] = {}


def row_keys(rows: Sequence[tuple[Any, Any, Any]], learned: bool) -> list[tuple[Any, ...]]:
    """:func:`_key` of every row, each workload object's fields read once (the rows of a rank share a few
    workloads; ``rows`` keeps them alive, so their ids are not reused during the call)."""
    setup: dict[int, tuple[Any, ...]] = {}
    out = []
    for g, m, w in rows:
        got = setup.get(id(w))
        if got is None:
            got = setup[id(w)] = _key((None, None, w), learned)[2:]
        out.append((id(g), id(m), *got))
    return out


def overload_message(qps: float, max_qps: float, sla: bool = False) -> str:
    """The one-line overload state: what the load needs and what the GPU sustains."""
    within = " within the ITL SLA" if sla else ""
    return f"overloaded: needs {qps:.4g} req/s, sustains at most {max_qps:.4g} req/s{within}"


def itl_miss(itl_s: float, max_itl_ms: float) -> str:
    """The ITL part of an SLA miss, in words: ``ITL 62.0 ms > 50 ms``."""
    return f"ITL {itl_s * 1e3:.1f} ms > {max_itl_ms:g} ms"


def sla_miss(itl_s: float, ttft_s: float | None, max_itl_ms: float | None, max_ttft_ms: float | None) -> str | None:
    """Which SLA is missed, in words (ITL first; TTFT None = unbounded), or None."""
    if max_itl_ms is not None and itl_s * 1e3 > max_itl_ms:
        return itl_miss(itl_s, max_itl_ms)
    if max_ttft_ms is not None and (ttft_s is None or ttft_s * 1e3 > max_ttft_ms):
        shown = "unbounded" if ttft_s is None else f"{ttft_s * 1e3:.1f} ms"
        return f"TTFT {shown} > {max_ttft_ms:g} ms"
    return None
