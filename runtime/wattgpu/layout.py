"""Layouts beyond one tensor-parallel group: tensor (TP) × pipeline (PP) × data (DP) parallelism, with expert
parallelism (EP) for mixture-of-experts models, on one node or several.

A :class:`Layout` puts ``tp × pp × dp`` GPUs of one type on ``nodes`` nodes of ``gpus_per_node``:

- TP splits every weight matrix over ``tp`` GPUs of one node (as :mod:`wattgpu.parallel`);
- PP cuts the layers into ``pp`` stages run one after the other. Decoding keeps ``m`` micro-batches in flight (vLLM
  runs one per pipeline stage: its virtual engines), with no flush between decode steps, so a round — every
  micro-batch gains one token — is the longer of a stage working through the ``m`` micro-batches and one
  micro-batch's pass through the ``pp`` stages and their links (:func:`pipeline_round_s`); a stage idles the rest of
  the round (the bubble: the links' share with ``m = pp``; training's fill-and-drain does not apply). Every stage
  boundary sends the batch's activations (batch × hidden × 2 bytes) to the next stage: over NVLink inside a node, over the
  inter-node link (:data:`INTERNODE_LINKS`) between nodes;
- DP runs ``dp`` engines side by side, each serving its share of the sequences; for a MoE model with EP this is
  vLLM's attention data parallelism: the attention (dense) weights are copied per DP rank while the experts are
  spread over all ``ep = tp × dp`` GPUs of a stage;
- EP sends every token to the GPUs that hold its top-k experts and back (an all-to-all per MoE layer): each GPU
  moves tokens × top-k × hidden × 2 bytes × 2 (dispatch and combine) × (ep − 1) / ep per layer. Tokens per GPU =
  the DP rank's batch / tp (ASSUMPTION: the TP ranks of an attention group dispatch disjoint token slices).

Times are roofline figures (bytes / bandwidth, FLOPs / peak) plus fixed per-transfer latencies: a lower bound the
learned models sit above, never a measurement. The memory fit is exact arithmetic on the spec sheet and config.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .frozen import dataclass
from . import memory, ops, parallel, physics
from .errors import SpecValidationError
from .layout_limits import (DEFAULT_GPUS_PER_NODE, DEFAULT_INTERCONNECT, INTERNODE_LINKS, LIMITS, MAX_NODES,
                            InternodeLink, internode_link)
from .rules import is_finite_number

ACTIVATION_BYTES = parallel.ACTIVATION_BYTES
ALLTOALL_PER_LAYER = 2  # dispatch + combine
ROOFLINE, ANCHORED = "roofline", "anchored"  # the methods of an Estimate (see estimate)
NVLINK_P2P_LATENCY_S = parallel.NVLINK_CALL_LATENCY_S


def _f(x: Any) -> Any:
    """A plain float for the physics functions, which take floats or arrays alike (:mod:`wattgpu.ops`)."""
    return ops.asarray(float(x))


def _whole(field: str, value: Any, hi: int) -> int:
    if not is_finite_number(value) \
            or value != int(value) or not 1 <= value <= hi:
        raise SpecValidationError("workload", field, value, f"a whole number in [1, {hi}]")
    return int(value)


@dataclass(frozen=True)
class Layout:
    """``tp × pp × dp`` GPUs on ``nodes`` nodes of ``gpus_per_node``; ``ep`` = 1 (experts split with TP) or
    ``tp × dp`` (expert parallelism). Whole numbers are checked on construction; :func:`layout_error` checks the
    layout against a GPU and an LLM."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    nodes: int = 1
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    interconnect: str = DEFAULT_INTERCONNECT

    def __post_init__(self) -> None:
        for field, hi in LIMITS.items():
            object.__setattr__(self, field, _whole(field, getattr(self, field), hi))
        if self.ep not in (1, self.tp * self.dp):
            raise SpecValidationError("workload", "ep", self.ep, f"1 (experts split with TP) or tp × dp = "
                                      f"{self.tp * self.dp} (expert parallelism over the attention group)")
        internode_link(self.interconnect)

    @property
    def gpus(self) -> int:
        """GPUs of the whole layout."""
        return self.tp * self.pp * self.dp

    @property
    def link(self) -> InternodeLink:
        """The inter-node link."""
        return internode_link(self.interconnect)

    @property
    def gpus_on_busiest_node(self) -> int:
        """GPUs on the fullest node."""
        return min(self.gpus, self.gpus_per_node)

    def describe(self) -> str:
        """``TP8 × PP2 (EP8) on 2 nodes`` style label."""
        parts = [f"TP{self.tp}"] + [f"PP{self.pp}"] * (self.pp > 1) + [f"DP{self.dp}"] * (self.dp > 1)
        ep = f" EP{self.ep}" if self.ep > 1 else ""
        return " × ".join(parts) + ep + f" on {self.nodes} node{'s' * (self.nodes > 1)}"


def layout_error(gpu: Any, llm: Any, lay: Layout) -> SpecValidationError | None:
    """Why ``lay`` cannot run ``llm`` on ``gpu`` GPUs (one line naming the field and the fix), or None.
    The memory fit is separate (:func:`fit`)."""
    if lay.gpus > lay.nodes * lay.gpus_per_node:
        return SpecValidationError("workload", "nodes", lay.nodes, f"at least {math.ceil(lay.gpus / lay.gpus_per_node)}"
                                   f": tp × pp × dp = {lay.gpus} GPUs do not fit on {lay.nodes} node(s) of "
                                   f"{lay.gpus_per_node}")
    if lay.nodes > 1 and lay.gpus != lay.nodes * lay.gpus_per_node:
        return SpecValidationError("workload", "nodes", lay.nodes, f"{math.ceil(lay.gpus / lay.gpus_per_node)}: "
                                   f"{lay.gpus} GPUs leave nodes of {lay.gpus_per_node} part empty; a multi-node "
                                   "layout fills every node")
    if lay.tp > lay.gpus_per_node:
        return SpecValidationError("workload", "tp", lay.tp, f"at most {lay.gpus_per_node} (one node): split across "
                                   "nodes with pp (pipeline stages) instead")
    if lay.pp > llm.num_layers:
        return SpecValidationError("workload", "pp", lay.pp, f"at most {llm.num_layers} ({llm.name}'s layers): a "
                                   "pipeline stage holds at least one layer")
    if lay.ep > 1 and not llm.is_moe:
        return SpecValidationError("workload", "ep", lay.ep, f"1: {llm.name} is dense (no experts to spread)")
    if lay.ep > 1 and llm.num_experts % lay.ep:
        return SpecValidationError("workload", "ep", lay.ep, f"a divisor of {llm.name}'s {llm.num_experts} experts")
    if lay.gpus > 1 and gpu.max_group is None:
        return SpecValidationError("workload", "tp", lay.tp, f"1 GPU: {gpu.name} has no interconnect facts (give "
                                   "max_group and nvlink_gb_s/nvlink_group or pcie_gen in the GPU file)")
    if lay.gpus > 1 and lay.gpus_per_node > gpu.max_group:
        return SpecValidationError("workload", "gpus_per_node", lay.gpus_per_node, f"at most {gpu.max_group}: "
                                   f"{gpu.name} comes in groups of at most {gpu.max_group} (interconnect.csv)")
    if lay.tp > 1:
        err = parallel.group_error(gpu, llm, lay.tp)
        if err is not None:
            return err
    return None


# ---------------------------------------------------------------- physics (bytes, seconds; floats)

def expert_params_b(llm: Any) -> float:
    """Parameters (B) in the routed experts: total − active = (E − k) × one expert, so E × one expert."""
    e, k = float(llm.num_experts), float(llm.experts_per_tok)
    if e <= 1 or e <= k:
        return 0.0
    return max(float(llm.total_params_b) - float(llm.active_params_b), 0.0) * e / (e - k)


def weight_bytes_per_gpu(llm: Any, lay: Layout) -> float:
    """Weight bytes one GPU holds: dense weights / (tp × pp), routed experts / (ep or tp) / pp."""
    experts = expert_params_b(llm)
    dense = float(llm.total_params_b) - experts
    expert_split = lay.ep if lay.ep > 1 else lay.tp
    params = dense / (lay.tp * lay.pp) + experts / (expert_split * lay.pp)
    return params * 1e9 * float(llm.weight_bytes_per_param)


def kv_bytes_per_token_per_gpu(llm: Any, lay: Layout, kv_cache_dtype: str = "auto") -> float:
    """KV bytes per token on one GPU: the stage's layers, the TP share of KV heads (an MLA latent is whole on
    every TP rank)."""
    per_token = memory.llm_kv_bytes_per_token(llm, kv_cache_dtype)
    share = 1.0 if llm.kv_lora_rank else float(parallel.kv_shard_fraction(float(llm.num_kv_heads), float(lay.tp)))
    return per_token * share / lay.pp


@dataclass(frozen=True)
class Fit:
    """Memory per GPU: weights, KV budget, sequences of ``context_tokens`` the whole layout holds (all DP
    ranks), and whether one sequence fits."""

    weight_gb: float
    kv_budget_gb: float
    sequences: int

    @property
    def fits(self) -> bool:
        return self.sequences >= 1


def touched_weight_bytes(llm: Any, lay: Layout, tokens: float) -> float:
    """Weight bytes one GPU reads in one decode step of ``tokens`` routed tokens: its dense share and the share
    1 − (1 − k/E)^tokens of its local experts that some token picked (all of them for a dense model)."""
    experts = expert_params_b(llm)
    dense = float(llm.total_params_b) - experts
    split = lay.ep if lay.ep > 1 else lay.tp
    e, k = float(llm.num_experts), float(llm.experts_per_tok)
    touched = 1.0 - (1.0 - k / e) ** max(tokens, 1.0) if experts > 0 else 1.0
    params = dense / (lay.tp * lay.pp) + experts * touched / (split * lay.pp)
    return params * 1e9 * float(llm.weight_bytes_per_param)


def fit(gpu: Any, llm: Any, lay: Layout, context_tokens: int, gpu_memory_utilization: float = 0.9,
        kv_cache_dtype: str = "auto") -> Fit:
    """The memory fit of ``lay``: per-GPU weights and KV budget, and the sequences the layout holds."""
    w = weight_bytes_per_gpu(llm, lay)
    budget = float(physics.kv_budget_bytes(_f(gpu.memory_size_gb), _f(gpu_memory_utilization), _f(w)))
    per_seq = max(kv_bytes_per_token_per_gpu(llm, lay, kv_cache_dtype) * context_tokens, 1.0)
    per_rank = math.floor(max(budget, 0.0) / per_seq)
    gb = physics.BYTES_PER_MEMORY_GB
    return Fit(w / gb, budget / gb, per_rank * lay.dp)


def pipeline_round_s(micro_batches: float, pp: float, stage_s: float, links_s: float) -> float:
    """One decode round of a pipeline in steady state, in which each of ``micro_batches`` micro-batches gains one
    token: max(m × stage time, pp × stage time + the stage links' time) — the stages are busy with the m
    micro-batches, or a micro-batch is still on its way through the pp stages."""
    return max(micro_batches * stage_s, pp * stage_s + links_s)


def bubble_fraction(micro_batches: float, pp: float, stage_s: float, links_s: float) -> float:
    """Share of a round a pipeline stage idles: 1 − m × stage time / :func:`pipeline_round_s`; 0 for one stage
    (no links) or when the micro-batches keep every stage busy."""
    round_s = pipeline_round_s(micro_batches, pp, stage_s, links_s)
    return max(0.0, 1.0 - micro_batches * stage_s / round_s) if round_s > 0 else 0.0


def alltoall_bytes(tokens: Any, experts_per_tok: Any, hidden: Any, ep: Any) -> Any:
    """Bytes one GPU sends in one MoE layer: tokens × top-k × hidden × 2 bytes × (dispatch + combine) × (ep−1)/ep."""
    return tokens * experts_per_tok * hidden * ACTIVATION_BYTES * ALLTOALL_PER_LAYER * (ep - 1.0) / ep


def transfer_s(nbytes: float, gb_s: float, latency_s: float) -> float:
    """Time to move ``nbytes`` over a link of ``gb_s`` GB/s with a fixed latency; 0 for nothing."""
    return nbytes / (gb_s * 1e9) + latency_s if nbytes > 0 else 0.0


def _nvlink(gpu: Any, n: int) -> tuple[float, float]:
    bw, lat, _ = parallel.link(float(n), float(gpu.nvlink_gb_s or math.nan), float(gpu.nvlink_group),
                               float(gpu.pcie_gen) if gpu.pcie_gen else math.nan, float(gpu.pcie_lanes or 16))
    return float(bw), float(lat)


def moe_layers(llm: Any) -> int:
    """Layers with routed experts (all of them for the catalog's MoE configs; 0 for a dense model)."""
    return int(llm.num_layers) if llm.is_moe else 0


@dataclass(frozen=True)
class Anchor:
    """The learned models' answer for one stage of one engine at one micro-batch (:mod:`wattgpu.layout_learned`):
    the decode step (s, the engine's TP all-reduce included), the per-GPU power of a GPU busy with it (W), the
    prefill of one prompt through that stage (s), and where the learned models extrapolate (warnings)."""

    step_s: float
    power_w: float
    ttft_s: float
    warnings: tuple[str, ...] = ()


# What answers a layout's stage: None (roofline only) or a function of the micro-batch (sequences of one engine's
# micro-batch) giving the learned stage figures, or None where the learned models cannot answer.
StageModel = Callable[[float], "Anchor | None"]


@dataclass(frozen=True)
class Estimate:
    """Figures of one layout at a running batch (sequences over all DP ranks): ``method`` ``roofline`` (bytes /
    bandwidth, FLOPs / peak) or ``anchored`` (the learned stage step and power composed with the layout's link,
    bubble and all-to-all terms); the roofline figures of the same layout ride along as the bound."""

    layout: Layout
    batch: int
    itl_s: float  # one decode step as one sequence sees it
    ttft_s: float  # prefill of one prompt on an idle layout
    bubble: float
    tokens_per_s: float
    power_per_gpu_w: float
    power_per_node_w: float
    alltoall_s: float
    p2p_s: float
    allreduce_s: float
    method: str = ROOFLINE
    roofline_itl_s: float = math.nan
    roofline_ttft_s: float = math.nan
    roofline_power_per_gpu_w: float = math.nan
    warnings: tuple[str, ...] = ()

    @property
    def power_w(self) -> float:
        """All GPUs of the layout."""
        return self.power_per_gpu_w * self.layout.gpus

    def roofline(self) -> dict[str, float]:
        """The roofline figures of the same layout and load: the bound the answer never undercuts (ITL, TTFT)."""
        return {"itl_s": self.roofline_itl_s, "ttft_s": self.roofline_ttft_s,
                "power_w": self.roofline_power_per_gpu_w}


def micro_batch(lay: Layout, batch: float, micro_batches: int | None = None) -> tuple[float, float, float]:
    """(sequences per DP rank, micro-batches in the pipeline, sequences per micro-batch) of ``batch`` sequences."""
    rank_batch = max(batch / lay.dp, 1.0)
    m = min(float(micro_batches or lay.pp), rank_batch)
    return rank_batch, m, rank_batch / m


def estimate(gpu: Any, llm: Any, lay: Layout, batch: float, input_tokens: int, output_tokens: int,
             micro_batches: int | None = None, kv_cache_dtype: str = "auto",
             stage_model: StageModel | None = None) -> Estimate:
    """ITL, TTFT, tokens/s and power of ``lay`` decoding ``batch`` sequences (spread over the DP ranks, each rank's
    share cut into ``micro_batches`` — default ``pp`` — micro-batches in the pipeline).

    Roofline without ``stage_model``. With it, the stage's decode step and busy power are the learned models'
    (``stage_model(micro)``), never below the roofline stage; the all-to-all, the stage links and the bubble
    (which the learned models never saw) are the same physics terms as the roofline's."""
    rank_batch, m, micro = micro_batch(lay, batch, micro_batches)
    mean_context = input_tokens + output_tokens / 2.0
    layers = llm.num_layers / lay.pp
    # one stage, one micro-batch: DRAM bytes and FLOPs of one GPU
    w_total = weight_bytes_per_gpu(llm, lay)
    # the expert shard sees every token of its group: the stage's whole batch with EP, the rank's without
    routed = micro * lay.dp if lay.ep > 1 else micro
    kv = micro * kv_bytes_per_token_per_gpu(llm, lay, kv_cache_dtype) * mean_context
    flops_rate = physics.compute_tflops(gpu, llm) * 1e12
    stage_mem = (touched_weight_bytes(llm, lay, routed) + kv) / (float(gpu.memory_bandwidth_gb_s) * 1e9)
    stage_flop = 2.0 * float(llm.active_params_b) * 1e9 * micro / (lay.tp * lay.pp) / flops_rate
    stage_compute = max(stage_mem, stage_flop)
    # TP all-reduce inside the node
    tp_bw, tp_lat = _nvlink(gpu, lay.tp)
    allreduce = float(parallel.comm_step_s(layers, micro, float(llm.hidden_size), float(lay.tp), tp_bw, tp_lat)) \
        if lay.tp > 1 else 0.0
    # EP all-to-all: inside the node over NVLink when the EP group fits there, else its slowest link (the network)
    a2a = 0.0
    if lay.ep > 1:
        nbytes = alltoall_bytes(micro / lay.tp, float(llm.experts_per_tok),
                                float(llm.hidden_size), float(lay.ep))
        if lay.ep <= lay.gpus_per_node:
            bw, lat = _nvlink(gpu, lay.ep)
        else:
            bw, lat = min(_nvlink(gpu, lay.gpus_per_node)[0], lay.link.gb_s), lay.link.latency_s
        a2a = moe_layers(llm) / lay.pp * ALLTOALL_PER_LAYER * transfer_s(nbytes / ALLTOALL_PER_LAYER, bw, lat)
    # stage boundaries: activations of a micro-batch; the ones between nodes cross the network
    act = micro * float(llm.hidden_size) * ACTIVATION_BYTES / lay.tp
    cross = min(lay.nodes - 1, lay.pp - 1)
    inside = lay.pp - 1 - cross
    nv_bw, _ = _nvlink(gpu, 2) if lay.gpus_per_node > 1 else (lay.link.gb_s, 0.0)
    p2p = cross * transfer_s(act, lay.link.gb_s, lay.link.latency_s) + inside * transfer_s(act, nv_bw,
                                                                                          NVLINK_P2P_LATENCY_S)
    # prefill of one prompt: FLOPs over the tp GPUs of each stage, stages one after the other
    prompt_flop = 2.0 * float(llm.active_params_b) * 1e9 * input_tokens / lay.tp / flops_rate
    prompt_mem = w_total * lay.pp / (float(gpu.memory_bandwidth_gb_s) * 1e9)
    prompt_a2a = 0.0
    if lay.ep > 1:
        nbytes = alltoall_bytes(float(input_tokens) / lay.tp, float(llm.experts_per_tok), float(llm.hidden_size),
                                float(lay.ep))
        bw = _nvlink(gpu, lay.ep)[0] if lay.ep <= lay.gpus_per_node else lay.link.gb_s
        prompt_a2a = moe_layers(llm) * nbytes / (bw * 1e9)
    prompt_act = input_tokens * float(llm.hidden_size) * ACTIVATION_BYTES / lay.tp
    prompt_p2p = cross * transfer_s(prompt_act, lay.link.gb_s, lay.link.latency_s) + inside * transfer_s(
        prompt_act, nv_bw, NVLINK_P2P_LATENCY_S)
    links_ttft = prompt_a2a + prompt_p2p
    rl_ttft = max(prompt_flop, prompt_mem) + links_ttft
    idle = idle_power_w(gpu)
    # roofline: each sequence gains one token per pipeline round (pipeline_round_s). A GPU works (1 − bubble) of the
    # time, and of that the roofline share of its stage time.
    rl_core = stage_compute + allreduce
    rl_itl = pipeline_round_s(m, lay.pp, rl_core + a2a, p2p)
    bubble = bubble_fraction(m, lay.pp, rl_core + a2a, p2p)
    rl_duty = (1.0 - bubble) * stage_compute / (rl_core + a2a) * float(physics.roofline_duty(
        _f(stage_compute), _f(layers), _f(physics.LAYER_OVERHEAD_DEFAULT_S)))
    rl_power = _within(float(physics.duty_power_w(_f(gpu.tdp_w), _f(rl_duty))), idle, float(gpu.tdp_w))
    anchor = stage_model(micro) if stage_model is not None else None
    warns: tuple[str, ...] = ()
    if anchor is None:
        itl, ttft, per_gpu, method = rl_itl, rl_ttft, rl_power, ROOFLINE
    else:
        # the learned stage (its TP all-reduce included), never faster than the roofline stage; then the links the
        # learned models never saw. Busy power while the stage computes, idle power in the bubble and the transfers.
        core = max(anchor.step_s, rl_core)
        itl = max(pipeline_round_s(m, lay.pp, core + a2a, p2p), rl_itl)
        bubble = bubble_fraction(m, lay.pp, core + a2a, p2p)
        ttft = max(anchor.ttft_s * lay.pp + links_ttft, rl_ttft)
        duty = (1.0 - bubble) * core / (core + a2a)
        busy = _within(anchor.power_w, idle, float(gpu.tdp_w))
        per_gpu = _within(idle + duty * (busy - idle), idle, float(gpu.tdp_w))
        method, warns = ANCHORED, anchor.warnings
    tokens_per_s = rank_batch * lay.dp / itl
    return Estimate(lay, int(batch), itl, ttft, bubble, tokens_per_s, per_gpu, per_gpu * lay.gpus_on_busiest_node,
                    a2a, p2p, allreduce, method, rl_itl, rl_ttft, rl_power, warns)


def _within(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def idle_power_w(gpu: Any) -> float:
    """A GPU's idle power with a model loaded: measured, else the physics default share of TDP."""
    return float(physics.idle_power_w(_f(gpu.idle_power_w if gpu.idle_power_w else math.nan), _f(gpu.tdp_w)))


def vllm_parallel_args(lay: Layout) -> list[str]:
    """vLLM's flags for ``lay``: tensor, pipeline and data parallel sizes, and expert parallelism."""
    args = ["--tensor-parallel-size", str(lay.tp)]
    if lay.pp > 1:
        args += ["--pipeline-parallel-size", str(lay.pp)]
    if lay.dp > 1:
        args += ["--data-parallel-size", str(lay.dp)]
    if lay.ep > 1:
        args.append("--enable-expert-parallel")
    return args


def candidate_layouts(gpu: Any, llm: Any, max_nodes: int = 4, gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
                      interconnect: str = DEFAULT_INTERCONNECT) -> list[Layout]:
    """Every valid layout of ``gpu`` for ``llm`` on up to ``max_nodes`` nodes: TP in 1, 2, 4, 8 (within a node),
    PP and DP powers of two, EP on or off for MoE models; fewer nodes first (the rank search relies on it). Memory
    fit is not checked here."""
    per_node = min(gpus_per_node, gpu.max_group or 1)
    out: list[Layout] = []
    for nodes in range(1, max_nodes + 1):
        total = nodes * per_node if nodes > 1 else None
        for tp in parallel.TP_CHOICES:
            for pp in (1, 2, 4, 8, 16):
                for dp in (1, 2, 4, 8, 16, 32):
                    g = tp * pp * dp
                    if (total is not None and g != total) or (total is None and g > per_node):
                        continue
                    for ep in ((1, tp * dp) if llm.is_moe and tp * dp > 1 else (1,)):
                        try:
                            lay = Layout(tp, pp, dp, ep, nodes, per_node, interconnect)
                        except SpecValidationError:
                            continue
                        if layout_error(gpu, llm, lay) is None:
                            out.append(lay)
    return out
