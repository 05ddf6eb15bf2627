"""Workload description: how requests reach the engine (offline batch, Poisson server, closed loop)."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from .errors import SpecValidationError
from .specs import check_number

KV_CACHE_DTYPES = ("auto", "fp8")

KINDS = ("offline", "server", "closed_loop")
# Canonical engine names; aliases map user spellings onto them.
ENGINES = ("vllm", "hf_transformers", "tgi", "tensorrt_llm", "deepspeed_mii")
ENGINE_ALIASES = {
    "vllm": "vllm",
    "hf": "hf_transformers",
    "transformers": "hf_transformers",
    "hf_transformers": "hf_transformers",
    "huggingface": "hf_transformers",
    "tgi": "tgi",
    "tgis": "tgi",
    "text-generation-inference": "tgi",
    "tensorrt_llm": "tensorrt_llm",
    "tensorrt-llm": "tensorrt_llm",
    "trt-llm": "tensorrt_llm",
    "trtllm": "tensorrt_llm",
    "deepspeed_mii": "deepspeed_mii",
    "deepspeed-mii": "deepspeed_mii",
    "mii": "deepspeed_mii",
}


def canonical_engine(name: str) -> str:
    """Map an engine spelling (``vLLM``, ``TRT-LLM`` …) to its canonical name or raise naming the choices."""
    key = name.strip().lower().replace(" ", "_") if isinstance(name, str) else None
    if key not in ENGINE_ALIASES:
        raise SpecValidationError("workload", "engine", name, f"one of {', '.join(ENGINES)}")
    return ENGINE_ALIASES[key]


@dataclass(frozen=True)
class Workload:
    """How the GPU is loaded.

    - ``offline``: all requests queued; the engine runs up to ``max_batch`` sequences at once.
    - ``server``: Poisson arrivals at ``qps`` requests/s; the GPU idles between requests.
    - ``closed_loop``: ``concurrency`` clients, each sending its next request when the last finished.

    ``concurrency`` (when set) is the measured or fixed number of sequences decoding together; it
    overrides what the batch cap and the memory would allow, up to the memory limit.
    ``kv_cache_dtype``: the engine's KV-cache element type, ``auto`` (16-bit) or ``fp8`` (1 byte).
    """

    kind: str = "offline"
    max_batch: int = 256
    qps: float | None = None
    concurrency: float | None = None
    input_tokens: int = 512
    output_tokens: int = 256
    engine: str = "vllm"
    gpu_memory_utilization: float = 0.9
    num_requests: int | None = None
    kv_cache_dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecValidationError("workload", "kind", self.kind, f"one of {', '.join(KINDS)}")
        object.__setattr__(self, "engine", canonical_engine(self.engine))
        ints = {"max_batch": (1, 65536), "input_tokens": (1, 1_048_576), "output_tokens": (1, 1_048_576)}
        for name, (lo, hi) in ints.items():
            v = check_number("workload", name, getattr(self, name), lo, hi, "")
            if v != int(v):
                raise SpecValidationError("workload", name, getattr(self, name), f"an integer in [{lo}, {hi}]")
            object.__setattr__(self, name, int(v))
        object.__setattr__(self, "gpu_memory_utilization", check_number(
            "workload", "gpu_memory_utilization", self.gpu_memory_utilization, 0.05, 1.0, "(fraction)"))
        if self.num_requests is not None:
            n = check_number("workload", "num_requests", self.num_requests, 1, 1e9, "requests")
            if n != int(n):
                raise SpecValidationError("workload", "num_requests", self.num_requests, "an integer in [1, 1e+09] requests")
            object.__setattr__(self, "num_requests", int(n))
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise SpecValidationError("workload", "kv_cache_dtype", self.kv_cache_dtype, "auto (16-bit cache) or fp8")
        if self.concurrency is not None:
            object.__setattr__(self, "concurrency",
                               check_number("workload", "concurrency", self.concurrency, 0.001, 65536, "sequences"))
        if self.kind == "server":
            if self.qps is None:
                raise SpecValidationError("workload", "qps", None, "an arrival rate in requests/s for a server workload (e.g. --qps 0.33)")
            q = self.qps  # any positive finite rate: a prediction, or the overload state beyond capacity
            if isinstance(q, bool) or not isinstance(q, (int, float)) or not math.isfinite(q) or q <= 0:
                raise SpecValidationError("workload", "qps", q, "a positive finite arrival rate in requests/s (e.g. 0.33)")
            object.__setattr__(self, "qps", float(q))
        elif self.qps is not None:
            raise SpecValidationError("workload", "qps", self.qps, "no arrival rate unless the workload kind is 'server'")
        if self.kind == "closed_loop" and self.concurrency is None:
            raise SpecValidationError("workload", "concurrency", None, "the number of concurrent clients for a closed_loop workload")

    @property
    def context_tokens(self) -> int:
        """Tokens a sequence holds in the KV cache at its end (prompt + generated)."""
        return self.input_tokens + self.output_tokens

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Workload":
        """Build from a mapping of Workload fields; unknown keys are rejected by name."""
        if not isinstance(data, Mapping):
            raise SpecValidationError("workload", "<root>", type(data).__name__, "a mapping of workload fields")
        known = {f.name for f in fields(cls)}
        unknown = sorted((k for k in data if k not in known), key=str)
        if unknown:
            raise SpecValidationError("workload", unknown[0], data[unknown[0]], f"one of {', '.join(sorted(known))}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
