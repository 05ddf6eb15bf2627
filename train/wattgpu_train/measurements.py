"""Load the public measurement sets in ``data/`` into the record schema (``records.RECORD_COLUMNS``).

Eight sources are read from ``data/<source>/rows.csv`` (copied unchanged from the shared data folder):
``mlenergy_v1``, ``mlenergy_v2``, ``mlenergy_v3``, ``argonne``, ``llm_pilot``,
``llmperf_techgrandpa``, ``holtmann_consumer_gpu`` and ``brunetta_llm_inference_power``. Each row is mapped to the record schema by a per-source function (engine,
engine era, workload kind, concurrency, which ITL statistic), GPUs are mapped through the reviewed table ``data/gpu_map.csv`` and LLMs are checked
against ``data/catalog/llm_configs.csv``. Then the ordered rules in :data:`EXCLUSIONS` drop rows or
blank out a target that cannot be used. ``data/README.md`` explains every decision and lists the
row counts; :func:`exclusion_report` recomputes the per-rule counts.

Extra columns kept after the record columns (all prefixed ``x_``): ``x_precision`` (weight format
as served: float16, bfloat16, float16|bfloat16, fp8, mxfp4, or ``float16 (assumed)``), ``x_dtype`` (the
runtime's ``--dtype`` the row was served at where its catalog LLM id is a 16-bit config: ``fp8`` for the FP8 runs
of a BF16 catalog LLM, ``auto`` where the catalog row already says how the weights are stored; the dataset
builder applies it through ``wattgpu.quant.with_dtype``, so an FP8 row's features read 1 byte per weight),
``x_num_gpus``, ``x_task``, ``x_source_gpu`` (the GPU string as the source spells it),
``x_llm_source_name``, ``x_tp`` (tensor-parallel degree; power_w is per GPU, itl_s per sequence) and
``x_ttft_mean_s`` (mean time to first token as the client sees it, queueing included, where the source
measured it, else NaN), and the row's measurement protocol: ``x_power_window`` (what the power is an
average over: ``steady_state``, ``active_generation``, ``whole_run`` or ``none``) and ``x_ttft_def`` (what
the source's TTFT counts: ``client``, ``static_batch``, ``excl_queueing`` or ``none``). A TTFT that
excludes queueing is kept apart in ``x_ttft_sched_s`` so it never scores the client-side TTFT.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .records import RECORD_COLUMNS, check_records

SOURCES: tuple[str, ...] = ("mlenergy_v1", "mlenergy_v2", "mlenergy_v3", "argonne", "llm_pilot", "llmperf_techgrandpa",
                             "holtmann_consumer_gpu", "brunetta_llm_inference_power")
HOLTMANN = "holtmann_consumer_gpu"
BRUNETTA = "brunetta_llm_inference_power"
# LLMs a source measured that the catalog does not carry: their rows are dropped by the rule
# ``llm_not_in_catalog`` (counted), any other unknown LLM is an error.
_NOT_IN_CATALOG = {("llmperf_techgrandpa", "Qwen/Qwen2.5-Coder-14B-Instruct"),
                   # not in the shared catalog (../shared/data/catalog/llm_configs) either, so no cited config
                   (BRUNETTA, "mistralai/Ministral-8B-Instruct-2410"),
                   (BRUNETTA, "mistralai/Mistral-Small-3.1-24B-Instruct-2503"), (BRUNETTA, "Qwen/QwQ-32B")}
DECODER_ARCH_CLASSES = ("decoder_transformer", "decoder_moe_transformer")
EXTRA_COLUMNS = ("x_precision", "x_dtype", "x_num_gpus", "x_task", "x_source_gpu", "x_llm_source_name", "x_tp", "x_ttft_mean_s",
                 "x_ttft_sched_s", "x_power_window", "x_ttft_def")
# Measurement protocol per source (data/README.md "Measurement protocol"): the window the power is averaged
# over and what the TTFT counts. Today's vLLM user measures steady-state power and the client's TTFT.
POWER_WINDOW = {"mlenergy_v1": "active_generation", "mlenergy_v2": "steady_state", "mlenergy_v3": "steady_state",
                "argonne": "whole_run", "llm_pilot": "none", "llmperf_techgrandpa": "none",
                HOLTMANN: "steady_state", BRUNETTA: "whole_run"}
TTFT_DEF = {"mlenergy_v1": "none", "mlenergy_v2": "none", "mlenergy_v3": "none", "argonne": "static_batch",
            "llm_pilot": "client", "llmperf_techgrandpa": "client", HOLTMANN: "client", BRUNETTA: "excl_queueing"}

# Engine strings of the argonne `engine` column -> canonical names (workload.ENGINES).
_ARGONNE_ENGINES = {"vllm": "vllm", "tensorrt-llm": "tensorrt_llm", "deepspeed-mii": "deepspeed_mii"}
# Requests per offline run where the source states it (mlenergy_v2 README: chat = 500 ShareGPT prompts).
_V2_REQUESTS = {"chat": 500.0}


class MeasurementDataError(ValueError):
    """A row of a source file cannot be mapped (unknown LLM, unmapped GPU, unknown engine...)."""


# --------------------------------------------------------------------------------------------
# exclusion rules
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """One exclusion decision.

    ``predicate`` gets the working frame (record columns plus helper columns starting with ``_``)
    and returns a boolean Series: True marks the rows the rule acts on. ``action`` is ``drop``
    (remove the row), ``mask:<column>`` (set that target to NaN, keep the row) or ``score_only`` (move the row
    out of the training records into the scored-apart ones, :func:`load_scored_apart`: evaluate predicts it with
    fold models that never trained on such rows).
    """

    name: str
    reason: str
    predicate: Callable[[pd.DataFrame], pd.Series]
    action: str = "drop"
    only_if_single_gpu: bool = False


def _is(df: pd.DataFrame, source: str) -> pd.Series:
    return df["source"] == source


EXCLUSIONS: list[Rule] = [
    Rule(
        "holtmann_no_metadata",
        "holtmann_consumer_gpu: one RTX 5090 run has no metadata.json (README: LLM unknown, latency only); its "
        "LLM and concurrency are not recorded and are not guessed from the folder name.",
        lambda d: _is(d, HOLTMANN) & (d["llm"] == ""),
    ),
    Rule(
        "not_tensor_parallel",
        "Multi-GPU runs that are not one tensor-parallel group (pipeline stages, data or expert parallelism: "
        "num_gpus != tensor_parallel or pipeline_parallel > 1) spread work in ways the TP features do not describe.",
        lambda d: (d["_num_gpus"] != d["x_tp"]) | (d["_pipeline_parallel"] > 1),
    ),
    Rule(
        "multi_gpu",
        "WattGPU's paper and feature set describe one GPU; power/ITL of tensor- or pipeline-parallel "
        "runs depend on interconnect and sharding that the features do not carry.",
        lambda d: d["_num_gpus"] != 1,
        only_if_single_gpu=True,
    ),
    Rule(
        "llm_not_in_catalog",
        "llmperf_techgrandpa's Qwen2.5-Coder-14B-Instruct runs (RTX A6000 and RTX 6000 Ada only) and "
        "brunetta_llm_inference_power's Ministral-8B-Instruct-2410, Mistral-Small-3.1-24B-Instruct-2503 and QwQ-32B "
        "runs: the models are not in data/catalog/llm_configs.csv (nor in the shared catalog), so their features "
        "cannot be computed.",
        lambda d: d["_arch_class"].isna(),
    ),
    Rule(
        "non_decoder_architecture",
        "Only decoder-only transformers (dense or MoE) are modelled; encoder-decoder (T5/UL2/mt0/"
        "fastchat-t5), RWKV, Mamba and Mamba-transformer hybrids have a different cost per token "
        "(arch_class from data/catalog/llm_configs.csv).",
        lambda d: ~d["_arch_class"].isin(DECODER_ARCH_CLASSES),
    ),
    Rule(
        "llm_pilot_broken_run",
        "llm_pilot README: llama-7b on 1xA10 at 64 users has median ITL 1.18 s with 86% of requests "
        "failing (0.16 s at 128 users); the run is broken.",
        lambda d: _is(d, "llm_pilot") & (d["x_llm_source_name"] == "llama-7b") & (d["x_source_gpu"] == "A10")
        & (d["_num_gpus"] == 1) & (d["concurrency"] == 64),
    ),
    Rule(
        "llm_pilot_failed_requests",
        "More than 5% of requests failed or were unfinished: the surviving requests are biased short "
        "(CUDA OOM at high load, 120 s cut-off), so their latency is not the run's latency.",
        lambda d: _is(d, "llm_pilot") & (d["_failed_fraction"] > 0.05),
    ),
    Rule(
        "argonne_itl_upper_bound",
        "Where no TTFT was measured, argonne's itl is batch latency / 1024, which includes the prefill "
        "of the whole static batch of 1024-token prompts; it is an upper bound, not a decode ITL.",
        lambda d: _is(d, "argonne") & d["_source_itl_stat"].str.startswith("derived upper bound"),
        action="mask:itl_s",
    ),
    Rule(
        "argonne_power_not_gpu0",
        "TensorRT-LLM (A100/H100) and DeepSpeed-MII probes sum power over every visible GPU of the "
        "node (power_scope != gpu0_only), so the value is not one GPU's power.",
        lambda d: _is(d, "argonne") & (d["_power_scope"] != "gpu0_only"),
        action="mask:power_w",
    ),
    Rule(
        "llmperf_repeat_not_median",
        "llmperf_techgrandpa repeats each (GPU, checkpoint) 3-5 times in a session and the first run is often "
        "a slow warm-up (high TTFT). One real run per (GPU, checkpoint, day) is kept: the one at the (lower) "
        "median of the TTFT-excluded ITL; the other repeats are dropped so no configuration counts 3-6 times.",
        lambda d: _is(d, "llmperf_techgrandpa") & ~d["_is_group_median"],
    ),
    Rule(
        "holtmann_fp8_kv_cache",
        "holtmann_consumer_gpu runs served with an FP8 KV cache (kv_cache_fp8 = True): the training records describe "
        "a 16-bit cache (Workload.kv_cache_dtype auto), so their KV bytes per token would be wrong by 2x.",
        lambda d: _is(d, HOLTMANN) & (d["_kv_cache_fp8"] == "True"),
    ),
    Rule(
        "brunetta_not_standard_run",
        "brunetta_llm_inference_power rows outside its standard job: the memory test (memory_test.csv, "
        "gpu_memory_utilization mostly below 0.9: KV budget cut; the revision that ran it may also have set "
        "max_num_batched_tokens=512, so its two rows at 0.9 go too) and the A100-SXM4-40GB "
        "synthetic rows (an older eager-mode harness whose engine is not certain; most runs last under 10 s).",
        lambda d: _is(d, BRUNETTA) & ((d["_gpu_mem_util"] < 0.9) | d["_source_file"].str.endswith("memory_test.csv")
                                      | (d["scenario"] != "offline_saturated_max_num_seqs")),
    ),
    Rule(
        "power_whole_run_window",
        "brunetta_llm_inference_power power is a whole-job average including the drain at the end, 8-21 % below "
        "ML.ENERGY's steady state for the same LLM and cap (its README). The power target is steady-state power "
        "(what a user of today's vLLM measures under load), so these values are kept out of the power target "
        "(x_power_window = whole_run); the row keeps its ITL.",
        lambda d: _is(d, BRUNETTA) & (d["x_power_window"] == "whole_run"),
        action="mask:power_w",
    ),
    Rule(
        "fp8_scored_apart",
        "FP8 runs of a BF16 catalog LLM (x_dtype fp8: llmperf_techgrandpa's neuralmagic ...-FP8 checkpoints, "
        "brunetta_llm_inference_power's online FP8) are scored, not trained on. Their features read 1 byte per "
        "weight (quant.with_dtype, as --dtype fp8), but measured FP8 saves far less than half the weight read "
        "(fp8/bf16 ITL 0.70-0.93 on H100, 0.75-1.6 with weight-only Marlin on A100 80GB): trained on, they made "
        "held-out FP8 ITL worse (LOGO 33.0 % vs 28.8 % scored apart) and 16-bit ITL LOGO worse (18.7 vs 17.5 % "
        "on the same rows); reports/fp8_experiments.md.",
        lambda d: d["x_dtype"] != "auto",
        action="score_only",
    ),
    Rule(
        "no_usable_target",
        "Neither power_w nor itl_s is left (e.g. argonne TRT-LLM/MII rows at batch 1/32/64 after the "
        "two masks above); the row cannot train anything.",
        lambda d: d["power_w"].isna() & d["itl_s"].isna(),
    ),
]


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------
def _read_rows(data_dir: Path, source: str) -> pd.DataFrame:
    path = data_dir / source / "rows.csv"
    if not path.is_file():
        raise FileNotFoundError(f"measurement file not found: {path}")
    return pd.read_csv(path, low_memory=False)


def read_source_rows(data_dir: str | Path, source: str) -> pd.DataFrame:
    """A source's rows.csv in file order, with the shared column names the loader reads (``num_gpus``,
    ``llm``, ``scenario``...) added where the source spells them differently (holtmann_consumer_gpu)."""
    raw = _read_rows(Path(data_dir), source)
    return _prepare_holtmann(raw) if source == HOLTMANN else raw


def read_gpu_map(data_dir: str | Path) -> dict[tuple[str, str], str]:
    """(source, GPU string as spelled in rows.csv) -> catalog GPU name, from ``data/gpu_map.csv``."""
    table = pd.read_csv(Path(data_dir) / "gpu_map.csv", dtype=str)
    keys = list(zip(table["source"], table["source_gpu_name"]))
    if len(set(keys)) != len(keys):
        raise MeasurementDataError("data/gpu_map.csv maps some (source, source_gpu_name) twice")
    return dict(zip(keys, table["catalog_gpu"]))


def _num(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce").astype(float)


def _nan(n: int) -> np.ndarray:
    return np.full(n, np.nan)


def _values(v):
    """A scalar stays a scalar (broadcast by the DataFrame); a Series becomes a plain array."""
    return v.to_numpy() if isinstance(v, pd.Series) else v


def _map_mlenergy_v1(raw: pd.DataFrame) -> dict:
    n = len(raw)
    return dict(
        kind="closed_loop",  # one request at a time, next sent when the last finishes
        engine="hf_transformers",
        max_batch=np.ones(n),
        concurrency=np.ones(n),
        num_requests=_nan(n),
        input_tokens=_nan(n),  # prompt lengths are not in the source
        power_w=_num(raw["mean_power_w"]),
        itl_s=_num(raw["itl_s"]),
        itl_stat="mean incl. one prefill (latency / response_length, batch 1)",
        x_precision="float16",
    )


def _map_mlenergy_v2(raw: pd.DataFrame) -> dict:
    return dict(
        kind="offline",
        engine="vllm",
        max_batch=_num(raw["max_num_seqs"]),
        concurrency=_num(raw["avg_batch_size"]),
        num_requests=raw["task"].map(_V2_REQUESTS).astype(float),
        input_tokens=_nan(len(raw)),  # not in the source
        power_w=_num(raw["mean_power_w"]),
        itl_s=_num(raw["itl_s"]),
        itl_stat="mean (TPOT)",
        x_precision="float16|bfloat16",  # "model default" per the README
    )


def _map_mlenergy_v3(raw: pd.DataFrame) -> dict:
    return dict(
        kind="offline",
        engine="vllm",
        max_batch=_num(raw["max_num_seqs"]),
        concurrency=_num(raw["avg_batch_size"]),
        num_requests=_nan(len(raw)),
        input_tokens=_nan(len(raw)),  # the leaderboard JSON has no prompt lengths; left NaN, not guessed
        power_w=_num(raw["mean_power_w"]),
        itl_s=_num(raw["itl_s"]),
        itl_stat="median",
        x_precision=raw["precision"].astype(str),
    )


def _map_argonne(raw: pd.DataFrame) -> dict:
    engines = raw["engine"].astype(str).str.strip().str.lower()
    unknown = sorted(set(engines) - set(_ARGONNE_ENGINES))
    if unknown:
        raise MeasurementDataError(f"argonne: unknown engine(s) {unknown}; known: {sorted(_ARGONNE_ENGINES)}")
    batch = _num(raw["batch_size"])
    upper = raw["itl_stat"].astype(str).str.startswith("derived upper bound")
    return dict(
        kind="offline",
        engine=engines.map(_ARGONNE_ENGINES),
        max_batch=batch,
        concurrency=batch,
        num_requests=batch,  # one static batch per run
        input_tokens=_num(raw["input_len_tokens"]),
        power_w=_num(raw["mean_power_w"]),
        itl_s=_num(raw["itl_s"]),
        itl_stat=np.where(upper, "upper bound incl. batch prefill (batch latency / 1024)",
                          "mean decode ((batch latency - TTFT) / 1023)"),
        x_precision=raw["precision"].astype(str),
    )


def _map_llmperf_techgrandpa(raw: pd.DataFrame) -> dict:
    n = len(raw)
    precision = raw["precision"].astype(str).str.upper().map({"BF16": "bfloat16", "FP8": "fp8"})
    return dict(
        kind="closed_loop",  # one wave: 64 requests sent at once by 64 concurrent clients
        engine="vllm",
        # Dec 2024 - Mar 2025 RunPod vLLM template (version not recorded): after vLLM 0.6 (Sept 2024).
        engine_era="current",
        max_batch=_nan(n),  # server flags not recorded (vLLM default 256 at the time)
        concurrency=_num(raw["concurrency"]),
        num_requests=_num(raw["completed_requests"]),
        input_tokens=_num(raw["input_len_tokens"]),
        power_w=_nan(n),  # no power in the source
        itl_s=_num(raw["itl_excl_ttft_from_means_s"]),  # README: itl_s includes the TTFT; use this column
        itl_stat="mean decode ((mean e2e - mean TTFT) / (mean output tokens - 1))",
        itl_statistic="mean",
        x_precision=precision.fillna(raw["precision"].astype(str)),
        # neuralmagic ...-FP8 checkpoints (compressed-tensors FP8 W8A8) of the BF16 catalog LLM
        x_dtype=np.where(precision == "fp8", "fp8", "auto"),
    )


# holtmann_consumer_gpu ``precision`` -> x_precision (weight format as served).
_HOLTMANN_PRECISION = {"nvfp4": "nvfp4", "mxfp4": "mxfp4", "w4a16": "int4 (w4a16)", "bf16": "bfloat16"}


def _map_holtmann(raw: pd.DataFrame) -> dict:
    n = len(raw)
    precision = raw["precision"].astype(str).str.lower()
    unknown = sorted(set(precision) - set(_HOLTMANN_PRECISION))
    if unknown:
        raise MeasurementDataError(f"{HOLTMANN}: unknown precision(s) {unknown}; known: {sorted(_HOLTMANN_PRECISION)}")
    return dict(
        kind="closed_loop",  # aiperf keeps `concurrency` streaming requests in flight
        engine="vllm",
        engine_era="current",  # vllm==0.12.0 (README, from the repository's Dockerfile)
        max_batch=_nan(n),  # max_num_seqs not recorded (vLLM default); the concurrency bounds the running batch
        concurrency=_num(raw["concurrency"]),
        num_requests=_nan(n),
        input_tokens=_num(raw["input_tokens"]),
        power_w=_num(raw["power_w"]),  # per GPU (DCGM), NaN where the telemetry file is missing
        itl_s=_num(raw["itl_s"]),  # aiperf mean ITL (first token excluded); itl_p50_s is the median
        itl_stat="mean over requests of aiperf inter-token latency (first token excluded)",
        itl_statistic="mean",
        x_precision=precision.map(_HOLTMANN_PRECISION),
    )


def _prepare_holtmann(raw: pd.DataFrame) -> pd.DataFrame:
    """Give holtmann's columns the shared names the generic frame reads (values unchanged)."""
    out = raw.copy()
    out["llm"] = raw["llm"].fillna("").astype(str)
    out["llm_source_name"] = out["llm"]
    out["scenario"] = "closed_loop_concurrency"
    out["arrival_rate_qps"] = np.nan
    out["output_len_tokens"] = raw["output_tokens"]
    out["system_s_per_token"] = 1.0 / _num(raw["tokens_per_s"])
    out["num_gpus"] = raw["gpu_count"]
    out["task"] = raw["workload"].astype(str) + np.where(raw["lora"].astype(str) == "True", " (LoRA adapters enabled)", "")
    out["itl_stat"] = "mean"
    return out


def _group_median_flags(raw: pd.DataFrame) -> np.ndarray:
    """llmperf: True for the one run per (GPU, checkpoint, day) at the lower median of the TTFT-excluded ITL."""
    itl = _num(raw["itl_excl_ttft_from_means_s"])
    day = raw["timestamp"].astype(str).str.slice(0, 10)
    keys = raw["gpu"].astype(str) + "|" + raw["llm_source_name"].astype(str) + "|" + day
    flags = np.zeros(len(raw), dtype=bool)
    for _, idx in keys.groupby(keys).groups.items():
        vals = itl.loc[idx].sort_values(kind="mergesort")
        flags[raw.index.get_indexer([vals.index[(len(vals) - 1) // 2]])] = True
    return flags


def _map_llm_pilot(raw: pd.DataFrame) -> dict:
    n = len(raw)
    return dict(
        kind="closed_loop",
        engine="tgi",  # TGIS, IBM's fork of HF TGI
        max_batch=_nan(n),  # per-GPU tuned TGIS max batch weight, not recorded
        concurrency=_num(raw["concurrent_users"]),
        num_requests=_nan(n),
        input_tokens=_num(raw["input_len_tokens"]),
        power_w=_nan(n),  # no power in the source
        itl_s=_num(raw["itl_req_mean_s"]),
        itl_stat="mean of per-request mean gaps (itl_req_mean_s)",
        x_precision="float16 (assumed)",  # served dtype not recorded; TGIS loads fp16 on CUDA by default
    )


def _map_brunetta(raw: pd.DataFrame) -> dict:
    n = len(raw)
    precision = raw["precision"].astype(str).str.lower().map({"bf16": "bfloat16", "fp8": "fp8"})
    return dict(
        kind="offline",  # 1,000 conversations submitted at once with llm.chat(); max_num_seqs caps the batch
        engine="vllm",
        engine_era="current",  # vLLM 0.9.0 (V0 engine, CUDA graphs): after vLLM 0.6's scheduler
        # README: an empty max_num_seqs is vLLM V0's default, 256
        max_batch=_num(raw["max_num_seqs"]).fillna(256.0),
        concurrency=_nan(n),  # the mean running batch is not reported
        num_requests=_num(raw["requests"]),
        input_tokens=_num(raw["input_len_tokens"]),
        power_w=_num(raw["mean_power_w"]),  # whole-run average per GPU; masked by power_whole_run_window
        itl_s=_num(raw["itl_s"]),
        itl_stat="mean TPOT ((mean latency - mean TTFT) / (mean output tokens - 1), from run means)",
        itl_statistic="mean",
        x_precision=precision.fillna(raw["precision"].astype(str)),
        # vLLM quantization="fp8": online FP8 of the BF16 checkpoint (W8A8 on H100, weight-only Marlin on A100)
        x_dtype=np.where(precision == "fp8", "fp8", "auto"),
    )


_MAPPERS = {
    "mlenergy_v1": _map_mlenergy_v1,
    "mlenergy_v2": _map_mlenergy_v2,
    "mlenergy_v3": _map_mlenergy_v3,
    "argonne": _map_argonne,
    "llm_pilot": _map_llm_pilot,
    "llmperf_techgrandpa": _map_llmperf_techgrandpa,
    HOLTMANN: _map_holtmann,
    BRUNETTA: _map_brunetta,
}
# Serving-stack era per source (Workload.engine_era) where the mapper does not set it. legacy = before
# vLLM's 0.6 scheduler (Sept 2024): HF transformers 2023 (v1), vLLM 0.5.4 (v2), TGIS 2024 (llm_pilot) and
# argonne's 2024 vLLM / TensorRT-LLM / DeepSpeed-MII releases; mlenergy_v3 is a recent vLLM.
_ENGINE_ERA = {"mlenergy_v1": "legacy", "mlenergy_v2": "legacy", "mlenergy_v3": "current", "argonne": "legacy",
               "llm_pilot": "legacy"}
# itl_stat reduced to the model input: only mlenergy_v3 reports a median; every other source a mean.
_ITL_STATISTIC = {"mlenergy_v3": "median"}


def _source_frame(data_dir: Path, source: str, gpu_map: dict, arch: pd.Series) -> pd.DataFrame:
    raw = read_source_rows(data_dir, source)
    n = len(raw)

    allowed = {m for s, m in _NOT_IN_CATALOG if s == source} | ({""} if source == HOLTMANN else set())
    unknown_llm = sorted(set(raw["llm"].astype(str)) - set(arch.index) - allowed)
    if unknown_llm:
        raise MeasurementDataError(
            f"{source}: LLM(s) not in data/catalog/llm_configs.csv: {unknown_llm}; add them to the catalog first")
    unmapped = sorted({g for g in raw["gpu"].astype(str) if (source, g) not in gpu_map})
    if unmapped:
        raise MeasurementDataError(
            f"{source}: GPU string(s) not in data/gpu_map.csv: {unmapped}; add a reviewed mapping first")

    fields = _MAPPERS[source](raw)
    out = pd.DataFrame(
        {
            "row_id": [f"{source}:{i}" for i in range(n)],
            "source": source,
            "llm": raw["llm"].astype(str).to_numpy(),
            "gpu": [gpu_map[(source, g)] for g in raw["gpu"].astype(str)],
            "kind": fields["kind"],
            "scenario": raw["scenario"].astype(str).to_numpy(),
            "engine": _values(fields["engine"]),
            "max_batch": np.asarray(fields["max_batch"], dtype=float),
            "concurrency": np.asarray(fields["concurrency"], dtype=float),
            "qps": _num(raw["arrival_rate_qps"]).to_numpy(),  # no source has a Poisson scenario: all NaN
            "num_requests": np.asarray(fields["num_requests"], dtype=float),
            "input_tokens": np.asarray(fields["input_tokens"], dtype=float),
            "output_tokens": _num(raw["output_len_tokens"]).to_numpy(),
            "power_w": np.asarray(fields["power_w"], dtype=float),
            "itl_s": np.asarray(fields["itl_s"], dtype=float),
            "system_s_per_token": _num(raw["system_s_per_token"]).to_numpy(),
            "itl_stat": _values(fields["itl_stat"]),
            "itl_statistic": fields.get("itl_statistic", _ITL_STATISTIC.get(source, "mean")),
            "engine_era": fields.get("engine_era", _ENGINE_ERA.get(source)),
            "x_precision": _values(fields["x_precision"]),
            "x_dtype": _values(fields.get("x_dtype", "auto")),
            "x_num_gpus": _num(raw["num_gpus"]).to_numpy(),
            "x_task": raw["task"].astype(str).to_numpy(),
            "x_source_gpu": raw["gpu"].astype(str).to_numpy(),
            "x_llm_source_name": raw["llm_source_name"].astype(str).to_numpy(),
            "x_tp": _num(raw["tensor_parallel"]).to_numpy() if "tensor_parallel" in raw else np.ones(n),
            # client-side TTFT only; a TTFT that excludes queueing goes to x_ttft_sched_s
            "x_ttft_mean_s": _num(raw["ttft_mean_s"]).to_numpy() if "ttft_mean_s" in raw
            and TTFT_DEF[source] != "excl_queueing" else _nan(n),
            "x_ttft_sched_s": _num(raw["ttft_mean_s"]).to_numpy() if "ttft_mean_s" in raw
            and TTFT_DEF[source] == "excl_queueing" else _nan(n),
            "x_power_window": POWER_WINDOW[source],
            "x_ttft_def": TTFT_DEF[source],
            # helper columns for the rules; removed before returning
            "_num_gpus": _num(raw["num_gpus"]).to_numpy(),
            "_pipeline_parallel": _num(raw["pipeline_parallel"]).fillna(1).to_numpy() if "pipeline_parallel" in raw else np.ones(n),
            "_arch_class": raw["llm"].astype(str).map(arch).to_numpy(),
            "_failed_fraction": _num(raw["failed_fraction"]).to_numpy() if "failed_fraction" in raw else _nan(n),
            "_power_scope": raw["power_scope"].astype(str).to_numpy() if "power_scope" in raw else "",
            "_source_itl_stat": raw["itl_stat"].astype(str).to_numpy(),
            "_gpu_mem_util": _num(raw["gpu_memory_utilization"]).fillna(0.9).to_numpy()
            if "gpu_memory_utilization" in raw else np.full(n, 0.9),
            "_source_file": raw["source_file"].astype(str).to_numpy() if "source_file" in raw else "",
            "_kv_cache_fp8": raw["kv_cache_fp8"].astype(str).to_numpy() if "kv_cache_fp8" in raw else "",
            "_is_group_median": _group_median_flags(raw) if source == "llmperf_techgrandpa" else np.ones(n, dtype=bool),
        }
    )
    return out


def _load(data_dir: str | Path, sources: Sequence[str] | None, single_gpu_only: bool):
    data_dir = Path(data_dir)
    chosen = list(SOURCES if sources is None else sources)
    bad = [s for s in chosen if s not in SOURCES]
    if bad:
        raise ValueError(f"unknown source(s) {bad}; choose from {', '.join(SOURCES)}")
    chosen = [s for s in SOURCES if s in chosen]  # canonical, deterministic order

    configs = pd.read_csv(data_dir / "catalog" / "llm_configs.csv", usecols=["hf_id", "arch_class"])
    arch = configs.drop_duplicates("hf_id").set_index("hf_id")["arch_class"]
    gpu_map = read_gpu_map(data_dir)

    frames = [_source_frame(data_dir, s, gpu_map, arch) for s in chosen]
    df = pd.concat(frames, ignore_index=True)

    counts: list[dict] = []
    apart = df.iloc[:0]
    for rule in EXCLUSIONS:
        if rule.only_if_single_gpu and not single_gpu_only:
            hit = pd.Series(False, index=df.index)
        else:
            hit = rule.predicate(df).fillna(False).astype(bool)
        if rule.action.startswith("mask:"):
            col = rule.action.split(":", 1)[1]
            hit = hit & df[col].notna()  # count only values actually removed
            df.loc[hit, col] = np.nan
        per_source = df.loc[hit, "source"].value_counts()
        counts.append({"rule": rule.name, "action": rule.action,
                       **{s: int(per_source.get(s, 0)) for s in chosen}, "total": int(hit.sum())})
        if rule.action == "score_only":
            apart = pd.concat([apart, df.loc[hit]])
        if rule.action in ("drop", "score_only"):
            df = df.loc[~hit]

    df = df[[*RECORD_COLUMNS, *EXTRA_COLUMNS]].reset_index(drop=True)
    apart = apart[[*RECORD_COLUMNS, *EXTRA_COLUMNS]].reset_index(drop=True)
    check_records(df)
    report = pd.DataFrame(counts).set_index("rule")
    return df, report, apart


def load_measurements(
    data_dir: str | Path,
    *,
    sources: Sequence[str] | None = None,
    single_gpu_only: bool = True,
) -> pd.DataFrame:
    """Records (``RECORD_COLUMNS`` then the ``x_`` extras) of the chosen sources after :data:`EXCLUSIONS`.

    ``data_dir`` is the repository's ``data/`` folder. Rows come in source order (``SOURCES``), then
    in file order; ``row_id`` is ``'<source>:<0-based row index in rows.csv>'``. Raises
    :class:`MeasurementDataError` when a row's LLM is not in the catalog or its GPU string is not
    in ``gpu_map.csv``.
    """
    return _load(data_dir, sources, single_gpu_only)[0]


def load_scored_apart(
    data_dir: str | Path,
    *,
    sources: Sequence[str] | None = None,
    single_gpu_only: bool = True,
) -> pd.DataFrame:
    """The rows a ``score_only`` rule moved out of the training records (same columns as
    :func:`load_measurements`): evaluate scores them with fold models that never trained on them."""
    return _load(data_dir, sources, single_gpu_only)[2]


def exclusion_report(
    data_dir: str | Path,
    *,
    sources: Sequence[str] | None = None,
    single_gpu_only: bool = True,
) -> pd.DataFrame:
    """Rows each rule dropped (or values it masked), per source, in rule order, plus the rows kept."""
    df, report, _ = _load(data_dir, sources, single_gpu_only)
    chosen = [c for c in report.columns if c not in ("action", "total")]
    kept = {"action": "kept", **{s: int((df["source"] == s).sum()) for s in chosen}, "total": len(df)}
    report.loc["kept"] = pd.Series(kept)
    return report
