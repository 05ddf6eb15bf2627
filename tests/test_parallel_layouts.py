"""`rank --parallel auto` on the CLI and over HTTP: the same inputs, the same answer, vLLM's parallel flags."""
from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from wattgpu.cli import main

from .service_helpers import call, cli_json

R1 = "deepseek-ai/DeepSeek-R1-0528"
ARGV = ["rank", "--llm", R1, "--parallel", "auto", "--max-nodes", "2", "--gpus", "H100 SXM,H200 SXM,B200",
        "--input-tokens", "1024", "--output-tokens", "1024", "--max-batch", "256"]


def test_cli_table_names_the_layouts_and_the_launch_line() -> None:
    out = CliRunner().invoke(main, ARGV)
    assert out.exit_code == 0, out.output
    assert "H100 SXM5 80GB" in out.output and "on 2 nodes" in out.output  # needs two nodes of H100
    launch = [line for line in out.output.splitlines() if line.startswith("launch the top candidate")]
    assert launch and "--tensor-parallel-size" in launch[0]


def test_json_candidates_fit_and_carry_flags() -> None:
    res = cli_json(*ARGV)
    assert res["method"] == "anchored" and len(res["candidates"]) == 3
    assert all(c["method"] == "anchored" for c in res["candidates"])
    by_gpu = {c["gpu"]: c for c in res["candidates"]}
    h100 = by_gpu["NVIDIA H100 SXM5 80GB"]
    assert h100["nodes"] == 2 and h100["gpus"] == 16
    for c in res["candidates"]:
        lay, args = c["layout"], c["launch_args"]
        assert args[args.index("--tensor-parallel-size") + 1] == str(lay["tp"])
        assert ("--enable-expert-parallel" in args) == (lay["ep"] > 1)
        assert ("--pipeline-parallel-size" in args) == (lay["pp"] > 1)
        assert c["power_per_node_w"] == pytest.approx(c["power_w"] * min(8, c["gpus"]))
    j = [c["j_per_token"] for c in res["candidates"]]
    assert j == sorted(j)


def test_one_node_excludes_h100_for_r1() -> None:
    res = cli_json(*ARGV, "--max-nodes", "1")
    assert [x["gpu"] for x in res["excluded"]] == ["NVIDIA H100 SXM5 80GB"]
    assert "does not fit on up to 1 node" in res["excluded"][0]["reason"]


@pytest.mark.parametrize("flag, value", [("--max-nodes", "0"), ("--max-nodes", "65"), ("--interconnect", "carrier pigeon")])
def test_bad_search_inputs_are_refused_by_name(flag: str, value: str) -> None:
    out = CliRunner().invoke(main, [*ARGV, flag, value])
    assert out.exit_code != 0 and "Traceback" not in out.output
    assert flag in out.output or flag.lstrip("-").replace("-", "_") in out.output


def test_service_answers_what_the_cli_answers() -> None:
    pytest.importorskip("starlette", reason="the service tests need the serve extra")
    pytest.importorskip("httpx")
    from wattgpu.service import create_app

    app = create_app()
    body = {"llm": R1, "gpus": ["H100 SXM", "H200 SXM", "B200"], "parallel": "auto", "max_nodes": 2,
            "interconnect": "ndr", "workload": {"input_tokens": 1024, "output_tokens": 1024, "max_batch": 256}}
    r = call(app, "POST", "/v1/rank", body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(*ARGV)
    bad = call(app, "POST", "/v1/rank", {**body, "max_nodes": 0})
    assert bad.status_code in (400, 422) and "max_nodes" in bad.text


def test_measured_parallel_rows_are_built_once_and_scored_with_the_anchored_answer(tmp_path: Any) -> None:
    """wattgpu_train.parallel_rows is the one builder (tools/score_layouts.py writes the report from it): GPU names
    through data/gpu_map.csv, every v3 EP/DP row on its layout, every answer at or above its roofline bound."""
    pytest.importorskip("wattgpu_train")
    from wattgpu_train import parallel_rows as P

    from wattgpu import Predictor
    from wattgpu import layout as L

    names = P.gpu_names()
    assert names[("mlenergy_v3", "H100")] == "NVIDIA H100 SXM5 80GB"
    assert names[("mlenergy_v3", "B200")] == "NVIDIA B200 (HGX/DGX B200)"
    if not P.DATA.is_dir():
        pytest.skip(f"{P.DATA} not present (the shared measurements)")
    rows = P.rows()
    v3 = [r for r in rows if r.source == "mlenergy_v3"]
    assert len(v3) == 202 and sum(r.kind == "dp+ep" for r in v3) == 16
    assert all(r.gpu in set(names.values()) for r in rows)
    pred = Predictor()
    scored, skipped = P.score(rows, pred)
    assert len(scored) + sum(skipped.values()) == len(rows) and len(scored) >= 300
    for s in scored:
        gpu = pred.catalog.gpu(s.row.gpu)
        assert s.method == "anchored"
        assert s.itl_s >= s.roofline_itl_s * (1 - 1e-12)
        assert L.idle_power_w(gpu) * (1 - 1e-9) <= s.power_w <= gpu.tdp_w
    # a GPU the reviewed map lacks is a clear error naming the file
    bad = tmp_path / "gpu_map.csv"
    bad.write_text("source,source_gpu_name,catalog_gpu,evidence\n")
    with pytest.raises(ValueError, match="gpu_map.csv"):
        P.rows(gpu_map=bad)
