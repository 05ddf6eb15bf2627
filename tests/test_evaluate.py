"""Evaluation protocol: metrics on hand-computed cases, split hygiene, a leakage check on a SYNTHETIC
dataset, and the two CLI commands end to end (evaluate --quick on data/, reproduce-paper on a
SYNTHETIC Watt Counts file)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from wattgpu_train import evaluate as E
from wattgpu_train import metrics as M
from wattgpu_train.cli import main
from wattgpu_train.dataset import build_dataset
from wattgpu_train.loading import load_catalog, load_training_records
from wattgpu_train.recipes import BASE_PARAMS, ModelRecipe, Recipe

from .synthetic_watt_counts import make_synthetic_watt_counts

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "specs.json"


# ---------------------------------------------------------------- metrics (hand-computed)
def test_mdape_hand_computed():
    # errors 10 %, 50 %, 0 %, 20 % -> median of (0, 10, 20, 50) = 15 %
    assert M.mdape(np.array([100.0, 2.0, 5.0, 10.0]), np.array([110.0, 1.0, 5.0, 12.0])) == pytest.approx(15.0)


def test_median_signed_error_hand_computed():
    # errors +10 %, -50 %, 0 %, +20 %: the median of the signed errors is +5 % (a low prediction is negative)
    assert M.median_signed_error_pct(np.array([100.0, 2.0, 5.0, 10.0]),
                                     np.array([110.0, 1.0, 5.0, 12.0])) == pytest.approx(5.0)


def test_pearson_hand_computed():
    assert M.pearson_r(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])) == pytest.approx(1.0)
    assert M.pearson_r(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert np.isnan(M.pearson_r(np.array([1.0, 2.0]), np.array([5.0, 5.0])))


def test_kendall_tau_b_with_ties():
    # x = 1,2,3,4 ; y = 1,2,2,3: pairs 6, concordant 5, discordant 0, ties in y 1, ties in x 0
    # tau_b = 5 / sqrt(6 * 5)
    assert M.kendall_tau_b(np.array([1, 2, 3, 4.0]), np.array([1, 2, 2, 3.0])) == pytest.approx(5 / np.sqrt(30))
    assert M.kendall_tau_b(np.array([1, 2, 3.0]), np.array([3, 2, 1.0])) == pytest.approx(-1.0)
    # one swap among 3: C=2, D=1 -> 1/3
    assert M.kendall_tau_b(np.array([1, 2, 3.0]), np.array([1, 3, 2.0])) == pytest.approx(1 / 3)
    assert np.isnan(M.kendall_tau_b(np.array([1.0]), np.array([1.0])))


def test_group_kendall_skips_singletons_and_counts_groups():
    y = np.array([1, 2, 3, 10, 20, 5.0])
    p = np.array([1, 2, 3, 20, 10, 7.0])
    groups = ["a", "a", "a", "b", "b", "c"]
    items = ["g1", "g2", "g3", "g1", "g2", "g1"]
    tau, n = M.mean_group_kendall(y, p, groups, items)
    assert n == 2  # group c has one item
    assert tau == pytest.approx((1.0 + -1.0) / 2)


def test_top_k_pick():
    # group a: truly best g1, predicted order g2 < g1 < g3 -> top1 miss, top3 hit
    # group b: truly best g2, predicted best g2 -> hit
    y = np.array([1, 2, 3, 5, 1.0, 9])
    p = np.array([2, 1, 3, 5, 1.0, 9])
    groups = ["a", "a", "a", "b", "b", "b"]
    items = ["g1", "g2", "g3", "g1", "g2", "g3"]
    r = M.top_k_pick(y, p, groups, items, ks=(1, 2))
    assert r["groups"] == 2
    assert r["top1"] == pytest.approx(0.5)
    assert r["top2"] == pytest.approx(1.0)


# ---------------------------------------------------------------- splits
@pytest.fixture(scope="module")
def records():
    return load_training_records(REPO / "data")


def test_grouped_cv_never_straddles(records):
    keys = E.config_key(records)
    folds = E.grouped_kfold(keys, 5)
    assert len(folds) == 5
    cover = np.zeros(len(records), dtype=int)
    for _, test in folds:
        cover += test
        assert not set(keys[test]) & set(keys[~test])
    assert np.all(cover == 1)
    again = E.grouped_kfold(keys, 5)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))


def test_cv_splits_single_gpu_rows_as_without_tp_rows(records):
    """Adding tensor-parallel rows must not reshuffle the single-GPU CV folds (figures stay comparable)."""
    single = (records["x_tp"] == 1).to_numpy()
    with_tp = E.make_folds(records, "cv")
    alone = E.make_folds(records[single].reset_index(drop=True), "cv")
    assert len(with_tp) == len(alone)
    for (_, a), (_, b) in zip(with_tp, alone):
        assert np.array_equal(a[single], b)
    keys = E.config_key(records)
    for _, test in with_tp:
        assert not set(keys[test]) & set(keys[~test])


@pytest.mark.parametrize("split,col", [("logo", "gpu"), ("lolo", "llm")])
def test_leave_one_out_holds_out_exactly_one(records, split, col):
    folds = E.make_folds(records, split)
    assert len(folds) == records[col].nunique()
    for name, test in folds:
        assert set(records.loc[test, col]) == {name}
        assert name not in set(records.loc[~test, col])


# ---------------------------------------------------------------- leakage (SYNTHETIC data)
def _synthetic_gpu_constant_records(records: pd.DataFrame) -> pd.DataFrame:
    """SYNTHETIC: real rows' workloads, but power = TDP × a made-up per-GPU constant that no spec
    feature can predict. Only a model that saw the held-out GPU could get it right."""
    rec = records[records["power_w"].notna()].copy().reset_index(drop=True)
    gpus = sorted(rec["gpu"].unique())
    const = {g: c for g, c in zip(gpus, (0.25, 0.95, 0.4, 0.8))}
    catalog = load_catalog(SPECS)
    tdp = rec["gpu"].map(lambda g: catalog.gpu(g).tdp_w).astype(float)
    rec["power_w"] = tdp * rec["gpu"].map(const)
    return rec


def test_no_leakage_under_logo(records):
    rec = _synthetic_gpu_constant_records(records)
    catalog = load_catalog(SPECS)
    ds = build_dataset(rec, catalog, "power")
    mr = ModelRecipe(target="power", features=("gpu_tdp_w", "gpu_mem_bw_gb_s", "llm_log_params_b", "wl_log_eff_batch"),
                     transform="ratio_to_tdp",
                     params={**BASE_PARAMS, "n_estimators": 30, "max_depth": 3, "learning_rate": 0.3})
    y = ds.y_physical("power")
    # In-sample (what leakage would give): near zero error.
    fitted = E.predict_physical(mr, ds, ds, n_jobs=1)
    assert M.mdape(y, fitted) < 2.0
    # Honest LOGO: the held-out GPU's constant is unknowable -> large error.
    logo = E.oof_predictions(mr, ds, E.make_folds(ds.records, "logo"), n_jobs=2)
    assert M.mdape(y, logo) > 25.0


def test_interval_calibration_never_sees_held_out_gpu(records, monkeypatch):
    rec = _synthetic_gpu_constant_records(records)
    ds = build_dataset(rec, load_catalog(SPECS), "power")
    mr = ModelRecipe(target="power", features=("gpu_tdp_w", "llm_log_params_b"), transform="ratio_to_tdp",
                     params={**BASE_PARAMS, "n_estimators": 5, "max_depth": 2})
    seen: list[set[str]] = []
    real = E.grouped_oof

    def spy(recipe, data, groups, n_jobs=1):
        seen.append(set(data.records["gpu"]))
        return real(recipe, data, groups, n_jobs=n_jobs)

    monkeypatch.setattr(E, "grouped_oof", spy)
    logo = E.oof_predictions(mr, ds, E.make_folds(ds.records, "logo"), n_jobs=1)
    out = E.logo_interval_coverage(Recipe("t", power=mr, itl=mr), "power", ds, logo, {}, n_jobs=1)
    gpus = sorted(ds.records["gpu"].unique())
    assert len(seen) == len(gpus)
    for held_out, train_gpus in zip(gpus, seen):
        assert held_out not in train_gpus
        assert train_gpus == set(gpus) - {held_out}
    assert set(out["per_gpu"]) == set(gpus)
    y = ds.y_physical("power")
    for g in gpus:  # the bias column: the held-out GPU's median signed error, by hand
        rows = (ds.records["gpu"] == g).to_numpy()
        assert out["per_gpu"][g]["median_signed_error_pct"] == pytest.approx(
            100 * np.median(logo[rows] / y[rows] - 1), rel=1e-12)


# ---------------------------------------------------------------- CLI end to end
STABLE_METHOD_KEYS = {"mdape", "pearson_r", "kendall_tau_gpu", "kendall_tau_llm", "n"}


@pytest.mark.slow
def test_cli_evaluate_quick(tmp_path):
    res = CliRunner().invoke(main, ["evaluate", "--out", str(tmp_path), "--data-dir", str(REPO / "data"),
                                    "--specs", str(SPECS), "--quick"])
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "accuracy.json").read_text())
    for target, methods in (("power", {"default", "paper_recipe", "tdp", "ls_tdp"}),
                            ("itl", {"default", "paper_recipe", "roofline"})):
        for split in ("cv", "logo", "lolo"):
            assert methods <= set(r[target][split])
            for m in methods:
                assert STABLE_METHOD_KEYS <= set(r[target][split][m])
        assert "per_source" in r[target]
    assert {"energy_pick", "intervals", "data", "paper_published", "tp"} <= set(r)
    for target, base in (("power", "ls_tdp"), ("itl", "roofline")):
        tp = r["tp"][target]
        assert tp["rows"] > 100 and tp["tp_values"] == [2, 4, 8]
        for split in ("logo", "lolo"):
            assert {"default", base} <= set(tp[split])
    assert {"rows", "gpus", "llms", "sources"} <= set(r["data"])
    assert r["protocol"]["quick"] is True
    md = (tmp_path / "accuracy.md").read_text()
    assert "published, measured on Watt Counts — a different dataset" in md
    assert {"power", "itl", "rule"} <= set(json.loads((tmp_path / "calibration.json").read_text()))


def test_cli_reproduce_paper_on_synthetic_file(tmp_path):
    """SYNTHETIC Watt Counts file: checks the pipeline runs, not any accuracy."""
    wc = make_synthetic_watt_counts(tmp_path / "watt_counts_subset.csv")
    out = tmp_path / "rep"
    res = CliRunner().invoke(main, ["reproduce-paper", "--watt-counts", str(wc), "--out", str(out), "--quick",
                                    "--data-dir", str(REPO / "data"), "--specs", str(SPECS),
                                    "--label", "SYNTHETIC test file"])
    assert res.exit_code == 0, res.output
    r = json.loads((out / "paper_reproduction.json").read_text())
    for target in ("power", "itl"):
        for split in ("cv", "logo", "lolo"):
            assert {"offline", "server"} <= set(r[target][split])
            assert {"default", "paper_recipe"} <= set(r[target][split]["offline"])
    assert r["data"]["gpus"] == sorted(["NVIDIA A30", "NVIDIA Tesla T4", "NVIDIA H200 SXM 141GB"])
    assert "SYNTHETIC" in (out / "paper_reproduction.md").read_text()


def test_load_watt_counts_for_catalog_synthetic(tmp_path):
    """SYNTHETIC file: GPU names map to catalog names (NVIDIA H200 -> H200 SXM), MoE and zero-token rows gone."""
    from wattgpu_train.records import RECORD_COLUMNS
    from wattgpu_train.watt_counts import load_watt_counts_for_catalog

    wc = make_synthetic_watt_counts(tmp_path / "wc.csv")
    rec = load_watt_counts_for_catalog(wc, REPO / "data")
    assert set(RECORD_COLUMNS) <= set(rec.columns)
    assert set(rec["gpu"]) == {"NVIDIA A30", "NVIDIA Tesla T4", "NVIDIA H200 SXM 141GB"}
    assert "allenai/OLMoE-1B-7B-0924" not in set(rec["llm"])
    assert len(rec) == 4 * 3 * 3
    catalog = load_catalog(SPECS)
    for g, m in zip(rec["gpu"], rec["llm"]):
        catalog.gpu(g), catalog.llm(m)
    both = load_training_records(REPO / "data", wc)
    assert (both["source"] == "watt_counts").sum() == len(rec)


def test_fit_with_watt_counts_learns_server_power(tmp_path):
    """`fit --watt-counts` on a SYNTHETIC file in the paper's schema: the exported models know server
    rows, so server power is predicted by the learned model instead of the idle/busy mix."""
    import json as _json

    from wattgpu import Predictor, Workload
    from wattgpu_train.cli import main as train_main

    wc = make_synthetic_watt_counts(tmp_path / "watt_counts_subset.csv")  # synthetic test fixture
    out = tmp_path / "models"
    res = CliRunner().invoke(train_main, ["fit", "--watt-counts", str(wc), "--out", str(out), "--no-intervals",
                                          "--specs", str(REPO / "specs.json"), "--data-dir", str(REPO / "data")])
    assert res.exit_code == 0, res.output
    schema = _json.loads((out / "feature_schema.json").read_text())
    assert "server" in schema["domain"]["kinds"]
    assert "watt_counts" in schema["training"]["targets"]["power"]["sources"]
    pred = Predictor(model_dir=out)
    p = pred.predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct", Workload(kind="server", qps=0.33))
    assert p.power_method.startswith("learned") and p.power_w > 0
