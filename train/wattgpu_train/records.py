"""The one table every measurement loader produces (one row per measured configuration).

Loaders (``measurements.py`` for ``data/``, ``watt_counts.py`` for the paper's file) return a
pandas DataFrame with exactly these columns; everything downstream (dataset → features → fit →
evaluate) reads only them.
"""
from __future__ import annotations

# column -> (dtype kind, meaning)
RECORD_COLUMNS: dict[str, tuple[str, str]] = {
    "row_id": ("str", "stable id: '<source>:<index in the source file>'"),
    "source": ("str", "dataset name (mlenergy_v1, mlenergy_v2, mlenergy_v3, argonne, llm_pilot, llmperf_techgrandpa, watt_counts)"),
    "llm": ("str", "catalog LLM id (Hugging Face id)"),
    "gpu": ("str", "catalog GPU canonical name (specs.json)"),
    "kind": ("str", "workload kind: offline | server | closed_loop"),
    "scenario": ("str", "source scenario label (paper: offline / server_low / server_high)"),
    "engine": ("str", "canonical engine: vllm | hf_transformers | tgi | tensorrt_llm | deepspeed_mii"),
    "max_batch": ("float", "engine concurrency cap (vLLM max_num_seqs); 256 when the source uses the default"),
    "concurrency": ("float", "measured mean running batch, fixed batch, or closed-loop users; NaN if unknown"),
    "qps": ("float", "Poisson arrival rate (server rows); NaN otherwise"),
    "num_requests": ("float", "requests in an offline run when known; NaN otherwise"),
    "input_tokens": ("float", "mean prompt tokens per request"),
    "output_tokens": ("float", "mean generated tokens per request"),
    "power_w": ("float", "mean board power per GPU (W); NaN when not measured"),
    "itl_s": ("float", "per-sequence inter-token latency (s/token); NaN when not measured"),
    "system_s_per_token": ("float", "1 / output throughput of the whole run (s/token); NaN when not measured"),
    "itl_stat": ("str", "which statistic itl_s is (mean, median, mean incl. prefill, ...)"),
    "itl_statistic": ("str", "itl_stat reduced to the model input Workload.itl_stat: mean | median"),
    "engine_era": ("str", "serving-stack era (Workload.engine_era): legacy (before vLLM 0.6) | current"),
}


def check_records(df: "object") -> None:
    """Raise ValueError when a loader's DataFrame lacks a column of the record schema."""
    missing = [c for c in RECORD_COLUMNS if c not in getattr(df, "columns", ())]
    if missing:
        raise ValueError(f"measurement records lack columns: {', '.join(missing)}")
