"""Other ONNX forms of the exported tree ensembles, for the runtime-speed comparison (issue 14).

The shipped models are one ``ai.onnx.ml`` opset-1 ``TreeEnsembleRegressor`` per target (what
onnxmltools writes). Two alternative forms of the SAME trees:

- :func:`to_tree_ensemble_v5`: the ``TreeEnsemble`` operator of ``ai.onnx.ml`` opset 5 (interior
  nodes and leaves in separate arrays, thresholds as a tensor);
- :func:`fused`: every target in ONE graph reading one input matrix (the union of the targets'
  features; each ensemble's feature ids remapped), so one ``session.run`` serves power and ITL.

Neither changes a tree, threshold or leaf value. ``benchmarks/bench_runtime.py`` builds both from the
shipped files, checks that their outputs are bit-identical to the shipped models', and times them.
Exporting in one of these forms is a switch (``GRAPH_FORMS``) for the final re-export; the runtime
reads the shipped form today.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

GRAPH_FORMS = ("per_target_v1", "per_target_v5", "fused_v1")
MODE_V5 = {b"BRANCH_LEQ": 0, b"BRANCH_LT": 1, b"BRANCH_GTE": 2, b"BRANCH_GT": 3, b"BRANCH_EQ": 4, b"BRANCH_NEQ": 5}


def _regressor(model: onnx.ModelProto) -> onnx.NodeProto:
    nodes = [n for n in model.graph.node if n.op_type == "TreeEnsembleRegressor"]
    if len(nodes) != 1 or len(model.graph.node) != 1:
        raise ValueError("expected a graph of exactly one TreeEnsembleRegressor")
    return nodes[0]


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ml_model(graph: onnx.GraphProto, ml_opset: int, meta: onnx.ModelProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21 if ml_opset >= 5 else 15),
                                                    helper.make_opsetid("ai.onnx.ml", ml_opset)])
    model.ir_version = 10 if ml_opset >= 5 else meta.ir_version
    for p in meta.metadata_props:
        model.metadata_props.add().CopyFrom(p)
    return model


def to_tree_ensemble_v5(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same trees as one ``ai.onnx.ml`` opset-5 ``TreeEnsemble`` node (single target, SUM)."""
    a = _attrs(_regressor(model))
    if a.get("post_transform", b"NONE") not in (b"NONE", "NONE") or int(a.get("n_targets", 1)) != 1:
        raise ValueError("only single-target, post_transform NONE regressors are converted")
    if any(float(v) != 0.0 for v in a.get("base_values", [0.0])):
        raise ValueError("a non-zero base value would need an Add node; not converted")
    tree_ids, node_ids = a["nodes_treeids"], a["nodes_nodeids"]
    modes = a["nodes_modes"]
    leaf_weight = {(t, n): w for t, n, w in zip(a["target_treeids"], a["target_nodeids"], a["target_weights"])}
    interior: dict[tuple[int, int], int] = {}
    leaves: dict[tuple[int, int], int] = {}
    for t, n, m in zip(tree_ids, node_ids, modes):
        (leaves if m == b"LEAF" else interior).setdefault((t, n), len(leaves if m == b"LEAF" else interior))
    trees = sorted(set(tree_ids))
    feat, split, mode, missing, true_id, true_leaf, false_id, false_leaf = ([] for _ in range(8))
    by_key = {(t, n): i for i, (t, n) in enumerate(zip(tree_ids, node_ids))}
    for (t, n), _ in sorted(interior.items(), key=lambda kv: kv[1]):
        i = by_key[(t, n)]
        feat.append(a["nodes_featureids"][i])
        split.append(a["nodes_values"][i])
        mode.append(MODE_V5[modes[i]])
        missing.append(a["nodes_missing_value_tracks_true"][i] if a.get("nodes_missing_value_tracks_true") else 0)
        for child, ids, is_leaf in ((a["nodes_truenodeids"][i], true_id, true_leaf),
                                    (a["nodes_falsenodeids"][i], false_id, false_leaf)):
            if (t, child) in leaves:
                ids.append(leaves[(t, child)])
                is_leaf.append(1)
            else:
                ids.append(interior[(t, child)])
                is_leaf.append(0)
    roots = []
    for t in trees:
        if (t, 0) not in interior:
            raise ValueError(f"tree {t} is a single leaf; not converted")
        roots.append(interior[(t, 0)])
    leaf_order = sorted(leaves.items(), key=lambda kv: kv[1])
    weights = np.array([leaf_weight.get(k, 0.0) for k, _ in leaf_order], dtype=np.float32)
    node = helper.make_node(
        "TreeEnsemble", ["input"], ["variable"], domain="ai.onnx.ml", aggregate_function=1, n_targets=1,
        post_transform=0, tree_roots=roots, nodes_featureids=feat,
        nodes_splits=numpy_helper.from_array(np.array(split, dtype=np.float32)),
        nodes_modes=numpy_helper.from_array(np.array(mode, dtype=np.uint8)),
        nodes_missing_value_tracks_true=missing, nodes_truenodeids=true_id, nodes_trueleafs=true_leaf,
        nodes_falsenodeids=false_id, nodes_falseleafs=false_leaf,
        leaf_targetids=[0] * len(leaf_order), leaf_weights=numpy_helper.from_array(weights))
    g = model.graph
    graph = helper.make_graph([node], "wattgpu_v5", list(g.input), list(g.output))
    return _ml_model(graph, 5, model)


def fused(models: Mapping[str, onnx.ModelProto], features: Mapping[str, Sequence[str]]) -> tuple[onnx.ModelProto, list[str]]:
    """Every target's ensemble in one graph over one input: the union of the feature lists (first-seen
    order). Returns the model (outputs named after the targets) and the union feature list."""
    union: list[str] = []
    for names in features.values():
        union.extend(n for n in names if n not in union)
    nodes, outputs = [], []
    for target, model in models.items():
        node = onnx.NodeProto()
        node.CopyFrom(_regressor(model))
        remap = [union.index(n) for n in features[target]]
        for attr in node.attribute:
            if attr.name == "nodes_featureids":
                attr.ints[:] = [remap[i] for i in attr.ints]
        node.input[:] = ["input"]
        node.output[:] = [target]
        node.name = f"{target}_trees"
        nodes.append(node)
        outputs.append(helper.make_tensor_value_info(target, onnx.TensorProto.FLOAT, [None, 1]))
    inp = helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [None, len(union)])
    graph = helper.make_graph(nodes, "wattgpu_fused", [inp], outputs)
    first = next(iter(models.values()))
    return _ml_model(graph, 1, first), union
