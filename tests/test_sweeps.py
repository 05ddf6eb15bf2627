"""Sanity sweeps over every catalog GPU × dense, GQA, MLA, MoE and FP8 LLMs: zero violations.

Physics contracts (strict): throughput rises with qps up to capacity and stays flat beyond; the roofline
step grows with batch and context; max_concurrency agrees with the memory check; roofline seconds per
token fall with the batch cap. The same monotonicity on the *learned* ITL and offline energy is checked
too: the learned ITL strictly (the models carry monotone constraints since issue 13); the learned
offline energy per token is xfail(strict=False), because a direction constraint does not bound slopes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wattgpu import features as F
from wattgpu import memory, physics
from wattgpu.checks import row_errors
from wattgpu.errors import ModelFitError
from wattgpu.hfconfig import llm_from_hf_config
from wattgpu.predictor import Predictor
from wattgpu.quant import with_dtype
from wattgpu.workload import Workload

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"


@pytest.fixture(scope="module")
def pred() -> Predictor:
    return Predictor()


@pytest.fixture(scope="module")
def llms(pred: Predictor) -> dict:
    cat = pred.catalog
    # Synthetic test fixture (labelled): the DeepSeek-V3 MLA geometry cut to 4 layers and 16 experts so an
    # MLA model fits on single GPUs; its KV-cache formula is the real one.
    cfg = dict(json.loads((FIXTURES / "deepseek-ai--DeepSeek-V3.1.json").read_text()))
    cfg = dict(cfg.get("config", cfg))
    cfg.update(num_hidden_layers=4, n_routed_experts=16, first_k_dense_replace=1)
    cfg.pop("quantization_config", None)
    mla = llm_from_hf_config(cfg, "synthetic/mla-4-layer")
    assert mla.kv_lora_rank == 512
    return {
        "dense-mha": cat.llm("meta-llama/Llama-2-7b-hf"),
        "gqa": cat.llm("meta-llama/Llama-3.1-8B-Instruct"),
        "mla": mla,
        "moe": cat.llm("Qwen/Qwen3-30B-A3B-Instruct-2507"),
        "fp8": with_dtype(cat.llm("meta-llama/Llama-3.1-8B-Instruct"), "fp8"),
        "fp8-catalog": cat.llm("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"),
    }


def _fitting(pred: Predictor, llms: dict, wl: Workload) -> list[tuple]:
    triples = [(g, m, wl) for g in pred.catalog.gpus for m in llms.values()]
    errors, _ = row_errors(triples)
    return [t for t, e in zip(triples, errors) if e is None]


QPS_FRACTIONS = (0.05, 0.2, 0.5, 0.8, 0.95, 0.999, 1.001, 1.5, 4.0, 100.0, 1e6)


def test_throughput_rises_with_qps_to_capacity_then_flat(pred: Predictor, llms: dict) -> None:
    pairs = _fitting(pred, llms, Workload(kind="server", qps=1.0))
    assert len(pairs) > 100
    caps = pred.predict_specs([(g, m, w) for g, m, w in pairs])
    rows = [(g, m, Workload(kind="server", qps=min(c.max_qps * f, 1e12)))
            for (g, m, _), c in zip(pairs, caps) for f in QPS_FRACTIONS]
    out = pred.predict_specs(rows)
    violations = []
    k = len(QPS_FRACTIONS)
    for i, (g, m, _) in enumerate(pairs):
        ps = out[i * k:(i + 1) * k]
        tput = np.array([p.throughput_tok_s for p in ps])
        cap_tok = caps[i].max_qps * 256
        if np.any(np.diff(tput) < -1e-9 * cap_tok) or np.any(tput > cap_tok * (1 + 1e-9)):
            violations.append((g.name, m.name, "not monotone or above capacity", tput.tolist()))
        beyond = [p.throughput_tok_s for p, f in zip(ps, QPS_FRACTIONS) if f > 1]
        if not np.allclose(beyond, cap_tok, rtol=1e-9):
            violations.append((g.name, m.name, "not flat beyond capacity", beyond))
        if [p.overloaded for p in ps] != [f > 1 for f in QPS_FRACTIONS]:
            violations.append((g.name, m.name, "overload state", [p.overloaded for p in ps]))
    assert violations == []


BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (128, 512, 2048, 8192)


def _step(g, m, batch: int, ctx: int) -> float:
    """Roofline decode step at exactly ``batch`` sequences of ``ctx`` prompt tokens (the features' physics)."""
    c = F.columns([(g, m, Workload(input_tokens=ctx, output_tokens=64))])
    step = physics.decode_step_bytes(c["active_weights_bytes"], c["weights_bytes"], batch, c["kv_per_token"],
                                     c["mean_context"], c["llm_num_experts"], c["llm_experts_per_tok"])
    return float(physics.roofline_step_s(step, batch, c["llm_active_params_b"], c["gpu_memory_bandwidth_gb_s"],
                                         c["compute_tflops"])[0])


def test_roofline_step_rises_with_batch_and_context(pred: Predictor, llms: dict) -> None:
    violations = []
    for g in pred.catalog.gpus:
        for name, m in llms.items():
            for ctx in CONTEXTS:
                steps = np.array([_step(g, m, b, ctx) for b in BATCHES])
                if np.any(np.diff(steps) < 0):
                    violations.append((g.name, name, ctx, "step falls with batch"))
                if np.any(np.diff(steps / np.array(BATCHES)) > 1e-15):
                    violations.append((g.name, name, ctx, "seconds per token rise with batch"))
            for b in (1, 8, 64):
                if np.any(np.diff([_step(g, m, b, ctx) for ctx in CONTEXTS]) < 0):
                    violations.append((g.name, name, b, "step falls with context"))
    assert violations == []


def test_max_concurrency_matches_the_memory_check(pred: Predictor, llms: dict) -> None:
    violations = []
    for wl in (Workload(), Workload(input_tokens=6000, output_tokens=2000), Workload(kv_cache_dtype="fp8")):
        triples = [(g, m, wl) for g in pred.catalog.gpus for m in llms.values()]
        results = pred.predict_specs_safe(triples)
        for (g, m, w), r in zip(triples, results):
            gpu_bytes = g.memory_size_gb * 2**30  # NVIDIA's memory GB is binary (physics.BYTES_PER_MEMORY_GB)
            budget = (gpu_bytes * w.gpu_memory_utilization - m.total_params_b * 1e9 * m.weight_bytes_per_param
                      - physics.ACTIVATION_RESERVE_FRACTION * gpu_bytes)
            seq = memory.llm_kv_bytes_per_sequence(m, w.context_tokens, w.kv_cache_dtype)
            fits = int(max(budget, 0) // seq)
            if isinstance(r, ModelFitError):
                if fits >= 1:
                    violations.append((g.name, m.name, "refused although one sequence fits", fits))
                continue
            if r.max_concurrency != fits or fits < 1:
                violations.append((g.name, m.name, r.max_concurrency, fits))
            elif not (r.max_concurrency * seq <= budget < (r.max_concurrency + 1) * seq):
                violations.append((g.name, m.name, "not the largest count that fits"))
            if r.effective_batch > max(r.max_concurrency, 1):
                violations.append((g.name, m.name, "batch above what fits", r.effective_batch))
    assert violations == []


def test_learned_itl_rises_with_batch_and_context(pred: Predictor, llms: dict) -> None:
    """Monotone constraints (recipes.MONOTONE): ITL never falls as the batch grows, nor as the context
    grows at the same effective batch (a longer context that leaves room for fewer sequences lowers the
    batch, and with it the per-sequence ITL: that is the batch effect, not the context's)."""
    pairs = _fitting(pred, llms, Workload())
    rows = [(g, m, Workload(kind="closed_loop", concurrency=b)) for g, m, _ in pairs for b in BATCHES]
    itl = pred.predict_table(rows)["itl_s"].reshape(len(pairs), len(BATCHES))
    rows = [(g, m, Workload(input_tokens=c, output_tokens=64, concurrency=8)) for g, m, _ in pairs for c in CONTEXTS]
    t = pred.predict_table(rows)
    itl_ctx = t["itl_s"].reshape(len(pairs), len(CONTEXTS))
    same_batch = np.diff(t["effective_batch"].reshape(len(pairs), len(CONTEXTS)), axis=1) == 0
    bad_b = int(np.sum(np.nanmin(np.diff(itl, axis=1), axis=1) < -1e-12))
    bad_c = int(np.sum(np.any((np.diff(itl_ctx, axis=1) < -1e-12) & same_batch, axis=1)))
    assert (bad_b, bad_c) == (0, 0)


@pytest.mark.parametrize("kind", ["offline", "closed_loop"])
def test_throughput_never_falls_as_the_batch_grows(pred: Predictor, llms: dict, kind: str) -> None:
    """More load never means less work: tokens/s is non-decreasing in the batch cap (offline) and in the
    client count (closed loop) for every catalog GPU × LLM that fits. Monotone constraints alone do not
    give this (the learned ITL may grow faster than the batch: 78 of 229 pairs dropped, by up to 41 %);
    capacity.sub_batch_itl bounds the ITL by running the batch as sub-batches."""
    pairs = _fitting(pred, llms, Workload())
    make = (lambda b: Workload(max_batch=b)) if kind == "offline" else (lambda b: Workload(kind="closed_loop", concurrency=b))
    rows = [(g, m, make(b)) for g, m, _ in pairs for b in BATCHES]
    thr = pred.predict_table(rows)["throughput_tok_s"].reshape(len(pairs), len(BATCHES))
    assert np.isfinite(thr).all()
    # Tolerance 1e-6 relative: a closed loop of 16 clients keeps 16.0000018 sequences busy on average
    # (physics.busy_batch), exactly 16 only where the batch limit is 16, so the capacity grid's "16"
    # point moves by 2e-8 between caps (A10G × Llama-2-7B: 601.19007 → 601.19005 tokens/s, once the
    # throughput is capped at capacity). Any drop a user could see is far above this.
    drop = np.diff(thr, axis=1) < -1e-6 * thr[:, :-1]
    drops = [(pairs[i][0].name, pairs[i][1].name) for i in np.flatnonzero(drop.any(axis=1))]
    assert drops == []


@pytest.mark.parametrize("kind", ["offline", "closed_loop"])
def test_throughput_never_exceeds_capacity(pred: Predictor, llms: dict, kind: str) -> None:
    """A GPU never serves more than its capacity: tokens/s <= max_qps × output tokens for every catalog
    GPU × LLM, batch and output length, down to one output token per prompt, where batch / ITL without
    the prefill claimed up to 3× the capacity."""
    pairs = _fitting(pred, llms, Workload())
    for out in (1, 16, 256):
        make = ((lambda b: Workload(max_batch=b, output_tokens=out)) if kind == "offline"
                else (lambda b: Workload(kind="closed_loop", concurrency=b, output_tokens=out)))
        t = pred.predict_table([(g, m, make(b)) for g, m, _ in pairs for b in (1, 3, 16, 100, 256)])
        ok = np.isfinite(t["throughput_tok_s"])
        assert ok.mean() > 0.95
        over = t["throughput_tok_s"][ok] > t["max_qps"][ok] * out * (1 + 1e-12)
        assert int(over.sum()) == 0, out


@pytest.mark.xfail(strict=False, reason="throughput never falls with the batch (test above), but power may rise "
                   "faster than throughput once throughput saturates, so energy/token = P / tokens/s can rise "
                   "with the cap (17 of 235 GPU×LLM pairs with the shipped models and the shared batch grid; H20 + Llama-3.1-8B "
                   "cap 128 → 256: +4.6 % tokens/s for +36 % power)")
def test_learned_offline_energy_falls_with_batch_cap(pred: Predictor, llms: dict) -> None:
    pairs = _fitting(pred, llms, Workload())
    rows = [(g, m, Workload(max_batch=b)) for g, m, _ in pairs for b in BATCHES]
    e = pred.predict_table(rows)["energy_per_token_j"].reshape(len(pairs), len(BATCHES))
    assert int(np.sum(np.nanmax(np.diff(e, axis=1), axis=1) > 1e-12)) == 0
