"""FP8 rows are described at the bytes they read: the records' ``x_dtype`` goes through the runtime's ``--dtype``
definition (``quant.with_dtype``); they are scored apart (rule ``fp8_scored_apart``), never trained on, and
evaluate scores each served weight format apart."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wattgpu import features as F
from wattgpu.quant import with_dtype
from wattgpu.specs import default_catalog
from wattgpu_train.dataset import build_dataset, llm_of
from wattgpu_train.evaluate import per_format_scores, weight_format
from wattgpu_train.measurements import load_measurements, load_scored_apart

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def itl_ds():
    sources = ["llmperf_techgrandpa", "brunetta_llm_inference_power"]
    recs = pd.concat([load_measurements(DATA, sources=sources), load_scored_apart(DATA, sources=sources)],
                     ignore_index=True)
    return build_dataset(recs, default_catalog(), "itl")


def test_fp8_rows_are_scored_apart_never_trained_on():
    train = load_measurements(DATA, single_gpu_only=False)
    apart = load_scored_apart(DATA, single_gpu_only=False)
    assert (train["x_dtype"] == "auto").all()
    assert len(apart) == 49 and (apart["x_dtype"] == "fp8").all() and (apart["x_precision"] == "fp8").all()
    assert not set(apart["row_id"]) & set(train["row_id"])


def test_fp8_rows_read_one_byte_per_weight(itl_ds):
    r = itl_ds.records
    fp8 = (r["x_dtype"] == "fp8").to_numpy()
    assert fp8.sum() == 49 and (~fp8).sum() == 44
    cat = default_catalog()
    params = np.array([cat.llm(x).total_params_b for x in r["llm"]]) * 1e9
    wb = np.asarray(itl_ds.cols["weights_bytes"])
    np.testing.assert_allclose(wb[fp8] / params[fp8], 1.0, rtol=1e-6)
    np.testing.assert_allclose(wb[~fp8] / params[~fp8], 2.0, rtol=1e-6)
    # the FP8 matmul rate only where the spec sheet lists FP8 tensor cores (H100, Ada), the 16-bit one on Ampere
    fast = np.asarray(itl_ds.cols["compute_tflops"]) > np.asarray(itl_ds.cols["gpu_fp16_tflops"])
    has_fp8 = np.array([cat.gpu(g).fp8_tflops is not None for g in r["gpu"]])
    assert (fast == (fp8 & has_fp8)).all()
    assert {"NVIDIA A100 SXM4 80GB", "NVIDIA RTX A4000"} <= set(r.loc[fp8 & ~has_fp8, "gpu"])


def test_training_features_equal_the_runtime_dtype_path(itl_ds):
    """A row's features are what `wattgpu predict --dtype fp8` computes for the same GPU, LLM and workload."""
    cat = default_catalog()
    i = int(np.flatnonzero((itl_ds.records["x_dtype"] == "fp8").to_numpy())[0])
    gpu, _, wl = itl_ds.triples[i]
    llm = with_dtype(cat.llm(itl_ds.records["llm"][i]), "fp8")
    names = ["llm_weights_gb", "log_weight_read_s", "weights_compute_share", "log_roofline_itl"]
    runtime = F.matrix(names, F.columns([(gpu, llm, wl)]))[0]
    np.testing.assert_array_equal(itl_ds.X(names)[i], runtime)


def test_x_dtype_on_a_quantised_catalog_llm_is_an_error():
    row = pd.Series({"row_id": "t:0", "llm": "nvidia/Qwen3-8B-NVFP4", "x_dtype": "fp8"})
    with pytest.raises(ValueError, match="x_dtype.*already quantised"):
        llm_of(row, default_catalog())
    assert llm_of(pd.Series({"row_id": "t:1", "llm": "Qwen/Qwen3-8B"}), default_catalog()).weight_bytes_per_param == 2.0


def test_per_format_scores_split_fp8_by_native_matmuls(itl_ds):
    fmt = weight_format(itl_ds.records)
    assert set(fmt) == {"fp8", "16-bit"}
    y = itl_ds.y_physical("itl")
    pred = y * np.where(fmt == "fp8", 1.5, 1.1)  # 50 % off on every fp8 row, 10 % on the others
    out = per_format_scores(itl_ds, {"logo": {"default": pred}}, "itl")
    assert out["fp8"]["logo"]["all"]["default"]["mdape"] == pytest.approx(50.0)
    assert out["16-bit"]["logo"]["all"]["default"]["mdape"] == pytest.approx(10.0)
    n = {g: out["fp8"]["logo"][g]["default"]["n"] for g in ("all", "native", "weight_only")}
    assert n["native"] + n["weight_only"] == n["all"] == 49 and n["native"] > 0 and n["weight_only"] > 0


def test_scored_apart_rows_never_train_and_their_gpu_is_held_out(monkeypatch):
    from wattgpu_train import evaluate as E
    from wattgpu_train.recipes import DEFAULT

    sources = ["llmperf_techgrandpa", "brunetta_llm_inference_power"]
    cat = default_catalog()
    full = build_dataset(load_measurements(DATA, sources=sources, single_gpu_only=False), cat, "itl")
    apart = load_scored_apart(DATA, sources=sources, single_gpu_only=False)
    seen: list[tuple[set, set, set]] = []
    real = E.predict_physical

    def spy(model_recipe, train, test, n_jobs=2):
        seen.append((set(train.records["row_id"]), set(test.records["row_id"]), set(test.records["gpu"])))
        return real(model_recipe, train, test, n_jobs=n_jobs)

    monkeypatch.setattr(E, "predict_physical", spy)
    out = E.scored_apart(E.quick_recipe(DEFAULT), "itl", full, apart, cat, n_jobs=1)
    assert out["rows"] == 49 and out["per_format"]["fp8"]["logo"]["all"]["default"]["n"] == 49
    logo = [s for s in seen if len(s[2]) == 1]
    assert logo and all(test <= set(apart["row_id"]) and not train & set(apart["row_id"]) for train, test, _ in seen)
    gpu_of = dict(zip(full.records["row_id"], full.records["gpu"]))
    for train, _, gpus in logo:
        assert not {gpu_of[r] for r in train} & gpus  # the held-out GPU's 16-bit rows are out of training too
