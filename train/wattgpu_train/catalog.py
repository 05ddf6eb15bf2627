"""Build ``specs.json`` (the catalog) from the spec tables in ``data/catalog/`` and ``data/paper/``.

Facts are copied with their source; the only derived values are flagged in each entry's ``derived``
list (Pascal FP16 rate, weight bytes of quantised checkpoints, assumed serving dtype).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

CATALOG_VERSION = "2026.12.1"
GPU_TABLE = "gpu_specs.csv"
LLM_TABLE = "llm_configs.csv"
PAPER_MODELS = "model_features.csv"
IDLE_TABLE = "idle_power.csv"
ATTENTION_TABLE = "llm_attention.csv"  # MLA widths the config table has no column for
# Only idle figures measured with a CUDA context (a model loaded, no requests) describe a server between
# requests; "bare" figures (P8, no context) are kept in the table for reference and not used.
IDLE_STATE_USED = "loaded"

GPU_FACT_COLUMNS = (
    "compute_capability", "process_nm", "die_mm2", "memory_bus_bits", "tensor_cores",
    "int8_tops_dense", "nvlink_gb_s", "pcie_gen", "sources", "notes",
)
LLM_FACT_COLUMNS = (
    "architectures", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace",
    "moe_layer_interval", "quant_method", "quant_weight_dtype", "params_method", "base_model",
    "card_total_params_b", "card_active_params_b", "card_params_source", "datasets", "notes",
)
NO_ATTENTION = {"rnn_rwkv": "RWKV is a recurrent network without attention or KV cache",
                "ssm_mamba": "pure Mamba state-space model without attention or KV cache"}


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


def gpu_entry(row: dict[str, str], idle: dict[str, tuple[float, str]] | None = None) -> dict[str, Any]:
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
        "fp32_tflops": _num(row["fp32_tflops"]),
        "base_clock_mhz": _num(row["base_clock_mhz"]),
        "boost_clock_mhz": _num(row["boost_clock_mhz"]),
        "transistors_million": _num(row["transistors_million"]),
        "l2_cache_mb": _num(row["l2_cache_mb"]),
        "sm_count": _int(row["sm_count"]),
        "idle_power_w": idle_w,
        "idle_power_source": idle_src,
        "source": f"data/catalog/{GPU_TABLE}",
    }
    facts = {k: row[k] for k in GPU_FACT_COLUMNS if row.get(k)}
    return {"name": row["name"], "spec": spec, "facts": facts, "derived": derived}


def _sliding_layers(row: dict[str, str]) -> tuple[int | None, list[str]]:
    """KV layers that use the sliding window, by family (None = every layer, as Mistral/Phi-3/StarCoder2)."""
    layers, family = int(row["num_hidden_layers"]), row["model_type"]
    if not _int(row["sliding_window"]):
        return None, []
    if family in ("gemma2", "gpt_oss"):
        n = (layers + 1) // 2
        return n, [f"sliding_window_layers = {n}: {family} alternates sliding and full attention (even layers slide)"]
    if family in ("gemma3", "gemma3_text"):
        n = layers - layers // 6
        return n, [f"sliding_window_layers = {n}: Gemma 3 has one global layer in every 6 (sliding_window_pattern 6)"]
    return None, []


def _compute_dtype(row: dict[str, str]) -> str:
    """Matmul dtype as served: FP8 checkpoints run W8A8 FP8 (vLLM), everything else 16-bit."""
    quant = (row["quant_method"] or "").lower()
    return "fp8" if "fp8" in quant else "bfloat16"


def read_attention_table(path: Path) -> dict[str, dict[str, str]]:
    if not path.exists():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {r["hf_id"]: r for r in csv.DictReader(f)}


def _weight_bytes(row: dict[str, str]) -> tuple[float, bool, list[str]]:
    """Bytes per parameter of the checkpoint as served, and whether it is quantised."""
    quant = (row["quant_method"] or "").lower()
    if not quant:
        return 2.0, False, []
    if quant.startswith("fp8") or "fp8" in quant:
        return 1.0, True, ["weight_bytes_per_param = 1.0 (FP8 checkpoint; scales ignored); precision fp8, "
                           "compute_dtype fp8 (W8A8)"]
    if "mxfp4" in quant:
        # Experts in MXFP4 (4 bits + one shared 8-bit scale per 32 values = 4.25 bits), the rest bf16.
        layers, hidden = int(row["num_hidden_layers"]), int(row["hidden_size"])
        experts, inter = int(row["num_experts"]), int(row["moe_intermediate_size"] or row["intermediate_size"])
        expert_b = layers * experts * 3 * hidden * inter / 1e9
        total_b = float(row["total_params_b"])
        share = min(expert_b / total_b, 1.0)
        wb = share * 4.25 / 8 + (1 - share) * 2.0
        return round(wb, 4), True, [f"weight_bytes_per_param = {wb:.3f}: MXFP4 experts ({share:.1%} of params) "
                                    "at 4.25 bits, other weights bf16"]
    return 2.0, True, [f"unrecognised quantisation {quant!r}: weight bytes assumed 2.0"]


def llm_entry(row: dict[str, str], paper: dict[str, dict[str, str]],
              attention: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """One catalog LLM: LlmSpec fields (or why it cannot be modelled), facts and source."""
    name = row["hf_id"]
    derived: list[str] = []
    facts = {k: row[k] for k in LLM_FACT_COLUMNS if row.get(k)}
    facts["confidence"] = row["confidence"]
    facts["source"] = row["source"]
    if name in paper:
        facts["paper_model"] = True
        facts["model_upload_date"] = paper[name].get("model_upload_date", "")
    base = {"name": name, "facts": facts, "derived": derived}
    if row["arch_class"] in NO_ATTENTION:
        return {**base, "spec": None, "unsupported_reason": NO_ATTENTION[row["arch_class"]]}
    dtype = row["torch_dtype"]
    if not dtype:
        dtype = "float16"
        derived.append("precision = float16: the config records no torch_dtype; 16-bit serving assumed")
    vocab = _int(row["vocab_size"])
    if vocab is None:
        vocab = 32000
        derived.append("vocab_size = 32000: not recorded (LLaMA-1 base value); parameter count is the nominal one")
    wb, quantized, notes = _weight_bytes(row)
    derived.extend(notes)
    if "fp8" in (row["quant_method"] or "").lower():
        dtype = "fp8"
    elif "mxfp4" in (row["quant_method"] or "").lower():
        dtype = "mxfp4"
    sliding_layers, notes = _sliding_layers(row)
    derived.extend(notes)
    mla = (attention or {}).get(name)
    if mla:
        facts["attention_source"] = mla["source"]
    experts = _int(row["num_experts"]) or 0
    spec = {
        "name": name,
        "model_type": row["model_type"],
        "arch_class": row["arch_class"],
        "num_layers": int(row["num_hidden_layers"]),
        "hidden_size": int(row["hidden_size"]),
        "intermediate_size": _int(row["intermediate_size"]) or 0,
        "num_attention_heads": int(row["num_attention_heads"]),
        "num_kv_heads": int(row["num_key_value_heads"]),
        "head_dim": _int(row["head_dim"]) or 0,
        "vocab_size": vocab,
        "max_position_embeddings": _int(row["max_position_embeddings"]),
        "tie_word_embeddings": row["tie_word_embeddings"].strip().lower() == "true",
        "num_experts": experts,
        "experts_per_tok": _int(row["num_experts_per_tok"]) or 0,
        "sliding_window": _int(row["sliding_window"]),
        "total_params_b": float(row["total_params_b"]),
        "active_params_b": float(row["active_params_b"]),
        "weight_bytes_per_param": wb,
        "precision": dtype,
        "quantized": quantized,
        "source": f"data/catalog/{LLM_TABLE} ({row['confidence']} confidence)",
        "confidence": row["confidence"],
        "compute_dtype": _compute_dtype(row),
    }
    if sliding_layers is not None:
        spec["sliding_window_layers"] = sliding_layers
    if mla:
        spec["kv_lora_rank"] = int(mla["kv_lora_rank"])
        spec["qk_rope_head_dim"] = int(mla["qk_rope_head_dim"])
    return {**base, "spec": spec}


def build_specs(catalog_dir: Path, paper_dir: Path) -> dict[str, Any]:
    """The whole catalog as a JSON-ready dict (deterministic order)."""
    idle = read_idle_table(catalog_dir / IDLE_TABLE)
    with open(catalog_dir / GPU_TABLE, newline="", encoding="utf-8") as f:
        gpus = [gpu_entry(r, idle) for r in csv.DictReader(f)]
    unknown = sorted(set(idle) - {g["name"] for g in gpus})
    if unknown:
        raise ValueError(f"{IDLE_TABLE}: GPUs not in {GPU_TABLE}: {unknown}")
    with open(paper_dir / PAPER_MODELS, newline="", encoding="utf-8") as f:
        paper = {r["model_name"]: r for r in csv.DictReader(f, delimiter=";")}
    with open(catalog_dir / LLM_TABLE, newline="", encoding="utf-8") as f:
        attention = read_attention_table(catalog_dir / ATTENTION_TABLE)
        llms = [llm_entry(r, paper, attention) for r in csv.DictReader(f)]
    names = {m["name"] for m in llms}
    missing = sorted(set(paper) - names)
    if missing:
        raise ValueError(f"paper models missing from {LLM_TABLE}: {missing}")
    return {
        "catalog_version": CATALOG_VERSION,
        "units": {"tdp_w": "W", "memory_size_gb": "GB (NVIDIA marketing GB)", "memory_bandwidth_gb_s": "GB/s (decimal)",
                  "fp16_tflops": "dense FP16 tensor TFLOPS, FP32 accumulate", "params": "billions"},
        "sources": {
            "gpus": f"data/catalog/{GPU_TABLE}: NVIDIA datasheets and TechPowerUp, cross-checked (data/catalog/README.md)",
            "llms": f"data/catalog/{LLM_TABLE}: Hugging Face config.json copies, per-row source in facts.source",
            "idle_power": f"data/catalog/{IDLE_TABLE}: measured idle power with a model loaded, per-row source",
            "paper_models": f"data/paper/{PAPER_MODELS}: github:maufadel/wattgpu@4e010359c167ac8c65b55aabd1aafbf765ae5d91",
        },
        "gpus": gpus,
        "llms": llms,
    }


def write_specs(out: Path, catalog_dir: Path, paper_dir: Path) -> dict[str, Any]:
    data = build_specs(catalog_dir, paper_dir)
    out.write_text(json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")
    return data
