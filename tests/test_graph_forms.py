"""The alternative ONNX forms of the shipped trees (opset-5 TreeEnsemble, one fused graph) give the
shipped models' outputs bit for bit (export/wattgpu_export/graph_forms.py; timed by the benchmark)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from wattgpu import features as F  # noqa: E402
from wattgpu.predictor import Predictor  # noqa: E402
from wattgpu.workload import Workload  # noqa: E402
from wattgpu_export import graph_forms as G  # noqa: E402


def _session(model):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def setup():
    pred = Predictor()
    cat = pred.catalog
    rows = [(g, m, w) for g in cat.gpus for m in cat.llms[::6]
            for w in (Workload(), Workload(kind="closed_loop", concurrency=4, engine="hf_transformers"))]
    cols = F.columns(rows)
    names = {t: m.feature_names for t, m in pred.schema.models.items()}
    protos = {t: onnx.load_from_string(pred.bundle.read(m.file)) for t, m in pred.schema.models.items()}
    X = {t: F.matrix(n, cols) for t, n in names.items()}
    ref = {t: pred.bundle.session(t).run(None, {"input": X[t]})[0] for t in names}
    return names, protos, cols, X, ref


def test_fused_graph_is_bit_identical(setup) -> None:
    names, protos, cols, _, ref = setup
    model, union = G.fused(protos, names)
    assert set(union) == {n for ns in names.values() for n in ns}
    out = _session(model).run(None, {"input": F.matrix(union, cols)})
    for target, got in zip(names, out):
        assert got.tobytes() == ref[target].tobytes(), target


def test_tree_ensemble_v5_is_bit_identical(setup) -> None:
    names, protos, _, X, ref = setup
    for target, proto in protos.items():
        try:
            sess = _session(G.to_tree_ensemble_v5(proto))
        except Exception as exc:  # noqa: BLE001 - an onnxruntime without ai.onnx.ml opset 5
            pytest.skip(f"onnxruntime {ort.__version__} cannot load TreeEnsemble opset 5: {exc.__class__.__name__}")
        got = sess.run(None, {"input": X[target]})[0]
        assert np.array_equal(got, ref[target]) and got.tobytes() == ref[target].tobytes(), target
