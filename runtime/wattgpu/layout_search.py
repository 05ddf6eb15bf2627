"""``rank --parallel auto``: per GPU type, the layout TP × EP × DP × PP on the fewest of up to N nodes that holds the
model and meets the ITL limit, the least energy per token among those, from the same figures ``predict`` gives a
layout (:func:`wattgpu.layout.estimate`: ``anchored`` on the learned models given a predictor, else the roofline);
the learned stage answers are memoised per GPU type, engine shape and micro-batch."""
from __future__ import annotations

import math
from typing import Any, Iterable

from .frozen import dataclass
from . import layout as L
from .layout_predict import running_batch


@dataclass(frozen=True)
class LayoutChoice:
    """The chosen layout of one GPU type and its figures; ``rank`` and ``launch_args`` are set by the ranking
    (:data:`wattgpu.record.LAYOUT_CANDIDATE` declares the JSON)."""

    gpu: str
    estimate: L.Estimate
    sequences: int
    rank: int = 0
    launch_args: tuple[str, ...] = ()

    def layout_dict(self) -> dict[str, Any]:
        """The layout's fields."""
        lay = self.layout
        return {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "ep": lay.ep, "nodes": lay.nodes,
                "gpus_per_node": lay.gpus_per_node, "interconnect": lay.interconnect}

    @property
    def layout(self) -> L.Layout:
        return self.estimate.layout

    @property
    def j_per_token(self) -> float:
        """Energy per output token of all the layout's GPUs."""
        return self.estimate.power_w / self.estimate.tokens_per_s


def best_layouts(gpus: Iterable[Any], llm: Any, max_batch: int, input_tokens: int, output_tokens: int,
                 max_nodes: int = 4, interconnect: str = L.DEFAULT_INTERCONNECT, gpu_memory_utilization: float = 0.9,
                 kv_cache_dtype: str = "auto", max_itl_ms: float | None = None, predictor: Any = None,
                 workload: Any = None) -> tuple[list[LayoutChoice], list[tuple[str, str]]]:
    """(choices sorted by J/token, [(GPU, why none fits)]): per GPU type, among the valid layouts on the fewest
    nodes that hold the model (and meet ``max_itl_ms``), the one with the least energy per token. Fewest nodes
    first: spreading over more nodes shrinks each GPU's weight read, which the roofline rewards more than a real
    deployment would, and costs GPUs. A layout runs min(``max_batch`` per DP rank × dp, the sequences its KV cache
    holds) sequences. With ``predictor`` the figures are anchored on its learned models (``workload``: the engine
    settings they are asked with; default these arguments')."""
    from .layout_learned import StageQuestions
    from .workload import Workload

    context = input_tokens + output_tokens
    if predictor is not None and workload is None:
        workload = Workload(max_batch=max_batch, input_tokens=input_tokens, output_tokens=output_tokens,
                            gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype)
    chosen: list[LayoutChoice] = []
    excluded: list[tuple[str, str]] = []
    for gpu in gpus:
        best: LayoutChoice | None = None
        fits_any = False
        questions = StageQuestions(predictor, gpu, llm, workload) if predictor is not None else None
        for lay in L.candidate_layouts(gpu, llm, max_nodes=max_nodes, interconnect=interconnect):
            f = L.fit(gpu, llm, lay, context, gpu_memory_utilization, kv_cache_dtype)
            if not f.fits:
                continue
            fits_any = True
            if best is not None and lay.nodes > best.layout.nodes:
                break  # fewest nodes first, and candidate_layouts counts nodes up: no later layout can win
            batch = running_batch(max_batch, lay, f)
            e = L.estimate(gpu, llm, lay, batch, input_tokens, output_tokens, kv_cache_dtype=kv_cache_dtype,
                           stage_model=questions.model(lay) if questions is not None else None)
            if max_itl_ms is not None and e.itl_s * 1e3 > max_itl_ms:
                continue
            c = LayoutChoice(gpu.name, e, f.sequences)
            if best is None or (lay.nodes, c.j_per_token, lay.gpus) < (best.layout.nodes, best.j_per_token,
                                                                        best.layout.gpus):
                best = c
        if best is not None:
            chosen.append(best)
        else:
            excluded.append((gpu.name, "no layout meets the ITL limit" if fits_any else
                             f"does not fit on up to {max_nodes} node(s) of {min(8, gpu.max_group or 1)}"
                             if gpu.max_group else "no interconnect facts: single GPU only, and it does not fit"))
    chosen.sort(key=lambda c: (c.j_per_token if math.isfinite(c.j_per_token) else math.inf, c.gpu))
    return chosen, excluded


@dataclass(frozen=True)
class LayoutRanking:
    """The answer of ``rank --parallel auto``: the workload, the search's limits, the choices and exclusions."""

    llm: Any
    workload: Any
    max_nodes: int
    interconnect: str
    max_itl_ms: float | None
    choices: list[LayoutChoice]
    excluded: list[tuple[str, str]]

    def launch_args(self, c: LayoutChoice) -> list[str]:
        """The ``vllm serve`` line of choice ``c``."""
        return ["vllm", "serve", self.llm.name, *L.vllm_parallel_args(c.layout), "--max-num-seqs",
                str(self.workload.max_batch), "--max-model-len", str(self.workload.context_tokens)]

    def to_dict(self) -> dict[str, Any]:
        """Stable JSON: one object per choice, its fields as :data:`wattgpu.record.LAYOUT_CANDIDATE` declares."""
        from dataclasses import replace

        from .record import LAYOUT_CANDIDATE, to_json

        cands = [to_json(replace(c, rank=i, launch_args=tuple(self.launch_args(c))), record=LAYOUT_CANDIDATE)
                 for i, c in enumerate(self.choices, 1)]
        for c in cands:
            c["launch_args"] = list(c["launch_args"])
        methods = sorted({c.estimate.method for c in self.choices}) or [L.ROOFLINE]
        return {"llm": self.llm.name, "method": "+".join(methods), "max_nodes": self.max_nodes,
                "interconnect": self.interconnect, "max_itl_ms": self.max_itl_ms,
                "workload": self.workload.to_dict() if hasattr(self.workload, "to_dict") else None,
                "candidates": cands, "excluded": [{"gpu": g, "reason": r} for g, r in self.excluded]}


def layouts_answer(predictor: Any, llm: Any, workload: Any, gpus: list[Any] | None = None, max_nodes: int = 4,
                   interconnect: str = L.DEFAULT_INTERCONNECT, max_itl_ms: float | None = None) -> LayoutRanking:
    """``rank --parallel auto`` of ``llm`` (a name or spec) over ``gpus`` (names or specs; default the catalog)."""
    from .questions import RANK
    from .resolve import resolve_gpu, resolve_llm

    checked = RANK.check({"max_nodes": max_nodes, "interconnect": interconnect, "max_itl_ms": max_itl_ms})
    catalog = predictor.catalog
    spec = resolve_llm(catalog, llm)
    specs = [resolve_gpu(catalog, g) for g in gpus] if gpus is not None else list(catalog.gpus)
    choices, excluded = best_layouts(specs, spec, workload.max_batch, workload.input_tokens, workload.output_tokens,
                                     checked["max_nodes"], checked["interconnect"], workload.gpu_memory_utilization,
                                     workload.kv_cache_dtype, max_itl_ms, predictor=predictor, workload=workload)
    return LayoutRanking(spec, workload, checked["max_nodes"], checked["interconnect"], max_itl_ms, choices, excluded)
