"""One feature definition: training's matrices equal what the runtime feeds onnxruntime, row by row."""
from __future__ import annotations

import numpy as np
import pytest

from wattgpu.predictor import Predictor
from wattgpu.workload import Workload
from wattgpu_train.dataset import build_dataset, workload_of
from wattgpu_train.loading import load_catalog, load_training_records
from wattgpu_train.recipes import DEFAULT

from .helpers import REPO


@pytest.fixture(scope="module")
def records():
    return load_training_records(REPO / "data")


@pytest.mark.parametrize("target", ["power", "itl"])
def test_training_matrix_equals_runtime_vectors(records, target: str) -> None:
    ds = build_dataset(records, load_catalog(REPO / "specs.json"), target)
    X_train = ds.X(DEFAULT.model(target).features)
    pred = Predictor()
    assert pred.schema.models[target].feature_names == DEFAULT.model(target).features
    # The runtime resolves names the way a user's call does: catalog lookups by name, a fresh Workload.
    triples = []
    for _, r in ds.records.iterrows():
        wl = workload_of(r)
        triples.append((pred.resolve_gpu(r["gpu"]), pred.resolve_llm(r["llm"]), Workload(**wl.to_dict())))
    X_run = pred.feature_vectors(triples)[target]
    assert X_train.dtype == X_run.dtype == np.float32
    assert X_train.shape == X_run.shape and len(X_train) == len(ds) > 100
    for i in range(len(X_train)):  # row by row, NaN == NaN
        np.testing.assert_array_equal(X_train[i], X_run[i], err_msg=f"row {ds.records['row_id'][i]}")


def test_single_row_equals_batched_row(records) -> None:
    """Batching must not change a row's features (no cross-row state)."""
    ds = build_dataset(records.head(40), load_catalog(REPO / "specs.json"), "power")
    pred = Predictor()
    batch = pred.feature_vectors(ds.triples)["power"]
    for i, t in enumerate(ds.triples):
        np.testing.assert_array_equal(pred.feature_vectors([t])["power"][0], batch[i])
