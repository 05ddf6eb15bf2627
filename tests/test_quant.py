"""Quantisation: quantization_config → weight bytes and matmul dtype; FP8 roofline vs its BF16 twin; --dtype."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from wattgpu import features as F
from wattgpu.cli import main
from wattgpu.errors import SpecValidationError, WattGPUError
from wattgpu.hfconfig import llm_from_hf_config
from wattgpu.quant import parse_quantization, with_dtype
from wattgpu.specs import default_catalog
from wattgpu.workload import Workload

CT_FP8 = {"quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"},
                                        "input_activations": {"num_bits": 8, "type": "float"}}}}
CT_W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}
CT_W8A8_INT = {"quant_method": "compressed-tensors", "format": "int-quantized",
               "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"},
                                             "input_activations": {"num_bits": 8, "type": "int"}}}}


@pytest.mark.parametrize("q,precision,nbytes,compute", [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8", 1.0, "fp8"),
    ({"quant_method": "fbgemm_fp8"}, "fp8", 1.0, "fp8"),
    (CT_FP8, "fp8", 1.0, "fp8"),
    (CT_W4A16, "int4", 0.55, "bfloat16"),
    (CT_W8A8_INT, "int8", 1.0, "int8"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, "int4", 0.55, "bfloat16"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4", 0.55, "bfloat16"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8", 1.0, "bfloat16"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8", 1.0, "bfloat16"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "int4", 0.55, "bfloat16"),
    ({"quant_method": "mxfp4"}, "mxfp4", 0.55, "bfloat16"),
])
def test_quantization_config(q, precision, nbytes, compute) -> None:
    got = parse_quantization(q, "bfloat16", 2.0, "LLM 'x'")
    assert (got.precision, got.weight_bytes_per_param, got.compute_dtype, got.quantized) == (precision, nbytes, compute, True)


def test_unquantised_and_bad_config() -> None:
    got = parse_quantization(None, "float16", 2.0, "LLM 'x'")
    assert (got.precision, got.weight_bytes_per_param, got.compute_dtype, got.quantized) == ("float16", 2.0, "float16", False)
    with pytest.raises(SpecValidationError, match="quantization_config"):
        parse_quantization([1], "bfloat16", 2.0, "LLM 'x'")


def test_config_json_quantisation_reaches_the_spec() -> None:
    base = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
    awq = llm_from_hf_config({**base, "quantization_config": {"quant_method": "awq", "bits": 4}}, "awq-8b")
    fp8 = llm_from_hf_config({**base, "quantization_config": CT_FP8}, "fp8-8b")
    assert (awq.precision, awq.weight_bytes_per_param, awq.compute_dtype, awq.quantized) == ("int4", 0.55, "bfloat16", True)
    assert (fp8.precision, fp8.weight_bytes_per_param, fp8.compute_dtype) == ("fp8", 1.0, "fp8")


def test_catalog_fp8_checkpoints_say_fp8() -> None:
    fp8 = [m for m in default_catalog().llms if m.name.endswith("-FP8") or m.name.startswith("deepseek-ai/DeepSeek-")
           and m.model_type == "deepseek_v3"]
    assert len(fp8) >= 6
    for m in fp8:
        assert (m.precision, m.compute_dtype, m.weight_bytes_per_param, m.quantized) == ("fp8", "fp8", 1.0, True), m.name


def _roofline(gpu, llm, batch: int) -> float:
    """Roofline decode step at exactly ``batch`` sequences (whether or not that many fit, so twins compare
    at the same batch), from the same columns and physics the features use."""
    from wattgpu import physics

    c = F.columns([(gpu, llm, Workload(max_batch=batch))])
    step = physics.decode_step_bytes(c["active_weights_bytes"], c["weights_bytes"], batch, c["kv_per_token"],
                                     c["mean_context"], c["llm_num_experts"], c["llm_experts_per_tok"])
    return float(physics.roofline_step_s(step, batch, c["llm_active_params_b"], c["gpu_memory_bandwidth_gb_s"],
                                         c["compute_tflops"])[0])


def test_fp8_roofline_never_slower_than_bf16_twin() -> None:
    cat = default_catalog()
    twins = [(cat.llm("meta-llama/Llama-3.1-405B-Instruct"), cat.llm("meta-llama/Llama-3.1-405B-Instruct-FP8")),
             (cat.llm("Qwen/Qwen3-235B-A22B-Instruct-2507"), cat.llm("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"))]
    llama8 = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    twins.append((llama8, with_dtype(llama8, "fp8")))
    fp8_gpus = [g for g in cat.gpus if g.fp8_tflops is not None]
    assert fp8_gpus, "the catalog has GPUs with FP8 tensor cores"
    checked = 0
    for g in fp8_gpus:
        for bf16, fp8 in twins:
            for batch in (1, 16, 256):
                assert _roofline(g, fp8, batch) <= _roofline(g, bf16, batch), (g.name, fp8.name, batch)
                checked += 1
    assert checked == len(fp8_gpus) * len(twins) * 3


def test_fp8_on_gpu_without_fp8_is_weight_only_and_says_so() -> None:
    from wattgpu.predictor import Predictor

    pred = Predictor()
    cat = pred.catalog
    old = next(g for g in cat.gpus if g.fp8_tflops is None and g.memory_size_gb >= 40)
    llm = with_dtype(cat.llm("meta-llama/Llama-3.1-8B-Instruct"), "fp8")
    p = pred.predict(old, llm)
    assert any("no FP8 tensor cores" in w and "weight-only" in w for w in p.warnings)
    cols = F.columns([(old, llm, Workload())])
    assert cols["compute_tflops"][0] == old.fp16_tflops


def test_dtype_override_and_errors() -> None:
    llm = default_catalog().llm("meta-llama/Llama-3.1-8B-Instruct")
    assert with_dtype(llm, "auto") is llm and with_dtype(llm, None) is llm
    q = with_dtype(llm, "int4")
    assert (q.weight_bytes_per_param, q.compute_dtype, q.quantized) == (0.55, "bfloat16", True)
    with pytest.raises(WattGPUError, match="dtype"):
        with_dtype(llm, "int3")
    r = CliRunner().invoke(main, ["predict", "--llm", llm.name, "--gpu", "H100 SXM", "--dtype", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    assert any("quantised" in w for w in json.loads(r.stdout)["warnings"])
    r = CliRunner().invoke(main, ["predict", "--llm", llm.name, "--gpu", "H100 SXM", "--dtype", "fp6"])
    assert r.exit_code == 2 and "dtype" in r.output and len(r.output.strip().splitlines()) == 1
