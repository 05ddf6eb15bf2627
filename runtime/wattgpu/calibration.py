"""`wattgpu calibrate`: per measured GPU its terms (all its LLMs) and each measured LLM's own level share
(that LLM only), MAP-fitted on the user's runs and applied inside the physical bounds. docs/calibration.md."""
from __future__ import annotations

import json
import math
import os
from dataclasses import field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from .frozen import dataclass
from . import features as F
from .serving import latency
from . import ops
from .bundle import SCHEMA_FILE, ModelBundle, rewrite_bundle
from .calibration_format import BOUNDS, PARAMS, TTFT
from .errors import ConfigFileError, WattGPUError
from .targets import EXCESS_MIN, ITL, POWER, TARGETS

if TYPE_CHECKING:
    from pathlib import Path

    from .specs import GpuSpec, LlmSpec

QUANTITIES = (*TARGETS, TTFT)  # what a calibration corrects: the model outputs, then TTFT
# Prior scales (docs/calibration.md). TAU: the level parameter's total scale (the GPU's + one LLM's own share)
# and the second parameter's; GPU_SHARE: the part of the level's prior variance that is the GPU's (the rest is
# one LLM's own): with one LLM measured, that share of the runs' level carries to the GPU's other LLMs.
TAU = {POWER: {"offset": 1.0, "slope": 0.5}, ITL: {"overhead": 0.5, "bandwidth": 0.3}, TTFT: {"scale": 0.7, "slope": 0.25}}
GPU_SHARE = {POWER: 0.1, ITL: 0.7, TTFT: 0.3}  # picked by the k-shot rule on all LOGO groups (kshot.GPU_SHARE_GRID)
SIGMA0 = {POWER: 0.13, ITL: 0.16, TTFT: 0.3}
NU0 = 3.0  # prior weight (pseudo-runs) of the bundle's interval width
# prior weight (pseudo-runs) of σ₀ in σ (and of τ_LLM,0 in τ_LLM): runs that agree bring σ (and so the shrinkage)
# down. Power 0.3 (was 1, as ITL and TTFT still are): three runs at one +10 % gap are matched within 2 %; with 1, σ
# stayed ≥ σ₀/2 and shrank the power slope, whose logit form has little leverage near the TDP (2.1 % off at cap
# 128). Set on that synthetic fixture, scored once on the k-shot table (reports/calibration_experiments.md).
NU_SIGMA = {POWER: 0.3, ITL: 1.0, TTFT: 1.0}
U_EPS = 1e-6
BATCH_MARGIN = math.log(2.0)  # the power slope extrapolates at most a factor 2 beyond the runs' batches
Z90 = 1.2815515655446004  # standard normal 0.9 quantile (80 % two-sided)
RHO_RANGE = (0.5, 2.0)
METHOD = ("MAP per measured GPU: GPU terms + each measured LLM's level share (wattgpu.calibration; "
          "docs/calibration.md)")
LABEL = {ITL: "ITL", POWER: "power", TTFT: "TTFT"}
_COLS = ("gpu_tdp_w", "idle_power_w", "roofline_itl_s", "eff_batch")


# ---- the corrections (floats of one row or arrays alike)
def power_map(raw: Any, p: Mapping[str, float], idle: Any, tdp: Any, dlnb: Any) -> Any:
    """Power with the logit of its idle→TDP share moved by offset + slope·Δln b."""
    span = tdp - idle
    u = (raw - idle) / span
    inside = (u > 0.0) & (u < 1.0)
    uc = ops.clip(u, U_EPS, 1.0 - U_EPS)
    z = ops.log(uc / (1.0 - uc)) + p.get("offset", 0.0) + p.get("slope", 0.0) * dlnb
    return ops.where(inside, idle + span / (1.0 + ops.exp(-z)), raw)


def itl_map(raw: Any, p: Mapping[str, float], floor: Any) -> Any:
    """ITL = floor + max(e^overhead·excess + bandwidth·floor, EXCESS_MIN·floor)."""
    excess = ops.maximum(raw - floor, 0.0)
    return floor + ops.maximum(ops.exp(p.get("overhead", 0.0)) * excess + p.get("bandwidth", 0.0) * floor,
                               EXCESS_MIN * floor)


def ttft_map(raw: Any, p: Mapping[str, Any], dlnb: Any = 0.0) -> Any:
    """TTFT = e^(scale + slope·Δln b) × the serving math's TTFT."""
    return raw * ops.exp(p.get("scale", 0.0) + p.get("slope", 0.0) * dlnb)


def log_batch(cols: Mapping[str, Any]) -> Any:
    return ops.log(ops.maximum(cols["eff_batch"], 1.0))


# ---- records
@dataclass(frozen=True)
class GpuCal:
    """A measured GPU: runs, fingerprint, idle power, its runs' log-batch span."""

    runs: int
    fingerprint: dict[str, float | None]
    idle_power_w: float
    idle_measured: bool
    log_batch_ref: float = 0.0
    log_batch_range: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class LlmCal:
    """A measured LLM: its runs and fingerprint (the raw LLM columns: what the models know of it)."""

    runs: int
    fingerprint: dict[str, float | None]


@dataclass(frozen=True)
class Loro:
    """Leave-one-run-out median |error| (%) before and after, the parameters kept, a note."""

    before: float | None
    after: float | None
    kept: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class TargetFit:
    """One quantity's correction: GPU terms per measured GPU, each measured LLM's level share per GPU, …"""

    runs: int
    gpu: dict[str, dict[str, float]]
    other: dict[str, float]
    sigma: float
    interval_scale: dict[str, float]
    loro: dict[str, Loro] = field(default_factory=dict)
    llm: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # gpu → llm → {level: share}

    def params(self, gpu: str | None, llm: str | None, other_gpus: bool) -> dict[str, float]:
        """The parameters applied to LLM ``llm`` on GPU ``gpu`` (None: not measured)."""
        if gpu is None:
            return dict(self.other) if other_gpus else {}
        p = dict(self.gpu.get(gpu, {}))
        share = self.llm.get(gpu, {}).get(llm, {}) if llm is not None else {}
        for k, v in share.items():
            p[k] = p.get(k, 0.0) + v
        return p


@dataclass(frozen=True)
class Calibration:
    """A complete correction (what the manifest's ``calibration`` section holds)."""

    runs: int
    gpus: dict[str, GpuCal]
    targets: dict[str, TargetFit]
    apply_to_other_gpus: bool = False
    llms: dict[str, LlmCal] = field(default_factory=dict)
    priors: dict[str, Any] = field(default_factory=lambda: {"tau": TAU, "gpu_share": GPU_SHARE, "sigma0": SIGMA0,
                                                            "nu0": NU0, "nu_sigma": NU_SIGMA})

    # ---- manifest section
    def to_section(self) -> dict[str, Any]:
        return {"method": METHOD, "runs": self.runs, "apply_to_other_gpus": self.apply_to_other_gpus,
                "gpus": {n: {"runs": g.runs, "fingerprint": g.fingerprint, "idle_power_w": g.idle_power_w,
                             "idle_measured": g.idle_measured, "log_batch_ref": g.log_batch_ref,
                             "log_batch_range": list(g.log_batch_range)} for n, g in sorted(self.gpus.items())},
                "llms": {n: {"runs": m.runs, "fingerprint": m.fingerprint} for n, m in sorted(self.llms.items())},
                "targets": {t: {"runs": f.runs, "gpu": {n: dict(p) for n, p in sorted(f.gpu.items())},
                                "llm": {n: {m: dict(p) for m, p in sorted(v.items())} for n, v in sorted(f.llm.items())},
                                "other": dict(f.other), "sigma": f.sigma,
                                "interval_scale": dict(sorted(f.interval_scale.items())),
                                "loro": {n: {"before": v.before, "after": v.after, "kept": list(v.kept), "note": v.note}
                                         for n, v in sorted(f.loro.items())}}
                            for t, f in sorted(self.targets.items())},
                "priors": json.loads(json.dumps(self.priors))}

    @classmethod
    def from_section(cls, s: Mapping[str, Any]) -> "Calibration":
        """The calibration of a checked section (format 3 sections have no LLM shares: nothing per LLM)."""
        return cls(runs=int(s["runs"]), apply_to_other_gpus=bool(s["apply_to_other_gpus"]),
                   gpus={n: GpuCal(int(g["runs"]), dict(g["fingerprint"]), float(g["idle_power_w"]),
                                   bool(g["idle_measured"]), float(g["log_batch_ref"]),
                                   (float(g["log_batch_range"][0]), float(g["log_batch_range"][1])))
                         for n, g in s["gpus"].items()},
                   llms={n: LlmCal(int(m["runs"]), dict(m["fingerprint"])) for n, m in s.get("llms", {}).items()},
                   targets={t: TargetFit(int(f["runs"]), {n: {k: float(v) for k, v in p.items()} for n, p in f["gpu"].items()},
                                         {k: float(v) for k, v in f["other"].items()}, float(f["sigma"]),
                                         {k: float(v) for k, v in f["interval_scale"].items()},
                                         {n: Loro(v["before"], v["after"], tuple(v["kept"]), str(v["note"]))
                                          for n, v in f["loro"].items()},
                                         {n: {m: {k: float(x) for k, x in p.items()} for m, p in v.items()}
                                          for n, v in f.get("llm", {}).items()})
                            for t, f in s["targets"].items()},
                   priors=dict(s["priors"]))

    # ---- what it says
    def changes(self) -> str:
        """Which GPUs this calibration changes, in words."""
        gpus = ", ".join(f"{n} ({g.runs} run{'s' if g.runs != 1 else ''})" for n, g in sorted(self.gpus.items()))
        if self.apply_to_other_gpus:
            return f"changes {gpus}; other GPUs get the pooled level terms (asked for with --apply-to-other-gpus)"
        return f"changes {gpus} only; other GPUs are predicted as without calibration"

    def summary(self) -> str:
        """e.g. "calibrated on 3 runs: changes NVIDIA B200 (3 runs) only; ..."."""
        return f"calibrated on {self.runs} run{'s' if self.runs != 1 else ''}: {self.changes()}"

    def gpu_name(self, gpu: "GpuSpec") -> str | None:
        """The measured GPU whose fingerprint ``gpu`` has (the models cannot tell such GPUs apart), or None."""
        return _find(self.gpus, F.gpu_columns(gpu))

    def llm_name(self, llm: "LlmSpec") -> str | None:
        """The measured LLM whose fingerprint ``llm`` has, or None."""
        return _find(self.llms, F.llm_columns(llm))

    def params(self, name: str | None, llm: str | None = None) -> dict[str, dict[str, float]]:
        """quantity → the parameters applied to LLM ``llm`` on GPU ``name`` (None: not measured; the GPU's …"""
        return {t: f.params(name, llm, self.apply_to_other_gpus) for t, f in self.targets.items()}

    def describe(self, gpu: "GpuSpec") -> dict[str, Any]:
        """The ``calibration`` entry of a prediction on ``gpu`` (the GPU's terms; a measured LLM adds its share)."""
        name = self.gpu_name(gpu)
        params = self.params(name)
        if name is not None:
            words = f"; {name} calibrated: " + "; ".join(
                f"{LABEL.get(t, t)} " + (", ".join(f"{k} {v:+.3g}" for k, v in p.items()) or "unchanged")
                for t, p in sorted(params.items()))
            shared = sorted({m for f in self.targets.values() for m in f.llm.get(name, {})})
            if shared:
                words += f" (+ the measured LLM's own share for {', '.join(shared)})"
        elif self.apply_to_other_gpus:
            words = "; this GPU has no runs: pooled level terms of the measured GPUs applied"
        else:
            words = "; this GPU has no runs: prediction not changed"
        return {"summary": self.summary() + words, "bundle_summary": self.summary(), "runs": self.runs,
                "measured_gpus": {n: g.runs for n, g in sorted(self.gpus.items())}, "gpu": name,
                "changed": bool(name is not None or self.apply_to_other_gpus),
                "parameters": {t: {k: _round(v) for k, v in p.items()} for t, p in params.items()},
                "idle_power_w": None if name is None or not self.gpus[name].idle_measured else self.gpus[name].idle_power_w}

    def interval_scale(self, gpu: "GpuSpec", target: str) -> float:
        name = self.gpu_name(gpu)
        fit = self.targets.get(target)
        return 1.0 if name is None or fit is None else fit.interval_scale.get(name, 1.0)

    # ---- the correction (arrays of a batch, or one row of floats)
    def _names(self, cols: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        n = len(cols["gpu_tdp_w"])
        gpus = np.full(n, "", dtype=object)
        llms = np.full(n, "", dtype=object)
        for name, g in self.gpus.items():
            gpus = np.where(_match(cols, g.fingerprint), name, gpus)
        for name, m in self.llms.items():
            llms = np.where(_match(cols, m.fingerprint), name, llms)
        return gpus, llms

    def apply(self, outputs: dict[str, Any], cols: Mapping[str, Any]) -> dict[str, Any]:
        """Calibrated copies of model outputs (target → W or s/token) of rows ``cols`` (a server's at its running batch)."""
        tdp = cols["gpu_tdp_w"]
        out = dict(outputs)
        if isinstance(tdp, np.ndarray):
            gpus, llms = self._names(cols)
            pairs = sorted(set(zip(gpus.tolist(), llms.tolist())))
            with np.errstate(all="ignore"):
                for t in TARGETS:
                    if t not in out or t not in self.targets:
                        continue
                    res = np.array(out[t], dtype=np.float64, copy=True)
                    for g, m in pairs:
                        p = self.targets[t].params(g or None, m or None, self.apply_to_other_gpus)
                        if not p:
                            continue
                        mask = (gpus == g) & (llms == m)
                        sub = {k: cols[k][mask] for k in _COLS}
                        res[mask] = self._one(t, res[mask], p, sub, g or None)
                    out[t] = res
            return out
        g1, m1 = _find(self.gpus, cols), _find(self.llms, cols)
        for t in TARGETS:
            if t in out and t in self.targets:
                p = self.targets[t].params(g1, m1, self.apply_to_other_gpus)
                if p:
                    out[t] = self._one(t, out[t], p, cols, g1)
        return out

    def apply_ttft(self, cols: Mapping[str, Any], numbers: dict[str, Any]) -> None:
        """Scale ``numbers["ttft_s"]`` (and the end-to-end latency built on it) of rows ``cols`` in place."""
        f = self.targets.get(TTFT)
        if f is None:
            return
        ttft: Any = numbers["ttft_s"]
        if isinstance(cols["gpu_tdp_w"], np.ndarray):
            gpus, llms = self._names(cols)
            ttft = np.array(ttft, dtype=np.float64, copy=True)
            changed = False
            for g, m in sorted(set(zip(gpus.tolist(), llms.tolist()))):
                p = f.params(g or None, m or None, self.apply_to_other_gpus)
                if p:
                    mask = (gpus == g) & (llms == m)
                    ttft[mask] = ttft_map(ttft[mask], p, self._dlnb({"eff_batch": cols["eff_batch"][mask]}, g or None))
                    changed = True
            if not changed:
                return
        else:
            g1 = _find(self.gpus, cols)
            p = f.params(g1, _find(self.llms, cols), self.apply_to_other_gpus)
            if not p:
                return
            ttft = ttft_map(ttft, p, self._dlnb(cols, g1))
        numbers["ttft_s"] = ttft
        numbers["e2e_latency_s"] = latency.e2e_latency(ttft, numbers["itl_s"], cols["wl_output_tokens"])

    def _dlnb(self, cols: Mapping[str, Any], name: str | None) -> Any:
        """Δln b of rows ``cols`` from GPU ``name``'s runs, clipped to their span widened by BATCH_MARGIN (0 without runs)."""
        if name is None:
            return 0.0
        g = self.gpus[name]
        lo, hi = g.log_batch_range
        return ops.clip(log_batch(cols) - g.log_batch_ref, lo - g.log_batch_ref - BATCH_MARGIN,
                        hi - g.log_batch_ref + BATCH_MARGIN)

    def _one(self, target: str, raw: Any, p: Mapping[str, float], cols: Mapping[str, Any], name: str | None) -> Any:
        if target == ITL:
            return itl_map(raw, p, cols["roofline_itl_s"])
        dlnb: Any = self._dlnb(cols, name) if p.get("slope", 0.0) != 0.0 else 0.0
        return power_map(raw, p, cols["idle_power_w"], cols["gpu_tdp_w"], dlnb)


def _find(known: Mapping[str, Any], cols: Mapping[str, Any]) -> str | None:
    for name, rec in known.items():
        if all(_same(cols.get(k), v) for k, v in rec.fingerprint.items()):
            return name
    return None


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def _round6(x: float) -> float:
    return float(f"{x:.6g}")


def _same(a: Any, b: float | None) -> bool:
    if b is None:
        return a is None or (isinstance(a, float) and math.isnan(a))
    return a is not None and float(a) == b


def _match(cols: Mapping[str, np.ndarray], fingerprint: Mapping[str, float | None]) -> np.ndarray:
    m = np.ones(len(cols["gpu_tdp_w"]), dtype=bool)
    for k, v in fingerprint.items():
        c = cols[k]
        m &= np.isnan(c) if v is None else (c == v)
    return m


def _fingerprint(cols: Mapping[str, float], keys: Sequence[str]) -> dict[str, float | None]:
    return {k: (None if math.isnan(cols[k]) else cols[k]) for k in keys}


def fingerprint(gpu: "GpuSpec") -> dict[str, float | None]:
    """The raw feature columns of ``gpu`` (NaN as None): what the models know of it."""
    return _fingerprint(F.gpu_columns(gpu), F.GPU_COLUMN_KEYS)  # spec sheet, not idle power


def llm_fingerprint(llm: "LlmSpec") -> dict[str, float | None]:
    """The raw LLM feature columns of ``llm`` (NaN as None)."""
    cols = F.llm_columns(llm)
    return _fingerprint(cols, tuple(cols))


# ---- the runs
@dataclass
class Runs:
    """Measured runs resolved against a bundle (see wattgpu.measured): columns at each run's running …"""

    triples: list[Any]
    gpus: list[str]
    specs: list["GpuSpec"]
    cols: dict[str, np.ndarray]
    predicted: dict[str, np.ndarray]
    measured: dict[str, np.ndarray]
    idle_measured: np.ndarray
    raw: dict[str, np.ndarray] | None = None
    busy: np.ndarray | None = None
    lines: list[int] | None = None
    ttft_with: Callable[[str], np.ndarray] | None = None  # the runs' TTFT predicted by the bundle in a directory

    def raw_of(self, target: str) -> np.ndarray:
        return (self.raw or self.predicted)[target]

    def busy_of(self) -> np.ndarray:
        return np.ones(len(self.gpus)) if self.busy is None else self.busy

    def llm_names(self) -> list[str]:
        return [str(t[1].name) for t in self.triples]


def model_value(target: str, raw: np.ndarray, p: Mapping[str, float], cols: Mapping[str, np.ndarray],
                dlnb: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """The calibrated prediction of these runs with parameters ``p`` (power: the server mix)."""
    if target == ITL:
        return itl_map(raw, p, cols["roofline_itl_s"])
    if target == TTFT:
        return ttft_map(raw, p, dlnb)
    idle, tdp = cols["idle_power_w"], cols["gpu_tdp_w"]
    busy_w = np.minimum(power_map(raw, p, idle, tdp, dlnb), tdp)
    return idle + busy * np.maximum(busy_w - idle, 0.0)


def prior_scales(target: str, names: Sequence[str], gpu_share: float | None = None) -> tuple[np.ndarray, float]:
    """(τ of each GPU parameter ``names``, τ of one LLM's own level share): the level's total prior …"""
    gpu_share = GPU_SHARE[target] if gpu_share is None else gpu_share
    level = PARAMS[target][0]
    tau = [TAU[target][p] * (math.sqrt(gpu_share) if p == level else 1.0) for p in names]
    return np.array(tau), TAU[target][level] * math.sqrt(1.0 - gpu_share)


@dataclass(frozen=True)
class Fitted:
    """A MAP fit: the GPU's parameters, each LLM's level share, σ (the runs' scatter with the prior's weight)."""

    gpu: dict[str, float]
    llm: dict[str, dict[str, float]]
    sigma: float

    def params(self, llm: str | None) -> dict[str, float]:
        p = dict(self.gpu)
        for k, v in self.llm.get(llm, {}).items() if llm is not None else ():
            p[k] = p.get(k, 0.0) + v
        return p


def fit_params(target: str, names: Sequence[str], y: np.ndarray, value: Callable[[dict[str, Any]], np.ndarray],
               gpu_share: float | None = None, iters: int = 25, clusters: Sequence[str] | None = None) -> Fitted:
    """MAP parameters ``names`` (the others 0) of runs ``y`` whose calibrated prediction is …"""
    n = len(y)
    if n == 0 or not names:
        return Fitted({}, {}, SIGMA0[target])
    k = len(names)
    cl = np.zeros(n, dtype=np.intp)
    uniq: list[str] = []
    if clusters is not None and names[0] == PARAMS[target][0]:
        uniq = sorted(set(clusters))
        cl = np.array([uniq.index(c) for c in clusters], dtype=np.intp)
    n_cl = len(uniq)
    tau_gpu, tau_llm = prior_scales(target, names, gpu_share)
    tau = np.concatenate([tau_gpu, np.full(n_cl, tau_llm)])
    lo0, hi0 = BOUNDS[target][names[0]]
    lo = np.array([BOUNDS[target][p][0] for p in names] + [lo0 - hi0] * n_cl)
    hi = np.array([BOUNDS[target][p][1] for p in names] + [hi0 - lo0] * n_cl)
    ly = np.log(y)
    sigma = SIGMA0[target]
    theta = np.zeros(k + n_cl)

    def resid(th: np.ndarray) -> np.ndarray:
        p: dict[str, Any] = dict(zip(names, th[:k].tolist()))
        if n_cl:
            p[names[0]] = np.clip(th[0] + th[k:][cl], lo0, hi0)
        with np.errstate(all="ignore"):
            return ly - np.log(value(p))

    for _ in range(3):  # σ (and τ_llm) from the prior, then updated with the fit's own scatter
        for _ in range(iters):
            r = resid(theta)
            J = np.empty((n, k + n_cl))
            for j in range(k + n_cl):
                d = np.zeros(k + n_cl)
                d[j] = 1e-5
                J[:, j] = -(resid(theta + d) - r) / 1e-5
            A = J.T @ J / sigma ** 2 + np.diag(1.0 / tau ** 2)
            g = J.T @ r / sigma ** 2 - theta / tau ** 2
            if not (np.isfinite(A).all() and np.isfinite(g).all()):
                break
            step = np.linalg.solve(A, g)
            new = np.clip(theta + step, lo, hi)
            if np.max(np.abs(new - theta)) < 1e-7:
                theta = new
                break
            theta = new
        rss = float(np.sum(resid(theta) ** 2))
        sigma = math.sqrt((NU_SIGMA[target] * SIGMA0[target] ** 2 + rss) / (NU_SIGMA[target] + n))
        if n_cl >= 2:  # LLMs whose levels disagree: each keeps more of its own, less carries to the GPU
            shares = theta[k:]
            tau[k:] = math.sqrt((NU_SIGMA[target] * tau_llm ** 2 + float(np.sum(shares ** 2))) / (NU_SIGMA[target] + n_cl))
    gpu = {p: _round6(v) for p, v in zip(names, theta[:k].tolist())}
    llm = {m: {names[0]: _round6(float(np.clip(theta[0] + theta[k + j], lo0, hi0)) - gpu[names[0]])}
           for j, m in enumerate(uniq)}
    return Fitted(gpu, llm, _round6(sigma))


def _mdape(y: np.ndarray, p: np.ndarray) -> float | None:
    ok = np.isfinite(y) & np.isfinite(p)
    return None if not ok.any() else _round(float(np.median(np.abs(p[ok] / y[ok] - 1.0))) * 100)


def _at_rows(value: Callable[[dict[str, Any], np.ndarray], np.ndarray], rows: np.ndarray,
             p: dict[str, Any]) -> np.ndarray:
    return value(p, rows)


def loro_select(target: str, y: np.ndarray, before: np.ndarray,
                value: Callable[[dict[str, Any], np.ndarray], np.ndarray], gpu_share: float | None = None,
                clusters: Sequence[str] | None = None) -> tuple[tuple[str, ...], Loro]:
    """The parameter set kept for one GPU's runs by leave-one-run-out (``value(params, rows)``); a …"""
    n = len(y)
    full = PARAMS[target]
    base = _mdape(y, before)
    if n == 1:
        return full[:1], Loro(base, None, full[:1], "1 run: no leave-one-run-out check possible; the level term "
                                                    "only, as far as σ₀ lets one run move it")
    candidates = list(dict.fromkeys([full, full[:1], ()] if n >= 3 else [full[:1], ()]))
    scores: list[tuple[float, int, tuple[str, ...]]] = []
    for cand in candidates:
        held = np.empty(n)
        for i in range(n):
            rest = np.flatnonzero(np.arange(n) != i)
            fitted = fit_params(target, cand, y[rest], partial(_at_rows, value, rest), gpu_share,
                                clusters=None if clusters is None else [clusters[int(j)] for j in rest])
            held[i] = value(fitted.params(None if clusters is None else clusters[i]), np.array([i]))[0]
        scores.append((_mdape(y, held) or 0.0, len(cand), cand))
    best = min(scores, key=lambda s: (round(s[0], 6), s[1]))
    kept = best[2]
    names = ", ".join(kept) if kept else "none"
    if not kept:
        worst = min(s[0] for s in scores if s[2])
        note = (f"calibrating {LABEL[target]} made held-out runs worse ({worst:.1f} % vs {best[0]:.1f} % "
                "without): no parameters kept")
    elif kept != full and n >= 3:
        note = f"kept {names}: adding {full[1]} made held-out runs worse"
    else:
        note = f"kept {names}"
    return kept, Loro(base, _round(best[0]), kept, note)


def interval_scales(gpus: Sequence[str], measured: np.ndarray, calibrated: np.ndarray,
                    half_width_80: float | None) -> dict[str, float]:
    """ρ per GPU: the runs' scatter over the bundle's 80 % width (1 without intervals)."""
    g = np.asarray(list(gpus), dtype=object)
    with np.errstate(all="ignore"):
        e = np.log(np.asarray(measured, float) / np.asarray(calibrated, float))
    out: dict[str, float] = {}
    for nm in sorted(set(g.tolist())):
        ei = e[(g == nm) & np.isfinite(e)]
        if not half_width_80 or half_width_80 <= 0:
            out[nm] = 1.0
            continue
        w = half_width_80 / Z90
        rho = math.sqrt((NU0 + float(((ei / w) ** 2).sum())) / (NU0 + len(ei)))
        out[nm] = _round(min(max(rho, RHO_RANGE[0]), RHO_RANGE[1]))
    return out


def fit(runs: Runs, factors_80: Mapping[str, float] | None = None, apply_to_other_gpus: bool = False,
        gpu_share: float | None = None, check: bool = True, quantities: Sequence[str] = QUANTITIES) -> Calibration:
    """The calibration of ``runs`` (``factors_80``: target → the bundle's 80 % log half-width; …"""
    g_arr = np.asarray(runs.gpus, dtype=object)
    lnb = np.log(np.maximum(np.asarray(runs.cols["eff_batch"], float), 1.0))
    gpus: dict[str, GpuCal] = {}
    for name in sorted(set(runs.gpus)):
        m = g_arr == name
        spec = runs.specs[int(np.flatnonzero(m)[0])]
        meas = runs.idle_measured[m]
        meas = meas[np.isfinite(meas)]
        if meas.size:
            idle_w, measured_idle = float(np.mean(meas)), True
        else:
            idle_w, measured_idle = float(runs.cols["idle_power_w"][m][0]), False
        gpus[name] = GpuCal(int(m.sum()), fingerprint(spec), _round(idle_w), measured_idle,
                            _round6(float(np.mean(lnb[m]))), (_round6(float(lnb[m].min())), _round6(float(lnb[m].max()))))
    llm_of = runs.llm_names()
    llms: dict[str, LlmCal] = {}
    for i, nm in enumerate(llm_of):
        if nm not in llms:
            llms[nm] = LlmCal(llm_of.count(nm), llm_fingerprint(runs.triples[i][1]))
    busy = runs.busy_of()
    targets: dict[str, TargetFit] = {}
    for t in quantities:
        y, raw = runs.measured.get(t), (runs.raw or {}).get(t, runs.predicted.get(t))
        if y is None or raw is None or not np.isfinite(y).any():
            continue
        before = runs.predicted.get(t, raw)
        ok_all = np.isfinite(y) & np.isfinite(raw) & (y > 0) & (raw > 0 if t == TTFT else True)
        per_gpu: dict[str, dict[str, float]] = {}
        per_llm: dict[str, dict[str, dict[str, float]]] = {}
        loro: dict[str, Loro] = {}
        sigmas = []
        cal = np.full(len(y), np.nan)
        for name in sorted(gpus):
            idx = np.flatnonzero((g_arr == name) & ok_all)
            if not idx.size:
                continue
            g = gpus[name]

            def value(p: dict[str, Any], rows: np.ndarray, idx: np.ndarray = idx, g: GpuCal = g,
                      t: str = t, raw: np.ndarray = raw) -> np.ndarray:
                sel = idx[rows]  # a parameter may be an array: one value per row of ``rows`` (an LLM's share)
                c = {k: runs.cols[k][sel] for k in _COLS}
                dlnb = np.clip(lnb[sel] - g.log_batch_ref, g.log_batch_range[0] - g.log_batch_ref - BATCH_MARGIN,
                               g.log_batch_range[1] - g.log_batch_ref + BATCH_MARGIN)
                return model_value(t, raw[sel], p, c, dlnb, busy[sel])

            llms_here = [llm_of[i] for i in idx]
            if check:
                kept, loro[name] = loro_select(t, y[idx], before[idx], value, gpu_share, llms_here)
            else:
                kept = PARAMS[t]
            all_rows = np.arange(idx.size)
            fitted = fit_params(t, kept, y[idx], partial(_at_rows, value, all_rows), gpu_share, clusters=llms_here)
            per_gpu[name] = fitted.gpu
            if fitted.llm:
                per_llm[name] = fitted.llm
            sigmas.append(fitted.sigma)
            cal[idx] = [value(fitted.params(llm_of[i]), np.array([j]))[0] for j, i in enumerate(idx)]
        other: dict[str, float] = {}
        if apply_to_other_gpus:  # the level terms pooled over every measured run (no batch slope)
            idx = np.flatnonzero(ok_all)
            c = {k: runs.cols[k][idx] for k in _COLS}
            level = PARAMS[t][:1] if t == POWER else PARAMS[t]
            other = fit_params(t, level, y[idx], lambda q: model_value(t, raw[idx], q, c, np.zeros(idx.size), busy[idx]),
                               gpu_share).gpu
        ok = np.isfinite(cal)
        scales = interval_scales(g_arr[ok].tolist(), y[ok], cal[ok], (factors_80 or {}).get(t))
        targets[t] = TargetFit(int(ok.sum()), per_gpu, other, _round6(max(sigmas) if sigmas else SIGMA0[t]), scales,
                               loro, per_llm)
    return Calibration(runs=len(runs.gpus), gpus=gpus, targets=targets, apply_to_other_gpus=apply_to_other_gpus,
                       llms=llms, priors={"tau": TAU, "sigma0": SIGMA0, "nu0": NU0, "nu_sigma": NU_SIGMA,
                                         "gpu_share": GPU_SHARE if gpu_share is None else gpu_share})


def gap_closed(runs: Runs, cal: Calibration) -> dict[str, np.ndarray]:
    """quantity → per run, the share of its gap to the model (in log units) the calibration closes: 1 − …"""
    out: dict[str, np.ndarray] = {}
    llm_of = runs.llm_names()
    lnb = np.log(np.maximum(np.asarray(runs.cols["eff_batch"], float), 1.0))
    for t, f in cal.targets.items():
        y, raw = runs.measured.get(t), (runs.raw or {}).get(t, runs.predicted.get(t))
        before = runs.predicted.get(t, raw)
        if y is None or raw is None or before is None:
            continue
        after = np.full(len(y), np.nan)
        for i, g in enumerate(runs.gpus):
            p = f.params(g if g in cal.gpus else None, llm_of[i], cal.apply_to_other_gpus)
            gc = cal.gpus.get(g)
            dl = 0.0 if gc is None else float(np.clip(lnb[i] - gc.log_batch_ref,
                                                      gc.log_batch_range[0] - gc.log_batch_ref - BATCH_MARGIN,
                                                      gc.log_batch_range[1] - gc.log_batch_ref + BATCH_MARGIN))
            c = {k: runs.cols[k][i:i + 1] for k in _COLS}
            after[i] = model_value(t, raw[i:i + 1], p, c, np.array([dl]), runs.busy_of()[i:i + 1])[0]
        with np.errstate(all="ignore"):
            gap0 = np.abs(np.log(y / before))
            gap1 = np.abs(np.log(y / after))
            out[t] = np.where(gap0 > 0, 1.0 - gap1 / gap0, np.where(gap1 > 0, -np.inf, 1.0))
    return out


def half_widths_80(interval_factors: Mapping[str, Any]) -> dict[str, float]:
    """target → half the log width of the bundle's 80 % interval (from ``bundle.interval_factors``)."""
    out = {}
    for t, levels in interval_factors.items():
        for level, lo, hi in levels:
            if abs(level - 0.8) < 1e-9 and lo > 0 and hi > 0:
                out[t] = 0.5 * math.log(hi / lo)
    return out


# ---- the bundle (reading a bundle's calibration, of / apply_ttft: wattgpu.calibrated, off the cold-start path)
def write_calibrated(base: ModelBundle, cal: Calibration, out_dir: "Path") -> dict[str, Any]:
    """Write ``base`` + ``cal`` as a bundle in ``out_dir`` (same model files, catalog with measured …"""
    doc = base.catalog_document()
    for entry in doc.get("gpus", []):
        g = cal.gpus.get(entry.get("name"))
        if g is not None and g.idle_measured and isinstance(entry.get("spec"), dict):
            entry["spec"]["idle_power_w"] = g.idle_power_w
            entry["spec"]["idle_power_source"] = ("measured by the user: idle_power_w or low-load server runs "
                                                  "given to wattgpu calibrate")
    catalog_bytes = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")
    try:
        return rewrite_bundle(base, out_dir, catalog_bytes, {"calibration": cal.to_section()})
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else str(out_dir)
        raise ConfigFileError(where, f"cannot write the calibrated bundle there ({exc.strerror or exc}); "
                                     "pass --out a new or empty directory you can write to") from None


def check_base(base: ModelBundle) -> None:
    """Refuse to calibrate a bundle that is already calibrated (its runs would count twice)."""
    if base.schema.calibration is not None:
        raise WattGPUError(f"{base.path}: this bundle is already calibrated; calibrate from the bundle it was "
                           "made from (leave out --models for the packaged one), with all the runs together")


def check_out_dir(base: ModelBundle, out_dir: "str | Path") -> None:
    """Refuse an --out that is a file, lies under a file, is the base bundle, or a non-empty non-bundle directory."""
    from pathlib import Path  # only when writing: keeps pathlib off the runtime's cold start

    out = Path(out_dir)
    for parent in [out, *out.parents]:  # the first part of the path that exists must be a directory
        try:
            exists = parent.exists()
        except OSError as exc:
            raise ConfigFileError(str(parent), f"cannot be read ({exc.strerror or exc}); pass --out a directory "
                                               "to create") from None
        if not exists:
            continue
        if parent.is_dir():
            break
        if parent == out:
            raise ConfigFileError(str(out), "exists and is not a directory; --out takes a directory to create")
        raise ConfigFileError(str(parent), f"is a file, not a directory, so --out {out} cannot be created under it; "
                                           "pass --out a path whose parents are directories")
    if out.is_dir():
        if base.path is not None and os.path.samefile(out, base.path):
            raise ConfigFileError(str(out), "is the bundle being calibrated; write the calibrated one elsewhere")
        try:
            holds = any(out.iterdir())
        except OSError as exc:
            raise ConfigFileError(str(out), f"cannot be listed ({exc.strerror or exc}); pass --out a directory you "
                                            "can write to") from None
        if holds and not (out / SCHEMA_FILE).is_file():
            raise ConfigFileError(str(out), "is a non-empty directory that holds no model bundle; pass a new or "
                                            "empty directory (an earlier calibrated bundle is replaced)")


def calibrate(runs: Runs, base: ModelBundle, out_dir: "str | Path", apply_to_other_gpus: bool = False) -> Calibration:
    """Fit ``runs`` (predicted by ``base``) and write the calibrated bundle to ``out_dir``."""
    from dataclasses import replace
    from pathlib import Path

    check_base(base)
    check_out_dir(base, out_dir)
    factors = half_widths_80(base.interval_factors)
    y = runs.measured.get(TTFT)
    two_pass = runs.ttft_with is not None and y is not None and bool(np.isfinite(y).any())
    cal = fit(runs, factors, apply_to_other_gpus, quantities=TARGETS if two_pass else QUANTITIES)
    if two_pass:
        write_calibrated(base, cal, Path(out_dir))
        runs.raw = {**(runs.raw or {}), TTFT: runs.ttft_with(str(out_dir))}  # type: ignore[misc]
        ttft = fit(runs, factors, apply_to_other_gpus, quantities=(TTFT,))
        cal = replace(cal, targets={**cal.targets, **ttft.targets})
    write_calibrated(base, cal, Path(out_dir))
    return cal


def report(cal: Calibration, runs: Runs, out_dir: str) -> str:
    """What `wattgpu calibrate` prints: per GPU and quantity the parameters kept, the leave-one-run-out …"""
    closed = gap_closed(runs, cal)
    g_arr = np.asarray(runs.gpus, dtype=object)
    lines = [cal.summary(),
             f"{'GPU':<28} {'quantity':<6} {'runs':>4} {'LORO before':>11} {'after':>6} {'gap closed':>10}  "
             "parameters (kept by leave-one-run-out)"]
    order = {t: i for i, t in enumerate(QUANTITIES)}
    for t, f in sorted(cal.targets.items(), key=lambda kv: order.get(kv[0], 99)):
        for name, p in sorted(f.gpu.items()):
            lo = f.loro.get(name)
            before = "–" if lo is None or lo.before is None else f"{lo.before:.1f} %"
            after = "–" if lo is None or lo.after is None else f"{lo.after:.1f} %"
            share = closed.get(t, np.array([]))
            share = share[(g_arr == name)[:len(share)] & np.isfinite(share)] if share.size else share
            gap = "–" if not share.size else f"{float(np.median(share)) * 100:.0f} %"
            params = ", ".join(f"{k} {v:+.3g}" for k, v in p.items()) or "none"
            own = f.llm.get(name, {})
            if own:
                params += "; own share " + ", ".join(f"{m} {k} {v:+.3g}" for m, q in sorted(own.items())
                                                     for k, v in q.items())
            lines.append(f"{name[:28]:<28} {LABEL.get(t, t):<6} {cal.gpus[name].runs:>4} {before:>11} {after:>6} "
                         f"{gap:>10}  {params}")
            if lo is not None and lo.note:
                lines.append(f"{'':<28} {'':<6} {'':>4} {'':>11} {'':>6} {'':>10}  {lo.note}")
    idle = [f"{n} {g.idle_power_w:g} W" for n, g in sorted(cal.gpus.items()) if g.idle_measured]
    if idle:
        lines.append("idle power from your idle_power_w or low-load server runs replaces the catalog's: " + ", ".join(idle))
    lines += ["LORO: median |error| of your runs, each predicted by a fit on the others; gap closed: median share of "
              "each run's gap the bundle closes; GPU terms apply to all its LLMs, an own share to its LLM only "
              "(docs/calibration.md)",
              f"wrote {out_dir}: use it with `wattgpu predict --models {out_dir}` or WATTGPU_MODELS={out_dir}"]
    return "\n".join(lines)
