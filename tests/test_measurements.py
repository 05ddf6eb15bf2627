"""The public measurement sets in data/ load into the record schema, with every exclusion applied."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattgpu_train.measurements import (
    DECODER_ARCH_CLASSES,
    EXCLUSIONS,
    SOURCES,
    MeasurementDataError,
    exclusion_report,
    load_measurements,
    load_scored_apart,
    read_source_rows,
)
from wattgpu_train.records import RECORD_COLUMNS

DATA = Path(__file__).parents[1] / "data"
ENGINES = {"vllm", "hf_transformers", "tgi", "tensorrt_llm", "deepspeed_mii"}


@pytest.fixture(scope="module")
def records() -> pd.DataFrame:
    return load_measurements(DATA)


@pytest.fixture(scope="module")
def raw() -> dict[str, pd.DataFrame]:
    return {s: read_source_rows(DATA, s) for s in SOURCES}


@pytest.fixture(scope="module")
def gpu_specs() -> pd.DataFrame:
    return pd.read_csv(DATA / "catalog" / "gpu_specs.csv")


@pytest.fixture(scope="module")
def gpu_map() -> pd.DataFrame:
    return pd.read_csv(DATA / "gpu_map.csv", dtype=str)


def _raw_of(records: pd.DataFrame, raw: dict[str, pd.DataFrame], source: str) -> pd.DataFrame:
    """The source rows behind the records of one source, in record order."""
    sub = records[records["source"] == source]
    idx = sub["row_id"].str.split(":").str[1].astype(int)
    return raw[source].iloc[idx.to_numpy()]


def test_schema_and_order(records):
    assert list(records.columns[: len(RECORD_COLUMNS)]) == list(RECORD_COLUMNS)
    assert all(c.startswith("x_") for c in records.columns[len(RECORD_COLUMNS):])
    assert records["row_id"].is_unique
    assert set(records["source"]) == set(SOURCES)
    # deterministic: source order, then file order
    order = records["source"].map({s: i for i, s in enumerate(SOURCES)})
    idx = records["row_id"].str.split(":").str[1].astype(int)
    assert (pd.DataFrame({"o": order, "i": idx}).sort_values(["o", "i"]).index == records.index).all()
    again = load_measurements(DATA)
    pd.testing.assert_frame_equal(records, again)


def test_no_missing_keys_and_valid_categories(records):
    for col in ("row_id", "source", "llm", "gpu", "kind", "engine", "itl_stat"):
        assert records[col].notna().all(), col
    assert set(records["kind"]) <= {"offline", "server", "closed_loop"}
    assert set(records["engine"]) <= ENGINES
    # the mean running batch is unknown only for brunetta's offline runs (not reported; max_batch caps it)
    known = records["source"] != "brunetta_llm_inference_power"
    assert (records.loc[known, "concurrency"] > 0).all()
    assert records.loc[~known, "concurrency"].isna().all()
    assert records["qps"].isna().all()  # no source has a Poisson-arrival scenario


def test_every_gpu_in_catalog(records, gpu_specs):
    assert set(records["gpu"]) <= set(gpu_specs["name"])


def test_gpu_map_names_exist_and_cover_every_source_string(gpu_map, gpu_specs, raw):
    assert set(gpu_map["catalog_gpu"]) <= set(gpu_specs["name"])
    assert not gpu_map.duplicated(["source", "source_gpu_name"]).any()
    assert gpu_map["evidence"].str.len().min() > 20
    mapped = set(zip(gpu_map["source"], gpu_map["source_gpu_name"]))
    for source, df in raw.items():
        for g in df["gpu"].astype(str).unique():
            assert (source, g) in mapped, (source, g)


def test_power_within_tdp(records, gpu_specs):
    tdp = gpu_specs.set_index("name")["tdp_w"]
    p = records.dropna(subset=["power_w"])
    assert len(p) > 0
    assert (p["power_w"] > 0).all()
    assert (p["power_w"] <= 1.2 * p["gpu"].map(tdp)).all()


def test_itl_positive(records):
    itl = records["itl_s"].dropna()
    assert len(itl) > 0 and (itl > 0).all()
    assert (records["power_w"].notna() | records["itl_s"].notna()).all()


def test_only_single_gpu_rows(records, raw):
    assert (records["x_num_gpus"] == 1).all()
    for s in SOURCES:
        assert (_raw_of(records, raw, s)["num_gpus"] == 1).all()
    every = load_measurements(DATA, single_gpu_only=False)
    assert (every["x_num_gpus"] > 1).any()


def test_tensor_parallel_rows_kept_only_as_one_tp_group(raw):
    every = load_measurements(DATA, single_gpu_only=False)
    assert (every["x_tp"] == every["x_num_gpus"]).all()
    assert set(every["x_tp"]) == {1, 2, 4, 8}
    # pipeline stages (ML.ENERGY v2, 16 GPUs = TP 8 × PP 2) and expert/data parallel runs (v3) are dropped
    v2, v3 = raw["mlenergy_v2"], raw["mlenergy_v3"]
    rep = exclusion_report(DATA, single_gpu_only=False)
    assert rep.loc["not_tensor_parallel", "mlenergy_v2"] == (v2["pipeline_parallel"] > 1).sum()
    assert rep.loc["not_tensor_parallel", "mlenergy_v3"] == (v3["num_gpus"] != v3["tensor_parallel"]).sum()
    # 236 with power (ML.ENERGY, 48 of them B200) + 26 (holtmann), 427 with ITL (+ LLM-Pilot) + 35 (holtmann)
    multi = every[every["x_num_gpus"] > 1]
    assert len(multi) == 462
    assert multi["power_w"].notna().sum() == 262
    assert (multi["gpu"] == "NVIDIA B200 (HGX/DGX B200)").sum() == 48


def test_only_decoder_llms(records):
    arch = pd.read_csv(DATA / "catalog" / "llm_configs.csv").set_index("hf_id")["arch_class"]
    assert records["llm"].map(arch).isin(DECODER_ARCH_CLASSES).all()
    bad = ("t5", "ul2", "mt0", "rwkv", "nemotron-nano")
    assert not records["llm"].str.lower().str.contains("|".join(bad)).any()


def test_llm_pilot_failed_and_broken_runs_gone(records, raw):
    src = _raw_of(records, raw, "llm_pilot")
    assert (src["failed_fraction"] <= 0.05).all()
    broken = (src["llm_source_name"] == "llama-7b") & (src["gpu"] == "A10") & (src["concurrent_users"] == 64)
    assert not broken.any()
    lp = records[records["source"] == "llm_pilot"]
    assert lp["power_w"].isna().all()
    assert (lp["kind"] == "closed_loop").all() and (lp["engine"] == "tgi").all()
    np.testing.assert_allclose(lp["itl_s"], src["itl_req_mean_s"])
    np.testing.assert_allclose(lp["concurrency"], src["concurrent_users"])


def test_argonne_masks(records, raw):
    src = _raw_of(records, raw, "argonne")
    ar = records[records["source"] == "argonne"]
    upper = src["itl_stat"].str.startswith("derived upper bound").to_numpy()
    assert ar["itl_s"].to_numpy()[upper].size == 0 or np.isnan(ar["itl_s"].to_numpy()[upper]).all()
    assert ar["itl_s"].to_numpy()[~upper].size > 0 and np.isfinite(ar["itl_s"].to_numpy()[~upper]).all()
    gpu0 = (src["power_scope"] == "gpu0_only").to_numpy()
    assert np.isnan(ar["power_w"].to_numpy()[~gpu0]).all()
    assert np.isfinite(ar["power_w"].to_numpy()[gpu0]).all()
    assert (ar["concurrency"] == ar["max_batch"]).all()


def test_per_source_workload_mapping(records, raw):
    v1 = records[records["source"] == "mlenergy_v1"]
    assert (v1["kind"] == "closed_loop").all() and (v1["concurrency"] == 1).all()
    assert (v1["engine"] == "hf_transformers").all()
    for s in ("mlenergy_v2", "mlenergy_v3"):
        r = records[records["source"] == s]
        src = _raw_of(records, raw, s)
        assert (r["kind"] == "offline").all() and (r["engine"] == "vllm").all()
        np.testing.assert_allclose(r["max_batch"], src["max_num_seqs"])
        np.testing.assert_allclose(r["concurrency"], src["avg_batch_size"])
    v3 = records[records["source"] == "mlenergy_v3"]
    assert "mxfp4" in set(v3["x_precision"])


def test_exclusion_report_matches_loader(records, raw):
    rep = exclusion_report(DATA)
    assert list(rep.index) == [r.name for r in EXCLUSIONS] + ["kept"]
    for s in SOURCES:
        assert rep.loc["kept", s] == (records["source"] == s).sum()
        dropped = rep.loc[rep["action"].isin(["drop", "score_only"]), s].sum()  # score_only: out of the records
        assert dropped + rep.loc["kept", s] == len(raw[s])
    assert rep.loc["multi_gpu", "llm_pilot"] == (raw["llm_pilot"]["num_gpus"] != 1).sum()
    assert rep.loc["llm_pilot_broken_run", "llm_pilot"] == 1
    assert rep.loc["non_decoder_architecture", "mlenergy_v1"] == 24  # fastchat-t5 + RWKV, 12 rows each


def test_sources_subset():
    only = load_measurements(DATA, sources=["argonne"])
    assert set(only["source"]) == {"argonne"}
    with pytest.raises(ValueError):
        load_measurements(DATA, sources=["nope"])


def _copy_data(tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "data"
    shutil.copytree(DATA, dst)
    return dst


def test_unknown_gpu_raises(tmp_path):
    d = _copy_data(tmp_path)
    m = pd.read_csv(d / "gpu_map.csv", dtype=str)
    m = m[~((m["source"] == "argonne") & (m["source_gpu_name"] == "Nvidia H100 GPU"))]
    m.to_csv(d / "gpu_map.csv", index=False)
    with pytest.raises(MeasurementDataError, match="Nvidia H100 GPU"):
        load_measurements(d)


def test_unknown_llm_raises(tmp_path):
    d = _copy_data(tmp_path)
    c = pd.read_csv(d / "catalog" / "llm_configs.csv")
    c[c["hf_id"] != "meta-llama/Meta-Llama-3-8B"].to_csv(d / "catalog" / "llm_configs.csv", index=False)
    with pytest.raises(MeasurementDataError, match="Meta-Llama-3-8B"):
        load_measurements(d)


def test_copied_files_present():
    for s in SOURCES:
        assert (DATA / s / "rows.csv").is_file()
        assert (DATA / s / "README.md").read_text().startswith("> Copied from the shared data folder")
        assert not (DATA / s / "raw").exists()
    assert (DATA / "llm_pilot" / "LICENSE-DATA.md").is_file()


def test_holtmann_consumer_gpu_counts_and_exclusions(raw):
    """80 runs: 1 without metadata and 3 with an FP8 KV cache dropped; 76 kept (62 with power, all with ITL)."""
    src = raw["holtmann_consumer_gpu"]
    assert len(src) == 80
    rep = exclusion_report(DATA, single_gpu_only=False)["holtmann_consumer_gpu"]
    assert rep["holtmann_no_metadata"] == (src["llm"] == "").sum() == 1
    assert rep["holtmann_fp8_kv_cache"] == (src["kv_cache_fp8"].astype(str) == "True").sum() == 3
    assert rep["kept"] == 76
    every = load_measurements(DATA, sources=["holtmann_consumer_gpu"], single_gpu_only=False)
    assert every["power_w"].notna().sum() == 62 and every["itl_s"].notna().sum() == 76
    assert set(every["gpu"]) == {"NVIDIA GeForce RTX 5060 Ti", "NVIDIA GeForce RTX 5070 Ti", "NVIDIA GeForce RTX 5090"}
    assert every.groupby("x_tp").size().to_dict() == {1: 41, 2: 35}
    assert (every["kind"] == "closed_loop").all() and (every["engine_era"] == "current").all()
    assert (every["itl_statistic"] == "mean").all()
    kept = _raw_of(every, raw, "holtmann_consumer_gpu")
    np.testing.assert_allclose(every["itl_s"], kept["itl_s"])  # the mean, not itl_p50_s
    np.testing.assert_allclose(every["concurrency"], kept["concurrency"])
    np.testing.assert_allclose(every["x_ttft_mean_s"], kept["ttft_mean_s"])
    with_power = kept["power_w"].notna().to_numpy()
    np.testing.assert_allclose(every["power_w"].to_numpy()[with_power], kept["power_w"].to_numpy()[with_power])
    assert every["power_w"].isna().sum() == 14  # telemetry missing: latency kept, power NaN
    single = load_measurements(DATA, sources=["holtmann_consumer_gpu"])
    assert len(single) == 41 and (single["x_tp"] == 1).all()


def test_mlenergy_v3_includes_b200(raw):
    """The B200 rows, once held back as an external check, are training rows now: 291 of 565 rows, 113 single-GPU
    rows kept (all with power and ITL) beside 81 H100 rows."""
    src = raw["mlenergy_v3"]
    assert len(src) == 565 and (src["gpu"] == "B200").sum() == 291
    v3 = load_measurements(DATA, sources=["mlenergy_v3"])
    assert v3.groupby("gpu").size().to_dict() == {"NVIDIA B200 (HGX/DGX B200)": 113, "NVIDIA H100 SXM5 80GB": 81}
    assert v3["power_w"].notna().all() and v3["itl_s"].notna().all()
    assert (v3["x_power_window"] == "steady_state").all()


def test_brunetta_counts_protocol_and_exclusions(raw):
    """284 runs: DP runs, LLMs without a catalog config, the memory test and the synthetic rows dropped; 33
    single-GPU bf16 runs kept (17 H100, 16 A100 80GB) with ITL, and 32 fp8 runs (online quantisation of the BF16
    checkpoint: 16 H100, 16 A100 80GB) scored apart at x_dtype fp8, never trained on; their whole-run power
    is recorded as such and kept out of the (steady-state) power target; their TTFT (queueing excluded) never
    fills the client-side TTFT column."""
    src = raw["brunetta_llm_inference_power"]
    assert len(src) == 284
    rep = exclusion_report(DATA)["brunetta_llm_inference_power"]
    assert rep["not_tensor_parallel"] == (src["num_gpus"] != src["tensor_parallel"]).sum() == 156
    assert rep["llm_not_in_catalog"] == 40
    in_catalog = src["llm"].isin(pd.read_csv(DATA / "catalog" / "llm_configs.csv")["hf_id"])
    memory_test = src["source_file"].str.endswith("memory_test.csv") & in_catalog
    assert rep["brunetta_not_standard_run"] == 3 + memory_test.sum() == 23
    assert rep["power_whole_run_window"] == 65
    assert rep["fp8_scored_apart"] == 32
    assert rep["kept"] == 33
    b = load_measurements(DATA, sources=["brunetta_llm_inference_power"])
    assert b.groupby("gpu").size().to_dict() == {"NVIDIA A100 SXM4 80GB": 16, "NVIDIA H100 SXM5 80GB": 17}
    assert (b["x_precision"] == "bfloat16").all() and (b["x_dtype"] == "auto").all()
    f = load_scored_apart(DATA, sources=["brunetta_llm_inference_power"])
    assert f.groupby("gpu").size().to_dict() == {"NVIDIA A100 SXM4 80GB": 16, "NVIDIA H100 SXM5 80GB": 16}
    assert (f["x_precision"] == "fp8").all() and (f["x_dtype"] == "fp8").all() and f["power_w"].isna().all()
    assert (b["x_power_window"] == "whole_run").all() and (b["x_ttft_def"] == "excl_queueing").all()
    assert b["x_ttft_mean_s"].isna().all() and b["x_ttft_sched_s"].notna().all()
    assert (b["kind"] == "offline").all() and (b["engine_era"] == "current").all()
    assert (b["itl_statistic"] == "mean").all() and (b["x_precision"] == "bfloat16").all()
    kept = _raw_of(b, raw, "brunetta_llm_inference_power")
    np.testing.assert_allclose(b["itl_s"], kept["itl_s"])
    np.testing.assert_allclose(b["max_batch"], kept["max_num_seqs"].fillna(256.0))
    np.testing.assert_allclose(b["num_requests"], kept["requests"])


def test_protocol_columns_cover_every_source(records):
    """Each row says what its power averages over and what its TTFT counts (data/README.md)."""
    assert set(records["x_power_window"]) <= {"steady_state", "active_generation", "whole_run", "none"}
    assert set(records["x_ttft_def"]) <= {"client", "static_batch", "excl_queueing", "none"}
    assert records.loc[records["x_power_window"] == "none", "power_w"].isna().all()
    assert records.loc[records["x_ttft_mean_s"].notna(), "x_ttft_def"].eq("client").all()
