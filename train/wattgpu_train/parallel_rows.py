"""Score the expert- and data-parallel rows of ``data/mlenergy_v3`` (202 rows the training data excludes: they are
not one tensor-parallel group) with the layout roofline of :mod:`wattgpu.layout`, its baselines beside it.

Each row maps onto a :class:`wattgpu.layout.Layout` of ``num_gpus`` GPUs on one node:

- ``expert_parallel = N``, ``data_parallel = 1`` (``tensor_parallel`` reads 1): ``Layout(tp=N, ep=N)``: vLLM's
  ``--enable-expert-parallel`` over a TP group of N (attention split by TP, experts by EP). ASSUMPTION: the
  source's ``tensor_parallel = 1`` on these rows counts the attention-DP/TP split differently; N GPUs with DP 1
  can only be one group of N.
- ``data_parallel = N = expert_parallel``: ``Layout(tp=1, dp=N, ep=N)`` (attention data parallelism).

The running batch is the measured ``avg_batch_size`` (the source: the steady-state mean running batch), the
output tokens the measured mean; the prompt length is not in the source: ``INPUT_TOKENS_ASSUMED`` (ASSUMPTION; it
moves only the KV-cache read). Nothing in the layout model is fitted, so every row is held out of any fit; the
tables split the rows by GPU (each GPU's rows scored apart, as LOGO would) and by layout kind.

Baselines: power = TDP, and the load-scaled TDP (0.9 × TDP offline, :data:`wattgpu.physics.LS_TDP_RHO`); ITL = the
paper's bandwidth latency of the active weights over the N GPUs (2 bytes × active params / (N × bandwidth)).
Also the learned models as served today, asked for a TP group of N (what ``predict --tp N`` answers for these
layouts; these rows were never in their training data).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wattgpu import layout as L
from wattgpu import physics
from wattgpu.errors import WattGPUError

from .metrics import mdape, median_signed_error_pct

INPUT_TOKENS_ASSUMED = 1024
GPU_NAMES = {"H100": "NVIDIA H100 SXM5 80GB", "B200": "NVIDIA B200 (HGX/DGX B200)"}  # data/gpu_map.csv


@dataclass(frozen=True)
class Scored:
    """One row: its kind (``ep`` or ``dp+ep``), GPU, measured and predicted power per GPU (W) and ITL (s)."""

    kind: str
    gpu: str
    power_w: float
    itl_s: float
    layout_power_w: float
    layout_itl_s: float
    tdp_w: float
    ls_tdp_w: float
    bandwidth_itl_s: float
    learned_power_w: float
    learned_itl_s: float


def parallel_rows(path: Path) -> list[dict[str, str]]:
    """The rows of ``path`` (mlenergy_v3 rows.csv) with expert or data parallelism."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [r for r in rows if int(r["expert_parallel"] or 1) > 1 or int(r["data_parallel"] or 1) > 1]


def layout_of(row: dict[str, str]) -> tuple[str, L.Layout]:
    """The row's kind and layout (see the module docstring)."""
    n, dp, ep = int(row["num_gpus"]), int(row["data_parallel"] or 1), int(row["expert_parallel"] or 1)
    if dp > 1:
        return "dp+ep", L.Layout(tp=n // dp, dp=dp, ep=ep)
    return "ep", L.Layout(tp=n, ep=ep)


def score_rows(rows: list[dict[str, str]], predictor: Any = None) -> tuple[list[Scored], dict[str, int]]:
    """Every row the catalog can place, scored; and the count of rows skipped by reason."""
    from wattgpu import Predictor, Workload

    pred = predictor or Predictor()
    cat = pred.catalog
    out: list[Scored] = []
    skipped: dict[str, int] = {}
    for r in rows:
        try:
            gpu, llm = cat.gpu(GPU_NAMES[r["gpu"]]), cat.llm(r["llm"])
        except (KeyError, WattGPUError):
            skipped["llm or GPU not in the catalog"] = skipped.get("llm or GPU not in the catalog", 0) + 1
            continue
        kind, lay = layout_of(r)
        if L.layout_error(gpu, llm, lay) is not None:
            skipped["layout invalid for the model"] = skipped.get("layout invalid for the model", 0) + 1
            continue
        batch = max(round(float(r["avg_batch_size"])), 1)
        out_tokens = max(round(float(r["output_len_tokens"])), 1)
        est = L.estimate(gpu, llm, lay, batch, INPUT_TOKENS_ASSUMED, out_tokens)
        n = lay.gpus
        bw_itl = float(physics.bandwidth_latency_s(llm.active_params_b * llm.weight_bytes_per_param / 2.0,
                                                   gpu.memory_bandwidth_gb_s * n))
        try:
            wl = Workload(kind="offline", max_batch=int(r["max_num_seqs"]), concurrency=float(r["avg_batch_size"]),
                          input_tokens=INPUT_TOKENS_ASSUMED, output_tokens=out_tokens, tp=n, itl_stat="median")
            p = pred.predict(gpu, llm, wl)
            learned_p, learned_i = float(p.power_w), float(p.itl_s)
        except WattGPUError:
            learned_p = learned_i = float("nan")
        out.append(Scored(kind, gpu.name, float(r["mean_power_w"]), float(r["itl_s"]), est.power_per_gpu_w,
                          est.itl_s, float(gpu.tdp_w), physics.ls_tdp_power_w(float(gpu.tdp_w), "offline"), bw_itl,
                          learned_p, learned_i))
    return out, skipped


def _cell(y: np.ndarray, p: np.ndarray) -> str:
    ok = np.isfinite(p)
    if not ok.any():
        return "–"
    return f"{mdape(y[ok], p[ok]):.1f} % ({median_signed_error_pct(y[ok], p[ok]):+.0f})"


def report(scored: list[Scored], skipped: dict[str, int]) -> str:
    """The markdown tables of reports/parallel.md: MdAPE (median bias in brackets) per kind and per GPU."""
    lines = ["| rows | kind | GPU | n | power: layout | power: learned (as TP) | power: TDP | power: LS-TDP | "
             "ITL: layout | ITL: learned (as TP) | ITL: bandwidth latency |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = [("all", "all")] + [(k, "all") for k in ("ep", "dp+ep")] + [
        (k, g) for k in ("ep", "dp+ep") for g in sorted({s.gpu for s in scored})]
    for kind, gpu in groups:
        sel = [s for s in scored if (kind == "all" or s.kind == kind) and (gpu == "all" or s.gpu == gpu)]
        if not sel:
            continue
        a = {f: np.array([getattr(s, f) for s in sel], dtype=np.float64) for f in Scored.__dataclass_fields__
             if f not in ("kind", "gpu")}
        lines.append(f"| {'all' if kind == 'all' and gpu == 'all' else ''} | {kind} | {gpu} | {len(sel)} | "
                     f"{_cell(a['power_w'], a['layout_power_w'])} | {_cell(a['power_w'], a['learned_power_w'])} | "
                     f"{_cell(a['power_w'], a['tdp_w'])} | {_cell(a['power_w'], a['ls_tdp_w'])} | "
                     f"{_cell(a['itl_s'], a['layout_itl_s'])} | {_cell(a['itl_s'], a['learned_itl_s'])} | "
                     f"{_cell(a['itl_s'], a['bandwidth_itl_s'])} |")
    if skipped:
        lines.append("")
        lines.append("Skipped: " + "; ".join(f"{v} rows: {k}" for k, v in sorted(skipped.items())) + ".")
    return "\n".join(lines)


def main() -> None:
    """Print the tables (``python -m wattgpu_train.parallel_rows``)."""
    root = Path(__file__).resolve().parents[2]
    scored, skipped = score_rows(parallel_rows(root / "data" / "mlenergy_v3" / "rows.csv"))
    print(report(scored, skipped))


if __name__ == "__main__":
    main()
