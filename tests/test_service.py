"""The HTTP service (issue 34): every body equals the CLI's --json, errors are data, the OpenAPI is valid.

Requests go through httpx's ASGI transport (in-process, no sockets); the live-uvicorn and browser
checks are in tests/test_service_live.py (slow tier).
"""
from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the service tests need the serve extra: pip install -e '.[serve]'")
httpx = pytest.importorskip("httpx", reason="the service tests need httpx (in the test extra)")

from wattgpu.service import create_app  # noqa: E402

from .helpers import REPO, run_py  # noqa: E402
from .service_helpers import call, cli_error, cli_json  # noqa: E402

LLM = "meta-llama/Llama-3.1-8B-Instruct"
HF_DIR = REPO / "tests" / "fixtures" / "hf_configs"


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app()


def _post(app: Any, path: str, body: Any) -> Any:
    r = call(app, "POST", path, body)
    assert r.headers["content-type"].startswith("application/json")
    return r


# ------------------------------------------------------------------ contract: the CLI's --json
PREDICT_CASES = [
    ({"gpu": "A30", "llm": LLM}, ["--gpu", "A30", "--llm", LLM]),
    ({"gpu": "L40S", "llm": "Qwen/Qwen2.5-7B-Instruct", "workload": {"qps": 0.5, "input_tokens": 1024},
      "sla": {"max_itl_ms": 40}, "usd_per_kwh": 0.12, "pue": 1.3},
     ["--gpu", "L40S", "--llm", "Qwen/Qwen2.5-7B-Instruct", "--qps", "0.5", "--input-tokens", "1024",
      "--max-itl-ms", "40", "--usd-per-kwh", "0.12", "--pue", "1.3"]),
    ({"gpu": "H100 SXM", "llm": LLM, "workload": {"kind": "closed_loop", "concurrency": 16, "tp": 2},
      "dtype": "fp8", "usd_per_gpu_hour": 2.5, "gco2_per_kwh": 400},
     ["--gpu", "H100 SXM", "--llm", LLM, "--workload", "closed_loop", "--concurrency", "16", "--tp", "2",
      "--dtype", "fp8", "--usd-per-gpu-hour", "2.5", "--gco2-per-kwh", "400"]),
    ({"gpu": "A100 SXM4 80GB", "llm": LLM, "workload": {"max_batch": 32, "output_tokens": 64},
      "sla": {"max_ttft_s": 0.5}},
     ["--gpu", "A100 SXM4 80GB", "--llm", LLM, "--max-batch", "32", "--output-tokens", "64", "--max-ttft-ms", "500"]),
]


@pytest.mark.parametrize("body,argv", PREDICT_CASES, ids=range(len(PREDICT_CASES)))
def test_predict_equals_cli_json(app: Any, body: dict[str, Any], argv: list[str]) -> None:
    r = _post(app, "/v1/predict", body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json("predict", *argv)
    assert ("sla" in r.json()) == ("sla" in body)


RANK_CASES = [
    ({"llm": LLM}, ["--llm", LLM]),
    ({"llm": "Qwen/Qwen2.5-7B-Instruct", "workload": {"qps": 2}, "sla": {"max_itl_ms": 50, "max_ttft_ms": 800},
      "gpus": ["A30", "L40S", "H100 SXM", "A10"], "sort": "power", "usd_per_kwh": 0.1},
     ["--llm", "Qwen/Qwen2.5-7B-Instruct", "--qps", "2", "--max-itl-ms", "50", "--max-ttft-ms", "800",
      "--gpus", "A30,L40S,H100 SXM,A10", "--sort", "power", "--usd-per-kwh", "0.1"]),
    ({"llm": LLM, "workload": {"qps": 20}, "replicas": "auto", "gpus": ["A30", "L4", "H100 SXM"]},
     ["--llm", LLM, "--qps", "20", "--replicas", "auto", "--gpus", "A30,L4,H100 SXM"]),
    ({"llm": LLM, "tp": "auto", "gpus": ["A30", "L4"]}, ["--llm", LLM, "--tp", "auto", "--gpus", "A30,L4"]),
    # a 70B model fits no single A30/L40S: without a tp, both fall back to tensor-parallel groups
    ({"llm": "meta-llama/Llama-3.1-70B-Instruct", "gpus": ["A30", "L40S"]},
     ["--llm", "meta-llama/Llama-3.1-70B-Instruct", "--gpus", "A30,L40S"]),
    # issue 32's options: the launch line's --max-model-len and the cost order
    ({"llm": LLM, "max_model_len": 4096, "sort": "cost", "usd_per_gpu_hour": 2.0, "gpus": ["A30", "L40S", "L4"]},
     ["--llm", LLM, "--max-model-len", "4096", "--sort", "cost", "--usd-per-gpu-hour", "2", "--gpus", "A30,L40S,L4"]),
]


@pytest.mark.parametrize("body,argv", RANK_CASES, ids=range(len(RANK_CASES)))
def test_rank_equals_cli_json(app: Any, body: dict[str, Any], argv: list[str]) -> None:
    r = _post(app, "/v1/rank", body)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json("rank", *argv)


@pytest.mark.parametrize("path,body", [("/v1/predict", PREDICT_CASES[1][0]), ("/v1/rank", RANK_CASES[1][0]),
                                       ("/v1/rank", {"llm": LLM, "workload": {"qps": 1.0}})])
def test_bodies_are_compact_json_with_sorted_keys(app: Any, path: str, body: dict[str, Any]) -> None:
    """The bytes themselves: compact separators, keys sorted, floats as Python writes them (what
    ``json.dumps(..., sort_keys=True, separators=(",", ":"))`` gives for the same answer)."""
    r = _post(app, path, body)
    assert r.status_code == 200, r.text
    assert r.content == json.dumps(r.json(), sort_keys=True, allow_nan=False, separators=(",", ":")).encode()


def test_rank_falls_back_to_groups_only_without_a_tp(app: Any) -> None:
    body = {"llm": "meta-llama/Llama-3.1-70B-Instruct", "gpus": ["A30", "L40S"]}
    assert _post(app, "/v1/rank", body).json()["tp"] == "auto"
    pinned = _post(app, "/v1/rank", {**body, "tp": 1}).json()
    assert pinned["tp"] == 1 and not pinned["candidates"]


def test_listings_equal_cli_json(app: Any) -> None:
    assert call(app, "GET", "/v1/gpus").json() == cli_json("gpus")
    assert call(app, "GET", "/v1/llms").json() == cli_json("llms")
    assert call(app, "GET", "/healthz").json()["status"] == "ok"


def test_inline_config_and_gpu_spec_equal_cli_files(app: Any, tmp_path: Path) -> None:
    config = json.loads((HF_DIR / "Qwen--Qwen3-8B.json").read_text())
    config["_name_or_path"] = "test/inline-qwen3"
    (tmp_path / "config.json").write_text(json.dumps(config))
    gpu = {"name": "Test GPU 48G", "tdp_w": 300, "memory_size_gb": 48, "memory_bandwidth_gb_s": 900,
           "fp16_tflops": 150, "transistors_million": None, "release_year": 2022}
    (tmp_path / "gpu.json").write_text(json.dumps(gpu))
    r = _post(app, "/v1/predict", {"gpu": gpu, "llm": config, "workload": {"qps": 0.3}})
    assert r.status_code == 200, r.text
    assert r.json()["llm"] == "test/inline-qwen3"
    assert r.json() == cli_json("predict", "--gpu", str(tmp_path / "gpu.json"), "--llm", str(tmp_path / "config.json"),
                                "--qps", "0.3")
    served = _post(app, "/v1/rank", {"llm": config, "gpus": [gpu, "A30"]}).json()
    local = cli_json("rank", "--llm", str(tmp_path / "config.json"), "--gpus", f"{tmp_path / 'gpu.json'},A30")
    # the launch line names the model as vLLM would load it: a local directory by its path (issue 32), an
    # inline config by its _name_or_path (the server never sees a path); everything else is the same
    for answer, model in ((served, "test/inline-qwen3"), (local, str(tmp_path))):
        assert answer["candidates"]
        for c in answer["candidates"]:
            assert c["launch_args"][:3] == ["vllm", "serve", model]
            c["launch_args"][2] = None
    assert served == local


def test_batch_is_the_columnar_path_row_by_row(app: Any) -> None:
    import wattgpu

    rows = [{"gpu": "A30", "llm": LLM}, {"gpu": "L40S", "llm": LLM, "workload": {"qps": 1.0}},
            {"gpu": "Nope GPU", "llm": LLM}, {"gpu": "A30", "llm": LLM, "workload": {"max_batch": -3}}]
    r = _post(app, "/v1/predict/batch", {"rows": rows, "usd_per_kwh": 0.2})
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["predicted"], out["failed"]) == (2, 2)
    want = wattgpu.Predictor().predict_many([("A30", LLM, None), ("L40S", LLM, {"kind": "server", "qps": 1.0})])
    for res, p in zip(out["results"][:2], want):
        assert res["prediction"]["power_w"] == pytest.approx(p.power_w, rel=1e-9)
        assert res["prediction"]["itl_s"] == pytest.approx(p.itl_s, rel=1e-9)
        assert res["prediction"]["energy"] == pytest.approx(p.energy(0.2))
    assert out["results"][2]["error"]["kind"] == "unknown_gpu" and out["results"][2]["row"] == 2
    assert out["results"][3]["error"]["field"] == "workload.max_batch"
    big = _post(app, "/v1/predict/batch", {"rows": [{"gpu": "A30", "llm": LLM}] * 10_001})
    assert big.status_code == 422 and big.json()["error"]["field"] == "rows"


# ------------------------------------------------------------------ errors as data
def _err(r: Any, status: int, kind: str, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["kind"] == kind, e
    assert isinstance(e["message"], str) and e["message"] and "\n" not in e["message"]
    if field is not None:
        assert e["field"] == field, e
    return e  # type: ignore[no-any-return]


def test_400_malformed_json_and_non_objects(app: Any) -> None:
    for raw in (b"{bad", b"", b'{"gpu": NaN}', b"\xff\xfe{\x00}\x00", b"[" * 5000, b'{"a": 1e999}'):
        e = _err(call(app, "POST", "/v1/predict", content=raw), 400, "malformed_json", "<body>")
        assert "file" not in e["message"], e["message"]  # API words: a body, never a file
    for raw in (b"[]", b'"A30"', b"3", b"null"):
        _err(call(app, "POST", "/v1/rank", content=raw), 400, "malformed_request", "<body>")


def _cli_part(message: str) -> str:
    return message.split(" (list them")[0]


def test_404_unknown_names_with_the_cli_suggestions_in_api_words(app: Any) -> None:
    e = _err(_post(app, "/v1/predict", {"gpu": "A3O", "llm": LLM}), 404, "unknown_gpu", "gpu")
    assert "NVIDIA A30" in e["matches"]
    assert _cli_part(e["message"]) == _cli_part(cli_error("predict", "--gpu", "A3O", "--llm", LLM))
    assert e["message"].endswith("(list them with GET /v1/gpus, or send the spec as an inline JSON object)")
    e = _err(_post(app, "/v1/rank", {"llm": "meta-llama/Llama-3.1-8B-Instruc"}), 404, "unknown_llm", "llm")
    assert LLM in e["matches"]
    assert _cli_part(e["message"]) == _cli_part(cli_error("rank", "--llm", "meta-llama/Llama-3.1-8B-Instruc"))
    assert "GET /v1/llms" in e["message"] and "config.json" in e["message"]
    e = _err(_post(app, "/v1/predict", {"gpu": "H100", "llm": LLM}), 404, "ambiguous_gpu", "gpu")
    assert len(e["matches"]) > 1
    assert f'(e.g. "gpu": "{e["matches"][0]}")' in e["message"]
    _err(_post(app, "/v1/rank", {"llm": LLM, "gpus": ["A30", "Z9000"]}), 404, "unknown_gpu", "gpus")
    _err(call(app, "GET", "/v2/nothing"), 404, "not_found")


def test_422_invalid_fields_name_the_field(app: Any) -> None:
    e = _err(_post(app, "/v1/predict", {"gpu": "A30", "llm": LLM, "workload": {"qps": -1.0}}), 422, "invalid_field",
             "workload.qps")
    assert e["message"] == cli_error("predict", "--gpu", "A30", "--llm", LLM, "--qps", "-1")
    _err(_post(app, "/v1/predict", {"gpu": "A30", "llm": LLM, "workload": {"qsp": 1}}), 422, "invalid_field",
         "workload.qsp")
    _err(_post(app, "/v1/predict", {"gpu": "A30", "llm": LLM, "colour": 1}), 422, "invalid_field", "colour")
    _err(_post(app, "/v1/predict", {"gpu": "A30"}), 422, "missing_field", "llm")
    _err(_post(app, "/v1/predict", {"gpu": 7, "llm": LLM}), 422, "invalid_field", "gpu")
    _err(_post(app, "/v1/rank", {"llm": LLM, "sort": "cheapest"}), 422, "invalid_field", "sort")
    _err(_post(app, "/v1/rank", {"llm": LLM, "gpus": "A30"}), 422, "invalid_field", "gpus")
    _err(_post(app, "/v1/rank", {"llm": LLM, "sla": {"max_itl_ms": 50, "max_itl_s": 0.05}}), 422, "invalid_field")
    _err(_post(app, "/v1/predict", {"gpu": "A30", "llm": "meta-llama/Llama-3.1-405B-Instruct"}), 422, "does_not_fit")
    _err(_post(app, "/v1/predict", {"gpu": {"name": "x", "tdp_w": -5}, "llm": LLM}), 422, "invalid_field")


def test_path_like_names_are_refused_and_never_opened(app: Any, tmp_path: Path) -> None:
    spec = tmp_path / "gpu.json"  # a valid spec file: reading it would give a 200
    spec.write_text(json.dumps({"name": "File GPU", "tdp_w": 300, "memory_size_gb": 48, "memory_bandwidth_gb_s": 900,
                                "fp16_tflops": 150, "transistors_million": None, "release_year": 2022}))
    (tmp_path / "config.json").write_text((HF_DIR / "Qwen--Qwen3-8B.json").read_text())
    for gpu in (str(spec), f"{tmp_path}/../{tmp_path.name}/gpu.json", "~/gpu.json", "./gpu.json", "C:\\gpu.json"):
        _err(_post(app, "/v1/predict", {"gpu": gpu, "llm": LLM}), 422, "path_refused", "gpu")
    for llm in (str(tmp_path), str(tmp_path / "config.json"), "../config.json", "/etc/passwd"):
        _err(_post(app, "/v1/predict", {"gpu": "A30", "llm": llm}), 422, "path_refused", "llm")
    _err(_post(app, "/v1/rank", {"llm": LLM, "gpus": [str(spec)]}), 422, "path_refused", "gpu")


def test_413_bodies_over_one_mib(app: Any) -> None:
    _err(call(app, "POST", "/v1/predict", content=b" " * ((1 << 20) + 1)), 413, "too_large", "<body>")
    pad = {"gpu": "A30", "llm": LLM, "workload": {"engine": "x" * (1 << 20)}}
    _err(_post(app, "/v1/predict", pad), 413, "too_large")


def test_405_wrong_method(app: Any) -> None:
    _err(call(app, "GET", "/v1/predict"), 405, "method_not_allowed")
    _err(call(app, "DELETE", "/v1/gpus"), 405, "method_not_allowed")


def _blocking_app(**kw: Any) -> tuple[Any, threading.Event, threading.Event]:
    """An app whose predictions wait for ``release`` (``started`` is set when one is computing)."""
    from wattgpu.predictor import default_predictor

    app = create_app(**kw)
    started, release = threading.Event(), threading.Event()
    real = default_predictor()

    class Slow:
        catalog = real.catalog

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def predict(self, *a: Any, **k: Any) -> Any:
            started.set()
            release.wait(10)
            return real.predict(*a, **k)

    app.state.service._predictor = Slow()
    return app, started, release


def test_503_with_retry_after_past_the_in_flight_bound() -> None:
    app, started, release = _blocking_app(max_in_flight=1)

    async def go() -> tuple[Any, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            first = asyncio.create_task(c.post("/v1/predict", json={"gpu": "A30", "llm": LLM}))
            while not started.is_set():
                await asyncio.sleep(0.01)
            second = await c.post("/v1/predict", json={"gpu": "A30", "llm": LLM})
            release.set()
            return await first, second

    first, second = asyncio.run(go())
    assert first.status_code == 200
    _err(second, 503, "busy")
    assert int(second.headers["retry-after"]) >= 1
    assert call(app, "POST", "/v1/predict", {"gpu": "A30", "llm": LLM}).status_code == 200  # the slot is free again


def test_504_when_the_work_outlasts_the_timeout() -> None:
    app, started, release = _blocking_app(timeout_s=0.2, max_in_flight=1)
    r = call(app, "POST", "/v1/predict", {"gpu": "A30", "llm": LLM})
    _err(r, 504, "timeout")
    # the timed-out computation still holds its slot until it finishes: the bound covers the CPU work
    _err(call(app, "POST", "/v1/predict", {"gpu": "A30", "llm": LLM}), 503, "busy")
    release.set()
    for _ in range(100):
        if app.state.service.gate.count == 0:
            break
        threading.Event().wait(0.05)
    assert app.state.service.gate.count == 0


def test_200_concurrent_requests_all_answer(app: Any) -> None:
    bodies = [{"gpu": g, "llm": LLM, "workload": {"qps": q}} for g in ("A30", "L40S", "H100 SXM", "L4")
              for q in (0.1, 0.5, 1.0, 2.0, 4.0)]

    async def go() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await asyncio.gather(*(c.post("/v1/predict", json=bodies[i % len(bodies)]) for i in range(200)))

    out = asyncio.run(go())
    assert [r.status_code for r in out] == [200] * 200
    for i, r in enumerate(out[:len(bodies)]):
        assert r.json() == out[i + len(bodies)].json()  # the same body gets the same answer under load


# ------------------------------------------------------------------ OpenAPI, docs page, static files
def test_openapi_document_is_valid_openapi_3(app: Any) -> None:
    import copy

    import openapi_spec_validator as osv

    validate = getattr(osv, "validate", None) or osv.validate_spec  # validate_spec before 0.7.1
    spec = call(app, "GET", "/openapi.json").json()
    validate(spec)
    broken = copy.deepcopy(spec)
    broken["paths"]["/v1/rank"]["post"]["responses"]["200"] = {"content": {}}  # a response needs a description
    with pytest.raises(Exception):  # the validator has teeth
        validate(broken)
    assert set(spec["paths"]) == {"/healthz", "/v1/gpus", "/v1/llms", "/v1/predict", "/v1/predict/batch",
                                  "/v1/predict/batch.csv", "/v1/rank"}
    docs = call(app, "GET", "/docs")
    assert docs.status_code == 200 and "/v1/predict/batch" in docs.text


def test_page_and_its_files_are_served_from_the_package(app: Any) -> None:
    page = call(app, "GET", "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/static/app.js" in page.text and "http" not in page.text.replace("http-equiv", "")  # no CDN
    for name in ("app.js", "style.css"):
        r = call(app, "GET", f"/static/{name}")
        assert r.status_code == 200 and len(r.content) > 100
        text = r.text.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace name, never fetched
        assert "https://" not in text and "http://" not in text
    _err(call(app, "GET", "/static/../asgi.py"), 404, "not_found")
    total = sum(p.stat().st_size for p in (REPO / "runtime/wattgpu/service/static").iterdir())
    # 25 KB before the one-layout predict form (issue 41: pp, dp, ep, nodes on the page) took ~3 KB
    assert total < 30_000, f"the page's files are {total} bytes; keep them under 30 KB (they ship in the wheel)"


# ------------------------------------------------------------------ the core stays light
def test_core_runtime_and_cli_do_not_import_the_web_stack() -> None:
    code = ("import sys, json, wattgpu, wattgpu.cli, wattgpu.service, wattgpu.answers\n"
            "wattgpu.predict('NVIDIA A30', 'meta-llama/Llama-3.1-8B-Instruct')\n"
            "print(json.dumps([m for m in ('starlette', 'uvicorn', 'httpx', 'anyio') if m in sys.modules]))\n")
    res = run_py(code)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []


def test_serve_without_the_extra_is_one_line() -> None:
    code = ("import sys; sys.modules['uvicorn'] = None\n"
            "from wattgpu.cli import main\n"
            "main(['serve', '--port', '0'])\n")
    res = run_py(code)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == ('error: wattgpu serve needs the serve extra (uvicorn is not installed): '
                                  'pip install "wattgpu[serve]"')


def test_numbers_are_finite_json(app: Any) -> None:
    r = _post(app, "/v1/predict", {"gpu": "A30", "llm": LLM, "workload": {"qps": 1e6}})  # overloaded
    assert r.status_code == 200
    json.loads(r.text, parse_constant=lambda c: pytest.fail(f"non-finite {c} in the body"))
    assert math.isfinite(r.json()["power_w"])
