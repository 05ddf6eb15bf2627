"""The measured expert-, data- and pipeline-parallel rows (issue 41), each mapped onto a layout question and
scored with `predict`'s layout path and its baselines: the one builder ``tools/score_layouts.py`` writes
reports/parallel.md from. None of these rows is in the training data (they are not one tensor-parallel group).

Rows (``../shared/data/measurements``, each source's README read for what its columns mean; GPU names mapped
through the reviewed table ``data/gpu_map.csv``):

- ``mlenergy_v3``: expert parallelism (EP) on H100 and B200, read as ``tp N, ep on`` (the README: vLLM ran
  ``tensor_parallel_size = N`` with ``enable_expert_parallel``; the source's ``tensor_parallel = 1`` on these rows
  counts the attention split differently: N GPUs with DP 1 can only be one group of N), and attention data
  parallelism with EP (DP+EP) on B200, read as ``tp 1, dp N, ep on``. Measured: mean power per GPU (NVML) and the
  median ITL; the running batch is the measured mean ``avg_batch_size`` (ASSUMED to count all DP engines
  together); the prompt length is not given.
- ``brunetta_llm_inference_power``: data parallelism of dense LLMs (``tp 1, dp 4`` on H100, ``dp 8`` on A100
  80GB), vLLM 0.9, offline with ``max_num_seqs`` per engine (the README), prompt and output lengths measured; power
  = the node's active power / N; ITL = the mean TPOT. ``strong`` runs include the idle tail of engines that finish
  early (the README), ``weak`` runs do not: scored apart.
- ``mlenergy_v2``: pipeline parallelism, ``tp 8, pp 2`` on 16 GPUs (two AWS nodes; the network between them is
  ASSUMED InfiniBand NDR-class: p5 has 3,200 Gb/s EFA per node, p4d 400 Gb/s), vLLM 0.5.4; power derived from
  energy per request; ITL = mean TPOT; the measured mean running batch.

Predictions: ``wattgpu.layout_predict.predict_layout`` with the predictor (what ``predict --pp/--dp/--ep``
answers: the ``anchored`` method, its roofline bound beside it), as a closed loop of the measured running batch
where the source gives one, else offline at ``max_num_seqs`` per engine, with the source's ITL statistic; a prompt
length the source lacks is ``INPUT_TOKENS_ASSUMED`` (ASSUMPTION; it moves only the KV-cache read). Nothing is fitted
to these rows. Beside it: TDP and the load-scaled TDP (0.9 × TDP offline) for power; the bandwidth latency (active
weight bytes / (GPUs splitting one token's weights × bandwidth)) for ITL; and the learned models as a user gets
them without a layout (the prediction of one DP engine's TP group; the EP group as a TP group of N; none for PP
rows, which no TP group holds).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "measurements"
GPU_MAP = REPO / "data" / "gpu_map.csv"
INPUT_TOKENS_ASSUMED = 1024
SOURCES = ("mlenergy_v3", "brunetta_llm_inference_power", "mlenergy_v2")


@dataclass(frozen=True)
class Row:
    """One measured run mapped onto a layout question, and what was measured."""

    source: str
    kind: str  # ep, dp+ep, dp (strong / weak), pp
    gpu: str  # catalog name (data/gpu_map.csv)
    llm: str
    dtype: str
    tp: int
    pp: int
    dp: int
    ep: bool
    max_batch: int
    running: float | None  # measured mean running batch over all engines, if given
    input_tokens: int
    output_tokens: int
    power_w: float
    itl_s: float
    itl_stat: str  # the source's ITL statistic: mean or median


@dataclass(frozen=True)
class Scored:
    """A row with every answer beside it (NaN where one cannot be asked)."""

    row: Row
    power_w: float  # the layout answer (anchored)
    itl_s: float
    roofline_power_w: float
    roofline_itl_s: float
    tdp_w: float
    ls_tdp_w: float
    bandwidth_itl_s: float
    learned_power_w: float
    learned_itl_s: float
    method: str


def gpu_names(path: Path = GPU_MAP) -> dict[tuple[str, str], str]:
    """(source, GPU as the source spells it) → catalog GPU name, from the reviewed ``data/gpu_map.csv``."""
    return {(r["source"], r["source_gpu_name"]): r["catalog_gpu"] for r in _read(path)}


def _int(text: str | None, default: int = 1) -> int:
    return int(float(text)) if text not in ("", None) else default


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _tokens(text: str) -> int:
    return max(round(float(text)), 1) if text else INPUT_TOKENS_ASSUMED


def rows(data: Path = DATA, gpu_map: Path = GPU_MAP) -> list[Row]:
    """Every EP, DP or PP row of the three sources (see the module docstring); a GPU the map lacks is a clear
    error naming the file to extend."""
    names = gpu_names(gpu_map)

    def gpu(source: str, text: str) -> str:
        try:
            return names[(source, text)]
        except KeyError:
            raise ValueError(f"{source}: GPU {text!r} is not in {gpu_map}: add a reviewed mapping first") from None

    out: list[Row] = []
    for r in _read(data / "mlenergy_v3" / "rows.csv"):
        dp, ep = _int(r["data_parallel"]), _int(r["expert_parallel"])
        if dp == 1 and ep == 1:
            continue
        n = _int(r["num_gpus"])
        out.append(Row("mlenergy_v3", "dp+ep" if dp > 1 else "ep", gpu("mlenergy_v3", r["gpu"]), r["llm"], "auto",
                       n // dp if dp > 1 else n, 1, dp, ep > 1, _int(r["max_num_seqs"], 256),
                       float(r["avg_batch_size"]), INPUT_TOKENS_ASSUMED, _tokens(r["output_len_tokens"]),
                       float(r["mean_power_w"]), float(r["itl_s"]), "median"))
    src = "brunetta_llm_inference_power"
    for r in _read(data / src / "rows.csv"):
        dp = _int(r["data_parallel"])
        if dp == 1:
            continue
        out.append(Row("brunetta", f"dp ({r['dp_split']})", gpu(src, r["gpu"]), r["llm"],
                       "fp8" if r["precision"] == "fp8" else "auto", _int(r["tensor_parallel"]), 1, dp, False,
                       _int(r["max_num_seqs"], 256), None, _tokens(r["input_len_tokens"]),
                       _tokens(r["output_len_tokens"]), float(r["mean_power_w"]), float(r["itl_s"]), "mean"))
    for r in _read(data / "mlenergy_v2" / "rows.csv"):
        pp = _int(r["pipeline_parallel"])
        if pp == 1:
            continue
        out.append(Row("mlenergy_v2", "pp", gpu("mlenergy_v2", r["gpu"]), r["llm"], "auto",
                       _int(r["tensor_parallel"]), pp, 1, False, _int(r["max_num_seqs"], 256),
                       float(r["avg_batch_size"]), INPUT_TOKENS_ASSUMED, _tokens(r["output_len_tokens"]),
                       float(r["mean_power_w"]), float(r["itl_s"]), "mean"))
    return out


def score(all_rows: list[Row], predictor: Any = None) -> tuple[list[Scored], dict[str, int]]:
    """Each row predicted with its layout and the baselines; rows that cannot be asked are counted by reason."""
    from wattgpu import Predictor, Workload
    from wattgpu import layout_predict as LP
    from wattgpu import physics
    from wattgpu.errors import WattGPUError
    from wattgpu.quant import with_dtype

    pred = predictor or Predictor()
    cat = pred.catalog
    out: list[Scored] = []
    skipped: dict[str, int] = {}

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for r in all_rows:
        try:
            gpu, llm = cat.gpu(r.gpu), with_dtype(cat.llm(r.llm), r.dtype)
        except WattGPUError:
            skip("LLM or GPU not in the catalog")
            continue
        try:
            lay = LP.layout_of(gpu, llm, r.tp, r.pp, r.dp, r.ep)
        except WattGPUError:
            skip("layout invalid for the model")
            continue
        era = "legacy" if r.source == "mlenergy_v2" else "current"
        common = dict(max_batch=r.max_batch, input_tokens=r.input_tokens, output_tokens=r.output_tokens,
                      engine_era=era, itl_stat=r.itl_stat)
        if r.running is not None:
            wl = Workload(kind="closed_loop", concurrency=max(r.running, 1.0), **common)
        else:
            wl = Workload(**common)
        try:
            p = LP.predict_layout(gpu, llm, wl, lay, predictor=pred)
        except WattGPUError:
            skip("does not fit as measured (the layout's memory fit)")
            continue
        splits = lay.tp * (lay.dp if lay.ep > 1 else 1)
        bw_itl = float(physics.bandwidth_latency_s(llm.active_params_b * llm.weight_bytes_per_param / 2.0,
                                                   gpu.memory_bandwidth_gb_s * splits))
        learned_p = learned_i = math.nan
        if r.kind != "pp":
            per_engine = r.dp if not r.ep else 1
            n = lay.tp if not r.ep else lay.gpus
            running = (r.running or r.max_batch * r.dp) / per_engine
            try:
                q = pred.predict(gpu, llm, Workload(**{**common, "max_batch": max(r.max_batch, math.ceil(running))},
                                                    kind="closed_loop", concurrency=max(running, 1.0), tp=n))
                learned_p, learned_i = float(q.power_w), float(q.itl_s)
            except WattGPUError:
                pass
        rl = p.roofline()
        out.append(Scored(r, p.power_per_gpu_w, p.itl_s, rl["power_w"], rl["itl_s"], float(gpu.tdp_w),
                          float(physics.ls_tdp_power_w(float(gpu.tdp_w), "offline")), bw_itl, learned_p, learned_i,
                          p.method))
    return out, skipped
