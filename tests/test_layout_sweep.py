"""The sense sweep over every new layout (issue 41 items 2 and 3): every catalog MoE or 400B+ LLM × every catalog GPU
with interconnect facts × every candidate layout on up to 4 nodes that holds it. Contracts: more stages never lower
the bubble, all-to-all bytes grow with tokens and top-k, nothing faster than its slowest link, more load never less
work, ITL never below the weight read, power per GPU between idle and TDP; and every catalog LLM is placeable on
some layout of catalog GPUs, through `predict`'s own path. The answer users get (``anchored`` on the learned models)
keeps the same contracts: on a fixed slice of the sweep in the default tier (every ``ANCHORED_STEP``-th layout: the
full sweep of learned answers takes minutes), on all of it under ``-m slow``."""
from __future__ import annotations

import math
from collections import defaultdict
from functools import cache
from typing import Any

import pytest

from wattgpu import Predictor
from wattgpu import layout as L
from wattgpu import layout_learned as LL
from wattgpu import layout_predict as LP
from wattgpu.specs import default_catalog
from wattgpu.workload import Workload

CAT = default_catalog()
BIG = [m for m in CAT.llms if m.is_moe or m.total_params_b >= 400]
GROUPED = [g for g in CAT.gpus if (g.max_group or 1) > 1]
IN, OUT = 1024, 512
BATCHES = (1, 16, 256)
REL = 1e-9  # float slack on sums of different order (never a bit-for-bit comparison)
ANCHORED_STEP = 23  # a prime stride, so the slice crosses GPUs, LLMs and layout kinds alike
PRED = Predictor()


@cache
def _sweep() -> list[tuple[Any, Any, L.Layout, list[L.Estimate]]]:
    out = []
    for gpu in GROUPED:
        for llm in BIG:
            for lay in L.candidate_layouts(gpu, llm, max_nodes=4):
                if L.fit(gpu, llm, lay, IN + OUT).fits:
                    out.append((gpu, llm, lay, [L.estimate(gpu, llm, lay, b, IN, OUT) for b in BATCHES]))
    return out


@cache
def _anchored(step: int) -> list[tuple[Any, Any, L.Layout, list[L.Estimate]]]:
    """Every ``step``-th layout of the sweep, answered as ``predict`` answers it (the learned stage + physics)."""
    wl = Workload(input_tokens=IN, output_tokens=OUT)
    questions: dict[tuple[str, str], LL.StageQuestions] = {}
    out = []
    for gpu, llm, lay, _ in _sweep()[::step]:
        q = questions.setdefault((gpu.name, llm.name), LL.StageQuestions(PRED, gpu, llm, wl))
        out.append((gpu, llm, lay, [L.estimate(gpu, llm, lay, b, IN, OUT, stage_model=q.model(lay))
                                    for b in BATCHES]))
    return out


def _check_anchored(step: int) -> None:
    sweep = _anchored(step)
    kinds = [e.method for _, _, _, ests in sweep for e in ests]
    assert kinds.count("anchored") >= 0.95 * len(kinds)  # the learned models answer (nearly) every stage
    for gpu, llm, lay, ests in sweep:
        idle = L.idle_power_w(gpu)
        floor = L.touched_weight_bytes(llm, lay, 1.0) * lay.pp / (gpu.memory_bandwidth_gb_s * 1e9)
        for e in ests:
            assert idle * (1 - REL) <= e.power_per_gpu_w <= gpu.tdp_w, (gpu.name, llm.name, lay)
            assert e.itl_s >= max(floor, e.roofline_itl_s) * (1 - REL), (gpu.name, llm.name, lay)
            assert e.ttft_s >= e.roofline_ttft_s * (1 - REL) and math.isfinite(e.tokens_per_s)
        for a, b in zip(ests, ests[1:]):  # more load: never less work, never a shorter step
            assert b.tokens_per_s >= a.tokens_per_s * (1 - REL), (gpu.name, llm.name, lay)
            assert b.itl_s >= a.itl_s * (1 - REL), (gpu.name, llm.name, lay)
        if lay.nodes > 1:  # the same layout on a slower network is never faster
            slow = L.Layout(lay.tp, lay.pp, lay.dp, lay.ep, lay.nodes, lay.gpus_per_node, "RoCE 200GbE")
            q = LL.StageQuestions(PRED, gpu, llm, Workload(input_tokens=IN, output_tokens=OUT))
            for b, fast in zip(BATCHES, ests):
                e = L.estimate(gpu, llm, slow, b, IN, OUT, stage_model=q.model(slow))
                assert e.itl_s >= fast.itl_s * (1 - REL) and e.ttft_s >= fast.ttft_s * (1 - REL)


def test_the_anchored_answer_keeps_the_contracts_on_a_slice() -> None:
    assert len(_anchored(ANCHORED_STEP)) > 3000
    _check_anchored(ANCHORED_STEP)


@pytest.mark.slow
def test_the_anchored_answer_keeps_the_contracts_on_the_whole_sweep() -> None:
    _check_anchored(1)


def test_the_sweep_covers_the_new_layouts() -> None:
    assert len(BIG) >= 20 and len(GROUPED) >= 20
    lays = [lay for _, _, lay, _ in _sweep()]
    assert len(_sweep()) > 5000
    for kind in (lambda x: x.pp > 1 and x.nodes > 1, lambda x: x.ep > x.gpus_per_node, lambda x: x.dp > 1 and x.ep > 1,
                 lambda x: x.pp > 1 and x.ep > 1 and x.nodes > 1):
        assert any(kind(x) for x in lays)
    assert {m.name for _, m, _, _ in _sweep()} == {m.name for m in BIG}  # every big LLM placed somewhere


def test_more_load_never_less_work_and_power_within_bounds() -> None:
    for gpu, llm, lay, ests in _sweep():
        idle = L.idle_power_w(gpu)
        floor = L.touched_weight_bytes(llm, lay, 1.0) * lay.pp / (gpu.memory_bandwidth_gb_s * 1e9)
        for e in ests:
            assert idle * (1 - REL) <= e.power_per_gpu_w <= gpu.tdp_w, (gpu.name, llm.name, lay)
            assert e.itl_s >= floor * (1 - REL), (gpu.name, llm.name, lay)
            assert e.ttft_s > 0 and math.isfinite(e.tokens_per_s) and e.tokens_per_s > 0
        for a, b in zip(ests, ests[1:]):
            assert b.tokens_per_s >= a.tokens_per_s * (1 - REL), (gpu.name, llm.name, lay)
            assert b.itl_s >= a.itl_s * (1 - REL), (gpu.name, llm.name, lay)
            assert b.alltoall_s >= a.alltoall_s * (1 - REL)


def test_more_stages_never_lower_the_bubble() -> None:
    groups: dict[tuple[Any, ...], list[tuple[int, list[L.Estimate]]]] = defaultdict(list)
    for gpu, llm, lay, ests in _sweep():
        groups[(gpu.name, llm.name, lay.tp, lay.dp, lay.ep)].append((lay.pp, ests))
    compared = 0
    for runs in groups.values():
        runs.sort(key=lambda r: r[0])
        for (pa, ea), (pb, eb) in zip(runs, runs[1:]):
            if pb > pa:
                compared += 1
                for a, b in zip(ea, eb):
                    assert b.bubble >= a.bubble
    assert compared > 500
    for _, _, lay, ests in _sweep():
        assert all((e.bubble == 0.0) == (lay.pp == 1) for e in ests)


def test_alltoall_bytes_grow_with_tokens_and_top_k() -> None:
    for llm in BIG:
        if not llm.is_moe:
            continue
        k, h = float(llm.experts_per_tok), float(llm.hidden_size)
        for ep in (2.0, 8.0, 32.0):
            for tokens in (1.0, 16.0, 256.0):
                base = L.alltoall_bytes(tokens, k, h, ep)
                assert base > 0
                assert L.alltoall_bytes(tokens * 2, k, h, ep) > base
                assert L.alltoall_bytes(tokens, k + 1, h, ep) > base
                assert L.alltoall_bytes(tokens, k, h, ep * 2) > base


def test_nothing_faster_than_its_slowest_link() -> None:
    """A stage boundary between nodes moves its activations over the network, an EP group wider than a node sends
    its all-to-all over the network: neither takes less than bytes / that link's bandwidth; the same layout on a
    slower network is never faster."""
    checked = 0
    for gpu, llm, lay, ests in _sweep():
        net = lay.link.gb_s * 1e9
        for b, e in zip(BATCHES, ests):
            rank_batch = max(b / lay.dp, 1.0)
            micro = rank_batch / min(float(lay.pp), rank_batch)
            if lay.nodes > 1 and lay.pp > 1:
                assert e.p2p_s >= micro * llm.hidden_size * 2.0 / lay.tp / net
                checked += 1
            if lay.ep > lay.gpus_per_node:
                per_layer = L.alltoall_bytes(micro / lay.tp, float(llm.experts_per_tok),
                                             float(llm.hidden_size), float(lay.ep))
                assert e.alltoall_s >= L.moe_layers(llm) / lay.pp * per_layer / net * (1 - REL)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("gpu_name", ["H100 SXM", "H200 SXM", "B200", "NVIDIA A100 SXM4 80GB"])
def test_a_slower_network_is_never_faster(gpu_name: str) -> None:
    gpu = CAT.gpu(gpu_name)
    for _, llm, lay, ests in (s for s in _sweep() if s[0].name == gpu.name and s[2].nodes > 1):
        slow = L.Layout(lay.tp, lay.pp, lay.dp, lay.ep, lay.nodes, lay.gpus_per_node, "RoCE 200GbE")
        for b, fast in zip(BATCHES, ests):
            e = L.estimate(gpu, llm, slow, b, IN, OUT)
            assert e.itl_s >= fast.itl_s * (1 - REL) and e.ttft_s >= fast.ttft_s * (1 - REL)


@pytest.mark.parametrize("gpu_name", ["H100 SXM", "H200 SXM", "B200", "NVIDIA A100 SXM4 80GB"])
def test_predict_on_every_big_llm_keeps_the_contract(gpu_name: str) -> None:
    """`predict`'s path (the smallest layout that holds each big LLM, with and without EP) under offline, server
    and closed-loop loads: power per GPU between idle and TDP, never more tokens than capacity, energy finite."""
    gpu = CAT.gpu(gpu_name)
    loads = (Workload(input_tokens=IN, output_tokens=OUT), Workload(kind="server", qps=0.5, input_tokens=IN,
             output_tokens=OUT), Workload(kind="closed_loop", concurrency=64, input_tokens=IN, output_tokens=OUT))
    done = 0
    for llm in BIG:
        found = LP.smallest_layout(gpu, llm, loads[0])
        if found is None:
            continue
        for wl in loads:
            p = LP.predict_layout(gpu, llm, wl, found[0], predictor=PRED)
            assert L.idle_power_w(gpu) * (1 - REL) <= p.power_per_gpu_w <= gpu.tdp_w, (llm.name, found[0])
            assert p.throughput_tok_s <= p.at_capacity.tokens_per_s * (1 + 1e-6) or not any(
                w.startswith("overloaded") for w in p.warnings)
            assert p.e2e_latency_s >= p.ttft_s > 0
            assert math.isfinite(p.energy()["j_per_token"]) and p.energy()["j_per_token"] > 0
            done += 1
    assert done >= 3 * 15


def test_every_catalog_llm_is_placeable_through_predict() -> None:
    """Issue 41's target: every catalog LLM runs on some layout of catalog GPUs on up to 4 nodes — found as a user
    would (the smallest layout `predict` suggests) and predicted."""
    by_memory = sorted(GROUPED, key=lambda g: -g.memory_size_gb)
    wl = Workload(input_tokens=IN, output_tokens=OUT)
    not_placed = []
    for llm in CAT.llms:
        for gpu in by_memory:
            found = LP.smallest_layout(gpu, llm, wl)
            if found is not None and found[0].nodes <= 4:
                p = LP.predict_layout(gpu, llm, wl, found[0], predictor=PRED)
                assert p.fit.fits and p.throughput_tok_s > 0
                break
        else:
            not_placed.append(llm.name)
    assert not_placed == []
