"""The fitted part of TTFT (issue 38 item 2): what the physics TTFT of :mod:`wattgpu.serving.latency` leaves out, and
its 80 % interval, read from a bundle's ``ttft`` manifest section (format 5; ``wattgpu-train`` fits it).

- ``excess_steps``: decode steps of the running batch between the step that computes a request's first
  token and the client receiving it (scheduler, detokenization, streaming shared with the running batch).
  A count of steps, so it scales with the GPU, the LLM and the batch as the step time does.
- ``burst_s``: seconds a benchmark that starts all its clients together (``workload.arrival = burst``, as
  llmperf and aiperf do) adds to the mean TTFT over a steady-state (staggered) closed loop.
- ``pcie_comm``: multiples of a prompt's modelled all-reduce time (:func:`wattgpu.serving.latency.prefill_allreduce_s`)
  that a tensor-parallel group linked by PCIe adds (cards without peer-to-peer, such as GeForce boards, route
  the all-reduce through host memory: far below the link's rate). NVLink groups add nothing. Optional in the
  section (bundles fitted before it: 0).
- ``interval``: factors (low, high) of the 80 % interval around the TTFT, from the held-out residuals;
  ``burst_interval`` the same for burst arrivals (a one-wave benchmark scatters differently from a steady
  loop), used where at least half the requests are in the first wave.

A bundle without the section (formats ≤ 4) has no excess and no TTFT interval: :data:`NO_FIT`.
"""
from __future__ import annotations

from typing import Any, Mapping

from .frozen import dataclass
from .rules import is_finite_number

SECTION_KEYS = ("excess_steps", "burst_s", "interval", "burst_interval", "level", "rows", "method")
OPTIONAL_KEYS = ("pcie_comm",)  # absent from format-5 sections written before it (read as 0)
BURST_INTERVAL_SHARE = 0.5  # the burst interval applies where at least this share of requests is in the first wave
MAX_EXCESS_STEPS = 1000.0  # a sanity bound on a fitted count of steps
MAX_BURST_S = 3600.0
MAX_PCIE_COMM = 1000.0


@dataclass(frozen=True)
class TtftFit:
    """The fitted TTFT terms of one bundle (see the module docstring)."""

    excess_steps: float = 0.0
    burst_s: float = 0.0
    interval: tuple[float, float] | None = None  # (low, high) factors on the TTFT; None = no TTFT interval
    burst_interval: tuple[float, float] | None = None  # the same for burst arrivals; None = ``interval``
    level: float = 0.8
    rows: int = 0
    method: str = ""
    pcie_comm: float = 0.0  # multiples of the prompt's all-reduce time added on a PCIe TP group

    def burst_seconds(self, burst: Any) -> Any:
        """Seconds added to rows flagged ``burst`` (1.0 / 0.0, array or float)."""
        return burst * self.burst_s

    def factors(self, burst: float) -> tuple[float, float] | None:
        """The interval factors of a row whose burst share is ``burst``; None without an interval."""
        if burst >= BURST_INTERVAL_SHARE and self.burst_interval is not None:
            return self.burst_interval
        return self.interval

    def to_section(self) -> dict[str, Any]:
        """The manifest's ``ttft`` section."""
        return {"excess_steps": self.excess_steps, "burst_s": self.burst_s,
                "interval": None if self.interval is None else list(self.interval),
                "burst_interval": None if self.burst_interval is None else list(self.burst_interval),
                "level": self.level,
                "rows": self.rows, "method": self.method, "pcie_comm": self.pcie_comm}


NO_FIT = TtftFit()


def _number(section: Mapping[str, Any], key: str, lo: float, hi: float) -> float:
    v = section.get(key)
    if not (is_finite_number(v) and lo <= v <= hi):
        raise ValueError(f"ttft.{key} = {v!r} is invalid; expected a number in [{lo:g}, {hi:g}]")
    return float(v)


def read_section(section: Any) -> TtftFit:
    """Check and parse a manifest ``ttft`` section (None = :data:`NO_FIT`); ValueError names the bad key."""
    if section is None:
        return NO_FIT
    if not isinstance(section, Mapping):
        raise ValueError(f"is a {type(section).__name__}; expected an object with {', '.join(SECTION_KEYS)}")
    unknown = sorted(set(section) - set(SECTION_KEYS) - set(OPTIONAL_KEYS))
    missing = [k for k in SECTION_KEYS if k not in section]
    if unknown or missing:
        raise ValueError(f"has unknown key(s) {unknown} / lacks {missing}; expected exactly {', '.join(SECTION_KEYS)} "
                         f"(and optionally {', '.join(OPTIONAL_KEYS)})")
    steps = _number(section, "excess_steps", 0.0, MAX_EXCESS_STEPS)
    burst = _number(section, "burst_s", 0.0, MAX_BURST_S)
    level = _number(section, "level", 0.0, 1.0)
    pcie_comm = _number(section, "pcie_comm", 0.0, MAX_PCIE_COMM) if "pcie_comm" in section else 0.0
    rows = section["rows"]
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError(f"ttft.rows = {rows!r} is invalid; expected a count of rows ≥ 0")
    if not isinstance(section["method"], str):
        raise ValueError("ttft.method is not a string; expected a description of the fit")
    return TtftFit(steps, burst, _factors(section, "interval"), _factors(section, "burst_interval"), level, rows,
                   section["method"], pcie_comm)


def _factors(section: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    iv = section[key]
    if iv is None:
        return None
    ok = (isinstance(iv, list) and len(iv) == 2
          and all(is_finite_number(x) for x in iv)
          and 0.0 < iv[0] <= 1.0 <= iv[1])
    if not ok:
        raise ValueError(f"ttft.{key} = {iv!r} is invalid; expected null or [low ≤ 1, high ≥ 1] factors > 0")
    return float(iv[0]), float(iv[1])


def of(bundle: Any) -> TtftFit:
    """The fitted TTFT terms of ``bundle`` (:data:`NO_FIT` for a bundle without a ``ttft`` section)."""
    fit = getattr(bundle, "ttft_fit", None)
    return fit if isinstance(fit, TtftFit) else NO_FIT
