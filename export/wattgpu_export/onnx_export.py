"""XGBoost → ONNX with a parity gate, written as a model bundle (format: :mod:`wattgpu.bundle`)."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnx
import onnxmltools
import onnxruntime as ort
import xgboost as xgb
from onnxmltools.convert.common.data_types import FloatTensorType

from wattgpu import bundle

PARITY_RTOL = 1e-6  # max |onnx - xgboost| / max(|xgboost|, 1e-6) over every training row
TARGET_OPSET = 15
INPUT_NAME = "input"


class ParityError(RuntimeError):
    """onnxruntime does not reproduce XGBoost closely enough; nothing is written."""


sha256_bytes = bundle.sha256


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
    """Convert, gate and write every model of a recipe as a bundle; returns the manifest that was written.

    ``models`` maps target → FittedModel (``.recipe`` and ``.booster``); ``matrices`` maps target →
    the float32 training matrix the parity gate replays. ``training``, ``intervals`` and ``domain``
    are manifest sections (see :mod:`wattgpu.bundle`). Nothing is written unless every gate passes
    and the runtime reads the manifest back.
    """
    catalog_bytes = catalog_path.read_bytes()
    schema = bundle.new_manifest(recipe=recipe_name, catalog_bytes=catalog_bytes, training=training,
                                 producer=producer_versions(), intervals=intervals, domain=domain)
    blobs: dict[str, bytes] = {}
    for target, fitted in models.items():
        rec = fitted.recipe
        params = {**{k: v for k, v in rec.params.items() if k != "n_jobs"}, "monotone_constraints": dict(rec.monotone)}
        entry = bundle.model_entry(target, rec.features, rec.transform, params, PARITY_RTOL, INPUT_NAME)
        schema["models"][target] = entry
        onx = convert(fitted.booster, len(rec.features))
        stamp(onx, bundle.onnx_metadata(schema, target))
        data = onx.SerializeToString()
        entry["parity_max_rel_diff"] = parity_gate(data, fitted.booster, matrices[target], target)
        entry["sha256"] = bundle.sha256(data)
        blobs[entry["file"]] = data
    bundle.write_bundle(out_dir, schema, blobs, catalog_bytes)
    return schema
