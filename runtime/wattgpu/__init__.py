"""WattGPU: predict LLM inference power and inter-token latency on NVIDIA GPUs from public metadata.

    >>> import wattgpu
    >>> p = wattgpu.predict("meta-llama/Llama-3.1-8B-Instruct", "NVIDIA A30")
    >>> p.power_w, p.itl_s

Only numpy and onnxruntime are needed at run time (onnxruntime is imported on first prediction).
"""
from __future__ import annotations

from typing import Any, Iterable

from .errors import (ArtifactError, ConfigFileError, ModelFitError, SpecValidationError, UnknownEntityError,
                     UnsupportedModelError, WattGPUError)
from .prediction import Interval, Prediction
from .predictor import Predictor, default_predictor
from .rank import Excluded, RankEntry, RankResult, rank
from .specs import Catalog, GpuSpec, LlmSpec, default_catalog
from .workload import Workload

__version__ = "0.1.0"
__all__ = [
    "predict", "predict_many", "rank", "RankResult", "RankEntry", "Excluded", "Predictor", "Prediction", "Interval", "Workload", "GpuSpec", "LlmSpec", "Catalog",
    "default_catalog", "WattGPUError", "UnknownEntityError", "SpecValidationError", "ConfigFileError",
    "ModelFitError", "UnsupportedModelError", "ArtifactError",
]


def predict(llm: Any, gpu: Any, workload: Workload | None = None, **workload_fields: Any) -> Prediction:
    """Predict power and latency of ``llm`` (catalog id, config.json path or LlmSpec) on ``gpu`` (catalog
    name/alias, spec JSON path or GpuSpec). Workload fields may be given as keywords (``kind="server", qps=0.3``)."""
    if workload_fields:
        if workload is not None:
            raise WattGPUError("workload: pass either a Workload or keyword fields, not both")
        workload = Workload.from_dict(workload_fields)
    return default_predictor().predict(llm, gpu, workload)


def predict_many(rows: Iterable[tuple[Any, Any, Workload | None]]) -> list[Prediction]:
    """Predict many ``(llm, gpu, workload)`` rows in one vectorised pass."""
    return default_predictor().predict_many(rows)
