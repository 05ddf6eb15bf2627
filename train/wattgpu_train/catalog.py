"""Build ``specs.json`` (the catalog) from the spec tables in ``data/catalog/`` and ``data/paper/``.

Facts are copied with their source; the only derived values are flagged in each entry's ``derived``
list (Pascal FP16 rate, assumed serving dtype). Every LLM spec comes from the runtime's config reader
(``wattgpu.hfconfig.llm_from_hf_config``) fed the model's stored config.json (``llm_configs_raw/``) or
one built from its ``llm_configs.csv`` row, so a catalog id and its config.json give the same spec.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from dataclasses import replace
from typing import Any

from wattgpu.checks import NO_KV_CACHE
from wattgpu.hfconfig import llm_from_hf_config

CATALOG_VERSION = "2026.12.1"
GPU_TABLE = "gpu_specs.csv"
LLM_TABLE = "llm_configs.csv"
PAPER_MODELS = "model_features.csv"
IDLE_TABLE = "idle_power.csv"
ATTENTION_TABLE = "llm_attention.csv"  # MLA widths the config table has no column for
RAW_CONFIGS = "llm_configs_raw"  # stored copies of models' own config.json (evidence files of the shared catalog)
INTERCONNECT_TABLE = "interconnect.csv"
# Only idle figures measured with a CUDA context (a model loaded, no requests) describe a server between
# requests; "bare" figures (P8, no context) are kept in the table for reference and not used.
IDLE_STATE_USED = "loaded"

GPU_FACT_COLUMNS = (
    "compute_capability", "process_nm", "die_mm2", "memory_bus_bits", "tensor_cores", "module_power_w",
    "int8_tops_dense", "nvlink_gb_s", "pcie_gen", "sources", "notes",
)
LLM_FACT_COLUMNS = (
    "architectures", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace",
    "moe_layer_interval", "quant_method", "quant_weight_dtype", "params_method", "base_model",
    "card_total_params_b", "card_active_params_b", "card_params_source", "datasets", "notes",
)


def _num(value: str) -> float | None:
    value = value.strip()
    return float(value) if value else None


def _int(value: str) -> int | None:
    v = _num(value)
    return int(v) if v is not None else None


def read_idle_table(path: Path) -> dict[str, tuple[float, str]]:
    """Measured idle power by catalog GPU name: {name: (watts, "source; note")}, usable rows only."""
    if not path.exists():
        return {}
    out: dict[str, tuple[float, str]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["state"].strip() != IDLE_STATE_USED:
                continue
            name = row["gpu"].strip()
            if name in out:
                raise ValueError(f"{path.name}: {name!r} listed twice")
            out[name] = (float(row["idle_w"]), f"{row['source'].strip()} ({row['note'].strip()})")
    return out


def read_interconnect_table(path: Path) -> dict[str, dict[str, str]]:
    """Tensor-parallel group facts by catalog GPU name (``interconnect.csv``): NVLink domain size, PCIe
    lanes, largest group the form factor comes in, sources and assumptions."""
    if not path.exists():
        return {}
    out: dict[str, dict[str, str]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            name = row["name"].strip()
            if name in out:
                raise ValueError(f"{path.name}: {name!r} listed twice")
            out[name] = row
    return out


def interconnect_fields(row: dict[str, str], link: dict[str, str] | None) -> dict[str, Any]:
    """GpuSpec interconnect fields from the GPU row (NVLink GB/s, PCIe generation) and its interconnect row;
    a GPU without an interconnect row gets no group facts, so tensor parallelism is refused for it."""
    if link is None:
        return {"nvlink_gb_s": None, "nvlink_group": 0, "pcie_gen": _int(row["pcie_gen"]), "pcie_lanes": None,
                "max_group": None, "interconnect_source": None}
    nvlink = _num(row["nvlink_gb_s"])
    group = _int(link["nvlink_group"]) or 0
    return {
        "nvlink_gb_s": nvlink if group > 1 else None,  # an optional bridge that is not assumed installed
        "nvlink_group": group if nvlink else 0,
        "pcie_gen": _int(row["pcie_gen"]),
        "pcie_lanes": _int(link["pcie_lanes"]),
        "max_group": _int(link["max_group"]),
        "interconnect_source": f"data/catalog/{INTERCONNECT_TABLE}: {link['sources']} ({link['notes']})",
    }


def gpu_entry(row: dict[str, str], idle: dict[str, tuple[float, str]] | None = None,
              links: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """One catalog GPU: the feature-relevant spec plus the remaining facts and the row's sources."""
    derived: list[str] = []
    idle_w, idle_src = (idle or {}).get(row["name"], (None, None))
    fp16 = _num(row["fp16_tensor_tflops_dense"])
    if fp16 is None and row["architecture"] == "Pascal":
        fp16 = 2.0 * float(row["fp32_tflops"])
        derived.append("fp16_tflops = 2 x fp32_tflops: Pascal has no tensor cores; GP100 runs FP16 at twice "
                       "the FP32 rate (gpu_specs.csv notes)")
    spec = {
        "name": row["name"],
        "aliases": [a.strip() for a in row["aliases"].split("|") if a.strip()],
        "architecture": row["architecture"],
        "form_factor": row["form_factor"],
        "release_year": int(row["release_year"]),
        "tdp_w": float(row["tdp_w"]),
        "memory_size_gb": float(row["memory_size_gb"]),
        "memory_type": row["memory_type"],
        "memory_bandwidth_gb_s": float(row["memory_bandwidth_gb_s"]),
        "fp16_tflops": fp16,
        "bf16_tflops": _num(row["bf16_tensor_tflops_dense"]),
        "fp8_tflops": _num(row["fp8_tensor_tflops_dense"]),
        "fp4_tflops": _num(row["fp4_tensor_tflops_dense"]),
        "fp32_tflops": _num(row["fp32_tflops"]),
        "base_clock_mhz": _num(row["base_clock_mhz"]),
        "boost_clock_mhz": _num(row["boost_clock_mhz"]),
        "transistors_million": _num(row["transistors_million"]),
        "l2_cache_mb": _num(row["l2_cache_mb"]),
        "sm_count": _int(row["sm_count"]),
        "idle_power_w": idle_w,
        "idle_power_source": idle_src,
        "source": f"data/catalog/{GPU_TABLE}",
        **interconnect_fields(row, (links or {}).get(row["name"])),
    }
    facts = {k: row[k] for k in GPU_FACT_COLUMNS if row.get(k)}
    return {"name": row["name"], "spec": spec, "facts": facts, "derived": derived}


def read_attention_table(path: Path) -> dict[str, dict[str, str]]:
    if not path.exists():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {r["hf_id"]: r for r in csv.DictReader(f)}


def read_raw_configs(folder: Path) -> dict[str, dict[str, Any]]:
    """Evidence files ``<owner>--<name>.json`` (``{"hf_id", "source", "config", ...}``) by Hugging Face id."""
    out: dict[str, dict[str, Any]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        out[doc["hf_id"]] = doc
    return out


def quantization_config(row: dict[str, str]) -> dict[str, Any] | None:
    """The ``quantization_config`` a catalog row's ``quant_method`` / ``quant_weight_dtype`` describe (None =
    16-bit). The runtime's reader (``wattgpu.quant``) turns it into bytes and matmul dtype."""
    method = (row["quant_method"] or "").strip().lower()
    dtype = (row["quant_weight_dtype"] or "").strip().lower()
    if not method:
        return None
    if method == "modelopt":
        algo = "NVFP4" if dtype.startswith("nvfp4") else "FP8" if dtype.startswith("fp8") else dtype.upper()
        return {"quant_method": "modelopt", "quant_algo": algo, "group_size": 16, "exclude_modules": ["lm_head"]}
    if method == "compressed-tensors" and dtype.startswith("int4"):
        return {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                "config_groups": {"group_0": {"targets": ["Linear"],
                                              "weights": {"num_bits": 4, "type": "int", "group_size": 128,
                                                          "symmetric": True}}}}
    if method.startswith("fp8"):
        return {"quant_method": "fp8"}
    return {"quant_method": method.split()[0]}


_ROW_INT_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                 "head_dim", "vocab_size", "max_position_embeddings", "num_experts", "num_experts_per_tok",
                 "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layer_interval",
                 "sliding_window")


def config_from_row(row: dict[str, str], attention: dict[str, str] | None) -> tuple[dict[str, Any], list[str]]:
    """A Hugging Face style config.json built from a catalog row (plus its MLA widths), and the assumptions made."""
    derived: list[str] = []
    cfg: dict[str, Any] = {"model_type": row["model_type"]}
    if row["architectures"]:
        cfg["architectures"] = [a.strip() for a in row["architectures"].split("|") if a.strip()]
    for key in _ROW_INT_KEYS:
        value = _int(row[key])
        if value is not None:
            cfg[key] = value
    if "vocab_size" not in cfg:
        cfg["vocab_size"] = 32000
        derived.append("vocab_size = 32000: not recorded (LLaMA-1 base value)")
    if row["tie_word_embeddings"].strip():
        cfg["tie_word_embeddings"] = row["tie_word_embeddings"].strip().lower() == "true"
    cfg["torch_dtype"] = row["torch_dtype"] or "float16"
    if not row["torch_dtype"]:
        derived.append("precision = float16: the config records no torch_dtype; 16-bit serving assumed")
    quant = quantization_config(row)
    if quant is not None:
        cfg["quantization_config"] = quant
    if attention:
        cfg["kv_lora_rank"] = int(attention["kv_lora_rank"])
        cfg["qk_rope_head_dim"] = int(attention["qk_rope_head_dim"])
    return cfg, derived


# Other spellings of a row key that config.json files use (as wattgpu.hfconfig reads them): a copy holding
# any of them already defines the field, so the row does not fill it.
_ALIASES = {
    "num_hidden_layers": ("n_layer", "n_layers", "num_layers"), "hidden_size": ("n_embd", "d_model"),
    "num_attention_heads": ("n_head", "n_heads", "num_heads"),
    "num_key_value_heads": ("num_kv_heads", "n_head_kv", "multi_query_group_num", "multi_query", "attn_config"),
    "intermediate_size": ("n_inner", "d_ff", "ffn_hidden_size", "ff_intermediate_size", "expansion_ratio"),
    "head_dim": ("d_kv",), "max_position_embeddings": ("n_positions", "max_seq_len", "context_length", "seq_length"),
    "num_experts": ("num_local_experts", "n_routed_experts", "moe_num_experts"),
    "num_experts_per_tok": ("experts_per_token", "moe_top_k", "top_k"),
    "moe_layer_interval": ("moe_layer_freq", "interleave_moe_layer_step", "decoder_sparse_step"),
    "n_shared_experts": ("num_shared_experts", "shared_expert_intermediate_size"),
    "torch_dtype": ("dtype",), "sliding_window": ("sliding_window_size",),
}


def counted_from_architecture(row: dict[str, str]) -> bool:
    """Whether the row's parameter counts are the config reader's count from the architecture (params_method
    "computed from config ..."): the catalog then uses the reader's own count, the table stores it rounded."""
    return row["params_method"].startswith("computed from config")


def llm_config(row: dict[str, str], raw: dict[str, Any] | None,
               attention: dict[str, str] | None) -> tuple[dict[str, Any], list[str]]:
    """The config.json the catalog feeds the runtime's reader for one LLM: the stored copy of the model's own
    config when there is one, with the row's fields filling the keys a partial copy lacks (quantisation,
    KV heads, vocabulary...), else the row's fields alone."""
    row_cfg, derived = config_from_row(row, attention)
    if raw is None:
        return row_cfg, derived
    copy = dict(raw["config"])
    inner = copy.get("text_config") if isinstance(copy.get("text_config"), dict) else copy
    filled = sorted(k for k in row_cfg if not any(a in inner or a in copy for a in (k, *_ALIASES.get(k, ()))))
    cfg = {**{k: row_cfg[k] for k in filled}, **copy}
    derived = [f"config: the data/catalog/{RAW_CONFIGS}/ copy"]
    if filled:
        derived.append(f"keys the config copy lacks, from the {LLM_TABLE} row: {', '.join(filled)}")
    return cfg, derived


def llm_entry(row: dict[str, str], paper: dict[str, dict[str, str]],
              attention: dict[str, dict[str, str]] | None = None,
              raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """One catalog LLM: the LlmSpec the runtime's config reader (``wattgpu.hfconfig``) derives from its
    config (parameters, weight bytes, KV layout, sliding-window layers, matmul dtype), or why it cannot be
    modelled; facts and source."""
    name = row["hf_id"]
    facts = {k: row[k] for k in LLM_FACT_COLUMNS if row.get(k)}
    facts["confidence"] = row["confidence"]
    facts["source"] = row["source"]
    if name in paper:
        facts["paper_model"] = True
        facts["model_upload_date"] = paper[name].get("model_upload_date", "")
    mla = (attention or {}).get(name)
    if mla:
        facts["attention_source"] = mla["source"]
    cfg, derived = llm_config(row, raw, mla)
    base = {"name": name, "facts": facts, "derived": derived}
    if row["arch_class"] in NO_KV_CACHE:
        return {**base, "spec": None, "unsupported_reason": f"{NO_KV_CACHE[row['arch_class']]} has no attention or KV cache"}
    spec = llm_from_hf_config(cfg, name, source=f"data/catalog/{LLM_TABLE} ({row['confidence']} confidence)")
    if spec.arch_class != row["arch_class"]:
        raise ValueError(f"{LLM_TABLE}: {name} arch_class {row['arch_class']!r} but its config reads as {spec.arch_class!r}")
    if raw is None and not counted_from_architecture(row):
        # No copy of the model's config and a row without the family extras the reader needs for an exact
        # count (shared-expert widths, hybrid layer patterns): the table's counts (params_method) are kept.
        spec = replace(spec, total_params_b=float(row["total_params_b"]), active_params_b=float(row["active_params_b"]))
        derived.append(f"total/active params from {LLM_TABLE} ({row['params_method']}): the row cannot describe "
                       "the architecture exactly")
    out = replace(spec, confidence=row["confidence"]).to_dict()
    # leave out what equals the reader's default (all layers hold KV; no MLA; no window split) to keep the
    # catalog small; LlmSpec fills them in again
    for key, default in (("kv_layers", spec.num_layers), ("kv_lora_rank", 0), ("qk_rope_head_dim", 0),
                         ("sliding_window_layers", None)):
        if out[key] == default:
            del out[key]
    return {**base, "spec": out}


def build_specs(catalog_dir: Path, paper_dir: Path) -> dict[str, Any]:
    """The whole catalog as a JSON-ready dict (deterministic order)."""
    idle = read_idle_table(catalog_dir / IDLE_TABLE)
    links = read_interconnect_table(catalog_dir / INTERCONNECT_TABLE)
    with open(catalog_dir / GPU_TABLE, newline="", encoding="utf-8") as f:
        gpus = [gpu_entry(r, idle, links) for r in csv.DictReader(f)]
    for table, names in ((IDLE_TABLE, idle), (INTERCONNECT_TABLE, links)):
        unknown = sorted(set(names) - {g["name"] for g in gpus})
        if unknown:
            raise ValueError(f"{table}: GPUs not in {GPU_TABLE}: {unknown}")
    with open(paper_dir / PAPER_MODELS, newline="", encoding="utf-8") as f:
        paper = {r["model_name"]: r for r in csv.DictReader(f, delimiter=";")}
    raws = read_raw_configs(catalog_dir / RAW_CONFIGS)
    with open(catalog_dir / LLM_TABLE, newline="", encoding="utf-8") as f:
        attention = read_attention_table(catalog_dir / ATTENTION_TABLE)
        llms = [llm_entry(r, paper, attention, raws.get(r["hf_id"])) for r in csv.DictReader(f)]
    names = {m["name"] for m in llms}
    missing = sorted(set(paper) - names)
    if missing:
        raise ValueError(f"paper models missing from {LLM_TABLE}: {missing}")
    return {
        "catalog_version": CATALOG_VERSION,
        "units": {"tdp_w": "W", "memory_size_gb": "GB (NVIDIA marketing GB)", "memory_bandwidth_gb_s": "GB/s (decimal)",
                  "nvlink_gb_s": "GB/s, total bidirectional NVLink per GPU (datasheet)",
                  "fp16_tflops": "dense FP16 tensor TFLOPS, FP32 accumulate", "params": "billions"},
        "sources": {
            "gpus": f"data/catalog/{GPU_TABLE}: NVIDIA datasheets and TechPowerUp, cross-checked (data/catalog/README.md)",
            "llms": f"data/catalog/{LLM_TABLE}: Hugging Face config.json copies, per-row source in facts.source",
            "idle_power": f"data/catalog/{IDLE_TABLE}: measured idle power with a model loaded, per-row source",
            "interconnect": f"data/catalog/{INTERCONNECT_TABLE}: NVLink domain, PCIe lanes and largest group per GPU, "
                            "per-row sources and assumptions (data/catalog/README_interconnect.md)",
            "paper_models": f"data/paper/{PAPER_MODELS}: github:maufadel/wattgpu@4e010359c167ac8c65b55aabd1aafbf765ae5d91",
        },
        "gpus": gpus,
        "llms": llms,
    }


def write_specs(out: Path, catalog_dir: Path, paper_dir: Path) -> dict[str, Any]:
    data = build_specs(catalog_dir, paper_dir)
    out.write_text(json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")
    return data
