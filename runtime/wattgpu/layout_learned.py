"""The learned models asked about one stage of one engine of a layout: the ``anchored`` layout answer's stage
step and busy power (:func:`wattgpu.layout.estimate` composes them with the layout's physics).

The learned models know one GPU and one tensor-parallel (TP) group of up to 8 GPUs serving a whole model. A
layout's GPU does something they can describe: it runs its stage's layers on its share of the weights for a
micro-batch. The question asked (through ``Predictor.predict``, the path of ``predict --tp N``) is a TP group of
``g`` GPUs serving a *stand-in* LLM, the same config with:

- the stage's layers: ``ceil(layers / pp)`` (the slowest stage; the embedding and head ASSUMED spread with the
  layers), its parameters and KV layers scaled by the same share ``s``;
- the weights one layout GPU holds, times ``g``: dense ``s × dense × g / tp``, routed experts
  ``s × experts × g / split`` (``split`` = ep with expert parallelism, else tp); active parameters alike;
- ``g`` = tp without expert parallelism; with it the EP group (tp × dp) as far as one node and the GPU's groups
  allow (the learned models split experts over a TP group: the same expert bytes per GPU), stepping down to the
  largest group the heads split over;
- a closed loop of the tokens that group sees: the micro-batch × ``g / tp`` (every DP engine of the group sends
  its tokens through the experts).

What the learned models do not see (the expert all-to-all, the stage links, the pipeline bubble, the DP engines'
KV layout) is physics in :func:`wattgpu.layout.estimate`. Where the learned models cannot answer the stand-in
(a refusal), the layout falls back to the roofline and says so. Answers are memoised per engine shape and
micro-batch, so ``rank --parallel auto`` and the server solve ask each question once.
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Any

from . import layout as L
from . import parallel
from .errors import WattGPUError

METHOD = "anchored"
METHOD_TEXT = ("anchored: each engine's stage from the learned models (a TP group of the GPUs' weight share, at the "
               "engine's micro-batch), composed with the layout's expert all-to-all, stage links and pipeline bubble; "
               "never faster than the roofline")
MEMO_SIZE = 65536


def stage_layers(llm: Any, pp: int) -> int:
    """Layers of the largest (slowest) pipeline stage."""
    return math.ceil(llm.num_layers / pp)


def learned_group(gpu: Any, llm: Any, lay: L.Layout) -> int:
    """GPUs of the TP group that stands in for one layout GPU's work (see the module docstring)."""
    if lay.ep <= 1:
        return lay.tp
    top = min(lay.ep, lay.gpus_per_node, gpu.max_group or 1)
    for g in sorted({n for n in (*parallel.TP_CHOICES, top) if lay.tp <= n <= top}, reverse=True):
        if g % lay.tp == 0 and parallel.group_error(gpu, llm, g) is None:
            return g
    return lay.tp


def stand_in(llm: Any, tp: int, pp: int, split: int, g: int) -> Any:
    """The LLM whose TP group of ``g`` does per GPU what one stage of a layout of ``tp`` × ``pp`` does, its routed
    experts split over ``split`` GPUs (ep with expert parallelism, else tp): see the module docstring."""
    layers = stage_layers(llm, pp)
    s = layers / llm.num_layers
    experts = L.expert_params_b(llm)
    dense = float(llm.total_params_b) - experts
    active_experts = max(float(llm.active_params_b) - dense, 0.0) if experts > 0 else 0.0
    total = s * (dense * g / tp + experts * g / split)
    active = s * ((float(llm.active_params_b) - active_experts) * g / tp + active_experts * g / split)
    kv_layers = max(1, math.ceil(llm.kv_layers * s))
    swl = None if llm.sliding_window_layers is None else min(kv_layers, math.ceil(llm.sliding_window_layers * s))
    if layers == llm.num_layers and g == tp and split == tp:
        return llm
    return replace(llm, name=f"{llm.name} (stage of {layers} layers, {g}-GPU share)", num_layers=layers,
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
        domain = predictor.bundle.schema.domain or {}
        self.tp_range = tuple(domain.get("tp_range", (1, 1)))

    def model(self, lay: L.Layout) -> L.StageModel:
        """The stage model of ``lay`` for :func:`wattgpu.layout.estimate`."""
        g = learned_group(self.gpu, self.llm, lay)
        shape = (lay.tp, lay.pp, lay.ep if lay.ep > 1 else lay.tp, g)
        return lambda micro: self._ask(shape, float(micro) * g / lay.tp, self._layout_warnings(lay, g))

    def _layout_warnings(self, lay: L.Layout, g: int) -> tuple[str, ...]:
        hi = self.tp_range[1]
        out = []
        if lay.gpus > hi:
            out.append(f"the layout's {lay.gpus} GPUs are more than any training row (TP groups of up to {hi:g}): "
                       f"each stage is a learned {g}-GPU group, the rest physics")
        if lay.pp > 1 or lay.ep > 1 or lay.dp > 1:
            out.append("no pipeline-, expert- or data-parallel run was in training: the bubble, stage links and "
                       "all-to-all are roofline terms (reports/parallel.md scores the answer on measured runs)")
        return tuple(out)

    def _answer(self, shape: tuple[int, int, int, int], tokens: float, extra: tuple[str, ...]) -> L.Anchor | None:
        from .workload import Workload

        wl = self.wl
        n = max(tokens, 1.0)
        # one cap per engine shape (the engine's max_batch for the group's tokens), so the learned capacity table
        # is computed once per shape, not once per micro-batch
        cap = max(wl.max_batch * shape[3] // shape[0], math.ceil(n))
        try:
            q = self.predictor.predict(self.gpu, self._stand_in(shape), Workload(
                kind="closed_loop", concurrency=n, max_batch=cap, input_tokens=wl.input_tokens,
                output_tokens=wl.output_tokens, gpu_memory_utilization=wl.gpu_memory_utilization,
                kv_cache_dtype=wl.kv_cache_dtype, engine_era=wl.engine_era, itl_stat=wl.itl_stat, tp=shape[3]))
        except WattGPUError:
            return None
        if not (math.isfinite(q.itl_s) and math.isfinite(q.power_w) and q.itl_s > 0):
            return None
        keep = tuple(w for w in q.warnings if "training" in w or "extrapolat" in w or "not measured" in w)
        return L.Anchor(float(q.itl_s), float(q.power_w), float(q.ttft_s or 0.0), extra + keep)
