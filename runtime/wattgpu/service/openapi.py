"""The OpenAPI 3.1 description of the service, generated from the runtime's declarations: request bodies from
:mod:`wattgpu.questions`, workload fields from :mod:`wattgpu.workload`'s rules, results from
:mod:`wattgpu.record`; and a small human docs page."""
from __future__ import annotations

import html
import json
from dataclasses import MISSING, fields
from typing import Any

from .. import questions as Q
from .. import record
from ..rules import ChoiceRule, NumberRule
from ..workload import WORKLOAD_CHOICES, WORKLOAD_NUMBERS, Workload
from .inputs import MAX_BATCH_ROWS, MAX_BODY_BYTES



def _number_schema(rule: NumberRule, nullable: bool) -> dict[str, Any]:
    """A JSON Schema number with the rule's bounds."""
    base = "integer" if rule.integer else "number"
    out: dict[str, Any] = {"type": [base, "null"] if nullable else base}
    out["exclusiveMinimum" if rule.open_lo else "minimum"] = int(rule.lo) if rule.integer else rule.lo
    out["maximum"] = int(rule.hi) if rule.integer else rule.hi  # the largest double where any finite value is a load
    return out


def _workload_schema() -> dict[str, Any]:
    """The Workload object: each field's type, bounds, choices and default from wattgpu.workload's rules."""
    props: dict[str, Any] = {}
    for f in fields(Workload):
        if f.name in WORKLOAD_NUMBERS:
            rule = WORKLOAD_NUMBERS[f.name]
            prop = _number_schema(rule, rule.optional)
        else:
            prop = {"type": "string", "enum": list(WORKLOAD_CHOICES[f.name].spellings)}
        if f.default is not MISSING:
            prop["default"] = f.default
        props[f.name] = prop
    props["kind"]["description"] = "Default: server when qps is given, else offline (as on the command line)."
    return {"type": "object", "properties": props, "additionalProperties": False,
            "description": "Workload fields (wattgpu.Workload); unknown fields are refused by name."}


def _param_schema(p: Q.Param, ref: Any) -> dict[str, Any]:
    """A request field's JSON Schema from its declaration (wattgpu.questions)."""
    kind = p.kind
    if kind in ("number", "integer"):
        assert isinstance(p.rule, NumberRule)
        out = _number_schema(p.rule, p.default is None)
    elif kind == "boolean":
        out = {"type": "boolean"}
    elif kind == "choice":
        assert isinstance(p.rule, ChoiceRule)
        out = {"type": "string", "enum": list(p.rule.spellings)}
    elif kind == "switch":
        assert isinstance(p.rule, NumberRule)
        out = {"oneOf": [{"type": "boolean"}, _number_schema(p.rule, False),
                         {"type": "string", "enum": sorted(Q.SWITCH_WORDS)}]}
    elif kind in ("group", "replicas"):
        assert isinstance(p.rule, NumberRule)
        out = {"oneOf": [_number_schema(p.rule, False), {"type": "string", "enum": ["auto"]}]}
    elif kind == "gpu":
        out = ref("Gpu")
    elif kind == "llm":
        out = ref("Llm")
    elif kind == "gpus":
        out = {"type": "array", "items": ref("Gpu"), "maxItems": 10_000}
    elif kind == "workload":
        out = ref("Workload")
    elif kind == "rows":
        out = {"type": "array", "minItems": 1, "maxItems": MAX_BATCH_ROWS, "items": {
            "type": "object", "required": ["gpu", "llm"], "additionalProperties": False,
            "properties": {"gpu": ref("Gpu"), "llm": ref("Llm"), "workload": ref("Workload")}}}
    else:
        out = {"type": "string"}
    if "$ref" not in out:
        if p.default is not None:
            out["default"] = p.default
        out["description"] = p.doc
    return out


def request_schema(req: Q.Request, ref: Any) -> dict[str, Any]:
    """The HTTP body of question ``req``: its top-level fields, and nested groups (``sla``) by reference."""
    props: dict[str, Any] = {}
    for p in req.params:
        if p.body is None:
            continue
        if "." in p.path:
            group = p.path.split(".")[0]
            props[group] = ref(group.capitalize())
        else:
            props[p.path] = _param_schema(p, ref)
    return {"type": "object", "required": list(req.required), "additionalProperties": False, "properties": props,
            "description": req.doc}


def group_schema(req: Q.Request, group: str) -> dict[str, Any]:
    """A nested object of a request body (``sla``) from its declared fields."""
    props = {p.path.split(".", 1)[1]: _param_schema(p, None) for p in req.params
             if p.body is not None and p.path.startswith(group + ".")}
    return {"type": "object", "additionalProperties": False, "properties": props}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document served at ``GET /openapi.json``."""
    from .. import __version__

    ref = lambda name: {"$ref": f"#/components/schemas/{name}"}  # noqa: E731
    err = lambda text: {"description": text, "content": {"application/json": {"schema": ref("Error")}}}  # noqa: E731
    errors = {"400": err("Malformed JSON, or a body that is not a JSON object"),
              "404": err("Unknown GPU or LLM; `matches` lists the close catalog names"),
              "413": err(f"Body over {MAX_BODY_BYTES} bytes (1 MiB)"),
              "422": err("An invalid field (named in `field`), a path-like name, or a model that does not fit"),
              "405": err("The method is not the endpoint's (each endpoint takes one method)"),
              "408": err("The request headers or body did not arrive within their deadline (10 s each)"),
              "500": err("A fault in WattGPU itself, never expected: the message asks for a report"),
              "503": err("Too many requests in flight or bodies arriving (see the Retry-After header), or damaged "
                         "model files"),
              "504": err("The request took longer than the server's timeout")}
    get_errors = {c: errors[c] for c in ("405", "408", "500", "503")}
    body = lambda name: {"required": True, "content": {"application/json": {"schema": ref(name)}}}  # noqa: E731
    ok = lambda text, schema: {"description": text,  # noqa: E731
                               "content": {"application/json": {"schema": schema}}}
    sla = {**group_schema(Q.PREDICT, "sla"), "description": "Latency SLA; each limit in ms or s (not both). The "
           "engine batch cap is searched to meet it."}
    gpu = {"oneOf": [{"type": "string", "description": "Catalog name or alias (GET /v1/gpus)"},
                     {"type": "object", "description": "Inline GPU spec: the fields of a GPU spec JSON file "
                      "(name, tdp_w, memory_size_gb, memory_bandwidth_gb_s, fp16_tflops, transistors_million, "
                      "release_year, …)"}]}
    llm = {"oneOf": [{"type": "string", "description": "Catalog id (GET /v1/llms)"},
                     {"type": "object", "description": "Inline Hugging Face config.json content"}]}
    schemas: dict[str, Any] = {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["kind", "field", "message"], "properties": {
                "kind": {"type": "string"}, "field": {"type": "string"}, "message": {"type": "string"},
                "matches": {"type": "array", "items": {"type": "string"}}}}}},
        "Workload": _workload_schema(),
        "Gpu": gpu, "Llm": llm, "Sla": sla,
        "PredictRequest": request_schema(Q.PREDICT, ref),
        "RankRequest": request_schema(Q.RANK, ref),
        "BatchRequest": request_schema(Q.BATCH, ref),
        "Prediction": {**record.json_schema(record.PREDICTION), "description": (
            "Exactly `wattgpu predict --json`: Prediction.to_dict(prices) (fields declared in wattgpu.record), "
            "and `sla` when an SLA was given.")},
        "LayoutPrediction": {**record.json_schema(record.LAYOUT_PREDICTION), "description": (
            "`wattgpu predict --json` with a layout (pp, dp, ep or nodes): the layout anchored on the learned models "
            "(wattgpu.layout_predict; fields declared in wattgpu.record.LAYOUT_PREDICTION), and `sla` when an SLA "
            "was given.")},
        "RankCandidate": {**record.json_schema((*record.PREDICTION, *record.RANK_ONLY)), "description":
                          "A prediction plus the rank-only fields (wattgpu.record.RANK_ONLY)."},
        "RankEntry": {**record.json_schema((*record.PREDICTION, *(o for o in record.RANK_ONLY if o.name != "rank"))),
                      "description": "An excluded GPU's entry: a rank candidate without `rank`."},
        "RankResult": {"type": "object", "description": "Exactly `wattgpu rank --json` (RankResult.to_dict()).",
                       "required": ["llm", "candidates", "excluded"],
                       "properties": {"llm": {"type": "string"}, "best": {"type": ["string", "null"]},
                                      "candidates": {"type": "array", "items": ref("RankCandidate")},
                                      "excluded": {"type": "array", "items": {"type": "object", "properties": {
                                          "prediction": {"oneOf": [{"type": "null"}, ref("RankEntry")]}}}}}},
        "LayoutRanking": {"type": "object", "description": "`wattgpu rank --parallel auto --json` "
                          "(LayoutRanking.to_dict(), the same figures): the least-energy layout per GPU type.",
                          "required": ["llm", "method", "candidates", "excluded"],
                          "properties": {"llm": {"type": "string"}, "method": {"type": "string"},
                                         "max_nodes": {"type": "integer"}, "interconnect": {"type": "string"},
                                         "candidates": {"type": "array",
                                                        "items": record.json_schema(record.LAYOUT_CANDIDATE)},
                                         "excluded": {"type": "array", "items": {"type": "object"}}}},
        "BatchResult": {"type": "object", "required": ["results", "predicted", "failed"], "properties": {
            "results": {"type": "array", "items": {"type": "object", "description":
                        "{row, prediction} or {row, error}, in the order of the rows", "properties": {
                            "row": {"type": "integer"}, "prediction": ref("Prediction"), "error": ref("Error")}}},
            "predicted": {"type": "integer"}, "failed": {"type": "integer"}}},
    }
    any_list = {"type": "array", "items": {"type": "object"}}
    paths = {
        "/healthz": {"get": {"summary": "Liveness", "operationId": "healthz", "responses": {
            "200": ok("The server is up", {"type": "object", "properties": {"status": {"type": "string"},
                                                                            "version": {"type": "string"}}}),
            **get_errors}}},
        "/v1/gpus": {"get": {"summary": "Catalog GPUs (= wattgpu gpus --json)", "operationId": "gpus",
                             "responses": {"200": ok("Every catalog GPU", any_list), **get_errors}}},
        "/v1/llms": {"get": {"summary": "Catalog LLMs (= wattgpu llms --json)", "operationId": "llms",
                             "responses": {"200": ok("Every catalog LLM", any_list), **get_errors}}},
        "/v1/predict": {"post": {"summary": "One GPU, one LLM (= wattgpu predict --json)", "operationId": "predict",
                                 "requestBody": body("PredictRequest"),
                                 "responses": {"200": ok("The prediction (with pp, dp, ep or nodes: the layout's)",
                                                         {"oneOf": [ref("Prediction"), ref("LayoutPrediction")]}),
                                               **errors}}},
        "/v1/predict/batch": {"post": {"summary": f"Up to {MAX_BATCH_ROWS:,} rows in one vectorised pass",
                                       "operationId": "predictBatch", "requestBody": body("BatchRequest"),
                                       "responses": {"200": ok("One result per row", ref("BatchResult")), **errors}}},
        "/v1/predict/batch.csv": {"post": {
            "summary": f"The CSV of `wattgpu predict --input` (<= {MAX_BATCH_ROWS:,} rows, 1 MiB)",
            "operationId": "predictBatchCsv",
            "requestBody": {"required": True, "content": {"text/csv": {"schema": {"type": "string", "description":
                            "A header with llm, gpu and any input column of `wattgpu predict --input`"}}}},
            "responses": {"200": {"description": "The input columns, the output columns (wattgpu.record) and "
                                                 "`error` per row", "content": {"text/csv": {"schema": {
                                                     "type": "string"}}}}, **errors}}},
        "/v1/rank": {"post": {"summary": "Rank GPUs for one LLM (= wattgpu rank --json)", "operationId": "rank",
                              "requestBody": body("RankRequest"),
                              "responses": {"200": ok("Candidates and excluded GPUs (with parallel = auto: the layout ranking)",
                                                   {"oneOf": [ref("RankResult"), ref("LayoutRanking")]}), **errors}}},
    }
    return {"openapi": "3.1.0",
            "info": {"title": "WattGPU", "version": __version__,
                     "description": "Mean GPU power, inter-token latency and time to first token of serving an "
                                    "LLM on NVIDIA GPUs, predicted from public metadata."},
            "paths": paths, "components": {"schemas": schemas}}


def docs_html(spec: dict[str, Any]) -> str:
    """A plain HTML page listing each endpoint and its request schema (no scripts, no CDN)."""
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'><title>WattGPU API</title>"
             "<link rel='stylesheet' href='/static/style.css'></head><body><main>",
             "<h1>WattGPU API</h1><p>Machine-readable: <a href='/openapi.json'>/openapi.json</a> (OpenAPI 3.1). "
             "The page: <a href='/'>/</a>. Errors are <code>{\"error\": {\"kind\", \"field\", \"message\"}}</code>.</p>"]
    schemas = spec["components"]["schemas"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            parts.append(f"<h2><code>{method.upper()} {html.escape(path)}</code></h2><p>{html.escape(op['summary'])}</p>")
            req = op.get("requestBody")
            if req and "application/json" not in req["content"]:  # the batch CSV: text, described in words
                parts.append(f"<p>Request body ({html.escape(', '.join(req['content']))}): "
                             f"{html.escape(next(iter(req['content'].values()))['schema']['description'])}</p>")
            elif req:
                name = req["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
                parts.append(f"<details><summary>Request body ({name})</summary><pre>"
                             f"{html.escape(json.dumps(schemas[name], indent=2))}</pre></details>")
            codes = ", ".join(f"{c} {html.escape(r['description'])}" for c, r in op["responses"].items())
            parts.append(f"<p>Responses: {codes}</p>")
    parts.append("</main></body></html>")
    return "".join(parts)
