"""The feature definition as one import, shared by training and runtime (``from wattgpu import features as F``).

Three modules own its three jobs; this facade re-exports their public names:

- :mod:`wattgpu.raw_columns`: (GPU, LLM, workload) triples → raw numeric columns (``columns`` for a batch,
  ``row_columns`` for one row of floats), the ordinal vocabularies and ``with_concurrency``;
- :mod:`wattgpu.derived`: ``derive``, the physics pipeline that adds the derived columns (weights, KV cache,
  memory fit, effective batch, roofline step, tensor-parallel links, duty, power floor);
- :mod:`wattgpu.feature_registry`: the named model inputs (``REGISTRY``, ``@feature``) and ``matrix`` /
  ``row_vector``, which stack them as float32 in a model's feature order.

Every formula uses :mod:`wattgpu.ops` or plain arithmetic, so the batch and the one-row paths give
bit-identical float32 inputs (tests/test_scalar_path.py checks every registered feature over the catalog).
"""
from __future__ import annotations

from .derived import Columns, derive, flop_s, layer_overhead_s, weight_read_s
from .feature_registry import REGISTRY, Feature, feature, matrix, row_vector
from .raw_columns import (GPU_COLUMN_KEYS, MEMORY_TYPE_ORDER, MODEL_TYPES, RAW_KEYS, SCENARIOS, cap_classes, columns,
                          gpu_columns, llm_columns, row_columns, with_concurrency, workload_columns)

__all__ = ["Columns", "derive", "flop_s", "layer_overhead_s", "weight_read_s", "REGISTRY", "Feature", "feature",
           "matrix", "row_vector", "GPU_COLUMN_KEYS", "MEMORY_TYPE_ORDER", "MODEL_TYPES", "RAW_KEYS", "SCENARIOS",
           "cap_classes", "columns", "gpu_columns", "llm_columns", "row_columns", "with_concurrency", "workload_columns"]
