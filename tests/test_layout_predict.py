"""`predict` with a layout (issue 41 item 1): pp, dp, ep, nodes and interconnect declared once (questions.LAYOUT),
answered from layout.py's terms — the same code the rank search calls — on the CLI, over HTTP and in JSON; a layout
that cannot hold the model is refused naming the field and the fix."""
from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from wattgpu import Predictor
from wattgpu import layout as L
from wattgpu import layout_predict as LP
from wattgpu import record
from wattgpu.cli import main
from wattgpu.errors import SpecValidationError
from wattgpu.layout_search import best_layouts
from wattgpu.specs import default_catalog
from wattgpu.workload import Workload

from .service_helpers import call, cli_json

CAT = default_catalog()
PRED = Predictor()
R1 = "deepseek-ai/DeepSeek-R1-0528"
QWEN = "Qwen/Qwen3-235B-A22B-Instruct-2507"
R1_H100 = ["predict", "--llm", R1, "--gpu", "H100 SXM", "--tp", "8", "--pp", "2", "--input-tokens", "1024",
           "--output-tokens", "1024", "--max-batch", "128"]
QWEN_H200 = ["predict", "--llm", QWEN, "--gpu", "H200 SXM", "--tp", "1", "--ep", "8", "--dp", "8"]


def test_r1_on_two_h100_nodes_answers_every_figure() -> None:
    p = cli_json(*R1_H100)
    assert set(p) == {o.name for o in record.LAYOUT_PREDICTION}
    assert p["method"] == "anchored" and p["nodes"] == 2 and p["gpus"] == 16
    assert p["itl_s"] >= p["roofline"]["itl_s"] and p["ttft_s"] >= p["roofline"]["ttft_s"]  # the bound holds
    assert p["layout"] == {"tp": 8, "pp": 2, "dp": 1, "ep": 1, "nodes": 2, "gpus_per_node": 8,
                           "interconnect": "InfiniBand NDR"}
    h100 = CAT.gpu("H100 SXM")
    assert L.idle_power_w(h100) <= p["power_w"] <= h100.tdp_w
    assert p["power_per_node_w"] == pytest.approx(8 * p["power_w"])
    assert p["total_power_w"] == pytest.approx(16 * p["power_w"])
    assert p["energy"]["j_per_token"] == pytest.approx(p["total_power_w"] / p["throughput_tok_s"])
    assert p["weight_gb_per_gpu"] * 16 * 2**30 == pytest.approx(
        CAT.llm(R1).total_params_b * 1e9 * CAT.llm(R1).weight_bytes_per_param)
    assert p["kv_sequences"] >= 1 and p["effective_batch"] == 128
    assert 0 < p["bubble"] < 1 and p["p2p_s_per_step"] > 0
    args = p["launch_args"]
    assert args[:3] == ["vllm", "serve", R1]
    assert args[args.index("--tensor-parallel-size") + 1] == "8"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert "--enable-expert-parallel" not in args
    assert any("multi-node" in w for w in p["warnings"])


def test_the_table_says_what_the_json_says() -> None:
    out = CliRunner().invoke(main, R1_H100)
    assert out.exit_code == 0, out.output
    p = cli_json(*R1_H100)
    assert "TP8 × PP2 on 2 nodes: 16 GPUs" in out.output
    assert f"{p['itl_s'] * 1e3:.1f} ms/token" in out.output
    assert f"{p['power_w']:.0f} W per GPU" in out.output
    assert "--pipeline-parallel-size 2" in out.output and "note: anchored:" in out.output


def test_expert_parallel_as_a_switch_or_a_degree() -> None:
    by_degree = cli_json(*QWEN_H200)
    by_switch = cli_json(*QWEN_H200[:-4], "--ep", "on", "--dp", "8")
    assert by_degree == by_switch
    assert by_degree["layout"]["ep"] == 8 and by_degree["alltoall_s_per_step"] > 0
    assert "--enable-expert-parallel" in by_degree["launch_args"]
    assert by_degree["launch_args"][by_degree["launch_args"].index("--data-parallel-size") + 1] == "8"


def test_predict_and_the_rank_search_call_the_same_code() -> None:
    """The layout the rank search picks, asked of predict, gives the rank's figures."""
    gpu, llm = CAT.gpu("B200"), CAT.llm(R1)
    choices, _ = best_layouts([gpu], llm, 128, 1024, 1024, max_nodes=2, predictor=PRED)
    c = choices[0]
    assert c.estimate.method == "anchored"
    lay = c.layout
    argv = ["predict", "--llm", R1, "--gpu", "B200", "--tp", str(lay.tp), "--dp", str(lay.dp), "--pp", str(lay.pp),
            "--ep", str(lay.ep), "--nodes", str(lay.nodes), "--input-tokens", "1024", "--output-tokens", "1024",
            "--max-batch", "128"]
    p = cli_json(*argv)
    assert p["itl_s"] == pytest.approx(c.estimate.itl_s, rel=1e-12)
    assert p["power_w"] == pytest.approx(c.estimate.power_per_gpu_w, rel=1e-12)
    assert p["throughput_tok_s"] == pytest.approx(c.estimate.tokens_per_s, rel=1e-12)
    assert p["energy"]["j_per_token"] == pytest.approx(c.j_per_token, rel=1e-12)
    assert p["kv_sequences"] == c.sequences


def test_a_layout_that_cannot_hold_the_model_names_the_field_and_the_fix() -> None:
    out = CliRunner().invoke(main, ["predict", "--llm", R1, "--gpu", "H100 SXM", "--tp", "8", "--ep", "on"])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert "field 'dp'" in out.output and "does not fit" in out.output and "tp 8, dp 2, ep on, nodes 2" in out.output
    # the tensor-parallel path points at a layout too
    out = CliRunner().invoke(main, ["predict", "--llm", R1, "--gpu", "H100 SXM", "--tp", "8"])
    assert out.exit_code == 2 and "a layout across nodes: tp 8, pp 2, nodes 2" in out.output


@pytest.mark.parametrize("argv, words", [
    (["--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100 SXM", "--dp", "2", "--ep", "on"], "dense"),
    (["--llm", R1, "--gpu", "H100 SXM", "--tp", "8", "--pp", "2", "--nodes", "1"], "at least 2"),
    (["--llm", R1, "--gpu", "H200 SXM", "--tp", "8", "--interconnect", "xdr"], "interconnect"),
    (["--llm", R1, "--gpu", "H200 SXM", "--tp", "8", "--ep", "maybe"], "ep"),
    (["--llm", R1, "--gpu", "H200 SXM", "--tp", "4", "--dp", "2", "--ep", "4"], "tp × dp"),
    (["--llm", R1, "--gpu", "H200 SXM", "--pp", "0"], "pp"),
    (["--llm", R1, "--gpu", "H200 SXM", "--tp", "8", "--pp", "2", "--engine", "tgi"], "vllm"),
])
def test_bad_layouts_are_one_line_errors(argv: list[str], words: str) -> None:
    out = CliRunner().invoke(main, ["predict", *argv])
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert words in out.output and len(out.output.strip().splitlines()) == 1


def test_without_a_layout_predict_is_unchanged() -> None:
    base = ["predict", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100 SXM", "--tp", "2"]
    assert cli_json(*base, "--pp", "1", "--dp", "1", "--ep", "off") == cli_json(*base)


@pytest.mark.parametrize("predictor", [None, PRED], ids=["roofline", "anchored"])
def test_server_load_more_rate_more_work_and_overload_said(predictor: Predictor | None) -> None:
    gpu, llm = CAT.gpu("H200 SXM"), CAT.llm(QWEN)
    lay = LP.layout_of(gpu, llm, 1, dp=8, ep=True)
    prev = None
    for qps in (0.01, 0.1, 1.0, 4.0, 16.0, 64.0):
        p = LP.predict_layout(gpu, llm, Workload(kind="server", qps=qps), lay, predictor=predictor)
        assert p.method == ("roofline" if predictor is None else "anchored")
        assert L.idle_power_w(gpu) <= p.power_per_gpu_w <= gpu.tdp_w
        if qps >= p.max_qps:  # overloaded: said, and held at capacity (checked below)
            assert any(w.startswith("overloaded:") for w in p.warnings)
            break
        assert p.throughput_tok_s == pytest.approx(qps * 256)
        assert p.sequences == pytest.approx(qps * p.e2e_latency_s, rel=1e-6)  # Little's law
        if prev is not None:
            # more load: more sequences in flight, never a shorter step (power may dip at the top: the all-to-all
            # share of the step grows, and the roofline counts link time as not busy; see the report)
            assert p.sequences > prev.sequences and p.itl_s >= prev.itl_s * (1 - 1e-12)
            assert p.energy()["j_per_token"] <= prev.energy()["j_per_token"] * (1 + 1e-9)
        prev = p
    assert prev is not None and prev.sequences > 1  # the loop saw real load before any overload
    over = LP.predict_layout(gpu, llm, Workload(kind="server", qps=prev.max_qps * 2), lay, predictor=predictor)
    assert any(w.startswith("overloaded:") for w in over.warnings)
    assert over.throughput_tok_s == pytest.approx(over.at_capacity.tokens_per_s)


def test_closed_loop_beyond_the_cap_is_cut_and_said() -> None:
    gpu, llm = CAT.gpu("H200 SXM"), CAT.llm(QWEN)
    lay = LP.layout_of(gpu, llm, 1, dp=8, ep=True)
    p = LP.predict_layout(gpu, llm, Workload(kind="closed_loop", concurrency=10_000, max_batch=16), lay)
    assert p.sequences == 128 and any("cut to 128" in w for w in p.warnings)
    small = LP.predict_layout(gpu, llm, Workload(kind="closed_loop", concurrency=32, max_batch=16), lay)
    assert small.throughput_tok_s <= p.throughput_tok_s and small.utilization == pytest.approx(0.25)


def test_layout_of_defaults_nodes_and_checks() -> None:
    h100, r1 = CAT.gpu("H100 SXM"), CAT.llm(R1)
    assert LP.layout_of(h100, r1, 8, pp=2).nodes == 2
    assert LP.layout_of(h100, r1, 4, dp=4, ep=True).ep == 16
    with pytest.raises(SpecValidationError) as e:
        LP.layout_of(h100, r1, 8, pp=3, nodes=2)
    assert e.value.field == "nodes"
    assert not LP.wants_layout({"pp": 1, "dp": None, "ep": False}) and LP.wants_layout({"ep": "on"})
    assert LP.wants_layout({"nodes": 2}) and not LP.wants_layout({"ep": 1})


def test_service_answers_what_the_cli_answers() -> None:
    pytest.importorskip("starlette", reason="the service tests need the serve extra")
    pytest.importorskip("httpx")
    from wattgpu.service import create_app

    app = create_app()
    body = {"gpu": "H100 SXM", "llm": R1, "pp": 2, "workload": {"tp": 8, "input_tokens": 1024,
                                                                  "output_tokens": 1024, "max_batch": 128}}
    r = call(app, "POST", "/v1/predict", body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(*R1_H100)
    q = call(app, "POST", "/v1/predict", {"gpu": "H200 SXM", "llm": QWEN, "dp": 8, "ep": True})
    assert q.status_code == 200 and q.json() == cli_json(*QWEN_H200)
    for bad, field in (({"gpu": "H100 SXM", "llm": R1, "ep": True, "workload": {"tp": 8}}, "dp"), ({**body, "ep": "maybe"}, "ep"),
                       ({**body, "nodes": 10**400}, "nodes"), ({**body, "interconnect": "pigeon"}, "interconnect")):
        r = call(app, "POST", "/v1/predict", bad)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field, r.text


def test_json_fields_are_documented() -> None:
    from .helpers import REPO

    text = (REPO / "docs" / "json.md").read_text()
    assert record.undocumented(text, record.LAYOUT_PREDICTION) == []
    assert record.undocumented(text, record.LAYOUT_CANDIDATE) == []


def test_energy_is_finite_and_positive_on_every_kind() -> None:
    gpu, llm = CAT.gpu("B200"), CAT.llm(R1)
    lay = LP.layout_of(gpu, llm, 8)
    for wl in (Workload(), Workload(kind="server", qps=0.5), Workload(kind="closed_loop", concurrency=4)):
        e = LP.predict_layout(gpu, llm, wl, lay).energy()
        assert all(math.isfinite(e[k]) and e[k] > 0 for k in ("j_per_token", "wh_per_request", "kwh_per_mtok"))


def test_the_page_asks_a_layout_with_the_declared_inputs_and_shows_declared_fields() -> None:
    """The page's one-layout form has a control for every layout input questions.LAYOUT declares, and shows
    fields of record.LAYOUT_PREDICTION at their declared scale."""
    import json
    import re

    from wattgpu.questions import LAYOUT

    from .helpers import REPO

    static = REPO / "runtime" / "wattgpu" / "service" / "static"
    page, js = (static / "index.html").read_text(), (static / "app.js").read_text()
    for param in LAYOUT:
        assert f'id="{param.name}"' in page, param.name
        assert f'"{param.name}"' in js[js.index("async function predictLayout"):], param.name
    shown = re.search(r"const LAYOUT_OUT = (\[.*?\]);\n", js, re.S)
    assert shown is not None
    fields = {o.name: o for o in record.LAYOUT_PREDICTION}
    for name, *rest in json.loads(shown.group(1).replace("\n", " ")):
        top = name.split(".")[0]
        assert top in fields, name
        if rest and "." not in name:
            assert rest[0] == fields[name].scale, name
