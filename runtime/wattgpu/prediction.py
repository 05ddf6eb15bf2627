"""The typed result of one prediction."""
from __future__ import annotations

from dataclasses import field
from typing import Any

from .frozen import dataclass
from . import record
from .energy import energy_figures


@dataclass(frozen=True)
class Interval:
    """A prediction interval at ``level`` (e.g. 0.8) in the prediction's own units."""

    level: float
    low: float
    high: float


@dataclass(frozen=True)
class Prediction:
    """Power and latency of serving ``llm`` on ``gpu`` under ``workload``, with what follows from them.

    - ``itl_s``: per-sequence time between output tokens (what a user of the service feels).
    - ``system_s_per_token``: wall time per generated token of the whole GPU (= 1 / throughput).
    - ``energy_per_token_j`` = ``total_power_w`` × ``system_s_per_token``.
    - ``power_w`` is per GPU; with ``tp`` > 1 GPUs (tensor parallelism) ``total_power_w`` = ``power_w`` ×
      ``tp`` is the group's, and energy, throughput and ITL are the group's (``allreduce_s_per_step``:
      the modelled all-reduce time of one decode step).
    - ``idle_power_w`` / ``idle_power_source``: for server workloads mixed from idle and busy power,
      the idle figure used and whether it was measured (with its source) or estimated.
    - ``max_qps``: the largest Poisson request rate the GPU sustains (batch cap and KV memory; see
      :mod:`wattgpu.serving.capacity`); ``utilization`` = offered load ÷ ``max_qps`` (1 offline);
      ``max_concurrency``: full-context sequences whose KV cache fits; ``overloaded``: a server load
      beyond capacity (throughput then stays at ``max_qps × output_tokens``).
    - ``calibration``: None, or what a calibrated bundle corrected (its ``summary`` says it in words).
    - ``ttft_s``: time to first token (s): own prefill + prefill queue + wait for a batch slot
      (``ttft_breakdown``; :mod:`wattgpu.serving.latency`); None when unbounded (a server at or beyond capacity).
      ``e2e_latency_s`` = ``ttft_s`` + (output tokens − 1) × ``itl_s``.
    - ``bound``: what bounds a decode step (``kind``: memory, compute or interconnect, and each part's share).
    """

    llm: str
    gpu: str
    workload: dict[str, Any]
    power_w: float
    itl_s: float
    system_s_per_token: float
    throughput_tok_s: float
    energy_per_token_j: float
    energy_per_request_j: float
    effective_batch: float
    busy_fraction: float
    power_method: str
    idle_power_w: float | None = None
    idle_power_source: str | None = None
    power_intervals: tuple[Interval, ...] = ()
    itl_intervals: tuple[Interval, ...] = ()
    baselines: dict[str, float] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    max_qps: float | None = None
    utilization: float | None = None
    max_concurrency: int | None = None
    overloaded: bool = False
    tp: int = 1
    allreduce_s_per_step: float = 0.0
    calibration: dict[str, Any] | None = None  # set by a `wattgpu calibrate` bundle (wattgpu.calibration)
    ttft_s: float | None = None
    ttft_intervals: tuple[Interval, ...] = ()  # from the bundle's fitted TTFT terms (wattgpu.ttft_fit); () without
    e2e_latency_s: float | None = None
    ttft_breakdown: dict[str, Any] = field(default_factory=dict)
    bound: dict[str, Any] = field(default_factory=dict)

    @property
    def total_power_w(self) -> float:
        """Mean power of the whole tensor-parallel group: per-GPU ``power_w`` × ``tp``."""
        return self.power_w * self.tp

    def to_dict(self, prices: record.Prices = record.DEFAULT_PRICES) -> dict[str, Any]:
        """JSON-ready dict: every field of :data:`wattgpu.record.PREDICTION` under its name (stable keys);
        ``energy`` priced with ``prices`` = (usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour)."""
        return record.to_json(self, prices)

    def energy(self, usd_per_kwh: float | None = None, gco2_per_kwh: float | None = None,
               pue: float = 1.0, usd_per_gpu_hour: float | None = None) -> dict[str, Any]:
        """J/token, J and Wh per request, kWh per million tokens, and $ / gCO2e per million tokens when
        a price / grid intensity is given; with ``usd_per_gpu_hour`` the GPU rent per million tokens of the
        ``tp`` GPUs (see :mod:`wattgpu.energy`)."""
        return energy_figures(self.total_power_w, self.system_s_per_token, int(self.workload["output_tokens"]),
                              usd_per_kwh, gco2_per_kwh, pue, usd_per_gpu_hour, self.tp)
