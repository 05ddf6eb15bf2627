"""Every field a user can set on a GPU, LLM or workload is checked, and refusals are WattGPUErrors
that name the entity, the field and the value."""
from __future__ import annotations

import json
import math

import pytest

import wattgpu
from wattgpu import (ConfigFileError, GpuSpec, LlmSpec, SpecValidationError, UnknownEntityError, WattGPUError,
                     Workload, default_catalog)
from wattgpu.specs import GPU_RANGES, LLM_RANGES

CAT = default_catalog()
GPU = CAT.gpu("NVIDIA H100 SXM5 80GB").to_dict()
LLM = next(m for m in CAT.llms if m.arch_class == "decoder_transformer" and m.total_params_b < 10).to_dict()
LLM_NAME = LLM["name"]

BAD_NUMBERS = [True, False, "300", [300], {"v": 1}, None, math.nan, math.inf, -math.inf, 1e308, -1.0, 0]


@pytest.mark.parametrize("field", sorted(set(GPU_RANGES) - {"base_clock_mhz", "boost_clock_mhz",
                                                              "idle_power_w", "transistors_million"}))
@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_gpu_required_numbers_refused(field, value):
    with pytest.raises(SpecValidationError) as ei:
        GpuSpec.from_dict({**GPU, field: value})
    assert ei.value.field == field and field in str(ei.value) and "GPU" in str(ei.value)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize("field,value", [
    ("release_year", 2020.5), ("sm_count", "132"), ("sm_count", 0.5), ("bf16_tflops", "x"), ("fp8_tflops", -1),
    ("fp32_tflops", math.nan), ("l2_cache_mb", 1e308), ("aliases", 5), ("aliases", "H100"), ("aliases", [1]),
    ("aliases", [""]), ("architecture", ["Hopper"]), ("form_factor", 7), ("memory_type", "HBM9"),
    ("memory_type", ["HBM3"]), ("name", ""), ("name", ["x"]), ("name", "x" * 10_000), ("idle_power_w", 0),
    ("boost_clock_mhz", 1.0), ("idle_power_source", 3),
])
def test_gpu_other_fields_refused(field, value):
    with pytest.raises(SpecValidationError) as ei:
        GpuSpec.from_dict({**GPU, field: value})
    assert ei.value.field == field
    assert len(str(ei.value)) < 1000


@pytest.mark.parametrize("field,value,hint", [
    ("memory_bandwidth_gb_s", 3.35, "3.35 looks like TB/s, which is 3350 GB/s"),
    ("tdp_w", 0.7, "0.7 looks like kW, which is 700 W"),
    ("memory_size_gb", 80e9, "looks like bytes, which is 80 GB"),
    ("memory_size_gb", 81920, "looks like MiB, which is 80 GB"),
    ("fp16_tflops", 989.4e12, "looks like FLOPS, which is 989.4 dense FP16 TFLOPS"),
    ("boost_clock_mhz", 1.98, "1.98 looks like GHz, which is 1980 MHz"),
    ("transistors_million", 80e9, "looks like transistors, which is 8e+04 million transistors"),
])
def test_unit_slips_are_named_with_the_converted_value(field, value, hint):
    """A spec-sheet number in the wrong unit says which unit it looks like and what it is in the right one."""
    with pytest.raises(SpecValidationError) as ei:
        GpuSpec.from_dict({**GPU, field: value})
    assert ei.value.field == field and hint in str(ei.value)


def test_parameter_count_given_as_a_plain_number_is_named():
    with pytest.raises(SpecValidationError) as ei:
        LlmSpec.from_dict({**LLM, "total_params_b": LLM["total_params_b"] * 1e9})
    assert ei.value.field == "total_params_b" and "looks like parameters, which is" in str(ei.value)


@pytest.mark.parametrize("field,value", [("tdp_w", 1e9), ("tdp_w", -700.0), ("memory_bandwidth_gb_s", 1e30),
                                         ("memory_size_gb", -80.0), ("fp16_tflops", 0.0)])
def test_out_of_range_without_a_plausible_unit_slip_gives_no_hint(field, value):
    with pytest.raises(SpecValidationError) as ei:
        GpuSpec.from_dict({**GPU, field: value})
    assert "looks like" not in str(ei.value)


def test_gpu_boost_below_base_refused():
    with pytest.raises(SpecValidationError, match="boost_clock_mhz"):
        GpuSpec.from_dict({**GPU, "base_clock_mhz": 1800.0, "boost_clock_mhz": 1500.0})


def test_gpu_unknown_and_missing_keys_named():
    with pytest.raises(SpecValidationError, match="'tdp'"):
        GpuSpec.from_dict({**GPU, "tdp": 700})
    with pytest.raises(SpecValidationError) as ei:
        GpuSpec.from_dict({k: v for k, v in GPU.items() if k != "memory_bandwidth_gb_s"})
    assert ei.value.field == "memory_bandwidth_gb_s"
    with pytest.raises(SpecValidationError, match="<root>"):
        GpuSpec.from_dict([GPU])  # type: ignore[arg-type]
    with pytest.raises(SpecValidationError):
        GpuSpec.from_dict({**GPU, 1: 2})  # non-string key mixed with strings


@pytest.mark.parametrize("field", sorted(LLM_RANGES))
@pytest.mark.parametrize("value", [True, "32", [32], math.nan, math.inf, 1e308, -5], ids=repr)
def test_llm_range_fields_refused(field, value):
    with pytest.raises(SpecValidationError) as ei:
        LlmSpec.from_dict({**LLM, field: value})
    assert ei.value.field in LLM_RANGES or ei.value.field == "num_attention_heads"
    assert "LLM" in str(ei.value)


@pytest.mark.parametrize("field,value", [
    ("num_experts", "8"), ("num_experts", -1), ("num_experts", 1e308), ("experts_per_tok", 3),
    ("kv_layers", 10_000), ("kv_layers", "x"), ("max_position_embeddings", -5), ("max_position_embeddings", "4k"),
    ("sliding_window", 0.5), ("tie_word_embeddings", "yes"), ("quantized", 1), ("precision", 16),
    ("model_type", ["llama"]), ("arch_class", "transformer"), ("name", ""),
])
def test_llm_other_fields_refused(field, value):
    with pytest.raises(SpecValidationError) as ei:
        LlmSpec.from_dict({**LLM, field: value})
    assert ei.value.field == field


def test_llm_structural_checks():
    with pytest.raises(SpecValidationError, match="num_attention_heads"):
        LlmSpec.from_dict({**LLM, "hidden_size": 4000, "num_attention_heads": 48, "head_dim": 0})
    with pytest.raises(SpecValidationError, match="num_kv_heads"):
        LlmSpec.from_dict({**LLM, "num_kv_heads": LLM["num_attention_heads"] + 1})
    with pytest.raises(SpecValidationError, match="active_params_b"):
        LlmSpec.from_dict({**LLM, "active_params_b": LLM["total_params_b"] * 2})
    with pytest.raises(SpecValidationError, match="experts_per_tok"):
        LlmSpec.from_dict({**LLM, "num_experts": 8, "experts_per_tok": 9})
    with pytest.raises(SpecValidationError, match="<root>"):
        LlmSpec.from_dict("config")  # type: ignore[arg-type]
    with pytest.raises(SpecValidationError, match="'layers'"):
        LlmSpec.from_dict({**LLM, "layers": 3})


@pytest.mark.parametrize("kwargs,field", [
    ({"kind": "batch"}, "kind"), ({"kind": ["offline"]}, "kind"), ({"engine": "llama.cpp"}, "engine"),
    ({"engine": None}, "engine"), ({"engine": 3}, "engine"), ({"max_batch": 0}, "max_batch"),
    ({"max_batch": True}, "max_batch"), ({"max_batch": 10**9}, "max_batch"), ({"max_batch": 2.5}, "max_batch"),
    ({"input_tokens": 0}, "input_tokens"), ({"input_tokens": 10**12}, "input_tokens"),
    ({"output_tokens": -1}, "output_tokens"), ({"output_tokens": math.nan}, "output_tokens"),
    ({"output_tokens": "256"}, "output_tokens"), ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"), ({"num_requests": 0}, "num_requests"),
    ({"num_requests": 1.5}, "num_requests"), ({"num_requests": False}, "num_requests"),
    ({"kind": "server"}, "qps"), ({"kind": "server", "qps": 0}, "qps"), ({"kind": "server", "qps": -1}, "qps"),
    ({"kind": "server", "qps": math.inf}, "qps"), ({"kind": "server", "qps": math.nan}, "qps"),  # 1e308 is valid: overloaded
    ({"qps": 1.0}, "qps"), ({"kind": "closed_loop"}, "concurrency"),
    ({"kind": "closed_loop", "concurrency": 0}, "concurrency"), ({"concurrency": -3}, "concurrency"),
    ({"concurrency": math.nan}, "concurrency"), ({"concurrency": 1e9}, "concurrency"),
])
def test_workload_refused(kwargs, field):
    with pytest.raises(SpecValidationError) as ei:
        Workload(**kwargs)
    assert ei.value.field == field and ei.value.entity == "workload"


def test_workload_from_dict_and_engine_aliases():
    assert Workload(engine="TRT-LLM").engine == "tensorrt_llm"
    with pytest.raises(SpecValidationError, match="'batch_size'"):
        Workload.from_dict({"batch_size": 4})
    with pytest.raises(SpecValidationError, match="<root>"):
        Workload.from_dict([("kind", "offline")])  # type: ignore[arg-type]


@pytest.mark.parametrize("call", [
    lambda: wattgpu.predict(5, LLM_NAME),
    lambda: wattgpu.predict(None, LLM_NAME),
    lambda: wattgpu.predict("H100 SXM", None),
    lambda: wattgpu.predict("H100 SXM", LLM_NAME, workload=42),
    lambda: wattgpu.predict("H100 SXM", LLM_NAME, workload={"kind": "nope"}),
    lambda: wattgpu.predict("H100 SXM", LLM_NAME, batch=4),
    lambda: wattgpu.predict("H100 SXM", LLM_NAME, Workload(), kind="offline"),
    lambda: wattgpu.predict("no such gpu", LLM_NAME),
    lambda: wattgpu.predict("H100 SXM", "no/such-llm"),
    lambda: wattgpu.predict("x" * 100_000, LLM_NAME),
    lambda: wattgpu.predict_many(5),
    lambda: wattgpu.predict_many("abc"),
    lambda: wattgpu.predict_many([(LLM_NAME,)]),
    lambda: wattgpu.predict_many([None]),
    lambda: wattgpu.default_predictor().predict_specs([(1, 2, 3)]),
], ids=lambda f: "")
def test_api_misuse_is_a_wattgpu_error(call):
    with pytest.raises(WattGPUError) as ei:
        call()
    assert len(str(ei.value)) < 1000


def test_unknown_names_suggest_and_stay_short():
    with pytest.raises(UnknownEntityError) as ei:
        wattgpu.predict("H100 SXM5 80", LLM_NAME)
    assert "Did you mean" in str(ei.value)
    with pytest.raises(UnknownEntityError) as ei:
        wattgpu.predict("y" * 100_000, LLM_NAME)
    assert len(str(ei.value)) < 300


def test_context_beyond_max_position_embeddings_is_a_warning():
    """Decision: allowed with a warning (rope_scaling / YaRN let engines serve longer contexts), not an error."""
    m = next(m for m in CAT.llms if m.max_position_embeddings and m.max_position_embeddings < 16_000
             and m.total_params_b < 10)
    p = wattgpu.predict("NVIDIA H100 SXM5 80GB", m.name, input_tokens=m.max_position_embeddings, output_tokens=64)
    assert any("max_position_embeddings" in w for w in p.warnings)
    p = wattgpu.predict("NVIDIA H100 SXM5 80GB", m.name, input_tokens=256, output_tokens=64)
    assert not any("max_position_embeddings" in w for w in p.warnings)


def test_custom_gpu_file_roundtrip_and_errors(tmp_path):
    good = tmp_path / "my_gpu.json"
    good.write_text(json.dumps({**GPU, "name": "My GPU", "aliases": []}))
    p = wattgpu.predict(str(good), LLM_NAME)
    assert p.gpu == "My GPU" and p.power_w > 0
    cases = {
        "unknown.json": ({**GPU, "colour": "green"}, "colour"),
        "missing.json": ({k: v for k, v in GPU.items() if k != "tdp_w"}, "tdp_w"),
        "wrongtype.json": ({**GPU, "tdp_w": "700W"}, "tdp_w"),
        "bool.json": ({**GPU, "fp16_tflops": True}, "fp16_tflops"),
        "huge.json": ({**GPU, "memory_size_gb": 1e308}, "memory_size_gb"),
        "array.json": ([GPU], "top level"),
    }
    for fname, (content, needle) in cases.items():
        f = tmp_path / fname
        f.write_text(json.dumps(content))
        with pytest.raises(WattGPUError) as ei:
            wattgpu.predict(str(f), LLM_NAME)
        msg = str(ei.value)
        assert needle in msg and "\n" not in msg, msg
        if fname != "array.json":
            assert fname in msg  # the entity names the file


def test_config_file_errors_are_config_file_errors(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": NaN}')
    with pytest.raises(ConfigFileError, match="NaN"):
        wattgpu.predict("H100 SXM", str(bad))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_files_are_named_as_utf16(tmp_path, encoding):
    """A "Unicode" export from Windows tools (UTF-16, with or without a byte-order mark) is named as such,
    with the fix, for GPU and LLM files alike; not reported as binary data."""
    gpu = tmp_path / "gpu.json"
    gpu.write_bytes(json.dumps({**GPU, "name": "My GPU", "aliases": []}).encode(encoding))
    cfg = tmp_path / "config.json"
    cfg.write_bytes(json.dumps({"model_type": "llama", "num_hidden_layers": 32}).encode(encoding))
    for call, needle in ((lambda: wattgpu.predict(str(gpu), LLM_NAME), "GPU spec"),
                         (lambda: wattgpu.predict("H100 SXM", str(cfg)), "LLM config")):
        with pytest.raises(ConfigFileError) as ei:
            call()
        assert f"is UTF-16 text; save the {needle} file as UTF-8" in str(ei.value)


def test_binary_file_is_not_taken_for_utf16(tmp_path):
    f = tmp_path / "gpu.json"
    f.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConfigFileError, match="NUL bytes"):
        wattgpu.predict(str(f), LLM_NAME)


@pytest.mark.parametrize("kind", ["closed_loop", "offline"])
def test_fewer_than_one_sequence_is_refused_unless_server(kind):
    """A closed loop of 0.001 clients was predicted exactly like one client; below 1 only a server's
    time-averaged concurrency (Little's law) makes sense."""
    with pytest.raises(SpecValidationError) as ei:
        Workload(kind=kind, concurrency=0.5)
    assert ei.value.field == "concurrency" and f"kind is '{kind}'" in str(ei.value)
    assert Workload(kind=kind, concurrency=1).concurrency == 1
    assert Workload(kind="server", qps=0.1, concurrency=0.05).concurrency == 0.05
