"""Calibration on a user's own runs: a correction in physical terms per measured GPU, fitted and applied.

Power: offset + log-batch slope in the logit of the idle→TDP share; ITL: per-step overhead (e^overhead
× the time above the roofline floor) + bandwidth (a share of the floor); both inside the physical bounds
for any parameters. MAP fit shrunk toward the uncalibrated model (``SHRINK``, chosen by the k-shot
evaluation), an unapplied LLM level, parameters kept by leave-one-run-out. GPUs without runs change only
with ``apply_to_other_gpus``. Formulas and constants: docs/calibration.md. Runtime only (numpy); the
manifest section (bundle format 3) is checked by :func:`read_section`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from . import features as F
from . import ops
from .targets import EXCESS_MIN, ITL, POWER, TARGETS

if TYPE_CHECKING:
    from pathlib import Path

    from .bundle import ModelBundle
    from .specs import GpuSpec

TTFT = "ttft"  # time to first token: an overhead term, checked by leave-one-run-out and reported
PARAMS = {POWER: ("offset", "slope"), ITL: ("overhead", "bandwidth"), TTFT: ("overhead",)}
# prior scales (× SHRINK), bounds, noise: table and origin in docs/calibration.md
TAU = {POWER: {"offset": 0.8, "slope": 0.25}, ITL: {"overhead": 0.5, "bandwidth": 0.3}, TTFT: {"overhead": 0.5}}
# slope ≥ 0: a negative one made more load draw less power (docs/calibration.md)
BOUNDS = {POWER: {"offset": (-5.0, 5.0), "slope": (0.0, 1.0)}, ITL: {"overhead": (-4.0, 4.0), "bandwidth": (-0.6, 3.0)},
          TTFT: {"overhead": (-0.9, 50.0)}}
TAU_LLM = {POWER: 0.5, ITL: 0.25, TTFT: 0.3}  # one LLM's own error around the GPU's (fitted, not applied)
SIGMA0 = {POWER: 0.13, ITL: 0.16, TTFT: 0.3}
NU0 = 3.0  # prior weight (pseudo-runs) of σ₀ and of the bundle's interval width
SHRINK = 0.5  # prior scale multiplier: chosen across GPUs and splits by the k-shot evaluation (kshot.SHRINK_GRID)
U_EPS = 1e-6
BATCH_MARGIN = math.log(2.0)  # the power slope extrapolates at most a factor 2 beyond the runs' batches
Z90 = 1.2815515655446004  # standard normal 0.9 quantile (80 % two-sided)
RHO_RANGE = (0.5, 2.0)
METHOD = ("per measured GPU, MAP fit with normal priors (wattgpu.calibration): power = idle + (TDP - idle)*"
          "sigmoid(logit u + offset + slope*dlog batch); ITL = floor + max(exp(overhead)*excess + bandwidth*floor, "
          f"{EXCESS_MIN}*floor); parameters kept by leave-one-run-out")
TARGET_KEYS = ("runs", "gpu", "other", "sigma", "interval_scale", "loro")
GPU_KEYS = ("runs", "fingerprint", "idle_power_w", "idle_measured", "log_batch_ref", "log_batch_range")
SECTION_KEYS = ("method", "runs", "gpus", "targets", "priors", "apply_to_other_gpus")
LABEL = {ITL: "ITL", POWER: "power", TTFT: "TTFT"}


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
class Loro:
    """Leave-one-run-out median |error| (%) before and after, the parameters kept, a note."""

    before: float | None
    after: float | None
    kept: tuple[str, ...]
    note: str


@dataclass(frozen=True)
class TargetFit:
    """One quantity's correction: parameters per measured GPU, pooled level terms for other GPUs, σ, interval scales, LORO."""

    runs: int
    gpu: dict[str, dict[str, float]]
    other: dict[str, float]
    sigma: float
    interval_scale: dict[str, float]
    loro: dict[str, Loro] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """A complete correction (what the manifest's ``calibration`` section holds)."""

    runs: int
    gpus: dict[str, GpuCal]
    targets: dict[str, TargetFit]
    apply_to_other_gpus: bool = False
    priors: dict[str, Any] = field(default_factory=lambda: {"tau": TAU, "sigma0": SIGMA0, "shrink": SHRINK,
                                                            "nu0": NU0})

    # ---- manifest section
    def to_section(self) -> dict[str, Any]:
        return {"method": METHOD, "runs": self.runs, "apply_to_other_gpus": self.apply_to_other_gpus,
                "gpus": {n: {"runs": g.runs, "fingerprint": g.fingerprint, "idle_power_w": g.idle_power_w,
                             "idle_measured": g.idle_measured, "log_batch_ref": g.log_batch_ref,
                             "log_batch_range": list(g.log_batch_range)} for n, g in sorted(self.gpus.items())},
                "targets": {t: {"runs": f.runs, "gpu": {n: dict(p) for n, p in sorted(f.gpu.items())},
                                "other": dict(f.other), "sigma": f.sigma,
                                "interval_scale": dict(sorted(f.interval_scale.items())),
                                "loro": {n: {"before": v.before, "after": v.after, "kept": list(v.kept), "note": v.note}
                                         for n, v in sorted(f.loro.items())}}
                            for t, f in sorted(self.targets.items())},
                "priors": json.loads(json.dumps(self.priors))}

    @classmethod
    def from_section(cls, s: Mapping[str, Any]) -> "Calibration":
        return cls(runs=int(s["runs"]), apply_to_other_gpus=bool(s["apply_to_other_gpus"]),
                   gpus={n: GpuCal(int(g["runs"]), dict(g["fingerprint"]), float(g["idle_power_w"]),
                                   bool(g["idle_measured"]), float(g["log_batch_ref"]),
                                   (float(g["log_batch_range"][0]), float(g["log_batch_range"][1])))
                         for n, g in s["gpus"].items()},
                   targets={t: TargetFit(int(f["runs"]), {n: {k: float(v) for k, v in p.items()} for n, p in f["gpu"].items()},
                                         {k: float(v) for k, v in f["other"].items()}, float(f["sigma"]),
                                         {k: float(v) for k, v in f["interval_scale"].items()},
                                         {n: Loro(v["before"], v["after"], tuple(v["kept"]), str(v["note"]))
                                          for n, v in f["loro"].items()})
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
        cols = F.gpu_columns(gpu)
        return self._match_scalar(cols)

    def params(self, name: str | None) -> dict[str, dict[str, float]]:
        """target → the parameters applied to GPU ``name`` (None: a GPU without runs)."""
        out = {}
        for t, f in self.targets.items():
            out[t] = dict(f.gpu.get(name, {})) if name is not None else (dict(f.other) if self.apply_to_other_gpus else {})
        return out

    def describe(self, gpu: "GpuSpec") -> dict[str, Any]:
        """The ``calibration`` entry of a prediction on ``gpu``."""
        name = self.gpu_name(gpu)
        params = self.params(name)
        if name is not None:
            words = f"; {name} calibrated: " + "; ".join(
                f"{LABEL.get(t, t)} " + (", ".join(f"{k} {v:+.3g}" for k, v in p.items()) or "unchanged")
                for t, p in sorted(params.items()))
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

    # ---- the correction on model outputs (arrays of a batch, or one row of floats)
    def apply(self, outputs: dict[str, Any], cols: Mapping[str, Any]) -> dict[str, Any]:
        """Calibrated copies of model outputs (target → W or s/token) of rows ``cols`` (a server's at its running batch)."""
        tdp = cols["gpu_tdp_w"]
        out = dict(outputs)
        if isinstance(tdp, np.ndarray):
            names = np.full(tdp.shape, "", dtype=object)
            for name, g in self.gpus.items():
                names = np.where(_match(cols, g.fingerprint), name, names)
            with np.errstate(all="ignore"):
                for t in (POWER, ITL):
                    if t not in out or t not in self.targets:
                        continue
                    res = np.array(out[t], dtype=np.float64, copy=True)
                    for name in sorted(set(names.tolist())):
                        p = self.params(name or None)[t]
                        if not p:
                            continue
                        m = names == name
                        sub = {k: cols[k][m] for k in ("gpu_tdp_w", "idle_power_w", "roofline_itl_s", "eff_batch")}
                        res[m] = self._one(t, res[m], p, sub, name or None)
                    out[t] = res
            return out
        found = self._match_scalar(cols)
        for t in (POWER, ITL):
            if t in out and t in self.targets:
                p = self.params(found)[t]
                if p:
                    out[t] = self._one(t, out[t], p, cols, found)
        return out

    def _one(self, target: str, raw: Any, p: Mapping[str, float], cols: Mapping[str, Any], name: str | None) -> Any:
        if target == ITL:
            return itl_map(raw, p, cols["roofline_itl_s"])
        dlnb: Any = 0.0
        if name is not None and p.get("slope", 0.0) != 0.0:
            g = self.gpus[name]
            lo, hi = g.log_batch_range
            dlnb = ops.clip(log_batch(cols) - g.log_batch_ref, lo - g.log_batch_ref - BATCH_MARGIN,
                            hi - g.log_batch_ref + BATCH_MARGIN)
        return power_map(raw, p, cols["idle_power_w"], cols["gpu_tdp_w"], dlnb)

    def _match_scalar(self, cols: Mapping[str, Any]) -> str | None:
        for name, g in self.gpus.items():
            if all(_same(cols.get(k), v) for k, v in g.fingerprint.items()):
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


def fingerprint(gpu: "GpuSpec") -> dict[str, float | None]:
    """The raw feature columns of ``gpu`` (NaN as None): what the models know of it."""
    cols = F.gpu_columns(gpu)
    return {k: (None if math.isnan(cols[k]) else cols[k]) for k in F.GPU_COLUMN_KEYS}  # spec sheet, not idle power


# ---- the runs
@dataclass
class Runs:
    """Measured runs resolved against a bundle (see wattgpu.measured): columns at each run's running batch,
    raw model outputs there, what the user saw before (``predicted``), measurements, a server's busy share."""

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

    def raw_of(self, target: str) -> np.ndarray:
        return (self.raw or self.predicted)[target]

    def busy_of(self) -> np.ndarray:
        return np.ones(len(self.gpus)) if self.busy is None else self.busy


def model_value(target: str, raw: np.ndarray, p: Mapping[str, float], cols: Mapping[str, np.ndarray],
                dlnb: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """The calibrated prediction of these runs with parameters ``p`` (power: the server mix)."""
    if target == ITL:
        return itl_map(raw, p, cols["roofline_itl_s"])
    idle, tdp = cols["idle_power_w"], cols["gpu_tdp_w"]
    busy_w = np.minimum(power_map(raw, p, idle, tdp, dlnb), tdp)
    return idle + busy * np.maximum(busy_w - idle, 0.0)


def fit_params(target: str, names: Sequence[str], y: np.ndarray, value: Callable[[dict[str, Any]], np.ndarray],
               shrink: float = SHRINK, iters: int = 25, clusters: Sequence[str] | None = None
               ) -> tuple[dict[str, float], float]:
    """MAP parameters ``names`` (the others 0) of runs ``y`` whose calibrated prediction is ``value(params)``,
    and σ; ``clusters`` (each run's LLM): an unapplied LLM level on the first parameter (docs/calibration.md)."""
    n = len(y)
    if n == 0 or not names:
        return {}, SIGMA0[target]
    k = len(names)
    cl = np.zeros(n, dtype=np.intp)
    n_cl = 0
    if clusters is not None:
        uniq = sorted(set(clusters))
        cl = np.array([uniq.index(c) for c in clusters], dtype=np.intp)
        n_cl = len(uniq)
    tau = np.array([TAU[target][p] * shrink for p in names] + [TAU_LLM[target]] * n_cl)
    lo = np.array([BOUNDS[target][p][0] for p in names] + [-np.inf] * n_cl)
    hi = np.array([BOUNDS[target][p][1] for p in names] + [np.inf] * n_cl)
    ly = np.log(y)
    sigma = SIGMA0[target]
    theta = np.zeros(k + n_cl)

    def resid(th: np.ndarray) -> np.ndarray:
        p: dict[str, Any] = dict(zip(names, th[:k].tolist()))
        if n_cl:
            p[names[0]] = th[0] + th[k:][cl]
        with np.errstate(all="ignore"):
            return ly - np.log(value(p))

    for _ in range(2):  # σ from the prior, then updated with the fit's own scatter
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
        sigma = math.sqrt((NU0 * SIGMA0[target] ** 2 + rss) / (NU0 + n))
    return {p: _round6(v) for p, v in zip(names, theta[:k].tolist())}, _round6(sigma)


def _mdape(y: np.ndarray, p: np.ndarray) -> float | None:
    ok = np.isfinite(y) & np.isfinite(p)
    return None if not ok.any() else _round(float(np.median(np.abs(p[ok] / y[ok] - 1.0))) * 100)


def _at_rows(value: Callable[[dict[str, float], np.ndarray], np.ndarray], rows: np.ndarray,
             p: dict[str, float]) -> np.ndarray:
    return value(p, rows)


def loro_select(target: str, y: np.ndarray, before: np.ndarray,
                value: Callable[[dict[str, float], np.ndarray], np.ndarray], shrink: float = SHRINK,
                clusters: Sequence[str] | None = None) -> tuple[tuple[str, ...], Loro]:
    """The parameter set kept for one GPU's runs by leave-one-run-out (``value(params, rows)``)."""
    n = len(y)
    full = PARAMS[target]
    base = _mdape(y, before)
    if n == 1:
        return full[:1], Loro(base, None, full[:1], "1 run: no leave-one-run-out check possible; the level term "
                                                    "only, shrunk toward the model")
    candidates = list(dict.fromkeys([full, full[:1], ()] if n >= 3 else [full[:1], ()]))
    scores: list[tuple[float, int, tuple[str, ...]]] = []
    for cand in candidates:
        held = np.empty(n)
        for i in range(n):
            rest = np.flatnonzero(np.arange(n) != i)
            p, _ = fit_params(target, cand, y[rest], partial(_at_rows, value, rest), shrink,
                              clusters=None if clusters is None else [clusters[int(j)] for j in rest])
            held[i] = value(p, np.array([i]))[0]
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


def fit_ttft(runs: Runs, shrink: float = SHRINK) -> dict[str, tuple[dict[str, float], Loro]]:
    """Per measured GPU: the TTFT overhead term (× the GPU's median predicted TTFT) and its LORO check; reported only."""
    y, pred = runs.measured.get(TTFT), runs.predicted.get(TTFT)
    out: dict[str, tuple[dict[str, float], Loro]] = {}
    if y is None or pred is None:
        return out
    g_arr = np.asarray(runs.gpus, dtype=object)
    llm_of = [str(t[1].name) for t in runs.triples]
    for name in sorted(set(runs.gpus)):
        idx = np.flatnonzero((g_arr == name) & np.isfinite(y) & np.isfinite(pred) & (y > 0) & (pred > 0))
        if not idx.size:
            continue
        scale = float(np.median(pred[idx]))

        def ttft_value(p: dict[str, float], rows: np.ndarray, idx: np.ndarray = idx, scale: float = scale) -> np.ndarray:
            base = pred[idx[rows]]
            return np.maximum(base + p.get("overhead", 0.0) * scale, 0.5 * base)

        llms = [llm_of[i] for i in idx]
        kept, loro = loro_select(TTFT, y[idx], pred[idx], ttft_value, shrink, llms)
        rows = np.arange(idx.size)
        p, _ = fit_params(TTFT, kept, y[idx], partial(_at_rows, ttft_value, rows), shrink, clusters=llms)
        out[name] = ({"overhead_s": _round(p.get("overhead", 0.0) * scale)}, loro)
    return out


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
        shrink: float = SHRINK, check: bool = True) -> Calibration:
    """The calibration of ``runs`` (``factors_80``: target → the bundle's 80 % log half-width; ``check``: LORO)."""
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
    cal0 = Calibration(runs=len(runs.gpus), gpus=gpus, targets={}, apply_to_other_gpus=apply_to_other_gpus)
    busy = runs.busy_of()
    llm_of = [str(tr[1].name) for tr in runs.triples]
    targets: dict[str, TargetFit] = {}
    for t in TARGETS:
        y = runs.measured.get(t)
        if y is None or not np.isfinite(y).any():
            continue
        raw = runs.raw_of(t)
        ok_all = np.isfinite(y) & np.isfinite(raw) & (y > 0)
        per_gpu: dict[str, dict[str, float]] = {}
        loro: dict[str, Loro] = {}
        sigmas = []
        cal = np.full(len(y), np.nan)
        for name in sorted(gpus):
            idx = np.flatnonzero((g_arr == name) & ok_all)
            if not idx.size:
                continue
            g = gpus[name]

            def value(p: dict[str, float], rows: np.ndarray, idx: np.ndarray = idx, g: GpuCal = g) -> np.ndarray:
                sel = idx[rows]
                c = {k: runs.cols[k][sel] for k in ("gpu_tdp_w", "idle_power_w", "roofline_itl_s", "eff_batch")}
                dlnb = np.clip(lnb[sel] - g.log_batch_ref, g.log_batch_range[0] - g.log_batch_ref - BATCH_MARGIN,
                               g.log_batch_range[1] - g.log_batch_ref + BATCH_MARGIN)
                return model_value(t, raw[sel], p, c, dlnb, busy[sel])

            if check:
                kept, loro[name] = loro_select(t, y[idx], runs.predicted[t][idx], value, shrink,
                                               [llm_of[i] for i in idx])
            else:
                kept = PARAMS[t]
            all_rows = np.arange(idx.size)
            p, sigma = fit_params(t, kept, y[idx], partial(_at_rows, value, all_rows), shrink,
                                  clusters=[llm_of[i] for i in idx])
            per_gpu[name] = p
            sigmas.append(sigma)
            cal[idx] = value(p, all_rows)
        other: dict[str, float] = {}
        if apply_to_other_gpus:  # the level terms pooled over every measured run (no batch slope)
            idx = np.flatnonzero(ok_all)
            c = {k: runs.cols[k][idx] for k in ("gpu_tdp_w", "idle_power_w", "roofline_itl_s", "eff_batch")}
            level = PARAMS[t][:1] if t == POWER else PARAMS[t]
            other, _ = fit_params(t, level, y[idx], lambda q: model_value(t, raw[idx], q, c, np.zeros(idx.size),
                                                                          busy[idx]), shrink,
                                  clusters=[llm_of[i] for i in idx])
        ok = np.isfinite(cal)
        scales = interval_scales(g_arr[ok].tolist(), y[ok], cal[ok], (factors_80 or {}).get(t))
        targets[t] = TargetFit(int(ok.sum()), per_gpu, other, _round6(max(sigmas) if sigmas else SIGMA0[t]), scales, loro)
    return Calibration(runs=cal0.runs, gpus=gpus, targets=targets, apply_to_other_gpus=apply_to_other_gpus)


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

    def params(obj: Any, target: str, where: str) -> None:
        if not isinstance(obj, dict):
            raise ValueError(f"{where} must be a JSON object")
        for k, v in obj.items():
            if k not in PARAMS.get(target, ()):
                raise ValueError(f"{where} has unknown parameter {k!r}")
            lo, hi = BOUNDS[target][k]
            if not lo <= num(v, f"{where}.{k}") <= hi:
                raise ValueError(f"{where}.{k} = {v!r} is outside [{lo}, {hi}]")

    keys(s, "calibration", SECTION_KEYS)
    if not isinstance(s["method"], str):
        raise ValueError("calibration.method must be a string")
    if not isinstance(s["apply_to_other_gpus"], bool):
        raise ValueError("calibration.apply_to_other_gpus must be true or false")
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
        num(g["log_batch_ref"], f"{where}.log_batch_ref")
        r = g["log_batch_range"]
        if not isinstance(r, list) or len(r) != 2 or num(r[0], f"{where}.log_batch_range") > num(r[1], f"{where}.log_batch_range"):
            raise ValueError(f"{where}.log_batch_range must be [low, high]")
    if not isinstance(s["targets"], dict):
        raise ValueError("calibration.targets must be a JSON object")
    for t, f in s["targets"].items():
        where = f"calibration.targets.{t}"
        if t not in models:
            raise ValueError(f"calibration.targets has {t!r}, which is not a model of this bundle")
        keys(f, where, TARGET_KEYS)
        num(f["sigma"], f"{where}.sigma")
        params(f["other"], t, f"{where}.other")
        for part in ("gpu", "interval_scale", "loro"):
            if not isinstance(f[part], dict):
                raise ValueError(f"{where}.{part} must be a JSON object")
            for name, v in f[part].items():
                if name not in s["gpus"]:
                    raise ValueError(f"{where}.{part} names {name!r}, which is not in calibration.gpus")
                if part == "gpu":
                    params(v, t, f"{where}.gpu.{name}")
                elif part == "interval_scale":
                    num(v, f"{where}.{part}.{name}")
                else:
                    keys(v, f"{where}.loro.{name}", ("before", "after", "kept", "note"))
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
    """Write ``base`` + ``cal`` as a bundle in ``out_dir`` (same model files, catalog with measured idle powers)."""
    from .bundle import rewrite_bundle

    doc = base.catalog_document()
    for entry in doc.get("gpus", []):
        g = cal.gpus.get(entry.get("name"))
        if g is not None and g.idle_measured and isinstance(entry.get("spec"), dict):
            entry["spec"]["idle_power_w"] = g.idle_power_w
            entry["spec"]["idle_power_source"] = ("measured by the user: idle_power_w or low-load server runs "
                                                  "given to wattgpu calibrate")
    catalog_bytes = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8")
    return rewrite_bundle(base, out_dir, catalog_bytes, {"calibration": cal.to_section()})


def check_base(base: "ModelBundle") -> None:
    """Refuse to calibrate a bundle that is already calibrated (its runs would count twice)."""
    from .errors import WattGPUError

    if base.schema.calibration is not None:
        raise WattGPUError(f"{base.path}: this bundle is already calibrated; calibrate from the bundle it was "
                           "made from (leave out --models for the packaged one), with all the runs together")


def check_out_dir(base: "ModelBundle", out_dir: "str | Path") -> None:
    """Refuse an --out that is a file, the base bundle, or a non-empty non-bundle directory."""
    import os
    from pathlib import Path

    from .bundle import SCHEMA_FILE
    from .errors import ConfigFileError

    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise ConfigFileError(str(out), "exists and is not a directory; --out takes a directory to create")
        if base.path is not None and os.path.samefile(out, base.path):
            raise ConfigFileError(str(out), "is the bundle being calibrated; write the calibrated one elsewhere")
        if any(out.iterdir()) and not (out / SCHEMA_FILE).is_file():
            raise ConfigFileError(str(out), "is a non-empty directory that holds no model bundle; pass a new or "
                                            "empty directory (an earlier calibrated bundle is replaced)")


def calibrate(runs: Runs, base: "ModelBundle", out_dir: "str | Path", apply_to_other_gpus: bool = False) -> Calibration:
    """Fit ``runs`` (predicted by ``base``) and write the calibrated bundle to ``out_dir``."""
    from pathlib import Path

    check_base(base)
    check_out_dir(base, out_dir)
    cal = fit(runs, half_widths_80(base.interval_factors), apply_to_other_gpus)
    write_calibrated(base, cal, Path(out_dir))
    return cal
