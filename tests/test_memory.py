"""KV-cache bytes per token and per sequence, hand-computed per architecture, from configs and the catalog."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wattgpu import memory
from wattgpu.errors import SpecValidationError
from wattgpu.hfconfig import llm_from_hf_config
from wattgpu.predictor import Predictor
from wattgpu.specs import default_catalog
from wattgpu.workload import Workload

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"


def _fixture(stem: str):
    data = json.loads((FIXTURES / f"{stem}.json").read_text())
    return llm_from_hf_config(data.get("config", data), name=stem)


def _gpt_oss_20b():
    """gpt-oss-20b: the 120b config (same family, in fixtures) with the 20b geometry. Facts: 24 layers
    alternating sliding_attention / full_attention (even layers slide), sliding_window 128, 64 query
    heads, 8 KV heads, head_dim 64, hidden 2880, 32 experts, 4 per token. Source: openai/gpt-oss-20b
    config.json as transcribed in github:EchoCog/gpt-oss-20b docs/gpt-oss-20b-architecture.md and
    github:ParagEkbote/hf-model-inspector model_inspection_report.md (found with the search tool)."""
    cfg = json.loads((FIXTURES / "openai--gpt-oss-120b.json").read_text())
    cfg = dict(cfg.get("config", cfg))
    cfg.update(num_hidden_layers=24, num_local_experts=32, num_experts_per_tok=4, experts_per_token=4,
               layer_types=["sliding_attention", "full_attention"] * 12, sliding_window=128,
               num_attention_heads=64, num_key_value_heads=8, head_dim=64, hidden_size=2880)
    return llm_from_hf_config(cfg, name="openai/gpt-oss-20b")


# Hand computation (bytes per token, 16-bit cache = 2 bytes per element):
#   Llama-3.1-8B   2 (K,V) × 32 layers × 8 KV heads × 128 head_dim × 2 B        = 131,072
#   Gemma-2-9B     2 × 42 layers × 8 KV heads × 256 (explicit head_dim) × 2 B      = 344,064
#   DeepSeek-V3    MLA latent (512 kv_lora_rank + 64 qk_rope_head_dim) × 61 × 2 B = 70,272
#   Qwen3-30B-A3B  2 × 48 layers × 4 KV heads × 128 (explicit head_dim) × 2 B      = 98,304
#   gpt-oss-20b    2 × 24 layers × 8 KV heads × 64 head_dim × 2 B                  = 49,152
PER_TOKEN = {
    "meta-llama--Meta-Llama-3-8B": 131_072,
    "google--gemma-2-9b-it": 344_064,
    "deepseek-ai--DeepSeek-V3.1": 70_272,
    "Qwen--Qwen3-30B-A3B-Instruct-2507": 98_304,
}


@pytest.mark.parametrize("stem,expected", sorted(PER_TOKEN.items()))
def test_kv_bytes_per_token_from_config(stem: str, expected: int) -> None:
    assert memory.llm_kv_bytes_per_token(_fixture(stem)) == expected
    assert memory.llm_kv_bytes_per_token(_fixture(stem), "fp8") == expected / 2


def test_gpt_oss_20b_sliding_alternate_layers() -> None:
    m = _gpt_oss_20b()
    assert (m.kv_layers, m.sliding_window, m.sliding_window_layers) == (24, 128, 12)
    assert memory.llm_kv_bytes_per_token(m) == 49_152
    # 8192-token sequence: 12 full layers keep 8192 tokens, 12 sliding layers keep 128; 2,048 B per layer-token
    assert memory.llm_kv_bytes_per_sequence(m, 8192) == 12 * 2048 * 8192 + 12 * 2048 * 128 == 204_472_320
    assert memory.llm_kv_bytes_per_sequence(m, 100) == 49_152 * 100  # shorter than the window: no saving


def test_gemma2_sliding_half_the_layers() -> None:
    m = _fixture("google--gemma-2-9b-it")
    assert (m.sliding_window, m.sliding_window_layers) == (4096, 21)
    # 21 global layers hold 8192 tokens, 21 sliding layers 4096; 8,192 B per layer-token
    assert memory.llm_kv_bytes_per_sequence(m, 8192) == 21 * 8192 * 8192 + 21 * 8192 * 4096 == 2_113_929_216


def test_mla_config_fields() -> None:
    m = _fixture("deepseek-ai--DeepSeek-V3.1")
    assert (m.kv_lora_rank, m.qk_rope_head_dim, m.kv_layers) == (512, 64, 61)
    full_mha = 2 * 61 * m.num_kv_heads * m.head_dim * 2  # what the old formula counted
    assert full_mha / memory.llm_kv_bytes_per_token(m) > 20


@pytest.mark.parametrize("name,expected", [
    ("meta-llama/Llama-3.1-8B-Instruct", 131_072), ("google/gemma-2-9b-it", 344_064),
    ("deepseek-ai/DeepSeek-V3.1", 70_272), ("Qwen/Qwen3-30B-A3B-Instruct-2507", 98_304),
    ("openai/gpt-oss-20b", 49_152)])
def test_catalog_kv_bytes_per_token(name: str, expected: int) -> None:
    assert memory.llm_kv_bytes_per_token(default_catalog().llm(name)) == expected


def test_catalog_sliding_layers() -> None:
    cat = default_catalog()
    assert cat.llm("google/gemma-2-9b-it").sliding_window_layers == 21
    assert cat.llm("openai/gpt-oss-20b").sliding_window_layers == 12
    assert cat.llm("google/gemma-3-27b-it").sliding_window_layers == 62 - 62 // 6
    assert cat.llm("mistralai/Mistral-7B-Instruct-v0.3").sliding_window is None


def test_max_concurrency_follows_the_kv_formula() -> None:
    """max_concurrency = floor((usable memory − weights − reserve) / KV bytes of one full-context sequence)."""
    pred = Predictor()
    gpu = pred.resolve_gpu("NVIDIA H100 SXM5 80GB")
    for name in ("meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it", "openai/gpt-oss-20b"):
        llm = pred.resolve_llm(name)
        for ctx_in, dtype in ((512, "auto"), (8000, "auto"), (8000, "fp8")):
            wl = Workload(input_tokens=ctx_in, output_tokens=256, kv_cache_dtype=dtype)
            p = pred.predict(gpu, llm, wl)
            gib = gpu.memory_size_gb * 2**30  # a GPU's memory "GB" is binary
            budget = gib * 0.9 - llm.total_params_b * 1e9 * llm.weight_bytes_per_param - 0.05 * gib
            seq = memory.llm_kv_bytes_per_sequence(llm, ctx_in + 256, dtype)
            assert p.max_concurrency == int(budget // seq), (name, ctx_in, dtype)


def test_kv_cache_dtype_is_validated() -> None:
    with pytest.raises(SpecValidationError, match="kv_cache_dtype"):
        Workload(kv_cache_dtype="fp4")
    with pytest.raises(SpecValidationError, match="kv_cache_dtype"):
        memory.kv_element_bytes("int2")
