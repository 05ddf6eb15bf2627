"""The ``calibration`` section of a bundle manifest: its keys, parameters, bounds and strict reader.

Its own module so that :mod:`wattgpu.bundle` checks the section and :mod:`wattgpu.calibration` (which
writes bundles) fits it without importing each other in a loop. Imports only the feature column names.
"""
from __future__ import annotations

from typing import Any, Mapping

from .features import GPU_COLUMN_KEYS, RAW_KEYS
from .targets import ITL, POWER
from .rules import is_finite_number

TTFT = "ttft"  # time to first token: not a model output, corrected after the serving math (calibration.apply_ttft)
PARAMS = {POWER: ("offset", "slope"), ITL: ("overhead", "bandwidth"), TTFT: ("scale", "slope")}
# the first parameter of each quantity is its level: the one an LLM's own share moves
BOUNDS = {POWER: {"offset": (-5.0, 5.0), "slope": (0.0, 1.0)}, ITL: {"overhead": (-4.0, 4.0), "bandwidth": (-0.6, 3.0)},
          TTFT: {"scale": (-4.0, 4.0), "slope": (-1.0, 1.0)}}
# format 3 (issue 33): TTFT was reported, never stored; an LLM's own level was fitted and not applied
V3_PARAMS = {POWER: PARAMS[POWER], ITL: PARAMS[ITL]}
TARGET_KEYS = ("runs", "gpu", "llm", "other", "sigma", "interval_scale", "loro")
GPU_KEYS = ("runs", "fingerprint", "idle_power_w", "idle_measured", "log_batch_ref", "log_batch_range")
LLM_KEYS = ("runs", "fingerprint")
SECTION_KEYS = ("method", "runs", "gpus", "llms", "targets", "priors", "apply_to_other_gpus")
V3_TARGET_KEYS = tuple(k for k in TARGET_KEYS if k != "llm")
V3_SECTION_KEYS = tuple(k for k in SECTION_KEYS if k != "llms")
_GPU_COLUMN_NAMES = frozenset(GPU_COLUMN_KEYS)
_LLM_COLUMN_NAMES = frozenset(k for k in RAW_KEYS if k.startswith("llm_"))


def read_section(s: Any, models: set[str], version: int = 4) -> None:
    """Check a manifest ``calibration`` section of bundle format ``version`` (3 or 4); ValueError names …"""
    v3 = version <= 3

    def keys(obj: Any, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(obj, dict):
            raise ValueError(f"{where} must be a JSON object")
        extra = [k for k in obj if k not in allowed]
        missing = [k for k in allowed if k not in obj]
        if extra or missing:
            raise ValueError(f"{where} has {'unknown' if extra else 'no'} key {(extra or missing)[0]!r}")
        return obj

    def num(v: Any, where: str) -> float:
        if not is_finite_number(v):
            raise ValueError(f"{where} = {v!r:.40} is not a finite number")
        return float(v)

    def params(obj: Any, target: str, where: str, allowed: tuple[str, ...]) -> None:
        if not isinstance(obj, dict):
            raise ValueError(f"{where} must be a JSON object")
        for k, v in obj.items():
            if k not in allowed:
                raise ValueError(f"{where} has unknown parameter {k!r}")
            lo, hi = BOUNDS[target][k]
            if not lo <= num(v, f"{where}.{k}") <= hi:
                raise ValueError(f"{where}.{k} = {v!r} is outside [{lo}, {hi}]")

    def fingerprint(fp: Any, where: str, names: frozenset[str]) -> None:
        if not isinstance(fp, dict) or not fp:
            raise ValueError(f"{where}.fingerprint must be a non-empty JSON object")
        for k, v in fp.items():
            if k not in names:
                raise ValueError(f"{where}.fingerprint has unknown column {k!r}")
            if v is not None:
                num(v, f"{where}.fingerprint.{k}")

    def count(v: Any, where: str) -> None:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{where} must be a positive run count")

    keys(s, "calibration", V3_SECTION_KEYS if v3 else SECTION_KEYS)
    if not isinstance(s["method"], str):
        raise ValueError("calibration.method must be a string")
    if not isinstance(s["apply_to_other_gpus"], bool):
        raise ValueError("calibration.apply_to_other_gpus must be true or false")
    count(s["runs"], "calibration.runs")
    if not isinstance(s["gpus"], dict) or not s["gpus"]:
        raise ValueError("calibration.gpus must be a non-empty JSON object")
    for name, g in s["gpus"].items():
        where = f"calibration.gpus.{name}"
        g = keys(g, where, GPU_KEYS)
        fingerprint(g["fingerprint"], where, _GPU_COLUMN_NAMES)
        if num(g["idle_power_w"], f"{where}.idle_power_w") <= 0 or not isinstance(g["idle_measured"], bool):
            raise ValueError(f"{where} needs idle_power_w > 0 and idle_measured true/false")
        num(g["log_batch_ref"], f"{where}.log_batch_ref")
        r = g["log_batch_range"]
        if not isinstance(r, list) or len(r) != 2 or num(r[0], f"{where}.log_batch_range") > num(r[1], f"{where}.log_batch_range"):
            raise ValueError(f"{where}.log_batch_range must be [low, high]")
    llms: Mapping[str, Any] = {}
    if not v3:
        if not isinstance(s["llms"], dict):
            raise ValueError("calibration.llms must be a JSON object")
        llms = s["llms"]
        for name, m in llms.items():
            where = f"calibration.llms.{name}"
            m = keys(m, where, LLM_KEYS)
            count(m["runs"], f"{where}.runs")
            fingerprint(m["fingerprint"], where, _LLM_COLUMN_NAMES)
    if not isinstance(s["targets"], dict):
        raise ValueError("calibration.targets must be a JSON object")
    allowed_params = V3_PARAMS if v3 else PARAMS
    for t, f in s["targets"].items():
        where = f"calibration.targets.{t}"
        if t not in models and (v3 or t != TTFT):
            raise ValueError(f"calibration.targets has {t!r}, which is not a model of this bundle"
                             + ("" if v3 else f" nor {TTFT!r}"))
        keys(f, where, V3_TARGET_KEYS if v3 else TARGET_KEYS)
        num(f["sigma"], f"{where}.sigma")
        params(f["other"], t, f"{where}.other", allowed_params[t])
        for part in ("gpu", "interval_scale", "loro") + (() if v3 else ("llm",)):
            if not isinstance(f[part], dict):
                raise ValueError(f"{where}.{part} must be a JSON object")
            for name, v in f[part].items():
                if name not in s["gpus"]:
                    raise ValueError(f"{where}.{part} names {name!r}, which is not in calibration.gpus")
                if part == "gpu":
                    params(v, t, f"{where}.gpu.{name}", allowed_params[t])
                elif part == "interval_scale":
                    num(v, f"{where}.{part}.{name}")
                elif part == "loro":
                    keys(v, f"{where}.loro.{name}", ("before", "after", "kept", "note"))
                else:  # llm: gpu → llm → the level parameter (the LLM's own share on that GPU)
                    if not isinstance(v, dict):
                        raise ValueError(f"{where}.llm.{name} must be a JSON object")
                    for llm, p in v.items():
                        if llm not in llms:
                            raise ValueError(f"{where}.llm.{name} names {llm!r}, which is not in calibration.llms")
                        params(p, t, f"{where}.llm.{name}.{llm}", allowed_params[t][:1])
    if not isinstance(s["priors"], dict):
        raise ValueError("calibration.priors must be a JSON object")
