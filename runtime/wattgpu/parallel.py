"""Tensor parallelism (TP) over N GPUs of one type: sharding, memory per GPU, all-reduce time, group checks.

Model of a Megatron-style TP group as vLLM / TGI / TensorRT-LLM run it:

- every weight matrix is split over the N GPUs (attention heads, FFN columns/rows, the vocabulary of
  the embedding and LM head), so each GPU holds 1/N of the weights;
- the KV cache is split by KV head: each GPU holds num_kv_heads / N heads, but at least one (when
  N > num_kv_heads the engines replicate KV heads), so its share is max(1/N, 1/num_kv_heads);
- MoE (ASSUMPTION): experts are sharded with the TP group, each GPU holding 1/N of every expert
  (vLLM's default without expert parallelism); expert parallelism is not modelled;
- a decode step runs two all-reduces per layer (after attention and after the FFN), each of
  batch × hidden × 2 bytes (bf16 activations);
- a ring all-reduce of S bytes over N GPUs moves 2(N−1)/N × S bytes through each GPU's link each
  way, plus a fixed per-call latency.

Link figures (per direction): NVLink = the datasheet's bidirectional per-GPU figure / 2 when the group
fits in the GPU's NVLink domain; otherwise PCIe lanes × per-lane rate (PCI-SIG: 8/16/32/64 GT/s for
Gen3/4/5/6). Per-call latencies are round figures from published measurements:

- NVLink 10 µs: vLLM's custom all-reduce on 8×H100 SXM measured 8.5–11.8 µs for 0.5–32 KB at TP 2/4/8
  (sgl-project/sglang#2904, unit-test table);
- PCIe 40 µs: NCCL all_reduce_perf at 8 bytes on 8 PCIe GPUs took 42.6 µs (8×RTX 4090,
  NVIDIA/nccl#1530) and 54.2 µs (8×RTX 3090, NVIDIA/nccl#1439).

Every formula takes numpy arrays or plain floats alike (:mod:`wattgpu.ops`): bytes, seconds, GB/s.
"""
from __future__ import annotations

import math
from typing import Any

from . import ops
from .errors import SpecValidationError
from .rules import is_finite_number

TP_CHOICES = (1, 2, 4, 8)  # group sizes `rank --tp auto` tries
MAX_TP = 1024
ALLREDUCES_PER_LAYER = 2
ACTIVATION_BYTES = 2.0  # bf16/fp16 activations
NVLINK_CALL_LATENCY_S = 10e-6
PCIE_CALL_LATENCY_S = 40e-6
# PCIe GB/s per lane per direction after line coding (Gen1/2: 8b/10b; Gen3-5: 128b/130b; Gen6: FLIT, ~7.56).
PCIE_GB_S_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563, 7: 15.125}
DEFAULT_PCIE_LANES = 16
MOE_ASSUMPTION = ("experts sharded with the TP group (each GPU holds 1/N of every expert; expert parallelism "
                  "not modelled)")


def shard(values: Any, tp: Any) -> Any:
    """Per-GPU share of something split evenly over the TP group (weights, FLOPs)."""
    return ops.asarray(values) / ops.asarray(tp)


def kv_shard_fraction(num_kv_heads: Any, tp: Any) -> Any:
    """Share of the KV cache one GPU holds: max(1/N, 1/KV heads) (KV heads replicated when N > KV heads)."""
    kv = ops.maximum(ops.asarray(num_kv_heads), 1.0)
    return ops.maximum(1.0 / ops.asarray(tp), 1.0 / kv)


def allreduce_bytes(batch: Any, hidden: Any) -> Any:
    """Bytes of one all-reduce in a decode step: batch × hidden × activation bytes."""
    return ops.asarray(batch) * ops.asarray(hidden) * ACTIVATION_BYTES


def ring_allreduce_s(nbytes: Any, tp: Any, link_gb_s: Any, latency_s: Any) -> Any:
    """Ring all-reduce time: 2(N−1)/N × bytes / link bandwidth + per-call latency; 0 for N = 1."""
    n = ops.asarray(tp)
    t = 2.0 * (n - 1.0) / n * ops.asarray(nbytes) / (ops.asarray(link_gb_s) * 1e9)
    return ops.where(n > 1.0, t + latency_s, 0.0)


def comm_step_s(layers: Any, batch: Any, hidden: Any, tp: Any, link_gb_s: Any, latency_s: Any) -> Any:
    """All-reduce time of one decode step: two all-reduces per layer."""
    per_call = ring_allreduce_s(allreduce_bytes(batch, hidden), tp, link_gb_s, latency_s)
    return ALLREDUCES_PER_LAYER * ops.asarray(layers) * per_call


def pcie_gb_s(pcie_gen: Any, pcie_lanes: Any) -> Any:
    """PCIe bandwidth per direction (GB/s) from generation and lanes; NaN when the generation is unknown."""
    gen = ops.asarray(pcie_gen)
    lanes = ops.asarray(pcie_lanes)
    lanes = ops.where(ops.isfinite(lanes), lanes, float(DEFAULT_PCIE_LANES))
    rate: Any = math.nan
    for g, r in PCIE_GB_S_PER_LANE.items():
        rate = ops.where(gen == g, r, rate)
    return rate * lanes


def link(tp: Any, nvlink_gb_s: Any, nvlink_group: Any, pcie_gen: Any, pcie_lanes: Any) -> tuple[Any, Any, Any]:
    """(bandwidth per direction GB/s, per-call latency s, 1.0 where NVLink) of a group of ``tp`` GPUs.

    NVLink when the group fits in the NVLink domain, else PCIe (the ring runs at its slowest link).
    Floats in, floats out (the one-row path); arrays in, arrays out.
    """
    n = ops.asarray(tp)
    nv = ops.asarray(nvlink_gb_s)
    on_nvlink = ops.isfinite(nv) & (n <= ops.asarray(nvlink_group))
    bw = ops.where(on_nvlink, nv / 2.0, pcie_gb_s(pcie_gen, pcie_lanes))
    lat = ops.where(on_nvlink, NVLINK_CALL_LATENCY_S, PCIE_CALL_LATENCY_S)
    return bw, lat, ops.as_float(on_nvlink)


def link_name(gpu: Any, tp: int) -> str:
    """Which link a group of ``tp`` ``gpu``s uses, in words (for warnings and docs)."""
    if tp <= 1:
        return "none (one GPU)"
    if gpu.nvlink_gb_s and tp <= gpu.nvlink_group:
        return f"NVLink {gpu.nvlink_gb_s / 2:g} GB/s per direction"
    bw = float(pcie_gb_s(float(gpu.pcie_gen) if gpu.pcie_gen else math.nan, float(gpu.pcie_lanes or DEFAULT_PCIE_LANES)))
    return f"PCIe Gen{gpu.pcie_gen} x{gpu.pcie_lanes or DEFAULT_PCIE_LANES} {bw:.1f} GB/s per direction"


def check_tp_value(tp: Any) -> int:
    """The TP degree as an int in [1, MAX_TP] or a SpecValidationError naming the field."""
    if not is_finite_number(tp) or tp != int(tp) \
            or not 1 <= tp <= MAX_TP:
        raise SpecValidationError("workload", "tp", tp, f"a whole number of GPUs in [1, {MAX_TP}] (tensor-parallel "
                                  "degree; 1 = one GPU)")
    return int(tp)


def group_error(gpu: Any, llm: Any, tp: int) -> SpecValidationError | None:
    """Why ``tp`` GPUs of ``gpu`` cannot run ``llm`` tensor-parallel (one line naming the field), or None."""
    if tp <= 1:
        return None
    if gpu.max_group is None:
        return SpecValidationError("workload", "tp", tp, f"1: {gpu.name} has no interconnect facts (give max_group and "
                                   "nvlink_gb_s/nvlink_group or pcie_gen in the GPU file)")
    if tp > gpu.max_group:
        return SpecValidationError("workload", "tp", tp, f"at most {gpu.max_group}: {gpu.name} comes in groups of at "
                                   f"most {gpu.max_group} (interconnect.csv)")
    if not (gpu.nvlink_gb_s and tp <= gpu.nvlink_group) and gpu.pcie_gen is None:
        return SpecValidationError("workload", "tp", tp, f"1: {gpu.name} has no link for a group of {tp} "
                                   "(no NVLink domain that large, no PCIe generation)")
    return split_error(llm, tp)


def split_error(llm: Any, tp: int) -> SpecValidationError | None:
    """Why ``llm`` cannot be split over ``tp`` GPUs on any GPU (its heads), or None."""
    if tp > 1 and llm.num_attention_heads % tp:
        return SpecValidationError("workload", "tp", tp, f"a divisor of {llm.name}'s {llm.num_attention_heads} attention "
                                   "heads (e.g. 1, 2, 4, 8)")
    if tp > 1 and llm.num_kv_heads % tp and tp % llm.num_kv_heads:
        return SpecValidationError("workload", "tp", tp, f"a divisor or multiple of {llm.name}'s {llm.num_kv_heads} KV heads")
    return None


def candidate_groups(gpu: Any, llm: Any, choices: tuple[int, ...] = TP_CHOICES) -> list[int]:
    """The TP degrees of ``choices`` that ``gpu`` comes in and ``llm`` can be split over."""
    return [n for n in choices if group_error(gpu, llm, n) is None]
