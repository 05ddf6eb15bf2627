"""Model flags: MoE, quantised, hybrid/recurrent and sliding-window LLMs each carry their warning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wattgpu.errors import UnsupportedModelError
from wattgpu.hfconfig import load_llm_file
from wattgpu.predictor import Predictor
from wattgpu.workload import Workload

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
GPU = "NVIDIA H100 SXM5 80GB"


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


def _warnings(pred: Predictor, llm, wl: Workload | None = None, gpu: str = GPU) -> list[str]:
    return list(pred.predict(gpu, llm, wl or Workload()).warnings)


def test_moe_flag(pred: Predictor) -> None:
    w = _warnings(pred, "Qwen/Qwen3-30B-A3B-Instruct-2507")
    assert any(x.startswith("MoE:") and "8 of 128 experts" in x for x in w)
    assert not any(x.startswith("MoE:") for x in _warnings(pred, "meta-llama/Llama-3.1-8B-Instruct"))


def test_quantised_flag(pred: Predictor) -> None:
    w = _warnings(pred, "openai/gpt-oss-20b")
    assert any(x.startswith("quantised:") and "mxfp4" in x for x in w)
    assert not any(x.startswith("quantised:") for x in _warnings(pred, "meta-llama/Llama-3.1-8B-Instruct"))


def test_hybrid_flag(pred: Predictor, tmp_path: Path) -> None:
    llm = load_llm_file(FIXTURES / "nvidia--NVIDIA-Nemotron-Nano-9B-v2.json")
    assert llm.arch_class == "hybrid_mamba_transformer"
    w = _warnings(pred, llm)
    assert any(x.startswith("hybrid/recurrent:") and f"{llm.kv_layers} attention layers" in x for x in w)


def test_recurrent_models_are_refused_by_name(pred: Predictor) -> None:
    llm = load_llm_file(FIXTURES / "RWKV--rwkv-raven-7b.json")
    with pytest.raises(UnsupportedModelError, match="recurrent"):
        pred.predict(GPU, llm)


def test_sliding_window_flag(pred: Predictor) -> None:
    long = Workload(input_tokens=6000, output_tokens=256)
    w = _warnings(pred, "google/gemma-2-9b-it", long)
    assert any(x.startswith("sliding window:") and "4096 tokens in 21 of its 42" in x for x in w)
    # within the window the window changes nothing, so there is nothing to say
    assert not any(x.startswith("sliding window:") for x in _warnings(pred, "google/gemma-2-9b-it"))


def test_mla_flag_and_fp8_weight_only_note(pred: Predictor) -> None:
    cfg = json.loads((FIXTURES / "deepseek-ai--DeepSeek-V3.1.json").read_text())
    from wattgpu.flags import model_flags
    from wattgpu.hfconfig import llm_from_hf_config

    llm = llm_from_hf_config(cfg.get("config", cfg), "deepseek-ai/DeepSeek-V3.1")
    a100 = pred.resolve_gpu("NVIDIA A100 SXM4 80GB")
    flags = list(model_flags(llm, a100, 1024))
    assert any(x.startswith("MLA:") for x in flags)
    assert any("no FP8 tensor cores" in x for x in flags) == (llm.compute_dtype == "fp8")
