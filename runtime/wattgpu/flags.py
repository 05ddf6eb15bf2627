"""Model flags: warnings every prediction of a MoE, quantised, hybrid/recurrent or sliding-window LLM carries.

They say which physics applies and why the learned part is less certain for such models, whatever
the training domain holds (``domain_warnings`` in the predictor says where the domain ends).
"""
from __future__ import annotations

from typing import Iterator

from .specs import GpuSpec, LlmSpec


def model_flags(llm: LlmSpec, gpu: GpuSpec, context_tokens: int) -> Iterator[str]:
    """One line per property of ``llm`` (and its pairing with ``gpu``) that the user should know."""
    if llm.is_moe:
        yield (f"MoE: {llm.name} routes each token to {llm.experts_per_tok} of {llm.num_experts} experts "
               f"({llm.active_params_b:g}B of {llm.total_params_b:g}B parameters active); decode reads the experts "
               "a batch touches, and few MoE LLMs were measured, so errors are wider")
    if llm.quantized:
        yield (f"quantised: {llm.name} stores weights as {llm.precision} ({llm.weight_bytes_per_param:g} bytes per "
               f"parameter, {llm.compute_dtype} matmuls); memory and roofline use these bytes, and few quantised "
               "checkpoints were measured, so errors are wider")
        from .quant import fp8_warning  # quantised models only: a 16-bit model's prediction never loads quant

        note = fp8_warning(llm, gpu)
        if note:
            yield note
    if llm.arch_class == "hybrid_mamba_transformer":
        yield (f"hybrid/recurrent: {llm.name} mixes state-space (Mamba) and attention layers; only its "
               f"{llm.kv_layers} attention layers hold a KV cache (the constant recurrent state is not counted), "
               "and no hybrid model was measured")
    elif llm.arch_class in ("rnn_rwkv", "ssm_mamba"):
        yield f"recurrent: {llm.name} has no attention layers; WattGPU cannot model it"
    if llm.sliding_window and llm.sliding_window < context_tokens:
        n = llm.kv_layers if llm.sliding_window_layers is None else llm.sliding_window_layers
        yield (f"sliding window: {llm.name} attends to the last {llm.sliding_window} tokens in {n} of its "
               f"{llm.kv_layers} KV layers; memory fit keeps at most {llm.sliding_window} tokens there (an engine "
               "that frees out-of-window blocks, as vLLM's hybrid KV-cache manager does)")
    if llm.kv_lora_rank:
        yield (f"MLA: {llm.name} caches a {llm.kv_lora_rank}+{llm.qk_rope_head_dim}-element latent per layer and "
               "token, not per-head K/V")
