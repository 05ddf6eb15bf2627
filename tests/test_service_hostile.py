"""The hostile-input corpus (tools/hostile_corpus.py) replayed as HTTP bodies: every answer is a 200 with
finite numbers or a 4xx error record naming a field; never a 500, a traceback or a hang."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from typing import Any, Iterator

import pytest

pytest.importorskip("starlette", reason="the service tests need the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="the service tests need httpx (in the test extra)")

from wattgpu.service import create_app  # noqa: E402
from wattgpu.specs import GPU_RANGES  # noqa: E402
from wattgpu.workload import WORKLOAD_NUMBERS  # noqa: E402

from .helpers import REPO  # noqa: E402
from .service_helpers import call  # noqa: E402

_spec = importlib.util.spec_from_file_location("hostile_corpus", REPO / "tools" / "hostile_corpus.py")
assert _spec is not None and _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("hostile_corpus", corpus)  # its dataclasses look their module up by name
_spec.loader.exec_module(corpus)
LLM = corpus.LLM

HF_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "num_key_value_heads",
           "intermediate_size", "max_position_embeddings")


def _json(value: Any) -> bytes:
    """JSON as a careless client writes it: NaN/Infinity literals and 400-digit integers included."""
    return json.dumps(value, allow_nan=True).encode()


def cases() -> Iterator[tuple[str, str, bytes]]:
    for fname in list(WORKLOAD_NUMBERS) + ["kind", "engine"]:
        for v in corpus.SPECIAL_NUMBERS + corpus.SPECIAL_TEXT:
            base = {"kind": "server", "qps": 1.0} if fname == "qps" else \
                {"kind": "closed_loop", "concurrency": 4} if fname == "concurrency" else {}
            yield f"workload.{fname}={v!r:.20}", "/v1/predict", _json({"gpu": "A30", "llm": LLM,
                                                                      "workload": {**base, fname: v}})
    for fname in GPU_RANGES:
        for v in (math.nan, -1, 0, 1e30, "300", None, True, 10**400, [], {}):
            yield f"gpu.{fname}={v!r:.20}", "/v1/predict", _json({"gpu": {**corpus.GPU_OK, fname: v}, "llm": LLM})
    for key in HF_KEYS:
        for v in (None, -1, 0, 1e30, "x", math.nan, [1], 10**400, {}):
            yield f"config.{key}={v!r:.20}", "/v1/predict", _json({"gpu": "H100 SXM", "llm": {**corpus.HF_OK, key: v}})
    for key, v in (("sla", {"max_itl_ms": -1}), ("sla", {"max_itl_s": math.inf}), ("sla", {"max_ttft_ms": "50"}),
                   ("usd_per_kwh", -1), ("pue", 0.5), ("pue", None), ("dtype", "int3"), ("dtype", 8),
                   ("replicas", 0), ("replicas", "many"), ("max_utilization", 2), ("tp", 3), ("tp", "all"),
                   ("tp", 10**400), ("strict", "yes"), ("sort", None), ("gpus", []), ("gpus", [None]),
                   ("gpus", ["A30"] * 20_000), ("workload", [1]), ("llm", None), ("llm", ["a"])):
        yield f"rank {key}={v!r:.30}", "/v1/rank", _json({"llm": LLM, "gpus": ["A30"], key: v})
    for text in ("", " ", "\x00", "A30\n", "../../etc/passwd", "/dev/zero", "/proc/self/environ", "~", "C:\\x",
                 "file:///etc/passwd", "x" * 100_000, "NVIDIA " * 1000, "H100", "🙂", "%s%s%n"):
        yield f"gpu name {text[:20]!r}", "/v1/predict", _json({"gpu": text, "llm": LLM})
        yield f"llm name {text[:20]!r}", "/v1/rank", _json({"llm": text, "gpus": ["A30"]})
    for raw in (b"", b"{", b"\xff\xfe\x00\x00", "\ufeff{}".encode("utf-16"), b"\x00" * 10, b"[" * 100_000,
                b'{"gpu": "A30", "llm": "' + LLM.encode() + b'", "workload": {"qps": 1' + b"0" * 5000 + b"}}",
                b'{"a":' * 70 + b"1" + b"}" * 70, b'{"gpu": Infinity}', b'{"gpu": "A30", "gpu": "L4"}', b"1e999"):
        yield f"raw {raw[:20]!r}", "/v1/predict", raw
    yield "batch 10,001 rows", "/v1/predict/batch", _json({"rows": [{"gpu": "A30", "llm": LLM}] * 10_001})
    yield "batch bad rows", "/v1/predict/batch", _json({"rows": [1, None, {"gpu": "A30"}, {"gpu": "A30", "llm": LLM,
                                                                                        "workload": {"qps": math.nan}}]})


CASES = list(cases())


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def test_the_corpus_is_large() -> None:
    assert len(CASES) > 300


def test_hostile_bodies_get_data_never_a_500() -> None:
    app = create_app(timeout_s=20)
    bad = []
    for name, path, raw in CASES:
        r = call(app, "POST", path, content=raw, headers={"content-type": "application/json"})
        try:
            body = json.loads(r.text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            bad.append((name, r.status_code, f"not strict JSON: {exc}"))
            continue
        if r.status_code == 200:
            if not _finite(body):
                bad.append((name, 200, "non-finite number"))
            continue
        e = body.get("error") if isinstance(body, dict) else None
        if r.status_code not in (400, 404, 413, 422) or not isinstance(e, dict):
            bad.append((name, r.status_code, r.text[:200]))
            continue
        if not (e.get("kind") and e.get("field") and e.get("message")) or "\n" in e["message"] \
                or "Traceback" in e["message"] or len(e["message"]) > 600:
            bad.append((name, r.status_code, e))
    assert not bad, f"{len(bad)} of {len(CASES)} cases answered badly: {bad[:8]}"


# Issue 40's target: for every field of every endpoint, each of these values; never a 5xx, and the statuses
# the value calls for (a 400-digit integer or an unknown key is a 422 naming the field, a bare 1e400 or NaN
# literal is malformed JSON: 400).
HUGE = 10**400
FIELD_VALUES: list[tuple[str, Any, int | None]] = [  # (label, value, the one status it must get, None: any 200/4xx)
    ("400-digit", HUGE, 422), ("-400-digit", -HUGE, 422), ("NaN", math.nan, 400), ("1e400", math.inf, 400),
    ("negative", -1, None), ("zero", 0, None), ("true", True, None), ("string", "abc", None), ("null", None, None),
    ("array", [1], None), ("object", {"x": 1}, None),
]
ENDPOINT_FIELDS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "/v1/predict": ({"gpu": "A30", "llm": LLM},
                    ["gpu", "llm", "dtype", "usd_per_kwh", "gco2_per_kwh", "pue", "usd_per_gpu_hour",
                     "sla.max_itl_ms", "sla.max_ttft_ms", "sla.max_itl_s", "sla.max_ttft_s"]
                    + [f"workload.{f}" for f in [*WORKLOAD_NUMBERS, "kind", "engine"]]),
    "/v1/rank": ({"llm": LLM, "gpus": ["A30", "L4"]},
                 ["llm", "gpus", "tp", "replicas", "max_utilization", "strict", "sort", "max_model_len", "dtype",
                  "usd_per_kwh", "gco2_per_kwh", "pue", "usd_per_gpu_hour", "sla.max_itl_ms", "sla.max_ttft_ms",
                  "sla.max_itl_s", "sla.max_ttft_s"] + [f"workload.{f}" for f in [*WORKLOAD_NUMBERS, "kind"]]),
    "/v1/predict/batch": ({"rows": [{"gpu": "A30", "llm": LLM}]},
                          ["rows", "usd_per_kwh", "pue", "workload.max_batch", "workload.qps", "rows.0.gpu",
                           "rows.0.llm", "rows.0.workload"]),
}


def _with(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(body))
    node, keys = out, path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return out


def field_cases() -> Iterator[tuple[str, str, bytes, int | None]]:
    for path, (base, fields) in ENDPOINT_FIELDS.items():
        for fname in fields:
            for label, value, status in FIELD_VALUES:
                yield f"{path} {fname}={label}", path, _json(_with(base, fname, value)), status
        for obj in ("", "workload.", "sla."):
            yield f"{path} unknown key in {obj or 'body'}", path, _json(_with(base, obj + "no_such_key", 1)), 422


def test_every_field_of_every_endpoint_gets_the_status_its_value_calls_for(caplog: Any) -> None:
    import logging

    app = create_app(timeout_s=20)
    bad, seen = [], 0
    with caplog.at_level(logging.WARNING):
        for name, path, raw, want in field_cases():
            seen += 1
            r = call(app, "POST", path, content=raw, headers={"content-type": "application/json"})
            body = json.loads(r.text)
            if r.status_code >= 500 or (want is not None and r.status_code != want):
                bad.append((name, r.status_code, r.text[:160]))
            elif r.status_code == 200 and not _finite(body):
                bad.append((name, 200, "non-finite number"))
            elif r.status_code != 200 and _cli_words(body["error"]):
                bad.append((name, r.status_code, f"CLI words: {body['error']['message'][:160]}"))
            elif r.status_code == 422 and "unknown key" not in name:  # the field at fault, named
                field = body["error"]["field"]
                leaf = name.split(" ", 1)[1].split("=", 1)[0].split(".")[-1]
                if leaf not in field:
                    bad.append((name, 422, f"names {field!r}, not {leaf!r}"))
    assert seen > 400
    assert not bad, f"{len(bad)} of {seen} answered badly: {bad[:10]}"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], caplog.text[:2000]


def _cli_words(error: dict[str, Any]) -> bool:
    """An HTTP error that speaks of command-line flags or files (only a refused path may say "file")."""
    import re

    message = error["message"]
    return bool(re.search(r"--[a-z]|`wattgpu", message)) or (
        error["kind"] != "path_refused" and re.search(r"\bfile\b", message) is not None)


def test_rank_with_a_degree_the_heads_rule_out_is_a_422_naming_tp() -> None:
    r = call(create_app(), "POST", "/v1/rank", {"llm": LLM, "tp": 3})
    assert r.status_code == 422, r.text[:300]
    assert r.json()["error"]["field"] in ("tp", "workload.tp")
