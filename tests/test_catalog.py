"""The catalog: complete, in the right units, traceable to its sources, and easy to look up."""
from __future__ import annotations

import csv
import json

import pytest

from wattgpu.errors import UnknownEntityError, UnsupportedModelError
from wattgpu.specs import Catalog, catalog_json_bytes, default_catalog

from .helpers import REPO


@pytest.fixture(scope="module")
def specs() -> dict:
    return json.loads((REPO / "specs.json").read_text())


def test_packaged_snapshot_is_the_top_level_catalog() -> None:
    assert (REPO / "specs.json").read_bytes() == (REPO / "runtime/wattgpu/models/specs.json").read_bytes()


def test_specs_json_is_what_the_builder_writes(tmp_path) -> None:
    from wattgpu_train.catalog import write_specs

    out = tmp_path / "specs.json"
    write_specs(out, REPO / "data/catalog", REPO / "data/paper")
    assert out.read_bytes() == (REPO / "specs.json").read_bytes(), "run `wattgpu-train sync-catalog`"


def test_every_gpu_and_llm_of_the_tables_is_in_the_catalog(specs: dict) -> None:
    with open(REPO / "data/catalog/gpu_specs.csv", newline="") as f:
        gpu_names = [r["name"] for r in csv.DictReader(f)]
    with open(REPO / "data/catalog/llm_configs.csv", newline="") as f:
        llm_names = [r["hf_id"] for r in csv.DictReader(f)]
    with open(REPO / "data/paper/model_features.csv", newline="") as f:
        paper = [r["model_name"] for r in csv.DictReader(f, delimiter=";")]
    assert len(gpu_names) == 55  # 52 shared + RTX 4000 Ada (llmperf_techgrandpa) + RTX 5060 Ti, 5070 Ti (holtmann)
    assert [g["name"] for g in specs["gpus"]] == gpu_names
    assert {m["name"] for m in specs["llms"]} == set(llm_names) | set(paper)
    assert all(g["spec"]["source"] and g["facts"].get("sources") for g in specs["gpus"])
    assert all(m["facts"]["source"] for m in specs["llms"])


def test_gpu_units_and_ranges() -> None:
    cat = default_catalog()
    for g in cat.gpus:
        assert 10 <= g.tdp_w <= 1500, g.name  # W, per GPU
        assert 100 <= g.memory_bandwidth_gb_s <= 10000, g.name  # decimal GB/s, not TB/s or bits
        assert 4 <= g.memory_size_gb <= 300, g.name
        # dense FP16: never more than ~1.2 PFLOPS per GB/s-class GPU of 2024; sparse would be 2x
        assert 5 <= g.fp16_tflops <= 2600, g.name
    h100 = cat.gpu("NVIDIA H100 SXM5 80GB")
    assert h100.fp16_tflops == pytest.approx(989.4)  # dense, not the 1979 sparse datasheet figure
    assert h100.memory_bandwidth_gb_s == 3350 and h100.tdp_w == 700
    a30 = cat.gpu("A30")
    assert (a30.tdp_w, a30.memory_bandwidth_gb_s, a30.fp16_tflops) == (165, 933, 165)


def test_llm_params_and_fields() -> None:
    cat = default_catalog()
    m = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.head_dim) == (32, 4096, 32, 8, 128)
    assert m.total_params_b == pytest.approx(8.03, rel=0.01)
    mix = cat.llm("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert mix.is_moe and mix.active_params_b < mix.total_params_b
    for llm in cat.llms:
        assert 0.05 <= llm.total_params_b <= 1000 and llm.active_params_b <= llm.total_params_b * 1.001


@pytest.mark.parametrize("query,expected", [
    ("nvidia a30", "NVIDIA A30"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"),  # nvidia-smi string
    ("Tesla V100-SXM2-32GB", "NVIDIA Tesla V100 SXM2 32GB"),  # Watt Counts gpu_type
    ("NVIDIA H200 SXM 141GB", "NVIDIA H200 SXM 141GB"),
    ("NVIDIA H20", "NVIDIA H20"),  # a full catalog name wins although "H20 141GB HBM3e" extends it
    ("l40s", "NVIDIA L40S"),
    ("A100 SXM4 40GB", "NVIDIA A100 SXM4 40GB"),  # catalog name without the vendor prefix
    ("V100 SXM2 32GB", "NVIDIA Tesla V100 SXM2 32GB"),
])
def test_gpu_lookup_by_alias_is_case_insensitive(query: str, expected: str) -> None:
    assert default_catalog().gpu(query).name == expected


def test_unknown_gpu_suggests_close_matches() -> None:
    with pytest.raises(UnknownEntityError) as err:
        default_catalog().gpu("H100 SXM5")
    assert "Did you mean: NVIDIA H100 SXM5 80GB" in str(err.value)


@pytest.mark.parametrize("query,first", [
    ("H100 SXM6", "NVIDIA H100 SXM5 80GB"),  # issue 40: was V100 SXM2 and P100 SXM2 first
    ("A100 SXM 80", "NVIDIA A100 SXM4 80GB"),
    ("RTX 4090 Ti", "NVIDIA GeForce RTX 4090"),
])
def test_a_near_miss_suggests_the_same_model_number_first(query: str, first: str) -> None:
    with pytest.raises(UnknownEntityError) as err:
        default_catalog().gpu(query)
    assert err.value.suggestions[0] == first, err.value.suggestions


@pytest.mark.parametrize("query,choices", [
    ("H100", ["NVIDIA H100 PCIe 80GB", "NVIDIA H100 SXM5 80GB", "NVIDIA H100 NVL 94GB"]),
    ("NVIDIA H200", ["NVIDIA H200 SXM 141GB", "NVIDIA H200 NVL 141GB"]),
    ("Orin (nvgpu)", ["NVIDIA Jetson AGX Orin 64GB", "NVIDIA Jetson AGX Orin 32GB"]),
    ("A100", ["NVIDIA A100 PCIe 40GB", "NVIDIA A100 PCIe 80GB", "NVIDIA A100 SXM4 40GB", "NVIDIA A100 SXM4 80GB"]),
])
def test_ambiguous_gpu_names_are_refused_with_the_choices(query: str, choices: list[str]) -> None:
    from wattgpu.errors import AmbiguousNameError

    for cat in (default_catalog(), Catalog.from_json(json.loads(catalog_json_bytes()))):  # lazy and full
        assert cat.find_gpu(query) is None
        with pytest.raises(AmbiguousNameError) as err:
            cat.gpu(query)
        assert sorted(err.value.choices) == sorted(choices)
        assert "say which" in str(err.value) and all(c in str(err.value) for c in choices)


def test_ambiguous_gpu_name_from_the_cli_and_a_csv_row(tmp_path) -> None:
    from click.testing import CliRunner

    from wattgpu.cli import main

    r = CliRunner().invoke(main, ["predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"])
    assert r.exit_code == 2 and "ambiguous" in r.output and "NVIDIA H100 NVL 94GB" in r.output
    src = tmp_path / "rows.csv"
    src.write_text("llm,gpu\nmeta-llama/Llama-3.1-8B-Instruct,NVIDIA H200\nmeta-llama/Llama-3.1-8B-Instruct,L40S\n")
    out = tmp_path / "out.csv"
    r = CliRunner().invoke(main, ["predict", "--input", str(src), "--output", str(out), "--on-error", "skip"])
    text = out.read_text()
    assert "ambiguous" in text and "NVIDIA H200 NVL 141GB" in text
    header = text.splitlines()[0].split(",")
    assert "gpu_resolved" in header and "llm_resolved" in header
    import csv
    rows = list(csv.DictReader(text.splitlines()))
    ok = [row for row in rows if not row["error"]]
    assert len(ok) == 1 and ok[0]["gpu_resolved"] == "NVIDIA L40S"
    assert ok[0]["llm_resolved"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_unknown_names_suggest_entries_holding_the_typed_text_first() -> None:
    cat = default_catalog()
    with pytest.raises(UnknownEntityError) as err:
        cat.llm("Qwen/Qwen3-30B-A3B")
    assert err.value.suggestions[0] == "Qwen/Qwen3-30B-A3B-Instruct-2507"


@pytest.mark.parametrize("path", ["./nodir/", "nodir/", "./no/such/config.json", "~/no-such-wattgpu-dir"])
def test_an_llm_argument_written_as_a_missing_path_says_so(path: str) -> None:
    from wattgpu.errors import ConfigFileError
    from wattgpu.resolve import resolve_llm

    with pytest.raises(ConfigFileError, match="no such file or directory"):
        resolve_llm(default_catalog(), path)


def test_llm_lookup_and_unsupported() -> None:
    cat = default_catalog()
    assert cat.llm("llama-3.1-8b-instruct").name == "meta-llama/Llama-3.1-8B-Instruct"
    with pytest.raises(UnknownEntityError) as err:
        cat.llm("meta-llama/Llama-3.1-8B-Instruc")
    assert "meta-llama/Llama-3.1-8B-Instruct" in str(err.value)
    with pytest.raises(UnsupportedModelError):
        cat.llm("RWKV/rwkv-raven-7b")


def test_catalog_round_trips_through_json(specs: dict) -> None:
    cat = Catalog.from_json(specs)
    assert len(cat.gpus) == 55 and len(cat.llms) + len(cat.unsupported_llms) == len(specs["llms"])


def test_new_consumer_blackwell_gpus_fp4_column_and_idle_rows() -> None:
    """RTX 5060 Ti / 5070 Ti rows with sources and their FP4 rate; every Blackwell row has an FP4 rate (and
    nothing older does); GeForce FP16 is the FP32-accumulate rate; measured loaded idle powers are in."""
    import csv

    with open(REPO / "data/catalog/gpu_specs.csv", newline="", encoding="utf-8") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    for name, fp4, tdp, bw in (("NVIDIA GeForce RTX 5060 Ti", 379.3, 180, 448), ("NVIDIA GeForce RTX 5070 Ti", 703.0, 300, 896)):
        r = rows[name]
        assert float(r["fp4_tensor_tflops_dense"]) == fp4 and float(r["tdp_w"]) == tdp
        assert float(r["memory_bandwidth_gb_s"]) == bw and float(r["memory_size_gb"]) == 16
        assert "nvidia.com" in r["sources"] and "techpowerup.com" in r["sources"] and "AI TOPS" in r["notes"]
        # 2 x dense FP4 = NVIDIA's sparse "AI TOPS" (759 and 1406)
        assert round(2 * fp4) in (759, 1406)
    for r in rows.values():
        has_fp4 = bool(r["fp4_tensor_tflops_dense"])
        assert has_fp4 == r["architecture"].startswith("Blackwell"), r["name"]
        if has_fp4:
            assert "FP4 dense" in r["notes"], r["name"]
        if "GeForce" in r["name"]:  # FP32 accumulate = half the FP16-accumulate rate the notes give
            assert "FP32 acc" in r["notes"] or "FP32 accumulate" in r["notes"], r["name"]
    cat = Catalog.from_json(json.loads((REPO / "specs.json").read_text(encoding="utf-8")))
    assert cat.gpu("NVIDIA GeForce RTX 5070 Ti").fp4_tflops == 703.0
    assert cat.gpu("NVIDIA H100 SXM5 80GB").fp4_tflops is None
    for name, idle in (("NVIDIA GeForce RTX 5060 Ti", 23.6), ("NVIDIA GeForce RTX 5070 Ti", 31.6),
                       ("NVIDIA GeForce RTX 5090", 49.0)):
        g = cat.gpu(name)
        assert g.idle_power_w == idle and "hholtmann/llm-consumer-gpu-benchmark" in (g.idle_power_source or "")
        assert g.max_group == 8 and g.nvlink_group == 0  # TP over PCIe


def test_holtmann_checkpoints_are_catalog_llms_with_sources() -> None:
    cat = Catalog.from_json(json.loads((REPO / "specs.json").read_text(encoding="utf-8")))
    doc = {m["name"]: m for m in json.loads((REPO / "specs.json").read_text(encoding="utf-8"))["llms"]}
    expect = {"nvidia/Qwen3-8B-NVFP4": ("nvfp4", "fp4"), "holtmann/gemma-3-12b-it-NVFP4": ("nvfp4", "fp4"),
              "holtmann/gemma-3-27b-it-NVFP4": ("nvfp4", "fp4"),
              "RedHatAI/gemma-3-12b-it-quantized.w4a16": ("int4", "bfloat16"),
              "RedHatAI/gemma-3-27b-it-quantized.w4a16": ("int4", "bfloat16"),
              "openai/gpt-oss-20b": ("mxfp4", "bfloat16"), "Qwen/Qwen3-8B": ("bfloat16", "bfloat16")}
    for name, (precision, compute) in expect.items():
        m = cat.llm(name)
        assert m.precision == precision, name
        # 16-bit matmuls are labelled float16 where the table records no torch_dtype (gpt-oss-20b)
        assert m.compute_dtype == compute or {m.compute_dtype, compute} == {"float16", "bfloat16"}, name
        assert 0.5 < m.weight_bytes_per_param < 0.8 or precision == "bfloat16", name
        assert doc[name]["facts"]["source"], name
    for name in list(expect)[:5]:
        assert "derived: base model" in doc[name]["facts"]["source"]
        assert "holtmann" in doc[name]["facts"]["source"]
