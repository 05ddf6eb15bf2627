"""Physical quantities from spec sheets: bytes, FLOPs, roofline times, memory fit, baselines.

Written with :mod:`wattgpu.ops`, so the same code serves numpy arrays (a batch, a catalog ranking,
training matrices) and plain floats (the one-row scalar path), with bit-identical results.
Units: bytes, seconds, watts; parameters in billions (``*_b``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

from . import ops

# GPU memory sizes in the catalog are NVIDIA's marketed "GB", which are binary: nvidia-smi reports an
# H100 80 GB as 81,559 MiB and an A100 80 GB as 81,920 MiB (data/catalog README), and serving engines
# size the KV cache from that byte total. Bandwidth (GB/s) and parameter counts stay decimal.
BYTES_PER_MEMORY_GB = float(2**30)
ACTIVATION_RESERVE_FRACTION = 0.05  # of GPU memory kept for activations/CUDA graphs beyond weights + KV
# Load-scaled TDP baseline factors (paper): offline 0.9, server low 0.2, server high 0.6.
LS_TDP_RHO = {"offline": 0.9, "server_low": 0.2, "server_high": 0.6, "closed_loop": 0.6}
SERVER_LOW_QPS_MAX = 0.2  # the paper's split between server_low (0.017 qps) and server_high (0.33 qps)


def weight_bytes(total_params_b: np.ndarray, bytes_per_param: np.ndarray) -> np.ndarray:
    """Bytes of model weights resident on the GPU."""
    return ops.asarray(total_params_b) * 1e9 * bytes_per_param


def kv_budget_bytes(memory_gb: np.ndarray, mem_util: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Memory left for the KV cache: engine share of GPU memory minus weights and an activation reserve."""
    usable = ops.asarray(memory_gb) * BYTES_PER_MEMORY_GB * mem_util
    return usable - weights - ACTIVATION_RESERVE_FRACTION * ops.asarray(memory_gb) * BYTES_PER_MEMORY_GB


def max_batch_that_fits(kv_budget: np.ndarray, kv_per_token: np.ndarray, context_tokens: np.ndarray | float) -> np.ndarray:
    """Largest number of full-context sequences whose KV cache fits (0 when the weights do not fit)."""
    per_seq = ops.maximum(ops.asarray(kv_per_token) * context_tokens, 1.0)
    return ops.floor(ops.maximum(kv_budget, 0.0) / per_seq)


def effective_batch(max_batch: np.ndarray, concurrency: np.ndarray, num_requests: np.ndarray,
                    fit: np.ndarray) -> np.ndarray:
    """Sequences decoding together (the running batch): min(clients or measured concurrency, batch cap,
    what fits in memory), where the concurrency is given (NaN = not given; a NaN cap = not recorded),
    else min(batch cap, requests, what fits); at least 1. The engine never runs more sequences than its
    cap (vLLM's ``max_num_seqs``): clients beyond it queue (:func:`wattgpu.serving.latency.closed_loop_wait`)."""
    conc = ops.asarray(concurrency)
    cap = ops.where(ops.isnan(conc), ops.fmin(max_batch, num_requests), ops.fmin(conc, max_batch))
    return ops.maximum(ops.fmin(cap, ops.maximum(fit, 1.0)), 1.0)


def decode_step_bytes(weights_active: np.ndarray, weights_total: np.ndarray, batch: np.ndarray,
                      kv_per_token: np.ndarray, mean_context: np.ndarray, experts: np.ndarray,
                      experts_per_tok: np.ndarray) -> np.ndarray:
    """Bytes read from DRAM in one decode step: the weights touched by the batch plus its KV cache.

    For MoE models a batch of B tokens touches about E·(1-(1-k/E)^B) of the E experts.
    """
    batch = ops.asarray(batch)
    e = ops.maximum(ops.asarray(experts), 1.0)
    k = ops.clip(ops.asarray(experts_per_tok), 0.0, e)
    touched = ops.where(e > 1.0, 1.0 - ops.power(1.0 - k / e, batch), 1.0)
    w = weights_active + (weights_total - weights_active) * ops.where(e > 1.0, (touched * e - k) / ops.maximum(e - k, 1.0), 0.0)
    return w + batch * kv_per_token * mean_context


def roofline_step_s(step_bytes: np.ndarray, batch: np.ndarray, active_params_b: np.ndarray,
                    bandwidth_gb_s: np.ndarray, fp16_tflops: np.ndarray) -> np.ndarray:
    """Lower bound on one decode step (= per-sequence ITL): max(bytes / bandwidth, FLOPs / peak)."""
    t_mem = step_bytes / (ops.asarray(bandwidth_gb_s) * 1e9)
    t_flop = 2.0 * ops.asarray(active_params_b) * 1e9 * batch / (ops.asarray(fp16_tflops) * 1e12)
    return ops.maximum(t_mem, t_flop)


def matmul_tflops(fp16_tflops: Any, fp8_tflops: Any, fp4_tflops: Any, fp8_compute: Any, fp4_compute: Any) -> np.ndarray:
    """Dense tensor peak (TFLOPS) for a model's matmul precision, vectorised: the FP4 rate for FP4 (W4A4)
    models on GPUs that have one (finite ``fp4_tflops``), the FP8 rate for FP8 (W8A8) models on GPUs with
    FP8 tensor cores, else the 16-bit rate (weight-only formats, or a GPU without the low-precision path).
    NaN rates mean "no such tensor cores"; ``*_compute`` are 1/0 flags from ``LlmSpec.compute_dtype``."""
    fp16 = ops.asarray(fp16_tflops)
    fp8_ok = (ops.asarray(fp8_compute) > 0) & ops.isfinite(ops.asarray(fp8_tflops))
    fp4_ok = (ops.asarray(fp4_compute) > 0) & ops.isfinite(ops.asarray(fp4_tflops))
    return ops.where(fp4_ok, ops.asarray(fp4_tflops), ops.where(fp8_ok, ops.asarray(fp8_tflops), fp16))


def compute_tflops(gpu: Any, llm: Any) -> float:
    """The dense tensor rate (TFLOPS) the compute roofline uses for ``llm`` on ``gpu`` (scalar form of
    :func:`matmul_tflops`): FP4 on GPUs with FP4 tensor cores for FP4 checkpoints, FP8 for FP8 ones where
    the GPU has FP8, else the FP16 rate."""
    def rate(x: float | None) -> float:
        return math.nan if x is None else float(x)
    return float(matmul_tflops(float(gpu.fp16_tflops), rate(gpu.fp8_tflops), rate(getattr(gpu, "fp4_tflops", None)),
                               float(llm.compute_dtype == "fp8"), float(llm.compute_dtype == "fp4")))


def bandwidth_latency_s(params_b: np.ndarray, bandwidth_gb_s: np.ndarray) -> np.ndarray:
    """The paper's bandwidth latency: 2·params_B / bandwidth_GB_s (s; fp16 weights read once)."""
    return 2.0 * ops.asarray(params_b) / bandwidth_gb_s


def compute_latency_s(params_b: np.ndarray, fp16_tflops: np.ndarray) -> np.ndarray:
    """The paper's compute latency: 2·params / FLOPS (s per token at batch 1)."""
    return 2.0 * ops.asarray(params_b) * 1e9 / (ops.asarray(fp16_tflops) * 1e12)


def paper_scenario(kind: str, qps: float | None) -> str:
    """The paper's scenario label: offline, server_low (< 0.2 qps) or server_high; closed loop kept apart."""
    if kind == "server":
        return "server_low" if (qps or 0.0) < SERVER_LOW_QPS_MAX else "server_high"
    return kind


def ls_tdp_power_w(tdp_w: float, scenario: str) -> float:
    """Load-scaled TDP baseline: ρ × TDP."""
    return LS_TDP_RHO[scenario] * tdp_w


# ---- memory fit (bytes and GB for one sequence / one model)
def kv_bytes_per_sequence(kv_per_token: np.ndarray, context_tokens: np.ndarray,
                          sliding_window: np.ndarray | None = None,
                          sliding_layer_fraction: np.ndarray | float = 1.0) -> np.ndarray:
    """KV-cache bytes one sequence of ``context_tokens`` holds.

    Layers with a sliding window keep at most ``sliding_window`` tokens; the others keep the whole
    context. ``sliding_layer_fraction`` is the share of KV layers that slide (1.0 for Mistral-style
    models, where every layer slides). For models whose window applies only to alternate layers
    (Gemma 2: every other layer; Gemma 3: 5 of 6) this is an APPROXIMATION: the config does not always
    say which layers slide, and engines differ in whether they free the out-of-window blocks at all
    (vLLM's hybrid KV-cache manager does, older versions allocate the full context for every layer).
    ``sliding_window`` NaN or None = no window.
    """
    per_tok = ops.asarray(kv_per_token)
    ctx = ops.asarray(context_tokens)
    if sliding_window is None:
        return per_tok * ctx
    win = ops.asarray(sliding_window)
    held = ops.where(ops.isnan(win), ctx, ops.fmin(ctx, ops.where(ops.isnan(win), np.inf, win)))
    frac = ops.clip(ops.asarray(sliding_layer_fraction), 0.0, 1.0)
    return per_tok * (frac * held + (1.0 - frac) * ctx)


def memory_needed_bytes(weights: ArrayLike, memory_gb: ArrayLike, kv_one_sequence: ArrayLike) -> np.ndarray:
    """Smallest engine memory share that serves one sequence: weights + activation reserve + its KV cache."""
    return (ops.asarray(weights) + ACTIVATION_RESERVE_FRACTION * ops.asarray(memory_gb) * BYTES_PER_MEMORY_GB
            + ops.asarray(kv_one_sequence))


# ---- server load (Poisson arrivals, continuous batching)
def littles_law_concurrency(qps: np.ndarray, request_s: np.ndarray) -> np.ndarray:
    """Little's law: mean requests in the system L = λ · W (arrival rate × time each request spends)."""
    return ops.asarray(qps) * ops.asarray(request_s)


def busy_fraction(concurrency: np.ndarray) -> np.ndarray:
    """Share of time at least one request is in service.

    A continuous-batching engine serves every waiting request at once, so it behaves like an M/G/∞
    queue: the number in service is Poisson with mean L, and P(N ≥ 1) = 1 − exp(−L).
    """
    return -ops.expm1(-ops.asarray(concurrency))


def busy_batch(concurrency: np.ndarray) -> np.ndarray:
    """Mean number of sequences decoding together while busy: L / P(N ≥ 1) (zero-truncated Poisson), ≥ 1."""
    c = ops.asarray(concurrency)
    return ops.maximum(c / ops.maximum(busy_fraction(c), 1e-12), 1.0)


def server_power_mix(idle_w: np.ndarray, busy_power_w: np.ndarray, concurrency: np.ndarray) -> np.ndarray:
    """Mean power of a server that idles between requests: idle + busy fraction × (busy power − idle).

    A busy power below the idle figure (a model/idle-table mismatch) is treated as idle, never negative.
    """
    idle = ops.asarray(idle_w)
    return idle + busy_fraction(concurrency) * ops.maximum(ops.asarray(busy_power_w) - idle, 0.0)


# ---- busy power from the roofline duty cycle (target transform of the power model)
# Per-layer, per-decode-step host/launch overhead that the roofline does not count (s). Round numbers
# of the order of eager-mode kernel launches (HF transformers: ~10 kernels/layer at tens of µs) and of
# CUDA-graph engines (vLLM, TGI, TensorRT-LLM, DeepSpeed-MII). They were cross-checked against the
# median (measured ITL − roofline) / layers of the training sources, so they are fixed, not fitted.
LAYER_OVERHEAD_S = {"hf_transformers": 0.5e-3}
LAYER_OVERHEAD_DEFAULT_S = 0.15e-3
# Share of TDP a GPU draws with clocks up but no work issued (the floor of the busy-power model).
BUSY_FLOOR_TDP_FRACTION = 0.3


def roofline_duty(roofline_s: np.ndarray, layers: np.ndarray, layer_overhead_s: np.ndarray) -> np.ndarray:
    """Share of a decode step the memory/compute units are busy: roofline time / (roofline + overhead), in (0, 1]."""
    t = ops.asarray(roofline_s)
    return t / (t + ops.asarray(layers) * layer_overhead_s)


IDLE_FRACTION_OF_TDP = 0.15  # idle estimate (model loaded, no requests) where the catalog has no measured figure


def idle_power_w(measured_w: np.ndarray, tdp_w: np.ndarray) -> np.ndarray:
    """Idle power with a model loaded: the measured figure, else ``IDLE_FRACTION_OF_TDP`` × TDP (NaN = none)."""
    m = ops.asarray(measured_w)
    return ops.where(ops.isnan(m), IDLE_FRACTION_OF_TDP * ops.asarray(tdp_w), m)


def duty_power_w(tdp_w: np.ndarray, duty: np.ndarray, floor: float = BUSY_FLOOR_TDP_FRACTION) -> np.ndarray:
    """Physical power estimate: P = TDP · (floor + (1 − floor) · duty); between floor·TDP and TDP."""
    return ops.asarray(tdp_w) * (floor + (1.0 - floor) * ops.clip(duty, 0.0, 1.0))
