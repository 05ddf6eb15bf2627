"""Each question (predict, rank, batch, calibrate) is declared once (wattgpu/questions.py): the service's keys, its
bounds, the OpenAPI request schemas and the click options come from the declaration, and every number is bounded
before arithmetic (issue 40 item 1: a 400-digit JSON integer gave HTTP 500)."""
from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from wattgpu import WattGPUError, questions, rank
from wattgpu.cli import main

LLM = "meta-llama/Llama-3.1-8B-Instruct"
HUGE = int("9" * 400)


def _number_paths(req: questions.Request) -> list[str]:
    return [p.path for p in req.params if p.body is not None and p.kind in ("number", "integer", "group", "replicas", "switch")]


def _body(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    body = dict(base)
    if "." in path:
        group, key = path.split(".", 1)
        body[group] = {key: value}
    else:
        body[path] = value
    return body


@pytest.mark.parametrize("endpoint,req,base", [
    ("/v1/predict", questions.PREDICT, {"gpu": "NVIDIA L4", "llm": LLM}),
    ("/v1/rank", questions.RANK, {"llm": LLM, "gpus": ["NVIDIA L4"]}),
    ("/v1/predict/batch", questions.BATCH, {"rows": [{"gpu": "NVIDIA L4", "llm": LLM}]}),
])
def test_every_number_field_is_bounded_over_http(endpoint: str, req: questions.Request, base: dict[str, Any]) -> None:
    pytest.importorskip("starlette")
    from wattgpu.service import create_app

    from .service_helpers import call

    app = create_app()
    paths = _number_paths(req) + [f"workload.{k}" for k in ("max_batch", "qps", "concurrency", "input_tokens",
                                                             "output_tokens", "gpu_memory_utilization", "tp")]
    assert paths
    for path in paths:
        for bad in (HUGE, -HUGE) if path == "workload.qps" else (HUGE, -HUGE, 1e308):  # qps: any rate is a load
            r = call(app, "POST", endpoint, _body(base, path, bad))
            assert r.status_code == 422, (path, bad, r.text[:300])
            err = r.json()["error"]
            assert err["kind"] == "invalid_field" and err["field"] == path, (path, err)
            assert len(err["message"]) < 300 and "\n" not in err["message"]


def test_the_service_accepts_exactly_the_declared_keys() -> None:
    from wattgpu.service import inputs as I
    from wattgpu.service.openapi import openapi_document

    assert I.PREDICT_KEYS == questions.PREDICT.body_keys() and I.RANK_KEYS == questions.RANK.body_keys()
    assert I.BATCH_KEYS == questions.BATCH.body_keys()
    schemas = openapi_document()["components"]["schemas"]
    for name, req in (("PredictRequest", questions.PREDICT), ("RankRequest", questions.RANK),
                      ("BatchRequest", questions.BATCH)):
        assert set(schemas[name]["properties"]) == req.body_keys()
        assert schemas[name]["required"] == list(req.required)
    assert set(schemas["Sla"]["properties"]) == questions.PREDICT.nested_keys("sla")
    # bounds in the schema are the declaration's
    prop = schemas["RankRequest"]["properties"]["max_model_len"]
    assert prop["maximum"] == questions.RANK.param("max_model_len").rule.hi  # type: ignore[union-attr]


def test_the_python_api_and_the_cli_refuse_huge_numbers_by_name() -> None:
    for key in ("max_itl_ms", "max_ttft_ms", "max_model_len", "replicas", "max_utilization", "usd_per_kwh", "pue",
                "usd_per_gpu_hour", "gco2_per_kwh"):
        kwargs: dict[str, Any] = {key: HUGE}
        with pytest.raises(WattGPUError, match=key):
            rank(LLM, gpus=["NVIDIA L4"], **kwargs)
    for flag in ("--max-model-len", "--replicas", "--max-itl-ms", "--usd-per-kwh"):
        r = CliRunner().invoke(main, ["rank", "--llm", LLM, "--gpus", "NVIDIA L4", flag, "9" * 400])
        assert r.exit_code == 2, (flag, r.output)
        assert r.output.count("\n") == 1 and r.output.startswith("error:"), (flag, r.output)


def test_click_options_come_from_the_declarations() -> None:
    from wattgpu.cli import calibrate, predict, rank_cmd

    for cmd, reqs in ((predict, (questions.PREDICT,)), (rank_cmd, (questions.RANK,)),
                      (calibrate, (questions.CALIBRATE,))):
        opts = {o.opts[0]: o for o in cmd.params if isinstance(o, click.Option)}
        for req in reqs:
            for p in req.params:
                if p.flag is None:
                    continue
                assert p.flag in opts, (cmd.name, p.flag)
                assert opts[p.flag].help == p.doc, (cmd.name, p.flag)
    opts = {o.opts[0]: o for o in predict.params if isinstance(o, click.Option)}
    for p in questions.WORKLOAD_OPTIONS:
        assert opts[str(p.flag)].help == p.doc and opts[str(p.flag)].default == p.default


def test_qps_means_server_is_one_rule() -> None:
    assert questions.default_kind({"qps": 1.0}) == "server"
    assert questions.default_kind({}) == "offline"
    assert questions.default_kind({"kind": "closed_loop", "qps": None}) == "closed_loop"


def test_dtype_is_one_declared_choice_for_cli_service_and_openapi() -> None:
    """dtype's spellings come from its rule (the names, their aliases, any case) on every surface."""
    from wattgpu.quant import DTYPE_ALIASES, DTYPE_OVERRIDES
    from wattgpu.service.openapi import openapi_document

    rule = questions.DTYPE.rule
    assert set(rule.spellings) == {"auto", *DTYPE_OVERRIDES, *DTYPE_ALIASES}
    assert questions.DTYPE.check("BF16") == "bfloat16" and questions.DTYPE.check("Auto") == "auto"
    assert questions.DTYPE.check("AWQ") == "int4"
    with pytest.raises(WattGPUError, match="dtype"):
        questions.DTYPE.check("int3")
    enum = openapi_document()["components"]["schemas"]["PredictRequest"]["properties"]["dtype"]["enum"]
    assert enum == list(rule.spellings)
    base = ["predict", "--llm", LLM, "--gpu", "NVIDIA L4", "--json"]
    outs = {}
    for spelling in ("bfloat16", "BF16", "Bfloat16"):
        r = CliRunner().invoke(main, [*base, "--dtype", spelling])
        assert r.exit_code == 0, (spelling, r.output)
        outs[spelling] = r.output
    assert len(set(outs.values())) == 1, "every spelling of one dtype must answer the same"
    bad = CliRunner().invoke(main, [*base, "--dtype", "int3"])
    assert bad.exit_code == 2 and "--dtype" in bad.output
