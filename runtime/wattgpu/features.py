"""THE feature definition: named functions of (GPU, LLM, workload) columns, shared by training and runtime.

``columns(rows)`` turns (GpuSpec, LlmSpec, Workload) triples into raw numpy columns; each registered
feature maps those columns to one float64 array; ``matrix(names, cols)`` stacks them in schema order
as float32 (what XGBoost was trained on and what onnxruntime consumes).

The same definitions evaluate on one row of plain floats: ``row_columns(row)`` and
``row_vector(names, c)`` are the scalar path of a single prediction. Every formula here (and in
:mod:`physics`, :mod:`targets`) uses :mod:`ops` or plain arithmetic, so a value is computed by one
piece of code either way and the two paths give bit-identical float32 inputs (tests/test_scalar_path.py
checks every registered feature over the catalog).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import memory, ops, parallel, physics
from .specs import GpuSpec, LlmSpec, MEMORY_TYPES
from .workload import ENGINE_ERAS, ENGINES, ITL_STATS, KINDS, Workload

Columns = dict[str, np.ndarray]

# Ordinal vocabularies (fixed order: codes are part of the trained models' meaning).
MEMORY_TYPE_ORDER = ("LPDDR5", "GDDR5", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e")
SCENARIOS = ("offline", "server_low", "server_high", "closed_loop")
MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi", "phi3", "phi3small", "phimoe", "gpt_neox", "gptj", "gpt2", "gpt_bigcode", "starcoder2",
    "falcon", "mpt", "bloom", "codegen", "stablelm", "olmo2", "olmoe", "granite", "granitemoe", "internlm2",
    "deepseek", "deepseek_v3", "nemotron", "nemotron_h", "gpt_oss", "llama4", "exaone", "cohere", "solar",
)
assert set(MEMORY_TYPE_ORDER) == set(MEMORY_TYPES)


def _code(vocab: Sequence[str], value: str) -> float:
    """Ordinal code of ``value`` in ``vocab``; NaN when unseen (trees route NaN down the learned default)."""
    try:
        return float(vocab.index(value))
    except ValueError:
        return math.nan


def _opt(x: float | None) -> float:
    return math.nan if x is None else float(x)


# Raw per-row columns read from the specs; everything else derives from these.
_GPU_FIELDS = ("tdp_w", "memory_size_gb", "memory_bandwidth_gb_s", "fp16_tflops", "release_year")
_LLM_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size",
               "vocab_size", "total_params_b", "active_params_b", "num_experts", "experts_per_tok",
               "weight_bytes_per_param", "kv_layers")
_WL_FIELDS = ("max_batch", "input_tokens", "output_tokens", "gpu_memory_utilization")


def _gpu_values(g: GpuSpec) -> tuple[float, ...]:
    return (*(float(getattr(g, f)) for f in _GPU_FIELDS), _opt(g.base_clock_mhz), _opt(g.boost_clock_mhz),
            _opt(g.transistors_million), _code(MEMORY_TYPE_ORDER, g.memory_type), _opt(g.fp8_tflops),
            _opt(g.fp4_tflops))


def _llm_values(m: LlmSpec) -> tuple[float, ...]:
    return (*(float(getattr(m, f)) for f in _LLM_FIELDS), _code(MODEL_TYPES, m.model_type),
            float(m.kv_lora_rank), float(m.qk_rope_head_dim), _opt(m.sliding_window), _opt(m.sliding_window_layers),
            float(m.compute_dtype == "fp8"), float(m.compute_dtype == "fp4"))


def _wl_values(w: Workload) -> tuple[float, ...]:
    return (*(float(getattr(w, f)) for f in _WL_FIELDS), _code(KINDS, w.kind), _code(ENGINES, w.engine),
            _code(SCENARIOS, physics.paper_scenario(w.kind, w.qps)), _opt(w.qps), _opt(w.concurrency),
            math.inf if w.num_requests is None else float(w.num_requests), memory.kv_element_bytes(w.kv_cache_dtype),
            _code(ENGINE_ERAS, w.engine_era), _code(ITL_STATS, w.itl_stat))


# Raw column names, in the order the ``_*_values`` functions above return them.
_GPU_KEYS = (*("gpu_" + f for f in _GPU_FIELDS), "gpu_base_clock_mhz", "gpu_boost_clock_mhz",
             "gpu_transistors_million", "gpu_memory_type_code", "gpu_fp8_tflops", "gpu_fp4_tflops")
_LLM_KEYS = (*("llm_" + f for f in _LLM_FIELDS), "llm_model_type_code", "llm_kv_lora_rank", "llm_qk_rope_head_dim",
             "llm_sliding_window", "llm_sliding_window_layers", "llm_fp8_compute", "llm_fp4_compute")
_WL_KEYS = (*("wl_" + f for f in _WL_FIELDS), "wl_kind_code", "wl_engine_code", "wl_scenario_code", "wl_qps",
            "wl_concurrency", "wl_num_requests", "wl_kv_element_bytes", "wl_engine_era_code", "wl_itl_stat_code")


# Tensor-parallel inputs (wattgpu.parallel): the GPU's interconnect and the workload's TP degree.
_GPU_LINK_KEYS = ("gpu_nvlink_gb_s", "gpu_nvlink_group", "gpu_pcie_gen", "gpu_pcie_lanes")
_TP_KEYS = ("wl_tp",)
# The GPU's measured idle power (NaN where the catalog has none): the lower bound of the power model.
_GPU_POWER_KEYS = ("gpu_idle_power_w",)


def _gpu_power_values(g: GpuSpec) -> tuple[float, ...]:
    return (_opt(g.idle_power_w),)


def _gpu_link_values(g: GpuSpec) -> tuple[float, ...]:
    return (_opt(g.nvlink_gb_s), float(g.nvlink_group), _opt(g.pcie_gen), _opt(g.pcie_lanes))


def _tp_values(w: Workload) -> tuple[float, ...]:
    return (float(w.tp),)


def columns(rows: Iterable[tuple[GpuSpec, LlmSpec, Workload]]) -> Columns:
    """Raw numeric columns for a batch of (GPU, LLM, workload) triples.

    Each distinct GPU, LLM and workload object is read once; rows then gather its values by index
    (batches repeat the same few specs, so this avoids per-row attribute reads).
    """
    rows = list(rows)
    out: Columns = {}
    parts: tuple[tuple[int, tuple[str, ...], Callable[[Any], tuple[float, ...]]], ...] = (
        (0, _GPU_KEYS, _gpu_values), (1, _LLM_KEYS, _llm_values), (2, _WL_KEYS, _wl_values),
        (0, _GPU_LINK_KEYS, _gpu_link_values), (2, _TP_KEYS, _tp_values), (0, _GPU_POWER_KEYS, _gpu_power_values))
    for part, keys, values in parts:
        specs = list(map(itemgetter(part), rows))
        ids = list(map(id, specs))
        slot: dict[int, int] = {}
        index = [slot.setdefault(i, len(slot)) for i in ids]  # first-seen order
        by_id = dict(zip(ids, specs))
        distinct = [values(by_id[i]) for i in slot]
        table = np.array(distinct, dtype=np.float64).reshape(len(distinct), len(keys))
        gathered = table.T[:, np.asarray(index, dtype=np.intp)]  # [keys, rows], each row contiguous
        for j, key in enumerate(keys):
            out[key] = gathered[j]
    return derive(out)


def gpu_columns(g: GpuSpec) -> dict[str, float]:
    """The raw columns one GPU contributes to a row, as floats."""
    return {**dict(zip(_GPU_KEYS, _gpu_values(g))), **dict(zip(_GPU_LINK_KEYS, _gpu_link_values(g))),
            **dict(zip(_GPU_POWER_KEYS, _gpu_power_values(g)))}


def llm_columns(m: LlmSpec) -> dict[str, float]:
    """The raw columns one LLM contributes to a row, as floats."""
    return dict(zip(_LLM_KEYS, _llm_values(m)))


def workload_columns(w: Workload) -> dict[str, float]:
    """The raw columns one workload contributes to a row, as floats."""
    return {**dict(zip(_WL_KEYS, _wl_values(w))), **dict(zip(_TP_KEYS, _tp_values(w)))}


def row_columns(row: tuple[GpuSpec, LlmSpec, Workload],
                parts: tuple[dict[str, float], dict[str, float], dict[str, float]] | None = None) -> dict[str, float]:
    """The raw and derived columns of ONE row as plain floats (the scalar twin of :func:`columns`).

    ``parts``: the row's :func:`gpu_columns`, :func:`llm_columns`, :func:`workload_columns` when the
    caller has them already (they are read-only here)."""
    g, m, w = row
    gc, lc, wc = parts if parts is not None else (gpu_columns(g), llm_columns(m), workload_columns(w))
    c = {**gc, **lc, **wc}
    return derive(c)  # type: ignore[arg-type,return-value]


GPU_COLUMN_KEYS = (*_GPU_KEYS, *_GPU_LINK_KEYS)  # the spec-sheet columns of one GPU (its identity for calibration; not idle power)
RAW_KEYS = (*_GPU_KEYS, *_LLM_KEYS, *_WL_KEYS, *_GPU_LINK_KEYS, *_TP_KEYS, *_GPU_POWER_KEYS)
_CLOSED_LOOP_CODES = {"wl_kind_code": _code(KINDS, "closed_loop"), "wl_scenario_code": _code(SCENARIOS, "closed_loop")}


def with_concurrency(cols: Columns, index: np.ndarray, concurrency: np.ndarray, closed_loop: bool) -> Columns:
    """The columns of rows ``index`` at a fixed ``concurrency``, re-derived without building Workloads.

    Equals :func:`columns` of ``replace(w, concurrency=c)`` (and, with ``closed_loop``, also
    ``kind="closed_loop", qps=None``) for each row: only those raw workload columns change."""
    idx = np.asarray(index, dtype=np.intp)
    raw = {k: cols[k][idx] for k in RAW_KEYS}
    raw["wl_concurrency"] = np.asarray(concurrency, dtype=np.float64)
    if closed_loop:
        for k, v in _CLOSED_LOOP_CODES.items():
            raw[k] = np.full(len(idx), v)
        raw["wl_qps"] = np.full(len(idx), math.nan)
    return derive(raw)


def derive(c: Columns) -> Columns:
    """Add the physics-derived columns (in place) and return ``c``.

    Weights, KV cache, FLOPs and memory are per GPU of the tensor-parallel group (``wl_tp`` GPUs;
    :mod:`wattgpu.parallel`); the decode-step time adds the group's all-reduces. With one GPU every
    column is what it was before tensor parallelism existed.
    """
    tp = c["wl_tp"]
    c["weights_bytes"] = parallel.shard(physics.weight_bytes(c["llm_total_params_b"], c["llm_weight_bytes_per_param"]), tp)
    c["active_weights_bytes"] = parallel.shard(physics.weight_bytes(c["llm_active_params_b"], c["llm_weight_bytes_per_param"]), tp)
    # KV split by KV head over the group; an MLA latent cache (kv_lora_rank > 0) has no heads to split and
    # is held whole by every GPU
    kv_share = ops.where(c["llm_kv_lora_rank"] > 0, 1.0, parallel.kv_shard_fraction(c["llm_num_kv_heads"], tp))
    c["kv_per_token"] = memory.kv_bytes_per_token(c["llm_kv_layers"], c["llm_num_kv_heads"], c["llm_head_dim"],
                                                  c["llm_kv_lora_rank"], c["llm_qk_rope_head_dim"],
                                                  c["wl_kv_element_bytes"]) * kv_share
    c["context_tokens"] = c["wl_input_tokens"] + c["wl_output_tokens"]
    c["sliding_fraction"] = memory.sliding_layer_fraction(c["llm_sliding_window"], c["llm_sliding_window_layers"],
                                                          c["llm_kv_layers"])
    c["kv_per_sequence"] = physics.kv_bytes_per_sequence(c["kv_per_token"], c["context_tokens"],
                                                         c["llm_sliding_window"], c["sliding_fraction"])
    c["kv_budget"] = physics.kv_budget_bytes(c["gpu_memory_size_gb"], c["wl_gpu_memory_utilization"], c["weights_bytes"])
    # Sequences that fit: ``fit_sequences`` with sliding-window layers capped at the window (the memory
    # check and max_concurrency); ``fit_batch`` counts full-context KV in every layer, the definition the
    # exported models were trained with (it caps the effective batch, a model input), kept until they
    # are retrained so the training rows' features do not move.
    c["fit_sequences"] = physics.max_batch_that_fits(c["kv_budget"], c["kv_per_sequence"], 1.0)
    c["fit_batch"] = physics.max_batch_that_fits(c["kv_budget"], c["kv_per_token"], c["context_tokens"])
    # Matmul peak for the model's matmul precision (physics.matmul_tflops: FP4 / FP8 rate where the GPU
    # has it, else the 16-bit rate, i.e. weight-only); identical to gpu_fp16_tflops for 16-bit models.
    c["compute_tflops"] = physics.matmul_tflops(c["gpu_fp16_tflops"], c["gpu_fp8_tflops"], c["gpu_fp4_tflops"],
                                                c["llm_fp8_compute"], c["llm_fp4_compute"])
    c["eff_batch"] = physics.effective_batch(c["wl_max_batch"], c["wl_concurrency"], c["wl_num_requests"], c["fit_batch"])
    c["mean_context"] = c["wl_input_tokens"] + 0.5 * c["wl_output_tokens"]
    c["step_bytes"] = physics.decode_step_bytes(c["active_weights_bytes"], c["weights_bytes"], c["eff_batch"],
                                                c["kv_per_token"], c["mean_context"], c["llm_num_experts"],
                                                c["llm_experts_per_tok"])
    c["gpu_active_params_b"] = parallel.shard(c["llm_active_params_b"], tp)  # FLOPs per GPU follow its shard
    c["link_gb_s"], c["link_latency_s"], c["link_is_nvlink"] = parallel.link(
        tp, c["gpu_nvlink_gb_s"], c["gpu_nvlink_group"], c["gpu_pcie_gen"], c["gpu_pcie_lanes"])
    c["comm_s"] = parallel.comm_step_s(c["llm_num_layers"], c["eff_batch"], c["llm_hidden_size"], tp,
                                       c["link_gb_s"], c["link_latency_s"])
    gpu_s = physics.roofline_step_s(c["step_bytes"], c["eff_batch"], c["gpu_active_params_b"],
                                    c["gpu_memory_bandwidth_gb_s"], c["compute_tflops"])
    c["roofline_itl_s"] = gpu_s + c["comm_s"]
    # busy share of a step: all-reduce kernels keep the SMs and links busy (they spin and reduce), so the
    # all-reduce time counts as busy; only the per-layer engine overhead does not
    c["step_overhead_s"] = c["llm_num_layers"] * _layer_overhead_s(c["wl_engine_code"])  # > 0: engine time per step
    c["roofline_duty"] = physics.roofline_duty(c["roofline_itl_s"], c["llm_num_layers"], _layer_overhead_s(c["wl_engine_code"]))
    c["duty_power_w"] = physics.duty_power_w(c["gpu_tdp_w"], c["roofline_duty"])
    c["idle_power_w"] = physics.idle_power_w(c["gpu_idle_power_w"], c["gpu_tdp_w"])  # the power model's floor
    # roofline + per-layer engine overhead: a decode step's physical time (monotone in batch and context)
    c["step_time_s"] = c["roofline_itl_s"] / c["roofline_duty"]
    return c


_OVERHEAD_BY_CODE = np.array([physics.LAYER_OVERHEAD_S.get(e, physics.LAYER_OVERHEAD_DEFAULT_S) for e in ENGINES])


def _layer_overhead_s(engine_code: np.ndarray) -> np.ndarray:
    """Per-layer step overhead of each row's engine (default figure for an unknown engine)."""
    if isinstance(engine_code, float):
        return physics.LAYER_OVERHEAD_DEFAULT_S if engine_code != engine_code else float(_OVERHEAD_BY_CODE[int(engine_code)])
    code = np.asarray(engine_code, dtype=np.float64)
    ok = np.isfinite(code)
    out = np.full(code.shape, physics.LAYER_OVERHEAD_DEFAULT_S)
    out[ok] = _OVERHEAD_BY_CODE[code[ok].astype(np.intp)]
    return out


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


def _alias(name: str, column: str, unit: str, description: str) -> None:
    def column_of(c: Columns) -> np.ndarray:
        return c[column]

    feature(name, unit, description)(column_of)


# --- GPU spec-sheet features
_alias("gpu_tdp_w", "gpu_tdp_w", "W", "board power limit (TDP)")
_alias("gpu_mem_bw_gb_s", "gpu_memory_bandwidth_gb_s", "GB/s", "peak DRAM bandwidth")
_alias("gpu_mem_gb", "gpu_memory_size_gb", "GB", "GPU memory capacity")
_alias("gpu_fp16_tflops", "gpu_fp16_tflops", "TFLOPS", "dense FP16 tensor peak")
_alias("gpu_release_year", "gpu_release_year", "year", "launch year")
_alias("gpu_base_clock_mhz", "gpu_base_clock_mhz", "MHz", "base graphics clock (NaN if unpublished)")
_alias("gpu_mem_type_code", "gpu_memory_type_code", "ordinal", f"memory type in order {MEMORY_TYPE_ORDER}")
_alias("gpu_transistors_million", "gpu_transistors_million", "million", "transistor count (NaN if unpublished)")


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
_alias("llm_params_b", "llm_total_params_b", "1e9", "total parameters")
_alias("llm_active_params_b", "llm_active_params_b", "1e9", "parameters used per token (MoE: top-k experts)")
_alias("llm_layers", "llm_num_layers", "count", "hidden layers")
_alias("llm_hidden", "llm_hidden_size", "count", "hidden size")
_alias("llm_heads", "llm_num_attention_heads", "count", "attention heads")
_alias("llm_kv_heads", "llm_num_kv_heads", "count", "KV heads (GQA)")
_alias("llm_model_type_code", "llm_model_type_code", "ordinal", "config model_type (NaN if unseen)")


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
_alias("wl_kind_code", "wl_kind_code", "ordinal", f"workload kind in order {KINDS}")
_alias("wl_engine_code", "wl_engine_code", "ordinal", f"engine in order {ENGINES}")
_alias("wl_scenario_code", "wl_scenario_code", "ordinal", f"paper scenario in order {SCENARIOS}")
_alias("wl_max_batch", "wl_max_batch", "sequences", "engine batch cap (max_num_seqs)")
_alias("wl_input_tokens", "wl_input_tokens", "tokens", "mean prompt length")
_alias("wl_output_tokens", "wl_output_tokens", "tokens", "mean generated length")


_alias("wl_engine_era_code", "wl_engine_era_code", "ordinal", f"serving-stack era in order {ENGINE_ERAS}")
_alias("wl_itl_stat_code", "wl_itl_stat_code", "ordinal", f"ITL statistic in order {ITL_STATS}")


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


def _weight_read_s(c: Columns) -> np.ndarray:
    """Time to read the GPU's active weights once at peak bandwidth (s)."""
    return c["active_weights_bytes"] / (c["gpu_memory_bandwidth_gb_s"] * 1e9)


def _flop_s(c: Columns) -> np.ndarray:
    """FLOP time of one decode step of the effective batch at the GPU's matmul peak for the model's precision
    (``compute_tflops``: the FP16 peak for 16-bit and weight-only models) (s)."""
    return 2.0 * c["gpu_active_params_b"] * 1e9 * c["eff_batch"] / (c["compute_tflops"] * 1e12)


@feature("roofline_compute_share", "ratio", "FLOP time / memory time of one decode step (>1: compute-bound)")
def _cshare(c: Columns) -> np.ndarray:
    t_mem = c["step_bytes"] / (c["gpu_memory_bandwidth_gb_s"] * 1e9)
    return _flop_s(c) / t_mem


@feature("log_roofline_tok_s_per_w", "log(tok/s/W)", "log roofline throughput per watt of TDP")
def _tok_per_w(c: Columns) -> np.ndarray:
    return ops.log(c["eff_batch"] / c["roofline_itl_s"] / c["gpu_tdp_w"])


weight_read_s = _weight_read_s  # public: the ITL floor of wattgpu.calibration


@feature("log_weight_read_s", "log(s)", "log of the time to read the active weights once at peak bandwidth "
         "(GPU x LLM speed, independent of batch and context)")
def _log_wread(c: Columns) -> np.ndarray:
    return ops.log(_weight_read_s(c))


@feature("log_overhead_share", "log(ratio)", "log of (layers x engine per-layer overhead) / weight-read time: "
         "how launch-bound a decode step is at batch 1 (independent of batch and context)")
def _log_ovh(c: Columns) -> np.ndarray:
    return ops.log(c["llm_num_layers"] * _layer_overhead_s(c["wl_engine_code"]) / _weight_read_s(c))


@feature("weights_compute_share", "ratio", "FLOP time of a decode step / time to read the weights once: grows "
         "with the batch, independent of context")
def _wshare(c: Columns) -> np.ndarray:
    return _flop_s(c) / _weight_read_s(c)


@feature("roofline_duty", "fraction", "roofline step time / (roofline + per-layer engine overhead): busy share of a step")
def _duty(c: Columns) -> np.ndarray:
    return c["roofline_duty"]


# --- tensor-parallel features (1 and 0 on single-GPU rows)
_alias("wl_tp", "wl_tp", "GPUs", "tensor-parallel degree: GPUs the model is split over")


@feature("tp_comm_share", "fraction", "all-reduce time / whole roofline decode step (0 on one GPU)")
def _comm_share(c: Columns) -> np.ndarray:
    return c["comm_s"] / c["roofline_itl_s"]


@feature("tp_comm_latency_share", "ratio", "per-call all-reduce latency of a step (2 per layer) / time to read "
         "the GPU's weight shard once: how latency-bound TP makes a step, independent of batch (0 on one GPU)")
def _comm_latency(c: Columns) -> np.ndarray:
    calls = parallel.ALLREDUCES_PER_LAYER * c["llm_num_layers"] * ops.where(c["wl_tp"] > 1, c["link_latency_s"], 0.0)
    return calls / _weight_read_s(c)


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
