"""Replicas: how many independent replicas (one GPU, or one tensor-parallel group) of each GPU type carry a
total request rate.

Assumption (stated in every result): the load is split evenly, each of ``n`` replicas receives a
Poisson stream of ``qps / n`` requests/s (a round-robin or least-loaded balancer over identical
replicas), replicas share nothing, and fleet power is ``n`` × one replica's mean power. Energy per
token and per request of the fleet therefore equal one replica's.

``auto`` picks the smallest ``n`` whose replicas keep headroom — utilization (qps / n ÷ capacity) at most
``max_utilization`` (default ``MAX_UTILIZATION`` = 0.8: a Poisson server's queue, and so its TTFT, grows as
1 / (1 − utilization), so nobody runs one at 98 %) — and, with an SLA, whose predicted ITL and TTFT meet it:
start from ``ceil(qps / (capacity within the ITL SLA × max_utilization))`` (see :mod:`wattgpu.serving.capacity`),
step down while ``n - 1`` replicas still meet it and up while ``n`` misses (the capacity grid is coarse).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from . import capacity
from ..frozen import dataclass
from .. import features as F
from ..errors import WattGPUError
from ..prediction import Prediction
from ..specs import GpuSpec, LlmSpec
from ..workload import MIN_QPS, Workload
from ..rules import is_finite_number

EVEN_SPLIT = ("load split evenly: each of n independent replicas (one GPU or one tensor-parallel group) receives "
              "qps / n Poisson requests/s; fleet power = n × replica power")
MAX_REPLICAS = 1_000_000
REFINE_STEPS = 6
MAX_UTILIZATION = 0.8  # default utilization target of each replica (--max-utilization)


@dataclass(frozen=True)
class Sla:
    """What each replica must meet: ITL and TTFT bounds (s; None = none), the utilization target, and the
    factor the ITL check applies (an interval's upper factor with ``strict``)."""

    max_itl_s: float | None = None
    max_ttft_s: float | None = None
    max_utilization: float = MAX_UTILIZATION
    itl_scale: float = 1.0


def check_max_utilization(value: Any) -> float:
    """``None`` (the default target) or a number in (0, 1]; anything else raises naming ``max_utilization``."""
    if value is None:
        return MAX_UTILIZATION
    if not is_finite_number(value) \
            or not 0.0 < value <= 1.0:
        raise WattGPUError(f"max_utilization = {value!r} is invalid; expected a fraction in (0, 1], e.g. 0.8")
    return float(value)


def check_replicas(replicas: Any) -> int | str | None:
    """``None``, ``"auto"`` or a positive integer; anything else raises naming the field ``replicas``."""
    if replicas is None:
        return None
    if isinstance(replicas, str):
        text = replicas.strip().lower()
        if text == "auto":
            return "auto"
        try:
            replicas = int(text)
        except ValueError:
            raise WattGPUError(f"replicas = {replicas!r} is invalid; expected 'auto' or a whole number ≥ 1") from None
    if not is_finite_number(replicas) \
            or replicas != int(replicas) or not 1 <= replicas <= MAX_REPLICAS:
        raise WattGPUError(f"replicas = {replicas!r} is invalid; expected 'auto' or a whole number in [1, {MAX_REPLICAS}]")
    return int(replicas)


def plan(predictor: Any, llm: LlmSpec, gpus: Sequence[GpuSpec], wl: Workload, replicas: int | str,
         sla: Sla) -> list[tuple[int, Prediction | WattGPUError, str | None]]:
    """Per GPU: (replicas, the prediction of one replica at qps / n or the row's error, why it fails or None).

    ``wl`` must be a server workload (its ``qps`` is the fleet's total rate). With ``"auto"`` the count keeps
    every replica at or below ``sla.max_utilization`` and within the ITL/TTFT SLA; a fixed count is judged
    on capacity and the SLA only (its utilization is reported, not enforced)."""
    total = float(wl.qps)  # type: ignore[arg-type]
    auto = replicas == "auto"
    if not auto and total / int(replicas) < MIN_QPS:
        raise WattGPUError(f"replicas = {replicas} splits qps {total:g} into {total / int(replicas):.3g} requests/s per "
                           f"replica, below the smallest rate accepted ({MIN_QPS:g} requests/s); use fewer replicas")
    triples = [(g, llm, wl) for g in gpus]
    first = predictor.predict_specs_safe(triples)
    ok = [i for i, r in enumerate(first) if not isinstance(r, WattGPUError)]
    n = np.ones(len(gpus), dtype=np.int64)
    why: list[str | None] = [None] * len(gpus)
    if auto and ok:
        sub = [triples[i] for i in ok]
        cols = F.columns(sub)
        learned = "server" in predictor.schema.domain.get("kinds", ())
        itl_sla = None if sla.max_itl_s is None else np.full(len(sub), sla.max_itl_s)
        cap = capacity.capacity_table(predictor._evaluate, sub, cols, learned, itl_sla, sla.itl_scale)
        for j, i in enumerate(ok):
            c = float(cap["max_qps"][j])
            if c <= 0 or not math.isfinite(c):
                why[i] = ("misses SLA even at batch 1: "
                          + capacity.itl_miss(float(cap["itl_s"][j]) * sla.itl_scale, sla.max_itl_s * 1e3))  # type: ignore[operator]
            else:
                need = total / (c * sla.max_utilization) * (1 - 1e-12)  # inf for a rate near the float limit
                n[i] = MAX_REPLICAS if need >= MAX_REPLICAS else max(1, math.ceil(need))
        # the capacity grid is coarse (1.5 × steps), so its count can be high: step down while one replica
        # fewer still carries the load within the SLA and the utilization target (feasibility only improves
        # with more replicas)
        down = [i for i in ok if why[i] is None and n[i] > 1]
        for _ in range(REFINE_STEPS):
            if not down:
                break
            preds = predictor.predict_specs_safe([(gpus[i], llm, replace(wl, qps=total / int(n[i] - 1))) for i in down])
            fewer = [i for i, p in zip(down, preds) if not isinstance(p, WattGPUError) and _miss(p, sla, True) is None]
            for i in fewer:
                n[i] -= 1
            down = [i for i in fewer if n[i] > 1]
    elif not auto:
        n[:] = int(replicas)
    out: list[tuple[int, Prediction | WattGPUError, str | None]] = [(1, r, None) for r in first]
    todo = [i for i in ok if why[i] is None]
    for step in range(REFINE_STEPS if auto else 1):
        if not todo:
            break
        rows = [(gpus[i], llm, replace(wl, qps=total / int(n[i]))) for i in todo]
        preds = predictor.predict_specs_safe(rows)
        again = []
        for i, p in zip(todo, preds):
            out[i] = (int(n[i]), p, None)
            if isinstance(p, WattGPUError):
                continue
            miss = _miss(p, sla, auto)
            if miss and auto and n[i] < MAX_REPLICAS and step < REFINE_STEPS - 1:
                n[i] = min(MAX_REPLICAS, max(n[i] + 1, math.ceil(n[i] * 1.1)))
                again.append(i)
            elif miss:
                out[i] = (int(n[i]), p, miss)
        todo = again
    for i, w in enumerate(why):
        if w is not None:
            out[i] = (int(n[i]), first[i], w)
    return out


def _miss(p: Prediction, sla: Sla, headroom: bool) -> str | None:
    if p.overloaded:
        return capacity.overload_message(float(p.workload["qps"]), float(p.max_qps or 0.0)) + " per replica"
    miss = capacity.sla_miss(p.itl_s * sla.itl_scale, p.ttft_s, None if sla.max_itl_s is None else sla.max_itl_s * 1e3,
                             None if sla.max_ttft_s is None else sla.max_ttft_s * 1e3)
    if miss is not None:
        return f"misses SLA per replica: {miss}"
    if headroom and (p.utilization or 0.0) > sla.max_utilization * (1 + 1e-9):
        return f"utilization {p.utilization:.0%} per replica above the {sla.max_utilization:.0%} target"
    return None
