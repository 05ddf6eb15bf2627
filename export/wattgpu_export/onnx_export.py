"""XGBoost → ONNX with a parity gate; writes the models, ``feature_schema.json`` and the catalog snapshot."""
from __future__ import annotations

import hashlib
import json
import platform
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnx
import onnxmltools
import onnxruntime as ort
import xgboost as xgb
from onnxmltools.convert.common.data_types import FloatTensorType

from wattgpu.features import REGISTRY
from wattgpu.schema import SCHEMA_FILE, SCHEMA_VERSION
from wattgpu.specs import CATALOG_RESOURCE

PARITY_RTOL = 1e-6  # max |onnx - xgboost| / max(|xgboost|, 1e-6) over every training row
TARGET_OPSET = 15
INPUT_NAME = "input"
UNITS = {"power": "W", "itl": "s/token"}


class ParityError(RuntimeError):
    """onnxruntime does not reproduce XGBoost closely enough; nothing is written."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def convert(booster: xgb.XGBRegressor, n_features: int) -> onnx.ModelProto:
    """Convert a fitted regressor taking a float32 [N, n_features] matrix."""
    return onnxmltools.convert_xgboost(booster, initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))],
                                       target_opset=TARGET_OPSET)


def onnx_predict(model_bytes: bytes, X: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {INPUT_NAME: X.astype(np.float32)})[0].reshape(-1)


def parity_gate(model_bytes: bytes, booster: xgb.XGBRegressor, X: np.ndarray, label: str,
                rtol: float = PARITY_RTOL) -> float:
    """Worst relative difference between onnxruntime and XGBoost on ``X``; raises ParityError above ``rtol``."""
    ref = booster.predict(X).astype(np.float64)
    got = onnx_predict(model_bytes, X).astype(np.float64)
    rel = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-6)
    worst = float(rel.max()) if rel.size else 0.0
    if not np.all(np.isfinite(got)) or worst > rtol:
        i = int(np.nanargmax(rel))
        raise ParityError(f"{label}: onnxruntime differs from XGBoost by {worst:.3g} relative "
                          f"(row {i}: {got[i]!r} vs {ref[i]!r}); limit {rtol:g}. Refusing to export.")
    return worst


def stamp(model: onnx.ModelProto, meta: Mapping[str, str]) -> None:
    """Write key/value metadata into the ONNX model (readable by onnxruntime without importing onnx)."""
    del model.metadata_props[:]
    for k, v in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, str(v)


def producer_versions() -> dict[str, str]:
    return {"python": platform.python_version(), "xgboost": xgb.__version__, "onnx": onnx.__version__,
            "onnxmltools": onnxmltools.__version__, "onnxruntime": ort.__version__, "numpy": np.__version__}


def export_models(*, recipe_name: str, models: Mapping[str, Any], matrices: Mapping[str, np.ndarray],
                  catalog_path: Path, out_dir: Path, training: Mapping[str, Any],
                  intervals: Mapping[str, Any] | None = None, domain: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Convert, gate and write every model of a recipe; returns the schema dict that was written.

    ``models`` maps target → FittedModel (``.recipe`` and ``.booster``); ``matrices`` maps target →
    the float32 training matrix the parity gate replays. Nothing is written unless every gate passes.
    """
    catalog_bytes = catalog_path.read_bytes()
    catalog_sha = sha256_bytes(catalog_bytes)
    blobs: dict[str, bytes] = {}
    entries: dict[str, Any] = {}
    parity: dict[str, float] = {}
    for target, fitted in models.items():
        rec = fitted.recipe
        onx = convert(fitted.booster, len(rec.features))
        stamp(onx, {"wattgpu.schema_version": str(SCHEMA_VERSION), "wattgpu.target": target,
                    "wattgpu.recipe": recipe_name, "wattgpu.transform": rec.transform,
                    "wattgpu.features": ",".join(rec.features), "wattgpu.catalog_sha256": catalog_sha,
                    "wattgpu.producer": json.dumps(producer_versions(), sort_keys=True),
                    "wattgpu.training": json.dumps(training.get("targets", {}).get(target, {}), sort_keys=True)})
        data = onx.SerializeToString()
        parity[target] = parity_gate(data, fitted.booster, matrices[target], target)
        fname = f"{target}.onnx"
        blobs[fname] = data
        entries[target] = {
            "file": fname, "sha256": sha256_bytes(data), "transform": rec.transform, "unit": UNITS[target],
            "input_name": INPUT_NAME,
            "features": [{"name": f, "unit": REGISTRY[f].unit, "description": REGISTRY[f].description}
                         for f in rec.features],
            "xgboost_params": {k: v for k, v in rec.params.items() if k != "n_jobs"},
            "parity_max_rel_diff": parity[target], "parity_rtol": PARITY_RTOL,
        }
    schema = {
        "schema_version": SCHEMA_VERSION,
        "recipe": recipe_name,
        "models": entries,
        "catalog": {"file": CATALOG_RESOURCE, "sha256": catalog_sha},
        "training": dict(training),
        "intervals": dict(intervals or {}),
        "domain": dict(domain or {}),
        "producer": producer_versions(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, data in blobs.items():
        (out_dir / fname).write_bytes(data)
    if catalog_path.resolve() != (out_dir / CATALOG_RESOURCE).resolve():
        shutil.copyfile(catalog_path, out_dir / CATALOG_RESOURCE)
    (out_dir / SCHEMA_FILE).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return schema
