"""Calibration on a user's own runs: fit a bounded correction of the models and apply it.

Per target a shift θ = s (stack level, every GPU) + g_k (measured GPU k), posterior means of a
hierarchical normal model (stack, GPU and a fitted-but-unapplied LLM level; delta-method run
weights; priors :data:`PRIORS`), in a space where any shift keeps the physics:

- ITL: ``itl' = floor + exp(θ)·max(itl − floor, 0)``, floor = the roofline step at the row's batch
  (weights + KV read, FLOPs, all-reduce): the shipped models' ITL exceeds it by a term that never falls
  with the batch (wattgpu.targets.BOUNDED), so ITL stays monotone in the batch and never below the floor;
- power: the odds of ``u = (power − idle)/(TDP − idle)`` times ``exp(θ)`` inside (idle, TDP), the
  value kept outside, so power stays monotone, ≤ TDP and ≥ idle. ``idle``: the calibrated GPU's
  (user-measured, else catalog, else 15 % of TDP), 15 % of TDP for other GPUs.

Intervals of a measured GPU scale their log widths by its runs' scatter (ρ). The formulas, with the
shrinkage and the priors' origin: docs/calibration.md. Runtime only (numpy); the manifest section
(``calibration``, bundle format 2) is checked by :func:`read_section`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from . import features as F
from . import ops
from .targets import ITL, POWER, TARGETS

if TYPE_CHECKING:
    from pathlib import Path

    from .bundle import ModelBundle
    from .specs import GpuSpec


@dataclass(frozen=True)
class Prior:
    """Prior scales of one target's correction (in its z space)."""

    tau_stack: float
    tau_gpu: float
    tau_llm: float
    sigma: float


# τ: in z space (ITL: log of the time above the floor; power: logit of the dynamic share, ≈ 3× a log
# power ratio mid-range). σ: a run's relative (log) noise, the grouped-CV MdAPE of reports/accuracy.md
# (power 8.8 %, ITL 10.8 %) over 0.6745 (MdAPE of a normal error = 0.6745 σ).
PRIORS = {ITL: Prior(tau_stack=0.5, tau_gpu=0.25, tau_llm=0.25, sigma=0.16),
          POWER: Prior(tau_stack=0.8, tau_gpu=0.5, tau_llm=0.5, sigma=0.13)}
NU0 = 3.0  # prior weight (pseudo-runs) of σ₀ and of the bundle's interval width
U_CLIP = 0.02  # dynamic shares are clipped to [U_CLIP, 1 − U_CLIP] before the logit
Z90 = 1.2815515655446004  # standard normal 0.9 quantile (80 % two-sided)
RHO_RANGE = (0.5, 2.0)
METHOD = ("hierarchical normal (stack + GPU level) posterior means of z-space residuals; ITL: "
          "z = log(itl - roofline floor); power: z = logit((power - idle)/(TDP - idle)); see wattgpu.calibration")
TARGET_KEYS = ("runs", "stack", "gpu", "sigma", "interval_scale")
GPU_KEYS = ("runs", "fingerprint", "idle_power_w", "idle_measured")
SECTION_KEYS = ("method", "runs", "gpus", "targets", "priors")


# ---- the physical ends of each map
def itl_floor(cols: Mapping[str, Any]) -> Any:
    """The roofline step time (s) at the row's batch: the floor the models' ITL lies above by construction."""
    return cols["roofline_itl_s"]  # one row of floats or arrays alike


def default_idle(tdp: Any) -> Any:
    """The idle anchor of a GPU without a calibrated idle figure (the runtime's estimate)."""
    from .server import IDLE_FRACTION_OF_TDP  # not at import: server → assemble → calibration

    return IDLE_FRACTION_OF_TDP * tdp


def to_z(target: str, value: Any, end_lo: Any, tdp: Any = None) -> Any:
    """``value`` in the target's correction space (``end_lo``: the ITL floor or the idle anchor)."""
    if target == ITL:
        return ops.log(ops.maximum(value - end_lo, 1e-300))
    u = ops.clip((value - end_lo) / (tdp - end_lo), U_CLIP, 1.0 - U_CLIP)
    return ops.log(u / (1.0 - u))


def shift(target: str, value: Any, theta: Any, end_lo: Any, tdp: Any = None) -> Any:
    """The corrected value: shift ``value`` by ``theta`` in z space where the map applies, else keep it."""
    if target == ITL:
        return end_lo + ops.exp(theta) * ops.maximum(value - end_lo, 0.0)
    span = tdp - end_lo
    u = (value - end_lo) / span
    inside = (u > 0.0) & (u < 1.0)
    uc = ops.clip(u, 1e-12, 1.0 - 1e-12)
    odds = uc / (1.0 - uc) * ops.exp(theta)
    return ops.where(inside, end_lo + span * (odds / (1.0 + odds)), value)


# ---- the fitted correction
@dataclass(frozen=True)
class TargetFit:
    """One target's correction: shifts in z space and per-GPU interval scales."""

    runs: int
    stack: float
    gpu: dict[str, float]
    sigma: float
    interval_scale: dict[str, float]


@dataclass(frozen=True)
class GpuCal:
    """A measured GPU: its runs, the raw feature columns that identify it, its idle anchor."""

    runs: int
    fingerprint: dict[str, float | None]
    idle_power_w: float
    idle_measured: bool


@dataclass(frozen=True)
class Calibration:
    """A complete correction (what the manifest's ``calibration`` section holds)."""

    runs: int
    gpus: dict[str, GpuCal]
    targets: dict[str, TargetFit]
    priors: dict[str, dict[str, float]] = field(default_factory=lambda: {t: vars(p).copy() for t, p in PRIORS.items()})

    # ---- manifest section
    def to_section(self) -> dict[str, Any]:
        return {"method": METHOD, "runs": self.runs,
                "gpus": {n: {"runs": g.runs, "fingerprint": g.fingerprint, "idle_power_w": g.idle_power_w,
                             "idle_measured": g.idle_measured} for n, g in sorted(self.gpus.items())},
                "targets": {t: {"runs": f.runs, "stack": f.stack, "gpu": dict(sorted(f.gpu.items())), "sigma": f.sigma,
                                "interval_scale": dict(sorted(f.interval_scale.items()))}
                            for t, f in sorted(self.targets.items())},
                "priors": self.priors}

    @classmethod
    def from_section(cls, s: Mapping[str, Any]) -> "Calibration":
        return cls(runs=int(s["runs"]),
                   gpus={n: GpuCal(int(g["runs"]), dict(g["fingerprint"]), float(g["idle_power_w"]),
                                   bool(g["idle_measured"])) for n, g in s["gpus"].items()},
                   targets={t: TargetFit(int(f["runs"]), float(f["stack"]), {k: float(v) for k, v in f["gpu"].items()},
                                         float(f["sigma"]), {k: float(v) for k, v in f["interval_scale"].items()})
                            for t, f in s["targets"].items()},
                   priors={t: dict(p) for t, p in s["priors"].items()})

    # ---- what it says
    def summary(self) -> str:
        """e.g. "calibrated on 3 runs: NVIDIA B200 ×3; stack factor ITL 0.91, power 1.10"."""
        gpus = ", ".join(f"{n} ×{g.runs}" for n, g in sorted(self.gpus.items()))
        stack = ", ".join(f"{_label(t)} {math.exp(f.stack):.2f}" for t, f in sorted(self.targets.items()))
        return f"calibrated on {self.runs} run{'s' if self.runs != 1 else ''}: {gpus}; stack factor {stack}"

    def gpu_name(self, gpu: "GpuSpec") -> str | None:
        """The measured GPU whose fingerprint ``gpu`` has (the models cannot tell such GPUs apart), or None."""
        cols = F.gpu_columns(gpu)
        for name, g in self.gpus.items():
            if all(_same(cols.get(k), v) for k, v in g.fingerprint.items()):
                return name
        return None

    def describe(self, gpu: "GpuSpec") -> dict[str, Any]:
        """The ``calibration`` entry of a prediction on ``gpu``."""
        name = self.gpu_name(gpu)
        stack = {t: _round(math.exp(f.stack)) for t, f in self.targets.items()}
        own = None if name is None else {t: _round(math.exp(f.gpu.get(name, 0.0))) for t, f in self.targets.items()}
        text = self.summary() + (f"; {name} factor " + ", ".join(f"{_label(t)} {v:.2f}" for t, v in sorted(own.items()))
                                 if own is not None else "; GPU not measured: stack factor only")
        return {"summary": text, "bundle_summary": self.summary(), "runs": self.runs, "measured_gpus": {n: g.runs for n, g in sorted(self.gpus.items())},
                "stack_factor": stack, "gpu": name, "gpu_factor": own,
                "idle_power_w": None if name is None or not self.gpus[name].idle_measured else self.gpus[name].idle_power_w}

    def interval_scale(self, gpu: "GpuSpec", target: str) -> float:
        name = self.gpu_name(gpu)
        fit = self.targets.get(target)
        return 1.0 if name is None or fit is None else fit.interval_scale.get(name, 1.0)

    # ---- the correction on model outputs (arrays of a batch, or one row of floats)
    def apply(self, outputs: dict[str, Any], cols: Mapping[str, Any]) -> dict[str, Any]:
        """Calibrated copies of the model outputs ``outputs`` (target → W or s/token) of rows ``cols``."""
        tdp = cols["gpu_tdp_w"]
        scalar = not isinstance(tdp, np.ndarray)
        idle = default_idle(tdp)
        theta: dict[str, Any] = {t: f.stack for t, f in self.targets.items()}
        if scalar:
            name = self._match_scalar(cols)
            if name is not None:
                idle = self.gpus[name].idle_power_w
                theta = {t: f.stack + f.gpu.get(name, 0.0) for t, f in self.targets.items()}
        else:
            theta = {t: np.full(tdp.shape, v) for t, v in theta.items()}
            for name, g in self.gpus.items():
                m = _match(cols, g.fingerprint)
                if m.any():
                    idle = np.where(m, g.idle_power_w, idle)
                    for t, f in self.targets.items():
                        theta[t] = np.where(m, f.stack + f.gpu.get(name, 0.0), theta[t])
        out = dict(outputs)
        with np.errstate(all="ignore"):
            if ITL in out and ITL in theta:
                out[ITL] = shift(ITL, out[ITL], theta[ITL], itl_floor(cols))
            if POWER in out and POWER in theta:
                out[POWER] = shift(POWER, out[POWER], theta[POWER], idle, tdp)
        return out

    def _match_scalar(self, cols: Mapping[str, Any]) -> str | None:
        for name, g in self.gpus.items():
            if all(_same(cols.get(k), v) for k, v in g.fingerprint.items()):
                return name
        return None


def _label(target: str) -> str:
    return {ITL: "ITL", POWER: "power"}.get(target, target)


def _round(x: float) -> float:
    return float(f"{x:.4g}")


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


def fingerprint(gpu: "GpuSpec") -> dict[str, float | None]:
    """The raw feature columns of ``gpu`` (NaN as None): what the models know of it."""
    cols = F.gpu_columns(gpu)
    return {k: (None if math.isnan(cols[k]) else cols[k]) for k in F.GPU_COLUMN_KEYS}  # spec sheet, not idle power


# ---- fitting
def residuals(target: str, measured: np.ndarray, predicted: np.ndarray, end_lo: np.ndarray,
              tdp: np.ndarray) -> np.ndarray:
    """z(measured) − z(predicted) per run; NaN where the run cannot inform the map (ITL at or below the floor)."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    with np.errstate(all="ignore"):
        r = to_z(target, measured, end_lo, tdp) - to_z(target, predicted, end_lo, tdp)
    if target == ITL:
        r = np.where((measured > end_lo) & (predicted > end_lo), r, np.nan)
    return np.where(np.isfinite(measured) & np.isfinite(predicted), r, np.nan)


def jacobian(target: str, predicted: np.ndarray, end_lo: np.ndarray, tdp: np.ndarray) -> np.ndarray:
    """dz / d log(value) at the prediction: how much a relative error of a run moves its z residual."""
    p = np.asarray(predicted, float)
    with np.errstate(all="ignore"):
        if target == ITL:
            return p / (p - end_lo)
        u = np.clip((p - end_lo) / (tdp - end_lo), U_CLIP, 1.0 - U_CLIP)
        return p / ((tdp - end_lo) * u * (1.0 - u))


def fit_target(target: str, gpus: Sequence[str], r: np.ndarray, llms: Sequence[str] | None = None,
               jac: np.ndarray | None = None, prior: Prior | None = None) -> tuple[float, dict[str, float], float]:
    """Posterior means (stack shift, {GPU: shift}) and the relative noise σ of one target's residuals
    ``r`` (finite only; ``jac``: each run's :func:`jacobian`, 1 when None).

    ``llms``: each run's LLM; an LLM-level effect (prior ``tau_llm``) then takes the part of the
    residuals that runs of one LLM share but other LLMs need not (it is fitted, never applied)."""
    prior = prior or PRIORS[target]
    j_all = np.ones(len(r)) if jac is None else np.asarray(jac, float)
    ok = np.isfinite(r) & np.isfinite(j_all) & (j_all > 0)
    r, j = np.asarray(r, float)[ok], j_all[ok]
    g = np.asarray(list(gpus), dtype=object)[ok]
    names = sorted(set(g.tolist()))
    n, k = len(r), len(names)
    if n == 0:
        return 0.0, {}, prior.sigma
    cells = g if llms is None else np.array([f"{a}|{b}" for a, b in zip(g, np.asarray(list(llms), dtype=object)[ok])])
    groups = sorted(set(cells.tolist()))
    rel = r / j  # residuals in relative (log value) units
    ssw = sum(float(((rel[cells == c] - rel[cells == c].mean()) ** 2).sum()) for c in groups)
    sigma2 = (NU0 * prior.sigma ** 2 + ssw) / (NU0 + n - len(groups))
    cols = [np.ones(n)] + [(g == nm).astype(float) for nm in names]
    tau = [prior.tau_stack] + [prior.tau_gpu] * k
    if llms is not None:
        m = np.asarray(list(llms), dtype=object)[ok]
        for nm in sorted(set(m.tolist())):
            cols.append((m == nm).astype(float))
            tau.append(prior.tau_llm)
    X = np.stack(cols, axis=1)
    w = 1.0 / (sigma2 * j ** 2)  # a run's z-space noise: σ·J (delta method)
    A = X.T @ (X * w[:, None]) + np.diag([1.0 / t ** 2 for t in tau])
    theta = np.linalg.solve(A, X.T @ (w * r))
    return float(theta[0]), {nm: float(theta[1 + i]) for i, nm in enumerate(names)}, math.sqrt(sigma2)


def interval_scales(gpus: Sequence[str], measured: np.ndarray, calibrated: np.ndarray,
                    half_width_80: float | None) -> dict[str, float]:
    """ρ per GPU (see module docstring); 1 when the bundle has no 80 % interval."""
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


@dataclass
class Runs:
    """Measured runs resolved against a bundle: per run its GPU, the uncalibrated model outputs and
    the measurements (NaN where not measured)."""

    triples: list[Any]
    gpus: list[str]
    specs: list["GpuSpec"]
    cols: dict[str, np.ndarray]
    predicted: dict[str, np.ndarray]
    measured: dict[str, np.ndarray]
    idle_measured: np.ndarray


def fit(runs: Runs, factors_80: Mapping[str, float] | None = None) -> Calibration:
    """The calibration of ``runs`` (``factors_80``: target → the bundle's 80 % log half-width)."""
    tdp = runs.cols["gpu_tdp_w"]
    gpus: dict[str, GpuCal] = {}
    idle = default_idle(tdp).astype(float)
    g_arr = np.asarray(runs.gpus, dtype=object)
    for name in sorted(set(runs.gpus)):
        m = g_arr == name
        spec = runs.specs[int(np.flatnonzero(m)[0])]
        meas = runs.idle_measured[m]
        meas = meas[np.isfinite(meas)]
        if meas.size:
            value, measured_idle = float(np.mean(meas)), True
        elif spec.idle_power_w is not None:
            value, measured_idle = float(spec.idle_power_w), False
        else:
            value, measured_idle = float(default_idle(spec.tdp_w)), False
        idle[m] = value
        gpus[name] = GpuCal(int(m.sum()), fingerprint(spec), _round(value), measured_idle)
    targets: dict[str, TargetFit] = {}
    for t in TARGETS:
        y = runs.measured.get(t)
        if y is None or not np.isfinite(y).any():
            continue
        end_lo = itl_floor(runs.cols) if t == ITL else idle
        r = residuals(t, y, runs.predicted[t], end_lo, tdp)
        s, per_gpu, sigma = fit_target(t, runs.gpus, r, [tr[1].name for tr in runs.triples],
                                       jacobian(t, runs.predicted[t], end_lo, tdp))
        theta = np.array([s + per_gpu.get(nm, 0.0) for nm in runs.gpus])
        cal = shift(t, runs.predicted[t], theta, end_lo, tdp)
        if t == POWER:
            cal = np.minimum(cal, tdp)
        ok = np.isfinite(r)
        scales = interval_scales(g_arr[ok].tolist(), y[ok], cal[ok], (factors_80 or {}).get(t))
        targets[t] = TargetFit(int(ok.sum()), _round6(s), {k: _round6(v) for k, v in per_gpu.items()},
                               _round6(sigma), scales)
    return Calibration(runs=len(runs.gpus), gpus=gpus, targets=targets)


def _round6(x: float) -> float:
    return float(f"{x:.6g}")


def half_widths_80(interval_factors: Mapping[str, Any]) -> dict[str, float]:
    """target → half the log width of the bundle's 80 % interval (from ``bundle.interval_factors``)."""
    out = {}
    for t, levels in interval_factors.items():
        for level, lo, hi in levels:
            if abs(level - 0.8) < 1e-9 and lo > 0 and hi > 0:
                out[t] = 0.5 * math.log(hi / lo)
    return out


# ---- the manifest section
def read_section(s: Any, models: set[str]) -> None:
    """Check a manifest ``calibration`` section; ValueError names the first problem."""
    def keys(obj: Any, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(obj, dict):
            raise ValueError(f"{where} must be a JSON object")
        extra = [k for k in obj if k not in allowed]
        missing = [k for k in allowed if k not in obj]
        if extra or missing:
            raise ValueError(f"{where} has {'unknown' if extra else 'no'} key {(extra or missing)[0]!r}")
        return obj

    def num(v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{where} = {v!r:.40} is not a finite number")
        return float(v)

    keys(s, "calibration", SECTION_KEYS)
    if not isinstance(s["method"], str):
        raise ValueError("calibration.method must be a string")
    if not isinstance(s["runs"], int) or isinstance(s["runs"], bool) or s["runs"] < 1:
        raise ValueError("calibration.runs must be a positive run count")
    if not isinstance(s["gpus"], dict) or not s["gpus"]:
        raise ValueError("calibration.gpus must be a non-empty JSON object")
    for name, g in s["gpus"].items():
        where = f"calibration.gpus.{name}"
        g = keys(g, where, GPU_KEYS)
        if not isinstance(g["fingerprint"], dict) or not g["fingerprint"]:
            raise ValueError(f"{where}.fingerprint must be a non-empty JSON object")
        for k, v in g["fingerprint"].items():
            if k not in _GPU_COLUMN_NAMES:
                raise ValueError(f"{where}.fingerprint has unknown column {k!r}")
            if v is not None:
                num(v, f"{where}.fingerprint.{k}")
        if num(g["idle_power_w"], f"{where}.idle_power_w") <= 0 or not isinstance(g["idle_measured"], bool):
            raise ValueError(f"{where} needs idle_power_w > 0 and idle_measured true/false")
    if not isinstance(s["targets"], dict):
        raise ValueError("calibration.targets must be a JSON object")
    for t, f in s["targets"].items():
        where = f"calibration.targets.{t}"
        if t not in models:
            raise ValueError(f"calibration.targets has {t!r}, which is not a model of this bundle")
        keys(f, where, TARGET_KEYS)
        num(f["stack"], f"{where}.stack")
        num(f["sigma"], f"{where}.sigma")
        for part in ("gpu", "interval_scale"):
            if not isinstance(f[part], dict):
                raise ValueError(f"{where}.{part} must be a JSON object")
            for name, v in f[part].items():
                if name not in s["gpus"]:
                    raise ValueError(f"{where}.{part} names {name!r}, which is not in calibration.gpus")
                num(v, f"{where}.{part}.{name}")
    if not isinstance(s["priors"], dict):
        raise ValueError("calibration.priors must be a JSON object")


_GPU_COLUMN_NAMES = frozenset(F.GPU_COLUMN_KEYS)


def of(bundle: "ModelBundle") -> Calibration | None:
    """The bundle's calibration (parsed once), or None."""
    cal = getattr(bundle, "_calibration", False)
    if cal is False:
        section = bundle.schema.calibration
        cal = None if section is None else Calibration.from_section(section)
        bundle._calibration = cal  # type: ignore[attr-defined]
    return cal  # type: ignore[return-value]


def write_calibrated(base: "ModelBundle", cal: Calibration, out_dir: "Path") -> dict[str, Any]:
    """Write ``base`` plus ``cal`` as a complete bundle in ``out_dir``: the same model files (hashes
    checked on reading), the catalog with measured idle powers, a format-2 manifest. Returns it."""
    from .bundle import rewrite_bundle

    doc = base.catalog_document()
    for entry in doc.get("gpus", []):
        g = cal.gpus.get(entry.get("name"))
        if g is not None and g.idle_measured and isinstance(entry.get("spec"), dict):
            entry["spec"]["idle_power_w"] = g.idle_power_w
            entry["spec"]["idle_power_source"] = (f"measured by the user: mean idle_power_w of {g.runs} run(s) "
                                                  "given to wattgpu calibrate")
    catalog_bytes = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")
    return rewrite_bundle(base, out_dir, catalog_bytes, {"calibration": cal.to_section()})


def check_base(base: "ModelBundle") -> None:
    """Refuse to calibrate a bundle that is already calibrated (its runs would count twice)."""
    from .errors import WattGPUError

    if base.schema.calibration is not None:
        raise WattGPUError(f"{base.path}: this bundle is already calibrated; calibrate from the bundle it was "
                           "made from (leave out --models for the packaged one), with all the runs together")


def calibrate(runs: Runs, base: "ModelBundle", out_dir: "str | Path") -> Calibration:
    """Fit ``runs`` (predicted by ``base``) and write the calibrated bundle to ``out_dir``."""
    import os
    from pathlib import Path

    from .bundle import SCHEMA_FILE
    from .errors import ConfigFileError

    check_base(base)
    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise ConfigFileError(str(out), "exists and is not a directory; --out takes a directory to create")
        if base.path is not None and os.path.samefile(out, base.path):
            raise ConfigFileError(str(out), "is the bundle being calibrated; write the calibrated one elsewhere")
        if any(out.iterdir()) and not (out / SCHEMA_FILE).is_file():
            raise ConfigFileError(str(out), "is a non-empty directory that holds no model bundle; pass a new or "
                                            "empty directory (an earlier calibrated bundle is replaced)")
    cal = fit(runs, half_widths_80(base.interval_factors))
    write_calibrated(base, cal, out)
    return cal
