"""FP8 rows train at the bytes they read: the records' ``x_dtype`` goes through the runtime's ``--dtype``
definition (``quant.with_dtype``), and evaluate scores each served weight format apart."""
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
from wattgpu_train.measurements import load_measurements

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def itl_ds():
    recs = load_measurements(DATA, sources=["llmperf_techgrandpa", "brunetta_llm_inference_power"])
    return build_dataset(recs, default_catalog(), "itl")


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
