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
CT_NVFP4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"],
                                          "weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                          "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}}}}
CT_NVFP4A16 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
               "config_groups": {"group_0": {"targets": ["Linear"],
                                             "weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}
# ModelOpt's config.json form (quant_method modelopt + quant_algo), as NVIDIA's NVFP4 checkpoints write it
MODELOPT_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
CT_W8A8_INT = {"quant_method": "compressed-tensors", "format": "int-quantized",
               "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"},
                                             "input_activations": {"num_bits": 8, "type": "int"}}}}


@pytest.mark.parametrize("q,precision,nbytes,compute", [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8", 1.0, "fp8"),
    ({"quant_method": "fbgemm_fp8"}, "fp8", 1.0, "fp8"),
    (CT_FP8, "fp8", 1.0, "fp8"),
    (CT_W4A16, "int4", 0.5 + 2 / 128, "bfloat16"),  # 4 bits + a 16-bit scale per group of 128
    (CT_W8A8_INT, "int8", 1.0, "int8"),
    # AWQ stores a 4-bit zero point per group too (zero_point defaults to true)
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, "int4", 0.5 + 2.5 / 128, "bfloat16"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4", 0.5 + 2 / 128, "bfloat16"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8", 1.0, "bfloat16"),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8", 1.0, "bfloat16"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "int4", 0.5 + 4 / 64,
     "bfloat16"),
    ({"quant_method": "mxfp4"}, "mxfp4", 4.25 / 8, "bfloat16"),
    (MODELOPT_NVFP4, "nvfp4", 4.5 / 8, "fp4"),  # E2M1 + one FP8 E4M3 scale per 16 weights
    ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}}, "nvfp4", 4.5 / 8,
     "fp4"),  # the hf_quant_config.json form
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8", 1.0, "fp8"),
    (CT_NVFP4, "nvfp4", 4.5 / 8, "fp4"),
    (CT_NVFP4A16, "nvfp4", 4.5 / 8, "bfloat16"),  # 4-bit float weights, 16-bit activations: weight-only
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
    assert (awq.precision, awq.compute_dtype, awq.quantized) == ("int4", "bfloat16", True)
    # quantised linear layers at 4 bits + scales and zeros per 128; the untied embedding and LM head (2 x
    # 128256 x 4096) and the norms stay 16-bit
    embed, norms = 2 * 128256 * 4096, (2 * 32 + 1) * 4096
    total = awq.total_params_b * 1e9
    expected = ((total - embed - norms) * (0.5 + 2.5 / 128) + (embed + norms) * 2.0) / total
    assert awq.weight_bytes_per_param == pytest.approx(expected, abs=1e-4)
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
    assert (q.weight_bytes_per_param, q.compute_dtype, q.quantized) == (0.55, "bfloat16", True)  # flat --dtype figure
    with pytest.raises(WattGPUError, match="dtype"):
        with_dtype(llm, "int3")
    r = CliRunner().invoke(main, ["predict", "--llm", llm.name, "--gpu", "H100 SXM", "--dtype", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    assert any("quantised" in w for w in json.loads(r.stdout)["warnings"])
    r = CliRunner().invoke(main, ["predict", "--llm", llm.name, "--gpu", "H100 SXM", "--dtype", "fp6"])
    assert r.exit_code == 2 and "dtype" in r.output and len(r.output.strip().splitlines()) == 1


# ---- NVFP4 / ModelOpt / W4A16 on real configs, and the FP4 tensor rate
FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "hf_configs"


def _qwen3_8b() -> dict:
    return json.loads((FIXTURES / "Qwen--Qwen3-8B.json").read_text(encoding="utf-8"))


def _split_bytes(spec, per_quantised: float) -> float:
    """Whole-model bytes/param of Qwen3-8B with quantised linear layers: untied embedding + LM head
    (2 x 151936 x 4096) and the norms (36 layers x (2 + q/k norms) + final) stay 16-bit."""
    embed = 2 * 151936 * 4096
    norms = 36 * 2 * 4096 + 4096
    total = spec.total_params_b * 1e9
    return ((total - embed - norms) * per_quantised + (embed + norms) * 2.0) / total


@pytest.mark.parametrize("q,precision,per_weight,compute", [
    (MODELOPT_NVFP4, "nvfp4", 0.5625, "fp4"),
    (CT_NVFP4, "nvfp4", 0.5625, "fp4"),
    (CT_W4A16, "int4", 0.5 + 2 / 128, "bfloat16"),
])
def test_4bit_checkpoints_of_a_real_config(q, precision, per_weight, compute) -> None:
    """Qwen3-8B's own config.json with the quantization block each format writes: 4-bit linear layers,
    16-bit embeddings / LM head / norms (nvidia/Qwen3-8B-NVFP4 excludes lm_head)."""
    spec = llm_from_hf_config({**_qwen3_8b(), "quantization_config": q}, "qwen3-8b-4bit")
    assert (spec.precision, spec.compute_dtype, spec.quantized) == (precision, compute, True)
    assert spec.weight_bytes_per_param == pytest.approx(_split_bytes(spec, per_weight), abs=1e-4)
    assert 5.5 < spec.total_params_b * spec.weight_bytes_per_param < 6.6  # GB: a ~6 GB checkpoint, not 16 GB


def test_modelopt_fp8_and_hf_quant_config_file(tmp_path) -> None:
    """ModelOpt FP8 reads as 1 byte/param (it read 2.0 before); hf_quant_config.json beside config.json counts."""
    fp8 = llm_from_hf_config({**_qwen3_8b(), "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}},
                             "q-fp8")
    assert (fp8.weight_bytes_per_param, fp8.compute_dtype, fp8.precision) == (1.0, "fp8", "fp8")
    from wattgpu.hfconfig import load_llm_file

    (tmp_path / "config.json").write_text(json.dumps(_qwen3_8b()), encoding="utf-8")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt", "version": "0.29.0"},
         "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}), encoding="utf-8")
    nv = load_llm_file(tmp_path)
    assert (nv.precision, nv.compute_dtype) == ("nvfp4", "fp4")
    assert nv.weight_bytes_per_param == pytest.approx(_split_bytes(nv, 0.5625), abs=1e-4)


def test_unknown_modelopt_algorithm_is_named() -> None:
    with pytest.raises(SpecValidationError, match="quant_algo"):
        parse_quantization({"quant_method": "modelopt", "quant_algo": "INT2_MAGIC"}, "bfloat16", 2.0, "LLM 'x'")


def test_excluded_attention_stays_16_bit() -> None:
    cfg = _qwen3_8b()
    plain = llm_from_hf_config({**cfg, "quantization_config": MODELOPT_NVFP4}, "a")
    no_attn = llm_from_hf_config({**cfg, "quantization_config": {**MODELOPT_NVFP4,
                                                                  "exclude_modules": ["lm_head", "*self_attn*"]}}, "b")
    assert no_attn.weight_bytes_per_param > plain.weight_bytes_per_param


def test_fp4_rate_only_where_the_gpu_has_fp4_tensor_cores() -> None:
    from wattgpu import physics

    cat = default_catalog()
    nvfp4 = cat.llm("nvidia/Qwen3-8B-NVFP4")
    bf16 = cat.llm("Qwen/Qwen3-8B")
    fp8 = cat.llm("meta-llama/Llama-3.1-405B-Instruct-FP8")
    w4a16 = cat.llm("RedHatAI/gemma-3-12b-it-quantized.w4a16")
    assert nvfp4.compute_dtype == "fp4" and w4a16.compute_dtype == "bfloat16"
    with_fp4 = [g for g in cat.gpus if g.fp4_tflops is not None]
    assert {"NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5060 Ti", "NVIDIA B200 (HGX/DGX B200)"} <= {g.name for g in with_fp4}
    for g in cat.gpus:
        assert physics.compute_tflops(g, bf16) == g.fp16_tflops  # 16-bit models: unchanged
        assert physics.compute_tflops(g, w4a16) == g.fp16_tflops  # weight-only
        assert physics.compute_tflops(g, nvfp4) == (g.fp4_tflops if g.fp4_tflops is not None else g.fp16_tflops)
        assert physics.compute_tflops(g, fp8) == (g.fp8_tflops if g.fp8_tflops is not None else g.fp16_tflops)
        assert (g.fp4_tflops is not None) == g.architecture.startswith("Blackwell"), g.name
    # the vectorised form the features use agrees with the scalar helper
    rows = [(g, m, Workload()) for g in cat.gpus for m in (nvfp4, bf16, fp8)]
    cols = F.columns(rows)
    want = [physics.compute_tflops(g, m) for g, m, _ in rows]
    assert list(cols["compute_tflops"]) == pytest.approx(want, rel=1e-12)


def test_nvfp4_on_hopper_is_weight_only_and_says_so() -> None:
    from wattgpu.predictor import Predictor

    pred = Predictor()
    h100 = pred.catalog.gpu("NVIDIA H100 SXM5 80GB")
    p = pred.predict(h100, pred.catalog.llm("nvidia/Qwen3-8B-NVFP4"))
    assert any("no FP4 tensor cores" in w and "weight-only" in w for w in p.warnings)
