"""The physics pipeline: ``derive(columns)`` adds the derived columns (weights, KV cache, memory fit, effective
batch, roofline step time, tensor-parallel links, duty and power floor) to the raw columns of
:mod:`wattgpu.raw_columns`.

Every formula uses :mod:`wattgpu.ops` or plain arithmetic, so it runs unchanged on numpy columns (a batch)
and on a dict of floats (one row, the scalar path) and gives the same bits either way.
"""
from __future__ import annotations

import numpy as np

from . import memory, ops, parallel, physics
from .workload import ENGINES

Columns = dict[str, np.ndarray]


def derive(c: Columns) -> Columns:
    """Add the physics-derived columns (in place) and return ``c``.

    Weights, KV cache, FLOPs and memory are per GPU of the tensor-parallel group (``wl_tp`` GPUs;
    :mod:`wattgpu.parallel`); the decode-step time adds the group's all-reduces. With one GPU every
    column is what it was before tensor parallelism existed.
    """
    return derive_load(derive_setup(c))


# The columns derive_setup writes: they depend on the specs and the engine set-up, not on the load
# (concurrency, request count, kind), so a row re-derived at another concurrency keeps them.
SETUP_COLUMNS = ("weights_bytes", "active_weights_bytes", "kv_per_token", "context_tokens", "sliding_fraction",
                 "kv_per_sequence", "kv_budget", "fit_sequences", "fit_batch", "compute_tflops", "mean_context",
                 "gpu_active_params_b", "link_gb_s", "link_latency_s", "link_is_nvlink", "step_overhead_s",
                 "idle_power_w")


def derive_setup(c: Columns) -> Columns:
    """The load-free part of :func:`derive` (:data:`SETUP_COLUMNS`, in place)."""
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
    c["mean_context"] = c["wl_input_tokens"] + 0.5 * c["wl_output_tokens"]
    c["gpu_active_params_b"] = parallel.shard(c["llm_active_params_b"], tp)  # FLOPs per GPU follow its shard
    c["link_gb_s"], c["link_latency_s"], c["link_is_nvlink"] = parallel.link(
        tp, c["gpu_nvlink_gb_s"], c["gpu_nvlink_group"], c["gpu_pcie_gen"], c["gpu_pcie_lanes"])
    c["step_overhead_s"] = c["llm_num_layers"] * layer_overhead_s(c["wl_engine_code"])  # > 0: engine time per step
    c["idle_power_w"] = physics.idle_power_w(c["gpu_idle_power_w"], c["gpu_tdp_w"])  # the power model's floor
    return c


def derive_load(c: Columns) -> Columns:
    """The part of :func:`derive` that depends on the load (effective batch onward), on columns that
    already hold :data:`SETUP_COLUMNS`; in place."""
    tp = c["wl_tp"]
    c["eff_batch"] = physics.effective_batch(c["wl_max_batch"], c["wl_concurrency"], c["wl_num_requests"], c["fit_batch"])
    c["step_bytes"] = physics.decode_step_bytes(c["active_weights_bytes"], c["weights_bytes"], c["eff_batch"],
                                                c["kv_per_token"], c["mean_context"], c["llm_num_experts"],
                                                c["llm_experts_per_tok"])
    c["comm_s"] = parallel.comm_step_s(c["llm_num_layers"], c["eff_batch"], c["llm_hidden_size"], tp,
                                       c["link_gb_s"], c["link_latency_s"])
    gpu_s = physics.roofline_step_s(c["step_bytes"], c["eff_batch"], c["gpu_active_params_b"],
                                    c["gpu_memory_bandwidth_gb_s"], c["compute_tflops"])
    c["roofline_itl_s"] = gpu_s + c["comm_s"]
    # busy share of a step: all-reduce kernels keep the SMs and links busy (they spin and reduce), so the
    # all-reduce time counts as busy; only the per-layer engine overhead does not
    c["roofline_duty"] = physics.roofline_duty(c["roofline_itl_s"], c["llm_num_layers"], layer_overhead_s(c["wl_engine_code"]))
    c["duty_power_w"] = physics.duty_power_w(c["gpu_tdp_w"], c["roofline_duty"])
    # roofline + per-layer engine overhead: a decode step's physical time (monotone in batch and context)
    c["step_time_s"] = c["roofline_itl_s"] / c["roofline_duty"]
    return c


_OVERHEAD_BY_CODE = np.array([physics.LAYER_OVERHEAD_S.get(e, physics.LAYER_OVERHEAD_DEFAULT_S) for e in ENGINES])


def layer_overhead_s(engine_code: np.ndarray) -> np.ndarray:
    """Per-layer step overhead of each row's engine (default figure for an unknown engine)."""
    if isinstance(engine_code, float):
        return physics.LAYER_OVERHEAD_DEFAULT_S if engine_code != engine_code else float(_OVERHEAD_BY_CODE[int(engine_code)])
    code = np.asarray(engine_code, dtype=np.float64)
    ok = np.isfinite(code)
    out = np.full(code.shape, physics.LAYER_OVERHEAD_DEFAULT_S)
    out[ok] = _OVERHEAD_BY_CODE[code[ok].astype(np.intp)]
    return out


def weight_read_s(c: Columns) -> np.ndarray:
    """Time to read the GPU's active weights once at peak bandwidth (s): the ITL floor (also of
    :mod:`wattgpu.calibration`)."""
    return c["active_weights_bytes"] / (c["gpu_memory_bandwidth_gb_s"] * 1e9)


def flop_s(c: Columns) -> np.ndarray:
    """FLOP time of one decode step of the effective batch at the GPU's matmul peak for the model's precision
    (``compute_tflops``: the FP16 peak for 16-bit and weight-only models) (s)."""
    return 2.0 * c["gpu_active_params_b"] * 1e9 * c["eff_batch"] / (c["compute_tflops"] * 1e12)
