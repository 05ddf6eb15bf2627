"""Issue 13 contracts: physics-consistent learned outputs, stack inputs, nested selection, per-GPU
intervals and server power that follows the arrival rate (SYNTHETIC Watt Counts file)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wattgpu import Predictor, SpecValidationError, Workload, default_catalog
from wattgpu.serving.capacity import BATCH_GRID
from wattgpu.errors import ModelFitError
from wattgpu_train import evaluate as E
from wattgpu_train import selection
from wattgpu_train.calibrate import interval_factors
from wattgpu_train.dataset import build_dataset
from wattgpu_train.loading import load_catalog, load_training_records
from wattgpu_train.measurements import load_measurements
from wattgpu_train.recipes import DEFAULT, ITL_LLM_MONOTONE, MONOTONE

from .helpers import run_cli
from .synthetic_watt_counts import make_synthetic_watt_counts

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs.json"
MODELS = REPO / "runtime" / "wattgpu" / "models"
# Dense and MoE, small to large (catalog ids).
SWEEP_LLMS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B-Instruct-2507",
              "codellama/CodeLlama-70b-hf")
SWEEP_BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024)


# ---------------------------------------------------------------- monotonicity
def _directions(target: str) -> dict[str, int]:
    """Every input with a physical direction; for ITL also the LLM's size (issue 38: reads more, never faster)."""
    return {**MONOTONE, **ITL_LLM_MONOTONE} if target == "itl" else MONOTONE


def test_every_directional_input_is_constrained():
    for target in ("power", "itl"):
        for m in DEFAULT.candidates(target):
            for f in m.features:
                if f in _directions(target):
                    assert m.monotone.get(f) == _directions(target)[f], (target, f)
    schema = json.loads((MODELS / "feature_schema.json").read_text())
    for target, entry in schema["models"].items():
        names = [f["name"] for f in entry["features"]]
        want = {f: _directions(target)[f] for f in names if f in _directions(target)}
        assert entry["xgboost_params"]["monotone_constraints"] == want, target


def test_every_llm_input_of_the_itl_trees_rises_with_the_llm():
    """Issue 38: each input of the ITL trees that depends on the LLM (on one GPU) may only raise ITL, so a model with
    at least another's bytes, FLOPs and layers is never predicted faster on the same GPU, batch and engine."""
    llm_inputs = {"llm_weights_gb", "llm_layers", "llm_log_params_b", "llm_active_params_b", "llm_hidden",
                  "llm_kv_heads", "llm_kv_kb_per_token", "log_weight_read_s", "bw_latency_s", "compute_latency_s",
                  "log_overhead_share"}
    for m in DEFAULT.candidates("itl"):
        for f in set(m.features) & llm_inputs:
            assert m.monotone.get(f) == +1, f


@pytest.mark.parametrize("kind", ["offline", "closed_loop"])
@pytest.mark.parametrize("era", ["current", "legacy"])
def test_sweep_power_and_itl_never_fall_as_the_batch_grows(kind, era):
    """Whole catalog × several LLMs × batch 1…1024 (beyond what fits, the batch is capped by memory):
    the decode work (batch / ITL), ITL and power are all non-decreasing in the batch.

    Every sweep batch is on the capacity grid every cap shares (``capacity.BATCH_GRID``), so a larger cap's
    sub-batch choice includes every smaller cap's: the served work cannot fall, and power is the power of the
    batch the GPU really runs (``capacity.sub_batch``)."""
    pred = Predictor()
    cat = default_catalog()
    triples, keys = [], []
    for g in cat.gpus:
        for name in SWEEP_LLMS:
            m = cat.llm(name)
            for b in SWEEP_BATCHES:
                wl = (Workload(kind="offline", max_batch=b, engine_era=era) if kind == "offline" else
                      Workload(kind="closed_loop", concurrency=float(b), engine_era=era))
                triples.append((g, m, wl))
                keys.append((g.name, name))
    t = pred.predict_table(triples)
    power, itl = t["power_w"], t["itl_s"]
    tput = t["effective_batch"] / itl  # decode work: sequences × tokens per sequence per second
    assert set(SWEEP_BATCHES) <= set(BATCH_GRID.tolist())
    violations, checked = [], 0
    n = len(SWEEP_BATCHES)
    for start in range(0, len(triples), n):
        sl = slice(start, start + n)
        ok = np.isfinite(power[sl]) & np.isfinite(itl[sl])
        p, i, r = power[sl][ok], itl[sl][ok], tput[sl][ok]
        checked += max(len(p) - 1, 0)
        for name, v in (("work", r), ("itl", i), ("power", p)):
            violations += [(keys[start], name, int(k)) for k in np.flatnonzero(v[1:] < v[:-1] * (1 - 1e-9))]
    assert checked > 1000  # the sweep really covered the catalog (70B does not fit on small GPUs)
    assert violations == []


# ---------------------------------------------------------------- stack inputs
def test_workload_stack_fields_default_and_validate():
    w = Workload()
    assert (w.engine_era, w.itl_stat) == ("current", "mean")
    with pytest.raises(SpecValidationError, match="engine_era"):
        Workload(engine_era="0.5")
    with pytest.raises(SpecValidationError, match="itl_stat"):
        Workload(itl_stat="p99")
    assert Workload.from_dict({"engine_era": "legacy", "itl_stat": "median"}).engine_era == "legacy"


def test_cli_engine_era_option():
    ok = run_cli("predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "NVIDIA L40S",
                 "--engine-era", "legacy", "--itl-stat", "median", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["workload"]["engine_era"] == "legacy"
    bad = run_cli("predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "NVIDIA L40S", "--engine-era", "old")
    assert bad.returncode != 0 and "--engine-era" in bad.stderr and "Traceback" not in bad.stderr


def test_stack_inputs_come_from_row_metadata():
    r = load_measurements(REPO / "data")
    era = r.groupby("source")["engine_era"].agg(set).to_dict()
    assert era["mlenergy_v2"] == {"legacy"} and era["mlenergy_v3"] == {"current"}
    assert era["llmperf_techgrandpa"] == {"current"} and era["mlenergy_v1"] == {"legacy"}
    stat = r.groupby("source")["itl_statistic"].agg(set).to_dict()
    assert stat["mlenergy_v3"] == {"median"} and stat["mlenergy_v2"] == {"mean"}


def test_llmperf_rows_bf16_median_run_ttft_excluded():
    import pandas as pd

    raw = pd.read_csv(REPO / "data" / "llmperf_techgrandpa" / "rows.csv")
    r = load_measurements(REPO / "data", sources=["llmperf_techgrandpa"])
    assert set(r["x_precision"]) == {"bfloat16"}
    assert r["power_w"].isna().all()
    idx = r["row_id"].str.split(":").str[1].astype(int)
    assert np.allclose(r["itl_s"].to_numpy(), raw.loc[idx, "itl_excl_ttft_from_means_s"].to_numpy())
    # one run per (GPU, checkpoint, day), and it is the group's (lower) median
    day = raw.loc[idx, "timestamp"].str.slice(0, 10).to_numpy()
    keys = list(zip(r["x_source_gpu"], r["x_llm_source_name"], day))
    assert len(keys) == len(set(keys))
    for (g, m, d), v in zip(keys, r["itl_s"]):
        grp = raw[(raw["gpu"] == g) & (raw["llm_source_name"] == m) & raw["timestamp"].str.startswith(d)]
        s = np.sort(grp["itl_excl_ttft_from_means_s"].to_numpy())
        assert v == s[(len(s) - 1) // 2]
    assert {"NVIDIA L4", "NVIDIA L40S", "NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 4000 Ada Generation",
            "NVIDIA RTX A6000"} <= set(r["gpu"])


# ---------------------------------------------------------------- nested selection and splits
def test_nested_selection_never_sees_the_test_fold(monkeypatch):
    records = load_training_records(REPO / "data")
    ds = build_dataset(records, load_catalog(SPECS), "power")
    seen: list[set[str]] = []
    real = selection.select

    def spy(cands, data, groups, k=None):
        seen.append(set(data.records["row_id"]))
        return real(cands, data, groups, k)

    monkeypatch.setattr(E, "select", spy)
    recipe = E.quick_recipe(DEFAULT, trees=5)
    folds = E.make_folds(ds.records, "logo")
    pred, chosen = E.nested_oof(recipe, "power", ds, folds, "logo", n_jobs=1)
    assert set(chosen) == {name for name, _ in folds}
    assert len(seen) == len(folds)
    for (_, test), ids in zip(folds, seen):
        assert ids.isdisjoint(set(ds.records.loc[test, "row_id"]))
    assert np.isfinite(pred).all()


def test_leave_one_source_out_folds():
    records = load_training_records(REPO / "data")
    folds = E.make_folds(records, "loso")
    assert [n for n, _ in folds] == sorted(records["source"].unique())
    for name, test in folds:
        assert set(records.loc[test, "source"]) == {name}


def test_gpu_weighted_interval_factors():
    # GPU a: 180 rows exactly right; GPU b: 20 rows 2x too low. Unweighted, b is 10 % of the residuals
    # and the 80 % upper factor stays 1; weighted, b is half the mass, so the upper factor reaches 2.
    y = np.ones(200)
    p = np.r_[np.ones(180), np.full(20, 0.5)]
    g = np.array(["a"] * 180 + ["b"] * 20, dtype=object)
    assert interval_factors(y, p)["factors"]["80"][1] == pytest.approx(1.0)
    assert interval_factors(y, p, groups=g)["factors"]["80"][1] == pytest.approx(2.0)


# ---------------------------------------------------------------- server power (SYNTHETIC file)
def test_server_power_follows_the_arrival_rate(tmp_path):
    """SYNTHETIC Watt Counts file (truth: server power ≈ 0.2 × TDP at 0.017 req/s, 0.6 × TDP at 0.33):
    trained on it, the default recipe predicts server power ordered like the truth for every pair."""
    from wattgpu_train.cli import main as train_main
    from wattgpu_train.watt_counts import load_watt_counts_for_catalog

    wc = make_synthetic_watt_counts(tmp_path / "watt_counts_subset.csv")  # synthetic test fixture
    out = tmp_path / "models"
    res = CliRunner().invoke(train_main, ["fit", "--watt-counts", str(wc), "--out", str(out), "--no-intervals",
                                          "--specs", str(SPECS), "--data-dir", str(REPO / "data")])
    assert res.exit_code == 0, res.output
    schema = json.loads((out / "feature_schema.json").read_text())
    assert "wl_log_arrival_rate" in [f["name"] for f in schema["models"]["power"]["features"]]
    rec = load_watt_counts_for_catalog(wc, REPO / "data")
    truth = rec[rec["kind"] == "server"].groupby(["llm", "gpu", "scenario"])["power_w"].mean()
    pred = Predictor(model_dir=out)
    pairs = sorted({(m, g) for m, g, _ in truth.index})
    checked = 0
    for m, g in pairs:
        try:  # the synthetic file pairs some models with GPUs they do not fit on (T4): skipped
            low = pred.predict(g, m, Workload(kind="server", qps=0.017)).power_w
            high = pred.predict(g, m, Workload(kind="server", qps=0.33)).power_w
        except ModelFitError:
            continue
        assert truth[(m, g, "server_low")] < truth[(m, g, "server_high")]
        assert low < high, (m, g, low, high)
        checked += 1
    assert checked >= 6
