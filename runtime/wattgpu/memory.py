"""KV-cache memory per architecture: bytes per token and per sequence, vectorised over rows.

What one token leaves in the cache, per attention layer that keeps one:

- standard / GQA / MQA attention: K and V of every KV head, ``2 × num_kv_heads × head_dim`` elements
  (``head_dim`` explicit when the config gives it, e.g. Gemma, Qwen3, gpt-oss);
- DeepSeek multi-head latent attention (MLA): one compressed latent of ``kv_lora_rank`` elements plus
  the decoupled RoPE key of ``qk_rope_head_dim`` elements, shared by all heads (vLLM caches exactly
  this latent, not the up-projected per-head K/V);
- layers without attention (Mamba blocks of a hybrid) keep nothing: ``kv_layers`` counts only the
  attention layers.

Sliding-window layers (Mistral: every layer; Gemma 2 and gpt-oss: every other; Gemma 3: five of six)
keep at most ``sliding_window`` tokens; the remaining layers keep the whole context. This assumes an
engine that frees out-of-window blocks (vLLM's hybrid KV-cache manager); an engine that allocates the
full context for every layer needs the full-context figure, which ``kv_bytes_per_token`` gives.

Element size: ``kv_cache_dtype`` ``auto`` = 16-bit (vLLM stores the cache in the model's activation
dtype, bf16/fp16, also for FP8 and int4 checkpoints), ``fp8`` = 1 byte.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import ops, physics
from .errors import SpecValidationError

KV_CACHE_DTYPES = {"auto": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


def kv_element_bytes(kv_cache_dtype: str) -> float:
    """Bytes of one cached element for an engine ``kv_cache_dtype`` (``auto`` or ``fp8``)."""
    try:
        return KV_CACHE_DTYPES[kv_cache_dtype]
    except (KeyError, TypeError):
        raise SpecValidationError("workload", "kv_cache_dtype", kv_cache_dtype,
                                  "auto (16-bit cache) or fp8") from None


def kv_elements_per_layer(num_kv_heads: Any, head_dim: Any, kv_lora_rank: Any, qk_rope_head_dim: Any) -> np.ndarray:
    """Cached elements per token in one attention layer: MLA latent + RoPE key, else K and V of each KV head."""
    mla = ops.asarray(kv_lora_rank)
    std = 2.0 * ops.asarray(num_kv_heads) * ops.asarray(head_dim)
    return ops.where(mla > 0, mla + ops.asarray(qk_rope_head_dim), std)


def kv_bytes_per_token(kv_layers: Any, num_kv_heads: Any, head_dim: Any, kv_lora_rank: Any = 0.0,
                       qk_rope_head_dim: Any = 0.0, element_bytes: Any = 2.0) -> np.ndarray:
    """KV-cache bytes one token occupies in every attention layer (full-context, no window applied)."""
    return (ops.asarray(kv_layers)
            * kv_elements_per_layer(num_kv_heads, head_dim, kv_lora_rank, qk_rope_head_dim)
            * ops.asarray(element_bytes))


def sliding_layer_fraction(sliding_window: Any, sliding_layers: Any, kv_layers: Any) -> np.ndarray:
    """Share of KV layers that slide: 0 without a window, ``sliding_layers / kv_layers`` (NaN layers = all)."""
    win = ops.asarray(sliding_window)
    n = ops.asarray(sliding_layers)
    layers = ops.maximum(ops.asarray(kv_layers), 1.0)
    frac = ops.where(ops.isnan(n), 1.0, ops.clip(n / layers, 0.0, 1.0))
    return ops.where(ops.isnan(win), 0.0, frac)


def llm_kv_bytes_per_token(llm: Any, kv_cache_dtype: str = "auto") -> float:
    """Full-context KV bytes per token of an :class:`~wattgpu.specs.LlmSpec` (all attention layers)."""
    return float(kv_bytes_per_token(llm.kv_layers, llm.num_kv_heads, llm.head_dim, llm.kv_lora_rank,
                                    llm.qk_rope_head_dim, kv_element_bytes(kv_cache_dtype)))


def llm_kv_bytes_per_sequence(llm: Any, context_tokens: int, kv_cache_dtype: str = "auto") -> float:
    """KV bytes one sequence of ``context_tokens`` holds, sliding-window layers capped at the window."""
    win = np.nan if llm.sliding_window is None else float(llm.sliding_window)
    frac = sliding_layer_fraction(win, np.nan if llm.sliding_window_layers is None else llm.sliding_window_layers,
                                  llm.kv_layers)
    per_tok = np.asarray(llm_kv_bytes_per_token(llm, kv_cache_dtype))
    return float(physics.kv_bytes_per_sequence(per_tok, np.asarray(float(context_tokens)), np.asarray(win), frac))
