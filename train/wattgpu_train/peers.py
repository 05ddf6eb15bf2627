"""WattGPU side by side with the planners a user would pick instead, on our own measured rows.

Peers (the optional extra ``wattgpu[peers]``, versions pinned in :data:`PEER_PINS`):

* **AIConfigurator** (NVIDIA): TTFT, TPOT (= ITL) and tokens/s from measured kernel databases, for
  the systems it ships (``SYSTEMS`` maps our catalog GPUs onto them);
* **llm-analysis**: a roofline calculator; run at its default efficiencies, with our catalog's spec
  sheet for the GPU and our catalog's architecture for the LLM;
* **EcoLogits**: energy per output token from the parameter count (and the request's duration).

WattGPU's figure beside each peer is cross-validated: the leave-one-GPU-out prediction for the row's
GPU (:func:`wattgpu_logo`, the evaluation's own nested LOGO, so WattGPU never saw that GPU). Every
row a peer cannot answer is counted with its reason. Nothing here is imported by the runtime, and
the peers are imported only inside the functions that call them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from wattgpu.specs import Catalog
from wattgpu.targets import ITL, POWER

from . import metrics

Log = Callable[[str], None]

# The peers' versions this comparison was written against (the `[peers]` extra pins the same).
PEER_PINS: dict[str, str] = {"aiconfigurator": "0.12.0", "aiconfigurator-core": "0.12.0",
                             "llm-analysis": "0.2.2", "ecologits": "0.11.3"}
# Measured quantities compared, their units and the peers that estimate each.
METRICS: dict[str, str] = {"itl_s": "s/token", "ttft_s": "s", "throughput_tok_s": "tokens/s",
                           "energy_per_token_j": "J/output token"}
# Measured TTFT per source (the statistic each source reports); other sources record none.
TTFT_COLUMNS: dict[str, str] = {"argonne": "ttft_s", "llm_pilot": "ttft_median_s",
                                "llmperf_techgrandpa": "ttft_mean_s"}
DEFAULT_PROMPT_TOKENS = 512  # prompt length where a source records none (the runtime Workload default)


# ------------------------------------------------------------------------------------------------
# measured rows
# ------------------------------------------------------------------------------------------------
def measured_rows(records: pd.DataFrame, data_dir: Path) -> pd.DataFrame:
    """One row per measured record with the workload the peers need and the measured quantities.

    Columns: row_id, source, gpu, llm, kind, scenario, engine, precision, tp, batch (the measured mean
    running batch, the static batch or the closed-loop users; the engine's batch cap where the source did
    not report the running batch, brunetta_llm_inference_power), prompt_tokens (``DEFAULT_PROMPT_TOKENS``
    where the source has none, flagged in ``prompt_assumed``), output_tokens, and the measured
    ``itl_s``, ``ttft_s``, ``throughput_tok_s`` (1 / system_s_per_token, whole group),
    ``energy_per_token_j`` (all GPUs of the group, per output token), ``power_w`` (per GPU).
    """
    r = records.reset_index(drop=True)
    src_idx = r["row_id"].str.rsplit(":", n=1)
    source = src_idx.str[0]
    index = src_idx.str[1].astype(int)
    ttft = np.full(len(r), np.nan)
    energy = np.full(len(r), np.nan)
    for s in sorted(source.unique()):
        raw = pd.read_csv(data_dir / s / "rows.csv", low_memory=False)
        m = (source == s).to_numpy()
        idx = index[m].to_numpy()
        if s in TTFT_COLUMNS:
            ttft[m] = pd.to_numeric(raw[TTFT_COLUMNS[s]], errors="coerce").to_numpy()[idx]
        if "energy_per_token_j" in raw:
            energy[m] = pd.to_numeric(raw["energy_per_token_j"], errors="coerce").to_numpy()[idx]
    tp = pd.to_numeric(r["x_tp"], errors="coerce").fillna(1).astype(int) if "x_tp" in r else pd.Series(1, index=r.index)
    conc = pd.to_numeric(r["concurrency"], errors="coerce").fillna(pd.to_numeric(r["max_batch"], errors="coerce"))
    prompt = pd.to_numeric(r["input_tokens"], errors="coerce")
    sys_s = pd.to_numeric(r["system_s_per_token"], errors="coerce")
    return pd.DataFrame({
        "row_id": r["row_id"], "source": r["source"], "gpu": r["gpu"], "llm": r["llm"], "kind": r["kind"],
        "scenario": r["scenario"].astype(str), "engine": r["engine"],
        "precision": r["x_precision"].astype(str) if "x_precision" in r else "unknown", "tp": tp,
        "batch": conc.clip(lower=1.0),
        "prompt_tokens": prompt.where(prompt > 0, DEFAULT_PROMPT_TOKENS).round().astype(int),
        "prompt_assumed": ~(prompt > 0),
        "output_tokens": pd.to_numeric(r["output_tokens"], errors="coerce"),
        "itl_s": pd.to_numeric(r["itl_s"], errors="coerce"), "ttft_s": ttft,
        "throughput_tok_s": 1.0 / sys_s.where(sys_s > 0), "energy_per_token_j": energy,
        "power_w": pd.to_numeric(r["power_w"], errors="coerce"),
    })


# ------------------------------------------------------------------------------------------------
# WattGPU, cross-validated
# ------------------------------------------------------------------------------------------------
def wattgpu_logo(records: pd.DataFrame, catalog: Catalog, *, n_jobs: int = 2, quick: bool = False,
                 log: Log = lambda s: None) -> pd.DataFrame:
    """WattGPU's leave-one-GPU-out figures per row (index ``row_id``), from the evaluation's own LOGO.

    Power and ITL are the out-of-fold predictions of ``evaluate.nested_oof`` with the default recipe
    (each held-out GPU predicted by models fitted, and chosen among the recipe's candidates, without
    it). Throughput and energy follow from them with the runtime's definitions: tokens/s =
    ``results.served_token_rate`` (batch × output tokens / (prefill + output tokens × ITL)), without the
    capacity cap (that needs the fold's model at other batch sizes); J/token = ``energy_figures`` of
    power (capped at TDP) × GPUs of the group at that rate. TTFT: the shipped runtime's TTFT (each source's
    arrival pattern); on the rows its fitted terms are fitted on (mean-TTFT sources) those terms are chosen
    leave-one-GPU-out (``ttft.held_out``, as ``evaluate`` scores them). Its decode step times are the shipped
    ITL model's, which saw every GPU, so TTFT is only partly cross-validated. Rows it cannot predict keep the
    compute-roofline prefill (``capacity.prefill_s``).
    """
    from wattgpu.serving.capacity import prefill_s, request_s
    from wattgpu.energy import energy_figures
    from wattgpu.results import served_token_rate

    from .dataset import build_dataset
    from .evaluate import make_folds, nested_oof, quick_recipe
    from .recipes import DEFAULT

    recipe = quick_recipe(DEFAULT) if quick else DEFAULT
    pred: dict[str, pd.Series] = {}
    cols_itl: dict[str, Any] = {}
    for target in (ITL, POWER):
        ds = build_dataset(records, catalog, target)
        folds = make_folds(ds.records, "logo")
        log(f"WattGPU {target}: leave-one-GPU-out over {len(folds)} GPUs, {len(ds)} rows")
        p, _ = nested_oof(recipe, target, ds, folds, "logo", n_jobs=n_jobs)
        pred[target] = pd.Series(p, index=ds.records["row_id"].to_numpy())
        if target == ITL:
            cols_itl = ds.cols
            ids = ds.records["row_id"].to_numpy()
            ttft = _ttft(records, catalog, ds)
    itl = pred[ITL].to_numpy()
    tput = served_token_rate(cols_itl, cols_itl["eff_batch"], request_s(cols_itl, itl), np.inf)
    out = pd.DataFrame({"itl_s": itl, "ttft_s": prefill_s(cols_itl), "throughput_tok_s": tput,
                        "tdp_w": cols_itl["gpu_tdp_w"], "gpus": cols_itl["wl_tp"]}, index=ids)
    out["ttft_s"] = ttft.reindex(out.index).fillna(out["ttft_s"])
    power = pred[POWER].reindex(out.index).to_numpy()
    out["power_w"] = power
    capped = np.minimum(power, out["tdp_w"].to_numpy())
    out["energy_per_token_j"] = energy_figures(capped * out["gpus"].to_numpy(), 1.0 / tput, 1.0)["j_per_token"]
    power_only = pred[POWER].index.difference(out.index)
    if len(power_only):  # rows with measured power but no ITL: power only
        extra = pd.DataFrame({"power_w": pred[POWER].reindex(power_only).to_numpy()}, index=power_only)
        out = pd.concat([out, extra])
    return out


def _ttft(records: pd.DataFrame, catalog: Catalog, ds: Any) -> pd.Series:
    """WattGPU's TTFT per ``row_id`` of dataset ``ds``: the shipped runtime's answer with each source's arrival
    pattern; on the rows the TTFT terms are fitted on, those terms chosen leave-one-GPU-out instead."""
    from wattgpu.errors import WattGPUError
    from wattgpu.predictor import Predictor

    from .ttft import arrival_triples, held_out, ttft_rows

    res = Predictor().predict_specs_safe(arrival_triples(ds.triples, ds.records["source"].to_numpy()))
    out = pd.Series([np.nan if isinstance(r, WattGPUError) or r.ttft_s is None else float(r.ttft_s) for r in res],
                    index=ds.records["row_id"].to_numpy(), dtype=np.float64)
    rows = ttft_rows(records, catalog)
    if rows is not None and rows.row_id is not None and rows.y.size:
        logo = pd.Series(held_out(rows, np.ones(rows.y.shape, dtype=bool)), index=rows.row_id)
        out.loc[logo.index.intersection(out.index)] = logo
    return out


# ------------------------------------------------------------------------------------------------
# scoring
# ------------------------------------------------------------------------------------------------
def error_stats(measured: Iterable[float], predicted: Iterable[float]) -> dict[str, Any]:
    """n, MdAPE and bias (median signed error, %) over the rows where both are finite and measured > 0."""
    y = np.asarray(list(measured), dtype=np.float64)
    p = np.asarray(list(predicted), dtype=np.float64)
    ok = np.isfinite(y) & np.isfinite(p) & (y > 0)
    if not ok.any():
        return {"n": 0, "mdape": None, "bias": None}
    return {"n": int(ok.sum()), "mdape": round(metrics.mdape(y[ok], p[ok]), 2),
            "bias": round(metrics.median_signed_error_pct(y[ok], p[ok]), 2)}


# ------------------------------------------------------------------------------------------------
# the peers
# ------------------------------------------------------------------------------------------------
@dataclass
class PeerRun:
    """One peer's estimates per row (``estimates[row_id][metric]``) and the rows it could not answer."""

    name: str
    version: str
    metrics: tuple[str, ...]
    mapping: list[str]
    estimates: dict[str, dict[str, float]] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)  # row_id -> reason

    def reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for reason in self.unanswered.values():
            out[reason] = out.get(reason, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def short_reason(exc: BaseException, limit: int = 160) -> str:
    """One line naming an exception a peer raised (type and the start of its message, paths removed)."""
    import re

    msg = " ".join(str(exc).split())
    msg = re.sub(r"(/[^\s,;:'\"()]+)+", "<path>", msg)
    msg = re.sub(r"(?<![\w.])\d+(\.\d+)?(?![\w.])", "N", msg)  # numbers vary per row; the reason is what they share
    msg = msg.split(" Supported architectures")[0]
    return f"{type(exc).__name__}: {msg}"[:limit]


# AIConfigurator systems (aiconfigurator-core 0.12.0, systems/*.yaml) for our catalog GPUs. Only these
# GPUs of data/ have a system; a100_pcie and l4 ship a spec sheet but no kernel database.
AIC_SYSTEMS: dict[str, str] = {
    "NVIDIA H100 SXM5 80GB": "h100_sxm",
    "NVIDIA A100 SXM4 40GB": "a100_sxm",  # its a100_sxm is the 80 GB card (2.04 TB/s; ours: 1.56 TB/s)
    "NVIDIA L40S": "l40s",
    "NVIDIA A100 PCIe 40GB": "a100_pcie",
    "NVIDIA L4": "l4",
}
# Our engines -> AIConfigurator backends (it models trtllm, vllm and sglang only).
AIC_BACKENDS: dict[str, str] = {"vllm": "vllm", "tensorrt_llm": "trtllm", "hf_transformers": "vllm",
                                "tgi": "vllm", "deepspeed_mii": "vllm"}


def aic_mode(row: Mapping[str, Any]) -> str:
    """``static`` for static batches (argonne: one batch of ``batch`` prompts), ``agg`` (in-flight batching
    at ``batch`` concurrent requests) for everything else."""
    return "static" if row["source"] == "argonne" else "agg"


def hf_config(llm: str, raw_dir: Path | None, catalog_csv: Path) -> tuple[dict[str, Any], str]:
    """The LLM's config.json and where it came from: the stored copy in ``raw_dir`` when there is one (keys
    it lacks, as some partial copies do, are taken from our catalog table), else the config.json fields
    our catalog table keeps (no hub access at run time)."""
    import json

    if raw_dir is not None:
        p = raw_dir / (llm.replace("/", "--") + ".json")
        if p.is_file():
            doc = json.loads(p.read_text(encoding="utf-8"))
            if isinstance(doc.get("config"), dict):
                stored = dict(doc["config"])
                try:
                    extra = {k: v for k, v in _catalog_config(llm, catalog_csv).items() if k not in stored}
                except LookupError:
                    extra = {}
                if extra:
                    return {**stored, **extra}, "stored config.json, missing keys from data/catalog/llm_configs.csv"
                return stored, "stored config.json"
    return _catalog_config(llm, catalog_csv), "config.json rebuilt from data/catalog/llm_configs.csv"


def _catalog_config(llm: str, catalog_csv: Path) -> dict[str, Any]:
    """The config.json fields of ``llm`` that data/catalog/llm_configs.csv keeps."""
    table = pd.read_csv(catalog_csv)
    hit = table[table["hf_id"] == llm]
    if hit.empty:
        raise LookupError(f"{llm} is not in {catalog_csv}")
    row = hit.iloc[0]
    cfg: dict[str, Any] = {"architectures": [str(row["architectures"])], "model_type": str(row["model_type"])}
    ints = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "max_position_embeddings", "sliding_window", "moe_intermediate_size")
    for k in ints:
        if pd.notna(row.get(k)):
            cfg[k] = int(row[k])
    if pd.notna(row.get("num_experts")):
        cfg["num_local_experts"] = cfg["num_experts"] = int(row["num_experts"])
    if pd.notna(row.get("num_experts_per_tok")):
        cfg["num_experts_per_tok"] = int(row["num_experts_per_tok"])
    cfg["tie_word_embeddings"] = str(row.get("tie_word_embeddings")).lower() == "true"
    if pd.notna(row.get("torch_dtype")):
        cfg["torch_dtype"] = str(row["torch_dtype"])
    return cfg


def run_aiconfigurator(rows: pd.DataFrame, catalog: Catalog, work: Path, raw_dir: Path | None,
                       catalog_csv: Path, log: Log) -> PeerRun:
    """AIConfigurator's ``cli_estimate`` on every row whose GPU has an AIConfigurator system."""
    import json
    import logging

    version = installed_version("aiconfigurator") or "not installed"
    run = PeerRun("AIConfigurator", f"aiconfigurator {version}, aiconfigurator-core "
                  f"{installed_version('aiconfigurator-core')}", ("itl_s", "ttft_s", "throughput_tok_s"), [
        "GPU -> system: " + ", ".join(f"{g} -> {s}" for g, s in AIC_SYSTEMS.items()) + "; no other GPU of data/ has one",
        "engine -> backend: vLLM -> vllm, TensorRT-LLM -> trtllm; HF transformers, TGI, DeepSpeed-MII -> vllm "
        "(no backend of their own); database mode SILICON (the default), latest database version",
        "mode: static for argonne's static batches, agg (in-flight batching) for the rest",
        "isl = mean prompt tokens (512 where the source has none), osl = mean output tokens, "
        "batch_size = measured mean running batch / static batch / closed-loop users (rounded, >= 1), tp_size = TP",
        "MoE: moe_tp_size = TP, moe_ep_size = 1 (vLLM's default without expert parallelism)",
        "precision: inferred by AIConfigurator from the config.json (fp16 and bf16 rows alike run its bf16 kernels)",
        "ITL = TPOT, TTFT = ttft, throughput = tokens/s of the whole TP group",
    ])
    try:
        from aiconfigurator.cli.api import cli_estimate
    except Exception as exc:  # noqa: BLE001 - any import failure is reported as the reason
        for rid in rows["row_id"]:
            run.unanswered[rid] = f"not importable: {short_reason(exc)}"
        return run
    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    cache: dict[tuple[Any, ...], dict[str, float] | str] = {}
    config_dirs: dict[str, Path | str] = {}
    config_source: dict[str, int] = {}
    n = len(rows)
    for i, row in enumerate(rows.to_dict("records")):
        rid = row["row_id"]
        system = AIC_SYSTEMS.get(row["gpu"])
        if system is None:
            run.unanswered[rid] = "no AIConfigurator system for this GPU"
            continue
        if row["llm"] not in config_dirs:
            try:
                cfg, how = hf_config(row["llm"], raw_dir, catalog_csv)
                config_source[how] = config_source.get(how, 0) + 1
                d = work / row["llm"].replace("/", "--")
                d.mkdir(parents=True, exist_ok=True)
                (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
                config_dirs[row["llm"]] = d
            except (LookupError, ValueError) as exc:
                config_dirs[row["llm"]] = f"no config.json: {short_reason(exc)}"
        cdir = config_dirs[row["llm"]]
        if isinstance(cdir, str):
            run.unanswered[rid] = cdir
            continue
        tp = int(row["tp"])
        moe = catalog.llm(row["llm"]).num_experts > 0
        key = (str(cdir), system, AIC_BACKENDS.get(row["engine"], "vllm"), aic_mode(row), int(row["prompt_tokens"]),
               max(1, int(round(row["output_tokens"]))), max(1, int(round(row["batch"]))), tp, moe)
        if key not in cache:
            try:
                r = cli_estimate(key[0], system, backend_name=key[2], mode=key[3], isl=key[4], osl=key[5],
                                 batch_size=key[6], tp_size=tp, moe_tp_size=tp if moe else None,
                                 moe_ep_size=1 if moe else None)
                raw = r.raw if isinstance(r.raw, dict) else {}
                cache[key] = {"itl_s": float(r.tpot) / 1e3, "ttft_s": float(r.ttft) / 1e3,
                              "throughput_tok_s": float(raw.get("tokens/s", float("nan")))}
            except Exception as exc:  # noqa: BLE001 - a peer's failure on a row is a counted reason
                cache[key] = short_reason(exc)
        res = cache[key]
        if isinstance(res, str):
            run.unanswered[rid] = res
        else:
            run.estimates[rid] = res
        if (i + 1) % 50 == 0:
            log(f"AIConfigurator: {i + 1}/{n} rows, {len(run.estimates)} answered, {len(cache)} distinct calls")
    run.mapping.append("config.json per LLM: " + ", ".join(f"{how} ({k} LLMs)" for how, k in sorted(config_source.items())))
    return run


# llm-analysis ships these GPU configs (gpu_configs/*.json); other GPUs get a GPUConfig built from our
# catalog's spec sheet (its documented way to add a GPU).
LLMA_GPUS: dict[str, str] = {
    "NVIDIA A100 SXM4 40GB": "a100-sxm-40gb", "NVIDIA A100 PCIe 40GB": "a100-pcie-40gb",
    "NVIDIA H100 SXM5 80GB": "h100-sxm-80gb", "NVIDIA Tesla V100 SXM2 32GB": "v100-sxm-32gb",
    "NVIDIA RTX A6000": "a6000-48gb",
}


def llma_dtype(precision: str) -> str:
    """llm-analysis dtype config for a row's served weight format."""
    p = precision.lower()
    if "mxfp4" in p:
        return "w4a16e16"
    if "fp8" in p:
        return "w8a8e16"
    return "w16a16e16"


def run_llm_analysis(rows: pd.DataFrame, catalog: Catalog, log: Log) -> PeerRun:
    """llm-analysis ``LLMAnalysis.inference`` at its default efficiencies (flops 1, HBM 1) on every row."""
    version = installed_version("llm-analysis") or "not installed"
    run = PeerRun("llm-analysis", f"llm-analysis {version}", ("itl_s", "ttft_s", "throughput_tok_s"), [
        "GPU: its shipped config where one matches (" + ", ".join(f"{g} -> {s}" for g, s in LLMA_GPUS.items())
        + "), else a GPUConfig from our catalog's spec sheet (memory, bandwidth, dense FP16 TFLOPS, NVLink)",
        "LLM: a ModelConfig from our catalog (layers, heads, KV heads, hidden, FFN width, vocabulary, experts)",
        "dtype: w16a16e16 (fp16/bf16), w8a8e16 (fp8), w4a16e16 (mxfp4); efficiencies at its defaults (1.0)",
        "seq_len = mean prompt tokens (512 where the source has none), num_tokens_to_generate = mean output "
        "tokens, batch_size_per_gpu = measured batch (rounded, >= 1), tp_size = TP; one static batch",
        "ITL = decode_latency, TTFT = prefill_latency (the whole batch's prefill), throughput = "
        "total_tokens_per_sec (batch x output tokens / total latency)",
    ])
    try:
        import logging

        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import (GPUConfig, ModelConfig, ParallelismConfig, get_dtype_config_by_name,
                                         get_gpu_config_by_name)
    except Exception as exc:  # noqa: BLE001
        for rid in rows["row_id"]:
            run.unanswered[rid] = f"not importable: {short_reason(exc)}"
        return run
    # llm-analysis 0.2.2 logs through a logger literally named "__name__" (llm_analysis/logger.py); its
    # per-call efficiency notes would flood the log.
    logging.getLogger("__name__").setLevel(logging.ERROR)

    def gpu_config(gpu: str) -> Any:
        if gpu in LLMA_GPUS:
            return get_gpu_config_by_name(LLMA_GPUS[gpu])
        g = catalog.gpu(gpu)
        link = (g.nvlink_gb_s or 0.0) / 2 or 32.0  # one direction; PCIe 4.0 x16 where there is no NVLink
        return GPUConfig(name=g.name, mem_per_GPU_in_GB=g.memory_size_gb, hbm_bandwidth_in_GB_per_sec=g.memory_bandwidth_gb_s,
                         intra_node_bandwidth_in_GB_per_sec=link, intra_node_min_message_latency=8e-6,
                         peak_fp16_TFLOPS=g.fp16_tflops)

    def model_config(llm: str) -> Any:
        s = catalog.llm(llm)
        ffn = s.intermediate_size or 4 * s.hidden_size
        return ModelConfig(name=llm, num_layers=s.num_layers, n_head=s.num_attention_heads, hidden_dim=s.hidden_size,
                           vocab_size=s.vocab_size, max_seq_len=s.max_position_embeddings,
                           num_key_value_heads=s.num_kv_heads, ffn_embed_dim=ffn, expansion_ratio=ffn / s.hidden_size,
                           model_type=s.model_type, moe_num_experts=max(1, s.num_experts),
                           moe_top_k=max(1, s.experts_per_tok))

    cache: dict[tuple[Any, ...], dict[str, float] | str] = {}
    for row in rows.to_dict("records"):
        rid = row["row_id"]
        key = (row["gpu"], row["llm"], llma_dtype(row["precision"]), int(row["tp"]), max(1, int(round(row["batch"]))),
               int(row["prompt_tokens"]), max(1, int(round(row["output_tokens"]))))
        if key not in cache:
            try:
                a = LLMAnalysis(model_config(key[1]), gpu_config(key[0]), get_dtype_config_by_name(key[2]),
                                ParallelismConfig(tp_size=key[3]))
                s = a.inference(batch_size_per_gpu=key[4], seq_len=key[5], num_tokens_to_generate=key[6])
                cache[key] = {"itl_s": float(s["decode_latency"]), "ttft_s": float(s["prefill_latency"]),
                              "throughput_tok_s": float(s["total_tokens_per_sec"])}
            except Exception as exc:  # noqa: BLE001
                cache[key] = short_reason(exc)
        res = cache[key]
        if isinstance(res, str):
            run.unanswered[rid] = res
        else:
            run.estimates[rid] = res
    log(f"llm-analysis: {len(run.estimates)} of {len(rows)} rows answered")
    return run


def ecologits_bits(precision: str) -> int:
    """Weight bits EcoLogits is told (its default 16) for a row's served weight format."""
    p = precision.lower()
    return 4 if "mxfp4" in p else 8 if "fp8" in p else 16


def run_ecologits(rows: pd.DataFrame, catalog: Catalog, log: Log) -> PeerRun:
    """EcoLogits' LLM impact model: GPU energy per output token (its gpu_energy × GPUs it requires)."""
    version = installed_version("ecologits") or "not installed"
    run = PeerRun("EcoLogits", f"ecologits {version}", ("energy_per_token_j",), [
        "compute_llm_impacts_dag with the catalog's active and total parameters (billions), output_token_count = "
        "mean output tokens, batch_size = measured batch (rounded, >= 1; its default is 64), gpu_memory = the "
        "row's GPU memory (its default 80 GB), model_quantization_bits 16 / 8 (fp8) / 4 (mxfp4); no latency given",
        "compared: GPU energy only (gpu_energy x gpu_required_count, no server share, no PUE), as NVML measures "
        "it; per output token of the whole group",
    ])
    try:
        from ecologits.impacts.llm import compute_llm_impacts_dag
    except Exception as exc:  # noqa: BLE001
        for rid in rows["row_id"]:
            run.unanswered[rid] = f"not importable: {short_reason(exc)}"
        return run

    def value(x: Any) -> float:
        return float((x.min + x.max) / 2) if hasattr(x, "min") and hasattr(x, "max") else float(x)

    for row in rows.to_dict("records"):
        rid = row["row_id"]
        try:
            s = catalog.llm(row["llm"])
            out_tok = float(row["output_tokens"])
            if not out_tok > 0:
                raise ValueError("no output token count")
            res = compute_llm_impacts_dag(
                model_active_parameter_count=s.active_params_b, model_total_parameter_count=s.total_params_b,
                output_token_count=out_tok, request_latency=math.inf, if_electricity_mix_adpe=0.0,
                if_electricity_mix_pe=0.0, if_electricity_mix_gwp=0.0, if_electricity_mix_wue=0.0,
                datacenter_pue=1.0, datacenter_wue=0.0, model_quantization_bits=ecologits_bits(row["precision"]),
                gpu_memory=catalog.gpu(row["gpu"]).memory_size_gb, batch_size=max(1, int(round(row["batch"]))))
            kwh = value(res["gpu_energy"]) * value(res["gpu_required_count"])
            run.estimates[rid] = {"energy_per_token_j": kwh * 3.6e6 / out_tok}
        except Exception as exc:  # noqa: BLE001
            run.unanswered[rid] = short_reason(exc)
    log(f"EcoLogits: {len(run.estimates)} of {len(rows)} rows answered")
    return run


# ------------------------------------------------------------------------------------------------
# comparison and report
# ------------------------------------------------------------------------------------------------
def compare(measured: pd.DataFrame, wattgpu: pd.DataFrame, runs: Iterable[PeerRun]) -> dict[str, Any]:
    """Per peer and metric, pooled and per GPU: n, MdAPE and bias of the peer and of WattGPU's LOGO figure
    on the same rows (those with a measured value, a peer estimate and a WattGPU prediction)."""
    m = measured.set_index("row_id")
    out: dict[str, Any] = {}
    for run in runs:
        per_metric: dict[str, Any] = {}
        for metric in run.metrics:
            ids = [rid for rid in run.estimates if rid in m.index]
            y = m.loc[ids, metric].to_numpy(dtype=np.float64) if ids else np.array([])
            p = np.array([run.estimates[rid].get(metric, np.nan) for rid in ids], dtype=np.float64)
            w = wattgpu[metric].reindex(ids).to_numpy(dtype=np.float64) if metric in wattgpu and ids else np.full(len(ids), np.nan)
            ok = np.isfinite(y) & (y > 0) & np.isfinite(p) & np.isfinite(w)
            gpus = m.loc[ids, "gpu"].to_numpy(dtype=object) if ids else np.array([], dtype=object)
            block: dict[str, Any] = {"pooled": _pair(y[ok], p[ok], w[ok]), "per_gpu": {}}
            for g in sorted(set(gpus[ok].tolist())):
                k = ok & (gpus == g)
                block["per_gpu"][g] = _pair(y[k], p[k], w[k])
            block["peer_answered_no_measurement"] = int((np.isfinite(p) & ~(np.isfinite(y) & (y > 0))).sum())
            block["no_wattgpu_prediction"] = int((np.isfinite(p) & np.isfinite(y) & (y > 0) & ~np.isfinite(w)).sum())
            per_metric[metric] = block
        out[run.name] = {"version": run.version, "mapping": run.mapping, "rows": len(run.estimates) + len(run.unanswered),
                         "answered": len(run.estimates), "unanswered": len(run.unanswered),
                         "unanswered_reasons": run.reasons(), "metrics": per_metric}
    return out


def _pair(y: np.ndarray, p: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    a, b = error_stats(y, p), error_stats(y, w)
    return {"n": a["n"], "peer": {"mdape": a["mdape"], "bias": a["bias"]},
            "wattgpu": {"mdape": b["mdape"], "bias": b["bias"]}}


def compare_peers(records: pd.DataFrame, catalog: Catalog, data_dir: Path, *, raw_configs: Path | None = None,
                  work: Path | None = None, n_jobs: int = 2, quick: bool = False,
                  peers: tuple[str, ...] = ("aiconfigurator", "llm-analysis", "ecologits"),
                  log: Log = lambda s: None) -> dict[str, Any]:
    """The whole comparison as a JSON-ready dict (see the module docstring)."""
    import tempfile

    measured = measured_rows(records, data_dir)
    log(f"{len(measured)} measured rows, {measured['gpu'].nunique()} GPUs, {measured['llm'].nunique()} LLMs")
    wattgpu = wattgpu_logo(records, catalog, n_jobs=n_jobs, quick=quick, log=log)
    runs: list[PeerRun] = []
    with tempfile.TemporaryDirectory(prefix="wattgpu-peers-") as tmp:
        if "aiconfigurator" in peers:
            runs.append(run_aiconfigurator(measured, catalog, Path(work or tmp), raw_configs,
                                           data_dir / "catalog" / "llm_configs.csv", log))
        if "llm-analysis" in peers:
            runs.append(run_llm_analysis(measured, catalog, log))
        if "ecologits" in peers:
            runs.append(run_ecologits(measured, catalog, log))
    return {
        "rows": len(measured), "gpus": sorted(measured["gpu"].unique().tolist()),
        "versions": {d: installed_version(d) for d in PEER_PINS}, "pinned": PEER_PINS,
        "wattgpu": {"method": "leave-one-GPU-out: nested_oof of the default recipe (evaluate.py), each GPU predicted "
                              "by models fitted without it" + (" (quick: few trees, figures not meaningful)" if quick else ""),
                    "ttft_note": "TTFT: the shipped runtime's TTFT (physics + fitted excess, burst and PCIe terms) "
                                 "with each source's arrival pattern; on the mean-TTFT rows those terms are fitted on, "
                                 "they are chosen leave-one-GPU-out, as evaluate scores them; its decode step times "
                                 "come from the shipped ITL model, which saw every GPU, so TTFT is only partly "
                                 "cross-validated",
                    "throughput_note": "batch x output tokens / (prefill + output tokens x LOGO ITL), without the "
                                       "capacity cap",
                    "energy_note": "LOGO power (capped at TDP) x GPUs / throughput, on rows with both power and ITL"},
        "measured": {"itl_s": "per-sequence ITL as each source defines it (data/README.md)",
                     "ttft_s": "argonne ttft_s, llm_pilot ttft_median_s, llmperf ttft_mean_s; none elsewhere",
                     "throughput_tok_s": "1 / system_s_per_token: output tokens/s of the whole run",
                     "energy_per_token_j": "source energy_per_token_j: GPU energy per output token, all GPUs"},
        "peers": compare(measured, wattgpu, runs),
        "quick": quick,
    }


def _fmt(x: Any, unit: str = " %") -> str:
    return "–" if x is None else f"{x:.1f}{unit}"


def _bias(x: Any) -> str:
    return "–" if x is None else f"{x:+.1f} %"


def peers_markdown(result: dict[str, Any]) -> str:
    """reports/peers.md from :func:`compare_peers`'s result."""
    lines = ["# WattGPU beside other planners, on the measured rows in `data/`", "",
             "Generated by `wattgpu-train compare-peers --out reports/`. Do not edit by hand.", "",
             f"Rows: {result['rows']} measured rows (single-GPU and tensor-parallel), {len(result['gpus'])} GPUs. "
             "Versions: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in result["versions"].items()) + ".",
             "", f"**WattGPU's figure is cross-validated**: {result['wattgpu']['method']}. "
             f"Throughput: {result['wattgpu']['throughput_note']}; energy: {result['wattgpu']['energy_note']}. "
             f"{result['wattgpu']['ttft_note']}.", "",
             "MdAPE = median |estimate − measured| / measured; bias = median (estimate − measured) / measured "
             "(negative: estimates low). Each line compares the peer and WattGPU on exactly the same rows.", ""]
    if result.get("quick"):
        lines += ["**Quick run: WattGPU's models had few trees; these figures are a smoke test, not a result.**", ""]
    lines += ["## Pooled", "", "| quantity | peer | rows | peer MdAPE | peer bias | WattGPU MdAPE | WattGPU bias |",
              "|---|---|---|---|---|---|---|"]
    for name, p in result["peers"].items():
        for metric, block in p["metrics"].items():
            b = block["pooled"]
            lines.append(f"| {metric} ({METRICS[metric]}) | {name} | {b['n']} | {_fmt(b['peer']['mdape'])} | "
                         f"{_bias(b['peer']['bias'])} | {_fmt(b['wattgpu']['mdape'])} | {_bias(b['wattgpu']['bias'])} |")
    lines += ["", "## Rows each peer could not answer", "", "| peer | answered | not answered | reason (rows) |", "|---|---|---|---|"]
    for name, p in result["peers"].items():
        reasons = "; ".join(f"{r} ({n})" for r, n in p["unanswered_reasons"].items()) or "–"
        lines.append(f"| {name} | {p['answered']} | {p['unanswered']} | {reasons.replace('|', '/')} |")
    lines += ["", "## Per GPU", ""]
    for name, p in result["peers"].items():
        lines += [f"### {name}", "", "| quantity | GPU | rows | peer MdAPE | peer bias | WattGPU MdAPE | WattGPU bias |",
                  "|---|---|---|---|---|---|---|"]
        for metric, block in p["metrics"].items():
            for gpu, b in block["per_gpu"].items():
                lines.append(f"| {metric} | {gpu} | {b['n']} | {_fmt(b['peer']['mdape'])} | {_bias(b['peer']['bias'])} | "
                             f"{_fmt(b['wattgpu']['mdape'])} | {_bias(b['wattgpu']['bias'])} |")
        lines.append("")
    lines += ["## How each row's workload was given to each peer", ""]
    for name, p in result["peers"].items():
        lines += [f"**{name}** ({p['version']}):", ""] + [f"- {s}" for s in p["mapping"]] + [""]
    lines += ["## What was measured", ""] + [f"- `{k}`: {v}" for k, v in result["measured"].items()]
    if "runtime_s" in result:
        lines += ["", f"Run time: {result['runtime_s']:.0f} s."]
    return "\n".join(lines) + "\n"
