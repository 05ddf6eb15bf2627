"""Export: parity gate, schema contents and hashes, and that the shipped models are what `fit` produces."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import onnxruntime as ort
import pytest

from wattgpu import bundle
from wattgpu.predictor import Predictor
from wattgpu_export import onnx_export
from wattgpu_train.dataset import build_dataset
from wattgpu_train.fit import fit_model
from wattgpu_train.loading import load_catalog, load_training_records
from wattgpu_train.recipes import DEFAULT

from .helpers import REPO, run_cli

MODELS = REPO / "runtime/wattgpu/models"


@pytest.fixture(scope="module")
def small_fit():
    """A quick model on the first 120 measured power rows (real rows, few trees)."""
    records = load_training_records(REPO / "data").head(120)
    ds = build_dataset(records, load_catalog(REPO / "specs.json"), "power")
    recipe = DEFAULT.power.__class__(**{**DEFAULT.power.__dict__, "params": {**DEFAULT.power.params, "n_estimators": 20}})
    return recipe, ds, fit_model(recipe, ds)


def test_export_writes_models_schema_and_catalog(tmp_path) -> None:
    from wattgpu_train.pipeline import export, fit, load

    result = fit(load(REPO / "data", REPO / "specs.json"), n_estimators=5, intervals=False)
    schema = export(result, tmp_path)
    for target, m in schema["models"].items():
        data = (tmp_path / m["file"]).read_bytes()
        assert m["sha256"] == hashlib.sha256(data).hexdigest()
        assert m["parity_max_rel_diff"] <= onnx_export.PARITY_RTOL
        meta = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map
        assert meta["wattgpu.features"] == ",".join(f["name"] for f in m["features"]) and meta["wattgpu.target"] == target
        assert json.loads(meta["wattgpu.producer"])["xgboost"] and meta["wattgpu.catalog_sha256"] == schema["catalog"]["sha256"]
    assert (tmp_path / "specs.json").read_bytes() == (REPO / "specs.json").read_bytes()
    assert Predictor(models=tmp_path).predict_specs(result.datasets["power"].triples[:3])[0].power_w > 0


def test_packaged_onnx_metadata_carries_schema_facts() -> None:
    schema = json.loads((MODELS / "feature_schema.json").read_text())
    for target, m in schema["models"].items():
        meta = ort.InferenceSession(str(MODELS / m["file"]), providers=["CPUExecutionProvider"]
                                    ).get_modelmeta().custom_metadata_map
        # a manifest-only rewrite (sync-catalog, calibrate, fit-ttft) keeps the model files of an earlier format
        assert meta["wattgpu.schema_version"] in bundle.ONNX_FORMATS[schema["schema_version"]]
        assert json.loads(meta["wattgpu.producer"]) == schema["producer"]
        assert json.loads(meta["wattgpu.training"]) == schema["training"]["targets"][target]


def test_parity_gate_refuses_a_model_that_disagrees(tmp_path, small_fit, monkeypatch) -> None:
    recipe, ds, fitted = small_fit
    X = ds.X(recipe.features)
    real = onnx_export.onnx_predict
    monkeypatch.setattr(onnx_export, "onnx_predict", lambda b, x: real(b, x) * (1 + 1e-4))
    with pytest.raises(onnx_export.ParityError, match="Refusing to export"):
        onnx_export.export_models(recipe_name="test", models={"power": fitted}, matrices={"power": X},
                                  catalog_path=REPO / "specs.json", out_dir=tmp_path / "out", training={})
    assert not (tmp_path / "out").exists(), "nothing may be written when the gate fails"


def test_packaged_schema_is_complete() -> None:
    schema = json.loads((MODELS / "feature_schema.json").read_text())
    from wattgpu import bundle

    # formats 3 and 4 changed only the calibration section, which the packaged bundle holds as null: a format-2
    # or format-3 export stays current until the models are next exported
    assert schema["schema_version"] in (2, 3, bundle.FORMAT_VERSION) and schema["recipe"] == "default"
    for target, unit in (("power", "W"), ("itl", "s/token")):
        m = schema["models"][target]
        assert m["unit"] == unit and m["transform"] and all(f["unit"] for f in m["features"])
        assert hashlib.sha256((MODELS / m["file"]).read_bytes()).hexdigest() == m["sha256"]
        assert m["parity_max_rel_diff"] <= 1e-6
        t = schema["training"]["targets"][target]
        assert t["rows"] > 100 and len(t["gpus"]) >= 4 and t["llms"] > 20 and t["sources"]
    assert schema["catalog"]["sha256"] == hashlib.sha256((MODELS / "specs.json").read_bytes()).hexdigest()
    assert {"xgboost", "onnxmltools", "onnxruntime"} <= set(schema["producer"])
    assert schema["training"]["measured_only"] is True


@pytest.mark.slow
def test_shipped_models_are_what_fit_produces_from_data(tmp_path) -> None:
    """Re-run the export on data/ and compare predictions on every training row with the shipped models."""
    res = run_cli("fit", "--no-intervals", "--out", str(tmp_path), module="wattgpu_train.cli", timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    shipped, fresh = Predictor(), Predictor(model_dir=tmp_path)
    records = load_training_records(REPO / "data")
    for target in ("power", "itl"):
        ds = build_dataset(records, load_catalog(REPO / "specs.json"), target)
        X = shipped.feature_vectors(ds.triples)[target]
        a = shipped._session(target).run(None, {"input": X})[0]
        b = fresh._session(target).run(None, {"input": X})[0]
        np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=f"{target}: re-export with `wattgpu-train fit`")
