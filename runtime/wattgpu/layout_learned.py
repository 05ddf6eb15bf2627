"""The learned models asked about one stage of one engine of a layout: the ``anchored`` layout answer's stage
step and busy power (:func:`wattgpu.layout.estimate` composes them with the layout's physics).

The learned models know one GPU and one tensor-parallel (TP) group of up to 8 GPUs serving a whole model. A
layout's GPU does something they can describe: it runs its stage's layers on its share of the weights for its
engine's micro-batch. Per DP engine the question asked (through ``Predictor.predict``, the path of ``predict --tp
N``) is the engine's own TP group of ``tp`` GPUs at the engine's micro-batch (a closed loop of that many
sequences), serving a *stand-in* LLM: the same config with

- the stage's layers: ``ceil(layers / pp)`` (the slowest stage; the embedding and head ASSUMED spread with the
  layers), its parameters and KV layers scaled by the same share ``s``;
- the weights one layout GPU holds, times ``tp``: dense ``s × dense``, routed experts ``s × experts × tp / split``
  (``split`` = ep with expert parallelism, else tp); active parameters alike. Without EP and PP the stand-in is the
  LLM itself: the answer is ``predict --tp N``'s.

What the learned models do not see (the expert all-to-all, the stage links, the pipeline bubble, the tokens of the
other DP engines routed through this GPU's experts) is physics in :func:`wattgpu.layout.estimate`, whose roofline
stage (with every routed token) bounds the learned one from below. The stage's prefill is asked of an idle engine
(a closed loop of one), so TTFT is one prompt's, as the roofline's. Where the learned models cannot answer the stand-in
(a refusal), the layout falls back to the roofline and says so. Answers are memoised per engine shape and
micro-batch, so ``rank --parallel auto`` and the server solve ask each question once.
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Any

from . import layout as L
from .errors import WattGPUError

METHOD = L.ANCHORED
METHOD_TEXT = (f"{METHOD}: each engine's stage from the learned models (a TP group of the GPUs' weight share, at the "
               "engine's micro-batch), composed with the layout's expert all-to-all, stage links and pipeline bubble; "
               "never faster than the roofline")
MEMO_SIZE = 65536


def stage_layers(llm: Any, pp: int) -> int:
    """Layers of the largest (slowest) pipeline stage."""
    return math.ceil(llm.num_layers / pp)


def stand_in(llm: Any, tp: int, pp: int, split: int) -> Any:
    """The LLM whose TP group of ``tp`` does per GPU what one stage of a layout of ``tp`` × ``pp`` does, its routed
    experts split over ``split`` GPUs (ep with expert parallelism, else tp): see the module docstring."""
    layers = stage_layers(llm, pp)
    s = layers / llm.num_layers
    experts = L.expert_params_b(llm)
    dense = float(llm.total_params_b) - experts
    active_experts = max(float(llm.active_params_b) - dense, 0.0) if experts > 0 else 0.0
    total = s * (dense + experts * tp / split)
    active = s * (float(llm.active_params_b) - active_experts + active_experts * tp / split)
    kv_layers = max(1, math.ceil(llm.kv_layers * s))
    swl = None if llm.sliding_window_layers is None else min(kv_layers, math.ceil(llm.sliding_window_layers * s))
    if layers == llm.num_layers and split == tp:
        return llm
    return replace(llm, name=f"{llm.name} (stage of {layers} layers, a {tp}-GPU group's share)", num_layers=layers,
                   total_params_b=total, active_params_b=min(active, total), kv_layers=kv_layers,
                   sliding_window_layers=swl)


class StageQuestions:
    """The learned stage answers of one (GPU, LLM, workload settings): a :data:`wattgpu.layout.StageModel` per
    layout, memoised on (layout's engine shape, micro-batch)."""

    def __init__(self, predictor: Any, gpu: Any, llm: Any, wl: Any) -> None:
        self.predictor, self.gpu, self.llm, self.wl = predictor, gpu, llm, wl
        self._ask = lru_cache(maxsize=MEMO_SIZE)(self._answer)
        # one stand-in object per shape: the predictor memoises a row's capacity on the spec objects
        self._stand_in = lru_cache(maxsize=None)(lambda shape: stand_in(llm, *shape))
        self._idle = lru_cache(maxsize=None)(lambda shape: self._ask_learned(shape, 1.0))  # one prompt's prefill
        domain = predictor.bundle.schema.domain or {}
        self.tp_range = tuple(domain.get("tp_range", (1, 1)))

    def model(self, lay: L.Layout) -> L.StageModel:
        """The stage model of ``lay`` for :func:`wattgpu.layout.estimate`."""
        shape = (lay.tp, lay.pp, lay.ep if lay.ep > 1 else lay.tp)
        extra = self._layout_warnings(lay)
        return lambda micro: self._ask(shape, float(micro), extra)

    def _layout_warnings(self, lay: L.Layout) -> tuple[str, ...]:
        hi = self.tp_range[1]
        out = []
        if lay.gpus > hi:
            out.append(f"the layout's {lay.gpus} GPUs are more than any training row (TP groups of up to {hi:g}): "
                       f"each engine's stage is a learned {lay.tp}-GPU group, the rest physics")
        if lay.pp > 1 or lay.ep > 1 or lay.dp > 1:
            out.append("no pipeline-, expert- or data-parallel run was in training: the bubble, stage links and "
                       "all-to-all are roofline terms (reports/parallel.md scores the answer on measured runs)")
        return tuple(out)

    def _ask_learned(self, shape: tuple[int, int, int], n: float) -> Any:
        """The learned prediction of the stand-in's TP group as a closed loop of ``n`` sequences, or None where
        the learned models refuse it or answer nothing finite."""
        from .workload import Workload

        wl = self.wl
        # one cap per engine shape (the engine's max_batch, or more when asked more), so the learned capacity
        # table is computed once per shape, not once per micro-batch
        cap = max(wl.max_batch, math.ceil(n))
        try:
            q = self.predictor.predict(self.gpu, self._stand_in(shape), Workload(
                kind="closed_loop", concurrency=n, max_batch=cap, input_tokens=wl.input_tokens,
                output_tokens=wl.output_tokens, gpu_memory_utilization=wl.gpu_memory_utilization,
                kv_cache_dtype=wl.kv_cache_dtype, engine_era=wl.engine_era, itl_stat=wl.itl_stat, tp=shape[0]))
        except WattGPUError:
            return None
        ok = math.isfinite(q.itl_s) and math.isfinite(q.power_w) and q.itl_s > 0 and math.isfinite(q.ttft_s or 0.0)
        return q if ok else None

    def _answer(self, shape: tuple[int, int, int], tokens: float, extra: tuple[str, ...]) -> L.Anchor | None:
        q = self._ask_learned(shape, max(tokens, 1.0))
        idle = self._idle(shape)
        if q is None or idle is None:
            return None
        keep = tuple(w for w in q.warnings if "training" in w or "extrapolat" in w or "not measured" in w)
        return L.Anchor(float(q.itl_s), float(q.power_w), float(idle.ttft_s or 0.0), extra + keep)
