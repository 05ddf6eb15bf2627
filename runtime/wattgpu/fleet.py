"""Replicas: how many independent replicas (one GPU, or one tensor-parallel group) of each GPU type carry a
total request rate.

Assumption (stated in every result): the load is split evenly, each of ``n`` replicas receives a
Poisson stream of ``qps / n`` requests/s (a round-robin or least-loaded balancer over identical
replicas), replicas share nothing, and fleet power is ``n`` × one replica's mean power. Energy per
token and per request of the fleet therefore equal one replica's.

``auto`` picks the smallest ``n`` whose replicas are within capacity and, with an SLA, whose predicted
ITL meets it: start from ``ceil(qps / capacity within the SLA)`` (see :mod:`wattgpu.capacity`), step
down while ``n - 1`` replicas still meet it and up while ``n`` misses (the capacity grid is coarse).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from . import capacity
from . import features as F
from .errors import WattGPUError
from .prediction import Prediction
from .specs import GpuSpec, LlmSpec
from .workload import MIN_QPS, Workload

EVEN_SPLIT = ("load split evenly: each of n independent replicas (one GPU or one tensor-parallel group) receives "
              "qps / n Poisson requests/s; fleet power = n × replica power")
MAX_REPLICAS = 1_000_000
REFINE_STEPS = 6


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
    if isinstance(replicas, bool) or not isinstance(replicas, (int, float)) or not math.isfinite(replicas) \
            or replicas != int(replicas) or not 1 <= replicas <= MAX_REPLICAS:
        raise WattGPUError(f"replicas = {replicas!r} is invalid; expected 'auto' or a whole number in [1, {MAX_REPLICAS}]")
    return int(replicas)


def plan(predictor: Any, llm: LlmSpec, gpus: Sequence[GpuSpec], wl: Workload, replicas: int | str,
         max_itl_s: float | None, itl_scale: float = 1.0) -> list[tuple[int, Prediction | WattGPUError, str | None]]:
    """Per GPU: (replicas, the prediction of one replica at qps / n or the row's error, why it fails or None).

    ``wl`` must be a server workload (its ``qps`` is the fleet's total rate)."""
    total = float(wl.qps)  # type: ignore[arg-type]
    if replicas != "auto" and total / int(replicas) < MIN_QPS:
        raise WattGPUError(f"replicas = {replicas} splits qps {total:g} into {total / int(replicas):.3g} requests/s per "
                           f"replica, below the smallest rate accepted ({MIN_QPS:g} requests/s); use fewer replicas")
    triples = [(g, llm, wl) for g in gpus]
    first = predictor.predict_specs_safe(triples)
    ok = [i for i, r in enumerate(first) if not isinstance(r, WattGPUError)]
    n = np.ones(len(gpus), dtype=np.int64)
    why: list[str | None] = [None] * len(gpus)
    if replicas == "auto" and ok:
        sub = [triples[i] for i in ok]
        cols = F.columns(sub)
        learned = "server" in predictor.schema.domain.get("kinds", ())
        sla = None if max_itl_s is None else np.full(len(sub), max_itl_s)
        cap = capacity.capacity_table(predictor._evaluate, sub, cols, learned, sla, itl_scale)
        for j, i in enumerate(ok):
            c = float(cap["max_qps"][j])
            if c <= 0 or not math.isfinite(c):
                why[i] = (f"misses SLA at any load: ITL {cap['itl_s'][j] * itl_scale * 1e3:.1f} ms at batch 1 > "
                          f"{max_itl_s * 1e3:g} ms")  # type: ignore[operator]
            else:
                n[i] = min(max(1, math.ceil(total / c * (1 - 1e-12))), MAX_REPLICAS)
        # the capacity grid is coarse (powers of two), so its count can be high: step down while one replica
        # fewer still carries the load within the SLA (feasibility only improves with more replicas)
        down = [i for i in ok if why[i] is None and n[i] > 1]
        for _ in range(REFINE_STEPS):
            if not down:
                break
            preds = predictor.predict_specs_safe([(gpus[i], llm, replace(wl, qps=total / int(n[i] - 1))) for i in down])
            fewer = [i for i, p in zip(down, preds) if not isinstance(p, WattGPUError) and _miss(p, max_itl_s, itl_scale) is None]
            for i in fewer:
                n[i] -= 1
            down = [i for i in fewer if n[i] > 1]
    elif replicas != "auto":
        n[:] = int(replicas)
    out: list[tuple[int, Prediction | WattGPUError, str | None]] = [(1, r, None) for r in first]
    todo = [i for i in ok if why[i] is None]
    for step in range(REFINE_STEPS if replicas == "auto" else 1):
        if not todo:
            break
        rows = [(gpus[i], llm, replace(wl, qps=total / int(n[i]))) for i in todo]
        preds = predictor.predict_specs_safe(rows)
        again = []
        for i, p in zip(todo, preds):
            out[i] = (int(n[i]), p, None)
            if isinstance(p, WattGPUError):
                continue
            miss = _miss(p, max_itl_s, itl_scale)
            if miss and replicas == "auto" and n[i] < MAX_REPLICAS and step < REFINE_STEPS - 1:
                n[i] = min(MAX_REPLICAS, max(n[i] + 1, math.ceil(n[i] * 1.1)))
                again.append(i)
            elif miss:
                out[i] = (int(n[i]), p, miss)
        todo = again
    for i, w in enumerate(why):
        if w is not None:
            out[i] = (int(n[i]), first[i], w)
    return out


def _miss(p: Prediction, max_itl_s: float | None, itl_scale: float) -> str | None:
    if p.overloaded:
        return capacity.overload_message(float(p.workload["qps"]), float(p.max_qps or 0.0)) + " per replica"
    if max_itl_s is not None and p.itl_s * itl_scale > max_itl_s:
        return f"misses SLA per replica: ITL {p.itl_s * itl_scale * 1e3:.1f} ms > {max_itl_s * 1e3:g} ms"
    return None
