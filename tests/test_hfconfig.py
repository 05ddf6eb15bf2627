"""HF config.json → LlmSpec: parameter counts against the catalog, field aliases, and hostile input files."""
from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import pytest

from wattgpu.errors import ConfigFileError, SpecValidationError, WattGPUError
from wattgpu.hfconfig import llm_from_hf_config, load_llm_file
from wattgpu.safeio import read_json_file

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
TOLERANCE = 0.03


def _expected() -> dict[str, tuple[float, float | None]]:
    with open(FIXTURES / "expected_params.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {r["hf_id"]: (float(r["total_params_b"]), float(r["active_params_b"]) if r["active_params_b"] else None)
            for r in rows}


EXPECTED = _expected()
FIXTURE_FILES = sorted(FIXTURES.glob("*--*.json"))


def _hf_id(path: Path) -> str:
    return path.stem.replace("--", "/", 1)


def test_fixture_set_is_large_and_fully_covered() -> None:
    checked = [p for p in FIXTURE_FILES if _hf_id(p) in EXPECTED]
    assert len(checked) >= 20
    assert len(checked) == len(FIXTURE_FILES), "every fixture needs a row in expected_params.csv"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_param_counts_match_catalog(path: Path) -> None:
    spec = load_llm_file(path)
    total, active = EXPECTED[_hf_id(path)]
    assert spec.total_params_b == pytest.approx(total, rel=TOLERANCE)
    if active is not None:
        assert spec.active_params_b == pytest.approx(active, rel=TOLERANCE)
    assert spec.active_params_b <= spec.total_params_b * 1.001


@pytest.mark.parametrize("stem, arch_class, moe", [
    ("meta-llama--Llama-2-7b-hf", "decoder_transformer", False),
    ("mistralai--Mixtral-8x7B-Instruct-v0.1", "decoder_moe_transformer", True),
    ("deepseek-ai--DeepSeek-V3.1", "decoder_moe_transformer", True),
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", "decoder_moe_transformer", True),
    ("google--flan-t5-xl", "encoder_decoder_t5", False),
    ("nvidia--NVIDIA-Nemotron-Nano-9B-v2", "hybrid_mamba_transformer", False),
    ("RWKV--rwkv-raven-7b", "rnn_rwkv", False),
])
def test_arch_class(stem: str, arch_class: str, moe: bool) -> None:
    spec = load_llm_file(FIXTURES / f"{stem}.json")
    assert spec.arch_class == arch_class
    assert spec.is_moe is moe


def test_field_aliases_and_precision() -> None:
    sc = load_llm_file(FIXTURES / "bigcode--starcoder.json")  # n_layer/n_embd/n_head/n_inner, multi_query
    assert (sc.num_layers, sc.hidden_size, sc.num_attention_heads, sc.num_kv_heads) == (40, 6144, 48, 1)
    # float32 checkpoints are served in 16 bits (vLLM dtype "auto"), so weights count 2 bytes each
    assert sc.intermediate_size == 24576 and sc.tie_word_embeddings and sc.weight_bytes_per_param == 2.0
    mpt = load_llm_file(FIXTURES / "ibm--mpt-7b-instruct2.json")  # n_layers/n_heads/expansion_ratio/max_seq_len
    assert (mpt.num_layers, mpt.num_attention_heads, mpt.intermediate_size) == (32, 32, 16384)
    assert mpt.max_position_embeddings == 2048
    t5 = load_llm_file(FIXTURES / "google--flan-t5-xl.json")  # d_model/d_ff/num_heads/d_kv/num_layers
    assert (t5.hidden_size, t5.intermediate_size, t5.num_attention_heads, t5.head_dim) == (2048, 5120, 32, 64)
    assert t5.max_position_embeddings is None
    scout = load_llm_file(FIXTURES / "meta-llama--Llama-4-Scout-17B-16E-Instruct.json")  # text_config nesting
    assert scout.model_type == "llama4" and scout.num_experts == 16 and scout.experts_per_tok == 1
    ds = load_llm_file(FIXTURES / "deepseek-ai--DeepSeek-V3.1.json")
    assert ds.quantized and ds.precision == "fp8" and ds.weight_bytes_per_param == 1.0
    oss = load_llm_file(FIXTURES / "openai--gpt-oss-120b.json")
    # MXFP4 experts (4.25 bits) + 16-bit attention, router and embeddings: 0.558 B/param = a 65 GB checkpoint
    assert oss.quantized and oss.precision == "mxfp4" and oss.weight_bytes_per_param == pytest.approx(0.558, abs=5e-4)
    assert oss.experts_per_tok == 4
    qwen = load_llm_file(FIXTURES / "Qwen--Qwen3-8B.json")
    assert not qwen.quantized and qwen.precision == "bfloat16" and qwen.sliding_window is None


def test_gqa_and_explicit_head_dim() -> None:
    gemma = load_llm_file(FIXTURES / "google--gemma-2-9b-it.json")  # 3584 / 16 heads would be 224; config says 256
    assert gemma.head_dim == 256 and gemma.num_kv_heads == 8 and gemma.num_attention_heads == 16
    llama70 = load_llm_file(FIXTURES / "meta-llama--Llama-3.1-70B-Instruct.json")
    assert (llama70.num_attention_heads, llama70.num_kv_heads, llama70.head_dim) == (64, 8, 128)
    base = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 1024, "intermediate_size": 4096,
            "num_attention_heads": 16, "vocab_size": 32000}
    mha = llm_from_hf_config(base, "mha")
    assert mha.num_kv_heads == 16  # default = num_attention_heads
    gqa = llm_from_hf_config({**base, "num_key_value_heads": 2}, "gqa")
    # k and v shrink from 16 to 2 heads of 64: 2 layers x 2 x 1024 x (16 - 2) x 64 parameters fewer
    assert (mha.total_params_b - gqa.total_params_b) * 1e9 == pytest.approx(2 * 2 * 1024 * 14 * 64, abs=1000)  # counts are rounded to 1e-6 B
    wide = llm_from_hf_config({**base, "num_key_value_heads": 2, "head_dim": 128}, "wide")
    assert wide.head_dim == 128 and wide.total_params_b > gqa.total_params_b


def test_model_dir_with_config_json(tmp_path: Path) -> None:
    model_dir = tmp_path / "my-llama"
    model_dir.mkdir()
    cfg = json.loads((FIXTURES / "meta-llama--Llama-2-7b-hf.json").read_text())
    cfg.pop("_name_or_path", None)
    (model_dir / "config.json").write_text(json.dumps(cfg))
    spec = load_llm_file(model_dir)
    assert spec.name == "my-llama"
    assert spec.total_params_b == pytest.approx(6.738, rel=0.01)
    assert spec.source.endswith("config.json")
    assert load_llm_file(model_dir / "config.json").name == "my-llama"
    named = tmp_path / "other.json"
    named.write_text(json.dumps({**cfg, "_name_or_path": "acme/llama-clone"}))
    assert load_llm_file(named).name == "acme/llama-clone"


@pytest.mark.parametrize("drop, key", [
    ("num_hidden_layers", "num_layers"), ("hidden_size", "hidden_size"), ("num_attention_heads", "num_attention_heads"),
])
def test_missing_required_field_is_named(drop: str, key: str) -> None:
    cfg = json.loads((FIXTURES / "Qwen--Qwen3-8B.json").read_text())
    del cfg[drop]
    with pytest.raises(SpecValidationError) as err:
        llm_from_hf_config(cfg, "x")
    assert err.value.field == key
    assert repr(drop) in str(err.value)


def test_bad_field_type_is_named() -> None:
    cfg = json.loads((FIXTURES / "Qwen--Qwen3-8B.json").read_text())
    with pytest.raises(SpecValidationError) as err:
        llm_from_hf_config({**cfg, "hidden_size": "abc"}, "x")
    assert err.value.field == "hidden_size" and err.value.value == "abc" and "integer" in str(err.value)
    with pytest.raises(SpecValidationError) as err:
        llm_from_hf_config({**cfg, "num_hidden_layers": 2.5}, "x")
    assert err.value.field == "num_layers"
    with pytest.raises(SpecValidationError) as err:
        llm_from_hf_config({**cfg, "tie_word_embeddings": "yes"}, "x")
    assert err.value.field == "tie_word_embeddings"
    with pytest.raises(SpecValidationError):
        llm_from_hf_config([1, 2], "x")  # type: ignore[arg-type]


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


_QWEN = (FIXTURES / "Qwen--Qwen3-8B.json").read_text()


@pytest.mark.parametrize("case", [
    "nan", "infinity", "neg_infinity", "huge_hidden", "deep_nesting", "five_mb", "binary", "not_utf8",
    "not_json", "empty", "top_list", "dir_without_config", "missing_path", "huge_int",
])
def test_hostile_files_are_refused_quickly(tmp_path: Path, case: str) -> None:
    if case == "nan":
        path = _write(tmp_path, "c.json", _QWEN.replace('"hidden_size": 4096', '"hidden_size": NaN').encode())
    elif case == "infinity":
        path = _write(tmp_path, "c.json", _QWEN.replace('"hidden_size": 4096', '"hidden_size": Infinity').encode())
    elif case == "neg_infinity":
        path = _write(tmp_path, "c.json", b'{"rope_theta": -Infinity}')
    elif case == "huge_hidden":
        path = _write(tmp_path, "c.json", _QWEN.replace('"hidden_size": 4096', '"hidden_size": 1e308').encode())
    elif case == "huge_int":
        path = _write(tmp_path, "c.json", _QWEN.replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 200).encode())
    elif case == "deep_nesting":
        path = _write(tmp_path, "c.json", b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}")
    elif case == "five_mb":
        path = _write(tmp_path, "c.json", b'{"pad": "' + b"x" * (5 * 1024 * 1024) + b'"}')
    elif case == "binary":
        path = _write(tmp_path, "c.json", bytes(range(256)) * 64)
    elif case == "not_utf8":
        path = _write(tmp_path, "c.json", b'{"name": "\xff\xfe caf\xe9"}')
    elif case == "not_json":
        path = _write(tmp_path, "c.json", b"hidden_size: 4096\n")
    elif case == "empty":
        path = _write(tmp_path, "c.json", b"")
    elif case == "top_list":
        path = _write(tmp_path, "c.json", b"[1, 2, 3]")
    elif case == "dir_without_config":
        path = tmp_path / "empty-model"
        path.mkdir()
    else:
        path = tmp_path / "does-not-exist" / "config.json"
    start = time.perf_counter()
    with pytest.raises(WattGPUError) as err:
        load_llm_file(path)
    assert time.perf_counter() - start < 2.0
    assert isinstance(err.value, (ConfigFileError, SpecValidationError))
    assert "\n" not in str(err.value)
    if case == "huge_hidden":
        assert isinstance(err.value, SpecValidationError) and err.value.field == "hidden_size"
    if case in ("nan", "infinity", "deep_nesting", "five_mb", "binary", "top_list", "dir_without_config",
                "missing_path"):
        assert isinstance(err.value, ConfigFileError)


def test_read_json_file_options(tmp_path: Path) -> None:
    p = _write(tmp_path, "spec.json", b'\xef\xbb\xbf{"a": [1, {"b": "[[[["}]}')  # BOM, brackets inside strings
    assert read_json_file(p, what="GPU spec") == {"a": [1, {"b": "[[[["}]}
    with pytest.raises(ConfigFileError, match="larger than 10 bytes"):
        read_json_file(p, what="GPU spec", max_bytes=10)
    with pytest.raises(ConfigFileError, match="is a directory"):
        read_json_file(tmp_path, what="GPU spec", dir_file=None)
    nested = _write(tmp_path, "n.json", b'{"a": ' + b"[" * 63 + b"]" * 63 + b"}")  # exactly 64 levels
    assert "a" in read_json_file(nested, what="x")
    too_deep = _write(tmp_path, "d.json", b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}")
    with pytest.raises(ConfigFileError, match="deeper than 64"):
        read_json_file(too_deep, what="x")
    sub = tmp_path / "m"
    sub.mkdir()
    shutil.copy(FIXTURES / "Qwen--Qwen3-8B.json", sub / "config.json")
    assert read_json_file(sub, what="LLM config")["model_type"] == "qwen3"


_KEYS = ["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
         "intermediate_size", "vocab_size", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
         "kv_lora_rank", "q_lora_rank", "tie_word_embeddings", "torch_dtype", "quantization_config",
         "hybrid_override_pattern", "text_config", "d_kv", "n_shared_experts", "first_k_dense_replace"]


def test_arbitrary_configs_fail_only_with_wattgpu_errors() -> None:
    from hypothesis import given, settings, strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**7), st.floats(allow_nan=True),
                        st.sampled_from(["llama", "t5", "rwkv", "deepseek_v3", "mpt", "bfloat16", "M*-", "abc"]))
    values = st.one_of(scalars, st.dictionaries(st.sampled_from(_KEYS), scalars, max_size=4), st.lists(scalars, max_size=3))
    base = {"num_hidden_layers": 4, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 32000}

    @settings(max_examples=300, deadline=None)
    @given(st.dictionaries(st.sampled_from(_KEYS), values, max_size=8), st.booleans())
    def check(extra: dict, with_base: bool) -> None:
        cfg = {**base, **extra} if with_base else extra
        try:
            spec = llm_from_hf_config(cfg, "fuzz")
        except WattGPUError:
            return
        assert 0 < spec.active_params_b <= spec.total_params_b * 1.001

    check()
