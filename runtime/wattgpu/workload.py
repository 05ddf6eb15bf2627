"""Workload description: how requests reach the engine (offline batch, Poisson server, closed loop)."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from .frozen import dataclass
from .errors import SpecValidationError
from .parallel import MAX_TP
from .rules import ChoiceRule, NumberRule

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


# Serving-stack era: "legacy" = stacks before vLLM's 0.6 scheduler rewrite (September 2024): HF
# transformers generate loops, TGI/TGIS, vLLM <= 0.5, and the TensorRT-LLM / DeepSpeed-MII releases of
# that time; "current" = vLLM >= 0.6 and its contemporaries. Default: today's stack.
ENGINE_ERAS = ("legacy", "current")
# Which per-sequence ITL statistic is asked for: "mean" = mean decode gap (e2e − TTFT)/(tokens − 1),
# averaged over requests (vLLM's mean TPOT); "median" = median inter-token gap. Default: mean.
ITL_STATS = ("mean", "median")
# How requests reach the engine in time: "auto" = the kind's own pattern (server: poisson, closed_loop:
# staggered, offline: all queued); "poisson" = a server's random arrivals; "staggered" = closed-loop clients out
# of step (steady state); "burst" = a benchmark that starts every client together (llmperf, aiperf): the first
# requests queue behind each other, which the fitted TTFT excess (wattgpu.ttft_fit) carries.
ARRIVALS = ("auto", "poisson", "staggered", "burst")
ARRIVAL_KINDS = {"poisson": ("server",), "staggered": ("closed_loop",), "burst": ("closed_loop",)}

ENGINE_RULE = ChoiceRule(ENGINES, tuple(ENGINE_ALIASES.items()))
KIND_RULE = ChoiceRule(KINDS, tuple((k, k) for k in KINDS) + (("closed-loop", "closed_loop"),))

MIN_QPS = 1e-9  # requests/s: about one request in 32 years, the smallest arrival rate accepted

# Every numeric Workload field: one line each (type, range, unit). The CSV batch reader and the API use it.
WORKLOAD_NUMBERS: dict[str, NumberRule] = {
    "max_batch": NumberRule(1, 65536, "sequences", integer=True),
    # beyond capacity = overload state; below MIN_QPS the energy per token (idle power over almost no
    # tokens) would overflow to inf — 1e-320 req/s gave "inf J/token" — so such rates are refused
    "qps": NumberRule(MIN_QPS, 1.7976931348623157e308, "requests/s", optional=True),
    "concurrency": NumberRule(0.001, 65536, "sequences", optional=True),
    "input_tokens": NumberRule(1, 1_048_576, "tokens", integer=True),
    "output_tokens": NumberRule(1, 1_048_576, "tokens", integer=True),
    "gpu_memory_utilization": NumberRule(0.05, 1.0, "(fraction of GPU memory)"),
    "num_requests": NumberRule(1, 1e9, "requests", integer=True, optional=True),
    "tp": NumberRule(1, MAX_TP, "GPUs (tensor-parallel degree; 1 = one GPU)", integer=True),
}
# Text fields: a fixed set of names.
WORKLOAD_CHOICES: dict[str, ChoiceRule] = {"kind": KIND_RULE, "engine": ENGINE_RULE,
                                           "kv_cache_dtype": ChoiceRule(KV_CACHE_DTYPES),
                                           "engine_era": ChoiceRule(ENGINE_ERAS),
                                           "itl_stat": ChoiceRule(ITL_STATS),
                                           "arrival": ChoiceRule(ARRIVALS)}


def canonical_engine(name: str) -> str:
    """Map an engine spelling (``vLLM``, ``TRT-LLM`` …) to its canonical name or raise naming the choices."""
    return ENGINE_RULE.check("workload", "engine", name)


@dataclass(frozen=True)
class Workload:
    """How the GPU is loaded.

    - ``offline``: all requests queued; the engine runs up to ``max_batch`` sequences at once.
    - ``server``: Poisson arrivals at ``qps`` requests/s; the GPU idles between requests.
    - ``closed_loop``: ``concurrency`` clients, each sending its next request when the last finished.

    ``engine_era`` (``legacy`` | ``current``, default ``current``) and ``itl_stat`` (``mean`` |
    ``median``, default ``mean``) describe the serving stack and which ITL statistic is predicted.

    ``tp`` is the tensor-parallel degree: the model is split over ``tp`` GPUs of the chosen type
    (see :mod:`wattgpu.parallel`); power is then predicted per GPU and summed for the group.

    ``concurrency`` (when set) is the number of clients of a closed loop (or a measured mean
    concurrency). The engine runs min(clients, ``max_batch``, sequences whose KV cache fits) of them at
    once, as vLLM's ``max_num_seqs`` does; the other clients queue for a slot, and their wait is part of
    TTFT and end-to-end latency, so that clients = request rate × (wait + time in a slot) (Little's law)
    and the request rate never exceeds the capacity.
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
    engine_era: str = "current"
    itl_stat: str = "mean"
    tp: int = 1
    arrival: str = "auto"

    def __post_init__(self) -> None:
        for name, choice in WORKLOAD_CHOICES.items():
            object.__setattr__(self, name, choice.check("workload", name, getattr(self, name)))
        for name, rule in WORKLOAD_NUMBERS.items():
            object.__setattr__(self, name, rule.check("workload", name, getattr(self, name)))
        # cross-field rules
        if self.kind == "server" and self.qps is None:
            raise SpecValidationError("workload", "qps", None, "an arrival rate in requests/s for a server workload (qps, e.g. 0.33)")
        if self.kind != "server" and self.qps is not None:
            raise SpecValidationError("workload", "qps", self.qps, "no arrival rate unless the workload kind is 'server'")
        if self.kind == "closed_loop" and self.concurrency is None:
            raise SpecValidationError("workload", "concurrency", None, "the number of concurrent clients for a closed_loop workload")
        if self.arrival in ARRIVAL_KINDS and self.kind not in ARRIVAL_KINDS[self.arrival]:
            fits = [a for a, kinds in ARRIVAL_KINDS.items() if self.kind in kinds]
            expected = (f"'auto', or an arrival pattern of the kind '{self.kind}': {', '.join(fits)}" if fits
                        else "'auto' (an offline workload queues every request at once)")
            raise SpecValidationError("workload", "arrival", self.arrival, expected)
        if self.kind != "server" and self.concurrency is not None and self.concurrency < 1:
            # a busy engine decodes at least one sequence; only a server's time-averaged concurrency
            # (arrival rate × time in system, Little's law) can be below 1
            raise SpecValidationError("workload", "concurrency", self.concurrency,
                                      f"at least 1 sequence when the workload kind is '{self.kind}' (values below 1 "
                                      "are only a server's mean concurrency)")

    @property
    def burst(self) -> float:
        """Share of the requests in a burst's first wave (the TTFT excess's weight): with ``arrival = burst``
        every client starts together, so the first ``concurrency`` of ``num_requests`` requests (all of them
        when ``num_requests`` is not given: one wave) arrive at once; 0.0 for other arrival patterns."""
        if self.arrival != "burst":
            return 0.0
        if self.num_requests is None or self.concurrency is None:
            return 1.0
        return min(1.0, self.concurrency / self.num_requests)

    @property
    def context_tokens(self) -> int:
        """Tokens a sequence holds in the KV cache at its end (prompt + generated)."""
        return self.input_tokens + self.output_tokens

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Workload":
        """Build from a mapping of Workload fields; unknown keys are rejected by name."""
        if not isinstance(data, Mapping):
            raise SpecValidationError("workload", "<root>", type(data).__name__, "a mapping of workload fields")
        if not all(isinstance(k, str) for k in data):
            bad = next(k for k in data if not isinstance(k, str))
            raise SpecValidationError("workload", str(bad)[:60], data[bad], "field names that are strings")
        known = {f.name for f in fields(cls)}
        unknown = sorted((k for k in data if k not in known), key=str)
        if unknown:
            raise SpecValidationError("workload", unknown[0], data[unknown[0]], f"one of {', '.join(sorted(known))}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
