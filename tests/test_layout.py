"""Layouts TP × PP × DP (+EP): validation with clear errors, the memory fit, and the physics contracts of the
sense sweep on every layout (bubble, all-to-all bytes, slowest link, power bounds)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from wattgpu import layout as L
from wattgpu.errors import SpecValidationError
from wattgpu.specs import default_catalog

ROOT = Path(__file__).resolve().parents[1]
CAT = default_catalog()
R1 = CAT.llm("deepseek-ai/DeepSeek-R1-0528")
H100 = CAT.gpu("H100 SXM")
H200 = CAT.gpu("H200 SXM")
LLAMA8B = CAT.llm("meta-llama/Llama-3.1-8B-Instruct")


def test_links_match_the_catalog_csv() -> None:
    rows = list(csv.DictReader((ROOT / "data/catalog/internode_links.csv").open()))
    assert [r["name"] for r in rows] == [link.name for link in L.INTERNODE_LINKS]
    for r, link in zip(rows, L.INTERNODE_LINKS):
        assert float(r["gb_s_per_direction"]) == link.gb_s
        assert float(r["latency_us"]) * 1e-6 == pytest.approx(link.latency_s)
        assert tuple(r["aliases"].split("|")) == link.aliases
        assert r["sources"].strip()


@pytest.mark.parametrize("kwargs, field", [
    (dict(tp=0), "tp"), (dict(pp=1.5), "pp"), (dict(dp=True), "dp"), (dict(tp=2, dp=2, ep=2), "ep"),
    (dict(nodes=0), "nodes"), (dict(interconnect="token ring"), "interconnect"),
])
def test_bad_layout_fields_are_named(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecValidationError) as e:
        L.Layout(**kwargs)
    assert e.value.field == field


@pytest.mark.parametrize("lay, field, words", [
    (L.Layout(tp=8, pp=2, nodes=1), "nodes", "at least 2"),
    (L.Layout(tp=8, pp=1, nodes=2), "nodes", "fills every node"),
    (L.Layout(tp=16, nodes=2), "tp", "pipeline"),
    (L.Layout(tp=8, pp=64, nodes=64), "pp", "61"),
    (L.Layout(tp=3), "tp", "attention heads"),
])
def test_layout_errors_name_the_field_and_the_fix(lay: L.Layout, field: str, words: str) -> None:
    err = L.layout_error(H100, R1, lay)
    assert err is not None and err.field == field and words in str(err)


def test_expert_rules() -> None:
    assert "dense" in str(L.layout_error(H100, LLAMA8B, L.Layout(tp=8, ep=8)))
    mixtral = CAT.llm("mistralai/Mixtral-8x7B-Instruct-v0.1")  # 8 experts
    assert L.layout_error(H100, mixtral, L.Layout(tp=8, ep=8)) is None
    lay = L.Layout(tp=8, dp=2, ep=16, nodes=2)
    assert "divisor of" in str(L.layout_error(H100, mixtral, lay))


def test_memory_fit_splits_weights_and_experts() -> None:
    one = L.weight_bytes_per_gpu(R1, L.Layout(tp=8))
    assert L.weight_bytes_per_gpu(R1, L.Layout(tp=8, pp=2, nodes=2)) == pytest.approx(one / 2)
    # attention DP copies the dense weights, so EP over tp × dp holds more per GPU than TP over as many
    ep = L.weight_bytes_per_gpu(R1, L.Layout(tp=1, dp=8, ep=8))
    assert one < ep < 2 * one
    total = R1.total_params_b * 1e9 * R1.weight_bytes_per_param
    assert one * 8 == pytest.approx(total)
    assert not L.fit(H100, R1, L.Layout(tp=8), 4096).fits  # the "does not fit on 8 × H100"
    assert L.fit(H100, R1, L.Layout(tp=8, pp=2, nodes=2), 4096).fits
    assert L.fit(H200, R1, L.Layout(tp=8), 4096).fits


def test_more_stages_never_lower_the_bubble() -> None:
    # the same work (8 ms of layers) cut into pp stages, each boundary a 0.1 ms link; m micro-batches in flight
    for m in (1, 2, 4, 16, 64):
        b = [L.bubble_fraction(float(min(m, pp)), float(pp), 8e-3 / pp, 1e-4 * (pp - 1)) for pp in (1, 2, 4, 8, 16)]
        assert b[0] == 0.0 and all(x <= y for x, y in zip(b, b[1:])) and b[-1] < 1.0
    # more micro-batches than stages keep every stage busy; fewer leave the stages idle
    assert L.bubble_fraction(16.0, 4.0, 2e-3, 3e-4) == 0.0 < L.bubble_fraction(4.0, 4.0, 2e-3, 3e-4)
    assert L.bubble_fraction(1.0, 4.0, 2e-3, 0.0) == pytest.approx(0.75)


def test_a_decode_round_is_the_pipeline_in_steady_state() -> None:
    # vLLM keeps pp micro-batches in flight: a round is pp stage times plus the links, not fill + drain (2 pp − 1)
    assert L.pipeline_round_s(2.0, 2.0, 1e-3, 1e-4) == pytest.approx(2.1e-3)
    assert L.pipeline_round_s(8.0, 2.0, 1e-3, 1e-4) == pytest.approx(8e-3)  # stages saturated
    assert L.pipeline_round_s(1.0, 1.0, 1e-3, 0.0) == pytest.approx(1e-3)


def test_alltoall_bytes_grow_with_tokens_and_top_k() -> None:
    base = L.alltoall_bytes(64.0, 8.0, 7168.0, 8.0)
    assert L.alltoall_bytes(128.0, 8.0, 7168.0, 8.0) > base
    assert L.alltoall_bytes(64.0, 16.0, 7168.0, 8.0) > base
    assert L.alltoall_bytes(64.0, 8.0, 7168.0, 1.0) == 0.0
    assert L.alltoall_bytes(64.0, 8.0, 7168.0, 16.0) > base  # a larger group sends a larger share away


def _layouts() -> list[tuple[object, object, L.Layout]]:
    out = []
    for gpu in (H100, H200, CAT.gpu("B200"), CAT.gpu("NVIDIA A100 SXM4 80GB")):
        for llm in (R1, LLAMA8B, CAT.llm("Qwen/Qwen3-235B-A22B-Instruct-2507"),
                    CAT.llm("meta-llama/Llama-3.1-405B-Instruct")):
            for lay in L.candidate_layouts(gpu, llm, max_nodes=2):
                out.append((gpu, llm, lay))
    return out


LAYOUTS = _layouts()


def test_sweep_is_not_empty() -> None:
    assert len(LAYOUTS) > 200
    assert any(lay.pp > 1 and lay.ep > 1 and lay.nodes > 1 for _, _, lay in LAYOUTS)


def test_sense_sweep_on_every_layout() -> None:
    """The physics contract on every candidate layout: more load never less work, ITL never below the weight
    read, power between idle and TDP, nothing faster than its slowest link."""
    for gpu, llm, lay in LAYOUTS:
        prev = None
        for batch in (1, 8, 64, 256):
            e = L.estimate(gpu, llm, lay, batch, 512, 256)
            # ITL never below one stage's weight read × stages (a token passes every stage)
            floor = L.touched_weight_bytes(llm, lay, 1.0) * lay.pp / (gpu.memory_bandwidth_gb_s * 1e9)
            assert e.itl_s >= floor * (1 - 1e-9), (gpu.name, llm.name, lay)
            assert gpu.tdp_w * 0.1 <= e.power_per_gpu_w <= gpu.tdp_w
            assert e.power_per_node_w == pytest.approx(e.power_per_gpu_w * min(lay.gpus, lay.gpus_per_node))
            assert e.ttft_s > 0 and e.tokens_per_s > 0
            if prev is not None:  # more sequences: never less tokens/s, never a shorter step
                assert e.tokens_per_s >= prev.tokens_per_s * (1 - 1e-9), (gpu.name, llm.name, lay, batch)
                assert e.itl_s >= prev.itl_s * (1 - 1e-9)
            prev = e
            # slowest link: a stage boundary between nodes takes at least its bytes over the network
            if lay.nodes > 1 and lay.pp > 1:
                m = min(float(lay.pp), max(batch / lay.dp, 1.0))
                act = max(batch / lay.dp, 1.0) / m * llm.hidden_size * 2.0 / lay.tp
                assert e.p2p_s >= act / (lay.link.gb_s * 1e9)
            if lay.ep > lay.gpus_per_node:
                assert e.alltoall_s > 0


def test_a_slower_network_is_never_faster() -> None:
    lay = dict(tp=8, pp=2, nodes=2)
    fast = L.estimate(H100, R1, L.Layout(**lay, interconnect="xdr"), 128, 1024, 512)
    slow = L.estimate(H100, R1, L.Layout(**lay, interconnect="roce200"), 128, 1024, 512)
    assert slow.itl_s > fast.itl_s and slow.ttft_s > fast.ttft_s
    ep = dict(tp=8, dp=2, ep=16, nodes=2)
    assert L.estimate(H100, R1, L.Layout(**ep, interconnect="roce200"), 128, 1024, 512).alltoall_s > \
        L.estimate(H100, R1, L.Layout(**ep, interconnect="xdr"), 128, 1024, 512).alltoall_s


def test_every_catalog_llm_places_on_some_layout_up_to_4_nodes() -> None:
    missing = []
    for llm in CAT.llms:
        context = min(llm.max_position_embeddings or 2048, 2048)
        if not any(L.fit(g, llm, lay, context).fits for g in CAT.gpus for lay in L.candidate_layouts(g, llm, 4)):
            missing.append(llm.name)
    assert not missing


def test_vllm_flags() -> None:
    assert L.vllm_parallel_args(L.Layout(tp=8)) == ["--tensor-parallel-size", "8"]
    assert L.vllm_parallel_args(L.Layout(tp=4, pp=2, dp=2, ep=8, nodes=2)) == [
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--data-parallel-size", "2",
        "--enable-expert-parallel"]
