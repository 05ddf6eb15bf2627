"""Hard physical bounds hold on every prediction, by construction of the models' outputs (issue 21).

Swept over every catalog GPU × 8 LLMs (dense, GQA, sliding window, MoE, FP8) × batch 1…1024 × TP 1/2/4/8
where the model fits, offline and closed loop, plus Poisson servers:
- ITL ≥ the roofline step (weights + KV read per step at peak bandwidth, or the FLOPs at peak, plus the
  all-reduce time of a TP group): the floor a decode step cannot beat;
- idle ≤ power ≤ TDP *before* any cap (``raw_power_w``), so the cap kept in ``results.finish`` as a guard
  never binds;
- power and ITL never fall as the batch grows.
"""
from __future__ import annotations

import numpy as np
import pytest

from wattgpu import features as F
from wattgpu.checks import row_errors
from wattgpu.predictor import Predictor
from wattgpu.quant import with_dtype
from wattgpu.results import core
from wattgpu.targets import BOUNDED
from wattgpu.workload import Workload

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TPS = (1, 2, 4, 8)
LLMS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "google/gemma-2-9b-it", "Qwen/Qwen3-8B",
        "meta-llama/Llama-3.1-70B-Instruct", "mistralai/Mixtral-8x7B-Instruct-v0.1", "Qwen/Qwen3-30B-A3B-Instruct-2507")
REL = 1e-12  # float rounding of the inverse transform


@pytest.fixture(scope="module")
def pred() -> Predictor:
    import os
    return Predictor(models=os.environ.get("WATTGPU_BOUNDS_MODELS") or None)


@pytest.fixture(scope="module")
def sweep(pred: Predictor) -> dict:
    cat = pred.catalog
    llms = [cat.llm(n) for n in LLMS] + [with_dtype(cat.llm("meta-llama/Llama-3.1-8B-Instruct"), "fp8")]
    rows = [(g, m, Workload(max_batch=b, tp=tp)) for g in cat.gpus for m in llms for tp in TPS for b in BATCHES]
    rows += [(g, m, Workload(kind="closed_loop", concurrency=b, tp=tp))
             for g in cat.gpus for m in llms for tp in TPS for b in BATCHES[::2]]
    errors, _ = row_errors(rows)
    ok = [r for r, e in zip(rows, errors) if e is None]
    cols = F.columns(ok)
    numbers, _ = core(pred.bundle, pred._evaluate, ok, cols)
    return {"rows": ok, "cols": cols, "numbers": numbers}


def test_the_shipped_models_use_bounded_transforms(pred: Predictor) -> None:
    assert {m.transform for m in pred.schema.models.values()} <= BOUNDED


def test_sweep_is_large(sweep: dict) -> None:
    rows = sweep["rows"]
    assert len(rows) > 20_000
    assert len({r[0].name for r in rows}) >= 50 and {r[2].tp for r in rows} == set(TPS)


def test_itl_never_below_the_roofline_floor(sweep: dict) -> None:
    itl, floor = sweep["numbers"]["itl_s"], sweep["cols"]["roofline_itl_s"]
    weight_read = sweep["cols"]["active_weights_bytes"] / (sweep["cols"]["gpu_memory_bandwidth_gb_s"] * 1e9)
    assert np.all(floor >= weight_read * (1 - REL))  # the floor holds the weight read of the GPU's shard
    bad = np.flatnonzero(itl < floor * (1 - REL))
    assert bad.size == 0, [(sweep["rows"][i][0].name, sweep["rows"][i][1].name, sweep["rows"][i][2].max_batch,
                            sweep["rows"][i][2].tp, itl[i], floor[i]) for i in bad[:10]]


def test_itl_covers_the_all_reduce_time(sweep: dict) -> None:
    itl, comm = sweep["numbers"]["itl_s"], sweep["cols"]["comm_s"]
    assert np.all(itl >= comm * (1 - REL))


def test_power_between_idle_and_tdp_before_any_cap(sweep: dict) -> None:
    raw, tdp, idle = sweep["numbers"]["raw_power_w"], sweep["cols"]["gpu_tdp_w"], sweep["cols"]["idle_power_w"]
    above = np.flatnonzero(raw > tdp * (1 + REL))
    below = np.flatnonzero(raw < idle * (1 - REL))
    assert above.size == 0, [(sweep["rows"][i][0].name, sweep["rows"][i][1].name, raw[i], tdp[i]) for i in above[:10]]
    assert below.size == 0, [(sweep["rows"][i][0].name, sweep["rows"][i][1].name, raw[i], idle[i]) for i in below[:10]]
    assert np.array_equal(sweep["numbers"]["power_w"], raw)  # the guard cap did nothing


def test_power_and_itl_never_fall_as_the_batch_grows(sweep: dict) -> None:
    rows, n = sweep["rows"], sweep["numbers"]
    series: dict[tuple, list[tuple[float, float, float]]] = {}  # the FP8 variant keeps the LLM's name
    for i, (g, m, w) in enumerate(rows):
        if w.kind == "offline":
            series.setdefault((g.name, m.name, m.weight_bytes_per_param, w.tp), []).append((w.max_batch, n["power_w"][i], n["itl_s"][i]))
    bad = []
    for key, pts in series.items():
        pts.sort()
        p, t = np.array([x[1] for x in pts]), np.array([x[2] for x in pts])
        if np.any(np.diff(p) < -1e-9 * p[:-1]) or np.any(np.diff(t) < -1e-9 * t[:-1]):
            bad.append(key)
    assert not bad, bad[:10]


def test_server_rows_respect_the_floor_and_print_the_roofline_at_their_batch(pred: Predictor) -> None:
    cat = pred.catalog
    llm = cat.llm("meta-llama/Llama-3.2-3B-Instruct") if cat.find_llm("meta-llama/Llama-3.2-3B-Instruct") \
        else cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    for g in cat.gpus[::4]:
        for qps in (0.01, 0.3, 3.0):
            try:
                p = pred.predict(g, llm, Workload(kind="server", qps=qps))
            except Exception:  # noqa: BLE001 - a GPU too small for the model
                continue
            floor = p.baselines["roofline_itl_s"]
            assert p.itl_s >= floor * (1 - REL), (g.name, qps, p.itl_s, floor)
            offline = pred.predict(g, llm).baselines["roofline_itl_s"]
            assert floor <= offline * (1 + REL)  # at the server's (smaller) batch, not the offline cap
            assert p.idle_power_w is None or p.idle_power_w <= p.power_w <= g.tdp_w


def test_intervals_stay_inside_the_physical_range(pred: Predictor) -> None:
    cat = pred.catalog
    llm = cat.llm("meta-llama/Llama-3.1-8B-Instruct")
    for g in cat.gpus[::3]:
        for b in (1, 64):
            try:
                p = pred.predict(g, llm, Workload(max_batch=b))
            except Exception:  # noqa: BLE001 - a GPU too small for the model
                continue
            assert p.itl_intervals and p.power_intervals
            for iv in p.itl_intervals:
                assert p.baselines["roofline_itl_s"] * (1 - REL) <= iv.low <= p.itl_s <= iv.high
            for iv in p.power_intervals:
                assert iv.low <= p.power_w <= iv.high <= g.tdp_w
