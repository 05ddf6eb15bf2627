"""WattGPU training (from a source checkout: ``pip install -e ".[train]"``): build the catalog, fit, evaluate, export.

The pipeline is a library of typed functions in :mod:`wattgpu_train.pipeline`
(``build_specs``, ``load``, ``fit``, ``evaluate``, ``export``, ``reproduce_paper``); the
``wattgpu-train`` CLI only parses arguments and calls them. Importing this package does not import
pandas or XGBoost.
"""
from __future__ import annotations

EXTRA_HINT = 'pip install -e ".[train]" in the repository root'
TRAINING_DEPS = ("pandas", "xgboost", "onnx", "onnxmltools")


def missing_training_deps() -> list[str]:
    """The training dependencies that are not installed (empty when training can run)."""
    from importlib.util import find_spec

    return [name for name in TRAINING_DEPS if find_spec(name) is None]
