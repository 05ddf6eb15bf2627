"""Tests for the Watt Counts loader, on handmade rows and a SYNTHETIC file (not measurements)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.synthetic_watt_counts import (
    HEADER,
    MOE_MODEL,
    make_synthetic_watt_counts,
    write_watt_counts_rows,
)
from wattgpu_train.records import RECORD_COLUMNS, check_records
from wattgpu_train.watt_counts import (
    ITL_STAT,
    LIST_COLUMNS,
    WATT_COUNTS_COLUMNS,
    derive_paper_targets,
    load_watt_counts,
    paper_gpu_tdp,
    paper_model_params,
    parse_number_list,
    read_watt_counts,
)

PAPER = Path(__file__).resolve().parents[1] / "data" / "paper"


@pytest.fixture(scope="module")
def tdp():
    return paper_gpu_tdp(PAPER / "gpu_features.csv")


@pytest.fixture(scope="module")
def params():
    return paper_model_params(PAPER / "model_features.csv")


@pytest.fixture()
def synthetic(tmp_path):
    return make_synthetic_watt_counts(tmp_path / "watt_counts_subset.csv")


def _row(**kw):
    base = {
        "model": "nvidia/AceMath-7B-Instruct",
        "gpu_type": "NVIDIA A30",
        "lambda_qps": None,
        "generation_tokens_total": 10,
        "measurement_duration": 1.0,
        "gpu_energy": 1.0,
        "gpu_0_power_draw_watts_mean": 100.0,
        "gpu_0_power_draw_watts_min": 50.0,
        "gpu_0_power_draw_watts_max": 150.0,
        "gpu_0_power_draw_watts_std": 10.0,
        "time_to_first_token_seconds_events": [],
        "e2e_request_latency_seconds_events": [1.0],
        "request_generation_tokens": [],
        "request_prompt_tokens": [],
    }
    base.update(kw)
    return base


# Three handmade rows with hand-computed targets (see comments).
HANDMADE = [
    # offline on A30 (TDP 165 W): 132/165 = 0.8; ITL 40 s / 2000 tok = 0.02 s; output 2000/1000 = 2.
    _row(generation_tokens_total=2000, measurement_duration=40.0, gpu_0_power_draw_watts_mean=132.0,
         e2e_request_latency_seconds_events=[40.0]),
    # server_low on T4 (70 W): 14/70 = 0.2; requests: (2.5-0.5)/4 = 0.5, (gen 1: skipped), (1.1-0.1)/10 = 0.1
    # → ITL 0.3; concurrency 0.017 × mean(2.5, 0.3, 1.1) = 0.017 × 1.3; input 20; output 17/3.
    _row(gpu_type="Tesla T4", lambda_qps=0.017, generation_tokens_total=17, measurement_duration=300.0,
         gpu_0_power_draw_watts_mean=14.0,
         time_to_first_token_seconds_events=[0.5, 0.2, 0.1],
         e2e_request_latency_seconds_events=[2.5, 0.3, 1.1],
         request_generation_tokens=[5, 1, 11],
         request_prompt_tokens=[10, 20, 30]),
    # server_high on H200 (700 W): 350/700 = 0.5; ITL (1.1-0.1)/2 = 0.5; concurrency 0.33 × 0.65.
    _row(gpu_type="NVIDIA H200", lambda_qps=0.33, generation_tokens_total=4, measurement_duration=300.0,
         gpu_0_power_draw_watts_mean=350.0,
         time_to_first_token_seconds_events=[0.1, 0.2],
         e2e_request_latency_seconds_events=[1.1, 0.2],
         request_generation_tokens=[3, 1],
         request_prompt_tokens=[4, 6]),
]


@pytest.fixture()
def handmade(tmp_path):
    return write_watt_counts_rows(tmp_path / "hand.csv", HANDMADE, index=[10, 11, 12])


# --- parsing -------------------------------------------------------------------------------------


def test_loader_columns_match_published_header():
    assert tuple(HEADER[1:]) == WATT_COUNTS_COLUMNS


def test_parse_number_list_basic():
    assert parse_number_list("[0.12, 3, -1e-05]") == [0.12, 3.0, -1e-05]
    assert parse_number_list("[]") == []
    assert parse_number_list("  [ ]  ") == []
    assert parse_number_list("") == []
    assert parse_number_list(None) == []
    assert parse_number_list(float("nan")) == []
    assert parse_number_list("[1, 2,]") == [1.0, 2.0]
    assert math.isnan(parse_number_list("[nan]")[0])


@pytest.mark.parametrize(
    "bad",
    ["[__import__('os')]", "[1, 'a']", "[[1, 2]]", "{1, 2}", "1, 2", "[1,, 2]", "[True]", "[0x10]", "[1 2]"],
)
def test_parse_number_list_rejects(bad):
    with pytest.raises(ValueError, match="row 7.*column 'c'"):
        parse_number_list(bad, row=7, column="c")


def test_read_parses_list_columns(synthetic):
    df = read_watt_counts(synthetic)
    assert list(df.columns[: len(WATT_COUNTS_COLUMNS)]) == list(WATT_COUNTS_COLUMNS)
    assert pd.api.types.is_integer_dtype(df.index)
    for col in LIST_COLUMNS:
        assert all(isinstance(v, list) and all(isinstance(x, float) for x in v) for v in df[col])
    offline = df["lambda_qps"].isna()
    assert (df.loc[offline, "time_to_first_token_seconds_events"].map(len) == 0).all()
    assert (df.loc[offline, "e2e_request_latency_seconds_events"].map(len) == 1).all()
    server = df.loc[~offline & (df["generation_tokens_total"] > 0)]
    assert (server["time_to_first_token_seconds_events"].map(len) == server["request_generation_tokens"].map(len)).all()
    assert set(df["lambda_qps"].dropna()) == {0.017, 0.33}


def test_read_handles_empty_cells(tmp_path):
    p = write_watt_counts_rows(tmp_path / "e.csv", [_row(request_prompt_tokens=None, time_to_first_token_seconds_events="[]")])
    df = read_watt_counts(p)
    assert df.at[0, "request_prompt_tokens"] == []
    assert df.at[0, "time_to_first_token_seconds_events"] == []


def test_header_missing_column(tmp_path, synthetic):
    df = pd.read_csv(synthetic, index_col=0).drop(columns=["request_prompt_tokens", "gpu_energy"])
    p = tmp_path / "missing.csv"
    df.to_csv(p)
    with pytest.raises(ValueError, match="lacks columns: gpu_energy, request_prompt_tokens"):
        read_watt_counts(p)


def test_header_without_index_column(tmp_path, synthetic):
    p = tmp_path / "noindex.csv"
    pd.read_csv(synthetic, index_col=0).to_csv(p, index=False)
    with pytest.raises(ValueError, match="unnamed integer index"):
        read_watt_counts(p)


def test_hostile_list_content_is_rejected_not_run(tmp_path):
    sentinel = tmp_path / "pwned"
    payload = f"[__import__('pathlib').Path({str(sentinel)!r}).touch()]"
    p = write_watt_counts_rows(tmp_path / "h.csv", [_row(), _row(request_generation_tokens=payload)], index=[0, 41])
    with pytest.raises(ValueError, match=r"row 41, column 'request_generation_tokens'"):
        read_watt_counts(p)
    assert not sentinel.exists()


def test_non_numeric_scalar_column(tmp_path):
    p = write_watt_counts_rows(tmp_path / "n.csv", [_row(), _row()], index=[0, 1])
    text = p.read_text().splitlines()
    cells = text[2].split(",")
    cells[HEADER.index("measurement_duration")] = "fast"
    text[2] = ",".join(cells)
    p.write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match="row 1, column 'measurement_duration'"):
        read_watt_counts(p)


# --- paper targets -------------------------------------------------------------------------------


def test_derive_paper_targets_handmade(handmade, tdp):
    d = derive_paper_targets(read_watt_counts(handmade), tdp)
    assert list(d["scenario"]) == ["offline", "server_low", "server_high"]
    assert list(d["lambda_qps_feature"]) == [1000.0, 0.017, 0.33]
    np.testing.assert_allclose(d["normalized_power_draw"], [0.8, 0.2, 0.5])
    np.testing.assert_allclose(d["paper_itl"], [0.02, 0.3, 0.5])


def test_server_itl_nan_without_multi_token_requests(tmp_path, tdp):
    p = write_watt_counts_rows(tmp_path / "s.csv", [_row(lambda_qps=0.33, generation_tokens_total=2,
        time_to_first_token_seconds_events=[0.1, 0.2], e2e_request_latency_seconds_events=[0.1, 0.2],
        request_generation_tokens=[1, 1], request_prompt_tokens=[3, 3])])
    d = derive_paper_targets(read_watt_counts(p), tdp)
    assert math.isnan(d["paper_itl"].iloc[0])


def test_derive_drops_zero_tokens_and_needs_tdp_for_every_gpu(synthetic, tdp):
    raw = read_watt_counts(synthetic)
    d = derive_paper_targets(raw, tdp)
    assert (raw["generation_tokens_total"] == 0).sum() == 2
    assert len(d) == len(raw) - 2 and (d["generation_tokens_total"] > 0).all()
    assert derive_paper_targets(raw)["normalized_power_draw"].isna().all()
    with pytest.raises(ValueError, match="no TDP for gpu_type: 'Tesla T4'"):
        derive_paper_targets(raw, {k: v for k, v in tdp.items() if k != "Tesla T4"})


# --- record table --------------------------------------------------------------------------------


def test_load_handmade_records(handmade, tdp, params):
    r = load_watt_counts(handmade, model_params=params, tdp_by_gpu_type=tdp,
                         gpu_name_map={"NVIDIA H200": "H200 SXM 141GB"})
    check_records(r)
    assert list(r["row_id"]) == ["watt_counts:10", "watt_counts:11", "watt_counts:12"]
    assert list(r["gpu"]) == ["NVIDIA A30", "Tesla T4", "H200 SXM 141GB"]
    assert list(r["x_gpu_type"]) == ["NVIDIA A30", "Tesla T4", "NVIDIA H200"]
    assert list(r["kind"]) == ["offline", "server", "server"]
    np.testing.assert_allclose(r["itl_s"], [np.nan, 0.3, 0.5])
    np.testing.assert_allclose(r["x_paper_itl"], [0.02, 0.3, 0.5])
    np.testing.assert_allclose(r["system_s_per_token"], [0.02, 300 / 17, 75.0])
    np.testing.assert_allclose(r["concurrency"], [np.nan, 0.017 * 1.3, 0.33 * 0.65])
    np.testing.assert_allclose(r["qps"], [np.nan, 0.017, 0.33])
    np.testing.assert_allclose(r["num_requests"], [1000, np.nan, np.nan])
    np.testing.assert_allclose(r["input_tokens"], [np.nan, 20.0, 5.0])
    np.testing.assert_allclose(r["output_tokens"], [2.0, 17 / 3, 2.0])
    np.testing.assert_allclose(r["power_w"], [132.0, 14.0, 350.0])
    np.testing.assert_allclose(r["x_normalized_power_draw"], [0.8, 0.2, 0.5])
    np.testing.assert_allclose(r["x_lambda_qps_feature"], [1000.0, 0.017, 0.33])
    assert set(r["max_batch"]) == {256.0}


def test_load_synthetic_schema(synthetic, tdp, params):
    r = load_watt_counts(synthetic, model_params=params, tdp_by_gpu_type=tdp)
    check_records(r)
    assert list(r.columns) == list(RECORD_COLUMNS) + [
        "x_normalized_power_draw", "x_paper_itl", "x_lambda_qps_feature", "x_gpu_type"]
    for col, (kind, _) in RECORD_COLUMNS.items():
        if kind == "float":
            assert r[col].dtype == np.float64, col
        else:
            assert r[col].map(lambda v: isinstance(v, str)).all(), col
    assert r["row_id"].is_unique
    assert set(r["source"]) == {"watt_counts"} and set(r["engine"]) == {"vllm"}
    assert set(r["itl_stat"]) == {ITL_STAT}
    assert r["power_w"].notna().all() and r["x_normalized_power_draw"].between(0, 1.2).all()


def test_zero_token_and_moe_rows_dropped(synthetic, tdp, params):
    raw = read_watt_counts(synthetic)
    r = load_watt_counts(synthetic, model_params=params, tdp_by_gpu_type=tdp)
    dropped = {f"watt_counts:{i}" for i in raw.index[(raw["generation_tokens_total"] == 0) | (raw["model"] == MOE_MODEL)]}
    assert len(dropped) == 3
    assert not dropped & set(r["row_id"])
    assert len(r) == len(raw) - 3
    assert MOE_MODEL not in set(r["llm"])
    # Without model_params the MoE row stays (only zero-token rows go).
    assert MOE_MODEL in set(load_watt_counts(synthetic)["llm"])
    # A model absent from model_params is kept.
    kept = load_watt_counts(synthetic, model_params={MOE_MODEL: (7.0, 1.0)})
    assert len(kept) == len(raw) - 3


def test_scenario_counts(synthetic, params):
    r = load_watt_counts(synthetic, model_params=params)
    # 4 dense models × 3 GPUs per scenario.
    assert r["scenario"].value_counts().to_dict() == {"offline": 12, "server_low": 12, "server_high": 12}
    assert (r.loc[r["kind"] == "offline", "scenario"] == "offline").all()
    assert set(r.loc[r["kind"] == "server", "scenario"]) == {"server_low", "server_high"}


def test_itl_offline_nan_server_finite(synthetic, params):
    r = load_watt_counts(synthetic, model_params=params)
    off = r["kind"] == "offline"
    assert r.loc[off, "itl_s"].isna().all()
    assert np.isfinite(r.loc[~off, "itl_s"]).all() and (r.loc[~off, "itl_s"] > 0).all()
    assert np.isfinite(r["system_s_per_token"]).all()
    # The notebook's offline ITL is the whole-run s/token; kept in x_paper_itl.
    np.testing.assert_allclose(r.loc[off, "x_paper_itl"], r.loc[off, "system_s_per_token"])


def test_littles_law_concurrency(synthetic, params):
    raw = read_watt_counts(synthetic)
    r = load_watt_counts(synthetic, model_params=params).set_index("row_id")
    server = r[r["kind"] == "server"]
    for row_id, row in server.iterrows():
        e2e = raw.at[int(row_id.split(":")[1]), "e2e_request_latency_seconds_events"]
        assert row["concurrency"] == pytest.approx(row["qps"] * np.mean(e2e))
    assert r.loc[r["kind"] == "offline", "concurrency"].isna().all()


def test_paper_tables(tdp, params):
    assert tdp["NVIDIA A30"] == 165.0 and tdp["NVIDIA H200"] == 700.0 and tdp["Tesla T4"] == 70.0
    assert len(tdp) == 11
    assert params["allenai/OLMoE-1B-7B-0924"] == (7.0, 1.0)
    assert params["meta-llama/Llama-3.1-8B-Instruct"] == (8.03, 8.03)
    assert len(params) == 51


def test_pandas_round_trip_reads_the_same(tmp_path, synthetic):
    # The published file was written by pandas (DataFrame.to_csv with its index); a re-save must read identically.
    p = tmp_path / "resaved.csv"
    pd.read_csv(synthetic, index_col=0).to_csv(p)
    pd.testing.assert_frame_equal(read_watt_counts(p), read_watt_counts(synthetic))
