"""compare-peers: the pure parts (row mapping, same-row scoring, reasons, report) with the peers mocked.

The peers themselves (the optional `[peers]` extra) are not needed here; the one test that runs a real
peer is skipped when it is not installed. Arrays built below are synthetic test fixtures.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattgpu_train import peers
from wattgpu_train.peers import PeerRun, compare, error_stats, measured_rows, peers_markdown

from .helpers import REPO

DATA = REPO / "data"


@pytest.fixture(scope="module")
def loaded():  # type: ignore[no-untyped-def]
    from wattgpu_train.pipeline import load

    return load(DATA, REPO / "specs.json")


def test_error_stats_median_and_bias_on_finite_rows_only() -> None:
    y = np.array([1.0, 2.0, 4.0, np.nan, 0.0, 5.0])  # synthetic
    p = np.array([1.5, 1.0, 4.0, 3.0, 1.0, np.nan])
    s = error_stats(y, p)
    # rows kept: (1, 1.5) +50 %, (2, 1) -50 %, (4, 4) 0 %
    assert s["n"] == 3
    assert s["mdape"] == pytest.approx(50.0)
    assert s["bias"] == pytest.approx(0.0)
    assert error_stats([np.nan], [1.0]) == {"n": 0, "mdape": None, "bias": None}


def test_measured_rows_join_the_source_row_of_each_record(loaded) -> None:  # type: ignore[no-untyped-def]
    m = measured_rows(loaded.records, DATA)
    assert len(m) == len(loaded.records) and m["row_id"].is_unique
    raw = pd.read_csv(DATA / "llmperf_techgrandpa" / "rows.csv")
    sub = m[m["source"] == "llmperf_techgrandpa"]
    assert len(sub) > 0
    idx = sub["row_id"].str.rsplit(":", n=1).str[1].astype(int).to_numpy()
    np.testing.assert_allclose(sub["ttft_s"].to_numpy(), raw["ttft_mean_s"].to_numpy()[idx])
    # sources without TTFT carry none; mlenergy has no prompt lengths -> the runtime default, flagged
    v3 = m[m["source"] == "mlenergy_v3"]
    assert v3["ttft_s"].isna().all()
    assert (v3["prompt_tokens"] == peers.DEFAULT_PROMPT_TOKENS).all() and v3["prompt_assumed"].all()
    assert (m["batch"] >= 1).all() and (m["tp"] >= 1).all()
    ok = m["throughput_tok_s"].notna()
    np.testing.assert_allclose(m.loc[ok, "throughput_tok_s"] * loaded.records.loc[ok, "system_s_per_token"], 1.0)


def _fixture_rows() -> tuple[pd.DataFrame, pd.DataFrame]:
    measured = pd.DataFrame({"row_id": ["s:0", "s:1", "s:2", "s:3"], "gpu": ["G1", "G1", "G2", "G2"],
                             "itl_s": [0.01, 0.02, 0.04, np.nan]})
    wattgpu = pd.DataFrame({"itl_s": [0.011, 0.018, np.nan]}, index=["s:0", "s:1", "s:2"])
    return measured, wattgpu


def test_compare_scores_peer_and_wattgpu_on_the_same_rows() -> None:
    measured, wattgpu = _fixture_rows()
    run = PeerRun("fake", "fake 1", ("itl_s",), ["synthetic"],
                  estimates={"s:0": {"itl_s": 0.02}, "s:1": {"itl_s": 0.01}, "s:2": {"itl_s": 0.04},
                             "s:3": {"itl_s": 0.05}},
                  unanswered={"s:9": "no system", "s:8": "no system", "s:7": "too big"})
    out = compare(measured, wattgpu, [run])["fake"]
    block = out["metrics"]["itl_s"]
    # s:2 has no WattGPU figure and s:3 no measurement: only s:0 and s:1 are scored, for both
    assert block["pooled"]["n"] == 2
    assert block["pooled"]["peer"]["mdape"] == pytest.approx(75.0)  # +100 % and -50 %
    assert block["pooled"]["wattgpu"]["mdape"] == pytest.approx(10.0)
    assert set(block["per_gpu"]) == {"G1"}
    assert block["no_wattgpu_prediction"] == 1 and block["peer_answered_no_measurement"] == 1
    assert out["unanswered_reasons"] == {"no system": 2, "too big": 1}
    assert (out["answered"], out["unanswered"]) == (4, 3)


def test_short_reason_is_one_line_without_paths_or_row_numbers() -> None:
    r = peers.short_reason(ValueError("No database for a100_pcie at /opt/x/y.parquet:\n batch 64 needs 12.5 GB"))
    assert "\n" not in r and "/opt" not in r and "a100_pcie" in r
    assert r == "ValueError: No database for a100_pcie at <path>: batch N needs N GB"


def test_workload_mappings() -> None:
    assert peers.aic_mode({"source": "argonne"}) == "static"
    assert peers.aic_mode({"source": "mlenergy_v3"}) == "agg"
    assert [peers.llma_dtype(p) for p in ("float16", "bfloat16", "fp8", "mxfp4")] == \
        ["w16a16e16", "w16a16e16", "w8a8e16", "w4a16e16"]
    assert [peers.ecologits_bits(p) for p in ("float16|bfloat16", "fp8", "mxfp4")] == [16, 8, 4]


def test_hf_config_prefers_stored_copy_then_catalog(tmp_path: Path) -> None:
    llm = "meta-llama/Llama-3.1-8B-Instruct"
    cfg, how = peers.hf_config(llm, None, DATA / "catalog" / "llm_configs.csv")
    assert how.startswith("config.json rebuilt")
    assert cfg["num_hidden_layers"] == 32 and cfg["num_key_value_heads"] == 8 and cfg["architectures"] == ["LlamaForCausalLM"]
    (tmp_path / "meta-llama--Llama-3.1-8B-Instruct.json").write_text(json.dumps({"config": {"model_type": "x"}}))
    stored, how = peers.hf_config(llm, tmp_path, DATA / "catalog" / "llm_configs.csv")
    # the stored copy wins; the keys it lacks come from the catalog (partial copies lack e.g. vocab_size)
    assert stored["model_type"] == "x" and stored["vocab_size"] == 128256 and "missing keys" in how
    full = dict(cfg)
    (tmp_path / "meta-llama--Llama-3.1-8B-Instruct.json").write_text(json.dumps({"config": full}))
    assert peers.hf_config(llm, tmp_path, DATA / "catalog" / "llm_configs.csv") == (full, "stored config.json")
    with pytest.raises(LookupError, match="not in"):
        peers.hf_config("nobody/none", None, DATA / "catalog" / "llm_configs.csv")


def test_missing_peer_is_counted_not_fatal(loaded, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rows = measured_rows(loaded.records, DATA).head(5)
    monkeypatch.setitem(sys.modules, "ecologits.impacts.llm", None)  # import fails as if not installed
    run = peers.run_ecologits(rows, loaded.catalog, lambda s: None)
    assert not run.estimates and len(run.unanswered) == 5
    assert all(r.startswith("not importable") for r in run.unanswered.values())


def test_ecologits_energy_is_gpu_only_per_output_token(loaded) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("ecologits")
    m = measured_rows(loaded.records, DATA)
    rows = m[m["llm"].eq("meta-llama/Llama-3.1-8B-Instruct")].head(1).assign(batch=64.0, precision="bfloat16")
    assert len(rows) == 1
    est = peers.run_ecologits(rows, loaded.catalog, lambda s: None).estimates
    j = next(iter(est.values()))["energy_per_token_j"]
    assert 0.05 < j < 0.5  # EcoLogits' 8B figure at its own batch of 64 is about 0.16 J/token (GPU only)


def test_markdown_names_versions_reasons_and_rows() -> None:
    measured, wattgpu = _fixture_rows()
    run = PeerRun("fake", "fake 1", ("itl_s",), ["mapped like so"], estimates={"s:0": {"itl_s": 0.02}},
                  unanswered={"s:9": "no system"})
    result = {"rows": 4, "gpus": ["G1", "G2"], "versions": {"fakepkg": "1"}, "quick": False,
              "wattgpu": {"method": "LOGO", "ttft_note": "no TTFT", "throughput_note": "b/t", "energy_note": "p/t"},
              "measured": {"itl_s": "as measured"}, "peers": compare(measured, wattgpu, [run]), "runtime_s": 12.0}
    md = peers_markdown(result)
    assert "fakepkg 1" in md and "no system (1)" in md and "mapped like so" in md and "Run time: 12 s" in md
    assert "| itl_s (s/token) | fake | 1 | 100.0 % | +100.0 % | 10.0 % | +10.0 % |" in md


def test_cli_lists_compare_peers() -> None:
    from click.testing import CliRunner

    from wattgpu_train.cli import main

    res = CliRunner().invoke(main, ["compare-peers", "--help"])
    assert res.exit_code == 0 and "--raw-configs" in res.output and "--peer" in res.output
