"""``predict`` with a layout: one LLM on ``tp × pp × dp`` GPUs of one type (expert parallelism on or off, one node
or several), answered by :func:`wattgpu.layout.estimate` — the same :func:`wattgpu.layout.fit`, estimate and
:func:`running_batch` that ``rank --parallel auto`` (:mod:`wattgpu.layout_search`) ranks with.

Method ``anchored`` (given a predictor: ``predict`` and ``rank`` always give theirs): each engine's stage is asked
of the learned models (:mod:`wattgpu.layout_learned`) and composed with the expert all-to-all, the stage links and
the pipeline bubble; never faster than the roofline of the same layout, which rides along in ``roofline``. Method
``roofline`` (no predictor, or where the learned models cannot answer the stage, said in the warnings): bytes /
bandwidth, FLOPs / peak, link transfers, the bubble — a floor whose ITL reads far low on measured runs
(reports/parallel.md, ``python tools/score_layouts.py``).

How the load meets the layout (ASSUMPTIONS):

- offline: ``min(max_batch × dp, sequences the KV cache holds)`` sequences decode together (vLLM's
  ``--max-num-seqs`` is per DP engine);
- closed loop: ``min(concurrency, that cap)``; the other clients wait;
- server (Poisson at ``qps``): the running sequences L solve Little's law L = qps × T(L), T = TTFT + (output − 1) ×
  ITL(L); a DP engine is busy with probability 1 − exp(−L / dp) (its own share of an infinite-server queue), and
  idles at the GPU's idle power otherwise. No queueing for a slot is modelled below capacity; above it the answer
  says overloaded and holds the throughput at capacity.
"""
from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any, Callable, Mapping

from .frozen import dataclass
from .serving import capacity
from . import physics
from . import layout as L
from .energy import energy_figures
from .errors import SpecValidationError

ROOFLINE_TEXT = ("roofline figures of the layout (bytes / bandwidth, FLOPs / peak, link transfers, the pipeline "
                 "bubble), not the learned models: the ITL is a floor, well below measured expert-, data- and "
                 "pipeline-parallel runs (reports/parallel.md)")
SUGGEST_UP_TO_NODES = 8  # the fix a refusal names is searched on up to this many nodes
LAYOUT_FIELDS = ("pp", "dp", "ep", "nodes", "interconnect")


def checked_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The layout fields given (not None), each checked as :data:`wattgpu.questions.LAYOUT` declares it (``ep``
    text on/off becomes a bool)."""
    from .questions import PREDICT

    return PREDICT.check({k: fields[k] for k in LAYOUT_FIELDS if fields.get(k) is not None})


def wants_layout(fields: Mapping[str, Any]) -> bool:
    """Whether a request's layout fields (``pp``, ``dp``, ``ep``, ``nodes``) ask for more than one
    tensor-parallel group: then ``predict`` answers the layout."""
    fields = checked_fields(fields)
    ep = fields.get("ep")
    return ((fields.get("pp") or 1) > 1 or (fields.get("dp") or 1) > 1 or (fields.get("nodes") or 1) > 1
            or ep is True or (not isinstance(ep, bool) and (ep or 1) > 1))


def gpus_per_node(gpu: Any) -> int:
    """GPUs per node of ``gpu``: 8, or fewer when the GPU comes in smaller groups (interconnect.csv)."""
    return min(L.DEFAULT_GPUS_PER_NODE, gpu.max_group) if gpu.max_group else L.DEFAULT_GPUS_PER_NODE


def layout_of(gpu: Any, llm: Any, tp: int, pp: int | None = None, dp: int | None = None,
              ep: bool | int | None = None, nodes: int | None = None, interconnect: str | None = None) -> L.Layout:
    """The :class:`~wattgpu.layout.Layout` a request names (``ep``: on/off as vLLM's flag, or its degree
    tp × dp; ``nodes`` default: the GPUs over full nodes), checked against ``gpu`` and ``llm``: a
    SpecValidationError naming the field and the fix."""
    pp, dp = int(pp or 1), int(dp or 1)
    per_node = gpus_per_node(gpu)
    degree = tp * dp if ep is True else 1 if ep is None or ep is False else int(ep)
    n = nodes if nodes is not None else max(1, math.ceil(tp * pp * dp / per_node))
    lay = L.Layout(tp, pp, dp, degree, n, per_node, interconnect or L.DEFAULT_INTERCONNECT)
    err = L.layout_error(gpu, llm, lay)
    if err is not None:
        raise err
    return lay


def running_batch(max_batch: int, lay: L.Layout, f: L.Fit) -> int:
    """Sequences a layout runs at most: ``max_batch`` per DP engine, and no more than its KV cache holds."""
    return min(max_batch * lay.dp, f.sequences)


def _args(lay: L.Layout) -> str:
    parts = [f"tp {lay.tp}"] + [f"{k} {getattr(lay, k)}" for k in ("pp", "dp") if getattr(lay, k) > 1]
    return ", ".join(parts + ["ep on"] * (lay.ep > 1) + [f"nodes {lay.nodes}"] * (lay.nodes > 1))


def smallest_layout(gpu: Any, llm: Any, wl: Any, like: L.Layout | None = None,
                    tp: int = 1) -> tuple[L.Layout, L.Fit] | None:
    """The layout of ``gpu`` with the fewest GPUs (on up to :data:`SUGGEST_UP_TO_NODES` nodes) that holds ``llm``
    under ``wl``'s memory settings: of those, ``like``'s expert parallelism on or off (default: ``tp`` GPUs, no EP),
    the fewest pipeline stages, the fewest engines, a tp closest to ``like``'s; None if none does."""
    per_node = gpus_per_node(gpu)
    like = like or L.Layout(tp=min(tp, per_node), gpus_per_node=per_node)
    best: tuple[tuple[int, ...], L.Layout, L.Fit] | None = None
    for cand in L.candidate_layouts(gpu, llm, max_nodes=max(SUGGEST_UP_TO_NODES, like.nodes),
                                    gpus_per_node=like.gpus_per_node, interconnect=like.interconnect):
        f = L.fit(gpu, llm, cand, wl.context_tokens, wl.gpu_memory_utilization, wl.kv_cache_dtype)
        key = (cand.gpus, int((cand.ep > 1) != (like.ep > 1)), cand.pp, cand.dp, abs(cand.tp - like.tp))
        if f.fits and (best is None or key < best[0]):
            best = (key, cand, f)
    return None if best is None else (best[1], best[2])


def suggestion(lay: L.Layout, f: L.Fit) -> str:
    """A layout in request words, with its figures: ``tp 8, pp 2, nodes 2 (TP8 × PP2 on 2 nodes, …)``."""
    return f"{_args(lay)} ({lay.describe()}, {f.weight_gb:.1f} GB of weights per GPU, {f.sequences} sequences)"


def fit_error(gpu: Any, llm: Any, lay: L.Layout, wl: Any) -> SpecValidationError:
    """Why ``lay`` cannot hold ``llm``, naming the field to change and the smallest layout of ``gpu`` that holds
    it (:func:`smallest_layout`)."""
    context = wl.context_tokens
    f = L.fit(gpu, llm, lay, context, wl.gpu_memory_utilization, wl.kv_cache_dtype)
    usable = gpu.memory_size_gb * wl.gpu_memory_utilization
    why = (f"{llm.name} does not fit on {lay.describe()} of {gpu.name}: {f.weight_gb:.1f} GB of weights per GPU "
           f"of {usable:.1f} GB usable (gpu_memory_utilization {wl.gpu_memory_utilization:g}) leave no room for one "
           f"{context}-token sequence's KV cache")
    found = smallest_layout(gpu, llm, wl, lay)
    if found is None:
        return SpecValidationError("workload", "nodes", lay.nodes, f"a layout that holds the model: {why}, and no "
                                   f"layout of up to {SUGGEST_UP_TO_NODES} nodes does (a GPU with more memory, "
                                   "or --dtype fp8 / int4)")
    cand, cf = found
    changed = next((k for k in ("pp", "dp", "ep", "tp", "nodes") if getattr(cand, k) != getattr(lay, k)), "pp")
    return SpecValidationError("workload", changed, getattr(lay, changed), f"a layout that holds the model: {why}; "
                               f"e.g. {suggestion(cand, cf)}")


@dataclass(frozen=True)
class LayoutPrediction:
    """One layout's answer (its JSON: :data:`wattgpu.record.LAYOUT_PREDICTION`)."""

    gpu_spec: Any
    llm_spec: Any
    workload: Any
    layout: L.Layout
    fit: L.Fit
    at_load: L.Estimate  # at the running sequences
    at_capacity: L.Estimate  # at the most sequences the layout runs
    sequences: float  # running sequences over all DP engines
    busy_fraction: float
    power_per_gpu_w: float
    throughput_tok_s: float
    max_qps: float
    utilization: float
    launch_args: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())
    sla: dict[str, Any] | None = None

    @property
    def gpu(self) -> str:
        return str(self.gpu_spec.name)

    @property
    def method(self) -> str:
        """``anchored`` (learned stage + layout physics) or ``roofline`` (:mod:`wattgpu.layout_predict`)."""
        return self.at_load.method

    def roofline(self) -> dict[str, float]:
        """The roofline figures of the same layout and load (the bound: ITL and TTFT never below them)."""
        return self.at_load.roofline()

    @property
    def llm(self) -> str:
        return str(self.llm_spec.name)

    @property
    def power_per_node_w(self) -> float:
        """Mean power of the fullest node's GPUs."""
        return self.power_per_gpu_w * self.layout.gpus_on_busiest_node

    @property
    def total_power_w(self) -> float:
        """Mean power of all the layout's GPUs."""
        return self.power_per_gpu_w * self.layout.gpus

    @property
    def itl_s(self) -> float:
        return self.at_load.itl_s

    @property
    def ttft_s(self) -> float:
        return self.at_load.ttft_s

    @property
    def e2e_latency_s(self) -> float:
        """TTFT + (output tokens − 1) × ITL."""
        return self.ttft_s + (self.workload.output_tokens - 1) * self.itl_s

    def baselines(self) -> dict[str, float]:
        """Per GPU: TDP, and the load-scaled TDP of the workload's scenario (:func:`wattgpu.physics.ls_tdp_power_w`)."""
        tdp = float(self.gpu_spec.tdp_w)
        scen = physics.paper_scenario(self.workload.kind, self.workload.qps)
        return {"tdp_w": tdp, "ls_tdp_w": float(physics.ls_tdp_power_w(tdp, scen))}

    def energy(self, usd_per_kwh: float | None = None, gco2_per_kwh: float | None = None, pue: float = 1.0,
               usd_per_gpu_hour: float | None = None) -> dict[str, Any]:
        """Energy of all the layout's GPUs per output token and request (:func:`wattgpu.energy.energy_figures`)."""
        return energy_figures(self.total_power_w, 1.0 / self.throughput_tok_s, int(self.workload.output_tokens),
                              usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour, self.layout.gpus)

    def to_dict(self, prices: Any = (None, None, 1.0, None)) -> dict[str, Any]:
        """Stable JSON: the fields :data:`wattgpu.record.LAYOUT_PREDICTION` declares (and ``sla`` when asked)."""
        from .record import LAYOUT_PREDICTION, to_json

        out = to_json(self, prices, record=LAYOUT_PREDICTION)
        out["launch_args"] = list(out["launch_args"])
        out["warnings"] = list(out["warnings"])
        if self.sla is not None:
            out["sla"] = self.sla
        return out


def _request_s(e: L.Estimate, output_tokens: int) -> float:
    return e.ttft_s + (output_tokens - 1) * e.itl_s


def _server_sequences(est: Callable[[float], L.Estimate], wl: Any, cap: int) -> float | None:
    """Running sequences L = qps × T(L) of a Poisson server (bisection: T grows with L), or None when even the
    capacity ``cap`` falls short (overloaded)."""
    def excess(n: float) -> float:
        return n - wl.qps * _request_s(est(n), wl.output_tokens)

    if excess(float(cap)) < 0:
        return None
    lo, hi = 0.0, float(cap)
    if excess(1e-9) >= 0:
        return 1e-9
    for _ in range(80):
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if excess(mid) >= 0 else (mid, hi)
    return hi


def stage_model(predictor: Any, gpu: Any, llm: Any, wl: Any, lay: L.Layout) -> L.StageModel | None:
    """The learned stage model of ``lay`` (:mod:`wattgpu.layout_learned`), or None without a predictor."""
    if predictor is None:
        return None
    from .layout_learned import StageQuestions

    return StageQuestions(predictor, gpu, llm, wl).model(lay)


def predict_layout(gpu: Any, llm: Any, wl: Any, lay: L.Layout, model: str | None = None,
                   predictor: Any = None) -> LayoutPrediction:
    """The layout answer of ``llm`` on ``lay`` of ``gpu`` under workload ``wl`` (specs, not names): ``anchored``
    on ``predictor``'s learned models, or the roofline without one."""
    f = L.fit(gpu, llm, lay, wl.context_tokens, wl.gpu_memory_utilization, wl.kv_cache_dtype)
    if not f.fits:
        raise fit_error(gpu, llm, lay, wl)
    cap = running_batch(wl.max_batch, lay, f)
    stage = stage_model(predictor, gpu, llm, wl, lay)
    est = lambda n: L.estimate(gpu, llm, lay, n, wl.input_tokens, wl.output_tokens,  # noqa: E731
                               kv_cache_dtype=wl.kv_cache_dtype, stage_model=stage)
    full = est(cap)
    max_qps = cap / _request_s(full, wl.output_tokens)
    idle = L.idle_power_w(gpu)
    warnings: list[str] = []
    if lay.nodes > 1:
        warnings.append(f"spans {lay.nodes} nodes over {lay.link.name}: start vLLM with its multi-node options")
    if wl.kind == "server":
        n = _server_sequences(est, wl, cap)
        if n is None:
            warnings.append(capacity.overload_message(wl.qps, max_qps))
            at, seqs, busy, tok_s = full, float(cap), 1.0, full.tokens_per_s
        else:
            at, seqs = est(n), n
            busy = 1.0 - math.exp(-n / lay.dp)
            tok_s = wl.qps * wl.output_tokens
        utilization = wl.qps / max_qps
    else:
        want = float(cap) if wl.kind == "offline" else float(wl.concurrency)
        seqs = min(want, float(cap))
        if seqs < want:
            warnings.append(f"concurrency {want:g} cut to {cap} sequences (max_batch {wl.max_batch} per DP engine × "
                            f"dp {lay.dp}, and the KV cache holds {f.sequences})")
        at = est(seqs)
        busy = 1.0
        tok_s = seqs / at.itl_s
        utilization = seqs / cap
    power = idle + busy * (at.power_per_gpu_w - idle)
    warnings[:0] = method_warnings(at, predictor is not None)
    args = ("vllm", "serve", model or llm.name, *L.vllm_parallel_args(lay), "--max-num-seqs", str(wl.max_batch),
            "--gpu-memory-utilization", f"{wl.gpu_memory_utilization:g}", "--kv-cache-dtype", wl.kv_cache_dtype,
            "--max-model-len", str(wl.context_tokens))
    return LayoutPrediction(gpu, llm, wl, lay, f, at, full, seqs, busy, power, tok_s, max_qps, utilization, args,
                            tuple(warnings))


def method_warnings(e: L.Estimate, asked: bool) -> list[str]:
    """What the figures of ``e`` are: the anchored method and where it extrapolates, or the roofline (and why,
    when the learned models were ``asked`` but could not answer the stage)."""
    if e.method != L.ROOFLINE:
        from .layout_learned import METHOD_TEXT

        return [METHOD_TEXT, *e.warnings]
    why = ("the learned models cannot answer this layout's stage (its stand-in is refused: see "
           "wattgpu.layout_learned); " if asked else "")
    return [why + ROOFLINE_TEXT]


def predict_answer(predictor: Any, gpu: Any, llm: Any, workload: Any, fields: Mapping[str, Any], *,
                   dtype: str = "auto", max_itl_ms: float | None = None, max_ttft_ms: float | None = None,
                   prices: Any = (None, None, 1.0, None)) -> dict[str, Any]:
    """``predict --json`` with a layout: names resolved, the layout checked, the answer's JSON (with ``sla`` —
    met or not, nothing searched — when a limit is given)."""
    from .quant import with_dtype

    if workload.engine != "vllm":
        raise SpecValidationError("workload", "engine", workload.engine, "vllm for a layout (pp, dp, ep, nodes): "
                                  "the layout is vLLM's parallel flags")
    checked = checked_fields(fields)
    gspec = predictor.resolve_gpu(gpu)
    lspec = with_dtype(predictor.resolve_llm(llm), dtype)
    lay = layout_of(gspec, lspec, workload.tp, checked.get("pp"), checked.get("dp"), checked.get("ep"),
                    checked.get("nodes"), checked.get("interconnect"))
    p = predict_layout(gspec, lspec, workload, lay, predictor=predictor)
    if max_itl_ms is not None or max_ttft_ms is not None:
        from .questions import check_sla_ms

        check_sla_ms(max_itl_ms, max_ttft_ms)
        # both limits' misses, each in the words of capacity.sla_miss (which names only the first)
        over = [m for m in (capacity.sla_miss(p.itl_s, None, max_itl_ms, None),
                            capacity.sla_miss(p.itl_s, p.ttft_s, None, max_ttft_ms)) if m is not None]
        p = replace(p, sla={"max_itl_ms": max_itl_ms, "max_ttft_ms": max_ttft_ms, "met": not over,
                            "max_batch": workload.max_batch, "reason": "; ".join(over) or None})
    return p.to_dict(prices)


def check_no_layout(fields: Mapping[str, Any]) -> None:
    """Without a layout, ``interconnect`` has nothing to connect: refuse it by name."""
    if fields.get("interconnect") is not None:
        raise SpecValidationError("request", "interconnect", fields["interconnect"], "no value without a layout: "
                                  "the network joins nodes; give pp, dp, ep or nodes too (e.g. tp 8, pp 2, nodes 2)")
