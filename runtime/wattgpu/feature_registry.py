"""THE feature registry: each model input is a named, unit-labelled function of the columns of
:mod:`wattgpu.raw_columns` and :mod:`wattgpu.derived`; ``matrix(names, cols)`` stacks them as float32 in a
model's feature order (what XGBoost was trained on and what onnxruntime consumes), ``row_vector`` does the
same for one row of floats.

Add a feature by decorating a function with ``@feature(name, unit, description)`` (or ``_alias`` for a
column used as it is); a model uses it once a recipe (``wattgpu_train.recipes``) lists its name.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .frozen import dataclass
from . import ops, parallel, physics
from .derived import Columns, flop_s, layer_overhead_s, weight_read_s
from .raw_columns import MEMORY_TYPE_ORDER, SCENARIOS
from .workload import ENGINE_ERAS, ENGINES, ITL_STATS, KINDS


@dataclass(frozen=True)
class Feature:
    name: str
    unit: str
    description: str
    fn: Callable[[Columns], np.ndarray]


REGISTRY: dict[str, Feature] = {}


def feature(name: str, unit: str, description: str) -> Callable[[Callable[[Columns], np.ndarray]], Callable[[Columns], np.ndarray]]:
    def register(fn: Callable[[Columns], np.ndarray]) -> Callable[[Columns], np.ndarray]:
        if name in REGISTRY:
            raise ValueError(f"feature {name!r} defined twice")
        REGISTRY[name] = Feature(name, unit, description, fn)
        return fn
    return register


def _alias(name: str, unit: str, description: str, column: str | None = None) -> None:
    """A feature that is a raw or derived column as it is (``column``, default: the feature's own name)."""
    key = name if column is None else column

    def column_of(c: Columns) -> np.ndarray:
        return c[key]

    feature(name, unit, description)(column_of)


# --- GPU spec-sheet features
_alias("gpu_tdp_w", "W", "board power limit (TDP)")
_alias("gpu_mem_bw_gb_s", "GB/s", "peak DRAM bandwidth", column="gpu_memory_bandwidth_gb_s")
_alias("gpu_mem_gb", "GB", "GPU memory capacity", column="gpu_memory_size_gb")
_alias("gpu_fp16_tflops", "TFLOPS", "dense FP16 tensor peak")
_alias("gpu_release_year", "year", "launch year")
_alias("gpu_base_clock_mhz", "MHz", "base graphics clock (NaN if unpublished)")
_alias("gpu_mem_type_code", "ordinal", f"memory type in order {MEMORY_TYPE_ORDER}", column="gpu_memory_type_code")
_alias("gpu_transistors_million", "million", "transistor count (NaN if unpublished)")


@feature("gpu_boost_base_ratio", "ratio", "boost / base clock")
def _boost_ratio(c: Columns) -> np.ndarray:
    return c["gpu_boost_clock_mhz"] / c["gpu_base_clock_mhz"]


@feature("gpu_ridge_flop_per_byte", "FLOP/byte", "FP16 peak / bandwidth: arithmetic intensity of the roofline ridge")
def _ridge(c: Columns) -> np.ndarray:
    return c["gpu_fp16_tflops"] * 1e12 / (c["gpu_memory_bandwidth_gb_s"] * 1e9)


@feature("gpu_bw_per_tdp", "GB/s/W", "bandwidth per watt of TDP")
def _bw_per_w(c: Columns) -> np.ndarray:
    return c["gpu_memory_bandwidth_gb_s"] / c["gpu_tdp_w"]


@feature("gpu_tflops_per_tdp", "TFLOPS/W", "FP16 peak per watt of TDP")
def _fl_per_w(c: Columns) -> np.ndarray:
    return c["gpu_fp16_tflops"] / c["gpu_tdp_w"]


# --- LLM config features
_alias("llm_params_b", "1e9", "total parameters", column="llm_total_params_b")
_alias("llm_active_params_b", "1e9", "parameters used per token (MoE: top-k experts)")
_alias("llm_layers", "count", "hidden layers", column="llm_num_layers")
_alias("llm_hidden", "count", "hidden size", column="llm_hidden_size")
_alias("llm_heads", "count", "attention heads", column="llm_num_attention_heads")
_alias("llm_kv_heads", "count", "KV heads (GQA)", column="llm_num_kv_heads")
_alias("llm_model_type_code", "ordinal", "config model_type (NaN if unseen)")


@feature("llm_log_params_b", "log(1e9)", "natural log of total parameters in billions")
def _log_params(c: Columns) -> np.ndarray:
    return ops.log(c["llm_total_params_b"])


@feature("llm_weights_gb", "GB", "weight bytes resident on the GPU")
def _weights_gb(c: Columns) -> np.ndarray:
    return c["weights_bytes"] / 1e9


@feature("llm_kv_kb_per_token", "KB", "KV-cache bytes per token (K and V, all attention layers)")
def _kv_kb(c: Columns) -> np.ndarray:
    return c["kv_per_token"] / 1e3


@feature("llm_is_moe", "bool", "1 for mixture-of-experts models")
def _is_moe(c: Columns) -> np.ndarray:
    return ops.as_float(c["llm_num_experts"] > 1)


# --- workload features
_alias("wl_kind_code", "ordinal", f"workload kind in order {KINDS}")
_alias("wl_engine_code", "ordinal", f"engine in order {ENGINES}")
_alias("wl_scenario_code", "ordinal", f"paper scenario in order {SCENARIOS}")
_alias("wl_max_batch", "sequences", "engine batch cap (max_num_seqs)")
_alias("wl_input_tokens", "tokens", "mean prompt length")
_alias("wl_output_tokens", "tokens", "mean generated length")


_alias("wl_engine_era_code", "ordinal", f"serving-stack era in order {ENGINE_ERAS}")
_alias("wl_itl_stat_code", "ordinal", f"ITL statistic in order {ITL_STATS}")


@feature("wl_log_arrival_rate", "log(req/s)", "log of the Poisson arrival rate (server); NaN for offline and closed loop")
def _log_qps(c: Columns) -> np.ndarray:
    return ops.log(c["wl_qps"])


@feature("wl_log_eff_batch", "log(sequences)", "log of the effective decode batch (cap, requests, memory)")
def _log_batch(c: Columns) -> np.ndarray:
    return ops.log(c["eff_batch"])


@feature("wl_kv_cache_gb", "GB", "KV cache held by the effective batch at mean context")
def _kv_gb(c: Columns) -> np.ndarray:
    return c["eff_batch"] * c["kv_per_token"] * c["mean_context"] / 1e9


@feature("wl_mem_headroom", "fraction", "GPU memory free after weights and the batch's KV cache")
def _headroom(c: Columns) -> np.ndarray:
    used = c["weights_bytes"] + c["eff_batch"] * c["kv_per_token"] * c["mean_context"]
    return 1.0 - used / (c["gpu_memory_size_gb"] * physics.BYTES_PER_MEMORY_GB)


# --- physics features
@feature("bw_latency_s", "s", "paper: 2·params_B / bandwidth_GB_s")
def _bw_lat(c: Columns) -> np.ndarray:
    return physics.bandwidth_latency_s(c["llm_total_params_b"], c["gpu_memory_bandwidth_gb_s"])


@feature("compute_latency_s", "s", "paper: 2·params / FP16 FLOPS")
def _cmp_lat(c: Columns) -> np.ndarray:
    return physics.compute_latency_s(c["llm_total_params_b"], c["gpu_fp16_tflops"])


@feature("log_roofline_itl", "log(s)", "log of the roofline decode-step time at the effective batch")
def _log_roof(c: Columns) -> np.ndarray:
    return ops.log(c["roofline_itl_s"])


@feature("roofline_compute_share", "ratio", "FLOP time / memory time of one decode step (>1: compute-bound)")
def _cshare(c: Columns) -> np.ndarray:
    t_mem = c["step_bytes"] / (c["gpu_memory_bandwidth_gb_s"] * 1e9)
    return flop_s(c) / t_mem


@feature("log_roofline_tok_s_per_w", "log(tok/s/W)", "log roofline throughput per watt of TDP")
def _tok_per_w(c: Columns) -> np.ndarray:
    return ops.log(c["eff_batch"] / c["roofline_itl_s"] / c["gpu_tdp_w"])


@feature("log_weight_read_s", "log(s)", "log of the time to read the active weights once at peak bandwidth "
         "(GPU x LLM speed, independent of batch and context)")
def _log_wread(c: Columns) -> np.ndarray:
    return ops.log(weight_read_s(c))


@feature("log_overhead_share", "log(ratio)", "log of (layers x engine per-layer overhead) / weight-read time: "
         "how launch-bound a decode step is at batch 1 (independent of batch and context)")
def _log_ovh(c: Columns) -> np.ndarray:
    return ops.log(c["llm_num_layers"] * layer_overhead_s(c["wl_engine_code"]) / weight_read_s(c))


@feature("weights_compute_share", "ratio", "FLOP time of a decode step / time to read the weights once: grows "
         "with the batch, independent of context")
def _wshare(c: Columns) -> np.ndarray:
    return flop_s(c) / weight_read_s(c)


@feature("roofline_duty", "fraction", "roofline step time / (roofline + per-layer engine overhead): busy share of a step")
def _duty(c: Columns) -> np.ndarray:
    return c["roofline_duty"]


# --- tensor-parallel features (1 and 0 on single-GPU rows)
_alias("wl_tp", "GPUs", "tensor-parallel degree: GPUs the model is split over")


@feature("tp_comm_share", "fraction", "all-reduce time / whole roofline decode step (0 on one GPU)")
def _comm_share(c: Columns) -> np.ndarray:
    return c["comm_s"] / c["roofline_itl_s"]


@feature("tp_comm_latency_share", "ratio", "per-call all-reduce latency of a step (2 per layer) / time to read "
         "the GPU's weight shard once: how latency-bound TP makes a step, independent of batch (0 on one GPU)")
def _comm_latency(c: Columns) -> np.ndarray:
    calls = parallel.ALLREDUCES_PER_LAYER * c["llm_num_layers"] * ops.where(c["wl_tp"] > 1, c["link_latency_s"], 0.0)
    return calls / weight_read_s(c)


@feature("tp_log_link_gb_s", "log(GB/s)", "log of the TP group's link bandwidth per direction (NaN on one GPU)")
def _log_link(c: Columns) -> np.ndarray:
    return ops.where(c["wl_tp"] > 1, ops.log(c["link_gb_s"]), math.nan)


def row_vector(names: Sequence[str], c: dict[str, float]) -> list[float]:
    """The named features of one row (scalar columns from :func:`row_columns`), as floats in order;
    ``np.array(..., dtype=np.float32)`` of it equals the row of :func:`matrix`. Features are memoised
    in ``c`` like :func:`matrix` does. Arithmetic errors (a zero divisor) propagate: the caller falls
    back to the vectorised path, which gives numpy's inf/NaN."""
    names_key = names if type(names) is tuple else tuple(names)
    plan = _PLANS.get(names_key)
    if plan is None:
        plan = _PLANS[names_key] = _plan(names_key)
    out = []
    for key, feat in plan:
        v = c.get(key)
        if v is None:
            v = c[key] = float(feat.fn(c))  # type: ignore[arg-type]
        out.append(v)
    return out


_PLANS: dict[tuple[str, ...], list[tuple[str, Feature]]] = {}  # names -> (memo key, feature); registry entries never change


def _plan(names: Sequence[str]) -> list[tuple[str, Feature]]:
    missing = [n for n in names if n not in REGISTRY]
    if missing:
        raise KeyError(f"unknown feature {missing[0]!r}; known: {sorted(REGISTRY)}")
    return [("feature:" + n, REGISTRY[n]) for n in names]


def matrix(names: Sequence[str], cols: dict[str, np.ndarray]) -> np.ndarray:
    """Stack the named features in order as a float32 matrix [rows, features].

    Each feature's values are memoised in ``cols`` under ``"feature:<name>"``, so models that share
    features (power and ITL) compute them once per call.
    """
    out = np.empty((len(next(iter(cols.values()))), len(names)), dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, n in enumerate(names):
            key = "feature:" + n
            values = cols.get(key)
            if values is None:
                feat = REGISTRY.get(n)
                if feat is None:
                    raise KeyError(f"unknown feature {n!r}; known: {sorted(REGISTRY)}")
                values = cols[key] = feat.fn(cols)
            out[:, j] = values
    return out
