"""WattGPU: predict LLM inference power and inter-token latency on NVIDIA GPUs from public metadata.

    >>> import wattgpu
    >>> p = wattgpu.predict("NVIDIA A30", "meta-llama/Llama-3.1-8B-Instruct")
    >>> p.power_w, p.itl_s

Arguments always come in the order (gpu, llm, workload); the 0.1 order (llm, gpu) is still accepted
with a DeprecationWarning.

Only numpy and onnxruntime are needed at run time (onnxruntime is imported on first prediction).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Iterable

from .errors import (ArtifactError, ConfigFileError, ModelFitError, SpecValidationError, UnknownEntityError,
                     UnsupportedModelError, WattGPUError)

if TYPE_CHECKING:
    from .prediction import Interval, Prediction
    from .predictor import Predictor, default_predictor
    from .resolve import resolve_pair
    from .ranking import Excluded, RankEntry, RankResult, rank
    from .specs import Catalog, GpuSpec, LlmSpec, default_catalog
    from .workload import Workload

__version__ = "0.1.0"
__all__ = [
    "predict", "predict_many", "rank", "RankResult", "RankEntry", "Excluded", "Predictor", "Prediction", "Interval", "Workload", "GpuSpec", "LlmSpec", "Catalog",
    "default_catalog", "WattGPUError", "UnknownEntityError", "SpecValidationError", "ConfigFileError",
    "ModelFitError", "UnsupportedModelError", "ArtifactError",
]

# Public names imported on first use (PEP 562), so ``import wattgpu`` costs only this file and the errors:
# a prediction loads what it needs, and ranking, layouts and questions load when asked for.
LAZY = {
    "Interval": "prediction", "Prediction": "prediction", "Predictor": "predictor",
    "Excluded": "ranking", "RankEntry": "ranking", "RankResult": "ranking", "rank": "ranking",
    "Catalog": "specs", "GpuSpec": "specs", "LlmSpec": "specs", "default_catalog": "specs", "Workload": "workload",
    "default_predictor": "predictor", "resolve_pair": "resolve",  # not in __all__, but importable from here before
}
# Serving modules that moved into ``wattgpu.serving``: ``wattgpu.capacity`` etc. still resolve to them.
MOVED = {name: f"serving.{name}" for name in ("capacity", "fleet", "latency", "server")}


def __getattr__(name: str) -> Any:
    """A public name from its module (cached here once imported), or a submodule (``wattgpu.specs``)."""
    if name in LAZY:
        value = getattr(import_module(f".{LAZY[name]}", __name__), name)
    elif name in MOVED:
        value = import_module(f".{MOVED[name]}", __name__)
    else:
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def predict(gpu: Any, llm: Any, workload: Workload | None = None, **workload_fields: Any) -> Prediction:
    """Predict power and latency on ``gpu`` (catalog name/alias, spec JSON path or GpuSpec) of ``llm``
    (catalog id, config.json path or LlmSpec). Workload fields may be given as keywords
    (``kind="server", qps=0.3``)."""
    if workload_fields:
        if workload is not None:
            raise WattGPUError("workload: pass either a Workload or keyword fields, not both")
        from .workload import Workload

        workload = Workload.from_dict(workload_fields)
    from .predictor import default_predictor
    from .resolve import resolve_pair

    pred = default_predictor()
    g, m = resolve_pair(pred.catalog, gpu, llm, stacklevel=3)
    return pred.predict(g, m, workload)


def predict_many(rows: Iterable[tuple[Any, Any, Workload | None]]) -> list[Prediction]:
    """Predict many ``(gpu, llm, workload)`` rows in one vectorised pass."""
    from .predictor import default_predictor

    return default_predictor().predict_many(rows)
