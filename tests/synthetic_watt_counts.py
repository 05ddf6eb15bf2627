"""SYNTHETIC Watt Counts file for tests — made-up numbers in the published file layout.

# SYNTHETIC TEST FIXTURE — not measurements

The real ``watt_counts_subset.csv`` (the WattGPU paper's 4,798 measured runs) is not shipped. This
module writes a small stand-in with the same header, column order, unnamed integer index column and
Python-style list strings, so the loader can be tested on the exact format. Model ids and
``gpu_type`` strings are real keys of ``data/paper/*.csv``; every number is generated from a simple
formula (power ≈ load factor × TDP, per-token time ≈ 2·params / memory bandwidth) plus noise and
means nothing. Never write this file into ``data/``.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
PAPER_DIR = REPO / "data" / "paper"

# Header of the published file, copied from data/paper/README.md (kept separate from the loader's
# own constant on purpose, so a test can compare the two).
HEADER: tuple[str, ...] = (
    "",
    "model",
    "gpu_type",
    "lambda_qps",
    "generation_tokens_total",
    "measurement_duration",
    "gpu_energy",
    "gpu_0_power_draw_watts_mean",
    "gpu_0_power_draw_watts_min",
    "gpu_0_power_draw_watts_max",
    "gpu_0_power_draw_watts_std",
    "time_to_first_token_seconds_events",
    "e2e_request_latency_seconds_events",
    "request_generation_tokens",
    "request_prompt_tokens",
)
LIST_FIELDS = HEADER[-4:]
MOE_MODEL = "allenai/OLMoE-1B-7B-0924"  # total 7 B, active 1 B in model_features.csv
LOAD_FACTOR = {"offline": 0.9, 0.017: 0.2, 0.33: 0.6}


def _fmt_list(values: Sequence[float] | None) -> str:
    if values is None:
        return ""
    parts = [str(int(v)) if isinstance(v, (int, np.integer)) else repr(float(v)) for v in values]
    return "[" + ", ".join(parts) + "]"


def _fmt_num(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(float(v)) if not isinstance(v, (int, np.integer)) else str(int(v))


def write_watt_counts_rows(path: str | Path, rows: Iterable[Mapping[str, object]], index: Sequence[int] | None = None) -> Path:
    """Write ``rows`` (dicts keyed by the published column names) in the published layout.

    List fields take sequences of numbers (or a ready string, written as is); ``None`` writes an
    empty cell. ``lambda_qps`` None → empty (offline).
    """
    path = Path(path)
    if PAPER_DIR.resolve() in path.resolve().parents or (REPO / "data").resolve() in path.resolve().parents:
        raise ValueError(f"refusing to write a synthetic fixture into data/: {path}")
    rows = list(rows)
    idx = list(index) if index is not None else list(range(len(rows)))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER)
        for i, row in zip(idx, rows):
            cells = [str(i)]
            for col in HEADER[1:]:
                v = row.get(col)
                if col in ("model", "gpu_type"):
                    cells.append(str(v))
                elif col in LIST_FIELDS:
                    cells.append(v if isinstance(v, str) else _fmt_list(v))
                else:
                    cells.append(_fmt_num(v))
            w.writerow(cells)
    return path


def _server_row(rng, model, gpu, qps, tdp, s_per_tok, zero=False):
    # SYNTHETIC: made-up request stream.
    duration = 300.0 + float(rng.normal(0, 2))
    if zero:
        ttft, e2e, gen, prompt = [], [], [], []
    else:
        n = int(min(25, max(3, rng.poisson(qps * 300))))
        prompt = [int(x) for x in rng.integers(8, 40, n)]
        gen = [int(x) for x in rng.integers(2, 256, n)]
        gen[0] = 1  # one single-token request: excluded from the server ITL
        ttft = [round(0.02 + p * 1e-4 + abs(float(rng.normal(0, 0.005))), 6) for p in prompt]
        e2e = [round(t + (g - 1) * s_per_tok * (1 + 0.05 * float(rng.normal())), 6) for t, g in zip(ttft, gen)]
    power = tdp * LOAD_FACTOR[qps] * (1 + 0.03 * float(rng.normal()))
    return {
        "model": model, "gpu_type": gpu, "lambda_qps": qps,
        "generation_tokens_total": int(sum(gen)),
        "measurement_duration": round(duration, 4),
        "gpu_energy": round(power * duration, 3),
        "gpu_0_power_draw_watts_mean": round(power, 3),
        "gpu_0_power_draw_watts_min": round(power * 0.5, 3),
        "gpu_0_power_draw_watts_max": round(min(power * 1.6, tdp), 3),
        "gpu_0_power_draw_watts_std": round(power * 0.2, 3),
        "time_to_first_token_seconds_events": ttft,
        "e2e_request_latency_seconds_events": e2e,
        "request_generation_tokens": gen,
        "request_prompt_tokens": prompt,
    }


def _offline_row(rng, model, gpu, tdp, s_per_tok, zero=False):
    # SYNTHETIC: 1000 requests batched; the whole run runs at ~1/40 of the single-sequence time.
    gen_total = 0 if zero else int(1000 * rng.integers(60, 200))
    duration = 30.0 + gen_total * s_per_tok / 40 * (1 + 0.05 * float(rng.normal()))
    power = tdp * LOAD_FACTOR["offline"] * (1 + 0.02 * float(rng.normal()))
    return {
        "model": model, "gpu_type": gpu, "lambda_qps": None,
        "generation_tokens_total": gen_total,
        "measurement_duration": round(duration, 4),
        "gpu_energy": round(power * duration, 3),
        "gpu_0_power_draw_watts_mean": round(power, 3),
        "gpu_0_power_draw_watts_min": round(power * 0.3, 3),
        "gpu_0_power_draw_watts_max": round(min(power * 1.2, tdp), 3),
        "gpu_0_power_draw_watts_std": round(power * 0.1, 3),
        "time_to_first_token_seconds_events": [],
        "e2e_request_latency_seconds_events": [round(duration, 4)],
        "request_generation_tokens": [],
        "request_prompt_tokens": [],
    }


def make_synthetic_watt_counts(
    path: str | Path,
    n_models: int = 4,
    gpus: Sequence[str] = ("NVIDIA A30", "Tesla T4", "NVIDIA H200"),
    seed: int = 0,
) -> Path:
    """Write a small SYNTHETIC Watt Counts file to ``path`` and return the path.

    Rows: for each of the first ``n_models`` dense models of model_features.csv and each GPU, one
    offline run, one server run at 0.017 qps and one at 0.33 qps; plus one offline run of an MoE
    model (to be dropped) and two runs with zero generated tokens (to be dropped: one offline, one
    server_low). The index is increasing with gaps, like a subset of a larger table.
    """
    rng = np.random.default_rng(seed)
    gpu_t = pd.read_csv(PAPER_DIR / "gpu_features.csv", sep=";").set_index("gpu_type")
    mod_t = pd.read_csv(PAPER_DIR / "model_features.csv", sep=";")
    dense = mod_t.loc[np.isclose(mod_t["total_b_params"], mod_t["active_b_params"])]
    models = list(dense["model_name"].iloc[:n_models])
    params = dict(zip(mod_t["model_name"], mod_t["total_b_params"]))

    def spec(gpu):
        return float(gpu_t.at[gpu, "thermal_design_power_w"]), float(gpu_t.at[gpu, "memory_bandwidth_gb_s"])

    rows = []
    for model in models:
        for gpu in gpus:
            tdp, bw = spec(gpu)
            s_per_tok = 2 * params[model] / bw * (1 + 0.1 * float(rng.normal()))
            rows.append(_offline_row(rng, model, gpu, tdp, s_per_tok))
            rows.append(_server_row(rng, model, gpu, 0.017, tdp, s_per_tok))
            rows.append(_server_row(rng, model, gpu, 0.33, tdp, s_per_tok))
    tdp, bw = spec(gpus[0])
    rows.append(_offline_row(rng, MOE_MODEL, gpus[0], tdp, 2 * params[MOE_MODEL] / bw))
    rows.append(_offline_row(rng, models[0], gpus[0], tdp, 0.01, zero=True))
    rows.append(_server_row(rng, models[0], gpus[0], 0.017, tdp, 0.01, zero=True))
    index = np.cumsum(rng.integers(1, 4, len(rows))).tolist()
    return write_watt_counts_rows(path, rows, index)
