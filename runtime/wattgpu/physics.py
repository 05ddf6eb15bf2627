"""Physical quantities from spec sheets: bytes, FLOPs, roofline times, memory fit, baselines.

Written with :mod:`wattgpu.ops`, so the same code serves numpy arrays (a batch, a catalog ranking,
training matrices) and plain floats (the one-row scalar path), with bit-identical results.
Units: bytes, seconds, watts; parameters in billions (``*_b``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

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
    cap (vLLM's ``max_num_seqs``): clients beyond it queue (:func:`wattgpu.latency.closed_loop_wait`)."""
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


def solve_server_concurrency(qps: Any, request_time_s: Callable[..., Any], iters: int = 60, rtol: float = 1e-6,
                             active_rows: bool = False, upper: Any = None, start: Any = None) -> tuple[Any, Any]:
    """Little's law L = λ · T(L), where the per-request time T depends on the batch: a bracketed secant solve.

    ``request_time_s(L)`` maps concurrencies to per-request times (prefill + output tokens × ITL at the busy
    batch). The root of g(L) = L − λ·T(L) is kept in a bracket [lo, hi] with g(lo) < 0 ≤ g(hi): lo starts at
    0 and hi at ``upper`` (per row, optional: a concurrency known to satisfy L ≥ λ·T(L), such as the
    capacity's operating point when λ ≤ capacity), else at the first point found with g ≥ 0. The first two
    points are ``start`` (per row; default 1, or a guess such as λ × the request time at batch 1) and the
    fixed-point step from it; then secant steps (regula falsi, or bisection when
    the bracket did not halve in two steps or the secant leaves it), each aimed a little above the root.
    A row stops at a point with 0 ≤ g ≤ rtol·L (Little's law holds there to ``rtol``, on the side where
    the served rate never exceeds batch ÷ ITL) or when its bracket is narrower than rtol·hi (a T that steps
    across the line: the answer is hi). A learned T is smooth between its steps, so a light or moderate
    load takes 3–5 evaluations of T instead of the ~20 a damped iteration took. A row still open after
    ``iters`` evaluations (λ beyond capacity without ``upper``: L diverges) returns its last point, not
    converged; a NaN request time stops the row with a NaN answer, not converged.

    With ``active_rows`` it is called as ``request_time_s(L[idx], idx)`` for the open rows ``idx`` only.
    ``qps`` a float: one row on floats (the one-row path), the same steps and the same bits.
    """
    one = isinstance(qps, float)
    lo: Any
    glo: Any
    hi: Any
    open_: Any
    if one:
        lam: Any = qps
        lo, glo = 0.0, math.nan
        hi = math.inf if upper is None else float(upper)
        open_ = True
    else:
        lam = np.asarray(qps, dtype=np.float64)
        lo, glo = np.zeros(lam.shape), np.full(lam.shape, math.nan)
        hi = np.full(lam.shape, np.inf) if upper is None else np.asarray(upper, dtype=np.float64).copy()
        open_ = np.ones(lam.shape, dtype=bool)
        everyone = np.arange(lam.size)
    ghi = ops.where(ops.isfinite(hi), math.nan, math.nan)  # g at hi once evaluated (NaN: not evaluated)
    answer = ops.where(open_, math.nan, math.nan)
    converged = ops.logical_not(open_)

    def times(at: Any) -> Any:
        if one:
            return request_time_s(at) if open_ else math.nan
        if not active_rows:
            return request_time_s(at)
        idx = everyone[open_]
        out = np.full(lam.shape, np.nan)
        out[idx] = request_time_s(at[idx], idx)
        return out

    first = ops.where(open_, 1.0, 1.0) if start is None else ops.asarray(start)
    x = ops.minimum(ops.where(ops.isfinite(first) & (first > 0.0), first, 1.0), hi)
    prev_x, prev_g = x, ops.where(open_, math.nan, math.nan)
    prev_rate = prev_g
    width = ops.where(open_, math.inf, math.inf)  # the bracket two steps ago, once both ends are evaluated
    for step in range(iters):
        g = x - littles_law_concurrency(lam, times(x))
        with np.errstate(invalid="ignore"):
            bad = open_ & ops.isnan(g)
            below = open_ & (g < 0.0)
            above = open_ & (g >= 0.0)
            lo, glo = ops.where(below & (x > lo), x, lo), ops.where(below & (x > lo), g, glo)
            hi, ghi = ops.where(above & (x <= hi), x, hi), ops.where(above & (x <= hi), g, ghi)
            hit = above & (g <= rtol * x)
            tight = open_ & ~hit & ops.isfinite(hi) & ((hi - lo) <= rtol * hi) if not one else (
                open_ and not hit and math.isfinite(hi) and (hi - lo) <= rtol * hi)
        answer = ops.where(hit, x, ops.where(tight, hi, ops.where(bad, math.nan, answer)))
        converged = converged | hit | tight
        open_ = open_ & ops.logical_not(hit | tight | bad)
        if not (open_ if one else np.any(open_)):
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = _ratio(-g, x - prev_x)  # the fixed-point map's contraction seen over the last step
            smooth = (rate > 0.0) & (rate < 0.95) & (abs(rate - prev_rate) <= 0.2 * rate)
        x, prev_x, prev_g, prev_rate = _next_point(x, g, prev_x, prev_g, lo, glo, hi, ghi, width, smooth, rtol), x, g, rate
        with np.errstate(invalid="ignore"):
            width = ops.where((step % 2 == 1) & ops.isfinite(glo) & ops.isfinite(ghi), hi - lo, width)
    last = ops.where(ops.isfinite(hi), hi, x)
    return ops.where(open_, last, answer), converged


def _next_point(x: Any, g: Any, px: Any, pg: Any, lo: Any, glo: Any, hi: Any, ghi: Any, width: Any, smooth: Any,
                rtol: float) -> Any:
    """The next point of :func:`solve_server_concurrency` (floats or arrays, the same operations).

    From below (g < 0) the fixed-point step λ·T(x) cannot pass the smallest root where T does not fall with L
    (g ≤ 0 on [x, λ·T(x)]); a secant (Aitken) step may jump over a root where T steps, so from below it is
    taken only where the last two steps contracted at the same rate (``smooth``: one smooth piece of T).
    Once a point above the root is known, regula falsi inside the bracket, and bisection when it stalls."""
    fixed = x - g  # the fixed-point step λ·T(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        secant = x - _ratio(g * (x - px), g - pg)
        falsi = lo - _ratio(glo * (hi - lo), ghi - glo)
    inside = lambda v: (v > lo) & (v < hi)  # noqa: E731 - NaN compares False
    fresh = ops.logical_not((hi - lo) > 0.5 * width)  # stalled: both ends known, the bracket did not halve in two steps
    from_below = g < 0.0
    guess = ops.where(inside(secant) & fresh & (smooth | ops.logical_not(from_below)), secant,
                      ops.where(inside(falsi) & fresh & ops.logical_not(from_below), falsi,
                                ops.where(inside(fixed) & fresh, fixed,
                                          ops.where(ops.isfinite(hi), 0.5 * (lo + hi), fixed))))
    # aim a quarter of the tolerance above the estimate: a good estimate then lands on 0 ≤ g ≤ rtol·L
    aimed = guess * (1.0 + 0.25 * rtol)
    return ops.where(inside(aimed), aimed, guess)


def _ratio(a: Any, b: Any) -> Any:
    """a / b, NaN where b is 0 or NaN (floats raise on 0; arrays would give inf)."""
    if isinstance(b, float):
        return a / b if b != 0.0 and b == b else math.nan
    return np.where(b != 0.0, a / np.where(b != 0.0, b, 1.0), np.nan)


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
