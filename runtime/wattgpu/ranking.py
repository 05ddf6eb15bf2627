"""Rank GPUs for serving one LLM: which ones hold it, which meet a latency SLA, which use least energy.

Every GPU is predicted in one vectorised pass (:meth:`Predictor.predict_specs_safe`); GPUs that cannot
hold the model or miss the SLA are listed separately with the reason.

``RankResult.to_dict()`` keys (stable):

- ``llm``, ``workload`` (the Workload fields), ``tp`` (the group size asked for, or ``"auto"``), ``sort`` (``energy`` | ``power`` | ``itl``),
  ``max_itl_ms`` (null = no SLA), ``strict``, ``sla_basis`` (``point`` or the interval bound used),
  ``usd_per_kwh``, ``gco2_per_kwh``, ``pue``, ``best`` (GPU name of the first candidate or null);
- ``candidates``: list, best first, of entries: every key of a prediction (``Prediction.to_dict()``, same names
  and SI units; ``energy`` priced with the rank's prices) plus the rank-only keys of
  :data:`wattgpu.record.RANK_ONLY` (``rank``, ``itl_sla_s``, ``replicas``, ``qps_per_replica``, ``fleet_power_w``,
  ``max_batch``, ``launch_args``, ``max_model_len``, ``kv_sequences_at_max_model_len``, ``measured_in_training``);
- ``max_ttft_ms``, ``usd_per_gpu_hour``, ``max_utilization`` (the fleet's utilization target, null without replicas);
- ``excluded``: list of ``gpu``, ``tp``, ``reason_kind`` (``does_not_fit`` | ``misses_sla`` | ``overloaded`` |
  ``no_group`` | ``unsupported`` | ``error``), ``reason`` (one line) and ``prediction`` (the entry as above when one
  could be made, else null);
- ``replicas`` (``null``, ``"auto"`` or the fixed count asked for) and ``fleet_assumption`` (the
  even-split assumption, null without replicas).
"""
from __future__ import annotations

import math
import operator
from dataclasses import field, fields, replace
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from .frozen import dataclass
from .serving import capacity, fleet
from . import checks, parallel, questions, record
from . import features as F
from .errors import (ArgumentTypeError, ModelFitError, SpecValidationError, UnsupportedModelError, WattGPUError,
                     require_type)
from .energy import Prices, check_prices
from .serving.fleet import EVEN_SPLIT, check_max_utilization, check_replicas
from .launch import ContextPlan, context_plans, model_reference, vllm_args
from .quant import with_dtype
from .prediction import Prediction
from .predictor import Predictor, check_rows, default_predictor
from .results import memo_for
from .workload import Workload

SORT_KEYS = ("energy", "power", "itl", "cost")
_PREDICTION_FIELDS = tuple(f.name for f in fields(Prediction))
_EXCLUDE_ORDER = {"overloaded": 0, "misses_sla": 0, "does_not_fit": 1, "no_group": 2, "unsupported": 3, "error": 4}


@dataclass(frozen=True)
class RankEntry(Prediction):
    """One GPU's predicted operating point for the ranked LLM and workload: the :class:`Prediction` (every
    field, same names and units) plus the rank-only fields declared in :data:`wattgpu.record.RANK_ONLY`.

    ``prices`` are the rank's (usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour): ``energy_figures`` and the
    JSON's ``energy`` are priced with them."""

    itl_sla_s: float = math.nan
    replicas: int = 1
    qps_per_replica: float | None = None
    max_batch: int = 256
    launch_args: tuple[str, ...] | None = None
    max_model_len: int | None = None
    kv_sequences_at_max_model_len: int | None = None
    measured_in_training: bool | None = None  # the models were trained on measurements of this GPU
    prices: Prices = record.DEFAULT_PRICES

    @property
    def j_per_token(self) -> float:
        """Energy per token of the group (J): ``total_power_w`` × ``system_s_per_token``."""
        return self.total_power_w * self.system_s_per_token

    @property
    def energy_figures(self) -> dict[str, Any]:
        """The ``energy`` figures at the rank's ``prices`` (:meth:`Prediction.energy`)."""
        return self.energy(*self.prices)

    @property
    def fleet_power_w(self) -> float:
        """Mean power of all replicas (each a group of ``tp`` GPUs) together (W)."""
        return self.replicas * self.total_power_w

    def to_dict(self, prices: Prices | None = None, rank: int | None = None) -> dict[str, Any]:
        """The prediction's JSON (:meth:`Prediction.to_dict`, priced with the rank's prices) plus the rank-only
        fields; ``rank`` (1 = best) when given."""
        out = record.to_json(self, self.prices if prices is None else prices, record.rank_entry_fields())
        if rank is not None:
            out["rank"] = rank
        return out


@dataclass(frozen=True)
class Excluded:
    """A GPU left out of the ranking, and why."""

    gpu: str
    reason_kind: str
    reason: str
    entry: RankEntry | None = None
    tp: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "tp": self.tp, "reason_kind": self.reason_kind, "reason": self.reason,
                "prediction": None if self.entry is None else self.entry.to_dict()}


@dataclass(frozen=True)
class RankResult:
    """Candidates (best first) and excluded GPUs for one LLM and workload."""

    llm: str
    workload: Workload
    sort: str
    max_itl_ms: float | None
    strict: bool
    sla_basis: str
    usd_per_kwh: float | None
    gco2_per_kwh: float | None
    pue: float
    candidates: Sequence[RankEntry] = ()  # a tuple, or the entries of a table built as they are read (:class:`Entries`)
    excluded: tuple[Excluded, ...] = field(default_factory=tuple)
    replicas: int | str | None = None
    tp: int | str = 1
    max_ttft_ms: float | None = None
    usd_per_gpu_hour: float | None = None
    max_utilization: float | None = None

    @property
    def best(self) -> RankEntry | None:
        return self.candidates[0] if self.candidates else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "llm": self.llm, "workload": self.workload.to_dict(), "tp": self.tp, "sort": self.sort, "max_itl_ms": self.max_itl_ms,
            "strict": self.strict, "sla_basis": self.sla_basis, "usd_per_kwh": self.usd_per_kwh,
            "gco2_per_kwh": self.gco2_per_kwh, "pue": self.pue,
            "best": self.best.gpu if self.best else None,
            "candidates": [c.to_dict(rank=i + 1) for i, c in enumerate(self.candidates)],
            "excluded": [e.to_dict() for e in self.excluded],
            "replicas": self.replicas, "fleet_assumption": None if self.replicas is None else EVEN_SPLIT,
            "max_ttft_ms": self.max_ttft_ms, "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "max_utilization": self.max_utilization,
        }


def sla_itl(p: Prediction, strict: bool) -> tuple[float, str]:
    """The ITL compared with the SLA: the point prediction, or with ``strict`` the upper bound of the
    95 % interval if the models carry one, else of the 80 % interval, else the point."""
    if strict:
        for level in (0.95, 0.8):
            for iv in p.itl_intervals:
                if math.isclose(iv.level, level):
                    return iv.high, f"upper bound of the {int(round(level * 100))}% interval"
    return p.itl_s, "point prediction"


def _entry(p: Prediction, strict: bool, prices: Prices, replicas: int = 1, row: Any = None,
           dtype: str | None = None, model: str | None = None, plan: ContextPlan | None = None,
           measured: bool | None = None) -> RankEntry:
    """The rank entry of prediction ``p`` of ``row``; ``model`` is what ``vllm serve`` loads and ``plan`` the
    row's context plan (:func:`wattgpu.launch.context_plans`; no launch line without it); ``measured``:
    whether the models were trained on this GPU (None: not said)."""
    itl_sla, _ = sla_itl(p, strict)
    wl = row[2] if row is not None else Workload.from_dict(p.workload)
    args = vllm_args(row[1], wl, dtype, plan.max_model_len, model) if plan is not None and row is not None else None
    extra = {"itl_sla_s": itl_sla, "replicas": replicas, "qps_per_replica": p.workload.get("qps"),
             "max_batch": int(wl.max_batch), "launch_args": None if args is None else tuple(args),
             "max_model_len": None if plan is None else plan.max_model_len,
             "kv_sequences_at_max_model_len": None if plan is None else plan.kv_sequences,
             "measured_in_training": measured, "prices": prices}
    if plan is not None and plan.note is not None:
        extra["warnings"] = (*p.warnings, plan.note)
    return extend(p, extra)


_RANK_ONLY_FIELDS = tuple(f.name for f in fields(RankEntry) if f.name not in _PREDICTION_FIELDS)
_ENTRY_FIELDS = frozenset(f.name for f in fields(RankEntry))


def extend(p: Prediction, extra: Mapping[str, Any]) -> RankEntry:
    """``RankEntry(**every field of p, **extra)`` without the frozen dataclass's field-by-field ``__init__``
    (a third of a whole-catalog rank's time): ``extra`` must name every rank-only field (and may replace
    prediction fields); the values are the ones the constructor would store (tests/test_rank.py compares)."""
    missing, unknown = set(_RANK_ONLY_FIELDS) - set(extra), set(extra) - _ENTRY_FIELDS
    if missing or unknown:
        raise TypeError(f"extend: rank-only fields missing {sorted(missing)}, unknown fields {sorted(unknown)}")
    entry = object.__new__(RankEntry)
    state = entry.__dict__
    state.update(p.__dict__)
    state.update(extra)
    return entry


def check_max_model_len(max_model_len: Any, wl: Workload) -> int | None:
    """The user's ``max_model_len`` as an int of at least the workload's input + output tokens, or None."""
    if max_model_len is None:
        return None
    max_model_len = questions.RANK.param("max_model_len").check(max_model_len)
    if max_model_len < wl.context_tokens:
        raise WattGPUError(f"max_model_len = {int(max_model_len)} is shorter than the workload's input + output tokens "
                           f"({wl.context_tokens}): the server would refuse these requests; raise it or shorten them")
    return int(max_model_len)


def misses(p: Prediction, strict: bool, max_itl_ms: float | None, max_ttft_ms: float | None) -> str | None:
    """Which SLA ``p`` misses, in words (``ITL 62.0 ms > 50 ms``), or None when it meets both."""
    return capacity.sla_miss(sla_itl(p, strict)[0], p.ttft_s, max_itl_ms, max_ttft_ms)


# Batch caps whose J/token is within this share of the lowest count as equally good; the largest of them is
# kept (most headroom and queue slots): at low load a Poisson server's energy barely depends on the cap,
# and a cap of 1 would buy 0.1 % energy with a queue in front of every request.
ENERGY_TIE = 0.01


def batch_caps(limit: float) -> list[int]:
    """The engine batch caps the SLA search tries: 1, 2, 4, … up to ``limit`` (batch cap and memory), and
    ``limit`` itself."""
    top = max(1, int(limit))
    caps = {top}
    b = 1
    while b < top:
        caps.add(b)
        b *= 2
    return sorted(caps)


class _Option(NamedTuple):
    """A batch cap in the SLA search, and the numbers the search reads of the row at that cap."""

    cap: int
    ok: bool  # False: the row raises a WattGPUError
    overloaded: bool
    j_per_token: float
    itl_s: float
    itl_sla_s: float  # the ITL compared with the SLA (sla_itl)
    ttft_s: float | None
    max_qps: float


def _numbers_of(p: Any, strict: bool) -> tuple[Any, ...]:
    """:class:`_Option`'s numbers (``ok`` onwards) of a Prediction or a WattGPUError."""
    if isinstance(p, WattGPUError):
        return (False, False, math.nan, math.nan, math.nan, None, math.nan)
    return (True, p.overloaded, p.energy_per_token_j, p.itl_s, sla_itl(p, strict)[0], p.ttft_s,
            float(p.max_qps or 0.0))


def _numbers(ev: Any, strict: bool) -> list[tuple[Any, ...]]:
    """:class:`_Option`'s numbers of every row of ``ev``, read from the arrays (``strict`` needs each
    Prediction's interval)."""
    out = []
    # plain lists, read once (no numpy scalar per row and field)
    ttft, itl, over, j, qps, bad = ([] if not ev.slot else ev.numbers[k].tolist() for k in (
        "ttft_s", "itl_s", "overloaded", "energy_per_token_j", "max_qps", "not_finite"))
    for i in range(len(ev.triples)):
        k = ev.slot.get(i)
        if strict or ev.errors[i] is not None or k is None or bad[k]:
            out.append(_numbers_of(ev.prediction(i), strict))
            continue
        t = ttft[k]
        out.append((True, bool(over[k]), j[k], itl[k], itl[k], t if math.isfinite(t) else None, qps[k]))
    return out


def _tried(pred: Any, rows: Sequence[tuple[Any, Any, Workload]], strict: bool
           ) -> tuple[list[tuple[_Option, ...]], dict[tuple[int, int], tuple[Any, int]]]:
    """Per row, an :class:`_Option` for the cap asked for and every cap tried (by cap), and where each row at a
    cap was evaluated in this call ((row, cap) -> (Evaluated, index)). The rows at every cap are evaluated
    together, in one pass (a row's numbers do not depend on the rows beside it); the options of each row are
    kept in the row memo (:class:`wattgpu.results.RowMemo`, per ``strict`` and row: specs and every workload
    field), so rows searched before are not evaluated again."""
    memo = memo_for(pred.bundle)
    keys = [(strict, k) for k in capacity.row_keys(rows, True)]
    kept: list[tuple[_Option, ...] | None] = [memo.option_get(k, r) for k, r in zip(keys, rows)]
    todo = [i for i, o in enumerate(kept) if o is None]
    evaluated: dict[tuple[int, int], tuple[Any, int]] = {}
    if todo:
        sub = [rows[i] for i in todo]
        errors, cols = checks.row_errors(sub)
        owner: list[int] = list(todo)  # the rows at the caps asked for come first
        variants: list[tuple[Any, Any, Workload]] = list(sub)
        capped: dict[tuple[int, int], Workload] = {}  # one Workload per (workload, cap)
        for i, f, e in zip(todo, cols["fit_batch"].tolist(), errors):
            if e is not None:
                continue
            g, m, w = rows[i]
            for b in batch_caps(min(float(w.max_batch), max(f, 1.0))):
                if b != w.max_batch:
                    wb = capped.get((id(w), b))
                    if wb is None:
                        wb = capped[(id(w), b)] = replace(w, max_batch=b)
                    owner.append(i)
                    variants.append((g, m, wb))
        ev = pred.evaluate_rows(variants)
        per: dict[int, list[_Option]] = {i: [] for i in todo}
        for j, (i, v, n) in enumerate(zip(owner, variants, _numbers(ev, strict))):
            per[i].append(_Option(v[2].max_batch, *n))
            evaluated[(i, v[2].max_batch)] = (ev, j)
        for i, options in per.items():
            options.sort(key=lambda o: o.cap)
            kept[i] = done = tuple(options)
            memo.option_put(keys[i], rows[i], done)
    return kept, evaluated  # type: ignore[return-value]


def search_caps(pred: Any, rows: Sequence[tuple[Any, Any, Workload]], strict: bool, max_itl_ms: float | None,
                max_ttft_ms: float | None) -> list[tuple[Any, tuple[Any, Any, Workload], str | None, str | None]]:
    """:func:`_search_where`'s choices with each chosen row's Prediction (or WattGPUError) in place of where it was
    evaluated: (prediction or error, the row at the chosen cap, exclusion kind or None, reason or None)."""
    return [(ev.prediction(j), row, kind, why) for ev, j, row, kind, why in
            _search_where(pred, rows, strict, max_itl_ms, max_ttft_ms)[0]]


Pick = tuple[Any, int, tuple[Any, Any, Workload], "str | None", "str | None"]  # (Evaluated, its row, the row, kind, why)


def _search_where(pred: Any, rows: Sequence[tuple[Any, Any, Workload]], strict: bool, max_itl_ms: float | None,
                  max_ttft_ms: float | None, asked: "_Asked | None" = None) -> tuple[list[Pick], F.Columns | None]:
    """Per row: the batch cap meeting the ITL and TTFT SLAs at the lowest energy per token (the largest cap
    within ``ENERGY_TIE`` of it), from the caps :func:`_tried` evaluates; the chosen rows' Predictions come from
    that pass, or, for rows whose options were kept from an earlier call, from one pass of the chosen rows.

    Returns (the :class:`Evaluated` holding the row at the chosen cap, its index there, that row, exclusion kind
    or None, reason or None); a row that cannot be predicted at the cap asked for is chosen there (its error). A row is excluded
    for the SLA only when no cap meets it: "misses SLA even at
    batch 1: …" when batch 1 already misses the ITL, else the best cap's miss; "overloaded" when every cap is.
    Also returns the chosen rows' feature columns when one pass evaluated exactly those rows (else None). With
    ``asked`` (the question of ``rows``), the checks of the rows that pass evaluates are kept there."""
    tried, evaluated = _tried(pred, rows, strict)
    memo = memo_for(pred.bundle)
    # per row: (cap, kind, reason), kept with its options (the memo's) per SLA
    choice = [memo.spec(options, _choose, max_itl_ms, max_ttft_ms, w.max_batch, w.qps)
              for (_, _, w), options in zip(rows, tried)]
    # the chosen rows (one Workload per (workload, cap), kept across calls); those not evaluated above, in one pass
    chosen = [(g, m, w if b == w.max_batch else memo.spec(w, _capped, b)) for (g, m, w), (b, _, _) in zip(rows, choice)]
    missing = [i for i, (b, _, _) in enumerate(choice) if (i, b) not in evaluated]
    cols = None
    if missing:
        sub = [chosen[i] for i in missing]
        ev = pred.evaluate_rows(sub, None if asked is None else asked.checked_of(sub))
        evaluated.update(((i, choice[i][0]), (ev, j)) for j, i in enumerate(missing))
        cols = ev.all_cols if len(missing) == len(rows) else None  # every chosen row, in order
    return [(*evaluated[(i, b)], row, kind, why) for i, (row, (b, kind, why)) in enumerate(zip(chosen, choice))], cols


def _choose(options: tuple[_Option, ...], max_itl_ms: float | None, max_ttft_ms: float | None,
            max_batch: int, qps: float | None) -> tuple[int, str | None, str | None]:
    """:func:`_search_where`'s choice for one row from its ``options`` (the row asked for cap ``max_batch`` at ``qps``):
    (cap, exclusion kind or None, reason or None)."""
    asked = next(o for o in options if o.cap == max_batch)
    good = [o for o in options if o.ok]
    if not asked.ok or not good:
        return asked.cap if not asked.ok else options[0].cap, None, None

    def miss(o: _Option, ttft_sla: float | None = max_ttft_ms) -> str | None:
        return capacity.sla_miss(o.itl_sla_s, o.ttft_s, max_itl_ms, ttft_sla)

    feasible = [o for o in good if not o.overloaded and miss(o) is None]
    if feasible:
        low = min(o.j_per_token for o in feasible) * (1.0 + ENERGY_TIE)
        return max((o for o in feasible if o.j_per_token <= low), key=lambda o: o.cap).cap, None, None
    o1 = good[0]  # batch cap 1
    itl1 = miss(o1, None)
    served = [o for o in good if not o.overloaded]
    if itl1 is not None:
        return o1.cap, "misses_sla", f"misses SLA even at batch 1: {itl1}"
    if not served:
        o = good[-1]
        return o.cap, "overloaded", capacity.overload_message(float(qps or 0.0), o.max_qps)
    o = min(served, key=lambda o: (o.ttft_s if o.ttft_s is not None else math.inf, o.itl_s))
    return o.cap, "misses_sla", f"misses SLA at every batch cap: at best (max_batch {o.cap}) {miss(o)}"


def _capped(w: Workload, cap: int) -> Workload:
    """``w`` at batch cap ``cap``."""
    return replace(w, max_batch=cap)


def _sort_key(sort: str) -> Callable[[RankEntry], tuple[Any, ...]]:
    if sort == "energy":
        return lambda e: (e.j_per_token, e.gpu, e.tp)
    if sort == "fleet":
        return lambda e: (e.fleet_power_w, e.j_per_token, e.gpu, e.tp)
    if sort == "power":
        return lambda e: (e.total_power_w, e.gpu, e.tp)
    if sort == "cost":
        return lambda e: (cost_per_mtok(e.energy_figures), e.j_per_token, e.gpu, e.tp)
    return lambda e: (e.itl_s, e.gpu, e.tp)


def cost_per_mtok(energy: Mapping[str, Any]) -> float:
    """$ per million tokens: the electricity (``--usd-per-kwh``, with PUE) plus the GPU rent
    (``--usd-per-gpu-hour``), whichever are given."""
    return float(energy.get("usd_per_mtok") or 0.0) + float(energy.get("usd_per_mtok_gpu_hours") or 0.0)


def rank(llm: Any, workload: Workload | None = None, gpus: Iterable[Any] | None = None,
         max_itl_ms: float | None = None, strict: bool = False, sort: str = "energy", predictor: Any = None,
         usd_per_kwh: float | None = None, gco2_per_kwh: float | None = None, pue: float = 1.0,
         replicas: int | str | None = None, dtype: str | None = None, tp: int | str | None = None,
         max_ttft_ms: float | None = None, usd_per_gpu_hour: float | None = None,
         max_utilization: float | None = None, max_model_len: int | None = None) -> RankResult:
    """Rank ``gpus`` (default: the whole catalog) for serving ``llm`` under ``workload``.

    Every candidate carries a launch line (``launch_args``) whose ``--max-model-len`` is ``max_model_len``
    (at least the workload's input + output tokens) or, by default, the model's context, and the number
    of such sequences its KV cache holds (see :mod:`wattgpu.launch`).

    ``tp``: tensor-parallel degree for every GPU (default: ``workload.tp``), or ``"auto"`` to try
    N ∈ {1, 2, 4, 8} per GPU type (only groups the GPU comes in and the model's heads divide into) and
    rank every (GPU, N) that fits; a GPU with no fitting group is excluded once, with the largest
    group's reason. With ``replicas`` each replica is one such group.

    With an SLA (``max_itl_ms``, the interval's upper bound with ``strict``; ``max_ttft_ms``) each GPU
    (and group) is predicted at every engine batch cap 1, 2, 4, … up to ``workload.max_batch`` and the
    memory limit, and keeps the cap that meets the SLA at the lowest energy per token (``max_batch`` of
    its entry); it is excluded only when no cap does ("misses SLA even at batch 1: ITL 62.0 ms > 50 ms").
    GPUs that cannot hold the model are excluded with a one-line reason; the rest are sorted by
    ``sort``: energy per token (default), mean power, ITL, or cost ($ per million tokens: electricity plus
    GPU rent, whichever prices are given). ``usd_per_kwh``/``gco2_per_kwh`` with
    ``pue`` add $ and gCO2e per million tokens; ``usd_per_gpu_hour`` the GPU rent per million tokens.

    A server load beyond a GPU's capacity excludes it as ``overloaded``. With ``replicas`` (``"auto"`` or
    a count) and a server workload, ``workload.qps`` is the fleet's total rate: each GPU type gets the
    smallest number of independent replicas (or the fixed count) that carries it within the SLA and with
    each replica's utilization at most ``max_utilization`` (default ``fleet.MAX_UTILIZATION``), and
    candidates are ranked by fleet energy (fleet power at that rate; see :mod:`wattgpu.serving.fleet`).
    ``dtype`` overrides the checkpoint's weight dtype (see :func:`wattgpu.quant.with_dtype`).
    """
    wl = _as_workload(workload)
    # every number bounded as declared (wattgpu.questions.RANK) before any arithmetic on it
    questions.RANK.check({"max_itl_ms": max_itl_ms, "max_ttft_ms": max_ttft_ms, "replicas": replicas, "tp": tp,
                          "max_utilization": max_utilization, "max_model_len": max_model_len, "usd_per_kwh": usd_per_kwh,
                          "gco2_per_kwh": gco2_per_kwh, "pue": pue, "usd_per_gpu_hour": usd_per_gpu_hour})
    if not isinstance(sort, str) or sort not in SORT_KEYS:
        raise WattGPUError(f"sort = {sort!r} is invalid; expected one of {', '.join(SORT_KEYS)}")
    require_type("strict", strict, bool, "True or False")
    questions.check_sla_ms(max_itl_ms, max_ttft_ms)
    check_prices(usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour)
    if sort == "cost" and usd_per_kwh is None and usd_per_gpu_hour is None:
        raise WattGPUError("sort = 'cost' (--sort cost) needs a price: give usd_per_gpu_hour (--usd-per-gpu-hour, GPU "
                           "rent) and/or usd_per_kwh (--usd-per-kwh, electricity)")
    replicas = check_replicas(replicas)
    if max_utilization is not None and replicas is None and wl.kind != "server":
        raise WattGPUError("max_utilization: applies to a server workload only (give its total rate, qps)")
    util_target = check_max_utilization(max_utilization)
    pred = _as_predictor(predictor) or default_predictor()
    spec = with_dtype(pred.resolve_llm(llm), dtype)
    launch = (model_reference(llm, spec), check_max_model_len(max_model_len, wl))
    if replicas is not None and wl.kind != "server":
        raise WattGPUError(f"replicas = {replicas!r} needs a server workload with a total rate (--qps N)")
    gpu_specs = list(pred.catalog.gpus) if gpus is None else _unique([pred.resolve_gpu(g) for g in _gpu_list(gpus)])
    if not gpu_specs:
        raise WattGPUError("gpus: the list is empty; name at least one GPU or leave it out for the whole catalog")
    prices: Prices = (usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour)
    tp_asked: int | str = "auto" if tp == "auto" else (wl.tp if tp is None else parallel.check_tp_value(tp))
    split = None if tp_asked == "auto" else parallel.split_error(spec, int(tp_asked))
    if split is not None:  # the model's heads rule the degree out on every GPU: one error, not one per GPU
        raise split
    asked = _asked(pred, gpu_specs, spec, wl, tp_asked, launch[1])
    rows, failed = asked.rows, asked.failed
    ttft_sla = None if max_ttft_ms is None else float(max_ttft_ms)
    if replicas is not None:
        return _rank_fleet(pred, spec, rows, failed, wl, replicas, max_itl_ms, strict, sort, prices, tp_asked,
                           ttft_sla, util_target, dtype, launch)
    if max_itl_ms is not None or ttft_sla is not None:
        picks, chosen_cols = _search_where(pred, rows, strict, max_itl_ms, ttft_sla, asked)
    else:
        evaluated = pred.evaluate_rows(rows, asked.checked)
        picks, chosen_cols = [(evaluated, i, row, None, None) for i, row in enumerate(rows)], evaluated.all_cols
    if not strict and sort in _TABLE_SORTS:
        room = util_target if wl.kind == "server" else None
        plans_of = (lambda: asked.plans) if max_itl_ms is None and ttft_sla is None else \
            (lambda: asked.plans_of([p[2] for p in picks]))
        candidates_, excluded_ = _table_order(pred, picks, failed, plans_of, sort, prices, dtype, launch[0],
                                              float(wl.qps or 0.0), room)
        return RankResult(llm=spec.name, workload=wl, sort=sort,
                          max_itl_ms=None if max_itl_ms is None else float(max_itl_ms), strict=False,
                          sla_basis="point prediction", usd_per_kwh=usd_per_kwh, gco2_per_kwh=gco2_per_kwh,
                          pue=pue, candidates=candidates_, excluded=excluded_, tp=tp_asked, max_ttft_ms=ttft_sla,
                          usd_per_gpu_hour=usd_per_gpu_hour, max_utilization=room)
    chosen = [(ev.prediction(j), row, kind, why) for ev, j, row, kind, why in picks]
    candidates: list[RankEntry] = []
    excluded: list[tuple[tuple[int, float, str, int], Excluded]] = []
    basis = "point prediction"
    errors: dict[str, tuple[int, WattGPUError]] = dict(failed)  # per GPU: the error of its largest group tried
    served: set[str] = set()
    plans = context_plans([row for _, row, _, _ in chosen], launch[1], chosen_cols)
    trained = _trained_gpus(pred)
    for (r, row, kind, why), plan in zip(chosen, plans):
        g, _, w = row
        if isinstance(r, WattGPUError):
            if g.name not in errors or w.tp >= errors[g.name][0]:
                errors[g.name] = (w.tp, r)
            continue
        served.add(g.name)
        _, basis_r = sla_itl(r, strict)
        basis = basis_r if strict else basis
        if kind is None and r.overloaded:
            kind, why = "overloaded", capacity.overload_message(float(wl.qps or 0.0), float(r.max_qps or 0.0))
        entry = _entry(r, strict, prices, row=row, dtype=dtype, model=launch[0], plan=plan,
                       measured=None if kind is not None else _measured(trained, g.name))
        if kind is not None:
            order = -float(r.max_qps or 0.0) if kind == "overloaded" else entry.itl_sla_s
            excluded.append(((0, order, g.name, w.tp), Excluded(g.name, kind, str(why), entry, tp=w.tp)))
            continue
        candidates.append(entry)
    _add_failed(excluded, errors, served)
    candidates.sort(key=_sort_key(sort))
    headroom = util_target if wl.kind == "server" else None
    if headroom is not None:
        candidates = headroom_order(candidates, headroom)
    excluded.sort(key=lambda t: t[0])
    return RankResult(llm=spec.name, workload=wl, sort=sort, max_itl_ms=None if max_itl_ms is None else float(max_itl_ms),
                      strict=strict, sla_basis=basis, usd_per_kwh=usd_per_kwh, gco2_per_kwh=gco2_per_kwh, pue=pue,
                      candidates=tuple(candidates), excluded=tuple(e for _, e in excluded), tp=tp_asked,
                      max_ttft_ms=ttft_sla, usd_per_gpu_hour=usd_per_gpu_hour, max_utilization=headroom)


_TABLE_SORTS = ("energy", "power", "itl")  # sort keys read from the numbers alone (cost reads each entry's prices)


class _Asked:
    """What a rank question reads of its spec objects alone (the GPUs, the LLM, the workload, the group size and
    the context asked): its rows, the GPUs with no group, and, when first read, the rows' checks and feature
    columns (:func:`wattgpu.predictor.check_rows`) and context plans, and those of the rows at the batch caps an SLA
    chose (:meth:`checked_of`, :meth:`plans_of`). Kept per question in the bundle's row memo
    (:meth:`wattgpu.results.RowMemo.question_get`), so a question asked again computes no feature; its arrays are
    read-only."""

    OTHERS = 8  # lists of rows at the caps an SLA chose, kept per question

    def __init__(self, gpus: Sequence[Any], spec: Any, wl: Workload, tp: int | str,
                 max_model_len: int | None) -> None:
        self._max_model_len = max_model_len
        self.rows, self.failed = _rows(gpus, spec, wl, tp)
        self._checked: Any = None
        self._plans: list[ContextPlan] | None = None
        # per list of rows (their objects' ids): (the objects, their checks, their context plans or None)
        self._others: dict[tuple[int, ...], tuple[tuple[Any, ...], Any, list[list[ContextPlan]]]] = {}

    @property
    def checked(self) -> Any:
        """:func:`wattgpu.predictor.check_rows` of the rows."""
        if self._checked is None:
            self._checked = _read_only(check_rows(self.rows))
        return self._checked

    @property
    def plans(self) -> list[ContextPlan]:
        """:func:`wattgpu.launch.context_plans` of the rows."""
        if self._plans is None:
            self._plans = context_plans(self.rows, self._max_model_len, self.checked.all_cols)
        return self._plans

    def _other(self, rows: Sequence[tuple[Any, Any, Workload]]) -> tuple[Any, list[list[ContextPlan]]]:
        """The checks of ``rows`` (rows of this question at other batch caps: an SLA's choice, whose Workload
        objects the row memo keeps) and a box for their plans, kept per list of row objects."""
        objs = tuple(chain.from_iterable(rows))
        key = tuple(map(id, objs))
        hit = self._others.get(key)
        if hit is None or not all(map(operator.is_, hit[0], objs)):
            if len(self._others) >= self.OTHERS:
                self._others.clear()
            hit = self._others[key] = (objs, _read_only(check_rows(rows)), [])
        return hit[1], hit[2]

    def checked_of(self, rows: Sequence[tuple[Any, Any, Workload]]) -> Any:
        """:func:`wattgpu.predictor.check_rows` of ``rows`` (see :meth:`_other`)."""
        return self._other(rows)[0]

    def plans_of(self, rows: Sequence[tuple[Any, Any, Workload]]) -> list[ContextPlan]:
        """:func:`wattgpu.launch.context_plans` of ``rows`` (see :meth:`_other`)."""
        checked, box = self._other(rows)
        if not box:
            box.append(context_plans(list(rows), self._max_model_len, checked.all_cols))
        return box[0]


def _read_only(checked: Any) -> Any:
    """``checked`` (:func:`wattgpu.predictor.check_rows`) with its columns made read-only, to be kept."""
    for cols in (checked.all_cols, checked.cols):
        for v in cols.values():
            v.flags.writeable = False
    return checked


def _asked(pred: Any, gpus: Sequence[Any], spec: Any, wl: Workload, tp: int | str,
           max_model_len: int | None) -> _Asked:
    """The question's :class:`_Asked`, kept in the row memo."""
    memo = memo_for(pred.bundle)
    key = ("rank", tuple(map(id, gpus)), id(spec), wl, tp, max_model_len)
    objs = (*gpus, spec)
    hit = memo.question_get(key, objs)
    if hit is None:
        hit = _Asked(gpus, spec, wl, tp, max_model_len)
        memo.question_put(key, objs, hit)
    return hit


class Entries(Sequence[RankEntry]):
    """A rank's candidates in order, each :class:`RankEntry` built the first time it is read (a whole-catalog rank
    is decided on the numbers alone; building every entry costs as much again). Reads like a tuple."""

    __slots__ = ("_make", "_order", "_built")

    def __init__(self, make: Callable[[int], RankEntry], order: Sequence[int]) -> None:
        self._make, self._order = make, list(order)
        self._built: list[RankEntry | None] = [None] * len(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def _at(self, k: int) -> RankEntry:
        e = self._built[k]
        if e is None:
            e = self._built[k] = self._make(self._order[k])
        return e

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return tuple(self._at(j) for j in range(*k.indices(len(self._order))))
        return self._at(range(len(self._order))[k])  # negative indices, IndexError as a tuple's

    def __iter__(self) -> Any:
        return (self._at(k) for k in range(len(self._order)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Entries, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> Any:
        return tuple, (tuple(self),)


class _Numbers(NamedTuple):
    """What :func:`_table_order` reads of an :class:`Evaluated`'s numbers, as lists (no numpy scalar per read)."""

    power: list[float]
    per_token: list[float]
    itl: list[float]
    bad: list[bool]
    over: list[bool]
    max_qps: list[float]
    util: list[float]

    @classmethod
    def of(cls, ev: Any) -> "_Numbers":
        if not ev.slot:
            return cls([], [], [], [], [], [], [])
        return cls(*(ev.numbers[k].tolist() for k in ("power_w", "system_s_per_token", "itl_s", "not_finite",
                                                      "overloaded", "max_qps", "utilization")))


def _table_order(pred: Any, picks: Sequence[Pick], failed: Mapping[str, tuple[int, WattGPUError]],
                 plans_of: Callable[[], list[ContextPlan]], sort: str, prices: Prices, dtype: str | None,
                 model: str | None, qps: float, headroom: float | None) -> tuple[Entries, tuple[Excluded, ...]]:
    """The candidates (built as read) and exclusions of a rank with no fleet and no ``strict`` bound, decided on
    the numbers of each row where it was evaluated (``picks``: at its chosen cap, with the SLA's exclusion if
    any); a server at rate ``qps`` in the ``headroom`` order (:func:`headroom_order`); ``plans_of`` gives the
    picked rows' context plans when the first entry is built. The same entries, order and exclusions as the
    entry-by-entry path (tests/test_rank_table.py)."""
    errors: dict[str, tuple[int, WattGPUError]] = dict(failed)
    served: set[str] = set()
    order: list[tuple[tuple[Any, ...], int, float]] = []  # (sort key, pick, utilization)
    excluded: list[tuple[tuple[int, float, str, int], Excluded]] = []
    trained = _trained_gpus(pred)
    plans: list[list[ContextPlan]] = []

    def make(i: int, measured: bool = True) -> RankEntry:
        ev, j, row = picks[i][:3]
        r = ev.prediction(j)
        if isinstance(r, WattGPUError):
            raise r
        if not plans:
            plans.append(plans_of())
        return _entry(r, False, prices, row=row, dtype=dtype, model=model, plan=plans[0][i],
                      measured=_measured(trained, row[0].name) if measured else None)

    read: dict[int, _Numbers] = {}  # per Evaluated (by id; each is held by picks)
    for i, (ev, j, (g, _, w), kind, why) in enumerate(picks):
        n = read.get(id(ev))
        if n is None:
            n = read[id(ev)] = _Numbers.of(ev)
        k = ev.slot.get(j)
        if k is None or n.bad[k]:
            err = ev.prediction(j)  # the row's WattGPUError
            if g.name not in errors or w.tp >= errors[g.name][0]:
                errors[g.name] = (w.tp, err)
            continue
        served.add(g.name)
        if kind is None and n.over[k]:
            kind, why = "overloaded", capacity.overload_message(qps, float(n.max_qps[k] or 0.0))
        if kind is not None:  # (the point ITL is the entry's itl_sla_s without strict)
            key = -float(n.max_qps[k] or 0.0) if kind == "overloaded" else n.itl[k]
            excluded.append(((0, key, g.name, w.tp), Excluded(g.name, kind, str(why), make(i, False), tp=w.tp)))
            continue
        total = n.power[k] * w.tp  # RankEntry.total_power_w, j_per_token: the same float operations
        first = total * n.per_token[k] if sort == "energy" else total if sort == "power" else n.itl[k]
        order.append(((first, g.name, w.tp), i, n.util[k]))
    order.sort(key=itemgetter(0))
    _add_failed(excluded, errors, served)
    excluded.sort(key=lambda t: t[0])
    if headroom is None:
        return Entries(make, [i for _, i, _ in order]), tuple(e for _, e in excluded)
    within = [i for _, i, u in order if u <= headroom + 1e-12]  # headroom_order's split, on the numbers
    above = [i for _, i, u in order if u > headroom + 1e-12]
    marked = set(above)
    return (Entries(lambda i: above_headroom(make(i), headroom) if i in marked else make(i), within + above),
            tuple(e for _, e in excluded))


IDLE_FLEET_FACTOR = 2.0  # a fleet with this many times the replicas its capacity needs says why


def idle_fleet_note(entry: RankEntry, total_qps: float, max_utilization: float) -> str | None:
    """Why a fleet runs far below the headroom, or None: when its replicas are at least
    ``IDLE_FLEET_FACTOR`` × the count the capacity alone needs (``total_qps`` / (capacity × headroom)), the
    SLA is what sizes it (only a small batch cap meets it, or the queue at higher load breaks it)."""
    if entry.replicas <= 1 or not entry.max_qps or not math.isfinite(entry.max_qps):
        return None
    needed = max(1, math.ceil(total_qps / (entry.max_qps * max_utilization) * (1 - 1e-12)))
    if entry.replicas < IDLE_FLEET_FACTOR * needed:
        return None
    util = entry.utilization or 0.0
    return (f"{entry.replicas} replicas where capacity alone needs {needed}: each runs at {util:.0%} of its capacity, "
            f"far below the {max_utilization:.0%} headroom, because the SLA holds only at this light load (batch cap "
            f"{entry.max_batch}); a faster GPU or a looser SLA needs fewer GPUs")


def _trained_gpus(pred: Any) -> frozenset[str]:
    """The GPUs of the bundle's training domain (empty when the bundle does not record them)."""
    return frozenset(pred.bundle.schema.domain.get("gpus", ()))


def _measured(trained: frozenset[str], gpu: str) -> bool | None:
    """A candidate's ``measured_in_training``: None when the bundle does not record its GPUs."""
    return (gpu in trained) if trained else None


def headroom_order(candidates: Sequence[RankEntry], target: float) -> list[RankEntry]:
    """Single replicas of a server load: those within the utilization ``target`` (the fleets' headroom,
    ``--max-utilization``, 0.8 by default) first, then those above it, each group in the sort order; an
    entry above it says why in its warnings. One default answer whether or not ``--replicas`` is given:
    a GPU run at 85 % of its capacity queues requests sharply more for any burst (its TTFT grows as
    1 / (1 − utilization))."""
    within = [c for c in candidates if c.utilization is None or c.utilization <= target + 1e-12]
    return within + [above_headroom(c, target) for c in candidates
                     if c.utilization is not None and c.utilization > target + 1e-12]


def above_headroom(c: RankEntry, target: float) -> RankEntry:
    """Candidate ``c`` (above the utilization ``target``) with the warning that says so."""
    return replace(c, warnings=(*c.warnings, f"runs at {c.utilization:.0%} of its capacity, above the "
                                f"{target:.0%} headroom (--max-utilization): ranked after the GPUs within it; "
                                "--replicas auto adds replicas instead"))


def _add_failed(excluded: list[tuple[tuple[int, float, str, int], Excluded]],
                errors: Mapping[str, tuple[int, WattGPUError]], served: set[str]) -> None:
    """One exclusion per GPU none of whose groups could be predicted (the largest group's reason)."""
    for name, (n, err) in errors.items():
        if name in served:
            continue  # another group size of this GPU works; the failing ones are not news
        kind, reason = _reason(err, n)
        excluded.append(((_EXCLUDE_ORDER[kind], 0.0, name, n), Excluded(name, kind, reason, tp=n)))


def _rows(gpus: Sequence[Any], spec: Any, wl: Workload, tp: int | str
          ) -> tuple[list[tuple[Any, Any, Workload]], dict[str, tuple[int, WattGPUError]]]:
    """The (GPU, LLM, workload) rows to predict at the checked group size ``tp`` (or every size that
    exists with ``"auto"``), and GPUs with no group to try."""
    if isinstance(tp, int):
        w = wl if wl.tp == tp else replace(wl, tp=tp)
        return [(g, spec, w) for g in gpus], {}
    variants = {n: wl if wl.tp == n else replace(wl, tp=n) for n in parallel.TP_CHOICES}
    rows: list[tuple[Any, Any, Workload]] = []
    failed: dict[str, tuple[int, WattGPUError]] = {}
    for g in gpus:
        ns = parallel.candidate_groups(g, spec)
        if not ns:
            n = parallel.TP_CHOICES[1]
            failed[g.name] = (n, parallel.group_error(g, spec, n) or WattGPUError(f"{g.name}: no tensor-parallel group"))
        rows.extend((g, spec, variants[n]) for n in ns)
    return rows, failed


def _itl_scale(pred: Any, strict: bool) -> tuple[float, str]:
    """The factor the SLA check applies to the point ITL (the interval's upper factor with ``strict``)."""
    if strict:
        for level in (0.95, 0.8):
            for lv, _, hi in pred.bundle.interval_factors.get("itl", ()):
                if math.isclose(lv, level):
                    return hi, f"upper bound of the {int(round(level * 100))}% interval"
    return 1.0, "point prediction"


def _rank_fleet(pred: Any, spec: Any, rows: Sequence[tuple[Any, Any, Workload]],
                failed: Mapping[str, tuple[int, WattGPUError]], wl: Workload, replicas: int | str,
                max_itl_ms: float | None, strict: bool, sort: str, prices: Prices, tp_asked: int | str,
                max_ttft_ms: float | None, max_utilization: float, dtype: str | None,
                launch: tuple[str | None, int | None] = (None, None)) -> RankResult:
    """Rank GPU types (and, with ``tp="auto"``, group sizes) by the fleet of replicas that carries
    ``wl.qps`` (see :mod:`wattgpu.serving.fleet`); each replica is one tensor-parallel group."""
    scale, basis = _itl_scale(pred, strict)
    sla = fleet.Sla(None if max_itl_ms is None else max_itl_ms / 1e3, None if max_ttft_ms is None else max_ttft_ms / 1e3,
                    max_utilization, scale)
    by_tp: dict[int, list[Any]] = {}
    for g, _, w in rows:
        by_tp.setdefault(w.tp, []).append(g)
    candidates: list[RankEntry] = []
    excluded: list[tuple[tuple[int, float, str, int], Excluded]] = []
    errors: dict[str, tuple[int, WattGPUError]] = dict(failed)
    served: set[str] = set()
    trained = _trained_gpus(pred)
    for group, gpus in sorted(by_tp.items()):
        w = wl if wl.tp == group else replace(wl, tp=group)
        planned = fleet.plan(pred, spec, gpus, w, replicas, sla)
        plans = dict(zip((g.name for g in gpus), context_plans([(g, spec, w) for g in gpus], launch[1])))
        for g, (n, r, why) in zip(gpus, planned):
            if isinstance(r, WattGPUError):
                if g.name not in errors or group >= errors[g.name][0]:
                    errors[g.name] = (group, r)
                continue
            served.add(g.name)
            entry = _entry(r, strict, prices, replicas=n, row=(g, spec, Workload.from_dict(r.workload)), dtype=dtype,
                           model=launch[0], plan=plans[g.name],
                           measured=None if why is not None else _measured(trained, g.name))
            if why is not None:
                kind = "overloaded" if why.startswith("overloaded") else "misses_sla"
                reason = why if replicas == "auto" else f"{n} replicas: {why}"
                excluded.append(((0, entry.itl_sla_s, g.name, group), Excluded(g.name, kind, reason, entry, tp=group)))
                continue
            note = idle_fleet_note(entry, float(wl.qps or 0.0), max_utilization)
            candidates.append(entry if note is None else replace(entry, warnings=(*entry.warnings, note)))
    _add_failed(excluded, errors, served)
    candidates.sort(key=_sort_key("fleet" if sort == "energy" else sort))
    candidates = headroom_order(candidates, max_utilization)  # a fixed count may run replicas above it
    excluded.sort(key=lambda t: t[0])
    return RankResult(llm=spec.name, workload=wl, sort=sort, max_itl_ms=None if max_itl_ms is None else float(max_itl_ms),
                      strict=strict, sla_basis=basis, usd_per_kwh=prices[0], gco2_per_kwh=prices[1], pue=prices[2],
                      candidates=tuple(candidates), excluded=tuple(e for _, e in excluded), replicas=replicas,
                      tp=tp_asked, max_ttft_ms=max_ttft_ms, usd_per_gpu_hour=prices[3], max_utilization=max_utilization)


def _as_workload(workload: Any) -> Workload:
    if workload is None:
        return Workload()
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, Mapping):
        return Workload.from_dict(workload)
    raise ArgumentTypeError(f"workload: expected a Workload, a mapping of its fields or None, "
                            f"got {type(workload).__name__}")


def _as_predictor(predictor: Any) -> Any:
    if predictor is not None and not isinstance(predictor, Predictor):
        raise ArgumentTypeError(f"predictor: expected a wattgpu.Predictor or None, got {type(predictor).__name__}")
    return predictor


def _gpu_list(gpus: Any) -> list[Any]:
    """``gpus`` as a list of names/specs; a single string is refused (it would be read letter by letter)."""
    if isinstance(gpus, (str, bytes)):
        raise ArgumentTypeError(f"gpus: expected a list of GPU names, got the single string {gpus!r:.60}; "
                                f"write gpus=[{gpus!r:.60}]")
    if isinstance(gpus, Mapping) or not isinstance(gpus, Iterable):
        raise ArgumentTypeError(f"gpus: expected a list of GPU names or specs, got {type(gpus).__name__}")
    out = list(gpus)
    if len(out) > 10_000:
        raise WattGPUError(f"gpus: {len(out)} entries; at most 10,000 GPUs can be ranked at once")
    return out


def _reason(err: WattGPUError, tp: int = 1) -> tuple[str, str]:
    if isinstance(err, ModelFitError):
        need, have = getattr(err, "need_gb", None), getattr(err, "have_gb", None)
        if need is not None and have is not None:
            per = "" if tp == 1 else f" per GPU of a group of {tp} (1/{tp} of the weights and KV cache)"
            fix = getattr(err, "fix", "")
            hint = f"; {fix}" if fix else ""
            if getattr(err, "fit_tp", None) is not None:
                hint += " (tp auto ranks the groups)"
            return "does_not_fit", f"does not fit: needs {need:.1f} GiB{per}, GPU has {have:.1f} GiB usable{hint}"
        return "does_not_fit", str(err)
    if isinstance(err, SpecValidationError) and err.field == "tp":
        return "no_group", f"no tensor-parallel group: {err}"
    if isinstance(err, UnsupportedModelError):
        return "unsupported", str(err)
    return "error", str(err)


def _unique(specs: Sequence[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for s in specs:
        if s.name not in seen:
            seen.add(s.name)
            out.append(s)
    return out
