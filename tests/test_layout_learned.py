"""The anchored layout answer (wattgpu.layout_learned): each engine's stage is the learned answer of `predict --tp N`
for a stand-in holding the GPU's share of the weights; the layout's physics is added on top, the roofline is the
floor, and a stage the learned models refuse falls back to the roofline, said."""
from __future__ import annotations

import math

import pytest

from wattgpu import Predictor
from wattgpu import layout as L
from wattgpu import layout_learned as LL
from wattgpu import layout_predict as LP
from wattgpu.layout_search import best_layouts, layouts_answer
from wattgpu.workload import Workload

PRED = Predictor()
CAT = PRED.catalog
R1 = "deepseek-ai/DeepSeek-R1-0528"
QWEN = "Qwen/Qwen3-235B-A22B-Instruct-2507"
WL = Workload(input_tokens=1024, output_tokens=512)


@pytest.mark.parametrize("llm_name, lay", [
    (R1, L.Layout(tp=8, pp=2, nodes=2)),
    (R1, L.Layout(tp=4, dp=4, ep=16, nodes=2)),
    (QWEN, L.Layout(tp=1, dp=8, ep=8)),
    (QWEN, L.Layout(tp=2, pp=2, dp=2, ep=4)),
    ("meta-llama/Llama-3.1-405B-Instruct", L.Layout(tp=8, pp=4, nodes=4)),
])
def test_the_stand_in_holds_what_one_layout_gpu_holds(llm_name: str, lay: L.Layout) -> None:
    """Its TP group of tp GPUs holds per GPU the weights the layout's GPU holds (up to the slowest stage's extra
    layer), and computes per token what the GPU's stage does."""
    llm = CAT.llm(llm_name)
    split = lay.ep if lay.ep > 1 else lay.tp
    s = LL.stand_in(llm, lay.tp, lay.pp, split)
    share = LL.stage_layers(llm, lay.pp) / llm.num_layers
    per_gpu = s.total_params_b * 1e9 * s.weight_bytes_per_param / lay.tp
    assert per_gpu == pytest.approx(L.weight_bytes_per_gpu(llm, lay) * share * lay.pp, rel=1e-9)
    assert s.num_layers == LL.stage_layers(llm, lay.pp) and s.num_layers * lay.pp >= llm.num_layers
    assert 0 < s.active_params_b <= s.total_params_b
    assert (s.num_experts, s.experts_per_tok, s.hidden_size) == (llm.num_experts, llm.experts_per_tok,
                                                                 llm.hidden_size)


def test_without_ep_or_pp_the_engine_is_the_learned_tp_answer() -> None:
    """A dense DP layout: each engine is `predict --tp N` at the engine's batch (one definition: the same call),
    its power the learned power (no bubble, no link time), never faster than the roofline."""
    gpu, llm = CAT.gpu("H100 SXM"), CAT.llm("meta-llama/Llama-3.1-70B-Instruct")
    lay = L.Layout(tp=2, dp=4)
    assert LL.stand_in(llm, 2, 1, 2) is llm
    q = LL.StageQuestions(PRED, gpu, llm, WL)
    for batch in (4, 64, 512):
        e = L.estimate(gpu, llm, lay, batch, 1024, 512, stage_model=q.model(lay))
        learned = PRED.predict(gpu, llm, Workload(kind="closed_loop", concurrency=batch / 4, max_batch=WL.max_batch,
                                                  input_tokens=1024, output_tokens=512, tp=2))
        assert e.method == "anchored"
        assert e.itl_s == pytest.approx(max(learned.itl_s, e.roofline_itl_s), rel=1e-12)
        assert e.power_per_gpu_w == pytest.approx(min(max(learned.power_w, L.idle_power_w(gpu)), gpu.tdp_w),
                                                  rel=1e-12)


def test_the_layout_physics_comes_on_top_of_the_learned_stage() -> None:
    """The all-to-all lengthens the step and its link time is not busy time; the pipeline's stages and bubble
    scale the stage's step; the answer never undercuts the roofline."""
    gpu, llm = CAT.gpu("H200 SXM"), CAT.llm(QWEN)
    q = LL.StageQuestions(PRED, gpu, llm, WL)
    ep = L.Layout(tp=1, dp=8, ep=8)
    e = L.estimate(gpu, llm, ep, 64, 1024, 512, stage_model=q.model(ep))
    stage = q.model(ep)(e.batch / 8)
    assert stage is not None and e.alltoall_s > 0
    assert e.itl_s >= stage.step_s + e.alltoall_s * (1 - 1e-12)
    assert e.power_per_gpu_w <= max(stage.power_w, L.idle_power_w(gpu)) + 1e-9
    pp = L.Layout(tp=2, pp=2, dp=2, ep=4)
    e2 = L.estimate(gpu, llm, pp, 64, 1024, 512, stage_model=q.model(pp))
    assert 0 < e2.bubble < 1 and e2.itl_s >= e2.roofline_itl_s and e2.ttft_s >= e2.roofline_ttft_s


def test_a_stage_the_learned_models_refuse_falls_back_to_the_roofline_and_says_so() -> None:
    """A dense 70B engine of one 80 GB GPU: the learned models refuse the stand-in (it does not fit), so the
    figures are the roofline's and the warning says why — never a silent mix."""
    gpu, llm = CAT.gpu("H100 SXM"), CAT.llm("meta-llama/Llama-3.1-70B-Instruct")
    lay = L.Layout(tp=1, dp=4)
    q = LL.StageQuestions(PRED, gpu, llm, WL)
    e = L.estimate(gpu, llm, lay, 16, 1024, 512, stage_model=q.model(lay))
    assert e.method == "roofline" and e.itl_s == e.roofline_itl_s
    words = LP.method_warnings(e, asked=True)
    assert "cannot answer" in words[0] and "roofline" in words[0]


def test_predict_and_rank_share_the_memoised_questions_and_stay_quick() -> None:
    """`rank --parallel auto` over three GPU types asks each engine shape once per micro-batch (memoised):
    its answers equal `predict`'s for the chosen layouts."""
    res = layouts_answer(
        PRED, R1, Workload(input_tokens=1024, output_tokens=1024, max_batch=128), ["H100 SXM", "H200 SXM", "B200"],
        max_nodes=2)
    assert len(res.choices) == 3
    for c in res.choices:
        gpu = CAT.gpu(c.gpu)
        p = LP.predict_layout(gpu, CAT.llm(R1), Workload(input_tokens=1024, output_tokens=1024, max_batch=128),
                              c.layout, predictor=PRED)
        assert p.method == c.estimate.method == "anchored"
        assert p.itl_s == pytest.approx(c.estimate.itl_s, rel=1e-12)
        assert math.isfinite(c.j_per_token) and c.j_per_token > 0


def test_the_search_stops_at_more_nodes_than_its_best_and_picks_what_a_full_scan_picks() -> None:
    """The rank search skips layouts on more nodes than its best so far (fewest nodes win first): the same choice
    as scoring every fitting layout."""
    wl = Workload(input_tokens=1024, output_tokens=1024, max_batch=128)
    for gpu_name, llm_name in (("H100 SXM", R1), ("A100 SXM4 40GB", QWEN), ("B200", R1)):
        gpu, llm = CAT.gpu(gpu_name), CAT.llm(llm_name)
        lays = L.candidate_layouts(gpu, llm, max_nodes=3)
        assert [x.nodes for x in lays] == sorted(x.nodes for x in lays)
        q = LL.StageQuestions(PRED, gpu, llm, wl)
        full = []
        for lay in lays:
            f = L.fit(gpu, llm, lay, wl.context_tokens)
            if f.fits:
                e = L.estimate(gpu, llm, lay, LP.running_batch(wl.max_batch, lay, f), 1024, 1024,
                               stage_model=q.model(lay))
                full.append(((lay.nodes, e.power_w / e.tokens_per_s, lay.gpus), lay))
        choices, _ = best_layouts([gpu], llm, 128, 1024, 1024, max_nodes=3, predictor=PRED)
        assert choices[0].layout == min(full, key=lambda t: t[0])[1]
